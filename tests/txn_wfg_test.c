/*
 * txn_wfg_test.c — unit tests of txn/wfg.c, the wait-for graph used for
 * deadlock detection.
 *
 * What is tested, each against wfg.h's contract:
 *   - no cycle in a chain or a DAG, or for an unknown vertex;
 *   - 2- and 3-cycles, found from each member in wait order;
 *   - a cycle that does not go through `from` is not reported for it, and
 *     dead-end branches the search backs out of are not in the answer;
 *   - invalid edges (self, {0,0}, NULL) are refused and change nothing;
 *   - duplicate edges are ignored: they allocate nothing, even when the
 *     waiter's adjacency array is full and an allocation would fail (there
 *     is no degree accessor in wfg.h, so this is how a degree is seen);
 *   - a 100 000-vertex cycle (the search must not recurse: ASan's default
 *     stack) and a 100 000-vertex chain;
 *   - cap smaller than the cycle: the true length, cap entries written;
 *   - the victim: largest (start, node, seq), a known start kept over a
 *     later unknown one;
 *   - reset keeps memory: refilling the same shape allocates nothing;
 *   - every allocation point failing: DG_ERR_NOMEM, graph unchanged and
 *     usable;
 *   - random graphs cross-checked against Floyd–Warshall reachability
 *     (a cycle through v exists iff v reaches itself), every returned cycle
 *     checked edge by edge, and the victim against a reference.
 *
 * Entry point: dgt_wfg_tests(), called by the test runner.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "txn/wfg.h"
#include "marshal/marshal.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

int dgt_wfg_tests(void);

/* ------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------ */

static dgi_txid tx(uint64_t node, uint64_t seq)
{
	dgi_txid t = { node, seq };
	return t;
}

static void add(dgi_wfg *g, dgi_txid a, dgi_txid b)
{
	assert_int_equal(dgi_wfg_add(g, &a, 0, &b, 0), DG_OK);
}

static void add_timed(dgi_wfg *g, dgi_txid a, uint64_t sa, dgi_txid b, uint64_t sb)
{
	assert_int_equal(dgi_wfg_add(g, &a, sa, &b, sb), DG_OK);
}

static dgi_wfg *new_graph(void)
{
	dgi_wfg *g = NULL;
	assert_int_equal(dgi_wfg_create(&g), DG_OK);
	assert_non_null(g);
	return g;
}

static size_t cycle_of(dgi_wfg *g, dgi_txid from, dgi_txid *out, size_t cap)
{
	return dgi_wfg_cycle(g, &from, out, cap);
}

static void assert_txid(dgi_txid got, dgi_txid want)
{
	assert_int_equal(got.node, want.node);
	assert_int_equal(got.seq, want.seq);
}

static uint64_t allocs_now(void)
{
	dgi_alloc_stats st;
	dgi_alloc_get_stats(&st);
	return st.allocs;
}

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* ------------------------------------------------------------------------
 * Reference: an adjacency matrix and its transitive closure
 * ------------------------------------------------------------------------ */

#define RMAX 64

struct ref {
	int n;                       /* vertices 0..n-1 */
	dgi_txid id[RMAX];
	uint64_t start[RMAX];        /* first known start, 0 = unknown */
	bool edge[RMAX][RMAX];
	bool reach[RMAX][RMAX];
};

/* Ids that share nodes or counters, so the table's mix is exercised. */
static void ref_init(struct ref *r, int n, uint64_t salt)
{
	memset(r, 0, sizeof(*r));
	r->n = n;
	for (int i = 0; i < n; i++)
		r->id[i] = tx(1 + (uint64_t)i % 4, salt + (uint64_t)i / 4 * 65536);
}

static void ref_add(struct ref *r, int a, int b, uint64_t sa, uint64_t sb)
{
	r->edge[a][b] = true;
	if (r->start[a] == 0)
		r->start[a] = sa;
	if (r->start[b] == 0)
		r->start[b] = sb;
}

