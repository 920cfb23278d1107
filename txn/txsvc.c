/*
 * txsvc.c — the transaction service of a node: the lock service (TX_LOCK,
 * deadlines, deadlock detection when a request starts waiting), the
 * participant side of two-phase commit (TX_PREPARE, TX_COMMIT,
 * TX_ROLLBACK, TX_COMMIT_COPY) and the local dispatch of requests a node
 * sends itself.  See txsvc.h.
 *
 * Participant records.  Every tx that holds locks or prepared entries on
 * this node has one record in an int-keyed table by tx id (chained, 1024
 * buckets; no boxing): its state, deadline, the PREPARE body's bytes (the
 * entries; one allocation), the backups it was forwarded to and the
 * request waiting for an answer.  Records come from a free list (a record
 * whose body fits its inline buffer allocates nothing in steady state).
 * A finished tx's outcome goes to txdone (late or repeated messages).
 *
 * Locking.  s->mu guards the record table and records.  dgi_lock_* calls
 * and anything that may run a lock callback are made without s->mu; sends
 * and replies may be made under it (they never call back into this
 * service, except a local reply, which only wakes the near side).
 */
#include "txsvc.h"
#include "marshal/mix.h"
#include "txentries.h"
#include "wfg.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NBUCKETS 1024
#define LOCAL_SLOTS 512
#define REC_INLINE 768         /* PREPARE bodies up to this live in the record */

/* A set of node ids: the nodes a tx's prepare and copies go to — every
 * owner of every partition it writes, so up to every node of the topology.
 * The usual few live inline; more grow on the heap (a tx across that many
 * nodes is rare), never dropped. */
#define NODESET_INLINE 16

struct nodeset {
	uint32_t n, cap;
	uint64_t *ids;              /* inl, or a heap array of cap */
	uint64_t inl[NODESET_INLINE];
};

static void ns_init(struct nodeset *ns)
{
	ns->n = 0;
	ns->cap = NODESET_INLINE;
	ns->ids = ns->inl;
}

static void ns_free(struct nodeset *ns)
{
	if (ns->ids != ns->inl)
		dgi_free(ns->ids);
	ns_init(ns);
}

/* Adds id unless there.  DG_ERR_NOMEM (unchanged) when it must grow and
 * cannot. */
static dg_err ns_add(struct nodeset *ns, uint64_t id)
{
	for (uint32_t i = 0; i < ns->n; i++)
		if (ns->ids[i] == id)
			return DG_OK;
	if (ns->n == ns->cap) {
		uint64_t *ids = dgi_alloc(2 * (size_t)ns->cap * sizeof(*ids));
		if (ids == NULL)
			return DG_ERR_NOMEM;
		memcpy(ids, ns->ids, ns->n * sizeof(*ids));
		if (ns->ids != ns->inl)
			dgi_free(ns->ids);
		ns->ids = ids;
		ns->cap *= 2;
	}
	ns->ids[ns->n++] = id;
	return DG_OK;
}

/* dst (initialised) takes src's ids; src is left empty. */
static void ns_move(struct nodeset *dst, struct nodeset *src)
{
	ns_free(dst);
	if (src->ids == src->inl) {
		memcpy(dst->inl, src->inl, src->n * sizeof(src->inl[0]));
	} else {
		dst->ids = src->ids;
		dst->cap = src->cap;
	}
	dst->n = src->n;
	ns_init(src);
}

struct start_slot {
	dgi_txid tx;                /* {0,0}: empty */
	int64_t start_ms;           /* -1: removed */
};

enum rec_state { R_ACTIVE = 1, R_PREPARING, R_PREPARED, R_COMMITTING, R_BACKUP };

/* A node may hold a tx in several roles at once: the primary of some of
 * its keys, a backup of others' (one record per primary it came from), and
 * the new primary finishing a left primary's keys (a takeover, one per
 * left primary).  Records are keyed by (tx id, role, from). */
enum rec_role { ROLE_PRIMARY = 0, ROLE_BACKUP, ROLE_TAKEOVER, ROLE_NEAR, ROLE_TAKEN };
/* ROLE_TAKEN keys no record, only a finished-tx entry: copies of a left
 * primary's entries came from the node that took them over, so the tx
 * committed, but they carry only the keys that node is now the primary of
 * — this node's backup record of the left primary (ended on them) held
 * others too, which the near still sends to their new primaries (maybe
 * this node): "applied here" is ROLE_BACKUP's entry alone, written when
 * the left primary's own copies arrived. */

struct rec {
	struct dgi_txsvc *s;
	struct rec *next;           /* bucket chain, or free list */
	dgi_txid id;
	int st;                     /* enum rec_state */
	int role;                   /* enum rec_role */
	int64_t start_ms, topver;
	uint64_t made_ms;           /* monotonic ms: when the record was made (dgctl) */
	uint64_t deadline;          /* monotonic ms; 0 none */
	int64_t flags;              /* DGI_TXP_* of the PREPARE */
	uint64_t from;              /* backup: the primary that sent it;
	                               takeover: the primary that left */
	int refs;                   /* callbacks still to come (lock waits, backup answers) */
	uint32_t waiting;           /* R_PREPARING: lock grants still to come (+1 while issuing) */
	uint32_t acks;              /* backup answers still to come */
	dg_err bfail;               /* the first backup answer that was not DG_OK */
	dg_err fail;
	int64_t fail_idx;
	bool have_req;              /* req waits for an answer */
	bool dead;                  /* out of the table; freed when refs drops to 0 */
	dg_msg_in req;
	struct nodeset bk;          /* nodes the prepare (or commit) went to */
	uint8_t *body;              /* PREPARE body bytes (inline or heap) */
	uint32_t blen;
	uint8_t inl[REC_INLINE];
};

/* The owners a primary sends copies to, and their digest (backup_agrees). */
struct targets {
	struct nodeset bk;
	uint64_t digest;            /* owners_of's, over the entries added */
	int64_t topver;             /* the lowest affinity version among them */
};

static void targets_init(struct targets *t)
{
	ns_init(&t->bk);
	t->digest = 0;
	t->topver = 0;
}

static void targets_free(struct targets *t)
{
	ns_free(&t->bk);
}

struct local_slot {
	uint64_t id;                /* 0: free */
	dg_reply_fn cb;
	void *ctx;
	uint64_t deadline;
};

typedef void (*handler_fn)(dgi_txsvc *s, const dg_msg_in *in);

/* Reports of versions this node has not installed yet, kept until it does
 * (one per node of a topology; past that they are dropped — a node repeats
 * its report every 300 ms while its fence is shut, so a dropped one only
 * comes later). */
#define FENCE_EARLY DG_TOPOLOGY_MAX

/* The fence holds the topology itself (a reference): every node of it
 * takes part, however many (a topology has up to DG_TOPOLOGY_MAX nodes) —
 * none is left out of the fence, or taken for gone by recovery. */
struct fence {                  /* guarded by dgi_txsvc.fmu */
	int64_t v;                  /* the latest topology installed (0: none) */
	dg_topology *t;             /* that topology (held), or NULL */
	bool got[DG_TOPOLOGY_MAX];  /* t->nodes[i]'s TX_FENCE(v) arrived */
	bool open;                  /* every one arrived */
	bool reported;              /* this node sent its own */
	uint64_t started_ms, sent_ms, logged_ms;
	uint32_t nearly;
	struct { int64_t v; uint64_t from; } early[FENCE_EARLY];  /* reports ahead of v */
	uint32_t nnear;
	struct { int64_t v; uint32_t n; } near[32];  /* near commits in flight, by version */
};

struct dgi_txsvc {
	dg_tp *tp;
	dgi_grid *g;
	uint64_t self;
	dgi_locks *locks;
	dgi_txdone *done;
	pthread_mutex_t mu;         /* starts, wfg, edges, victims, records */
	struct start_slot *starts;
	struct start_slot *starts_spare;  /* scap slots: a rehash at the same size */
	uint32_t scap, sused;       /* sused counts removed slots too */
	dgi_wfg *wfg;
	dgi_txid *edges;
	size_t ecap;
	dgi_txid victims[8];        /* being released as deadlock (or operator) victims */
	dg_err victim_err[8];       /* what their waits answer */
	int nvictims;
	struct rec *buckets[NBUCKETS];
	uint64_t incarn;            /* s->mu: bumped as every record is forgotten
	                               (this node left the topology or rejoined it) */
	struct rec *free_recs;
	uint32_t nrecs, nfree;
	struct waiter *free_waiters; /* s->mu */
	uint32_t nfree_waiters;
	pthread_mutex_t lmu;        /* local requests */
	struct local_slot local[LOCAL_SLOTS];
	uint64_t local_gen;
	pthread_mutex_t fmu;        /* fence */
	struct fence f;
	uint32_t fence_timeout_ms;
	uint64_t blocked_logged_ms;  /* the expirer's */
	_Atomic bool fenced;        /* joined: grants wait for the fence (read by
	                               handlers that may run before joined) */
	_Atomic(struct dg_member *) m;  /* joined: its membership (this node's pauses) */
	_Atomic uint64_t stale_logged_ms;  /* TX-STALE-REFUSED: once a second */
	_Atomic uint32_t stale_refused;    /* ... with the count since */
	_Atomic uint64_t fence_rollbacks;
	uint64_t dl_next;           /* s->mu: when to look for cycles across nodes (0: no wait) */
	dgi_wfg *gwfg;              /* the detector's: edges of every node */
	struct gedge *gedges;       /* the detector's: their list */
	size_t gecap;
	_Atomic uint64_t global_deadlocks;
	/* Three threads: the expirer (deadlines, the fence), the detector
	 * (deadlocks across nodes: asks every node for its edges, 500 ms at
	 * most each) and the recoverer (recovery's questions, 2 s each: a
	 * round can take tens of seconds after a failure, which must not hold
	 * deadlock detection up). */
	pthread_t expirer, detector, recoverer;
	bool expirer_up, detector_up, recoverer_up;
	_Atomic uint64_t recovered_commit, recovered_rollback;
	_Atomic bool stopping;
	_Atomic uint64_t granted, waited, timeouts, deadlocks, unlocks;
	_Atomic uint64_t prepared, committed, rolled_back, conflicts;
	_Atomic uint64_t backup_prepared, backup_committed;
	dgi_txnear_stats near;
	dgi_txnear_live live;
};

#define WAITER_KEY 120          /* keys up to this size fit a pooled waiter */

struct waiter {                 /* a TX_LOCK waiting for its lock */
	struct waiter *next_free;
	dgi_txsvc *s;
	dg_msg_in in;               /* type, flags, corr, from: enough to answer */
	dgi_txid tx;
	uint32_t cache_id, part;
	uint64_t hash;
	int64_t topver, flags;
	uint32_t klen;
	uint8_t *key;               /* inl, or a heap copy of a larger key */
	uint8_t inl[WAITER_KEY];
};

#define STAT(s, f) atomic_fetch_add_explicit(&(s)->f, 1, memory_order_relaxed)

_Atomic bool dgi_tx_test_ignore_pause;

/* ---- codecs ---- */

static dg_err put_i64s(dg_writer *w, const int64_t *v, int n)
{
	dg_err e = DG_OK;
	for (int i = 0; i < n && e == DG_OK; i++)
		e = dg_write_i64(w, v[i]);
	return e;
}

static dg_err get_i64s(dg_reader *r, int64_t *v, int n)
{
	dg_err e = DG_OK;
	for (int i = 0; i < n && e == DG_OK; i++)
		e = dg_read_i64(r, &v[i]);
	return e;
}

static dg_err enc_lock(dg_writer *w, const void *body)
{
	const dgi_msg_tx_lock *m = body;
	dg_err e = put_i64s(w, &m->tx_node, 5);
	if (e == DG_OK)
		e = dg_write_bytes(w, m->key.ptr, m->key.len);
	return e != DG_OK ? e : put_i64s(w, &m->topver, 3);
}

static dg_err dec_lock(dg_reader *r, void *body)
{
	dgi_msg_tx_lock *m = body;
	dg_err e = get_i64s(r, &m->tx_node, 5);
	if (e == DG_OK)
		e = dg_read_bytes(r, &m->key, NULL);
	return e != DG_OK ? e : get_i64s(r, &m->topver, 3);
}

static dg_err enc_lock_res(dg_writer *w, const void *body)
{
	const dgi_msg_tx_lock_res *m = body;
	dg_err e = put_i64s(w, &m->res, 5);
	if (e != DG_OK)
		return e;
	return m->val.ptr != NULL ? dg_write_bytes(w, m->val.ptr, m->val.len) : dg_write_null(w);
}

static dg_err dec_lock_res(dg_reader *r, void *body)
{
	dgi_msg_tx_lock_res *m = body;
	dg_err e = get_i64s(r, &m->res, 5);
	return e != DG_OK ? e : dg_read_bytes(r, &m->val, NULL);
}

static dg_err enc_res(dg_writer *w, const void *body)
{
	return put_i64s(w, body, 3);
}

static dg_err dec_res(dg_reader *r, void *body)
{
	return get_i64s(r, body, 3);
}

static dg_err enc_ctl(dg_writer *w, const void *body)
{
	return put_i64s(w, body, 5);
}

static dg_err dec_ctl(dg_reader *r, void *body)
{
	return get_i64s(r, body, 5);
}

static dg_err enc_prepare(dg_writer *w, const void *body)
{
	const dgi_msg_tx_prepare *m = body;
	dg_err e = put_i64s(w, &m->tx_node, 10);
	return e != DG_OK ? e : dg_msg_list_put(w, &m->ents);
}

static dg_err dec_prepare(dg_reader *r, void *body)
{
	dgi_msg_tx_prepare *m = body;
	dg_err e = get_i64s(r, &m->tx_node, 10);
	return e != DG_OK ? e : dg_msg_list_get(r, &m->ents);
}

dg_err dgi_txwire_put(dg_writer *w, const dgi_txwire_ent *e)
{
	dg_err err = put_i64s(w, &e->cache_id, 3);
	if (err == DG_OK)
		err = dg_write_bytes(w, e->key.ptr, e->key.len);
	if (err == DG_OK)
		err = e->val.ptr != NULL ? dg_write_bytes(w, e->val.ptr, e->val.len) :
		    dg_write_null(w);
	int64_t v[4] = { e->ver.topver, (int64_t)e->ver.counter, e->ver.order, e->expire_ms };
	return err != DG_OK ? err : put_i64s(w, v, 4);
}

dg_err dgi_txwire_get(dg_reader *r, dgi_txwire_ent *e)
{
	dg_err err = get_i64s(r, &e->cache_id, 3);
	if (err == DG_OK)
		err = dg_read_bytes(r, &e->key, NULL);
	if (err == DG_OK)
		err = dg_read_bytes(r, &e->val, NULL);
	int64_t v[4];
	if (err == DG_OK)
		err = get_i64s(r, v, 4);
	if (err != DG_OK)
		return err;
	if (e->key.ptr == NULL || e->key.len == 0 || e->cache_id <= 0 ||
	    e->cache_id > UINT32_MAX || e->part < 0 || e->part >= DG_PARTITIONS_MAX)
		return DG_ERR_INVAL;
	e->ver = (dgi_pver){ v[0], (uint64_t)v[1], (uint32_t)v[2], 0 };
	e->expire_ms = v[3];
	return DG_OK;
}

_Static_assert(offsetof(dgi_msg_tx_lock, key) == 5 * sizeof(int64_t),
    "TX_LOCK: five I64, then the key");
_Static_assert(sizeof(dgi_msg_tx_res) == 3 * sizeof(int64_t), "TX_UNLOCK: three I64");
_Static_assert(sizeof(dgi_msg_tx_ctl) == 5 * sizeof(int64_t), "TX_ACK: five I64");
_Static_assert(offsetof(dgi_msg_tx_prepare, ents) == 10 * sizeof(int64_t),
    "TX_PREPARE: ten I64, then the entries");

/* Writers of LISTs need a registry (FORMAT.md's container schemas); the
 * txn messages carry no registered types, so one empty registry serves
 * every node of the process. */
static dg_registry *wire_reg;

dg_registry *dgi_txwire_registry(void)
{
	return wire_reg;
}

#define enc_raw dg_msg_raw_encode
#define dec_raw dg_msg_raw_decode

