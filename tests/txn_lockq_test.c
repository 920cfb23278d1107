/*
 * txn_lockq_test.c — unit tests of txn/lockq.c, the per-key lock queues.
 *
 * What is tested, each against lockq.h's contract:
 *   - a free key is granted; the owner re-acquires (re-entrant) without a
 *     second release; bad arguments are refused;
 *   - waiters are granted in FIFO order, one per release;
 *   - release_all of a tx holding 100 keys hands each key to its own next
 *     waiter and leaves the waiters behind them queued;
 *   - deadlines: expire times out exactly the due waiters (cb
 *     DG_ERR_TIMEOUT), removes them from the queue, and the waiter behind
 *     is granted later as usual;
 *   - release_all cancels the tx's own queued requests (DG_ERR_CLOSED);
 *   - owner(), waits_for() and edges() name the right transactions;
 *   - destroy cancels every waiter;
 *   - every allocation failure is -DG_ERR_NOMEM with no trace left (owner,
 *     counts, callbacks), and the table works afterwards;
 *   - 10 000 acquire/queue/release/timeout cycles after warm-up allocate
 *     nothing;
 *   - callbacks run with no lock held: they acquire and release_all from
 *     inside grant, timeout and destroy callbacks (a held lock would hang);
 *   - 4 threads lock 2 of 8 keys in sorted order, waiting on a semaphore
 *     the grant callback posts, for ~300 ms: never two holders of a key.
 *     A plain counter written by the holder lets TSan check that a grant
 *     orders the previous holder's writes before the next one's.
 *
 * Entry point: dgt_lockq_tests(), called by the test runner.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "txn/lockq.h"
#include "marshal/marshal.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int dgt_lockq_tests(void);

/* ------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------ */

enum { CACHE = 7 };

/* FNV-1a: any hash works, the table mixes it again. */
static uint64_t fnv(const void *p, size_t n)
{
	const uint8_t *b = p;
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

static dgi_txid txid(uint64_t node, uint64_t seq)
{
	dgi_txid t = { node, seq };
	return t;
}

/* Records the calls of one request's callback.  The order stamp comes from
 * a counter shared by the single-threaded tests. */
struct rec {
	int calls;
	dg_err err;
	int order;
};

static int g_order;

static void rec_cb(void *ctx, dg_err err)
{
	struct rec *r = ctx;
	r->calls++;
	r->err = err;
	r->order = ++g_order;
}

/* Key k is the 4 bytes of k in CACHE. */
static int acq(dgi_locks *l, uint32_t k, dgi_txid tx, uint64_t deadline, struct rec *r)
{
	return dgi_lock_acquire(l, CACHE, (const uint8_t *)&k, sizeof(k), fnv(&k, sizeof(k)),
	    &tx, deadline, rec_cb, r);
}

static dgi_txid owner(dgi_locks *l, uint32_t k)
{
	return dgi_lock_owner(l, CACHE, (const uint8_t *)&k, sizeof(k), fnv(&k, sizeof(k)));
}

static uint32_t rel(dgi_locks *l, dgi_txid tx)
{
	return dgi_lock_release_all(l, &tx);
}

#define assert_tx(got, want) do { \
	dgi_txid g_ = (got), w_ = (want); \
	assert_int_equal(g_.node, w_.node); \
	assert_int_equal(g_.seq, w_.seq); \
} while (0)

static const dgi_txid NONE = { 0, 0 };

static dgi_locks_stats stats(dgi_locks *l)
{
	dgi_locks_stats s;
	dgi_locks_get_stats(l, &s);
	return s;
}

/* ------------------------------------------------------------------------
 * Basics
 * ------------------------------------------------------------------------ */

static void test_grant_when_free(void **state)
{
	dgi_locks *l;
	struct rec r = { 0 };
	dgi_txid a = txid(1, 1);

	assert_int_equal(dgi_locks_create(0, &l), DG_OK);
	assert_tx(owner(l, 5), NONE);
	assert_int_equal(acq(l, 5, a, 0, &r), DGI_LOCK_GRANTED);
	assert_tx(owner(l, 5), a);
	assert_tx(owner(l, 6), NONE);
	/* Same bytes in another cache are another key. */
	uint32_t k = 5;
	assert_tx(dgi_lock_owner(l, CACHE + 1, (const uint8_t *)&k, 4, fnv(&k, 4)), NONE);
	assert_int_equal(stats(l).locks, 1);

	assert_int_equal(rel(l, a), 1);
	assert_tx(owner(l, 5), NONE);
	assert_int_equal(stats(l).locks, 0);
	assert_int_equal(rel(l, a), 0);
	assert_int_equal(r.calls, 0);   /* a grant on the spot calls nothing */
	dgi_locks_destroy(l);
}

