/*
 * txn_done_test.c — unit tests of txn/txdone.c, the finished transactions
 * a participant remembers for keep_ms.
 *
 * What is tested, against txdone.h's contract:
 *   - put/get of both outcomes; unknown ids are not found;
 *   - a repeated put: same outcome DG_OK (no second entry), another outcome
 *     DG_ERR_EXISTS with the first outcome kept;
 *   - invalid arguments: id {0,0}, a non-final outcome, keep_ms 0;
 *   - the expiry boundary: forgotten only when now - finish > keep_ms;
 *   - 100 000 ids expired in stages: exact counts, every remaining id still
 *     found (probe chains intact after deletions), every expired one gone;
 *   - ring growth while its live part wraps around, expiry order kept;
 *   - NOMEM injected at each allocation of a growth (and of create):
 *     DG_ERR_NOMEM, nothing changed, nothing leaked;
 *   - 4 threads putting, getting and expiring for ~200 ms: every put is
 *     expired exactly once (run under TSan too).
 *
 * Entry point: dgt_txdone_tests(), called by the test runner.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "txn/txdone.h"
#include "marshal/marshal.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

int dgt_txdone_tests(void);

static dgi_txid tid(uint64_t node, uint64_t seq)
{
	dgi_txid t = { .node = node, .seq = seq };
	return t;
}

/* A spread of ids for the bulk tests: few nodes, scattered counters. */
static dgi_txid bulk_id(uint32_t i)
{
	return tid(1 + i % 7, (uint64_t)i * 2654435761u + 1);
}

static dgi_txdone *make(uint64_t keep_ms)
{
	dgi_txdone *d = NULL;
	assert_int_equal(dgi_txdone_create(keep_ms, 0, &d), DG_OK);
	assert_non_null(d);
	return d;
}

static uint64_t live_allocs(void)
{
	dgi_alloc_stats s = { .allocs = 0, .frees = 0, .bytes = 0, .failed = 0 };
	dgi_alloc_get_stats(&s);
	return s.allocs - s.frees;
}

/* Sized at create for a capacity: puts up to it allocate nothing (the
 * table at 2 x, the ring at 1 x, powers of two: 1000 -> 2048 slots, 1024
 * ring entries); the first past the ring grows, counted.  Outcomes packed
 * into the slot come back as put; a seq with the packing bit is refused. */
static void test_presized(void **state)
{
	(void)state;
	dgi_txdone *d = NULL;
	assert_int_equal(dgi_txdone_create(1000, 1000, &d), DG_OK);
	dgi_alloc_stats st0 = { 0 }, st1 = { 0 };
	dgi_alloc_get_stats(&st0);
	for (uint32_t i = 0; i < 1024; i++) {
		dgi_txid id = bulk_id(i);
		assert_int_equal(dgi_txdone_put(d, &id, i % 3 ? DGI_TXS_COMMITTED :
		    DGI_TXS_ROLLED_BACK, 10), DG_OK);
	}
	dgi_alloc_get_stats(&st1);
	assert_int_equal(st1.allocs, st0.allocs);
	assert_int_equal(dgi_txdone_grown(d), 0);
	for (uint32_t i = 0; i < 1024; i++) {
		dgi_txid id = bulk_id(i);
		dgi_txs o = DGI_TXS_ACTIVE;
		assert_true(dgi_txdone_get(d, &id, &o));
		assert_int_equal(o, i % 3 ? DGI_TXS_COMMITTED : DGI_TXS_ROLLED_BACK);
	}
	dgi_txid more = bulk_id(5000);
	assert_int_equal(dgi_txdone_put(d, &more, DGI_TXS_COMMITTED, 10), DG_OK);
	assert_int_equal(dgi_txdone_grown(d), 1);
	assert_int_equal(dgi_txdone_count(d), 1025);
	dgi_txid top = tid(1, 1ull << 63);
	assert_int_equal(dgi_txdone_put(d, &top, DGI_TXS_COMMITTED, 10), DG_ERR_INVAL);
	assert_false(dgi_txdone_get(d, &top, NULL));
	dgi_txid plain = tid(1, 0);
	assert_false(dgi_txdone_get(d, &plain, NULL)); /* not the packed one */
	assert_int_equal(dgi_txdone_create(1000, DGI_TXDONE_CAPACITY_MAX + 1ull, &(dgi_txdone *){ NULL }),
	    DG_ERR_INVAL);
	dgi_txdone_destroy(d);
}

