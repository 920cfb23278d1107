/*
 * psync.c — a new primary learns what its predecessors did (FULL_SYNC
 * ATOMIC caches) before it takes updates.
 *
 * A retried update is applied once only if the primary that receives the
 * retry knows its update id (dedup.c), and a value the old primary wrote
 * but could not finish replicating must not be taken back after someone
 * saw it, nor applied a second time by the retry.  When the primary role
 * of a partition moves to this node (a backup promoted after a failure, a
 * joining or rejoining owner), the last writes of the old primary may be
 * anywhere among the old owners: on the old primary alone (its pending
 * write ended when it lost the role: the entry is marked TENTATIVE), on
 * some backups but not this one, and their ids likewise.
 *
 * So the new primary asks every old owner still in the cluster
 * (CACHE_PSYNC, naming the topology it became primary at and the one
 * before): each answers, once it has installed that topology (so it takes
 * no more updates as the old primary), with its update-id records for the
 * partition and its entries written since the previous topology, marked
 * TENTATIVE, or among the last FULL_SYNC copies it applied as a backup
 * (pending.c's ring: an old primary that stayed primary while the topology
 * moved on wrote its last values under an older version).  The new primary
 * applies what is newer than its own copy, records the ids, and sends every
 * entry that became newer here to its backups again as a pending write
 * (pending.c), so nobody reads it before every owner has it.  Until every
 * old owner answered, it answers updates of the partition
 * DG_ERR_NOT_READY (the originator retries); reads go on.  An answer this
 * node cannot store (DG_ERR_STORAGE_FULL: its persistent map is full) is
 * asked for again at each tick, and meanwhile updates are refused with
 * DG_ERR_STORAGE_FULL, not applied: told to wait, each waited out the
 * request timeout (test_persist_large_values_joiner_map_too_small).  A
 * question that failed (an error answer: the old owner had no such cache
 * yet; a request that could not be sent or whose connection broke, as
 * happens while two nodes that dialled each other keep one connection) is
 * asked again 25 ms later, the pause doubling with each failure in a row
 * up to the tick's 500 ms: the sweeper wakes for it (grid->psync_due_ms).
 * Before, only the sweeper's tick asked again, once a second, and every
 * update of the partition waited that long
 * (test_psync_failed_question_asked_again).  An answer
 * comes in pages of about rebalance_batch_bytes (answer()), each asked for
 * as the one before is taken in; the wait for an old owner ends with its
 * last page.
 * An old owner that leaves the cluster meanwhile is no longer waited for
 * (what only it held is gone with it, as with any failure).
 *
 * Answers in order.  An old owner's answer vouches that no older primary
 * takes updates or serves reads any more — including one that was
 * primary before it.  The primary role can move twice while the first
 * primary's caches lag (its notifier thread slow: P primary at V, Q at
 * V+1, S at V+2): S asks V+1's owners, Q, not P.  So a node that still
 * waits for an old owner it asked about version v does not answer a
 * question about a version above v until that owner answered (or left),
 * whatever its own role is by then; the request waits, parked, as one
 * about a topology not yet installed does.  Questions about a version at
 * or below v are answered: each wait is for an older version than the
 * one it holds up, so no two nodes wait for each other.  Before, Q
 * forgot its wait when it lost the role, answered S at once, and S took
 * updates while P still read its old copy as the primary
 * (test_old_primary_two_versions_behind).
 */
#include "cache_int.h"
#include "marshal/marshal_int.h"

#include <string.h>

struct psync_call {
	dgi_grid *g;
	uint32_t cache_id, part;
	int64_t ver, page;
	dg_node_id from;
};

_Atomic uint32_t dgi_test_psync_refuse;
_Atomic uint32_t dgi_test_psync_unsent;

/* Takes one from a test hook's count: whether there was one. */
static bool test_take(_Atomic uint32_t *n)
{
	uint32_t v = atomic_load(n);
	while (v > 0 && !atomic_compare_exchange_weak(n, &v, v - 1)) {
	}
	return v > 0;
}

static void on_psync_res(void *ctx, dg_err err, const dg_msg_in *reply);

/* Wait w's question failed (partition locked): asked again soon — 25 ms,
 * doubling with each failure in a row up to 500 (the tick's period) — by
 * the sweeper, woken for it. */
