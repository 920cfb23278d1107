/*
 * linz.h — a linearizability checker for register histories (Jepsen /
 * Knossos style), used by dglinz (dglinz.c) and the fault harness.
 *
 * History format
 * --------------
 * Text, one event per line, fields separated by spaces or tabs:
 *
 *   <t> <proc> <phase> <key> <op> [args...]
 *
 *   t      CLOCK_MONOTONIC nanoseconds, unsigned 64-bit decimal.  Several
 *          files (one per client process on one machine) share the clock:
 *          they are merged and sorted by t.  Two events with the same t are
 *          treated as concurrent (at equal t every invoke comes before every
 *          completion, so an operation completing at t and one invoked at t
 *          overlap).
 *   proc   a token (e.g. c1-3).  A proc has at most one operation
 *          outstanding: an invoke, then exactly one completion before its
 *          next invoke.  An invoke without a completion by the end of the
 *          history counts as info.
 *   phase  invoke | ok (it happened, with its result) | fail (it definitely
 *          did not take effect) | info (unknown: it may take effect at any
 *          time after its invoke, even after the history ends, or never).
 *   key    a token.  Each key is an independent register, initially absent
 *          (nil), and is checked on its own (P-compositionality).
 *   op     read                 invoke, fail, info: no argument;
 *                               ok: the value read (nil: absent)
 *          write <v>            every phase: the value
 *          cas <exp> <new>      invoke, fail, info: the two values;
 *                               ok: a third argument, true (the register
 *                               held exp and now holds new) or false (it
 *                               did not hold exp; no effect)
 *   Values are tokens; nil means absent.  A completion must repeat its
 *   invoke's key, op and values.  Lines whose first non-blank character is
 *   '#' and blank lines are ignored.  Anything else (a missing or extra
 *   field, a number that does not fit, a control character, a line longer
 *   than LINZ_MAX_LINE bytes, a completion without an invoke, a second
 *   invoke while one is outstanding) is an error naming the file and line.
 *   Failed reads and info reads have no effect and are not checked.
 *
 * Algorithm
 * ---------
 * Per key, Wing & Gong's search as improved by Lowe ("Testing for
 * linearizability", 2017): the key's invoke and completion events sit in
 * one doubly linked list in time order.  The search repeatedly picks an
 * operation whose invoke comes before the first completion still in the
 * list (the "window": every operation that completed before it was
 * invoked is already placed), applies it to the register model, and if
 * that is legal and the configuration (set of placed operations, register
 * value) was never reached before, records it, unlinks the operation and
 * starts again from the head; when no candidate is left it undoes the
 * last choice and tries the next one.  Every ok operation placed:
 * linearizable.  Nothing left to undo: not linearizable.  The memo of
 * reached configurations is what makes this polynomial in practice; a set
 * of placed operations is stored as (1 + the highest placed index, the
 * unplaced indices below it), a handful of numbers since operations are
 * placed roughly in invoke order, with an incremental (Zobrist) hash.
 *
 * Three reductions, each exact (it changes no verdict; a randomized
 * comparison with a brute-force search checks them):
 *   - forced moves: a read or cas=false that is legal in the window
 *     leaves the value as it is, so if the configuration has any
 *     linearization it has one that places that operation first; it is
 *     placed without trying alternatives, and if that fails the
 *     configuration fails;
 *   - values nobody observes (never read by an ok read, never the expected
 *     value of a cas) behave alike, so the model maps them all to one
 *     "unseen" value (more memo hits);
 *   - info operations, which have no completion event (the search may
 *     place them at any point after their invoke, or never, so left at
 *     that they make the search exponential).  With a new value written
 *     by no other operation ("unique"):
 *       . observed by an ok read or as the expected value of an ok
 *         cas=true, it must have taken effect, before that observer
 *         completed: it becomes a required operation (a cas, one that
 *         succeeded) completing at the earliest such observer's
 *         completion;
 *       . otherwise, unless an info cas expects it, nothing placed after
 *         it can tell it happened except an ok cas=false that its value
 *         makes legal.  It is dropped as "never took effect" when no ok
 *         cas=false that could be placed after it expects a value the
 *         register can hold.  (The condition matters: w(a) ok, then an
 *         info w(b), then cas(a->c)=false is linearizable only if w(b)
 *         happened.)  Else it is a "ghost": tried only when the current
 *         value blocks an ok cas=false of the window, and only the
 *         earliest unused ghost of its class (ghosts with the same effect
 *         are interchangeable).  A configuration that used a subset of
 *         the ghosts of another (all else equal) has every option the
 *         other has, so the memo keeps, per set of non-ghost operations
 *         and value, the ghost sets explored, and skips any superset.
 *     Without uniqueness, info operations stay ordinary optional
 *     operations (correct, maybe slow).
 *
 * The memo is bounded (linz_config.max_states): a key whose search needs
 * more states gets the verdict LINZ_UNKNOWN, never "linearizable".  For a
 * key that is not linearizable the result describes the deepest point the
 * search reached: how many operations it placed, the last of them, the
 * register value there, and the operations that had to be placed next,
 * none of which the register allowed (Knossos reports the same).
 *
 * Threads: a history is read-only once linz_history_finish returned, and
 * may then be checked from several threads (one linz_check_key per key).
 * Building a history is single-threaded.  Nothing here is global except
 * the allocation failure hook (testing only).
 */
