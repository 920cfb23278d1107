/* reader.c — decoding tagged values: the pull reader, skipping and deep
 * validation, objects in scopes (DEF/REF), sorted-order checks and the
 * canonical order of encoded values.
 *
 * Every function here treats its input as hostile: each read is preceded by
 * a bounds check, nesting is limited to DG_MAX_DEPTH, an element count must
 * fit in the bytes left (every value takes at least one byte), and each
 * failure returns its own dg_err.  Dispatch is one dense switch on the tag. */
#include "marshal_int.h"

#include <math.h>

void dg_reader_init(dg_reader *r, const dg_registry *reg, const void *data,
    size_t len)
{
	static const uint8_t empty[1];
	r->r_p = data != NULL ? (const uint8_t *)data : empty; /* NULL + 0 is UB */
	r->r_end = r->r_p + (data != NULL ? len : 0);
	r->r_reg = reg;
	r->r_lookups = 0;
	r->r_depth = 0;
	r->r_nsch = 0;
}

size_t dg_reader_left(const dg_reader *r) { return (size_t)(r->r_end - r->r_p); }
uint64_t dg_reader_lookups(const dg_reader *r) { return r->r_lookups; }

/* ---- scalars ---- */

dg_err dgi_get_uvarint_long(const uint8_t **pp, const uint8_t *end, uint64_t w,
    uint64_t *out)
{
	const uint8_t *p = *pp;
	if (end - p >= 9) {
		uint64_t x = dgi_varint_gather(w & 0x7F7F7F7F7F7F7F7Full);
		uint64_t c8 = p[8];
		if (c8 - 1 < 0x7F) { /* ends, not 0 (minimal) */
			*out = x | c8 << 56;
			*pp = p + 9;
			return DG_OK;
		}
		if (c8 >= 0x80 && end - p >= 10 && p[9] == 1) { /* the 64th bit */
			*out = x | (c8 & 0x7F) << 56 | 1ull << 63;
			*pp = p + 10;
			return DG_OK;
		}
	}
	return dgi_get_uvarint(pp, end, out);
}

static dg_err get_blob(const uint8_t **pp, const uint8_t *end, uint32_t *n)
{
	dg_err e = dgi_get_u32var(pp, end, n);
	if (e != DG_OK)
		return e;
	return *n <= (size_t)(end - *pp) ? DG_OK : DG_ERR_TRUNCATED;
}

/* Tags NULL..ARRAY.  `check` validates UTF-8 (skips may leave it for later). */
static dg_err decode_scalar(uint8_t tag, const uint8_t **pp, const uint8_t *end,
    dg_value *out, bool check)
{
	const uint8_t *p = *pp;
	size_t left = (size_t)(end - p);
	uint64_t v;
	uint32_t n;
	dg_err e;

	switch (tag) {
	case TAG_NULL: out->kind = DG_NULL; break;
	case TAG_FALSE: out->kind = DG_BOOL; out->v.b = false; break;
	case TAG_TRUE: out->kind = DG_BOOL; out->v.b = true; break;
	case TAG_I8:
		if (left < 1)
			return DG_ERR_TRUNCATED;
		out->kind = DG_I8;
		out->v.i = (int8_t)*p++;
		break;
	case TAG_I16: {
		int16_t x;
		if (left < 2)
			return DG_ERR_TRUNCATED;
		memcpy(&x, p, 2);
		p += 2;
		out->kind = DG_I16;
		out->v.i = x;
		break;
	}
	case TAG_I32:
	case TAG_I64:
		if ((e = dgi_get_uvarint(&p, end, &v)) != DG_OK)
			return e;
		out->kind = tag == TAG_I32 ? DG_I32 : DG_I64;
		out->v.i = dgi_unzigzag(v);
		if (tag == TAG_I32 && (out->v.i < INT32_MIN || out->v.i > INT32_MAX))
			return DG_ERR_RANGE;
		break;
	case TAG_FLOAT:
		if (left < 4)
			return DG_ERR_TRUNCATED;
		out->kind = DG_FLOAT;
		memcpy(&out->v.f, p, 4);
		p += 4;
		break;
	case TAG_DOUBLE:
		if (left < 8)
			return DG_ERR_TRUNCATED;
		out->kind = DG_DOUBLE;
		memcpy(&out->v.d, p, 8);
		p += 8;
		break;
	case TAG_STRING:
	case TAG_BYTES:
		if ((e = get_blob(&p, end, &n)) != DG_OK)
			return e;
		if (tag == TAG_STRING && check && !dgi_utf8_ok(p, n))
			return DG_ERR_UTF8;
		out->kind = tag == TAG_STRING ? DG_STRING : DG_BYTES;
		out->v.bytes.ptr = p;
		out->v.bytes.len = n;
		p += n;
		break;
	case TAG_UUID:
		if (left < 16)
			return DG_ERR_TRUNCATED;
		out->kind = DG_UUID;
		memcpy(out->v.uuid.b, p, 16);
		p += 16;
		break;
	case TAG_TIMESTAMP:
		if ((e = dgi_get_timestamp(&p, end, &out->v.ts)) != DG_OK)
			return e;
		out->kind = DG_TIMESTAMP;
		break;
	case TAG_ENUM:
		if (left < 4)
			return DG_ERR_TRUNCATED;
		out->v.en.type_id = dgi_ld32(p);
		p += 4;
		if ((e = dgi_get_uvarint(&p, end, &v)) != DG_OK)
			return e;
		if (v > INT32_MAX)
			return DG_ERR_RANGE;
		out->kind = DG_ENUM;
		out->v.en.ordinal = (int32_t)v;
		break;
	case TAG_ARRAY: {
		if (left < 1)
			return DG_ERR_TRUNCATED;
		dg_kind elem = (dg_kind)*p++;
		unsigned w = dgi_elem_width(elem);
		if (w == 0)
			return DG_ERR_BAD_TAG;
		if ((e = dgi_get_u32var(&p, end, &n)) != DG_OK)
			return e;
		if (n > (size_t)(end - p) / w)
			return DG_ERR_COUNT;
		if (elem == DG_BOOL)
			for (uint32_t i = 0; i < n; i++)
				if (p[i] > 1)
					return DG_ERR_RANGE;
		out->kind = DG_ARRAY;
		out->v.arr.elem = elem;
		out->v.arr.a.ptr = p;
		out->v.arr.a.count = n;
		p += (size_t)n * w;
		break;
	}
	default:
		return DG_ERR_BAD_TAG;
	}
	*pp = p;
	return DG_OK;
}

