/*
 * txstate.h — the transaction state machine (txn/, private).
 *
 * One table of transitions drives both roles.  The near node (where the tx
 * began) walks ACTIVE → PREPARING → PREPARED → COMMITTING → COMMITTED, or
 * into ROLLING_BACK → ROLLED_BACK on any failure before the commit decision.
 * A participant (a primary or backup holding the tx's entries) walks
 * ACTIVE (locks taken, PESSIMISTIC) → PREPARED → COMMITTED, or
 * → ROLLED_BACK.  After the decision to commit (the near node's COMMITTING,
 * a participant's PREPARED with every peer prepared) nothing may roll it
 * back: failures then lead to recovery, which ends COMMITTED, or to UNKNOWN
 * on the near node when the outcome could not be learnt before the tx's
 * timeout (the participants still finish it, one way, everywhere).
 *
 * Every (state, event) pair not in the table is refused with DG_ERR_STATE
 * and leaves the state unchanged: late, duplicated or reordered messages
 * cannot move a finished transaction.
 */
#ifndef DG_TXN_TXSTATE_H
#define DG_TXN_TXSTATE_H

#include "marshal/marshal.h"

typedef enum dgi_txs {
	DGI_TXS_ACTIVE = 0,      /* begun: reads and writes; PESSIMISTIC: locks held */
	DGI_TXS_PREPARING,       /* near: PREPARE sent, waiting for every participant */
	DGI_TXS_PREPARED,        /* every participant locked and validated (participant: this one) */
	DGI_TXS_COMMITTING,      /* near: COMMIT sent — decided, cannot roll back */
	DGI_TXS_COMMITTED,       /* final */
	DGI_TXS_ROLLING_BACK,    /* near: ROLLBACK sent, waiting for participants */
	DGI_TXS_ROLLED_BACK,     /* final */
	DGI_TXS_UNKNOWN,         /* near, final: outcome not learnt before the timeout */
	DGI_TXS__COUNT
} dgi_txs;

typedef enum dgi_txe {
	DGI_TXE_OP = 0,          /* a read or write inside the tx */
	DGI_TXE_PREPARE,         /* near: commit() called, PREPARE sent; participant: PREPARE arrived */
	DGI_TXE_PREPARED,        /* near: the last participant answered PREPARED;
	                            participant: its locks and validation succeeded */
	DGI_TXE_PREPARE_FAILED,  /* a participant refused (conflict, deadlock victim, lock timeout, storage) */
	DGI_TXE_COMMIT,          /* near: COMMIT sent (after PREPARED, or one-phase);
	                            participant: COMMIT arrived */
	DGI_TXE_COMMITTED,       /* near: every participant (and backup, FULL_SYNC) committed;
	                            participant: applied */
	DGI_TXE_ROLLBACK,        /* rollback() called, or ROLLBACK arrived */
	DGI_TXE_ROLLED_BACK,     /* every participant released everything */
	DGI_TXE_TIMEOUT,         /* the tx's timeout passed */
	DGI_TXE_NODE_LEFT,       /* a participant (or, for a participant, the near node) left */
	DGI_TXE_RECOVERED_COMMIT,   /* recovery: every participant had prepared */
	DGI_TXE_RECOVERED_ROLLBACK, /* recovery: some participant had not prepared */
	DGI_TXE__COUNT
} dgi_txe;

typedef enum dgi_txrole { DGI_TX_NEAR = 0, DGI_TX_PARTICIPANT = 1 } dgi_txrole;

/* The next state of a tx in role r at state s on event e, or DG_ERR_STATE
 * (and *next untouched) when the transition is not allowed. */
dg_err dgi_txs_next(dgi_txrole r, dgi_txs s, dgi_txe e, dgi_txs *next);
/* True for COMMITTED, ROLLED_BACK, UNKNOWN. */
bool dgi_txs_final(dgi_txs s);
/* True once the commit is decided (COMMITTING, and COMMITTED): a failure
 * must not roll it back. */
bool dgi_txs_decided(dgi_txs s);
/* "ACTIVE", ..., for logs and dgctl; "?" out of range. */
const char *dgi_txs_name(dgi_txs s);
const char *dgi_txe_name(dgi_txe e);

#endif
