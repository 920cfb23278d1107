/*
 * txlock.c — TX_LOCK (a key's lock for a tx, and reads under it or
 * without one), its waiters and their answers; TX_LOCK_ALL (many keys of
 * this primary, each as its TX_LOCK, answered together); TX_UNLOCK and
 * TX_ROLLBACK (a tx's locks released here, its backups told).
 */
#include "txsvc_int.h"

/* ---- TX_LOCK ---- */

/* A waiter from the pool (a steady stream of lock requests allocates
 * nothing), its key copied. */
static struct waiter *waiter_get(dgi_txsvc *s, const uint8_t *key, uint32_t klen)
{
	pthread_mutex_lock(&s->mu);
	struct waiter *w = s->free_waiters;
	if (w != NULL) {
		s->free_waiters = w->next_free;
		s->nfree_waiters--;
	}
	pthread_mutex_unlock(&s->mu);
	if (w == NULL && (w = dgi_alloc(sizeof(*w))) == NULL)
		return NULL;
	w->key = w->inl;
	if (klen > WAITER_KEY && (w->key = dgi_alloc(klen)) == NULL) {
		dgi_free(w);
		return NULL;
	}
	memcpy(w->key, key, klen);
	w->klen = klen;
	return w;
}

static void waiter_put(dgi_txsvc *s, struct waiter *w)
{
	if (w->key != w->inl)
		dgi_free(w->key);
	pthread_mutex_lock(&s->mu);
	if (s->nfree_waiters < 1024) {
		w->next_free = s->free_waiters;
		s->free_waiters = w;
		s->nfree_waiters++;
		w = NULL;
	}
	pthread_mutex_unlock(&s->mu);
	dgi_free(w);
}

/* A TX_LOCK_RES carrying a read's answer (val: what it found). */
static void read_res(dgi_msg_tx_lock_res *r, dg_err err, bool found, const dg_buf *val,
    const dgi_pver *ver)
{
	r->res = err;
	r->found = found;
	r->ver_topver = ver->topver;
	r->ver_counter = (int64_t)ver->counter;
	r->ver_order = ver->order;
	if (found)
		r->val = (dg_bytes){ val->data ? val->data : (const uint8_t *)"",
			(uint32_t)val->len };
}

/* A parked read's answer (dgi_cache_tx_read_parked: the key's partition is
 * locked, so a reply only).  ctx: the transport; only a remote request is
 * parked. */
static void read_answered(void *ctx, const dg_msg_in *req, dg_err err, bool found,
    const dg_buf *val, const dgi_pver *ver)
{
	dgi_msg_tx_lock_res r = { err, 0, 0, 0, 0, { NULL, 0 } };
	if (err == DG_OK)
		read_res(&r, err, found, val, ver);
	dg_tp_reply(ctx, req, DGI_MSG_TX_LOCK_RES, &r);
}

/* Answers a lock granted (err DG_OK) or refused; a read (READ, NOLOCK)
 * reads the key.  Its last write not yet on every backup: a TX_LOCK from
 * another node waits for it (the answer comes from read_answered) — the
 * next tx of a contended key is granted the lock just as the last
 * writer's commit leaves, so it nearly always meets that write pending;
 * a TX_LOCK_ALL item or a local request is refused DG_ERR_NOT_READY, and
 * the near asks again. */
static void lock_answer(dgi_txsvc *s, const dg_msg_in *in, dg_err err, uint32_t cache_id,
    uint32_t part, uint64_t hash, const uint8_t *key, uint32_t klen, int64_t topver,
    int64_t flags)
{
	dgi_msg_tx_lock_res r = { err, 0, 0, 0, 0, { NULL, 0 } };
	dg_buf fb, *val = tl_buf(val, &fb);
	if (err == DG_OK && (flags & (DGI_TXL_READ | DGI_TXL_NOLOCK))) {
		dg_cache *c = dgi_svc_tx_cache(s, cache_id, &err);
		bool found = false;
		dgi_pver ver = { 0, 0, 0, 0 };
		int64_t tv = topver != 0 ? topver : dgi_grid_topver(s->g);
		if (c != NULL && in->type == DGI_MSG_TX_LOCK && in->from != s->self)
			err = dgi_cache_tx_read_parked(c, tv, part, hash, key, klen, val, &found, &ver,
			    in, read_answered, s->tp);
		else if (c != NULL)
			err = dgi_cache_tx_read_settled(c, tv, part, hash, key, klen, val, &found, &ver);
		if (err == DG_ERR__COUNT) {
			dg_buf_free(&fb);
			return; /* parked */
		}
		if (err == DG_ERR_REMAP && topver == 0)
			err = DG_ERR_NOT_READY;
		read_res(&r, err, found, val, &ver);
	}
	dgi_svc_reply(s, in, DGI_MSG_TX_LOCK_RES, &r);
	dg_buf_free(&fb);
}

