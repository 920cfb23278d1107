/*
 * linz_test.c — unit tests of cluster-tests/linz.c, the linearizability
 * checker behind dglinz.
 *
 * Every verdict test checks a pair: a history that is linearizable and a
 * small change of it that is not (or the other way round), so a checker
 * that always says one thing fails it.
 *   - linearizable: sequential ops, overlapping writes and reads, nil
 *     reads, cas true/false, info writes and cas that did or did not take
 *     effect (including the one an ok cas=false needs: the drop must not
 *     apply), values written twice (no uniqueness shortcut), equal times
 *     (concurrent), failed ops, invokes without completion;
 *   - not linearizable: a stale read after a completed write, a read of a
 *     value never written, a value read then an older one, cas=true when
 *     the value could not be the expected one, cas=false when it must
 *     have been, a lost acknowledged write, the two-reader inversion, a
 *     value observed before its info write was invoked;
 *   - the report of a failure (prefix, value, the ops that could not be
 *     placed) and its text;
 *   - parse errors with their file:line, I/O errors, the merge of two
 *     files (and of a tie across them), the file reader's chunks (lines
 *     across them, overlong lines);
 *   - the budget: max_states too small gives unknown, never linearizable;
 *   - generated histories: a simulated register (10 processes, random
 *     intervals, reads, writes, cas, info and failed ops), 10 000 ops on
 *     one key, linearizable by construction; the same with one read
 *     corrupted (a value never written, or a stale one), which must be
 *     reported; 200 000 ops over 20 keys;
 *   - every allocation failing in turn: LINZ_ERR_NOMEM, no leak (ASan).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "cluster-tests/linz.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------ */

static linz_history *parse(const char *text)
{
	linz_history *h;
	char err[256] = "";
	assert_int_equal(linz_history_create(&h), LINZ_OK);
	linz_err rc = linz_history_add_text(h, "t.hist", text, strlen(text), err, sizeof(err));
	if (rc == LINZ_OK)
		rc = linz_history_finish(h, err, sizeof(err));
	if (rc != LINZ_OK)
		fail_msg("parse: %s (%s)", linz_strerror(rc), err);
	return h;
}

static linz_result *check(const linz_history *h, size_t key, uint64_t max_states)
{
	linz_config cfg;
	linz_config_init(&cfg);
	if (max_states)
		cfg.max_states = max_states;
	linz_result *r;
	assert_int_equal(linz_check_key(h, key, &cfg, &r), LINZ_OK);
	return r;
}

/* The verdict of a one-key history. */
static linz_verdict verdict(const char *text)
{
	linz_history *h = parse(text);
	assert_int_equal(linz_history_nkeys(h), 1);
	linz_result *r = check(h, 0, 0);
	linz_verdict v = r->verdict;
	linz_result_destroy(r);
	linz_history_destroy(h);
	return v;
}

#define LIN(text) assert_int_equal(verdict(text), LINZ_LINEARIZABLE)
#define NOT_LIN(text) assert_int_equal(verdict(text), LINZ_NOT_LINEARIZABLE)

/* The message of a history that must not parse, and its code. */
static linz_err parse_error(const char *text, size_t len, char *err, size_t errlen)
{
	linz_history *h;
	assert_int_equal(linz_history_create(&h), LINZ_OK);
	err[0] = '\0';
	linz_err rc = linz_history_add_text(h, "t.hist", text, len, err, errlen);
	if (rc == LINZ_OK)
		rc = linz_history_finish(h, err, errlen);
	linz_history_destroy(h);
	return rc;
}

/* ------------------------------------------------------------------------
 * Linearizable histories, and a change that breaks each
 * ------------------------------------------------------------------------ */

static void test_sequential(void **state)
{
	(void)state;
	const char *base =
	    "# one process, one op at a time\n"
	    "0 a invoke x write 1\n"
	    "1 a ok x write 1\n"
	    "2 a invoke x read\n"
	    "3 a ok x read 1\n"
	    "4 a invoke x cas 1 2\n"
	    "5 a ok x cas 1 2 true\n"
	    "6 a invoke x cas 1 3\n"
	    "7 a ok x cas 1 3 false\n"
	    "\n"
	    "8 a invoke x read\n";
	char text[1024];
	snprintf(text, sizeof(text), "%s9 a ok x read 2\n", base);
	LIN(text);
	snprintf(text, sizeof(text), "%s9 a ok x read 1\n", base);   /* stale */
	NOT_LIN(text);
	snprintf(text, sizeof(text), "%s9 a ok x read 3\n", base);   /* the failed cas */
	NOT_LIN(text);
}

static void test_nil_reads(void **state)
{
	(void)state;
	LIN("0 a invoke x read\n1 a ok x read nil\n");
	NOT_LIN("0 a invoke x read\n1 a ok x read 1\n");
	/* a read concurrent with the first write sees nil or the value */
	LIN("0 w invoke x write 1\n0 r invoke x read\n5 r ok x read nil\n10 w ok x write 1\n");
	LIN("0 w invoke x write 1\n0 r invoke x read\n5 r ok x read 1\n10 w ok x write 1\n");
	/* after the write completed: not nil */
	NOT_LIN("0 w invoke x write 1\n1 w ok x write 1\n2 r invoke x read\n3 r ok x read nil\n");
	/* cas from nil */
	LIN("0 a invoke x cas nil 1\n1 a ok x cas nil 1 true\n2 a invoke x read\n3 a ok x read 1\n");
	NOT_LIN("0 a invoke x cas nil 1\n1 a ok x cas nil 1 false\n");
}

static void test_concurrent_writes_reads(void **state)
{
	(void)state;
	const char *writes =
	    "0 c1 invoke x write 1\n"
	    "0 c2 invoke x write 2\n"
	    "10 c1 ok x write 1\n"
	    "10 c2 ok x write 2\n";
	char text[1024];
	/* either order of the writes, then stable */
	snprintf(text, sizeof(text), "%s11 r invoke x read\n12 r ok x read 1\n"
	    "13 r invoke x read\n14 r ok x read 1\n", writes);
	LIN(text);
	snprintf(text, sizeof(text), "%s11 r invoke x read\n12 r ok x read 2\n", writes);
	LIN(text);
	/* once both completed, the value cannot change */
	snprintf(text, sizeof(text), "%s11 r invoke x read\n12 r ok x read 1\n"
	    "13 r invoke x read\n14 r ok x read 2\n", writes);
	NOT_LIN(text);
	/* during the writes: 2 then 1 is fine (w2, read, w1, read) */
	LIN("0 c1 invoke x write 1\n0 c2 invoke x write 2\n2 r invoke x read\n3 r ok x read 2\n"
	    "4 r invoke x read\n5 r ok x read 1\n10 c1 ok x write 1\n10 c2 ok x write 2\n");
	/* ... but not 2, 1, 2: each write happens once */
	NOT_LIN("0 c1 invoke x write 1\n0 c2 invoke x write 2\n2 r invoke x read\n3 r ok x read 2\n"
	    "4 r invoke x read\n5 r ok x read 1\n6 r invoke x read\n7 r ok x read 2\n"
	    "10 c1 ok x write 1\n10 c2 ok x write 2\n");
}

