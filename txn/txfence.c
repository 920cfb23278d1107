/*
 * txfence.c — a node woken from a pause (its topology may be stale: locks
 * and prepares are refused), and the topology fence (txn/README.md,
 * "Topology changes"): TX_FENCE reports, the fence's progress on the
 * expirer thread, and which nodes are in this node's topology.
 */
#include "txsvc_int.h"

#include <stdio.h>

/* ---- a node woken from a pause ---- */

_Atomic bool dgi_tx_test_ignore_pause;
_Atomic dgi_tx_test_hook dgi_tx_test_fence_window;
_Atomic dgi_tx_test_hook dgi_tx_test_prepare_locked;

/* Was this node just paused (PROTOCOL.md, "A paused node")?  Its view of
 * the cluster may be stale: the others may have removed it and moved its
 * partitions to its backups, which lock and write under a newer topology.
 * Requests that waited in its sockets meanwhile (a lock, a prepare) must
 * not be granted on its old topology: they are refused with
 * DG_ERR_NOT_READY (the near maps the key again) until the pause is over
 * — a member vouched for it, or it learnt it was removed and owns nothing. */
bool dgi_svc_paused(dgi_txsvc *s)
{
	struct dg_member *m = atomic_load_explicit(&s->m, memory_order_acquire);
	if (m == NULL || atomic_load_explicit(&dgi_tx_test_ignore_pause, memory_order_relaxed))
		return false;
	/* or without a majority's lease (PROTOCOL.md, "Majority"): the others
	 * may be promoting new owners of its keys */
	return dg_member_serving(m) != DG_OK || dg_member_suspect(m);
}

bool dgi_txsvc_segmented(dgi_txsvc *s)
{
	return s != NULL && dg_member_segmented(atomic_load_explicit(&s->m, memory_order_acquire));
}

void dgi_svc_stale_refused(dgi_txsvc *s, const char *what, uint64_t node, uint64_t seq)
{
	atomic_fetch_add(&s->stale_refused, 1);
	uint64_t now = dgi_now_ms(), last = atomic_load(&s->stale_logged_ms);
	if (now - last < 1000 || !atomic_compare_exchange_strong(&s->stale_logged_ms, &last, now))
		return;
	dgi_log("warn", "TX-STALE-REFUSED", "what=%s tx=%016llx:%llu count=%u "
	    "why=\"this node was paused: its topology may be stale\"", what,
	    (unsigned long long)node, (unsigned long long)seq,
	    atomic_exchange(&s->stale_refused, 0));
}

/* ---- the topology fence ---- */

/* May a lock or prepare under topology version v be granted here? */
dg_err dgi_svc_fence_check(dgi_txsvc *s, int64_t v)
{
	if (!s->fenced)
		return DG_OK;
	pthread_mutex_lock(&s->fmu);
	bool ok = s->f.open && v == s->f.v;
	bool behind = v >= s->f.v; /* (read under fmu: on_topology writes it) */
	pthread_mutex_unlock(&s->fmu);
	if (ok)
		return DG_OK;
	return behind ? DG_ERR_NOT_READY : DG_ERR_REMAP;
}

static uint32_t fence_count(const struct fence *f)
{
	return f->t != NULL ? f->t->count : 0;
}

static void fence_mark(struct fence *f, uint64_t from)
{
	uint32_t n = fence_count(f);
	for (uint32_t i = 0; i < n; i++)
		if (f->t->nodes[i].id == from)
			f->got[i] = true;
	bool all = true;
	for (uint32_t i = 0; i < n && all; i++)
		all = f->got[i];
	f->open = all;
}

/* The topology the fence is at, held (dg_topology_release it), or NULL:
 * the nodes to tell or ask, without holding fmu over the sends and waits. */
dg_topology *dgi_svc_fence_topology(dgi_txsvc *s)
{
	pthread_mutex_lock(&s->fmu);
	dg_topology *t = s->f.t;
	if (t != NULL)
		atomic_fetch_add(&t->refs, 1);
	pthread_mutex_unlock(&s->fmu);
	return t;
}

static void on_topology(void *ctx, const dg_topology *old, const dg_topology *now)
{
	dgi_txsvc *s = ctx;
	/* out of this version, or in it under another join order than in the
	 * one before (removed and back): every record is the past's */
	const dg_topology_node *was = old != NULL ? dg_topology_find(old, s->self) : NULL;
	const dg_topology_node *is = dg_topology_find(now, s->self);
	bool reborn = is == NULL || (was != NULL && was->order != is->order);
	dg_topology *prev = NULL;
	pthread_mutex_lock(&s->fmu);
	struct fence *f = &s->f;
	if (now->version > f->v && now->count <= DG_TOPOLOGY_MAX) {
		f->v = now->version;
		prev = f->t;
		atomic_fetch_add(&((dg_topology *)now)->refs, 1);
		f->t = (dg_topology *)now;
		memset(f->got, 0, now->count * sizeof(f->got[0]));
		f->open = false;
		f->reported = false;
		f->started_ms = dgi_now_ms();
		uint32_t k = 0;
		for (uint32_t i = 0; i < f->nearly; i++) {
			if (f->early[i].v == f->v)
				fence_mark(f, f->early[i].from);
			else if (f->early[i].v > f->v)
				f->early[k++] = f->early[i];
		}
		f->nearly = k;
	}
	pthread_mutex_unlock(&s->fmu);
	if (prev != NULL)
		dg_topology_release(prev);
	if (reborn && atomic_load(&s->fenced))
		dgi_svc_forget_records(s, now->version);
}

