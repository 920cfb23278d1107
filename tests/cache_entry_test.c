/*
 * cache_entry_test.c — the 32-byte entry header (cache_int.h, "An entry"):
 * what an entry can hold, and the update ids it keeps in 8 bytes.
 *
 * What is tested:
 *   - keys: one of DGI_ENTRY_KEY_MAX (65536) bytes is stored and read
 *     back, in the store and through a node (an encoded key of DG_KEY_MAX
 *     bytes put and got); one byte more is refused DG_ERR_INVAL — by the
 *     store, the originator, the primary taking an UPDATE and a copy
 *     (BACKUP, a page) — and nothing is stored;
 *   - topology versions: 2^32 - 1 is kept; 2^32, -1 and INT64_MAX are
 *     refused DG_ERR_LIMIT by the store, the entry unchanged.  A node
 *     whose topology version is 2^32 (its data_dir's persisted version was
 *     2^32 - 1) refuses puts DG_ERR_LIMIT, a retry of a refused update is
 *     refused again (not answered "applied" from the update-id table),
 *     and neither a put nor a copy at that version reaches LMDB (the node
 *     restarts and loads nothing);
 *   - update ids: sequences at and above 2^48, node 0 and the like read
 *     back exactly; one key written by 100,000 originators leaves a small
 *     originator table (it is collected); with 65535 originators in use
 *     the next id is kept whole in its entry (DGI_ENTRY_OPX), with and
 *     without an expiry, and reads back exactly, as every other entry's;
 *     once entries that named originators are gone, ids pack again;
 *   - retries recognised from the entry's id alone (the update-id table
 *     emptied, as after a restart): a packed id, one whose sequence is
 *     above 2^48 and one kept whole are answered their first flag, another
 *     id is not; a transaction's write offered twice is applied once
 *     (txapi.c).
 *
 * Entry point: dgt_entry_tests(), called by cache_test's runner.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "cache/cache_int.h"
#include "node/datagrid.h"
#include "node/node_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache_test.h"

int dgt_entry_tests(void);

static uint8_t *key_bytes(size_t n)
{
	uint8_t *k = malloc(n);
	assert_non_null(k);
	for (size_t i = 0; i < n; i++)
		k[i] = (uint8_t)(i * 31 + 7);
	return k;
}

static dg_cache *make_cache(dg_node *n, const char *name, uint32_t parts, bool persist)
{
	dg_cache_config cc;
	dg_cache_config_init(&cc, name);
	cc.partitions = parts;
	cc.persistence = persist;
	dg_cache *c;
	OK(dg_cache_create(n, &cc, &c));
	return c;
}

static void set_id(dgi_part *p, const char *k, uint64_t node, uint64_t seq, int64_t expire,
    dgi_entry **e)
{
	dgi_pver ver = { 1, 1, 1, 0 };
	uint64_t h = dgi_key_hash((const uint8_t *)k, strlen(k));
	OK(dgi_part_set(p, h, (const uint8_t *)k, (uint32_t)strlen(k), (const uint8_t *)"val", 3,
	    &ver, expire, node, seq, 0, e));
}

static dgi_entry *find(dgi_part *p, const char *k)
{
	uint64_t h = dgi_key_hash((const uint8_t *)k, strlen(k));
	return dgi_part_find(p, h, (const uint8_t *)k, (uint32_t)strlen(k));
}

static void expect_id(const dgi_part *p, const dgi_entry *e, uint64_t node, uint64_t seq)
{
	uint64_t n, s;
	assert_non_null(e);
	dgi_entry_op(p, e, &n, &s);
	if (n != node || s != seq)
		fail_msg("entry id (%llx, %llx), expected (%llx, %llx)", (unsigned long long)n,
		    (unsigned long long)s, (unsigned long long)node, (unsigned long long)seq);
	assert_true(dgi_entry_op_is(p, e, node, seq));
	assert_false(dgi_entry_op_is(p, e, node ^ 1, seq));
	assert_false(dgi_entry_op_is(p, e, node, seq ^ (UINT64_C(1) << 48)));
	assert_false(dgi_entry_op_is(p, e, node, seq ^ 1));
	assert_memory_equal(dgi_entry_val(e), "val", 3);
}

/* ---- keys ---- */

