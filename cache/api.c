/*
 * api.c — the public cache operations (cache.h): raw byte strings encoded
 * as BYTES values, encoded values, registered structs, batches.
 */
#include "cache_int.h"
#include "marshal/marshal_int.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KEY_STACK 256
#define VAL_STACK 1024

/* ---- encoding raw byte strings as BYTES values ---- */

static size_t bytes_enc_len(size_t n)
{
	return 1 + dgi_uvarint_len(n) + n;
}

static void bytes_enc(uint8_t *out, const void *p, size_t n)
{
	*out++ = TAG_BYTES;
	out = dgi_put_uvarint(out, n);
	memcpy(out, p, n);
}

dg_err dg_bytes_of(const uint8_t *enc, size_t len, const uint8_t **p, size_t *n)
{
	if (enc == NULL || len < 2 || enc[0] != TAG_BYTES)
		return DG_ERR_TYPE_MISMATCH;
	const uint8_t *q = enc + 1;
	uint64_t l;
	dg_err e = dgi_get_uvarint(&q, enc + len, &l);
	if (e != DG_OK)
		return e;
	if (l != (uint64_t)(enc + len - q))
		return DG_ERR_BAD_LENGTH;
	*p = q;
	*n = (size_t)l;
	return DG_OK;
}

/* A BYTES encoding of p/n in stack memory when it fits, else in a
 * per-thread buffer reused by later calls — freed when the thread exits
 * (tl_key's destructor).  Before, a thread that had put a large value
 * left its buffer behind when it ended: up to 8 MiB for every dgctl
 * connection that put one (LeakSanitizer, test_admin_put_large_values). */
static _Thread_local dg_buf tl_bufs[3]; /* key, value, expected value */
static _Thread_local bool tl_keyed;
static pthread_key_t tl_key;
static pthread_once_t tl_once = PTHREAD_ONCE_INIT;
static bool tl_key_ok;

static void tl_bufs_free(void *p)
{
	dg_buf *b = p;
	for (int i = 0; i < 3; i++)
		dg_buf_free(&b[i]);
}

static void tl_key_init(void)
{
	tl_key_ok = pthread_key_create(&tl_key, tl_bufs_free) == 0;
}

static const uint8_t *enc_in(int which, uint8_t *stack, size_t cap, const void *p,
    size_t n, size_t *len)
{
	size_t need = bytes_enc_len(n);
	uint8_t *out = stack;
	if (need > cap) {
		if (!tl_keyed) {
			pthread_once(&tl_once, tl_key_init);
			if (!tl_key_ok || pthread_setspecific(tl_key, tl_bufs) != 0)
				return NULL; /* (nothing to free it at exit: DG_ERR_NOMEM) */
			tl_keyed = true;
		}
		dg_buf *b = &tl_bufs[which];
		b->len = 0;
		if (dg_buf_reserve(b, need) != DG_OK)
			return NULL;
		out = b->data;
	}
	bytes_enc(out, p, n);
	*len = need;
	return out;
}

/* Appends the byte string inside an encoded BYTES value to out. */
dg_err dgi_unwrap_to(const uint8_t *enc, size_t len, dg_buf *out)
{
	const uint8_t *p;
	size_t n;
	dg_err e = dg_bytes_of(enc, len, &p, &n);
	if (e != DG_OK || out == NULL)
		return e;
	if ((e = dg_buf_reserve(out, n)) != DG_OK)
		return e;
	if (n != 0) /* (an empty buffer's data may be NULL) */
		memcpy(out->data + out->len, p, n);
	out->len += n;
	return DG_OK;
}

dg_err dgi_append(dg_buf *out, const uint8_t *p, size_t n)
{
	if (out == NULL)
		return DG_OK;
	dg_err e = dg_buf_reserve(out, n);
	if (e != DG_OK)
		return e;
	if (n != 0) /* (an empty buffer's data may be NULL) */
		memcpy(out->data + out->len, p, n);
	out->len += n;
	return DG_OK;
}

/* ---- the public operations ----
 * Each runs inside a section (cache_int.h, "Lifetime"; dgi_update_op and
 * dgi_get_op enter it): the partitions
 * and affinity it reaches stay allocated until it returns, however long
 * it waits. */

