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
 * in each repetition the threads (started at the first, parked between
 * repetitions) write for a warm-up (0.3 s; --quick 0.2 s) and then for the
 * timed window.  Every operation started in
 * the window is timed alone (CLOCK_MONOTONIC) into the thread's own
 * log-linear histogram (128 sub-buckets per power of two: < 0.8% error;
 * nothing allocated in the loop).  p50_us/p99_us: nearest rank over all
 * repetitions' operations (bucket midpoints); ops_per_s: operations timed /
 * window time, summed over repetitions; ns_per_op: 1e9 / ops_per_s
 * (load.h, shared with the txn suite).
 * allocs_per_op (datagrid only): dgi_alloc calls in this process (the client
 * node; the dgnode servers are not counted) per operation, warm-up included.
 *
 * Processes (children.h, clusters.h, shared with the txn suite): dgnode is
 * found by --dgnode PATH, else $DG_DGNODE, else next to dgbench (./dgnode,
 * ../node/dgnode); redis-server by $DG_REDIS_SERVER, else PATH.  Every
 * child gets PR_SET_PDEATHSIG(SIGKILL), its output goes to a log file in a
 * temporary directory (its tail is printed if it fails), and every wait is
 * bounded.  At the end and on every exit path (atexit): SIGTERM, 2 s,
 * SIGKILL, waitpid; the temporary directory is removed.
 */
#define _GNU_SOURCE
#include "harness.h"
#include "clusters.h"
#include "load.h"
#include "resp.h"
#include "datagrid.h"

#include <lmdb.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SUITE "cache"
#define KLEN 16
#define VLEN 100
#ifndef DGB_CACHE_NKEYS
#define DGB_CACHE_NKEYS 100000 /* -DDGB_CACHE_NKEYS=N: another key-set size */
#endif
#define NKEYS DGB_CACHE_NKEYS
#define STRIDE 7919u           /* odd, not a multiple of 5: a permutation */
#define MAX_THREADS DGB_LOAD_MAX_THREADS

extern unsigned dgb_own_lines;
int dgb_cache_suite(const dgb_opts *o);

#define MDB_DO(expr)                                                       \
	do {                                                                   \
		int rc_ = (expr);                                                  \
		if (__builtin_expect(rc_ != MDB_SUCCESS, 0))                       \
			dgb_die("%s:%d: %s: %s", __FILE__, __LINE__, #expr,            \
			    mdb_strerror(rc_));                                        \
	} while (0)

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
	snprintf(E.lmdb_dir, sizeof E.lmdb_dir, "%s/lmdb", dgb_tmpdir());
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
		dgb_remove_tree(E.lmdb_dir);
		E.lmdb_dir[0] = 0;
	}
}

/* ------------------------------------------------------------------------
 * persistent_put: dg_cache_put on an embedded node with a persistent cache
 * (LMDB, storage_nosync: the CPU of the write path, fsync aside), plain
 * and encrypted at rest (encryption_key_file: AES-256-GCM per record).
 * ------------------------------------------------------------------------ */
static struct pctx {
	dg_node *node;
	dg_cache *cache;
	uint8_t val[VLEN];
	uint32_t next;
} P[2];

static uint64_t p_put(void *ctx, uint64_t iters)
{
	struct pctx *p = ctx;
	for (uint64_t i = 0; i < iters; i++) {
		uint32_t k = (uint32_t)(((uint64_t)p->next * STRIDE) % NKEYS);
		if (++p->next == NKEYS)
			p->next = 0;
		p->val[0] = (uint8_t)i;
		DG_DO(dg_cache_put(p->cache, keys[k], KLEN, p->val, VLEN));
	}
	return iters;
}

