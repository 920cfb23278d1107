/*
 * node_http_test.c — unit tests of the node's HTTP server (node/http.c,
 * node/http_parse.c) and of what a node agrees to listen on without a
 * secret (issue 14, findings 4, 7 and 8).
 *
 * What they promise:
 *  - idle sockets past http_max_connections are closed, oldest first, so a
 *    flood of them never keeps a scrape out; a connection that sends no
 *    request, or half a head, is closed after http_idle_timeout_ms;
 *  - with http_auth_basic / http_auth_token set, a request without the
 *    credential gets 401 with WWW-Authenticate, with it 200;
 *  - HEAD has headers and no body; another method 405 with Allow; a
 *    malformed head 400; a head above 8 KiB 431; a request body 400;
 *    keep-alive requests pipelined in one write are all answered in order;
 *  - the parser alone: complete, incomplete and malformed heads;
 *  - the dashboard: /, /dashboard.css and /dashboard.js are served with
 *    their types and a Content-Security-Policy; /api/NAME answers the read
 *    admin commands as JSON (a one-node cluster: ACTIVE, every partition
 *    of a cache primary here); a command that changes anything has no
 *    name under /api/ (404); only GET and HEAD; behind the same
 *    authentication as /metrics;
 *  - dg_node_start refuses a non-loopback listen, admin or HTTP address
 *    without a secret unless insecure, and http:// on a node with TLS
 *    files.
 * The client is a plain socket with a receive timeout (a hang fails the
 * test instead of blocking it).  No main(): dgt_http_tests() runs the
 * group; tests/node_test.c calls it.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "node/datagrid.h"
#include "node/http_parse.h"

#include <cjson/cJSON.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int dgt_http_tests(void);

#define OK(x) assert_int_equal((x), DG_OK)

static dg_node *start_http_node(uint32_t max_conns, uint32_t idle_ms, const char *basic,
    const char *token)
{
	dg_node_config cfg;
	dg_node_config_init(&cfg);
	cfg.listen_url = "tcp://127.0.0.1:0";
	cfg.cluster_name = "http-test";
	cfg.failure_timeout_ms = 2000;
	cfg.heartbeat_ms = 100;
	cfg.http_url = "http://127.0.0.1:0";
	cfg.http_max_connections = max_conns;
	cfg.http_idle_timeout_ms = idle_ms;
	cfg.http_auth_basic = basic;
	cfg.http_auth_token = token;
	dg_node *n = NULL;
	OK(dg_node_start(&cfg, &n));
	return n;
}

/* A connected socket to n's HTTP port; reads time out after 5 s. */
static int dial(dg_node *n)
{
	unsigned port = 0;
	assert_int_equal(sscanf(dg_node_http_address(n), "http://127.0.0.1:%u", &port), 1);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	struct timeval tv = { 5, 0 };
	assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

static void send_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		assert_true(w > 0);
		p += w;
		n -= (size_t)w;
	}
}

/* Everything the server sends until it closes (fails on a 5 s silence).
 * NUL-terminated, malloc'ed. */
static char *read_to_eof(int fd, size_t *len)
{
	size_t have = 0, cap = 1 << 16;
	char *b = malloc(cap);
	assert_non_null(b);
	for (;;) {
		if (cap - have < 4096) {
			cap *= 2;
			b = realloc(b, cap);
			assert_non_null(b);
		}
		ssize_t r = read(fd, b + have, cap - have - 1);
		assert_true(r >= 0);   /* -1: EAGAIN after 5 s: the server hung */
		if (r == 0)
			break;
		have += (size_t)r;
	}
	b[have] = 0;
	if (len != NULL)
		*len = have;
	return b;
}

/* Sends req on a new connection, returns all of the answer (to EOF). */
static char *exchange(dg_node *n, const char *req, size_t len)
{
	int fd = dial(n);
	send_all(fd, req, len);
	char *all = read_to_eof(fd, NULL);
	close(fd);
	return all;
}

static int status_of(const char *resp)
{
	int st = 0;
	assert_int_equal(sscanf(resp, "HTTP/1.1 %d", &st), 1);
	return st;
}

static int count(const char *hay, const char *needle)
{
	int c = 0;
	for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
		c++;
	return c;
}

/* True when fd was closed by the server within ms (EOF or reset). */
static bool closed_within(int fd, int ms)
{
	struct pollfd p = { fd, POLLIN, 0 };
	if (poll(&p, 1, ms) <= 0)
		return false;
	char c;
	return recv(fd, &c, 1, MSG_DONTWAIT) <= 0;
}