static void test_reentrant(void **state)
{
	dgi_locks *l;
	struct rec ra = { 0 }, rb = { 0 };
	dgi_txid a = txid(1, 1), b = txid(1, 2);

	assert_int_equal(dgi_locks_create(4, &l), DG_OK);
	assert_int_equal(acq(l, 5, a, 0, &ra), DGI_LOCK_GRANTED);
	assert_int_equal(acq(l, 5, a, 0, &ra), DGI_LOCK_GRANTED);
	assert_int_equal(acq(l, 5, b, 0, &rb), DGI_LOCK_QUEUED);
	assert_int_equal(acq(l, 5, a, 0, &ra), DGI_LOCK_GRANTED);
	/* b asking again while queued is out of sequence. */
	assert_int_equal(acq(l, 5, b, 0, &rb), -DG_ERR_INVAL);
	assert_int_equal(stats(l).locks, 1);
	assert_int_equal(stats(l).waiters, 1);

	/* One release frees it however often it was taken. */
	assert_int_equal(rel(l, a), 1);
	assert_int_equal(rb.calls, 1);
	assert_int_equal(rb.err, DG_OK);
	assert_tx(owner(l, 5), b);
	assert_int_equal(ra.calls, 0);
	assert_int_equal(rel(l, b), 1);
	assert_tx(owner(l, 5), NONE);
	dgi_locks_destroy(l);
}

/* dgi_lock_release gives back one key: the next waiter gets it, the tx
 * keeps its other locks, may take the key again, and release_all still
 * ends everything (the released request included, without a callback). */
static bool rel_one(dgi_locks *l, uint32_t k, dgi_txid tx)
{
	return dgi_lock_release(l, CACHE, (const uint8_t *)&k, sizeof(k), fnv(&k, sizeof(k)), &tx);
}

static void test_release_one_key(void **state)
{
	(void)state;
	dgi_locks *l;
	struct rec ra = { 0 }, rb = { 0 }, ra2 = { 0 };
	dgi_txid a = txid(1, 1), b = txid(1, 2);

	assert_int_equal(dgi_locks_create(4, &l), DG_OK);
	assert_int_equal(acq(l, 5, a, 0, &ra), DGI_LOCK_GRANTED);
	assert_int_equal(acq(l, 6, a, 0, &ra), DGI_LOCK_GRANTED);
	assert_int_equal(acq(l, 5, b, 0, &rb), DGI_LOCK_QUEUED);
	assert_false(rel_one(l, 5, b));          /* b does not hold it */
	assert_false(rel_one(l, 7, a));          /* nobody does */
	assert_true(rel_one(l, 5, a));
	assert_int_equal(rb.calls, 1);
	assert_int_equal(rb.err, DG_OK);
	assert_tx(owner(l, 5), b);
	assert_tx(owner(l, 6), a);
	assert_int_equal(stats(l).locks, 2);
	assert_int_equal(acq(l, 5, a, 0, &ra2), DGI_LOCK_QUEUED); /* again, behind b */
	assert_int_equal(rel(l, b), 1);
	assert_int_equal(ra2.calls, 1);
	assert_int_equal(ra2.err, DG_OK);
	assert_int_equal(rel(l, a), 2);          /* 5 (again) and 6 */
	assert_int_equal(ra.calls, 0);
	assert_int_equal(stats(l).locks, 0);
	assert_int_equal(stats(l).waiters, 0);
	dgi_locks_destroy(l);
}

static void test_invalid(void **state)
{
	dgi_locks *l;
	struct rec r = { 0 };
	dgi_txid a = txid(1, 1);
	uint32_t k = 1;

	assert_int_equal(dgi_locks_create(3, &l), DG_ERR_INVAL);
	assert_null(l);
	assert_int_equal(dgi_locks_create(1, &l), DG_OK);
	assert_int_equal(acq(l, 1, NONE, 0, &r), -DG_ERR_INVAL);
	assert_int_equal(dgi_lock_acquire(l, CACHE, NULL, 4, 0, &a, 0, rec_cb, &r),
	    -DG_ERR_INVAL);
	assert_int_equal(dgi_lock_acquire(l, CACHE, (const uint8_t *)&k, 4, 0, &a, 0, NULL, &r),
	    -DG_ERR_INVAL);
	assert_int_equal(dgi_lock_acquire(NULL, CACHE, (const uint8_t *)&k, 4, 0, &a, 0,
	    rec_cb, &r), -DG_ERR_INVAL);
	assert_int_equal(stats(l).locks, 0);
	/* An empty key is a key. */
	assert_int_equal(dgi_lock_acquire(l, CACHE, NULL, 0, 0, &a, 0, rec_cb, &r),
	    DGI_LOCK_GRANTED);
	assert_tx(dgi_lock_owner(l, CACHE, NULL, 0, 0), a);
	assert_int_equal(r.calls, 0);
	dgi_locks_destroy(l);
	dgi_locks_destroy(NULL);
}

/* ------------------------------------------------------------------------
 * Queues
 * ------------------------------------------------------------------------ */

