/*
 * embedded_bench.c — the cache suite's entries-in-memory cases (issue 16):
 * one embedded store in this process, 16-byte keys, 100-byte values, at
 * 10,000 and 1,000,000 keys, for three implementations measured in the
 * same run (the harness interleaves their repetitions):
 *
 *   datagrid  an embedded single node as embedded_put/embedded_get use it
 *             (dg_node_config_init defaults, listen tcp://127.0.0.1:0, one
 *             PARTITIONED cache, 0 backups): dg_cache_put, and
 *             dg_cache_get into a reused dg_buf (the value copied out);
 *   hash      the floor: hashtab.h, a minimal open-addressing table
 *             (linear probing, 16-byte slots of hash + entry pointer,
 *             one malloc per entry, load factor <= 3/4, doubling), the
 *             value memcpy'd out into a caller buffer;
 *   lmdb      an environment with MDB_NOSYNC and a 1 GiB map in the suite's
 *             temporary directory (removed afterwards): a get is
 *             mdb_txn_renew + mdb_get + copy out + mdb_txn_reset on one
 *             read transaction handle; a put one write transaction
 *             (begin, mdb_put, commit); the load writes batches of 10,000
 *             puts per write transaction.
 *
 * Keys are "bench-key-NNNNNN" (16 bytes, no terminator), keys 0..N-1 for
 * every implementation.  Each key set has three independent pseudo-random
 * permutations of its keys (splitmix64 + Fisher-Yates, fixed seeds): one
 * for the load, one for the puts, one for the gets — an insertion-ordered
 * or sequential walk would flatter every table.  Each implementation walks
 * the put and get orders from its own position, wrapping around.
 *
 * Cases:
 *   embedded_get_10k, embedded_get_1m
 *             N keys loaded (in the load order), then gets of existing
 *             keys in the get order; every get checks the value's length.
 *   embedded_put_10k, embedded_put_1m
 *             N keys loaded, then puts in the put order, each overwriting
 *             an existing key with a new 100-byte value (its first 8 bytes
 *             a counter).
 *             get and put: harness rows (best of 5 repetitions of ~100 ms,
 *             3 of ~20 ms with --quick); allocs_per_op datagrid: dgi_alloc
 *             calls, hash and lmdb: malloc calls (process-wide).
 *   memory_per_entry
 *             measured while the 1M stores load (one after another:
 *             datagrid, hash, lmdb): bytes = growth of the process's
 *             resident set (VmRSS, /proc/self/status) over the load / N.
 *             malloc_trim(0) runs before the first reading and before the
 *             second, so free malloc memory (a table's old arrays after a
 *             doubling, LMDB's freed pages) counts for no one and a store
 *             cannot fill another's free chunks; stderr gives the growth
 *             without the second trim too, the split into anonymous and
 *             file-backed pages, and malloc's bytes in use (mallinfo2).
 *             datagrid: the node's growth in this process (entries,
 *             partition tables; the node was started before the first
 *             reading).  hash: the table and its entries.  lmdb: what its
 *             load adds to the process's RSS — pages of the file-backed
 *             map this process touched (RssFile: the B-tree pages its puts
 *             read through the map) plus LMDB's malloc'd dirty pages
 *             (RssAnon); stderr also gives the data file's used pages per
 *             entry, which is what it holds whether mapped in or not.
 *             ns_per_op: the load's time per entry (one load, not the best
 *             of repetitions); allocs_per_op: the load's allocations per
 *             entry (counted as above).
 *
 * --quick (the ctest smoke run): the 1M key set is skipped — the _1m lines
 * are not printed — unless --case selects one of its get/put cases; then
 * memory_per_entry is measured over the 10k load instead (stderr says so).
 * That keeps the smoke run to ~0.3 s and ~10 MB here, where the full run
 * loads 3 x 1M entries (~0.8 GB, ~15 s in all).
 */
#define _GNU_SOURCE
#include "harness.h"
#include "children.h"
#include "hashtab.h"
#include "datagrid.h"

#include <lmdb.h>

#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SUITE "cache"
#define KLEN 16
#define VLEN 100
#define N_SMALL 10000u
#define N_LARGE 1000000u
#define LMDB_BATCH 10000u   /* puts per write transaction while loading */

#define MDB_DO(expr)                                                       \
	do {                                                                   \
		int rc_ = (expr);                                                  \
		if (__builtin_expect(rc_ != MDB_SUCCESS, 0))                       \
			dgb_die("%s:%d: %s: %s", __FILE__, __LINE__, #expr,            \
			    mdb_strerror(rc_));                                        \
	} while (0)

