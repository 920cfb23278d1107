/*
 * admin.c — the admin endpoint dgctl connects to (admin.h, ADMIN.md).
 *
 * An accept thread takes connections from an nng stream listener (tcp://,
 * or tls+tcp:// with the node's certificate, requiring the client's like a
 * peer's).  Each connection gets its own thread from a fixed set of slots:
 * it runs the handshake (HELLO, AUTH, WELCOME — the client proves the
 * cluster secret first, then the node) within DGI_ADMIN_AUTH_MS, then
 * serves requests one at a time, each as a blocking call into the node's
 * API.  Connections in their handshake and authenticated sessions have
 * budgets of their own (DGI_ADMIN_HANDSHAKES, DGI_ADMIN_CONNS): a client
 * without the secret holds no session slot, and a new connection past
 * the handshakes' budget closes the oldest handshake rather than being
 * refused, so sockets opened by anyone, however fast, never keep an
 * authenticated dgctl out (issue 14).
 * No admin work runs on a transport thread: what the admin threads call
 * is what any application thread calls (ADMIN.md says what idle-verify's
 * partition locks cost cache traffic).
 * A connection idle for DGI_ADMIN_IDLE_MS is closed.
 */
#include "admin.h"
#include "adminwire.h"
#include "node_int.h"
#include "transport/transport_int.h"

#include <nng/supplemental/tls/tls.h>
#include <nng/supplemental/util/platform.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DGI_ADMIN_IDLE_MS (10 * 60 * 1000)
#define NSLOTS (DGI_ADMIN_CONNS + DGI_ADMIN_HANDSHAKES)

typedef struct slot {
	struct dgi_admin *a;
	bool used;
	bool authed;              /* a->mu: holds a session, not a handshake */
	uint64_t since;           /* accepted at (the oldest handshake goes) */
	_Atomic bool done;        /* the thread finished: join it */
	pthread_t thr;
	dgi_aconn c;
} slot;

struct dgi_admin {
	dg_node *n;
	nng_stream_listener *l;
	nng_tls_config *tls;
	nng_aio *accept_aio;
	pthread_t accept_thr;
	bool accept_started;
	_Atomic bool stopping;
	pthread_mutex_t mu;       /* slots */
	slot slots[NSLOTS];
	char url[160];
	/* ADMIN-BUSY, ADMIN-AUTH-FAIL, ADMIN-EVICTED: once a second, counted */
	struct dgi_lograte lr_busy, lr_auth, lr_evict;
};

static void log_conn(struct dgi_lograte *lr, const char *level, const char *id, const char *why)
{
	uint32_t repeated = 0;
	if (lr == NULL || dgi_lograte_due(lr, dgi_now_ms(), 1000, &repeated))
		dgi_log(level, id, "repeated=%u why=\"%s\"", repeated, why);
}

/* Sends {"ok":false,"error":why} (best effort). */
static void send_refusal(dgi_aconn *c, const char *why)
{
	cJSON *o = cJSON_CreateObject();
	if (o == NULL)
		return;
	cJSON_AddFalseToObject(o, "ok");
	cJSON_AddStringToObject(o, "error", why);
	char *s = cJSON_PrintUnformatted(o);
	if (s != NULL)
		dgi_aconn_send(c, s, strlen(s));
	cJSON_free(s);
	cJSON_Delete(o);
}

static dg_err send_json(dgi_aconn *c, const cJSON *o)
{
	char *s = cJSON_PrintUnformatted(o);
	if (s == NULL)
		return DG_ERR_NOMEM;
	dg_err e = dgi_aconn_send(c, s, strlen(s));
	cJSON_free(s);
	return e;
}

