/* connsrv.c — accept loop and connection slots of the admin and HTTP
 * endpoints (connsrv.h). */
#include "connsrv.h"
#include "transport/transport_int.h"

#include <ctype.h>
#include <nng/supplemental/util/platform.h>
#include <stdio.h>
#include <string.h>

struct dgi_srv {
	dgi_srv_config cfg;
	nng_stream_listener *l;
	nng_aio *accept_aio;
	pthread_t accept_thr;
	bool accept_started;
	_Atomic bool stopping;
	pthread_mutex_t mu;
	dgi_srv_conn *conns;      /* cfg.slots */
	struct dgi_lograte lr_accept, lr_busy, lr_evict;
	char id_accept[48], id_busy[48], id_evict[48];
	char tn_accept[16], tn_conn[16]; /* thread names: dg-admin-accept, dg-http-conn, ... */
};

static void *conn_main(void *arg)
{
	dgi_srv_conn *c = arg;
	dgi_thread_name(c->srv->tn_conn);
	c->srv->cfg.serve(c->srv->cfg.ctx, c);
	dgi_aconn_abort(&c->c);
	c->done = true;
	return NULL;
}

/* Joins and frees the finished connections (s->mu held).  all: every one,
 * at stop (every connection aborted, s->mu not held). */
static void reap(dgi_srv *s, bool all)
{
	for (unsigned i = 0; i < s->cfg.slots; i++) {
		dgi_srv_conn *c = &s->conns[i];
		if (!c->used || (!all && !c->done))
			continue;
		pthread_join(c->thr, NULL);
		dgi_aconn_close(&c->c);
		c->used = false;
	}
}

/* A free slot, closing the connection waiting longest when none is free
 * or evict_at are waiting; NULL when every slot is pinned.  s->mu held;
 * dropped and retaken while an evicted thread ends. */
static dgi_srv_conn *take_slot(dgi_srv *s)
{
	reap(s, false);
	dgi_srv_conn *free_one = NULL, *oldest = NULL;
	unsigned waiting = 0;
	for (unsigned i = 0; i < s->cfg.slots; i++) {
		dgi_srv_conn *c = &s->conns[i];
		if (!c->used) {
			if (free_one == NULL)
				free_one = c;
			continue;
		}
		if (c->pinned || c->done)
			continue;
		waiting++;
		if (oldest == NULL || c->since < oldest->since)
			oldest = c;
	}
	if ((free_one != NULL && waiting < s->cfg.evict_at) || oldest == NULL)
		return free_one;
	dgi_aconn_abort(&oldest->c);    /* its I/O fails at once */
	pthread_mutex_unlock(&s->mu);
	dgi_log_rated(&s->lr_evict, dgi_now_ms(), "warn", s->id_evict, "a connection waiting longest was closed to make "
	    "room for a new one");
	pthread_join(oldest->thr, NULL);
	pthread_mutex_lock(&s->mu);
	dgi_aconn_close(&oldest->c);
	oldest->used = false;
	return free_one != NULL ? free_one : oldest;
}

static void refuse(dgi_srv *s, nng_stream *st)
{
	if (s->cfg.refuse != NULL) {
		dgi_aconn c;
		if (dgi_aconn_init(&c, st, 1000) == DG_OK) {
			s->cfg.refuse(s->cfg.ctx, &c, s->stopping);
			dgi_aconn_close(&c);
			st = NULL;
		}
	}
	if (st != NULL) {
		nng_stream_close(st);
		nng_stream_free(st);
	}
	dgi_log_rated(&s->lr_busy, dgi_now_ms(), "warn", s->id_busy, "a connection was refused: every slot is in use");
}

static void accept_one(dgi_srv *s, nng_stream *st)
{
	pthread_mutex_lock(&s->mu);
	dgi_srv_conn *c = s->stopping ? NULL : take_slot(s);
	if (c == NULL) {
		pthread_mutex_unlock(&s->mu);
		refuse(s, st);
		return;
	}
	c->srv = s;
	c->done = false;
	c->pinned = false;
	c->since = dgi_now_ms();
	if (dgi_aconn_init(&c->c, st, s->cfg.timeout_ms) != DG_OK)
		nng_stream_free(st);
	else if (pthread_create(&c->thr, NULL, conn_main, c) != 0)
		dgi_aconn_close(&c->c);
	else
		c->used = true;
	pthread_mutex_unlock(&s->mu);
}

static void *accept_main(void *arg)
{
	dgi_srv *s = arg;
	dgi_thread_name(s->tn_accept);
	unsigned backoff = 0;
	while (!s->stopping) {
		nng_stream_listener_accept(s->l, s->accept_aio);
		nng_aio_wait(s->accept_aio);
		int rv = nng_aio_result(s->accept_aio);
		if (rv == NNG_ECLOSED || rv == NNG_ECANCELED || s->stopping)
			break;
		if (rv != 0) {
			/* out of file descriptors, most often: wait, don't spin */
			backoff = backoff == 0 ? 10 : backoff >= 500 ? 1000 : backoff * 2;
			char why[160];
			snprintf(why, sizeof(why), "accepting a connection failed (%s): retrying in "
			    "%u ms", nng_strerror(rv), backoff);
			dgi_log_rated(&s->lr_accept, dgi_now_ms(), "warn", s->id_accept, why);
			nng_msleep((nng_duration)backoff);
			continue;
		}
		backoff = 0;
		accept_one(s, nng_aio_get_output(s->accept_aio, 0));
	}
	return NULL;
}

