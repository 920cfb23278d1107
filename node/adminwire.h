/*
 * adminwire.h — the admin protocol's framing and handshake, shared by the
 * node's admin endpoint (admin.c) and dgctl.  ADMIN.md documents it.
 *
 * A connection is an nng byte stream (tcp:// or tls+tcp://).  Every
 * message is a frame: a 4-byte big-endian length, then that many bytes of
 * UTF-8 JSON (one object).  The node speaks first (HELLO), the client
 * proves the cluster secret (AUTH), the node proves it back (WELCOME);
 * then the client sends requests and the node answers each in order.
 *
 * A dgi_aconn is used by one thread at a time.  Every I/O call is bounded
 * by the connection's timeout, by a wait of our own rather than only the
 * aio's timeout: nng 1.5.2's TLS stream can leave a receive pending past
 * its timeout when the other side closes during the exchange (dgctl with a
 * wrong secret hung in 8 of 20 tries, issue 14).  Past the deadline the
 * aio is cancelled, then the stream closed; an aio that still does not
 * complete within DGI_ACONN_GRACE_MS marks the connection stuck.
 */
#ifndef DG_NODE_ADMINWIRE_H
#define DG_NODE_ADMINWIRE_H

#include "marshal/marshal.h"

#include <nng/nng.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DGI_ADMIN_PROTO "datagrid-admin/1"
#define DGI_ADMIN_FRAME_MAX (64u << 20)   /* largest frame either side accepts */
/* largest frame the node accepts before the client proved the secret (AUTH
 * is ~150 bytes): an unauthenticated client makes it allocate no more */
#define DGI_ADMIN_AUTH_FRAME_MAX 4096u
/* how long a cancelled (then closed) aio may take to complete */
#define DGI_ACONN_GRACE_MS 250u

typedef struct dgi_aconn {
	nng_stream *s;
	nng_aio *aio;            /* its callback signals cv: waits are ours */
	uint32_t timeout_ms;
	uint32_t max_frame;      /* dgi_aconn_recv refuses larger frames */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool done;               /* mu: the aio completed */
	bool aborted;            /* mu: dgi_aconn_abort was called */
	bool stuck;              /* an aio neither completed, nor was cancelled,
	                            nor ended by closing the stream (nng 1.5's
	                            TLS streams): the connection is dead, and its
	                            aio and stream are left to the process */
} dgi_aconn;

/* Takes ownership of s (closed and freed by dgi_aconn_close); max_frame
 * DGI_ADMIN_FRAME_MAX.  DG_ERR_NOMEM. */
dg_err dgi_aconn_init(dgi_aconn *c, nng_stream *s, uint32_t timeout_ms);
/* Dials d into c (set up as by dgi_aconn_init), the whole bounded by
 * timeout_ms.  0, or nng's error (NNG_ETIMEDOUT past the deadline); on an
 * error c holds nothing. */
int dgi_aconn_dial(dgi_aconn *c, nng_stream_dialer *d, uint32_t timeout_ms);
void dgi_aconn_close(dgi_aconn *c);
/* Aborts the pending I/O from another thread (stop, eviction), and any
 * the owner starts after: they fail at once with DG_ERR_CLOSED.  (nng
 * 1.5.2 leaves a receive started on a closed TCP stream pending until its
 * timeout, so closing the stream alone is not enough.) */
void dgi_aconn_abort(dgi_aconn *c);

/* Sends one frame.  DG_ERR_LIMIT above DGI_ADMIN_FRAME_MAX, DG_ERR_TIMEOUT,
 * DG_ERR_CONN_BROKEN, DG_ERR_CLOSED. */
dg_err dgi_aconn_send(dgi_aconn *c, const char *json, size_t len);
/* Receives one frame into *out (NUL-terminated, dgi_alloc'ed: dgi_free it).
 * DG_ERR_LIMIT (a frame above c->max_frame: the connection is no longer
 * usable),
 * DG_ERR_TIMEOUT, DG_ERR_CONN_BROKEN, DG_ERR_CLOSED, DG_ERR_NOMEM. */
dg_err dgi_aconn_recv(dgi_aconn *c, char **out, size_t *len);

/* Raw bytes, for the HTTP endpoint (http.c), which shares the bounded
 * waits: all the n iov entries' bytes (consumed) within c->timeout_ms;
 * and one receive of 1..cap bytes before deadline_ms (dgi_now_ms clock).
 * DG_ERR_TIMEOUT, DG_ERR_CONN_BROKEN (closed by the peer), DG_ERR_CLOSED. */
dg_err dgi_aconn_write(dgi_aconn *c, nng_iov *iov, unsigned n);
dg_err dgi_aconn_read_some(dgi_aconn *c, void *buf, size_t cap, uint64_t deadline_ms,
    size_t *got);

/* The MACs of the handshake: the peers' transcript MAC (transport's
 * dgi_auth_mac) over the node's and the client's nonces, client id 0 and
 * the node's id, so an admin proof is never a valid peer proof.  'd' is
 * the client's proof, 'l' the node's.  Hex-encoded into out[65]. */
dg_err dgi_admin_mac(char role, const uint8_t *secret, size_t secret_len,
    const uint8_t *node_nonce, const uint8_t *client_nonce, uint64_t node_id,
    const char *cluster, char out[65]);

/* Hex helpers: 2n hex digits from n bytes; parse exactly n bytes (false on
 * any other length or a non-hex digit). */
void dgi_hex(const uint8_t *p, size_t n, char *out);
bool dgi_unhex(const char *s, uint8_t *out, size_t n);

/* An nng error as dg_err. */
dg_err dgi_nng_err(int rv);

#endif