static void test_fifo_three(void **state)
{
	dgi_locks *l;
	struct rec r[4] = { { 0 } };
	dgi_txid t[4] = { txid(1, 1), txid(2, 1), txid(1, 2), txid(3, 9) };

	/* One stripe: every request shares one table and waiting list. */
	assert_int_equal(dgi_locks_create(1, &l), DG_OK);
	assert_int_equal(acq(l, 9, t[0], 0, &r[0]), DGI_LOCK_GRANTED);
	for (int i = 1; i < 4; i++)
		assert_int_equal(acq(l, 9, t[i], 0, &r[i]), DGI_LOCK_QUEUED);
	assert_int_equal(stats(l).waiters, 3);

	for (int i = 0; i < 3; i++) {
		assert_int_equal(rel(l, t[i]), 1);
		/* Exactly the next one in order, no one behind it. */
		assert_int_equal(r[i + 1].calls, 1);
		assert_int_equal(r[i + 1].err, DG_OK);
		for (int j = i + 2; j < 4; j++)
			assert_int_equal(r[j].calls, 0);
		assert_tx(owner(l, 9), t[i + 1]);
		assert_int_equal(stats(l).waiters, (uint64_t)(2 - i));
	}
	assert_true(r[1].order < r[2].order && r[2].order < r[3].order);
	assert_int_equal(rel(l, t[3]), 1);
	assert_tx(owner(l, 9), NONE);
	dgi_locks_stats s = stats(l);
	assert_int_equal(s.locks, 0);
	assert_int_equal(s.granted, 4);
	assert_int_equal(s.queued, 3);
	dgi_locks_destroy(l);
}

static void test_release_all_100(void **state)
{
	enum { N = 100 };
	dgi_locks *l;
	static struct rec ra, rw[N], rv[N];
	dgi_txid a = txid(9, 9);

	memset(rw, 0, sizeof(rw));
	memset(rv, 0, sizeof(rv));
	assert_int_equal(dgi_locks_create(8, &l), DG_OK);
	for (uint32_t i = 0; i < N; i++)
		assert_int_equal(acq(l, i, a, 0, &ra), DGI_LOCK_GRANTED);
	for (uint32_t i = 0; i < N; i++) {
		assert_int_equal(acq(l, i, txid(2, i + 1), 0, &rw[i]), DGI_LOCK_QUEUED);
		assert_int_equal(acq(l, i, txid(3, i + 1), 0, &rv[i]), DGI_LOCK_QUEUED);
	}
	assert_int_equal(stats(l).locks, N);
	assert_int_equal(stats(l).waiters, 2 * N);

	assert_int_equal(rel(l, a), N);
	for (uint32_t i = 0; i < N; i++) {
		assert_int_equal(rw[i].calls, 1);
		assert_int_equal(rw[i].err, DG_OK);
		assert_int_equal(rv[i].calls, 0);
		assert_tx(owner(l, i), txid(2, i + 1));
	}
	assert_int_equal(stats(l).locks, N);
	assert_int_equal(stats(l).waiters, N);

	for (uint32_t i = 0; i < N; i++) {
		assert_int_equal(rel(l, txid(2, i + 1)), 1);
		assert_int_equal(rv[i].calls, 1);
		assert_tx(owner(l, i), txid(3, i + 1));
	}
	for (uint32_t i = 0; i < N; i++)
		assert_int_equal(rel(l, txid(3, i + 1)), 1);
	assert_int_equal(stats(l).locks, 0);
	assert_int_equal(stats(l).waiters, 0);
	assert_int_equal(ra.calls, 0);
	dgi_locks_destroy(l);
}

static void test_deadline(void **state)
{
	dgi_locks *l;
	struct rec ra = { 0 }, rb = { 0 }, rc = { 0 }, rd = { 0 };
	dgi_txid a = txid(1, 1), b = txid(1, 2), c = txid(1, 3), d = txid(1, 4);

	assert_int_equal(dgi_locks_create(2, &l), DG_OK);
	assert_int_equal(acq(l, 1, a, 0, &ra), DGI_LOCK_GRANTED);
	assert_int_equal(acq(l, 1, b, 100, &rb), DGI_LOCK_QUEUED);
	assert_int_equal(acq(l, 1, c, 0, &rc), DGI_LOCK_QUEUED);      /* never */
	assert_int_equal(acq(l, 1, d, 500, &rd), DGI_LOCK_QUEUED);

	assert_int_equal(dgi_locks_expire(l, 99), 0);
	assert_int_equal(rb.calls, 0);
	assert_int_equal(dgi_locks_expire(l, 100), 1);
	assert_int_equal(rb.calls, 1);
	assert_int_equal(rb.err, DG_ERR_TIMEOUT);
	assert_int_equal(rc.calls + rd.calls, 0);
	assert_int_equal(dgi_locks_waits_for(l, &b, NULL, 0), 0);
	assert_int_equal(stats(l).waiters, 2);
	assert_int_equal(stats(l).timeouts, 1);
	assert_int_equal(dgi_locks_expire(l, 200), 0);   /* never twice */
	assert_tx(owner(l, 1), a);

	/* c, not the timed-out b, is next. */
	assert_int_equal(rel(l, a), 1);
	assert_int_equal(rc.calls, 1);
	assert_int_equal(rc.err, DG_OK);
	assert_tx(owner(l, 1), c);
	assert_int_equal(rb.calls, 1);
	/* b's dead request held nothing and calls nothing again. */
	assert_int_equal(rel(l, b), 0);
	assert_int_equal(rb.calls, 1);

	/* A granted request has no deadline any more; d still does. */
	assert_int_equal(dgi_locks_expire(l, 1000), 1);
	assert_int_equal(rd.calls, 1);
	assert_int_equal(rd.err, DG_ERR_TIMEOUT);
	assert_tx(owner(l, 1), c);
	assert_int_equal(rel(l, c), 1);
	assert_tx(owner(l, 1), NONE);
	assert_int_equal(rel(l, d), 0);
	assert_int_equal(rc.calls, 1);
	assert_int_equal(rd.calls, 1);
	dgi_locks_destroy(l);
}

