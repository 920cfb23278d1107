/*
 * cache_int.h — internals of cache/ (not installed).
 *
 * Objects
 * -------
 * dgi_grid   one per node: the caches (an int map by cache id, published
 *            copy-on-write: lock-free lookup by id), the current topology
 *            and server-node list, pending update futures, the LMDB store,
 *            a worker pool for persistent writes, the rebalancer and the
 *            expiry sweeper.
 * dg_cache   one cache on this node: its config, id, partitions and the
 *            current affinity (published atomically per topology version).
 * part       one partition's copy on this node: a lock, an open-addressing
 *            table of entries (store.c), the version counter it assigns as
 *            primary, and its state (NONE, OWNING, MOVING, LOST).
 * entry      key and value bytes (marshalled) inline after the header, the
 *            version, the expiry time and the id of the last update applied
 *            (a retried update is applied once).
 *
 * Versions (DESIGN.md): (topology version, counter, node order), assigned
 * by the primary; a copy is replaced only by a newer version — backups,
 * rebalancing and persistence all apply that one rule (dgi_pver_cmp).
 *
 * Threads.  Local operations run in the caller's thread under the
 * partition's lock; remote ones are sent and the caller waits on its future
 * (a semaphore).  Handlers run on the transport's threads and never block,
 * except that writes to persistent caches are handed to the worker pool
 * (they wait for LMDB's group commit).  Lock order: grid->mu, then a
 * partition's mu, then a future stripe.
 */
#ifndef DG_CACHE_INT_H
#define DG_CACHE_INT_H

#include "cache.h"
#include "intmap.h"
#include "pstore.h"
#include "transport/transport.h"

#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

/* ---- hashing and affinity (affinity.c) ---- */

/* 64-bit hash of a key's canonical bytes; identical on every node. */
uint64_t dgi_key_hash(const uint8_t *p, size_t n);
static inline uint32_t dgi_part_of(uint64_t hash, uint32_t parts)
{
	return (uint32_t)(((hash >> 32) * (uint64_t)parts) >> 32);
}

#define DGI_MAX_COPIES 8        /* primary + up to 7 backups per partition */

/* An affinity: owners of every partition for one topology version.
 * owners[p * copies + 0] is the primary, then backups, as indexes into
 * nodes[] (server nodes, by order); UINT16_MAX where fewer nodes exist. */
typedef struct dgi_aff {
	int64_t topver;
	uint32_t parts;
	uint32_t copies;            /* 1 + backups (capped by node count) */
	uint32_t nnodes;
	struct dgi_aff *retired_next;   /* the grid's limbo (grid->mu) */
	uint64_t retired_tag;           /* dgi_epoch_retire's, when replaced */
	dg_node_id *nodes;          /* nnodes ids */
	int64_t *orders;            /* their join orders */
	uint16_t *owners;           /* parts * copies */
} dgi_aff;

/* Builds the affinity of a cache over server nodes (ids with their orders,
 * sorted by order): rendezvous hashing, partition p's owners are the
 * `copies` nodes with the highest hash(p, node id).  copies is clamped to
 * nnodes; REPLICATED passes copies = nnodes.  NULL on NOMEM. */
dgi_aff *dgi_aff_build(int64_t topver, uint32_t parts, uint32_t copies,
    const dg_node_id *nodes, const int64_t *orders, uint32_t nnodes);
void dgi_aff_free(dgi_aff *a);
static inline dg_node_id dgi_aff_owner(const dgi_aff *a, uint32_t p, uint32_t i)
{
	uint16_t k = a->owners[p * a->copies + i];
	return k == UINT16_MAX ? 0 : a->nodes[k];
}
/* Position of node among the owners of p (0 primary), or -1. */
int dgi_aff_role(const dgi_aff *a, uint32_t p, dg_node_id node);

/* ---- entries and the partition store (store.c) ---- */

#define DGI_ENTRY_TOMB 0x1u     /* a removal, remembered until expire_ms */