static void on_lock_done(void *ctx, dg_err err)
{
	struct waiter *w = ctx;
	dgi_txsvc *s = w->s;
	err = dgi_svc_victim_err(s, &w->tx, err);
	if (err == DG_OK)
		STAT(s, granted);
	else if (err == DG_ERR_TIMEOUT)
		STAT(s, timeouts);
	lock_answer(s, &w->in, err, w->cache_id, w->part, w->hash, w->key, w->klen, w->topver,
	    w->flags);
	waiter_put(s, w);
}

static uint64_t fnv(const uint8_t *p, uint32_t n)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	for (uint32_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 0x100000001b3ULL;
	return h;
}

void dgi_svc_h_lock(dgi_txsvc *s, const dg_msg_in *in)
{
	const dgi_msg_tx_lock *m = in->body;
	dgi_txid tx = { (uint64_t)m->tx_node, (uint64_t)m->tx_seq };
	if ((tx.node == 0 && tx.seq == 0) || m->key.ptr == NULL || m->key.len == 0 ||
	    m->key.len > DG_KEY_MAX || /* no cache holds it: refused now, not at commit */
	    m->timeout_ms < 0 || m->cache_id <= 0 || m->cache_id > UINT32_MAX || m->part < 0 ||
	    (m->topver == 0 && m->flags != 0)) {
		dgi_svc_ack(s, in, DG_ERR_INVAL, -1);
		return;
	}
	uint64_t hash;
	uint32_t part = 0;
	if (m->topver != 0) {
		dg_err err;
		if (dgi_svc_paused(s)) {
			dgi_svc_stale_refused(s, "lock", tx.node, tx.seq);
			dgi_svc_ack(s, in, DG_ERR_NOT_READY, -1);
			return;
		}
		dg_cache *c = dgi_svc_tx_cache(s, m->cache_id, &err);
		if (c == NULL) {
			dgi_svc_ack(s, in, err, -1);
			return;
		}
		part = dgi_cache_key_part(c, m->key.ptr, m->key.len, &hash);
		if (part != (uint64_t)m->part) {
			dgi_svc_ack(s, in, DG_ERR_INVAL, -1);
			return;
		}
		if (m->flags & DGI_TXL_RELEASE) { /* whatever the topology: it is ours */
			dgi_lock_release(s->locks, (uint32_t)m->cache_id, m->key.ptr, m->key.len, hash,
			    &tx);
			dgi_svc_ack(s, in, DG_OK, -1);
			return;
		}
		if ((err = dgi_svc_check_primary(s, c, part, m->topver, NULL)) != DG_OK) {
			dgi_svc_ack(s, in, err, -1);
			return;
		}
		if (dgi_cache_part_lost(c, part)) {
			dgi_svc_ack(s, in, DG_ERR_PARTITION_LOST, -1); /* no lock on what is gone */
			return;
		}
		if (m->flags & DGI_TXL_NOLOCK) {
			lock_answer(s, in, DG_OK, (uint32_t)m->cache_id, part, hash, m->key.ptr,
			    m->key.len, m->topver, m->flags);
			return;
		}
		if ((err = dgi_svc_fence_check(s, m->topver)) != DG_OK) {
			dgi_svc_ack(s, in, err, -1);
			return;
		}
		dgi_svc_test_fence_window(s);
	} else {
		hash = fnv(m->key.ptr, m->key.len);
	}
	dgi_txs done;
	if (dgi_txdone_get(s->done, &tx, &done)) {
		dgi_svc_ack(s, in, DG_ERR_TX_ROLLED_BACK, -1); /* ended here (rolled back, timed out) */
		return;
	}
	if (m->flags & DGI_TXL_NOWAIT) {
		/* a batch's first try: not queued behind another tx (the near
		 * then locks its keys one by one, in its caller's order).  A
		 * lock taken between this look and the acquire is waited for */
		dgi_txid o = dgi_lock_owner(s->locks, (uint32_t)m->cache_id, m->key.ptr, m->key.len,
		    hash);
		if ((o.node != 0 || o.seq != 0) && !dgi_txid_eq(&o, &tx)) {
			STAT(s, busy);
			dgi_svc_ack(s, in, DG_ERR_BUSY, -1);
			return;
		}
	}
	uint64_t deadline = m->timeout_ms > 0 ? dgi_now_ms() + (uint64_t)m->timeout_ms : 0;
	pthread_mutex_lock(&s->mu);
	struct rec *r = dgi_svc_rec_find(s, &tx, ROLE_PRIMARY, 0);
	/* The fence again, as the record is made: a new topology may have
	 * come in since the look above and this node reported it (the
	 * expirer's tick saw no record of this tx: nothing older in flight) —
	 * a lock granted under the old one now would be a second holder of
	 * the key beside its new primary's.  Checked under s->mu, the tick's
	 * scan of the records sees this record or the check sees the new
	 * topology.  (A record there already holds the fence.) */
	dg_err ferr;
	if (r == NULL && m->topver != 0 && (ferr = dgi_svc_fence_check(s, m->topver)) != DG_OK) {
		pthread_mutex_unlock(&s->mu);
		dgi_svc_ack(s, in, ferr, -1);
		return;
	}
	dgi_svc_start_put(s, &tx, m->tx_start_ms);
	if (r == NULL && (r = dgi_svc_rec_new(s, &tx, R_ACTIVE, ROLE_PRIMARY, 0)) != NULL) {
		r->s = s;
		r->start_ms = m->tx_start_ms;
		r->topver = m->topver;
	}
	if (r != NULL && r->st == R_ACTIVE && deadline > r->deadline)
		r->deadline = deadline;
	pthread_mutex_unlock(&s->mu);
	struct waiter *w = r != NULL ? waiter_get(s, m->key.ptr, m->key.len) : NULL;
	if (w == NULL) {
		dgi_svc_ack(s, in, DG_ERR_NOMEM, -1);
		return;
	}
	w->s = s;
	w->in = *in;
	w->in.body = NULL;
	w->in.raw = NULL;
	w->tx = tx;
	w->cache_id = (uint32_t)m->cache_id;
	w->part = part;
	w->hash = hash;
	w->topver = m->topver;
	w->flags = m->flags;
	int res = dgi_lock_acquire(s->locks, (uint32_t)m->cache_id, m->key.ptr, m->key.len, hash,
	    &tx, deadline, on_lock_done, w);
	if (res == DGI_LOCK_GRANTED) {
		STAT(s, granted);
		lock_answer(s, in, DG_OK, w->cache_id, part, hash, w->key, w->klen, m->topver,
		    m->flags);
		waiter_put(s, w);
	} else if (res == DGI_LOCK_QUEUED) {
		STAT(s, waited); /* w belongs to the lock's callback now */
		dgi_svc_check_deadlock(s, &tx);
	} else {
		waiter_put(s, w);
		dgi_svc_ack(s, in, (dg_err)-res, -1);
	}
}