static void test_entry_key_bounds(void **state)
{
	(void)state;
	enum { MAX = DGI_ENTRY_KEY_MAX };
	uint8_t *k = key_bytes(MAX + 1);
	const uint8_t val[] = { 0x0A, 1, 'x' };
	dgi_part p;
	dgi_part_init(&p);
	dgi_pver ver = { 5, 1, 1, 0 };
	uint64_t h = dgi_key_hash(k, MAX);
	dgi_entry *e;
	OK(dgi_part_set(&p, h, k, MAX, val, sizeof(val), &ver, 0, 7, 8, 0, &e));
	assert_int_equal(dgi_entry_klen(e), MAX);
	assert_ptr_equal(dgi_part_find(&p, h, k, MAX), e);
	assert_null(dgi_part_find(&p, dgi_key_hash(k, MAX - 1), k, MAX - 1));
	assert_memory_equal(dgi_entry_key(e), k, MAX);
	assert_memory_equal(dgi_entry_val(e), val, sizeof(val));
	assert_int_equal(dgi_entry_hash(e), h);
	assert_int_equal(p.bytes, MAX + sizeof(val));
	/* an expiry added (the key moves up) and a one-byte key beside it */
	ver.counter++;
	OK(dgi_part_set(&p, h, k, MAX, val, 2, &ver, 1234, 7, 9, 0, &e));
	assert_int_equal(dgi_entry_klen(e), MAX);
	assert_int_equal(dgi_entry_expire(e), 1234);
	assert_memory_equal(dgi_entry_key(e), k, MAX);
	assert_memory_equal(dgi_entry_val(e), val, 2);
	dgi_entry *one;
	OK(dgi_part_set(&p, dgi_key_hash(k, 1), k, 1, val, 3, &ver, 0, 7, 10, 0, &one));
	assert_int_equal(dgi_entry_klen(one), 1);
	assert_ptr_equal(dgi_part_find(&p, dgi_key_hash(k, 1), k, 1), one);
	/* one byte more, and none: refused, nothing stored or changed */
	uint64_t h1 = dgi_key_hash(k, MAX + 1);
	EXPECT(dgi_part_set(&p, h1, k, MAX + 1, val, 3, &ver, 0, 7, 11, 0, NULL), DG_ERR_INVAL);
	EXPECT(dgi_part_set(&p, dgi_key_hash(k, 0), k, 0, val, 3, &ver, 0, 7, 11, 0, NULL),
	    DG_ERR_INVAL);
	assert_int_equal(p.count, 2);
	assert_null(dgi_part_find(&p, h1, k, MAX + 1));
	assert_int_equal(p.bytes, MAX + 2 + 1 + 3);
	dgi_part_free(&p);

	/* through a node: an encoded key of DG_KEY_MAX bytes */
	dg_node *n = start_node(NULL, 0, false, NULL);
	dgi_grid *g = dgi_node_grid(n);
	dg_cache *c = make_cache(n, "keys", 16, false);
	int64_t flag = 0;
	OK(dgi_update_op(c, OP_PUT, k, DG_KEY_MAX, NULL, 0, val, sizeof(val), &flag, NULL));
	dg_buf b;
	dg_buf_init(&b);
	OK(dgi_get_enc(c, k, DG_KEY_MAX, &b, false));
	assert_int_equal(b.len, sizeof(val));
	assert_memory_equal(b.data, val, sizeof(val));
	EXPECT(dgi_update_op(c, OP_PUT, k, DG_KEY_MAX + 1, NULL, 0, val, sizeof(val), &flag,
	    NULL), DG_ERR_INVAL);
	/* an UPDATE or a copy from a peer with one byte more */
	dgi_epoch_enter();
	uint32_t part = dgi_part_of(h1, c->cfg.partitions);
	dgi_msg_update m = { c->id, part, atomic_load(&c->aff)->topver, OP_PUT, DG_FULL_SYNC,
		(int64_t)g->self, 99, 0, { k, MAX + 1 }, { val, sizeof(val) }, { NULL, 0 } };
	struct upd u;
	EXPECT(dgi_upd_received(c, &u, &m), DG_ERR_INVAL);
	m.key.len = MAX;
	m.part = dgi_part_of(h, c->cfg.partitions);
	OK(dgi_upd_received(c, &u, &m));
	dgi_pver cv = { atomic_load(&g->topver), 1000, 1, 0 };
	EXPECT(dgi_apply_copy(g, c, part, h1, k, MAX + 1, val, sizeof(val), &cv, 0, 1, 2),
	    DG_ERR_INVAL);
	dgi_part *pt = &c->parts[part];
	dgi_part_lock(pt);
	assert_null(dgi_part_find(pt, h1, k, MAX + 1));
	dgi_part_unlock(pt);
	dgi_epoch_leave();
	b.len = 0;
	EXPECT(dgi_get_enc(c, k, DG_KEY_MAX + 1, &b, false), DG_ERR_INVAL);
	dg_buf_free(&b);
	dg_node_stop(n);
	free(k);
}

