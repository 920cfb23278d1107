/*
 * transport.h — typed messages between datagrid nodes (PROTOCOL.md).
 *
 * A dg_tp is one node's end of the cluster network: a listener, one
 * connection per peer (plain TCP sockets for tcp://, nng's stream API for
 * tls+tcp:// and ipc://; own framing, handshake with HMAC authentication,
 * optional TLS), a table of message types, request/response with timeouts,
 * and per-message-type counters.
 *
 * Message table.  dg_msg_type is one dense enum; a flat array indexed by it
 * holds each type's row (name, body codec, handler) and its counters.  The
 * codecs write bodies directly with marshal's primitives in a fixed field
 * order: no descriptor lookup, no allocation.  Counters are relaxed atomics
 * in arrays indexed by the type — no map, no boxing (IGNITE-29099).
 *
 * Threads.  tcp:// connections are served by one reactor thread per dg_tp
 * (epoll; reactor.c): it reads, and handlers and reply callbacks run on it,
 * in the read (no hand-off) — so every tcp:// peer of a node waits while a
 * handler runs.  Writes are made by the thread that sends (dg_tp_send,
 * dg_tp_request, dg_tp_reply), at once, without blocking; the reactor
 * finishes what a full socket buffer did not take, and writes streams of
 * messages in batches.  tls+tcp:// and ipc:// connections are served by
 * nng's threads, handlers and reply callbacks running on those.  Either
 * way a handler must not block for long and must not wait for another
 * message (dg_tp_call, dg_tp_connect): it may send and reply.  Every
 * dg_tp_* call is thread-safe.
 *
 * Memory.  Per connection, one receive buffer (grown to the largest frame,
 * bounded by recv_max) and two send buffers (the one being written and the
 * one filling, bounded by send_queue_max) are reused: sending and receiving
 * allocate nothing in steady state.  Pending requests live in an int-keyed
 * open-addressing table.
 */
#ifndef DG_TRANSPORT_H
#define DG_TRANSPORT_H

#include "marshal/marshal.h"
#include "marshal/log_int.h"

#include <semaphore.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef uint64_t dg_node_id;

/* Transport errors extend dg_err (marshal.h): appended there. */

/* ---- message types (PROTOCOL.md, "Message types") ---- */
typedef enum dg_msg_type {
	DG_MSG_UNKNOWN = 0,
	DG_MSG_HELLO = 1,
	DG_MSG_CHALLENGE = 2,
	DG_MSG_PROOF = 3,
	DG_MSG_WELCOME = 4,
	DG_MSG_REJECT = 5,
	DG_MSG_PING = 6,
	DG_MSG_HEARTBEAT = 7,
	DG_MSG_JOIN = 8,
	DG_MSG_JOIN_ACK = 9,
	DG_MSG_TOPOLOGY = 10,
	DG_MSG_NODE_FAILED = 11,
	DG_MSG_TYPE_PROPOSE = 12,
	DG_MSG_TYPE_ANNOUNCE = 13,
	DG_MSG_TYPES_SNAPSHOT = 14,
	DG_MSG_LEAVE = 15,
	DG_MSG_ECHO = 16,
	DG_MSG_BASELINE = 17,
	DG_MSG_BASELINE_ACK = 18,
	DG_MSG_REMOVED = 19,
	DG_MSG_TOPO_PROPOSE = 20,
	DG_MSG_TOPO_VOTE = 21,
	DG_MSG_TRANSPORT_LAST = 63,   /* 64..127 cache, 128..191 txn, 192..255 node */
	DG_MSG__COUNT = 256
} dg_msg_type;

#define DG_MSG_HANDSHAKE_LAST DG_MSG_REJECT

/* ---- frames (PROTOCOL.md, "Frame") ---- */
#define DG_FRAME_VERSION 1
#define DG_FRAME_HEADER 24
#define DG_FRAME_RESPONSE 0x01
#define DG_FRAME_ERROR 0x02
#define DG_FRAME_ONEWAY 0x04
#define DG_FRAME_FLAGS_KNOWN 0x07

typedef struct dg_frame_header {
	uint8_t version;
	uint8_t flags;
	uint16_t type;
	uint32_t body_len;
	uint64_t corr;
	dg_node_id sender;
} dg_frame_header;

