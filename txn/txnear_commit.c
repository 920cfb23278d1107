/*
 * txnear_commit.c — the near side's commit: two-phase commit over the
 * tx's primaries (one phase for a single one), the decision's resends
 * after a primary left, and what the near learns when an answer never
 * came (txn.c's header tells the protocol; txnear_int.h what the two
 * files share).
 */
#include "txnear_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Atomic int dgi_tx_crash_point;
_Atomic int dgi_tx_crash_reached;

struct group {                  /* the entries of one primary */
	uint64_t node;
	uint64_t origin;            /* resend: the primary that did not confirm */
	bool recopy;                /* resend: node applied them; DGI_TXP_RECOPY */
	uint32_t n;
	uint32_t first;             /* index into the order array */
};

struct ent_ref {
	uint64_t node;
	uint64_t origin;
	bool recopy;
	uint32_t cache_id;
	uint64_t hash;
	dgi_txent *e;
};

static int ref_cmp(const void *a, const void *b)
{
	const struct ent_ref *x = a, *y = b;
	if (x->node != y->node)
		return x->node < y->node ? -1 : 1;
	if (x->origin != y->origin)
		return x->origin < y->origin ? -1 : 1;
	if (x->recopy != y->recopy)
		return x->recopy ? 1 : -1;
	if (x->cache_id != y->cache_id)
		return x->cache_id < y->cache_id ? -1 : 1;
	if (x->hash != y->hash)
		return x->hash < y->hash ? -1 : 1;
	uint32_t m = x->e->klen < y->e->klen ? x->e->klen : y->e->klen;
	int c = memcmp(x->e->key, y->e->key, m);
	return c != 0 ? c : (int)x->e->klen - (int)y->e->klen;
}

/* Does entry e go to its primary at prepare, and with which op? */
static int64_t wire_op(const dg_tx *tx, const dgi_txent *e, bool resend)
{
	int64_t op = e->op == DGI_TXOP_PUT || e->op == DGI_TXOP_REMOVE ? e->op : 0;
	if (resend)
		return op;
	bool check = e->read && (e->check || (tx->conc == DG_PESSIMISTIC && e->read_locked &&
	    tx->iso != DG_READ_COMMITTED) ||
	    (tx->conc == DG_OPTIMISTIC && tx->iso == DG_SERIALIZABLE));
	return op | (check ? DGI_TXOP_CHECK : 0);
}

/* Maps the entries onto the current primaries: refs sorted by (node,
 * cache, hash, key), groups by node.  Entries whose op is 0 are left
 * out; only those with select[i] when select is not NULL. */
static dg_err map_entries(dg_tx *tx, struct ent_ref *refs, uint32_t *nrefs,
    struct group *groups, uint32_t *ngroups, bool resend, int64_t *topver)
{
	size_t n = dgi_txents_count(tx->ents);
	uint32_t k = 0;
	*topver = 0;
	for (size_t i = 0; i < n; i++) {
		dgi_txent *e = dgi_txents_at(tx->ents, i);
		if (wire_op(tx, e, resend) == 0)
			continue;
		dg_err err;
		dg_cache *c = dgi_grid_cache_by_id(dgi_txsvc_grid(tx->s), e->cache_id);
		if (c == NULL)
			return DG_ERR_CLOSED;
		uint64_t own[8];
		int64_t tv;
		if (!resend && tx->conc == DG_PESSIMISTIC && e->origin != 0) {
			/* locked on a primary under the tx's topology: it prepares
			 * there, under that topology (a topology change waits for
			 * it), even if the key has moved since */
			refs[k++] = (struct ent_ref){ e->origin, 0, false, e->cache_id, e->hash, e };
			*topver = tx->topver;
			continue;
		}
		if (resend && e->back_to != 0) {
			/* its record or its write is there: only there (on any
			 * topology) */
			if (!e->done)
				refs[k++] = (struct ent_ref){ e->back_to, e->origin, e->recopy, e->cache_id,
					e->hash, e };
			continue;
		}
		if (dgi_cache_owners(c, e->part, own, DGI_OWNERS_BUF, &tv) == 0)
			return DG_ERR_NOT_READY;
		if (*topver != 0 && tv != *topver)
			return DG_ERR_NOT_READY; /* affinities mid-change */
		*topver = tv;
		(void)err;
		if (resend && e->done)
			continue;
		refs[k++] = (struct ent_ref){ own[0], resend ? e->origin : 0, false, e->cache_id, e->hash,
			e };
	}
	qsort(refs, k, sizeof(refs[0]), ref_cmp);
	uint32_t ng = 0;
	for (uint32_t i = 0; i < k; i++) {
		if (ng == 0 || groups[ng - 1].node != refs[i].node ||
		    groups[ng - 1].origin != refs[i].origin || groups[ng - 1].recopy != refs[i].recopy) {
			if (ng == MAX_NODES)
				return DG_ERR_LIMIT;
			groups[ng++] = (struct group){ refs[i].node, refs[i].origin, refs[i].recopy, 0, i };
		}
		groups[ng - 1].n++;
	}
	*nrefs = k;
	*ngroups = ng;
	return DG_OK;
}

