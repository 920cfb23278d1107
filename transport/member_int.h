/*
 * member_int.h — internals of the membership (not installed): struct
 * dg_member, shared by membership.c (installing versions, the listeners,
 * the handlers' registration, start and stop), member_topo.c (the
 * topology, its codec, the baseline's sets), member_change.c (changes and
 * the coordinator's side of their votes), member_join.c (joining and
 * rejoining), member_fd.c (heartbeats, failure detection, the member
 * thread), member_quorum.c (voters, leases, SEGMENTED, the voter's side
 * of TOPO_PROPOSE), member_acceptor.c (the acceptor file) and
 * member_types.c (cluster-wide types).  transport/README.md says which
 * file holds what.
 *
 * Locks: m->pmu (the acceptor file's writes) is taken before m->mu, never
 * under it.  m->mu guards every field not marked atomic (the topology and its
 * `since` array, voters, proposals, the quiet and rejoin state); it is
 * never held across a send, a call or a listener.  The notifier thread
 * delivers installed versions under m->ncv.  A handler that needs m after
 * it returns (a forwarded request, a vote in flight) holds a reference
 * (member_get / member_put); the last one frees m.
 */
#ifndef DG_MEMBER_INT_H
#define DG_MEMBER_INT_H

#include "transport_int.h"

#define MAX_LISTENERS 16
/* How long one JOIN (and the wait for the TOPOLOGY it brings) may take
 * before the joiner asks again; a forwarded JOIN is bounded the same. */
#define JOIN_ATTEMPT_MS 3000
#define RJOIN_MAX 8 /* recent JOINs a coordinator remembers */

struct listener {
	dg_topology_fn fn;
	void *ctx;
	int64_t after;       /* gets only versions above this (the last one
	                        delivered when it was added) */
};

struct tq {                    /* a version waiting for the listeners */
	dg_topology *t;
	struct tq *next;
};

struct since {
	dg_node_id id;
	uint64_t ms;     /* joined our view at; a floor for "last heard" */
	bool left;       /* sent LEAVE: failed at once */
	bool reported;   /* NODE_FAILED sent for the current version */
	uint64_t acked;  /* the newest of our HEARTBEAT times it echoed (our
	                    clock): it heard this node then — the lease */
	int64_t echo;    /* time_ms of its newest HEARTBEAT: echoed in ours */
	uint64_t resent_ms; /* our TOPOLOGY sent again (it is behind) at */
	uint64_t reset_ms;  /* its connection dropped for silence at */
};

struct prop;