static void test_idle_flood_cannot_lock_out(void **state)
{
	(void)state;
	enum { CAP = 8, FLOOD = 40 };
	dg_node *n = start_http_node(CAP, 60000, NULL, NULL);
	int fds[FLOOD];
	for (int i = 0; i < FLOOD; i++)
		fds[i] = dial(n);
	/* a scrape gets in and is answered */
	static const char get[] = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
	char *r = exchange(n, get, sizeof(get) - 1);
	assert_int_equal(status_of(r), 200);
	assert_non_null(strstr(r, "datagrid_"));
	free(r);
	/* and the flood was cut down to the cap: at least FLOOD - CAP + 1 of
	 * its sockets were closed by the server (nng's HTTP server kept them
	 * all, until the file table was full) */
	int closed = 0;
	for (int i = 0; i < FLOOD; i++) {
		closed += closed_within(fds[i], i == 0 ? 2000 : 50);
		close(fds[i]);
	}
	assert_true(closed >= FLOOD - CAP + 1);
	dg_node_stop(n);
}

static void test_idle_and_slow_heads_time_out(void **state)
{
	(void)state;
	dg_node *n = start_http_node(0, 300, NULL, NULL);
	int silent = dial(n), slow = dial(n), kept = dial(n);
	send_all(slow, "GET /metrics HTTP/1.1\r\nHost:", 28);
	static const char get[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
	send_all(kept, get, sizeof(get) - 1);
	/* each is closed by the server (EOF before the 5 s read timeout) */
	free(read_to_eof(silent, NULL));
	free(read_to_eof(slow, NULL));
	char *r = read_to_eof(kept, NULL);  /* answered, then idle: closed */
	assert_int_equal(status_of(r), 200);
	assert_non_null(strstr(r, "Connection: keep-alive"));
	free(r);
	close(silent);
	close(slow);
	close(kept);
	dg_node_stop(n);
}

static void test_auth(void **state)
{
	(void)state;
	dg_node *n = start_http_node(0, 0, "prom:s3cret", "tok-123");
	static const char none[] = "GET /metrics HTTP/1.0\r\n\r\n";
	static const char wrong[] = "GET /metrics HTTP/1.0\r\nAuthorization: Basic "
	    "cHJvbTp3cm9uZw==\r\n\r\n";                                  /* prom:wrong */
	static const char basic[] = "GET /metrics HTTP/1.0\r\nAuthorization: Basic "
	    "cHJvbTpzM2NyZXQ=\r\n\r\n";                                  /* prom:s3cret */
	static const char bearer[] = "GET /metrics HTTP/1.0\r\nauthorization:   Bearer tok-123 "
	    "\r\n\r\n";
	static const char bearer_bad[] = "GET /metrics HTTP/1.0\r\nAuthorization: Bearer "
	    "tok-1234\r\n\r\n";
	char *r = exchange(n, none, sizeof(none) - 1);
	assert_int_equal(status_of(r), 401);
	assert_non_null(strstr(r, "WWW-Authenticate: Basic realm=\"datagrid\""));
	assert_null(strstr(r, "datagrid_"));
	free(r);
	r = exchange(n, wrong, sizeof(wrong) - 1);
	assert_int_equal(status_of(r), 401);
	free(r);
	r = exchange(n, bearer_bad, sizeof(bearer_bad) - 1);
	assert_int_equal(status_of(r), 401);
	free(r);
	r = exchange(n, basic, sizeof(basic) - 1);
	assert_int_equal(status_of(r), 200);
	assert_non_null(strstr(r, "datagrid_"));
	free(r);
	r = exchange(n, bearer, sizeof(bearer) - 1);
	assert_int_equal(status_of(r), 200);
	free(r);
	dg_node_stop(n);
}

static void test_protocol(void **state)
{
	(void)state;
	dg_node *n = start_http_node(0, 0, NULL, NULL);
	static const char head[] = "HEAD /metrics HTTP/1.0\r\n\r\n";
	char *r = exchange(n, head, sizeof(head) - 1);
	assert_int_equal(status_of(r), 200);
	const char *cl = strstr(r, "Content-Length: ");
	assert_non_null(cl);
	assert_true(atol(cl + 16) > 100);           /* the length a GET would have */
	assert_string_equal(strstr(r, "\r\n\r\n"), "\r\n\r\n");   /* and no body */
	free(r);

	static const char post[] = "POST /metrics HTTP/1.1\r\nConnection: close\r\n\r\n";
	r = exchange(n, post, sizeof(post) - 1);
	assert_int_equal(status_of(r), 405);
	assert_non_null(strstr(r, "Allow: GET, HEAD"));
	free(r);

	static const char *const bad[] = {
		"GET metrics HTTP/1.1\r\n\r\n", "GET /metrics HTTP/2.0\r\n\r\n",
		"GET /a b HTTP/1.1\r\n\r\n", "GET /metrics HTTP/1.1\r\nNo colon\r\n\r\n",
		"GET /metrics HTTP/1.1\r\nA: b\r\n folded\r\n\r\n", "\r\n\r\n",
		"GET /metrics HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		r = exchange(n, bad[i], strlen(bad[i]));
		assert_int_equal(status_of(r), 400);
		free(r);
	}
	static const char body[] = "GET /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello";
	r = exchange(n, body, sizeof(body) - 1);
	assert_int_equal(status_of(r), 400);
	free(r);

	/* a 9 KiB head: 431 */
	char big[9300];
	int o = snprintf(big, sizeof(big), "GET /metrics HTTP/1.1\r\nX: ");
	memset(big + o, 'a', 9200);
	memcpy(big + o + 9200, "\r\n\r\n", 4);
	r = exchange(n, big, (size_t)o + 9204);
	assert_int_equal(status_of(r), 431);
	free(r);

	/* keep-alive: three pipelined requests in one write, three answers */
	static const char three[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n"
	    "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"
	    "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
	r = exchange(n, three, sizeof(three) - 1);
	assert_int_equal(count(r, "HTTP/1.1 200 OK"), 2);
	assert_int_equal(count(r, "HTTP/1.1 404 Not Found"), 1);
	assert_true(strstr(r, "404 Not Found") < strstr(r, "# TYPE"));
	free(r);
	dg_node_stop(n);
}

/* The body of an answer (after the empty line). */
static const char *body_of(const char *resp)
{
	const char *b = strstr(resp, "\r\n\r\n");
	assert_non_null(b);
	return b + 4;
}

/* GET path (Connection: close): the whole answer. */
static char *get(dg_node *n, const char *path, const char *auth)
{
	char req[512];
	int l = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\n%s%s%sConnection: "
	    "close\r\n\r\n", path, auth ? "Authorization: " : "", auth ? auth : "",
	    auth ? "\r\n" : "");
	return exchange(n, req, (size_t)l);
}

/* GET /api/name: its status is want, its body the admin reply object
 * (caller deletes). */
static cJSON *api(dg_node *n, const char *name, int want)
{
	char path[64];
	snprintf(path, sizeof(path), "/api/%s", name);
	char *r = get(n, path, NULL);
	assert_int_equal(status_of(r), want);
	assert_non_null(strstr(r, "Content-Type: application/json\r\n"));
	assert_non_null(strstr(r, "Cache-Control: no-store\r\n"));
	cJSON *o = cJSON_Parse(body_of(r));
	assert_non_null(o);
	free(r);
	return o;
}

static cJSON *result(cJSON *o)
{
	assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "ok")));
	cJSON *r = cJSON_GetObjectItemCaseSensitive(o, "result");
	assert_non_null(r);
	return r;
}