static const struct row {
	dg_msg_type type;
	dg_msg_row row;
} rows[] = {
#define R(t, name, body, codec, reply) \
	{ t, { name, sizeof(body), enc_##codec, dec_##codec, reply } }
	R(DGI_MSG_TX_LOCK, "TX_LOCK", dgi_msg_tx_lock, lock, DGI_MSG_TX_LOCK_RES),
	R(DGI_MSG_TX_LOCK_RES, "TX_LOCK_RES", dgi_msg_tx_lock_res, lock_res, DG_MSG_UNKNOWN),
	R(DGI_MSG_TX_UNLOCK, "TX_UNLOCK", dgi_msg_tx_res, res, DGI_MSG_TX_LOCK_RES),
	R(DGI_MSG_TX_PREPARE, "TX_PREPARE", dgi_msg_tx_prepare, prepare, DGI_MSG_TX_ACK),
	R(DGI_MSG_TX_COMMIT, "TX_COMMIT", dgi_msg_tx_ctl, ctl, DGI_MSG_TX_ACK),
	R(DGI_MSG_TX_ROLLBACK, "TX_ROLLBACK", dgi_msg_tx_ctl, ctl, DGI_MSG_TX_ACK),
	R(DGI_MSG_TX_ACK, "TX_ACK", dgi_msg_tx_ctl, ctl, DG_MSG_UNKNOWN),
	R(DGI_MSG_TX_COMMIT_COPY, "TX_COMMIT_COPY", dgi_msg_tx_prepare, prepare, DGI_MSG_TX_ACK),
	R(DGI_MSG_TX_FENCE, "TX_FENCE", dgi_msg_tx_ctl, ctl, DG_MSG_UNKNOWN),
	R(DGI_MSG_TX_QUERY, "TX_QUERY", dgi_msg_tx_ctl, ctl, DGI_MSG_TX_ACK),
	R(DGI_MSG_TX_EDGES, "TX_EDGES", dgi_msg_tx_ctl, ctl, DGI_MSG_TX_EDGES_RES),
	R(DGI_MSG_TX_EDGES_RES, "TX_EDGES_RES", dg_msg_raw, raw, DG_MSG_UNKNOWN),
	R(DGI_MSG_TX_KILL, "TX_KILL", dgi_msg_tx_ctl, ctl, DG_MSG_UNKNOWN),
#undef R
};

static void define_rows(void)
{
	if (dg_registry_create(&wire_reg) != DG_OK)
		wire_reg = NULL;
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		dg_msg_define(rows[i].type, &rows[i].row);
}

/* ---- local dispatch: requests a node sends itself ---- */

static void dispatch(dgi_txsvc *s, const dg_msg_in *in);

/* Per-thread scratch buffers (encodings, values read, copies, edges),
 * reused by every request a thread handles and freed when it exits. */
struct tls_bufs {
	dg_buf enc[4];
	dg_buf val, copy, edges;
};

static pthread_key_t tls_key;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;

static void tls_free(void *p)
{
	struct tls_bufs *t = p;
	for (int i = 0; i < 4; i++)
		dg_buf_free(&t->enc[i]);
	dg_buf_free(&t->val);
	dg_buf_free(&t->copy);
	dg_buf_free(&t->edges);
	dgi_free(t);
}

static void tls_init(void)
{
	pthread_key_create(&tls_key, tls_free);
}

_Atomic bool dgi_tx_tls_fail;

/* This thread's buffers, or NULL when they could not be allocated: every
 * user then works with a buffer of its own (tl_buf), allocating — slower,
 * never a crash. */
static struct tls_bufs *tls(void)
{
	static _Thread_local struct tls_bufs *mine;
	if (atomic_load_explicit(&dgi_tx_tls_fail, memory_order_relaxed))
		return NULL;
	if (mine != NULL)
		return mine;
	pthread_once(&tls_once, tls_init);
	struct tls_bufs *t = dgi_calloc(1, sizeof(*t));
	if (t == NULL)
		return NULL;
	pthread_setspecific(tls_key, t);
	return mine = t;
}

/* This thread's scratch buffer at offset off of its tls_bufs, emptied; or
 * fb (initialised here) when the thread has none.  The caller
 * dg_buf_free's fb when done (nothing to free when unused). */
static dg_buf *scratch(size_t off, dg_buf *fb)
{
	struct tls_bufs *t = tls();
	dg_buf_init(fb);
	dg_buf *b = t != NULL ? (dg_buf *)(void *)((char *)t + off) : fb;
	b->len = 0;
	return b;
}

#define tl_buf(field, fb) scratch(offsetof(struct tls_bufs, field), (fb))

static _Thread_local int tl_depth;

/* Encodes body and decodes it again into out (what a peer would see),
 * in this thread's buffer for the nesting level, or fb; *used: the
 * encoding (valid until fb is freed or the level is used again). */
static dg_err roundtrip(dg_msg_type type, const void *body, void *out, dg_buf **used,
    dg_buf *fb)
{
	dg_buf_init(fb);
	if (tl_depth >= 4)
		return DG_ERR_LIMIT;
	dg_buf *b = scratch(offsetof(struct tls_bufs, enc) + (size_t)tl_depth * sizeof(dg_buf), fb);
	dg_writer w;
	dg_writer_init(&w, wire_reg, b);
	dg_err e = dg_msg_encode(type, body, &w);
	if (e == DG_OK)
		e = dg_msg_decode(type, NULL, b->data, b->len, out);
	*used = b;
	return e;
}

static void local_reply(dgi_txsvc *s, const dg_msg_in *req, dg_msg_type type,
    const void *body, dg_err err)
{
	uint32_t i = (uint32_t)(req->corr % LOCAL_SLOTS);
	pthread_mutex_lock(&s->lmu);
	struct local_slot sl = s->local[i];
	if (sl.id != req->corr) {
		pthread_mutex_unlock(&s->lmu);
		return; /* timed out already */
	}
	s->local[i].id = 0;
	pthread_mutex_unlock(&s->lmu);
	_Alignas(16) uint8_t out[DG_MSG_BODY_MAX];
	dg_msg_in in = { .type = type, .from = s->self, .corr = req->corr };
	dg_buf *b = NULL, fb;
	dg_buf_init(&fb);
	if (err == DG_OK) {
		tl_depth++;
		err = roundtrip(type, body, out, &b, &fb);
		tl_depth--;
	}
	if (err == DG_OK) {
		in.body = out;
		in.raw = b->data;
		in.raw_len = (uint32_t)b->len;
	}
	sl.cb(sl.ctx, err, err == DG_OK ? &in : NULL);
	dg_buf_free(&fb);
}

static void reply(dgi_txsvc *s, const dg_msg_in *req, dg_msg_type type, const void *body)
{
	if (req->from == s->self)
		local_reply(s, req, type, body, DG_OK);
	else
		dg_tp_reply(s->tp, req, type, body);
}

static void ack_flags(dgi_txsvc *s, const dg_msg_in *req, dg_err res, int64_t idx,
    int64_t flags)
{
	if (req->type == DGI_MSG_TX_LOCK || req->type == DGI_MSG_TX_UNLOCK) {
		dgi_msg_tx_lock_res r = { res, 0, 0, 0, 0, { NULL, 0 } };
		reply(s, req, DGI_MSG_TX_LOCK_RES, &r);
		return;
	}
	dgi_msg_tx_ctl r = { 0, 0, flags, res, idx };
	reply(s, req, DGI_MSG_TX_ACK, &r);
}

static void ack(dgi_txsvc *s, const dg_msg_in *req, dg_err res, int64_t idx)
{
	ack_flags(s, req, res, idx, 0);
}

_Atomic uint64_t dgi_tx_cut_node;

static bool cut_off(const dgi_txsvc *s)
{
	return atomic_load_explicit(&dgi_tx_cut_node, memory_order_relaxed) == s->self;
}

dg_err dgi_txsvc_request(dgi_txsvc *s, dg_node_id to, dg_msg_type type, const void *body,
    uint32_t timeout_ms, dg_reply_fn cb, void *ctx)
{
	if (cut_off(s))
		return DG_ERR_UNREACHABLE;
	if (to != s->self)
		return dg_tp_request(s->tp, to, type, body, timeout_ms, cb, ctx);
	pthread_mutex_lock(&s->lmu);
	uint64_t id = 0;
	for (uint32_t k = 0; k < LOCAL_SLOTS && id == 0; k++) {
		uint64_t cand = ++s->local_gen;
		struct local_slot *sl = &s->local[cand % LOCAL_SLOTS];
		if (sl->id == 0 && cand != 0) {
			id = cand;
			*sl = (struct local_slot){ id, cb, ctx, dgi_now_ms() + timeout_ms };
		}
	}
	pthread_mutex_unlock(&s->lmu);
	if (id == 0)
		return DG_ERR_BUSY;
	_Alignas(16) uint8_t dec[DG_MSG_BODY_MAX];
	dg_buf *b = NULL, fb;
	tl_depth++;
	dg_err e = roundtrip(type, body, dec, &b, &fb);
	if (e == DG_OK) {
		dg_msg_in in = { .type = type, .corr = id, .from = s->self, .body = dec,
			.raw = b->data, .raw_len = (uint32_t)b->len };
		dispatch(s, &in);
	}
	tl_depth--;
	dg_buf_free(&fb);
	if (e != DG_OK) {
		dg_msg_in in = { .type = type, .corr = id, .from = s->self };
		local_reply(s, &in, type, NULL, e);
	}
	return DG_OK;
}

dg_err dgi_txsvc_send(dgi_txsvc *s, dg_node_id to, dg_msg_type type, const void *body)
{
	if (cut_off(s))
		return DG_ERR_UNREACHABLE;
	if (to != s->self)
		return dg_tp_send(s->tp, to, type, body);
	_Alignas(16) uint8_t dec[DG_MSG_BODY_MAX];
	dg_buf *b = NULL, fb;
	tl_depth++;
	dg_err e = roundtrip(type, body, dec, &b, &fb);
	if (e == DG_OK) {
		dg_msg_in in = { .type = type, .from = s->self, .body = dec, .raw = b->data,
			.raw_len = (uint32_t)b->len };
		dispatch(s, &in);
	}
	tl_depth--;
	dg_buf_free(&fb);
	return e;
}

static void local_expire(dgi_txsvc *s, uint64_t now)
{
	for (uint32_t i = 0; i < LOCAL_SLOTS; i++) {
		pthread_mutex_lock(&s->lmu);
		struct local_slot sl = s->local[i];
		bool late = sl.id != 0 && sl.deadline <= now;
		if (late)
			s->local[i].id = 0;
		pthread_mutex_unlock(&s->lmu);
		if (late)
			sl.cb(sl.ctx, DG_ERR_TIMEOUT, NULL);
	}
}

/* ---- start times (svc->mu held) ---- */

static struct start_slot *start_find(dgi_txsvc *s, const dgi_txid *tx)
{
	if (s->scap == 0)
		return NULL;
	uint32_t mask = s->scap - 1;
	for (uint32_t i = (uint32_t)dgi_txid_hash(tx) & mask;; i = (i + 1) & mask) {
		struct start_slot *sl = &s->starts[i];
		if (sl->tx.node == 0 && sl->tx.seq == 0)
			return NULL;
		if (dgi_txid_eq(&sl->tx, tx))
			return sl;
	}
}

static dg_err start_grow(dgi_txsvc *s)
{
	/* removed slots count toward the load: rehash at a size for the live
	 * ones (a steady stream of txs keeps the same table size) */
	uint32_t live = 0;
	for (uint32_t i = 0; i < s->scap; i++)
		live += (s->starts[i].tx.node != 0 || s->starts[i].tx.seq != 0) &&
		    s->starts[i].start_ms >= 0;
	uint32_t ncap = 64;
	while (ncap < (live + 1) * 4)
		ncap *= 2;
	struct start_slot *n;
	if (ncap == s->scap && s->starts_spare != NULL) {
		n = s->starts_spare; /* same size: swap with the spare, no allocation */
		s->starts_spare = NULL;
		memset(n, 0, ncap * sizeof(*n));
	} else if ((n = dgi_calloc(ncap, sizeof(*n))) == NULL) {
		return DG_ERR_NOMEM;
	}
	uint32_t used = 0;
	for (uint32_t i = 0; i < s->scap; i++) {
		struct start_slot *o = &s->starts[i];
		if ((o->tx.node == 0 && o->tx.seq == 0) || o->start_ms < 0)
			continue;
		uint32_t j = (uint32_t)dgi_txid_hash(&o->tx) & (ncap - 1);
		while (n[j].tx.node != 0 || n[j].tx.seq != 0)
			j = (j + 1) & (ncap - 1);
		n[j] = *o;
		used++;
	}
	if (ncap == s->scap && s->starts_spare == NULL) {
		s->starts_spare = s->starts;
	} else {
		dgi_free(s->starts);
		dgi_free(s->starts_spare);
		s->starts_spare = NULL;
	}
	s->starts = n;
	s->scap = ncap;
	s->sused = used;
	return DG_OK;
}

static void start_put(dgi_txsvc *s, const dgi_txid *tx, int64_t start_ms)
{
	struct start_slot *sl = start_find(s, tx);
	if (sl != NULL) {
		sl->start_ms = start_ms;
		return;
	}
	if ((s->sused + 1) * 2 > s->scap && start_grow(s) != DG_OK)
		return; /* unknown start: the victim choice falls back to ids */
	uint32_t mask = s->scap - 1;
	uint32_t i = (uint32_t)dgi_txid_hash(tx) & mask;
	while (s->starts[i].tx.node != 0 || s->starts[i].tx.seq != 0)
		i = (i + 1) & mask;
	s->starts[i].tx = *tx;
	s->starts[i].start_ms = start_ms;
	s->sused++;
}

static int64_t start_of(dgi_txsvc *s, const dgi_txid *tx)
{
	struct start_slot *sl = start_find(s, tx);
	return sl != NULL && sl->start_ms > 0 ? sl->start_ms : 0;
}

static void start_del(dgi_txsvc *s, const dgi_txid *tx)
{
	struct start_slot *sl = start_find(s, tx);
	if (sl != NULL)
		sl->start_ms = -1; /* a tombstone: probe chains stay whole */
}

/* ---- participant records (s->mu held) ---- */

static struct rec *rec_find(dgi_txsvc *s, const dgi_txid *id, int role, uint64_t from)
{
	for (struct rec *r = s->buckets[dgi_txid_hash(id) & (NBUCKETS - 1)]; r != NULL; r = r->next)
		if (dgi_txid_eq(&r->id, id) && r->role == role &&
		    (role == ROLE_PRIMARY || r->from == from))
			return r;
	return NULL;
}

/* The id a finished backup or takeover role is remembered under (the
 * primary role's is the tx id itself). */
static dgi_txid role_key(const dgi_txid *id, int role, uint64_t from)
{
	if (role == ROLE_PRIMARY)
		return *id;
	uint64_t k = (from | 1) * 0x9e3779b97f4a7c15ULL ^ (uint64_t)role;
	return (dgi_txid){ id->node ^ k, id->seq };
}

static struct rec *rec_new(dgi_txsvc *s, const dgi_txid *id, int st, int role, uint64_t from)
{
	struct rec *r = s->free_recs;
	if (r != NULL) {
		s->free_recs = r->next;
		s->nfree--;
	} else if ((r = dgi_alloc(sizeof(*r))) == NULL) {
		return NULL;
	}
	memset(r, 0, offsetof(struct rec, inl));
	ns_init(&r->bk);
	r->s = s;
	r->id = *id;
	r->st = st;
	r->role = role;
	r->from = from;
	r->fail_idx = -1;
	r->made_ms = dgi_now_ms();
	struct rec **b = &s->buckets[dgi_txid_hash(id) & (NBUCKETS - 1)];
	r->next = *b;
	*b = r;
	s->nrecs++;
	return r;
}

static void rec_release(dgi_txsvc *s, struct rec *r)
{
	if (r->body != NULL && r->body != r->inl)
		dgi_free(r->body);
	r->body = NULL;
	ns_free(&r->bk);
	if (s->nfree < 256) {
		r->next = s->free_recs;
		s->free_recs = r;
		s->nfree++;
	} else {
		dgi_free(r);
	}
}

/* Takes r out of the table; frees it once no callback is still to come. */
static void rec_unlink(dgi_txsvc *s, struct rec *r)
{
	struct rec **p = &s->buckets[dgi_txid_hash(&r->id) & (NBUCKETS - 1)];
	while (*p != NULL && *p != r)
		p = &(*p)->next;
	if (*p == r) {
		*p = r->next;
		s->nrecs--;
	}
	r->dead = true;
	if (r->refs == 0)
		rec_release(s, r);
}

static void rec_unref(dgi_txsvc *s, struct rec *r)
{
	if (--r->refs == 0 && r->dead)
		rec_release(s, r);
}

static dg_err rec_keep_body(struct rec *r, const dg_msg_in *in)
{
	if (in->raw_len <= REC_INLINE) {
		r->body = r->inl;
	} else if ((r->body = dgi_alloc(in->raw_len)) == NULL) {
		return DG_ERR_NOMEM;
	}
	memcpy(r->body, in->raw, in->raw_len);
	r->blen = in->raw_len;
	return DG_OK;
}

/* What a wait of tx cancelled (the lock table's DG_ERR_CLOSED) answers —
 * never DG_ERR_CLOSED, which would tell the near node its own node is
 * closing: DG_ERR_DEADLOCK or DG_ERR_TX_ROLLED_BACK while tx is being
 * killed; DG_ERR_NOT_READY while this service stops (the near maps the key
 * again); else DG_ERR_TX_ROLLED_BACK — its record here was ended (the
 * topology fence, expiry, recovery, a rollback) and its locks released. */
static dg_err victim_err(dgi_txsvc *s, const dgi_txid *tx, dg_err err)
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
	 * Leave it; where it still waits, it is killed. */
	for (struct rec *r = s->buckets[dgi_txid_hash(victim) & (NBUCKETS - 1)]; r != NULL; r = r->next)
		if (dgi_txid_eq(&r->id, victim) && (r->role == ROLE_TAKEOVER ||
		    (r->role == ROLE_PRIMARY && (r->st == R_PREPARED || r->st == R_COMMITTING)))) {
			pthread_mutex_unlock(&s->mu);
			return;
		}
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

/* tx just started waiting: a cycle through it in this node's wait-for
 * graph is a deadlock; its youngest member is the victim. */
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

static void check_deadlock(dgi_txsvc *s, const dgi_txid *tx)
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
			dgi_wfg_add(s->wfg, a, (uint64_t)start_of(s, a), b, (uint64_t)start_of(s, b));
		}
		n = dgi_wfg_cycle(s->wfg, tx, cycle, sizeof(cycle) / sizeof(cycle[0]));
		if (n > sizeof(cycle) / sizeof(cycle[0]))
			n = sizeof(cycle) / sizeof(cycle[0]);
		if (n > 0)
			victim = dgi_wfg_victim(s->wfg, cycle, n);
	}
	if (n == 0 && s->dl_next == 0)
		s->dl_next = dgi_now_ms() + 20; /* the cycle may span nodes: look there soon */
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

