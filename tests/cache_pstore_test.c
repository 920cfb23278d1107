/*
 * cache_pstore_test.c — tests of cache/pstore.c (LMDB persistence with group
 * commit).  One entry point, dgt_pstore_tests(), run by the cache test
 * runner; every case works in its own mkdtemp directory under /tmp, removed
 * by the teardown even when the case fails.
 *
 * Cases: round trip over two caches and partitions whose byte orders differ
 * (a little-endian prefix would load them out of order); the version rule
 * for puts and removals; group commit (8 threads x 2000 single-record
 * writes, fewer transactions than writes); close/reopen in both sync modes;
 * a full map (the failing write is not applied, the env stays usable, and a
 * too-big write fails alone among concurrent writers); injected LMDB and
 * allocation failures; drop of a partition and of a cache; meta blobs; bad
 * arguments; corrupt records written with raw LMDB; close waiting for a call
 * in progress.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "cache/pstore.h"
#include "marshal/crc32c.h"

#include <dirent.h>
#include <errno.h>
#include <lmdb.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int dgt_pstore_tests(void);

/* ---- records ---- */

static dgi_prec rec(uint32_t cache, uint32_t part, const char *key,
    const char *val, int64_t topver, uint64_t counter, uint32_t order)
{
	dgi_prec r = {
		.cache_id = cache, .part = part,
		.key = (const uint8_t *)key, .klen = (uint32_t)strlen(key),
		.val = (const uint8_t *)val, .vlen = val ? (uint32_t)strlen(val) : 0,
		.ver = { .topver = topver, .counter = counter, .order = order },
	};
	return r;
}

typedef struct copy {
	uint32_t cache_id, part;
	uint8_t key[64];
	uint32_t klen;
	uint8_t val[256];
	uint32_t vlen;
	bool has_val;
	dgi_pver ver;
	int64_t expire_ms;
	uint64_t op_node, op_seq;
} copy;

typedef struct collect {
	size_t n;
	copy r[256];
	size_t count;      /* every record seen (may exceed the array) */
} collect;

static dg_err collect_fn(void *ctx, const dgi_prec *p)
{
	collect *c = ctx;
	c->count++;
	if (c->n == sizeof c->r / sizeof c->r[0] || p->klen > 64 || p->vlen > 256)
		return DG_OK;
	copy *o = &c->r[c->n++];
	o->cache_id = p->cache_id;
	o->part = p->part;
	o->klen = p->klen;
	memcpy(o->key, p->key, p->klen);
	o->vlen = p->vlen;
	o->has_val = p->val != NULL;
	if (p->vlen)
		memcpy(o->val, p->val, p->vlen);
	o->ver = p->ver;
	o->expire_ms = p->expire_ms;
	o->op_node = p->op_node;
	o->op_seq = p->op_seq;
	return DG_OK;
}

/* ---- fixture: a fresh directory per case ---- */

typedef struct fixture {
	char dir[64];
	dgi_pstore *ps;
	struct collect *c;   /* scratch for loads, freed by the teardown */
	void *big;           /* a case's large buffer, freed by the teardown */
} fixture;

static void rm_dir(const char *dir)
{
	DIR *d = opendir(dir);
	if (d == NULL)
		return;
	struct dirent *e;
	char path[512];
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		unlink(path);
	}
	closedir(d);
	rmdir(dir);
}

static int fx_setup(void **state)
{
	fixture *fx = calloc(1, sizeof *fx);
	if (fx == NULL)
		return -1;
	fx->c = calloc(1, sizeof *fx->c);
	if (fx->c == NULL) {
		free(fx);
		return -1;
	}
	strcpy(fx->dir, "/tmp/dg-pstore-XXXXXX");
	if (mkdtemp(fx->dir) == NULL) {
		free(fx);
		return -1;
	}
	*state = fx;
	return 0;
}

static int fx_teardown(void **state)
{
	fixture *fx = *state;
	dgi_alloc_fail_nth(0);
	dgi_pstore_close(fx->ps);
	rm_dir(fx->dir);
	free(fx->c);
	free(fx->big);
	free(fx);
	return 0;
}

static dgi_pstore *fx_open_batch(fixture *fx, size_t map_size, bool nosync,
    uint32_t max_batch)
{
	dgi_pstore_config cfg;
	dgi_pstore_config_init(&cfg);
	cfg.dir = fx->dir;
	if (map_size)
		cfg.map_size = map_size;
	cfg.nosync = nosync;
	if (max_batch)
		cfg.max_batch = max_batch;
	assert_int_equal(dgi_pstore_open(&cfg, &fx->ps), DG_OK);
	assert_non_null(fx->ps);
	return fx->ps;
}

static dgi_pstore *fx_open(fixture *fx, size_t map_size, bool nosync)
{
	return fx_open_batch(fx, map_size, nosync, 0);
}

/* Opens fx->dir expecting it to fail (or, recover, to succeed). */
static dg_err fx_try_open(fixture *fx, bool recover)
{
	dgi_pstore_config cfg;
	dgi_pstore_config_init(&cfg);
	cfg.dir = fx->dir;
	cfg.nosync = true;
	cfg.recover = recover;
	dg_err e = dgi_pstore_open(&cfg, &fx->ps);
	if (e != DG_OK)
		assert_null(fx->ps);
	return e;
}

static void fx_close(fixture *fx)
{
	dgi_pstore_close(fx->ps);
	fx->ps = NULL;
}

static dg_err count_fn(void *ctx, const dgi_prec *p)
{
	(*(size_t *)ctx)++;
	return DG_OK;
}

static size_t load_count(dgi_pstore *ps, uint32_t cache)
{
	size_t n = 0;
	assert_int_equal(dgi_pstore_load(ps, cache, count_fn, &n), DG_OK);
	return n;
}

static void load_all(dgi_pstore *ps, uint32_t cache, collect *c)
{
	memset(c, 0, sizeof *c);
	assert_int_equal(dgi_pstore_load(ps, cache, collect_fn, c), DG_OK);
}

static const copy *find(const collect *c, uint32_t part, const char *key)
{
	size_t kl = strlen(key);
	for (size_t i = 0; i < c->n; i++)
		if (c->r[i].part == part && c->r[i].klen == kl &&
		    memcmp(c->r[i].key, key, kl) == 0)
			return &c->r[i];
	return NULL;
}

static void assert_same(const copy *got, const dgi_prec *want)
{
	assert_non_null(got);
	assert_int_equal(got->cache_id, want->cache_id);
	assert_int_equal(got->part, want->part);
	assert_int_equal(got->klen, want->klen);
	assert_memory_equal(got->key, want->key, want->klen);
	assert_true(got->has_val);
	assert_int_equal(got->vlen, want->vlen);
	if (want->vlen)
		assert_memory_equal(got->val, want->val, want->vlen);
	assert_true(got->ver.topver == want->ver.topver);
	assert_true(got->ver.counter == want->ver.counter);
	assert_int_equal(got->ver.order, want->ver.order);
	assert_int_equal(got->ver.flags, want->ver.flags);
	assert_true(got->expire_ms == want->expire_ms);
	assert_true(got->op_node == want->op_node);
	assert_true(got->op_seq == want->op_seq);
}

static void assert_val(const collect *c, uint32_t part, const char *key,
    const char *val)
{
	const copy *g = find(c, part, key);
	assert_non_null(g);
	assert_int_equal(g->vlen, strlen(val));
	assert_memory_equal(g->val, val, g->vlen);
}

/* ---- cases ---- */