static void test_dashboard(void **state)
{
	(void)state;
	dg_node *n = start_http_node(0, 0, NULL, NULL);
	static const struct { const char *path, *type, *has; } files[] = {
		{ "/", "text/html; charset=utf-8", "<script src=\"/dashboard.js\"" },
		{ "/dashboard.css", "text/css; charset=utf-8", ".st-M" },
		{ "/dashboard.js", "text/javascript; charset=utf-8", "/api/" },
	};
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		char *r = get(n, files[i].path, NULL);
		char want[128];
		snprintf(want, sizeof(want), "Content-Type: %s\r\n", files[i].type);
		assert_int_equal(status_of(r), 200);
		assert_non_null(strstr(r, want));
		assert_non_null(strstr(r, "Content-Security-Policy: default-src 'none'; "
		    "script-src 'self';"));
		assert_non_null(strstr(r, "X-Content-Type-Options: nosniff\r\n"));
		assert_non_null(strstr(body_of(r), files[i].has));
		free(r);
	}

	dg_cache_config cc;
	dg_cache_config_init(&cc, "dash");
	dg_cache *c;
	OK(dg_cache_create(n, &cc, &c));
	cJSON *o = api(n, "state", 200);
	cJSON *res = result(o);
	assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(res, "state")),
	    "ACTIVE");
	assert_int_equal(cJSON_GetObjectItemCaseSensitive(res, "servers")->valueint, 1);
	cJSON_Delete(o);

	/* one server: every partition of the cache is its primary */
	o = api(n, "partitions", 200);
	const cJSON *caches = cJSON_GetObjectItemCaseSensitive(result(o), "caches"), *one, *dash = NULL;
	cJSON_ArrayForEach(one, caches)
		if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(one, "cache")),
		    "dash") == 0)
			dash = one;
	assert_non_null(dash);
	const cJSON *nodes = cJSON_GetObjectItemCaseSensitive(dash, "nodes");
	assert_int_equal(cJSON_GetArraySize(nodes), 1);
	const cJSON *me = cJSON_GetArrayItem(nodes, 0);
	assert_int_equal(cJSON_GetObjectItemCaseSensitive(me, "primary")->valueint, 1024);
	assert_int_equal(cJSON_GetObjectItemCaseSensitive(me, "moving")->valueint, 0);
	const char *map = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(me, "map"));
	assert_non_null(map);
	assert_int_equal(strlen(map), 1024);
	assert_int_equal(strspn(map, "P"), 1024);
	cJSON_Delete(o);

	static const char *const read_only[] = { "nodes", "caches", "rebalance", "metrics", "txs",
		"baseline" };
	for (size_t i = 0; i < sizeof(read_only) / sizeof(read_only[0]); i++)
		cJSON_Delete((result(o = api(n, read_only[i], 200)), o));

	/* what changes the cluster has no name here, nor does an unknown one */
	static const char *const refused[] = { "/api/shutdown", "/api/cache.put", "/api/tx.kill",
		"/api/cache.destroy", "/api/cache.create", "/api/debug.put-local", "/api/",
		"/api/state/", "/api/stat", "/apistate", "/dashboard.js/" };
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		char *r = get(n, refused[i], NULL);
		assert_int_equal(status_of(r), 404);
		free(r);
	}
	static const char post[] = "POST /api/state HTTP/1.1\r\nConnection: close\r\n\r\n";
	char *r = exchange(n, post, sizeof(post) - 1);
	assert_int_equal(status_of(r), 405);
	free(r);
	static const char head[] = "HEAD /api/state HTTP/1.0\r\n\r\n";
	r = exchange(n, head, sizeof(head) - 1);
	assert_int_equal(status_of(r), 200);
	assert_string_equal(body_of(r), "");
	free(r);
	dg_node_stop(n);

	/* the same authentication as /metrics */
	n = start_http_node(0, 0, "ops:pw", NULL);
	static const char *const guarded[] = { "/", "/dashboard.js", "/api/state" };
	for (size_t i = 0; i < sizeof(guarded) / sizeof(guarded[0]); i++) {
		r = get(n, guarded[i], NULL);
		assert_int_equal(status_of(r), 401);
		assert_null(strstr(r, "ACTIVE"));
		free(r);
		r = get(n, guarded[i], "Basic b3BzOnB3");   /* ops:pw */
		assert_int_equal(status_of(r), 200);
		free(r);
	}
	dg_node_stop(n);
}

