/*
 * cache/cache.h — caches: configuration and operations (public: included by
 * datagrid.h; read datagrid.h's conventions first), and the grid engine
 * the node assembles (library-internal, dgi_).
 *
 * A cache's entries are spread over `partitions` partitions by a hash of the
 * key's canonical bytes; rendezvous affinity assigns each partition a
 * primary and `backups` backups among the topology's server nodes.  Every
 * key and value is stored in its marshalled form.
 */
#ifndef DG_CACHE_H
#define DG_CACHE_H

#include "marshal/marshal.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dg_cache dg_cache;

/* Events a node reports to its on_event callback (any node thread; the
 * callback must not block or call back into the node). */
typedef enum dg_event_kind {
	DG_EVENT_TOPOLOGY = 1,      /* a new topology version was installed */
	DG_EVENT_PARTITION_LOST,    /* cache, partition: every copy is gone */
	DG_EVENT_REBALANCE_DONE,    /* cache: this node owns all it should */
} dg_event_kind;

typedef struct dg_event {
	dg_event_kind kind;
	int64_t topology_version;
	const char *cache;          /* or NULL */
	uint32_t partition;
} dg_event;

typedef enum dg_cache_mode { DG_PARTITIONED = 0, DG_REPLICATED = 1 } dg_cache_mode;
typedef enum dg_write_sync {
	DG_FULL_SYNC = 0,     /* returns after the primary and every backup applied */
	DG_PRIMARY_SYNC = 1,  /* returns after the primary applied */
	DG_FULL_ASYNC = 2,    /* returns after sending */
} dg_write_sync;
typedef enum dg_atomicity { DG_ATOMIC = 0, DG_TRANSACTIONAL = 1 } dg_atomicity;

