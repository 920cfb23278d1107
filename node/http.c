/*
 * http.c — the node's HTTP endpoint (metrics_http.h): a small HTTP/1.1
 * server of our own on an nng stream listener (tcp://, or tls+tcp:// for
 * https://), because what it must bound nng 1.5's HTTP server does not:
 * 1,100 idle connections filled a node's file table and sent it into an
 * accept-failure loop at 97% CPU (issue 14, finding 4).
 *
 * Limits (each has a test in tests/node_http_test.c):
 *  - at most max_connections open connections, each served by its own
 *    thread (connsrv.c); a new connection past that closes the connection
 *    that has waited longest for its next request (an idle or slow
 *    client), so a flood of idle sockets never keeps a scraper out; only
 *    when every connection is answering a request at that moment is the
 *    new one closed (HTTP-BUSY);
 *  - a request head must arrive whole within idle_timeout_ms of the accept
 *    (TLS handshake included) or of the previous answer, and within
 *    DGI_HTTP_HEAD_MAX bytes (431 past it); a request with a body is
 *    refused (400);
 *  - an accept failure (out of file descriptors) backs off from 10 ms to
 *    1 s, doubling, logged once a second with a count (HTTP-ACCEPT-FAIL).
 * Paths: /metrics; the dashboard's files and /api/NAME (dashboard.h), the
 * files with a Content-Security-Policy that keeps the page to this node.
 * Authentication (http_auth_basic, http_auth_token) is checked on every
 * request, compared in constant time; 401 carries WWW-Authenticate.
 * No handler takes a lock held across a cache operation: the metrics text
 * is made by dgi_node_metrics_text into a buffer from a small pool.
 */
#include "metrics_http.h"
#include "adminwire.h"
#include "connsrv.h"
#include "dashboard.h"
#include "http_parse.h"
#include "metrics.h"
#include "node_int.h"
#include "transport/transport_int.h"

#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>
#include <openssl/evp.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define DGI_HTTP_HEAD_MAX 8192
#define DGI_HTTP_SEND_MS 10000     /* an answer must be taken within this */
#define POOL_MAX 4                 /* text buffers kept for reuse */

#define METRICS_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* The request buffer of a connection: one per possible connection. */
typedef struct hconn {
	char in[DGI_HTTP_HEAD_MAX];
} hconn;

struct dgi_http {
	dg_node *n;
	dgi_srv *srv;
	nng_tls_config *tls;
	uint32_t idle_ms;
	char *basic;              /* "Basic " + base64(user:password), or NULL */
	char *bearer;             /* "Bearer " + token, or NULL */
	pthread_mutex_t mu;       /* pool, hused */
	dg_buf pool[POOL_MAX];
	unsigned npool;
	unsigned nconns;
	hconn *hconns;            /* nconns; one taken per connection */
	bool *hused;
	char addr[300];
};

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

/* Sent with the page's files: nothing but this node's own files and
 * answers may load or run in it, and no other site may frame it. */
#define PAGE_HEADERS "Content-Security-Policy: default-src 'none'; script-src 'self'; " \
	"style-src 'self'; connect-src 'self'; img-src 'self' data:; " \
	"frame-ancestors 'none'; base-uri 'none'; form-action 'none'\r\n" \
	"X-Content-Type-Options: nosniff\r\nReferrer-Policy: no-referrer\r\n" \
	"Cache-Control: no-cache\r\n"
#define API_HEADERS "X-Content-Type-Options: nosniff\r\nCache-Control: no-store\r\n"

/* Sends status, headers (extra: more header lines, each ended by CRLF, or
 * NULL) and body (none for HEAD). */
