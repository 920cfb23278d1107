/* membership.c — discovery, the agreed topology, topology changes and
 * their votes, failure detection (PROTOCOL.md, "Membership", "Majority");
 * the voter's side, leases and SEGMENTED are member_quorum.c's, the
 * cluster-wide types member_types.c's (member_int.h: what they share).
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

/* ---- topologies ---- */

void dg_topology_release(dg_topology *t)
{
	if (t != NULL && atomic_fetch_sub(&t->refs, 1) == 1)
		dgi_free(t);
}

const dg_topology_node *dg_topology_find(const dg_topology *t, dg_node_id id)
{
	for (uint32_t i = 0; t != NULL && i < t->count; i++)
		if (t->nodes[i].id == id)
			return &t->nodes[i];
	return NULL;
}

/* A baseline being built or read: views (into a topology, a frame or the
 * caller's strings), valid while it is used.  Kept sorted (strcmp), no
 * duplicates, so equal sets compare equal. */
struct bl {
	bool set;
	uint32_t n;
	dg_str a[DG_BASELINE_MAX];
};

static int str_cmp(dg_str a, dg_str b)
{
	int c = memcmp(a.ptr, b.ptr, a.len < b.len ? a.len : b.len);
	return c != 0 ? c : (a.len > b.len) - (a.len < b.len);
}

static int str_qcmp(const void *a, const void *b)
{
	return str_cmp(*(const dg_str *)a, *(const dg_str *)b);
}

static dg_str str_of(const char *s)
{
	return (dg_str){ s, (uint32_t)strlen(s) };
}

static bool bl_has(const struct bl *b, const char *url)
{
	dg_str u = str_of(url);
	return b->n > 0 && bsearch(&u, b->a, b->n, sizeof(b->a[0]), str_qcmp) != NULL;
}

static void bl_normalize(struct bl *b)
{
	qsort(b->a, b->n, sizeof(b->a[0]), str_qcmp);
	uint32_t k = 0;
	for (uint32_t i = 0; i < b->n; i++)
		if (k == 0 || str_cmp(b->a[k - 1], b->a[i]) != 0)
			b->a[k++] = b->a[i];
	b->n = k;
}

/* The baseline t carries (views into t). */
static void bl_of(struct bl *b, const dg_topology *t)
{
	b->set = t != NULL && t->baseline_set;
	b->n = 0;
	for (uint32_t i = 0; b->set && i < t->nbaseline; i++)
		b->a[b->n++] = str_of(t->baseline[i]);
}

/* The baseline a cluster this node forms starts with: the one its owner
 * persisted (dg_member_config.baseline), or none.  Views into m->cfg's
 * copies. */
static const struct bl *bl_formed(dg_member *m, struct bl *b)
{
	if (m->cfg.nbaseline == 0)
		return NULL;
	b->set = true;
	b->n = 0;
	for (uint32_t i = 0; i < m->cfg.nbaseline && b->n < DG_BASELINE_MAX; i++)
		b->a[b->n++] = str_of(m->cfg.baseline[i]);
	bl_normalize(b);
	return b;
}

/* One allocation: header, nodes (sorted by order), the baseline's
 * pointers, then the strings (URLs, baseline addresses). */
static dg_topology *topo_new(int64_t version, const dg_topology_node *nodes,
    uint32_t n, const struct bl *bl)
{
	uint32_t nb = bl != NULL && bl->set ? bl->n : 0;
	size_t strs = 0;
	for (uint32_t i = 0; i < n; i++)
		strs += strlen(nodes[i].url) + 1;
	for (uint32_t i = 0; i < nb; i++)
		strs += bl->a[i].len + 1;
	dg_topology *t = dgi_alloc(sizeof(*t) + n * sizeof(t->nodes[0]) +
	    nb * sizeof(char *) + strs);
	if (t == NULL)
		return NULL;
	t->version = version;
	t->count = n;
	atomic_init(&t->refs, 1);
	const char **bls = (const char **)(void *)&t->nodes[n];
	char *s = (char *)&bls[nb];
	for (uint32_t i = 0; i < n; i++) {
		/* insertion by order keeps the list sorted */
		uint32_t j = i;
		while (j > 0 && t->nodes[j - 1].order > nodes[i].order) {
			t->nodes[j] = t->nodes[j - 1];
			j--;
		}
		size_t l = strlen(nodes[i].url) + 1;
		memcpy(s, nodes[i].url, l);
		t->nodes[j].id = nodes[i].id;
		t->nodes[j].order = nodes[i].order;
		t->nodes[j].url = s;
		t->nodes[j].attrs = nodes[i].attrs;
		s += l;
	}
	for (uint32_t i = 0; i < nb; i++) {
		memcpy(s, bl->a[i].ptr, bl->a[i].len);
		s[bl->a[i].len] = 0;
		bls[i] = s;
		s += bl->a[i].len + 1;
	}
	t->baseline_set = bl != NULL && bl->set;
	t->nbaseline = nb;
	t->baseline = bls;
	return t;
}

static dg_topology *hold(dg_topology *t)
{
	if (t != NULL)
		atomic_fetch_add(&t->refs, 1);
	return t;
}

dg_topology *dg_member_topology(dg_member *m)
{
	pthread_mutex_lock(&m->mu);
	dg_topology *t = hold(m->topo);
	pthread_mutex_unlock(&m->mu);
	return t;
}

