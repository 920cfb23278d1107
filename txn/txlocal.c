/*
 * txlocal.c — requests a node sends itself: dgi_txsvc_request and
 * dgi_txsvc_send to this node run the handler in the calling thread on a
 * decoded copy (what a peer would see), and its reply reaches the
 * requester's callback the same way; the slots of such requests and their
 * deadlines.  Also the replies and acks every handler answers with, and
 * the per-thread scratch buffers they and the handlers encode into.
 */
#include "txsvc_int.h"

#include <pthread.h>

/* ---- local dispatch: requests a node sends itself ---- */

static pthread_key_t tls_key;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;

static void tls_free(void *p)
{
	struct tls_bufs *t = p;
	for (int i = 0; i < 4; i++)
		dg_buf_free(&t->enc[i]);
	dg_buf_free(&t->val);
	dg_buf_free(&t->copy);
	dg_buf_free(&t->edges);
	dg_buf_free(&t->lall);
	dgi_free(t);
}

static void tls_init(void)
{
	pthread_key_create(&tls_key, tls_free);
}

_Atomic bool dgi_tx_tls_fail;

/* This thread's buffers, or NULL when they could not be allocated: every
 * user then works with a buffer of its own (tl_buf), allocating — slower,
 * never a crash. */
static struct tls_bufs *tls(void)
{
	static _Thread_local struct tls_bufs *mine;
	if (atomic_load_explicit(&dgi_tx_tls_fail, memory_order_relaxed))
		return NULL;
	if (mine != NULL)
		return mine;
	pthread_once(&tls_once, tls_init);
	struct tls_bufs *t = dgi_calloc(1, sizeof(*t));
	if (t == NULL)
		return NULL;
	pthread_setspecific(tls_key, t);
	return mine = t;
}

/* This thread's scratch buffer at offset off of its tls_bufs, emptied; or
 * fb (initialised here) when the thread has none.  The caller
 * dg_buf_free's fb when done (nothing to free when unused). */
dg_buf *dgi_svc_scratch(size_t off, dg_buf *fb)
{
	struct tls_bufs *t = tls();
	dg_buf_init(fb);
	dg_buf *b = t != NULL ? (dg_buf *)(void *)((char *)t + off) : fb;
	b->len = 0;
	return b;
}

static _Thread_local int tl_depth;

/* Encodes body and decodes it again into out (what a peer would see),
 * in this thread's buffer for the nesting level, or fb; *used: the
 * encoding (valid until fb is freed or the level is used again). */
static dg_err roundtrip(dg_msg_type type, const void *body, void *out, dg_buf **used,
    dg_buf *fb)
{
	dg_buf_init(fb);
	if (tl_depth >= 4)
		return DG_ERR_LIMIT;
	dg_buf *b = dgi_svc_scratch(offsetof(struct tls_bufs, enc) + (size_t)tl_depth * sizeof(dg_buf), fb);
	dg_writer w;
	dg_writer_init(&w, dgi_txwire_registry(), b);
	dg_err e = dg_msg_encode(type, body, &w);
	if (e == DG_OK)
		e = dg_msg_decode(type, NULL, b->data, b->len, out);
	*used = b;
	return e;
}

static void local_reply(dgi_txsvc *s, const dg_msg_in *req, dg_msg_type type,
    const void *body, dg_err err)
{
	uint32_t i = (uint32_t)(req->corr % LOCAL_SLOTS);
	pthread_mutex_lock(&s->lmu);
	struct local_slot sl = s->local[i];
	if (sl.id != req->corr) {
		pthread_mutex_unlock(&s->lmu);
		return; /* timed out already */
	}
	s->local[i].id = 0;
	pthread_mutex_unlock(&s->lmu);
	_Alignas(16) uint8_t out[DG_MSG_BODY_MAX];
	dg_msg_in in = { .type = type, .from = s->self, .corr = req->corr };
	dg_buf *b = NULL, fb;
	dg_buf_init(&fb);
	if (err == DG_OK) {
		tl_depth++;
		err = roundtrip(type, body, out, &b, &fb);
		tl_depth--;
	}
	if (err == DG_OK) {
		in.body = out;
		in.raw = b->data;
		in.raw_len = (uint32_t)b->len;
	}
	sl.cb(sl.ctx, err, err == DG_OK ? &in : NULL);
	dg_buf_free(&fb);
}

