/*
 * txstate.c — the transaction state machine of txstate.h.
 *
 * One static table per role, [state][event] → next state, and nothing
 * else: dgi_txs_next is a bounds check and a lookup, with no per-state
 * logic anywhere.  A cell holds the next state + 1, so 0 (NO) is the
 * sentinel "not allowed"; a cell an initializer leaves out is therefore
 * refused (fail closed) rather than silently meaning ACTIVE (= 0).
 *
 * Reading the tables: a row is a state, a column an event, in the enum
 * orders of txstate.h.  The comment above each row says why.  Rows of
 * states a role never enters, and rows of final states, are all NO.
 *
 * Thread-safe: the tables are constant.
 */
#include "txn/txstate.h"

#include <assert.h>
#include <stdint.h>

/* Cell codes: next state + 1; NO = not allowed. */
#define NO 0
#define AC (DGI_TXS_ACTIVE + 1)
#define PG (DGI_TXS_PREPARING + 1)
#define PD (DGI_TXS_PREPARED + 1)
#define CG (DGI_TXS_COMMITTING + 1)
#define CD (DGI_TXS_COMMITTED + 1)
#define RB (DGI_TXS_ROLLING_BACK + 1)
#define RD (DGI_TXS_ROLLED_BACK + 1)
#define UK (DGI_TXS_UNKNOWN + 1)

static_assert(DGI_TXS__COUNT < UINT8_MAX, "a cell is a uint8_t holding state + 1");
static_assert(DGI_TXS_ACTIVE == 0 && DGI_TXS_UNKNOWN == 7 && DGI_TXS__COUNT == 8,
              "the tables' rows follow dgi_txs's order");
static_assert(DGI_TXE_OP == 0 && DGI_TXE_RECOVERED_ROLLBACK == 11 && DGI_TXE__COUNT == 12,
              "the tables' columns follow dgi_txe's order");

typedef uint8_t cell;

/* Near node (the coordinator).  The decision to commit is COMMITTING:
 * before it every failure rolls back, after it nothing does. */
static const cell near_tab[DGI_TXS__COUNT][DGI_TXE__COUNT] = {
	/*                         OP    PREP  PRPD  PFAIL COMT  CMTD  RBK   RBKD  TOUT  LEFT  RCMT  RRBK */

	/* ACTIVE: reads and writes go on; commit() starts 2PC (PREPARE) or, when
	 * the single primary can no longer refuse, one-phase (COMMIT).  A refusal
	 * (PESSIMISTIC lock: deadlock victim, lock timeout), rollback(), the
	 * timeout or a participant leaving roll back; with no participant,
	 * ROLLED_BACK finishes at once.  Nothing was prepared: no recovery. */
	[DGI_TXS_ACTIVE] =       { AC,   PG,   NO,   RB,   CG,   NO,   RB,   RD,   RB,   RB,   NO,   NO },

	/* PREPARING: waiting for every PREPARED.  Not decided: any refusal,
	 * rollback(), the timeout or a participant leaving rolls back.  A
	 * second PREPARE, COMMIT before all prepared, or ops are refused. */
	[DGI_TXS_PREPARING] =    { NO,   NO,   PD,   RB,   NO,   NO,   RB,   NO,   RB,   RB,   NO,   NO },

	/* PREPARED: every participant prepared, COMMIT not yet sent: still
	 * not decided, so a failure still rolls back; COMMIT decides. */
	[DGI_TXS_PREPARED] =     { NO,   NO,   NO,   RB,   CG,   NO,   RB,   NO,   RB,   RB,   NO,   NO },

	/* COMMITTING: decided.  Ends COMMITTED (every participant and backup
	 * acknowledged, or recovery reports it); a participant leaving leaves it
	 * to recovery (stays); the timeout ends UNKNOWN.  ROLLBACK, PREPARE_FAILED
	 * and RECOVERED_ROLLBACK are refused: decided means every participant
	 * prepared, so no failure may (and no recovery can) roll it back. */
	[DGI_TXS_COMMITTING] =   { NO,   NO,   NO,   NO,   NO,   CD,   NO,   NO,   UK,   CG,   CD,   NO },

	/* COMMITTED: final; duplicates and late messages are refused. */
	[DGI_TXS_COMMITTED] =    { NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO },

	/* ROLLING_BACK: ROLLBACK sent; ends when every participant released.
	 * Further refusals, rollback() calls, the timeout or a participant
	 * leaving (it holds nothing of the tx any more) change nothing but are
	 * expected, so they are allowed and stay; a late PREPARED or a COMMIT is
	 * refused.  RECOVERED_COMMIT: every primary may have prepared (none
	 * refused, some did not answer) and the rollback could not be confirmed
	 * everywhere before the timeout — recovery may commit the tx (or did,
	 * after the primaries were asked): the outcome is UNKNOWN. */
	[DGI_TXS_ROLLING_BACK] = { NO,   NO,   NO,   RB,   NO,   NO,   RB,   RD,   RB,   RB,   UK,   NO },

	/* ROLLED_BACK: final. */
	[DGI_TXS_ROLLED_BACK] =  { NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO },

	/* UNKNOWN: final; the caller already answered DG_ERR_TX_UNKNOWN, so a
	 * late COMMITTED or recovery report cannot change it. */
	[DGI_TXS_UNKNOWN] =      { NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO },
};

/* Participant (a primary or backup holding entries of the tx).  It never
 * decides: it prepares when asked, then obeys COMMIT or ROLLBACK, or
 * recovery when the near node left. */