/* ---- objects ---- */

static bool is_obj_tag(uint8_t tag)
{
	return (tag >= TAG_OBJ && tag <= TAG__LAST) || tag >= TAG_REF;
}

/* Object header in a position with scope `base` (NO_SCOPE: none). */
static dg_err obj_in_scope(dg_reader *r, uint8_t tag, const uint8_t **pp,
    const uint8_t *end, uint32_t base, dg_bobj *o, bool check)
{
	dg_err e;
	bool zero = dgi_tag_is_zero(tag);
	if (tag >= TAG_REF) {
		uint32_t idx = tag & 0x3F; /* REF 80..BF, REF_Z C0..FF */
		if (base == NO_SCOPE)
			return DG_ERR_BAD_TAG;
		if (base + idx >= r->r_nsch)
			return DG_ERR_UNKNOWN_SCHEMA;
		const uint8_t *p = *pp;
		if ((e = dgi_get_u32var(&p, end, &o->len)) != DG_OK)
			return e;
		if (o->len > (size_t)(end - p))
			return DG_ERR_TRUNCATED;
		o->desc = r->r_sch[base + idx];
		o->body = p;
		o->zero = zero;
		if (check && (e = dgi_body_check(o)) != DG_OK)
			return e;
		*pp = p + o->len;
		return DG_OK;
	}
	tag = dgi_tag_plain(tag);
	bool def = tag == TAG_DEF || tag == TAG_DEF_S;
	if (def) {
		if (base == NO_SCOPE)
			return DG_ERR_BAD_TAG;
		if (r->r_nsch >= DG_SCOPE_MAX)
			return DG_ERR_LIMIT;
		tag -= TAG_DEF - TAG_OBJ;
	}
	r->r_lookups++;
	e = dgi_obj_header(r->r_reg, zero ? dgi_tag_zero(tag) : tag, pp, end, o,
	    check);
	if (e != DG_OK)
		return e;
	if (def)
		r->r_sch[r->r_nsch++] = o->desc;
	return DG_OK;
}

/* ---- skipping and validation ---- */

static bool is_container(uint8_t tag)
{
	return tag >= TAG_LIST && tag <= TAG_SORTED_MAP;
}

static bool scoped(uint8_t tag)
{
	return tag == TAG_LIST || tag == TAG_SET || tag == TAG_MAP;
}

