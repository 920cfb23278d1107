/* object.c — objects: encoding a bound C struct, decoding into one, the
 * O(1) field access of binary objects, and the framing checks.
 *
 * Body layout (FORMAT.md, "Objects"): the fixed-width fields at offsets the
 * schema fixes, then the variable-width fields in layout order, then a
 * footer with the offsets of var fields 1..n-1 (var field 0 starts right
 * after the fixed area).  The struct encode and decode loops walk the
 * descriptor's flat field table with one switch on the field kind: no
 * indirect call per field. */
#include "marshal_int.h"

/* ---- encoding ---- */

/* Make room for n more bytes at *p (which may move). */
#define ROOM(n)                                                     \
	do {                                                            \
		size_t at_ = (size_t)(p - b->data);                         \
		if (DG_UNLIKELY(b->cap - at_ < (size_t)(n))) {              \
			b->len = at_;                                           \
			if ((e = dg_buf_reserve(b, (n))) != DG_OK)              \
				return e;                                           \
			p = b->data + at_;                                      \
		}                                                           \
	} while (0)

static dg_err raw_check(const dg_registry *reg, const dg_raw *raw, dg_kind kind,
    unsigned depth)
{
	static const uint8_t tag_of[DG_KIND__COUNT] = {
		[DG_LIST] = TAG_LIST, [DG_SET] = TAG_SET,
		[DG_SORTED_SET] = TAG_SORTED_SET, [DG_MAP] = TAG_MAP,
		[DG_SORTED_MAP] = TAG_SORTED_MAP,
	};
	if (raw->len == 0)
		return DG_ERR_INVAL;
	if (kind != DG_ANY && raw->ptr[0] != tag_of[kind] && raw->ptr[0] != TAG_NULL)
		return DG_ERR_TYPE_MISMATCH;
	const uint8_t *q = raw->ptr;
	dg_err e = dgi_skip_tagged(reg, &q, raw->ptr + raw->len, depth, true);
	if (e == DG_OK && q != raw->ptr + raw->len)
		e = DG_ERR_BAD_LENGTH;
	return e;
}

/* A tagged STRING or BYTES value at *pp: a null one (ptr NULL) as NULL,
 * a string checked for UTF-8. */
static dg_err encode_blob(dg_writer *w, uint8_t tag, const dg_bytes *v,
    uint8_t **pp, size_t tail)
{
	dg_buf *b = w->w_buf;
	uint8_t *p = *pp;
	dg_err e;
	if (v->ptr == NULL) {
		ROOM(1 + tail);
		*p++ = TAG_NULL;
	} else {
		if (tag == TAG_STRING && !dgi_utf8_ok(v->ptr, v->len))
			return DG_ERR_UTF8;
		ROOM((size_t)v->len + 11 + tail);
		*p++ = tag;
		p = dgi_put_uvarint_fast(p, v->len);
		dgi_copy(p, v->ptr, v->len);
		p += v->len;
	}
	*pp = p;
	return DG_OK;
}

/* One element of a LIST / SET / MAP field bound as a dg_list (a map's
 * value), at s.  Objects share one scope entry: the first is a DEF (index 0
 * of the container's own scope — a field's value is self-contained,
 * FORMAT.md), the others one-byte REFs; their own object fields are OBJ as
 * everywhere. */
static dg_err encode_elem(dg_writer *w, const struct dgi_field *f,
    const uint8_t *s, bool first, uint8_t **pp, size_t tail, unsigned depth)
{
	dg_buf *b = w->w_buf;
	uint8_t *p = *pp;
	dg_err e;

	switch (f->elem) {
	case DG_OBJECT: {
		const dg_desc *r = f->ref;
		ROOM(9 + tail);
		size_t tag = (size_t)(p - b->data);
		if (!first) {
			*p++ = TAG_REF; /* scope index 0 */
		} else {
			*p++ = r->primary ? TAG_DEF : TAG_DEF_S;
			dgi_st32(p, r->type_id);
			p += 4;
			if (!r->primary) {
				dgi_st32(p, r->schema_id);
				p += 4;
			}
		}
		b->len = (size_t)(p - b->data);
		bool zero;
		if ((e = dgi_obj_encode(w, r, s, depth, &zero)) != DG_OK)
			return e;
		if (zero)
			b->data[tag] = dgi_tag_zero(b->data[tag]);
		p = b->data + b->len;
		break;
	}
	case DG_STRING:
	case DG_BYTES: /* dg_bytes has dg_str's layout */
		if ((e = encode_blob(w, f->elem == DG_STRING ? TAG_STRING : TAG_BYTES,
		    (const dg_bytes *)s, &p, tail)) != DG_OK)
			return e;
		break;
	default: /* scalars: a tagged value of at most 11 bytes */
		ROOM(11 + tail);
		switch (f->elem) {
		case DG_BOOL:
			*p++ = *(const bool *)s ? TAG_TRUE : TAG_FALSE;
			break;
		case DG_I8:
			*p++ = TAG_I8;
			*p++ = *s;
			break;
		case DG_I16:
			*p++ = TAG_I16;
			memcpy(p, s, 2);
			p += 2;
			break;
		case DG_I32:
			*p++ = TAG_I32;
			p = dgi_put_uvarint_fast(p, dgi_zigzag(*(const int32_t *)s));
			break;
		case DG_I64:
			*p++ = TAG_I64;
			p = dgi_put_uvarint_fast(p, dgi_zigzag(*(const int64_t *)s));
			break;
		case DG_FLOAT:
			*p++ = TAG_FLOAT;
			memcpy(p, s, 4);
			p += 4;
			break;
		default: /* DG_DOUBLE */
			*p++ = TAG_DOUBLE;
			memcpy(p, s, 8);
			p += 8;
			break;
		}
		break;
	}
	*pp = p;
	return DG_OK;
}

static inline __attribute__((always_inline)) dg_err encode_flat(dg_buf *b,
    const dg_desc *d, const uint8_t *src, bool *zero);

/* A LIST / SET / MAP field bound as a dg_list: one value written in one
 * pass.  A map's entries are {dg_str key; value} structs (dgi_coll_*). */
static dg_err encode_coll(dg_writer *w, const struct dgi_field *f,
    const dg_list *l, uint8_t **pp, size_t tail, unsigned depth)
{
	dg_buf *b = w->w_buf;
	uint8_t *p = *pp;
	const uint8_t *s = l->ptr;
	dg_err e;

	if (s == NULL) {
		if (l->count != 0)
			return DG_ERR_INVAL;
		*p++ = TAG_NULL;
		*pp = p;
		return DG_OK;
	}
	if (depth + 1 > DG_MAX_DEPTH)
		return DG_ERR_DEPTH;
	/* the field's share of tail covers the tag and the count */
	*p++ = f->kind == DG_LIST ? TAG_LIST : f->kind == DG_SET ? TAG_SET : TAG_MAP;
	p = dgi_put_uvarint_fast(p, l->count);
	size_t stride = dgi_coll_stride(f->kind, f->elem, f->ref);
	size_t voff = dgi_coll_value_off(f->kind, f->elem, f->ref);
	if (f->elem == DG_OBJECT && f->kind != DG_MAP && f->ref->flat &&
	    l->count > 0) {
		/* a list or set of a flat type: the first element defines the
		 * schema, every later one is REF 0 (or REF_Z 0) and its body,
		 * written here without the per-element dispatch */
		if ((e = encode_elem(w, f, s, true, &p, tail, depth + 2)) != DG_OK)
			return e;
		for (uint32_t i = 1; i < l->count; i++) {
			s += stride;
			ROOM(1);
			size_t tag = (size_t)(p - b->data);
			*p++ = TAG_REF;
			b->len = (size_t)(p - b->data);
			bool zero = w->w_zero;
			if ((e = encode_flat(b, f->ref, s, &zero)) != DG_OK)
				return e;
			if (zero)
				b->data[tag] = TAG_REF_Z;
			p = b->data + b->len;
		}
		ROOM(tail);
		*pp = p;
		return DG_OK;
	}
	for (uint32_t i = 0; i < l->count; i++, s += stride) {
		if (f->kind == DG_MAP) {
			/* the key: a string, never null */
			if (((const dg_str *)s)->ptr == NULL)
				return DG_ERR_INVAL;
			if ((e = encode_blob(w, TAG_STRING, (const dg_bytes *)s, &p, tail)) != DG_OK)
				return e;
		}
		if ((e = encode_elem(w, f, s + voff, i == 0, &p, tail, depth + 2)) != DG_OK)
			return e;
	}
	ROOM(tail);
	*pp = p;
	return DG_OK;
}

