/*
 * txprepare.c — TX_PREPARE.  As the keys' primary: lock every entry,
 * check the versions read, forward the entries to the partitions' backups
 * and answer once they kept them (DGI_TXP_ONE_PHASE: commit at once).  As
 * a backup (DGI_TXP_BACKUP): keep them, if this node agrees with the
 * primary on the owners.  A resend (DGI_TXP_RESEND) of a decided commit:
 * a takeover of a left primary's keys, or — entries this node applied
 * already — their copies sent again (recopy).  Also the backups' answers,
 * to a prepare or to a commit's copies (dgi_svc_to_backups).
 */
#include "txsvc_int.h"

/* ---- TX_PREPARE (primary) ---- */

static void prepare_locked(dgi_txsvc *s, struct rec *r);

/* One of a PREPARE's lock grants (or failures) is in — or the issuing
 * loop's own count: the last one continues the prepare, then drops the
 * reference its count held. */
static void lock_counted(dgi_txsvc *s, struct rec *r, dg_err err)
{
	pthread_mutex_lock(&s->mu);
	if (err == DG_OK)
		err = r->killed; /* (a kill freed its locks: txdeadlock.c) */
	if (err != DG_OK && r->fail == DG_OK)
		r->fail = err;
	bool go = --r->waiting == 0 && !r->dead;
	pthread_mutex_unlock(&s->mu);
	if (go)
		prepare_locked(s, r);
	pthread_mutex_lock(&s->mu);
	dgi_svc_rec_unref(s, r);
	pthread_mutex_unlock(&s->mu);
}

static void on_prep_lock(void *ctx, dg_err err)
{
	struct rec *r = ctx;
	dgi_txsvc *s = r->s;
	err = dgi_svc_victim_err(s, &r->id, err);
	lock_counted(s, r, err);
}

static void h_backup_prepare(dgi_txsvc *s, const dg_msg_in *in, const dgi_msg_tx_prepare *m)
{
	dgi_txid tx = { (uint64_t)m->tx_node, (uint64_t)m->tx_seq };
	dgi_txid key = dgi_svc_role_key(&tx, ROLE_BACKUP, in->from);
	dgi_txs done;
	if (dgi_txdone_get(s->done, &key, &done)) {
		dgi_svc_ack(s, in, done == DGI_TXS_COMMITTED ? DG_OK : DG_ERR_TX_ROLLED_BACK, -1);
		return;
	}
	int64_t bad = -1;
	dg_err e = dgi_svc_ents_placed(s, in, &bad);
	if (e != DG_OK) {
		dgi_svc_ack(s, in, e, bad); /* kept, it would be applied on a takeover */
		return;
	}
	/* kept only from a primary that agrees with this node on the owners
	 * (a removed one, woken from a pause, prepares on a topology the
	 * others left: nothing of it is kept, and it cannot prepare) */
	bool member;
	e = dgi_svc_backup_agrees(s, in, m, &member);
	if (e != DG_OK) {
		if (dg_log_enabled(DG_LOG_DEBUG))
			dgi_log("debug", "TX-DEBUG", "backup prepare refused: %s from=%016llx member=%d",
			    dg_strerror(e), (unsigned long long)in->from, member);
		dgi_svc_ack(s, in, e, -1);
		return;
	}
	pthread_mutex_lock(&s->mu);
	struct rec *r = dgi_svc_rec_find(s, &tx, ROLE_BACKUP, in->from);
	if (r == NULL) {
		if ((r = dgi_svc_rec_new(s, &tx, R_BACKUP, ROLE_BACKUP, in->from)) == NULL) {
			e = DG_ERR_NOMEM;
		} else {
			r->s = s;
			r->start_ms = m->start_ms;
			r->topver = m->topver;
			r->flags = m->flags;
			r->deadline = dgi_now_ms() + (uint64_t)(m->timeout_ms > 0 ? m->timeout_ms : 0);
			if ((e = dgi_svc_rec_keep_body(r, in)) != DG_OK)
				dgi_svc_rec_unlink(s, r);
		}
	}
	pthread_mutex_unlock(&s->mu);
	if (e == DG_OK)
		STAT(s, backup_prepared);
	dgi_svc_ack(s, in, e, -1);
}

