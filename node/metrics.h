/*
 * metrics.h — the node's metrics as Prometheus text (exposition format
 * 0.0.4), for the HTTP /metrics endpoint (metrics_http.c).  The families
 * written are listed in metrics.c's header comment.
 */
#ifndef DG_NODE_METRICS_H
#define DG_NODE_METRICS_H

#include "datagrid.h"

/* At most this many caches are described per scrape (a stack array holds
 * their configs and metrics); datagrid_caches still counts them all. */
#define DGI_METRICS_CACHES_MAX 64

/* Replaces out's contents with the exposition text of node n.  out is the
 * caller's and is reused: once it has grown to the reply's size, a scrape
 * allocates nothing (every counter is read into fixed-size arrays on the
 * stack).  Thread-safe with respect to the node (reads counters and takes
 * only the short per-partition locks of dg_cache_get_metrics); one thread at
 * a time per out.  On error out holds a partial text.  Errors: DG_ERR_NOMEM
 * (growing out), DG_ERR_INVAL (NULL argument). */
dg_err dgi_node_metrics_text(dg_node *n, dg_buf *out);

/* The counters of one metrics struct (dg_cache_metrics, dg_tx_metrics or
 * dg_tp_stats), each as fn(ctx, member name, value) in the order
 * /metrics lists them: dgctl metrics' JSON uses the same fields. */
typedef enum dgi_metrics_kind {
	DGI_METRICS_CACHE, DGI_METRICS_TX, DGI_METRICS_TRANSPORT
} dgi_metrics_kind;
void dgi_metrics_each(dgi_metrics_kind kind, const void *stats,
    void (*fn)(void *ctx, const char *name, uint64_t v), void *ctx);

#endif
