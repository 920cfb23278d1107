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
 *   - threads whose block could not be allocated (dgi_alloc_fail_nth) count
 *     in the shared block, which the short get and put leave to the
 *     general paths (they count with plain stores), exactly, beside
 *     threads with blocks;
 *   - a destroyed cache: its blocks are folded into the shared one and
 *     freed when it is reclaimed, and its counts stay (the operations on
 *     its handle after the destroy count too);
 *   - a primary whose lease lapsed refuses an update (DG_ERR_NOT_READY,
 *     partition unlocked) and a local read, with the lease read once per
 *     update (primary.c);
 *   - sampled timing (cache_int.h, DGI_LAT_SAMPLE): one fast operation in
 *     64 per thread, cache and kind is timed, the first always, and the
 *     others are counted as the last sampled one; a slow kind (1 MB puts)
 *     interleaved with a fast one (gets) keeps its own times; remote gets
 *     interleaved with local ones are always timed, so the histogram
 *     shows each of them however the samples fall.
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
#include "transport/member_int.h"
#include "transport/transport_int.h"

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

/* Ops from..m-1 of w: get i of a present key (fmt, one %d) when i is
 * even, of an absent one when odd; with puts, a put of a present key
 * after each; after op 0, w->bar. */
static void do_ops(struct worker *w, int from, const char *fmt, dg_buf *b)
{
	char k[48];
	for (int i = from; i < w->m; i++) {
		bool hit = i % 2 == 0;
		if (hit)
			snprintf(k, sizeof(k), fmt, (w->id + i) % KEYS);
		else
			snprintf(k, sizeof(k), "absent-%d-%d", w->id, i);
		b->len = 0;
		if (dg_cache_get(w->c, k, strlen(k), b) != (hit ? DG_OK : DG_ERR_NOT_FOUND))
			atomic_fetch_add(&wrong, 1);
		if (w->puts) {
			snprintf(k, sizeof(k), fmt, (w->id * 7 + i) % KEYS);
			if (dg_cache_put(w->c, k, strlen(k), "v", 1) != DG_OK)
				atomic_fetch_add(&wrong, 1);
		}
		if (i == 0 && w->bar != NULL)
			pthread_barrier_wait(w->bar);
	}
}

/* m gets, the even ones of a present key, the odd ones of an absent one;
 * with puts, a put of a present key after each. */