/* This node's copy of a resend's entry en into w (what it holds now: the
 * tx's write or a later one; read into val), its owners into t; false when
 * it holds none (or t cannot grow). */
static bool recopy_one(dgi_txsvc *s, dgi_txwire_ent *en, dg_writer *w, struct targets *t,
    dg_buf *val)
{
	dg_err e;
	dg_cache *c = dgi_svc_tx_cache(s, en->cache_id, &e);
	if (c == NULL)
		return false;
	uint64_t hash;
	dgi_cache_key_part(c, en->key.ptr, en->key.len, &hash);
	bool found;
	val->len = 0;
	if (dgi_cache_tx_read(c, 0, (uint32_t)en->part, hash, en->key.ptr, en->key.len, val,
	    &found, &en->ver) != DG_OK || en->ver.counter == 0)
		return false;
	if (w == NULL)
		return true;
	en->op = found ? DGI_TXOP_PUT : DGI_TXOP_REMOVE;
	en->val = found ? (dg_bytes){ val->data ? val->data : (const uint8_t *)"",
		(uint32_t)val->len } : (dg_bytes){ NULL, 0 };
	en->expire_ms = 0;
	return dgi_txwire_put(w, en) == DG_OK &&
	    dgi_svc_add_owners(s, c, en->cache_id, (uint32_t)en->part, t) == DG_OK;
}

/* A resend (in) of entries this node applied already: sends what it holds
 * of those keys to their current owners (TX_COMMIT_COPY; versions make
 * repeats harmless) and answers once every one confirmed (DG_OK), or
 * DG_ERR_TX_UNKNOWN with DGI_TXA_APPLIED when one did not — the near
 * re-sends.  Runs as a takeover record from origin in R_COMMITTING; a
 * resend while one runs is answered DG_ERR_NOT_READY (ask again). */
static void recopy(dgi_txsvc *s, const dg_msg_in *in, uint64_t origin)
{
	dg_reader rd, rd2;
	uint32_t n, held = 0, written = 0;
	dgi_msg_tx_prepare m;
	dg_err e = dgi_svc_in_ents(in, &m, &rd, &n);
	if (e != DG_OK) {
		dgi_svc_ack(s, in, e, -1);
		return;
	}
	dgi_txid tx = { (uint64_t)m.tx_node, (uint64_t)m.tx_seq };
	dg_buf vfb, cfb, *val = tl_buf(val, &vfb), *b = tl_buf(copy, &cfb);
	rd2 = rd;
	for (uint32_t i = 0; i < n; i++) {
		dgi_txwire_ent en;
		if (dgi_txwire_get(&rd2, &en) != DG_OK)
			break;
		held += recopy_one(s, &en, NULL, NULL, val);
	}
	struct targets t;
	targets_init(&t);
	if (held < n) {
		e = DG_ERR_NOT_FOUND; /* it cannot vouch for what it lost */
		goto out;
	}
	dg_writer w;
	dg_writer_init(&w, dgi_txwire_registry(), b);
	e = dg_write_list_begin(&w, held * DGI_TXWIRE_FIELDS);
	for (uint32_t i = 0; i < n && e == DG_OK && written < held; i++) {
		dgi_txwire_ent en;
		if ((e = dgi_txwire_get(&rd, &en)) == DG_OK)
			written += recopy_one(s, &en, &w, &t, val);
	}
	if (e == DG_OK && written != held)
		e = DG_ERR_NOT_READY; /* changed under us: the near asks again */
	if (e == DG_OK)
		e = dg_write_end(&w);
	if (e != DG_OK || t.bk.n == 0)
		goto out;
	pthread_mutex_lock(&s->mu);
	struct rec *r = dgi_svc_rec_find(s, &tx, ROLE_TAKEOVER, origin);
	if (r == NULL && (r = dgi_svc_rec_new(s, &tx, R_COMMITTING, ROLE_TAKEOVER, origin)) != NULL) {
		r->s = s;
		r->start_ms = m.start_ms;
		r->topver = t.topver;
		r->flags = m.flags;
		r->have_req = true;
		r->req = *in;
		r->req.body = NULL;
		r->req.raw = NULL;
	} else {
		pthread_mutex_unlock(&s->mu);
		e = r != NULL ? DG_ERR_NOT_READY : DG_ERR_NOMEM;
		goto out;
	}
	pthread_mutex_unlock(&s->mu);
	dgi_msg_tx_prepare cp = { (int64_t)tx.node, (int64_t)tx.seq, m.start_ms, 0, t.topver, 0,
		(int64_t)origin, 0, (int64_t)t.digest, t.topver, { b->data, (uint32_t)b->len } };
	dgi_svc_to_backups(s, r, DGI_MSG_TX_COMMIT_COPY, &cp, &t.bk,
	    m.timeout_ms > 0 ? (uint32_t)m.timeout_ms : 1000);
	targets_free(&t);
	dg_buf_free(&vfb);
	dg_buf_free(&cfb);
	return;
out:
	dgi_svc_ack(s, in, e, -1); /* (DG_OK: nothing to copy, no other owner) */
	targets_free(&t);
	dg_buf_free(&vfb);
	dg_buf_free(&cfb);
}

