/* clusters.c — the datagrid and Redis clusters of the cache and txn
 * suites (clusters.h). */
#define _GNU_SOURCE
#include "clusters.h"
#include "resp.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define POLL_US 20000
#define ALLOC_STATS_TIMEOUT_NS 2000000000u

static uint64_t start_deadline(void)
{
	return dgb_now_ns() + (uint64_t)DGB_START_TIMEOUT_MS * 1000000u;
}

/* Waits for "id=NODE-READY ... address=URL" in c's log. */
static void wait_node_ready(dgb_child *c, char *addr, size_t cap)
{
	uint64_t deadline = start_deadline();
	char line[1024];
	for (;;) {
		if (dgb_child_log_find(c, 0, "id=NODE-READY", line, sizeof line)) {
			char *a = strstr(line, " address=");
			size_t n = a != NULL ? strcspn(a + 9, " ") : 0;
			if (n == 0 || n >= cap)
				dgb_child_die(c, "NODE-READY without an address: %s", line);
			memcpy(addr, a + 9, n);
			addr[n] = 0;
			return;
		}
		if (!dgb_child_alive(c))
			dgb_child_die(c, "exited before it was ready (wait status %d)",
			    c->status);
		if (dgb_now_ns() >= deadline)
			dgb_child_die(c, "not ready in %d ms", DGB_START_TIMEOUT_MS);
		usleep(POLL_US);
	}
}

static dgb_child *start_dgnode(dgb_dgcluster *c, const char *dgnode, int i,
    const char *cache_spec)
{
	char name[16], failure[16], cap[16], *argv[18];
	int a = 0;
	snprintf(name, sizeof name, "dgnode%d", i + 1);
	snprintf(failure, sizeof failure, "%d", DGB_FAILURE_TIMEOUT_MS);
	argv[a++] = (char *)dgnode;
	argv[a++] = "--cluster-name";
	argv[a++] = c->cluster;
	argv[a++] = "--listen";
	argv[a++] = "tcp://127.0.0.1:0";
	argv[a++] = "--failure-detection-timeout";
	argv[a++] = failure;
	argv[a++] = "--cache";
	argv[a++] = (char *)cache_spec;
	if (c->tx_done_capacity != 0) {
		snprintf(cap, sizeof cap, "%u", c->tx_done_capacity);
		argv[a++] = "--tx-done-capacity";
		argv[a++] = cap;
	}
	if (i > 0) {
		argv[a++] = "--seed";
		argv[a++] = c->addr[0];
	}
	argv[a] = NULL;
	return dgb_spawn(name, argv);
}

/* The cluster whose client node is running, for the exit path. */
static dgb_dgcluster *running;

/* dgb_die exits with the client node running.  Stop it before anything
 * else: exit() runs atexit handlers in reverse order, and OpenSSL (which
 * the node uses) registers its cleanup during dg_node_start — after
 * children.c's handler, before this one.  With the node still running,
 * its threads may call into a cleaned-up OpenSSL while the dgnodes leave
 * (a reconnect's handshake: RAND_bytes on a freed lock, SIGSEGV). */
static void stop_client_at_exit(void)
{
	if (running != NULL)
		dgb_dgcluster_stop(running);
}

/* The client node, joined through the three. */
static void start_client(dgb_dgcluster *c)
{
	static bool atexit_done;
	const char *seeds[DGB_NSERVERS];
	for (int i = 0; i < DGB_NSERVERS; i++)
		seeds[i] = c->addr[i];
	dg_node_config cfg;
	dg_node_config_init(&cfg);
	cfg.cluster_name = c->cluster;
	cfg.listen_url = "tcp://127.0.0.1:0";
	cfg.seeds = seeds;
	cfg.nseeds = DGB_NSERVERS;
	cfg.client = true;
	cfg.failure_timeout_ms = DGB_FAILURE_TIMEOUT_MS;
	if (c->tx_done_capacity != 0)
		cfg.tx_done_capacity = c->tx_done_capacity;
	DG_DO(dg_node_start(&cfg, &c->client));
	running = c;
	if (!atexit_done)
		atexit(stop_client_at_exit);
	atexit_done = true;
}