static const cell part_tab[DGI_TXS__COUNT][DGI_TXE__COUNT] = {
	/*                         OP    PREP  PRPD  PFAIL COMT  CMTD  RBK   RBKD  TOUT  LEFT  RCMT  RRBK */

	/* ACTIVE: ops (PESSIMISTIC: locks taken).  PREPARE arrived: stays ACTIVE
	 * while locking and validating, PREPARED when done, ROLLED_BACK when it
	 * fails.  COMMIT here is one-phase: apply, COMMITTED.  Not prepared, so
	 * rollback, the timeout, the near node leaving, or recovery finding some
	 * participant (this one) unprepared, release everything.  Recovery cannot
	 * commit a tx this participant never prepared. */
	[DGI_TXS_ACTIVE] =       { AC,   AC,   PD,   RD,   CD,   NO,   RD,   NO,   RD,   RD,   NO,   RD },

	/* PREPARING: never a participant's state. */
	[DGI_TXS_PREPARING] =    { NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO },

	/* PREPARED: locked and validated; the near node may already have
	 * decided, so this participant cannot roll back on its own.  COMMIT
	 * (applied at once) or COMMITTED ends COMMITTED, ROLLBACK ROLLED_BACK.
	 * The timeout and the near node leaving keep it PREPARED until recovery
	 * ends it either way.  Duplicates (PREPARE, PREPARED) and a late refusal
	 * are refused. */
	[DGI_TXS_PREPARED] =     { NO,   NO,   NO,   NO,   CD,   CD,   RD,   NO,   PD,   PD,   CD,   RD },

	/* COMMITTING: never a participant's state (it applies on COMMIT). */
	[DGI_TXS_COMMITTING] =   { NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO },

	/* COMMITTED: final; a duplicate COMMIT is refused (the caller answers
	 * it again, idempotently). */
	[DGI_TXS_COMMITTED] =    { NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO },

	/* ROLLING_BACK: never a participant's state (it releases on ROLLBACK). */
	[DGI_TXS_ROLLING_BACK] = { NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO },

	/* ROLLED_BACK: final. */
	[DGI_TXS_ROLLED_BACK] =  { NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO },

	/* UNKNOWN: never a participant's state (it always learns the outcome). */
	[DGI_TXS_UNKNOWN] =      { NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO,   NO },
};

static const cell (*const tabs[2])[DGI_TXE__COUNT] = {
	[DGI_TX_NEAR] = near_tab,
	[DGI_TX_PARTICIPANT] = part_tab,
};

dg_err dgi_txs_next(dgi_txrole r, dgi_txs s, dgi_txe e, dgi_txs *next)
{
	if (next == NULL || (unsigned)r > (unsigned)DGI_TX_PARTICIPANT ||
	    (unsigned)s >= (unsigned)DGI_TXS__COUNT ||
	    (unsigned)e >= (unsigned)DGI_TXE__COUNT)
		return DG_ERR_INVAL;
	cell c = tabs[r][s][e];
	if (c == NO)
		return DG_ERR_STATE;
	*next = (dgi_txs)(c - 1);
	return DG_OK;
}

bool dgi_txs_final(dgi_txs s)
{
	return s == DGI_TXS_COMMITTED || s == DGI_TXS_ROLLED_BACK || s == DGI_TXS_UNKNOWN;
}

bool dgi_txs_decided(dgi_txs s)
{
	return s == DGI_TXS_COMMITTING || s == DGI_TXS_COMMITTED;
}

static const char *const txs_names[DGI_TXS__COUNT] = {
	[DGI_TXS_ACTIVE] = "ACTIVE",
	[DGI_TXS_PREPARING] = "PREPARING",
	[DGI_TXS_PREPARED] = "PREPARED",
	[DGI_TXS_COMMITTING] = "COMMITTING",
	[DGI_TXS_COMMITTED] = "COMMITTED",
	[DGI_TXS_ROLLING_BACK] = "ROLLING_BACK",
	[DGI_TXS_ROLLED_BACK] = "ROLLED_BACK",
	[DGI_TXS_UNKNOWN] = "UNKNOWN",
};

static const char *const txe_names[DGI_TXE__COUNT] = {
	[DGI_TXE_OP] = "OP",
	[DGI_TXE_PREPARE] = "PREPARE",
	[DGI_TXE_PREPARED] = "PREPARED",
	[DGI_TXE_PREPARE_FAILED] = "PREPARE_FAILED",
	[DGI_TXE_COMMIT] = "COMMIT",
	[DGI_TXE_COMMITTED] = "COMMITTED",
	[DGI_TXE_ROLLBACK] = "ROLLBACK",
	[DGI_TXE_ROLLED_BACK] = "ROLLED_BACK",
	[DGI_TXE_TIMEOUT] = "TIMEOUT",
	[DGI_TXE_NODE_LEFT] = "NODE_LEFT",
	[DGI_TXE_RECOVERED_COMMIT] = "RECOVERED_COMMIT",
	[DGI_TXE_RECOVERED_ROLLBACK] = "RECOVERED_ROLLBACK",
};

const char *dgi_txs_name(dgi_txs s)
{
	if ((unsigned)s >= (unsigned)DGI_TXS__COUNT || txs_names[s] == NULL)
		return "?";
	return txs_names[s];
}

const char *dgi_txe_name(dgi_txe e)
{
	if ((unsigned)e >= (unsigned)DGI_TXE__COUNT || txe_names[e] == NULL)
		return "?";
	return txe_names[e];
}
