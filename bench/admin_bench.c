/*
 * admin_bench.c — the "admin" suite: what the operability endpoints cost
 * (node/ADMIN.md, node/metrics_http.h), and whether cache traffic keeps
 * its pace while they work.
 *
 * Cases (impl "datagrid" unless said):
 *   metrics_text       dgi_node_metrics_text into a reused dg_buf on an
 *                      in-process node (one server, listen
 *                      tcp://127.0.0.1:0, 3 PARTITIONED caches of 1000
 *                      entries each, some gets done so the latency
 *                      histograms are not empty).  Harness-measured (best
 *                      of 5 / 3 repetitions); bytes: the text's length;
 *                      allocs_per_op: dgi_alloc calls per text.
 *   metrics_scrape     GET /metrics over HTTP/1.1 from a plain socket
 *                      (one keep-alive connection, TCP_NODELAY) against
 *                      dgnode 1 of the cluster below; every scrape timed
 *                      from send to the last body byte; bytes: the body.
 *   admin_rtt_state    an admin connection (adminwire.h: HELLO, AUTH,
 *   admin_rtt_cache_get  WELCOME as dgctl's authenticate(), then kept open)
 *                      to dgnode 1: round trips of `state` (a fan-out to
 *                      every node: 3 servers and the client node) and of
 *                      `cache.get` of a present key.
 *   admin_connect      what one dgctl invocation costs minus its process
 *                      start: dial, handshake, one `state`, close.
 *   cache_under_admin  a closed-loop load from LOAD_THREADS threads of the
 *                      client node: each operation a dg_cache_get or a
 *                      dg_cache_put (alternately) of a random key of the
 *                      NKEYS pre-filled ones, for a fixed time, three ways:
 *                        quiet             nothing else running
 *                        idle_verify_loop  another thread running
 *                                          `idle-verify` back to back over
 *                                          one admin connection to dgnode 1
 *                        scrape_loop       another thread scraping /metrics
 *                                          back to back, dgnode 1, 2, 3, 1...
 *                      The conditions alternate repetition by repetition
 *                      (quiet, idle_verify_loop, scrape_loop, quiet, ...).
 *                      ops_per_s, p50_us, p99_us of the cache operations
 *                      (load.h: warm-up, then the timed window); stderr
 *                      gets the background loop's rate and the ratios to
 *                      quiet.
 *
 * The cluster: 3 dgnode processes (clusters.h) with --cache
 * bench,backups=1 and their default admin and HTTP endpoints (port 0: the
 * bound URLs are read from each NODE-READY log line), no cluster secret,
 * and an embedded client node in this process, filled with NKEYS entries
 * (16-byte keys, 100-byte values) by dg_cache_put_all batches.
 *
 * Latencies (not metrics_text): every operation timed alone
 * (CLOCK_MONOTONIC) into a log-linear histogram (hist.h); p50_us/p99_us
 * nearest rank over all repetitions; ns_per_op the mean (cache_under_admin:
 * 1e9 / ops_per_s, as the cache suite).
 */
#define _GNU_SOURCE
#include "harness.h"
#include "clusters.h"
#include "hist.h"
#include "load.h"
#include "resp.h"
#include "datagrid.h"
#include "node/adminwire.h"
#include "node/metrics.h"
#include "transport/transport.h"

#include <cjson/cJSON.h>
#include <nng/nng.h>

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define SUITE "admin"
#define KLEN 16
#define VLEN 100
#define NKEYS 100000
#define NKEYS_QUICK 20000
#define FILL_BATCH 250
#define FILL_THREADS 8
#define EMB_CACHES 3
#define EMB_KEYS 1000
#define LOAD_THREADS 4
#define ADMIN_TIMEOUT_MS 30000   /* an admin answer arrives within */
#define HTTP_IO_TIMEOUT_S 10

int dgb_admin_suite(const dgb_opts *o);

static uint8_t keys[NKEYS][KLEN];
static unsigned nkeys;

static void make_keys(void)
{
	char tmp[KLEN + 1];
	for (unsigned i = 0; i < NKEYS; i++) {
		snprintf(tmp, sizeof tmp, "bench-key-%06u", i);
		memcpy(keys[i], tmp, KLEN);
	}
}