static void ref_closure(struct ref *r)
{
	memcpy(r->reach, r->edge, sizeof(r->reach));
	for (int k = 0; k < r->n; k++)
		for (int i = 0; i < r->n; i++)
			if (r->reach[i][k])
				for (int j = 0; j < r->n; j++)
					r->reach[i][j] |= r->reach[k][j];
}

static int ref_index(const struct ref *r, dgi_txid t)
{
	for (int i = 0; i < r->n; i++)
		if (dgi_txid_eq(&r->id[i], &t))
			return i;
	fail_msg("cycle names an unknown txid {%llu,%llu}",
	    (unsigned long long)t.node, (unsigned long long)t.seq);
	return -1;
}

/* The reference victim of a cycle (indices): largest (start, node, seq). */
static dgi_txid ref_victim(const struct ref *r, const int *idx, size_t n)
{
	int best = idx[0];
	for (size_t i = 1; i < n; i++) {
		int c = idx[i];
		const dgi_txid *a = &r->id[c], *b = &r->id[best];
		if (r->start[c] != r->start[best] ? r->start[c] > r->start[best] :
		    a->node != b->node ? a->node > b->node : a->seq > b->seq)
			best = c;
	}
	return r->id[best];
}

/* A returned cycle: starts at v, each vertex once, every step an edge,
 * the last one back to v; and its victim matches the reference. */
static void check_cycle(dgi_wfg *g, const struct ref *r, int v,
    const dgi_txid *cyc, size_t n)
{
	int idx[RMAX] = { 0 };
	bool seen[RMAX] = { false };
	assert_true(n >= 2 && n <= (size_t)r->n);
	for (size_t i = 0; i < n; i++) {
		idx[i] = ref_index(r, cyc[i]);
		assert_false(seen[idx[i]]);
		seen[idx[i]] = true;
	}
	assert_int_equal(idx[0], v);
	for (size_t i = 0; i < n; i++)
		assert_true(r->edge[idx[i]][idx[(i + 1) % n]]);
	assert_txid(dgi_wfg_victim(g, cyc, n), ref_victim(r, idx, n));
}

/* Every vertex: a cycle is reported iff it reaches itself, and is valid;
 * a smaller cap gives the same length and a prefix of the same cycle. */
static int check_graph(dgi_wfg *g, struct ref *r)
{
	dgi_txid cyc[RMAX], part[3];
	int cycles = 0;
	ref_closure(r);
	for (int v = 0; v < r->n; v++) {
		size_t n = dgi_wfg_cycle(g, &r->id[v], cyc, RMAX);
		assert_int_equal(n != 0, r->reach[v][v]);
		if (n == 0)
			continue;
		cycles++;
		check_cycle(g, r, v, cyc, n);
		assert_int_equal(dgi_wfg_cycle(g, &r->id[v], part, 2), n);
		assert_memory_equal(part, cyc, 2 * sizeof(dgi_txid));
	}
	return cycles;
}

/* ------------------------------------------------------------------------
 * Tests
 * ------------------------------------------------------------------------ */

static void test_no_cycle(void **state)
{
	(void)state;
	dgi_wfg *g = new_graph();
	dgi_txid cyc[16];
	assert_int_equal(cycle_of(g, tx(1, 1), cyc, 16), 0);   /* empty graph */
	for (uint64_t i = 1; i < 10; i++)                        /* chain */
		add(g, tx(1, i), tx(1, i + 1));
	for (uint64_t i = 1; i <= 10; i++)
		assert_int_equal(cycle_of(g, tx(1, i), cyc, 16), 0);
	/* a DAG: diamonds and a shortcut into the chain */
	add(g, tx(2, 1), tx(2, 2));
	add(g, tx(2, 1), tx(2, 3));
	add(g, tx(2, 2), tx(2, 4));
	add(g, tx(2, 3), tx(2, 4));
	add(g, tx(2, 4), tx(1, 1));
	add(g, tx(2, 1), tx(1, 5));
	for (uint64_t i = 1; i <= 4; i++)
		assert_int_equal(cycle_of(g, tx(2, i), cyc, 16), 0);
	assert_int_equal(cycle_of(g, tx(9, 9), cyc, 16), 0);    /* unknown */
	assert_int_equal(cycle_of(g, tx(1, 1), NULL, 0), 0);
	dgi_wfg_destroy(g);
	dgi_wfg_destroy(NULL);
}

