/* writer.c — the value writer: scalars, containers with element accounting,
 * the scope table that writes each schema once per container, and the
 * order check of sorted containers.  Errors are sticky (see marshal.h). */
#include "marshal_int.h"

void dg_writer_init(dg_writer *w, const dg_registry *reg, dg_buf *buf)
{
	w->w_buf = buf;
	w->w_reg = reg;
	w->w_err = DG_OK;
	w->w_depth = 0;
	w->w_nsch = 0;
	w->w_zero = false;
}

void dg_writer_set_zero_form(dg_writer *w, bool on)
{
	w->w_zero = on;
}

void dg_writer_reset(dg_writer *w)
{
	w->w_err = DG_OK;
	w->w_depth = 0;
	w->w_nsch = 0;
}

dg_err dg_writer_finish(dg_writer *w)
{
	if (w->w_err == DG_OK && w->w_depth != 0)
		w->w_err = DG_ERR_STATE;
	return w->w_err;
}

DG_NOINLINE dg_err dgi_w_fail(dg_writer *w, dg_err e)
{
	if (w->w_err == DG_OK)
		w->w_err = e;
	return w->w_err;
}

/* Before a value: account for it in the enclosing container. */
static inline dg_err elem_begin(dg_writer *w)
{
	if (DG_UNLIKELY(w->w_err != DG_OK))
		return w->w_err;
	if (w->w_depth == 0)
		return DG_OK;
	struct dgi_wframe *f = &w->w_stack[w->w_depth - 1];
	if (DG_UNLIKELY(f->f_left == 0))
		return dgi_w_fail(w, DG_ERR_STATE); /* more values than declared */
	f->f_key = (uint32_t)w->w_buf->len;
	return DG_OK;
}

dg_err dgi_w_elem_begin(dg_writer *w)
{
	return elem_begin(w);
}

/* memcmp order of two short byte strings, then length. */
static inline int cmp_short(const uint8_t *a, size_t la, const uint8_t *b,
    size_t lb)
{
	size_t n = la < lb ? la : lb, i = 0;
	if (n >= 8) {
		for (; i + 8 <= n; i += 8) {
			uint64_t x, y;
			memcpy(&x, a + i, 8);
			memcpy(&y, b + i, 8);
			if (x != y)
				return __builtin_bswap64(x) < __builtin_bswap64(y) ? -1 : 1;
		}
	}
	for (; i < n; i++)
		if (a[i] != b[i])
			return a[i] < b[i] ? -1 : 1;
	return la < lb ? -1 : la > lb;
}

/* Order of two keys: same-tag short strings and bytes (the usual keys)
 * inline, everything else through the descriptor's comparator. */
static inline int key_cmp(const dg_desc *d, const uint8_t *a, uint32_t alen,
    const uint8_t *b, uint32_t blen)
{
	if (a[0] == b[0] && (a[0] == TAG_STRING || a[0] == TAG_BYTES) &&
	    a[1] < 0x80 && b[1] < 0x80)
		return cmp_short(a + 2, a[1], b + 2, b[1]);
	return d->cmp(a, alen, b, blen);
}

/* The first min(n, 8) bytes of p as a big-endian number, zero-padded,
 * without reading outside [p, p+n): for n <= 3 bytes 0, n/2 and n-1 cover
 * every position; for 4..7 two overlapping 4-byte loads do. */
static inline uint64_t be_prefix(const uint8_t *p, size_t n)
{
	uint64_t x;
	uint32_t a, b;
	if (n >= 8) {
		memcpy(&x, p, 8);
		return __builtin_bswap64(x);
	}
	if (n >= 4) {
		memcpy(&a, p, 4);
		memcpy(&b, p + n - 4, 4);
		return (uint64_t)__builtin_bswap32(a) << 32 |
		    (uint64_t)__builtin_bswap32(b) << (8 * (8 - n));
	}
	if (n == 0)
		return 0;
	return (uint64_t)p[0] << 56 | (uint64_t)p[n / 2] << (56 - 8 * (n / 2)) |
	    (uint64_t)p[n - 1] << (56 - 8 * (n - 1));
}

/* A key of a sorted container is complete: it must follow the last one.
 * It remembers its zero-padded 8-byte prefix when it is a short string or
 * bytes, for write_blob's fast check of the next key. */
