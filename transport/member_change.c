/* member_change.c — topology changes, the coordinator's side: a new
 * version proposed to the voters of the one before it and installed once
 * a majority granted it (PROTOCOL.md, "Majority"), joins, removals, and
 * baseline changes (BASELINE).
 */
#define _POSIX_C_SOURCE 200809L
#include "member_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- topology changes (coordinator) ---- */

/* A version waiting for a majority of the voters of the one before it:
 * Paxos over the version after cur (PROTOCOL.md, "Majority").  Phase 1
 * (PREPARE) gets a majority's promise for ballot b and learns what any of
 * them accepted after cur; phase 2 (ACCEPT) proposes that topology, the
 * one accepted at the highest ballot (ADOPTED), else the one this node
 * wants.  One at a time (m->prop); each TOPO_PROPOSE in flight and each
 * waiter hold a reference (under m->mu). */
enum { PROP_PENDING, PROP_DONE, PROP_ABANDONED, PROP_NEXT };
enum { PHASE_WAIT = 4 }; /* agreed; installed at install_at (after DG_PX_*) */

struct prop {
	int refs;
	int state;
	int phase;                /* DG_PX_PREPARE, DG_PX_ACCEPT or _ADOPTED, PHASE_WAIT */
	bool sending;             /* this phase's messages still being sent */
	dg_topology *cur, *t;     /* held; t: wanted, from phase 2 the proposed */
	struct dgi_ballot b;
	const char **voters;      /* cur's (views into cur) */
	uint32_t nvoters, need, granted;
	bool *got;                /* per voter, this phase */
	bool *pre;                /* per voter: counted in both phases unasked
	                             (itself, a voter that left) */
	uint32_t npre;
	uint32_t namn;            /* this phase's grants by amnesiac joiners
	                             (dgi_quorum_won) */
	/* joiners asked besides cur's nodes: a voter's address under a node
	 * id cur does not hold (a restart; PROTOCOL.md, "A voter that
	 * restarted") — the joiner, and while SEGMENTED the recent ones */
	dg_node_id xid[1 + RJOIN_MAX];
	int32_t xidx[1 + RJOIN_MAX];
	uint32_t nx;
	int32_t self_idx;         /* this node's voter index, or -1 */
	uint32_t sent, answered;  /* this phase */
	dg_topology *best;        /* phase 1: accepted at the highest ballot a */
	struct dgi_ballot best_b; /* voter reported (held), or NULL */
	uint64_t install_at;      /* PHASE_WAIT */
	int64_t refused_above;    /* the highest version a refusal named */
	dg_node_id drop_hint;     /* a node dropped (for the log) */
	uint32_t ndrop;
	/* the request to answer once decided */
	dg_msg_type kind;         /* DG_MSG_JOIN, DG_MSG_BASELINE, or UNKNOWN */
	dg_msg_in req;            /* type, flags, corr and from only */
	dg_msg_join_ack join_ack;
	dg_node_id joiner;
	uint64_t started;
};

struct vote {
	dg_member *m;
	struct prop *p;
	int32_t idx;
	int phase;                /* the one it was sent in */
};

static void prop_free(struct prop *p)
{
	dg_topology_release(p->cur);
	dg_topology_release(p->t);
	dg_topology_release(p->best);
	dgi_free(p->voters);
	dgi_free(p->got);
	dgi_free(p->pre);
	dgi_free(p);
}

static void prop_release(dg_member *m, struct prop *p)
{
	pthread_mutex_lock(&m->mu);
	bool last = --p->refs == 0;
	pthread_mutex_unlock(&m->mu);
	if (last)
		prop_free(p);
}

void dgi_member_prop_drop(dg_member *m)
{
	struct prop *p = m->prop;
	m->prop = NULL;
	if (p != NULL && --p->refs == 0)
		prop_free(p);
}

static void count_pre(struct prop *p, int32_t k)
{
	if (k >= 0 && !p->pre[k]) {
		p->pre[k] = true;
		p->npre++;
	}
}

/* How long a JOIN's sender is asked to vote: until its next attempt. */
#define RECENT_JOIN_MS (2 * JOIN_ATTEMPT_MS)

void dgi_member_join_seen(dg_member *m, const dg_msg_join *j)
{
	if (j->address.len == 0 || j->address.len >= DG_BASELINE_ADDR_MAX ||
	    (j->attrs & DG_NODE_CLIENT))
		return;
	uint64_t now = dgi_now_ms();
	pthread_mutex_lock(&m->mu);
	struct recent_join *slot = &m->rjoin[0];
	for (size_t k = 0; k < sizeof(m->rjoin) / sizeof(m->rjoin[0]); k++) {
		struct recent_join *r = &m->rjoin[k];
		if (strlen(r->url) == j->address.len &&
		    memcmp(r->url, j->address.ptr, j->address.len) == 0) {
			slot = r;
			break;
		}
		if (r->ms < slot->ms)
			slot = r; /* the oldest goes */
	}
	memcpy(slot->url, j->address.ptr, j->address.len);
	slot->url[j->address.len] = 0;
	slot->id = (dg_node_id)j->node_id;
	slot->ms = now;
	pthread_mutex_unlock(&m->mu);
}