/* Writes the 24-byte header at p. */
void dgi_frame_put(uint8_t *p, const dg_frame_header *h);
/* Reads and checks a header: version, known flags, type < DG_MSG__COUNT,
 * body_len <= recv_max.  DG_ERR_BAD_TAG (version/flags/type),
 * DG_ERR_LIMIT (body too large). */
dg_err dgi_frame_get(const uint8_t *p, size_t recv_max, dg_frame_header *h);

/* ---- the message table ---- */
typedef struct dg_tp dg_tp;

/* A received message, valid during the handler or reply callback only. */
typedef struct dg_msg_in {
	dg_msg_type type;
	uint8_t flags;
	uint64_t corr;
	dg_node_id from;
	const void *body;      /* decoded body (the row's C struct), or NULL */
	const uint8_t *raw;    /* encoded body bytes */
	uint32_t raw_len;
	dg_err err;            /* DG_FRAME_ERROR responses: the remote error */
} dg_msg_in;

typedef void (*dg_msg_handler)(dg_tp *tp, const dg_msg_in *in, void *ctx);

typedef struct dg_msg_row {
	const char *name;                 /* "JOIN"; NULL: type not in use */
	size_t body_size;                 /* sizeof the body struct (<= DG_MSG_BODY_MAX) */
	/* Body codec: fixed field order, marshal primitives, no allocation.
	 * decode may keep views into the frame (valid for the callback). */
	dg_err (*encode)(dg_writer *w, const void *body);
	dg_err (*decode)(dg_reader *r, void *body);
	/* Requests: the type every answer must have (0: not checked).  An
	 * answer of another type fails the request with DG_ERR_BAD_TAG and is
	 * counted malformed — a reply callback (or dg_tp_call's struct) only
	 * ever sees the body it expects. */
	dg_msg_type reply;
} dg_msg_row;

#define DG_MSG_BODY_MAX 256

/* Installs the codec row of an upper layer's type (cache, txn, node).
 * DG_ERR_INVAL out of range or body too large, DG_ERR_CONFLICT if taken.
 * Call before dg_tp_start; process-wide, identical on every node. */
dg_err dg_msg_define(dg_msg_type type, const dg_msg_row *row);
const dg_msg_row *dg_msg_row_of(dg_msg_type type);
const char *dg_msg_name(dg_msg_type type);   /* "?" when unused */

/* Encodes body for type into w (a fresh writer per body); decodes raw into
 * a body struct.  DG_ERR_INVAL for unused types, codec errors as they come. */
dg_err dg_msg_encode(dg_msg_type type, const void *body, dg_writer *w);
dg_err dg_msg_decode(dg_msg_type type, const dg_registry *reg,
    const uint8_t *raw, size_t len, void *body);

/* ---- bodies of transport's own messages ---- */
#define DG_NONCE_LEN 32
#define DG_MAC_LEN 32

typedef struct dg_msg_hello {
	int32_t version;
	dg_str cluster;
	int64_t node_id;
	dg_str address;
	dg_bytes nonce;
	bool auth;
} dg_msg_hello;

typedef struct dg_msg_challenge {
	int64_t node_id;
	dg_bytes nonce;
	bool auth;
	dg_bytes mac;
} dg_msg_challenge;

typedef struct dg_msg_proof {
	dg_bytes mac;
} dg_msg_proof;

typedef enum dg_reject_reason {
	DG_REJECT_VERSION = 1,
	DG_REJECT_CLUSTER,
	DG_REJECT_AUTH,
	DG_REJECT_SELF,
	DG_REJECT_DUPLICATE,
	DG_REJECT_SHUTDOWN,
} dg_reject_reason;

typedef struct dg_msg_reject {
	int32_t reason;
	dg_str text;
} dg_msg_reject;

typedef struct dg_msg_bytes {   /* PING, ECHO, TYPE_PROPOSE, TYPE_ANNOUNCE */
	dg_bytes data;
} dg_msg_bytes;

typedef struct dg_msg_heartbeat {
	int64_t topology_version;
	int64_t time_ms;        /* the sender's monotonic clock when sent */
	int64_t echo_ms;        /* time_ms of the receiver's latest HEARTBEAT
	                           the sender got (0: none): the receiver's lease */
	int64_t flags;          /* DG_HB_ANSWER: answer with a HEARTBEAT at once */
} dg_msg_heartbeat;
#define DG_HB_ANSWER 0x1

