/*
 * http.c — the node's HTTP endpoint (metrics_http.h): a small HTTP/1.1
 * server of our own on an nng stream listener (tcp://, or tls+tcp:// for
 * https://), because what it must bound nng 1.5's HTTP server does not:
 * 1,100 idle connections filled a node's file table and sent it into an
 * accept-failure loop at 97% CPU (issue 14, finding 4).
 *
 * Limits (each has a test in tests/node_metrics_test.c):
 *  - at most max_connections open connections, each served by its own
 *    thread from a fixed set of slots; a new connection past that closes
 *    the connection that has waited longest for its next request (an idle
 *    or slow client), so a flood of idle sockets never keeps a scraper
 *    out; only when every slot is answering a request at that moment is
 *    the new one closed (HTTP-BUSY);
 *  - a request head must arrive whole within idle_timeout_ms of the accept
 *    (TLS handshake included) or of the previous answer, and within
 *    DGI_HTTP_HEAD_MAX bytes (431 past it); a request with a body is
 *    refused (400);
 *  - an accept failure (out of file descriptors) backs off from 10 ms to
 *    1 s, doubling, logged once a second with a count (HTTP-ACCEPT-FAIL).
 * Authentication (http_auth_basic, http_auth_token) is checked on every
 * request, compared in constant time; 401 carries WWW-Authenticate.
 * No handler takes a lock held across a cache operation: the metrics text
 * is made by dgi_node_metrics_text into a buffer from a small pool.
 */
#include "metrics_http.h"
#include "adminwire.h"
#include "http_parse.h"
#include "metrics.h"
#include "node_int.h"
#include "transport/transport_int.h"

#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>
#include <nng/supplemental/util/platform.h>
#include <openssl/evp.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define DGI_HTTP_HEAD_MAX 8192
#define DGI_HTTP_SEND_MS 10000     /* an answer must be taken within this */
#define POOL_MAX 4                 /* text buffers kept for reuse */

#define METRICS_TYPE "text/plain; version=0.0.4; charset=utf-8"
static const char root_text[] = "datagrid node: Prometheus metrics at /metrics\n";

typedef struct hslot {
	struct dgi_http *h;
	bool used;
	bool answering;           /* h->mu: between a whole head and its answer */
	uint64_t waiting_since;   /* h->mu: accept or last answer */
	_Atomic bool done;        /* the thread ended: join it */
	pthread_t thr;
	dgi_aconn c;
	char in[DGI_HTTP_HEAD_MAX];
} hslot;

struct dgi_http {
	dg_node *n;
	nng_stream_listener *l;
	nng_tls_config *tls;
	nng_aio *accept_aio;
	pthread_t accept_thr;
	bool accept_started;
	_Atomic bool stopping;
	uint32_t idle_ms;
	unsigned nslots;
	char *basic;              /* "Basic " + base64(user:password), or NULL */
	char *bearer;             /* "Bearer " + token, or NULL */
	pthread_mutex_t mu;       /* slots, pool */
	dg_buf pool[POOL_MAX];
	unsigned npool;
	struct dgi_lograte lr_accept, lr_busy, lr_evict;
	char addr[300];
	hslot *slots;
};

static void log_rate(struct dgi_lograte *lr, const char *id, const char *why)
{
	uint32_t repeated = 0;
	if (dgi_lograte_due(lr, dgi_now_ms(), 1000, &repeated))
		dgi_log("warn", id, "repeated=%u why=\"%s\"", repeated, why);
}

/* ---- answers ---- */

static const char *reason(int status)
{
	switch (status) {
	case 200: return "OK";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 431: return "Request Header Fields Too Large";
	case 503: return "Service Unavailable";
	default: return "Internal Server Error";
	}
}

