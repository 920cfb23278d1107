/*
 * txrecover.c — what became of a tx: TX_QUERY's answers (this node's
 * records and remembered outcomes, by role) and questions, the near
 * side's outcomes they answer from; and recovery, which finishes the txs
 * whose near node or primary left, or whose records outlived their
 * timeout, by asking the others.
 */
#include "txsvc_int.h"

#include <time.h>

/* ---- TX_QUERY ---- */

static int done_state(dgi_txsvc *s, const dgi_txid *tx, int role, uint64_t from)
{
	dgi_txid key = dgi_svc_role_key(tx, role, from);
	dgi_txs out;
	if (!dgi_txdone_get(s->done, &key, &out))
		return DGI_TXQ_NONE;
	return out == DGI_TXS_COMMITTED ? DGI_TXQ_COMMITTED : DGI_TXQ_ROLLED_BACK;
}

static int rec_state(const struct rec *r)
{
	switch (r->st) {
	case R_ACTIVE: return DGI_TXQ_ACTIVE;
	case R_PREPARING: return DGI_TXQ_PREPARING;
	case R_PREPARED: return DGI_TXQ_PREPARED;
	case R_COMMITTING: return DGI_TXQ_COMMITTING;
	case R_BACKUP: return DGI_TXQ_ACTIVE;
	default: return DGI_TXQ_NONE;
	}
}

static int64_t query_local(dgi_txsvc *s, const dgi_txid *tx, uint64_t origin)
{
	int prim, bk = DGI_TXQ_NONE, near;
	pthread_mutex_lock(&s->mu);
	struct rec *r = dgi_svc_rec_find(s, tx, ROLE_PRIMARY, 0);
	prim = r != NULL ? rec_state(r) : DGI_TXQ_NONE;
	if (origin != 0) {
		struct rec *b = dgi_svc_rec_find(s, tx, ROLE_BACKUP, origin);
		struct rec *t = dgi_svc_rec_find(s, tx, ROLE_TAKEOVER, origin);
		bk = t != NULL ? rec_state(t) : b != NULL ? DGI_TXQ_ACTIVE : DGI_TXQ_NONE;
	}
	pthread_mutex_unlock(&s->mu);
	if (prim == DGI_TXQ_NONE)
		prim = done_state(s, tx, ROLE_PRIMARY, 0);
	if (origin != 0 && bk == DGI_TXQ_NONE) {
		bk = done_state(s, tx, ROLE_TAKEOVER, origin);
		if (bk == DGI_TXQ_NONE)
			bk = done_state(s, tx, ROLE_BACKUP, origin);
		if (bk == DGI_TXQ_NONE)
			bk = done_state(s, tx, ROLE_TAKEN, origin); /* committed (elsewhere) */
	}
	near = done_state(s, tx, ROLE_NEAR, 0);
	if (near == DGI_TXQ_COMMITTED && done_state(s, tx, ROLE_NEAR, 1) == DGI_TXQ_COMMITTED)
		near = DGI_TXQ_COMMITTING; /* decided, not every participant confirmed */
	return prim | (bk << 8) | (near << 16);
}

void dgi_svc_h_query(dgi_txsvc *s, const dg_msg_in *in)
{
	const dgi_msg_tx_ctl *m = in->body;
	dgi_txid tx = { (uint64_t)m->tx_node, (uint64_t)m->tx_seq };
	dgi_msg_tx_ctl r = { m->tx_node, m->tx_seq, 0, DG_OK, query_local(s, &tx, (uint64_t)m->value) };
	dgi_svc_reply(s, in, DGI_MSG_TX_ACK, &r);
}

int64_t dgi_txsvc_query(dgi_txsvc *s, uint64_t to, const dgi_txid *tx, uint64_t origin,
    uint32_t timeout_ms)
{
	if (cut_off(s))
		return -1;
	if (to == s->self)
		return query_local(s, tx, origin);
	dgi_msg_tx_ctl m = { (int64_t)tx->node, (int64_t)tx->seq, 0, 0, (int64_t)origin }, r;
	if (dg_tp_call(s->tp, to, DGI_MSG_TX_QUERY, &m, timeout_ms, &r, NULL) != DG_OK ||
	    r.res != DG_OK)
		return -1;
	return r.value;
}

