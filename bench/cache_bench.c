/*
 * cache_bench.c — the "cache" suite: datagrid's cache operations against
 * LMDB (embedded, in-process) and Redis (a primary with two replicas,
 * SET + WAIT 2) in the same run.
 *
 * Keys are 16 bytes ("bench-key-NNNNNN"), values 100 bytes; a fixed set of
 * NKEYS keys, visited in a fixed scrambled order (i * STRIDE mod NKEYS), the
 * same order for every implementation.
 *
 * Cases:
 *   embedded_put   datagrid: dg_cache_put on an embedded single node
 *                  (dg_node_config_init defaults, listen tcp://127.0.0.1:0,
 *                  one PARTITIONED cache, 0 backups), every key present
 *                  (pre-filled), so a put replaces; lmdb: one write
 *                  transaction per put (mdb_txn_begin, mdb_put,
 *                  mdb_txn_commit) on an environment opened with
 *                  MDB_NOSYNC, pre-filled with the same keys.
 *   embedded_get   datagrid: dg_cache_get into a reused dg_buf; lmdb: one
 *                  read transaction handle renewed and reset per get
 *                  (mdb_txn_renew, mdb_get, mdb_txn_reset) and the value
 *                  copied out, as dg_cache_get copies it.
 *                  Both measured by the harness (best of 5 repetitions, or
 *                  3 with --quick, interleaved); allocs_per_op: datagrid
 *                  the dgi_alloc counter, lmdb malloc calls.
 *   fullsync_put_1c, fullsync_put_32c
 *                  1 and 32 client threads writing for a fixed time.
 *                  datagrid: 3 dgnode processes on loopback, each with
 *                  --cache bench,backups=2,sync=full_sync, and in this
 *                  process an embedded client node (cfg.client) seeded
 *                  with the three; each thread calls dg_cache_put.
 *                  redis: redis-server primary + 2 replicas (--replicaof),
 *                  one TCP connection per thread, each operation
 *                  "SET key value" and "WAIT 2 0" written together (one
 *                  send(): the pipelined best case for Redis) and both
 *                  replies read (+OK, :2).  Skipped, with the reason on
 *                  stderr, when redis-server is not installed.
 *                  Thread t writes keys t, t+T, t+2T, ... of the key set.
 *
 * Method (fullsync): per (case, implementation) REPS repetitions
 * (3 x 1 s; --quick 1 x 0.5 s), interleaved between the implementations;
 * each repetition starts the threads, which write for a warm-up (0.3 s;
 * --quick 0.2 s) and then for the timed window.  Every operation started in
 * the window is timed alone (CLOCK_MONOTONIC) into the thread's own
 * log-linear histogram (128 sub-buckets per power of two: < 0.8% error;
 * nothing allocated in the loop).  p50_us/p99_us: nearest rank over all
 * repetitions' operations (bucket midpoints); ops_per_s: operations timed /
 * window time, summed over repetitions; ns_per_op: 1e9 / ops_per_s.
 * allocs_per_op (datagrid only): dgi_alloc calls in this process (the client
 * node; the dgnode servers are not counted) per operation, warm-up included.
 *
 * Processes: dgnode is found by --dgnode PATH, else $DG_DGNODE, else next to
 * dgbench (./dgnode, ../node/dgnode); redis-server by $DG_REDIS_SERVER, else
 * PATH.  Every child gets PR_SET_PDEATHSIG(SIGKILL), its output goes to a
 * log file in a temporary directory (its tail is printed if it fails), and
 * every wait is bounded.  At the end and on every exit path (atexit):
 * SIGTERM, 2 s, SIGKILL, waitpid; the temporary directory is removed.
 */
#define _GNU_SOURCE
#include "harness.h"
#include "datagrid.h"

#include <lmdb.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SUITE "cache"
#define KLEN 16
#define VLEN 100
#ifndef DGB_CACHE_NKEYS
#define DGB_CACHE_NKEYS 100000 /* -DDGB_CACHE_NKEYS=N: another key-set size */
#endif
#define NKEYS DGB_CACHE_NKEYS
#define STRIDE 7919u           /* odd, not a multiple of 5: a permutation */
#define NSERVERS 3
#define MAX_THREADS 32
#define FAILURE_TIMEOUT "2000" /* dgnode --failure-detection-timeout, ms */
#define START_TIMEOUT_MS 15000 /* a process is up / a cluster formed within */
#define REDIS_IO_TIMEOUT_S 10  /* a Redis reply arrives within */

extern unsigned dgb_own_lines;
int dgb_cache_suite(const dgb_opts *o);

#define MDB_DO(expr)                                                       \
	do {                                                                   \
		int rc_ = (expr);                                                  \
		if (__builtin_expect(rc_ != MDB_SUCCESS, 0))                       \
			dgb_die("%s:%d: %s: %s", __FILE__, __LINE__, #expr,            \
			    mdb_strerror(rc_));                                        \
	} while (0)

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t dg_allocs(void)
{
	dgi_alloc_stats s;
	dgi_alloc_get_stats(&s);
	return s.allocs;
}

static uint8_t keys[NKEYS][KLEN];

static void make_keys(void)
{
	char tmp[KLEN + 1];
	for (unsigned i = 0; i < NKEYS; i++) {
		snprintf(tmp, sizeof tmp, "bench-key-%06u", i);
		memcpy(keys[i], tmp, KLEN);
	}
}

static void make_value(uint8_t *v, uint64_t stamp)
{
	for (unsigned i = 0; i < VLEN; i++)
		v[i] = (uint8_t)('a' + i % 26);
	memcpy(v, &stamp, sizeof stamp);
}

/* ------------------------------------------------------------------------
 * Process-wide state: the temporary directory and the child processes,
 * cleaned at the end and on every exit path.
 * ------------------------------------------------------------------------ */
#define MAX_CHILDREN 8