static struct since *since_of(dg_member *m, dg_node_id id)
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
	struct since *s = since_of(m, n->id);
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

/* Makes t (its reference taken) the current topology if it is newer; under
 * m->mu.  Returns the topology it replaced (the caller releases it), or
 * sets *taken false (t released) when t is not newer.  The listeners get t
 * from the notifier thread: a listener never runs on the thread that
 * installs, so none can hold up the message path (TOPOLOGY, JOIN, every
 * other message of the node's transport threads) or a change. */
static dg_topology *install_locked(dg_member *m, dg_topology *t, bool *taken)
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
		struct since *old = since_of(m, t->nodes[i].id);
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
	m->joined = member;
	m->hb_answer = true; /* the next heartbeats ask for an answer: the
	                        lease under this version at once */
	dgi_member_lease_locked(m);
	q->t = hold(t);
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
static void installed(dg_member *m, dg_topology *old, const dg_topology *t)
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
static void install(dg_member *m, dg_topology *t)
{
	bool taken;
	pthread_mutex_lock(&m->mu);
	dg_topology *old = install_locked(m, t, &taken);
	if (taken)
		hold(t);
	pthread_mutex_unlock(&m->mu);
	if (!taken)
		return;
	installed(m, old, t);
	dg_topology_release(t);
}

/* The notifier thread: gives every installed version, in order, to the
 * listeners (old: the version delivered before it). */
static void *notifier_thread(void *arg)
{
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
		dg_topology_release(old);
		dgi_free(q);
		pthread_mutex_lock(&m->mu);
	}
	pthread_mutex_unlock(&m->mu);
	return NULL;
}

/* TOPOLOGY body (PROTOCOL.md): one LIST — I64 version, I64 node count n,
 * n × (I64 id, I64 order, STRING url, I64 attrs), I64 baseline (-1: not
 * set, else its size k), k × STRING address. */
static dg_err topo_encode_reg(dg_member *m, const dg_topology *t, dg_buf *b)
{
	dg_writer w;
	dg_writer_init(&w, m->reg, b);
	dg_write_list_begin(&w, 3 + 4 * t->count + t->nbaseline);
	dg_write_i64(&w, t->version);
	dg_write_i64(&w, t->count);
	for (uint32_t i = 0; i < t->count; i++) {
		dg_write_i64(&w, (int64_t)t->nodes[i].id);
		dg_write_i64(&w, t->nodes[i].order);
		dg_write_str(&w, t->nodes[i].url, strlen(t->nodes[i].url));
		dg_write_i64(&w, t->nodes[i].attrs);
	}
	dg_write_i64(&w, t->baseline_set ? (int64_t)t->nbaseline : -1);
	for (uint32_t i = 0; i < t->nbaseline; i++)
		dg_write_str(&w, t->baseline[i], strlen(t->baseline[i]));
	dg_write_end(&w);
	return dg_writer_finish(&w);
}

/* The baseline at the end of a TOPOLOGY list: k views into the frame. */
static dg_err bl_decode(dg_reader *r, uint32_t left, struct bl *b)
{
	int64_t k;
	dg_err e;
	if ((e = dg_read_i64(r, &k)) != DG_OK)
		return e;
	if (k < -1 || k > DG_BASELINE_MAX || (k == -1 ? 0 : (uint32_t)k) != left - 1)
		return DG_ERR_BAD_LENGTH;
	b->set = k >= 0;
	b->n = 0;
	for (int64_t i = 0; i < k; i++) {
		dg_str a;
		if ((e = dg_read_str(r, &a, NULL)) != DG_OK)
			return e;
		if (a.ptr == NULL || a.len == 0 || a.len >= DG_BASELINE_ADDR_MAX)
			return DG_ERR_BAD_LENGTH;
		b->a[b->n++] = a;
	}
	bl_normalize(b); /* a hostile sender's order must not break lookups */
	return DG_OK;
}

/* Decodes a TOPOLOGY body.  Its nodes, their URLs and the baseline are
 * decoded into one allocation sized by the body (up to DG_TOPOLOGY_MAX
 * nodes of 255-byte URLs and DG_BASELINE_MAX addresses: hundreds of KB,
 * too much for a network thread's stack); topology changes are rare. */
