/*
 * txsvc_int.h — internals of the transaction service (txn/, private to the
 * files below; the rest of txn/ uses txsvc.h).
 *
 * The transaction service of a node: the lock service (TX_LOCK,
 * deadlines, deadlock detection when a request starts waiting), the
 * participant side of two-phase commit (TX_PREPARE, TX_COMMIT,
 * TX_ROLLBACK, TX_COMMIT_COPY) and the local dispatch of requests a node
 * sends itself.  See txsvc.h.
 *
 * Files
 * -----
 * txsvc.c      start and stop, the three threads, the handler table and
 *              dispatch, stats, the admin listing (dgctl tx list / tx kill)
 * txwire.c     codecs: the message rows, entries on the wire, a PREPARE
 *              body's entry list
 * txlocal.c    requests a node sends itself (run here on a decoded copy),
 *              replies and acks, the per-thread scratch buffers
 * txrec.c      participant records, the start-time table, ending a role,
 *              deadlines, forgetting every record (a past membership)
 * txplace.c    where entries belong: this node's caches, a key's
 *              partition and primary, the owner digest of copies
 * txfence.c    a node woken from a pause, the topology fence
 * txlock.c     TX_LOCK, TX_UNLOCK, TX_ROLLBACK
 * txdeadlock.c victims, deadlocks on this node and across nodes (TX_EDGES,
 *              TX_KILL)
 * txprepare.c  TX_PREPARE as the keys' primary and as a backup, resends of
 *              applied entries (recopy), the backups' answers
 * txcommit.c   TX_COMMIT, TX_COMMIT_COPY
 * txrecover.c  TX_QUERY (and which owner applied a left primary's copies),
 *              and recovery of txs whose near node or primary left
 *
 * Objects
 * -------
 * dgi_txsvc  one per node: the record table, the start-time table, the
 *            lock table (lockq.c), finished txs (txdone.c), the wait-for
 *            graphs, the slots of requests it sent itself, the fence, the
 *            three threads and the counters.
 * rec        a participant record.  Every tx that holds locks or prepared
 *            entries on this node has one record per role (primary,
 *            backup of each primary it came from, takeover of each left
 *            primary) in an int-keyed table by tx id (chained, NBUCKETS
 *            buckets; no boxing): its state, deadline, the PREPARE body's
 *            bytes (the entries; one allocation), the backups it was
 *            forwarded to and the request waiting for an answer.  Records
 *            come from a free list (a record whose body fits its inline
 *            buffer allocates nothing in steady state).  A finished tx's
 *            outcome goes to txdone (late or repeated messages).
 * waiter     a TX_LOCK waiting for its lock, from a pool; it belongs to
 *            the lock's callback once queued.
 * fence      the topology the fence is at (held), which of its nodes
 *            reported, the reports ahead of it and the near commits in
 *            flight by version.
 *
 * Locks
 * -----
 * s->mu   guards the record table and records (buckets, free_recs, nrecs,
 *         nfree, incarn), the start times (starts, starts_spare, scap,
 *         sused, slive), this node's wait-for graph (wfg, edges, ecap), the
 *         victims being released (victims, victim_err, nvictims), the
 *         waiter pool (free_waiters, nfree_waiters) and dl_next; the
 *         detector sleeps on dl_cv and the recoverer on stop_cv with it.
 * s->lmu  guards the slots of requests this node sent itself (local,
 *         local_gen).  Nothing is locked under it; a reply's callback runs
 *         after it is released.
 * s->fmu  guards the fence (f) and fence_timeout_ms.  fenced and m are
 *         atomics, written under it (dgi_txsvc_joined), read without it.
 *         It may be taken under s->mu (a lock or prepare checks the fence
 *         as it makes its record), never s->mu under it.
 * Without a lock: tp, g, self, locks, done (set at start); the thread
 *         handles (start and stop); blocked_logged_ms (the expirer's:
 *         dgi_svc_fence_tick); gwfg, gedges, gecap (the detector's:
 *         dgi_svc_deadlock_tick); the counters, stopping and stale_*
 *         (atomics); near (atomics) and live (live.mu) are txn.c's.
 *
 * A record's st, refs, waiting, acks, bfail, fail, have_req, req, bk, dead
 * and next are read and written under s->mu only.  Its id, role, from,
 * start_ms, topver, flags, deadline, body and blen are written under s->mu
 * when it is made or starts its prepare (dgi_svc_h_prepare) — and
 * deadline by TX_LOCK while it is ACTIVE, role and flags by recover_commit
 * as a backup record becomes a takeover — and read without s->mu by the
 * thread that runs its prepare or commit, which holds a reference (s,
 * made_ms and fail_idx are set when it is made and never change).  refs
 * counts the callbacks still to come (its prepare's lock grants, backup
 * answers) and the calls running on it outside s->mu; dgi_svc_rec_unlink
 * takes a record out of the table (dead) and it is freed, or goes back to
 * the free list, when refs drops to 0 (dgi_svc_rec_unref).
 *
 * Rules
 * - dgi_lock_acquire, dgi_lock_release_all, dgi_locks_expire and
 *   dgi_locks_destroy may run lock callbacks (on_lock_done, on_prep_lock),
 *   which take s->mu: they are called without s->mu, and so is everything
 *   that may call them (dgi_svc_end_role, dgi_svc_commit_apply,
 *   kill_victim).
 * - dgi_txsvc_request and dgi_txsvc_send to this node run the handler in
 *   the calling thread, and handlers take s->mu: never called under it.
 *   A reply to a request this node sent itself runs the requester's
 *   callback in the replying thread: the near side's (txn.c: it takes its
 *   tx's mutex and wakes it) — dgi_svc_on_backup_answer (which takes
 *   s->mu) never gets one, as a primary never counts itself among its
 *   backups (dgi_svc_add_owners).  Replies and sends to other nodes never
 *   call back into this service in the calling thread (a request's callback
 *   runs on a transport thread).  No send or reply is made under s->mu.
 * - Lock order: s->mu, then s->fmu (dgi_svc_recover_scan asks
 *   dgi_txsvc_alive under s->mu); s->mu, then the lock table's own locks
 *   (dgi_svc_check_deadlock reads dgi_locks_edges under s->mu; lockq.c runs
 *   callbacks with none of its locks held) and txdone's (dgi_txdone_put
 *   under s->mu).  Nothing of this service is locked under s->fmu or
 *   s->lmu, and no two of them are taken in the other order.
 */
