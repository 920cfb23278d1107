/*
 * txsvc.c — the lock service of a primary: TX_LOCK / TX_UNLOCK over the
 * lock queues (lockq.c), deadlines, and deadlock detection when a request
 * starts waiting (wfg.c).  See txsvc.h.
 *
 * A request that waits keeps a small heap record (the saved request, to
 * answer it later from the lock's callback); a granted-at-once request
 * costs none.  The start times of the transactions seen here (for the
 * victim choice) live in an open-addressing table keyed by transaction id.
 */
#include "txsvc.h"
#include "wfg.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

struct start_slot {
	dgi_txid tx;                /* {0,0}: empty */
	int64_t start_ms;           /* -1: removed */
};

struct dgi_txsvc {
	dg_tp *tp;
	dgi_locks *locks;
	pthread_mutex_t mu;         /* starts, wfg, edges, victims */
	struct start_slot *starts;
	uint32_t scap, sused;       /* sused counts removed slots too */
	dgi_wfg *wfg;
	dgi_txid *edges;
	size_t ecap;
	dgi_txid victims[8];        /* being released as deadlock victims */
	int nvictims;
	pthread_t expirer;
	bool expirer_up;
	_Atomic bool stopping;
	_Atomic uint64_t granted, waited, timeouts, deadlocks, unlocks;
};

struct waiter {
	dgi_txsvc *s;
	dg_msg_in in;               /* type, flags, corr, from: enough to answer */
	dgi_txid tx;
};

/* ---- codecs ---- */

static dg_err enc_lock(dg_writer *w, const void *body)
{
	const dgi_msg_tx_lock *m = body;
	const int64_t *v = &m->tx_node;
	dg_err e = DG_OK;
	for (int i = 0; i < 5 && e == DG_OK; i++)
		e = dg_write_i64(w, v[i]);
	return e != DG_OK ? e : dg_write_bytes(w, m->key.ptr, m->key.len);
}

static dg_err dec_lock(dg_reader *r, void *body)
{
	dgi_msg_tx_lock *m = body;
	int64_t *v = &m->tx_node;
	dg_err e = DG_OK;
	for (int i = 0; i < 5 && e == DG_OK; i++)
		e = dg_read_i64(r, &v[i]);
	return e != DG_OK ? e : dg_read_bytes(r, &m->key, NULL);
}

static dg_err enc_res(dg_writer *w, const void *body)
{
	const int64_t *v = body;
	dg_err e = DG_OK;
	for (int i = 0; i < 3 && e == DG_OK; i++)
		e = dg_write_i64(w, v[i]);
	return e;
}

static dg_err dec_res(dg_reader *r, void *body)
{
	int64_t *v = body;
	dg_err e = DG_OK;
	for (int i = 0; i < 3 && e == DG_OK; i++)
		e = dg_read_i64(r, &v[i]);
	return e;
}

_Static_assert(offsetof(dgi_msg_tx_lock, key) == 5 * sizeof(int64_t),
    "TX_LOCK: five I64, then the key");
_Static_assert(sizeof(dgi_msg_tx_res) == 3 * sizeof(int64_t), "TX_LOCK_RES: three I64");

static void define_rows(void)
{
	dg_msg_define(DGI_MSG_TX_LOCK, &(dg_msg_row){ "TX_LOCK", sizeof(dgi_msg_tx_lock),
	    enc_lock, dec_lock, DGI_MSG_TX_LOCK_RES });
	dg_msg_define(DGI_MSG_TX_LOCK_RES, &(dg_msg_row){ "TX_LOCK_RES",
	    sizeof(dgi_msg_tx_res), enc_res, dec_res, DG_MSG_UNKNOWN });
	dg_msg_define(DGI_MSG_TX_UNLOCK, &(dg_msg_row){ "TX_UNLOCK", sizeof(dgi_msg_tx_res),
	    enc_res, dec_res, DGI_MSG_TX_LOCK_RES });
}

/* ---- start times (svc->mu held) ---- */

static uint64_t mix(const dgi_txid *t)
{
	uint64_t x = t->node * 0x9e3779b97f4a7c15ULL ^ t->seq;
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	return x;
}

