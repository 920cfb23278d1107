/*
 * cache_intmap_test.c — unit tests of cache/intmap.c, the int-keyed
 * open-addressing map readers use without a lock.
 *
 * What is tested, each against intmap.h's contract:
 *   - put/get/replace/del/count/each, and key 0 / NULL value refused;
 *   - probe chains: keys forced onto one home slot (the last one, so the
 *     chain wraps to slot 0) stay reachable when a middle or first member is
 *     deleted, re-inserted, or the table is rebuilt around the tombstones;
 *   - growth to ~100 000 keys (random ones and ones sharing their low 15
 *     bits), deleting every other one, re-inserting them;
 *   - allocation failure: the put that needs a new table returns
 *     DG_ERR_NOMEM and leaves the map as it was; puts that fit, replaces and
 *     deletes never allocate so they cannot fail; a failed init;
 *   - lookups (and count, replace, delete) allocate nothing;
 *   - 4 reader threads against a writer that republishes the table many
 *     times: keys always present are always found with their value, keys
 *     being inserted and deleted are found with their own value or not at
 *     all, keys never inserted are never found, and each() sees every
 *     always-present key exactly once.
 *
 * Entry point: dgt_intmap_tests(), called by the test runner.  The ASan and
 * TSan builds of this file are what prove "no use after free" and "no data
 * race" for the concurrent test.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "cache/intmap.h"
#include "marshal/marshal.h"
#include "marshal/mix.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int dgt_intmap_tests(void);

/* ------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------ */

/* The map's slot mix, to pick keys that share a home slot (the tests
 * still pass if the map mixes differently, they just stop exercising the
 * chains). */
static uint32_t mix32(uint32_t h)
{
	return dgi_mix32(h);
}

/* n keys > from whose mix ends in 16 one-bits: in any table of up to 65 536
 * slots they share the home slot cap-1, so their chain wraps to slot 0. */
static uint32_t colliding_keys(uint32_t *out, size_t n, uint32_t from)
{
	uint32_t k = from;
	for (size_t i = 0; i < n; i++) {
		do
			k++;
		while ((mix32(k) & 0xffffu) != 0xffffu);
		out[i] = k;
	}
	return k;
}

