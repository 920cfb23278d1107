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
 *   DG_ERR_STORAGE, DG_ERR_STORAGE_FULL  persistence failed on the
 *                         primary: not applied (a backup's failure is
 *                         retried by the primary; the caller hears
 *                         DG_ERR_TIMEOUT, outcome unknown, if it does not
 *                         succeed in time)
 *   DG_ERR_BUSY           a persistent cache's write found the primary's
 *                         disk queue full: not applied (retry)
 *   DG_ERR_SEGMENTED      this node reaches no majority of the voting
 *                         servers (partition_policy majority): refused at
 *                         once, not applied — gets, puts, size, clear,
 *                         scans and txs alike — until it rejoins
 *   DG_ERR_NOMEM
 */
#ifndef DATAGRID_H
#define DATAGRID_H

#include "marshal/marshal.h"
#include "cache/cache.h"
#include "txn/txn.h"

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

/* What each side of a network partition does (PROTOCOL.md, "Majority").
 * MAJORITY: topology changes need a majority of the voting servers (the
 * baseline, or every server); a node that cannot reach a majority within
 * the failure timeout is SEGMENTED and refuses every operation with
 * DG_ERR_SEGMENTED until the network heals and it rejoins; copies are
 * served only under a lease a majority renews, so no read returns a value
 * older than an acknowledged write.  A cluster of two voting servers stops
 * when either is unreachable.  NONE: each side goes on alone (the state
 * before 0.2: split brain, acknowledged writes lost on healing). */
typedef enum dg_partition_policy {
	DG_PARTITION_POLICY_MAJORITY = 0,
	DG_PARTITION_POLICY_NONE = 1
} dg_partition_policy;

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
	uint32_t tx_topology_timeout_ms; /* a topology change waits this long for
	                                 the transactions of the older topology,
	                                 then rolls back those not yet prepared;
	                                 default 1000 */
	uint32_t tx_done_capacity;    /* finished transactions remembered (60 s
	                                 each, for late messages and recovery)
	                                 in memory reserved and touched at
	                                 start: 56 bytes each (rounded up to
	                                 powers of two); past it the memory
	                                 grows.  Size it to the txs this node
	                                 takes part in per minute; default
	                                 65536 (3.5 MiB), 0 = grow from a few */
	const char *data_dir;         /* persistence directory; NULL: caches
	                                 with persistence cannot be created */
	size_t storage_map_size;      /* LMDB map size; default 1 GiB */
	const char *encryption_key_file; /* encryption at rest: a file of 64 hex
	                                 digits (openssl rand -hex 32), mode 0600
	                                 or stricter: the master key that wraps
	                                 one AES-256-GCM data key per persistent
	                                 cache of this node; every record written
	                                 is sealed (node/DEPLOY.md, "Encryption
	                                 at rest").  NULL: none — a store with
	                                 encrypted records then fails the start
	                                 (DG_ERR_AUTH), as does the wrong key */
	bool storage_recover;         /* the store in data_dir failed its checks
	                                 (truncated, a record's CRC-32C, its
	                                 tree): move it aside (data.mdb.damaged-
	                                 TIME) and start empty, fetching this
	                                 node's partitions from their backups;
	                                 false (the default): dg_node_start
	                                 fails with DG_ERR_STORAGE_DAMAGED */
	bool storage_nosync;          /* no fsync per commit: faster; a machine
	                                 (not process) crash may lose the last
	                                 acknowledged writes */
	size_t recv_max;              /* largest peer message; default 16 MiB */
	uint32_t wait_spin_us;        /* a call of this API that waits for other
	                                 nodes (a remote get or put, a batch, a
	                                 transaction's phase) spins up to this
	                                 long before it sleeps — only while it is
	                                 the process's one call waiting, and one
	                                 thread per two CPUs at most: a sequential
	                                 caller's answers then find it running,
	                                 not asleep (round trips ~2x faster on a
	                                 2-CPU VM); it costs that thread's CPU
	                                 while it waits.  Default 1000; 0: sleep
	                                 at once */
	uint32_t reactor_spin_us;     /* the thread that reads this node's peer
	                                 connections, after it handled messages
	                                 and sent some (a reply, a forward) or
	                                 while a call of this process waits,
	                                 polls for more this long before it
	                                 sleeps, yielding its CPU to any other
	                                 runnable thread: under load the next
	                                 message finds it running, not asleep
	                                 (a wake-up saved per message); half the
	                                 CPUs' worth of nodes per process spin
	                                 at once, an idle node not at all.
	                                 Default 0 (sleep at once); 50 is what
	                                 the benchmarks measured */
	uint32_t rebalance_batch_bytes; /* per page of entries (rebalancing,
	                                 psync, scans); default 512 KiB; at most
	                                 half of recv_max */
	uint32_t rebalance_throttle_ms; /* a new owner's pause after each batch of
	                                 entries it receives (spares the
	                                 suppliers and the network); 0 (the
	                                 default): none */
	bool client;                  /* a client node: joins, owns no partitions */
	int partition_policy;         /* dg_partition_policy; default MAJORITY */
	const char *admin_url;        /* admin endpoint for dgctl: tcp://HOST:PORT
	                                 (tls+tcp:// with the node's TLS files);
	                                 NULL: none (the default) */
	const char *http_url;         /* HTTP /metrics (Prometheus text):
	                                 http://HOST:PORT, or https://HOST:PORT
	                                 with the node's TLS files (no client
	                                 certificate asked); port 0 picks a free
	                                 port (dg_node_http_address); NULL: none
	                                 (the default) */
	const char *http_auth_basic;  /* "user:password": every request must
	                                 carry HTTP basic auth with it; NULL:
	                                 none */
	const char *http_auth_token;  /* a bearer token ("Authorization: Bearer
	                                 TOKEN") accepted as well; NULL: none */
	uint32_t http_idle_timeout_ms;/* a connection's request must arrive
	                                 within this of its accept or of the last
	                                 answer, else it is closed; default 10000 */
	uint32_t http_max_connections;/* open HTTP connections; a new one past
	                                 it closes the longest-waiting idle one;
	                                 default 64 */
	bool insecure;                /* allows, without a secret, listening
	                                 (listen_url, admin_url, http_url) on an
	                                 address that is not loopback — anyone
	                                 who reaches it could join as a server
	                                 or run any dgctl command — and an
	                                 http:// http_url on a node with TLS
	                                 files; refused otherwise (DG_ERR_INVAL) */
	void (*on_shutdown)(void *ctx); /* dgctl shutdown asked this node to stop:
	                                 called from an admin thread after the
	                                 answer went out, once per request
	                                 accepted (a second dgctl shutdown calls
	                                 it again); it must not stop the node
	                                 itself (dgnode raises SIGTERM); NULL:
	                                 refused */
	void *shutdown_ctx;
	dg_log_fn log_fn;             /* where log lines go (marshal.h "Logging"):
	                                 NULL with log_level 0: as they are (the
	                                 default: stderr); else dg_node_start
	                                 calls dg_log_configure(log_fn, log_ctx,
	                                 log_level) — process-wide, for every
	                                 node of the process */
	void *log_ctx;
	int log_level;                /* dg_log_level; 0: info */
	dg_registry *registry;        /* NULL: the node creates one (dg_node_registry) */
	void (*on_event)(void *ctx, const dg_event *ev);
	void *event_ctx;
} dg_node_config;