void dgi_txsvc_near_done(dgi_txsvc *s, const dgi_txid *tx, bool committed, bool confirmed)
{
	dgi_txid key = dgi_svc_role_key(tx, ROLE_NEAR, 0);
	dgi_txdone_put(s->done, &key, committed ? DGI_TXS_COMMITTED : DGI_TXS_ROLLED_BACK,
	    dgi_now_ms());
	if (committed && !confirmed) {
		dgi_txid u = dgi_svc_role_key(tx, ROLE_NEAR, 1); /* "decided, not confirmed" */
		dgi_txdone_put(s->done, &u, DGI_TXS_COMMITTED, dgi_now_ms());
	}
}

/* ---- recovery ----
 * A tx whose near node left, or whose record outlived its timeout by
 * RECOVER_GRACE_MS, is finished by its participants: a primary that had
 * not prepared rolls back; a prepared primary, and a backup whose primary
 * left too, ask the near node (when it is alive) or every node what became
 * of the tx — committed anywhere (or decided by the near): commit (a
 * backup takes over: applies the entries it keeps and copies them to the
 * keys' owners); nobody committed and the near left: roll back (its commit
 * call never returned).  Versions make a repeated apply harmless, and the
 * topology fence keeps new locks off those keys until it is done. */
#define RECOVER_GRACE_MS 3000
#define RECOVER_MAX 32

struct cand {
	dgi_txid id;
	int role, st;
	uint64_t from;
	bool near_left;
	int64_t nparts;             /* primaries the tx prepared on (0: unknown) */
	uint64_t incarn;            /* s->incarn when found: forgotten since if not */
};

/* Ends a record that will not commit (if still as it was found): releases,
 * tells its backups. */
static void recover_rollback(dgi_txsvc *s, const struct cand *c)
{
	struct ended x;
	if (!dgi_svc_end_role(s, &c->id, c->role, c->from, DGI_TXS_ROLLED_BACK, ST(c->st), &x))
		return;
	dgi_msg_tx_ctl fw = { (int64_t)c->id.node, (int64_t)c->id.seq, DGI_TXP_BACKUP, 0, 0 };
	for (uint32_t i = 0; c->role == ROLE_PRIMARY && i < x.bk.n; i++)
		dgi_txsvc_send(s, x.bk.ids[i], DGI_MSG_TX_ROLLBACK, &fw);
	ns_free(&x.bk);
	if (!x.had)
		return;
	atomic_fetch_add(&s->recovered_rollback, 1);
	dgi_log("warn", "TX-RECOVERED", "outcome=rollback tx=%016llx:%llu role=%d",
	    (unsigned long long)c->id.node, (unsigned long long)c->id.seq, c->role);
}

/* Commits a prepared primary record, or takes over a backup's entries. */
static void recover_commit(dgi_txsvc *s, const struct cand *c)
{
	pthread_mutex_lock(&s->mu);
	struct rec *r = dgi_svc_rec_find(s, &c->id, c->role, c->from);
	bool go = r != NULL && r->st == c->st && s->incarn == c->incarn;
	if (go) {
		r->st = R_COMMITTING;
		r->have_req = false;
		if (c->role == ROLE_BACKUP) {
			r->role = ROLE_TAKEOVER; /* applies as the keys' primary would */
			r->flags |= DGI_TXP_ONE_PHASE;
		}
		r->refs++;
	}
	pthread_mutex_unlock(&s->mu);
	if (!go)
		return;
	if (c->role == ROLE_BACKUP) {
		dgi_lock_release_all(s->locks, &c->id); /* (holds none: nothing to wait for) */
		/* the backup's own memory of these entries: committed */
		dgi_txid bkey = dgi_svc_role_key(&c->id, ROLE_BACKUP, c->from);
		dgi_txdone_put(s->done, &bkey, DGI_TXS_COMMITTED, dgi_now_ms());
	}
	dgi_svc_commit_apply(s, r);
	pthread_mutex_lock(&s->mu);
	dgi_svc_rec_unref(s, r);
	pthread_mutex_unlock(&s->mu);
	atomic_fetch_add(&s->recovered_commit, 1);
	dgi_log("warn", "TX-RECOVERED", "outcome=commit tx=%016llx:%llu role=%d",
	    (unsigned long long)c->id.node, (unsigned long long)c->id.seq, c->role);
}

/* What the cluster knows of c's tx: 1 commit, 2 commit and the near node
 * confirmed every participant applied it, 0 roll back, -1 not yet. */
