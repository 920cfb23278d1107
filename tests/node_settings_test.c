/*
 * node_settings_test.c — unit tests of node/settings.c, dgnode's settings.
 *
 * What settings.h promises: the table is sane and its defaults are what
 * dgnode_settings_init gives (and what dg_node_config_init documents);
 * --config files load before the flags whatever the order; every value
 * type parses with its suffixes and rejects garbage and out-of-range values
 * with a message naming the setting and the accepted range; unknown flags
 * and keys are errors (file:line); lists repeat; cache specs parse in full
 * and each bad part is named; --help lists every setting; the secret comes
 * from its file (newline stripped) or DG_CLUSTER_SECRET; cross-setting
 * checks; allocation failures fail cleanly.
 *
 * No main(): dgt_settings_tests() runs the group; a runner calls it.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "node/settings.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int dgt_settings_tests(void);

/* ------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------ */

/* Captured error output. */
typedef struct cap {
	char *buf;
	size_t len;
	FILE *f;
} cap;

static FILE *cap_open(cap *c)
{
	c->buf = NULL;
	c->len = 0;
	c->f = open_memstream(&c->buf, &c->len);
	assert_non_null(c->f);
	return c->f;
}

static const char *cap_text(cap *c)
{
	fflush(c->f);
	return c->buf != NULL ? c->buf : "";
}

static void cap_close(cap *c)
{
	fclose(c->f);
	free(c->buf);
}

static void assert_contains(const char *hay, const char *needle)
{
	if (strstr(hay, needle) == NULL)
		fail_msg("expected \"%s\" in \"%s\"", needle, hay);
}

/* Parses "dgnode" + the NULL-terminated arguments. */
static int parse(dgnode_settings *s, FILE *err, ...)
{
	char *argv[64];
	int argc = 0;
	va_list ap;
	argv[argc++] = (char *)"dgnode";
	va_start(ap, err);
	for (const char *a; (a = va_arg(ap, const char *)) != NULL;)
		argv[argc++] = (char *)a;
	va_end(ap);
	argv[argc] = NULL;
	return dgnode_settings_parse_args(s, argc, argv, err);
}

/* One argument; the message written (if any) into msg. */
static int parse1(dgnode_settings *s, const char *arg, char *msg, size_t n)
{
	cap c;
	int rc = parse(s, cap_open(&c), arg, (char *)NULL);
	snprintf(msg, n, "%s", cap_text(&c));
	cap_close(&c);
	return rc;
}

