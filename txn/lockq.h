/*
 * lockq.h — per-key lock queues of a primary (txn/, private to the module).
 *
 * Every key a transaction locks on this node has one lock entry: its owner
 * (a transaction id) and a FIFO queue of waiting transactions.  Locks are
 * exclusive (PESSIMISTIC transactions take them at first access, OPTIMISTIC
 * ones at prepare; Ignite's semantics).  A lock is re-entrant for its owner.
 * When the owner releases its locks, each freed key is granted to the first
 * waiter in FIFO order; a waiter past its deadline is dropped with
 * DG_ERR_TIMEOUT.
 *
 * Keys are (cache id, encoded key bytes) with the caller's 64-bit hash of
 * the key bytes.  The table is striped by hash; each stripe is an
 * open-addressing table of lock entries, so lookups take one stripe lock and
 * box nothing.  A transaction's held and waited-on locks are found through a
 * second int-keyed table by transaction id (no map keyed by a boxed id).
 * Lock entries and waiter records come from per-stripe free lists: a steady
 * state of lock/unlock allocates nothing.
 *
 * Callbacks (grant, timeout) run without any table lock held, on the thread
 * that released the lock or ran dgi_locks_expire; they must not block.
 *
 * Threads: every function is thread-safe.
 */
#ifndef DG_TXN_LOCKQ_H
#define DG_TXN_LOCKQ_H

#include "marshal/marshal.h"
#include "marshal/mix.h"

/* A transaction id: the near node (where begin was called) and its
 * counter.  Ordered by (node, seq); {0, 0} is "none". */
typedef struct dgi_txid {
	uint64_t node;
	uint64_t seq;
} dgi_txid;

static inline bool dgi_txid_eq(const dgi_txid *a, const dgi_txid *b)
{
	return a->node == b->node && a->seq == b->seq;
}

/* A transaction id's hash, for every table keyed by one (its low bits as
 * good as its high ones). */
static inline uint64_t dgi_txid_hash(const dgi_txid *t)
{
	return dgi_mix64(t->node * 0x9e3779b97f4a7c15ULL ^ t->seq);
}

typedef struct dgi_locks dgi_locks;

/* Called once per queued request: DG_OK granted, DG_ERR_TIMEOUT its
 * deadline passed, DG_ERR_CLOSED the table was destroyed or the tx
 * released everything (dgi_lock_release_all cancels its waits).  */
typedef void (*dgi_lock_cb)(void *ctx, dg_err err);

/* stripes: a power of two, 0 = 64.  DG_ERR_NOMEM, DG_ERR_INVAL. */
dg_err dgi_locks_create(uint32_t stripes, dgi_locks **out);
/* Cancels every waiter (cb with DG_ERR_CLOSED) and frees.  NULL is fine.
 * No other call may run concurrently; the callbacks it runs may still call
 * release_all (the table is whole until they return). */
void dgi_locks_destroy(dgi_locks *l);

enum { DGI_LOCK_GRANTED = 0, DGI_LOCK_QUEUED = 1 };

/* Asks for the exclusive lock on (cache_id, key) for tx.  Returns
 * DGI_LOCK_GRANTED (owned now; cb is not called), DGI_LOCK_QUEUED (cb is
 * called later exactly once), or -(dg_err) on error (DG_ERR_NOMEM,
 * DG_ERR_INVAL) with cb never called.  deadline_ms: monotonic ms
 * (dgi_now_ms clock) after which a waiting request times out; 0 = never.
 * Deadlines are enforced only by dgi_locks_expire: a request granted before
 * expire sees it is granted.  key bytes are copied (key may be NULL when
 * klen is 0).  A re-entrant acquire by the owner returns GRANTED and needs
 * no extra release.  Every tx that acquired must end with release_all: a
 * timed-out or cancelled request's memory is reclaimed only then.
 * DG_ERR_INVAL: l, tx or cb NULL, tx {0,0}, key NULL with klen > 0, or tx
 * already queued on this key. */
int dgi_lock_acquire(dgi_locks *l, uint32_t cache_id, const uint8_t *key, uint32_t klen,
    uint64_t hash, const dgi_txid *tx, uint64_t deadline_ms, dgi_lock_cb cb, void *ctx);

/* Releases every lock tx holds and cancels its queued requests (their cb
 * runs with DG_ERR_CLOSED); the freed keys go to their next waiters (their
 * cb runs with DG_OK).  Returns how many locks tx held. */
uint32_t dgi_lock_release_all(dgi_locks *l, const dgi_txid *tx);

/* Releases the lock tx holds on (cache_id, key) alone — the key goes to
 * its next waiter — and keeps the rest; the request stays on tx's list
 * (ended) until release_all.  Returns whether tx held it. */
bool dgi_lock_release(dgi_locks *l, uint32_t cache_id, const uint8_t *key, uint32_t klen,
    uint64_t hash, const dgi_txid *tx);

/* Times out waiters whose deadline is <= now (cb DG_ERR_TIMEOUT). Returns
 * how many. */
uint32_t dgi_locks_expire(dgi_locks *l, uint64_t now_ms);

/* The owner of (cache_id, key), or {0,0} when unlocked. */
dgi_txid dgi_lock_owner(dgi_locks *l, uint32_t cache_id, const uint8_t *key, uint32_t klen,
    uint64_t hash);

/* How many keys tx has asked for on this node and not released: held,
 * waited for, or timed out (kept until release_all).  For dgctl tx list. */
uint32_t dgi_locks_tx_count(dgi_locks *l, const dgi_txid *tx);

/* Wait-for edges: the owners of the locks tx is queued on (on this node),
 * up to cap into out; returns how many there are (one per queued request,
 * so an owner may appear twice).  Walks every stripe's waiters: O(waiters
 * on the node), for deadlock detection, not per operation. */
size_t dgi_locks_waits_for(dgi_locks *l, const dgi_txid *tx, dgi_txid *out, size_t cap);

/* Every edge waiter -> owner on this node, up to cap pairs (out[2i] waits
 * for out[2i+1]); returns how many there are.  For deadlock detection and
 * dgctl tx list. */
size_t dgi_locks_edges(dgi_locks *l, dgi_txid *out, size_t cap);

/* The same edges with the key waited for (its first bytes), for deadlock
 * reports that name the keys. */
typedef struct dgi_lock_edge {
	dgi_txid waiter, owner;
	uint32_t cache_id;
	uint32_t klen;              /* the key's length */
	uint8_t key[24];            /* its first bytes */
} dgi_lock_edge;
size_t dgi_locks_edge_list(dgi_locks *l, dgi_lock_edge *out, size_t cap);

typedef struct dgi_locks_stats {
	uint64_t locks;          /* keys locked now */
	uint64_t waiters;        /* requests queued now */
	uint64_t granted, queued, timeouts, cancelled;  /* totals; granted
	                                                  * counts re-entrant ones */
	uint64_t allocs;         /* entries/waiters allocated (not from free lists) */
} dgi_locks_stats;
void dgi_locks_get_stats(dgi_locks *l, dgi_locks_stats *out);

#endif