/* Whether a node of t listens at url. */
static bool url_in(const dg_topology *t, const char *url)
{
	for (uint32_t i = 0; i < t->count; i++)
		if (t->nodes[i].url != NULL && strcmp(t->nodes[i].url, url) == 0)
			return true;
	return false;
}

/* A joiner to ask besides cur's nodes: a server whose address is a voter
 * of cur under a node id cur does not hold. */
static void add_extra(dg_member *m, struct prop *p, const dg_topology *cur, dg_node_id id,
    const char *url)
{
	int32_t idx = dgi_quorum_index(p->voters, p->nvoters, url);
	if (idx < 0 || id == 0 || id == dg_tp_self(m->tp) || dg_topology_find(cur, id) != NULL ||
	    p->nx == sizeof(p->xid) / sizeof(p->xid[0]))
		return;
	for (uint32_t k = 0; k < p->nx; k++)
		if (p->xid[k] == id)
			return;
	p->xid[p->nx] = id;
	p->xidx[p->nx++] = idx;
}

/* A new proposal of t after cur (mu held), with this node's promise and
 * the leavers' votes counted.  *direct: those make a majority already (one
 * voter) and this node accepted nothing after cur: t is agreed. */
static struct prop *prop_new_locked(dg_member *m, dg_topology *cur, dg_topology *t,
    const struct change *ch, bool *direct)
{
	*direct = false;
	struct prop *p = dgi_calloc(1, sizeof(*p));
	uint32_t cap = cur->count + cur->nbaseline;
	if (p == NULL || (p->voters = dgi_calloc(cap ? cap : 1, sizeof(char *))) == NULL ||
	    (p->got = dgi_calloc(cap ? cap : 1, sizeof(bool))) == NULL ||
	    (p->pre = dgi_calloc(cap ? cap : 1, sizeof(bool))) == NULL) {
		if (p != NULL) {
			dgi_free(p->voters);
			dgi_free(p->got);
		}
		dgi_free(p);
		return NULL;
	}
	p->nvoters = dgi_quorum_voters(cur, p->voters, cap);
	p->need = p->nvoters > 0 ? dgi_quorum_need(p->nvoters) : 0;
	/* its ballot: above every round it promised or saw refused */
	int64_t round = 1;
	if (m->seen_base == cur->version && m->seen_round >= round)
		round = m->seen_round + 1;
	if (m->promised.base == cur->version && m->promised.round >= round)
		round = m->promised.round + 1;
	p->b = (struct dgi_ballot){ cur->version, round, dg_tp_self(m->tp) };
	/* its own promise — unless it promised a later base (it is behind) */
	bool self_ok = dgi_ballot_cmp(&p->b, &m->promised) >= 0;
	p->self_idx = dgi_quorum_index(p->voters, p->nvoters, dg_tp_address(m->tp));
	if (self_ok)
		count_pre(p, p->self_idx);
	/* a joiner on a voter's address (a voter restarted as a new node)
	 * is asked like the voters: it promises and accepts as one, from
	 * the state it kept on disk (PROTOCOL.md, "A voter that restarted") */
	const dg_msg_join *jn = ch->add != NULL ? ch->add :
	    ch->req != NULL && ch->req->type == DG_MSG_JOIN ? ch->req->body : NULL;
	if (jn != NULL && jn->address.len < DG_BASELINE_ADDR_MAX && !(jn->attrs & DG_NODE_CLIENT)) {
		char url[DG_BASELINE_ADDR_MAX];
		memcpy(url, jn->address.ptr, jn->address.len);
		url[jn->address.len] = 0;
		add_extra(m, p, cur, (dg_node_id)jn->node_id, url);
	}
	/* and, while this node is SEGMENTED (it has no majority of members
	 * to ask), every joiner still waiting its turn from an address no
	 * node of cur holds */
	uint64_t now = dgi_now_ms();
	bool seg = atomic_load(&m->segmented);
	for (size_t k = 0; seg && k < RJOIN_MAX; k++) {
		const struct recent_join *r = &m->rjoin[k];
		if (r->ms != 0 && now - r->ms <= RECENT_JOIN_MS && !url_in(cur, r->url))
			add_extra(m, p, cur, r->id, r->url);
	}
	/* a voter that left (LEAVE) serves nothing and votes no more: its
	 * LEAVE is its vote for the versions without it */
	for (uint32_t i = 0; i < cur->count && m->since != NULL && m->topo == cur; i++)
		if (m->since[i].left)
			count_pre(p, dgi_quorum_index(p->voters, p->nvoters, cur->nodes[i].url));
	bool accepted = m->acc != NULL && m->acc_b.base == cur->version;
	if (p->npre >= p->need && !accepted) {
		*direct = true;
		prop_free(p);
		return NULL;
	}
	if (self_ok)
		m->promised = p->b;
	if (accepted) {
		p->best = dgi_topo_hold(m->acc);
		p->best_b = m->acc_b;
	}
	memcpy(p->got, p->pre, p->nvoters * sizeof(bool));
	p->granted = p->npre;
	p->phase = DG_PX_PREPARE;
	p->refs = 1; /* m->prop's */
	p->state = PROP_PENDING;
	p->sending = true;
	p->cur = dgi_topo_hold(cur);
	p->t = dgi_topo_hold(t);
	p->ndrop = (uint32_t)ch->ndrop;
	p->drop_hint = ch->ndrop > 0 ? ch->drop[0] : 0;
	p->started = dgi_now_ms();
	if (ch->req != NULL && (ch->req->type == DG_MSG_JOIN || ch->req->type == DG_MSG_BASELINE)) {
		p->kind = ch->req->type;
		p->req = *ch->req;
		p->req.body = NULL;
		p->req.raw = NULL;
		p->req.raw_len = 0;
		p->join_ack = ch->join_ack;
		p->joiner = ch->add != NULL ? (dg_node_id)ch->add->node_id : 0;
	}
	return p;
}