/* ------------------------------------------------------------------------
 * metrics_text: an in-process node.
 * ------------------------------------------------------------------------ */
static struct mctx {
	dg_node *node;
	dg_buf buf;
} M;

static uint64_t m_text(void *ctx, uint64_t iters)
{
	struct mctx *m = ctx;
	uint64_t sum = 0;
	for (uint64_t i = 0; i < iters; i++) {
		DG_DO(dgi_node_metrics_text(m->node, &m->buf));
		sum += m->buf.len;
	}
	return sum;
}

static void metrics_text_case(const dgb_opts *o)
{
	if (!dgb_selected(o, "metrics_text", "datagrid"))
		return;
	char cluster[64], name[16];
	uint8_t val[VLEN] = { 0 };
	dg_node_config cfg;
	snprintf(cluster, sizeof cluster, "dgbench-admin-emb-%d", (int)getpid());
	dg_node_config_init(&cfg);
	cfg.listen_url = "tcp://127.0.0.1:0";
	cfg.cluster_name = cluster;
	DG_DO(dg_node_start(&cfg, &M.node));
	dg_buf out;
	dg_buf_init(&out);
	for (int c = 0; c < EMB_CACHES; c++) {
		dg_cache_config cc;
		dg_cache *cache;
		snprintf(name, sizeof name, "cache%d", c);
		dg_cache_config_init(&cc, name);
		cc.mode = DG_PARTITIONED;
		cc.backups = 0;
		DG_DO(dg_cache_create(M.node, &cc, &cache));
		for (unsigned i = 0; i < EMB_KEYS; i++)
			DG_DO(dg_cache_put(cache, keys[i], KLEN, val, VLEN));
		for (unsigned i = 0; i < EMB_KEYS; i += 2) {
			dg_buf_reset(&out);
			DG_DO(dg_cache_get(cache, keys[i], KLEN, &out));
		}
	}
	dg_buf_free(&out);
	dg_buf_init(&M.buf);
	DG_DO(dgi_node_metrics_text(M.node, &M.buf));
	dgb_begin_suite(o, SUITE);
	dgb_bench b = { .suite = SUITE, .name = "metrics_text", .impl = "datagrid",
		.run = m_text, .ctx = &M, .ops_per_iter = 1,
		.bytes = (long long)M.buf.len, .alloc_src = DGB_ALLOC_DG };
	dgb_run(o, &b);
	dg_node_stop(M.node);
	M.node = NULL;
	dg_buf_free(&M.buf);
}

/* ------------------------------------------------------------------------
 * The HTTP client: GET /metrics on a keep-alive connection.
 * ------------------------------------------------------------------------ */
typedef struct hconn {
	int fd, port;
	char req[128];
	size_t req_len;
	char *buf;
	size_t cap;
	unsigned connects;
} hconn;

static bool url_port(const char *url, int *port)
{
	const char *c = strrchr(url, ':');
	*port = c != NULL ? atoi(c + 1) : 0;
	return *port > 0;
}

static void hconn_init(hconn *h, int port)
{
	memset(h, 0, sizeof *h);
	h->fd = -1;
	h->port = port;
	h->req_len = (size_t)snprintf(h->req, sizeof h->req,
	    "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", port);
	h->cap = 1 << 20;
	h->buf = malloc(h->cap);
	if (h->buf == NULL)
		dgb_die("out of memory");
}

static void hconn_free(hconn *h)
{
	if (h->fd >= 0)
		close(h->fd);
	free(h->buf);
	h->buf = NULL;
}

/* Content-Length of the header block hdr (NUL-terminated), -1 if none. */
static long content_length(const char *hdr)
{
	for (const char *p = hdr; p != NULL && *p; ) {
		if (strncasecmp(p, "content-length:", 15) == 0)
			return strtol(p + 15, NULL, 10);
		p = strstr(p, "\r\n");
		if (p != NULL)
			p += 2;
	}
	return -1;
}

