/*
 * transport_int.h — internals of transport/ (not installed).
 *
 * Objects
 * -------
 * dg_tp     the node's transport: listener, peers, pending requests,
 *           handlers, counters, and one service thread (timeouts, reaping
 *           closed connections).
 * peer      one remote node, found by node id in a copy-on-write table
 *           (lock-free lookup).  Owns the send queue: frames are encoded
 *           straight into peer->queue under peer->mu and handed to the
 *           connection's writer, which sends everything queued in one write
 *           (double buffering: `queue` fills while `wire` is on the wire).
 *           Peers live until the transport stops.
 * conn      one byte stream: handshake state, the receive buffer, the frame
 *           being read.  A connection is attached to its peer when the
 *           handshake completes; only then does application traffic flow.
 *           Its bytes are moved by one of two backends (struct conn_ops):
 *           native TCP for tcp:// (reactor.c: one epoll thread per dg_tp,
 *           writes by the sending thread) or nng streams for tls+tcp:// and
 *           ipc:// (conn.c).  Framing, the handshake, attachment, closing
 *           and reaping are shared (conn.c).
 *
 * Locks: tp->mu (peer table writes, connection list, addresses), peer->mu
 * (queue, attachment), conn->mu (write state), stripe->mu (pending
 * requests).  Order: tp->mu, then peer->mu, then conn->mu, then a stripe.
 * A send that must dial decides and prepares the dial under peer->mu and
 * starts it (which takes tp->mu) after letting go (dgi_conn_dial_new,
 * dgi_conn_dial_start).  No lock is held while a callback runs.
 */
#ifndef DG_TRANSPORT_INT_H
#define DG_TRANSPORT_INT_H

#include "transport.h"
#include "marshal/marshal_int.h"

#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>

#define DG_CLUSTER_NAME_MAX 200
#define DG_HANDSHAKE_MAX 1024   /* largest handshake frame body accepted */
#define PEND_STRIPES 16


/* Per-type message counters.  Each array has a single writer, so an update
 * is a relaxed load and store — no locked instruction, no contention:
 *   peer->tx  written under peer->mu (every send of the peer queues there);
 *   conn->rxc written by the connection's receive callback (one at a time);
 *             folded into peer->rx_old when the connection closes;
 *   tp->hs    handshake frames (rare): atomic adds.
 * A snapshot sums them (dg_tp_metrics).  Failures are rare: atomic adds. */
struct ctr {
	_Atomic uint64_t n, bytes;
};

static inline void ctr_bump(struct ctr *c, size_t bytes)
{
	atomic_store_explicit(&c->n, atomic_load_explicit(&c->n, memory_order_relaxed) + 1,
	    memory_order_relaxed);
	atomic_store_explicit(&c->bytes,
	    atomic_load_explicit(&c->bytes, memory_order_relaxed) + bytes,
	    memory_order_relaxed);
}

/* Events (rare): atomic adds. */
#define DGI_HANDSHAKE_LOG_MS 1000u
/* How long a dial refused as a duplicate waits for the peer's connection
 * before dialling again (at most the connect timeout).  The refusal may
 * come from a connection the peer has not yet seen closed (we reset it,
 * or a cut did), and then no dial of the peer's is coming: waiting the
 * whole connect timeout (5 s) kept a healed pair apart past the
 * membership's patience (transport_test, test_member_silent_peer_reset,
 * failed in CI).  Its dial, if there is one, attaches within a round
 * trip. */
#define DGI_DUP_WAIT_MS 500u
uint64_t dgi_dup_wait_until(const dg_tp *tp, uint64_t now);

/* quorum.c: majorities and leases (PROTOCOL.md, "Majority").  Pure.
 * dgi_quorum_voters: t's voting servers — the baseline's addresses when one
 * is set, else the URLs of its servers (not CLIENT) — sorted (strcmp) and
 * distinct, as views into t, at most cap; returns how many.
 * dgi_quorum_index: the index of url among them, -1 when not a voter.
 * dgi_quorum_need: a majority of n voters (n / 2 + 1).
 * dgi_quorum_kth: the need(n)-th largest of vals (reordered), 0 when n is 0:
 * the newest time by which a majority answered.
 * dgi_lease_until: the end of a lease renewed by that majority at kth (0:
 * none; UINT64_MAX: kth is UINT64_MAX, this node is a majority alone). */