static uint64_t xorshift64(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return (x > y) - (x < y);
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* each() callback: counts visits and checks every value is the uint32 tag
 * holding its own key (all tests store such values). */
struct each_acc {
	size_t n;
	size_t bad;
	uint64_t key_sum;
};

static void each_count(void *ctx, uint32_t key, void *value)
{
	struct each_acc *acc = ctx;
	acc->n++;
	acc->key_sum += key;
	if (value == NULL || *(const uint32_t *)value != key)
		acc->bad++;
}

/* ------------------------------------------------------------------------
 * Basics
 * ------------------------------------------------------------------------ */

static void test_basics(void **state)
{
	dgi_intmap m;
	uint32_t tag[4] = { 5, 7, 9, 5 };   /* tag[3]: a second value for 5 */

	assert_int_equal(dgi_intmap_init(&m), DG_OK);
	assert_int_equal(dgi_intmap_count(&m), 0);
	assert_null(dgi_intmap_get(&m, 5));

	assert_int_equal(dgi_intmap_put(&m, 5, &tag[0]), DG_OK);
	assert_ptr_equal(dgi_intmap_get(&m, 5), &tag[0]);
	assert_null(dgi_intmap_get(&m, 6));
	assert_int_equal(dgi_intmap_count(&m), 1);

	/* Replace: same count, new value. */
	assert_int_equal(dgi_intmap_put(&m, 5, &tag[3]), DG_OK);
	assert_ptr_equal(dgi_intmap_get(&m, 5), &tag[3]);
	assert_int_equal(dgi_intmap_count(&m), 1);

	/* Key 0 and NULL values are refused and change nothing. */
	assert_int_equal(dgi_intmap_put(&m, 0, &tag[0]), DG_ERR_INVAL);
	assert_int_equal(dgi_intmap_put(&m, 7, NULL), DG_ERR_INVAL);
	assert_int_equal(dgi_intmap_put(&m, 5, NULL), DG_ERR_INVAL);
	assert_null(dgi_intmap_get(&m, 0));
	assert_null(dgi_intmap_get(&m, 7));
	assert_ptr_equal(dgi_intmap_get(&m, 5), &tag[3]);
	assert_int_equal(dgi_intmap_count(&m), 1);
	assert_null(dgi_intmap_del(&m, 0));

	assert_int_equal(dgi_intmap_put(&m, 7, &tag[1]), DG_OK);
	assert_int_equal(dgi_intmap_put(&m, 9, &tag[2]), DG_OK);
	assert_int_equal(dgi_intmap_count(&m), 3);

	struct each_acc acc = { 0 };
	dgi_intmap_each(&m, each_count, &acc);
	assert_int_equal(acc.n, 3);
	assert_int_equal(acc.bad, 0);
	assert_int_equal(acc.key_sum, 5 + 7 + 9);

	/* Delete returns the value once; the key is gone for get and each. */
	assert_ptr_equal(dgi_intmap_del(&m, 7), &tag[1]);
	assert_null(dgi_intmap_del(&m, 7));
	assert_null(dgi_intmap_del(&m, 12345));
	assert_null(dgi_intmap_get(&m, 7));
	assert_int_equal(dgi_intmap_count(&m), 2);
	memset(&acc, 0, sizeof(acc));
	dgi_intmap_each(&m, each_count, &acc);
	assert_int_equal(acc.n, 2);
	assert_int_equal(acc.key_sum, 5 + 9);

	/* A deleted key comes back, counted once. */
	assert_int_equal(dgi_intmap_put(&m, 7, &tag[1]), DG_OK);
	assert_ptr_equal(dgi_intmap_get(&m, 7), &tag[1]);
	assert_int_equal(dgi_intmap_count(&m), 3);

	/* Extreme keys are ordinary keys. */
	uint32_t big = UINT32_MAX;
	assert_int_equal(dgi_intmap_put(&m, UINT32_MAX, &big), DG_OK);
	assert_ptr_equal(dgi_intmap_get(&m, UINT32_MAX), &big);
	assert_int_equal(dgi_intmap_count(&m), 4);

	dgi_intmap_destroy(&m);
}

/* ------------------------------------------------------------------------
 * Probe chains survive deletion
 * ------------------------------------------------------------------------ */

static void test_chain_middle_delete(void **state)
{
	dgi_intmap m;
	uint32_t k[4];   /* a, b, c, d: one home slot, the last */
	colliding_keys(k, 4, 0);

	assert_int_equal(dgi_intmap_init(&m), DG_OK);
	/* a, b, c take cap-1, 0, 1 in the first table. */
	for (int i = 0; i < 3; i++)
		assert_int_equal(dgi_intmap_put(&m, k[i], &k[i]), DG_OK);

	/* Delete the middle: c sits behind it and must still be found. */
	assert_ptr_equal(dgi_intmap_del(&m, k[1]), &k[1]);
	assert_null(dgi_intmap_get(&m, k[1]));
	assert_ptr_equal(dgi_intmap_get(&m, k[0]), &k[0]);
	assert_ptr_equal(dgi_intmap_get(&m, k[2]), &k[2]);
	assert_int_equal(dgi_intmap_count(&m), 2);

	/* A new key of the chain lands behind the hole, and b can come back. */
	assert_int_equal(dgi_intmap_put(&m, k[3], &k[3]), DG_OK);
	assert_ptr_equal(dgi_intmap_get(&m, k[3]), &k[3]);
	assert_ptr_equal(dgi_intmap_get(&m, k[2]), &k[2]);
	assert_int_equal(dgi_intmap_put(&m, k[1], &k[1]), DG_OK);
	assert_ptr_equal(dgi_intmap_get(&m, k[1]), &k[1]);
	assert_int_equal(dgi_intmap_count(&m), 4);

	/* Delete the head: everything behind it is still reachable. */
	assert_ptr_equal(dgi_intmap_del(&m, k[0]), &k[0]);
	assert_null(dgi_intmap_get(&m, k[0]));
	for (int i = 1; i < 4; i++)
		assert_ptr_equal(dgi_intmap_get(&m, k[i]), &k[i]);

	/* Rebuilds around the hole (many growths) keep the chain right. */
	static uint32_t more[300];
	for (uint32_t i = 0; i < 300; i++) {
		more[i] = 1000 + i;
		assert_int_equal(dgi_intmap_put(&m, more[i], &more[i]), DG_OK);
	}
	assert_null(dgi_intmap_get(&m, k[0]));
	for (int i = 1; i < 4; i++)
		assert_ptr_equal(dgi_intmap_get(&m, k[i]), &k[i]);
	for (uint32_t i = 0; i < 300; i++)
		assert_ptr_equal(dgi_intmap_get(&m, more[i]), &more[i]);
	assert_int_equal(dgi_intmap_count(&m), 303);

	dgi_intmap_destroy(&m);
}

/* ------------------------------------------------------------------------
 * Growth
 * ------------------------------------------------------------------------ */

#define GROW_N 100000u

static bool in_set(const uint32_t *sorted, size_t n, uint32_t key)
{
	return bsearch(&key, sorted, n, sizeof(*sorted), cmp_u32) != NULL;
}

/* Every key of keys[] is present iff its index has the given parity
 * (parity -1: all present); values are the uint32 holding the key. */
static void check_all(const dgi_intmap *m, const uint32_t *keys, size_t n,
    int parity)
{
	for (size_t i = 0; i < n; i++) {
		void *v = dgi_intmap_get(m, keys[i]);
		if (parity < 0 || (int)(i & 1) == parity)
			assert_ptr_equal(v, &keys[i]);
		else
			assert_null(v);
	}
}

static void test_growth(void **state)
{
	dgi_intmap m;
	uint32_t *keys = malloc(GROW_N * sizeof(*keys));
	uint32_t *sorted = malloc(GROW_N * sizeof(*keys));
	uint64_t rng = 0x9e3779b97f4a7c15u;
	size_t n = 0;

	assert_non_null(keys);
	assert_non_null(sorted);
	/* Half random, half sharing their low 15 bits (they would all land on
	 * one slot without the mix); then unique and shuffled. */
	for (uint32_t i = 1; i <= GROW_N / 2; i++) {
		uint32_t r = (uint32_t)xorshift64(&rng);
		sorted[n++] = r ? r : 1;
		sorted[n++] = (i << 15) | 0x1234u;
	}
	qsort(sorted, n, sizeof(*sorted), cmp_u32);
	size_t u = 0;
	for (size_t i = 0; i < n; i++)
		if (u == 0 || sorted[i] != sorted[u - 1])
			sorted[u++] = sorted[i];
	n = u;
	assert_true(n > GROW_N - 100);
	memcpy(keys, sorted, n * sizeof(*keys));
	for (size_t i = n - 1; i > 0; i--) {
		size_t j = xorshift64(&rng) % (i + 1);
		uint32_t t = keys[i];
		keys[i] = keys[j];
		keys[j] = t;
	}

	assert_int_equal(dgi_intmap_init(&m), DG_OK);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(dgi_intmap_put(&m, keys[i], &keys[i]), DG_OK);
		/* A key must be there right after its own insert, growth or not. */
		assert_ptr_equal(dgi_intmap_get(&m, keys[i]), &keys[i]);
	}
	assert_int_equal(dgi_intmap_count(&m), n);
	check_all(&m, keys, n, -1);

	/* Keys not inserted are not found. */
	for (int i = 0; i < 20000; i++) {
		uint32_t k = (uint32_t)xorshift64(&rng);
		if (k != 0 && !in_set(sorted, n, k))
			assert_null(dgi_intmap_get(&m, k));
	}

	/* Delete every other key (shuffled order, so chains get holes in the
	 * middle); the rest must all still be reachable. */
	for (size_t i = 1; i < n; i += 2)
		assert_ptr_equal(dgi_intmap_del(&m, keys[i]), &keys[i]);
	assert_int_equal(dgi_intmap_count(&m), n - n / 2);
	check_all(&m, keys, n, 0);

	struct each_acc acc = { 0 };
	dgi_intmap_each(&m, each_count, &acc);
	assert_int_equal(acc.n, n - n / 2);
	assert_int_equal(acc.bad, 0);

	/* Put them back: the map rebuilds over its tombstones. */
	for (size_t i = 1; i < n; i += 2)
		assert_int_equal(dgi_intmap_put(&m, keys[i], &keys[i]), DG_OK);
	assert_int_equal(dgi_intmap_count(&m), n);
	check_all(&m, keys, n, -1);

	dgi_intmap_destroy(&m);
	free(keys);
	free(sorted);
}

