/*
 * cache_util.c — what the cache test executables share (cache_test.h):
 * nodes started in this process, a cluster of them, and the events they
 * report.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "cache/cache_int.h"
#include "cache_test.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

_Atomic int lost_events, rebalanced_events;
int test_partition_policy = DG_PARTITION_POLICY_MAJORITY;
uint32_t test_request_timeout_ms = 5000;
uint32_t test_failure_timeout_ms = 1000;

static void on_event(void *ctx, const dg_event *ev)
{
	(void)ctx;
	if (ev->kind == DG_EVENT_PARTITION_LOST)
		atomic_fetch_add(&lost_events, 1);
	if (ev->kind == DG_EVENT_REBALANCE_DONE)
		atomic_fetch_add(&rebalanced_events, 1);
}

dg_node *start_node(const char *const *seeds, size_t nseeds, bool client,
    const char *dir)
{
	dg_node_config cfg;
	dg_node_config_init(&cfg);
	cfg.listen_url = "tcp://127.0.0.1:0";
	cfg.cluster_name = "cache-test";
	cfg.seeds = seeds;
	cfg.nseeds = nseeds;
	cfg.failure_timeout_ms = test_failure_timeout_ms;
	cfg.heartbeat_ms = 100;
	cfg.join_timeout_ms = 5000;
	cfg.request_timeout_ms = test_request_timeout_ms;
	cfg.client = client;
	cfg.data_dir = dir;
	cfg.storage_nosync = true;
	cfg.on_event = on_event;
	cfg.partition_policy = test_partition_policy;
	dg_node *n = NULL;
	OK(dg_node_start(&cfg, &n));
	return n;
}

/* ---- several nodes in one process ---- */

void cluster_start(struct cluster *cl, int servers, int clients)
{
	memset(cl, 0, sizeof(*cl));
	cl->n[0] = start_node(NULL, 0, false, NULL);
	cl->seed = dg_node_address(cl->n[0]);
	for (int i = 1; i < servers + clients; i++)
		cl->n[i] = start_node(&cl->seed, 1, i >= servers, NULL);
	cl->count = servers + clients;
	/* every node on the same topology version */
	uint64_t deadline = dgi_now_ms() + 5000;
	for (;;) {
		int64_t v0 = 0, v;
		bool same = true;
		for (int i = 0; i < cl->count; i++) {
			dg_node_info info[8];
			size_t k = dg_node_topology(cl->n[i], &v, info, 8);
			if (i == 0)
				v0 = v;
			same &= k == (size_t)cl->count && v == v0;
		}
		if (same)
			break;
		assert_true(dgi_now_ms() < deadline);
		usleep(10 * 1000);
	}
}

void cluster_stop(struct cluster *cl)
{
	for (int i = cl->count - 1; i >= 0; i--)
		dg_node_stop(cl->n[i]);
}

dg_cache *cache_on(dg_node *n, const char *name)
{
	dg_cache *c = NULL;
	uint64_t deadline = dgi_now_ms() + 5000;
	while (dg_cache_get_by_name(n, name, &c) != DG_OK) {
		assert_true(dgi_now_ms() < deadline);
		usleep(5 * 1000);
	}
	return c;
}