/* ---- topology versions ---- */

static void test_entry_topver_bounds(void **state)
{
	(void)state;
	dgi_part p;
	dgi_part_init(&p);
	dgi_pver ver = { DGI_ENTRY_TOPVER_MAX, 1, 3, 0 };
	uint64_t h = dgi_key_hash((const uint8_t *)"a", 1);
	dgi_entry *e;
	OK(dgi_part_set(&p, h, (const uint8_t *)"a", 1, (const uint8_t *)"v", 1, &ver, 0, 1, 2, 0,
	    &e));
	assert_int_equal(dgi_entry_topver(e), INT64_C(4294967295));
	dgi_pver got = dgi_entry_ver(e);
	assert_int_equal(dgi_pver_cmp(&got, &ver), 0);
	assert_ptr_equal(dgi_part_find_ver(&p, h, &ver), e);
	const int64_t bad[] = { DGI_ENTRY_TOPVER_MAX + 1, -1, INT64_MAX, INT64_MIN };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		dgi_pver b = { bad[i], 2, 3, 0 };
		EXPECT(dgi_part_set(&p, h, (const uint8_t *)"a", 1, (const uint8_t *)"w", 1, &b, 0, 1,
		    3, 0, NULL), DG_ERR_LIMIT);
		assert_false(dgi_part_overwrite(&p, e, (const uint8_t *)"w", 1, &b, 0, 1, 3));
		EXPECT(dgi_part_set(&p, dgi_key_hash((const uint8_t *)"b", 1), (const uint8_t *)"b",
		    1, NULL, 0, &b, 5, 1, 3, DGI_ENTRY_TOMB, NULL), DG_ERR_LIMIT);
		assert_null(dgi_part_find_ver(&p, h, &b));
	}
	assert_ptr_equal(dgi_part_find(&p, h, (const uint8_t *)"a", 1), e);
	got = dgi_entry_ver(e);
	assert_int_equal(dgi_pver_cmp(&got, &ver), 0);
	assert_memory_equal(dgi_entry_val(e), "v", 1);
	assert_true(dgi_entry_op_is(&p, e, 1, 2));
	assert_int_equal(p.count, 1);
	dgi_part_free(&p);
}

/* A node whose topology version is 2^32: what a data_dir whose persisted
 * version is 2^32 - 1 starts with. */
