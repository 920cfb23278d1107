/* member_join.c — joining a cluster through the seeds, and rejoining it
 * after this node was dropped from its topology (PROTOCOL.md,
 * "Membership", "Majority": back-off, a new order as the incarnation).
 */
#define _POSIX_C_SOURCE 200809L
#include "member_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- joining ---- */

bool dgi_member_wait_version(dg_member *m, int64_t version, uint64_t deadline)
{
	pthread_mutex_lock(&m->mu);
	while (!(m->topo != NULL && m->topo->version >= version && m->joined) &&
	    dgi_now_ms() < deadline && !m->stopping) {
		struct timespec ts;
		dgi_abstime_in(&ts, 20);
		pthread_cond_timedwait(&m->cv, &m->mu, &ts);
	}
	bool ok = m->topo != NULL && m->topo->version >= version && m->joined;
	pthread_mutex_unlock(&m->mu);
	return ok;
}

/* Failure detection is the cluster's, not each node's: a joiner takes the
 * coordinator's timeout and heartbeat interval (a node heartbeating slower
 * than the others expect would be declared failed, and would in turn
 * declare them failed). */
static void adopt_timings(dg_member *m, const dg_msg_join_ack *ack)
{
	if (ack->failure_timeout_ms <= 0 || ack->heartbeat_ms <= 0 ||
	    ack->failure_timeout_ms > UINT32_MAX || ack->heartbeat_ms > UINT32_MAX)
		return; /* an old or broken coordinator: keep our own */
	uint32_t ft = (uint32_t)ack->failure_timeout_ms, hb = (uint32_t)ack->heartbeat_ms;
	if (ft != atomic_load(&m->ft_ms) || hb != atomic_load(&m->hb_ms))
		dgi_log("info", "TIMINGS-ADOPTED", "failure_timeout_ms=%u heartbeat_ms=%u own_failure_timeout_ms=%u",
		    ft, hb, atomic_load(&m->ft_ms));
	atomic_store(&m->ft_ms, ft);
	atomic_store(&m->hb_ms, hb);
	dgi_tp_set_stale_ms(m->tp, ft);
}

/* What one round over the seeds found. */
struct round {
	bool member;        /* a seed in a cluster answered (it is alive and
	                       reachable) though the join did not complete */
	dg_err member_err;  /* its answer (DG_OK: the TOPOLOGY did not come) */
	dg_err refused;     /* a seed refused this node's handshake */
};

/* A seed's answer that says the cluster is there but busy changing (its
 * coordinator died or left, a request timed out on the way): ask again.
 * Anything else (DG_ERR_INVAL: this node's address is too long, ...) the
 * next JOIN would get again. */
static bool join_transient(dg_err e)
{
	return e == DG_OK || e == DG_ERR_TIMEOUT || e == DG_ERR_CLOSED ||
	    e == DG_ERR_CONN_BROKEN || e == DG_ERR_BUSY || e == DG_ERR_UNREACHABLE ||
	    e == DG_ERR_NET || e == DG_ERR_NOT_READY || e == DG_ERR_SEGMENTED;
}

static uint32_t attempt_ms(uint64_t deadline)
{
	uint64_t now = dgi_now_ms();
	uint64_t left = deadline > now ? deadline - now : 1;
	return (uint32_t)(left < JOIN_ATTEMPT_MS ? left : JOIN_ATTEMPT_MS);
}

/* One round over the seeds (urls: the config's, or a rejoining node's).
 * DG_OK when joined; DG_ERR_NOT_READY when a seed in a cluster answered
 * but the join did not complete (its coordinator died and it has not
 * noticed yet, the TOPOLOGY did not come in time): ask again; the refusal
 * when a seed refused this node's handshake; DG_ERR_STATE when some seed
 * with a smaller id is up but not in a cluster yet (wait for it);
 * DG_ERR_UNREACHABLE only when no seed is in a cluster.  Each JOIN, and
 * the wait for its TOPOLOGY, is bounded by JOIN_ATTEMPT_MS: one answer
 * that never comes does not use up the join. */
/* The longest wait between rejoin rounds answered with a refusal (a
 * cluster that cannot add a node now): short enough that a healed cluster
 * takes it back within a second. */
