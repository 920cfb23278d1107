/*
 * many.c — the primary's and the backups' side of the batch messages
 * (batch.c has the originator's): UPDATE_ALL, BACKUP_ALL and their
 * answers (PROTOCOL.md, types 87-90).
 *
 * An UPDATE_ALL carries a batch's keys of one primary.  Each item is
 * applied as the UPDATE it stands for (dgi_primary_apply: its update id,
 * the checks, FULL_SYNC's pending write); a FULL_SYNC item's answer waits
 * on its pending write, whose waiter points at the request's record
 * (struct dgi_uall), and the last item answered sends UPDATE_ALL_RES.
 * While the items are applied, the copies for the backups are gathered
 * (pending.c, dgi_copies_begin) and go out as one BACKUP_ALL per backup
 * once no partition is locked.  A backup applies each copy as a BACKUP
 * (dgi_backup_apply) and answers all of them in one BACKUP_ALL_ACK.
 * Records and answer buffers are reused: a steady state allocates nothing.
 * Persistent caches run both on the worker pool, as UPDATE and BACKUP do.
 */
#include "cache_int.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- answer buffers (cache_int.h, dgi_reply_buf) ---- */

static pthread_key_t rb_key;
static pthread_once_t rb_once = PTHREAD_ONCE_INIT;

static void rb_free(void *p)
{
	if (p != NULL) {
		dg_buf_free(p);
		dgi_free(p);
	}
}

static void rb_init(void)
{
	pthread_key_create(&rb_key, rb_free);
}

dg_buf *dgi_reply_buf(void)
{
	pthread_once(&rb_once, rb_init);
	dg_buf *b = pthread_getspecific(rb_key);
	if (b == NULL && (b = dgi_alloc(sizeof(*b))) != NULL) {
		dg_buf_init(b);
		if (pthread_setspecific(rb_key, b) != 0) {
			dgi_free(b);
			return NULL;
		}
	}
	if (b != NULL)
		b->len = 0;
	return b;
}

void dgi_reply_buf_done(dg_buf *b)
{
	if (b->cap > BSCRATCH_KEEP)
		dg_buf_free(b);
}

/* ---- UPDATE_ALL ---- */

static void uall_reply(dgi_grid *g, struct dgi_uall *u)
{
	dg_buf *b = dgi_reply_buf();
	dg_err e = b != NULL ? DG_OK : DG_ERR_NOMEM;
	if (e == DG_OK) {
		dg_writer w;
		dg_writer_init(&w, g->reg, b);
		dg_write_list_begin(&w, u->n * 3);
		for (uint32_t i = 0; i < u->n; i++)
			dgi_ures_item_put(&w, &u->res[i]);
		dg_write_end(&w);
		if ((e = dg_writer_finish(&w)) == DG_OK) {
			dgi_msg_many r = { u->cache_id, 0, 0, 0, 0, { b->data, (uint32_t)b->len } };
			dg_tp_reply(g->tp, &u->in, DGI_MSG_UPDATE_ALL_RES, &r);
		}
		dgi_reply_buf_done(b);
	}
	if (e != DG_OK)
		dg_tp_reply_error(g->tp, &u->in, e);
}

#define UALL_FREE_MAX 16         /* answered UPDATE_ALLs kept per grid */
#define UALL_MIN_CAP 128

/* A record for n items: a kept one with room, else allocated. */
static struct dgi_uall *uall_get(dgi_grid *g, uint32_t n)
{
	pthread_mutex_lock(&g->umu);
	struct dgi_uall **pp = &g->ufree, *u;
	while ((u = *pp) != NULL && u->cap < n)
		pp = &u->next;
	if (u != NULL) {
		*pp = u->next;
		g->nufree--;
	}
	pthread_mutex_unlock(&g->umu);
	if (u == NULL) {
		uint32_t cap = n < UALL_MIN_CAP ? UALL_MIN_CAP : n;
		if ((u = dgi_alloc(sizeof(*u) + cap * sizeof(u->res[0]))) == NULL)
			return NULL;
		u->cap = cap;
	}
	return u;
}

static void uall_put(dgi_grid *g, struct dgi_uall *u)
{
	pthread_mutex_lock(&g->umu);
	if (g->nufree < UALL_FREE_MAX) {
		u->next = g->ufree;
		g->ufree = u;
		g->nufree++;
		u = NULL;
	}
	pthread_mutex_unlock(&g->umu);
	dgi_free(u);
}