static void test_entry_topver_node_refuses(void **state)
{
	(void)state;
	char dir[] = "/tmp/dgentry-XXXXXX";
	assert_non_null(mkdtemp(dir));
	dg_node *n = start_node(NULL, 0, false, dir);
	OK(dgi_pstore_meta_put(dgi_node_grid(n)->ps, "topology_version", "4294967295", 10));
	dgi_node_kill(n);
	n = start_node(NULL, 0, false, dir);
	dgi_grid *g = dgi_node_grid(n);
	assert_int_equal(atomic_load(&g->topver), DGI_ENTRY_TOPVER_MAX + 1);
	dg_cache *c = make_cache(n, "tv", 8, false);
	EXPECT(dg_cache_put(c, "k", 1, "v", 1), DG_ERR_LIMIT);
	dg_buf b;
	dg_buf_init(&b);
	EXPECT(dg_cache_get(c, "k", 1, &b), DG_ERR_NOT_FOUND);
	/* an update refused, offered again (a retry): refused again, not
	 * answered "applied" from the update-id table */
	const uint8_t key[] = { 0x0A, 1, 'r' }, val[] = { 0x0A, 1, 'v' };
	dgi_epoch_enter();
	struct upd u;
	dgi_upd_init(c, &u, OP_PUT_IF_ABSENT, key, sizeof(key), NULL, 0, val, sizeof(val));
	u.topver = atomic_load(&c->aff)->topver;
	EXPECT(dgi_primary_apply(g, c, &u), DG_ERR_LIMIT);
	u.fresh = false;
	EXPECT(dgi_primary_apply(g, c, &u), DG_ERR_LIMIT);
	dgi_epoch_leave();
	/* a persistent cache: neither a put nor a copy at that version is
	 * persisted (the restart below would refuse to load it) */
	dg_cache *cp = make_cache(n, "tvp", 8, true);
	EXPECT(dg_cache_put(cp, "k", 1, "v", 1), DG_ERR_LIMIT);
	dgi_epoch_enter();
	uint64_t h = dgi_key_hash(key, sizeof(key));
	uint32_t part = dgi_part_of(h, cp->cfg.partitions);
	dgi_pver cv = { DGI_ENTRY_TOPVER_MAX + 1, 1, 1, 0 };
	EXPECT(dgi_apply_copy(g, cp, part, h, key, sizeof(key), val, sizeof(val), &cv, 0, 1, 2),
	    DG_ERR_LIMIT);
	cv.topver = DGI_ENTRY_TOPVER_MAX; /* (older than the node's: kept) */
	OK(dgi_apply_copy(g, cp, part, h, key, sizeof(key), val, sizeof(val), &cv, 0, 1, 2));
	dgi_epoch_leave();
	dgi_node_kill(n);
	n = start_node(NULL, 0, false, dir);
	OK(dg_cache_get_by_name(n, "tvp", &cp));
	b.len = 0;
	EXPECT(dg_cache_get(cp, "k", 1, &b), DG_ERR_NOT_FOUND);
	dgi_epoch_enter();
	dgi_part *pt = &cp->parts[part];
	dgi_part_lock(pt);
	dgi_entry *e = dgi_part_find(pt, h, key, sizeof(key));
	assert_non_null(e);
	assert_int_equal(dgi_entry_topver(e), DGI_ENTRY_TOPVER_MAX);
	assert_int_equal(pt->count, 1);
	dgi_part_unlock(pt);
	dgi_epoch_leave();
	dg_buf_free(&b);
	dg_node_stop(n);
	char cmd[64];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	assert_int_equal(system(cmd), 0);
}

/* ---- update ids ---- */