static void *work(void *p)
{
	dg_buf b;
	dg_buf_init(&b);
	do_ops(p, 0, "k%d", &b);
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

/* A worker whose counter block of c cannot be allocated: its first get
 * is made with the allocation failing (after a get on warm, so that the
 * block is the first allocation it makes), then it waits for go and does
 * the rest of its m ops as work does. */
#define OOM_KEY "oom-key-%02d" /* (8..127 bytes: the short paths' keys) */
static _Atomic int short_counted; /* a short path that counted in the shared block */

struct oom_worker {
	struct worker w;
	dg_cache *warm;
	_Atomic int reported;      /* 1: its first op is done */
	bool shared;               /* its slot holds the shared block */
};

/* The oom workers wait for go (under go_mu) after their first op. */
static pthread_mutex_t go_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t go_cv = PTHREAD_COND_INITIALIZER;
static int go;

static void go_set(int v)
{
	pthread_mutex_lock(&go_mu);
	go = v;
	pthread_cond_broadcast(&go_cv);
	pthread_mutex_unlock(&go_mu);
}

static void *work_oom(void *p)
{
	struct oom_worker *o = p;
	dg_buf b;
	dg_buf_init(&b);
	if (dg_buf_reserve(&b, 64) != DG_OK)
		atomic_fetch_add(&wrong, 1);
	if (dg_cache_get(o->warm, "k0", 2, &b) != DG_OK) /* (its slot, index and block there) */
		atomic_fetch_add(&wrong, 1);
	b.len = 0;
	uint32_t ix = dgi_thread_index();
	if (ix < DGI_CTR_BLOCKS) /* (past them it counts in the shared block anyway) */
		dgi_alloc_fail_nth(1);
	char k[48];
	snprintf(k, sizeof(k), "k%d", o->w.id % KEYS);
	if (dg_cache_get(o->w.c, k, strlen(k), &b) != DG_OK)
		atomic_fetch_add(&wrong, 1);
	dgi_alloc_fail_nth(0);
	o->shared = ix < DGI_CTR_BLOCKS && atomic_load(&o->w.c->ctrs[ix]) == &o->w.c->ctr_shared;
	if (!o->shared) {
		o->w.m = 1; /* (its block, or an index past them: not this test's case) */
	} else {
		/* the short paths (raw keys of 8..127 bytes) count with plain
		 * stores: they leave a thread of the shared block to the
		 * general paths, answering and counting nothing */
		uint64_t h0 = atomic_load(&o->w.c->ctr_shared.hits);
		uint64_t p0 = atomic_load(&o->w.c->ctr_shared.puts);
		snprintf(k, sizeof(k), OOM_KEY, o->w.id % KEYS);
		if (dgi_get_short(o->w.c, (const uint8_t *)k, (uint32_t)strlen(k), &b) != DG_ERR__COUNT ||
		    dgi_put_short(o->w.c, (const uint8_t *)k, (uint32_t)strlen(k),
		    (const uint8_t *)"v", 1) != DG_ERR__COUNT ||
		    atomic_load(&o->w.c->ctr_shared.hits) != h0 ||
		    atomic_load(&o->w.c->ctr_shared.puts) != p0)
			atomic_fetch_add(&short_counted, 1);
	}
	atomic_store(&o->reported, 1);
	pthread_mutex_lock(&go_mu);
	while (!go)
		pthread_cond_wait(&go_cv, &go_mu);
	pthread_mutex_unlock(&go_mu);
	do_ops(&o->w, 1, OOM_KEY, &b);
	dg_buf_free(&b);
	return NULL;
}

/* Threads whose counter blocks could not be allocated (dgi_ctrs_make out
 * of memory) count in the shared block for good, atomically — also on
 * the short paths, which leave such a thread's operations to the general
 * ones — and together with threads that have blocks every count is
 * exact.  (A worker whose allocation did not fail — another thread of
 * the node took the failure, or it got a thread index past the blocks,
 * as after test_counters_more_threads_than_blocks — stops after its
 * first op, counted all the same, and more are started until two have
 * no block.) */
static void test_counters_block_out_of_memory(void **state)
{
	(void)state;
	dg_node *n = start_node(NULL, 0, false, NULL);
	struct want w;
	dg_cache *c = counters_cache(n, &w);
	dg_cache_config cc;
	dg_cache_config_init(&cc, "counters-warm");
	dg_cache *warm;
	OK(dg_cache_create(n, &cc, &warm));
	OK(dg_cache_put(warm, "k0", 2, "v", 1));
	char key[32];
	for (int i = 0; i < KEYS; i++) {
		snprintf(key, sizeof(key), OOM_KEY, i);
		OK(dg_cache_put(c, key, strlen(key), "v", 1));
	}
	w.puts += KEYS;
	enum { M = 100001, MAXW = 200 };
	struct oom_worker *o = calloc(MAXW, sizeof(*o));
	pthread_t t[MAXW];
	assert_non_null(o);
	go_set(0);
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	uint64_t shared0 = atomic_load(&c->ctr_shared.hits);
	int k = 0, shared = 0;
	for (; k < MAXW && shared < 2; k++) {
		o[k].w = (struct worker){ c, k, M, true, NULL };
		o[k].warm = warm;
		assert_int_equal(pthread_create(&t[k], &attr, work_oom, &o[k]), 0);
		while (atomic_load(&o[k].reported) == 0)
			usleep(1000);
		shared += o[k].shared;
	}
	if (shared < 2) {
		go_set(1);
		for (int i = 0; i < k; i++)
			pthread_join(t[i], NULL);
		dg_node_stop(n);
		fail_msg("%d of %d threads lost their block's allocation", shared, k);
	}
	/* and two with blocks of their own, at the same time */
	struct worker plain[2] = { { c, 100, M, true, NULL }, { c, 101, M, true, NULL } };
	pthread_t pt[2];
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&pt[i], NULL, work, &plain[i]), 0);
	go_set(1);
	for (int i = 0; i < k; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < 2; i++)
		pthread_join(pt[i], NULL);
	pthread_attr_destroy(&attr);
	assert_int_equal(atomic_load(&wrong), 0);
	assert_int_equal(atomic_load(&short_counted), 0);
	for (int i = 0; i < k + 2; i++) {
		uint64_t m = (uint64_t)(i < k ? o[i].w.m : M);
		w.gets += m;
		w.hits += (m + 1) / 2;
		w.misses += m / 2;
		w.puts += i < k ? m - 1 : m; /* (an oom worker's first op is a get alone) */
	}
	expect_want(c, &w);
	/* the shared block took at least the two threads' hits */
	assert_true(atomic_load(&c->ctr_shared.hits) - shared0 >= 2 * (uint64_t)((M + 1) / 2));
	free(o);
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

