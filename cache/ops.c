/*
 * ops.c — cache operations and the ATOMIC update protocol.
 *
 * Update (PROTOCOL.md, "Cache messages"):
 *   originator --UPDATE--> primary: checks it owns the partition under the
 *     sender's topology version (else REMAP), assigns the entry version
 *     (topology version, partition counter, its node order), persists (for
 *     persistent caches, before anything else), applies, and — under the
 *     partition lock, so every backup sees one key's updates in the order
 *     the primary applied them — sends BACKUP to every other owner;
 *   primary --UPDATE_RES--> originator: the result and the backups named;
 *   backups --BACKUP_ACK--> originator (FULL_SYNC only): straight back, so a
 *     FULL_SYNC write costs three one-way hops, not four.
 * FULL_SYNC returns when the primary and every named backup answered;
 * PRIMARY_SYNC when the primary did; FULL_ASYNC after sending.  A local
 * primary is the same without the first and second hops.  Retries after a
 * topology change (REMAP, a primary that left) carry the same update id
 * (originator, sequence): an entry remembers the id of the last update
 * applied to it, so a retry is applied once.
 *
 * Reads go to the primary, or stay local when this node owns a copy and
 * read_from_backup allows.  A MOVING owner answers what it holds and asks
 * its supplier for the rest.
 */
#include "cache_int.h"
#include "marshal/marshal_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KEY_STACK 256
#define VAL_STACK 1024

/* ---- encoding raw byte strings as BYTES values ---- */

static size_t bytes_enc_len(size_t n)
{
	return 1 + dgi_uvarint_len(n) + n;
}

static void bytes_enc(uint8_t *out, const void *p, size_t n)
{
	*out++ = TAG_BYTES;
	out = dgi_put_uvarint(out, n);
	memcpy(out, p, n);
}

dg_err dg_bytes_of(const uint8_t *enc, size_t len, const uint8_t **p, size_t *n)
{
	if (enc == NULL || len < 2 || enc[0] != TAG_BYTES)
		return DG_ERR_TYPE_MISMATCH;
	const uint8_t *q = enc + 1;
	uint64_t l;
	dg_err e = dgi_get_uvarint(&q, enc + len, &l);
	if (e != DG_OK)
		return e;
	if (l != (uint64_t)(enc + len - q))
		return DG_ERR_BAD_LENGTH;
	*p = q;
	*n = (size_t)l;
	return DG_OK;
}

/* A BYTES encoding of p/n in stack memory when it fits, else in a
 * per-thread buffer reused by later calls. */
static _Thread_local dg_buf tl_bufs[2];

static const uint8_t *enc_in(int which, uint8_t *stack, size_t cap, const void *p,
    size_t n, size_t *len)
{
	size_t need = bytes_enc_len(n);
	uint8_t *out = stack;
	if (need > cap) {
		dg_buf *b = &tl_bufs[which];
		b->len = 0;
		if (dg_buf_reserve(b, need) != DG_OK)
			return NULL;
		out = b->data;
	}
	bytes_enc(out, p, n);
	*len = need;
	return out;
}

/* Appends the byte string inside an encoded BYTES value to out. */
static dg_err unwrap_to(const uint8_t *enc, size_t len, dg_buf *out)
{
	const uint8_t *p;
	size_t n;
	dg_err e = dg_bytes_of(enc, len, &p, &n);
	if (e != DG_OK || out == NULL)
		return e;
	if ((e = dg_buf_reserve(out, n)) != DG_OK)
		return e;
	memcpy(out->data + out->len, p, n);
	out->len += n;
	return DG_OK;
}

static dg_err append(dg_buf *out, const uint8_t *p, size_t n)
{
	if (out == NULL)
		return DG_OK;
	dg_err e = dg_buf_reserve(out, n);
	if (e != DG_OK)
		return e;
	memcpy(out->data + out->len, p, n);
	out->len += n;
	return DG_OK;
}

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

/* ---- futures ---- */

static struct fut_stripe *stripe_of(dgi_grid *g, uint64_t id)
{
	return &g->futs[id % FUT_STRIPES];
}

static void fut_init(dgi_grid *g, struct fut *f, dg_buf *old)
{
	memset(f, 0, sizeof(*f));
	f->id = atomic_fetch_add_explicit(&g->next_fut, 1, memory_order_relaxed);
	f->old = old;
	sem_init(&f->sem, 0, 0);
}

static void fut_add(dgi_grid *g, struct fut *f)
{
	struct fut_stripe *s = stripe_of(g, f->id);
	pthread_mutex_lock(&s->mu);
	f->next = s->head;
	s->head = f;
	pthread_mutex_unlock(&s->mu);
}

/* Unlinks f if still linked (stripe locked). */
static void fut_unlink(struct fut_stripe *s, struct fut *f)
{
	for (struct fut **pp = &s->head; *pp != NULL; pp = &(*pp)->next)
		if (*pp == f) {
			*pp = f->next;
			return;
		}
}

static struct fut *fut_find(struct fut_stripe *s, uint64_t id)
{
	for (struct fut *f = s->head; f != NULL; f = f->next)
		if (f->id == id)
			return f;
	return NULL;
}

/* Completes f if everything it waits for arrived (stripe locked). */
static void fut_check(struct fut_stripe *s, struct fut *f)
{
	if (f->done)
		return;
	bool all = f->err != DG_OK;
	if (!all && f->primary_done) {
		all = true;
		for (uint32_t i = 0; i < f->nexpect; i++)
			all &= f->acked[i];
	}
	if (all) {
		f->done = true;
		fut_unlink(s, f);
		sem_post(&f->sem); /* the last touch: the owner may return now */
	}
}

static void fut_ack(struct fut *f, dg_node_id from)
{
	for (uint32_t i = 0; i < f->nexpect; i++)
		if (f->expect[i] == from) {
			f->acked[i] = true;
			return;
		}
	if (!f->primary_done && f->nearly < DGI_MAX_COPIES)
		f->early[f->nearly++] = from;
}

/* The primary named its backups (stripe locked). */
static void fut_expect(struct fut *f, const dg_node_id *ids, uint32_t n)
{
	f->nexpect = n;
	for (uint32_t i = 0; i < n; i++) {
		f->expect[i] = ids[i];
		f->acked[i] = false;
		for (uint32_t k = 0; k < f->nearly; k++)
			if (f->early[k] == ids[i])
				f->acked[i] = true;
	}
	f->primary_done = true;
}