struct dg_member {
	_Atomic int refs;              /* the owner + each request in flight */
	/* failure detection timings in force: the node's own config when it
	 * formed the cluster, the cluster's once it joined (JOIN_ACK) */
	_Atomic uint32_t ft_ms, hb_ms;
	dg_tp *tp;
	dg_registry *reg;
	dg_member_config cfg;
	char **seeds;
	char **blcopy;              /* cfg.baseline's copy (cfg.nbaseline strings) */
	char *acc_path;             /* cfg.acceptor_path's copy */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	dg_topology *topo;             /* current, one reference held here */
	struct since *since;           /* one per node of topo */
	/* JOINs this coordinator got lately (any address, under mu): while it
	 * is SEGMENTED each sender is asked to vote on the next version, as a
	 * joiner, while it waits its turn (member_change.c, prop_new_locked)
	 * — so a cluster restarted in full with a baseline of five forms
	 * again: its first node and two joiners are a majority, though only
	 * one joiner is added per version */
	struct recent_join {
		char url[DG_BASELINE_ADDR_MAX];
		dg_node_id id;
		uint64_t ms;
	} rjoin[RJOIN_MAX];
	int64_t *echo_buf;             /* tick's copy of the echoes (the
	                                * member thread's alone): grown only
	                                * when the topology grows, so a steady
	                                * tick allocates nothing */
	uint32_t echo_cap;
	struct listener listeners[MAX_LISTENERS];
	int nlisteners;
	/* installed versions not yet given to the listeners, oldest first
	 * (each held); the notifier thread delivers them (ncv) */
	struct tq *nq_head, **nq_tail;
	dg_topology *delivered;        /* the last one delivered (held) */
	pthread_cond_t ncv;
	bool stopping;
	bool joined;
	/* Forming a cluster at start (member_join.c): a JOIN from a smaller id
	 * answered DG_ERR_STATE holds this node's forming for
	 * DGI_FORM_HOLD_MS (it joins that node's cluster instead), and once
	 * it decided to form, JOINs are answered DG_ERR_NOT_READY ("ask
	 * again"): two nodes started at once cannot both form (mu). */
	uint64_t smaller_join_ms;
	bool forming;
	pthread_t thread, notifier;
	bool thread_started, notifier_started;
	/* this node's own pauses (under mu) */
	uint64_t tick_ms;              /* when the thread last ran tick */
	bool quiet;                    /* paused: nobody failed, no topology change */
	uint64_t quiet_until;          /* ... at the latest until then */
	uint64_t vouch_after;          /* a member's heartbeat after this ends it */
	bool rejoin;                   /* dropped out of the topology: join again */
	uint64_t told_ms;              /* REMOVED answers: logged once a second */
	uint32_t told;
	uint32_t test_stall_ms;        /* dgi_member_test_stall */
	/* a rejoin's type sync, off the heartbeat thread (joined at stop) */
	pthread_t typesync;
	bool typesync_started;
	/* a segmented member's dialling of its seeds (member_join.c; started
	 * by the member thread, joined at stop) */
	pthread_t probe;
	bool probe_started;
	bool probing;                  /* mu: the probe thread runs */
	uint64_t n_probes;             /* mu: JOINs it sent */
	dg_node_id typesync_coord;
	/* the majority (PROTOCOL.md, "Majority"); under mu unless atomic */
	int policy;                    /* DG_PARTITION_* */
	const char **voters;           /* topo's voting servers (views into it) */
	uint32_t nvoters;
	int32_t *vidx;                 /* per node of topo: its voter index, -1 */
	uint64_t *vvals;               /* scratch, nvoters */
	_Atomic uint64_t lease_until;  /* monotonic ms; UINT64_MAX: always */
	/* the last version installed, and the last every listener took (the
	 * notifier): while they differ the node serves nothing (member.h,
	 * dgi_member_lease_serving) */
	_Atomic int64_t installed_ver, delivered_ver;
	_Atomic bool segmented;
	uint64_t seg_since;
	bool leased;                   /* the last check found a lease */
	uint32_t reachable;            /* voters heard within ft at the last check */
	struct prop *prop;             /* a change waiting for votes, or NULL */
	int64_t vote_floor;            /* refusals named this version: go above */
	int64_t voted_version;         /* the highest version this node accepted
	                                  or proposed */
	/* Paxos over the version after each base (PROTOCOL.md, "Majority";
	 * dgi_px_rule): this voter's promise, and the topology it accepted
	 * last (held; NULL: none) with its ballot */
	struct dgi_ballot promised;
	struct dgi_ballot acc_b;
	dg_topology *acc;
	/* ... kept in cfg.acceptor_path before any answer relies on it
	 * (member_acceptor.c): pmu orders the writes (taken before mu);
	 * saved_*: what the file holds */
	pthread_mutex_t pmu;
	struct dgi_ballot saved_p, saved_a;
	bool saved_acc;
	/* no acceptor file was read at start (none configured, or none
	 * there): until this incarnation is a member, what its predecessor
	 * on this address promised is unknown — its grants as a joiner say
	 * so (DG_VOTE_AMNESIAC) */
	bool amnesiac;
	uint64_t started_ms;           /* this incarnation's start */
	uint64_t echoed_ms;            /* mu: it last echoed a heartbeat */
	/* the coordinator's side: the highest round a refusal named, after
	 * seen_base (the next ballot goes above it) */
	int64_t seen_base, seen_round;
	/* voters a version this node granted (or proposed) removes: their
	 * heartbeats are not echoed — their leases are not renewed through
	 * this node — until it installs that version or a later one
	 * (PROTOCOL.md, "Majority"; dgi_member_freeze_locked) */
	dg_node_id frozen[16];
	uint32_t nfrozen;
	int64_t frozen_ver;
	bool hb_answer;                /* the next heartbeats carry DG_HB_ANSWER */
	bool warned_two;               /* TWO-VOTERS logged */
	struct dgi_lograte lr_lease;   /* LEASE-LOST */
	struct dgi_lograte lr_failed;  /* NODE-FAILED while the voters refuse */
	uint64_t fail_retry_ms;        /* mu: when the removal of fail_set (a hash of */
	uint64_t fail_set;             /* the failed ids) may be proposed again */
	struct dgi_lograte lr_reset;   /* PEER-RESET */
	struct dgi_lograte lr_vote;    /* VOTE-REFUSED */
	struct dgi_lograte lr_agree;   /* TOPOLOGY-NOT-AGREED */
	_Atomic uint64_t n_segmented, n_rejoined, n_lease_lost, n_granted, n_refused;
};

