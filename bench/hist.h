/*
 * hist.h — latency histogram of dgbench's multi-threaded cases: log-linear,
 * 128 sub-buckets per power of two (< 0.8% bucket error), in ns, fixed size
 * so that recording allocates nothing.  One per thread; sum them to report.
 */
#ifndef DGB_HIST_H
#define DGB_HIST_H

#include <stdint.h>

#define DGB_H_SUB 128
#define DGB_H_NB (2 * DGB_H_SUB + 40 * DGB_H_SUB)

typedef struct dgb_hist {
	uint64_t b[DGB_H_NB];
} dgb_hist;

/* The bucket of v ns: exact below 256, then 128 per power of two. */
static inline unsigned dgb_hist_idx(uint64_t v)
{
	if (v < 2 * DGB_H_SUB)
		return (unsigned)v;
	unsigned e = 63u - (unsigned)__builtin_clzll(v); /* >= 8 */
	unsigned shift = e - 7;
	unsigned idx = 2 * DGB_H_SUB + (e - 8) * DGB_H_SUB +
	    (unsigned)((v >> shift) - DGB_H_SUB);
	return idx < DGB_H_NB ? idx : DGB_H_NB - 1;
}

static inline void dgb_hist_add(dgb_hist *h, uint64_t ns)
{
	h->b[dgb_hist_idx(ns)]++;
}

/* sum += h */
void dgb_hist_merge(dgb_hist *sum, const dgb_hist *h);
/* Nearest-rank percentile q (0.5, 0.99) in us: the bucket's midpoint;
 * 0 for an empty histogram. */
double dgb_hist_pct_us(const dgb_hist *h, double q);

#endif /* DGB_HIST_H */