/* ------------------------------------------------------------------------
 * Allocation failure
 * ------------------------------------------------------------------------ */

static void test_nomem(void **state)
{
	dgi_intmap m;
	static uint32_t keys[64];
	dgi_alloc_stats before, after;
	size_t ok = 0;
	dg_err err = DG_OK;

	for (uint32_t i = 0; i < 64; i++)
		keys[i] = 100 + i;
	assert_int_equal(dgi_intmap_init(&m), DG_OK);
	assert_int_equal(dgi_intmap_put(&m, keys[0], &keys[0]), DG_OK);
	ok = 1;

	/* Arm the next allocation to fail, then add keys until one needs a
	 * new table: that put, and only that one, must fail. */
	dgi_alloc_get_stats(&before);
	dgi_alloc_fail_nth(1);
	while (ok < 64) {
		err = dgi_intmap_put(&m, keys[ok], &keys[ok]);
		if (err != DG_OK)
			break;
		ok++;
	}
	dgi_alloc_fail_nth(0);
	dgi_alloc_get_stats(&after);
	assert_int_equal(err, DG_ERR_NOMEM);
	assert_int_equal(after.failed - before.failed, 1);
	assert_int_equal(after.allocs, before.allocs);

	/* Unchanged: same count, same keys, the failed key absent. */
	assert_int_equal(dgi_intmap_count(&m), ok);
	for (size_t i = 0; i < ok; i++)
		assert_ptr_equal(dgi_intmap_get(&m, keys[i]), &keys[i]);
	assert_null(dgi_intmap_get(&m, keys[ok]));
	struct each_acc acc = { 0 };
	dgi_intmap_each(&m, each_count, &acc);
	assert_int_equal(acc.n, ok);

	/* Replace and delete never allocate, so they cannot fail. */
	static uint32_t again;
	again = keys[0];
	dgi_alloc_fail_nth(1);
	assert_int_equal(dgi_intmap_put(&m, keys[0], &again), DG_OK);
	assert_ptr_equal(dgi_intmap_del(&m, keys[1]), &keys[1]);
	dgi_alloc_fail_nth(0);
	assert_ptr_equal(dgi_intmap_get(&m, keys[0]), &again);
	assert_null(dgi_intmap_get(&m, keys[1]));
	assert_int_equal(dgi_intmap_count(&m), ok - 1);

	/* With memory back, the same put succeeds. */
	assert_int_equal(dgi_intmap_put(&m, keys[ok], &keys[ok]), DG_OK);
	assert_ptr_equal(dgi_intmap_get(&m, keys[ok]), &keys[ok]);
	assert_int_equal(dgi_intmap_count(&m), ok);
	dgi_intmap_destroy(&m);

	/* A failed init leaves nothing to free; destroy is then a no-op. */
	dgi_alloc_get_stats(&before);
	dgi_alloc_fail_nth(1);
	err = dgi_intmap_init(&m);
	dgi_alloc_fail_nth(0);
	assert_int_equal(err, DG_ERR_NOMEM);
	dgi_intmap_destroy(&m);
	dgi_alloc_get_stats(&after);
	assert_int_equal(after.allocs, before.allocs);
	assert_int_equal(after.frees, before.frees);
}