#define ENC_KEY(key, klen)                                                     \
	uint8_t kst[KEY_STACK];                                                \
	size_t kenc_len;                                                       \
	if (key == NULL || klen == 0 || klen > DG_KEY_MAX - 8)                 \
		return DG_ERR_INVAL;                                           \
	const uint8_t *kenc = enc_in(0, kst, sizeof(kst), key, klen, &kenc_len); \
	if (kenc == NULL)                                                      \
		return DG_ERR_NOMEM

#define ENC_VAL(val, vlen)                                                     \
	uint8_t vst[VAL_STACK];                                                \
	size_t venc_len;                                                       \
	if ((val == NULL && vlen != 0) || vlen > DG_VALUE_MAX - 8)             \
		return DG_ERR_INVAL;                                           \
	const uint8_t *venc = enc_in(1, vst, sizeof(vst), val ? val : (const void *)"", \
	    vlen, &venc_len);                                                  \
	if (venc == NULL)                                                      \
		return DG_ERR_NOMEM

/* dg_cache_put past the short put (out of line: its stack buffers are not
 * the short put's frame). */
__attribute__((noinline)) dg_err dgi_put_general(dg_cache *c, const void *key, size_t klen,
    const void *val, size_t vlen)
{
	ENC_KEY(key, klen);
	ENC_VAL(val, vlen);
	return dgi_update(c, OP_PUT, kenc, kenc_len, NULL, 0, venc, venc_len, NULL, NULL);
}

dg_err dg_cache_put(dg_cache *c, const void *key, size_t klen, const void *val, size_t vlen)
{
	if (__builtin_expect(klen - 8 < 120, 1) && c != NULL && key != NULL && val != NULL &&
	    vlen <= DG_VALUE_MAX - 8)
		return dgi_put_raw(c, key, (uint32_t)klen, val, (uint32_t)vlen);
	return dgi_put_general(c, key, klen, val, vlen);
}

/* A conditional operation: *done (when not NULL) says whether it wrote. */
static dg_err flagged(dg_cache *c, int op, const uint8_t *key, size_t klen, const uint8_t *exp,
    size_t elen, const uint8_t *val, size_t vlen, bool *done)
{
	int64_t flag = 0;
	dg_err e = dgi_update(c, op, key, klen, exp, elen, val, vlen, &flag, NULL);
	if (done != NULL)
		*done = e == DG_OK && flag;
	return e;
}

dg_err dg_cache_put_if_absent(dg_cache *c, const void *key, size_t klen, const void *val,
    size_t vlen, bool *put)
{
	ENC_KEY(key, klen);
	ENC_VAL(val, vlen);
	return flagged(c, OP_PUT_IF_ABSENT, kenc, kenc_len, NULL, 0, venc, venc_len, put);
}

dg_err dg_cache_replace(dg_cache *c, const void *key, size_t klen, const void *val,
    size_t vlen, bool *replaced)
{
	ENC_KEY(key, klen);
	ENC_VAL(val, vlen);
	return flagged(c, OP_REPLACE, kenc, kenc_len, NULL, 0, venc, venc_len, replaced);
}

dg_err dg_cache_get_and_put(dg_cache *c, const void *key, size_t klen, const void *val,
    size_t vlen, dg_buf *old, bool *had)
{
	ENC_KEY(key, klen);
	ENC_VAL(val, vlen);
	int64_t flag = 0;
	dg_buf tmp;
	dg_buf_init(&tmp);
	dg_err e = dgi_update(c, OP_GET_AND_PUT, kenc, kenc_len, NULL, 0, venc, venc_len, &flag, &tmp);
	if (had != NULL)
		*had = e == DG_OK && flag;
	if (e == DG_OK && flag && old != NULL)
		e = dgi_unwrap_to(tmp.data, tmp.len, old);
	dg_buf_free(&tmp);
	return e;
}

dg_err dg_cache_remove(dg_cache *c, const void *key, size_t klen, bool *removed)
{
	ENC_KEY(key, klen);
	return flagged(c, OP_REMOVE, kenc, kenc_len, NULL, 0, NULL, 0, removed);
}