static void persistent_start(struct pctx *p, int which)
{
	char cluster[64], dir[256], key[256];
	snprintf(cluster, sizeof cluster, "dgbench-persist-%d-%d", which, (int)getpid());
	snprintf(dir, sizeof dir, "%s/persist%d", dgb_tmpdir(), which);
	dg_node_config cfg;
	dg_node_config_init(&cfg);
	cfg.listen_url = "tcp://127.0.0.1:0";
	cfg.cluster_name = cluster;
	cfg.data_dir = dir;
	cfg.storage_nosync = true;
	if (which == 1) {
		snprintf(key, sizeof key, "%s/master.key", dgb_tmpdir());
		FILE *f = fopen(key, "w");
		if (f == NULL || fchmod(fileno(f), 0600) != 0)
			dgb_die("%s: %s", key, strerror(errno));
		for (int i = 0; i < 32; i++)
			fprintf(f, "%02x", (unsigned)(i * 37 + 11) & 0xff);
		fclose(f);
		cfg.encryption_key_file = key;
	}
	DG_DO(dg_node_start(&cfg, &p->node));
	dg_cache_config cc;
	dg_cache_config_init(&cc, "pbench");
	cc.backups = 0;
	cc.persistence = true;
	DG_DO(dg_cache_create(p->node, &cc, &p->cache));
	make_value(p->val, 0);
	for (unsigned i = 0; i < NKEYS; i++)
		DG_DO(dg_cache_put(p->cache, keys[i], KLEN, p->val, VLEN));
}

static void persistent_cases(const dgb_opts *o)
{
	bool sel[2] = { dgb_selected(o, "persistent_put", "datagrid"),
		dgb_selected(o, "persistent_put", "datagrid-encrypted") };
	if (!sel[0] && !sel[1])
		return;
	static const char *const impl[2] = { "datagrid", "datagrid-encrypted" };
	dgb_bench b[2];
	dgb_result r[2];
	unsigned n = 0;
	for (int i = 0; i < 2; i++) {
		if (!sel[i])
			continue;
		persistent_start(&P[i], i);
		b[n++] = (dgb_bench){ .suite = SUITE, .name = "persistent_put", .impl = impl[i],
			.run = p_put, .ctx = &P[i], .ops_per_iter = 1, .bytes = -1,
			.alloc_src = DGB_ALLOC_DG };
	}
	dgb_begin_suite(o, SUITE);
	dgb_run_group(o, b, n, r);
	if (n == 2)
		dgb_note("persistent_put: datagrid %.1f ns, datagrid-encrypted %.1f ns: "
		    "encrypted / plain = %.2fx (target <= 1.3x)", r[0].ns_per_op, r[1].ns_per_op,
		    r[1].ns_per_op / r[0].ns_per_op);
	for (int i = 0; i < 2; i++)
		if (P[i].node != NULL) {
			dg_node_stop(P[i].node);
			P[i].node = NULL;
		}
}

/* ------------------------------------------------------------------------
 * fullsync_put_Nc: the clusters and the client threads.
 * ------------------------------------------------------------------------ */
static struct fctx {
	char dgnode[PATH_MAX];
	dgb_dgcluster dg;
	dgb_redis rs;
	dgb_rconn *rc[MAX_THREADS];   /* one connection per client thread */
} F;