uint32_t dgi_quorum_voters(const dg_topology *t, const char **out, uint32_t cap);
int32_t dgi_quorum_index(const char *const *voters, uint32_t n, const char *url);
uint32_t dgi_quorum_need(uint32_t nvoters);
uint64_t dgi_quorum_kth(uint64_t *vals, uint32_t n);
uint64_t dgi_lease_until(uint64_t kth, uint32_t lease_ms);
/* The rejoin back-off (PROTOCOL.md, "Majority"): the next interval after
 * cur ms without an answer — doubled, from DGI_BACKOFF_MIN_MS up to
 * DGI_BACKOFF_MAX_MS — and the wait to use for an interval, jittered by
 * seed into [interval / 2, interval] so a healed side does not ask in step. */
#define DGI_BACKOFF_MIN_MS 50u
#define DGI_BACKOFF_MAX_MS 2000u
uint32_t dgi_backoff_next(uint32_t cur);
uint32_t dgi_backoff_wait(uint32_t interval, uint64_t seed);

/* Paxos over the topology that follows version `base` (PROTOCOL.md,
 * "Majority"): a proposer's ballot, ordered on (base, round, from) — a
 * voter that promised one refuses every smaller one, and never goes back
 * to an older base. */
struct dgi_ballot {
	int64_t base, round;
	dg_node_id from;
};
int dgi_ballot_cmp(const struct dgi_ballot *a, const struct dgi_ballot *b);
struct dgi_acceptor {
	bool member;            /* joined, and not stopping */
	bool joiner;            /* not a member: a server joining (a voter
	                           restarted on its address, or one removed and
	                           rejoining) — it promises and accepts like a
	                           member, a topology without it too (PROTOCOL.md,
	                           "A voter that restarted") */
	bool segmented;
	int64_t installed;      /* the version of its topology */
	struct dgi_ballot promised; /* the highest ballot it promised or accepted */
};
struct dgi_px_ask {
	struct dgi_ballot b;
	bool accept;            /* phase 2 (a topology to accept); else PREPARE */
	bool adopted;           /* phase 2 of a topology some voter accepted before:
	                           a new topology's own rules were checked then */
	bool from_in;           /* the proposer is a node of it */
	bool self_in;           /* the voter is a node of it */
	bool drops_heard;       /* it removes a node the voter heard from lately */
};
/* NULL: promise (PREPARE) or accept; else why not. */
const char *dgi_px_rule(const struct dgi_acceptor *v, const struct dgi_px_ask *a);
/* Whether grants make a majority of nvoters: `full` from voters that keep
 * their promises, `amnesiac` from joiners that lost theirs (a restart
 * without its acceptor file).  One amnesiac grant counts, and only among
 * an even number of voters: the other n/2 of that majority meet every
 * majority of n in a voter that remembers (PROTOCOL.md, "A voter that
 * restarted"). */
bool dgi_quorum_won(uint32_t full, uint32_t amnesiac, uint32_t nvoters);

struct tp_totals {
	_Atomic uint64_t connects, disconnects;
	_Atomic uint64_t auth_failures, handshake_failures, malformed_frames;
	_Atomic uint64_t dropped, busy;
};

enum conn_state {
	C_DIALED,        /* dialer: HELLO sent, waiting for CHALLENGE */
	C_PROVED,        /* dialer: PROOF sent, waiting for WELCOME */
	C_ACCEPTED,      /* listener: waiting for HELLO */
	C_CHALLENGED,    /* listener: CHALLENGE sent, waiting for PROOF */
	C_OPEN,          /* handshake done: application frames */
	C_CLOSED,
};

struct peer;
struct dial;
struct conn;
struct dgi_reactor;

/* What an epoll event points at (reactor.c): the first thing it reads. */
enum { DGI_EV_WAKE = 1, DGI_EV_LISTEN, DGI_EV_DIAL, DGI_EV_CONN };
struct dgi_ev {
	int kind;
};

