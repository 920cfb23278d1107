/*
 * fut.c — futures: a caller waiting for an update's primary reply and, with
 * FULL_SYNC, every backup's acknowledgement (ops: update.c, primary.c).
 *
 * A future lives on the caller's stack and is found by id in a striped
 * table; completion posts its semaphore.  Ids carry their grid's slot in
 * the process-wide grid table (top byte), so a callback whose context is
 * only an id finds its grid even after the caller timed out and left.
 */
#include "cache_int.h"
#include "marshal/marshal_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- futures ---- */

struct fut_stripe *dgi_fut_stripe(dgi_grid *g, uint64_t id)
{
	return &g->futs[id % FUT_STRIPES];
}

void dgi_fut_init(dgi_grid *g, struct fut *f, dg_buf *old)
{
	memset(f, 0, sizeof(*f));
	f->id = atomic_fetch_add_explicit(&g->next_fut, 1, memory_order_relaxed);
	f->old = old;
	sem_init(&f->sem, 0, 0);
}

void dgi_fut_add(dgi_grid *g, struct fut *f)
{
	struct fut_stripe *s = dgi_fut_stripe(g, f->id);
	pthread_mutex_lock(&s->mu);
	f->next = s->head;
	s->head = f;
	pthread_mutex_unlock(&s->mu);
}

/* Unlinks f if still linked (stripe locked). */
void dgi_fut_unlink(struct fut_stripe *s, struct fut *f)
{
	for (struct fut **pp = &s->head; *pp != NULL; pp = &(*pp)->next)
		if (*pp == f) {
			*pp = f->next;
			return;
		}
}

struct fut *dgi_fut_find(struct fut_stripe *s, uint64_t id)
{
	for (struct fut *f = s->head; f != NULL; f = f->next)
		if (f->id == id)
			return f;
	return NULL;
}

/* Completes f if everything it waits for arrived (stripe locked). */
void dgi_fut_check(struct fut_stripe *s, struct fut *f)
{
	if (f->done)
		return;
	bool all = f->err != DG_OK;
	if (!all && f->primary_done) {
		all = true;
		for (uint32_t i = 0; i < f->nexpect; i++)
			all &= f->acked[i];
	}
	if (all) {
		f->done = true;
		dgi_fut_unlink(s, f);
		sem_post(&f->sem); /* the last touch: the owner may return now */
	}
}

void dgi_fut_ack(struct fut *f, dg_node_id from)
{
	for (uint32_t i = 0; i < f->nexpect; i++)
		if (f->expect[i] == from) {
			f->acked[i] = true;
			return;
		}
	if (!f->primary_done && f->nearly < DGI_MAX_COPIES)
		f->early[f->nearly++] = from;
}

/* The primary named its backups (stripe locked). */
void dgi_fut_expect(struct fut *f, const dg_node_id *ids, uint32_t n)
{
	f->nexpect = n;
	for (uint32_t i = 0; i < n; i++) {
		f->expect[i] = ids[i];
		f->acked[i] = false;
		for (uint32_t k = 0; k < f->nearly; k++)
			if (f->early[k] == ids[i])
				f->acked[i] = true;
	}
	f->primary_done = true;
}

/* Waits until deadline (monotonic ms); unlinks on timeout. */
dg_err dgi_fut_wait(dgi_grid *g, struct fut *f, uint64_t deadline)
{
	for (;;) {
		uint64_t now = dgi_now_ms();
		if (now >= deadline)
			break;
		struct timespec ts;
		dgi_abstime_in(&ts, deadline - now);
		if (sem_timedwait(&f->sem, &ts) == 0) {
			sem_destroy(&f->sem);
			return f->err;
		}
		if (errno != EINTR && errno != ETIMEDOUT)
			break;
	}
	struct fut_stripe *s = dgi_fut_stripe(g, f->id);
	pthread_mutex_lock(&s->mu);
	bool done = f->done;
	if (!done)
		dgi_fut_unlink(s, f);
	pthread_mutex_unlock(&s->mu);
	if (done) {
		sem_wait(&f->sem); /* posted: consume it */
		sem_destroy(&f->sem);
		return f->err;
	}
	sem_destroy(&f->sem);
	return DG_ERR_TIMEOUT;
}

void dgi_futs_forget(dgi_grid *g, const dg_topology *now)
{
	for (int i = 0; i < FUT_STRIPES; i++) {
		struct fut_stripe *s = &g->futs[i];
		pthread_mutex_lock(&s->mu);
		for (struct fut *f = s->head, *next; f != NULL; f = next) {
			next = f->next;
			for (uint32_t k = 0; k < f->nexpect; k++)
				if (dg_topology_find(now, f->expect[k]) == NULL)
					f->acked[k] = true; /* it left: nothing to wait for */
			dgi_fut_check(s, f);
		}
		pthread_mutex_unlock(&s->mu);
	}
}

/* ---- the process-wide grid table ----
 * The grid whose future an UPDATE_RES completes: the callback's context is
 * the future id alone (the caller may have timed out and gone), and a
 * future id carries its grid's slot in this table in its top byte — so a
 * process holds at most DGI_MAX_GRIDS grids (nodes) at once; one more is
 * refused at start with DG_ERR_LIMIT.  Slots are reused once a grid stops. */
static dgi_grid *_Atomic grids[DGI_MAX_GRIDS + 1];

dg_err dgi_fut_grid_register(dgi_grid *g)
{
	if (g->slot > 0)
		return DG_OK; /* (dgi_ops_register asks again) */
	for (int i = 1; i <= DGI_MAX_GRIDS; i++) {
		dgi_grid *expect = NULL;
		if (atomic_compare_exchange_strong(&grids[i], &expect, g)) {
			g->slot = i;
			atomic_store(&g->next_fut, ((uint64_t)g->slot << 56) | 1);
			return DG_OK;
		}
	}
	return DG_ERR_LIMIT;
}

void dgi_fut_grid_unregister(dgi_grid *g)
{
	if (g->slot > 0)
		atomic_store(&grids[g->slot], NULL);
	g->slot = 0;
}

dgi_grid *dgi_fut_grid(uint64_t id)
{
	return atomic_load(&grids[id >> 56]);
}