/* ---- finishing ---- */

/* What a caller ending a record may need from it. */
struct ended {
	bool had;                   /* there was a record */
	bool pending;               /* with a request waiting (now the caller's) */
	dg_msg_in req;
	struct nodeset bk;          /* the nodes its prepare went to (the
	                               caller's: ns_free it) */
};

#define ANY_STATE 0xffffffffu
#define ST(x) (1u << (x))

/* The tx's role ends here — if its record is in one of the states of mask
 * (checked and ended under one lock: a commit cannot start in between):
 * remembered as outcome, the record gone, its locks (a primary's or a
 * takeover's) released.  Returns false, doing nothing, when the record is
 * in another state.  out (optional): what the caller needs of it. */
static bool end_role(dgi_txsvc *s, const dgi_txid *id, int role, uint64_t from,
    dgi_txs outcome, unsigned mask, struct ended *out)
{
	dgi_txid key = role_key(id, role, from);
	pthread_mutex_lock(&s->mu);
	struct rec *r = rec_find(s, id, role, from);
	if (r != NULL && !(mask & ST(r->st))) {
		pthread_mutex_unlock(&s->mu);
		return false;
	}
	if (out != NULL) {
		memset(out, 0, offsetof(struct ended, bk));
		ns_init(&out->bk);
		if (r != NULL) {
			out->had = true;
			out->pending = r->have_req;
			out->req = r->req;
			r->have_req = false;
			ns_move(&out->bk, &r->bk); /* the record ends here */
		}
	}
	dgi_txdone_put(s->done, &key, outcome, dgi_now_ms());
	if (r != NULL)
		rec_unlink(s, r);
	if (role != ROLE_BACKUP)
		start_del(s, id); /* (put by the primary's and the takeover's requests) */
	pthread_mutex_unlock(&s->mu);
	if (role != ROLE_BACKUP)
		dgi_lock_release_all(s->locks, id);
	return true;
}

static void finish_role(dgi_txsvc *s, const dgi_txid *id, int role, uint64_t from,
    dgi_txs outcome)
{
	end_role(s, id, role, from, outcome, ANY_STATE, NULL);
}


static void finish_rec(dgi_txsvc *s, struct rec *r, dgi_txs outcome)
{
	dgi_txid id = r->id;
	finish_role(s, &id, r->role, r->from, outcome);
}

static dg_cache *tx_cache(dgi_txsvc *s, int64_t id, dg_err *err)
{
	dg_cache *c = s->g != NULL ? dgi_grid_cache_by_id(s->g, (uint32_t)id) : NULL;
	if (c == NULL)
		*err = DG_ERR_NOT_FOUND;
	else if (dg_cache_config_of(c)->atomicity != DG_TRANSACTIONAL)
		*err = DG_ERR_UNSUPPORTED;
	else
		*err = DG_OK;
	return *err == DG_OK ? c : NULL;
}

/* Whether an entry from the wire names its key's partition: part is one
 * of c's and the key hashes to it.  A forged or corrupt partition would
 * otherwise pass the placement check of another partition this node owns,
 * and store the key where no lookup finds it.  DG_ERR_INVAL; *hash (may be
 * NULL): the key's. */
static dg_err ent_place(dg_cache *c, const dgi_txwire_ent *en, uint64_t *hash)
{
	uint64_t h;
	if (en->part < 0 || (uint64_t)en->part >= dg_cache_config_of(c)->partitions ||
	    dgi_cache_key_part(c, en->key.ptr, en->key.len, &h) != (uint64_t)en->part)
		return DG_ERR_INVAL;
	if (hash != NULL)
		*hash = h;
	return DG_OK;
}

/* Every entry of a PREPARE or COMMIT_COPY body whose cache this node has
 * names its key's partition (ent_place); DG_ERR_INVAL (or the body's
 * decoding error) and *bad, the entry's index, otherwise. */
static dg_err ents_placed(dgi_txsvc *s, const uint8_t *body, uint32_t blen, int64_t *bad);

/* Is this node key's primary under topver (any: the current topology)? */
static dg_err check_primary(dgi_txsvc *s, dg_cache *c, uint32_t part, int64_t topver)
{
	uint64_t own[8];
	int64_t tv;
	uint32_t n = dgi_cache_owners(c, part, own, DGI_OWNERS_BUF, &tv);
	if (n == 0)
		return DG_ERR_NOT_READY;
	if (own[0] != s->self || (topver != 0 && tv != topver))
		return DG_ERR_REMAP;
	return DG_OK;
}

/* ---- a node woken from a pause ---- */

/* Was this node just paused (PROTOCOL.md, "A paused node")?  Its view of
 * the cluster may be stale: the others may have removed it and moved its
 * partitions to its backups, which lock and write under a newer topology.
 * Requests that waited in its sockets meanwhile (a lock, a prepare) must
 * not be granted on its old topology: they are refused with
 * DG_ERR_NOT_READY (the near maps the key again) until the pause is over
 * — a member vouched for it, or it learnt it was removed and owns nothing. */
static bool paused(dgi_txsvc *s)
{
	struct dg_member *m = atomic_load_explicit(&s->m, memory_order_acquire);
	if (m == NULL || atomic_load_explicit(&dgi_tx_test_ignore_pause, memory_order_relaxed))
		return false;
	/* or without a majority's lease (PROTOCOL.md, "Majority"): the others
	 * may be promoting new owners of its keys */
	return dg_member_serving(m) != DG_OK || dg_member_suspect(m);
}

bool dgi_txsvc_segmented(dgi_txsvc *s)
{
	return s != NULL && dg_member_segmented(atomic_load_explicit(&s->m, memory_order_acquire));
}

static void stale_refused(dgi_txsvc *s, const char *what, uint64_t node, uint64_t seq)
{
	atomic_fetch_add(&s->stale_refused, 1);
	uint64_t now = dgi_now_ms(), last = atomic_load(&s->stale_logged_ms);
	if (now - last < 1000 || !atomic_compare_exchange_strong(&s->stale_logged_ms, &last, now))
		return;
	dgi_log("warn", "TX-STALE-REFUSED", "what=%s tx=%016llx:%llu count=%u "
	    "why=\"this node was paused: its topology may be stale\"", what,
	    (unsigned long long)node, (unsigned long long)seq,
	    atomic_exchange(&s->stale_refused, 0));
}

/* ---- copies: do the sender and this node agree on the owners? ----
 * A primary's copies (TX_COMMIT_COPY) and its forwarded prepares
 * (TX_PREPARE with DGI_TXP_BACKUP) carry the digest of the owner sets of
 * the written entries' partitions under the sender's affinity (owners_of)
 * and its version.  A backup answers DG_OK only when its own affinity
 * gives the same digest — then every owner of its topology was among the
 * sender's targets — and the sender is in its topology (a removed primary,
 * woken from a pause, acts on a topology the others left). */

/* Adds entry (cache id, part)'s owner set to a digest. */
static uint64_t digest_add(uint64_t d, int64_t cache_id, uint32_t part, uint64_t ohash)
{
	return d + dgi_mix64(((uint64_t)cache_id << 32 ^ part) * 0x9e3779b97f4a7c15ULL ^ ohash);
}

/* The owner digest of an entry list's written entries under this node's
 * affinities, and the lowest affinity version among them (0: no written
 * entry).  DG_ERR_NOT_READY: a cache this node does not know (yet), or
 * has no affinity for. */
static dg_err owners_of(dgi_txsvc *s, dg_raw ents, uint64_t *digest, int64_t *topver)
{
	dg_reader rd;
	uint32_t n;
	*digest = 0;
	*topver = 0;
	dg_reader_init(&rd, NULL, ents.ptr, ents.len);
	dg_err e = dg_read_begin(&rd, DG_LIST, &n);
	if (e != DG_OK)
		return e;
	if (n % DGI_TXWIRE_FIELDS != 0)
		return DG_ERR_BAD_LENGTH;
	n /= DGI_TXWIRE_FIELDS;
	for (uint32_t i = 0; i < n; i++) {
		dgi_txwire_ent en;
		if ((e = dgi_txwire_get(&rd, &en)) != DG_OK)
			return e;
		if ((en.op & DGI_TXOP_MASK) == 0)
			continue;
		dg_err ce;
		dg_cache *c = tx_cache(s, en.cache_id, &ce);
		uint64_t oh;
		int64_t tv;
		if (c == NULL || dgi_cache_owners_hash(c, (uint32_t)en.part, NULL, 0, &tv, &oh) == 0)
			return DG_ERR_NOT_READY;
		*digest = digest_add(*digest, en.cache_id, (uint32_t)en.part, oh);
		if (*topver == 0 || tv < *topver)
			*topver = tv;
	}
	return DG_OK;
}

/* May this node, a backup of m's sender, answer DG_OK to it?  DG_OK: it
 * agrees with the sender on every written entry's owners.  Else the
 * answer: DG_ERR_REMAP (this node is on a newer topology than the sender:
 * owners the sender did not know of may lack the copy, or the sender is
 * no longer a member), DG_ERR_NOT_READY (this node is behind the sender,
 * or does not know a cache yet), or a decoding error.  *member: whether
 * the sender is in this node's topology (a copy from a node that is not
 * is not applied at all: its writes are not the cluster's). */
static dg_err backup_agrees(dgi_txsvc *s, const dg_msg_in *in, const dgi_msg_tx_prepare *m,
    bool *member)
{
	uint64_t mine;
	int64_t tv;
	*member = in->from == s->self || !dgi_txsvc_gone(s, in->from);
	dg_err e = owners_of(s, m->ents, &mine, &tv);
	if (e != DG_OK)
		return e;
	if (tv == 0)
		tv = dgi_grid_topver(s->g); /* nothing written: the grid's */
	if (*member && m->otopver != 0 && (uint64_t)m->owners == mine)
		return DG_OK;
	return tv > m->otopver ? DG_ERR_REMAP : DG_ERR_NOT_READY;
}

/* ---- the topology fence ---- */

/* May a lock or prepare under topology version v be granted here? */
static dg_err fence_check(dgi_txsvc *s, int64_t v)
{
	if (!s->fenced)
		return DG_OK;
	pthread_mutex_lock(&s->fmu);
	bool ok = s->f.open && v == s->f.v;
	bool behind = v >= s->f.v; /* (read under fmu: on_topology writes it) */
	pthread_mutex_unlock(&s->fmu);
	if (ok)
		return DG_OK;
	return behind ? DG_ERR_NOT_READY : DG_ERR_REMAP;
}

static uint32_t fence_count(const struct fence *f)
{
	return f->t != NULL ? f->t->count : 0;
}

static void fence_mark(struct fence *f, uint64_t from)
{
	uint32_t n = fence_count(f);
	for (uint32_t i = 0; i < n; i++)
		if (f->t->nodes[i].id == from)
			f->got[i] = true;
	bool all = true;
	for (uint32_t i = 0; i < n && all; i++)
		all = f->got[i];
	f->open = all;
}

/* The topology the fence is at, held (dg_topology_release it), or NULL:
 * the nodes to tell or ask, without holding fmu over the sends and waits. */
static dg_topology *fence_topology(dgi_txsvc *s)
{
	pthread_mutex_lock(&s->fmu);
	dg_topology *t = s->f.t;
	if (t != NULL)
		atomic_fetch_add(&t->refs, 1);
	pthread_mutex_unlock(&s->fmu);
	return t;
}

static void forget_records(dgi_txsvc *s, int64_t v);

static void on_topology(void *ctx, const dg_topology *old, const dg_topology *now)
{
	dgi_txsvc *s = ctx;
	/* out of this version, or in it under another join order than in the
	 * one before (removed and back): every record is the past's */
	const dg_topology_node *was = old != NULL ? dg_topology_find(old, s->self) : NULL;
	const dg_topology_node *is = dg_topology_find(now, s->self);
	bool reborn = is == NULL || (was != NULL && was->order != is->order);
	dg_topology *prev = NULL;
	pthread_mutex_lock(&s->fmu);
	struct fence *f = &s->f;
	if (now->version > f->v && now->count <= DG_TOPOLOGY_MAX) {
		f->v = now->version;
		prev = f->t;
		atomic_fetch_add(&((dg_topology *)now)->refs, 1);
		f->t = (dg_topology *)now;
		memset(f->got, 0, now->count * sizeof(f->got[0]));
		f->open = false;
		f->reported = false;
		f->started_ms = dgi_now_ms();
		uint32_t k = 0;
		for (uint32_t i = 0; i < f->nearly; i++) {
			if (f->early[i].v == f->v)
				fence_mark(f, f->early[i].from);
			else if (f->early[i].v > f->v)
				f->early[k++] = f->early[i];
		}
		f->nearly = k;
	}
	pthread_mutex_unlock(&s->fmu);
	if (prev != NULL)
		dg_topology_release(prev);
	if (reborn && atomic_load(&s->fenced))
		forget_records(s, now->version);
}

/* A report (TX_FENCE v) from in->from.  One it sends again, for the
 * version this node's fence is open at, says its own fence is still shut:
 * it may be waiting for this node's report, lost on the way (a connection
 * broken or not up yet) — and this node, open, no longer repeats it.  It
 * answers with its report then (only an open node answers, only a repeat:
 * no echo between two). */
static void h_fence(dgi_txsvc *s, const dg_msg_in *in)
{
	const dgi_msg_tx_ctl *m = in->body;
	bool answer = false;
	pthread_mutex_lock(&s->fmu);
	struct fence *f = &s->f;
	int64_t v = f->v;
	if (m->value == f->v) {
		uint32_t n = fence_count(f);
		for (uint32_t i = 0; i < n; i++)
			if (f->t->nodes[i].id == in->from)
				answer = f->got[i] && f->open && f->reported;
		fence_mark(f, in->from);
	} else if (m->value > f->v && f->nearly < FENCE_EARLY) {
		f->early[f->nearly].v = m->value;
		f->early[f->nearly++].from = in->from;
	}
	pthread_mutex_unlock(&s->fmu);
	if (answer) {
		dgi_msg_tx_ctl r = { 0, 0, 0, 0, v };
		dg_tp_send(s->tp, in->from, DGI_MSG_TX_FENCE, &r);
	}
}

bool dgi_txsvc_fence_open(dgi_txsvc *s, int64_t v)
{
	pthread_mutex_lock(&s->fmu);
	bool open = !s->fenced || (s->f.v == v && s->f.open);
	pthread_mutex_unlock(&s->fmu);
	return open;
}

void dgi_txsvc_near_enter(dgi_txsvc *s, int64_t v)
{
	pthread_mutex_lock(&s->fmu);
	struct fence *f = &s->f;
	uint32_t i = 0;
	while (i < f->nnear && f->near[i].v != v)
		i++;
	if (i == f->nnear && i < sizeof(f->near) / sizeof(f->near[0])) {
		f->near[i].v = v;
		f->near[i].n = 0;
		f->nnear++;
	}
	if (i < f->nnear)
		f->near[i].n++;
	pthread_mutex_unlock(&s->fmu);
}

void dgi_txsvc_near_leave(dgi_txsvc *s, int64_t v)
{
	pthread_mutex_lock(&s->fmu);
	struct fence *f = &s->f;
	for (uint32_t i = 0; i < f->nnear; i++)
		if (f->near[i].v == v) {
			if (--f->near[i].n == 0)
				f->near[i] = f->near[--f->nnear];
			break;
		}
	pthread_mutex_unlock(&s->fmu);
}

static void finish_rec(dgi_txsvc *s, struct rec *r, dgi_txs outcome);

/* The fence's progress, from the deadline thread: report once nothing of
 * an older version is in flight here; past the timeout, roll back what of
 * it has not prepared; repeat the report while the fence is not open (a
 * report lost to a broken connection). */
