/*
 * node_admin_test.c — unit tests of the node's admin endpoint (node/admin.c,
 * admin_cmds.c, admin_local.c, admin_peer.c), in process.
 *
 * What they promise: a node started with admin_url "tcp://127.0.0.1:0"
 * serves the admin protocol (node/adminwire.h) on the bound port
 * (dg_node_admin_address): it speaks first (HELLO), refuses a client that
 * does not prove the cluster secret over the right cluster name and closes
 * the connection, proves the secret back (WELCOME), survives garbage and
 * oversized frames, and serves each connection on its own thread (a silent
 * client blocks nobody; more than DGI_ADMIN_CONNS sessions are refused,
 * politely, and silent sockets never keep an authenticated client out).
 * Requests are answered in order with {"ok":...} and a DG_ERR_* code; the
 * commands give the right view of a 3-node cluster (nodes, caches, entries,
 * state, metrics, idle-verify, transactions, shutdown); a fan-out to a
 * node that just died comes back within its bound; dg_node_stop does not
 * wait for an idle client.
 *
 * The client is the test's own (cli_*), built on the adminwire.h framing
 * and MACs only, so it checks the wire as dgctl sees it.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "node/datagrid.h"
#include "node/admin.h"
#include "node/adminwire.h"
#include "cache/cache.h"
#include "cache/cache_int.h"
#include "txn/txn.h"
#include "transport/transport.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <assert.h>
#include <string.h>
#include <time.h>

void dgi_node_kill(dg_node *n);

#define OK(x) assert_int_equal((x), DG_OK)
#define CLUSTER "admin-test"
#define SECRET "admin-test-secret-0123456789"
#define NNODES 3
#define CLI_MS 5000

/* ---- a small admin client ---- */

typedef struct cli {
	nng_stream_dialer *d;
	dgi_aconn c;
	bool open;
	uint8_t nn[DG_NONCE_LEN];    /* the node's nonce (HELLO) */
	uint64_t node;               /* the node's id (HELLO) */
} cli;

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

/* Connects (no protocol yet). */
static void cli_dial(cli *k, const char *url)
{
	memset(k, 0, sizeof(*k));
	assert_non_null(url);
	assert_int_equal(nng_stream_dialer_alloc(&k->d, url), 0);
	nng_aio *aio;
	assert_int_equal(nng_aio_alloc(&aio, NULL, NULL), 0);
	nng_aio_set_timeout(aio, CLI_MS);
	nng_stream_dialer_dial(k->d, aio);
	nng_aio_wait(aio);
	assert_int_equal(nng_aio_result(aio), 0);
	nng_stream *s = nng_aio_get_output(aio, 0);
	nng_aio_free(aio);
	OK(dgi_aconn_init(&k->c, s, CLI_MS));
	k->open = true;
}

static void cli_close(cli *k)
{
	if (k->open)
		dgi_aconn_close(&k->c);
	if (k->d != NULL)
		nng_stream_dialer_free(k->d);
	memset(k, 0, sizeof(*k));
}

static void cli_send(cli *k, const cJSON *o)
{
	char *s = cJSON_PrintUnformatted(o);
	assert_non_null(s);
	OK(dgi_aconn_send(&k->c, s, strlen(s)));
	cJSON_free(s);
}

/* One frame as JSON (caller cJSON_Delete's it); fails the test on an I/O
 * error or a frame that is not JSON. */
static cJSON *cli_recv(cli *k)
{
	char *raw;
	size_t len;
	OK(dgi_aconn_recv(&k->c, &raw, &len));
	cJSON *o = cJSON_ParseWithLength(raw, len);
	dgi_free(raw);
	assert_non_null(o);
	return o;
}

/* The node closed the connection: the next read fails at once (not by the
 * client's timeout). */
static void cli_expect_closed(cli *k)
{
	char *raw = NULL;
	size_t len;
	uint64_t t0 = now_ms();
	dg_err e = dgi_aconn_recv(&k->c, &raw, &len);
	if (e == DG_OK)
		fail_msg("expected the connection closed, got a frame: %.*s", (int)len, raw);
	assert_int_not_equal(e, DG_ERR_TIMEOUT);
	assert_true(now_ms() - t0 < CLI_MS);
}

static const char *jstr(const cJSON *o, const char *name)
{
	return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, name));
}

/* For string comparisons: cmocka's crash on NULL */
#define S(x) ((x) != NULL ? (x) : "(missing)")

static double jnum(const cJSON *o, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
	if (!cJSON_IsNumber(v))
		fail_msg("\"%s\" is not a number", name);
	return v->valuedouble;
}

static bool jok(const cJSON *o)
{
	return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "ok"));
}

/* HELLO h: checks it and keeps the node's nonce and id (h deleted). */
static void take_hello(cli *k, cJSON *h, const dg_node *n)
{
	assert_string_equal(S(jstr(h, "proto")), DGI_ADMIN_PROTO);
	assert_string_equal(S(jstr(h, "cluster")), CLUSTER);
	assert_non_null(jstr(h, "version"));
	assert_true(dgi_unhex(jstr(h, "nonce"), k->nn, sizeof(k->nn)));
	assert_int_equal(sscanf(S(jstr(h, "node")), "%" SCNx64, &k->node), 1);
	if (n != NULL)
		assert_true(k->node == dg_node_get_id(n));
	cJSON_Delete(h);
}

static void cli_hello(cli *k, const dg_node *n)
{
	take_hello(k, cli_recv(k), n);
}

/* AUTH with this secret and cluster name; returns the node's answer and
 * the MAC a node with that secret must send back (proof[65]). */
static cJSON *cli_auth(cli *k, const char *secret, const char *cluster, char proof[65],
    char mine[65])
{
	uint8_t cn[DG_NONCE_LEN];
	char hex[2 * DG_NONCE_LEN + 1];
	OK(dgi_random(cn, sizeof(cn)));
	OK(dgi_admin_mac('d', (const uint8_t *)secret, strlen(secret), k->nn, cn, k->node,
	    cluster, mine));
	OK(dgi_admin_mac('l', (const uint8_t *)secret, strlen(secret), k->nn, cn, k->node,
	    cluster, proof));
	dgi_hex(cn, sizeof(cn), hex);
	cJSON *a = cJSON_CreateObject();
	cJSON_AddStringToObject(a, "nonce", hex);
	cJSON_AddStringToObject(a, "mac", mine);
	cli_send(k, a);
	cJSON_Delete(a);
	return cli_recv(k);
}

/* AUTH with the right secret after HELLO; the node's proof checked. */
static void cli_login(cli *k)
{
	char proof[65], mine[65];
	cJSON *w = cli_auth(k, SECRET, CLUSTER, proof, mine);
	assert_true(jok(w));
	assert_string_equal(S(jstr(w, "mac")), proof);
	cJSON_Delete(w);
}

/* Dials n's admin endpoint and authenticates. */
static void cli_open(cli *k, dg_node *n)
{
	cli_dial(k, dg_node_admin_address(n));
	cli_hello(k, n);
	cli_login(k);
}

static void cli_request(cli *k, const char *cmd, cJSON *args)
{
	cJSON *r = cJSON_CreateObject();
	cJSON_AddStringToObject(r, "cmd", cmd);
	if (args != NULL)
		cJSON_AddItemToObject(r, "args", args);
	cli_send(k, r);
	cJSON_Delete(r);
}

/* One request, its reply (caller deletes).  args consumed. */
static cJSON *cli_call(cli *k, const char *cmd, cJSON *args)
{
	cli_request(k, cmd, args);
	return cli_recv(k);
}

/* A request that must succeed: returns the reply (its "result" inside). */
static cJSON *cli_ok(cli *k, const char *cmd, cJSON *args)
{
	cJSON *r = cli_call(k, cmd, args);
	if (!jok(r))
		fail_msg("%s: %s (%s)", cmd, jstr(r, "error"), jstr(r, "code"));
	assert_non_null(cJSON_GetObjectItemCaseSensitive(r, "result"));
	return r;
}

static const cJSON *result(const cJSON *rep)
{
	return cJSON_GetObjectItemCaseSensitive(rep, "result");
}

/* A request that must fail with code. */
static cJSON *cli_err(cli *k, const char *cmd, cJSON *args, const char *code)
{
	cJSON *r = cli_call(k, cmd, args);
	if (jok(r))
		fail_msg("%s: expected %s, got ok", cmd, code);
	assert_true(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(r, "ok")));
	assert_non_null(jstr(r, "error"));
	assert_string_equal(S(jstr(r, "code")), code);
	return r;
}

/* {"k": "v", ...} from pairs of strings, NULL-terminated. */
static cJSON *sargs(const char *k, ...)
{
	cJSON *o = cJSON_CreateObject();
	va_list ap;
	va_start(ap, k);
	for (; k != NULL; k = va_arg(ap, const char *))
		cJSON_AddStringToObject(o, k, va_arg(ap, const char *));
	va_end(ap);
	return o;
}

static void hex64(uint64_t v, char out[17])
{
	snprintf(out, 17, "%016" PRIx64, v);
}

/* ---- the cluster ---- */

static atomic_int shutdown_calls;
static atomic_bool reply_seen;          /* the test's client read the shutdown reply */
static atomic_bool seen_in_callback;    /* reply_seen as the callback found it */