dg_err dgi_member_topo_decode(dg_member *m, const dg_raw *raw, dg_topology **out)
{
	dg_reader r;
	uint32_t count;
	int64_t version, nn;
	dg_err e;
	dg_reader_init(&r, m->reg, raw->ptr, raw->len);
	if ((e = dg_read_begin(&r, DG_LIST, &count)) != DG_OK)
		return e;
	if (count < 3)
		return DG_ERR_BAD_LENGTH;
	if ((e = dg_read_i64(&r, &version)) != DG_OK || (e = dg_read_i64(&r, &nn)) != DG_OK)
		return e;
	if (nn < 0 || nn > DG_TOPOLOGY_MAX || (uint64_t)count < 3 + 4 * (uint64_t)nn)
		return DG_ERR_BAD_LENGTH;
	uint32_t n = (uint32_t)nn;
	/* the URLs are copied with their terminators: at most the body's
	 * bytes plus one a node */
	struct bl *bl = dgi_alloc(sizeof(*bl) + n * sizeof(dg_topology_node) + raw->len + n);
	if (bl == NULL)
		return DG_ERR_NOMEM;
	dg_topology_node *nodes = (dg_topology_node *)(void *)(bl + 1);
	char *urls = (char *)(nodes + n), *u = urls;
	for (uint32_t i = 0; i < n && e == DG_OK; i++) {
		int64_t id, order, attrs;
		dg_str url;
		if ((e = dg_read_i64(&r, &id)) != DG_OK || (e = dg_read_i64(&r, &order)) != DG_OK ||
		    (e = dg_read_str(&r, &url, NULL)) != DG_OK ||
		    (e = dg_read_i64(&r, &attrs)) != DG_OK)
			break;
		if (url.ptr == NULL || url.len >= 256 || id == 0 || attrs < 0 || attrs > UINT32_MAX ||
		    (size_t)(u - urls) + url.len + 1 > raw->len + n) {
			e = DG_ERR_BAD_LENGTH;
			break;
		}
		memcpy(u, url.ptr, url.len);
		u[url.len] = 0;
		nodes[i].id = (dg_node_id)id;
		nodes[i].order = order;
		nodes[i].url = u;
		nodes[i].attrs = (uint32_t)attrs;
		u += url.len + 1;
	}
	if (e == DG_OK)
		e = bl_decode(&r, count - 2 - 4 * n, bl);
	if (e == DG_OK)
		e = (*out = topo_new(version, nodes, n, bl)) != NULL ? DG_OK : DG_ERR_NOMEM;
	dgi_free(bl);
	return e;
}

/* Send t to one node (to: its id), or to every member but this node (0). */
static void topo_send(dg_member *m, const dg_topology *t, dg_node_id to)
{
	dg_buf b;
	dg_buf_init(&b);
	if (topo_encode_reg(m, t, &b) == DG_OK) {
		dg_msg_raw body = { { b.data, (uint32_t)b.len } };
		for (uint32_t i = 0; i < t->count; i++)
			if (t->nodes[i].id != dg_tp_self(m->tp) && (to == 0 || t->nodes[i].id == to))
				dg_tp_send(m->tp, t->nodes[i].id, DG_MSG_TOPOLOGY, &body);
	}
	dg_buf_free(&b);
}

static void broadcast(dg_member *m, const dg_topology *t)
{
	topo_send(m, t, 0);
}

/* ---- the baseline (PROTOCOL.md, "Baseline") ---- */

/* Whether some server of nodes is in b (what the coordinator keeps true
 * for a change it accepts; failures can still break it, see standby_bits). */
static bool bl_any_owner(const struct bl *b, const dg_topology_node *nodes, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		if (!(nodes[i].attrs & DG_NODE_CLIENT) && bl_has(b, nodes[i].url))
			return true;
	return false;
}

/* Applies op to b (which holds the current set; with none, the servers of
 * nodes stand for it).  Returns why it is refused, or NULL. */
static const char *bl_apply(struct bl *b, const dg_topology_node *nodes, uint32_t n,
    int op, const dg_str *addrs, uint32_t naddrs, bool need_majority)
{
	if (op < DG_BASELINE_SET || op > DG_BASELINE_REMOVE)
		return "unknown operation (set, add or remove)";
	for (uint32_t i = 0; i < naddrs; i++)
		if (addrs[i].ptr == NULL || addrs[i].len == 0 || addrs[i].len >= DG_BASELINE_ADDR_MAX)
			return "an address is empty or longer than 127 bytes";
	if (op != DG_BASELINE_SET && !b->set) {
		b->n = 0; /* auto: the baseline is every server online now */
		for (uint32_t i = 0; i < n && b->n < DG_BASELINE_MAX; i++)
			if (!(nodes[i].attrs & DG_NODE_CLIENT))
				b->a[b->n++] = str_of(nodes[i].url);
	}
	if (op == DG_BASELINE_SET)
		b->n = 0;
	if (op == DG_BASELINE_REMOVE) {
		uint32_t k = 0;
		for (uint32_t i = 0; i < b->n; i++) {
			bool drop = false;
			for (uint32_t j = 0; j < naddrs && !drop; j++)
				drop = str_cmp(b->a[i], addrs[j]) == 0;
			if (!drop)
				b->a[k++] = b->a[i];
		}
		b->n = k;
	} else {
		for (uint32_t i = 0; i < naddrs; i++) {
			if (b->n == DG_BASELINE_MAX)
				return "more than 1024 addresses";
			b->a[b->n++] = addrs[i];
		}
	}
	b->set = true;
	bl_normalize(b);
	if (!bl_any_owner(b, nodes, n))
		return "no online server node would own data (a baseline needs at least one)";
	if (need_majority) {
		/* the baseline is the voting set: one without a majority online
		 * would stop the cluster at once (PROTOCOL.md, "Majority") */
		uint32_t online = 0;
		for (uint32_t i = 0; i < b->n; i++) {
			bool on = false;
			for (uint32_t k = 0; k < n && !on; k++)
				on = !(nodes[k].attrs & DG_NODE_CLIENT) &&
				    str_cmp(b->a[i], str_of(nodes[k].url)) == 0;
			online += on;
		}
		if (online < dgi_quorum_need(b->n))
			return "fewer than a majority of it online: under partition_policy=majority "
			    "the cluster would stop";
	}
	return NULL;
}