#define DG_CACHE_NAME_MAX 128
#define DG_PARTITIONS_DEFAULT 1024
#define DG_PARTITIONS_MAX 65536
#define DG_KEY_MAX (64u * 1024)          /* encoded key bytes */
#define DG_VALUE_MAX (8u * 1024 * 1024)  /* encoded value bytes */
#define DG_PERSIST_KEY_MAX 505           /* encoded key bytes in a persistent
                                            cache (LMDB's key limit) */

typedef struct dg_cache_config {
	char name[DG_CACHE_NAME_MAX];  /* UTF-8, 1..127 bytes */
	dg_cache_mode mode;            /* default DG_PARTITIONED */
	uint32_t backups;              /* default 0; ignored for REPLICATED */
	dg_write_sync write_sync;      /* default DG_FULL_SYNC */
	dg_atomicity atomicity;        /* default DG_ATOMIC */
	uint32_t partitions;           /* default 1024, 1..65536 */
	bool read_from_backup;         /* default true: a node that holds an
	                                  owning copy reads it locally.  A backup
	                                  copy may hold a FULL_SYNC write before
	                                  every owner does (only the primary
	                                  waits for all of them): false makes
	                                  every read go to the primary, and
	                                  reads linearizable */
	bool persistence;              /* default false: needs the node's data_dir */
	uint64_t ttl_ms;               /* 0: entries never expire */
} dg_cache_config;

/* Fills defaults and copies name (truncated to DG_CACHE_NAME_MAX - 1). */
DG_API void dg_cache_config_init(dg_cache_config *cfg, const char *name);

DG_API const dg_cache_config *dg_cache_config_of(const dg_cache *c);

/* ---- raw bytes: keys and values are byte strings ----
 * Keys are 1..DG_KEY_MAX-8 bytes (persistent caches: encoded keys up to
 * DG_PERSIST_KEY_MAX bytes, about 500 bytes of raw key), values
 * 0..DG_VALUE_MAX-8 bytes.  Values read are appended to a caller-owned dg_buf (reset it to reuse it; growing
 * it is the only allocation a read makes). */

DG_API dg_err dg_cache_put(dg_cache *c, const void *key, size_t klen,
    const void *val, size_t vlen);
/* DG_ERR_NOT_FOUND when absent (or expired). */
DG_API dg_err dg_cache_get(dg_cache *c, const void *key, size_t klen,
    dg_buf *val);
/* *removed (optional): whether the key was there. */
DG_API dg_err dg_cache_remove(dg_cache *c, const void *key, size_t klen,
    bool *removed);
/* Puts only when absent; *put (optional) says whether it did. */
DG_API dg_err dg_cache_put_if_absent(dg_cache *c, const void *key, size_t klen,
    const void *val, size_t vlen, bool *put);
/* Puts only when present; *replaced (optional) says whether it did. */
DG_API dg_err dg_cache_replace(dg_cache *c, const void *key, size_t klen,
    const void *val, size_t vlen, bool *replaced);
/* Puts and appends the previous value to old; *had (optional) says whether
 * there was one. */
DG_API dg_err dg_cache_get_and_put(dg_cache *c, const void *key, size_t klen,
    const void *val, size_t vlen, dg_buf *old, bool *had);
DG_API dg_err dg_cache_contains(dg_cache *c, const void *key, size_t klen,
    bool *present);

/* Compare-and-set: puts val only when the key holds exactly expected (the
 * same bytes; an absent key equals nothing); *replaced (optional) says
 * whether it did.  The compare and the write are one atomic step on the
 * key's primary, and the write reaches the backups like any put (FULL_SYNC:
 * every owner applied it before the call returns).  On a TRANSACTIONAL
 * cache it joins the thread's transaction (or runs as a one-operation
 * one) and stays atomic in every mode (txn/txn.h).  A retry inside the
 * call (after a topology change or a primary's failure) is applied at
 * most once and reports the same flag.  expected: 0..DG_VALUE_MAX-8 bytes, val as put's.
 * Errors: as dg_cache_put.  Of a write's errors, DG_ERR_TIMEOUT (and
 * DG_ERR_TX_UNKNOWN on a TRANSACTIONAL cache) leave the outcome unknown;
 * every other error means nothing was written. */
DG_API dg_err dg_cache_replace_if_equals(dg_cache *c, const void *key, size_t klen,
    const void *expected, size_t elen, const void *val, size_t vlen, bool *replaced);
/* Removes the key only when it holds exactly expected; *removed (optional)
 * says whether it did.  Atomic and retried as dg_cache_replace_if_equals. */
DG_API dg_err dg_cache_remove_if_equals(dg_cache *c, const void *key, size_t klen,
    const void *expected, size_t elen, bool *removed);

/* Batches: n keys (and values).  On an ATOMIC cache every key's operation
 * is in flight at once (about one round trip for the batch, not n); each
 * key has the single calls' guarantees.  The result is the error of the
 * first key (in kvs order) that failed; the other keys were tried too (a
 * TRANSACTIONAL cache goes key by key and stops at the first error).  A
 * bad key or value (DG_ERR_INVAL) is found before anything is sent. */
typedef struct dg_kv {
	const void *key;
	size_t klen;
	const void *val;
	size_t vlen;
} dg_kv;
DG_API dg_err dg_cache_put_all(dg_cache *c, const dg_kv *kvs, size_t n);
/* For each kvs[i].key: kvs[i].val/vlen point into vals (appended there;
 * valid until vals changes) or are NULL/0 when absent.  *found: how many. */
DG_API dg_err dg_cache_get_all(dg_cache *c, dg_kv *kvs, size_t n, dg_buf *vals,
    size_t *found);
DG_API dg_err dg_cache_remove_all(dg_cache *c, const dg_kv *kvs, size_t n,
    size_t *removed);

/* Entries in the whole cache (primary copies, cluster-wide).  Entries expired
 * but not yet swept may be counted. */
DG_API dg_err dg_cache_size(dg_cache *c, uint64_t *size);
/* Removes every entry on every node. */
DG_API dg_err dg_cache_clear(dg_cache *c);

/* ---- typed: keys and values are marshalled values ----
 * enc/len is one encoded marshal value (a dg_writer's output: a registered
 * struct written with dg_write_object, a binary object, a string, ...).
 * Equal keys must have equal encodings (FORMAT.md's canonical form). */
DG_API dg_err dg_cache_put_val(dg_cache *c, const uint8_t *key, size_t klen,
    const uint8_t *val, size_t vlen);
/* Appends the stored encoded value to val.  DG_ERR_NOT_FOUND. */
DG_API dg_err dg_cache_get_val(dg_cache *c, const uint8_t *key, size_t klen,
    dg_buf *val);
DG_API dg_err dg_cache_remove_val(dg_cache *c, const uint8_t *key, size_t klen,
    bool *removed);
/* The conditional and batch operations on encoded values, as their raw
 * counterparts above (dg_kv keys and values are encoded values here; the
 * values get_all_val returns are encoded values too). */
DG_API dg_err dg_cache_put_if_absent_val(dg_cache *c, const uint8_t *key, size_t klen,
    const uint8_t *val, size_t vlen, bool *put);
DG_API dg_err dg_cache_replace_val(dg_cache *c, const uint8_t *key, size_t klen,
    const uint8_t *val, size_t vlen, bool *replaced);
DG_API dg_err dg_cache_get_and_put_val(dg_cache *c, const uint8_t *key, size_t klen,
    const uint8_t *val, size_t vlen, dg_buf *old, bool *had);
DG_API dg_err dg_cache_contains_val(dg_cache *c, const uint8_t *key, size_t klen,
    bool *present);
/* Compare-and-set on encoded values: expected is an encoded value compared
 * byte for byte with the stored one (equal values have equal encodings). */
DG_API dg_err dg_cache_replace_if_equals_val(dg_cache *c, const uint8_t *key, size_t klen,
    const uint8_t *expected, size_t elen, const uint8_t *val, size_t vlen, bool *replaced);
DG_API dg_err dg_cache_remove_if_equals_val(dg_cache *c, const uint8_t *key, size_t klen,
    const uint8_t *expected, size_t elen, bool *removed);
DG_API dg_err dg_cache_put_all_val(dg_cache *c, const dg_kv *kvs, size_t n);
DG_API dg_err dg_cache_get_all_val(dg_cache *c, dg_kv *kvs, size_t n, dg_buf *vals,
    size_t *found);
DG_API dg_err dg_cache_remove_all_val(dg_cache *c, const dg_kv *kvs, size_t n,
    size_t *removed);
/* Registered C structs: the key and value are written with the given
 * descriptors (from dg_registry_register on dg_node_registry). */
DG_API dg_err dg_cache_put_obj(dg_cache *c, const dg_desc *kd, const void *key,
    const dg_desc *vd, const void *val);
/* Decodes the stored value into *val (strings, bytes and arrays copied into
 * arena).  DG_ERR_NOT_FOUND, DG_ERR_TYPE_MISMATCH, DG_ERR_NOSPACE (arena). */
DG_API dg_err dg_cache_get_obj(dg_cache *c, const dg_desc *kd, const void *key,
    const dg_desc *vd, void *val, dg_arena *arena);
/* Compare-and-set on registered structs: *expected and *val are written
 * with vd and compared as encoded values (the same struct contents, the
 * same bytes). */
DG_API dg_err dg_cache_replace_if_equals_obj(dg_cache *c, const dg_desc *kd, const void *key,
    const dg_desc *vd, const void *expected, const void *val, bool *replaced);
DG_API dg_err dg_cache_remove_if_equals_obj(dg_cache *c, const dg_desc *kd, const void *key,
    const dg_desc *vd, const void *expected, bool *removed);

/* ---- scan: every entry, a page at a time ----
 * A cursor walks the partitions in order, fetching up to page_size entries
 * per request from each partition's primary, so a large cache never builds
 * one huge reply.  Every entry present for the whole scan is returned once;
 * entries written or removed during it may or may not be (including a
 * FULL_SYNC write not yet on every backup: a scan does not wait for
 * pending writes as reads do).  Not thread-safe: one thread per cursor. */
typedef struct dg_scan dg_scan;
/* page_size 0: 256.  *out owned by the caller (dg_scan_close). */
DG_API dg_err dg_scan_open(dg_cache *c, uint32_t page_size, dg_scan **out);
/* The next entry: encoded key and value (raw caches: BYTES values; use
 * dg_scan_key_bytes to get the bytes), valid until the next call.
 * DG_ERR_NOT_FOUND at the end. */
DG_API dg_err dg_scan_next(dg_scan *s, const uint8_t **key, size_t *klen,
    const uint8_t **val, size_t *vlen);
DG_API void dg_scan_close(dg_scan *s);
/* The byte string inside an encoded BYTES value (what the raw API stored).
 * DG_ERR_TYPE_MISMATCH when enc is not a BYTES value. */
DG_API dg_err dg_bytes_of(const uint8_t *enc, size_t len, const uint8_t **p,
    size_t *n);

/* ---- lost partitions ---- */
/* Partitions of the cache marked lost: up to cap into out; returns how many. */
DG_API size_t dg_cache_lost_partitions(dg_cache *c, uint32_t *out, size_t cap);
/* Clears the lost mark of every partition (cluster-wide): they serve reads
 * and writes again, empty or with what the current owners hold. */
DG_API dg_err dg_cache_reset_lost(dg_cache *c);

/* ---- metrics and rebalancing ---- */
typedef struct dg_cache_metrics {
	uint64_t puts, gets, removes, hits, misses;   /* ops started on this node */
	uint64_t entries;                /* copies held by this node (all roles) */
	uint64_t primary_entries;
	uint64_t bytes;                  /* key + value bytes held */
	uint32_t partitions_owning, partitions_moving, partitions_lost;
	uint64_t rebalance_partitions_done, rebalance_partitions_left;
	uint64_t rebalance_bytes;        /* received by this node since start */
	uint64_t expired;                /* entries removed by the sweeper */
	uint64_t remaps;                 /* operations mapped again after a topology change */
	uint32_t partitions_repairing;   /* OWNING but not whole: fetching what
	                                    it lacks from copies rented out
	                                    elsewhere (counted in owning too) */
} dg_cache_metrics;
DG_API dg_err dg_cache_get_metrics(dg_cache *c, dg_cache_metrics *out);

/* Waits until this node owns every partition it should (no MOVING), up to
 * timeout_ms.  DG_ERR_TIMEOUT. */
DG_API dg_err dg_cache_wait_rebalanced(dg_cache *c, uint32_t timeout_ms);

/* ---- operation latency ----
 * Per cache and per kind of operation, a histogram of how long the
 * operations started on this node took, from call to return; cumulative
 * since the cache was created on this node (destroyed and created again:
 * from zero).  Kinds: DG_OP_GET counts get, contains and their _val/_obj
 * forms; DG_OP_PUT put, put_if_absent, replace, get_and_put and their
 * forms; DG_OP_REMOVE remove and remove_val.  A batch (put_all, get_all,
 * remove_all and their _val forms) counts once per call, whatever its n.
 * Every call counts whatever its result (NOT_FOUND, TIMEOUT, ...), except
 * one rejected with DG_ERR_INVAL.  On a TRANSACTIONAL cache the time
 * includes what the transaction layer did for the call: a write outside a
 * transaction, its whole one-operation transaction; inside one, enlisting
 * and locking, not the commit.  Every operation is counted, exactly; its
 * time is sampled: a thread reads the clock for one fast operation in 64
 * per cache and kind (the first always) and counts each of the other 63
 * in the bucket of its last timed one, adding that one's time to sum_us.
 * An operation that leaves the fast path — a remote request, a wait for
 * backups or a pending write, persistence, a transaction, a retry — is
 * always timed (from where it left the path when it was not sampled: a
 * fraction of a µs less).  A batch is always timed.  Recording costs two
 * plain increments of the calling thread's own counters (cache_int.h)
 * and, one time in 64, two clock reads: no lock, no locked instruction,
 * no allocation but at a thread's first operation on the cache. */
#define DG_LAT_BUCKETS 28
typedef enum dg_cache_op_kind { DG_OP_GET, DG_OP_PUT, DG_OP_REMOVE, DG_OP__COUNT } dg_cache_op_kind;
typedef struct dg_latency {
	uint64_t count;                     /* ops: the sum of buckets[] */
	uint64_t sum_us;                    /* their total time */
	uint64_t buckets[DG_LAT_BUCKETS];   /* buckets[i]: ops that took <= dg_latency_bound_us(i)
	                                       and more than the previous bound; the last is +Inf.
	                                       Not cumulative: Prometheus' `le` buckets are
	                                       running sums of these */
} dg_latency;
/* The upper bound of bucket i in microseconds: 1, 2, 5, 10, 20, 50, ...
 * ({1, 2, 5}[i % 3] * 10^(i / 3)) up to 500 s for i = 26; UINT64_MAX
 * (+Inf) for i >= DG_LAT_BUCKETS - 1.  Pure: any thread. */
DG_API uint64_t dg_latency_bound_us(unsigned i);
/* Copies the histogram of op on this node into *out (caller-owned).  Any
 * thread, while others record: the counters are read one by one, so sum_us
 * may include an op the buckets do not yet (count is always the buckets'
 * total).  DG_ERR_INVAL: c or out NULL, op not a DG_OP_ kind. */
DG_API dg_err dg_cache_get_latency(dg_cache *c, dg_cache_op_kind op, dg_latency *out);
/* The upper bound (µs) of the bucket holding the q-quantile of l: the
 * bucket where the running sum of buckets[] reaches ceil(q * total) (at
 * least 1), q clamped to [0, 1].  l->count is not read: total is the
 * buckets' sum.  0 when l is NULL or every bucket is 0; UINT64_MAX when
 * the quantile is in the +Inf bucket.  Pure: any thread. */
DG_API uint64_t dg_latency_quantile_us(const dg_latency *l, double q);

/* ------------------------------------------------------------------------
 * The grid engine (library-internal): one per node, built by node/ on top
 * of the node's transport and membership.
 * ------------------------------------------------------------------------ */
typedef struct dgi_grid dgi_grid;
struct dg_tp;
struct dg_member;

typedef struct dgi_grid_config {
	uint32_t request_timeout_ms;
	uint32_t rebalance_batch_bytes;
	const char *data_dir;           /* NULL: no persistence */
	size_t storage_map_size;
	bool storage_nosync;
	bool client;
	bool majority;                  /* partition policy majority: a topology
	                                   serves only with a majority of its
	                                   baseline (copies loaded from disk
	                                   wait for one to merge) */
	void (*on_event)(void *ctx, const dg_event *ev);
	void *event_ctx;
	bool storage_recover;           /* a damaged store is moved aside */
	const uint8_t *master_key;      /* 32 bytes: records encrypted at rest
	                                   (pstore.h); NULL: none */
	uint32_t rebalance_throttle_ms; /* pause after each batch fetched */
} dgi_grid_config;

/* Registers the cache message handlers on tp, opens the persistent store
 * and loads persisted caches.  Call after dg_tp_start and before
 * dg_member_start; then dgi_grid_joined once the member started.
 * *out: dgi_grid_stop.  Any number of grids may run in one process (no
 * table of grids: a reply finds its waiter through its own context). */
dg_err dgi_grid_start(struct dg_tp *tp, dg_registry *reg,
    const dgi_grid_config *cfg, dgi_grid **out);
/* Membership is up: listens to its topologies (the current one first),
 * learns the cluster's caches and announces this node's. */
dg_err dgi_grid_joined(dgi_grid *g, struct dg_member *m);
/* Graceful leave: waits (bounded) until the partitions this node holds
 * alone have been fetched by their next owners. */
void dgi_grid_leave(dgi_grid *g);
/* Stops and frees (after dg_member_stop, before dg_tp_stop). */
void dgi_grid_stop(dgi_grid *g);

dg_err dgi_grid_cache_create(dgi_grid *g, const dg_cache_config *cfg, dg_cache **out);
dg_err dgi_grid_cache_find(dgi_grid *g, const char *name, dg_cache **out);
dg_err dgi_grid_cache_destroy(dgi_grid *g, const char *name);
size_t dgi_grid_cache_list(dgi_grid *g, dg_cache_config *out, size_t cap);

/* The highest topology version this node persisted (0: none): the
 * membership version floor. */
int64_t dgi_grid_version_floor(dgi_grid *g);
/* The baseline persisted in data_dir when the node last ran (the topology's,
 * once set: dgctl baseline), as addresses valid until dgi_grid_stop; 0 when
 * none was set or the node has no data_dir.  For dg_member_config.baseline:
 * a full-cluster restart waits for a majority of it. */
uint32_t dgi_grid_persisted_baseline(dgi_grid *g, const char *const **addrs);
/* Re-wraps the data keys of this node's store under master (32 bytes):
 * dgi_pstore_rekey.  DG_ERR_STATE: no store, or no encryption. */
dg_err dgi_grid_rekey(dgi_grid *g, const uint8_t master[32]);

/* Stable 32-bit cache id: FNV-1a of the name (never 0). */
uint32_t dgi_cache_id(const char *name);

typedef struct dgi_pver {    /* entry version (DESIGN.md): compared in this order */
	int64_t topver;
	uint64_t counter;
	uint32_t order;
	uint32_t flags;          /* not compared */
} dgi_pver;

/* <0, 0, >0 as a is older, equal, newer than b (topver, counter, order). */
int dgi_pver_cmp(const dgi_pver *a, const dgi_pver *b);

/* ---- transactions reach the plain operations through a hook ----
 * The plain operations on a TRANSACTIONAL cache call it: a write joins the
 * calling thread's current tx or runs as a one-operation tx; a read joins
 * the current tx (outside one it returns DG_ERR__COUNT: "not mine", and the
 * cache reads the committed value itself).  op: DGI_CACHE_OP_*; out: the
 * old value (GET_AND_PUT, encoded) or the value read (GET; unwrap: the
 * bytes inside a BYTES value); *flag: removed / put / replaced / had. */
enum {
	DGI_CACHE_OP_GET = 0, DGI_CACHE_OP_PUT, DGI_CACHE_OP_REMOVE,
	DGI_CACHE_OP_PUT_IF_ABSENT, DGI_CACHE_OP_REPLACE, DGI_CACHE_OP_GET_AND_PUT,
	DGI_CACHE_OP_REPLACE_IF_EQ, DGI_CACHE_OP_REMOVE_IF_EQ
};
/* exp/elen: the expected encoded value of the *_IF_EQ ops (else NULL, 0). */
typedef dg_err (*dgi_tx_op_fn)(void *ctx, dg_cache *c, int op, const uint8_t *key,
    size_t klen, const uint8_t *exp, size_t elen, const uint8_t *val, size_t vlen,
    dg_buf *out, bool unwrap, int64_t *flag);
void dgi_grid_set_tx_hook(dgi_grid *g, dgi_tx_op_fn fn, void *ctx);

/* ---- what transactions (txn/) use of the grid ----
 * A tx locks, reads and writes keys on their primaries through these; the
 * cache knows nothing of transactions (the txn service calls down). */
dg_cache *dgi_grid_cache_by_id(dgi_grid *g, uint32_t id);  /* live cache or NULL */
uint64_t dgi_grid_self(const dgi_grid *g);
int64_t dgi_grid_topver(const dgi_grid *g);
/* The node's request_timeout_ms (what bounds a plain operation). */
uint32_t dgi_grid_request_timeout(const dgi_grid *g);
uint32_t dgi_cache_id_of(const dg_cache *c);
/* Whether part lost every copy (dg_cache_lost_partitions; until reset). */
bool dgi_cache_part_lost(dg_cache *c, uint32_t part);
/* Whether a write of bytes (encoded key and value) to part must be
 * refused DG_ERR_STORAGE_FULL before anything is applied: a backup of part
 * refused a copy as large for a full map lately (pending.c, "Full
 * backups"; a tx's commit copies go as the ATOMIC writes' do). */
bool dgi_cache_backup_full(dg_cache *c, uint32_t part, uint64_t bytes);
/* The key's hash (the one every node computes) and partition. */
uint32_t dgi_cache_key_part(const dg_cache *c, const uint8_t *key, size_t klen,
    uint64_t *hash);
/* The owners of part under the cache's current affinity, primary first,
 * the first cap of them into out; returns how many there are (0 before the
 * first topology; more than cap: call again with room for all) and sets
 * *topver to the affinity's version. */
uint32_t dgi_cache_owners(dg_cache *c, uint32_t part, uint64_t *out, uint32_t cap,
    int64_t *topver);
#define DGI_OWNERS_BUF 8   /* the usual caller's buffer (a REPLICATED cache has more
                              owners: size from the count returned) */