/* Container header: count, checked against the bytes left. */
static dg_err container_count(uint8_t tag, const uint8_t **pp,
    const uint8_t *end, uint32_t *count, uint64_t *values)
{
	dg_err e = dgi_get_u32var(pp, end, count);
	if (e != DG_OK)
		return e;
	bool map = tag == TAG_MAP || tag == TAG_SORTED_MAP;
	if (map && *count > UINT32_MAX / 2)
		return DG_ERR_COUNT; /* values are counted in 32 bits */
	*values = map ? (uint64_t)*count * 2 : *count;
	return *values <= (uint64_t)(end - *pp) ? DG_OK : DG_ERR_COUNT;
}

static dg_err skip_value(dg_reader *r, const uint8_t **pp, const uint8_t *end,
    uint32_t base, unsigned depth, bool deep);

/* The elements of the messages' lists (every batch item, every tx entry:
 * I64 ids, BYTES keys and values) — tag I64, I32 or BYTES at **pp — with
 * the checks and errors decode_scalar gives them, without a dg_value, an
 * id's 10-byte varint a word at a time (dgi_get_uvarint_id); in line in
 * skip_elements' loop over a LIST (maps and sets keep the general path,
 * whose strings and uuids the extra test would only slow). */
static inline __attribute__((always_inline)) dg_err skip_id_or_bytes(uint8_t tag,
    const uint8_t **pp, const uint8_t *end)
{
	const uint8_t *p = *pp + 1;
	dg_err e;
	if (tag == TAG_BYTES) {
		uint32_t n;
		if ((e = get_blob(&p, end, &n)) != DG_OK)
			return e;
		*pp = p + n;
		return DG_OK;
	}
	uint64_t u;
	if ((e = dgi_get_uvarint_id(&p, end, &u)) != DG_OK)
		return e;
	int64_t x = dgi_unzigzag(u);
	if (tag == TAG_I32 && (x < INT32_MIN || x > INT32_MAX))
		return DG_ERR_RANGE;
	*pp = p;
	return DG_OK;
}

/* Elements of a container whose header was read; checks sorted order. */
static dg_err skip_elements(dg_reader *r, uint8_t tag, const uint8_t **pp,
    const uint8_t *end, uint64_t values, unsigned depth, bool deep)
{
	uint32_t save = r->r_nsch;
	uint32_t base = scoped(tag) ? r->r_nsch : NO_SCOPE;
	bool sorted = tag == TAG_SORTED_SET || tag == TAG_SORTED_MAP;
	unsigned stride = tag == TAG_SORTED_MAP ? 2 : 1;
	bool list = tag == TAG_LIST; /* (the messages': their elements in line) */
	const uint8_t *prev = NULL;
	size_t prevlen = 0;
	dg_err e = DG_OK;

	if (depth + 1 > DG_MAX_DEPTH)
		return DG_ERR_DEPTH;
	for (uint64_t i = 0; i < values; i++) {
		const uint8_t *start = *pp;
		if (list && start < end && (start[0] == TAG_I64 || start[0] == TAG_BYTES))
			e = skip_id_or_bytes(start[0], pp, end);
		else
			e = skip_value(r, pp, end, base, depth + 1, deep);
		if (e != DG_OK)
			break;
		if (sorted && i % stride == 0) {
			size_t len = (size_t)(*pp - start);
			if (prev != NULL && dgi_cmp_encoded(prev, prevlen, start, len) >= 0) {
				e = DG_ERR_ORDER;
				break;
			}
			prev = start;
			prevlen = len;
		}
	}
	r->r_nsch = save;
	return e;
}

static dg_err skip_value(dg_reader *r, const uint8_t **pp, const uint8_t *end,
    uint32_t base, unsigned depth, bool deep)
{
	const uint8_t *p = *pp;
	dg_value v;
	dg_err e;

	if (p >= end)
		return DG_ERR_TRUNCATED;
	uint8_t tag = *p++;
	if (is_container(tag)) {
		uint32_t count;
		uint64_t values;
		if ((e = container_count(tag, &p, end, &count, &values)) != DG_OK)
			return e;
		if ((e = skip_elements(r, tag, &p, end, values, depth, deep)) != DG_OK)
			return e;
	} else if (is_obj_tag(tag)) {
		dg_bobj o;
		if (depth + 1 > DG_MAX_DEPTH)
			return DG_ERR_DEPTH;
		if ((e = obj_in_scope(r, tag, &p, end, base, &o, true)) != DG_OK)
			return e;
		if (deep && (e = dgi_body_deep_check(r->r_reg, &o, depth + 1)) != DG_OK)
			return e;
	} else if ((e = decode_scalar(tag, &p, end, &v, deep)) != DG_OK) {
		return e;
	}
	*pp = p;
	return DG_OK;
}

