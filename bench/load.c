/* load.c — closed-loop load from client threads (load.h). */
#define _POSIX_C_SOURCE 200809L
#include "load.h"
#include "harness.h"

#include <stdlib.h>
#include <time.h>

dgb_load *dgb_load_new(dgb_op_fn op, void *ctx, unsigned nthreads)
{
	if (nthreads == 0 || nthreads > DGB_LOAD_MAX_THREADS)
		dgb_die("load: %u threads (1..%d)", nthreads, DGB_LOAD_MAX_THREADS);
	/* ~5.5 MB of histograms (43 KB per thread slot, used or not: calloc's
	 * untouched pages cost nothing): the heap, not a stack */
	dgb_load *l = calloc(1, sizeof *l);
	if (l == NULL)
		dgb_die("out of memory");
	l->op = op;
	l->ctx = ctx;
	l->nthreads = nthreads;
	pthread_mutex_init(&l->mu, NULL);
	pthread_cond_init(&l->go, NULL);
	pthread_cond_init(&l->done, NULL);
	for (unsigned t = 0; t < nthreads; t++) {
		l->th[t].l = l;
		l->th[t].t = t;
	}
	return l;
}

/* The operations of one repetition, until w->end. */
static void run(dgb_load_thread *w)
{
	dgb_load *l = w->l;
	for (;;) {
		uint64_t t0 = dgb_now_ns();
		if (t0 >= w->end)
			break;
		dgb_op_res r = l->op(l->ctx, w->t, w->seq++);
		uint64_t t1 = dgb_now_ns();
		if (r != DGB_OP_OK) {
			w->failed++;
			if (r == DGB_OP_STOP)
				break;
			continue;
		}
		w->ops_ok++;
		if (t0 >= w->warm_end) {
			w->ops_timed++;
			dgb_hist_add(&w->h, t1 - t0);
		}
	}
}

/* Parked until the next repetition (gen changes) or the end (quit). */
static void *thread_main(void *arg)
{
	dgb_load_thread *w = arg;
	dgb_load *l = w->l;
	uint64_t seen = 0;
	pthread_mutex_lock(&l->mu);
	for (;;) {
		while (l->gen == seen && !l->quit)
			pthread_cond_wait(&l->go, &l->mu);
		if (l->quit)
			break;
		seen = l->gen;
		pthread_mutex_unlock(&l->mu);
		run(w);
		pthread_mutex_lock(&l->mu);
		if (--l->busy == 0)
			pthread_cond_signal(&l->done);
	}
	pthread_mutex_unlock(&l->mu);
	return NULL;
}

void dgb_load_free(dgb_load *l)
{
	if (l->started) {
		pthread_mutex_lock(&l->mu);
		l->quit = true;
		pthread_cond_broadcast(&l->go);
		pthread_mutex_unlock(&l->mu);
		for (unsigned t = 0; t < l->nthreads; t++)
			pthread_join(l->th[t].th, NULL);
	}
	pthread_mutex_destroy(&l->mu);
	pthread_cond_destroy(&l->go);
	pthread_cond_destroy(&l->done);
	free(l);
}

static void sleep_until(uint64_t t)
{
	uint64_t now = dgb_now_ns();
	if (now >= t)
		return;
	struct timespec ts = { (time_t)((t - now) / 1000000000u),
		(long)((t - now) % 1000000000u) };
	while (nanosleep(&ts, &ts) != 0)
		;
}

void dgb_load_rep(dgb_load *l, uint64_t warm_ns, uint64_t window_ns,
    void (*at_window)(void *arg), void *arg)
{
	if (!l->started) {
		for (unsigned t = 0; t < l->nthreads; t++)
			if (pthread_create(&l->th[t].th, NULL, thread_main, &l->th[t]) != 0)
				dgb_die("pthread_create failed");
		l->started = true;
	}
	uint64_t start = dgb_now_ns();
	pthread_mutex_lock(&l->mu);
	for (unsigned t = 0; t < l->nthreads; t++) {
		dgb_load_thread *w = &l->th[t];
		w->warm_end = start + warm_ns;
		w->end = start + warm_ns + window_ns;
		w->ops_timed = w->ops_ok = w->failed = 0;
	}
	l->busy = l->nthreads;
	l->gen++;
	pthread_cond_broadcast(&l->go);
	pthread_mutex_unlock(&l->mu);
	if (at_window != NULL) {
		sleep_until(start + warm_ns);
		at_window(arg);
	}
	pthread_mutex_lock(&l->mu);
	while (l->busy > 0)
		pthread_cond_wait(&l->done, &l->mu);
	pthread_mutex_unlock(&l->mu);
	for (unsigned t = 0; t < l->nthreads; t++) {
		dgb_load_thread *w = &l->th[t];
		l->ops_timed += w->ops_timed;
		l->ops_ok += w->ops_ok;
		l->failed += w->failed;
	}
	l->window_ns += window_ns;
	l->reps++;
}

double dgb_load_ops_per_s(const dgb_load *l)
{
	return l->window_ns > 0 ? (double)l->ops_timed * 1e9 / (double)l->window_ns : 0;
}

double dgb_load_pct_us(const dgb_load *l, double q)
{
	dgb_hist *sum = calloc(1, sizeof *sum);
	if (sum == NULL)
		dgb_die("out of memory");
	for (unsigned t = 0; t < l->nthreads; t++)
		dgb_hist_merge(sum, &l->th[t].h);
	double v = dgb_hist_pct_us(sum, q);
	free(sum);
	return v;
}
