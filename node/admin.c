/*
 * admin.c — the admin endpoint dgctl connects to (admin.h, ADMIN.md).
 *
 * Connections come through connsrv.c (tcp://, or tls+tcp:// with the
 * node's certificate, requiring the client's like a peer's), each served
 * on its own thread: the handshake (HELLO, AUTH, WELCOME — the client
 * proves the cluster secret first, then the node) within
 * DGI_ADMIN_AUTH_MS, then requests one at a time, each as a blocking call
 * into the node's API.  A connection that proved the secret is pinned as
 * a session (at most DGI_ADMIN_CONNS); at most DGI_ADMIN_HANDSHAKES others
 * wait, and a new connection past that closes the oldest of them rather
 * than being refused, so sockets opened by anyone, however fast, never
 * keep an authenticated dgctl out (issue 14).
 * No admin work runs on a transport thread: what the admin threads call
 * is what any application thread calls (ADMIN.md says what idle-verify's
 * partition locks cost cache traffic).
 * A connection idle for DGI_ADMIN_IDLE_MS is closed.
 */
#include "admin.h"
#include "adminwire.h"
#include "connsrv.h"
#include "node_int.h"
#include "transport/transport_int.h"

#include <nng/supplemental/tls/tls.h>
#include <nng/supplemental/util/platform.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DGI_ADMIN_IDLE_MS (10 * 60 * 1000)

struct dgi_admin {
	dg_node *n;
	dgi_srv *srv;
	nng_tls_config *tls;
	char url[160];
	/* ADMIN-AUTH-FAIL, ADMIN-BUSY (no session left): once a second */
	struct dgi_lograte lr_busy, lr_auth, lr_big;
};

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

/* Sends o.  An answer past the frame limit (a scan of large values, say)
 * is answered with an error naming the limit, and the session goes on:
 * before, the node closed the connection without a word
 * (test_admin_reply_too_large). */
static dg_err send_json(dgi_admin *a, dgi_aconn *c, const cJSON *o, const char *cmd)
{
	char *s = cJSON_PrintUnformatted(o);
	if (s == NULL)
		return DG_ERR_NOMEM;
	size_t n = strlen(s);
	dg_err e = n > c->max_frame ? DG_ERR_LIMIT : dgi_aconn_send(c, s, n);
	cJSON_free(s);
	if (e != DG_ERR_LIMIT)
		return e;
	char why[256];
	snprintf(why, sizeof(why), "the answer of %zu bytes passes the admin frame limit (%zu "
	    "bytes): ask for less (a scan: a smaller --limit)", n, (size_t)c->max_frame);
	char line[160];
	snprintf(line, sizeof(line), "an answer to %s of %zu bytes passed the frame limit (%zu)",
	    cmd != NULL ? cmd : "a request", n, (size_t)c->max_frame);
	dgi_log_rated(&a->lr_big, dgi_now_ms(), "warn", "ADMIN-REPLY-TOO-LARGE", line);
	cJSON *r = cJSON_CreateObject();
	if (r == NULL)
		return DG_ERR_NOMEM;
	cJSON_AddFalseToObject(r, "ok");
	cJSON_AddStringToObject(r, "error", why);
	cJSON_AddStringToObject(r, "code", "DG_ERR_LIMIT");
	s = cJSON_PrintUnformatted(r);
	cJSON_Delete(r);
	e = s != NULL ? dgi_aconn_send(c, s, strlen(s)) : DG_ERR_NOMEM;
	cJSON_free(s);
	return e;
}