static void test_cas(void **state)
{
	(void)state;
	const char *w1 = "0 a invoke x write 1\n1 a ok x write 1\n";
	char text[1024];
	/* cas true from the value, cas false from another */
	snprintf(text, sizeof(text), "%s2 b invoke x cas 1 2\n3 b ok x cas 1 2 true\n"
	    "4 b invoke x cas 1 3\n5 b ok x cas 1 3 false\n6 b invoke x read\n7 b ok x read 2\n", w1);
	LIN(text);
	/* cas true when the value could not be the expected one */
	snprintf(text, sizeof(text), "%s2 b invoke x cas 5 6\n3 b ok x cas 5 6 true\n", w1);
	NOT_LIN(text);
	/* cas false when the value must have been the expected one */
	snprintf(text, sizeof(text), "%s2 b invoke x cas 1 6\n3 b ok x cas 1 6 false\n", w1);
	NOT_LIN(text);
	/* ... unless a concurrent write changed it first */
	snprintf(text, sizeof(text), "%s2 b invoke x cas 1 6\n2 c invoke x write 7\n"
	    "3 b ok x cas 1 6 false\n4 c ok x write 7\n", w1);
	LIN(text);
	/* a failed cas (fail) did not happen */
	snprintf(text, sizeof(text), "%s2 b invoke x cas 1 6\n3 b fail x cas 1 6\n"
	    "4 b invoke x read\n5 b ok x read 1\n", w1);
	LIN(text);
	snprintf(text, sizeof(text), "%s2 b invoke x cas 1 6\n3 b fail x cas 1 6\n"
	    "4 b invoke x read\n5 b ok x read 6\n", w1);
	NOT_LIN(text);
}

static void test_info_writes(void **state)
{
	(void)state;
	const char *base =
	    "0 a invoke x write 1\n"
	    "1 a ok x write 1\n"
	    "2 b invoke x write 2\n"
	    "3 b info x write 2\n"
	    "10 c invoke x read\n";
	char text[1024];
	snprintf(text, sizeof(text), "%s11 c ok x read 2\n", base);   /* it happened */
	LIN(text);
	snprintf(text, sizeof(text), "%s11 c ok x read 1\n", base);   /* it did not */
	LIN(text);
	/* it happened (2 was read): 1 cannot come back */
	snprintf(text, sizeof(text), "%s11 c ok x read 2\n12 c invoke x read\n13 c ok x read 1\n", base);
	NOT_LIN(text);
	/* it may happen any time after its invoke, even much later */
	snprintf(text, sizeof(text), "%s11 c ok x read 1\n50 c invoke x read\n51 c ok x read 2\n", base);
	LIN(text);
	/* but not before its invoke */
	NOT_LIN("0 r invoke x read\n1 r ok x read 2\n2 b invoke x write 2\n3 b info x write 2\n");
	/* an invoke without completion is info too */
	LIN("0 b invoke x write 2\n5 r invoke x read\n6 r ok x read 2\n");
	LIN("0 b invoke x write 2\n5 r invoke x read\n6 r ok x read nil\n");
	/* a failed write did not happen */
	NOT_LIN("0 b invoke x write 2\n1 b fail x write 2\n5 r invoke x read\n6 r ok x read 2\n");
	/* observed by a read completing at the largest time */
	LIN("18446744073709551610 b invoke x write 2\n18446744073709551611 b info x write 2\n"
	    "18446744073709551612 r invoke x read\n18446744073709551615 r ok x read 2\n");
	NOT_LIN("18446744073709551610 b invoke x write 2\n18446744073709551611 b fail x write 2\n"
	    "18446744073709551612 r invoke x read\n18446744073709551615 r ok x read 2\n");
	/* info and failed reads are not checked */
	LIN("0 r invoke x read\n1 r info x read\n2 r invoke x read\n3 r fail x read\n");
}

static void test_info_cas(void **state)
{
	(void)state;
	const char *base =
	    "0 a invoke x write 1\n"
	    "1 a ok x write 1\n"
	    "2 b invoke x cas 1 2\n"
	    "3 b info x cas 1 2\n"
	    "10 c invoke x read\n";
	char text[1024];
	snprintf(text, sizeof(text), "%s11 c ok x read 2\n", base);
	LIN(text);
	snprintf(text, sizeof(text), "%s11 c ok x read 1\n", base);
	LIN(text);
	/* an info cas can only take effect on its expected value */
	NOT_LIN("0 a invoke x write 1\n1 a ok x write 1\n2 b invoke x cas 5 2\n3 b info x cas 5 2\n"
	    "10 c invoke x read\n11 c ok x read 2\n");
	/* a chain of info cas, each observed */
	LIN("0 a invoke x write 1\n1 a ok x write 1\n2 b invoke x cas 1 2\n3 b info x cas 1 2\n"
	    "4 c invoke x cas 2 3\n5 c info x cas 2 3\n10 d invoke x read\n11 d ok x read 3\n");
	NOT_LIN("0 a invoke x write 1\n1 a ok x write 1\n2 b invoke x cas 1 2\n3 b info x cas 1 2\n"
	    "4 c invoke x cas 2 3\n5 c info x cas 2 3\n10 d invoke x read\n11 d ok x read 3\n"
	    "12 d invoke x read\n13 d ok x read 2\n");
}

/* An info write nobody reads may still be needed: an ok cas=false can
 * only be explained by it (dropping it as "never happened" is unsound). */