/* Until the client sees the three servers and the cache `name`. */
static void wait_whole(dgb_dgcluster *c, const char *name)
{
	uint64_t deadline = start_deadline();
	for (;;) {
		dg_node_info info[16];
		int64_t ver;
		size_t n = dg_node_topology(c->client, &ver, info, 16);
		int servers = 0;
		for (size_t i = 0; i < n && i < 16; i++)
			servers += !info[i].client;
		if (servers == DGB_NSERVERS &&
		    dg_cache_get_by_name(c->client, name, &c->cache) == DG_OK)
			return;
		for (int i = 0; i < DGB_NSERVERS; i++)
			if (!dgb_child_alive(c->server[i]))
				dgb_child_die(c->server[i], "exited");
		if (dgb_now_ns() >= deadline)
			dgb_die("the client node sees %d of %d servers%s after %d ms",
			    servers, DGB_NSERVERS, c->cache ? "" : " and not the cache",
			    DGB_START_TIMEOUT_MS);
		usleep(POLL_US);
	}
}

/* Until the cluster takes writes: a topology with every node in it is not
 * yet a cluster whose writes go through at once.  In about 1 run of 6 a
 * probe put right after the client joined waited ~1 s (999-1002 ms: the
 * sweeper's period, cache/grid.c), and
 * a --quick run's first repetition (0.2 s of warm-up, 0.5 s window) timed
 * no operation: dgbench_smoke_cache failed 1 run in 10-15, with and without
 * the reactor's spin.  PROBES puts of keys no case uses (on every primary
 * with near certainty), each removed again; their time is noted.  The
 * stall itself is the cluster's, not the fixture's: see the note in
 * bench/README.md ("Reactors that spin before they sleep"). */
#define PROBES 32
static void wait_serving(dgb_dgcluster *c)
{
	uint64_t t0 = dgb_now_ns(), worst = 0;
	for (int i = 0; i < PROBES; i++) {
		char key[32];
		int n = snprintf(key, sizeof key, "dgbench-probe-%02d", i);
		uint64_t a = dgb_now_ns();
		dg_err e = dg_cache_put(c->cache, key, (size_t)n, "probe", 5);
		if (e != DG_OK)
			dgb_die("the cluster does not take writes: a probe put: %s",
			    dg_strerror(e));
		uint64_t d = dgb_now_ns() - a;
		worst = d > worst ? d : worst;
		DG_DO(dg_cache_remove(c->cache, key, (size_t)n, NULL));
	}
	dgb_note("the cluster took writes: %d probe puts in %.1f ms, the slowest %.1f ms",
	    PROBES, (double)(dgb_now_ns() - t0) / 1e6, (double)worst / 1e6);
}

void dgb_dgcluster_start(dgb_dgcluster *c, const char *dgnode,
    const char *suite, const char *cache_spec, const char *what)
{
	char name[64];
	snprintf(name, sizeof name, "%.*s", (int)strcspn(cache_spec, ","),
	    cache_spec);
	snprintf(c->cluster, sizeof c->cluster, "dgbench-%s-%d", suite,
	    (int)getpid());
	uint64_t t0 = dgb_now_ns();
	c->server[0] = start_dgnode(c, dgnode, 0, cache_spec);
	wait_node_ready(c->server[0], c->addr[0], sizeof c->addr[0]);
	for (int i = 1; i < DGB_NSERVERS; i++)
		c->server[i] = start_dgnode(c, dgnode, i, cache_spec);
	for (int i = 1; i < DGB_NSERVERS; i++)
		wait_node_ready(c->server[i], c->addr[i], sizeof c->addr[i]);
	start_client(c);
	wait_whole(c, name);
	wait_serving(c);
	dgb_note("%s: 3 dgnode servers + client node up in %.0f ms (%s)", what,
	    (double)(dgb_now_ns() - t0) / 1e6, dgnode);
}

void dgb_dgcluster_stop(dgb_dgcluster *c)
{
	if (c->client != NULL)
		dg_node_stop(c->client);
	c->client = NULL;
	c->cache = NULL;
	if (running == c)
		running = NULL;
}

int64_t dgb_dgcluster_topo_version(dgb_dgcluster *c)
{
	int64_t v = 0;
	dg_node_info info[1];
	dg_node_topology(c->client, &v, info, 1);
	return v;
}

/* The value of " key=" in line, 0 if absent. */
static uint64_t field_u64(const char *line, const char *key)
{
	char pat[32];
	snprintf(pat, sizeof pat, " %s=", key);
	const char *p = strstr(line, pat);
	return p != NULL ? strtoull(p + strlen(pat), NULL, 10) : 0;
}

