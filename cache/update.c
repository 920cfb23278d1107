/*
 * update.c — the originator's side of the ATOMIC update protocol.
 *
 * Update (PROTOCOL.md, "Cache messages"):
 *   originator --UPDATE--> primary: checks it owns the partition under the
 *     sender's topology version (else REMAP), assigns the entry version
 *     (topology version, partition counter, its node order), persists (for
 *     persistent caches, before anything else), applies, and — under the
 *     partition lock, so every backup sees one key's updates in the order
 *     the primary applied them — sends BACKUP to every other owner
 *     (primary.c);
 *   primary --UPDATE_RES--> originator: the result and the backups named;
 *   backups --BACKUP_ACK--> originator (FULL_SYNC only): straight back, so a
 *     FULL_SYNC write costs three one-way hops, not four.
 * FULL_SYNC returns when the primary and every named backup answered;
 * PRIMARY_SYNC when the primary did; FULL_ASYNC after sending.  A local
 * primary is the same without the first and second hops.  Retries after a
 * topology change (REMAP, a primary that left) carry the same update id
 * (originator, sequence): an entry remembers the id of the last update
 * applied to it, so a retry is applied once.
 */
#include "cache_int.h"
#include "marshal/marshal_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- update ids ----
 * (originator node, sequence), unique per node: the sequence is a thread's
 * slot (taken once from a shared counter) in the top 24 bits and its own
 * counter below, so an update costs no shared atomic. */
static _Atomic uint64_t thread_slots = 1;
static _Thread_local uint64_t tl_seq_base, tl_seq;

static uint64_t next_op_seq(void)
{
	if (tl_seq_base == 0 || tl_seq == (1ull << 40) - 1) {
		tl_seq_base = atomic_fetch_add(&thread_slots, 1) << 40;
		tl_seq = 0;
	}
	return tl_seq_base | ++tl_seq;
}

/* ---- the originator ---- */

static void on_update_res(void *ctx, dg_err err, const dg_msg_in *reply);

dg_err dgi_wait_topology_change(dgi_grid *g, int64_t seen, uint64_t deadline)
{
	/* a remap: the topology this node maps on is behind or ahead of the
	 * primary's; either side catches up within a heartbeat or two */
	while (atomic_load(&g->topver) == seen) {
		if (dgi_now_ms() >= deadline)
			return DG_ERR_TIMEOUT;
		struct timespec ts = { 0, 5 * 1000000L };
		nanosleep(&ts, NULL);
		break; /* retry even without a change: the primary may have caught up */
	}
	return DG_OK;
}

bool dgi_retriable(dg_err e)
{
	return e == DG_ERR_REMAP || e == DG_ERR_NOT_READY || e == DG_ERR_CONN_BROKEN ||
	    e == DG_ERR_UNREACHABLE || e == DG_ERR_CLOSED;
}

/* Records an operation begun at t0 (dgi_now_ns) and passes its result
 * on.  A call rejected for its arguments is no operation. */
dg_err dgi_timed(dg_cache *c, dg_cache_op_kind kind, uint64_t t0, dg_err e)
{
	if (c != NULL && e != DG_ERR_INVAL)
		dgi_lat_add(&c->lat[kind], dgi_now_ns() - t0);
	return e;
}

