/*
 * pstore.h — persistence of cache entries in LMDB (cache/, private).
 *
 * One LMDB environment per node (a directory), holding two databases:
 *   "entries": key   = be32 cache_id | be16 partition | key bytes (marshalled)
 *              value, format 2 (written since the update id is kept):
 *                    bytes  0..23  dgi_pver, little-endian: topver i64,
 *                                  counter u64, order u32, flags u32 —
 *                                  flags bit 31 (DGI_PREC_FORMAT2) set
 *                    bytes 24..31  expire_ms i64 LE
 *                    bytes 32..39  op_node u64 LE  } the id of the last update
 *                    bytes 40..47  op_seq u64 LE   } applied to the entry
 *                    bytes 48..    value bytes (marshalled)
 *              value, format 1 (older builds; still read): bytes 0..31 as
 *                    above with flags bit 31 clear, then the value bytes
 *                    from byte 32 — no update id: it loads as (0, 0).
 *              The format bit sits where format 1 kept only entry flags
 *              (bit 0, the tombstone), so it tells the two apart record by
 *              record; a format-1 record is rewritten as format 2 by its
 *              next write.  A build older than format 2 cannot read format
 *              2 records (it would take the id for value bytes): no
 *              downgrade once a node has written with this build.
 *              value, format 3 (written since 0.1's integrity checks):
 *                    format 2 with flags bit 30 (DGI_PREC_CRC) set and a
 *                    CRC-32C u32 LE of the whole LMDB key then every value
 *                    byte before it appended; with bit 29 (DGI_PREC_ENC)
 *                    the value bytes are nonce (12) ‖ AES-256-GCM
 *                    ciphertext ‖ tag (16), the LMDB key and the 48-byte
 *                    header authenticated.  A store made by this build
 *                    ("dg-record-format" = 3 in the main tree) holds
 *                    format 3 only, and its meta values end with a CRC-32C
 *                    too; the open scan checks every record (pstore_check.h).
 *              Big-endian prefixes keep one partition's entries contiguous,
 *              so loading, rebalancing and dropping a partition are range
 *              operations.
 *   "meta":    small named blobs (cache configurations), key = a string.
 *
 * Group commit.  LMDB allows one write transaction at a time.  Writers from
 * many threads call dgi_pstore_write; one of them becomes the committer, takes
 * every batch queued so far and applies them all in ONE write transaction,
 * then wakes every writer whose records it committed.  A write returns only
 * after its records are durable (or, with nosync, written to the map without
 * fsync — a crash of the machine, not the process, may lose the last writes).
 *
 * Versions.  A record replaces a stored one only if its version is newer
 * (dgi_pver_cmp > 0); a removal deletes the stored record only if the
 * removal's version is newer than (or equal to) the stored one.  So batches that commit out of order
 * never leave an older value on disk — with one exception: a removal leaves
 * no tombstone, so a put older than a removal that committed before it is
 * applied (nothing is stored to compare with).  Callers must not have a put
 * and a newer removal of one key in flight at once (or must keep tombstones
 * themselves).  A stored value too short to hold a version (corrupt) counts
 * as older than any record, so a write repairs it.
 *
 * Full map.  LMDB cannot commit even a delete once its map is full to the
 * last page, so writes that store something keep a reserve free (1/32 of
 * the map, at least 32 pages, at most 32 MiB): they fail with
 * DG_ERR_STORAGE_FULL when the live pages would pass the map less the
 * reserve.  Removals, drops and meta deletes may use the reserve, so a full
 * store can be emptied and used again.
 *
 * Errors.  Every LMDB error becomes a dg_err: MDB_MAP_FULL →
 * DG_ERR_STORAGE_FULL, anything else → DG_ERR_STORAGE (logged once with the
 * LMDB message, id PSTORE-ERROR).  A failed transaction is aborted: none of
 * the records of that transaction are applied, and every writer whose records
 * were in it gets the error.  (The committer may retry the other writers'
 * batches alone so one bad batch does not fail its neighbours.)
 *
 * Threads: every function is thread-safe.  The environment must not be used
 * across fork().
 */
#ifndef DG_CACHE_PSTORE_H
#define DG_CACHE_PSTORE_H

#include "cache/cache.h"    /* dgi_pver */

/* Bit 31 of a stored record's flags: the record has format 2.  pstore's
 * own; a record handed to dgi_pstore_write must not set it. */
#define DGI_PREC_FORMAT2 0x80000000u
/* Bit 30: the record ends with a CRC-32C (format 3).  pstore's own too. */
#define DGI_PREC_CRC 0x40000000u
/* Bit 29: the value is AES-256-GCM sealed (nonce ‖ ciphertext ‖ tag).
 * pstore's own too. */
#define DGI_PREC_ENC 0x20000000u
#define DGI_PREC_RESERVED (DGI_PREC_FORMAT2 | DGI_PREC_CRC | DGI_PREC_ENC)

typedef struct dgi_prec {
	uint32_t cache_id;
	uint32_t part;             /* < 65536 */
	const uint8_t *key;
	uint32_t klen;
	const uint8_t *val;        /* NULL: removal */
	uint32_t vlen;
	dgi_pver ver;              /* flags: the caller's, bit 31 excepted */
	int64_t expire_ms;         /* wall clock ms; 0 = never */
	uint64_t op_node, op_seq;  /* the last update applied (a retry is applied
	                              once); (0, 0) from a format-1 record */
} dgi_prec;

