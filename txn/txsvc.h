/*
 * txsvc.h — the transaction service of a node (txn/, private): the
 * participant side of transactions (lock queues, prepare, commit, rollback
 * as a primary or a backup) and the local dispatch the near side uses.
 *
 * Messages (PROTOCOL.md, "Transaction messages"):
 *   TX_LOCK      near -> primary: lock a key (PESSIMISTIC first access), and
 *                with DGI_TXL_READ read it under the lock; DGI_TXL_NOLOCK
 *                only reads (OPTIMISTIC and READ_COMMITTED reads) — the
 *                value and its version come back in TX_LOCK_RES.
 *   TX_PREPARE   near -> primary: the tx's entries on that primary (one
 *                message per node).  The primary locks them (re-entrant for
 *                the tx's PESSIMISTIC locks), checks the versions of the
 *                entries read (DGI_TXOP_CHECK), forwards the entries to the
 *                partitions' backups (TX_PREPARE with DGI_TXP_BACKUP: they
 *                keep them for recovery) and answers TX_ACK when they did
 *                (every one DG_OK; else the prepare fails).
 *                DGI_TXP_ONE_PHASE: commit at once (a single primary).
 *   TX_COMMIT    near -> primary: apply the prepared entries with new
 *                versions, release the locks, send the entries with their
 *                versions to the backups (TX_COMMIT_COPY) and, FULL_SYNC,
 *                answer TX_ACK when every backup applied (DG_OK), or
 *                DG_ERR_TX_UNKNOWN with DGI_TXA_APPLIED when one did not.
 * A backup answers DG_OK to a forwarded prepare or a copy only when it
 * agrees with the sender on the owners (the owner digest the message
 * carries) and the sender is in its topology (PROTOCOL.md, "Backups'
 * answers").  A node that may just have been paused (dg_member_suspect)
 * refuses TX_LOCK and TX_PREPARE with DG_ERR_NOT_READY (a TX_COMMIT, the
 * decision made, it applies: its copies are judged by the owners).
 *   TX_ROLLBACK  near -> primary (and primary -> backups): release, forget.
 *   TX_UNLOCK    the same as TX_ROLLBACK (the lock-only protocol's name).
 *   TX_FENCE, TX_QUERY, TX_EDGES, TX_KILL: the topology fence, recovery
 *                questions and deadlocks across nodes (below, txn/README.md).
 * A request that waits for a lock is answered when it is granted, when its
 * deadline passes (DG_ERR_TIMEOUT), or when its tx is chosen a deadlock
 * victim (DG_ERR_DEADLOCK): this node's wait-for edges are searched for a
 * cycle through the new waiter when it starts waiting, and the youngest
 * transaction of a cycle (latest start; then node id, counter) is the
 * victim; a cycle through other primaries is found from every node's edges
 * (TX_EDGES) 20 ms later and its victim killed everywhere (TX_KILL).
 *
 * Threads: handlers run on the transport's threads (or, for requests a node
 * sends itself, on the sender's); lock grants and timeouts continue from
 * whichever thread released or expired the lock.  Nothing blocks, except
 * that writes to persistent caches wait for LMDB.
 */
#ifndef DG_TXN_TXSVC_H
#define DG_TXN_TXSVC_H

#include "lockq.h"
#include "txdone.h"
#include "transport/transport.h"
#include "cache/cache.h"

#include <pthread.h>
#include <stdatomic.h>

