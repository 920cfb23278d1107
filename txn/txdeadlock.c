/*
 * txdeadlock.c — deadlocks: the victims being released (their waits
 * answer DG_ERR_DEADLOCK, or DG_ERR_TX_ROLLED_BACK for an operator's
 * kill), a cycle through a new waiter in this node's wait-for graph, and
 * cycles across nodes — every node's edges (TX_EDGES), the victim killed
 * everywhere (TX_KILL).
 */
#include "txsvc_int.h"

#include <stdio.h>

/* ---- victims, and cycles on this node ---- */

/* What a wait of tx cancelled (the lock table's DG_ERR_CLOSED) answers —
 * never DG_ERR_CLOSED, which would tell the near node its own node is
 * closing: DG_ERR_DEADLOCK or DG_ERR_TX_ROLLED_BACK while tx is being
 * killed; DG_ERR_NOT_READY while this service stops (the near maps the key
 * again); else DG_ERR_TX_ROLLED_BACK — its record here was ended (the
 * topology fence, expiry, recovery, a rollback) and its locks released. */
dg_err dgi_svc_victim_err(dgi_txsvc *s, const dgi_txid *tx, dg_err err)
{
	if (err != DG_ERR_CLOSED)
		return err;
	err = atomic_load(&s->stopping) ? DG_ERR_NOT_READY : DG_ERR_TX_ROLLED_BACK;
	pthread_mutex_lock(&s->mu);
	for (int i = 0; i < s->nvictims; i++)
		if (dgi_txid_eq(&s->victims[i], tx)) {
			err = s->victim_err[i];
			break;
		}
	pthread_mutex_unlock(&s->mu);
	return err;
}

/* Releases a victim here — of a deadlock (why DG_ERR_DEADLOCK) or of an
 * operator's kill (DG_ERR_TX_ROLLED_BACK): its waits answer why.  An
 * operator's victim is also remembered as rolled back, so a lock request
 * of it still on the way is refused instead of waiting (its near node
 * decided: it will never commit). */
static void kill_victim(dgi_txsvc *s, const dgi_txid *victim, dg_err why)
{
	/* its near node: a lock granted before the kill reached its primary
	 * (the winner committed and released meanwhile), then released by
	 * it, must not make the victim's commit say only "rolled back" */
	if (why == DG_ERR_DEADLOCK && victim->node == s->self)
		(void)dgi_tx_near_victim(s, victim->seq);
	pthread_mutex_lock(&s->mu);
	/* A victim that prepared here, or is being committed (a takeover),
	 * waits for nothing here any more — the cycle was seen in a snapshot
	 * of edges taken before it moved on — and may already be decided:
	 * releasing its locks would let another tx write under its commit.
	 * So does one still PREPARING that holds every lock it asked for
	 * (waiting 0): its checks are made or being made, and it goes on to
	 * PREPARED (or, one phase, commits) whatever its locks — released,
	 * another tx locked the keys, checked the same versions and both
	 * committed, one write lost (txn_bank_kill9: two OPTIMISTIC
	 * SERIALIZABLE transfers read one balance and both committed;
	 * test_killed_victim_keeps_prepared_locks).  Leave it; where it still
	 * waits, it is killed. */
	struct rec *b0 = s->buckets[dgi_txid_hash(victim) & (NBUCKETS - 1)];
	for (struct rec *r = b0; r != NULL; r = r->next)
		if (dgi_txid_eq(&r->id, victim) && (r->role == ROLE_TAKEOVER ||
		    (r->role == ROLE_PRIMARY && (r->st == R_PREPARED || r->st == R_COMMITTING ||
		    (r->st == R_PREPARING && r->waiting == 0))))) {
			pthread_mutex_unlock(&s->mu);
			return;
		}
	/* Marked, under the lock its prepare counts its grants under: a
	 * prepare that had checked it still held its locks (a PESSIMISTIC
	 * one, locked here before) and takes them again as they are freed
	 * below fails when its last grant is counted (lock_counted), as one
	 * still waiting fails by the victims list (test_killed_victim_fails_
	 * its_prepare). */
	for (struct rec *r = b0; r != NULL; r = r->next)
		if (dgi_txid_eq(&r->id, victim) && r->role == ROLE_PRIMARY && r->killed == DG_OK)
			r->killed = why;
	bool room = s->nvictims < (int)(sizeof(s->victims) / sizeof(s->victims[0]));
	if (room) {
		s->victim_err[s->nvictims] = why;
		s->victims[s->nvictims++] = *victim;
	}
	if (why == DG_ERR_TX_ROLLED_BACK)
		dgi_txdone_put(s->done, victim, DGI_TXS_ROLLED_BACK, dgi_now_ms());
	pthread_mutex_unlock(&s->mu);
	dgi_lock_release_all(s->locks, victim);
	pthread_mutex_lock(&s->mu);
	for (int i = 0; room && i < s->nvictims; i++)
		if (dgi_txid_eq(&s->victims[i], victim)) {
			s->victims[i] = s->victims[--s->nvictims];
			break;
		}
	pthread_mutex_unlock(&s->mu);
	if (why == DG_ERR_DEADLOCK)
		atomic_fetch_add_explicit(&s->deadlocks, 1, memory_order_relaxed);
}