/* DGI_TXP_RECOPY: this node applied the tx's entries of origin (as their
 * primary, origin itself; as origin's backup; or taking over from it) but
 * did not get every owner's confirmation.  It re-sends what it holds of
 * those keys (recopy) — on whatever topology, as a member; the owners
 * judge — and never applies them anew.  A record still committing: ask
 * again (DG_ERR_NOT_READY); nothing applied here: DG_ERR_NOT_FOUND. */
static void h_recopy(dgi_txsvc *s, const dg_msg_in *in, const dgi_txid *tx, uint64_t origin)
{
	dgi_txid tk = dgi_svc_role_key(tx, ROLE_TAKEOVER, origin), bk = dgi_svc_role_key(tx, ROLE_BACKUP, origin);
	dgi_txs d;
	if ((dgi_txdone_get(s->done, &tk, &d) && d == DGI_TXS_COMMITTED) ||
	    (dgi_txdone_get(s->done, &bk, &d) && d == DGI_TXS_COMMITTED) ||
	    (origin == s->self && dgi_txdone_get(s->done, tx, &d) && d == DGI_TXS_COMMITTED)) {
		recopy(s, in, origin);
		return;
	}
	pthread_mutex_lock(&s->mu);
	bool busy = (origin == s->self && dgi_svc_rec_find(s, tx, ROLE_PRIMARY, 0) != NULL) ||
	    dgi_svc_rec_find(s, tx, ROLE_TAKEOVER, origin) != NULL;
	pthread_mutex_unlock(&s->mu);
	dgi_svc_ack(s, in, busy ? DG_ERR_NOT_READY : DG_ERR_NOT_FOUND, -1);
}

