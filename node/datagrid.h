/*
 * datagrid.h — the public header of datagrid, the distributed in-memory
 * data grid.  Include this one header; link libdatagrid (pkg-config
 * datagrid, or find_package(datagrid) and datagrid::datagrid in CMake).
 *
 * It exposes the binary codec (marshal/marshal.h: registered type
 * descriptors, writers, readers, binary objects) and the embedded node API:
 * start a node, create caches, read and write them.
 *
 * Conventions.  Every function returns a dg_err (DG_OK = 0; dg_strerror
 * names each) unless it says otherwise.  Handles are opaque.  Every function
 * is thread-safe unless it says otherwise: many user threads may call the
 * API at once on the same node and cache.  Nothing here keeps a pointer to
 * caller memory after it returns, unless it says so.
 *
 * Errors any cache operation can return, besides those listed with it:
 *   DG_ERR_INVAL          bad argument (NULL handle, empty key, too large)
 *   DG_ERR_CLOSED         the node stopped or the cache was destroyed
 *   DG_ERR_TIMEOUT        the operation did not complete within the node's
 *                         request_timeout_ms; for a write, its outcome is
 *                         unknown (it may have been applied)
 *   DG_ERR_PARTITION_LOST the key's partition lost every copy; reset with
 *                         dg_cache_reset_lost
 *   DG_ERR_STORAGE, DG_ERR_STORAGE_FULL  persistence failed; not applied
 *   DG_ERR_NOMEM
 */
#ifndef DATAGRID_H
#define DATAGRID_H

#include "marshal/marshal.h"

#define DG_VERSION_MAJOR 0
#define DG_VERSION_MINOR 1
#define DG_VERSION_PATCH 0