/* A temporary file holding text; its path in path[64]. */
static void write_file(char path[64], const char *text)
{
	snprintf(path, 64, "/tmp/dgt-settings-XXXXXX");
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	FILE *f = fdopen(fd, "w");
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

/* Runs f with stdout going to /dev/null (--help, --version print there). */
static int quiet(int (*f)(dgnode_settings *, const char *), dgnode_settings *s,
    const char *arg)
{
	fflush(stdout);
	int saved = dup(1);
	FILE *null = fopen("/dev/null", "w");
	assert_non_null(null);
	dup2(fileno(null), 1);
	int rc = f(s, arg);
	fflush(stdout);
	dup2(saved, 1);
	close(saved);
	fclose(null);
	return rc;
}

static int parse_quiet(dgnode_settings *s, const char *arg)
{
	return parse(s, NULL, arg, (char *)NULL);
}

/* ------------------------------------------------------------------------
 * The table and the defaults
 * ------------------------------------------------------------------------ */

static void test_table_is_sane(void **state)
{
	(void)state;
	static const char *const names[] = { "cluster-name", "listen", "advertise",
		"seed", "secret-file", "tls-cert-key", "tls-ca",
		"failure-detection-timeout", "heartbeat-interval", "join-timeout",
		"request-timeout", "tx-topology-timeout", "tx-done-capacity", "data-dir",
		"storage-map-size",
		"storage-sync", "storage-recover", "encryption-key-file",
		"recv-max", "reactor-spin-us", "rebalance-batch", "rebalance-throttle", "client", "partition-policy",
		"admin-listen",
		"http-listen", "http-basic-auth-file", "http-bearer-token-file",
		"http-max-connections", "http-idle-timeout", "insecure",
		"log-level", "cache" };
	assert_int_equal(dgnode_settings_count, sizeof(names) / sizeof(names[0]));
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		assert_non_null(dgnode_setting_find(names[i]));
	for (size_t i = 0; i < dgnode_settings_count; i++) {
		const dgnode_setting *st = &dgnode_settings_table[i];
		assert_non_null(st->name);
		for (const char *p = st->name; *p; p++)
			assert_true((*p >= 'a' && *p <= 'z') || *p == '-');
		assert_ptr_equal(dgnode_setting_find(st->name), st);
		assert_non_null(st->def);
		assert_true(st->help != NULL && st->help[0] != 0);
		assert_true(st->target != NULL && st->target[0] != 0);
		if (st->type != DGNODE_BOOL)
			assert_non_null(st->metavar);
		if (st->type == DGNODE_UINT || st->type == DGNODE_SIZE ||
		    st->type == DGNODE_DURATION)
			assert_true(st->min <= st->max);
		if (st->type == DGNODE_ENUM)
			assert_non_null(st->values);
		/* Every default is a value the setting accepts. */
		if (st->type != DGNODE_LIST) {
			dgnode_settings s;
			cap c;
			dgnode_settings_init(&s);
			assert_int_equal(dgnode_settings_set(&s, st->name, st->def,
			    cap_open(&c)), DGNODE_OK);
			cap_close(&c);
			dgnode_settings_free(&s);
		}
	}
	assert_null(dgnode_setting_find("no-such-setting"));
}

static void test_defaults_equal_the_table(void **state)
{
	(void)state;
	dgnode_settings s;
	char buf[256];
	dgnode_settings_init(&s);
	for (size_t i = 0; i < dgnode_settings_count; i++) {
		const dgnode_setting *st = &dgnode_settings_table[i];
		assert_string_equal(dgnode_setting_format(&s, st, buf, sizeof(buf)),
		    st->def);
	}
	/* The values the brief fixes, spelled out. */
	assert_string_equal(s.cluster_name, "datagrid");
	assert_string_equal(s.listen, "tcp://127.0.0.1:47500");
	assert_string_equal(s.advertise, "");
	assert_int_equal(s.seeds.l_n, 0);
	assert_int_equal(s.failure_timeout_ms, 10000);
	assert_int_equal(s.heartbeat_ms, 0);
	assert_int_equal(s.join_timeout_ms, 10000);
	assert_int_equal(s.request_timeout_ms, 10000);
	assert_string_equal(s.data_dir, "");
	assert_int_equal(s.storage_map_size, (uint64_t)1 << 30);
	assert_true(s.storage_sync);
	assert_int_equal(s.recv_max, 16u << 20);
	assert_int_equal(s.rebalance_batch, 512u << 10);
	assert_false(s.client);
	assert_int_equal(s.log_level, DGNODE_LOG_INFO);
	assert_int_equal(s.caches.l_n, 0);
	dgnode_settings_free(&s);
}

/* The table's defaults agree with what datagrid.h documents for
 * dg_node_config_init: a default dgnode is a default node. */
static void test_default_config_matches_library(void **state)
{
	(void)state;
	dgnode_settings s;
	dg_node_config lib, cfg;
	cap c;
	dgnode_settings_init(&s);
	dg_node_config_init(&lib);
	assert_int_equal(dgnode_settings_to_config(&s, &cfg, cap_open(&c)), DGNODE_OK);
	assert_string_equal(cap_text(&c), "");
	cap_close(&c);
	assert_string_equal(cfg.cluster_name, lib.cluster_name);
	assert_string_equal(cfg.listen_url, lib.listen_url);
	assert_null(cfg.advertise_url);
	assert_int_equal(cfg.nseeds, 0);
	assert_null(cfg.secret);
	assert_int_equal(cfg.secret_len, 0);
	assert_null(cfg.tls_cert_key_file);
	assert_null(cfg.tls_ca_file);
	assert_null(cfg.data_dir);
	assert_int_equal(cfg.failure_timeout_ms, lib.failure_timeout_ms);
	assert_int_equal(cfg.heartbeat_ms, cfg.failure_timeout_ms / 5);
	if (lib.heartbeat_ms != 0)
		assert_int_equal(cfg.heartbeat_ms, lib.heartbeat_ms);
	assert_int_equal(cfg.join_timeout_ms, lib.join_timeout_ms);
	assert_int_equal(cfg.request_timeout_ms, lib.request_timeout_ms);
	assert_int_equal(cfg.tx_topology_timeout_ms, lib.tx_topology_timeout_ms);
	assert_int_equal(cfg.tx_done_capacity, lib.tx_done_capacity);
	assert_int_equal(cfg.storage_map_size, lib.storage_map_size);
	assert_int_equal(cfg.storage_nosync, lib.storage_nosync);
	assert_int_equal(cfg.recv_max, lib.recv_max);
	assert_int_equal(cfg.reactor_spin_us, lib.reactor_spin_us);
	assert_int_equal(cfg.rebalance_batch_bytes, lib.rebalance_batch_bytes);
	assert_int_equal(cfg.client, lib.client);
	assert_ptr_equal(cfg.registry, lib.registry);
	dgnode_settings_free(&s);
}

/* ------------------------------------------------------------------------
 * Sources and precedence
 * ------------------------------------------------------------------------ */

static const char conf_text[] =
    "# a node\n"
    "\n"
    "cluster-name = prod\n"
    "listen = tcp://0.0.0.0:5000\n"
    "seed = tcp://10.0.0.1:47500\n"
    "seed = tcp://10.0.0.2:47500\n"
    "join-timeout = 30s\n"
    "client = yes\n";

static void check_overridden(const dgnode_settings *s)
{
	assert_string_equal(s->cluster_name, "prod");                /* file */
	assert_int_equal(s->join_timeout_ms, 30000);                 /* file */
	assert_string_equal(s->listen, "tcp://127.0.0.1:6000");      /* flag */
	assert_false(s->client);                                     /* flag */
	assert_int_equal(s->seeds.l_n, 1);                           /* flag list */
	assert_string_equal(s->seeds.l_items[0], "tcp://10.9.9.9:1");
}

static void test_flags_override_file_in_any_order(void **state)
{
	(void)state;
	char path[64], flag[80];
	dgnode_settings s;
	write_file(path, conf_text);
	snprintf(flag, sizeof(flag), "--config=%s", path);

	dgnode_settings_init(&s);
	assert_int_equal(parse(&s, stderr, "--listen", "tcp://127.0.0.1:6000",
	    "--no-client", "--seed=tcp://10.9.9.9:1", flag, (char *)NULL), DGNODE_OK);
	check_overridden(&s);
	dgnode_settings_free(&s);

	dgnode_settings_init(&s);
	assert_int_equal(parse(&s, stderr, "--config", path, "--listen",
	    "tcp://127.0.0.1:6000", "--no-client", "--seed", "tcp://10.9.9.9:1",
	    (char *)NULL), DGNODE_OK);
	check_overridden(&s);
	dgnode_settings_free(&s);

	/* Without flags the file's list stays, in order. */
	dgnode_settings_init(&s);
	assert_int_equal(parse(&s, stderr, flag, (char *)NULL), DGNODE_OK);
	assert_int_equal(s.seeds.l_n, 2);
	assert_string_equal(s.seeds.l_items[0], "tcp://10.0.0.1:47500");
	assert_string_equal(s.seeds.l_items[1], "tcp://10.0.0.2:47500");
	assert_true(s.client);
	assert_string_equal(s.listen, "tcp://0.0.0.0:5000");
	dgnode_settings_free(&s);
	unlink(path);
}

static void test_two_config_files_in_order(void **state)
{
	(void)state;
	char a[64], b[64];
	dgnode_settings s;
	write_file(a, "cluster-name = first\nrequest-timeout = 5s\n");
	write_file(b, "cluster-name = second\n");
	dgnode_settings_init(&s);
	assert_int_equal(parse(&s, stderr, "--config", a, "--config", b,
	    (char *)NULL), DGNODE_OK);
	assert_string_equal(s.cluster_name, "second");
	assert_int_equal(s.request_timeout_ms, 5000);
	dgnode_settings_free(&s);
	unlink(a);
	unlink(b);
}

static void test_file_syntax(void **state)
{
	(void)state;
	char path[64];
	dgnode_settings s;
	write_file(path,
	    "   # indented comment\n"
	    "\t\n"
	    "cluster-name=tight\n"
	    "  listen   =   tcp://h:1   # trailing comment\n"
	    "data-dir = /var/lib/dg#1\n"      /* '#' inside a value stays */
	    "advertise = tcp://pub:1\r\n"     /* CRLF */
	    "cluster-name = last-wins\n"
	    "cache = a\n"
	    "cache = b, mode=replicated\n"
	    "seed = tcp://x:1\n"
	    "seed =\n"                        /* clears */
	    "seed = tcp://y:2\n"
	    "storage-sync = off");            /* no final newline */
	dgnode_settings_init(&s);
	assert_int_equal(dgnode_settings_load_file(&s, path, stderr), DGNODE_OK);
	assert_string_equal(s.cluster_name, "last-wins");
	assert_string_equal(s.listen, "tcp://h:1");
	assert_string_equal(s.data_dir, "/var/lib/dg#1");
	assert_string_equal(s.advertise, "tcp://pub:1");
	assert_int_equal(s.caches.l_n, 2);
	assert_string_equal(s.caches.l_items[1], "b, mode=replicated");
	assert_int_equal(s.seeds.l_n, 1);
	assert_string_equal(s.seeds.l_items[0], "tcp://y:2");
	assert_false(s.storage_sync);
	dgnode_settings_free(&s);
	unlink(path);
}

static void test_file_errors_name_file_and_line(void **state)
{
	(void)state;
	static const struct { const char *text, *want; } cases[] = {
		{ "# ok\nlisten = tcp://a:1\nbogus-key = 1\n",
		  ":3: unknown setting 'bogus-key' (see --help)" },
		{ "listen tcp://a:1\n", ":1: 'listen tcp://a:1': expected setting = value" },
		{ "\n\njoin-timeout = 5x\n",
		  ":3: join-timeout = 5x: expected a duration in ms in [100, 3600000]" },
		{ "--listen = tcp://a:1\n", ":1: unknown setting '--listen' (see --help)" },
		{ "config = other.conf\n", ":1: unknown setting 'config' (see --help)" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char path[64], want[160];
		dgnode_settings s;
		cap c;
		write_file(path, cases[i].text);
		dgnode_settings_init(&s);
		assert_int_equal(dgnode_settings_load_file(&s, path, cap_open(&c)),
		    DGNODE_USAGE);
		snprintf(want, sizeof(want), "dgnode: %s%s\n", path, cases[i].want);
		assert_string_equal(cap_text(&c), want);
		cap_close(&c);
		dgnode_settings_free(&s);
		unlink(path);
	}

	/* A missing file; and through --config the status is a usage error. */
	dgnode_settings s;
	cap c;
	dgnode_settings_init(&s);
	assert_int_equal(parse(&s, cap_open(&c), "--config", "/nonexistent/dg.conf",
	    (char *)NULL), DGNODE_USAGE);
	assert_string_equal(cap_text(&c),
	    "dgnode: /nonexistent/dg.conf: No such file or directory\n");
	cap_close(&c);
	dgnode_settings_free(&s);

	/* A line longer than the buffer. */
	char path[64], *big = malloc(6000);
	assert_non_null(big);
	memset(big, 'x', 5998);
	memcpy(big, "cluster-name = ", 15);
	big[5998] = '\n';
	big[5999] = 0;
	write_file(path, big);
	free(big);
	dgnode_settings_init(&s);
	assert_int_equal(dgnode_settings_load_file(&s, path, cap_open(&c)),
	    DGNODE_USAGE);
	assert_contains(cap_text(&c), ":1: line longer than 4095 bytes");
	cap_close(&c);
	dgnode_settings_free(&s);
	unlink(path);
}

/* ------------------------------------------------------------------------
 * Value types
 * ------------------------------------------------------------------------ */

static void test_durations(void **state)
{
	(void)state;
	static const struct { const char *arg; uint64_t ms; } ok[] = {
		{ "--failure-detection-timeout=250", 250 },
		{ "--failure-detection-timeout=250ms", 250 },
		{ "--failure-detection-timeout=3s", 3000 },
		{ "--failure-detection-timeout=2m", 120000 },
		{ "--failure-detection-timeout=100", 100 },       /* min */
		{ "--failure-detection-timeout=600000", 600000 }, /* max */
		{ "--failure-detection-timeout=10m", 600000 },
	};
	static const char *const bad[] = { "abc", "", "99", "600001", "11m", "-5",
		"+5", "1.5s", "10x", "10 s", " 10", "1h", "5S",
		"99999999999999999999", "99999999999999999h" };
	dgnode_settings s;
	char msg[256], arg[96], want[192];

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		dgnode_settings_init(&s);
		assert_int_equal(parse1(&s, ok[i].arg, msg, sizeof(msg)), DGNODE_OK);
		assert_int_equal(s.failure_timeout_ms, ok[i].ms);
		dgnode_settings_free(&s);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		dgnode_settings_init(&s);
		snprintf(arg, sizeof(arg), "--failure-detection-timeout=%s", bad[i]);
		assert_int_equal(parse1(&s, arg, msg, sizeof(msg)), DGNODE_USAGE);
		snprintf(want, sizeof(want), "dgnode: --failure-detection-timeout=%s: "
		    "expected a duration in ms in [100, 600000]\n", bad[i]);
		assert_string_equal(msg, want);
		assert_int_equal(s.failure_timeout_ms, 10000);   /* unchanged */
		dgnode_settings_free(&s);
	}
	/* The separate-argument form reports the same way. */
	dgnode_settings_init(&s);
	cap c;
	assert_int_equal(parse(&s, cap_open(&c), "--failure-detection-timeout", "abc",
	    (char *)NULL), DGNODE_USAGE);
	assert_string_equal(cap_text(&c), "dgnode: --failure-detection-timeout=abc: "
	    "expected a duration in ms in [100, 600000]\n");
	cap_close(&c);
	/* Hours where the range allows them. */
	assert_int_equal(parse(&s, stderr, "--join-timeout=1h", "--request-timeout=1",
	    "--heartbeat-interval=0", (char *)NULL), DGNODE_OK);
	assert_int_equal(s.join_timeout_ms, 3600000);
	assert_int_equal(s.request_timeout_ms, 1);
	dgnode_settings_free(&s);
}

static void test_sizes(void **state)
{
	(void)state;
	static const struct { const char *v; uint64_t bytes; } ok[] = {
		{ "1048576", 1048576 }, { "1m", 1u << 20 }, { "1M", 1u << 20 },
		{ "2048k", 2u << 20 }, { "3g", (uint64_t)3 << 30 },
		{ "1t", (uint64_t)1 << 40 }, { "1GiB", (uint64_t)1 << 30 },
		{ "64mb", 64u << 20 }, { "5MiB", 5u << 20 }, { "1099511627776b",
		(uint64_t)1 << 40 },
	};
	static const char *const bad[] = { "1k", "1048575", "2t", "1025g", "abc",
		"", "1x", "1.5g", "-1m", "1 m", "1mm", "99999999999999999999",
		"17179869184t" };
	dgnode_settings s;
	char msg[256], arg[96], want[256];

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		dgnode_settings_init(&s);
		snprintf(arg, sizeof(arg), "--storage-map-size=%s", ok[i].v);
		assert_int_equal(parse1(&s, arg, msg, sizeof(msg)), DGNODE_OK);
		assert_int_equal(s.storage_map_size, ok[i].bytes);
		dgnode_settings_free(&s);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		dgnode_settings_init(&s);
		snprintf(arg, sizeof(arg), "--storage-map-size=%s", bad[i]);
		assert_int_equal(parse1(&s, arg, msg, sizeof(msg)), DGNODE_USAGE);
		snprintf(want, sizeof(want), "dgnode: --storage-map-size=%s: expected a "
		    "size (bytes, or with suffix k, m, g, t) in [1m, 1t]\n", bad[i]);
		assert_string_equal(msg, want);
		dgnode_settings_free(&s);
	}
	dgnode_settings_init(&s);
	assert_int_equal(parse(&s, stderr, "--recv-max", "32m", "--rebalance-batch=4k",
	    (char *)NULL), DGNODE_OK);
	assert_int_equal(s.recv_max, 32u << 20);
	assert_int_equal(s.rebalance_batch, 4096);
	assert_int_equal(parse1(&s, "--rebalance-batch=65m", msg, sizeof(msg)),
	    DGNODE_USAGE);
	assert_string_equal(msg, "dgnode: --rebalance-batch=65m: expected a size "
	    "(bytes, or with suffix k, m, g, t) in [4k, 64m]\n");
	dgnode_settings_free(&s);
}

