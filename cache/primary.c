/*
 * primary.c — the primary's and the backups' side of the ATOMIC update
 * protocol (update.c has the originator's and the message flow).
 *
 * The primary evaluates an update under the partition lock, records its
 * id in the partition's update-id table (dedup.c), writes the new version
 * and sends it to every backup.  FULL_SYNC: the copy names a pending-write
 * record (pending.c) and every backup answers BACKUP_ACK to the primary;
 * the originator is answered once all of them applied it.  PRIMARY_SYNC
 * and FULL_ASYNC copies ask for no answer.  The FULL_SYNC copies of the
 * UPDATEs one round of the reactor handles go to each backup as one
 * message at the round's end (pending.c, dgi_copies_round).
 *
 * A backup acknowledges a copy only when it agrees with the sender on who
 * owns the partition (BACKUP carries a digest of the owner set) and it
 * applied the copy (or holds a newer version): otherwise it answers
 * DG_ERR_REMAP (its topology is ahead: the update is retried under it and
 * reaches the owners the sender did not know) or DG_ERR_NOT_READY (it is
 * behind, or does not know the cache yet) — never a silent DG_OK.
 * Writes to persistent caches run on the grid's worker pool.
 */
#include "cache_int.h"
#include "marshal/marshal_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the primary ---- */

/* Sends a copy that asks for no answer (PRIMARY_SYNC, FULL_ASYNC) of entry
 * e to every backup owner under aff (partition locked). */
static void send_copies(dgi_grid *g, dg_cache *c, const dgi_aff *aff, uint32_t part,
    const dgi_entry *e, int64_t flag)
{
	bool tomb = (e->flags & DGI_ENTRY_TOMB) != 0;
	uint64_t op_node, op_seq;
	dgi_entry_op(&c->parts[part], e, &op_node, &op_seq);
	dgi_msg_backup b = {
		c->id, part, aff->topver, dgi_entry_topver(e), (int64_t)e->counter, e->order,
		dgi_entry_expire(e), (int64_t)op_node, (int64_t)op_seq, 0, flag,
		(int64_t)dgi_aff_owners_hash(aff, part),
		{ dgi_entry_key(e), dgi_entry_klen(e) }, { tomb ? NULL : dgi_entry_val(e), e->vlen }
	};
	for (uint32_t i = 0; i < aff->copies; i++) {
		dg_node_id o = dgi_aff_owner(aff, part, i);
		if (o != 0 && o != g->self)
			dg_tp_send(g->tp, o, DGI_MSG_BACKUP, &b);
	}
}

/* The version the primary writes next for the key of e (NULL: none)
 * under topver (partition locked). */
static inline __attribute__((always_inline)) void next_version(dgi_grid *g, dgi_part *pt,
    const dgi_entry *e, int64_t topver, dgi_pver *ver)
{
	uint32_t order = (uint32_t)atomic_load_explicit(&g->self_order, memory_order_relaxed);
	*ver = (dgi_pver){ topver, ++pt->counter, order, 0 };
	if (e != NULL && dgi_entry_ver_cmp(ver, e) <= 0) {
		/* a copy from a restarted or older epoch: stay ahead of it */
		ver->topver = dgi_entry_topver(e);
		ver->counter = e->counter + 1;
		pt->counter = ver->counter;
	}
}

/* Writes key's next version as its primary (partition locked; e: the key's
 * entry or NULL; val NULL: a removal, kept as a tombstone so an older copy
 * arriving later cannot revive the key): persists first, then applies;
 * *out (optional): the entry written.  A version or key an entry cannot
 * hold (dgi_entry_storable: a topology version past 2^32 - 1) is refused
 * before anything is written. */