static void test_two_cycle(void **state)
{
	(void)state;
	dgi_wfg *g = new_graph();
	dgi_txid a = tx(1, 7), b = tx(2, 7), cyc[4];
	add(g, a, b);
	assert_int_equal(cycle_of(g, a, cyc, 4), 0);
	add(g, b, a);
	assert_int_equal(cycle_of(g, a, cyc, 4), 2);
	assert_txid(cyc[0], a);
	assert_txid(cyc[1], b);
	assert_int_equal(cycle_of(g, b, cyc, 4), 2);
	assert_txid(cyc[0], b);
	assert_txid(cyc[1], a);
	dgi_wfg_destroy(g);
}

static void test_three_cycle_each_member(void **state)
{
	(void)state;
	dgi_wfg *g = new_graph();
	dgi_txid v[3] = { tx(1, 1), tx(1, 2), tx(3, 1) }, cyc[8];
	add(g, v[0], v[1]);
	add(g, v[1], v[2]);
	add(g, v[2], v[0]);
	add(g, tx(5, 5), v[0]);   /* a waiter outside the cycle */
	for (int k = 0; k < 3; k++) {
		assert_int_equal(cycle_of(g, v[k], cyc, 8), 3);
		for (int i = 0; i < 3; i++)
			assert_txid(cyc[i], v[(k + i) % 3]);
	}
	assert_int_equal(cycle_of(g, tx(5, 5), cyc, 8), 0);
	dgi_wfg_destroy(g);
}

static void test_cycle_not_through_from(void **state)
{
	(void)state;
	dgi_wfg *g = new_graph();
	dgi_txid f = tx(1, 1), a = tx(1, 2), b = tx(1, 3), cyc[8];
	add(g, f, a);
	add(g, a, b);
	add(g, b, a);
	assert_int_equal(cycle_of(g, f, cyc, 8), 0);
	assert_int_equal(cycle_of(g, a, cyc, 8), 2);
	assert_txid(cyc[0], a);
	assert_txid(cyc[1], b);
	dgi_wfg_destroy(g);
}

/* The search backs out of a dead end and a side loop first: neither may be
 * left in the answer. */
static void test_dead_ends_not_in_cycle(void **state)
{
	(void)state;
	dgi_wfg *g = new_graph();
	dgi_txid f = tx(1, 1), d1 = tx(2, 1), d2 = tx(2, 2);
	dgi_txid a = tx(3, 1), b = tx(3, 2), c = tx(3, 3), cyc[8];
	add(g, f, d1);     /* tried first: a dead end two deep */
	add(g, d1, d2);
	add(g, f, a);
	add(g, a, b);
	add(g, b, a);      /* a side loop, tried before b -> c */
	add(g, b, c);
	add(g, c, f);
	assert_int_equal(cycle_of(g, f, cyc, 8), 4);
	assert_txid(cyc[0], f);
	assert_txid(cyc[1], a);
	assert_txid(cyc[2], b);
	assert_txid(cyc[3], c);
	dgi_wfg_destroy(g);
}

static void test_invalid(void **state)
{
	(void)state;
	dgi_wfg *g = new_graph();
	dgi_txid a = tx(1, 1), b = tx(1, 2), zero = tx(0, 0), cyc[4];
	assert_int_equal(dgi_wfg_add(g, &a, 5, &a, 5), DG_ERR_INVAL);
	assert_int_equal(dgi_wfg_add(g, &zero, 0, &a, 0), DG_ERR_INVAL);
	assert_int_equal(dgi_wfg_add(g, &a, 0, &zero, 0), DG_ERR_INVAL);
	assert_int_equal(dgi_wfg_add(g, NULL, 0, &a, 0), DG_ERR_INVAL);
	assert_int_equal(dgi_wfg_add(g, &a, 0, NULL, 0), DG_ERR_INVAL);
	assert_int_equal(dgi_wfg_add(NULL, &a, 0, &b, 0), DG_ERR_INVAL);
	assert_int_equal(dgi_wfg_create(NULL), DG_ERR_INVAL);
	/* ids with only a node or only a counter are valid */
	add(g, tx(0, 1), tx(1, 0));
	add(g, tx(1, 0), tx(0, 1));
	assert_int_equal(cycle_of(g, tx(0, 1), cyc, 4), 2);
	/* nothing was added by the refused calls: a alone has no vertex */
	add(g, b, a);
	assert_int_equal(cycle_of(g, a, cyc, 4), 0);
	assert_int_equal(cycle_of(g, b, cyc, 4), 0);
	dgi_wfg_destroy(g);
}