static void test_parser(void **state)
{
	(void)state;
	dgi_http_req q;
	static const char full[] = "GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n"
	    "Connection: Keep-Alive, close\r\nAuthorization:  Basic abc  \r\n\r\nrest";
	assert_int_equal(dgi_http_parse(full, sizeof(full) - 1, &q), 1);
	assert_int_equal(q.method, DGI_HTTP_GET);
	assert_int_equal(q.path_len, 8);
	assert_memory_equal(q.path, "/metrics", 8);
	assert_false(q.keep_alive);
	assert_int_equal(q.auth_len, 9);
	assert_memory_equal(q.auth, "Basic abc", 9);
	assert_int_equal(q.head_len, sizeof(full) - 1 - 4);
	/* every proper prefix is incomplete, never malformed */
	for (size_t i = 0; i < sizeof(full) - 5; i++)
		assert_int_equal(dgi_http_parse(full, i, &q), 0);
	static const char lf[] = "HEAD / HTTP/1.0\nConnection: keep-alive\n\n";
	assert_int_equal(dgi_http_parse(lf, sizeof(lf) - 1, &q), 1);
	assert_int_equal(q.method, DGI_HTTP_HEAD);
	assert_true(q.keep_alive);
	assert_int_equal(q.minor, 0);
	static const char te[] = "DELETE / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
	assert_int_equal(dgi_http_parse(te, sizeof(te) - 1, &q), 1);
	assert_int_equal(q.method, DGI_HTTP_OTHER);
	assert_true(q.has_body);
	static const char zero[] = "GET / HTTP/1.1\r\nContent-Length: 000\r\n\r\n";
	assert_int_equal(dgi_http_parse(zero, sizeof(zero) - 1, &q), 1);
	assert_false(q.has_body);
	static const char ctl[] = "GET / HTTP/1.1\r\nA: b\x01\r\n\r\n";
	assert_int_equal(dgi_http_parse(ctl, sizeof(ctl) - 1, &q), -1);
	char many[4096];
	int o = snprintf(many, sizeof(many), "GET / HTTP/1.1\r\n");
	for (int i = 0; i <= DGI_HTTP_MAX_HEADERS; i++)
		o += snprintf(many + o, sizeof(many) - (size_t)o, "H%d: v\r\n", i);
	o += snprintf(many + o, sizeof(many) - (size_t)o, "\r\n");
	assert_int_equal(dgi_http_parse(many, (size_t)o, &q), -1);
}