/* The fast path's sampling, step by step, on this thread's block, for a
 * key of each path (read.c: under 8 bytes get_fast inside the timed
 * operation; 8..127 get_short, which samples and counts by itself).
 * *gets counts the gets made. */
static void sampled_one_in_n(dg_cache *c, dgi_ctrs *b, const char *key, uint64_t *gets)
{
	dg_buf v;
	dg_buf_init(&v);
	while (b->skip[DG_OP_GET] != 0) { /* (to the next sample) */
		OK(dg_cache_get(c, key, strlen(key), &v));
		++*gets;
	}
	uint64_t sum0 = atomic_load(&b->lat[DG_OP_GET].sum_ns);
	uint64_t n0[DG_LAT_BUCKETS];
	for (unsigned i = 0; i < DG_LAT_BUCKETS; i++)
		n0[i] = atomic_load(&b->lat[DG_OP_GET].buckets[i]);
	v.len = 0;
	OK(dg_cache_get(c, key, strlen(key), &v)); /* timed */
	assert_int_equal(b->skip[DG_OP_GET], DGI_LAT_SAMPLE - 1);
	uint64_t last = b->last_ns[DG_OP_GET];
	unsigned bucket = b->last_bucket[DG_OP_GET];
	assert_int_equal(atomic_load(&b->lat[DG_OP_GET].sum_ns) - sum0, last);
	for (int i = 1; i < DGI_LAT_SAMPLE; i++) {
		v.len = 0;
		OK(dg_cache_get(c, key, strlen(key), &v));
		/* not timed: counted as the sampled one */
		assert_int_equal(b->skip[DG_OP_GET], DGI_LAT_SAMPLE - 1 - i);
		assert_int_equal(b->last_ns[DG_OP_GET], last);
	}
	for (unsigned i = 0; i < DG_LAT_BUCKETS; i++)
		assert_int_equal(atomic_load(&b->lat[DG_OP_GET].buckets[i]) - n0[i],
		    i == bucket ? DGI_LAT_SAMPLE : 0);
	assert_int_equal(atomic_load(&b->lat[DG_OP_GET].sum_ns) - sum0, DGI_LAT_SAMPLE * last);
	v.len = 0;
	OK(dg_cache_get(c, key, strlen(key), &v)); /* the next sample */
	assert_int_equal(b->skip[DG_OP_GET], DGI_LAT_SAMPLE - 1);
	*gets += DGI_LAT_SAMPLE + 1;
	dg_buf_free(&v);
}

static void test_lat_sampled_one_in_n(void **state)
{
	(void)state;
	dg_node *n = start_node(NULL, 0, false, NULL);
	struct want w;
	dg_cache *c = counters_cache(n, &w);
	uint32_t ix = dgi_thread_index();
	assert_true(ix < DGI_CTR_BLOCKS);
	dgi_ctrs *b = atomic_load(&c->ctrs[ix]); /* (made by the puts) */
	assert_non_null(b);
	assert_int_equal(b->skip[DG_OP_GET], 0); /* no get yet: the first is timed */
	static const char longer[] = "a-key-of-the-short-get";
	OK(dg_cache_put(c, longer, strlen(longer), "v", 1));
	w.puts++;
	uint64_t gets = 0;
	sampled_one_in_n(c, b, "k1", &gets);
	sampled_one_in_n(c, b, longer, &gets);
	sampled_one_in_n(c, b, "k1", &gets);
	w.gets = w.hits = gets;
	expect_want(c, &w);
	/* puts of it: the short put (primary.c) samples its kind the same way */
	uint8_t skip = b->skip[DG_OP_PUT];
	for (int i = 0; i < 2 * DGI_LAT_SAMPLE + 3; i++) {
		OK(dg_cache_put(c, longer, strlen(longer), "w", 1));
		skip = skip == 0 ? DGI_LAT_SAMPLE - 1 : skip - 1;
		assert_int_equal(b->skip[DG_OP_PUT], skip);
	}
	w.puts += 2 * DGI_LAT_SAMPLE + 3;
	expect_want(c, &w);
	/* a sampled get the short path cannot finish (no room in the buffer:
	 * the general path's copy) is sampled once, by the general path */
	dg_buf v;
	dg_buf_init(&v);
	while (b->skip[DG_OP_GET] != 0) {
		v.len = 0;
		OK(dg_cache_get(c, longer, strlen(longer), &v));
		w.gets++;
	}
	dg_buf_free(&v);
	dg_buf_init(&v); /* (no room) */
	uint64_t sum0 = atomic_load(&b->lat[DG_OP_GET].sum_ns);
	OK(dg_cache_get(c, longer, strlen(longer), &v));
	assert_int_equal(v.len, 1);
	assert_int_equal(b->skip[DG_OP_GET], DGI_LAT_SAMPLE - 1);
	assert_int_equal(atomic_load(&b->lat[DG_OP_GET].sum_ns) - sum0, b->last_ns[DG_OP_GET]);
	w.gets++;
	w.hits = w.gets;
	expect_want(c, &w); /* (counted once) */
	dg_buf_free(&v);
	dg_node_stop(n);
}

