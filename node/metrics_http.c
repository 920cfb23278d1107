/*
 * metrics_http.c — GET /metrics over nng's HTTP server (metrics_http.h).
 *
 * nng shares one server per HOST:PORT within a process
 * (nng_http_server_hold): two nodes of one process asking for the same
 * address would share it, and the second one's /metrics handler is then
 * refused (address in use) — the error we want.  Port 0 is only matched
 * until the server has started and learned its port, so holding and
 * starting happen under one process-wide mutex: two nodes both asking for
 * port 0 at once each get their own server.
 */
#include "metrics_http.h"
#include "metrics.h"

#include <nng/nng.h>
#include <nng/supplemental/http/http.h>

#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"
static const char root_text[] = "datagrid node: Prometheus metrics at /metrics\n";

struct dgi_http {
	dg_node *h_node;
	nng_http_server *h_srv;
	nng_http_handler *h_metrics, *h_root;  /* owned by h_srv once added */
	bool h_metrics_added, h_root_added, h_started;
	pthread_mutex_t h_mu;        /* one scrape at a time: h_buf is reused */
	dg_buf h_buf;
	char h_addr[300];
};

static pthread_mutex_t hold_mu = PTHREAD_MUTEX_INITIALIZER;

static dg_err from_nng(int rv)
{
	switch (rv) {
	case 0: return DG_OK;
	case NNG_ENOMEM: return DG_ERR_NOMEM;
	case NNG_EADDRINUSE: return DG_ERR_ADDRINUSE;
	case NNG_EINVAL: case NNG_EADDRINVAL: case NNG_ENOTSUP: return DG_ERR_INVAL;
	default: return DG_ERR_NET;
	}
}

/* The scrape: the text is made into h_buf under h_mu and copied into the
 * response (nng sends it after we return, when the next scrape may already
 * be rewriting h_buf). */
static void on_metrics(nng_aio *aio)
{
	dgi_http *h = nng_http_handler_get_data(nng_aio_get_input(aio, 1));
	nng_http_res *res = NULL;
	int rv = nng_http_res_alloc(&res);
	if (rv == 0)
		rv = nng_http_res_set_header(res, "Content-Type", CONTENT_TYPE);
	if (rv == 0) {
		pthread_mutex_lock(&h->h_mu);
		dg_err e = dgi_node_metrics_text(h->h_node, &h->h_buf);
		rv = e != DG_OK ? NNG_ENOMEM :
		    nng_http_res_copy_data(res, h->h_buf.data, h->h_buf.len);
		pthread_mutex_unlock(&h->h_mu);
	}
	if (rv != 0) {
		/* an error completion: nng answers 500 and closes */
		if (res != NULL)
			nng_http_res_free(res);
		nng_aio_finish(aio, rv);
		return;
	}
	nng_aio_set_output(aio, 0, res);
	nng_aio_finish(aio, 0);
}

static dg_err make_handlers(dgi_http *h)
{
	int rv = nng_http_handler_alloc(&h->h_metrics, "/metrics", on_metrics);
	if (rv == 0)
		rv = nng_http_handler_set_data(h->h_metrics, h, NULL);
	if (rv == 0)
		rv = nng_http_handler_alloc_static(&h->h_root, "/", root_text,
		    sizeof(root_text) - 1, "text/plain; charset=utf-8");
	return from_nng(rv);
}

/* http://HOST:PORT with the port the listener is bound to. */
static dg_err learn_address(dgi_http *h, const nng_url *u)
{
	nng_sockaddr sa;
	int rv = nng_http_server_get_addr(h->h_srv, &sa);
	if (rv != 0)
		return from_nng(rv);
	unsigned port;
	if (sa.s_family == NNG_AF_INET)
		port = ntohs(sa.s_in.sa_port);
	else if (sa.s_family == NNG_AF_INET6)
		port = ntohs(sa.s_in6.sa_port);
	else
		return DG_ERR_NET;
	bool v6 = strchr(u->u_hostname, ':') != NULL;
	snprintf(h->h_addr, sizeof(h->h_addr), "http://%s%s%s:%u", v6 ? "[" : "",
	    u->u_hostname, v6 ? "]" : "", port);
	return DG_OK;
}

/* Holds the server of u, adds both handlers and starts it: under hold_mu
 * (see the header comment). */
static dg_err serve(dgi_http *h, const nng_url *u)
{
	pthread_mutex_lock(&hold_mu);
	int rv = nng_http_server_hold(&h->h_srv, u);
	if (rv == 0 && (rv = nng_http_server_add_handler(h->h_srv, h->h_metrics)) == 0)
		h->h_metrics_added = true;
	if (rv == 0 && (rv = nng_http_server_add_handler(h->h_srv, h->h_root)) == 0)
		h->h_root_added = true;
	if (rv == 0 && (rv = nng_http_server_start(h->h_srv)) == 0)
		h->h_started = true;
	pthread_mutex_unlock(&hold_mu);
	return from_nng(rv);
}

dg_err dgi_http_start(dg_node *n, const char *url, dgi_http **out)
{
	if (n == NULL || url == NULL || out == NULL)
		return DG_ERR_INVAL;
	nng_url *u = NULL;
	if (nng_url_parse(&u, url) != 0 || strcmp(u->u_scheme, "http") != 0) {
		nng_url_free(u);
		return DG_ERR_INVAL;
	}
	dgi_http *h = dgi_calloc(1, sizeof(*h));
	if (h == NULL) {
		nng_url_free(u);
		return DG_ERR_NOMEM;
	}
	h->h_node = n;
	pthread_mutex_init(&h->h_mu, NULL);
	dg_buf_init(&h->h_buf);
	dg_err e = make_handlers(h);
	if (e == DG_OK)
		e = serve(h, u);
	if (e == DG_OK)
		e = learn_address(h, u);
	nng_url_free(u);
	if (e != DG_OK) {
		dgi_http_stop(h);
		return e;
	}
	*out = h;
	return DG_OK;
}

const char *dgi_http_address(const dgi_http *h)
{
	return h != NULL ? h->h_addr : NULL;
}

/* Undoes whatever part of dgi_http_start succeeded.  After
 * nng_http_server_stop no handler runs (it waits for every connection to
 * be reaped, each after its callbacks), so h can go. */
void dgi_http_stop(dgi_http *h)
{
	if (h == NULL)
		return;
	if (h->h_started)
		nng_http_server_stop(h->h_srv);
	if (h->h_root_added)
		nng_http_server_del_handler(h->h_srv, h->h_root);
	if (h->h_metrics_added)
		nng_http_server_del_handler(h->h_srv, h->h_metrics);
	if (h->h_srv != NULL)
		nng_http_server_release(h->h_srv);
	if (h->h_root != NULL)
		nng_http_handler_free(h->h_root);
	if (h->h_metrics != NULL)
		nng_http_handler_free(h->h_metrics);
	dg_buf_free(&h->h_buf);
	pthread_mutex_destroy(&h->h_mu);
	dgi_free(h);
}