/* A duplicate must not grow the adjacency: 1000 of them allocate nothing
 * (without dedup the array doubles ~8 times), even with the next
 * allocation set to fail. */
static void test_duplicates(void **state)
{
	(void)state;
	dgi_wfg *g = new_graph();
	dgi_txid a = tx(1, 1), b = tx(1, 2), c = tx(1, 3), cyc[8];
	add(g, a, b);
	add(g, a, c);
	add(g, a, tx(2, 1));
	add(g, a, tx(2, 2));   /* a's 4 out-edges fill its first array */
	add(g, b, a);
	uint64_t before = allocs_now();
	for (int i = 0; i < 1000; i++) {
		add(g, a, b);
		add(g, a, c);
		add(g, b, a);
	}
	assert_int_equal(allocs_now(), before);
	dgi_alloc_fail_nth(1);
	assert_int_equal(dgi_wfg_add(g, &a, 0, &c, 0), DG_OK);
	dgi_alloc_fail_nth(0);
	assert_int_equal(allocs_now(), before);
	assert_int_equal(cycle_of(g, a, cyc, 8), 2);
	assert_txid(cyc[1], b);
	/* the reverse edge is a new one */
	add(g, c, a);
	assert_int_equal(cycle_of(g, c, cyc, 8), 2);
	dgi_wfg_destroy(g);
}

#define LONG_N 100000u

static dgi_txid long_id(uint64_t i)
{
	return tx(1 + i % 7, 1000 + i);
}

static void test_long_cycle(void **state)
{
	(void)state;
	dgi_wfg *g = new_graph();
	dgi_txid *cyc = malloc(LONG_N * sizeof(*cyc));
	assert_non_null(cyc);
	for (uint64_t i = 0; i + 1 < LONG_N; i++)
		add(g, long_id(i), long_id(i + 1));
	assert_int_equal(cycle_of(g, long_id(0), cyc, LONG_N), 0);  /* chain */
	add(g, long_id(LONG_N - 1), long_id(0));
	uint64_t starts[2] = { 0, 54321 };
	for (int k = 0; k < 2; k++) {
		assert_int_equal(cycle_of(g, long_id(starts[k]), cyc, LONG_N), LONG_N);
		for (uint64_t i = 0; i < LONG_N; i++)
			assert_txid(cyc[i], long_id((starts[k] + i) % LONG_N));
	}
	free(cyc);
	dgi_wfg_destroy(g);
}

static void test_cap_smaller(void **state)
{
	(void)state;
	dgi_wfg *g = new_graph();
	dgi_txid cyc[8];
	for (uint64_t i = 0; i < 5; i++)
		add(g, tx(4, i + 1), tx(4, (i + 1) % 5 + 1));
	for (int i = 0; i < 8; i++)
		cyc[i] = tx(77, 77);
	assert_int_equal(cycle_of(g, tx(4, 2), cyc, 3), 5);
	assert_txid(cyc[0], tx(4, 2));
	assert_txid(cyc[1], tx(4, 3));
	assert_txid(cyc[2], tx(4, 4));
	for (int i = 3; i < 8; i++)
		assert_txid(cyc[i], tx(77, 77));
	assert_int_equal(cycle_of(g, tx(4, 2), NULL, 0), 5);
	assert_int_equal(cycle_of(g, tx(4, 2), cyc, 0), 5);
	assert_txid(cyc[0], tx(4, 2));
	dgi_wfg_destroy(g);
}