/* How long a removal is remembered (as a tombstone, in memory and in LMDB):
 * a copy older than it that arrives within that time — a late backup
 * message, a rebalanced batch, a node coming back with persisted data —
 * cannot bring the key back.  A node away longer than this can. */
#define DGI_TOMB_TTL_MS_DEFAULT (10 * 60 * 1000)
extern _Atomic int64_t dgi_tomb_ttl_ms;  /* tests shorten it */
#define DGI_TOMB_TTL_MS atomic_load_explicit(&dgi_tomb_ttl_ms, memory_order_relaxed)

typedef struct dgi_entry {
	uint64_t hash;
	dgi_pver ver;
	int64_t expire_ms;          /* wall clock; 0 never */
	uint64_t op_node, op_seq;   /* the last update applied */
	uint32_t klen, vlen, cap;   /* cap: bytes of data[] */
	uint32_t flags;
	uint8_t data[];             /* key, then value */
} dgi_entry;

enum part_state { P_NONE = 0, P_OWNING, P_MOVING, P_LOST };

/* A slot keeps the hash next to the pointer: a probe compares hashes
 * without touching the entry (one cache miss per lookup, not one per
 * probe). */
typedef struct dgi_pslot {
	uint64_t hash;
	dgi_entry *e;               /* NULL: empty */
} dgi_pslot;

typedef struct dgi_part {
	pthread_mutex_t mu;
	dgi_pslot *slots;            /* linear probing on hash */
	uint32_t cap;               /* power of two or 0 */
	uint32_t count;             /* entries, tombstones included */
	uint32_t live;              /* entries without the tombstone flag */
	uint64_t bytes;             /* key + value bytes */
	uint64_t counter;           /* versions assigned as primary */
	_Atomic int state;          /* enum part_state */
	int64_t state_topver;       /* topology version the state was set for */
	int64_t moving_topver;      /* MOVING: the version it started moving at; a
	                               copy older than that may be stale (kept
	                               from an earlier ownership) and is not
	                               served until the partition is OWNING */
	dg_node_id supplier;        /* MOVING: the node it fetches from */
	uint64_t rented_ms;         /* NONE with data: when it stopped owning */
} dgi_part;

void dgi_part_init(dgi_part *p);
void dgi_part_free(dgi_part *p);        /* entries and table */
/* Lookups and updates; the caller holds p->mu. */
dgi_entry *dgi_part_find(dgi_part *p, uint64_t hash, const uint8_t *key, uint32_t klen);
/* Makes the entry for key hold val (NULL + tomb: a tombstone), reusing its
 * memory when it fits.  *slot_entry is the entry after the call.
 * DG_ERR_NOMEM (unchanged). */
dg_err dgi_part_set(dgi_part *p, uint64_t hash, const uint8_t *key, uint32_t klen,
    const uint8_t *val, uint32_t vlen, const dgi_pver *ver, int64_t expire_ms,
    uint64_t op_node, uint64_t op_seq, uint32_t flags, dgi_entry **out);
/* Overwrites a found entry in place when the value fits its memory (no
 * second probe, no allocation); false when it does not fit. */
bool dgi_part_overwrite(dgi_part *p, dgi_entry *e, const uint8_t *val, uint32_t vlen,
    const dgi_pver *ver, int64_t expire_ms, uint64_t op_node, uint64_t op_seq);
/* Removes the entry for key (if any). */
void dgi_part_del(dgi_part *p, uint64_t hash, const uint8_t *key, uint32_t klen);
/* Removes every entry (and tombstone). */
void dgi_part_clear(dgi_part *p);
/* Removes tombstones only. */
void dgi_part_purge_tombs(dgi_part *p);
/* Visits entries with hash > after in hash order, up to max entries (all
 * entries of the last hash included); returns the last hash visited and
 * sets *more.  fn returning false stops. */
uint64_t dgi_part_scan(dgi_part *p, uint64_t after, bool first, uint32_t max,
    bool (*fn)(void *ctx, const dgi_entry *e), void *ctx, bool *more);
/* Removes expired entries and tombstones (expire_ms <= now); returns how
 * many.  gone (optional) sees each before it goes. */