#define ENC_EXP(exp, elen)                                                     \
	uint8_t est[VAL_STACK];                                                \
	size_t eenc_len;                                                       \
	if ((exp == NULL && elen != 0) || elen > DG_VALUE_MAX - 8)             \
		return DG_ERR_INVAL;                                           \
	const uint8_t *eenc = enc_in(2, est, sizeof(est), exp ? exp : (const void *)"", \
	    elen, &eenc_len);                                                  \
	if (eenc == NULL)                                                      \
		return DG_ERR_NOMEM

/* Compare-and-set (OP_REPLACE_IF_EQ, OP_REMOVE_IF_EQ): the expected value
 * is encoded like the new one and compared with the stored encoding. */

dg_err dg_cache_replace_if_equals(dg_cache *c, const void *key, size_t klen,
    const void *expected, size_t elen, const void *val, size_t vlen, bool *replaced)
{
	ENC_KEY(key, klen);
	ENC_EXP(expected, elen);
	ENC_VAL(val, vlen);
	return flagged(c, OP_REPLACE_IF_EQ, kenc, kenc_len, eenc, eenc_len, venc, venc_len, replaced);
}

dg_err dg_cache_remove_if_equals(dg_cache *c, const void *key, size_t klen,
    const void *expected, size_t elen, bool *removed)
{
	ENC_KEY(key, klen);
	ENC_EXP(expected, elen);
	return flagged(c, OP_REMOVE_IF_EQ, kenc, kenc_len, eenc, eenc_len, NULL, 0, removed);
}

/* dg_cache_get of a key of another size (out of line: its stack buffer is
 * not the common get's frame). */
static __attribute__((noinline)) dg_err get_other(dg_cache *c, const void *key, size_t klen,
    dg_buf *val)
{
	ENC_KEY(key, klen);
	if (val == NULL)
		return DG_ERR_INVAL;
	return dgi_get_enc(c, kenc, kenc_len, val, true);
}

dg_err dg_cache_get(dg_cache *c, const void *key, size_t klen, dg_buf *val)
{
	if (klen - 8 < 120) /* (8..127 bytes: the common key size) */
		return dgi_get_raw(c, key, klen, val);
	return get_other(c, key, klen, val);
}

dg_err dg_cache_contains(dg_cache *c, const void *key, size_t klen, bool *present)
{
	ENC_KEY(key, klen);
	if (present == NULL)
		return DG_ERR_INVAL;
	dg_err e = dgi_get_enc(c, kenc, kenc_len, NULL, false);
	*present = e == DG_OK;
	return e == DG_ERR_NOT_FOUND ? DG_OK : e;
}

/* ---- typed ---- */

static dg_err check_val(const uint8_t *p, size_t n, size_t max)
{
	return p == NULL || n == 0 || n > max ? DG_ERR_INVAL : DG_OK;
}

dg_err dg_cache_put_val(dg_cache *c, const uint8_t *key, size_t klen, const uint8_t *val,
    size_t vlen)
{
	if (check_val(key, klen, DG_KEY_MAX) != DG_OK || check_val(val, vlen, DG_VALUE_MAX) != DG_OK)
		return DG_ERR_INVAL;
	return dgi_update(c, OP_PUT, key, klen, NULL, 0, val, vlen, NULL, NULL);
}

dg_err dg_cache_get_val(dg_cache *c, const uint8_t *key, size_t klen, dg_buf *val)
{
	if (check_val(key, klen, DG_KEY_MAX) != DG_OK || val == NULL)
		return DG_ERR_INVAL;
	return dgi_get_enc(c, key, klen, val, false);
}

dg_err dg_cache_remove_val(dg_cache *c, const uint8_t *key, size_t klen, bool *removed)
{
	if (check_val(key, klen, DG_KEY_MAX) != DG_OK)
		return DG_ERR_INVAL;
	return flagged(c, OP_REMOVE, key, klen, NULL, 0, NULL, 0, removed);
}

dg_err dg_cache_put_if_absent_val(dg_cache *c, const uint8_t *key, size_t klen,
    const uint8_t *val, size_t vlen, bool *put)
{
	if (check_val(key, klen, DG_KEY_MAX) != DG_OK || check_val(val, vlen, DG_VALUE_MAX) != DG_OK)
		return DG_ERR_INVAL;
	return flagged(c, OP_PUT_IF_ABSENT, key, klen, NULL, 0, val, vlen, put);
}

