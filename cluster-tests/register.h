/* register.h — the register workload of cacheclient (register.c): Jepsen's
 * read / write / compare-and-set registers, one per key, whose history a
 * linearizability checker (dglinz) judges.
 *
 *   register-run       T threads for S seconds over keys <prefix>0 ..
 *                      <prefix><K-1>; each op on a random key: a read
 *                      (dg_cache_get), a write of a value no other op
 *                      writes (dg_cache_put), or a compare-and-set
 *                      (dg_cache_replace_if_equals) from the value this
 *                      thread last read or wrote for the key to a new
 *                      unique value
 *   register-read-all  one read of every key (retried until it succeeds
 *                      or the duration passes), e.g. after a restart of
 *                      the whole cluster: every acknowledged write must be
 *                      back
 *
 * The history (--history PATH, appended to, one line per event, each line
 * one write(2) so that a crash loses no finished line):
 *
 *   <t> <proc> <phase> <key> <op> [args...]
 *
 *   t      CLOCK_MONOTONIC in ns (the clients of one machine share it; the
 *          checker merges the files of several clients)
 *   proc   <client-id>-<thread>
 *   phase  invoke (written before the call), ok, fail (the call returned an
 *          error that means "not applied"), info (outcome unknown),
 *          written after the call returned
 *   op     read      invoke: no argument; ok: the value, or nil when the
 *                    key is absent (DG_ERR_NOT_FOUND)
 *          write V   the same argument on the invoke and the completion
 *          cas E N   expected E, new N; an ok completion adds true or
 *                    false: whether it replaced
 *
 * Outcomes, by the project's rule (DESIGN.md: an error means "not
 * applied" unless it is one of the outcome-unknown errors): DG_OK is ok;
 * a write or cas returning DG_ERR_TIMEOUT, DG_ERR_TX_UNKNOWN or
 * DG_ERR_CONN_BROKEN is info; any other error is fail; a read's error is
 * always fail.  A value read that is not of the form the workload writes
 * ([A-Za-z0-9_.-], 1..64 bytes) is written as x:<hex of its first 32 bytes>
 * — a value nobody wrote, which the checker rejects.
 *
 * stdout: a start line, PROGRESS lines every 5 s, STUCK lines for an op
 * running past its bound, and a summary line (per-error counts).  Exit
 * status: 0 when the workload ran (linearizability is the checker's
 * verdict, not this program's), 1 when it could not (the history could
 * not be written, a thread could not start, or an op hung past the end:
 * then it exits at once without leaving the cluster).
 */
#ifndef DG_CLUSTER_TESTS_REGISTER_H
#define DG_CLUSTER_TESTS_REGISTER_H

#include "datagrid.h"

#define REG_MAX_KEYS 10000
#define REG_PREFIX_MAX 32

struct reg_opts {
	dg_node *node;
	dg_cache *cache;
	const char *cache_name;     /* printed */
	unsigned threads;           /* register-run */
	uint64_t duration_s;        /* register-run: how long; read-all: retry bound */
	unsigned keys;              /* <prefix>0 .. <prefix><keys-1> */
	const char *key_prefix;     /* [A-Za-z0-9_]{1,REG_PREFIX_MAX} */
	const char *client_id;      /* [A-Za-z0-9_]{1,16} */
	const char *history;        /* appended to (required) */
	unsigned mix_read, mix_write, mix_cas; /* relative weights */
	uint32_t pause_us;          /* after each op: a pause uniform in 0..pause_us */
	uint64_t rand_seed;
	uint32_t op_bound_ms;       /* an op longer than this is STUCK (the
	                               node's request timeout plus slack) */
	uint64_t break_every;       /* testing the checker: 0, or every K-th
	                               write of a thread is logged ok without
	                               being made */
};

int register_run(const struct reg_opts *o);
int register_read_all(const struct reg_opts *o);

#endif