/* Waits (bounded) for the client to read the reply: were the callback
 * called before the reply went out, the admin thread would be stuck here
 * and the client never read it. */
static void on_shutdown(void *ctx)
{
	(void)ctx;
	shutdown_calls++;
	uint64_t end = now_ms() + 3000;
	while (!reply_seen && now_ms() < end)
		sleep_ms(5);
	seen_in_callback = reply_seen;
}

static dg_node *start_node(const char *seed, bool with_shutdown)
{
	dg_node_config cfg;
	const char *seeds[] = { seed };
	dg_node_config_init(&cfg);
	cfg.listen_url = "tcp://127.0.0.1:0";
	cfg.cluster_name = CLUSTER;
	cfg.secret = (const uint8_t *)SECRET;
	cfg.secret_len = strlen(SECRET);
	cfg.seeds = seeds;
	cfg.nseeds = seed != NULL ? 1 : 0;
	cfg.failure_timeout_ms = 1000;
	cfg.heartbeat_ms = 100;
	cfg.join_timeout_ms = 5000;
	cfg.request_timeout_ms = 5000;
	cfg.admin_url = "tcp://127.0.0.1:0";
	if (with_shutdown)
		cfg.on_shutdown = on_shutdown;
	dg_node *n = NULL;
	OK(dg_node_start(&cfg, &n));
	assert_non_null(dg_node_admin_address(n));
	assert_int_equal(strncmp(dg_node_admin_address(n), "tcp://127.0.0.1:", 16), 0);
	assert_string_not_equal(dg_node_admin_address(n), "tcp://127.0.0.1:0");
	return n;
}

static dg_node *nodes[NNODES];

static int group_setup(void **state)
{
	(void)state;
	nodes[0] = start_node(NULL, true);     /* only node 0 accepts a shutdown */
	for (int i = 1; i < NNODES; i++)
		nodes[i] = start_node(dg_node_address(nodes[0]), false);
	/* every node sees the others */
	uint64_t end = now_ms() + 5000;
	for (int i = 0; i < NNODES; i++) {
		dg_node_info info[8];
		int64_t ver;
		while (dg_node_topology(nodes[i], &ver, info, 8) != NNODES && now_ms() < end)
			sleep_ms(20);
		assert_int_equal(dg_node_topology(nodes[i], &ver, info, 8), NNODES);
	}
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	for (int i = NNODES - 1; i >= 0; i--) {
		dg_node_stop(nodes[i]);
		nodes[i] = NULL;
	}
	return 0;
}

/* ---- handshake ---- */

static void test_handshake_right_secret(void **state)
{
	(void)state;
	cli k;
	char proof[65], mine[65];
	cli_dial(&k, dg_node_admin_address(nodes[0]));
	cli_hello(&k, nodes[0]);
	cJSON *w = cli_auth(&k, SECRET, CLUSTER, proof, mine);
	assert_true(jok(w));
	/* the node's MAC is its own proof, not an echo of the client's */
	assert_string_equal(S(jstr(w, "mac")), proof);
	assert_string_not_equal(S(jstr(w, "mac")), mine);
	cJSON_Delete(w);
	cJSON *r = cli_ok(&k, "state", NULL);
	cJSON_Delete(r);
	cli_close(&k);
}

static void refused(dg_node *n, const char *secret, const char *cluster)
{
	cli k;
	char proof[65], mine[65];
	cli_dial(&k, dg_node_admin_address(n));
	cli_hello(&k, n);
	cJSON *w = cli_auth(&k, secret, cluster, proof, mine);
	assert_true(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(w, "ok")));
	assert_null(cJSON_GetObjectItemCaseSensitive(w, "mac"));
	assert_non_null(jstr(w, "error"));
	assert_int_equal(strncmp(S(jstr(w, "error")), "authentication failed", 21), 0);
	cJSON_Delete(w);
	cli_expect_closed(&k);
	cli_close(&k);
}

static void test_handshake_wrong_secret(void **state)
{
	(void)state;
	refused(nodes[0], "not-the-secret", CLUSTER);
	refused(nodes[0], "", CLUSTER);
}

static void test_handshake_wrong_cluster(void **state)
{
	(void)state;
	refused(nodes[0], SECRET, "another-cluster");
}

/* Sends n raw bytes (no framing). */
static void raw_send(cli *k, const void *p, size_t n)
{
	nng_iov iov = { (void *)(uintptr_t)p, n };
	nng_aio_set_iov(k->c.aio, 1, &iov);
	nng_aio_set_timeout(k->c.aio, CLI_MS);
	nng_stream_send(k->c.s, k->c.aio);
	nng_aio_wait(k->c.aio);
	assert_int_equal(nng_aio_result(k->c.aio), 0);
	assert_int_equal(nng_aio_count(k->c.aio), n);
}

static void still_serves(dg_node *n)
{
	cli k;
	cli_open(&k, n);
	cJSON *r = cli_ok(&k, "state", NULL);
	cJSON_Delete(r);
	cli_close(&k);
}

static void test_handshake_garbage(void **state)
{
	(void)state;
	cli k;
	/* a frame that is not JSON where AUTH belongs: refused, closed */
	cli_dial(&k, dg_node_admin_address(nodes[0]));
	cli_hello(&k, nodes[0]);
	OK(dgi_aconn_send(&k.c, "\x01garbage{", 9));
	cJSON *w = cli_recv(&k);
	assert_false(jok(w));
	assert_int_equal(strncmp(S(jstr(w, "error")), "authentication failed", 21), 0);
	cJSON_Delete(w);
	cli_expect_closed(&k);
	cli_close(&k);
	still_serves(nodes[0]);

	/* JSON of the wrong shape */
	cli_dial(&k, dg_node_admin_address(nodes[0]));
	cli_hello(&k, nodes[0]);
	OK(dgi_aconn_send(&k.c, "[1,2,{\"mac\":7}]", 15));
	w = cli_recv(&k);
	assert_false(jok(w));
	cJSON_Delete(w);
	cli_expect_closed(&k);
	cli_close(&k);

	/* a header announcing more than DGI_ADMIN_FRAME_MAX: closed at once */
	cli_dial(&k, dg_node_admin_address(nodes[0]));
	cli_hello(&k, nodes[0]);
	uint32_t big = DGI_ADMIN_FRAME_MAX + 1;
	uint8_t h[4] = { (uint8_t)(big >> 24), (uint8_t)(big >> 16), (uint8_t)(big >> 8),
		(uint8_t)big };
	raw_send(&k, h, 4);
	cli_expect_closed(&k);
	cli_close(&k);
	still_serves(nodes[0]);

	/* before AUTH no frame is large: 1 MiB announced is refused at once
	 * (not allocated and waited for, 8 connections x 64 MiB) */
	cli_dial(&k, dg_node_admin_address(nodes[0]));
	cli_hello(&k, nodes[0]);
	uint8_t mib[4] = { 0, 0x10, 0, 0 };
	raw_send(&k, mib, 4);
	cli_expect_closed(&k);
	cli_close(&k);

	/* an HTTP request (no framing at all): "GET " is a 1.1 GB header */
	cli_dial(&k, dg_node_admin_address(nodes[0]));
	raw_send(&k, "GET / HTTP/1.1\r\n\r\n", 18);
	cJSON *hello = cli_recv(&k);       /* the node speaks first anyway */
	cJSON_Delete(hello);
	cli_expect_closed(&k);
	cli_close(&k);

	/* a client that goes away half-way through a frame */
	cli_dial(&k, dg_node_admin_address(nodes[0]));
	cli_hello(&k, nodes[0]);
	raw_send(&k, "\0\0\0\x40{\"nonce\"", 12);
	cli_close(&k);
	still_serves(nodes[0]);
}

static void test_silent_client_blocks_nobody(void **state)
{
	(void)state;
	cli silent, other;
	cli_dial(&silent, dg_node_admin_address(nodes[1]));   /* reads nothing, says nothing */
	uint64_t t0 = now_ms();
	cli_open(&other, nodes[1]);
	cJSON *r = cli_ok(&other, "nodes", NULL);
	cJSON_Delete(r);
	assert_true(now_ms() - t0 < 3000);
	cli_close(&other);
	/* the silent one still gets its HELLO */
	cli_hello(&silent, nodes[1]);
	cli_close(&silent);
}

/* ---- dispatch ---- */

static void test_dispatch_errors(void **state)
{
	(void)state;
	cli k;
	cli_open(&k, nodes[0]);
	cJSON *r = cli_err(&k, "no-such-command", NULL, "DG_ERR_UNSUPPORTED");
	assert_non_null(strstr(S(jstr(r, "error")), "no-such-command"));
	cJSON_Delete(r);

	cJSON *req = cJSON_CreateObject();
	cJSON_AddItemToObject(req, "args", cJSON_CreateObject());
	cli_send(&k, req);
	cJSON_Delete(req);
	r = cli_recv(&k);
	assert_false(jok(r));
	assert_string_equal(S(jstr(r, "code")), "DG_ERR_INVAL");
	cJSON_Delete(r);

	req = cJSON_CreateObject();
	cJSON_AddNumberToObject(req, "cmd", 7);
	cli_send(&k, req);
	cJSON_Delete(req);
	r = cli_recv(&k);
	assert_false(jok(r));
	assert_string_equal(S(jstr(r, "code")), "DG_ERR_INVAL");
	cJSON_Delete(r);

	OK(dgi_aconn_send(&k.c, "{\"cmd\": \"state\"", 15));
	r = cli_recv(&k);
	assert_true(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(r, "ok")));
	assert_non_null(jstr(r, "error"));
	cJSON_Delete(r);

	/* a missing argument names it */
	r = cli_err(&k, "cache.get", sargs("key", "k", NULL), "DG_ERR_INVAL");
	assert_non_null(strstr(S(jstr(r, "error")), "\"cache\""));
	cJSON_Delete(r);
	r = cli_err(&k, "cache.get", sargs("cache", "no-such-cache", "key", "k", NULL),
	    "DG_ERR_NOT_FOUND");
	cJSON_Delete(r);

	/* the connection survived every error */
	r = cli_ok(&k, "state", NULL);
	cJSON_Delete(r);
	cli_close(&k);
}

