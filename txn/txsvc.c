/*
 * txsvc.c — the transaction service of a node: start and stop, its three
 * threads (the expirer, the detector, the recoverer), the handler table
 * and dispatch, stats, and the admin CLI's listing and kill.  The rest of
 * the service is in the files txsvc_int.h lists, which also documents its
 * records and its locks.  See txsvc.h.
 */
#include "txsvc_int.h"

#include <pthread.h>
#include <time.h>

/* ---- dispatch ---- */

typedef void (*handler_fn)(dgi_txsvc *s, const dg_msg_in *in);

/* Handlers by type (a flat table: type - 128); grid: needs the caches
 * (a bare lock service answers DG_ERR_UNSUPPORTED). */
static const struct handler {
	handler_fn fn;
	bool grid;
} handlers[DGI_MSG_TX_LAST - DGI_MSG_TX_LOCK + 1] = {
#define H(t, f, g) [(t) - DGI_MSG_TX_LOCK] = { f, g }
	H(DGI_MSG_TX_LOCK, dgi_svc_h_lock, false),
	H(DGI_MSG_TX_UNLOCK, dgi_svc_h_rollback, false),
	H(DGI_MSG_TX_ROLLBACK, dgi_svc_h_rollback, false),
	H(DGI_MSG_TX_PREPARE, dgi_svc_h_prepare, true),
	H(DGI_MSG_TX_COMMIT, dgi_svc_h_commit, false),
	H(DGI_MSG_TX_COMMIT_COPY, dgi_svc_h_commit_copy, true),
	H(DGI_MSG_TX_FENCE, dgi_svc_h_fence, false),
	H(DGI_MSG_TX_QUERY, dgi_svc_h_query, false),
	H(DGI_MSG_TX_EDGES, dgi_svc_h_edges, false),
	H(DGI_MSG_TX_KILL, dgi_svc_h_kill, false),
	H(DGI_MSG_TX_LOCK_ALL, dgi_svc_h_lock_all, false),
#undef H
};

void dgi_svc_dispatch(dgi_txsvc *s, const dg_msg_in *in)
{
	uint32_t i = (uint32_t)in->type - DGI_MSG_TX_LOCK;
	if (i >= sizeof(handlers) / sizeof(handlers[0]) || handlers[i].fn == NULL || cut_off(s))
		return;
	if (handlers[i].grid && s->g == NULL)
		dgi_svc_ack(s, in, DG_ERR_UNSUPPORTED, -1);
	else
		handlers[i].fn(s, in);
}

static void on_msg(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	(void)tp;
	dgi_svc_dispatch(ctx, in);
}

/* ---- threads ---- */

/* Sleeps on cv (s->mu held) until woken, a stop, or ms (0: no limit). */
static void bg_sleep(dgi_txsvc *s, pthread_cond_t *cv, uint64_t ms)
{
	if (ms == 0) {
		pthread_cond_wait(cv, &s->mu);
	} else {
		struct timespec ts;
		dgi_abstime_in(&ts, ms);
		pthread_cond_timedwait(cv, &s->mu, &ts);
	}
	atomic_fetch_add_explicit(&s->bg_wakes, 1, memory_order_relaxed);
}

/* Wakes only when a cross-node search is due (dl_next: a lock wait began
 * or goes on, dgi_svc_dl_arm) — an idle node's detector sleeps. */