/* What prop_finish logs, read under m->mu (votes still arriving change
 * the counts). */
struct tally {
	uint32_t granted, answered;
	int64_t refused_above;
};

/* Phase 1 won (mu held): phase 2 with the topology accepted at the
 * highest ballot a voter reported, else the wanted one, accepted here
 * first (its own removal too, when adopted: it stops counting itself
 * toward its lease). */
static void phase2_locked(dg_member *m, struct prop *p)
{
	p->phase = DG_PX_ACCEPT;
	if (p->best != NULL) {
		dg_topology_release(p->t);
		p->t = p->best;
		p->best = NULL;
		p->phase = DG_PX_ADOPTED;
	}
	memcpy(p->got, p->pre, p->nvoters * sizeof(bool));
	p->granted = p->npre;
	p->namn = 0;
	if (dgi_ballot_cmp(&p->b, &m->promised) >= 0) {
		m->promised = p->b;
		dg_topology_release(m->acc);
		m->acc = dgi_topo_hold(p->t);
		m->acc_b = p->b;
		if (p->t->version > m->voted_version)
			m->voted_version = p->t->version;
		dgi_member_freeze_locked(m, p->t);
	} else if (p->self_idx >= 0 && p->got[p->self_idx]) {
		/* it promised a higher ballot meanwhile (another coordinator's
		 * PREPARE): its acceptance does not count */
		p->got[p->self_idx] = false;
		p->granted--;
	}
	p->sent = p->answered = 0;
	p->sending = true;
}

/* Decides p when it can be (mu held): DONE installs its version (*old: the
 * one replaced, *installed set), ABANDONED leaves it, NEXT starts phase 2
 * (the caller sends it).  Returns the new state (PROP_PENDING: not yet). */
static int prop_decide_locked(dg_member *m, struct prop *p, dg_topology **old, bool *installed,
    struct tally *tl)
{
	*old = NULL;
	*installed = false;
	tl->granted = p->granted;
	tl->answered = p->answered;
	tl->refused_above = p->refused_above;
	if (p->state != PROP_PENDING)
		return PROP_PENDING;
	bool current = m->topo == p->cur && m->joined && !m->stopping;
	bool won = dgi_quorum_won(p->granted, p->namn, p->nvoters);
	if (p->phase == PHASE_WAIT) {
		if (current && dgi_now_ms() < p->install_at)
			return PROP_PENDING;
	} else if (!won && (p->sending || p->answered < p->sent)) {
		return PROP_PENDING;
	}
	if (won && current && p->phase == DG_PX_PREPARE) {
		phase2_locked(m, p);
		return PROP_NEXT;
	}
	if (won && current && p->phase == DG_PX_ADOPTED && dgi_topo_removes(p->cur, p->t)) {
		/* adopted: voted without the silence rule; every voter that
		 * accepted it echoes the nodes it removes no more, so their
		 * leases end within a lease of the last acceptance */
		p->phase = PHASE_WAIT;
		p->install_at = dgi_now_ms() + removal_silence_ms(m);
		dgi_log("info", "TOPOLOGY-AGREED-WAIT", "version=%lld wait_ms=%llu",
		    (long long)p->t->version, (unsigned long long)removal_silence_ms(m));
		return PROP_PENDING;
	}
	if ((won || p->phase == PHASE_WAIT) && current) {
		bool taken;
		*old = dgi_member_install_locked(m, dgi_topo_hold(p->t), &taken);
		*installed = taken;
		p->state = taken ? PROP_DONE : PROP_ABANDONED;
	} else {
		/* refused, unanswered, or the topology moved on meanwhile */
		p->state = PROP_ABANDONED;
	}
	if (p->refused_above > m->vote_floor)
		m->vote_floor = p->refused_above;
	if (m->prop == p) {
		m->prop = NULL;
		p->refs--; /* m->prop's (the caller holds one) */
	}
	pthread_cond_broadcast(&m->cv);
	return p->state;
}

static void log_baseline(dg_member *m, const struct change *ch);
static void prop_send(dg_member *m, struct prop *p);

/* After prop_decide_locked, outside mu: broadcast, log, answer — or send
 * phase 2. */