/* Encodes group g's entries into b (a LIST). */
static dg_err encode_group(dg_tx *tx, const struct ent_ref *refs, const struct group *g,
    bool resend, dg_buf *b)
{
	dg_writer w;
	dg_writer_init(&w, dgi_txwire_registry(), b);
	dg_err e = dg_write_list_begin(&w, g->n * DGI_TXWIRE_FIELDS);
	for (uint32_t i = 0; i < g->n && e == DG_OK; i++) {
		const dgi_txent *en = refs[g->first + i].e;
		int64_t op = wire_op(tx, en, resend);
		dgi_txwire_ent we = { en->cache_id, en->part, op, { en->key, en->klen },
			{ en->op == DGI_TXOP_PUT ? en->val : NULL, en->op == DGI_TXOP_PUT ? en->vlen : 0 },
			{ en->ver_topver, en->ver_counter, en->ver_order, 0 }, 0 };
		if (we.val.ptr == NULL && en->op == DGI_TXOP_PUT)
			we.val.ptr = (const uint8_t *)"";
		e = dgi_txwire_put(&w, &we);
	}
	return e != DG_OK ? e : dg_write_end(&w);
}

/* Sends PREPARE (flags) to every group; waits; the first failure in *bad. */
static dg_err prepare_groups(dg_tx *tx, const struct ent_ref *refs, const struct group *groups,
    uint32_t ng, int64_t topver, int64_t flags, struct call *calls, bool then_commit)
{
	dg_err e = DG_OK;
	size_t *offs = alloca(sizeof(size_t) * (ng + 1));
	for (uint32_t i = 0; i < ng; i++) /* not sent: a definite failure */
		calls[i] = (struct call){ .tx = tx, .err = DG_ERR_TIMEOUT, .idx = -1 };
	tx->wire.len = 0;
	for (uint32_t i = 0; i < ng && e == DG_OK; i++) {
		offs[i] = tx->wire.len;
		e = encode_group(tx, refs, &groups[i], (flags & DGI_TXP_RESEND) != 0, &tx->wire);
	}
	if (e != DG_OK)
		return e;
	offs[ng] = tx->wire.len;
	if (!(flags & DGI_TXP_RESEND)) {
		/* a group's entries travel in one frame each time: its PREPARE,
		 * the primary's forward to its backups, its commit copies (the
		 * versions filled in: up to DGI_TX_ENTRY_GROWTH bytes more an
		 * entry).  A group that cannot fit one is refused here, before
		 * anything is sent: the forward failed half-way before, and the
		 * tx said only "rolled back" (test_commit_larger_than_a_frame) */
		size_t room = dg_tp_recv_max(dgi_txsvc_tp(tx->s));
		for (uint32_t i = 0; i < ng; i++) {
			size_t need = offs[i + 1] - offs[i] + (size_t)groups[i].n * DGI_TX_ENTRY_GROWTH +
			    DGI_TX_HEAD_ROOM;
			if (need > room) {
				dgi_log("warn", "TX-TOO-LARGE", "tx=%016llx:%llu node=%016llx entries=%u "
				    "bytes=%zu recv_max=%zu why=\"a transaction's entries on one primary "
				    "travel in one message\"", (unsigned long long)tx->id.node,
				    (unsigned long long)tx->id.seq, (unsigned long long)groups[i].node,
				    groups[i].n, need, room);
				return DG_ERR_LIMIT;
			}
		}
	}
	uint32_t left = dgi_txn_left_ms(tx);
	if (left == 0)
		return DG_ERR_TIMEOUT;
	if (!(flags & DGI_TXP_RESEND)) {
		uint32_t more = 0; /* primaries not yet in tx->locked */
		for (uint32_t i = 0; i < ng; i++) {
			bool have = false;
			for (uint32_t k = 0; k < tx->nlocked && !have; k++)
				have = tx->locked[k] == groups[i].node;
			more += !have;
		}
		if (tx->nlocked + more > MAX_NODES)
			return DG_ERR_LIMIT;
	}
	if (then_commit) {
		/* armed: the last answer, every one DG_OK, sends the COMMITs
		 * (the hold keeps an answer before the last PREPARE went out
		 * from being the last; nothing is due before it, so no answer
		 * reads these yet) */
		tx->arm_ng = ng;
		tx->arm_groups = groups;
		tx->arm_calls = calls;
		tx->commit_sent = false;
		dgi_due_add(&tx->outstanding, 1);
	}
	for (uint32_t i = 0; i < ng; i++) {
		dgi_msg_tx_prepare m = { (int64_t)tx->id.node, (int64_t)tx->id.seq, tx->start_ms,
			left, topver, flags | (groups[i].recopy ? DGI_TXP_RECOPY : 0),
			(int64_t)groups[i].origin, ng, 0, 0,
			{ tx->wire.data + offs[i], (uint32_t)(offs[i + 1] - offs[i]) } };
		if (!(flags & DGI_TXP_RESEND))
			dgi_txn_add_locked(tx, groups[i].node);
		dgi_txn_request(tx, &calls[i], groups[i].node, DGI_MSG_TX_PREPARE, &m,
		    left + NET_SLACK_MS, dgi_txn_on_ack);
	}
	if (then_commit) {
		if (dgi_txn_count_in(tx)) /* the hold */
			dgi_txn_commit_on_answer(tx);
	}
	dgi_txn_wait_all(tx);
	if (tx->commit_sent)
		return DG_OK; /* every primary prepared; calls[] holds the COMMITs' answers */
	for (uint32_t i = 0; i < ng; i++)
		if (calls[i].err != DG_OK)
			return calls[i].err;
	return DG_OK;
}

