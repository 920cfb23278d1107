/* member_fd.c — heartbeats and failure detection (PROTOCOL.md,
 * "Membership", "A paused node"): the member thread's tick, a node's own
 * pauses, HEARTBEAT, REMOVED, NODE_FAILED and LEAVE, and who coordinates.
 */
#define _POSIX_C_SOURCE 200809L
#include "member_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct since *dgi_member_since(dg_member *m, dg_node_id id)
{
	for (uint32_t i = 0; m->topo != NULL && i < m->topo->count; i++)
		if (m->since[i].id == id)
			return &m->since[i];
	return NULL;
}

/* How long the membership thread may go without running before this node
 * counts it as its own pause: a heartbeat interval late by half the
 * failure timeout. */
static uint64_t gap_ms(dg_member *m)
{
	return atomic_load_explicit(&m->hb_ms, memory_order_relaxed) +
	    atomic_load_explicit(&m->ft_ms, memory_order_relaxed) / 2;
}

static bool failed_locked(dg_member *m, const dg_topology_node *n, uint64_t now)
{
	if (n->id == dg_tp_self(m->tp))
		return false;
	struct since *s = dgi_member_since(m, n->id);
	if (s == NULL)
		return false;
	if (s->left)
		return true;
	/* this node's own silence (paused, or its thread has not run for
	 * long: a handler asking before the thread found out) says nothing
	 * about the others */
	if (m->quiet || now > m->tick_ms + gap_ms(m))
		return false;
	uint64_t heard = dg_tp_last_heard(m->tp, n->id);
	if (heard < s->ms)
		heard = s->ms;
	return now > heard + atomic_load_explicit(&m->ft_ms, memory_order_relaxed);
}

/* The oldest member this node does not consider failed. */
dg_node_id dgi_member_coordinator_locked(dg_member *m, uint64_t now)
{
	for (uint32_t i = 0; m->topo != NULL && i < m->topo->count; i++)
		if (!failed_locked(m, &m->topo->nodes[i], now))
			return m->topo->nodes[i].id;
	return dg_tp_self(m->tp);
}

bool dg_member_suspect(dg_member *m)
{
	pthread_mutex_lock(&m->mu);
	/* (tick_ms 0: the thread has not started — dg_member_start is joining) */
	bool s = m->joined && (m->quiet || (m->tick_ms != 0 &&
	    dgi_now_ms() > m->tick_ms + gap_ms(m)));
	pthread_mutex_unlock(&m->mu);
	return s;
}

bool dg_member_is_coordinator(dg_member *m)
{
	pthread_mutex_lock(&m->mu);
	bool c = m->topo != NULL && m->joined &&
	    dgi_member_coordinator_locked(m, dgi_now_ms()) == dg_tp_self(m->tp);
	pthread_mutex_unlock(&m->mu);
	return c;
}

/* Tells `to`, which sent a membership message though it is not in t (and
 * t is not older than its topology), that it is out: REMOVED carries t. */
static void tell_removed(dg_member *m, dg_node_id to, const dg_topology *t, int64_t theirs)
{
	dg_buf b;
	dg_buf_init(&b);
	if (dgi_member_topo_encode(m, t, &b) == DG_OK) {
		dg_msg_raw body = { { b.data, (uint32_t)b.len } };
		dg_tp_send(m->tp, to, DG_MSG_REMOVED, &body);
	}
	dg_buf_free(&b);
	uint64_t now = dgi_now_ms();
	pthread_mutex_lock(&m->mu);
	m->told++;
	bool log = now - m->told_ms >= 1000;
	uint32_t n = m->told;
	if (log) {
		m->told_ms = now;
		m->told = 0;
	}
	pthread_mutex_unlock(&m->mu);
	if (log)
		dgi_log("info", "NODE-TOLD-REMOVED", "node=%016llx their_version=%lld version=%lld "
		    "answers=%u", (unsigned long long)to, (long long)theirs, (long long)t->version, n);
}