dg_err dg_cache_replace_val(dg_cache *c, const uint8_t *key, size_t klen,
    const uint8_t *val, size_t vlen, bool *replaced)
{
	if (check_val(key, klen, DG_KEY_MAX) != DG_OK || check_val(val, vlen, DG_VALUE_MAX) != DG_OK)
		return DG_ERR_INVAL;
	return flagged(c, OP_REPLACE, key, klen, NULL, 0, val, vlen, replaced);
}

dg_err dg_cache_get_and_put_val(dg_cache *c, const uint8_t *key, size_t klen,
    const uint8_t *val, size_t vlen, dg_buf *old, bool *had)
{
	if (check_val(key, klen, DG_KEY_MAX) != DG_OK || check_val(val, vlen, DG_VALUE_MAX) != DG_OK)
		return DG_ERR_INVAL;
	int64_t flag = 0;
	size_t len0 = old != NULL ? old->len : 0;
	dg_buf tmp;
	dg_buf_init(&tmp);
	dg_err e = dgi_update(c, OP_GET_AND_PUT, key, klen, NULL, 0, val, vlen, &flag, old != NULL ? old : &tmp);
	if (old != NULL && (e != DG_OK || !flag))
		old->len = len0;
	dg_buf_free(&tmp);
	if (had != NULL)
		*had = e == DG_OK && flag;
	return e;
}

dg_err dg_cache_contains_val(dg_cache *c, const uint8_t *key, size_t klen, bool *present)
{
	if (check_val(key, klen, DG_KEY_MAX) != DG_OK || present == NULL)
		return DG_ERR_INVAL;
	dg_err e = dgi_get_enc(c, key, klen, NULL, false);
	*present = e == DG_OK;
	return e == DG_ERR_NOT_FOUND ? DG_OK : e;
}

dg_err dg_cache_replace_if_equals_val(dg_cache *c, const uint8_t *key, size_t klen,
    const uint8_t *expected, size_t elen, const uint8_t *val, size_t vlen, bool *replaced)
{
	if (check_val(key, klen, DG_KEY_MAX) != DG_OK || check_val(val, vlen, DG_VALUE_MAX) != DG_OK ||
	    check_val(expected, elen, DG_VALUE_MAX) != DG_OK)
		return DG_ERR_INVAL;
	return flagged(c, OP_REPLACE_IF_EQ, key, klen, expected, elen, val, vlen, replaced);
}

dg_err dg_cache_remove_if_equals_val(dg_cache *c, const uint8_t *key, size_t klen,
    const uint8_t *expected, size_t elen, bool *removed)
{
	if (check_val(key, klen, DG_KEY_MAX) != DG_OK ||
	    check_val(expected, elen, DG_VALUE_MAX) != DG_OK)
		return DG_ERR_INVAL;
	return flagged(c, OP_REMOVE_IF_EQ, key, klen, expected, elen, NULL, 0, removed);
}

/* ---- batches ----
 * An ATOMIC cache runs a batch's keys all at once (batch.c); a
 * TRANSACTIONAL one one after another (each joins the thread's tx, or is
 * its own one-operation tx). */

/* Items for batch.c: the keys (and values) as given (encoded: the _val
 * flavour) or BYTES-encoded into enc (raw).  DG_ERR_INVAL for a bad key or
 * value; *out (dgi_free) holds n items. */
