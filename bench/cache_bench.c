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
 *   embedded_get_10k, embedded_get_1m, embedded_put_10k, embedded_put_1m,
 *   memory_per_entry
 *                  issue 16, entries in memory (bench/embedded_bench.c,
 *                  whose comment has the details): 10,000 and 1,000,000
 *                  keys of the same 16/100-byte shape, loaded, put and got
 *                  in three independent pseudo-random orders; impls
 *                  datagrid (an embedded single node, as above), hash (a
 *                  minimal open-addressing table, bench/hashtab.c: the
 *                  floor) and lmdb; memory_per_entry's bytes: RSS growth
 *                  per entry over the 1M load.  --quick skips the 1M key set
 *                  (memory_per_entry is then measured over the 10k load).
 *   fullsync_put_1c, fullsync_put_8c, fullsync_put_32c, fullsync_put_128c
 *                  1, 8, 32 and 128 client threads writing for a fixed
 *                  time.
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
 *   put_all_100, get_all_100
 *                  one client thread; one operation is one batch of 100
 *                  keys: batch b is the keys at positions 100b .. 100b+99
 *                  of the scrambled order, so each batch spreads over all
 *                  three primaries (stderr shows the first batch's split).
 *                  The same cluster and cache as fullsync.
 *                  datagrid: dg_cache_put_all / dg_cache_get_all of the
 *                  100 keys (every key in flight at once: cache/batch.c);
 *                  datagrid-single: the same 100 keys as 100 dg_cache_put
 *                  / dg_cache_get calls one after another; redis: "MSET k1
 *                  v1 ... k100 v100" and "WAIT 2 0" in one send() (+OK,
 *                  :2), and "MGET k1 ... k100" (100 bulk strings).  A put
 *                  batch writes one 100-byte value, stamped with the batch
 *                  number, to all its keys.  Every key of the set is
 *                  written before these cases (put_all batches on
 *                  datagrid, MSET batches + WAIT 2 on Redis), so a put
 *                  replaces and a get finds its keys; a key missing fails
 *                  its batch.
 *                  heap_bytes_per_op and allocs_per_op (datagrid lines):
 *                  dgi_alloc bytes and calls during the timed windows on
 *                  every node (this process and the 3 dgnodes, as the txn
 *                  suite counts them: SIGUSR1, ALLOC-STATS) per batch.
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
 * allocs_per_op (datagrid only, fullsync_put_*): dgi_alloc calls in this
 * process (the client node; the dgnode servers are not counted) per
 * operation, warm-up included.
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
	double heap_bytes_per_op;   /* < 0: not reported */
} cline;

static bool table_header_done;