static void prop_finish(dg_member *m, struct prop *p, int state, dg_topology *old, bool inst,
    const struct tally *tl)
{
	if (state == PROP_NEXT) {
		prop_send(m, p);
		return;
	}
	if (state == PROP_PENDING)
		return;
	if (state == PROP_DONE) {
		if (inst)
			dgi_member_installed(m, old, p->t);
		dgi_member_broadcast(m, p->t);
		dgi_log("info", "TOPOLOGY-AGREED", "version=%lld votes=%u of=%u round=%lld%s took_ms=%llu",
		    (long long)p->t->version, tl->granted, p->nvoters, (long long)p->b.round,
		    p->phase == DG_PX_ACCEPT ? "" : " adopted=1",
		    (unsigned long long)(dgi_now_ms() - p->started));
	} else {
		uint32_t sup;
		if (dgi_lograte_due(&m->lr_agree, dgi_now_ms(), 1000, &sup))
			dgi_log("warn", "TOPOLOGY-NOT-AGREED", "version=%lld phase=%d votes=%u need=%u of=%u "
			    "answered=%u refused_above=%lld dropped=%u node=%016llx repeated=%u",
			    (long long)p->t->version, p->phase, tl->granted, p->need, p->nvoters,
			    tl->answered, (long long)tl->refused_above, p->ndrop,
			    (unsigned long long)p->drop_hint, sup);
	}
	if (p->kind == DG_MSG_JOIN) {
		const dg_topology_node *j = state == PROP_DONE ? dg_topology_find(p->t, p->joiner) : NULL;
		if (j != NULL || (state == PROP_DONE && p->joiner == 0)) {
			dg_msg_join_ack ack = p->join_ack;
			ack.topology_version = p->t->version;
			if (j != NULL)
				ack.order = j->order;
			if (p->joiner != 0)
				dgi_log("info", "NODE-JOINED", "node=%016llx order=%lld version=%lld",
				    (unsigned long long)p->joiner, (long long)ack.order,
				    (long long)ack.topology_version);
			dg_tp_reply(m->tp, &p->req, DG_MSG_JOIN_ACK, &ack);
		} else {
			/* (an adopted version without the joiner: it asks again) */
			dg_tp_reply_error(m->tp, &p->req, DG_ERR_NOT_READY);
		}
	} else if (p->kind == DG_MSG_BASELINE) {
		if (state == PROP_DONE && p->phase == DG_PX_ACCEPT) {
			struct change ch = { .op = 0, .version = p->t->version, .changed = true };
			log_baseline(m, &ch);
			dg_msg_baseline_ack ack = { p->t->version, 1 };
			dg_tp_reply(m->tp, &p->req, DG_MSG_BASELINE_ACK, &ack);
		} else {
			dg_tp_reply_error(m->tp, &p->req, DG_ERR_NOT_READY);
		}
	}
	if (!inst)
		dg_topology_release(old); /* (dgi_member_installed() released it) */
}

/* The member thread's tick: an agreed version waiting out a lease. */
void dgi_member_prop_tick(dg_member *m)
{
	pthread_mutex_lock(&m->mu);
	struct prop *p = m->prop;
	if (p == NULL || p->phase != PHASE_WAIT) {
		pthread_mutex_unlock(&m->mu);
		return;
	}
	p->refs++;
	dg_topology *old;
	bool inst;
	struct tally tl;
	int st = prop_decide_locked(m, p, &old, &inst, &tl);
	pthread_mutex_unlock(&m->mu);
	prop_finish(m, p, st, old, inst, &tl);
	prop_release(m, p);
}

static void vote_done(void *ctx, dg_err err, const dg_msg_in *reply)
{
	struct vote *v = ctx;
	dg_member *m = v->m;
	struct prop *p = v->p;
	const dg_msg_topo_vote *r = err == DG_OK ? reply->body : NULL;
	dg_topology *acc = NULL; /* a PREPARE's answer: what it accepted */
	bool yes = r != NULL && (r->granted & DG_VOTE_GRANTED);
	if (yes && v->phase == DG_PX_PREPARE && r->acc_from != 0 &&
	    r->acc_base == p->b.base) {
		dg_raw raw = { r->acc.ptr, r->acc.len };
		if (dgi_member_topo_decode(m, &raw, &acc) != DG_OK)
			acc = NULL; /* (a broken answer counts as none) */
	}
	dg_topology *old;
	bool inst;
	pthread_mutex_lock(&m->mu);
	if (v->phase == p->phase) {
		p->answered++;
		if (yes) {
			if (v->idx >= 0 && !p->got[v->idx]) {
				p->got[v->idx] = true;
				if (r->granted & DG_VOTE_AMNESIAC)
					p->namn++; /* (dgi_quorum_won counts one) */
				else
					p->granted++;
			}
			struct dgi_ballot ab = { r->acc_base, r->acc_round, (dg_node_id)r->acc_from };
			if (acc != NULL && (p->best == NULL || dgi_ballot_cmp(&ab, &p->best_b) > 0)) {
				dg_topology_release(p->best);
				p->best = acc;
				p->best_b = ab;
				acc = NULL;
			}
		} else if (r != NULL) {
			if (r->version > p->refused_above)
				p->refused_above = r->version;
			if (r->promised_base == p->b.base &&
			    (m->seen_base != p->b.base || r->promised_round > m->seen_round)) {
				m->seen_base = p->b.base;
				m->seen_round = r->promised_round;
			}
		}
	}
	struct tally tl;
	int st = prop_decide_locked(m, p, &old, &inst, &tl);
	pthread_mutex_unlock(&m->mu);
	dg_topology_release(acc);
	prop_finish(m, p, st, old, inst, &tl);
	prop_release(m, p);
	member_put(m);
	dgi_free(v);
}