/* membership.c */
void dgi_member_free(dg_member *m);              /* the last reference's */
/* The oldest member this node does not consider failed (mu held;
 * member_fd.c). */
dg_node_id dgi_member_coordinator_locked(dg_member *m, uint64_t now);
/* Decodes a TOPOLOGY body (PROTOCOL.md; member_topo.c). */
dg_err dgi_member_topo_decode(dg_member *m, const dg_raw *raw, dg_topology **out);

/* The topology changes the coordinator applies (member_change.c). */
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

/* A baseline being built or read: views (into a topology, a frame or the
 * caller's strings), valid while it is used.  Kept sorted (strcmp), no
 * duplicates, so equal sets compare equal. */
struct bl {
	bool set;
	uint32_t n;
	dg_str a[DG_BASELINE_MAX];
};

/* member_topo.c: topologies and the baseline's sets (mu held where the
 * topology read is m->topo). */
dg_topology *dgi_topo_hold(dg_topology *t);           /* one more reference */
bool dgi_topo_removes(const dg_topology *cur, const dg_topology *t); /* a node of cur t lacks */
dg_topology *dgi_member_topo_new(int64_t version, const dg_topology_node *nodes,
    uint32_t n, const struct bl *bl);
dg_err dgi_member_topo_encode(dg_member *m, const dg_topology *t, dg_buf *b);
void dgi_member_topo_send(dg_member *m, const dg_topology *t, dg_node_id to); /* 0: all */
void dgi_member_broadcast(dg_member *m, const dg_topology *t);
dg_str dgi_bl_str(const char *s);
void dgi_bl_of(struct bl *b, const dg_topology *t);
const struct bl *dgi_bl_formed(dg_member *m, struct bl *b);
const char *dgi_bl_apply(struct bl *b, const dg_topology_node *nodes, uint32_t n,
    int op, const dg_str *addrs, uint32_t naddrs, bool need_majority);
bool dgi_bl_standby_bits(const struct bl *b, dg_topology_node *nodes, uint32_t n);
bool dgi_bl_same(const struct bl *b, const dg_topology *t);

/* membership.c: installing a version, forwarding to the coordinator */
dg_topology *dgi_member_install_locked(dg_member *m, dg_topology *t, bool *taken);
void dgi_member_installed(dg_member *m, dg_topology *old, const dg_topology *t);
void dgi_member_install(dg_member *m, dg_topology *t);
void dgi_member_forward(dg_member *m, const dg_msg_in *in, dg_node_id coord,
    uint32_t timeout_ms);

/* member_change.c: the coordinator's changes and BASELINE */
dg_err dgi_member_change_apply(dg_member *m, struct change *ch);
/* A JOIN reached this coordinator: its sender is asked to vote (as a
 * joiner) while it waits (member_change.c; takes mu). */
void dgi_member_join_seen(dg_member *m, const dg_msg_join *j);
dg_err dgi_member_change(dg_member *m, const dg_node_id *drop, size_t ndrop,
    const dg_msg_join *add, int64_t *version, int64_t *order);
void dgi_member_on_baseline(dg_tp *tp, const dg_msg_in *in, void *ctx);
/* At the last reference's free: m's proposal loses the reference m held. */
void dgi_member_prop_drop(dg_member *m);
/* A segmented member dials its seeds and the addresses of the nodes of its
 * topology it does not hear, and sends each a JOIN (member_join.c): the
 * member thread starts it; it ends once the node is not segmented. */
void dgi_member_probe_start(dg_member *m);
/* The member thread's tick: installs an agreed version whose wait is over. */
void dgi_member_prop_tick(dg_member *m);

/* member_join.c */
bool dgi_member_wait_version(dg_member *m, int64_t version, uint64_t deadline);
dg_err dgi_member_join(dg_member *m);
void dgi_member_rejoin(dg_member *m);

/* member_fd.c: heartbeats, failure detection, the member thread */
struct since *dgi_member_since(dg_member *m, dg_node_id id);
void dgi_member_on_heartbeat(dg_tp *tp, const dg_msg_in *in, void *ctx);
void dgi_member_on_removed(dg_tp *tp, const dg_msg_in *in, void *ctx);
void dgi_member_on_node_failed(dg_tp *tp, const dg_msg_in *in, void *ctx);
void dgi_member_on_leave(dg_tp *tp, const dg_msg_in *in, void *ctx);
void *dgi_member_thread(void *arg);