static void test_bools(void **state)
{
	(void)state;
	static const struct { const char *arg; bool v; } ok[] = {
		{ "--client", true }, { "--client=true", true }, { "--client=yes", true },
		{ "--client=on", true }, { "--client=1", true }, { "--client=TRUE", true },
		{ "--client=false", false }, { "--client=no", false },
		{ "--client=off", false }, { "--client=0", false },
		{ "--no-client", false },
	};
	dgnode_settings s;
	char msg[256];
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		dgnode_settings_init(&s);
		s.client = !ok[i].v;
		assert_int_equal(parse1(&s, ok[i].arg, msg, sizeof(msg)), DGNODE_OK);
		assert_int_equal(s.client, ok[i].v);
		dgnode_settings_free(&s);
	}
	dgnode_settings_init(&s);
	assert_int_equal(parse1(&s, "--client=maybe", msg, sizeof(msg)), DGNODE_USAGE);
	assert_string_equal(msg, "dgnode: --client=maybe: expected true or false\n");
	assert_int_equal(parse1(&s, "--client=", msg, sizeof(msg)), DGNODE_USAGE);
	assert_string_equal(msg, "dgnode: --client=: expected true or false\n");
	assert_int_equal(parse1(&s, "--no-client=1", msg, sizeof(msg)), DGNODE_USAGE);
	assert_string_equal(msg, "dgnode: --no-client=1: takes no value\n");
	/* A bool's value is only ever attached with '='. */
	cap c;
	assert_int_equal(parse(&s, cap_open(&c), "--client", "false", (char *)NULL),
	    DGNODE_USAGE);
	assert_contains(cap_text(&c), "'false': unexpected argument");
	cap_close(&c);
	assert_int_equal(parse(&s, stderr, "--no-storage-sync", (char *)NULL),
	    DGNODE_OK);
	assert_false(s.storage_sync);
	assert_int_equal(parse(&s, stderr, "--storage-sync", (char *)NULL), DGNODE_OK);
	assert_true(s.storage_sync);
	dgnode_settings_free(&s);
}

