/* member_quorum.c — the majority (PROTOCOL.md, "Majority"): the voters of
 * a topology, leases from heartbeat echoes, reachability and SEGMENTED,
 * and a voter's answer to TOPO_PROPOSE.  The coordinator's side of a
 * vote (proposals) is member_change.c's, with the changes it decides.
 */
#define _POSIX_C_SOURCE 200809L
#include "member_int.h"

#include <stdio.h>
#include <string.h>

bool dgi_member_vset(const dg_topology *t, struct dgi_vset *v)
{
	uint32_t cap = t->count + t->nbaseline;
	v->voters = dgi_calloc(cap ? cap : 1, sizeof(*v->voters));
	v->vidx = dgi_calloc(t->count ? t->count : 1, sizeof(*v->vidx));
	v->vals = dgi_calloc(cap ? cap : 1, sizeof(*v->vals));
	if (v->voters == NULL || v->vidx == NULL || v->vals == NULL) {
		dgi_free(v->voters);
		dgi_free(v->vidx);
		dgi_free(v->vals);
		return false;
	}
	v->n = dgi_quorum_voters(t, v->voters, cap);
	for (uint32_t i = 0; i < t->count; i++)
		v->vidx[i] = dgi_quorum_index(v->voters, v->n, t->nodes[i].url);
	return true;
}

/* The lease from the echoes (mu held).  Under NONE, or with no voter (a
 * cluster of client nodes), always. */
void dgi_member_lease_locked(dg_member *m)
{
	if (!majority(m) || m->topo == NULL || m->nvoters == 0) {
		atomic_store_explicit(&m->lease_until, UINT64_MAX, memory_order_relaxed);
		return;
	}
	dg_node_id self = dg_tp_self(m->tp);
	memset(m->vvals, 0, m->nvoters * sizeof(*m->vvals));
	for (uint32_t i = 0; i < m->topo->count; i++) {
		int32_t v = m->vidx[i];
		/* itself counts at once — unless it accepted its own removal
		 * (an adopted topology, PROTOCOL.md "Majority") */
		uint64_t x = m->topo->nodes[i].id != self ? m->since[i].acked :
		    dgi_member_frozen_locked(m, self) ? 0 : UINT64_MAX;
		if (v >= 0 && x > m->vvals[v])
			m->vvals[v] = x;
	}
	uint64_t until = m->joined ? dgi_lease_until(dgi_quorum_kth(m->vvals, m->nvoters),
	    lease_ms(m)) : 0;
	atomic_store_explicit(&m->lease_until, until, memory_order_relaxed);
}

/* How many voters were heard from (echoed) within the failure timeout,
 * this node included; a voter that joined our view less than a timeout
 * ago counts as heard (mu held). */
uint32_t dgi_member_reachable_locked(dg_member *m, uint64_t now)
{
	return dgi_member_reachable_without_locked(m, now, NULL, 0);
}

uint32_t dgi_member_reachable_without_locked(dg_member *m, uint64_t now,
    const dg_node_id *without, size_t nwithout)
{
	if (m->topo == NULL)
		return 0;
	dg_node_id self = dg_tp_self(m->tp);
	uint64_t ft = atomic_load_explicit(&m->ft_ms, memory_order_relaxed);
	memset(m->vvals, 0, m->nvoters * sizeof(*m->vvals));
	for (uint32_t i = 0; i < m->topo->count; i++) {
		int32_t v = m->vidx[i];
		bool gone = false;
		for (size_t k = 0; k < nwithout; k++)
			gone |= without[k] == m->topo->nodes[i].id;
		if (v < 0 || gone)
			continue;
		const struct since *s = &m->since[i];
		uint64_t x = m->topo->nodes[i].id == self ? UINT64_MAX :
		    s->acked > s->ms ? s->acked : s->ms;
		if (x > m->vvals[v])
			m->vvals[v] = x;
	}
	uint32_t n = 0;
	for (uint32_t v = 0; v < m->nvoters; v++)
		n += m->vvals[v] == UINT64_MAX || (m->vvals[v] != 0 && now <= m->vvals[v] + ft);
	return n;
}

dgi_member_lease dgi_member_lease_of(dg_member *m)
{
	if (m == NULL)
		return (dgi_member_lease){ NULL, NULL, NULL, NULL };
	return (dgi_member_lease){ &m->segmented, &m->lease_until, &m->installed_ver,
		&m->delivered_ver };
}

dg_err dg_member_serving(dg_member *m)
{
	return dgi_member_lease_serving(dgi_member_lease_of(m));
}

dg_err dgi_member_serving_at(dg_member *m, uint64_t now_ms)
{
	return dgi_member_lease_serving_at(dgi_member_lease_of(m), now_ms);
}

bool dg_member_segmented(dg_member *m)
{
	return m != NULL && atomic_load_explicit(&m->segmented, memory_order_relaxed);
}