/* TOPO_PROPOSE: both phases of Paxos over the topology that follows
 * `base` (PROTOCOL.md, "Majority"); the ballot is (base, round, sender). */
enum { DG_PX_PREPARE = 1, DG_PX_ACCEPT = 2, DG_PX_ADOPTED = 3 };
/* or'ed into an ACCEPT's phase: the proposer accepted it itself first (a
 * voter that accepts too knows two acceptances) */
#define DG_PX_PROPOSER_ACCEPTED 0x10
/* or'ed into an ACCEPT's phase: the topology removes a node of its base (a
 * joiner, which knows no base, grants a removal only once every lease its
 * address renewed is over) */
#define DG_PX_REMOVES 0x20
#define DG_PX_PHASE_MASK 0x0f
typedef struct dg_msg_topo_propose {
	int64_t base;           /* the coordinator's version it follows */
	int64_t round;
	int64_t phase;          /* DG_PX_*: ADOPTED is ACCEPT of a topology a
	                           voter accepted at an earlier ballot */
	dg_raw topology;        /* the TOPOLOGY body of the new version (in a
	                           PREPARE: the one the coordinator wants) */
} dg_msg_topo_propose;

/* TOPO_VOTE granted: bit 0 promised (PREPARE) or accepted; bit 1 (with
 * bit 0) by a joiner restarted without its acceptor state (dgi_quorum_won
 * counts one such grant, among an even number of voters) */
#define DG_VOTE_GRANTED 0x1
#define DG_VOTE_AMNESIAC 0x2
typedef struct dg_msg_topo_vote {
	int64_t granted;        /* DG_VOTE_* bits; 0: refused */
	int64_t version;        /* the highest version this voter installed or
	                           accepted (a refused proposal goes above it) */
	int64_t promised_base, promised_round, promised_from; /* its promise now */
	int64_t acc_base, acc_round, acc_from; /* a PREPARE promised: the ballot
	                           of the topology it accepted last after that
	                           base (acc_from 0: none) */
	dg_bytes acc;           /* ... and its TOPOLOGY body (empty: none) */
} dg_msg_topo_vote;

typedef struct dg_msg_join {
	dg_str address;
	int64_t node_id;
	int64_t attrs;          /* DG_NODE_* bits of the joiner */
	int64_t floor;          /* the next topology version must exceed this */
} dg_msg_join;

typedef struct dg_msg_join_ack {
	int64_t topology_version;
	int64_t order;
	int64_t failure_timeout_ms;   /* the cluster's: the joiner adopts them */
	int64_t heartbeat_ms;
} dg_msg_join_ack;

typedef struct dg_msg_node_failed {
	int64_t node_id;
	int64_t topology_version;
} dg_msg_node_failed;

/* BASELINE: a change of the baseline, to the coordinator.  The addresses
 * are one LIST of STRING, read by the handler (views into the frame). */
typedef struct dg_msg_baseline {
	int64_t op;             /* DG_BASELINE_SET, _ADD, _REMOVE */
	dg_raw addrs;
} dg_msg_baseline;

typedef struct dg_msg_baseline_ack {
	int64_t topology_version; /* the version carrying the new set (or the
	                             current one when nothing changed) */
	int64_t changed;          /* 1: a new version was installed */
} dg_msg_baseline_ack;

typedef struct dg_msg_raw {     /* TOPOLOGY, REMOVED, TYPES_SNAPSHOT: a list, read by the handler */
	dg_raw list;
} dg_msg_raw;

/* A LIST carried whole inside a body (the handler reads it): written as
 * it is, read as a view into the frame.  DG_ERR_TYPE_MISMATCH when the
 * value is not a LIST.  The dg_msg_raw codec of bodies that are one list.
 * dg_msg_list_put copies the list without walking it: it must be a whole
 * LIST a dg_writer made, or one dg_msg_list_get returned (a NULL ptr is
 * written as a NULL); dg_msg_list_get checks the structure of what
 * arrives — every value's tag and extent (dg_read_skip) — before any
 * handler sees it, and the handlers' reads check the values (UTF-8,
 * objects) as they take them. */
dg_err dg_msg_list_put(dg_writer *w, const dg_raw *list);
dg_err dg_msg_list_get(dg_reader *r, dg_raw *list);
dg_err dg_msg_raw_encode(dg_writer *w, const void *body);
dg_err dg_msg_raw_decode(dg_reader *r, void *body);