static void test_victim(void **state)
{
	(void)state;
	dgi_wfg *g = new_graph();
	dgi_txid a = tx(1, 1), b = tx(2, 1), c = tx(3, 1), d = tx(1, 9), cyc[8];
	/* a started last; b and c, d are older */
	add_timed(g, a, 300, b, 100);
	add_timed(g, b, 100, c, 200);
	add_timed(g, c, 200, a, 300);
	size_t n = cycle_of(g, b, cyc, 8);
	assert_int_equal(n, 3);
	assert_txid(dgi_wfg_victim(g, cyc, n), a);
	assert_txid(dgi_wfg_victim(g, cyc + 1, 2), a);

	/* ties on start: larger node, then larger seq */
	dgi_wfg_reset(g);
	add_timed(g, a, 500, b, 500);
	add_timed(g, b, 500, d, 500);
	add_timed(g, d, 500, a, 500);
	n = cycle_of(g, a, cyc, 8);
	assert_int_equal(n, 3);
	assert_txid(dgi_wfg_victim(g, cyc, n), b);        /* node 2 > 1 */
	dgi_txid ad[2] = { a, d };
	assert_txid(dgi_wfg_victim(g, ad, 2), d);         /* seq 9 > 1 */

	/* unknown (0) first, known later: the known start counts; a later 0
	 * does not erase it */
	dgi_wfg_reset(g);
	add_timed(g, a, 0, b, 50);
	add_timed(g, b, 50, c, 60);
	add_timed(g, c, 60, a, 0);
	n = cycle_of(g, a, cyc, 8);
	assert_txid(dgi_wfg_victim(g, cyc, n), c);        /* a unknown: oldest */
	add_timed(g, tx(9, 9), 0, a, 70);
	assert_txid(dgi_wfg_victim(g, cyc, n), a);
	add_timed(g, a, 0, c, 0);
	add_timed(g, tx(9, 8), 0, a, 10);
	assert_txid(dgi_wfg_victim(g, cyc, n), a);        /* keeps 70 */

	/* ids not in the graph count as start 0; an empty list gives {0,0} */
	dgi_txid strangers[2] = { tx(5, 1), tx(4, 9) };
	assert_txid(dgi_wfg_victim(g, strangers, 2), tx(5, 1));
	assert_txid(dgi_wfg_victim(g, cyc, 0), tx(0, 0));
	dgi_wfg_destroy(g);
}

/* A shape with growth everywhere: 3000 vertices, out-degrees up to 40. */
static void fill_shape(dgi_wfg *g)
{
	for (uint64_t i = 0; i < 3000; i++)
		add(g, tx(1, i + 1), tx(2, (i * 7) % 3000 + 1));
	for (uint64_t i = 0; i < 40; i++)
		add(g, tx(1, 1), tx(3, i + 1));
	for (uint64_t i = 0; i < 3000; i++)
		add(g, tx(2, i + 1), tx(1, (i * 13) % 3000 + 1));
}

static void test_reset_keeps_memory(void **state)
{
	(void)state;
	dgi_wfg *g = new_graph();
	dgi_txid cyc[8];
	fill_shape(g);
	size_t n1 = cycle_of(g, tx(1, 1), NULL, 0);
	assert_true(n1 > 0);
	dgi_wfg_reset(g);
	assert_int_equal(cycle_of(g, tx(1, 1), cyc, 8), 0);
	assert_int_equal(cycle_of(g, tx(2, 8), cyc, 8), 0);
	uint64_t before = allocs_now();
	fill_shape(g);
	assert_int_equal(allocs_now(), before);
	assert_int_equal(cycle_of(g, tx(1, 1), NULL, 0), n1);
	/* and again after a smaller fill in between */
	dgi_wfg_reset(g);
	add(g, tx(1, 1), tx(1, 2));
	dgi_wfg_reset(g);
	fill_shape(g);
	assert_int_equal(allocs_now(), before);
	dgi_wfg_destroy(g);
}