void dg_member_quorum_get(dg_member *m, dg_member_quorum *q)
{
	memset(q, 0, sizeof(*q));
	uint64_t now = dgi_now_ms();
	pthread_mutex_lock(&m->mu);
	q->policy = m->policy;
	q->segmented = atomic_load(&m->segmented);
	q->segmented_ms = q->segmented ? now - m->seg_since : 0;
	q->voters = m->nvoters;
	q->need = m->nvoters > 0 ? dgi_quorum_need(m->nvoters) : 0;
	q->reachable = dgi_member_reachable_locked(m, now);
	uint64_t ft = atomic_load_explicit(&m->ft_ms, memory_order_relaxed);
	for (uint32_t v = 0; v < m->nvoters && q->nreach < DG_QUORUM_REACH_MAX; v++)
		if (m->vvals[v] == UINT64_MAX || (m->vvals[v] != 0 && now <= m->vvals[v] + ft))
			snprintf(q->reach[q->nreach++], DG_BASELINE_ADDR_MAX, "%s", m->voters[v]);
	pthread_mutex_unlock(&m->mu);
	q->leased = dg_member_serving(m) == DG_OK;
	q->segmentations = atomic_load(&m->n_segmented);
	q->rejoins = atomic_load(&m->n_rejoined);
	q->lease_losses = atomic_load(&m->n_lease_lost);
	q->votes_granted = atomic_load(&m->n_granted);
	q->votes_refused = atomic_load(&m->n_refused);
	pthread_mutex_lock(&m->mu);
	q->segmented_dials = m->n_probes;
	pthread_mutex_unlock(&m->mu);
}

void dgi_member_freeze_locked(dg_member *m, const dg_topology *t)
{
	for (uint32_t i = 0; m->topo != NULL && i < m->topo->count; i++) {
		const dg_topology_node *n = &m->topo->nodes[i];
		if ((n->attrs & DG_NODE_CLIENT) || dg_topology_find(t, n->id) != NULL ||
		    dgi_member_frozen_locked(m, n->id))
			continue;
		if (m->nfrozen == sizeof(m->frozen) / sizeof(m->frozen[0]))
			break; /* (one voter per version is removed: never reached) */
		m->frozen[m->nfrozen++] = n->id;
	}
	if (t->version > m->frozen_ver)
		m->frozen_ver = t->version;
}

bool dgi_member_frozen_locked(const dg_member *m, dg_node_id id)
{
	for (uint32_t i = 0; i < m->nfrozen; i++)
		if (m->frozen[i] == id)
			return true;
	return false;
}

bool dgi_member_joiner_locked(const dg_member *m)
{
	return !m->stopping && !(m->cfg.attrs & DG_NODE_CLIENT) && !(m->topo != NULL && m->joined);
}

/* TOPO_PROPOSE (PROTOCOL.md, "Majority"): dgi_px_rule on what this voter
 * knows; a node it would drop counts as heard from lately unless it left or
 * was silent here for longer than a lease plus a heartbeat (whatever lease
 * such a node held ran out before this vote).  t: NULL for a PREPARE. */
static const char *vote_locked(dg_member *m, const dg_msg_topo_propose *b, const dg_topology *t,
    dg_node_id from, uint64_t now)
{
	dg_node_id self = dg_tp_self(m->tp);
	bool member = m->topo != NULL && m->joined && !m->stopping;
	/* (a joiner's topology says nothing of the proposer's base: one told
	 * it is out by a version the coordinator never saw rejoins through
	 * TOPOLOGY-RESYNC, which it must be able to vote for — its promise
	 * and what it accepted are what keep it safe) */
	struct dgi_acceptor v = { member, dgi_member_joiner_locked(m), atomic_load(&m->segmented),
		member ? m->topo->version : 0, m->promised };
	struct dgi_px_ask a = { { b->base, b->round, from }, t != NULL,
		(b->phase & DG_PX_PHASE_MASK) == DG_PX_ADOPTED,
		t != NULL && dg_topology_find(t, from) != NULL,
		t != NULL && dg_topology_find(t, self) != NULL, false };
	uint64_t quiet = removal_silence_ms(m);
	if (t != NULL && v.joiner) {
		/* a joiner knows no base: its predecessor on this address (or
		 * itself before it was removed) may have echoed the node t
		 * removes until it started (or echoed last) — a lease and a
		 * heartbeat after that, no lease renewed here is left */
		uint64_t last = m->started_ms > m->echoed_ms ? m->started_ms : m->echoed_ms;
		a.drops_heard = (b->phase & DG_PX_REMOVES) && now < last + quiet;
	}
	for (uint32_t i = 0; t != NULL && v.member && i < m->topo->count && !a.drops_heard; i++) {
		const dg_topology_node *n = &m->topo->nodes[i];
		if (dg_topology_find(t, n->id) != NULL || n->id == self)
			continue;
		const struct since *s = &m->since[i];
		uint64_t heard = dg_tp_last_heard(m->tp, n->id);
		if (heard < s->ms)
			heard = s->ms;
		a.drops_heard = !s->left && now < heard + quiet;
	}
	return dgi_px_rule(&v, &a);
}

/* This voter just accepted t (mu held): with the proposer, which accepted
 * it first, a majority of two or three voters — t is agreed, and installed
 * here too, so a proposer that dies at once does not take it along
 * (tests/member_sim.c: a 2-voter version adding a third was installed only
 * by its proposer, which died; the voter that accepted it stayed behind,
 * SEGMENTED, and the new voter out, for good).  Not an adopted removal: the
 * proposer waits out the removed nodes' leases first. */