/* HELLO, AUTH, WELCOME (ADMIN.md).  DG_OK when the client proved the secret. */
static dg_err handshake(dgi_admin *a, slot *me)
{
	dgi_aconn *c = &me->c;
	const dg_node_config *cfg = dgi_node_config(a->n);
	uint64_t id = dg_node_get_id(a->n);
	uint8_t nn[DG_NONCE_LEN], cn[DG_NONCE_LEN];
	char hex[2 * DG_NONCE_LEN + 1], idhex[17], want[65], proof[65];
	dg_err e = dgi_random(nn, sizeof(nn));
	if (e != DG_OK)
		return e;
	dgi_hex(nn, sizeof(nn), hex);
	snprintf(idhex, sizeof(idhex), "%016llx", (unsigned long long)id);
	cJSON *hello = cJSON_CreateObject();
	if (hello == NULL)
		return DG_ERR_NOMEM;
	cJSON_AddStringToObject(hello, "proto", DGI_ADMIN_PROTO);
	cJSON_AddStringToObject(hello, "cluster", cfg->cluster_name);
	cJSON_AddStringToObject(hello, "node", idhex);
	cJSON_AddStringToObject(hello, "nonce", hex);
	cJSON_AddStringToObject(hello, "version", dg_version());
	e = send_json(c, hello);
	cJSON_Delete(hello);
	if (e != DG_OK)
		return e;

	char *raw;
	size_t len;
	if ((e = dgi_aconn_recv(c, &raw, &len)) != DG_OK)
		return e;
	cJSON *auth = cJSON_ParseWithLength(raw, len);
	dgi_free(raw);
	const cJSON *jn = cJSON_GetObjectItemCaseSensitive(auth, "nonce");
	const cJSON *jm = cJSON_GetObjectItemCaseSensitive(auth, "mac");
	uint8_t got[DG_MAC_LEN], exp[DG_MAC_LEN];
	e = DG_ERR_AUTH;
	if (cJSON_IsString(jn) && cJSON_IsString(jm) && dgi_unhex(jn->valuestring, cn, sizeof(cn)) &&
	    dgi_unhex(jm->valuestring, got, sizeof(got)) &&
	    dgi_admin_mac('d', cfg->secret, cfg->secret_len, nn, cn, id, cfg->cluster_name,
	    want) == DG_OK && dgi_unhex(want, exp, sizeof(exp)) && dgi_auth_equal(got, exp))
		e = DG_OK;
	cJSON_Delete(auth);
	if (e != DG_OK) {
		send_refusal(c, "authentication failed: wrong cluster secret or cluster name");
		log_conn(&a->lr_auth, "warn", "ADMIN-AUTH-FAIL",
		    "a dgctl client did not prove the cluster secret");
		return e;
	}
	/* a session slot: only an authenticated client takes one */
	bool room = false;
	pthread_mutex_lock(&a->mu);
	int sessions = 0;
	for (int i = 0; i < NSLOTS; i++)
		sessions += a->slots[i].used && a->slots[i].authed;
	if (sessions < DGI_ADMIN_CONNS)
		room = me->authed = true;
	pthread_mutex_unlock(&a->mu);
	if (!room) {
		send_refusal(c, "too many admin connections");
		log_conn(&a->lr_busy, "warn", "ADMIN-BUSY",
		    "an authenticated admin connection was refused: every session slot is busy");
		return DG_ERR_BUSY;
	}
	if ((e = dgi_admin_mac('l', cfg->secret, cfg->secret_len, nn, cn, id, cfg->cluster_name,
	    proof)) != DG_OK)
		return e;
	cJSON *w = cJSON_CreateObject();
	if (w == NULL)
		return DG_ERR_NOMEM;
	cJSON_AddTrueToObject(w, "ok");
	cJSON_AddStringToObject(w, "mac", proof);
	e = send_json(c, w);
	cJSON_Delete(w);
	return e;
}

/* DG_ERR_AUTH / DG_ERR_BUSY: the handshake refused the client (and said
 * why); anything else: the connection ended. */
static dg_err serve(dgi_admin *a, slot *me)
{
	dgi_aconn *c = &me->c;
	c->timeout_ms = DGI_ADMIN_AUTH_MS;
	c->max_frame = DGI_ADMIN_AUTH_FRAME_MAX;
	dg_err he = handshake(a, me);
	if (he != DG_OK)
		return he;
	c->timeout_ms = DGI_ADMIN_IDLE_MS;
	c->max_frame = DGI_ADMIN_FRAME_MAX;
	while (!a->stopping) {
		char *raw;
		size_t len;
		if (dgi_aconn_recv(c, &raw, &len) != DG_OK)
			return DG_ERR_CLOSED;
		cJSON *req = cJSON_ParseWithLength(raw, len);
		dgi_free(raw);
		cJSON *rep;
		bool stop = false;
		if (req == NULL) {
			rep = cJSON_CreateObject();
			if (rep != NULL) {
				cJSON_AddFalseToObject(rep, "ok");
				cJSON_AddStringToObject(rep, "error", "request is not valid JSON");
				cJSON_AddStringToObject(rep, "code", "DG_ERR_INVAL");
			}
		} else {
			rep = dgi_admin_dispatch(a->n, req, &stop);
		}
		cJSON_Delete(req);
		dg_err e = rep ? send_json(c, rep) : DG_ERR_NOMEM;
		cJSON_Delete(rep);
		if (stop)
			dgi_admin_stop_node(a->n);
		if (e != DG_OK)
			return DG_ERR_CLOSED;
	}
	return DG_ERR_CLOSED;
}