static dg_err answer_x(dgi_http *h, dgi_srv_conn *s, int status, const char *type,
    const char *extra, const void *body, size_t len, bool head_only, bool keep)
{
	char hdr[1024];
	int n = snprintf(hdr, sizeof(hdr), "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n"
	    "Content-Length: %zu\r\nConnection: %s\r\n%s%s%s\r\n", status, reason(status), type,
	    len, keep ? "keep-alive" : "close",
	    status == 405 ? "Allow: GET, HEAD\r\n" : "",
	    status != 401 ? "" : h->basic != NULL ?
	    "WWW-Authenticate: Basic realm=\"datagrid\", charset=\"UTF-8\"\r\n" :
	    "WWW-Authenticate: Bearer realm=\"datagrid\"\r\n", extra != NULL ? extra : "");
	nng_iov iov[2] = { { hdr, (size_t)n }, { (void *)(uintptr_t)body, head_only ? 0 : len } };
	s->c.timeout_ms = DGI_HTTP_SEND_MS;
	return dgi_aconn_write(&s->c, iov, 2);
}

static dg_err answer(dgi_http *h, dgi_srv_conn *s, int status, const char *type, const char *body,
    size_t len, bool head_only, bool keep)
{
	return answer_x(h, s, status, type, NULL, body, len, head_only, keep);
}