static void test_unobserved_info_needed_by_cas_false(void **state)
{
	(void)state;
	const char *head = "0 a invoke x write a\n1 a ok x write a\n";
	const char *tail = "5 c invoke x cas a c\n6 c ok x cas a c false\n"
	    "7 a invoke x write d\n8 a ok x write d\n9 c invoke x read\n10 c ok x read d\n";
	char text[1024];
	snprintf(text, sizeof(text), "%s2 b invoke x write b\n3 b info x write b\n%s", head, tail);
	LIN(text);
	/* an info cas that could have replaced a */
	snprintf(text, sizeof(text), "%s2 b invoke x cas a b\n3 b info x cas a b\n%s", head, tail);
	LIN(text);
	/* the same with the write failed: nothing explains the cas=false */
	snprintf(text, sizeof(text), "%s2 b invoke x write b\n3 b fail x write b\n%s", head, tail);
	NOT_LIN(text);
	/* or with an info cas whose expected value never held */
	snprintf(text, sizeof(text), "%s2 b invoke x cas z b\n3 b info x cas z b\n%s", head, tail);
	NOT_LIN(text);
	/* or with the info write invoked after the cas completed */
	NOT_LIN("0 a invoke x write a\n1 a ok x write a\n5 c invoke x cas a c\n6 c ok x cas a c false\n"
	    "7 b invoke x write b\n8 b info x write b\n");
	/* several unobserved info writes, several cas=false, each needing one */
	LIN("0 a invoke x write a\n1 a ok x write a\n2 b invoke x write b\n3 b info x write b\n"
	    "2 e invoke x write e\n3 e info x write e\n4 c invoke x cas a c\n5 c ok x cas a c false\n"
	    "6 a invoke x write a2\n7 a ok x write a2\n8 c invoke x cas a2 c\n9 c ok x cas a2 c false\n");
	NOT_LIN("0 a invoke x write a\n1 a ok x write a\n2 b invoke x write b\n3 b info x write b\n"
	    "4 c invoke x cas a c\n5 c ok x cas a c false\n"
	    "6 a invoke x write a2\n7 a ok x write a2\n8 c invoke x cas a2 c\n9 c ok x cas a2 c false\n");
}

/* Values written twice: nothing may assume the writer of a value read. */
static void test_non_unique_values(void **state)
{
	(void)state;
	const char *base =
	    "0 a invoke x write 1\n1 a ok x write 1\n"
	    "2 a invoke x write 2\n3 a ok x write 2\n"
	    "4 b invoke x write 1\n5 b info x write 1\n"
	    "6 c invoke x read\n";
	char text[1024];
	snprintf(text, sizeof(text), "%s7 c ok x read 1\n", base);   /* the info write did it */
	LIN(text);
	snprintf(text, sizeof(text), "%s7 c ok x read 1\n8 c invoke x read\n9 c ok x read 2\n", base);
	NOT_LIN(text);
	/* ok writes of the same value */
	LIN("0 a invoke x write 1\n1 a ok x write 1\n2 a invoke x write 2\n3 a ok x write 2\n"
	    "4 a invoke x write 1\n5 a ok x write 1\n6 c invoke x read\n7 c ok x read 1\n");
	NOT_LIN("0 a invoke x write 1\n1 a ok x write 1\n2 a invoke x write 2\n3 a ok x write 2\n"
	    "4 a invoke x write 1\n5 a ok x write 1\n6 c invoke x read\n7 c ok x read 2\n");
	/* a long read sees 1 from the ok write; the info write of 1, invoked
	 * later, must not be taken as the read's writer: had it happened
	 * before the read completed, the last read could not see 2 */
	LIN("0 a invoke x write 1\n1 a ok x write 1\n2 r invoke x read\n3 a invoke x write 2\n"
	    "4 a ok x write 2\n10 b invoke x write 1\n11 b info x write 1\n20 r ok x read 1\n"
	    "21 r invoke x read\n22 r ok x read 2\n");
	/* with the ok write of another value, only the info write explains
	 * the long read, and then the last read cannot see 2 */
	NOT_LIN("0 a invoke x write 5\n1 a ok x write 5\n2 r invoke x read\n3 a invoke x write 2\n"
	    "4 a ok x write 2\n10 b invoke x write 1\n11 b info x write 1\n20 r ok x read 1\n"
	    "21 r invoke x read\n22 r ok x read 2\n");
	/* writes of nil (absent) */
	LIN("0 a invoke x write 1\n1 a ok x write 1\n2 a invoke x write nil\n3 a ok x write nil\n"
	    "4 c invoke x read\n5 c ok x read nil\n");
}

static void test_equal_times_are_concurrent(void **state)
{
	(void)state;
	/* the write completes at 10, the read is invoked at 10: concurrent */
	LIN("0 w invoke x write 1\n10 w ok x write 1\n10 r invoke x read\n20 r ok x read nil\n");
	/* the same whatever the order of the lines */
	LIN("0 w invoke x write 1\n10 r invoke x read\n10 w ok x write 1\n20 r ok x read nil\n");
	NOT_LIN("0 w invoke x write 1\n10 w ok x write 1\n11 r invoke x read\n20 r ok x read nil\n");
}

static void test_keys_are_independent(void **state)
{
	(void)state;
	linz_history *h = parse(
	    "0 a invoke x write 1\n1 a ok x write 1\n"
	    "2 a invoke y write 1\n3 a ok y write 1\n"
	    "4 a invoke x read\n5 a ok x read 1\n"
	    "6 a invoke y read\n7 a ok y read nil\n"
	    "8 a invoke z read\n9 a ok z read 1\n");
	assert_int_equal(linz_history_nkeys(h), 3);
	assert_string_equal(linz_history_key(h, 0), "x");
	assert_string_equal(linz_history_key(h, 1), "y");
	assert_string_equal(linz_history_key(h, 2), "z");
	assert_null(linz_history_key(h, 3));
	linz_verdict want[3] = { LINZ_LINEARIZABLE, LINZ_NOT_LINEARIZABLE, LINZ_NOT_LINEARIZABLE };
	for (size_t k = 0; k < 3; k++) {
		linz_result *r = check(h, k, 0);
		assert_int_equal(r->verdict, want[k]);
		linz_result_destroy(r);
	}
	linz_result *r;
	assert_int_equal(linz_check_key(h, 3, NULL, &r), LINZ_ERR_INVAL);
	linz_history_destroy(h);
}

/* ------------------------------------------------------------------------
 * Not linearizable: the classic anomalies, and the report
 * ------------------------------------------------------------------------ */