void dgi_svc_h_prepare(dgi_txsvc *s, const dg_msg_in *in)
{
	const dgi_msg_tx_prepare *m = in->body;
	dgi_txid tx = { (uint64_t)m->tx_node, (uint64_t)m->tx_seq };
	if (tx.node == 0 && tx.seq == 0) {
		dgi_svc_ack(s, in, DG_ERR_INVAL, -1);
		return;
	}
	if (m->flags & DGI_TXP_BACKUP) {
		h_backup_prepare(s, in, m);
		return;
	}
	if (dgi_svc_paused(s)) {
		dgi_svc_stale_refused(s, "prepare", tx.node, tx.seq);
		dgi_svc_ack(s, in, DG_ERR_NOT_READY, -1);
		return;
	}
	bool resend = (m->flags & DGI_TXP_RESEND) != 0;
	int role = resend ? ROLE_TAKEOVER : ROLE_PRIMARY;
	uint64_t from = resend ? (uint64_t)m->origin : 0;
	if (resend && (m->flags & DGI_TXP_RECOPY)) {
		h_recopy(s, in, &tx, from);
		return;
	}
	/* a resend to the primary that prepared it (its COMMIT's answer was
	 * lost, or it refused): commit that record, or answer its outcome —
	 * committed here already: send the copies again (whatever this node's
	 * role is now: the owners judge) */
	if (resend && from == s->self) {
		dgi_txs pd;
		if (dgi_svc_commit_prepared(s, in, &tx, true))
			return;
		if (dgi_txdone_get(s->done, &tx, &pd) && pd == DGI_TXS_COMMITTED) {
			recopy(s, in, from);
			return;
		}
	}
	dgi_txid key = dgi_svc_role_key(&tx, role, from), bkey = dgi_svc_role_key(&tx, ROLE_BACKUP, from);
	dgi_txs done;
	if (!resend && dgi_txdone_get(s->done, &key, &done)) {
		/* finished here: a repeat */
		dgi_svc_ack(s, in, done == DGI_TXS_COMMITTED ? DG_OK : DG_ERR_TX_ROLLED_BACK, -1);
		return;
	}
	/* placement: every entry's partition is this node's under the tx's
	 * topology — or, for a PESSIMISTIC tx that locked its keys here under
	 * an older topology, this node holds every one of those locks (the
	 * new topology's locks wait for it: the fence) */
	pthread_mutex_lock(&s->mu);
	struct rec *have = resend ? NULL : dgi_svc_rec_find(s, &tx, ROLE_PRIMARY, 0);
	bool locked_here = have != NULL && have->st == R_ACTIVE && have->topver == m->topver;
	pthread_mutex_unlock(&s->mu);
	dg_reader rd;
	uint32_t n;
	dgi_msg_tx_prepare mm;
	dg_err e = dgi_svc_in_ents(in, &mm, &rd, &n);
	int64_t topver = (m->flags & DGI_TXP_RESEND) ? 0 : m->topver;
	int64_t stamp = topver; /* (a takeover's: the lowest it checks under) */
	for (uint32_t i = 0; i < n && e == DG_OK; i++) {
		dgi_txwire_ent en;
		dg_cache *c = NULL;
		if ((e = dgi_txwire_get(&rd, &en)) != DG_OK || (c = dgi_svc_tx_cache(s, en.cache_id, &e)) == NULL)
			break;
		if ((e = dgi_svc_ent_place(c, &en, NULL)) != DG_OK) {
			dgi_svc_ack(s, in, e, i); /* a partition the key is not in: refused */
			return;
		}
		if (dgi_cache_part_lost(c, (uint32_t)en.part)) {
			e = DG_ERR_PARTITION_LOST; /* nothing is written to a lost partition */
		} else if (!resend && (en.op & DGI_TXOP_MASK) == DGI_TXOP_PUT && en.val.ptr != NULL &&
		    dgi_cache_backup_full(c, (uint32_t)en.part, (uint64_t)en.key.len + en.val.len)) {
			/* a backup refused a copy as large for a full map: refused
			 * before anything is applied or forwarded, so the tx rolls
			 * back whole — committed, it would wait for that backup's
			 * room and answer DG_ERR_TX_UNKNOWN */
			e = DG_ERR_STORAGE_FULL;
		} else if (locked_here) {
			uint64_t hash;
			dgi_cache_key_part(c, en.key.ptr, en.key.len, &hash);
			dgi_txid owner = dgi_lock_owner(s->locks, (uint32_t)en.cache_id, en.key.ptr,
			    en.key.len, hash);
			if (!dgi_txid_eq(&owner, &tx))
				e = DG_ERR_TX_ROLLED_BACK; /* its lock is gone */
		} else {
			int64_t tv = 0;
			e = dgi_svc_check_primary(s, c, (uint32_t)en.part, topver, &tv);
			if (resend && tv > 0 && (stamp == 0 || tv < stamp))
				stamp = tv;
		}
		if (e != DG_OK) {
			if (dg_log_enabled(DG_LOG_DEBUG))
				dgi_log("debug", "TX-DEBUG", "prepare refused: %s locked_here=%d have=%p st=%d "
				    "topver=%lld/%lld", dg_strerror(e), locked_here, (void *)have,
				    have ? have->st : -1, have ? (long long)have->topver : -1,
				    (long long)m->topver);
			dgi_svc_ack(s, in, e, i);
			return;
		}
	}
	if (e == DG_OK && resend) {
		/* a resend of what this node applied already — as the keys'
		 * primary (its commit was not confirmed by every backup), as the
		 * left primary's backup, or in an earlier takeover: the owners
		 * may lack the copies — send them what this node holds and
		 * answer once they confirmed */
		dgi_txs bd, pd;
		if ((dgi_txdone_get(s->done, &key, &done) && done == DGI_TXS_COMMITTED) ||
		    (dgi_txdone_get(s->done, &bkey, &bd) && bd == DGI_TXS_COMMITTED) ||
		    (from == s->self && dgi_txdone_get(s->done, &tx, &pd) &&
		    pd == DGI_TXS_COMMITTED)) {
			recopy(s, in, from);
			return;
		}
		if (dgi_txdone_get(s->done, &key, &done)) {
			dgi_svc_ack(s, in, DG_ERR_TX_ROLLED_BACK, -1);
			return;
		}
	}
	if (e == DG_OK && !resend && !locked_here)
		e = dgi_svc_fence_check(s, m->topver);
	if (e != DG_OK && dg_log_enabled(DG_LOG_DEBUG))
		dgi_log("debug", "TX-DEBUG", "prepare refused by the fence: %s locked_here=%d have=%p st=%d "
		    "topver=%lld/%lld", dg_strerror(e), locked_here, (void *)have,
		    have ? have->st : -1, have ? (long long)have->topver : -1, (long long)m->topver);
	if (e != DG_OK) {
		dgi_svc_ack(s, in, e, -1);
		return;
	}
	if (!resend)
		dgi_svc_test_fence_window(s);
	pthread_mutex_lock(&s->mu);
	/* the fence again, under s->mu as the record is made or starts its
	 * prepare (dgi_svc_h_lock says why) */
	if (!resend && !locked_here && (e = dgi_svc_fence_check(s, m->topver)) != DG_OK) {
		pthread_mutex_unlock(&s->mu);
		dgi_svc_ack(s, in, e, -1);
		return;
	}
	if (resend) {
		/* this node takes over from the left primary: its backup record
		 * of those entries is superseded */
		struct rec *b = dgi_svc_rec_find(s, &tx, ROLE_BACKUP, from);
		if (b != NULL)
			dgi_svc_rec_unlink(s, b);
	}
	struct rec *r = dgi_svc_rec_find(s, &tx, role, from);
	if (r != NULL && r->st != R_ACTIVE) {
		int st = r->st;
		pthread_mutex_unlock(&s->mu);
		/* a repeated PREPARE: prepared already answers again; one still
		 * in progress answers when it ends */
		if (st == R_PREPARED)
			dgi_svc_ack(s, in, DG_OK, -1);
		else if (st == R_BACKUP)
			dgi_svc_ack(s, in, DG_ERR_STATE, -1);
		else if (resend)
			dgi_svc_ack(s, in, DG_ERR_NOT_READY, -1); /* a takeover under way: ask again */
		return;
	}
	if (r == NULL && (r = dgi_svc_rec_new(s, &tx, R_ACTIVE, role, from)) == NULL) {
		pthread_mutex_unlock(&s->mu);
		dgi_svc_ack(s, in, DG_ERR_NOMEM, -1);
		return;
	}
	if ((e = dgi_svc_rec_keep_body(r, in)) != DG_OK) {
		pthread_mutex_unlock(&s->mu);
		dgi_svc_finish_role(s, &tx, role, from, DGI_TXS_ROLLED_BACK);
		dgi_svc_ack(s, in, e, -1);
		return;
	}
	dgi_svc_start_put(s, &tx, m->start_ms); /* (taken out when the record finishes) */
	r->st = R_PREPARING;
	r->start_ms = m->start_ms;
	r->topver = m->topver;
	r->stamp = stamp;
	r->flags = m->flags;
	r->deadline = dgi_now_ms() + (uint64_t)(m->timeout_ms > 0 ? m->timeout_ms : 1);
	r->have_req = true;
	r->req = *in;
	r->req.body = NULL;
	r->req.raw = NULL;
	r->waiting = 1;
	r->refs++; /* this call's */
	uint64_t deadline = r->deadline;
	pthread_mutex_unlock(&s->mu);
	/* lock every entry (writes and checked reads), in the order sent (the
	 * near sorts them) */
	e = dgi_svc_rec_ents(r, &mm, &rd, &n);
	for (uint32_t i = 0; i < n && e == DG_OK; i++) {
		dgi_txwire_ent en;
		if ((e = dgi_txwire_get(&rd, &en)) != DG_OK)
			break;
		uint64_t hash;
		dg_cache *c = dgi_svc_tx_cache(s, en.cache_id, &e);
		if (c == NULL)
			break;
		dgi_cache_key_part(c, en.key.ptr, en.key.len, &hash);
		pthread_mutex_lock(&s->mu);
		r->waiting++;
		r->refs++;
		pthread_mutex_unlock(&s->mu);
		int res = dgi_lock_acquire(s->locks, (uint32_t)en.cache_id, en.key.ptr, en.key.len,
		    hash, &tx, deadline, on_prep_lock, r);
		if (res == DGI_LOCK_QUEUED) {
			STAT(s, waited);
			dgi_svc_check_deadlock(s, &tx);
			continue;
		}
		pthread_mutex_lock(&s->mu);
		r->waiting--;
		r->refs--;
		pthread_mutex_unlock(&s->mu);
		if (res != DGI_LOCK_GRANTED)
			e = (dg_err)-res;
	}
	lock_counted(s, r, e); /* the issuing loop's own count */
}

