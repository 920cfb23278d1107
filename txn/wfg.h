/*
 * wfg.h — wait-for graphs and deadlock cycles (txn/, private).
 *
 * A wait-for graph over transaction ids: an edge a -> b means a waits for a
 * lock b holds.  Deadlock detection runs when a transaction starts waiting
 * (not after a timeout): the edges known locally (this node's lock queues)
 * plus edges gathered from other nodes (probes) are put in a graph and
 * searched for a cycle through the new waiter.  One victim is chosen per
 * cycle, deterministically on every node: the youngest transaction (the
 * largest (start time, node, seq)) so the older ones proceed.
 *
 * The graph is a small open-addressing table of vertices with adjacency
 * arrays; it is rebuilt per search (searches are rare: one per wait) and
 * reused (dgi_wfg_reset keeps its memory).
 */
#ifndef DG_TXN_WFG_H
#define DG_TXN_WFG_H

#include "lockq.h"

typedef struct dgi_wfg dgi_wfg;

dg_err dgi_wfg_create(dgi_wfg **out);
void dgi_wfg_destroy(dgi_wfg *g);
/* Removes every vertex and edge; keeps the memory. */
void dgi_wfg_reset(dgi_wfg *g);

/* Adds the edge waiter -> owner (duplicates are ignored).  start_ms: the
 * transactions' start times (for the victim choice; 0 if unknown).
 * DG_ERR_NOMEM, DG_ERR_INVAL (an id {0,0}, or waiter == owner). */
dg_err dgi_wfg_add(dgi_wfg *g, const dgi_txid *waiter, uint64_t waiter_start_ms,
    const dgi_txid *owner, uint64_t owner_start_ms);

/* Finds a cycle through from (if any): writes its vertices in wait order
 * (from, then whom from waits for, ...) up to cap into cycle; returns the
 * cycle's length, 0 when none.  Iterative (no recursion depth limit),
 * O(V + E). */
size_t dgi_wfg_cycle(dgi_wfg *g, const dgi_txid *from, dgi_txid *cycle, size_t cap);

/* The victim of a cycle: the youngest — largest (start_ms, node, seq). */
dgi_txid dgi_wfg_victim(dgi_wfg *g, const dgi_txid *cycle, size_t n);

#endif
