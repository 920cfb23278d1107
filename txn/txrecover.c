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
	bool taken = false;
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
			taken = (bk = done_state(s, tx, ROLE_TAKEN, origin)) != DGI_TXQ_NONE;
		/* (committed elsewhere: another node took the origin's keys over) */
	}
	near = done_state(s, tx, ROLE_NEAR, 0);
	if (near == DGI_TXQ_COMMITTED && done_state(s, tx, ROLE_NEAR, 1) == DGI_TXQ_COMMITTED)
		near = DGI_TXQ_COMMITTING; /* decided, not every participant confirmed */
	bool copied = done_state(s, tx, ROLE_COPIED, 0) == DGI_TXQ_COMMITTED;
	return prim | (bk << 8) | (near << 16) | (taken ? DGI_TXQ_TAKEN_ONLY : 0) |
	    (copied ? DGI_TXQ_COPIED : 0);
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

static int64_t query_memo(dgi_txsvc *s, struct dgi_txq_memo *m, uint64_t to,
    const dgi_txid *tx, uint64_t origin, uint32_t timeout_ms)
{
	for (uint32_t i = 0; m != NULL && i < m->n; i++)
		if (m->node[i] == to && m->origin[i] == origin)
			return m->ans[i];
	int64_t q = timeout_ms > 0 ? dgi_txsvc_query(s, to, tx, origin, timeout_ms) : -1;
	if (m != NULL && m->n < DGI_TXQ_MEMO) {
		m->node[m->n] = to;
		m->origin[m->n] = origin;
		m->ans[m->n++] = q;
	}
	return q;
}

