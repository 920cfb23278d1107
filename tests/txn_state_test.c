/*
 * txn_state_test.c — unit tests of txn/txstate.c, the transaction state
 * machines of the near node and of a participant.
 *
 * What is tested, each against txstate.h's contract:
 *   - the whole table: every allowed transition of both roles is listed
 *     below (ALLOWED), independently of txstate.c, and every (role, state,
 *     event) combination is checked against it: listed → DG_OK and the
 *     listed state, anything else → DG_ERR_STATE with *next untouched.
 *     Any change to either table fails this test until the list follows;
 *   - the paths walked as event sequences: 2PC, one-phase (PESSIMISTIC
 *     and through PREPARE), rollback (with and without participants),
 *     prepare failure, the timeout before and after the decision, a node
 *     leaving before and after the decision with recovery both ways, and
 *     refused duplicates and late messages along the way;
 *   - final states refuse every event; reachability: nothing reachable
 *     from a decided state is ROLLING_BACK or ROLLED_BACK, a participant
 *     only ever reaches ACTIVE, PREPARED, COMMITTED, ROLLED_BACK, and every
 *     reachable state can still reach a final one;
 *   - dgi_txs_final, dgi_txs_decided and the names for every value, "?"
 *     (and false) out of range;
 *   - out-of-range role, state or event, or next == NULL: DG_ERR_INVAL,
 *     *next untouched, no crash.
 *
 * Entry point: dgt_txstate_tests(), called by the test runner.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "txn/txstate.h"
#include "marshal/marshal.h"

#include <stdbool.h>
#include <string.h>

int dgt_txstate_tests(void);

/* ------------------------------------------------------------------------
 * The expected table, written out transition by transition
 * ------------------------------------------------------------------------ */

#define N DGI_TX_NEAR
#define P DGI_TX_PARTICIPANT

/* Short names, test-local. */
#define ACT DGI_TXS_ACTIVE
#define PRG DGI_TXS_PREPARING
#define PRD DGI_TXS_PREPARED
#define CMG DGI_TXS_COMMITTING
#define CMD DGI_TXS_COMMITTED
#define RBG DGI_TXS_ROLLING_BACK
#define RBD DGI_TXS_ROLLED_BACK
#define UNK DGI_TXS_UNKNOWN

#define E_OP     DGI_TXE_OP
#define E_PREP   DGI_TXE_PREPARE
#define E_PRPD   DGI_TXE_PREPARED
#define E_PFAIL  DGI_TXE_PREPARE_FAILED
#define E_COMMIT DGI_TXE_COMMIT
#define E_CMTD   DGI_TXE_COMMITTED
#define E_RB     DGI_TXE_ROLLBACK
#define E_RBD    DGI_TXE_ROLLED_BACK
#define E_TOUT   DGI_TXE_TIMEOUT
#define E_LEFT   DGI_TXE_NODE_LEFT
#define E_RCMT   DGI_TXE_RECOVERED_COMMIT
#define E_RRB    DGI_TXE_RECOVERED_ROLLBACK

struct tr {
	dgi_txrole role;
	dgi_txs from;
	dgi_txe ev;
	dgi_txs to;
};