static void test_stale_read_report(void **state)
{
	(void)state;
	linz_history *h = parse(
	    "100 a invoke x write 1\n101 a ok x write 1\n"
	    "102 a invoke x write 2\n103 a ok x write 2\n"
	    "104 b invoke x read\n105 b ok x read 1\n");
	linz_result *r = check(h, 0, 0);
	assert_int_equal(r->verdict, LINZ_NOT_LINEARIZABLE);
	assert_int_equal(r->ops, 3);
	assert_int_equal(r->depth, 2);
	assert_string_equal(r->value, "2");
	assert_int_equal(r->ntail, 2);
	assert_string_equal(r->tail[0].value, "1");
	assert_string_equal(r->tail[1].value, "2");
	assert_int_equal(r->nstuck, 1);
	assert_int_equal(r->nstuck_total, 1);
	assert_string_equal(r->stuck[0].proc, "b");
	assert_int_equal(r->stuck[0].type, LINZ_READ);
	assert_string_equal(r->stuck[0].value, "1");
	assert_int_equal(r->stuck[0].invoke_ns, 4);   /* relative to the first event */
	assert_int_equal(r->stuck[0].complete_ns, 5);
	assert_string_equal(r->stuck[0].file, "t.hist");
	assert_int_equal(r->stuck[0].line, 5);
	assert_int_equal(r->blocking, 0);
	assert_true(r->blocking_valid);

	/* the text names the key, the prefix, the value and the stuck read */
	FILE *f = tmpfile();
	assert_non_null(f);
	linz_result_print(r, true, f);
	rewind(f);
	char buf[4096];
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	assert_non_null(strstr(buf, "key x: not-linearizable"));
	assert_non_null(strstr(buf, "2 of 3 operations"));
	assert_non_null(strstr(buf, "read -> 1"));
	assert_non_null(strstr(buf, "+0.000000004s .. +0.000000005s"));
	assert_non_null(strstr(buf, "(t.hist:5)"));
	assert_non_null(strstr(buf, "completed first"));
	linz_result_destroy(r);
	linz_history_destroy(h);
}

static void test_anomalies(void **state)
{
	(void)state;
	/* a read of a value never written */
	NOT_LIN("0 a invoke x write 1\n1 a ok x write 1\n2 b invoke x read\n3 b ok x read 9\n");
	/* a value read, then an older one (the write of 2 still running) */
	NOT_LIN("0 a invoke x write 1\n1 a ok x write 1\n2 a invoke x write 2\n"
	    "3 b invoke x read\n4 b ok x read 2\n5 b invoke x read\n6 b ok x read 1\n10 a ok x write 2\n");
	LIN("0 a invoke x write 1\n1 a ok x write 1\n2 a invoke x write 2\n"
	    "3 b invoke x read\n4 b ok x read 1\n5 b invoke x read\n6 b ok x read 2\n10 a ok x write 2\n");
	/* a lost acknowledged write */
	NOT_LIN("0 a invoke x write 1\n1 a ok x write 1\n2 b invoke x read\n3 b ok x read nil\n");
	NOT_LIN("0 a invoke x write 1\n0 c invoke x write 2\n1 a ok x write 1\n5 c info x write 2\n"
	    "6 b invoke x read\n7 b ok x read nil\n");
	/* the two-reader inversion: r1 sees the new value, a later r2 the old */
	NOT_LIN("0 w invoke x write 1\n10 r1 invoke x read\n20 r1 ok x read 1\n"
	    "30 r2 invoke x read\n40 r2 ok x read nil\n100 w ok x write 1\n");
	LIN("0 w invoke x write 1\n10 r1 invoke x read\n20 r1 ok x read nil\n"
	    "30 r2 invoke x read\n40 r2 ok x read 1\n100 w ok x write 1\n");
	/* the same when the reads overlap: either order is possible */
	LIN("0 w invoke x write 1\n10 r1 invoke x read\n30 r2 invoke x read\n35 r1 ok x read 1\n"
	    "40 r2 ok x read nil\n100 w ok x write 1\n");
}

/* ------------------------------------------------------------------------
 * Parsing
 * ------------------------------------------------------------------------ */

static void test_parse_ok(void **state)
{
	(void)state;
	/* comments, blank lines, tabs, CRLF, a last line without newline */
	linz_history *h = parse("# header\n\n  # indented comment\r\n"
	    "5\ta  invoke\tx write 1\r\n\t\n7 a ok x write 1\r\n9 b invoke x read\n12 b ok x read 1");
	linz_counts c;
	linz_history_counts(h, &c);
	assert_int_equal(c.ops, 2);
	assert_int_equal(c.ok, 2);
	assert_int_equal(c.fail, 0);
	assert_int_equal(c.info, 0);
	assert_int_equal(c.keys, 1);
	assert_int_equal(c.start_ns, 5);
	assert_int_equal(c.span_ns, 7);
	linz_result *r = check(h, 0, 0);
	assert_int_equal(r->verdict, LINZ_LINEARIZABLE);
	linz_result_destroy(r);
	linz_history_destroy(h);

	/* the largest time; counts of every status */
	h = parse("18446744073709551614 a invoke x write 1\n18446744073709551615 a ok x write 1\n"
	    "0 b invoke x write 2\n1 b fail x write 2\n2 c invoke x cas 1 2\n3 c info x cas 1 2\n"
	    "4 d invoke x read\n");
	linz_history_counts(h, &c);
	assert_int_equal(c.ops, 4);
	assert_int_equal(c.ok, 1);
	assert_int_equal(c.fail, 1);
	assert_int_equal(c.info, 2);
	assert_int_equal(c.span_ns, UINT64_MAX);
	linz_history_destroy(h);
}