/* ------------------------------------------------------------------------
 * Lookups allocate nothing
 * ------------------------------------------------------------------------ */

static void test_no_alloc_lookups(void **state)
{
	dgi_intmap m;
	static uint32_t keys[1000];
	dgi_alloc_stats before, after;
	size_t hits = 0, want = 0, counted = 0;

	assert_int_equal(dgi_intmap_init(&m), DG_OK);
	for (uint32_t i = 0; i < 1000; i++) {
		keys[i] = 7 * i + 1;
		assert_int_equal(dgi_intmap_put(&m, keys[i], &keys[i]), DG_OK);
	}

	dgi_alloc_get_stats(&before);
	for (uint32_t i = 0; i < 100000; i++) {
		uint32_t k = i % 7000 + 1;   /* one in 7 is a key */
		void *v = dgi_intmap_get(&m, k);
		if (v != NULL && *(uint32_t *)v == k)
			hits++;
		counted += dgi_intmap_count(&m);
	}
	dgi_alloc_get_stats(&after);
	assert_int_equal(after.allocs, before.allocs);
	assert_int_equal(after.frees, before.frees);
	/* The loop really looked up (and found exactly the keys). */
	for (uint32_t i = 0; i < 100000; i++) {
		uint32_t k = i % 7000 + 1;
		want += (k - 1) % 7 == 0 && (k - 1) / 7 < 1000;
	}
	assert_int_equal(hits, want);
	assert_int_equal(counted, (size_t)100000 * 1000);

	/* Replacing and deleting existing keys allocate nothing either. */
	dgi_alloc_get_stats(&before);
	for (uint32_t i = 0; i < 1000; i++)
		assert_ptr_equal(dgi_intmap_del(&m, keys[i]), &keys[i]);
	for (uint32_t i = 0; i < 1000; i++)
		assert_int_equal(dgi_intmap_put(&m, keys[i], &keys[i]), DG_OK);
	dgi_alloc_get_stats(&after);
	assert_int_equal(after.allocs, before.allocs);

	dgi_intmap_destroy(&m);
}