/* One scrape: the body's length, or -1 (with errno or *why). */
static long scrape(hconn *h, const char **why)
{
	*why = NULL;
	for (int attempt = 0; attempt < 2; attempt++) {
		if (h->fd < 0) {
			if ((h->fd = dgb_tcp_connect(h->port, HTTP_IO_TIMEOUT_S)) < 0) {
				*why = "connect";
				return -1;
			}
			h->connects++;
		}
		size_t n = 0;
		long clen = -1;
		size_t hlen = 0;
		bool sent = dgb_send_full(h->fd, h->req, h->req_len) == 0;
		while (sent) {
			if (n == h->cap - 1) {
				*why = "reply larger than the buffer";
				return -1;
			}
			ssize_t r = recv(h->fd, h->buf + n, h->cap - 1 - n, 0);
			if (r <= 0)
				break;
			n += (size_t)r;
			h->buf[n] = 0;
			if (hlen == 0) {
				char *end = strstr(h->buf, "\r\n\r\n");
				if (end == NULL)
					continue;
				hlen = (size_t)(end - h->buf) + 4;
				end[2] = 0;
				if (strncmp(h->buf, "HTTP/1.1 200", 12) != 0) {
					*why = "status not 200";
					return -1;
				}
				if ((clen = content_length(h->buf)) < 0) {
					*why = "no Content-Length";
					return -1;
				}
			}
			if (n >= hlen + (size_t)clen)
				return clen;
		}
		/* the server closed the kept-alive connection: once more */
		close(h->fd);
		h->fd = -1;
		if (n > 0)
			break;
	}
	if (*why == NULL)
		*why = "connection closed";
	return -1;
}

/* ------------------------------------------------------------------------
 * The admin client: dgctl's dial + authenticate, kept open.
 * ------------------------------------------------------------------------ */
typedef struct aclient {
	nng_stream_dialer *d;
	dgi_aconn c;
	bool open;
	char why[200];            /* the last error */
} aclient;

static void aclient_close(aclient *a)
{
	if (a->open)
		dgi_aconn_close(&a->c);
	a->open = false;
	if (a->d != NULL)
		nng_stream_dialer_free(a->d);
	a->d = NULL;
}

static cJSON *recv_obj(aclient *a)
{
	char *raw;
	size_t len;
	dg_err e = dgi_aconn_recv(&a->c, &raw, &len);
	if (e != DG_OK) {
		snprintf(a->why, sizeof a->why, "recv: %s", dg_strerror(e));
		return NULL;
	}
	cJSON *o = cJSON_ParseWithLength(raw, len);
	dgi_free(raw);
	if (o == NULL)
		snprintf(a->why, sizeof a->why, "an answer that is not JSON");
	return o;
}

static bool send_obj(aclient *a, const cJSON *o)
{
	char *s = cJSON_PrintUnformatted(o);
	dg_err e = s != NULL ? dgi_aconn_send(&a->c, s, strlen(s)) : DG_ERR_NOMEM;
	cJSON_free(s);
	if (e != DG_OK)
		snprintf(a->why, sizeof a->why, "send: %s", dg_strerror(e));
	return e == DG_OK;
}

static const char *jstr(const cJSON *o, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* HELLO, AUTH (no cluster secret: a MAC of the empty secret), WELCOME. */
static bool authenticate(aclient *a, const char *cluster)
{
	bool ok = false;
	cJSON *hello = recv_obj(a), *auth = NULL, *w = NULL;
	const char *node = jstr(hello, "node"), *nonce = jstr(hello, "nonce");
	const char *hc = jstr(hello, "cluster");
	uint8_t nn[DG_NONCE_LEN], cn[DG_NONCE_LEN];
	char mac[65], proof[65], hex[2 * DG_NONCE_LEN + 1];
	uint64_t id;
	if (node == NULL || nonce == NULL || hc == NULL ||
	    !dgi_unhex(nonce, nn, sizeof nn) || sscanf(node, "%" SCNx64, &id) != 1 ||
	    strcmp(hc, cluster) != 0) {
		snprintf(a->why, sizeof a->why, "bad HELLO");
		goto out;
	}
	if (dgi_random(cn, sizeof cn) != DG_OK ||
	    dgi_admin_mac('d', NULL, 0, nn, cn, id, cluster, mac) != DG_OK ||
	    dgi_admin_mac('l', NULL, 0, nn, cn, id, cluster, proof) != DG_OK) {
		snprintf(a->why, sizeof a->why, "cannot compute the MACs");
		goto out;
	}
	dgi_hex(cn, sizeof cn, hex);
	auth = cJSON_CreateObject();
	cJSON_AddStringToObject(auth, "nonce", hex);
	cJSON_AddStringToObject(auth, "mac", mac);
	if (!send_obj(a, auth) || (w = recv_obj(a)) == NULL)
		goto out;
	const char *theirs = jstr(w, "mac");
	if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(w, "ok")) ||
	    theirs == NULL || strcmp(theirs, proof) != 0) {
		snprintf(a->why, sizeof a->why, "WELCOME refused or unproven");
		goto out;
	}
	ok = true;
