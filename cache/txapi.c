/*
 * txapi.c — what transactions (txn/) use of the grid (cache.h, "what
 * transactions use"): keys' partitions and owners, reads, writes and
 * copies on a primary or backup under the partition lock.
 */
#include "cache_int.h"
#include "marshal/marshal_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void dgi_grid_set_tx_hook(dgi_grid *g, dgi_tx_op_fn fn, void *ctx)
{
	g->tx_hook_ctx = ctx;
	g->tx_hook = fn;
}

dg_cache *dgi_grid_cache_by_id(dgi_grid *g, uint32_t id)
{
	return dgi_grid_cache(g, id);
}

uint64_t dgi_grid_self(const dgi_grid *g)
{
	return g->self;
}

int64_t dgi_grid_topver(const dgi_grid *g)
{
	return atomic_load(&((dgi_grid *)g)->topver);
}

uint32_t dgi_grid_request_timeout(const dgi_grid *g)
{
	return g->cfg.request_timeout_ms;
}

uint32_t dgi_cache_id_of(const dg_cache *c)
{
	return c->id;
}

bool dgi_cache_part_lost(dg_cache *c, uint32_t part)
{
	return part < c->cfg.partitions &&
	    atomic_load_explicit(&c->lost[part], memory_order_relaxed) != 0;
}

bool dgi_cache_backup_full(dg_cache *c, uint32_t part, uint64_t bytes)
{
	/* (every entry of every TX_PREPARE asks: no section unless a backup
	 * is full) */
	if (__builtin_expect(atomic_load_explicit(&c->full_until_ms, memory_order_relaxed) == 0,
	    1) || part >= c->cfg.partitions || c->cfg.write_sync != DG_FULL_SYNC)
		return false;
	dgi_epoch_enter();
	dgi_aff *aff = atomic_load_explicit(&c->aff, memory_order_acquire);
	bool full = aff != NULL && aff->copies > 1 &&
	    dgi_backup_full(c, aff, part, bytes, dgi_coarse_ms());
	dgi_epoch_leave();
	return full;
}

uint32_t dgi_cache_key_part(const dg_cache *c, const uint8_t *key, size_t klen,
    uint64_t *hash)
{
	*hash = dgi_key_hash(key, klen);
	return dgi_part_of(*hash, c->cfg.partitions);
}

/* Each call below is a section of its own (cache_int.h, "Lifetime"): txn
 * keeps cache handles across calls, never the partitions or affinity. */

uint32_t dgi_cache_owners_hash(dg_cache *c, uint32_t part, uint64_t *out, uint32_t cap,
    int64_t *topver, uint64_t *ohash)
{
	dgi_epoch_enter();
	dgi_aff *aff = atomic_load(&c->dead) ? NULL :
	    atomic_load_explicit(&c->aff, memory_order_acquire);
	*topver = 0;
	if (ohash != NULL)
		*ohash = 0;
	uint32_t n = 0;
	if (aff != NULL && part < aff->parts) {
		*topver = aff->topver;
		if (ohash != NULL)
			*ohash = dgi_aff_owners_hash(aff, part);
		for (uint32_t i = 0; i < aff->copies; i++) {
			dg_node_id o = dgi_aff_owner(aff, part, i);
			if (o != 0 && n < cap)
				out[n] = o;
			n += o != 0;
		}
	}
	dgi_epoch_leave();
	return n;
}

uint32_t dgi_cache_owners(dg_cache *c, uint32_t part, uint64_t *out, uint32_t cap,
    int64_t *topver)
{
	return dgi_cache_owners_hash(c, part, out, cap, topver, NULL);
}

/* How tx_read treats an entry not yet on every backup (PENDING): read
 * it (the tx's own lock holder), refuse it (DG_ERR_NOT_READY), or park
 * the request on its write (park, below). */
enum { READ_ANY, READ_SETTLED, READ_PARK };
struct park {
	const dg_msg_in *req;
	dgi_tx_read_fn fn;
	void *ctx;
};

static dg_err tx_read(dg_cache *c, int64_t topver, uint32_t part, uint64_t hash,
    const uint8_t *key, uint32_t klen, dg_buf *val, bool *found, dgi_pver *ver, int how,
    const struct park *pk);

dg_err dgi_cache_tx_read(dg_cache *c, int64_t topver, uint32_t part, uint64_t hash,
    const uint8_t *key, uint32_t klen, dg_buf *val, bool *found, dgi_pver *ver)
{
	*found = false;
	*ver = (dgi_pver){ 0, 0, 0, 0 };
	dgi_epoch_enter();
	dg_err e = atomic_load(&c->dead) ? DG_ERR_CLOSED :
	    tx_read(c, topver, part, hash, key, klen, val, found, ver, READ_ANY, NULL);
	dgi_epoch_leave();
	return e;
}

