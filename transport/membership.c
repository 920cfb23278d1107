/* membership.c — the membership's life: start and stop, installing each
 * agreed version and handing it to the listeners, and the handlers of
 * JOIN and TOPOLOGY (PROTOCOL.md, "Membership", "Majority").  The rest is
 * by concern: member_topo.c (the topology and its codec), member_change.c
 * (changes and the coordinator's side of their votes), member_join.c
 * (joining, rejoining), member_fd.c (heartbeats, failure detection),
 * member_quorum.c (the voter's side, leases, SEGMENTED), member_types.c
 * (cluster-wide types); member_int.h says what they share.  The protocol
 * in short:
 *
 * The coordinator is the node with the smallest join order that this node
 * does not consider failed.  Only the coordinator changes the topology: it
 * adds joiners, removes failed or leaving nodes, bumps the version and sends
 * the new TOPOLOGY to everyone; every node installs a TOPOLOGY only when its
 * version is newer.  One thread per node sends heartbeats every heartbeat_ms
 * and checks, every heartbeat_ms, when each member was last heard from (any
 * frame counts): detection takes at most failure_timeout_ms + heartbeat_ms.
 *
 * A node's own pause (SIGSTOP, a stalled VM, a thread starved of CPU) is
 * not evidence that the others failed (PROTOCOL.md, "A paused node"): when
 * the thread finds it did not run for longer than heartbeat_ms plus half
 * the failure timeout, it gives every peer a fresh timeout and is *quiet*
 * — it declares nobody failed and changes no topology — until a member's
 * heartbeat vouches that it is still one of them (or two timeouts pass).
 * A member that gets a heartbeat from a node missing from its topology
 * answers REMOVED with that topology; the node installs it (its caches own
 * nothing from then on), and this thread joins again through the seeds
 * and the members it names, as a new member with a new order (rejoin).
 * So a removed node never coordinates a topology of its own.
 *
 * Listeners get each installed version, in order, from a notifier thread
 * of their own, never from the thread that installed it (a transport
 * thread handling TOPOLOGY or JOIN, the heartbeat thread): none can hold
 * up the node's messages.
 *
 * The baseline (PROTOCOL.md, "Baseline") lives in the topology itself: the
 * coordinator changes it like the node list (BASELINE, change_apply),
 * recomputing every node's STANDBY bit at each new version, and every
 * TOPOLOGY carries it, so the next coordinator has it.
 */
#define _POSIX_C_SOURCE 200809L
#include "transport_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "member_int.h"

dg_member *dgi_member_hold(dg_member *m)
{
	return m != NULL ? member_get(m) : NULL;
}

void dgi_member_release(dg_member *m)
{
	if (m != NULL)
		member_put(m);
}

/* Makes t (its reference taken) the current topology if it is newer; under
 * m->mu.  Returns the topology it replaced (the caller releases it), or
 * sets *taken false (t released) when t is not newer.  The listeners get t
 * from the notifier thread: a listener never runs on the thread that
 * installs, so none can hold up the message path (TOPOLOGY, JOIN, every
 * other message of the node's transport threads) or a change. */
