/*
 * node_test.c — the node module's unit tests: the dgnode settings table
 * (tests/node_settings_test.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

int dgt_settings_tests(void);

int main(void)
{
	return dgt_settings_tests() ? 1 : 0;
}