static const struct tr ALLOWED[] = {
	/* near, ACTIVE */
	{ N, ACT, E_OP,     ACT },   /* reads and writes */
	{ N, ACT, E_PREP,   PRG },   /* commit(): 2PC */
	{ N, ACT, E_COMMIT, CMG },   /* commit(): one-phase */
	{ N, ACT, E_PFAIL,  RBG },   /* PESSIMISTIC lock refused */
	{ N, ACT, E_RB,     RBG },
	{ N, ACT, E_TOUT,   RBG },
	{ N, ACT, E_LEFT,   RBG },
	{ N, ACT, E_RBD,    RBD },   /* no participant: done at once */
	/* near, PREPARING */
	{ N, PRG, E_PRPD,   PRD },
	{ N, PRG, E_PFAIL,  RBG },
	{ N, PRG, E_RB,     RBG },
	{ N, PRG, E_TOUT,   RBG },
	{ N, PRG, E_LEFT,   RBG },
	/* near, PREPARED: not yet decided */
	{ N, PRD, E_COMMIT, CMG },
	{ N, PRD, E_PFAIL,  RBG },
	{ N, PRD, E_RB,     RBG },
	{ N, PRD, E_TOUT,   RBG },
	{ N, PRD, E_LEFT,   RBG },
	/* near, COMMITTING: decided */
	{ N, CMG, E_CMTD,   CMD },
	{ N, CMG, E_RCMT,   CMD },
	{ N, CMG, E_LEFT,   CMG },   /* recovery finishes it */
	{ N, CMG, E_TOUT,   UNK },
	/* near, ROLLING_BACK */
	{ N, RBG, E_RBD,    RBD },
	{ N, RBG, E_PFAIL,  RBG },
	{ N, RBG, E_RB,     RBG },
	{ N, RBG, E_TOUT,   RBG },
	{ N, RBG, E_LEFT,   RBG },
	{ N, RBG, E_RCMT,   UNK },   /* prepares unanswered, rollback unconfirmed */
	/* participant, ACTIVE */
	{ P, ACT, E_OP,     ACT },
	{ P, ACT, E_PREP,   ACT },   /* locking and validating */
	{ P, ACT, E_PRPD,   PRD },
	{ P, ACT, E_PFAIL,  RBD },
	{ P, ACT, E_COMMIT, CMD },   /* one-phase: applied at once */
	{ P, ACT, E_RB,     RBD },
	{ P, ACT, E_TOUT,   RBD },
	{ P, ACT, E_LEFT,   RBD },   /* near left before this one prepared */
	{ P, ACT, E_RRB,    RBD },
	/* participant, PREPARED */
	{ P, PRD, E_COMMIT, CMD },
	{ P, PRD, E_CMTD,   CMD },
	{ P, PRD, E_RB,     RBD },
	{ P, PRD, E_TOUT,   PRD },   /* cannot decide alone */
	{ P, PRD, E_LEFT,   PRD },   /* waits for recovery */
	{ P, PRD, E_RCMT,   CMD },
	{ P, PRD, E_RRB,    RBD },
};

#define NALLOWED (sizeof ALLOWED / sizeof ALLOWED[0])

static const dgi_txrole ROLES[] = { DGI_TX_NEAR, DGI_TX_PARTICIPANT };

/* The listed next state of (r, s, e), or -1 when not listed. */
static int expected(dgi_txrole r, dgi_txs s, dgi_txe e)
{
	for (size_t i = 0; i < NALLOWED; i++)
		if (ALLOWED[i].role == r && ALLOWED[i].from == s && ALLOWED[i].ev == e)
			return (int)ALLOWED[i].to;
	return -1;
}

static bool is_final(dgi_txs s)
{
	return s == CMD || s == RBD || s == UNK;
}

/* ------------------------------------------------------------------------
 * The table
 * ------------------------------------------------------------------------ */

static void test_list_well_formed(void **state)
{
	(void)state;
	for (size_t i = 0; i < NALLOWED; i++) {
		const struct tr *t = &ALLOWED[i];
		assert_true(t->role == N || t->role == P);
		assert_true((unsigned)t->from < DGI_TXS__COUNT);
		assert_true((unsigned)t->ev < DGI_TXE__COUNT);
		assert_true((unsigned)t->to < DGI_TXS__COUNT);
		for (size_t j = 0; j < i; j++)   /* listed once */
			assert_false(ALLOWED[j].role == t->role && ALLOWED[j].from == t->from &&
			             ALLOWED[j].ev == t->ev);
	}
}

static void test_every_combination(void **state)
{
	(void)state;
	size_t allowed = 0;
	for (size_t ri = 0; ri < 2; ri++)
		for (int s = 0; s < DGI_TXS__COUNT; s++)
			for (int e = 0; e < DGI_TXE__COUNT; e++) {
				dgi_txrole r = ROLES[ri];
				int want = expected(r, (dgi_txs)s, (dgi_txe)e);
				dgi_txs next = (dgi_txs)0x5a5a;
				dg_err rc = dgi_txs_next(r, (dgi_txs)s, (dgi_txe)e, &next);
				if (want < 0) {
					if (rc != DG_ERR_STATE || next != (dgi_txs)0x5a5a)
						fail_msg("%s %s -%s-> should be refused (rc %d)",
						         r == N ? "near" : "participant",
						         dgi_txs_name((dgi_txs)s),
						         dgi_txe_name((dgi_txe)e), (int)rc);
				} else {
					allowed++;
					if (rc != DG_OK || (int)next != want)
						fail_msg("%s %s -%s-> should be %s (rc %d, got %s)",
						         r == N ? "near" : "participant",
						         dgi_txs_name((dgi_txs)s),
						         dgi_txe_name((dgi_txe)e),
						         dgi_txs_name((dgi_txs)want), (int)rc,
						         dgi_txs_name(next));
				}
			}
	assert_int_equal(allowed, NALLOWED);
}