static inline void sorted_key_done(dg_writer *w, struct dgi_wframe *f)
{
	const uint8_t *base = w->w_buf->data, *k = base + f->f_key;
	uint32_t len = (uint32_t)w->w_buf->len - f->f_key;
	if (f->f_prevlen != 0 &&
	    key_cmp(f->f_desc, base + f->f_prev, f->f_prevlen, k, len) >= 0) {
		dgi_w_fail(w, DG_ERR_ORDER);
		return;
	}
	f->f_prev = f->f_key;
	f->f_prevlen = len;
	f->f_pfxtag = 0;
	if ((k[0] == TAG_STRING || k[0] == TAG_BYTES) && len >= 2 && k[1] < 0x80) {
		f->f_pfxtag = k[0];
		f->f_pfx = be_prefix(k + 2, k[1]);
	}
}

/* After a value: count it; sorted containers compare consecutive keys. */
static inline void elem_done(dg_writer *w)
{
	if (w->w_depth == 0)
		return;
	struct dgi_wframe *f = &w->w_stack[w->w_depth - 1];
	/* a map's values alternate key, value; f_left counts both and
	 * starts even, so an even count before this value means a key */
	uint32_t left = f->f_left--;
	if (DG_UNLIKELY(f->f_desc->cmp != NULL)) {
		if (f->f_kind == DG_SORTED_MAP && (left & 1) != 0)
			return; /* that was a value */
		sorted_key_done(w, f);
	}
}

void dgi_w_elem_done(dg_writer *w)
{
	elem_done(w);
}

static inline uint8_t *w_room(dg_writer *w, size_t n)
{
	dg_buf *b = w->w_buf;
	if (DG_UNLIKELY(b->cap - b->len < n)) {
		dg_err e = dg_buf_reserve(b, n);
		if (e != DG_OK) {
			dgi_w_fail(w, e);
			return NULL;
		}
	}
	return b->data + b->len;
}

static inline dg_err w_commit(dg_writer *w, uint8_t *end)
{
	w->w_buf->len = (size_t)(end - w->w_buf->data);
	elem_done(w);
	return w->w_err;
}

/* A tag followed by up to `n` more bytes built by the caller. */
#define W_BEGIN(w, n, p)                      \
	do {                                      \
		if (elem_begin(w) != DG_OK)           \
			return (w)->w_err;                \
		if (((p) = w_room((w), (n))) == NULL) \
			return (w)->w_err;                \
	} while (0)

dg_err dg_write_null(dg_writer *w)
{
	uint8_t *p;
	W_BEGIN(w, 1, p);
	*p++ = TAG_NULL;
	return w_commit(w, p);
}

dg_err dg_write_bool(dg_writer *w, bool v)
{
	uint8_t *p;
	W_BEGIN(w, 1, p);
	*p++ = v ? TAG_TRUE : TAG_FALSE;
	return w_commit(w, p);
}

dg_err dg_write_i8(dg_writer *w, int8_t v)
{
	uint8_t *p;
	W_BEGIN(w, 2, p);
	*p++ = TAG_I8;
	*p++ = (uint8_t)v;
	return w_commit(w, p);
}

dg_err dg_write_i16(dg_writer *w, int16_t v)
{
	uint8_t *p;
	W_BEGIN(w, 3, p);
	*p++ = TAG_I16;
	memcpy(p, &v, 2);
	return w_commit(w, p + 2);
}

dg_err dg_write_i32(dg_writer *w, int32_t v)
{
	uint8_t *p;
	uint64_t z = dgi_zigzag(v);
	W_BEGIN(w, 1 + dgi_uvarint_len(z), p);
	*p++ = TAG_I32;
	return w_commit(w, dgi_put_uvarint(p, z));
}

uint8_t *dgi_put_uvarint_long(uint8_t *p, uint64_t v)
{
	/* eight bytes that all continue, then the top 8 bits */
	uint64_t x = dgi_varint_spread(v & 0x00FFFFFFFFFFFFFFull) | 0x8080808080808080ull;
	uint64_t hi = v >> 56;
	memcpy(p, &x, 8);
	if (hi < 0x80) {
		p[8] = (uint8_t)hi;
		return p + 9;
	}
	p[8] = (uint8_t)(hi | 0x80);
	p[9] = 1;
	return p + 10;
}