/* The same, and *ohash (when not NULL): a digest of the owner set (primary,
 * then the backups in any order: the ATOMIC copies' owner digest), all from
 * one affinity — what a tx copy's receiver compares with its own (txn/). */
uint32_t dgi_cache_owners_hash(dg_cache *c, uint32_t part, uint64_t *out, uint32_t cap,
    int64_t *topver, uint64_t *ohash);
/* Reads key as its primary under topver: appends the stored encoded value
 * to val (when val is not NULL), *found, and the entry's version in *ver
 * (zero when there is no entry; a removal's tombstone has one).
 * DG_ERR_REMAP (not the primary under topver), DG_ERR_NOT_READY (leaving,
 * or MOVING without the key), DG_ERR_PARTITION_LOST.  topver 0: this
 * node's copy whatever its role (a tx that locked the key here under an
 * older topology); DG_ERR_NOT_READY when it holds no copy. */
dg_err dgi_cache_tx_read(dg_cache *c, int64_t topver, uint32_t part, uint64_t hash,
    const uint8_t *key, uint32_t klen, dg_buf *val, bool *found, dgi_pver *ver);
/* The same for a reader: DG_ERR_NOT_READY while the entry is a FULL_SYNC
 * write not yet on every backup (PENDING: a tx's commit is replicated as
 * an ATOMIC write is, and read by nobody before). */