static void fence_tick(dgi_txsvc *s, uint64_t now)
{
	pthread_mutex_lock(&s->fmu);
	struct fence *f = &s->f;
	int64_t v = f->v;
	bool resend = f->reported && !f->open && now - f->sent_ms >= 300;
	bool check = v != 0 && !f->reported;
	uint32_t busy = 0;
	for (uint32_t i = 0; i < f->nnear; i++)
		if (f->near[i].v < v)
			busy += f->near[i].n;
	uint64_t started = f->started_ms; /* (read below without fmu) */
	bool late = now - started >= s->fence_timeout_ms;
	/* a fence still shut after 3 s: say what it waits for (every 2 s) */
	if (v != 0 && !f->open && now - f->started_ms >= 3000 && now - f->logged_ms >= 2000) {
		f->logged_ms = now;
		char miss[256];
		size_t off = 0;
		miss[0] = 0;
		for (uint32_t i = 0; i < fence_count(f) && off + 20 < sizeof(miss); i++)
			if (!f->got[i])
				off += (size_t)snprintf(miss + off, sizeof(miss) - off, "%s%016llx",
				    off ? "," : "", (unsigned long long)f->t->nodes[i].id);
		dgi_log("warn", "TX-FENCE-WAIT", "topology=%lld waited_ms=%llu "
		    "reported=%d near_in_flight=%u waiting_for=%s", (long long)v,
		    (unsigned long long)(now - f->started_ms), f->reported, busy, miss);
	}
	pthread_mutex_unlock(&s->fmu);
	if (!check && !resend)
		return;
	dgi_txid undo[32];
	int nundo = 0;
	if (check) {
		pthread_mutex_lock(&s->mu);
		for (uint32_t b = 0; b < NBUCKETS; b++)
			for (struct rec *r = s->buckets[b]; r != NULL; r = r->next) {
				if (r->topver == 0 || r->topver >= v)
					continue;
				busy++;
				if (late && r->role == ROLE_PRIMARY && nundo < 32 &&
				    (r->st == R_ACTIVE || r->st == R_PREPARING))
					undo[nundo++] = r->id;
			}
		pthread_mutex_unlock(&s->mu);
	}
	for (int i = 0; i < nundo; i++) {
		/* a tx of an older topology holds the fence: roll it back here
		 * (its near learns it at its next request) — unless it got as
		 * far as preparing meanwhile */
		struct ended x;
		bool ended = end_role(s, &undo[i], ROLE_PRIMARY, 0, DGI_TXS_ROLLED_BACK,
		    ST(R_ACTIVE) | ST(R_PREPARING), &x);
		if (ended && !x.had)
			ns_free(&x.bk);
		if (!ended || !x.had)
			continue;
		dgi_log("warn", "TX-FENCE-ROLLBACK", "tx=%016llx:%llu topology=%lld",
		    (unsigned long long)undo[i].node, (unsigned long long)undo[i].seq, (long long)v);
		atomic_fetch_add(&s->fence_rollbacks, 1);
		if (x.pending)
			ack(s, &x.req, DG_ERR_TX_ROLLED_BACK, -1);
		/* a prepare already forwarded: its backups drop what they kept
		 * (else their records would hold the fence, the primary alive) */
		dgi_msg_tx_ctl fw = { (int64_t)undo[i].node, (int64_t)undo[i].seq, DGI_TXP_BACKUP, 0, 0 };
		for (uint32_t k = 0; k < x.bk.n; k++)
			dgi_txsvc_send(s, x.bk.ids[k], DGI_MSG_TX_ROLLBACK, &fw);
		ns_free(&x.bk);
	}
	if (check && busy > 0) {
		if (now - started >= 3000 && now - s->blocked_logged_ms >= 2000) {
			s->blocked_logged_ms = now;
			pthread_mutex_lock(&s->mu);
			for (uint32_t b = 0; b < NBUCKETS; b++)
				for (struct rec *r = s->buckets[b]; r != NULL; r = r->next)
					if (r->topver != 0 && r->topver < v)
						dgi_log("warn", "TX-FENCE-HELD", "topology=%lld "
						    "tx=%016llx:%llu role=%d state=%d from=%016llx topver=%lld",
						    (long long)v, (unsigned long long)r->id.node,
						    (unsigned long long)r->id.seq, r->role, r->st,
						    (unsigned long long)r->from, (long long)r->topver);
			pthread_mutex_unlock(&s->mu);
		}
		return;
	}
	dg_topology *t = NULL;
	pthread_mutex_lock(&s->fmu);
	if (f->v == v) {
		if (!f->reported) {
			f->reported = true;
			fence_mark(f, s->self);
		}
		f->sent_ms = now;
		if ((t = f->t) != NULL)
			atomic_fetch_add(&t->refs, 1);
	}
	pthread_mutex_unlock(&s->fmu);
	dgi_msg_tx_ctl m = { 0, 0, 0, 0, v };
	for (uint32_t i = 0; t != NULL && i < t->count; i++)
		if (t->nodes[i].id != s->self)
			dg_tp_send(s->tp, t->nodes[i].id, DGI_MSG_TX_FENCE, &m);
	if (t != NULL)
		dg_topology_release(t);
}

void dgi_txsvc_topology(dgi_txsvc *s, const dg_topology *t)
{
	on_topology(s, NULL, t);
}

dg_err dgi_txsvc_joined(dgi_txsvc *s, struct dg_member *m, uint32_t fence_timeout_ms)
{
	pthread_mutex_lock(&s->fmu);
	s->fence_timeout_ms = fence_timeout_ms ? fence_timeout_ms : 1000;
	pthread_mutex_unlock(&s->fmu);
	dg_topology *t = dg_member_topology(m);
	if (t != NULL) {
		on_topology(s, NULL, t);
		dg_topology_release(t);
	}
	pthread_mutex_lock(&s->fmu);
	s->fenced = s->g != NULL;
	/* held: the handlers read it (paused) until dgi_txsvc_stop */
	dgi_member_release(atomic_exchange(&s->m, dgi_member_hold(m)));
	pthread_mutex_unlock(&s->fmu);
	return dg_member_listen(m, on_topology, s);
}

/* ---- TX_LOCK ---- */

/* A waiter from the pool (a steady stream of lock requests allocates
 * nothing), its key copied. */
static struct waiter *waiter_get(dgi_txsvc *s, const uint8_t *key, uint32_t klen)
{
	pthread_mutex_lock(&s->mu);
	struct waiter *w = s->free_waiters;
	if (w != NULL) {
		s->free_waiters = w->next_free;
		s->nfree_waiters--;
	}
	pthread_mutex_unlock(&s->mu);
	if (w == NULL && (w = dgi_alloc(sizeof(*w))) == NULL)
		return NULL;
	w->key = w->inl;
	if (klen > WAITER_KEY && (w->key = dgi_alloc(klen)) == NULL) {
		dgi_free(w);
		return NULL;
	}
	memcpy(w->key, key, klen);
	w->klen = klen;
	return w;
}

static void waiter_put(dgi_txsvc *s, struct waiter *w)
{
	if (w->key != w->inl)
		dgi_free(w->key);
	pthread_mutex_lock(&s->mu);
	if (s->nfree_waiters < 1024) {
		w->next_free = s->free_waiters;
		s->free_waiters = w;
		s->nfree_waiters++;
		w = NULL;
	}
	pthread_mutex_unlock(&s->mu);
	dgi_free(w);
}

static void lock_answer(dgi_txsvc *s, const dg_msg_in *in, dg_err err, uint32_t cache_id,
    uint32_t part, uint64_t hash, const uint8_t *key, uint32_t klen, int64_t topver,
    int64_t flags)
{
	dgi_msg_tx_lock_res r = { err, 0, 0, 0, 0, { NULL, 0 } };
	dg_buf fb, *val = tl_buf(val, &fb);
	if (err == DG_OK && (flags & (DGI_TXL_READ | DGI_TXL_NOLOCK))) {
		dg_cache *c = tx_cache(s, cache_id, &err);
		bool found = false;
		dgi_pver ver = { 0, 0, 0, 0 };
		if (c != NULL)
			err = dgi_cache_tx_read_settled(c, topver != 0 ? topver : dgi_grid_topver(s->g),
			    part, hash, key, klen, val, &found, &ver);
		if (err == DG_ERR_REMAP && topver == 0)
			err = DG_ERR_NOT_READY;
		r.res = err;
		r.found = found;
		r.ver_topver = ver.topver;
		r.ver_counter = (int64_t)ver.counter;
		r.ver_order = ver.order;
		if (found)
			r.val = (dg_bytes){ val->data ? val->data : (const uint8_t *)"",
				(uint32_t)val->len };
	}
	reply(s, in, DGI_MSG_TX_LOCK_RES, &r);
	dg_buf_free(&fb);
}

static void on_lock_done(void *ctx, dg_err err)
{
	struct waiter *w = ctx;
	dgi_txsvc *s = w->s;
	err = victim_err(s, &w->tx, err);
	if (err == DG_OK)
		STAT(s, granted);
	else if (err == DG_ERR_TIMEOUT)
		STAT(s, timeouts);
	lock_answer(s, &w->in, err, w->cache_id, w->part, w->hash, w->key, w->klen, w->topver,
	    w->flags);
	waiter_put(s, w);
}

static uint64_t fnv(const uint8_t *p, uint32_t n)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	for (uint32_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 0x100000001b3ULL;
	return h;
}

static void h_lock(dgi_txsvc *s, const dg_msg_in *in)
{
	const dgi_msg_tx_lock *m = in->body;
	dgi_txid tx = { (uint64_t)m->tx_node, (uint64_t)m->tx_seq };
	if ((tx.node == 0 && tx.seq == 0) || m->key.ptr == NULL || m->key.len == 0 ||
	    m->timeout_ms < 0 || m->cache_id <= 0 || m->cache_id > UINT32_MAX || m->part < 0 ||
	    (m->topver == 0 && m->flags != 0)) {
		ack(s, in, DG_ERR_INVAL, -1);
		return;
	}
	uint64_t hash;
	uint32_t part = 0;
	if (m->topver != 0) {
		dg_err err;
		if (paused(s)) {
			stale_refused(s, "lock", tx.node, tx.seq);
			ack(s, in, DG_ERR_NOT_READY, -1);
			return;
		}
		dg_cache *c = tx_cache(s, m->cache_id, &err);
		if (c == NULL) {
			ack(s, in, err, -1);
			return;
		}
		part = dgi_cache_key_part(c, m->key.ptr, m->key.len, &hash);
		if (part != (uint64_t)m->part) {
			ack(s, in, DG_ERR_INVAL, -1);
			return;
		}
		if ((err = check_primary(s, c, part, m->topver)) != DG_OK) {
			ack(s, in, err, -1);
			return;
		}
		if (dgi_cache_part_lost(c, part)) {
			ack(s, in, DG_ERR_PARTITION_LOST, -1); /* no lock on what is gone */
			return;
		}
		if (m->flags & DGI_TXL_NOLOCK) {
			lock_answer(s, in, DG_OK, (uint32_t)m->cache_id, part, hash, m->key.ptr,
			    m->key.len, m->topver, m->flags);
			return;
		}
		if ((err = fence_check(s, m->topver)) != DG_OK) {
			ack(s, in, err, -1);
			return;
		}
	} else {
		hash = fnv(m->key.ptr, m->key.len);
	}
	dgi_txs done;
	if (dgi_txdone_get(s->done, &tx, &done)) {
		ack(s, in, DG_ERR_TX_ROLLED_BACK, -1); /* ended here (rolled back, timed out) */
		return;
	}
	uint64_t deadline = m->timeout_ms > 0 ? dgi_now_ms() + (uint64_t)m->timeout_ms : 0;
	pthread_mutex_lock(&s->mu);
	start_put(s, &tx, m->tx_start_ms);
	struct rec *r = rec_find(s, &tx, ROLE_PRIMARY, 0);
	if (r == NULL && (r = rec_new(s, &tx, R_ACTIVE, ROLE_PRIMARY, 0)) != NULL) {
		r->s = s;
		r->start_ms = m->tx_start_ms;
		r->topver = m->topver;
	}
	if (r != NULL && r->st == R_ACTIVE && deadline > r->deadline)
		r->deadline = deadline;
	pthread_mutex_unlock(&s->mu);
	struct waiter *w = r != NULL ? waiter_get(s, m->key.ptr, m->key.len) : NULL;
	if (w == NULL) {
		ack(s, in, DG_ERR_NOMEM, -1);
		return;
	}
	w->s = s;
	w->in = *in;
	w->in.body = NULL;
	w->in.raw = NULL;
	w->tx = tx;
	w->cache_id = (uint32_t)m->cache_id;
	w->part = part;
	w->hash = hash;
	w->topver = m->topver;
	w->flags = m->flags;
	int res = dgi_lock_acquire(s->locks, (uint32_t)m->cache_id, m->key.ptr, m->key.len, hash,
	    &tx, deadline, on_lock_done, w);
	if (res == DGI_LOCK_GRANTED) {
		STAT(s, granted);
		lock_answer(s, in, DG_OK, w->cache_id, part, hash, w->key, w->klen, m->topver,
		    m->flags);
		waiter_put(s, w);
	} else if (res == DGI_LOCK_QUEUED) {
		STAT(s, waited); /* w belongs to the lock's callback now */
		check_deadlock(s, &tx);
	} else {
		waiter_put(s, w);
		ack(s, in, (dg_err)-res, -1);
	}
}

/* ---- TX_ROLLBACK, TX_UNLOCK ---- */

static void h_rollback(dgi_txsvc *s, const dg_msg_in *in)
{
	dgi_txid tx;
	if (in->type == DGI_MSG_TX_UNLOCK) {
		const dgi_msg_tx_res *m = in->body;
		tx = (dgi_txid){ (uint64_t)m->tx_node, (uint64_t)m->tx_seq };
	} else {
		const dgi_msg_tx_ctl *m = in->body;
		tx = (dgi_txid){ (uint64_t)m->tx_node, (uint64_t)m->tx_seq };
		if (m->flags & DGI_TXP_BACKUP) { /* a primary tells its backup */
			finish_role(s, &tx, ROLE_BACKUP, in->from, DGI_TXS_ROLLED_BACK);
			ack(s, in, DG_OK, -1);
			return;
		}
	}
	dgi_txs done;
	if (dgi_txdone_get(s->done, &tx, &done) && done == DGI_TXS_COMMITTED) {
		ack(s, in, DG_ERR_STATE, -1); /* committed here: it cannot be undone */
		return;
	}
	struct ended x;
	if (!end_role(s, &tx, ROLE_PRIMARY, 0, DGI_TXS_ROLLED_BACK, ANY_STATE & ~ST(R_COMMITTING),
	    &x)) {
		ack(s, in, DG_ERR_STATE, -1); /* commit under way: it cannot be undone */
		return;
	}
	if (x.pending)
		ack(s, &x.req, DG_ERR_TX_ROLLED_BACK, -1);
	dgi_msg_tx_ctl fw = { (int64_t)tx.node, (int64_t)tx.seq, DGI_TXP_BACKUP, 0, 0 };
	for (uint32_t i = 0; i < x.bk.n; i++)
		dgi_txsvc_send(s, x.bk.ids[i], DGI_MSG_TX_ROLLBACK, &fw);
	ns_free(&x.bk);
	STAT(s, unlocks);
	if (x.had)
		STAT(s, rolled_back);
	ack(s, in, DG_OK, -1);
}

/* ---- TX_PREPARE (primary) ---- */

static void prepare_locked(dgi_txsvc *s, struct rec *r);
static void commit_apply(dgi_txsvc *s, struct rec *r);
static bool commit_prepared(dgi_txsvc *s, const dg_msg_in *in, const dgi_txid *txp,
    bool may_miss);

static dg_err ents_open(const uint8_t *body, uint32_t blen, dgi_msg_tx_prepare *m,
    dg_reader *rd, uint32_t *count)
{
	dg_err e = dg_msg_decode(DGI_MSG_TX_PREPARE, NULL, body, blen, m);
	if (e != DG_OK)
		return e;
	dg_reader_init(rd, NULL, m->ents.ptr, m->ents.len);
	if ((e = dg_read_begin(rd, DG_LIST, count)) == DG_OK && *count % DGI_TXWIRE_FIELDS != 0)
		e = DG_ERR_BAD_LENGTH;
	*count /= DGI_TXWIRE_FIELDS;
	return e;
}

static dg_err ents_placed(dgi_txsvc *s, const uint8_t *body, uint32_t blen, int64_t *bad)
{
	dg_reader rd;
	uint32_t n;
	dgi_msg_tx_prepare m;
	dg_err e = ents_open(body, blen, &m, &rd, &n);
	for (uint32_t i = 0; i < n && e == DG_OK; i++) {
		dgi_txwire_ent en;
		dg_err ce;
		if ((e = dgi_txwire_get(&rd, &en)) != DG_OK)
			break;
		dg_cache *c = tx_cache(s, en.cache_id, &ce);
		if (c != NULL && (e = ent_place(c, &en, NULL)) != DG_OK)
			*bad = i;
	}
	return e;
}

/* One of a PREPARE's lock grants (or failures) is in — or the issuing
 * loop's own count: the last one continues the prepare, then drops the
 * reference its count held. */
static void lock_counted(dgi_txsvc *s, struct rec *r, dg_err err)
{
	pthread_mutex_lock(&s->mu);
	if (err != DG_OK && r->fail == DG_OK)
		r->fail = err;
	bool go = --r->waiting == 0 && !r->dead;
	pthread_mutex_unlock(&s->mu);
	if (go)
		prepare_locked(s, r);
	pthread_mutex_lock(&s->mu);
	rec_unref(s, r);
	pthread_mutex_unlock(&s->mu);
}

static void on_prep_lock(void *ctx, dg_err err)
{
	struct rec *r = ctx;
	dgi_txsvc *s = r->s;
	err = victim_err(s, &r->id, err);
	lock_counted(s, r, err);
}