static int owner_applied(dg_tx *tx, struct dgi_txq_memo *m, const dgi_txent *e, uint64_t origin,
    bool want_resender, uint64_t *who);

/* After the decision: entries of primaries that did not confirm are
 * re-sent (one-phase, RESEND, naming the primary they were prepared on as
 * origin) until confirmed or the timeout.  They go back to that primary
 * while it is in the topology — it holds their prepared record, or
 * applied them — and to the keys' current primaries once it left (they
 * hold the backups' records, or its copies).  Entries a node applied
 * without every owner confirming (DGI_TXA_APPLIED) stay with that node,
 * which re-sends its copies (DGI_TXP_RECOPY): applying them anew
 * elsewhere, with a newer version, could overwrite what was written after
 * them there once their locks were released; that node gone, nobody can
 * vouch for them: the outcome is unknown. */
static dg_err finish_decided(dg_tx *tx, struct ent_ref *refs, struct group *groups,
    uint32_t ng, struct call *calls)
{
	bool lost = false;
	long pause = 20; /* ms between two rounds of resends */
	for (uint32_t i = 0; i < ng; i++) {
		if (calls[i].err != DG_OK && dg_log_enabled(DG_LOG_DEBUG))
			dgi_log("debug", "TX-DEBUG", "tx commit at %016llx: %s%s", (unsigned long long)groups[i].node,
			    dg_strerror(calls[i].err), calls[i].applied ? " (applied there)" : "");
		for (uint32_t j = 0; j < groups[i].n; j++) {
			dgi_txent *e = refs[groups[i].first + j].e;
			e->done = calls[i].err == DG_OK;
			e->origin = groups[i].origin != 0 ? groups[i].origin : groups[i].node;
			e->back_to = e->done ? 0 : groups[i].node;
			e->recopy = !e->done && (calls[i].applied || groups[i].recopy);
		}
	}
	for (;;) {
		size_t n = dgi_txents_count(tx->ents);
		struct dgi_txq_memo memo = { 0 }; /* this round's answers */
		for (size_t i = 0; i < n; i++) {
			dgi_txent *e = dgi_txents_at(tx->ents, i);
			if (e->back_to == 0 || e->done || !dgi_txsvc_gone(tx->s, e->back_to))
				continue;
			if (e->recopy) {
				/* it applied them (the primary they were prepared on)
				 * and left unconfirmed: an owner that applied its copies
				 * re-sends them; none: nobody can vouch for them */
				uint64_t who = 0;
				int a = e->back_to == e->origin ?
				    owner_applied(tx, &memo, e, e->back_to, true, &who) : 0;
				if (a > 0) {
					e->back_to = who;
				} else if (a == 0) {
					e->done = true;
					lost = true;
				} /* (-1: asked again next round) */
				continue;
			}
			/* the primary it was prepared on left.  An owner of the key
			 * that applied that primary's copies re-sends what it holds
			 * (RECOPY: that primary's version, or a later one).  Only
			 * when none did do the keys' current primaries apply the
			 * entries (they keep them prepared, or know nothing): a new
			 * primary that never got the copies would apply them anew,
			 * with a new version, over a later write the left primary
			 * made and copied to the other owner only (a cut reaches a
			 * node's peers one after another) — an acknowledged write
			 * lost (cluster_partition_netns, reg_tx;
			 * test_one_phase_resolved_by_the_owner_that_applied) */
			uint64_t who = 0;
			int a = owner_applied(tx, &memo, e, e->back_to, true, &who);
			if (a > 0) {
				e->back_to = who;
				e->recopy = true;
			} else if (a == 0) {
				e->back_to = 0; /* to the keys' current primaries */
			} /* (-1: asked again next round) */
		}
		uint32_t nrefs = 0, ng2 = 0;
		int64_t topver;
		dg_err e = map_entries(tx, refs, &nrefs, groups, &ng2, true, &topver);
		if (e == DG_OK && nrefs == 0) {
			if (lost)
				dgi_log("warn", "TX-UNKNOWN", "tx=%016llx:%llu phase=commit "
				    "why=\"a node that applied entries left before every owner confirmed "
				    "them\"", (unsigned long long)tx->id.node,
				    (unsigned long long)tx->id.seq);
			return lost ? DG_ERR_TX_UNKNOWN : DG_OK;
		}
		uint32_t left = dgi_txn_left_ms(tx);
		if (left == 0) {
			/* (logged as every outcome not learnt is: txn/README.md) */
			dgi_log("warn", "TX-UNKNOWN", "tx=%016llx:%llu phase=commit "
			    "why=\"the tx's timeout passed before every participant confirmed its "
			    "entries\"", (unsigned long long)tx->id.node, (unsigned long long)tx->id.seq);
			return DG_ERR_TX_UNKNOWN;
		}
		/* the topology catches up with the left primary; a round that
		 * confirmed nothing doubles the pause, up to 320 ms (a backup out
		 * of room refuses every resend — 250 copies of an 8 MiB value in
		 * 5 s at 20 ms) */
		dgi_txn_sleep_ms(pause < left ? pause : left);
		if (e != DG_OK)
			continue;
		prepare_groups(tx, refs, groups, ng2, topver, DGI_TXP_ONE_PHASE | DGI_TXP_RESEND,
		    calls, false);
		bool progress = false;
		for (uint32_t i = 0; i < ng2; i++)
			progress |= calls[i].err == DG_OK;
		pause = progress ? 20 : pause * 2 > 320 ? 320 : pause * 2;
		for (uint32_t i = 0; i < ng2; i++) {
			if (calls[i].err != DG_OK && dg_log_enabled(DG_LOG_DEBUG))
				dgi_log("debug", "TX-DEBUG", "tx resend at %016llx: %s%s",
				    (unsigned long long)groups[i].node, dg_strerror(calls[i].err),
				    calls[i].applied ? " (applied there)" : "");
			for (uint32_t j = 0; j < groups[i].n; j++) {
				dgi_txent *en = refs[groups[i].first + j].e;
				if (calls[i].err == DG_OK) {
					en->done = true;
				} else if (calls[i].applied) {
					en->back_to = groups[i].node; /* from now on, only there */
					en->recopy = true;
				} else if (en->back_to != 0 && !en->recopy &&
				    (calls[i].err == DG_ERR_REMAP || calls[i].err == DG_ERR_NOT_FOUND)) {
					en->back_to = 0; /* nothing there, not its primary: map */
				} else if (en->recopy && calls[i].err == DG_ERR_NOT_FOUND) {
					en->done = true; /* it cannot vouch for them any more */
					lost = true;
				}
			}
		}
	}
}