static dg_err batch_items(const dg_cache *c, const dg_kv *kvs, size_t n, bool vals, bool raw,
    bool write, dgi_bscratch *s, dgi_bitem **out)
{
	dg_buf *enc = &s->enc;
	enc->len = 0;
	dgi_bitem *it = dgi_bscratch_room((void **)&s->items, &s->items_cap,
	    (n ? n : 1) * sizeof(*it));
	if (it == NULL)
		return DG_ERR_NOMEM;
	size_t need = 0;
	for (size_t i = 0; i < n; i++) {
		/* the single calls' checks (ENC_KEY, ENC_VAL, check_val; a
		 * persistent cache's encoded key length, update.c) */
		size_t kenc = raw ? bytes_enc_len(kvs[i].klen) : kvs[i].klen;
		bool bad = kvs[i].key == NULL || kvs[i].klen == 0 ||
		    (write && c->cfg.persistence && kenc > DG_PERSIST_KEY_MAX) ||
		    kvs[i].klen > (raw ? DG_KEY_MAX - 8 : DG_KEY_MAX) ||
		    (vals && (raw ? (kvs[i].val == NULL && kvs[i].vlen != 0) ||
		    kvs[i].vlen > DG_VALUE_MAX - 8 :
		    kvs[i].val == NULL || kvs[i].vlen == 0 || kvs[i].vlen > DG_VALUE_MAX));
		if (bad)
			return DG_ERR_INVAL;
		if (raw)
			need += kenc + (vals ? bytes_enc_len(kvs[i].vlen) : 0);
	}
	if (raw && need > 0 && dg_buf_reserve(enc, need) != DG_OK)
		return DG_ERR_NOMEM;
	for (size_t i = 0; i < n; i++) {
		memset(&it[i], 0, sizeof(it[i]));
		if (!raw) {
			it[i].key = kvs[i].key;
			it[i].klen = (uint32_t)kvs[i].klen;
			it[i].val = vals ? kvs[i].val : NULL;
			it[i].vlen = vals ? (uint32_t)kvs[i].vlen : 0;
			continue;
		}
		uint8_t *k = enc->data + enc->len;
		bytes_enc(k, kvs[i].key, kvs[i].klen);
		it[i].key = k;
		it[i].klen = (uint32_t)bytes_enc_len(kvs[i].klen);
		enc->len += it[i].klen;
		if (vals) {
			uint8_t *v = enc->data + enc->len;
			bytes_enc(v, kvs[i].val ? kvs[i].val : (const void *)"", kvs[i].vlen);
			it[i].val = v;
			it[i].vlen = (uint32_t)bytes_enc_len(kvs[i].vlen);
			enc->len += it[i].vlen;
		}
	}
	*out = it;
	return DG_OK;
}

static bool batched(const dg_cache *c)
{
	return c != NULL && c->cfg.atomicity != DG_TRANSACTIONAL;
}

static dg_err batch_update(dg_cache *c, int op, const dg_kv *kvs, size_t n, bool raw,
    size_t *removed)
{
	dgi_bscratch *s = dgi_bscratch_take();
	if (s == NULL)
		return DG_ERR_NOMEM;
	dgi_bitem *it;
	dg_err e = batch_items(c, kvs, n, op == OP_PUT, raw, true, s, &it);
	if (e != DG_OK) {
		dgi_bscratch_put(s);
		return e;
	}
	e = dgi_batch_update(c, op, it, n);
	size_t r = 0;
	for (size_t i = 0; i < n; i++)
		r += it[i].err == DG_OK && it[i].flag;
	if (removed != NULL && e == DG_OK)
		*removed = r;
	dgi_bscratch_put(s);
	return e;
}

static dg_err batch_get(dg_cache *c, dg_kv *kvs, size_t n, dg_buf *vals, size_t *found,
    bool raw)
{
	dgi_bscratch *s = dgi_bscratch_take();
	if (s == NULL)
		return DG_ERR_NOMEM;
	dgi_bitem *it;
	dg_err e = batch_items(c, kvs, n, false, raw, false, s, &it);
	if (e != DG_OK) {
		dgi_bscratch_put(s);
		return e;
	}
	size_t f = 0;
	e = dgi_batch_get(c, it, n, raw, vals, &f);
	if (e == DG_OK) {
		/* pointers only now: vals may have moved while growing */
		for (size_t i = 0; i < n; i++) {
			kvs[i].val = it[i].flag ? vals->data + it[i].at : NULL;
			kvs[i].vlen = it[i].flag ? it[i].vlen : 0;
		}
		if (found != NULL)
			*found = f;
	}
	dgi_bscratch_put(s);
	return e;
}

/* ---- batches one key at a time, through the raw or encoded flavour ---- */

typedef dg_err (*put_one_fn)(dg_cache *c, const void *key, size_t klen, const void *val,
    size_t vlen);
typedef dg_err (*get_one_fn)(dg_cache *c, const void *key, size_t klen, dg_buf *val);
typedef dg_err (*remove_one_fn)(dg_cache *c, const void *key, size_t klen, bool *removed);

static dg_err put_all_with(dg_cache *c, const dg_kv *kvs, size_t n, put_one_fn one, bool raw)
{
	if (kvs == NULL && n != 0)
		return DG_ERR_INVAL;
	if (batched(c))
		return batch_update(c, OP_PUT, kvs, n, raw, NULL);
	for (size_t i = 0; i < n; i++) {
		dg_err e = one(c, kvs[i].key, kvs[i].klen, kvs[i].val, kvs[i].vlen);
		if (e != DG_OK)
			return e;
	}
	return DG_OK;
}