static void h_backup_prepare(dgi_txsvc *s, const dg_msg_in *in, const dgi_msg_tx_prepare *m)
{
	dgi_txid tx = { (uint64_t)m->tx_node, (uint64_t)m->tx_seq };
	dgi_txid key = role_key(&tx, ROLE_BACKUP, in->from);
	dgi_txs done;
	if (dgi_txdone_get(s->done, &key, &done)) {
		ack(s, in, done == DGI_TXS_COMMITTED ? DG_OK : DG_ERR_TX_ROLLED_BACK, -1);
		return;
	}
	int64_t bad = -1;
	dg_err e = ents_placed(s, in->raw, in->raw_len, &bad);
	if (e != DG_OK) {
		ack(s, in, e, bad); /* kept, it would be applied on a takeover */
		return;
	}
	/* kept only from a primary that agrees with this node on the owners
	 * (a removed one, woken from a pause, prepares on a topology the
	 * others left: nothing of it is kept, and it cannot prepare) */
	bool member;
	e = backup_agrees(s, in, m, &member);
	if (e != DG_OK) {
		if (dg_log_enabled(DG_LOG_DEBUG))
			dgi_log("debug", "TX-DEBUG", "backup prepare refused: %s from=%016llx member=%d",
			    dg_strerror(e), (unsigned long long)in->from, member);
		ack(s, in, e, -1);
		return;
	}
	pthread_mutex_lock(&s->mu);
	struct rec *r = rec_find(s, &tx, ROLE_BACKUP, in->from);
	if (r == NULL) {
		if ((r = rec_new(s, &tx, R_BACKUP, ROLE_BACKUP, in->from)) == NULL) {
			e = DG_ERR_NOMEM;
		} else {
			r->s = s;
			r->start_ms = m->start_ms;
			r->topver = m->topver;
			r->flags = m->flags;
			r->deadline = dgi_now_ms() + (uint64_t)(m->timeout_ms > 0 ? m->timeout_ms : 0);
			if ((e = rec_keep_body(r, in)) != DG_OK)
				rec_unlink(s, r);
		}
	}
	pthread_mutex_unlock(&s->mu);
	if (e == DG_OK)
		STAT(s, backup_prepared);
	ack(s, in, e, -1);
}

static dg_err add_owners(dgi_txsvc *s, dg_cache *c, int64_t cache_id, uint32_t part,
    struct targets *t);
static void to_backups(dgi_txsvc *s, struct rec *r, dg_msg_type type,
    const dgi_msg_tx_prepare *body, const struct nodeset *set, uint32_t timeout_ms);

/* This node's copy of a resend's entry en into w (what it holds now: the
 * tx's write or a later one; read into val), its owners into t; false when
 * it holds none (or t cannot grow). */
static bool recopy_one(dgi_txsvc *s, dgi_txwire_ent *en, dg_writer *w, struct targets *t,
    dg_buf *val)
{
	dg_err e;
	dg_cache *c = tx_cache(s, en->cache_id, &e);
	if (c == NULL)
		return false;
	uint64_t hash;
	dgi_cache_key_part(c, en->key.ptr, en->key.len, &hash);
	bool found;
	val->len = 0;
	if (dgi_cache_tx_read(c, 0, (uint32_t)en->part, hash, en->key.ptr, en->key.len, val,
	    &found, &en->ver) != DG_OK || en->ver.counter == 0)
		return false;
	if (w == NULL)
		return true;
	en->op = found ? DGI_TXOP_PUT : DGI_TXOP_REMOVE;
	en->val = found ? (dg_bytes){ val->data ? val->data : (const uint8_t *)"",
		(uint32_t)val->len } : (dg_bytes){ NULL, 0 };
	en->expire_ms = 0;
	return dgi_txwire_put(w, en) == DG_OK &&
	    add_owners(s, c, en->cache_id, (uint32_t)en->part, t) == DG_OK;
}

/* A resend (in) of entries this node applied already: sends what it holds
 * of those keys to their current owners (TX_COMMIT_COPY; versions make
 * repeats harmless) and answers once every one confirmed (DG_OK), or
 * DG_ERR_TX_UNKNOWN with DGI_TXA_APPLIED when one did not — the near
 * re-sends.  Runs as a takeover record from origin in R_COMMITTING; a
 * resend while one runs is answered DG_ERR_NOT_READY (ask again). */
static void recopy(dgi_txsvc *s, const dg_msg_in *in, uint64_t origin)
{
	dg_reader rd, rd2;
	uint32_t n, held = 0, written = 0;
	dgi_msg_tx_prepare m;
	dg_err e = ents_open(in->raw, in->raw_len, &m, &rd, &n);
	if (e != DG_OK) {
		ack(s, in, e, -1);
		return;
	}
	dgi_txid tx = { (uint64_t)m.tx_node, (uint64_t)m.tx_seq };
	dg_buf vfb, cfb, *val = tl_buf(val, &vfb), *b = tl_buf(copy, &cfb);
	rd2 = rd;
	for (uint32_t i = 0; i < n; i++) {
		dgi_txwire_ent en;
		if (dgi_txwire_get(&rd2, &en) != DG_OK)
			break;
		held += recopy_one(s, &en, NULL, NULL, val);
	}
	struct targets t;
	targets_init(&t);
	if (held < n) {
		e = DG_ERR_NOT_FOUND; /* it cannot vouch for what it lost */
		goto out;
	}
	dg_writer w;
	dg_writer_init(&w, wire_reg, b);
	e = dg_write_list_begin(&w, held * DGI_TXWIRE_FIELDS);
	for (uint32_t i = 0; i < n && e == DG_OK && written < held; i++) {
		dgi_txwire_ent en;
		if ((e = dgi_txwire_get(&rd, &en)) == DG_OK)
			written += recopy_one(s, &en, &w, &t, val);
	}
	if (e == DG_OK && written != held)
		e = DG_ERR_NOT_READY; /* changed under us: the near asks again */
	if (e == DG_OK)
		e = dg_write_end(&w);
	if (e != DG_OK || t.bk.n == 0)
		goto out;
	pthread_mutex_lock(&s->mu);
	struct rec *r = rec_find(s, &tx, ROLE_TAKEOVER, origin);
	if (r == NULL && (r = rec_new(s, &tx, R_COMMITTING, ROLE_TAKEOVER, origin)) != NULL) {
		r->s = s;
		r->start_ms = m.start_ms;
		r->topver = t.topver;
		r->flags = m.flags;
		r->have_req = true;
		r->req = *in;
		r->req.body = NULL;
		r->req.raw = NULL;
	} else {
		pthread_mutex_unlock(&s->mu);
		e = r != NULL ? DG_ERR_NOT_READY : DG_ERR_NOMEM;
		goto out;
	}
	pthread_mutex_unlock(&s->mu);
	dgi_msg_tx_prepare cp = { (int64_t)tx.node, (int64_t)tx.seq, m.start_ms, 0, t.topver, 0,
		(int64_t)origin, 0, (int64_t)t.digest, t.topver, { b->data, (uint32_t)b->len } };
	to_backups(s, r, DGI_MSG_TX_COMMIT_COPY, &cp, &t.bk,
	    m.timeout_ms > 0 ? (uint32_t)m.timeout_ms : 1000);
	targets_free(&t);
	dg_buf_free(&vfb);
	dg_buf_free(&cfb);
	return;
out:
	ack(s, in, e, -1); /* (DG_OK: nothing to copy, no other owner) */
	targets_free(&t);
	dg_buf_free(&vfb);
	dg_buf_free(&cfb);
}

/* DGI_TXP_RECOPY: this node applied the tx's entries of origin (as their
 * primary, origin itself; as origin's backup; or taking over from it) but
 * did not get every owner's confirmation.  It re-sends what it holds of
 * those keys (recopy) — on whatever topology, as a member; the owners
 * judge — and never applies them anew.  A record still committing: ask
 * again (DG_ERR_NOT_READY); nothing applied here: DG_ERR_NOT_FOUND. */
static void h_recopy(dgi_txsvc *s, const dg_msg_in *in, const dgi_txid *tx, uint64_t origin)
{
	dgi_txid tk = role_key(tx, ROLE_TAKEOVER, origin), bk = role_key(tx, ROLE_BACKUP, origin);
	dgi_txs d;
	if ((dgi_txdone_get(s->done, &tk, &d) && d == DGI_TXS_COMMITTED) ||
	    (dgi_txdone_get(s->done, &bk, &d) && d == DGI_TXS_COMMITTED) ||
	    (origin == s->self && dgi_txdone_get(s->done, tx, &d) && d == DGI_TXS_COMMITTED)) {
		recopy(s, in, origin);
		return;
	}
	pthread_mutex_lock(&s->mu);
	bool busy = (origin == s->self && rec_find(s, tx, ROLE_PRIMARY, 0) != NULL) ||
	    rec_find(s, tx, ROLE_TAKEOVER, origin) != NULL;
	pthread_mutex_unlock(&s->mu);
	ack(s, in, busy ? DG_ERR_NOT_READY : DG_ERR_NOT_FOUND, -1);
}

static void h_prepare(dgi_txsvc *s, const dg_msg_in *in)
{
	const dgi_msg_tx_prepare *m = in->body;
	dgi_txid tx = { (uint64_t)m->tx_node, (uint64_t)m->tx_seq };
	if (tx.node == 0 && tx.seq == 0) {
		ack(s, in, DG_ERR_INVAL, -1);
		return;
	}
	if (m->flags & DGI_TXP_BACKUP) {
		h_backup_prepare(s, in, m);
		return;
	}
	if (paused(s)) {
		stale_refused(s, "prepare", tx.node, tx.seq);
		ack(s, in, DG_ERR_NOT_READY, -1);
		return;
	}
	bool resend = (m->flags & DGI_TXP_RESEND) != 0;
	int role = resend ? ROLE_TAKEOVER : ROLE_PRIMARY;
	uint64_t from = resend ? (uint64_t)m->origin : 0;
	if (resend && (m->flags & DGI_TXP_RECOPY)) {
		h_recopy(s, in, &tx, from);
		return;
	}
	/* a resend to the primary that prepared it (its COMMIT's answer was
	 * lost, or it refused): commit that record, or answer its outcome —
	 * committed here already: send the copies again (whatever this node's
	 * role is now: the owners judge) */
	if (resend && from == s->self) {
		dgi_txs pd;
		if (commit_prepared(s, in, &tx, true))
			return;
		if (dgi_txdone_get(s->done, &tx, &pd) && pd == DGI_TXS_COMMITTED) {
			recopy(s, in, from);
			return;
		}
	}
	dgi_txid key = role_key(&tx, role, from), bkey = role_key(&tx, ROLE_BACKUP, from);
	dgi_txs done;
	if (!resend && dgi_txdone_get(s->done, &key, &done)) {
		/* finished here: a repeat */
		ack(s, in, done == DGI_TXS_COMMITTED ? DG_OK : DG_ERR_TX_ROLLED_BACK, -1);
		return;
	}
	/* placement: every entry's partition is this node's under the tx's
	 * topology — or, for a PESSIMISTIC tx that locked its keys here under
	 * an older topology, this node holds every one of those locks (the
	 * new topology's locks wait for it: the fence) */
	pthread_mutex_lock(&s->mu);
	struct rec *have = resend ? NULL : rec_find(s, &tx, ROLE_PRIMARY, 0);
	bool locked_here = have != NULL && have->st == R_ACTIVE && have->topver == m->topver;
	pthread_mutex_unlock(&s->mu);
	dg_reader rd;
	uint32_t n;
	dgi_msg_tx_prepare mm;
	dg_err e = ents_open(in->raw, in->raw_len, &mm, &rd, &n);
	int64_t topver = (m->flags & DGI_TXP_RESEND) ? 0 : m->topver;
	for (uint32_t i = 0; i < n && e == DG_OK; i++) {
		dgi_txwire_ent en;
		dg_cache *c = NULL;
		if ((e = dgi_txwire_get(&rd, &en)) != DG_OK || (c = tx_cache(s, en.cache_id, &e)) == NULL)
			break;
		if ((e = ent_place(c, &en, NULL)) != DG_OK) {
			ack(s, in, e, i); /* a partition the key is not in: refused */
			return;
		}
		if (dgi_cache_part_lost(c, (uint32_t)en.part)) {
			e = DG_ERR_PARTITION_LOST; /* nothing is written to a lost partition */
		} else if (locked_here) {
			uint64_t hash;
			dgi_cache_key_part(c, en.key.ptr, en.key.len, &hash);
			dgi_txid owner = dgi_lock_owner(s->locks, (uint32_t)en.cache_id, en.key.ptr,
			    en.key.len, hash);
			if (!dgi_txid_eq(&owner, &tx))
				e = DG_ERR_TX_ROLLED_BACK; /* its lock is gone */
		} else {
			e = check_primary(s, c, (uint32_t)en.part, topver);
		}
		if (e != DG_OK) {
			if (dg_log_enabled(DG_LOG_DEBUG))
				dgi_log("debug", "TX-DEBUG", "prepare refused: %s locked_here=%d have=%p st=%d "
				    "topver=%lld/%lld", dg_strerror(e), locked_here, (void *)have,
				    have ? have->st : -1, have ? (long long)have->topver : -1,
				    (long long)m->topver);
			ack(s, in, e, i);
			return;
		}
	}
	if (e == DG_OK && resend) {
		/* a resend of what this node applied already — as the keys'
		 * primary (its commit was not confirmed by every backup), as the
		 * left primary's backup, or in an earlier takeover: the owners
		 * may lack the copies — send them what this node holds and
		 * answer once they confirmed */
		dgi_txs bd, pd;
		if ((dgi_txdone_get(s->done, &key, &done) && done == DGI_TXS_COMMITTED) ||
		    (dgi_txdone_get(s->done, &bkey, &bd) && bd == DGI_TXS_COMMITTED) ||
		    (from == s->self && dgi_txdone_get(s->done, &tx, &pd) &&
		    pd == DGI_TXS_COMMITTED)) {
			recopy(s, in, from);
			return;
		}
		if (dgi_txdone_get(s->done, &key, &done)) {
			ack(s, in, DG_ERR_TX_ROLLED_BACK, -1);
			return;
		}
	}
	if (e == DG_OK && !resend && !locked_here)
		e = fence_check(s, m->topver);
	if (e != DG_OK && dg_log_enabled(DG_LOG_DEBUG))
		dgi_log("debug", "TX-DEBUG", "prepare refused by the fence: %s locked_here=%d have=%p st=%d "
		    "topver=%lld/%lld", dg_strerror(e), locked_here, (void *)have,
		    have ? have->st : -1, have ? (long long)have->topver : -1, (long long)m->topver);
	if (e != DG_OK) {
		ack(s, in, e, -1);
		return;
	}
	pthread_mutex_lock(&s->mu);
	if (resend) {
		/* this node takes over from the left primary: its backup record
		 * of those entries is superseded */
		struct rec *b = rec_find(s, &tx, ROLE_BACKUP, from);
		if (b != NULL)
			rec_unlink(s, b);
	}
	struct rec *r = rec_find(s, &tx, role, from);
	if (r != NULL && r->st != R_ACTIVE) {
		int st = r->st;
		pthread_mutex_unlock(&s->mu);
		/* a repeated PREPARE: prepared already answers again; one still
		 * in progress answers when it ends */
		if (st == R_PREPARED)
			ack(s, in, DG_OK, -1);
		else if (st == R_BACKUP)
			ack(s, in, DG_ERR_STATE, -1);
		else if (resend)
			ack(s, in, DG_ERR_NOT_READY, -1); /* a takeover under way: ask again */
		return;
	}
	if (r == NULL && (r = rec_new(s, &tx, R_ACTIVE, role, from)) == NULL) {
		pthread_mutex_unlock(&s->mu);
		ack(s, in, DG_ERR_NOMEM, -1);
		return;
	}
	if ((e = rec_keep_body(r, in)) != DG_OK) {
		pthread_mutex_unlock(&s->mu);
		finish_role(s, &tx, role, from, DGI_TXS_ROLLED_BACK);
		ack(s, in, e, -1);
		return;
	}
	start_put(s, &tx, m->start_ms); /* (taken out when the record finishes) */
	r->st = R_PREPARING;
	r->start_ms = m->start_ms;
	r->topver = m->topver;
	r->flags = m->flags;
	r->deadline = dgi_now_ms() + (uint64_t)(m->timeout_ms > 0 ? m->timeout_ms : 1);
	r->have_req = true;
	r->req = *in;
	r->req.body = NULL;
	r->req.raw = NULL;
	r->waiting = 1;
	r->refs++; /* this call's */
	uint64_t deadline = r->deadline;
	pthread_mutex_unlock(&s->mu);
	/* lock every entry (writes and checked reads), in the order sent (the
	 * near sorts them) */
	e = ents_open(r->body, r->blen, &mm, &rd, &n);
	for (uint32_t i = 0; i < n && e == DG_OK; i++) {
		dgi_txwire_ent en;
		if ((e = dgi_txwire_get(&rd, &en)) != DG_OK)
			break;
		uint64_t hash;
		dg_cache *c = tx_cache(s, en.cache_id, &e);
		if (c == NULL)
			break;
		dgi_cache_key_part(c, en.key.ptr, en.key.len, &hash);
		pthread_mutex_lock(&s->mu);
		r->waiting++;
		r->refs++;
		pthread_mutex_unlock(&s->mu);
		int res = dgi_lock_acquire(s->locks, (uint32_t)en.cache_id, en.key.ptr, en.key.len,
		    hash, &tx, deadline, on_prep_lock, r);
		if (res == DGI_LOCK_QUEUED) {
			STAT(s, waited);
			check_deadlock(s, &tx);
			continue;
		}
		pthread_mutex_lock(&s->mu);
		r->waiting--;
		r->refs--;
		pthread_mutex_unlock(&s->mu);
		if (res != DGI_LOCK_GRANTED)
			e = (dg_err)-res;
	}
	lock_counted(s, r, e); /* the issuing loop's own count */
}

static void prepare_refused(dgi_txsvc *s, struct rec *r, dg_err bfail);