static void test_release_cancels_own_waits(void **state)
{
	dgi_locks *l;
	struct rec ra = { 0 }, rb = { 0 }, rb2 = { 0 };
	dgi_txid a = txid(1, 1), b = txid(1, 2);

	assert_int_equal(dgi_locks_create(0, &l), DG_OK);
	assert_int_equal(acq(l, 1, a, 0, &ra), DGI_LOCK_GRANTED);
	assert_int_equal(acq(l, 2, b, 0, &rb), DGI_LOCK_GRANTED);
	assert_int_equal(acq(l, 1, b, 0, &rb2), DGI_LOCK_QUEUED);

	assert_int_equal(rel(l, b), 1);   /* held key 2 only */
	assert_int_equal(rb2.calls, 1);
	assert_int_equal(rb2.err, DG_ERR_CLOSED);
	assert_int_equal(rb.calls, 0);
	assert_tx(owner(l, 2), NONE);
	assert_int_equal(stats(l).waiters, 0);
	assert_int_equal(stats(l).cancelled, 1);

	/* Key 1 goes to nobody when a lets go. */
	assert_int_equal(rel(l, a), 1);
	assert_tx(owner(l, 1), NONE);
	assert_int_equal(rb2.calls, 1);
	dgi_locks_destroy(l);
}

static bool has_edge(const dgi_txid *e, size_t n, dgi_txid w, dgi_txid o)
{
	for (size_t i = 0; i < n; i++)
		if (dgi_txid_eq(&e[2 * i], &w) && dgi_txid_eq(&e[2 * i + 1], &o))
			return true;
	return false;
}

static void test_owner_waits_for_edges(void **state)
{
	dgi_locks *l;
	struct rec r[5] = { { 0 } };
	dgi_txid a = txid(1, 1), b = txid(2, 1), c = txid(3, 1), d = txid(4, 1), e = txid(5, 1);
	dgi_txid out[16];

	assert_int_equal(dgi_locks_create(16, &l), DG_OK);
	assert_int_equal(acq(l, 1, a, 0, &r[0]), DGI_LOCK_GRANTED);
	assert_int_equal(acq(l, 2, a, 0, &r[0]), DGI_LOCK_GRANTED);
	assert_int_equal(acq(l, 3, e, 0, &r[4]), DGI_LOCK_GRANTED);
	assert_int_equal(acq(l, 1, b, 0, &r[1]), DGI_LOCK_QUEUED);
	assert_int_equal(acq(l, 3, b, 0, &r[1]), DGI_LOCK_QUEUED);
	assert_int_equal(acq(l, 2, c, 0, &r[2]), DGI_LOCK_QUEUED);
	assert_int_equal(acq(l, 1, d, 0, &r[3]), DGI_LOCK_QUEUED);
	assert_tx(owner(l, 1), a);
	assert_tx(owner(l, 3), e);

	/* b waits for a and e; c for a; nobody waits for anything else. */
	assert_int_equal(dgi_locks_waits_for(l, &b, out, 16), 2);
	assert_true((dgi_txid_eq(&out[0], &a) && dgi_txid_eq(&out[1], &e)) ||
	    (dgi_txid_eq(&out[0], &e) && dgi_txid_eq(&out[1], &a)));
	assert_int_equal(dgi_locks_waits_for(l, &c, out, 16), 1);
	assert_tx(out[0], a);
	assert_int_equal(dgi_locks_waits_for(l, &a, out, 16), 0);
	assert_int_equal(dgi_locks_waits_for(l, &b, out, 1), 2);   /* count past cap */

	assert_int_equal(dgi_locks_edges(l, out, 8), 4);
	assert_true(has_edge(out, 4, b, a));
	assert_true(has_edge(out, 4, b, e));
	assert_true(has_edge(out, 4, c, a));
	assert_true(has_edge(out, 4, d, a));
	memset(out, 0, sizeof(out));
	assert_int_equal(dgi_locks_edges(l, out, 1), 4);
	assert_tx(out[2], NONE);   /* nothing written past cap pairs */

	/* Once a lets go, b owns key 1 and d waits for b. */
	assert_int_equal(rel(l, a), 2);
	assert_tx(owner(l, 1), b);
	assert_tx(owner(l, 2), c);
	assert_int_equal(dgi_locks_waits_for(l, &d, out, 16), 1);
	assert_tx(out[0], b);
	assert_int_equal(dgi_locks_waits_for(l, &b, out, 16), 1);
	assert_tx(out[0], e);
	assert_int_equal(dgi_locks_edges(l, out, 8), 2);
	assert_true(has_edge(out, 2, d, b));
	assert_true(has_edge(out, 2, b, e));
	dgi_locks_destroy(l);
}