#define REFUSED_BACKOFF_MAX_MS 1000u

static dg_err join_round(dg_member *m, char *const *urls, size_t nurls, uint64_t deadline,
    struct round *r)
{
	dg_tp *tp = m->tp;
	bool smaller_waiting = false;
	dg_msg_join j = { { dg_tp_address(tp), (uint32_t)strlen(dg_tp_address(tp)) },
		(int64_t)dg_tp_self(tp), m->cfg.attrs, m->cfg.version_floor };
	r->member = false;
	r->member_err = DG_OK;
	r->refused = DG_OK;
	for (size_t i = 0; i < nurls; i++) {
		dg_node_id peer;
		if (strcmp(urls[i], dg_tp_address(tp)) == 0)
			continue;
		dg_err ce = dg_tp_connect(tp, urls[i], &peer);
		if (ce == DG_ERR_NET || ce == DG_ERR_TIMEOUT)
			continue; /* nobody there (yet) */
		if (ce != DG_OK) {
			/* someone is there and would not have us (secret, TLS,
			 * cluster name): never form a cluster of our own then */
			r->refused = ce;
			continue;
		}
		dg_msg_join_ack ack;
		dg_err e = dg_tp_call(tp, peer, DG_MSG_JOIN, &j, attempt_ms(deadline), &ack, NULL);
		if (e == DG_OK) {
			adopt_timings(m, &ack);
			uint64_t until = dgi_now_ms() + attempt_ms(deadline);
			if (dgi_member_wait_version(m, ack.topology_version, until))
				return DG_OK;
			r->member = true; /* the JOIN again brings the TOPOLOGY again */
			r->member_err = DG_OK;
		} else if (e == DG_ERR_STATE) {
			smaller_waiting |= peer < dg_tp_self(tp);
		} else {
			/* up, and not "no cluster here": its coordinator could not
			 * be reached, did not answer in time, was changing hands
			 * — never a reason to form a cluster of our own */
			r->member = true;
			r->member_err = e;
		}
	}
	if (r->member)
		return DG_ERR_NOT_READY;
	if (r->refused != DG_OK)
		return r->refused;
	return smaller_waiting ? DG_ERR_STATE : DG_ERR_UNREACHABLE;
}

/* Joins through the seeds, or forms a cluster when none is in one.  It
 * gives up after join_timeout_ms — but while seeds of a cluster answer (the
 * cluster is alive and reachable: its coordinator may have just died, the
 * seeds notice within the failure detection timeout and another takes
 * over) it goes on, up to join_timeout_ms plus the longer of twice that
 * and twice the failure detection (timeout + heartbeat). */
/* Tests only: ms a node waits between deciding to form a cluster and
 * forming it — the window in which two nodes started at once can each
 * decide to (test_start_at_once_forms_one_cluster). */
_Atomic uint32_t dgi_test_form_hold_ms;