#ifndef DG_TXN_TXSVC_INT_H
#define DG_TXN_TXSVC_INT_H

#include "txsvc.h"
#include "txentries.h"
#include "wfg.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

/* ---- node sets, records ---- */

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

static inline void ns_init(struct nodeset *ns)
{
	ns->n = 0;
	ns->cap = NODESET_INLINE;
	ns->ids = ns->inl;
}

static inline void ns_free(struct nodeset *ns)
{
	if (ns->ids != ns->inl)
		dgi_free(ns->ids);
	ns_init(ns);
}

/* Adds id unless there.  DG_ERR_NOMEM (unchanged) when it must grow and
 * cannot. */
static inline dg_err ns_add(struct nodeset *ns, uint64_t id)
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
static inline void ns_move(struct nodeset *dst, struct nodeset *src)
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
enum rec_role { ROLE_PRIMARY = 0, ROLE_BACKUP, ROLE_TAKEOVER, ROLE_NEAR, ROLE_TAKEN, ROLE_COPIED };
/* ROLE_TAKEN keys no record, only a finished-tx entry: copies of a left
 * primary's entries came from the node that took them over, so the tx
 * committed, but they carry only the keys that node is now the primary of
 * — this node's backup record of the left primary (ended on them) held
 * others too, which the near still sends to their new primaries (maybe
 * this node): "applied here" is ROLE_BACKUP's entry alone, written when
 * the left primary's own copies arrived.
 * ROLE_COPIED (from 0) keys no record either: this node applied commit
 * copies of the tx from some primary or takeover (TX_COMMIT_COPY), so the
 * tx was decided commit.  Recovery reads it when the near node and a
 * primary that committed both left: the copies are the only word of the
 * decision left (DGI_TXQ_COPIED, recover_decide). */

