/*
 * node_int.h — the node's parts, for the node module's own files (admin.c,
 * metrics_http.c): not installed, not for other modules.
 *
 * Every accessor is valid from dg_node_start's return until dg_node_stop
 * begins; the endpoints are stopped first at dg_node_stop, so their threads
 * never see a node being torn down.
 */
#ifndef DG_NODE_INT_H
#define DG_NODE_INT_H

#include "datagrid.h"
#include "cache/cache.h"
#include "transport/transport.h"
#include "txn/txsvc.h"

struct dg_tp *dgi_node_tp(dg_node *n);
struct dg_member *dgi_node_member(dg_node *n);
dgi_grid *dgi_node_grid(dg_node *n);
dgi_txsvc *dgi_node_txs(dg_node *n);
/* The node's config (strings owned by the node). */
const dg_node_config *dgi_node_config(const dg_node *n);
/* dgi_now_ms() when dg_node_start began. */
uint64_t dgi_node_started_ms(const dg_node *n);

#endif