static void retry_soon(dgi_grid *g, struct dgi_psync_wait *w)
{
	uint32_t shift = w->fails < 5 ? w->fails : 5;
	if (w->fails < UINT8_MAX)
		w->fails++;
	uint64_t pause = 25u << shift;
	w->retry_ms = dgi_now_ms() + (pause < 500 ? pause : 500);
	uint64_t due = atomic_load(&g->psync_due_ms);
	while ((due == 0 || w->retry_ms < due) &&
	    !atomic_compare_exchange_weak(&g->psync_due_ms, &due, w->retry_ms)) {
	}
}

/* Wakes the sweeper for psync_due_ms (g->mu not held — dgi_psync_send,
 * under it, broadcasts itself: a wake-up between the sweeper's look at
 * the due time and its wait is not lost). */
static void wake_sweeper(dgi_grid *g)
{
	pthread_mutex_lock(&g->mu);
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->mu);
}

/* Asks the old owner of wait w (partition locked).  False when the
 * request could not be sent (w's retry is set: wake the sweeper). */
static bool ask(dgi_grid *g, dg_cache *c, uint32_t part, struct dgi_psync_wait *w)
{
	w->retry_ms = 0;
	/* (tests: a request that could not be sent) */
	struct psync_call *k = test_take(&dgi_test_psync_unsent) ? NULL : dgi_alloc(sizeof(*k));
	if (k != NULL) {
		*k = (struct psync_call){ g, c->id, part, w->ver, w->page, w->node };
		dgi_msg_psync m = { c->id, part, w->ver, w->since, w->page, (int64_t)w->after };
		if (dg_tp_request(g->tp, w->node, DGI_MSG_PSYNC, &m, g->cfg.request_timeout_ms,
		    on_psync_res, k) == DG_OK)
			return true;
		dgi_free(k);
	}
	retry_soon(g, w);
	return false;
}

/* The wait for node's answer about version ver (partition locked): its
 * index, or -1. */
static int64_t wait_index(const dgi_part *pt, dg_node_id node, int64_t ver)
{
	for (uint32_t i = 0; i < pt->psync_n; i++)
		if (pt->psync_from[i].node == node && pt->psync_from[i].ver == ver)
			return i;
	return -1;
}

/* pt->psync_err again from its waits (partition locked): any whose last
 * page this node could not store. */
static void full_recount(dgi_part *pt)
{
	pt->psync_err = DG_OK;
	for (uint32_t i = 0; i < pt->psync_n; i++)
		if (pt->psync_from[i].full)
			pt->psync_err = DG_ERR_STORAGE_FULL;
}

/* Whether pt waits for an answer about a version below ver (partition
 * locked): a question about ver waits for it ("Answers in order"). */
static bool waits_below(const dgi_part *pt, int64_t ver)
{
	for (uint32_t i = 0; i < pt->psync_n; i++)
		if (pt->psync_from[i].ver < ver)
			return true;
	return false;
}

void dgi_psync_begin(dgi_grid *g, dg_cache *c, uint32_t part, int64_t ver, int64_t since,
    const dg_node_id *from, uint32_t n)
{
	dgi_part *pt = &c->parts[part];
	if (pt->psync_n + n > pt->psync_cap) {
		uint32_t cap = pt->psync_n + n;
		struct dgi_psync_wait *f = dgi_alloc(cap * sizeof(*f));
		if (f == NULL) {
			/* cannot wait for these (retries may not be recognised);
			 * the waits kept from before stay ("Answers in order") */
			dgi_log("warn", "PSYNC-NOMEM", "cache=\"%s\" partition=%u", c->cfg.name,
			    part);
			return;
		}
		if (pt->psync_n > 0)
			memcpy(f, pt->psync_from, pt->psync_n * sizeof(*f));
		dgi_free(pt->psync_from);
		pt->psync_from = f;
		pt->psync_cap = cap;
	}
	/* (added to the waits it kept from an earlier time as the primary) */
	for (uint32_t i = 0; i < n; i++)
		if (wait_index(pt, from[i], ver) < 0)
			pt->psync_from[pt->psync_n++] = (struct dgi_psync_wait){ from[i], ver, since,
				0, 0, false, 0, 0 };
	pt->psync_sent_ms = 0; /* asked once the new affinity is in place */
	full_recount(pt);
	(void)g;
}