static inline __attribute__((always_inline)) dg_err write_new_version(dgi_grid *g,
    dg_cache *c, uint32_t part, dgi_entry *e, int64_t topver, uint64_t hash,
    const uint8_t *key, uint32_t klen, const uint8_t *val, uint32_t vlen, uint64_t op_node,
    uint64_t op_seq, dgi_pver *ver, int64_t *expire, dgi_entry **out)
{
	dgi_part *pt = &c->parts[part];
	next_version(g, pt, e, topver, ver);
	dg_err err = dgi_entry_storable(klen, ver->topver);
	if (err != DG_OK)
		return err;
	bool removal = val == NULL;
	if (removal)
		*expire = dgi_wall_ms() + DGI_TOMB_TTL_MS;
	else
		*expire = c->cfg.ttl_ms ? dgi_wall_ms() + (int64_t)c->cfg.ttl_ms : 0;
	if (c->cfg.persistence && (err = dgi_grid_persist(g, c, part, key, klen, val, vlen, ver,
	    *expire, removal, op_node, op_seq)) != DG_OK)
		return err;
	if (removal)
		return dgi_part_set(pt, hash, key, klen, NULL, 0, ver, *expire, op_node, op_seq,
		    DGI_ENTRY_TOMB, out);
	if (e != NULL && dgi_part_overwrite(pt, e, val, vlen, ver, *expire, op_node, op_seq)) {
		if (out != NULL)
			*out = e;
		return DG_OK;
	}
	return dgi_part_set(pt, hash, key, klen, val, vlen, ver, *expire, op_node, op_seq, 0,
	    out);
}

/* (primary_apply has the body in line: fifteen arguments are a cost of
 * their own on every put) */
dg_err dgi_write_new_version(dgi_grid *g, dg_cache *c, uint32_t part, dgi_entry *e,
    int64_t topver, uint64_t hash, const uint8_t *key, uint32_t klen, const uint8_t *val,
    uint32_t vlen, uint64_t op_node, uint64_t op_seq, dgi_pver *ver, int64_t *expire,
    dgi_entry **out)
{
	return write_new_version(g, c, part, e, topver, hash, key, klen, val, vlen, op_node,
	    op_seq, ver, expire, out);
}

/* Evaluates u against the key's current entry e (present: live): sets
 * u->flag, *write and *removal; a GET_AND_PUT's old value goes to u->old. */
static dg_err evaluate(struct upd *u, const dgi_entry *e, bool present, bool *write,
    bool *removal)
{
	*write = true;
	*removal = false;
	switch (u->op) {
	case OP_PUT:
		u->flag = 1;
		return DG_OK;
	case OP_REMOVE:
		u->flag = present;
		*write = present;
		*removal = true;
		return DG_OK;
	case OP_PUT_IF_ABSENT:
		u->flag = !present;
		*write = !present;
		return DG_OK;
	case OP_REPLACE:
		u->flag = present;
		*write = present;
		return DG_OK;
	case OP_REPLACE_IF_EQ:
	case OP_REMOVE_IF_EQ:
		u->flag = present && e->vlen == u->elen &&
		    (u->elen == 0 || memcmp(dgi_entry_val(e), u->exp, u->elen) == 0);
		*write = u->flag;
		*removal = u->op == OP_REMOVE_IF_EQ;
		return DG_OK;
	case OP_GET_AND_PUT:
		u->flag = present;
		u->had = present;
		if (present && u->old != NULL)
			return dgi_append(u->old, dgi_entry_val(e), e->vlen);
		return DG_OK;
	default:
		return DG_ERR_INVAL;
	}
}

/* Applies an update as the primary (cache_int.h).  A retry of an update
 * this partition has seen (the update-id table, or the id the entry
 * carries) is not applied again: it reports the recorded flag once the
 * key's current version is on every backup — sent again if need be, which
 * also repairs a copy a failed primary did not finish sending.  An update
 * whose answer depends on a version not yet on every backup (a write, or
 * a conditional one that wrote nothing) waits for that version. */
