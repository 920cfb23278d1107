/*
 * txn_svc_test.c — the lock service over the network: two transports in
 * this process, one the primary (dgi_txsvc), one sending TX_LOCK and
 * TX_UNLOCK as near nodes do.  FIFO grants across transactions, deadlines,
 * and a deadlock found the moment the cycle closes (not at the timeout),
 * its youngest transaction the victim.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "txn/txsvc.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define OK(x) assert_int_equal((x), DG_OK)

int dgt_txsvc_tests(void);

struct pair {
	dg_registry *reg;
	dg_tp *near, *prim;
	dgi_txsvc *svc;
	dg_node_id to;
};

static void pair_start(struct pair *p)
{
	dg_tp_config c;
	OK(dg_registry_create(&p->reg));
	dg_tp_config_init(&c);
	c.reg = p->reg;
	c.listen_url = "tcp://127.0.0.1:0";
	OK(dg_tp_start(&c, &p->prim));
	OK(dgi_txsvc_start(p->prim, NULL, 0, &p->svc));
	OK(dg_tp_start(&c, &p->near));
	OK(dg_tp_connect(p->near, dg_tp_address(p->prim), &p->to));
}

static void pair_stop(struct pair *p)
{
	dgi_txsvc_stop(p->svc);
	dg_tp_stop(p->near);
	dg_tp_stop(p->prim);
	dg_registry_destroy(p->reg);
}

/* An asynchronous TX_LOCK: its answer lands in res (-1 until then). */
struct lock_call {
	_Atomic int res;
	_Atomic uint64_t at_ms;
};

static void on_res(void *ctx, dg_err err, const dg_msg_in *reply)
{
	struct lock_call *lc = ctx;
	int r = err != DG_OK ? (int)err : (int)((const dgi_msg_tx_res *)reply->body)->res;
	atomic_store(&lc->at_ms, dgi_now_ms());
	atomic_store(&lc->res, r);
}

static void lock_async(struct pair *p, uint64_t seq, int64_t start, const char *key,
    int64_t timeout_ms, struct lock_call *lc)
{
	atomic_store(&lc->res, -1);
	dgi_msg_tx_lock m = { 7, (int64_t)seq, start, 1, timeout_ms,
		{ (const uint8_t *)key, (uint32_t)strlen(key) }, 0, 0, 0 }; /* topver 0: lock only */
	OK(dg_tp_request(p->near, p->to, DGI_MSG_TX_LOCK, &m, 20000, on_res, lc));
}

static int wait_res(struct lock_call *lc, uint32_t ms)
{
	uint64_t end = dgi_now_ms() + ms;
	while (atomic_load(&lc->res) == -1 && dgi_now_ms() < end) {
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
	}
	return atomic_load(&lc->res);
}

static void unlock(struct pair *p, uint64_t seq)
{
	dgi_msg_tx_res m = { 0, 7, (int64_t)seq };
	dgi_msg_tx_lock_res r;
	dg_arena a;
	uint8_t mem[256];
	dg_arena_init(&a, mem, sizeof(mem));
	OK(dg_tp_call(p->near, p->to, DGI_MSG_TX_UNLOCK, &m, 5000, &r, &a));
	OK((dg_err)r.res);
}

static void test_fifo_across_transactions(void **state)
{
	(void)state;
	struct pair p;
	pair_start(&p);
	struct lock_call a, b, c;
	lock_async(&p, 1, 1000, "k", 5000, &a);
	assert_int_equal(wait_res(&a, 2000), DG_OK);
	lock_async(&p, 2, 2000, "k", 5000, &b);
	lock_async(&p, 3, 3000, "k", 5000, &c);
	assert_int_equal(wait_res(&b, 100), -1); /* waiting behind tx 1 */
	assert_int_equal(wait_res(&c, 10), -1);
	unlock(&p, 1);
	assert_int_equal(wait_res(&b, 2000), DG_OK); /* first in line */
	assert_int_equal(wait_res(&c, 100), -1);
	unlock(&p, 2);
	assert_int_equal(wait_res(&c, 2000), DG_OK);
	unlock(&p, 3);
	dgi_txsvc_stats st;
	dgi_txsvc_get_stats(p.svc, &st);
	assert_int_equal(st.granted, 3);
	assert_int_equal(st.waited, 2);
	pair_stop(&p);
}

