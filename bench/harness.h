/*
 * harness.h — the small measurement harness shared by dgbench's suites.
 *
 * A suite describes each (case, implementation) pair as a dgb_bench: a
 * function that runs `iters` iterations of the operation, each iteration
 * doing `ops_per_iter` logical operations (1 for a round trip, 1000 for
 * "decode 1000 objects" reported per object).  dgb_run() measures it:
 *
 *   - clock: CLOCK_MONOTONIC;
 *   - warm-up and calibration: the iteration count grows (x10, then x2)
 *     until one run takes a tenth of the target, then is scaled to ~100 ms
 *     per repetition (~20 ms with --quick);
 *   - repetitions: 5 (3 with --quick), interleaved across the
 *     implementations of a case; the reported ns_per_op is the best
 *     (minimum) repetition;
 *   - allocations: counted over every timed repetition and divided by the
 *     operations done in them (see harness.c for how: the datagrid counter
 *     or the process-wide malloc counter);
 *   - liveness: each run returns a checksum of decoded fields, accumulated
 *     into a global printed on stderr at exit, so no work can be dropped.
 *
 * Then it prints one aligned table row, or with --json one JSON object per
 * line on stdout.  Everything else (notes, ratios, checksum) goes to stderr,
 * so `--json` output is JSON lines and nothing else.
 *
 * Adding a suite (transport, cache, txn, ...): write bench/<suite>_bench.c
 * with an `int dgb_<suite>_suite(const dgb_opts *)` declared below, list it
 * in the table of bench/main.c and add the file to bench/CMakeLists.txt.
 */
#ifndef DGB_HARNESS_H
#define DGB_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct dgb_opts {
	bool json;   /* JSON lines on stdout instead of a table */
	bool quick;  /* ~20 ms x 3 repetitions instead of ~100 ms x 5 */
	const char *only_case;  /* --case=NAME: run that case only (NULL: all);
	                           a shell pattern: --case='embedded_*' */
	const char *only_impl;  /* --impl=NAME: that implementation only (a
	                           pattern too) */
	const char *dgnode;     /* --dgnode PATH: the dgnode binary (cache suite) */
} dgb_opts;

/* Does the --case/--impl selection include this pair?  (fnmatch(3)) */
bool dgb_selected(const dgb_opts *o, const char *name, const char *impl);

/* Runs `iters` iterations; returns a checksum of the results (decoded
 * fields, encoded sizes) so the work stays observable.  A failure inside
 * is fatal: call dgb_die(). */
typedef uint64_t (*dgb_run_fn)(void *ctx, uint64_t iters);

/* Where allocations are counted. */
typedef enum dgb_alloc_src {
	DGB_ALLOC_HEAP,     /* process-wide malloc/calloc/realloc counter */
	DGB_ALLOC_DG,       /* datagrid's counting allocator (dgi_alloc) */
} dgb_alloc_src;

typedef struct dgb_bench {
	const char *suite;
	const char *name;          /* case */
	const char *impl;          /* "datagrid", "msgpack-c", "protobuf-c" */
	dgb_run_fn run;
	void *ctx;
	uint64_t ops_per_iter;     /* ns_per_op = time / (iters * this) */
	long long bytes;           /* encoded size; < 0: not reported */
	dgb_alloc_src alloc_src;
} dgb_bench;

typedef struct dgb_result {
	double ns_per_op;          /* best repetition */
	double allocs_per_op;      /* over all timed repetitions */
	bool has_allocs;           /* false: no counter available */
	uint64_t iters;            /* iterations per repetition */
} dgb_result;

/* Measures the n implementations of one case (n <= DGB_GROUP_MAX): each is
 * calibrated, then their repetitions are interleaved (rep 1 of each, rep 2
 * of each, ...) so that load from elsewhere skews the ratios less; prints
 * their rows/lines in order and stores the results in out[0..n). */
#define DGB_GROUP_MAX 8
void dgb_run_group(const dgb_opts *o, const dgb_bench *b, unsigned n,
    dgb_result *out);
/* One benchmark alone: dgb_run_group(o, b, 1, &result). */
dgb_result dgb_run(const dgb_opts *o, const dgb_bench *b);

/* Prints the table header of a suite (nothing with --json). */
void dgb_begin_suite(const dgb_opts *o, const char *suite);

/* A line a suite measures itself (not through dgb_run): a field < 0 is not
 * reported. */
typedef struct dgb_line {
	const char *name, *impl;
	double ns_per_op;
	double ops_per_s;
	double p50_us, p99_us;
	long long bytes;
	double allocs_per_op;
	bool has_csw;              /* ctx_switches_per_op is reported */
	double ctx_switches_per_op;
} dgb_line;
/* Prints it: a JSON object with --json, else a table row (its header once
 * per suite).  Counts it in dgb_own_lines. */
void dgb_print_line(const dgb_opts *o, const char *suite, const dgb_line *l);
extern unsigned dgb_own_lines;

/* Notes for humans: stderr, prefixed "dgbench: ". */
void dgb_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Fatal error: message on stderr, exit status 1. */
_Noreturn void dgb_die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* CLOCK_MONOTONIC in ns: the clock of every timing. */
uint64_t dgb_now_ns(void);

/* Number of (case, implementation) pairs measured so far. */
unsigned dgb_measured(void);

/* Result checksum (sum of every run's return value), for the final note. */
uint64_t dgb_checksum(void);

/* Heap counter (malloc/calloc/realloc/aligned calls that succeeded since
 * start) and whether the interposer is active in this build. */
uint64_t dgb_heap_allocs(void);
bool dgb_heap_counting(void);

/* Suites (one file each; listed in main.c). */
int dgb_marshal_suite(const dgb_opts *o);  /* marshal_bench.c */
/* The cache suite's entries-in-memory cases (issue 16: embedded_get_10k,
 * embedded_get_1m, embedded_put_10k, embedded_put_1m, memory_per_entry),
 * called by dgb_cache_suite. */
void dgb_cache_entries_cases(const dgb_opts *o);  /* embedded_bench.c */

/* Compiler barrier: the pointed-to memory is read and written here, so its
 * stores cannot be elided and its loads cannot be hoisted out of a loop. */
static inline void dgb_clobber(const void *p)
{
	__asm__ __volatile__("" : : "r"(p) : "memory");
}


/* Dies with the failing expression and its dg_err when expr is not DG_OK. */
#define DG_DO(expr)                                                        \
	do {                                                                   \
		dg_err e_ = (expr);                                                \
		if (__builtin_expect(e_ != DG_OK, 0))                              \
			dgb_die("%s:%d: %s: %s", __FILE__, __LINE__, #expr,            \
			    dg_strerror(e_));                                          \
	} while (0)

#endif /* DGB_HARNESS_H */
