/*
 * txdone.h — finished transactions remembered for a bounded time (txn/,
 * private).
 *
 * A participant remembers the outcome of every transaction it finished
 * (COMMITTED or ROLLED_BACK) for `keep_ms`, so a late or repeated PREPARE
 * or COMMIT cannot apply a finished transaction again, and recovery
 * questions ("did you commit tx T?") are answered from this memory.
 *
 * Storage: an open-addressing table keyed by transaction id (no boxing) and
 * a FIFO ring of (id, finish time) in finish order, so expiry pops from the
 * front without scanning; both are sized at create for a capacity and grow
 * by doubling past it.  Memory is bounded by the number of transactions
 * finished within keep_ms.
 *
 * Threads: every function is thread-safe (one mutex).
 */
#ifndef DG_TXN_TXDONE_H
#define DG_TXN_TXDONE_H

#include "lockq.h"
#include "txstate.h"

typedef struct dgi_txdone dgi_txdone;

/* keep_ms > 0; capacity: the ids it holds before it grows (pre-sized:
 * 16 bytes x 2 in the table and 24 in the ring per id, rounded up to
 * powers of two; 0: grows from a few), at most DGI_TXDONE_CAPACITY_MAX.
 * DG_ERR_INVAL, DG_ERR_NOMEM. */
#define DGI_TXDONE_CAPACITY_MAX (1u << 28)
dg_err dgi_txdone_create(uint64_t keep_ms, size_t capacity, dgi_txdone **out);
void dgi_txdone_destroy(dgi_txdone *d);

/* Remembers tx's outcome (DGI_TXS_COMMITTED or DGI_TXS_ROLLED_BACK) from
 * now_ms (monotonic ms).  A tx already remembered keeps its first outcome
 * and the call returns DG_ERR_EXISTS if the outcome differs (a bug to
 * report, never to apply), DG_OK if it is the same.  DG_ERR_INVAL (id {0,0}
 * or another state), DG_ERR_NOMEM (nothing changed). */
dg_err dgi_txdone_put(dgi_txdone *d, const dgi_txid *tx, dgi_txs outcome, uint64_t now_ms);

/* The remembered outcome of tx: true and *outcome set, or false. */
bool dgi_txdone_get(dgi_txdone *d, const dgi_txid *tx, dgi_txs *outcome);

/* Forgets the transactions finished more than keep_ms before now_ms;
 * returns how many. */
uint32_t dgi_txdone_expire(dgi_txdone *d, uint64_t now_ms);

/* How many times it grew past its size at create (the capacity was
 * exceeded: more txs finished within keep_ms). */
uint32_t dgi_txdone_grown(dgi_txdone *d);

/* How many are remembered. */
size_t dgi_txdone_count(dgi_txdone *d);

#endif