/* ------------------------------------------------------------------------
 * Paths
 * ------------------------------------------------------------------------ */

/* One step: the event, whether it is accepted, the state after it. */
struct step {
	dgi_txe ev;
	bool ok;
	dgi_txs after;
};

static void walk(dgi_txrole r, const struct step *st, size_t n)
{
	dgi_txs s = DGI_TXS_ACTIVE;
	for (size_t i = 0; i < n; i++) {
		dgi_txs next = s;
		dg_err rc = dgi_txs_next(r, s, st[i].ev, &next);
		if (st[i].ok) {
			if (rc != DG_OK)
				fail_msg("step %zu: %s -%s-> refused (rc %d)", i, dgi_txs_name(s),
				         dgi_txe_name(st[i].ev), (int)rc);
			s = next;
		} else {
			if (rc != DG_ERR_STATE || next != s)
				fail_msg("step %zu: %s -%s-> accepted", i, dgi_txs_name(s),
				         dgi_txe_name(st[i].ev));
		}
		if (s != st[i].after)
			fail_msg("step %zu (%s): at %s, expected %s", i, dgi_txe_name(st[i].ev),
			         dgi_txs_name(s), dgi_txs_name(st[i].after));
	}
}

#define WALK(r, ...)                                                    \
	do {                                                            \
		const struct step steps_[] = { __VA_ARGS__ };           \
		walk((r), steps_, sizeof steps_ / sizeof steps_[0]);    \
	} while (0)

#define OK(e, s) { (e), true, (s) }
#define NO(e, s) { (e), false, (s) }

static void test_near_2pc(void **state)
{
	(void)state;
	WALK(N, OK(E_OP, ACT), OK(E_OP, ACT), OK(E_PREP, PRG), NO(E_OP, PRG),
	     NO(E_PREP, PRG), NO(E_COMMIT, PRG), OK(E_PRPD, PRD), NO(E_PRPD, PRD),
	     OK(E_COMMIT, CMG), NO(E_COMMIT, CMG), NO(E_RB, CMG), NO(E_PFAIL, CMG),
	     OK(E_CMTD, CMD), NO(E_CMTD, CMD), NO(E_COMMIT, CMD), NO(E_RB, CMD),
	     NO(E_TOUT, CMD));
}

static void test_near_one_phase(void **state)
{
	(void)state;
	/* PESSIMISTIC, single primary: COMMIT straight from ACTIVE */
	WALK(N, OK(E_OP, ACT), OK(E_COMMIT, CMG), NO(E_RB, CMG), OK(E_CMTD, CMD));
	/* no participant at all: commit is COMMIT then COMMITTED at once */
	WALK(N, OK(E_COMMIT, CMG), OK(E_CMTD, CMD));
	/* OPTIMISTIC, single primary: through PREPARE, its answer fires the rest */
	WALK(N, OK(E_OP, ACT), OK(E_PREP, PRG), OK(E_PRPD, PRD), OK(E_COMMIT, CMG),
	     OK(E_CMTD, CMD));
	/* ... or it refuses */
	WALK(N, OK(E_OP, ACT), OK(E_PREP, PRG), OK(E_PFAIL, RBG), OK(E_RBD, RBD));
}