dg_err dgi_primary_apply(dgi_grid *g, dg_cache *c, struct upd *u)
{
	u->pw = NULL;
	u->applied = false;
	bool fresh = u->fresh; /* (a first offer: no record of it can exist) */
	u->fresh = false;
	dgi_aff *aff = atomic_load_explicit(&c->aff, memory_order_acquire);
	if (aff == NULL || aff->topver != u->topver || dgi_aff_owner(aff, u->part, 0) != g->self)
		return DG_ERR_REMAP;
	if (atomic_load_explicit(&g->leaving, memory_order_relaxed))
		return DG_ERR_NOT_READY; /* handing over: the next primary takes it */
	dgi_part *pt = &c->parts[u->part];
	dgi_part_lock(pt);
	/* one clock read and one lease check for the whole update (the rule's,
	 * the blind put's, the update-id table's) */
	uint64_t now = dgi_coarse_ms();
	dg_err err = DG_ERR_NOT_READY; /* no majority's lease: the sender maps again */
	dgi_entry *e = NULL;
	if (dgi_member_serving_at(g->m, now) != DG_OK)
		goto out;
	int st = atomic_load_explicit(&pt->state, memory_order_relaxed);
	e = dgi_part_find(pt, u->hash, u->key, u->klen);
	err = dgi_part_may_serve_leased(c, pt, u->part, st, e, DG_OK);
	if (pt->psync_n > 0 && err != DG_ERR_PARTITION_LOST) {
		/* still learning what the old primary did; or unable to, its
		 * store full: refused, not applied (a retry would wait for
		 * nothing but the timeout) */
		err = pt->psync_err == DG_ERR_STORAGE_FULL && (err == DG_OK || err == DG_ERR_NOT_READY) ?
		    DG_ERR_STORAGE_FULL : DG_ERR_NOT_READY;
		goto out;
	}
	bool full = u->sync == DG_FULL_SYNC && aff->copies > 1;
	int64_t flag = 0;
	bool dup = !fresh && dgi_dedup_find(pt, u->op_node, u->op_seq, &flag);
	if (!dup && !fresh && e != NULL && dgi_entry_op_is(pt, e, u->op_node, u->op_seq)) {
		dup = true; /* an entry that came with its id (rebalanced, reloaded) */
		flag = 1;
	}
	if (dup && err != DG_ERR_PARTITION_LOST && err != DG_ERR_REMAP) {
		/* applied already: answer what it answered, once the key's
		 * current version is on every backup */
		u->flag = flag;
		err = DG_OK;
		if (u->op == OP_GET_AND_PUT && flag) {
			/* applied, but the previous value it read is gone */
			err = DG_ERR_TIMEOUT;
			u->applied = true;
			goto out;
		}
		if (full && e != NULL)
			u->pw = dgi_pw_start(g, c, u->part, aff, u->hash, e, &err);
		goto out;
	}
	if (err == DG_ERR_NOT_READY && u->op == OP_PUT)
		err = DG_OK; /* a blind put needs no older copy (but the lease, held) */
	if (err != DG_OK)
		goto out;
	int64_t wall = c->cfg.ttl_ms ? dgi_wall_ms() : 0;
	bool write, removal;
	if ((err = evaluate(u, e, dgi_entry_live(e, wall), &write, &removal)) != DG_OK)
		goto out;
	if (write && !removal && full &&
	    dgi_backup_full(c, aff, u->part, (uint64_t)u->klen + u->vlen, now)) {
		err = DG_ERR_STORAGE_FULL; /* refused, not applied: nothing recorded */
		goto out;
	}
	if (!write) {
		dgi_dedup_put(pt, u->op_node, u->op_seq, u->flag, now);
		/* the answer rests on what the key holds: wait until that is
		 * on every backup */
		if (full && e != NULL && (e->flags & DGI_ENTRY_PENDING))
			u->pw = dgi_pw_start(g, c, u->part, aff, u->hash, e, &err);
		goto out;
	}
	dgi_pver ver;
	int64_t expire;
	dgi_entry *ne = NULL;
	if ((err = write_new_version(g, c, u->part, e, aff->topver, u->hash, u->key, u->klen,
	    removal ? NULL : u->val, u->vlen, u->op_node, u->op_seq, &ver, &expire, &ne)) != DG_OK)
		goto out;
	/* recorded once written (and before dgi_pw_start reads it): a write
	 * refused (an LMDB error, DG_ERR_LIMIT) must not answer its retry
	 * "applied" */
	dgi_dedup_put(pt, u->op_node, u->op_seq, u->flag, now);
	if (full) {
		u->pw = dgi_pw_start(g, c, u->part, aff, u->hash, ne, &err);
		if (err != DG_OK)
			u->applied = true; /* here, not on every backup: the originator retries */
	} else if (aff->copies > 1) {
		send_copies(g, c, aff, u->part, ne, u->flag);
	}
out:
	if (err != DG_OK)
		u->pw = NULL;
	if (u->pw == NULL)
		dgi_part_unlock(pt);
	return err;
}