/* ------------------------------------------------------------------------
 * Concurrent readers while the writer republishes
 * ------------------------------------------------------------------------ */

#define N_READERS 4
#define N_COLL 8          /* fixed and never keys sharing one home slot */
#define N_FIXED 64
#define N_NEVER 72
#define N_POOL 8192       /* churn keys, used in turn so each is new */
#define POOL_COLL_EVERY 128
#define N_SAMPLE 512      /* pool keys a reader checks per pass */
#define MIN_WRITES 10000u
#define MIN_PUBLISHES 50u       /* tables built (one allocation each) */
#define MIN_RUN_NS 150000000u   /* readers overlap the writer this long */
#define MAX_RUN_NS 2000000000u  /* hard bound on a slow (sanitized) host */
#define MAX_BATCHES 2000u       /* bounds the retired tables too */

static const unsigned batch_sizes[] = { 16, 64, 256, 1024 };
#define MAX_BATCH 1024

struct conc;

struct reader_arg {
	struct conc *c;
	int id;
};

/* Values are pointers into fixed[] and pool[], each the uint32 holding its
 * own key, so a reader can tell a right value from a wrong one. */
struct conc {
	dgi_intmap m;
	uint32_t fixed[N_FIXED], pool[N_POOL], never[N_NEVER];
	_Atomic int ready;
	_Atomic bool done;
	_Atomic uint64_t bad_fixed, bad_pool, bad_never, bad_count, bad_each;
	_Atomic uint64_t passes[N_READERS];
	uint64_t writes, batches, publishes, bad_writer;
	struct reader_arg arg[N_READERS];
};

struct walk {
	const struct conc *c;
	size_t fixed_seen;
	size_t bad;
};

static void walk_fn(void *ctx, uint32_t key, void *value)
{
	struct walk *w = ctx;
	const uint32_t *v = value;
	const struct conc *c = w->c;

	if (v >= c->fixed && v < c->fixed + N_FIXED)
		w->fixed_seen++;
	else if (!(v >= c->pool && v < c->pool + N_POOL))
		w->bad++;
	if (*v != key)
		w->bad++;
}

