/*
 * txn_entries_test.c — unit tests of txn/txentries.c, a tx's entry set.
 *
 * What is tested, each against txentries.h's contract:
 *   - write, find and at: entries in first-touched order, bad arguments
 *     refused (NULL set, empty key);
 *   - a rewrite that fits reuses the value's space (same pointer), a larger
 *     one moves; the entry itself never moves;
 *   - a read of a written key keeps the written value and marks the read;
 *     only the first read records the version;
 *   - remove after put: op REMOVE, val NULL; a later put reuses the space;
 *   - one key in two caches is two entries;
 *   - 10 000 keys: the index grows, every key is found, order and entry
 *     pointers are kept;
 *   - a tx of 8 keys x 16 B x 100 B allocates nothing after create and
 *     dgi_txents_bytes is the struct's size;
 *   - reset keeps the first chunk: the next small tx allocates nothing;
 *   - the k-th allocation failing, for every k, during a 1000-key fill with
 *     rewrites: DG_ERR_NOMEM and the set holds exactly what succeeded before;
 *   - keys with the same caller hash are told apart.
 *
 * Entry point: dgt_txents_tests(), called by the test runner.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "txn/txentries.h"
#include "marshal/marshal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dgt_txents_tests(void);

/* ------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------ */

enum { CACHE = 5, KEYLEN = 16, VALLEN = 100 };