struct rec {
	struct dgi_txsvc *s;
	struct rec *next;           /* bucket chain, or free list */
	dgi_txid id;
	int st;                     /* enum rec_state */
	int role;                   /* enum rec_role */
	int64_t start_ms, topver;
	int64_t stamp;              /* primary, takeover: the topology under which
	                               this node was the keys' primary when it
	                               prepared; its commit's versions carry it
	                               (txcommit.c) */
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
	dg_err killed;              /* primary: a deadlock's or an operator's kill
	                               released its locks here (why); its prepare,
	                               if any, fails (txdeadlock.c kill_victim) */
	bool have_req;              /* req waits for an answer */
	bool dead;                  /* out of the table; freed when refs drops to 0 */
	dg_msg_in req;
	struct nodeset bk;          /* nodes the prepare (or commit) went to */
	uint8_t *body;              /* PREPARE body bytes (inline or heap) */
	uint32_t blen;
	/* the body decoded when it was kept (dgi_svc_rec_hdr: no second
	 * decode, no second walk of its entries to find their end); hdr.ents
	 * has its length, and ents_off (not a pointer) where it starts */
	bool have_hdr;
	uint32_t ents_off;
	dgi_msg_tx_prepare hdr;
	uint8_t inl[REC_INLINE];
};

/* The owners a primary sends copies to, and their digest (dgi_svc_backup_agrees). */
struct targets {
	struct nodeset bk;
	uint64_t digest;            /* owners_of's, over the entries added */
	int64_t topver;             /* the lowest affinity version among them */
};

static inline void targets_init(struct targets *t)
{
	ns_init(&t->bk);
	t->digest = 0;
	t->topver = 0;
}

static inline void targets_free(struct targets *t)
{
	ns_free(&t->bk);
}

/* ---- the service ---- */

struct local_slot {
	uint64_t id;                /* 0: free */
	dg_reply_fn cb;
	void *ctx;
	uint64_t deadline;
};

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
	struct dgi_lograte lr_backup; /* TX-BACKUP: once a second, counted (a full
	                                 backup refuses a commit's copies on
	                                 every resend, 50 a second) */
	dgi_locks *locks;
	dgi_txdone *done;
	pthread_mutex_t mu;         /* starts, wfg, edges, victims, records */
	struct start_slot *starts;
	struct start_slot *starts_spare;  /* scap slots: a rehash at the same size */
	uint32_t scap, sused;       /* sused counts removed slots too */
	uint32_t slive;             /* slots of txs still here (not removed) */
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
	struct lall *free_lalls;    /* s->mu */
	uint32_t nfree_lalls;
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
	pthread_cond_t dl_cv;       /* s->mu: dl_next set from 0 (dgi_svc_dl_arm), or a stop:
	                               the detector sleeps on it until then */
	pthread_cond_t stop_cv;     /* s->mu: a stop (the recoverer's sleep) */
	_Atomic uint64_t bg_wakes;  /* the detector's and the recoverer's wake-ups (tests) */
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
	_Atomic uint64_t granted, waited, timeouts, deadlocks, unlocks, busy;
	_Atomic uint64_t prepared, committed, rolled_back, conflicts;
	_Atomic uint64_t backup_prepared, backup_committed;
	dgi_txnear_stats near;
	dgi_txnear_live live;
};

/* ---- TX_LOCK's waiters, counters, per-thread buffers ---- */

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

/* Per-thread scratch buffers (encodings, values read, copies, edges),
 * reused by every request a thread handles and freed when it exits. */
struct tls_bufs {
	dg_buf enc[4];
	dg_buf val, copy, edges;
	dg_buf lall;                /* a TX_LOCK_ALL_RES list */
};

/* A TX_LOCK_ALL being answered (txlock.c): each item runs as a TX_LOCK
 * whose request is a copy of the message's with type TX_LOCK_ALL, corr
 * this record and raw_len the item's index (waiters keep that copy, so
 * an answer given later lands here too: dgi_svc_reply hands it to
 * dgi_svc_lock_all_item); the last answer sends TX_LOCK_ALL_RES.
 * Records come from a pool (s->free_lalls, s->mu). */