/* Mostly unknown (0) starts, so a start noted by a failed add would show. */
static uint64_t unknown_or(uint64_t r)
{
	return r < 10 ? 0 : r;
}

/* Builds a random graph one edge at a time, making each allocation of each
 * add fail in turn: DG_ERR_NOMEM, and the graph still the reference one. */
static void test_nomem(void **state)
{
	(void)state;
	dgi_wfg *g = NULL;
	dgi_alloc_fail_nth(1);
	assert_int_equal(dgi_wfg_create(&g), DG_ERR_NOMEM);
	assert_null(g);
	g = new_graph();
	static struct ref r;
	ref_init(&r, RMAX, 11);
	uint64_t seed = 99;
	int failures = 0;
	for (int e = 0; e < 200; e++) {
		int a = (int)(splitmix64(&seed) % RMAX), b = (int)(splitmix64(&seed) % RMAX);
		uint64_t sa, sb;
		if (a == b)
			continue;
		/* new start times per attempt: a failed add must not note its own */
		for (uint64_t nth = 1;; nth++) {
			sa = unknown_or(splitmix64(&seed) % 16);
			sb = unknown_or(splitmix64(&seed) % 16);
			dgi_alloc_fail_nth(nth);
			dg_err err = dgi_wfg_add(g, &r.id[a], sa, &r.id[b], sb);
			dgi_alloc_fail_nth(0);
			if (err == DG_OK)
				break;
			assert_int_equal(err, DG_ERR_NOMEM);
			failures++;
			check_graph(g, &r);
		}
		ref_add(&r, a, b, sa, sb);
		if (e % 10 == 0)
			check_graph(g, &r);
	}
	assert_true(failures > RMAX / 2);   /* most waiters' first edges allocate */
	assert_true(check_graph(g, &r) > 0);
	dgi_wfg_destroy(g);
}

#define TRIALS 200
#define TRIAL_V 50

static void test_random_vs_reference(void **state)
{
	(void)state;
	static struct ref r;
	dgi_wfg *g = new_graph();
	uint64_t seed = 12345;
	int with = 0, without = 0;
	for (int t = 0; t < TRIALS; t++) {
		int m = t % 2 ? 120 : 20 + t % 60;
		ref_init(&r, TRIAL_V, (uint64_t)t * 1000 + 1);
		dgi_wfg_reset(g);
		for (int e = 0; e < m; e++) {
			int a = (int)(splitmix64(&seed) % TRIAL_V);
			int b = (int)(splitmix64(&seed) % TRIAL_V);
			uint64_t sa = splitmix64(&seed) % 20, sb = splitmix64(&seed) % 20;
			if (a == b) {
				assert_int_equal(dgi_wfg_add(g, &r.id[a], sa, &r.id[b], sb),
				    DG_ERR_INVAL);
				continue;
			}
			add_timed(g, r.id[a], sa, r.id[b], sb);
			ref_add(&r, a, b, sa, sb);
		}
		int c = check_graph(g, &r);
		with += c;
		without += TRIAL_V - c;
	}
	/* the trials cover both answers plenty */
	assert_true(with > 1000);
	assert_true(without > 1000);
	dgi_wfg_destroy(g);
}

/* ------------------------------------------------------------------------
 * Entry point
 * ------------------------------------------------------------------------ */

int dgt_wfg_tests(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_no_cycle),
		cmocka_unit_test(test_two_cycle),
		cmocka_unit_test(test_three_cycle_each_member),
		cmocka_unit_test(test_cycle_not_through_from),
		cmocka_unit_test(test_dead_ends_not_in_cycle),
		cmocka_unit_test(test_invalid),
		cmocka_unit_test(test_duplicates),
		cmocka_unit_test(test_long_cycle),
		cmocka_unit_test(test_cap_smaller),
		cmocka_unit_test(test_victim),
		cmocka_unit_test(test_reset_keeps_memory),
		cmocka_unit_test(test_nomem),
		cmocka_unit_test(test_random_vs_reference),
	};
	return cmocka_run_group_tests_name("wfg", tests, NULL, NULL);
}
