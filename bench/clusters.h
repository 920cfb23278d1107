/*
 * clusters.h — the clusters the multi-process suites (cache, txn) measure,
 * started from the suite's main thread before it starts threads of its own
 * (children.h) and waited for, bounded, until they are whole:
 *
 *   datagrid  3 dgnode processes on 127.0.0.1 (listen tcp://127.0.0.1:0;
 *             the 2nd and 3rd seeded with the 1st; each with the suite's
 *             --cache SPEC and --failure-detection-timeout 2000), ready when
 *             each logged NODE-READY; then an embedded client node in this
 *             process (cfg.client), seeded with the three, ready when it
 *             sees 3 servers and the cache.
 *   redis     redis-server primary + 2 replicas (--replicaof; --save '',
 *             --appendonly no), ready when the primary reports 2 replicas
 *             state=online.
 *
 * A child that dies or a cluster that is not whole within 15 s is fatal
 * (dgb_die, after the child's log tail): the atexit cleanup of children.c
 * stops whatever was started.
 */
#ifndef DGB_CLUSTERS_H
#define DGB_CLUSTERS_H

#include "children.h"
#include "datagrid.h"

#include <limits.h>
#include <stdint.h>

#define DGB_NSERVERS 3
#define DGB_FAILURE_TIMEOUT_MS 2000  /* dgnode --failure-detection-timeout */
#define DGB_START_TIMEOUT_MS 15000   /* a process is up / a cluster whole within */
#define DGB_REDIS_IO_TIMEOUT_S 10    /* a Redis reply arrives within */

typedef struct dgb_dgcluster {
	char cluster[64];                /* dgbench-<suite>-<pid> */
	char addr[DGB_NSERVERS][128];    /* what each dgnode listens on */
	dgb_child *server[DGB_NSERVERS];
	dg_node *client;                 /* the embedded client node */
	dg_cache *cache;                 /* the cache of the spec, on the client */
	uint32_t tx_done_capacity;       /* set before start: every node's
	                                    --tx-done-capacity (0: the default) */
} dgb_dgcluster;

/* Starts the datagrid cluster with one cache, `cache_spec` as dgnode's
 * --cache takes it (NAME[,PART]...); a note on stderr says how long it
 * took, prefixed with `what`. */
void dgb_dgcluster_start(dgb_dgcluster *c, const char *dgnode,
    const char *suite, const char *cache_spec, const char *what);
/* Stops the client node (the servers stop with dgb_children_stop).  On
 * the exit path (dgb_die) an atexit handler does it, before OpenSSL's
 * cleanup; so dgb_die must not be called while other threads use the
 * node. */
void dgb_dgcluster_stop(dgb_dgcluster *c);
/* The client node's topology version: a change during a measurement means
 * a node was suspected or left. */
int64_t dgb_dgcluster_topo_version(dgb_dgcluster *c);
/* Every server's dgi_alloc counters since it started, summed: SIGUSR1 to
 * each, then its ALLOC-STATS line read from its log (dgnode.c).  false
 * (with a note) if a server did not log it within 2 s. */
bool dgb_dgcluster_alloc_stats(dgb_dgcluster *c, uint64_t *allocs,
    uint64_t *bytes);

typedef struct dgb_redis {
	char path[PATH_MAX];             /* redis-server */
	int port;                        /* the primary's */
	dgb_child *node[3];              /* primary, replica, replica */
} dgb_redis;

/* Starts r->path as a primary and 2 replicas on free ports. */
void dgb_redis_start(dgb_redis *r, const char *what);

#endif /* DGB_CLUSTERS_H */