static void prepare_refused(dgi_txsvc *s, struct rec *r, dg_err bfail);

/* A backup's answer to TX_PREPARE or TX_COMMIT_COPY. */
void dgi_svc_on_backup_answer(void *ctx, dg_err err, const dg_msg_in *reply)
{
	struct rec *r = ctx;
	dgi_txsvc *s = r->s;
	if (err == DG_OK && reply != NULL)
		err = (dg_err)((const dgi_msg_tx_ctl *)reply->body)->res; /* its verdict */
	uint32_t quiet;
	if (err != DG_OK && dgi_lograte_due(&s->lr_backup, dgi_now_ms(), 1000, &quiet))
		dgi_log("warn", "TX-BACKUP", "tx=%016llx:%llu err=%s from=%016llx repeated=%u",
		    (unsigned long long)r->id.node, (unsigned long long)r->id.seq,
		    dg_strerror(err), reply != NULL ? (unsigned long long)reply->from : 0ull, quiet);
	bool answer = false, unlink = false, refuse = false;
	dg_msg_in req;
	dg_err bfail;
	pthread_mutex_lock(&s->mu);
	if (err != DG_OK && r->bfail == DG_OK)
		r->bfail = err;
	bfail = r->bfail;
	if (--r->acks == 0 && !r->dead) {
		if (r->st == R_PREPARING && bfail != DG_OK) {
			refuse = true; /* ended below, with its pending request */
		} else {
			if (r->st == R_PREPARING)
				r->st = R_PREPARED;
			else if (r->st == R_COMMITTING)
				unlink = true;
			answer = r->have_req;
			req = r->req;
			r->have_req = false;
		}
	}
	pthread_mutex_unlock(&s->mu);
	/* a participant acknowledges only what every backup confirmed (and,
	 * with the owners' digest, with the owners the backups agree on) */
	if (answer && bfail == DG_OK)
		dgi_svc_ack(s, &req, DG_OK, -1);
	else if (answer) /* committed here; the near re-sends to the keys'
	                    current primaries or reports the outcome unknown */
		dgi_svc_ack_flags(s, &req, DG_ERR_TX_UNKNOWN, -1, DGI_TXA_APPLIED);
	if (refuse)
		prepare_refused(s, r, bfail);
	pthread_mutex_lock(&s->mu);
	if (unlink)
		dgi_svc_rec_unlink(s, r);
	dgi_svc_rec_unref(s, r);
	pthread_mutex_unlock(&s->mu);
}