static struct start_slot *start_find(dgi_txsvc *s, const dgi_txid *tx)
{
	if (s->scap == 0)
		return NULL;
	uint32_t mask = s->scap - 1;
	for (uint32_t i = (uint32_t)mix(tx) & mask;; i = (i + 1) & mask) {
		struct start_slot *sl = &s->starts[i];
		if (sl->tx.node == 0 && sl->tx.seq == 0)
			return NULL;
		if (dgi_txid_eq(&sl->tx, tx))
			return sl;
	}
}

static dg_err start_grow(dgi_txsvc *s)
{
	uint32_t ncap = s->scap ? s->scap * 2 : 64;
	struct start_slot *n = dgi_calloc(ncap, sizeof(*n));
	if (n == NULL)
		return DG_ERR_NOMEM;
	uint32_t used = 0;
	for (uint32_t i = 0; i < s->scap; i++) {
		struct start_slot *o = &s->starts[i];
		if ((o->tx.node == 0 && o->tx.seq == 0) || o->start_ms < 0)
			continue;
		uint32_t j = (uint32_t)mix(&o->tx) & (ncap - 1);
		while (n[j].tx.node != 0 || n[j].tx.seq != 0)
			j = (j + 1) & (ncap - 1);
		n[j] = *o;
		used++;
	}
	dgi_free(s->starts);
	s->starts = n;
	s->scap = ncap;
	s->sused = used;
	return DG_OK;
}

static void start_put(dgi_txsvc *s, const dgi_txid *tx, int64_t start_ms)
{
	struct start_slot *sl = start_find(s, tx);
	if (sl != NULL) {
		sl->start_ms = start_ms;
		return;
	}
	if ((s->sused + 1) * 2 > s->scap && start_grow(s) != DG_OK)
		return; /* unknown start: the victim choice falls back to ids */
	uint32_t mask = s->scap - 1;
	uint32_t i = (uint32_t)mix(tx) & mask;
	while (s->starts[i].tx.node != 0 || s->starts[i].tx.seq != 0)
		i = (i + 1) & mask;
	s->starts[i].tx = *tx;
	s->starts[i].start_ms = start_ms;
	s->sused++;
}

static int64_t start_of(dgi_txsvc *s, const dgi_txid *tx)
{
	struct start_slot *sl = start_find(s, tx);
	return sl != NULL && sl->start_ms > 0 ? sl->start_ms : 0;
}

static void start_del(dgi_txsvc *s, const dgi_txid *tx)
{
	struct start_slot *sl = start_find(s, tx);
	if (sl != NULL)
		sl->start_ms = -1; /* a tombstone: probe chains stay whole */
}

/* ---- answering ---- */

static void answer(dgi_txsvc *s, const dg_msg_in *in, dg_err res)
{
	dgi_msg_tx_res r = { res, 0, 0 };
	dg_tp_reply(s->tp, in, DGI_MSG_TX_LOCK_RES, &r);
}

static bool is_victim(dgi_txsvc *s, const dgi_txid *tx)
{
	bool v = false;
	pthread_mutex_lock(&s->mu);
	for (int i = 0; i < s->nvictims && !v; i++)
		v = dgi_txid_eq(&s->victims[i], tx);
	pthread_mutex_unlock(&s->mu);
	return v;
}

static void on_lock_done(void *ctx, dg_err err)
{
	struct waiter *w = ctx;
	dgi_txsvc *s = w->s;
	if (err == DG_ERR_CLOSED && is_victim(s, &w->tx))
		err = DG_ERR_DEADLOCK;
	if (err == DG_OK)
		atomic_fetch_add_explicit(&s->granted, 1, memory_order_relaxed);
	else if (err == DG_ERR_TIMEOUT)
		atomic_fetch_add_explicit(&s->timeouts, 1, memory_order_relaxed);
	answer(s, &w->in, err);
	dgi_free(w);
}