static void test_requests_in_order(void **state)
{
	(void)state;
	cli k;
	cli_open(&k, nodes[1]);
	/* five requests before reading any reply */
	cli_request(&k, "cmd-a", NULL);
	cli_request(&k, "state", NULL);
	cli_request(&k, "cmd-b", NULL);
	cli_request(&k, "nodes", NULL);
	cli_request(&k, "cmd-c", NULL);
	cJSON *r = cli_recv(&k);
	assert_non_null(strstr(S(jstr(r, "error")), "\"cmd-a\""));
	cJSON_Delete(r);
	r = cli_recv(&k);
	assert_true(jok(r));
	assert_non_null(jstr(result(r), "state"));
	cJSON_Delete(r);
	r = cli_recv(&k);
	assert_non_null(strstr(S(jstr(r, "error")), "\"cmd-b\""));
	cJSON_Delete(r);
	r = cli_recv(&k);
	assert_true(jok(r));
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(result(r), "nodes")),
	    NNODES);
	cJSON_Delete(r);
	r = cli_recv(&k);
	assert_non_null(strstr(S(jstr(r, "error")), "\"cmd-c\""));
	cJSON_Delete(r);
	cli_close(&k);
}

/* ---- commands ---- */

static void test_nodes(void **state)
{
	(void)state;
	dg_node_info info[8];
	int64_t ver;
	assert_int_equal(dg_node_topology(nodes[2], &ver, info, 8), NNODES);
	cli k;
	cli_open(&k, nodes[2]);
	cJSON *r = cli_ok(&k, "nodes", NULL);
	const cJSON *res = result(r), *arr = cJSON_GetObjectItemCaseSensitive(res, "nodes"), *o;
	char self[17];
	hex64(dg_node_get_id(nodes[2]), self);
	assert_string_equal(S(jstr(res, "self")), self);
	assert_true(jnum(res, "topology_version") >= 1);
	assert_int_equal(cJSON_GetArraySize(arr), NNODES);
	int coordinators = 0, seen[NNODES] = { 0 };
	int64_t lowest = INT64_MAX;
	for (int i = 0; i < NNODES; i++)
		if (info[i].order < lowest)
			lowest = info[i].order;
	cJSON_ArrayForEach(o, arr) {
		int which = -1;
		for (int i = 0; i < NNODES; i++) {
			char id[17];
			hex64(dg_node_get_id(nodes[i]), id);
			if (strcmp(S(jstr(o, "id")), id) == 0)
				which = i;
		}
		assert_true(which >= 0);
		seen[which]++;
		dg_node *n = nodes[which];
		assert_string_equal(S(jstr(o, "address")), dg_node_address(n));
		assert_string_equal(S(jstr(o, "admin")), dg_node_admin_address(n));
		assert_string_equal(S(jstr(o, "role")), "server");
		assert_string_equal(S(jstr(o, "version")), dg_version());
		assert_null(cJSON_GetObjectItemCaseSensitive(o, "error"));
		assert_true(jnum(o, "uptime_ms") >= 0);
		for (int i = 0; i < NNODES; i++)
			if (info[i].id == dg_node_get_id(n))
				assert_true(jnum(o, "order") == (double)info[i].order);
		bool coord = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "coordinator"));
		coordinators += coord;
		assert_int_equal(coord, jnum(o, "order") == (double)lowest);
	}
	assert_int_equal(coordinators, 1);
	for (int i = 0; i < NNODES; i++)
		assert_int_equal(seen[i], 1);
	cJSON_Delete(r);
	cli_close(&k);
}

/* The cache `name` on every node, rebalanced; node 0's handle. */
static dg_cache *cache_everywhere(const char *name)
{
	dg_cache *first = NULL;
	for (int i = 0; i < NNODES; i++) {
		dg_cache *c;
		uint64_t end = now_ms() + 5000;
		while (dg_cache_get_by_name(nodes[i], name, &c) != DG_OK && now_ms() < end)
			sleep_ms(20);
		OK(dg_cache_get_by_name(nodes[i], name, &c));
		OK(dg_cache_wait_rebalanced(c, 10000));
		if (i == 0)
			first = c;
	}
	return first;
}

/* cache.create's numbers are checked before they are cast: ttl_ms 1e30
 * (tests/fuzz crash admin_fuzz-1: undefined behaviour, and a cache with
 * some TTL) and the other bad settings are DG_ERR_INVAL. */
static void test_cache_create_bad_numbers(void **state)
{
	(void)state;
	cli k;
	cli_open(&k, nodes[0]);
	static const struct { const char *name; double v; } bad[] = {
		{ "ttl_ms", 1e30 }, { "ttl_ms", -1 }, { "ttl_ms", 2e15 },
		{ "backups", 65 }, { "backups", -1 }, { "backups", 1.5 }, { "backups", 1e300 },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cJSON *a = sargs("cache", "badnum", NULL);
		cJSON_AddNumberToObject(a, bad[i].name, bad[i].v);
		cJSON *r = cli_err(&k, "cache.create", a, "DG_ERR_INVAL");
		assert_non_null(strstr(S(jstr(r, "error")), "bad cache setting"));
		cJSON_Delete(r);
	}
	cli_close(&k);
}

/* `rebalance` and `state` count a partition that is OWNING but not whole
 * and fetching what it lacks (repairing): not complete, REBALANCING —
 * before, "complete" while a copy still lacked entries that a node lost
 * next could take along. */
static void test_rebalance_counts_repairing(void **state)
{
	(void)state;
	cli k;
	cli_open(&k, nodes[0]);
	cJSON *r = cli_ok(&k, "cache.create", sargs("cache", "rep", NULL));
	cJSON_Delete(r);
	dg_cache *c = cache_everywhere("rep");
	r = cli_ok(&k, "rebalance", NULL);
	assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(result(r), "complete")));
	assert_true(jnum(result(r), "partitions_repairing") == 0);
	cJSON_Delete(r);
	atomic_store(&dgi_rebalance_paused, true); /* nobody fetches it */
	uint32_t p = 0;
	while (p < c->cfg.partitions && atomic_load(&c->parts[p].state) != P_OWNING)
		p++;
	assert_true(p < c->cfg.partitions);
	dgi_part *pt = &c->parts[p];
	dgi_part_lock(pt);
	atomic_store(&pt->whole, false);
	pt->srcs[0] = 0x1234;
	pt->nsrcs = 1;
	dgi_part_unlock(pt);
	r = cli_ok(&k, "rebalance", NULL);
	assert_true(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(result(r), "complete")));
	assert_true(jnum(result(r), "partitions_repairing") == 1);
	assert_true(jnum(result(r), "partitions_moving") == 0);
	cJSON_Delete(r);
	r = cli_ok(&k, "state", NULL);
	assert_string_equal(S(jstr(result(r), "state")), "REBALANCING");
	cJSON_Delete(r);
	dgi_part_lock(pt);
	atomic_store(&pt->whole, true);
	pt->nsrcs = 0;
	dgi_part_unlock(pt);
	atomic_store(&dgi_rebalance_paused, false);
	r = cli_ok(&k, "rebalance", NULL);
	assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(result(r), "complete")));
	cJSON_Delete(r);
	r = cli_ok(&k, "cache.destroy", sargs("cache", "rep", NULL));
	cJSON_Delete(r);
	cli_close(&k);
}

/* The cache "adm" (backups 1) made through node 0's endpoint, rebalanced. */
static void make_cache(cli *k)
{
	cJSON *a = sargs("cache", "adm", "sync", "full_sync", NULL);
	cJSON_AddNumberToObject(a, "backups", 1);
	cJSON *r = cli_ok(k, "cache.create", a);
	assert_string_equal(S(jstr(result(r), "created")), "adm");
	cJSON_Delete(r);
	cache_everywhere("adm");
}