/* A connection's I/O backend.  Shared code (conn.c) owns the framing, the
 * handshake, attachment, the counters and the connection's lifetime; a
 * backend only moves bytes and reports back through dgi_conn_rx_done,
 * dgi_conn_tx_done and dgi_conn_close.  Two exist: native TCP (reactor.c,
 * dgi_tcp_ops) and nng streams (conn.c). */
struct conn_ops {
	/* Arrange for the next bytes to land in c->rx's spare room
	 * (c->rx.data + c->rx.len up to c->rx.cap, at least RX_CHUNK/4 bytes)
	 * and be reported with dgi_conn_rx_done(c, n), or the connection closed
	 * (dgi_conn_close) on end of stream or error.  Reports for one
	 * connection never overlap.  Called when the connection starts and
	 * after every dgi_conn_rx_done that left it open, from that report.
	 * Native: a standing EPOLLIN registration, nothing to do. */
	void (*rx_start)(struct conn *c);
	/* Write c->wire from c->tx_done to c->wire.len (c->wire.len may grow
	 * until the write ends: handshake frames queued behind it).  The caller
	 * owns the write (it set c->tx_busy) and may hold c->mu and peer->mu: a
	 * backend takes no transport lock here and calls nothing back.  Returns
	 * true if everything was written now (c->tx_done == c->wire.len: the
	 * caller finishes the write, dgi_conn_tx_done); false if the write goes
	 * on in the background — the backend then calls dgi_conn_tx_done (no
	 * lock held) when it ends, or never, when the connection fails (it is
	 * closed with an error). */
	bool (*tx_start)(struct conn *c);
	/* The connection was marked C_CLOSED (dgi_conn_close, any thread, no
	 * lock held, once): stop its I/O — pending and later operations fail
	 * or never complete; a completion already running may finish, and
	 * sees C_CLOSED.  Does not free anything. */
	void (*close)(struct conn *c);
	/* True once no backend thread can touch c any more (after close).
	 * Polled by the service thread before free; false puts the free off. */
	bool (*idle)(struct conn *c);
	/* Release the backend's resources (service thread or stop; c->users is
	 * 0 and idle(c) held).  May wait for completions to return. */
	void (*free)(struct conn *c);
};

struct conn {
	dg_tp *tp;
	const struct conn_ops *ops;
	struct conn *next;          /* tp->conns */
	pthread_mutex_t mu;         /* tx state; state transitions */
	_Atomic int state;          /* enum conn_state */
	bool dialer;
	_Atomic bool abandoned;     /* REJECT sent: close when it is written;
	                               set by the reactor outside mu, read by
	                               a close from any thread (dg_tp_stop) */
	_Atomic bool half;          /* accepted and holding a handshake slot
	                               (tp->half_open) until it is open or closed */
	char *hello_url;            /* the address its HELLO named: stored for
	                               the peer only once its PROOF checked */
	bool dup_refused;           /* dialer: the peer refused it as a duplicate */
	struct peer *peer;          /* set when open (and for dialers, the target) */
	dg_node_id peer_id;         /* from the handshake: set under mu (read
	                               freely on the reactor) */
	char *dial_url;             /* dialer: the URL dialed */
	uint64_t deadline_ms;       /* the handshake must end by then */
	uint8_t nonce_mine[DG_NONCE_LEN];
	uint8_t nonce_theirs[DG_NONCE_LEN];
	dg_err fail;                /* why it closed (for waiters) */
	/* receive */
	dg_buf rx;                  /* frames read, not yet handled (a partial one at the front) */
	/* send */
	dg_buf wire;                /* bytes on the wire (or the handshake frame) */
	size_t tx_done;             /* of wire */
	bool tx_busy;
	/* backend: nng streams (conn.c) */
	nng_stream *stream;
	nng_aio *rx_aio, *tx_aio;
	/* backend: native TCP (reactor.c) */
	int fd;                     /* -1 for nng; closed by free only */
	struct dgi_ev ev;           /* its epoll registration points here */
	_Atomic bool tx_wait;       /* a write waits for EPOLLOUT: the reactor owns it */
	_Atomic uint64_t tx_end_ns; /* when the last write ended (coalescing) */
	uint64_t del_epoch;         /* reactor epoch read after it left epoll */
	/* dialer waiting in dg_tp_connect */
	struct connect_wait *waiter;
	struct ctr rxc[DG_MSG__COUNT]; /* frames received on this connection */
	_Atomic int users;          /* kicks between preparing and starting a write,
	                             * closes of a connection taken from its peer */
};