out:
	cJSON_Delete(hello);
	cJSON_Delete(auth);
	cJSON_Delete(w);
	return ok;
}

static bool aclient_open(aclient *a, const char *url, const char *cluster)
{
	memset(a, 0, sizeof *a);
	nng_aio *aio = NULL;
	int rv = nng_stream_dialer_alloc(&a->d, url);
	if (rv == 0)
		rv = nng_aio_alloc(&aio, NULL, NULL);
	if (rv == 0) {
		nng_aio_set_timeout(aio, ADMIN_TIMEOUT_MS);
		nng_stream_dialer_dial(a->d, aio);
		nng_aio_wait(aio);
		rv = nng_aio_result(aio);
	}
	if (rv != 0) {
		snprintf(a->why, sizeof a->why, "dial %s: %s", url, nng_strerror(rv));
		nng_aio_free(aio);
		aclient_close(a);
		return false;
	}
	nng_stream *s = nng_aio_get_output(aio, 0);
	nng_aio_free(aio);
	if (dgi_aconn_init(&a->c, s, ADMIN_TIMEOUT_MS) != DG_OK) {
		nng_stream_free(s);
		snprintf(a->why, sizeof a->why, "out of memory");
		aclient_close(a);
		return false;
	}
	a->open = true;
	if (!authenticate(a, cluster)) {
		aclient_close(a);
		return false;
	}
	return true;
}

/* One request (args consumed, may be NULL): its result, or NULL with
 * a->why.  Caller frees the result. */
static cJSON *acall(aclient *a, const char *cmd, cJSON *args)
{
	cJSON *req = cJSON_CreateObject();
	cJSON_AddStringToObject(req, "cmd", cmd);
	if (args != NULL)
		cJSON_AddItemToObject(req, "args", args);
	bool sent = send_obj(a, req);
	cJSON_Delete(req);
	cJSON *rep = sent ? recv_obj(a) : NULL;
	if (rep == NULL)
		return NULL;
	if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rep, "ok"))) {
		const char *err = jstr(rep, "error");
		snprintf(a->why, sizeof a->why, "%s: %s", cmd, err ? err : "failed");
		cJSON_Delete(rep);
		return NULL;
	}
	cJSON *res = cJSON_DetachItemFromObjectCaseSensitive(rep, "result");
	cJSON_Delete(rep);
	return res != NULL ? res : cJSON_CreateObject();
}

/* ------------------------------------------------------------------------
 * The cluster.
 * ------------------------------------------------------------------------ */
static struct cctx {
	char dgnode[PATH_MAX];
	dgb_dgcluster dg;
	char admin[DGB_NSERVERS][160];   /* tcp://127.0.0.1:PORT */
	int http_port[DGB_NSERVERS];
} C;

/* The value of " key=" in server i's NODE-READY line. */
static void ready_field(int i, const char *key, char *out, size_t cap)
{
	char line[1024], pat[32];
	if (!dgb_child_log_find(C.dg.server[i], 0, "id=NODE-READY", line, sizeof line))
		dgb_child_die(C.dg.server[i], "no NODE-READY line");
	snprintf(pat, sizeof pat, " %s=", key);
	const char *p = strstr(line, pat);
	size_t n = p != NULL ? strcspn(p + strlen(pat), " ") : 0;
	if (n == 0 || n >= cap || strncmp(p + strlen(pat), "none", n) == 0)
		dgb_child_die(C.dg.server[i], "NODE-READY without %s: %s", key, line);
	memcpy(out, p + strlen(pat), n);
	out[n] = 0;
}