static void test_cache_commands(void **state)
{
	(void)state;
	cli k0, k1;
	cli_open(&k0, nodes[0]);
	cli_open(&k1, nodes[1]);
	make_cache(&k0);

	/* the config, as another node lists it */
	cJSON *r = cli_ok(&k1, "cache.list", NULL), *o;
	const cJSON *found = NULL;
	cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(result(r), "caches"))
		if (strcmp(S(jstr(o, "name")), "adm") == 0)
			found = o;
	assert_non_null(found);
	assert_string_equal(S(jstr(found, "mode")), "partitioned");
	assert_true(jnum(found, "backups") == 1);
	assert_string_equal(S(jstr(found, "sync")), "full_sync");
	assert_string_equal(S(jstr(found, "atomicity")), "atomic");
	assert_true(jnum(found, "partitions") == 1024);
	assert_true(jnum(found, "size") == 0);
	cJSON_Delete(r);

	/* put on node 0, get on node 1, remove, get: not found naming the key */
	r = cli_ok(&k0, "cache.put", sargs("cache", "adm", "key", "alpha", "value", "one", NULL));
	cJSON_Delete(r);
	r = cli_ok(&k1, "cache.get", sargs("cache", "adm", "key", "alpha", NULL));
	assert_string_equal(S(jstr(result(r), "value")), "one");
	cJSON_Delete(r);
	r = cli_ok(&k1, "cache.remove", sargs("cache", "adm", "key", "alpha", NULL));
	assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(result(r), "removed")));
	cJSON_Delete(r);
	r = cli_ok(&k1, "cache.remove", sargs("cache", "adm", "key", "alpha", NULL));
	assert_true(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(result(r), "removed")));
	cJSON_Delete(r);
	r = cli_err(&k0, "cache.get", sargs("cache", "adm", "key", "alpha", NULL),
	    "DG_ERR_NOT_FOUND");
	assert_non_null(strstr(S(jstr(r, "error")), "alpha"));
	cJSON_Delete(r);

	/* 10 entries (11 puts so far on node 0): a scan limited to 4 is cut */
	for (int i = 0; i < 10; i++) {
		char key[16], val[16];
		snprintf(key, sizeof(key), "s%d", i);
		snprintf(val, sizeof(val), "v%d", i);
		r = cli_ok(&k0, "cache.put", sargs("cache", "adm", "key", key, "value", val, NULL));
		cJSON_Delete(r);
	}
	cJSON *a = sargs("cache", "adm", NULL);
	cJSON_AddNumberToObject(a, "limit", 4);
	r = cli_ok(&k1, "cache.scan", a);
	assert_true(jnum(result(r), "count") == 4);
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(result(r),
	    "entries")), 4);
	assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(result(r), "truncated")));
	cJSON_Delete(r);
	a = sargs("cache", "adm", NULL);
	cJSON_AddNumberToObject(a, "limit", 10);
	r = cli_ok(&k1, "cache.scan", a);
	assert_true(jnum(result(r), "count") == 10);
	assert_true(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(result(r), "truncated")));
	int seen = 0;
	cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(result(r), "entries")) {
		const char *key = jstr(o, "key"), *val = jstr(o, "value");
		assert_non_null(key);
		assert_non_null(val);
		assert_true(key[0] == 's' && val[0] == 'v');
		assert_string_equal(key + 1, val + 1);
		seen |= 1 << atoi(key + 1);
	}
	assert_int_equal(seen, 0x3ff);
	cJSON_Delete(r);
	a = sargs("cache", "adm", NULL);
	cJSON_AddNumberToObject(a, "limit", 0);
	r = cli_err(&k1, "cache.scan", a, "DG_ERR_INVAL");
	cJSON_Delete(r);

	/* state */
	r = cli_ok(&k1, "state", NULL);
	assert_string_equal(S(jstr(result(r), "state")), "ACTIVE");
	assert_string_equal(S(jstr(result(r), "cluster")), CLUSTER);
	assert_true(jnum(result(r), "servers") == NNODES);
	assert_true(jnum(result(r), "clients") == 0);
	cJSON_Delete(r);

	/* metrics: node 0 made every put */
	r = cli_ok(&k0, "metrics", NULL);
	found = NULL;
	cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(result(r), "caches"))
		if (strcmp(S(jstr(o, "cache")), "adm") == 0)
			found = o;
	assert_non_null(found);
	assert_true(jnum(found, "puts") == 11);
	assert_true(jnum(cJSON_GetObjectItemCaseSensitive(found, "put"), "count") == 11);
	cJSON_Delete(r);
	r = cli_ok(&k1, "metrics", NULL);
	cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(result(r), "caches"))
		if (strcmp(S(jstr(o, "cache")), "adm") == 0)
			assert_true(jnum(o, "puts") == 0);
	cJSON_Delete(r);
	cli_close(&k0);
	cli_close(&k1);
}

/* The owners of raw key k in c: primary first. */
static uint32_t owners_of(dg_cache *c, const char *k, uint64_t owners[8])
{
	dg_buf enc;
	dg_writer w;
	dg_buf_init(&enc);
	dg_writer_init(&w, NULL, &enc);
	OK(dg_write_bytes(&w, k, strlen(k)));
	uint64_t hash;
	int64_t topver;
	uint32_t part = dgi_cache_key_part(c, enc.data, enc.len, &hash);
	dg_buf_free(&enc);
	assert_true(dgi_cache_owners(c, part, owners, DGI_OWNERS_BUF, &topver) >= 2);
	return part;
}

static int index_of(uint64_t id)
{
	for (int i = 0; i < NNODES; i++)
		if (nodes[i] != NULL && dg_node_get_id(nodes[i]) == id)
			return i;
	fail_msg("no node %016" PRIx64, id);
	return -1;
}

static cJSON *verify(cli *k)
{
	cJSON *a = cJSON_CreateObject();
	cJSON *names = cJSON_AddArrayToObject(a, "caches");
	cJSON_AddItemToArray(names, cJSON_CreateString("adm"));
	return cli_ok(k, "idle-verify", a);
}

static void test_idle_verify(void **state)
{
	(void)state;
	cli k;
	cli_open(&k, nodes[2]);
	cJSON *r = verify(&k);
	assert_true(jnum(result(r), "divergent_count") == 0);
	assert_true(jnum(result(r), "nodes_unanswered") == 0);
	assert_true(jnum(result(r), "partitions_checked") == 1024);
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(result(r),
	    "divergent")), 0);
	cJSON_Delete(r);

	/* one key, then its backup copy changed behind the primary's back */
	dg_cache *c0, *cb;
	OK(dg_cache_get_by_name(nodes[0], "adm", &c0));
	OK(dg_cache_put(c0, "bent", 4, "straight", 8));
	uint64_t owners[8];
	uint32_t part = owners_of(c0, "bent", owners);
	int backup = index_of(owners[1]);
	OK(dg_cache_get_by_name(nodes[backup], "adm", &cb));
	OK(dgi_cache_debug_put_local(cb, "bent", 4, "crooked", 7));
	r = verify(&k);
	assert_true(jnum(result(r), "divergent_count") == 1);
	const cJSON *div = cJSON_GetObjectItemCaseSensitive(result(r), "divergent");
	assert_int_equal(cJSON_GetArraySize(div), 1);
	const cJSON *d = cJSON_GetArrayItem(div, 0), *cp;
	assert_string_equal(S(jstr(d, "cache")), "adm");
	assert_true(jnum(d, "partition") == part);
	char pid[17], bid[17];
	hex64(owners[0], pid);
	hex64(owners[1], bid);
	const char *pdig = NULL, *bdig = NULL;
	cJSON_ArrayForEach(cp, cJSON_GetObjectItemCaseSensitive(d, "copies")) {
		if (strcmp(S(jstr(cp, "node")), pid) == 0) {
			assert_string_equal(S(jstr(cp, "role")), "primary");
			pdig = jstr(cp, "digest");
		} else if (strcmp(S(jstr(cp, "node")), bid) == 0) {
			assert_string_equal(S(jstr(cp, "role")), "backup");
			assert_string_equal(S(jstr(cp, "address")), dg_node_address(nodes[backup]));
			bdig = jstr(cp, "digest");
		}
		assert_string_equal(S(jstr(cp, "state")), "OWNING");
	}
	assert_non_null(pdig);
	assert_non_null(bdig);
	assert_string_not_equal(pdig, bdig);
	cJSON_Delete(r);

	/* a put writes both copies again: no divergence left */
	OK(dg_cache_put(c0, "bent", 4, "straight", 8));
	r = verify(&k);
	assert_true(jnum(result(r), "divergent_count") == 0);
	cJSON_Delete(r);
	cJSON *a = cJSON_CreateObject();
	cJSON_AddItemToArray(cJSON_AddArrayToObject(a, "caches"), cJSON_CreateString("nope"));
	r = cli_err(&k, "idle-verify", a, "DG_ERR_NOT_FOUND");
	assert_non_null(strstr(S(jstr(r, "error")), "nope"));
	cJSON_Delete(r);
	cli_close(&k);
}

/* ---- transactions ---- */

typedef struct holder {
	dg_node *n;
	dg_cache *c;
	const char *key;
	atomic_bool ready, go;
	dg_err put, commit;
} holder;

/* Begins a PESSIMISTIC tx, locks key by a put, waits for go, commits. */
static void *hold_tx(void *arg)
{
	holder *h = arg;
	dg_tx *tx;
	h->put = dg_tx_begin(h->n, DG_PESSIMISTIC, DG_REPEATABLE_READ, 20000, "held-by-test", &tx);
	if (h->put == DG_OK)
		h->put = dg_tx_put(tx, h->c, h->key, strlen(h->key), "tx-value", 8);
	h->ready = true;
	uint64_t end = now_ms() + 15000;
	while (!h->go && now_ms() < end)
		sleep_ms(5);
	h->commit = h->put == DG_OK ? dg_tx_commit(tx) : dg_tx_rollback(tx);
	return NULL;
}