/* ---- handshake crypto (auth.c) ---- */

/* HMAC-SHA256 of the handshake transcript (PROTOCOL.md); role 'l' or 'd'.
 * secret_len 0 gives 32 zero bytes.  DG_ERR_NOMEM/DG_ERR_INVAL. */
dg_err dgi_auth_mac(char role, const uint8_t *secret, size_t secret_len,
    const uint8_t *nonce_first, const uint8_t *nonce_second, dg_node_id id_d,
    dg_node_id id_l, const char *cluster, size_t cluster_len,
    uint8_t mac[DG_MAC_LEN]);
/* Constant-time comparison of two MACs. */
bool dgi_auth_equal(const uint8_t a[DG_MAC_LEN], const uint8_t b[DG_MAC_LEN]);
/* Cryptographically random bytes (nonces, node ids). */
dg_err dgi_random(void *out, size_t n);

/* ---- per-message-type counters ---- */
typedef struct dg_msg_counters {
	uint64_t sent, recv;              /* frames */
	uint64_t bytes_sent, bytes_recv;  /* header + body */
	uint64_t failures;                /* malformed or undecodable */
} dg_msg_counters;

typedef struct dg_msg_metric {
	const char *name;
	dg_msg_type type;
	dg_msg_counters c;
} dg_msg_metric;

/* The counters of every type in use (and UNKNOWN), in type order.  Writes
 * at most cap entries; returns how many types are in use.  Thread-safe;
 * allocates nothing. */
size_t dg_tp_metrics(const dg_tp *tp, dg_msg_metric *out, size_t cap);

/* ---- the transport ---- */
typedef struct dg_tp_config {
	const char *listen_url;      /* "tcp://127.0.0.1:47500"; tls+tcp:// for TLS */
	const char *advertise_url;   /* what peers dial; default listen_url */
	const char *cluster_name;    /* default "datagrid" */
	const uint8_t *secret;       /* cluster secret; NULL/0: no authentication */
	size_t secret_len;
	const char *tls_cert_key_file; /* PEM cert + key (TLS: both files required);
	                                  the certificate must name "datagrid"
	                                  (CN or DNS subjectAltName): nodes verify
	                                  each other by CA and that name */
	const char *tls_ca_file;     /* PEM CA that signs every node's certificate */
	size_t recv_max;             /* largest frame body accepted, default 16 MiB */
	size_t send_queue_max;       /* bytes queued per peer, default 64 MiB */
	uint32_t connect_timeout_ms; /* dial + handshake, default 5000 */
	uint32_t wait_spin_us;       /* a caller waiting for answers, when it is
	                                the process's only one, spins this long
	                                before it sleeps ("a caller waiting",
	                                below); default 1000; 0: never */
	uint32_t reactor_spin_us;    /* the reactor, after a round that read
	                                a message and sent one (or while a
	                                caller waits), polls for more this long
	                                (yielding its CPU) before it sleeps:
	                                a busy exchange's next message finds it
	                                running, not asleep; default 0 (off); 0:
	                                never (reactor.c) */
	uint32_t max_handshakes;     /* accepted connections in their handshake
	                                at once (before authentication), default
	                                128: one more is closed at once
	                                (HANDSHAKE-BUSY) */
	dg_node_id node_id;          /* 0: random */
	const dg_registry *reg;      /* for message bodies; required */
	/* called when a connection to a peer is established or lost */
	void (*on_peer)(void *ctx, dg_node_id peer, bool up, dg_err why);
	void *on_peer_ctx;
} dg_tp_config;

void dg_tp_config_init(dg_tp_config *cfg);

/* Starts listening.  *out owned by the caller (dg_tp_stop).  Errors:
 * DG_ERR_INVAL (config), DG_ERR_ADDRINUSE, DG_ERR_TLS (files), DG_ERR_NET,
 * DG_ERR_NOMEM. */
dg_err dg_tp_start(const dg_tp_config *cfg, dg_tp **out);
/* Closes every connection (requests in flight fail with DG_ERR_CLOSED),
 * waits for callbacks to finish, frees everything.  Not from a handler. */
void dg_tp_stop(dg_tp *tp);