uint32_t dgi_part_expire(dgi_part *p, int64_t now_ms, uint32_t max);
uint32_t dgi_part_expire_cb(dgi_part *p, int64_t now_ms, uint32_t max,
    void (*gone)(void *ctx, const dgi_entry *e), void *ctx);
/* Visits every entry and tombstone in slot order (no allocation). */
void dgi_part_each(dgi_part *p, void (*fn)(void *ctx, const dgi_entry *e), void *ctx);

static inline const uint8_t *dgi_entry_key(const dgi_entry *e) { return e->data; }
static inline const uint8_t *dgi_entry_val(const dgi_entry *e) { return e->data + e->klen; }

int64_t dgi_wall_ms(void);

/* ---- operation latency (latency.c; cache.h, "operation latency") ----
 * One histogram per cache and kind: relaxed atomic counters bumped by the
 * thread that ran the operation.  The count is not kept apart: it is the
 * buckets' sum, one increment fewer per operation. */
typedef struct dgi_lat {
	_Atomic uint64_t sum_ns;
	_Atomic uint64_t buckets[DG_LAT_BUCKETS];
} dgi_lat;

/* The finite bucket bounds in ns (dg_latency_bound_us * 1000): comparing
 * the elapsed ns to them needs no division on the hot path. */
extern const uint64_t dgi_lat_bounds_ns[DG_LAT_BUCKETS - 1];

static inline uint64_t dgi_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Counts one operation of ns nanoseconds.  A loop from the smallest bound:
 * most operations stop within the first few. */
static inline void dgi_lat_add(dgi_lat *l, uint64_t ns)
{
	unsigned i = 0;
	while (i < DG_LAT_BUCKETS - 1 && ns > dgi_lat_bounds_ns[i])
		i++;
	atomic_fetch_add_explicit(&l->buckets[i], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&l->sum_ns, ns, memory_order_relaxed);
}

/* ---- messages (msgs.c; PROTOCOL.md, "Cache messages") ---- */
#define DGI_MSG_UPDATE ((dg_msg_type)(64))  /* originator -> primary, request */
#define DGI_MSG_UPDATE_RES ((dg_msg_type)(65))  /* response */
#define DGI_MSG_BACKUP ((dg_msg_type)(66))  /* primary -> backups, one-way */
#define DGI_MSG_BACKUP_ACK ((dg_msg_type)(67))  /* backup -> originator, one-way */
#define DGI_MSG_GET ((dg_msg_type)(68))  /* request */
#define DGI_MSG_GET_RES ((dg_msg_type)(69))  /* response */
#define DGI_MSG_CACHE_CREATE ((dg_msg_type)(70))  /* request, to every node */
#define DGI_MSG_CACHE_DESTROY ((dg_msg_type)(71))  /* request, to every node */
#define DGI_MSG_CACHE_CONFIGS ((dg_msg_type)(72))  /* one-way: every cache config, to a new node */
#define DGI_MSG_ACK ((dg_msg_type)(73))  /* response: result and a count */
#define DGI_MSG_DEMAND ((dg_msg_type)(74))  /* rebalancing: request a batch of a partition */
#define DGI_MSG_SUPPLY ((dg_msg_type)(75))  /* response: entries */
#define DGI_MSG_SCAN ((dg_msg_type)(76))  /* request a page of a partition */
#define DGI_MSG_SCAN_RES ((dg_msg_type)(77))  /* response: entries */
#define DGI_MSG_SIZE ((dg_msg_type)(78))  /* request: primary entries of a cache on a node */
#define DGI_MSG_CLEAR ((dg_msg_type)(79))  /* request: clear a cache on a node */
#define DGI_MSG_LOST_RESET ((dg_msg_type)(80))  /* request: clear the lost marks on a node */
#define DGI_MSG_PUSH ((dg_msg_type)(81))  /* request: a leaving node hands a partition over */
#define DGI_MSG_HANDOFF ((dg_msg_type)(82))  /* request to all: partitions handed over (a LIST of I64) */
#define DGI_MSG_OWNED ((dg_msg_type)(83))  /* request: which of these partitions do you own? */
#define DGI_MSG_OWNED_RES ((dg_msg_type)(84))  /* response: the ones it owns (a LIST of I64) */
#define DGI_MSG_CACHE_LAST ((dg_msg_type)(85))