static void test_near_rollback(void **state)
{
	(void)state;
	WALK(N, OK(E_OP, ACT), OK(E_RB, RBG), NO(E_OP, RBG), NO(E_COMMIT, RBG),
	     OK(E_RB, RBG), OK(E_RBD, RBD), NO(E_RBD, RBD), NO(E_RB, RBD),
	     NO(E_COMMIT, RBD));
	/* no participant: straight to ROLLED_BACK */
	WALK(N, OK(E_RBD, RBD), NO(E_OP, RBD));
	/* rollback() after every participant prepared, before COMMIT */
	WALK(N, OK(E_PREP, PRG), OK(E_PRPD, PRD), OK(E_RB, RBG), NO(E_PRPD, RBG),
	     OK(E_RBD, RBD));
}

static void test_near_prepare_failure(void **state)
{
	(void)state;
	/* two participants refuse, a third answers PREPARED late */
	WALK(N, OK(E_OP, ACT), OK(E_PREP, PRG), OK(E_PFAIL, RBG), OK(E_PFAIL, RBG),
	     NO(E_PRPD, RBG), NO(E_COMMIT, RBG), OK(E_RBD, RBD), NO(E_PFAIL, RBD));
	/* PESSIMISTIC deadlock victim while ACTIVE */
	WALK(N, OK(E_OP, ACT), OK(E_PFAIL, RBG), OK(E_RBD, RBD));
}

static void test_near_timeout(void **state)
{
	(void)state;
	/* before the decision: rolls back */
	WALK(N, OK(E_OP, ACT), OK(E_TOUT, RBG), OK(E_TOUT, RBG), OK(E_RBD, RBD));
	WALK(N, OK(E_PREP, PRG), OK(E_TOUT, RBG), OK(E_RBD, RBD));
	WALK(N, OK(E_PREP, PRG), OK(E_PRPD, PRD), OK(E_TOUT, RBG), OK(E_RBD, RBD));
	/* after it: UNKNOWN, and a late outcome does not change that */
	WALK(N, OK(E_PREP, PRG), OK(E_PRPD, PRD), OK(E_COMMIT, CMG), OK(E_TOUT, UNK),
	     NO(E_CMTD, UNK), NO(E_RCMT, UNK), NO(E_RB, UNK), NO(E_TOUT, UNK));
	WALK(N, OK(E_COMMIT, CMG), OK(E_TOUT, UNK));
}

static void test_near_node_left(void **state)
{
	(void)state;
	/* before the decision: rolls back, also while already rolling back */
	WALK(N, OK(E_OP, ACT), OK(E_LEFT, RBG), OK(E_LEFT, RBG), OK(E_RBD, RBD));
	WALK(N, OK(E_PREP, PRG), OK(E_LEFT, RBG), OK(E_RBD, RBD));
	WALK(N, OK(E_PREP, PRG), OK(E_PRPD, PRD), OK(E_LEFT, RBG), OK(E_RBD, RBD));
	/* after it: recovery commits */
	WALK(N, OK(E_PREP, PRG), OK(E_PRPD, PRD), OK(E_COMMIT, CMG), OK(E_LEFT, CMG),
	     OK(E_LEFT, CMG), NO(E_RB, CMG), OK(E_RCMT, CMD), NO(E_RCMT, CMD));
	/* after it: a rollback report cannot undo the decision; the timeout
	 * ends it UNKNOWN */
	WALK(N, OK(E_PREP, PRG), OK(E_PRPD, PRD), OK(E_COMMIT, CMG), OK(E_LEFT, CMG),
	     NO(E_RRB, CMG), NO(E_RBD, CMG), OK(E_TOUT, UNK));
}

static void test_part_2pc(void **state)
{
	(void)state;
	/* applies on COMMIT; a duplicate COMMIT is refused */
	WALK(P, OK(E_OP, ACT), OK(E_OP, ACT), OK(E_PREP, ACT), OK(E_PRPD, PRD),
	     NO(E_OP, PRD), NO(E_PREP, PRD), NO(E_PRPD, PRD), NO(E_PFAIL, PRD),
	     OK(E_COMMIT, CMD), NO(E_COMMIT, CMD), NO(E_CMTD, CMD), NO(E_RB, CMD));
	/* COMMITTED (applied) accepted from PREPARED too */
	WALK(P, OK(E_PREP, ACT), OK(E_PRPD, PRD), OK(E_CMTD, CMD));
	/* never enters the near node's intermediate states */
	WALK(P, OK(E_PREP, ACT), NO(E_RBD, ACT), NO(E_CMTD, ACT), NO(E_RCMT, ACT));
}