dg_node_id dg_tp_self(const dg_tp *tp);
/* The largest message body this transport sends or accepts (its
 * recv_max; a cluster runs one setting): what a caller that packs many
 * entries into one message checks first. */
size_t dg_tp_recv_max(const dg_tp *tp);
/* The URL peers should dial (advertise_url, with the bound port when the
 * listen URL asked for port 0).  Static for the life of tp. */
const char *dg_tp_address(const dg_tp *tp);

/* Handler for incoming requests and one-way messages of a type.  May be
 * replaced at any time: fn and ctx change as one (a frame runs the old
 * pair or the new one, never the new function with the old context), and
 * dispatch reads them without a lock.  A handler being replaced may still
 * be running: dg_tp_quiesce waits for it.  Requests of a type that never
 * had a handler are answered with DG_ERR_UNSUPPORTED; of one whose handler
 * was removed (fn NULL: its service is stopping), DG_ERR_NOT_READY, which
 * senders treat as "map again and retry" — not as a failure to report. */
dg_err dg_tp_handle(dg_tp *tp, dg_msg_type type, dg_msg_handler fn, void *ctx);

/* Waits until no handler is running, nor a round-end callback a handler
 * left (dg_tp_at_round_end), after unsetting handlers with
 * dg_tp_handle(..., NULL, NULL), so their context can be freed.  Not from a
 * handler. */
void dg_tp_quiesce(dg_tp *tp);

/* Connects to url (if not connected), runs the handshake and returns the
 * peer's node id.  Blocks up to connect_timeout_ms.  Errors: DG_ERR_NET,
 * DG_ERR_TIMEOUT, DG_ERR_AUTH, DG_ERR_REFUSED (REJECT), DG_ERR_TLS. */
dg_err dg_tp_connect(dg_tp *tp, const char *url, dg_node_id *peer);
/* Remembers the address of a peer (from the topology) so sends to it dial on
 * demand. */
dg_err dg_tp_set_address(dg_tp *tp, dg_node_id peer, const char *url);
/* Drops the connection to a peer (failure detection) and fails what is
 * pending on it with DG_ERR_CONN_BROKEN. */
void dg_tp_disconnect(dg_tp *tp, dg_node_id peer);

/* One-way message.  Queued in order behind earlier messages to the peer.
 * DG_ERR_BUSY when the peer's send queue is full, DG_ERR_UNREACHABLE when no
 * connection and no known address, DG_ERR_CLOSED after stop. */
dg_err dg_tp_send(dg_tp *tp, dg_node_id to, dg_msg_type type, const void *body);

/* Request: cb runs once, with the reply (err DG_OK) or the failure
 * (DG_ERR_TIMEOUT after timeout_ms, DG_ERR_CONN_BROKEN, DG_ERR_CLOSED, or the
 * remote handler's error).  When this returns an error, cb never runs. */
typedef void (*dg_reply_fn)(void *ctx, dg_err err, const dg_msg_in *reply);
dg_err dg_tp_request(dg_tp *tp, dg_node_id to, dg_msg_type type,
    const void *body, uint32_t timeout_ms, dg_reply_fn cb, void *ctx);
/* Fails every pending request whose callback is cb, now: cb runs with
 * DG_ERR_CLOSED (and no reply), and every reply callback already running
 * has returned, before this returns — for a module that stops before the
 * transport, whose callbacks must not outlive it.  A request made
 * meanwhile is not covered.  Not from a reply callback or a handler. */
void dg_tp_cancel(dg_tp *tp, dg_reply_fn cb);
/* Corking from the calling thread: between dg_tp_cork_begin and
 * dg_tp_cork_end the frames this thread sends are queued, and each peer's
 * queue is written once, at the end — one write for a batch of requests
 * instead of one per frame.  begin returns false when the thread already
 * sends corked (a handler, on the reactor thread): end then does nothing.
 * Send nothing that waits for an answer in between. */
bool dg_tp_cork_begin(void);
void dg_tp_cork_end(bool began);
/* From a handler on a transport's reactor thread: fn(ctx) runs once at
 * the end of this round of events — after every message the round read
 * was handled, before the frames they sent are written — on that thread;
 * true.  False, nothing registered, on any other thread (a handler of a
 * TLS connection runs on nng's) or when the round has 4 already.  For
 * work gathered across a round's messages (the cache's copies to each
 * backup, one message per round). */