/* Sends p's TOPO_PROPOSE of its phase to every voter of its base but
 * itself and the nodes p->t drops (silent by now, as a rule), and to the
 * joiners on voters' addresses (p->xid), then decides what the sends alone
 * decide (every one failed at once).  This node's own promise or
 * acceptance is on disk first.  Outside mu; holds a reference to p
 * meanwhile. */
static void prop_send(dg_member *m, struct prop *p)
{
	pthread_mutex_lock(&m->mu);
	int phase = p->phase;
	dg_topology *t = dgi_topo_hold(p->t);
	pthread_mutex_unlock(&m->mu);
	dg_buf b;
	dg_buf_init(&b);
	dg_err e = dgi_acceptor_save(m); /* (a failure asks nobody: not agreed) */
	if (e == DG_OK)
		e = dgi_member_topo_encode(m, t, &b);
	pthread_mutex_lock(&m->mu);
	bool pacc = phase != DG_PX_PREPARE && p->self_idx >= 0 && p->got[p->self_idx];
	pthread_mutex_unlock(&m->mu);
	bool removes = phase != DG_PX_PREPARE && dgi_topo_removes(p->cur, t);
	dg_msg_topo_propose body = { p->b.base, p->b.round,
		phase | (pacc ? DG_PX_PROPOSER_ACCEPTED : 0) | (removes ? DG_PX_REMOVES : 0),
		{ b.data, (uint32_t)b.len } };
	uint32_t ft = atomic_load_explicit(&m->ft_ms, memory_order_relaxed);
	uint32_t timeout = ft / 2 > 100 ? ft / 2 : 100;
	for (uint32_t i = 0; e == DG_OK && i < p->cur->count + p->nx; i++) {
		dg_node_id id;
		int32_t idx;
		if (i < p->cur->count) {
			const dg_topology_node *n = &p->cur->nodes[i];
			id = n->id;
			idx = dgi_quorum_index(p->voters, p->nvoters, n->url);
			if (idx < 0 || dg_topology_find(t, n->id) == NULL || n->id == dg_tp_self(m->tp))
				continue;
		} else {
			id = p->xid[i - p->cur->count];
			idx = p->xidx[i - p->cur->count];
		}
		pthread_mutex_lock(&m->mu); /* (answers to earlier sends write it) */
		bool got = p->got[idx] || p->phase != phase;
		pthread_mutex_unlock(&m->mu);
		if (got)
			continue;
		struct vote *v = dgi_alloc(sizeof(*v));
		if (v == NULL)
			break;
		v->m = member_get(m);
		v->p = p;
		v->idx = idx;
		v->phase = phase;
		pthread_mutex_lock(&m->mu);
		p->refs++;
		p->sent++;
		pthread_mutex_unlock(&m->mu);
		if (dg_tp_request(m->tp, id, DG_MSG_TOPO_PROPOSE, &body, timeout, vote_done, v) != DG_OK)
			vote_done(v, DG_ERR_UNREACHABLE, NULL);
	}
	dg_buf_free(&b);
	dg_topology_release(t);
	dg_topology *old;
	bool inst;
	pthread_mutex_lock(&m->mu);
	if (p->phase == phase)
		p->sending = false;
	struct tally tl;
	int st = prop_decide_locked(m, p, &old, &inst, &tl);
	pthread_mutex_unlock(&m->mu);
	prop_finish(m, p, st, old, inst, &tl);
}

/* The nodes of cur without ch->drop, plus ch->add (url: its storage). */
static uint32_t next_nodes(const dg_topology *cur, struct change *ch,
    dg_topology_node *nodes, char *url)
{
	uint32_t n = 0;
	int64_t max_order = 0;
	for (uint32_t i = 0; i < cur->count && n < DG_TOPOLOGY_MAX; i++) {
		bool gone = false;
		for (size_t k = 0; k < ch->ndrop; k++)
			gone |= cur->nodes[i].id == ch->drop[k];
		if (cur->nodes[i].order > max_order)
			max_order = cur->nodes[i].order;
		if (!gone)
			nodes[n++] = cur->nodes[i];
	}
	const dg_msg_join *add = ch->add;
	if (add != NULL) {
		memcpy(url, add->address.ptr, add->address.len);
		url[add->address.len] = 0;
		nodes[n].id = (dg_node_id)add->node_id;
		/* above every order and the version joined from: a node that
		 * rejoins never gets an order it had (its incarnation: the tx
		 * service forgets the records of the one before) */
		nodes[n].order = max_order >= cur->version ? max_order + 1 : cur->version + 1;
		/* STANDBY is the coordinator's to set, never the joiner's */
		nodes[n].attrs = add->attrs < 0 || add->attrs > UINT32_MAX ? 0 :
		    (uint32_t)add->attrs & ~DG_NODE_STANDBY;
		nodes[n].url = url;
		ch->order = nodes[n].order;
		n++;
	}
	return n;
}

/* Coordinator: the next version from the current one, as ch says, with
 * every node's STANDBY bit recomputed.  Installs and broadcasts it when
 * something changed (ch->changed); nothing to change is DG_OK. */