static int recover_decide(dgi_txsvc *s, const struct cand *c)
{
	if (!c->near_left) {
		int64_t q = dgi_txsvc_query(s, c->id.node, &c->id, 0, 2000);
		int near = q >= 0 ? (int)((q >> 16) & 0xff) : DGI_TXQ_NONE;
		if (near == DGI_TXQ_COMMITTED)
			return 2;
		if (near == DGI_TXQ_COMMITTING)
			return 1; /* decided, gave up confirming: the participants finish it */
		return near == DGI_TXQ_ROLLED_BACK ? 0 : -1;
	}
	dg_topology *t = dgi_svc_fence_topology(s);
	uint32_t n = t != NULL ? t->count : 0;
	/* the near node left: committed anywhere, commit; rolled back
	 * anywhere, roll back; else commit iff every primary prepared (the
	 * near could have decided either way only from there on, and no one
	 * heard a decision) */
	int64_t prepared = c->role == ROLE_PRIMARY ? 1 : 0; /* this node's record */
	int d = -2;
	for (uint32_t i = 0; i < n && d == -2; i++) {
		if (t->nodes[i].id == s->self)
			continue;
		int64_t q = dgi_txsvc_query(s, t->nodes[i].id, &c->id,
		    c->role == ROLE_BACKUP ? c->from : 0, 2000);
		int prim = (int)(q & 0xff), bk = (int)((q >> 8) & 0xff);
		if (q < 0)
			d = -1; /* a node did not answer: ask again later */
		else if (prim == DGI_TXQ_COMMITTED || prim == DGI_TXQ_COMMITTING ||
		    bk == DGI_TXQ_COMMITTED)
			d = 1;
		else if (prim == DGI_TXQ_ROLLED_BACK)
			d = 0;
		else
			prepared += prim == DGI_TXQ_PREPARED;
	}
	if (t != NULL)
		dg_topology_release(t);
	if (d != -2)
		return d;
	return c->role == ROLE_PRIMARY && c->nparts > 1 && prepared >= c->nparts ? 1 : 0;
}

_Atomic uint32_t dgi_tx_recover_stall_ms;