static void test_destroy_cancels(void **state)
{
	dgi_locks *l;
	struct rec ra = { 0 }, rb = { 0 }, rc = { 0 };

	assert_int_equal(dgi_locks_create(0, &l), DG_OK);
	assert_int_equal(acq(l, 1, txid(1, 1), 0, &ra), DGI_LOCK_GRANTED);
	assert_int_equal(acq(l, 2, txid(1, 1), 0, &ra), DGI_LOCK_GRANTED);
	assert_int_equal(acq(l, 1, txid(1, 2), 0, &rb), DGI_LOCK_QUEUED);
	assert_int_equal(acq(l, 2, txid(1, 3), 50, &rc), DGI_LOCK_QUEUED);
	dgi_locks_destroy(l);
	assert_int_equal(ra.calls, 0);
	assert_int_equal(rb.calls, 1);
	assert_int_equal(rb.err, DG_ERR_CLOSED);
	assert_int_equal(rc.calls, 1);
	assert_int_equal(rc.err, DG_ERR_CLOSED);
}

/* ------------------------------------------------------------------------
 * Allocation
 * ------------------------------------------------------------------------ */

/* One run of: a locks a long (heap-copied) key, b queues on it, a locks a
 * short key; the n-th allocation from the start fails.  Whatever failed
 * left no trace; the same steps then succeed. */
static bool nomem_run(uint64_t n)
{
	dgi_locks *l;
	uint8_t lk[100];
	struct rec ra = { 0 }, rb = { 0 };
	dgi_txid a = txid(1, 1), b = txid(2, 2);
	dgi_alloc_stats before, after;

	for (size_t i = 0; i < sizeof(lk); i++)
		lk[i] = (uint8_t)i;
	uint64_t lh = fnv(lk, sizeof(lk));
	assert_int_equal(dgi_locks_create(4, &l), DG_OK);

	dgi_alloc_get_stats(&before);
	dgi_alloc_fail_nth(n);
	int r1 = dgi_lock_acquire(l, CACHE, lk, sizeof(lk), lh, &a, 0, rec_cb, &ra);
	int r2 = dgi_lock_acquire(l, CACHE, lk, sizeof(lk), lh, &b, 0, rec_cb, &rb);
	int r3 = acq(l, 3, a, 0, &ra);
	dgi_alloc_fail_nth(0);
	dgi_alloc_get_stats(&after);
	bool injected = after.failed > before.failed;

	int rs[3] = { r1, r2, r3 };
	int nomem = 0;
	for (int i = 0; i < 3; i++) {
		assert_true(rs[i] == DGI_LOCK_GRANTED || rs[i] == DGI_LOCK_QUEUED ||
		    rs[i] == -DG_ERR_NOMEM);
		nomem += rs[i] == -DG_ERR_NOMEM;
	}
	assert_int_equal(nomem > 0, injected);
	/* The long key went to whoever got it first. */
	dgi_txid lo = dgi_lock_owner(l, CACHE, lk, sizeof(lk), lh);
	if (r1 == DGI_LOCK_GRANTED) {
		assert_tx(lo, a);
		assert_true(r2 != DGI_LOCK_GRANTED);
	} else {
		assert_tx(lo, r2 == DGI_LOCK_GRANTED ? b : NONE);
	}
	assert_tx(owner(l, 3), r3 == DGI_LOCK_GRANTED ? a : NONE);
	dgi_locks_stats s = stats(l);
	assert_int_equal(s.locks, (r1 == DGI_LOCK_GRANTED || r2 == DGI_LOCK_GRANTED) +
	    (r3 == DGI_LOCK_GRANTED));
	assert_int_equal(s.waiters, r2 == DGI_LOCK_QUEUED);
	assert_int_equal(ra.calls + rb.calls, 0);

	/* Releasing what was taken grants b only if b was queued. */
	rel(l, a);
	assert_int_equal(rb.calls, r2 == DGI_LOCK_QUEUED);
	rel(l, b);
	s = stats(l);
	assert_int_equal(s.locks, 0);
	assert_int_equal(s.waiters, 0);

	/* The table still works. */
	memset(&rb, 0, sizeof(rb));
	assert_int_equal(dgi_lock_acquire(l, CACHE, lk, sizeof(lk), lh, &a, 0, rec_cb, &ra),
	    DGI_LOCK_GRANTED);
	assert_int_equal(dgi_lock_acquire(l, CACHE, lk, sizeof(lk), lh, &b, 0, rec_cb, &rb),
	    DGI_LOCK_QUEUED);
	assert_int_equal(acq(l, 3, a, 0, &ra), DGI_LOCK_GRANTED);
	assert_int_equal(rel(l, a), 2);
	assert_int_equal(rb.calls, 1);
	assert_tx(dgi_lock_owner(l, CACHE, lk, sizeof(lk), lh), b);
	assert_int_equal(ra.calls, 0);
	dgi_locks_destroy(l);
	return injected;
}