dg_err dgi_cache_tx_read_settled(dg_cache *c, int64_t topver, uint32_t part, uint64_t hash,
    const uint8_t *key, uint32_t klen, dg_buf *val, bool *found, dgi_pver *ver)
{
	*found = false;
	*ver = (dgi_pver){ 0, 0, 0, 0 };
	dgi_epoch_enter();
	dg_err e = atomic_load(&c->dead) ? DG_ERR_CLOSED :
	    tx_read(c, topver, part, hash, key, klen, val, found, ver, READ_SETTLED, NULL);
	dgi_epoch_leave();
	return e;
}

dg_err dgi_cache_tx_read_parked(dg_cache *c, int64_t topver, uint32_t part, uint64_t hash,
    const uint8_t *key, uint32_t klen, dg_buf *val, bool *found, dgi_pver *ver,
    const dg_msg_in *req, dgi_tx_read_fn fn, void *ctx)
{
	*found = false;
	*ver = (dgi_pver){ 0, 0, 0, 0 };
	struct park pk = { req, fn, ctx };
	dgi_epoch_enter();
	dg_err e = atomic_load(&c->dead) ? DG_ERR_CLOSED :
	    tx_read(c, topver, part, hash, key, klen, val, found, ver, READ_PARK, &pk);
	dgi_epoch_leave();
	return e;
}

/* Parks pk's request on the write replicating e (pt locked): the answer
 * then carries what e holds now.  DG_ERR__COUNT: parked; DG_ERR_NOT_READY:
 * it cannot wait (no memory: the reader asks again); DG_OK: nobody
 * replicates e (never left pending: read it now). */
static dg_err park(dgi_part *pt, uint64_t hash, dgi_entry *e, int64_t wall,
    const struct park *pk)
{
	dgi_pver ver = dgi_entry_ver(e);
	struct pw *w = dgi_pw_find(pt, hash, &ver);
	if (w == NULL) {
		e->flags &= ~DGI_ENTRY_PENDING; /* (as read.c's park_read) */
		return DG_OK;
	}
	struct pw_wait *x = dgi_pw_remote_waiter(w, PWW_TXREAD);
	if (x == NULL)
		return DG_ERR_NOT_READY;
	x->in = *pk->req;
	x->in.body = NULL;
	x->fn = pk->fn;
	x->fnctx = pk->ctx;
	x->ver = ver;
	x->found = dgi_entry_live(e, wall);
	if (x->found && dgi_append(&x->val, dgi_entry_val(e), e->vlen) != DG_OK) {
		dgi_pw_waiter_free(w, x);
		return DG_ERR_NOT_READY;
	}
	dgi_pw_attach(w, x);
	return DG_ERR__COUNT;
}

static dg_err tx_read(dg_cache *c, int64_t topver, uint32_t part, uint64_t hash,
    const uint8_t *key, uint32_t klen, dg_buf *val, bool *found, dgi_pver *ver, int how,
    const struct park *pk)
{
	dgi_grid *g = c->g;
	dgi_aff *aff = atomic_load_explicit(&c->aff, memory_order_acquire);
	if (part >= c->cfg.partitions)
		return DG_ERR_INVAL;
	bool any_role = topver == 0;
	if (!any_role && (aff == NULL || aff->topver != topver ||
	    dgi_aff_owner(aff, part, 0) != g->self))
		return DG_ERR_REMAP;
	if (!any_role && atomic_load_explicit(&g->leaving, memory_order_relaxed))
		return DG_ERR_NOT_READY;
	dgi_part *pt = &c->parts[part];
	dg_err err = DG_OK;
	dgi_part_lock(pt);
	int st = atomic_load_explicit(&pt->state, memory_order_relaxed);
	dgi_entry *e = dgi_part_find(pt, hash, key, klen);
	if (st == P_LOST || atomic_load_explicit(&c->lost[part], memory_order_relaxed))
		err = DG_ERR_PARTITION_LOST;
	else if (st == P_NONE && !(any_role && e != NULL))
		err = any_role ? DG_ERR_NOT_READY : DG_ERR_REMAP;
	else if (st == P_MOVING && (e == NULL || dgi_entry_topver(e) < pt->moving_topver))
		err = DG_ERR_NOT_READY; /* the supplier may hold it, or a newer copy:
		                           retry once it arrived */
	if (err == DG_OK && e != NULL && how != READ_ANY && (e->flags & DGI_ENTRY_PENDING)) {
		/* not on every backup yet: nobody reads it */
		err = how == READ_PARK ? park(pt, hash, e, dgi_wall_ms(), pk) : DG_ERR_NOT_READY;
		if (err == DG_ERR__COUNT) {
			dgi_part_unlock(pt);
			return err; /* answered once every backup has it */
		}
	}
	if (err == DG_OK && e != NULL) {
		*ver = dgi_entry_ver(e);
		if (dgi_entry_live(e, dgi_wall_ms())) {
			*found = true;
			err = dgi_append(val, dgi_entry_val(e), e->vlen);
		}
	}
	dgi_part_unlock(pt);
	return err;
}

