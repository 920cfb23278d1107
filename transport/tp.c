/* tp.c — the transport object: configuration and start/stop, the peer
 * table, sending, request/response with timeouts, dispatch to handlers,
 * per-type counters, and the service thread. */
#define _GNU_SOURCE /* CLOCK_MONOTONIC_COARSE */
#include "transport_int.h"

#include <nng/supplemental/tls/tls.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <sched.h>
#include <semaphore.h>
#include <unistd.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* ---- small things ---- */

uint64_t dgi_coarse_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* A caller waiting (transport.h).  One spinner per two CPUs at most: on
 * a loaded node the waiters sleep, and the threads that would answer them
 * (the reactor, the handlers) keep the CPUs. */
_Atomic uint32_t dgi_spin_ns = DGI_SPIN_NS;
static _Atomic int spinners;
static _Atomic int waiting;     /* callers of this process waiting */
static int spin_max;
static pthread_once_t spin_once = PTHREAD_ONCE_INIT;

static void spin_init(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	spin_max = n >= 4 ? (int)(n / 2) : 1;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

void dgi_wait_enter(void)
{
	atomic_fetch_add_explicit(&waiting, 1, memory_order_relaxed);
}

void dgi_wait_leave(void)
{
	atomic_fetch_sub_explicit(&waiting, 1, memory_order_relaxed);
}

bool dgi_waiting_any(void)
{
	return atomic_load_explicit(&waiting, memory_order_relaxed) > 0;
}

bool dgi_wait_alone(const dg_tp *tp)
{
	return tp != NULL && tp->cfg.wait_spin_us > 0 &&
	    atomic_load_explicit(&waiting, memory_order_relaxed) == 1;
}

/* Spins until done(arg) or the budget: the transport's wait_spin_us while
 * this caller is the only one waiting, else (one_hop) dgi_spin_ns. */
static bool spin(const dg_tp *tp, bool one_hop, bool (*done)(const void *), const void *arg)
{
	uint64_t alone = tp != NULL ? (uint64_t)tp->cfg.wait_spin_us * 1000 : 0;
	uint64_t hop = one_hop ? atomic_load_explicit(&dgi_spin_ns, memory_order_relaxed) : 0;
	bool by_alone = alone > 0 && atomic_load_explicit(&waiting, memory_order_relaxed) == 1;
	uint64_t budget = by_alone ? alone : hop;
	if (budget == 0)
		return false;
	pthread_once(&spin_once, spin_init);
	bool got = false;
	if (atomic_fetch_add(&spinners, 1) < spin_max) {
		struct timespec t0, t;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		for (;;) {
			for (int i = 0; i < 64; i++) {
				if (done(arg)) {
					got = true;
					goto out;
				}
				cpu_relax();
			}
			/* A long spin yields between its checks: a thread of this
			 * machine woken onto this CPU (a node's reactor, on a small
			 * machine) would otherwise wait for the spinner's time slice
			 * to end — transfer_opt_ser_1c's p99 was 1.3-2.6 ms without
			 * it, 0.35-0.38 ms with it */
			if (by_alone)
				sched_yield();
			if (by_alone && atomic_load_explicit(&waiting, memory_order_relaxed) > 1) {
				/* another caller waits now: only a one-hop spin goes on */
				by_alone = false;
				budget = hop;
			}
			clock_gettime(CLOCK_MONOTONIC, &t);
			if ((uint64_t)((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec)) >
			    budget)
				break;
		}
	}
out:
	atomic_fetch_sub(&spinners, 1);
	return got;
}

static bool sem_taken(const void *arg)
{
	return sem_trywait((sem_t *)(uintptr_t)arg) == 0;
}

static bool is_zero(const void *arg)
{
	return __atomic_load_n((const uint32_t *)arg, __ATOMIC_ACQUIRE) == 0;
}

bool dgi_spin_sem(const dg_tp *tp, sem_t *s, bool one_hop)
{
	return spin(tp, one_hop, sem_taken, s);
}

bool dgi_spin_zero(const dg_tp *tp, const uint32_t *left)
{
	return spin(tp, false, is_zero, left);
}

static void due_woken(uint32_t *due, uint32_t was)
{
	if (was == (1 | DGI_DUE_SLEEPING))
		syscall(SYS_futex, due, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

bool dgi_due_done(uint32_t *due)
{
	uint32_t was = __atomic_fetch_sub(due, 1, __ATOMIC_ACQ_REL);
	due_woken(due, was);
	return (was & ~DGI_DUE_SLEEPING) == 1;
}

bool dgi_due_done_or_keep(uint32_t *due, bool (*keep)(void *), void *arg)
{
	uint32_t v = __atomic_load_n(due, __ATOMIC_ACQUIRE);
	bool asked = false;
	for (;;) {
		/* the count at 1 is this thread's own answer: nobody else can
		 * change it but the waiter's mark */
		if (!asked && (v & ~DGI_DUE_SLEEPING) == 1) {
			asked = true;
			if (keep(arg))
				return true;
		}
		if (__atomic_compare_exchange_n(due, &v, v - 1, false, __ATOMIC_ACQ_REL,
			__ATOMIC_ACQUIRE)) {
			due_woken(due, v);
			return false;
		}
	}
}

void dgi_due_wait(const dg_tp *tp, uint32_t *due)
{
	if (dgi_spin_zero(tp, due))
		return;
	uint32_t v = __atomic_load_n(due, __ATOMIC_ACQUIRE);
	while ((v & ~DGI_DUE_SLEEPING) != 0) {
		/* the mark and the sleep: an answer between them changes the
		 * word, and the futex call then returns at once */
		if (!(v & DGI_DUE_SLEEPING) &&
		    !__atomic_compare_exchange_n(due, &v, v | DGI_DUE_SLEEPING, false,
			__ATOMIC_ACQUIRE, __ATOMIC_ACQUIRE))
			continue;
		syscall(SYS_futex, due, FUTEX_WAIT_PRIVATE, v | DGI_DUE_SLEEPING, NULL, NULL, 0);
		v = __atomic_load_n(due, __ATOMIC_ACQUIRE);
	}
	if (v != 0) /* the mark alone: nothing else writes the word at 0 */
		__atomic_store_n(due, 0, __ATOMIC_RELAXED);
}

void dgi_sem_wait_spin(const dg_tp *tp, sem_t *s, bool one_hop)
{
	dgi_wait_enter();
	if (!dgi_spin_sem(tp, s, one_hop))
		while (sem_wait(s) != 0) {
			/* EINTR: a signal handler ran */
		}
	dgi_wait_leave();
}

int dgi_spinners(void)
{
	return atomic_load(&spinners);
}

void dgi_abstime_in(struct timespec *ts, uint64_t ms)
{
	clock_gettime(CLOCK_REALTIME, ts);
	uint64_t ns = (uint64_t)ts->tv_nsec + (ms % 1000) * 1000000;
	ts->tv_sec += (time_t)(ms / 1000 + ns / 1000000000);
	ts->tv_nsec = (long)(ns % 1000000000);
}

uint64_t dgi_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static char *xstrdup(const char *s)
{
	if (s == NULL)
		return NULL;
	size_t n = strlen(s) + 1;
	char *d = dgi_alloc(n);
	if (d != NULL)
		memcpy(d, s, n);
	return d;
}

void dg_tp_config_init(dg_tp_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->listen_url = "tcp://127.0.0.1:0";
	cfg->cluster_name = "datagrid";
	cfg->recv_max = 16u << 20;
	cfg->send_queue_max = 64u << 20;
	cfg->connect_timeout_ms = 5000;
	cfg->wait_spin_us = DG_WAIT_SPIN_US_DEFAULT;
	cfg->reactor_spin_us = DG_REACTOR_SPIN_US_DEFAULT;
}

/* ---- counters ---- */

void dgi_count_hs(dg_tp *tp, dg_msg_type type, bool sent, size_t bytes)
{
	struct ctr *c = sent ? &tp->hs_tx[type] : &tp->hs_rx[type];
	atomic_fetch_add_explicit(&c->n, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&c->bytes, bytes, memory_order_relaxed);
}

void dgi_count_failure(dg_tp *tp, dg_msg_type type)
{
	atomic_fetch_add_explicit(&tp->failures[type], 1, memory_order_relaxed);
}

static uint64_t ld(const _Atomic uint64_t *v)
{
	return atomic_load_explicit((_Atomic uint64_t *)v, memory_order_relaxed);
}

static void add_ctr(dg_msg_counters *out, const struct ctr *tx, const struct ctr *rx)
{
	if (tx != NULL) {
		out->sent += ld(&tx->n);
		out->bytes_sent += ld(&tx->bytes);
	}
	if (rx != NULL) {
		out->recv += ld(&rx->n);
		out->bytes_recv += ld(&rx->bytes);
	}
}

/* Sum the counters of every type: per peer (p != NULL: that peer only) or
 * for the whole node, into out[DG_MSG__COUNT]. */
static void sum_counters(const dg_tp *tp, const struct peer *only,
    dg_msg_counters *out)
{
	memset(out, 0, sizeof(out[0]) * DG_MSG__COUNT);
	struct peer_table *t = atomic_load_explicit(&((dg_tp *)tp)->peers,
	    memory_order_acquire);
	for (uint32_t i = 0; t != NULL && i <= t->mask; i++) {
		if (atomic_load_explicit(&t->slot[i].key, memory_order_acquire) == 0)
			continue;
		const struct peer *p = t->slot[i].p;
		if (only != NULL && p != only)
			continue;
		for (int k = 0; k < DG_MSG__COUNT; k++)
			add_ctr(&out[k], &p->tx[k], &p->rx_old[k]);
	}
	pthread_mutex_lock((pthread_mutex_t *)&tp->mu);
	for (struct conn *c = tp->conns; c != NULL; c = c->next) {
		if (only != NULL) {
			/* (attach sets c->peer under c->mu; nothing holding c->mu
			 * takes tp->mu) */
			pthread_mutex_lock(&c->mu);
			bool mine = c->peer == only;
			pthread_mutex_unlock(&c->mu);
			if (!mine)
				continue;
		}
		for (int k = 0; k < DG_MSG__COUNT; k++)
			add_ctr(&out[k], NULL, &c->rxc[k]);
	}
	pthread_mutex_unlock((pthread_mutex_t *)&tp->mu);
	if (only == NULL)
		for (int k = 0; k < DG_MSG__COUNT; k++) {
			add_ctr(&out[k], &tp->hs_tx[k], &tp->hs_rx[k]);
			out[k].failures = ld(&tp->failures[k]);
		}
}

size_t dg_tp_metrics(const dg_tp *tp, dg_msg_metric *out, size_t cap)
{
	dg_msg_counters sums[DG_MSG__COUNT];
	size_t n = 0;
	sum_counters(tp, NULL, sums);
	for (unsigned t = 0; t < DG_MSG__COUNT; t++) {
		const dg_msg_row *row = dg_msg_row_of((dg_msg_type)t);
		if (row == NULL && t != DG_MSG_UNKNOWN)
			continue;
		if (n < cap) {
			out[n].name = dg_msg_name((dg_msg_type)t);
			out[n].type = (dg_msg_type)t;
			out[n].c = sums[t];
		}
		n++;
	}
	return n;
}

static void totals(const struct tp_totals *t, const dg_msg_counters *sums,
    dg_tp_stats *out)
{
	struct tp_totals *m = (struct tp_totals *)t;
	memset(out, 0, sizeof(*out));
	for (int k = 0; k < DG_MSG__COUNT; k++) {
		out->frames_sent += sums[k].sent;
		out->frames_recv += sums[k].recv;
		out->bytes_sent += sums[k].bytes_sent;
		out->bytes_recv += sums[k].bytes_recv;
	}
	out->connects = atomic_load(&m->connects);
	out->disconnects = atomic_load(&m->disconnects);
	out->auth_failures = atomic_load(&m->auth_failures);
	out->handshake_failures = atomic_load(&m->handshake_failures);
	out->malformed_frames = atomic_load(&m->malformed_frames);
	out->dropped = atomic_load(&m->dropped);
	out->busy = atomic_load(&m->busy);
}

void dg_tp_get_stats(const dg_tp *tp, dg_tp_stats *out)
{
	dg_msg_counters sums[DG_MSG__COUNT];
	sum_counters(tp, NULL, sums);
	totals(&tp->t, sums, out);
}

/* ---- the peer table: int-keyed, copy-on-write, lock-free lookup ---- */

static struct peer *table_find(struct peer_table *t, dg_node_id id)
{
	uint32_t i = (uint32_t)((id * 0x9E3779B97F4A7C15ull) >> 32) & t->mask;
	for (;;) {
		dg_node_id k = atomic_load_explicit(&t->slot[i].key, memory_order_acquire);
		if (k == id)
			return t->slot[i].p;
		if (k == 0)
			return NULL;
		i = (i + 1) & t->mask;
	}
}

static void table_put(struct peer_table *t, struct peer *p)
{
	uint32_t i = (uint32_t)((p->id * 0x9E3779B97F4A7C15ull) >> 32) & t->mask;
	while (atomic_load_explicit(&t->slot[i].key, memory_order_relaxed) != 0)
		i = (i + 1) & t->mask;
	t->slot[i].p = p;
	atomic_store_explicit(&t->slot[i].key, p->id, memory_order_release);
	t->count++;
}

static struct peer_table *table_new(uint32_t cap)
{
	struct peer_table *t = dgi_calloc(1, sizeof(*t) + cap * sizeof(t->slot[0]));
	if (t != NULL)
		t->mask = cap - 1;
	return t;
}

struct peer *dgi_peer_get(dg_tp *tp, dg_node_id id, bool create)
{
	if (id == 0)
		return NULL;
	struct peer_table *t = atomic_load_explicit(&tp->peers, memory_order_acquire);
	struct peer *p = table_find(t, id);
	if (p != NULL || !create)
		return p;
	pthread_mutex_lock(&tp->mu);
	t = atomic_load_explicit(&tp->peers, memory_order_relaxed);
	if ((p = table_find(t, id)) != NULL)
		goto out;
	if ((t->count + 1) * 2 > t->mask + 1) {
		struct peer_table *nt = table_new((t->mask + 1) * 2);
		void **r = dgi_realloc(tp->retired, (tp->nretired + 1) * sizeof(void *));
		if (nt == NULL || r == NULL) {
			dgi_free(nt);
			if (r != NULL)
				tp->retired = r;
			goto out;
		}
		tp->retired = r;
		for (uint32_t i = 0; i <= t->mask; i++)
			if (t->slot[i].key != 0)
				table_put(nt, t->slot[i].p);
		tp->retired[tp->nretired++] = t; /* readers may still hold it */
		atomic_store_explicit(&tp->peers, nt, memory_order_release);
		t = nt;
	}
	if ((p = dgi_calloc(1, sizeof(*p))) == NULL)
		goto out;
	p->id = id;
	pthread_mutex_init(&p->mu, NULL);
	dg_buf_init(&p->queue);
	table_put(t, p);
out:
	pthread_mutex_unlock(&tp->mu);
	return p;
}

dg_err dg_tp_peer_stats(const dg_tp *tp, dg_node_id peer, dg_tp_stats *out)
{
	struct peer *p = dgi_peer_get((dg_tp *)tp, peer, false);
	if (p == NULL)
		return DG_ERR_UNREACHABLE;
	dg_msg_counters sums[DG_MSG__COUNT];
	sum_counters(tp, p, sums);
	totals(&p->t, sums, out);
	return DG_OK;
}

dg_err dg_tp_set_address(dg_tp *tp, dg_node_id peer, const char *url)
{
	struct peer *p = dgi_peer_get(tp, peer, true);
	if (p == NULL)
		return DG_ERR_NOMEM;
	/* Another node at this node's own address: the one it replaced (a
	 * restart on the same address, before the others dropped the dead
	 * node).  It is not there: no address, so sends to it fail at once
	 * (DG_ERR_UNREACHABLE) instead of dialling this node, which refuses
	 * its own id, as fast as frames for it come. */
	const char *me = atomic_load(&tp->address); /* NULL: still starting */
	bool self = peer != tp->self && url != NULL && me != NULL && strcmp(url, me) == 0;
	char *u = self ? NULL : xstrdup(url);
	if (u == NULL && !self)
		return DG_ERR_NOMEM;
	pthread_mutex_lock(&p->mu);
	char *old = p->url;
	p->url = u;
	pthread_mutex_unlock(&p->mu);
	dgi_free(old);
	return DG_OK;
}

/* ---- frames out ---- */

dg_err dgi_frame_encode(dg_buf *b, const dg_tp *tp, dg_msg_type type,
    uint8_t flags, uint64_t corr, const void *body)
{
	size_t at = b->len;
	dg_err e = dg_buf_reserve(b, DG_FRAME_HEADER);
	if (e != DG_OK)
		return e;
	b->len += DG_FRAME_HEADER;
	if (flags & DG_FRAME_ERROR) {
		dg_writer w;
		dg_writer_init(&w, tp->reg, b);
		e = dg_write_i32(&w, *(const int32_t *)body);
	} else if (dg_msg_row_of(type) != NULL && dg_msg_row_of(type)->body_size > 0) {
		dg_writer w;
		dg_writer_init(&w, tp->reg, b);
		e = dg_msg_encode(type, body, &w);
	} else if (dg_msg_row_of(type) == NULL) {
		e = DG_ERR_INVAL;
	}
	size_t body_len = b->len - at - DG_FRAME_HEADER;
	if (e == DG_OK && body_len > tp->cfg.recv_max)
		e = DG_ERR_LIMIT; /* the peer would refuse it */
	if (e != DG_OK) {
		b->len = at;
		return e;
	}
	dg_frame_header h = { DG_FRAME_VERSION, flags, (uint16_t)type,
		(uint32_t)body_len, corr, tp->self };
	dgi_frame_put(b->data + at, &h);
	return DG_OK;
}

/* A dial of p failed, or could not start (the transport is stopping):
 * what was queued for p goes nowhere (counted dropped) and p's requests
 * fail with why. */
uint64_t dgi_peer_drop_queue(struct peer *p)
{
	uint64_t n = p->queued_frames;
	dg_buf_reset(&p->queue);
	p->queued_frames = 0;
	return n;
}

void dgi_count_dropped(dg_tp *tp, struct peer *p, uint64_t n)
{
	if (n) {
		atomic_fetch_add(&tp->t.dropped, n);
		atomic_fetch_add(&p->t.dropped, n);
	}
}

void dgi_dial_failed(dg_tp *tp, struct peer *p, dg_err why)
{
	uint64_t dropped = 0;
	uint64_t now = dgi_now_ms();
	pthread_mutex_lock(&p->mu);
	p->dialing = false;
	p->redial_backoff = dgi_backoff_next(p->redial_backoff);
	p->redial_ms = now + dgi_backoff_wait(p->redial_backoff, now ^ p->id);
	if (p->conn == NULL)
		dropped = dgi_peer_drop_queue(p);
	pthread_mutex_unlock(&p->mu);
	dgi_count_dropped(tp, p, dropped);
	dgi_fail_peer(tp, p->id, why);
}

/* Queue a frame for a peer (dialing it when needed).  The dial is decided
 * and prepared under peer->mu and started after it is released: starting
 * takes tp->mu, which comes before peer->mu (transport_int.h). */
static dg_err enqueue(dg_tp *tp, dg_node_id to, dg_msg_type type, uint8_t flags,
    uint64_t corr, const void *body)
{
	if (atomic_load(&tp->stopping))
		return DG_ERR_CLOSED;
	if (to == tp->self)
		return DG_ERR_INVAL;
	struct peer *p = dgi_peer_get(tp, to, false);
	if (p == NULL)
		return DG_ERR_UNREACHABLE;
	pthread_mutex_lock(&p->mu);
	if (p->queue.len > tp->cfg.send_queue_max) {
		pthread_mutex_unlock(&p->mu);
		atomic_fetch_add(&tp->t.busy, 1);
		atomic_fetch_add(&p->t.busy, 1);
		return DG_ERR_BUSY;
	}
	dg_err e = DG_OK;
	struct dial *dial = NULL;
	if (p->conn == NULL && !p->dialing) {
		if (p->url == NULL || (p->redial_ms != 0 && dgi_now_ms() < p->redial_ms)) {
			pthread_mutex_unlock(&p->mu);
			return DG_ERR_UNREACHABLE;
		}
		if ((dial = dgi_conn_dial_new(tp, p->url, p, NULL, &e)) == NULL) {
			pthread_mutex_unlock(&p->mu);
			return e;
		}
		p->dialing = true;
	}
	size_t before = p->queue.len;
	struct conn *go = NULL;
	e = dgi_frame_encode(&p->queue, tp, type, flags, corr, body);
	if (e == DG_OK) {
		p->queued_frames++;
		dgi_count_tx(p, type, p->queue.len - before);
		struct dgi_cork *ck = dgi_cork;
		if (ck != NULL && p->conn != NULL && (p->corked || ck->n < DGI_CORK_MAX)) {
			if (!p->corked) { /* written at the end of the reactor's round */
				p->corked = true;
				ck->p[ck->n++] = p;
			}
		} else {
			go = dgi_conn_kick(p);
		}
	}
	pthread_mutex_unlock(&p->mu);
	if (dial != NULL) {
		dg_err de = dgi_conn_dial_start(dial); /* no connection: go is NULL */
		if (de != DG_OK) {
			dgi_dial_failed(tp, p, de);
			return de;
		}
	}
	dgi_conn_start(go); /* the write starts outside the locks */
	return e;
}

_Thread_local struct dgi_cork *dgi_cork;
static _Thread_local struct dgi_cork tl_cork; /* a caller's (dg_tp_cork_begin) */

bool dg_tp_cork_begin(void)
{
	if (dgi_cork != NULL)
		return false;
	tl_cork.n = 0;
	dgi_cork = &tl_cork;
	return true;
}

void dg_tp_cork_end(bool began)
{
	if (!began)
		return;
	dgi_cork = NULL;
	dgi_cork_flush(&tl_cork);
}

bool dg_tp_at_round_end(void (*fn)(void *ctx), void *ctx)
{
	struct dgi_cork *ck = dgi_cork;
	if (ck == NULL || !ck->round || ck->nend == DGI_ROUND_END_MAX)
		return false;
	/* still "in a handler" until fn ran: a module that unsets its handlers
	 * and quiesces may free ctx only after that (dgi_round_end) */
	atomic_fetch_add(&ck->tp->in_handler, 1);
	ck->end_fn[ck->nend] = fn;
	ck->end_ctx[ck->nend++] = ctx;
	return true;
}

void dgi_round_end(struct dgi_cork *ck)
{
	/* (a callback may ask for another: it runs in this loop too) */
	for (int i = 0; i < ck->nend; i++) {
		ck->end_fn[i](ck->end_ctx[i]);
		atomic_fetch_sub(&ck->tp->in_handler, 1);
	}
	ck->nend = 0;
}

void dgi_cork_flush(struct dgi_cork *ck)
{
	for (int i = 0; i < ck->n; i++) {
		struct peer *p = ck->p[i];
		pthread_mutex_lock(&p->mu);
		p->corked = false;
		struct conn *go = dgi_conn_kick(p);
		pthread_mutex_unlock(&p->mu);
		dgi_conn_start(go);
	}
	ck->n = 0;
}

dg_err dg_tp_send(dg_tp *tp, dg_node_id to, dg_msg_type type, const void *body)
{
	return enqueue(tp, to, type, DG_FRAME_ONEWAY, 0, body);
}

/* ---- pending requests: striped int-keyed tables ---- */

static struct stripe *stripe_of(dg_tp *tp, uint64_t corr)
{
	return &tp->stripes[corr % PEND_STRIPES];
}

static dg_err pend_put(struct stripe *s, const struct pending *in)
{
	if ((s->count + s->tombs + 1) * 2 > s->mask + 1) {
		/* rebuilt: into a table twice as large when it fills, else (only
		 * tombstones to clear) into the spare of the same size — many
		 * requests in flight left tombstones enough to rebuild every few
		 * hundred requests, and each rebuild allocated (dgbench txn at
		 * 128 clients: ~0.1 allocation per tx on the client node) */
		uint32_t cap = s->mask + 1;
		bool grow = (s->count + 1) * 2 > cap / 2;
		struct pending *n, *spare = NULL;
		if (grow) {
			cap *= 2;
			n = dgi_calloc(cap, sizeof(*n));
			spare = n != NULL ? dgi_calloc(cap, sizeof(*spare)) : NULL;
			if (spare == NULL) {
				dgi_free(n);
				return DG_ERR_NOMEM;
			}
		} else {
			n = s->spare;
			memset(n, 0, cap * sizeof(*n));
		}
		for (uint32_t i = 0; i <= s->mask; i++) {
			if (s->slots[i].corr > 1) { /* live: not empty, not a tombstone */
				uint32_t j = (uint32_t)(s->slots[i].corr / PEND_STRIPES) & (cap - 1);
				while (n[j].corr != 0)
					j = (j + 1) & (cap - 1);
				n[j] = s->slots[i];
			}
		}
		if (grow) {
			dgi_free(s->slots);
			dgi_free(s->spare);
			s->spare = spare;
		} else {
			s->spare = s->slots;
		}
		s->slots = n;
		s->mask = cap - 1;
		s->tombs = 0;
	}
	uint32_t j = (uint32_t)(in->corr / PEND_STRIPES) & s->mask;
	while (s->slots[j].corr > 1)
		j = (j + 1) & s->mask;
	if (s->slots[j].corr == 1)
		s->tombs--;
	s->slots[j] = *in;
	s->count++;
	return DG_OK;
}

/* Empty slot j.  A tombstone is needed only while a probe sequence goes on
 * past j: when the next slot is empty, j and the tombstones right before it
 * become empty.  Otherwise every request left a tombstone and pend_put
 * rebuilt (allocated) the stripe every few requests. */
static void pend_remove(struct stripe *s, uint32_t j)
{
	s->count--;
	if (s->slots[(j + 1) & s->mask].corr != 0) {
		s->slots[j].corr = 1; /* tombstone */
		s->tombs++;
		return;
	}
	s->slots[j].corr = 0;
	for (uint32_t k = (j - 1) & s->mask; k != j && s->slots[k].corr == 1;
	    k = (k - 1) & s->mask) {
		s->slots[k].corr = 0;
		s->tombs--;
	}
}

/* Remove corr; true (and *out) if it was pending. */
/* Takes the entry for corr — only if it was sent to `from` (0: anyone):
 * an answer from another peer must not consume someone else's request. */
static bool pend_take_from(struct stripe *s, uint64_t corr, dg_node_id from,
    struct pending *out)
{
	uint32_t j = (uint32_t)(corr / PEND_STRIPES) & s->mask;
	for (uint32_t n = 0; n <= s->mask; n++) {
		struct pending *e = &s->slots[j];
		if (e->corr == 0)
			return false;
		if (e->corr == corr) {
			if (from != 0 && e->peer != from)
				return false;
			*out = *e;
			pend_remove(s, j);
			return true;
		}
		j = (j + 1) & s->mask;
	}
	return false;
}

static bool pend_take(struct stripe *s, uint64_t corr, struct pending *out)
{
	return pend_take_from(s, corr, 0, out);
}

void dgi_complete(dg_tp *tp, const dg_msg_in *in)
{
	struct stripe *s = stripe_of(tp, in->corr);
	struct pending p;
	pthread_mutex_lock(&s->mu);
	bool found = in->corr > 1 && pend_take_from(s, in->corr, in->from, &p);
	if (found)
		atomic_fetch_add(&tp->in_callback, 1);
	pthread_mutex_unlock(&s->mu);
	if (!found)
		return; /* late (timed out) or not ours: dropped, counted as received */
	if (!(in->flags & DG_FRAME_ERROR) && p.reply != DG_MSG_UNKNOWN && in->type != p.reply) {
		dgi_count_failure(tp, in->type);
		atomic_fetch_add(&tp->t.malformed_frames, 1);
		dgi_log("warn", "REPLY-TYPE", "peer=%016llx type=%s expected=%s",
		    (unsigned long long)in->from, dg_msg_name(in->type), dg_msg_name(p.reply));
		dg_msg_in bad = *in;
		bad.body = NULL;
		bad.err = DG_ERR_BAD_TAG;
		p.cb(p.ctx, DG_ERR_BAD_TAG, &bad);
	} else {
		p.cb(p.ctx, in->err, in);
	}
	atomic_fetch_sub(&tp->in_callback, 1);
}

/* Collect and fail entries matching (callback cb, or peer, or deadline)
 * outside the lock. */
static void fail_where(dg_tp *tp, dg_reply_fn cb, dg_node_id peer, uint64_t now, dg_err err)
{
	struct pending batch[64];
	for (int k = 0; k < PEND_STRIPES; k++) {
		struct stripe *s = &tp->stripes[k];
		for (;;) {
			size_t n = 0;
			pthread_mutex_lock(&s->mu);
			for (uint32_t i = 0; i <= s->mask && n < 64; i++) {
				struct pending *e = &s->slots[i];
				if (e->corr <= 1)
					continue;
				bool hit = cb != NULL ? e->cb == cb : peer != 0 ? e->peer == peer :
				    now == UINT64_MAX || e->deadline_ms <= now;
				if (hit) {
					batch[n++] = *e;
					pend_remove(s, i); /* only slots up to i change */
				}
			}
			atomic_fetch_add(&tp->in_callback, (int)n);
			pthread_mutex_unlock(&s->mu);
			dgi_epoch_enter(); /* callbacks run inside a section */
			for (size_t i = 0; i < n; i++)
				batch[i].cb(batch[i].ctx, err, NULL);
			dgi_epoch_leave();
			atomic_fetch_sub(&tp->in_callback, (int)n);
			if (n < 64)
				break;
		}
	}
}

void dgi_fail_peer(dg_tp *tp, dg_node_id peer, dg_err err)
{
	fail_where(tp, NULL, peer, 0, err);
}

void dg_tp_cancel(dg_tp *tp, dg_reply_fn cb)
{
	if (tp == NULL || cb == NULL)
		return;
	fail_where(tp, cb, 0, 0, DG_ERR_CLOSED);
	/* and the callbacks another thread took from the table just before
	 * (a reply, a timeout) have returned */
	while (atomic_load(&tp->in_callback) > 0) {
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
	}
}

dg_err dg_tp_request(dg_tp *tp, dg_node_id to, dg_msg_type type,
    const void *body, uint32_t timeout_ms, dg_reply_fn cb, void *ctx)
{
	if (cb == NULL)
		return DG_ERR_INVAL;
	uint64_t corr;
	do
		corr = atomic_fetch_add(&tp->next_corr, 1);
	while (corr <= 1); /* 0 and 1 mark empty and removed slots */
	const dg_msg_row *row = dg_msg_row_of(type);
	struct pending p = { corr, to, row ? row->reply : DG_MSG_UNKNOWN,
		dgi_now_ms() + timeout_ms, cb, ctx };
	struct stripe *s = stripe_of(tp, corr);
	pthread_mutex_lock(&s->mu);
	dg_err e = pend_put(s, &p);
	pthread_mutex_unlock(&s->mu);
	if (e != DG_OK)
		return e;
	if ((e = enqueue(tp, to, type, 0, corr, body)) != DG_OK) {
		pthread_mutex_lock(&s->mu);
		bool mine = pend_take(s, corr, &p);
		pthread_mutex_unlock(&s->mu);
		if (!mine)
			return DG_OK; /* already failed through cb (connection broke) */
	}
	return e;
}

/* A blocking call waits on a semaphore: posting it is the callback's last
 * touch (glibc's sem_post may be followed by sem_destroy at once), and the
 * woken caller never waits for a mutex the callback still holds — a mutex
 * and condition variable cost up to 4 futex calls per round trip, this 2. */
struct call {
	sem_t done;
	dg_err err;
	dg_msg_type type;
	void *reply;
	dg_arena *arena;
	const dg_registry *reg;
};

static void call_done(void *ctx, dg_err err, const dg_msg_in *in)
{
	struct call *c = ctx;
	if (err == DG_OK && c->reply != NULL) {
		const uint8_t *raw = in->raw;
		if (c->arena != NULL && in->raw_len > 0) {
			raw = dgi_arena_copy(c->arena, in->raw, in->raw_len, 8, false);
			if (raw == NULL)
				err = DG_ERR_NOSPACE;
		}
		if (err == DG_OK)
			err = dg_msg_decode(in->type, c->reg, raw, in->raw_len, c->reply);
	}
	c->err = err;
	sem_post(&c->done);
}

dg_err dg_tp_call(dg_tp *tp, dg_node_id to, dg_msg_type type,
    const void *body, uint32_t timeout_ms, void *reply, dg_arena *arena)
{
	struct call c = { .reply = reply, .arena = arena, .reg = tp->reg, .type = type };
	if (sem_init(&c.done, 0, 0) != 0)
		return DG_ERR_NOMEM;
	dg_err e = dg_tp_request(tp, to, type, body, timeout_ms, call_done, &c);
	if (e == DG_OK) {
		/* (the one-hop spin only: the node's own background calls —
		 * deadlock probes, recovery, rebalance, membership — come here,
		 * and a "lone" one spinning 1 ms took a CPU from the reactors:
		 * transfer_*_128c ~10% slower) */
		dgi_sem_wait_spin(NULL, &c.done, true);
		e = c.err;
	}
	sem_destroy(&c.done);
	return e;
}

dg_err dg_tp_reply(dg_tp *tp, const dg_msg_in *req, dg_msg_type type,
    const void *body)
{
	if (req->flags & (DG_FRAME_ONEWAY | DG_FRAME_RESPONSE))
		return DG_OK;
	return enqueue(tp, req->from, type, DG_FRAME_RESPONSE, req->corr, body);
}

dg_err dg_tp_reply_error(dg_tp *tp, const dg_msg_in *req, dg_err err)
{
	int32_t v = (int32_t)err;
	if (req->flags & (DG_FRAME_ONEWAY | DG_FRAME_RESPONSE))
		return DG_OK;
	return enqueue(tp, req->from, req->type, DG_FRAME_RESPONSE | DG_FRAME_ERROR,
	    req->corr, &v);
}

/* ---- incoming application frames ---- */

/* The handler pair as one (struct handler): retried while a write is
 * under way (a few stores under tp->mu: the retry is rare and short). */
static dg_msg_handler handler_of(struct handler *hd, void **ctx)
{
	for (;;) {
		uint32_t s = atomic_load_explicit(&hd->seq, memory_order_acquire);
		dg_msg_handler fn = atomic_load_explicit(&hd->fn, memory_order_relaxed);
		*ctx = atomic_load_explicit(&hd->ctx, memory_order_relaxed);
		atomic_thread_fence(memory_order_acquire); /* the pair before seq again */
		if (!(s & 1) && atomic_load_explicit(&hd->seq, memory_order_relaxed) == s)
			return fn;
		sched_yield();
	}
}

static void dispatch(dg_tp *tp, struct conn *c, const dg_frame_header *h,
    const uint8_t *body);

/* Every handler and reply callback runs inside a section (transport.h). */
void dgi_dispatch(dg_tp *tp, struct conn *c, const dg_frame_header *h,
    const uint8_t *body)
{
	dgi_epoch_enter();
	dispatch(tp, c, h, body);
	dgi_epoch_leave();
}

static void dispatch(dg_tp *tp, struct conn *c, const dg_frame_header *h,
    const uint8_t *body)
{
	dg_msg_type type = (dg_msg_type)h->type;
	const dg_msg_row *row = dg_msg_row_of(type);
	_Alignas(16) uint8_t decoded[DG_MSG_BODY_MAX];
	dg_msg_in in = { type, h->flags, h->corr, h->sender, NULL, body, h->body_len,
		DG_OK };
	dg_err e = DG_OK;

	dgi_count_rx(c, type, DG_FRAME_HEADER + (size_t)h->body_len);
	if (row == NULL)
		e = DG_ERR_BAD_TAG;
	else if ((h->flags & DG_FRAME_ERROR) && !(h->flags & DG_FRAME_RESPONSE))
		e = DG_ERR_BAD_TAG; /* only a response carries an error: a request or
		                       one-way would reach its handler with no body */
	else if (h->flags & DG_FRAME_ERROR) {
		dg_reader r;
		int32_t v = 0;
		dg_reader_init(&r, tp->reg, body, h->body_len);
		e = dg_read_i32(&r, &v);
		if (e == DG_OK && (v <= 0 || v >= DG_ERR__COUNT || dg_reader_left(&r)))
			e = DG_ERR_BAD_LENGTH;
		in.err = (dg_err)v;
	} else {
		e = dg_msg_decode(type, tp->reg, body, h->body_len, decoded);
		in.body = decoded;
	}
	if (e != DG_OK) {
		dgi_count_failure(tp, row ? type : DG_MSG_UNKNOWN);
		atomic_fetch_add(&tp->t.malformed_frames, 1);
		dgi_log("warn", "FRAME-BAD", "peer=%016llx type=%s len=%u err=%s",
		    (unsigned long long)h->sender, dg_msg_name(type), h->body_len,
		    dg_strerror(e));
		dgi_conn_close(c, e);
		return;
	}
	if (h->flags & DG_FRAME_RESPONSE) {
		if (in.flags & DG_FRAME_ERROR)
			in.body = NULL;
		dgi_complete(tp, &in);
		return;
	}
	atomic_fetch_add(&tp->in_handler, 1);
	void *hctx;
	dg_msg_handler fn = handler_of(&tp->handlers[type], &hctx);
	if (fn != NULL)
		fn(tp, &in, hctx);
	else if (!(h->flags & DG_FRAME_ONEWAY))
		/* a handler removed (its service stopping) is not a type this
		 * node does not know: the sender maps again and retries */
		dg_tp_reply_error(tp, &in, atomic_load_explicit(&tp->handlers[type].seq,
		    memory_order_relaxed) != 0 ? DG_ERR_NOT_READY : DG_ERR_UNSUPPORTED);
	atomic_fetch_sub(&tp->in_handler, 1);
}

/* Publishes (fn, ctx) as one (struct handler's sequence lock). */
static void handler_set(dg_tp *tp, struct handler *hd, dg_msg_handler fn, void *ctx)
{
	pthread_mutex_lock(&tp->mu); /* one writer at a time */
	uint32_t s = atomic_load_explicit(&hd->seq, memory_order_relaxed);
	atomic_store_explicit(&hd->seq, s + 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release); /* odd before the pair changes */
	atomic_store_explicit(&hd->fn, fn, memory_order_relaxed);
	atomic_store_explicit(&hd->ctx, ctx, memory_order_relaxed);
	atomic_store_explicit(&hd->seq, s + 2, memory_order_release);
	pthread_mutex_unlock(&tp->mu);
}

dg_err dg_tp_handle(dg_tp *tp, dg_msg_type type, dg_msg_handler fn, void *ctx)
{
	if ((unsigned)type >= DG_MSG__COUNT || type <= DG_MSG_HANDSHAKE_LAST)
		return DG_ERR_INVAL;
	handler_set(tp, &tp->handlers[type], fn, ctx);
	return DG_OK;
}

void dg_tp_quiesce(dg_tp *tp)
{
	while (atomic_load(&tp->in_handler) > 0) {
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
	}
}

/* PING answers with its payload: liveness and round-trip checks. */
static void on_ping(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	(void)ctx;
	dg_tp_reply(tp, in, in->type, in->body);
}

/* ---- connect / disconnect ---- */

dg_err dg_tp_connect(dg_tp *tp, const char *url, dg_node_id *peer)
{
	struct connect_wait w = { .done = false };
	pthread_mutex_init(&w.mu, NULL);
	pthread_cond_init(&w.cv, NULL);
	/* bounded: the dial times out, and the service thread closes any
	 * connection whose handshake outlives connect_timeout_ms */
	dg_err e = atomic_load(&tp->stopping) ? DG_ERR_CLOSED :
	    dgi_conn_dial(tp, url, NULL, &w);
	if (e == DG_OK) {
		pthread_mutex_lock(&w.mu);
		while (!w.done)
			pthread_cond_wait(&w.cv, &w.mu);
		e = w.err;
		if (peer != NULL)
			*peer = w.peer;
		pthread_mutex_unlock(&w.mu);
		if (e == DG_OK && w.peer != 0) {
			struct peer *p = dgi_peer_get(tp, w.peer, true);
			bool unset = false;
			if (p != NULL) { /* (a handshake may set it meanwhile: under its lock) */
				pthread_mutex_lock(&p->mu);
				unset = p->url == NULL;
				pthread_mutex_unlock(&p->mu);
			}
			if (unset)
				dg_tp_set_address(tp, w.peer, url);
		}
	}
	pthread_cond_destroy(&w.cv);
	pthread_mutex_destroy(&w.mu);
	return e;
}

void dg_tp_disconnect(dg_tp *tp, dg_node_id peer)
{
	struct peer *p = dgi_peer_get(tp, peer, false);
	if (p == NULL)
		return;
	pthread_mutex_lock(&p->mu);
	dgi_conn_close_held(p, DG_ERR_CONN_BROKEN); /* unlocks p->mu */
}

/* ---- the service thread ---- */

static void *service(void *arg)
{
	dgi_thread_name("dg-tp-service");
	dg_tp *tp = arg;
	/* take this thread's section slot now (its one allocation), not at
	 * the first expiry scan in the middle of a node's steady state */
	dgi_epoch_enter();
	dgi_epoch_leave();
	pthread_mutex_lock(&tp->mu);
	while (!atomic_load(&tp->stopping)) {
		struct timespec ts;
		dgi_abstime_in(&ts, 20);
		pthread_cond_timedwait(&tp->service_cv, &tp->mu, &ts);
		pthread_mutex_unlock(&tp->mu);
		uint64_t now = dgi_now_ms();
		fail_where(tp, NULL, 0, now, DG_ERR_TIMEOUT);
		dgi_peers_dup_expire(tp, now);
		dgi_conn_expire(tp, now);
		dgi_conn_reap(tp);
		pthread_mutex_lock(&tp->mu);
	}
	pthread_mutex_unlock(&tp->mu);
	return NULL;
}

void dgi_peers_dup_expire(dg_tp *tp, uint64_t now)
{
	struct peer_table *t = atomic_load_explicit(&tp->peers, memory_order_acquire);
	for (uint32_t i = 0; t != NULL && i <= t->mask; i++) {
		if (atomic_load_explicit(&t->slot[i].key, memory_order_acquire) == 0)
			continue;
		struct peer *p = t->slot[i].p;
		struct dial *d = NULL;
		pthread_mutex_lock(&p->mu);
		if (p->dup_wait_ms != 0 && now >= p->dup_wait_ms && p->conn == NULL) {
			/* the peer's connection never came: dial again (started
			 * once p->mu is released: the lock order), or give the
			 * frames up as a broken connection would */
			p->dup_wait_ms = 0;
			dg_err e;
			if (p->queue.len > 0 && p->url != NULL)
				d = dgi_conn_dial_new(tp, p->url, p, NULL, &e);
			p->dialing = d != NULL;
			if (!p->dialing && p->queue.len > 0) {
				dgi_count_dropped(tp, p, dgi_peer_drop_queue(p));
				pthread_mutex_unlock(&p->mu);
				dgi_fail_peer(tp, p->id, DG_ERR_CONN_BROKEN);
				continue;
			}
		}
		pthread_mutex_unlock(&p->mu);
		if (d != NULL && dgi_conn_dial_start(d) != DG_OK)
			dgi_dial_failed(tp, p, DG_ERR_CONN_BROKEN);
	}
}

/* ---- start / stop ---- */

static dg_err tls_setup(dg_tp *tp)
{
	const dg_tp_config *cfg = &tp->cfg;
	bool tls = strncmp(tp->listen_url, "tls+", 4) == 0;
	if (!tls && cfg->tls_cert_key_file == NULL && cfg->tls_ca_file == NULL)
		return DG_OK;
	if (!tls || cfg->tls_cert_key_file == NULL || cfg->tls_ca_file == NULL) {
		dgi_log("error", "TLS-CONFIG", "why=\"tls+tcp:// needs both a cert+key file and a CA file\"");
		return DG_ERR_INVAL;
	}
	if (nng_tls_config_alloc(&tp->tls_server, NNG_TLS_MODE_SERVER) != 0 ||
	    nng_tls_config_alloc(&tp->tls_client, NNG_TLS_MODE_CLIENT) != 0)
		return DG_ERR_NOMEM;
	nng_tls_config *both[2] = { tp->tls_server, tp->tls_client };
	for (int i = 0; i < 2; i++) {
		if (nng_tls_config_cert_key_file(both[i], cfg->tls_cert_key_file, NULL) != 0 ||
		    nng_tls_config_ca_file(both[i], cfg->tls_ca_file) != 0 ||
		    nng_tls_config_auth_mode(both[i], NNG_TLS_AUTH_MODE_REQUIRED) != 0) {
			dgi_log("error", "TLS-CONFIG", "cert=%s ca=%s why=\"cannot load\"",
			    cfg->tls_cert_key_file, cfg->tls_ca_file);
			return DG_ERR_TLS;
		}
	}
	/* nodes are named by their certificates, not by host names */
	nng_tls_config_server_name(tp->tls_client, "datagrid");
	return DG_OK;
}

/* The URL others dial: the listen URL with the bound port filled in. */
static char *bound_url(dg_tp *tp)
{
	const char *u = tp->listen_url;
	const char *colon = strrchr(u, ':');
	int port = 0;
	if (colon == NULL || strcmp(colon, ":0") != 0 || strncmp(u, "ipc://", 6) == 0)
		return xstrdup(u);
	if (tp->listener == NULL)
		port = tp->listen_port; /* native tcp:// */
	else if (nng_stream_listener_get_int(tp->listener, NNG_OPT_TCP_BOUND_PORT, &port) != 0)
		return xstrdup(u);
	size_t n = (size_t)(colon - u) + 16;
	char *s = dgi_alloc(n);
	if (s != NULL)
		snprintf(s, n, "%.*s:%d", (int)(colon - u), u, port);
	return s;
}

dg_err dg_tp_start(const dg_tp_config *cfg, dg_tp **out)
{
	dg_tp *tp;
	dg_err e = DG_ERR_NOMEM;
	int rv;

	if (cfg == NULL || out == NULL || cfg->reg == NULL || cfg->listen_url == NULL ||
	    cfg->cluster_name == NULL || strlen(cfg->cluster_name) == 0 ||
	    strlen(cfg->cluster_name) > DG_CLUSTER_NAME_MAX || cfg->recv_max == 0 ||
	    cfg->recv_max > UINT32_MAX)
		return DG_ERR_INVAL;
	if ((tp = dgi_calloc(1, sizeof(*tp))) == NULL)
		return DG_ERR_NOMEM;
	tp->cfg = *cfg;
	if (tp->cfg.max_handshakes == 0)
		tp->cfg.max_handshakes = 128;
	tp->reg = cfg->reg;
	pthread_mutex_init(&tp->mu, NULL);
	pthread_cond_init(&tp->service_cv, NULL);
	for (int i = 0; i < PEND_STRIPES; i++)
		pthread_mutex_init(&tp->stripes[i].mu, NULL);
	atomic_init(&tp->next_corr, 2);
	tp->listen_url = xstrdup(cfg->listen_url);
	tp->cluster = xstrdup(cfg->cluster_name);
	if (tp->listen_url == NULL || tp->cluster == NULL)
		goto fail;
	if (cfg->secret_len > 0) {
		if (cfg->secret == NULL || (tp->secret = dgi_alloc(cfg->secret_len)) == NULL)
			goto fail;
		memcpy(tp->secret, cfg->secret, cfg->secret_len);
		tp->secret_len = cfg->secret_len;
	}
	tp->cfg.listen_url = tp->listen_url;
	tp->cfg.cluster_name = tp->cluster;
	tp->cfg.secret = tp->secret;
	tp->cfg.advertise_url = NULL;
	tp->self = cfg->node_id;
	while (tp->self == 0)
		if ((e = dgi_random(&tp->self, sizeof(tp->self))) != DG_OK)
			goto fail;
	struct peer_table *t = table_new(64);
	if (t == NULL)
		goto fail;
	atomic_init(&tp->peers, t);
	for (int i = 0; i < PEND_STRIPES; i++) {
		tp->stripes[i].slots = dgi_calloc(16, sizeof(struct pending));
		tp->stripes[i].spare = dgi_calloc(16, sizeof(struct pending));
		if (tp->stripes[i].slots == NULL || tp->stripes[i].spare == NULL)
			goto fail;
		tp->stripes[i].mask = 15;
	}
	handler_set(tp, &tp->handlers[DG_MSG_PING], on_ping, NULL);
	handler_set(tp, &tp->handlers[DG_MSG_ECHO], on_ping, NULL);
	if ((e = tls_setup(tp)) != DG_OK)
		goto fail;
	/* tcp:// is native (reactor.c); the reactor also dials tcp:// peers
	 * from nodes that listen on something else */
	bool native = dgi_tcp_url(tp->listen_url);
	if ((e = dgi_reactor_start(tp, native ? tp->listen_url : NULL)) != DG_OK)
		goto fail;
	e = DG_ERR_INVAL;
	if (native)
		goto listening;
	if ((rv = nng_stream_listener_alloc(&tp->listener, tp->listen_url)) != 0)
		goto fail;
	if (tp->tls_server != NULL &&
	    nng_stream_listener_set_ptr(tp->listener, NNG_OPT_TLS_CONFIG, tp->tls_server) != 0) {
		e = DG_ERR_TLS;
		goto fail;
	}
	if ((rv = nng_stream_listener_listen(tp->listener)) != 0) {
		e = rv == NNG_EADDRINUSE ? DG_ERR_ADDRINUSE : DG_ERR_NET;
		dgi_log("error", "LISTEN-FAIL", "url=%s err=%s", tp->listen_url, nng_strerror(rv));
		goto fail;
	}
listening:
	e = DG_ERR_NOMEM;
	char *address = cfg->advertise_url ? xstrdup(cfg->advertise_url) : bound_url(tp);
	if (address == NULL)
		goto fail;
	atomic_store(&tp->address, address);
	tp->cfg.advertise_url = address;
	if (tp->listener != NULL && (e = dgi_conn_accept_start(tp)) != DG_OK)
		goto fail;
	if (pthread_create(&tp->service, NULL, service, tp) != 0)
		goto fail;
	tp->service_started = true;
	if (tp->secret_len == 0)
		dgi_log("warn", "AUTH-OFF", "cluster=%s why=\"no cluster secret: peers are not authenticated\"",
		    tp->cluster);
	dgi_log("info", "TRANSPORT-UP", "node=%016llx url=%s address=%s tls=%s",
	    (unsigned long long)tp->self, tp->listen_url, tp->address,
	    tp->tls_server ? "on" : "off");
	*out = tp;
	return DG_OK;
fail:
	dg_tp_stop(tp);
	return e;
}

dg_node_id dg_tp_self(const dg_tp *tp) { return tp->self; }

size_t dg_tp_recv_max(const dg_tp *tp) { return tp->cfg.recv_max; }

void dgi_tp_set_stale_ms(dg_tp *tp, uint32_t ms)
{
	atomic_store(&tp->stale_ms, ms);
}

void dgi_tp_test_cut(dg_tp *tp, dg_node_id peer, bool on)
{
	struct peer *p = dgi_peer_get(tp, peer, true);
	if (p != NULL)
		atomic_store(&p->test_cut, on);
}

uint64_t dg_tp_last_heard(const dg_tp *tp, dg_node_id peer)
{
	struct peer *p = dgi_peer_get((dg_tp *)tp, peer, false);
	return p ? atomic_load_explicit(&p->heard_ms, memory_order_relaxed) : 0;
}
const char *dg_tp_address(const dg_tp *tp) { return tp->address; }

void dg_tp_stop(dg_tp *tp)
{
	if (tp == NULL)
		return;
	atomic_store(&tp->stopping, true);
	if (tp->listener != NULL)
		nng_stream_listener_close(tp->listener);
	if (tp->accept_aio != NULL)
		nng_aio_stop(tp->accept_aio);
	dgi_reactor_sync(tp); /* an accept under way ends; later ones see stopping */
	if (tp->service_started) {
		pthread_mutex_lock(&tp->mu);
		pthread_cond_signal(&tp->service_cv);
		pthread_mutex_unlock(&tp->mu);
		pthread_join(tp->service, NULL);
	}
	/* close every connection, then wait for every dial and callback */
	dgi_conn_stop_all(tp);
	fail_where(tp, NULL, 0, UINT64_MAX, DG_ERR_CLOSED);
	dgi_reactor_stop(tp);
	nng_aio_free(tp->accept_aio);
	nng_stream_listener_free(tp->listener);
	if (tp->tls_server)
		nng_tls_config_free(tp->tls_server);
	if (tp->tls_client)
		nng_tls_config_free(tp->tls_client);
	struct peer_table *t = atomic_load(&tp->peers);
	if (t != NULL) {
		for (uint32_t i = 0; i <= t->mask; i++) {
			struct peer *p = t->slot[i].p;
			if (p == NULL)
				continue;
			dg_buf_free(&p->queue);
			dgi_free(p->url);
			pthread_mutex_destroy(&p->mu);
			dgi_free(p);
		}
		dgi_free(t);
	}
	for (size_t i = 0; i < tp->nretired; i++)
		dgi_free(tp->retired[i]);
	dgi_free(tp->retired);
	for (int i = 0; i < PEND_STRIPES; i++) {
		dgi_free(tp->stripes[i].slots);
		dgi_free(tp->stripes[i].spare);
		pthread_mutex_destroy(&tp->stripes[i].mu);
	}
	dgi_free(tp->listen_url);
	dgi_free(tp->address);
	dgi_free(tp->cluster);
	if (tp->secret != NULL) {
		memset(tp->secret, 0, tp->secret_len);
		dgi_free(tp->secret);
	}
	pthread_cond_destroy(&tp->service_cv);
	pthread_mutex_destroy(&tp->mu);
	dgi_free(tp);
}