/* Fill thread t: batches t, t + FILL_THREADS, ... of FILL_BATCH keys. */
static void *fill_main(void *arg)
{
	static uint8_t val[VLEN];
	unsigned t = (unsigned)(uintptr_t)arg;
	dg_kv *kv = calloc(FILL_BATCH, sizeof *kv);
	if (kv == NULL)
		return (void *)(uintptr_t)DG_ERR_NOMEM;
	dg_err e = DG_OK;
	for (unsigned i = t * FILL_BATCH; i < nkeys && e == DG_OK;
	    i += FILL_THREADS * FILL_BATCH) {
		size_t n = nkeys - i < FILL_BATCH ? nkeys - i : FILL_BATCH;
		for (size_t k = 0; k < n; k++)
			kv[k] = (dg_kv){ keys[i + k], KLEN, val, VLEN };
		e = dg_cache_put_all(C.dg.cache, kv, n);
	}
	free(kv);
	return (void *)(uintptr_t)e;
}

/* NKEYS entries, put by FILL_THREADS threads in batches (one put_all
 * waits for every node it touched: in parallel it goes ~4x faster). */
static void fill(void)
{
	pthread_t th[FILL_THREADS];
	uint64_t t0 = dgb_now_ns();
	for (unsigned t = 0; t < FILL_THREADS; t++)
		if (pthread_create(&th[t], NULL, fill_main, (void *)(uintptr_t)t) != 0)
			dgb_die("pthread_create failed");
	dg_err first = DG_OK;
	for (unsigned t = 0; t < FILL_THREADS; t++) {
		void *r;
		pthread_join(th[t], &r);
		if (first == DG_OK)
			first = (dg_err)(uintptr_t)r;
	}
	if (first != DG_OK)
		dgb_die("admin: filling the cache: %s", dg_strerror(first));
	dgb_note("admin: %u entries put in %.0f ms (%d threads, put_all of %d)",
	    nkeys, (double)(dgb_now_ns() - t0) / 1e6, FILL_THREADS, FILL_BATCH);
}

static void cluster_start(void)
{
	dgb_dgcluster_start(&C.dg, C.dgnode, SUITE, "bench,backups=1", "admin");
	for (int i = 0; i < DGB_NSERVERS; i++) {
		char http[160];
		ready_field(i, "admin", C.admin[i], sizeof C.admin[i]);
		ready_field(i, "http", http, sizeof http);
		if (!url_port(http, &C.http_port[i]))
			dgb_die("dgnode%d: http=%s: no port", i + 1, http);
	}
	fill();
}

static dgb_line hist_line(const char *name, const dgb_hist *h, uint64_t n,
    uint64_t total_ns, long long bytes)
{
	return (dgb_line){ .name = name, .impl = "datagrid",
		.ns_per_op = n ? (double)total_ns / (double)n : 0, .ops_per_s = -1,
		.p50_us = dgb_hist_pct_us(h, 0.50), .p99_us = dgb_hist_pct_us(h, 0.99),
		.bytes = bytes, .allocs_per_op = -1 };
}

/* ------------------------------------------------------------------------
 * metrics_scrape
 * ------------------------------------------------------------------------ */
static dgb_hist H[3];   /* one per measured case at a time */

static void scrape_case(const dgb_opts *o)
{
	if (!dgb_selected(o, "metrics_scrape", "datagrid"))
		return;
	const unsigned n = o->quick ? 200 : 1000, warm = 20;
	hconn h;
	const char *why;
	long body = 0;
	uint64_t total = 0;
	hconn_init(&h, C.http_port[0]);
	memset(&H[0], 0, sizeof H[0]);
	for (unsigned i = 0; i < warm + n; i++) {
		uint64_t t0 = dgb_now_ns();
		if ((body = scrape(&h, &why)) < 0)
			dgb_die("GET /metrics on port %d: %s (%s)", h.port, why,
			    strerror(errno));
		uint64_t t = dgb_now_ns() - t0;
		if (i >= warm) {
			dgb_hist_add(&H[0], t);
			total += t;
		}
	}
	if (h.connects > 1)
		dgb_note("metrics_scrape: the server closed the kept-alive "
		    "connection %u times", h.connects - 1);
	hconn_free(&h);
	dgb_line l = hist_line("metrics_scrape", &H[0], n, total, body);
	dgb_print_line(o, SUITE, &l);
	dgb_note("metrics_scrape: %u scrapes of dgnode1 on one connection", n);
}

