/*
 * cache_test.h — what the cache test executables share (cache_util.c):
 * nodes started in this process, a cluster of them, the events they
 * report, and each group's entry point (cache_test: the store, nodes,
 * intmap, pstore, counters and entry groups; cache_sync_test:
 * compare-and-set and the FULL_SYNC protocol's guarantees).
 */
#ifndef DGT_CACHE_TEST_H
#define DGT_CACHE_TEST_H

#include "node/datagrid.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#define OK(x) assert_int_equal((x), DG_OK)
#define EXPECT(x, e) assert_int_equal((x), (e))

/* A node on 127.0.0.1 (failure timeout 1 s, request timeout 5 s), joined
 * through seeds; client: owns no partitions; dir: persistence (or NULL). */
dg_node *start_node(const char *const *seeds, size_t nseeds, bool client, const char *dir);

/* servers + clients nodes (at most 5) in this process, every one on the
 * same topology when cluster_start returns. */
struct cluster {
	dg_node *n[5];
	int count;
	const char *seed;
};
void cluster_start(struct cluster *cl, int servers, int clients);
/* The partition policy start_node gives its nodes (default MAJORITY): a
 * test of what a lone survivor of two voters does sets NONE, and sets it
 * back at its end. */
extern int test_partition_policy;
/* The request timeout start_node gives its nodes (default 5000 ms): a
 * test that wants one node's calls to give up sooner sets it around that
 * node's start. */
extern uint32_t test_request_timeout_ms;
extern uint32_t test_failure_timeout_ms;
void cluster_stop(struct cluster *cl);
/* The cache name on node n, once n has learnt it (waits up to 5 s). */
dg_cache *cache_on(dg_node *n, const char *name);

/* PARTITION_LOST and REBALANCE_DONE events reported by the nodes above */
extern _Atomic int lost_events, rebalanced_events;

void dgi_node_kill(dg_node *n);   /* node.c: stop without leaving (a crash) */
struct dg_tp *dgi_node_tp(dg_node *n);

int dgt_intmap_tests(void);
int dgt_pstore_tests(void);
int dgt_counters_tests(void);
int dgt_entry_tests(void);
int dgt_cas_tests(void);
int dgt_sync_tests(void);

#endif