#ifdef __cplusplus
extern "C" {
#endif

/* "datagrid 0.1.0". Static string. Thread-safe. */
DG_API const char *dg_version(void);

/* ------------------------------------------------------------------------
 * Nodes
 * ------------------------------------------------------------------------ */
typedef struct dg_node dg_node;
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

typedef struct dg_node_config {
	const char *cluster_name;     /* default "datagrid" */
	const char *listen_url;       /* default "tcp://127.0.0.1:47500";
	                                 port 0 picks a free port */
	const char *advertise_url;    /* what peers dial; default listen_url */
	const char *const *seeds;     /* addresses of nodes to join through */
	size_t nseeds;                /* 0: form a cluster alone */
	const uint8_t *secret;        /* cluster secret; NULL: no authentication */
	size_t secret_len;
	const char *tls_cert_key_file;/* PEM cert + key; with tls_ca_file and a
	                                 tls+tcp:// listen_url: TLS between nodes */
	const char *tls_ca_file;
	uint32_t failure_timeout_ms;  /* default 10000 */
	uint32_t heartbeat_ms;        /* default failure_timeout_ms / 5 */
	uint32_t join_timeout_ms;     /* default 10000 */
	uint32_t request_timeout_ms;  /* cache operations; default 10000 */
	const char *data_dir;         /* persistence directory; NULL: caches
	                                 with persistence cannot be created */
	size_t storage_map_size;      /* LMDB map size; default 1 GiB */
	bool storage_nosync;          /* no fsync per commit: faster; a machine
	                                 (not process) crash may lose the last
	                                 acknowledged writes */
	size_t recv_max;              /* largest peer message; default 16 MiB */
	uint32_t rebalance_batch_bytes; /* per supply message; default 512 KiB */
	bool client;                  /* a client node: joins, owns no partitions */
	dg_registry *registry;        /* NULL: the node creates one (dg_node_registry) */
	void (*on_event)(void *ctx, const dg_event *ev);
	void *event_ctx;
} dg_node_config;

/* Fills defaults: a single node on loopback, in memory. */
DG_API void dg_node_config_init(dg_node_config *cfg);

/* Starts a node: listens, joins the cluster through the seeds (or forms
 * one), learns the caches the cluster has, loads persisted data from
 * data_dir and takes its share of partitions.  Blocks until joined (up to
 * join_timeout_ms).  *out is owned by the caller: dg_node_stop.  The config
 * is copied.  Errors: DG_ERR_INVAL (the message logged names the setting),
 * DG_ERR_ADDRINUSE, DG_ERR_NET, DG_ERR_TLS, DG_ERR_AUTH / DG_ERR_REFUSED
 * (a seed refused this node), DG_ERR_TIMEOUT (no cluster to join),
 * DG_ERR_STORAGE, DG_ERR_NOMEM. */
DG_API dg_err dg_node_start(const dg_node_config *cfg, dg_node **out);

/* Leaves the cluster gracefully — first handing this node's partitions to
 * the nodes that take them over (bounded by request_timeout_ms) — and frees
 * the node.  Every dg_cache of the node becomes invalid.  NULL is fine.
 * Not from a callback. */
DG_API void dg_node_stop(dg_node *n);

/* The node's registry (types for typed operations); lives with the node. */
DG_API dg_registry *dg_node_registry(dg_node *n);
/* The node's id and the address peers dial.  Static while the node lives. */
DG_API uint64_t dg_node_id(const dg_node *n);
DG_API const char *dg_node_address(const dg_node *n);

typedef struct dg_node_info {
	uint64_t id;
	int64_t order;                /* join order; the smallest coordinates */
	bool client;
	char address[128];
} dg_node_info;

/* The current topology: version and up to cap nodes in join order; returns
 * the number of nodes.  Allocates nothing. */
DG_API size_t dg_node_topology(dg_node *n, int64_t *version,
    dg_node_info *out, size_t cap);

/* ------------------------------------------------------------------------
 * Caches
 * ------------------------------------------------------------------------ */
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

typedef struct dg_cache_config {
	char name[DG_CACHE_NAME_MAX];  /* UTF-8, 1..127 bytes */
	dg_cache_mode mode;            /* default DG_PARTITIONED */
	uint32_t backups;              /* default 0; ignored for REPLICATED */
	dg_write_sync write_sync;      /* default DG_FULL_SYNC */
	dg_atomicity atomicity;        /* default DG_ATOMIC */
	uint32_t partitions;           /* default 1024, 1..65536 */
	bool read_from_backup;         /* default true: a node that holds an
	                                  owning copy reads it locally */
	bool persistence;              /* default false: needs the node's data_dir */
	uint64_t ttl_ms;               /* 0: entries never expire */
} dg_cache_config;

/* Fills defaults and copies name (truncated to DG_CACHE_NAME_MAX - 1). */
DG_API void dg_cache_config_init(dg_cache_config *cfg, const char *name);

/* Creates a cache on every node of the cluster, present and future, and
 * returns this node's handle (valid until dg_node_stop or destroy).
 * Creating an existing cache with the same config returns it.  Errors:
 * DG_ERR_EXISTS (exists with another config), DG_ERR_INVAL (config:
 * logged), DG_ERR_TIMEOUT, DG_ERR_NOMEM. */
DG_API dg_err dg_cache_create(dg_node *n, const dg_cache_config *cfg,
    dg_cache **out);
/* This node's handle for an existing cache.  DG_ERR_NOT_FOUND. */
DG_API dg_err dg_cache_get_by_name(dg_node *n, const char *name, dg_cache **out);
/* Destroys the cache on every node (data included, persisted data too).
 * Handles to it return DG_ERR_CLOSED afterwards.  DG_ERR_NOT_FOUND. */
DG_API dg_err dg_cache_destroy(dg_node *n, const char *name);
/* Names of the caches, into out (up to cap configs); returns how many. */
DG_API size_t dg_cache_list(dg_node *n, dg_cache_config *out, size_t cap);
DG_API const dg_cache_config *dg_cache_config_of(const dg_cache *c);

/* ---- raw bytes: keys and values are byte strings ----
 * Keys are 1..DG_KEY_MAX-8 bytes, values 0..DG_VALUE_MAX-8 bytes.  Values
 * read are appended to a caller-owned dg_buf (reset it to reuse it; growing
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

/* Batches: n keys (and values); keys[i] of klens[i] bytes. */
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
/* Registered C structs: the key and value are written with the given
 * descriptors (from dg_registry_register on dg_node_registry). */
DG_API dg_err dg_cache_put_obj(dg_cache *c, const dg_desc *kd, const void *key,
    const dg_desc *vd, const void *val);
/* Decodes the stored value into *val (strings, bytes and arrays copied into
 * arena).  DG_ERR_NOT_FOUND, DG_ERR_TYPE_MISMATCH, DG_ERR_NOSPACE (arena). */
DG_API dg_err dg_cache_get_obj(dg_cache *c, const dg_desc *kd, const void *key,
    const dg_desc *vd, void *val, dg_arena *arena);

/* ---- scan: every entry, a page at a time ----
 * A cursor walks the partitions in order, fetching up to page_size entries
 * per request from each partition's primary, so a large cache never builds
 * one huge reply.  Every entry present for the whole scan is returned once;
 * entries written or removed during it may or may not be.  Not thread-safe:
 * one thread per cursor. */
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
} dg_cache_metrics;
DG_API dg_err dg_cache_get_metrics(dg_cache *c, dg_cache_metrics *out);

/* Waits until this node owns every partition it should (no MOVING), up to
 * timeout_ms.  DG_ERR_TIMEOUT. */
DG_API dg_err dg_cache_wait_rebalanced(dg_cache *c, uint32_t timeout_ms);

#ifdef __cplusplus
}
#endif
#endif /* DATAGRID_H */