/* Sets the STANDBY bit of every server outside b; returns whether a bit
 * changed.  When no online server is in b (its nodes failed or left), no
 * node is STANDBY: the servers there own the data rather than nobody,
 * until a baseline node is back. */
static bool standby_bits(const struct bl *b, dg_topology_node *nodes, uint32_t n)
{
	bool any = b->set && bl_any_owner(b, nodes, n), changed = false;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t a = nodes[i].attrs & ~DG_NODE_STANDBY;
		if (any && !(a & DG_NODE_CLIENT) && !bl_has(b, nodes[i].url))
			a |= DG_NODE_STANDBY;
		changed |= a != nodes[i].attrs;
		nodes[i].attrs = a;
	}
	return changed;
}

static bool bl_same(const struct bl *b, const dg_topology *t)
{
	if (b->set != t->baseline_set || (b->set && b->n != t->nbaseline))
		return false;
	for (uint32_t i = 0; b->set && i < b->n; i++)
		if (str_cmp(b->a[i], str_of(t->baseline[i])) != 0)
			return false;
	return true;
}

/* ---- topology changes (coordinator) ---- */

struct change {
	const dg_node_id *drop;   /* nodes to remove (ndrop) */
	size_t ndrop;
	const dg_msg_join *add;   /* a joiner, or NULL */
	bool rebase;              /* apply op/addrs to the baseline */
	bool force;               /* a new version even if nothing changed */
	int64_t floor;            /* force: the new version is above this */
	int op;
	const dg_str *addrs;
	uint32_t naddrs;
	/* a request to answer once a majority decided (JOIN: JOIN_ACK, with
	 * join_ack's timings and order; BASELINE: BASELINE_ACK), or NULL */
	const dg_msg_in *req;
	dg_msg_join_ack join_ack;
	bool wait;                /* wait here for the majority's answer */
	/* out */
	int64_t version;          /* the version installed (or the current one) */
	int64_t order;            /* the joiner's */
	bool changed;
	bool pending;             /* req will be answered when the votes are in */
	const char *why;          /* DG_ERR_INVAL: the reason */
};

/* A version waiting for a majority of the voters of the one before it
 * (PROTOCOL.md, "Majority").  One at a time (m->prop); each TOPO_PROPOSE
 * in flight and each waiter hold a reference (under m->mu). */
enum { PROP_PENDING, PROP_DONE, PROP_ABANDONED };

struct prop {
	int refs;
	int state;
	bool sending;             /* votes still being sent: not decided yet */
	dg_topology *cur, *t;     /* held */
	const char **voters;      /* cur's (views into cur) */
	uint32_t nvoters, need, granted;
	bool *got;                /* per voter */
	uint32_t sent, answered;
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
};

static void prop_release(dg_member *m, struct prop *p)
{
	pthread_mutex_lock(&m->mu);
	bool last = --p->refs == 0;
	pthread_mutex_unlock(&m->mu);
	if (!last)
		return;
	dg_topology_release(p->cur);
	dg_topology_release(p->t);
	dgi_free(p->voters);
	dgi_free(p->got);
	dgi_free(p);
}

/* A new proposal of t after cur (mu held), with this node's vote and the
 * joiner's (its JOIN is its vote for its own address) counted.  *direct:
 * those make a majority already (one voter, or two and the joiner). */
