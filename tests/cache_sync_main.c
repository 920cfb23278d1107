/*
 * cache_sync_main.c — runs the cache_sync_test executable's groups:
 * compare-and-set (cache_cas_test.c) and the FULL_SYNC protocol
 * (cache_sync_test.c).  DG_TEST_FILTER=pattern runs the matching tests.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "cache_test.h"

#include <stdlib.h>

int main(void)
{
	if (getenv("DG_TEST_FILTER") != NULL)
		cmocka_set_test_filter(getenv("DG_TEST_FILTER"));
	int failed = dgt_cas_tests();
	failed += dgt_sync_tests();
	return failed ? 1 : 0;
}