static void test_nomem(void **state)
{
	uint64_t n = 1;
	while (nomem_run(n))
		n++;
	/* Stripe table, entry, key copy, request, tx table at least. */
	assert_true(n > 5);
}

static void test_create_nomem(void **state)
{
	dgi_locks *l = (dgi_locks *)&l;
	for (uint64_t n = 1; n <= 3; n++) {
		dgi_alloc_fail_nth(n);
		assert_int_equal(dgi_locks_create(8, &l), DG_ERR_NOMEM);
		dgi_alloc_fail_nth(0);
		assert_null(l);
	}
}

/* One cycle: a locks two keys, b queues on one, c queues with a deadline
 * and times out, a's release grants b, everything is released. */
static void steady_cycle(dgi_locks *l, uint32_t i)
{
	struct rec ra = { 0 }, rb = { 0 }, rc = { 0 };
	dgi_txid a = txid(1, 3 * i + 1), b = txid(2, 3 * i + 2), c = txid(3, 3 * i + 3);
	uint32_t k1 = i % 16, k2 = 16 + i % 7;

	assert_int_equal(acq(l, k1, a, 0, &ra), DGI_LOCK_GRANTED);
	assert_int_equal(acq(l, k2, a, 0, &ra), DGI_LOCK_GRANTED);
	assert_int_equal(acq(l, k1, a, 0, &ra), DGI_LOCK_GRANTED);
	assert_int_equal(acq(l, k1, b, 0, &rb), DGI_LOCK_QUEUED);
	assert_int_equal(acq(l, k2, c, 10, &rc), DGI_LOCK_QUEUED);
	assert_int_equal(dgi_locks_expire(l, 10), 1);
	assert_int_equal(rel(l, a), 2);
	assert_int_equal(rb.calls, 1);
	assert_int_equal(rel(l, b), 1);
	assert_int_equal(rel(l, c), 0);
	assert_int_equal(rc.err, DG_ERR_TIMEOUT);
}

static void test_steady_state_no_alloc(void **state)
{
	dgi_locks *l;
	dgi_alloc_stats a0, a1;

	assert_int_equal(dgi_locks_create(8, &l), DG_OK);
	for (uint32_t i = 0; i < 200; i++)
		steady_cycle(l, i);
	uint64_t lallocs = stats(l).allocs;
	dgi_alloc_get_stats(&a0);
	for (uint32_t i = 200; i < 10200; i++)
		steady_cycle(l, i);
	dgi_alloc_get_stats(&a1);
	assert_int_equal(a1.allocs - a0.allocs, 0);
	assert_int_equal(a1.frees - a0.frees, 0);
	assert_int_equal(stats(l).allocs, lallocs);
	assert_int_equal(stats(l).locks, 0);
	dgi_locks_destroy(l);
}

/* ------------------------------------------------------------------------
 * Callbacks call back in
 * ------------------------------------------------------------------------ */

/* A request whose callback acts on the table.  If any table mutex were
 * held while it runs, its own call would block forever. */
struct reenter {
	dgi_locks *l;
	dgi_txid tx;
	int calls;
	dg_err err;
	int r_acq;           /* what the inner acquire returned */
	uint32_t r_rel;      /* what the inner release_all returned */
	struct rec inner;
};

/* On grant: take key 2 too, then finish (release_all) at once. */
static void grant_then_finish_cb(void *ctx, dg_err err)
{
	struct reenter *r = ctx;
	r->calls++;
	r->err = err;
	if (err != DG_OK)
		return;
	r->r_acq = acq(r->l, 2, r->tx, 0, &r->inner);
	r->r_rel = dgi_lock_release_all(r->l, &r->tx);
}

/* On timeout (or cancel): queue again on key 1. */
static void requeue_cb(void *ctx, dg_err err)
{
	struct reenter *r = ctx;
	r->calls++;
	r->err = err;
	if (err == DG_ERR_TIMEOUT)
		r->r_acq = acq(r->l, 1, r->tx, 0, &r->inner);
}

/* On cancel by destroy: roll back (release_all) from inside. */
static void rollback_cb(void *ctx, dg_err err)
{
	struct reenter *r = ctx;
	r->calls++;
	r->err = err;
	r->r_rel = dgi_lock_release_all(r->l, &r->tx);
}