static dg_err get_all_with(dg_cache *c, dg_kv *kvs, size_t n, dg_buf *vals, size_t *found,
    get_one_fn one, bool raw)
{
	if ((kvs == NULL && n != 0) || vals == NULL)
		return DG_ERR_INVAL;
	if (batched(c))
		return batch_get(c, kvs, n, vals, found, raw);
	size_t f = 0;
	size_t *offs = n ? dgi_alloc(n * sizeof(*offs)) : NULL;
	if (n && offs == NULL)
		return DG_ERR_NOMEM;
	for (size_t i = 0; i < n; i++) {
		size_t at = vals->len;
		dg_err e = one(c, kvs[i].key, kvs[i].klen, vals);
		if (e != DG_OK && e != DG_ERR_NOT_FOUND) {
			dgi_free(offs);
			return e;
		}
		offs[i] = e == DG_OK ? at : SIZE_MAX;
		kvs[i].vlen = e == DG_OK ? vals->len - at : 0;
		f += e == DG_OK;
	}
	/* pointers only now: vals may have moved while growing */
	for (size_t i = 0; i < n; i++)
		kvs[i].val = offs[i] == SIZE_MAX ? NULL : vals->data + offs[i];
	dgi_free(offs);
	if (found != NULL)
		*found = f;
	return DG_OK;
}

static dg_err remove_all_with(dg_cache *c, const dg_kv *kvs, size_t n, size_t *removed,
    remove_one_fn one, bool raw)
{
	if (kvs == NULL && n != 0)
		return DG_ERR_INVAL;
	if (batched(c))
		return batch_update(c, OP_REMOVE, kvs, n, raw, removed);
	size_t r = 0;
	for (size_t i = 0; i < n; i++) {
		bool rm = false;
		dg_err e = one(c, kvs[i].key, kvs[i].klen, &rm);
		if (e != DG_OK)
			return e;
		r += rm;
	}
	if (removed != NULL)
		*removed = r;
	return DG_OK;
}

/* One key of a batch, as the single-key calls do it but untimed: a batch
 * is one operation (the encoded flavours with the raw flavour's signature). */
static dg_err put_raw_one(dg_cache *c, const void *key, size_t klen, const void *val,
    size_t vlen)
{
	ENC_KEY(key, klen);
	ENC_VAL(val, vlen);
	return dgi_update_op(c, OP_PUT, kenc, kenc_len, NULL, 0, venc, venc_len, NULL, NULL);
}

static dg_err get_raw_one(dg_cache *c, const void *key, size_t klen, dg_buf *val)
{
	ENC_KEY(key, klen);
	return dgi_get_op(c, kenc, kenc_len, val, true);
}

static dg_err remove_raw_one(dg_cache *c, const void *key, size_t klen, bool *removed)
{
	ENC_KEY(key, klen);
	int64_t flag = 0;
	dg_err e = dgi_update_op(c, OP_REMOVE, kenc, kenc_len, NULL, 0, NULL, 0, &flag, NULL);
	*removed = e == DG_OK && flag;
	return e;
}

static dg_err put_val_one(dg_cache *c, const void *key, size_t klen, const void *val,
    size_t vlen)
{
	if (check_val(key, klen, DG_KEY_MAX) != DG_OK || check_val(val, vlen, DG_VALUE_MAX) != DG_OK)
		return DG_ERR_INVAL;
	return dgi_update_op(c, OP_PUT, key, klen, NULL, 0, val, vlen, NULL, NULL);
}

static dg_err get_val_one(dg_cache *c, const void *key, size_t klen, dg_buf *val)
{
	if (check_val(key, klen, DG_KEY_MAX) != DG_OK)
		return DG_ERR_INVAL;
	return dgi_get_op(c, key, klen, val, false);
}

static dg_err remove_val_one(dg_cache *c, const void *key, size_t klen, bool *removed)
{
	if (check_val(key, klen, DG_KEY_MAX) != DG_OK)
		return DG_ERR_INVAL;
	int64_t flag = 0;
	dg_err e = dgi_update_op(c, OP_REMOVE, key, klen, NULL, 0, NULL, 0, &flag, NULL);
	*removed = e == DG_OK && flag;
	return e;
}

