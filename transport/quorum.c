/* quorum.c — the voting set of a topology and the arithmetic of majorities
 * and leases (PROTOCOL.md, "Majority").  Pure functions: no lock, no I/O,
 * no clock; the membership files apply them under its lock.
 */
#include "transport_int.h"

#include <stdlib.h>
#include <string.h>

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

uint32_t dgi_quorum_voters(const dg_topology *t, const char **out, uint32_t cap)
{
	uint32_t n = 0;
	if (t == NULL)
		return 0;
	if (t->baseline_set) {
		/* the baseline's addresses, online or not: sorted and distinct
		 * already (a TOPOLOGY's baseline is normalized on decode) */
		for (uint32_t i = 0; i < t->nbaseline && n < cap; i++)
			out[n++] = t->baseline[i];
	} else {
		for (uint32_t i = 0; i < t->count && n < cap; i++)
			if (!(t->nodes[i].attrs & DG_NODE_CLIENT))
				out[n++] = t->nodes[i].url;
	}
	qsort(out, n, sizeof(*out), cmp_str);
	uint32_t k = 0;
	for (uint32_t i = 0; i < n; i++)
		if (k == 0 || strcmp(out[k - 1], out[i]) != 0)
			out[k++] = out[i];
	return k;
}

int32_t dgi_quorum_index(const char *const *voters, uint32_t n, const char *url)
{
	const char *const *p = n > 0 && url != NULL ?
	    bsearch(&url, voters, n, sizeof(*voters), cmp_str) : NULL;
	return p != NULL ? (int32_t)(p - voters) : -1;
}

uint32_t dgi_quorum_need(uint32_t nvoters)
{
	return nvoters / 2 + 1;
}

static int cmp_desc(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x < y) - (x > y);
}

uint64_t dgi_quorum_kth(uint64_t *vals, uint32_t n)
{
	if (n == 0)
		return 0;
	qsort(vals, n, sizeof(*vals), cmp_desc);
	return vals[dgi_quorum_need(n) - 1];
}

uint64_t dgi_lease_until(uint64_t kth, uint32_t lease_ms)
{
	if (kth == 0)
		return 0;               /* no majority ever echoed: no lease */
	if (kth == UINT64_MAX || UINT64_MAX - kth <= lease_ms)
		return UINT64_MAX;      /* this node is a majority on its own */
	return kth + lease_ms;
}

uint32_t dgi_backoff_next(uint32_t cur)
{
	if (cur < DGI_BACKOFF_MIN_MS)
		return DGI_BACKOFF_MIN_MS;
	return cur >= DGI_BACKOFF_MAX_MS / 2 ? DGI_BACKOFF_MAX_MS : cur * 2;
}

uint32_t dgi_backoff_wait(uint32_t interval, uint64_t seed)
{
	uint32_t half = interval / 2;
	return half + (uint32_t)((seed * 2654435761u) % (uint64_t)(interval - half + 1));
}

int dgi_ballot_cmp(const struct dgi_ballot *a, const struct dgi_ballot *b)
{
	if (a->base != b->base)
		return a->base < b->base ? -1 : 1;
	if (a->round != b->round)
		return a->round < b->round ? -1 : 1;
	return (a->from > b->from) - (a->from < b->from);
}

const char *dgi_px_rule(const struct dgi_acceptor *v, const struct dgi_px_ask *a)
{
	if (!v->member && !v->joiner)
		return "not a member";
	if (a->b.base < v->installed)
		return "not newer than this voter's topology";
	if (dgi_ballot_cmp(&a->b, &v->promised) < 0)
		return "promised a newer ballot";
	if (!a->accept || a->adopted)
		return NULL; /* (a voter that accepts its own removal stops
		                counting itself toward its own lease) */
	if (!a->self_in && !v->joiner)
		return "it removes this voter";
	if (!a->from_in)
		return "the proposer is not in it";
	if (a->drops_heard)
		return "it removes a node heard from lately";
	return NULL;
}

bool dgi_quorum_won(uint32_t full, uint32_t amnesiac, uint32_t nvoters)
{
	if (nvoters == 0)
		return true;
	uint32_t n = full + (amnesiac > 0 && nvoters % 2 == 0 ? 1 : 0);
	return n >= dgi_quorum_need(nvoters);
}