dg_topology *dgi_member_install_locked(dg_member *m, dg_topology *t, bool *taken)
{
	uint64_t now = dgi_now_ms();
	*taken = false;
	if (m->topo != NULL && t->version <= m->topo->version) {
		dg_topology_release(t);
		return NULL;
	}
	struct since *s = dgi_calloc(t->count ? t->count : 1, sizeof(*s));
	struct tq *q = dgi_alloc(sizeof(*q));
	struct dgi_vset vs;
	if (s == NULL || q == NULL || !dgi_member_vset(t, &vs)) {
		dgi_free(s);
		dgi_free(q);
		dg_topology_release(t);
		return NULL;
	}
	for (uint32_t i = 0; i < t->count; i++) {
		struct since *old = dgi_member_since(m, t->nodes[i].id);
		s[i].id = t->nodes[i].id;
		/* (re)joining: a fresh timeout for everyone */
		s[i].ms = old && m->joined ? old->ms : now;
		s[i].left = old ? old->left : false;
		s[i].acked = old ? old->acked : 0;
		s[i].echo = old ? old->echo : 0;
	}
	dg_topology *old = m->topo;
	dgi_free(m->since);
	m->since = s;
	m->topo = t;
	/* serving waits for the listeners (the caches) to take t */
	atomic_store_explicit(&m->installed_ver, t->version, memory_order_release);
	if (t->version >= m->frozen_ver)
		m->nfrozen = 0; /* what it granted is decided now */
	if (m->acc != NULL && t->version > m->acc_b.base) {
		/* the version after acc's base is decided: no PREPARE of that
		 * base is promised any more */
		dg_topology_release(m->acc);
		m->acc = NULL;
	}
	dgi_free(m->voters);
	dgi_free(m->vidx);
	dgi_free(m->vvals);
	m->voters = vs.voters;
	m->nvoters = vs.n;
	m->vidx = vs.vidx;
	m->vvals = vs.vals;
	bool member = dg_topology_find(t, dg_tp_self(m->tp)) != NULL;
	/* out of the cluster's topology: never act as a member of the old
	 * one — the listeners see a topology without this node (its caches
	 * own nothing), and the thread joins again as a new member */
	bool dropped = m->joined && !member;
	if (dropped && !m->stopping) {
		m->rejoin = true;
		if (majority(m) && !atomic_load(&m->segmented)) {
			/* out until it joins again: its calls fail at once */
			atomic_store(&m->segmented, true);
			m->seg_since = now;
			atomic_fetch_add(&m->n_segmented, 1);
		}
	}
	if (!member)
		m->quiet = false;
	else
		m->amnesiac = false; /* it promises from here on under versions
		                        its predecessor never saw */
	m->joined = member;
	m->hb_answer = true; /* the next heartbeats ask for an answer: the
	                        lease under this version at once */
	dgi_member_lease_locked(m);
	q->t = dgi_topo_hold(t);
	q->next = NULL;
	*m->nq_tail = q;
	m->nq_tail = &q->next;
	pthread_cond_broadcast(&m->cv);
	pthread_cond_signal(&m->ncv);
	*taken = true;
	return old;
}

/* What follows an install, outside m->mu: the transport learns the new
 * members' addresses and drops the connections of those gone. */
void dgi_member_installed(dg_member *m, dg_topology *old, const dg_topology *t)
{
	dg_node_id self = dg_tp_self(m->tp);
	bool dropped = old != NULL && dg_topology_find(old, self) != NULL &&
	    dg_topology_find(t, self) == NULL;
	pthread_mutex_lock(&m->mu);
	bool stopping = m->stopping;
	bool two = majority(m) && m->topo == t && m->nvoters == 2 && !m->warned_two;
	if (two)
		m->warned_two = true;
	pthread_mutex_unlock(&m->mu);
	if (two)
		dgi_log("warn", "TWO-VOTERS", "version=%lld why=\"a cluster of two voting servers under "
		    "partition_policy=majority stops (DG_ERR_SEGMENTED) when either is unreachable: "
		    "run three, or set the baseline to three\"", (long long)t->version);
	for (uint32_t i = 0; i < t->count; i++)
		if (t->nodes[i].id != dg_tp_self(m->tp))
			dg_tp_set_address(m->tp, t->nodes[i].id, t->nodes[i].url);
	if (old != NULL)
		for (uint32_t i = 0; i < old->count; i++)
			if (dg_topology_find(t, old->nodes[i].id) == NULL)
				dg_tp_disconnect(m->tp, old->nodes[i].id);
	dgi_log("info", "TOPOLOGY", "version=%lld nodes=%u self=%016llx", (long long)t->version,
	    t->count, (unsigned long long)dg_tp_self(m->tp));
	if (dropped)
		dgi_log("warn", "NODE-REMOVED-SELF", "node=%016llx version=%lld nodes=%u "
		    "why=\"not in the cluster's topology\" action=%s",
		    (unsigned long long)self, (long long)t->version, t->count,
		    stopping ? "none" : "rejoin");
	dg_topology_release(old);
}

/* Install t (takes the reference) if newer. */
void dgi_member_install(dg_member *m, dg_topology *t)
{
	bool taken;
	pthread_mutex_lock(&m->mu);
	dg_topology *old = dgi_member_install_locked(m, t, &taken);
	if (taken)
		dgi_topo_hold(t);
	pthread_mutex_unlock(&m->mu);
	if (!taken)
		return;
	dgi_member_installed(m, old, t);
	dg_topology_release(t);
}