void dgi_psync_send(dgi_grid *g, dg_cache *c)
{
	uint64_t now = dgi_now_ms();
	bool failed = false;
	for (uint32_t p = 0; p < c->cfg.partitions; p++) {
		dgi_part *pt = &c->parts[p];
		dgi_part_lock(pt);
		if (pt->psync_n > 0 && pt->psync_sent_ms == 0) {
			pt->psync_sent_ms = now;
			for (uint32_t i = 0; i < pt->psync_n; i++)
				failed |= !ask(g, c, p, &pt->psync_from[i]);
		}
		dgi_part_unlock(pt);
	}
	if (failed) /* (g->mu is held: the topology's install) */
		pthread_cond_broadcast(&g->cv);
}

void dgi_psync_keep(dgi_part *pt, bool (*alive)(void *ctx, dg_node_id id), void *ctx)
{
	for (uint32_t i = 0; i < pt->psync_n;)
		if (alive(ctx, pt->psync_from[i].node))
			i++;
		else
			pt->psync_from[i] = pt->psync_from[--pt->psync_n];
	full_recount(pt);
}

void dgi_psync_tick(dgi_grid *g, dg_cache *c, uint32_t part, uint64_t now_ms)
{
	dgi_part *pt = &c->parts[part];
	if (pt->psync_n == 0 || pt->psync_sent_ms == 0)
		return;
	/* every question once the tick's period passed; a failed one when
	 * its retry is due (the sweeper runs again for the next: its own
	 * retry_soon set psync_due_ms) */
	bool all = now_ms >= pt->psync_sent_ms + 500;
	if (all)
		pt->psync_sent_ms = now_ms;
	for (uint32_t i = 0; i < pt->psync_n; i++) {
		struct dgi_psync_wait *w = &pt->psync_from[i];
		if (all || (w->retry_ms != 0 && w->retry_ms <= now_ms))
			ask(g, c, part, w);
	}
}

void dgi_psync_free_part(dgi_part *pt)
{
	dgi_free(pt->psync_from);
	pt->psync_from = NULL;
	pt->psync_n = pt->psync_cap = 0;
	pt->psync_err = DG_OK;
}

/* ---- the old owner's answer ---- */

struct psync_enc {
	dg_writer *w;
	const dgi_part *pt;
	int64_t since;
	uint32_t n;
	bool recent_sent;           /* this page carries the recent copies already */
};

/* Whether e is among the last FULL_SYNC copies pt applied as a backup
 * (pending.c's ring, dgi_pw_recent). */
static bool is_recent(const dgi_part *pt, const dgi_entry *e)
{
	for (uint8_t i = 0; i < pt->nrecent; i++) {
		const struct dgi_recent *r = &pt->recent[i];
		if (dgi_entry_topver(e) == r->ver.topver && e->counter == r->ver.counter &&
		    e->order == r->ver.order && dgi_entry_hash(e) == r->hash)
			return true;
	}
	return false;
}

/* An entry of the answer: written since the version before (or
 * TENTATIVE), or among the last FULL_SYNC copies this node applied as a
 * backup, whatever their version — the old primary may have written them
 * under an older topology than `since` (it stays primary while the
 * topology moves on: clients join, other partitions move), and their ids
 * in the first page are worth nothing to the new primary without them. */
static bool enc_wants(void *ctx, const dgi_entry *e)
{
	const struct psync_enc *p = ctx;
	return dgi_entry_topver(e) >= p->since || (e->flags & DGI_ENTRY_TENTATIVE) ||
	    (!p->recent_sent && is_recent(p->pt, e));
}

static void enc_entry(void *ctx, const dgi_entry *e)
{
	struct psync_enc *p = ctx;
	dgi_entry_write(p->w, p->pt, e);
	p->n++;
}

/* The first page's recent copies (those the scan would not take for
 * their version), written when together they take at most `room` bytes:
 * they go with the update-id records then, as the ring was when the
 * records were read.  Otherwise (values of megabytes) each goes in the
 * page of its hash, if the ring still holds it then — a copy the new
 * primary re-sends here meanwhile can push it out.  True when written
 * (their bytes added to *used). */
