/*
 * node_metrics_test.c — unit tests of the node's HTTP /metrics endpoint
 * (node/metrics.c, node/metrics_http.c).
 *
 * What they promise: nodes started with http_url "http://127.0.0.1:0"
 * serve GET /metrics on the bound port (dg_node_http_address); the text
 * parses as Prometheus exposition 0.0.4 (every sample `name{labels} value`
 * with a TYPE line for its family, label values escaped, values numbers);
 * the counters match what happened (a cache's puts, the CACHE_UPDATE
 * messages sent by one node and received by the other, the topology);
 * a scrape allocates a bounded number of times however many caches there
 * are; other paths answer 404; a node without http_url has no address; a
 * bad or taken http_url fails the start.
 *
 * The client is a plain socket speaking HTTP/1.1, so the test depends on
 * nothing but the wire format.  No main(): dgt_metrics_tests() runs the
 * group; tests/node_test.c calls it.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "node/datagrid.h"
#include "node/metrics.h"
#include "cache/cache.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int dgt_metrics_tests(void);

#define OK(x) assert_int_equal((x), DG_OK)
#define HTTP_ANY "http://127.0.0.1:0"

static dg_node *start_node(const char *seed, const char *http_url)
{
	dg_node_config cfg;
	const char *seeds[] = { seed };
	dg_node_config_init(&cfg);
	cfg.listen_url = "tcp://127.0.0.1:0";
	cfg.cluster_name = "metrics-test";
	cfg.seeds = seeds;
	cfg.nseeds = seed != NULL ? 1 : 0;
	cfg.failure_timeout_ms = 2000;
	cfg.heartbeat_ms = 100;
	cfg.join_timeout_ms = 5000;
	cfg.request_timeout_ms = 5000;
	cfg.http_url = http_url;
	dg_node *n = NULL;
	OK(dg_node_start(&cfg, &n));
	return n;
}

/* ---- a minimal HTTP/1.1 client ---- */

typedef struct reply {
	int status;
	char *head;     /* status line and headers, NUL-terminated */
	char *body;     /* NUL-terminated */
	size_t body_len;
} reply;

static void reply_free(reply *r)
{
	free(r->head);
	free(r->body);
	memset(r, 0, sizeof(*r));
}

static int dial(const char *base)
{
	unsigned port = 0;
	assert_int_equal(sscanf(base, "http://127.0.0.1:%u", &port), 1);
	assert_true(port > 0 && port < 65536);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/* GET base+path; reads until the peer closes (Connection: close). */
static reply http_get(const char *base, const char *path)
{
	int fd = dial(base);
	char req[256];
	int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n"
	    "Connection: close\r\n\r\n", path);
	assert_int_equal(write(fd, req, (size_t)n), n);
	size_t len = 0, cap = 4096;
	char *all = malloc(cap);
	assert_non_null(all);
	for (;;) {
		if (cap - len < 4096) {
			cap *= 2;
			all = realloc(all, cap);
			assert_non_null(all);
		}
		ssize_t got = read(fd, all + len, cap - len - 1);
		assert_true(got >= 0);
		if (got == 0)
			break;
		len += (size_t)got;
	}
	close(fd);
	all[len] = 0;
	char *sep = strstr(all, "\r\n\r\n");
	assert_non_null(sep);
	reply r = { 0 };
	assert_int_equal(sscanf(all, "HTTP/1.1 %d", &r.status), 1);
	r.body_len = len - (size_t)(sep + 4 - all);
	r.body = malloc(r.body_len + 1);
	assert_non_null(r.body);
	memcpy(r.body, sep + 4, r.body_len + 1);
	*sep = 0;
	r.head = all;
	return r;
}

/* ---- the exposition format ---- */

/* Skips a label set {k="v",...} starting at p ('{'); returns the byte after
 * '}'.  Fails the test on a malformed set or a bad escape. */
static const char *skip_labels(const char *p)
{
	assert_int_equal(*p, '{');
	p++;
	while (*p != '}') {
		while (*p == '_' || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		    (*p >= '0' && *p <= '9'))
			p++;
		assert_int_equal(*p++, '=');
		assert_int_equal(*p++, '"');
		while (*p != '"') {
			assert_true(*p != 0 && *p != '\n');
			if (*p == '\\') {
				p++;
				assert_non_null(strchr("\\\"n", *p));
			}
			p++;
		}
		p++;
		if (*p == ',')
			p++;
		else
			assert_int_equal(*p, '}');
	}
	return p + 1;
}