dg_err dg_write_i64(dg_writer *w, int64_t v)
{
	uint8_t *p;
	uint64_t z = dgi_zigzag(v);
	if (DG_UNLIKELY(z >> 56)) {
		/* 9 or 10 bytes (a random 64-bit id): a word store, not a loop */
		W_BEGIN(w, z >> 63 ? 11 : 10, p);
		*p++ = TAG_I64;
		return w_commit(w, dgi_put_uvarint_long(p, z));
	}
	W_BEGIN(w, 1 + dgi_uvarint_len(z), p);
	*p++ = TAG_I64;
	return w_commit(w, dgi_put_uvarint(p, z));
}

dg_err dgi_write_run(dg_writer *w, const int64_t *v, unsigned ni, const dg_bytes *b,
    unsigned nb)
{
	if (ni + nb == 0)
		return DG_OK; /* (as no call: nothing to reserve) */
	size_t room = 11 * (size_t)ni;
	bool plain = w->w_err == DG_OK;
	for (unsigned j = 0; j < nb && plain; j++) {
		plain = b[j].len <= UINT32_MAX;
		room += 6 + (size_t)b[j].len;
	}
	struct dgi_wframe *f = w->w_depth > 0 ? &w->w_stack[w->w_depth - 1] : NULL;
	dg_buf *buf = w->w_buf;
	if (DG_UNLIKELY(!plain || (f != NULL && (f->f_left < ni + nb || f->f_desc->cmp != NULL)) ||
	    buf->cap - buf->len < room)) {
		/* value by value: their errors and sorted keys, and a
		 * buffer without the run's worst case free (each value's own
		 * reservation: a fixed buffer the run fits fills, one that
		 * grows grows by what the values take) */
		dg_err e = DG_OK;
		for (unsigned i = 0; i < ni && e == DG_OK; i++)
			e = dg_write_i64(w, v[i]);
		for (unsigned j = 0; j < nb && e == DG_OK; j++)
			e = dg_write_bytes(w, b[j].ptr, b[j].len);
		return e;
	}
	uint8_t *p = buf->data + buf->len;
	for (unsigned i = 0; i < ni; i++) {
		uint64_t z = dgi_zigzag(v[i]);
		*p++ = TAG_I64;
		p = DG_UNLIKELY(z >> 56) ? dgi_put_uvarint_long(p, z) : dgi_put_uvarint_fast(p, z);
	}
	for (unsigned j = 0; j < nb; j++) {
		if (b[j].ptr == NULL) { /* as dg_write_bytes: a NULL */
			*p++ = TAG_NULL;
			continue;
		}
		uint32_t len = (uint32_t)b[j].len;
		*p++ = TAG_BYTES;
		if (DG_LIKELY(len < 0x80))
			*p++ = (uint8_t)len;
		else
			p = dgi_put_uvarint(p, len);
		dgi_copy(p, b[j].ptr, len);
		p += len;
	}
	w->w_buf->len = (size_t)(p - w->w_buf->data);
	if (f != NULL)
		f->f_left -= ni + nb;
	return DG_OK;
}

dg_err dgi_write_encoded(dg_writer *w, const uint8_t *p, size_t n)
{
	uint8_t *q;
	W_BEGIN(w, n, q);
	memcpy(q, p, n);
	return w_commit(w, q + n);
}

dg_err dg_write_float(dg_writer *w, float v)
{
	uint8_t *p;
	W_BEGIN(w, 5, p);
	*p++ = TAG_FLOAT;
	memcpy(p, &v, 4);
	return w_commit(w, p + 4);
}

dg_err dg_write_double(dg_writer *w, double v)
{
	uint8_t *p;
	W_BEGIN(w, 9, p);
	*p++ = TAG_DOUBLE;
	memcpy(p, &v, 8);
	return w_commit(w, p + 8);
}