static void test_pver_cmp(void **state)
{
	dgi_pver a = { 1, 5, 2, 0 }, b = { 1, 5, 2, 99 };
	assert_int_equal(dgi_pver_cmp(&a, &b), 0);         /* flags not compared */
	b = (dgi_pver){ 1, 5, 3, 0 };
	assert_true(dgi_pver_cmp(&a, &b) < 0);
	assert_true(dgi_pver_cmp(&b, &a) > 0);
	b = (dgi_pver){ 1, 4, 9, 0 };                      /* counter before order */
	assert_true(dgi_pver_cmp(&a, &b) > 0);
	b = (dgi_pver){ 2, 0, 0, 0 };                      /* topver first */
	assert_true(dgi_pver_cmp(&a, &b) < 0);
	b = (dgi_pver){ -1, UINT64_MAX, UINT32_MAX, 0 };   /* topver is signed */
	assert_true(dgi_pver_cmp(&a, &b) > 0);
	b = (dgi_pver){ 1, UINT64_MAX, 0, 0 };             /* counter unsigned */
	assert_true(dgi_pver_cmp(&a, &b) < 0);
}

static void test_round_trip(void **state)
{
	fixture *fx = *state;
	dgi_pstore *ps = fx_open(fx, 0, true);
	/* 256 and 1 sort the other way round in little-endian. */
	static const uint32_t parts[] = { 65535, 256, 1, 0, 513 };
	static const uint32_t caches[] = { 7, 8 };
	char keys[2][5][3][32], vals[2][5][3][64];
	dgi_prec recs[2][5][3];
	for (int c = 0; c < 2; c++)
		for (int p = 0; p < 5; p++)
			for (int k = 0; k < 3; k++) {
				snprintf(keys[c][p][k], 32, "key-%d-%d", p, k);
				snprintf(vals[c][p][k], 64, "value of %u/%u/%d", caches[c],
				    parts[p], k);
				dgi_prec *r = &recs[c][p][k];
				*r = rec(caches[c], parts[p], keys[c][p][k], vals[c][p][k],
				    -3 + c * 100 + p, 1000u * (uint64_t)p + (uint64_t)k,
				    (uint32_t)(c + 1));
				r->ver.flags = 0x15000000u | (uint32_t)k; /* bits 29-31: pstore's */
				r->expire_ms = k == 0 ? 0 : k == 1 ? -5 : INT64_MAX - p;
				r->op_node = k == 0 ? 0 : UINT64_MAX - (uint64_t)c;
				r->op_seq = (uint64_t)p << 40 | (uint64_t)k;
				if (p == 2 && k == 2)
					r->vlen = 0;              /* empty value, not a removal */
			}
	/* Cache 7: one call per partition; cache 8: one call for all. */
	for (int p = 0; p < 5; p++)
		assert_int_equal(dgi_pstore_write(ps, recs[0][p], 3), DG_OK);
	assert_int_equal(dgi_pstore_write(ps, &recs[1][0][0], 15), DG_OK);

	for (int c = 0; c < 2; c++) {
		collect *got = fx->c;
		load_all(ps, caches[c], got);
		assert_int_equal(got->count, 15);
		for (size_t i = 1; i < got->n; i++)
			assert_true(got->r[i - 1].part <= got->r[i].part);
		assert_int_equal(got->r[0].part, 0);
		assert_int_equal(got->r[14].part, 65535);
		for (int p = 0; p < 5; p++)
			for (int k = 0; k < 3; k++)
				assert_same(find(got, parts[p], keys[c][p][k]), &recs[c][p][k]);
	}
	assert_int_equal(load_count(ps, 6), 0);
	assert_int_equal(load_count(ps, 9), 0);

	dgi_pstore_stats st;
	dgi_pstore_get_stats(ps, &st);
	assert_int_equal(st.records, 30);
	assert_int_equal(st.commits, 6);
	assert_int_equal(st.failures, 0);
	assert_int_equal(st.map_size, (uint64_t)1 << 30);
	assert_true(st.map_used > 0 && st.map_used < st.map_size);
}

static void test_version_rule(void **state)
{
	fixture *fx = *state;
	dgi_pstore *ps = fx_open(fx, 0, true);
	collect *c = fx->c;
	dgi_pstore_stats st;

	dgi_prec r = rec(1, 3, "k", "a", 1, 5, 1);
	assert_int_equal(dgi_pstore_write(ps, &r, 1), DG_OK);
	r = rec(1, 3, "k", "older", 1, 4, 9);
	assert_int_equal(dgi_pstore_write(ps, &r, 1), DG_OK);
	dgi_pstore_get_stats(ps, &st);
	assert_int_equal(st.skipped_older, 1);
	load_all(ps, 1, c);
	assert_val(c, 3, "k", "a");

	r = rec(1, 3, "k", "equal", 1, 5, 1);            /* equal: not newer */
	assert_int_equal(dgi_pstore_write(ps, &r, 1), DG_OK);
	dgi_pstore_get_stats(ps, &st);
	assert_int_equal(st.skipped_older, 2);
	load_all(ps, 1, c);
	assert_val(c, 3, "k", "a");

	r = rec(1, 3, "k", "newer", 2, 0, 0);
	assert_int_equal(dgi_pstore_write(ps, &r, 1), DG_OK);
	load_all(ps, 1, c);
	assert_val(c, 3, "k", "newer");
	assert_true(find(c, 3, "k")->ver.topver == 2);

	r = rec(1, 3, "k", NULL, 1, 9, 9);               /* older removal */
	assert_int_equal(dgi_pstore_write(ps, &r, 1), DG_OK);
	dgi_pstore_get_stats(ps, &st);
	assert_int_equal(st.skipped_older, 3);
	load_all(ps, 1, c);
	assert_val(c, 3, "k", "newer");

	r = rec(1, 3, "k", NULL, 2, 0, 0);               /* equal removal deletes */
	assert_int_equal(dgi_pstore_write(ps, &r, 1), DG_OK);
	assert_int_equal(load_count(ps, 1), 0);

	/* Inside one call, in order: put v3, older put, newer removal. */
	dgi_prec b[3] = { rec(1, 4, "j", "v3", 3, 0, 0), rec(1, 4, "j", "v2", 2, 0, 0),
		rec(1, 4, "j", NULL, 4, 0, 0) };
	assert_int_equal(dgi_pstore_write(ps, b, 2), DG_OK);
	load_all(ps, 1, c);
	assert_val(c, 4, "j", "v3");
	assert_int_equal(dgi_pstore_write(ps, &b[2], 1), DG_OK);
	assert_int_equal(load_count(ps, 1), 0);
	/* Removing a missing key is fine and not "older". */
	assert_int_equal(dgi_pstore_write(ps, &b[2], 1), DG_OK);
	dgi_pstore_get_stats(ps, &st);
	assert_int_equal(st.skipped_older, 4);
	assert_int_equal(st.records, 10);
}

#define GC_THREADS 8
#define GC_WRITES 2000

typedef struct gc_arg {
	dgi_pstore *ps;
	pthread_barrier_t *bar;
	int tid;
	int errors;
} gc_arg;

static void *gc_writer(void *p)
{
	gc_arg *a = p;
	char key[32], val[32];
	pthread_barrier_wait(a->bar);
	for (int i = 0; i < GC_WRITES; i++) {
		snprintf(key, sizeof key, "t%d-%d", a->tid, i);
		snprintf(val, sizeof val, "v%d-%d", a->tid, i);
		dgi_prec r = rec(3, (uint32_t)(i * 7 + a->tid) % 1024, key, val, 1,
		    (uint64_t)i, (uint32_t)a->tid);
		if (dgi_pstore_write(a->ps, &r, 1) != DG_OK)
			a->errors++;
	}
	return NULL;
}

static dg_err check_gc_fn(void *ctx, const dgi_prec *r)
{
	size_t *n = ctx;
	int tid, i;
	char key[32], want[32];
	if (r->klen >= sizeof key)
		return DG_ERR_STATE;
	memcpy(key, r->key, r->klen);
	key[r->klen] = '\0';
	if (sscanf(key, "t%d-%d", &tid, &i) != 2)
		return DG_ERR_STATE;
	snprintf(want, sizeof want, "v%d-%d", tid, i);
	if (r->vlen != strlen(want) || memcmp(r->val, want, r->vlen) != 0 ||
	    r->part != (uint32_t)(i * 7 + tid) % 1024 || r->ver.counter != (uint64_t)i)
		return DG_ERR_STATE;
	(*n)++;
	return DG_OK;
}

