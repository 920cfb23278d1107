/*
 * txrec.c — participant records (see txsvc_int.h): the table, the free
 * list, a record's body; the start times of the txs with locks here (the
 * victim choice of a deadlock); ending a role (remembered in txdone, the
 * record gone, its locks released); the deadlines of ACTIVE records, and
 * forgetting every record when this node's membership is a past one.
 */
#include "txsvc_int.h"

/* ---- start times (svc->mu held) ---- */

static struct start_slot *start_find(dgi_txsvc *s, const dgi_txid *tx)
{
	if (s->scap == 0)
		return NULL;
	uint32_t mask = s->scap - 1;
	for (uint32_t i = (uint32_t)dgi_txid_hash(tx) & mask;; i = (i + 1) & mask) {
		struct start_slot *sl = &s->starts[i];
		if (sl->tx.node == 0 && sl->tx.seq == 0)
			return NULL;
		if (dgi_txid_eq(&sl->tx, tx))
			return sl;
	}
}

static dg_err start_grow(dgi_txsvc *s)
{
	/* removed slots count toward the load: rehash at a size for the live
	 * ones, never smaller than now (a steady stream of txs keeps the same
	 * table size, and rehashes into the spare without allocating) */
	uint32_t live = 0;
	for (uint32_t i = 0; i < s->scap; i++)
		live += (s->starts[i].tx.node != 0 || s->starts[i].tx.seq != 0) &&
		    s->starts[i].start_ms >= 0;
	uint32_t ncap = s->scap > 64 ? s->scap : 64;
	while (ncap < (live + 1) * 4)
		ncap *= 2;
	struct start_slot *n;
	if (ncap == s->scap && s->starts_spare != NULL) {
		n = s->starts_spare; /* same size: swap with the spare, no allocation */
		s->starts_spare = NULL;
		memset(n, 0, ncap * sizeof(*n));
	} else if ((n = dgi_calloc(ncap, sizeof(*n))) == NULL) {
		return DG_ERR_NOMEM;
	}
	uint32_t used = 0;
	for (uint32_t i = 0; i < s->scap; i++) {
		struct start_slot *o = &s->starts[i];
		if ((o->tx.node == 0 && o->tx.seq == 0) || o->start_ms < 0)
			continue;
		uint32_t j = (uint32_t)dgi_txid_hash(&o->tx) & (ncap - 1);
		while (n[j].tx.node != 0 || n[j].tx.seq != 0)
			j = (j + 1) & (ncap - 1);
		n[j] = *o;
		used++;
	}
	if (ncap == s->scap && s->starts_spare == NULL) {
		s->starts_spare = s->starts;
	} else {
		dgi_free(s->starts);
		dgi_free(s->starts_spare);
		s->starts_spare = NULL;
	}
	s->starts = n;
	s->scap = ncap;
	s->sused = used;
	s->slive = used;
	return DG_OK;
}

void dgi_svc_start_put(dgi_txsvc *s, const dgi_txid *tx, int64_t start_ms)
{
	struct start_slot *sl = start_find(s, tx);
	if (sl != NULL) {
		s->slive += (start_ms >= 0) - (sl->start_ms >= 0);
		sl->start_ms = start_ms;
		return;
	}
	if ((s->sused + 1) * 2 > s->scap && start_grow(s) != DG_OK)
		return; /* unknown start: the victim choice falls back to ids */
	uint32_t mask = s->scap - 1;
	uint32_t i = (uint32_t)dgi_txid_hash(tx) & mask;
	while (s->starts[i].tx.node != 0 || s->starts[i].tx.seq != 0)
		i = (i + 1) & mask;
	s->starts[i].tx = *tx;
	s->starts[i].start_ms = start_ms;
	s->sused++;
	s->slive += start_ms >= 0;
}

int64_t dgi_svc_start_of(dgi_txsvc *s, const dgi_txid *tx)
{
	struct start_slot *sl = start_find(s, tx);
	return sl != NULL && sl->start_ms > 0 ? sl->start_ms : 0;
}

static void start_del(dgi_txsvc *s, const dgi_txid *tx)
{
	struct start_slot *sl = start_find(s, tx);
	if (sl != NULL && sl->start_ms >= 0) {
		sl->start_ms = -1; /* a tombstone: probe chains stay whole */
		s->slive--;
	}
}

/* ---- participant records (s->mu held) ---- */