static void test_lock_timeout(void **state)
{
	(void)state;
	struct pair p;
	pair_start(&p);
	struct lock_call a, b;
	lock_async(&p, 1, 1000, "k", 5000, &a);
	assert_int_equal(wait_res(&a, 2000), DG_OK);
	uint64_t t0 = dgi_now_ms();
	lock_async(&p, 2, 2000, "k", 150, &b);
	assert_int_equal(wait_res(&b, 3000), DG_ERR_TIMEOUT);
	uint64_t took = atomic_load(&b.at_ms) - t0;
	assert_true(took >= 140 && took < 1500);
	unlock(&p, 1);
	unlock(&p, 2);
	pair_stop(&p);
}

static void test_deadlock_detected_when_waiting(void **state)
{
	(void)state;
	struct pair p;
	pair_start(&p);
	struct lock_call a1, b2, a2, b1;
	/* tx 1 (older) holds k1, tx 2 (younger) holds k2 */
	lock_async(&p, 1, 1000, "k1", 10000, &a1);
	lock_async(&p, 2, 2000, "k2", 10000, &b2);
	assert_int_equal(wait_res(&a1, 2000), DG_OK);
	assert_int_equal(wait_res(&b2, 2000), DG_OK);
	/* tx 1 waits for k2; then tx 2 asks for k1: a cycle */
	lock_async(&p, 1, 1000, "k2", 10000, &a2);
	assert_int_equal(wait_res(&a2, 100), -1);
	uint64_t t0 = dgi_now_ms();
	lock_async(&p, 2, 2000, "k1", 10000, &b1);
	/* the younger tx 2 is the victim, at once (well under the 10 s timeout) */
	assert_int_equal(wait_res(&b1, 3000), DG_ERR_DEADLOCK);
	assert_true(atomic_load(&b1.at_ms) - t0 < 1000);
	/* its k2 went to tx 1, which proceeds */
	assert_int_equal(wait_res(&a2, 3000), DG_OK);
	dgi_txsvc_stats st;
	dgi_txsvc_get_stats(p.svc, &st);
	assert_int_equal(st.deadlocks, 1);
	unlock(&p, 1);
	unlock(&p, 2);
	pair_stop(&p);
}

static void test_bad_requests(void **state)
{
	(void)state;
	struct pair p;
	pair_start(&p);
	struct lock_call a;
	atomic_store(&a.res, -1);
	dgi_msg_tx_lock m = { 0, 0, 1, 1, 100, { (const uint8_t *)"k", 1 }, 0, 0, 0 }; /* no tx id */
	OK(dg_tp_request(p.near, p.to, DGI_MSG_TX_LOCK, &m, 5000, on_res, &a));
	assert_int_equal(wait_res(&a, 2000), DG_ERR_INVAL);
	dgi_msg_tx_lock e = { 7, 1, 1, 1, 100, { NULL, 0 }, 0, 0, 0 }; /* no key */
	atomic_store(&a.res, -1); /* before sending: the answer may come at once */
	OK(dg_tp_request(p.near, p.to, DGI_MSG_TX_LOCK, &e, 5000, on_res, &a));
	assert_int_equal(wait_res(&a, 2000), DG_ERR_INVAL);
	/* a key no cache could hold (past DG_KEY_MAX): refused at once — it
	 * used to be locked (a heap copy in the waiter) and refused only at
	 * the tx's commit */
	static uint8_t big[DG_KEY_MAX + 1];
	memset(big, 'k', sizeof(big));
	dgi_msg_tx_lock b = { 7, 2, 1, 1, 100, { big, (uint32_t)sizeof(big) }, 0, 0, 0 };
	atomic_store(&a.res, -1);
	OK(dg_tp_request(p.near, p.to, DGI_MSG_TX_LOCK, &b, 5000, on_res, &a));
	assert_int_equal(wait_res(&a, 2000), DG_ERR_INVAL);
	b.key.len = DG_KEY_MAX; /* the largest is locked */
	atomic_store(&a.res, -1);
	OK(dg_tp_request(p.near, p.to, DGI_MSG_TX_LOCK, &b, 5000, on_res, &a));
	assert_int_equal(wait_res(&a, 2000), DG_OK);
	unlock(&p, 2);
	pair_stop(&p);
}

/* The fence counts every node of a topology, however many (up to
 * DG_TOPOLOGY_MAX): a node past a fixed table would never open its fence
 * and be taken for gone by recovery (dgi_txsvc_alive). */