/* "tx(waits cache=.. key=..),tx(...)" for a cycle, from edges (each at
 * `stride` bytes from the previous, a dgi_lock_edge first). */
static void format_cycle(char *msg, size_t cap, const dgi_txid *cycle, size_t cn,
    const void *edges, size_t n, size_t stride)
{
	size_t off = 0;
	msg[0] = 0;
	for (size_t k = 0; k < cn && off + 120 < cap; k++) {
		const dgi_txid *w = &cycle[k], *o = &cycle[(k + 1) % cn];
		off += (size_t)snprintf(msg + off, cap - off, "%s%016llx:%llu", k ? "," : "",
		    (unsigned long long)w->node, (unsigned long long)w->seq);
		for (size_t j = 0; j < n; j++) {
			const dgi_lock_edge *e = (const dgi_lock_edge *)((const char *)edges + j * stride);
			if (!dgi_txid_eq(&e->waiter, w) || !dgi_txid_eq(&e->owner, o))
				continue;
			off += (size_t)snprintf(msg + off, cap - off, "(waits cache=%08x key=",
			    e->cache_id);
			uint32_t kl = e->klen < sizeof(e->key) ? e->klen : (uint32_t)sizeof(e->key);
			for (uint32_t q = 0; q < kl && off + 4 < cap; q++)
				off += (size_t)snprintf(msg + off, cap - off, "%02x", e->key[q]);
			off += (size_t)snprintf(msg + off, cap - off, ")");
			break;
		}
	}
}

/* tx just started waiting: a cycle through it in this node's wait-for
 * graph is a deadlock; its youngest member is the victim. */
void dgi_svc_check_deadlock(dgi_txsvc *s, const dgi_txid *tx)
{
	dgi_txid cycle[16], victim = { 0, 0 };
	size_t n = 0;
	pthread_mutex_lock(&s->mu);
	/* s->ecap counts pairs; s->edges holds 2 ids a pair */
	size_t ne = dgi_locks_edges(s->locks, s->edges, s->ecap);
	if (ne > s->ecap) {
		size_t cap = ne * 2 + 32;
		dgi_txid *e = dgi_realloc(s->edges, cap * 2 * sizeof(*e));
		if (e != NULL) {
			s->edges = e;
			s->ecap = cap;
			ne = dgi_locks_edges(s->locks, s->edges, s->ecap);
		}
	}
	if (ne <= s->ecap) {
		dgi_wfg_reset(s->wfg);
		for (size_t i = 0; i < ne; i++) {
			const dgi_txid *a = &s->edges[2 * i], *b = &s->edges[2 * i + 1];
			dgi_wfg_add(s->wfg, a, (uint64_t)dgi_svc_start_of(s, a), b, (uint64_t)dgi_svc_start_of(s, b));
		}
		n = dgi_wfg_cycle(s->wfg, tx, cycle, sizeof(cycle) / sizeof(cycle[0]));
		if (n > sizeof(cycle) / sizeof(cycle[0]))
			n = sizeof(cycle) / sizeof(cycle[0]);
		if (n > 0)
			victim = dgi_wfg_victim(s->wfg, cycle, n);
	}
	if (n == 0)
		dgi_svc_dl_arm(s, 20); /* the cycle may span nodes: look there soon */
	pthread_mutex_unlock(&s->mu);
	if (n == 0)
		return;
	dgi_lock_edge ed[64];
	size_t ne2 = dgi_locks_edge_list(s->locks, ed, 64);
	char msg[1024];
	format_cycle(msg, sizeof(msg), cycle, n, ed, ne2 < 64 ? ne2 : 64, sizeof(ed[0]));
	dgi_log("warn", "TX-DEADLOCK", "scope=node txs=%s victim=%016llx:%llu", msg,
	    (unsigned long long)victim.node, (unsigned long long)victim.seq);
	kill_victim(s, &victim, DG_ERR_DEADLOCK);
}