static void test_put_get(void **state)
{
	dgi_txdone *d = make(1000);
	dgi_txid a = tid(1, 1), b = tid(1, 2), c = tid(2, 1);
	dgi_txs o = DGI_TXS_ACTIVE;

	assert_int_equal(dgi_txdone_put(d, &a, DGI_TXS_COMMITTED, 10), DG_OK);
	assert_int_equal(dgi_txdone_put(d, &b, DGI_TXS_ROLLED_BACK, 10), DG_OK);
	assert_true(dgi_txdone_get(d, &a, &o));
	assert_int_equal(o, DGI_TXS_COMMITTED);
	assert_true(dgi_txdone_get(d, &b, &o));
	assert_int_equal(o, DGI_TXS_ROLLED_BACK);
	o = DGI_TXS_ACTIVE;
	assert_false(dgi_txdone_get(d, &c, &o));
	assert_int_equal(o, DGI_TXS_ACTIVE);
	assert_int_equal(dgi_txdone_count(d), 2);
	dgi_txdone_destroy(d);
}

static void test_duplicate(void **state)
{
	dgi_txdone *d = make(100);
	dgi_txid a = tid(3, 7);
	dgi_txs o = DGI_TXS_ACTIVE;

	assert_int_equal(dgi_txdone_put(d, &a, DGI_TXS_COMMITTED, 0), DG_OK);
	assert_int_equal(dgi_txdone_put(d, &a, DGI_TXS_COMMITTED, 50), DG_OK);
	assert_int_equal(dgi_txdone_count(d), 1);
	assert_int_equal(dgi_txdone_put(d, &a, DGI_TXS_ROLLED_BACK, 60), DG_ERR_EXISTS);
	assert_true(dgi_txdone_get(d, &a, &o));
	assert_int_equal(o, DGI_TXS_COMMITTED);
	assert_int_equal(dgi_txdone_count(d), 1);
	/* The duplicate did not refresh the finish time nor add a ring entry. */
	assert_int_equal(dgi_txdone_expire(d, 101), 1);
	assert_false(dgi_txdone_get(d, &a, &o));
	assert_int_equal(dgi_txdone_expire(d, 1000), 0);
	dgi_txdone_destroy(d);
}

static void test_invalid(void **state)
{
	dgi_txdone *d = NULL;
	dgi_txid zero = tid(0, 0), a = tid(0, 5), b = tid(5, 0);
	dgi_txs o = DGI_TXS_COMMITTED;

	assert_int_equal(dgi_txdone_create(0, 0, &d), DG_ERR_INVAL);
	assert_null(d);
	d = make(10);
	assert_int_equal(dgi_txdone_put(d, &zero, DGI_TXS_COMMITTED, 1), DG_ERR_INVAL);
	for (int s = 0; s <= (int)DGI_TXS__COUNT; s++) {
		if (s == DGI_TXS_COMMITTED || s == DGI_TXS_ROLLED_BACK)
			continue;
		assert_int_equal(dgi_txdone_put(d, &a, (dgi_txs)s, 1), DG_ERR_INVAL);
	}
	assert_int_equal(dgi_txdone_count(d), 0);
	assert_false(dgi_txdone_get(d, &zero, &o));
	/* Half-zero ids are valid. */
	assert_int_equal(dgi_txdone_put(d, &a, DGI_TXS_COMMITTED, 1), DG_OK);
	assert_int_equal(dgi_txdone_put(d, &b, DGI_TXS_ROLLED_BACK, 1), DG_OK);
	assert_true(dgi_txdone_get(d, &a, &o));
	assert_true(dgi_txdone_get(d, &b, &o));
	dgi_txdone_destroy(d);
}

static void test_boundary(void **state)
{
	dgi_txdone *d = make(50);
	dgi_txid a = tid(9, 9);

	assert_int_equal(dgi_txdone_put(d, &a, DGI_TXS_COMMITTED, 100), DG_OK);
	assert_int_equal(dgi_txdone_expire(d, 99), 0);   /* clock behind finish */
	assert_int_equal(dgi_txdone_expire(d, 149), 0);
	assert_int_equal(dgi_txdone_expire(d, 150), 0);
	assert_true(dgi_txdone_get(d, &a, NULL));
	assert_int_equal(dgi_txdone_expire(d, 151), 1);
	assert_false(dgi_txdone_get(d, &a, NULL));
	assert_int_equal(dgi_txdone_count(d), 0);
	dgi_txdone_destroy(d);
}

#define BULK 100000u
#define BULK_PER_MS 100u
#define BULK_KEEP 100u