static dg_err write_blob(dg_writer *w, uint8_t tag, const void *s, size_t len)
{
	uint8_t *p;
	if (len > UINT32_MAX)
		return dgi_w_fail(w, DG_ERR_LIMIT);
	W_BEGIN(w, 1 + dgi_uvarint_len(len) + len, p);
	*p++ = tag;
	if (DG_LIKELY(len < 0x80))
		*p++ = (uint8_t)len;
	else
		p = dgi_put_uvarint(p, len);
	dgi_copy(p, s, len);
	w->w_buf->len = (size_t)(p + len - w->w_buf->data);
	if (w->w_depth > 0) {
		/* a short string or bytes key of a sorted container: ordered
		 * right here by its prefix when that decides */
		struct dgi_wframe *f = &w->w_stack[w->w_depth - 1];
		if (DG_UNLIKELY(f->f_desc->cmp != NULL) && len < 0x80 &&
		    (f->f_kind == DG_SORTED_SET || (f->f_left & 1) == 0)) {
			uint64_t pfx = be_prefix(s, len);
			if (f->f_prevlen != 0 && f->f_pfxtag == tag && pfx > f->f_pfx) {
				f->f_prev = f->f_key;
				f->f_prevlen = (uint32_t)(len + 2);
				f->f_pfx = pfx;
				f->f_left--;
				return w->w_err;
			}
		}
	}
	elem_done(w);
	return w->w_err;
}

dg_err dg_write_str(dg_writer *w, const char *s, size_t len)
{
	if (s == NULL)
		return dg_write_null(w);
	if (!dgi_utf8_ok((const uint8_t *)s, len))
		return dgi_w_fail(w, DG_ERR_UTF8);
	return write_blob(w, TAG_STRING, s, len);
}

dg_err dg_write_bytes(dg_writer *w, const void *b, size_t len)
{
	if (b == NULL)
		return dg_write_null(w);
	return write_blob(w, TAG_BYTES, b, len);
}

dg_err dg_write_uuid(dg_writer *w, const dg_uuid *u)
{
	uint8_t *p;
	W_BEGIN(w, 17, p);
	*p++ = TAG_UUID;
	memcpy(p, u->b, 16);
	return w_commit(w, p + 16);
}

dg_err dg_write_timestamp(dg_writer *w, dg_timestamp ts)
{
	uint8_t *p;
	if (ts.ns < 0 || ts.ns > 999999)
		return dgi_w_fail(w, DG_ERR_RANGE);
	uint64_t z = dgi_zigzag(ts.ms);
	W_BEGIN(w, 1 + dgi_uvarint_len(z) + dgi_uvarint_len((uint32_t)ts.ns), p);
	*p++ = TAG_TIMESTAMP;
	p = dgi_put_uvarint(p, z);
	return w_commit(w, dgi_put_uvarint(p, (uint32_t)ts.ns));
}

dg_err dg_write_enum(dg_writer *w, uint32_t type_id, int32_t ordinal)
{
	uint8_t *p;
	if (ordinal < 0)
		return dgi_w_fail(w, DG_ERR_RANGE);
	W_BEGIN(w, 1 + 4 + dgi_uvarint_len((uint32_t)ordinal), p);
	*p++ = TAG_ENUM;
	dgi_st32(p, type_id);
	return w_commit(w, dgi_put_uvarint(p + 4, (uint32_t)ordinal));
}

dg_err dg_write_array(dg_writer *w, dg_kind elem, const void *data,
    uint32_t count)
{
	unsigned width = dgi_elem_width(elem);
	uint8_t *p;
	if (width == 0 || (data == NULL && count > 0))
		return dgi_w_fail(w, DG_ERR_INVAL);
	if (data == NULL)
		return dg_write_null(w);
	size_t n = (size_t)count * width;
	W_BEGIN(w, 2 + dgi_uvarint_len(count) + n, p);
	*p++ = TAG_ARRAY;
	*p++ = (uint8_t)elem;
	p = dgi_put_uvarint(p, count);
	if (elem == DG_BOOL) {
		const bool *b = data;
		for (uint32_t i = 0; i < count; i++)
			p[i] = b[i] ? 1 : 0;
	} else if (n) {
		memcpy(p, data, n);
	}
	return w_commit(w, p + n);
}

/* ---- containers ---- */