/* ---- deadlocks across nodes ----
 * A wait that closes no cycle among this node's own edges may close one
 * through other primaries.  Shortly after it starts (20 ms, then every
 * 100 ms while requests wait here), this node gathers every node's
 * wait-for edges (TX_EDGES), searches the graph for a cycle through each
 * of its waiters and, finding one, kills its youngest tx everywhere
 * (TX_KILL): the victim's waits answer DG_ERR_DEADLOCK and its locks go;
 * the rest proceed.  Every detector picks the same victim of a cycle. */
#define EDGE_FIELDS 9

struct gedge {
	dgi_lock_edge e;
	int64_t wstart, ostart;
};

static dg_err encode_edges(dgi_txsvc *s, dg_buf *b)
{
	dgi_lock_edge ed[256];
	size_t n = dgi_locks_edge_list(s->locks, ed, 256);
	if (n > 256)
		n = 256;
	b->len = 0;
	dg_writer w;
	dg_writer_init(&w, dgi_txwire_registry(), b);
	dg_err e = dg_write_list_begin(&w, (uint32_t)(n * EDGE_FIELDS));
	for (size_t i = 0; i < n && e == DG_OK; i++) {
		pthread_mutex_lock(&s->mu);
		int64_t v[8] = { (int64_t)ed[i].waiter.node, (int64_t)ed[i].waiter.seq,
			dgi_svc_start_of(s, &ed[i].waiter), (int64_t)ed[i].owner.node, (int64_t)ed[i].owner.seq,
			dgi_svc_start_of(s, &ed[i].owner), ed[i].cache_id, ed[i].klen };
		pthread_mutex_unlock(&s->mu);
		e = dgi_svc_put_i64s(&w, v, 8);
		if (e == DG_OK)
			e = dg_write_bytes(&w, ed[i].key,
			    ed[i].klen < sizeof(ed[i].key) ? ed[i].klen : sizeof(ed[i].key));
	}
	return e != DG_OK ? e : dg_write_end(&w);
}

void dgi_svc_h_edges(dgi_txsvc *s, const dg_msg_in *in)
{
	dg_buf fb, *b = tl_buf(edges, &fb);
	if (encode_edges(s, b) != DG_OK) {
		dgi_svc_ack(s, in, DG_ERR_NOMEM, -1);
	} else {
		dg_msg_raw r = { { b->data, (uint32_t)b->len } };
		dgi_svc_reply(s, in, DGI_MSG_TX_EDGES_RES, &r);
	}
	dg_buf_free(&fb);
}

void dgi_svc_h_kill(dgi_txsvc *s, const dg_msg_in *in)
{
	const dgi_msg_tx_ctl *m = in->body;
	dgi_txid v = { (uint64_t)m->tx_node, (uint64_t)m->tx_seq };
	if (m->flags & DGI_TXK_NEAR) { /* an operator's kill, asked of the near node */
		dg_err e = v.node == s->self ? dgi_tx_near_kill(s, v.seq) : DG_ERR_NOT_FOUND;
		dgi_svc_ack(s, in, e, -1);
		return;
	}
	kill_victim(s, &v, m->flags & DGI_TXK_ADMIN ? DG_ERR_TX_ROLLED_BACK : DG_ERR_DEADLOCK);
}

void dgi_txsvc_kill(dgi_txsvc *s, const dgi_txid *tx, int64_t flags)
{
	dg_topology *t = dgi_svc_fence_topology(s);
	dgi_msg_tx_ctl kill = { (int64_t)tx->node, (int64_t)tx->seq, flags, 0, 0 };
	for (uint32_t j = 0; t != NULL && j < t->count; j++)
		if (t->nodes[j].id != s->self)
			dg_tp_send(s->tp, t->nodes[j].id, DGI_MSG_TX_KILL, &kill);
	if (t != NULL)
		dg_topology_release(t);
	kill_victim(s, tx, flags & DGI_TXK_ADMIN ? DG_ERR_TX_ROLLED_BACK : DG_ERR_DEADLOCK);
}