dg_err dg_cache_put_all(dg_cache *c, const dg_kv *kvs, size_t n)
{
	uint64_t t0 = dgi_lat_ticks();
	return dgi_timed(c, DG_OP_PUT, t0, put_all_with(c, kvs, n, put_raw_one, true));
}

dg_err dg_cache_get_all(dg_cache *c, dg_kv *kvs, size_t n, dg_buf *vals, size_t *found)
{
	uint64_t t0 = dgi_lat_ticks();
	return dgi_timed(c, DG_OP_GET, t0, get_all_with(c, kvs, n, vals, found, get_raw_one, true));
}

dg_err dg_cache_remove_all(dg_cache *c, const dg_kv *kvs, size_t n, size_t *removed)
{
	uint64_t t0 = dgi_lat_ticks();
	return dgi_timed(c, DG_OP_REMOVE, t0, remove_all_with(c, kvs, n, removed, remove_raw_one, true));
}

dg_err dg_cache_put_all_val(dg_cache *c, const dg_kv *kvs, size_t n)
{
	uint64_t t0 = dgi_lat_ticks();
	return dgi_timed(c, DG_OP_PUT, t0, put_all_with(c, kvs, n, put_val_one, false));
}

dg_err dg_cache_get_all_val(dg_cache *c, dg_kv *kvs, size_t n, dg_buf *vals, size_t *found)
{
	uint64_t t0 = dgi_lat_ticks();
	return dgi_timed(c, DG_OP_GET, t0, get_all_with(c, kvs, n, vals, found, get_val_one, false));
}

dg_err dg_cache_remove_all_val(dg_cache *c, const dg_kv *kvs, size_t n, size_t *removed)
{
	uint64_t t0 = dgi_lat_ticks();
	return dgi_timed(c, DG_OP_REMOVE, t0, remove_all_with(c, kvs, n, removed, remove_val_one, false));
}

/* Encodes one struct with its descriptor into b (reset first). */
static dg_err enc_obj(dgi_grid *g, const dg_desc *d, const void *obj, dg_buf *b)
{
	dg_writer w;
	b->len = 0;
	dg_writer_init(&w, g->reg, b);
	dg_write_object(&w, d, obj);
	return dg_writer_finish(&w);
}

/* Encodes obj into b: in st (cap bytes) when it fits, else on the heap
 * (obj_buf_free frees it). */
static dg_err enc_obj_in(dgi_grid *g, const dg_desc *d, const void *obj, dg_buf *b,
    uint8_t *st, size_t cap)
{
	dg_buf_init_fixed(b, st, cap);
	dg_err e = enc_obj(g, d, obj, b);
	if (e == DG_ERR_NOSPACE) {
		dg_buf_init(b);
		e = enc_obj(g, d, obj, b);
	}
	return e;
}

static void obj_buf_free(dg_buf *b, const uint8_t *st)
{
	if (b->data != st)
		dg_buf_free(b);
}

dg_err dg_cache_put_obj(dg_cache *c, const dg_desc *kd, const void *key, const dg_desc *vd,
    const void *val)
{
	if (c == NULL || kd == NULL || key == NULL || vd == NULL || val == NULL)
		return DG_ERR_INVAL;
	uint8_t kst[KEY_STACK], vst[VAL_STACK];
	dg_buf kb, vb;
	dg_err e = enc_obj_in(c->g, kd, key, &kb, kst, sizeof(kst));
	dg_err ve = enc_obj_in(c->g, vd, val, &vb, vst, sizeof(vst));
	if (e == DG_OK)
		e = ve;
	if (e == DG_OK)
		e = dg_cache_put_val(c, kb.data, kb.len, vb.data, vb.len);
	obj_buf_free(&kb, kst);
	obj_buf_free(&vb, vst);
	return e;
}