/* ids [0, gone) must be absent, [gone, BULK) present with their outcome. */
static void check_bulk(dgi_txdone *d, uint32_t gone)
{
	for (uint32_t i = 0; i < BULK; i++) {
		dgi_txid t = bulk_id(i);
		dgi_txs o = DGI_TXS_ACTIVE;
		bool found = dgi_txdone_get(d, &t, &o);
		assert_int_equal(found, i >= gone);
		if (found)
			assert_int_equal(o, i % 2 ? DGI_TXS_ROLLED_BACK : DGI_TXS_COMMITTED);
	}
	assert_int_equal(dgi_txdone_count(d), BULK - gone);
}

static void test_bulk_expire(void **state)
{
	dgi_txdone *d = make(BULK_KEEP);

	for (uint32_t i = 0; i < BULK; i++) {
		dgi_txid t = bulk_id(i);
		dgi_txs o = i % 2 ? DGI_TXS_ROLLED_BACK : DGI_TXS_COMMITTED;
		assert_int_equal(dgi_txdone_put(d, &t, o, i / BULK_PER_MS), DG_OK);
	}
	check_bulk(d, 0);
	/* Finish times 0..999; at now, those with finish <= now - 101 go. */
	static const uint64_t stages[] = { 100, 101, 300, 555, 900, 1099, 1100 };
	uint32_t gone = 0;
	for (size_t s = 0; s < sizeof stages / sizeof stages[0]; s++) {
		uint64_t now = stages[s];
		uint32_t want = now > BULK_KEEP ? (uint32_t)(now - BULK_KEEP) * BULK_PER_MS : 0;
		if (want > BULK)
			want = BULK;
		assert_int_equal(dgi_txdone_expire(d, now), want - gone);
		gone = want;
		check_bulk(d, gone);
	}
	assert_int_equal(gone, BULK);
	dgi_txdone_destroy(d);
}

static void test_ring_wrap(void **state)
{
	dgi_txdone *d = make(10);

	for (uint32_t i = 0; i < 6; i++) {
		dgi_txid t = tid(1, i + 1);
		assert_int_equal(dgi_txdone_put(d, &t, DGI_TXS_COMMITTED, 0), DG_OK);
	}
	for (uint32_t i = 6; i < 8; i++) {
		dgi_txid t = tid(1, i + 1);
		assert_int_equal(dgi_txdone_put(d, &t, DGI_TXS_COMMITTED, 5), DG_OK);
	}
	assert_int_equal(dgi_txdone_expire(d, 11), 6);
	/* The 2 live entries sit at the ring's end; 30 more wrap and grow it twice. */
	for (uint32_t i = 8; i < 38; i++) {
		dgi_txid t = tid(2, i + 1);
		assert_int_equal(dgi_txdone_put(d, &t, DGI_TXS_ROLLED_BACK, 20 + i), DG_OK);
	}
	assert_int_equal(dgi_txdone_count(d), 32);
	assert_int_equal(dgi_txdone_expire(d, 16), 2);
	for (uint32_t i = 8; i < 38; i++) {
		dgi_txid t = tid(2, i + 1);
		assert_int_equal(dgi_txdone_expire(d, 20 + i + 11), 1);
		assert_false(dgi_txdone_get(d, &t, NULL));
		assert_int_equal(dgi_txdone_count(d), 37 - i);
	}
	dgi_txdone_destroy(d);
}

/* Fills d with n ids put at time 0. */
static void fill(dgi_txdone *d, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		dgi_txid t = bulk_id(i);
		assert_int_equal(dgi_txdone_put(d, &t, DGI_TXS_COMMITTED, 0), DG_OK);
	}
}

static void check_present(dgi_txdone *d, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		dgi_txid t = bulk_id(i);
		assert_true(dgi_txdone_get(d, &t, NULL));
	}
	assert_int_equal(dgi_txdone_count(d), n);
}

