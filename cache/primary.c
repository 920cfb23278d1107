/*
 * primary.c — the primary's and the backups' side of the ATOMIC update
 * protocol (update.c has the originator's and the message flow): the
 * primary applies an update under the partition lock and forwards the new
 * version to the backups; a backup applies a copy only when it is newer.
 * Writes to persistent caches run on the grid's worker pool.
 */
#include "cache_int.h"
#include "marshal/marshal_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the primary ---- */

/* Sends the entry's current copy to every backup owner (partition locked).
 * Returns how many sends failed (a full queue, a peer being redialled). */
static uint32_t send_backups(dgi_grid *g, dg_cache *c, const dgi_aff *aff, struct upd *u,
    const dgi_pver *ver, int64_t expire, bool removal, dg_node_id skip)
{
	dgi_msg_backup b = {
		c->id, u->part, aff->topver, ver->topver, (int64_t)ver->counter, ver->order,
		expire, (int64_t)u->op_node, (int64_t)u->op_seq,
		u->sync == DG_FULL_SYNC ? (int64_t)u->fut : 0,
		{ u->key, u->klen }, { removal ? NULL : u->val, u->vlen }
	};
	u->nbackups = 0;
	uint32_t failed = 0;
	for (uint32_t i = 0; i < aff->copies; i++) {
		dg_node_id o = dgi_aff_owner(aff, u->part, i);
		if (o == 0 || o == g->self || o == skip)
			continue;
		if (dg_tp_send(g->tp, o, DGI_MSG_BACKUP, &b) == DG_OK)
			u->backups[u->nbackups++] = o;
		else
			failed++;
	}
	return failed;
}

/* Writes key's next version as its primary (partition locked; e: the key's
 * entry or NULL; val NULL: a removal, kept as a tombstone so an older copy
 * arriving later cannot revive the key): persists first, then applies. */
dg_err dgi_write_new_version(dgi_grid *g, dg_cache *c, uint32_t part, dgi_entry *e,
    int64_t topver, uint64_t hash, const uint8_t *key, uint32_t klen, const uint8_t *val,
    uint32_t vlen, uint64_t op_node, uint64_t op_seq, dgi_pver *ver, int64_t *expire)
{
	dgi_part *pt = &c->parts[part];
	uint32_t order = (uint32_t)atomic_load_explicit(&g->self_order, memory_order_relaxed);
	*ver = (dgi_pver){ topver, ++pt->counter, order, 0 };
	if (e != NULL && dgi_pver_cmp(ver, &e->ver) <= 0) {
		/* a copy from a restarted or older epoch: stay ahead of it */
		ver->topver = e->ver.topver;
		ver->counter = e->ver.counter + 1;
		pt->counter = ver->counter;
	}
	bool removal = val == NULL;
	if (removal)
		*expire = dgi_wall_ms() + DGI_TOMB_TTL_MS;
	else
		*expire = c->cfg.ttl_ms ? dgi_wall_ms() + (int64_t)c->cfg.ttl_ms : 0;
	dg_err err;
	if (c->cfg.persistence && (err = dgi_grid_persist(g, c, part, key, klen, val, vlen, ver,
	    *expire, removal)) != DG_OK)
		return err;
	if (removal)
		return dgi_part_set(pt, hash, key, klen, NULL, 0, ver, *expire, op_node, op_seq,
		    DGI_ENTRY_TOMB, NULL);
	if (e != NULL && dgi_part_overwrite(pt, e, val, vlen, ver, *expire, op_node, op_seq))
		return DG_OK;
	return dgi_part_set(pt, hash, key, klen, val, vlen, ver, *expire, op_node, op_seq, 0,
	    NULL);
}

/* Applies an update as the primary.  DG_ERR_REMAP when this node is not
 * the primary under the sender's topology version; DG_ERR_NOT_READY for a
 * conditional update on a partition still MOVING without the key. */