static bool has_type(const char *text, const char *name, size_t len)
{
	char want[256];
	snprintf(want, sizeof(want), "# TYPE %.*s ", (int)len, name);
	for (const char *p = text; (p = strstr(p, want)) != NULL; p++)
		if (p == text || p[-1] == '\n')
			return true;
	return false;
}

/* Every line is a HELP or TYPE comment or `name{labels} value`; every
 * sample's family (its name, or without _bucket/_sum/_count for a
 * histogram) has a TYPE line; values parse whole as numbers.  Returns the
 * number of samples. */
static size_t check_format(const char *text)
{
	size_t samples = 0;
	const char *line = text;
	while (*line != 0) {
		const char *end = strchr(line, '\n');
		assert_non_null(end);           /* the text ends with a newline */
		if (line[0] == '#') {
			assert_true(strncmp(line, "# HELP ", 7) == 0 ||
			    strncmp(line, "# TYPE ", 7) == 0);
			line = end + 1;
			continue;
		}
		size_t nlen = strcspn(line, "{ ");
		assert_true(nlen > 0 && strncmp(line, "datagrid_", 9) == 0);
		bool typed = has_type(text, line, nlen);
		const char *sfx[] = { "_bucket", "_sum", "_count" };
		for (size_t i = 0; i < 3 && !typed; i++) {
			size_t sl = strlen(sfx[i]);
			if (nlen > sl && strncmp(line + nlen - sl, sfx[i], sl) == 0)
				typed = has_type(text, line, nlen - sl);
		}
		if (!typed)
			fail_msg("no TYPE line for %.*s", (int)nlen, line);
		const char *p = line + nlen;
		if (*p == '{')
			p = skip_labels(p);
		assert_int_equal(*p++, ' ');
		char *vend;
		strtod(p, &vend);
		assert_true(vend == end && vend > p);
		samples++;
		line = end + 1;
	}
	return samples;
}

/* The value of the series written exactly as `series` (name{labels}), or
 * -1 when the text has none. */
static double value_of(const char *text, const char *series)
{
	size_t l = strlen(series);
	for (const char *p = text; (p = strstr(p, series)) != NULL; p += l)
		if ((p == text || p[-1] == '\n') && p[l] == ' ')
			return strtod(p + l + 1, NULL);
	return -1;
}

static double value_fmt(const char *text, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static double value_fmt(const char *text, const char *fmt, ...)
{
	char series[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(series, sizeof(series), fmt, ap);
	va_end(ap);
	return value_of(text, series);
}

static reply scrape(dg_node *n)
{
	reply r = http_get(dg_node_http_address(n), "/metrics");
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.head,
	    "Content-Type: text/plain; version=0.0.4; charset=utf-8"));
	check_format(r.body);
	return r;
}

/* ---- tests ---- */

static void check_topology(dg_node *n, const char *text)
{
	int64_t version = 0;
	dg_node_info nodes[8];
	size_t count = dg_node_topology(n, &version, nodes, 8);
	assert_true(value_of(text, "datagrid_topology_version") == (double)version);
	assert_true(value_of(text, "datagrid_cluster_nodes") == (double)count);
	assert_true(value_fmt(text, "datagrid_node_info{node=\"%016" PRIx64 "\",address=\"%s\","
	    "version=\"%d.%d.%d\"}", dg_node_get_id(n), dg_node_address(n),
	    DG_VERSION_MAJOR, DG_VERSION_MINOR, DG_VERSION_PATCH) == 1);
	assert_true(value_of(text, "datagrid_node_uptime_seconds") >= 0);
}

/* How many of keys k0..k<count-1> have another node than self as primary
 * (a raw key is hashed as the BYTES value that holds it). */
static unsigned remote_keys(dg_cache *c, uint64_t self, unsigned count)
{
	unsigned remote = 0;
	dg_buf enc;
	dg_buf_init(&enc);
	for (unsigned i = 0; i < count; i++) {
		char k[16];
		int kl = snprintf(k, sizeof(k), "k%u", i);
		dg_writer w;
		dg_buf_reset(&enc);
		dg_writer_init(&w, NULL, &enc);
		OK(dg_write_bytes(&w, k, (size_t)kl));
		uint64_t hash, owners[8];
		int64_t topver;
		uint32_t part = dgi_cache_key_part(c, enc.data, enc.len, &hash);
		assert_true(dgi_cache_owners(c, part, owners, DGI_OWNERS_BUF, &topver) > 0);
		remote += owners[0] != self;
	}
	dg_buf_free(&enc);
	return remote;
}