static uint64_t fnv(const void *p, size_t n)
{
	const uint8_t *b = p;
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

/* Key i: "k<i>" padded to KEYLEN bytes.  Returns its length. */
static uint32_t mkkey(uint8_t *buf, unsigned i)
{
	memset(buf, '.', KEYLEN);
	int n = snprintf((char *)buf, KEYLEN, "k%u", i);
	buf[n] = '.';
	return KEYLEN;
}

/* A value of len bytes derived from seed. */
static void mkval(uint8_t *buf, uint32_t len, unsigned seed)
{
	for (uint32_t j = 0; j < len; j++)
		buf[j] = (uint8_t)(seed * 31u + j * 7u + 1u);
}

static dg_err put(dgi_txents *t, uint32_t cache, unsigned i, uint32_t vlen,
    unsigned seed, dgi_txent **out)
{
	uint8_t k[KEYLEN], v[1024];
	uint32_t kl = mkkey(k, i);
	mkval(v, vlen, seed);
	return dgi_txents_write(t, cache, i % 1024, k, kl, fnv(k, kl), v, vlen,
	    out);
}

static dgi_txent *get(dgi_txents *t, uint32_t cache, unsigned i)
{
	uint8_t k[KEYLEN];
	uint32_t kl = mkkey(k, i);
	return dgi_txents_find(t, cache, k, kl, fnv(k, kl));
}

static void check_val(const dgi_txent *e, uint32_t vlen, unsigned seed)
{
	uint8_t v[1024];
	mkval(v, vlen, seed);
	assert_non_null(e);
	assert_non_null(e->val);
	assert_int_equal(e->vlen, vlen);
	assert_memory_equal(e->val, v, vlen);
}

static void check_key(const dgi_txent *e, uint32_t cache, unsigned i)
{
	uint8_t k[KEYLEN];
	uint32_t kl = mkkey(k, i);
	assert_non_null(e);
	assert_int_equal(e->cache_id, cache);
	assert_int_equal(e->klen, kl);
	assert_memory_equal(e->key, k, kl);
	assert_true(e->hash == fnv(k, kl));
}

static uint64_t allocs_now(void)
{
	dgi_alloc_stats s;
	dgi_alloc_get_stats(&s);
	return s.allocs;
}

/* ------------------------------------------------------------------------
 * Tests
 * ------------------------------------------------------------------------ */

static void test_write_find_order(void **state)
{
	(void)state;
	dgi_txents *t;
	assert_int_equal(dgi_txents_create(&t), DG_OK);
	assert_int_equal(dgi_txents_count(t), 0);
	assert_null(dgi_txents_at(t, 0));
	unsigned order[5] = { 40, 3, 17, 9, 25 };
	for (unsigned j = 0; j < 5; j++) {
		dgi_txent *e = NULL;
		assert_int_equal(put(t, CACHE, order[j], 10 + j, order[j], &e),
		    DG_OK);
		assert_ptr_equal(e, dgi_txents_at(t, j));
	}
	assert_int_equal(dgi_txents_count(t), 5);
	for (unsigned j = 0; j < 5; j++) {
		dgi_txent *e = dgi_txents_at(t, j);
		check_key(e, CACHE, order[j]);
		check_val(e, 10 + j, order[j]);
		assert_int_equal(e->op, DGI_TXOP_PUT);
		assert_false(e->read);
		assert_int_equal(e->part, order[j]);
		assert_ptr_equal(get(t, CACHE, order[j]), e);
	}
	assert_null(get(t, CACHE, 4));
	assert_null(get(t, CACHE + 1, 40));
	assert_null(dgi_txents_at(t, 5));
	uint8_t k[1] = { 'x' }, v[1] = { 1 };
	assert_int_equal(dgi_txents_write(t, CACHE, 0, k, 0, 1, v, 1, NULL),
	    DG_ERR_INVAL);
	assert_int_equal(dgi_txents_write(NULL, CACHE, 0, k, 1, 1, v, 1, NULL),
	    DG_ERR_INVAL);
	assert_int_equal(dgi_txents_read(t, CACHE, 0, k, 0, 1, v, 1, 0, 0, 0,
	    NULL), DG_ERR_INVAL);
	assert_int_equal(dgi_txents_read(NULL, CACHE, 0, k, 1, 1, v, 1, 0, 0, 0,
	    NULL), DG_ERR_INVAL);
	assert_int_equal(dgi_txents_count(t), 5);
	/* A PUT of 0 bytes has a non-NULL value. */
	dgi_txent *e;
	assert_int_equal(put(t, CACHE, 77, 0, 0, &e), DG_OK);
	assert_int_equal(e->op, DGI_TXOP_PUT);
	assert_non_null(e->val);
	assert_int_equal(e->vlen, 0);
	dgi_txents_destroy(t);
	dgi_txents_destroy(NULL);
}

static void test_rewrite_in_place(void **state)
{
	(void)state;
	dgi_txents *t;
	assert_int_equal(dgi_txents_create(&t), DG_OK);
	dgi_txent *e, *e2;
	assert_int_equal(put(t, CACHE, 1, 100, 1, &e), DG_OK);
	const uint8_t *p = e->val;
	assert_int_equal(put(t, CACHE, 1, 50, 2, &e2), DG_OK);
	assert_ptr_equal(e2, e);
	assert_ptr_equal(e->val, p);
	check_val(e, 50, 2);
	assert_int_equal(put(t, CACHE, 1, 100, 3, &e2), DG_OK);
	assert_ptr_equal(e->val, p);
	check_val(e, 100, 3);
	assert_int_equal(put(t, CACHE, 1, 300, 4, &e2), DG_OK);
	assert_ptr_equal(e2, e);
	assert_ptr_not_equal(e->val, p);
	check_val(e, 300, 4);
	const uint8_t *p2 = e->val;
	assert_int_equal(put(t, CACHE, 1, 200, 5, NULL), DG_OK);
	assert_ptr_equal(e->val, p2);
	check_val(e, 200, 5);
	/* Rewriting with the entry's own bytes (overlapping) is safe. */
	uint8_t k[KEYLEN];
	uint32_t kl = mkkey(k, 1);
	assert_int_equal(dgi_txents_write(t, CACHE, 1, k, kl, fnv(k, kl),
	    e->val + 10, 100, NULL), DG_OK);
	uint8_t v[300];
	mkval(v, 200, 5);
	assert_memory_equal(e->val, v + 10, 100);
	assert_int_equal(dgi_txents_count(t), 1);
	dgi_txents_destroy(t);
}

static void test_read_after_write(void **state)
{
	(void)state;
	dgi_txents *t;
	assert_int_equal(dgi_txents_create(&t), DG_OK);
	uint8_t k[KEYLEN], other[VALLEN];
	uint32_t kl = mkkey(k, 7);
	uint64_t h = fnv(k, kl);
	mkval(other, VALLEN, 99);
	dgi_txent *e, *e2;
	assert_int_equal(put(t, CACHE, 7, 60, 7, &e), DG_OK);
	assert_int_equal(dgi_txents_read(t, CACHE, 7, k, kl, h, other, VALLEN,
	    3, 4, 5, &e2), DG_OK);
	assert_ptr_equal(e2, e);
	assert_int_equal(e->op, DGI_TXOP_PUT);
	assert_true(e->read);
	assert_true(e->found);
	check_val(e, 60, 7);
	assert_int_equal(e->ver_topver, 3);
	assert_int_equal(e->ver_counter, 4);
	assert_int_equal(e->ver_order, 5);
	assert_int_equal(dgi_txents_read(t, CACHE, 7, k, kl, h, NULL, 0,
	    8, 9, 10, NULL), DG_OK);
	assert_int_equal(e->ver_topver, 3);
	assert_int_equal(e->ver_counter, 4);
	assert_int_equal(e->ver_order, 5);
	assert_true(e->found);
	check_val(e, 60, 7);

	/* Read first: the value read is kept; a later read changes nothing;
	 * a write then keeps the read mark and version. */
	kl = mkkey(k, 8);
	h = fnv(k, kl);
	assert_int_equal(dgi_txents_read(t, CACHE, 8, k, kl, h, other, VALLEN,
	    1, 2, 3, &e), DG_OK);
	assert_int_equal(e->op, DGI_TXOP_READ);
	assert_true(e->read && e->found);
	check_val(e, VALLEN, 99);
	assert_int_equal(dgi_txents_read(t, CACHE, 8, k, kl, h, NULL, 0,
	    4, 5, 6, NULL), DG_OK);
	assert_true(e->found);
	assert_int_equal(e->ver_counter, 2);
	check_val(e, VALLEN, 99);
	const uint8_t *p = e->val;
	assert_int_equal(put(t, CACHE, 8, 40, 8, &e2), DG_OK);
	assert_ptr_equal(e2, e);
	assert_int_equal(e->op, DGI_TXOP_PUT);
	assert_ptr_equal(e->val, p);
	check_val(e, 40, 8);
	assert_true(e->read);
	assert_int_equal(e->ver_topver, 1);

	/* A read that found nothing. */
	kl = mkkey(k, 9);
	assert_int_equal(dgi_txents_read(t, CACHE, 9, k, kl, fnv(k, kl), NULL,
	    0, 0, 0, 0, &e), DG_OK);
	assert_int_equal(e->op, DGI_TXOP_READ);
	assert_true(e->read);
	assert_false(e->found);
	assert_null(e->val);
	assert_int_equal(dgi_txents_count(t), 3);
	dgi_txents_destroy(t);
}

static void test_remove_after_put(void **state)
{
	(void)state;
	dgi_txents *t;
	assert_int_equal(dgi_txents_create(&t), DG_OK);
	uint8_t k[KEYLEN];
	uint32_t kl = mkkey(k, 3);
	dgi_txent *e, *e2;
	assert_int_equal(put(t, CACHE, 3, 80, 3, &e), DG_OK);
	const uint8_t *p = e->val;
	assert_int_equal(dgi_txents_write(t, CACHE, 3, k, kl, fnv(k, kl), NULL,
	    0, &e2), DG_OK);
	assert_ptr_equal(e2, e);
	assert_int_equal(e->op, DGI_TXOP_REMOVE);
	assert_null(e->val);
	assert_int_equal(e->vlen, 0);
	assert_ptr_equal(get(t, CACHE, 3), e);
	assert_int_equal(put(t, CACHE, 3, 70, 4, NULL), DG_OK);
	assert_int_equal(e->op, DGI_TXOP_PUT);
	assert_ptr_equal(e->val, p);
	check_val(e, 70, 4);
	/* A remove of a key never touched creates its entry. */
	kl = mkkey(k, 4);
	assert_int_equal(dgi_txents_write(t, CACHE, 4, k, kl, fnv(k, kl), NULL,
	    0, &e), DG_OK);
	assert_int_equal(e->op, DGI_TXOP_REMOVE);
	assert_null(e->val);
	assert_int_equal(dgi_txents_count(t), 2);
	dgi_txents_destroy(t);
}

static void test_two_caches(void **state)
{
	(void)state;
	dgi_txents *t;
	assert_int_equal(dgi_txents_create(&t), DG_OK);
	dgi_txent *a, *b;
	assert_int_equal(put(t, 1, 5, 20, 1, &a), DG_OK);
	assert_int_equal(put(t, 2, 5, 30, 2, &b), DG_OK);
	assert_ptr_not_equal(a, b);
	assert_int_equal(dgi_txents_count(t), 2);
	assert_ptr_equal(get(t, 1, 5), a);
	assert_ptr_equal(get(t, 2, 5), b);
	assert_null(get(t, 3, 5));
	check_val(a, 20, 1);
	check_val(b, 30, 2);
	assert_int_equal(a->cache_id, 1);
	assert_int_equal(b->cache_id, 2);
	/* One key (one hash) in 64 caches: their probe runs cross. */
	for (uint32_t c = 3; c < 67; c++)
		assert_int_equal(put(t, c, 5, 10, c, NULL), DG_OK);
	assert_int_equal(dgi_txents_count(t), 66);
	for (uint32_t c = 1; c < 67; c++) {
		dgi_txent *e = get(t, c, 5);
		assert_ptr_equal(e, dgi_txents_at(t, c - 1));
		assert_int_equal(e->cache_id, c);
	}
	dgi_txents_destroy(t);
}

static void test_many_keys(void **state)
{
	(void)state;
	enum { N = 10000, KEEP = 100 };
	dgi_txents *t;
	assert_int_equal(dgi_txents_create(&t), DG_OK);
	size_t b0 = dgi_txents_bytes(t);
	dgi_txent *first[KEEP];
	for (unsigned i = 0; i < N; i++) {
		dgi_txent *e;
		assert_int_equal(put(t, CACHE, i, i % 200, i, &e), DG_OK);
		if (i < KEEP)
			first[i] = e;
	}
	assert_int_equal(dgi_txents_count(t), N);
	for (unsigned i = 0; i < N; i++) {
		dgi_txent *e = get(t, CACHE, i);
		assert_ptr_equal(e, dgi_txents_at(t, i));
		check_key(e, CACHE, i);
		check_val(e, i % 200, i);
		if (i < KEEP)
			assert_ptr_equal(e, first[i]);
	}
	assert_null(get(t, CACHE, N));
	assert_true(dgi_txents_bytes(t) > b0);
	dgi_txents_destroy(t);
}

/* 8 keys x 16 B x 100 B, each written, read and rewritten. */
static void small_tx(dgi_txents *t, unsigned base)
{
	for (unsigned i = 0; i < 8; i++)
		assert_int_equal(put(t, CACHE, base + i, VALLEN, i, NULL), DG_OK);
	for (unsigned i = 0; i < 8; i++) {
		uint8_t k[KEYLEN], v[VALLEN];
		uint32_t kl = mkkey(k, base + i);
		mkval(v, VALLEN, 50 + i);
		assert_int_equal(dgi_txents_read(t, CACHE, 0, k, kl, fnv(k, kl),
		    v, VALLEN, 1, i, 1, NULL), DG_OK);
		assert_int_equal(put(t, CACHE, base + i, VALLEN - 10, i + 1,
		    NULL), DG_OK);
	}
	assert_int_equal(dgi_txents_count(t), 8);
	for (unsigned i = 0; i < 8; i++) {
		dgi_txent *e = get(t, CACHE, base + i);
		assert_ptr_equal(e, dgi_txents_at(t, i));
		check_val(e, VALLEN - 10, i + 1);
		assert_true(e->read);
	}
}

static void test_small_tx_no_alloc(void **state)
{
	(void)state;
	dgi_alloc_stats s0, s1;
	dgi_alloc_get_stats(&s0);
	dgi_txents *t;
	assert_int_equal(dgi_txents_create(&t), DG_OK);
	dgi_alloc_get_stats(&s1);
	assert_int_equal(s1.allocs - s0.allocs, 1);
	size_t created = (size_t)(s1.bytes - s0.bytes);
	assert_int_equal(dgi_txents_bytes(t), created);
	small_tx(t, 0);
	assert_int_equal(allocs_now(), s1.allocs);
	assert_int_equal(dgi_txents_bytes(t), created);
	print_message("      8-key tx: dgi_txents_bytes = %zu\n",
	    dgi_txents_bytes(t));
	dgi_txents_destroy(t);
}

static void test_reset_reuse(void **state)
{
	(void)state;
	dgi_txents *t;
	assert_int_equal(dgi_txents_create(&t), DG_OK);
	size_t b0 = dgi_txents_bytes(t);
	dgi_alloc_stats s0, s1, s2;
	dgi_alloc_get_stats(&s0);
	for (unsigned i = 0; i < 1000; i++)
		assert_int_equal(put(t, CACHE, i, VALLEN, i, NULL), DG_OK);
	dgi_alloc_get_stats(&s1);
	assert_true(s1.allocs > s0.allocs);
	assert_true(dgi_txents_bytes(t) > b0);
	dgi_txents_reset(t);
	dgi_alloc_get_stats(&s2);
	assert_int_equal(s2.frees - s0.frees, s1.allocs - s0.allocs);
	assert_int_equal(dgi_txents_bytes(t), b0);
	assert_int_equal(dgi_txents_count(t), 0);
	assert_null(dgi_txents_at(t, 0));
	assert_null(get(t, CACHE, 0));
	small_tx(t, 500);
	assert_null(get(t, CACHE, 0));
	assert_int_equal(allocs_now(), s2.allocs);
	assert_int_equal(dgi_txents_bytes(t), b0);
	dgi_txents_reset(t);
	small_tx(t, 0);
	assert_int_equal(allocs_now(), s2.allocs);
	/* A big tx after reset works as the first did. */
	dgi_txents_reset(t);
	for (unsigned i = 0; i < 1000; i++)
		assert_int_equal(put(t, CACHE, i, VALLEN, i + 1, NULL), DG_OK);
	for (unsigned i = 0; i < 1000; i++)
		check_val(get(t, CACHE, i), VALLEN, i + 1);
	dgi_txents_destroy(t);
}

/* The test's model of the set under fault injection: key i's value is
 * (len[i], seed[i]); len[i] < 0: absent. */
struct model {
	int len[1000];
	unsigned seed[1000];
	unsigned order[1000];
	unsigned n;
};

/* Step j of the fill: a new key, every third step also a rewrite of an
 * older key with a larger value (it moves) or, every fifth, a read. */
static dg_err fill_step(dgi_txents *t, struct model *m, unsigned j)
{
	uint32_t vlen = 20 + j % 150;
	dg_err rv = put(t, CACHE, j, vlen, j, NULL);
	if (rv != DG_OK)
		return rv;
	m->len[j] = (int)vlen;
	m->seed[j] = j;
	m->order[m->n++] = j;
	if (j % 3 != 0 || j == 0)
		return DG_OK;
	unsigned o = j / 2;
	uint32_t nlen = (uint32_t)m->len[o] + 200;
	if (nlen > 1000)
		nlen = 30;
	rv = put(t, CACHE, o, nlen, j + 7, NULL);
	if (rv != DG_OK)
		return rv;
	m->len[o] = (int)nlen;
	m->seed[o] = j + 7;
	return DG_OK;
}

static void check_model(dgi_txents *t, const struct model *m)
{
	assert_int_equal(dgi_txents_count(t), m->n);
	for (unsigned i = 0; i < m->n; i++) {
		unsigned key = m->order[i];
		dgi_txent *e = get(t, CACHE, key);
		assert_ptr_equal(e, dgi_txents_at(t, i));
		check_key(e, CACHE, key);
		check_val(e, (uint32_t)m->len[key], m->seed[key]);
	}
	for (unsigned key = 0; key < 1000; key++)
		if (m->len[key] < 0)
			assert_null(get(t, CACHE, key));
}

/* Fails the k-th allocation of a fill; returns whether one failed. */
static bool nomem_run(uint64_t k, struct model *m)
{
	dgi_txents *t;
	assert_int_equal(dgi_txents_create(&t), DG_OK);
	memset(m->len, -1, sizeof m->len);
	m->n = 0;
	dgi_alloc_stats s0, s1;
	dgi_alloc_get_stats(&s0);
	dgi_alloc_fail_nth(k);
	bool failed = false;
	for (unsigned j = 0; j < 1000 && !failed; j++) {
		dg_err rv = fill_step(t, m, j);
		if (rv != DG_OK) {
			assert_int_equal(rv, DG_ERR_NOMEM);
			failed = true;
		}
	}
	dgi_alloc_fail_nth(0);
	dgi_alloc_get_stats(&s1);
	assert_int_equal(s1.failed - s0.failed, failed ? 1 : 0);
	check_model(t, m);
	/* The set goes on working after the failure. */
	for (unsigned j = 0; j < 1000; j++)
		if (m->len[j] < 0)
			assert_int_equal(fill_step(t, m, j), DG_OK);
	check_model(t, m);
	dgi_txents_destroy(t);
	return failed;
}

static void test_nomem(void **state)
{
	(void)state;
	struct model *m = malloc(sizeof *m);
	assert_non_null(m);
	uint64_t k = 1;
	while (nomem_run(k, m))
		k++;
	assert_true(k > 5);   /* chunks and index arrays were allocated */
	print_message("      %llu allocation points failed in turn\n",
	    (unsigned long long)(k - 1));
	free(m);
	/* Failing create leaves nothing. */
	dgi_txents *t = NULL;
	dgi_alloc_fail_nth(1);
	assert_int_equal(dgi_txents_create(&t), DG_ERR_NOMEM);
	dgi_alloc_fail_nth(0);
	assert_null(t);
}

static void test_hash_collisions(void **state)
{
	(void)state;
	enum { N = 300 };
	dgi_txents *t;
	assert_int_equal(dgi_txents_create(&t), DG_OK);
	for (unsigned i = 0; i < N; i++) {
		uint8_t k[KEYLEN], v[8];
		uint32_t kl = mkkey(k, i);
		mkval(v, sizeof v, i);
		assert_int_equal(dgi_txents_write(t, CACHE, 0, k, kl, 42, v,
		    sizeof v, NULL), DG_OK);
	}
	assert_int_equal(dgi_txents_count(t), N);
	for (unsigned i = 0; i < N; i++) {
		uint8_t k[KEYLEN];
		uint32_t kl = mkkey(k, i);
		dgi_txent *e = dgi_txents_find(t, CACHE, k, kl, 42);
		assert_ptr_equal(e, dgi_txents_at(t, i));
		check_val(e, 8, i);
		/* Same bytes, shorter: another key. */
		assert_null(dgi_txents_find(t, CACHE, k, kl - 1, 42));
	}
	uint8_t k[KEYLEN];
	uint32_t kl = mkkey(k, N);
	assert_null(dgi_txents_find(t, CACHE, k, kl, 42));
	/* Same hash in another cache, and same key with another hash. */
	kl = mkkey(k, 0);
	assert_null(dgi_txents_find(t, CACHE + 1, k, kl, 42));
	assert_null(dgi_txents_find(t, CACHE, k, kl, 43));
	dgi_txents_destroy(t);
}

int dgt_txents_tests(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_write_find_order),
		cmocka_unit_test(test_rewrite_in_place),
		cmocka_unit_test(test_read_after_write),
		cmocka_unit_test(test_remove_after_put),
		cmocka_unit_test(test_two_caches),
		cmocka_unit_test(test_many_keys),
		cmocka_unit_test(test_small_tx_no_alloc),
		cmocka_unit_test(test_reset_reuse),
		cmocka_unit_test(test_nomem),
		cmocka_unit_test(test_hash_collisions),
	};
	return cmocka_run_group_tests_name("txents", tests, NULL, NULL);
}