dg_err dgi_member_join(dg_member *m)
{
	uint64_t start = dgi_now_ms(), logged = start;
	uint64_t deadline = start + m->cfg.join_timeout_ms;
	uint64_t fd = 2 * ((uint64_t)atomic_load(&m->ft_ms) + atomic_load(&m->hb_ms));
	uint64_t longest = start + m->cfg.join_timeout_ms +
	    (fd > 2ull * m->cfg.join_timeout_ms ? fd : 2ull * m->cfg.join_timeout_ms);
	dg_err refused = DG_OK;
	for (;;) {
		struct round r;
		dg_err e = join_round(m, m->seeds, m->cfg.nseeds, deadline, &r);
		if (e == DG_OK)
			break;
		pthread_mutex_lock(&m->mu);
		bool joined = m->joined;
		pthread_mutex_unlock(&m->mu);
		if (joined)
			break; /* a TOPOLOGY with this node arrived meanwhile */
		if (r.refused != DG_OK)
			refused = r.refused;
		bool held = false;
		if (e == DG_ERR_UNREACHABLE) {
			/* no seed is in a cluster, none smaller is waiting — unless a
			 * smaller id asked us lately: it forms, we join it.  Else
			 * mark forming in the same step, so that a JOIN from now on
			 * is told to ask again, not DG_ERR_STATE (before, a smaller
			 * node asking in this window formed too: two clusters that
			 * never merged, test_start_at_once_forms_one_cluster) */
			pthread_mutex_lock(&m->mu);
			uint64_t sj = m->smaller_join_ms, now = dgi_now_ms();
			held = sj != 0 && now - sj < DGI_FORM_HOLD_MS;
			if (!held)
				m->forming = true;
			pthread_mutex_unlock(&m->mu);
		}
		if (e == DG_ERR_UNREACHABLE && !held) {
			uint32_t hold = atomic_load_explicit(&dgi_test_form_hold_ms, memory_order_relaxed);
			if (hold != 0) { /* (tests: widen the window below) */
				struct timespec hs = { hold / 1000, (long)(hold % 1000) * 1000000 };
				nanosleep(&hs, NULL);
			}
			dg_topology_node self = { dg_tp_self(m->tp), 1, dg_tp_address(m->tp),
				m->cfg.attrs & ~DG_NODE_STANDBY };
			struct bl *b = dgi_alloc(sizeof(*b));
			dg_topology *t = b == NULL ? NULL : dgi_member_topo_new(m->cfg.version_floor > 0 ?
			    m->cfg.version_floor + 1 : 1, &self, 1, dgi_bl_formed(m, b));
			dgi_free(b);
			if (t == NULL)
				return DG_ERR_NOMEM;
			dgi_member_install(m, t);
			dgi_log("info", "CLUSTER-FORMED", "node=%016llx baseline=%u", (unsigned long long)self.id,
			    t->nbaseline);
			return DG_OK;
		}
		uint64_t now = dgi_now_ms();
		if (r.member && join_transient(r.member_err) && deadline < longest) {
			/* the cluster is there: keep asking while it answers */
			uint64_t more = now + m->cfg.join_timeout_ms;
			deadline = more < longest ? (more > deadline ? more : deadline) : longest;
		}
		if (r.member && now - logged >= 2000) {
			logged = now;
			dgi_log("warn", "JOIN-RETRY", "node=%016llx waited_ms=%llu err=%s",
			    (unsigned long long)dg_tp_self(m->tp), (unsigned long long)(now - start),
			    r.member_err == DG_OK ? "no TOPOLOGY after JOIN_ACK" :
			    dg_strerror(r.member_err));
		}
		if (now > deadline) {
			dg_err why = refused != DG_OK ? refused :
			    r.member && !join_transient(r.member_err) ? r.member_err :
			    e == DG_ERR_STATE || e == DG_ERR_NOT_READY ? DG_ERR_TIMEOUT : e;
			dgi_log("error", "JOIN-FAIL", "node=%016llx err=%s waited_ms=%llu",
			    (unsigned long long)dg_tp_self(m->tp), dg_strerror(why),
			    (unsigned long long)(now - start));
			return why;
		}
		struct timespec ts = { 0, 100 * 1000000 };
		nanosleep(&ts, NULL);
	}
	pthread_mutex_lock(&m->mu);
	dg_node_id coord = dgi_member_coordinator_locked(m, dgi_now_ms());
	pthread_mutex_unlock(&m->mu);
	dgi_member_sync_types(m, coord);
	return DG_OK;
}

/* Dropped out of the cluster's topology (REMOVED, or a TOPOLOGY without
 * this node): join again, as a new member, through the seeds and the
 * members of that topology, until it works or the node stops.  The new
 * version is above the one that left it out.  When no candidate could be
 * reached for join_timeout_ms (every other node gone), it forms a cluster
 * of its own, as a starting node would. */
static void *typesync_thread(void *arg)
{
	dgi_thread_name("dg-typesync");
	dg_member *m = arg;
	dgi_member_sync_types(m, m->typesync_coord);
	return NULL;
}

/* The type sync after a rejoin runs on a thread of its own: its calls (one
 * per type, each up to a timeout) must not hold up this thread's
 * heartbeats — a node that just rejoined would be dropped again, silent
 * for longer than the failure timeout.  (This thread only.) */