static void test_two_nodes_count_the_exchange(void **state)
{
	(void)state;
	dg_node *a = start_node(NULL, HTTP_ANY);
	dg_node *b = start_node(dg_node_address(a), HTTP_ANY);
	assert_non_null(dg_node_http_address(a));
	assert_non_null(dg_node_http_address(b));
	assert_string_not_equal(dg_node_http_address(a), dg_node_http_address(b));
	assert_int_equal(strncmp(dg_node_http_address(a), "http://127.0.0.1:", 17), 0);

	dg_cache_config cc;
	dg_cache_config_init(&cc, "metrics");
	cc.partitions = 64;
	dg_cache *ca, *cb;
	OK(dg_cache_create(a, &cc, &ca));
	OK(dg_cache_get_by_name(b, "metrics", &cb));
	OK(dg_cache_wait_rebalanced(ca, 5000));
	OK(dg_cache_wait_rebalanced(cb, 5000));

	reply before_a = scrape(a), before_b = scrape(b);
	const char *upd = "datagrid_messages_sent_total{type=\"CACHE_UPDATE\"}";
	const char *upd_in = "datagrid_messages_received_total{type=\"CACHE_UPDATE\"}";
	double sent0 = value_of(before_a.body, upd), recv0 = value_of(before_b.body, upd_in);
	assert_true(sent0 >= 0 && recv0 >= 0);
	for (unsigned i = 0; i < 100; i++) {
		char k[16];
		int kl = snprintf(k, sizeof(k), "k%u", i);
		OK(dg_cache_put(ca, k, (size_t)kl, "v", 1));
	}
	unsigned remote = remote_keys(ca, dg_node_get_id(a), 100);
	assert_true(remote > 0 && remote < 100);

	/* Every put has been answered, so B received every update A sent: the
	 * counters can be compared exactly, scraped in any order. */
	reply ra = scrape(a), rb = scrape(b);
	assert_true(value_of(ra.body, "datagrid_cache_puts_total{cache=\"metrics\"}") == 100);
	assert_true(value_of(rb.body, "datagrid_cache_puts_total{cache=\"metrics\"}") == 0);
	double sent = value_of(ra.body, upd) - sent0;
	double recv = value_of(rb.body, upd_in) - recv0;
	assert_true(sent >= remote);
	assert_true(sent == recv);
	assert_true(value_of(rb.body, "datagrid_cache_primary_entries{cache=\"metrics\"}") ==
	    remote);
	assert_true(value_of(ra.body, "datagrid_cache_entries{cache=\"metrics\"}") +
	    value_of(rb.body, "datagrid_cache_entries{cache=\"metrics\"}") == 100);
	assert_true(value_of(ra.body,
	    "datagrid_cache_partitions{cache=\"metrics\",state=\"owning\"}") > 0);
	assert_true(value_of(ra.body,
	    "datagrid_cache_partitions_repairing{cache=\"metrics\"}") == 0);
	assert_true(value_of(ra.body, "datagrid_caches") == 1);
	assert_true(value_of(ra.body, "datagrid_tx_started_total") == 0);
	assert_true(value_of(ra.body, "datagrid_transport_connects_total") >= 1);
	check_topology(a, ra.body);
	check_topology(b, rb.body);
	assert_true(value_of(ra.body, "datagrid_cluster_nodes") == 2);
	/* a formed the cluster, b joined it: a is the oldest, the coordinator */
	assert_true(value_of(ra.body, "datagrid_coordinator") == 1);
	assert_true(value_of(rb.body, "datagrid_coordinator") == 0);

	reply_free(&before_a);
	reply_free(&before_b);
	reply_free(&ra);
	reply_free(&rb);
	dg_node_stop(b);
	dg_node_stop(a);
}

