/*
 * cache_counters_test.c — a cache's operation counters (puts, removes,
 * hits, misses) and latency histograms stay exact when many threads count
 * at once (cache_int.h, "a cache's operation counters, per thread").
 *
 * What is tested:
 *   - K threads x M gets (half hits, half misses) and puts: every counter
 *     and every histogram's count is exactly what the threads did, read
 *     after they exited (their blocks stay counted), and again after new
 *     threads reused their indexes and counted on top;
 *   - more threads alive at once than a cache has blocks: the ones beyond
 *     count in the shared block, and nothing is lost or counted twice;
 *   - a destroyed cache: its blocks are folded into the shared one and
 *     freed when it is reclaimed, and its counts stay (the operations on
 *     its handle after the destroy count too).
 *
 * Entry point: dgt_counters_tests(), called by cache_test's runner.  The
 * TSan build of this file is what proves the per-thread blocks race-free.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "cache/cache_int.h"
#include "node/datagrid.h"
#include "node/node_int.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache_test.h"

int dgt_counters_tests(void);

enum { KEYS = 64 };

static _Atomic int wrong;      /* answers a worker did not expect */

struct worker {
	dg_cache *c;
	int id, m;
	bool puts;
	pthread_barrier_t *bar;    /* after the first op: every worker alive at once */
};

/* m gets, the even ones of a present key, the odd ones of an absent one;
 * with puts, a put of a present key after each. */
static void *work(void *p)
{
	struct worker *w = p;
	dg_buf b;
	dg_buf_init(&b);
	char k[48];
	for (int i = 0; i < w->m; i++) {
		bool hit = i % 2 == 0;
		if (hit)
			snprintf(k, sizeof(k), "k%d", (w->id + i) % KEYS);
		else
			snprintf(k, sizeof(k), "absent-%d-%d", w->id, i);
		b.len = 0;
		if (dg_cache_get(w->c, k, strlen(k), &b) != (hit ? DG_OK : DG_ERR_NOT_FOUND))
			atomic_fetch_add(&wrong, 1);
		if (w->puts) {
			snprintf(k, sizeof(k), "k%d", (w->id * 7 + i) % KEYS);
			if (dg_cache_put(w->c, k, strlen(k), "v", 1) != DG_OK)
				atomic_fetch_add(&wrong, 1);
		}
		if (i == 0 && w->bar != NULL)
			pthread_barrier_wait(w->bar);
	}
	dg_buf_free(&b);
	return NULL;
}

/* What the cache's counters should say. */
struct want {
	uint64_t gets, hits, misses, puts;
	uint64_t closed;           /* gets answered DG_ERR_CLOSED (timed, no hit or miss) */
};

/* Runs k workers of m ops each (all alive at once when together) and adds
 * what they did to *w. */
static void run_workers(dg_cache *c, int k, int m, bool puts, bool together, struct want *w)
{
	pthread_t *t = calloc((size_t)k, sizeof(*t));
	struct worker *ws = calloc((size_t)k, sizeof(*ws));
	assert_non_null(t);
	assert_non_null(ws);
	pthread_barrier_t bar;
	if (together)
		assert_int_equal(pthread_barrier_init(&bar, NULL, (unsigned)k), 0);
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	for (int i = 0; i < k; i++) {
		ws[i] = (struct worker){ c, i, m, puts, together ? &bar : NULL };
		assert_int_equal(pthread_create(&t[i], &attr, work, &ws[i]), 0);
	}
	for (int i = 0; i < k; i++)
		pthread_join(t[i], NULL);
	pthread_attr_destroy(&attr);
	if (together)
		pthread_barrier_destroy(&bar);
	assert_int_equal(atomic_load(&wrong), 0);
	uint64_t ops = (uint64_t)k * (uint64_t)m;
	w->gets += ops;
	w->hits += (uint64_t)k * (uint64_t)((m + 1) / 2);
	w->misses += (uint64_t)k * (uint64_t)(m / 2);
	w->puts += puts ? ops : 0;
	free(t);
	free(ws);
}