static void reader_pass(struct conc *c, int id, uint64_t pass)
{
	for (int i = 0; i < N_FIXED; i++)
		if (dgi_intmap_get(&c->m, c->fixed[i]) != &c->fixed[i])
			atomic_fetch_add(&c->bad_fixed, 1);
	/* A rolling window over the pool, each reader at another offset. */
	size_t base = (size_t)(pass * N_SAMPLE + (uint64_t)id * (N_POOL / 4));
	for (size_t i = 0; i < N_SAMPLE; i++) {
		size_t j = (base + i) % N_POOL;
		void *v = dgi_intmap_get(&c->m, c->pool[j]);
		if (v != NULL && v != &c->pool[j])
			atomic_fetch_add(&c->bad_pool, 1);
	}
	for (int i = 0; i < N_NEVER; i++)
		if (dgi_intmap_get(&c->m, c->never[i]) != NULL)
			atomic_fetch_add(&c->bad_never, 1);
	size_t n = dgi_intmap_count(&c->m);
	if (n < N_FIXED || n > N_FIXED + MAX_BATCH)
		atomic_fetch_add(&c->bad_count, 1);

	/* Now and then a walk: every fixed key exactly once, nothing foreign,
	 * every value its own key's. */
	if (pass % 8 == (uint64_t)id) {
		struct walk w = { c, 0, 0 };
		dgi_intmap_each(&c->m, walk_fn, &w);
		if (w.bad != 0 || w.fixed_seen != N_FIXED)
			atomic_fetch_add(&c->bad_each, 1);
	}
}

static void *reader_main(void *p)
{
	struct reader_arg *a = p;
	struct conc *c = a->c;
	uint64_t pass = 0;

	atomic_fetch_add(&c->ready, 1);
	while (!atomic_load(&c->done)) {
		reader_pass(c, a->id, pass++);
		atomic_store_explicit(&c->passes[a->id], pass,
		    memory_order_relaxed);
	}
	return NULL;
}

/* Batches of new pool keys, inserted then deleted in another order.  Keys
 * are new (not tombstones to revive), so the table keeps filling: the big
 * batches grow it step by step, the next batch rebuilds it small again over
 * the tombstones.  Many publishes while the readers run. */
static void writer_run(struct conc *c)
{
	uint64_t start = now_ns(), t;
	size_t seq = 0;
	dgi_alloc_stats st0, st;

	while (atomic_load(&c->ready) < N_READERS)
		sched_yield();
	/* Only the writer allocates meanwhile: allocations are publishes. */
	dgi_alloc_get_stats(&st0);
	do {
		size_t b = batch_sizes[c->batches % 4];
		for (size_t i = 0; i < b; i++) {
			size_t j = (seq + i) % N_POOL;
			if (dgi_intmap_put(&c->m, c->pool[j], &c->pool[j]) != DG_OK)
				c->bad_writer++;
		}
		for (size_t i = 0; i < b; i++) {
			size_t j = (seq + (i * 7 + c->batches) % b) % N_POOL;
			if (dgi_intmap_del(&c->m, c->pool[j]) != &c->pool[j])
				c->bad_writer++;
		}
		seq += b;
		c->writes += 2 * b;
		c->batches++;
		dgi_alloc_get_stats(&st);
		c->publishes = st.allocs - st0.allocs;
		t = now_ns() - start;
	} while ((c->writes < MIN_WRITES || c->publishes < MIN_PUBLISHES
	    || t < MIN_RUN_NS) && t < MAX_RUN_NS && c->batches < MAX_BATCHES);
	atomic_store(&c->done, true);
}