/* Sends status, headers and body (none for HEAD). */
static dg_err answer(dgi_http *h, hslot *s, int status, const char *type, const char *body,
    size_t len, bool head_only, bool keep)
{
	char hdr[512];
	int n = snprintf(hdr, sizeof(hdr), "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n"
	    "Content-Length: %zu\r\nConnection: %s\r\n%s%s\r\n", status, reason(status), type, len,
	    keep ? "keep-alive" : "close",
	    status == 405 ? "Allow: GET, HEAD\r\n" : "",
	    status != 401 ? "" : h->basic != NULL ?
	    "WWW-Authenticate: Basic realm=\"datagrid\", charset=\"UTF-8\"\r\n" :
	    "WWW-Authenticate: Bearer realm=\"datagrid\"\r\n");
	nng_iov iov[2] = { { hdr, (size_t)n }, { (void *)(uintptr_t)body, head_only ? 0 : len } };
	s->c.timeout_ms = DGI_HTTP_SEND_MS;
	return dgi_aconn_write(&s->c, iov, 2);
}

static dg_err answer_text(dgi_http *h, hslot *s, int status, const char *text, bool head_only,
    bool keep)
{
	return answer(h, s, status, "text/plain; charset=utf-8", text, strlen(text), head_only,
	    keep);
}

static dg_buf pool_take(dgi_http *h)
{
	dg_buf b;
	pthread_mutex_lock(&h->mu);
	if (h->npool > 0)
		b = h->pool[--h->npool];
	else
		dg_buf_init(&b);
	pthread_mutex_unlock(&h->mu);
	b.len = 0;
	return b;
}

static void pool_give(dgi_http *h, dg_buf *b)
{
	pthread_mutex_lock(&h->mu);
	if (h->npool < POOL_MAX)
		h->pool[h->npool++] = *b;
	else
		dg_buf_free(b);
	pthread_mutex_unlock(&h->mu);
}

/* Constant time in the length of want. */
static bool same(const char *got, size_t glen, const char *want)
{
	size_t wl = strlen(want);
	unsigned char d = glen != wl;
	for (size_t i = 0; i < wl; i++)
		d |= (unsigned char)(want[i] ^ (i < glen ? got[i] : 0));
	return d == 0;
}

static bool authorized(const dgi_http *h, const dgi_http_req *r)
{
	if (h->basic == NULL && h->bearer == NULL)
		return true;
	if (r->auth == NULL)
		return false;
	bool ok = false;
	if (h->basic != NULL)
		ok |= same(r->auth, r->auth_len, h->basic);
	if (h->bearer != NULL)
		ok |= same(r->auth, r->auth_len, h->bearer);
	return ok;
}

static bool path_is(const dgi_http_req *r, const char *p)
{
	return r->path_len == strlen(p) && memcmp(r->path, p, r->path_len) == 0;
}

/* One request, its head parsed.  DG_OK: the connection goes on. */
static dg_err handle(dgi_http *h, hslot *s, const dgi_http_req *r)
{
	bool head = r->method == DGI_HTTP_HEAD, keep = r->keep_alive;
	if (r->has_body)
		return answer_text(h, s, 400, "request bodies are not accepted\n", head, false),
		    DG_ERR_INVAL;
	if (!authorized(h, r)) {
		dg_err e = answer_text(h, s, 401, "authentication required\n", head, keep);
		return e != DG_OK ? e : keep ? DG_OK : DG_ERR_CLOSED;
	}
	bool metrics = path_is(r, "/metrics"), root = path_is(r, "/");
	dg_err e;
	if (!metrics && !root)
		e = answer_text(h, s, 404, "not found\n", head, keep);
	else if (r->method == DGI_HTTP_OTHER)
		e = answer_text(h, s, 405, "method not allowed\n", head, keep);
	else if (root)
		e = answer_text(h, s, 200, root_text, head, keep);
	else {
		dg_buf b = pool_take(h);
		e = dgi_node_metrics_text(h->n, &b);
		if (e == DG_OK)
			e = answer(h, s, 200, METRICS_TYPE, (const char *)b.data, b.len, head, keep);
		else
			(void)answer_text(h, s, 500, "out of memory\n", head, false);
		pool_give(h, &b);
	}
	return e != DG_OK ? e : keep ? DG_OK : DG_ERR_CLOSED;
}