/* Var fields of the rarer kinds, out of the hot loop: one field at *pp. */
DG_NOINLINE static dg_err encode_rare(dg_writer *w, const dg_desc *d,
    const struct dgi_field *f, const uint8_t *s, uint8_t **pp, size_t tail,
    unsigned depth)
{
	dg_buf *b = w->w_buf;
	uint8_t *p = *pp;
	dg_err e;

	if (dgi_typed_list(f->kind, f->elem))
		return encode_coll(w, f, (const dg_list *)s, pp, tail, depth);
	switch (f->kind) {
	case DG_ENUM: {
		int32_t o = *(const int32_t *)s;
		if (o < 0)
			return DG_ERR_RANGE;
		p = dgi_put_uvarint_fast(p, (uint32_t)o);
		break;
	}
	case DG_TIMESTAMP: {
		const dg_timestamp *t = (const dg_timestamp *)s;
		if (t->ns < 0 || t->ns > 999999)
			return DG_ERR_RANGE;
		p = dgi_put_uvarint_fast(p, dgi_zigzag(t->ms));
		p = dgi_put_uvarint_fast(p, (uint32_t)t->ns);
		break;
	}
	case DG_ARRAY: {
		const dg_array *a = (const dg_array *)s;
		size_t n = (size_t)a->count * dgi_elem_width(f->elem);
		if (a->ptr == NULL) {
			*p++ = 0;
			break;
		}
		ROOM(n + tail);
		p = dgi_put_uvarint_fast(p, (uint64_t)a->count + 1);
		if (f->elem == DG_BOOL) {
			for (uint32_t k = 0; k < a->count; k++)
				p[k] = ((const bool *)a->ptr)[k] ? 1 : 0;
		} else if (n) {
			memcpy(p, a->ptr, n);
		}
		p += n;
		break;
	}
	case DG_OBJECT: {
		/* embedded struct, or the struct pointed to: a self-contained
		 * tagged object */
		if (f->flags & DG_FF_PTR) {
			s = *(const uint8_t *const *)s;
			if (s == NULL) {
				*p++ = TAG_NULL;
				break;
			}
		}
		size_t tag = (size_t)(p - b->data);
		b->len = tag;
		uint32_t save_depth = w->w_depth;
		bool zero = false;
		w->w_depth = 0; /* no scope inside a field */
		e = dgi_w_object_header(w, f->ref);
		if (e == DG_OK)
			e = dgi_obj_encode(w, f->ref, s, depth + 1, &zero);
		w->w_depth = save_depth;
		if (e != DG_OK)
			return e;
		if (zero)
			b->data[tag] = dgi_tag_zero(b->data[tag]);
		p = b->data + b->len;
		ROOM(tail);
		break;
	}
	default: { /* containers and DG_ANY: one encoded value */
		const dg_raw *r = (const dg_raw *)s;
		if (r->ptr == NULL) {
			*p++ = TAG_NULL;
			break;
		}
		if ((e = raw_check(d->reg, r, (dg_kind)f->kind, depth)) != DG_OK)
			return e;
		ROOM(r->len + tail);
		memcpy(p, r->ptr, r->len);
		p += r->len;
		break;
	}
	}
	*pp = p;
	return DG_OK;
}

/* The fixed area, from the struct at src to p: runs of fields whose C
 * layout is the wire's in one copy each (DGI_OP_RUN), bools normalised. */
static inline uint8_t *put_fixed(const dg_desc *d, const uint8_t *src,
    uint8_t *p)
{
	if (d->fixed1) { /* the whole area is one run: one copy */
		dgi_copy(p, src + d->fops[0].c_off, d->fixed_size);
		return p + d->fixed_size;
	}
	for (const struct dgi_op *op = d->fops, *end = op + d->nfops; op < end;
	    op++) {
		const uint8_t *s = src + op->c_off;
		switch (op->width) {
		case 1:
			*p = op->kind == DG_BOOL ? (*(const bool *)s ? 1 : 0) : *s;
			break;
		case 2: memcpy(p, s, 2); break;
		case 4: memcpy(p, s, 4); break;
		case 8: memcpy(p, s, 8); break;
		case 16: memcpy(p, s, 16); break;
		default: dgi_copy(p, s, op->width); break;
		}
		p += op->width;
	}
	return p;
}

/* ---- zero form ---- */

/* A fixed field of width w (1, 2, 4, 8 or 16) copied without a call. */
static inline void copy_fixed(uint8_t *dst, const uint8_t *src, unsigned w)
{
	switch (w) {
	case 1: *dst = *src; break;
	case 2: memcpy(dst, src, 2); break;
	case 4: memcpy(dst, src, 4); break;
	case 8: memcpy(dst, src, 8); break;
	default: memcpy(dst, src, 16); break;
	}
}

/* The n bytes at p, copied in words (a fixed area: usually a few). */
static inline void copy_area(uint8_t *dst, const uint8_t *src, uint32_t n)
{
	uint32_t j = 0;
	for (; j + 8 <= n; j += 8)
		memcpy(dst + j, src + j, 8);
	dgi_copy(dst + j, src + j, n - j);
}

/* The fixed area at body rewritten in zero form, leaving out omit: the
 * mask, then the other fields in layout order.  It is shorter than the
 * plain area, so it stays inside it.  Returns its end. */
DG_NOINLINE static uint8_t *zero_rewrite(const dg_desc *d, uint8_t *body,
    uint64_t omit)
{
	uint8_t plain[64 * 16]; /* the largest fixed area with a zero form */
	copy_area(plain, body, d->fixed_size);
	for (unsigned j = 0; j < d->zbytes; j++)
		body[j] = (uint8_t)(omit >> (8 * j)); /* bit i: fixed field i */
	uint8_t *p = body + d->zbytes;
	for (uint32_t i = 0; i < d->nfixed; i++) {
		const struct dgi_field *f = &d->fields[i];
		if (!(omit >> i & 1)) {
			copy_fixed(p, plain + f->body_off, f->width);
			p += f->width;
		}
	}
	return p;
}

/* The fields of the plain fixed area at body that are all zero bytes
 * (false, 0, +0.0, the nil uuid), and their bytes in *saved.  One 8-byte
 * load per field, masked to its width (d->zmask): the caller has 8 bytes
 * of room past the area. */
static inline uint64_t zero_fields(const dg_desc *d, const uint8_t *body,
    uint32_t *saved)
{
	uint64_t omit = 0;
	uint32_t sum = 0;
	const struct dgi_field *f = d->fields;
	for (uint32_t i = 0, n = d->nfixed; i < n; i++, f++) {
		uint64_t x;
		memcpy(&x, body + f->body_off, 8);
		x &= d->zmask[i];
		if (DG_UNLIKELY(f->width == 16)) {
			uint64_t y;
			memcpy(&y, body + f->body_off + 8, 8);
			x |= y;
		}
		if (x == 0) {
			omit |= UINT64_C(1) << i;
			sum += f->width;
		}
	}
	*saved = sum;
	return omit;
}

/* The writer's rule (FORMAT.md "Zero form"): leave out every all-zero
 * fixed field when that saves more bytes than the mask costs, so equal
 * values give equal bytes.  The builder's path: on a plain area already
 * written. */
uint8_t *dgi_zero_form(const dg_desc *d, uint8_t *body, bool *zero)
{
	*zero = false;
	if (!d->zable)
		return body + d->fixed_size;
	uint32_t saved;
	uint64_t omit = zero_fields(d, body, &saved);
	if (saved <= d->zbytes)
		return body + d->fixed_size;
	*zero = true;
	return zero_rewrite(d, body, omit);
}

/* The struct encoders' path: the same test on the struct's fields, before
 * anything is written — 8-byte loads masked to the field's width where
 * the struct has the bytes (d->zsafe), else loads of the exact width. */
static inline uint64_t zero_fields_src(const dg_desc *d, const uint8_t *src,
    uint32_t *saved)
{
	uint64_t omit = 0;
	uint32_t sum = 0;
	const struct dgi_op *op = d->ops;
	const uint64_t *zm = d->zmask;
	const uint32_t n = d->nfixed;
	if (DG_LIKELY(d->zsafe)) {
		for (uint32_t i = 0; i < n; i++) {
			const uint8_t *s = src + op[i].c_off;
			uint64_t x;
			memcpy(&x, s, 8);
			x &= zm[i];
			if (DG_UNLIKELY(op[i].width == 16)) {
				uint64_t y;
				memcpy(&y, s + 8, 8);
				x |= y;
			}
			if (x == 0) {
				omit |= UINT64_C(1) << i;
				sum += op[i].width;
			}
		}
		*saved = sum;
		return omit;
	}
	for (uint32_t i = 0; i < n; i++) {
		const uint8_t *s = src + op[i].c_off;
		uint64_t x = 0, y = 0;
		switch (op[i].width) {
		case 1: x = *s; break;
		case 2: { uint16_t h; memcpy(&h, s, 2); x = h; break; }
		case 4: { uint32_t h; memcpy(&h, s, 4); x = h; break; }
		case 8: memcpy(&x, s, 8); break;
		default: memcpy(&x, s, 8); memcpy(&y, s + 8, 8); break;
		}
		if ((x | y) == 0) {
			omit |= UINT64_C(1) << i;
			sum += op[i].width;
		}
	}
	*saved = sum;
	return omit;
}

/* The fixed area in zero form from the struct at src: the mask, then the
 * fields not in omit, bools normalised.  Returns its end. */
DG_NOINLINE static uint8_t *put_fixed_zero(const dg_desc *d,
    const uint8_t *src, uint8_t *p, uint64_t omit)
{
	const uint32_t n = d->nfixed;
	for (unsigned j = 0, m = d->zbytes; j < m; j++)
		*p++ = (uint8_t)(omit >> (8 * j)); /* bit i: fixed field i */
	const struct dgi_op *op = d->ops;
	for (uint32_t i = 0; i < n; i++, op++) {
		if (omit >> i & 1)
			continue;
		const uint8_t *s = src + op->c_off;
		if (op->kind == DG_BOOL)
			*p = *(const bool *)s ? 1 : 0;
		else
			copy_fixed(p, s, op->width);
		p += op->width;
	}
	return p;
}