void dgi_uall_free_all(dgi_grid *g)
{
	while (g->ufree != NULL) {
		struct dgi_uall *u = g->ufree;
		g->ufree = u->next;
		dgi_free(u);
	}
	g->nufree = 0;
}

void dgi_uall_done(dgi_grid *g, struct dgi_uall *u, uint32_t gi, dg_err err, int64_t flag,
    bool applied)
{
	if (gi < u->n)
		u->res[gi] = (struct dgi_ures_item){ err, flag, applied };
	/* (acq_rel: the last one reads every slot the others wrote) */
	if (atomic_fetch_sub_explicit(&u->left, 1, memory_order_acq_rel) == 1) {
		uall_reply(g, u);
		uall_put(g, u);
	}
}

/* One UPDATE_ALL item, as handle_update does one UPDATE: answered now
 * (slot i of u), or parked on its pending write. */
static void uall_one(dgi_grid *g, dg_cache *c, const dgi_msg_many *m,
    const struct dgi_uall_item *it, struct dgi_uall *u, uint32_t i)
{
	/* (the item as the UPDATE it stands for: the op is PUT or REMOVE) */
	dgi_msg_update one = { m->cache_id, it->part, m->topver, m->op, m->sync, m->op_node,
		it->op_seq, 0, it->key, it->val, { NULL, 0 } };
	struct upd x;
	if (dgi_upd_received(c, &x, &one) != DG_OK) {
		dgi_uall_done(g, u, i, DG_ERR_INVAL, 0, false);
		return;
	}
	dg_err err = dgi_primary_apply(g, c, &x);
	if (x.pw != NULL) {
		struct pw_wait *pwx = dgi_pw_remote_waiter(x.pw, PWW_WRITE);
		if (pwx != NULL) {
			pwx->group = u;
			pwx->gi = i;
			pwx->flag = x.flag;
			dgi_pw_attach(x.pw, pwx);
			dgi_part_unlock(&c->parts[x.part]);
			return;
		}
		dgi_part_unlock(&c->parts[x.part]);
		err = DG_ERR_TIMEOUT; /* no memory to wait with: applied, unconfirmed */
		x.applied = true;
	}
	dgi_uall_done(g, u, i, err, x.flag, err != DG_OK && x.applied);
}

/* UPDATE_ALL: every item applied as its own UPDATE would be (its update
 * id, the primary's checks, FULL_SYNC's wait for every backup), the
 * copies gathered per backup into one BACKUP_ALL each; answered once,
 * when the last item is. */
static void handle_update_all(dgi_grid *g, const dg_msg_in *in, const dgi_msg_many *m)
{
	dg_reader r;
	uint32_t n = 0;
	dg_err e = dgi_many_open(g->reg, m, 4, &r, &n);
	if (e == DG_OK && ((m->op != OP_PUT && m->op != OP_REMOVE) || m->sync < DG_FULL_SYNC ||
	    m->sync > DG_FULL_ASYNC))
		e = DG_ERR_INVAL;
	struct dgi_uall *u = NULL;
	if (e == DG_OK && (u = uall_get(g, n)) == NULL)
		e = DG_ERR_NOMEM;
	if (e != DG_OK) {
		dg_tp_reply_error(g->tp, in, e);
		return;
	}
	atomic_init(&u->left, n + 1);
	u->n = n;
	u->cache_id = m->cache_id;
	u->in = *in;
	u->in.body = NULL;
	dg_cache *c = dgi_grid_cache(g, (uint32_t)m->cache_id);
	if (c != NULL)
		dgi_copies_begin(g, c);
	uint32_t i = 0;
	for (; i < n; i++) {
		struct dgi_uall_item it;
		if (dgi_uall_item_get(&r, &it) != DG_OK)
			break;
		if (c == NULL) /* (as handle_update: not learnt yet, the sender retries) */
			dgi_uall_done(g, u, i, DG_ERR_NOT_READY, 0, false);
		else
			uall_one(g, c, m, &it, u, i);
	}
	for (; i < n; i++) /* items that did not decode */
		dgi_uall_done(g, u, i, DG_ERR_INVAL, 0, false);
	if (c != NULL)
		dgi_copies_end(g);
	dgi_uall_done(g, u, UINT32_MAX, DG_OK, 0, false); /* the handler's own count */
}



