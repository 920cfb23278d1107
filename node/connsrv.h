/*
 * connsrv.h — the accept loop and connection slots shared by the node's
 * admin endpoint (admin.c) and its HTTP endpoint (http.c): what keeps a
 * flood of sockets from anyone from locking either out (issue 14).
 *
 * A listener (tcp://, or tls+tcp:// with the caller's TLS config) and an
 * accept thread; each accepted connection gets a slot from a fixed set and
 * a thread of its own that runs cfg.serve.  A connection is pinned while
 * it must not be closed for room (an authenticated admin session; an HTTP
 * request being answered), else it is waiting, since some instant.  When a
 * connection arrives and either no slot is free or evict_at connections
 * are waiting, the one waiting longest is closed (NAME-EVICTED) to make
 * room; when every slot is pinned the new one is refused (cfg.refuse says
 * why, if given; NAME-BUSY).  An accept that fails (out of file
 * descriptors) is retried after 10 ms .. 1 s, doubling (NAME-ACCEPT-FAIL).
 * Each of these lines is logged at most once a second with a count.
 *
 * Locks: the server's mutex guards the slots; cfg.serve and cfg.refuse
 * run without it.  dgi_srv_stop aborts every connection and joins every
 * thread: serve must return once its I/O fails.
 */
#ifndef DG_NODE_CONNSRV_H
#define DG_NODE_CONNSRV_H

#include "adminwire.h"

#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>

typedef struct dgi_srv dgi_srv;

/* One connection, as cfg.serve sees it: c is its stream (timeouts and
 * frame limits are serve's to set); the rest is the server's. */
typedef struct dgi_srv_conn {
	dgi_aconn c;
	dgi_srv *srv;
	bool used;
	bool pinned;              /* srv->mu */
	uint64_t since;           /* srv->mu: waiting since (accept, unpin) */
	_Atomic bool done;        /* its thread ended: join it */
	pthread_t thr;
} dgi_srv_conn;

typedef struct dgi_srv_config {
	const char *name;         /* log ids: NAME-EVICTED, NAME-BUSY, ... */
	unsigned slots;           /* connections open at most */
	unsigned evict_at;        /* waiting connections at most (<= slots) */
	uint32_t timeout_ms;      /* the stream's first timeout */
	nng_tls_config *tls;      /* tls+tcp://: the server's config (kept by
	                             the caller until dgi_srv_stop) */
	void (*serve)(void *ctx, dgi_srv_conn *c);
	/* the new connection c gets no slot (every one pinned) or the server
	 * is stopping: say why before it is closed; NULL: just close */
	void (*refuse)(void *ctx, dgi_aconn *c, bool stopping);
	void *ctx;
} dgi_srv_config;

/* Listens on url (tcp://HOST:PORT or tls+tcp://HOST:PORT; port 0 picks
 * one) and accepts until dgi_srv_stop.  *nng_rv: nng's error when it
 * failed there (0 else).  DG_ERR_INVAL, DG_ERR_ADDRINUSE, DG_ERR_TLS,
 * DG_ERR_NET, DG_ERR_NOMEM. */
dg_err dgi_srv_start(const char *url, const dgi_srv_config *cfg, dgi_srv **out, int *nng_rv);
/* The bound TCP port. */
int dgi_srv_port(const dgi_srv *s);
/* url with ":0" replaced by the bound port, into out[n]. */
void dgi_srv_url(const dgi_srv *s, const char *url, char *out, size_t n);

/* Pins c if fewer than max connections are pinned: true when it was. */
bool dgi_srv_pin(dgi_srv_conn *c, unsigned max);
/* Unpins c: it waits from now. */
void dgi_srv_unpin(dgi_srv_conn *c);

/* Closes the listener and every connection; joins every thread. */
void dgi_srv_stop(dgi_srv *s);

#endif