static dg_err begin(dg_writer *w, dg_kind kind, uint8_t tag, uint64_t values,
    uint32_t count)
{
	uint8_t *p;
	if (w->w_depth >= DG_MAX_DEPTH)
		return dgi_w_fail(w, DG_ERR_DEPTH);
	const dg_desc *d = w->w_reg ? w->w_reg->builtin[kind] : NULL;
	if (d == NULL)
		return dgi_w_fail(w, DG_ERR_INVAL); /* no registry */
	W_BEGIN(w, 1 + dgi_uvarint_len(count), p);
	*p++ = tag;
	p = dgi_put_uvarint(p, count);
	w->w_buf->len = (size_t)(p - w->w_buf->data);
	struct dgi_wframe *f = &w->w_stack[w->w_depth++];
	f->f_desc = d;
	f->f_left = (uint32_t)values;
	f->f_kind = (uint8_t)kind;
	f->f_prevlen = 0;
	f->f_pfxtag = 0;
	f->f_base = (kind == DG_LIST || kind == DG_SET || kind == DG_MAP) ?
	    w->w_nsch : NO_SCOPE;
	return DG_OK;
}

dg_err dg_write_list_begin(dg_writer *w, uint32_t count)
{
	return begin(w, DG_LIST, TAG_LIST, count, count);
}

dg_err dg_write_set_begin(dg_writer *w, uint32_t count)
{
	return begin(w, DG_SET, TAG_SET, count, count);
}

dg_err dg_write_sorted_set_begin(dg_writer *w, uint32_t count)
{
	return begin(w, DG_SORTED_SET, TAG_SORTED_SET, count, count);
}

dg_err dg_write_map_begin(dg_writer *w, uint32_t entries)
{
	if (entries > UINT32_MAX / 2)
		return dgi_w_fail(w, DG_ERR_LIMIT);
	return begin(w, DG_MAP, TAG_MAP, (uint64_t)entries * 2, entries);
}

dg_err dg_write_sorted_map_begin(dg_writer *w, uint32_t entries)
{
	if (entries > UINT32_MAX / 2)
		return dgi_w_fail(w, DG_ERR_LIMIT);
	return begin(w, DG_SORTED_MAP, TAG_SORTED_MAP, (uint64_t)entries * 2,
	    entries);
}

dg_err dg_write_end(dg_writer *w)
{
	if (w->w_err != DG_OK)
		return w->w_err;
	if (w->w_depth == 0 || w->w_stack[w->w_depth - 1].f_left != 0)
		return dgi_w_fail(w, DG_ERR_STATE);
	struct dgi_wframe *f = &w->w_stack[--w->w_depth];
	if (f->f_base != NO_SCOPE)
		w->w_nsch = f->f_base;
	elem_done(w); /* the container itself, as an element of its parent */
	return w->w_err;
}

/* ---- objects ---- */

/* Tag and header of an object value.  Inside a LIST, SET or MAP the first
 * object of a schema is a DEF, later ones a one-byte REF; elsewhere (top
 * level, sorted containers, full scope table) a self-contained OBJ. */
static inline dg_err object_header(dg_writer *w, const dg_desc *d)
{
	uint8_t *p, tag = d->primary ? TAG_OBJ : TAG_OBJ_S;
	if (w->w_depth > 0) {
		uint32_t base = w->w_stack[w->w_depth - 1].f_base;
		if (base != NO_SCOPE) {
			for (uint32_t i = w->w_nsch; i-- > base;) {
				if (w->w_sch[i] == d) {
					if ((p = w_room(w, 1)) == NULL)
						return w->w_err;
					*p = (uint8_t)(TAG_REF | (i - base));
					w->w_buf->len++;
					return DG_OK;
				}
			}
			if (w->w_nsch < DG_SCOPE_MAX)
				tag = d->primary ? TAG_DEF : TAG_DEF_S;
		}
	}
	/* exactly the header's bytes: a fixed buffer that holds the object
	 * must not fail for want of slack */
	if ((p = w_room(w, d->primary ? 5 : 9)) == NULL)
		return w->w_err;
	if (tag == TAG_DEF || tag == TAG_DEF_S)
		w->w_sch[w->w_nsch++] = d;
	*p++ = tag;
	dgi_st32(p, d->type_id);
	p += 4;
	if (!d->primary) {
		dgi_st32(p, d->schema_id);
		p += 4;
	}
	w->w_buf->len = (size_t)(p - w->w_buf->data);
	return DG_OK;
}

dg_err dgi_w_object_header(dg_writer *w, const dg_desc *d)
{
	return object_header(w, d);
}

