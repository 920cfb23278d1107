/*
 * cache_cas_test.c — compare-and-set (dg_cache_replace_if_equals,
 * dg_cache_remove_if_equals and their _val and _obj forms) on ATOMIC and
 * TRANSACTIONAL caches: the flag, the copies on every owner, and
 * atomicity under concurrent increments.  A group of the cache_test
 * executable (run from cache_test.c's main).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "cache/cache_int.h"
#include "cache_test.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check_value(dg_cache *c, const char *key, const char *want)
{
	dg_buf v;
	dg_buf_init(&v);
	dg_err e = dg_cache_get(c, key, strlen(key), &v);
	if (want == NULL) {
		EXPECT(e, DG_ERR_NOT_FOUND);
	} else {
		OK(e);
		assert_int_equal(v.len, strlen(want));
		assert_memory_equal(v.data, want, v.len);
	}
	dg_buf_free(&v);
}

/* The raw calls' flags and effects on one cache, from one node. */
static void raw_cas_case(dg_cache *c)
{
	bool f = true;
	OK(dg_cache_replace_if_equals(c, "a", 1, "1", 1, "2", 1, &f));
	assert_false(f); /* absent: equals nothing */
	check_value(c, "a", NULL);
	OK(dg_cache_put(c, "a", 1, "1", 1));
	OK(dg_cache_replace_if_equals(c, "a", 1, "9", 1, "2", 1, &f));
	assert_false(f);
	check_value(c, "a", "1");
	OK(dg_cache_replace_if_equals(c, "a", 1, "10", 2, "2", 1, &f));
	assert_false(f); /* a longer expected value with the same prefix */
	OK(dg_cache_replace_if_equals(c, "a", 1, "1", 1, "22", 2, &f));
	assert_true(f);
	check_value(c, "a", "22");
	OK(dg_cache_remove_if_equals(c, "a", 1, "2", 1, &f));
	assert_false(f);
	check_value(c, "a", "22");
	OK(dg_cache_remove_if_equals(c, "a", 1, "22", 2, &f));
	assert_true(f);
	check_value(c, "a", NULL);
	OK(dg_cache_remove_if_equals(c, "a", 1, "22", 2, &f));
	assert_false(f);
	/* the empty value is a value */
	OK(dg_cache_put(c, "e", 1, "", 0));
	OK(dg_cache_replace_if_equals(c, "e", 1, "", 0, "x", 1, NULL));
	check_value(c, "e", "x");
	/* arguments */
	EXPECT(dg_cache_replace_if_equals(c, "a", 1, NULL, 1, "x", 1, &f), DG_ERR_INVAL);
	EXPECT(dg_cache_replace_if_equals(c, NULL, 1, "x", 1, "x", 1, &f), DG_ERR_INVAL);
	EXPECT(dg_cache_remove_if_equals(c, "a", 0, "x", 1, &f), DG_ERR_INVAL);
}

static void test_cas_single_node(void **state)
{
	(void)state;
	dg_node *n = start_node(NULL, 0, false, NULL);
	dg_cache_config cc;
	dg_cache_config_init(&cc, "cas1");
	dg_cache *c;
	OK(dg_cache_create(n, &cc, &c));
	raw_cas_case(c);
	dg_cache_config_init(&cc, "cas1tx");
	cc.atomicity = DG_TRANSACTIONAL;
	OK(dg_cache_create(n, &cc, &c));
	raw_cas_case(c);
	dg_node_stop(n);
}

typedef struct acct {
	int64_t id;
	int64_t balance;
	dg_str owner;
} acct;

