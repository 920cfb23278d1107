/*
 * txn_test.c — the txn module's unit tests: wait-for graphs
 * (tests/txn_wfg_test.c) and, as they land, lock queues and the
 * transaction state machines.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

int dgt_wfg_tests(void);
int dgt_lockq_tests(void);
int dgt_txstate_tests(void);
int dgt_txents_tests(void);
int dgt_txsvc_tests(void);
int dgt_txdone_tests(void);

int main(void)
{
	int failed = dgt_wfg_tests();
	failed += dgt_lockq_tests();
	failed += dgt_txstate_tests();
	failed += dgt_txents_tests();
	failed += dgt_txsvc_tests();
	failed += dgt_txdone_tests();
	return failed ? 1 : 0;
}