dg_err dgi_cache_tx_read_settled(dg_cache *c, int64_t topver, uint32_t part, uint64_t hash,
    const uint8_t *key, uint32_t klen, dg_buf *val, bool *found, dgi_pver *ver);
/* A tx's read answered later (dgi_cache_tx_read_parked): called once,
 * with the key's partition locked — it replies and does nothing else (no
 * cache call, no partition lock).  err: DG_OK, with what the read found
 * when it parked (found, val, ver); DG_ERR_NOT_READY, the write it waited
 * for failed to reach a backup or was replaced (the reader asks again). */
struct dg_msg_in;
typedef void (*dgi_tx_read_fn)(void *ctx, const struct dg_msg_in *req, dg_err err,
    bool found, const dg_buf *val, const dgi_pver *ver);
/* dgi_cache_tx_read_settled for the request req, whose answer may wait: a
 * key whose last write is not yet on every backup parks req on that
 * write — DG_ERR__COUNT returned, nothing in val, found, ver — and fn(ctx,
 * ...) answers it once every backup has the write (as a remote GET of it
 * waits, read.c).  req is copied (its body is not kept). */
dg_err dgi_cache_tx_read_parked(dg_cache *c, int64_t topver, uint32_t part, uint64_t hash,
    const uint8_t *key, uint32_t klen, dg_buf *val, bool *found, dgi_pver *ver,
    const struct dg_msg_in *req, dgi_tx_read_fn fn, void *ctx);