/* After a commit: the participants released their locks themselves;
 * locks on other nodes (a topology change moved keys since they were
 * taken) are released here. */
static void release_others(dg_tx *tx, const struct group *groups, uint32_t ng)
{
	uint32_t k = 0;
	for (uint32_t i = 0; i < tx->nlocked; i++) {
		bool part = false;
		for (uint32_t j = 0; j < ng && !part; j++)
			part = groups[j].node == tx->locked[i];
		if (!part)
			tx->locked[k++] = tx->locked[i];
	}
	tx->nlocked = k;
	if (k > 0)
		dgi_txn_release_all(tx, dgi_txn_release_wait(tx));
}

/* How long past its timeout a commit may spend learning the outcome of a
 * commit some primary did not answer (its PREPARE's answer comes up to
 * NET_SLACK_MS after the timeout). */
#define RESOLVE_GRACE_MS 1000

static uint32_t resolve_left(const dg_tx *tx)
{
	uint64_t now = dgi_now_ms(), until = tx->deadline + RESOLVE_GRACE_MS;
	return now < until ? (uint32_t)(until - now) : 0;
}

/* Primary `origin` left: which owner of e's key applied its copies
 * (dgi_txsvc_owner_applied, within resolve_left; m: the round's answers)? */
static int owner_applied(dg_tx *tx, struct dgi_txq_memo *m, const dgi_txent *e, uint64_t origin,
    bool want_resender, uint64_t *who)
{
	return dgi_txsvc_owner_applied(tx->s, m, e->cache_id, e->part, &tx->id, origin, 0,
	    want_resender, resolve_left(tx), who);
}

/* Primary g->node left: did a surviving owner of its keys apply its
 * entries (its copies, or a takeover of them)?  1 yes, 0 no (every owner
 * answered), -1 cannot tell (an owner did not answer, or the time to
 * learn it is up). */
static int owners_applied(dg_tx *tx, const struct ent_ref *refs, const struct group *g)
{
	struct dgi_txq_memo memo = { 0 }; /* each owner asked once */
	int res = 0;
	for (uint32_t i = 0; i < g->n && res != 1; i++) {
		int r = owner_applied(tx, &memo, refs[g->first + i].e, g->node, false, NULL);
		if (r != 0)
			res = r;
	}
	return res;
}

/* Has primary g->node (alive) committed the tx — recovery's doing, when
 * it took this node for gone?  1 yes (or committing), 0 no, -1 no answer. */
static int primary_committed(dg_tx *tx, const struct group *g)
{
	uint32_t left = resolve_left(tx);
	int64_t q = left > 0 ? dgi_txsvc_query(tx->s, g->node, &tx->id, 0, left) : -1;
	if (q < 0)
		return -1;
	return (q & 0xff) == DGI_TXQ_COMMITTED || (q & 0xff) == DGI_TXQ_COMMITTING;
}

