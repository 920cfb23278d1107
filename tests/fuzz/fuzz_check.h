/* fuzz_check.h — CHECK(cond): a fuzz target's invariant; when it does not
 * hold, the condition is printed and the run aborts (libFuzzer keeps the
 * input as a crash). */
#ifndef DG_FUZZ_CHECK_H
#define DG_FUZZ_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(c)                                                             \
	do {                                                                     \
		if (!(c)) {                                                          \
			fprintf(stderr, "%s:%d: invariant: %s\n", __FILE__, __LINE__, #c); \
			abort();                                                         \
		}                                                                    \
	} while (0)

#endif