/* Waits until deadline (monotonic ms); unlinks on timeout. */
static dg_err fut_wait(dgi_grid *g, struct fut *f, uint64_t deadline)
{
	for (;;) {
		uint64_t now = dgi_now_ms();
		if (now >= deadline)
			break;
		struct timespec ts;
		dgi_abstime_in(&ts, deadline - now);
		if (sem_timedwait(&f->sem, &ts) == 0) {
			sem_destroy(&f->sem);
			return f->err;
		}
		if (errno != EINTR && errno != ETIMEDOUT)
			break;
	}
	struct fut_stripe *s = stripe_of(g, f->id);
	pthread_mutex_lock(&s->mu);
	bool done = f->done;
	if (!done)
		fut_unlink(s, f);
	pthread_mutex_unlock(&s->mu);
	if (done) {
		sem_wait(&f->sem); /* posted: consume it */
		sem_destroy(&f->sem);
		return f->err;
	}
	sem_destroy(&f->sem);
	return DG_ERR_TIMEOUT;
}

void dgi_futs_forget(dgi_grid *g, const dg_topology *now)
{
	for (int i = 0; i < FUT_STRIPES; i++) {
		struct fut_stripe *s = &g->futs[i];
		pthread_mutex_lock(&s->mu);
		for (struct fut *f = s->head, *next; f != NULL; f = next) {
			next = f->next;
			for (uint32_t k = 0; k < f->nexpect; k++)
				if (dg_topology_find(now, f->expect[k]) == NULL)
					f->acked[k] = true; /* it left: nothing to wait for */
			fut_check(s, f);
		}
		pthread_mutex_unlock(&s->mu);
	}
}

/* ---- the primary ---- */

struct upd {
	int op;
	dg_write_sync sync;
	uint64_t hash;
	uint32_t part;
	int64_t topver;              /* the sender's */
	const uint8_t *key;
	uint32_t klen;
	const uint8_t *val;
	uint32_t vlen;
	uint64_t op_node, op_seq;
	uint64_t fut;                /* at op_node; 0: no acks */
	/* results */
	int64_t flag;
	dg_buf *old;                 /* the previous value (encoded), or NULL */
	bool had;
	uint32_t nbackups;
	dg_node_id backups[DGI_MAX_COPIES];
};

static bool live(const dgi_entry *e, int64_t wall)
{
	return e != NULL && !(e->flags & DGI_ENTRY_TOMB) &&
	    (e->expire_ms == 0 || e->expire_ms > wall);
}

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
static dg_err write_new_version(dgi_grid *g, dg_cache *c, uint32_t part, dgi_entry *e,
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
static dg_err primary_apply(dgi_grid *g, dg_cache *c, struct upd *u)
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
	bool present = live(e, wall);
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
			    (err = append(u->old, dgi_entry_val(e), e->vlen)) != DG_OK)
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
	} else if ((err = write_new_version(g, c, u->part, e, aff->topver, u->hash, u->key,
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

/* ---- the originator ---- */

static void on_update_res(void *ctx, dg_err err, const dg_msg_in *reply);

struct grid_fut_ctx {
	dgi_grid *g;
	uint64_t id;
};

static dg_err wait_topology_change(dgi_grid *g, int64_t seen, uint64_t deadline)
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

static bool retriable(dg_err e)
{
	return e == DG_ERR_REMAP || e == DG_ERR_NOT_READY || e == DG_ERR_CONN_BROKEN ||
	    e == DG_ERR_UNREACHABLE || e == DG_ERR_CLOSED;
}

/* Records an operation begun at t0 (dgi_now_ns) and passes its result
 * on.  A call rejected for its arguments is no operation. */
static dg_err timed(dg_cache *c, dg_cache_op_kind kind, uint64_t t0, dg_err e)
{
	if (c != NULL && e != DG_ERR_INVAL)
		dgi_lat_add(&c->lat[kind], dgi_now_ns() - t0);
	return e;
}

/* An update, untimed (timed: update below; batches time the whole call). */
static dg_err update_op(dg_cache *c, int op, const uint8_t *key, size_t klen,
    const uint8_t *val, size_t vlen, int64_t *flag, dg_buf *old)
{
	if (c == NULL || key == NULL || klen == 0 || klen > DG_KEY_MAX || vlen > DG_VALUE_MAX)
		return DG_ERR_INVAL;
	dgi_grid *g = c->g;
	if (atomic_load_explicit(&c->dead, memory_order_relaxed))
		return DG_ERR_CLOSED;
	if (c->cfg.persistence && klen > DG_PERSIST_KEY_MAX)
		return DG_ERR_INVAL;
	if (c->cfg.atomicity == DG_TRANSACTIONAL && g->tx_hook != NULL)
		return g->tx_hook(g->tx_hook_ctx, c, op, key, klen, val, vlen, old, false, flag);
	struct upd u = { 0 };
	u.op = op;
	u.sync = c->cfg.write_sync;
	u.hash = dgi_key_hash(key, klen);
	u.part = dgi_part_of(u.hash, c->cfg.partitions);
	u.key = key;
	u.klen = (uint32_t)klen;
	u.val = val;
	u.vlen = (uint32_t)vlen;
	u.op_node = g->self;
	u.op_seq = next_op_seq();
	if (op == OP_REMOVE)
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
				fut_init(g, &f, NULL);
				u.fut = f.id;
				f.primary_done = false;
				fut_add(g, &f);
			}
			u.old = old;
			e = primary_apply(g, c, &u);
			if (acks) {
				struct fut_stripe *s = stripe_of(g, f.id);
				pthread_mutex_lock(&s->mu);
				if (e != DG_OK && !f.done)
					f.err = e;
				fut_expect(&f, u.backups, u.nbackups);
				fut_check(s, &f);
				pthread_mutex_unlock(&s->mu);
				dg_err we = fut_wait(g, &f, deadline);
				if (e == DG_OK)
					e = we;
			}
		} else {
			u.topver = aff->topver;
			if (deadline == 0)
				deadline = dgi_now_ms() + g->cfg.request_timeout_ms;
			dgi_msg_update m = { c->id, u.part, u.topver, op, u.sync, (int64_t)u.op_node,
				(int64_t)u.op_seq, 0, { key, (uint32_t)klen }, { val, (uint32_t)vlen } };
			if (u.sync == DG_FULL_ASYNC) {
				e = dg_tp_send(g->tp, primary, DGI_MSG_UPDATE, &m);
				if (e == DG_OK)
					return DG_OK;
			} else {
				struct fut f;
				fut_init(g, &f, old);
				f.want_acks = u.sync == DG_FULL_SYNC;
				m.fut = (int64_t)f.id;
				fut_add(g, &f);
				uint64_t now = dgi_now_ms();
				uint32_t left = now < deadline ? (uint32_t)(deadline - now) : 1;
				e = dg_tp_request(g->tp, primary, DGI_MSG_UPDATE, &m, left, on_update_res,
				    (void *)(uintptr_t)f.id);
				if (e != DG_OK) {
					struct fut_stripe *s = stripe_of(g, f.id);
					pthread_mutex_lock(&s->mu);
					fut_unlink(s, &f);
					pthread_mutex_unlock(&s->mu);
					sem_destroy(&f.sem);
				} else {
					e = fut_wait(g, &f, deadline);
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
		if (!retriable(e) || (e == DG_ERR_CLOSED && atomic_load(&c->dead)))
			return e;
		atomic_fetch_add_explicit(&c->remaps, 1, memory_order_relaxed);
		if (deadline == 0)
			deadline = dgi_now_ms() + g->cfg.request_timeout_ms;
		if (wait_topology_change(g, seen, deadline) != DG_OK)
			return DG_ERR_TIMEOUT;
	}
}

/* An update started by a single-key call on this node, timed. */
static dg_err update(dg_cache *c, int op, const uint8_t *key, size_t klen,
    const uint8_t *val, size_t vlen, int64_t *flag, dg_buf *old)
{
	uint64_t t0 = dgi_now_ns();
	return timed(c, op == OP_REMOVE ? DG_OP_REMOVE : DG_OP_PUT, t0,
	    update_op(c, op, key, klen, val, vlen, flag, old));
}

/* The grid whose future an UPDATE_RES completes: the callback's context is
 * the future id alone (the caller may have timed out and gone), and a
 * future id carries its grid's slot in this table in its top byte. */
#define MAX_GRIDS 255
static dgi_grid *_Atomic grids[MAX_GRIDS + 1];

static void on_update_res(void *ctx, dg_err err, const dg_msg_in *reply)
{
	uint64_t id = (uint64_t)(uintptr_t)ctx;
	dgi_grid *g = atomic_load(&grids[id >> 56]);
	if (g == NULL)
		return;
	struct fut_stripe *s = stripe_of(g, id);
	pthread_mutex_lock(&s->mu);
	struct fut *f = fut_find(s, id);
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
			    append(f->old, r->old.ptr, r->old.len) != DG_OK)
				f->err = DG_ERR_NOMEM;
			fut_expect(f, ids, f->want_acks ? n : 0);
		}
		fut_check(s, f);
	}
	pthread_mutex_unlock(&s->mu);
}

