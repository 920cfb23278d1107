/*
 * counters.c — a cache's per-thread counter blocks (cache_int.h, "a
 * cache's operation counters, per thread"): making a thread's block,
 * summing them for the readers (dg_cache_get_metrics, dg_cache_get_latency),
 * folding them into the shared block once the cache is reclaimed.
 *
 * Readers and the fold take fold_mu (both rare; the operations never do):
 * a reader sums the blocks before a fold or the shared block after it,
 * never a block being freed, never a count twice.
 */
#include "cache_int.h"

#include <pthread.h>
#include <string.h>

#define LINE 64

static pthread_mutex_t fold_mu = PTHREAD_MUTEX_INITIALIZER;

/* Rare: a thread's first counted operation on c.  The block starts on a
 * cache line of its own and ends before the next one another block could
 * share, so two threads' counters never share a line.  Out of memory: the
 * shared block, for good (the slot holds it, so no operation tries again). */
__attribute__((noinline)) dgi_ctrs *dgi_ctrs_make(dg_cache *c, uint32_t ix)
{
	size_t size = (sizeof(dgi_ctrs) + LINE - 1) / LINE * LINE;
	void *mem = dgi_alloc(size + LINE);
	dgi_ctrs *b = &c->ctr_shared;
	if (mem != NULL) {
		b = (dgi_ctrs *)(((uintptr_t)mem + LINE - 1) & ~(uintptr_t)(LINE - 1));
		memset(b, 0, sizeof(*b));
		b->mem = mem;
	}
	/* (release: a reader that finds it sees it zeroed) */
	atomic_store_explicit(&c->ctrs[ix], b, memory_order_release);
	return b;
}

/* Calls fn on every block of c: the shared one, then each thread's. */
static void each_block(dg_cache *c, void (*fn)(void *ctx, dgi_ctrs *b), void *ctx)
{
	fn(ctx, &c->ctr_shared);
	for (uint32_t i = 0; i < DGI_CTR_BLOCKS; i++) {
		dgi_ctrs *b = atomic_load_explicit(&c->ctrs[i], memory_order_acquire);
		if (b != NULL && b != &c->ctr_shared)
			fn(ctx, b);
	}
}

static uint64_t ld(_Atomic uint64_t *x)
{
	return atomic_load_explicit(x, memory_order_relaxed);
}

static void add_totals(void *ctx, dgi_ctrs *b)
{
	dgi_ctr_totals *t = ctx;
	t->puts += ld(&b->puts);
	t->removes += ld(&b->removes);
	t->hits += ld(&b->hits);
	t->misses += ld(&b->misses);
}

void dgi_ctrs_total(dg_cache *c, dgi_ctr_totals *out)
{
	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&fold_mu);
	each_block(c, add_totals, out);
	pthread_mutex_unlock(&fold_mu);
}

struct lat_sum {
	dg_cache_op_kind k;
	uint64_t sum_ns;
	dg_latency *out;
};

static void add_latency(void *ctx, dgi_ctrs *b)
{
	struct lat_sum *s = ctx;
	dgi_lat *l = &b->lat[s->k];
	s->sum_ns += ld(&l->sum_ns);
	for (unsigned i = 0; i < DG_LAT_BUCKETS; i++) {
		uint64_t n = ld(&l->buckets[i]);
		s->out->buckets[i] += n;
		s->out->count += n;
	}
}

void dgi_ctrs_latency(dg_cache *c, dg_cache_op_kind k, dg_latency *out)
{
	struct lat_sum s = { k, 0, out };
	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&fold_mu);
	each_block(c, add_latency, &s);
	pthread_mutex_unlock(&fold_mu);
	out->sum_us = s.sum_ns / 1000;
}

static void fold_one(_Atomic uint64_t *into, _Atomic uint64_t *from)
{
	atomic_fetch_add_explicit(into, ld(from), memory_order_relaxed);
}

void dgi_ctrs_fold(dg_cache *c)
{
	dgi_ctrs *s = &c->ctr_shared;
	pthread_mutex_lock(&fold_mu);
	for (uint32_t i = 0; i < DGI_CTR_BLOCKS; i++) {
		dgi_ctrs *b = atomic_load_explicit(&c->ctrs[i], memory_order_acquire);
		atomic_store_explicit(&c->ctrs[i], NULL, memory_order_relaxed);
		if (b == NULL || b == s)
			continue;
		fold_one(&s->puts, &b->puts);
		fold_one(&s->removes, &b->removes);
		fold_one(&s->hits, &b->hits);
		fold_one(&s->misses, &b->misses);
		for (unsigned k = 0; k < DG_OP__COUNT; k++) {
			fold_one(&s->lat[k].sum_ns, &b->lat[k].sum_ns);
			for (unsigned j = 0; j < DG_LAT_BUCKETS; j++)
				fold_one(&s->lat[k].buckets[j], &b->lat[k].buckets[j]);
		}
		dgi_free(b->mem);
	}
	pthread_mutex_unlock(&fold_mu);
}