/* Requests on one connection until it closes, errs or idles out. */
static void serve(dgi_http *h, hslot *s)
{
	size_t have = 0;
	for (;;) {
		uint64_t deadline;
		pthread_mutex_lock(&h->mu);
		s->answering = false;
		deadline = s->waiting_since + h->idle_ms;
		pthread_mutex_unlock(&h->mu);
		dgi_http_req r;
		int pr;
		while ((pr = dgi_http_parse(s->in, have, &r)) == 0) {
			if (have == sizeof(s->in)) {
				answer_text(h, s, 431, "request head too large\n", false, false);
				return;
			}
			size_t got;
			if (h->stopping || dgi_aconn_read_some(&s->c, s->in + have,
			    sizeof(s->in) - have, deadline, &got) != DG_OK)
				return;
			have += got;
		}
		if (pr < 0) {
			answer_text(h, s, 400, "malformed request\n", false, false);
			return;
		}
		pthread_mutex_lock(&h->mu);
		s->answering = true;
		pthread_mutex_unlock(&h->mu);
		if (handle(h, s, &r) != DG_OK)
			return;
		/* a pipelined next request stays in the buffer */
		memmove(s->in, s->in + r.head_len, have - r.head_len);
		have -= r.head_len;
		pthread_mutex_lock(&h->mu);
		s->waiting_since = dgi_now_ms();
		pthread_mutex_unlock(&h->mu);
	}
}

static void *conn_main(void *arg)
{
	hslot *s = arg;
	serve(s->h, s);
	dgi_aconn_abort(&s->c);
	s->done = true;
	return NULL;
}

/* ---- connections ---- */

/* Joins and frees the finished slots: h->mu held.  all: every slot, at
 * stop (without h->mu, every connection aborted). */
static void reap(dgi_http *h, bool all)
{
	for (unsigned i = 0; i < h->nslots; i++) {
		hslot *s = &h->slots[i];
		if (!s->used || (!all && !s->done))
			continue;
		pthread_join(s->thr, NULL);
		dgi_aconn_close(&s->c);
		s->used = false;
	}
}

/* A free slot, making one by closing the connection that waited longest
 * for its next request; NULL when every slot is answering.  h->mu held;
 * dropped and retaken while an evicted thread ends. */
static hslot *free_slot(dgi_http *h)
{
	reap(h, false);
	hslot *oldest = NULL;
	for (unsigned i = 0; i < h->nslots; i++) {
		hslot *s = &h->slots[i];
		if (!s->used)
			return s;
		if (!s->answering && !s->done &&
		    (oldest == NULL || s->waiting_since < oldest->waiting_since))
			oldest = s;
	}
	if (oldest == NULL)
		return NULL;
	dgi_aconn_abort(&oldest->c);    /* its read fails at once */
	pthread_mutex_unlock(&h->mu);
	log_rate(&h->lr_evict, "HTTP-EVICTED", "an idle HTTP connection was closed to make "
	    "room for a new one (http_max_connections)");
	pthread_join(oldest->thr, NULL);
	pthread_mutex_lock(&h->mu);
	dgi_aconn_close(&oldest->c);
	oldest->used = false;
	return oldest;
}

static void accept_one(dgi_http *h, nng_stream *st)
{
	pthread_mutex_lock(&h->mu);
	hslot *s = h->stopping ? NULL : free_slot(h);
	if (s == NULL) {
		pthread_mutex_unlock(&h->mu);
		nng_stream_close(st);
		nng_stream_free(st);
		log_rate(&h->lr_busy, "HTTP-BUSY", "an HTTP connection was closed at once: every "
		    "connection is answering a request");
		return;
	}
	s->h = h;
	s->done = false;
	s->answering = false;
	s->waiting_since = dgi_now_ms();
	if (dgi_aconn_init(&s->c, st, DGI_HTTP_SEND_MS) != DG_OK) {
		nng_stream_free(st);
	} else if (pthread_create(&s->thr, NULL, conn_main, s) != 0) {
		dgi_aconn_close(&s->c);
	} else {
		s->used = true;
	}
	pthread_mutex_unlock(&h->mu);
}