bool dg_tp_at_round_end(void (*fn)(void *ctx), void *ctx);
/* Blocking request: decodes the reply body into reply (its row's struct;
 * views copied into arena, which may be NULL when the body has none). */
dg_err dg_tp_call(dg_tp *tp, dg_node_id to, dg_msg_type type,
    const void *body, uint32_t timeout_ms, void *reply, dg_arena *arena);

/* Answer a request (no-op for one-way messages): from its handler, or later
 * from any thread with a copy of *req (only type, flags, from and corr are
 * used) — a handler may hand a request to another thread and reply there. */
dg_err dg_tp_reply(dg_tp *tp, const dg_msg_in *req, dg_msg_type type,
    const void *body);
dg_err dg_tp_reply_error(dg_tp *tp, const dg_msg_in *req, dg_err err);

/* Monotonic ms (dgi_now_ms clock) when a frame last arrived from peer, or
 * when its connection opened; 0 if never. */
uint64_t dg_tp_last_heard(const dg_tp *tp, dg_node_id peer);
uint64_t dgi_now_ms(void);
/* The same clock read coarsely (CLOCK_MONOTONIC_COARSE: up to a scheduler
 * tick behind, ~4 ns against ~28 ns here): for deadlines and timestamps
 * that are seconds long, on paths run once per operation. */
uint64_t dgi_coarse_ms(void);

/* Logging: marshal/log_int.h (dgi_log, dgi_lograte_due). */
/* The CLOCK_REALTIME instant ms milliseconds from now, for the absolute
 * deadlines of pthread_cond_timedwait and sem_timedwait. */
struct timespec;
void dgi_abstime_in(struct timespec *ts, uint64_t ms);
/* ---- a caller waiting for other nodes' answers ----
 * It spins first, then sleeps (one spinner per two CPUs at most):
 *  - while it is the only caller of this process waiting (a sequential
 *    caller), up to the transport's wait_spin_us — the callers of the
 *    node API only (a remote get or put, a batch, a tx's phase, a local
 *    FULL_SYNC put), not dg_tp_call's: every answer then comes
 *    back to a running thread.  Waking a sleeping one costs a futex wake
 *    and a context switch, and on a VM whose idle CPU halts (guest halt
 *    polling off) ~30 µs more: a pinned two-thread ping-pong takes 1.5 µs
 *    on one CPU and 58 µs across two (bench/README.md, "A sleeping
 *    caller's wake-up").  It stops spinning as soon as a second caller
 *    waits: a busy node's CPUs are for the threads that answer;
 *  - else a one-hop wait (dg_tp_call, a remote get) up to dgi_spin_ns
 *    (DGI_SPIN_NS, 30 µs; 0: never): on loopback its answer often comes
 *    within that.
 * dgi_wait_enter / dgi_wait_leave bracket a wait (spin and sleep) that
 * is not dgi_sem_wait_spin's, so that others see the caller waiting; a
 * transaction counts as one waiting caller from its begin to its end
 * (txn.c): at 128 clients in transactions most threads are runnable
 * between an answer and their next call, not waiting, and a "lone"
 * waiter's spin took a CPU they needed (transfer_*_128c 18% slower). */
#define DGI_SPIN_NS 30000u
#define DG_WAIT_SPIN_US_DEFAULT 1000u
#define DG_REACTOR_SPIN_US_DEFAULT 0u /* off until the failure in bench/README.md "Reactors that spin" is understood */
extern _Atomic uint32_t dgi_spin_ns;
void dgi_sem_wait_spin(const dg_tp *tp, sem_t *s, bool one_hop);
void dgi_wait_enter(void);
void dgi_wait_leave(void);
/* Between enter and leave: spins as above until s can be taken (true:
 * taken) or the spin ends (false: the caller sleeps its own way). */
bool dgi_spin_sem(const dg_tp *tp, sem_t *s, bool one_hop);
/* The same on a counter of answers still due: until *left reads 0 (true)
 * or the spin ends.  Writers change *left with __atomic operations. */