/* The tx.list entry with this role (and id, when not NULL) on node id. */
static const cJSON *find_tx(const cJSON *list, const char *role, const char *node,
    const char *id)
{
	const cJSON *t;
	cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(list, "txs"))
		if (strcmp(S(jstr(t, "role")), role) == 0 && strcmp(S(jstr(t, "node")), node) == 0 &&
		    (id == NULL || strcmp(S(jstr(t, "id")), id) == 0))
			return t;
	return NULL;
}

static void test_tx_list_and_kill(void **state)
{
	(void)state;
	cli k0, k1, k2;
	cli_open(&k0, nodes[0]);
	cJSON *a = sargs("cache", "admtx", "atomicity", "transactional", NULL);
	cJSON_AddNumberToObject(a, "backups", 1);
	cJSON *r = cli_ok(&k0, "cache.create", a);
	cJSON_Delete(r);
	dg_cache *c0 = cache_everywhere("admtx");
	/* a key whose primary is not node 0 (the near node) */
	static char key[16];
	uint64_t owners[8];
	int primary = 0;
	for (int i = 0; primary == 0 && i < 100; i++) {
		snprintf(key, sizeof(key), "tx%d", i);
		owners_of(c0, key, owners);
		primary = index_of(owners[0]);
	}
	assert_int_not_equal(primary, 0);
	int other = 3 - primary;              /* neither near nor primary */

	holder h = { .n = nodes[0], .c = c0, .key = key };
	pthread_t thr;
	assert_int_equal(pthread_create(&thr, NULL, hold_tx, &h), 0);
	uint64_t end = now_ms() + 5000;
	while (!h.ready && now_ms() < end)
		sleep_ms(5);
	assert_true(h.ready);
	OK(h.put);

	char near_id[17], prim_id[17];
	hex64(dg_node_get_id(nodes[0]), near_id);
	hex64(dg_node_get_id(nodes[primary]), prim_id);
	cli_open(&k1, nodes[primary]);
	r = cli_ok(&k1, "tx.list", NULL);
	const cJSON *nt = find_tx(result(r), "near", near_id, NULL);
	assert_non_null(nt);
	assert_string_equal(S(jstr(nt, "concurrency")), "PESSIMISTIC");
	assert_string_equal(S(jstr(nt, "isolation")), "REPEATABLE_READ");
	assert_string_equal(S(jstr(nt, "label")), "held-by-test");
	assert_string_equal(S(jstr(nt, "near")), near_id);
	assert_string_equal(S(jstr(nt, "address")), dg_node_address(nodes[0]));
	assert_true(jnum(nt, "keys") == 1);
	char id[64];
	snprintf(id, sizeof(id), "%s", jstr(nt, "id"));
	assert_int_equal(strncmp(id, near_id, 16), 0);
	const cJSON *pt = find_tx(result(r), "primary", prim_id, id);
	assert_non_null(pt);
	/* the participant row borrows the near row's label and mode */
	assert_string_equal(S(jstr(pt, "label")), "held-by-test");
	assert_string_equal(S(jstr(pt, "concurrency")), "PESSIMISTIC");
	assert_true(jnum(result(r), "nodes_unanswered") == 0);
	cJSON_Delete(r);

	/* killed from the third node: the holder's commit is rolled back */
	cli_open(&k2, nodes[other]);
	r = cli_err(&k2, "tx.kill", sargs("id", "not-an-id", NULL), "DG_ERR_INVAL");
	cJSON_Delete(r);
	char ghost[64];
	snprintf(ghost, sizeof(ghost), "%s:999999999", near_id);
	r = cli_err(&k2, "tx.kill", sargs("id", ghost, NULL), "DG_ERR_NOT_FOUND");
	cJSON_Delete(r);
	r = cli_ok(&k2, "tx.kill", sargs("id", id, NULL));
	assert_string_equal(S(jstr(result(r), "killed")), id);
	cJSON_Delete(r);
	h.go = true;
	pthread_join(thr, NULL);
	assert_int_equal(h.commit, DG_ERR_TX_ROLLED_BACK);

	/* nothing written; the tx is gone from every node (locks released) */
	r = cli_err(&k2, "cache.get", sargs("cache", "admtx", "key", key, NULL),
	    "DG_ERR_NOT_FOUND");
	cJSON_Delete(r);
	end = now_ms() + 5000;
	for (;;) {
		r = cli_ok(&k2, "tx.list", NULL);
		bool left = false;
		const cJSON *t;
		cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(result(r), "txs"))
			left |= strcmp(S(jstr(t, "id")), id) == 0;
		cJSON_Delete(r);
		if (!left)
			break;
		assert_true(now_ms() < end);
		sleep_ms(20);
	}
	r = cli_ok(&k1, "cache.put", sargs("cache", "admtx", "key", key, "value", "after", NULL));
	cJSON_Delete(r);
	cli_close(&k0);
	cli_close(&k1);
	cli_close(&k2);
}

/* ---- shutdown ---- */

static void wait_calls(int want)
{
	uint64_t end = now_ms() + 5000;
	while (shutdown_calls < want && now_ms() < end)
		sleep_ms(5);
	assert_int_equal(shutdown_calls, want);
}

static void test_shutdown(void **state)
{
	(void)state;
	cli k;
	/* an embedded node without on_shutdown refuses */
	cli_open(&k, nodes[1]);
	cJSON *r = cli_err(&k, "shutdown", NULL, "DG_ERR_UNSUPPORTED");
	cJSON_Delete(r);
	cli_close(&k);
	assert_int_equal(shutdown_calls, 0);

	/* node 0 has one: called once, after its client has the reply */
	reply_seen = false;
	seen_in_callback = false;
	cli_open(&k, nodes[0]);
	r = cli_ok(&k, "shutdown", NULL);
	reply_seen = true;
	const cJSON *st = cJSON_GetObjectItemCaseSensitive(result(r), "stopping");
	assert_int_equal(cJSON_GetArraySize(st), 1);
	char me[17];
	hex64(dg_node_get_id(nodes[0]), me);
	assert_string_equal(S(jstr(cJSON_GetArrayItem(st, 0), "id")), me);
	cJSON_Delete(r);
	wait_calls(1);
	r = cli_ok(&k, "state", NULL);     /* the callback returned */
	cJSON_Delete(r);
	assert_true(seen_in_callback);
	sleep_ms(100);
	assert_int_equal(shutdown_calls, 1);

	/* --cluster: the others refuse (embedded), this one stops once more */
	reply_seen = false;
	seen_in_callback = false;
	cJSON *a = cJSON_CreateObject();
	cJSON_AddTrueToObject(a, "cluster");
	r = cli_ok(&k, "shutdown", a);
	reply_seen = true;
	st = cJSON_GetObjectItemCaseSensitive(result(r), "stopping");
	assert_int_equal(cJSON_GetArraySize(st), NNODES);
	const cJSON *o;
	cJSON_ArrayForEach(o, st) {
		if (strcmp(S(jstr(o, "id")), me) == 0)
			assert_null(cJSON_GetObjectItemCaseSensitive(o, "error"));
		else
			assert_non_null(strstr(S(jstr(o, "error")), "embedded"));
	}
	cJSON_Delete(r);
	wait_calls(2);
	r = cli_ok(&k, "state", NULL);
	cJSON_Delete(r);
	assert_true(seen_in_callback);
	cli_close(&k);
}

/* ---- limits ---- */

/* Dials n: true and the connection authenticated when served, false when
 * refused as busy after proving the secret (and closed). */
static bool try_open(cli *k, dg_node *n)
{
	cli_dial(k, dg_node_admin_address(n));
	cli_hello(k, n);
	char proof[65], mine[65];
	cJSON *w = cli_auth(k, SECRET, CLUSTER, proof, mine);
	if (!jok(w)) {
		assert_string_equal(S(jstr(w, "error")), "too many admin connections");
		cJSON_Delete(w);
		cli_expect_closed(k);
		cli_close(k);
		return false;
	}
	assert_string_equal(S(jstr(w, "mac")), proof);
	cJSON_Delete(w);
	return true;
}

/* DGI_ADMIN_CONNS authenticated sessions at once; the next client that
 * proves the secret is told so and closed. */
static void test_connection_limit(void **state)
{
	(void)state;
	cli k[DGI_ADMIN_CONNS], extra;
	for (int i = 0; i < DGI_ADMIN_CONNS; i++)
		assert_true(try_open(&k[i], nodes[2])); /* each one has its session */
	assert_false(try_open(&extra, nodes[2]));
	assert_false(try_open(&extra, nodes[2]));
	/* the sessions serve meanwhile */
	cJSON *r = cli_ok(&k[3], "state", NULL);
	cJSON_Delete(r);
	for (int i = 0; i < DGI_ADMIN_CONNS; i++)
		cli_close(&k[i]);
	/* the node notices the closes by itself: a new client is served */
	uint64_t end = now_ms() + 3000;
	int tries = 1;
	while (!try_open(&extra, nodes[2])) {
		assert_true(now_ms() < end);
		sleep_ms(20);
		tries++;
	}
	r = cli_ok(&extra, "state", NULL);
	cJSON_Delete(r);
	cli_close(&extra);
	print_message("served after %d tries\n", tries);
	/* and all the slots again */
	for (int i = 0; i < DGI_ADMIN_CONNS; i++) {
		end = now_ms() + 3000;
		while (!try_open(&k[i], nodes[2])) {
			assert_true(now_ms() < end);
			sleep_ms(20);
		}
	}
	for (int i = 0; i < DGI_ADMIN_CONNS; i++)
		cli_close(&k[i]);
}