/* The fixed area of the struct at src at body.  *zero on entry: the
 * writer's mode (dg_writer_set_zero_form) — off, the plain form at the
 * cost of this one branch; on, the shorter form.  On return: whether it
 * is in the zero form. */
static inline uint8_t *put_fixed_area(const dg_desc *d, const uint8_t *src,
    uint8_t *body, bool *zero)
{
	if (DG_UNLIKELY(*zero)) {
		if (d->zable) {
			uint32_t saved;
			uint64_t omit = zero_fields_src(d, src, &saved);
			if (saved > d->zbytes)
				return put_fixed_zero(d, src, body, omit);
		}
		*zero = false;
	}
	return put_fixed(d, src, body);
}

/* Room for n more bytes at p, out of line: the buffer may move. */
DG_NOINLINE static uint8_t *grow(dg_buf *b, uint8_t *p, size_t n, dg_err *e)
{
	size_t at = (size_t)(p - b->data);
	b->len = at;
	if ((*e = dg_buf_reserve(b, n)) != DG_OK)
		return NULL;
	return b->data + at;
}

/* A string or bytes field at p (room checked by the caller): uvarint
 * (len + 1) and the bytes, or 00 for null. */
static inline uint8_t *put_blob(uint8_t *p, const dg_bytes *v)
{
	if (v->ptr == NULL) {
		*p = 0;
		return p + 1;
	}
	p = dgi_put_uvarint_fast(p, (uint64_t)v->len + 1);
	dgi_copy(p, v->ptr, v->len);
	return p + v->len;
}

/* The encoder of flat descriptors (d->flat: every var field an I32, I64,
 * STRING or BYTES, so no collection and a 1-byte length slot): nothing in
 * the loop calls out or takes p's address, and one reservation covers all
 * but the blobs' bytes. */
static inline __attribute__((always_inline)) dg_err encode_flat(dg_buf *b,
    const dg_desc *d, const uint8_t *src, bool *zero)
{
	uint32_t offs[DG_MAX_FIELDS];
	size_t start = b->len;
	size_t room = 1 + d->fixed_size + d->tail;
	dg_err e;
	if (DG_UNLIKELY(b->cap - start < room) &&
	    (e = dg_buf_reserve(b, room)) != DG_OK)
		return e;
	/* the descriptor's fields in locals: stores through p may alias it */
	const size_t tail = d->tail;
	const uint32_t k = d->nfoot;
	uint8_t *body = b->data + start + 1;
	uint8_t *p = put_fixed_area(d, src, body, zero);
	const struct dgi_op *op = d->ops + d->nfixed, *end = d->ops + d->nfields;
	for (uint32_t *off = offs; op < end; op++) {
		const uint8_t *s = src + op->c_off;
		*off++ = (uint32_t)(p - body);
		if (op->kind == DG_I64) {
			p = dgi_put_uvarint_fast(p, dgi_zigzag(*(const int64_t *)s));
		} else if (op->kind == DG_I32) {
			p = dgi_put_uvarint_fast(p, dgi_zigzag(*(const int32_t *)s));
		} else {
			const dg_bytes *v = (const dg_bytes *)s; /* dg_str's layout */
			if (v->ptr != NULL) {
				if (op->kind == DG_STRING && !dgi_utf8_ok(v->ptr, v->len))
					return DG_ERR_UTF8;
				if (DG_UNLIKELY((size_t)(b->data + b->cap - p) <
				    (size_t)v->len + tail)) {
					if ((p = grow(b, p, (size_t)v->len + tail, &e)) == NULL)
						return e;
					body = b->data + start + 1;
				}
			}
			p = put_blob(p, v);
		}
	}
	/* the usual small body: 1-byte footer entries and length, and the
	 * footer's room is in the reservation (tail) */
	size_t data_len = (size_t)(p - body);
	if (DG_LIKELY(data_len + k < 0x80 && k <= 4)) {
		switch (k) { /* unrolled: a loop costs more for so few */
		case 4: p[3] = (uint8_t)offs[4]; /* fallthrough */
		case 3: p[2] = (uint8_t)offs[3]; /* fallthrough */
		case 2: p[1] = (uint8_t)offs[2]; /* fallthrough */
		case 1: p[0] = (uint8_t)offs[1]; /* fallthrough */
		default: break;
		}
		body[-1] = (uint8_t)(data_len + k);
		b->len = (size_t)(p + k - b->data);
		return DG_OK;
	}
	b->len = (size_t)(p - b->data);
	return dgi_body_finish(b, start, 1, offs, d->nvar);
}

static dg_err encode_general(dg_writer *w, const dg_desc *d, const void *obj,
    unsigned depth, bool *zero);

dg_err dgi_write_top_flat(dg_writer *w, const dg_desc *d, const void *obj)
{
	dg_buf *b = w->w_buf;
	size_t at = b->len;
	if (DG_LIKELY(b->cap - at >= 9)) {
		uint8_t *p = b->data + at;
		p[0] = d->primary ? TAG_OBJ : TAG_OBJ_S;
		dgi_st32(p + 1, d->type_id);
		dgi_st32(p + 5, d->schema_id); /* overwritten by the body if primary */
		b->len = at + (d->primary ? 5 : 9);
		bool zero = w->w_zero;
		dg_err e = encode_flat(b, d, obj, &zero);
		if (DG_LIKELY(e == DG_OK)) {
			if (zero)
				b->data[at] = dgi_tag_zero(b->data[at]);
			return DG_OK;
		}
		b->len = at;
	}
	return dgi_w_top_failed(w, d, obj);
}

dg_err dgi_obj_encode(dg_writer *w, const dg_desc *d, const void *obj,
    unsigned depth, bool *zero)
{
	if (depth > DG_MAX_DEPTH)
		return DG_ERR_DEPTH;
	*zero = w->w_zero;
	if (d->flat)
		return encode_flat(w->w_buf, d, obj, zero);
	return encode_general(w, d, obj, depth, zero);
}

/* Any bound descriptor: the rarer kinds out of line (encode_rare). */
static dg_err encode_general(dg_writer *w, const dg_desc *d, const void *obj,
    unsigned depth, bool *zero)
{
	uint32_t offs[DG_MAX_FIELDS];
	dg_buf *b = w->w_buf;
	const uint8_t *src = obj;
	dg_err e;

	unsigned slot = d->big ? 2 : 1;   /* the length slot */
	size_t start = b->len;
	/* one reservation for the length slot, the fixed area and every
	 * bounded var field (d->tail); blobs check for their own bytes */
	size_t room = slot + d->fixed_size + d->tail;
	if (DG_UNLIKELY(b->cap - start < room) &&
	    (e = dg_buf_reserve(b, room)) != DG_OK)
		return e;
	uint8_t *body = b->data + start + slot;
	uint8_t *p = put_fixed_area(d, src, body, zero);
	uint32_t *off = offs;
	for (const struct dgi_op *op = d->ops + d->nfixed, *end = d->ops + d->nfields;
	    op < end; op++) {
		const uint8_t *s = src + op->c_off;
		*off++ = (uint32_t)(p - body);
		switch (op->kind) {
		case DG_I64:
			p = dgi_put_uvarint_fast(p, dgi_zigzag(*(const int64_t *)s));
			break;
		case DG_I32:
			p = dgi_put_uvarint_fast(p, dgi_zigzag(*(const int32_t *)s));
			break;
		case DG_STRING:
		case DG_BYTES: {
			const dg_bytes *v = (const dg_bytes *)s; /* same layout as dg_str */
			if (v->ptr == NULL) {
				*p++ = 0;
				break;
			}
			if (op->kind == DG_STRING && !dgi_utf8_ok(v->ptr, v->len))
				return DG_ERR_UTF8;
			if (DG_UNLIKELY((size_t)(b->data + b->cap - p) <
			    (size_t)v->len + d->tail)) {
				if ((p = grow(b, p, (size_t)v->len + d->tail, &e)) == NULL)
					return e;
				body = b->data + start + slot;
			}
			p = dgi_put_uvarint_fast(p, (uint64_t)v->len + 1);
			dgi_copy(p, v->ptr, v->len);
			p += v->len;
			break;
		}
		default: {
			/* only q's address is taken: p stays in a register */
			uint8_t *q = p;
			e = encode_rare(w, d, &d->fields[op->field], s, &q, d->tail, depth);
			if (e != DG_OK)
				return e;
			p = q;
			body = b->data + start + slot;
			break;
		}
		}
	}
	b->len = (size_t)(p - b->data);
	return dgi_body_finish(b, start, slot, offs, d->nvar);
}

/* A length that does not take the slot's bytes: move the body (right by
 * up to 4 bytes, which dgi_body_finish reserved, or left) and write it. */