static void test_group_commit(void **state)
{
	fixture *fx = *state;
	dgi_pstore *ps = fx_open(fx, 0, false);   /* fsync per commit */
	pthread_barrier_t bar;
	pthread_barrier_init(&bar, NULL, GC_THREADS);
	pthread_t th[GC_THREADS];
	gc_arg args[GC_THREADS];
	for (int t = 0; t < GC_THREADS; t++) {
		args[t] = (gc_arg){ .ps = ps, .bar = &bar, .tid = t };
		assert_int_equal(pthread_create(&th[t], NULL, gc_writer, &args[t]), 0);
	}
	for (int t = 0; t < GC_THREADS; t++)
		pthread_join(th[t], NULL);   /* all, before any assert */
	for (int t = 0; t < GC_THREADS; t++)
		assert_int_equal(args[t].errors, 0);
	pthread_barrier_destroy(&bar);

	dgi_pstore_stats st;
	dgi_pstore_get_stats(ps, &st);
	printf("pstore group commit: %d writes in %llu commits\n",
	    GC_THREADS * GC_WRITES, (unsigned long long)st.commits);
	assert_int_equal(st.records, GC_THREADS * GC_WRITES);
	assert_int_equal(st.failures, 0);
	assert_true(st.commits < GC_THREADS * GC_WRITES);

	/* Durable: visible after reopening. */
	fx_close(fx);
	ps = fx_open(fx, 0, false);
	size_t n = 0;
	assert_int_equal(dgi_pstore_load(ps, 3, check_gc_fn, &n), DG_OK);
	assert_int_equal(n, GC_THREADS * GC_WRITES);
}

static dg_err meta_fn(void *ctx, const char *name, const uint8_t *val, size_t len);

static void reopen_case(fixture *fx, bool nosync)
{
	dgi_pstore *ps = fx_open(fx, 0, nosync);
	char keys[100][16], vals[100][16];
	dgi_prec r[100];
	for (int i = 0; i < 100; i++) {
		snprintf(keys[i], 16, "r%d", i);
		snprintf(vals[i], 16, "%s-%d", nosync ? "ns" : "s", i);
		r[i] = rec(9, (uint32_t)i % 10, keys[i], vals[i], 1, (uint64_t)i, 2);
		r[i].expire_ms = 1700000000000 + i;
	}
	assert_int_equal(dgi_pstore_write(ps, r, 60), DG_OK);
	for (int i = 60; i < 100; i++)
		assert_int_equal(dgi_pstore_write(ps, &r[i], 1), DG_OK);
	assert_int_equal(dgi_pstore_meta_put(ps, "cfg", "x", 1), DG_OK);
	fx_close(fx);

	ps = fx_open(fx, 0, !nosync);
	collect *c = fx->c;
	load_all(ps, 9, c);
	assert_int_equal(c->count, 100);
	for (int i = 0; i < 100; i++)
		assert_same(find(c, r[i].part, keys[i]), &r[i]);
	int metas = 0;
	assert_int_equal(dgi_pstore_meta_each(ps, meta_fn, &metas), DG_OK);
	assert_int_equal(metas, 1);
	fx_close(fx);
}

static void test_reopen(void **state)
{
	reopen_case(*state, false);
}

static void test_reopen_nosync(void **state)
{
	reopen_case(*state, true);
}

static dg_err meta_fn(void *ctx, const char *name, const uint8_t *val, size_t len)
{
	(*(int *)ctx)++;
	return DG_OK;
}

static void test_map_full(void **state)
{
	fixture *fx = *state;
	dgi_pstore *ps = fx_open(fx, (size_t)1 << 20, true);
	static char big[1000];
	memset(big, 'b', sizeof big - 1);
	char keys[4][32];
	int ok = 0;
	dg_err err = DG_OK;
	for (int i = 0; i < 100000; i++) {
		dgi_prec r[4];
		for (int j = 0; j < 4; j++) {
			snprintf(keys[j], sizeof keys[j], "full-%d-%d", i, j);
			r[j] = rec(11, (uint32_t)(i % 64), keys[j], big, 1, 0, 0);
		}
		if ((err = dgi_pstore_write(ps, r, 4)) != DG_OK)
			break;
		ok++;
	}
	assert_int_equal(err, DG_ERR_STORAGE_FULL);
	assert_true(ok > 10);
	printf("pstore map full after %d writes of 4 records\n", ok);
	/* The failing write was not applied, not even in part. */
	assert_int_equal(load_count(ps, 11), (size_t)ok * 4);
	dgi_pstore_stats st;
	dgi_pstore_get_stats(ps, &st);
	assert_true(st.failures >= 1);
	assert_int_equal(st.records, (uint64_t)ok * 4);
	assert_true(st.map_used <= st.map_size);

	/* The env stays usable: a removal, a drop, then a smaller write. */
	dgi_prec rm = rec(11, 0, "full-0-0", NULL, 2, 0, 0);
	assert_int_equal(dgi_pstore_write(ps, &rm, 1), DG_OK);
	assert_int_equal(load_count(ps, 11), (size_t)ok * 4 - 1);
	assert_int_equal(dgi_pstore_drop(ps, 11, UINT32_MAX), DG_OK);
	assert_int_equal(load_count(ps, 11), 0);
	dgi_prec small = rec(11, 0, "small", "s", 1, 0, 0);
	assert_int_equal(dgi_pstore_write(ps, &small, 1), DG_OK);
	assert_int_equal(load_count(ps, 11), 1);

	/* One record larger than the map fails alone. */
	uint8_t *huge = fx->big = calloc(1, (size_t)2 << 20);
	assert_non_null(huge);
	dgi_prec h = rec(11, 1, "huge", NULL, 1, 0, 0);
	h.val = huge;
	h.vlen = (uint32_t)2 << 20;
	assert_int_equal(dgi_pstore_write(ps, &h, 1), DG_ERR_STORAGE_FULL);
	assert_int_equal(dgi_pstore_write(ps, &small, 1), DG_OK);  /* skipped */
	assert_int_equal(load_count(ps, 11), 1);
}

/* A large drop on a nearly full map: one transaction deleting the whole
 * range would have to save ~4000 freed page numbers as one record of
 * contiguous pages, which a full map does not have; the drop commits in
 * steps instead. */
static void test_big_drop_when_full(void **state)
{
	fixture *fx = *state;
	dgi_pstore *ps = fx_open(fx, (size_t)16 << 20, true);
	static char val[100];
	char keys[64][32];
	dg_err err = DG_OK;
	size_t ok = 0;
	uint32_t seed = 1;
	for (int i = 0; i < 100000 && err == DG_OK; i++) {
		dgi_prec r[64];
		for (int j = 0; j < 64; j++) {
			seed = seed * 1103515245u + 12345u;   /* keys spread at random */
			snprintf(keys[j], sizeof keys[j], "%08x-%d", (unsigned)seed, j);
			r[j] = rec(21, (seed >> 16) % 1024, keys[j], NULL, 1, 0, 0);
			r[j].val = (const uint8_t *)val;
			r[j].vlen = sizeof val;
		}
		if ((err = dgi_pstore_write(ps, r, 64)) == DG_OK)
			ok += 64;
	}
	assert_int_equal(err, DG_ERR_STORAGE_FULL);
	assert_int_equal(load_count(ps, 21), ok);
	dgi_pstore_stats st0, st1;
	dgi_pstore_get_stats(ps, &st0);
	assert_int_equal(dgi_pstore_drop(ps, 21, UINT32_MAX), DG_OK);
	dgi_pstore_get_stats(ps, &st1);
	assert_true(st1.commits - st0.commits > 1);   /* in steps */
	assert_int_equal(load_count(ps, 21), 0);
	dgi_prec r = rec(21, 0, "after", "v", 1, 0, 0);
	assert_int_equal(dgi_pstore_write(ps, &r, 1), DG_OK);
}

