/*
 * txentries.h — a transaction's entries on its near node (txn/, private).
 *
 * Every key a transaction touched, once: (cache id, partition, encoded key)
 * with what the tx did to it — read (and the version it saw: OPTIMISTIC
 * SERIALIZABLE validates it at prepare), wrote a value, or removed it — in
 * the order first touched.  Reads inside the tx see its own writes.
 *
 * Memory: one arena per tx made of chunks (first chunk inline in the
 * struct, 1 KiB; later chunks doubling), holding key/value bytes and the
 * entries past the first 8 (those sit inline in the struct); an
 * open-addressing index of entry positions keyed by a 64-bit hash of
 * (cache id, key), its first 16 slots inline.  A small tx (8 keys, key and
 * value bytes within 1 KiB) allocates nothing beyond its struct;
 * dgi_txents_bytes reports the heap bytes it holds (for dgbench txn's
 * heap_bytes_per_op).  A value rewritten in place reuses its slot when it
 * fits.  No per-key allocation, no map keyed by boxed integers.
 *
 * Not thread-safe: a transaction is driven by one thread at a time.
 */
#ifndef DG_TXN_TXENTRIES_H
#define DG_TXN_TXENTRIES_H

#include "marshal/marshal.h"

enum { DGI_TXOP_READ = 1, DGI_TXOP_PUT = 2, DGI_TXOP_REMOVE = 3 };

typedef struct dgi_txent {
	uint32_t cache_id;
	uint32_t part;
	uint64_t hash;            /* caller's hash of the encoded key bytes */
	int op;                   /* DGI_TXOP_*: the last thing the tx did */
	bool read;                /* the tx read the key (even if it wrote it later) */
	bool found;               /* the read found a value */
	bool read_locked;         /* near: the key is locked for the tx (PESSIMISTIC) */
	bool check;               /* near: prepare checks the version read (a
	                             compare-and-set compared the value) */
	bool done;                /* near, commit: confirmed by its primary */
	uint64_t origin;          /* near, commit: the primary it was prepared on */
	uint64_t back_to;         /* near, commit: the node its resend goes back
	                             to (it holds its prepared record, or applied
	                             it); 0: the key's current primary */
	bool recopy;              /* near, commit: back_to applied it but not every
	                             owner confirmed: it re-sends its copies
	                             (DGI_TXP_RECOPY) */
	int64_t ver_topver;       /* the version read (checked at prepare) */
	uint64_t ver_counter;
	uint32_t ver_order;
	const uint8_t *key;       /* into the arena */
	uint32_t klen;
	const uint8_t *val;       /* DGI_TXOP_PUT: the value written; READ: the
	                             value read (repeatable reads); else NULL */
	uint32_t vlen;
} dgi_txent;

#define DGI_TXENTS_INLINE 1024

typedef struct dgi_txents dgi_txents;  /* opaque */

/* A new, empty set (one allocation: the struct with its inline chunk).
 * DG_ERR_NOMEM. */
dg_err dgi_txents_create(dgi_txents **out);
void dgi_txents_destroy(dgi_txents *t);
/* Empties it, keeping the first chunk (a pooled set is reused). */
void dgi_txents_reset(dgi_txents *t);

/* The entry for (cache_id, key), or NULL. */
dgi_txent *dgi_txents_find(dgi_txents *t, uint32_t cache_id, const uint8_t *key,
    uint32_t klen, uint64_t hash);

/* Records a write (val != NULL: PUT; val NULL: REMOVE) of (cache_id, key):
 * creates the entry or updates it (key copied once; the value copied, in
 * place when it fits).  *out (optional) is the entry.  DG_ERR_NOMEM (the
 * set unchanged), DG_ERR_INVAL (empty key). */
dg_err dgi_txents_write(dgi_txents *t, uint32_t cache_id, uint32_t part,
    const uint8_t *key, uint32_t klen, uint64_t hash, const uint8_t *val,
    uint32_t vlen, dgi_txent **out);

/* Records a read: the value seen (val NULL: not found) and its version.
 * A key the tx already wrote keeps its written value (the read is still
 * marked).  Only the first read of a key records found and the version; a
 * key already read keeps the value it read.  Same errors. */
dg_err dgi_txents_read(dgi_txents *t, uint32_t cache_id, uint32_t part,
    const uint8_t *key, uint32_t klen, uint64_t hash, const uint8_t *val,
    uint32_t vlen, int64_t ver_topver, uint64_t ver_counter, uint32_t ver_order,
    dgi_txent **out);

/* Entries in the order first touched: i in [0, count). */
size_t dgi_txents_count(const dgi_txents *t);
dgi_txent *dgi_txents_at(dgi_txents *t, size_t i);

/* Heap bytes this set holds (struct, chunks, index). */
size_t dgi_txents_bytes(const dgi_txents *t);

#endif