/* ---- handlers ---- */

static bool wants_worker(const dg_cache *c)
{
	return c->cfg.persistence;
}

/* Hands a request to the worker pool (persistent caches: LMDB waits). */
static void to_worker(dgi_grid *g, const dg_msg_in *in)
{
	struct job *j = dgi_alloc(sizeof(*j) + in->raw_len);
	if (j == NULL) {
		dg_tp_reply_error(g->tp, in, DG_ERR_NOMEM);
		return;
	}
	j->next = NULL;
	j->type = in->type;
	j->in = *in;
	j->in.body = NULL;
	j->raw = (uint8_t *)(j + 1);
	memcpy(j->raw, in->raw, in->raw_len);
	j->raw_len = in->raw_len;
	j->in.raw = j->raw;
	pthread_mutex_lock(&g->jmu);
	if (g->jtail != NULL)
		g->jtail->next = j;
	else
		g->jhead = j;
	g->jtail = j;
	pthread_cond_signal(&g->jcv);
	pthread_mutex_unlock(&g->jmu);
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
		r.res = primary_apply(g, c, &u);
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
	struct fut_stripe *s = stripe_of(g, fut);
	pthread_mutex_lock(&s->mu);
	struct fut *f = fut_find(s, fut);
	if (f != NULL) {
		if (res != DG_OK && res != DG_ERR_NOT_FOUND)
			f->err = (dg_err)res;
		fut_ack(f, from);
		fut_check(s, f);
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

/* ---- reads ---- */

/* Appends a stored value to out: whole, or (unwrap) the byte string inside
 * its BYTES encoding — what the raw API returns, copied once. */
static dg_err put_value(dg_buf *out, const uint8_t *v, uint32_t n, bool unwrap)
{
	if (out == NULL)
		return DG_OK;
	return unwrap ? unwrap_to(v, n, out) : append(out, v, n);
}



struct get_wait {
	sem_t sem;
	dg_err err;
	bool found;
	dg_buf *out;
	bool unwrap;
};

static void on_get_res(void *ctx, dg_err err, const dg_msg_in *reply)
{
	struct get_wait *w = ctx;
	if (err == DG_OK) {
		const dgi_msg_get_res *r = reply->body;
		w->found = r->found != 0;
		if (w->found && r->val.ptr != NULL)
			err = put_value(w->out, r->val.ptr, r->val.len, w->unwrap);
	}
	w->err = err;
	sem_post(&w->sem);
}

static dg_err remote_get(dgi_grid *g, dg_node_id to, const dgi_msg_get *m, dg_buf *out,
    uint64_t deadline, bool unwrap)
{
	struct get_wait w = { .err = DG_OK, .found = false, .out = out, .unwrap = unwrap };
	uint64_t now = dgi_now_ms();
	if (now >= deadline)
		return DG_ERR_TIMEOUT;
	sem_init(&w.sem, 0, 0);
	dg_err e = dg_tp_request(g->tp, to, DGI_MSG_GET, m, (uint32_t)(deadline - now),
	    on_get_res, &w);
	if (e == DG_OK) {
		while (sem_wait(&w.sem) != 0)
			;
		e = w.err;
	}
	sem_destroy(&w.sem);
	if (e == DG_OK && !w.found)
		e = DG_ERR_NOT_FOUND;
	return e;
}

/* Local read of an owned copy.  DG_ERR_NOT_READY: MOVING and not held. */
static dg_err local_get(dg_cache *c, uint32_t part, uint64_t hash, const uint8_t *key,
    uint32_t klen, dg_buf *out, bool supplier, bool unwrap)
{
	dgi_part *pt = &c->parts[part];
	dg_err e;
	pthread_mutex_lock(&pt->mu);
	int st = atomic_load_explicit(&pt->state, memory_order_relaxed);
	if (st == P_LOST && !supplier) {
		e = DG_ERR_PARTITION_LOST;
	} else if (st == P_NONE && !supplier) {
		e = DG_ERR_REMAP;
	} else {
		dgi_entry *en = dgi_part_find(pt, hash, key, klen);
		int64_t wall = c->cfg.ttl_ms ? dgi_wall_ms() : 0;
		if (st == P_MOVING && !supplier && (en == NULL || en->ver.topver < pt->moving_topver))
			e = DG_ERR_NOT_READY; /* the supplier has it, or a newer copy of it */
		else if (live(en, wall))
			e = put_value(out, dgi_entry_val(en), en->vlen, unwrap);
		else
			e = DG_ERR_NOT_FOUND;
	}
	pthread_mutex_unlock(&pt->mu);
	return e;
}

/* Reads the encoded value of key into out (unwrap: the bytes inside a BYTES
 * value), untimed.  DG_ERR_NOT_FOUND. */
static dg_err get_op(dg_cache *c, const uint8_t *key, size_t klen, dg_buf *out, bool unwrap)
{
	if (c == NULL || key == NULL || klen == 0 || klen > DG_KEY_MAX)
		return DG_ERR_INVAL;
	dgi_grid *g = c->g;
	if (c->cfg.atomicity == DG_TRANSACTIONAL && g->tx_hook != NULL) {
		dg_err te = g->tx_hook(g->tx_hook_ctx, c, DGI_CACHE_OP_GET, key, klen, NULL, 0, out,
		    unwrap, NULL);
		if (te != DG_ERR__COUNT)
			return te; /* read inside the thread's tx */
	}
	uint64_t hash = dgi_key_hash(key, klen);
	uint32_t part = dgi_part_of(hash, c->cfg.partitions);
	uint64_t deadline = 0;
	size_t len0 = out != NULL ? out->len : 0;
	for (;;) {
		if (atomic_load_explicit(&c->dead, memory_order_relaxed))
			return DG_ERR_CLOSED;
		if (atomic_load_explicit(&c->lost[part], memory_order_relaxed))
			return DG_ERR_PARTITION_LOST;
		dgi_aff *aff = atomic_load_explicit(&c->aff, memory_order_acquire);
		int64_t seen = atomic_load(&g->topver);
		dg_err e = DG_ERR_NOT_READY;
		if (out != NULL)
			out->len = len0;
		if (aff != NULL) {
			int role = dgi_aff_role(aff, part, g->self);
			dg_node_id primary = dgi_aff_owner(aff, part, 0);
			e = DG_ERR_REMAP;
			if (role == 0 || (role > 0 && c->cfg.read_from_backup))
				e = local_get(c, part, hash, key, (uint32_t)klen, out, false, unwrap);
			if (e == DG_ERR_NOT_READY) {
				/* MOVING: the supplier has what this copy lacks */
				dgi_part *pt = &c->parts[part];
				pthread_mutex_lock(&pt->mu);
				dg_node_id sup = pt->supplier;
				pthread_mutex_unlock(&pt->mu);
				if (deadline == 0)
					deadline = dgi_now_ms() + g->cfg.request_timeout_ms;
				dgi_msg_get m = { c->id, part, aff->topver, DGI_GET_SUPPLIER,
					{ key, (uint32_t)klen } };
				e = sup != 0 ? remote_get(g, sup, &m, out, deadline, unwrap) :
				    DG_ERR_NOT_READY;
			} else if (e == DG_ERR_REMAP && primary != 0 && primary != g->self) {
				if (deadline == 0)
					deadline = dgi_now_ms() + g->cfg.request_timeout_ms;
				dgi_msg_get m = { c->id, part, aff->topver, 0, { key, (uint32_t)klen } };
				e = remote_get(g, primary, &m, out, deadline, unwrap);
			}
		}
		if (e == DG_OK) {
			atomic_fetch_add_explicit(&c->hits, 1, memory_order_relaxed);
			return DG_OK;
		}
		if (e == DG_ERR_NOT_FOUND) {
			atomic_fetch_add_explicit(&c->misses, 1, memory_order_relaxed);
			return e;
		}
		if (!retriable(e) && e != DG_ERR_TIMEOUT)
			return e;
		if (deadline == 0)
			deadline = dgi_now_ms() + g->cfg.request_timeout_ms;
		if (e == DG_ERR_TIMEOUT || dgi_now_ms() >= deadline)
			return DG_ERR_TIMEOUT;
		atomic_fetch_add_explicit(&c->remaps, 1, memory_order_relaxed);
		if (wait_topology_change(g, seen, deadline) != DG_OK)
			return DG_ERR_TIMEOUT;
	}
}

/* A read started by a single-key call on this node, timed. */
static dg_err get_enc(dg_cache *c, const uint8_t *key, size_t klen, dg_buf *out, bool unwrap)
{
	uint64_t t0 = dgi_now_ns();
	return timed(c, DG_OP_GET, t0, get_op(c, key, klen, out, unwrap));
}

/* A GET forwarded by a MOVING primary to its supplier: the answer goes
 * back to the original requester. */
struct fwd {
	dgi_grid *g;
	dg_msg_in in;
};

static void on_fwd_res(void *ctx, dg_err err, const dg_msg_in *reply)
{
	struct fwd *f = ctx;
	if (err == DG_OK)
		dg_tp_reply(f->g->tp, &f->in, DGI_MSG_GET_RES, reply->body);
	else
		dg_tp_reply_error(f->g->tp, &f->in, err == DG_ERR_NOT_FOUND ? err : DG_ERR_NOT_READY);
	dgi_free(f);
}

static void on_get(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	dgi_grid *g = ctx;
	const dgi_msg_get *m = in->body;
	dg_cache *c = dgi_grid_cache(g, (uint32_t)m->cache_id);
	if (c == NULL || m->key.ptr == NULL || m->key.len == 0 || m->part < 0 ||
	    (uint64_t)m->part >= c->cfg.partitions) {
		/* an unknown cache: this node joined and has not learnt it yet
		 * (not "no such key"): the reader retries */
		dg_tp_reply_error(tp, in, c == NULL ? DG_ERR_NOT_READY : DG_ERR_INVAL);
		return;
	}
	uint32_t part = (uint32_t)m->part;
	uint64_t hash = dgi_key_hash(m->key.ptr, m->key.len);
	dgi_part *pt = &c->parts[part];
	dgi_msg_get_res r = { 0, { NULL, 0 } };
	dg_err e;
	bool supplier = (m->flags & DGI_GET_SUPPLIER) != 0;
	pthread_mutex_lock(&pt->mu);
	int st = atomic_load(&pt->state);
	dg_node_id sup = pt->supplier;
	if (st == P_LOST && !supplier) {
		e = DG_ERR_PARTITION_LOST;
	} else if (st == P_NONE && !supplier) {
		e = DG_ERR_REMAP;
	} else {
		dgi_entry *en = dgi_part_find(pt, hash, m->key.ptr, m->key.len);
		int64_t wall = c->cfg.ttl_ms ? dgi_wall_ms() : 0;
		e = DG_OK;
		if (live(en, wall)) {
			r.found = 1;
			r.val = (dg_bytes){ dgi_entry_val(en), en->vlen };
		} else if (en == NULL && st == P_MOVING && !supplier) {
			e = DG_ERR_NOT_READY;
		}
	}
	if (e == DG_OK)
		dg_tp_reply(tp, in, DGI_MSG_GET_RES, &r); /* encoded under the lock: r views the entry */
	pthread_mutex_unlock(&pt->mu);
	if (e == DG_ERR_NOT_READY && sup != 0) {
		struct fwd *f = dgi_alloc(sizeof(*f));
		dgi_msg_get fm = *m;
		fm.flags = DGI_GET_SUPPLIER;
		if (f != NULL) {
			f->g = g;
			f->in = *in;
			f->in.body = NULL;
			if (dg_tp_request(tp, sup, DGI_MSG_GET, &fm, g->cfg.request_timeout_ms,
			    on_fwd_res, f) == DG_OK)
				return;
			dgi_free(f);
		}
	}
	if (e != DG_OK)
		dg_tp_reply_error(tp, in, e);
}

void dgi_ops_register(dgi_grid *g)
{
	for (int i = 1; i <= MAX_GRIDS; i++) {
		dgi_grid *expect = NULL;
		if (atomic_compare_exchange_strong(&grids[i], &expect, g)) {
			g->slot = i;
			break;
		}
	}
	atomic_store(&g->next_fut, ((uint64_t)g->slot << 56) | 1);
	dg_tp_handle(g->tp, DGI_MSG_UPDATE, on_update, g);
	dg_tp_handle(g->tp, DGI_MSG_BACKUP, on_backup, g);
	dg_tp_handle(g->tp, DGI_MSG_BACKUP_ACK, on_backup_ack, g);
	dg_tp_handle(g->tp, DGI_MSG_GET, on_get, g);
}

void dgi_ops_unregister(dgi_grid *g)
{
	if (g->slot > 0)
		atomic_store(&grids[g->slot], NULL);
}

/* ---- the public operations ---- */

#define ENC_KEY(key, klen)                                                     \
	uint8_t kst[KEY_STACK];                                                \
	size_t kenc_len;                                                       \
	if (key == NULL || klen == 0 || klen > DG_KEY_MAX - 8)                 \
		return DG_ERR_INVAL;                                           \
	const uint8_t *kenc = enc_in(0, kst, sizeof(kst), key, klen, &kenc_len); \
	if (kenc == NULL)                                                      \
		return DG_ERR_NOMEM

#define ENC_VAL(val, vlen)                                                     \
	uint8_t vst[VAL_STACK];                                                \
	size_t venc_len;                                                       \
	if ((val == NULL && vlen != 0) || vlen > DG_VALUE_MAX - 8)             \
		return DG_ERR_INVAL;                                           \
	const uint8_t *venc = enc_in(1, vst, sizeof(vst), val ? val : (const void *)"", \
	    vlen, &venc_len);                                                  \
	if (venc == NULL)                                                      \
		return DG_ERR_NOMEM

dg_err dg_cache_put(dg_cache *c, const void *key, size_t klen, const void *val, size_t vlen)
{
	ENC_KEY(key, klen);
	ENC_VAL(val, vlen);
	return update(c, OP_PUT, kenc, kenc_len, venc, venc_len, NULL, NULL);
}

dg_err dg_cache_put_if_absent(dg_cache *c, const void *key, size_t klen, const void *val,
    size_t vlen, bool *put)
{
	ENC_KEY(key, klen);
	ENC_VAL(val, vlen);
	int64_t flag = 0;
	dg_err e = update(c, OP_PUT_IF_ABSENT, kenc, kenc_len, venc, venc_len, &flag, NULL);
	if (put != NULL)
		*put = e == DG_OK && flag;
	return e;
}

dg_err dg_cache_replace(dg_cache *c, const void *key, size_t klen, const void *val,
    size_t vlen, bool *replaced)
{
	ENC_KEY(key, klen);
	ENC_VAL(val, vlen);
	int64_t flag = 0;
	dg_err e = update(c, OP_REPLACE, kenc, kenc_len, venc, venc_len, &flag, NULL);
	if (replaced != NULL)
		*replaced = e == DG_OK && flag;
	return e;
}

dg_err dg_cache_get_and_put(dg_cache *c, const void *key, size_t klen, const void *val,
    size_t vlen, dg_buf *old, bool *had)
{
	ENC_KEY(key, klen);
	ENC_VAL(val, vlen);
	int64_t flag = 0;
	dg_buf tmp;
	dg_buf_init(&tmp);
	dg_err e = update(c, OP_GET_AND_PUT, kenc, kenc_len, venc, venc_len, &flag, &tmp);
	if (had != NULL)
		*had = e == DG_OK && flag;
	if (e == DG_OK && flag && old != NULL)
		e = unwrap_to(tmp.data, tmp.len, old);
	dg_buf_free(&tmp);
	return e;
}

dg_err dg_cache_remove(dg_cache *c, const void *key, size_t klen, bool *removed)
{
	ENC_KEY(key, klen);
	int64_t flag = 0;
	dg_err e = update(c, OP_REMOVE, kenc, kenc_len, NULL, 0, &flag, NULL);
	if (removed != NULL)
		*removed = e == DG_OK && flag;
	return e;
}

dg_err dg_cache_get(dg_cache *c, const void *key, size_t klen, dg_buf *val)
{
	ENC_KEY(key, klen);
	if (val == NULL)
		return DG_ERR_INVAL;
	return get_enc(c, kenc, kenc_len, val, true);
}

dg_err dg_cache_contains(dg_cache *c, const void *key, size_t klen, bool *present)
{
	ENC_KEY(key, klen);
	if (present == NULL)
		return DG_ERR_INVAL;
	dg_err e = get_enc(c, kenc, kenc_len, NULL, false);
	*present = e == DG_OK;
	return e == DG_ERR_NOT_FOUND ? DG_OK : e;
}

/* ---- typed ---- */

static dg_err check_val(const uint8_t *p, size_t n, size_t max)
{
	return p == NULL || n == 0 || n > max ? DG_ERR_INVAL : DG_OK;
}

dg_err dg_cache_put_val(dg_cache *c, const uint8_t *key, size_t klen, const uint8_t *val,
    size_t vlen)
{
	if (check_val(key, klen, DG_KEY_MAX) != DG_OK || check_val(val, vlen, DG_VALUE_MAX) != DG_OK)
		return DG_ERR_INVAL;
	return update(c, OP_PUT, key, klen, val, vlen, NULL, NULL);
}

dg_err dg_cache_get_val(dg_cache *c, const uint8_t *key, size_t klen, dg_buf *val)
{
	if (check_val(key, klen, DG_KEY_MAX) != DG_OK || val == NULL)
		return DG_ERR_INVAL;
	return get_enc(c, key, klen, val, false);
}

dg_err dg_cache_remove_val(dg_cache *c, const uint8_t *key, size_t klen, bool *removed)
{
	if (check_val(key, klen, DG_KEY_MAX) != DG_OK)
		return DG_ERR_INVAL;
	int64_t flag = 0;
	dg_err e = update(c, OP_REMOVE, key, klen, NULL, 0, &flag, NULL);
	if (removed != NULL)
		*removed = e == DG_OK && flag;
	return e;
}

dg_err dg_cache_put_if_absent_val(dg_cache *c, const uint8_t *key, size_t klen,
    const uint8_t *val, size_t vlen, bool *put)
{
	if (check_val(key, klen, DG_KEY_MAX) != DG_OK || check_val(val, vlen, DG_VALUE_MAX) != DG_OK)
		return DG_ERR_INVAL;
	int64_t flag = 0;
	dg_err e = update(c, OP_PUT_IF_ABSENT, key, klen, val, vlen, &flag, NULL);
	if (put != NULL)
		*put = e == DG_OK && flag;
	return e;
}

dg_err dg_cache_replace_val(dg_cache *c, const uint8_t *key, size_t klen,
    const uint8_t *val, size_t vlen, bool *replaced)
{
	if (check_val(key, klen, DG_KEY_MAX) != DG_OK || check_val(val, vlen, DG_VALUE_MAX) != DG_OK)
		return DG_ERR_INVAL;
	int64_t flag = 0;
	dg_err e = update(c, OP_REPLACE, key, klen, val, vlen, &flag, NULL);
	if (replaced != NULL)
		*replaced = e == DG_OK && flag;
	return e;
}

dg_err dg_cache_get_and_put_val(dg_cache *c, const uint8_t *key, size_t klen,
    const uint8_t *val, size_t vlen, dg_buf *old, bool *had)
{
	if (check_val(key, klen, DG_KEY_MAX) != DG_OK || check_val(val, vlen, DG_VALUE_MAX) != DG_OK)
		return DG_ERR_INVAL;
	int64_t flag = 0;
	size_t len0 = old != NULL ? old->len : 0;
	dg_buf tmp;
	dg_buf_init(&tmp);
	dg_err e = update(c, OP_GET_AND_PUT, key, klen, val, vlen, &flag, old != NULL ? old : &tmp);
	if (old != NULL && (e != DG_OK || !flag))
		old->len = len0;
	dg_buf_free(&tmp);
	if (had != NULL)
		*had = e == DG_OK && flag;
	return e;
}

dg_err dg_cache_contains_val(dg_cache *c, const uint8_t *key, size_t klen, bool *present)
{
	if (check_val(key, klen, DG_KEY_MAX) != DG_OK || present == NULL)
		return DG_ERR_INVAL;
	dg_err e = get_enc(c, key, klen, NULL, false);
	*present = e == DG_OK;
	return e == DG_ERR_NOT_FOUND ? DG_OK : e;
}

/* ---- batches: one operation per key, through the raw or encoded flavour ---- */

typedef dg_err (*put_one_fn)(dg_cache *c, const void *key, size_t klen, const void *val,
    size_t vlen);
typedef dg_err (*get_one_fn)(dg_cache *c, const void *key, size_t klen, dg_buf *val);
typedef dg_err (*remove_one_fn)(dg_cache *c, const void *key, size_t klen, bool *removed);

static dg_err put_all_with(dg_cache *c, const dg_kv *kvs, size_t n, put_one_fn one)
{
	if (kvs == NULL && n != 0)
		return DG_ERR_INVAL;
	for (size_t i = 0; i < n; i++) {
		dg_err e = one(c, kvs[i].key, kvs[i].klen, kvs[i].val, kvs[i].vlen);
		if (e != DG_OK)
			return e;
	}
	return DG_OK;
}

static dg_err get_all_with(dg_cache *c, dg_kv *kvs, size_t n, dg_buf *vals, size_t *found,
    get_one_fn one)
{
	if ((kvs == NULL && n != 0) || vals == NULL)
		return DG_ERR_INVAL;
	size_t f = 0;
	size_t *offs = n ? dgi_alloc(n * sizeof(*offs)) : NULL;
	if (n && offs == NULL)
		return DG_ERR_NOMEM;
	for (size_t i = 0; i < n; i++) {
		size_t at = vals->len;
		dg_err e = one(c, kvs[i].key, kvs[i].klen, vals);
		if (e != DG_OK && e != DG_ERR_NOT_FOUND) {
			dgi_free(offs);
			return e;
		}
		offs[i] = e == DG_OK ? at : SIZE_MAX;
		kvs[i].vlen = e == DG_OK ? vals->len - at : 0;
		f += e == DG_OK;
	}
	/* pointers only now: vals may have moved while growing */
	for (size_t i = 0; i < n; i++)
		kvs[i].val = offs[i] == SIZE_MAX ? NULL : vals->data + offs[i];
	dgi_free(offs);
	if (found != NULL)
		*found = f;
	return DG_OK;
}

static dg_err remove_all_with(dg_cache *c, const dg_kv *kvs, size_t n, size_t *removed,
    remove_one_fn one)
{
	if (kvs == NULL && n != 0)
		return DG_ERR_INVAL;
	size_t r = 0;
	for (size_t i = 0; i < n; i++) {
		bool rm = false;
		dg_err e = one(c, kvs[i].key, kvs[i].klen, &rm);
		if (e != DG_OK)
			return e;
		r += rm;
	}
	if (removed != NULL)
		*removed = r;
	return DG_OK;
}

/* One key of a batch, as the single-key calls do it but untimed: a batch
 * is one operation (the encoded flavours with the raw flavour's signature). */
static dg_err put_raw_one(dg_cache *c, const void *key, size_t klen, const void *val,
    size_t vlen)
{
	ENC_KEY(key, klen);
	ENC_VAL(val, vlen);
	return update_op(c, OP_PUT, kenc, kenc_len, venc, venc_len, NULL, NULL);
}

static dg_err get_raw_one(dg_cache *c, const void *key, size_t klen, dg_buf *val)
{
	ENC_KEY(key, klen);
	return get_op(c, kenc, kenc_len, val, true);
}

static dg_err remove_raw_one(dg_cache *c, const void *key, size_t klen, bool *removed)
{
	ENC_KEY(key, klen);
	int64_t flag = 0;
	dg_err e = update_op(c, OP_REMOVE, kenc, kenc_len, NULL, 0, &flag, NULL);
	*removed = e == DG_OK && flag;
	return e;
}

static dg_err put_val_one(dg_cache *c, const void *key, size_t klen, const void *val,
    size_t vlen)
{
	if (check_val(key, klen, DG_KEY_MAX) != DG_OK || check_val(val, vlen, DG_VALUE_MAX) != DG_OK)
		return DG_ERR_INVAL;
	return update_op(c, OP_PUT, key, klen, val, vlen, NULL, NULL);
}

static dg_err get_val_one(dg_cache *c, const void *key, size_t klen, dg_buf *val)
{
	if (check_val(key, klen, DG_KEY_MAX) != DG_OK)
		return DG_ERR_INVAL;
	return get_op(c, key, klen, val, false);
}

static dg_err remove_val_one(dg_cache *c, const void *key, size_t klen, bool *removed)
{
	if (check_val(key, klen, DG_KEY_MAX) != DG_OK)
		return DG_ERR_INVAL;
	int64_t flag = 0;
	dg_err e = update_op(c, OP_REMOVE, key, klen, NULL, 0, &flag, NULL);
	*removed = e == DG_OK && flag;
	return e;
}

dg_err dg_cache_put_all(dg_cache *c, const dg_kv *kvs, size_t n)
{
	uint64_t t0 = dgi_now_ns();
	return timed(c, DG_OP_PUT, t0, put_all_with(c, kvs, n, put_raw_one));
}

dg_err dg_cache_get_all(dg_cache *c, dg_kv *kvs, size_t n, dg_buf *vals, size_t *found)
{
	uint64_t t0 = dgi_now_ns();
	return timed(c, DG_OP_GET, t0, get_all_with(c, kvs, n, vals, found, get_raw_one));
}

dg_err dg_cache_remove_all(dg_cache *c, const dg_kv *kvs, size_t n, size_t *removed)
{
	uint64_t t0 = dgi_now_ns();
	return timed(c, DG_OP_REMOVE, t0, remove_all_with(c, kvs, n, removed, remove_raw_one));
}

dg_err dg_cache_put_all_val(dg_cache *c, const dg_kv *kvs, size_t n)
{
	uint64_t t0 = dgi_now_ns();
	return timed(c, DG_OP_PUT, t0, put_all_with(c, kvs, n, put_val_one));
}

dg_err dg_cache_get_all_val(dg_cache *c, dg_kv *kvs, size_t n, dg_buf *vals, size_t *found)
{
	uint64_t t0 = dgi_now_ns();
	return timed(c, DG_OP_GET, t0, get_all_with(c, kvs, n, vals, found, get_val_one));
}

dg_err dg_cache_remove_all_val(dg_cache *c, const dg_kv *kvs, size_t n, size_t *removed)
{
	uint64_t t0 = dgi_now_ns();
	return timed(c, DG_OP_REMOVE, t0, remove_all_with(c, kvs, n, removed, remove_val_one));
}

/* Encodes one struct with its descriptor into b (reset first). */
static dg_err enc_obj(dgi_grid *g, const dg_desc *d, const void *obj, dg_buf *b)
{
	dg_writer w;
	b->len = 0;
	dg_writer_init(&w, g->reg, b);
	dg_write_object(&w, d, obj);
	return dg_writer_finish(&w);
}

dg_err dg_cache_put_obj(dg_cache *c, const dg_desc *kd, const void *key, const dg_desc *vd,
    const void *val)
{
	if (c == NULL || kd == NULL || key == NULL || vd == NULL || val == NULL)
		return DG_ERR_INVAL;
	uint8_t kst[KEY_STACK], vst[VAL_STACK];
	dg_buf kb, vb;
	dg_buf_init_fixed(&kb, kst, sizeof(kst));
	dg_buf_init_fixed(&vb, vst, sizeof(vst));
	dg_err e = enc_obj(c->g, kd, key, &kb);
	if (e == DG_ERR_NOSPACE) {
		dg_buf_init(&kb);
		e = enc_obj(c->g, kd, key, &kb);
	}
	if (e == DG_OK) {
		e = enc_obj(c->g, vd, val, &vb);
		if (e == DG_ERR_NOSPACE) {
			dg_buf_init(&vb);
			e = enc_obj(c->g, vd, val, &vb);
		}
	}
	if (e == DG_OK)
		e = dg_cache_put_val(c, kb.data, kb.len, vb.data, vb.len);
	if (kb.data != kst)
		dg_buf_free(&kb);
	if (vb.data != vst)
		dg_buf_free(&vb);
	return e;
}

dg_err dg_cache_get_obj(dg_cache *c, const dg_desc *kd, const void *key, const dg_desc *vd,
    void *val, dg_arena *arena)
{
	if (c == NULL || kd == NULL || key == NULL || vd == NULL || val == NULL)
		return DG_ERR_INVAL;
	uint8_t kst[KEY_STACK];
	dg_buf kb, vb;
	dg_buf_init_fixed(&kb, kst, sizeof(kst));
	dg_err e = enc_obj(c->g, kd, key, &kb);
	if (e == DG_ERR_NOSPACE) {
		dg_buf_init(&kb);
		e = enc_obj(c->g, kd, key, &kb);
	}
	dg_buf_init(&vb);
	if (e == DG_OK)
		e = get_enc(c, kb.data, kb.len, &vb, false);
	if (e == DG_OK)
		e = dg_decode_object(c->g->reg, vd, vb.data, vb.len, val, arena);
	if (kb.data != kst)
		dg_buf_free(&kb);
	dg_buf_free(&vb);
	return e;
}

/* ---- idle verify's test hook (cache.h, "idle verify") ---- */

dg_err dgi_cache_debug_put_local(dg_cache *c, const void *key, size_t klen, const void *val,
    size_t vlen)
{
	if (c == NULL)
		return DG_ERR_INVAL;
	ENC_KEY(key, klen);
	ENC_VAL(val, vlen);
	uint64_t hash = dgi_key_hash(kenc, kenc_len);
	dgi_part *pt = &c->parts[dgi_part_of(hash, c->cfg.partitions)];
	dg_err e = DG_OK;
	pthread_mutex_lock(&pt->mu);
	dgi_entry *en = dgi_part_find(pt, hash, kenc, (uint32_t)kenc_len);
	if (en == NULL || (en->flags & DGI_ENTRY_TOMB)) {
		e = DG_ERR_NOT_FOUND;
	} else {
		/* copies: the entry may be freed and replaced when val is bigger */
		dgi_pver ver = en->ver;
		int64_t expire = en->expire_ms;
		uint64_t op_node = en->op_node, op_seq = en->op_seq;
		if (!dgi_part_overwrite(pt, en, venc, (uint32_t)venc_len, &ver, expire, op_node,
		    op_seq))
			e = dgi_part_set(pt, hash, kenc, (uint32_t)kenc_len, venc, (uint32_t)venc_len,
			    &ver, expire, op_node, op_seq, 0, NULL);
	}
	pthread_mutex_unlock(&pt->mu);
	return e;
}

/* ---- what transactions use (cache.h, "what transactions (txn/) use") ---- */

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

uint32_t dgi_cache_id_of(const dg_cache *c)
{
	return c->id;
}

uint32_t dgi_cache_key_part(const dg_cache *c, const uint8_t *key, size_t klen,
    uint64_t *hash)
{
	*hash = dgi_key_hash(key, klen);
	return dgi_part_of(*hash, c->cfg.partitions);
}

uint32_t dgi_cache_owners(dg_cache *c, uint32_t part, uint64_t *out, int64_t *topver)
{
	dgi_aff *aff = atomic_load_explicit(&c->aff, memory_order_acquire);
	*topver = 0;
	if (aff == NULL || part >= aff->parts)
		return 0;
	*topver = aff->topver;
	uint32_t n = 0;
	for (uint32_t i = 0; i < aff->copies && n < DGI_MAX_COPIES; i++) {
		dg_node_id o = dgi_aff_owner(aff, part, i);
		if (o != 0)
			out[n++] = o;
	}
	return n;
}

dg_err dgi_cache_tx_read(dg_cache *c, int64_t topver, uint32_t part, uint64_t hash,
    const uint8_t *key, uint32_t klen, dg_buf *val, bool *found, dgi_pver *ver)
{
	dgi_grid *g = c->g;
	dgi_aff *aff = atomic_load_explicit(&c->aff, memory_order_acquire);
	*found = false;
	*ver = (dgi_pver){ 0, 0, 0, 0 };
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
	pthread_mutex_lock(&pt->mu);
	int st = atomic_load_explicit(&pt->state, memory_order_relaxed);
	dgi_entry *e = dgi_part_find(pt, hash, key, klen);
	if (st == P_LOST || atomic_load_explicit(&c->lost[part], memory_order_relaxed))
		err = DG_ERR_PARTITION_LOST;
	else if (st == P_NONE && !(any_role && e != NULL))
		err = any_role ? DG_ERR_NOT_READY : DG_ERR_REMAP;
	else if (st == P_MOVING && (e == NULL || e->ver.topver < pt->moving_topver))
		err = DG_ERR_NOT_READY; /* the supplier may hold it, or a newer copy:
		                           retry once it arrived */
	if (err == DG_OK && e != NULL) {
		*ver = e->ver;
		if (live(e, dgi_wall_ms())) {
			*found = true;
			err = append(val, dgi_entry_val(e), e->vlen);
		}
	}
	pthread_mutex_unlock(&pt->mu);
	return err;
}

dg_err dgi_cache_tx_write(dg_cache *c, uint32_t part, uint64_t hash, const uint8_t *key,
    uint32_t klen, const uint8_t *val, uint32_t vlen, uint64_t tx_node, uint64_t tx_seq,
    dgi_pver *ver, int64_t *expire_ms)
{
	dgi_grid *g = c->g;
	if (part >= c->cfg.partitions)
		return DG_ERR_INVAL;
	dgi_aff *aff = atomic_load_explicit(&c->aff, memory_order_acquire);
	int64_t topver = aff != NULL ? aff->topver : atomic_load(&g->topver);
	dgi_part *pt = &c->parts[part];
	pthread_mutex_lock(&pt->mu);
	dgi_entry *e = dgi_part_find(pt, hash, key, klen);
	dg_err err = DG_OK;
	if (e != NULL && e->op_node == tx_node && e->op_seq == tx_seq) {
		*ver = e->ver; /* this tx's write, applied already */
		*expire_ms = e->expire_ms;
	} else {
		err = write_new_version(g, c, part, e, topver, hash, key, klen, val, vlen, tx_node,
		    tx_seq, ver, expire_ms);
	}
	if (val != NULL)
		atomic_fetch_add_explicit(&c->puts, 1, memory_order_relaxed);
	else
		atomic_fetch_add_explicit(&c->removes, 1, memory_order_relaxed);
	pthread_mutex_unlock(&pt->mu);
	return err;
}

dg_err dgi_cache_tx_copy(dg_cache *c, uint32_t part, uint64_t hash, const uint8_t *key,
    uint32_t klen, const uint8_t *val, uint32_t vlen, const dgi_pver *ver,
    int64_t expire_ms, uint64_t tx_node, uint64_t tx_seq)
{
	if (part >= c->cfg.partitions)
		return DG_ERR_INVAL;
	return dgi_apply_copy(c->g, c, part, hash, key, klen, val, vlen, ver, expire_ms, tx_node,
	    tx_seq);
}