static void test_part_one_phase(void **state)
{
	(void)state;
	WALK(P, OK(E_OP, ACT), OK(E_COMMIT, CMD), NO(E_COMMIT, CMD));
	/* OPTIMISTIC one-phase: prepare, then commit, at once */
	WALK(P, OK(E_PREP, ACT), OK(E_PRPD, PRD), OK(E_COMMIT, CMD));
}

static void test_part_rollback(void **state)
{
	(void)state;
	WALK(P, OK(E_OP, ACT), OK(E_RB, RBD), NO(E_RB, RBD), NO(E_COMMIT, RBD));
	WALK(P, OK(E_PREP, ACT), OK(E_PRPD, PRD), OK(E_RB, RBD), NO(E_COMMIT, RBD));
}

static void test_part_prepare_failure(void **state)
{
	(void)state;
	WALK(P, OK(E_OP, ACT), OK(E_PREP, ACT), OK(E_PFAIL, RBD), NO(E_PFAIL, RBD),
	     NO(E_RB, RBD), NO(E_PRPD, RBD));
}

static void test_part_timeout(void **state)
{
	(void)state;
	/* before preparing: releases */
	WALK(P, OK(E_OP, ACT), OK(E_TOUT, RBD), NO(E_TOUT, RBD));
	/* prepared: waits for the near node's word */
	WALK(P, OK(E_PREP, ACT), OK(E_PRPD, PRD), OK(E_TOUT, PRD), OK(E_COMMIT, CMD));
	WALK(P, OK(E_PREP, ACT), OK(E_PRPD, PRD), OK(E_TOUT, PRD), OK(E_RB, RBD));
}

static void test_part_node_left(void **state)
{
	(void)state;
	/* the near node left before this one prepared: releases */
	WALK(P, OK(E_OP, ACT), OK(E_PREP, ACT), OK(E_LEFT, RBD), NO(E_RRB, RBD));
	/* recovery's rollback reaches a still-ACTIVE one first */
	WALK(P, OK(E_PREP, ACT), OK(E_RRB, RBD));
	/* prepared: recovery decides, both ways */
	WALK(P, OK(E_PREP, ACT), OK(E_PRPD, PRD), OK(E_LEFT, PRD), OK(E_LEFT, PRD),
	     OK(E_TOUT, PRD), OK(E_RCMT, CMD), NO(E_RCMT, CMD), NO(E_RRB, CMD));
	WALK(P, OK(E_PREP, ACT), OK(E_PRPD, PRD), OK(E_LEFT, PRD), OK(E_RRB, RBD),
	     NO(E_RCMT, RBD), NO(E_COMMIT, RBD));
}

/* ------------------------------------------------------------------------
 * Properties over the whole table
 * ------------------------------------------------------------------------ */

static void test_final_states_refuse_all(void **state)
{
	(void)state;
	for (size_t ri = 0; ri < 2; ri++)
		for (int s = 0; s < DGI_TXS__COUNT; s++) {
			if (!is_final((dgi_txs)s))
				continue;
			for (int e = 0; e < DGI_TXE__COUNT; e++) {
				dgi_txs next = (dgi_txs)s;
				assert_int_equal(dgi_txs_next(ROLES[ri], (dgi_txs)s, (dgi_txe)e, &next),
				                 DG_ERR_STATE);
				assert_int_equal(next, s);
			}
		}
}

/* Marks in reach[] every state reachable from s (s included). */
static void reach_from(dgi_txrole r, dgi_txs s, bool reach[DGI_TXS__COUNT])
{
	dgi_txs stack[DGI_TXS__COUNT];
	size_t n = 0;
	memset(reach, 0, DGI_TXS__COUNT * sizeof reach[0]);
	reach[s] = true;
	stack[n++] = s;
	while (n > 0) {
		dgi_txs cur = stack[--n];
		for (int e = 0; e < DGI_TXE__COUNT; e++) {
			dgi_txs next;
			if (dgi_txs_next(r, cur, (dgi_txe)e, &next) != DG_OK)
				continue;
			assert_true((unsigned)next < DGI_TXS__COUNT);
			if (!reach[next]) {
				reach[next] = true;
				stack[n++] = next;
			}
		}
	}
}