/* Concurrent small writers beside a writer whose batch can never fit: the
 * group holding the big batch fails, and the committer retries the others
 * alone, so only the big writer sees an error. */
typedef struct nb_arg {
	dgi_pstore *ps;
	int tid;
	int errors;
} nb_arg;

#define NB_WRITES 100

static void *nb_writer(void *p)
{
	nb_arg *a = p;
	char key[32];
	for (int i = 0; i < NB_WRITES; i++) {
		snprintf(key, sizeof key, "n%d-%d", a->tid, i);
		dgi_prec r = rec(12, (uint32_t)i % 16, key, "small", 1, 0, 0);
		if (dgi_pstore_write(a->ps, &r, 1) != DG_OK)
			a->errors++;
	}
	return NULL;
}

static void test_bad_batch_fails_alone(void **state)
{
	fixture *fx = *state;
	/* Synced commits are slow enough for queues to form, so the big
	 * batch shares group transactions with small ones. */
	dgi_pstore *ps = fx_open(fx, (size_t)4 << 20, false);
	size_t hsz = (size_t)8 << 20;
	uint8_t *huge = fx->big = calloc(1, hsz);
	assert_non_null(huge);
	nb_arg args[4];
	pthread_t th[4];
	for (int t = 0; t < 4; t++) {
		args[t] = (nb_arg){ .ps = ps, .tid = t };
		assert_int_equal(pthread_create(&th[t], NULL, nb_writer, &args[t]), 0);
	}
	int big_fail = 0;
	for (int i = 0; i < 20; i++) {
		dgi_prec h = rec(12, 0, "huge", NULL, 1, (uint64_t)i, 0);
		h.val = huge;
		h.vlen = (uint32_t)hsz;
		if (dgi_pstore_write(ps, &h, 1) == DG_ERR_STORAGE_FULL)
			big_fail++;
	}
	for (int t = 0; t < 4; t++)
		pthread_join(th[t], NULL);   /* all, before any assert */
	for (int t = 0; t < 4; t++)
		assert_int_equal(args[t].errors, 0);
	assert_int_equal(big_fail, 20);
	assert_int_equal(load_count(ps, 12), 4 * NB_WRITES);
}

static void test_injected_failure(void **state)
{
	fixture *fx = *state;
	dgi_pstore *ps = fx_open(fx, 0, true);
	dgi_pstore_stats st;
	dgi_prec r = rec(1, 0, "a", "1", 1, 0, 0);

	dgi_pstore_fail_next(ps, EIO);
	assert_int_equal(dgi_pstore_write(ps, &r, 1), DG_ERR_STORAGE);
	assert_int_equal(load_count(ps, 1), 0);
	dgi_pstore_fail_next(ps, MDB_MAP_FULL);
	assert_int_equal(dgi_pstore_write(ps, &r, 1), DG_ERR_STORAGE_FULL);
	assert_int_equal(load_count(ps, 1), 0);
	dgi_pstore_get_stats(ps, &st);
	assert_int_equal(st.failures, 2);
	assert_int_equal(st.commits, 0);
	assert_int_equal(st.records, 0);

	assert_int_equal(dgi_pstore_write(ps, &r, 1), DG_OK);
	assert_int_equal(load_count(ps, 1), 1);
	dgi_pstore_fail_next(ps, MDB_PANIC);
	assert_int_equal(dgi_pstore_drop(ps, 1, UINT32_MAX), DG_ERR_STORAGE);
	assert_int_equal(load_count(ps, 1), 1);
	dgi_pstore_fail_next(ps, EIO);
	assert_int_equal(dgi_pstore_meta_put(ps, "m", "v", 1), DG_ERR_STORAGE);
	int metas = 0;
	assert_int_equal(dgi_pstore_meta_each(ps, meta_fn, &metas), DG_OK);
	assert_int_equal(metas, 0);
	dgi_pstore_get_stats(ps, &st);
	assert_int_equal(st.failures, 4);
	assert_int_equal(st.commits, 1);
}

static void test_alloc_failures(void **state)
{
	fixture *fx = *state;
	dgi_pstore_config cfg;
	dgi_pstore_config_init(&cfg);
	cfg.dir = fx->dir;
	cfg.nosync = true;
	dgi_prec r[3] = { rec(2, 0, "x", "1", 1, 0, 0), rec(2, 1, "y", "2", 1, 0, 0),
		rec(2, 2, "z", NULL, 1, 0, 0) };
	bool clean = false;
	for (uint64_t k = 1; k <= 64 && !clean; k++) {
		dgi_alloc_stats before, after;
		dgi_alloc_get_stats(&before);
		dgi_alloc_fail_nth(k);
		dgi_pstore *ps = NULL;
		dg_err err = dgi_pstore_open(&cfg, &ps);
		if (err == DG_OK) {
			dg_err e = dgi_pstore_write(ps, r, 3);
			assert_true(e == DG_OK || e == DG_ERR_NOMEM || e == DG_ERR_STORAGE);
			size_t n = 0;
			e = dgi_pstore_load(ps, 2, count_fn, &n);
			assert_true(e == DG_OK || e == DG_ERR_NOMEM || e == DG_ERR_STORAGE);
			e = dgi_pstore_meta_put(ps, "m", "v", 1);
			assert_true(e == DG_OK || e == DG_ERR_NOMEM || e == DG_ERR_STORAGE);
			e = dgi_pstore_drop(ps, 2, 1);
			assert_true(e == DG_OK || e == DG_ERR_NOMEM || e == DG_ERR_STORAGE);
			dgi_pstore_close(ps);
		} else {
			assert_true(err == DG_ERR_NOMEM || err == DG_ERR_STORAGE);
			assert_null(ps);
		}
		dgi_alloc_fail_nth(0);
		dgi_alloc_get_stats(&after);
		assert_true(after.allocs - after.frees == before.allocs - before.frees);
		clean = after.failed == before.failed;   /* nothing left to fail */
	}
	assert_true(clean);
	/* What was written survives the runs. */
	dgi_pstore *ps = fx_open(fx, 0, true);
	assert_true(load_count(ps, 2) == 1);   /* x; y dropped, z a removal */
}

/* A drop larger than max_batch commits in steps and removes exactly its
 * partition; a write queued meanwhile is not lost. */
static void test_drop_in_steps(void **state)
{
	fixture *fx = *state;
	dgi_pstore *ps = fx_open_batch(fx, 0, true, 16);
	char keys[1000][16];
	dgi_prec r[1000];
	for (int i = 0; i < 1000; i++) {
		snprintf(keys[i], sizeof keys[i], "s%d", i);
		r[i] = rec(6, 3 + (uint32_t)(i % 2), keys[i], "v", 1, 0, 0);
	}
	assert_int_equal(dgi_pstore_write(ps, r, 1000), DG_OK);   /* one txn */
	dgi_pstore_stats st0, st1;
	dgi_pstore_get_stats(ps, &st0);
	assert_int_equal(st0.commits, 1);
	assert_int_equal(dgi_pstore_drop(ps, 6, 3), DG_OK);
	dgi_pstore_get_stats(ps, &st1);
	assert_true(st1.commits - st0.commits >= 500 / 16);
	collect *c = fx->c;
	load_all(ps, 6, c);
	assert_int_equal(c->count, 500);
	for (size_t i = 0; i < c->n; i++)
		assert_int_equal(c->r[i].part, 4);
}