/* ---- BACKUP_ALL ---- */

/* BACKUP_ALL_ACK to the sender of m: one answer per copy, each as
 * handle_backup would give it (apply: false, every one is err). */
static void backup_all(dgi_grid *g, const dg_msg_in *in, const dgi_msg_many *m, bool apply,
    dg_err err)
{
	dg_reader r;
	uint32_t n = 0;
	dg_buf *out = dgi_reply_buf();
	if (out == NULL || dgi_many_open(g->reg, m, DGI_BALL_ITEM_VALUES, &r, &n) != DG_OK)
		return; /* unanswered: the primary's records time out and send again */
	dg_cache *c = apply ? dgi_grid_cache(g, (uint32_t)m->cache_id) : NULL;
	dg_writer w;
	dg_writer_init(&w, g->reg, out);
	dg_write_list_begin(&w, n * 3);
	bool bad = false;
	for (uint32_t i = 0; i < n; i++) {
		dgi_msg_backup b;
		struct dgi_back_item a = { 0, 0, DG_ERR_INVAL };
		if (!bad && dgi_ball_item_get(&r, m->cache_id, &b) == DG_OK) {
			a.part = b.part;
			a.pw = b.pw;
			if (!apply)
				a.res = err;
			else /* a node that has not learnt the cache yet holds nothing of it */
				a.res = c != NULL ? dgi_backup_apply(g, c, &b, in->from) : DG_ERR_NOT_READY;
		} else {
			bad = true;
		}
		dgi_back_item_put(&w, &a);
	}
	dg_write_end(&w);
	if (dg_writer_finish(&w) == DG_OK) {
		dgi_msg_many ack = { m->cache_id, 0, 0, 0, 0, { out->data, (uint32_t)out->len } };
		dg_tp_send(g->tp, in->from, DGI_MSG_BACKUP_ALL_ACK, &ack);
	}
	dgi_reply_buf_done(out);
}

void dgi_backup_all_refuse(dgi_grid *g, const dg_msg_in *in, const dgi_msg_many *m, dg_err err)
{
	backup_all(g, in, m, false, err);
}

static void handle_backup_all(dgi_grid *g, const dg_msg_in *in, const dgi_msg_many *m)
{
	if (atomic_load_explicit(&dgi_test_drop_backups_at, memory_order_relaxed) == g->self)
		return;
	backup_all(g, in, m, true, DG_OK);
}


static void on_backup_all_ack(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	dgi_grid *g = ctx;
	const dgi_msg_many *m = in->body;
	(void)tp;
	dg_cache *c = dgi_grid_cache(g, (uint32_t)m->cache_id);
	dg_reader r;
	uint32_t n = 0;
	if (c == NULL || dgi_many_open(g->reg, m, 3, &r, &n) != DG_OK)
		return;
	for (uint32_t i = 0; i < n; i++) {
		struct dgi_back_item a;
		if (dgi_back_item_get(&r, &a) != DG_OK)
			return;
		if (a.part >= 0 && (uint64_t)a.part < c->cfg.partitions && a.pw != 0)
			dgi_pw_ack(g, c, (uint32_t)a.part, (uint64_t)a.pw, in->from, (dg_err)a.res);
	}
}

void dgi_many_run(dgi_grid *g, const dg_msg_in *in, dg_msg_type type, const void *body)
{
	if (type == DGI_MSG_UPDATE_ALL)
		handle_update_all(g, in, body);
	else if (type == DGI_MSG_BACKUP_ALL)
		handle_backup_all(g, in, body);
}

/* UPDATE_ALL, BACKUP_ALL: here, or on the worker pool (a persistent cache). */
static void on_many(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	dgi_grid *g = ctx;
	const dgi_msg_many *m = in->body;
	(void)tp;
	dg_cache *c = dgi_grid_cache(g, (uint32_t)m->cache_id);
	if (c != NULL && dgi_wants_worker(c))
		dgi_to_worker(g, in);
	else
		dgi_many_run(g, in, in->type, m);
}

void dgi_many_register(dgi_grid *g)
{
	dg_tp_handle(g->tp, DGI_MSG_UPDATE_ALL, on_many, g);
	dg_tp_handle(g->tp, DGI_MSG_BACKUP_ALL, on_many, g);
	dg_tp_handle(g->tp, DGI_MSG_BACKUP_ALL_ACK, on_backup_all_ack, g);
}
