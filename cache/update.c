/*
 * update.c — the originator's side of the ATOMIC update protocol.
 *
 * Update (PROTOCOL.md, "Cache messages", "The ATOMIC update"):
 *   originator --UPDATE--> primary: checks it owns the partition under the
 *     sender's topology version (else REMAP), recognises a retry by its
 *     update id, evaluates, assigns the entry version (topology version,
 *     partition counter, its node order), persists (persistent caches,
 *     before anything else), applies, and — under the partition lock, so
 *     every backup sees one key's updates in the order the primary applied
 *     them — sends BACKUP to every other owner (primary.c);
 *   backups --BACKUP_ACK--> primary (FULL_SYNC only);
 *   primary --UPDATE_RES--> originator: with FULL_SYNC once every backup
 *     applied the write (pending.c), so nobody — reader or writer — learns
 *     of a value before every owner holds it.
 * PRIMARY_SYNC returns once the primary applied; FULL_ASYNC after sending.
 * A local primary is the same without the first and last hops.
 *
 * Retries.  REMAP, NOT_READY, a broken connection or an unreachable
 * primary make the originator map the key again and retry with the same
 * update id (originator, sequence); the primary recognises an update it
 * (or, as a backup, the previous primary) applied and answers its first
 * flag.  Errors tell the truth: once an attempt may have been applied (a
 * broken connection, no answer, or the primary's "applied, not on every
 * backup"), the call ends DG_OK or DG_ERR_TIMEOUT — never an error that
 * says "not applied".
 */
#include "cache_int.h"
#include "marshal/marshal_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- update ids (cache_int.h, dgi_next_op_seq) ---- */
static _Atomic uint64_t thread_slots = 1;
DGI_TLS_IE _Thread_local struct dgi_op_seq_tl dgi_op_seq_tl;

uint64_t dgi_next_op_seq_slow(void)
{
	dgi_op_seq_tl.base = atomic_fetch_add(&thread_slots, 1) << 40;
	dgi_op_seq_tl.seq = 1;
	return dgi_op_seq_tl.base | 1;
}

/* ---- the originator ---- */