static void test_parse_errors(void **state)
{
	(void)state;
	static const struct {
		const char *text;
		const char *where;      /* "t.hist:N:" */
		const char *what;
	} cases[] = {
		{ "x a invoke k read\n", "t.hist:1:", "time" },
		{ "-1 a invoke k read\n", "t.hist:1:", "time" },
		{ "18446744073709551616 a invoke k read\n", "t.hist:1:", "time" },
		{ "# ok\n1 a start k read\n", "t.hist:2:", "phase" },
		{ "1 a invoke k delete\n", "t.hist:1:", "op" },
		{ "1 a invoke k\n", "t.hist:1:", "fields" },
		{ "1 a invoke k write\n", "t.hist:1:", "argument" },
		{ "1 a invoke k read 3\n", "t.hist:1:", "argument" },
		{ "1 a invoke k cas 1\n", "t.hist:1:", "argument" },
		{ "1 a invoke k cas 1 2\n2 a ok k cas 1 2\n", "t.hist:2:", "argument" },
		{ "1 a invoke k cas 1 2\n2 a ok k cas 1 2 maybe\n", "t.hist:2:", "true" },
		{ "1 a invoke k cas 1 2 3 4 5 6\n", "t.hist:1:", "fields" },
		{ "1 a invoke k write a\x01z\n", "t.hist:1:", "control" },
		{ "1 a ok k read 1\n", "t.hist:1:", "without an invoke" },
		{ "1 a invoke k read\n2 a invoke k read\n", "t.hist:2:", "outstanding" },
		{ "1 a invoke k write 1\n2 a ok k write 2\n", "t.hist:2:", "repeat" },
		{ "1 a invoke k write 1\n2 a ok j write 1\n", "t.hist:2:", "repeat" },
		{ "1 a invoke k write 1\n2 a ok k read 1\n", "t.hist:2:", "repeat" },
		{ "1 a invoke k cas 1 2\n2 a ok k cas 1 3 true\n", "t.hist:2:", "repeat" },
	};
	char err[256];
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		linz_err rc = parse_error(cases[i].text, strlen(cases[i].text), err, sizeof(err));
		if (rc != LINZ_ERR_PARSE || strstr(err, cases[i].where) != err ||
		    strstr(err, cases[i].what) == NULL)
			fail_msg("case %zu: %s: got %s \"%s\"", i, cases[i].text, linz_strerror(rc), err);
	}
	/* a NUL byte */
	static const char nul[] = "1 a invoke k read\n2 a ok k read 1\0x\n";
	assert_int_equal(parse_error(nul, sizeof(nul) - 1, err, sizeof(err)), LINZ_ERR_PARSE);
	assert_non_null(strstr(err, "t.hist:2: NUL"));
	/* a second line of LINZ_MAX_LINE + 1 bytes, with or without its newline */
	static const char first[] = "1 a invoke k read\n";
	size_t len = sizeof(first) - 1 + LINZ_MAX_LINE + 1;
	char *big = malloc(len + 32);
	assert_non_null(big);
	int n = snprintf(big, len + 32, "%s1 b invoke k write ", first);
	memset(big + n, 'v', len - (size_t)n);
	big[len] = '\n';
	assert_int_equal(parse_error(big, len + 1, err, sizeof(err)), LINZ_ERR_PARSE);
	assert_non_null(strstr(err, "t.hist:2: line longer"));
	assert_int_equal(parse_error(big, len, err, sizeof(err)), LINZ_ERR_PARSE);
	assert_non_null(strstr(err, "t.hist:2: line longer"));
	/* exactly LINZ_MAX_LINE is fine */
	n = snprintf(big, len + 32, "1 b invoke k write ");
	memset(big + n, 'v', LINZ_MAX_LINE - (size_t)n);
	big[LINZ_MAX_LINE] = '\n';
	linz_history *h;
	assert_int_equal(linz_history_create(&h), LINZ_OK);
	assert_int_equal(linz_history_add_text(h, "t.hist", big, LINZ_MAX_LINE + 1, err, sizeof(err)),
	    LINZ_OK);
	linz_history_destroy(h);
	free(big);

	/* I/O */
	assert_int_equal(linz_history_create(&h), LINZ_OK);
	assert_int_equal(linz_history_add_file(h, "/nonexistent/linz.hist", err, sizeof(err)),
	    LINZ_ERR_IO);
	assert_non_null(strstr(err, "/nonexistent/linz.hist"));
	/* a failed history refuses more (only destroy) */
	assert_int_equal(linz_history_add_text(h, "t", "", 0, err, sizeof(err)), LINZ_ERR_INVAL);
	assert_int_equal(linz_history_finish(h, err, sizeof(err)), LINZ_ERR_INVAL);
	linz_history_destroy(h);
	/* call order */
	assert_int_equal(linz_history_create(&h), LINZ_OK);
	assert_int_equal(linz_history_finish(h, err, sizeof(err)), LINZ_OK);
	assert_int_equal(linz_history_add_text(h, "t", "", 0, err, sizeof(err)), LINZ_ERR_INVAL);
	assert_int_equal(linz_history_nkeys(h), 0);
	linz_history_destroy(h);
	assert_int_equal(linz_history_create(NULL), LINZ_ERR_INVAL);
}

/* Two files (one process each, as the workload writes them) merged by t. */
static void test_merge_files(void **state)
{
	(void)state;
	char pa[] = "/tmp/linz_test_a_XXXXXX", pb[] = "/tmp/linz_test_b_XXXXXX";
	char err[256];
	for (int round = 0; round < 3; round++) {
		FILE *fa = fdopen(mkstemp(pa), "w"), *fb = fdopen(mkstemp(pb), "w");
		assert_non_null(fa);
		assert_non_null(fb);
		fputs("10 a invoke x write 1\n20 a ok x write 1\n50 a invoke x write 2\n60 a ok x write 2\n", fa);
		/* round 0: reads 1 between the writes (fine); round 1: reads nil
		 * after the first write (not); round 2: reads 1 at t=50, the
		 * second write's invoke (concurrent ties across files: fine) */
		const char *b[] = {
			"30 b invoke x read\n40 b ok x read 1\n",
			"30 b invoke x read\n40 b ok x read nil\n",
			"45 b invoke x read\n50 b ok x read 1\n",
		};
		fputs(b[round], fb);
		fclose(fa);
		fclose(fb);
		for (int order = 0; order < 2; order++) {
			linz_history *h;
			assert_int_equal(linz_history_create(&h), LINZ_OK);
			assert_int_equal(linz_history_add_file(h, order ? pb : pa, err, sizeof(err)), LINZ_OK);
			assert_int_equal(linz_history_add_file(h, order ? pa : pb, err, sizeof(err)), LINZ_OK);
			assert_int_equal(linz_history_finish(h, err, sizeof(err)), LINZ_OK);
			linz_counts c;
			linz_history_counts(h, &c);
			assert_int_equal(c.ops, 3);
			assert_int_equal(c.start_ns, 10);
			linz_result *r = check(h, 0, 0);
			assert_int_equal(r->verdict, round == 1 ? LINZ_NOT_LINEARIZABLE : LINZ_LINEARIZABLE);
			if (round == 1) {
				assert_string_equal(r->stuck[0].proc, "b");
				assert_string_equal(r->stuck[0].file, pb);
				assert_int_equal(r->stuck[0].invoke_ns, 20);
			}
			linz_result_destroy(r);
			linz_history_destroy(h);
		}
		remove(pa);
		remove(pb);
		memcpy(pa + strlen(pa) - 6, "XXXXXX", 6);
		memcpy(pb + strlen(pb) - 6, "XXXXXX", 6);
	}
}

/* The file reader: lines across its 64 KiB chunks, a line too long
 * with and without a newline, a file of one huge line. */