/* Appends the edges of an encoded list to *es. */
static void decode_edges(const uint8_t *p, uint32_t len, struct gedge **es, size_t *n,
    size_t *cap)
{
	dg_reader r;
	uint32_t count;
	dg_reader_init(&r, NULL, p, len);
	if (dg_read_begin(&r, DG_LIST, &count) != DG_OK || count % EDGE_FIELDS != 0)
		return;
	for (uint32_t i = 0; i < count / EDGE_FIELDS; i++) {
		int64_t v[8];
		dg_bytes k;
		if (dgi_svc_get_i64s(&r, v, 8) != DG_OK || dg_read_bytes(&r, &k, NULL) != DG_OK)
			return;
		if (*n == *cap) {
			size_t nc = *cap ? *cap * 2 : 64;
			struct gedge *ne = dgi_realloc(*es, nc * sizeof(*ne));
			if (ne == NULL)
				return;
			*es = ne;
			*cap = nc;
		}
		struct gedge *g = &(*es)[(*n)++];
		memset(g, 0, sizeof(*g));
		g->e.waiter = (dgi_txid){ (uint64_t)v[0], (uint64_t)v[1] };
		g->wstart = v[2];
		g->e.owner = (dgi_txid){ (uint64_t)v[3], (uint64_t)v[4] };
		g->ostart = v[5];
		g->e.cache_id = (uint32_t)v[6];
		g->e.klen = (uint32_t)v[7];
		if (k.ptr != NULL)
			memcpy(g->e.key, k.ptr, k.len < sizeof(g->e.key) ? k.len : sizeof(g->e.key));
	}
}

void dgi_svc_dl_arm(dgi_txsvc *s, uint64_t ms)
{
	if (s->dl_next != 0)
		return;
	s->dl_next = dgi_now_ms() + ms;
	pthread_cond_signal(&s->dl_cv); /* the detector sleeps until one is due */
}

void dgi_svc_deadlock_tick(dgi_txsvc *s)
{
	uint64_t now = dgi_now_ms();
	pthread_mutex_lock(&s->mu);
	bool due = s->dl_next != 0 && now >= s->dl_next;
	if (due)
		s->dl_next = 0;
	pthread_mutex_unlock(&s->mu);
	if (!due)
		return;
	dgi_locks_stats ls;
	dgi_locks_get_stats(s->locks, &ls);
	if (ls.waiters == 0)
		return;
	struct gedge *es = s->gedges; /* the detector thread's alone */
	size_t ecap = s->gecap;
	size_t n = 0, nlocal;
	dg_buf fb, *b = tl_buf(edges, &fb);
	if (encode_edges(s, b) == DG_OK)
		decode_edges(b->data, (uint32_t)b->len, &es, &n, &ecap);
	dg_buf_free(&fb);
	nlocal = n;
	dg_topology *t = dgi_svc_fence_topology(s);
	for (uint32_t i = 0; t != NULL && i < t->count; i++) {
		if (t->nodes[i].id == s->self)
			continue;
		dgi_msg_tx_ctl q = { 0, 0, 0, 0, 0 };
		dg_msg_raw r;
		static _Thread_local uint8_t mem[64 * 1024];
		dg_arena a;
		dg_arena_init(&a, mem, sizeof(mem));
		if (dg_tp_call(s->tp, t->nodes[i].id, DGI_MSG_TX_EDGES, &q, 500, &r, &a) == DG_OK &&
		    r.list.ptr != NULL)
			decode_edges(r.list.ptr, r.list.len, &es, &n, &ecap);
	}
	if (t != NULL)
		dg_topology_release(t);
	s->gedges = es;
	s->gecap = ecap;
	dgi_wfg_reset(s->gwfg);
	for (size_t i = 0; i < n; i++)
		dgi_wfg_add(s->gwfg, &es[i].e.waiter, (uint64_t)es[i].wstart, &es[i].e.owner,
		    (uint64_t)es[i].ostart);
	for (size_t i = 0; i < nlocal; i++) {
		dgi_txid cycle[16];
		size_t cn = dgi_wfg_cycle(s->gwfg, &es[i].e.waiter, cycle, 16);
		if (cn == 0)
			continue;
		if (cn > 16)
			cn = 16;
		dgi_txid victim = dgi_wfg_victim(s->gwfg, cycle, cn);
		/* name the transactions and the keys they wait for */
		char msg[1024];
		format_cycle(msg, sizeof(msg), cycle, cn, es, n, sizeof(es[0]));
		dgi_log("warn", "TX-DEADLOCK", "scope=cluster txs=%s victim=%016llx:%llu",
		    msg, (unsigned long long)victim.node, (unsigned long long)victim.seq);
		atomic_fetch_add(&s->global_deadlocks, 1);
		dgi_txsvc_kill(s, &victim, 0);
		break; /* one victim a round: the next round sees what is left */
	}
	dgi_locks_get_stats(s->locks, &ls);
	pthread_mutex_lock(&s->mu);
	if (ls.waiters > 0)
		dgi_svc_dl_arm(s, 100);
	pthread_mutex_unlock(&s->mu);
}