enum { I_DG, I_HASH, I_LMDB, NIMPL };
static const char *const impl_name[NIMPL] = { "datagrid", "hash", "lmdb" };

enum { O_LOAD, O_PUT, O_GET, NORDER };
static const uint64_t order_seed[NORDER] = { 0x10ad5eed10ad5eedULL,
	0x9075eed09075eed0ULL, 0x6e75eed06e75eed0ULL };

static uint8_t (*ekeys)[KLEN];   /* N_LARGE keys, made once */

/* Resident set and malloc's bytes in use, in bytes. */
typedef struct memsnap {
	long long rss, anon, file, shmem;
	long long heap;
} memsnap;

/* What one store's load cost. */
typedef struct loadcost {
	double ns;                  /* the whole load */
	uint64_t allocs;
	memsnap before, after_raw, after;
} loadcost;

typedef struct eset {
	uint32_t n;
	uint32_t *order[NORDER];
	dg_node *node;
	dg_cache *cache;
	dgb_ht ht;
	MDB_env *env;
	MDB_dbi dbi;
	MDB_txn *rtxn;
	char dir[256];
	loadcost cost[NIMPL];
} eset;

/* One implementation's walk over a set. */
typedef struct ectx {
	eset *s;
	uint32_t put_at, get_at;
	uint64_t stamp;
	dg_buf buf;
	uint8_t val[VLEN];
	uint8_t out[VLEN];
} ectx;

/* ------------------------------------------------------------------------
 * Keys, orders, values.
 * ------------------------------------------------------------------------ */
static void make_keys(void)
{
	if (ekeys != NULL)
		return;
	ekeys = malloc((size_t)N_LARGE * KLEN);
	if (ekeys == NULL)
		dgb_die("out of memory for %u keys", N_LARGE);
	char tmp[KLEN + 1];
	for (uint32_t i = 0; i < N_LARGE; i++) {
		snprintf(tmp, sizeof tmp, "bench-key-%06u", i);
		memcpy(ekeys[i], tmp, KLEN);
	}
}

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* A permutation of 0..n-1 (Fisher-Yates; the modulo bias of a 64-bit draw
 * over n <= 1e6 is below 1e-13). */
static uint32_t *permutation(uint32_t n, uint64_t seed)
{
	uint32_t *a = malloc((size_t)n * sizeof(*a));
	if (a == NULL)
		dgb_die("out of memory for a permutation of %u", n);
	for (uint32_t i = 0; i < n; i++)
		a[i] = i;
	for (uint32_t i = n - 1; i > 0; i--) {
		uint32_t j = (uint32_t)(splitmix64(&seed) % ((uint64_t)i + 1));
		uint32_t t = a[i];
		a[i] = a[j];
		a[j] = t;
	}
	return a;
}

static void fill_value(uint8_t *v, uint64_t stamp)
{
	for (unsigned i = 0; i < VLEN; i++)
		v[i] = (uint8_t)('a' + i % 26);
	memcpy(v, &stamp, sizeof stamp);
}

static inline const uint8_t *next_key(const eset *s, int order, uint32_t *at)
{
	uint32_t k = s->order[order][*at];
	if (++*at == s->n)
		*at = 0;
	return ekeys[k];
}

/* ------------------------------------------------------------------------
 * The timed operations.
 * ------------------------------------------------------------------------ */
static uint64_t dg_get(void *ctx, uint64_t iters)
{
	ectx *c = ctx;
	uint64_t sum = 0;
	for (uint64_t i = 0; i < iters; i++) {
		const uint8_t *k = next_key(c->s, O_GET, &c->get_at);
		dg_buf_reset(&c->buf);
		DG_DO(dg_cache_get(c->s->cache, k, KLEN, &c->buf));
		if (__builtin_expect(c->buf.len != VLEN, 0))
			dgb_die("datagrid get: %zu-byte value", c->buf.len);
		sum += c->buf.data[0];
	}
	return sum;
}

static uint64_t dg_put(void *ctx, uint64_t iters)
{
	ectx *c = ctx;
	for (uint64_t i = 0; i < iters; i++) {
		const uint8_t *k = next_key(c->s, O_PUT, &c->put_at);
		c->stamp++;
		memcpy(c->val, &c->stamp, sizeof c->stamp);
		DG_DO(dg_cache_put(c->s->cache, k, KLEN, c->val, VLEN));
	}
	return iters;
}