/* Finding 7: what a node listens on without a secret; finding 8: plain
 * metrics on a TLS node. */
static void test_exposure_needs_secret_or_insecure(void **state)
{
	(void)state;
	static const uint8_t secret[] = "http-test-secret";
	dg_node_config cfg;
	dg_node *n = NULL;
	static const struct { const char *listen, *admin, *http; } open[] = {
		{ "tcp://0.0.0.0:0", NULL, NULL },
		{ "tcp://127.0.0.1:0", "tcp://0.0.0.0:0", NULL },
		{ "tcp://127.0.0.1:0", NULL, "http://0.0.0.0:0" },
	};
	for (size_t i = 0; i < sizeof(open) / sizeof(open[0]); i++) {
		dg_node_config_init(&cfg);
		cfg.cluster_name = "http-test-open";
		cfg.listen_url = open[i].listen;
		cfg.admin_url = open[i].admin;
		cfg.http_url = open[i].http;
		assert_int_equal(dg_node_start(&cfg, &n), DG_ERR_INVAL);
		assert_null(n);
		cfg.insecure = true;
		OK(dg_node_start(&cfg, &n));
		dg_node_stop(n);
		n = NULL;
		cfg.insecure = false;
		cfg.secret = secret;
		cfg.secret_len = sizeof(secret) - 1;
		OK(dg_node_start(&cfg, &n));
		dg_node_stop(n);
		n = NULL;
	}
	/* loopback in every form is fine without a secret */
	dg_node_config_init(&cfg);
	cfg.cluster_name = "http-test-open";
	cfg.listen_url = "tcp://127.0.0.2:0";
	cfg.admin_url = "tcp://localhost:0";
	cfg.http_url = "http://127.0.0.1:0";
	OK(dg_node_start(&cfg, &n));
	dg_node_stop(n);
	n = NULL;
	/* http:// on a node with TLS files: refused before the files are read */
	dg_node_config_init(&cfg);
	cfg.cluster_name = "http-test-open";
	cfg.listen_url = "tls+tcp://127.0.0.1:0";
	cfg.secret = secret;
	cfg.secret_len = sizeof(secret) - 1;
	cfg.tls_cert_key_file = "/nonexistent/node.pem";
	cfg.tls_ca_file = "/nonexistent/ca.pem";
	cfg.http_url = "http://127.0.0.1:0";
	assert_int_equal(dg_node_start(&cfg, &n), DG_ERR_INVAL);
	assert_null(n);
}

int dgt_http_tests(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parser),
		cmocka_unit_test(test_protocol),
		cmocka_unit_test(test_auth),
		cmocka_unit_test(test_dashboard),
		cmocka_unit_test(test_idle_and_slow_heads_time_out),
		cmocka_unit_test(test_idle_flood_cannot_lock_out),
		cmocka_unit_test(test_exposure_needs_secret_or_insecure),
	};
	return cmocka_run_group_tests_name("node_http", tests, NULL, NULL);
}