dg_err dgi_skip_tagged(const dg_registry *reg, const uint8_t **pp,
    const uint8_t *end, unsigned depth, bool deep)
{
	dg_reader tmp;
	dg_reader_init(&tmp, reg, NULL, 0);
	return skip_value(&tmp, pp, end, NO_SCOPE, depth, deep);
}

dg_err dgi_decode_tagged(const dg_registry *reg, const uint8_t **pp,
    const uint8_t *end, dg_value *out, unsigned depth, bool deep)
{
	const uint8_t *p = *pp;
	dg_err e;
	if (p >= end)
		return DG_ERR_TRUNCATED;
	if (depth > DG_MAX_DEPTH)
		return DG_ERR_DEPTH;
	uint8_t tag = *p;
	if (is_container(tag)) {
		uint32_t count;
		uint64_t values;
		const uint8_t *q = p + 1;
		if ((e = container_count(tag, &q, end, &count, &values)) != DG_OK)
			return e;
		if ((e = dgi_skip_tagged(reg, &p, end, depth, deep)) != DG_OK)
			return e;
		out->kind = (dg_kind)(DG_LIST + (tag - TAG_LIST));
		out->v.coll.count = count;
		out->v.coll.raw.ptr = *pp;
		out->v.coll.raw.len = (uint32_t)(p - *pp);
	} else if (dgi_tag_plain(tag) == TAG_OBJ || dgi_tag_plain(tag) == TAG_OBJ_S) {
		p++;
		e = dgi_obj_header(reg, tag, &p, end, &out->v.obj, true);
		if (e != DG_OK)
			return e;
		if (deep && (e = dgi_body_deep_check(reg, &out->v.obj, depth + 1)) != DG_OK)
			return e;
		out->kind = DG_OBJECT;
	} else {
		p++;
		if ((e = decode_scalar(tag, &p, end, out, true)) != DG_OK)
			return e;
	}
	*pp = p;
	return DG_OK;
}

dg_err dg_validate(const dg_registry *reg, const void *data, size_t len)
{
	dg_reader r;
	const uint8_t *p = data, *end = p + len;
	if (data == NULL && len > 0)
		return DG_ERR_INVAL;
	if (len == 0)
		return DG_ERR_TRUNCATED; /* "one or more values": none is not valid */
	dg_reader_init(&r, reg, data, len);
	while (p < end) {
		dg_err e = skip_value(&r, &p, end, NO_SCOPE, 0, true);
		if (e != DG_OK)
			return e;
	}
	return DG_OK;
}

/* ---- the pull reader ---- */

/* Drop finished containers; return the scope base of the next value. */
static inline uint32_t next_base(dg_reader *r)
{
	while (r->r_depth > 0) {
		struct dgi_rframe *f = &r->r_stack[r->r_depth - 1];
		if (f->f_left != 0)
			return f->f_base;
		if (f->f_base != NO_SCOPE)
			r->r_nsch = f->f_base;
		r->r_depth--;
	}
	return NO_SCOPE;
}

static inline void count_value(dg_reader *r)
{
	if (r->r_depth > 0)
		r->r_stack[r->r_depth - 1].f_left--;
}

dg_err dg_read_next(dg_reader *r, dg_value *out)
{
	uint32_t base = next_base(r);
	const uint8_t *p = r->r_p, *end = r->r_end;
	dg_err e;

	if (p >= end)
		return r->r_depth == 0 ? DG_ERR_STATE : DG_ERR_TRUNCATED;
	uint8_t tag = *p++;
	if (is_container(tag)) {
		uint32_t count;
		uint64_t values;
		if (r->r_depth >= DG_MAX_DEPTH)
			return DG_ERR_DEPTH;
		if ((e = container_count(tag, &p, end, &count, &values)) != DG_OK)
			return e;
		if (tag == TAG_SORTED_SET || tag == TAG_SORTED_MAP) {
			const uint8_t *q = p; /* check the order up front */
			e = skip_elements(r, tag, &q, end, values, r->r_depth, false);
			if (e != DG_OK)
				return e;
		}
		count_value(r);
		struct dgi_rframe *f = &r->r_stack[r->r_depth++];
		f->f_left = (uint32_t)values;
		f->f_base = scoped(tag) ? r->r_nsch : NO_SCOPE;
		out->kind = (dg_kind)(DG_LIST + (tag - TAG_LIST));
		out->v.coll.count = count;
		out->v.coll.raw.ptr = NULL;
		out->v.coll.raw.len = 0;
	} else if (is_obj_tag(tag)) {
		if ((e = obj_in_scope(r, tag, &p, end, base, &out->v.obj, true)) != DG_OK)
			return e;
		out->kind = DG_OBJECT;
		count_value(r);
	} else {
		if ((e = decode_scalar(tag, &p, end, out, true)) != DG_OK)
			return e;
		count_value(r);
	}
	r->r_p = p;
	return DG_OK;
}