static void *accept_main(void *arg)
{
	dgi_http *h = arg;
	unsigned backoff = 0;
	while (!h->stopping) {
		nng_stream_listener_accept(h->l, h->accept_aio);
		nng_aio_wait(h->accept_aio);
		int rv = nng_aio_result(h->accept_aio);
		if (rv == NNG_ECLOSED || rv == NNG_ECANCELED || h->stopping)
			break;
		if (rv != 0) {
			/* out of file descriptors, most often: wait, don't spin */
			backoff = backoff == 0 ? 10 : backoff >= 500 ? 1000 : backoff * 2;
			char why[160];
			snprintf(why, sizeof(why), "accepting an HTTP connection failed (%s): "
			    "retrying in %u ms", nng_strerror(rv), backoff);
			log_rate(&h->lr_accept, "HTTP-ACCEPT-FAIL", why);
			nng_msleep((nng_duration)backoff);
			continue;
		}
		backoff = 0;
		accept_one(h, nng_aio_get_output(h->accept_aio, 0));
	}
	return NULL;
}

/* ---- start, stop ---- */

static char *prefixed(const char *prefix, const char *v, bool base64)
{
	size_t vl = strlen(v), pl = strlen(prefix);
	size_t cap = pl + (base64 ? 4 * ((vl + 2) / 3) : vl) + 1;
	char *out = dgi_alloc(cap);
	if (out == NULL)
		return NULL;
	memcpy(out, prefix, pl);
	if (base64)
		EVP_EncodeBlock((unsigned char *)out + pl, (const unsigned char *)v, (int)vl);
	else
		memcpy(out + pl, v, vl + 1);
	return out;
}

static dg_err setup_tls(dgi_http *h, const dg_node_config *cfg)
{
	if (cfg->tls_cert_key_file == NULL || cfg->tls_ca_file == NULL)
		return DG_ERR_INVAL;
	if (nng_tls_config_alloc(&h->tls, NNG_TLS_MODE_SERVER) != 0)
		return DG_ERR_NOMEM;
	if (nng_tls_config_cert_key_file(h->tls, cfg->tls_cert_key_file, NULL) != 0 ||
	    nng_tls_config_auth_mode(h->tls, NNG_TLS_AUTH_MODE_NONE) != 0 ||
	    nng_stream_listener_set_ptr(h->l, NNG_OPT_TLS_CONFIG, h->tls) != 0)
		return DG_ERR_TLS;
	return DG_OK;
}

/* http://HOST:PORT → tcp://HOST:PORT, https:// → tls+tcp://. */
static dg_err listen_url(const char *url, char *out, size_t n, bool *tls)
{
	const char *rest;
	if (strncmp(url, "http://", 7) == 0) {
		rest = url + 7;
		*tls = false;
	} else if (strncmp(url, "https://", 8) == 0) {
		rest = url + 8;
		*tls = true;
	} else {
		return DG_ERR_INVAL;
	}
	if (strchr(rest, '/') != NULL || strrchr(rest, ':') == NULL)
		return DG_ERR_INVAL;
	if ((size_t)snprintf(out, n, "%s%s", *tls ? "tls+tcp://" : "tcp://", rest) >= n)
		return DG_ERR_INVAL;
	return DG_OK;
}

static void bound_address(dgi_http *h, const char *url, bool tls)
{
	const char *colon = strrchr(url, ':');
	int port = 0;
	if (strcmp(colon, ":0") == 0 &&
	    nng_stream_listener_get_int(h->l, NNG_OPT_TCP_BOUND_PORT, &port) == 0)
		snprintf(h->addr, sizeof(h->addr), "%.*s:%d", (int)(colon - url), url, port);
	else
		snprintf(h->addr, sizeof(h->addr), "%s", url);
	(void)tls;
}