#ifndef DG_CLUSTER_TESTS_LINZ_H
#define DG_CLUSTER_TESTS_LINZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Longest accepted line, in bytes, without its newline. */
#define LINZ_MAX_LINE 4096
/* linz_op.complete_ns of an operation without a completion line. */
#define LINZ_NO_TIME UINT64_MAX
/* linz_config.max_states by default: a configuration costs about 110
 * bytes of memo, so about 220 MB at worst. */
#define LINZ_DEFAULT_MAX_STATES 2000000u
/* At most this many operations in linz_result.tail, and in .stuck. */
#define LINZ_REPORT_TAIL 10
#define LINZ_REPORT_STUCK 32

typedef enum linz_err {
	LINZ_OK = 0,
	LINZ_ERR_NOMEM,  /* out of memory */
	LINZ_ERR_IO,     /* a file could not be opened or read */
	LINZ_ERR_PARSE,  /* malformed history (the message names file:line) */
	LINZ_ERR_INVAL,  /* bad argument or call order */
	LINZ_ERR__COUNT
} linz_err;

/* Name of an error ("LINZ_ERR_PARSE: malformed history").  Static. */
const char *linz_strerror(linz_err err);

typedef enum linz_optype { LINZ_READ, LINZ_WRITE, LINZ_CAS } linz_optype;
typedef enum linz_status { LINZ_STATUS_OK, LINZ_STATUS_FAIL, LINZ_STATUS_INFO } linz_status;
typedef enum linz_verdict {
	LINZ_LINEARIZABLE,
	LINZ_NOT_LINEARIZABLE,
	LINZ_UNKNOWN            /* the search exceeded linz_config.max_states */
} linz_verdict;

/* "linearizable", "not-linearizable", "unknown".  Static. */
const char *linz_verdict_name(linz_verdict v);

/* ------------------------------------------------------------------------
 * Histories
 * ------------------------------------------------------------------------ */
typedef struct linz_history linz_history;

/* A new empty history in *out; free it with linz_history_destroy.
 * LINZ_ERR_NOMEM, LINZ_ERR_INVAL (out NULL). */
linz_err linz_history_create(linz_history **out);
void linz_history_destroy(linz_history *h);   /* NULL: nothing */

/* Parses one file (path) or one buffer (text, len bytes, named name in
 * messages) and adds its events.  Call before linz_history_finish, once
 * per file.  On an error, err (errlen bytes, may be NULL/0) receives a
 * message ("file:line: what"); the history can then only be destroyed
 * (other calls return LINZ_ERR_INVAL).  The caller keeps its strings.
 * LINZ_ERR_IO, LINZ_ERR_PARSE, LINZ_ERR_NOMEM, LINZ_ERR_INVAL (after
 * finish, NULL arguments). */
linz_err linz_history_add_file(linz_history *h, const char *path,
    char *err, size_t errlen);
linz_err linz_history_add_text(linz_history *h, const char *name,
    const char *text, size_t len, char *err, size_t errlen);

/* Merges every added event by time, pairs each invoke with its
 * completion and indexes the operations by key.  After it the history is
 * read-only.  Errors as above (LINZ_ERR_PARSE for a completion without an
 * invoke, a second invoke while one is outstanding, a completion that
 * does not repeat its invoke's key, op and values). */
linz_err linz_history_finish(linz_history *h, char *err, size_t errlen);