/* Releases a deadlock victim here: its waits answer DG_ERR_DEADLOCK. */
static void kill_victim(dgi_txsvc *s, const dgi_txid *victim)
{
	pthread_mutex_lock(&s->mu);
	bool room = s->nvictims < (int)(sizeof(s->victims) / sizeof(s->victims[0]));
	if (room)
		s->victims[s->nvictims++] = *victim;
	pthread_mutex_unlock(&s->mu);
	dgi_lock_release_all(s->locks, victim);
	pthread_mutex_lock(&s->mu);
	for (int i = 0; room && i < s->nvictims; i++)
		if (dgi_txid_eq(&s->victims[i], victim)) {
			s->victims[i] = s->victims[--s->nvictims];
			break;
		}
	pthread_mutex_unlock(&s->mu);
	atomic_fetch_add_explicit(&s->deadlocks, 1, memory_order_relaxed);
}

/* tx just started waiting: a cycle through it in this node's wait-for
 * graph is a deadlock; its youngest member is the victim. */
static void check_deadlock(dgi_txsvc *s, const dgi_txid *tx)
{
	dgi_txid cycle[16], victim = { 0, 0 };
	size_t n = 0;
	pthread_mutex_lock(&s->mu);
	/* s->ecap counts pairs; s->edges holds 2 ids a pair */
	size_t ne = dgi_locks_edges(s->locks, s->edges, s->ecap);
	if (ne > s->ecap) {
		size_t cap = ne * 2 + 32;
		dgi_txid *e = dgi_realloc(s->edges, cap * 2 * sizeof(*e));
		if (e != NULL) {
			s->edges = e;
			s->ecap = cap;
			ne = dgi_locks_edges(s->locks, s->edges, s->ecap);
		}
	}
	if (ne <= s->ecap) {
		dgi_wfg_reset(s->wfg);
		for (size_t i = 0; i < ne; i++) {
			const dgi_txid *a = &s->edges[2 * i], *b = &s->edges[2 * i + 1];
			dgi_wfg_add(s->wfg, a, (uint64_t)start_of(s, a), b, (uint64_t)start_of(s, b));
		}
		n = dgi_wfg_cycle(s->wfg, tx, cycle, sizeof(cycle) / sizeof(cycle[0]));
		if (n > sizeof(cycle) / sizeof(cycle[0]))
			n = sizeof(cycle) / sizeof(cycle[0]);
		if (n > 0)
			victim = dgi_wfg_victim(s->wfg, cycle, n);
	}
	pthread_mutex_unlock(&s->mu);
	if (n == 0)
		return;
	char txs[16 * 40];
	size_t off = 0;
	for (size_t i = 0; i < n && off + 40 < sizeof(txs); i++)
		off += (size_t)snprintf(txs + off, sizeof(txs) - off, "%s%016llx:%llu", i ? "," : "",
		    (unsigned long long)cycle[i].node, (unsigned long long)cycle[i].seq);
	fprintf(stderr, "level=warn id=TX-DEADLOCK txs=%s victim=%016llx:%llu\n", txs,
	    (unsigned long long)victim.node, (unsigned long long)victim.seq);
	kill_victim(s, &victim);
}

/* ---- handlers ---- */

static void on_lock(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	dgi_txsvc *s = ctx;
	const dgi_msg_tx_lock *m = in->body;
	dgi_txid tx = { (uint64_t)m->tx_node, (uint64_t)m->tx_seq };
	(void)tp;
	if ((tx.node == 0 && tx.seq == 0) || m->key.ptr == NULL || m->key.len == 0 ||
	    m->timeout_ms < 0 || m->cache_id <= 0 || m->cache_id > UINT32_MAX) {
		answer(s, in, DG_ERR_INVAL);
		return;
	}
	pthread_mutex_lock(&s->mu);
	start_put(s, &tx, m->tx_start_ms);
	pthread_mutex_unlock(&s->mu);
	struct waiter *w = dgi_alloc(sizeof(*w));
	if (w == NULL) {
		answer(s, in, DG_ERR_NOMEM);
		return;
	}
	w->s = s;
	w->in = *in;
	w->in.body = NULL;
	w->tx = tx;
	uint64_t deadline = m->timeout_ms > 0 ? dgi_now_ms() + (uint64_t)m->timeout_ms : 0;
	uint64_t hash = 0xcbf29ce484222325ULL;
	for (uint32_t i = 0; i < m->key.len; i++)
		hash = (hash ^ m->key.ptr[i]) * 0x100000001b3ULL;
	int r = dgi_lock_acquire(s->locks, (uint32_t)m->cache_id, m->key.ptr, m->key.len, hash,
	    &tx, deadline, on_lock_done, w);
	if (r == DGI_LOCK_GRANTED) {
		dgi_free(w);
		atomic_fetch_add_explicit(&s->granted, 1, memory_order_relaxed);
		answer(s, in, DG_OK);
	} else if (r == DGI_LOCK_QUEUED) {
		/* w belongs to the lock's callback now */
		atomic_fetch_add_explicit(&s->waited, 1, memory_order_relaxed);
		check_deadlock(s, &tx);
	} else {
		dgi_free(w);
		answer(s, in, (dg_err)-r);
	}
}