/* After a refusal: reads until the client closes, up to LINGER_MS.  A TLS
 * stream closed right after its last send can drop what was sent (nng
 * 1.5.2), and the client would see a timeout in place of the refusal's
 * reason. */
#define LINGER_MS 1000
static void linger(dgi_aconn *c)
{
	c->timeout_ms = LINGER_MS;
	c->max_frame = DGI_ADMIN_AUTH_FRAME_MAX;
	uint64_t end = dgi_now_ms() + LINGER_MS;
	char *raw;
	size_t len;
	while (dgi_now_ms() < end && dgi_aconn_recv(c, &raw, &len) == DG_OK)
		dgi_free(raw);
}

static void *conn_main(void *arg)
{
	slot *s = arg;
	dg_err e = serve(s->a, s);
	if ((e == DG_ERR_AUTH || e == DG_ERR_BUSY) && !s->a->stopping)
		linger(&s->c);
	nng_stream_close(s->c.s);
	s->done = true;
	return NULL;
}

/* Joins and frees the slots whose thread finished (a->mu held).  With all,
 * waits for every thread (stop: the streams were closed, a->mu not held). */
static void reap(dgi_admin *a, bool all)
{
	for (int i = 0; i < NSLOTS; i++) {
		slot *s = &a->slots[i];
		if (!s->used || (!all && !s->done))
			continue;
		pthread_join(s->thr, NULL);
		dgi_aconn_close(&s->c);
		s->used = false;
	}
}

/* Frees slot s once its thread ended (accept thread; not under a->mu:
 * the thread may take it). */
static void evict(dgi_admin *a, slot *s)
{
	pthread_join(s->thr, NULL);
	pthread_mutex_lock(&a->mu);
	dgi_aconn_close(&s->c);
	s->used = false;
	pthread_mutex_unlock(&a->mu);
}

static void accept_one(dgi_admin *a, nng_stream *st)
{
	pthread_mutex_lock(&a->mu);
	reap(a, false);
	/* the handshakes' budget: past it, the oldest handshake is closed —
	 * one that proves the secret takes milliseconds, so only clients
	 * that do not are closed this way */
	int hs = 0;
	slot *oldest = NULL;
	for (int i = 0; i < NSLOTS; i++) {
		slot *x = &a->slots[i];
		if (!x->used || x->authed || x->done)
			continue;
		hs++;
		if (oldest == NULL || x->since < oldest->since)
			oldest = x;
	}
	if (hs >= DGI_ADMIN_HANDSHAKES && oldest != NULL && !a->stopping) {
		dgi_aconn_abort(&oldest->c); /* its recv or send fails at once */
		pthread_mutex_unlock(&a->mu);
		log_conn(&a->lr_evict, "warn", "ADMIN-EVICTED", "an admin connection that had not "
		    "authenticated was closed to make room for a new one");
		evict(a, oldest);
		pthread_mutex_lock(&a->mu);
	}
	slot *s = NULL;
	for (int i = 0; i < NSLOTS && s == NULL; i++)
		if (!a->slots[i].used)
			s = &a->slots[i];
	if (s == NULL || a->stopping) {
		pthread_mutex_unlock(&a->mu);
		dgi_aconn c;
		if (dgi_aconn_init(&c, st, 1000) == DG_OK) {
			send_refusal(&c, s == NULL ? "too many admin connections" :
			    "the node is stopping");
			dgi_aconn_close(&c);
		} else {
			nng_stream_free(st);
		}
		log_conn(&a->lr_busy, "warn", "ADMIN-BUSY", "an admin connection was refused: all "
		    "slots busy");
		return;
	}
	memset(s, 0, sizeof(*s));
	s->a = a;
	s->since = dgi_now_ms();
	if (dgi_aconn_init(&s->c, st, DGI_ADMIN_AUTH_MS) != DG_OK) {
		nng_stream_free(st);
	} else if (pthread_create(&s->thr, NULL, conn_main, s) != 0) {
		dgi_aconn_close(&s->c);
	} else {
		s->used = true;
	}
	pthread_mutex_unlock(&a->mu);
}

static void *accept_main(void *arg)
{
	dgi_admin *a = arg;
	while (!a->stopping) {
		nng_stream_listener_accept(a->l, a->accept_aio);
		nng_aio_wait(a->accept_aio);
		int rv = nng_aio_result(a->accept_aio);
		if (rv == NNG_ECLOSED || rv == NNG_ECANCELED || a->stopping)
			break;
		if (rv != 0) {
			nng_msleep(10);    /* e.g. out of file descriptors: don't spin */
			continue;
		}
		accept_one(a, nng_aio_get_output(a->accept_aio, 0));
	}
	return NULL;
}

