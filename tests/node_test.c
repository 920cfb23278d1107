/*
 * node_test.c — the node module's unit tests: the dgnode settings table
 * (tests/node_settings_test.c), the HTTP /metrics endpoint
 * (tests/node_metrics_test.c), its HTTP server and what a node listens on
 * (tests/node_http_test.c), the log as an embedder sees it
 * (tests/node_log_test.c) and the baseline admin command
 * (tests/node_baseline_test.c); here, the names of the threads a node
 * starts.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "datagrid.h"

#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int dgt_settings_tests(void);
int dgt_metrics_tests(void);
int dgt_http_tests(void);
int dgt_log_tests(void);
int dgt_admin_baseline_tests(void);

/* Whether a thread of this process is named name (/proc/self/task/N/comm). */
static bool thread_named(const char *name)
{
	DIR *d = opendir("/proc/self/task");
	assert_non_null(d);
	bool found = false;
	struct dirent *de;
	while (!found && (de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		char path[300], comm[32] = "";
		snprintf(path, sizeof path, "/proc/self/task/%s/comm", de->d_name);
		FILE *f = fopen(path, "r");
		if (f == NULL)
			continue; /* (the thread ended meanwhile) */
		if (fgets(comm, sizeof comm, f) != NULL)
			comm[strcspn(comm, "\n")] = 0;
		fclose(f);
		found = strcmp(comm, name) == 0;
	}
	closedir(d);
	return found;
}

/* Every thread a node starts says what it is (top -H, perf --comm, gdb):
 * the ones a server node always has, and its HTTP port's. */
static void test_threads_named(void **state)
{
	(void)state;
	static const char *const names[] = { "dg-reactor", "dg-tp-service", "dg-member",
		"dg-notifier", "dg-worker", "dg-rebalancer", "dg-sweeper", "dg-tx-expirer",
		"dg-tx-deadlock", "dg-tx-recover", "dg-http-accept" };
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		assert_false(thread_named(names[i])); /* (none before the node) */
	dg_node_config cfg;
	dg_node_config_init(&cfg);
	cfg.listen_url = "tcp://127.0.0.1:0";
	cfg.cluster_name = "names-test";
	cfg.http_url = "http://127.0.0.1:0";
	dg_node *n = NULL;
	assert_int_equal(dg_node_start(&cfg, &n), DG_OK);
	/* (a thread names itself when it first runs, which may be after
	 * dg_node_start returned) */
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		struct timespec t0, t;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		while (!thread_named(names[i])) {
			clock_gettime(CLOCK_MONOTONIC, &t);
			if (t.tv_sec - t0.tv_sec > 5) {
				dg_node_stop(n);
				fail_msg("no thread named %s after 5 s", names[i]);
			}
			usleep(10 * 1000);
		}
	}
	dg_node_stop(n);
}

int main(void)
{
	const struct CMUnitTest threads[] = { cmocka_unit_test(test_threads_named) };
	int failed = cmocka_run_group_tests_name("node_threads", threads, NULL, NULL);
	failed += dgt_settings_tests();
	failed += dgt_metrics_tests();
	failed += dgt_http_tests();
	failed += dgt_log_tests();
	failed += dgt_admin_baseline_tests();
	return failed ? 1 : 0;
}