/* dgi_obj_encode reserves room for the worst case of every field at once;
 * a fixed buffer (the only kind that says DG_ERR_NOSPACE) may lack that
 * headroom although the object fits.  Encode into scratch memory then, and
 * copy the exact bytes: DG_ERR_NOSPACE only when the object does not fit. */
DG_NOINLINE static dg_err encode_tight(dg_writer *w, const dg_desc *d,
    const void *obj, size_t at, bool *zero)
{
	uint8_t stack[1024];   /* small objects: no allocation */
	dg_buf *fixed = w->w_buf, tmp;
	dg_buf_init_fixed(&tmp, stack, sizeof(stack));
	fixed->len = at;
	w->w_err = DG_OK; /* a nested header may have failed on the fixed buffer */
	w->w_buf = &tmp;
	dg_err e = dgi_obj_encode(w, d, obj, 1, zero);
	if (e == DG_ERR_NOSPACE) {
		dg_buf_init(&tmp);
		w->w_err = DG_OK;
		e = dgi_obj_encode(w, d, obj, 1, zero);
	}
	w->w_buf = fixed;
	if (e == DG_OK && fixed->cap - at < tmp.len)
		e = DG_ERR_NOSPACE;
	if (e == DG_OK) {
		memcpy(fixed->data + at, tmp.data, tmp.len);
		fixed->len = at + tmp.len;
	}
	dg_buf_free(&tmp);
	return e;
}

static inline dg_err write_object(dg_writer *w, const dg_desc *d,
    const void *obj)
{
	if (elem_begin(w) != DG_OK)
		return w->w_err;
	size_t tag = w->w_buf->len;
	if (object_header(w, d) != DG_OK)
		return w->w_err;
	size_t at = w->w_buf->len;
	bool zero;
	dg_err e = dgi_obj_encode(w, d, obj, 1, &zero);
	if (DG_UNLIKELY(e == DG_ERR_NOSPACE))
		e = encode_tight(w, d, obj, at, &zero);
	if (e != DG_OK)
		return dgi_w_fail(w, e);
	if (zero)
		w->w_buf->data[tag] = dgi_tag_zero(w->w_buf->data[tag]);
	elem_done(w);
	return w->w_err;
}

/* dgi_write_top_flat could not write the object (a fixed buffer without
 * the headroom, or an error): the general path, from where it started. */
DG_NOINLINE dg_err dgi_w_top_failed(dg_writer *w, const dg_desc *d,
    const void *obj)
{
	return write_object(w, d, obj);
}

dg_err dg_write_object(dg_writer *w, const dg_desc *d, const void *obj)
{
	/* a top-level object (a key, a value, a message body) of a flat
	 * descriptor: no container to account in and no scope, so an
	 * OBJ/OBJ_S header, written with the body in one function (a tail
	 * call: no frame here) */
	if (DG_LIKELY(d != NULL && obj != NULL && d->flat && w->w_depth == 0 &&
	    w->w_err == DG_OK))
		return dgi_write_top_flat(w, d, obj);
	if (d == NULL || obj == NULL || !d->bound || d->builtin)
		return dgi_w_fail(w, DG_ERR_INVAL);
	return write_object(w, d, obj);
}