static void on_unlock(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	dgi_txsvc *s = ctx;
	const dgi_msg_tx_res *m = in->body;
	dgi_txid tx = { (uint64_t)m->tx_node, (uint64_t)m->tx_seq };
	(void)tp;
	dgi_lock_release_all(s->locks, &tx);
	pthread_mutex_lock(&s->mu);
	start_del(s, &tx);
	pthread_mutex_unlock(&s->mu);
	atomic_fetch_add_explicit(&s->unlocks, 1, memory_order_relaxed);
	answer(s, in, DG_OK);
}

/* ---- deadlines ---- */

static void *expirer(void *arg)
{
	dgi_txsvc *s = arg;
	while (!atomic_load(&s->stopping)) {
		struct timespec ts = { 0, 10 * 1000000L };
		nanosleep(&ts, NULL);
		dgi_locks_expire(s->locks, dgi_now_ms());
	}
	return NULL;
}

/* ---- start / stop ---- */

dg_err dgi_txsvc_start(dg_tp *tp, dgi_txsvc **out)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, define_rows);
	dgi_txsvc *s = dgi_calloc(1, sizeof(*s));
	if (s == NULL)
		return DG_ERR_NOMEM;
	s->tp = tp;
	pthread_mutex_init(&s->mu, NULL);
	dg_err e;
	if ((e = dgi_locks_create(0, &s->locks)) != DG_OK || (e = dgi_wfg_create(&s->wfg)) != DG_OK)
		goto fail;
	if (pthread_create(&s->expirer, NULL, expirer, s) != 0) {
		e = DG_ERR_NOMEM;
		goto fail;
	}
	s->expirer_up = true;
	dg_tp_handle(tp, DGI_MSG_TX_LOCK, on_lock, s);
	dg_tp_handle(tp, DGI_MSG_TX_UNLOCK, on_unlock, s);
	*out = s;
	return DG_OK;
fail:
	dgi_txsvc_stop(s);
	return e;
}

void dgi_txsvc_stop(dgi_txsvc *s)
{
	if (s == NULL)
		return;
	if (s->tp != NULL) {
		dg_tp_handle(s->tp, DGI_MSG_TX_LOCK, NULL, NULL);
		dg_tp_handle(s->tp, DGI_MSG_TX_UNLOCK, NULL, NULL);
		dg_tp_quiesce(s->tp);
	}
	atomic_store(&s->stopping, true);
	if (s->expirer_up)
		pthread_join(s->expirer, NULL);
	dgi_locks_destroy(s->locks); /* answers every waiter DG_ERR_CLOSED */
	dgi_wfg_destroy(s->wfg);
	dgi_free(s->edges);
	dgi_free(s->starts);
	pthread_mutex_destroy(&s->mu);
	dgi_free(s);
}

void dgi_txsvc_get_stats(dgi_txsvc *s, dgi_txsvc_stats *out)
{
	out->granted = atomic_load(&s->granted);
	out->waited = atomic_load(&s->waited);
	out->timeouts = atomic_load(&s->timeouts);
	out->deadlocks = atomic_load(&s->deadlocks);
	out->unlocks = atomic_load(&s->unlocks);
}