static bool recent_first(struct psync_enc *pe, dgi_part *pt, uint64_t room, uint64_t *used)
{
	uint64_t need = 0;
	const dgi_entry *es[DGI_RECENT];
	uint8_t k = 0;
	for (uint8_t i = 0; i < pt->nrecent && k < DGI_RECENT; i++) {
		const dgi_entry *e = dgi_part_find_ver(pt, pt->recent[i].hash, &pt->recent[i].ver);
		if (e != NULL && dgi_entry_topver(e) < pe->since && !(e->flags & DGI_ENTRY_TENTATIVE)) {
			es[k++] = e;
			need += dgi_page_entry_bytes(e);
		}
	}
	if (need > room)
		return false;
	for (uint8_t i = 0; i < k; i++)
		enc_entry(pe, es[i]);
	*used += need;
	return true;
}

/* One page of the answer to m: the first carries the update-id records
 * and the recent copies (recent_first), every page the next entries in
 * page order (dgi_scan_key), at most rebalance_batch_bytes of them (dgi_part_scan: one
 * larger entry alone).  A partition written for a long time under one
 * version is all "written since": in one frame it could pass the
 * receiver's recv_max, and the question would never be answered
 * (test_psync_answer_larger_than_a_frame, and with large values
 * test_psync_answer_values_larger_than_a_batch). */
static void answer(dgi_grid *g, dg_cache *c, const dg_msg_in *in, const dgi_msg_psync *m)
{
	dgi_part *pt = &c->parts[m->part];
	bool first = m->page == 0;
	dg_buf body, out;
	dg_buf_init(&body);
	dg_buf_init(&out);
	dg_writer w;
	dg_writer_init(&w, g->reg, &body);
	struct psync_enc pe = { &w, pt, m->since, 0, false };
	uint32_t nrec = 0;
	dgi_part_lock(pt);
	for (uint32_t i = 0; first && i < pt->dd_cap; i++)
		if (pt->dd[i].node != 0) {
			dg_write_i64(&w, (int64_t)pt->dd[i].node);
			dg_write_i64(&w, (int64_t)pt->dd[i].seq);
			dg_write_i64(&w, pt->dd[i].flag);
			nrec++;
		}
	bool more = false;
	/* the page's bytes: the records (3 svarints each), the recent copies,
	 * then the scan's entries up to the batch */
	uint64_t batch = g->cfg.rebalance_batch_bytes, used = 30 * (uint64_t)nrec;
	if (first)
		pe.recent_sent = recent_first(&pe, pt, batch / 2 > used ? batch / 2 - used : 0, &used);
	uint64_t last = dgi_part_scan(pt, (uint64_t)m->after, first, dgi_page_cap(pt, batch),
	    batch > used ? batch - used : 1, enc_wants, enc_entry, &pe, &more);
	dgi_part_unlock(pt);
	dg_err e = dg_writer_finish(&w);
	if (e == DG_OK && (e = dg_buf_reserve(&out, 32 + body.len)) == DG_OK) {
		/* LIST (tag, count), I64 more, I64 last cursor, I64 records, I64
		 * entries, then the records and the entries, already encoded as
		 * values */
		out.data[out.len++] = TAG_LIST;
		out.len = (size_t)(dgi_put_uvarint(out.data + out.len, 4 + 3 * (uint64_t)nrec +
		    DGI_PAGE_ENTRY_VALUES * (uint64_t)pe.n) - out.data);
		dg_writer hw;
		dg_writer_init(&hw, g->reg, &out);
		dg_write_i64(&hw, more);
		dg_write_i64(&hw, (int64_t)last);
		dg_write_i64(&hw, nrec);
		dg_write_i64(&hw, pe.n);
		e = dg_writer_finish(&hw);
		if (e == DG_OK && body.len > 0 && (e = dg_buf_reserve(&out, body.len)) == DG_OK) {
			memcpy(out.data + out.len, body.data, body.len);
			out.len += body.len;
		}
	}
	if (e == DG_OK) {
		dg_msg_raw r = { { out.data, (uint32_t)out.len } };
		dg_tp_reply(g->tp, in, DGI_MSG_PSYNC_RES, &r);
	} else {
		dg_tp_reply_error(g->tp, in, e);
	}
	dg_buf_free(&body);
	dg_buf_free(&out);
}