#define DGI_MSG_TX_LOCK ((dg_msg_type)(128))        /* request -> TX_LOCK_RES */
#define DGI_MSG_TX_LOCK_RES ((dg_msg_type)(129))
#define DGI_MSG_TX_UNLOCK ((dg_msg_type)(130))      /* request (dgi_msg_tx_res) -> TX_LOCK_RES */
#define DGI_MSG_TX_PREPARE ((dg_msg_type)(131))     /* request -> TX_ACK */
#define DGI_MSG_TX_COMMIT ((dg_msg_type)(132))      /* request (ctl) -> TX_ACK */
#define DGI_MSG_TX_ROLLBACK ((dg_msg_type)(133))    /* request (ctl) -> TX_ACK */
#define DGI_MSG_TX_ACK ((dg_msg_type)(134))         /* response (ctl) */
#define DGI_MSG_TX_COMMIT_COPY ((dg_msg_type)(135)) /* request (prepare body) -> TX_ACK */
#define DGI_MSG_TX_FENCE ((dg_msg_type)(136))       /* one-way (ctl): value = topology version */
#define DGI_MSG_TX_QUERY ((dg_msg_type)(137))       /* request (ctl: value = origin) -> TX_ACK */
#define DGI_MSG_TX_EDGES ((dg_msg_type)(138))       /* request (ctl) -> TX_EDGES_RES */
#define DGI_MSG_TX_EDGES_RES ((dg_msg_type)(139))   /* response (dg_msg_raw): per edge I64
                                                       waiter node, seq, start, I64 owner
                                                       node, seq, start, I64 cache id, I64
                                                       key length, BYTES the key's first bytes */
#define DGI_MSG_TX_KILL ((dg_msg_type)(140))        /* one-way (ctl): the victim; with
                                                       DGI_TXK_NEAR a request -> TX_ACK */
#define DGI_MSG_TX_LOCK_ALL ((dg_msg_type)(141))    /* request -> TX_LOCK_ALL_RES: many
                                                       keys of one primary, each as its
                                                       TX_LOCK */
#define DGI_MSG_TX_LOCK_ALL_RES ((dg_msg_type)(142)) /* response (dg_msg_raw): per key
                                                       the TX_LOCK_RES values */
#define DGI_MSG_TX_LAST DGI_MSG_TX_LOCK_ALL_RES

/* TX_KILL flags (ctl.flags; 0: a deadlock victim) */
#define DGI_TXK_ADMIN 0x1       /* an operator's kill (dgi_tx_kill): the tx's
                                   waits answer DG_ERR_TX_ROLLED_BACK, and its
                                   later lock requests here are refused */
#define DGI_TXK_NEAR 0x2        /* a request to the tx's near node: kill it
                                   there (it answers TX_ACK: DG_OK,
                                   DG_ERR_CONFLICT, DG_ERR_NOT_FOUND) */


/* TX_QUERY's answer (TX_ACK value): what this node knows of the tx, one
 * byte per role — primary (bits 0-7), backup of / takeover from the origin
 * asked about (8-15), near (16-23) — and DGI_TXQ_TAKEN_ONLY: the backup
 * byte's COMMITTED comes only from another node's takeover copies (some
 * of the origin's keys, maybe not all: this node cannot re-send them). */
#define DGI_TXQ_TAKEN_ONLY (1LL << 24)
/* ... and DGI_TXQ_COPIED: this node applied commit copies of the tx
 * (TX_COMMIT_COPY, from any primary or takeover): it was decided commit,
 * whatever the origin asked about. */
#define DGI_TXQ_COPIED (1LL << 25)
enum {
	DGI_TXQ_NONE = 0,        /* nothing */
	DGI_TXQ_ACTIVE = 1,      /* holds locks (primary); backup: keeps the entries */
	DGI_TXQ_PREPARING = 2,   /* near: in commit */
	DGI_TXQ_PREPARED = 3,
	DGI_TXQ_COMMITTING = 4,
	DGI_TXQ_COMMITTED = 5,
	DGI_TXQ_ROLLED_BACK = 6,
};