static dg_err tx_write(dg_cache *c, int64_t topver, uint32_t part, uint64_t hash,
    const uint8_t *key, uint32_t klen, const uint8_t *val, uint32_t vlen, uint64_t tx_node,
    uint64_t tx_seq, dgi_pver *ver, int64_t *expire_ms);

dg_err dgi_cache_tx_write(dg_cache *c, int64_t topver, uint32_t part, uint64_t hash,
    const uint8_t *key, uint32_t klen, const uint8_t *val, uint32_t vlen, uint64_t tx_node,
    uint64_t tx_seq, dgi_pver *ver, int64_t *expire_ms)
{
	dgi_epoch_enter();
	dg_err e = atomic_load(&c->dead) ? DG_ERR_CLOSED :
	    tx_write(c, topver, part, hash, key, klen, val, vlen, tx_node, tx_seq, ver, expire_ms);
	dgi_epoch_leave();
	return e;
}

static dg_err tx_write(dg_cache *c, int64_t topver, uint32_t part, uint64_t hash,
    const uint8_t *key, uint32_t klen, const uint8_t *val, uint32_t vlen, uint64_t tx_node,
    uint64_t tx_seq, dgi_pver *ver, int64_t *expire_ms)
{
	dgi_grid *g = c->g;
	if (part >= c->cfg.partitions)
		return DG_ERR_INVAL;
	dgi_aff *aff = atomic_load_explicit(&c->aff, memory_order_acquire);
	int64_t now = aff != NULL ? aff->topver : atomic_load(&g->topver);
	/* A commit that comes after a newer topology is stamped with the tx's
	 * own (cache.h); next_version still keeps it above the entry here. */
	if (topver <= 0 || topver > now)
		topver = now;
	dgi_part *pt = &c->parts[part];
	dgi_part_lock(pt);
	dgi_entry *e = dgi_part_find(pt, hash, key, klen);
	dg_err err = DG_OK;
	dgi_entry *ne = NULL;
	if (e != NULL && dgi_entry_op_is(pt, e, tx_node, tx_seq)) {
		*ver = dgi_entry_ver(e); /* this tx's write, applied already */
		*expire_ms = dgi_entry_expire(e);
	} else {
		err = dgi_write_new_version(g, c, part, e, topver, hash, key, klen, val, vlen, tx_node,
		    tx_seq, ver, expire_ms, &ne);
	}
	/* FULL_SYNC: nobody reads the new version (plain reads wait, a tx's
	 * reads are refused NOT_READY) until every backup has it — as an
	 * ATOMIC write's (pending.c), whose copies it is sent as too.  A
	 * primary cut off after this never shows a write the owners on the
	 * other side may roll back (the tx's own TX_COMMIT_COPY still decides
	 * what the near is told). */
	if (err == DG_OK && ne != NULL && aff != NULL && aff->copies > 1 &&
	    c->cfg.write_sync == DG_FULL_SYNC && dgi_aff_owner(aff, part, 0) == g->self) {
		dg_err pe;
		(void)dgi_pw_start(g, c, part, aff, hash, ne, &pe);
	}
	if (val != NULL)
		DGI_COUNT(c, puts, 1);
	else
		DGI_COUNT(c, removes, 1);
	dgi_part_unlock(pt);
	return err;
}

dg_err dgi_cache_tx_copy(dg_cache *c, uint32_t part, uint64_t hash, const uint8_t *key,
    uint32_t klen, const uint8_t *val, uint32_t vlen, const dgi_pver *ver,
    int64_t expire_ms, uint64_t tx_node, uint64_t tx_seq)
{
	if (part >= c->cfg.partitions)
		return DG_ERR_INVAL;
	dgi_epoch_enter();
	dg_err e = atomic_load(&c->dead) ? DG_ERR_CLOSED :
	    dgi_apply_copy(c->g, c, part, hash, key, klen, val, vlen, ver, expire_ms, tx_node,
	    tx_seq);
	dgi_epoch_leave();
	return e;
}