static void test_decided_never_rolls_back(void **state)
{
	(void)state;
	bool reach[DGI_TXS__COUNT];
	for (size_t ri = 0; ri < 2; ri++)
		for (int s = 0; s < DGI_TXS__COUNT; s++) {
			if (!dgi_txs_decided((dgi_txs)s))
				continue;
			reach_from(ROLES[ri], (dgi_txs)s, reach);
			assert_false(reach[RBD]);
			assert_false(reach[RBG]);
			for (int t = 0; t < DGI_TXS__COUNT; t++)   /* stays decided or UNKNOWN */
				if (reach[t])
					assert_true(dgi_txs_decided((dgi_txs)t) || t == UNK);
		}
}

static void test_reachability(void **state)
{
	(void)state;
	bool reach[DGI_TXS__COUNT], from[DGI_TXS__COUNT];

	/* near: every state is reachable from ACTIVE */
	reach_from(N, DGI_TXS_ACTIVE, reach);
	for (int s = 0; s < DGI_TXS__COUNT; s++)
		assert_true(reach[s]);

	/* participant: only its four states */
	reach_from(P, DGI_TXS_ACTIVE, reach);
	for (int s = 0; s < DGI_TXS__COUNT; s++)
		assert_int_equal(reach[s], s == ACT || s == PRD || s == CMD || s == RBD);

	/* no dead end: from each reachable state some final state is reachable */
	for (size_t ri = 0; ri < 2; ri++) {
		reach_from(ROLES[ri], DGI_TXS_ACTIVE, reach);
		for (int s = 0; s < DGI_TXS__COUNT; s++) {
			if (!reach[s])
				continue;
			reach_from(ROLES[ri], (dgi_txs)s, from);
			assert_true(from[CMD] || from[RBD] || from[UNK]);
		}
	}

	/* COMMITTED is reached only through a decided state (near) or
	 * PREPARED / one-phase COMMIT (participant): check near never goes to
	 * COMMITTED from an undecided state */
	for (int s = 0; s < DGI_TXS__COUNT; s++)
		for (int e = 0; e < DGI_TXE__COUNT; e++) {
			dgi_txs next;
			if (dgi_txs_next(N, (dgi_txs)s, (dgi_txe)e, &next) == DG_OK && next == CMD)
				assert_true(dgi_txs_decided((dgi_txs)s));
		}
}

/* ------------------------------------------------------------------------
 * Predicates and names
 * ------------------------------------------------------------------------ */

static void test_predicates(void **state)
{
	(void)state;
	static const struct { dgi_txs s; bool final, decided; } want[] = {
		{ DGI_TXS_ACTIVE, false, false },
		{ DGI_TXS_PREPARING, false, false },
		{ DGI_TXS_PREPARED, false, false },
		{ DGI_TXS_COMMITTING, false, true },
		{ DGI_TXS_COMMITTED, true, true },
		{ DGI_TXS_ROLLING_BACK, false, false },
		{ DGI_TXS_ROLLED_BACK, true, false },
		{ DGI_TXS_UNKNOWN, true, false },
	};
	assert_int_equal(sizeof want / sizeof want[0], DGI_TXS__COUNT);
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
		assert_int_equal(dgi_txs_final(want[i].s), want[i].final);
		assert_int_equal(dgi_txs_decided(want[i].s), want[i].decided);
	}
	assert_false(dgi_txs_final(DGI_TXS__COUNT));
	assert_false(dgi_txs_decided(DGI_TXS__COUNT));
	assert_false(dgi_txs_final((dgi_txs)-1));
	assert_false(dgi_txs_decided((dgi_txs)-1));
	assert_false(dgi_txs_final((dgi_txs)1000));
}