/* A backup's answer to TX_PREPARE or TX_COMMIT_COPY. */
static void on_backup_answer(void *ctx, dg_err err, const dg_msg_in *reply)
{
	struct rec *r = ctx;
	dgi_txsvc *s = r->s;
	if (err == DG_OK && reply != NULL)
		err = (dg_err)((const dgi_msg_tx_ctl *)reply->body)->res; /* its verdict */
	if (err != DG_OK)
		dgi_log("warn", "TX-BACKUP", "tx=%016llx:%llu err=%s from=%016llx",
		    (unsigned long long)r->id.node, (unsigned long long)r->id.seq,
		    dg_strerror(err), reply != NULL ? (unsigned long long)reply->from : 0ull);
	bool answer = false, unlink = false, refuse = false;
	dg_msg_in req;
	dg_err bfail;
	pthread_mutex_lock(&s->mu);
	if (err != DG_OK && r->bfail == DG_OK)
		r->bfail = err;
	bfail = r->bfail;
	if (--r->acks == 0 && !r->dead) {
		if (r->st == R_PREPARING && bfail != DG_OK) {
			refuse = true; /* ended below, with its pending request */
		} else {
			if (r->st == R_PREPARING)
				r->st = R_PREPARED;
			else if (r->st == R_COMMITTING)
				unlink = true;
			answer = r->have_req;
			req = r->req;
			r->have_req = false;
		}
	}
	pthread_mutex_unlock(&s->mu);
	/* a participant acknowledges only what every backup confirmed (and,
	 * with the owners' digest, with the owners the backups agree on) */
	if (answer && bfail == DG_OK)
		ack(s, &req, DG_OK, -1);
	else if (answer) /* committed here; the near re-sends to the keys'
	                    current primaries or reports the outcome unknown */
		ack_flags(s, &req, DG_ERR_TX_UNKNOWN, -1, DGI_TXA_APPLIED);
	if (refuse)
		prepare_refused(s, r, bfail);
	pthread_mutex_lock(&s->mu);
	if (unlink)
		rec_unlink(s, r);
	rec_unref(s, r);
	pthread_mutex_unlock(&s->mu);
}

/* A backup did not keep r's prepared entries (bfail): the prepare fails
 * here — released and remembered rolled back, the backups that kept them
 * told to drop them, the near answered (a refusal: no one can commit the
 * tx, it rolls back).  A transport error (the backup died, or did not
 * answer) is answered DG_ERR_NOT_READY: the owners are changing. */
static void prepare_refused(dgi_txsvc *s, struct rec *r, dg_err bfail)
{
	struct ended x;
	dgi_txid id = r->id;
	if (!end_role(s, &id, r->role, r->from, DGI_TXS_ROLLED_BACK, ST(R_PREPARING), &x) || !x.had)
		return;
	STAT(s, rolled_back);
	dgi_msg_tx_ctl fw = { (int64_t)id.node, (int64_t)id.seq, DGI_TXP_BACKUP, 0, 0 };
	for (uint32_t i = 0; i < x.bk.n; i++)
		dgi_txsvc_send(s, x.bk.ids[i], DGI_MSG_TX_ROLLBACK, &fw);
	ns_free(&x.bk);
	dg_err e = bfail;
	if (e == DG_ERR_TIMEOUT || e == DG_ERR_CONN_BROKEN || e == DG_ERR_UNREACHABLE ||
	    e == DG_ERR_BUSY || e == DG_ERR_CLOSED)
		e = DG_ERR_NOT_READY;
	if (dg_log_enabled(DG_LOG_DEBUG))
		dgi_log("debug", "TX-DEBUG", "prepare refused: a backup answered %s", dg_strerror(bfail));
	if (x.pending)
		ack(s, &x.req, e, -1);
}

/* Sends body (TX_PREPARE with DGI_TXP_BACKUP, or TX_COMMIT_COPY) to every
 * backup of the entries' partitions; r->acks counts the answers. */
static void to_backups(dgi_txsvc *s, struct rec *r, dg_msg_type type,
    const dgi_msg_tx_prepare *body, const struct nodeset *set, uint32_t timeout_ms)
{
	const uint64_t *bk = set->ids;
	uint32_t nbk = set->n;
	pthread_mutex_lock(&s->mu);
	r->acks += nbk + 1;
	r->refs += nbk + 1;
	pthread_mutex_unlock(&s->mu);
	for (uint32_t i = 0; i < nbk; i++) {
		if (dgi_txsvc_request(s, bk[i], type, body, timeout_ms, on_backup_answer, r) != DG_OK)
			on_backup_answer(r, DG_ERR_UNREACHABLE, NULL);
	}
	on_backup_answer(r, DG_OK, NULL); /* the sender's own count */
}

/* Adds part's owners (current affinity) to t, but this node (which may
 * no longer be the primary) and those already there; and to its digest.
 * DG_ERR_NOMEM when t cannot grow. */
static dg_err add_owners(dgi_txsvc *s, dg_cache *c, int64_t cache_id, uint32_t part,
    struct targets *t)
{
	uint64_t buf[DGI_OWNERS_BUF], *own = buf, oh;
	int64_t tv;
	uint32_t k = dgi_cache_owners_hash(c, part, own, DGI_OWNERS_BUF, &tv, &oh);
	if (k > DGI_OWNERS_BUF) { /* a REPLICATED cache on many servers */
		uint32_t cap = k;
		if ((own = dgi_alloc(cap * sizeof(*own))) == NULL)
			return DG_ERR_NOMEM;
		if ((k = dgi_cache_owners_hash(c, part, own, cap, &tv, &oh)) > cap)
			k = cap; /* grew meanwhile: the digest tells the backups */
	}
	t->digest = digest_add(t->digest, cache_id, part, oh);
	if (k > 0 && (t->topver == 0 || tv < t->topver))
		t->topver = tv;
	dg_err e = DG_OK;
	for (uint32_t j = 0; j < k && e == DG_OK; j++)
		if (own[j] != s->self)
			e = ns_add(&t->bk, own[j]);
	if (own != buf)
		dgi_free(own);
	return e;
}

/* The backups of the partitions of r's written entries (current
 * affinity), into t (targets_init'ed).  DG_ERR_NOMEM: not all of them
 * could be kept. */
static dg_err backups_of(dgi_txsvc *s, struct rec *r, struct targets *t)
{
	dg_reader rd;
	uint32_t n;
	dgi_msg_tx_prepare m;
	dg_err e = ents_open(r->body, r->blen, &m, &rd, &n);
	for (uint32_t i = 0; i < n && e == DG_OK; i++) {
		dgi_txwire_ent en;
		dg_err ce;
		if ((e = dgi_txwire_get(&rd, &en)) != DG_OK)
			break;
		if ((en.op & DGI_TXOP_MASK) == 0)
			continue; /* read only: nothing for a backup to keep */
		dg_cache *c = tx_cache(s, en.cache_id, &ce);
		if (c != NULL)
			e = add_owners(s, c, en.cache_id, (uint32_t)en.part, t);
	}
	return e;
}

static bool same_ver(const dgi_pver *a, const dgi_pver *b)
{
	return a->topver == b->topver && a->counter == b->counter && a->order == b->order;
}

/* The prepare of r failed (err; idx: the entry, or -1): rolled back here,
 * the near answered. */
static void prepare_fail(dgi_txsvc *s, struct rec *r, dg_err err, int64_t idx)
{
	pthread_mutex_lock(&s->mu);
	dg_msg_in req = r->req;
	bool answer = r->have_req;
	r->have_req = false;
	pthread_mutex_unlock(&s->mu);
	finish_rec(s, r, DGI_TXS_ROLLED_BACK);
	STAT(s, rolled_back);
	if (answer)
		ack(s, &req, err, idx);
}

static void prepare_locked(dgi_txsvc *s, struct rec *r)
{
	pthread_mutex_lock(&s->mu);
	bool dead = r->dead;
	dg_err fail = r->fail;
	pthread_mutex_unlock(&s->mu);
	if (dead)
		return;
	int64_t idx = -1;
	dg_reader rd;
	uint32_t n;
	dgi_msg_tx_prepare m;
	if (fail == DG_OK)
		fail = ents_open(r->body, r->blen, &m, &rd, &n);
	for (uint32_t i = 0; fail == DG_OK && i < n; i++) {
		dgi_txwire_ent en;
		if ((fail = dgi_txwire_get(&rd, &en)) != DG_OK)
			break;
		if (!(en.op & DGI_TXOP_CHECK))
			continue;
		dg_cache *c = tx_cache(s, en.cache_id, &fail);
		if (c == NULL)
			break;
		uint64_t hash, own[8];
		int64_t tv;
		dgi_cache_key_part(c, en.key.ptr, en.key.len, &hash);
		dgi_cache_owners(c, (uint32_t)en.part, own, DGI_OWNERS_BUF, &tv);
		bool found;
		dgi_pver cur;
		/* a tx of an older topology reads the copy it locked here */
		if (r->topver != tv)
			tv = 0;
		fail = dgi_cache_tx_read(c, tv, (uint32_t)en.part, hash, en.key.ptr, en.key.len,
		    NULL, &found, &cur);
		if (fail == DG_OK && !same_ver(&cur, &en.ver)) {
			fail = DG_ERR_TX_CONFLICT;
			STAT(s, conflicts);
		}
		if (fail != DG_OK)
			idx = i;
	}
	if (fail != DG_OK) {
		prepare_fail(s, r, fail, idx);
		return;
	}
	if (r->flags & DGI_TXP_ONE_PHASE) {
		pthread_mutex_lock(&s->mu);
		dead = r->dead; /* rolled back meanwhile (the near's rollback, the fence) */
		if (!dead)
			r->st = R_COMMITTING;
		pthread_mutex_unlock(&s->mu);
		if (dead)
			return;
		STAT(s, prepared);
		commit_apply(s, r);
		return;
	}
	/* every backup, however many: one left out would miss the entries
	 * (and the commit's copies) — a tx that cannot name them all fails */
	struct targets t;
	targets_init(&t);
	fail = backups_of(s, r, &t);
	pthread_mutex_lock(&s->mu);
	for (uint32_t i = 0; i < t.bk.n && fail == DG_OK; i++)
		fail = ns_add(&r->bk, t.bk.ids[i]);
	pthread_mutex_unlock(&s->mu);
	if (fail != DG_OK) {
		targets_free(&t);
		prepare_fail(s, r, fail, -1);
		return;
	}
	STAT(s, prepared);
	dgi_msg_tx_prepare fw;
	if (dg_msg_decode(DGI_MSG_TX_PREPARE, NULL, r->body, r->blen, &fw) != DG_OK)
		fw = (dgi_msg_tx_prepare){ 0 };
	fw.flags |= DGI_TXP_BACKUP;
	fw.owners = (int64_t)t.digest;
	fw.otopver = t.topver != 0 ? t.topver : dgi_grid_topver(s->g);
	uint64_t now = dgi_now_ms();
	uint32_t left = r->deadline > now ? (uint32_t)(r->deadline - now) : 1;
	to_backups(s, r, DGI_MSG_TX_PREPARE, &fw, &t.bk, left);
	targets_free(&t);
}

/* ---- TX_COMMIT (primary) ---- */

/* Applies r's writes with new versions, releases its locks and sends the
 * copies to the backups; answers the near node once they applied
 * (FULL_SYNC) or at once. */