/* The BYTES header of a value of vlen bytes (TAG_BYTES, the length as a
 * varint: 6 bytes at most) as *vh, byte i in bits 8i..8i+7; its length. */
static uint32_t bytes_header(uint32_t vlen, uint64_t *vh)
{
	uint8_t b[1 + 10] = { TAG_BYTES };
	uint32_t n = (uint32_t)(dgi_put_uvarint(b + 1, vlen) - b);
	*vh = 0;
	for (uint32_t i = 0; i < n; i++)
		*vh |= (uint64_t)b[i] << 8 * i;
	return n;
}

/* The short put (cache_int.h): dgi_primary_apply's path for a fresh
 * OP_PUT from this node, as its primary, of a raw key (8..127 bytes)
 * that has an entry the value fits in place — without the update record,
 * the encoded copies of key and value, the retry loop.  The same checks in
 * the same order, narrowed: anything else (not the primary, a partition
 * not OWNING or still learning, no lease, a FULL_SYNC cache with backups,
 * persistence, a transaction, a new key, a value that does not fit) is
 * DG_ERR__COUNT with nothing written or counted, and the general path
 * decides from the start.  Its update id is not recorded in the
 * partition's update-id table (dedup.c): that table answers retries, and
 * a put from this node answered here is never retried; the id still goes
 * into the entry and its copies, as any write's. */
static inline __attribute__((always_inline)) dg_err put_short(dg_cache *c,
    const uint8_t *key, uint32_t klen, const uint8_t *val, uint32_t vlen)
{
	if (!dgi_epoch_short_enter(false))
		return DG_ERR__COUNT;
	dg_err err = DG_ERR__COUNT;
	dgi_ctrs *b;
	dgi_grid *g = c->g;
	if (atomic_load_explicit(&c->dead, memory_order_relaxed) || c->cfg.persistence ||
	    (c->cfg.atomicity == DG_TRANSACTIONAL && g->tx_hook != NULL) ||
	    (b = dgi_ctrs_short(c)) == NULL) /* (after dead: see dgi_ctrs_short) */
		goto out;
	uint64_t t0 = dgi_lat_short_t0(b, DG_OP_PUT);
	dgi_aff *aff = atomic_load_explicit(&c->aff, memory_order_acquire);
	if (aff == NULL || (aff->copies > 1 && c->cfg.write_sync == DG_FULL_SYNC) ||
	    atomic_load_explicit(&g->leaving, memory_order_relaxed))
		goto out;
	uint64_t hash = dgi_key_hash_bytes(key, klen);
	uint32_t part = dgi_part_of(hash, c->cfg.partitions);
	if (atomic_load_explicit(&c->lost[part], memory_order_relaxed) ||
	    aff->self_kind[part] != DGI_AFF_PRIMARY)
		goto out;
	const uint8_t pre[2] = { TAG_BYTES, (uint8_t)klen };
	/* the value's BYTES header, byte i in bits 8i..8i+7: its length in one
	 * byte under 128, else a varint of up to 5 */
	uint64_t vh = TAG_BYTES | (uint64_t)vlen << 8;
	uint32_t vhlen = 2;
	if (__builtin_expect(vlen >= 0x80, 0))
		vhlen = bytes_header(vlen, &vh);
	dgi_part *pt = &c->parts[part];
	dgi_part_lock(pt);
	dgi_entry *e = (dgi_entry *)dgi_part_find_split(pt, hash, pre, 2, key, klen);
	dgi_pver ver;
	if (e == NULL || atomic_load_explicit(&pt->state, memory_order_relaxed) != P_OWNING ||
	    pt->psync_n > 0 || dgi_member_lease_serving(g->lease) != DG_OK)
		goto unlock;
	next_version(g, pt, e, aff->topver, &ver); /* (a counter skipped below: harmless) */
	int64_t expire = c->cfg.ttl_ms ? dgi_wall_ms() + (int64_t)c->cfg.ttl_ms : 0;
	if (!dgi_part_overwrite_in(pt, e, vh, vhlen, val, vlen, &ver, expire, g->self,
	    dgi_next_op_seq()))
		goto unlock; /* (not storable, or it does not fit) */
	if (aff->copies > 1)
		send_copies(g, c, aff, part, e, 1);
	err = DG_OK;
unlock:
	dgi_part_unlock(pt);
	if (err == DG_OK) {
		dgi_ctr_add(&b->puts, 1, false);
		dgi_lat_fast_done(b, DG_OP_PUT, t0, false);
	}
out:
	dgi_epoch_short_leave(false);
	return err;
}