/* A report (TX_FENCE v) from in->from.  One it sends again, for the
 * version this node's fence is open at, says its own fence is still shut:
 * it may be waiting for this node's report, lost on the way (a connection
 * broken or not up yet) — and this node, open, no longer repeats it.  It
 * answers with its report then (only an open node answers, only a repeat:
 * no echo between two). */
void dgi_svc_h_fence(dgi_txsvc *s, const dg_msg_in *in)
{
	const dgi_msg_tx_ctl *m = in->body;
	bool answer = false;
	pthread_mutex_lock(&s->fmu);
	struct fence *f = &s->f;
	int64_t v = f->v;
	if (m->value == f->v) {
		uint32_t n = fence_count(f);
		for (uint32_t i = 0; i < n; i++)
			if (f->t->nodes[i].id == in->from)
				answer = f->got[i] && f->open && f->reported;
		fence_mark(f, in->from);
	} else if (m->value > f->v && f->nearly < FENCE_EARLY) {
		f->early[f->nearly].v = m->value;
		f->early[f->nearly++].from = in->from;
	}
	pthread_mutex_unlock(&s->fmu);
	if (answer) {
		dgi_msg_tx_ctl r = { 0, 0, 0, 0, v };
		dg_tp_send(s->tp, in->from, DGI_MSG_TX_FENCE, &r);
	}
}

bool dgi_txsvc_fence_open(dgi_txsvc *s, int64_t v)
{
	pthread_mutex_lock(&s->fmu);
	bool open = !s->fenced || (s->f.v == v && s->f.open);
	pthread_mutex_unlock(&s->fmu);
	return open;
}

void dgi_txsvc_near_enter(dgi_txsvc *s, int64_t v)
{
	pthread_mutex_lock(&s->fmu);
	struct fence *f = &s->f;
	uint32_t i = 0;
	while (i < f->nnear && f->near[i].v != v)
		i++;
	if (i == f->nnear && i < sizeof(f->near) / sizeof(f->near[0])) {
		f->near[i].v = v;
		f->near[i].n = 0;
		f->nnear++;
	}
	if (i < f->nnear)
		f->near[i].n++;
	pthread_mutex_unlock(&s->fmu);
}

void dgi_txsvc_near_leave(dgi_txsvc *s, int64_t v)
{
	pthread_mutex_lock(&s->fmu);
	struct fence *f = &s->f;
	for (uint32_t i = 0; i < f->nnear; i++)
		if (f->near[i].v == v) {
			if (--f->near[i].n == 0)
				f->near[i] = f->near[--f->nnear];
			break;
		}
	pthread_mutex_unlock(&s->fmu);
}

/* The fence's progress, from the deadline thread: report once nothing of
 * an older version is in flight here; past the timeout, roll back what of
 * it has not prepared; repeat the report while the fence is not open (a
 * report lost to a broken connection). */