static void typesync_start(dg_member *m, dg_node_id coord)
{
	if (m->typesync_started) { /* the last rejoin's, long done as a rule */
		pthread_join(m->typesync, NULL);
		m->typesync_started = false;
	}
	m->typesync_coord = coord;
	if (pthread_create(&m->typesync, NULL, typesync_thread, m) == 0)
		m->typesync_started = true;
	else
		dgi_member_sync_types(m, coord);
}

void dgi_member_rejoin(dg_member *m)
{
	dg_topology *t = dg_member_topology(m);
	size_t n = 0, cap = m->cfg.nseeds + (t != NULL ? t->count : 0);
	char **urls = dgi_calloc(cap ? cap : 1, sizeof(char *));
	for (size_t i = 0; urls != NULL && i < m->cfg.nseeds; i++)
		urls[n++] = m->seeds[i];
	for (uint32_t i = 0; urls != NULL && t != NULL && i < t->count; i++) {
		bool seen = false; /* (a member that is a seed too: asked once a round) */
		for (size_t k = 0; k < n && !seen; k++)
			seen = strcmp(urls[k], t->nodes[i].url) == 0;
		if (t->nodes[i].id != dg_tp_self(m->tp) && !seen)
			urls[n++] = (char *)t->nodes[i].url; /* t is held until the end */
	}
	pthread_mutex_lock(&m->mu);
	if (t != NULL && t->version > m->cfg.version_floor)
		m->cfg.version_floor = t->version; /* only this thread reads it now */
	pthread_mutex_unlock(&m->mu);
	dgi_log("info", "REJOIN-START", "node=%016llx version=%lld candidates=%zu",
	    (unsigned long long)dg_tp_self(m->tp), (long long)(t != NULL ? t->version : 0), n);
	uint64_t start = dgi_now_ms(), reached = start;
	uint32_t backoff = DGI_BACKOFF_MIN_MS; /* between rounds while nobody answers */
	dg_err last = DG_OK;
	bool joined = false, stopping = false;
	while (urls != NULL) {
		uint64_t now = dgi_now_ms();
		struct round r;
		dg_err e = join_round(m, urls, n, now + m->cfg.join_timeout_ms, &r);
		pthread_mutex_lock(&m->mu);
		joined = m->joined;
		stopping = m->stopping;
		pthread_mutex_unlock(&m->mu);
		if (joined || stopping)
			break;
		now = dgi_now_ms();
		if (e != DG_ERR_UNREACHABLE) {
			reached = now; /* someone is there: keep asking */
			/* a member took the JOIN (its TOPOLOGY is on its way): at
			 * once; one that answered but cannot add it now (its
			 * coordinator has no majority, or is changing hands):
			 * backing off to REFUSED_BACKOFF_MAX_MS — every answer
			 * used to reset the wait, 20-50 JOINs a second for as
			 * long as the cluster could not add anybody */
			if (e == DG_ERR_NOT_READY && r.member_err == DG_OK)
				backoff = DGI_BACKOFF_MIN_MS;
			else if ((backoff = dgi_backoff_next(backoff)) > REFUSED_BACKOFF_MAX_MS)
				backoff = REFUSED_BACKOFF_MAX_MS;
		} else if (majority(m)) {
			/* never a cluster of its own: the majority is somewhere
			 * (a partition heals); ask again, backing off to 2 s */
			backoff = dgi_backoff_next(backoff);
		} else if (now - reached >= m->cfg.join_timeout_ms) {
			dg_topology_node self = { dg_tp_self(m->tp), 1, dg_tp_address(m->tp),
				m->cfg.attrs & ~DG_NODE_STANDBY };
			dg_topology *own = dgi_member_topo_new(m->cfg.version_floor + 1, &self, 1, NULL);
			if (own != NULL) {
				dgi_member_install(m, own);
				dgi_log("warn", "CLUSTER-FORMED", "node=%016llx version=%lld "
				    "why=\"no member or seed reachable for %u ms after it was removed\"",
				    (unsigned long long)self.id, (long long)(m->cfg.version_floor + 1),
				    m->cfg.join_timeout_ms);
				break;
			}
		}
		if (e != last)
			dgi_log("info", "REJOIN-RETRY", "node=%016llx err=%s waited_ms=%llu",
			    (unsigned long long)dg_tp_self(m->tp), dg_strerror(e),
			    (unsigned long long)(now - start));
		last = e;
		pthread_mutex_lock(&m->mu);
		struct timespec ts;
		/* jittered: the nodes of a healed side do not ask in step */
		dgi_abstime_in(&ts, dgi_backoff_wait(backoff, dgi_now_ms()));
		if (!m->stopping)
			pthread_cond_timedwait(&m->cv, &m->mu, &ts);
		pthread_mutex_unlock(&m->mu);
	}
	dgi_free(urls);
	pthread_mutex_lock(&m->mu);
	/* still out (out of memory, or dropped again at once): the next
	 * round of the thread tries again */
	m->rejoin = !m->joined && !m->stopping;
	m->tick_ms = dgi_now_ms(); /* the time spent here was no pause */
	uint64_t seg_ms = 0;
	bool healed = m->joined && atomic_load(&m->segmented);
	if (healed) {
		atomic_store(&m->segmented, false);
		atomic_fetch_add(&m->n_rejoined, 1);
		seg_ms = m->tick_ms - m->seg_since;
	}
	const dg_topology_node *me = m->joined ? dg_topology_find(m->topo, dg_tp_self(m->tp)) : NULL;
	int64_t order = me != NULL ? me->order : 0, version = m->topo != NULL ? m->topo->version : 0;
	dg_node_id coord = dgi_member_coordinator_locked(m, dgi_now_ms());
	joined = m->joined;
	pthread_mutex_unlock(&m->mu);
	dg_topology_release(t);
	if (!joined)
		return;
	dgi_log("info", "NODE-REJOINED", "node=%016llx order=%lld version=%lld took_ms=%llu",
	    (unsigned long long)dg_tp_self(m->tp), (long long)order, (long long)version,
	    (unsigned long long)(dgi_now_ms() - start));
	if (healed)
		dgi_log("info", "REJOINED", "node=%016llx version=%lld segmented_ms=%llu how=rejoin",
		    (unsigned long long)dg_tp_self(m->tp), (long long)version,
		    (unsigned long long)seg_ms);
	typesync_start(m, coord);
}