static void commit_apply(dgi_txsvc *s, struct rec *r)
{
	dg_reader rd;
	uint32_t n, nw = 0, applied = 0;
	dgi_msg_tx_prepare m;
	dg_err e = ents_open(r->body, r->blen, &m, &rd, &n);
	bool full_sync = false;
	dg_buf fb, *b = tl_buf(copy, &fb);
	dg_writer w;
	dg_writer_init(&w, wire_reg, b);
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
		dg_cache *c = tx_cache(s, en.cache_id, &e);
		if (c == NULL)
			break;
		if (dg_cache_config_of(c)->write_sync == DG_FULL_SYNC)
			full_sync = true;
		uint64_t hash;
		dgi_cache_key_part(c, en.key.ptr, en.key.len, &hash);
		const uint8_t *val = op == DGI_TXOP_PUT ? en.val.ptr : NULL;
		if (op == DGI_TXOP_PUT && val == NULL)
			val = (const uint8_t *)"";
		e = dgi_cache_tx_write(c, (uint32_t)en.part, hash, en.key.ptr, en.key.len, val,
		    en.val.len, r->id.node, r->id.seq, &en.ver, &en.expire_ms);
		if (e != DG_OK)
			break;
		applied++;
		en.val.ptr = val;
		en.op = op;
		e = dgi_txwire_put(&w, &en);
		if (be == DG_OK)
			be = add_owners(s, c, en.cache_id, (uint32_t)en.part, &t);
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
	dgi_txid key = role_key(&r->id, r->role, r->from);
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
		ack(s, &req, e != DG_OK && applied > 0 ? DG_ERR_TX_UNKNOWN : e, -1);
	if (e == DG_OK && t.bk.n > 0) {
		to_backups(s, r, DGI_MSG_TX_COMMIT_COPY, &cp, &t.bk, 10000);
	} else {
		pthread_mutex_lock(&s->mu);
		rec_unlink(s, r);
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
static bool commit_prepared(dgi_txsvc *s, const dg_msg_in *in, const dgi_txid *txp,
    bool may_miss)
{
	dgi_txid tx = *txp;
	pthread_mutex_lock(&s->mu);
	struct rec *r = rec_find(s, &tx, ROLE_PRIMARY, 0);
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
		commit_apply(s, r);
		pthread_mutex_lock(&s->mu);
		rec_unref(s, r);
		pthread_mutex_unlock(&s->mu);
		return true;
	}
	dgi_txs done;
	if (dgi_txdone_get(s->done, &tx, &done) && done == DGI_TXS_COMMITTED && may_miss)
		return false; /* a resend: the caller sends the copies again (recopy) */
	if (dgi_txdone_get(s->done, &tx, &done))
		ack(s, in, done == DGI_TXS_COMMITTED ? DG_OK : DG_ERR_TX_ROLLED_BACK, -1);
	else if (r != NULL)
		ack(s, in, st == R_COMMITTING ? DG_ERR_NOT_READY : DG_ERR_STATE, -1);
	else if (may_miss)
		return false;
	else
		ack(s, in, DG_ERR_NOT_FOUND, -1);
	return true;
}

static void h_commit(dgi_txsvc *s, const dg_msg_in *in)
{
	const dgi_msg_tx_ctl *m = in->body;
	dgi_txid tx = { (uint64_t)m->tx_node, (uint64_t)m->tx_seq };
	/* (even just woken from a pause: the decision is made, and what this
	 * node copies is judged by the owners — a removed node's copies are
	 * refused, and its record must not outlive the tx holding locks) */
	commit_prepared(s, in, &tx, false);
}

/* ---- TX_COMMIT_COPY (backup) ---- */

/* ---- TX_QUERY ---- */

static int done_state(dgi_txsvc *s, const dgi_txid *tx, int role, uint64_t from)
{
	dgi_txid key = role_key(tx, role, from);
	dgi_txs out;
	if (!dgi_txdone_get(s->done, &key, &out))
		return DGI_TXQ_NONE;
	return out == DGI_TXS_COMMITTED ? DGI_TXQ_COMMITTED : DGI_TXQ_ROLLED_BACK;
}

static int rec_state(const struct rec *r)
{
	switch (r->st) {
	case R_ACTIVE: return DGI_TXQ_ACTIVE;
	case R_PREPARING: return DGI_TXQ_PREPARING;
	case R_PREPARED: return DGI_TXQ_PREPARED;
	case R_COMMITTING: return DGI_TXQ_COMMITTING;
	case R_BACKUP: return DGI_TXQ_ACTIVE;
	default: return DGI_TXQ_NONE;
	}
}

static int64_t query_local(dgi_txsvc *s, const dgi_txid *tx, uint64_t origin)
{
	int prim, bk = DGI_TXQ_NONE, near;
	pthread_mutex_lock(&s->mu);
	struct rec *r = rec_find(s, tx, ROLE_PRIMARY, 0);
	prim = r != NULL ? rec_state(r) : DGI_TXQ_NONE;
	if (origin != 0) {
		struct rec *b = rec_find(s, tx, ROLE_BACKUP, origin);
		struct rec *t = rec_find(s, tx, ROLE_TAKEOVER, origin);
		bk = t != NULL ? rec_state(t) : b != NULL ? DGI_TXQ_ACTIVE : DGI_TXQ_NONE;
	}
	pthread_mutex_unlock(&s->mu);
	if (prim == DGI_TXQ_NONE)
		prim = done_state(s, tx, ROLE_PRIMARY, 0);
	if (origin != 0 && bk == DGI_TXQ_NONE) {
		bk = done_state(s, tx, ROLE_TAKEOVER, origin);
		if (bk == DGI_TXQ_NONE)
			bk = done_state(s, tx, ROLE_BACKUP, origin);
		if (bk == DGI_TXQ_NONE)
			bk = done_state(s, tx, ROLE_TAKEN, origin); /* committed (elsewhere) */
	}
	near = done_state(s, tx, ROLE_NEAR, 0);
	if (near == DGI_TXQ_COMMITTED && done_state(s, tx, ROLE_NEAR, 1) == DGI_TXQ_COMMITTED)
		near = DGI_TXQ_COMMITTING; /* decided, not every participant confirmed */
	return prim | (bk << 8) | (near << 16);
}

static void h_query(dgi_txsvc *s, const dg_msg_in *in)
{
	const dgi_msg_tx_ctl *m = in->body;
	dgi_txid tx = { (uint64_t)m->tx_node, (uint64_t)m->tx_seq };
	dgi_msg_tx_ctl r = { m->tx_node, m->tx_seq, 0, DG_OK, query_local(s, &tx, (uint64_t)m->value) };
	reply(s, in, DGI_MSG_TX_ACK, &r);
}

int64_t dgi_txsvc_query(dgi_txsvc *s, uint64_t to, const dgi_txid *tx, uint64_t origin,
    uint32_t timeout_ms)
{
	if (cut_off(s))
		return -1;
	if (to == s->self)
		return query_local(s, tx, origin);
	dgi_msg_tx_ctl m = { (int64_t)tx->node, (int64_t)tx->seq, 0, 0, (int64_t)origin }, r;
	if (dg_tp_call(s->tp, to, DGI_MSG_TX_QUERY, &m, timeout_ms, &r, NULL) != DG_OK ||
	    r.res != DG_OK)
		return -1;
	return r.value;
}

void dgi_txsvc_near_done(dgi_txsvc *s, const dgi_txid *tx, bool committed, bool confirmed)
{
	dgi_txid key = role_key(tx, ROLE_NEAR, 0);
	dgi_txdone_put(s->done, &key, committed ? DGI_TXS_COMMITTED : DGI_TXS_ROLLED_BACK,
	    dgi_now_ms());
	if (committed && !confirmed) {
		dgi_txid u = role_key(tx, ROLE_NEAR, 1); /* "decided, not confirmed" */
		dgi_txdone_put(s->done, &u, DGI_TXS_COMMITTED, dgi_now_ms());
	}
}

bool dgi_txsvc_gone(dgi_txsvc *s, uint64_t node)
{
	pthread_mutex_lock(&s->fmu);
	bool gone = s->fenced && s->f.v != 0 && s->f.t != NULL &&
	    dg_topology_find(s->f.t, node) == NULL;
	pthread_mutex_unlock(&s->fmu);
	return gone;
}

bool dgi_txsvc_alive(dgi_txsvc *s, uint64_t node)
{
	pthread_mutex_lock(&s->fmu);
	bool alive = s->f.t != NULL && dg_topology_find(s->f.t, node) != NULL;
	pthread_mutex_unlock(&s->fmu);
	return alive;
}

static void h_commit_copy(dgi_txsvc *s, const dg_msg_in *in)
{
	const dgi_msg_tx_prepare *m = in->body;
	dgi_txid tx = { (uint64_t)m->tx_node, (uint64_t)m->tx_seq };
	/* DG_OK only with the sender's owners (backup_agrees).  From a node
	 * that is not a member (removed while paused, or one this node does
	 * not know yet) nothing is applied and this node's backup record of
	 * the tx, if any, stays (the near's resend or recovery finishes it);
	 * from a member on another topology the copies are applied (versions
	 * decide) and the answer says the owners differ. */
	bool member;
	dg_err agree = backup_agrees(s, in, m, &member);
	if (!member) {
		if (dg_log_enabled(DG_LOG_DEBUG))
			dgi_log("debug", "TX-DEBUG", "copies refused: %s from=%016llx (not a member)",
			    dg_strerror(agree), (unsigned long long)in->from);
		ack(s, in, agree, -1);
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
		dg_cache *c = tx_cache(s, en.cache_id, &ce);
		if (c == NULL)
			continue; /* destroyed meanwhile */
		uint64_t hash;
		if ((ce = ent_place(c, &en, &hash)) != DG_OK) {
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
	finish_role(s, &tx, ROLE_BACKUP, in->from, DGI_TXS_COMMITTED);
	if (m->origin != 0 && (uint64_t)m->origin != in->from) { /* a takeover's copies */
		pthread_mutex_lock(&s->mu);
		struct rec *b = rec_find(s, &tx, ROLE_BACKUP, (uint64_t)m->origin);
		if (b != NULL)
			rec_unlink(s, b);
		dgi_txid tk = role_key(&tx, ROLE_TAKEN, (uint64_t)m->origin);
		dgi_txdone_put(s->done, &tk, DGI_TXS_COMMITTED, dgi_now_ms());
		pthread_mutex_unlock(&s->mu);
	}
	STAT(s, backup_committed);
	ack(s, in, e, -1);
}

static void h_edges(dgi_txsvc *s, const dg_msg_in *in);
static void h_kill(dgi_txsvc *s, const dg_msg_in *in);

/* Handlers by type (a flat table: type - 128); grid: needs the caches
 * (a bare lock service answers DG_ERR_UNSUPPORTED). */
static const struct handler {
	handler_fn fn;
	bool grid;
} handlers[DGI_MSG_TX_KILL - DGI_MSG_TX_LOCK + 1] = {
#define H(t, f, g) [(t) - DGI_MSG_TX_LOCK] = { f, g }
	H(DGI_MSG_TX_LOCK, h_lock, false),
	H(DGI_MSG_TX_UNLOCK, h_rollback, false),
	H(DGI_MSG_TX_ROLLBACK, h_rollback, false),
	H(DGI_MSG_TX_PREPARE, h_prepare, true),
	H(DGI_MSG_TX_COMMIT, h_commit, false),
	H(DGI_MSG_TX_COMMIT_COPY, h_commit_copy, true),
	H(DGI_MSG_TX_FENCE, h_fence, false),
	H(DGI_MSG_TX_QUERY, h_query, false),
	H(DGI_MSG_TX_EDGES, h_edges, false),
	H(DGI_MSG_TX_KILL, h_kill, false),
#undef H
};

static void dispatch(dgi_txsvc *s, const dg_msg_in *in)
{
	uint32_t i = (uint32_t)in->type - DGI_MSG_TX_LOCK;
	if (i >= sizeof(handlers) / sizeof(handlers[0]) || handlers[i].fn == NULL || cut_off(s))
		return;
	if (handlers[i].grid && s->g == NULL)
		ack(s, in, DG_ERR_UNSUPPORTED, -1);
	else
		handlers[i].fn(s, in);
}

static void on_msg(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	(void)tp;
	dispatch(ctx, in);
}

/* ---- deadlines ---- */

/* ACTIVE records (locks of a tx that never prepared) past their deadline
 * and a grace period: the near node is gone or stuck; release. */
#define ACTIVE_GRACE_MS 2000

static void expire_records(dgi_txsvc *s, uint64_t now)
{
	dgi_txid ids[32];
	int n = 0;
	pthread_mutex_lock(&s->mu);
	for (uint32_t b = 0; b < NBUCKETS && n < 32; b++)
		for (struct rec *r = s->buckets[b]; r != NULL && n < 32; r = r->next)
			if (r->st == R_ACTIVE && r->role == ROLE_PRIMARY && r->deadline != 0 &&
			    r->deadline + ACTIVE_GRACE_MS < now)
				ids[n++] = r->id;
	pthread_mutex_unlock(&s->mu);
	for (int i = 0; i < n; i++)
		if (end_role(s, &ids[i], ROLE_PRIMARY, 0, DGI_TXS_ROLLED_BACK, ST(R_ACTIVE), NULL))
			STAT(s, rolled_back);
}

/* This node is out of the cluster's topology (removed while paused, or
 * cut off), or back in it under a new join order (it rejoined): its
 * participant records belong to a membership it is no longer part of.  It
 * forgets them as a crash would — locks released, pending requests
 * answered DG_ERR_NOT_READY, no outcome remembered (the owners of the new
 * topology finish those txs: the backups keep the prepared entries, the
 * near re-sends) — so that none holds a lock or the fence, or commits by
 * recovery over newer writes (into copies rebalancing has just refreshed),
 * once the node is back.  Runs from on_topology, on the notifier thread,
 * before any listener sees the next version. */
static void forget_records(dgi_txsvc *s, int64_t v)
{
	uint32_t total = 0;
	for (;;) {
		struct { dgi_txid id; int role; bool pending; dg_msg_in req; } g[32];
		int n = 0;
		pthread_mutex_lock(&s->mu);
		if (total == 0)
			s->incarn++; /* recovery's candidates found before are void */
		for (uint32_t b = 0; b < NBUCKETS && n < 32; b++) {
			struct rec *r = s->buckets[b];
			while (r != NULL && n < 32) {
				struct rec *next = r->next;
				g[n].id = r->id;
				g[n].role = r->role;
				g[n].pending = r->have_req;
				g[n].req = r->req;
				r->have_req = false;
				if (r->role != ROLE_BACKUP)
					start_del(s, &r->id);
				rec_unlink(s, r);
				n++;
				r = next;
			}
		}
		pthread_mutex_unlock(&s->mu);
		for (int i = 0; i < n; i++) {
			if (g[i].role != ROLE_BACKUP)
				dgi_lock_release_all(s->locks, &g[i].id);
			if (g[i].pending)
				ack(s, &g[i].req, DG_ERR_NOT_READY, -1);
		}
		total += (uint32_t)n;
		if (n < 32)
			break;
	}
	if (total > 0)
		dgi_log("warn", "TX-FORGOTTEN", "records=%u topology=%lld why=\"this node "
		    "was out of the cluster's topology: its records are the new owners' to finish\"",
		    total, (long long)v);
}

/* ---- recovery ----
 * A tx whose near node left, or whose record outlived its timeout by
 * RECOVER_GRACE_MS, is finished by its participants: a primary that had
 * not prepared rolls back; a prepared primary, and a backup whose primary
 * left too, ask the near node (when it is alive) or every node what became
 * of the tx — committed anywhere (or decided by the near): commit (a
 * backup takes over: applies the entries it keeps and copies them to the
 * keys' owners); nobody committed and the near left: roll back (its commit
 * call never returned).  Versions make a repeated apply harmless, and the
 * topology fence keeps new locks off those keys until it is done. */
#define RECOVER_GRACE_MS 3000
#define RECOVER_MAX 32

struct cand {
	dgi_txid id;
	int role, st;
	uint64_t from;
	bool near_left;
	int64_t nparts;             /* primaries the tx prepared on (0: unknown) */
	uint64_t incarn;            /* s->incarn when found: forgotten since if not */
};

/* Ends a record that will not commit (if still as it was found): releases,
 * tells its backups. */
static void recover_rollback(dgi_txsvc *s, const struct cand *c)
{
	struct ended x;
	if (!end_role(s, &c->id, c->role, c->from, DGI_TXS_ROLLED_BACK, ST(c->st), &x))
		return;
	dgi_msg_tx_ctl fw = { (int64_t)c->id.node, (int64_t)c->id.seq, DGI_TXP_BACKUP, 0, 0 };
	for (uint32_t i = 0; c->role == ROLE_PRIMARY && i < x.bk.n; i++)
		dgi_txsvc_send(s, x.bk.ids[i], DGI_MSG_TX_ROLLBACK, &fw);
	ns_free(&x.bk);
	if (!x.had)
		return;
	atomic_fetch_add(&s->recovered_rollback, 1);
	dgi_log("warn", "TX-RECOVERED", "outcome=rollback tx=%016llx:%llu role=%d",
	    (unsigned long long)c->id.node, (unsigned long long)c->id.seq, c->role);
}

/* Commits a prepared primary record, or takes over a backup's entries. */
static void recover_commit(dgi_txsvc *s, const struct cand *c)
{
	pthread_mutex_lock(&s->mu);
	struct rec *r = rec_find(s, &c->id, c->role, c->from);
	bool go = r != NULL && r->st == c->st && s->incarn == c->incarn;
	if (go) {
		r->st = R_COMMITTING;
		r->have_req = false;
		if (c->role == ROLE_BACKUP) {
			r->role = ROLE_TAKEOVER; /* applies as the keys' primary would */
			r->flags |= DGI_TXP_ONE_PHASE;
		}
		r->refs++;
	}
	pthread_mutex_unlock(&s->mu);
	if (!go)
		return;
	if (c->role == ROLE_BACKUP) {
		dgi_lock_release_all(s->locks, &c->id); /* (holds none: nothing to wait for) */
		/* the backup's own memory of these entries: committed */
		dgi_txid bkey = role_key(&c->id, ROLE_BACKUP, c->from);
		dgi_txdone_put(s->done, &bkey, DGI_TXS_COMMITTED, dgi_now_ms());
	}
	commit_apply(s, r);
	pthread_mutex_lock(&s->mu);
	rec_unref(s, r);
	pthread_mutex_unlock(&s->mu);
	atomic_fetch_add(&s->recovered_commit, 1);
	dgi_log("warn", "TX-RECOVERED", "outcome=commit tx=%016llx:%llu role=%d",
	    (unsigned long long)c->id.node, (unsigned long long)c->id.seq, c->role);
}

/* What the cluster knows of c's tx: 1 commit, 2 commit and the near node
 * confirmed every participant applied it, 0 roll back, -1 not yet. */
static int recover_decide(dgi_txsvc *s, const struct cand *c)
{
	if (!c->near_left) {
		int64_t q = dgi_txsvc_query(s, c->id.node, &c->id, 0, 2000);
		int near = q >= 0 ? (int)((q >> 16) & 0xff) : DGI_TXQ_NONE;
		if (near == DGI_TXQ_COMMITTED)
			return 2;
		if (near == DGI_TXQ_COMMITTING)
			return 1; /* decided, gave up confirming: the participants finish it */
		return near == DGI_TXQ_ROLLED_BACK ? 0 : -1;
	}
	dg_topology *t = fence_topology(s);
	uint32_t n = t != NULL ? t->count : 0;
	/* the near node left: committed anywhere, commit; rolled back
	 * anywhere, roll back; else commit iff every primary prepared (the
	 * near could have decided either way only from there on, and no one
	 * heard a decision) */
	int64_t prepared = c->role == ROLE_PRIMARY ? 1 : 0; /* this node's record */
	int d = -2;
	for (uint32_t i = 0; i < n && d == -2; i++) {
		if (t->nodes[i].id == s->self)
			continue;
		int64_t q = dgi_txsvc_query(s, t->nodes[i].id, &c->id,
		    c->role == ROLE_BACKUP ? c->from : 0, 2000);
		int prim = (int)(q & 0xff), bk = (int)((q >> 8) & 0xff);
		if (q < 0)
			d = -1; /* a node did not answer: ask again later */
		else if (prim == DGI_TXQ_COMMITTED || prim == DGI_TXQ_COMMITTING ||
		    bk == DGI_TXQ_COMMITTED)
			d = 1;
		else if (prim == DGI_TXQ_ROLLED_BACK)
			d = 0;
		else
			prepared += prim == DGI_TXQ_PREPARED;
	}
	if (t != NULL)
		dg_topology_release(t);
	if (d != -2)
		return d;
	return c->role == ROLE_PRIMARY && c->nparts > 1 && prepared >= c->nparts ? 1 : 0;
}

_Atomic uint32_t dgi_tx_recover_stall_ms;

static void recover_scan(dgi_txsvc *s)
{
	/* tests: a round as slow as one whose questions wait for nodes that
	 * do not answer (2 s each) */
	uint64_t t0 = dgi_now_ms();
	while (dgi_now_ms() - t0 < atomic_load(&dgi_tx_recover_stall_ms) &&
	    !atomic_load(&s->stopping)) {
		struct timespec ts = { 0, 10 * 1000000L };
		nanosleep(&ts, NULL);
	}
	struct cand cs[RECOVER_MAX];
	int n = 0;
	uint64_t now = dgi_now_ms();
	pthread_mutex_lock(&s->mu);
	for (uint32_t b = 0; b < NBUCKETS && n < RECOVER_MAX; b++)
		for (struct rec *r = s->buckets[b]; r != NULL && n < RECOVER_MAX; r = r->next) {
			if (r->dead || r->role == ROLE_TAKEOVER || r->st == R_COMMITTING)
				continue;
			bool stale = r->deadline != 0 && now > r->deadline + RECOVER_GRACE_MS;
			cs[n] = (struct cand){ r->id, r->role, r->st, r->from, false, 0, s->incarn };
			dgi_msg_tx_prepare pm;
			if (r->body != NULL && dg_msg_decode(DGI_MSG_TX_PREPARE, NULL, r->body, r->blen,
			    &pm) == DG_OK)
				cs[n].nparts = pm.nparts;
			if (r->role == ROLE_PRIMARY && r->st == R_PREPARED && stale)
				n++;
			else if (r->role == ROLE_BACKUP && (stale ||
			    (s->fenced && !dgi_txsvc_alive(s, r->from))))
				n++; /* its primary left: ask at once (the fence waits for it) */
			else if (r->role == ROLE_PRIMARY && (r->st == R_ACTIVE || r->st == R_PREPARED) &&
			    s->fenced && !dgi_txsvc_alive(s, r->id.node))
				n++; /* its near node left */
		}
	pthread_mutex_unlock(&s->mu);
	for (int i = 0; i < n; i++) {
		struct cand *c = &cs[i];
		pthread_mutex_lock(&s->mu);
		bool forgotten = s->incarn != c->incarn;
		pthread_mutex_unlock(&s->mu);
		if (forgotten)
			break; /* every record found is gone (forget_records) */
		c->near_left = s->fenced && !dgi_txsvc_alive(s, c->id.node);
		bool stale_only = !c->near_left;
		if (c->role == ROLE_PRIMARY && c->st == R_ACTIVE) {
			if (c->near_left)
				recover_rollback(s, c); /* never prepared: nothing to keep */
			continue;
		}
		if (c->role == ROLE_BACKUP && dgi_txsvc_alive(s, c->from) && stale_only) {
			/* its primary is alive and finishes it — unless it ended the
			 * tx without a word reaching this node (a lost message) or
			 * forgot it: ask it */
			int64_t q = dgi_txsvc_query(s, c->from, &c->id, 0, 2000);
			int prim = q >= 0 ? (int)(q & 0xff) : -1;
			if (prim == DGI_TXQ_ROLLED_BACK || prim == DGI_TXQ_COMMITTED) {
				/* rolled back: drop; committed there: its copies (or the
				 * near's re-sends of them) are the owners' — applying the
				 * kept entries anew could overwrite later writes */
				if (end_role(s, &c->id, ROLE_BACKUP, c->from, prim == DGI_TXQ_COMMITTED ?
				    DGI_TXS_COMMITTED : DGI_TXS_ROLLED_BACK, ST(R_BACKUP), NULL))
					dgi_log("warn", "TX-RECOVERED", "outcome=forgotten "
					    "tx=%016llx:%llu role=%d why=\"its primary %s it\"",
					    (unsigned long long)c->id.node, (unsigned long long)c->id.seq,
					    c->role, prim == DGI_TXQ_COMMITTED ? "committed" : "rolled back");
				continue;
			}
			if (prim != DGI_TXQ_NONE)
				continue; /* still at it (or no answer: ask again) */
			/* it knows nothing of the tx: the near node decides, as when
			 * the primary left */
		}
		/* (a backup whose primary left, its near alive: the near's answer
		 * decides — committed: take over; rolled back: drop; deciding:
		 * ask again next round) */
		if (c->role == ROLE_PRIMARY && stale_only) {
			pthread_mutex_lock(&s->mu);
			struct rec *r = rec_find(s, &c->id, c->role, c->from);
			bool stale = r != NULL && r->deadline != 0 &&
			    now > r->deadline + RECOVER_GRACE_MS;
			pthread_mutex_unlock(&s->mu);
			if (!stale)
				continue;
		}
		int d = recover_decide(s, c);
		if (d == 2 && c->role == ROLE_PRIMARY) {
			/* the same for a prepared primary the near went round (its
			 * resends reached the keys' later primaries): release, and
			 * let its backups forget their records too (an empty copy) */
			struct ended x;
			if (end_role(s, &c->id, ROLE_PRIMARY, 0, DGI_TXS_COMMITTED, ST(R_PREPARED), &x) &&
			    x.had) {
				dg_buf eb;
				dg_buf_init(&eb);
				dg_writer w;
				dg_writer_init(&w, wire_reg, &eb);
				if (dg_write_list_begin(&w, 0) == DG_OK && dg_write_end(&w) == DG_OK) {
					int64_t tv = dgi_grid_topver(s->g);
					dgi_msg_tx_prepare cp = { (int64_t)c->id.node, (int64_t)c->id.seq, 0, 0,
						tv, 0, (int64_t)s->self, 0, 0, tv, { eb.data, (uint32_t)eb.len } };
					for (uint32_t k = 0; k < x.bk.n; k++)
						dgi_txsvc_send(s, x.bk.ids[k], DGI_MSG_TX_COMMIT_COPY, &cp);
				}
				dg_buf_free(&eb);
				ns_free(&x.bk);
				if (x.pending)
					ack(s, &x.req, DG_ERR_NOT_READY, -1);
				dgi_log("warn", "TX-RECOVERED", "outcome=forgotten tx=%016llx:%llu "
				    "role=%d why=\"committed and confirmed by its near node\"",
				    (unsigned long long)c->id.node, (unsigned long long)c->id.seq, c->role);
			}
		} else if (d == 2) {
			/* the near node saw every participant apply it (its resends
			 * made the keys' primaries apply it and copy it here).
			 * Applying the kept entries again (new versions) would
			 * overwrite whatever later txs wrote: only forget them */
			finish_role(s, &c->id, ROLE_BACKUP, c->from, DGI_TXS_COMMITTED);
		} else if (d >= 1) {
			recover_commit(s, c);
		} else if (d == 0) {
			recover_rollback(s, c);
		}
	}
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
	dg_writer_init(&w, wire_reg, b);
	dg_err e = dg_write_list_begin(&w, (uint32_t)(n * EDGE_FIELDS));
	for (size_t i = 0; i < n && e == DG_OK; i++) {
		pthread_mutex_lock(&s->mu);
		int64_t v[8] = { (int64_t)ed[i].waiter.node, (int64_t)ed[i].waiter.seq,
			start_of(s, &ed[i].waiter), (int64_t)ed[i].owner.node, (int64_t)ed[i].owner.seq,
			start_of(s, &ed[i].owner), ed[i].cache_id, ed[i].klen };
		pthread_mutex_unlock(&s->mu);
		e = put_i64s(&w, v, 8);
		if (e == DG_OK)
			e = dg_write_bytes(&w, ed[i].key,
			    ed[i].klen < sizeof(ed[i].key) ? ed[i].klen : sizeof(ed[i].key));
	}
	return e != DG_OK ? e : dg_write_end(&w);
}

static void h_edges(dgi_txsvc *s, const dg_msg_in *in)
{
	dg_buf fb, *b = tl_buf(edges, &fb);
	if (encode_edges(s, b) != DG_OK) {
		ack(s, in, DG_ERR_NOMEM, -1);
	} else {
		dg_msg_raw r = { { b->data, (uint32_t)b->len } };
		reply(s, in, DGI_MSG_TX_EDGES_RES, &r);
	}
	dg_buf_free(&fb);
}

static void h_kill(dgi_txsvc *s, const dg_msg_in *in)
{
	const dgi_msg_tx_ctl *m = in->body;
	dgi_txid v = { (uint64_t)m->tx_node, (uint64_t)m->tx_seq };
	if (m->flags & DGI_TXK_NEAR) { /* an operator's kill, asked of the near node */
		dg_err e = v.node == s->self ? dgi_tx_near_kill(s, v.seq) : DG_ERR_NOT_FOUND;
		ack(s, in, e, -1);
		return;
	}
	kill_victim(s, &v, m->flags & DGI_TXK_ADMIN ? DG_ERR_TX_ROLLED_BACK : DG_ERR_DEADLOCK);
}

void dgi_txsvc_kill(dgi_txsvc *s, const dgi_txid *tx, int64_t flags)
{
	dg_topology *t = fence_topology(s);
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
		if (get_i64s(&r, v, 8) != DG_OK || dg_read_bytes(&r, &k, NULL) != DG_OK)
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

static void deadlock_tick(dgi_txsvc *s)
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
	dg_topology *t = fence_topology(s);
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
	if (ls.waiters > 0 && s->dl_next == 0)
		s->dl_next = dgi_now_ms() + 100;
	pthread_mutex_unlock(&s->mu);
}

static void *detector(void *arg)
{
	dgi_txsvc *s = arg;
	while (!atomic_load(&s->stopping)) {
		struct timespec ts = { 0, 10 * 1000000L };
		nanosleep(&ts, NULL);
		deadlock_tick(s);
	}
	return NULL;
}

static void *recoverer(void *arg)
{
	dgi_txsvc *s = arg;
	uint64_t last = dgi_now_ms();
	while (!atomic_load(&s->stopping)) {
		struct timespec ts = { 0, 10 * 1000000L }; /* (a stop waits for no more) */
		nanosleep(&ts, NULL);
		uint64_t now = dgi_now_ms();
		if (now - last >= 100) {
			last = now;
			recover_scan(s);
		}
	}
	return NULL;
}

static void *expirer(void *arg)
{
	dgi_txsvc *s = arg;
	uint64_t last_scan = 0;
	while (!atomic_load(&s->stopping)) {
		struct timespec ts = { 0, 10 * 1000000L };
		nanosleep(&ts, NULL);
		uint64_t now = dgi_now_ms();
		dgi_locks_expire(s->locks, now);
		local_expire(s, now);
		fence_tick(s, now);
		if (now - last_scan >= 200) {
			last_scan = now;
			expire_records(s, now);
			dgi_txdone_expire(s->done, now);
		}
	}
	return NULL;
}

/* ---- start / stop ---- */

static const dg_msg_type handled[] = { DGI_MSG_TX_LOCK, DGI_MSG_TX_UNLOCK, DGI_MSG_TX_PREPARE,
	DGI_MSG_TX_COMMIT, DGI_MSG_TX_ROLLBACK, DGI_MSG_TX_COMMIT_COPY, DGI_MSG_TX_FENCE,
	DGI_MSG_TX_QUERY, DGI_MSG_TX_EDGES, DGI_MSG_TX_KILL };
#define NHANDLED (sizeof(handled) / sizeof(handled[0]))

/* How long a finished tx is remembered (late and repeated messages,
 * recovery questions: well past any tx timeout; memory grows with the tx
 * rate times this). */
#define DONE_KEEP_MS (60 * 1000)

dg_err dgi_txsvc_start(dg_tp *tp, dgi_grid *g, dgi_txsvc **out)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, define_rows);
	dgi_txsvc *s = dgi_calloc(1, sizeof(*s));
	if (s == NULL)
		return DG_ERR_NOMEM;
	s->tp = tp;
	s->g = g;
	s->self = dg_tp_self(tp);
	pthread_mutex_init(&s->mu, NULL);
	pthread_mutex_init(&s->lmu, NULL);
	pthread_mutex_init(&s->fmu, NULL);
	pthread_mutex_init(&s->live.mu, NULL);
	dg_err e;
	if ((e = dgi_locks_create(0, &s->locks)) != DG_OK || (e = dgi_wfg_create(&s->wfg)) != DG_OK ||
	    (e = dgi_wfg_create(&s->gwfg)) != DG_OK ||
	    (e = dgi_txdone_create(DONE_KEEP_MS, &s->done)) != DG_OK)
		goto fail;
	if (pthread_create(&s->expirer, NULL, expirer, s) != 0) {
		e = DG_ERR_NOMEM;
		goto fail;
	}
	s->expirer_up = true;
	if (pthread_create(&s->detector, NULL, detector, s) != 0) {
		e = DG_ERR_NOMEM;
		goto fail;
	}
	s->detector_up = true;
	if (g != NULL && pthread_create(&s->recoverer, NULL, recoverer, s) != 0) {
		e = DG_ERR_NOMEM;
		goto fail;
	}
	s->recoverer_up = g != NULL;
	for (size_t i = 0; i < NHANDLED; i++)
		dg_tp_handle(tp, handled[i], on_msg, s);
	*out = s;
	return DG_OK;
fail:
	s->tp = NULL;
	dgi_txsvc_stop(s);
	return e;
}

void dgi_txsvc_stop(dgi_txsvc *s)
{
	if (s == NULL)
		return;
	if (s->tp != NULL) {
		for (size_t i = 0; i < NHANDLED; i++)
			dg_tp_handle(s->tp, handled[i], NULL, NULL);
		dg_tp_quiesce(s->tp);
	}
	atomic_store(&s->stopping, true);
	if (s->expirer_up)
		pthread_join(s->expirer, NULL);
	if (s->detector_up)
		pthread_join(s->detector, NULL);
	if (s->recoverer_up)
		pthread_join(s->recoverer, NULL);
	/* the backups' answers still to come (a node killed with copies in
	 * flight; recovery sends some too): answered now, none running after */
	if (s->tp != NULL)
		dg_tp_cancel(s->tp, on_backup_answer);
	dgi_member_release(atomic_exchange(&s->m, NULL)); /* no handler runs now */
	local_expire(s, UINT64_MAX);
	dgi_locks_destroy(s->locks); /* answers every waiter DG_ERR_CLOSED */
	for (uint32_t b = 0; b < NBUCKETS; b++) {
		struct rec *r = s->buckets[b];
		while (r != NULL) {
			struct rec *nx = r->next;
			if (r->body != NULL && r->body != r->inl)
				dgi_free(r->body);
			dgi_free(r);
			r = nx;
		}
	}
	while (s->free_waiters != NULL) {
		struct waiter *nx = s->free_waiters->next_free;
		dgi_free(s->free_waiters);
		s->free_waiters = nx;
	}
	while (s->free_recs != NULL) {
		struct rec *nx = s->free_recs->next;
		dgi_free(s->free_recs);
		s->free_recs = nx;
	}
	if (s->f.t != NULL)
		dg_topology_release(s->f.t);
	dgi_txdone_destroy(s->done);
	dgi_wfg_destroy(s->wfg);
	dgi_wfg_destroy(s->gwfg);
	dgi_free(s->gedges);
	dgi_free(s->edges);
	dgi_free(s->starts);
	dgi_free(s->starts_spare);
	pthread_mutex_destroy(&s->mu);
	pthread_mutex_destroy(&s->lmu);
	pthread_mutex_destroy(&s->fmu);
	pthread_mutex_destroy(&s->live.mu);
	dgi_free(s);
}

void dgi_txsvc_get_stats(dgi_txsvc *s, dgi_txsvc_stats *out)
{
	out->granted = atomic_load(&s->granted);
	out->waited = atomic_load(&s->waited);
	out->timeouts = atomic_load(&s->timeouts);
	out->deadlocks = atomic_load(&s->deadlocks);
	out->unlocks = atomic_load(&s->unlocks);
	out->prepared = atomic_load(&s->prepared);
	out->committed = atomic_load(&s->committed);
	out->rolled_back = atomic_load(&s->rolled_back);
	out->conflicts = atomic_load(&s->conflicts);
	out->backup_prepared = atomic_load(&s->backup_prepared);
	out->backup_committed = atomic_load(&s->backup_committed);
	pthread_mutex_lock(&s->mu);
	out->records = s->nrecs;
	pthread_mutex_unlock(&s->mu);
	pthread_mutex_lock(&s->fmu);
	out->fence_version = s->f.v;
	out->fence_open = s->f.open;
	pthread_mutex_unlock(&s->fmu);
	out->fence_rollbacks = atomic_load(&s->fence_rollbacks);
	out->recovered_commit = atomic_load(&s->recovered_commit);
	out->recovered_rollback = atomic_load(&s->recovered_rollback);
	out->global_deadlocks = atomic_load(&s->global_deadlocks);
	dgi_locks_stats ls;
	dgi_locks_get_stats(s->locks, &ls);
	out->locks_held = ls.locks;
	out->lock_waiters = ls.waiters;
}

dg_tp *dgi_txsvc_tp(dgi_txsvc *s)
{
	return s->tp;
}

dgi_grid *dgi_txsvc_grid(dgi_txsvc *s)
{
	return s->g;
}

uint64_t dgi_txsvc_self(dgi_txsvc *s)
{
	return s->self;
}

dgi_txnear_stats *dgi_txsvc_near(dgi_txsvc *s)
{
	return &s->near;
}

dgi_txnear_live *dgi_txsvc_live(dgi_txsvc *s)
{
	return &s->live;
}

/* ---- the admin CLI: dgctl tx list / tx kill ---- */

static const char *rec_state_name(const struct rec *r)
{
	switch (r->st) {
	case R_ACTIVE: return "ACTIVE";
	case R_PREPARING: return "PREPARING";
	case R_PREPARED: return "PREPARED";
	case R_COMMITTING: return "COMMITTING";
	case R_BACKUP: return "PREPARED"; /* keeps the entries until the commit */
	default: return "UNKNOWN";
	}
}

#define KEYS_FROM_LOCKS UINT32_MAX

static void rec_info(const struct rec *r, uint64_t now, dgi_tx_info *o)
{
	memset(o, 0, sizeof(*o));
	o->id = r->id.seq;
	o->near = r->id.node;
	o->role = r->role == ROLE_BACKUP ? 2 : 1;
	o->state = rec_state_name(r);
	o->concurrency = o->isolation = -1;
	o->age_ms = now > r->made_ms ? now - r->made_ms : 0;
	o->timeout_ms = r->deadline > r->made_ms ? (uint32_t)(r->deadline - r->made_ms) : 0;
	o->keys = KEYS_FROM_LOCKS; /* no entries yet: its locks say (outside s->mu) */
	dgi_msg_tx_prepare m;
	dg_reader rd;
	uint32_t count;
	if (r->body != NULL && ents_open(r->body, r->blen, &m, &rd, &count) == DG_OK)
		o->keys = count;
}

/* The participant records, up to cap into out; returns how many there are. */
static size_t list_records(dgi_txsvc *s, dgi_tx_info *out, size_t cap)
{
	size_t n = 0;
	uint64_t now = dgi_now_ms();
	pthread_mutex_lock(&s->mu);
	for (uint32_t b = 0; b < NBUCKETS; b++)
		for (const struct rec *r = s->buckets[b]; r != NULL; r = r->next, n++)
			if (n < cap)
				rec_info(r, now, &out[n]);
	pthread_mutex_unlock(&s->mu);
	for (size_t i = 0; i < n && i < cap; i++)
		if (out[i].keys == KEYS_FROM_LOCKS) {
			dgi_txid id = { out[i].near, out[i].id };
			out[i].keys = dgi_locks_tx_count(s->locks, &id);
		}
	return n;
}

size_t dgi_tx_list(dgi_txsvc *s, dgi_tx_info *out, size_t cap)
{
	if (s == NULL || (out == NULL && cap > 0))
		return 0;
	size_t n = dgi_tx_near_list(s, out, cap);
	return n + list_records(s, n < cap ? out + n : NULL, n < cap ? cap - n : 0);
}

/* How long a kill waits for the near node's answer. */
#define KILL_WAIT_MS 5000

dg_err dgi_tx_kill(dgi_txsvc *s, uint64_t near, uint64_t id)
{
	if (s == NULL || near == 0 || id == 0)
		return DG_ERR_INVAL;
	if (near == s->self)
		return dgi_tx_near_kill(s, id);
	if (!dgi_txsvc_alive(s, near))
		return DG_ERR_NOT_FOUND; /* its txs are being finished by recovery */
	dgi_msg_tx_ctl m = { (int64_t)near, (int64_t)id, DGI_TXK_NEAR, 0, 0 }, r;
	dg_err e = dg_tp_call(s->tp, near, DGI_MSG_TX_KILL, &m, KILL_WAIT_MS, &r, NULL);
	return e != DG_OK ? e : (dg_err)r.res;
}