static dg_err answer_text(dgi_http *h, dgi_srv_conn *s, int status, const char *text, bool head_only,
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
static dg_err handle(dgi_http *h, dgi_srv_conn *s, const dgi_http_req *r)
{
	bool head = r->method == DGI_HTTP_HEAD, keep = r->keep_alive;
	if (r->has_body)
		return answer_text(h, s, 400, "request bodies are not accepted\n", head, false),
		    DG_ERR_INVAL;
	if (!authorized(h, r)) {
		dg_err e = answer_text(h, s, 401, "authentication required\n", head, keep);
		return e != DG_OK ? e : keep ? DG_OK : DG_ERR_CLOSED;
	}
	bool metrics = path_is(r, "/metrics");
	bool api = r->path_len > 5 && memcmp(r->path, "/api/", 5) == 0;
	const dgi_dash_asset *page = dgi_dash_asset_at(r->path, r->path_len);
	dg_err e;
	if (!metrics && !api && page == NULL) {
		e = answer_text(h, s, 404, "not found\n", head, keep);
	} else if (r->method == DGI_HTTP_OTHER) {
		e = answer_text(h, s, 405, "method not allowed\n", head, keep);
	} else if (page != NULL) {
		e = answer_x(h, s, 200, page->type, PAGE_HEADERS, page->data, page->len, head, keep);
	} else if (api) {
		char *json = NULL;
		int status = 500;
		int got = dgi_dash_api(h->n, r->path, r->path_len, &json, &status);
		if (got > 0)
			e = answer_x(h, s, status, "application/json", API_HEADERS, json, strlen(json),
			    head, keep);
		else if (got == 0)
			e = answer_text(h, s, 404, "no such API answer (see ADMIN.md, \"HTTP\")\n",
			    head, keep);
		else
			(void)answer_text(h, s, 500, "out of memory\n", head, false), e = DG_ERR_NOMEM;
		dgi_dash_free(json);
	} else {
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

static hconn *hconn_take(dgi_http *h)
{
	hconn *x = NULL;
	pthread_mutex_lock(&h->mu);
	for (unsigned i = 0; i < h->nconns && x == NULL; i++)
		if (!h->hused[i]) {
			h->hused[i] = true;
			x = &h->hconns[i];
		}
	pthread_mutex_unlock(&h->mu);
	return x;
}

static void hconn_give(dgi_http *h, hconn *x)
{
	pthread_mutex_lock(&h->mu);
	h->hused[x - h->hconns] = false;
	pthread_mutex_unlock(&h->mu);
}

/* After the last answer of a TLS connection: nng 1.5.2 may still hold
 * part of it when the stream closes, and closing at once can drop that
 * part (a client then gets "200" and no body, as an openssl s_client
 * GET of /api/state did in a CI run; admin.c lingers after a refusal for
 * the same reason).  Reads, discarding, until the client closes or
 * LINGER_MS pass; the connection is not pinned meanwhile, so a new one
 * may close it to make room. */
#define LINGER_MS 250
static void linger(dgi_http *h, dgi_srv_conn *s, char *in, size_t cap)
{
	if (h->tls == NULL)
		return; /* TCP: the kernel sends what was written before the FIN */
	uint64_t end = dgi_now_ms() + LINGER_MS;
	size_t got;
	while (dgi_now_ms() < end && dgi_aconn_read_some(&s->c, in, cap, end, &got) == DG_OK)
		;
}

/* Requests on one connection until it closes, errs or idles out. */
static void serve(dgi_http *h, dgi_srv_conn *s, char *in, size_t cap)
{
	size_t have = 0;
	for (;;) {
		uint64_t deadline = dgi_now_ms() + h->idle_ms;
		dgi_http_req r;
		int pr;
		while ((pr = dgi_http_parse(in, have, &r)) == 0) {
			if (have == cap) {
				if (answer_text(h, s, 431, "request head too large\n", false, false) == DG_OK)
					linger(h, s, in, cap);
				return;
			}
			size_t got;
			if (dgi_aconn_read_some(&s->c, in + have, cap - have, deadline, &got) != DG_OK)
				return;
			have += got;
		}
		if (pr < 0) {
			if (answer_text(h, s, 400, "malformed request\n", false, false) == DG_OK)
				linger(h, s, in, cap);
			return;
		}
		(void)dgi_srv_pin(s, UINT32_MAX);   /* answering: not closed for room */
		dg_err e = handle(h, s, &r);
		dgi_srv_unpin(s);
		if (e == DG_ERR_CLOSED)
			linger(h, s, in, cap);      /* answered; the client asked to close */
		if (e != DG_OK)
			return;
		/* a pipelined next request stays in the buffer */
		memmove(in, in + r.head_len, have - r.head_len);
		have -= r.head_len;
	}
}

static void serve_conn(void *ctx, dgi_srv_conn *s)
{
	dgi_http *h = ctx;
	hconn *x = hconn_take(h);   /* as many as connections: never NULL */
	if (x == NULL)
		return;
	serve(h, s, x->in, sizeof(x->in));
	hconn_give(h, x);
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
	    nng_tls_config_auth_mode(h->tls, NNG_TLS_AUTH_MODE_NONE) != 0)
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
	h->nconns = cfg->http_max_connections ? cfg->http_max_connections : 64;
	pthread_mutex_init(&h->mu, NULL);
	int rv = 0;
	e = DG_ERR_NOMEM;
	if ((h->hconns = dgi_calloc(h->nconns, sizeof(hconn))) == NULL ||
	    (h->hused = dgi_calloc(h->nconns, sizeof(bool))) == NULL)
		goto fail;
	if (cfg->http_auth_basic != NULL &&
	    (h->basic = prefixed("Basic ", cfg->http_auth_basic, true)) == NULL)
		goto fail;
	if (cfg->http_auth_token != NULL &&
	    (h->bearer = prefixed("Bearer ", cfg->http_auth_token, false)) == NULL)
		goto fail;
	if (tls && (e = setup_tls(h, cfg)) != DG_OK)
		goto fail;
	dgi_srv_config sc = {
		.name = "HTTP", .slots = h->nconns, .evict_at = h->nconns,
		.timeout_ms = DGI_HTTP_SEND_MS, .tls = h->tls, .serve = serve_conn, .ctx = h,
	};
	if ((e = dgi_srv_start(lurl, &sc, &h->srv, &rv)) != DG_OK)
		goto fail;
	dgi_srv_url(h->srv, url, h->addr, sizeof(h->addr));
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
	dgi_srv_stop(h->srv);
	if (h->tls != NULL)
		nng_tls_config_free(h->tls);
	for (unsigned i = 0; i < h->npool; i++)
		dg_buf_free(&h->pool[i]);
	dgi_free(h->basic);
	dgi_free(h->bearer);
	dgi_free(h->hconns);
	dgi_free(h->hused);
	pthread_mutex_destroy(&h->mu);
	dgi_free(h);
}