/* Writes key as the primary (val NULL: removal, a tombstone): a new
 * version, persisted first, tagged with the tx id as the update id;
 * *ver and *expire_ms: what the backups get.  In a FULL_SYNC cache with
 * backups the version is PENDING, and sent to the backups as an ATOMIC
 * copy, until every one has it (readers wait for it).  topver (0: none)
 * is the topology the tx prepared under, in which this node was the key's
 * primary: the version is stamped with it when the cache maps on a newer
 * one already — under that one the key may have another primary, whose
 * writes (the fence holds them until this tx ends) must outrank this. */
dg_err dgi_cache_tx_write(dg_cache *c, int64_t topver, uint32_t part, uint64_t hash,
    const uint8_t *key, uint32_t klen, const uint8_t *val, uint32_t vlen, uint64_t tx_node,
    uint64_t tx_seq, dgi_pver *ver, int64_t *expire_ms);
/* Applies a copy (a backup's, or a primary re-sending what it holds):
 * only when newer than what this node holds.  Persists. */
dg_err dgi_cache_tx_copy(dg_cache *c, uint32_t part, uint64_t hash, const uint8_t *key,
    uint32_t klen, const uint8_t *val, uint32_t vlen, const dgi_pver *ver,
    int64_t expire_ms, uint64_t tx_node, uint64_t tx_seq);