enum { OP_PUT = DGI_CACHE_OP_PUT, OP_REMOVE = DGI_CACHE_OP_REMOVE,
	OP_PUT_IF_ABSENT = DGI_CACHE_OP_PUT_IF_ABSENT, OP_REPLACE = DGI_CACHE_OP_REPLACE,
	OP_GET_AND_PUT = DGI_CACHE_OP_GET_AND_PUT };

typedef struct dgi_msg_update {
	int64_t cache_id, part, topver;
	int64_t op;                 /* OP_* */
	int64_t sync;               /* dg_write_sync */
	int64_t op_node, op_seq;    /* originator and its update counter */
	int64_t fut;                /* originator's future awaiting backup acks; 0 none */
	dg_bytes key, val;          /* val.ptr NULL: no value (remove) */
} dgi_msg_update;

typedef struct dgi_msg_update_res {
	int64_t res;                /* dg_err */
	int64_t flag;               /* removed / put / replaced / had */
	int64_t nbackups;           /* backups the primary forwarded to (acks expected) */
	int64_t backups[DGI_MAX_COPIES - 1];
	dg_bytes old;               /* OP_GET_AND_PUT: the previous value, or null */
} dgi_msg_update_res;

typedef struct dgi_msg_backup {
	int64_t cache_id, part, topver;
	int64_t ver_topver, ver_counter, ver_order;
	int64_t expire_ms;
	int64_t op_node, op_seq;
	int64_t fut;                /* ack to op_node with this id; 0: no ack */
	dg_bytes key, val;          /* val.ptr NULL: removal */
} dgi_msg_backup;

typedef struct dgi_msg_backup_ack {
	int64_t fut, res;
} dgi_msg_backup_ack;

#define DGI_GET_SUPPLIER 0x1    /* serve from the store whatever its state */

typedef struct dgi_msg_get {
	int64_t cache_id, part, topver, flags;
	dg_bytes key;
} dgi_msg_get;

typedef struct dgi_msg_get_res {
	int64_t found;
	dg_bytes val;
} dgi_msg_get_res;

typedef struct dgi_msg_ack {    /* ACK; also CACHE_DESTROY/SIZE/CLEAR/LOST_RESET requests */
	int64_t res;                /* dg_err (requests: the cache id) */
	int64_t value;              /* a count */
} dgi_msg_ack;

typedef struct dgi_msg_cfg {    /* CACHE_CREATE */
	dg_str name;
	int64_t mode, backups, sync, atomicity, partitions, read_from_backup,
	    persistence, ttl_ms;
} dgi_msg_cfg;

typedef struct dgi_msg_page_req {   /* DEMAND, SCAN */
	int64_t cache_id, part, topver;
	int64_t after;              /* hash (as int64) after which to continue */
	int64_t first;              /* 1: from the start (after is ignored) */
	int64_t max;                /* DEMAND: bytes, SCAN: entries */
} dgi_msg_page_req;

/* PUSH; HANDOFF (part: unused, list: I64 partitions); OWNED (part: the
 * asker's topology version, list: I64 partitions) */
typedef struct dgi_msg_push {
	int64_t cache_id, part;
	dg_raw list;                /* entries as in SUPPLY */
} dgi_msg_push;

/* SUPPLY, SCAN_RES, CACHE_CONFIGS: one LIST read by the handler
 * (dg_msg_raw).  SUPPLY and SCAN_RES: I64 more, I64 last hash, then per
 * entry BYTES key, BYTES value (null: tombstone), I64 ver topver, I64
 * counter, I64 order, I64 expire.  CACHE_CONFIGS: per cache the fields of
 * CACHE_CREATE in order. */

void dgi_cache_msgs_define(void);