static uint64_t ht_get(void *ctx, uint64_t iters)
{
	ectx *c = ctx;
	uint64_t sum = 0;
	for (uint64_t i = 0; i < iters; i++) {
		const uint8_t *k = next_key(c->s, O_GET, &c->get_at);
		long n = dgb_ht_get(&c->s->ht, k, KLEN, c->out, VLEN);
		if (__builtin_expect(n != VLEN, 0))
			dgb_die("hash get: %ld", n);
		dgb_clobber(c->out);
		sum += c->out[0];
	}
	return sum;
}

static uint64_t ht_put(void *ctx, uint64_t iters)
{
	ectx *c = ctx;
	for (uint64_t i = 0; i < iters; i++) {
		const uint8_t *k = next_key(c->s, O_PUT, &c->put_at);
		c->stamp++;
		memcpy(c->val, &c->stamp, sizeof c->stamp);
		if (dgb_ht_put(&c->s->ht, k, KLEN, c->val, VLEN) != 0)
			dgb_die("hash put: out of memory");
	}
	return iters;
}

static uint64_t mdb_get_run(void *ctx, uint64_t iters)
{
	ectx *c = ctx;
	uint64_t sum = 0;
	for (uint64_t i = 0; i < iters; i++) {
		MDB_val k = { KLEN, (void *)next_key(c->s, O_GET, &c->get_at) }, v;
		MDB_DO(mdb_txn_renew(c->s->rtxn));
		MDB_DO(mdb_get(c->s->rtxn, c->s->dbi, &k, &v));
		if (__builtin_expect(v.mv_size != VLEN, 0))
			dgb_die("lmdb get: %zu-byte value", v.mv_size);
		memcpy(c->out, v.mv_data, VLEN);
		mdb_txn_reset(c->s->rtxn);
		dgb_clobber(c->out);
		sum += c->out[0];
	}
	return sum;
}

static uint64_t mdb_put_run(void *ctx, uint64_t iters)
{
	ectx *c = ctx;
	for (uint64_t i = 0; i < iters; i++) {
		MDB_val k = { KLEN, (void *)next_key(c->s, O_PUT, &c->put_at) },
			v = { VLEN, c->val };
		MDB_txn *txn;
		c->stamp++;
		memcpy(c->val, &c->stamp, sizeof c->stamp);
		MDB_DO(mdb_txn_begin(c->s->env, NULL, 0, &txn));
		int rc = mdb_put(txn, c->s->dbi, &k, &v, 0);
		if (rc != MDB_SUCCESS) {
			mdb_txn_abort(txn);
			dgb_die("mdb_put: %s", mdb_strerror(rc));
		}
		MDB_DO(mdb_txn_commit(txn));
	}
	return iters;
}

/* ------------------------------------------------------------------------
 * Memory readings.
 * ------------------------------------------------------------------------ */
static memsnap snap(void)
{
	memsnap m = { 0, 0, 0, 0, 0 };
	FILE *f = fopen("/proc/self/status", "r");
	if (f == NULL)
		dgb_die("/proc/self/status: %s", strerror(errno));
	char line[256];
	long long kb;
	while (fgets(line, sizeof line, f) != NULL) {
		if (sscanf(line, "VmRSS: %lld kB", &kb) == 1)
			m.rss = kb * 1024;
		else if (sscanf(line, "RssAnon: %lld kB", &kb) == 1)
			m.anon = kb * 1024;
		else if (sscanf(line, "RssFile: %lld kB", &kb) == 1)
			m.file = kb * 1024;
		else if (sscanf(line, "RssShmem: %lld kB", &kb) == 1)
			m.shmem = kb * 1024;
	}
	fclose(f);
	struct mallinfo2 mi = mallinfo2();
	m.heap = (long long)(mi.uordblks + mi.hblkhd);
	return m;
}

static uint64_t allocs_now(int impl)
{
	if (impl == I_DG) {
		dgi_alloc_stats st;
		dgi_alloc_get_stats(&st);
		return st.allocs;
	}
	return dgb_heap_allocs();
}

/* ------------------------------------------------------------------------
 * Stores: open, load, close.
 * ------------------------------------------------------------------------ */