static void test_file_reader(void **state)
{
	(void)state;
	char path[] = "/tmp/linz_test_f_XXXXXX";
	char err[256];
	/* 20000 short lines (about 500 KiB): every chunk boundary splits one */
	FILE *f = fdopen(mkstemp(path), "w");
	assert_non_null(f);
	for (int i = 0; i < 10000; i++)
		fprintf(f, "%d p%d invoke key%d write value-%d\n%d p%d ok key%d write value-%d\n",
		    2 * i, i % 7, i % 3, i, 2 * i + 1, i % 7, i % 3, i);
	fclose(f);
	linz_history *h;
	assert_int_equal(linz_history_create(&h), LINZ_OK);
	assert_int_equal(linz_history_add_file(h, path, err, sizeof(err)), LINZ_OK);
	assert_int_equal(linz_history_finish(h, err, sizeof(err)), LINZ_OK);
	linz_counts c;
	linz_history_counts(h, &c);
	assert_int_equal(c.ops, 10000);
	assert_int_equal(c.ok, 10000);
	assert_int_equal(c.keys, 3);
	assert_int_equal(c.span_ns, 19999);
	linz_history_destroy(h);

	/* a line of LINZ_MAX_LINE + 1 bytes after 70000 bytes of good lines,
	 * then the same without its newline at the end of the file, then a
	 * file of one 1 MiB line */
	for (int round = 0; round < 3; round++) {
		f = fopen(path, "w");
		assert_non_null(f);
		unsigned lines = 0;
		for (long n = 0; round < 2 && n < 70000; lines += 2)
			n += fprintf(f, "%u p invoke k read\n%u p ok k read nil\n", lines, lines + 1);
		long len = round < 2 ? LINZ_MAX_LINE + 1 : 1L << 20;
		for (long i = 0; i < len; i++)
			fputc('x', f);
		if (round == 0)
			fputc('\n', f);
		fclose(f);
		assert_int_equal(linz_history_create(&h), LINZ_OK);
		assert_int_equal(linz_history_add_file(h, path, err, sizeof(err)), LINZ_ERR_PARSE);
		char want[64];
		snprintf(want, sizeof(want), ":%u: line longer than", lines + 1);
		if (strstr(err, want) == NULL)
			fail_msg("round %d: \"%s\", want \"%s\"", round, err, want);
		linz_history_destroy(h);
	}
	remove(path);
}

/* ------------------------------------------------------------------------
 * Budget
 * ------------------------------------------------------------------------ */

static void test_budget_unknown(void **state)
{
	(void)state;
	/* five concurrent writes, then reads that pin one order */
	const char *lin =
	    "0 a invoke x write 1\n0 b invoke x write 2\n0 c invoke x write 3\n"
	    "0 d invoke x write 4\n0 e invoke x write 5\n"
	    "10 a ok x write 1\n10 b ok x write 2\n10 c ok x write 3\n10 d ok x write 4\n"
	    "10 e ok x write 5\n11 r invoke x read\n12 r ok x read 1\n";
	const char *not_lin =
	    "0 a invoke x write 1\n0 b invoke x write 2\n0 c invoke x write 3\n"
	    "0 d invoke x write 4\n0 e invoke x write 5\n"
	    "10 a ok x write 1\n10 b ok x write 2\n10 c ok x write 3\n10 d ok x write 4\n"
	    "10 e ok x write 5\n11 r invoke x read\n12 r ok x read 1\n"
	    "13 r invoke x read\n14 r ok x read 2\n";
	const char *texts[] = { lin, not_lin };
	for (int t = 0; t < 2; t++) {
		linz_history *h = parse(texts[t]);
		linz_result *full = check(h, 0, 0);
		assert_int_equal(full->verdict, t == 0 ? LINZ_LINEARIZABLE : LINZ_NOT_LINEARIZABLE);
		assert_true(full->states > 3);
		/* any budget below what it needed: unknown, never linearizable */
		for (uint64_t b = 1; b < full->states; b++) {
			linz_result *r = check(h, 0, b);
			assert_int_equal(r->verdict, LINZ_UNKNOWN);
			linz_result_destroy(r);
		}
		linz_result *r = check(h, 0, full->states);
		assert_int_equal(r->verdict, full->verdict);
		linz_result_destroy(r);
		linz_result_destroy(full);
		linz_config cfg = { 0 };
		assert_int_equal(linz_check_key(h, 0, &cfg, &r), LINZ_ERR_INVAL);
		linz_history_destroy(h);
	}
}

/* ------------------------------------------------------------------------
 * Generated histories: a simulated register
 * ------------------------------------------------------------------------ */

static uint64_t rng_state;