/* ---- TX_LOCK_ALL ---- */

#define LALL_FREE_MAX 64

static struct lall *lall_get(dgi_txsvc *s, uint32_t n)
{
	pthread_mutex_lock(&s->mu);
	struct lall *g = s->free_lalls;
	if (g != NULL) {
		s->free_lalls = g->next_free;
		s->nfree_lalls--;
	}
	pthread_mutex_unlock(&s->mu);
	if (g == NULL) {
		if ((g = dgi_calloc(1, sizeof(*g))) == NULL)
			return NULL;
		pthread_mutex_init(&g->mu, NULL);
		dg_buf_init(&g->vals);
	}
	if (n > g->cap) {
		struct lall_slot *sl = dgi_alloc((n < 16 ? 16 : n) * sizeof(*sl));
		if (sl == NULL) {
			pthread_mutex_destroy(&g->mu);
			dg_buf_free(&g->vals);
			dgi_free(g->slot);
			dgi_free(g);
			return NULL;
		}
		dgi_free(g->slot);
		g->slot = sl;
		g->cap = n < 16 ? 16 : n;
	}
	g->n = n;
	g->vals.len = 0;
	return g;
}

static void lall_destroy(struct lall *g)
{
	pthread_mutex_destroy(&g->mu);
	dg_buf_free(&g->vals);
	dgi_free(g->slot);
	dgi_free(g);
}