static inline void dgi_cfg_to_msg(const dg_cache_config *c, dgi_msg_cfg *m)
{
	m->name.ptr = c->name;
	m->name.len = (uint32_t)strlen(c->name);
	m->mode = c->mode;
	m->backups = c->backups;
	m->sync = c->write_sync;
	m->atomicity = c->atomicity;
	m->partitions = c->partitions;
	m->read_from_backup = c->read_from_backup;
	m->persistence = c->persistence;
	m->ttl_ms = (int64_t)c->ttl_ms;
}

/* ---- caches and the grid (grid.c, the operations, rebalance.c) ---- */

/* Lifetime.  Operations reach a cache's partitions and affinity without a
 * lock, inside a section (transport.h, "sections"): every handler and
 * reply callback is in one, and so is every call that starts here (the
 * public operations, what txn uses, the grid's own threads).  An affinity
 * a topology change replaces goes to the grid's limbo, and a destroyed
 * cache's partitions, marks and affinity to its grave entry: both are
 * freed once every section that could have seen them has ended
 * (dgi_grid_reclaim, from the sweeper every second) — however long an
 * operation held them (an LMDB commit, a remote wait).  A section that
 * starts after the destroy sees `dead` and touches nothing else.  The
 * handle itself (this struct: config, counters, histograms, a few hundred
 * bytes) stays until the node stops, so handles held anywhere keep
 * answering DG_ERR_CLOSED. */
struct dg_cache {
	dgi_grid *g;
	dg_cache_config cfg;
	uint32_t id;
	_Atomic bool dead;              /* destroyed (or node stopping) */
	struct dg_cache *grave_next;    /* destroyed caches (grid->mu) */
	uint64_t grave_tag;             /* dgi_epoch_retire's at the destroy */
	bool reclaimed;                 /* parts, lost, handed, aff freed (grid->mu) */
	dgi_part *parts;                /* cfg.partitions */
	_Atomic(dgi_aff *) aff;         /* current; NULL before the first topology */
	_Atomic uint8_t *lost;          /* a byte per partition: lost (grid->mu writes) */
	_Atomic uint8_t *handed;        /* a byte per partition: its sole owner left
	                                   gracefully and handed it over (not lost) */
	bool fresh;                     /* created here, cluster-wide: no data to fetch */
	_Atomic uint64_t puts, removes, hits, misses, remaps, expired;
	_Atomic uint64_t rebal_parts_done, rebal_bytes;
	bool rebal_pending;             /* rebalancer: partitions were moving */
	dgi_lat lat[DG_OP__COUNT];      /* ops started here, by dg_cache_op_kind */
};

/* A caller waiting for an update: the primary's reply and, with FULL_SYNC,
 * every backup's ack (straight to this node).  Lives on the caller's stack,
 * found by id in a striped table; completion posts the semaphore. */
struct fut {
	uint64_t id;
	struct fut *next;
	sem_t sem;
	bool done;                     /* posted */
	bool primary_done;
	bool want_acks;                /* FULL_SYNC: wait for the backups too */
	dg_err err;
	int64_t flag;
	uint32_t nexpect;              /* backups named by the primary */
	dg_node_id expect[DGI_MAX_COPIES];
	bool acked[DGI_MAX_COPIES];
	uint32_t nearly;               /* acks that came before the primary's reply */
	dg_node_id early[DGI_MAX_COPIES];
	dg_buf *old;                   /* OP_GET_AND_PUT: where the old value goes */
	bool had;
};

#define FUT_STRIPES 64

struct fut_stripe {
	pthread_mutex_t mu;
	struct fut *head;
} __attribute__((aligned(64)));

/* A unit of work for the worker pool (writes to persistent caches). */
struct job {
	struct job *next;
	dg_msg_type type;
	dg_msg_in in;                  /* corr, from, flags for the reply */
	uint8_t *raw;                  /* owned copy of the body */
	uint32_t raw_len;
};

/* Writes to persistent caches wait for LMDB's group commit on these
 * threads: more of them make bigger commits (one fsync for more writes). */
#define GRID_WORKERS 16