/* A request from a new primary waits, parked, while this node has not
 * installed its topology (until then it may still take updates as the old
 * primary) or still waits for an older owner's answer about an older
 * version ("Answers in order"); dgi_psync_release answers it once
 * neither holds. */
struct psync_parked {
	struct psync_parked *next;
	dg_msg_in in;
	dgi_msg_psync m;
};

/* Whether m must wait (g->mu held; c is m's cache, m->part one of its
 * partitions). */
static bool must_wait(dgi_grid *g, dg_cache *c, const dgi_msg_psync *m)
{
	if (g->topo == NULL || g->topo->version < m->topver)
		return true;
	dgi_part *pt = &c->parts[m->part];
	dgi_part_lock(pt);
	bool below = waits_below(pt, m->topver);
	dgi_part_unlock(pt);
	return below;
}

static void on_psync(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	dgi_grid *g = ctx;
	const dgi_msg_psync *m = in->body;
	dg_cache *c = dgi_grid_cache(g, (uint32_t)m->cache_id);
	if (c == NULL || m->part < 0 || (uint64_t)m->part >= c->cfg.partitions) {
		dg_tp_reply_error(tp, in, c == NULL ? DG_ERR_NOT_READY : DG_ERR_INVAL);
		return;
	}
	pthread_mutex_lock(&g->mu);
	bool behind = must_wait(g, c, m);
	struct psync_parked *p = NULL;
	for (p = g->psync_parked; behind && p != NULL; p = p->next)
		if (p->in.from == in->from && p->m.cache_id == m->cache_id && p->m.part == m->part &&
		    p->m.topver == m->topver)
			break;
	if (p != NULL) {
		/* the asker's tick asked again (once a second while it waits):
		 * the newest question is the one answered, the older one times
		 * out there, and the list holds one per question */
		p->in = *in;
		p->in.body = NULL;
		p->in.raw = NULL;
	} else if (behind && (p = dgi_alloc(sizeof(*p))) != NULL) {
		p->in = *in;
		p->in.body = NULL;
		p->in.raw = NULL;
		p->m = *m;
		p->next = g->psync_parked;
		g->psync_parked = p;
	}
	pthread_mutex_unlock(&g->mu);
	if (!behind && test_take(&dgi_test_psync_refuse))
		dg_tp_reply_error(tp, in, DG_ERR_NOT_READY); /* (tests: a failed question) */
	else if (!behind)
		answer(g, c, in, m);
	else if (p == NULL)
		dg_tp_reply_error(tp, in, DG_ERR_NOT_READY);
}

void dgi_psync_release(dgi_grid *g)
{
	struct psync_parked *ready = NULL;
	pthread_mutex_lock(&g->mu);
	for (struct psync_parked **pp = &g->psync_parked; *pp != NULL;) {
		struct psync_parked *p = *pp;
		dg_cache *c = dgi_grid_cache(g, (uint32_t)p->m.cache_id);
		if (c == NULL || (uint64_t)p->m.part >= c->cfg.partitions || !must_wait(g, c, &p->m)) {
			*pp = p->next;
			p->next = ready;
			ready = p;
		} else {
			pp = &p->next;
		}
	}
	pthread_mutex_unlock(&g->mu);
	while (ready != NULL) {
		struct psync_parked *p = ready;
		ready = p->next;
		dg_cache *c = dgi_grid_cache(g, (uint32_t)p->m.cache_id);
		if (c != NULL && (uint64_t)p->m.part < c->cfg.partitions) /* (re-created since?) */
			answer(g, c, &p->in, &p->m);
		else
			dg_tp_reply_error(g->tp, &p->in, DG_ERR_NOT_READY);
		dgi_free(p);
	}
}

static void on_psync_res(void *ctx, dg_err err, const dg_msg_in *reply);

void dgi_psync_stop(dgi_grid *g)
{
	/* this node's own questions still unanswered end now, while the
	 * grid they name is whole (the transport stops after it) */
	dg_tp_cancel(g->tp, on_psync_res);
	while (g->psync_parked != NULL) {
		struct psync_parked *p = g->psync_parked;
		g->psync_parked = p->next;
		dgi_free(p);
	}
}

/* ---- the new primary takes the answer ---- */

struct adopt {
	dgi_grid *g;
	dg_cache *c;
	uint32_t part;
};