DG_NOINLINE void dgi_body_resize(dg_buf *b, size_t start, unsigned slot,
    size_t body_len)
{
	size_t lenlen = dgi_uvarint_len(body_len);
	memmove(b->data + start + lenlen, b->data + start + slot, body_len);
	dgi_put_uvarint(b->data + start, body_len);
	b->len = start + lenlen + body_len;
}

/* ---- framing ---- */

dg_err dgi_fixed_area(const dg_desc *s, const uint8_t *body, uint32_t len,
    bool zero, uint32_t *end, uint64_t *omit)
{
	if (!zero) {
		*end = s->fixed_size;
		*omit = 0;
		return DG_OK;
	}
	unsigned m = s->zbytes;
	if (m == 0)
		return DG_ERR_BAD_TAG; /* no fixed field, or more than 64 */
	if (len < m)
		return DG_ERR_BAD_LENGTH;
	uint64_t mask = body[0]; /* little-endian: bit i is fixed field i */
	for (unsigned j = 1; j < m; j++)
		mask |= (uint64_t)body[j] << (8 * j);
	if (s->nfixed < 64 && (mask >> s->nfixed) != 0)
		return DG_ERR_BAD_LENGTH; /* a bit past the last fixed field */
	uint32_t size = m + s->fixed_size;
	for (uint64_t b = mask; b != 0; b &= b - 1)
		size -= s->fields[__builtin_ctzll(b)].width;
	*end = size;
	*omit = mask;
	return DG_OK;
}

/* Where fixed field i (present) sits in a zero-form body leaving out omit. */
static uint32_t fixed_off_zero(const dg_desc *s, uint64_t omit, uint32_t i)
{
	uint32_t off = s->zbytes + s->fields[i].body_off;
	for (uint64_t b = omit & ((UINT64_C(1) << i) - 1); b != 0; b &= b - 1)
		off -= s->fields[__builtin_ctzll(b)].width;
	return off;
}

dg_err dgi_body_check(const dg_bobj *o)
{
	const dg_desc *d = o->desc;
	const uint8_t *body = o->body;
	uint32_t len = o->len, fixed;
	uint64_t omit;
	dg_err e = dgi_fixed_area(d, body, len, o->zero, &fixed, &omit);
	if (e != DG_OK)
		return e;
	uint32_t k = d->nfoot;
	unsigned ow = dgi_off_width(len);
	if ((uint64_t)fixed + (uint64_t)k * ow > len)
		return DG_ERR_BAD_LENGTH;
	uint32_t data_end = len - k * ow;
	if (d->nvar == 0)
		return data_end == fixed ? DG_OK : DG_ERR_BAD_LENGTH;
	/* every var field takes at least one byte: offsets strictly increase */
	uint32_t prev = fixed;
	const uint8_t *foot = body + data_end;
	for (uint32_t j = 0; j < k; j++) {
		uint32_t off = dgi_ld_off(foot + j * ow, ow);
		if (off <= prev || off >= data_end)
			return DG_ERR_BAD_LENGTH;
		prev = off;
	}
	return prev < data_end ? DG_OK : DG_ERR_BAD_LENGTH;
}

/* Span [*start, *end) of var field j of a checked body whose fixed area
 * ends at fixed. */
static inline void var_span(const dg_bobj *o, uint32_t fixed, uint32_t j,
    uint32_t *start, uint32_t *end)
{
	const dg_desc *d = o->desc;
	uint32_t nvar = d->nvar, k = d->nfoot;
	unsigned ow = dgi_off_width(o->len);
	uint32_t data_end = o->len - k * ow;
	const uint8_t *foot = o->body + data_end;
	*start = j == 0 ? fixed : dgi_ld_off(foot + (j - 1) * ow, ow);
	*end = j + 1 < nvar ? dgi_ld_off(foot + j * ow, ow) : data_end;
}

dg_err dgi_obj_header(const dg_registry *reg, uint8_t tag, const uint8_t **pp,
    const uint8_t *end, dg_bobj *o, bool check)
{
	const uint8_t *p = *pp;
	const dg_desc *d;
	uint32_t len;
	dg_err e;
	bool zero = tag == TAG_OBJ_Z || tag == TAG_OBJ_SZ;
	if (zero)
		tag = dgi_tag_plain(tag);
	if (tag != TAG_OBJ && tag != TAG_OBJ_S)
		return DG_ERR_BAD_TAG;
	size_t idlen = tag == TAG_OBJ ? 4 : 8;
	if ((size_t)(end - p) < idlen)
		return DG_ERR_TRUNCATED;
	uint32_t tid = dgi_ld32(p);
	if (tag == TAG_OBJ) {
		d = dg_registry_find(reg, tid);
		if (d == NULL)
			return DG_ERR_UNKNOWN_TYPE;
	} else {
		d = dgi_find_schema(reg, tid, dgi_ld32(p + 4));
		if (d == NULL)
			return dg_registry_find(reg, tid) ? DG_ERR_UNKNOWN_SCHEMA :
			    DG_ERR_UNKNOWN_TYPE;
	}
	if (d->builtin)
		return DG_ERR_TYPE_MISMATCH; /* built-ins are not object types */
	p += idlen;
	if ((e = dgi_get_u32var(&p, end, &len)) != DG_OK)
		return e;
	if (len > (size_t)(end - p))
		return DG_ERR_TRUNCATED;
	o->desc = d;
	o->body = p;
	o->len = len;
	o->zero = zero;
	if (check && (e = dgi_body_check(o)) != DG_OK)
		return e;
	*pp = p + len;
	return DG_OK;
}

/* ---- decoding a var field into a dg_value ---- */

static dg_err get_blob(const uint8_t **pp, const uint8_t *end, uint32_t *n,
    bool *is_null)
{
	uint64_t v;
	dg_err e = dgi_get_uvarint(pp, end, &v);
	if (e != DG_OK)
		return e;
	if (v == 0) {
		*is_null = true;
		*n = 0;
		return DG_OK;
	}
	*is_null = false;
	if (v - 1 > (uint64_t)(end - *pp))
		return DG_ERR_TRUNCATED;
	*n = (uint32_t)(v - 1);
	return DG_OK;
}

static dg_err get_bools(const uint8_t *p, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		if (p[i] > 1)
			return DG_ERR_RANGE;
	return DG_OK;
}

/* Decodes field f (untagged form) at *pp into out. */
static dg_err field_value(const dg_registry *reg, const struct dgi_field *f,
    const uint8_t **pp, const uint8_t *end, dg_value *out, unsigned depth,
    bool deep)
{
	const uint8_t *p = *pp;
	uint64_t v;
	uint32_t n;
	bool null;
	dg_err e = DG_OK;

	out->kind = (dg_kind)f->kind;
	switch (f->kind) {
	case DG_BOOL:
		if (p[0] > 1)
			return DG_ERR_RANGE;
		out->v.b = p[0];
		p++;
		break;
	case DG_I8: out->v.i = (int8_t)p[0]; p++; break;
	case DG_I16: { int16_t x; memcpy(&x, p, 2); out->v.i = x; p += 2; break; }
	case DG_FLOAT: memcpy(&out->v.f, p, 4); p += 4; break;
	case DG_DOUBLE: memcpy(&out->v.d, p, 8); p += 8; break;
	case DG_UUID: memcpy(out->v.uuid.b, p, 16); p += 16; break;
	case DG_I32:
	case DG_I64:
		if ((e = dgi_get_uvarint(&p, end, &v)) != DG_OK)
			return e;
		out->v.i = dgi_unzigzag(v);
		if (f->kind == DG_I32 && (out->v.i < INT32_MIN || out->v.i > INT32_MAX))
			return DG_ERR_RANGE;
		break;
	case DG_ENUM:
		if ((e = dgi_get_uvarint(&p, end, &v)) != DG_OK)
			return e;
		if (v > INT32_MAX)
			return DG_ERR_RANGE;
		out->v.en.type_id = f->ref_type;
		out->v.en.ordinal = (int32_t)v;
		break;
	case DG_TIMESTAMP:
		if ((e = dgi_get_timestamp(&p, end, &out->v.ts)) != DG_OK)
			return e;
		break;
	case DG_STRING:
	case DG_BYTES:
		if ((e = get_blob(&p, end, &n, &null)) != DG_OK)
			return e;
		if (null) {
			out->kind = DG_NULL;
			break;
		}
		if (f->kind == DG_STRING && !dgi_utf8_valid(p, n))
			return DG_ERR_UTF8;
		out->v.bytes.ptr = p;
		out->v.bytes.len = n;
		p += n;
		break;
	case DG_ARRAY: {
		unsigned w = dgi_elem_width(f->elem);
		if ((e = dgi_get_uvarint(&p, end, &v)) != DG_OK)
			return e;
		if (v == 0) {
			out->kind = DG_NULL;
			break;
		}
		if (v - 1 > (uint64_t)(end - p) / w)
			return DG_ERR_COUNT;
		n = (uint32_t)(v - 1);
		if (f->elem == DG_BOOL && (e = get_bools(p, n)) != DG_OK)
			return e;
		out->v.arr.a.ptr = p;
		out->v.arr.a.count = n;
		out->v.arr.elem = (dg_kind)f->elem;
		p += (size_t)n * w;
		break;
	}
	default: /* tagged: containers, objects, any */
		if ((e = dgi_decode_tagged(reg, &p, end, out, depth + 1, deep)) != DG_OK)
			return e;
		if (f->kind == DG_OBJECT && out->kind != DG_OBJECT && out->kind != DG_NULL)
			return DG_ERR_TYPE_MISMATCH;
		if (f->kind != DG_OBJECT && f->kind != DG_ANY &&
		    out->kind != f->kind && out->kind != DG_NULL)
			return DG_ERR_TYPE_MISMATCH;
		break;
	}
	*pp = p;
	return DG_OK;
}