static void cprint(const dgb_opts *o, const cline *l)
{
	double ns = l->ops_per_s > 0 ? 1e9 / l->ops_per_s : 0;
	if (o->json) {
		printf("{\"suite\":\"%s\",\"case\":\"%s\",\"impl\":\"%s\",\"ns_per_op\":"
		    "%.1f,\"ops_per_s\":%.0f,\"p50_us\":%.1f,\"p99_us\":%.1f", SUITE,
		    l->name, l->impl, ns, l->ops_per_s, l->p50_us, l->p99_us);
		if (l->heap_bytes_per_op >= 0)
			printf(",\"heap_bytes_per_op\":%.1f", l->heap_bytes_per_op);
		if (l->allocs_per_op >= 0)
			printf(",\"allocs_per_op\":%.6g", l->allocs_per_op);
		printf("}\n");
	} else {
		char allocs[32], heap[32];
		if (!table_header_done) {
			printf("\nsuite %s, FULL_SYNC, 3 dgnodes, 2 backups (%s)\n", SUITE,
			    o->quick ? "quick" : "full");
			printf("%-18s %-15s %12s %10s %9s %9s %10s %10s\n", "case", "impl",
			    "ns/op", "ops/s", "p50_us", "p99_us", "allocs/op", "heap_B/op");
			table_header_done = true;
		}
		snprintf(allocs, sizeof allocs, l->allocs_per_op >= 0 ? "%.4g" : "n/a",
		    l->allocs_per_op);
		snprintf(heap, sizeof heap, l->heap_bytes_per_op >= 0 ? "%.1f" : "n/a",
		    l->heap_bytes_per_op);
		printf("%-18s %-15s %12.1f %10.0f %9.1f %9.1f %10s %10s\n", l->name,
		    l->impl, ns, l->ops_per_s, l->p50_us, l->p99_us, allocs, heap);
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
	if (l->ops_timed == 0 && a->impl == IMPL_DATAGRID)
		for (unsigned i = 0; i < DGB_NSERVERS; i++) /* (what the servers said) */
			if (F.dg.server[i] != NULL)
				dgb_child_log_tail(F.dg.server[i]);
	if (l->ops_timed == 0)
		dgb_die("%s/%s: no operation completed (%llu errors; first: %s)",
		    name, a->name, (unsigned long long)l->failed,
		    first_err ? first_err : "-");
	uint64_t ops_all = l->ops_ok + l->failed;
	cline line = { name, a->name, dgb_load_ops_per_s(l),
		dgb_load_pct_us(l, 0.50), dgb_load_pct_us(l, 0.99),
		a->impl == IMPL_DATAGRID ? (double)a->allocs / (double)ops_all : -1,
		-1 };
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

static const struct fcase {
	const char *name;
	unsigned threads;
} fcases[] = {
	{ "fullsync_put_1c", 1 }, { "fullsync_put_8c", 8 },
	{ "fullsync_put_32c", 32 }, { "fullsync_put_128c", 128 },
};
#define NFCASES (sizeof fcases / sizeof fcases[0])

static void fullsync_cases(const dgb_opts *o, bool dg, bool redis)
{
	for (unsigned c = 0; c < NFCASES; c++) {
		bool cdg = dg && dgb_selected(o, fcases[c].name, "datagrid");
		bool cre = redis && dgb_selected(o, fcases[c].name, "redis");
		if (!cdg && !cre)
			continue;
		unsigned t = fcases[c].threads;
		double p50[2] = { 0, 0 }, ops[2] = { 0, 0 };
		fullsync_case(o, fcases[c].name, t, cdg, cre, p50, ops);
		if (cdg && cre)
			dgb_note("%s: datagrid / redis: p50 %.2fx (target <= 0.75x%s), "
			    "throughput %.2fx (%s)", fcases[c].name, p50[0] / p50[1],
			    t == 1 ? "" : ", set for 1c", ops[0] / ops[1],
			    t == 32 ? "target >= 1.5x" : t == 128 ? "target >= 2.5x" :
			    "targets set for 32c and 128c");
	}
}

/* ------------------------------------------------------------------------
 * put_all_100 / get_all_100: one thread, one operation = one batch of
 * BATCH keys, on the fullsync clusters.
 * ------------------------------------------------------------------------ */
#define BATCH 100

enum bimpl { B_DG, B_DG_SINGLE, B_REDIS, B_NIMPL };
static const char *const bimpl_name[B_NIMPL] = { "datagrid", "datagrid-single",
	"redis" };
static const char *const bcase_name[2] = { "put_all_100", "get_all_100" };

/* Heap counters of every datagrid node now: this process, then the
 * dgnodes (servers false if one did not answer). */
typedef struct heapsnap {
	uint64_t allocs, bytes, client_allocs, client_bytes;
	bool servers;
} heapsnap;

static heapsnap heap_now(void)
{
	heapsnap h = { 0, 0, 0, 0, false };
	dgi_alloc_stats st;
	uint64_t sa = 0, sb = 0;
	dgi_alloc_get_stats(&st);
	h.servers = dgb_dgcluster_alloc_stats(&F.dg, &sa, &sb);
	h.client_allocs = st.allocs;
	h.client_bytes = st.bytes;
	h.allocs = st.allocs + sa;
	h.bytes = st.bytes + sb;
	return h;
}

/* One (case, implementation): its thread's state and what the repetitions
 * add. */
typedef struct bacc {
	enum bimpl impl;
	bool get;                     /* get_all_100, else put_all_100 */
	const char *name;             /* the case */
	dgb_load *load;
	dg_err first_err;             /* datagrid: DG_OK until the first error */
	char redis_err[128];          /* redis: why the thread stopped */
	uint64_t missing;             /* get: keys not found */
	dg_kv kv[BATCH];
	dg_buf vals;                  /* get: the values read */
	uint8_t val[VLEN];            /* put: every key's value */
	/* redis: the request, keys and values patched in place per batch */
	char *req;
	size_t req_len, key_off[BATCH], val_off[BATCH];
	char reply[VLEN + 16];
	/* datagrid: heap over the windows, every node and this process */
	uint64_t allocs, bytes, client_allocs, client_bytes;
	bool servers_counted;         /* every repetition had the dgnodes' lines */
	int topo_changes;
	heapsnap w0;                  /* at the start of the current window */
} bacc;

/* Key j of batch b: positions 100b .. 100b+99 of the scrambled order. */
static inline const uint8_t *batch_key(uint64_t b, unsigned j)
{
	uint64_t pos = (b * BATCH + j) % NKEYS;
	return keys[(pos * STRIDE) % NKEYS];
}

/* "MSET k v ... k v" + "WAIT 2 0", or "MGET k ... k", with the offsets of
 * every key and value in it. */
static void redis_batch_init(bacc *a)
{
	static const char wait[] = "*3\r\n$4\r\nWAIT\r\n$1\r\n2\r\n$1\r\n0\r\n";
	size_t cap = 64 + (size_t)BATCH * (KLEN + VLEN + 32) + sizeof wait, n;
	char *r = malloc(cap);
	if (r == NULL)
		dgb_die("out of memory");
	n = (size_t)snprintf(r, cap, "*%d\r\n$4\r\n%s\r\n", 1 + BATCH * (a->get ? 1 : 2),
	    a->get ? "MGET" : "MSET");
	for (unsigned j = 0; j < BATCH; j++) {
		n += (size_t)snprintf(r + n, cap - n, "$%d\r\n", KLEN);
		a->key_off[j] = n;
		memcpy(r + n, batch_key(0, j), KLEN);
		memcpy(r + n + KLEN, "\r\n", 2);
		n += KLEN + 2;
		if (a->get)
			continue;
		n += (size_t)snprintf(r + n, cap - n, "$%d\r\n", VLEN);
		a->val_off[j] = n;
		make_value((uint8_t *)r + n, 0);
		memcpy(r + n + VLEN, "\r\n", 2);
		n += VLEN + 2;
	}
	if (!a->get) {
		memcpy(r + n, wait, sizeof wait - 1);
		n += sizeof wait - 1;
	}
	a->req = r;
	a->req_len = n;
}

static dgb_op_res b_failed(bacc *a, dg_err e)
{
	if (a->first_err == DG_OK)
		a->first_err = e;
	return DGB_OP_FAILED;
}

/* An I/O error or an unexpected reply stops the thread: the connection's
 * state is unknown. */
static dgb_op_res b_redis_stop(bacc *a, const char *what)
{
	if (a->redis_err[0] == 0)
		snprintf(a->redis_err, sizeof a->redis_err, "%s: %s '%.40s'", what,
		    errno != 0 ? strerror(errno) : "unexpected reply", a->reply);
	return DGB_OP_STOP;
}

static dgb_op_res redis_batch(bacc *a, dgb_rconn *c, uint64_t b)
{
	for (unsigned j = 0; j < BATCH; j++) {
		memcpy(a->req + a->key_off[j], batch_key(b, j), KLEN);
		if (!a->get)
			memcpy(a->req + a->val_off[j], &b, sizeof b);
	}
	errno = 0;
	a->reply[0] = 0;
	if (dgb_send_full(c->fd, a->req, a->req_len) != 0)
		return b_redis_stop(a, "send");
	if (!a->get) {
		if (dgb_rc_reply(c, a->reply, sizeof a->reply, NULL) != '+')
			return b_redis_stop(a, "MSET");
		if (dgb_rc_reply(c, a->reply, sizeof a->reply, NULL) != ':' ||
		    strcmp(a->reply, "2") != 0)
			return b_redis_stop(a, "WAIT 2 0");
		return DGB_OP_OK;
	}
	if (dgb_rc_reply(c, a->reply, sizeof a->reply, NULL) != '*' ||
	    atoi(a->reply) != BATCH)
		return b_redis_stop(a, "MGET");
	bool miss = false;
	for (unsigned j = 0; j < BATCH; j++) {
		int nil;
		if (dgb_rc_reply(c, a->reply, sizeof a->reply, &nil) != '$')
			return b_redis_stop(a, "MGET value");
		if (nil) {
			a->missing++;
			miss = true;
		}
	}
	return miss ? DGB_OP_FAILED : DGB_OP_OK;
}

/* The load's operation: batch `seq`. */
static dgb_op_res batch_op(void *ctx, unsigned t, uint64_t seq)
{
	bacc *a = ctx;
	dg_err e;
	(void)t;
	if (a->impl == B_REDIS)
		return redis_batch(a, F.rc[0], seq);
	memcpy(a->val, &seq, sizeof seq);
	dg_buf_reset(&a->vals);
	if (a->impl == B_DG) {
		size_t found = 0;
		for (unsigned j = 0; j < BATCH; j++)
			a->kv[j] = (dg_kv){ batch_key(seq, j), KLEN, a->val, VLEN };
		if (!a->get) {
			e = dg_cache_put_all(F.dg.cache, a->kv, BATCH);
			return e == DG_OK ? DGB_OP_OK : b_failed(a, e);
		}
		e = dg_cache_get_all(F.dg.cache, a->kv, BATCH, &a->vals, &found);
		if (e != DG_OK)
			return b_failed(a, e);
		a->missing += BATCH - found;
		return found == BATCH ? DGB_OP_OK : DGB_OP_FAILED;
	}
	bool miss = false;
	for (unsigned j = 0; j < BATCH; j++) {
		const uint8_t *k = batch_key(seq, j);
		e = a->get ? dg_cache_get(F.dg.cache, k, KLEN, &a->vals) :
		    dg_cache_put(F.dg.cache, k, KLEN, a->val, VLEN);
		if (e == DG_ERR_NOT_FOUND && a->get) {
			a->missing++;
			miss = true;
		} else if (e != DG_OK) {
			return b_failed(a, e);
		}
	}
	return miss ? DGB_OP_FAILED : DGB_OP_OK;
}

static bacc *bacc_new(enum bimpl impl, bool get)
{
	bacc *a = calloc(1, sizeof *a);
	if (a == NULL)
		dgb_die("out of memory");
	a->impl = impl;
	a->get = get;
	a->name = bcase_name[get];
	a->servers_counted = true;
	dg_buf_init(&a->vals);
	make_value(a->val, 0);
	if (impl == B_REDIS)
		redis_batch_init(a);
	a->load = dgb_load_new(batch_op, a, 1);
	return a;
}

static void bacc_free(bacc *a)
{
	dgb_load_free(a->load);   /* the thread first: it uses the buffers */
	dg_buf_free(&a->vals);
	free(a->req);
	free(a);
}

static void b_window_start(void *arg)
{
	bacc *a = arg;
	a->w0 = heap_now();
}

static void b_repetition(bacc *a, uint64_t warm_ns, uint64_t window_ns)
{
	if (a->impl == B_REDIS) {
		dgb_load_rep(a->load, warm_ns, window_ns, NULL, NULL);
		return;
	}
	int64_t v0 = dgb_dgcluster_topo_version(&F.dg);
	dgb_load_rep(a->load, warm_ns, window_ns, b_window_start, a);
	heapsnap h0 = a->w0, h1 = heap_now();
	a->allocs += h1.allocs - h0.allocs;
	a->bytes += h1.bytes - h0.bytes;
	a->client_allocs += h1.client_allocs - h0.client_allocs;
	a->client_bytes += h1.client_bytes - h0.client_bytes;
	a->servers_counted &= h0.servers && h1.servers;
	if (dgb_dgcluster_topo_version(&F.dg) != v0)
		a->topo_changes++;
}

static void b_report(const dgb_opts *o, bacc *a, uint64_t warm, uint64_t window,
    double *p50, double *ops)
{
	dgb_load *l = a->load;
	const char *impl = bimpl_name[a->impl];
	const char *first_err = a->impl == B_REDIS ?
	    (a->redis_err[0] != 0 ? a->redis_err : NULL) :
	    (a->first_err != DG_OK ? dg_strerror(a->first_err) : NULL);
	if (l->ops_timed == 0)
		dgb_die("%s/%s: no batch completed (%llu failed, %llu keys missing; "
		    "first error: %s)", a->name, impl, (unsigned long long)l->failed,
		    (unsigned long long)a->missing, first_err ? first_err : "-");
	bool heap = a->impl != B_REDIS && a->servers_counted;
	double n = (double)l->ops_timed;
	cline line = { a->name, impl, dgb_load_ops_per_s(l),
		dgb_load_pct_us(l, 0.50), dgb_load_pct_us(l, 0.99),
		heap ? (double)a->allocs / n : -1, heap ? (double)a->bytes / n : -1 };
	cprint(o, &line);
	*p50 = line.p50_us;
	*ops = line.ops_per_s;
	dgb_note("%s/%s: 1 thread, %d x %.1f s (+ %.1f s warm-up): %llu batches "
	    "of %d keys timed, %llu failed, %llu keys missing%s%s%s", a->name, impl,
	    l->reps, (double)window / 1e9, (double)warm / 1e9,
	    (unsigned long long)l->ops_timed, BATCH, (unsigned long long)l->failed,
	    (unsigned long long)a->missing, first_err ? " (first error: " : "",
	    first_err ? first_err : "", first_err ? ")" : "");
	if (heap)
		dgb_note("%s/%s: per batch over all nodes: heap %.1f B, %.3f "
		    "allocations; client node %.1f B, %.3f; 3 dgnodes %.1f B, %.3f",
		    a->name, impl, line.heap_bytes_per_op, line.allocs_per_op,
		    (double)a->client_bytes / n, (double)a->client_allocs / n,
		    (double)(a->bytes - a->client_bytes) / n,
		    (double)(a->allocs - a->client_allocs) / n);
	else if (a->impl != B_REDIS)
		dgb_note("%s/%s: heap_bytes_per_op not reported: a dgnode did not "
		    "log ALLOC-STATS", a->name, impl);
	if (a->topo_changes > 0)
		dgb_note("%s/%s: the topology changed during %d repetition(s): a node "
		    "was suspected or left; numbers are suspect", a->name, impl,
		    a->topo_changes);
}

/* How batch 0's keys spread over the primaries (the client's affinity),
 * on stderr.  The raw API stores a key as one encoded BYTES value: the
 * same bytes are hashed here. */
static void note_batch_split(void)
{
	uint64_t prim[BATCH];
	unsigned cnt[BATCH], np = 0, unknown = 0;
	dg_buf kb;
	dg_buf_init(&kb);
	for (unsigned j = 0; j < BATCH; j++) {
		dg_writer w;
		const uint8_t *p;
		size_t len;
		uint64_t hash, own[DGI_OWNERS_BUF];
		int64_t tv;
		dg_buf_reset(&kb);
		dg_writer_init(&w, dg_node_registry(F.dg.client), &kb);
		dg_write_bytes(&w, batch_key(0, j), KLEN);
		if (dg_writer_finish(&w) != DG_OK ||
		    dg_bytes_of(kb.data, kb.len, &p, &len) != DG_OK || len != KLEN) {
			unknown++;
			continue;
		}
		uint32_t part = dgi_cache_key_part(F.dg.cache, kb.data, kb.len, &hash);
		if (dgi_cache_owners(F.dg.cache, part, own, DGI_OWNERS_BUF, &tv) == 0) {
			unknown++;
			continue;
		}
		unsigned i = 0;
		while (i < np && prim[i] != own[0])
			i++;
		if (i == np) {
			prim[np] = own[0];
			cnt[np++] = 0;
		}
		cnt[i]++;
	}
	dg_buf_free(&kb);
	char split[128] = "";
	size_t at = 0;
	for (unsigned i = 0; i < np && at < sizeof split; i++)
		at += (size_t)snprintf(split + at, sizeof split - at, "%s%u",
		    i > 0 ? " / " : "", cnt[i]);
	dgb_note("batch cases: batch 0's %d keys over %u primaries: %s%s", BATCH,
	    np, split, unknown > 0 ? " (some keys' owners unknown)" : "");
}

/* Every key of the set written before the batch cases, so that a put
 * replaces (as embedded_put's) and a get finds its key: datagrid in
 * put_all batches, Redis in MSET batches and then WAIT 2. */
static void batch_prefill(bool dg, bool redis)
{
	static const char *argv[1 + 2 * BATCH];
	static size_t len[1 + 2 * BATCH];
	static dg_kv kv[BATCH];
	uint8_t val[VLEN];
	make_value(val, 0);
	uint64_t t0 = dgb_now_ns();
	if (dg) {
		for (unsigned k0 = 0; k0 < NKEYS; k0 += BATCH) {
			unsigned m = NKEYS - k0 < BATCH ? NKEYS - k0 : BATCH;
			for (unsigned j = 0; j < m; j++)
				kv[j] = (dg_kv){ keys[k0 + j], KLEN, val, VLEN };
			DG_DO(dg_cache_put_all(F.dg.cache, kv, m));
		}
		dgb_note("batch cases, datagrid: %d keys written in %.0f ms (put_all)",
		    NKEYS, (double)(dgb_now_ns() - t0) / 1e6);
	}
	if (redis) {
		dgb_rconn *c = F.rc[0];
		char reply[64];
		size_t cap = 64 + (size_t)BATCH * (KLEN + VLEN + 32);
		char *req = malloc(cap);
		if (req == NULL)
			dgb_die("out of memory");
		t0 = dgb_now_ns();
		argv[0] = "MSET";
		len[0] = 4;
		for (unsigned k0 = 0; k0 < NKEYS; k0 += BATCH) {
			unsigned m = NKEYS - k0 < BATCH ? NKEYS - k0 : BATCH;
			size_t n = 0;
			errno = 0;
			reply[0] = 0;
			for (unsigned j = 0; j < m; j++) {
				argv[1 + 2 * j] = (const char *)keys[k0 + j];
				len[1 + 2 * j] = KLEN;
				argv[2 + 2 * j] = (const char *)val;
				len[2 + 2 * j] = VLEN;
			}
			if (dgb_resp_append(req, cap, &n, 1 + 2 * (int)m, argv, len) != 0 ||
			    dgb_send_full(c->fd, req, n) != 0 ||
			    dgb_rc_reply(c, reply, sizeof reply, NULL) != '+')
				dgb_die("redis: MSET of keys %u..: %s", k0,
				    errno != 0 ? strerror(errno) : reply);
		}
		free(req);
		const char *wait[] = { "WAIT", "2", "5000" };
		if (dgb_rc_cmd(c, reply, sizeof reply, 3, wait) != ':' ||
		    strcmp(reply, "2") != 0)
			dgb_die("redis: WAIT after MSET: '%s'", reply);
		dgb_note("batch cases, redis: %d keys written in %.0f ms (MSET, WAIT 2)",
		    NKEYS, (double)(dgb_now_ns() - t0) / 1e6);
	}
}

static void batch_case(const dgb_opts *o, bool get, const bool sel[B_NIMPL])
{
	const int reps = o->quick ? 1 : 3;
	const uint64_t window = o->quick ? 500000000u : 1000000000u;
	const uint64_t warm = o->quick ? 200000000u : 300000000u;
	bacc *acc[B_NIMPL];
	double p50[B_NIMPL] = { 0 }, ops[B_NIMPL] = { 0 };
	unsigned n = 0;
	for (int i = 0; i < B_NIMPL; i++)
		if (sel[i])
			acc[n++] = bacc_new((enum bimpl)i, get);
	/* interleaved, as the fullsync cases */
	for (int r = 0; r < reps; r++)
		for (unsigned k = 0; k < n; k++)
			b_repetition(acc[k], warm, window);
	for (unsigned k = 0; k < n; k++) {
		b_report(o, acc[k], warm, window, &p50[acc[k]->impl],
		    &ops[acc[k]->impl]);
		bacc_free(acc[k]);
	}
	const char *name = bcase_name[get];
	if (sel[B_DG] && sel[B_DG_SINGLE])
		dgb_note("%s: datagrid / datagrid-single: throughput %.2fx, p50 "
		    "%.3fx (%s)", name, ops[B_DG] / ops[B_DG_SINGLE],
		    p50[B_DG] / p50[B_DG_SINGLE],
		    get ? "no target" : "target: >= 10x faster");
	if (sel[B_DG] && sel[B_REDIS])
		dgb_note("%s: datagrid / redis: throughput %.2fx, p50 %.2fx (%s)", name,
		    ops[B_DG] / ops[B_REDIS], p50[B_DG] / p50[B_REDIS],
		    get ? "no target" : "target: throughput >= 1x");
}

static void batch_cases(const dgb_opts *o, bool dg, bool redis)
{
	bool sel[2][B_NIMPL], any[2] = { false, false };
	for (int c = 0; c < 2; c++) {
		sel[c][B_DG] = dg && dgb_selected(o, bcase_name[c], "datagrid");
		sel[c][B_DG_SINGLE] = dg && dgb_selected(o, bcase_name[c],
		    "datagrid-single");
		sel[c][B_REDIS] = redis && dgb_selected(o, bcase_name[c], "redis");
		any[c] = sel[c][B_DG] || sel[c][B_DG_SINGLE] || sel[c][B_REDIS];
	}
	if (!any[0] && !any[1])
		return;
	bool pdg = false, pre = false;
	for (int c = 0; c < 2; c++) {
		pdg |= sel[c][B_DG] || sel[c][B_DG_SINGLE];
		pre |= sel[c][B_REDIS];
	}
	if (pdg)
		note_batch_split();
	batch_prefill(pdg, pre);
	if (any[0])
		batch_case(o, false, sel[0]);
	if (any[1])
		batch_case(o, true, sel[1]);
}

/* The cases on the 3-dgnode cluster and the Redis trio: fullsync_put_*,
 * then put_all_100 and get_all_100. */
static void cluster_cases(const dgb_opts *o)
{
	bool dg = false, redis = false;
	for (unsigned c = 0; c < NFCASES; c++) {
		dg |= dgb_selected(o, fcases[c].name, "datagrid");
		redis |= dgb_selected(o, fcases[c].name, "redis");
	}
	for (int c = 0; c < 2; c++) {
		dg |= dgb_selected(o, bcase_name[c], "datagrid") ||
		    dgb_selected(o, bcase_name[c], "datagrid-single");
		redis |= dgb_selected(o, bcase_name[c], "redis");
	}
	if (!dg && !redis)
		return;
	const char *why;
	if (dg && !dgb_find_dgnode(o, F.dgnode, sizeof F.dgnode, &why)) {
		dgb_note("fullsync and batch cases, datagrid: skipped: dgnode %s", why);
		dg = false;
	}
	if (redis && !dgb_find_redis(F.rs.path, sizeof F.rs.path, &why)) {
		dgb_note("fullsync and batch cases, redis peer: skipped: %s", why);
		redis = false;
	}
	if (!dg && !redis)
		return;
	fullsync_start(dg, redis);

	fullsync_cases(o, dg, redis);
	batch_cases(o, dg, redis);

	dgb_dgcluster_stop(&F.dg);
	redis_close_conns();
	dgb_children_stop();
	dgb_tmpdir_remove();
}

int dgb_cache_suite(const dgb_opts *o)
{
	make_keys();
	embedded_cases(o);
	dgb_cache_entries_cases(o);
	persistent_cases(o);
	cluster_cases(o);
	dgb_tmpdir_remove();
	return 0;
}