/* The queue in front of them is bounded: at most GRID_QUEUE_JOBS jobs and
 * GRID_QUEUE_BYTES bytes of bodies (one job is always taken, however big).
 * A write that finds it full is not applied: an UPDATE is answered
 * DG_ERR_BUSY (nothing was applied anywhere: retry), a BACKUP's waiting
 * originator gets DG_ERR_BUSY in its ack (this backup did not apply it;
 * the primary did — as with DG_ERR_STORAGE from a backup).  Refusals are
 * counted and logged (JOBS-FULL, once per 5 s). */
#define GRID_QUEUE_JOBS 4096
#define GRID_QUEUE_BYTES (64u << 20)
extern _Atomic uint32_t dgi_grid_queue_jobs;    /* the jobs bound (tests lower it) */

struct dgi_grid {
	dg_tp *tp;
	dg_member *m;
	dg_registry *reg;
	dgi_grid_config cfg;
	dg_node_id self;
	pthread_mutex_t mu;            /* caches set, topology install, graveyard */
	pthread_cond_t cv;             /* rebalancer and sweeper wake-ups */
	dgi_intmap caches;             /* id -> dg_cache (lock-free lookups) */
	dg_cache *grave;               /* destroyed caches (their handles, until stop) */
	dgi_aff *limbo;                /* replaced affinities not freed yet */
	dg_topology *topo;             /* current (held); grid->mu */
	_Atomic int64_t topver;
	_Atomic int64_t self_order;    /* read by updates without grid->mu */
	bool stopping;
	_Atomic bool leaving;          /* graceful leave: no more updates as primary */
	uint64_t rebal_gen;            /* bumped on every topology: rebalancer restarts */
	dgi_pstore *ps;
	int64_t persisted_topver;      /* highest topology version written to meta */
	struct fut_stripe futs[FUT_STRIPES];
	_Atomic uint64_t next_fut, next_seq;
	int slot;                      /* in fut.c's grid table: fut ids' top byte */
	/* worker pool */
	pthread_mutex_t jmu;
	pthread_cond_t jcv;
	struct job *jhead, *jtail;
	uint32_t jcount;               /* jobs queued (jmu) */
	uint64_t jbytes;               /* their bodies' bytes (jmu) */
	_Atomic uint64_t jrefused;     /* writes refused for a full queue */
	_Atomic uint64_t jlogged_ms;   /* when JOBS-FULL was last written */
	bool jstop;
	pthread_t workers[GRID_WORKERS];
	pthread_t rebalancer, sweeper;
	bool threads_up;
	dgi_tx_op_fn tx_hook;           /* TRANSACTIONAL caches' plain operations */
	void *tx_hook_ctx;
};

/* grid.c */
dg_cache *dgi_grid_cache(dgi_grid *g, uint32_t id);   /* live cache or NULL */
/* Frees the replaced affinities and destroyed caches' memory no section
 * can still use (all: everything, at stop).  Sweeper thread; not from
 * inside a section (its own would hold everything back). */
void dgi_grid_reclaim(dgi_grid *g, bool all);
/* What waits to be freed: affinities in the limbo, destroyed caches not
 * reclaimed yet (tests). */
void dgi_grid_limbo(dgi_grid *g, uint32_t *affs, uint32_t *caches);
/* The affinity of c over the current topology without this node (what a
 * leave will make); NULL on NOMEM or before the first topology. */
dgi_aff *dgi_grid_aff_without_self(dgi_grid *g, dg_cache *c);
void dgi_grid_event(dgi_grid *g, dg_event_kind kind, const char *cache, uint32_t part);
/* Persists a copy: a value, a tombstone (tomb: kept as a record with the
 * tombstone flag until it expires), or (val NULL, !tomb) a deletion. */
dg_err dgi_grid_persist(dgi_grid *g, dg_cache *c, uint32_t part, const uint8_t *key,
    uint32_t klen, const uint8_t *val, uint32_t vlen, const dgi_pver *ver,
    int64_t expire_ms, bool tomb);