/* Sockets opened by a client without the secret, more than every slot,
 * never keep an authenticated dgctl out: they hold no session slot, and
 * past DGI_ADMIN_HANDSHAKES the oldest is closed to make room (issue 14:
 * 12 threads reopening sockets kept every dgctl refused, "too many admin
 * connections", for as long as they ran).  Idle ones end within
 * DGI_ADMIN_AUTH_MS. */
struct flooder {
	const char *url;
	_Atomic bool stop;
	int opened;
};

/* As the finding's clients did: opens a socket, says nothing, holds it
 * until the node closes it (or 300 ms), and opens the next. */
static void *flood_main(void *arg)
{
	struct flooder *f = arg;
	nng_stream_dialer *d;
	if (nng_stream_dialer_alloc(&d, f->url) != 0)
		return NULL;
	nng_aio *aio;
	if (nng_aio_alloc(&aio, NULL, NULL) != 0) {
		nng_stream_dialer_free(d);
		return NULL;
	}
	while (!atomic_load(&f->stop)) {
		nng_aio_set_timeout(aio, 1000);
		nng_stream_dialer_dial(d, aio);
		nng_aio_wait(aio);
		if (nng_aio_result(aio) != 0)
			continue;
		nng_stream *st = nng_aio_get_output(aio, 0);
		f->opened++;
		uint8_t junk[256];
		nng_iov iov = { junk, sizeof(junk) };
		uint64_t end = now_ms() + 300;
		while (!atomic_load(&f->stop) && now_ms() < end) {
			nng_aio_set_iov(aio, 1, &iov);
			nng_aio_set_timeout(aio, 50);
			nng_stream_recv(st, aio);
			nng_aio_wait(aio);
			int rv = nng_aio_result(aio);
			if (rv != 0 && rv != NNG_ETIMEDOUT)
				break; /* the node closed it */
		}
		nng_stream_close(st);
		nng_stream_free(st);
	}
	nng_aio_free(aio);
	nng_stream_dialer_free(d);
	return NULL;
}

static void test_admin_flood_cannot_lock_out(void **state)
{
	(void)state;
	dg_node *n = nodes[1];
	const char *url = dg_node_admin_address(n);
	/* more silent sockets than every slot there is */
	enum { SILENT = DGI_ADMIN_CONNS + DGI_ADMIN_HANDSHAKES + 8 };
	cli idle[SILENT];
	for (int i = 0; i < SILENT; i++)
		cli_dial(&idle[i], url);
	uint64_t t0 = now_ms();
	cli k;
	cli_open(&k, n); /* in, at once */
	cJSON *r = cli_ok(&k, "state", NULL);
	cJSON_Delete(r);
	cli_close(&k);
	uint64_t took = now_ms() - t0;
	print_message("      with %d silent sockets open: in after %llu ms\n", SILENT,
	    (unsigned long long)took);
	assert_true(took < 2000);
	/* and while twelve threads keep opening sockets */
	enum { NF = 12 };
	struct flooder f[NF];
	pthread_t th[NF];
	for (int i = 0; i < NF; i++) {
		f[i].url = url;
		atomic_init(&f[i].stop, false);
		f[i].opened = 0;
		assert_int_equal(pthread_create(&th[i], NULL, flood_main, &f[i]), 0);
	}
	int opened = 0;
	for (int round = 0; round < 10; round++) {
		cli_open(&k, n);
		r = cli_ok(&k, "state", NULL);
		cJSON_Delete(r);
		cli_close(&k);
		sleep_ms(200);
	}
	for (int i = 0; i < NF; i++) {
		atomic_store(&f[i].stop, true);
		pthread_join(th[i], NULL);
		opened += f[i].opened;
	}
	print_message("      10 of 10 sessions served while %d sockets were opened\n", opened);
	assert_true(opened >= 3 * NF);
	/* the silent ones were closed by the node: within the handshake
	 * deadline, or sooner when evicted */
	for (int i = 0; i < SILENT; i++) {
		char *raw = NULL;
		size_t len;
		dg_err e;
		while ((e = dgi_aconn_recv(&idle[i].c, &raw, &len)) == DG_OK)
			dgi_free(raw); /* its HELLO, if it got that far */
		assert_int_not_equal(e, DG_ERR_TIMEOUT);
		cli_close(&idle[i]);
	}
}

/* A client whose handshake is slow (it got HELLO and answers late, as
 * dgctl does under load) is not the one closed to make room while a burst
 * of newer sockets arrives, as long as the burst fits in the handshake
 * slots: with 16 of them, 40 sockets reopened by a flood (connect, close)
 * that the node had not reaped yet closed dgctl's handshake in CI ("the
 * node closed the connection"); there are DGI_ADMIN_HANDSHAKES = 64. */
static void test_slow_handshake_survives_a_burst(void **state)
{
	(void)state;
	dg_node *n = nodes[1];
	const char *url = dg_node_admin_address(n);
	cli k;
	cli_dial(&k, url);
	cli_hello(&k, n);          /* HELLO read; the answer comes late */
	enum { BURST = 40 };
	static_assert(BURST < DGI_ADMIN_HANDSHAKES, "the burst fits in the slots");
	cli burst[BURST];
	for (int i = 0; i < BURST; i++)
		cli_dial(&burst[i], url);
	sleep_ms(300);             /* the node accepted every one of them */
	cli_login(&k);
	cJSON *r = cli_ok(&k, "state", NULL);
	cJSON_Delete(r);
	cli_close(&k);
	for (int i = 0; i < BURST; i++)
		cli_close(&burst[i]);
}

/* ---- stop ---- */

static void test_stop_with_idle_clients(void **state)
{
	(void)state;
	dg_node *n = start_node(NULL, false);
	cli idle, silent;
	cli_open(&idle, n);
	cJSON *r = cli_ok(&idle, "state", NULL);
	cJSON_Delete(r);
	cli_dial(&silent, dg_node_admin_address(n));
	sleep_ms(50);
	uint64_t t0 = now_ms();
	dg_node_stop(n);
	uint64_t took = now_ms() - t0;
	print_message("dg_node_stop took %" PRIu64 " ms\n", took);
	assert_true(took < 2000);
	cli_expect_closed(&idle);
	cli_hello(&silent, NULL);          /* sent before the stop */
	cli_expect_closed(&silent);
	cli_close(&idle);
	cli_close(&silent);
}

/* ---- fan-out to a node that died ---- */

/* idle-verify's partition rows come from peers: a partition number out of
 * range is dropped, never cast (a double of 1e300 cast to uint32_t is
 * undefined behaviour; before the check every row below was kept). */
static void test_idle_rows_out_of_range(void **state)
{
	(void)state;
	static const char *rows =
	    "{\"parts\":[[5,0,\"OWNING\",1,\"d\",10],[1e300,0,\"OWNING\",1,\"d\",10],"
	    "[-1,0,\"OWNING\",1,\"d\",10],[\"7\",0,\"OWNING\",1,\"d\",10],"
	    "[65536,1,\"OWNING\",2,\"e\",20],[65537,1,\"OWNING\",2,\"e\",20]]}";
	dgi_fanres r;
	memset(&r, 0, sizeof(r));
	r.err = DG_OK;
	r.result = cJSON_Parse(rows);
	assert_non_null(r.result);
	assert_int_equal(dgi_idle_rows_kept(&r, 1), 2); /* 5 and 65536 */
	cJSON_Delete(r.result);
}

static void test_nodes_after_kill(void **state)
{
	(void)state;
	cli k;
	cli_open(&k, nodes[0]);
	uint64_t dead = dg_node_get_id(nodes[2]);
	char dead_id[17];
	hex64(dead, dead_id);
	dgi_node_kill(nodes[2]);
	nodes[2] = NULL;
	uint64_t t0 = now_ms();
	cJSON *r = cli_ok(&k, "nodes", NULL);
	uint64_t took = now_ms() - t0;
	print_message("nodes after a kill took %" PRIu64 " ms\n", took);
	assert_true(took < 10000 + 2000);         /* the fan-out's bound, FANOUT_MS */
	const cJSON *o;
	int live = 0;
	cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(result(r), "nodes")) {
		if (strcmp(S(jstr(o, "id")), dead_id) == 0) {
			assert_non_null(jstr(o, "error"));
			print_message("the dead node: \"%s\"\n", jstr(o, "error"));
		} else {
			assert_null(cJSON_GetObjectItemCaseSensitive(o, "error"));
			live++;
		}
	}
	assert_int_equal(live, NNODES - 1);
	cJSON_Delete(r);
	/* and state, which fans out too */
	t0 = now_ms();
	r = cli_ok(&k, "state", NULL);
	assert_true(now_ms() - t0 < 10000 + 2000);
	cJSON_Delete(r);
	cli_close(&k);
}

/* ---- large values (dgctl's commands that carry values) ----
 *
 * Values of 1.5 to 8 MiB, and enough of them that one answer passes the
 * peers' frame limit (recv_max, 16 MiB) or the admin frame limit
 * (DGI_ADMIN_FRAME_MAX, 64 MiB).  What a user of dgctl needs: the command
 * succeeds with whole data, or fails at once with an error that names the
 * limit; never a hang, a cut or corrupt answer, or a connection closed
 * without a word.  The client waits BIG_MS for an answer (to see what
 * comes); the times are printed, not asserted (dgbench times things). */

