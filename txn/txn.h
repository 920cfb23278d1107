/*
 * txn/txn.h — transactions over TRANSACTIONAL caches (public: included by
 * datagrid.h; read datagrid.h's conventions first).
 *
 * A transaction reads and writes keys of any TRANSACTIONAL caches of one
 * node's cluster and commits them all or none (two-phase commit across the
 * primaries of the keys and their backups; txn/README.md and PROTOCOL.md).
 * The semantics are Ignite's:
 *
 *   PESSIMISTIC  locks each key on its primary at first access:
 *                READ_COMMITTED on writes only (reads see the latest
 *                committed value, each time); REPEATABLE_READ and
 *                SERIALIZABLE on reads too (a read key cannot change until
 *                the tx ends).
 *   OPTIMISTIC   takes no lock before commit; commit locks every written key
 *                on its primary (in key order per primary) and writes.
 *                READ_COMMITTED: reads see the latest committed value, each
 *                time; REPEATABLE_READ: the first read's value stays;
 *                SERIALIZABLE: like REPEATABLE_READ, and commit checks that
 *                every key read still has the version it had when read —
 *                if not, DG_ERR_TX_CONFLICT and nothing is written.
 *
 * Reads inside a tx see its own writes.  Nothing a tx writes is visible to
 * others before it commits; a failed, timed-out or rolled-back tx leaves
 * nothing behind.  With FULL_SYNC caches, commit returns once every primary
 * and every backup applied.
 *
 * Errors of the tx operations, besides datagrid.h's:
 *   DG_ERR_DEADLOCK        the tx was the victim of a deadlock (a cycle of
 *                          lock waits); it was rolled back and holds nothing
 *   DG_ERR_TX_CONFLICT     OPTIMISTIC SERIALIZABLE: a key read changed
 *                          before commit (any concurrency: a value a
 *                          compare-and-set compared changed); rolled back
 *   DG_ERR_TIMEOUT         the tx's timeout passed (waiting for a lock, or
 *                          before the commit decision); rolled back
 *   DG_ERR_SEGMENTED       this node reaches no majority of the voting
 *                          servers: refused at once, rolled back (nothing
 *                          was prepared)
 *   DG_ERR_TX_ROLLED_BACK  the tx was rolled back for another reason (the
 *                          topology changed under a PESSIMISTIC tx's locks,
 *                          a participant refused or left before the commit
 *                          decision, an earlier operation failed); retry it
 *   DG_ERR_TX_UNKNOWN      commit: the outcome could not be learnt before
 *                          the timeout (plus up to 1 s): the decision was
 *                          commit but not every participant confirmed it;
 *                          or every PREPARE went out, none was refused,
 *                          some was not answered, and the rollback could
 *                          not be confirmed by every primary (recovery
 *                          commits a tx all of whose primaries prepared
 *                          once it takes the near node for gone); or a
 *                          primary failed to apply after applying part; or
 *                          a primary applied it but not every owner of the
 *                          keys confirmed the copies before the timeout (or
 *                          that primary left the topology first).
 *                          Either way the participants finish it one way
 *                          everywhere (never half); it may be applied.
 *   DG_ERR_PARTITION_LOST  the key's partition lost every copy (datagrid.h;
 *                          until dg_cache_reset_lost): a read, write or lock
 *                          of it, or the commit of a tx that wrote it; the
 *                          tx is rolled back
 *   DG_ERR_STATE           the tx is not ACTIVE (commit/rollback called, or
 *                          an operation failed and rolled it back), or this
 *                          thread already has a current tx (begin)
 *   DG_ERR_UNSUPPORTED     the cache is not TRANSACTIONAL
 *   DG_ERR_LIMIT           the tx would hold locks or prepare on more than
 *                          64 nodes (primaries); rolled back
 * After any error but DG_ERR_NOT_FOUND (an absent key) and DG_ERR_INVAL (a
 * bad argument, checked before anything is sent), the tx is rolled back:
 * only dg_tx_rollback (or commit, which returns DG_ERR_TX_ROLLED_BACK) is
 * left to call, to free it.
 * Outcome truth: once commit sent PREPAREs, it reports a "not applied"
 * error (all but DG_OK and DG_ERR_TX_UNKNOWN) only when it knows no
 * participant can commit — a primary refused or never got its PREPARE, or
 * every primary confirmed the rollback (one that left: no owner of its
 * keys applied its entries).  A primary found committed by recovery is
 * joined: commit goes on as decided (DG_OK or DG_ERR_TX_UNKNOWN).
 *
 * Plain operations (dg_cache_put, dg_cache_get, ... of cache.h) on a
 * TRANSACTIONAL cache join the calling thread's current tx; outside one,
 * a write runs as a one-operation PESSIMISTIC REPEATABLE_READ tx bounded
 * by the node's request_timeout_ms (as every plain operation, not
 * DG_TX_TIMEOUT_DEFAULT), and a read reads the committed value.
 *
 * Compare-and-set (dg_cache_replace_if_equals, dg_cache_remove_if_equals
 * and their forms) is atomic in every mode: the value compared is the
 * key's when the tx commits, or the commit fails.
 *   outside a tx  a one-operation PESSIMISTIC REPEATABLE_READ tx: compared
 *                 under the key's lock
 *   PESSIMISTIC   compared under the key's lock, taken by the compare
 *                 whatever the isolation (READ_COMMITTED too) and held to
 *                 the end, whether it matched or not
 *   OPTIMISTIC    (any isolation) the version of the value compared is
 *                 checked at prepare, as SERIALIZABLE reads are: changed,
 *                 the commit fails DG_ERR_TX_CONFLICT (matched or not)
 * Compared with the tx's own earlier write, it needs neither.
 *
 * Threads: a tx is driven by one thread at a time.  dg_tx_begin makes it
 * the calling thread's current tx (dg_tx_current) until commit or
 * rollback; a thread has at most one current tx.  The handle may be passed
 * to another thread (one at a time).
 */