typedef struct linz_counts {
	uint64_t ops;       /* invokes */
	uint64_t ok, fail, info;  /* completions; info includes missing ones */
	size_t keys;
	uint64_t start_ns;  /* the first event's t (times below are relative to it) */
	uint64_t span_ns;   /* last event's t - first event's t */
} linz_counts;

/* Counts of a finished history (zeros before finish). */
void linz_history_counts(const linz_history *h, linz_counts *out);
/* Keys are numbered 0..nkeys-1 in order of first appearance. */
size_t linz_history_nkeys(const linz_history *h);
/* The key's name (owned by h), NULL when key >= nkeys. */
const char *linz_history_key(const linz_history *h, size_t key);

/* ------------------------------------------------------------------------
 * Checking
 * ------------------------------------------------------------------------ */
typedef struct linz_config {
	uint64_t max_states;   /* configurations explored (memoised) per key
	                          before the verdict is LINZ_UNKNOWN (>= 1) */
} linz_config;

/* Fills cfg with the defaults (max_states LINZ_DEFAULT_MAX_STATES). */
void linz_config_init(linz_config *cfg);

/* One operation as the history has it.  Strings are owned by the history
 * (valid until it is destroyed). */
typedef struct linz_op {
	const char *proc;
	linz_optype type;
	linz_status status;
	const char *value;      /* read: the value read; write: the value
	                           written; cas: the expected value ("nil":
	                           absent; read without ok: "nil") */
	const char *new_value;  /* cas: the new value; otherwise NULL */
	bool cas_result;        /* cas with status ok: true = it replaced */
	uint64_t invoke_ns;     /* relative to linz_counts.start_ns */
	uint64_t complete_ns;   /* relative; LINZ_NO_TIME: no completion line
	                           (or one at t = 2^64-1 with t0 = 0) */
	const char *file;       /* where the invoke is */
	uint32_t line;
} linz_op;

typedef struct linz_result {
	linz_verdict verdict;
	size_t key;
	const char *key_name;   /* owned by the history */
	uint64_t ops;           /* operations checked: ok ones (failed and
	                           info reads excluded) and kept info ones */
	uint64_t info_required; /* info ops that must have happened (observed) */
	uint64_t info_dropped;  /* info ops dropped as never taking effect */
	uint64_t info_ghost;    /* unobserved info ops kept for cas=false */
	uint64_t states;        /* configurations explored (memoised) */
	/* LINZ_NOT_LINEARIZABLE: the deepest point of the search. */
	uint64_t depth;         /* operations placed: the longest linearisable
	                           prefix found */
	const char *value;      /* the register after that prefix ("nil": absent) */
	size_t ntail;           /* the prefix's last ntail operations, in order */
	linz_op tail[LINZ_REPORT_TAIL];
	size_t nstuck_total;    /* operations that had to come next (invoked
	                           before the first pending completion; info
	                           ones excluded); none of them was legal on
	                           value */
	size_t nstuck;          /* the first nstuck of them, in invoke order */
	linz_op stuck[LINZ_REPORT_STUCK];
	bool blocking_valid;    /* a completion ended the window: blocking_op,
	                           the op that completed first, had to be
	                           placed by then */
	linz_op blocking_op;
	size_t blocking;        /* its index in stuck, SIZE_MAX when none or
	                           not among the first nstuck */
} linz_result;

/* Checks one key of a finished history; the result in *out (free it with
 * linz_result_destroy; its strings belong to h).  cfg NULL: defaults.
 * Thread-safe for distinct calls on one finished history.
 * LINZ_ERR_NOMEM, LINZ_ERR_INVAL (not finished, key out of range,
 * max_states 0). */
linz_err linz_check_key(const linz_history *h, size_t key,
    const linz_config *cfg, linz_result **out);
void linz_result_destroy(linz_result *r);   /* NULL: nothing */

/* Writes r for a human: one line with the key and verdict and, with
 * details, for a key that is not linearizable, the deepest prefix's tail,
 * the register value and the operations that could not be placed
 * (indented lines). */
void linz_result_print(const linz_result *r, bool details, FILE *f);

/* One operation as text: "c1-3 cas v1 -> v2 = true  ok  +1.000000000s ..
 * +1.000200000s  (a.hist:12)".  Writes at most cap bytes (NUL included);
 * returns what snprintf returns. */
int linz_op_format(const linz_op *op, char *buf, size_t cap);

/* Testing: make the n-th allocation of this module from now fail (1: the
 * next one); 0 disables.  Not thread-safe. */
void linz_alloc_fail_nth(uint64_t n);

#endif