static uint64_t rnd(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static uint64_t below(uint64_t n)
{
	return rnd() % n;
}

struct gop {
	uint64_t inv, ret, lp;
	int proc, key;
	linz_optype type;
	linz_status status;
	bool applies;
	uint32_t a, b;          /* value numbers: 0 = nil */
	bool res;
};

struct gen {
	struct gop *ops;
	size_t n;
	int procs, keys;
};

static int lp_cmp(const void *pa, const void *pb)
{
	const struct gop *a = *(const struct gop *const *)pa, *b = *(const struct gop *const *)pb;
	if (a->lp != b->lp)
		return a->lp < b->lp ? -1 : 1;
	return a < b ? -1 : a > b;
}

/* n operations of procs processes over keys keys: each process runs one
 * op at a time (random gaps and durations), each op takes effect at a
 * random point of its interval (or not at all: failed ops, half of the
 * info ops), results computed in that order: linearizable. */
static void generate(struct gen *g, size_t n, int procs, int keys, uint64_t seed)
{
	rng_state = seed;
	g->ops = calloc(n, sizeof(*g->ops));
	assert_non_null(g->ops);
	g->n = n;
	g->procs = procs;
	g->keys = keys;
	uint64_t *clock = calloc((size_t)procs, sizeof(*clock));
	assert_non_null(clock);
	uint32_t next_value = 1;
	for (size_t i = 0; i < n; i++) {
		struct gop *o = &g->ops[i];
		o->proc = (int)below((uint64_t)procs);
		o->key = (int)below((uint64_t)keys);
		o->inv = clock[o->proc] + 1 + below(200);
		o->ret = o->inv + below(1000);
		clock[o->proc] = o->ret;
		o->lp = o->inv + below(o->ret - o->inv + 1);
		uint64_t r = below(100);
		o->type = r < 50 ? LINZ_READ : r < 75 ? LINZ_WRITE : LINZ_CAS;
		if (o->type != LINZ_READ)
			o->b = next_value++;
		r = below(100);
		o->status = r < 2 ? LINZ_STATUS_INFO : r < 4 ? LINZ_STATUS_FAIL : LINZ_STATUS_OK;
		o->applies = o->status == LINZ_STATUS_OK ||
		    (o->status == LINZ_STATUS_INFO && below(2) == 0);
	}
	free(clock);
	/* apply in linearization order */
	struct gop **order = calloc(n, sizeof(*order));
	uint32_t *value = calloc((size_t)keys, sizeof(*value));
	uint32_t (*recent)[8] = calloc((size_t)keys, sizeof(*recent));
	assert_non_null(order);
	assert_non_null(value);
	assert_non_null(recent);
	for (size_t i = 0; i < n; i++)
		order[i] = &g->ops[i];
	qsort(order, n, sizeof(*order), lp_cmp);
	for (size_t i = 0; i < n; i++) {
		struct gop *o = order[i];
		uint32_t *v = &value[o->key];
		if (o->type == LINZ_CAS)
			o->a = below(2) ? *v : recent[o->key][below(8)];
		if (!o->applies)
			continue;
		switch (o->type) {
		case LINZ_READ:
			o->a = *v;
			break;
		case LINZ_WRITE:
			*v = o->b;
			break;
		case LINZ_CAS:
			o->res = *v == o->a;
			if (o->res)
				*v = o->b;
			break;
		}
		if (o->type != LINZ_READ && *v == o->b)
			recent[o->key][below(8)] = o->b;
	}
	free(order);
	free(value);
	free(recent);
}

struct event {
	uint64_t t;
	size_t op;
	bool completion;
};

static int event_cmp(const void *pa, const void *pb)
{
	const struct event *a = pa, *b = pb;
	if (a->t != b->t)
		return a->t < b->t ? -1 : 1;
	if (a->op != b->op)
		return a->op < b->op ? -1 : 1;
	return (int)a->completion - (int)b->completion;
}

static void put_value(char **p, uint32_t v)
{
	*p += v ? sprintf(*p, " v%" PRIu32, v) : sprintf(*p, " nil");
}

/* The history as text (one file, events in time order). */
static char *render(const struct gen *g, size_t *len)
{
	struct event *ev = calloc(2 * g->n, sizeof(*ev));
	char *text = malloc(g->n * 2 * 80 + 1);
	assert_non_null(ev);
	assert_non_null(text);
	for (size_t i = 0; i < g->n; i++) {
		ev[2 * i] = (struct event){ g->ops[i].inv, i, false };
		ev[2 * i + 1] = (struct event){ g->ops[i].ret, i, true };
	}
	qsort(ev, 2 * g->n, sizeof(*ev), event_cmp);
	static const char *const types[] = { "read", "write", "cas" };
	static const char *const phases[] = { "ok", "fail", "info" };
	char *p = text;
	for (size_t i = 0; i < 2 * g->n; i++) {
		const struct gop *o = &g->ops[ev[i].op];
		p += sprintf(p, "%" PRIu64 " c%d %s k%d %s", ev[i].t, o->proc,
		    ev[i].completion ? phases[o->status] : "invoke", o->key, types[o->type]);
		if (o->type == LINZ_CAS) {
			put_value(&p, o->a);
			put_value(&p, o->b);
		} else if (o->type == LINZ_WRITE) {
			put_value(&p, o->b);
		}
		if (ev[i].completion && o->status == LINZ_STATUS_OK) {
			if (o->type == LINZ_READ)
				put_value(&p, o->a);
			else if (o->type == LINZ_CAS)
				p += sprintf(p, " %s", o->res ? "true" : "false");
		}
		*p++ = '\n';
	}
	*p = '\0';
	*len = (size_t)(p - text);
	free(ev);
	return text;
}

static double now_s(void)
{
	struct timespec ts;
	timespec_get(&ts, TIME_UTC);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Checks every key; returns the verdicts' counts and prints the time. */
static void check_all(const char *what, const char *text, size_t len, size_t *nlin,
    size_t *nnot, linz_result **first_not)
{
	linz_history *h;
	char err[256] = "";
	double t0 = now_s();
	assert_int_equal(linz_history_create(&h), LINZ_OK);
	assert_int_equal(linz_history_add_text(h, "gen.hist", text, len, err, sizeof(err)), LINZ_OK);
	assert_int_equal(linz_history_finish(h, err, sizeof(err)), LINZ_OK);
	double t1 = now_s();
	*nlin = *nnot = 0;
	uint64_t states = 0;
	for (size_t k = 0; k < linz_history_nkeys(h); k++) {
		linz_result *r = check(h, k, 0);
		states += r->states;
		assert_int_not_equal(r->verdict, LINZ_UNKNOWN);
		if (r->verdict == LINZ_LINEARIZABLE) {
			++*nlin;
		} else {
			++*nnot;
			if (first_not != NULL && *first_not == NULL) {
				linz_result_print(r, true, stdout);
				/* copy what the caller checks: the strings die with h */
				*first_not = malloc(sizeof(**first_not));
				assert_non_null(*first_not);
				**first_not = *r;
				for (size_t i = 0; i < r->nstuck; i++) {
					(*first_not)->stuck[i].proc = strdup(r->stuck[i].proc);
					(*first_not)->stuck[i].value = strdup(r->stuck[i].value);
				}
			}
		}
		linz_result_destroy(r);
	}
	double t2 = now_s();
	linz_counts c;
	linz_history_counts(h, &c);
	print_message("%s: %" PRIu64 " ops, %zu keys: parse %.3f s, check %.3f s, %" PRIu64
	    " states\n", what, c.ops, c.keys, t1 - t0, t2 - t1, states);
	linz_history_destroy(h);
}

static void free_copy(linz_result *r)
{
	for (size_t i = 0; r != NULL && i < r->nstuck; i++) {
		free((char *)r->stuck[i].proc);
		free((char *)r->stuck[i].value);
	}
	free(r);
}

/* Does r name the read of proc c<proc> that returned v<value>? */
static bool stuck_on(const linz_result *r, int proc, const char *value)
{
	char name[32];
	snprintf(name, sizeof(name), "c%d", proc);
	for (size_t i = 0; i < r->nstuck; i++)
		if (strcmp(r->stuck[i].proc, name) == 0 && strcmp(r->stuck[i].value, value) == 0)
			return true;
	return false;
}

/* An ok read near the middle of the history, and an ok write of the same
 * key that completed before it was invoked, and one that completed
 * before that write was invoked: reading the older one's value is
 * stale whatever the order of the rest. */
static size_t pick_stale(const struct gen *g, uint32_t *stale)
{
	for (size_t r = g->n / 2; r < g->n; r++) {
		const struct gop *rd = &g->ops[r];
		if (rd->type != LINZ_READ || rd->status != LINZ_STATUS_OK)
			continue;
		const struct gop *w2 = NULL, *w1 = NULL;
		for (size_t i = 0; i < g->n; i++) {
			const struct gop *w = &g->ops[i];
			if (w->key == rd->key && w->type == LINZ_WRITE && w->status == LINZ_STATUS_OK &&
			    w->ret < rd->inv && (w2 == NULL || w->ret > w2->ret))
				w2 = w;
		}
		for (size_t i = 0; w2 != NULL && i < g->n; i++) {
			const struct gop *w = &g->ops[i];
			if (w->key == rd->key && w->type == LINZ_WRITE && w->status == LINZ_STATUS_OK &&
			    w->ret < w2->inv && (w1 == NULL || w->ret > w1->ret))
				w1 = w;
		}
		if (w1 != NULL) {
			*stale = w1->b;
			return r;
		}
	}
	fail_msg("no stale read to make");
	return 0;
}

static void test_generated_one_key(void **state)
{
	(void)state;
	struct gen g;
	generate(&g, 10000, 10, 1, 42);
	size_t len, nlin, nnot;
	char *text = render(&g, &len);
	check_all("10000 ops, 10 procs", text, len, &nlin, &nnot, NULL);
	assert_int_equal(nlin, 1);
	assert_int_equal(nnot, 0);
	free(text);

	/* one read returns a value never written */
	size_t r = g.n / 2;
	while (g.ops[r].type != LINZ_READ || g.ops[r].status != LINZ_STATUS_OK)
		r++;
	uint32_t saved = g.ops[r].a;
	g.ops[r].a = 999999;
	text = render(&g, &len);
	linz_result *res = NULL;
	check_all("one read of a value never written", text, len, &nlin, &nnot, &res);
	assert_int_equal(nnot, 1);
	assert_true(stuck_on(res, g.ops[r].proc, "v999999"));
	assert_true(res->depth > g.n / 3);
	free_copy(res);
	free(text);
	g.ops[r].a = saved;

	/* one read returns an overwritten value */
	uint32_t stale = 0;
	r = pick_stale(&g, &stale);
	g.ops[r].a = stale;
	text = render(&g, &len);
	res = NULL;
	check_all("one stale read", text, len, &nlin, &nnot, &res);
	assert_int_equal(nnot, 1);
	char name[32];
	snprintf(name, sizeof(name), "v%" PRIu32, stale);
	assert_true(stuck_on(res, g.ops[r].proc, name));
	free_copy(res);
	free(text);
	free(g.ops);
}

static void test_generated_many_keys(void **state)
{
	(void)state;
	struct gen g;
	generate(&g, 200000, 200, 20, 7);
	size_t len, nlin, nnot;
	char *text = render(&g, &len);
	check_all("200000 ops, 200 procs, 20 keys", text, len, &nlin, &nnot, NULL);
	assert_int_equal(nlin, 20);
	assert_int_equal(nnot, 0);
	free(text);
	free(g.ops);
}

/* ------------------------------------------------------------------------
 * Out of memory: every allocation failing in turn
 * ------------------------------------------------------------------------ */

static linz_err run_all(const char *text, linz_verdict *verdicts, size_t cap, size_t *nkeys)
{
	linz_history *h = NULL;
	char err[256];
	linz_err rc = linz_history_create(&h);
	if (rc == LINZ_OK)
		rc = linz_history_add_text(h, "t.hist", text, strlen(text), err, sizeof(err));
	if (rc == LINZ_OK)
		rc = linz_history_finish(h, err, sizeof(err));
	*nkeys = linz_history_nkeys(h);
	for (size_t k = 0; rc == LINZ_OK && k < *nkeys && k < cap; k++) {
		linz_result *r;
		rc = linz_check_key(h, k, NULL, &r);
		if (rc == LINZ_OK) {
			verdicts[k] = r->verdict;
			linz_result_destroy(r);
		}
	}
	linz_history_destroy(h);
	return rc;
}

static void test_alloc_failures(void **state)
{
	(void)state;
	/* ghosts, drops, required info ops, two keys, a failure report */
	const char *text =
	    "0 a invoke x write a\n1 a ok x write a\n2 b invoke x write b\n3 b info x write b\n"
	    "2 e invoke x cas a e\n3 e info x cas a e\n4 c invoke x cas a c\n5 c ok x cas a c false\n"
	    "6 a invoke x write a2\n7 a ok x write a2\n8 f invoke x write f\n9 f info x write f\n"
	    "10 c invoke x read\n11 c ok x read f\n"
	    "0 g invoke y write 1\n1 g ok y write 1\n2 g invoke y read\n3 g ok y read nil\n";
	linz_verdict want[2], got[2];
	size_t nkeys;
	assert_int_equal(run_all(text, want, 2, &nkeys), LINZ_OK);
	assert_int_equal(nkeys, 2);
	assert_int_equal(want[0], LINZ_LINEARIZABLE);
	assert_int_equal(want[1], LINZ_NOT_LINEARIZABLE);
	int failures = 0;
	for (uint64_t n = 1;; n++) {
		linz_alloc_fail_nth(n);
		linz_err rc = run_all(text, got, 2, &nkeys);
		linz_alloc_fail_nth(0);
		if (rc == LINZ_OK) {
			assert_memory_equal(got, want, sizeof(want));
			break;
		}
		assert_int_equal(rc, LINZ_ERR_NOMEM);
		failures++;
	}
	print_message("%d allocation points failed in turn\n", failures);
	assert_true(failures > 20);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sequential),
		cmocka_unit_test(test_nil_reads),
		cmocka_unit_test(test_concurrent_writes_reads),
		cmocka_unit_test(test_cas),
		cmocka_unit_test(test_info_writes),
		cmocka_unit_test(test_info_cas),
		cmocka_unit_test(test_unobserved_info_needed_by_cas_false),
		cmocka_unit_test(test_non_unique_values),
		cmocka_unit_test(test_equal_times_are_concurrent),
		cmocka_unit_test(test_keys_are_independent),
		cmocka_unit_test(test_stale_read_report),
		cmocka_unit_test(test_anomalies),
		cmocka_unit_test(test_parse_ok),
		cmocka_unit_test(test_parse_errors),
		cmocka_unit_test(test_merge_files),
		cmocka_unit_test(test_file_reader),
		cmocka_unit_test(test_budget_unknown),
		cmocka_unit_test(test_generated_one_key),
		cmocka_unit_test(test_generated_many_keys),
		cmocka_unit_test(test_alloc_failures),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