struct lall_slot {
	int64_t res, found, ver_topver, ver_counter, ver_order;
	uint32_t voff, vlen;        /* the value in vals (found) */
};
struct lall {
	struct lall *next_free;
	pthread_mutex_t mu;         /* slots and vals */
	_Atomic uint32_t left;      /* items not answered, +1 while the handler runs */
	uint32_t n, cap;
	dg_msg_in in;               /* the TX_LOCK_ALL (body not kept) */
	dg_buf vals;
	struct lall_slot *slot;     /* cap */
};

#define tl_buf(field, fb) dgi_svc_scratch(offsetof(struct tls_bufs, field), (fb))

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

/* Whether this node is cut off (tests: dgi_tx_cut_node). */
static inline bool cut_off(const dgi_txsvc *s)
{
	return atomic_load_explicit(&dgi_tx_cut_node, memory_order_relaxed) == s->self;
}

/* ---- codecs (txwire.c) ---- */

/* Writes n I64s from v. */
dg_err dgi_svc_put_i64s(dg_writer *w, const int64_t *v, int n);
/* Reads n I64s into v. */
dg_err dgi_svc_get_i64s(dg_reader *r, int64_t *v, int n);
/* Creates the wire registry and defines the message rows (once per process). */
void dgi_svc_define_rows(void);
/* Decodes a PREPARE body into m and opens its entry list (rd, *count entries). */
dg_err dgi_svc_ents_open(const uint8_t *body, uint32_t blen, dgi_msg_tx_prepare *m,
    dg_reader *rd, uint32_t *count);
/* The same for a body decoded already: m's entry list. */
dg_err dgi_svc_ents_of(const dgi_msg_tx_prepare *m, dg_reader *rd, uint32_t *count);
/* The same for a PREPARE or COMMIT_COPY being handled: its decoded body
 * (the transport decoded it; else decoded here). */
dg_err dgi_svc_in_ents(const dg_msg_in *in, dgi_msg_tx_prepare *m, dg_reader *rd,
    uint32_t *count);

/* ---- local dispatch, replies (txlocal.c) ---- */

/* This thread's scratch buffer at offset off of its tls_bufs, or fb (tl_buf). */
dg_buf *dgi_svc_scratch(size_t off, dg_buf *fb);
/* Answers req with type and body (a local request's callback, or the transport). */
void dgi_svc_reply(dgi_txsvc *s, const dg_msg_in *req, dg_msg_type type, const void *body);
/* Answers req as its type expects (TX_LOCK_RES or TX_ACK): res, idx, TX_ACK flags. */
void dgi_svc_ack_flags(dgi_txsvc *s, const dg_msg_in *req, dg_err res, int64_t idx,
    int64_t flags);
/* dgi_svc_ack_flags without flags. */
void dgi_svc_ack(dgi_txsvc *s, const dg_msg_in *req, dg_err res, int64_t idx);
/* Times out the requests this node sent itself whose deadline is <= now. */
void dgi_svc_local_expire(dgi_txsvc *s, uint64_t now);

/* ---- the handler table (txsvc.c) ---- */

/* Runs in's handler (nothing when cut off or unknown). */
void dgi_svc_dispatch(dgi_txsvc *s, const dg_msg_in *in);

/* ---- records and start times (txrec.c; s->mu held) ---- */

/* Records tx's start (the victim choice). */
void dgi_svc_start_put(dgi_txsvc *s, const dgi_txid *tx, int64_t start_ms);
/* tx's start, or 0 when unknown. */
int64_t dgi_svc_start_of(dgi_txsvc *s, const dgi_txid *tx);
/* tx's record in role (from: the primary a backup's came from, or the left one). */
struct rec *dgi_svc_rec_find(dgi_txsvc *s, const dgi_txid *id, int role, uint64_t from);
/* The id a role's outcome is remembered under in txdone. */
dgi_txid dgi_svc_role_key(const dgi_txid *id, int role, uint64_t from);
/* A new record in the table (state st), or NULL (DG_ERR_NOMEM). */
struct rec *dgi_svc_rec_new(dgi_txsvc *s, const dgi_txid *id, int st, int role, uint64_t from);
/* Takes r out of the table; frees it once no callback is still to come. */
void dgi_svc_rec_unlink(dgi_txsvc *s, struct rec *r);
/* Drops a reference; frees r when it was the last of an unlinked record. */
void dgi_svc_rec_unref(dgi_txsvc *s, struct rec *r);
/* Keeps in's raw body in r (inline or one allocation). */
dg_err dgi_svc_rec_keep_body(struct rec *r, const dg_msg_in *in);
/* (txwire.c) keep_body's header: in's decoded body, when it has one. */
void dgi_svc_rec_keep_hdr(struct rec *r, const dg_msg_in *in);
/* r's kept body decoded (its header kept with it: no decode). */
dg_err dgi_svc_rec_hdr(const struct rec *r, dgi_msg_tx_prepare *m);
/* dgi_svc_ents_open of r's kept body, through dgi_svc_rec_hdr. */
dg_err dgi_svc_rec_ents(const struct rec *r, dgi_msg_tx_prepare *m, dg_reader *rd,
    uint32_t *count);