dg_err dgi_http_start(dg_node *n, const char *url, dgi_http **out)
{
	if (n == NULL || url == NULL || out == NULL)
		return DG_ERR_INVAL;
	const dg_node_config *cfg = dgi_node_config(n);
	char lurl[300];
	bool tls;
	dg_err e = listen_url(url, lurl, sizeof(lurl), &tls);
	if (e != DG_OK)
		return e;
	dgi_http *h = dgi_calloc(1, sizeof(*h));
	if (h == NULL)
		return DG_ERR_NOMEM;
	h->n = n;
	h->idle_ms = cfg->http_idle_timeout_ms ? cfg->http_idle_timeout_ms : 10000;
	h->nslots = cfg->http_max_connections ? cfg->http_max_connections : 64;
	pthread_mutex_init(&h->mu, NULL);
	int rv = 0;
	e = DG_ERR_NOMEM;
	if ((h->slots = dgi_calloc(h->nslots, sizeof(hslot))) == NULL)
		goto fail;
	if (cfg->http_auth_basic != NULL &&
	    (h->basic = prefixed("Basic ", cfg->http_auth_basic, true)) == NULL)
		goto fail;
	if (cfg->http_auth_token != NULL &&
	    (h->bearer = prefixed("Bearer ", cfg->http_auth_token, false)) == NULL)
		goto fail;
	if ((rv = nng_stream_listener_alloc(&h->l, lurl)) != 0) {
		e = dgi_nng_err(rv) == DG_ERR_UNREACHABLE ? DG_ERR_INVAL : dgi_nng_err(rv);
		goto fail;
	}
	if (tls && (e = setup_tls(h, cfg)) != DG_OK)
		goto fail;
	if ((rv = nng_stream_listener_listen(h->l)) != 0) {
		e = rv == NNG_EADDRINUSE ? DG_ERR_ADDRINUSE : dgi_nng_err(rv);
		goto fail;
	}
	bound_address(h, url, tls);
	e = DG_ERR_NOMEM;
	if (nng_aio_alloc(&h->accept_aio, NULL, NULL) != 0)
		goto fail;
	if (pthread_create(&h->accept_thr, NULL, accept_main, h) != 0)
		goto fail;
	h->accept_started = true;
	*out = h;
	return DG_OK;
fail:
	dgi_http_stop(h);
	return e;
}

const char *dgi_http_address(const dgi_http *h)
{
	return h != NULL ? h->addr : NULL;
}

void dgi_http_stop(dgi_http *h)
{
	if (h == NULL)
		return;
	h->stopping = true;
	if (h->l != NULL)
		nng_stream_listener_close(h->l);
	if (h->accept_started)
		pthread_join(h->accept_thr, NULL);
	if (h->slots != NULL) {
		/* the accept thread is gone: nothing else changes the slots; the
		 * joins happen without h->mu, which the threads take */
		pthread_mutex_lock(&h->mu);
		for (unsigned i = 0; i < h->nslots; i++)
			if (h->slots[i].used)
				dgi_aconn_abort(&h->slots[i].c);
		pthread_mutex_unlock(&h->mu);
		reap(h, true);
	}
	if (h->accept_aio != NULL)
		nng_aio_free(h->accept_aio);
	if (h->l != NULL)
		nng_stream_listener_free(h->l);
	if (h->tls != NULL)
		nng_tls_config_free(h->tls);
	for (unsigned i = 0; i < h->npool; i++)
		dg_buf_free(&h->pool[i]);
	dgi_free(h->basic);
	dgi_free(h->bearer);
	dgi_free(h->slots);
	pthread_mutex_destroy(&h->mu);
	dgi_free(h);
}