static bool learned_locked(dg_member *m, const dg_msg_topo_propose *b, const dg_topology *t,
    dg_node_id from, bool pacc, int phase)
{
	if (!m->joined || m->topo == NULL || b->base != m->topo->version || m->nvoters == 0)
		return false;
	if (phase == DG_PX_ADOPTED && dgi_topo_removes(m->topo, t))
		return false;
	int32_t me = dgi_quorum_index(m->voters, m->nvoters, dg_tp_address(m->tp));
	const dg_topology_node *pn = dg_topology_find(m->topo, from);
	int32_t pv = pn != NULL ? dgi_quorum_index(m->voters, m->nvoters, pn->url) : -1;
	uint32_t known = (uint32_t)(me >= 0) + (uint32_t)(pacc && pv >= 0 && pv != me);
	return known >= dgi_quorum_need(m->nvoters);
}

void dgi_member_on_topo_propose(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	dg_member *m = ctx;
	const dg_msg_topo_propose *b = in->body;
	dg_topology *t = NULL;
	int phase = (int)(b->phase & DG_PX_PHASE_MASK);
	bool pacc = (b->phase & DG_PX_PROPOSER_ACCEPTED) != 0;
	if (phase < DG_PX_PREPARE || phase > DG_PX_ADOPTED || b->round < 1 ||
	    (b->phase & ~(int64_t)(DG_PX_PHASE_MASK | DG_PX_PROPOSER_ACCEPTED |
	    DG_PX_REMOVES)) != 0) {
		dg_tp_reply_error(tp, in, DG_ERR_INVAL);
		return;
	}
	if (dgi_member_topo_decode(m, &b->topology, &t) != DG_OK) {
		dg_tp_reply_error(tp, in, DG_ERR_BAD_LENGTH);
		return;
	}
	uint64_t now = dgi_now_ms();
	dg_msg_topo_vote v;
	memset(&v, 0, sizeof(v));
	dg_buf acc;
	dg_buf_init(&acc);
	pthread_mutex_lock(&m->mu);
	bool prepare = phase == DG_PX_PREPARE;
	bool learn = false;
	bool joiner = dgi_member_joiner_locked(m);
	const char *why = vote_locked(m, b, prepare ? NULL : t, in->from, now);
	bool report = why == NULL && prepare && m->acc != NULL && m->acc_b.base == b->base;
	if (report && dgi_member_topo_encode(m, m->acc, &acc) != DG_OK)
		why = "out of memory"; /* a promise must name what it accepted */
	int64_t mine = m->topo != NULL ? m->topo->version : 0;
	if (why == NULL) {
		m->promised = (struct dgi_ballot){ b->base, b->round, in->from };
		if (report) {
			/* Paxos' first phase: what it accepted after this base */
			v.acc_base = m->acc_b.base;
			v.acc_round = m->acc_b.round;
			v.acc_from = (int64_t)m->acc_b.from;
			v.acc = (dg_bytes){ acc.data, (uint32_t)acc.len };
		} else if (!prepare) {
			dg_topology_release(m->acc);
			m->acc = dgi_topo_hold(t);
			m->acc_b = m->promised;
			if (t->version > m->voted_version)
				m->voted_version = t->version;
			dgi_member_freeze_locked(m, t);
			learn = learned_locked(m, b, t, in->from, pacc, phase);
		}
		v.granted = DG_VOTE_GRANTED | (joiner && m->amnesiac ? DG_VOTE_AMNESIAC : 0);
	}
	v.version = m->voted_version > mine ? m->voted_version : mine;
	v.promised_base = m->promised.base;
	v.promised_round = m->promised.round;
	v.promised_from = (int64_t)m->promised.from;
	pthread_mutex_unlock(&m->mu);
	if (why == NULL && dgi_acceptor_save(m) != DG_OK) {
		/* not on disk: no promise (memory keeps the stricter state) */
		why = "its acceptor state could not be saved";
		v.granted = 0;
		learn = false;
	}
	atomic_fetch_add(why == NULL ? &m->n_granted : &m->n_refused, 1);
	uint32_t sup;
	if (why != NULL && dgi_lograte_due(&m->lr_vote, now, 1000, &sup))
		dgi_log("info", "VOTE-REFUSED", "version=%lld round=%lld phase=%lld from=%016llx "
		    "own_version=%lld repeated=%u why=\"%s\"", (long long)t->version, (long long)b->round,
		    (long long)b->phase, (unsigned long long)in->from, (long long)mine, sup, why);
	dg_tp_reply(tp, in, DG_MSG_TOPO_VOTE, &v);
	dg_buf_free(&acc);
	if (learn) {
		dgi_log("info", "TOPOLOGY-LEARNED", "version=%lld from=%016llx why=\"this voter and "
		    "the proposer are a majority\"", (long long)t->version, (unsigned long long)in->from);
		dgi_member_install(m, t); /* (takes t) */
	} else {
		dg_topology_release(t);
	}
}