/* Fills defaults: a single node on loopback, in memory. */
DG_API void dg_node_config_init(dg_node_config *cfg);

/* Starts a node: listens, joins the cluster through the seeds (or forms
 * one), learns the caches the cluster has, loads persisted data from
 * data_dir and takes its share of partitions.  Blocks until joined (up to
 * join_timeout_ms; while seeds of a cluster answer, up to join_timeout_ms
 * plus the longer of twice that and twice the failure detection).  *out is owned by the caller: dg_node_stop.  The config
 * is copied.  Errors: DG_ERR_INVAL (the message logged names the setting),
 * DG_ERR_ADDRINUSE, DG_ERR_NET, DG_ERR_TLS, DG_ERR_AUTH / DG_ERR_REFUSED
 * (a seed refused this node), DG_ERR_TIMEOUT (no cluster to join),
 * DG_ERR_LIMIT (the cluster holds the most nodes a topology can, 1024),
 * DG_ERR_STORAGE, DG_ERR_NOMEM.  An http_url that cannot be served fails
 * the start (logged as id=HTTP-LISTEN): DG_ERR_INVAL (not http://),
 * DG_ERR_ADDRINUSE, DG_ERR_NET. */
DG_API dg_err dg_node_start(const dg_node_config *cfg, dg_node **out);

/* dg_node_start from a config file: the settings dgnode takes (dgnode
 * --help; `setting = value` lines, `#` comments), `cache = SPEC` lines
 * included — those caches are created once the node is up.  The file's
 * errors are printed to stderr naming the line and the setting.  Errors: as
 * dg_node_start; DG_ERR_INVAL for a bad file or setting. */
DG_API dg_err dg_node_start_file(const char *path, dg_node **out);

/* Leaves the cluster gracefully — first handing this node's partitions to
 * the nodes that take them over (bounded by request_timeout_ms) — and frees
 * the node.  Every dg_cache of the node becomes invalid.  NULL is fine.
 * Not from a callback.  Stop every node before the process exits: a node
 * still running when exit() runs OpenSSL's cleanup may crash in it. */
DG_API void dg_node_stop(dg_node *n);

