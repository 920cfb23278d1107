/*
 * txcommit.c — TX_COMMIT (the primary applies a prepared tx's writes with
 * new versions, releases its locks and sends the copies to every owner)
 * and TX_COMMIT_COPY (a backup applies them, if it agrees with the sender
 * on the owners).
 */
#include "txsvc_int.h"

/* ---- TX_COMMIT (primary) ---- */

/* Applies r's writes with new versions, releases its locks and sends the
 * copies to the backups; answers the near node once they applied
 * (FULL_SYNC) or at once. */
void dgi_svc_commit_apply(dgi_txsvc *s, struct rec *r)
{
	dg_reader rd;
	uint32_t n, nw = 0, applied = 0;
	dgi_msg_tx_prepare m;
	dg_err e = dgi_svc_rec_ents(r, &m, &rd, &n);
	bool full_sync = false;
	dg_buf fb, *b = tl_buf(copy, &fb);
	dg_writer w;
	dg_writer_init(&w, dgi_txwire_registry(), b);
	/* the count is written first: entries that write, counted in a pass */
	dg_reader rd2 = rd;
	for (uint32_t i = 0; i < n && e == DG_OK; i++) {
		dgi_txwire_ent en;
		if ((e = dgi_txwire_get(&rd2, &en)) == DG_OK && (en.op & DGI_TXOP_MASK) != 0)
			nw++;
	}
	if (e == DG_OK)
		e = dg_write_list_begin(&w, nw * DGI_TXWIRE_FIELDS);
	/* the copies go to every node the prepare went to (they keep a
	 * record to finish, even when nothing is written) and every owner of
	 * a written key */
	struct targets t;
	targets_init(&t);
	dg_err be = DG_OK;          /* the backups' list could not grow */
	dgi_txid id = r->id;
	/* The versions' topology: the one under which this node was the
	 * keys' primary when it prepared (a takeover: when it checked that),
	 * even when a newer one is in by now (a node joined or left between
	 * prepare and commit; the fence holds the new primaries' locks until
	 * this record ends).  Stamped with the newer one, this node's larger
	 * counter would outrank the writes the new primary makes after the
	 * fence opens, whenever this commit's copy reaches it late: an
	 * acknowledged write lost (test_late_commit_stamps_its_topology). */
	int64_t stamp = r->stamp;
	pthread_mutex_lock(&s->mu);
	for (uint32_t i = 0; i < r->bk.n && be == DG_OK; i++)
		be = ns_add(&t.bk, r->bk.ids[i]);
	pthread_mutex_unlock(&s->mu);
	for (uint32_t i = 0; i < n && e == DG_OK; i++) {
		dgi_txwire_ent en;
		if ((e = dgi_txwire_get(&rd, &en)) != DG_OK)
			break;
		int op = (int)(en.op & DGI_TXOP_MASK);
		if (op == 0)
			continue;
		dg_cache *c = dgi_svc_tx_cache(s, en.cache_id, &e);
		if (c == NULL)
			break;
		if (dg_cache_config_of(c)->write_sync == DG_FULL_SYNC)
			full_sync = true;
		uint64_t hash;
		dgi_cache_key_part(c, en.key.ptr, en.key.len, &hash);
		const uint8_t *val = op == DGI_TXOP_PUT ? en.val.ptr : NULL;
		if (op == DGI_TXOP_PUT && val == NULL)
			val = (const uint8_t *)"";
		e = dgi_cache_tx_write(c, stamp, (uint32_t)en.part, hash, en.key.ptr, en.key.len, val,
		    en.val.len, r->id.node, r->id.seq, &en.ver, &en.expire_ms);
		if (e != DG_OK)
			break;
		applied++;
		en.val.ptr = val;
		en.op = op;
		e = dgi_txwire_put(&w, &en);
		if (be == DG_OK)
			be = dgi_svc_add_owners(s, c, en.cache_id, (uint32_t)en.part, &t);
	}
	if (e == DG_OK)
		e = dg_write_end(&w);
	if (e != DG_OK)
		dgi_log("error", "TX-APPLY", "tx=%016llx:%llu err=%s",
		    (unsigned long long)r->id.node, (unsigned long long)r->id.seq, dg_strerror(e));
	if (be != DG_OK) /* applied here; some owner may miss the copies */
		dgi_log("error", "TX-COPIES", "tx=%016llx:%llu owners=%u err=%s",
		    (unsigned long long)r->id.node, (unsigned long long)r->id.seq, t.bk.n,
		    dg_strerror(be));
	/* decided: the tx is committed here whatever a backup says */
	dgi_txid key = dgi_svc_role_key(&r->id, r->role, r->from);
	dgi_txdone_put(s->done, &key, DGI_TXS_COMMITTED, dgi_now_ms());
	STAT(s, committed);
	dgi_msg_tx_prepare cp = { (int64_t)r->id.node, (int64_t)r->id.seq, r->start_ms, 0,
		r->topver, 0, (int64_t)(r->role == ROLE_TAKEOVER ? r->from : s->self), 0,
		(int64_t)t.digest, t.topver != 0 ? t.topver : dgi_grid_topver(s->g),
		{ b->data, (uint32_t)b->len } };
	bool answer_now = !full_sync || t.bk.n == 0 || e != DG_OK;
	dg_msg_in req;
	bool have = false;
	pthread_mutex_lock(&s->mu);
	if (answer_now && r->have_req) {
		req = r->req;
		have = true;
		r->have_req = false;
	}
	pthread_mutex_unlock(&s->mu);
	/* a write failed after others were applied: neither "committed" nor
	 * "not applied" is true */
	if (have)
		dgi_svc_ack(s, &req, e != DG_OK && applied > 0 ? DG_ERR_TX_UNKNOWN : e, -1);
	if (e == DG_OK && t.bk.n > 0) {
		dgi_svc_to_backups(s, r, DGI_MSG_TX_COMMIT_COPY, &cp, &t.bk, 10000);
	} else {
		pthread_mutex_lock(&s->mu);
		dgi_svc_rec_unlink(s, r);
		pthread_mutex_unlock(&s->mu);
	}
	targets_free(&t);
	/* Only now: a release runs the next waiters' grants in this thread,
	 * and one may commit at once — reusing this thread's copy buffer (the
	 * copies above are sent: encoded already) and sending its own copies,
	 * which must reach the backups after this tx's. */
	dg_buf_free(&fb);
	dgi_lock_release_all(s->locks, &id);
}