void dgi_grid_log(const char *level, const char *id, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Queues a job for the worker pool (it owns j from then on), or
 * DG_ERR_BUSY when the queue is full (GRID_QUEUE_JOBS, _BYTES: j is still
 * the caller's). */
dg_err dgi_grid_job_push(dgi_grid *g, struct job *j);

/* ---- the operations (update.c, primary.c, read.c, fut.c, api.c, txapi.c) ---- */

/* update.c: the message handlers of every operation (and the grid's slot
 * in the future table), registered on the grid's transport. */
void dgi_ops_register(dgi_grid *g);
void dgi_ops_unregister(dgi_grid *g);
void dgi_primary_register(dgi_grid *g);    /* primary.c: UPDATE, BACKUP, BACKUP_ACK */
void dgi_read_register(dgi_grid *g);       /* read.c: GET */
/* Runs a job of the worker pool (an UPDATE or BACKUP of a persistent cache). */
void dgi_ops_run_job(dgi_grid *g, struct job *j);

/* fut.c: futures.  The stripe of id; init (a new id, old: where a
 * GET_AND_PUT's previous value goes), link, unlink and find (stripe
 * locked), complete when all arrived (stripe locked), an ack from a
 * backup, the backups the primary named, and the wait until deadline
 * (monotonic ms; unlinks on timeout: DG_ERR_TIMEOUT). */
struct fut_stripe *dgi_fut_stripe(dgi_grid *g, uint64_t id);
void dgi_fut_init(dgi_grid *g, struct fut *f, dg_buf *old);
void dgi_fut_add(dgi_grid *g, struct fut *f);
void dgi_fut_unlink(struct fut_stripe *s, struct fut *f);
struct fut *dgi_fut_find(struct fut_stripe *s, uint64_t id);
void dgi_fut_check(struct fut_stripe *s, struct fut *f);
void dgi_fut_ack(struct fut *f, dg_node_id from);
void dgi_fut_expect(struct fut *f, const dg_node_id *ids, uint32_t n);
dg_err dgi_fut_wait(dgi_grid *g, struct fut *f, uint64_t deadline);
/* A topology dropped nodes: futures stop waiting for their acks. */
void dgi_futs_forget(dgi_grid *g, const dg_topology *now);
/* The process-wide table of grids that future ids name (top byte): at
 * most DGI_MAX_GRIDS grids in a process at once.  register takes a slot
 * (DG_OK at once when g has one) or fails with DG_ERR_LIMIT when every
 * slot is taken; unregister frees it. */
#define DGI_MAX_GRIDS 255
dg_err dgi_fut_grid_register(dgi_grid *g);
void dgi_fut_grid_unregister(dgi_grid *g);
dgi_grid *dgi_fut_grid(uint64_t id);

/* One update as the primary sees it (primary.c), built by the originator
 * (local primary) or from an UPDATE message. */
struct upd {
	int op;
	dg_write_sync sync;
	uint64_t hash;
	uint32_t part;
	int64_t topver;              /* the sender's */
	const uint8_t *key;
	uint32_t klen;
	const uint8_t *val;
	uint32_t vlen;
	uint64_t op_node, op_seq;
	uint64_t fut;                /* at op_node; 0: no acks */
	/* results */
	int64_t flag;
	dg_buf *old;                 /* the previous value (encoded), or NULL */
	bool had;
	uint32_t nbackups;
	dg_node_id backups[DGI_MAX_COPIES];
};

/* An entry that is neither a tombstone nor expired at wall (ms; 0: do
 * not look at expiry times). */
static inline bool dgi_entry_live(const dgi_entry *e, int64_t wall)
{
	return e != NULL && !(e->flags & DGI_ENTRY_TOMB) &&
	    (e->expire_ms == 0 || e->expire_ms > wall);
}

/* primary.c.  Applies an update as the primary: DG_ERR_REMAP when this
 * node is not the primary under the sender's topology version. */
dg_err dgi_primary_apply(dgi_grid *g, dg_cache *c, struct upd *u);
/* Writes key's next version as its primary (partition locked; e: the key's
 * entry or NULL; val NULL: a removal, kept as a tombstone): persists
 * first, then applies; *ver and *expire: the new version and expiry. */
dg_err dgi_write_new_version(dgi_grid *g, dg_cache *c, uint32_t part, dgi_entry *e,
    int64_t topver, uint64_t hash, const uint8_t *key, uint32_t klen, const uint8_t *val,
    uint32_t vlen, uint64_t op_node, uint64_t op_seq, dgi_pver *ver, int64_t *expire);

/* update.c: the originator.  dgi_update_op runs an update (OP_*) from this
 * node, retrying after remaps up to request_timeout_ms; dgi_update is the
 * same, timed in the cache's latency histogram. */
dg_err dgi_update_op(dg_cache *c, int op, const uint8_t *key, size_t klen,
    const uint8_t *val, size_t vlen, int64_t *flag, dg_buf *old);
dg_err dgi_update(dg_cache *c, int op, const uint8_t *key, size_t klen,
    const uint8_t *val, size_t vlen, int64_t *flag, dg_buf *old);
/* After a remap: a short pause (the topology this node maps on is behind
 * or ahead of the primary's).  DG_ERR_TIMEOUT past deadline. */
dg_err dgi_wait_topology_change(dgi_grid *g, int64_t seen, uint64_t deadline);
/* Errors after which an operation maps its key again and retries. */
bool dgi_retriable(dg_err e);
/* Records an operation of kind begun at t0 (dgi_now_ns) in c's latency
 * histogram, unless e is DG_ERR_INVAL (no operation); returns e. */
dg_err dgi_timed(dg_cache *c, dg_cache_op_kind kind, uint64_t t0, dg_err e);

/* read.c: reads the encoded value of key into out (unwrap: the bytes
 * inside a BYTES value); dgi_get_enc is the same, timed.  DG_ERR_NOT_FOUND. */
dg_err dgi_get_op(dg_cache *c, const uint8_t *key, size_t klen, dg_buf *out, bool unwrap);
dg_err dgi_get_enc(dg_cache *c, const uint8_t *key, size_t klen, dg_buf *out, bool unwrap);

/* api.c: appends p/n to out (out NULL: nothing); appends the byte string
 * inside an encoded BYTES value to out. */
dg_err dgi_append(dg_buf *out, const uint8_t *p, size_t n);
dg_err dgi_unwrap_to(const uint8_t *enc, size_t len, dg_buf *out);
/* Applies a copy (backup, rebalancing): only when newer; tombstone when
 * val is NULL and the partition is MOVING, else a removal.  Persists.
 * Caller holds no lock. */
dg_err dgi_apply_copy(dgi_grid *g, dg_cache *c, uint32_t part, uint64_t hash,
    const uint8_t *key, uint32_t klen, const uint8_t *val, uint32_t vlen,
    const dgi_pver *ver, int64_t expire_ms, uint64_t op_node, uint64_t op_seq);

/* rebalance.c */
void *dgi_rebalancer(void *arg);
void dgi_rebalance_register(dgi_grid *g);
/* Drops the copies this node still holds of partitions it no longer owns
 * (kept for their new owners to fetch) once they have been held for the
 * rent grace and every current owner answers that it OWNS the partition
 * (REBALANCE_OWNED).  Every owner is asked, however many (a REPLICATED
 * cache's partitions are owned by every server), all at once: a cache's
 * round takes one request_timeout_ms at most.  Every cache is swept,
 * however many.  Sweeper thread; takes partition locks one at a time and
 * the grid lock only to read `stopping`. */
void dgi_rent_sweep(dgi_grid *g);
/* Test hooks: the rent grace (ms, default 30000) and a pause of every
 * rebalancer thread in the process (a new owner fetches nothing while
 * set). */
extern _Atomic uint32_t dgi_rent_grace_ms;
extern _Atomic bool dgi_rebalance_paused;
/* Encodes entries of a partition page (SUPPLY, SCAN_RES) into b. */
dg_err dgi_page_encode(dgi_grid *g, dg_cache *c, uint32_t part, uint64_t after,
    bool first, uint64_t max, bool bytes_limit, bool live_only, dg_buf *b);

#endif /* DG_CACHE_INT_H */