static dg_err read_entry(dg_reader *r, dg_bytes *k, dg_bytes *v, dgi_pver *ver, int64_t *x,
    int64_t *on, int64_t *os)
{
	int64_t t, cn, o;
	dg_err e;
	if ((e = dg_read_bytes(r, k, NULL)) != DG_OK || (e = dg_read_bytes(r, v, NULL)) != DG_OK ||
	    (e = dg_read_i64(r, &t)) != DG_OK || (e = dg_read_i64(r, &cn)) != DG_OK ||
	    (e = dg_read_i64(r, &o)) != DG_OK || (e = dg_read_i64(r, x)) != DG_OK ||
	    (e = dg_read_i64(r, on)) != DG_OK || (e = dg_read_i64(r, os)) != DG_OK)
		return e;
	if (k->ptr == NULL || k->len == 0)
		return DG_ERR_BAD_LENGTH;
	*ver = (dgi_pver){ t, (uint64_t)cn, (uint32_t)o, 0 };
	return DG_OK;
}

/* Applies an answer (partition not locked): the records, then the entries
 * newer than this copy — each sent to the backups again as a pending
 * write while this node is the primary of the version asked for. */
static dg_err adopt(dgi_grid *g, dg_cache *c, uint32_t part, int64_t ver, const dg_raw *list,
    bool *more, uint64_t *last)
{
	dgi_part *pt = &c->parts[part];
	dg_reader r;
	uint32_t count;
	int64_t more_, last_, nrec, nent;
	dg_reader_init(&r, g->reg, list->ptr, list->len);
	dg_err e = dg_read_begin(&r, DG_LIST, &count);
	if (e == DG_OK && ((e = dg_read_i64(&r, &more_)) != DG_OK ||
	    (e = dg_read_i64(&r, &last_)) != DG_OK || (e = dg_read_i64(&r, &nrec)) != DG_OK ||
	    (e = dg_read_i64(&r, &nent)) != DG_OK))
		return e;
	if (e != DG_OK)
		return e;
	if (nrec < 0 || nent < 0 || (uint64_t)count != 4 + 3 * (uint64_t)nrec +
	    DGI_PAGE_ENTRY_VALUES * (uint64_t)nent)
		return DG_ERR_BAD_LENGTH;
	*more = more_ != 0;
	*last = (uint64_t)last_;
	uint64_t now = dgi_now_ms();
	dgi_part_lock(pt);
	for (int64_t i = 0; i < nrec && e == DG_OK; i++) {
		int64_t v[3];
		for (int k = 0; k < 3 && e == DG_OK; k++)
			e = dg_read_i64(&r, &v[k]);
		if (e == DG_OK)
			dgi_dedup_put(pt, (uint64_t)v[0], (uint64_t)v[1], v[2], now);
	}
	dgi_part_unlock(pt);
	for (int64_t i = 0; i < nent && e == DG_OK; i++) {
		dg_bytes k, v;
		dgi_pver ev;
		int64_t x, on, os;
		if ((e = read_entry(&r, &k, &v, &ev, &x, &on, &os)) != DG_OK)
			break;
		uint64_t h = dgi_key_hash(k.ptr, k.len);
		if (dgi_part_of(h, c->cfg.partitions) != part)
			return DG_ERR_INVAL;
		dgi_part_lock(pt);
		dgi_entry *cur = dgi_part_find(pt, h, k.ptr, k.len);
		bool newer = cur == NULL || dgi_entry_ver_cmp(&ev, cur) > 0;
		dgi_part_unlock(pt);
		if (!newer)
			continue;
		if ((e = dgi_apply_copy(g, c, part, h, k.ptr, k.len, v.ptr, v.len, &ev, x,
		    (uint64_t)on, (uint64_t)os)) != DG_OK)
			break;
		/* not known to be on every owner: replicate it as pending */
		dgi_part_lock(pt);
		dgi_aff *aff = atomic_load_explicit(&c->aff, memory_order_acquire);
		dgi_entry *en = dgi_part_find_ver(pt, h, &ev);
		if (en != NULL && !(en->flags & DGI_ENTRY_PENDING) && aff != NULL &&
		    aff->topver == ver && dgi_aff_owner(aff, part, 0) == g->self) {
			dg_err pe;
			dgi_pw_start(g, c, part, aff, h, en, &pe);
		}
		dgi_part_unlock(pt);
	}
	return e;
}