static void test_names(void **state)
{
	(void)state;
	static const char *const sn[] = {
		"ACTIVE", "PREPARING", "PREPARED", "COMMITTING", "COMMITTED",
		"ROLLING_BACK", "ROLLED_BACK", "UNKNOWN",
	};
	static const char *const en[] = {
		"OP", "PREPARE", "PREPARED", "PREPARE_FAILED", "COMMIT", "COMMITTED",
		"ROLLBACK", "ROLLED_BACK", "TIMEOUT", "NODE_LEFT", "RECOVERED_COMMIT",
		"RECOVERED_ROLLBACK",
	};
	assert_int_equal(sizeof sn / sizeof sn[0], DGI_TXS__COUNT);
	assert_int_equal(sizeof en / sizeof en[0], DGI_TXE__COUNT);
	for (int s = 0; s < DGI_TXS__COUNT; s++)
		assert_string_equal(dgi_txs_name((dgi_txs)s), sn[s]);
	for (int e = 0; e < DGI_TXE__COUNT; e++)
		assert_string_equal(dgi_txe_name((dgi_txe)e), en[e]);
	assert_string_equal(dgi_txs_name(DGI_TXS__COUNT), "?");
	assert_string_equal(dgi_txs_name((dgi_txs)-1), "?");
	assert_string_equal(dgi_txs_name((dgi_txs)1000), "?");
	assert_string_equal(dgi_txe_name(DGI_TXE__COUNT), "?");
	assert_string_equal(dgi_txe_name((dgi_txe)-1), "?");
	assert_string_equal(dgi_txe_name((dgi_txe)1000), "?");
}

/* ------------------------------------------------------------------------
 * Out of range
 * ------------------------------------------------------------------------ */

static void test_out_of_range(void **state)
{
	(void)state;
	const dgi_txs sentinel = (dgi_txs)0x5a5a;
	dgi_txs next = sentinel;
	static const int bad_roles[] = { 2, 3, -1, 1000 };
	static const int bad_states[] = { DGI_TXS__COUNT, DGI_TXS__COUNT + 1, -1, 1000 };
	static const int bad_events[] = { DGI_TXE__COUNT, DGI_TXE__COUNT + 1, -1, 1000 };

	for (size_t i = 0; i < 4; i++) {
		assert_int_equal(dgi_txs_next((dgi_txrole)bad_roles[i], DGI_TXS_ACTIVE, DGI_TXE_OP, &next),
		                 DG_ERR_INVAL);
		assert_int_equal(dgi_txs_next(N, (dgi_txs)bad_states[i], DGI_TXE_OP, &next),
		                 DG_ERR_INVAL);
		assert_int_equal(dgi_txs_next(P, (dgi_txs)bad_states[i], DGI_TXE_OP, &next),
		                 DG_ERR_INVAL);
		assert_int_equal(dgi_txs_next(N, DGI_TXS_ACTIVE, (dgi_txe)bad_events[i], &next),
		                 DG_ERR_INVAL);
		assert_int_equal(dgi_txs_next(P, DGI_TXS_ACTIVE, (dgi_txe)bad_events[i], &next),
		                 DG_ERR_INVAL);
		assert_int_equal(next, sentinel);
	}
	/* NULL next, even for an allowed transition */
	assert_int_equal(dgi_txs_next(N, DGI_TXS_ACTIVE, DGI_TXE_OP, NULL), DG_ERR_INVAL);
	assert_int_equal(dgi_txs_next(P, DGI_TXS_PREPARED, DGI_TXE_COMMIT, NULL), DG_ERR_INVAL);
}

/* ------------------------------------------------------------------------
 * Entry point
 * ------------------------------------------------------------------------ */

int dgt_txstate_tests(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_list_well_formed),
		cmocka_unit_test(test_every_combination),
		cmocka_unit_test(test_near_2pc),
		cmocka_unit_test(test_near_one_phase),
		cmocka_unit_test(test_near_rollback),
		cmocka_unit_test(test_near_prepare_failure),
		cmocka_unit_test(test_near_timeout),
		cmocka_unit_test(test_near_node_left),
		cmocka_unit_test(test_part_2pc),
		cmocka_unit_test(test_part_one_phase),
		cmocka_unit_test(test_part_rollback),
		cmocka_unit_test(test_part_prepare_failure),
		cmocka_unit_test(test_part_timeout),
		cmocka_unit_test(test_part_node_left),
		cmocka_unit_test(test_final_states_refuse_all),
		cmocka_unit_test(test_decided_never_rolls_back),
		cmocka_unit_test(test_reachability),
		cmocka_unit_test(test_predicates),
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_out_of_range),
	};
	return cmocka_run_group_tests_name("txstate", tests, NULL, NULL);
}