void dgi_svc_recover_scan(dgi_txsvc *s)
{
	/* tests: a round as slow as one whose questions wait for nodes that
	 * do not answer (2 s each) */
	uint64_t t0 = dgi_now_ms();
	while (dgi_now_ms() - t0 < atomic_load(&dgi_tx_recover_stall_ms) &&
	    !atomic_load(&s->stopping)) {
		struct timespec ts = { 0, 10 * 1000000L };
		nanosleep(&ts, NULL);
	}
	struct cand cs[RECOVER_MAX];
	int n = 0;
	uint64_t now = dgi_now_ms();
	pthread_mutex_lock(&s->mu);
	for (uint32_t b = 0; b < NBUCKETS && n < RECOVER_MAX; b++)
		for (struct rec *r = s->buckets[b]; r != NULL && n < RECOVER_MAX; r = r->next) {
			if (r->dead || r->role == ROLE_TAKEOVER || r->st == R_COMMITTING)
				continue;
			bool stale = r->deadline != 0 && now > r->deadline + RECOVER_GRACE_MS;
			cs[n] = (struct cand){ r->id, r->role, r->st, r->from, false, 0, s->incarn };
			dgi_msg_tx_prepare pm;
			if (r->body != NULL && dg_msg_decode(DGI_MSG_TX_PREPARE, NULL, r->body, r->blen,
			    &pm) == DG_OK)
				cs[n].nparts = pm.nparts;
			if (r->role == ROLE_PRIMARY && r->st == R_PREPARED && stale)
				n++;
			else if (r->role == ROLE_BACKUP && (stale ||
			    (s->fenced && !dgi_txsvc_alive(s, r->from))))
				n++; /* its primary left: ask at once (the fence waits for it) */
			else if (r->role == ROLE_PRIMARY && (r->st == R_ACTIVE || r->st == R_PREPARED) &&
			    s->fenced && !dgi_txsvc_alive(s, r->id.node))
				n++; /* its near node left */
		}
	pthread_mutex_unlock(&s->mu);
	for (int i = 0; i < n; i++) {
		struct cand *c = &cs[i];
		pthread_mutex_lock(&s->mu);
		bool forgotten = s->incarn != c->incarn;
		pthread_mutex_unlock(&s->mu);
		if (forgotten)
			break; /* every record found is gone (dgi_svc_forget_records) */
		c->near_left = s->fenced && !dgi_txsvc_alive(s, c->id.node);
		bool stale_only = !c->near_left;
		if (c->role == ROLE_PRIMARY && c->st == R_ACTIVE) {
			if (c->near_left)
				recover_rollback(s, c); /* never prepared: nothing to keep */
			continue;
		}
		if (c->role == ROLE_BACKUP && dgi_txsvc_alive(s, c->from) && stale_only) {
			/* its primary is alive and finishes it — unless it ended the
			 * tx without a word reaching this node (a lost message) or
			 * forgot it: ask it */
			int64_t q = dgi_txsvc_query(s, c->from, &c->id, 0, 2000);
			int prim = q >= 0 ? (int)(q & 0xff) : -1;
			if (prim == DGI_TXQ_ROLLED_BACK || prim == DGI_TXQ_COMMITTED) {
				/* rolled back: drop; committed there: its copies (or the
				 * near's re-sends of them) are the owners' — applying the
				 * kept entries anew could overwrite later writes */
				if (dgi_svc_end_role(s, &c->id, ROLE_BACKUP, c->from, prim == DGI_TXQ_COMMITTED ?
				    DGI_TXS_COMMITTED : DGI_TXS_ROLLED_BACK, ST(R_BACKUP), NULL))
					dgi_log("warn", "TX-RECOVERED", "outcome=forgotten "
					    "tx=%016llx:%llu role=%d why=\"its primary %s it\"",
					    (unsigned long long)c->id.node, (unsigned long long)c->id.seq,
					    c->role, prim == DGI_TXQ_COMMITTED ? "committed" : "rolled back");
				continue;
			}
			if (prim != DGI_TXQ_NONE)
				continue; /* still at it (or no answer: ask again) */
			/* it knows nothing of the tx: the near node decides, as when
			 * the primary left */
		}
		/* (a backup whose primary left, its near alive: the near's answer
		 * decides — committed: take over; rolled back: drop; deciding:
		 * ask again next round) */
		if (c->role == ROLE_PRIMARY && stale_only) {
			pthread_mutex_lock(&s->mu);
			struct rec *r = dgi_svc_rec_find(s, &c->id, c->role, c->from);
			bool stale = r != NULL && r->deadline != 0 &&
			    now > r->deadline + RECOVER_GRACE_MS;
			pthread_mutex_unlock(&s->mu);
			if (!stale)
				continue;
		}
		int d = recover_decide(s, c);
		if (d == 2 && c->role == ROLE_PRIMARY) {
			/* the same for a prepared primary the near went round (its
			 * resends reached the keys' later primaries): release, and
			 * let its backups forget their records too (an empty copy) */
			struct ended x;
			if (dgi_svc_end_role(s, &c->id, ROLE_PRIMARY, 0, DGI_TXS_COMMITTED, ST(R_PREPARED), &x) &&
			    x.had) {
				dg_buf eb;
				dg_buf_init(&eb);
				dg_writer w;
				dg_writer_init(&w, dgi_txwire_registry(), &eb);
				if (dg_write_list_begin(&w, 0) == DG_OK && dg_write_end(&w) == DG_OK) {
					int64_t tv = dgi_grid_topver(s->g);
					dgi_msg_tx_prepare cp = { (int64_t)c->id.node, (int64_t)c->id.seq, 0, 0,
						tv, 0, (int64_t)s->self, 0, 0, tv, { eb.data, (uint32_t)eb.len } };
					for (uint32_t k = 0; k < x.bk.n; k++)
						dgi_txsvc_send(s, x.bk.ids[k], DGI_MSG_TX_COMMIT_COPY, &cp);
				}
				dg_buf_free(&eb);
				ns_free(&x.bk);
				if (x.pending)
					dgi_svc_ack(s, &x.req, DG_ERR_NOT_READY, -1);
				dgi_log("warn", "TX-RECOVERED", "outcome=forgotten tx=%016llx:%llu "
				    "role=%d why=\"committed and confirmed by its near node\"",
				    (unsigned long long)c->id.node, (unsigned long long)c->id.seq, c->role);
			}
		} else if (d == 2) {
			/* the near node saw every participant apply it (its resends
			 * made the keys' primaries apply it and copy it here).
			 * Applying the kept entries again (new versions) would
			 * overwrite whatever later txs wrote: only forget them */
			dgi_svc_finish_role(s, &c->id, ROLE_BACKUP, c->from, DGI_TXS_COMMITTED);
		} else if (d >= 1) {
			recover_commit(s, c);
		} else if (d == 0) {
			recover_rollback(s, c);
		}
	}
}
