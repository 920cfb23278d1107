/*
 * dedup.c — per partition, the last update each originating thread had
 * applied here, so a retried update is recognised even after other
 * updates changed its key.
 *
 * An update id is (originator node, sequence), the sequence a thread's
 * slot in its top 24 bits and the thread's counter below (update.c).  A
 * thread runs one update at a time, so a retry is always its thread's
 * latest update: one record per (node, thread slot) is enough, and the
 * table's size is the number of threads that wrote to the partition, not
 * the number of writes.  The primary records every update it evaluates
 * (with its flag), a backup every copy it is sent (BACKUP carries the
 * flag), so the next primary knows them too.  Records older than
 * DGI_DEDUP_KEEP_MS are dropped when the table grows: no retry comes that
 * late (an originator gives up after its request timeout).
 *
 * Open addressing on the (node, slot) pair, linear probing, no deletion
 * but by rebuilding; the partition's lock guards it.  Allocates only to
 * grow.
 */
#include "cache_int.h"

#include <string.h>

static inline uint64_t dd_thread(uint64_t seq)
{
	return seq >> 40;
}

static inline uint32_t dd_index(uint64_t node, uint64_t seq, uint32_t mask)
{
	uint64_t h = (node ^ (dd_thread(seq) * 0x9E3779B97F4A7C15ull)) * 0xBF58476D1CE4E5B9ull;
	return (uint32_t)(h >> 32) & mask;
}

static struct dgi_dd *dd_slot(struct dgi_dd *t, uint32_t cap, uint64_t node, uint64_t seq)
{
	uint32_t mask = cap - 1;
	for (uint32_t i = dd_index(node, seq, mask);; i = (i + 1) & mask) {
		struct dgi_dd *d = &t[i];
		if (d->node == 0 || (d->node == node && dd_thread(d->seq) == dd_thread(seq)))
			return d;
	}
}

bool dgi_dedup_find(const dgi_part *p, uint64_t node, uint64_t seq, int64_t *flag)
{
	if (p->dd_cap == 0 || node == 0 || seq == 0)
		return false;
	struct dgi_dd *d = dd_slot(p->dd, p->dd_cap, node, seq);
	if (d->node == 0 || d->seq != seq)
		return false;
	*flag = d->flag;
	return true;
}

/* Rebuilds the table with cap slots, keeping records newer than keep_from. */
static dg_err dd_rebuild(dgi_part *p, uint32_t cap, uint64_t keep_from)
{
	struct dgi_dd *t = dgi_calloc(cap, sizeof(*t));
	if (t == NULL)
		return DG_ERR_NOMEM;
	uint32_t n = 0;
	for (uint32_t i = 0; i < p->dd_cap; i++) {
		struct dgi_dd *d = &p->dd[i];
		if (d->node == 0 || d->t_ms < keep_from)
			continue;
		*dd_slot(t, cap, d->node, d->seq) = *d;
		n++;
	}
	dgi_free(p->dd);
	p->dd = t;
	p->dd_cap = cap;
	p->dd_count = n;
	return DG_OK;
}

void dgi_dedup_put(dgi_part *p, uint64_t node, uint64_t seq, int64_t flag, uint64_t now_ms)
{
	if (node == 0 || seq == 0)
		return;
	if ((p->dd_count + 1) * 2 > p->dd_cap) {
		uint64_t keep = now_ms > DGI_DEDUP_KEEP_MS ? now_ms - DGI_DEDUP_KEEP_MS : 0;
		uint32_t live = 0;
		for (uint32_t i = 0; i < p->dd_cap; i++)
			live += p->dd[i].node != 0 && p->dd[i].t_ms >= keep;
		uint32_t cap = p->dd_cap ? p->dd_cap : 8;
		while ((live + 1) * 2 > cap)
			cap *= 2;
		if (dd_rebuild(p, cap, keep) != DG_OK)
			return; /* not remembered: a retry may apply again (no worse than before) */
	}
	struct dgi_dd *d = dd_slot(p->dd, p->dd_cap, node, seq);
	if (d->node == 0)
		p->dd_count++;
	else if (d->seq > seq && d->t_ms + DGI_DEDUP_KEEP_MS > now_ms)
		return; /* the thread's later update is known already (a late copy) */
	*d = (struct dgi_dd){ node, seq, flag, now_ms };
}

void dgi_dedup_free(dgi_part *p)
{
	dgi_free(p->dd);
	p->dd = NULL;
	p->dd_cap = p->dd_count = 0;
}