/* A dial in progress (either backend); freed by the service thread once
 * done (and, native, once its resolver thread was joined). */
struct dial {
	dg_tp *tp;
	struct dial *next;          /* tp->dials */
	char *url;
	struct peer *peer;
	struct connect_wait *waiter;
	bool done;                  /* ended (dgi_dial_end); under tp->mu */
	/* nng */
	nng_stream_dialer *dialer;
	nng_aio *aio;
	/* native (reactor.c): everything below belongs to the reactor thread
	 * once posted to it */
	bool native;
	struct dgi_ev ev;
	struct dial *rnext;         /* the reactor's posted or connecting list */
	int fd;
	uint64_t deadline_ms;       /* connect (and name resolution) by then */
	dg_err err;                 /* set before posting: resolution failed */
	const char *why;            /* and why (static text) */
	struct sockaddr_storage sa; /* the address to connect to */
	socklen_t salen;
	char *host, port[8];        /* a host name for the resolver thread */
	pthread_t resolver;
	bool has_resolver;
};

struct peer {
	dg_node_id id;
	pthread_mutex_t mu;
	struct conn *conn;          /* open connection, or NULL */
	bool dialing;               /* a dial to this peer is in progress, or
	                               (dup_wait_ms) the peer's own dial is
	                               expected to attach */
	bool corked;                /* the reactor thread queued frames for it
	                               and flushes them at the end of its round */
	uint64_t dup_wait_ms;       /* our dial lost the both-dial race: queued
	                               frames wait for the peer's connection
	                               until then, and are redialled after */
	char *url;                  /* where to dial it (owned), or NULL */
	uint64_t redial_ms;         /* after a failed dial, a send dials again
	                               only from then on (fails at once before):
	                               backing off 50 ms to 2 s, jittered, so a
	                               peer cut off is not dialled at every send */
	uint32_t redial_backoff;    /* the last wait's base; 0 once connected */
	dg_buf queue;               /* frames not yet on the wire */
	uint64_t queued_frames;
	_Atomic uint64_t heard_ms;  /* when a frame last arrived from it */
	_Atomic bool test_cut;      /* tests: its frames are read and dropped
	                               (dgi_tp_test_cut) */
	struct tp_totals t;         /* per-peer events */
	struct dgi_lograte lr_dial; /* DIAL-FAIL to it: once a second, counted */
	struct ctr tx[DG_MSG__COUNT];     /* under mu */
	struct ctr rx_old[DG_MSG__COUNT]; /* from closed connections, under mu */
};

struct peer_table {
	uint32_t mask;
	uint32_t count;
	struct {
		_Atomic(dg_node_id) key;
		struct peer *p;
	} slot[];
};

struct pending {
	uint64_t corr;              /* 0: empty */
	dg_node_id peer;
	dg_msg_type reply;          /* the answer's type, or 0: any */
	uint64_t deadline_ms;
	dg_reply_fn cb;
	void *ctx;
};

struct stripe {
	pthread_mutex_t mu;
	uint32_t mask, count, tombs;
	struct pending *slots;
	struct pending *spare;      /* mask + 1 more: clearing the tombstones
	                               rehashes into it, then the two swap */
};

/* A type's handler: fn and ctx are one pair, replaced together under a
 * sequence lock — writers (dg_tp_handle, serialised by tp->mu) make seq
 * odd, store both, make it even; a reader (every dispatch) reads seq, both,
 * seq again and retries when a write was under way or happened between.
 * A frame never runs the new function with the old context or the other
 * way round; dispatch takes no lock and allocates nothing. */