static void test_entry_update_ids_pack(void **state)
{
	(void)state;
	dgi_part p;
	dgi_part_init(&p);
	const struct { uint64_t node, seq; } ids[] = {
		{ 1, 1 }, { 1, (UINT64_C(1) << 48) - 1 }, { 1, UINT64_C(1) << 48 },
		{ 1, (UINT64_C(0xABCDE) << 40) | 5 }, { 2, UINT64_MAX }, { UINT64_MAX, 1 },
		{ 0, 7 }, { 0, UINT64_C(1) << 63 }, { 3, 0 }, { 0, 0 },
	};
	enum { NIDS = sizeof(ids) / sizeof(ids[0]) };
	char k[32];
	for (int i = 0; i < NIDS; i++) {
		snprintf(k, sizeof(k), "k%d", i);
		dgi_entry *e;
		set_id(&p, k, ids[i].node, ids[i].seq, 0, &e);
		assert_false(e->flags & DGI_ENTRY_OPX);
	}
	for (int i = 0; i < NIDS; i++) {
		snprintf(k, sizeof(k), "k%d", i);
		expect_id(&p, find(&p, k), ids[i].node, ids[i].seq);
	}
	/* one key written by 100,000 originators in turn: the table keeps
	 * only those some entry names */
	for (uint64_t i = 0; i < 100000; i++) {
		dgi_entry *e;
		set_id(&p, "one", 1000 + i, (i << 40) + i + 1, 0, &e);
		assert_false(e->flags & DGI_ENTRY_OPX);
		if (i % 997 == 0)
			expect_id(&p, e, 1000 + i, (i << 40) + i + 1);
	}
	assert_true(p.opn_cap <= 32);
	for (int i = 0; i < NIDS; i++) {
		snprintf(k, sizeof(k), "k%d", i);
		expect_id(&p, find(&p, k), ids[i].node, ids[i].seq);
	}
	dgi_part_free(&p);
}

static void test_entry_update_ids_table_full(void **state)
{
	(void)state;
	enum { FULL = DGI_OPN_MAX - 1 };
	dgi_part p;
	dgi_part_init(&p);
	char k[32];
	for (uint32_t i = 1; i <= FULL; i++) {
		snprintf(k, sizeof(k), "o%u", i);
		set_id(&p, k, 0x1000000u + i, i, 0, NULL);
	}
	assert_int_equal(p.opn_n, FULL);
	/* the next originator's id is kept whole */
	dgi_entry *e;
	set_id(&p, "x", 0xF00D, 42, 0, &e);
	assert_true(e->flags & DGI_ENTRY_OPX);
	expect_id(&p, e, 0xF00D, 42);
	assert_memory_equal(dgi_entry_key(e), "x", 1);
	/* with an expiry, and by a packable id: the layout stays, all read back */
	set_id(&p, "x", 0xF00E, UINT64_MAX, 99, &e);
	assert_true(e->flags & DGI_ENTRY_OPX);
	assert_int_equal(dgi_entry_expire(e), 99);
	expect_id(&p, e, 0xF00E, UINT64_MAX);
	set_id(&p, "x", 0x1000001, 77, 98, &e);
	assert_int_equal(dgi_entry_expire(e), 98);
	expect_id(&p, e, 0x1000001, 77);
	assert_memory_equal(dgi_entry_key(e), "x", 1);
	/* an entry that packed, overwritten by an id that does not */
	set_id(&p, "o1", 0xBEEF, UINT64_C(1) << 50, 0, &e);
	assert_true(e->flags & DGI_ENTRY_OPX);
	expect_id(&p, e, 0xBEEF, UINT64_C(1) << 50);
	assert_memory_equal(dgi_entry_key(e), "o1", 2);
	for (uint32_t i = 2; i <= FULL; i++) {
		snprintf(k, sizeof(k), "o%u", i);
		expect_id(&p, find(&p, k), 0x1000000u + i, i);
	}
	/* half the originators' entries go: ids pack again (after at most
	 * 4096 new ones kept whole without a pass over the entries each) */
	for (uint32_t i = 2; i <= FULL / 2; i++) {
		snprintf(k, sizeof(k), "o%u", i);
		uint64_t h = dgi_key_hash((const uint8_t *)k, strlen(k));
		dgi_part_del(&p, h, (const uint8_t *)k, (uint32_t)strlen(k));
	}
	int whole = 0;
	for (uint32_t i = 0;; i++) {
		snprintf(k, sizeof(k), "n%u", i);
		set_id(&p, k, 0x2000000u + i, i + 1, 0, &e);
		expect_id(&p, e, 0x2000000u + i, i + 1);
		if (!(e->flags & DGI_ENTRY_OPX))
			break;
		whole++;
		assert_true(whole <= 4096);
	}
	for (uint32_t i = 0; i <= (uint32_t)whole; i++) {
		snprintf(k, sizeof(k), "n%u", i);
		expect_id(&p, find(&p, k), 0x2000000u + i, i + 1);
	}
	for (uint32_t i = FULL / 2 + 1; i <= FULL; i++) {
		snprintf(k, sizeof(k), "o%u", i);
		expect_id(&p, find(&p, k), 0x1000000u + i, i);
	}
	expect_id(&p, find(&p, "x"), 0x1000001, 77);
	expect_id(&p, find(&p, "o1"), 0xBEEF, UINT64_C(1) << 50);
	dgi_part_free(&p);
}