/* The count of the buckets whose upper bound is above ns. */
static uint64_t above(const dg_latency *l, uint64_t ns)
{
	uint64_t n = 0;
	for (unsigned i = 0; i < DG_LAT_BUCKETS; i++)
		if (dg_latency_bound_us(i) == UINT64_MAX || dg_latency_bound_us(i) * 1000 > ns)
			n += l->buckets[i];
	return n;
}

/* A slow kind interleaved with a fast one on one thread: a put of 1 MB
 * (two copies of it) every DGI_LAT_SAMPLE - 1 gets of a small value, so a
 * single countdown for both kinds would sample the puts only and count
 * every get as a put. */
static void test_lat_sampled_slow_kind(void **state)
{
	(void)state;
	dg_node *n = start_node(NULL, 0, false, NULL);
	struct want w;
	dg_cache *c = counters_cache(n, &w);
	enum { BIG = 1 << 20, ROUNDS = 40 };
	char *big = calloc(1, BIG);
	assert_non_null(big);
	dg_buf v;
	dg_buf_init(&v);
	uint64_t put_min = UINT64_MAX;
	for (int r = 0; r < ROUNDS; r++) {
		big[r] = 1;
		uint64_t t0 = dgi_now_ns();
		OK(dg_cache_put(c, "big", 3, big, BIG));
		uint64_t t = dgi_now_ns() - t0;
		put_min = t < put_min ? t : put_min;
		for (int i = 0; i < DGI_LAT_SAMPLE - 1; i++) {
			v.len = 0;
			OK(dg_cache_get(c, "k1", 2, &v));
		}
	}
	dg_latency lp, lg;
	OK(dg_cache_get_latency(c, DG_OP_PUT, &lp));
	OK(dg_cache_get_latency(c, DG_OP_GET, &lg));
	assert_int_equal(lp.count, KEYS + ROUNDS);
	assert_int_equal(lg.count, ROUNDS * (DGI_LAT_SAMPLE - 1));
	print_message("1 MB put: %llu ns at least; put p50 %llu us, get p50 %llu us\n",
	    (unsigned long long)put_min, (unsigned long long)dg_latency_quantile_us(&lp, 0.5),
	    (unsigned long long)dg_latency_quantile_us(&lg, 0.5));
	/* every big put in the buckets of its time, however they were sampled */
	assert_true(above(&lp, put_min / 4) >= ROUNDS);
	/* and the gets in theirs: most of them below the big puts' time */
	assert_true(above(&lg, put_min / 4) < (uint64_t)lg.count / 4);
	free(big);
	dg_buf_free(&v);
	dg_node_stop(n);
}

/* Is key's primary node n's own? */
static bool key_local(dg_cache *c, const char *key)
{
	uint8_t enc[64];
	size_t kl = strlen(key);
	enc[0] = 0x0A; /* (a BYTES value, as dg_cache_get encodes it) */
	enc[1] = (uint8_t)kl;
	memcpy(enc + 2, key, kl);
	uint64_t h;
	uint32_t part = dgi_cache_key_part(c, enc, kl + 2, &h);
	dgi_epoch_enter();
	dgi_aff *aff = atomic_load(&c->aff);
	bool local = aff != NULL && dgi_aff_owner(aff, part, 0) == c->g->self;
	dgi_epoch_leave();
	return local;
}