/* ---- a segmented member dials ---- */

/* The addresses a segmented member asks (mu held): its seeds, then the
 * addresses of its topology's nodes, but its own and those of members it
 * heard from within the failure timeout (their heartbeats do the work; a
 * node restarted on an address under a new id answers there, where the
 * old id's heartbeats are dropped).  Returns how many; urls: *n owned. */
static size_t probe_urls(dg_member *m, uint64_t now, char ***out, dg_node_id **ids)
{
	const dg_topology *t = m->topo;
	size_t cap = m->cfg.nseeds + t->count, n = 0;
	char **urls = dgi_calloc(cap ? cap : 1, sizeof(char *));
	dg_node_id *known = dgi_calloc(cap ? cap : 1, sizeof(dg_node_id));
	if (known == NULL) {
		dgi_free(urls);
		urls = NULL;
	}
	uint64_t ft = atomic_load_explicit(&m->ft_ms, memory_order_relaxed);
	const char *self = dg_tp_address(m->tp);
	for (size_t k = 0; urls != NULL && k < cap; k++) {
		const char *u = k < m->cfg.nseeds ? m->seeds[k] : t->nodes[k - m->cfg.nseeds].url;
		bool skip = strcmp(u, self) == 0;
		dg_node_id id = 0;
		for (uint32_t i = 0; !skip && i < t->count; i++)
			if (strcmp(t->nodes[i].url, u) == 0 && t->nodes[i].id != dg_tp_self(m->tp)) {
				id = t->nodes[i].id;
				skip = now <= dg_tp_last_heard(m->tp, id) + ft;
			}
		for (size_t i = 0; !skip && i < n; i++)
			skip = strcmp(urls[i], u) == 0;
		if (!skip && (urls[n] = strdup(u)) != NULL)
			known[n++] = id;
	}
	*out = urls;
	*ids = known;
	return n;
}

static bool probe_go_locked(dg_member *m)
{
	return !m->stopping && m->joined && !m->rejoin && m->topo != NULL &&
	    atomic_load(&m->segmented);
}

