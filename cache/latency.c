/*
 * latency.c — operation latency histograms (cache.h, "operation latency"):
 * the bucket bounds, reading a cache's counters, quantiles.  Recording is
 * dgi_lat_add (cache_int.h), inlined into the operations (update.c, read.c, api.c).
 */
#include "cache_int.h"

#include <string.h>

/* 1-2-5 per decade from 1 µs: a decade in three steps is fine enough for
 * p50/p99 and keeps the loop in dgi_lat_add short for fast operations. */
const uint64_t dgi_lat_bounds_ns[DG_LAT_BUCKETS - 1] = {
	1000ull, 2000ull, 5000ull,                                    /* 1 µs */
	10000ull, 20000ull, 50000ull,
	100000ull, 200000ull, 500000ull,
	1000000ull, 2000000ull, 5000000ull,                           /* 1 ms */
	10000000ull, 20000000ull, 50000000ull,
	100000000ull, 200000000ull, 500000000ull,
	1000000000ull, 2000000000ull, 5000000000ull,                  /* 1 s */
	10000000000ull, 20000000000ull, 50000000000ull,
	100000000000ull, 200000000000ull, 500000000000ull,
};

uint64_t dg_latency_bound_us(unsigned i)
{
	return i < DG_LAT_BUCKETS - 1 ? dgi_lat_bounds_ns[i] / 1000 : UINT64_MAX;
}

dg_err dg_cache_get_latency(dg_cache *c, dg_cache_op_kind op, dg_latency *out)
{
	if (c == NULL || out == NULL || (unsigned)op >= DG_OP__COUNT)
		return DG_ERR_INVAL;
	dgi_lat *l = &c->lat[op];
	memset(out, 0, sizeof(*out));
	out->sum_us = atomic_load_explicit(&l->sum_ns, memory_order_relaxed) / 1000;
	for (unsigned i = 0; i < DG_LAT_BUCKETS; i++) {
		out->buckets[i] = atomic_load_explicit(&l->buckets[i], memory_order_relaxed);
		out->count += out->buckets[i];
	}
	return DG_OK;
}

uint64_t dg_latency_quantile_us(const dg_latency *l, double q)
{
	if (l == NULL)
		return 0;
	uint64_t total = 0;
	for (unsigned i = 0; i < DG_LAT_BUCKETS; i++)
		total += l->buckets[i];
	if (total == 0)
		return 0;
	if (!(q > 0)) /* NaN too */
		q = 0;
	if (q > 1)
		q = 1;
	double r = q * (double)total;
	uint64_t rank = (uint64_t)r;
	if ((double)rank < r)
		rank++; /* ceil without libm */
	if (rank == 0)
		rank = 1;
	if (rank > total)
		rank = total;
	uint64_t seen = 0;
	for (unsigned i = 0; i < DG_LAT_BUCKETS; i++) {
		seen += l->buckets[i];
		if (seen >= rank)
			return dg_latency_bound_us(i);
	}
	return UINT64_MAX; /* not reached: seen ends at total */
}