void dgi_member_on_heartbeat(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	/* arriving is the point (the transport noted when), except for a node
	 * this one has not in its topology, or when it was paused itself */
	dg_member *m = ctx;
	const dg_msg_heartbeat *hb = in->body;
	(void)tp;
	uint64_t now = dgi_now_ms();
	pthread_mutex_lock(&m->mu);
	bool member = m->topo != NULL && dg_topology_find(m->topo, in->from) != NULL;
	struct since *s = member ? dgi_member_since(m, in->from) : NULL;
	bool answer = false;
	dg_topology *behind = NULL;
	int64_t version = m->topo != NULL ? m->topo->version : 0;
	if (s != NULL) {
		/* the lease: it heard this node's heartbeat of echo_ms; not
		 * echoed once this node granted a version without the sender */
		if (!dgi_member_frozen_locked(m, in->from)) {
			s->echo = hb->time_ms;
			m->echoed_ms = now;
		}
		if (hb->echo_ms > 0 && (uint64_t)hb->echo_ms > s->acked &&
		    (uint64_t)hb->echo_ms <= now) {
			s->acked = (uint64_t)hb->echo_ms;
			dgi_member_lease_locked(m);
		}
		answer = (hb->flags & DG_HB_ANSWER) && m->joined && !m->stopping &&
		    !dgi_member_frozen_locked(m, in->from);
		if (!m->stopping && hb->topology_version < version && now >= s->resent_ms + 1000) {
			/* a member behind (the TOPOLOGY was lost, or it was cut
			 * off): this one again, at most once a second — from a
			 * node rejoining too (what it holds was agreed), else a
			 * member that missed the version removing it takes it
			 * for the coordinator and forwards every JOIN to it
			 * (tests/member_sim.c found the stall) */
			s->resent_ms = now;
			behind = dgi_topo_hold(m->topo);
		}
	}
	dg_topology *t = NULL;
	if (m->topo != NULL && m->joined && !m->stopping && !member &&
	    hb->topology_version <= m->topo->version)
		t = dgi_topo_hold(m->topo); /* its sender was removed (a newer version: it joined) */
	/* a node of a newer version this one has not: this one is behind (the
	 * TOPOLOGY that added it was lost) and heartbeats only the members of
	 * its own — one back, without an echo (no lease from a non-member),
	 * and the sender sends the newer one (tests/member_sim.c found a
	 * voter that accepted a version, missed its TOPOLOGY, and stayed
	 * behind for good while the node it added was SEGMENTED) */
	bool behind_self = m->topo != NULL && !m->stopping && !member &&
	    hb->topology_version > m->topo->version;
	bool vouched = m->quiet && member && now > m->vouch_after;
	if (vouched)
		m->quiet = false; /* a member still heartbeats it: it is one of them */
	pthread_mutex_unlock(&m->mu);
	if (vouched)
		dgi_log("info", "SELF-PAUSE-OVER", "node=%016llx vouched_by=%016llx",
		    (unsigned long long)dg_tp_self(m->tp), (unsigned long long)in->from);
	if (t != NULL) {
		tell_removed(m, in->from, t, hb->topology_version);
		dg_topology_release(t);
	}
	if (answer) {
		dg_msg_heartbeat back = { version, (int64_t)now, hb->time_ms, 0 };
		dg_tp_send(m->tp, in->from, DG_MSG_HEARTBEAT, &back);
	} else if (behind_self) {
		dg_msg_heartbeat back = { version, (int64_t)now, 0, 0 };
		dg_tp_send(m->tp, in->from, DG_MSG_HEARTBEAT, &back);
	}
	if (behind != NULL) {
		dgi_member_topo_send(m, behind, in->from);
		dg_topology_release(behind);
	}
}