static void lall_put(dgi_txsvc *s, struct lall *g)
{
	if (g->vals.cap > 1u << 20)
		dg_buf_free(&g->vals);
	pthread_mutex_lock(&s->mu);
	if (s->nfree_lalls < LALL_FREE_MAX) {
		g->next_free = s->free_lalls;
		s->free_lalls = g;
		s->nfree_lalls++;
		g = NULL;
	}
	pthread_mutex_unlock(&s->mu);
	if (g != NULL)
		lall_destroy(g);
}

void dgi_svc_lock_all_free(dgi_txsvc *s)
{
	while (s->free_lalls != NULL) {
		struct lall *g = s->free_lalls;
		s->free_lalls = g->next_free;
		lall_destroy(g);
	}
	s->nfree_lalls = 0;
}

/* TX_LOCK_ALL_RES with an empty list: the near asks for each key alone. */
static void lall_refuse(dgi_txsvc *s, const dg_msg_in *in)
{
	dg_buf fb, *b = tl_buf(lall, &fb);
	dg_writer w;
	dg_writer_init(&w, dgi_txwire_registry(), b);
	dg_write_list_begin(&w, 0);
	dg_write_end(&w);
	dg_msg_raw none = { { b->data, (uint32_t)b->len } };
	if (dg_writer_finish(&w) == DG_OK)
		dgi_svc_reply(s, in, DGI_MSG_TX_LOCK_ALL_RES, &none);
	dg_buf_free(&fb);
}

/* Every slot answered: TX_LOCK_ALL_RES, the record back to the pool.
 * The answer is one frame: a value that would take it past recv_max is
 * left out and its item answered DG_ERR_NOT_READY, so the near reads
 * that key alone (a lock this request took stays the tx's: a lock is
 * re-entrant).  Before, 20 values of 2 MiB made an answer the transport
 * refused, and dg_tx_get_all waited for the tx's whole timeout
 * (test_tx_get_all_larger_than_a_frame). */
static void lall_finish(dgi_txsvc *s, struct lall *g)
{
	dg_buf fb, *b = tl_buf(lall, &fb);
	dg_writer w;
	dg_writer_init(&w, dgi_txwire_registry(), b);
	dg_write_list_begin(&w, g->n * DGI_TXLAR_VALUES);
	size_t room = dg_tp_recv_max(s->tp), used = DGI_TXLA_HEAD_ROOM;
	used += (size_t)g->n * DGI_TXLA_ITEM_ROOM;
	for (uint32_t i = 0; i < g->n; i++) {
		const struct lall_slot *sl = &g->slot[i];
		dgi_msg_tx_lock_res r = { sl->res, sl->found, sl->ver_topver, sl->ver_counter,
			sl->ver_order, { NULL, 0 } };
		if (sl->found && used + sl->vlen > room)
			r = (dgi_msg_tx_lock_res){ DG_ERR_NOT_READY, 0, 0, 0, 0, { NULL, 0 } };
		else if (sl->found) {
			used += sl->vlen;
			r.val = (dg_bytes){ g->vals.data != NULL ? g->vals.data + sl->voff :
				(const uint8_t *)"", sl->vlen };
		}
		dgi_txla_res_put(&w, &r);
	}
	dg_write_end(&w);
	dg_msg_in in = g->in;
	lall_put(s, g);
	if (dg_writer_finish(&w) == DG_OK) {
		dg_msg_raw res = { { b->data, (uint32_t)b->len } };
		dgi_svc_reply(s, &in, DGI_MSG_TX_LOCK_ALL_RES, &res);
	} else {
		lall_refuse(s, &in); /* the near reads every key alone */
	}
	dg_buf_free(&fb);
}

static void lall_done(dgi_txsvc *s, struct lall *g)
{
	if (atomic_fetch_sub_explicit(&g->left, 1, memory_order_acq_rel) == 1)
		lall_finish(s, g);
}

void dgi_svc_lock_all_item(dgi_txsvc *s, const dg_msg_in *req, const dgi_msg_tx_lock_res *r)
{
	struct lall *g = (struct lall *)(uintptr_t)req->corr;
	uint32_t i = req->raw_len;
	pthread_mutex_lock(&g->mu);
	if (i < g->n) {
		struct lall_slot *sl = &g->slot[i];
		*sl = (struct lall_slot){ r->res, r->found, r->ver_topver, r->ver_counter,
			r->ver_order, 0, 0 };
		if (r->found && r->val.ptr != NULL) {
			sl->voff = (uint32_t)g->vals.len;
			if (dg_buf_reserve(&g->vals, r->val.len) == DG_OK) {
				memcpy(g->vals.data + g->vals.len, r->val.ptr, r->val.len);
				g->vals.len += r->val.len;
				sl->vlen = r->val.len;
			} else {
				sl->res = DG_ERR_NOMEM;
				sl->found = 0;
			}
		}
	}
	pthread_mutex_unlock(&g->mu);
	lall_done(s, g);
}