dg_err dg_read_skip(dg_reader *r)
{
	uint32_t base = next_base(r);
	if (r->r_p >= r->r_end)
		return r->r_depth == 0 ? DG_ERR_STATE : DG_ERR_TRUNCATED;
	dg_err e = skip_value(r, &r->r_p, r->r_end, base, r->r_depth, false);
	if (e == DG_OK)
		count_value(r);
	return e;
}

static dg_err read_object_slow(dg_reader *r, const dg_desc *d, void *out,
    dg_arena *arena);

static inline dg_err read_object(dg_reader *r, const dg_desc *d, void *out,
    dg_arena *arena)
{
	/* The stream case first: a REF with a 1-byte length inside an open
	 * container, whose schema is d's — no lookup, no header parsing. */
	if (DG_LIKELY(r->r_depth > 0)) {
		struct dgi_rframe *f = &r->r_stack[r->r_depth - 1];
		const uint8_t *p = r->r_p;
		if (f->f_left != 0 && f->f_base != NO_SCOPE && r->r_end - p >= 2 &&
		    p[0] >= TAG_REF && p[1] < 0x80) {
			uint32_t at = f->f_base + (p[0] & 0x3F); /* REF or REF_Z */
			uint32_t len = p[1];
			if (at < r->r_nsch && r->r_sch[at] == d &&
			    len <= (size_t)(r->r_end - p - 2)) {
				dg_err e = dgi_obj_decode(r->r_reg, d, d, p + 2, len,
				    p[0] >= TAG_REF_Z, out, arena, r->r_depth + 1);
				if (e == DG_OK) { /* a failed read consumes nothing */
					f->f_left--;
					r->r_p = p + 2 + len;
				}
				return e;
			}
		}
	}
	return read_object_slow(r, d, out, arena);
}

dg_err dg_read_object(dg_reader *r, const dg_desc *d, void *out,
    dg_arena *arena)
{
	if (d == NULL || out == NULL || !d->bound)
		return DG_ERR_INVAL;
	return read_object(r, d, out, arena);
}

dg_err dg_read_objects(dg_reader *r, const dg_desc *d, void *out,
    size_t stride, uint32_t count, dg_arena *arena)
{
	uint8_t *p = out;
	if (d == NULL || (out == NULL && count > 0) || !d->bound ||
	    stride < d->struct_size)
		return DG_ERR_INVAL;
	for (uint32_t i = 0; i < count; i++, p += stride) {
		dg_err e = read_object(r, d, p, arena);
		if (e != DG_OK)
			return e;
		if (i + 1 < count && r->r_depth > 0) {
			/* the rest of a run of REFs to one schema: no frame or scope
			 * checks per object, only the tag, the length and the body */
			struct dgi_rframe *f = &r->r_stack[r->r_depth - 1];
			const uint8_t *q = r->r_p;
			if (f->f_base == NO_SCOPE || f->f_left < count - i - 1 ||
			    r->r_end - q < 1 || q[0] < TAG_REF)
				continue;
			/* REF and REF_Z of the one index, in any mix (objects with
			 * and without zero fields) */
			uint8_t tag = q[0] & ~0x40;
			uint32_t at = f->f_base + (tag - TAG_REF);
			if (at >= r->r_nsch || r->r_sch[at] != d)
				continue;
			for (i++; i < count; i++) {
				p += stride;
				if (r->r_end - q < 2 || (q[0] & ~0x40) != tag || q[0] < TAG_REF ||
				    q[1] >= 0x80 || q[1] > (size_t)(r->r_end - q - 2)) {
					i--; /* not the simple case: the general path */
					p -= stride;
					break;
				}
				uint32_t len = q[1];
				e = dgi_obj_decode(r->r_reg, d, d, q + 2, len,
				    q[0] >= TAG_REF_Z, p, arena, r->r_depth + 1);
				if (e != DG_OK)
					return e;
				q += 2 + len;
				r->r_p = q;
				f->f_left--;
			}
			if (i == count)
				return DG_OK; /* the run took the rest */
		}
	}
	return DG_OK;
}

