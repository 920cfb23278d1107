/*
 * node_log_test.c — the one log (marshal/log.c) as an embedding program
 * sees it (issue 14, finding 6).
 *
 * What it promises: a node started with log_fn gets every line of every
 * layer through it — transport's, membership's, the node's own (NODE-OPEN
 * was a raw fprintf before) — in the documented format, and nothing on
 * stderr; log_level filters every line, the library's and dg_log's;
 * dgi_lograte_due lets one line a second through a flood and counts the
 * rest.  No main(): dgt_log_tests() runs the group (tests/node_test.c).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "node/datagrid.h"
#include "marshal/log_int.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dgt_log_tests(void);

#define OK(x) assert_int_equal((x), DG_OK)

struct sink {
	pthread_mutex_t mu;
	char text[1 << 16];
	size_t len;
	int lines, below_min;
	dg_log_level min;
};

static void on_line(void *ctx, dg_log_level level, const char *id, const char *line)
{
	struct sink *s = ctx;
	pthread_mutex_lock(&s->mu);
	s->lines++;
	s->below_min += level < s->min;
	/* the id is the line's id=, the line has no newline */
	char want[80];
	snprintf(want, sizeof(want), " id=%s", id);
	if (strstr(line, want) == NULL || strchr(line, '\n') != NULL || strncmp(line, "ts=", 3))
		s->below_min += 1000;
	size_t n = strlen(line);
	if (s->len + n + 1 < sizeof(s->text)) {
		memcpy(s->text + s->len, line, n);
		s->text[s->len + n] = '\n';
		s->len += n + 1;
		s->text[s->len] = 0;
	}
	pthread_mutex_unlock(&s->mu);
}

static dg_node *start_logged(struct sink *s, dg_log_level min)
{
	dg_node_config cfg;
	dg_node_config_init(&cfg);
	cfg.listen_url = "tcp://127.0.0.1:0";
	cfg.cluster_name = "log-test";
	cfg.http_url = "http://127.0.0.1:0";
	cfg.log_fn = on_line;
	cfg.log_ctx = s;
	cfg.log_level = (int)min;
	s->min = min;
	dg_node *n = NULL;
	OK(dg_node_start(&cfg, &n));
	return n;
}

static void test_sink_gets_every_layer(void **state)
{
	(void)state;
	static struct sink s = { .mu = PTHREAD_MUTEX_INITIALIZER };
	dg_node *n = start_logged(&s, DG_LOG_INFO);
	dg_log(DG_LOG_INFO, "LOG-TEST", "k=%d", 7);
	dg_log(DG_LOG_DEBUG, "LOG-TEST-DEBUG", "k=%d", 8);
	dg_node_stop(n);
	dg_log_configure(NULL, NULL, DG_LOG_INFO);
	dg_log(DG_LOG_INFO, "LOG-TEST-AFTER", "to stderr");
	pthread_mutex_lock(&s.mu);
	assert_non_null(strstr(s.text, " level=info id=TRANSPORT-UP "));  /* transport */
	assert_non_null(strstr(s.text, " level=info id=TOPOLOGY "));      /* membership */
	assert_non_null(strstr(s.text, " level=info id=NODE-OPEN "));     /* node */
	assert_non_null(strstr(s.text, " level=info id=LOG-TEST k=7\n"));
	assert_null(strstr(s.text, "LOG-TEST-DEBUG"));
	assert_null(strstr(s.text, "LOG-TEST-AFTER"));
	assert_int_equal(s.below_min, 0);
	pthread_mutex_unlock(&s.mu);
}

static void test_level_filters_everything(void **state)
{
	(void)state;
	static struct sink s = { .mu = PTHREAD_MUTEX_INITIALIZER };
	dg_node *n = start_logged(&s, DG_LOG_WARN);
	assert_false(dg_log_enabled(DG_LOG_INFO));
	assert_true(dg_log_enabled(DG_LOG_WARN));
	dgi_log("warn", "LOG-TEST-WARN", "x=1");
	dgi_log("info", "LOG-TEST-INFO", "x=2");
	dg_node_stop(n);
	dg_log_configure(NULL, NULL, DG_LOG_INFO);
	pthread_mutex_lock(&s.mu);
	assert_null(strstr(s.text, "TRANSPORT-UP"));
	assert_null(strstr(s.text, "NODE-OPEN"));
	assert_null(strstr(s.text, "LOG-TEST-INFO"));
	assert_non_null(strstr(s.text, " level=warn id=LOG-TEST-WARN x=1\n"));
	assert_int_equal(s.below_min, 0);
	pthread_mutex_unlock(&s.mu);
}

static void test_rate(void **state)
{
	(void)state;
	struct dgi_lograte r = { 0 };
	uint32_t rep = 99;
	assert_true(dgi_lograte_due(&r, 1000, 1000, &rep));
	assert_int_equal(rep, 0);
	for (int i = 0; i < 500; i++)
		assert_false(dgi_lograte_due(&r, 1001 + (uint64_t)i, 1000, &rep));
	assert_true(dgi_lograte_due(&r, 2000, 1000, &rep));
	assert_int_equal(rep, 500);
	assert_false(dgi_lograte_due(&r, 2999, 1000, &rep));
	assert_true(dgi_lograte_due(&r, 3000, 1000, &rep));
	assert_int_equal(rep, 1);
}

int dgt_log_tests(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sink_gets_every_layer),
		cmocka_unit_test(test_level_filters_everything),
		cmocka_unit_test(test_rate),
	};
	return cmocka_run_group_tests_name("node_log", tests, NULL, NULL);
}