static void test_callbacks_reenter(void **state)
{
	dgi_locks *l;
	dgi_txid a = txid(1, 1), c = txid(1, 3);
	struct rec ra = { 0 }, rc = { 0 };
	struct reenter b = { .tx = txid(1, 2) }, d = { .tx = txid(1, 4) };

	/* A callback run under a table mutex deadlocks on its inner call:
	 * SIGALRM ends the run then instead of the suite's timeout. */
	alarm(20);
	assert_int_equal(dgi_locks_create(1, &l), DG_OK);
	b.l = d.l = l;
	assert_int_equal(acq(l, 1, a, 0, &ra), DGI_LOCK_GRANTED);
	assert_int_equal(dgi_lock_acquire(l, CACHE, (const uint8_t *)&(uint32_t){ 1 }, 4,
	    fnv(&(uint32_t){ 1 }, 4), &b.tx, 0, grant_then_finish_cb, &b), DGI_LOCK_QUEUED);
	assert_int_equal(acq(l, 1, c, 0, &rc), DGI_LOCK_QUEUED);
	assert_int_equal(dgi_lock_acquire(l, CACHE, (const uint8_t *)&(uint32_t){ 1 }, 4,
	    fnv(&(uint32_t){ 1 }, 4), &d.tx, 5, requeue_cb, &d), DGI_LOCK_QUEUED);

	/* d times out and queues again (behind c) from inside its callback. */
	assert_int_equal(dgi_locks_expire(l, 5), 1);
	assert_int_equal(d.calls, 1);
	assert_int_equal(d.err, DG_ERR_TIMEOUT);
	assert_int_equal(d.r_acq, DGI_LOCK_QUEUED);

	/* a's release grants b, whose callback takes key 2 and releases both,
	 * which grants c (nested in b's callback). */
	assert_int_equal(rel(l, a), 1);
	assert_int_equal(b.calls, 1);
	assert_int_equal(b.err, DG_OK);
	assert_int_equal(b.r_acq, DGI_LOCK_GRANTED);
	assert_int_equal(b.r_rel, 2);
	assert_int_equal(rc.calls, 1);
	assert_int_equal(rc.err, DG_OK);
	assert_tx(owner(l, 1), c);
	assert_tx(owner(l, 2), NONE);

	/* c's release grants d's second request. */
	assert_int_equal(rel(l, c), 1);
	assert_int_equal(d.inner.calls, 1);
	assert_int_equal(d.inner.err, DG_OK);
	assert_tx(owner(l, 1), d.tx);

	/* destroy cancels e, whose callback rolls back from inside. */
	struct reenter e = { .l = l, .tx = txid(1, 5) };
	assert_int_equal(dgi_lock_acquire(l, CACHE, (const uint8_t *)&(uint32_t){ 1 }, 4,
	    fnv(&(uint32_t){ 1 }, 4), &e.tx, 0, rollback_cb, &e), DGI_LOCK_QUEUED);
	assert_int_equal(acq(l, 7, e.tx, 0, &ra), DGI_LOCK_GRANTED);
	dgi_locks_destroy(l);
	assert_int_equal(e.calls, 1);
	assert_int_equal(e.err, DG_ERR_CLOSED);
	assert_int_equal(e.r_rel, 1);
	assert_int_equal(ra.calls, 0);
	assert_int_equal(rc.calls, 1);
	alarm(0);
}

/* ------------------------------------------------------------------------
 * Threads
 * ------------------------------------------------------------------------ */

/* Each worker runs RUN_MS from a common start, and at least MIN_ITERS
 * rounds so a thread scheduled late on a busy machine still takes part. */
enum { NTHREADS = 4, NKEYS = 8, RUN_MS = 300, MIN_ITERS = 50, WAIT_S = 10 };

struct shared {
	dgi_locks *l;
	pthread_barrier_t start;
	atomic_int holders[NKEYS];
	uint64_t plain[NKEYS];       /* written only by a key's holder */
	atomic_int violations;
	atomic_int failures;
	atomic_bool stop;
};