static void test_cas_val_and_obj(void **state)
{
	(void)state;
	dg_node *n = start_node(NULL, 0, false, NULL);
	static const dg_field_def f[] = {
		DG_FIELD(acct, id, DG_I64),
		DG_FIELD(acct, balance, DG_I64),
		DG_FIELD(acct, owner, DG_STRING),
	};
	dg_type_def def = { "test.CasAcct", f, 3, sizeof(acct) };
	const dg_desc *d;
	OK(dg_registry_register(dg_node_registry(n), &def, &d));
	dg_cache_config cc;
	dg_cache_config_init(&cc, "casobj");
	dg_cache *c;
	OK(dg_cache_create(n, &cc, &c));
	acct k = { 7, 0, { "k", 1 } };
	acct v1 = { 7, 100, { "ann", 3 } }, v2 = { 7, 90, { "ann", 3 } };
	acct other = { 7, 100, { "bob", 3 } };
	bool flag = true;
	OK(dg_cache_replace_if_equals_obj(c, d, &k, d, &v1, &v2, &flag));
	assert_false(flag);
	OK(dg_cache_put_obj(c, d, &k, d, &v1));
	OK(dg_cache_replace_if_equals_obj(c, d, &k, d, &other, &v2, &flag));
	assert_false(flag); /* one field differs */
	OK(dg_cache_replace_if_equals_obj(c, d, &k, d, &v1, &v2, &flag));
	assert_true(flag);
	uint8_t mem[128];
	dg_arena ar;
	dg_arena_init(&ar, mem, sizeof(mem));
	acct out;
	OK(dg_cache_get_obj(c, d, &k, d, &out, &ar));
	assert_int_equal(out.balance, 90);
	OK(dg_cache_remove_if_equals_obj(c, d, &k, d, &v1, &flag));
	assert_false(flag);
	OK(dg_cache_remove_if_equals_obj(c, d, &k, d, &v2, &flag));
	assert_true(flag);
	EXPECT(dg_cache_get_obj(c, d, &k, d, &out, &ar), DG_ERR_NOT_FOUND);
	EXPECT(dg_cache_replace_if_equals_obj(c, d, &k, d, NULL, &v2, &flag), DG_ERR_INVAL);

	/* encoded values: the same compare, byte for byte */
	uint8_t kb[16], ab[16], bb[16];
	dg_buf b;
	dg_writer w;
	size_t kn, an, bn;
	dg_buf_init_fixed(&b, kb, sizeof(kb));
	dg_writer_init(&w, NULL, &b);
	OK(dg_write_str(&w, "key", 3));
	OK(dg_writer_finish(&w));
	kn = b.len;
	dg_buf_init_fixed(&b, ab, sizeof(ab));
	dg_writer_init(&w, NULL, &b);
	OK(dg_write_i64(&w, 1));
	OK(dg_writer_finish(&w));
	an = b.len;
	dg_buf_init_fixed(&b, bb, sizeof(bb));
	dg_writer_init(&w, NULL, &b);
	OK(dg_write_i64(&w, 2));
	OK(dg_writer_finish(&w));
	bn = b.len;
	OK(dg_cache_put_val(c, kb, kn, ab, an));
	OK(dg_cache_replace_if_equals_val(c, kb, kn, bb, bn, ab, an, &flag));
	assert_false(flag);
	OK(dg_cache_replace_if_equals_val(c, kb, kn, ab, an, bb, bn, &flag));
	assert_true(flag);
	OK(dg_cache_remove_if_equals_val(c, kb, kn, bb, bn, &flag));
	assert_true(flag);
	bool present = true;
	OK(dg_cache_contains_val(c, kb, kn, &present));
	assert_false(present);
	EXPECT(dg_cache_replace_if_equals_val(c, kb, kn, NULL, 0, ab, an, &flag), DG_ERR_INVAL);
	dg_node_stop(n);
}

/* ---- three servers and a client: the copies, and atomicity ---- */

/* The value of key in every server's own copy (each server owns one:
 * backups = 2), read locally (read_from_backup). */
static void expect_on_every_server(struct cluster *cl, const char *name, const char *key,
    const char *want)
{
	for (int i = 0; i < 3; i++)
		check_value(cache_on(cl->n[i], name), key, want);
}

struct incr {
	dg_cache *c;
	int times;
	int tries;
	dg_err err;
};

