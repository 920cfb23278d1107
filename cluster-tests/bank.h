/* bank.h — the bank workload of cacheclient (bank.c): the invariant Jepsen
 * checks against Ignite, over a TRANSACTIONAL cache.
 *
 *   bank-init    acct0..acct<N-1> = B, in one transaction
 *   bank-run     threads moving money between two random accounts, each
 *                transfer also writing a record x<ID>-<thread>-<n> =
 *                "<from> <to> <amount> <from_before> <to_before>" in the
 *                same transaction, plus an auditor reading every account
 *                in one transaction
 *   bank-verify  the total is N*B, no balance is negative, every
 *                acknowledged transfer's record is there, no transfer whose
 *                commit failed is, each balance is B plus what the applied
 *                transfers moved, and each account's records chain up
 *
 * Each command prints result lines on stdout ("VIOLATION ..." for every
 * broken guarantee) and returns the process's exit status: 0 when it held,
 * 1 otherwise.  See cacheclient --help for the options.
 */
#ifndef DG_CLUSTER_TESTS_BANK_H
#define DG_CLUSTER_TESTS_BANK_H

#include "datagrid.h"

#define BANK_MAX_LOGS 16

struct bank_opts {
	dg_node *node;
	dg_cache *cache;
	unsigned accounts;          /* acct0..acct<accounts-1> */
	int64_t balance;            /* each account's initial balance */
	uint64_t duration_s;        /* bank-run: how long; bank-init, -verify: retry bound */
	unsigned threads;           /* bank-run: transfer threads; bank-verify: readers */
	dg_tx_concurrency conc;     /* bank-run */
	dg_tx_isolation iso;
	const char *mode;           /* "pess-rr" or "opt-ser" */
	uint32_t timeout_ms;        /* each transaction's timeout */
	bool ordered;               /* bank-run: read the lower account first */
	bool batch_reads;           /* bank-run: a transfer's two reads, and an
	                               audit's, in one dg_tx_get_all */
	uint32_t audit_pause_ms;    /* bank-run: the auditor's pause before each audit */
	uint32_t stall_ms;          /* bank-run: this long without a commit: a stall; 0 off */
	const char *client_id;      /* [A-Za-z0-9_], 1..16 chars */
	uint64_t rand_seed;
	/* bank-run: where to append the records' keys (NULL: nowhere) */
	const char *ok_log;         /* commits that returned DG_OK */
	const char *fail_log;       /* commits that returned an error */
	/* bank-verify: the logs of every bank-run */
	const char *ok_logs[BANK_MAX_LOGS];
	size_t nok;
	const char *fail_logs[BANK_MAX_LOGS];
	size_t nfail;
	uint64_t lose_credit_every; /* testing the checker: 0, or every K-th
	                               transfer commits without its credit */
};

int bank_init(const struct bank_opts *o);
int bank_run(const struct bank_opts *o);
int bank_verify(const struct bank_opts *o);

#endif