static void redis_open_conns(void)
{
	for (int t = 0; t < MAX_THREADS; t++) {
		F.rc[t] = calloc(1, sizeof(dgb_rconn));
		if (F.rc[t] == NULL)
			dgb_die("out of memory");
		F.rc[t]->fd = dgb_tcp_connect(F.rs.port, DGB_REDIS_IO_TIMEOUT_S);
		if (F.rc[t]->fd < 0)
			dgb_die("redis: connect to port %d: %s", F.rs.port, strerror(errno));
	}
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

enum impl { IMPL_DATAGRID, IMPL_REDIS };

/* A client thread's own state (the load keeps the counts and timings). */
typedef struct worker {
	dg_err first_err;             /* DG_OK until the first error */
	char redis_err[128];          /* "" until the first error */
	/* redis: the request, patched in place per operation */
	char req[256];
	size_t req_len, key_off, val_off;
	uint8_t val[VLEN];
} worker;

typedef struct run_acc {
	enum impl impl;
	const char *name;
	unsigned nthreads;
	worker w[MAX_THREADS];
	dgb_load *load;
	uint64_t allocs;
	int topo_changes;
} run_acc;

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

static dgb_op_res dg_put_once(worker *w, const uint8_t *key, uint64_t seq)
{
	memcpy(w->val, &seq, sizeof seq);
	dg_err e = dg_cache_put(F.dg.cache, key, KLEN, w->val, VLEN);
	if (e == DG_OK)
		return DGB_OP_OK;
	if (w->first_err == DG_OK)
		w->first_err = e;
	return DGB_OP_FAILED;
}

/* A failed Redis operation stops its thread: the connection's state is
 * unknown. */
static dgb_op_res redis_put_once(worker *w, dgb_rconn *c, const uint8_t *key,
    uint64_t seq)
{
	char l1[128], l2[128];
	memcpy(w->req + w->key_off, key, KLEN);
	memcpy(w->req + w->val_off, &seq, sizeof seq);
	if (dgb_send_full(c->fd, w->req, w->req_len) != 0 ||
	    dgb_rc_line(c, l1, sizeof l1) != 0 || dgb_rc_line(c, l2, sizeof l2) != 0) {
		if (w->redis_err[0] == 0)
			snprintf(w->redis_err, sizeof w->redis_err, "I/O: %s",
			    strerror(errno));
		return DGB_OP_STOP;
	}
	if (strcmp(l1, "+OK") != 0 || strcmp(l2, ":2") != 0) {
		if (w->redis_err[0] == 0)
			snprintf(w->redis_err, sizeof w->redis_err,
			    "unexpected replies '%.50s' '%.50s'", l1, l2);
		return DGB_OP_STOP;
	}
	return DGB_OP_OK;
}

/* The load's operation: thread t writes keys t, t+T, t+2T, ... */
static dgb_op_res put_op(void *ctx, unsigned t, uint64_t seq)
{
	run_acc *a = ctx;
	const uint8_t *key = keys[(t + seq * a->nthreads) % NKEYS];
	if (a->impl == IMPL_DATAGRID)
		return dg_put_once(&a->w[t], key, seq);
	return redis_put_once(&a->w[t], F.rc[t], key, seq);
}

static run_acc *run_acc_new(enum impl impl, unsigned nthreads)
{
	run_acc *a = calloc(1, sizeof *a);
	if (a == NULL)
		dgb_die("out of memory");
	a->impl = impl;
	a->name = impl == IMPL_DATAGRID ? "datagrid" : "redis";
	a->nthreads = nthreads;
	a->load = dgb_load_new(put_op, a, nthreads);
	for (unsigned t = 0; t < nthreads; t++) {
		make_value(a->w[t].val, 0);
		if (impl == IMPL_REDIS)
			redis_req_init(&a->w[t]);
	}
	return a;
}

/* One repetition: the threads' warm-up, then the window. */
static void repetition(run_acc *a, uint64_t warm_ns, uint64_t window_ns)
{
	int64_t v0 = a->impl == IMPL_DATAGRID ? dgb_dgcluster_topo_version(&F.dg) : 0;
	uint64_t al0 = dg_allocs();
	dgb_load_rep(a->load, warm_ns, window_ns, NULL, NULL);
	a->allocs += dg_allocs() - al0;
	if (a->impl == IMPL_DATAGRID && dgb_dgcluster_topo_version(&F.dg) != v0)
		a->topo_changes++;
}

/* Prints a's line and notes; its p50 and ops/s into *p50, *ops. */
static void report_acc(const dgb_opts *o, const char *name, run_acc *a,
    uint64_t warm, uint64_t window, double *p50, double *ops)
{
	dgb_load *l = a->load;
	const char *first_err = NULL;
	for (unsigned t = 0; t < a->nthreads && first_err == NULL; t++)
		if (a->impl == IMPL_DATAGRID && a->w[t].first_err != DG_OK)
			first_err = dg_strerror(a->w[t].first_err);
		else if (a->impl == IMPL_REDIS && a->w[t].redis_err[0] != 0)
			first_err = a->w[t].redis_err;
	if (l->ops_timed == 0)
		dgb_die("%s/%s: no operation completed (%llu errors; first: %s)",
		    name, a->name, (unsigned long long)l->failed,
		    first_err ? first_err : "-");
	uint64_t ops_all = l->ops_ok + l->failed;
	cline line = { name, a->name, dgb_load_ops_per_s(l),
		dgb_load_pct_us(l, 0.50), dgb_load_pct_us(l, 0.99),
		a->impl == IMPL_DATAGRID ? (double)a->allocs / (double)ops_all : -1 };
	cprint(o, &line);
	*p50 = line.p50_us;
	*ops = line.ops_per_s;
	dgb_note("%s/%s: %u threads, %d x %.1f s (+ %.1f s warm-up): %llu ops "
	    "timed, %llu errors%s%s%s", name, a->name, a->nthreads, l->reps,
	    (double)window / 1e9, (double)warm / 1e9,
	    (unsigned long long)l->ops_timed, (unsigned long long)l->failed,
	    first_err ? " (first: " : "", first_err ? first_err : "",
	    first_err ? ")" : "");
	if (a->topo_changes > 0)
		dgb_note("%s/%s: the topology changed during %d repetition(s): "
		    "a node was suspected or left; numbers are suspect", name,
		    a->name, a->topo_changes);
}

static void fullsync_case(const dgb_opts *o, const char *name, unsigned nthreads,
    bool dg, bool redis, double *p50, double *ops)
{
	const int reps = o->quick ? 1 : 3;
	const uint64_t window = o->quick ? 500000000u : 1000000000u;
	const uint64_t warm = o->quick ? 200000000u : 300000000u;
	run_acc *acc[2];
	unsigned n = 0;
	if (dg)
		acc[n++] = run_acc_new(IMPL_DATAGRID, nthreads);
	if (redis)
		acc[n++] = run_acc_new(IMPL_REDIS, nthreads);
	/* interleaved: a burst of load from elsewhere hits one repetition of
	 * each implementation */
	for (int r = 0; r < reps; r++)
		for (unsigned k = 0; k < n; k++)
			repetition(acc[k], warm, window);
	for (unsigned k = 0; k < n; k++) {
		report_acc(o, name, acc[k], warm, window, &p50[k], &ops[k]);
		dgb_load_free(acc[k]->load);
		free(acc[k]);
	}
}

static void fullsync_start(bool dg, bool redis)
{
	/* every child is forked before the client node starts its threads */
	if (redis) {
		dgb_redis_start(&F.rs, "fullsync/redis");
		redis_open_conns();
	}
	if (dg) {
		dgb_dgcluster_start(&F.dg, F.dgnode, SUITE,
		    "bench,backups=2,sync=full_sync", "fullsync/datagrid");
		const dg_cache_config *cc = dg_cache_config_of(F.dg.cache);
		if (cc->backups != 2 || cc->write_sync != DG_FULL_SYNC)
			dgb_die("cache 'bench': backups %u, write_sync %d", cc->backups,
			    (int)cc->write_sync);
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
	if (dg && !dgb_find_dgnode(o, F.dgnode, sizeof F.dgnode, &why)) {
		dgb_note("fullsync cases, datagrid: skipped: dgnode %s", why);
		dg = false;
	}
	if (redis && !dgb_find_redis(F.rs.path, sizeof F.rs.path, &why)) {
		dgb_note("fullsync cases, redis peer: skipped: %s", why);
		redis = false;
	}
	if (!dg && !redis)
		return;
	fullsync_start(dg, redis);

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

	dgb_dgcluster_stop(&F.dg);
	redis_close_conns();
	dgb_children_stop();
	dgb_tmpdir_remove();
}

int dgb_cache_suite(const dgb_opts *o)
{
	make_keys();
	embedded_cases(o);
	persistent_cases(o);
	fullsync_cases(o);
	dgb_tmpdir_remove();
	return 0;
}