bool dgi_spin_zero(const dg_tp *tp, const uint32_t *left);
/* A count of answers due that one caller waits for (a transaction's
 * round): the caller adds one per request before it goes out
 * (dgi_due_add), each answer takes one away (dgi_due_done), and
 * dgi_due_wait spins as dgi_spin_zero, then sleeps on the word itself (a
 * futex; no mutex or condition variable: glibc's pthread_cond_wait takes
 * its mutex back marked contended, so the unlock after every wait was one
 * more futex system call).  DGI_DUE_SLEEPING is set while the caller
 * sleeps; dgi_due_done makes the wake-up call only then.  An answer's
 * writer may still be in its wake-up call when dgi_due_wait returns: the
 * call names the word's address and reads nothing, and the memory stays
 * mapped (an owner that frees it first waits out the writers' own lock,
 * as txn.c's tx_destroy does). */
#define DGI_DUE_SLEEPING 0x80000000u
static inline uint32_t dgi_due_n(const uint32_t *due)
{
	return __atomic_load_n(due, __ATOMIC_ACQUIRE) & ~DGI_DUE_SLEEPING;
}
static inline void dgi_due_add(uint32_t *due, uint32_t n)
{
	__atomic_add_fetch(due, n, __ATOMIC_RELAXED);
}
/* One answer in; true: it was the last. */
bool dgi_due_done(uint32_t *due);
/* The same, but the last answer stays counted when keep(arg) says so
 * (true then; its thread takes it away later with dgi_due_done).  keep
 * runs once, only for the last one, when no other answer can come and every
 * earlier writer's stores are visible: the answers' writers need no lock
 * between them to find which one is last. */
bool dgi_due_done_or_keep(uint32_t *due, bool (*keep)(void *), void *arg);
void dgi_due_wait(const dg_tp *tp, uint32_t *due);
/* Whether a caller inside dgi_wait_enter would spin while alone now: the
 * process's only waiting caller, with tp's wait_spin_us set. */
bool dgi_wait_alone(const dg_tp *tp);
/* Whether any caller of this process waits for answers now. */
bool dgi_waiting_any(void);
/* Threads spinning in these now (tests). */
int dgi_spinners(void);

/* Totals per peer and for the node. */
typedef struct dg_tp_stats {
	uint64_t frames_sent, frames_recv, bytes_sent, bytes_recv;
	uint64_t connects, disconnects;
	uint64_t auth_failures, handshake_failures, malformed_frames;
	uint64_t dropped;            /* queued frames lost to a broken connection */
	uint64_t busy;               /* sends refused for a full queue */
} dg_tp_stats;
void dg_tp_get_stats(const dg_tp *tp, dg_tp_stats *out);
dg_err dg_tp_peer_stats(const dg_tp *tp, dg_node_id peer, dg_tp_stats *out);

/* ---- sections: memory that lock-free readers may hold (epoch.c) ----
 * Memory a reader reaches without a lock (an affinity a topology change
 * replaced, a destroyed cache's partitions) is freed only once every
 * reader that could have seen it is done.  A reader brackets its use with
 * dgi_epoch_enter / dgi_epoch_leave: per thread, nestable, a few
 * instructions and no fence where Linux has membarrier (the rare
 * dgi_epoch_passed pays for it; else one fence) — no lock, no write to
 * shared memory, no allocation but at a thread's first entry.  A writer unlinks the object,
 * takes a tag (dgi_epoch_retire) and frees it once dgi_epoch_passed(tag):
 * every section that had begun by then has ended.  One domain per process
 * for these, and a second for read sections (below).
 * Every handler and reply callback this transport runs is inside a
 * section.  A section may be long (a request's wait): it only delays
 * frees; nothing ever waits for one. */
void dgi_epoch_enter(void);
void dgi_epoch_leave(void);
bool dgi_epoch_inside(void);          /* this thread is in a section */
uint64_t dgi_epoch_retire(void);
bool dgi_epoch_passed(uint64_t tag);

/* Read sections: a second domain, the same rules, for what a lock-free
 * read looks at and nothing else (the cache's entries and slot tables:
 * cache/store.c, "Retired memory").  A read section never waits, so
 * memory retired in it is freed a read's time later — not after the
 * longest section of the process (a request waiting for its answer).
 * Not nestable; a few instructions, no fence where Linux has membarrier. */
void dgi_epoch_rd_enter(void);
void dgi_epoch_rd_leave(void);
uint64_t dgi_epoch_rd_retire(void);
bool dgi_epoch_rd_passed(uint64_t tag);