/* ---- finishing, deadlines (txrec.c; without s->mu) ---- */

/* Ends tx's role if its record's state is in mask (remembered, unlinked, released). */
bool dgi_svc_end_role(dgi_txsvc *s, const dgi_txid *id, int role, uint64_t from,
    dgi_txs outcome, unsigned mask, struct ended *out);
/* dgi_svc_end_role in any state, nothing returned. */
void dgi_svc_finish_role(dgi_txsvc *s, const dgi_txid *id, int role, uint64_t from,
    dgi_txs outcome);
/* dgi_svc_finish_role of r's role. */
void dgi_svc_finish_rec(dgi_txsvc *s, struct rec *r, dgi_txs outcome);
/* Rolls back ACTIVE records past their deadline and a grace (the expirer). */
void dgi_svc_expire_records(dgi_txsvc *s, uint64_t now);
/* Forgets every record as a crash would (this node left topology v, or rejoined). */
void dgi_svc_forget_records(dgi_txsvc *s, int64_t v);

/* ---- where entries belong (txplace.c; without s->mu) ---- */

/* Cache id's TRANSACTIONAL cache, or NULL and *err. */
dg_cache *dgi_svc_tx_cache(dgi_txsvc *s, int64_t id, dg_err *err);
/* Whether a wire entry's partition is its key's (DG_ERR_INVAL); *hash: the key's. */
dg_err dgi_svc_ent_place(dg_cache *c, const dgi_txwire_ent *en, uint64_t *hash);
/* Whether every entry of a body names its key's partition; *bad: the one that does not. */
dg_err dgi_svc_ents_placed(dgi_txsvc *s, const dg_msg_in *in, int64_t *bad);
/* Whether this node is part's primary under topver (0: the current
 * topology); *tv (optional): the version of the affinity it looked at. */
dg_err dgi_svc_check_primary(dgi_txsvc *s, dg_cache *c, uint32_t part, int64_t topver,
    int64_t *tv);
/* Tests: dgi_tx_test_fence_window's hook, if one is set (a lock's or a
 * prepare's first look at the fence is behind, its record not made yet). */
static inline void dgi_svc_test_fence_window(dgi_txsvc *s)
{
	dgi_tx_test_hook hk = atomic_load_explicit(&dgi_tx_test_fence_window,
	    memory_order_relaxed);
	if (hk != NULL)
		hk(s);
}
/* Whether this node, a backup of m's sender, agrees with it on the owners. */
dg_err dgi_svc_backup_agrees(dgi_txsvc *s, const dg_msg_in *in, const dgi_msg_tx_prepare *m,
    bool *member);
/* Adds part's owners but this node to t, and to its digest. */
dg_err dgi_svc_add_owners(dgi_txsvc *s, dg_cache *c, int64_t cache_id, uint32_t part,
    struct targets *t);

/* ---- a paused node, the topology fence (txfence.c; without s->mu) ---- */

/* Whether this node was just paused (its topology may be stale). */
bool dgi_svc_paused(dgi_txsvc *s);
/* Counts a request refused as stale, and logs TX-STALE-REFUSED once a second. */
void dgi_svc_stale_refused(dgi_txsvc *s, const char *what, uint64_t node, uint64_t seq);
/* Whether a lock or prepare under topology v may be granted here. */
dg_err dgi_svc_fence_check(dgi_txsvc *s, int64_t v);
/* The fence's topology, held (dg_topology_release it), or NULL. */
dg_topology *dgi_svc_fence_topology(dgi_txsvc *s);
/* TX_FENCE: a node's report. */
void dgi_svc_h_fence(dgi_txsvc *s, const dg_msg_in *in);
/* The fence's progress (the expirer): report, roll back, repeat. */
void dgi_svc_fence_tick(dgi_txsvc *s, uint64_t now);