/* A backup did not keep r's prepared entries (bfail): the prepare fails
 * here — released and remembered rolled back, the backups that kept them
 * told to drop them, the near answered (a refusal: no one can commit the
 * tx, it rolls back).  A transport error (the backup died, or did not
 * answer) is answered DG_ERR_NOT_READY: the owners are changing. */
static void prepare_refused(dgi_txsvc *s, struct rec *r, dg_err bfail)
{
	struct ended x;
	dgi_txid id = r->id;
	if (!dgi_svc_end_role(s, &id, r->role, r->from, DGI_TXS_ROLLED_BACK, ST(R_PREPARING), &x) || !x.had)
		return;
	STAT(s, rolled_back);
	dgi_msg_tx_ctl fw = { (int64_t)id.node, (int64_t)id.seq, DGI_TXP_BACKUP, 0, 0 };
	for (uint32_t i = 0; i < x.bk.n; i++)
		dgi_txsvc_send(s, x.bk.ids[i], DGI_MSG_TX_ROLLBACK, &fw);
	ns_free(&x.bk);
	dg_err e = bfail;
	if (e == DG_ERR_TIMEOUT || e == DG_ERR_CONN_BROKEN || e == DG_ERR_UNREACHABLE ||
	    e == DG_ERR_BUSY || e == DG_ERR_CLOSED)
		e = DG_ERR_NOT_READY;
	if (dg_log_enabled(DG_LOG_DEBUG))
		dgi_log("debug", "TX-DEBUG", "prepare refused: a backup answered %s", dg_strerror(bfail));
	if (x.pending)
		dgi_svc_ack(s, &x.req, e, -1);
}