/* An update, untimed (timed: update below; batches time the whole call). */
dg_err dgi_update_op(dg_cache *c, int op, const uint8_t *key, size_t klen,
    const uint8_t *exp, size_t elen, const uint8_t *val, size_t vlen, int64_t *flag,
    dg_buf *old)
{
	if (c == NULL || key == NULL || klen == 0 || klen > DG_KEY_MAX || vlen > DG_VALUE_MAX ||
	    elen > DG_VALUE_MAX)
		return DG_ERR_INVAL;
	dgi_grid *g = c->g;
	if (atomic_load_explicit(&c->dead, memory_order_relaxed))
		return DG_ERR_CLOSED;
	if (c->cfg.persistence && klen > DG_PERSIST_KEY_MAX)
		return DG_ERR_INVAL;
	if (c->cfg.atomicity == DG_TRANSACTIONAL && g->tx_hook != NULL)
		return g->tx_hook(g->tx_hook_ctx, c, op, key, klen, exp, elen, val, vlen, old, false,
		    flag);
	struct upd u = { 0 };
	u.op = op;
	u.sync = c->cfg.write_sync;
	u.hash = dgi_key_hash(key, klen);
	u.part = dgi_part_of(u.hash, c->cfg.partitions);
	u.key = key;
	u.klen = (uint32_t)klen;
	u.val = val;
	u.vlen = (uint32_t)vlen;
	u.exp = exp;
	u.elen = (uint32_t)elen;
	u.op_node = g->self;
	u.op_seq = next_op_seq();
	if (op == OP_REMOVE || op == OP_REMOVE_IF_EQ)
		atomic_fetch_add_explicit(&c->removes, 1, memory_order_relaxed);
	else
		atomic_fetch_add_explicit(&c->puts, 1, memory_order_relaxed);
	uint64_t deadline = 0; /* taken when first needed: a local update needs none */
	size_t old_len0 = old != NULL ? old->len : 0;
	for (;;) {
		dg_err e;
		dgi_aff *aff = atomic_load_explicit(&c->aff, memory_order_acquire);
		if (atomic_load_explicit(&c->dead, memory_order_relaxed))
			return DG_ERR_CLOSED;
		if (atomic_load_explicit(&c->lost[u.part], memory_order_relaxed))
			return DG_ERR_PARTITION_LOST;
		dg_node_id primary = aff != NULL ? dgi_aff_owner(aff, u.part, 0) : 0;
		int64_t seen = atomic_load(&g->topver);
		if (old != NULL)
			old->len = old_len0;
		if (primary == 0) {
			e = DG_ERR_NOT_READY; /* no server node (yet) */
		} else if (primary == g->self) {
			u.topver = aff->topver;
			struct fut f;
			bool acks = u.sync == DG_FULL_SYNC && aff->copies > 1;
			if (acks && deadline == 0)
				deadline = dgi_now_ms() + g->cfg.request_timeout_ms;
			if (acks) {
				dgi_fut_init(g, &f, NULL);
				u.fut = f.id;
				f.primary_done = false;
				dgi_fut_add(g, &f);
			}
			u.old = old;
			e = dgi_primary_apply(g, c, &u);
			if (acks) {
				struct fut_stripe *s = dgi_fut_stripe(g, f.id);
				pthread_mutex_lock(&s->mu);
				if (e != DG_OK && !f.done)
					f.err = e;
				dgi_fut_expect(&f, u.backups, u.nbackups);
				dgi_fut_check(s, &f);
				pthread_mutex_unlock(&s->mu);
				dg_err we = dgi_fut_wait(g, &f, deadline);
				if (e == DG_OK)
					e = we;
			}
		} else {
			u.topver = aff->topver;
			if (deadline == 0)
				deadline = dgi_now_ms() + g->cfg.request_timeout_ms;
			dgi_msg_update m = { c->id, u.part, u.topver, op, u.sync, (int64_t)u.op_node,
				(int64_t)u.op_seq, 0, { key, (uint32_t)klen }, { val, (uint32_t)vlen },
				{ exp, (uint32_t)elen } };
			if (u.sync == DG_FULL_ASYNC) {
				e = dg_tp_send(g->tp, primary, DGI_MSG_UPDATE, &m);
				if (e == DG_OK)
					return DG_OK;
			} else {
				struct fut f;
				dgi_fut_init(g, &f, old);
				f.want_acks = u.sync == DG_FULL_SYNC;
				m.fut = (int64_t)f.id;
				dgi_fut_add(g, &f);
				uint64_t now = dgi_now_ms();
				uint32_t left = now < deadline ? (uint32_t)(deadline - now) : 1;
				e = dg_tp_request(g->tp, primary, DGI_MSG_UPDATE, &m, left, on_update_res,
				    (void *)(uintptr_t)f.id);
				if (e != DG_OK) {
					struct fut_stripe *s = dgi_fut_stripe(g, f.id);
					pthread_mutex_lock(&s->mu);
					dgi_fut_unlink(s, &f);
					pthread_mutex_unlock(&s->mu);
					sem_destroy(&f.sem);
				} else {
					e = dgi_fut_wait(g, &f, deadline);
				}
				if (e == DG_OK && flag != NULL)
					*flag = f.flag;
			}
		}
		if (e == DG_OK) {
			if (flag != NULL && primary == g->self)
				*flag = u.flag;
			return DG_OK;
		}
		if (!dgi_retriable(e) || (e == DG_ERR_CLOSED && atomic_load(&c->dead)))
			return e;
		atomic_fetch_add_explicit(&c->remaps, 1, memory_order_relaxed);
		if (deadline == 0)
			deadline = dgi_now_ms() + g->cfg.request_timeout_ms;
		if (dgi_wait_topology_change(g, seen, deadline) != DG_OK)
			return DG_ERR_TIMEOUT;
	}
}

/* An update started by a single-key call on this node, timed. */
dg_err dgi_update(dg_cache *c, int op, const uint8_t *key, size_t klen,
    const uint8_t *exp, size_t elen, const uint8_t *val, size_t vlen, int64_t *flag,
    dg_buf *old)
{
	uint64_t t0 = dgi_now_ns();
	bool rm = op == OP_REMOVE || op == OP_REMOVE_IF_EQ;
	return dgi_timed(c, rm ? DG_OP_REMOVE : DG_OP_PUT, t0,
	    dgi_update_op(c, op, key, klen, exp, elen, val, vlen, flag, old));
}

static void on_update_res(void *ctx, dg_err err, const dg_msg_in *reply)
{
	uint64_t id = (uint64_t)(uintptr_t)ctx;
	dgi_grid *g = dgi_fut_grid(id);
	if (g == NULL)
		return;
	struct fut_stripe *s = dgi_fut_stripe(g, id);
	pthread_mutex_lock(&s->mu);
	struct fut *f = dgi_fut_find(s, id);
	if (f != NULL) {
		const dgi_msg_update_res *r = err == DG_OK ? reply->body : NULL;
		if (err != DG_OK) {
			f->err = err;
		} else if (r->res != DG_OK) {
			f->err = (dg_err)r->res;
		} else {
			dg_node_id ids[DGI_MAX_COPIES];
			uint32_t n = r->nbackups < 0 || r->nbackups > DGI_MAX_COPIES - 1 ?
			    0 : (uint32_t)r->nbackups;
			for (uint32_t k = 0; k < n; k++)
				ids[k] = (dg_node_id)r->backups[k];
			f->flag = r->flag;
			if (f->old != NULL && r->old.ptr != NULL &&
			    dgi_append(f->old, r->old.ptr, r->old.len) != DG_OK)
				f->err = DG_ERR_NOMEM;
			dgi_fut_expect(f, ids, f->want_acks ? n : 0);
		}
		dgi_fut_check(s, f);
	}
	pthread_mutex_unlock(&s->mu);
}

void dgi_ops_register(dgi_grid *g)
{
	dgi_fut_grid_register(g);
	dgi_primary_register(g);
	dgi_read_register(g);
}

void dgi_ops_unregister(dgi_grid *g)
{
	dgi_fut_grid_unregister(g);
}