/* The notifier thread: gives every installed version, in order, to the
 * listeners (old: the version delivered before it). */
static void *notifier_thread(void *arg)
{
	dgi_thread_name("dg-notifier");
	dg_member *m = arg;
	struct listener ls[MAX_LISTENERS];
	pthread_mutex_lock(&m->mu);
	for (;;) {
		while (m->nq_head == NULL && !m->stopping)
			pthread_cond_wait(&m->ncv, &m->mu);
		if (m->stopping)
			break; /* dgi_member_free releases what is left */
		struct tq *q = m->nq_head;
		m->nq_head = q->next;
		if (m->nq_head == NULL)
			m->nq_tail = &m->nq_head;
		int n = m->nlisteners;
		memcpy(ls, m->listeners, sizeof(ls[0]) * (size_t)n);
		dg_topology *old = m->delivered;
		m->delivered = q->t;
		pthread_mutex_unlock(&m->mu);
		for (int i = 0; i < n; i++)
			if (q->t->version > ls[i].after)
				ls[i].fn(ls[i].ctx, old, q->t);
		atomic_store_explicit(&m->delivered_ver, q->t->version, memory_order_release);
		dg_topology_release(old);
		dgi_free(q);
		pthread_mutex_lock(&m->mu);
	}
	pthread_mutex_unlock(&m->mu);
	return NULL;
}

/* ---- handlers ---- */

struct fwd {
	dg_member *m;
	dg_msg_in req;   /* only type, flags, corr and from are used to reply */
};

static void fwd_done(void *ctx, dg_err err, const dg_msg_in *reply)
{
	struct fwd *f = ctx;
	if (err == DG_OK)
		dg_tp_reply(f->m->tp, &f->req, dg_msg_row_of(f->req.type)->reply, reply->body);
	else
		dg_tp_reply_error(f->m->tp, &f->req, err);
	member_put(f->m);
	dgi_free(f);
}

/* Passes a request (JOIN, BASELINE) on to the coordinator; its answer goes
 * back to the requester from fwd_done. */
void dgi_member_forward(dg_member *m, const dg_msg_in *in, dg_node_id coord, uint32_t timeout_ms)
{
	struct fwd *f = dgi_alloc(sizeof(*f));
	if (f == NULL) {
		dg_tp_reply_error(m->tp, in, DG_ERR_NOMEM);
		return;
	}
	f->m = member_get(m);
	f->req = *in;
	dg_err e = dg_tp_request(m->tp, coord, in->type, in->body, timeout_ms, fwd_done, f);
	if (e != DG_OK) {
		member_put(m);
		dgi_free(f);
		dg_tp_reply_error(m->tp, in, e);
	}
}