/* ------------------------------------------------------------------------
 * admin_rtt_state, admin_rtt_cache_get, admin_connect
 * ------------------------------------------------------------------------ */
static uint64_t timed_state(aclient *a)
{
	uint64_t t0 = dgb_now_ns();
	cJSON *r = acall(a, "state", NULL);
	uint64_t t = dgb_now_ns() - t0;
	if (r == NULL)
		dgb_die("admin: %s", a->why);
	const char *st = jstr(r, "state");
	if (st == NULL || strcmp(st, "ACTIVE") != 0)
		dgb_note("admin: state %s", st ? st : "?");
	cJSON_Delete(r);
	return t;
}

static uint64_t timed_get(aclient *a, unsigned k)
{
	char key[KLEN + 1];
	memcpy(key, keys[k % nkeys], KLEN);
	key[KLEN] = 0;
	cJSON *args = cJSON_CreateObject();
	cJSON_AddStringToObject(args, "cache", "bench");
	cJSON_AddStringToObject(args, "key", key);
	uint64_t t0 = dgb_now_ns();
	cJSON *r = acall(a, "cache.get", args);
	uint64_t t = dgb_now_ns() - t0;
	if (r == NULL)
		dgb_die("admin: %s", a->why);
	cJSON_Delete(r);
	return t;
}

static uint64_t timed_connect(void)
{
	aclient a;
	uint64_t t0 = dgb_now_ns();
	if (!aclient_open(&a, C.admin[0], C.dg.cluster))
		dgb_die("admin: %s", a.why);
	cJSON *r = acall(&a, "state", NULL);
	aclient_close(&a);
	uint64_t t = dgb_now_ns() - t0;
	if (r == NULL)
		dgb_die("admin: %s", a.why);
	cJSON_Delete(r);
	return t;
}

static void admin_cases(const dgb_opts *o)
{
	static const char *names[3] = { "admin_rtt_state", "admin_rtt_cache_get",
		"admin_connect" };
	bool sel[3];
	bool any = false;
	for (int c = 0; c < 3; c++)
		any |= sel[c] = dgb_selected(o, names[c], "datagrid");
	if (!any)
		return;
	const int reps = o->quick ? 3 : 5;
	const unsigned per_rep[3] = { o->quick ? 20 : 100, o->quick ? 100 : 400,
		o->quick ? 5 : 20 };
	uint64_t total[3] = { 0, 0, 0 }, count[3] = { 0, 0, 0 };
	aclient a;
	if (!aclient_open(&a, C.admin[0], C.dg.cluster))
		dgb_die("admin: %s", a.why);
	for (int i = 0; i < 5; i++) {    /* warm-up */
		timed_state(&a);
		timed_get(&a, (unsigned)i);
	}
	memset(H, 0, sizeof H);
	/* interleaved: a burst of load from elsewhere hits a repetition of
	 * each case */
	for (int r = 0; r < reps; r++)
		for (int c = 0; c < 3; c++)
			for (unsigned i = 0; sel[c] && i < per_rep[c]; i++) {
				uint64_t t = c == 0 ? timed_state(&a) :
				    c == 1 ? timed_get(&a, (unsigned)(r * 7919 + i * 31)) :
				    timed_connect();
				dgb_hist_add(&H[c], t);
				total[c] += t;
				count[c]++;
			}
	aclient_close(&a);
	for (int c = 0; c < 3; c++)
		if (sel[c]) {
			dgb_line l = hist_line(names[c], &H[c], count[c], total[c], -1);
			dgb_print_line(o, SUITE, &l);
		}
	dgb_note("admin: %llu state, %llu cache.get round trips on one connection "
	    "to dgnode1; %llu connect+handshake+state+close", (unsigned long long)count[0],
	    (unsigned long long)count[1], (unsigned long long)count[2]);
}

/* ------------------------------------------------------------------------
 * cache_under_admin
 * ------------------------------------------------------------------------ */
enum cond { QUIET, IDLE_VERIFY, SCRAPE, NCOND };
static const char *cond_name[NCOND] = { "quiet", "idle_verify_loop", "scrape_loop" };

typedef struct worker {
	dg_buf buf;
	uint8_t val[VLEN];
	uint64_t rng;
	dg_err first_err;
} worker;

static worker W[LOAD_THREADS];