dg_err dgi_put_short(dg_cache *c, const uint8_t *key, uint32_t klen, const uint8_t *val,
    uint32_t vlen)
{
	return put_short(c, key, klen, val, vlen);
}

dg_err dgi_put_raw(dg_cache *c, const uint8_t *key, uint32_t klen, const uint8_t *val,
    uint32_t vlen)
{
	dg_err e = put_short(c, key, klen, val, vlen);
	return __builtin_expect(e != DG_ERR__COUNT, 1) ? e : dgi_put_general(c, key, klen, val,
	    vlen);
}

/* ---- handlers ---- */

bool dgi_wants_worker(const dg_cache *c)
{
	return c->cfg.persistence;
}

/* Hands a request to the worker pool (persistent caches: LMDB waits).  A
 * full queue refuses it, not applied (cache_int.h, GRID_QUEUE_JOBS): an
 * UPDATE is answered DG_ERR_BUSY, a FULL_SYNC BACKUP is acked DG_ERR_BUSY
 * to its primary (which sends it again later). */
void dgi_to_worker(dgi_grid *g, const dg_msg_in *in)
{
	struct job *j = dgi_alloc(sizeof(*j) + in->raw_len);
	dg_err e = DG_ERR_NOMEM;
	if (j != NULL) {
		j->next = NULL;
		j->type = in->type;
		j->in = *in;
		j->in.body = NULL;
		j->raw = (uint8_t *)(j + 1);
		memcpy(j->raw, in->raw, in->raw_len);
		j->raw_len = in->raw_len;
		j->in.raw = j->raw;
		if ((e = dgi_grid_job_push(g, j)) == DG_OK)
			return;
		dgi_free(j);
	}
	if (in->type == DGI_MSG_BACKUP_ALL) {
		dgi_backup_all_refuse(g, in, in->body, e);
		return;
	}
	const dgi_msg_backup *b = in->type == DGI_MSG_BACKUP ? in->body : NULL;
	if (b == NULL) {
		dg_tp_reply_error(g->tp, in, e);
	} else if (b->pw != 0) {
		dgi_msg_backup_ack ack = { b->cache_id, b->part, b->pw, e };
		dg_tp_send(g->tp, in->from, DGI_MSG_BACKUP_ACK, &ack);
	}
}

