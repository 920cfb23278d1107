/*
 * metrics_http.h — the node's HTTP endpoint: GET /metrics in Prometheus
 * text format 0.0.4 (metrics.h), served by nng's HTTP server.
 *
 *   GET /metrics  200, Content-Type: text/plain; version=0.0.4; charset=utf-8
 *   GET /         200, one line of text pointing to /metrics
 *   anything else 404 (nng's error page; 405 for another method on those paths)
 *
 * Handlers run on nng's threads.  A scrape reads counters and takes the
 * short per-partition locks of dg_cache_get_metrics, never a lock held
 * across a cache operation; scrapes are serialized by the endpoint's own
 * mutex around its reusable text buffer.
 */
#ifndef DG_NODE_METRICS_HTTP_H
#define DG_NODE_METRICS_HTTP_H

#include "datagrid.h"

typedef struct dgi_http dgi_http;

/* Listens on url (http://HOST:PORT; port 0 picks a free port) and serves
 * node n until dgi_http_stop, which the caller must call before n is torn
 * down.  *out is the caller's.  Errors: DG_ERR_INVAL (not an http:// URL),
 * DG_ERR_ADDRINUSE (the port, or the same HOST:PORT already served in this
 * process), DG_ERR_NET (any other listen failure), DG_ERR_NOMEM. */
dg_err dgi_http_start(dg_node *n, const char *url, dgi_http **out);
/* The URL actually served (http://HOST:PORT with the bound port).  Static
 * while h lives. */
const char *dgi_http_address(const dgi_http *h);
/* Stops listening, waits for the handlers that are running, frees h.  NULL
 * is fine. */
void dgi_http_stop(dgi_http *h);

#endif