struct handler {
	_Atomic uint32_t seq;
	_Atomic(dg_msg_handler) fn;
	void *_Atomic ctx;
};

struct dg_tp {
	dg_tp_config cfg;
	char *listen_url, *cluster;
	/* what peers dial (advertised); set once the listener is bound —
	 * after the reactor may already run handshakes, hence atomic */
	char *_Atomic address;
	uint8_t *secret;
	size_t secret_len;
	dg_node_id self;
	const dg_registry *reg;
	nng_stream_listener *listener; /* tls+tcp://, ipc:// */
	nng_aio *accept_aio;       /* accepts; between a failed accept and the
	                              next, sleeps (accept_sleeping) */
	bool accept_sleeping;      /* accept_aio's callback only */
	uint32_t accept_backoff_ms;/* 0 after a success; 10..1000 doubling */
	struct dgi_reactor *reactor; /* native tcp:// (always started) */
	int listen_port;            /* native listener: the bound port */
	nng_tls_config *tls_server, *tls_client;
	pthread_mutex_t mu;
	_Atomic(struct peer_table *) peers;
	struct conn *conns;         /* every live connection */
	struct conn *dead;          /* closed, waiting for the service thread */
	struct dial *dials;         /* dials started; freed when done */
	void **retired;             /* old peer tables, freed at stop */
	size_t nretired;
	_Atomic bool stopping;
	_Atomic uint64_t next_corr;
	_Atomic int in_handler;     /* handlers running now (dg_tp_quiesce) */
	_Atomic int in_callback;    /* reply callbacks taken from the table and not
	                               yet returned (dg_tp_cancel); counted under
	                               the stripe lock that takes them */
	struct stripe stripes[PEND_STRIPES];
	struct handler handlers[DG_MSG__COUNT];
	struct ctr hs_tx[DG_MSG__COUNT], hs_rx[DG_MSG__COUNT];
	_Atomic uint64_t failures[DG_MSG__COUNT];
	struct dgi_lograte lr_refused, lr_rejected; /* HANDSHAKE-REFUSED, -REJECTED */
	struct dgi_lograte lr_busy, lr_hs_timeout;  /* HANDSHAKE-BUSY, -TIMEOUT */
	struct dgi_lograte lr_accept;               /* ACCEPT-FAIL */
	_Atomic uint32_t half_open; /* accepted connections in their handshake */
	struct dgi_lograte lr_dial; /* DIAL-FAIL of dials by URL (no peer yet) */
	_Atomic uint32_t stale_ms;  /* dgi_tp_set_stale_ms (0: never) */
	struct tp_totals t;
	pthread_t service;
	pthread_cond_t service_cv;
	bool service_started;
};

uint64_t dgi_now_ms(void);

/* Tests: stop membership without telling anyone (a crash, in-process). */
void dgi_member_kill(dg_member *m);
/* Tests: the membership thread (heartbeats, failure detection) does not
 * run for ms from its next wake-up, as in a SIGSTOP of the process; with
 * a handler that blocks the transport's reactor thread as long, a node
 * is paused in-process (tests/transport_test.c, mnode_pause). */
void dgi_member_test_stall(dg_member *m, uint32_t ms);


/* ---- tp.c: peers, pending requests, counters (used by conn.c) ---- */
struct peer *dgi_peer_get(dg_tp *tp, dg_node_id id, bool create);
/* Count a frame: sent to p (p->mu held), received on c (its rx callback),
 * or a handshake frame of tp (any thread). */
static inline void dgi_count_tx(struct peer *p, dg_msg_type type, size_t bytes)
{
	ctr_bump(&p->tx[type], bytes);
}
static inline void dgi_count_rx(struct conn *c, dg_msg_type type, size_t bytes)
{
	ctr_bump(&c->rxc[type], bytes);
}
void dgi_count_hs(dg_tp *tp, dg_msg_type type, bool sent, size_t bytes);
void dgi_count_failure(dg_tp *tp, dg_msg_type type);
/* A response frame arrived: complete its pending request. */
void dgi_complete(dg_tp *tp, const dg_msg_in *in);
/* Fail every pending request to peer with err. */
void dgi_fail_peer(dg_tp *tp, dg_node_id peer, dg_err err);
/* A dial of p failed or could not start: its queue is dropped (counted),
 * its requests fail with why (tp.c). */