static void on_join(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	dg_member *m = ctx;
	const dg_msg_join *j = in->body;
	pthread_mutex_lock(&m->mu);
	if (m->topo == NULL || !m->joined || m->stopping) {
		/* not in a cluster (yet): "ask again" while forming one, else
		 * DG_ERR_STATE — and a smaller id asking holds our own forming
		 * (member_join.c) */
		bool forming = m->forming && !m->stopping;
		if (!forming && !m->joined && (dg_node_id)j->node_id < dg_tp_self(tp))
			m->smaller_join_ms = dgi_now_ms();
		pthread_mutex_unlock(&m->mu);
		dg_tp_reply_error(tp, in, forming ? DG_ERR_NOT_READY : DG_ERR_STATE);
		return;
	}
	dg_node_id coord = dgi_member_coordinator_locked(m, dgi_now_ms());
	const dg_topology_node *have = dg_topology_find(m->topo, (dg_node_id)j->node_id);
	dg_msg_join_ack ack = { m->topo->version, have ? have->order : 0,
		atomic_load_explicit(&m->ft_ms, memory_order_relaxed),
		atomic_load_explicit(&m->hb_ms, memory_order_relaxed) };
	dg_topology *cur = have != NULL ? dgi_topo_hold(m->topo) : NULL;
	pthread_mutex_unlock(&m->mu);
	if (coord != dg_tp_self(tp)) {
		dg_topology_release(cur);
		/* bounded like the joiner's own attempt: it asks again (through
		 * this seed or another) rather than wait on a dead coordinator */
		dgi_member_forward(m, in, coord, JOIN_ATTEMPT_MS);
		return;
	}
	if (cur != NULL) {
		/* a JOIN again from a member: it asks because the TOPOLOGY that
		 * added it did not reach it (or the ack did not) — send it again */
		dgi_member_topo_send(m, cur, (dg_node_id)j->node_id);
		dg_topology_release(cur);
	}
	if (have == NULL) {
		dgi_member_join_seen(m, j);
		struct change ch = { .add = j, .req = in, .join_ack = ack };
		dg_err e = dgi_member_change_apply(m, &ch);
		if (e != DG_OK) {
			dg_tp_reply_error(tp, in, e);
			return;
		}
		if (ch.pending)
			return; /* answered once the voters accepted it */
		ack.topology_version = ch.version;
		ack.order = ch.order;
		dgi_log("info", "NODE-JOINED", "node=%016llx order=%lld version=%lld",
		    (unsigned long long)j->node_id, (long long)ack.order,
		    (long long)ack.topology_version);
	} else if (j->floor > ack.topology_version) {
		/* a member rejoining (PROTOCOL.md, "A paused node") that was
		 * told it is out by a version this coordinator has not seen:
		 * a version above that one puts it, and everyone, on this
		 * topology (it would wait for one forever otherwise).  (Its own
		 * version, as a segmented member's JOIN names: the same topology,
		 * one version having one topology — sent again above.) */
		struct change ch = { .force = true, .floor = j->floor, .req = in, .join_ack = ack };
		dg_err e = dgi_member_change_apply(m, &ch);
		if (e != DG_OK) {
			dg_tp_reply_error(tp, in, e);
			return;
		}
		if (ch.pending)
			return;
		dgi_log("warn", "TOPOLOGY-RESYNC", "rejoined_by=%016llx their_version=%lld version=%lld",
		    (unsigned long long)j->node_id, (long long)j->floor, (long long)ch.version);
		ack.topology_version = ch.version;
	}
	dg_tp_reply(tp, in, DG_MSG_JOIN_ACK, &ack);
}

static void on_topology(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	dg_member *m = ctx;
	const dg_msg_raw *body = in->body;
	dg_topology *t;
	(void)tp;
	if (dgi_member_topo_decode(m, &body->list, &t) == DG_OK)
		dgi_member_install(m, t);
	else
		dgi_log("warn", "TOPOLOGY-BAD", "from=%016llx", (unsigned long long)in->from);
}

/* ---- start / stop ---- */

void dg_member_config_init(dg_member_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->failure_timeout_ms = 10000;
	cfg->join_timeout_ms = 10000;
}

dg_err dg_member_listen(dg_member *m, dg_topology_fn fn, void *ctx)
{
	pthread_mutex_lock(&m->mu);
	dg_err e = DG_ERR_LIMIT;
	if (m->nlisteners < MAX_LISTENERS) {
		m->listeners[m->nlisteners].fn = fn;
		m->listeners[m->nlisteners].ctx = ctx;
		/* versions installed but not delivered yet reach it too: one
		 * that reads the current topology before listening misses none */
		m->listeners[m->nlisteners].after = m->delivered != NULL ? m->delivered->version : 0;
		m->nlisteners++;
		e = DG_OK;
	}
	pthread_mutex_unlock(&m->mu);
	return e;
}

