/* alloc.c — the allocator wrapper every module allocates through, and the
 * growable dg_buf.  Counters are relaxed atomics (allocation is never on a
 * per-operation path, so they cost nothing measurable); the failure hook lets
 * tests fail the N-th allocation and check every error path cleans up. */
#include "marshal_int.h"

#include <stdlib.h>

static _Atomic uint64_t n_allocs, n_frees, n_bytes, n_failed;
static _Atomic uint64_t fail_countdown; /* 0: off; 1: next call fails */

static bool inject_failure(void)
{
	uint64_t c = atomic_load_explicit(&fail_countdown, memory_order_relaxed);
	while (c != 0) {
		if (atomic_compare_exchange_weak_explicit(&fail_countdown, &c,
		        c - 1, memory_order_relaxed, memory_order_relaxed))
			return c == 1;
	}
	return false;
}

static void *account(void *p, size_t n)
{
	if (p == NULL) {
		atomic_fetch_add_explicit(&n_failed, 1, memory_order_relaxed);
		return NULL;
	}
	atomic_fetch_add_explicit(&n_allocs, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&n_bytes, n, memory_order_relaxed);
	return p;
}

void *dgi_alloc(size_t n)
{
	if (inject_failure())
		return account(NULL, n);
	return account(malloc(n ? n : 1), n);
}

void *dgi_calloc(size_t count, size_t n)
{
	if (inject_failure())
		return account(NULL, n);
	return account(calloc(count ? count : 1, n ? n : 1), count * n);
}

void *dgi_realloc(void *p, size_t n)
{
	if (inject_failure())
		return account(NULL, n);
	return account(realloc(p, n ? n : 1), n);
}

void dgi_free(void *p)
{
	if (p == NULL)
		return;
	atomic_fetch_add_explicit(&n_frees, 1, memory_order_relaxed);
	free(p);
}

void dgi_alloc_get_stats(dgi_alloc_stats *out)
{
	out->allocs = atomic_load_explicit(&n_allocs, memory_order_relaxed);
	out->frees = atomic_load_explicit(&n_frees, memory_order_relaxed);
	out->bytes = atomic_load_explicit(&n_bytes, memory_order_relaxed);
	out->failed = atomic_load_explicit(&n_failed, memory_order_relaxed);
}

void dgi_alloc_fail_nth(uint64_t n)
{
	atomic_store_explicit(&fail_countdown, n, memory_order_relaxed);
}

/* ---- dg_buf ---- */
#define BUF_FIXED 1u

void dg_buf_init(dg_buf *b)
{
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
	b->flags = 0;
}

void dg_buf_init_fixed(dg_buf *b, void *mem, size_t cap)
{
	b->data = (uint8_t *)mem;
	b->len = 0;
	b->cap = cap;
	b->flags = BUF_FIXED;
}

dg_err dg_buf_reserve(dg_buf *b, size_t extra)
{
	if (b->cap - b->len >= extra)
		return DG_OK;
	if (b->flags & BUF_FIXED)
		return DG_ERR_NOSPACE;
	if (extra > SIZE_MAX / 2 - b->len)
		return DG_ERR_NOMEM;
	size_t cap = b->cap ? b->cap : 64;
	while (cap - b->len < extra)
		cap *= 2;
	uint8_t *p = dgi_realloc(b->data, cap);
	if (p == NULL)
		return DG_ERR_NOMEM;
	b->data = p;
	b->cap = cap;
	return DG_OK;
}

void dg_buf_free(dg_buf *b)
{
	if (!(b->flags & BUF_FIXED))
		dgi_free(b->data);
	dg_buf_init(b);
}