/* REMOVED: a member of a newer topology says this node is not in it. */
void dgi_member_on_removed(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	dg_member *m = ctx;
	const dg_msg_raw *body = in->body;
	dg_topology *t;
	(void)tp;
	if (dgi_member_topo_decode(m, &body->list, &t) != DG_OK) {
		dgi_log("warn", "TOPOLOGY-BAD", "from=%016llx type=REMOVED", (unsigned long long)in->from);
		return;
	}
	pthread_mutex_lock(&m->mu);
	int64_t mine = m->topo != NULL ? m->topo->version : 0;
	bool act = m->joined && !m->stopping && t->version > mine &&
	    dg_topology_find(t, dg_tp_self(m->tp)) == NULL &&
	    dg_topology_find(t, in->from) != NULL;
	pthread_mutex_unlock(&m->mu);
	if (!act) {
		dg_topology_release(t); /* stale (it joined again meanwhile), or not from a member */
		return;
	}
	dgi_log("warn", "REMOVED-TOLD", "node=%016llx by=%016llx version=%lld own_version=%lld",
	    (unsigned long long)dg_tp_self(m->tp), (unsigned long long)in->from,
	    (long long)t->version, (long long)mine);
	dgi_member_install(m, t); /* drops out (NODE-REMOVED-SELF); the thread rejoins */
}

void dgi_member_on_node_failed(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	dg_member *m = ctx;
	const dg_msg_node_failed *f = in->body;
	dg_node_id id = (dg_node_id)f->node_id;
	uint64_t now = dgi_now_ms();
	pthread_mutex_lock(&m->mu);
	bool coord = m->topo != NULL && dgi_member_coordinator_locked(m, now) == dg_tp_self(tp);
	bool known = coord && dg_topology_find(m->topo, id) != NULL;
	bool act = known &&
	    /* trust the report only if this node has not heard it lately either */
	    now > dg_tp_last_heard(tp, id) + 2 * (uint64_t)atomic_load_explicit(&m->hb_ms, memory_order_relaxed);
	/* The reporter has, at this version or a later one, a node this
	 * coordinator's topology does not: two nodes coordinated the same
	 * version (a coordinator leaving while another node saw it gone).
	 * A new version, above the reporter's, puts everyone on this one. */
	bool resync = coord && !known && f->topology_version >= m->topo->version;
	int64_t mine = m->topo != NULL ? m->topo->version : 0;
	pthread_mutex_unlock(&m->mu);
	if (act) {
		dgi_log("warn", "NODE-FAILED", "node=%016llx reported_by=%016llx",
		    (unsigned long long)id, (unsigned long long)in->from);
		dgi_member_change(m, &id, 1, NULL, NULL, NULL);
	} else if (resync) {
		dgi_log("warn", "TOPOLOGY-RESYNC", "reported_by=%016llx node=%016llx "
		    "their_version=%lld version=%lld", (unsigned long long)in->from,
		    (unsigned long long)id, (long long)f->topology_version, (long long)mine);
		struct change ch = { .force = true, .floor = f->topology_version };
		dgi_member_change_apply(m, &ch);
	}
}

void dgi_member_on_leave(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	dg_member *m = ctx;
	(void)tp;
	pthread_mutex_lock(&m->mu);
	struct since *s = dgi_member_since(m, in->from);
	if (s != NULL)
		s->left = true;
	pthread_cond_broadcast(&m->cv); /* the thread acts on it now */
	pthread_mutex_unlock(&m->mu);
	dgi_log("info", "NODE-LEFT", "node=%016llx", (unsigned long long)in->from);
}

/* ---- heartbeats and failure detection ---- */

/* The thread did not run for gap ms (mu held): this node was paused, and
 * the silence of the others over that time was its own.  Every peer gets
 * a fresh timeout, and the node stays quiet (declares no failure, changes
 * no topology) until a member's heartbeat sent after the pause vouches
 * for it — heartbeats sent before it, waiting in its sockets, are read
 * within vouch_after — or two failure timeouts pass.  Meanwhile its
 * heartbeats reach the others, and a member that dropped it answers
 * REMOVED. */
static void self_paused(dg_member *m, uint64_t now, uint64_t gap)
{
	uint32_t ft = atomic_load_explicit(&m->ft_ms, memory_order_relaxed);
	uint32_t hb = atomic_load_explicit(&m->hb_ms, memory_order_relaxed);
	for (uint32_t i = 0; m->topo != NULL && i < m->topo->count; i++) {
		m->since[i].ms = now;
		m->since[i].reported = false;
	}
	m->quiet = true;
	m->quiet_until = now + 2 * (uint64_t)ft;
	m->vouch_after = now + 2 * (uint64_t)hb;
	dgi_log("warn", "SELF-PAUSED", "node=%016llx gap_ms=%llu failure_timeout_ms=%u "
	    "why=\"this node did not run: the others' silence was its own\"",
	    (unsigned long long)dg_tp_self(m->tp), (unsigned long long)gap, ft);
}