static void on_psync_res(void *ctx, dg_err err, const dg_msg_in *reply)
{
	struct psync_call *k = ctx;
	dgi_grid *g = k->g;
	if (err != DG_OK && err != DG_ERR_CLOSED) {
		/* the question failed: asked again soon, if still the current one
		 * (not when this node closes: dgi_psync_stop cancels them) */
		dg_cache *fc = dgi_grid_cache(g, k->cache_id);
		bool soon = false;
		if (fc != NULL && k->part < fc->cfg.partitions) {
			dgi_part *pt = &fc->parts[k->part];
			dgi_part_lock(pt);
			int64_t i = wait_index(pt, k->from, k->ver);
			if (i >= 0 && pt->psync_from[i].page == k->page) {
				retry_soon(g, &pt->psync_from[i]);
				soon = true;
			}
			dgi_part_unlock(pt);
		}
		if (soon)
			wake_sweeper(g);
	}
	dg_cache *c = err == DG_OK ? dgi_grid_cache(g, k->cache_id) : NULL;
	if (c != NULL) {
		const dg_msg_raw *body = reply->body;
		dgi_part *pt = &c->parts[k->part];
		/* what the old primary did is taken in by the primary that asked
		 * only while it still is (a wait kept after the role moved on
		 * only holds later questions back: "Answers in order") */
		dgi_aff *aff = atomic_load_explicit(&c->aff, memory_order_acquire);
		dgi_part_lock(pt);
		int64_t i = wait_index(pt, k->from, k->ver);
		bool current = i >= 0 && pt->psync_from[i].page == k->page; /* (not a repeat) */
		bool primary = aff != NULL && aff->topver >= k->ver && aff->nnodes > 0 &&
		    dgi_aff_owner(aff, k->part, 0) == g->self;
		dgi_part_unlock(pt);
		bool more = false, done = false, unsent = false;
		uint64_t last = 0;
		dg_err e = current && primary ?
		    adopt(g, c, k->part, k->ver, &body->list, &more, &last) : DG_OK;
		dgi_part_lock(pt);
		/* (the wait as it is now: a topology may have dropped it while
		 * adopt ran unlocked) */
		int64_t j = current && primary ? wait_index(pt, k->from, k->ver) : -1;
		bool told = false; /* (a full store: logged once, until a page fits) */
		if (j >= 0 && pt->psync_from[j].page == k->page) {
			told = e == DG_ERR_STORAGE_FULL && pt->psync_from[j].full;
			pt->psync_from[j].full = e == DG_ERR_STORAGE_FULL;
			full_recount(pt);
		}
		i = e == DG_OK && current ? wait_index(pt, k->from, k->ver) : -1;
		if (i >= 0 && pt->psync_from[i].page == k->page) {
			if (more) { /* the next page, now */
				pt->psync_from[i].page++;
				pt->psync_from[i].after = last;
				pt->psync_from[i].fails = 0;
				pt->psync_sent_ms = dgi_now_ms();
				unsent = !ask(g, c, k->part, &pt->psync_from[i]);
			} else {
				pt->psync_from[i] = pt->psync_from[--pt->psync_n];
				done = true;
				full_recount(pt);
			}
		}
		dgi_part_unlock(pt);
		if (unsent)
			wake_sweeper(g);
		if (e != DG_OK && !told) /* (a full store: once, until it takes one in) */
			dgi_log("warn", "PSYNC-BAD", "cache=\"%s\" partition=%u from=%016llx err=\"%s\"%s",
			    c->cfg.name, k->part, (unsigned long long)k->from, dg_strerror(e),
			    e == DG_ERR_STORAGE_FULL ? " updates=\"refused DG_ERR_STORAGE_FULL until "
			    "this node's storage takes the answer (asked again every 500 ms)\"" : "");
		if (done)
			dgi_psync_release(g); /* questions that waited for this answer */
	}
	/* (a node that left is dropped from the set by the next topology) */
	dgi_free(k);
}

void dgi_psync_register(dgi_grid *g)
{
	dg_tp_handle(g->tp, DGI_MSG_PSYNC, on_psync, g);
}
