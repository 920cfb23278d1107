/*
 * metrics_http.h — the node's HTTP endpoint: GET /metrics in Prometheus
 * text format 0.0.4 (metrics.h), served by http.c (our own small HTTP/1.1
 * server: connection cap, idle timeout, accept back-off; http.c says why
 * not nng's).
 *
 *   GET /metrics  200, Content-Type: text/plain; version=0.0.4; charset=utf-8
 *   GET /         200, one line of text pointing to /metrics
 *   HEAD          the same without the body
 *   another method 405 (Allow: GET, HEAD); another path 404;
 *   a malformed head 400, a head above 8 KiB 431, a request body 400
 *   (each then closed); without the configured credentials 401.
 *
 * Connections are HTTP/1.1 keep-alive (1.0: close unless asked).
 * Handlers run on the endpoint's connection threads.  A scrape reads
 * counters and takes the short per-partition locks of
 * dg_cache_get_metrics, never a lock held across a cache operation.
 */
#ifndef DG_NODE_METRICS_HTTP_H
#define DG_NODE_METRICS_HTTP_H

#include "datagrid.h"

typedef struct dgi_http dgi_http;

/* Listens on url (http://HOST:PORT, or https://HOST:PORT with the node's
 * TLS files; port 0 picks a free port) and serves node n until
 * dgi_http_stop, which the caller must call before n is torn down; limits
 * and credentials from n's config.  *out is the caller's.  Errors:
 * DG_ERR_INVAL (not an http:// or https:// URL of a host and port;
 * https:// without TLS files), DG_ERR_TLS (the TLS files), DG_ERR_ADDRINUSE,
 * DG_ERR_NET (any other listen failure), DG_ERR_NOMEM. */
dg_err dgi_http_start(dg_node *n, const char *url, dgi_http **out);
/* The URL actually served (SCHEME://HOST:PORT with the bound port).  Static
 * while h lives. */
const char *dgi_http_address(const dgi_http *h);
/* Stops listening, waits for the handlers that are running, frees h.  NULL
 * is fine. */
void dgi_http_stop(dgi_http *h);

#endif