#define BIG_MS 30000
#define MIB (1024u * 1024u)
#define VAL_MAX_RAW (DG_VALUE_MAX - 8)      /* the largest raw value dg_cache_put takes */

/* n bytes: printable ASCII (with '"' and '\\', which JSON escapes) or any
 * byte, from seed */
static uint8_t *big_value(size_t n, unsigned seed, bool printable)
{
	uint8_t *p = malloc(n + 1);
	assert_non_null(p);
	uint32_t x = seed * 2654435761u + 12345u;
	for (size_t i = 0; i < n; i++) {
		x = x * 1103515245u + 12345u;
		uint8_t b = (uint8_t)(x >> 16);
		p[i] = printable ? (uint8_t)(0x20 + b % 95) : b;
	}
	p[n] = 0;
	return p;
}

/* One answer within BIG_MS; fails the test saying what came instead (the
 * time it took, the transport's error).  *ms: how long it took. */
static cJSON *big_call(cli *k, const char *cmd, cJSON *args, uint64_t *ms)
{
	uint32_t was = k->c.timeout_ms;
	k->c.timeout_ms = BIG_MS;
	uint64_t t0 = now_ms();
	cli_request(k, cmd, args);
	char *raw = NULL;
	size_t len = 0;
	dg_err e = dgi_aconn_recv(&k->c, &raw, &len);
	*ms = now_ms() - t0;
	k->c.timeout_ms = was;
	if (e != DG_OK)
		fail_msg("%s: no answer: %s after %" PRIu64 " ms (the node %s)", cmd,
		    dg_strerror(e), *ms, e == DG_ERR_TIMEOUT ? "never answered" :
		    "closed the connection without an error message");
	cJSON *o = cJSON_ParseWithLength(raw, len);
	if (o == NULL)
		fail_msg("%s: an answer of %zu bytes that is not JSON (cut or corrupt)", cmd, len);
	dgi_free(raw);
	return o;
}

/* Whether an error text names a size limit. */
static bool names_limit(const char *why, const char *const *words)
{
	if (why == NULL)
		return false;
	for (; *words != NULL; words++)
		if (strstr(why, *words) != NULL)
			return true;
	return false;
}

/* A cache named name (backups 1, FULL_SYNC) made through k, known
 * everywhere; node i's handle in out[i]. */
static void big_cache(cli *k, const char *name, dg_cache *out[NNODES])
{
	cJSON *a = sargs("cache", name, "sync", "full_sync", NULL);
	cJSON_AddNumberToObject(a, "backups", 1);
	cJSON *r = cli_ok(k, "cache.create", a);
	cJSON_Delete(r);
	cache_everywhere(name);
	for (int i = 0; i < NNODES; i++)
		OK(dg_cache_get_by_name(nodes[i], name, &out[i]));
}

static void big_destroy(cli *k, const char *name)
{
	cJSON *r = cli_ok(k, "cache.destroy", sargs("cache", name, NULL));
	cJSON_Delete(r);
}

/* A key of c whose primary is not node 0 (the admin node of the tests):
 * its value travels between nodes before the admin answer. */
static void remote_key(dg_cache *c, const char *prefix, char *key, size_t cap)
{
	uint64_t owners[8];
	for (int i = 0; i < 1000; i++) {
		snprintf(key, cap, "%s%d", prefix, i);
		owners_of(c, key, owners);
		if (index_of(owners[0]) != 0)
			return;
	}
	fail_msg("no key of prefix %s has its primary off node 0", prefix);
}

/* The "value" of an admin answer as bytes: "0x" + hex, or the string. */
static bool value_is(const char *got, const uint8_t *want, size_t n)
{
	if (got == NULL)
		return false;
	size_t gl = strlen(got);
	if (gl == n && memcmp(got, want, n) == 0)
		return true;
	if (gl != 2 + 2 * n || got[0] != '0' || got[1] != 'x')
		return false;
	static const char d[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++)
		if (got[2 + 2 * i] != d[want[i] >> 4] || got[3 + 2 * i] != d[want[i] & 15])
			return false;
	return true;
}

/* cache.get of values up to the largest one (binary: 16 MiB of hex in the
 * answer; printable: escapes), each read from a primary on another node. */
static void test_admin_get_large_values(void **state)
{
	(void)state;
	cli k;
	cli_open(&k, nodes[0]);
	dg_cache *c[NNODES];
	big_cache(&k, "admget", c);
	static const struct { size_t n; bool printable; } cases[] = {
		{ 3 * MIB / 2, true }, { 3 * MIB / 2, false }, { VAL_MAX_RAW, true },
		{ VAL_MAX_RAW, false },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char key[32];
		remote_key(c[0], i % 2 ? "gb" : "gp", key, sizeof(key));
		uint8_t *v = big_value(cases[i].n, (unsigned)i + 1, cases[i].printable);
		OK(dg_cache_put(c[1], key, strlen(key), v, cases[i].n));
		uint64_t ms;
		cJSON *r = big_call(&k, "cache.get", sargs("cache", "admget", "key", key, NULL), &ms);
		if (!jok(r))
			fail_msg("cache.get of %zu %s bytes: %s (%s)", cases[i].n,
			    cases[i].printable ? "printable" : "binary", S(jstr(r, "error")),
			    S(jstr(r, "code")));
		if (!value_is(jstr(result(r), "value"), v, cases[i].n))
			fail_msg("cache.get of %zu %s bytes: the value is not whole (%zu chars)",
			    cases[i].n, cases[i].printable ? "printable" : "binary",
			    strlen(S(jstr(result(r), "value"))));
		print_message("cache.get %zu %s bytes: %" PRIu64 " ms\n", cases[i].n,
		    cases[i].printable ? "printable" : "binary", ms);
		cJSON_Delete(r);
		free(v);
	}
	big_destroy(&k, "admget");
	cli_close(&k);
}

/* cache.put carries a value in: values up to the largest one are stored
 * whole (one of 0x01 bytes is a 48 MiB request: \u0001 each), one byte
 * past DG_VALUE_MAX - 8 is refused at once naming the limit. */