static void open_store(eset *s, int impl)
{
	if (impl == I_DG) {
		char cluster[64];
		dg_node_config cfg;
		dg_cache_config cc;
		snprintf(cluster, sizeof cluster, "dgbench-entries-%u-%d", s->n, (int)getpid());
		dg_node_config_init(&cfg);
		cfg.listen_url = "tcp://127.0.0.1:0";
		cfg.cluster_name = cluster;
		DG_DO(dg_node_start(&cfg, &s->node));
		dg_cache_config_init(&cc, "entries");
		cc.mode = DG_PARTITIONED;
		cc.backups = 0;
		DG_DO(dg_cache_create(s->node, &cc, &s->cache));
	} else if (impl == I_HASH) {
		dgb_ht_init(&s->ht);
	} else {
		MDB_txn *txn;
		snprintf(s->dir, sizeof s->dir, "%s/entries-lmdb-%u", dgb_tmpdir(), s->n);
		if (mkdir(s->dir, 0700) != 0)
			dgb_die("mkdir %s: %s", s->dir, strerror(errno));
		MDB_DO(mdb_env_create(&s->env));
		MDB_DO(mdb_env_set_mapsize(s->env, (size_t)1 << 30));
		MDB_DO(mdb_env_open(s->env, s->dir, MDB_NOSYNC, 0600));
		MDB_DO(mdb_txn_begin(s->env, NULL, 0, &txn));
		MDB_DO(mdb_dbi_open(txn, NULL, 0, &s->dbi));
		MDB_DO(mdb_txn_commit(txn));
	}
}

static void load_store(eset *s, int impl)
{
	uint8_t val[VLEN];
	const uint32_t *ord = s->order[O_LOAD];
	if (impl == I_DG) {
		for (uint32_t i = 0; i < s->n; i++) {
			fill_value(val, ord[i]);
			DG_DO(dg_cache_put(s->cache, ekeys[ord[i]], KLEN, val, VLEN));
		}
	} else if (impl == I_HASH) {
		for (uint32_t i = 0; i < s->n; i++) {
			fill_value(val, ord[i]);
			if (dgb_ht_put(&s->ht, ekeys[ord[i]], KLEN, val, VLEN) != 0)
				dgb_die("hash load: out of memory");
		}
	} else {
		for (uint32_t i = 0; i < s->n;) {
			MDB_txn *txn;
			MDB_DO(mdb_txn_begin(s->env, NULL, 0, &txn));
			for (uint32_t end = i + LMDB_BATCH; i < s->n && i < end; i++) {
				MDB_val k = { KLEN, ekeys[ord[i]] }, v = { VLEN, val };
				fill_value(val, ord[i]);
				MDB_DO(mdb_put(txn, s->dbi, &k, &v, 0));
			}
			MDB_DO(mdb_txn_commit(txn));
		}
		MDB_DO(mdb_txn_begin(s->env, NULL, MDB_RDONLY, &s->rtxn));
		mdb_txn_reset(s->rtxn);
	}
}

/* Loads impl's store, measuring the load (memory only when `memory`). */
static void load_measured(eset *s, int impl, bool memory)
{
	loadcost *lc = &s->cost[impl];
	if (memory) {
		malloc_trim(0);
		lc->before = snap();
	}
	uint64_t a0 = allocs_now(impl);
	uint64_t t0 = dgb_now_ns();
	load_store(s, impl);
	lc->ns = (double)(dgb_now_ns() - t0);
	lc->allocs = allocs_now(impl) - a0;
	if (memory) {
		lc->after_raw = snap();
		malloc_trim(0);
		lc->after = snap();
	}
}

static void close_store(eset *s, int impl)
{
	if (impl == I_DG && s->node != NULL) {
		dg_cache_metrics m;
		if (dg_cache_get_metrics(s->cache, &m) == DG_OK && m.entries != s->n)
			dgb_note("entries: the datagrid cache holds %llu entries, expected %u",
			    (unsigned long long)m.entries, s->n);
		dg_node_stop(s->node);
		s->node = NULL;
		s->cache = NULL;
	} else if (impl == I_HASH) {
		if (s->ht.count != s->n)
			dgb_note("entries: the hash table holds %zu entries, expected %u",
			    s->ht.count, s->n);
		dgb_ht_free(&s->ht);
	} else if (impl == I_LMDB && s->env != NULL) {
		if (s->rtxn != NULL)
			mdb_txn_abort(s->rtxn);
		s->rtxn = NULL;
		mdb_env_close(s->env);
		s->env = NULL;
		dgb_remove_tree(s->dir);
	}
}

/* ------------------------------------------------------------------------
 * memory_per_entry lines and notes.
 * ------------------------------------------------------------------------ */
