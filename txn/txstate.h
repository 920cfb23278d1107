/*
 * txstate.h — the transaction state machine (txn/, private).
 *
 * One static table of transitions per role (txstate.c).  The near node
 * (where the tx began) walks ACTIVE → PREPARING → PREPARED → COMMITTING →
 * COMMITTED, or into ROLLING_BACK → ROLLED_BACK on any failure before the
 * commit decision.  A participant (a primary or backup holding the tx's
 * entries) walks ACTIVE (locks taken, PESSIMISTIC) → PREPARED → COMMITTED,
 * or → ROLLED_BACK; it never enters PREPARING, COMMITTING, ROLLING_BACK or
 * UNKNOWN: PREPARE keeps it ACTIVE until its locks and validation succeed
 * (PREPARED) or fail (PREPARE_FAILED → ROLLED_BACK), and it applies on
 * COMMIT and releases on ROLLBACK, so both lead straight to the final
 * state.  The ROLLED_BACK event is the near node's only.  A participant
 * still ACTIVE also releases on TIMEOUT, on NODE_LEFT (the near node) and
 * on RECOVERED_ROLLBACK (peers found it unprepared); recovery can never
 * commit a tx at a participant that did not prepare.
 *
 * The decision.  The near node's COMMITTING is the commit decision, taken
 * only once every participant prepared (2PC), so nothing may roll it back:
 * ROLLBACK, PREPARE_FAILED and RECOVERED_ROLLBACK are refused there;
 * a participant leaving keeps it COMMITTING (recovery finishes the tx), and
 * it ends COMMITTED, or UNKNOWN when the outcome could not be learnt before
 * the tx's timeout (the participants still finish it, one way, everywhere).
 * A participant's PREPARED is not decided (dgi_txs_decided is false): it
 * cannot know whether its peers prepared, so it obeys COMMIT or ROLLBACK,
 * and its timeout or the near node leaving keep it PREPARED until recovery
 * (RECOVERED_COMMIT / RECOVERED_ROLLBACK) ends it.
 *
 * One-phase commit (a single primary): on the near node ACTIVE -COMMIT->
 * COMMITTING is the decision, so it is only for a primary that can no
 * longer refuse (PESSIMISTIC: every lock already held and checked during
 * ACTIVE).  When the single primary may still refuse (OPTIMISTIC locks and
 * validates at prepare), the near node walks PREPARE → PREPARING and, on
 * the primary's one answer, fires PREPARED, COMMIT, COMMITTED in turn (or
 * PREPARE_FAILED); the wire may still carry one message each way.  The
 * primary's ACTIVE -COMMIT-> COMMITTED applies at once.
 *
 * Before the decision (near ACTIVE, PREPARING, PREPARED, ROLLING_BACK),
 * PREPARE_FAILED, ROLLBACK, TIMEOUT and NODE_LEFT all lead to, or keep,
 * ROLLING_BACK.  ACTIVE with no participant may go straight to ROLLED_BACK.
 * A near that sent every PREPARE, was refused by none but not answered by
 * some, cannot assume the rollback it sends: recovery commits a tx every
 * primary of which prepared once it takes the near for gone.  Unless every
 * primary confirms the rollback, ROLLING_BACK ends on RECOVERED_COMMIT in
 * UNKNOWN (DG_ERR_TX_UNKNOWN, never "rolled back").
 *
 * Refusals.  Every (state, event) pair not in the table is refused with
 * DG_ERR_STATE and leaves the state unchanged: late, duplicated or
 * reordered messages cannot move a finished transaction.  Final states
 * (COMMITTED, ROLLED_BACK, UNKNOWN) refuse every event, including the one
 * that led there: the caller treats a refused duplicate as idempotent (a
 * duplicate COMMIT at a participant's COMMITTED is answered again, not
 * applied again).  Values out of range are DG_ERR_INVAL, not DG_ERR_STATE,
 * so a corrupt state is never mistaken for a harmless duplicate.
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

/* The next state of a tx in role r at state s on event e, in *next.
 * Errors (*next untouched): DG_ERR_STATE when the transition is not
 * allowed; DG_ERR_INVAL when r, s or e is out of range or next is NULL.
 * Pure and thread-safe (constant tables). */
dg_err dgi_txs_next(dgi_txrole r, dgi_txs s, dgi_txe e, dgi_txs *next);
/* True for COMMITTED, ROLLED_BACK, UNKNOWN; false out of range. */
bool dgi_txs_final(dgi_txs s);
/* True once the commit is decided (COMMITTING, and COMMITTED): a failure
 * must not roll it back.  No event leads from these to ROLLING_BACK or
 * ROLLED_BACK in either role.  False out of range. */
bool dgi_txs_decided(dgi_txs s);
/* "ACTIVE", ..., for logs and dgctl; "?" out of range. */
const char *dgi_txs_name(dgi_txs s);
const char *dgi_txe_name(dgi_txe e);

#endif