void dgi_dial_failed(dg_tp *tp, struct peer *p, dg_err why);
/* Empties p's send queue (p->mu held); returns the frames it held. */
uint64_t dgi_peer_drop_queue(struct peer *p);
/* Counts n dropped frames of p (node and peer totals). */
void dgi_count_dropped(dg_tp *tp, struct peer *p, uint64_t n);
/* An application frame arrived on an open connection. */
void dgi_dispatch(dg_tp *tp, struct conn *c, const dg_frame_header *h,
    const uint8_t *body);

/* ---- conn.c: connections and the handshake ---- */
dg_err dgi_conn_accept_start(dg_tp *tp);
/* For backends: a new connection (not yet in tp->conns), its shared parts
 * allocated; the backend sets its own fields, then links it. */
struct conn *dgi_conn_new(dg_tp *tp, const struct conn_ops *ops, bool dialer);
void dgi_conn_link(struct conn *c);
void dgi_conn_discard(struct conn *c);       /* a conn never linked */
void dgi_conn_begin(struct conn *c);         /* an accepted conn: start reading */
/* n bytes arrived in c->rx's spare room: handle every complete frame. */
void dgi_conn_rx_done(struct conn *c, size_t n);
/* A write the backend took over ended (tx_done == wire.len).  Frees the
 * wire buffer and returns the next write to start (dgi_conn_start), or
 * NULL.  No lock held. */
struct conn *dgi_conn_tx_done(struct conn *c);
/* A dial ended: c is the new connection (linked), or NULL and e says why
 * it failed (why: text for the log).  Runs the handshake's first step or
 * the failure path, then marks d done.  No lock held. */
void dgi_dial_end(struct dial *d, struct conn *c, dg_err e, const char *why);
/* Starts a dial to url for peer p (p may be NULL when the id is unknown).
 * waiter (optional) is signalled when the handshake ends.  No lock held
 * (it takes tp->mu). */
dg_err dgi_conn_dial(dg_tp *tp, const char *url, struct peer *p,
    struct connect_wait *waiter);
/* The same in two steps, so a caller holding peer->mu (which must not
 * take tp->mu: the lock order) decides and prepares the dial under it —
 * new copies url and checks it, taking no transport lock — and starts it
 * once it has let go — start takes tp->mu.  new: NULL and *err on
 * failure.  start: DG_ERR_CLOSED (the transport is stopping; the dial is
 * freed and nothing more happens), else every outcome comes through
 * dgi_dial_end. */
struct dial *dgi_conn_dial_new(dg_tp *tp, const char *url, struct peer *p,
    struct connect_wait *waiter, dg_err *err);
dg_err dgi_conn_dial_start(struct dial *d);
/* Corking: frames that handlers send while the reactor handles one round
 * of events are queued, and each peer's queue is written once at the end
 * of the round — one write for many messages under load, instead of a
 * write per message.  A caller's thread corks the same way around a batch
 * (dg_tp_cork_begin).  A peer corked by one thread is written by that
 * thread's flush: frames another thread queues meanwhile go with it. */
#define DGI_CORK_MAX 64
#define DGI_ROUND_END_MAX 4
struct dgi_cork {
	int n;
	struct peer *p[DGI_CORK_MAX];
	bool round;                 /* the reactor's: dg_tp_at_round_end works */
	dg_tp *tp;                  /* the reactor's transport (round only) */
	int nend;
	void (*end_fn[DGI_ROUND_END_MAX])(void *ctx);
	void *end_ctx[DGI_ROUND_END_MAX];
};
extern _Thread_local struct dgi_cork *dgi_cork;
/* Tests: a dialer's handshake waits this long before it attaches its
 * connection to the peer (0: not at all), so that another thread's close
 * can come first (test_closed_handshake_never_attaches). */
extern _Atomic uint32_t dgi_test_attach_delay_ms;
/* Reactors of this process polling now (reactor_spin_us; tests), and
 * how many may at once. */
