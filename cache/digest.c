/*
 * digest.c — a digest of one partition's copy on this node, for dgctl
 * idle-verify: owners whose copies agree report the same entries and
 * digest.  The digest is a sum of per-entry hashes, so the order entries
 * sit in the table (which differs between nodes: insertion order, growth,
 * deletions) does not matter.
 */
#include "cache_int.h"
#include "marshal/mix.h"

#include <assert.h>
#include <string.h>

/* cache.h documents the state values as the store's own */
static_assert((int)DGI_PART_NONE == (int)P_NONE && (int)DGI_PART_OWNING == (int)P_OWNING &&
    (int)DGI_PART_MOVING == (int)P_MOVING && (int)DGI_PART_LOST == (int)P_LOST,
    "dgi_part_digest.state values are enum part_state");

/* Key and value hashed from their bytes (not the slot's stored hash: a
 * copy whose key bytes went bad must differ), then the version. */
static uint64_t entry_digest(const dgi_entry *e)
{
	uint64_t h = dgi_key_hash(dgi_entry_key(e), dgi_entry_klen(e));
	h = dgi_mix64(h ^ dgi_key_hash(dgi_entry_val(e), e->vlen));
	h = dgi_mix64(h ^ (uint64_t)dgi_entry_topver(e));
	h = dgi_mix64(h ^ e->counter);
	return dgi_mix64(h ^ e->order);
}

struct digest_ctx {
	dgi_part_digest *out;
	int64_t wall;
};

static void digest_one(void *ctx, const dgi_entry *e)
{
	struct digest_ctx *d = ctx;
	if ((e->flags & DGI_ENTRY_TOMB) || (dgi_entry_expire(e) != 0 && dgi_entry_expire(e) <= d->wall))
		return; /* removed or expired: what a get would not return */
	d->out->entries++;
	d->out->digest += entry_digest(e);
	d->out->bytes += (uint64_t)dgi_entry_klen(e) + e->vlen;
}

dg_err dgi_cache_part_digest(dg_cache *c, uint32_t part, dgi_part_digest *out)
{
	if (c == NULL || out == NULL || part >= c->cfg.partitions)
		return DG_ERR_INVAL;
	memset(out, 0, sizeof(*out));
	dgi_epoch_enter(); /* the partitions and affinity stay while it reads */
	if (atomic_load(&c->dead)) {
		dgi_epoch_leave();
		return DG_ERR_CLOSED;
	}
	dgi_aff *aff = atomic_load_explicit(&c->aff, memory_order_acquire);
	int pos = aff != NULL ? dgi_aff_role(aff, part, c->g->self) : -1;
	out->role = pos < 0 ? 0 : pos == 0 ? 1 : 2;
	struct digest_ctx d = { out, dgi_wall_ms() };
	dgi_part *pt = &c->parts[part];
	dgi_part_lock(pt);
	out->state = atomic_load_explicit(&pt->state, memory_order_relaxed);
	dgi_part_each(pt, digest_one, &d);
	dgi_part_unlock(pt);
	dgi_epoch_leave();
	return DG_OK;
}

dg_err dgi_cache_part_map(dg_cache *c, uint8_t *out, uint32_t n, uint32_t *count)
{
	if (c == NULL || (out == NULL && n > 0) || count == NULL)
		return DG_ERR_INVAL;
	dgi_epoch_enter(); /* the partitions and affinity stay while it reads */
	if (atomic_load(&c->dead)) {
		dgi_epoch_leave();
		return DG_ERR_CLOSED;
	}
	dgi_aff *aff = atomic_load_explicit(&c->aff, memory_order_acquire);
	*count = c->cfg.partitions;
	for (uint32_t p = 0; p < c->cfg.partitions && p < n; p++) {
		int pos = aff != NULL ? dgi_aff_role(aff, p, c->g->self) : -1;
		int role = pos < 0 ? 0 : pos == 0 ? 1 : 2;
		int state = atomic_load_explicit(&c->parts[p].state, memory_order_relaxed);
		out[p] = (uint8_t)(role << 4 | (state & 0xf));
	}
	dgi_epoch_leave();
	return DG_OK;
}

const char *dgi_part_state_name(int state)
{
	switch (state) {
	case P_NONE:
		return "NONE";
	case P_OWNING:
		return "OWNING";
	case P_MOVING:
		return "MOVING";
	case P_LOST:
		return "LOST";
	default:
		return "UNKNOWN";
	}
}