/* Remote gets interleaved with local ones on one thread, a remote one in
 * each DGI_LAT_SAMPLE, placed where the samples never fall: each is timed
 * all the same (they leave the fast path), and the histogram shows them. */
static void test_lat_sampled_remote_always_timed(void **state)
{
	(void)state;
	struct cluster cl;
	cluster_start(&cl, 2, 0);
	dg_cache_config cc;
	dg_cache_config_init(&cc, "remote");
	dg_cache *c0, *c1;
	OK(dg_cache_create(cl.n[0], &cc, &c0));
	c1 = cache_on(cl.n[1], "remote");
	OK(dg_cache_wait_rebalanced(c0, 10000));
	OK(dg_cache_wait_rebalanced(c1, 10000));
	char local[16] = "", remote[16] = "";
	for (int i = 0; i < 1000 && (local[0] == 0 || remote[0] == 0); i++) {
		char k[16];
		snprintf(k, sizeof(k), "r%d", i);
		snprintf(key_local(c0, k) ? local : remote, sizeof(local), "%s", k);
	}
	assert_true(local[0] != 0 && remote[0] != 0);
	OK(dg_cache_put(c0, local, strlen(local), "v", 1));
	OK(dg_cache_put(c0, remote, strlen(remote), "v", 1));
	enum { ROUNDS = 50 };
	dg_buf v;
	dg_buf_init(&v);
	uint64_t remote_min = UINT64_MAX;
	for (int r = 0; r < ROUNDS; r++) {
		for (int i = 0; i < DGI_LAT_SAMPLE - 1; i++) {
			v.len = 0;
			OK(dg_cache_get(c0, local, strlen(local), &v));
		}
		v.len = 0;
		uint64_t t0 = dgi_now_ns();
		OK(dg_cache_get(c0, remote, strlen(remote), &v));
		uint64_t t = dgi_now_ns() - t0;
		remote_min = t < remote_min ? t : remote_min;
	}
	dg_latency l;
	OK(dg_cache_get_latency(c0, DG_OP_GET, &l));
	assert_int_equal(l.count, ROUNDS * DGI_LAT_SAMPLE);
	print_message("remote get: %llu ns at least; %llu of %llu gets above half of it\n",
	    (unsigned long long)remote_min, (unsigned long long)above(&l, remote_min / 2),
	    (unsigned long long)l.count);
	assert_true(above(&l, remote_min / 2) >= ROUNDS);
	dg_cache_metrics m;
	OK(dg_cache_get_metrics(c0, &m));
	assert_int_equal(m.hits, ROUNDS * DGI_LAT_SAMPLE);
	dg_buf_free(&v);
	cluster_stop(&cl);
}

/* The primary's one lease check per update (primary.c): without a lease
 * the update is refused, not applied, the partition unlocked; a local
 * read is refused too.  The membership thread is paused meanwhile so it
 * does not renew the lease. */