dg_err dg_cache_get_obj(dg_cache *c, const dg_desc *kd, const void *key, const dg_desc *vd,
    void *val, dg_arena *arena)
{
	if (c == NULL || kd == NULL || key == NULL || vd == NULL || val == NULL)
		return DG_ERR_INVAL;
	uint8_t kst[KEY_STACK];
	dg_buf kb, vb;
	dg_err e = enc_obj_in(c->g, kd, key, &kb, kst, sizeof(kst));
	dg_buf_init(&vb);
	if (e == DG_OK)
		e = dgi_get_enc(c, kb.data, kb.len, &vb, false);
	if (e == DG_OK)
		e = dg_decode_object(c->g->reg, vd, vb.data, vb.len, val, arena);
	obj_buf_free(&kb, kst);
	dg_buf_free(&vb);
	return e;
}

/* The compare-and-set calls on structs: key, expected and (val NULL: a
 * removal) the new value, each encoded once. */
static dg_err cas_obj(dg_cache *c, int op, const dg_desc *kd, const void *key,
    const dg_desc *vd, const void *expected, const void *val, bool *done)
{
	if (c == NULL || kd == NULL || key == NULL || vd == NULL || expected == NULL ||
	    (op == OP_REPLACE_IF_EQ && val == NULL))
		return DG_ERR_INVAL;
	uint8_t kst[KEY_STACK], est[VAL_STACK], vst[VAL_STACK];
	dg_buf kb, eb, vb;
	dg_err e = enc_obj_in(c->g, kd, key, &kb, kst, sizeof(kst));
	dg_err ee = enc_obj_in(c->g, vd, expected, &eb, est, sizeof(est));
	dg_err ve = DG_OK;
	dg_buf_init_fixed(&vb, vst, sizeof(vst));
	if (val != NULL)
		ve = enc_obj_in(c->g, vd, val, &vb, vst, sizeof(vst));
	if (e == DG_OK)
		e = ee != DG_OK ? ee : ve;
	if (e == DG_OK)
		e = flagged(c, op, kb.data, kb.len, eb.data, eb.len, val != NULL ? vb.data : NULL,
		    vb.len, done);
	obj_buf_free(&kb, kst);
	obj_buf_free(&eb, est);
	obj_buf_free(&vb, vst);
	return e;
}

dg_err dg_cache_replace_if_equals_obj(dg_cache *c, const dg_desc *kd, const void *key,
    const dg_desc *vd, const void *expected, const void *val, bool *replaced)
{
	return cas_obj(c, OP_REPLACE_IF_EQ, kd, key, vd, expected, val, replaced);
}

dg_err dg_cache_remove_if_equals_obj(dg_cache *c, const dg_desc *kd, const void *key,
    const dg_desc *vd, const void *expected, bool *removed)
{
	return cas_obj(c, OP_REMOVE_IF_EQ, kd, key, vd, expected, NULL, removed);
}

/* ---- idle verify's test hook (cache.h, "idle verify") ---- */

dg_err dgi_cache_debug_put_local(dg_cache *c, const void *key, size_t klen, const void *val,
    size_t vlen)
{
	if (c == NULL)
		return DG_ERR_INVAL;
	ENC_KEY(key, klen);
	ENC_VAL(val, vlen);
	uint64_t hash = dgi_key_hash(kenc, kenc_len);
	dgi_epoch_enter();
	if (atomic_load(&c->dead)) {
		dgi_epoch_leave();
		return DG_ERR_CLOSED;
	}
	dgi_part *pt = &c->parts[dgi_part_of(hash, c->cfg.partitions)];
	dg_err e = DG_OK;
	dgi_part_lock(pt);
	dgi_entry *en = dgi_part_find(pt, hash, kenc, (uint32_t)kenc_len);
	if (en == NULL || (en->flags & DGI_ENTRY_TOMB)) {
		e = DG_ERR_NOT_FOUND;
	} else {
		/* copies: the entry may be freed and replaced when val is bigger */
		dgi_pver ver = dgi_entry_ver(en);
		int64_t expire = dgi_entry_expire(en);
		uint64_t op_node, op_seq;
		dgi_entry_op(pt, en, &op_node, &op_seq);
		if (!dgi_part_overwrite(pt, en, venc, (uint32_t)venc_len, &ver, expire, op_node,
		    op_seq))
			e = dgi_part_set(pt, hash, kenc, (uint32_t)kenc_len, venc, (uint32_t)venc_len,
			    &ver, expire, op_node, op_seq, 0, NULL);
	}
	dgi_part_unlock(pt);
	dgi_epoch_leave();
	return e;
}