dg_err dg_member_start(dg_tp *tp, const dg_member_config *cfg, dg_member **out)
{
	if (tp == NULL || cfg == NULL || out == NULL || cfg->reg == NULL ||
	    cfg->failure_timeout_ms == 0 || (cfg->nseeds > 0 && cfg->seeds == NULL))
		return DG_ERR_INVAL;
	dg_member *m = dgi_calloc(1, sizeof(*m));
	if (m == NULL)
		return DG_ERR_NOMEM;
	atomic_init(&m->refs, 1);
	m->tp = tp;
	m->reg = cfg->reg;
	m->cfg = *cfg;
	if (m->cfg.heartbeat_ms == 0)
		m->cfg.heartbeat_ms = m->cfg.failure_timeout_ms / 5 ? m->cfg.failure_timeout_ms / 5 : 1;
	atomic_init(&m->ft_ms, m->cfg.failure_timeout_ms);
	dgi_tp_set_stale_ms(m->tp, m->cfg.failure_timeout_ms);
	m->policy = cfg->partition_policy == DG_PARTITION_NONE ? DG_PARTITION_NONE :
	    DG_PARTITION_MAJORITY;
	atomic_init(&m->lease_until, 0);
	atomic_init(&m->installed_ver, 0);
	atomic_init(&m->delivered_ver, 0);
	atomic_init(&m->hb_ms, m->cfg.heartbeat_ms);
	if (m->cfg.join_timeout_ms == 0)
		m->cfg.join_timeout_ms = 10000;
	pthread_mutex_init(&m->mu, NULL);
	pthread_mutex_init(&m->pmu, NULL);
	pthread_cond_init(&m->cv, NULL);
	pthread_cond_init(&m->ncv, NULL);
	m->nq_tail = &m->nq_head;
	m->seeds = dgi_calloc(cfg->nseeds ? cfg->nseeds : 1, sizeof(char *));
	if (m->seeds == NULL) {
		dg_member_stop(m);
		return DG_ERR_NOMEM;
	}
	for (size_t i = 0; i < cfg->nseeds; i++) {
		size_t l = strlen(cfg->seeds[i]) + 1;
		if ((m->seeds[i] = dgi_alloc(l)) == NULL) {
			dg_member_stop(m);
			return DG_ERR_NOMEM;
		}
		memcpy(m->seeds[i], cfg->seeds[i], l);
	}
	m->cfg.baseline = NULL;
	m->cfg.nbaseline = 0;
	if (cfg->nbaseline > 0 && cfg->baseline != NULL) {
		uint32_t nb = cfg->nbaseline < DG_BASELINE_MAX ? cfg->nbaseline : DG_BASELINE_MAX;
		if ((m->blcopy = dgi_calloc(nb, sizeof(char *))) == NULL) {
			dg_member_stop(m);
			return DG_ERR_NOMEM;
		}
		for (uint32_t i = 0; i < nb; i++) {
			size_t l = strnlen(cfg->baseline[i], DG_BASELINE_ADDR_MAX - 1);
			if ((m->blcopy[i] = dgi_alloc(l + 1)) == NULL) {
				dg_member_stop(m);
				return DG_ERR_NOMEM;
			}
			memcpy(m->blcopy[i], cfg->baseline[i], l);
			m->blcopy[i][l] = 0;
			m->cfg.nbaseline = i + 1;
		}
		m->cfg.baseline = (const char *const *)m->blcopy;
	}
	m->started_ms = dgi_now_ms();
	m->cfg.acceptor_path = NULL;
	if (cfg->acceptor_path != NULL) {
		size_t l = strlen(cfg->acceptor_path) + 1;
		if ((m->acc_path = dgi_alloc(l)) == NULL) {
			dg_member_stop(m);
			return DG_ERR_NOMEM;
		}
		memcpy(m->acc_path, cfg->acceptor_path, l);
		m->cfg.acceptor_path = m->acc_path;
	}
	dg_err le = dgi_acceptor_load(m); /* before anyone asks for a vote */
	if (le != DG_OK) {
		dg_member_stop(m);
		return le;
	}
	dg_tp_handle(tp, DG_MSG_JOIN, on_join, m);
	dg_tp_handle(tp, DG_MSG_TOPOLOGY, on_topology, m);
	dg_tp_handle(tp, DG_MSG_HEARTBEAT, dgi_member_on_heartbeat, m);
	dg_tp_handle(tp, DG_MSG_NODE_FAILED, dgi_member_on_node_failed, m);
	dg_tp_handle(tp, DG_MSG_LEAVE, dgi_member_on_leave, m);
	dg_tp_handle(tp, DG_MSG_TYPE_PROPOSE, dgi_member_on_type_propose, m);
	dg_tp_handle(tp, DG_MSG_TYPE_ANNOUNCE, dgi_member_on_type_announce, m);
	dg_tp_handle(tp, DG_MSG_TYPES_SNAPSHOT, dgi_member_on_types_snapshot, m);
	dg_tp_handle(tp, DG_MSG_BASELINE, dgi_member_on_baseline, m);
	dg_tp_handle(tp, DG_MSG_REMOVED, dgi_member_on_removed, m);
	dg_tp_handle(tp, DG_MSG_TOPO_PROPOSE, dgi_member_on_topo_propose, m);
	dg_registry_set_hook(m->reg, dgi_member_propose, m);
	if (pthread_create(&m->notifier, NULL, notifier_thread, m) != 0) {
		dg_member_stop(m);
		return DG_ERR_NOMEM;
	}
	m->notifier_started = true;
	dg_err e = dgi_member_join(m);
	pthread_mutex_lock(&m->mu);
	m->tick_ms = dgi_now_ms();
	pthread_mutex_unlock(&m->mu);
	if (e == DG_OK && pthread_create(&m->thread, NULL, dgi_member_thread, m) != 0)
		e = DG_ERR_NOMEM;
	if (e != DG_OK) {
		dg_member_stop(m);
		return e;
	}
	m->thread_started = true;
	*out = m;
	return DG_OK;
}

