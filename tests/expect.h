/*
 * expect.h — EXPECT(expr, err) and OK(expr) for cmocka tests of calls that
 * return dg_err: a mismatch fails the test naming the call, where it is,
 * and both errors by name.  Include after <cmocka.h> and the header that
 * declares dg_strerror.
 */
#ifndef DG_TESTS_EXPECT_H
#define DG_TESTS_EXPECT_H

static inline void expect_err_(dg_err got, dg_err want, const char *what,
    const char *file, int line)
{
	if (got != want)
		fail_msg("%s:%d: %s returned %s, expected %s", file, line, what,
		    dg_strerror(got), dg_strerror(want));
}
#define EXPECT(expr, want) expect_err_((expr), (want), #expr, __FILE__, __LINE__)
#define OK(expr) EXPECT((expr), DG_OK)

#endif