/* Sends body (TX_PREPARE with DGI_TXP_BACKUP, or TX_COMMIT_COPY) to every
 * backup of the entries' partitions; r->acks counts the answers. */
void dgi_svc_to_backups(dgi_txsvc *s, struct rec *r, dg_msg_type type,
    const dgi_msg_tx_prepare *body, const struct nodeset *set, uint32_t timeout_ms)
{
	const uint64_t *bk = set->ids;
	uint32_t nbk = set->n;
	pthread_mutex_lock(&s->mu);
	r->acks += nbk + 1;
	r->refs += nbk + 1;
	pthread_mutex_unlock(&s->mu);
	for (uint32_t i = 0; i < nbk; i++) {
		if (dgi_txsvc_request(s, bk[i], type, body, timeout_ms, dgi_svc_on_backup_answer, r) != DG_OK)
			dgi_svc_on_backup_answer(r, DG_ERR_UNREACHABLE, NULL);
	}
	dgi_svc_on_backup_answer(r, DG_OK, NULL); /* the sender's own count */
}

/* The backups of the partitions of r's written entries (current
 * affinity), into t (targets_init'ed).  DG_ERR_NOMEM: not all of them
 * could be kept. */
static dg_err backups_of(dgi_txsvc *s, struct rec *r, struct targets *t)
{
	dg_reader rd;
	uint32_t n;
	dgi_msg_tx_prepare m;
	dg_err e = dgi_svc_rec_ents(r, &m, &rd, &n);
	for (uint32_t i = 0; i < n && e == DG_OK; i++) {
		dgi_txwire_ent en;
		dg_err ce;
		if ((e = dgi_txwire_get(&rd, &en)) != DG_OK)
			break;
		if ((en.op & DGI_TXOP_MASK) == 0)
			continue; /* read only: nothing for a backup to keep */
		dg_cache *c = dgi_svc_tx_cache(s, en.cache_id, &ce);
		if (c != NULL)
			e = dgi_svc_add_owners(s, c, en.cache_id, (uint32_t)en.part, t);
	}
	return e;
}

static bool same_ver(const dgi_pver *a, const dgi_pver *b)
{
	return a->topver == b->topver && a->counter == b->counter && a->order == b->order;
}

/* The prepare of r failed (err; idx: the entry, or -1): rolled back here,
 * the near answered. */