/* ---- retries recognised from the entry's id ---- */

/* Offers the update (op_node, op_seq) of key to c's primary (this node)
 * as a retry would reach it; *flag: its answer. */
static dg_err offer(dg_cache *c, int op, const char *key, uint64_t op_node, uint64_t op_seq,
    int64_t *flag)
{
	uint8_t k[64];
	const uint8_t val[] = { 0x0A, 1, 'v' };
	size_t n = strlen(key);
	k[0] = 0x0A;
	k[1] = (uint8_t)n;
	memcpy(k + 2, key, n);
	struct upd u;
	dgi_epoch_enter();
	dgi_upd_init(c, &u, op, k, n + 2, NULL, 0, val, sizeof(val));
	u.op_node = op_node;
	u.op_seq = op_seq;
	u.fresh = false;
	u.topver = atomic_load(&c->aff)->topver;
	dg_err e = dgi_primary_apply(c->g, c, &u);
	dgi_epoch_leave();
	assert_null(u.pw);
	*flag = u.flag;
	return e;
}

/* What a restarted node knows of its partition's updates: the entries
 * (their ids), no update-id table. */
static void forget_table(dg_cache *c)
{
	dgi_part *pt = &c->parts[0];
	dgi_part_lock(pt);
	dgi_dedup_free(pt);
	dgi_part_unlock(pt);
}

/* The entry of the raw key in c's partition 0 (locked by the caller). */
static dgi_entry *entry_of(dg_cache *c, const char *key)
{
	uint8_t k[64];
	size_t n = strlen(key);
	k[0] = 0x0A;
	k[1] = (uint8_t)n;
	memcpy(k + 2, key, n);
	dgi_entry *e = dgi_part_find(&c->parts[0], dgi_key_hash(k, n + 2), k, (uint32_t)n + 2);
	assert_non_null(e);
	return e;
}

static dgi_pver ver_of(dg_cache *c, const char *key)
{
	dgi_part *pt = &c->parts[0];
	dgi_part_lock(pt);
	dgi_pver v = dgi_entry_ver(entry_of(c, key));
	dgi_part_unlock(pt);
	return v;
}

static void retried(dg_cache *c, const char *key, uint64_t node, uint64_t seq, bool whole)
{
	int64_t flag = -1;
	OK(offer(c, OP_PUT_IF_ABSENT, key, node, seq, &flag));
	assert_int_equal(flag, 1);
	dgi_pver v1 = ver_of(c, key);
	dgi_part *pt = &c->parts[0];
	dgi_part_lock(pt);
	dgi_entry *e = entry_of(c, key);
	assert_true(!(e->flags & DGI_ENTRY_OPX) == !whole);
	dgi_part_unlock(pt);
	forget_table(c);
	flag = -1;
	OK(offer(c, OP_PUT_IF_ABSENT, key, node, seq, &flag));
	assert_int_equal(flag, 1); /* its first answer, not "present" */
	dgi_pver v2 = ver_of(c, key);
	assert_int_equal(dgi_pver_cmp(&v1, &v2), 0); /* not written again */
	OK(offer(c, OP_PUT_IF_ABSENT, key, node, seq ^ (UINT64_C(1) << 48), &flag));
	assert_int_equal(flag, 0); /* another update: the key is there */
	OK(offer(c, OP_PUT_IF_ABSENT, key, node + 1, seq, &flag));
	assert_int_equal(flag, 0);
}