static void test_drop(void **state)
{
	fixture *fx = *state;
	dgi_pstore *ps = fx_open(fx, 0, true);
	static const uint32_t caches[] = { 2, 3, UINT32_MAX };
	static const uint32_t parts[] = { 0, 1, 2, 512, 65535 };
	char keys[5][16];
	for (int k = 0; k < 5; k++)
		snprintf(keys[k], sizeof keys[k], "d%d", k);
	for (int c = 0; c < 3; c++)
		for (int p = 0; p < 5; p++)
			for (int k = 0; k < 5; k++) {
				dgi_prec r = rec(caches[c], parts[p], keys[k], "v", 1, 0, 0);
				assert_int_equal(dgi_pstore_write(ps, &r, 1), DG_OK);
			}
	assert_int_equal(dgi_pstore_drop(ps, 2, 2), DG_OK);
	collect *c = fx->c;
	load_all(ps, 2, c);
	assert_int_equal(c->count, 20);
	for (size_t i = 0; i < c->n; i++)
		assert_int_not_equal(c->r[i].part, 2);
	assert_non_null(find(c, 512, "d0"));   /* be16 02 00, not 00 02 */
	assert_int_equal(load_count(ps, 3), 25);
	assert_int_equal(load_count(ps, UINT32_MAX), 25);

	assert_int_equal(dgi_pstore_drop(ps, 3, 65535), DG_OK);   /* last partition */
	assert_int_equal(load_count(ps, 3), 20);
	assert_int_equal(dgi_pstore_drop(ps, 2, 2), DG_OK);       /* already empty */
	assert_int_equal(dgi_pstore_drop(ps, 2, UINT32_MAX), DG_OK);
	assert_int_equal(load_count(ps, 2), 0);
	assert_int_equal(load_count(ps, 3), 20);
	assert_int_equal(load_count(ps, UINT32_MAX), 25);
	assert_int_equal(dgi_pstore_drop(ps, UINT32_MAX, UINT32_MAX), DG_OK);
	assert_int_equal(load_count(ps, UINT32_MAX), 0);
	assert_int_equal(load_count(ps, 3), 20);
}

typedef struct meta_seen {
	int n;
	char names[8][16];
	char vals[8][16];
	size_t lens[8];
	int stop_after;
} meta_seen;

static dg_err meta_collect(void *ctx, const char *name, const uint8_t *val,
    size_t len)
{
	meta_seen *m = ctx;
	if (m->n == 8 || strlen(name) >= 16 || len >= 16)
		return DG_ERR_STATE;
	snprintf(m->names[m->n], 16, "%s", name);
	memcpy(m->vals[m->n], val, len);
	m->lens[m->n] = len;
	if (++m->n == m->stop_after)
		return DG_ERR_LIMIT;
	return DG_OK;
}

static void test_meta(void **state)
{
	fixture *fx = *state;
	dgi_pstore *ps = fx_open(fx, 0, true);
	assert_int_equal(dgi_pstore_meta_put(ps, "cfg.b", "bee", 3), DG_OK);
	assert_int_equal(dgi_pstore_meta_put(ps, "cfg.a", "ay", 2), DG_OK);
	assert_int_equal(dgi_pstore_meta_put(ps, "cfg.c", "", 0), DG_OK);
	meta_seen m = { 0 };
	assert_int_equal(dgi_pstore_meta_each(ps, meta_collect, &m), DG_OK);
	assert_int_equal(m.n, 3);
	assert_string_equal(m.names[0], "cfg.a");
	assert_string_equal(m.names[1], "cfg.b");
	assert_string_equal(m.names[2], "cfg.c");
	assert_int_equal(m.lens[0], 2);
	assert_memory_equal(m.vals[1], "bee", 3);
	assert_int_equal(m.lens[2], 0);

	assert_int_equal(dgi_pstore_meta_put(ps, "cfg.b", "BEE!", 4), DG_OK);
	assert_int_equal(dgi_pstore_meta_put(ps, "cfg.a", NULL, 0), DG_OK);
	assert_int_equal(dgi_pstore_meta_put(ps, "nope", NULL, 0), DG_OK);
	memset(&m, 0, sizeof m);
	assert_int_equal(dgi_pstore_meta_each(ps, meta_collect, &m), DG_OK);
	assert_int_equal(m.n, 2);
	assert_string_equal(m.names[0], "cfg.b");
	assert_int_equal(m.lens[0], 4);
	assert_memory_equal(m.vals[0], "BEE!", 4);
	assert_string_equal(m.names[1], "cfg.c");

	memset(&m, 0, sizeof m);
	m.stop_after = 1;
	assert_int_equal(dgi_pstore_meta_each(ps, meta_collect, &m), DG_ERR_LIMIT);
	assert_int_equal(m.n, 1);

	assert_int_equal(dgi_pstore_meta_put(ps, "", "x", 1), DG_ERR_INVAL);
	assert_int_equal(dgi_pstore_meta_put(ps, NULL, "x", 1), DG_ERR_INVAL);
	char longname[600];
	memset(longname, 'n', sizeof longname - 1);
	longname[sizeof longname - 1] = '\0';
	assert_int_equal(dgi_pstore_meta_put(ps, longname, "x", 1), DG_ERR_INVAL);
	assert_int_equal(dgi_pstore_meta_each(ps, NULL, NULL), DG_ERR_INVAL);
	/* Entries are a separate database. */
	assert_int_equal(load_count(ps, 0), 0);
}

static void test_bad_args(void **state)
{
	fixture *fx = *state;
	dgi_pstore_config cfg;
	dgi_pstore_config_init(&cfg);
	dgi_pstore *bad = (dgi_pstore *)&cfg;
	assert_int_equal(dgi_pstore_open(&cfg, &bad), DG_ERR_INVAL);   /* no dir */
	assert_null(bad);
	cfg.dir = "/proc/dg-pstore-cannot-exist";
	assert_int_equal(dgi_pstore_open(&cfg, &bad), DG_ERR_STORAGE);
	assert_null(bad);

	dgi_pstore *ps = fx_open(fx, 0, true);
	dgi_prec r = rec(1, 65536, "k", "v", 1, 0, 0);
	assert_int_equal(dgi_pstore_write(ps, &r, 1), DG_ERR_INVAL);
	r = rec(1, 0, "", "v", 1, 0, 0);
	assert_int_equal(dgi_pstore_write(ps, &r, 1), DG_ERR_INVAL);
	r.key = NULL;
	r.klen = 3;
	assert_int_equal(dgi_pstore_write(ps, &r, 1), DG_ERR_INVAL);
	static char longkey[507];
	memset(longkey, 'k', 506);
	r = rec(1, 0, longkey, "v", 1, 0, 0);                   /* 506 bytes */
	assert_int_equal(dgi_pstore_write(ps, &r, 1), DG_ERR_INVAL);
	r.klen = 505;
	assert_int_equal(dgi_pstore_write(ps, &r, 1), DG_OK);
	r = rec(1, 0, "k", "v", 1, 0, 0);
	r.ver.flags = DGI_PREC_FORMAT2;                         /* pstore's bits */
	assert_int_equal(dgi_pstore_write(ps, &r, 1), DG_ERR_INVAL);
	r.ver.flags = DGI_PREC_CRC;
	assert_int_equal(dgi_pstore_write(ps, &r, 1), DG_ERR_INVAL);
	r.ver.flags = DGI_PREC_ENC;
	assert_int_equal(dgi_pstore_write(ps, &r, 1), DG_ERR_INVAL);
	assert_int_equal(dgi_pstore_write(ps, NULL, 1), DG_ERR_INVAL);
	assert_int_equal(dgi_pstore_write(ps, NULL, 0), DG_OK);
	/* One bad record: none of the call's records are applied. */
	dgi_prec two[2] = { rec(2, 0, "good", "v", 1, 0, 0),
		rec(2, 70000, "bad", "v", 1, 0, 0) };
	assert_int_equal(dgi_pstore_write(ps, two, 2), DG_ERR_INVAL);
	assert_int_equal(load_count(ps, 2), 0);
	assert_int_equal(dgi_pstore_drop(ps, 1, 65536), DG_ERR_INVAL);
	assert_int_equal(dgi_pstore_load(ps, 1, NULL, NULL), DG_ERR_INVAL);
	assert_int_equal(load_count(ps, 1), 1);
	dgi_pstore_stats st;
	dgi_pstore_get_stats(ps, &st);
	assert_int_equal(st.commits, 1);
}

