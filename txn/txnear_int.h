/*
 * txnear_int.h — what the near side's two files share (internal): txn.c
 * (begin, reads, locks, writes, rollback) and txnear_commit.c (the commit
 * protocol).  Other modules see txn.h and txsvc.h.
 *
 * A dg_tx belongs to the thread that began it: its fields are that
 * thread's, but for those marked otherwise.  The answers of its requests
 * are written by the threads that get them (a reactor, the transport's
 * timer) — each struct call by its own answer, without a lock; a batch's
 * keys (struct fetched, vals) under tx->mu — and read by the tx's thread
 * after dgi_txn_wait_all: an answer is counted in (tx->outstanding,
 * dgi_due_*, transport.h) after its writes.  A 2PC's COMMITs may be sent
 * by the thread that got its last PREPARE answer (dgi_txn_count_in,
 * dgi_txn_commit_on_answer).
 */
#ifndef DG_TXNEAR_INT_H
#define DG_TXNEAR_INT_H

#include "txn.h"
#include "txentries.h"
#include "txstate.h"
#include "txsvc.h"

#include <pthread.h>
#include <stdatomic.h>

#define MAX_NODES 64            /* primaries (and lock holders) per tx */
/* A group of entries must fit one frame (txnear_commit.c, prepare_groups):
 * what the versions a commit copy fills in may add to an entry (three
 * svarints of up to 10 bytes, where the near sent as little as 1 each),
 * and room for a message's head values. */
#define DGI_TX_ENTRY_GROWTH 32
#define DGI_TX_HEAD_ROOM 1024

/* A participant answers a wait that ends with the tx's timeout itself;
 * this much more lets its answer arrive. */
#define NET_SLACK_MS 200

struct call {                   /* one request's answer */
	struct dg_tx *tx;
	dg_err err;
	int64_t idx;
	bool answered;              /* the peer answered (err is its verdict) */
	bool sent;                  /* the request went out (the peer may have
	                               acted on it even if it did not answer) */
	bool applied;               /* TX_ACK with DGI_TXA_APPLIED: a commit applied
	                               on that primary, not confirmed by every backup */
};

struct dg_tx {
	dgi_txsvc *s;
	dgi_txid id;
	dg_tx_concurrency conc;
	dg_tx_isolation iso;
	uint32_t timeout_ms;
	uint64_t deadline;          /* monotonic ms */
	int64_t start_ms;           /* wall ms */
	dgi_txs state;
	int64_t topver;             /* of the first lock (PESSIMISTIC) */
	dgi_txents *ents;
	uint32_t nlocked;
	uint64_t locked[MAX_NODES]; /* nodes holding locks or records of this tx */
	char label[DG_TX_LABEL_MAX];
	pthread_mutex_t mu;             /* a batch's answers' writers (struct fetched, vals) */
	uint32_t outstanding;           /* answers due: dgi_due_* (transport.h) */
	/* a 2PC's COMMIT sent by its last PREPARE answer (dgi_txn_commit_on_answer):
	 * the PREPARE round armed for it (arm_ng 0: none), written by the caller
	 * before the round and by its last answer (dgi_txn_count_in) */
	uint32_t arm_ng, commit_ng;
	const struct group *arm_groups;
	struct call *arm_calls;
	bool commit_sent;           /* the COMMITs went out (read after wait_all) */
	/* the last TX_LOCK answer (fetch_all's: in struct fetched, values in vals) */
	bool found;
	dgi_pver ver;
	dg_buf val;
	dg_buf vals;                /* fetch_all's answers' values */
	dg_buf wire;                /* PREPARE bodies */
	uint64_t heap;              /* bytes this tx allocated */
	/* the admin CLI's view (dgi_tx_list, dgi_tx_kill) */
	struct dg_tx *live_prev, *live_next;  /* the service's live list */
	_Atomic int fate;           /* FATE_*: killed, or past the point of no kill */
	_Atomic bool victim;        /* a deadlock's victim: its calls fail DG_ERR_DEADLOCK */
	_Atomic int shown;          /* state, for other threads */
	_Atomic uint32_t nkeys;     /* entries, for other threads */
};

enum {
	FATE_NONE = 0,
	FATE_KILLED,                /* dgi_tx_kill: every next call rolls back */
	FATE_SEALED,                /* commit began: a kill is refused */
};

/* Tests only (txnear_commit.c): make dgi_txn_commit() stop as if the near
 * node crashed — 1 after every participant prepared (no COMMIT sent), 2
 * after COMMIT went to the first participant only, 3 after PREPARE went
 * to the first participant only.  It then returns DG_ERR_TX_UNKNOWN at
 * once; the test kills the node.  4: the near node loses contact once
 * every participant prepared (dgi_tx_cut_node: their answers are lost,
 * nothing it sends arrives) and the commit goes on as if its PREPAREs
 * timed out.  5: no crash — the commit waits 500 ms once every
 * participant prepared, then sends its COMMITs (a test cuts or kills
 * something meanwhile). */
extern _Atomic int dgi_tx_crash_point;
extern _Atomic int dgi_tx_crash_reached; /* tests: the last crash point a commit reached */

/* ---- txn.c ---- */
/* How long releasing may wait for the participants' answers: they also
 * release on their own once the tx's timeout passed, so a tx past it
 * does not wait long. */
uint32_t dgi_txn_release_wait(const struct dg_tx *tx);
uint32_t dgi_txn_left_ms(const dg_tx *tx);
void dgi_txn_sleep_ms(long ms);
/* node now holds locks or records of tx (lockable_on was asked first). */
void dgi_txn_add_locked(dg_tx *tx, uint64_t node);
/* A request of tx, its answer into c by cb (dgi_txn_on_ack, or a
 * reader's); counted in tx->outstanding until answered. */
dg_err dgi_txn_request(dg_tx *tx, struct call *c, uint64_t to, dg_msg_type type,
    const void *body, uint32_t timeout_ms, dg_reply_fn cb);
/* A TX_ACK (PREPARE, COMMIT, ROLLBACK) into its struct call. */
void dgi_txn_on_ack(void *ctx, dg_err err, const dg_msg_in *reply);
/* Until every answer due is in. */
void dgi_txn_wait_all(dg_tx *tx);
/* One answer due is in (its writes done); true: the caller sends the COMMITs
 * of an armed PREPARE round (dgi_txn_commit_on_answer). */
bool dgi_txn_count_in(dg_tx *tx);
/* ROLLBACK (locks released) on every node of tx->locked. */
void dgi_txn_release_all(dg_tx *tx, uint32_t wait_ms);
/* tx's state by event ev (txstate.c's near table). */
void dgi_txn_step(dg_tx *tx, dgi_txe ev);
/* The tx failed with e: rolled back everywhere; the error the caller sees. */
dg_err dgi_txn_fail_tx(dg_tx *tx, dg_err e);
/* The tx is done: unlinked, kept for the thread's next tx or freed. */
void dgi_txn_tx_free(dg_tx *tx);

/* ---- txnear_commit.c ---- */
/* dg_tx_commit but for freeing the tx (a plain operation's tx commits so). */
dg_err dgi_txn_commit(dg_tx *tx);
/* The decision, sent from the last PREPARE answer of an armed round. */
void dgi_txn_commit_on_answer(dg_tx *tx);

#endif