static void tx_once(dg_cache *c, const char *key, uint64_t tx_node, uint64_t tx_seq)
{
	const uint8_t val[] = { 0x0A, 1, 't' };
	uint8_t k[64];
	size_t n = strlen(key);
	k[0] = 0x0A;
	k[1] = (uint8_t)n;
	memcpy(k + 2, key, n);
	uint64_t h = dgi_key_hash(k, n + 2);
	dgi_pver v1, v2;
	int64_t x;
	OK(dgi_cache_tx_write(c, 0, 0, h, k, (uint32_t)n + 2, val, sizeof(val), tx_node, tx_seq, &v1,
	    &x));
	OK(dgi_cache_tx_write(c, 0, 0, h, k, (uint32_t)n + 2, val, sizeof(val), tx_node, tx_seq, &v2,
	    &x));
	assert_int_equal(dgi_pver_cmp(&v1, &v2), 0); /* applied once */
	OK(dgi_cache_tx_write(c, 0, 0, h, k, (uint32_t)n + 2, val, sizeof(val), tx_node, tx_seq + 1,
	    &v2, &x));
	assert_true(dgi_pver_cmp(&v2, &v1) > 0); /* another tx writes */
}

static void test_entry_retry_recognised_from_entry(void **state)
{
	(void)state;
	dg_node *n = start_node(NULL, 0, false, NULL);
	dg_cache *c = make_cache(n, "rids", 1, false); /* every key in partition 0 */
	OK(dg_cache_put(c, "warm", 4, "v", 1));
	uint64_t self = dgi_node_grid(n)->self;
	retried(c, "packed", self, (UINT64_C(5) << 40) | 3, false);
	retried(c, "high", 0x1234, (UINT64_C(0xABCDE) << 40) | 9, false);
	tx_once(c, "tx", 0x4321, 17);
	/* the partition's originator table full: ids kept whole */
	dgi_part *pt = &c->parts[0];
	dgi_part_lock(pt);
	for (uint32_t i = pt->opn_n + 1; i < DGI_OPN_MAX; i++) {
		uint8_t k[16];
		int kl = snprintf((char *)k, sizeof(k), "f%u", i);
		dgi_pver ver = { atomic_load(&c->g->topver), 1, 1, 0 };
		OK(dgi_part_set(pt, dgi_key_hash(k, (size_t)kl), k, (uint32_t)kl, k, 1, &ver, 0,
		    0x3000000u + i, 1, 0, NULL));
	}
	assert_int_equal(pt->opn_n, DGI_OPN_MAX - 1);
	dgi_part_unlock(pt);
	retried(c, "whole", 0xF00D, 77, true);
	retried(c, "whole-high", 0xF00E, UINT64_MAX - 1, true);
	tx_once(c, "tx-whole", 0x4322, 18);
	dg_node_stop(n);
}

int dgt_entry_tests(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_entry_key_bounds),
		cmocka_unit_test(test_entry_topver_bounds),
		cmocka_unit_test(test_entry_topver_node_refuses),
		cmocka_unit_test(test_entry_update_ids_pack),
		cmocka_unit_test(test_entry_update_ids_table_full),
		cmocka_unit_test(test_entry_retry_recognised_from_entry),
	};
	return cmocka_run_group_tests_name("cache_entry", tests, NULL, NULL);
}