static void prepare_fail(dgi_txsvc *s, struct rec *r, dg_err err, int64_t idx)
{
	pthread_mutex_lock(&s->mu);
	dg_msg_in req = r->req;
	bool answer = r->have_req;
	r->have_req = false;
	pthread_mutex_unlock(&s->mu);
	dgi_svc_finish_rec(s, r, DGI_TXS_ROLLED_BACK);
	STAT(s, rolled_back);
	if (answer)
		dgi_svc_ack(s, &req, err, idx);
}

static void prepare_locked(dgi_txsvc *s, struct rec *r)
{
	pthread_mutex_lock(&s->mu);
	bool dead = r->dead;
	dg_err fail = r->fail;
	pthread_mutex_unlock(&s->mu);
	if (dead)
		return;
	int64_t idx = -1;
	dg_reader rd;
	uint32_t n;
	dgi_msg_tx_prepare m;
	if (fail == DG_OK)
		fail = dgi_svc_rec_ents(r, &m, &rd, &n);
	for (uint32_t i = 0; fail == DG_OK && i < n; i++) {
		dgi_txwire_ent en;
		if ((fail = dgi_txwire_get(&rd, &en)) != DG_OK)
			break;
		if (!(en.op & DGI_TXOP_CHECK))
			continue;
		dg_cache *c = dgi_svc_tx_cache(s, en.cache_id, &fail);
		if (c == NULL)
			break;
		uint64_t hash, own[8];
		int64_t tv;
		dgi_cache_key_part(c, en.key.ptr, en.key.len, &hash);
		dgi_cache_owners(c, (uint32_t)en.part, own, DGI_OWNERS_BUF, &tv);
		bool found;
		dgi_pver cur;
		/* a tx of an older topology reads the copy it locked here */
		if (r->topver != tv)
			tv = 0;
		fail = dgi_cache_tx_read(c, tv, (uint32_t)en.part, hash, en.key.ptr, en.key.len,
		    NULL, &found, &cur);
		if (fail == DG_OK && !same_ver(&cur, &en.ver)) {
			fail = DG_ERR_TX_CONFLICT;
			STAT(s, conflicts);
		}
		if (fail != DG_OK)
			idx = i;
	}
	if (fail != DG_OK) {
		prepare_fail(s, r, fail, idx);
		return;
	}
	dgi_tx_test_hook hk = atomic_load_explicit(&dgi_tx_test_prepare_locked,
	    memory_order_relaxed);
	if (hk != NULL)
		hk(s);
	if (r->flags & DGI_TXP_ONE_PHASE) {
		pthread_mutex_lock(&s->mu);
		dead = r->dead; /* rolled back meanwhile (the near's rollback, the fence) */
		if (!dead)
			r->st = R_COMMITTING;
		pthread_mutex_unlock(&s->mu);
		if (dead)
			return;
		STAT(s, prepared);
		dgi_svc_commit_apply(s, r);
		return;
	}
	/* every backup, however many: one left out would miss the entries
	 * (and the commit's copies) — a tx that cannot name them all fails */
	struct targets t;
	targets_init(&t);
	fail = backups_of(s, r, &t);
	pthread_mutex_lock(&s->mu);
	for (uint32_t i = 0; i < t.bk.n && fail == DG_OK; i++)
		fail = ns_add(&r->bk, t.bk.ids[i]);
	pthread_mutex_unlock(&s->mu);
	if (fail != DG_OK) {
		targets_free(&t);
		prepare_fail(s, r, fail, -1);
		return;
	}
	STAT(s, prepared);
	dgi_msg_tx_prepare fw;
	if (dgi_svc_rec_hdr(r, &fw) != DG_OK)
		fw = (dgi_msg_tx_prepare){ 0 };
	fw.flags |= DGI_TXP_BACKUP;
	fw.owners = (int64_t)t.digest;
	fw.otopver = t.topver != 0 ? t.topver : dgi_grid_topver(s->g);
	uint64_t now = dgi_now_ms();
	uint32_t left = r->deadline > now ? (uint32_t)(r->deadline - now) : 1;
	dgi_svc_to_backups(s, r, DGI_MSG_TX_PREPARE, &fw, &t.bk, left);
	targets_free(&t);
}