/* Field at layout index i of a checked body, as a value. */
dg_err dgi_body_field(const dg_bobj *o, uint32_t i, dg_value *out,
    unsigned depth, bool deep)
{
	static const uint8_t zeros[16]; /* a fixed field the zero form left out */
	const dg_desc *s = o->desc;
	const struct dgi_field *f = &s->fields[i];
	const uint8_t *p, *end;
	uint32_t fixed = s->fixed_size;
	uint64_t omit = 0;
	if (o->zero) {
		dg_err e = dgi_fixed_area(s, o->body, o->len, true, &fixed, &omit);
		if (e != DG_OK)
			return e;
	}
	if (i < s->nfixed) {
		if (o->zero && (omit >> i & 1)) /* zero form: i < 64 */
			p = zeros;
		else
			p = o->body + (o->zero ? fixed_off_zero(s, omit, i) : f->body_off);
		end = p + f->width;
	} else {
		uint32_t a, z;
		var_span(o, fixed, f->var, &a, &z);
		p = o->body + a;
		end = o->body + z;
	}
	dg_err e = field_value(s->reg, f, &p, end, out, depth, deep);
	if (e == DG_OK && p != end)
		e = DG_ERR_BAD_LENGTH;
	return e;
}

dg_err dgi_body_deep_check(const dg_registry *reg, const dg_bobj *o,
    unsigned depth)
{
	dg_value v;
	(void)reg;
	if (depth > DG_MAX_DEPTH)
		return DG_ERR_DEPTH;
	for (uint32_t i = 0; i < o->desc->nfields; i++) {
		dg_err e = dgi_body_field(o, i, &v, depth, true);
		if (e != DG_OK)
			return e;
	}
	return DG_OK;
}

/* ---- binary objects ---- */

uint32_t dg_bobj_type_id(const dg_bobj *o) { return o->desc->type_id; }

dg_err dg_bobj_open(const dg_registry *reg, const void *data, size_t len,
    dg_bobj *out)
{
	const uint8_t *p = data, *end = p + len;
	if (len == 0)
		return DG_ERR_TRUNCATED;
	uint8_t tag = *p++;
	if (tag != TAG_OBJ && tag != TAG_OBJ_S && tag != TAG_OBJ_Z &&
	    tag != TAG_OBJ_SZ)
		return tag < TAG_OBJ ? DG_ERR_TYPE_MISMATCH : DG_ERR_BAD_TAG;
	dg_err e = dgi_obj_header(reg, tag, &p, end, out, true);
	if (e == DG_OK && p != end)
		e = DG_ERR_BAD_LENGTH;
	return e;
}

DG_NOINLINE static dg_err field_missing(const dg_desc *s, uint32_t id,
    dg_value *out)
{
	/* absent from this schema: null if another schema of the type has it */
	if (!dgi_type_has_field(s->reg, s->type_id, id))
		return DG_ERR_UNKNOWN_FIELD;
	out->kind = DG_NULL;
	return DG_OK;
}

dg_err dg_bobj_get(const dg_bobj *o, uint32_t field_id, dg_value *out)
{
	int i = dgi_field_index(o->desc, field_id);
	if (i < 0)
		return field_missing(o->desc, field_id, out);
	return dgi_body_field(o, (uint32_t)i, out, 1, false);
}

dg_err dg_bobj_get_name(const dg_bobj *o, const char *name, dg_value *out)
{
	return dg_bobj_get(o, dgi_fnv1a(name, strlen(name)), out);
}

dg_err dgi_write_bobj(dg_writer *w, const dg_bobj *o)
{
	dg_err e;
	size_t tag = w->w_buf->len;
	if (dgi_w_object_header(w, o->desc) != DG_OK)
		return w->w_err;
	if (o->zero) /* the body is copied as it is, in its form */
		w->w_buf->data[tag] = dgi_tag_zero(w->w_buf->data[tag]);
	if ((e = dg_buf_reserve(w->w_buf, dgi_uvarint_len(o->len) + (size_t)o->len)) != DG_OK)
		return dgi_w_fail(w, e);
	uint8_t *p = w->w_buf->data + w->w_buf->len;
	p = dgi_put_uvarint(p, o->len);
	memcpy(p, o->body, o->len);
	w->w_buf->len = (size_t)(p + o->len - w->w_buf->data);
	return DG_OK;
}

/* ---- decoding into a bound struct ---- */

static inline dg_err copy_out(dg_arena *arena, const uint8_t **ptr, uint32_t n,
    size_t align, bool nul)
{
	if (arena == NULL || arena->views)
		return DG_OK;
	void *c = dgi_arena_copy(arena, *ptr, n, align, nul);
	if (c == NULL)
		return DG_ERR_NOSPACE;
	*ptr = c;
	return DG_OK;
}

/* Room for n bytes in the arena (no arena: none). */
static inline uint8_t *arena_take(dg_arena *arena, size_t n, size_t align)
{
	if (arena == NULL)
		return NULL;
	return dgi_arena_copy(arena, NULL, n, align, false);
}

/* One element object of a typed list: a DEF, REF or OBJ in the list's own
 * scope table sch (*nsch entries), or null. */
static dg_err list_object(const dg_registry *reg, const struct dgi_field *f,
    const uint8_t **pp, const uint8_t *end, const dg_desc **sch,
    uint32_t *nsch, uint8_t *dst, dg_arena *arena, unsigned depth)
{
	const uint8_t *p = *pp;
	dg_bobj o;
	dg_err e;

	if (p >= end)
		return DG_ERR_TRUNCATED;
	uint8_t tag = *p++;
	o.zero = dgi_tag_is_zero(tag);
	if (tag >= TAG_REF) {
		uint32_t idx = tag & 0x3F;
		if (idx >= *nsch)
			return DG_ERR_UNKNOWN_SCHEMA;
		o.desc = sch[idx];
		if ((e = dgi_get_u32var(&p, end, &o.len)) != DG_OK)
			return e;
		if (o.len > (size_t)(end - p))
			return DG_ERR_TRUNCATED;
		o.body = p;
		p += o.len;
	} else if (tag >= TAG_OBJ && tag <= TAG__LAST) {
		uint8_t ptag = dgi_tag_plain(tag);
		bool def = ptag >= TAG_DEF;
		uint8_t otag = def ? (uint8_t)(ptag - (TAG_DEF - TAG_OBJ)) : ptag;
		if (def && *nsch >= DG_SCOPE_MAX)
			return DG_ERR_LIMIT;
		if (otag == TAG_OBJ && f->ref->primary && end - p >= 4 &&
		    dgi_ld32(p) == f->ref->type_id) {
			/* the schema's own element type: no registry lookup */
			o.desc = f->ref;
			p += 4;
			if ((e = dgi_get_u32var(&p, end, &o.len)) != DG_OK)
				return e;
			if (o.len > (size_t)(end - p))
				return DG_ERR_TRUNCATED;
			o.body = p;
			p += o.len;
		} else if ((e = dgi_obj_header(reg, o.zero ? dgi_tag_zero(otag) : otag,
		    &p, end, &o, false)) != DG_OK) {
			return e;
		}
		if (def)
			sch[(*nsch)++] = o.desc;
	} else if (tag == TAG_NULL) {
		memset(dst, 0, f->ref->struct_size);
		*pp = p;
		return DG_OK;
	} else {
		return tag > TAG__LAST ? DG_ERR_BAD_TAG : DG_ERR_TYPE_MISMATCH;
	}
	if (o.desc->type_id != f->ref->type_id)
		return DG_ERR_TYPE_MISMATCH;
	if ((e = dgi_obj_decode(reg, o.desc, f->ref, o.body, o.len, o.zero, dst,
	    arena, depth)) != DG_OK)
		return e;
	*pp = p;
	return DG_OK;
}

/* One string or bytes element of a typed list, or null. */
static dg_err list_blob(unsigned elem, const uint8_t **pp, const uint8_t *end,
    dg_bytes *v, dg_arena *arena)
{
	const uint8_t *p = *pp;
	uint8_t want = elem == DG_STRING ? TAG_STRING : TAG_BYTES;
	uint32_t len;
	dg_err e;
	if (p >= end)
		return DG_ERR_TRUNCATED;
	uint8_t tag = *p++;
	if (tag == TAG_NULL) {
		v->ptr = NULL;
		v->len = 0;
		*pp = p;
		return DG_OK;
	}
	if (tag != want)
		return tag > TAG__LAST && tag < TAG_REF ? DG_ERR_BAD_TAG :
		    DG_ERR_TYPE_MISMATCH;
	if ((e = dgi_get_u32var(&p, end, &len)) != DG_OK)
		return e;
	if (len > (size_t)(end - p))
		return DG_ERR_TRUNCATED;
	if (want == TAG_STRING && !dgi_utf8_ok(p, len))
		return DG_ERR_UTF8;
	v->ptr = p;
	v->len = len;
	*pp = p + len;
	return copy_out(arena, &v->ptr, len, 1, want == TAG_STRING);
}