dg_err dg_write_objects(dg_writer *w, const dg_desc *d, const void *objs,
    size_t stride, uint32_t count)
{
	const uint8_t *p = objs;
	if (d == NULL || (objs == NULL && count > 0) || !d->bound || d->builtin ||
	    stride < d->struct_size)
		return dgi_w_fail(w, DG_ERR_INVAL);
	if (count == 0 || write_object(w, d, p) != DG_OK)
		return w->w_err;
	/* After the first, in a scope that now holds d: every object is a REF
	 * to the same index, and the frame can take them all — account once,
	 * then only encode bodies. */
	struct dgi_wframe *f = w->w_depth ? &w->w_stack[w->w_depth - 1] : NULL;
	uint32_t idx = 0;
	bool fast = f != NULL && f->f_base != NO_SCOPE && f->f_desc->cmp == NULL &&
	    f->f_left >= count - 1;
	if (fast) {
		fast = false;
		for (uint32_t i = w->w_nsch; i-- > f->f_base;) {
			if (w->w_sch[i] == d) {
				idx = i - f->f_base;
				fast = true;
				break;
			}
		}
	}
	for (uint32_t i = 1; i < count; i++) {
		p += stride;
		if (!fast) {
			if (write_object(w, d, p) != DG_OK)
				break;
			continue;
		}
		dg_buf *b = w->w_buf;
		dg_err e;
		if (b->cap == b->len && (e = dg_buf_reserve(b, 1)) != DG_OK)
			return dgi_w_fail(w, e);
		size_t at = b->len;
		b->data[b->len++] = (uint8_t)(TAG_REF | idx);
		bool zero;
		e = dgi_obj_encode(w, d, p, 1, &zero);
		if (DG_UNLIKELY(e == DG_ERR_NOSPACE))
			e = encode_tight(w, d, p, at + 1, &zero);
		if (e != DG_OK)
			return dgi_w_fail(w, e);
		if (zero)
			b->data[at] = (uint8_t)(TAG_REF_Z | idx);
		f->f_left--;
	}
	return w->w_err;
}

/* Copies a complete encoded value after checking it deeply. */
static dg_err write_raw(dg_writer *w, const dg_raw *raw)
{
	uint8_t *p;
	if (raw->ptr == NULL)
		return dg_write_null(w);
	const uint8_t *q = raw->ptr;
	dg_err e = dgi_skip_tagged(w->w_reg, &q, raw->ptr + raw->len, 0, true);
	if (e == DG_OK && q != raw->ptr + raw->len)
		e = DG_ERR_BAD_LENGTH;
	if (e != DG_OK)
		return dgi_w_fail(w, e);
	W_BEGIN(w, raw->len, p);
	memcpy(p, raw->ptr, raw->len);
	return w_commit(w, p + raw->len);
}

dg_err dg_write_value(dg_writer *w, const dg_value *v)
{
	switch (v->kind) {
	case DG_NULL: return dg_write_null(w);
	case DG_BOOL: return dg_write_bool(w, v->v.b);
	case DG_I8:
		if (v->v.i < INT8_MIN || v->v.i > INT8_MAX)
			return dgi_w_fail(w, DG_ERR_RANGE);
		return dg_write_i8(w, (int8_t)v->v.i);
	case DG_I16:
		if (v->v.i < INT16_MIN || v->v.i > INT16_MAX)
			return dgi_w_fail(w, DG_ERR_RANGE);
		return dg_write_i16(w, (int16_t)v->v.i);
	case DG_I32:
		if (v->v.i < INT32_MIN || v->v.i > INT32_MAX)
			return dgi_w_fail(w, DG_ERR_RANGE);
		return dg_write_i32(w, (int32_t)v->v.i);
	case DG_I64: return dg_write_i64(w, v->v.i);
	case DG_FLOAT: return dg_write_float(w, v->v.f);
	case DG_DOUBLE: return dg_write_double(w, v->v.d);
	case DG_STRING: return dg_write_str(w, v->v.str.ptr, v->v.str.len);
	case DG_BYTES: return dg_write_bytes(w, v->v.bytes.ptr, v->v.bytes.len);
	case DG_UUID: return dg_write_uuid(w, &v->v.uuid);
	case DG_TIMESTAMP: return dg_write_timestamp(w, v->v.ts);
	case DG_ENUM: return dg_write_enum(w, v->v.en.type_id, v->v.en.ordinal);
	case DG_ARRAY:
		return dg_write_array(w, v->v.arr.elem, v->v.arr.a.ptr, v->v.arr.a.count);
	case DG_LIST: case DG_SET: case DG_SORTED_SET: case DG_MAP:
	case DG_SORTED_MAP:
		if (v->v.coll.raw.ptr == NULL)
			return dgi_w_fail(w, DG_ERR_INVAL);
		return write_raw(w, &v->v.coll.raw);
	case DG_ANY: return write_raw(w, &v->v.raw);
	case DG_OBJECT:
		if (elem_begin(w) != DG_OK)
			return w->w_err;
		if (dgi_write_bobj(w, &v->v.obj) != DG_OK)
			return w->w_err;
		elem_done(w);
		return w->w_err;
	default:
		return dgi_w_fail(w, DG_ERR_INVAL);
	}
}