bool dgb_dgcluster_alloc_stats(dgb_dgcluster *c, uint64_t *allocs,
    uint64_t *bytes)
{
	long from[DGB_NSERVERS];
	*allocs = *bytes = 0;
	/* all three signalled first: they answer in parallel */
	for (int i = 0; i < DGB_NSERVERS; i++) {
		from[i] = dgb_child_log_size(c->server[i]);
		if (!dgb_child_alive(c->server[i])) {
			dgb_note("%s: not running (wait status %d): no ALLOC-STATS",
			    c->server[i]->name, c->server[i]->status);
			return false;
		}
		if (kill(c->server[i]->pid, SIGUSR1) != 0) {
			dgb_note("%s: cannot signal it for ALLOC-STATS: %s",
			    c->server[i]->name, strerror(errno));
			return false;
		}
	}
	uint64_t deadline = dgb_now_ns() + ALLOC_STATS_TIMEOUT_NS;
	for (int i = 0; i < DGB_NSERVERS; i++) {
		char line[512];
		while (!dgb_child_log_find(c->server[i], from[i], "id=ALLOC-STATS",
		    line, sizeof line)) {
			if (dgb_now_ns() >= deadline) {
				dgb_note("%s: no ALLOC-STATS line within 2 s of SIGUSR1 "
				    "(a dgnode older than this dgbench?)", c->server[i]->name);
				return false;
			}
			usleep(1000);
		}
		*allocs += field_u64(line, "allocs");
		*bytes += field_u64(line, "bytes");
	}
	return true;
}

static dgb_child *start_redis(dgb_redis *r, int i, int port)
{
	char name[16], dir[128], portstr[16], pport[16], *argv[32];
	int a = 0;
	snprintf(name, sizeof name, "redis%d", i);
	snprintf(dir, sizeof dir, "%s/%s", dgb_tmpdir(), name);
	if (mkdir(dir, 0700) != 0)
		dgb_die("mkdir %s: %s", dir, strerror(errno));
	snprintf(portstr, sizeof portstr, "%d", port);
	snprintf(pport, sizeof pport, "%d", r->port);
	argv[a++] = r->path;
	argv[a++] = "--port";
	argv[a++] = portstr;
	argv[a++] = "--bind";
	argv[a++] = "127.0.0.1";
	argv[a++] = "--save";
	argv[a++] = "";
	argv[a++] = "--appendonly";
	argv[a++] = "no";
	argv[a++] = "--daemonize";
	argv[a++] = "no";
	argv[a++] = "--dir";
	argv[a++] = dir;
	argv[a++] = "--repl-diskless-sync-delay";
	argv[a++] = "0";
	if (i > 0) {
		argv[a++] = "--replicaof";
		argv[a++] = "127.0.0.1";
		argv[a++] = pport;
	}
	argv[a] = NULL;
	return dgb_spawn(name, argv);
}

/* Does the primary report both replicas online?  Reconnects as needed
 * (the primary may not listen yet). */
static bool replicas_online(dgb_rconn *c, int port)
{
	char info[8192];
	if (c->fd < 0 && (c->fd = dgb_tcp_connect(port, DGB_REDIS_IO_TIMEOUT_S)) < 0)
		return false;
	const char *argv[] = { "INFO", "replication" };
	if (dgb_rc_cmd(c, info, sizeof info, 2, argv) != '$') {
		close(c->fd);
		c->fd = -1;
		c->beg = c->end = 0;
		return false;
	}
	int online = 0;
	for (char *p = info; (p = strstr(p, "state=online")) != NULL; p++)
		online++;
	return strstr(info, "connected_slaves:2") != NULL && online == 2;
}

void dgb_redis_start(dgb_redis *r, const char *what)
{
	uint64_t t0 = dgb_now_ns();
	r->port = dgb_free_port();
	r->node[0] = start_redis(r, 0, r->port);
	for (int i = 1; i <= 2; i++)
		r->node[i] = start_redis(r, i, dgb_free_port());

	uint64_t deadline = start_deadline();
	dgb_rconn *c = calloc(1, sizeof *c);
	if (c == NULL)
		dgb_die("out of memory");
	c->fd = -1;
	while (!replicas_online(c, r->port)) {
		for (int i = 0; i < 3; i++)
			if (!dgb_child_alive(r->node[i]))
				dgb_child_die(r->node[i], "exited");
		if (dgb_now_ns() >= deadline)
			dgb_child_die(r->node[0], "the primary does not report 2 online "
			    "replicas after %d ms", DGB_START_TIMEOUT_MS);
		usleep(POLL_US);
	}
	close(c->fd);
	free(c);
	dgb_note("%s: primary (port %d) + 2 online replicas up in %.0f ms (%s)",
	    what, r->port, (double)(dgb_now_ns() - t0) / 1e6, r->path);
}