/* One scalar element of a typed list into its native C slot. */
static dg_err list_scalar(unsigned elem, const uint8_t **pp, const uint8_t *end,
    uint8_t *dst)
{
	const uint8_t *p = *pp;
	dg_value v;
	uint64_t u;
	dg_err e;
	if (p >= end)
		return DG_ERR_TRUNCATED;
	uint8_t tag = *p++;
	switch (elem) {
	case DG_BOOL:
		if (tag != TAG_FALSE && tag != TAG_TRUE)
			return DG_ERR_TYPE_MISMATCH;
		*(bool *)dst = tag == TAG_TRUE;
		break;
	case DG_FLOAT:
		if (tag != TAG_FLOAT)
			return DG_ERR_TYPE_MISMATCH;
		if (end - p < 4)
			return DG_ERR_TRUNCATED;
		memcpy(dst, p, 4);
		p += 4;
		break;
	case DG_DOUBLE:
		if (tag != TAG_DOUBLE)
			return DG_ERR_TYPE_MISMATCH;
		if (end - p < 8)
			return DG_ERR_TRUNCATED;
		memcpy(dst, p, 8);
		p += 8;
		break;
	default: { /* integers: any integer tag that fits the element */
		int64_t x;
		if (tag == TAG_I8) {
			if (p >= end)
				return DG_ERR_TRUNCATED;
			x = (int8_t)*p++;
		} else if (tag == TAG_I16) {
			int16_t h;
			if (end - p < 2)
				return DG_ERR_TRUNCATED;
			memcpy(&h, p, 2);
			p += 2;
			x = h;
		} else if (tag == TAG_I32 || tag == TAG_I64) {
			if ((e = dgi_get_uvarint(&p, end, &u)) != DG_OK)
				return e;
			x = dgi_unzigzag(u);
			if (tag == TAG_I32 && (x < INT32_MIN || x > INT32_MAX))
				return DG_ERR_RANGE;
		} else {
			return tag > TAG__LAST && tag < TAG_REF ? DG_ERR_BAD_TAG :
			    DG_ERR_TYPE_MISMATCH;
		}
		v.v.i = x;
		switch (elem) {
		case DG_I8:
			if (x < INT8_MIN || x > INT8_MAX)
				return DG_ERR_RANGE;
			*(int8_t *)dst = (int8_t)x;
			break;
		case DG_I16:
			if (x < INT16_MIN || x > INT16_MAX)
				return DG_ERR_RANGE;
			*(int16_t *)dst = (int16_t)x;
			break;
		case DG_I32:
			if (x < INT32_MIN || x > INT32_MAX)
				return DG_ERR_RANGE;
			*(int32_t *)dst = (int32_t)x;
			break;
		default:
			*(int64_t *)dst = v.v.i;
			break;
		}
		break;
	}
	}
	*pp = p;
	return DG_OK;
}

static dg_err decode_flat(const dg_desc *d, const uint8_t *body,
    uint32_t len, bool zero, uint8_t *out, dg_arena *arena);

/* A LIST / SET / MAP field into its dg_list binding, in one pass: the
 * elements (map entries) go to the arena (DG_ERR_NOSPACE without one, or
 * when it is full). */
static dg_err decode_coll(const dg_registry *reg, const struct dgi_field *f,
    const uint8_t **pp, const uint8_t *end, dg_list *out, dg_arena *arena,
    unsigned depth)
{
	const dg_desc *sch[DG_SCOPE_MAX];
	uint32_t nsch = 0;
	const uint8_t *p = *pp;
	uint32_t n;
	dg_err e;

	if (p >= end)
		return DG_ERR_TRUNCATED;
	uint8_t tag = *p++;
	if (tag == TAG_NULL) {
		out->ptr = NULL;
		out->count = 0;
		*pp = p;
		return DG_OK;
	}
	uint8_t want = f->kind == DG_LIST ? TAG_LIST : f->kind == DG_SET ? TAG_SET :
	    TAG_MAP;
	if (tag != want)
		return tag > TAG__LAST && tag < TAG_REF ? DG_ERR_BAD_TAG :
		    DG_ERR_TYPE_MISMATCH;
	if (depth + 1 > DG_MAX_DEPTH)
		return DG_ERR_DEPTH;
	if ((e = dgi_get_u32var(&p, end, &n)) != DG_OK)
		return e;
	/* every element takes a byte at least, every entry two */
	if ((uint64_t)n * (want == TAG_MAP ? 2 : 1) > (size_t)(end - p))
		return DG_ERR_COUNT;
	size_t stride = dgi_coll_stride(f->kind, f->elem, f->ref);
	size_t voff = dgi_coll_value_off(f->kind, f->elem, f->ref);
	uint8_t *dst = arena_take(arena, (size_t)n * stride,
	    dgi_coll_align(f->kind, f->elem, f->ref));
	if (dst == NULL)
		return DG_ERR_NOSPACE;
	out->ptr = dst;
	out->count = n;
	for (uint32_t i = 0; i < n; i++, dst += stride) {
		if (want == TAG_MAP) {
			/* the key: a string, never null */
			if (p < end && *p == TAG_NULL)
				return DG_ERR_TYPE_MISMATCH;
			if ((e = list_blob(DG_STRING, &p, end, (dg_bytes *)dst, arena)) != DG_OK)
				return e;
		}
		uint8_t *v = dst + voff;
		switch (f->elem) {
		case DG_OBJECT:
			if (nsch > 0 && sch[0] == f->ref && f->ref->flat && end - p >= 2 &&
			    (p[0] & ~0x40) == TAG_REF && p[1] < 0x80 &&
			    p[1] <= (size_t)(end - p - 2) && depth + 2 <= DG_MAX_DEPTH) {
				/* REF 0 (or REF_Z 0) of the list's own flat type with
				 * a 1-byte length: straight to its decoder */
				uint32_t len = p[1];
				e = decode_flat(f->ref, p + 2, len, p[0] >= TAG_REF_Z, v, arena);
				p += 2 + len;
				break;
			}
			e = list_object(reg, f, &p, end, sch, &nsch, v, arena, depth + 2);
			break;
		case DG_STRING:
		case DG_BYTES:
			e = list_blob(f->elem, &p, end, (dg_bytes *)v, arena);
			break;
		default:
			e = list_scalar(f->elem, &p, end, v);
			break;
		}
		if (e != DG_OK)
			return e;
	}
	*pp = p;
	return DG_OK;
}

/* Store a decoded value into the C binding of field f (kinds agree). */
static dg_err store_value(const dg_registry *reg, const struct dgi_field *f,
    const dg_value *v, const uint8_t *span, uint32_t span_len, uint8_t *dst,
    dg_arena *arena, unsigned depth)
{
	size_t bs = dgi_binding_size((dg_kind)f->kind, (dg_kind)f->elem, f->flags,
	    f->ref);
	if (v->kind == DG_NULL) {
		memset(dst, 0, bs);
		return DG_OK;
	}
	if (dgi_typed_list(f->kind, f->elem)) {
		const uint8_t *p = span;
		dg_err e = decode_coll(reg, f, &p, span + span_len, (dg_list *)dst,
		    arena, depth);
		return e == DG_OK && p != span + span_len ? DG_ERR_BAD_LENGTH : e;
	}
	switch (f->kind) {
	case DG_BOOL: *(bool *)dst = v->v.b; return DG_OK;
	case DG_I8: *(int8_t *)dst = (int8_t)v->v.i; return DG_OK;
	case DG_I16: *(int16_t *)dst = (int16_t)v->v.i; return DG_OK;
	case DG_I32: *(int32_t *)dst = (int32_t)v->v.i; return DG_OK;
	case DG_I64: *(int64_t *)dst = v->v.i; return DG_OK;
	case DG_FLOAT: *(float *)dst = v->v.f; return DG_OK;
	case DG_DOUBLE: *(double *)dst = v->v.d; return DG_OK;
	case DG_UUID: memcpy(dst, v->v.uuid.b, 16); return DG_OK;
	case DG_TIMESTAMP: *(dg_timestamp *)dst = v->v.ts; return DG_OK;
	case DG_ENUM: *(int32_t *)dst = v->v.en.ordinal; return DG_OK;
	case DG_STRING:
	case DG_BYTES: {
		dg_bytes *b = (dg_bytes *)dst;
		b->ptr = v->v.bytes.ptr;
		b->len = v->v.bytes.len;
		return copy_out(arena, &b->ptr, b->len, 1, f->kind == DG_STRING);
	}
	case DG_ARRAY: {
		dg_array *a = (dg_array *)dst;
		const uint8_t *q = v->v.arr.a.ptr;
		unsigned w = dgi_elem_width((dg_kind)f->elem);
		a->count = v->v.arr.a.count;
		dg_err e = copy_out(arena, &q, (uint32_t)((size_t)a->count * w), w, false);
		a->ptr = q;
		return e;
	}
	case DG_OBJECT: {
		const dg_bobj *o = &v->v.obj;
		if (o->desc->type_id != f->ref->type_id)
			return DG_ERR_TYPE_MISMATCH;
		if (f->flags & DG_FF_PTR) {
			uint8_t *to = arena_take(arena, f->ref->struct_size, f->ref->align);
			if (to == NULL)
				return DG_ERR_NOSPACE;
			*(void **)dst = to;
			dst = to;
		}
		return dgi_obj_decode(reg, o->desc, f->ref, o->body, o->len, o->zero, dst,
		    arena, depth + 1);
	}
	default: { /* containers and DG_ANY: the field's encoded value */
		dg_raw *r = (dg_raw *)dst;
		r->ptr = span;
		r->len = span_len;
		return copy_out(arena, &r->ptr, r->len, 1, false);
	}
	}
}

