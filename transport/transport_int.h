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
 * conn      one nng stream: handshake state, the receive buffer, the frame
 *           being read.  A connection is attached to its peer when the
 *           handshake completes; only then does application traffic flow.
 *
 * Locks: tp->mu (peer table writes, connection list, addresses), peer->mu
 * (queue, attachment), stripe->mu (pending requests).  Order: tp->mu, then
 * peer->mu, then a stripe.  No lock is held while a callback runs.
 */
#ifndef DG_TRANSPORT_INT_H
#define DG_TRANSPORT_INT_H

#include "transport.h"
#include "marshal/marshal_int.h"

#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>
#include <pthread.h>
#include <stdatomic.h>

#define DG_CLUSTER_NAME_MAX 200
#define DG_HANDSHAKE_MAX 1024   /* largest handshake frame body accepted */
#define PEND_STRIPES 16

/* Logging: one line per event, level, stable id, key=value fields. */
void dgi_log(const char *level, const char *id, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

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

struct conn {
	dg_tp *tp;
	nng_stream *stream;
	struct conn *next;          /* tp->conns */
	pthread_mutex_t mu;         /* tx state; state transitions */
	_Atomic int state;          /* enum conn_state */
	bool dialer;
	bool abandoned;             /* REJECT sent: close when it is written */
	struct peer *peer;          /* set when open (and for dialers, the target) */
	dg_node_id peer_id;         /* from the handshake */
	char *dial_url;             /* dialer: the URL dialed */
	uint64_t deadline_ms;       /* the handshake must end by then */
	uint8_t nonce_mine[DG_NONCE_LEN];
	uint8_t nonce_theirs[DG_NONCE_LEN];
	dg_err fail;                /* why it closed (for waiters) */
	/* receive */
	nng_aio *rx_aio;
	uint8_t hdr[DG_FRAME_HEADER];
	dg_frame_header fh;
	size_t rx_got;              /* bytes of the header or body read so far */
	bool rx_body;               /* reading the body */
	dg_buf rx;                  /* body buffer, reused */
	/* send */
	nng_aio *tx_aio;
	dg_buf wire;                /* bytes on the wire (or the handshake frame) */
	size_t tx_done;             /* of wire */
	bool tx_busy;
	/* dialer waiting in dg_tp_connect */
	struct connect_wait *waiter;
	struct ctr rxc[DG_MSG__COUNT]; /* frames received on this connection */
	_Atomic int users;          /* kicks between preparing and starting a write */
};

struct peer {
	dg_node_id id;
	pthread_mutex_t mu;
	struct conn *conn;          /* open connection, or NULL */
	bool dialing;               /* a dial to this peer is in progress */
	char *url;                  /* where to dial it (owned), or NULL */
	dg_buf queue;               /* frames not yet on the wire */
	uint64_t queued_frames;
	_Atomic uint64_t heard_ms;  /* when a frame last arrived from it */
	struct tp_totals t;         /* per-peer events */
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
	uint64_t deadline_ms;
	dg_reply_fn cb;
	void *ctx;
};

struct stripe {
	pthread_mutex_t mu;
	uint32_t mask, count, tombs;
	struct pending *slots;
};

struct handler {
	_Atomic(dg_msg_handler) fn;
	void *_Atomic ctx;
};

struct dg_tp {
	dg_tp_config cfg;
	char *listen_url, *address, *cluster;
	uint8_t *secret;
	size_t secret_len;
	dg_node_id self;
	const dg_registry *reg;
	nng_stream_listener *listener;
	nng_aio *accept_aio;
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
	struct stripe stripes[PEND_STRIPES];
	struct handler handlers[DG_MSG__COUNT];
	struct ctr hs_tx[DG_MSG__COUNT], hs_rx[DG_MSG__COUNT];
	_Atomic uint64_t failures[DG_MSG__COUNT];
	struct tp_totals t;
	pthread_t service;
	pthread_cond_t service_cv;
	bool service_started;
};

uint64_t dgi_now_ms(void);
uint64_t dgi_coarse_ms(void);   /* same clock, a few ms coarse, cheap */

/* Tests: stop membership without telling anyone (a crash, in-process). */
void dgi_member_kill(dg_member *m);

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
/* An application frame arrived on an open connection. */
void dgi_dispatch(dg_tp *tp, struct conn *c, const dg_frame_header *h,
    const uint8_t *body);

/* ---- conn.c: connections and the handshake ---- */
dg_err dgi_conn_accept_start(dg_tp *tp);
/* Starts a dial to url for peer p (p may be NULL when the id is unknown).
 * waiter (optional) is signalled when the handshake ends. */
dg_err dgi_conn_dial(dg_tp *tp, const char *url, struct peer *p,
    struct connect_wait *waiter);
/* Close a connection (from any thread, callbacks included). */
void dgi_conn_close(struct conn *c, dg_err why);
/* Hand the peer's queued frames to its open connection (peer->mu held):
 * returns the connection whose write must be started, or NULL. */
struct conn *dgi_conn_kick(struct peer *p);
/* Start the write dgi_conn_kick prepared (NULL: none), after the caller
 * dropped its locks. */
void dgi_conn_start(struct conn *c);
/* Free closed connections (service thread / stop: never from a callback). */
void dgi_conn_reap(dg_tp *tp);
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

/* Frame a message into b: header + encoded body.  On error b is unchanged. */
dg_err dgi_frame_encode(dg_buf *b, const dg_tp *tp, dg_msg_type type,
    uint8_t flags, uint64_t corr, const void *body);

#endif /* DG_TRANSPORT_INT_H */