static dg_err read_object_slow(dg_reader *r, const dg_desc *d, void *out,
    dg_arena *arena)
{
	uint32_t base = next_base(r);
	const uint8_t *p = r->r_p, *end = r->r_end;
	uint32_t nsch = r->r_nsch; /* a failed read leaves the scope as it was */
	dg_bobj o;
	dg_err e;

	if (d == NULL || out == NULL || !d->bound)
		return DG_ERR_INVAL;
	if (p >= end)
		return r->r_depth == 0 ? DG_ERR_STATE : DG_ERR_TRUNCATED;
	uint8_t tag = *p++;
	if (tag == TAG_NULL) {
		memset(out, 0, d->struct_size);
	} else {
		uint32_t idx = tag & 0x3F;
		uint8_t ptag = dgi_tag_plain(tag);
		o.zero = dgi_tag_is_zero(tag);
		if (tag >= TAG_REF && base != NO_SCOPE &&
		    base + idx < r->r_nsch && p < end && *p < 0x80 &&
		    (uint32_t)*p <= (size_t)(end - p - 1)) {
			/* the common case in a stream: REF with a 1-byte length */
			o.desc = r->r_sch[base + idx];
			o.len = *p++;
			o.body = p;
			p += o.len;
		} else if ((ptag == TAG_OBJ || ptag == TAG_DEF) && d->primary &&
		    (size_t)(end - p) >= 4 && dgi_ld32(p) == d->type_id &&
		    (ptag == TAG_OBJ || (base != NO_SCOPE && r->r_nsch < DG_SCOPE_MAX))) {
			/* the caller named the type: its primary schema needs no
			 * registry lookup */
			p += 4;
			if ((e = dgi_get_u32var(&p, end, &o.len)) != DG_OK)
				return e;
			if (o.len > (size_t)(end - p))
				return DG_ERR_TRUNCATED;
			o.desc = d;
			o.body = p;
			p += o.len;
			if (ptag == TAG_DEF)
				r->r_sch[r->r_nsch++] = d;
			/* counted as the lookup it replaces: dg_reader_lookups()
			 * is one per DEF/OBJ tag, whichever path resolved it */
			r->r_lookups++;
		} else {
			if (!is_obj_tag(tag))
				return tag <= TAG_SORTED_MAP ? DG_ERR_TYPE_MISMATCH : DG_ERR_BAD_TAG;
			if ((e = obj_in_scope(r, tag, &p, end, base, &o, false)) != DG_OK)
				return e;
		}
		/* on failure the value is not consumed, so a DEF it read must not
		 * stay in the scope table (a retry would define it twice) */
		if (o.desc->type_id != d->type_id) {
			r->r_nsch = nsch;
			return DG_ERR_TYPE_MISMATCH;
		}
		e = dgi_obj_decode(r->r_reg, o.desc, d, o.body, o.len, o.zero, out,
		    arena, r->r_depth + 1);
		if (e != DG_OK) {
			r->r_nsch = nsch;
			return e;
		}
	}
	count_value(r);
	r->r_p = p;
	return DG_OK;
}

/* ---- typed helpers ---- */

static dg_err read_kind(dg_reader *r, dg_value *v)
{
	return dg_read_next(r, v);
}

dg_err dg_read_i64(dg_reader *r, int64_t *out)
{
	/* The common case in line: a varint I64 or I32 where the reader
	 * stands ready (no finished container to leave first: dg_read_next's
	 * next_base would change nothing) — no dg_value, no tag switch. */
	const uint8_t *p = r->r_p, *end = r->r_end;
	if (DG_LIKELY(end - p >= 2 && (p[0] == TAG_I64 || p[0] == TAG_I32) &&
	    (r->r_depth == 0 || r->r_stack[r->r_depth - 1].f_left != 0))) {
		const uint8_t *q = p + 1;
		uint64_t u;
		dg_err e = dgi_get_uvarint_id(&q, end, &u);
		if (e != DG_OK)
			return e;
		int64_t x = dgi_unzigzag(u);
		if (p[0] == TAG_I32 && (x < INT32_MIN || x > INT32_MAX))
			return DG_ERR_RANGE;
		count_value(r);
		r->r_p = q;
		*out = x;
		return DG_OK;
	}
	dg_value v;
	dg_err e = read_kind(r, &v);
	if (e != DG_OK)
		return e;
	if (v.kind < DG_I8 || v.kind > DG_I64)
		return DG_ERR_TYPE_MISMATCH;
	*out = v.v.i;
	return DG_OK;
}

dg_err dg_read_i32(dg_reader *r, int32_t *out)
{
	int64_t x;
	dg_err e = dg_read_i64(r, &x);
	if (e != DG_OK)
		return e;
	if (x < INT32_MIN || x > INT32_MAX)
		return DG_ERR_RANGE;
	*out = (int32_t)x;
	return DG_OK;
}