dg_err dgi_upd_received(const dg_cache *c, struct upd *u, const dgi_msg_update *m)
{
	memset(u, 0, sizeof(*u));
	u->op = (int)m->op;
	u->sync = (dg_write_sync)m->sync;
	u->part = (uint32_t)m->part;
	u->topver = m->topver;
	u->key = m->key.ptr;
	u->klen = m->key.len;
	u->val = m->val.ptr;
	u->vlen = m->val.len;
	u->exp = m->exp.ptr;
	u->elen = m->exp.len;
	u->op_node = (uint64_t)m->op_node;
	u->op_seq = (uint64_t)m->op_seq;
	bool is_rm = u->op == OP_REMOVE || u->op == OP_REMOVE_IF_EQ;
	bool is_cas = u->op == OP_REPLACE_IF_EQ || u->op == OP_REMOVE_IF_EQ;
	if (m->part < 0 || (uint64_t)m->part >= c->cfg.partitions || u->key == NULL ||
	    u->klen == 0 || u->klen > DG_KEY_MAX || (!is_rm && u->val == NULL) ||
	    (is_cas && u->exp == NULL))
		return DG_ERR_INVAL;
	u->hash = dgi_key_hash(u->key, u->klen);
	return dgi_part_of(u->hash, c->cfg.partitions) == u->part ? DG_OK : DG_ERR_INVAL;
}

static void handle_update(dgi_grid *g, const dg_msg_in *in, const dgi_msg_update *m)
{
	dg_cache *c = dgi_grid_cache(g, (uint32_t)m->cache_id);
	dgi_msg_update_res r = { 0 };
	if (c == NULL) {
		/* a node that joined maps keys to itself before it has learnt
		 * the cache (CACHE_CONFIGS on its way): the sender retries; a
		 * destroyed cache ends its retries as CLOSED there */
		r.res = DG_ERR_NOT_READY;
		dg_tp_reply(g->tp, in, DGI_MSG_UPDATE_RES, &r);
		return;
	}
	struct upd u;
	if (dgi_upd_received(c, &u, m) != DG_OK) {
		r.res = DG_ERR_INVAL;
		dg_tp_reply(g->tp, in, DGI_MSG_UPDATE_RES, &r);
		return;
	}
	dg_buf old;
	dg_buf_init(&old);
	u.old = u.op == OP_GET_AND_PUT ? &old : NULL;
	if (u.sync == DG_FULL_SYNC)
		dgi_copies_round(g, c); /* this round's copies: one message per backup */
	r.res = dgi_primary_apply(g, c, &u);
	if (u.pw != NULL) {
		/* answered when the backups have it (partition still locked) */
		struct pw_wait *x = dgi_pw_remote_waiter(u.pw, PWW_WRITE);
		if (x != NULL) {
			x->in = *in;
			x->in.body = NULL;
			x->flag = u.flag;
			x->has_old = u.had;
			if (u.had && dgi_append(&x->val, old.data, old.len) != DG_OK)
				x->has_old = false;
			dgi_pw_attach(u.pw, x);
			dgi_part_unlock(&c->parts[u.part]);
			dg_buf_free(&old);
			return;
		}
		dgi_part_unlock(&c->parts[u.part]);
		r.res = DG_ERR_TIMEOUT; /* no memory to wait with: applied, unconfirmed */
		u.applied = true;
	}
	r.flag = u.flag;
	r.applied = r.res != DG_OK && u.applied;
	if (u.had && r.res == DG_OK)
		r.old = (dg_bytes){ old.data ? old.data : (const uint8_t *)"", (uint32_t)old.len };
	dg_tp_reply(g->tp, in, DGI_MSG_UPDATE_RES, &r);
	dg_buf_free(&old);
}

static void on_update(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	dgi_grid *g = ctx;
	const dgi_msg_update *m = in->body;
	(void)tp;
	dg_cache *c = dgi_grid_cache(g, (uint32_t)m->cache_id);
	if (c != NULL && dgi_wants_worker(c))
		dgi_to_worker(g, in);
	else
		handle_update(g, in, m);
}