/* Slow path: the object was written with another schema of the type. */
DG_NOINLINE static dg_err decode_other_schema(const dg_registry *reg,
    const dg_bobj *o, const dg_desc *d, uint8_t *out, dg_arena *arena,
    unsigned depth)
{
	const dg_desc *s = o->desc;
	uint32_t fixed;
	uint64_t omit;
	dg_err e = dgi_body_check(o);
	if (e != DG_OK)
		return e;
	if ((e = dgi_fixed_area(s, o->body, o->len, o->zero, &fixed, &omit)) != DG_OK)
		return e;
	for (uint32_t i = 0; i < d->nfields; i++) {
		const struct dgi_field *f = &d->fields[i];
		int at = dgi_field_index(s, f->id);
		const uint8_t *span = NULL;
		uint32_t a = 0, z = 0;
		dg_value v;
		if (at < 0) {
			v.kind = DG_NULL;
		} else {
			if ((e = dgi_body_field(o, (uint32_t)at, &v, depth, false)) != DG_OK)
				return e;
			if ((uint32_t)at >= s->nfixed) {
				var_span(o, fixed, s->fields[at].var, &a, &z);
				span = o->body + a;
			}
		}
		if (at >= 0 && s->fields[at].kind != f->kind)
			return DG_ERR_TYPE_MISMATCH;
		e = store_value(reg, f, &v, span, z - a, out + f->c_off, arena, depth);
		if (e != DG_OK)
			return e;
	}
	return DG_OK;
}

/* An integer field whose span dgi_uvarint_span did not take: the general
 * decode, for its value (9 or 10 bytes, or near the end of the input) or
 * its precise error; the span must hold the varint exactly. */
DG_NOINLINE static dg_err int_slow(const uint8_t *p, const uint8_t *end,
    const uint8_t *lim, uint64_t *v)
{
	dg_err e = dgi_get_uvarint_lim(&p, end, lim, v);
	if (e == DG_OK && p != end)
		e = DG_ERR_BAD_LENGTH;
	return e;
}

/* The integer filling [p, end): the span decode, else int_slow (whose
 * out-parameter is a local of its own, so v stays in a register). */
static inline dg_err get_span_int(const uint8_t *p, const uint8_t *end,
    const uint8_t *lim, uint64_t *v)
{
	if (DG_LIKELY(dgi_uvarint_span(p, (size_t)(end - p), lim, v)))
		return DG_OK;
	uint64_t t = 0;
	dg_err e = int_slow(p, end, lim, &t);
	*v = t;
	return e;
}

/* Var fields of the rarer kinds, out of the hot loop. */
DG_NOINLINE static dg_err decode_rare(const dg_registry *reg,
    const struct dgi_field *f, const uint8_t **pp, const uint8_t *end,
    uint8_t *dst, dg_arena *arena, unsigned depth)
{
	const uint8_t *span = *pp;
	dg_value val;
	if (dgi_typed_list(f->kind, f->elem))
		return decode_coll(reg, f, pp, end, (dg_list *)dst, arena, depth);
	if (f->kind == DG_OBJECT && f->ref->primary && end - span >= 6 &&
	    (span[0] == TAG_OBJ || span[0] == TAG_OBJ_Z) &&
	    dgi_ld32(span + 1) == f->ref->type_id) {
		/* an object of the field's own type in its primary schema: no
		 * registry lookup and no separate footer check (the decode
		 * checks every offset as it goes) */
		const uint8_t *p = span + 5;
		uint32_t len;
		dg_err e = dgi_get_u32var(&p, end, &len);
		if (e != DG_OK)
			return e;
		if (len > (size_t)(end - p))
			return DG_ERR_TRUNCATED;
		if (f->flags & DG_FF_PTR) {
			uint8_t *to = arena_take(arena, f->ref->struct_size, f->ref->align);
			if (to == NULL)
				return DG_ERR_NOSPACE;
			*(void **)dst = to;
			dst = to;
		}
		if ((e = dgi_obj_decode(reg, f->ref, f->ref, p, len,
		    span[0] == TAG_OBJ_Z, dst, arena, depth + 1)) != DG_OK)
			return e;
		*pp = p + len;
		return DG_OK;
	}
	dg_err e = field_value(reg, f, pp, end, &val, depth, false);
	if (e != DG_OK)
		return e;
	return store_value(reg, f, &val, span, (uint32_t)(*pp - span), dst, arena,
	    depth);
}

/* The fixed area at p into the struct at out, run by run; bools checked. */
static inline dg_err get_fixed(const dg_desc *d, const uint8_t *p,
    uint8_t *out)
{
	if (d->fixed1) { /* the whole area is one run: one copy */
		dgi_copy(out + d->fops[0].c_off, p, d->fixed_size);
		return DG_OK;
	}
	for (const struct dgi_op *op = d->fops, *end = op + d->nfops; op < end;
	    op++) {
		uint8_t *dst = out + op->c_off;
		switch (op->width) {
		case 1:
			if (op->kind == DG_BOOL) {
				if (*p > 1)
					return DG_ERR_RANGE;
				*(bool *)dst = *p;
			} else {
				*dst = *p;
			}
			break;
		case 2: memcpy(dst, p, 2); break;
		case 4: memcpy(dst, p, 4); break;
		case 8: memcpy(dst, p, 8); break;
		case 16: memcpy(dst, p, 16); break;
		default: dgi_copy(dst, p, op->width); break;
		}
		p += op->width;
	}
	return DG_OK;
}

/* A zero-form fixed area at body (omit: the fields it leaves out, which
 * read as zero: false, 0, +0.0, the nil uuid), field by field. */
DG_NOINLINE static dg_err get_fixed_zero(const dg_desc *d,
    const uint8_t *body, uint8_t *out, uint64_t omit)
{
	static const uint8_t zeros[16];
	const uint8_t *p = body + d->zbytes;
	const struct dgi_op *op = d->ops;
	const uint32_t n = d->nfixed;
	for (uint32_t i = 0; i < n; i++, op++) {
		uint8_t *dst = out + op->c_off;
		if (omit >> i & 1) {
			copy_fixed(dst, zeros, op->width); /* false is 0 */
			continue;
		}
		if (op->kind == DG_BOOL) {
			if (*p > 1)
				return DG_ERR_RANGE;
			*(bool *)dst = *p;
		} else {
			copy_fixed(dst, p, op->width);
		}
		p += op->width;
	}
	return DG_OK;
}

/* The fixed area of a body of d's own schema into out: where it ends in
 * *fixed (after checking that it and a footer of k entries of ow bytes
 * fit in len). */
static inline dg_err get_fixed_area(const dg_desc *d, const uint8_t *body,
    uint32_t len, bool zero, uint32_t k, unsigned ow, uint8_t *out,
    uint32_t *fixed)
{
	uint64_t omit;
	dg_err e;
	if (DG_LIKELY(!zero)) {
		*fixed = d->fixed_size;
		if ((uint64_t)*fixed + (uint64_t)k * ow > len)
			return DG_ERR_BAD_LENGTH;
		return get_fixed(d, body, out);
	}
	if ((e = dgi_fixed_area(d, body, len, true, fixed, &omit)) != DG_OK)
		return e;
	if ((uint64_t)*fixed + (uint64_t)k * ow > len)
		return DG_ERR_BAD_LENGTH;
	return get_fixed_zero(d, body, out, omit);
}

/* A string or bytes field whose span [p, p + n) the footer gave: the usual
 * case (a 1-byte length prefix, so prefix = n) inline, the rest through
 * get_blob for its value or precise error.  Null is ptr NULL. */
static inline dg_err get_span_blob(const uint8_t *p, uint32_t n, bool str,
    dg_bytes *out, dg_arena *arena)
{
	if (DG_LIKELY(p[0] == n && n < 0x80)) {
		out->ptr = p + 1;
		out->len = n - 1;
	} else {
		const uint8_t *q = p;
		uint32_t len;
		bool null;
		dg_err e = get_blob(&q, p + n, &len, &null);
		if (e != DG_OK)
			return e;
		if (q + (null ? 0 : len) != p + n)
			return DG_ERR_BAD_LENGTH;
		out->ptr = null ? NULL : q;
		out->len = len;
		if (null)
			return DG_OK;
	}
	if (str && !dgi_utf8_ok(out->ptr, out->len))
		return DG_ERR_UTF8;
	if (arena != NULL && !arena->views) {
		void *c = dgi_arena_copy(arena, out->ptr, out->len, 1, str);
		if (c == NULL)
			return DG_ERR_NOSPACE;
		out->ptr = c;
	}
	return DG_OK;
}