/* The one primary p of a one-phase commit applied it, but not every owner
 * is known to have it (p did not get every backup's DG_OK, or its answer
 * was lost).  The decision is commit: join it — p re-sends its copies
 * (DGI_TXP_RECOPY) until every owner confirmed, or the outcome stays
 * unknown (the timeout, or p left). */
static dg_err join_one_phase(dg_tx *tx, struct ent_ref *refs, struct group *groups,
    struct call *calls)
{
	uint64_t p = groups[0].node;
	dgi_txn_step(tx, DGI_TXE_PREPARED); /* it committed: the decision was made there */
	dgi_txn_step(tx, DGI_TXE_COMMIT);
	calls[0].err = DG_ERR_TX_UNKNOWN;
	calls[0].applied = true;
	groups[0].origin = p;
	return finish_decided(tx, refs, groups, 1, calls);
}

/* The one primary of a one-phase commit did not answer: learn whether it
 * committed.  Alive, it is asked to roll back — it refuses (STATE) only
 * when it committed, and then the commit is joined (join_one_phase: its
 * copies may not have reached every owner).  Left, the tx committed iff a
 * surviving owner of its keys applied its copies: then the keys' current
 * primaries make sure every owner has them (a resend); an owner that does
 * not answer leaves it open (asked again).  No new lock is granted on
 * those keys meanwhile: this commit is in flight under the old topology
 * (the fence). */
static dg_err resolve_one_phase(dg_tx *tx, struct ent_ref *refs, struct group *groups,
    struct call *calls)
{
	uint64_t p = groups[0].node;
	for (;;) {
		uint32_t left = resolve_left(tx);
		if (left == 0)
			return DG_ERR_TX_UNKNOWN;
		if (dgi_txsvc_alive(tx->s, p)) {
			dgi_msg_tx_ctl m = { (int64_t)tx->id.node, (int64_t)tx->id.seq, 0, 0, 0 };
			dgi_txn_request(tx, &calls[0], p, DGI_MSG_TX_ROLLBACK, &m, left, dgi_txn_on_ack);
			dgi_txn_wait_all(tx);
			if (calls[0].err == DG_OK)
				return DG_ERR_TX_ROLLED_BACK; /* it had not committed; now never will */
			if (calls[0].err == DG_ERR_STATE) {
				int64_t q = dgi_txsvc_query(tx->s, p, &tx->id, 0, left);
				if (q >= 0 && (q & 0xff) == DGI_TXQ_COMMITTED)
					return join_one_phase(tx, refs, groups, calls);
			}
			dgi_txn_sleep_ms(20);
			continue;
		}
		int applied = owners_applied(tx, refs, &groups[0]);
		if (applied < 0) {
			dgi_txn_sleep_ms(20);
			continue; /* an owner did not answer: it may hold the copies */
		}
		if (applied == 0)
			return DG_ERR_TX_ROLLED_BACK; /* its only copy left with it */
		dgi_txn_step(tx, DGI_TXE_PREPARED); /* it committed: the decision was made there */
		dgi_txn_step(tx, DGI_TXE_COMMIT);
		for (uint32_t i = 0; i < groups[0].n; i++) {
			refs[groups[0].first + i].e->done = false;
			refs[groups[0].first + i].e->origin = p;
		}
		calls[0].err = DG_ERR_CONN_BROKEN;
		calls[0].applied = false;
		groups[0].origin = p;
		return finish_decided(tx, refs, groups, 1, calls);
	}
}

/* After a failed PREPARE round: may every primary have prepared?  Not
 * when one refused (answered an error) or never got its PREPARE (not
 * sent): that one will not prepare now (a late PREPARE finds the tx
 * rolled back), so no one — recovery included — can commit the tx. */
static bool all_may_have_prepared(const struct call *calls, uint32_t ng)
{
	for (uint32_t i = 0; i < ng; i++)
		if (!calls[i].sent || (calls[i].answered && calls[i].err != DG_OK))
			return false;
	return true;
}

/* The first refusal of a PREPARE round (what the caller reports), else e. */
static dg_err first_refusal(const struct call *calls, uint32_t ng, dg_err e)
{
	for (uint32_t i = 0; i < ng; i++)
		if (calls[i].answered && calls[i].err != DG_OK)
			return calls[i].err;
	return e;
}

/* The PREPAREs went out and every primary may have prepared, but some did
 * not answer (why: the round's error): the tx may commit without this
 * node, since recovery commits a tx every primary of which prepared once
 * it takes the near node for gone.  Learn the outcome before saying
 * anything:
 *   - a primary committed it (recovery did), or a left primary's copies
 *     were applied: the decision is commit — *decided, the caller joins
 *     it (COMMIT to every primary, resends);
 *   - no primary committed (each answered, or left and no owner of its
 *     keys applied its copies), then every one still alive confirmed a
 *     ROLLBACK: the tx is rolled back everywhere, returns why;
 *   - neither learnt before the timeout (plus RESOLVE_GRACE_MS):
 *     DG_ERR_TX_UNKNOWN.
 * The primaries are asked before any is rolled back, so a commit decided
 * by recovery is joined rather than split.  One decided between the
 * question and the ROLLBACK (it refuses: STATE) is joined too — those
 * already rolled back stay so (the split recovery's assumption allows,
 * README "Known limits"): the caller's commit cannot be confirmed by
 * them, and ends DG_ERR_TX_UNKNOWN. */