static void expect_want(dg_cache *c, const struct want *w)
{
	dg_cache_metrics m;
	OK(dg_cache_get_metrics(c, &m));
	assert_int_equal(m.hits, w->hits);
	assert_int_equal(m.misses, w->misses);
	assert_int_equal(m.gets, w->gets);
	assert_int_equal(m.puts, w->puts);
	assert_int_equal(m.removes, 0);
	const uint64_t count[DG_OP__COUNT] = { w->gets + w->closed, w->puts, 0 };
	for (int k = 0; k < DG_OP__COUNT; k++) {
		dg_latency l;
		OK(dg_cache_get_latency(c, (dg_cache_op_kind)k, &l));
		assert_int_equal(l.count, count[k]);
		uint64_t sum = 0;
		for (unsigned i = 0; i < DG_LAT_BUCKETS; i++)
			sum += l.buckets[i];
		assert_int_equal(sum, l.count);
	}
}

static dg_cache *counters_cache(dg_node *n, struct want *w)
{
	dg_cache_config cc;
	dg_cache_config_init(&cc, "counters");
	dg_cache *c;
	OK(dg_cache_create(n, &cc, &c));
	char k[16];
	for (int i = 0; i < KEYS; i++) {
		snprintf(k, sizeof(k), "k%d", i);
		OK(dg_cache_put(c, k, strlen(k), "v", 1));
	}
	memset(w, 0, sizeof(*w));
	w->puts = KEYS;
	expect_want(c, w);
	return c;
}

static void test_counters_exact_across_threads(void **state)
{
	(void)state;
	dg_node *n = start_node(NULL, 0, false, NULL);
	struct want w;
	dg_cache *c = counters_cache(n, &w);
	/* 8 threads at once, then each gone: every count is theirs */
	run_workers(c, 8, 3001, true, true, &w);
	expect_want(c, &w);
	/* new threads take the exited ones' indexes and count on top */
	run_workers(c, 4, 2000, false, false, &w);
	expect_want(c, &w);
	run_workers(c, 3, 1500, true, true, &w);
	expect_want(c, &w);
	dg_node_stop(n);
}

/* More threads alive at once than a cache has blocks: the ones beyond
 * count in the shared block (atomically), the others in their own. */
static void test_counters_more_threads_than_blocks(void **state)
{
	(void)state;
	dg_node *n = start_node(NULL, 0, false, NULL);
	struct want w;
	dg_cache *c = counters_cache(n, &w);
	uint64_t shared0 = atomic_load(&c->ctr_shared.hits);
	run_workers(c, DGI_CTR_BLOCKS + 24, 41, true, true, &w);
	assert_true(atomic_load(&c->ctr_shared.hits) > shared0); /* (the fallback ran) */
	expect_want(c, &w);
	run_workers(c, 6, 500, true, true, &w);
	expect_want(c, &w);
	dg_node_stop(n);
}

/* A destroyed cache's counts stay: its threads' blocks are folded into
 * the shared one when it is reclaimed. */
static void test_counters_kept_after_destroy(void **state)
{
	(void)state;
	dg_node *n = start_node(NULL, 0, false, NULL);
	dgi_grid *g = dgi_node_grid(n);
	struct want w;
	dg_cache *c = counters_cache(n, &w);
	run_workers(c, 4, 1001, true, true, &w);
	expect_want(c, &w);
	OK(dg_cache_destroy(n, "counters"));
	dg_buf b;
	dg_buf_init(&b);
	EXPECT(dg_cache_get(c, "k1", 2, &b), DG_ERR_CLOSED);
	w.closed++;
	expect_want(c, &w);
	uint64_t deadline = dgi_now_ms() + 5000;
	for (;;) {
		uint32_t affs, caches;
		dgi_grid_reclaim(g, false);
		dgi_grid_limbo(g, &affs, &caches);
		if (caches == 0)
			break;
		assert_true(dgi_now_ms() < deadline);
		usleep(5 * 1000);
	}
	for (uint32_t i = 0; i < DGI_CTR_BLOCKS; i++)
		assert_null(atomic_load(&c->ctrs[i])); /* folded, freed */
	expect_want(c, &w);
	EXPECT(dg_cache_get(c, "k1", 2, &b), DG_ERR_CLOSED); /* into the shared block */
	w.closed++;
	expect_want(c, &w);
	for (uint32_t i = 0; i < DGI_CTR_BLOCKS; i++)
		assert_null(atomic_load(&c->ctrs[i]));
	dg_buf_free(&b);
	dg_node_stop(n);
}

int dgt_counters_tests(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_counters_exact_across_threads),
		cmocka_unit_test(test_counters_more_threads_than_blocks),
		cmocka_unit_test(test_counters_kept_after_destroy),
	};
	return cmocka_run_group_tests_name("cache_counters", tests, NULL, NULL);
}