dg_err dgi_apply_copy(dgi_grid *g, dg_cache *c, uint32_t part, uint64_t hash,
    const uint8_t *key, uint32_t klen, const uint8_t *val, uint32_t vlen,
    const dgi_pver *ver, int64_t expire_ms, uint64_t op_node, uint64_t op_seq)
{
	dgi_part *pt = &c->parts[part];
	dg_err e = dgi_entry_storable(klen, ver->topver);
	if (e != DG_OK)
		return e; /* (before anything is persisted) */
	dgi_part_lock(pt);
	dgi_entry *cur = dgi_part_find(pt, hash, key, klen);
	if (cur != NULL && dgi_entry_ver_cmp(ver, cur) <= 0)
		goto out; /* ours is as new or newer */
	if (val == NULL && expire_ms == 0)
		expire_ms = dgi_wall_ms() + DGI_TOMB_TTL_MS; /* a sender without one */
	if (c->cfg.persistence &&
	    (e = dgi_grid_persist(g, c, part, key, klen, val, vlen, ver, expire_ms,
	    val == NULL, op_node, op_seq)) != DG_OK)
		goto out;
	if (val == NULL) /* a tombstone, even for a key we never had: its put may come later */
		e = dgi_part_set(pt, hash, key, klen, NULL, 0, ver, expire_ms, op_node, op_seq,
		    DGI_ENTRY_TOMB, NULL);
	else
		e = dgi_part_set(pt, hash, key, klen, val, vlen, ver, expire_ms, op_node, op_seq, 0,
		    NULL);
	if (ver->counter > pt->counter && ver->topver >= atomic_load(&g->topver))
		pt->counter = ver->counter;
out:
	dgi_part_unlock(pt);
	return e;
}

static bool aff_has_node(const dgi_aff *a, dg_node_id id)
{
	for (uint32_t i = 0; i < a->nnodes; i++)
		if (a->nodes[i] == id)
			return true;
	return false;
}

/* A backup's answer to a copy from `from` (handle_backup): DG_OK only when
 * it holds the copy's version (or a newer one) and agrees with the sender
 * on the owner set; see the header comment.  A copy it disagrees with is
 * applied only from a server of its own topology (versions decide), and
 * its update id is not recorded: the write was not acknowledged (that
 * needed this node's DG_OK), and a retry of it elsewhere must run again —
 * a record would answer the retry with the flag of a write that may be
 * superseded here (a removed primary, woken from a pause, applying a
 * compare-and-set on its stale copy: its "replaced" was reported, its
 * value never seen).  From a node that is no server of its topology
 * nothing is applied. */
dg_err dgi_backup_apply(dgi_grid *g, dg_cache *c, const dgi_msg_backup *m, dg_node_id from)
{
	if (m->part < 0 || (uint64_t)m->part >= c->cfg.partitions || m->key.ptr == NULL ||
	    m->key.len == 0)
		return DG_ERR_INVAL;
	uint32_t part = (uint32_t)m->part;
	uint64_t hash = dgi_key_hash(m->key.ptr, m->key.len);
	if (dgi_part_of(hash, c->cfg.partitions) != part)
		return DG_ERR_INVAL;
	dgi_aff *aff = atomic_load_explicit(&c->aff, memory_order_acquire);
	int64_t mine = aff != NULL ? aff->topver : 0;
	bool agree = aff != NULL && (uint64_t)m->owners == dgi_aff_owners_hash(aff, part) &&
	    aff->self_kind[part] == DGI_AFF_BACKUP;
	int st = atomic_load(&c->parts[part].state);
	dg_err e = DG_OK;
	if (agree || (st != P_NONE && aff != NULL && aff_has_node(aff, from))) {
		dgi_pver ver = { m->ver_topver, (uint64_t)m->ver_counter, (uint32_t)m->ver_order, 0 };
		e = dgi_apply_copy(g, c, part, hash, m->key.ptr, m->key.len, m->val.ptr, m->val.len,
		    &ver, m->expire_ms, (uint64_t)m->op_node, (uint64_t)m->op_seq);
		if (e == DG_OK) {
			dgi_part *pt = &c->parts[part];
			dgi_part_lock(pt);
			if (agree || m->pw == 0) /* (a copy nobody waits for: acknowledged) */
				dgi_dedup_put(pt, (uint64_t)m->op_node, (uint64_t)m->op_seq, m->flag,
				    dgi_now_ms());
			if (m->pw != 0)
				dgi_pw_recent(pt, hash, &ver);
			dgi_part_unlock(pt);
		}
	}
	if (e != DG_OK)
		return e;
	if (st == P_LOST || atomic_load_explicit(&c->lost[part], memory_order_relaxed))
		return DG_ERR_PARTITION_LOST;
	if (agree)
		return DG_OK;
	return mine > m->topver ? DG_ERR_REMAP : DG_ERR_NOT_READY;
}