dg_err dgi_primary_apply(dgi_grid *g, dg_cache *c, struct upd *u)
{
	dgi_aff *aff = atomic_load_explicit(&c->aff, memory_order_acquire);
	if (aff == NULL || aff->topver != u->topver || dgi_aff_owner(aff, u->part, 0) != g->self)
		return DG_ERR_REMAP;
	if (atomic_load_explicit(&g->leaving, memory_order_relaxed))
		return DG_ERR_NOT_READY; /* handing over: the next primary takes it */
	dgi_part *pt = &c->parts[u->part];
	pthread_mutex_lock(&pt->mu);
	int st = atomic_load_explicit(&pt->state, memory_order_relaxed);
	dg_err err = DG_OK;
	if (st == P_LOST || atomic_load_explicit(&c->lost[u->part], memory_order_relaxed)) {
		err = DG_ERR_PARTITION_LOST;
		goto out;
	}
	if (st == P_NONE) {
		err = DG_ERR_REMAP;
		goto out;
	}
	int64_t wall = c->cfg.ttl_ms ? dgi_wall_ms() : 0;
	dgi_entry *e = dgi_part_find(pt, u->hash, u->key, u->klen);
	bool present = dgi_entry_live(e, wall);
	bool dup = e != NULL && e->op_node == u->op_node && e->op_seq == u->op_seq;
	if (st == P_MOVING && (e == NULL || e->ver.topver < pt->moving_topver) && u->op != OP_PUT) {
		err = DG_ERR_NOT_READY; /* the supplier may hold the key */
		goto out;
	}
	bool write = true, removal = false;
	if (dup) {
		u->flag = 1; /* a retry of an update applied already */
		write = false;
	} else {
		switch (u->op) {
		case OP_PUT:
			u->flag = 1;
			break;
		case OP_REMOVE:
			u->flag = present;
			write = present;
			removal = true;
			break;
		case OP_PUT_IF_ABSENT:
			u->flag = !present;
			write = !present;
			break;
		case OP_REPLACE:
			u->flag = present;
			write = present;
			break;
		case OP_GET_AND_PUT:
			u->flag = present;
			u->had = present;
			if (present && u->old != NULL &&
			    (err = dgi_append(u->old, dgi_entry_val(e), e->vlen)) != DG_OK)
				goto out;
			break;
		default:
			err = DG_ERR_INVAL;
			goto out;
		}
	}
	if (!write && !dup)
		goto out;
	dgi_pver ver;
	int64_t expire;
	if (dup) {
		ver = e->ver;
		expire = e->expire_ms;
		removal = (e->flags & DGI_ENTRY_TOMB) != 0;
	} else if ((err = dgi_write_new_version(g, c, u->part, e, aff->topver, u->hash, u->key,
	    u->klen, removal ? NULL : u->val, u->vlen, u->op_node, u->op_seq, &ver,
	    &expire)) != DG_OK) {
		goto out;
	}
	if (aff->copies > 1 && send_backups(g, c, aff, u, &ver, expire, removal, 0) > 0 &&
	    u->sync == DG_FULL_SYNC)
		err = DG_ERR_CONN_BROKEN; /* applied here, not on every backup: the
		                             originator retries (same update id) */
out:
	pthread_mutex_unlock(&pt->mu);
	return err;
}

/* ---- handlers ---- */

static bool wants_worker(const dg_cache *c)
{
	return c->cfg.persistence;
}

static void backup_acked(dgi_grid *g, uint64_t fut, int64_t res, dg_node_id from);

/* Hands a request to the worker pool (persistent caches: LMDB waits).  A
 * full queue refuses it, not applied (cache_int.h, GRID_QUEUE_JOBS): an
 * UPDATE is answered DG_ERR_BUSY, a BACKUP's waiting originator is acked
 * DG_ERR_BUSY. */
static void to_worker(dgi_grid *g, const dg_msg_in *in)
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
	const dgi_msg_backup *b = in->type == DGI_MSG_BACKUP ? in->body : NULL;
	if (b == NULL) {
		dg_tp_reply_error(g->tp, in, e);
	} else if (b->fut != 0 && (dg_node_id)b->op_node == g->self) {
		backup_acked(g, (uint64_t)b->fut, e, g->self);
	} else if (b->fut != 0) {
		dgi_msg_backup_ack ack = { b->fut, e };
		dg_tp_send(g->tp, (dg_node_id)b->op_node, DGI_MSG_BACKUP_ACK, &ack);
	}
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
	if (m->part < 0 || (uint64_t)m->part >= c->cfg.partitions || m->key.ptr == NULL ||
	    m->key.len == 0) {
		r.res = DG_ERR_INVAL;
		dg_tp_reply(g->tp, in, DGI_MSG_UPDATE_RES, &r);
		return;
	}
	struct upd u = { 0 };
	u.op = (int)m->op;
	u.sync = (dg_write_sync)m->sync;
	u.hash = dgi_key_hash(m->key.ptr, m->key.len);
	u.part = (uint32_t)m->part;
	u.topver = m->topver;
	u.key = m->key.ptr;
	u.klen = m->key.len;
	u.val = m->val.ptr;
	u.vlen = m->val.len;
	u.op_node = (uint64_t)m->op_node;
	u.op_seq = (uint64_t)m->op_seq;
	u.fut = (uint64_t)m->fut;
	if (dgi_part_of(u.hash, c->cfg.partitions) != u.part) {
		r.res = DG_ERR_INVAL;
		dg_tp_reply(g->tp, in, DGI_MSG_UPDATE_RES, &r);
		return;
	}
	dg_buf old;
	dg_buf_init(&old);
	u.old = u.op == OP_GET_AND_PUT ? &old : NULL;
	if (u.op != OP_REMOVE && u.val == NULL)
		r.res = DG_ERR_INVAL;
	else
		r.res = dgi_primary_apply(g, c, &u);
	r.flag = u.flag;
	r.nbackups = u.nbackups;
	for (uint32_t i = 0; i < u.nbackups; i++)
		r.backups[i] = (int64_t)u.backups[i];
	if (u.had)
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
	if (c != NULL && wants_worker(c))
		to_worker(g, in);
	else
		handle_update(g, in, m);
}