/* Commits tx's prepared primary record here and answers in (TX_COMMIT,
 * or a resend to the primary that prepared it).  Returns false, answering
 * nothing, when this node has neither the record nor the outcome and
 * may_miss is set. */
bool dgi_svc_commit_prepared(dgi_txsvc *s, const dg_msg_in *in, const dgi_txid *txp,
    bool may_miss)
{
	dgi_txid tx = *txp;
	pthread_mutex_lock(&s->mu);
	struct rec *r = dgi_svc_rec_find(s, &tx, ROLE_PRIMARY, 0);
	int st = r != NULL ? r->st : 0;
	if (st == R_PREPARED) {
		r->st = R_COMMITTING;
		r->have_req = true;
		r->req = *in;
		r->req.body = NULL;
		r->req.raw = NULL;
		r->refs++;
	}
	pthread_mutex_unlock(&s->mu);
	if (st == R_PREPARED) {
		dgi_svc_commit_apply(s, r);
		pthread_mutex_lock(&s->mu);
		dgi_svc_rec_unref(s, r);
		pthread_mutex_unlock(&s->mu);
		return true;
	}
	dgi_txs done;
	if (dgi_txdone_get(s->done, &tx, &done) && done == DGI_TXS_COMMITTED && may_miss)
		return false; /* a resend: the caller sends the copies again (recopy) */
	if (dgi_txdone_get(s->done, &tx, &done))
		dgi_svc_ack(s, in, done == DGI_TXS_COMMITTED ? DG_OK : DG_ERR_TX_ROLLED_BACK, -1);
	else if (r != NULL)
		dgi_svc_ack(s, in, st == R_COMMITTING ? DG_ERR_NOT_READY : DG_ERR_STATE, -1);
	else if (may_miss)
		return false;
	else
		dgi_svc_ack(s, in, DG_ERR_NOT_FOUND, -1);
	return true;
}