typedef struct dgi_pstore_config {
	const char *dir;           /* created if missing (mode 0700) */
	size_t map_size;           /* bytes; default (and 0) 1 GiB */
	bool nosync;               /* MDB_NOSYNC: fast, a machine crash may lose the last commits */
	uint32_t max_batch;        /* most records per group transaction; default 4096
	                            * (one larger write still commits alone, whole) */
	const uint8_t *master_key; /* 32 bytes: encrypt every record (AES-256-
	                            * GCM, a data key per cache wrapped by this
	                            * key); NULL: plaintext (encrypted records
	                            * found make the open fail, DG_ERR_AUTH) */
	bool recover;              /* a damaged store is moved aside (data.mdb.
	                            * damaged-TIME) and a new one made, in place
	                            * of DG_ERR_STORAGE_DAMAGED */
} dgi_pstore_config;

void dgi_pstore_config_init(dgi_pstore_config *cfg);

typedef struct dgi_pstore dgi_pstore;

/* Opens (creating) the environment.  DG_ERR_INVAL (no dir), DG_ERR_STORAGE
 * (cannot create or open; logged with the reason), DG_ERR_NOMEM. */
dg_err dgi_pstore_open(const dgi_pstore_config *cfg, dgi_pstore **out);
/* Waits for every call in progress (writes, drops, loads, meta), closes.
 * Calls that start while it waits get DG_ERR_CLOSED; calls after it returns
 * are the caller's bug (ps is freed).  NULL is fine. */
void dgi_pstore_close(dgi_pstore *ps);

/* Durably applies n records (see Versions) — group-committed with other
 * threads' writes.  Blocks until committed; the records are read in place
 * (not copied) while the call blocks.  All or nothing for this call's
 * records; n == 0 is DG_OK.  Allocates nothing.  Writes format 2.
 * DG_ERR_STORAGE_FULL, DG_ERR_STORAGE, DG_ERR_INVAL (part >= 65536, key NULL
 * or empty, key longer than LMDB's key limit less the 6-byte prefix: 505
 * bytes, flags with DGI_PREC_FORMAT2), DG_ERR_CLOSED (called while
 * dgi_pstore_close runs). */
dg_err dgi_pstore_write(dgi_pstore *ps, const dgi_prec *recs, size_t n);

/* Calls fn for every stored record of cache_id (all partitions, in key
 * order) inside one read transaction; fn returning non-DG_OK stops and is
 * returned.  Record pointers are valid during the call only (they point
 * into the map).  Both formats load; fn sees the caller's flags (without
 * DGI_PREC_FORMAT2) and, for a format-1 record, the update id (0, 0).
 * DG_ERR_INVAL (fn NULL), DG_ERR_STORAGE (LMDB error, or a corrupt record:
 * key without bytes after the prefix, value shorter than 32 bytes, or than
 * 48 for format 2 — the records before it were handed to fn). */
dg_err dgi_pstore_load(dgi_pstore *ps, uint32_t cache_id,
    dg_err (*fn)(void *ctx, const dgi_prec *rec), void *ctx);

/* Deletes every record of one partition of a cache, or (part == UINT32_MAX)
 * of the whole cache.  Queued with the writes, but committed alone and in
 * steps (a transaction per ~1024 freed pages or max_batch records) so a
 * large drop fits a nearly full map; no write of this store interleaves
 * with the steps.  On an error the steps already committed stay deleted
 * (call again to finish).  DG_ERR_INVAL (part >= 65536 and not
 * UINT32_MAX), DG_ERR_STORAGE_FULL (LMDB copies pages even to delete),
 * DG_ERR_STORAGE. */
dg_err dgi_pstore_drop(dgi_pstore *ps, uint32_t cache_id, uint32_t part);

/* Named metadata blobs (cache configurations). val NULL deletes (deleting
 * a missing name is DG_OK).  Puts are group-committed like writes.  Names
 * are stored with their NUL; meta_each hands them out in name order inside
 * one read transaction, pointers valid during the call only.  DG_ERR_INVAL
 * (name NULL, empty or longer than 510 bytes; fn NULL), DG_ERR_STORAGE_FULL,
 * DG_ERR_STORAGE. */
dg_err dgi_pstore_meta_put(dgi_pstore *ps, const char *name,
    const void *val, size_t len);
dg_err dgi_pstore_meta_each(dgi_pstore *ps,
    dg_err (*fn)(void *ctx, const char *name, const uint8_t *val, size_t len),
    void *ctx);

/* Encryption at rest (with a master key): makes (or finds) the data key
 * of cache_id — before its first write (a write without it fails,
 * DG_ERR_STATE).  DG_OK without a master key.  DG_ERR_AUTH: the master key
 * does not open the stored data key. */
dg_err dgi_pstore_use_key(dgi_pstore *ps, uint32_t cache_id);
/* Re-wraps every data key under master (32 bytes) in one transaction and
 * uses master from then on; the records stay as they are.  DG_ERR_STATE
 * (no master key), DG_ERR_AUTH (the current master key does not open a
 * data key), DG_ERR_STORAGE*. */
dg_err dgi_pstore_rekey(dgi_pstore *ps, const uint8_t master[32]);

typedef struct dgi_pstore_stats {
	uint64_t commits;          /* write transactions committed */
	uint64_t records;          /* records written (applied or skipped as older) */
	uint64_t skipped_older;    /* records not applied: the stored version was newer */
	uint64_t failures;         /* write transactions that failed */
	uint64_t map_size, map_used; /* bytes */
} dgi_pstore_stats;
void dgi_pstore_get_stats(dgi_pstore *ps, dgi_pstore_stats *out);

/* Test hook: the next write transaction of ps fails with the LMDB error
 * mdb_err (MDB_MAP_FULL, EIO, ...) instead of committing — aborted, logged
 * and counted like a real failure (a group then retries each write alone,
 * and those retries commit).  0 cancels. */
void dgi_pstore_fail_next(dgi_pstore *ps, int mdb_err);

#endif