static void test_primary_without_lease_refuses(void **state)
{
	(void)state;
	dg_node *n = start_node(NULL, 0, false, NULL);
	dgi_grid *g = dgi_node_grid(n);
	struct want w;
	dg_cache *c = counters_cache(n, &w);
	dgi_member_test_stall(g->m, 400);
	usleep(50 * 1000); /* (in its pause) */
	uint64_t until = atomic_load(&g->m->lease_until);
	atomic_store(&g->m->lease_until, 1); /* lapsed */
	const uint8_t key[] = { 0x0A, 2, 'k', '1' }, val[] = { 0x0A, 1, 'x' };
	struct upd u;
	dgi_epoch_enter();
	dgi_upd_init(c, &u, OP_PUT, key, sizeof(key), NULL, 0, val, sizeof(val));
	u.topver = atomic_load(&c->aff)->topver;
	EXPECT(dgi_primary_apply(g, c, &u), DG_ERR_NOT_READY);
	assert_false(u.applied);
	assert_null(u.pw);
	assert_true(dgi_part_lock_free(&c->parts[u.part])); /* unlocked */
	assert_int_equal(atomic_load(&c->parts[u.part].seq) % 2, 0); /* (through dgi_part_unlock) */
	uint64_t dl = 0;
	EXPECT(dgi_local_get(c, u.part, u.hash, key, sizeof(key), NULL, false, &dl),
	    DG_ERR_NOT_READY);
	atomic_store(&g->m->lease_until, until);
	/* with it back, the same update applies */
	OK(dgi_primary_apply(g, c, &u));
	assert_null(u.pw);
	dgi_epoch_leave();
	dg_buf v;
	dg_buf_init(&v);
	OK(dg_cache_get(c, "k1", 2, &v));
	assert_int_equal(v.len, 1);
	assert_memory_equal(v.data, "x", 1);
	/* the short paths (a raw key of 8..127 bytes, outside any section)
	 * refuse too: the general path decides */
	static const char k16[] = "a-16-byte-key-01";
	OK(dg_cache_put(c, k16, 16, "x", 1));
	dgi_member_test_stall(g->m, 400);
	usleep(50 * 1000);
	until = atomic_load(&g->m->lease_until);
	atomic_store(&g->m->lease_until, 1);
	v.len = 0;
	EXPECT(dgi_put_short(c, (const uint8_t *)k16, 16, (const uint8_t *)"y", 1), DG_ERR__COUNT);
	EXPECT(dgi_get_short(c, (const uint8_t *)k16, 16, &v), DG_ERR__COUNT);
	assert_int_equal(v.len, 0);
	atomic_store(&g->m->lease_until, until);
#ifndef DGI_READ_LOCKED_ONLY
	OK(dgi_get_short(c, (const uint8_t *)k16, 16, &v));
	assert_int_equal(v.len, 1);
	v.len = 0;
#endif
	OK(dg_cache_get(c, k16, 16, &v));
	assert_int_equal(v.len, 1);
	assert_memory_equal(v.data, "x", 1); /* (the refused put wrote nothing) */
	OK(dgi_put_short(c, (const uint8_t *)k16, 16, (const uint8_t *)"y", 1));
	dg_buf_free(&v);
	dg_node_stop(n);
}

/* A first offer of an update skips the update-id lookups (its id is
 * new: primary.c); the offer ends that, so the same update offered again
 * is recognised and answers what it answered the first time, not applied
 * a second time. */
static void test_fresh_update_recognised_when_offered_again(void **state)
{
	(void)state;
	dg_node *n = start_node(NULL, 0, false, NULL);
	dgi_grid *g = dgi_node_grid(n);
	struct want w;
	dg_cache *c = counters_cache(n, &w);
	const uint8_t key[] = { 0x0A, 3, 'n', 'e', 'w' }, val[] = { 0x0A, 1, 'y' };
	struct upd u;
	dgi_epoch_enter();
	dgi_upd_init(c, &u, OP_PUT_IF_ABSENT, key, sizeof(key), NULL, 0, val, sizeof(val));
	assert_true(u.fresh);
	u.topver = atomic_load(&c->aff)->topver;
	OK(dgi_primary_apply(g, c, &u));
	assert_null(u.pw);
	assert_int_equal(u.flag, 1); /* absent: written */
	dgi_part *pt = &c->parts[u.part];
	dgi_part_lock(pt);
	dgi_entry *e = dgi_part_find(pt, u.hash, key, sizeof(key));
	assert_non_null(e);
	dgi_pver v1 = dgi_entry_ver(e);
	dgi_part_unlock(pt);
	u.flag = 0;
	OK(dgi_primary_apply(g, c, &u)); /* the same update again: a retry */
	assert_int_equal(u.flag, 1);     /* its first answer, not "present" */
	dgi_part_lock(pt);
	e = dgi_part_find(pt, u.hash, key, sizeof(key));
	dgi_pver v2 = dgi_entry_ver(e);
	dgi_part_unlock(pt);
	assert_int_equal(dgi_pver_cmp(&v1, &v2), 0); /* not written again */
	dgi_epoch_leave();
	dg_node_stop(n);
}

int dgt_counters_tests(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_counters_exact_across_threads),
		cmocka_unit_test(test_counters_more_threads_than_blocks),
		cmocka_unit_test(test_counters_block_out_of_memory),
		cmocka_unit_test(test_counters_kept_after_destroy),
		cmocka_unit_test(test_primary_without_lease_refuses),
		cmocka_unit_test(test_fresh_update_recognised_when_offered_again),
		cmocka_unit_test(test_lat_sampled_one_in_n),
		cmocka_unit_test(test_lat_sampled_slow_kind),
		cmocka_unit_test(test_lat_sampled_remote_always_timed),
	};
	return cmocka_run_group_tests_name("cache_counters", tests, NULL, NULL);
}