void dgi_svc_fence_tick(dgi_txsvc *s, uint64_t now)
{
	pthread_mutex_lock(&s->fmu);
	struct fence *f = &s->f;
	int64_t v = f->v;
	bool resend = f->reported && !f->open && now - f->sent_ms >= 300;
	bool check = v != 0 && !f->reported;
	uint32_t busy = 0;
	for (uint32_t i = 0; i < f->nnear; i++)
		if (f->near[i].v < v)
			busy += f->near[i].n;
	uint64_t started = f->started_ms; /* (read below without fmu) */
	bool late = now - started >= s->fence_timeout_ms;
	/* a fence still shut after 3 s: say what it waits for (every 2 s) */
	if (v != 0 && !f->open && now - f->started_ms >= 3000 && now - f->logged_ms >= 2000) {
		f->logged_ms = now;
		char miss[256];
		size_t off = 0;
		miss[0] = 0;
		for (uint32_t i = 0; i < fence_count(f) && off + 20 < sizeof(miss); i++)
			if (!f->got[i])
				off += (size_t)snprintf(miss + off, sizeof(miss) - off, "%s%016llx",
				    off ? "," : "", (unsigned long long)f->t->nodes[i].id);
		dgi_log("warn", "TX-FENCE-WAIT", "topology=%lld waited_ms=%llu "
		    "reported=%d near_in_flight=%u waiting_for=%s", (long long)v,
		    (unsigned long long)(now - f->started_ms), f->reported, busy, miss);
	}
	pthread_mutex_unlock(&s->fmu);
	if (!check && !resend)
		return;
	dgi_txid undo[32];
	int nundo = 0;
	if (check) {
		pthread_mutex_lock(&s->mu);
		for (uint32_t b = 0; b < NBUCKETS; b++)
			for (struct rec *r = s->buckets[b]; r != NULL; r = r->next) {
				if (r->topver == 0 || r->topver >= v)
					continue;
				busy++;
				if (late && r->role == ROLE_PRIMARY && nundo < 32 &&
				    (r->st == R_ACTIVE || r->st == R_PREPARING))
					undo[nundo++] = r->id;
			}
		pthread_mutex_unlock(&s->mu);
	}
	for (int i = 0; i < nundo; i++) {
		/* a tx of an older topology holds the fence: roll it back here
		 * (its near learns it at its next request) — unless it got as
		 * far as preparing meanwhile */
		struct ended x;
		bool ended = dgi_svc_end_role(s, &undo[i], ROLE_PRIMARY, 0, DGI_TXS_ROLLED_BACK,
		    ST(R_ACTIVE) | ST(R_PREPARING), &x);
		if (ended && !x.had)
			ns_free(&x.bk);
		if (!ended || !x.had)
			continue;
		dgi_log("warn", "TX-FENCE-ROLLBACK", "tx=%016llx:%llu topology=%lld",
		    (unsigned long long)undo[i].node, (unsigned long long)undo[i].seq, (long long)v);
		atomic_fetch_add(&s->fence_rollbacks, 1);
		if (x.pending)
			dgi_svc_ack(s, &x.req, DG_ERR_TX_ROLLED_BACK, -1);
		/* a prepare already forwarded: its backups drop what they kept
		 * (else their records would hold the fence, the primary alive) */
		dgi_msg_tx_ctl fw = { (int64_t)undo[i].node, (int64_t)undo[i].seq, DGI_TXP_BACKUP, 0, 0 };
		for (uint32_t k = 0; k < x.bk.n; k++)
			dgi_txsvc_send(s, x.bk.ids[k], DGI_MSG_TX_ROLLBACK, &fw);
		ns_free(&x.bk);
	}
	if (check && busy > 0) {
		if (now - started >= 3000 && now - s->blocked_logged_ms >= 2000) {
			s->blocked_logged_ms = now;
			pthread_mutex_lock(&s->mu);
			for (uint32_t b = 0; b < NBUCKETS; b++)
				for (struct rec *r = s->buckets[b]; r != NULL; r = r->next)
					if (r->topver != 0 && r->topver < v)
						dgi_log("warn", "TX-FENCE-HELD", "topology=%lld "
						    "tx=%016llx:%llu role=%d state=%d from=%016llx topver=%lld",
						    (long long)v, (unsigned long long)r->id.node,
						    (unsigned long long)r->id.seq, r->role, r->st,
						    (unsigned long long)r->from, (long long)r->topver);
			pthread_mutex_unlock(&s->mu);
		}
		return;
	}
	dg_topology *t = NULL;
	pthread_mutex_lock(&s->fmu);
	if (f->v == v) {
		if (!f->reported) {
			f->reported = true;
			fence_mark(f, s->self);
		}
		f->sent_ms = now;
		if ((t = f->t) != NULL)
			atomic_fetch_add(&t->refs, 1);
	}
	pthread_mutex_unlock(&s->fmu);
	dgi_msg_tx_ctl m = { 0, 0, 0, 0, v };
	for (uint32_t i = 0; t != NULL && i < t->count; i++)
		if (t->nodes[i].id != s->self)
			dg_tp_send(s->tp, t->nodes[i].id, DGI_MSG_TX_FENCE, &m);
	if (t != NULL)
		dg_topology_release(t);
}

void dgi_txsvc_topology(dgi_txsvc *s, const dg_topology *t)
{
	on_topology(s, NULL, t);
}

dg_err dgi_txsvc_joined(dgi_txsvc *s, struct dg_member *m, uint32_t fence_timeout_ms)
{
	pthread_mutex_lock(&s->fmu);
	s->fence_timeout_ms = fence_timeout_ms ? fence_timeout_ms : 1000;
	pthread_mutex_unlock(&s->fmu);
	dg_topology *t = dg_member_topology(m);
	if (t != NULL) {
		on_topology(s, NULL, t);
		dg_topology_release(t);
	}
	pthread_mutex_lock(&s->fmu);
	s->fenced = s->g != NULL;
	/* held: the handlers read it (paused) until dgi_txsvc_stop */
	dgi_member_release(atomic_exchange(&s->m, dgi_member_hold(m)));
	pthread_mutex_unlock(&s->fmu);
	return dg_member_listen(m, on_topology, s);
}

bool dgi_txsvc_gone(dgi_txsvc *s, uint64_t node)
{
	pthread_mutex_lock(&s->fmu);
	bool gone = s->fenced && s->f.v != 0 && s->f.t != NULL &&
	    dg_topology_find(s->f.t, node) == NULL;
	pthread_mutex_unlock(&s->fmu);
	return gone;
}

bool dgi_txsvc_alive(dgi_txsvc *s, uint64_t node)
{
	pthread_mutex_lock(&s->fmu);
	bool alive = s->f.t != NULL && dg_topology_find(s->f.t, node) != NULL;
	pthread_mutex_unlock(&s->fmu);
	return alive;
}