static dgb_op_res mixed_op(void *ctx, unsigned t, uint64_t seq)
{
	(void)ctx;
	worker *w = &W[t];
	w->rng = w->rng * 6364136223846793005u + 1442695040888963407u;
	const uint8_t *k = keys[(w->rng >> 33) % nkeys];
	dg_err e;
	if (seq & 1) {
		memcpy(w->val, &seq, sizeof seq);
		e = dg_cache_put(C.dg.cache, k, KLEN, w->val, VLEN);
	} else {
		dg_buf_reset(&w->buf);
		e = dg_cache_get(C.dg.cache, k, KLEN, &w->buf);
	}
	if (e == DG_OK)
		return DGB_OP_OK;
	if (w->first_err == DG_OK)
		w->first_err = e;
	return DGB_OP_FAILED;
}

/* The background admin work of one repetition. */
typedef struct bgwork {
	enum cond cond;
	pthread_t th;
	atomic_bool stop;
	uint64_t done, ns;            /* operations finished, their time */
	uint64_t max_ns;
	char why[200];                /* "" until it failed (then it stopped) */
	aclient a;                    /* idle_verify_loop: kept open */
	hconn h[DGB_NSERVERS];        /* scrape_loop */
} bgwork;

static void *bg_main(void *arg)
{
	bgwork *b = arg;
	for (unsigned i = 0; !atomic_load(&b->stop); i++) {
		uint64_t t0 = dgb_now_ns();
		if (b->cond == IDLE_VERIFY) {
			cJSON *r = acall(&b->a, "idle-verify", NULL);
			if (r == NULL) {
				snprintf(b->why, sizeof b->why, "%s", b->a.why);
				break;
			}
			cJSON_Delete(r);
		} else {
			const char *why;
			hconn *h = &b->h[i % DGB_NSERVERS];
			if (scrape(h, &why) < 0) {
				snprintf(b->why, sizeof b->why, "scrape port %d: %s", h->port, why);
				break;
			}
		}
		uint64_t t = dgb_now_ns() - t0;
		b->done++;
		b->ns += t;
		if (t > b->max_ns)
			b->max_ns = t;
	}
	return NULL;
}

static void bg_start(bgwork *b)
{
	atomic_store(&b->stop, false);
	if (pthread_create(&b->th, NULL, bg_main, b) != 0)
		dgb_die("pthread_create failed");
}

static void bg_stop(bgwork *b)
{
	atomic_store(&b->stop, true);
	pthread_join(b->th, NULL);
	if (b->why[0] != 0)
		dgb_die("cache_under_admin/%s: the background loop failed: %s",
		    cond_name[b->cond], b->why);
}