dg_err dg_read_double(dg_reader *r, double *out)
{
	dg_value v;
	dg_err e = read_kind(r, &v);
	if (e != DG_OK)
		return e;
	if (v.kind == DG_DOUBLE)
		*out = v.v.d;
	else if (v.kind == DG_FLOAT)
		*out = v.v.f;
	else
		return DG_ERR_TYPE_MISMATCH;
	return DG_OK;
}

dg_err dg_read_bool(dg_reader *r, bool *out)
{
	dg_value v;
	dg_err e = read_kind(r, &v);
	if (e != DG_OK)
		return e;
	if (v.kind != DG_BOOL)
		return DG_ERR_TYPE_MISMATCH;
	*out = v.v.b;
	return DG_OK;
}

static dg_err read_blob(dg_reader *r, dg_kind kind, dg_bytes *out,
    dg_arena *arena)
{
	dg_value v;
	dg_err e = read_kind(r, &v);
	if (e != DG_OK)
		return e;
	if (v.kind == DG_NULL) {
		out->ptr = NULL;
		out->len = 0;
		return DG_OK;
	}
	if (v.kind != kind)
		return DG_ERR_TYPE_MISMATCH;
	*out = v.v.bytes;
	if (arena != NULL && !arena->views) {
		void *c = dgi_arena_copy(arena, out->ptr, out->len, 1, kind == DG_STRING);
		if (c == NULL)
			return DG_ERR_NOSPACE;
		out->ptr = c;
	}
	return DG_OK;
}

dg_err dg_read_str(dg_reader *r, dg_str *out, dg_arena *arena)
{
	dg_bytes b;
	dg_err e = read_blob(r, DG_STRING, &b, arena);
	if (e == DG_OK) {
		out->ptr = (const char *)b.ptr;
		out->len = b.len;
	}
	return e;
}

dg_err dg_read_bytes(dg_reader *r, dg_bytes *out, dg_arena *arena)
{
	/* The common case in line, as dg_read_i64's: a BYTES viewed where the
	 * reader stands ready (the keys and values of the messages). */
	const uint8_t *p = r->r_p, *end = r->r_end;
	if (DG_LIKELY(arena == NULL && p < end && p[0] == TAG_BYTES &&
	    (r->r_depth == 0 || r->r_stack[r->r_depth - 1].f_left != 0))) {
		const uint8_t *q = p + 1;
		uint32_t n;
		dg_err e = get_blob(&q, end, &n);
		if (e != DG_OK)
			return e;
		count_value(r);
		out->ptr = q;
		out->len = n;
		r->r_p = q + n;
		return DG_OK;
	}
	return read_blob(r, DG_BYTES, out, arena);
}

dg_err dgi_read_run(dg_reader *r, int64_t *v, unsigned ni, dg_bytes *b, unsigned nb)
{
	unsigned i = 0, j = 0;
	struct dgi_rframe *f = r->r_depth > 0 ? &r->r_stack[r->r_depth - 1] : NULL;
	if (DG_LIKELY(f == NULL || f->f_left >= ni + nb)) {
		/* every value in this frame: no container to leave before any */
		const uint8_t *p = r->r_p, *end = r->r_end;
		for (; i < ni; i++) {
			if (DG_UNLIKELY(end - p < 2 || p[0] != TAG_I64))
				break;
			const uint8_t *q = p + 1;
			uint64_t u;
			if (DG_UNLIKELY(dgi_get_uvarint_id(&q, end, &u) != DG_OK))
				break;
			v[i] = dgi_unzigzag(u);
			p = q;
		}
		for (; i == ni && j < nb; j++) {
			if (DG_UNLIKELY(p >= end))
				break;
			if (p[0] == TAG_NULL) { /* as dg_read_bytes: no value */
				b[j].ptr = NULL;
				b[j].len = 0;
				p++;
				continue;
			}
			if (DG_UNLIKELY(p[0] != TAG_BYTES))
				break;
			const uint8_t *q = p + 1;
			uint32_t n;
			if (DG_UNLIKELY(get_blob(&q, end, &n) != DG_OK))
				break;
			b[j].ptr = q;
			b[j].len = n;
			p = q + n;
		}
		r->r_p = p;
		if (f != NULL)
			f->f_left -= i + j;
	}
	dg_err e = DG_OK;
	for (; i < ni && e == DG_OK; i++)
		e = dg_read_i64(r, &v[i]);
	for (; j < nb && e == DG_OK; j++)
		e = dg_read_bytes(r, &b[j], NULL);
	return e;
}