/* Quiet for two failure timeouts without a word from any member (mu
 * held): back to plain failure detection (the others are gone or cut off
 * — a network partition, not a pause). */
static void quiet_over(dg_member *m)
{
	m->quiet = false;
	dgi_log("warn", "SELF-PAUSE-OVER", "node=%016llx vouched_by=none", (unsigned long long)dg_tp_self(m->tp));
}

static void tick(dg_member *m)
{
	dg_tp *tp = m->tp;
	uint64_t now = dgi_now_ms();
	dg_node_id failed[64];
	size_t nfailed = 0;
	dg_node_id coord;
	int64_t version;

	pthread_mutex_lock(&m->mu);
	uint64_t gap = now - m->tick_ms;
	m->tick_ms = now;
	dg_topology *t = dgi_topo_hold(m->topo);
	if (t == NULL || !m->joined) {
		pthread_mutex_unlock(&m->mu);
		dg_topology_release(t);
		return;
	}
	if (gap > gap_ms(m))
		self_paused(m, now, gap);
	else if (m->quiet && now >= m->quiet_until)
		quiet_over(m);
	/* the majority: segmented while fewer than a majority of the voters
	 * answered within the failure timeout; meanwhile nobody is failed
	 * (the silence may be this side's) and no version is issued */
	int seg_change = 0;
	uint32_t reach = 0;
	if (majority(m) && m->nvoters > 0) {
		dgi_member_lease_locked(m);
		reach = dgi_member_reachable_locked(m, now);
		m->reachable = reach;
		bool seg = reach < dgi_quorum_need(m->nvoters);
		if (seg && !atomic_load(&m->segmented)) {
			atomic_store(&m->segmented, true);
			m->seg_since = now;
			atomic_fetch_add(&m->n_segmented, 1);
			seg_change = 1;
		} else if (!seg && atomic_load(&m->segmented) && !m->rejoin) {
			atomic_store(&m->segmented, false);
			atomic_fetch_add(&m->n_rejoined, 1);
			seg_change = -1;
		}
	}
	bool leased = dg_member_serving(m) == DG_OK;
	bool lost = m->leased && !leased && !atomic_load(&m->segmented);
	m->leased = leased;
	bool segmented = atomic_load(&m->segmented);
	uint64_t seg_ms = now - m->seg_since;
	uint32_t nvoters = m->nvoters;
	/* the ones proposed for removal: every failed client node, and under
	 * majority one voter per version (Raft's single-server changes: a
	 * majority of the old voters and one of the new always share a
	 * voter; tests/member_sim.c found a lease on both sides of a cut when
	 * two were removed at once) */
	dg_node_id drop[64];
	size_t ndrop = 0;
	bool voter_dropped = false;
	for (uint32_t i = 0; i < t->count && nfailed < 64 && !segmented; i++) {
		if (!failed_locked(m, &t->nodes[i], now))
			continue;
		failed[nfailed++] = t->nodes[i].id;
		bool voter = !(t->nodes[i].attrs & DG_NODE_CLIENT);
		if (voter && voter_dropped && majority(m))
			continue;
		voter_dropped |= voter;
		drop[ndrop++] = t->nodes[i].id;
	}
	/* (a voter that left votes for its removal: not one of those) */
	dg_node_id silent[64];
	size_t nsilent = 0;
	for (size_t k = 0; k < nfailed; k++) {
		struct since *fs = dgi_member_since(m, failed[k]);
		if (fs == NULL || !fs->left)
			silent[nsilent++] = failed[k];
	}
	if (nsilent > 0 && majority(m) && nvoters > 0 &&
	    dgi_member_reachable_without_locked(m, now, silent, nsilent) < dgi_quorum_need(nvoters)) {
		/* those failed are what a majority lacks: this side is the
		 * minority (the echoes, on the precise clock, can trail the
		 * silence, on the coarse one, by a few ms) — segmented now,
		 * nobody failed */
		atomic_store(&m->segmented, true);
		m->seg_since = now;
		atomic_fetch_add(&m->n_segmented, 1);
		seg_change = 1;
		segmented = true;
		reach = dgi_member_reachable_without_locked(m, now, silent, nsilent);
		nfailed = 0;
	}
	/* a member silent for the failure timeout gets a new connection: a
	 * TCP connection whose packets a partition dropped can stay open for
	 * minutes after the network heals (its retransmissions back off),
	 * and the peer's new one is refused as a duplicate meanwhile */
	dg_node_id reset[16];
	size_t nreset = 0;
	uint64_t ftl = atomic_load_explicit(&m->ft_ms, memory_order_relaxed);
	for (uint32_t i = 0; i < t->count && nreset < 16 && !m->quiet; i++) {
		struct since *s = &m->since[i];
		if (t->nodes[i].id == dg_tp_self(tp) || s->left)
			continue;
		uint64_t heard = dg_tp_last_heard(tp, t->nodes[i].id);
		if (heard < s->ms)
			heard = s->ms;
		if (now > heard + ftl && now > s->reset_ms + ftl) {
			s->reset_ms = now;
			reset[nreset++] = t->nodes[i].id;
		}
	}
	coord = dgi_member_coordinator_locked(m, now);
	version = t->version;
	/* every member gets a heartbeat echoing its latest one; after a new
	 * version, or without a lease, asking for an answer at once */
	if (m->echo_cap < t->count) {
		int64_t *nb = dgi_realloc(m->echo_buf, t->count * sizeof(*nb));
		if (nb != NULL) {
			m->echo_buf = nb;
			m->echo_cap = t->count;
		}
	}
	int64_t *echo = m->echo_cap >= t->count ? m->echo_buf : NULL;
	for (uint32_t i = 0; echo != NULL && i < t->count; i++)
		echo[i] = m->since[i].echo;
	int64_t flags = m->hb_answer || !leased ? DG_HB_ANSWER : 0;
	m->hb_answer = false;
	pthread_mutex_unlock(&m->mu);
	if (lost) {
		atomic_fetch_add(&m->n_lease_lost, 1);
		uint32_t sup;
		if (dgi_lograte_due(&m->lr_lease, now, 1000, &sup))
			dgi_log("warn", "LEASE-LOST", "node=%016llx version=%lld repeated=%u "
			    "why=\"no majority echoed a heartbeat within the lease\"",
			    (unsigned long long)dg_tp_self(tp), (long long)version, sup);
	}
	if (seg_change > 0)
		dgi_log("warn", "SEGMENTED", "node=%016llx version=%lld reachable=%u voters=%u need=%u "
		    "why=\"no majority of the voting servers answered within the failure timeout\"",
		    (unsigned long long)dg_tp_self(tp), (long long)version, reach, nvoters,
		    nvoters > 0 ? dgi_quorum_need(nvoters) : 0);
	else if (seg_change < 0)
		dgi_log("info", "REJOINED", "node=%016llx version=%lld reachable=%u voters=%u "
		    "segmented_ms=%llu how=quorum", (unsigned long long)dg_tp_self(tp),
		    (long long)version, reach, nvoters, (unsigned long long)seg_ms);

	for (uint32_t i = 0; i < t->count; i++) {
		dg_node_id id = t->nodes[i].id;
		dg_msg_heartbeat hb = { version, (int64_t)now, echo != NULL ? echo[i] : 0, flags };
		/* a member taken for failed is still sent to (it is removed
		 * within moments, or the voters refused: others hear it): after
		 * PEER-RESET this send dials it again, which is how a cut only
		 * some nodes saw heals */
		if (id != dg_tp_self(tp))
			dg_tp_send(tp, id, DG_MSG_HEARTBEAT, &hb);
	}
	for (size_t k = 0; k < nreset; k++) {
		dg_tp_disconnect(tp, reset[k]);
		uint32_t sup;
		if (dgi_lograte_due(&m->lr_reset, now, 5000, &sup))
			dgi_log("info", "PEER-RESET", "node=%016llx repeated=%u why=\"silent for the "
			    "failure timeout: its connection is dropped, the next send dials again\"",
			    (unsigned long long)reset[k], sup);
	}
	if (nfailed > 0) {
		uint32_t sup_failed = 0;
		if (coord == dg_tp_self(tp)) {
			for (size_t k = 0; k < nfailed; k++) {
				pthread_mutex_lock(&m->mu);
				struct since *s = dgi_member_since(m, failed[k]);
				bool left = s != NULL && s->left;
				pthread_mutex_unlock(&m->mu);
				if (left)
					dgi_log("info", "NODE-REMOVED", "node=%016llx why=left",
					    (unsigned long long)failed[k]);
				else if (dgi_lograte_due(&m->lr_failed, now, 1000, &sup_failed))
					dgi_log("warn", "NODE-FAILED", "node=%016llx silent_ms>%u repeated=%u",
					    (unsigned long long)failed[k], atomic_load_explicit(&m->ft_ms,
					    memory_order_relaxed), sup_failed);
			}
			/* the same removal again once a heartbeat interval:
			 * rounds also run when woken early (a vote ended, an
			 * answer came), and one the voters refuse (a node only
			 * some hear) is not proposed in a loop; another set of
			 * failed nodes is proposed at once */
			uint64_t set = 0;
			for (size_t k = 0; k < ndrop; k++)
				set ^= (drop[k] + 0x9E3779B97F4A7C15ull) * 0xBF58476D1CE4E5B9ull;
			pthread_mutex_lock(&m->mu);
			bool due = set != m->fail_set || now >= m->fail_retry_ms;
			if (due) {
				m->fail_set = set;
				m->fail_retry_ms = now + atomic_load_explicit(&m->hb_ms, memory_order_relaxed);
			}
			pthread_mutex_unlock(&m->mu);
			if (due)
				dgi_member_change(m, drop, ndrop, NULL, NULL, NULL);
		} else {
			for (size_t k = 0; k < nfailed; k++) {
				pthread_mutex_lock(&m->mu);
				struct since *s = dgi_member_since(m, failed[k]);
				bool tell = s != NULL && !s->reported;
				if (tell)
					s->reported = true;
				pthread_mutex_unlock(&m->mu);
				if (tell) {
					dg_msg_node_failed f = { (int64_t)failed[k], version };
					dg_tp_send(tp, coord, DG_MSG_NODE_FAILED, &f);
				}
			}
		}
	}
	dg_topology_release(t);
}