dg_err dgi_member_change_apply(dg_member *m, struct change *ch)
{
	char url[256];
	/* the baseline and the next nodes (one more than fits: a join into a
	 * full topology is seen, and refused) off the handler's stack */
	struct bl *bl = dgi_alloc(sizeof(*bl) + (DG_TOPOLOGY_MAX + 1) * sizeof(dg_topology_node));
	if (bl == NULL)
		return DG_ERR_NOMEM;
	dg_topology_node *nodes = (dg_topology_node *)(void *)(bl + 1);
	if (ch->add != NULL && ch->add->address.len >= sizeof(url)) {
		dgi_free(bl);
		return DG_ERR_INVAL;
	}
	pthread_mutex_lock(&m->mu);
	if (m->stopping) {
		/* a node on its way out (LEAVE sent) coordinates nothing: the
		 * others, seeing it gone, may already be choosing another */
		pthread_mutex_unlock(&m->mu);
		dgi_free(bl);
		return DG_ERR_CLOSED;
	}
	if (!m->joined || m->quiet) {
		/* out of the topology, or just back from its own pause and not
		 * yet vouched for: the cluster may have moved on without this
		 * node, which must not issue a version of its own (the joiner
		 * or the requester retries) */
		pthread_mutex_unlock(&m->mu);
		dgi_free(bl);
		return m->joined ? DG_ERR_NOT_READY : DG_ERR_STATE;
	}
	if (m->prop != NULL) {
		/* one change at a time: the caller asks again (a joiner, the
		 * next heartbeat round) once the majority answered this one */
		pthread_mutex_unlock(&m->mu);
		dgi_free(bl);
		return DG_ERR_BUSY;
	}
	dg_topology *cur = m->topo;
	uint32_t n = next_nodes(cur, ch, nodes, url);
	if (n > DG_TOPOLOGY_MAX) {
		pthread_mutex_unlock(&m->mu);
		dgi_free(bl);
		dgi_log("warn", "JOIN-REFUSED", "node=%016llx why=\"the topology holds %d nodes\"",
		    (unsigned long long)ch->add->node_id, DG_TOPOLOGY_MAX);
		return DG_ERR_LIMIT;
	}
	dgi_bl_of(bl, cur);
	ch->version = cur->version;
	if (ch->rebase &&
	    (ch->why = dgi_bl_apply(bl, nodes, n, ch->op, ch->addrs, ch->naddrs, majority(m))) != NULL) {
		pthread_mutex_unlock(&m->mu);
		dgi_free(bl);
		return DG_ERR_INVAL;
	}
	bool bits = dgi_bl_standby_bits(bl, nodes, n);
	ch->changed = ch->add != NULL || n != cur->count || bits || !dgi_bl_same(bl, cur) ||
	    ch->force;
	dg_topology *t = NULL, *old = NULL;
	struct prop *p = NULL;
	bool taken = false, direct = true;
	if (ch->changed) {
		int64_t next = cur->version + 1;
		if (m->vote_floor >= next && m->vote_floor < INT64_MAX / 2)
			next = m->vote_floor + 1; /* a voter accepted that one already */
		if (m->voted_version >= next && m->voted_version < INT64_MAX / 2)
			next = m->voted_version + 1; /* this node did: its vote is taken */
		if (ch->add != NULL && ch->add->floor >= next && ch->add->floor < INT64_MAX / 2)
			next = ch->add->floor + 1;
		if (ch->force && ch->floor >= next && ch->floor < INT64_MAX / 2)
			next = ch->floor + 1;
		t = dgi_member_topo_new(next, nodes, n, bl);
		/* installed in the same critical section it was computed in: two
		 * changes at once (a failure found by the heartbeat thread, a
		 * JOIN on a transport thread) make two versions, one after the
		 * other — never two different topologies of one version, the
		 * loser broadcast and acknowledged all the same */
		if (t != NULL && majority(m)) {
			p = prop_new_locked(m, cur, t, ch, &direct);
			if (p == NULL && !direct) {
				dg_topology_release(t);
				t = NULL;
			}
		}
		if (p != NULL) {
			m->prop = p;
			p->refs++; /* this call's, until the votes are sent */
			if (ch->wait)
				p->refs++;
		} else if (t != NULL) {
			dgi_topo_hold(t);
			old = dgi_member_install_locked(m, t, &taken);
		}
	}
	pthread_mutex_unlock(&m->mu);
	dgi_free(bl);
	if (!ch->changed)
		return DG_OK; /* e.g. a failure report raced the coordinator's own check */
	if (p != NULL) {
		/* a majority of the voters of cur decides; the request (if
		 * any) is answered then */
		ch->version = t->version;
		ch->pending = p->kind != DG_MSG_UNKNOWN;
		dg_topology_release(t);
		prop_send(m, p);
		prop_release(m, p);
		if (!ch->wait)
			return DG_OK;
		uint64_t deadline = dgi_now_ms() + atomic_load(&m->ft_ms);
		pthread_mutex_lock(&m->mu);
		while (p->state == PROP_PENDING && dgi_now_ms() < deadline) {
			struct timespec ts;
			dgi_abstime_in(&ts, 20);
			pthread_cond_timedwait(&m->cv, &m->mu, &ts);
		}
		/* DONE with an adopted topology installed that one, not this
		 * change: the caller asks again on the version it made */
		bool mine = p->state == PROP_DONE && p->phase == DG_PX_ACCEPT;
		pthread_mutex_unlock(&m->mu);
		prop_release(m, p);
		return mine ? DG_OK : DG_ERR_NOT_READY;
	}
	if (t == NULL || !taken) {
		dg_topology_release(t);
		return DG_ERR_NOMEM;
	}
	ch->version = t->version;
	dgi_member_installed(m, old, t);
	dgi_member_broadcast(m, t);
	dg_topology_release(t);
	return DG_OK;
}