#ifndef DG_TXN_TXN_H
#define DG_TXN_TXN_H

#include "cache/cache.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dg_node dg_node;
typedef struct dg_tx dg_tx;

typedef enum dg_tx_concurrency {
	DG_PESSIMISTIC = 0,
	DG_OPTIMISTIC = 1,
} dg_tx_concurrency;

typedef enum dg_tx_isolation {
	DG_READ_COMMITTED = 0,
	DG_REPEATABLE_READ = 1,
	DG_SERIALIZABLE = 2,
} dg_tx_isolation;

typedef enum dg_tx_state {
	DG_TX_ACTIVE = 0,       /* begun: reads and writes */
	DG_TX_PREPARING,        /* commit: waiting for the participants to prepare */
	DG_TX_PREPARED,
	DG_TX_COMMITTING,       /* decided: commit sent */
	DG_TX_COMMITTED,        /* final */
	DG_TX_ROLLING_BACK,
	DG_TX_ROLLED_BACK,      /* final */
	DG_TX_UNKNOWN,          /* final: see DG_ERR_TX_UNKNOWN */
} dg_tx_state;

#define DG_TX_LABEL_MAX 64
#define DG_TX_TIMEOUT_DEFAULT 10000u   /* ms, for timeout_ms 0 */

/* Begins a tx on node n and makes it this thread's current tx.  timeout_ms
 * bounds the whole tx (lock waits and commit); 0: DG_TX_TIMEOUT_DEFAULT.
 * label (may be NULL) names it in logs and dgctl (truncated to
 * DG_TX_LABEL_MAX - 1 bytes).  *out: free it with dg_tx_commit or
 * dg_tx_rollback.  DG_ERR_STATE (this thread has a current tx),
 * DG_ERR_INVAL, DG_ERR_NOMEM. */
DG_API dg_err dg_tx_begin(dg_node *n, dg_tx_concurrency concurrency,
    dg_tx_isolation isolation, uint32_t timeout_ms, const char *label, dg_tx **out);
/* This thread's current tx, or NULL. */
DG_API dg_tx *dg_tx_current(void);