/* ---- idle verify (dgctl idle-verify): compare the copies of a partition ----
 * Every owner of a partition computes its digest; copies agree when their
 * entries and digest are equal (run it while no writes are in flight: a
 * write applied on the primary but not yet on a backup shows as a
 * difference). */

/* dgi_part_digest.state: the partition's state on this node, the values of
 * cache_int.h's enum part_state (pinned there by static_assert). */
enum {
	DGI_PART_NONE = 0,      /* not an owner (may still hold data it is handing over) */
	DGI_PART_OWNING = 1,    /* an owner with the whole partition */
	DGI_PART_MOVING = 2,    /* a new owner still fetching it */
	DGI_PART_LOST = 3,      /* an owner of a partition whose copies were all lost */
};

typedef struct dgi_part_digest {
	int role;            /* 0 none, 1 primary, 2 backup (this node's role for the partition in the current topology) */
	int state;           /* DGI_PART_* */
	uint64_t entries;    /* live copies (expired or removed ones excluded) */
	uint64_t digest;     /* order-independent: sum (mod 2^64) of a 64-bit hash of each live entry's key bytes, value bytes and version */
	uint64_t bytes;      /* key + value bytes (encoded, as stored) */
} dgi_part_digest;

/* Digest of this node's copy of partition part.  Holds the partition's
 * lock for one pass over its entries (like a reader; no other lock) and
 * allocates nothing.  A partition this node holds nothing of gives
 * entries 0 (role 0 when it is no owner); a non-owner can report entries
 * while it keeps data for the new owners to fetch (state NONE).  Any
 * thread.  DG_ERR_INVAL: c or out NULL, part >= partitions;
 * DG_ERR_CLOSED: the cache was destroyed. */