static dg_err settle_prepare(dg_tx *tx, const struct ent_ref *refs, const struct group *groups,
    uint32_t ng, struct call *calls, dg_err why, bool *decided)
{
	bool undone[MAX_NODES] = { false }; /* rolled back there, for sure */
	bool asked = false;                  /* no primary committed it */
	dgi_msg_tx_ctl m = { (int64_t)tx->id.node, (int64_t)tx->id.seq, 0, 0, 0 };
	*decided = false;
	for (;;) {
		uint32_t left = resolve_left(tx);
		if (left == 0)
			return DG_ERR_TX_UNKNOWN;
		bool known = true;
		for (uint32_t i = 0; i < ng && !asked; i++) {
			if (undone[i])
				continue;
			bool alive = dgi_txsvc_alive(tx->s, groups[i].node);
			int c = alive ? primary_committed(tx, &groups[i]) :
			    owners_applied(tx, refs, &groups[i]);
			if (c > 0) {
				*decided = true;
				return DG_OK;
			}
			if (c < 0)
				known = false;
			else if (!alive)
				undone[i] = true; /* its prepared entries left with it */
		}
		asked = asked || known;
		if (!asked) {
			dgi_txn_sleep_ms(20);
			continue;
		}
		bool sent[MAX_NODES] = { false };
		for (uint32_t i = 0; i < ng; i++)
			if (!undone[i] && (sent[i] = dgi_txsvc_alive(tx->s, groups[i].node)))
				dgi_txn_request(tx, &calls[i], groups[i].node, DGI_MSG_TX_ROLLBACK, &m, left, dgi_txn_on_ack);
		dgi_txn_wait_all(tx);
		uint32_t open = 0;
		for (uint32_t i = 0; i < ng; i++) {
			if (undone[i])
				continue;
			if (sent[i] && calls[i].answered && calls[i].err == DG_ERR_STATE) {
				*decided = true; /* committed (or committing) there meanwhile */
				return DG_OK;
			}
			if (sent[i] && calls[i].answered && calls[i].err == DG_OK) {
				undone[i] = true;
				continue;
			}
			int c = sent[i] ? -1 : owners_applied(tx, refs, &groups[i]);
			if (c > 0) {
				*decided = true;
				return DG_OK;
			}
			undone[i] = c == 0;
			open += c != 0;
		}
		if (open == 0)
			return why;
		dgi_txn_sleep_ms(20);
	}
}

/* Commit begins: from here a kill is refused (DG_ERR_CONFLICT) — unless
 * one came first, and then the tx rolls back. */
static bool seal(dg_tx *tx)
{
	int was = FATE_NONE;
	return atomic_compare_exchange_strong(&tx->fate, &was, FATE_SEALED);
}

/* A COMMIT to each of the first n primaries of groups, answered into
 * calls (the decision taken: the tx is COMMITTING). */
static void send_commits(dg_tx *tx, const struct group *groups, struct call *calls, uint32_t n)
{
	dgi_msg_tx_ctl cm = { (int64_t)tx->id.node, (int64_t)tx->id.seq, 0, 0, 0 };
	uint32_t left = dgi_txn_left_ms(tx);
	for (uint32_t i = 0; i < n; i++)
		dgi_txn_request(tx, &calls[i], groups[i].node, DGI_MSG_TX_COMMIT, &cm,
		    left + NET_SLACK_MS, dgi_txn_on_ack);
}

/* The decision, taken by the last answer of a PREPARE round armed for it
 * (dgi_txn_count_in), every primary prepared: as dgi_txn_commit() would
 * after its wait — the steps, then a COMMIT to each primary — without
 * waking the caller in between; on the thread that got the answer (a
 * reactor's, mostly: its COMMITs ride on the round's writes).  Then the
 * round's hold is dropped: the caller wakes once every COMMIT answered,
 * calls[] holding their answers, and goes on as after its own COMMITs
 * (finish_decided). */
void dgi_txn_commit_on_answer(dg_tx *tx)
{
	dgi_txn_step(tx, DGI_TXE_PREPARED);
	dgi_txn_step(tx, DGI_TXE_COMMIT); /* the decision */
	tx->commit_sent = true;
	send_commits(tx, tx->arm_groups, tx->arm_calls, tx->commit_ng);
	atomic_fetch_add(&dgi_txsvc_near(tx->s)->commit_on_answer, 1);
	(void)dgi_txn_count_in(tx); /* the hold (disarmed: count_in cannot fire again) */
}

/* Whether every entry written lives on one set of owners (partitions
 * with the same primary and backups).  Only then may a single primary
 * commit in one phase: it applies every entry and copies each to its
 * key's backups, which keep no record of the tx.  With owner sets that
 * differ, a cut among the backups can let one key's copies through and
 * not another's; the majority, promoting those backups, then held half
 * the tx, and no record anywhere to finish it by (the partition test's
 * bank at 1008: a transfer's credit and record applied, its debit not —
 * test_one_phase_copies_split_by_a_cut).  Two phases with one group
 * leave a prepared record on every backup, and recovery decides it.  The
 * owners are read under the current affinity; entries whose owners are
 * not known count as different. */