static inline dg_member *member_get(dg_member *m)
{
	atomic_fetch_add(&m->refs, 1);
	return m;
}

static inline void member_put(dg_member *m)
{
	if (atomic_fetch_sub(&m->refs, 1) == 1)
		dgi_member_free(m);
}

/* member_acceptor.c: the acceptor's state on disk (PROTOCOL.md, "A voter
 * that restarted").  load: at start (m->promised, acc_b, acc, amnesiac),
 * writing a first file when there is none; save: outside mu, before an
 * answer or a proposal relies on the state in memory — a no-op without
 * cfg.acceptor_path or when the file holds it already. */
dg_err dgi_acceptor_load(dg_member *m);
dg_err dgi_acceptor_save(dg_member *m);

/* member_quorum.c (PROTOCOL.md, "Majority") */
/* A lease lasts half the failure timeout from the newest heartbeat a
 * majority echoed; a voter accepts a version that removes a node only once
 * that node was silent, here, for longer than a lease plus a heartbeat
 * interval.  So a removed node's lease ran out before the majority that
 * removed it accepted the version that moves its partitions. */
static inline uint32_t lease_ms(dg_member *m)
{
	return atomic_load_explicit(&m->ft_ms, memory_order_relaxed) / 2;
}

static inline uint64_t removal_silence_ms(dg_member *m)
{
	return (uint64_t)lease_ms(m) + atomic_load_explicit(&m->hb_ms, memory_order_relaxed);
}

static inline bool majority(const dg_member *m)
{
	return m->policy == DG_PARTITION_MAJORITY;
}

/* The voters of t, and each node's index among them, as new arrays (the
 * caller swaps them in with t).  false: no memory. */
struct dgi_vset {
	const char **voters;
	uint32_t n;
	int32_t *vidx;
	uint64_t *vals;
};
bool dgi_member_vset(const dg_topology *t, struct dgi_vset *v);
/* The lease from the echoes (mu held).  Under NONE, or with no voter (a
 * cluster of client nodes), always. */
void dgi_member_lease_locked(dg_member *m);
/* How many voters echoed within the failure timeout, this node included
 * (mu held); fills m->vvals. */
uint32_t dgi_member_reachable_locked(dg_member *m, uint64_t now);
/* The same, counting the nodes of without as unreachable. */
uint32_t dgi_member_reachable_without_locked(dg_member *m, uint64_t now,
    const dg_node_id *without, size_t nwithout);
/* This node granted or proposed t (mu held): the voters of its topology
 * that t removes renew no lease through it from now on. */
void dgi_member_freeze_locked(dg_member *m, const dg_topology *t);
/* Whether id's heartbeats go unechoed here (mu held). */
bool dgi_member_frozen_locked(const dg_member *m, dg_node_id id);
/* Whether this node answers TOPO_PROPOSE as a joiner (mu held): a server
 * that is not a member (joining, or removed and rejoining). */
bool dgi_member_joiner_locked(const dg_member *m);
/* TOPO_PROPOSE: the voter's side. */
void dgi_member_on_topo_propose(dg_tp *tp, const dg_msg_in *in, void *ctx);

/* member_types.c: TYPE_PROPOSE, TYPE_ANNOUNCE, TYPES_SNAPSHOT, the
 * registry's hook, and the sync of every type with the coordinator. */
void dgi_member_on_type_propose(dg_tp *tp, const dg_msg_in *in, void *ctx);
void dgi_member_on_type_announce(dg_tp *tp, const dg_msg_in *in, void *ctx);
void dgi_member_on_types_snapshot(dg_tp *tp, const dg_msg_in *in, void *ctx);
dg_err dgi_member_propose(void *ctx, const dg_desc *d, const uint8_t *def, size_t len);
void dgi_member_sync_types(dg_member *m, dg_node_id coord);

/* Tests only (member_join.c): a hold between deciding to form a cluster
 * and forming it. */
extern _Atomic uint32_t dgi_test_form_hold_ms;

/* How long a JOIN from a smaller id, answered DG_ERR_STATE, keeps a
 * starting node from forming a cluster of its own (it asks each round). */
#define DGI_FORM_HOLD_MS 1000

#endif /* DG_MEMBER_INT_H */