static dg_err setup_tls(dgi_admin *a, const dg_node_config *cfg)
{
	if (cfg->tls_cert_key_file == NULL || cfg->tls_ca_file == NULL) {
		log_conn(NULL, "error", "ADMIN-LISTEN", "tls+tcp:// needs the node's TLS files");
		return DG_ERR_INVAL;
	}
	if (nng_tls_config_alloc(&a->tls, NNG_TLS_MODE_SERVER) != 0)
		return DG_ERR_NOMEM;
	if (nng_tls_config_cert_key_file(a->tls, cfg->tls_cert_key_file, NULL) != 0 ||
	    nng_tls_config_ca_file(a->tls, cfg->tls_ca_file) != 0 ||
	    nng_tls_config_auth_mode(a->tls, NNG_TLS_AUTH_MODE_REQUIRED) != 0 ||
	    nng_stream_listener_set_ptr(a->l, NNG_OPT_TLS_CONFIG, a->tls) != 0)
		return DG_ERR_TLS;
	return DG_OK;
}

static void bound_url(dgi_admin *a, const char *url)
{
	const char *colon = strrchr(url, ':');
	int port = 0;
	if (colon != NULL && strcmp(colon, ":0") == 0 &&
	    nng_stream_listener_get_int(a->l, NNG_OPT_TCP_BOUND_PORT, &port) == 0)
		snprintf(a->url, sizeof(a->url), "%.*s:%d", (int)(colon - url), url, port);
	else
		snprintf(a->url, sizeof(a->url), "%s", url);
}

dg_err dgi_admin_start(dg_node *n, const char *url, dgi_admin **out)
{
	dgi_admin *a = dgi_calloc(1, sizeof(*a));
	if (a == NULL)
		return DG_ERR_NOMEM;
	a->n = n;
	pthread_mutex_init(&a->mu, NULL);
	dg_err e = DG_ERR_INVAL;
	int rv = 0;
	if (strncmp(url, "tcp://", 6) != 0 && strncmp(url, "tls+tcp://", 10) != 0)
		goto fail;
	if ((rv = nng_stream_listener_alloc(&a->l, url)) != 0) {
		e = dgi_nng_err(rv);
		goto fail;
	}
	if (strncmp(url, "tls+", 4) == 0 && (e = setup_tls(a, dgi_node_config(n))) != DG_OK)
		goto fail;
	if ((rv = nng_stream_listener_listen(a->l)) != 0) {
		e = rv == NNG_EADDRINUSE ? DG_ERR_ADDRINUSE : dgi_nng_err(rv);
		goto fail;
	}
	bound_url(a, url);
	if (nng_aio_alloc(&a->accept_aio, NULL, NULL) != 0) {
		e = DG_ERR_NOMEM;
		goto fail;
	}
	if (pthread_create(&a->accept_thr, NULL, accept_main, a) != 0) {
		e = DG_ERR_NOMEM;
		goto fail;
	}
	a->accept_started = true;
	*out = a;
	return DG_OK;
fail:
	dgi_log("error", "ADMIN-LISTEN", "url=%s err=\"%s%s%s\"", url,
	    dg_strerror(e), rv ? ": " : "", rv ? nng_strerror(rv) : "");
	dgi_admin_stop(a);
	return e;
}

const char *dgi_admin_address(const dgi_admin *a)
{
	return a ? a->url : NULL;
}

void dgi_admin_stop(dgi_admin *a)
{
	if (a == NULL)
		return;
	a->stopping = true;
	if (a->l != NULL)
		nng_stream_listener_close(a->l);
	if (a->accept_started)
		pthread_join(a->accept_thr, NULL);
	/* the accept thread is gone: nothing else changes the slots; the joins
	 * happen without a->mu, which a handshake takes */
	pthread_mutex_lock(&a->mu);
	for (int i = 0; i < NSLOTS; i++)
		if (a->slots[i].used)
			dgi_aconn_abort(&a->slots[i].c);
	pthread_mutex_unlock(&a->mu);
	reap(a, true);
	if (a->accept_aio != NULL)
		nng_aio_free(a->accept_aio);
	if (a->l != NULL)
		nng_stream_listener_free(a->l);
	if (a->tls != NULL)
		nng_tls_config_free(a->tls);
	pthread_mutex_destroy(&a->mu);
	dgi_free(a);
}