dg_err dgi_cache_part_digest(dg_cache *c, uint32_t part, dgi_part_digest *out);
/* This node's role and state of every partition, without walking any
 * entry (the dashboard's partition map): out[p] = role << 4 | state, role
 * and state as in dgi_part_digest.  n: out's room; *count: the cache's
 * partitions (out filled up to min(n, *count)).  Any thread, no lock held
 * long (each state is one relaxed load).  DG_ERR_INVAL, DG_ERR_CLOSED. */
dg_err dgi_cache_part_map(dg_cache *c, uint8_t *out, uint32_t n, uint32_t *count);
/* "NONE", "OWNING", "MOVING", "LOST", or "UNKNOWN" for another value
 * (static strings). */
const char *dgi_part_state_name(int state);

/* Overwrites this node's copy of key (raw key bytes as dg_cache_put takes
 * them, encoded the same way) with val, keeping its version, without
 * telling any other owner.  Memory only: a persistent cache's record keeps
 * the old value.  DG_ERR_NOT_FOUND when this node holds no copy (or only
 * a removal's tombstone); DG_ERR_INVAL, DG_ERR_NOMEM.  For tests only. */
dg_err dgi_cache_debug_put_local(dg_cache *c, const void *key, size_t klen,
    const void *val, size_t vlen);

#ifdef __cplusplus
}
#endif
#endif /* DG_CACHE_H */