struct rec *dgi_svc_rec_find(dgi_txsvc *s, const dgi_txid *id, int role, uint64_t from)
{
	for (struct rec *r = s->buckets[dgi_txid_hash(id) & (NBUCKETS - 1)]; r != NULL; r = r->next)
		if (dgi_txid_eq(&r->id, id) && r->role == role &&
		    (role == ROLE_PRIMARY || r->from == from))
			return r;
	return NULL;
}

/* The id a finished backup or takeover role is remembered under (the
 * primary role's is the tx id itself). */
dgi_txid dgi_svc_role_key(const dgi_txid *id, int role, uint64_t from)
{
	if (role == ROLE_PRIMARY)
		return *id;
	uint64_t k = (from | 1) * 0x9e3779b97f4a7c15ULL ^ (uint64_t)role;
	return (dgi_txid){ id->node ^ k, id->seq };
}

struct rec *dgi_svc_rec_new(dgi_txsvc *s, const dgi_txid *id, int st, int role, uint64_t from)
{
	struct rec *r = s->free_recs;
	if (r != NULL) {
		s->free_recs = r->next;
		s->nfree--;
	} else if ((r = dgi_alloc(sizeof(*r))) == NULL) {
		return NULL;
	}
	memset(r, 0, offsetof(struct rec, inl));
	ns_init(&r->bk);
	r->s = s;
	r->id = *id;
	r->st = st;
	r->role = role;
	r->from = from;
	r->fail_idx = -1;
	r->made_ms = dgi_now_ms();
	struct rec **b = &s->buckets[dgi_txid_hash(id) & (NBUCKETS - 1)];
	r->next = *b;
	*b = r;
	s->nrecs++;
	return r;
}

static void rec_release(dgi_txsvc *s, struct rec *r)
{
	if (r->body != NULL && r->body != r->inl)
		dgi_free(r->body);
	r->body = NULL;
	r->have_hdr = false;
	ns_free(&r->bk);
	if (s->nfree < 256) {
		r->next = s->free_recs;
		s->free_recs = r;
		s->nfree++;
	} else {
		dgi_free(r);
	}
}

/* Takes r out of the table; frees it once no callback is still to come.
 * A primary's or a takeover's record takes the tx's start time with it
 * (its requests put it): a commit ends its record here, not through
 * dgi_svc_end_role, and every committed tx's start used to stay in the
 * table, which grew without end (test_finished_txs_leave_no_start). */
void dgi_svc_rec_unlink(dgi_txsvc *s, struct rec *r)
{
	if (r->role == ROLE_PRIMARY || r->role == ROLE_TAKEOVER)
		start_del(s, &r->id);
	struct rec **p = &s->buckets[dgi_txid_hash(&r->id) & (NBUCKETS - 1)];
	while (*p != NULL && *p != r)
		p = &(*p)->next;
	if (*p == r) {
		*p = r->next;
		s->nrecs--;
	}
	r->dead = true;
	if (r->refs == 0)
		rec_release(s, r);
}

void dgi_svc_rec_unref(dgi_txsvc *s, struct rec *r)
{
	if (--r->refs == 0 && r->dead)
		rec_release(s, r);
}

dg_err dgi_svc_rec_keep_body(struct rec *r, const dg_msg_in *in)
{
	if (in->raw_len <= REC_INLINE) {
		r->body = r->inl;
	} else if ((r->body = dgi_alloc(in->raw_len)) == NULL) {
		return DG_ERR_NOMEM;
	}
	memcpy(r->body, in->raw, in->raw_len);
	r->blen = in->raw_len;
	dgi_svc_rec_keep_hdr(r, in);
	return DG_OK;
}

/* ---- finishing ---- */

/* The tx's role ends here — if its record is in one of the states of mask
 * (checked and ended under one lock: a commit cannot start in between):
 * remembered as outcome, the record gone, its locks (a primary's or a
 * takeover's) released.  Returns false, doing nothing, when the record is
 * in another state.  out (optional): what the caller needs of it. */