dg_err dgi_wait_topology_change(dgi_grid *g, int64_t seen, uint64_t deadline)
{
	/* a remap: the topology this node maps on is behind or ahead of the
	 * primary's; either side catches up within a heartbeat or two */
	dgi_lat_slow();
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

/* Records an operation begun at t0 (dgi_lat_ticks) and passes its result
 * on.  A call rejected for its arguments is no operation. */
dg_err dgi_timed(dg_cache *c, dg_cache_op_kind kind, uint64_t t0, dg_err e)
{
	if (c != NULL && e != DG_ERR_INVAL) {
		dgi_epoch_enter(); /* (the counter blocks' lifetime: counters.c) */
		dgi_lat_record(c, kind, dgi_lat_since(t0));
		dgi_epoch_leave();
	}
	return e;
}

/* A remote attempt: the caller waits for the reply callback, which the
 * transport runs exactly once (reply, DG_ERR_TIMEOUT, DG_ERR_CONN_BROKEN,
 * DG_ERR_CLOSED). */
struct upd_wait {
	sem_t sem;
	dg_err err;
	int64_t flag;
	bool applied;               /* may have been applied (see update.c) */
	dg_buf *old;
};

static void on_update_res(void *ctx, dg_err err, const dg_msg_in *reply)
{
	struct upd_wait *w = ctx;
	if (err == DG_OK) {
		const dgi_msg_update_res *r = reply->body;
		err = (dg_err)r->res;
		w->flag = r->flag;
		w->applied = r->applied != 0;
		if (err == DG_OK && w->old != NULL && r->old.ptr != NULL)
			err = dgi_append(w->old, r->old.ptr, r->old.len);
	} else if (err == DG_ERR_TIMEOUT || err == DG_ERR_CONN_BROKEN) {
		w->applied = true; /* it may have reached the primary */
	}
	w->err = err;
	sem_post(&w->sem);
}

/* One attempt on a remote primary. */
static dg_err remote_attempt(dgi_grid *g, dg_node_id primary, const dgi_msg_update *m,
    uint64_t deadline, dg_buf *old, int64_t *flag, bool *applied)
{
	dgi_lat_slow(); /* (always timed: cache_int.h) */
	if (m->sync == DG_FULL_ASYNC)
		return dg_tp_send(g->tp, primary, DGI_MSG_UPDATE, m);
	struct upd_wait w = { .err = DG_OK, .old = old };
	uint64_t now = dgi_now_ms();
	if (now >= deadline)
		return DG_ERR_TIMEOUT;
	sem_init(&w.sem, 0, 0);
	dg_err e = dg_tp_request(g->tp, primary, DGI_MSG_UPDATE, m, (uint32_t)(deadline - now),
	    on_update_res, &w);
	if (e == DG_OK) {
		dgi_sem_wait_spin(g->tp, &w.sem, false);
		e = w.err;
		*flag = w.flag;
		*applied = w.applied;
	}
	sem_destroy(&w.sem);
	return e;
}

/* *deadline, set first (request_timeout_ms from now) when 0: an update
 * that stays on this node's fast path never reads the clock for it. */
static uint64_t due(const dgi_grid *g, uint64_t *deadline)
{
	if (*deadline == 0)
		*deadline = dgi_coarse_ms() + g->cfg.request_timeout_ms;
	return *deadline;
}

/* One attempt with this node as the primary: FULL_SYNC waits here for the
 * pending write. */
static dg_err local_attempt(dgi_grid *g, dg_cache *c, struct upd *u, uint64_t *deadline,
    bool *applied)
{
	dg_err e = dgi_primary_apply(g, c, u);
	*applied = u->applied;
	if (e != DG_OK || u->pw == NULL)
		return e;
	dgi_lat_slow(); /* (waits for the backups) */
	struct pw_wait x;
	memset(&x, 0, sizeof(x));
	x.kind = PWW_WRITE;
	x.flag = u->flag;
	sem_init(&x.sem, 0, 0);
	dgi_pw_attach(u->pw, &x);
	e = dgi_pw_wait(g->tp, &c->parts[u->part], &x, due(g, deadline)); /* unlocks */
	sem_destroy(&x.sem);
	*applied = x.applied;
	return e;
}

static dg_err update_in_section(dg_cache *c, int op, const uint8_t *key, size_t klen,
    const uint8_t *exp, size_t elen, const uint8_t *val, size_t vlen, int64_t *flag,
    dg_buf *old);

/* An update, untimed (timed: dgi_update below; batches time the whole call),
 * inside a section (cache_int.h, "Lifetime"). */
dg_err dgi_update_op(dg_cache *c, int op, const uint8_t *key, size_t klen,
    const uint8_t *exp, size_t elen, const uint8_t *val, size_t vlen, int64_t *flag,
    dg_buf *old)
{
	dgi_epoch_enter();
	dg_err e = update_in_section(c, op, key, klen, exp, elen, val, vlen, flag, old);
	dgi_epoch_leave();
	return e;
}

static dg_err update_in_section(dg_cache *c, int op, const uint8_t *key, size_t klen,
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
	if (c->cfg.atomicity == DG_TRANSACTIONAL && g->tx_hook != NULL) {
		dgi_lat_slow();
		return g->tx_hook(g->tx_hook_ctx, c, op, key, klen, exp, elen, val, vlen, old, false,
		    flag);
	}
	struct upd u;
	dgi_upd_init(c, &u, op, key, klen, exp, elen, val, vlen);
	return dgi_update_run(c, &u, 0, false, flag, old); /* (0: set when first needed) */
}

void dgi_upd_init(dg_cache *c, struct upd *u, int op, const uint8_t *key, size_t klen,
    const uint8_t *exp, size_t elen, const uint8_t *val, size_t vlen)
{
	memset(u, 0, sizeof(*u));
	u->op = op;
	u->sync = c->cfg.write_sync;
	u->hash = dgi_key_hash(key, klen);
	u->part = dgi_part_of(u->hash, c->cfg.partitions);
	u->key = key;
	u->klen = (uint32_t)klen;
	u->val = val;
	u->vlen = (uint32_t)vlen;
	u->exp = exp;
	u->elen = (uint32_t)elen;
	u->op_node = c->g->self;
	u->op_seq = dgi_next_op_seq();
	u->fresh = true;
	if (op == OP_REMOVE || op == OP_REMOVE_IF_EQ)
		DGI_COUNT(c, removes, 1);
	else
		DGI_COUNT(c, puts, 1);
}

dgi_msg_update dgi_upd_msg(const dg_cache *c, const struct upd *u)
{
	dgi_msg_update m = { c->id, u->part, u->topver, u->op, u->sync, (int64_t)u->op_node,
		(int64_t)u->op_seq, 0, { u->key, u->klen }, { u->val, u->vlen },
		{ u->exp, u->elen } };
	return m;
}

dg_err dgi_update_run(dg_cache *c, struct upd *u, uint64_t deadline, bool maybe,
    int64_t *flag, dg_buf *old)
{
	dgi_grid *g = c->g;
	size_t old_len0 = old != NULL ? old->len : 0;
	/* maybe: an attempt may have been applied */
	for (;;) {
		dg_err e;
		bool applied = false;
		int64_t f = 0;
		dgi_aff *aff = atomic_load_explicit(&c->aff, memory_order_acquire);
		if (atomic_load_explicit(&c->dead, memory_order_relaxed))
			return maybe ? DG_ERR_TIMEOUT : DG_ERR_CLOSED;
		if (dg_member_segmented(g->m))
			return maybe ? DG_ERR_TIMEOUT : DG_ERR_SEGMENTED;
		if (atomic_load_explicit(&c->lost[u->part], memory_order_relaxed))
			return maybe ? DG_ERR_TIMEOUT : DG_ERR_PARTITION_LOST;
		dg_node_id primary = aff != NULL ? dgi_aff_owner(aff, u->part, 0) : 0;
		int64_t seen = atomic_load(&g->topver);
		if (old != NULL)
			old->len = old_len0;
		if (primary == 0) {
			e = DG_ERR_NOT_READY; /* no server node (yet) */
		} else if (primary == g->self) {
			u->topver = aff->topver;
			u->old = old;
			e = local_attempt(g, c, u, &deadline, &applied);
			f = u->flag;
		} else {
			u->topver = aff->topver;
			u->fresh = false;
			dgi_msg_update m = dgi_upd_msg(c, u);
			e = remote_attempt(g, primary, &m, due(g, &deadline), old, &f, &applied);
		}
		if (e == DG_OK) {
			if (flag != NULL)
				*flag = f;
			return DG_OK;
		}
		maybe |= applied;
		if (!dgi_retriable(e) || (e == DG_ERR_CLOSED && atomic_load(&c->dead)))
			return maybe ? DG_ERR_TIMEOUT : e;
		atomic_fetch_add_explicit(&c->remaps, 1, memory_order_relaxed);
		if (dgi_wait_topology_change(g, seen, due(g, &deadline)) != DG_OK)
			return DG_ERR_TIMEOUT;
	}
}

/* An update started by a single-key call on this node, timed. */
dg_err dgi_update(dg_cache *c, int op, const uint8_t *key, size_t klen,
    const uint8_t *exp, size_t elen, const uint8_t *val, size_t vlen, int64_t *flag,
    dg_buf *old)
{
	if (c == NULL)
		return DG_ERR_INVAL;
	bool rm = op == OP_REMOVE || op == OP_REMOVE_IF_EQ;
	dgi_epoch_enter();
	dgi_lat_op lop;
	dgi_lat_begin(c, rm ? DG_OP_REMOVE : DG_OP_PUT, &lop); /* (sampled: cache_int.h) */
	dg_err e = dgi_lat_end(c, &lop,
	    update_in_section(c, op, key, klen, exp, elen, val, vlen, flag, old));
	dgi_epoch_leave();
	return e;
}

void dgi_ops_register(dgi_grid *g)
{
	dgi_primary_register(g);
	dgi_read_register(g);
	dgi_psync_register(g);
}