static void test_enums_and_strings(void **state)
{
	(void)state;
	static const char *const levels[] = { "debug", "info", "warn", "error" };
	dgnode_settings s;
	char msg[256], arg[64];
	dgnode_settings_init(&s);
	for (int i = 0; i < 4; i++) {
		snprintf(arg, sizeof(arg), "--log-level=%s", levels[i]);
		assert_int_equal(parse1(&s, arg, msg, sizeof(msg)), DGNODE_OK);
		assert_int_equal(s.log_level, i);
		assert_string_equal(dgnode_log_level_name(i), levels[i]);
	}
	assert_int_equal(parse1(&s, "--log-level=INFO", msg, sizeof(msg)),
	    DGNODE_USAGE);
	assert_string_equal(msg, "dgnode: --log-level=INFO: expected one of debug, "
	    "info, warn, error\n");

	assert_int_equal(parse1(&s, "--cluster-name=", msg, sizeof(msg)),
	    DGNODE_USAGE);
	assert_string_equal(msg, "dgnode: --cluster-name=: expected a non-empty name\n");
	static const char *const bad_urls[] = { "", "localhost:47500", "://x",
		"tcp://", "t cp://x:1" };
	for (size_t i = 0; i < sizeof(bad_urls) / sizeof(bad_urls[0]); i++) {
		snprintf(arg, sizeof(arg), "--listen=%s", bad_urls[i]);
		assert_int_equal(parse1(&s, arg, msg, sizeof(msg)), DGNODE_USAGE);
		assert_contains(msg, "dgnode: --listen=");
		assert_contains(msg, ": expected a URL: tcp://HOST:PORT");
	}
	assert_int_equal(parse(&s, stderr, "--listen=tls+tcp://[::1]:0",
	    "--advertise=", "--data-dir", "/tmp/d", "--cluster-name", "a b",
	    (char *)NULL), DGNODE_OK);
	assert_string_equal(s.listen, "tls+tcp://[::1]:0");
	assert_string_equal(s.advertise, "");
	assert_string_equal(s.data_dir, "/tmp/d");
	assert_string_equal(s.cluster_name, "a b");
	assert_int_equal(parse1(&s, "--advertise=nope", msg, sizeof(msg)),
	    DGNODE_USAGE);
	assert_contains(msg, "dgnode: --advertise=nope: expected a URL");
	dgnode_settings_free(&s);
}