static void test_admin_put_large_values(void **state)
{
	(void)state;
	cli k;
	cli_open(&k, nodes[0]);
	dg_cache *c[NNODES];
	big_cache(&k, "admput", c);
	static const struct { size_t n; int kind; } cases[] = {  /* kind: 0 printable, 1 0x01s */
		{ 3 * MIB / 2, 0 }, { VAL_MAX_RAW, 0 }, { VAL_MAX_RAW, 1 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char key[32];
		remote_key(c[0], i ? "pb" : "pp", key, sizeof(key));
		uint8_t *v = cases[i].kind == 0 ? big_value(cases[i].n, (unsigned)i + 7, true) :
		    malloc(cases[i].n + 1);
		assert_non_null(v);
		if (cases[i].kind == 1) {
			memset(v, 1, cases[i].n);
			v[cases[i].n] = 0;
		}
		uint64_t ms;
		cJSON *r = big_call(&k, "cache.put", sargs("cache", "admput", "key", key,
		    "value", (const char *)v, NULL), &ms);
		if (!jok(r))
			fail_msg("cache.put of %zu bytes: %s (%s)", cases[i].n, S(jstr(r, "error")),
			    S(jstr(r, "code")));
		cJSON_Delete(r);
		dg_buf got;
		dg_buf_init(&got);
		OK(dg_cache_get(c[2], key, strlen(key), &got));
		assert_int_equal(got.len, cases[i].n);
		assert_memory_equal(got.data, v, cases[i].n);
		dg_buf_free(&got);
		print_message("cache.put %zu bytes (kind %d): %" PRIu64 " ms\n", cases[i].n,
		    cases[i].kind, ms);
		free(v);
	}
	/* 8 MiB: past the largest value by 8 bytes */
	uint8_t *v = big_value(DG_VALUE_MAX, 99, true);
	uint64_t ms;
	cJSON *r = big_call(&k, "cache.put", sargs("cache", "admput", "key", "over", "value",
	    (const char *)v, NULL), &ms);
	free(v);
	if (jok(r))
		fail_msg("cache.put of %u bytes (past DG_VALUE_MAX - 8) answered ok", DG_VALUE_MAX);
	static const char *const words[] = { "8388600", "8388608", "DG_VALUE_MAX", "8 MiB",
		"too large", "limit", NULL };
	if (!names_limit(jstr(r, "error"), words))
		fail_msg("cache.put of %u bytes: refused, but the error does not name the "
		    "limit: \"%s\" (%s)", DG_VALUE_MAX, S(jstr(r, "error")), S(jstr(r, "code")));
	cJSON_Delete(r);
	big_destroy(&k, "admput");
	cli_close(&k);
}

/* cache.scan: 12 printable values of 1.5 MiB (18 MiB, past a peer frame)
 * come whole; then 6 binary values of DG_VALUE_MAX - 8 (96 MiB of hex,
 * past the admin frame): limit 3 (48 MiB) comes whole, the default limit
 * either comes whole (or cut and marked truncated) or is refused naming
 * the limit — and the connection still answers. */
static void test_admin_scan_large_values(void **state)
{
	(void)state;
	cli k;
	cli_open(&k, nodes[0]);
	dg_cache *c[NNODES];
	big_cache(&k, "admscan", c);
	enum { NP = 12, NB = 6 };
	uint8_t *pv[NP];
	for (int i = 0; i < NP; i++) {
		char key[16];
		snprintf(key, sizeof(key), "sp%d", i);
		pv[i] = big_value(3 * MIB / 2, (unsigned)i + 100, true);
		OK(dg_cache_put(c[i % NNODES], key, strlen(key), pv[i], 3 * MIB / 2));
	}
	uint64_t ms;
	cJSON *r = big_call(&k, "cache.scan", sargs("cache", "admscan", NULL), &ms);
	if (!jok(r))
		fail_msg("cache.scan of %d x 1.5 MiB: %s (%s)", NP, S(jstr(r, "error")),
		    S(jstr(r, "code")));
	assert_true(jnum(result(r), "count") == NP);
	assert_true(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(result(r), "truncated")));
	int seen = 0;
	const cJSON *o;
	cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(result(r), "entries")) {
		const char *key = S(jstr(o, "key"));
		int i = atoi(key + 2);
		assert_true(strncmp(key, "sp", 2) == 0 && i >= 0 && i < NP);
		if (!value_is(jstr(o, "value"), pv[i], 3 * MIB / 2))
			fail_msg("cache.scan: %s's value is not whole", key);
		seen |= 1 << i;
	}
	assert_int_equal(seen, (1 << NP) - 1);
	print_message("cache.scan %d x 1.5 MiB printable: %" PRIu64 " ms\n", NP, ms);
	cJSON_Delete(r);
	for (int i = 0; i < NP; i++)
		free(pv[i]);
	big_destroy(&k, "admscan");

	big_cache(&k, "admscan", c);
	uint8_t *bv[NB];
	for (int i = 0; i < NB; i++) {
		char key[16];
		snprintf(key, sizeof(key), "sb%d", i);
		bv[i] = big_value(VAL_MAX_RAW, (unsigned)i + 200, false);
		OK(dg_cache_put(c[i % NNODES], key, strlen(key), bv[i], VAL_MAX_RAW));
	}
	/* limit 3: 48 MiB of hex, under the admin frame */
	cJSON *a = sargs("cache", "admscan", NULL);
	cJSON_AddNumberToObject(a, "limit", 3);
	r = big_call(&k, "cache.scan", a, &ms);
	if (!jok(r))
		fail_msg("cache.scan --limit 3 of 8 MiB values: %s (%s)", S(jstr(r, "error")),
		    S(jstr(r, "code")));
	assert_true(jnum(result(r), "count") == 3);
	assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(result(r), "truncated")));
	cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(result(r), "entries")) {
		int i = atoi(S(jstr(o, "key")) + 2);
		assert_true(i >= 0 && i < NB);
		if (!value_is(jstr(o, "value"), bv[i], VAL_MAX_RAW))
			fail_msg("cache.scan --limit 3: sb%d's value is not whole", i);
	}
	print_message("cache.scan --limit 3 of 8 MiB binary (48 MiB answer): %" PRIu64 " ms\n",
	    ms);
	cJSON_Delete(r);

	/* the default limit (100): 96 MiB of hex, past DGI_ADMIN_FRAME_MAX */
	r = big_call(&k, "cache.scan", sargs("cache", "admscan", NULL), &ms);
	print_message("cache.scan of %d x 8 MiB binary: %s after %" PRIu64 " ms\n", NB,
	    jok(r) ? "ok" : S(jstr(r, "error")), ms);
	if (jok(r)) {
		int n = 0;
		cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(result(r), "entries")) {
			int i = atoi(S(jstr(o, "key")) + 2);
			assert_true(i >= 0 && i < NB);
			if (!value_is(jstr(o, "value"), bv[i], VAL_MAX_RAW))
				fail_msg("cache.scan: sb%d's value is not whole", i);
			n++;
		}
		assert_true(jnum(result(r), "count") == n);
		if (n < NB && !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(result(r),
		    "truncated")))
			fail_msg("cache.scan: %d of %d entries, not marked truncated", n, NB);
	} else {
		static const char *const words[] = { "64 MiB", "67108864", "DGI_ADMIN_FRAME_MAX",
			"limit", "too large", NULL };
		if (!names_limit(jstr(r, "error"), words))
			fail_msg("cache.scan refused, but the error does not name the limit: "
			    "\"%s\" (%s)", S(jstr(r, "error")), S(jstr(r, "code")));
	}
	cJSON_Delete(r);
	/* the session goes on */
	r = cli_ok(&k, "state", NULL);
	cJSON_Delete(r);
	for (int i = 0; i < NB; i++)
		free(bv[i]);
	big_destroy(&k, "admscan");
	cli_close(&k);
}

typedef struct big_holder {
	dg_node *n;
	dg_cache *c;
	int nkeys;
	size_t vlen;
	atomic_bool ready, go;
	dg_err put;
} big_holder;

/* A PESSIMISTIC tx that writes nkeys values of vlen bytes, waits for go,
 * rolls back. */
static void *hold_big_tx(void *arg)
{
	big_holder *h = arg;
	dg_tx *tx = NULL;
	uint8_t *v = big_value(h->vlen, 5, false);
	h->put = dg_tx_begin(h->n, DG_PESSIMISTIC, DG_REPEATABLE_READ, 30000, "big-tx", &tx);
	for (int i = 0; h->put == DG_OK && i < h->nkeys; i++) {
		char key[16];
		snprintf(key, sizeof(key), "tb%d", i);
		h->put = dg_tx_put(tx, h->c, key, strlen(key), v, h->vlen);
	}
	free(v);
	h->ready = true;
	uint64_t end = now_ms() + 20000;
	while (!h->go && now_ms() < end)
		sleep_ms(5);
	if (tx != NULL)
		dg_tx_rollback(tx);
	return NULL;
}

/* tx.list while a tx holds 10 writes of 2 MiB (20 MiB, past a peer frame):
 * the list names the tx and its key count (no values travel). */
static void test_admin_tx_list_large_values(void **state)
{
	(void)state;
	cli k0, k1;
	cli_open(&k0, nodes[0]);
	cJSON *a = sargs("cache", "admbigtx", "atomicity", "transactional", NULL);
	cJSON_AddNumberToObject(a, "backups", 1);
	cJSON *r = cli_ok(&k0, "cache.create", a);
	cJSON_Delete(r);
	dg_cache *c0 = cache_everywhere("admbigtx");
	big_holder h = { .n = nodes[0], .c = c0, .nkeys = 10, .vlen = 2 * MIB };
	pthread_t thr;
	assert_int_equal(pthread_create(&thr, NULL, hold_big_tx, &h), 0);
	uint64_t end = now_ms() + 15000;
	while (!h.ready && now_ms() < end)
		sleep_ms(5);
	assert_true(h.ready);
	OK(h.put);
	char near_id[17];
	hex64(dg_node_get_id(nodes[0]), near_id);
	cli_open(&k1, nodes[1]);
	uint64_t ms;
	r = big_call(&k1, "tx.list", NULL, &ms);
	assert_true(jok(r));
	const cJSON *nt = find_tx(result(r), "near", near_id, NULL);
	assert_non_null(nt);
	assert_true(jnum(nt, "keys") == 10);
	assert_string_equal(S(jstr(nt, "label")), "big-tx");
	cJSON_Delete(r);
	h.go = true;
	pthread_join(thr, NULL);
	big_destroy(&k0, "admbigtx");
	cli_close(&k0);
	cli_close(&k1);
}

/* ---- test table ---- */

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_handshake_right_secret),
		cmocka_unit_test(test_handshake_wrong_secret),
		cmocka_unit_test(test_handshake_wrong_cluster),
		cmocka_unit_test(test_handshake_garbage),
		cmocka_unit_test(test_silent_client_blocks_nobody),
		cmocka_unit_test(test_dispatch_errors),
		cmocka_unit_test(test_requests_in_order),
		cmocka_unit_test(test_nodes),
		cmocka_unit_test(test_cache_commands),
		cmocka_unit_test(test_rebalance_counts_repairing),
		cmocka_unit_test(test_cache_create_bad_numbers),
		cmocka_unit_test(test_idle_verify),
		cmocka_unit_test(test_tx_list_and_kill),
		cmocka_unit_test(test_admin_get_large_values),
		cmocka_unit_test(test_admin_put_large_values),
		cmocka_unit_test(test_admin_scan_large_values),
		cmocka_unit_test(test_admin_tx_list_large_values),
		cmocka_unit_test(test_shutdown),
		cmocka_unit_test(test_connection_limit),
		cmocka_unit_test(test_admin_flood_cannot_lock_out),
		cmocka_unit_test(test_slow_handshake_survives_a_burst),
		cmocka_unit_test(test_stop_with_idle_clients),
		cmocka_unit_test(test_nodes_after_kill),
		cmocka_unit_test(test_idle_rows_out_of_range),
	};
	const char *only = getenv("DGT_TEST_FILTER");   /* e.g. "test_nodes*" */
	if (only == NULL)
		only = getenv("DG_TEST_FILTER");       /* as the other suites */
	if (only != NULL)
		cmocka_set_test_filter(only);
	return cmocka_run_group_tests_name("admin", tests, group_setup, group_teardown);
}