dg_err dg_read_begin(dg_reader *r, dg_kind kind, uint32_t *count)
{
	dg_value v;
	dg_err e = read_kind(r, &v);
	if (e != DG_OK)
		return e;
	if (v.kind != kind || kind < DG_LIST || kind > DG_SORTED_MAP)
		return DG_ERR_TYPE_MISMATCH;
	*count = v.v.coll.count;
	return DG_OK;
}

/* ---- canonical order ---- */

static int group(uint8_t tag)
{
	if (tag >= TAG_I8 && tag <= TAG_I64)
		return TAG_I8;
	if (tag == TAG_FLOAT || tag == TAG_DOUBLE)
		return TAG_FLOAT;
	return tag;
}

/* Total order of doubles: -inf < ... < -0 < +0 < ... < +inf < NaN. */
static uint64_t double_key(double d)
{
	uint64_t b;
	if (isnan(d))
		return UINT64_MAX;
	memcpy(&b, &d, 8);
	return (b & 0x8000000000000000ull) ? ~b : b | 0x8000000000000000ull;
}

static int cmp_u64(uint64_t a, uint64_t b) { return a < b ? -1 : a > b; }
static int cmp_i64(int64_t a, int64_t b) { return a < b ? -1 : a > b; }

static int cmp_bytes(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen)
{
	int c = memcmp(a, b, alen < blen ? alen : blen);
	if (c != 0)
		return c < 0 ? -1 : 1;
	return cmp_u64(alen, blen);
}

int dgi_cmp_encoded(const uint8_t *a, size_t alen, const uint8_t *b,
    size_t blen)
{
	dg_value x, y;
	if (alen == 0 || blen == 0)
		return cmp_u64(alen, blen);
	uint8_t ta = a[0], tb = b[0];
	int ga = group(ta), gb = group(tb);
	if (ga != gb)
		return ga < gb ? -1 : 1;
	if (ga == TAG_I8 || ga == TAG_FLOAT || ga == TAG_STRING || ga == TAG_BYTES ||
	    ga == TAG_TIMESTAMP) {
		const uint8_t *pa = a + 1, *pb = b + 1;
		if (decode_scalar(ta, &pa, a + alen, &x, false) == DG_OK &&
		    decode_scalar(tb, &pb, b + blen, &y, false) == DG_OK) {
			int c;
			if (ga == TAG_I8)
				c = cmp_i64(x.v.i, y.v.i);
			else if (ga == TAG_FLOAT)
				c = cmp_u64(double_key(x.kind == DG_FLOAT ? x.v.f : x.v.d),
				    double_key(y.kind == DG_FLOAT ? y.v.f : y.v.d));
			else if (ga == TAG_TIMESTAMP)
				c = x.v.ts.ms != y.v.ts.ms ? cmp_i64(x.v.ts.ms, y.v.ts.ms) :
				    cmp_i64(x.v.ts.ns, y.v.ts.ns);
			else
				c = cmp_bytes(x.v.bytes.ptr, x.v.bytes.len, y.v.bytes.ptr,
				    y.v.bytes.len);
			if (c != 0 || ta != tb)
				return c != 0 ? c : (ta < tb ? -1 : 1);
			return 0;
		}
	}
	return cmp_bytes(a, alen, b, blen);
}

int dg_value_cmp(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen)
{
	return dgi_cmp_encoded(a, alen, b, blen);
}

int64_t dg_array_get_int(const dg_array *a, dg_kind elem, uint32_t i)
{
	const uint8_t *p = (const uint8_t *)a->ptr + (size_t)i * dgi_elem_width(elem);
	switch (elem) {
	case DG_BOOL: return p[0];
	case DG_I8: return (int8_t)p[0];
	case DG_I16: { int16_t v; memcpy(&v, p, 2); return v; }
	case DG_I32: { int32_t v; memcpy(&v, p, 4); return v; }
	case DG_I64: { int64_t v; memcpy(&v, p, 8); return v; }
	default: return 0;
	}
}

double dg_array_get_double(const dg_array *a, dg_kind elem, uint32_t i)
{
	const uint8_t *p = (const uint8_t *)a->ptr + (size_t)i * dgi_elem_width(elem);
	if (elem == DG_FLOAT) {
		float f;
		memcpy(&f, p, 4);
		return f;
	}
	if (elem == DG_DOUBLE) {
		double d;
		memcpy(&d, p, 8);
		return d;
	}
	return (double)dg_array_get_int(a, elem, i);
}