static double per(long long bytes, uint32_t n) { return (double)bytes / n; }

static void memory_notes(const dgb_opts *o, eset *s, const bool sel[NIMPL])
{
	double bytes[NIMPL] = { 0 };
	for (int i = 0; i < NIMPL; i++) {
		if (!sel[i])
			continue;
		const loadcost *lc = &s->cost[i];
		bytes[i] = per(lc->after.rss - lc->before.rss, s->n);
		dgb_line l = { .name = "memory_per_entry", .impl = impl_name[i],
			.ns_per_op = lc->ns / s->n, .ops_per_s = -1, .p50_us = -1, .p99_us = -1,
			.bytes = (long long)(bytes[i] + 0.5), .allocs_per_op = (double)lc->allocs / s->n };
		dgb_print_line(o, SUITE, &l);
		dgb_note("memory_per_entry/%s: %u entries loaded in %.0f ms; RSS +%.1f B/entry "
		    "after malloc_trim (+%.1f before it): anon %+.1f, file %+.1f, shmem %+.1f; "
		    "malloc'd bytes in use %+.1f B/entry",
		    impl_name[i], s->n, lc->ns / 1e6, bytes[i],
		    per(lc->after_raw.rss - lc->before.rss, s->n),
		    per(lc->after.anon - lc->before.anon, s->n),
		    per(lc->after.file - lc->before.file, s->n),
		    per(lc->after.shmem - lc->before.shmem, s->n),
		    per(lc->after.heap - lc->before.heap, s->n));
	}
	if (sel[I_DG]) {
		dg_cache_metrics m;
		if (dg_cache_get_metrics(s->cache, &m) == DG_OK)
			dgb_note("memory_per_entry/datagrid: the cache holds %llu entries, "
			    "%.1f key + value bytes per entry (encoded)",
			    (unsigned long long)m.entries, (double)m.bytes / (double)s->n);
	}
	if (sel[I_HASH])
		dgb_note("memory_per_entry/hash: %zu slots of 16 B (load %.2f): %.1f B/entry "
		    "of table, entries malloc(%zu)", s->ht.cap,
		    (double)s->ht.count / (double)s->ht.cap,
		    per((long long)dgb_ht_table_bytes(&s->ht), s->n),
		    sizeof(dgb_ht_entry) + KLEN + VLEN);
	if (sel[I_LMDB]) {
		MDB_envinfo info;
		MDB_stat st;
		MDB_DO(mdb_env_info(s->env, &info));
		MDB_DO(mdb_env_stat(s->env, &st));
		dgb_note("memory_per_entry/lmdb: data file %.1f B/entry (%zu pages of %u B "
		    "used; B-tree depth %u, %zu leaf pages); its RSS counts the map's pages "
		    "this process touched plus LMDB's malloc'd dirty pages",
		    per((long long)(info.me_last_pgno + 1) * st.ms_psize, s->n),
		    info.me_last_pgno + 1, st.ms_psize, st.ms_depth, st.ms_leaf_pages);
	}
	if (sel[I_DG] && sel[I_HASH] && bytes[I_HASH] > 0)
		dgb_note("memory_per_entry: datagrid / hash = %.2fx (target <= 1.1x)",
		    bytes[I_DG] / bytes[I_HASH]);
}

/* ------------------------------------------------------------------------
 * One key set: load the stores, then its get and put cases.
 * ------------------------------------------------------------------------ */