/* Thread-local variables read on hot paths: initial-exec, so a shared
 * library reaches them at a fixed offset, without __tls_get_addr. */
#if defined(__GNUC__) || defined(__clang__)
#define DGI_TLS_IE __attribute__((tls_model("initial-exec")))
#else
#define DGI_TLS_IE
#endif

/* A short section: an ordinary section and (rd) a read section at once,
 * in line — the cache's local get (cache/read.c) and put (primary.c), the
 * hottest paths of the process, where two calls cost a tenth of the
 * operation (a put, which takes the partition lock and may wait for it,
 * enters no read section: those never wait).  Entered only
 * by a thread in no section that has its slot, where membarrier makes
 * the fence a compiler barrier: dgi_epoch_short_enter returns false (and
 * entered nothing) otherwise, and the caller takes the general path,
 * which enters the usual way.  Inside, a nested dgi_epoch_enter only
 * counts; dgi_epoch_short_leave (the same rd) ends them.  The same
 * protocol as the calls (epoch.c): the slot's stores, then the compiler
 * barrier. */
struct dgi_epoch_slot {
	_Atomic uint64_t active, active_rd;
};
struct dgi_epoch_tls {
	struct dgi_epoch_slot *slot; /* the thread's, NULL before its first section */
	uint32_t depth;              /* ordinary sections nested */
};
struct dgi_epoch_shared {
	_Atomic uint64_t epoch, epoch_rd;
	bool asym;                   /* readers fence with a compiler barrier */
};
extern DGI_TLS_IE _Thread_local struct dgi_epoch_tls dgi_epoch_tl;
extern struct dgi_epoch_shared dgi_epoch_g;
static inline __attribute__((always_inline)) bool dgi_epoch_short_enter(bool rd)
{
	struct dgi_epoch_tls *t = &dgi_epoch_tl;
	struct dgi_epoch_slot *s = t->slot;
	/* (a slot means slot_once ran: asym is settled; depth 0 means no
	 * read section either — one is entered only inside an ordinary one,
	 * get_fast's — so active_rd is 0 here) */
	if (__builtin_expect(s == NULL || t->depth != 0 || !dgi_epoch_g.asym, 0))
		return false;
	t->depth = 1;
	atomic_store_explicit(&s->active, atomic_load_explicit(&dgi_epoch_g.epoch,
	    memory_order_acquire), memory_order_relaxed);
	if (rd)
		atomic_store_explicit(&s->active_rd, atomic_load_explicit(&dgi_epoch_g.epoch_rd,
		    memory_order_acquire), memory_order_relaxed);
	atomic_signal_fence(memory_order_seq_cst);
	return true;
}
static inline __attribute__((always_inline)) void dgi_epoch_short_leave(bool rd)
{
	struct dgi_epoch_tls *t = &dgi_epoch_tl;
	struct dgi_epoch_slot *s = t->slot; /* (once: a store would reload it) */
	if (rd)
		atomic_store_explicit(&s->active_rd, 0, memory_order_release);
	atomic_store_explicit(&s->active, 0, memory_order_release);
	t->depth = 0;
}

/* Names the calling thread (at most 15 characters: what top -H, ps -L,
 * perf --comm and gdb show).  Every thread the library starts calls it
 * first: "dg-reactor", "dg-member", "dg-sweeper", ... (node/DEPLOY.md,
 * "Threads"). */
void dgi_thread_name(const char *name);

/* A small number for the calling thread (epoch.c: its section slot's):
 * unique among the live threads, 0, 1, 2, ... up to the most threads of
 * the process alive at once.  A thread that exits hands its index on to a
 * later thread, after (happens-before) everything it wrote, so data kept
 * per index has one writer at a time.  UINT32_MAX when out of memory (no
 * index: use shared data).  A few instructions after the first call. */
extern DGI_TLS_IE _Thread_local uint32_t dgi_thread_ix1;  /* the index + 1; 0: none yet */
uint32_t dgi_thread_index_slow(void);
static inline uint32_t dgi_thread_index(void)
{
	uint32_t i = dgi_thread_ix1;
	return __builtin_expect(i != 0, 1) ? i - 1 : dgi_thread_index_slow();
}

/* The membership (dg_member, dg_topology): member.h, part of this API. */
#include "member.h"

#ifdef __cplusplus
}
#endif
#endif /* DG_TRANSPORT_H */