static void *detector(void *arg)
{
	dgi_thread_name("dg-tx-deadlock");
	dgi_txsvc *s = arg;
	pthread_mutex_lock(&s->mu);
	while (!atomic_load(&s->stopping)) {
		uint64_t now = dgi_now_ms();
		if (s->dl_next == 0 || now < s->dl_next) {
			bg_sleep(s, &s->dl_cv, s->dl_next == 0 ? 0 : s->dl_next - now);
			continue;
		}
		pthread_mutex_unlock(&s->mu);
		dgi_svc_deadlock_tick(s);
		pthread_mutex_lock(&s->mu);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

static void *recoverer(void *arg)
{
	dgi_thread_name("dg-tx-recover");
	dgi_txsvc *s = arg;
	pthread_mutex_lock(&s->mu);
	while (!atomic_load(&s->stopping)) {
		bg_sleep(s, &s->stop_cv, 100);
		if (atomic_load(&s->stopping))
			break;
		pthread_mutex_unlock(&s->mu);
		dgi_svc_recover_scan(s);
		pthread_mutex_lock(&s->mu);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

static void *expirer(void *arg)
{
	dgi_thread_name("dg-tx-expirer");
	dgi_txsvc *s = arg;
	uint64_t last_scan = 0;
	uint32_t grown = 0;
	while (!atomic_load(&s->stopping)) {
		struct timespec ts = { 0, 10 * 1000000L };
		nanosleep(&ts, NULL);
		uint64_t now = dgi_now_ms();
		dgi_locks_expire(s->locks, now);
		dgi_svc_local_expire(s, now);
		dgi_svc_fence_tick(s, now);
		if (now - last_scan >= 200) {
			last_scan = now;
			dgi_svc_expire_records(s, now);
			dgi_txdone_expire(s->done, now);
			uint32_t g = dgi_txdone_grown(s->done);
			if (g != grown) { /* (at most once per doubling) */
				grown = g;
				dgi_log("warn", "TX-DONE-GROW", "remembered=%zu growths=%u "
				    "why=\"more txs finished within 60 s than tx_done_capacity "
				    "(--tx-done-capacity) reserved: memory grew\"",
				    dgi_txdone_count(s->done), g);
			}
		}
	}
	return NULL;
}

/* ---- start / stop ---- */

static const dg_msg_type handled[] = { DGI_MSG_TX_LOCK, DGI_MSG_TX_UNLOCK, DGI_MSG_TX_PREPARE,
	DGI_MSG_TX_COMMIT, DGI_MSG_TX_ROLLBACK, DGI_MSG_TX_COMMIT_COPY, DGI_MSG_TX_FENCE,
	DGI_MSG_TX_QUERY, DGI_MSG_TX_EDGES, DGI_MSG_TX_KILL, DGI_MSG_TX_LOCK_ALL };
#define NHANDLED (sizeof(handled) / sizeof(handled[0]))

/* How long a finished tx is remembered (late and repeated messages,
 * recovery questions: well past any tx timeout; memory grows with the tx
 * rate times this). */
#define DONE_KEEP_MS (60 * 1000)

dg_err dgi_txsvc_start(dg_tp *tp, dgi_grid *g, uint32_t done_capacity, dgi_txsvc **out)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, dgi_svc_define_rows);
	dgi_txsvc *s = dgi_calloc(1, sizeof(*s));
	if (s == NULL)
		return DG_ERR_NOMEM;
	s->tp = tp;
	s->g = g;
	s->self = dg_tp_self(tp);
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->dl_cv, NULL);
	pthread_cond_init(&s->stop_cv, NULL);
	pthread_mutex_init(&s->lmu, NULL);
	pthread_mutex_init(&s->fmu, NULL);
	pthread_mutex_init(&s->live.mu, NULL);
	dg_err e;
	if ((e = dgi_locks_create(0, &s->locks)) != DG_OK || (e = dgi_wfg_create(&s->wfg)) != DG_OK ||
	    (e = dgi_wfg_create(&s->gwfg)) != DG_OK ||
	    (e = dgi_txdone_create(DONE_KEEP_MS, done_capacity, &s->done)) != DG_OK)
		goto fail;
	if (pthread_create(&s->expirer, NULL, expirer, s) != 0) {
		e = DG_ERR_NOMEM;
		goto fail;
	}
	s->expirer_up = true;
	if (pthread_create(&s->detector, NULL, detector, s) != 0) {
		e = DG_ERR_NOMEM;
		goto fail;
	}
	s->detector_up = true;
	if (g != NULL && pthread_create(&s->recoverer, NULL, recoverer, s) != 0) {
		e = DG_ERR_NOMEM;
		goto fail;
	}
	s->recoverer_up = g != NULL;
	for (size_t i = 0; i < NHANDLED; i++)
		dg_tp_handle(tp, handled[i], on_msg, s);
	*out = s;
	return DG_OK;
fail:
	s->tp = NULL;
	dgi_txsvc_stop(s);
	return e;
}

void dgi_txsvc_stop(dgi_txsvc *s)
{
	if (s == NULL)
		return;
	if (s->tp != NULL) {
		for (size_t i = 0; i < NHANDLED; i++)
			dg_tp_handle(s->tp, handled[i], NULL, NULL);
		dg_tp_quiesce(s->tp);
	}
	atomic_store(&s->stopping, true);
	pthread_mutex_lock(&s->mu);
	pthread_cond_broadcast(&s->dl_cv);
	pthread_cond_broadcast(&s->stop_cv);
	pthread_mutex_unlock(&s->mu);
	if (s->expirer_up)
		pthread_join(s->expirer, NULL);
	if (s->detector_up)
		pthread_join(s->detector, NULL);
	if (s->recoverer_up)
		pthread_join(s->recoverer, NULL);
	/* the backups' answers still to come (a node killed with copies in
	 * flight; recovery sends some too): answered now, none running after */
	if (s->tp != NULL)
		dg_tp_cancel(s->tp, dgi_svc_on_backup_answer);
	dgi_member_release(atomic_exchange(&s->m, NULL)); /* no handler runs now */
	dgi_svc_local_expire(s, UINT64_MAX);
	dgi_locks_destroy(s->locks); /* answers every waiter DG_ERR_CLOSED */
	for (uint32_t b = 0; b < NBUCKETS; b++) {
		struct rec *r = s->buckets[b];
		while (r != NULL) {
			struct rec *nx = r->next;
			if (r->body != NULL && r->body != r->inl)
				dgi_free(r->body);
			dgi_free(r);
			r = nx;
		}
	}
	while (s->free_waiters != NULL) {
		struct waiter *nx = s->free_waiters->next_free;
		dgi_free(s->free_waiters);
		s->free_waiters = nx;
	}
	dgi_svc_lock_all_free(s);
	while (s->free_recs != NULL) {
		struct rec *nx = s->free_recs->next;
		dgi_free(s->free_recs);
		s->free_recs = nx;
	}
	if (s->f.t != NULL)
		dg_topology_release(s->f.t);
	dgi_txdone_destroy(s->done);
	dgi_wfg_destroy(s->wfg);
	dgi_wfg_destroy(s->gwfg);
	dgi_free(s->gedges);
	dgi_free(s->edges);
	dgi_free(s->starts);
	dgi_free(s->starts_spare);
	pthread_cond_destroy(&s->dl_cv);
	pthread_cond_destroy(&s->stop_cv);
	pthread_mutex_destroy(&s->mu);
	pthread_mutex_destroy(&s->lmu);
	pthread_mutex_destroy(&s->fmu);
	pthread_mutex_destroy(&s->live.mu);
	dgi_free(s);
}

void dgi_txsvc_get_stats(dgi_txsvc *s, dgi_txsvc_stats *out)
{
	out->granted = atomic_load(&s->granted);
	out->waited = atomic_load(&s->waited);
	out->busy = atomic_load(&s->busy);
	out->timeouts = atomic_load(&s->timeouts);
	out->deadlocks = atomic_load(&s->deadlocks);
	out->unlocks = atomic_load(&s->unlocks);
	out->prepared = atomic_load(&s->prepared);
	out->committed = atomic_load(&s->committed);
	out->rolled_back = atomic_load(&s->rolled_back);
	out->conflicts = atomic_load(&s->conflicts);
	out->backup_prepared = atomic_load(&s->backup_prepared);
	out->backup_committed = atomic_load(&s->backup_committed);
	pthread_mutex_lock(&s->mu);
	out->records = s->nrecs;
	out->starts = s->slive;
	out->bg_wakes = atomic_load(&s->bg_wakes);
	pthread_mutex_unlock(&s->mu);
	pthread_mutex_lock(&s->fmu);
	out->fence_version = s->f.v;
	out->fence_open = s->f.open;
	pthread_mutex_unlock(&s->fmu);
	out->fence_rollbacks = atomic_load(&s->fence_rollbacks);
	out->recovered_commit = atomic_load(&s->recovered_commit);
	out->recovered_rollback = atomic_load(&s->recovered_rollback);
	out->global_deadlocks = atomic_load(&s->global_deadlocks);
	dgi_locks_stats ls;
	dgi_locks_get_stats(s->locks, &ls);
	out->locks_held = ls.locks;
	out->lock_waiters = ls.waiters;
}

dg_tp *dgi_txsvc_tp(dgi_txsvc *s)
{
	return s->tp;
}

dgi_grid *dgi_txsvc_grid(dgi_txsvc *s)
{
	return s->g;
}

uint64_t dgi_txsvc_self(dgi_txsvc *s)
{
	return s->self;
}

dgi_txnear_stats *dgi_txsvc_near(dgi_txsvc *s)
{
	return &s->near;
}

dgi_txnear_live *dgi_txsvc_live(dgi_txsvc *s)
{
	return &s->live;
}

/* ---- the admin CLI: dgctl tx list / tx kill ---- */

static const char *rec_state_name(const struct rec *r)
{
	switch (r->st) {
	case R_ACTIVE: return "ACTIVE";
	case R_PREPARING: return "PREPARING";
	case R_PREPARED: return "PREPARED";
	case R_COMMITTING: return "COMMITTING";
	case R_BACKUP: return "PREPARED"; /* keeps the entries until the commit */
	default: return "UNKNOWN";
	}
}

#define KEYS_FROM_LOCKS UINT32_MAX

static void rec_info(const struct rec *r, uint64_t now, dgi_tx_info *o)
{
	memset(o, 0, sizeof(*o));
	o->id = r->id.seq;
	o->near = r->id.node;
	o->role = r->role == ROLE_BACKUP ? 2 : 1;
	o->state = rec_state_name(r);
	o->concurrency = o->isolation = -1;
	o->age_ms = now > r->made_ms ? now - r->made_ms : 0;
	o->timeout_ms = r->deadline > r->made_ms ? (uint32_t)(r->deadline - r->made_ms) : 0;
	o->keys = KEYS_FROM_LOCKS; /* no entries yet: its locks say (outside s->mu) */
	dgi_msg_tx_prepare m;
	dg_reader rd;
	uint32_t count;
	if (r->body != NULL && dgi_svc_rec_ents(r, &m, &rd, &count) == DG_OK)
		o->keys = count;
}

/* The participant records, up to cap into out; returns how many there are. */
static size_t list_records(dgi_txsvc *s, dgi_tx_info *out, size_t cap)
{
	size_t n = 0;
	uint64_t now = dgi_now_ms();
	pthread_mutex_lock(&s->mu);
	for (uint32_t b = 0; b < NBUCKETS; b++)
		for (const struct rec *r = s->buckets[b]; r != NULL; r = r->next, n++)
			if (n < cap)
				rec_info(r, now, &out[n]);
	pthread_mutex_unlock(&s->mu);
	for (size_t i = 0; i < n && i < cap; i++)
		if (out[i].keys == KEYS_FROM_LOCKS) {
			dgi_txid id = { out[i].near, out[i].id };
			out[i].keys = dgi_locks_tx_count(s->locks, &id);
		}
	return n;
}

size_t dgi_tx_list(dgi_txsvc *s, dgi_tx_info *out, size_t cap)
{
	if (s == NULL || (out == NULL && cap > 0))
		return 0;
	size_t n = dgi_tx_near_list(s, out, cap);
	return n + list_records(s, n < cap ? out + n : NULL, n < cap ? cap - n : 0);
}

/* How long a kill waits for the near node's answer. */
#define KILL_WAIT_MS 5000

dg_err dgi_tx_kill(dgi_txsvc *s, uint64_t near, uint64_t id)
{
	if (s == NULL || near == 0 || id == 0)
		return DG_ERR_INVAL;
	if (near == s->self)
		return dgi_tx_near_kill(s, id);
	if (!dgi_txsvc_alive(s, near))
		return DG_ERR_NOT_FOUND; /* its txs are being finished by recovery */
	dgi_msg_tx_ctl m = { (int64_t)near, (int64_t)id, DGI_TXK_NEAR, 0, 0 }, r;
	dg_err e = dg_tp_call(s->tp, near, DGI_MSG_TX_KILL, &m, KILL_WAIT_MS, &r, NULL);
	return e != DG_OK ? e : (dg_err)r.res;
}