static void test_nomem(void **state)
{
	dgi_txdone *d = NULL;
	uint64_t base = live_allocs();

	for (uint64_t k = 1; k <= 3; k++) {
		dgi_alloc_fail_nth(k);
		assert_int_equal(dgi_txdone_create(5, 0, &d), DG_ERR_NOMEM);
		assert_null(d);
		assert_int_equal(live_allocs(), base);
	}
	dgi_alloc_fail_nth(0);
	d = make(5);
	/* Wrap the ring first: 4 expired, then fill to the growth point. */
	fill(d, 4);
	assert_int_equal(dgi_txdone_expire(d, 6), 4);
	for (uint32_t n = 0; n < 3; n++) {
		/* Ring 8 / table 16, then 16/32, then 32/64: both grow at full. */
		uint32_t full = 8u << n;
		for (uint32_t i = (uint32_t)dgi_txdone_count(d); i < full; i++) {
			dgi_txid t = bulk_id(i);
			assert_int_equal(dgi_txdone_put(d, &t, DGI_TXS_COMMITTED, 10), DG_OK);
		}
		uint64_t before = live_allocs();
		dgi_txid next = bulk_id(full);
		for (uint64_t k = 1; k <= 2; k++) {
			dgi_alloc_fail_nth(k);
			assert_int_equal(dgi_txdone_put(d, &next, DGI_TXS_COMMITTED, 10), DG_ERR_NOMEM);
			dgi_alloc_fail_nth(0);
			assert_int_equal(live_allocs(), before);
			assert_false(dgi_txdone_get(d, &next, NULL));
			check_present(d, full);
		}
		assert_int_equal(dgi_txdone_put(d, &next, DGI_TXS_COMMITTED, 10), DG_OK);
		check_present(d, full + 1);
	}
	/* Order kept across the failed and successful growths. */
	assert_int_equal(dgi_txdone_expire(d, 16), 33);
	assert_int_equal(dgi_txdone_count(d), 0);
	dgi_txdone_destroy(d);
	assert_int_equal(live_allocs(), base);
}

/* ---- threads ---- */

#define NTHREADS 4
#define RUN_MS 600
#define THREADS_KEEP_MS 100 /* entries expire during the run */

typedef struct worker {
	dgi_txdone *d;
	uint64_t id;
	uint64_t puts;
	uint64_t expired;
	uint64_t bad;
} worker;

static uint64_t mono_ms(void)
{
	struct timespec ts = { .tv_sec = 0, .tv_nsec = 0 };
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void *worker_run(void *arg)
{
	worker *w = arg;
	uint64_t start = mono_ms(), now = start;

	for (uint64_t seq = 1; now - start < RUN_MS; seq++) {
		now = mono_ms();
		dgi_txid t = tid(w->id, seq);
		dgi_txs want = seq % 3 ? DGI_TXS_COMMITTED : DGI_TXS_ROLLED_BACK;
		dgi_txs o = DGI_TXS_ACTIVE;
		if (dgi_txdone_put(w->d, &t, want, now) != DG_OK)
			w->bad++;
		w->puts++;
		/* (no second put of t here: another thread's expiry at a later
		 * clock could forget t between the two and the repeat would
		 * insert it again — duplicates are tested single-threaded) */
		if (dgi_txdone_get(w->d, &t, &o) && o != want)
			w->bad++;
		if (seq % 64 == 0)
			w->expired += dgi_txdone_expire(w->d, now);
		if (seq % 16 == 0)
			(void)dgi_txdone_count(w->d);
	}
	return NULL;
}

static void test_threads(void **state)
{
	dgi_txdone *d = make(THREADS_KEEP_MS);
	pthread_t th[NTHREADS];
	worker w[NTHREADS];

	for (int i = 0; i < NTHREADS; i++) {
		w[i] = (worker){ .d = d, .id = (uint64_t)i + 1, .puts = 0, .expired = 0, .bad = 0 };
		assert_int_equal(pthread_create(&th[i], NULL, worker_run, &w[i]), 0);
	}
	uint64_t puts = 0, expired = 0;
	for (int i = 0; i < NTHREADS; i++) {
		assert_int_equal(pthread_join(th[i], NULL), 0);
		assert_int_equal(w[i].bad, 0);
		puts += w[i].puts;
		expired += w[i].expired;
	}
	assert_true(puts > 0);
	assert_int_equal(puts, expired + dgi_txdone_count(d));
	expired += dgi_txdone_expire(d, UINT64_MAX);
	assert_int_equal(puts, expired);
	assert_int_equal(dgi_txdone_count(d), 0);
	dgi_txdone_destroy(d);
}

int dgt_txdone_tests(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_presized),
		cmocka_unit_test(test_put_get),
		cmocka_unit_test(test_duplicate),
		cmocka_unit_test(test_invalid),
		cmocka_unit_test(test_boundary),
		cmocka_unit_test(test_bulk_expire),
		cmocka_unit_test(test_ring_wrap),
		cmocka_unit_test(test_nomem),
		cmocka_unit_test(test_threads),
	};
	return cmocka_run_group_tests_name("txdone", tests, NULL, NULL);
}