void *dgi_member_thread(void *arg)
{
	dgi_thread_name("dg-member");
	dg_member *m = arg;
	bool first = true;
	pthread_mutex_lock(&m->mu);
	while (!m->stopping) {
		struct timespec ts;
		dgi_abstime_in(&ts, atomic_load_explicit(&m->hb_ms, memory_order_relaxed));
		/* the first round at once: a node that just joined asks the
		 * members for the echoes of its lease without waiting an
		 * interval */
		if (!first)
			pthread_cond_timedwait(&m->cv, &m->mu, &ts);
		first = false;
		if (m->stopping)
			break;
		uint32_t stall = m->test_stall_ms;
		m->test_stall_ms = 0;
		bool again = m->rejoin;
		pthread_mutex_unlock(&m->mu);
		if (stall > 0) {
			/* a test's pause: this thread does not run meanwhile */
			struct timespec st = { stall / 1000, (long)(stall % 1000) * 1000000 };
			nanosleep(&st, NULL);
		}
		if (again) {
			dgi_member_rejoin(m);
		} else {
			dgi_member_prop_tick(m);
			tick(m);
			dgi_member_probe_start(m); /* (when segmented) */
		}
		pthread_mutex_lock(&m->mu);
	}
	pthread_mutex_unlock(&m->mu);
	return NULL;
}

void dgi_member_test_stall(dg_member *m, uint32_t ms)
{
	pthread_mutex_lock(&m->mu);
	m->test_stall_ms = ms;
	pthread_cond_broadcast(&m->cv);
	pthread_mutex_unlock(&m->mu);
}