/* HELLO, AUTH, WELCOME (ADMIN.md).  DG_OK when the client proved the secret. */
static dg_err handshake(dgi_admin *a, dgi_srv_conn *me)
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
	e = send_json(a, c, hello, NULL);
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
		dgi_log_rated(&a->lr_auth, dgi_now_ms(), "warn", "ADMIN-AUTH-FAIL",
		    "a dgctl client did not prove the cluster secret");
		return e;
	}
	/* a session: only an authenticated client takes one */
	if (!dgi_srv_pin(me, DGI_ADMIN_CONNS)) {
		send_refusal(c, "too many admin connections");
		dgi_log_rated(&a->lr_busy, dgi_now_ms(), "warn", "ADMIN-BUSY",
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
	e = send_json(a, c, w, NULL);
	cJSON_Delete(w);
	return e;
}

/* DG_ERR_AUTH / DG_ERR_BUSY: the handshake refused the client (and said
 * why); anything else: the connection ended. */
static dg_err serve(dgi_admin *a, dgi_srv_conn *me)
{
	dgi_aconn *c = &me->c;
	c->timeout_ms = DGI_ADMIN_AUTH_MS;
	c->max_frame = DGI_ADMIN_AUTH_FRAME_MAX;
	dg_err he = handshake(a, me);
	if (he != DG_OK)
		return he;
	c->timeout_ms = DGI_ADMIN_IDLE_MS;
	c->max_frame = DGI_ADMIN_FRAME_MAX;
	for (;;) {   /* until the client closes, or stop aborts the stream */
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
		const cJSON *cmd = req != NULL ? cJSON_GetObjectItemCaseSensitive(req, "cmd") : NULL;
		dg_err e = rep ? send_json(a, c, rep, cJSON_IsString(cmd) ? cmd->valuestring : NULL) :
		    DG_ERR_NOMEM;
		cJSON_Delete(req);
		cJSON_Delete(rep);
		if (stop)
			dgi_admin_stop_node(a->n);
		if (e != DG_OK)
			return DG_ERR_CLOSED;
	}
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

static void serve_conn(void *ctx, dgi_srv_conn *c)
{
	dgi_admin *a = ctx;
	dg_err e = serve(a, c);
	if (e == DG_ERR_AUTH || e == DG_ERR_BUSY)
		linger(&c->c);
}

static void refuse_conn(void *ctx, dgi_aconn *c, bool stopping)
{
	(void)ctx;
	send_refusal(c, stopping ? "the node is stopping" : "too many admin connections");
}

static dg_err setup_tls(dgi_admin *a, const dg_node_config *cfg)
{
	if (cfg->tls_cert_key_file == NULL || cfg->tls_ca_file == NULL) {
		dgi_log_rated(NULL, 0, "error", "ADMIN-LISTEN", "tls+tcp:// needs the node's TLS files");
		return DG_ERR_INVAL;
	}
	if (nng_tls_config_alloc(&a->tls, NNG_TLS_MODE_SERVER) != 0)
		return DG_ERR_NOMEM;
	if (nng_tls_config_cert_key_file(a->tls, cfg->tls_cert_key_file, NULL) != 0 ||
	    nng_tls_config_ca_file(a->tls, cfg->tls_ca_file) != 0 ||
	    nng_tls_config_auth_mode(a->tls, NNG_TLS_AUTH_MODE_REQUIRED) != 0)
		return DG_ERR_TLS;
	return DG_OK;
}

dg_err dgi_admin_start(dg_node *n, const char *url, dgi_admin **out)
{
	dgi_admin *a = dgi_calloc(1, sizeof(*a));
	if (a == NULL)
		return DG_ERR_NOMEM;
	a->n = n;
	dg_err e = DG_ERR_INVAL;
	int rv = 0;
	if (strncmp(url, "tcp://", 6) != 0 && strncmp(url, "tls+tcp://", 10) != 0)
		goto fail;
	if (strncmp(url, "tls+", 4) == 0 && (e = setup_tls(a, dgi_node_config(n))) != DG_OK)
		goto fail;
	dgi_srv_config sc = {
		.name = "ADMIN", .slots = DGI_ADMIN_CONNS + DGI_ADMIN_HANDSHAKES,
		.evict_at = DGI_ADMIN_HANDSHAKES, .timeout_ms = DGI_ADMIN_AUTH_MS, .tls = a->tls,
		.serve = serve_conn, .refuse = refuse_conn, .ctx = a,
	};
	if ((e = dgi_srv_start(url, &sc, &a->srv, &rv)) != DG_OK)
		goto fail;
	dgi_srv_url(a->srv, url, a->url, sizeof(a->url));
	*out = a;
	return DG_OK;
fail:
	dgi_log("error", "ADMIN-LISTEN", "url=%s err=\"%s%s%s\"", url, dg_strerror(e),
	    rv ? ": " : "", rv ? nng_strerror(rv) : "");
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
	dgi_srv_stop(a->srv);
	if (a->tls != NULL)
		nng_tls_config_free(a->tls);
	dgi_free(a);
}