static struct prop *prop_new_locked(dg_member *m, dg_topology *cur, dg_topology *t,
    const struct change *ch, bool *direct)
{
	*direct = false;
	struct prop *p = dgi_calloc(1, sizeof(*p));
	uint32_t cap = cur->count + cur->nbaseline;
	if (p == NULL || (p->voters = dgi_calloc(cap ? cap : 1, sizeof(char *))) == NULL ||
	    (p->got = dgi_calloc(cap ? cap : 1, sizeof(bool))) == NULL) {
		if (p != NULL)
			dgi_free(p->voters);
		dgi_free(p);
		return NULL;
	}
	p->nvoters = dgi_quorum_voters(cur, p->voters, cap);
	p->need = p->nvoters > 0 ? dgi_quorum_need(p->nvoters) : 0;
	int32_t me = dgi_quorum_index(p->voters, p->nvoters, dg_tp_address(m->tp));
	if (me >= 0 && !p->got[me]) {
		p->got[me] = true;
		p->granted++;
	}
	/* a JOIN (a joiner, or a member rejoining: TOPOLOGY-RESYNC) is its
	 * sender's vote for its own address */
	const dg_msg_join *jn = ch->add != NULL ? ch->add :
	    ch->req != NULL && ch->req->type == DG_MSG_JOIN ? ch->req->body : NULL;
	if (jn != NULL && jn->address.len < 256) {
		char url[256];
		memcpy(url, jn->address.ptr, jn->address.len);
		url[jn->address.len] = 0;
		int32_t j = dgi_quorum_index(p->voters, p->nvoters, url);
		if (j >= 0 && !p->got[j]) {
			p->got[j] = true;
			p->granted++;
		}
	}
	/* a voter that left (LEAVE) serves nothing and votes no more: its
	 * LEAVE is its vote for the versions without it */
	for (uint32_t i = 0; i < cur->count && m->since != NULL && m->topo == cur; i++) {
		int32_t k = m->since[i].left ?
		    dgi_quorum_index(p->voters, p->nvoters, cur->nodes[i].url) : -1;
		if (k >= 0 && !p->got[k]) {
			p->got[k] = true;
			p->granted++;
		}
	}
	if (p->granted >= p->need) {
		*direct = true;
		dgi_free(p->voters);
		dgi_free(p->got);
		dgi_free(p);
		return NULL;
	}
	p->refs = 1; /* m->prop's */
	p->state = PROP_PENDING;
	p->sending = true;
	p->cur = hold(cur);
	p->t = hold(t);
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

/* Decides p when it can be (mu held): DONE installs its version (*old: the
 * one replaced, *installed set), ABANDONED leaves it.  Returns the new
 * state (PROP_PENDING: not yet). */
/* What prop_finish logs, read under m->mu (votes still arriving change
 * the counts). */
struct tally {
	uint32_t granted, answered;
	int64_t refused_above;
};

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
	bool won = p->granted >= p->need;
	if (!won && (p->sending || p->answered < p->sent))
		return PROP_PENDING;
	if (won && m->topo == p->cur && m->joined && !m->stopping) {
		bool taken;
		*old = install_locked(m, hold(p->t), &taken);
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

/* After prop_decide_locked, outside mu: broadcast, log, answer. */
static void prop_finish(dg_member *m, struct prop *p, int state, dg_topology *old, bool inst,
    const struct tally *tl)
{
	if (state == PROP_PENDING)
		return;
	if (state == PROP_DONE) {
		if (inst)
			installed(m, old, p->t);
		broadcast(m, p->t);
		dgi_log("info", "TOPOLOGY-AGREED", "version=%lld votes=%u of=%u took_ms=%llu",
		    (long long)p->t->version, tl->granted, p->nvoters,
		    (unsigned long long)(dgi_now_ms() - p->started));
	} else {
		uint32_t sup;
		if (dgi_lograte_due(&m->lr_agree, dgi_now_ms(), 1000, &sup))
			dgi_log("warn", "TOPOLOGY-NOT-AGREED", "version=%lld votes=%u need=%u of=%u "
			    "answered=%u refused_above=%lld dropped=%u node=%016llx repeated=%u",
			    (long long)p->t->version, tl->granted, p->need, p->nvoters, tl->answered,
			    (long long)tl->refused_above, p->ndrop, (unsigned long long)p->drop_hint, sup);
	}
	if (p->kind == DG_MSG_JOIN) {
		if (state == PROP_DONE) {
			const dg_topology_node *j = dg_topology_find(p->t, p->joiner);
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
			dg_tp_reply_error(m->tp, &p->req, DG_ERR_NOT_READY);
		}
	} else if (p->kind == DG_MSG_BASELINE) {
		if (state == PROP_DONE) {
			struct change ch = { .op = 0, .version = p->t->version, .changed = true };
			log_baseline(m, &ch);
			dg_msg_baseline_ack ack = { p->t->version, 1 };
			dg_tp_reply(m->tp, &p->req, DG_MSG_BASELINE_ACK, &ack);
		} else {
			dg_tp_reply_error(m->tp, &p->req, DG_ERR_NOT_READY);
		}
	}
	if (!inst)
		dg_topology_release(old); /* (installed() released it) */
}

static void vote_done(void *ctx, dg_err err, const dg_msg_in *reply)
{
	struct vote *v = ctx;
	dg_member *m = v->m;
	struct prop *p = v->p;
	const dg_msg_topo_vote *r = err == DG_OK ? reply->body : NULL;
	dg_topology *old;
	bool inst;
	pthread_mutex_lock(&m->mu);
	p->answered++;
	if (r != NULL && r->granted == 1) {
		if (v->idx >= 0 && !p->got[v->idx]) {
			p->got[v->idx] = true;
			p->granted++;
		}
	} else if (r != NULL && r->version > p->refused_above) {
		p->refused_above = r->version;
	}
	struct tally tl;
	int st = prop_decide_locked(m, p, &old, &inst, &tl);
	pthread_mutex_unlock(&m->mu);
	prop_finish(m, p, st, old, inst, &tl);
	prop_release(m, p);
	member_put(m);
	dgi_free(v);
}

/* Sends p's TOPO_PROPOSE to every voter of its base (but the nodes it
 * drops, silent by now), then decides what the sends alone decide (every
 * one failed at once).  Outside mu; holds a reference to p meanwhile. */
static void prop_send(dg_member *m, struct prop *p, const struct change *ch)
{
	dg_buf b;
	dg_buf_init(&b);
	dg_err e = topo_encode_reg(m, p->t, &b);
	dg_msg_topo_propose body = { p->cur->version, { b.data, (uint32_t)b.len } };
	uint32_t ft = atomic_load_explicit(&m->ft_ms, memory_order_relaxed);
	uint32_t timeout = ft / 2 > 100 ? ft / 2 : 100;
	for (uint32_t i = 0; e == DG_OK && i < p->cur->count; i++) {
		const dg_topology_node *n = &p->cur->nodes[i];
		int32_t idx = dgi_quorum_index(p->voters, p->nvoters, n->url);
		bool dropped = false;
		for (size_t k = 0; k < ch->ndrop; k++)
			dropped |= ch->drop[k] == n->id;
		if (idx < 0 || dropped || n->id == dg_tp_self(m->tp))
			continue;
		pthread_mutex_lock(&m->mu); /* (answers to earlier sends write it) */
		bool got = p->got[idx];
		pthread_mutex_unlock(&m->mu);
		if (got)
			continue;
		struct vote *v = dgi_alloc(sizeof(*v));
		if (v == NULL)
			break;
		v->m = member_get(m);
		v->p = p;
		v->idx = idx;
		pthread_mutex_lock(&m->mu);
		p->refs++;
		p->sent++;
		pthread_mutex_unlock(&m->mu);
		if (dg_tp_request(m->tp, n->id, DG_MSG_TOPO_PROPOSE, &body, timeout, vote_done, v) != DG_OK)
			vote_done(v, DG_ERR_UNREACHABLE, NULL);
	}
	dg_buf_free(&b);
	dg_topology *old;
	bool inst;
	pthread_mutex_lock(&m->mu);
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
static dg_err change_apply(dg_member *m, struct change *ch)
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
	bl_of(bl, cur);
	ch->version = cur->version;
	if (ch->rebase &&
	    (ch->why = bl_apply(bl, nodes, n, ch->op, ch->addrs, ch->naddrs, majority(m))) != NULL) {
		pthread_mutex_unlock(&m->mu);
		dgi_free(bl);
		return DG_ERR_INVAL;
	}
	bool bits = standby_bits(bl, nodes, n);
	ch->changed = ch->add != NULL || n != cur->count || bits || !bl_same(bl, cur) ||
	    ch->force;
	dg_topology *t = NULL, *old = NULL;
	struct prop *p = NULL;
	bool taken = false, direct = true;
	if (ch->changed) {
		int64_t next = cur->version + 1;
		if (m->vote_floor >= next && m->vote_floor < INT64_MAX / 2)
			next = m->vote_floor + 1; /* a voter accepted that one already */
		if (ch->add != NULL && ch->add->floor >= next && ch->add->floor < INT64_MAX / 2)
			next = ch->add->floor + 1;
		if (ch->force && ch->floor >= next && ch->floor < INT64_MAX / 2)
			next = ch->floor + 1;
		t = topo_new(next, nodes, n, bl);
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
			hold(t);
			old = install_locked(m, t, &taken);
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
		prop_send(m, p, ch);
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
		int st = p->state;
		pthread_mutex_unlock(&m->mu);
		prop_release(m, p);
		return st == PROP_DONE ? DG_OK : DG_ERR_NOT_READY;
	}
	if (t == NULL || !taken) {
		dg_topology_release(t);
		return DG_ERR_NOMEM;
	}
	ch->version = t->version;
	installed(m, old, t);
	broadcast(m, t);
	dg_topology_release(t);
	return DG_OK;
}

/* change_apply for joins and removals. */
static dg_err change(dg_member *m, const dg_node_id *drop, size_t ndrop,
    const dg_msg_join *add, int64_t *version, int64_t *order)
{
	struct change ch = { .drop = drop, .ndrop = ndrop, .add = add };
	dg_err e = change_apply(m, &ch);
	if (e == DG_OK && version)
		*version = ch.version;
	if (e == DG_OK && order)
		*order = ch.order;
	return e;
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
static void forward(dg_member *m, const dg_msg_in *in, dg_node_id coord, uint32_t timeout_ms)
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
		pthread_mutex_unlock(&m->mu);
		dg_tp_reply_error(tp, in, DG_ERR_STATE);
		return;
	}
	dg_node_id coord = dgi_member_coordinator_locked(m, dgi_now_ms());
	const dg_topology_node *have = dg_topology_find(m->topo, (dg_node_id)j->node_id);
	dg_msg_join_ack ack = { m->topo->version, have ? have->order : 0,
		atomic_load_explicit(&m->ft_ms, memory_order_relaxed),
		atomic_load_explicit(&m->hb_ms, memory_order_relaxed) };
	dg_topology *cur = have != NULL ? hold(m->topo) : NULL;
	pthread_mutex_unlock(&m->mu);
	if (coord != dg_tp_self(tp)) {
		dg_topology_release(cur);
		/* bounded like the joiner's own attempt: it asks again (through
		 * this seed or another) rather than wait on a dead coordinator */
		forward(m, in, coord, JOIN_ATTEMPT_MS);
		return;
	}
	if (cur != NULL) {
		/* a JOIN again from a member: it asks because the TOPOLOGY that
		 * added it did not reach it (or the ack did not) — send it again */
		topo_send(m, cur, (dg_node_id)j->node_id);
		dg_topology_release(cur);
	}
	if (have == NULL) {
		struct change ch = { .add = j, .req = in, .join_ack = ack };
		dg_err e = change_apply(m, &ch);
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
	} else if (j->floor >= ack.topology_version) {
		/* a member rejoining (PROTOCOL.md, "A paused node") that was
		 * told it is out by a version this coordinator has not seen:
		 * a version above that one puts it, and everyone, on this
		 * topology (it would wait for one forever otherwise) */
		struct change ch = { .force = true, .floor = j->floor, .req = in, .join_ack = ack };
		dg_err e = change_apply(m, &ch);
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
		install(m, t);
	else
		dgi_log("warn", "TOPOLOGY-BAD", "from=%016llx", (unsigned long long)in->from);
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
	dg_err e = change_apply(m, &ch);
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

static void on_baseline(dg_tp *tp, const dg_msg_in *in, void *ctx)
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
		forward(m, in, coord, m->cfg.join_timeout_ms);
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

/* Tells `to`, which sent a membership message though it is not in t (and
 * t is not older than its topology), that it is out: REMOVED carries t. */
static void tell_removed(dg_member *m, dg_node_id to, const dg_topology *t, int64_t theirs)
{
	dg_buf b;
	dg_buf_init(&b);
	if (topo_encode_reg(m, t, &b) == DG_OK) {
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

static void on_heartbeat(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	/* arriving is the point (the transport noted when), except for a node
	 * this one has not in its topology, or when it was paused itself */
	dg_member *m = ctx;
	const dg_msg_heartbeat *hb = in->body;
	(void)tp;
	uint64_t now = dgi_now_ms();
	pthread_mutex_lock(&m->mu);
	bool member = m->topo != NULL && dg_topology_find(m->topo, in->from) != NULL;
	struct since *s = member ? since_of(m, in->from) : NULL;
	bool answer = false;
	dg_topology *behind = NULL;
	int64_t version = m->topo != NULL ? m->topo->version : 0;
	if (s != NULL) {
		/* the lease: it heard this node's heartbeat of echo_ms */
		s->echo = hb->time_ms;
		if (hb->echo_ms > 0 && (uint64_t)hb->echo_ms > s->acked &&
		    (uint64_t)hb->echo_ms <= now) {
			s->acked = (uint64_t)hb->echo_ms;
			dgi_member_lease_locked(m);
		}
		answer = (hb->flags & DG_HB_ANSWER) && m->joined && !m->stopping;
		if (m->joined && !m->stopping && hb->topology_version < version &&
		    now >= s->resent_ms + 1000) {
			/* a member behind (the TOPOLOGY was lost, or it was cut
			 * off): this one again, at most once a second */
			s->resent_ms = now;
			behind = hold(m->topo);
		}
	}
	dg_topology *t = NULL;
	if (m->topo != NULL && m->joined && !m->stopping && !member &&
	    hb->topology_version <= m->topo->version)
		t = hold(m->topo); /* its sender was removed (a newer version: it joined) */
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
	}
	if (behind != NULL) {
		topo_send(m, behind, in->from);
		dg_topology_release(behind);
	}
}

/* REMOVED: a member of a newer topology says this node is not in it. */
static void on_removed(dg_tp *tp, const dg_msg_in *in, void *ctx)
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
	install(m, t); /* drops out (NODE-REMOVED-SELF); the thread rejoins */
}

static void on_node_failed(dg_tp *tp, const dg_msg_in *in, void *ctx)
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
		change(m, &id, 1, NULL, NULL, NULL);
	} else if (resync) {
		dgi_log("warn", "TOPOLOGY-RESYNC", "reported_by=%016llx node=%016llx "
		    "their_version=%lld version=%lld", (unsigned long long)in->from,
		    (unsigned long long)id, (long long)f->topology_version, (long long)mine);
		struct change ch = { .force = true, .floor = f->topology_version };
		change_apply(m, &ch);
	}
}

static void on_leave(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	dg_member *m = ctx;
	(void)tp;
	pthread_mutex_lock(&m->mu);
	struct since *s = since_of(m, in->from);
	if (s != NULL)
		s->left = true;
	pthread_cond_broadcast(&m->cv); /* the thread acts on it now */
	pthread_mutex_unlock(&m->mu);
	dgi_log("info", "NODE-LEFT", "node=%016llx", (unsigned long long)in->from);
}

/* ---- joining ---- */

static bool wait_version(dg_member *m, int64_t version, uint64_t deadline)
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
			if (wait_version(m, ack.topology_version, until))
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
static dg_err join(dg_member *m)
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
		if (e == DG_ERR_UNREACHABLE) {
			/* no seed is in a cluster, none smaller is waiting: form one */
			dg_topology_node self = { dg_tp_self(m->tp), 1, dg_tp_address(m->tp),
				m->cfg.attrs & ~DG_NODE_STANDBY };
			struct bl *b = dgi_alloc(sizeof(*b));
			dg_topology *t = b == NULL ? NULL : topo_new(m->cfg.version_floor > 0 ?
			    m->cfg.version_floor + 1 : 1, &self, 1, bl_formed(m, b));
			dgi_free(b);
			if (t == NULL)
				return DG_ERR_NOMEM;
			install(m, t);
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
		a[i] = str_of(addrs[i]);
	pthread_mutex_lock(&m->mu);
	if (e == DG_OK && (m->topo == NULL || !m->joined)) {
		*why = "not in a cluster";
		e = DG_ERR_STATE;
	}
	if (e == DG_OK) {
		bl_of(b, m->topo);
		*why = bl_apply(b, m->topo->nodes, m->topo->count, op, a, (uint32_t)n, majority(m));
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
		a[i] = str_of(addrs[i]);
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
	if (e == DG_OK && !wait_version(m, ack.topology_version, deadline))
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
	dg_topology *t = hold(m->topo);
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
	for (uint32_t i = 0; i < t->count && nfailed < 64 && !segmented; i++)
		if (failed_locked(m, &t->nodes[i], now))
			failed[nfailed++] = t->nodes[i].id;
	/* (a voter that left votes for its removal: not one of those) */
	dg_node_id silent[64];
	size_t nsilent = 0;
	for (size_t k = 0; k < nfailed; k++) {
		struct since *fs = since_of(m, failed[k]);
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
	int64_t *echo = dgi_calloc(t->count ? t->count : 1, sizeof(*echo));
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
	dgi_free(echo);
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
				struct since *s = since_of(m, failed[k]);
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
			for (size_t k = 0; k < nfailed; k++)
				set ^= (failed[k] + 0x9E3779B97F4A7C15ull) * 0xBF58476D1CE4E5B9ull;
			pthread_mutex_lock(&m->mu);
			bool due = set != m->fail_set || now >= m->fail_retry_ms;
			if (due) {
				m->fail_set = set;
				m->fail_retry_ms = now + atomic_load_explicit(&m->hb_ms, memory_order_relaxed);
			}
			pthread_mutex_unlock(&m->mu);
			if (due)
				change(m, failed, nfailed, NULL, NULL, NULL);
		} else {
			for (size_t k = 0; k < nfailed; k++) {
				pthread_mutex_lock(&m->mu);
				struct since *s = since_of(m, failed[k]);
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

/* Dropped out of the cluster's topology (REMOVED, or a TOPOLOGY without
 * this node): join again, as a new member, through the seeds and the
 * members of that topology, until it works or the node stops.  The new
 * version is above the one that left it out.  When no candidate could be
 * reached for join_timeout_ms (every other node gone), it forms a cluster
 * of its own, as a starting node would. */
static void *typesync_thread(void *arg)
{
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

static void rejoin(dg_member *m)
{
	dg_topology *t = dg_member_topology(m);
	size_t n = 0, cap = m->cfg.nseeds + (t != NULL ? t->count : 0);
	char **urls = dgi_calloc(cap ? cap : 1, sizeof(char *));
	for (size_t i = 0; urls != NULL && i < m->cfg.nseeds; i++)
		urls[n++] = m->seeds[i];
	for (uint32_t i = 0; urls != NULL && t != NULL && i < t->count; i++)
		if (t->nodes[i].id != dg_tp_self(m->tp))
			urls[n++] = (char *)t->nodes[i].url; /* t is held until the end */
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
			backoff = DGI_BACKOFF_MIN_MS;
		} else if (majority(m)) {
			/* never a cluster of its own: the majority is somewhere
			 * (a partition heals); ask again, backing off to 2 s */
			backoff = dgi_backoff_next(backoff);
		} else if (now - reached >= m->cfg.join_timeout_ms) {
			dg_topology_node self = { dg_tp_self(m->tp), 1, dg_tp_address(m->tp),
				m->cfg.attrs & ~DG_NODE_STANDBY };
			dg_topology *own = topo_new(m->cfg.version_floor + 1, &self, 1, NULL);
			if (own != NULL) {
				install(m, own);
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

static void *member_thread(void *arg)
{
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
		if (again)
			rejoin(m);
		else
			tick(m);
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
	atomic_init(&m->hb_ms, m->cfg.heartbeat_ms);
	if (m->cfg.join_timeout_ms == 0)
		m->cfg.join_timeout_ms = 10000;
	pthread_mutex_init(&m->mu, NULL);
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
	dg_tp_handle(tp, DG_MSG_JOIN, on_join, m);
	dg_tp_handle(tp, DG_MSG_TOPOLOGY, on_topology, m);
	dg_tp_handle(tp, DG_MSG_HEARTBEAT, on_heartbeat, m);
	dg_tp_handle(tp, DG_MSG_NODE_FAILED, on_node_failed, m);
	dg_tp_handle(tp, DG_MSG_LEAVE, on_leave, m);
	dg_tp_handle(tp, DG_MSG_TYPE_PROPOSE, dgi_member_on_type_propose, m);
	dg_tp_handle(tp, DG_MSG_TYPE_ANNOUNCE, dgi_member_on_type_announce, m);
	dg_tp_handle(tp, DG_MSG_TYPES_SNAPSHOT, dgi_member_on_types_snapshot, m);
	dg_tp_handle(tp, DG_MSG_BASELINE, on_baseline, m);
	dg_tp_handle(tp, DG_MSG_REMOVED, on_removed, m);
	dg_tp_handle(tp, DG_MSG_TOPO_PROPOSE, dgi_member_on_topo_propose, m);
	dg_registry_set_hook(m->reg, dgi_member_propose, m);
	if (pthread_create(&m->notifier, NULL, notifier_thread, m) != 0) {
		dg_member_stop(m);
		return DG_ERR_NOMEM;
	}
	m->notifier_started = true;
	dg_err e = join(m);
	pthread_mutex_lock(&m->mu);
	m->tick_ms = dgi_now_ms();
	pthread_mutex_unlock(&m->mu);
	if (e == DG_OK && pthread_create(&m->thread, NULL, member_thread, m) != 0)
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
	dgi_free(m->voters);
	dgi_free(m->vidx);
	dgi_free(m->vvals);
	if (m->prop != NULL && --m->prop->refs == 0) {
		dg_topology_release(m->prop->cur);
		dg_topology_release(m->prop->t);
		dgi_free(m->prop->voters);
		dgi_free(m->prop->got);
		dgi_free(m->prop);
	}
	pthread_cond_destroy(&m->ncv);
	pthread_cond_destroy(&m->cv);
	pthread_mutex_destroy(&m->mu);
	dgi_free(m);
}