static void under_admin_case(const dgb_opts *o)
{
	bool sel[NCOND], any = false;
	for (int c = 0; c < NCOND; c++)
		any |= sel[c] = dgb_selected(o, "cache_under_admin", cond_name[c]);
	if (!any)
		return;
	const int reps = o->quick ? 1 : 3;
	const uint64_t window = o->quick ? 500000000u : 1500000000u;
	const uint64_t warm = o->quick ? 200000000u : 300000000u;
	static bgwork bg[NCOND];
	dgb_load *load[NCOND] = { NULL };
	int topo_changes[NCOND] = { 0 };
	for (unsigned t = 0; t < LOAD_THREADS; t++) {
		dg_buf_init(&W[t].buf);
		W[t].rng = 0x9e3779b97f4a7c15u * (t + 1);
	}
	for (int c = 0; c < NCOND; c++) {
		bg[c].cond = (enum cond)c;
		if (sel[c])
			load[c] = dgb_load_new(mixed_op, NULL, LOAD_THREADS);
	}
	if (sel[IDLE_VERIFY] && !aclient_open(&bg[IDLE_VERIFY].a, C.admin[0],
	    C.dg.cluster))
		dgb_die("admin: %s", bg[IDLE_VERIFY].a.why);
	for (int i = 0; i < DGB_NSERVERS; i++)
		hconn_init(&bg[SCRAPE].h[i], C.http_port[i]);

	for (int r = 0; r < reps; r++)
		for (int c = 0; c < NCOND; c++) {
			if (!sel[c])
				continue;
			int64_t v0 = dgb_dgcluster_topo_version(&C.dg);
			if (c != QUIET)
				bg_start(&bg[c]);
			dgb_load_rep(load[c], warm, window, NULL, NULL);
			if (c != QUIET)
				bg_stop(&bg[c]);
			if (dgb_dgcluster_topo_version(&C.dg) != v0)
				topo_changes[c]++;
		}

	double ops[NCOND] = { 0 }, p50[NCOND] = { 0 }, p99[NCOND] = { 0 };
	for (int c = 0; c < NCOND; c++) {
		if (!sel[c])
			continue;
		dgb_load *l = load[c];
		if (l->ops_timed == 0)
			dgb_die("cache_under_admin/%s: no operation completed", cond_name[c]);
		ops[c] = dgb_load_ops_per_s(l);
		p50[c] = dgb_load_pct_us(l, 0.50);
		p99[c] = dgb_load_pct_us(l, 0.99);
		dgb_line line = { .name = "cache_under_admin", .impl = cond_name[c],
			.ns_per_op = 1e9 / ops[c], .ops_per_s = ops[c], .p50_us = p50[c],
			.p99_us = p99[c], .bytes = -1, .allocs_per_op = -1 };
		dgb_print_line(o, SUITE, &line);
		dgb_note("cache_under_admin/%s: %u threads, %d x %.1f s (+ %.1f s "
		    "warm-up): %llu ops timed, %llu errors", cond_name[c], LOAD_THREADS,
		    l->reps, (double)window / 1e9, (double)warm / 1e9,
		    (unsigned long long)l->ops_timed, (unsigned long long)l->failed);
		if (c != QUIET && bg[c].done > 0)
			dgb_note("cache_under_admin/%s: the background loop did %llu %s "
			    "(%.1f/s), mean %.2f ms, max %.2f ms", cond_name[c],
			    (unsigned long long)bg[c].done,
			    c == IDLE_VERIFY ? "idle-verifies" : "scrapes",
			    (double)bg[c].done * 1e9 / ((double)reps * (double)(warm + window)),
			    (double)bg[c].ns / (double)bg[c].done / 1e6,
			    (double)bg[c].max_ns / 1e6);
		if (topo_changes[c] > 0)
			dgb_note("cache_under_admin/%s: the topology changed during %d "
			    "repetition(s): numbers are suspect", cond_name[c], topo_changes[c]);
		for (unsigned t = 0; t < LOAD_THREADS; t++)
			if (W[t].first_err != DG_OK) {
				dgb_note("cache_under_admin: first error %s",
				    dg_strerror(W[t].first_err));
				break;
			}
		dgb_load_free(l);
	}
	for (int c = 1; c < NCOND; c++)
		if (sel[QUIET] && sel[c])
			dgb_note("cache_under_admin/%s vs quiet: ops/s %.2fx, p50 %.2fx, "
			    "p99 %.2fx", cond_name[c], ops[c] / ops[QUIET],
			    p50[c] / p50[QUIET], p99[c] / p99[QUIET]);
	aclient_close(&bg[IDLE_VERIFY].a);
	for (int i = 0; i < DGB_NSERVERS; i++)
		hconn_free(&bg[SCRAPE].h[i]);
	for (unsigned t = 0; t < LOAD_THREADS; t++)
		dg_buf_free(&W[t].buf);
}

int dgb_admin_suite(const dgb_opts *o)
{
	make_keys();
	nkeys = o->quick ? NKEYS_QUICK : NKEYS;
	metrics_text_case(o);

	bool cluster = false;
	static const char *cases[] = { "metrics_scrape", "admin_rtt_state",
		"admin_rtt_cache_get", "admin_connect" };
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
		cluster |= dgb_selected(o, cases[c], "datagrid");
	for (int c = 0; c < NCOND; c++)
		cluster |= dgb_selected(o, "cache_under_admin", cond_name[c]);
	if (!cluster)
		return 0;
	const char *why;
	if (!dgb_find_dgnode(o, C.dgnode, sizeof C.dgnode, &why)) {
		dgb_note("admin: cluster cases skipped: dgnode %s", why);
		return 0;
	}
	cluster_start();
	scrape_case(o);
	admin_cases(o);
	under_admin_case(o);
	dgb_dgcluster_stop(&C.dg);
	dgb_children_stop();
	dgb_tmpdir_remove();
	return 0;
}