static struct {
	pid_t parent;
	bool atexit_done;
	char dir[64];                 /* temporary directory, or "" */
	struct child {
		pid_t pid;                /* > 0 while running */
		pid_t was;                /* its pid, kept after it exited */
		int status;               /* wait status once it exited */
		char name[32];
		char log[128];
	} ch[MAX_CHILDREN];
	int nch;
} G;

static int rm_one(const char *path, const struct stat *st, int flag,
    struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

static void remove_dir(void)
{
	if (G.dir[0] == 0)
		return;
	nftw(G.dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	G.dir[0] = 0;
}

/* SIGTERM to every child, up to 2 s for all to exit, then SIGKILL. */
static void stop_children(void)
{
	for (int i = 0; i < G.nch; i++)
		if (G.ch[i].pid > 0)
			kill(G.ch[i].pid, SIGTERM);
	uint64_t deadline = now_ns() + 2000000000u;
	for (;;) {
		bool left = false;
		for (int i = 0; i < G.nch; i++) {
			if (G.ch[i].pid <= 0)
				continue;
			int status;
			pid_t r = waitpid(G.ch[i].pid, &status, WNOHANG);
			if (r == G.ch[i].pid || (r < 0 && errno == ECHILD))
				G.ch[i].pid = 0;
			else
				left = true;
		}
		if (!left)
			break;
		if (now_ns() >= deadline) {
			for (int i = 0; i < G.nch; i++)
				if (G.ch[i].pid > 0) {
					dgb_note("%s (pid %d) did not stop in 2 s: killed",
					    G.ch[i].name, (int)G.ch[i].pid);
					kill(G.ch[i].pid, SIGKILL);
					waitpid(G.ch[i].pid, NULL, 0);
					G.ch[i].pid = 0;
				}
			break;
		}
		usleep(10000);
	}
	G.nch = 0;
}

static void at_exit(void)
{
	if (getpid() != G.parent)
		return;
	stop_children();
	remove_dir();
}

static void ensure_dir(void)
{
	if (G.dir[0] != 0)
		return;
	G.parent = getpid();
	if (!G.atexit_done) {
		atexit(at_exit);
		G.atexit_done = true;
	}
	snprintf(G.dir, sizeof G.dir, "/tmp/dgbench-cache-XXXXXX");
	if (mkdtemp(G.dir) == NULL) {
		G.dir[0] = 0;
		dgb_die("mkdtemp: %s", strerror(errno));
	}
}

/* The last lines of a child's log, on stderr. */
static void log_tail(const struct child *c)
{
	FILE *f = fopen(c->log, "r");
	if (f == NULL)
		return;
	char buf[4096];
	fseek(f, 0, SEEK_END);
	long size = ftell(f);
	long from = size > (long)sizeof buf - 1 ? size - (long)sizeof buf + 1 : 0;
	fseek(f, from, SEEK_SET);
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	buf[n] = 0;
	fclose(f);
	fprintf(stderr, "dgbench: --- last output of %s (pid %d) ---\n%s%s"
	    "dgbench: ---\n", c->name, (int)c->was, buf,
	    n > 0 && buf[n - 1] != '\n' ? "\n" : "");
}

_Noreturn static void die_child(const struct child *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
_Noreturn static void die_child(const struct child *c, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	log_tail(c);
	dgb_die("%s: %s", c->name, msg);
}

/* Starts argv[0] with stdout and stderr to DIR/<name>.log. */
static struct child *spawn(const char *name, char *const argv[])
{
	if (G.nch == MAX_CHILDREN)
		dgb_die("too many child processes");
	struct child *c = &G.ch[G.nch];
	snprintf(c->name, sizeof c->name, "%s", name);
	snprintf(c->log, sizeof c->log, "%s/%s.log", G.dir, name);
	int fd = open(c->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (fd < 0 || null < 0)
		dgb_die("open %s: %s", c->log, strerror(errno));
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	if (pid < 0)
		dgb_die("fork: %s", strerror(errno));
	if (pid == 0) {
		/* only async-signal-safe calls until exec */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != G.parent)
			_exit(127);
		dup2(null, 0);
		dup2(fd, 1);
		dup2(fd, 2);
		execv(argv[0], argv);
		_exit(127);
	}
	close(fd);
	close(null);
	c->pid = c->was = pid;
	c->status = 0;
	G.nch++;
	return c;
}

static bool child_alive(struct child *c)
{
	int status;
	if (c->pid <= 0)
		return false;
	pid_t r = waitpid(c->pid, &status, WNOHANG);
	if (r == 0)
		return true;
	c->status = status;
	c->pid = 0;
	return false;
}

static bool executable(const char *p)
{
	struct stat st;
	return p != NULL && p[0] != 0 && stat(p, &st) == 0 && S_ISREG(st.st_mode) &&
	    access(p, X_OK) == 0;
}

/* dgnode: --dgnode, $DG_DGNODE, or next to this executable. */
static bool find_dgnode(const dgb_opts *o, char *out, size_t cap,
    const char **why)
{
	if (o->dgnode != NULL) {
		snprintf(out, cap, "%s", o->dgnode);
		*why = "--dgnode is not an executable file";
		return executable(out);
	}
	const char *env = getenv("DG_DGNODE");
	if (env != NULL && env[0] != 0) {
		snprintf(out, cap, "%s", env);
		*why = "$DG_DGNODE is not an executable file";
		return executable(out);
	}
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n > 0) {
		self[n] = 0;
		char *slash = strrchr(self, '/');
		if (slash != NULL) {
			*slash = 0;
			if ((size_t)snprintf(out, cap, "%s/dgnode", self) < cap &&
			    executable(out))
				return true;
			if ((size_t)snprintf(out, cap, "%s/../node/dgnode", self) < cap &&
			    executable(out))
				return true;
		}
	}
	*why = "not found next to dgbench (give --dgnode PATH or $DG_DGNODE)";
	return false;
}

/* redis-server: $DG_REDIS_SERVER, else PATH. */
static bool find_redis(char *out, size_t cap, const char **why)
{
	const char *env = getenv("DG_REDIS_SERVER");
	if (env != NULL && env[0] != 0) {
		snprintf(out, cap, "%s", env);
		*why = "$DG_REDIS_SERVER is not an executable file";
		return executable(out);
	}
	const char *path = getenv("PATH");
	if (path == NULL)
		path = "/usr/local/bin:/usr/bin:/bin";
	while (*path) {
		const char *end = strchr(path, ':');
		size_t len = end ? (size_t)(end - path) : strlen(path);
		if (len > 0 && len < cap - 16) {
			snprintf(out, cap, "%.*s/redis-server", (int)len, path);
			if (executable(out))
				return true;
		}
		path += len + (end != NULL);
	}
	/* sbin directories are often not in PATH */
	snprintf(out, cap, "/usr/sbin/redis-server");
	if (executable(out))
		return true;
	*why = "redis-server not installed (not in PATH; apt-get install redis-server)";
	return false;
}

/* ------------------------------------------------------------------------
 * Reporting of the lines this suite prints itself (fullsync).
 * ------------------------------------------------------------------------ */
typedef struct cline {
	const char *name, *impl;
	double ops_per_s, p50_us, p99_us;
	double allocs_per_op;   /* < 0: not reported */
} cline;

static bool table_header_done;

static void cprint(const dgb_opts *o, const cline *l)
{
	double ns = l->ops_per_s > 0 ? 1e9 / l->ops_per_s : 0;
	if (o->json) {
		printf("{\"suite\":\"%s\",\"case\":\"%s\",\"impl\":\"%s\",\"ns_per_op\":"
		    "%.1f,\"ops_per_s\":%.0f,\"p50_us\":%.1f,\"p99_us\":%.1f", SUITE,
		    l->name, l->impl, ns, l->ops_per_s, l->p50_us, l->p99_us);
		if (l->allocs_per_op >= 0)
			printf(",\"allocs_per_op\":%.6g", l->allocs_per_op);
		printf("}\n");
	} else {
		char allocs[32];
		if (!table_header_done) {
			printf("\nsuite %s, FULL_SYNC puts (%s)\n", SUITE,
			    o->quick ? "quick" : "full");
			printf("%-18s %-10s %12s %10s %9s %9s %10s\n", "case", "impl",
			    "ns/op", "ops/s", "p50_us", "p99_us", "allocs/op");
			table_header_done = true;
		}
		snprintf(allocs, sizeof allocs, l->allocs_per_op >= 0 ? "%.4g" : "n/a",
		    l->allocs_per_op);
		printf("%-18s %-10s %12.1f %10.0f %9.1f %9.1f %10s\n", l->name, l->impl,
		    ns, l->ops_per_s, l->p50_us, l->p99_us, allocs);
	}
	fflush(stdout);
	dgb_own_lines++;
}

/* ------------------------------------------------------------------------
 * embedded_put / embedded_get
 * ------------------------------------------------------------------------ */
static struct ectx {
	dg_node *node;
	dg_cache *cache;
	dg_buf buf;
	MDB_env *env;
	MDB_dbi dbi;
	MDB_txn *rtxn;
	char lmdb_dir[128];
	uint8_t val[VLEN];
	uint8_t out[VLEN];
	uint32_t next;             /* position in the key order */
} E;

static inline const uint8_t *next_key(struct ectx *e)
{
	uint32_t k = (uint32_t)(((uint64_t)e->next * STRIDE) % NKEYS);
	if (++e->next == NKEYS)
		e->next = 0;
	return keys[k];
}

static uint64_t e_dg_put(void *ctx, uint64_t iters)
{
	struct ectx *e = ctx;
	for (uint64_t i = 0; i < iters; i++) {
		const uint8_t *k = next_key(e);
		e->val[0] = (uint8_t)i;
		DG_DO(dg_cache_put(e->cache, k, KLEN, e->val, VLEN));
	}
	return iters;
}

static uint64_t e_dg_get(void *ctx, uint64_t iters)
{
	struct ectx *e = ctx;
	uint64_t sum = 0;
	for (uint64_t i = 0; i < iters; i++) {
		const uint8_t *k = next_key(e);
		dg_buf_reset(&e->buf);
		DG_DO(dg_cache_get(e->cache, k, KLEN, &e->buf));
		sum += e->buf.len + e->buf.data[VLEN - 1];
	}
	return sum;
}

static uint64_t e_mdb_put(void *ctx, uint64_t iters)
{
	struct ectx *e = ctx;
	for (uint64_t i = 0; i < iters; i++) {
		MDB_val k = { KLEN, (void *)next_key(e) }, v = { VLEN, e->val };
		MDB_txn *txn;
		e->val[0] = (uint8_t)i;
		MDB_DO(mdb_txn_begin(e->env, NULL, 0, &txn));
		int rc = mdb_put(txn, e->dbi, &k, &v, 0);
		if (rc != MDB_SUCCESS) {
			mdb_txn_abort(txn);
			dgb_die("mdb_put: %s", mdb_strerror(rc));
		}
		MDB_DO(mdb_txn_commit(txn));
	}
	return iters;
}

static uint64_t e_mdb_get(void *ctx, uint64_t iters)
{
	struct ectx *e = ctx;
	uint64_t sum = 0;
	for (uint64_t i = 0; i < iters; i++) {
		MDB_val k = { KLEN, (void *)next_key(e) }, v;
		MDB_DO(mdb_txn_renew(e->rtxn));
		MDB_DO(mdb_get(e->rtxn, e->dbi, &k, &v));
		memcpy(e->out, v.mv_data, v.mv_size < VLEN ? v.mv_size : VLEN);
		mdb_txn_reset(e->rtxn);
		dgb_clobber(e->out);
		sum += v.mv_size + e->out[VLEN - 1];
	}
	return sum;
}

static void lmdb_open(void)
{
	ensure_dir();
	snprintf(E.lmdb_dir, sizeof E.lmdb_dir, "%s/lmdb", G.dir);
	if (mkdir(E.lmdb_dir, 0700) != 0)
		dgb_die("mkdir %s: %s", E.lmdb_dir, strerror(errno));
	MDB_txn *txn;
	MDB_DO(mdb_env_create(&E.env));
	MDB_DO(mdb_env_set_mapsize(E.env, (size_t)1 << 30));
	MDB_DO(mdb_env_open(E.env, E.lmdb_dir, MDB_NOSYNC, 0600));
	MDB_DO(mdb_txn_begin(E.env, NULL, 0, &txn));
	MDB_DO(mdb_dbi_open(txn, NULL, 0, &E.dbi));
	for (unsigned i = 0; i < NKEYS; i++) {
		MDB_val k = { KLEN, keys[i] }, v = { VLEN, E.val };
		MDB_DO(mdb_put(txn, E.dbi, &k, &v, 0));
	}
	MDB_DO(mdb_txn_commit(txn));
	MDB_DO(mdb_txn_begin(E.env, NULL, MDB_RDONLY, &E.rtxn));
	mdb_txn_reset(E.rtxn);
}

static void lmdb_close(void)
{
	if (E.rtxn != NULL)
		mdb_txn_abort(E.rtxn);
	E.rtxn = NULL;
	if (E.env != NULL)
		mdb_env_close(E.env);
	E.env = NULL;
}

static void embedded_cases(const dgb_opts *o)
{
	bool put_dg = dgb_selected(o, "embedded_put", "datagrid");
	bool put_mdb = dgb_selected(o, "embedded_put", "lmdb");
	bool get_dg = dgb_selected(o, "embedded_get", "datagrid");
	bool get_mdb = dgb_selected(o, "embedded_get", "lmdb");
	bool dg = put_dg || get_dg, mdb = put_mdb || get_mdb;
	if (!dg && !mdb)
		return;

	make_value(E.val, 0);
	dg_buf_init(&E.buf);
	if (dg) {
		char cluster[64];
		dg_node_config cfg;
		dg_cache_config cc;
		snprintf(cluster, sizeof cluster, "dgbench-embedded-%d", (int)getpid());
		dg_node_config_init(&cfg);
		cfg.listen_url = "tcp://127.0.0.1:0";
		cfg.cluster_name = cluster;
		DG_DO(dg_node_start(&cfg, &E.node));
		dg_cache_config_init(&cc, "bench");
		cc.mode = DG_PARTITIONED;
		cc.backups = 0;
		DG_DO(dg_cache_create(E.node, &cc, &E.cache));
		for (unsigned i = 0; i < NKEYS; i++)
			DG_DO(dg_cache_put(E.cache, keys[i], KLEN, E.val, VLEN));
	}
	if (mdb)
		lmdb_open();

	dgb_begin_suite(o, SUITE);
	dgb_bench b[2];
	dgb_result r[2];
	const char *cases[2] = { "embedded_put", "embedded_get" };
	dgb_run_fn dgf[2] = { e_dg_put, e_dg_get }, mdbf[2] = { e_mdb_put, e_mdb_get };
	bool sel_dg[2] = { put_dg, get_dg }, sel_mdb[2] = { put_mdb, get_mdb };
	double target_ns[2] = { 150, 80 };
	for (int c = 0; c < 2; c++) {
		unsigned n = 0;
		if (sel_dg[c])
			b[n++] = (dgb_bench){ .suite = SUITE, .name = cases[c],
				.impl = "datagrid", .run = dgf[c], .ctx = &E, .ops_per_iter = 1,
				.bytes = -1, .alloc_src = DGB_ALLOC_DG };
		if (sel_mdb[c])
			b[n++] = (dgb_bench){ .suite = SUITE, .name = cases[c],
				.impl = "lmdb", .run = mdbf[c], .ctx = &E, .ops_per_iter = 1,
				.bytes = -1, .alloc_src = DGB_ALLOC_HEAP };
		if (n == 0)
			continue;
		dgb_run_group(o, b, n, r);
		if (n == 2)
			dgb_note("%s: datagrid %.1f ns (target <= %.0f), lmdb %.1f ns: "
			    "lmdb / datagrid = %.2fx (target >= 3x); datagrid allocs/op %.3g",
			    cases[c], r[0].ns_per_op, target_ns[c], r[1].ns_per_op,
			    r[1].ns_per_op / r[0].ns_per_op, r[0].allocs_per_op);
	}

	if (dg) {
		dg_cache_metrics m;
		if (dg_cache_get_metrics(E.cache, &m) == DG_OK && m.entries != NKEYS)
			dgb_note("embedded: the cache holds %llu entries, expected %u",
			    (unsigned long long)m.entries, NKEYS);
		dg_node_stop(E.node);
		E.node = NULL;
		E.cache = NULL;
	}
	dg_buf_free(&E.buf);
	lmdb_close();
	if (E.lmdb_dir[0] != 0) {
		nftw(E.lmdb_dir, rm_one, 4, FTW_DEPTH | FTW_PHYS);
		E.lmdb_dir[0] = 0;
	}
}

/* ------------------------------------------------------------------------
 * Latency histogram: log-linear, 128 sub-buckets per power of two.
 * ------------------------------------------------------------------------ */
#define H_SUB 128
#define H_NB (2 * H_SUB + 40 * H_SUB)

typedef struct hist {
	uint64_t b[H_NB];
} hist;

static inline unsigned h_idx(uint64_t v)
{
	if (v < 2 * H_SUB)
		return (unsigned)v;
	unsigned e = 63u - (unsigned)__builtin_clzll(v); /* >= 8 */
	unsigned shift = e - 7;
	unsigned idx = 2 * H_SUB + (e - 8) * H_SUB + (unsigned)((v >> shift) - H_SUB);
	return idx < H_NB ? idx : H_NB - 1;
}

/* Midpoint of a bucket, ns. */
static double h_mid(unsigned idx)
{
	if (idx < 2 * H_SUB)
		return idx;
	unsigned e = (idx - 2 * H_SUB) / H_SUB + 8;
	uint64_t m = (idx - 2 * H_SUB) % H_SUB + H_SUB;
	unsigned shift = e - 7;
	return (double)(m << shift) + (double)((UINT64_C(1) << shift) - 1) / 2;
}

/* Nearest-rank percentile, us. */
static double h_pct_us(const hist *h, double q)
{
	uint64_t n = 0;
	for (unsigned i = 0; i < H_NB; i++)
		n += h->b[i];
	if (n == 0)
		return 0;
	uint64_t rank = (uint64_t)((double)n * q + 0.999999);
	if (rank < 1)
		rank = 1;
	uint64_t c = 0;
	for (unsigned i = 0; i < H_NB; i++) {
		c += h->b[i];
		if (c >= rank)
			return h_mid(i) / 1000.0;
	}
	return h_mid(H_NB - 1) / 1000.0;
}

/* ------------------------------------------------------------------------
 * A minimal RESP client over a blocking socket (setup and the peer).
 * ------------------------------------------------------------------------ */
typedef struct rconn {
	int fd;
	size_t beg, end;
	char buf[8192];
} rconn;

static int tcp_connect_port(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
		close(fd);
		return -1;
	}
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	struct timeval tv = { REDIS_IO_TIMEOUT_S, 0 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	return fd;
}

static int send_full(int fd, const void *p, size_t n)
{
	const char *b = p;
	while (n > 0) {
		ssize_t r = send(fd, b, n, MSG_NOSIGNAL);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

/* One line without its CRLF into out (NUL-terminated); -1 on error. */
static int rc_line(rconn *c, char *out, size_t cap)
{
	size_t n = 0;
	for (;;) {
		while (c->beg < c->end) {
			char ch = c->buf[c->beg++];
			if (ch == '\n') {
				if (n > 0 && out[n - 1] == '\r')
					n--;
				out[n] = 0;
				return 0;
			}
			if (n + 1 < cap)
				out[n++] = ch;
		}
		ssize_t r = recv(c->fd, c->buf, sizeof c->buf, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		c->beg = 0;
		c->end = (size_t)r;
	}
}

static int rc_bytes(rconn *c, char *out, size_t n, size_t cap)
{
	size_t got = 0;
	while (got < n) {
		if (c->beg == c->end) {
			ssize_t r = recv(c->fd, c->buf, sizeof c->buf, 0);
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0)
				return -1;
			c->beg = 0;
			c->end = (size_t)r;
		}
		size_t k = c->end - c->beg;
		if (k > n - got)
			k = n - got;
		size_t room = got < cap ? cap - got : 0;
		memcpy(out + got, c->buf + c->beg, k < room ? k : room);
		c->beg += k;
		got += k;
	}
	return 0;
}

/* A command of string arguments; one reply into out (simple, error,
 * integer as text, or bulk).  Returns the reply's type byte, 0 on I/O
 * error. */
static char rc_cmd(rconn *c, char *out, size_t cap, int argc, const char **argv)
{
	char req[1024];
	int n = snprintf(req, sizeof req, "*%d\r\n", argc);
	for (int i = 0; i < argc && n > 0 && (size_t)n < sizeof req; i++)
		n += snprintf(req + n, sizeof req - (size_t)n, "$%zu\r\n%s\r\n",
		    strlen(argv[i]), argv[i]);
	if (n <= 0 || (size_t)n >= sizeof req || send_full(c->fd, req, (size_t)n) != 0)
		return 0;
	char line[256];
	if (rc_line(c, line, sizeof line) != 0)
		return 0;
	if (line[0] == '$') {
		long len = strtol(line + 1, NULL, 10);
		if (len < 0) {
			out[0] = 0;
			return '$';
		}
		char crlf[2];
		if ((size_t)len >= cap ||
		    rc_bytes(c, out, (size_t)len, cap) != 0 || rc_bytes(c, crlf, 2, 2) != 0)
			return 0;
		out[len] = 0;
		return '$';
	}
	snprintf(out, cap, "%s", line + 1);
	return line[0];
}

/* ------------------------------------------------------------------------
 * The clusters.
 * ------------------------------------------------------------------------ */
static int free_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof sa;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &len) != 0)
		dgb_die("free port: %s", strerror(errno));
	close(fd);
	return ntohs(sa.sin_port);
}

static struct fctx {
	/* datagrid */
	char dgnode[PATH_MAX];
	char cluster[64];
	char addr[NSERVERS][128];
	dg_node *client;
	dg_cache *cache;
	/* redis */
	bool redis;
	char redis_path[PATH_MAX];
	int redis_port;
	struct child *redis_primary;
	rconn *rc[MAX_THREADS];
} F;

/* Waits for "id=NODE-READY ... address=URL" in c's log. */
static void wait_node_ready(struct child *c, char *addr, size_t cap)
{
	uint64_t deadline = now_ns() + (uint64_t)START_TIMEOUT_MS * 1000000u;
	char line[1024];
	for (;;) {
		FILE *f = fopen(c->log, "r");
		if (f != NULL) {
			while (fgets(line, sizeof line, f) != NULL) {
				if (strstr(line, "id=NODE-READY") == NULL)
					continue;
				char *a = strstr(line, " address=");
				if (a == NULL)
					continue;
				a += 9;
				size_t n = strcspn(a, " \n");
				if (n == 0 || n >= cap)
					continue;
				memcpy(addr, a, n);
				addr[n] = 0;
				fclose(f);
				return;
			}
			fclose(f);
		}
		if (!child_alive(c))
			die_child(c, "exited before it was ready (wait status %d)",
			    c->status);
		if (now_ns() >= deadline)
			die_child(c, "not ready in %d ms", START_TIMEOUT_MS);
		usleep(20000);
	}
}

static void start_dgnode(int i)
{
	char name[16], *argv[16];
	int a = 0;
	snprintf(name, sizeof name, "dgnode%d", i + 1);
	argv[a++] = F.dgnode;
	argv[a++] = "--cluster-name";
	argv[a++] = F.cluster;
	argv[a++] = "--listen";
	argv[a++] = "tcp://127.0.0.1:0";
	argv[a++] = "--failure-detection-timeout";
	argv[a++] = FAILURE_TIMEOUT;
	argv[a++] = "--cache";
	argv[a++] = "bench,backups=2,sync=full_sync";
	if (i > 0) {
		argv[a++] = "--seed";
		argv[a++] = F.addr[0];
	}
	argv[a] = NULL;
	spawn(name, argv);
}

/* 3 dgnodes and this process's client node; F.cache when done. */
static void datagrid_cluster_start(void)
{
	snprintf(F.cluster, sizeof F.cluster, "dgbench-%d", (int)getpid());
	uint64_t t0 = now_ns();
	int first = G.nch;
	start_dgnode(0);
	wait_node_ready(&G.ch[first], F.addr[0], sizeof F.addr[0]);
	for (int i = 1; i < NSERVERS; i++)
		start_dgnode(i);
	for (int i = 1; i < NSERVERS; i++)
		wait_node_ready(&G.ch[first + i], F.addr[i], sizeof F.addr[i]);

	const char *seeds[NSERVERS];
	for (int i = 0; i < NSERVERS; i++)
		seeds[i] = F.addr[i];
	dg_node_config cfg;
	dg_node_config_init(&cfg);
	cfg.cluster_name = F.cluster;
	cfg.listen_url = "tcp://127.0.0.1:0";
	cfg.seeds = seeds;
	cfg.nseeds = NSERVERS;
	cfg.client = true;
	cfg.failure_timeout_ms = (uint32_t)atoi(FAILURE_TIMEOUT);
	DG_DO(dg_node_start(&cfg, &F.client));

	/* the three servers in the client's topology, and the cache known */
	uint64_t deadline = now_ns() + (uint64_t)START_TIMEOUT_MS * 1000000u;
	for (;;) {
		dg_node_info info[16];
		int64_t ver;
		size_t n = dg_node_topology(F.client, &ver, info, 16);
		int servers = 0;
		for (size_t i = 0; i < n && i < 16; i++)
			servers += !info[i].client;
		if (servers == NSERVERS &&
		    dg_cache_get_by_name(F.client, "bench", &F.cache) == DG_OK)
			break;
		for (int i = 0; i < NSERVERS; i++)
			if (!child_alive(&G.ch[first + i]))
				die_child(&G.ch[first + i], "exited");
		if (now_ns() >= deadline)
			dgb_die("the client node sees %d of %d servers%s after %d ms",
			    servers, NSERVERS, F.cache ? "" : " and no cache 'bench'",
			    START_TIMEOUT_MS);
		usleep(20000);
	}
	const dg_cache_config *cc = dg_cache_config_of(F.cache);
	if (cc->backups != 2 || cc->write_sync != DG_FULL_SYNC)
		dgb_die("cache 'bench': backups %u, write_sync %d", cc->backups,
		    (int)cc->write_sync);
	dgb_note("fullsync/datagrid: 3 dgnode servers + client node up in %.0f ms "
	    "(%s)", (double)(now_ns() - t0) / 1e6, F.dgnode);
}

static void start_redis(int i, int port, int primary_port)
{
	char name[16], dir[128], portstr[16], pport[16], *argv[32];
	int a = 0;
	snprintf(name, sizeof name, "redis%d", i);
	snprintf(dir, sizeof dir, "%s/%s", G.dir, name);
	if (mkdir(dir, 0700) != 0)
		dgb_die("mkdir %s: %s", dir, strerror(errno));
	snprintf(portstr, sizeof portstr, "%d", port);
	snprintf(pport, sizeof pport, "%d", primary_port);
	argv[a++] = F.redis_path;
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
	struct child *c = spawn(name, argv);
	if (i == 0)
		F.redis_primary = c;
}

/* A primary and 2 replicas, both replicas online; then one connection per
 * client thread.  false (and why, on stderr) if Redis cannot be set up. */
static bool redis_cluster_start(void)
{
	uint64_t t0 = now_ns();
	F.redis_port = free_port();
	start_redis(0, F.redis_port, 0);
	for (int i = 1; i <= 2; i++)
		start_redis(i, free_port(), F.redis_port);

	uint64_t deadline = now_ns() + (uint64_t)START_TIMEOUT_MS * 1000000u;
	rconn *c = calloc(1, sizeof *c);
	if (c == NULL)
		dgb_die("out of memory");
	c->fd = -1;
	char info[8192];
	bool ok = false;
	while (!ok) {
		for (int i = G.nch - 3; i < G.nch; i++)
			if (!child_alive(&G.ch[i]))
				die_child(&G.ch[i], "exited");
		if (now_ns() >= deadline) {
			log_tail(F.redis_primary);
			dgb_die("redis: the primary does not report 2 online replicas "
			    "after %d ms", START_TIMEOUT_MS);
		}
		if (c->fd < 0 && (c->fd = tcp_connect_port(F.redis_port)) < 0) {
			usleep(20000);
			continue;
		}
		const char *argv[] = { "INFO", "replication" };
		if (rc_cmd(c, info, sizeof info, 2, argv) != '$') {
			close(c->fd);
			c->fd = -1;
			c->beg = c->end = 0;
			usleep(20000);
			continue;
		}
		int online = 0;
		for (char *p = info; (p = strstr(p, "state=online")) != NULL; p++)
			online++;
		ok = strstr(info, "connected_slaves:2") != NULL && online == 2;
		if (!ok)
			usleep(20000);
	}
	close(c->fd);
	free(c);
	for (int t = 0; t < MAX_THREADS; t++) {
		F.rc[t] = calloc(1, sizeof(rconn));
		if (F.rc[t] == NULL)
			dgb_die("out of memory");
		if ((F.rc[t]->fd = tcp_connect_port(F.redis_port)) < 0)
			dgb_die("redis: connect to port %d: %s", F.redis_port, strerror(errno));
	}
	dgb_note("fullsync/redis: primary (port %d) + 2 online replicas up in %.0f ms "
	    "(%s)", F.redis_port, (double)(now_ns() - t0) / 1e6, F.redis_path);
	return true;
}

static void redis_close_conns(void)
{
	for (int t = 0; t < MAX_THREADS; t++)
		if (F.rc[t] != NULL) {
			close(F.rc[t]->fd);
			free(F.rc[t]);
			F.rc[t] = NULL;
		}
}

/* ------------------------------------------------------------------------
 * fullsync_put_Nc: the client threads.
 * ------------------------------------------------------------------------ */
enum impl { IMPL_DATAGRID, IMPL_REDIS };

typedef struct worker {
	pthread_t th;
	enum impl impl;
	unsigned t, nthreads;
	uint64_t warm_end, end;       /* monotonic ns */
	uint64_t seq;                 /* this thread's next key */
	uint64_t ops_all, ops_timed, errors;
	dg_err first_err;
	char redis_err[128];
	hist *h;
	/* redis: the request, patched in place per operation */
	char req[256];
	size_t req_len, key_off, val_off;
	uint8_t val[VLEN];
} worker;

static void redis_req_init(worker *w)
{
	static const char wait[] = "*3\r\n$4\r\nWAIT\r\n$1\r\n2\r\n$1\r\n0\r\n";
	int n = snprintf(w->req, sizeof w->req, "*3\r\n$3\r\nSET\r\n$%d\r\n", KLEN);
	w->key_off = (size_t)n;
	n += KLEN;
	n += snprintf(w->req + n, sizeof w->req - (size_t)n, "\r\n$%d\r\n", VLEN);
	w->val_off = (size_t)n;
	make_value((uint8_t *)w->req + w->val_off, 0);
	n += VLEN;
	memcpy(w->req + n, "\r\n", 2);
	n += 2;
	memcpy(w->req + n, wait, sizeof wait - 1);
	w->req_len = (size_t)n + sizeof wait - 1;
}

/* One operation; false on error (recorded in w). */
static bool op_once(worker *w, const uint8_t *key)
{
	if (w->impl == IMPL_DATAGRID) {
		memcpy(w->val, &w->seq, sizeof w->seq);
		dg_err e = dg_cache_put(F.cache, key, KLEN, w->val, VLEN);
		if (e != DG_OK) {
			if (w->errors++ == 0)
				w->first_err = e;
			return false;
		}
		return true;
	}
	rconn *c = F.rc[w->t];
	char l1[128], l2[128];
	memcpy(w->req + w->key_off, key, KLEN);
	memcpy(w->req + w->val_off, &w->seq, sizeof w->seq);
	if (send_full(c->fd, w->req, w->req_len) != 0 ||
	    rc_line(c, l1, sizeof l1) != 0 || rc_line(c, l2, sizeof l2) != 0) {
		if (w->errors++ == 0)
			snprintf(w->redis_err, sizeof w->redis_err, "I/O: %s",
			    strerror(errno));
		return false;
	}
	if (strcmp(l1, "+OK") != 0 || strcmp(l2, ":2") != 0) {
		if (w->errors++ == 0)
			snprintf(w->redis_err, sizeof w->redis_err,
			    "unexpected replies '%.50s' '%.50s'", l1, l2);
		return false;
	}
	return true;
}

static void *worker_main(void *arg)
{
	worker *w = arg;
	for (;;) {
		const uint8_t *key = keys[(w->t + w->seq * w->nthreads) % NKEYS];
		uint64_t t0 = now_ns();
		if (t0 >= w->end)
			break;
		bool ok = op_once(w, key);
		uint64_t t1 = now_ns();
		w->seq++;
		w->ops_all++;
		if (!ok) {
			if (w->impl == IMPL_REDIS)
				break; /* the connection's state is unknown */
			continue;
		}
		if (t0 >= w->warm_end) {
			w->ops_timed++;
			w->h->b[h_idx(t1 - t0)]++;
		}
	}
	return NULL;
}

typedef struct run_acc {
	enum impl impl;
	const char *name;
	worker w[MAX_THREADS];
	hist h[MAX_THREADS];
	uint64_t ops_timed, ops_all, window_ns, errors, allocs;
	int topo_changes;
} run_acc;

static int64_t topo_version(void)
{
	int64_t v = 0;
	dg_node_info info[1];
	dg_node_topology(F.client, &v, info, 1);
	return v;
}

/* One repetition: nthreads threads, warm-up, then the window. */
static void repetition(run_acc *a, unsigned nthreads, uint64_t warm_ns,
    uint64_t window_ns)
{
	int64_t v0 = a->impl == IMPL_DATAGRID ? topo_version() : 0;
	uint64_t al0 = dg_allocs();
	uint64_t start = now_ns();
	for (unsigned t = 0; t < nthreads; t++) {
		worker *w = &a->w[t];
		w->warm_end = start + warm_ns;
		w->end = start + warm_ns + window_ns;
		w->ops_all = w->ops_timed = 0;
		if (pthread_create(&w->th, NULL, worker_main, w) != 0)
			dgb_die("pthread_create failed");
	}
	for (unsigned t = 0; t < nthreads; t++)
		pthread_join(a->w[t].th, NULL);
	a->allocs += dg_allocs() - al0;
	a->window_ns += window_ns;
	for (unsigned t = 0; t < nthreads; t++) {
		worker *w = &a->w[t];
		a->ops_timed += w->ops_timed;
		a->ops_all += w->ops_all;
	}
	if (a->impl == IMPL_DATAGRID && topo_version() != v0)
		a->topo_changes++;
}

static void fullsync_case(const dgb_opts *o, const char *name, unsigned nthreads,
    bool dg, bool redis, double *p50, double *ops)
{
	const int reps = o->quick ? 1 : 3;
	const uint64_t window = o->quick ? 500000000u : 1000000000u;
	const uint64_t warm = o->quick ? 200000000u : 300000000u;
	run_acc *acc[2] = { NULL, NULL };
	unsigned n = 0;
	if (dg)
		acc[n++] = calloc(1, sizeof(run_acc));
	if (redis)
		acc[n++] = calloc(1, sizeof(run_acc));
	for (unsigned k = 0; k < n; k++) {
		if (acc[k] == NULL)
			dgb_die("out of memory");
		acc[k]->impl = dg && k == 0 ? IMPL_DATAGRID : IMPL_REDIS;
		acc[k]->name = acc[k]->impl == IMPL_DATAGRID ? "datagrid" : "redis";
		for (unsigned t = 0; t < nthreads; t++) {
			worker *w = &acc[k]->w[t];
			w->impl = acc[k]->impl;
			w->t = t;
			w->nthreads = nthreads;
			w->h = &acc[k]->h[t];
			make_value(w->val, 0);
			if (w->impl == IMPL_REDIS)
				redis_req_init(w);
		}
	}
	/* interleaved: a burst of load from elsewhere hits one repetition of
	 * each implementation */
	for (int r = 0; r < reps; r++)
		for (unsigned k = 0; k < n; k++)
			repetition(acc[k], nthreads, warm, window);

	for (unsigned k = 0; k < n; k++) {
		run_acc *a = acc[k];
		hist *sum = calloc(1, sizeof(hist));
		if (sum == NULL)
			dgb_die("out of memory");
		const char *first_err = NULL;
		for (unsigned t = 0; t < nthreads; t++) {
			for (unsigned i = 0; i < H_NB; i++)
				sum->b[i] += a->h[t].b[i];
			a->errors += a->w[t].errors;
			if (a->w[t].errors > 0 && first_err == NULL)
				first_err = a->impl == IMPL_DATAGRID ?
				    dg_strerror(a->w[t].first_err) : a->w[t].redis_err;
		}
		cline l = { name, a->name,
			(double)a->ops_timed * 1e9 / (double)a->window_ns,
			h_pct_us(sum, 0.50), h_pct_us(sum, 0.99),
			a->impl == IMPL_DATAGRID && a->ops_all > 0 ?
			    (double)a->allocs / (double)a->ops_all : -1 };
		free(sum);
		if (a->ops_timed == 0)
			dgb_die("%s/%s: no operation completed (%llu errors; first: %s)",
			    name, a->name, (unsigned long long)a->errors,
			    first_err ? first_err : "-");
		cprint(o, &l);
		p50[k] = l.p50_us;
		ops[k] = l.ops_per_s;
		dgb_note("%s/%s: %u threads, %d x %.1f s (+ %.1f s warm-up): %llu ops "
		    "timed, %llu errors%s%s%s", name, a->name, nthreads, reps,
		    (double)window / 1e9, (double)warm / 1e9,
		    (unsigned long long)a->ops_timed, (unsigned long long)a->errors,
		    first_err ? " (first: " : "", first_err ? first_err : "",
		    first_err ? ")" : "");
		if (a->topo_changes > 0)
			dgb_note("%s/%s: the topology changed during %d repetition(s): "
			    "a node was suspected or left; numbers are suspect", name,
			    a->name, a->topo_changes);
		free(a);
	}
}

static void fullsync_cases(const dgb_opts *o)
{
	static const struct { const char *name; unsigned threads; } cases[] = {
		{ "fullsync_put_1c", 1 }, { "fullsync_put_32c", 32 },
	};
	bool dg = false, redis = false;
	for (int c = 0; c < 2; c++) {
		dg |= dgb_selected(o, cases[c].name, "datagrid");
		redis |= dgb_selected(o, cases[c].name, "redis");
	}
	if (!dg && !redis)
		return;
	const char *why;
	if (dg && !find_dgnode(o, F.dgnode, sizeof F.dgnode, &why)) {
		dgb_note("fullsync cases, datagrid: skipped: dgnode %s", why);
		dg = false;
	}
	if (redis && !find_redis(F.redis_path, sizeof F.redis_path, &why)) {
		dgb_note("fullsync cases, redis peer: skipped: %s", why);
		redis = false;
	}
	if (!dg && !redis)
		return;

	ensure_dir();
	/* every child is forked before the client node starts its threads */
	if (redis)
		redis_cluster_start();
	if (dg)
		datagrid_cluster_start();

	for (int c = 0; c < 2; c++) {
		bool cdg = dg && dgb_selected(o, cases[c].name, "datagrid");
		bool cre = redis && dgb_selected(o, cases[c].name, "redis");
		if (!cdg && !cre)
			continue;
		double p50[2] = { 0, 0 }, ops[2] = { 0, 0 };
		fullsync_case(o, cases[c].name, cases[c].threads, cdg, cre, p50, ops);
		if (cdg && cre)
			dgb_note("%s: datagrid / redis: p50 %.2fx (target <= 0.75x%s), "
			    "throughput %.2fx (target >= 1.5x%s)", cases[c].name,
			    p50[0] / p50[1], cases[c].threads == 1 ? "" : ", set for 1c",
			    ops[0] / ops[1], cases[c].threads == 32 ? "" : ", set for 32c");
	}

	if (F.client != NULL) {
		dg_node_stop(F.client);
		F.client = NULL;
		F.cache = NULL;
	}
	redis_close_conns();
	stop_children();
	remove_dir();
}

int dgb_cache_suite(const dgb_opts *o)
{
	make_keys();
	embedded_cases(o);
	fullsync_cases(o);
	remove_dir();
	return 0;
}