/* Writes raw key/value bytes into "entries" with LMDB directly (the store
 * must be closed: LMDB forbids two opens of one env in a process); with
 * old, first deletes the marker that says the store was made with CRCs,
 * so it looks like a store of an older build. */
static void raw_put_in(const char *dir, const void *key, size_t klen,
    const void *val, size_t vlen, bool old)
{
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi dbi, main;
	assert_int_equal(mdb_env_create(&env), 0);
	assert_int_equal(mdb_env_set_maxdbs(env, 2), 0);
	assert_int_equal(mdb_env_open(env, dir, 0, 0600), 0);
	assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
	assert_int_equal(mdb_dbi_open(txn, "entries", 0, &dbi), 0);
	if (old) {
		assert_int_equal(mdb_dbi_open(txn, NULL, 0, &main), 0);
		MDB_val mk = { 16, (void *)"dg-record-format" };
		int rc = mdb_del(txn, main, &mk, NULL);
		assert_true(rc == 0 || rc == MDB_NOTFOUND);
	}
	MDB_val k = { klen, (void *)key }, v = { vlen, (void *)val };
	assert_int_equal(mdb_put(txn, dbi, &k, &v, 0), 0);
	assert_int_equal(mdb_txn_commit(txn), 0);
	mdb_env_close(env);
}

static void raw_put(const char *dir, const void *key, size_t klen,
    const void *val, size_t vlen)
{
	raw_put_in(dir, key, klen, val, vlen, true);
}

/* Records that fail their checks: the store is refused at open
 * (DG_ERR_STORAGE_DAMAGED), before anything loads — in a store of an
 * older build (no CRCs) for a record too short to hold its header or a key
 * without bytes, in a store of this build for any record without a CRC. */
static void test_corrupt(void **state)
{
	fixture *fx = *state;
	dgi_pstore *ps = fx_open(fx, 0, true);
	dgi_prec good[2] = { rec(5, 0, "good", "v", 1, 0, 0), rec(4, 0, "other", "v", 1, 0, 0) };
	assert_int_equal(dgi_pstore_write(ps, good, 2), DG_OK);
	fx_close(fx);

	/* this build's store: a format-2 record without a CRC */
	static const uint8_t k2[] = { 0, 0, 0, 5, 0, 1, 'n', 'o', 'c', 'r', 'c' };
	uint8_t v2[50] = { 0 };
	v2[23] = 0x80;
	raw_put_in(fx->dir, k2, sizeof k2, v2, sizeof v2, false);
	assert_int_equal(fx_try_open(fx, false), DG_ERR_STORAGE_DAMAGED);
	/* as an older build's store (the marker gone) the same record is fine */
	raw_put(fx->dir, k2, sizeof k2, v2, sizeof v2);
	ps = fx_open(fx, 0, true);
	assert_int_equal(load_count(ps, 5), 2);
	fx_close(fx);

	/* Cache 5, partition 1, key "bad": a value shorter than the header. */
	static const uint8_t bad_key[] = { 0, 0, 0, 5, 0, 1, 'b', 'a', 'd' };
	raw_put(fx->dir, bad_key, sizeof bad_key, "short", 5);
	assert_int_equal(fx_try_open(fx, false), DG_ERR_STORAGE_DAMAGED);

	/* A key holding only the prefix (no key bytes). */
	static const uint8_t bare[] = { 0, 0, 0, 5, 0, 2 };
	static uint8_t val[40];
	raw_put(fx->dir, bare, sizeof bare, val, sizeof val);
	assert_int_equal(fx_try_open(fx, false), DG_ERR_STORAGE_DAMAGED);
}

/* A format-1 record (written before the update id was kept: the value
 * right after the 32-byte header, flags bit 31 clear) still loads, with
 * the update id (0, 0), its flags and value as written; the next write of
 * the key stores format 2.  A format-2 record shorter than its 48-byte
 * header is corrupt. */
static void test_format1_records(void **state)
{
	fixture *fx = *state;
	dgi_pstore *ps = fx_open(fx, 0, true);
	dgi_prec cur = rec(6, 3, "new", "v2", 4, 9, 2);
	cur.op_node = 77;
	cur.op_seq = 78;
	assert_int_equal(dgi_pstore_write(ps, &cur, 1), DG_OK);
	fx_close(fx);

	/* cache 6, partition 3: "old" = "abc", a tombstone "gone" */
	static const uint8_t old_key[] = { 0, 0, 0, 6, 0, 3, 'o', 'l', 'd' };
	static const uint8_t tomb_key[] = { 0, 0, 0, 6, 0, 3, 'g', 'o', 'n', 'e' };
	uint8_t v1[35] = { 0 };
	v1[0] = 5;                  /* topver 5 */
	v1[8] = 7;                  /* counter 7 */
	v1[16] = 3;                 /* order 3 */
	v1[24] = 0x10;              /* expire 16 */
	memcpy(v1 + 32, "abc", 3);
	raw_put(fx->dir, old_key, sizeof old_key, v1, sizeof v1);
	v1[20] = 1;                 /* flags: the tombstone bit */
	raw_put(fx->dir, tomb_key, sizeof tomb_key, v1, 32);

	ps = fx_open(fx, 0, true);
	collect *c = fx->c;
	load_all(ps, 6, c);
	assert_int_equal(c->count, 3);
	dgi_prec want = rec(6, 3, "old", "abc", 5, 7, 3);
	want.expire_ms = 16;
	assert_same(find(c, 3, "old"), &want);          /* id (0, 0) */
	const copy *t = find(c, 3, "gone");
	assert_non_null(t);
	assert_int_equal(t->vlen, 0);
	assert_int_equal(t->ver.flags, 1);
	assert_true(t->op_node == 0 && t->op_seq == 0);
	assert_same(find(c, 3, "new"), &cur);
	/* the version rule reads format 1: an older write is skipped, a newer
	 * one replaces it, in format 2 */
	dgi_prec older = rec(6, 3, "old", "zz", 5, 6, 3);
	assert_int_equal(dgi_pstore_write(ps, &older, 1), DG_OK);
	dgi_prec newer = rec(6, 3, "old", "xyz", 5, 8, 3);
	newer.op_node = 5;
	newer.op_seq = 6;
	assert_int_equal(dgi_pstore_write(ps, &newer, 1), DG_OK);
	load_all(ps, 6, c);
	assert_same(find(c, 3, "old"), &newer);
	fx_close(fx);

	/* format 2 claimed, header cut short */
	static const uint8_t short_key[] = { 0, 0, 0, 6, 0, 4, 's' };
	uint8_t v2[40] = { 0 };
	v2[23] = 0x80;              /* flags bit 31 */
	raw_put(fx->dir, short_key, sizeof short_key, v2, sizeof v2);
	assert_int_equal(fx_try_open(fx, false), DG_ERR_STORAGE_DAMAGED);
}

/* ---- a file damaged as a disk would damage it ---- */

#define DMG_N 200

static void dmg_key(char *k, int i) { sprintf(k, "key-%03d", i); }
static void dmg_val(char *v, int i)
{
	sprintf(v, "value-%03d-", i);
	memset(v + 10, 'a' + i % 26, 90);
	v[100] = 0;
}