static void test_fence_counts_every_node(void **state)
{
	(void)state;
	struct pair p;
	pair_start(&p);
	uint32_t n = 300;
	dg_topology *t = dgi_calloc(1, sizeof(*t) + n * sizeof(t->nodes[0]));
	assert_non_null(t);
	t->version = 5;
	t->count = n;
	atomic_init(&t->refs, 1);
	for (uint32_t i = 0; i < n; i++) {
		t->nodes[i].id = i == 0 ? dg_tp_self(p.prim) : 1000 + i;
		t->nodes[i].order = i + 1;
		t->nodes[i].url = "tcp://127.0.0.1:1";
	}
	dgi_txsvc_topology(p.svc, t);
	for (uint32_t i = 0; i < n; i++)
		if (!dgi_txsvc_alive(p.svc, t->nodes[i].id))
			fail_msg("node %u of %u is not in the fence", i, n);
	assert_false(dgi_txsvc_alive(p.svc, 1000 + n));
	dgi_txsvc_stats st;
	dgi_txsvc_get_stats(p.svc, &st);
	assert_int_equal(st.fence_version, 5);
	assert_false(st.fence_open); /* the others have not reported */
	dg_topology_release(t); /* the service holds its own reference */
	pair_stop(&p);
}

static _Atomic int fence_reports;

static void on_fence_report(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	(void)tp;
	(void)ctx;
	if (((const dgi_msg_tx_ctl *)in->body)->value == 5)
		atomic_fetch_add(&fence_reports, 1);
}

static void nap_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

/* A node whose fence is open no longer repeats its report; one that
 * still waits repeats its own every 300 ms — and the open node answers
 * each repeat with its report, which the waiting node may have lost (a
 * connection not up yet): under load, 3 of 18 nodes' reports were lost
 * and a fence stayed shut for good. */
static void test_fence_answers_a_repeat(void **state)
{
	(void)state;
	struct pair p;
	pair_start(&p);
	atomic_store(&fence_reports, 0);
	OK(dg_tp_handle(p.near, DGI_MSG_TX_FENCE, on_fence_report, NULL));
	dg_topology *t = dgi_calloc(1, sizeof(*t) + 2 * sizeof(t->nodes[0]));
	assert_non_null(t);
	t->version = 5;
	t->count = 2;
	atomic_init(&t->refs, 1);
	t->nodes[0] = (dg_topology_node){ dg_tp_self(p.prim), 1, dg_tp_address(p.prim), 0 };
	t->nodes[1] = (dg_topology_node){ dg_tp_self(p.near), 2, "tcp://127.0.0.1:1", 0 };
	dgi_txsvc_topology(p.svc, t);
	dg_topology_release(t);
	/* the near side reports; the service reports too and opens */
	dgi_msg_tx_ctl r = { 0, 0, 0, 0, 5 };
	OK(dg_tp_send(p.near, p.to, DGI_MSG_TX_FENCE, &r));
	dgi_txsvc_stats st;
	uint64_t deadline = dgi_now_ms() + 5000;
	for (;;) {
		dgi_txsvc_get_stats(p.svc, &st);
		if (st.fence_open && atomic_load(&fence_reports) >= 1)
			break;
		assert_true(dgi_now_ms() < deadline);
		nap_ms(10);
	}
	nap_ms(700); /* open: it repeats nothing */
	int before = atomic_load(&fence_reports);
	/* the near side did not get it (say): it repeats its own report */
	OK(dg_tp_send(p.near, p.to, DGI_MSG_TX_FENCE, &r));
	deadline = dgi_now_ms() + 5000;
	while (atomic_load(&fence_reports) == before) {
		assert_true(dgi_now_ms() < deadline);
		nap_ms(10);
	}
	nap_ms(300);
	assert_int_equal(atomic_load(&fence_reports), before + 1);
	pair_stop(&p);
}

int dgt_txsvc_tests(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fifo_across_transactions),
		cmocka_unit_test(test_lock_timeout),
		cmocka_unit_test(test_deadlock_detected_when_waiting),
		cmocka_unit_test(test_bad_requests),
		cmocka_unit_test(test_fence_counts_every_node),
		cmocka_unit_test(test_fence_answers_a_repeat),
	};
	return cmocka_run_group_tests_name("txsvc", tests, NULL, NULL);
}