bool dgi_srv_pin(dgi_srv_conn *c, unsigned max)
{
	dgi_srv *s = c->srv;
	pthread_mutex_lock(&s->mu);
	unsigned pinned = 0;
	for (unsigned i = 0; i < s->cfg.slots; i++)
		pinned += s->conns[i].used && s->conns[i].pinned;
	bool ok = pinned < max;
	if (ok)
		c->pinned = true;
	pthread_mutex_unlock(&s->mu);
	return ok;
}

void dgi_srv_unpin(dgi_srv_conn *c)
{
	pthread_mutex_lock(&c->srv->mu);
	c->pinned = false;
	c->since = dgi_now_ms();
	pthread_mutex_unlock(&c->srv->mu);
}

dg_err dgi_srv_start(const char *url, const dgi_srv_config *cfg, dgi_srv **out, int *nng_rv)
{
	*nng_rv = 0;
	bool tls = strncmp(url, "tls+tcp://", 10) == 0;
	if ((!tls && strncmp(url, "tcp://", 6) != 0) || (tls && cfg->tls == NULL) ||
	    cfg->slots == 0 || cfg->evict_at == 0 || cfg->evict_at > cfg->slots)
		return DG_ERR_INVAL;
	dgi_srv *s = dgi_calloc(1, sizeof(*s));
	if (s == NULL)
		return DG_ERR_NOMEM;
	s->cfg = *cfg;
	pthread_mutex_init(&s->mu, NULL);
	snprintf(s->id_accept, sizeof(s->id_accept), "%s-ACCEPT-FAIL", cfg->name);
	snprintf(s->id_busy, sizeof(s->id_busy), "%s-BUSY", cfg->name);
	snprintf(s->id_evict, sizeof(s->id_evict), "%s-EVICTED", cfg->name);
	/* "ADMIN" -> "admin": "dg-admin-accept" is 15 characters, the most a
	 * thread name holds */
	char lower[6];
	snprintf(lower, sizeof(lower), "%s", cfg->name);
	for (char *p = lower; *p != 0; p++)
		*p = (char)tolower((unsigned char)*p);
	snprintf(s->tn_accept, sizeof(s->tn_accept), "dg-%s-accept", lower);
	snprintf(s->tn_conn, sizeof(s->tn_conn), "dg-%s-conn", lower);
	dg_err e = DG_ERR_NOMEM;
	int rv = 0;
	if ((s->conns = dgi_calloc(cfg->slots, sizeof(dgi_srv_conn))) == NULL)
		goto fail;
	if ((rv = nng_stream_listener_alloc(&s->l, url)) != 0) {
		e = dgi_nng_err(rv) == DG_ERR_UNREACHABLE ? DG_ERR_INVAL : dgi_nng_err(rv);
		goto fail;
	}
	if (tls && (rv = nng_stream_listener_set_ptr(s->l, NNG_OPT_TLS_CONFIG, cfg->tls)) != 0) {
		e = DG_ERR_TLS;
		goto fail;
	}
	if ((rv = nng_stream_listener_listen(s->l)) != 0) {
		e = rv == NNG_EADDRINUSE ? DG_ERR_ADDRINUSE : dgi_nng_err(rv);
		goto fail;
	}
	e = DG_ERR_NOMEM;
	rv = 0;
	if (nng_aio_alloc(&s->accept_aio, NULL, NULL) != 0 ||
	    pthread_create(&s->accept_thr, NULL, accept_main, s) != 0)
		goto fail;
	s->accept_started = true;
	*out = s;
	return DG_OK;
fail:
	*nng_rv = rv;
	dgi_srv_stop(s);
	return e;
}

int dgi_srv_port(const dgi_srv *s)
{
	int port = 0;
	if (nng_stream_listener_get_int(s->l, NNG_OPT_TCP_BOUND_PORT, &port) != 0)
		return 0;
	return port;
}

void dgi_srv_url(const dgi_srv *s, const char *url, char *out, size_t n)
{
	const char *colon = strrchr(url, ':');
	if (colon != NULL && strcmp(colon, ":0") == 0)
		snprintf(out, n, "%.*s:%d", (int)(colon - url), url, dgi_srv_port(s));
	else
		snprintf(out, n, "%s", url);
}

void dgi_srv_stop(dgi_srv *s)
{
	if (s == NULL)
		return;
	s->stopping = true;
	if (s->l != NULL)
		nng_stream_listener_close(s->l);
	if (s->accept_started)
		pthread_join(s->accept_thr, NULL);
	if (s->conns != NULL) {
		/* the accept thread is gone: nothing else changes the slots; the
		 * joins happen without s->mu, which the threads take */
		pthread_mutex_lock(&s->mu);
		for (unsigned i = 0; i < s->cfg.slots; i++)
			if (s->conns[i].used)
				dgi_aconn_abort(&s->conns[i].c);
		pthread_mutex_unlock(&s->mu);
		reap(s, true);
	}
	if (s->accept_aio != NULL)
		nng_aio_free(s->accept_aio);
	if (s->l != NULL)
		nng_stream_listener_free(s->l);
	dgi_free(s->conns);
	pthread_mutex_destroy(&s->mu);
	dgi_free(s);
}