static void dmg_fill(fixture *fx)
{
	dgi_pstore *ps = fx_open(fx, 0, true);
	for (int i = 0; i < DMG_N; i++) {
		char k[16], v[128];
		dmg_key(k, i);
		dmg_val(v, i);
		dgi_prec r = rec(9, (uint32_t)(i % 16), k, v, 1, (uint64_t)i + 1, 0);
		assert_int_equal(dgi_pstore_write(ps, &r, 1), DG_OK);
	}
	assert_int_equal(dgi_pstore_meta_put(ps, "cache:dmg", "cfg", 3), DG_OK);
	fx_close(fx);
}

static char *read_file(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	*n = (size_t)ftell(f);
	fseek(f, 0, SEEK_SET);
	char *b = malloc(*n + 1);
	assert_non_null(b);
	assert_int_equal(fread(b, 1, *n, f), *n);
	fclose(f);
	return b;
}

static void write_file(const char *path, const char *b, size_t n)
{
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(b, 1, n, f), n);
	fclose(f);
}

/* Opening the damaged store either refuses it or gives back every record
 * exactly as written: never a crash, never fewer or wrong records. */
static bool dmg_open_checked(fixture *fx)
{
	dg_err e = fx_try_open(fx, false);
	if (e != DG_OK) {
		assert_int_equal(e, DG_ERR_STORAGE_DAMAGED);
		return false;
	}
	collect *c = fx->c;
	load_all(fx->ps, 9, c);
	assert_int_equal(c->count, DMG_N);
	for (int i = 0; i < DMG_N; i++) {
		char k[16], v[128];
		dmg_key(k, i);
		dmg_val(v, i);
		assert_val(c, (uint32_t)(i % 16), k, v);
	}
	fx_close(fx);
	return true;
}

static void test_damaged_file(void **state)
{
	fixture *fx = *state;
	dmg_fill(fx);
	char path[128], lock[128];
	snprintf(path, sizeof(path), "%s/data.mdb", fx->dir);
	snprintf(lock, sizeof(lock), "%s/lock.mdb", fx->dir);
	size_t n;
	char *good = read_file(path, &n);
	fx->big = good;
	assert_true(dmg_open_checked(fx));              /* the copy is fine */

	/* truncated to half, and to 0: refused (it was SIGBUS, and an empty
	 * store) */
	write_file(path, good, n / 2);
	assert_false(dmg_open_checked(fx));
	write_file(path, good, 0);
	assert_false(dmg_open_checked(fx));

	/* 16 bytes of 0xff near the end of every page after the metas (where a
	 * leaf keeps its records; its middle is often unused), one page at a
	 * time: the pages in use are refused, free ones change nothing */
	int refused = 0, pages = (int)(n / 4096);
	for (int pg = 2; pg < pages; pg++) {
		char *b = malloc(n);
		assert_non_null(b);
		memcpy(b, good, n);
		memset(b + (size_t)pg * 4096 + 4096 - 64, 0xff, 16);
		write_file(path, b, n);
		free(b);
		refused += !dmg_open_checked(fx);
	}
	assert_true(refused > 0);

	/* random 32-byte overwrites (a fixed seed) */
	unsigned seed = 12345;
	for (int t = 0; t < 40; t++) {
		char *b = malloc(n);
		assert_non_null(b);
		memcpy(b, good, n);
		size_t at = (size_t)rand_r(&seed) % (n - 32);
		for (int i = 0; i < 32; i++)
			b[at + (size_t)i] = (char)rand_r(&seed);
		write_file(path, b, n);
		free(b);
		(void)dmg_open_checked(fx);
	}

	/* --storage-recover: the damaged file moves aside, the store is new */
	write_file(path, good, n / 2);
	assert_int_equal(fx_try_open(fx, true), DG_OK);
	assert_int_equal(load_count(fx->ps, 9), 0);
	fx_close(fx);
	DIR *d = opendir(fx->dir);
	assert_non_null(d);
	int aside = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL)
		aside += strncmp(e->d_name, "data.mdb.damaged-", 17) == 0;
	closedir(d);
	assert_int_equal(aside, 1);
}

/* A full disk (a 1 MiB tmpfs; root only, else skipped): writes fail with
 * DG_ERR_STORAGE_FULL and the log says "No space left on device" (LMDB
 * reports a short write as EIO: it was "Input/output error"). */
struct logcap {
	pthread_mutex_t mu;
	int nospace, eio;
};

static void cap_line(void *ctx, dg_log_level level, const char *id, const char *line)
{
	struct logcap *c = ctx;
	(void)level;
	(void)id;
	pthread_mutex_lock(&c->mu);
	c->nospace += strstr(line, "No space left on device") != NULL;
	c->eio += strstr(line, "Input/output error") != NULL;
	pthread_mutex_unlock(&c->mu);
}

static void test_disk_full(void **state)
{
	fixture *fx = *state;
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "mount -t tmpfs -o size=1m tmpfs %s 2>/dev/null", fx->dir);
	if (getuid() != 0 || system(cmd) != 0) {
		print_message("disk-full case skipped: mounting a tmpfs needs root\n");
		skip();
	}
	static struct logcap cap = { .mu = PTHREAD_MUTEX_INITIALIZER };
	dg_log_configure(cap_line, &cap, DG_LOG_INFO);
	dgi_pstore *ps = fx_open(fx, (size_t)64 << 20, false);
	static char big[8192];
	memset(big, 'x', sizeof(big) - 1);
	dg_err e = DG_OK;
	int i;
	for (i = 0; i < 1000 && e == DG_OK; i++) {
		char k[16];
		snprintf(k, sizeof(k), "k%04d", i);
		dgi_prec r = rec(3, 0, k, big, 1, (uint64_t)i + 1, 0);
		e = dgi_pstore_write(ps, &r, 1);
	}
	fx_close(fx);
	dg_log_configure(NULL, NULL, DG_LOG_INFO);
	snprintf(cmd, sizeof(cmd), "umount %s", fx->dir);
	assert_int_equal(system(cmd), 0);
	print_message("disk full after %d writes of 8 KiB: %s\n", i - 1, dg_strerror(e));
	assert_int_equal(e, DG_ERR_STORAGE_FULL);
	assert_true(cap.nospace > 0);
	assert_int_equal(cap.eio, 0);
}

/* ---- encryption at rest ---- */

static const uint8_t K1[32] = "0123456789abcdef0123456789abcde", K2[32] = "another master key, 32 bytes..";

static dg_err enc_open(fixture *fx, const uint8_t *master)
{
	dgi_pstore_config cfg;
	dgi_pstore_config_init(&cfg);
	cfg.dir = fx->dir;
	cfg.nosync = true;
	cfg.master_key = master;
	return dgi_pstore_open(&cfg, &fx->ps);
}

static void enc_check_all(fixture *fx)
{
	collect *c = fx->c;
	load_all(fx->ps, 11, c);
	assert_int_equal(c->count, 50);
	for (int i = 0; i < 50; i++) {
		char k[16], v[64];
		snprintf(k, sizeof(k), "k%03d", i);
		snprintf(v, sizeof(v), "MARKER-SECRET-%03d", i);
		assert_val(c, 0, k, v);
	}
}

/* Rewrites the raw value of key `to` (cache 11, partition 0): with the
 * bytes of key `from`'s value (from != NULL), then one bit flipped at
 * value byte flip (>= 0), then the CRC fixed (fix_crc) or not. */