static void test_paths(void **state)
{
	(void)state;
	dg_node *n = start_node(NULL, HTTP_ANY);
	reply r = http_get(dg_node_http_address(n), "/nope");
	assert_int_equal(r.status, 404);
	reply_free(&r);
	r = http_get(dg_node_http_address(n), "/metrics/more");
	assert_int_equal(r.status, 404);
	reply_free(&r);
	r = http_get(dg_node_http_address(n), "/");
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "/metrics"));
	reply_free(&r);
	dg_node_stop(n);
}

static void test_label_values_escaped(void **state)
{
	(void)state;
	dg_node *n = start_node(NULL, HTTP_ANY);
	dg_cache_config cc;
	dg_cache_config_init(&cc, "q\"b\\s\nl");
	cc.partitions = 8;
	dg_cache *c;
	OK(dg_cache_create(n, &cc, &c));
	reply r = scrape(n);
	assert_true(value_of(r.body, "datagrid_cache_puts_total{cache=\"q\\\"b\\\\s\\nl\"}") == 0);
	reply_free(&r);
	dg_node_stop(n);
}

static uint64_t allocs_now(void)
{
	dgi_alloc_stats st;
	dgi_alloc_get_stats(&st);
	return st.allocs;
}

/* dgi_alloc calls made by one HTTP scrape after a warm-up scrape. */
static uint64_t scrape_allocs(dg_node *n)
{
	reply warm = scrape(n);
	reply_free(&warm);
	uint64_t before = allocs_now();
	reply r = http_get(dg_node_http_address(n), "/metrics");
	uint64_t used = allocs_now() - before;
	assert_int_equal(r.status, 200);
	reply_free(&r);
	return used;
}

static void test_scrape_allocations_bounded(void **state)
{
	(void)state;
	dg_node *n = start_node(NULL, HTTP_ANY);
	dg_cache_config cc;
	dg_cache *c;
	dg_cache_config_init(&cc, "one");
	cc.partitions = 16;
	OK(dg_cache_create(n, &cc, &c));
	uint64_t few = scrape_allocs(n);

	for (int i = 0; i < 30; i++) {
		char name[32];
		snprintf(name, sizeof(name), "more-%d", i);
		dg_cache_config_init(&cc, name);
		cc.partitions = 16;
		OK(dg_cache_create(n, &cc, &c));
	}
	uint64_t many = scrape_allocs(n);
	/* The reused buffer has room: nothing in the scrape allocates (a node
	 * thread could, now and then: the bound is a small constant). */
	assert_true(few <= 2);
	assert_true(many <= 2);

	/* The same directly: the text into a warmed-up buffer. */
	dg_buf b;
	dg_buf_init(&b);
	OK(dgi_node_metrics_text(n, &b));
	size_t len = b.len;
	uint64_t before = allocs_now();
	OK(dgi_node_metrics_text(n, &b));
	assert_true(allocs_now() - before <= 1);
	assert_true(b.len + 64 > len && b.len < len + 64);
	dg_buf_free(&b);
	dg_node_stop(n);
}

static void test_no_http(void **state)
{
	(void)state;
	dg_node *n = start_node(NULL, NULL);
	assert_null(dg_node_http_address(n));
	dg_node_stop(n);
	assert_null(dg_node_http_address(NULL));
}

static void test_bad_or_taken_url_fails_start(void **state)
{
	(void)state;
	dg_node *a = start_node(NULL, HTTP_ANY);
	dg_node_config cfg;
	dg_node_config_init(&cfg);
	cfg.listen_url = "tcp://127.0.0.1:0";
	cfg.cluster_name = "metrics-test-other";
	dg_node *n = NULL;
	cfg.http_url = "tcp://127.0.0.1:0";
	assert_int_equal(dg_node_start(&cfg, &n), DG_ERR_INVAL);
	assert_null(n);
	cfg.http_url = dg_node_http_address(a);  /* served by a, in this process */
	assert_int_equal(dg_node_start(&cfg, &n), DG_ERR_ADDRINUSE);
	assert_null(n);
	dg_node_stop(a);
}

int dgt_metrics_tests(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_two_nodes_count_the_exchange),
		cmocka_unit_test(test_paths),
		cmocka_unit_test(test_label_values_escaped),
		cmocka_unit_test(test_scrape_allocations_bounded),
		cmocka_unit_test(test_no_http),
		cmocka_unit_test(test_bad_or_taken_url_fails_start),
	};
	return cmocka_run_group_tests_name("metrics", tests, NULL, NULL);
}