static void conc_keys(struct conc *c)
{
	uint32_t coll[2 * N_COLL + N_POOL / POOL_COLL_EVERY];
	uint32_t last = colliding_keys(coll, sizeof(coll) / sizeof(coll[0]), 0);
	size_t nc = 0;

	/* Fixed, never and some pool keys share one home slot, so probes for
	 * fixed and never keys cross the pool keys coming and going. */
	for (int i = 0; i < N_COLL; i++) {
		c->fixed[i] = coll[nc++];
		c->never[i] = coll[nc++];
	}
	for (int i = N_COLL; i < N_FIXED; i++)
		c->fixed[i] = last + 1 + (uint32_t)i;
	for (int i = N_COLL; i < N_NEVER; i++)
		c->never[i] = last + 1000 + (uint32_t)i;
	for (int j = 0; j < N_POOL; j++)
		c->pool[j] = j % POOL_COLL_EVERY == 0 ? coll[nc++]
		    : last + 2000 + (uint32_t)j;
}

static void test_concurrent_readers(void **state)
{
	struct conc *c = calloc(1, sizeof(*c));
	pthread_t th[N_READERS];
	int started = 0;

	assert_non_null(c);
	conc_keys(c);
	assert_int_equal(dgi_intmap_init(&c->m), DG_OK);
	/* Colliding pool keys first so the colliding fixed keys land behind
	 * them; deleting those leaves fixed keys reached through tombstones. */
	for (int j = 0; j < N_POOL; j += POOL_COLL_EVERY)
		assert_int_equal(dgi_intmap_put(&c->m, c->pool[j], &c->pool[j]),
		    DG_OK);
	for (int i = 0; i < N_FIXED; i++)
		assert_int_equal(dgi_intmap_put(&c->m, c->fixed[i], &c->fixed[i]),
		    DG_OK);
	for (int j = 0; j < N_POOL; j += POOL_COLL_EVERY)
		assert_ptr_equal(dgi_intmap_del(&c->m, c->pool[j]), &c->pool[j]);

	for (int i = 0; i < N_READERS; i++) {
		c->arg[i].c = c;
		c->arg[i].id = i;
		if (pthread_create(&th[i], NULL, reader_main, &c->arg[i]) != 0)
			break;
		started++;
	}
	if (started < N_READERS)   /* let the writer through, then fail */
		atomic_store(&c->ready, N_READERS);
	writer_run(c);
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);

	/* Read everything out, then free, then assert (a failed assert does
	 * not return). */
	uint64_t bad = atomic_load(&c->bad_fixed) + atomic_load(&c->bad_pool)
	    + atomic_load(&c->bad_never) + atomic_load(&c->bad_count)
	    + atomic_load(&c->bad_each);
	uint64_t min_passes = UINT64_MAX;
	for (int i = 0; i < N_READERS; i++)
		if (atomic_load(&c->passes[i]) < min_passes)
			min_passes = atomic_load(&c->passes[i]);
	bool final_ok = dgi_intmap_count(&c->m) == N_FIXED;
	for (int i = 0; i < N_FIXED; i++)
		final_ok &= dgi_intmap_get(&c->m, c->fixed[i]) == &c->fixed[i];
	for (int j = 0; j < N_POOL; j++)
		final_ok &= dgi_intmap_get(&c->m, c->pool[j]) == NULL;
	uint64_t writes = c->writes, bad_writer = c->bad_writer;
	uint64_t publishes = c->publishes;
	dgi_intmap_destroy(&c->m);
	free(c);

	assert_int_equal(started, N_READERS);
	assert_int_equal(bad_writer, 0);
	assert_true(writes >= MIN_WRITES);
	assert_true(publishes >= MIN_PUBLISHES);
	assert_int_equal(bad, 0);
	assert_true(min_passes > 0);
	assert_true(final_ok);
}

/* ------------------------------------------------------------------------
 * Entry point
 * ------------------------------------------------------------------------ */

int dgt_intmap_tests(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_basics),
		cmocka_unit_test(test_chain_middle_delete),
		cmocka_unit_test(test_growth),
		cmocka_unit_test(test_nomem),
		cmocka_unit_test(test_no_alloc_lookups),
		cmocka_unit_test(test_concurrent_readers),
	};
	return cmocka_run_group_tests_name("intmap", tests, NULL, NULL);
}