static void raw_edit(const char *dir, const char *from, const char *to, int flip, bool fix_crc)
{
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi dbi;
	uint8_t kf[32] = { 0, 0, 0, 11, 0, 0 }, kt[32] = { 0, 0, 0, 11, 0, 0 }, buf[256];
	size_t lf = 6 + strlen(to), lt = lf;
	memcpy(kt + 6, to, strlen(to));
	if (from != NULL) {
		memcpy(kf + 6, from, strlen(from));
		lf = 6 + strlen(from);
	} else {
		memcpy(kf, kt, lt);
	}
	assert_int_equal(mdb_env_create(&env), 0);
	assert_int_equal(mdb_env_set_maxdbs(env, 2), 0);
	assert_int_equal(mdb_env_open(env, dir, 0, 0600), 0);
	assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
	assert_int_equal(mdb_dbi_open(txn, "entries", 0, &dbi), 0);
	MDB_val k = { lf, kf }, v;
	assert_int_equal(mdb_get(txn, dbi, &k, &v), 0);
	assert_true(v.mv_size <= sizeof(buf));
	size_t n = v.mv_size;
	memcpy(buf, v.mv_data, n);
	if (flip >= 0)
		buf[flip] ^= 0x10;
	MDB_val kto = { lt, kt };
	if (fix_crc) {
		uint32_t crc = dgi_crc32c(dgi_crc32c(0, kt, lt), buf, n - 4);
		for (int i = 0; i < 4; i++)
			buf[n - 4 + (size_t)i] = (uint8_t)(crc >> (8 * i));
	}
	MDB_val nv = { n, buf };
	assert_int_equal(mdb_put(txn, dbi, &kto, &nv, 0), 0);
	assert_int_equal(mdb_txn_commit(txn), 0);
	mdb_env_close(env);
}

static void test_encrypted(void **state)
{
	fixture *fx = *state;
	assert_int_equal(enc_open(fx, K1), DG_OK);
	dgi_pstore *ps = fx->ps;
	dgi_prec r = rec(11, 0, "k000", "v", 1, 1, 0);
	assert_int_equal(dgi_pstore_write(ps, &r, 1), DG_ERR_STATE);  /* no data key yet */
	assert_int_equal(dgi_pstore_use_key(ps, 11), DG_OK);
	for (int i = 0; i < 50; i++) {
		char k[16], v[64];
		snprintf(k, sizeof(k), "k%03d", i);
		snprintf(v, sizeof(v), "MARKER-SECRET-%03d", i);
		r = rec(11, 0, k, v, 1, (uint64_t)i + 1, 0);
		assert_int_equal(dgi_pstore_write(ps, &r, 1), DG_OK);
	}
	enc_check_all(fx);
	fx_close(fx);

	/* the values never appear in the file */
	char path[128];
	snprintf(path, sizeof(path), "%s/data.mdb", fx->dir);
	size_t n;
	char *file = read_file(path, &n);
	assert_null(memmem(file, n, "MARKER-SECRET", 13));
	free(file);

	/* the right key reads everything; none or another is refused */
	assert_int_equal(enc_open(fx, K1), DG_OK);
	enc_check_all(fx);
	fx_close(fx);
	assert_int_equal(enc_open(fx, NULL), DG_ERR_AUTH);
	assert_int_equal(enc_open(fx, K2), DG_ERR_AUTH);

	/* rotation: the data keys re-wrapped, then K2 reads everything */
	assert_int_equal(enc_open(fx, K1), DG_OK);
	assert_int_equal(dgi_pstore_rekey(fx->ps, K2), DG_OK);
	r = rec(11, 0, "k049", "MARKER-SECRET-049", 1, 99, 0);  /* after the rotation */
	assert_int_equal(dgi_pstore_write(fx->ps, &r, 1), DG_OK);
	fx_close(fx);
	assert_int_equal(enc_open(fx, K1), DG_ERR_AUTH);
	assert_int_equal(enc_open(fx, K2), DG_OK);
	enc_check_all(fx);
	fx_close(fx);

	/* tampering: one flipped bit (the CRC catches it; with the CRC
	 * recomputed, the GCM tag does), and a value moved to another key
	 * with a valid CRC (only the tag can tell) */
	snprintf(path, sizeof(path), "%s/data.mdb", fx->dir);
	char *good = read_file(path, &n);
	fx->big = good;
	raw_edit(fx->dir, NULL, "k007", 60, false);
	assert_int_equal(enc_open(fx, K2), DG_ERR_STORAGE_DAMAGED);
	write_file(path, good, n);
	raw_edit(fx->dir, NULL, "k007", 60, true);
	assert_int_equal(enc_open(fx, K2), DG_ERR_STORAGE_DAMAGED);
	write_file(path, good, n);
	raw_edit(fx->dir, "k003", "k007", -1, true);
	assert_int_equal(enc_open(fx, K2), DG_ERR_STORAGE_DAMAGED);
	write_file(path, good, n);
	assert_int_equal(enc_open(fx, K2), DG_OK);
	enc_check_all(fx);
}

/* close waits for a call in progress; calls made while it waits are refused. */
typedef struct cw {
	dgi_pstore *ps;
	atomic_int inside, release, closed, loaded;
	dg_err load_err;
} cw;

static dg_err cw_fn(void *ctx, const dgi_prec *r)
{
	cw *w = ctx;
	atomic_store(&w->inside, 1);
	while (!atomic_load(&w->release))
		sched_yield();
	return DG_OK;
}

static void *cw_loader(void *p)
{
	cw *w = p;
	w->load_err = dgi_pstore_load(w->ps, 1, cw_fn, w);
	atomic_store(&w->loaded, 1);
	return NULL;
}

static void *cw_closer(void *p)
{
	cw *w = p;
	dgi_pstore_close(w->ps);
	atomic_store(&w->closed, 1);
	return NULL;
}

static void test_close_waits(void **state)
{
	fixture *fx = *state;
	dgi_pstore *ps = fx_open(fx, 0, true);
	dgi_prec r = rec(1, 0, "k", "v", 1, 0, 0);
	assert_int_equal(dgi_pstore_write(ps, &r, 1), DG_OK);
	cw w = { .ps = ps };
	pthread_t lt, ct;
	assert_int_equal(pthread_create(&lt, NULL, cw_loader, &w), 0);
	while (!atomic_load(&w.inside) && !atomic_load(&w.loaded))
		sched_yield();
	if (!atomic_load(&w.inside)) {
		pthread_join(lt, NULL);
		fail_msg("the load never called back: %d", w.load_err);
	}
	assert_int_equal(pthread_create(&ct, NULL, cw_closer, &w), 0);
	fx->ps = NULL;   /* the closer owns it now */
	/* Poll until close has begun: new calls are refused from then on.
	 * Threads are released and joined before anything is asserted. */
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	dg_err err;
	for (;;) {
		err = dgi_pstore_write(ps, &r, 1);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		if (err != DG_OK || t1.tv_sec - t0.tv_sec >= 10)
			break;
		sched_yield();
	}
	int closed_early = atomic_load(&w.closed);   /* the load still runs */
	atomic_store(&w.release, 1);
	pthread_join(lt, NULL);
	pthread_join(ct, NULL);
	assert_int_equal(err, DG_ERR_CLOSED);
	assert_int_equal(closed_early, 0);
	assert_int_equal(w.load_err, DG_OK);
	assert_int_equal(atomic_load(&w.closed), 1);
}

int dgt_pstore_tests(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pver_cmp),
#define T(f) cmocka_unit_test_setup_teardown(f, fx_setup, fx_teardown)
		T(test_round_trip),
		T(test_version_rule),
		T(test_group_commit),
		T(test_reopen),
		T(test_reopen_nosync),
		T(test_map_full),
		T(test_big_drop_when_full),
		T(test_bad_batch_fails_alone),
		T(test_injected_failure),
		T(test_alloc_failures),
		T(test_drop),
		T(test_drop_in_steps),
		T(test_meta),
		T(test_bad_args),
		T(test_corrupt),
		T(test_close_waits),
		T(test_format1_records),
		T(test_damaged_file),
		T(test_disk_full),
		T(test_encrypted),
#undef T
	};
	return cmocka_run_group_tests_name("pstore", tests, NULL, NULL);
}
