/*
 * latency.c — operation latency histograms (cache.h, "operation latency"):
 * the operation clock (its calibration), the bucket bounds, reading a
 * cache's counters, quantiles.  Recording is dgi_lat_add (cache_int.h)
 * into the thread's counter block (counters.c), inlined into the
 * operations (update.c, read.c, api.c).
 */
#include "cache_int.h"

#include <pthread.h>
#include <string.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

bool dgi_lat_tsc;
uint64_t dgi_lat_mult;
_Thread_local dgi_lat_cur dgi_lat_tl;

/* Is the time-stamp counter invariant (same rate in every P/C-state, and
 * so on every core)?  CPUID 0x80000007, EDX bit 8.  A hypervisor that
 * hides the bit gets CLOCK_MONOTONIC. */
static bool tsc_invariant(void)
{
#if defined(__x86_64__)
	unsigned a, b, c, d;
	if ((unsigned)__get_cpuid_max(0x80000000u, NULL) < 0x80000007u)
		return false;
	__cpuid(0x80000007u, a, b, c, d);
	(void)a; (void)b; (void)c;
	return (d >> 8) & 1;
#else
	return false;
#endif
}

/* ns per tick over 2 ms of CLOCK_MONOTONIC: an error of ~0.01%, against
 * histogram buckets a factor of 2-2.5 apart. */
static void lat_clock_calibrate(void)
{
#if defined(__x86_64__)
	if (!tsc_invariant())
		return;
	uint64_t n0 = dgi_now_ns(), t0 = __builtin_ia32_rdtsc(), n1, t1;
	do {
		n1 = dgi_now_ns();
		t1 = __builtin_ia32_rdtsc();
	} while (n1 - n0 < 2000000);
	if (t1 <= t0 || n1 - n0 >= ((uint64_t)1 << 31)) /* (descheduled for 2 s) */
		return;
	/* ns << 32 / ticks; 2 ms of ns fit in 32 bits, so no overflow */
	uint64_t m = ((n1 - n0) << 32) / (t1 - t0);
	/* 1 .. 100 GHz (dgi_lat_since needs a factor below 1), or it is not
	 * a clock to trust */
	if (m >= ((uint64_t)1 << 32) || m < ((uint64_t)1 << 32) / 100)
		return;
	dgi_lat_mult = m;
	dgi_lat_tsc = true;
#endif
}

void dgi_lat_clock_init(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, lat_clock_calibrate);
}

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
	dgi_ctrs_latency(c, op, out); /* every thread's histogram, summed */
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
