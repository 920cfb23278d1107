/*
 * load.h — closed-loop load from client threads for a fixed time: the
 * method of the multi-threaded cases (cache fullsync_put_*, txn transfer_*)
 * and of the cache's batch cases (put_all_100, get_all_100: one thread).
 *
 * The threads start at the first repetition and live until dgb_load_free,
 * parked between repetitions: as an application's threads do, they set up
 * their per-thread state (a reused tx, buffers) once, not per repetition.
 * In a repetition each thread calls op() back to back, first for a warm-up,
 * then for the timed window; every operation started in the window and
 * successful is timed alone (CLOCK_MONOTONIC) into the thread's own
 * histogram (hist.h: nothing allocated in the loop).  Repetitions add up:
 * ops_per_s is the operations timed over the sum of the windows, the
 * percentiles are over every repetition's operations.  An operation that
 * started in the window may end after it (it is still timed): the window
 * bounds the starts, so a repetition lasts warm-up + window + the longest
 * operation.
 *
 * Not thread-safe: one thread (the suite's) drives a load.
 */
#ifndef DGB_LOAD_H
#define DGB_LOAD_H

#include "hist.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define DGB_LOAD_MAX_THREADS 128  /* the 128-client cases (cache, txn) */

typedef enum dgb_op_res {
	DGB_OP_OK,        /* done: timed (in the window) and counted */
	DGB_OP_FAILED,    /* counted as failed; the thread goes on */
	DGB_OP_STOP,      /* failed, and this thread stops for the repetition
	                     (e.g. a connection in an unknown state) */
} dgb_op_res;

/* One operation of thread `thread` (0..nthreads-1); seq counts that
 * thread's operations across repetitions (0, 1, 2, ...). */
typedef dgb_op_res (*dgb_op_fn)(void *ctx, unsigned thread, uint64_t seq);

typedef struct dgb_load_thread {
	pthread_t th;
	struct dgb_load *l;
	unsigned t;
	uint64_t seq;                 /* next operation's */
	uint64_t warm_end, end;       /* of the current repetition, monotonic ns */
	uint64_t ops_timed, ops_ok, failed;   /* of the current repetition */
	dgb_hist h;                   /* every repetition */
} dgb_load_thread;

typedef struct dgb_load {
	dgb_op_fn op;
	void *ctx;
	unsigned nthreads;
	/* sums over the repetitions */
	int reps;
	uint64_t window_ns;
	uint64_t ops_timed;           /* successful, started in a window */
	uint64_t ops_ok;              /* successful, warm-ups included */
	uint64_t failed;              /* warm-ups included */
	/* the parked threads: a repetition starts when gen changes */
	bool started, quit;
	uint64_t gen;
	unsigned busy;                /* threads still in the repetition */
	pthread_mutex_t mu;
	pthread_cond_t go, done;
	dgb_load_thread th[DGB_LOAD_MAX_THREADS];
} dgb_load;

/* A load of nthreads (1..DGB_LOAD_MAX_THREADS) threads calling op(ctx, ...);
 * dies when out of memory.  No thread starts before the first repetition. */
dgb_load *dgb_load_new(dgb_op_fn op, void *ctx, unsigned nthreads);
/* Ends and joins the threads; frees l. */
void dgb_load_free(dgb_load *l);

/* One repetition: the threads run warm_ns, then window_ns; returns once
 * every thread is parked again.  at_window (may be NULL) is called from
 * this thread when the warm-up has passed, the threads still running (to
 * take counters over the window only). */
void dgb_load_rep(dgb_load *l, uint64_t warm_ns, uint64_t window_ns,
    void (*at_window)(void *arg), void *arg);

/* Successful operations per second of window time (0 before any). */
double dgb_load_ops_per_s(const dgb_load *l);
/* Percentile q over every timed operation, us (hist.h). */
double dgb_load_pct_us(const dgb_load *l, double q);

#endif /* DGB_LOAD_H */