dg_err dgi_apply_copy(dgi_grid *g, dg_cache *c, uint32_t part, uint64_t hash,
    const uint8_t *key, uint32_t klen, const uint8_t *val, uint32_t vlen,
    const dgi_pver *ver, int64_t expire_ms, uint64_t op_node, uint64_t op_seq)
{
	dgi_part *pt = &c->parts[part];
	dg_err e = DG_OK;
	pthread_mutex_lock(&pt->mu);
	dgi_entry *cur = dgi_part_find(pt, hash, key, klen);
	if (cur != NULL && dgi_pver_cmp(ver, &cur->ver) <= 0)
		goto out; /* ours is as new or newer */
	if (val == NULL && expire_ms == 0)
		expire_ms = dgi_wall_ms() + DGI_TOMB_TTL_MS; /* a sender without one */
	if (c->cfg.persistence &&
	    (e = dgi_grid_persist(g, c, part, key, klen, val, vlen, ver, expire_ms,
	    val == NULL)) != DG_OK)
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
	pthread_mutex_unlock(&pt->mu);
	return e;
}

static void backup_acked(dgi_grid *g, uint64_t fut, int64_t res, dg_node_id from);

static void handle_backup(dgi_grid *g, const dg_msg_in *in, const dgi_msg_backup *m)
{
	dg_cache *c = dgi_grid_cache(g, (uint32_t)m->cache_id);
	dg_err e = DG_ERR_NOT_FOUND;
	if (c != NULL && m->part >= 0 && (uint64_t)m->part < c->cfg.partitions &&
	    m->key.ptr != NULL && m->key.len > 0) {
		uint32_t part = (uint32_t)m->part;
		uint64_t hash = dgi_key_hash(m->key.ptr, m->key.len);
		dgi_pver ver = { m->ver_topver, (uint64_t)m->ver_counter, (uint32_t)m->ver_order, 0 };
		e = DG_OK;
		if (dgi_part_of(hash, c->cfg.partitions) != part)
			e = DG_ERR_INVAL;
		else if (atomic_load(&c->parts[part].state) != P_NONE)
			e = dgi_apply_copy(g, c, part, hash, m->key.ptr, m->key.len, m->val.ptr,
			    m->val.len, &ver, m->expire_ms, (uint64_t)m->op_node, (uint64_t)m->op_seq);
		/* Sent under an older topology: owners that joined since were
		 * not among its targets.  Forward to them (versions make the
		 * duplicates harmless). */
		dgi_aff *aff = atomic_load(&c->aff);
		if (e == DG_OK && aff != NULL && m->topver < aff->topver) {
			dgi_msg_backup fw = *m;
			fw.fut = 0;
			fw.topver = aff->topver;
			for (uint32_t i = 0; i < aff->copies; i++) {
				dg_node_id o = dgi_aff_owner(aff, part, i);
				if (o != 0 && o != g->self && o != in->from)
					dg_tp_send(g->tp, o, DGI_MSG_BACKUP, &fw);
			}
		}
	}
	if (m->fut != 0 && (dg_node_id)m->op_node == g->self) {
		backup_acked(g, (uint64_t)m->fut, e, g->self); /* the originator is a backup */
	} else if (m->fut != 0) {
		dgi_msg_backup_ack ack = { m->fut, e };
		dg_tp_send(g->tp, (dg_node_id)m->op_node, DGI_MSG_BACKUP_ACK, &ack);
	}
}

static void on_backup(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	dgi_grid *g = ctx;
	const dgi_msg_backup *m = in->body;
	(void)tp;
	dg_cache *c = dgi_grid_cache(g, (uint32_t)m->cache_id);
	if (c != NULL && wants_worker(c))
		to_worker(g, in);
	else
		handle_backup(g, in, m);
}

static void backup_acked(dgi_grid *g, uint64_t fut, int64_t res, dg_node_id from)
{
	struct fut_stripe *s = dgi_fut_stripe(g, fut);
	pthread_mutex_lock(&s->mu);
	struct fut *f = dgi_fut_find(s, fut);
	if (f != NULL) {
		if (res != DG_OK && res != DG_ERR_NOT_FOUND)
			f->err = (dg_err)res;
		dgi_fut_ack(f, from);
		dgi_fut_check(s, f);
	}
	pthread_mutex_unlock(&s->mu);
}

static void on_backup_ack(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	const dgi_msg_backup_ack *m = in->body;
	(void)tp;
	backup_acked(ctx, (uint64_t)m->fut, m->res, in->from);
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
}

void dgi_primary_register(dgi_grid *g)
{
	dg_tp_handle(g->tp, DGI_MSG_UPDATE, on_update, g);
	dg_tp_handle(g->tp, DGI_MSG_BACKUP, on_backup, g);
	dg_tp_handle(g->tp, DGI_MSG_BACKUP_ACK, on_backup_ack, g);
}