uint32_t dgi_reactor_spinning(void);
uint32_t dgi_reactor_spin_cap(void);
/* Writes every corked peer's queue (reactor thread, end of a round). */
void dgi_cork_flush(struct dgi_cork *ck);
/* Runs (and forgets) what handlers of this round asked for at its end
 * (dg_tp_at_round_end): before dgi_cork_flush.  Each callback counts as a
 * running handler (tp->in_handler) from its registration until it
 * returned, so dg_tp_quiesce waits for it too. */
void dgi_round_end(struct dgi_cork *ck);

/* Service thread: redials peers whose duplicate-refused dial was not
 * followed by the peer's own connection in time. */
void dgi_peers_dup_expire(dg_tp *tp, uint64_t now);
/* An accepted connection may start its handshake: fewer than
 * cfg.max_handshakes are in theirs (it takes a slot, which dgi_conn_new
 * gives the connection); false: close it at once (counted as a handshake
 * failure, HANDSHAKE-BUSY once a second). */
bool dgi_conn_admit(dg_tp *tp);
/* Close a connection (from any thread, callbacks included). */
void dgi_conn_close(struct conn *c, dg_err why);
/* Close the peer's connection, taken as peer->mu is held (the caller holds
 * it and must not later): the connection stays allocated until this returns
 * (c->users), as another thread may close it meanwhile and the service
 * thread would free it. */
void dgi_conn_close_held(struct peer *p, dg_err why);
/* Hand the peer's queued frames to its open connection (peer->mu held):
 * returns the connection whose write must be started, or NULL. */
struct conn *dgi_conn_kick(struct peer *p);
/* Start the write dgi_conn_kick prepared (NULL: none), after the caller
 * dropped its locks. */
void dgi_conn_start(struct conn *c);
/* Free closed connections (service thread / stop: never from a callback);
 * true if some could not be freed yet (the reactor has not let go). */
bool dgi_conn_reap(dg_tp *tp);
/* Close connections whose handshake is past its deadline. */
void dgi_conn_expire(dg_tp *tp, uint64_t now);
/* At stop: abort dials, close every connection, wait, free. */
void dgi_conn_stop_all(dg_tp *tp);

struct connect_wait {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool done;
	dg_err err;
	dg_node_id peer;
};

/* ---- reactor.c: native TCP for tcp:// URLs ---- */
extern const struct conn_ops dgi_tcp_ops;
bool dgi_tcp_url(const char *url);           /* "tcp://..." */
/* Starts tp->reactor: its epoll and wake descriptors, the listening socket
 * when listen_url is a tcp:// URL (the bound port in tp->listen_port), its
 * thread.  DG_ERR_INVAL (URL), DG_ERR_ADDRINUSE, DG_ERR_NET, DG_ERR_NOMEM. */
dg_err dgi_reactor_start(dg_tp *tp, const char *listen_url);
/* Checks a tcp:// URL and takes a numeric address (any thread, locks may
 * be held; nothing started).  DG_ERR_INVAL for a bad URL. */
dg_err dgi_tcp_dial_prepare(struct dial *d);
/* Starts a prepared dial that is in tp->dials: a host name is resolved on a
 * thread of its own, then the reactor connects.  Every outcome comes
 * through dgi_dial_end. */
void dgi_tcp_dial_start(struct dial *d);
/* Wakes the reactor (it runs its housekeeping: dial timeouts, aborts). */
void dgi_reactor_wake(dg_tp *tp);
/* Waits until the reactor finished the round of events it is in (not from
 * the reactor thread).  At stop: no accept is half-done after it. */
void dgi_reactor_sync(dg_tp *tp);
/* Stops the thread and closes everything (after every conn and dial is
 * gone). */
void dgi_reactor_stop(dg_tp *tp);

/* Frame a message into b: header + encoded body.  On error b is unchanged. */
dg_err dgi_frame_encode(dg_buf *b, const dg_tp *tp, dg_msg_type type,
    uint8_t flags, uint64_t corr, const void *body);

#endif /* DG_TRANSPORT_INT_H */