static bool one_owner_set(dg_tx *tx, const struct ent_ref *refs, uint32_t nrefs)
{
	uint64_t first[DGI_OWNERS_BUF], own[DGI_OWNERS_BUF];
	uint32_t nfirst = 0;
	bool have = false;
	for (uint32_t i = 0; i < nrefs; i++) {
		const dgi_txent *e = refs[i].e;
		if (e->op != DGI_TXOP_PUT && e->op != DGI_TXOP_REMOVE)
			continue; /* a check only: nothing copied */
		dg_cache *c = dgi_grid_cache_by_id(dgi_txsvc_grid(tx->s), e->cache_id);
		int64_t tv;
		uint32_t n = c != NULL ? dgi_cache_owners(c, e->part, own, DGI_OWNERS_BUF, &tv) : 0;
		if (n == 0 || n > DGI_OWNERS_BUF)
			return false;
		if (!have) {
			memcpy(first, own, n * sizeof(*own));
			nfirst = n;
			have = true;
			continue;
		}
		if (n != nfirst || own[0] != first[0])
			return false;
		for (uint32_t j = 1; j < n; j++) { /* the backups, in any order */
			bool found = false;
			for (uint32_t k = 1; k < nfirst && !found; k++)
				found = own[j] == first[k];
			if (!found)
				return false;
		}
	}
	return true;
}