void dgi_svc_reply(dgi_txsvc *s, const dg_msg_in *req, dg_msg_type type, const void *body)
{
	if (req->type == DGI_MSG_TX_LOCK_ALL && type == DGI_MSG_TX_LOCK_RES)
		dgi_svc_lock_all_item(s, req, body); /* one key of a TX_LOCK_ALL (txlock.c) */
	else if (req->from == s->self)
		local_reply(s, req, type, body, DG_OK);
	else
		dg_tp_reply(s->tp, req, type, body);
}

void dgi_svc_ack_flags(dgi_txsvc *s, const dg_msg_in *req, dg_err res, int64_t idx,
    int64_t flags)
{
	if (req->type == DGI_MSG_TX_LOCK || req->type == DGI_MSG_TX_UNLOCK ||
	    req->type == DGI_MSG_TX_LOCK_ALL) {
		dgi_msg_tx_lock_res r = { res, 0, 0, 0, 0, { NULL, 0 } };
		dgi_svc_reply(s, req, DGI_MSG_TX_LOCK_RES, &r);
		return;
	}
	dgi_msg_tx_ctl r = { 0, 0, flags, res, idx };
	dgi_svc_reply(s, req, DGI_MSG_TX_ACK, &r);
}

void dgi_svc_ack(dgi_txsvc *s, const dg_msg_in *req, dg_err res, int64_t idx)
{
	dgi_svc_ack_flags(s, req, res, idx, 0);
}

_Atomic uint64_t dgi_tx_cut_node;

dg_err dgi_txsvc_request(dgi_txsvc *s, dg_node_id to, dg_msg_type type, const void *body,
    uint32_t timeout_ms, dg_reply_fn cb, void *ctx)
{
	if (cut_off(s))
		return DG_ERR_UNREACHABLE;
	if (to != s->self)
		return dg_tp_request(s->tp, to, type, body, timeout_ms, cb, ctx);
	pthread_mutex_lock(&s->lmu);
	uint64_t id = 0;
	for (uint32_t k = 0; k < LOCAL_SLOTS && id == 0; k++) {
		uint64_t cand = ++s->local_gen;
		struct local_slot *sl = &s->local[cand % LOCAL_SLOTS];
		if (sl->id == 0 && cand != 0) {
			id = cand;
			*sl = (struct local_slot){ id, cb, ctx, dgi_now_ms() + timeout_ms };
		}
	}
	pthread_mutex_unlock(&s->lmu);
	if (id == 0)
		return DG_ERR_BUSY;
	_Alignas(16) uint8_t dec[DG_MSG_BODY_MAX];
	dg_buf *b = NULL, fb;
	tl_depth++;
	dg_err e = roundtrip(type, body, dec, &b, &fb);
	if (e == DG_OK) {
		dg_msg_in in = { .type = type, .corr = id, .from = s->self, .body = dec,
			.raw = b->data, .raw_len = (uint32_t)b->len };
		dgi_svc_dispatch(s, &in);
	}
	tl_depth--;
	dg_buf_free(&fb);
	if (e != DG_OK) {
		dg_msg_in in = { .type = type, .corr = id, .from = s->self };
		local_reply(s, &in, type, NULL, e);
	}
	return DG_OK;
}

dg_err dgi_txsvc_send(dgi_txsvc *s, dg_node_id to, dg_msg_type type, const void *body)
{
	if (cut_off(s))
		return DG_ERR_UNREACHABLE;
	if (to != s->self)
		return dg_tp_send(s->tp, to, type, body);
	_Alignas(16) uint8_t dec[DG_MSG_BODY_MAX];
	dg_buf *b = NULL, fb;
	tl_depth++;
	dg_err e = roundtrip(type, body, dec, &b, &fb);
	if (e == DG_OK) {
		dg_msg_in in = { .type = type, .from = s->self, .body = dec, .raw = b->data,
			.raw_len = (uint32_t)b->len };
		dgi_svc_dispatch(s, &in);
	}
	tl_depth--;
	dg_buf_free(&fb);
	return e;
}

void dgi_svc_local_expire(dgi_txsvc *s, uint64_t now)
{
	for (uint32_t i = 0; i < LOCAL_SLOTS; i++) {
		pthread_mutex_lock(&s->lmu);
		struct local_slot sl = s->local[i];
		bool late = sl.id != 0 && sl.deadline <= now;
		if (late)
			s->local[i].id = 0;
		pthread_mutex_unlock(&s->lmu);
		if (late)
			sl.cb(sl.ctx, DG_ERR_TIMEOUT, NULL);
	}
}
