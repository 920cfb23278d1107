/*
 * node_test.c — the node module's unit tests: the dgnode settings table
 * (tests/node_settings_test.c), the HTTP /metrics endpoint
 * (tests/node_metrics_test.c), its HTTP server and what a node listens on
 * (tests/node_http_test.c), the log as an embedder sees it
 * (tests/node_log_test.c) and the baseline admin command
 * (tests/node_baseline_test.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

int dgt_settings_tests(void);
int dgt_metrics_tests(void);
int dgt_http_tests(void);
int dgt_log_tests(void);
int dgt_admin_baseline_tests(void);

int main(void)
{
	int failed = dgt_settings_tests();
	failed += dgt_metrics_tests();
	failed += dgt_http_tests();
	failed += dgt_log_tests();
	failed += dgt_admin_baseline_tests();
	return failed ? 1 : 0;
}