struct worker {
	struct shared *sh;
	uint32_t id;
	sem_t granted;
	dg_err err;                  /* set by the callback, read after the post */
	uint64_t iters;
};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t xorshift64(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

static void post_cb(void *ctx, dg_err err)
{
	struct worker *w = ctx;
	w->err = err;
	sem_post(&w->granted);
}

/* Blocks until tx holds key k (bounded).  false: error or stuck. */
static bool lock_key(struct worker *w, uint32_t k, const dgi_txid *tx)
{
	int rc = dgi_lock_acquire(w->sh->l, CACHE, (const uint8_t *)&k, 4, fnv(&k, 4), tx, 0,
	    post_cb, w);
	if (rc == DGI_LOCK_GRANTED)
		return true;
	if (rc != DGI_LOCK_QUEUED)
		return false;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += WAIT_S;
	while (sem_timedwait(&w->granted, &ts) != 0)
		if (errno != EINTR)
			return false;
	return w->err == DG_OK;
}

static void hold(struct shared *sh, const uint32_t *k)
{
	for (int i = 0; i < 2; i++) {
		if (atomic_fetch_add(&sh->holders[k[i]], 1) != 0)
			atomic_fetch_add(&sh->violations, 1);
		sh->plain[k[i]]++;
	}
	sched_yield();
	for (int i = 0; i < 2; i++)
		atomic_fetch_sub(&sh->holders[k[i]], 1);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct shared *sh = w->sh;
	uint64_t rnd = 0x9e3779b97f4a7c15ull * (w->id + 1);

	pthread_barrier_wait(&sh->start);
	uint64_t end_ns = now_ns() + RUN_MS * 1000000ull;
	while (w->iters < MIN_ITERS || now_ns() < end_ns) {
		uint32_t k[2] = { (uint32_t)(xorshift64(&rnd) % NKEYS), 0 };
		do
			k[1] = (uint32_t)(xorshift64(&rnd) % NKEYS);
		while (k[1] == k[0]);
		if (k[0] > k[1]) {
			uint32_t t = k[0];
			k[0] = k[1];
			k[1] = t;
		}
		dgi_txid tx = txid(w->id + 1, ++w->iters);
		if (!lock_key(w, k[0], &tx) || !lock_key(w, k[1], &tx)) {
			atomic_fetch_add(&sh->failures, 1);
			return NULL;   /* its semaphore may still be posted: leave it */
		}
		hold(sh, k);
		if (dgi_lock_release_all(sh->l, &tx) != 2)
			atomic_fetch_add(&sh->failures, 1);
	}
	return NULL;
}

/* Reads the graph and counters meanwhile, for TSan to see. */
static void *monitor_main(void *arg)
{
	struct shared *sh = arg;
	dgi_txid out[2 * NTHREADS * 2];
	dgi_locks_stats s;
	while (!atomic_load(&sh->stop)) {
		/* The scan is per stripe, not one snapshot: a tx seen waiting
		 * in one stripe may be seen again, at its next wait, in a
		 * stripe scanned later — so no bound on the count holds under
		 * load.  What must hold: every pair written is well formed. */
		size_t n = dgi_locks_edges(sh->l, out, NTHREADS * 2);
		size_t got = n < NTHREADS * 2 ? n : NTHREADS * 2;
		for (size_t i = 0; i < got; i++)
			if (out[2 * i].node == 0 || out[2 * i + 1].node == 0 ||
			    dgi_txid_eq(&out[2 * i], &out[2 * i + 1]))
				atomic_fetch_add(&sh->failures, 1);
		dgi_locks_get_stats(sh->l, &s);
		dgi_locks_expire(sh->l, 1);
		sched_yield();
	}
	return NULL;
}

static void test_threads_mutual_exclusion(void **state)
{
	static struct shared sh;
	struct worker w[NTHREADS];
	pthread_t th[NTHREADS], mon;

	memset(&sh, 0, sizeof(sh));
	assert_int_equal(dgi_locks_create(4, &sh.l), DG_OK);
	assert_int_equal(pthread_barrier_init(&sh.start, NULL, NTHREADS), 0);
	for (uint32_t i = 0; i < NTHREADS; i++) {
		w[i] = (struct worker){ .sh = &sh, .id = i };
		assert_int_equal(sem_init(&w[i].granted, 0, 0), 0);
	}
	assert_int_equal(pthread_create(&mon, NULL, monitor_main, &sh), 0);
	for (uint32_t i = 0; i < NTHREADS; i++)
		assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
	for (uint32_t i = 0; i < NTHREADS; i++)
		pthread_join(th[i], NULL);
	atomic_store(&sh.stop, true);
	pthread_join(mon, NULL);

	assert_int_equal(atomic_load(&sh.violations), 0);
	assert_int_equal(atomic_load(&sh.failures), 0);
	uint64_t total = 0, plain = 0;
	for (uint32_t i = 0; i < NTHREADS; i++) {
		assert_true(w[i].iters >= MIN_ITERS);
		total += w[i].iters;
		sem_destroy(&w[i].granted);
	}
	for (uint32_t k = 0; k < NKEYS; k++)
		plain += sh.plain[k];
	assert_int_equal(plain, 2 * total);
	pthread_barrier_destroy(&sh.start);
	dgi_locks_stats s = stats(sh.l);
	assert_int_equal(s.locks, 0);
	assert_int_equal(s.waiters, 0);
	dgi_locks_destroy(sh.l);
}

/* ------------------------------------------------------------------------
 * Runner
 * ------------------------------------------------------------------------ */

int dgt_lockq_tests(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_grant_when_free),
		cmocka_unit_test(test_reentrant),
		cmocka_unit_test(test_release_one_key),
		cmocka_unit_test(test_invalid),
		cmocka_unit_test(test_fifo_three),
		cmocka_unit_test(test_release_all_100),
		cmocka_unit_test(test_deadline),
		cmocka_unit_test(test_release_cancels_own_waits),
		cmocka_unit_test(test_owner_waits_for_edges),
		cmocka_unit_test(test_destroy_cancels),
		cmocka_unit_test(test_nomem),
		cmocka_unit_test(test_create_nomem),
		cmocka_unit_test(test_steady_state_no_alloc),
		cmocka_unit_test(test_callbacks_reenter),
		cmocka_unit_test(test_threads_mutual_exclusion),
	};
	return cmocka_run_group_tests_name("lockq", tests, NULL, NULL);
}