void dgi_svc_h_commit(dgi_txsvc *s, const dg_msg_in *in)
{
	const dgi_msg_tx_ctl *m = in->body;
	dgi_txid tx = { (uint64_t)m->tx_node, (uint64_t)m->tx_seq };
	/* (even just woken from a pause: the decision is made, and what this
	 * node copies is judged by the owners — a removed node's copies are
	 * refused, and its record must not outlive the tx holding locks) */
	dgi_svc_commit_prepared(s, in, &tx, false);
}

/* ---- TX_COMMIT_COPY (backup) ---- */

void dgi_svc_h_commit_copy(dgi_txsvc *s, const dg_msg_in *in)
{
	const dgi_msg_tx_prepare *m = in->body;
	dgi_txid tx = { (uint64_t)m->tx_node, (uint64_t)m->tx_seq };
	/* DG_OK only with the sender's owners (dgi_svc_backup_agrees).  From a node
	 * that is not a member (removed while paused, or one this node does
	 * not know yet) nothing is applied and this node's backup record of
	 * the tx, if any, stays (the near's resend or recovery finishes it);
	 * from a member on another topology the copies are applied (versions
	 * decide) and the answer says the owners differ. */
	bool member;
	dg_err agree = dgi_svc_backup_agrees(s, in, m, &member);
	if (!member) {
		if (dg_log_enabled(DG_LOG_DEBUG))
			dgi_log("debug", "TX-DEBUG", "copies refused: %s from=%016llx (not a member)",
			    dg_strerror(agree), (unsigned long long)in->from);
		dgi_svc_ack(s, in, agree, -1);
		return;
	}
	dg_reader rd;
	uint32_t n;
	dg_reader_init(&rd, NULL, m->ents.ptr, m->ents.len);
	dg_err e = dg_read_begin(&rd, DG_LIST, &n), first = DG_OK;
	if (e == DG_OK && n % DGI_TXWIRE_FIELDS != 0)
		e = DG_ERR_BAD_LENGTH;
	n /= DGI_TXWIRE_FIELDS;
	/* every entry, even after one failed (the answer names the first
	 * failure) */
	for (uint32_t i = 0; i < n && e == DG_OK; i++) {
		dgi_txwire_ent en;
		if ((e = dgi_txwire_get(&rd, &en)) != DG_OK)
			break;
		dg_err ce;
		dg_cache *c = dgi_svc_tx_cache(s, en.cache_id, &ce);
		if (c == NULL)
			continue; /* destroyed meanwhile */
		uint64_t hash;
		if ((ce = dgi_svc_ent_place(c, &en, &hash)) != DG_OK) {
			if (first == DG_OK)
				first = ce; /* not applied: a partition the key is not in */
			continue;
		}
		int op = (int)(en.op & DGI_TXOP_MASK);
		dg_err ae = dgi_cache_tx_copy(c, (uint32_t)en.part, hash, en.key.ptr, en.key.len,
		    op == DGI_TXOP_PUT ? (en.val.ptr ? en.val.ptr : (const uint8_t *)"") : NULL,
		    en.val.len, &en.ver, en.expire_ms, tx.node, tx.seq);
		if (ae != DG_OK && first == DG_OK)
			first = ae;
	}
	if (e == DG_OK)
		e = first;
	if (e == DG_OK)
		e = agree;
	dgi_svc_finish_role(s, &tx, ROLE_BACKUP, in->from, DGI_TXS_COMMITTED);
	/* the decision, whoever asks: recovery may find no other word of it
	 * (ROLE_COPIED, txsvc_int.h) */
	dgi_txid ck = dgi_svc_role_key(&tx, ROLE_COPIED, 0);
	dgi_txdone_put(s->done, &ck, DGI_TXS_COMMITTED, dgi_now_ms());
	if (m->origin != 0 && (uint64_t)m->origin != in->from) { /* a takeover's copies */
		pthread_mutex_lock(&s->mu);
		struct rec *b = dgi_svc_rec_find(s, &tx, ROLE_BACKUP, (uint64_t)m->origin);
		if (b != NULL)
			dgi_svc_rec_unlink(s, b);
		dgi_txid tk = dgi_svc_role_key(&tx, ROLE_TAKEN, (uint64_t)m->origin);
		dgi_txdone_put(s->done, &tk, DGI_TXS_COMMITTED, dgi_now_ms());
		pthread_mutex_unlock(&s->mu);
	}
	STAT(s, backup_committed);
	dgi_svc_ack(s, in, e, -1);
}
