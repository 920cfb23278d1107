/* hist.c — percentiles of the latency histogram (hist.h). */
#include "hist.h"

void dgb_hist_merge(dgb_hist *sum, const dgb_hist *h)
{
	for (unsigned i = 0; i < DGB_H_NB; i++)
		sum->b[i] += h->b[i];
}

/* Midpoint of a bucket, ns. */
static double mid(unsigned idx)
{
	if (idx < 2 * DGB_H_SUB)
		return idx;
	unsigned e = (idx - 2 * DGB_H_SUB) / DGB_H_SUB + 8;
	uint64_t m = (idx - 2 * DGB_H_SUB) % DGB_H_SUB + DGB_H_SUB;
	unsigned shift = e - 7;
	return (double)(m << shift) + (double)((UINT64_C(1) << shift) - 1) / 2;
}

double dgb_hist_pct_us(const dgb_hist *h, double q)
{
	uint64_t n = 0;
	for (unsigned i = 0; i < DGB_H_NB; i++)
		n += h->b[i];
	if (n == 0)
		return 0;
	uint64_t rank = (uint64_t)((double)n * q + 0.999999);
	if (rank < 1)
		rank = 1;
	uint64_t c = 0;
	for (unsigned i = 0; i < DGB_H_NB; i++) {
		c += h->b[i];
		if (c >= rank)
			return mid(i) / 1000.0;
	}
	return mid(DGB_H_NB - 1) / 1000.0;
}