/* The node's registry (types for typed operations); lives with the node. */
DG_API dg_registry *dg_node_registry(dg_node *n);
/* The node's id and the address peers dial.  Static while the node lives. */
DG_API uint64_t dg_node_get_id(const dg_node *n);
DG_API const char *dg_node_address(const dg_node *n);
/* The URL of the admin endpoint dgctl dials (the bound port filled in), or
 * NULL when the node has none (admin_url NULL).  Static while the node
 * lives. */
DG_API const char *dg_node_admin_address(const dg_node *n);
/* The URL of the node's HTTP endpoint (GET /metrics, Prometheus text
 * format 0.0.4): http://HOST:PORT with the port actually bound (http_url
 * may have asked for port 0).  NULL when http_url was NULL (or n is NULL).
 * Owned by the node; static while it lives.  Thread-safe. */
DG_API const char *dg_node_http_address(const dg_node *n);

typedef struct dg_node_info {
	uint64_t id;
	int64_t order;                /* join order; the smallest coordinates */
	bool client;
	bool standby;                 /* a server outside the baseline: owns no
	                                 data (dg_node_baseline_get) */
	char address[128];
} dg_node_info;

/* The current topology: version and up to cap nodes in join order; returns
 * the number of nodes.  Allocates nothing. */
DG_API size_t dg_node_topology(dg_node *n, int64_t *version,
    dg_node_info *out, size_t cap);

/* ------------------------------------------------------------------------
 * Baseline topology: the server addresses that own data
 *
 * Not set ("auto", the default): every server node owns data.  Once set, a
 * server whose address (dg_node_address, as it advertises it) is not in the
 * set is STANDBY: it stays in the topology and serves requests like a
 * client node, but owns no partition of any cache.  A change moves every
 * node to the new affinity at one new topology version; the caches'
 * rebalancing then moves the data (a node taken out hands its partitions
 * over as any old owner does: it supplies them until the new owners have
 * them).  Addresses of nodes that are down stay in the set (listed
 * offline); meanwhile the online members own their partitions.  When no
 * member of the set is online, every server owns data until one is back.
 * The set survives the coordinator's failure (it travels in every
 * topology), and a restart of the whole cluster where nodes have a
 * data_dir: each node keeps it there, and a node that comes back to find
 * no cluster forms one that carries it — under partition_policy majority
 * it is SEGMENTED (refuses with DG_ERR_SEGMENTED) until a majority of the
 * set is back, so a node that missed writes cannot serve its older copies
 * alone.
 * ------------------------------------------------------------------------ */
typedef enum dg_baseline_op {
	DG_BASELINE_OP_SET = 0,       /* exactly these addresses */
	DG_BASELINE_OP_ADD = 1,       /* these too */
	DG_BASELINE_OP_REMOVE = 2     /* all but these; with no set yet, add and
	                                 remove start from every server online */
} dg_baseline_op;

typedef struct dg_baseline_node {
	char address[128];
	bool online;                  /* a server node with this address is in
	                                 the topology */
	uint64_t id;                  /* that node's id; 0 when offline */
} dg_baseline_node;

/* The baseline of the current topology (one snapshot): *is_set (false:
 * auto), its version in *version (may be NULL), and up to cap addresses,
 * sorted, into out.  Returns how many addresses the set holds (0 when
 * auto).  Allocates nothing. */
DG_API size_t dg_node_baseline_get(dg_node *n, bool *is_set, int64_t *version,
    dg_baseline_node *out, size_t cap);

/* Changes the baseline (see above): the coordinator applies it and every
 * node moves to the new topology version; returns once this node has it
 * (at once when nothing changes).  Returns before the data has moved: watch
 * the caches' rebalancing (dg_cache_wait_rebalanced).  Blocks up to
 * timeout_ms (0: request_timeout_ms); not from a callback.  addrs are
 * copied.  why (may be NULL) receives the reason of a refusal.  Errors:
 * DG_ERR_INVAL (bad op, an address empty or of 128 bytes or more, a set
 * that leaves no online server node owning data, or — under
 * partition_policy=majority — one with fewer than a majority of its
 * addresses online), DG_ERR_TIMEOUT (the
 * change may still be applied), DG_ERR_STATE (not in a cluster),
 * DG_ERR_NOMEM, transport errors reaching the coordinator. */
DG_API dg_err dg_node_baseline_change(dg_node *n, dg_baseline_op op,
    const char *const *addrs, size_t naddrs, uint32_t timeout_ms, char *why,
    size_t whylen);

/* ------------------------------------------------------------------------
 * Caches of a node (the operations on a dg_cache: cache/cache.h)
 * ------------------------------------------------------------------------ */
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
#ifdef __cplusplus
}
#endif
#endif /* DATAGRID_H */
