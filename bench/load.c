/* load.c — closed-loop load from client threads (load.h). */
#include "load.h"
#include "harness.h"

#include <stdlib.h>

dgb_load *dgb_load_new(dgb_op_fn op, void *ctx, unsigned nthreads)
{
	if (nthreads == 0 || nthreads > DGB_LOAD_MAX_THREADS)
		dgb_die("load: %u threads (1..%d)", nthreads, DGB_LOAD_MAX_THREADS);
	/* ~1.4 MB of histograms for 32 threads: the heap, not a stack */
	dgb_load *l = calloc(1, sizeof *l);
	if (l == NULL)
		dgb_die("out of memory");
	l->op = op;
	l->ctx = ctx;
	l->nthreads = nthreads;
	for (unsigned t = 0; t < nthreads; t++) {
		l->th[t].l = l;
		l->th[t].t = t;
	}
	return l;
}

void dgb_load_free(dgb_load *l)
{
	free(l);
}

static void *thread_main(void *arg)
{
	dgb_load_thread *w = arg;
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
	return NULL;
}

void dgb_load_rep(dgb_load *l, uint64_t warm_ns, uint64_t window_ns)
{
	uint64_t start = dgb_now_ns();
	for (unsigned t = 0; t < l->nthreads; t++) {
		dgb_load_thread *w = &l->th[t];
		w->warm_end = start + warm_ns;
		w->end = start + warm_ns + window_ns;
		w->ops_timed = w->ops_ok = w->failed = 0;
		if (pthread_create(&w->th, NULL, thread_main, w) != 0)
			dgb_die("pthread_create failed");
	}
	for (unsigned t = 0; t < l->nthreads; t++) {
		dgb_load_thread *w = &l->th[t];
		pthread_join(w->th, NULL);
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