/* The decoder of a flat descriptor's own schema with 1-byte footer entries
 * (body_len <= 255; d->flat: no rare kind, so no call in the loop, and the
 * varints and blobs are decoded knowing their spans).  The same checks and
 * errors as the general loop of dgi_obj_decode. */
/* One var field of a flat descriptor, its span [p, p + n) (n >= 1). */
static inline __attribute__((always_inline)) dg_err flat_field(
    const struct dgi_op *op, const uint8_t *p, uint32_t n,
    const uint8_t *lim, uint8_t *out, dg_arena *arena)
{
	uint8_t *dst = out + op->c_off;
	uint64_t v;
	dg_err e;
	switch (op->kind) {
	case DG_I64:
		if ((e = get_span_int(p, p + n, lim, &v)) != DG_OK)
			return e;
		*(int64_t *)dst = dgi_unzigzag(v);
		return DG_OK;
	case DG_I32: {
		if ((e = get_span_int(p, p + n, lim, &v)) != DG_OK)
			return e;
		int64_t x = dgi_unzigzag(v);
		if (x < INT32_MIN || x > INT32_MAX)
			return DG_ERR_RANGE;
		*(int32_t *)dst = (int32_t)x;
		return DG_OK;
	}
	default: /* DG_STRING, DG_BYTES */
		return get_span_blob(p, n, op->kind == DG_STRING, (dg_bytes *)dst,
		    arena);
	}
}

static dg_err decode_flat(const dg_desc *d, const uint8_t *body,
    uint32_t len, bool zero, uint8_t *out, dg_arena *arena)
{
	/* the descriptor's fields in locals: stores into out may alias it */
	const uint32_t k = d->nfoot;
	const struct dgi_op *op = d->ops + d->nfixed, *oend = d->ops + d->nfields;
	uint32_t at;
	dg_err e;

	if ((e = get_fixed_area(d, body, len, zero, k, 1, out, &at)) != DG_OK)
		return e;
	uint32_t last = len - k;            /* the footer starts here */
	const uint8_t *foot = body + last;
	const uint8_t *lim = body + len;    /* loads may reach into the footer */
	if (op == oend)
		return at == last ? DG_OK : DG_ERR_BAD_LENGTH;
	/* every var field but the last ends where the footer says, leaving a
	 * byte at least for each after it; the last ends at the footer */
	for (; op + 1 < oend; op++) {
		uint32_t next = *foot++;
		if (next <= at || next >= last)
			return DG_ERR_BAD_LENGTH;
		if ((e = flat_field(op, body + at, next - at, lim, out, arena)) != DG_OK)
			return e;
		at = next;
	}
	if (last <= at)
		return DG_ERR_BAD_LENGTH;
	return flat_field(op, body + at, last - at, lim, out, arena);
}

dg_err dgi_obj_decode(const dg_registry *reg, const dg_desc *s,
    const dg_desc *d, const uint8_t *body, uint32_t len, bool zero,
    void *obj, dg_arena *arena, unsigned depth)
{
	if (DG_LIKELY(d->flat && len <= 0xFF && s->schema_id == d->schema_id))
		return depth > DG_MAX_DEPTH ? DG_ERR_DEPTH :
		    decode_flat(d, body, len, zero, obj, arena);
	uint8_t *out = obj;
	if (depth > DG_MAX_DEPTH)
		return DG_ERR_DEPTH;
	if (DG_UNLIKELY(s->schema_id != d->schema_id)) {
		dg_bobj o = { s, body, len, zero };
		return decode_other_schema(reg, &o, d, out, arena, depth);
	}

	/* Same schema: walk the layout once, checking each var field against
	 * the footer so sequential and O(1) readers can never disagree (this
	 * also validates the footer: dg_read_object skips dgi_body_check). */
	uint32_t k = d->nfoot, at;
	unsigned ow = dgi_off_width(len);
	const uint8_t *p;
	uint64_t v;
	uint32_t n;
	bool null;
	dg_err e;

	if ((e = get_fixed_area(d, body, len, zero, k, ow, out, &at)) != DG_OK)
		return e;
	const uint8_t *data_end = body + len - k * ow; /* the footer starts here */
	const uint8_t *lim = body + len;               /* loads may reach into it */
	p = body + at;
	/* Each var field is decoded from the span the footer gives it, not
	 * from where the previous one ended: the fields are independent of
	 * each other (no serial chain of lengths), and every field must end
	 * exactly where the next begins.  An integer's span is its varint's
	 * length, so it is decoded knowing where it ends. */
	const uint8_t *foot = data_end;
	uint32_t last = (uint32_t)(data_end - body);
	for (const struct dgi_op *op = d->ops + d->nfixed, *oend = d->ops + d->nfields;
	    op < oend; op++) {
		uint8_t *dst = out + op->c_off;
		uint32_t next = last;
		if (op + 1 < oend) {
			next = ow == 1 ? *foot : dgi_ld_off(foot, ow);
			foot += ow;
			if (next <= at || next >= last)
				return DG_ERR_BAD_LENGTH;
		}
		p = body + at;
		const uint8_t *end = body + next;
		at = next;
		switch (op->kind) {
		case DG_I64:
			if ((e = get_span_int(p, end, lim, &v)) != DG_OK)
				return e;
			*(int64_t *)dst = dgi_unzigzag(v);
			p = end;
			break;
		case DG_I32: {
			if ((e = get_span_int(p, end, lim, &v)) != DG_OK)
				return e;
			int64_t x = dgi_unzigzag(v);
			if (x < INT32_MIN || x > INT32_MAX)
				return DG_ERR_RANGE;
			*(int32_t *)dst = (int32_t)x;
			p = end;
			break;
		}
		case DG_STRING:
		case DG_BYTES: {
			dg_bytes *b = (dg_bytes *)dst;
			if ((e = get_blob(&p, end, &n, &null)) != DG_OK)
				return e;
			if (null) {
				b->ptr = NULL;
				b->len = 0;
				break;
			}
			if (op->kind == DG_STRING && !dgi_utf8_ok(p, n))
				return DG_ERR_UTF8;
			b->ptr = p;
			b->len = n;
			p += n;
			if (arena != NULL &&
			    (e = copy_out(arena, &b->ptr, n, 1, op->kind == DG_STRING)) != DG_OK)
				return e;
			break;
		}
		default: {
			/* only q's address is taken: p stays in a register */
			const uint8_t *q = p;
			e = decode_rare(reg, &d->fields[op->field], &q, end, dst, arena, depth);
			if (e != DG_OK)
				return e;
			p = q;
			break;
		}
		}
		if (p != end)
			return DG_ERR_BAD_LENGTH;
	}
	if (d->nvar == 0 && p != data_end)
		return DG_ERR_BAD_LENGTH;
	return DG_OK;
}

/* dg_decode_object but for its fast path: any object, through a reader. */
DG_NOINLINE static dg_err decode_object_slow(const dg_registry *reg,
    const dg_desc *d, const void *data, size_t len, void *out,
    dg_arena *arena)
{
	const uint8_t *p = data, *end = p + len;
	/* an OBJ of d's type in its primary schema needs no reader and no
	 * registry lookup */
	if (len >= 6 && (p[0] == TAG_OBJ || p[0] == TAG_OBJ_Z) && d->primary &&
	    dgi_ld32(p + 1) == d->type_id) {
		uint32_t n;
		bool zero = p[0] == TAG_OBJ_Z;
		p += 5;
		dg_err e = dgi_get_u32var(&p, end, &n);
		if (e != DG_OK)
			return e;
		if (n != (size_t)(end - p))
			return n > (size_t)(end - p) ? DG_ERR_TRUNCATED : DG_ERR_BAD_LENGTH;
		return dgi_obj_decode(reg, d, d, p, n, zero, out, arena, 1);
	}
	dg_reader r;
	dg_reader_init(&r, reg, data, len);
	dg_err e = dg_read_object(&r, d, out, arena);
	if (e == DG_OK && dg_reader_left(&r) != 0)
		e = DG_ERR_BAD_LENGTH;
	return e;
}

dg_err dg_decode_object(const dg_registry *reg, const dg_desc *d,
    const void *data, size_t len, void *out, dg_arena *arena)
{
	const uint8_t *p = data;
	/* the usual key or value: an OBJ (or OBJ_Z) of d's type in its
	 * primary schema, with a 1-byte length, of a flat descriptor —
	 * straight to its decoder (a tail call: no frame here).  len - 6 is
	 * unsigned: below 0x80 means 6 <= len < 134. */
	if (DG_LIKELY(d != NULL && out != NULL && p != NULL && d->flat_top &&
	    len - 6 < 0x80 && ((uint8_t)(p[0] - TAG_OBJ) & ~4) == 0 &&
	    dgi_ld32(p + 1) == d->type_id && p[5] == len - 6))
		return decode_flat(d, p + 6, (uint32_t)(len - 6), p[0] == TAG_OBJ_Z,
		    out, arena);
	if (d == NULL || out == NULL || !d->bound || (data == NULL && len > 0))
		return DG_ERR_INVAL;
	return decode_object_slow(reg, d, data, len, out, arena);
}