static void run_set(const dgb_opts *o, uint32_t n, const char *get_case,
    const char *put_case, bool memory)
{
	bool sel_get[NIMPL], sel_put[NIMPL], sel_mem[NIMPL], need[NIMPL];
	bool any = false;
	for (int i = 0; i < NIMPL; i++) {
		sel_get[i] = dgb_selected(o, get_case, impl_name[i]);
		sel_put[i] = dgb_selected(o, put_case, impl_name[i]);
		sel_mem[i] = memory && dgb_selected(o, "memory_per_entry", impl_name[i]);
		need[i] = sel_get[i] || sel_put[i] || sel_mem[i];
		any = any || need[i];
	}
	if (!any)
		return;

	static eset s;
	memset(&s, 0, sizeof s);
	s.n = n;
	for (int k = 0; k < NORDER; k++)
		s.order[k] = permutation(n, order_seed[k] ^ n);
	for (int i = 0; i < NIMPL; i++)
		if (need[i])
			open_store(&s, i);
	for (int i = 0; i < NIMPL; i++)
		if (need[i])
			load_measured(&s, i, sel_mem[i]);
	for (int i = 0; i < NIMPL; i++)
		if (need[i] && !sel_mem[i])
			dgb_note("%s: %u entries loaded into %s in %.0f ms", get_case, n,
			    impl_name[i], s.cost[i].ns / 1e6);
	if (sel_mem[I_DG] || sel_mem[I_HASH] || sel_mem[I_LMDB])
		memory_notes(o, &s, sel_mem);

	static ectx ctx[NIMPL];
	static const dgb_run_fn getf[NIMPL] = { dg_get, ht_get, mdb_get_run };
	static const dgb_run_fn putf[NIMPL] = { dg_put, ht_put, mdb_put_run };
	for (int i = 0; i < NIMPL; i++) {
		memset(&ctx[i], 0, sizeof ctx[i]);
		ctx[i].s = &s;
		dg_buf_init(&ctx[i].buf);
		fill_value(ctx[i].val, 0);
		ctx[i].stamp = (uint64_t)n << 8;
	}
	for (int c = 0; c < 2; c++) {
		const char *name = c == 0 ? get_case : put_case;
		const bool *sel = c == 0 ? sel_get : sel_put;
		dgb_bench b[NIMPL];
		dgb_result r[NIMPL];
		int idx[NIMPL] = { -1, -1, -1 };
		unsigned nb = 0;
		for (int i = 0; i < NIMPL; i++) {
			if (!sel[i])
				continue;
			idx[i] = (int)nb;
			b[nb++] = (dgb_bench){ .suite = SUITE, .name = name, .impl = impl_name[i],
				.run = c == 0 ? getf[i] : putf[i], .ctx = &ctx[i], .ops_per_iter = 1,
				.bytes = -1, .alloc_src = i == I_DG ? DGB_ALLOC_DG : DGB_ALLOC_HEAP };
		}
		if (nb == 0)
			continue;
		dgb_begin_suite(o, SUITE);
		dgb_run_group(o, b, nb, r);
		if (idx[I_DG] < 0)
			continue;
		const dgb_result *dg = &r[idx[I_DG]];
		char hash[96] = "", mdb[96] = "";
		if (idx[I_HASH] >= 0)
			snprintf(hash, sizeof hash, "; datagrid / hash = %.2fx (target <= %s)",
			    dg->ns_per_op / r[idx[I_HASH]].ns_per_op, c == 0 ? "1.5x" : "2x");
		if (idx[I_LMDB] >= 0)
			snprintf(mdb, sizeof mdb, "; lmdb / datagrid = %.2fx%s",
			    r[idx[I_LMDB]].ns_per_op / dg->ns_per_op,
			    c == 0 && n == N_LARGE ? " (target >= 3x)" : "");
		dgb_note("%s: datagrid %.1f ns, allocs/op %.3g (target 0)%s%s", name,
		    dg->ns_per_op, dg->allocs_per_op, hash, mdb);
	}

	for (int i = 0; i < NIMPL; i++) {
		dg_buf_free(&ctx[i].buf);
		if (need[i])
			close_store(&s, i);
	}
	for (int k = 0; k < NORDER; k++)
		free(s.order[k]);
}

static bool any_impl(const dgb_opts *o, const char *name)
{
	for (int i = 0; i < NIMPL; i++)
		if (dgb_selected(o, name, impl_name[i]))
			return true;
	return false;
}

void dgb_cache_entries_cases(const dgb_opts *o)
{
	bool small = any_impl(o, "embedded_get_10k") || any_impl(o, "embedded_put_10k");
	bool large = any_impl(o, "embedded_get_1m") || any_impl(o, "embedded_put_1m");
	bool memory = any_impl(o, "memory_per_entry");
	if (!small && !large && !memory)
		return;
	make_keys();
	/* --quick: the 1M set only when --case asks for one of its cases */
	bool run_large = (large || memory) && (!o->quick || (o->only_case != NULL && large));
	if (o->quick && (large || memory) && !run_large)
		dgb_note("--quick: embedded_get_1m and embedded_put_1m skipped; "
		    "memory_per_entry measured over the %u-entry load (%u without --quick)",
		    N_SMALL, N_LARGE);
	run_set(o, N_SMALL, "embedded_get_10k", "embedded_put_10k", !run_large);
	if (run_large)
		run_set(o, N_LARGE, "embedded_get_1m", "embedded_put_1m", true);
	free(ekeys);
	ekeys = NULL;
}