/* times increments of the decimal counter "ctr", each a read and a
 * compare-and-set from the value read, retried when another thread won. */
static void *incr_thread(void *arg)
{
	struct incr *in = arg;
	dg_buf v;
	dg_buf_init(&v);
	for (int i = 0; i < in->times && in->err == DG_OK; i++) {
		for (;;) {
			v.len = 0;
			dg_err e = dg_cache_get(in->c, "ctr", 3, &v);
			if (e != DG_OK) {
				in->err = e;
				break;
			}
			char cur[24], next[24];
			snprintf(cur, sizeof(cur), "%.*s", (int)v.len, (const char *)v.data);
			snprintf(next, sizeof(next), "%lld", atoll(cur) + 1);
			bool done = false;
			in->tries++;
			e = dg_cache_replace_if_equals(in->c, "ctr", 3, cur, strlen(cur), next,
			    strlen(next), &done);
			if (e != DG_OK) {
				in->err = e;
				break;
			}
			if (done)
				break;
		}
	}
	dg_buf_free(&v);
	return NULL;
}

static void cluster_cas_case(dg_atomicity atomicity)
{
	struct cluster cl;
	cluster_start(&cl, 3, 1);
	dg_cache_config cc;
	const char *name = atomicity == DG_TRANSACTIONAL ? "cas3tx" : "cas3";
	dg_cache_config_init(&cc, name);
	cc.backups = 2;
	cc.write_sync = DG_FULL_SYNC;
	cc.atomicity = atomicity;
	cc.partitions = 64;
	dg_cache *cli;
	OK(dg_cache_create(cl.n[3], &cc, &cli));
	raw_cas_case(cli);
	/* FULL_SYNC: every owner applied the write before the call returned */
	bool f;
	OK(dg_cache_put(cli, "b", 1, "x", 1));
	OK(dg_cache_replace_if_equals(cli, "b", 1, "x", 1, "y", 1, &f));
	assert_true(f);
	expect_on_every_server(&cl, name, "b", "y");
	OK(dg_cache_remove_if_equals(cli, "b", 1, "y", 1, &f));
	assert_true(f);
	expect_on_every_server(&cl, name, "b", NULL);

	/* 4 threads (2 on the client, 2 on servers) increment one counter by
	 * compare-and-set: every increment counts once */
	OK(dg_cache_put(cli, "ctr", 3, "0", 1));
	enum { THREADS = 4, TIMES = 60 };
	struct incr in[THREADS];
	pthread_t th[THREADS];
	for (int i = 0; i < THREADS; i++) {
		in[i] = (struct incr){ i < 2 ? cli : cache_on(cl.n[i - 2], name), TIMES, 0, DG_OK };
		assert_int_equal(pthread_create(&th[i], NULL, incr_thread, &in[i]), 0);
	}
	int tries = 0;
	for (int i = 0; i < THREADS; i++) {
		pthread_join(th[i], NULL);
		OK(in[i].err);
		tries += in[i].tries;
	}
	char want[16];
	snprintf(want, sizeof(want), "%d", THREADS * TIMES);
	check_value(cli, "ctr", want);
	expect_on_every_server(&cl, name, "ctr", want);
	print_message("cas %s: %d increments in %d compare-and-sets\n", name, THREADS * TIMES,
	    tries);
	assert_true(tries >= THREADS * TIMES);
	cluster_stop(&cl);
}

static void test_cas_cluster_atomic(void **state)
{
	(void)state;
	cluster_cas_case(DG_ATOMIC);
}

static void test_cas_cluster_transactional(void **state)
{
	(void)state;
	cluster_cas_case(DG_TRANSACTIONAL);
}

int dgt_cas_tests(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cas_single_node),
		cmocka_unit_test(test_cas_val_and_obj),
		cmocka_unit_test(test_cas_cluster_atomic),
		cmocka_unit_test(test_cas_cluster_transactional),
	};
	return cmocka_run_group_tests_name("cache_cas", tests, NULL, NULL);
}