/* change_apply for joins and removals. */
dg_err dgi_member_change(dg_member *m, const dg_node_id *drop, size_t ndrop,
    const dg_msg_join *add, int64_t *version, int64_t *order)
{
	struct change ch = { .drop = drop, .ndrop = ndrop, .add = add };
	dg_err e = dgi_member_change_apply(m, &ch);
	if (e == DG_OK && version)
		*version = ch.version;
	if (e == DG_OK && order)
		*order = ch.order;
	return e;
}

/* The STRINGs of a BASELINE body's list, as views into the frame. */
static dg_err addrs_decode(dg_member *m, const dg_raw *list, dg_str *out, uint32_t *n)
{
	dg_reader r;
	uint32_t count;
	dg_err e;
	dg_reader_init(&r, m->reg, list->ptr, list->len);
	if ((e = dg_read_begin(&r, DG_LIST, &count)) != DG_OK)
		return e;
	if (count > DG_BASELINE_MAX)
		return DG_ERR_LIMIT;
	for (uint32_t i = 0; i < count; i++)
		if ((e = dg_read_str(&r, &out[i], NULL)) != DG_OK)
			return e;
	*n = count;
	return DG_OK;
}

static void log_baseline(dg_member *m, const struct change *ch)
{
	dg_topology *t = dg_member_topology(m);
	uint32_t standby = 0;
	for (uint32_t i = 0; t != NULL && i < t->count; i++)
		standby += (t->nodes[i].attrs & DG_NODE_STANDBY) != 0;
	dgi_log("info", "BASELINE-CHANGED", "op=%s version=%lld baseline=%u standby=%u changed=%s",
	    ch->op == DG_BASELINE_SET ? "set" : ch->op == DG_BASELINE_ADD ? "add" : "remove",
	    (long long)ch->version, t != NULL ? t->nbaseline : 0, standby,
	    ch->changed ? "yes" : "no");
	dg_topology_release(t);
}

/* Coordinator: applies a baseline change (addrs: views valid meanwhile). */
static dg_err rebase(dg_member *m, int op, const dg_str *addrs, uint32_t n,
    const dg_msg_in *req, dg_msg_baseline_ack *ack, const char **why, bool *pending)
{
	/* from a BASELINE request: answered once the voters accepted it; from
	 * this node's own caller: waits for them */
	struct change ch = { .rebase = true, .op = op, .addrs = addrs, .naddrs = n,
		.req = req, .wait = req == NULL };
	dg_err e = dgi_member_change_apply(m, &ch);
	if (pending != NULL)
		*pending = e == DG_OK && ch.pending;
	if (e == DG_OK && ch.pending)
		return DG_OK;
	if (e == DG_ERR_INVAL && ch.why != NULL) {
		dgi_log("warn", "BASELINE-REFUSED", "why=\"%s\"", ch.why);
		if (why != NULL)
			*why = ch.why;
	}
	if (e == DG_OK) {
		log_baseline(m, &ch);
		ack->topology_version = ch.version;
		ack->changed = ch.changed;
	}
	return e;
}

void dgi_member_on_baseline(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	dg_member *m = ctx;
	const dg_msg_baseline *b = in->body;
	pthread_mutex_lock(&m->mu);
	bool ready = m->topo != NULL && m->joined && !m->stopping;
	dg_node_id coord = ready ? dgi_member_coordinator_locked(m, dgi_now_ms()) : 0;
	pthread_mutex_unlock(&m->mu);
	if (!ready) {
		dg_tp_reply_error(tp, in, DG_ERR_STATE);
		return;
	}
	if (coord != dg_tp_self(tp)) {
		dgi_member_forward(m, in, coord, m->cfg.join_timeout_ms);
		return;
	}
	dg_str *addrs = dgi_alloc(DG_BASELINE_MAX * sizeof(*addrs));
	uint32_t n = 0;
	dg_msg_baseline_ack ack = { 0, 0 };
	dg_err e = addrs == NULL ? DG_ERR_NOMEM : addrs_decode(m, &b->addrs, addrs, &n);
	if (e == DG_OK && (b->op < INT32_MIN || b->op > INT32_MAX))
		e = DG_ERR_INVAL;
	bool pending = false;
	if (e == DG_OK)
		e = rebase(m, (int)b->op, addrs, n, in, &ack, NULL, &pending);
	dgi_free(addrs);
	if (e == DG_OK && pending)
		return;
	if (e != DG_OK) {
		dg_tp_reply_error(tp, in, e);
		return;
	}
	dg_tp_reply(tp, in, DG_MSG_BASELINE_ACK, &ack);
}

/* ---- changing the baseline ---- */

/* The BASELINE body's list of addresses. */
static dg_err addrs_encode(dg_member *m, const char *const *addrs, size_t n, dg_buf *b)
{
	dg_writer w;
	dg_writer_init(&w, m->reg, b);
	dg_write_list_begin(&w, (uint32_t)n);
	for (size_t i = 0; i < n; i++)
		dg_write_str(&w, addrs[i], strlen(addrs[i]));
	dg_write_end(&w);
	return dg_writer_finish(&w);
}