bool dgi_svc_end_role(dgi_txsvc *s, const dgi_txid *id, int role, uint64_t from,
    dgi_txs outcome, unsigned mask, struct ended *out)
{
	dgi_txid key = dgi_svc_role_key(id, role, from);
	pthread_mutex_lock(&s->mu);
	struct rec *r = dgi_svc_rec_find(s, id, role, from);
	if (r != NULL && !(mask & ST(r->st))) {
		pthread_mutex_unlock(&s->mu);
		return false;
	}
	if (out != NULL) {
		memset(out, 0, offsetof(struct ended, bk));
		ns_init(&out->bk);
		if (r != NULL) {
			out->had = true;
			out->pending = r->have_req;
			out->req = r->req;
			r->have_req = false;
			ns_move(&out->bk, &r->bk); /* the record ends here */
		}
	}
	dgi_txdone_put(s->done, &key, outcome, dgi_now_ms());
	if (r != NULL)
		dgi_svc_rec_unlink(s, r);
	if (role != ROLE_BACKUP)
		start_del(s, id); /* (put by the primary's and the takeover's requests) */
	pthread_mutex_unlock(&s->mu);
	if (role != ROLE_BACKUP)
		dgi_lock_release_all(s->locks, id);
	return true;
}

void dgi_svc_finish_role(dgi_txsvc *s, const dgi_txid *id, int role, uint64_t from,
    dgi_txs outcome)
{
	dgi_svc_end_role(s, id, role, from, outcome, ANY_STATE, NULL);
}

void dgi_svc_finish_rec(dgi_txsvc *s, struct rec *r, dgi_txs outcome)
{
	dgi_txid id = r->id;
	dgi_svc_finish_role(s, &id, r->role, r->from, outcome);
}

/* ---- deadlines ---- */

/* ACTIVE records (locks of a tx that never prepared) past their deadline
 * and a grace period: the near node is gone or stuck; release. */
#define ACTIVE_GRACE_MS 2000

void dgi_svc_expire_records(dgi_txsvc *s, uint64_t now)
{
	dgi_txid ids[32];
	int n = 0;
	pthread_mutex_lock(&s->mu);
	for (uint32_t b = 0; b < NBUCKETS && n < 32; b++)
		for (struct rec *r = s->buckets[b]; r != NULL && n < 32; r = r->next)
			if (r->st == R_ACTIVE && r->role == ROLE_PRIMARY && r->deadline != 0 &&
			    r->deadline + ACTIVE_GRACE_MS < now)
				ids[n++] = r->id;
	pthread_mutex_unlock(&s->mu);
	for (int i = 0; i < n; i++)
		if (dgi_svc_end_role(s, &ids[i], ROLE_PRIMARY, 0, DGI_TXS_ROLLED_BACK, ST(R_ACTIVE), NULL))
			STAT(s, rolled_back);
}

/* This node is out of the cluster's topology (removed while paused, or
 * cut off), or back in it under a new join order (it rejoined): its
 * participant records belong to a membership it is no longer part of.  It
 * forgets them as a crash would — locks released, pending requests
 * answered DG_ERR_NOT_READY, no outcome remembered (the owners of the new
 * topology finish those txs: the backups keep the prepared entries, the
 * near re-sends) — so that none holds a lock or the fence, or commits by
 * recovery over newer writes (into copies rebalancing has just refreshed),
 * once the node is back.  Runs from on_topology, on the notifier thread,
 * before any listener sees the next version. */
void dgi_svc_forget_records(dgi_txsvc *s, int64_t v)
{
	uint32_t total = 0;
	for (;;) {
		struct { dgi_txid id; int role; bool pending; dg_msg_in req; } g[32];
		int n = 0;
		pthread_mutex_lock(&s->mu);
		if (total == 0)
			s->incarn++; /* recovery's candidates found before are void */
		for (uint32_t b = 0; b < NBUCKETS && n < 32; b++) {
			struct rec *r = s->buckets[b];
			while (r != NULL && n < 32) {
				struct rec *next = r->next;
				g[n].id = r->id;
				g[n].role = r->role;
				g[n].pending = r->have_req;
				g[n].req = r->req;
				r->have_req = false;
				if (r->role != ROLE_BACKUP)
					start_del(s, &r->id);
				dgi_svc_rec_unlink(s, r);
				n++;
				r = next;
			}
		}
		pthread_mutex_unlock(&s->mu);
		for (int i = 0; i < n; i++) {
			if (g[i].role != ROLE_BACKUP)
				dgi_lock_release_all(s->locks, &g[i].id);
			if (g[i].pending)
				dgi_svc_ack(s, &g[i].req, DG_ERR_NOT_READY, -1);
		}
		total += (uint32_t)n;
		if (n < 32)
			break;
	}
	if (total > 0)
		dgi_log("warn", "TX-FORGOTTEN", "records=%u topology=%lld why=\"this node "
		    "was out of the cluster's topology: its records are the new owners' to finish\"",
		    total, (long long)v);
}