/* ---- TX_LOCK, TX_UNLOCK, TX_ROLLBACK (txlock.c) ---- */

/* TX_LOCK. */
void dgi_svc_h_lock(dgi_txsvc *s, const dg_msg_in *in);
/* TX_LOCK_ALL; one item's answer (from dgi_svc_reply); the pool's
 * records freed at stop. */
void dgi_svc_h_lock_all(dgi_txsvc *s, const dg_msg_in *in);
void dgi_svc_lock_all_item(dgi_txsvc *s, const dg_msg_in *req, const dgi_msg_tx_lock_res *r);
void dgi_svc_lock_all_free(dgi_txsvc *s);
/* TX_ROLLBACK and TX_UNLOCK. */
void dgi_svc_h_rollback(dgi_txsvc *s, const dg_msg_in *in);

/* ---- deadlocks (txdeadlock.c; without s->mu) ---- */

/* What a cancelled wait of tx answers (err unless DG_ERR_CLOSED). */
dg_err dgi_svc_victim_err(dgi_txsvc *s, const dgi_txid *tx, dg_err err);
/* tx started waiting: kills the victim of a cycle through it on this node. */
void dgi_svc_check_deadlock(dgi_txsvc *s, const dgi_txid *tx);
/* TX_EDGES: this node's wait-for edges. */
void dgi_svc_h_edges(dgi_txsvc *s, const dg_msg_in *in);
/* TX_KILL: a victim (or, DGI_TXK_NEAR, an operator's kill of a tx begun here). */
void dgi_svc_h_kill(dgi_txsvc *s, const dg_msg_in *in);
/* A round of deadlock detection across nodes, when due (the detector). */
void dgi_svc_deadlock_tick(dgi_txsvc *s);
/* Schedules a round ms from now unless one is due already, and wakes the
 * detector (s->mu held). */
void dgi_svc_dl_arm(dgi_txsvc *s, uint64_t ms);

/* ---- TX_PREPARE (txprepare.c; without s->mu) ---- */

/* TX_PREPARE: as the keys' primary, as a backup, or a resend. */
void dgi_svc_h_prepare(dgi_txsvc *s, const dg_msg_in *in);
/* Sends body to every node of set for r; r->acks counts the answers. */
void dgi_svc_to_backups(dgi_txsvc *s, struct rec *r, dg_msg_type type,
    const dgi_msg_tx_prepare *body, const struct nodeset *set, uint32_t timeout_ms);
/* A backup's answer to TX_PREPARE or TX_COMMIT_COPY (ctx: the record). */
void dgi_svc_on_backup_answer(void *ctx, dg_err err, const dg_msg_in *reply);

/* ---- TX_COMMIT, TX_COMMIT_COPY (txcommit.c; without s->mu) ---- */

/* Applies r's writes, releases its locks, sends the copies; answers the near. */
void dgi_svc_commit_apply(dgi_txsvc *s, struct rec *r);
/* Commits tx's prepared primary record, answering in; false: unknown here, may_miss. */
bool dgi_svc_commit_prepared(dgi_txsvc *s, const dg_msg_in *in, const dgi_txid *txp,
    bool may_miss);
/* TX_COMMIT. */
void dgi_svc_h_commit(dgi_txsvc *s, const dg_msg_in *in);
/* TX_COMMIT_COPY: a primary's copies, as its backup. */
void dgi_svc_h_commit_copy(dgi_txsvc *s, const dg_msg_in *in);

/* ---- TX_QUERY, recovery (txrecover.c; without s->mu) ---- */

/* TX_QUERY: what this node knows of a tx. */
void dgi_svc_h_query(dgi_txsvc *s, const dg_msg_in *in);
/* A round of recovery (the recoverer). */
void dgi_svc_recover_scan(dgi_txsvc *s);

#endif