/* The change checked against this node's topology first, so a refusal
 * names its reason here (the coordinator checks again: it decides). */
static dg_err precheck(dg_member *m, int op, const char *const *addrs, size_t n,
    const char **why)
{
	*why = NULL;
	if (n > DG_BASELINE_MAX) {
		*why = "more than 1024 addresses";
		return DG_ERR_INVAL;
	}
	for (size_t i = 0; i < n; i++)
		if (addrs[i] == NULL) {
			*why = "an address is NULL";
			return DG_ERR_INVAL;
		}
	struct bl *b = dgi_alloc(sizeof(*b));
	dg_str *a = dgi_alloc((n ? n : 1) * sizeof(*a));
	dg_err e = b == NULL || a == NULL ? DG_ERR_NOMEM : DG_OK;
	for (size_t i = 0; e == DG_OK && i < n; i++)
		a[i] = dgi_bl_str(addrs[i]);
	pthread_mutex_lock(&m->mu);
	if (e == DG_OK && (m->topo == NULL || !m->joined)) {
		*why = "not in a cluster";
		e = DG_ERR_STATE;
	}
	if (e == DG_OK) {
		dgi_bl_of(b, m->topo);
		*why = dgi_bl_apply(b, m->topo->nodes, m->topo->count, op, a, (uint32_t)n, majority(m));
		e = *why != NULL ? DG_ERR_INVAL : DG_OK;
	}
	pthread_mutex_unlock(&m->mu);
	dgi_free(a);
	dgi_free(b);
	return e;
}

/* One attempt: the coordinator applies it (this node, or by BASELINE). */
static dg_err baseline_once(dg_member *m, int op, const char *const *addrs, size_t n,
    const dg_msg_baseline *body, uint32_t timeout_ms, dg_msg_baseline_ack *ack,
    const char **why)
{
	pthread_mutex_lock(&m->mu);
	dg_node_id coord = dgi_member_coordinator_locked(m, dgi_now_ms());
	pthread_mutex_unlock(&m->mu);
	if (coord != dg_tp_self(m->tp))
		return dg_tp_call(m->tp, coord, DG_MSG_BASELINE, body, timeout_ms, ack, NULL);
	dg_str *a = dgi_alloc((n ? n : 1) * sizeof(*a));
	if (a == NULL)
		return DG_ERR_NOMEM;
	for (size_t i = 0; i < n; i++)
		a[i] = dgi_bl_str(addrs[i]);
	dg_err e = rebase(m, op, a, (uint32_t)n, NULL, ack, why, NULL);
	dgi_free(a);
	return e;
}

dg_err dgi_member_set_baseline(dg_member *m, int op, const char *const *addrs,
    size_t n, uint32_t timeout_ms, const char **why)
{
	const char *w = NULL;
	if (why == NULL)
		why = &w;
	*why = NULL;
	if (m == NULL || (n > 0 && addrs == NULL))
		return DG_ERR_INVAL;
	dg_err e = precheck(m, op, addrs, n, why);
	if (e != DG_OK)
		return e;
	dg_buf b;
	dg_buf_init(&b);
	e = addrs_encode(m, addrs, n, &b);
	dg_msg_baseline body = { op, { b.data, (uint32_t)b.len } };
	dg_msg_baseline_ack ack = { 0, 0 };
	uint64_t deadline = dgi_now_ms() + timeout_ms;
	while (e == DG_OK) {
		uint64_t now = dgi_now_ms();
		if (now >= deadline) {
			e = DG_ERR_TIMEOUT;
			break;
		}
		e = baseline_once(m, op, addrs, n, &body, (uint32_t)(deadline - now), &ack, why);
		if (e != DG_ERR_CONN_BROKEN && e != DG_ERR_UNREACHABLE && e != DG_ERR_STATE &&
		    e != DG_ERR_NOT_READY)
			break;
		/* the coordinator is changing hands (or back from a pause): ask
		 * again */
		e = DG_OK;
		struct timespec ts = { 0, 50 * 1000000 };
		nanosleep(&ts, NULL);
	}
	dg_buf_free(&b);
	if (e == DG_ERR_INVAL && *why == NULL)
		*why = "refused by the coordinator (its log says why)";
	if (e == DG_OK && !dgi_member_wait_version(m, ack.topology_version, deadline))
		e = DG_ERR_TIMEOUT;
	return e;
}

dg_err dg_member_set_baseline(dg_member *m, int op, const char *const *addrs,
    size_t n, uint32_t timeout_ms)
{
	return dgi_member_set_baseline(m, op, addrs, n, timeout_ms, NULL);
}

size_t dg_member_baseline(dg_member *m, char (*out)[DG_BASELINE_ADDR_MAX], size_t cap,
    bool *is_set)
{
	pthread_mutex_lock(&m->mu);
	const dg_topology *t = m->topo;
	size_t n = t != NULL ? t->nbaseline : 0;
	if (is_set != NULL)
		*is_set = t != NULL && t->baseline_set;
	for (size_t i = 0; i < n && i < cap; i++)
		snprintf(out[i], DG_BASELINE_ADDR_MAX, "%s", t->baseline[i]);
	pthread_mutex_unlock(&m->mu);
	return n;
}
