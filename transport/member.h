/*
 * member.h — the membership's API, part of the transport's (transport.h
 * includes it; include transport.h): joining through static seeds, one
 * ordered topology per version agreed by a majority of the voting servers,
 * heartbeats and failure detection, the baseline, SEGMENTED, and
 * cluster-wide type metadata.  PROTOCOL.md, "Membership" and "Majority",
 * documents the messages; README.md which file implements what.
 */
#ifndef DG_MEMBER_H
#define DG_MEMBER_H

#ifndef DG_TRANSPORT_H
#error "include transport/transport.h (member.h is part of it)"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------
 * Membership (PROTOCOL.md, "Membership"): joining through static seeds,
 * one ordered topology per version agreed by every node, heartbeats and
 * failure detection, and cluster-wide type metadata.
 * ------------------------------------------------------------------------ */

#define DG_NODE_CLIENT 0x1u   /* attrs: a client node (owns no partitions) */
#define DG_NODE_STANDBY 0x2u  /* attrs: a server outside the baseline: owns
                                 no partitions (set by the coordinator only;
                                 a joiner's own bit is ignored) */

typedef struct dg_topology_node {
	dg_node_id id;
	int64_t order;          /* join order: the smallest is the coordinator */
	const char *url;        /* where it listens */
	uint32_t attrs;         /* DG_NODE_* bits: the node's own (CLIENT) and
	                           the coordinator's (STANDBY) */
} dg_topology_node;

/* The baseline (PROTOCOL.md, "Baseline"): the server addresses that own
 * data.  Not set ("auto"): every server owns data.  It travels in every
 * TOPOLOGY, so whichever node coordinates next has it; it is not kept
 * across a restart of the whole cluster. */
#define DG_BASELINE_SET 0
#define DG_BASELINE_ADD 1
#define DG_BASELINE_REMOVE 2
#define DG_BASELINE_ADDR_MAX 128  /* an address in the set: < 128 bytes */
#define DG_BASELINE_MAX 1024      /* addresses in the set */

/* The most nodes a topology holds (servers and clients).  A join that
 * would take a topology past it is refused with DG_ERR_LIMIT; every array
 * sized by a topology's nodes in this process fits it. */
#define DG_TOPOLOGY_MAX 1024

/* An immutable snapshot.  Hold it with dg_topology_release when done. */
typedef struct dg_topology {
	int64_t version;
	uint32_t count;
	_Atomic int refs;       /* private */
	bool baseline_set;      /* false: auto (and nbaseline 0) */
	uint32_t nbaseline;
	const char *const *baseline; /* nbaseline addresses, sorted (strcmp) */
	dg_topology_node nodes[]; /* ordered by order */
} dg_topology;

void dg_topology_release(dg_topology *t);
/* The node with this id, or NULL. */
const dg_topology_node *dg_topology_find(const dg_topology *t, dg_node_id id);

typedef struct dg_member dg_member;

typedef struct dg_member_config {
	const char *const *seeds;        /* URLs; the node's own address is skipped */
	size_t nseeds;
	uint32_t failure_timeout_ms;     /* default 10000; a joining node adopts
	                                    the cluster's (the coordinator's) */
	uint32_t heartbeat_ms;           /* default failure_timeout_ms / 5; idem */
	uint32_t join_timeout_ms;        /* default 10000 */
	dg_registry *reg;                /* cluster-wide types go through its hook */
	uint32_t attrs;                  /* DG_NODE_* bits announced for this node */
	int64_t version_floor;           /* topology versions this node installs
	                                    exceed it: a cluster formed or joined
	                                    by a restarted node continues from the
	                                    versions it persisted (cache entry
	                                    versions start with the topology
	                                    version and must keep growing) */
	int partition_policy;            /* DG_PARTITION_MAJORITY (default) or
	                                    DG_PARTITION_NONE (PROTOCOL.md,
	                                    "Majority") */
	const char *const *baseline;     /* the baseline this node last knew
	                                    (its owner persisted it), nbaseline
	                                    addresses; a cluster this node forms
	                                    carries it, so under MAJORITY it is
	                                    SEGMENTED until a majority of those
	                                    addresses is back (a full restart:
	                                    PROTOCOL.md, "Baseline"); copied */
	uint32_t nbaseline;
	const char *acceptor_path;       /* where this node keeps what it
	                                    promised and accepted (a file in
	                                    its data dir), so a restart does
	                                    not forget it; NULL: memory only
	                                    (PROTOCOL.md, "A voter that
	                                    restarted"); copied */
} dg_member_config;

/* Partition policies.  MAJORITY: every topology version is accepted by a
 * majority of the voting servers of the version before it before anyone
 * installs it; a node serves copies only under a lease renewed by a
 * majority, and one that cannot reach a majority within the failure
 * timeout is SEGMENTED.  NONE: the coordinator alone decides (each side of
 * a network partition goes on alone: unsafe, kept for two-server setups
 * that prefer availability). */
#define DG_PARTITION_MAJORITY 0
#define DG_PARTITION_NONE 1

void dg_member_config_init(dg_member_config *cfg);

/* Topology listener: runs on the membership's notifier thread after each
 * new version is installed, every version in order (old: the one before,
 * NULL at the first), never on the thread that installed it — so a slow
 * listener holds up no message.  Should not block for long all the same:
 * the next versions wait for it. */
typedef void (*dg_topology_fn)(void *ctx, const dg_topology *old,
    const dg_topology *now);

/* Joins the cluster through the seeds (or forms one when no seed is in a
 * cluster and this node's id is the smallest among those reachable), then
 * keeps heartbeats and failure detection running.  Blocks up to
 * join_timeout_ms — while seeds of a cluster answer (its coordinator may
 * have died: they forward to it until they notice), up to join_timeout_ms
 * plus the longer of twice that and twice the failure detection (timeout
 * plus heartbeat); each JOIN is bounded (3 s) and asked again.  Installs the type-registration hook on cfg->reg and
 * receives every type accepted so far.  *out owned by the caller
 * (dg_member_stop, before dg_tp_stop).  A node never forms its own cluster
 * when a seed answered but refused it.  Errors: DG_ERR_TIMEOUT (no cluster
 * could be joined or formed), DG_ERR_AUTH / DG_ERR_REFUSED / DG_ERR_TLS (a
 * seed refused this node), DG_ERR_LIMIT (the cluster holds DG_TOPOLOGY_MAX
 * nodes already), DG_ERR_INVAL, DG_ERR_NOMEM. */
dg_err dg_member_start(dg_tp *tp, const dg_member_config *cfg, dg_member **out);
/* Leaves (tells the others) and stops. */
void dg_member_stop(dg_member *m);

/* The current topology, held (release it); NULL before the join. */
dg_topology *dg_member_topology(dg_member *m);
/* Adds a listener; up to 16.  It gets every version not yet given to the
 * listeners when it is added, and every later one; the caller reads the
 * current one with dg_member_topology (before or after adding: an older
 * version may still come, a listener ignores versions older than the one
 * it has).  DG_ERR_LIMIT. */
dg_err dg_member_listen(dg_member *m, dg_topology_fn fn, void *ctx);
bool dg_member_is_coordinator(dg_member *m);
/* Whether this node's view of the cluster may be stale because the node
 * itself was paused (PROTOCOL.md, "A paused node"): it is quiet after
 * SELF-PAUSED, or its membership thread has not run for longer than a
 * heartbeat interval plus half the failure timeout (it woke and the thread
 * has not found out yet).  Meanwhile the others may have removed it and
 * moved its partitions: it must not act as an owner of its old topology
 * (the transactions refuse locks and prepares, DG_ERR_NOT_READY).  False
 * when not in a cluster.  Thread-safe; takes the membership's lock. */
bool dg_member_suspect(dg_member *m);
/* Whether this node may serve its copies now (PROTOCOL.md, "Majority"):
 * DG_OK while it holds a lease a majority of the voting servers renewed
 * (always under DG_PARTITION_NONE, and with m NULL) and its listeners
 * have taken every topology version it installed; DG_ERR_NOT_READY when
 * the lease lapsed (the others may be promoting new owners: the sender
 * maps again) or a version waits for the listeners (its caches still map
 * by an older one, which may name this node the primary of partitions
 * that have moved on — PROTOCOL.md, "Caught up";
 * test_lagging_node_learns_cache_late); DG_ERR_SEGMENTED when it is
 * segmented.  Lock-free: four atomic loads and a coarse clock read, for
 * every read and update. */
dg_err dg_member_serving(dg_member *m);
/* The same at now_ms (dgi_coarse_ms, read by the caller: one clock read
 * for what else it times). */
dg_err dgi_member_serving_at(dg_member *m, uint64_t now_ms);
/* The words dg_member_serving reads, for a caller that checks them in
 * line (the cache's local get): held with m (dgi_member_hold).  NULL
 * words (m NULL): always serving. */
typedef struct dgi_member_lease {
	const _Atomic bool *segmented;
	const _Atomic uint64_t *until;  /* monotonic ms; UINT64_MAX: always */
	const _Atomic int64_t *installed, *delivered; /* topology versions */
} dgi_member_lease;
dgi_member_lease dgi_member_lease_of(dg_member *m);
/* dg_member_serving, from the words, at now_ms (dgi_coarse_ms; 0: read
 * here, only when the lease has an end).  Always in line: GCC outlines it
 * from the cache's short paths otherwise, a call where a few loads do. */
static inline __attribute__((always_inline)) dg_err dgi_member_lease_serving_at(
    dgi_member_lease l, uint64_t now_ms)
{
	if (l.segmented == NULL)
		return DG_OK;
	if (atomic_load_explicit(l.segmented, memory_order_relaxed))
		return DG_ERR_SEGMENTED;
	if (atomic_load_explicit(l.delivered, memory_order_acquire) <
	    atomic_load_explicit(l.installed, memory_order_acquire))
		return DG_ERR_NOT_READY; /* the caches have not taken a version yet */
	uint64_t until = atomic_load_explicit(l.until, memory_order_relaxed);
	if (until == UINT64_MAX)
		return DG_OK;
	return (now_ms != 0 ? now_ms : dgi_coarse_ms()) < until ? DG_OK : DG_ERR_NOT_READY;
}
static inline __attribute__((always_inline)) dg_err dgi_member_lease_serving(
    dgi_member_lease l)
{
	return dgi_member_lease_serving_at(l, 0);
}
/* SEGMENTED: no majority of the voting servers reached within the failure
 * timeout, or dropped out of the topology and not back yet.  Every cache
 * operation and transaction started on this node fails at once with
 * DG_ERR_SEGMENTED.  Lock-free; false with m NULL. */
bool dg_member_segmented(dg_member *m);

#define DG_QUORUM_REACH_MAX 16
typedef struct dg_member_quorum {
	int policy;              /* DG_PARTITION_* */
	bool segmented;
	uint64_t segmented_ms;   /* for how long (0: not) */
	bool leased;             /* dg_member_serving would say DG_OK */
	uint32_t voters;         /* voting servers of the current version */
	uint32_t need;           /* a majority of them */
	uint32_t reachable;      /* of them heard within the failure timeout
	                            (this node included) */
	/* totals since start */
	uint64_t segmentations, rejoins, lease_losses, votes_granted, votes_refused;
	uint64_t segmented_dials; /* JOINs sent to seeds and unheard members
	                            while SEGMENTED */
	uint32_t nreach;         /* reach[]: up to DG_QUORUM_REACH_MAX of them */
	char reach[DG_QUORUM_REACH_MAX][DG_BASELINE_ADDR_MAX];
} dg_member_quorum;
/* This node's view of the majority (dgctl state, metrics).  Takes the
 * membership's lock. */
void dg_member_quorum_get(dg_member *m, dg_member_quorum *q);

/* A peer that authenticates a new connection while its connection here has
 * been silent for ms (the membership's failure timeout) lost that one on
 * its side (a network cut, a pause: it dials only without a connection):
 * the old one is closed and the new one serves, instead of being refused
 * as a duplicate while the old one is dead.  0 (the default): never. */
void dgi_tp_set_stale_ms(dg_tp *tp, uint32_t ms);

/* Tests: a network cut in one process.  While on, every frame that comes
 * from peer after its handshake is read and dropped (no handler, no reply
 * callback, not "heard from"); cut both ends for a two-way cut. */
void dgi_tp_test_cut(dg_tp *tp, dg_node_id peer, bool on);

/* A reference that keeps m's memory (not its threads) until released: a
 * module that calls dg_member_suspect from message handlers holds one, so
 * a handler still running when the node stops (dg_member_stop frees m with
 * its last reference) reads a stopped membership, never a freed one. */
dg_member *dgi_member_hold(dg_member *m);
void dgi_member_release(dg_member *m);

/* Changes the baseline: op DG_BASELINE_SET (exactly addrs), _ADD or
 * _REMOVE (from the set; with no set yet, from every server now in the
 * topology).  Sent to the coordinator, which applies it, recomputes every
 * node's STANDBY bit and installs a new topology version carrying the set;
 * returns once this node installed that version (nothing to change: at
 * once).  Blocks up to timeout_ms; not from a handler or listener.  addrs
 * are copied.  Errors: DG_ERR_INVAL (an address empty or too long, more
 * than DG_BASELINE_MAX, an unknown op, or a set that leaves no online server
 * owning data — *why, when not NULL, names the reason as a static string),
 * DG_ERR_TIMEOUT, DG_ERR_STATE (not in a cluster), DG_ERR_NOMEM, transport
 * errors reaching the coordinator. */
dg_err dg_member_set_baseline(dg_member *m, int op, const char *const *addrs,
    size_t n, uint32_t timeout_ms);
/* The same, with the reason for DG_ERR_INVAL in *why (static string). */
dg_err dgi_member_set_baseline(dg_member *m, int op, const char *const *addrs,
    size_t n, uint32_t timeout_ms, const char **why);
/* The baseline of the current topology: up to cap addresses into out, in
 * order; returns how many the set holds (0 when not set).  *is_set (may be
 * NULL) says whether one is set.  Thread-safe; allocates nothing. */
size_t dg_member_baseline(dg_member *m, char (*out)[DG_BASELINE_ADDR_MAX], size_t cap,
    bool *is_set);

#ifdef __cplusplus
}
#endif
#endif /* DG_MEMBER_H */