/* UINT values: the cache spec's backups and partitions. */
static void test_uints(void **state)
{
	(void)state;
	dg_cache_config c;
	cap e;
	assert_int_equal(dgnode_parse_cache_spec("c,backups=64,partitions=65536", &c,
	    stderr), DGNODE_OK);
	assert_int_equal(c.backups, 64);
	assert_int_equal(c.partitions, 65536);
	assert_int_equal(dgnode_parse_cache_spec("c,backups=0,partitions=1", &c,
	    stderr), DGNODE_OK);
	assert_int_equal(c.backups, 0);
	assert_int_equal(c.partitions, 1);
	static const struct { const char *spec, *want; } bad[] = {
		{ "c,backups=65", "backups=65: expected an integer in [0, 64]" },
		{ "c,backups=x", "backups=x: expected an integer in [0, 64]" },
		{ "c,backups=-1", "backups=-1: expected an integer in [0, 64]" },
		{ "c,backups=1k", "backups=1k: expected an integer in [0, 64]" },
		{ "c,partitions=0", "partitions=0: expected an integer in [1, 65536]" },
		{ "c,partitions=65537", "partitions=65537: expected an integer in [1, 65536]" },
		{ "c,partitions=", "partitions=: expected an integer in [1, 65536]" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char want[192];
		assert_int_equal(dgnode_parse_cache_spec(bad[i].spec, &c, cap_open(&e)),
		    DGNODE_USAGE);
		snprintf(want, sizeof(want), "dgnode: --cache=%s: %s\n", bad[i].spec,
		    bad[i].want);
		assert_string_equal(cap_text(&e), want);
		cap_close(&e);
	}
}

/* ------------------------------------------------------------------------
 * Command-line errors, lists
 * ------------------------------------------------------------------------ */

static void test_unknown_and_malformed_flags(void **state)
{
	(void)state;
	static const struct { const char *arg, *want; } cases[] = {
		{ "--bogus", "dgnode: --bogus: unknown option (see --help)\n" },
		{ "--bogus=1", "dgnode: --bogus=1: unknown option (see --help)\n" },
		{ "--fail=100", "dgnode: --fail: unknown option (did you mean "
		  "--failure-detection-timeout?)\n" },
		{ "--listen", "dgnode: --listen: expects a value\n" },
		{ "--help=1", "dgnode: --help=1: takes no value\n" },
		{ "-x", "dgnode: -x: unknown option (see --help)\n" },
		{ "positional", "dgnode: 'positional': unexpected argument (settings "
		  "are --name=value)\n" },
		{ "--no-listen", "dgnode: --no-listen: unknown option (see --help)\n" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		dgnode_settings s;
		char msg[256];
		dgnode_settings_init(&s);
		assert_int_equal(parse1(&s, cases[i].arg, msg, sizeof(msg)), DGNODE_USAGE);
		assert_string_equal(msg, cases[i].want);
		dgnode_settings_free(&s);
	}
	/* An abbreviation with a separate value, and after "--". */
	dgnode_settings s;
	cap c;
	dgnode_settings_init(&s);
	assert_int_equal(parse(&s, cap_open(&c), "--join", "5s", (char *)NULL),
	    DGNODE_USAGE);
	assert_string_equal(cap_text(&c), "dgnode: --join: unknown option (did you "
	    "mean --join-timeout?)\n");
	cap_close(&c);
	assert_int_equal(parse(&s, cap_open(&c), "--", "--listen=tcp://a:1",
	    (char *)NULL), DGNODE_USAGE);
	assert_contains(cap_text(&c), "unexpected argument");
	cap_close(&c);
	assert_int_equal(dgnode_settings_set(&s, "nope", "1", cap_open(&c)),
	    DGNODE_USAGE);
	assert_string_equal(cap_text(&c), "dgnode: --nope: unknown setting (see --help)\n");
	cap_close(&c);
	dgnode_settings_free(&s);
}

static void test_repeatable_seeds(void **state)
{
	(void)state;
	dgnode_settings s;
	dg_node_config cfg;
	dgnode_settings_init(&s);
	assert_int_equal(parse(&s, stderr, "--seed", "tcp://a:1", "--seed=tcp://b:2",
	    "--seed", "tls+tcp://c:3", (char *)NULL), DGNODE_OK);
	assert_int_equal(s.seeds.l_n, 3);
	assert_int_equal(dgnode_settings_to_config(&s, &cfg, stderr), DGNODE_OK);
	assert_int_equal(cfg.nseeds, 3);
	assert_string_equal(cfg.seeds[0], "tcp://a:1");
	assert_string_equal(cfg.seeds[1], "tcp://b:2");
	assert_string_equal(cfg.seeds[2], "tls+tcp://c:3");
	char buf[128];
	assert_string_equal(dgnode_setting_format(&s, dgnode_setting_find("seed"), buf,
	    sizeof(buf)), "tcp://a:1; tcp://b:2; tls+tcp://c:3");
	dgnode_settings_free(&s);

	/* An empty value clears; a bad seed is named. */
	dgnode_settings_init(&s);
	assert_int_equal(parse(&s, stderr, "--seed=tcp://a:1", "--seed=", (char *)NULL),
	    DGNODE_OK);
	assert_int_equal(s.seeds.l_n, 0);
	char msg[256];
	assert_int_equal(parse1(&s, "--seed=10.0.0.1:47500", msg, sizeof(msg)),
	    DGNODE_USAGE);
	assert_contains(msg, "dgnode: --seed=10.0.0.1:47500: expected a URL");
	dgnode_settings_free(&s);
}

/* ------------------------------------------------------------------------
 * Cache specs
 * ------------------------------------------------------------------------ */

static void test_cache_spec_full(void **state)
{
	(void)state;
	dg_cache_config c, d;
	assert_int_equal(dgnode_parse_cache_spec("users", &c, stderr), DGNODE_OK);
	dg_cache_config_init(&d, "users");
	assert_memory_equal(&c, &d, sizeof(c));
	assert_string_equal(c.name, "users");
	assert_int_equal(c.mode, DG_PARTITIONED);
	assert_int_equal(c.backups, 0);
	assert_int_equal(c.write_sync, DG_FULL_SYNC);
	assert_int_equal(c.atomicity, DG_ATOMIC);
	assert_int_equal(c.partitions, DG_PARTITIONS_DEFAULT);
	assert_true(c.read_from_backup);
	assert_false(c.persistence);
	assert_int_equal(c.ttl_ms, 0);

	assert_int_equal(dgnode_parse_cache_spec("orders,mode=replicated,backups=2,"
	    "sync=primary_sync,atomicity=transactional,partitions=128,"
	    "read-from-backup=false,persistence=true,ttl=90s", &c, stderr), DGNODE_OK);
	assert_string_equal(c.name, "orders");
	assert_int_equal(c.mode, DG_REPLICATED);
	assert_int_equal(c.backups, 2);
	assert_int_equal(c.write_sync, DG_PRIMARY_SYNC);
	assert_int_equal(c.atomicity, DG_TRANSACTIONAL);
	assert_int_equal(c.partitions, 128);
	assert_false(c.read_from_backup);
	assert_true(c.persistence);
	assert_int_equal(c.ttl_ms, 90000);

	/* Spaces around parts, any order, the last sync value. */
	assert_int_equal(dgnode_parse_cache_spec("  s p a c e , ttl = 2h ,"
	    "sync=full_async", &c, stderr), DGNODE_OK);
	assert_string_equal(c.name, "s p a c e");
	assert_int_equal(c.ttl_ms, 7200000);
	assert_int_equal(c.write_sync, DG_FULL_ASYNC);

	/* A name of 127 bytes fits. */
	char name[200];
	memset(name, 'n', 127);
	name[127] = 0;
	assert_int_equal(dgnode_parse_cache_spec(name, &c, stderr), DGNODE_OK);
	assert_string_equal(c.name, name);
}

static void test_cache_spec_bad_parts(void **state)
{
	(void)state;
	static const struct { const char *spec, *want; } cases[] = {
		{ "", "empty cache name (the name comes first)" },
		{ " ,mode=replicated", "empty cache name (the name comes first)" },
		{ "mode=replicated", "'mode=replicated': expected the cache name first" },
		{ "c,mode=weird", "mode=weird: expected one of partitioned, replicated" },
		{ "c,sync=eventual", "sync=eventual: expected one of full_sync, "
		  "primary_sync, full_async" },
		{ "c,atomicity=acid", "atomicity=acid: expected one of atomic, "
		  "transactional" },
		{ "c,read-from-backup=maybe", "read-from-backup=maybe: expected true or "
		  "false" },
		{ "c,persistence=2", "persistence=2: expected true or false" },
		{ "c,ttl=1d", "ttl=1d: expected a duration in ms in [0, 315360000000]" },
		{ "c,ttl=-1", "ttl=-1: expected a duration in ms in [0, 315360000000]" },
		{ "c,colour=blue", "'colour': unknown part (expected mode, backups, sync, "
		  "atomicity, partitions, read-from-backup, persistence or ttl)" },
		{ "c,replicated", "'replicated': expected key=value" },
		{ "c,,mode=replicated", "empty part between commas" },
		{ "c,", "empty part between commas" },
		{ "c,mode=replicated,mode=partitioned", "'mode': given twice" },
		{ "c,backups=1,ttl=1s,backups=2", "'backups': given twice" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		dg_cache_config c;
		cap e;
		char want[256];
		assert_int_equal(dgnode_parse_cache_spec(cases[i].spec, &c, cap_open(&e)),
		    DGNODE_USAGE);
		snprintf(want, sizeof(want), "dgnode: --cache=%s: %s\n", cases[i].spec,
		    cases[i].want);
		assert_string_equal(cap_text(&e), want);
		cap_close(&e);
	}
	/* A name too long for dg_cache_config. */
	char spec[200];
	dg_cache_config c;
	cap e;
	memset(spec, 'n', 128);
	strcpy(spec + 128, ",mode=replicated");
	assert_int_equal(dgnode_parse_cache_spec(spec, &c, cap_open(&e)), DGNODE_USAGE);
	assert_contains(cap_text(&e), "longer than 127 bytes");
	cap_close(&e);

	/* As a flag and as a file line, the bad part is named the same way. */
	dgnode_settings s;
	char msg[256], path[64], want[256];
	dgnode_settings_init(&s);
	assert_int_equal(parse1(&s, "--cache=c,backups=x", msg, sizeof(msg)),
	    DGNODE_USAGE);
	assert_string_equal(msg, "dgnode: --cache=c,backups=x: backups=x: expected an "
	    "integer in [0, 64]\n");
	write_file(path, "cache = ok\ncache = c, sync=eventual\n");
	assert_int_equal(dgnode_settings_load_file(&s, path, cap_open(&e)),
	    DGNODE_USAGE);
	snprintf(want, sizeof(want), "dgnode: %s:2: cache = c, sync=eventual: "
	    "sync=eventual: expected one of full_sync, primary_sync, full_async\n",
	    path);
	assert_string_equal(cap_text(&e), want);
	cap_close(&e);
	unlink(path);
	dgnode_settings_free(&s);
}

/* ------------------------------------------------------------------------
 * --help, --version
 * ------------------------------------------------------------------------ */

/* text with every run of whitespace (line breaks too) made one space. */
static char *flatten(const char *text)
{
	char *out = malloc(strlen(text) + 1), *o = out;
	assert_non_null(out);
	for (const char *p = text; *p != 0; p++) {
		bool space = *p == ' ' || *p == '\n';
		if (!space || (o > out && o[-1] != ' '))
			*o++ = space ? ' ' : *p;
	}
	*o = 0;
	return out;
}

static void test_help_lists_every_setting(void **state)
{
	(void)state;
	cap c;
	char want[128];
	dgnode_settings_usage(cap_open(&c));
	const char *text = cap_text(&c);
	char *flat = flatten(text);   /* descriptions wrap */
	for (size_t i = 0; i < dgnode_settings_count; i++) {
		const dgnode_setting *st = &dgnode_settings_table[i];
		if (st->type == DGNODE_BOOL)
			snprintf(want, sizeof(want), "  --[no-]%s ", st->name);
		else
			snprintf(want, sizeof(want), "  --%s %s", st->name, st->metavar);
		assert_contains(text, want);
		if (st->def[0] != 0) {
			snprintf(want, sizeof(want), "(default %s", st->def);
			assert_contains(flat, want);
		}
	}
	assert_contains(text, "--config FILE");
	assert_contains(flat, "(default 10000; 100..600000 ms)");
	assert_contains(flat, "(default 1g; 1m..1t)");
	assert_contains(flat, "(default info; one of debug, info, warn, error)");
	assert_contains(flat, "DG_CLUSTER_SECRET");
	assert_contains(text, "ttl=DURATION");
	free(flat);

	/* Aligned: every description after an option starts in one column. */
	int col = -1;
	for (const char *line = text; *line != 0;) {
		const char *nl = strchr(line, '\n');
		size_t len = nl != NULL ? (size_t)(nl - line) : strlen(line);
		if (len > 4 && strncmp(line, "  --", 4) == 0) {
			const char *gap = strstr(line, "  ");
			gap = gap != NULL ? strstr(gap + 2, "  ") : NULL;
			if (gap != NULL && gap < line + len) {
				while (*gap == ' ')
					gap++;
				int at = (int)(gap - line);
				if (col < 0)
					col = at;
				assert_int_equal(at, col);
			}
		}
		assert_true(len <= 79);
		line += len + (nl != NULL);
	}
	assert_true(col > 0);
	cap_close(&c);

	dgnode_settings s;
	dgnode_settings_init(&s);
	assert_int_equal(quiet(parse_quiet, &s, "--help"), DGNODE_EXIT);
	assert_int_equal(quiet(parse_quiet, &s, "-h"), DGNODE_EXIT);
	assert_int_equal(quiet(parse_quiet, &s, "--version"), DGNODE_EXIT);
	dgnode_settings_free(&s);
}

/* ------------------------------------------------------------------------
 * The secret
 * ------------------------------------------------------------------------ */

static void expect_secret(dgnode_settings *s, const char *want)
{
	dg_node_config cfg;
	cap c;
	assert_int_equal(dgnode_settings_to_config(s, &cfg, cap_open(&c)), DGNODE_OK);
	assert_string_equal(cap_text(&c), "");
	cap_close(&c);
	if (want == NULL) {
		assert_null(cfg.secret);
		assert_int_equal(cfg.secret_len, 0);
		return;
	}
	assert_int_equal(cfg.secret_len, strlen(want));
	assert_memory_equal(cfg.secret, want, strlen(want));
}

/* --http-basic-auth-file / --http-bearer-token-file: read like the secret,
 * checked for their shape, into http_auth_basic / http_auth_token. */
static void test_http_auth_files(void **state)
{
	(void)state;
	char bpath[64], tpath[64], bflag[96], tflag[96], msg[256];
	dgnode_settings s;
	dg_node_config cfg;
	cap c;
	unsetenv("DG_CLUSTER_SECRET");
	write_file(bpath, "prom:pa ss:w\n");
	write_file(tpath, "t0k3n\r\n");
	snprintf(bflag, sizeof(bflag), "--http-basic-auth-file=%s", bpath);
	snprintf(tflag, sizeof(tflag), "--http-bearer-token-file=%s", tpath);
	dgnode_settings_init(&s);
	assert_int_equal(parse1(&s, bflag, msg, sizeof(msg)), DGNODE_OK);
	assert_int_equal(parse1(&s, tflag, msg, sizeof(msg)), DGNODE_OK);
	assert_int_equal(dgnode_settings_to_config(&s, &cfg, stderr), DGNODE_OK);
	assert_string_equal(cfg.http_auth_basic, "prom:pa ss:w");
	assert_string_equal(cfg.http_auth_token, "t0k3n");
	dgnode_settings_free(&s);

	static const struct { const char *basic, *token; size_t len; const char *why; } bad[] = {
		{ "nocolon\n", NULL, 0, "expected one line user:password" },
		{ "a:b\0c\n", NULL, 6, "expected one line user:password" },  /* a NUL */
		{ NULL, "two words\n", 0, "the token must be printable ASCII without spaces" },
		{ NULL, "\n", 0, "empty file" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *path = bad[i].basic ? bpath : tpath;
		const char *text = bad[i].basic ? bad[i].basic : bad[i].token;
		FILE *f = fopen(path, "wb");
		assert_non_null(f);
		size_t len = bad[i].len ? bad[i].len : strlen(text);
		assert_int_equal(fwrite(text, 1, len, f), len);
		fclose(f);
		dgnode_settings_init(&s);
		assert_int_equal(parse1(&s, bad[i].basic ? bflag : tflag, msg, sizeof(msg)),
		    DGNODE_OK);
		assert_int_equal(dgnode_settings_to_config(&s, &cfg, cap_open(&c)),
		    DGNODE_USAGE);
		assert_non_null(strstr(cap_text(&c), bad[i].why));
		assert_non_null(strstr(cap_text(&c), path));
		cap_close(&c);
		dgnode_settings_free(&s);
	}
	unlink(bpath);
	unlink(tpath);
}

static void test_secret_from_file_and_env(void **state)
{
	(void)state;
	static const struct { const char *file, *secret; } files[] = {
		{ "s3cr3t\n", "s3cr3t" }, { "s3cr3t", "s3cr3t" },
		{ "s3cr3t\r\n", "s3cr3t" }, { "two\nlines\n", "two\nlines" },
		{ "keep\n\n", "keep\n" },
	};
	char path[64], flag[96], msg[256];
	dgnode_settings s;

	unsetenv("DG_CLUSTER_SECRET");
	dgnode_settings_init(&s);
	expect_secret(&s, NULL);
	dgnode_settings_free(&s);

	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		write_file(path, files[i].file);
		snprintf(flag, sizeof(flag), "--secret-file=%s", path);
		dgnode_settings_init(&s);
		assert_int_equal(parse1(&s, flag, msg, sizeof(msg)), DGNODE_OK);
		expect_secret(&s, files[i].secret);
		expect_secret(&s, files[i].secret);   /* again: reloaded, no leak */
		dgnode_settings_free(&s);
		unlink(path);
	}

	/* From the environment when no file is given; the file wins. */
	setenv("DG_CLUSTER_SECRET", "from-env", 1);
	dgnode_settings_init(&s);
	expect_secret(&s, "from-env");
	write_file(path, "from-file\n");
	snprintf(flag, sizeof(flag), "--secret-file=%s", path);
	assert_int_equal(parse1(&s, flag, msg, sizeof(msg)), DGNODE_OK);
	expect_secret(&s, "from-file");
	dgnode_settings_free(&s);
	unlink(path);

	/* Errors: empty env, empty file, missing file, too long. */
	dg_node_config cfg;
	cap c;
	setenv("DG_CLUSTER_SECRET", "", 1);
	dgnode_settings_init(&s);
	assert_int_equal(dgnode_settings_to_config(&s, &cfg, cap_open(&c)),
	    DGNODE_USAGE);
	assert_string_equal(cap_text(&c), "dgnode: DG_CLUSTER_SECRET is set but empty\n");
	cap_close(&c);
	unsetenv("DG_CLUSTER_SECRET");

	write_file(path, "\n");
	snprintf(flag, sizeof(flag), "--secret-file=%s", path);
	assert_int_equal(parse1(&s, flag, msg, sizeof(msg)), DGNODE_OK);
	assert_int_equal(dgnode_settings_to_config(&s, &cfg, cap_open(&c)),
	    DGNODE_USAGE);
	char want[160];
	snprintf(want, sizeof(want), "dgnode: --secret-file=%s: empty file\n", path);
	assert_string_equal(cap_text(&c), want);
	cap_close(&c);
	unlink(path);

	char *big = malloc(5000);
	assert_non_null(big);
	memset(big, 'k', 4999);
	big[4999] = 0;
	write_file(path, big);
	free(big);
	snprintf(flag, sizeof(flag), "--secret-file=%s", path);
	assert_int_equal(parse1(&s, flag, msg, sizeof(msg)), DGNODE_OK);
	assert_int_equal(dgnode_settings_to_config(&s, &cfg, cap_open(&c)),
	    DGNODE_USAGE);
	assert_contains(cap_text(&c), "longer than 4096 bytes");
	cap_close(&c);
	unlink(path);

	assert_int_equal(parse1(&s, "--secret-file=/nonexistent/secret", msg,
	    sizeof(msg)), DGNODE_OK);
	assert_int_equal(dgnode_settings_to_config(&s, &cfg, cap_open(&c)),
	    DGNODE_USAGE);
	assert_string_equal(cap_text(&c), "dgnode: --secret-file=/nonexistent/secret: "
	    "No such file or directory\n");
	cap_close(&c);
	dgnode_settings_free(&s);
}

/* ------------------------------------------------------------------------
 * The node config
 * ------------------------------------------------------------------------ */

static void test_to_config_sets_every_field(void **state)
{
	(void)state;
	dgnode_settings s;
	dg_node_config cfg;
	dgnode_settings_init(&s);
	assert_int_equal(parse(&s, stderr, "--cluster-name=c1",
	    "--listen=tls+tcp://0.0.0.0:1", "--advertise=tls+tcp://pub:1",
	    "--seed=tls+tcp://s:1", "--tls-cert-key=/k.pem", "--tls-ca=/ca.pem",
	    "--failure-detection-timeout=3s", "--heartbeat-interval=500",
	    "--join-timeout=1m", "--request-timeout=2500ms", "--data-dir=/d",
	    "--storage-map-size=2g", "--no-storage-sync", "--recv-max=64m", "--reactor-spin-us=200",
	    "--rebalance-batch=1m", "--client", "--log-level=warn",
	    "--cache=p,persistence=true", "--http-max-connections=9",
	    "--http-idle-timeout=2s", "--insecure", (char *)NULL), DGNODE_OK);
	unsetenv("DG_CLUSTER_SECRET");
	assert_int_equal(dgnode_settings_to_config(&s, &cfg, stderr), DGNODE_OK);
	assert_string_equal(cfg.cluster_name, "c1");
	assert_string_equal(cfg.listen_url, "tls+tcp://0.0.0.0:1");
	assert_string_equal(cfg.advertise_url, "tls+tcp://pub:1");
	assert_int_equal(cfg.nseeds, 1);
	assert_string_equal(cfg.tls_cert_key_file, "/k.pem");
	assert_string_equal(cfg.tls_ca_file, "/ca.pem");
	assert_int_equal(cfg.failure_timeout_ms, 3000);
	assert_int_equal(cfg.heartbeat_ms, 500);
	assert_int_equal(cfg.join_timeout_ms, 60000);
	assert_int_equal(cfg.request_timeout_ms, 2500);
	assert_string_equal(cfg.data_dir, "/d");
	assert_int_equal(cfg.storage_map_size, (size_t)2 << 30);
	assert_true(cfg.storage_nosync);
	assert_int_equal(cfg.recv_max, 64u << 20);
	assert_int_equal(cfg.reactor_spin_us, 200);
	assert_int_equal(cfg.rebalance_batch_bytes, 1u << 20);
	assert_true(cfg.client);
	assert_int_equal(s.log_level, DGNODE_LOG_WARN);
	/* auto: the listen scheme and host, port + 100 and + 200 */
	assert_string_equal(cfg.admin_url, "tls+tcp://0.0.0.0:101");
	/* https:// on a TLS node */
	assert_string_equal(cfg.http_url, "https://0.0.0.0:201");
	assert_int_equal(cfg.http_max_connections, 9);
	assert_int_equal(cfg.http_idle_timeout_ms, 2000);
	assert_true(cfg.insecure);
	assert_null(cfg.http_auth_basic);
	assert_null(cfg.http_auth_token);
	dgnode_settings_free(&s);
}

static void test_admin_and_http_endpoints(void **state)
{
	(void)state;
	static const struct { const char *listen, *admin, *http, *want_a, *want_h; } c[] = {
		{ "tcp://127.0.0.1:47500", "auto", "auto", "tcp://127.0.0.1:47600",
		  "http://127.0.0.1:47700" },
		{ "tcp://127.0.0.1:0", "auto", "auto", "tcp://127.0.0.1:0",
		  "http://127.0.0.1:0" },
		{ "ipc:///tmp/x", "auto", "none", "tcp://127.0.0.1:0", NULL },
		{ "tcp://[::1]:5000", "none", "http://0.0.0.0:9", NULL, "http://0.0.0.0:9" },
		{ "tcp://h:65400", "tcp://h:1", "auto", "tcp://h:1", NULL },
	};
	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		dgnode_settings s;
		dg_node_config cfg;
		char l[128], a[128], h[128];
		snprintf(l, sizeof(l), "--listen=%s", c[i].listen);
		snprintf(a, sizeof(a), "--admin-listen=%s", c[i].admin);
		snprintf(h, sizeof(h), "--http-listen=%s", c[i].http);
		dgnode_settings_init(&s);
		unsetenv("DG_CLUSTER_SECRET");
		assert_int_equal(parse(&s, stderr, l, a, h, (char *)NULL), DGNODE_OK);
		int rc = dgnode_settings_to_config(&s, &cfg, NULL);
		if (i == 4) {   /* 65400 + 200 is no port */
			assert_int_equal(rc, DGNODE_USAGE);
			dgnode_settings_free(&s);
			continue;
		}
		assert_int_equal(rc, DGNODE_OK);
		if (c[i].want_a)
			assert_string_equal(cfg.admin_url, c[i].want_a);
		else
			assert_null(cfg.admin_url);
		if (c[i].want_h)
			assert_string_equal(cfg.http_url, c[i].want_h);
		else
			assert_null(cfg.http_url);
		dgnode_settings_free(&s);
	}
}

static void test_cross_checks(void **state)
{
	(void)state;
	static const struct { const char *a, *b, *want; } cases[] = {
		{ "--tls-ca=/ca.pem", NULL,
		  "dgnode: --tls-cert-key and --tls-ca go together: give both or neither\n" },
		{ "--listen=tls+tcp://h:1", NULL, "dgnode: --listen=tls+tcp://h:1: "
		  "tls+tcp:// needs --tls-cert-key and --tls-ca\n" },
		{ "--tls-ca=/ca.pem", "--tls-cert-key=/k.pem", "dgnode: "
		  "--listen=tcp://127.0.0.1:47500: --tls-cert-key and --tls-ca need a "
		  "tls+tcp:// listen URL\n" },
		{ "--heartbeat-interval=10s", NULL, "dgnode: --heartbeat-interval=10000: "
		  "must be below --failure-detection-timeout (10000)\n" },
		{ "--rebalance-batch=16m", NULL, "dgnode: --rebalance-batch=16m: at most "
		  "half of --recv-max (16m)\n" },
		{ "--rebalance-batch=9m", NULL, "dgnode: --rebalance-batch=9m: at most "
		  "half of --recv-max (16m)\n" },
		{ "--cache=p,persistence=true", NULL, "dgnode: --cache=p,persistence=true: "
		  "persistence=true needs --data-dir\n" },
		{ "--cache=a", "--cache=a,mode=replicated", "dgnode: "
		  "--cache=a,mode=replicated: cache 'a' given twice\n" },
	};
	unsetenv("DG_CLUSTER_SECRET");
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		dgnode_settings s;
		dg_node_config cfg;
		cap c;
		dgnode_settings_init(&s);
		assert_int_equal(parse(&s, stderr, cases[i].a, cases[i].b, (char *)NULL),
		    DGNODE_OK);
		assert_int_equal(dgnode_settings_to_config(&s, &cfg, cap_open(&c)),
		    DGNODE_USAGE);
		assert_string_equal(cap_text(&c), cases[i].want);
		cap_close(&c);
		dgnode_settings_free(&s);
	}
}

/* ------------------------------------------------------------------------
 * Memory
 * ------------------------------------------------------------------------ */

/* Each allocation in turn fails: a clean error, never a crash or leak
 * (the ASan build checks the leaks). */
static void test_allocation_failures(void **state)
{
	(void)state;
	bool ok_seen = false;
	for (uint64_t n = 1; n < 64 && !ok_seen; n++) {
		dgnode_settings s;
		dg_node_config cfg;
		cap c;
		dgnode_settings_init(&s);
		dgi_alloc_fail_nth(n);
		int rc = parse(&s, cap_open(&c), "--seed=tcp://a:1", "--seed=tcp://b:2",
		    "--cluster-name=x", "--cache=a", "--cache=b", "--seed=tcp://c:3",
		    "--seed=tcp://d:4", "--seed=tcp://e:5", (char *)NULL);
		if (rc == DGNODE_OK) {
			setenv("DG_CLUSTER_SECRET", "k", 1);
			rc = dgnode_settings_to_config(&s, &cfg, c.f);
			unsetenv("DG_CLUSTER_SECRET");
		}
		dgi_alloc_fail_nth(0);
		if (rc == DGNODE_OK) {
			ok_seen = true;
			assert_int_equal(s.seeds.l_n, 5);
			assert_int_equal(cfg.secret_len, 1);
		} else {
			assert_int_equal(rc, DGNODE_USAGE);
			assert_contains(cap_text(&c), "out of memory");
		}
		cap_close(&c);
		dgnode_settings_free(&s);
	}
	assert_true(ok_seen);
}

static void test_free_leaves_defaults(void **state)
{
	(void)state;
	dgnode_settings s;
	char buf[128];
	dgnode_settings_init(&s);
	assert_int_equal(parse(&s, stderr, "--listen=tcp://x:1", "--seed=tcp://a:1",
	    "--client", (char *)NULL), DGNODE_OK);
	dgnode_settings_free(&s);
	for (size_t i = 0; i < dgnode_settings_count; i++)
		assert_string_equal(dgnode_setting_format(&s, &dgnode_settings_table[i],
		    buf, sizeof(buf)), dgnode_settings_table[i].def);
	dgnode_settings_free(&s);   /* twice is fine */
}

int dgt_settings_tests(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_table_is_sane),
		cmocka_unit_test(test_defaults_equal_the_table),
		cmocka_unit_test(test_default_config_matches_library),
		cmocka_unit_test(test_flags_override_file_in_any_order),
		cmocka_unit_test(test_two_config_files_in_order),
		cmocka_unit_test(test_file_syntax),
		cmocka_unit_test(test_file_errors_name_file_and_line),
		cmocka_unit_test(test_durations),
		cmocka_unit_test(test_sizes),
		cmocka_unit_test(test_bools),
		cmocka_unit_test(test_enums_and_strings),
		cmocka_unit_test(test_uints),
		cmocka_unit_test(test_unknown_and_malformed_flags),
		cmocka_unit_test(test_repeatable_seeds),
		cmocka_unit_test(test_cache_spec_full),
		cmocka_unit_test(test_cache_spec_bad_parts),
		cmocka_unit_test(test_help_lists_every_setting),
		cmocka_unit_test(test_secret_from_file_and_env),
		cmocka_unit_test(test_http_auth_files),
		cmocka_unit_test(test_to_config_sets_every_field),
		cmocka_unit_test(test_admin_and_http_endpoints),
		cmocka_unit_test(test_cross_checks),
		cmocka_unit_test(test_allocation_failures),
		cmocka_unit_test(test_free_leaves_defaults),
	};
	unsetenv("DG_CLUSTER_SECRET");
	return cmocka_run_group_tests_name("settings", tests, NULL, NULL);
}