void dgi_svc_h_lock_all(dgi_txsvc *s, const dg_msg_in *in)
{
	const dgi_msg_tx_lock_all *m = in->body;
	dg_reader r;
	uint32_t n = 0;
	struct lall *g = NULL;
	if (dgi_txla_open(&m->items, DGI_TXLA_VALUES, &r, &n) != DG_OK ||
	    (g = lall_get(s, n)) == NULL) {
		lall_refuse(s, in); /* refused whole: each key alone */
		return;
	}
	atomic_init(&g->left, n + 1);
	g->in = *in;
	g->in.body = NULL;
	g->in.raw = NULL;
	uint32_t i = 0;
	for (; i < n; i++) {
		dgi_msg_tx_lock lk = { m->tx_node, m->tx_seq, m->tx_start_ms, m->cache_id,
			m->timeout_ms, { NULL, 0 }, m->topver, 0, 0 };
		if (dgi_txla_item_get(&r, &lk) != DG_OK)
			break;
		/* the item as a TX_LOCK whose answer comes back here */
		dg_msg_in ii = *in;
		ii.type = DGI_MSG_TX_LOCK_ALL;
		ii.body = &lk;
		ii.raw = NULL;
		ii.corr = (uint64_t)(uintptr_t)g;
		ii.raw_len = i;
		dgi_svc_h_lock(s, &ii);
	}
	for (; i < n; i++) { /* items that did not decode */
		dgi_msg_tx_lock_res bad = { DG_ERR_INVAL, 0, 0, 0, 0, { NULL, 0 } };
		dg_msg_in ii = *in;
		ii.type = DGI_MSG_TX_LOCK_ALL;
		ii.corr = (uint64_t)(uintptr_t)g;
		ii.raw_len = i;
		dgi_svc_lock_all_item(s, &ii, &bad);
	}
	lall_done(s, g); /* the handler's own count */
}

/* ---- TX_ROLLBACK, TX_UNLOCK ---- */

void dgi_svc_h_rollback(dgi_txsvc *s, const dg_msg_in *in)
{
	dgi_txid tx;
	if (in->type == DGI_MSG_TX_UNLOCK) {
		const dgi_msg_tx_res *m = in->body;
		tx = (dgi_txid){ (uint64_t)m->tx_node, (uint64_t)m->tx_seq };
	} else {
		const dgi_msg_tx_ctl *m = in->body;
		tx = (dgi_txid){ (uint64_t)m->tx_node, (uint64_t)m->tx_seq };
		if (m->flags & DGI_TXP_BACKUP) { /* a primary tells its backup */
			dgi_svc_finish_role(s, &tx, ROLE_BACKUP, in->from, DGI_TXS_ROLLED_BACK);
			dgi_svc_ack(s, in, DG_OK, -1);
			return;
		}
	}
	dgi_txs done;
	if (dgi_txdone_get(s->done, &tx, &done) && done == DGI_TXS_COMMITTED) {
		dgi_svc_ack(s, in, DG_ERR_STATE, -1); /* committed here: it cannot be undone */
		return;
	}
	struct ended x;
	if (!dgi_svc_end_role(s, &tx, ROLE_PRIMARY, 0, DGI_TXS_ROLLED_BACK, ANY_STATE & ~ST(R_COMMITTING),
	    &x)) {
		dgi_svc_ack(s, in, DG_ERR_STATE, -1); /* commit under way: it cannot be undone */
		return;
	}
	if (x.pending)
		dgi_svc_ack(s, &x.req, DG_ERR_TX_ROLLED_BACK, -1);
	dgi_msg_tx_ctl fw = { (int64_t)tx.node, (int64_t)tx.seq, DGI_TXP_BACKUP, 0, 0 };
	for (uint32_t i = 0; i < x.bk.n; i++)
		dgi_txsvc_send(s, x.bk.ids[i], DGI_MSG_TX_ROLLBACK, &fw);
	ns_free(&x.bk);
	STAT(s, unlocks);
	if (x.had)
		STAT(s, rolled_back);
	dgi_svc_ack(s, in, DG_OK, -1);
}