/* Raw byte strings, as dg_cache_get/put/remove (cache/cache.h). */
DG_API dg_err dg_tx_get(dg_tx *tx, dg_cache *c, const void *key, size_t klen,
    dg_buf *val);
DG_API dg_err dg_tx_put(dg_tx *tx, dg_cache *c, const void *key, size_t klen,
    const void *val, size_t vlen);
/* *removed (optional): whether the key had a value (PESSIMISTIC and
 * OPTIMISTIC REPEATABLE_READ/SERIALIZABLE read it to say; OPTIMISTIC
 * READ_COMMITTED reads it too). */
DG_API dg_err dg_tx_remove(dg_tx *tx, dg_cache *c, const void *key, size_t klen,
    bool *removed);
/* Encoded marshal values, as dg_cache_get_val/put_val/remove_val. */
DG_API dg_err dg_tx_get_val(dg_tx *tx, dg_cache *c, const uint8_t *key, size_t klen,
    dg_buf *val);
DG_API dg_err dg_tx_put_val(dg_tx *tx, dg_cache *c, const uint8_t *key, size_t klen,
    const uint8_t *val, size_t vlen);
DG_API dg_err dg_tx_remove_val(dg_tx *tx, dg_cache *c, const uint8_t *key, size_t klen,
    bool *removed);
/* Batches (raw), as dg_cache_get_all/put_all/remove_all, each key as the
 * single call would treat it — but the keys that need their primary (a
 * read; a PESSIMISTIC lock) are asked all at once, one round trip for the
 * batch rather than one per key.  PESSIMISTIC locks keep the order of
 * kvs: asked at once without waiting; when one is held by another tx,
 * those before it stay locked, those after it are given back, and from
 * it on the keys are locked one by one in that order — so callers that
 * lock keys in one order still cannot deadlock.  A
 * failure of any key rolls the tx back (as its single call would). */
DG_API dg_err dg_tx_get_all(dg_tx *tx, dg_cache *c, dg_kv *kvs, size_t n, dg_buf *vals,
    size_t *found);
DG_API dg_err dg_tx_put_all(dg_tx *tx, dg_cache *c, const dg_kv *kvs, size_t n);
DG_API dg_err dg_tx_remove_all(dg_tx *tx, dg_cache *c, const dg_kv *kvs, size_t n,
    size_t *removed);

/* Commits and frees the tx (also on error).  DG_OK: every write is applied
 * on every primary (and, FULL_SYNC, every backup).  Errors: see above; on
 * any error but DG_ERR_TX_UNKNOWN nothing was written (outcome truth,
 * above).  Bounded by the tx's timeout, plus up to 1 s to learn the
 * outcome when a participant did not answer. */
DG_API dg_err dg_tx_commit(dg_tx *tx);
/* Rolls back (releases every lock, writes nothing) and frees the tx. */
DG_API dg_err dg_tx_rollback(dg_tx *tx);

DG_API dg_tx_state dg_tx_get_state(const dg_tx *tx);
/* "ACTIVE", "COMMITTED", ... (static). */
DG_API const char *dg_tx_state_name(dg_tx_state s);

/* Transaction counters of a node: started .. heap_bytes count the txs this
 * node began (was the near node of); participant_*, locks and recoveries
 * what it did for txs begun anywhere. */
typedef struct dg_tx_metrics {
	uint64_t started, committed, rolled_back;   /* began on this node */
	uint64_t conflicts, deadlocks, timeouts;    /* of those, failed with */
	uint64_t one_phase;                         /* committed with one phase */
	uint64_t heap_bytes;                        /* allocated by those txs on this node */
	uint64_t participant_prepared;              /* prepared here as primary or backup */
	uint64_t participant_committed;
	uint64_t locks_held, lock_waiters;          /* now, on this node */
	uint64_t recovered_commit, recovered_rollback;
} dg_tx_metrics;
DG_API dg_err dg_tx_get_metrics(dg_node *n, dg_tx_metrics *out);

#ifdef __cplusplus
}
#endif
#endif /* DG_TXN_TXN_H */