/* One JOIN to each address where a node this one's topology does not name
 * there answers (the one it names gets its heartbeats, and REMOVED or
 * TOPOLOGY follow as after any cut), the floor being this node's version: a
 * cluster that removed it (or never had it: its members restarted under new
 * ids) adds it in a version above its own, which it installs; one that has
 * it sends its TOPOLOGY again.  Between rounds it backs off from 50 ms to
 * 2 s, jittered. */
static void *probe_thread(void *arg)
{
	dgi_thread_name("dg-probe");
	dg_member *m = arg;
	dg_tp *tp = m->tp;
	uint32_t backoff = 0;
	uint64_t logged = 0, rounds = 0;
	for (;;) {
		char **urls = NULL;
		dg_node_id *known = NULL;
		size_t n = 0;
		int64_t floor = 0;
		pthread_mutex_lock(&m->mu);
		bool go = probe_go_locked(m);
		if (go) {
			n = probe_urls(m, dgi_now_ms(), &urls, &known);
			floor = m->topo->version > m->cfg.version_floor ? m->topo->version :
			    m->cfg.version_floor;
		}
		if (!go)
			m->probing = false;
		pthread_mutex_unlock(&m->mu);
		if (!go)
			break;
		dg_err last = DG_ERR_UNREACHABLE;
		dg_msg_join j = { { dg_tp_address(tp), (uint32_t)strlen(dg_tp_address(tp)) },
			(int64_t)dg_tp_self(tp), m->cfg.attrs, floor };
		for (size_t i = 0; i < n; i++) {
			pthread_mutex_lock(&m->mu);
			go = probe_go_locked(m);
			pthread_mutex_unlock(&m->mu);
			dg_node_id peer;
			/* the member its topology names there answers: its
			 * heartbeats reach it (REMOVED or TOPOLOGY follow) — only
			 * a node it does not know there is asked to JOIN */
			if (go && dg_tp_connect(tp, urls[i], &peer) == DG_OK && peer != known[i]) {
				/* counted before the JOIN goes: its TOPOLOGY may heal
				 * this node before the call returns, and a reader that
				 * saw it healed must see the dial that did it
				 * (test_majority_segmented_dials_seeds: 0 once, TSan) */
				pthread_mutex_lock(&m->mu);
				m->n_probes++;
				pthread_mutex_unlock(&m->mu);
				dg_msg_join_ack ack;
				last = dg_tp_call(tp, peer, DG_MSG_JOIN, &j, JOIN_ATTEMPT_MS, &ack, NULL);
			}
			free(urls[i]);
		}
		dgi_free(urls);
		dgi_free(known);
		rounds++;
		uint64_t now = dgi_now_ms();
		if (now >= logged + 10000) {
			logged = now;
			dgi_log("info", "SEGMENTED-DIAL", "node=%016llx rounds=%llu candidates=%zu "
			    "floor=%lld last=%s", (unsigned long long)dg_tp_self(tp),
			    (unsigned long long)rounds, n, (long long)floor, dg_strerror(last));
		}
		backoff = dgi_backoff_next(backoff);
		pthread_mutex_lock(&m->mu);
		struct timespec ts;
		dgi_abstime_in(&ts, dgi_backoff_wait(backoff, now ^ dg_tp_self(tp)));
		if (!m->stopping)
			pthread_cond_timedwait(&m->cv, &m->mu, &ts);
		pthread_mutex_unlock(&m->mu);
	}
	return NULL;
}

void dgi_member_probe_start(dg_member *m)
{
	pthread_mutex_lock(&m->mu);
	bool start = !m->probing && probe_go_locked(m);
	pthread_mutex_unlock(&m->mu);
	if (!start)
		return;
	if (m->probe_started) { /* the last one's, ended (probing is false) */
		pthread_join(m->probe, NULL);
		m->probe_started = false;
	}
	pthread_mutex_lock(&m->mu);
	m->probing = true;
	pthread_mutex_unlock(&m->mu);
	if (pthread_create(&m->probe, NULL, probe_thread, m) == 0) {
		m->probe_started = true;
	} else {
		pthread_mutex_lock(&m->mu);
		m->probing = false;
		pthread_mutex_unlock(&m->mu);
	}
}