int dgi_txsvc_owner_applied(dgi_txsvc *s, struct dgi_txq_memo *m, uint32_t cache_id,
    uint32_t part, const dgi_txid *tx, uint64_t origin, uint64_t skip, bool want_resender,
    uint32_t timeout_ms, uint64_t *who)
{
	dg_err ce;
	dg_cache *c = dgi_svc_tx_cache(s, cache_id, &ce);
	uint64_t buf[DGI_OWNERS_BUF], *own = buf;
	int64_t tv;
	uint32_t k = c != NULL ? dgi_cache_owners(c, part, own, DGI_OWNERS_BUF, &tv) : 0;
	if (k > DGI_OWNERS_BUF) { /* a REPLICATED cache on many servers: ask them all */
		uint32_t cap = k;
		if ((own = dgi_alloc(cap * sizeof(*own))) == NULL)
			return -1;
		if ((k = dgi_cache_owners(c, part, own, cap, &tv)) > cap)
			k = cap;
	}
	int res = 0;
	for (uint32_t j = 0; j < k && res != 1; j++) {
		if (own[j] == skip)
			continue;
		int64_t q = query_memo(s, m, own[j], tx, origin, timeout_ms);
		int bk = q >= 0 ? (int)((q >> 8) & 0xff) : DGI_TXQ_NONE;
		if ((bk == DGI_TXQ_COMMITTED || bk == DGI_TXQ_COMMITTING) &&
		    !(want_resender && (q & DGI_TXQ_TAKEN_ONLY))) {
			if (who != NULL)
				*who = own[j];
			res = 1;
		} else if (q < 0) {
			res = -1;
		}
	}
	if (own != buf)
		dgi_free(own);
	return res;
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

/* A backup record whose primary (c->from) left, and the tx committed: the
 * owners of its keys that applied that primary's copies (TX_QUERY with it
 * as origin; not those holding only another node's takeover copies) hold
 * its version of them, or a later one.  When every written entry has such
 * an owner, they re-send what they hold (TX_PREPARE with RESEND and
 * RECOPY, as a near does) and the record is forgotten: taken over here
 * instead, the entries would be applied anew with a new version, over a
 * later write the left primary copied to those owners but not here (a cut
 * reaches a node's peers one after another: test_recovery_recopies_from_
 * the_owner_that_applied).  1 done (the record ended), 0 an entry has no
 * such owner (take over, as before), -1 not learnt now (ask again) — until
 * RECOPY_PATIENCE_MS past the tx's deadline and the grace: then taken
 * over (the record holds the topology fence meanwhile). */
#define RECOPY_WHO_MAX 16
#define RECOPY_PATIENCE_MS 5000 /* past the tx's deadline and the grace */

static int recover_by_recopy(dgi_txsvc *s, const struct cand *c)
{
	pthread_mutex_lock(&s->mu);
	struct rec *r = dgi_svc_rec_find(s, &c->id, ROLE_BACKUP, c->from);
	uint8_t *body = NULL;
	uint32_t blen = 0;
	/* bounded: past it, taken over as before (the record holds the fence) */
	bool late = r != NULL && r->deadline != 0 &&
	    dgi_now_ms() > r->deadline + RECOVER_GRACE_MS + RECOPY_PATIENCE_MS;
	if (r != NULL && !late && r->st == c->st && s->incarn == c->incarn && r->body != NULL &&
	    (body = dgi_alloc(r->blen ? r->blen : 1)) != NULL) {
		memcpy(body, r->body, r->blen);
		blen = r->blen;
	}
	pthread_mutex_unlock(&s->mu);
	if (body == NULL)
		return 0;
	int res = 1;
	uint64_t who[RECOPY_WHO_MAX];
	uint32_t nwho = 0;
	struct dgi_txq_memo memo = { 0 };
	dg_reader rd;
	uint32_t n;
	dgi_msg_tx_prepare m;
	if (dgi_svc_ents_open(body, blen, &m, &rd, &n) != DG_OK)
		res = 0;
	/* per written entry: an owner that applied the left primary's copies */
	uint64_t *ent_who = res == 1 ? dgi_calloc(n ? n : 1, sizeof(*ent_who)) : NULL;
	if (ent_who == NULL)
		res = 0;
	for (uint32_t i = 0; i < n && res == 1; i++) {
		dgi_txwire_ent en;
		if (dgi_txwire_get(&rd, &en) != DG_OK) {
			res = 0;
			break;
		}
		if ((en.op & DGI_TXOP_MASK) == 0)
			continue; /* read only */
		int a = dgi_txsvc_owner_applied(s, &memo, (uint32_t)en.cache_id, (uint32_t)en.part,
		    &c->id, c->from, s->self, true, 2000, &ent_who[i]);
		if (a < 0)
			res = -1; /* an owner may hold the copies: ask again */
		if (res == 1 && ent_who[i] == 0)
			res = 0; /* nobody has this key's copy: taken over here */
		uint32_t w = 0;
		while (res == 1 && w < nwho && who[w] != ent_who[i])
			w++;
		if (res == 1 && w == nwho) {
			if (nwho == RECOPY_WHO_MAX)
				res = 0;
			else
				who[nwho++] = ent_who[i];
		}
	}
	/* each such owner re-sends its keys; all confirmed: forget ours */
	for (uint32_t w = 0; w < nwho && res == 1; w++) {
		dg_buf eb;
		dg_buf_init(&eb);
		dg_writer wr;
		dg_writer_init(&wr, dgi_txwire_registry(), &eb);
		uint32_t cnt = 0;
		for (uint32_t i = 0; i < n; i++)
			cnt += ent_who[i] == who[w];
		dg_err e = dg_write_list_begin(&wr, cnt * DGI_TXWIRE_FIELDS);
		if (e == DG_OK) /* (opened above already: the same body) */
			e = dgi_svc_ents_open(body, blen, &m, &rd, &n);
		for (uint32_t i = 0; i < n && e == DG_OK; i++) {
			dgi_txwire_ent en;
			if ((e = dgi_txwire_get(&rd, &en)) == DG_OK && ent_who[i] == who[w])
				e = dgi_txwire_put(&wr, &en);
		}
		if (e == DG_OK)
			e = dg_write_end(&wr);
		if (e == DG_OK)
			e = dg_writer_finish(&wr);
		dgi_msg_tx_prepare rq = { (int64_t)c->id.node, (int64_t)c->id.seq,
			m.start_ms, 5000, 0, DGI_TXP_ONE_PHASE | DGI_TXP_RESEND | DGI_TXP_RECOPY,
			(int64_t)c->from, 1, 0, 0, { eb.data, (uint32_t)eb.len } };
		dgi_msg_tx_ctl ans;
		if (e == DG_OK && (e = dg_tp_call(s->tp, who[w], DGI_MSG_TX_PREPARE, &rq, 6000, &ans,
		    NULL)) == DG_OK)
			e = (dg_err)ans.res;
		dg_buf_free(&eb);
		if (e != DG_OK)
			res = -1; /* not confirmed yet (busy, an owner not answering) */
	}
	dgi_free(ent_who);
	dgi_free(body);
	if (res != 1)
		return res;
	if (dgi_svc_end_role(s, &c->id, ROLE_BACKUP, c->from, DGI_TXS_COMMITTED, ST(R_BACKUP), NULL))
		dgi_log("warn", "TX-RECOVERED", "outcome=recopied tx=%016llx:%llu role=%d "
		    "why=\"the owners that applied its left primary's copies re-sent them\"",
		    (unsigned long long)c->id.node, (unsigned long long)c->id.seq, c->role);
	return 1;
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
	 * heard a decision).  "Committed anywhere" counts commit copies
	 * applied (DGI_TXQ_COPIED), this node's own too: a primary that
	 * committed may have left with the near (a cut puts both on the
	 * minority side), and its backups' copies are then the only word of
	 * the decision — counted as one prepared primary short, the tx was
	 * rolled back here while the left primary's keys kept its writes on
	 * the promoted backups (test_near_and_committed_primary_leave_commits) */
	int64_t prepared = c->role == ROLE_PRIMARY ? 1 : 0; /* this node's record */
	int d = query_local(s, &c->id, 0) & DGI_TXQ_COPIED ? 1 : -2;
	for (uint32_t i = 0; i < n && d == -2; i++) {
		if (t->nodes[i].id == s->self)
			continue;
		int64_t q = dgi_txsvc_query(s, t->nodes[i].id, &c->id,
		    c->role == ROLE_BACKUP ? c->from : 0, 2000);
		int prim = (int)(q & 0xff), bk = (int)((q >> 8) & 0xff);
		if (q < 0)
			d = -1; /* a node did not answer: ask again later */
		else if (prim == DGI_TXQ_COMMITTED || prim == DGI_TXQ_COMMITTING ||
		    bk == DGI_TXQ_COMMITTED || (q & DGI_TXQ_COPIED))
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
			int rc = c->role == ROLE_BACKUP ? recover_by_recopy(s, c) : 0;
			if (rc == 0)
				recover_commit(s, c);
		} else if (d == 0) {
			recover_rollback(s, c);
		}
	}
}