/* TX_LOCK flags */
#define DGI_TXL_READ 0x1        /* read the key once locked */
#define DGI_TXL_NOLOCK 0x2      /* only read (no lock) */
#define DGI_TXL_NOWAIT 0x4      /* held by another tx: DG_ERR_BUSY at once,
                                   not queued (a batch's first try) */
#define DGI_TXL_RELEASE 0x8     /* give this one key back (a batch's lock
                                   granted out of its caller's order) */

typedef struct dgi_msg_tx_lock {
	int64_t tx_node, tx_seq;    /* the transaction */
	int64_t tx_start_ms;        /* its start (wall clock ms): the victim choice */
	int64_t cache_id;
	int64_t timeout_ms;         /* how long the request may wait */
	dg_bytes key;               /* encoded key */
	int64_t topver;             /* the tx's topology version (0: lock only,
	                               no placement check — a bare lock service) */
	int64_t part;
	int64_t flags;              /* DGI_TXL_* */
} dgi_msg_tx_lock;

/* TX_LOCK_ALL: TX_LOCK's fields but the key's, then one LIST of items of
 * DGI_TXLA_VALUES values: I64 part, I64 flags (DGI_TXL_*), BYTES key — at
 * most DGI_TXLA_MAX.  Its answer, TX_LOCK_ALL_RES: one LIST of one
 * TX_LOCK_RES body (DGI_TXLAR_VALUES values) per item, in order; empty
 * when the request's list was refused whole. */
typedef struct dgi_msg_tx_lock_all {
	int64_t tx_node, tx_seq, tx_start_ms, cache_id, timeout_ms, topver;
	dg_raw items;
} dgi_msg_tx_lock_all;
#define DGI_TXLA_VALUES 3
#define DGI_TXLAR_VALUES 6
/* An answer's room (txlock.c, lall_finish): its head, and an item's six
 * values without its value (five svarints of up to 10 bytes, the value's
 * tag and length). */
#define DGI_TXLA_HEAD_ROOM 64
#define DGI_TXLA_ITEM_ROOM 64
#define DGI_TXLA_MAX 1024

typedef struct dgi_msg_tx_lock_res {
	int64_t res;                /* dg_err */
	int64_t found;
	int64_t ver_topver, ver_counter, ver_order;  /* the entry's version (0s: none) */
	dg_bytes val;               /* found: the encoded value */
} dgi_msg_tx_lock_res;

/* An item of TX_LOCK_ALL (part, flags and key of m) and of its answer
 * (txwire.c); dgi_txla_open: a list of n items of `values` values each,
 * the reader inside it (DG_ERR_BAD_LENGTH: not whole items, or more than
 * DGI_TXLA_MAX). */
dg_err dgi_txla_item_put(dg_writer *w, const dgi_msg_tx_lock *m);
dg_err dgi_txla_item_get(dg_reader *r, dgi_msg_tx_lock *m);
dg_err dgi_txla_res_put(dg_writer *w, const dgi_msg_tx_lock_res *r);
dg_err dgi_txla_res_get(dg_reader *r, dgi_msg_tx_lock_res *res);
dg_err dgi_txla_open(const dg_raw *list, uint32_t values, dg_reader *r, uint32_t *n);

typedef struct dgi_msg_tx_res {  /* TX_UNLOCK's body (res unused) */
	int64_t res;
	int64_t tx_node, tx_seq;
} dgi_msg_tx_res;

/* TX_PREPARE flags */
#define DGI_TXP_ONE_PHASE 0x1   /* commit right after preparing */
#define DGI_TXP_BACKUP 0x2      /* primary -> backup: keep the entries */
#define DGI_TXP_RESEND 0x4      /* the near re-sends a decided commit to a new
                                   primary: accept under the current topology */
#define DGI_TXP_FULL_SYNC 0x8   /* commit answers after every backup applied */
#define DGI_TXP_RECOPY 0x10     /* with RESEND, to a node that applied the
                                   entries (answered DGI_TXA_APPLIED): send
                                   what it holds of those keys to their
                                   owners again and answer once they
                                   confirmed; never apply them anew */

/* Entry op (the low bits: DGI_TXOP_PUT / DGI_TXOP_REMOVE, or 0) */
#define DGI_TXOP_CHECK 0x10     /* check the version read is still current */
#define DGI_TXOP_MASK 0x0f

typedef struct dgi_msg_tx_prepare {  /* TX_PREPARE, TX_COMMIT_COPY */
	int64_t tx_node, tx_seq, start_ms;
	int64_t timeout_ms;         /* left of the tx's timeout when sent */
	int64_t topver;             /* the tx's topology version */
	int64_t flags;              /* DGI_TXP_* */
	int64_t origin;             /* RESEND: the primary that left (its
	                               backups' copies are found by it) */
	int64_t nparts;             /* TX_PREPARE: how many primaries the tx
	                               prepares on (recovery: all prepared) */
	int64_t owners;             /* primary -> backup (DGI_TXP_BACKUP,
	                               TX_COMMIT_COPY): the owner digest of the
	                               written entries' partitions under the
	                               sender's affinity (txplace.c, owners_of) */
	int64_t otopver;            /* ... and that affinity's topology version
	                               (0: from the near, no digest) */
	dg_raw ents;                /* LIST: per entry I64 cache id, I64 partition,
	                               I64 op, BYTES key, BYTES value (null: none),
	                               I64 version topver, counter, order (read
	                               version to check; COMMIT_COPY: the new
	                               one), I64 expire (wall ms, COMMIT_COPY) */
} dgi_msg_tx_prepare;

/* TX_ACK flags */
#define DGI_TXA_APPLIED 0x1     /* a commit (TX_COMMIT, one-phase TX_PREPARE)
                                   applied every entry on this primary, but
                                   not every backup confirmed its copies
                                   (res DG_ERR_TX_UNKNOWN): decided here, not
                                   on every owner */

typedef struct dgi_msg_tx_ctl {  /* TX_COMMIT, TX_ROLLBACK, TX_ACK */
	int64_t tx_node, tx_seq;
	int64_t flags;              /* TX_COMMIT: DGI_TXP_FULL_SYNC; TX_ACK: DGI_TXA_* */
	int64_t res;                /* TX_ACK: dg_err */
	int64_t value;              /* TX_ACK: the failing entry's index, or -1 */
} dgi_msg_tx_ctl;

/* One decoded entry of a TX_PREPARE / TX_COMMIT_COPY list. */
typedef struct dgi_txwire_ent {
	int64_t cache_id, part, op;
	dg_bytes key, val;          /* val.ptr NULL: none */
	dgi_pver ver;
	int64_t expire_ms;
} dgi_txwire_ent;

/* Values per entry in the LIST (its count is entries x this). */
#define DGI_TXWIRE_FIELDS 9

/* The registry TX_PREPARE lists are written with. */
dg_registry *dgi_txwire_registry(void);
/* Writes one entry into w (inside a LIST). */
dg_err dgi_txwire_put(dg_writer *w, const dgi_txwire_ent *e);
/* Reads the next entry (r positioned inside the LIST). */
dg_err dgi_txwire_get(dg_reader *r, dgi_txwire_ent *e);

typedef struct dgi_txsvc dgi_txsvc;

typedef struct dgi_txsvc_stats {
	uint64_t granted, waited, timeouts, deadlocks, unlocks;
	uint64_t busy;              /* DGI_TXL_NOWAIT requests refused: held */
	uint64_t prepared, committed, rolled_back, conflicts;
	uint64_t backup_prepared, backup_committed;
	uint64_t records;           /* participant records now */
	uint64_t starts;            /* tx start times kept (one per tx with a
	                               primary or takeover record here) */
	uint64_t bg_wakes;          /* wake-ups of the deadlock detector and the
	                               recovery thread (an idle node: ~10 a second) */
	int64_t fence_version;      /* the topology the fence is for */
	bool fence_open;            /* every node reported: locks under it are granted */
	uint64_t fence_rollbacks;   /* txs rolled back because they held a fence too long */
	uint64_t recovered_commit, recovered_rollback;  /* finished by recovery */
	uint64_t global_deadlocks;  /* cycles across nodes found by this node */
	uint64_t locks_held, lock_waiters;
} dgi_txsvc_stats;

/* Defines the message rows (once per process), registers the handlers on
 * tp and starts its threads: the expirer (deadlines, the fence), the
 * detector (deadlocks across nodes) and, with a grid, the recoverer.  g NULL: a bare lock service (TX_LOCK
 * with topver 0 and TX_UNLOCK only; tests).  *out: dgi_txsvc_stop. */
dg_err dgi_txsvc_start(dg_tp *tp, dgi_grid *g, uint32_t done_capacity, dgi_txsvc **out);
/* Unsets the handlers, answers every lock waiter DG_ERR_NOT_READY (the
 * near maps the key again), frees. */
void dgi_txsvc_stop(dgi_txsvc *s);
void dgi_txsvc_get_stats(dgi_txsvc *s, dgi_txsvc_stats *out);

/* Counters of the txs this node began (kept by txn.c). */
typedef struct dgi_txnear_stats {
	_Atomic uint64_t started, committed, rolled_back, conflicts, deadlocks, timeouts,
	    one_phase, heap;
	_Atomic uint64_t batch_rounds;   /* batches whose keys were all asked at once */
	_Atomic uint64_t batch_restarts; /* of those, locks then taken one by one */
	/* 2PC commits whose COMMITs the last PREPARE answer sent
	 * (txnear_commit.c dgi_txn_commit_on_answer), and those the caller
	 * sent after its wait */
	_Atomic uint64_t commit_on_answer, commit_waited;
} dgi_txnear_stats;
dgi_txnear_stats *dgi_txsvc_near(dgi_txsvc *s);

dg_tp *dgi_txsvc_tp(dgi_txsvc *s);
dgi_grid *dgi_txsvc_grid(dgi_txsvc *s);
uint64_t dgi_txsvc_self(dgi_txsvc *s);

/* The topology fence (txn/README.md, "Topology changes").  Membership is
 * up: the service follows its topologies.  Until every node of topology v
 * reported that it has no tx of an older version in flight (TX_FENCE), no
 * lock or prepare under v is granted (DG_ERR_NOT_READY: the near retries);
 * commits, copies, resends and rollbacks of older txs always go through.
 * A node whose old txs are still running after fence_timeout_ms rolls back
 * those not yet prepared. */
struct dg_member;
dg_err dgi_txsvc_joined(dgi_txsvc *s, struct dg_member *m, uint32_t fence_timeout_ms);
/* What membership's listener does with each new topology: the fence moves
 * to t (a newer version) and counts every node of it.  For tests. */
void dgi_txsvc_topology(dgi_txsvc *s, const dg_topology *t);
/* Tests: called by a TX_LOCK or a TX_PREPARE between its first look at
 * the fence (a PREPARE of a tx that locked here: its check that it still
 * holds those locks) and the making of its record (txn_api_test: a
 * topology that moves on, and is reported, in between; a kill). */
typedef void (*dgi_tx_test_hook)(dgi_txsvc *s);
extern _Atomic dgi_tx_test_hook dgi_tx_test_fence_window;
/* Tests: called by a primary's prepare once it holds every lock and its
 * checks passed, before it commits (one phase) or asks its backups. */
extern _Atomic dgi_tx_test_hook dgi_tx_test_prepare_locked;
/* The near side: tx ended — committed (every participant confirmed),
 * decided commit but not every participant confirmed (!confirmed:
 * DG_ERR_TX_UNKNOWN), or rolled back; TX_QUERY answers from it (near byte
 * COMMITTED, COMMITTING, ROLLED_BACK). */
/* This node is SEGMENTED (dg_member_segmented): its txs fail at once with
 * DG_ERR_SEGMENTED.  Lock-free. */
bool dgi_txsvc_segmented(dgi_txsvc *s);
void dgi_txsvc_near_done(dgi_txsvc *s, const dgi_txid *tx, bool committed, bool confirmed);
/* Asks node `to` what it knows of tx (and of its role as origin's backup):
 * the TX_QUERY answer, or -1 when it could not be asked. */
int64_t dgi_txsvc_query(dgi_txsvc *s, uint64_t to, const dgi_txid *tx, uint64_t origin,
    uint32_t timeout_ms);
/* TX_QUERY answers of one round of questions: each (node, origin) asked
 * once (past DGI_TXQ_MEMO pairs, asked again). */
#define DGI_TXQ_MEMO 16
struct dgi_txq_memo {
	uint32_t n;
	uint64_t node[DGI_TXQ_MEMO], origin[DGI_TXQ_MEMO];
	int64_t ans[DGI_TXQ_MEMO];
};
/* Primary `origin` left: which owner of (cache_id, part), other than
 * skip, applied its copies of tx (or is taking its keys over: its backup
 * byte committed or committing)?  With want_resender, not one holding
 * only another node's takeover copies (DGI_TXQ_TAKEN_ONLY: it cannot
 * re-send every key).  1 (*who: that owner), 0 none (every owner
 * answered), -1 cannot tell (an owner did not answer, or timeout_ms 0).
 * m: answers shared across the calls of a round (NULL: none). */
int dgi_txsvc_owner_applied(dgi_txsvc *s, struct dgi_txq_memo *m, uint32_t cache_id,
    uint32_t part, const dgi_txid *tx, uint64_t origin, uint64_t skip, bool want_resender,
    uint32_t timeout_ms, uint64_t *who);
/* Whether node is in this node's current topology. */
bool dgi_txsvc_alive(dgi_txsvc *s, uint64_t node);
/* Whether node is known to have left: this node follows a topology (it
 * joined) and node is not in it. */
bool dgi_txsvc_gone(dgi_txsvc *s, uint64_t node);

/* Whether this node's fence for topology v is open (every node reported). */
bool dgi_txsvc_fence_open(dgi_txsvc *s, int64_t v);
/* The near side: a commit mapped on topology v is in flight. */
void dgi_txsvc_near_enter(dgi_txsvc *s, int64_t v);
void dgi_txsvc_near_leave(dgi_txsvc *s, int64_t v);

/* A request to node `to`, which may be this node itself (then the handler
 * runs in this thread, on a decoded copy, and its reply reaches cb the
 * same way): cb runs exactly once, as with dg_tp_request. */
dg_err dgi_txsvc_request(dgi_txsvc *s, dg_node_id to, dg_msg_type type, const void *body,
    uint32_t timeout_ms, dg_reply_fn cb, void *ctx);
/* A one-way message to `to` (this node: run here). */
dg_err dgi_txsvc_send(dgi_txsvc *s, dg_node_id to, dg_msg_type type, const void *body);

/* Tests only: the id of a node whose tx service is cut off from the
 * others (0: none) — it sends no tx message (requests fail unsent,
 * DG_ERR_UNREACHABLE; TX_QUERY asks nobody) and handles none, while its
 * membership goes on: a near node that lost contact but is still in the
 * topology. */
extern _Atomic uint64_t dgi_tx_cut_node;

/* ---- the near side (txn.c), for node/ ---- */
#include "txn.h"
dg_err dgi_tx_begin(dgi_txsvc *s, dg_tx_concurrency conc, dg_tx_isolation iso,
    uint32_t timeout_ms, const char *label, dg_tx **out);
/* cache.h's dgi_tx_op_fn for the node's grid (ctx: the service). */
dg_err dgi_tx_plain_op(void *ctx, dg_cache *c, int op, const uint8_t *key, size_t klen,
    const uint8_t *exp, size_t elen, const uint8_t *val, size_t vlen, dg_buf *out,
    bool unwrap, int64_t *flag);
void dgi_tx_near_stats(dgi_txsvc *s, dg_tx_metrics *out);

/* ---- the admin CLI (dgctl tx list / tx kill) ----
 * A tx is named by its protocol id: (near, id) = (the near node's id, the
 * counter it gave the tx), printed "%016llx:%llu" in TX-* log lines.  Node
 * ids are random 64-bit values, so the pair cannot fold into one integer
 * without a collision risk. */
typedef struct dgi_tx_info {
	uint64_t id;            /* the tx's counter on its near node (the protocol's tx_seq) */
	uint64_t near;          /* near node id (the protocol's tx_node) */
	int role;               /* 0 near, 1 primary, 2 backup (participant records on this node) */
	const char *state;      /* static string: the state name (dg_tx_state_name or the participant's state) */
	int concurrency, isolation;   /* dg_tx_concurrency / dg_tx_isolation (near only; -1 otherwise) */
	uint64_t age_ms;        /* since begin (near) or since the record was made (participant) */
	uint32_t timeout_ms;    /* near: the tx's; participant: its record's deadline, from when it was made */
	uint32_t keys;          /* keys in the tx's entry set (near) or locked/prepared here (participant) */
	char label[48];         /* the near tx's label, truncated; "" otherwise */
} dgi_tx_info;
/* The txs running on this node: those it began (role 0; a finished one is
 * never listed) and its participant records (1: primary, or a takeover of a
 * left primary's keys; 2: backup).  Fills up to cap entries (near ones
 * first); returns how many there are (may exceed cap).  Thread-safe; takes
 * the near list's and the record table's locks briefly, one at a time. */
size_t dgi_tx_list(dgi_txsvc *s, dgi_tx_info *out, size_t cap);
/* Rolls back tx (near, id).  On its near node, if it has not begun
 * committing: marks it so its next operation or commit returns
 * DG_ERR_TX_ROLLED_BACK (a thread waiting for a lock for it is woken with
 * that error) and releases its locks on every node (TX_KILL, as for a
 * deadlock victim: a node where it already prepared keeps them).  Elsewhere
 * the request goes to the near node (TX_KILL with DGI_TXK_NEAR) and this
 * call waits for its answer (up to 5 s).  DG_OK (killed now, or already),
 * DG_ERR_CONFLICT (it is committing: it finishes), DG_ERR_NOT_FOUND (the
 * near node does not know it, or is not in the topology), transport errors
 * (the near node could not be asked).  Blocks: not for a transport thread. */
dg_err dgi_tx_kill(dgi_txsvc *s, uint64_t near, uint64_t id);

/* The near side of those (txn.c): txs this node began, and not finished. */
typedef struct dgi_txnear_live {
	pthread_mutex_t mu;         /* taken at begin and end of each tx */
	struct dg_tx *head;
} dgi_txnear_live;
dgi_txnear_live *dgi_txsvc_live(dgi_txsvc *s);
size_t dgi_tx_near_list(dgi_txsvc *s, dgi_tx_info *out, size_t cap);
/* Kills this node's tx `id` (no waiting: a transport thread may call it). */
dg_err dgi_tx_near_kill(dgi_txsvc *s, uint64_t id);
/* This node's tx `id` was chosen as a deadlock's victim: its next call (or
 * its commit, refused for it) fails with DG_ERR_DEADLOCK, not as an
 * operator's kill.  No waiting. */
dg_err dgi_tx_near_victim(dgi_txsvc *s, uint64_t id);
/* Releases tx everywhere (TX_KILL with flags to every node of the topology,
 * and here): what the deadlock detector does with a victim. */
void dgi_txsvc_kill(dgi_txsvc *s, const dgi_txid *tx, int64_t flags);

/* Tests: every thread behaves as if its per-thread buffers (txlocal.c's
 * encodings and values read, txn.c's key and value encodings) could not be
 * allocated — the service does the work with buffers of its own, the raw
 * API calls answer DG_ERR_NOMEM. */
extern _Atomic bool dgi_tx_tls_fail;
/* Tests: each recovery round first waits this long (0: not at all), as a
 * round asking nodes that do not answer would. */
extern _Atomic uint32_t dgi_tx_recover_stall_ms;

#endif