_Atomic uint64_t dgi_test_drop_backups_at;

static void handle_backup(dgi_grid *g, const dg_msg_in *in, const dgi_msg_backup *m)
{
	if (m->pw != 0 && atomic_load_explicit(&dgi_test_drop_backups_at, memory_order_relaxed) ==
	    g->self)
		return;
	dg_cache *c = dgi_grid_cache(g, (uint32_t)m->cache_id);
	/* a node that has not learnt the cache yet holds nothing of it */
	dg_err e = c != NULL ? dgi_backup_apply(g, c, m, in->from) : DG_ERR_NOT_READY;
	if (m->pw != 0) {
		dgi_msg_backup_ack ack = { m->cache_id, m->part, m->pw, e };
		dg_tp_send(g->tp, in->from, DGI_MSG_BACKUP_ACK, &ack);
		return;
	}
	/* A copy that asks for no answer (PRIMARY_SYNC, FULL_ASYNC), sent
	 * under an older topology: owners that joined since were not among
	 * its targets.  Forward to them (versions make duplicates harmless). */
	dgi_aff *aff = c != NULL ? atomic_load(&c->aff) : NULL;
	if (e != DG_ERR_INVAL && aff != NULL && m->topver < aff->topver) {
		dgi_msg_backup fw = *m;
		fw.topver = aff->topver;
		fw.owners = (int64_t)dgi_aff_owners_hash(aff, (uint32_t)m->part);
		for (uint32_t i = 0; i < aff->copies; i++) {
			dg_node_id o = dgi_aff_owner(aff, (uint32_t)m->part, i);
			if (o != 0 && o != g->self && o != in->from)
				dg_tp_send(g->tp, o, DGI_MSG_BACKUP, &fw);
		}
	}
}

static void on_backup(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	dgi_grid *g = ctx;
	const dgi_msg_backup *m = in->body;
	(void)tp;
	dg_cache *c = dgi_grid_cache(g, (uint32_t)m->cache_id);
	if (c != NULL && dgi_wants_worker(c))
		dgi_to_worker(g, in);
	else
		handle_backup(g, in, m);
}

static void on_backup_ack(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	dgi_grid *g = ctx;
	const dgi_msg_backup_ack *m = in->body;
	(void)tp;
	dg_cache *c = dgi_grid_cache(g, (uint32_t)m->cache_id);
	if (c != NULL && m->part >= 0 && (uint64_t)m->part < c->cfg.partitions)
		dgi_pw_ack(g, c, (uint32_t)m->part, (uint64_t)m->pw, in->from, (dg_err)m->res);
}

void dgi_ops_run_job(dgi_grid *g, struct job *j)
{
	_Alignas(16) uint8_t body[DG_MSG_BODY_MAX];
	dg_err e = dg_msg_decode(j->type, g->reg, j->raw, j->raw_len, body);
	if (e != DG_OK)
		return;
	dg_msg_in in = j->in;
	in.body = body;
	if (j->type == DGI_MSG_UPDATE)
		handle_update(g, &in, (const dgi_msg_update *)body);
	else if (j->type == DGI_MSG_BACKUP)
		handle_backup(g, &in, (const dgi_msg_backup *)body);
	else
		dgi_many_run(g, &in, j->type, body);
}

void dgi_primary_register(dgi_grid *g)
{
	dg_tp_handle(g->tp, DGI_MSG_UPDATE, on_update, g);
	dg_tp_handle(g->tp, DGI_MSG_BACKUP, on_backup, g);
	dg_tp_handle(g->tp, DGI_MSG_BACKUP_ACK, on_backup_ack, g);
	dgi_many_register(g);
}