dg_err dgi_txn_commit(dg_tx *tx)
{
	if (tx->state != DGI_TXS_ACTIVE)
		return tx->state == DGI_TXS_ROLLED_BACK ? DG_ERR_TX_ROLLED_BACK : DG_ERR_STATE;
	if (dgi_txsvc_segmented(tx->s) || !seal(tx)) {
		/* segmented: nothing was prepared yet, nothing will be */
		dg_err k = dgi_txn_fail_tx(tx, dgi_txsvc_segmented(tx->s) ? DG_ERR_SEGMENTED :
		    DG_ERR_TX_ROLLED_BACK);
		dgi_txsvc_near_done(tx->s, &tx->id, false, true);
		return k;
	}
	size_t n = dgi_txents_count(tx->ents);
	struct ent_ref *refs = n <= 64 ? alloca(sizeof(*refs) * (n ? n : 1)) :
	    dgi_alloc(sizeof(*refs) * n);
	if (refs == NULL)
		return dgi_txn_fail_tx(tx, DG_ERR_NOMEM);
	struct group groups[MAX_NODES];
	struct call calls[MAX_NODES];
	uint32_t nrefs = 0, ng = 0;
	int64_t topver = 0, inflight = 0;
	dg_err e;
	for (;;) {
		e = map_entries(tx, refs, &nrefs, groups, &ng, false, &topver);
		if (e != DG_ERR_NOT_READY || dgi_txn_left_ms(tx) == 0)
			break;
		dgi_txn_sleep_ms(5);
	}
	/* the topology fence: a change waits for older txs; commit under the
	 * new one once every node reported (the near's own view of it) */
	while (e == DG_OK && ng > 0 && topver != tx->topver &&
	    !dgi_txsvc_fence_open(tx->s, topver) && dgi_txn_left_ms(tx) > 0) {
		dgi_txn_sleep_ms(2);
		e = map_entries(tx, refs, &nrefs, groups, &ng, false, &topver);
	}
	if (e == DG_ERR_NOT_READY)
		e = DG_ERR_TIMEOUT;
	if (e != DG_OK)
		goto out_fail;
	dgi_txsvc_near_enter(tx->s, topver);
	inflight = topver;
	if (ng == 0) {
		/* nothing to write or check: release the locks, done */
		dgi_txn_release_all(tx, dgi_txn_release_wait(tx));
		dgi_txn_step(tx, DGI_TXE_COMMIT); /* nothing can refuse */
		dgi_txn_step(tx, DGI_TXE_COMMITTED);
		atomic_fetch_add(&dgi_txsvc_near(tx->s)->committed, 1);
		goto out;
	}
	/* locks on nodes that are not participants (a topology change moved
	 * the keys): release them */
	dgi_txn_step(tx, DGI_TXE_PREPARE);
	if (ng == 1 && one_owner_set(tx, refs, nrefs)) {
		e = prepare_groups(tx, refs, groups, 1, topver, DGI_TXP_ONE_PHASE, calls, false);
		if (e != DG_OK && calls[0].answered && calls[0].applied)
			e = join_one_phase(tx, refs, groups, calls);
		else if (e != DG_OK && calls[0].sent && !calls[0].answered)
			e = resolve_one_phase(tx, refs, groups, calls);
		if (e == DG_OK || e == DG_ERR_TX_UNKNOWN) {
			/* the one answer (or what was learnt) stands for all three */
			if (tx->state == DGI_TXS_PREPARING) {
				dgi_txn_step(tx, DGI_TXE_PREPARED);
				dgi_txn_step(tx, DGI_TXE_COMMIT);
			}
			dgi_txn_step(tx, e == DG_OK ? DGI_TXE_COMMITTED : DGI_TXE_TIMEOUT);
			dgi_txsvc_near_done(tx->s, &tx->id, true, e == DG_OK);
			if (e == DG_OK) {
				atomic_fetch_add(&dgi_txsvc_near(tx->s)->committed, 1);
				atomic_fetch_add(&dgi_txsvc_near(tx->s)->one_phase, 1);
			}
			release_others(tx, groups, 1);
			goto out;
		}
		goto out_fail;
	}
	if (atomic_load(&dgi_tx_crash_point) == 3) {
		prepare_groups(tx, refs, groups, 1, topver, 0, calls, false);
		e = DG_ERR_TX_UNKNOWN;
		goto out;
	}
	/* the COMMITs go out from the last PREPARE answer
	 * (dgi_txn_commit_on_answer):
	 * from the reactor that got it, in no other handler's call chain.
	 * Not when this node is a participant (its own answer comes from its
	 * own handlers, which may hold their locks); nor for a caller alone,
	 * which spins through its waits rather than sleeping and sends them
	 * as soon as its spin sees the answers (transfer_*_1c p50 200-206
	 * us that way, 219-234 from the reactor); nor when a test stops the
	 * commit in between (a crash point) */
	bool arm = atomic_load(&dgi_tx_crash_point) == 0 && !dgi_wait_alone(dgi_txsvc_tp(tx->s));
	for (uint32_t i = 0; i < ng && arm; i++)
		arm = groups[i].node != dgi_txsvc_self(tx->s);
	e = prepare_groups(tx, refs, groups, ng, topver, 0, calls, arm);
	if (e == DG_OK && tx->commit_sent)
		goto committing;
	if (e == DG_OK && atomic_load(&dgi_tx_crash_point) == 4) {
		atomic_store(&dgi_tx_cut_node, tx->id.node);
		for (uint32_t i = 0; i < ng; i++) {
			calls[i].err = DG_ERR_TIMEOUT;
			calls[i].answered = false;
		}
		e = DG_ERR_TIMEOUT;
	}
	if (e != DG_OK && all_may_have_prepared(calls, ng)) {
		/* no primary refused: the outcome is not ours to assume */
		bool decided;
		e = settle_prepare(tx, refs, groups, ng, calls, e, &decided);
		if (e == DG_ERR_TX_UNKNOWN) {
			/* this node decided nothing but roll back; that it could
			 * not confirm: a primary may commit by recovery */
			dgi_txn_step(tx, DGI_TXE_PREPARE_FAILED);
			dgi_txn_release_all(tx, dgi_txn_release_wait(tx));
			dgi_txn_step(tx, DGI_TXE_RECOVERED_COMMIT);
			dgi_txsvc_near_done(tx->s, &tx->id, false, true);
			dgi_log("warn", "TX-UNKNOWN", "tx=%016llx:%llu phase=prepare",
			    (unsigned long long)tx->id.node, (unsigned long long)tx->id.seq);
			goto out;
		}
	} else if (e != DG_OK) {
		e = first_refusal(calls, ng, e); /* rolled back for sure */
	}
	if (e != DG_OK)
		goto out_fail;
	dgi_txn_step(tx, DGI_TXE_PREPARED);
	dgi_txn_step(tx, DGI_TXE_COMMIT); /* the decision */
	int crash = atomic_load(&dgi_tx_crash_point);
	atomic_fetch_add(&dgi_txsvc_near(tx->s)->commit_waited, 1);
	if (crash == 5) {
		atomic_store(&dgi_tx_crash_reached, 5); /* every primary prepared */
		dgi_txn_sleep_ms(500);
		crash = 0;
	}
	send_commits(tx, groups, calls, crash == 2 ? 1 : crash == 1 ? 0 : ng);
	dgi_txn_wait_all(tx);
	if (crash != 0) {
		e = DG_ERR_TX_UNKNOWN;
		goto out;
	}
committing:
	e = finish_decided(tx, refs, groups, ng, calls);
	dgi_txn_step(tx, e == DG_OK ? DGI_TXE_COMMITTED : DGI_TXE_TIMEOUT);
	dgi_txsvc_near_done(tx->s, &tx->id, true, e == DG_OK);
	if (e == DG_OK)
		atomic_fetch_add(&dgi_txsvc_near(tx->s)->committed, 1);
	release_others(tx, groups, ng);
	goto out;
out_fail:
	e = dgi_txn_fail_tx(tx, e);
	dgi_txsvc_near_done(tx->s, &tx->id, false, true);
out:
	if (inflight != 0)
		dgi_txsvc_near_leave(tx->s, inflight);
	if (n > 64)
		dgi_free(refs);
	return e;
}

dg_err dg_tx_commit(dg_tx *tx)
{
	if (tx == NULL)
		return DG_ERR_INVAL;
	dg_err e = dgi_txn_commit(tx);
	dgi_txn_tx_free(tx);
	return e;
}
