/*
 * txsvc.h — the lock service of a primary (txn/, private).
 *
 * Transactions lock keys on the primaries of their partitions with TX_LOCK
 * requests and release everything with TX_UNLOCK (PROTOCOL.md, "Transaction
 * messages").  A request that has to wait is answered when the lock is
 * granted, when its deadline passes (DG_ERR_TIMEOUT), or when its
 * transaction is chosen a deadlock victim (DG_ERR_DEADLOCK).
 *
 * Deadlocks are looked for when a request starts waiting, not after a
 * timeout: this node's wait-for edges (its lock queues) are searched for a
 * cycle through the new waiter, and the youngest transaction of a cycle
 * (latest start; then node id, counter) is the victim: its locks on this
 * node are released and its waits here answered DG_ERR_DEADLOCK — the rest
 * proceed.  Cycles that span primaries need edges from the other nodes
 * (probes): see txn/README.md; they end at the lock timeout until then.
 *
 * Threads: handlers run on the transport's threads; lock grants and
 * timeouts answer from whichever thread released or expired the lock.
 */
#ifndef DG_TXN_TXSVC_H
#define DG_TXN_TXSVC_H

#include "lockq.h"
#include "transport/transport.h"

#define DGI_MSG_TX_LOCK ((dg_msg_type)(128))     /* request: lock a key */
#define DGI_MSG_TX_LOCK_RES ((dg_msg_type)(129)) /* response: I64 result */
#define DGI_MSG_TX_UNLOCK ((dg_msg_type)(130))   /* request: release all; res: TX_LOCK_RES */

typedef struct dgi_msg_tx_lock {
	int64_t tx_node, tx_seq;    /* the transaction */
	int64_t tx_start_ms;        /* its start (wall clock ms): the victim choice */
	int64_t cache_id;
	int64_t timeout_ms;         /* how long the request may wait */
	dg_bytes key;               /* encoded key */
} dgi_msg_tx_lock;

typedef struct dgi_msg_tx_res {  /* TX_LOCK_RES; also TX_UNLOCK's body (res unused) */
	int64_t res;                /* dg_err */
	int64_t tx_node, tx_seq;    /* TX_UNLOCK: the transaction */
} dgi_msg_tx_res;

typedef struct dgi_txsvc dgi_txsvc;

typedef struct dgi_txsvc_stats {
	uint64_t granted, waited, timeouts, deadlocks, unlocks;
} dgi_txsvc_stats;

/* Defines the message rows (once per process), registers the handlers on
 * tp and starts the deadline thread.  *out: dgi_txsvc_stop. */
dg_err dgi_txsvc_start(dg_tp *tp, dgi_txsvc **out);
/* Unsets the handlers, answers every waiter DG_ERR_CLOSED, frees. */
void dgi_txsvc_stop(dgi_txsvc *s);
void dgi_txsvc_get_stats(dgi_txsvc *s, dgi_txsvc_stats *out);

#endif