static void member_stop(dg_member *m, bool leave);

void dg_member_stop(dg_member *m)
{
	member_stop(m, true);
}

void dgi_member_kill(dg_member *m)
{
	member_stop(m, false);
}

static void member_stop(dg_member *m, bool leave)
{
	if (m == NULL)
		return;
	/* stopping first: from the LEAVE on, this node coordinates nothing */
	pthread_mutex_lock(&m->mu);
	m->stopping = true;
	pthread_cond_broadcast(&m->cv);
	pthread_cond_signal(&m->ncv);
	pthread_mutex_unlock(&m->mu);
	dg_topology *t = leave ? dg_member_topology(m) : NULL;
	for (uint32_t i = 0; t != NULL && i < t->count; i++)
		if (t->nodes[i].id != dg_tp_self(m->tp))
			dg_tp_send(m->tp, t->nodes[i].id, DG_MSG_LEAVE, NULL);
	dg_topology_release(t);
	/* returns once no call of propose() is running (a type being
	 * registered meanwhile): none touches m after this */
	dg_registry_set_hook(m->reg, NULL, NULL);
	if (m->thread_started)
		pthread_join(m->thread, NULL);
	if (m->typesync_started) /* (started by that thread only) */
		pthread_join(m->typesync, NULL);
	if (m->probe_started) /* (likewise) */
		pthread_join(m->probe, NULL);
	if (m->notifier_started)
		pthread_join(m->notifier, NULL); /* no listener runs after this */
	/* no handler may run on m after this: unset them and wait out any
	 * running; requests in flight hold their own reference */
	for (int type = DG_MSG_HEARTBEAT; type <= DG_MSG_LEAVE; type++)
		dg_tp_handle(m->tp, (dg_msg_type)type, NULL, NULL);
	dg_tp_handle(m->tp, DG_MSG_BASELINE, NULL, NULL);
	dg_tp_handle(m->tp, DG_MSG_REMOVED, NULL, NULL);
	dg_tp_handle(m->tp, DG_MSG_TOPO_PROPOSE, NULL, NULL);
	dg_tp_quiesce(m->tp);
	member_put(m);
}

void dgi_member_free(dg_member *m)
{
	for (size_t i = 0; m->seeds != NULL && i < m->cfg.nseeds; i++)
		dgi_free(m->seeds[i]);
	dgi_free(m->seeds);
	for (uint32_t i = 0; m->blcopy != NULL && i < m->cfg.nbaseline; i++)
		dgi_free(m->blcopy[i]);
	dgi_free(m->blcopy);
	dg_topology_release(m->topo);
	dg_topology_release(m->delivered);
	while (m->nq_head != NULL) {
		struct tq *q = m->nq_head;
		m->nq_head = q->next;
		dg_topology_release(q->t);
		dgi_free(q);
	}
	dgi_free(m->since);
	dgi_free(m->echo_buf);
	dgi_free(m->voters);
	dgi_free(m->vidx);
	dgi_free(m->vvals);
	dgi_member_prop_drop(m);
	dg_topology_release(m->acc);
	dgi_free(m->acc_path);
	pthread_cond_destroy(&m->ncv);
	pthread_cond_destroy(&m->cv);
	pthread_mutex_destroy(&m->pmu);
	pthread_mutex_destroy(&m->mu);
	dgi_free(m);
}
