/*
 * cache_int.h — internals of cache/ (not installed).
 *
 * Objects
 * -------
 * dgi_grid   one per node: the caches (an int map by cache id, published
 *            copy-on-write: lock-free lookup by id), the current topology
 *            and server-node list, the LMDB store,
 *            a worker pool for persistent writes, the rebalancer and the
 *            expiry sweeper.
 * dg_cache   one cache on this node: its config, id, partitions and the
 *            current affinity (published atomically per topology version).
 * part       one partition's copy on this node: a lock, an open-addressing
 *            table of entries (store.c), the version counter it assigns as
 *            primary, its state (NONE, OWNING, MOVING, LOST), the FULL_SYNC
 *            writes it waits on as primary (pending.c) and the last update
 *            id of every thread that wrote to it (dedup.c).
 * entry      key and value bytes (marshalled) inline after the header, the
 *            version, the expiry time and the id of the last update applied
 *            (a retried update is applied once).
 *
 * Versions (DESIGN.md): (topology version, counter, node order), assigned
 * by the primary; a copy is replaced only by a newer version — backups,
 * rebalancing and persistence all apply that one rule (dgi_pver_cmp).
 *
 * Threads.  Local operations run in the caller's thread under the
 * partition's lock; remote ones are sent and the caller waits for the
 * reply callback (a semaphore), a local FULL_SYNC write or a read of a
 * pending entry for its pending write (pending.c).  Handlers run on the
 * transport's threads and never block, except that writes to persistent
 * caches are handed to the worker pool (they wait for LMDB's group
 * commit).  Lock order: grid->mu, then a partition's mu.
 */
#ifndef DG_CACHE_INT_H
#define DG_CACHE_INT_H

#include "cache.h"
#include "intmap.h"
#include "pstore.h"
#include "transport/transport.h"
#include "marshal/marshal_int.h" /* TAG_BYTES */
#include "marshal/mix.h"

#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

/* ---- hashing and affinity (affinity.c) ---- */

/* 64-bit hash of a key's canonical bytes; identical on every node. */
uint64_t dgi_key_hash(const uint8_t *p, size_t n);
/* The hash's steps (affinity.c): 8 bytes a step, multiply-rotate,
 * finalized with dgi_mix64 (marshal/mix.h).  Not for adversarial keys (a
 * partition table is not a hash-flooding target: a hot partition is the
 * worst case). */
#define DGI_KH_K 0x9e3779b97f4a7c15ULL
static inline uint64_t dgi_kh_rd64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	v = __builtin_bswap64(v);
#endif
	return v;
}
static inline uint64_t dgi_kh_start(size_t n)
{
	return 0x2545f4914f6cdd1dULL ^ (n * DGI_KH_K);
}
static inline uint64_t dgi_kh_step(uint64_t h, uint64_t w)
{
	h = (h ^ (w * DGI_KH_K)) * 0x100000001b3ULL;
	return (h << 29) | (h >> 35);
}
static inline uint64_t dgi_kh_end(uint64_t h, uint64_t tail)
{
	return dgi_mix64(h ^ (tail * DGI_KH_K));
}
/* dgi_key_hash of the BYTES encoding of key (TAG_BYTES, n, key: a raw
 * API key), without building it; 8 <= n < 128.  The words of the 2-byte
 * prefix + n key bytes, read from the key alone: word 0 is the prefix and
 * key[0..6), word j key[8j-2 .. 8j+6), the tail the last (n + 2) % 8
 * bytes (n >= 8: every load inside the key).  In line: the local get's. */
static inline uint64_t dgi_key_hash_bytes(const uint8_t *key, size_t n)
{
	uint64_t h = dgi_kh_start(n + 2);
	h = dgi_kh_step(h, TAG_BYTES | (n << 8) | (dgi_kh_rd64(key) << 16));
	if (__builtin_expect(n <= 21, 1)) {
		/* (n + 2) / 8 - 1 is 0 or 1 word after word 0: no loop */
		if (n >= 14)
			h = dgi_kh_step(h, dgi_kh_rd64(key + 6));
	} else {
		const uint8_t *p = key + 6, *end = key + 8 * ((n + 2) / 8) - 2;
		for (; p != end; p += 8) /* ((n + 2) / 8 - 1 words after word 0) */
			h = dgi_kh_step(h, dgi_kh_rd64(p));
	}
	/* the tail's (n + 2) % 8 bytes, the last of the key: >> 1 >> 63 - 8r
	 * is >> 64 - 8r with no shift by 64 (r = 0: no tail, 0) */
	size_t rem = (n + 2) % 8;
	return dgi_kh_end(h, dgi_kh_rd64(key + n - 8) >> 1 >> (63 - 8 * rem));
}
static inline uint32_t dgi_part_of(uint64_t hash, uint32_t parts)
{
	return (uint32_t)(((hash >> 32) * (uint64_t)parts) >> 32);
}

#define DGI_MAX_COPIES 8        /* a PARTITIONED cache: primary + up to 7 backups
                                   (a config limit, refused; REPLICATED: one
                                   copy per server, however many) */

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
	uint8_t *self_kind;         /* parts: DGI_AFF_PRIMARY, _BACKUP or _NONE
	                               for the node it was built on (the local
	                               reads and puts: one load, no search) */
} dgi_aff;

enum { DGI_AFF_PRIMARY = 0, DGI_AFF_BACKUP = 1, DGI_AFF_NONE = 2 };

/* Builds the affinity of a cache over server nodes (ids with their orders,
 * sorted by order): rendezvous hashing, partition p's owners are the
 * `copies` nodes with the highest hash(p, node id).  copies is clamped to
 * nnodes; REPLICATED passes copies = nnodes.  self: the node that will
 * read it (self_kind; 0: none, every partition DGI_AFF_NONE).  NULL on
 * NOMEM. */
dgi_aff *dgi_aff_build(int64_t topver, uint32_t parts, uint32_t copies,
    const dg_node_id *nodes, const int64_t *orders, uint32_t nnodes, dg_node_id self);
void dgi_aff_free(dgi_aff *a);
static inline dg_node_id dgi_aff_owner(const dgi_aff *a, uint32_t p, uint32_t i)
{
	uint16_t k = a->owners[p * a->copies + i];
	return k == UINT16_MAX ? 0 : a->nodes[k];
}
/* Position of node among the owners of p (0 primary), or -1.  In line:
 * the local get's. */
static inline int dgi_aff_role(const dgi_aff *a, uint32_t p, dg_node_id node)
{
	const uint16_t *o = a->owners + (size_t)p * a->copies;
	for (uint32_t i = 0; i < a->copies; i++)
		if (o[i] != UINT16_MAX && a->nodes[o[i]] == node)
			return (int)i;
	return -1;
}
/* A 64-bit digest of p's owner set: the primary, and the backups in any
 * order.  Equal digests: the same primary and backups (BACKUP carries the
 * sender's, so a backup sees whether it agrees with the primary on who
 * holds the partition). */
uint64_t dgi_aff_owners_hash(const dgi_aff *a, uint32_t p);

/* ---- entries and the partition store (store.c) ---- */

#define DGI_ENTRY_TOMB 0x1u     /* a removal, remembered until its expiry */
#define DGI_ENTRY_PENDING 0x2u  /* primary: a FULL_SYNC write not yet on every
                                   backup (pending.c): readers wait */
#define DGI_ENTRY_TENTATIVE 0x4u /* written as the primary, whose pending write
                                   ended when this node lost the role: maybe
                                   not on every backup (psync.c hands it on) */
#define DGI_ENTRY_SEEN 0x8u     /* a loaded entry the cluster's whole copy
                                   holds too, while that copy replaces a
                                   loaded one (rebalance.c, replace_one) */

/* How long a removal is remembered (as a tombstone, in memory and in LMDB):
 * a copy older than it that arrives within that time — a late backup
 * message, a rebalanced batch, a node coming back with persisted data —
 * cannot bring the key back.  A node away longer than this can. */
#define DGI_TOMB_TTL_MS_DEFAULT (10 * 60 * 1000)
extern _Atomic int64_t dgi_tomb_ttl_ms;  /* tests shorten it */
#define DGI_TOMB_TTL_MS atomic_load_explicit(&dgi_tomb_ttl_ms, memory_order_relaxed)

#define DGI_ENTRY_EXP 0x10u     /* data[] begins with an 8-byte expiry
                                   (store.c: set only by a TTL or a
                                   tombstone; 0 is "never") */
#define DGI_ENTRY_OPX 0x20u     /* data[] holds the last update's id whole
                                   (16 bytes, after the expiry when there
                                   is one): an id the partition could not
                                   intern (dgi_entry_op) */
#define DGI_ENTRY_LAYOUT (DGI_ENTRY_EXP | DGI_ENTRY_OPX) /* what is before the
                                   key; set bits stay while the entry's
                                   memory is reused */

/* What an entry can hold.  Keys of 1..DGI_ENTRY_KEY_MAX bytes (klen - 1
 * is kept in 16 bits): every way in — the API, UPDATE, BACKUP, pages,
 * transactions, LMDB — is bounded by DG_KEY_MAX or less, and the store
 * refuses anything longer (DG_ERR_INVAL) rather than cut it.  Topology
 * versions of 0..DGI_ENTRY_TOPVER_MAX (kept in 32 bits): versions are
 * int64 on the wire, in the API and in LMDB, and count membership
 * changes from 1 (a restart continues from the persisted one), so they
 * never come near 2^32; a version outside is refused with DG_ERR_LIMIT
 * (dgi_entry_storable) before anything is persisted or applied, never
 * truncated — a cluster whose topology version passed it takes no writes
 * (TOPVER-LIMIT logged when such a topology is installed). */
#define DGI_ENTRY_KEY_MAX 65536u
#define DGI_ENTRY_TOPVER_MAX INT64_C(0xFFFFFFFF)
_Static_assert(DG_KEY_MAX <= DGI_ENTRY_KEY_MAX, "an entry holds every key the API takes");

static inline dg_err dgi_entry_storable(uint64_t klen, int64_t topver)
{
	if (klen == 0 || klen > DGI_ENTRY_KEY_MAX)
		return DG_ERR_INVAL;
	if (topver < 0 || topver > DGI_ENTRY_TOPVER_MAX)
		return DG_ERR_LIMIT;
	return DG_OK;
}

/* An entry: 32 bytes, then its expiry (when DGI_ENTRY_EXP), the id of its
 * last update (when DGI_ENTRY_OPX), key and value inline.  Its key hash is
 * not kept: the slot holds 16 bits of it (dgi_pslot), and the rare users
 * of the whole hash (rebalancing's pages, a table above 65536 slots
 * growing) compute it again from the key (dgi_entry_hash).  The version's
 * fields are stored without the flags a dgi_pver carries elsewhere
 * (dgi_entry_ver), the topology version in 32 bits (dgi_entry_topver).
 *
 * The update id (originator node, sequence: 16 bytes on the wire and in
 * LMDB) is kept in 8: the index of (node, the sequence's top 16 bits) in
 * the partition's table of them (dgi_part.opn, store.c) above the
 * sequence's low 48 bits; 0 is the id (0, 0).  An id the table cannot
 * take (65535 pairs still in use by the partition's entries, or no memory
 * to grow it) is kept whole in data[] (DGI_ENTRY_OPX).  So an entry's id
 * always reads back exactly (dgi_entry_op): the dedup answers that
 * compare it (primary.c, txapi.c, pending.c) and the copies that carry it
 * (BACKUP, pages, LMDB records) are what they were with 16 bytes.  The
 * table is the partition's, not the grid's: its lock, held by every
 * write, guards it (no shared lock or atomic on a put), and what no entry
 * names any more is found by a pass over one partition's entries.
 *
 * Readers without the partition's lock may look at flags, slack, klen_m1,
 * vlen and data[] (through dgi_entry_key, dgi_entry_klen, dgi_entry_val:
 * the whole id, like the expiry, moves the key); op and the table are
 * read and written under the lock only (a pass rewrites op). */
typedef struct dgi_entry {
	uint64_t counter;           /* the version: topver32, counter, order */
	uint64_t op;                /* the last update applied (above; 0 with
	                               DGI_ENTRY_OPX) */
	uint32_t topver32;          /* dgi_entry_topver */
	uint32_t order;
	/* what a read looks at, right before the key: the read's bytes span
	 * one cache line fewer for some of the entry's alignments */
	uint8_t flags;              /* DGI_ENTRY_* */
	uint8_t slack;              /* unused bytes after the value (up to 255
	                               counted: more, from a value that shrank,
	                               stays unused) */
	uint16_t klen_m1;           /* key bytes - 1: dgi_entry_klen */
	uint32_t vlen;
	uint8_t data[];             /* [expiry], [update id], key, then value */
} dgi_entry;

/* An update id's sequence: its low 48 bits in the entry, the rest with
 * the node in the partition's table. */
#define DGI_OP_LOW_BITS 48
#define DGI_OP_LOW_MASK ((UINT64_C(1) << DGI_OP_LOW_BITS) - 1)
#define DGI_OPN_MAX 65536u      /* table size: indexes 1..65535 */

/* One entry of a partition's table of update-id originators. */
struct dgi_opn {
	uint64_t node;
	uint64_t hi;                /* the sequence >> DGI_OP_LOW_BITS */
};

enum part_state { P_NONE = 0, P_OWNING, P_MOVING, P_LOST };

/* Sources a copy that is not whole remembers (dgi_part.srcs: its
 * supplier, plus the older ones of a copy that was itself partial), and
 * nodes an OWNING copy that is not whole took rented copies from. */
#define DGI_PART_SRCS 4
/* Other owners under the previous topology a MOVING copy may take the
 * whole partition from when its supplier's copy is not whole (dgi_part.alts). */
#define DGI_PART_ALTS 3

/* A slot is 8 bytes: the entry's address in the low 48 bits, the low 16
 * bits of its key hash above them (store.c).  A probe compares those
 * without touching the entry (one cache miss per lookup, not one per
 * probe); a table of up to 65536 slots finds an entry's home slot from
 * them alone.  0: empty. */
typedef uint64_t dgi_pslot;
#define DGI_SLOT_TAG_SHIFT 48

static inline struct dgi_entry *dgi_slot_entry(dgi_pslot s)
{
	return (struct dgi_entry *)(uintptr_t)(s & ((UINT64_C(1) << DGI_SLOT_TAG_SHIFT) - 1));
}

static inline uint64_t dgi_slot_tag(dgi_pslot s)
{
	return s >> DGI_SLOT_TAG_SHIFT;
}

/* The tag a key of that hash has: its low 16 bits. */
static inline uint64_t dgi_slot_tag_of(uint64_t hash)
{
	return hash & 0xFFFFu;
}

/* memcmp(a, b, n) == 0, in line for the common key sizes (8..16 bytes:
 * two loads each side). */
static inline __attribute__((always_inline)) bool dgi_key_eq(const uint8_t *a,
    const uint8_t *b, uint32_t n)
{
	if (n >= 8 && n <= 16) {
		uint64_t x, y, z, w;
		memcpy(&x, a, 8);
		memcpy(&y, b, 8);
		memcpy(&z, a + n - 8, 8);
		memcpy(&w, b + n - 8, 8);
		return ((x ^ y) | (z ^ w)) == 0;
	}
	return memcmp(a, b, n) == 0;
}

/* memcpy(d, s, n) for the short values of the local get (read.c):
 * 16-byte moves, each range copied as its first and its last bytes
 * (overlapping), no call — GCC turns a copy there into a `rep movs`, even
 * of a constant 64 bytes, slow to start.  n >= 1 (so d is not NULL);
 * long values go to memcpy. */
typedef uint8_t dgi_v16 __attribute__((vector_size(16), aligned(1), may_alias));
static inline __attribute__((always_inline)) void dgi_mov16(uint8_t *d, const uint8_t *s)
{
	*(dgi_v16 *)(void *)d = *(const dgi_v16 *)(const void *)s;
}
static inline __attribute__((always_inline)) void dgi_copy_short(uint8_t *d, const uint8_t *s,
    size_t n)
{
	if (n >= 16 && n <= 128) {
		if (n > 32) {
			if (n > 64) {
				dgi_mov16(d + 32, s + 32);
				dgi_mov16(d + 48, s + 48);
				dgi_mov16(d + n - 64, s + n - 64);
				dgi_mov16(d + n - 48, s + n - 48);
			}
			dgi_mov16(d + 16, s + 16);
			dgi_mov16(d + n - 32, s + n - 32);
		}
		dgi_mov16(d, s);
		dgi_mov16(d + n - 16, s + n - 16);
	} else if (n >= 8 && n < 16) {
		memcpy(d, s, 8);
		memcpy(d + n - 8, s + n - 8, 8);
	} else {
		memcpy(d, s, n);
	}
}

/* The bytes of an entry's data[] before its key: the expiry's and the
 * whole update id's, when kept (DGI_ENTRY_EXP 0x10: 8 bytes, DGI_ENTRY_OPX
 * 0x20: 16). */
static inline uint32_t dgi_entry_prefix(uint32_t flags)
{
	return (flags & DGI_ENTRY_LAYOUT) >> 1;
}

typedef struct dgi_part {
	_Alignas(64) _Atomic uint32_t lk; /* dgi_part_lock / dgi_part_unlock
	                               only (a partition starts a cache line:
	                               dg_cache.parts is aligned) */
	dgi_pslot *slots;            /* linear probing on hash (slots[-1]: a
	                               retired table's link, store.c) */
	uint32_t cap;               /* power of two or 0 */
	uint32_t count;             /* entries, tombstones included */
	_Atomic uint32_t seq;       /* odd while a writer holds lk (dgi_part_lock) */
	_Atomic int state;          /* enum part_state (lk, slots, cap, seq and
	                               state: the first 64 bytes, what a read
	                               touches) */
	uint32_t live;              /* entries without the tombstone flag */
	uint32_t limbo_n;           /* retired, not yet tagged (store.c; a table
	                               counts for more than one) */
	uint32_t limbo_ticks;       /* store.c, limbo_tick */
	uint32_t limbo_at;          /* limbo_n of the next step (0: a batch) */
	uint64_t bytes;             /* key + value bytes */
	/* memory unlinked from the table that a lock-free read may still be
	 * looking at (store.c, "Retired memory"): *_new not yet tagged, *_old
	 * retired before limbo_tag */
	dgi_entry *limbo_ents_new, *limbo_ents_old;
	dgi_pslot *limbo_tabs_new, *limbo_tabs_old;
	uint64_t limbo_tag;
	uint64_t counter;           /* versions assigned as primary */
	/* what a write touches besides the first 64 bytes: the second line */
	struct pw *pending;         /* FULL_SYNC writes awaiting backups (pending.c) */
	struct dgi_dd *dd;
	uint32_t dd_cap, dd_count;  /* the update-id table (dedup.c) */
	uint32_t psync_n;           /* psync.c: old owners still to answer
	                               (psync_from; updates wait) */
	uint16_t opn_n;             /* the update-id originators (store.c): */
	uint16_t opn_last;          /* indexes in use 1..opn_n, the one interned last */
	struct dgi_opn *opn;        /* [opn_cap] (index 0 unused), followed by
	                               2 * opn_cap uint16_t hash slots of
	                               indexes (0: empty) */
	int64_t moving_topver;      /* MOVING: the version it started moving at; a
	                               copy older than that may be stale (kept
	                               from an earlier ownership) and is not
	                               served until the partition is OWNING */
	dg_node_id supplier;        /* MOVING: the node it fetches from */
	uint64_t rented_ms;         /* NONE with data: when it stopped owning */
	struct pw *pw_free;         /* records kept for reuse */
	uint32_t pw_nfree;
	struct pw_wait *ww_free;    /* remote waiters kept for reuse (pending.c) */
	uint32_t ww_nfree;
	uint32_t psync_cap;
	uint64_t scan_hashed;       /* keys dgi_part_scan hashed (tests: a page
	                               looks at about what it takes) */
	struct dgi_recent *recent;  /* the last FULL_SYNC copies applied as a
	                               backup (DGI_RECENT of them, a ring;
	                               pending.c, dgi_pw_promoted) */
	uint8_t nrecent, recent_at;
	uint16_t opn_skip;          /* new originators left to keep whole without
	                               a pass over the entries (store.c) */
	uint32_t opn_cap;           /* 0 or a power of two up to DGI_OPN_MAX */
	struct dgi_psync_wait *psync_from; /* [psync_cap] (psync.c) */
	uint64_t psync_sent_ms;
	dg_err psync_err;           /* DG_ERR_STORAGE_FULL while a wait's last
	                               page did not fit this node's store (its
	                               map is full): updates are refused with
	                               it, not told to wait (psync.c,
	                               full_recount); else DG_OK */
	/* Whole copies (transport/PROTOCOL.md, "Rebalancing"); written under mu,
	 * whole is also read without it by the rebalancer's scan.
	 * whole:  the copy holds every entry of the partition — it owned it
	 *         from the start or fetched it from every source — and kept
	 *         them since; a copy rented out stays whole (its new owners
	 *         took the writes after it).
	 * srcs:   not whole: nodes holding what it lacks (the suppliers it was
	 *         fetching from, supplier first; for an OWNING copy, nodes
	 *         with a rented copy that asked it); a node fetching from this
	 *         copy fetches from those too.  None known and not broken: it
	 *         never owned the partition (or was loaded from LMDB).
	 * broken: not whole, and some of what it lacks was held by a node
	 *         that left: it can never be made whole (unless its supplier,
	 *         an owner under the previous topology, holds it whole).
	 * taken:  OWNING, not whole: nodes whose rented copies it fetched in
	 *         full since it owns the partition (they may drop them). */
	_Atomic bool whole;
	bool broken;
	bool stale;                 /* held from before this node was dropped
	                               from the cluster's topology (or came back
	                               as a new incarnation): nothing in it may
	                               be merged into a live owner's copy; it is
	                               emptied when the partition starts fetching
	                               from an old owner (grid.c, retopo_cache) */
	bool reloaded;              /* loaded from data_dir at start and not yet
	                               merged with the copies the other servers
	                               loaded (rebalance.c, "Copies loaded from
	                               disk"): not whole, not served; an owner
	                               stays MOVING until it fetched from every
	                               server of a topology that holds a
	                               majority of its baseline */
	bool sup_owner;             /* MOVING: the supplier owned it under the
	                               previous topology (whole, it has it all) */
	uint8_t nsrcs, ntaken;
	dg_node_id srcs[DGI_PART_SRCS];
	dg_node_id taken[DGI_PART_SRCS];
	/* alts:   MOVING from an owner of the previous topology: the other
	 *         owners of that topology still servers.  When the supplier's
	 *         copy is not whole (it was itself still fetching, from a node
	 *         that then left), one of these that holds it whole completes
	 *         the copy — rather than a LOST partition while whole copies
	 *         survive. */
	uint8_t nalts;
	dg_node_id alts[DGI_PART_ALTS];
	int64_t state_topver;       /* topology version the state was set for
	                               (here: the second line is the write's) */
} dgi_part;

/* A partition's lock.  Every holder is a writer as far as lock-free reads
 * are concerned (read.c, get_fast): taking the lock makes seq odd, giving
 * it back makes it even again, so a read that saw the same even seq before
 * and after its loads saw no change made under the lock (a sequence lock;
 * the fences are those of Boehm's "Can seqlocks get along with programming
 * language memory models?").  Whatever is changed under the lock — an
 * entry, a flag, the table, the state — is changed atomically for such a
 * read.  Memory such a read may reach is not freed while one can be
 * looking at it (store.c, "Retired memory"). */
/*
 * The lock itself is a futex lock, not a pthread mutex: lk 0 free, 1 held,
 * 2 held and maybe waited for.  Uncontended, taking it is one
 * compare-and-swap and giving it back one exchange, in line (a pthread
 * mutex's two calls were ~60 of a put's ~640 instructions); contended, a
 * short spin, then the futex (store.c, dgi_part_lock_wait).  Not
 * recursive; no condition variable waits on it. */
void dgi_part_lock_wait(dgi_part *p);   /* store.c: the contended acquire */
void dgi_part_lock_wake(dgi_part *p);   /* store.c: wakes one waiter */
static inline void dgi_part_lock(dgi_part *p)
{
	uint32_t free_ = 0;
	if (__builtin_expect(!atomic_compare_exchange_strong_explicit(&p->lk, &free_, 1,
	    memory_order_acquire, memory_order_relaxed), 0))
		dgi_part_lock_wait(p);
	atomic_store_explicit(&p->seq, atomic_load_explicit(&p->seq, memory_order_relaxed) + 1,
	    memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
}

static inline void dgi_part_unlock(dgi_part *p)
{
	atomic_store_explicit(&p->seq, atomic_load_explicit(&p->seq, memory_order_relaxed) + 1,
	    memory_order_release);
	if (__builtin_expect(atomic_exchange_explicit(&p->lk, 0, memory_order_release) == 2, 0))
		dgi_part_lock_wake(p);
}

/* Whether the partition's lock is free now (tests). */
static inline bool dgi_part_lock_free(dgi_part *p)
{
	return atomic_load_explicit(&p->lk, memory_order_acquire) == 0;
}

void dgi_part_init(dgi_part *p);
void dgi_part_free(dgi_part *p);        /* entries and table */
/* Frees what was retired (store.c, "Retired memory") once no section can
 * hold it, tagging the rest (partition locked; the sweeper, once a
 * second). */
void dgi_part_limbo_flush(dgi_part *p);
bool dgi_part_limbo_empty(const dgi_part *p);
/* Lookups and updates; the caller holds p's lock (dgi_part_lock).  hash is always
 * dgi_key_hash(key, klen): the store computes it again from the key where
 * a slot's 16 bits of it do not do (dgi_entry_hash). */
dgi_entry *dgi_part_find(dgi_part *p, uint64_t hash, const uint8_t *key, uint32_t klen);
/* The probe of dgi_part_peek and dgi_part_find_split: the key's entry in
 * the table slots[cap] (cap 0: none), or NULL; *torn when the probe met
 * no empty slot (the table changed under a lock-free read). */
static inline __attribute__((always_inline)) const dgi_entry *dgi_part_probe(
    const dgi_pslot *slots, uint32_t cap, uint64_t hash, const uint8_t *pre, uint32_t npre,
    const uint8_t *key, uint32_t klen, bool *torn)
{
	if (cap == 0)
		return NULL;
	uint32_t mask = cap - 1;
	uint64_t tag = dgi_slot_tag_of(hash);
	uint32_t i = (uint32_t)hash & mask;
	for (uint32_t n = 0; n < cap; n++, i = (i + 1) & mask) {
		dgi_pslot sl = __atomic_load_n(&slots[i], __ATOMIC_ACQUIRE);
		if (sl == 0)
			return NULL;
		if (dgi_slot_tag(sl) != tag)
			continue;
		const dgi_entry *e = dgi_slot_entry(sl);
		uint8_t flags = __atomic_load_n(&e->flags, __ATOMIC_RELAXED);
		const uint8_t *ek = e->data + dgi_entry_prefix(flags);
		if ((uint32_t)__atomic_load_n(&e->klen_m1, __ATOMIC_RELAXED) + 1 != npre + klen)
			continue;
		uint32_t j = 0;
		while (j < npre && ek[j] == pre[j]) /* (a short header: in line) */
			j++;
		if (j == npre && dgi_key_eq(ek + npre, key, klen))
			return e;
	}
	*torn = true; /* (a table is never full: it changed under the probe) */
	return NULL;
}
/* dgi_part_find without the lock, for a read that saw seq (even) before
 * (read.c, get_fast), of the key pre[0..npre) + key[0..klen): the entry,
 * or NULL; its loads may race with a writer's and stay inside live or
 * retired memory (store.c, "Retired memory").  *torn when the table
 * changed under it.  The caller checks seq again after it used the
 * entry. */
static inline __attribute__((always_inline)) const dgi_entry *dgi_part_peek(
    const dgi_part *p, uint32_t seq, uint64_t hash, const uint8_t *pre, uint32_t npre,
    const uint8_t *key, uint32_t klen, bool *torn)
{
	/* (one load each: what a writer changes meanwhile, the sequence tells) */
	const dgi_pslot *slots = __atomic_load_n(&p->slots, __ATOMIC_ACQUIRE);
	uint32_t cap = __atomic_load_n(&p->cap, __ATOMIC_RELAXED);
	atomic_thread_fence(memory_order_acquire);
	if (atomic_load_explicit(&p->seq, memory_order_relaxed) != seq) {
		*torn = true; /* slots and cap may be of two tables */
		return NULL;
	}
	return dgi_part_probe(slots, cap, hash, pre, npre, key, klen, torn);
}
/* The entry of the key pre[0..npre) + key[0..klen) (the raw API's key
 * and its BYTES header, never built), or NULL: dgi_part_find's, with the
 * partition locked. */
static inline __attribute__((always_inline)) const dgi_entry *dgi_part_find_split(
    const dgi_part *p, uint64_t hash, const uint8_t *pre, uint32_t npre, const uint8_t *key,
    uint32_t klen)
{
	/* (the lock holds writers out: no sequence to check, nothing torn) */
	bool torn = false;
	return dgi_part_probe(p->slots, p->cap, hash, pre, npre, key, klen, &torn);
}
/* The entry with that hash and exactly that version, or NULL. */
dgi_entry *dgi_part_find_ver(dgi_part *p, uint64_t hash, const dgi_pver *ver);
/* Makes the entry for key hold val (NULL + tomb: a tombstone), reusing its
 * memory when it fits.  *slot_entry is the entry after the call.  Errors
 * (nothing changed): DG_ERR_NOMEM; DG_ERR_INVAL, DG_ERR_LIMIT: klen or
 * ver->topver out of what an entry holds (dgi_entry_storable). */
dg_err dgi_part_set(dgi_part *p, uint64_t hash, const uint8_t *key, uint32_t klen,
    const uint8_t *val, uint32_t vlen, const dgi_pver *ver, int64_t expire_ms,
    uint64_t op_node, uint64_t op_seq, uint32_t flags, dgi_entry **out);
/* Overwrites a found entry in place when the value fits its memory (no
 * second probe, no allocation); false when it does not fit (or ver is
 * not storable: dgi_part_set then says why). */
bool dgi_part_overwrite(dgi_part *p, dgi_entry *e, const uint8_t *val, uint32_t vlen,
    const dgi_pver *ver, int64_t expire_ms, uint64_t op_node, uint64_t op_seq);
/* (The same in line, with the value in two pieces: dgi_part_overwrite_in,
 * below.) */
/* Removes the entry for key (if any). */
void dgi_part_del(dgi_part *p, uint64_t hash, const uint8_t *key, uint32_t klen);
/* Removes every entry (and tombstone). */
void dgi_part_clear(dgi_part *p);
/* Removes tombstones only. */
void dgi_part_purge_tombs(dgi_part *p);
/* The order of a partition's pages: the key's hash rotated so that its
 * low 16 bits — a slot's tag (dgi_slot_tag_of) — come first; a page's
 * cursor ("after", "last") is one of these. */
static inline uint64_t dgi_scan_key(uint64_t hash)
{
	return hash << 48 | hash >> 16;
}
/* Visits entries with dgi_scan_key(hash) > after (first: every entry) in
 * that order, one page of them; returns the last cursor visited and sets
 * *more when entries past it are left.  want (NULL: every entry) says
 * which of them the page takes; fn is called for those.  A page ends
 * between two hashes
 * (one hash's entries are never split over two pages) once it visited max
 * entries, or once what it took (dgi_page_entry_bytes each) reaches
 * max_bytes or would pass it with the next entry it wants: a page takes at
 * least one hash's entries, and more than max_bytes only when they alone
 * do — an entry count alone made a page of 16 values of 1.5 MiB, past the
 * receiver's recv_max (test_rebalance_values_larger_than_a_batch).
 * Entries it does not want count for max, not for max_bytes. */
uint64_t dgi_part_scan(dgi_part *p, uint64_t after, bool first, uint32_t max,
    uint64_t max_bytes, bool (*want)(void *ctx, const dgi_entry *e),
    void (*fn)(void *ctx, const dgi_entry *e), void *ctx, bool *more);
/* Writes e as an entry of a page (PROTOCOL.md, "Entry pages": key, value
 * or NULL for a tombstone, version, expiry, update id; 8 values) — SUPPLY,
 * SCAN_RES and PSYNC_RES alike (rebalance.c). */
void dgi_entry_write(dg_writer *w, const dgi_part *p, const dgi_entry *e);
/* Removes expired entries and tombstones (expire_ms <= now); returns how
 * many.  gone (optional) sees each before it goes. */
uint32_t dgi_part_expire(dgi_part *p, int64_t now_ms, uint32_t max);
uint32_t dgi_part_expire_cb(dgi_part *p, int64_t now_ms, uint32_t max,
    void (*gone)(void *ctx, const dgi_entry *e), void *ctx);
/* Visits every entry and tombstone in slot order (no allocation). */
void dgi_part_each(dgi_part *p, void (*fn)(void *ctx, const dgi_entry *e), void *ctx);

/* (DGI_ENTRY_EXP is 0x10, DGI_ENTRY_OPX 0x20: the expiry's 8 bytes are
 * flags' bit 4 >> 1, the whole update id's 16 its bit 5 >> 1) */
static inline const uint8_t *dgi_entry_key(const dgi_entry *e)
{
	return e->data + dgi_entry_prefix(e->flags);
}
/* Key bytes: 1..DGI_ENTRY_KEY_MAX. */
static inline uint32_t dgi_entry_klen(const dgi_entry *e)
{
	return (uint32_t)e->klen_m1 + 1;
}
/* What a page counts for an entry against its max_bytes: its key and
 * value, and 80 for the rest of its encoding (two BYTES headers and six
 * svarints: up to about 75). */
static inline uint64_t dgi_page_entry_bytes(const dgi_entry *e)
{
	return (uint64_t)dgi_entry_klen(e) + e->vlen + 80;
}
static inline const uint8_t *dgi_entry_val(const dgi_entry *e)
{
	return dgi_entry_key(e) + dgi_entry_klen(e);
}
/* The version's topology version. */
static inline int64_t dgi_entry_topver(const dgi_entry *e)
{
	return (int64_t)e->topver32;
}
/* The id (node, sequence) of the last update applied to e, a partition
 * p's entry (p locked), exactly as it was given to the store. */
static inline void dgi_entry_op(const dgi_part *p, const dgi_entry *e, uint64_t *node,
    uint64_t *seq)
{
	if (e->flags & DGI_ENTRY_OPX) {
		const uint8_t *x = e->data + ((e->flags & DGI_ENTRY_EXP) >> 1);
		memcpy(node, x, 8);
		memcpy(seq, x + 8, 8);
	} else if (e->op == 0) {
		*node = *seq = 0;
	} else {
		const struct dgi_opn *o = &p->opn[e->op >> DGI_OP_LOW_BITS];
		*node = o->node;
		*seq = o->hi << DGI_OP_LOW_BITS | (e->op & DGI_OP_LOW_MASK);
	}
}
/* Whether e's last update is (node, seq). */
static inline bool dgi_entry_op_is(const dgi_part *p, const dgi_entry *e, uint64_t node,
    uint64_t seq)
{
	uint64_t n, s;
	dgi_entry_op(p, e, &n, &s);
	return n == node && s == seq;
}
/* Wall-clock expiry in ms; 0: never. */
static inline int64_t dgi_entry_expire(const dgi_entry *e)
{
	int64_t x = 0;
	if (e->flags & DGI_ENTRY_EXP)
		memcpy(&x, e->data, sizeof(x));
	return x;
}
/* The entry's version, as a dgi_pver (flags 0). */
static inline dgi_pver dgi_entry_ver(const dgi_entry *e)
{
	return (dgi_pver){ dgi_entry_topver(e), e->counter, e->order, 0 };
}
/* dgi_pver_cmp (cache.h), in line: the one order of versions (topology
 * version, counter, node order) — pstore.c's dgi_pver_cmp is this, for
 * the other modules.  A call the put's next version paid for. */
static inline int dgi_pver_order(const dgi_pver *a, const dgi_pver *b)
{
	if (a->topver != b->topver)
		return a->topver < b->topver ? -1 : 1;
	if (a->counter != b->counter)
		return a->counter < b->counter ? -1 : 1;
	if (a->order != b->order)
		return a->order < b->order ? -1 : 1;
	return 0;
}
/* dgi_pver_cmp(v, e's version). */
static inline int dgi_entry_ver_cmp(const dgi_pver *v, const dgi_entry *e)
{
	dgi_pver ev = dgi_entry_ver(e);
	return dgi_pver_order(v, &ev);
}
/* The entry's key hash (dgi_key_hash of its key): computed, not stored. */
static inline uint64_t dgi_entry_hash(const dgi_entry *e)
{
	return dgi_key_hash(dgi_entry_key(e), dgi_entry_klen(e));
}

/* ---- a write in place, in line (store.c; the short put, primary.c) ----
 * What dgi_part_overwrite does, where a call costs: the short put's call
 * (ten arguments, the room computed twice, a varint header copied byte by
 * byte, the value through libc's memcpy) was ~150 of its ~590
 * instructions.  store.c's writes use the same pieces. */

/* store.c: dgi_op_pack's miss (a new originator for the table) and
 * dgi_entry_vroom's rare case, out of line. */
bool dgi_opn_intern(dgi_part *p, uint64_t node, uint64_t hi, uint32_t *x);
uint64_t dgi_entry_vroom_usable(const dgi_entry *e);

/* The packed form of the update id (node, seq) for p's entries ("An
 * entry" above), interned in p's table; false when the table cannot take
 * it (the entry keeps the id whole).  Runs before the entry it is for is
 * touched: a collection rewrites every entry's index.  The common case,
 * the originator interned last, in line. */
static inline __attribute__((always_inline)) bool dgi_op_pack(dgi_part *p, uint64_t node,
    uint64_t seq, uint64_t *out)
{
	uint64_t hi = seq >> DGI_OP_LOW_BITS;
	uint32_t x = p->opn_last;
	if ((node | seq) == 0)
		x = 0; /* (0, 0): no id, 0 */
	else if (__builtin_expect(x == 0 || p->opn[x].node != node || p->opn[x].hi != hi, 0) &&
	    !dgi_opn_intern(p, node, hi, &x))
		return false;
	*out = (uint64_t)x << DGI_OP_LOW_BITS | (seq & DGI_OP_LOW_MASK);
	return true;
}

/* Bytes e's value can take in place: its own and the slack after it.  The
 * slack counts up to 255: an entry whose value shrank by more asks malloc
 * what its memory holds (dgi_entry_vroom_usable), so a value that grows
 * back (sizes that alternate) is written in place — not a new entry, and
 * an old one retired, every other write. */
static inline __attribute__((always_inline)) uint64_t dgi_entry_vroom(const dgi_entry *e)
{
	if (__builtin_expect(e->slack == 255, 0))
		return dgi_entry_vroom_usable(e);
	return (uint64_t)e->vlen + e->slack;
}

/* Writes the fields of an update into e, whose layout (flags'
 * DGI_ENTRY_LAYOUT bits, key in place) is set; vroom: the bytes its value
 * can take (dgi_entry_vroom; at least vhlen + vlen).  The value is vh's
 * first vhlen bytes (a header of up to 8, byte i in bits 8i..8i+7, or
 * none) then val[0..vlen), copied in 16-byte moves (dgi_copy_short: GCC
 * calls memcpy for a copy of unknown length); op: the id packed
 * (dgi_op_pack), unless e keeps it whole. */
static inline __attribute__((always_inline)) void dgi_entry_fill_split(dgi_entry *e,
    uint64_t vroom, uint64_t vh, uint32_t vhlen, const uint8_t *val, uint32_t vlen,
    const dgi_pver *ver, int64_t expire_ms, uint64_t op, uint64_t op_node, uint64_t op_seq)
{
	uint8_t fl = e->flags; /* (read once: the value's bytes may alias it) */
	uint64_t slack = vroom - vhlen - vlen;
	e->slack = slack > 255 ? 255 : (uint8_t)slack;
	e->vlen = vhlen + vlen;
	uint8_t *v = e->data + dgi_entry_prefix(fl) + dgi_entry_klen(e);
	if (vhlen == 2) { /* (the raw API's BYTES header under 128 bytes: one store) */
		v[0] = (uint8_t)vh;
		v[1] = (uint8_t)(vh >> 8);
	} else {
		for (uint32_t i = 0; i < vhlen; i++)
			v[i] = (uint8_t)(vh >> 8 * i);
	}
	if (vlen)
		dgi_copy_short(v + vhlen, val, vlen);
	if (fl & DGI_ENTRY_EXP)
		memcpy(e->data, &expire_ms, sizeof(expire_ms));
	if (fl & DGI_ENTRY_OPX) {
		uint8_t *x = e->data + ((fl & DGI_ENTRY_EXP) >> 1);
		memcpy(x, &op_node, 8);
		memcpy(x + 8, &op_seq, 8);
		op = 0;
	}
	e->op = op;
	e->topver32 = (uint32_t)ver->topver; /* (checked: dgi_entry_storable) */
	e->counter = ver->counter;
	e->order = ver->order;
}

/* dgi_part_overwrite (above) in line, of a value in two pieces: vh's
 * first vhlen bytes (0..8; byte i in bits 8i..8i+7), then val[0..vlen) —
 * the raw API's BYTES header and the caller's bytes (the short put's,
 * primary.c).  In place when e already has what the write needs before
 * its key (an expiry, the id whole: a layout that changed would move the
 * key under a lock-free read; store.c, "Retired memory") and its value's
 * room takes the new one; false, nothing changed, otherwise (or when ver
 * is not storable: dgi_part_set then says why). */
static inline __attribute__((always_inline)) bool dgi_part_overwrite_in(dgi_part *p,
    dgi_entry *e, uint64_t vh, uint32_t vhlen, const uint8_t *val, uint32_t vlen,
    const dgi_pver *ver, int64_t expire_ms, uint64_t op_node, uint64_t op_seq)
{
	if (dgi_entry_storable(1, ver->topver) != DG_OK)
		return false; /* (dgi_part_set says why) */
	uint64_t op = 0;
	bool opx = !dgi_op_pack(p, op_node, op_seq, &op);
	uint32_t was = e->flags & DGI_ENTRY_LAYOUT;
	if ((expire_ms != 0 && !(was & DGI_ENTRY_EXP)) || (opx && !(was & DGI_ENTRY_OPX)))
		return false;
	uint64_t vroom = dgi_entry_vroom(e);
	if ((uint64_t)vhlen + vlen > vroom)
		return false;
	p->bytes -= e->vlen;
	p->bytes += vhlen + vlen;
	if (e->flags & DGI_ENTRY_TOMB)
		p->live++;
	e->flags = (uint8_t)was;
	dgi_entry_fill_split(e, vroom, vh, vhlen, val, vlen, ver, expire_ms, op, op_node, op_seq);
	return true;
}

int64_t dgi_wall_ms(void);

/* ---- operation latency (latency.c; cache.h, "operation latency") ----
 * One histogram per cache, kind and thread (in the thread's counter block,
 * below).  The count is not kept apart: it is the buckets' sum, one
 * increment fewer per operation. */
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

/* The operation clock of the latency histograms (latency.c): the CPU's
 * time-stamp counter where it is invariant (one rdtsc, ~12 ns here, against
 * ~28 ns for clock_gettime), converted to ns by a factor measured once
 * against CLOCK_MONOTONIC (dgi_lat_clock_init, before the first cache
 * exists, so every operation reads one clock); CLOCK_MONOTONIC elsewhere.
 * Ticks are only ever subtracted from ticks. */
extern bool dgi_lat_tsc;       /* set once, before any cache */
extern uint64_t dgi_lat_mult;  /* ns per tick, 0.32 fixed point (< 1) */
void dgi_lat_clock_init(void);

static inline uint64_t dgi_lat_ticks(void)
{
#if defined(__x86_64__)
	if (__builtin_expect(dgi_lat_tsc, 1))
		return __builtin_ia32_rdtsc();
#endif
	return dgi_now_ns();
}

/* (dt * mult) >> 32 in 64-bit arithmetic, exact: with mult < 2^32 (a
 * counter of 1 GHz or more) neither product overflows. */
static inline uint64_t dgi_lat_ticks_ns(uint64_t dt, uint64_t mult)
{
	return (dt >> 32) * mult + (((dt & 0xFFFFFFFFu) * mult) >> 32);
}

/* ns since t0 (dgi_lat_ticks); a counter that went back (an unsynced
 * core) reads as 0. */
static inline uint64_t dgi_lat_since(uint64_t t0)
{
	uint64_t t = dgi_lat_ticks();
	if (__builtin_expect(t < t0, 0))
		return 0;
	if (!dgi_lat_tsc)
		return t - t0;
	return dgi_lat_ticks_ns(t - t0, dgi_lat_mult);
}

/* Adds n to a counter: a plain load and store on the block of the
 * thread that owns it (one writer), an atomic add on a shared one. */
static inline __attribute__((always_inline)) void dgi_ctr_add(_Atomic uint64_t *x, uint64_t n, bool shared)
{
	if (__builtin_expect(shared, 0))
		atomic_fetch_add_explicit(x, n, memory_order_relaxed);
	else
		atomic_store_explicit(x, atomic_load_explicit(x, memory_order_relaxed) + n,
		    memory_order_relaxed);
}

/* The bucket of an operation of ns nanoseconds.  A loop from the smallest
 * bound: most operations stop within the first few. */
static inline unsigned dgi_lat_bucket(uint64_t ns)
{
	unsigned i = 0;
	while (i < DG_LAT_BUCKETS - 1 && ns > dgi_lat_bounds_ns[i])
		i++;
	return i;
}

/* Counts one operation of ns nanoseconds in l (shared: l is in a block
 * other threads write too). */
static inline void dgi_lat_add(dgi_lat *l, uint64_t ns, bool shared)
{
	dgi_ctr_add(&l->buckets[dgi_lat_bucket(ns)], 1, shared);
	dgi_ctr_add(&l->sum_ns, ns, shared);
}

/* ---- a cache's operation counters, per thread (counters.c) ----
 * The counters the operations bump — puts, removes, hits, misses and the
 * latency histograms — are kept per (cache, thread): each thread writes
 * its own block with plain relaxed loads and stores (no locked
 * instruction), and a reader sums every block.  A block is allocated at a
 * thread's first counted operation on the cache (dgi_ctrs_make) and stays
 * with the cache handle until it is freed: it belongs to the thread index
 * (transport.h, dgi_thread_index), which a thread that exits hands on to a
 * later one — so nothing a thread counted is lost when it exits, and the
 * block has one writer at a time.  Threads beyond DGI_CTR_BLOCKS indexes,
 * without an index, or whose block could not be allocated count in the
 * cache's shared block with atomic adds, and so does every thread once
 * the cache is destroyed: a block is written only inside a section that
 * found the cache alive, so when the destroyed cache's partitions are
 * reclaimed (cache_int.h, "Lifetime") no thread writes one any more and
 * they are folded into the shared block and freed (dgi_ctrs_fold).  Counts
 * are exact; a reader running while operations count may see an
 * operation in one counter and not yet in another. */
#define DGI_CTR_BLOCKS 128
typedef struct dgi_ctrs {
	_Atomic uint64_t puts, removes, hits, misses;
	dgi_lat lat[DG_OP__COUNT];      /* ops started here, by dg_cache_op_kind */
	/* sampling (dgi_lat_begin), by kind; the owning thread's only (a
	 * thread inherits them with its index) */
	uint64_t last_ns[DG_OP__COUNT]; /* the last sampled fast operation's time */
	uint8_t last_bucket[DG_OP__COUNT];  /* and its bucket */
	uint8_t skip[DG_OP__COUNT];     /* operations until the next sample */
	void *mem;                      /* the allocation (the block is line-aligned in it) */
} dgi_ctrs;

/* Sums of every block of a cache (dgi_ctrs_total). */
typedef struct dgi_ctr_totals {
	uint64_t puts, removes, hits, misses;
} dgi_ctr_totals;

/* ---- messages (msgs.c; PROTOCOL.md, "Cache messages") ---- */
#define DGI_MSG_UPDATE ((dg_msg_type)(64))  /* originator -> primary, request */
#define DGI_MSG_UPDATE_RES ((dg_msg_type)(65))  /* response */
#define DGI_MSG_BACKUP ((dg_msg_type)(66))  /* primary -> backups, one-way */
#define DGI_MSG_BACKUP_ACK ((dg_msg_type)(67))  /* backup -> primary, one-way */
#define DGI_MSG_GET ((dg_msg_type)(68))  /* request */
#define DGI_MSG_GET_RES ((dg_msg_type)(69))  /* response */
#define DGI_MSG_CACHE_CREATE ((dg_msg_type)(70))  /* request, to every node */
#define DGI_MSG_CACHE_DESTROY ((dg_msg_type)(71))  /* request, to every node */
#define DGI_MSG_CACHE_CONFIGS ((dg_msg_type)(72))  /* every cache config: pushed to a new node,
                                                      or asked for by one (PROTOCOL.md) */
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
#define DGI_MSG_PSYNC ((dg_msg_type)(85))  /* request: a new primary asks an old owner */
#define DGI_MSG_PSYNC_RES ((dg_msg_type)(86))  /* response: update ids and recent entries */
#define DGI_MSG_UPDATE_ALL ((dg_msg_type)(87))  /* originator -> primary, request: many keys */
#define DGI_MSG_UPDATE_ALL_RES ((dg_msg_type)(88))  /* response: one result per key */
#define DGI_MSG_BACKUP_ALL ((dg_msg_type)(89))  /* primary -> backup, one-way: many FULL_SYNC copies */
#define DGI_MSG_BACKUP_ALL_ACK ((dg_msg_type)(90))  /* backup -> primary, one-way: their answers */
#define DGI_MSG_GET_ALL ((dg_msg_type)(91))  /* reader -> primary, request: many keys */
#define DGI_MSG_GET_ALL_RES ((dg_msg_type)(92))  /* response: one answer per key */
#define DGI_MSG_CACHE_LAST ((dg_msg_type)(93))

enum { OP_PUT = DGI_CACHE_OP_PUT, OP_REMOVE = DGI_CACHE_OP_REMOVE,
	OP_PUT_IF_ABSENT = DGI_CACHE_OP_PUT_IF_ABSENT, OP_REPLACE = DGI_CACHE_OP_REPLACE,
	OP_GET_AND_PUT = DGI_CACHE_OP_GET_AND_PUT, OP_REPLACE_IF_EQ = DGI_CACHE_OP_REPLACE_IF_EQ,
	OP_REMOVE_IF_EQ = DGI_CACHE_OP_REMOVE_IF_EQ };

typedef struct dgi_msg_update {
	int64_t cache_id, part, topver;
	int64_t op;                 /* OP_* */
	int64_t sync;               /* dg_write_sync */
	int64_t op_node, op_seq;    /* originator and its update counter */
	int64_t unused;
	dg_bytes key, val;          /* val.ptr NULL: no value (remove) */
	dg_bytes exp;               /* the *_IF_EQ ops: the expected value */
} dgi_msg_update;

typedef struct dgi_msg_update_res {
	int64_t res;                /* dg_err */
	int64_t flag;               /* removed / put / replaced / had */
	int64_t applied;            /* res != DG_OK, yet the primary applied it
	                               (not confirmed by every backup) */
	dg_bytes old;               /* OP_GET_AND_PUT: the previous value, or null */
} dgi_msg_update_res;

typedef struct dgi_msg_backup {
	int64_t cache_id, part, topver;
	int64_t ver_topver, ver_counter, ver_order;
	int64_t expire_ms;
	int64_t op_node, op_seq;
	int64_t pw;                 /* ack to the sender with this id; 0: no ack */
	int64_t flag;               /* the update's flag (the update-id table's) */
	int64_t owners;             /* dgi_aff_owners_hash of the sender's affinity */
	dg_bytes key, val;          /* val.ptr NULL: removal */
} dgi_msg_backup;

typedef struct dgi_msg_backup_ack {
	int64_t cache_id, part, pw, res;
} dgi_msg_backup_ack;

/* UPDATE_ALL, UPDATE_ALL_RES, BACKUP_ALL, BACKUP_ALL_ACK, GET_ALL,
 * GET_ALL_RES: five I64, then
 * one LIST of items (PROTOCOL.md, "Cache messages"), read one at a time by
 * the handler with the readers below.  The I64 not named for a type are 0. */
typedef struct dgi_msg_many {
	int64_t cache_id;
	int64_t topver;             /* UPDATE_ALL: the sender's affinity version */
	int64_t op, sync, op_node;  /* UPDATE_ALL: OP_PUT or OP_REMOVE, dg_write_sync, originator */
	dg_raw list;
} dgi_msg_many;

/* Items per message, at most: a sender splits a bigger batch. */
#define DGI_MANY_MAX 1024

/* An UPDATE_ALL item: I64 part, I64 op_seq, BYTES key, BYTES val (null: removal). */
struct dgi_uall_item {
	int64_t part, op_seq;
	dg_bytes key, val;
};
/* An UPDATE_ALL_RES item: as UPDATE_RES without the old value. */
struct dgi_ures_item {
	int64_t res, flag, applied;
};
/* A BACKUP_ALL item: a BACKUP body without its cache id (the message's) —
 * the 11 I64 from part to owners, then key and val.  Decoded into a whole
 * dgi_msg_backup with cache_id set from the message. */
#define DGI_BALL_ITEM_VALUES 13
/* What a BACKUP_ALL item takes besides its key and value bytes (its I64s
 * as svarints, the BYTES headers), generously: cp_send's frame budget. */
#define DGI_BALL_ITEM_ROOM 160
/* A BACKUP_ALL_ACK item: I64 part, I64 pw, I64 res. */
struct dgi_back_item {
	int64_t part, pw, res;
};
/* A GET_ALL item: I64 part, BYTES key.  A GET_ALL_RES item: I64 res
 * (DG_OK: found, DG_ERR_NOT_FOUND, or why this key must be read alone),
 * BYTES value (null unless found). */
struct dgi_gall_item {
	int64_t part;
	dg_bytes key;
};
struct dgi_gres_item {
	int64_t res;
	dg_bytes val;
};
/* What an answer's item takes besides its value's bytes (an I64 and the
 * value's tag and length, generously), for fitting one frame. */
#define DGI_GRES_ITEM_ROOM 32
/* Item readers and writers (msgs.c): a reader positioned inside the LIST
 * (dg_read_begin done); each reads or writes one item's values. */
dg_err dgi_uall_item_put(dg_writer *w, const struct dgi_uall_item *it);
dg_err dgi_uall_item_get(dg_reader *r, struct dgi_uall_item *it);
dg_err dgi_ures_item_put(dg_writer *w, const struct dgi_ures_item *it);
dg_err dgi_ures_item_get(dg_reader *r, struct dgi_ures_item *it);
dg_err dgi_ball_item_put(dg_writer *w, const dgi_msg_backup *b);
dg_err dgi_ball_item_get(dg_reader *r, int64_t cache_id, dgi_msg_backup *b);
dg_err dgi_gall_item_put(dg_writer *w, const struct dgi_gall_item *it);
dg_err dgi_gall_item_get(dg_reader *r, struct dgi_gall_item *it);
dg_err dgi_gres_item_put(dg_writer *w, const struct dgi_gres_item *it);
dg_err dgi_gres_item_get(dg_reader *r, struct dgi_gres_item *it);
dg_err dgi_back_item_put(dg_writer *w, const struct dgi_back_item *it);
dg_err dgi_back_item_get(dg_reader *r, struct dgi_back_item *it);
/* A buffer kept per thread (emptied; freed at the thread's exit) for an
 * answer's list encoded on the message path (many.c); done: trimmed
 * when it grew past BSCRATCH_KEEP. */
dg_buf *dgi_reply_buf(void);
void dgi_reply_buf_done(dg_buf *b);
/* Opens m's LIST as n items of `values` values each (n <= DGI_MANY_MAX). */
dg_err dgi_many_open(const dg_registry *reg, const dgi_msg_many *m, uint32_t values, dg_reader *r,
    uint32_t *n);

#define DGI_GET_SUPPLIER 0x1    /* serve from the store whatever its state */

typedef struct dgi_msg_get {
	int64_t cache_id, part, topver, flags;
	dg_bytes key;
} dgi_msg_get;

typedef struct dgi_msg_get_res {
	int64_t found;
	dg_bytes val;
} dgi_msg_get_res;

typedef struct dgi_msg_psync {  /* PSYNC */
	int64_t cache_id, part;
	int64_t topver;             /* the asker became the primary at this version */
	int64_t since;              /* its previous affinity's: entries written since */
	int64_t page;               /* 0: the first page (records, and the recent
	                               copies when they fit: psync.c) */
	int64_t after;              /* page > 0: entries whose hash is above this */
} dgi_msg_psync;

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
 * (dg_msg_raw).  SUPPLY and SCAN_RES (and PUSH's list), a page: I64 more,
 * I64 last cursor, I64 copy (DGI_COPY_*: the sender's copy of the
 * partition), I64 n, I64 d, n x I64 the sender's sources (not whole: the
 * nodes holding what it lacks; n <= DGI_PART_SRCS), d x (I64 node, I64
 * seq, I64 flag) the partition's update-id records (dedup.c; the first
 * page of a SUPPLY or PUSH only, d <= DGI_PAGE_DD_MAX), then per entry
 * DGI_PAGE_ENTRY_VALUES values:
 * BYTES key, BYTES value (null: tombstone), I64 ver topver, I64 counter,
 * I64 order, I64 expire, I64 op node, I64 op seq (the id of the last update
 * applied to the entry: it travels with the entry, so a retry reaching the
 * new owner is applied once).  CACHE_CONFIGS: per cache the fields of
 * CACHE_CREATE in order. */
#define DGI_PAGE_HEAD_VALUES 5
#define DGI_PAGE_DD_MAX 4096
enum { DGI_COPY_PARTIAL = 0, DGI_COPY_WHOLE = 1, DGI_COPY_BROKEN = 2 };
#define DGI_PAGE_ENTRY_VALUES 8

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
 * handle itself (this struct: config, counters, histograms, ~3 KB, and a
 * counter block per thread that counted on it) stays until the node stops, so handles held anywhere keep
 * answering DG_ERR_CLOSED. */
/* A backup whose map is full, as its primary saw it (pending.c, "Full
 * backups"). */
#define DGI_FULL_NODES 4
struct dgi_full {
	dg_node_id node;
	uint64_t until_ms;              /* dgi_coarse_ms; 0: a free slot */
	uint64_t bytes;                 /* the least copy (key and value) it refused */
	uint64_t bytes_until_ms;        /* ... within 5 s: then the next refusal's */
	uint64_t pw_id;                 /* the first record it refused: a copy as large
	                                   of it or a later one taken ends the slot */
};

struct dg_cache {
	dgi_grid *g;
	dg_cache_config cfg;
	uint32_t id;
	_Atomic bool dead;              /* destroyed (or node stopping) */
	struct dg_cache *grave_next;    /* destroyed caches (grid->mu) */
	uint64_t grave_tag;             /* dgi_epoch_retire's at the destroy */
	bool reclaimed;                 /* parts, lost, handed, aff freed (grid->mu) */
	dgi_part *parts;                /* cfg.partitions, 64-byte aligned in parts_mem */
	void *parts_mem;
	_Atomic(dgi_aff *) aff;         /* current; NULL before the first topology */
	_Atomic uint8_t *lost;          /* a byte per partition: lost (grid->mu writes) */
	_Atomic uint8_t *handed;        /* a byte per partition: its sole owner left
	                                   gracefully and handed it over (not lost),
	                                   or pushed all of it here (REBALANCE_PUSH) */
	bool fresh;                     /* created here, cluster-wide: no data to fetch */
	_Atomic uint64_t remaps, expired;
	_Atomic uint64_t rebal_parts_done, rebal_bytes;
	bool rebal_pending;             /* rebalancer: partitions were moving */
	/* Backups that answered FULL_SYNC copies DG_ERR_STORAGE_FULL (their
	 * maps are full): this node, as the primary, refuses the writes as
	 * large to the partitions they back (pending.c, "Full backups";
	 * dgi_backup_full).  full_until_ms: the latest of full[].until_ms (0
	 * or past: none, the writes' one check); full_lk guards full[]. */
	_Atomic uint64_t full_until_ms;
	_Atomic uint32_t full_lk;
	struct dgi_full full[DGI_FULL_NODES];
	struct dgi_lograte lr_full;     /* BACKUP-STORAGE-FULL: each 10 s */
	/* puts, removes, hits, misses and latency: per thread index (counters
	 * above); ctr_shared for the threads without a block of their own
	 * (a slot that holds &ctr_shared: its allocation failed) */
	_Atomic(dgi_ctrs *) ctrs[DGI_CTR_BLOCKS];
	dgi_ctrs ctr_shared;
};

/* counters.c.  The calling thread's counter block of c (inside a
 * section), made at its first use; &c->ctr_shared when there is none or c
 * is destroyed (see above). */
dgi_ctrs *dgi_ctrs_make(dg_cache *c, uint32_t ix);
static inline dgi_ctrs *dgi_ctrs_of(dg_cache *c)
{
	uint32_t ix = dgi_thread_index();
	if (__builtin_expect(ix >= DGI_CTR_BLOCKS ||
	    atomic_load_explicit(&c->dead, memory_order_relaxed), 0))
		return &c->ctr_shared;
	/* (relaxed: only this index's thread stores it, or one before it,
	 * which handed the index on after) */
	dgi_ctrs *b = atomic_load_explicit(&c->ctrs[ix], memory_order_relaxed);
	return __builtin_expect(b != NULL, 1) ? b : dgi_ctrs_make(c, ix);
}
/* Adds n to field (puts, removes, hits, misses) of the calling thread's
 * block of c (inside a section). */
#define DGI_COUNT(c, field, n)                                                 \
	do {                                                                   \
		dg_cache *c_ = (c);                                            \
		dgi_ctrs *b_ = dgi_ctrs_of(c_);                                \
		dgi_ctr_add(&b_->field, (n), b_ == &c_->ctr_shared);           \
	} while (0)
/* Every block's counters, summed; the latency histogram of kind k, summed
 * (count: the buckets' total).  Any thread, in a section or not. */
void dgi_ctrs_total(dg_cache *c, dgi_ctr_totals *out);
void dgi_ctrs_latency(dg_cache *c, dg_cache_op_kind k, dg_latency *out);
/* Adds every thread's block of c into its shared block and frees them: c
 * is destroyed and reclaimed (no section that saw it alive is left), or
 * being freed. */
void dgi_ctrs_fold(dg_cache *c);
/* Counts an operation of kind k that took ns in c's histogram (inside a
 * section). */
static inline void dgi_lat_record(dg_cache *c, dg_cache_op_kind k, uint64_t ns)
{
	dgi_ctrs *b = dgi_ctrs_of(c);
	dgi_lat_add(&b->lat[k], ns, b == &c->ctr_shared);
}

/* ---- sampled timing of the single-key operations ----
 * An rdtsc costs ~9-11 ns here, more than the rest of the recording; a
 * local get takes ~60 ns.  So a thread reads the clock for one fast
 * operation in DGI_LAT_SAMPLE per cache and kind (its counter block's
 * countdown; the first one always), and counts each of the others — every
 * operation is counted, exactly — in the bucket of its last sampled one,
 * adding that one's ns to the sum.  An operation that leaves the fast
 * path (dgi_lat_slow: a remote request, a wait for backups or for a
 * pending write, persistence, a transaction, a retry) is always timed —
 * from its start when it was sampled, else from where it left the path
 * (what it did before, a fraction of a µs, is not in its time) — and is
 * not what the unsampled fast ones are counted as.  The shared block
 * (cache_int.h, counters) times every operation.  Recording is inside
 * the operation's section: begin, the operation, end.
 * 64, not 16 (2026-12-07): a 10k-key get 61 -> 57 ns, a put 80 -> 76
 * (getloop, alternating builds); a thread doing a million fast operations
 * a second still times 15,000 of them.  -DDGI_LAT_SAMPLE=N for another
 * rate (the countdown is a byte). */
#ifndef DGI_LAT_SAMPLE
#define DGI_LAT_SAMPLE 64
#endif
_Static_assert(DGI_LAT_SAMPLE >= 1 && DGI_LAT_SAMPLE <= 256, "skip[] counts down in a byte");

/* The operation being recorded on this thread (nested ones save and
 * restore it). */
typedef struct dgi_lat_cur {
	uint64_t t0;                /* its start (ticks) when sampled, else 0 */
	uint64_t slow_t0;           /* ticks it is timed from once slow, else 0 */
	bool open;
} dgi_lat_cur;
extern _Thread_local dgi_lat_cur dgi_lat_tl;

typedef struct dgi_lat_op {
	dgi_ctrs *b;
	dg_cache_op_kind k;
	dgi_lat_cur prev;
} dgi_lat_op;

static inline __attribute__((always_inline)) void dgi_lat_begin(dg_cache *c, dg_cache_op_kind k, dgi_lat_op *op)
{
	dgi_ctrs *b = dgi_ctrs_of(c);
	op->b = b;
	op->k = k;
	op->prev = dgi_lat_tl;
	bool sample = b->skip[k] == 0 || b == &c->ctr_shared;
	dgi_lat_tl = (dgi_lat_cur){ sample ? dgi_lat_ticks() | 1 : 0, 0, true };
}

/* The current operation (if any) leaves the fast path: timed from now
 * unless it was sampled. */
static inline void dgi_lat_slow(void)
{
	dgi_lat_cur *t = &dgi_lat_tl;
	if (t->open && t->slow_t0 == 0)
		t->slow_t0 = t->t0 != 0 ? t->t0 : dgi_lat_ticks() | 1;
}

/* A fast operation of kind k counted in b: timed from t0 when it was
 * sampled (its bucket and time kept for the unsampled ones: not in the
 * shared block, which samples every one), else as the last sampled one. */
static inline __attribute__((always_inline)) void dgi_lat_fast_done(dgi_ctrs *b,
    dg_cache_op_kind k, uint64_t t0, bool shared)
{
	dgi_lat *l = &b->lat[k];
	if (t0 != 0) {
		uint64_t ns = dgi_lat_since(t0);
		unsigned i = dgi_lat_bucket(ns);
		dgi_ctr_add(&l->buckets[i], 1, shared);
		dgi_ctr_add(&l->sum_ns, ns, shared);
		if (!shared) {
			b->last_ns[k] = ns;
			b->last_bucket[k] = (uint8_t)i;
			b->skip[k] = DGI_LAT_SAMPLE - 1;
		}
	} else {
		dgi_ctr_add(&l->buckets[b->last_bucket[k]], 1, false);
		dgi_ctr_add(&l->sum_ns, b->last_ns[k], false);
		b->skip[k]--;
	}
}

/* Records the operation begun with op in c (not when e is DG_ERR_INVAL:
 * no operation) and returns e. */
static inline __attribute__((always_inline)) dg_err dgi_lat_end(dg_cache *c, dgi_lat_op *op, dg_err e)
{
	dgi_lat_cur cur = dgi_lat_tl;
	dgi_lat_tl = op->prev;
	if (cur.slow_t0 != 0)
		dgi_lat_slow(); /* (a slow inner operation makes its outer one slow) */
	if (__builtin_expect(e == DG_ERR_INVAL, 0))
		return e;
	dgi_ctrs *b = op->b;
	bool shared = b == &c->ctr_shared;
	if (cur.slow_t0 != 0)
		dgi_lat_add(&b->lat[op->k], dgi_lat_since(cur.slow_t0), shared);
	else /* (the shared block samples every one: t0 set) */
		dgi_lat_fast_done(b, op->k, cur.t0, shared);
	return e;
}

/* The short paths (read.c get_short, primary.c dgi_put_short): an
 * operation that stays on this node's fast path from start to end is
 * counted and timed as dgi_lat_begin / dgi_lat_end would, without them.
 * dgi_ctrs_short: the calling thread's own block of c, NULL when there is
 * none (no thread index — ix1 0 wraps —, not made yet: the general path
 * makes it, or the shared block).  Inside the section, after c->dead was
 * seen false: a dead cache's blocks are folded and freed once no section
 * that saw it alive is left (dgi_ctrs_fold), and its operations count in
 * the shared block (dgi_ctrs_of).
 * dgi_lat_short_t0 at the start: the ticks when this one is sampled,
 * else 0.  dgi_lat_fast_done (not shared) once it answered. */
static inline __attribute__((always_inline)) dgi_ctrs *dgi_ctrs_short(dg_cache *c)
{
	uint32_t ix = dgi_thread_ix1 - 1;
	if (__builtin_expect(ix >= DGI_CTR_BLOCKS, 0))
		return NULL;
	dgi_ctrs *b = atomic_load_explicit(&c->ctrs[ix], memory_order_relaxed);
	/* (the shared block, where a block could not be made: counted with
	 * atomic adds, by the general path) */
	return __builtin_expect(b != &c->ctr_shared, 1) ? b : NULL;
}
static inline __attribute__((always_inline)) uint64_t dgi_lat_short_t0(const dgi_ctrs *b,
    dg_cache_op_kind k)
{
	return b->skip[k] == 0 ? dgi_lat_ticks() | 1 : 0;
}

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
 * DG_ERR_BUSY (nothing was applied anywhere: retry); a FULL_SYNC BACKUP
 * is acked DG_ERR_BUSY to its primary, which applied it: the originator
 * hears DG_ERR_TIMEOUT (outcome unknown) and the primary sends the copy
 * again until it is on every backup (pending.c).  Refusals are counted
 * and logged (JOBS-FULL, once per 5 s). */
#define GRID_QUEUE_JOBS 4096
#define GRID_QUEUE_BYTES (64u << 20)
extern _Atomic uint32_t dgi_grid_queue_jobs;    /* the jobs bound (tests lower it) */

struct dgi_grid {
	dg_tp *tp;
	dg_member *m;                  /* held (dgi_member_hold) until stop */
	dgi_member_lease lease;        /* m's words, for the local get (read.c) */
	dg_registry *reg;
	dgi_grid_config cfg;
	dg_node_id self;
	pthread_mutex_t mu;            /* caches set, topology install, graveyard */
	pthread_cond_t cv;             /* rebalancer and sweeper wake-ups */
	_Atomic uint64_t psync_due_ms; /* the soonest retry of a failed PSYNC
	                                  question (0: none): the sweeper wakes
	                                  for it (psync.c) */
	dgi_intmap caches;             /* id -> dg_cache (lock-free lookups) */
	dg_cache *grave;               /* destroyed caches (their handles, until stop) */
	dgi_aff *limbo;                /* replaced affinities not freed yet */
	dg_topology *topo;             /* current (held); grid->mu */
	_Atomic int64_t topver;
	_Atomic bool active;           /* topo holds a majority of its baseline
	                                  (or none is set, or policy none):
	                                  loaded copies merge (dgi_topo_active) */
	_Atomic int64_t self_order;    /* read by updates without grid->mu */
	bool stopping;
	_Atomic bool leaving;          /* graceful leave: no more updates as primary */
	uint64_t rebal_gen;            /* bumped on every topology: rebalancer restarts */
	struct dgi_lograte lr_rebal_full; /* REBALANCE-STORAGE-FULL: each 10 s */
	dgi_pstore *ps;
	int64_t persisted_topver;      /* highest topology version written to meta */
	char *persisted_bl;            /* the baseline in meta ("baseline": the
	                                  addresses, sorted, each ended by '\n';
	                                  NULL: none set), under mu */
	char *loaded_buf;              /* the baseline loaded at start, split in  */
	const char **loaded_bl;        /* place: nloaded_bl addresses into it, */
	uint32_t nloaded_bl;           /* for the membership */
	_Atomic uint64_t next_pw;      /* pending-write record ids (pending.c) */
	struct psync_parked *psync_parked; /* PSYNC requests waiting for a
	                                      topology (psync.c; grid->mu) */
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
	pthread_mutex_t umu;           /* ufree */
	struct dgi_uall *ufree;        /* answered UPDATE_ALLs kept for reuse (many.c) */
	uint32_t nufree;
};

/* grid.c */
dg_cache *dgi_grid_cache(dgi_grid *g, uint32_t id);   /* live cache or NULL */
/* Whether id is a server (STANDBY included) of the current topology: a
 * node whose copies can still be fetched.  Takes grid->mu. */
bool dgi_grid_has_server(dgi_grid *g, dg_node_id id);
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
 * tombstone flag until it expires), or (val NULL, !tomb) a deletion.
 * op_node, op_seq: the id of the update the copy comes from (the entry's),
 * kept in the record so a retry after a restart is still applied once. */
dg_err dgi_grid_persist(dgi_grid *g, dg_cache *c, uint32_t part, const uint8_t *key,
    uint32_t klen, const uint8_t *val, uint32_t vlen, const dgi_pver *ver,
    int64_t expire_ms, bool tomb, uint64_t op_node, uint64_t op_seq);
/* Queues a job for the worker pool (it owns j from then on), or
 * DG_ERR_BUSY when the queue is full (GRID_QUEUE_JOBS, _BYTES: j is still
 * the caller's). */
dg_err dgi_grid_job_push(dgi_grid *g, struct job *j);

/* ---- the operations (update.c, primary.c, pending.c, read.c, api.c, txapi.c) ---- */

/* update.c: the message handlers of every operation, registered on the
 * grid's transport. */
void dgi_ops_register(dgi_grid *g);
void dgi_primary_register(dgi_grid *g);    /* primary.c: UPDATE, BACKUP, BACKUP_ACK */
void dgi_read_register(dgi_grid *g);       /* read.c: GET */
/* Runs a job of the worker pool (an UPDATE or BACKUP of a persistent cache). */
void dgi_ops_run_job(dgi_grid *g, struct job *j);
/* primary.c, for many.c: whether c's writes run on the worker pool, and
 * handing a request to it; a backup's answer to one copy. */
bool dgi_wants_worker(const dg_cache *c);
void dgi_to_worker(dgi_grid *g, const dg_msg_in *in);
dg_err dgi_backup_apply(dgi_grid *g, dg_cache *c, const dgi_msg_backup *m, dg_node_id from);
/* many.c: the handlers of UPDATE_ALL, BACKUP_ALL, BACKUP_ALL_ACK; a job
 * of the worker pool of those types; every copy of a BACKUP_ALL answered
 * err (the worker pool refused it). */
void dgi_many_register(dgi_grid *g);
void dgi_many_run(dgi_grid *g, const dg_msg_in *in, dg_msg_type type, const void *body);
void dgi_backup_all_refuse(dgi_grid *g, const dg_msg_in *in, const dgi_msg_many *m,
    dg_err err);

/* ---- pending FULL_SYNC writes on the primary (pending.c) ---- */

/* Someone waiting for a pending write: a local caller (sem) or a request
 * to answer (remote).  PWW_WRITE: an update (its flag, and for a remote
 * GET_AND_PUT the old value in val); PWW_READ: a read that found the
 * entry pending (remote: the value to answer with, copied when it
 * parked); PWW_TXREAD: a tx's read (dgi_cache_tx_read_parked: found, val
 * and ver copied when it parked, answered through fn). */
enum { PWW_WRITE = 1, PWW_READ = 2, PWW_TXREAD = 3 };
struct pw_wait {
	struct pw_wait *next;
	int kind;
	bool remote;
	bool done;                  /* local: answered (partition locked) */
	bool applied;               /* a write answered with an error: applied here */
	bool found, has_old;
	dg_err err;
	int64_t flag;
	sem_t sem;                  /* local */
	sem_t *post;                /* local: posted instead of sem when set (a
	                               batch waits for many keys on one) */
	dg_msg_in in;               /* remote: the request */
	dg_buf val;                 /* remote: a read's value, a GET_AND_PUT's old one */
	struct dgi_uall *group;     /* remote write of an UPDATE_ALL: its answer goes
	                               to slot gi of the group, not to `in` */
	uint32_t gi;
	dgi_pver ver;               /* PWW_TXREAD: the version read */
	dgi_tx_read_fn fn;          /* PWW_TXREAD: answers `in` */
	void *fnctx;
};

/* An UPDATE_ALL being answered (many.c): one slot per item; the last
 * key to finish sends UPDATE_ALL_RES and frees it. */
struct dgi_uall {
	struct dgi_uall *next;      /* grid->ufree */
	uint32_t cap;               /* slots allocated */
	_Atomic uint32_t left;      /* items not answered, +1 while the handler runs */
	uint32_t n;
	int64_t cache_id;
	dg_msg_in in;               /* the request (body not kept) */
	struct dgi_ures_item res[]; /* n */
};
/* Slot gi of u is answered (any thread, any lock): the last one replies.
 * dgi_uall_free_all: the kept ones, at the grid's stop. */
void dgi_uall_free_all(dgi_grid *g);
void dgi_uall_done(dgi_grid *g, struct dgi_uall *u, uint32_t gi, dg_err err, int64_t flag,
    bool applied);

/* FULL_SYNC copies gathered per backup while one thread writes many keys
 * (pending.c): between dgi_copies_begin and dgi_copies_end, a pending
 * write's copies are not sent one by one but kept here, and
 * dgi_copies_end (no partition lock held) sends each backup one
 * BACKUP_ALL with its copies, in the order they were written.  A copy
 * for more backups than DGI_COPIES_PEERS, or of another cache, goes
 * alone as before.  Per partition, every backup still receives the
 * copies in one order, as with single sends, unless another thread
 * writes the same partition between two of the end's sends — a few
 * copies at most, against the DGI_RECENT the promotion resends. */
#define DGI_COPIES_PEERS 8
void dgi_copies_begin(dgi_grid *g, dg_cache *c);
void dgi_copies_end(dgi_grid *g);
/* On the transport's reactor thread (an UPDATE's handler), when nothing
 * is being gathered: gathers the copies of c until the end of this round
 * of messages (dg_tp_at_round_end), so the UPDATEs one read brought send
 * one message per backup — a BACKUP when it has one copy.  Elsewhere:
 * nothing (sent one by one). */
void dgi_copies_round(dgi_grid *g, dg_cache *c);

#define DGI_PW_INLINE 7             /* backups a record names without allocating */
/* How long a backup's DG_ERR_STORAGE_FULL answer holds its partitions'
 * writes off (dg_cache.full): renewed by each such answer — the write it
 * refused is sent again every second — so it ends 5 s after the last, or
 * once it takes a copy as large. */
#define DGI_BACKUP_FULL_MS 5000
/* Whether a write of bytes (key and value) to part under aff is to be
 * refused DG_ERR_STORAGE_FULL, not applied: a backup of part refused a
 * copy as large lately (now: dgi_coarse_ms). */
bool dgi_backup_full_slow(dg_cache *c, const struct dgi_aff *aff, uint32_t part,
    uint64_t bytes, uint64_t now);
static inline bool dgi_backup_full(dg_cache *c, const struct dgi_aff *aff, uint32_t part,
    uint64_t bytes, uint64_t now)
{
	uint64_t until = atomic_load_explicit(&c->full_until_ms, memory_order_relaxed);
	return __builtin_expect(until > now, 0) &&
	    dgi_backup_full_slow(c, aff, part, bytes, now);
}

/* A pending write (pending.c's header comment): the version of one key
 * this primary sent to its backups and waits to hear back about. */
struct pw {
	struct pw *next;            /* the partition's pending list, or free list */
	uint64_t id;                /* named in BACKUP and BACKUP_ACK */
	uint64_t hash;
	dgi_pver ver;
	int64_t flag;               /* the update's flag (sent with the copy) */
	int64_t topver;             /* the affinity it was sent under */
	uint64_t deadline;          /* sent: monotonic ms */
	int state;
	uint32_t nexpect, nacked, cap;
	dg_err err;                 /* the first refusal */
	dg_node_id *expect;         /* expect_in, or heap (cap ids, then cap acked bytes) */
	uint8_t *acked;
	dg_node_id expect_in[DGI_PW_INLINE];
	uint8_t acked_in[DGI_PW_INLINE];
	bool has_owner;             /* owner (a remote update's answer) in use */
	struct pw_wait owner;
	struct pw_wait *waiters;
	struct dgi_part *pt;        /* its partition (the waiters' free list) */
};

/* All of these run with the partition locked. */
/* Starts replicating e (just written as primary under aff) or joins the
 * record already sending that version: sets the entry's PENDING flag and
 * returns the record to wait on (hash: e's key hash).  NULL: nothing
 * to wait for (no backup: committed), or *err (DG_ERR_NOMEM).  A record
 * whose sends failed comes back idle with *err set (applied, not
 * replicated: the caller answers the error). */
struct pw *dgi_pw_start(dgi_grid *g, dg_cache *c, uint32_t part, const dgi_aff *aff,
    uint64_t hash, dgi_entry *e, dg_err *err);
/* The record replicating (hash, ver), or NULL. */
struct pw *dgi_pw_find(dgi_part *pt, uint64_t hash, const dgi_pver *ver);
void dgi_pw_attach(struct pw *w, struct pw_wait *x);
bool dgi_pw_detach(struct pw *w, struct pw_wait *x);
/* A waiter for a request answered later: the record's own owner slot for
 * the first write, else allocated (NULL: DG_ERR_NOMEM).  Free it with
 * dgi_pw_waiter_free only if it was never attached. */
struct pw_wait *dgi_pw_remote_waiter(struct pw *w, int kind);
void dgi_pw_waiter_free(struct pw *w, struct pw_wait *x);
/* A local caller waits on x (attached to its record) until answered or
 * deadline (monotonic ms): unlocks pt first; spins first as a caller
 * waiting for tp's answers does (transport.h).  DG_ERR_TIMEOUT
 * (x->applied for a write: applied here, not confirmed). */
dg_err dgi_pw_wait(const dg_tp *tp, dgi_part *pt, struct pw_wait *x, uint64_t deadline);
/* A local waiter x gives up (pt locked): true when it was not answered yet
 * and is detached now (a write: applied here, not confirmed; nothing will
 * post for it); false when it was answered (its post is made or coming). */
bool dgi_pw_give_up(dgi_part *pt, struct pw_wait *x);
/* Events: a backup's answer (locks the partition itself); a new affinity
 * (records kept when the owners are the same, else sent again or ended);
 * the sweeper's tick (deadlines, idle records sent again); the cache going
 * away (every waiter answered err). */
void dgi_pw_ack(dgi_grid *g, dg_cache *c, uint32_t part, uint64_t id, dg_node_id from,
    dg_err res);
void dgi_pw_retopo(dgi_grid *g, dg_cache *c, uint32_t part, const dgi_aff *now);
void dgi_pw_tick(dgi_grid *g, dg_cache *c, uint32_t part, uint64_t now_ms);
void dgi_pw_forget_all(dgi_grid *g, dg_cache *c, dg_err err);
void dgi_pw_free_part(dgi_part *pt);   /* the free list and the ring below */

/* The last FULL_SYNC copies a backup applied, per partition: a backup
 * that becomes the primary sends them again as pending writes, so a value
 * its failed primary had not yet sent to every backup is not served until
 * every owner has it.  A write older than the last DGI_RECENT copies was
 * sent before them, on the same connections, so the other backups have it
 * whenever they have those. */
#define DGI_RECENT 8
struct dgi_recent {
	uint64_t hash;
	dgi_pver ver;
};
void dgi_pw_recent(dgi_part *pt, uint64_t hash, const dgi_pver *ver);
/* This node became the primary of part under now (partition locked). */
void dgi_pw_promoted(dgi_grid *g, dg_cache *c, uint32_t part, const dgi_aff *now);

/* ---- a new primary learns what its predecessors did (psync.c) ---- */
/* An old owner a partition waits for: asked about version ver, the one
 * this node became the partition's primary at (since: the version
 * before).  A node keeps waiting after it lost the role again: until the
 * old owner answered, it does not answer a later primary's question
 * either (psync.c, "Answers in order"). */
struct dgi_psync_wait {
	dg_node_id node;
	int64_t ver, since;
	int64_t page;               /* the page asked for next (0: none taken) */
	uint64_t after;             /* its cursor: the last page's last one */
	bool full;                  /* its last page did not fit this node's
	                               store (DG_ERR_STORAGE_FULL) */
	uint8_t fails;              /* questions in a row that failed */
	uint64_t retry_ms;          /* a failed question is asked again then
	                               (0: none due; the 500 ms tick asks too) */
};
/* PSYNC questions an old owner answers DG_ERR_NOT_READY before it answers
 * any (tests: a question that fails) */
extern _Atomic uint32_t dgi_test_psync_refuse;
/* PSYNC questions that fail to be sent (tests: as to an old owner gone) */
extern _Atomic uint32_t dgi_test_psync_unsent;
/* The sweeper's period in ms (tests lengthen it; 0: 1000) */
extern _Atomic uint32_t dgi_test_sweep_ms;
/* This node became the primary of part at version ver (partition locked;
 * since: the previous affinity's version): asks the n old owners in from
 * (besides any it still waits for) and answers updates DG_ERR_NOT_READY
 * until all of them answered. */
void dgi_psync_begin(dgi_grid *g, dg_cache *c, uint32_t part, int64_t ver, int64_t since,
    const dg_node_id *from, uint32_t n);
/* Sends the requests dgi_psync_begin set up, once the cache's new
 * affinity is published (g->mu held: the topology's install; no
 * partition locked). */
void dgi_psync_send(dgi_grid *g, dg_cache *c);
/* Drops the old owners alive() says left (partition locked). */
void dgi_psync_keep(dgi_part *pt, bool (*alive)(void *ctx, dg_node_id id), void *ctx);
/* Asks the old owners that did not answer again (sweeper; partition locked). */
void dgi_psync_tick(dgi_grid *g, dg_cache *c, uint32_t part, uint64_t now_ms);
/* Answers the requests that need not wait any more: after this node
 * installed a version, or an old owner it waited for answered. */
void dgi_psync_release(dgi_grid *g);
void dgi_psync_register(dgi_grid *g);
void dgi_psync_stop(dgi_grid *g);          /* ends this node's questions (their callbacks
                                              run now) and frees the requests waiting */
void dgi_psync_free_part(dgi_part *pt);

/* ---- the update-id table (dedup.c) ---- */
struct dgi_dd {
	uint64_t node, seq;         /* node 0: empty */
	int64_t flag;
	uint64_t t_ms;              /* monotonic, when recorded */
};
#define DGI_DEDUP_KEEP_MS (5u * 60 * 1000)
/* Whether (node, seq) is the last update its thread applied here; *flag. */
bool dgi_dedup_find(const dgi_part *p, uint64_t node, uint64_t seq, int64_t *flag);
void dgi_dedup_put(dgi_part *p, uint64_t node, uint64_t seq, int64_t flag, uint64_t now_ms);
void dgi_dedup_free(dgi_part *p);

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
	const uint8_t *exp;          /* the *_IF_EQ ops: the expected value */
	uint32_t elen;
	uint64_t op_node, op_seq;
	bool fresh;                  /* its id is new (dgi_upd_init) and the update
	                                has not been offered to any primary yet:
	                                no update-id table or entry can hold it */
	/* results */
	int64_t flag;
	dg_buf *old;                 /* the previous value (encoded), or NULL */
	bool had;
	bool applied;                /* an error, yet applied here (not replicated) */
	struct pw *pw;               /* FULL_SYNC: the pending write to wait on, or
	                                NULL (answered now); partition still locked */
};

/* An entry that is neither a tombstone nor expired at wall (ms; 0: do
 * not look at expiry times). */
static inline bool dgi_entry_live(const dgi_entry *e, int64_t wall)
{
	if (e == NULL || (e->flags & DGI_ENTRY_TOMB))
		return false;
	int64_t x = dgi_entry_expire(e);
	return x == 0 || x > wall;
}

/* What partition part in state st (pt locked) lets this node do with its
 * copy e of a key (NULL: none) — the one rule of every read and every
 * primary's update:
 *   DG_OK                  serve it, update it;
 *   DG_ERR_PARTITION_LOST  every copy of the partition is gone;
 *   DG_ERR_REMAP           not an owner (NONE): the sender maps again;
 *   DG_ERR_NOT_READY       MOVING and this copy is missing or older than
 *                          the move (kept from an earlier ownership): the
 *                          supplier may hold a newer one.
 * A blind put on a MOVING primary needs no copy (its version is newer
 * than any the supplier has): callers that may write without one check
 * the error themselves.  dgi_part_may_serve_leased: the same, with the
 * lease (dg_member_serving) read by the caller, under the lock. */
static inline dg_err dgi_part_may_serve_leased(const dg_cache *c, const dgi_part *pt,
    uint32_t part, int st, const dgi_entry *e, dg_err lease)
{
	if (st == P_LOST || atomic_load_explicit(&c->lost[part], memory_order_relaxed))
		return DG_ERR_PARTITION_LOST;
	if (st == P_NONE)
		return DG_ERR_REMAP;
	/* a copy is served only under a majority's lease (PROTOCOL.md,
	 * "Majority"): without one the others may be promoting its backups */
	if (lease != DG_OK)
		return DG_ERR_NOT_READY;
	if (st == P_MOVING && (e == NULL || dgi_entry_topver(e) < pt->moving_topver))
		return DG_ERR_NOT_READY;
	return DG_OK;
}

static inline dg_err dgi_part_may_serve(const dg_cache *c, const dgi_part *pt, uint32_t part,
    int st, const dgi_entry *e)
{
	return dgi_part_may_serve_leased(c, pt, part, st, e, dg_member_serving(c->g->m));
}

/* primary.c.  Applies an update as the primary: DG_ERR_REMAP when this
 * node is not the primary under the sender's topology version.  With
 * DG_OK and u->pw set, the answer waits for that pending write: the
 * partition stays locked (attach a waiter, then unlock); otherwise the
 * partition is unlocked on return. */
dg_err dgi_primary_apply(dgi_grid *g, dg_cache *c, struct upd *u);
/* The update an UPDATE (or one UPDATE_ALL item, as the UPDATE it stands
 * for) asks for, into *u; DG_ERR_INVAL when its partition is out of
 * range, its key empty, a value or expected value its op needs missing,
 * or the key does not hash to the partition it names. */
dg_err dgi_upd_received(const dg_cache *c, struct upd *u, const dgi_msg_update *m);
/* Writes key's next version as its primary (partition locked; e: the key's
 * entry or NULL; val NULL: a removal, kept as a tombstone): persists
 * first, then applies; *ver and *expire: the new version and expiry. */
dg_err dgi_write_new_version(dgi_grid *g, dg_cache *c, uint32_t part, dgi_entry *e,
    int64_t topver, uint64_t hash, const uint8_t *key, uint32_t klen, const uint8_t *val,
    uint32_t vlen, uint64_t op_node, uint64_t op_seq, dgi_pver *ver, int64_t *expire,
    dgi_entry **out);

/* Lock-free local reads (read.c: get_fast, get_short) are off where a
 * race detector runs: their loads race with writers' by design (the
 * sequence count decides), which ThreadSanitizer would report; get_fast
 * runs under the partition lock instead, and get_short answers nothing. */
#if defined(__SANITIZE_THREAD__)
#define DGI_READ_LOCKED_ONLY 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DGI_READ_LOCKED_ONLY 1
#endif
#endif
/* read.c: the short get out of line (tests: what it answers alone),
 * DG_ERR__COUNT where the general path would decide (always, under
 * DGI_READ_LOCKED_ONLY). */
dg_err dgi_get_short(dg_cache *c, const uint8_t *key, uint32_t klen, dg_buf *out);
/* primary.c.  A put of a raw key (8..127 bytes) on this node's fast path
 * (cache/primary.c): DG_OK, or DG_ERR__COUNT with nothing written or
 * counted — take the general path (dgi_update).  dgi_put_raw: the same,
 * then dgi_put_general (api.c: dg_cache_put's encoded put) when it
 * answered nothing — a tail call, so dg_cache_put keeps nothing across
 * the short put (its arguments' spills and reloads were ~20 of a put's
 * instructions). */
dg_err dgi_put_short(dg_cache *c, const uint8_t *key, uint32_t klen, const uint8_t *val,
    uint32_t vlen);
dg_err dgi_put_raw(dg_cache *c, const uint8_t *key, uint32_t klen, const uint8_t *val,
    uint32_t vlen);
dg_err dgi_put_general(dg_cache *c, const void *key, size_t klen, const void *val, size_t vlen);

/* update.c.  An update id's sequence (with this node's id: unique per
 * node): the thread's slot (taken once from a shared counter) in the top
 * 24 bits and its own counter below, so an update costs no shared atomic. */
struct dgi_op_seq_tl {
	uint64_t base, seq;         /* base 0: no slot yet */
};
extern DGI_TLS_IE _Thread_local struct dgi_op_seq_tl dgi_op_seq_tl;
uint64_t dgi_next_op_seq_slow(void);
static inline __attribute__((always_inline)) uint64_t dgi_next_op_seq(void)
{
	struct dgi_op_seq_tl *t = &dgi_op_seq_tl;
	if (__builtin_expect(t->base == 0 || t->seq == (UINT64_C(1) << 40) - 1, 0))
		return dgi_next_op_seq_slow();
	return t->base | ++t->seq;
}

/* update.c: the originator.  dgi_update_op runs an update (OP_*) from this
 * node, retrying after remaps up to request_timeout_ms; dgi_update is the
 * same, timed in the cache's latency histogram. */
dg_err dgi_update_op(dg_cache *c, int op, const uint8_t *key, size_t klen,
    const uint8_t *exp, size_t elen, const uint8_t *val, size_t vlen, int64_t *flag,
    dg_buf *old);
dg_err dgi_update(dg_cache *c, int op, const uint8_t *key, size_t klen,
    const uint8_t *exp, size_t elen, const uint8_t *val, size_t vlen, int64_t *flag,
    dg_buf *old);
/* read.c, for batches (batch.c).  dgi_local_get reads this node's copy
 * (part, hash of key) into out (unwrap: the bytes inside a BYTES value):
 * DG_ERR_NOT_READY when MOVING without a current copy; a FULL_SYNC write
 * still pending is read once every backup has it (*deadline: 0, or set on
 * a wait).  dgi_read_stale: an answer primary gave (read at topology
 * version seen) came from a node no longer the partition's primary — read
 * again. */
dg_err dgi_local_get(dg_cache *c, uint32_t part, uint64_t hash, const uint8_t *key,
    uint32_t klen, dg_buf *out, bool unwrap, uint64_t *deadline);
bool dgi_read_stale(dgi_grid *g, dg_cache *c, uint32_t part, dg_node_id primary, int64_t seen);

/* batch.c: put_all / remove_all (op OP_PUT or OP_REMOVE) and get_all of
 * an ATOMIC cache, every key in flight at once (encoded keys and values).
 * Each item's err, and flag: removed (remove), found (get); a get's value
 * is it[i].vlen bytes at offset it[i].at of vals (appended there).
 * Returns the first failed key's error (get: and vals as it was). */
typedef struct dgi_bitem {
	const uint8_t *key;
	uint32_t klen;
	const uint8_t *val;
	uint32_t vlen;
	size_t at;
	int64_t flag;
	dg_err err;
} dgi_bitem;
dg_err dgi_batch_update(dg_cache *c, int op, dgi_bitem *it, size_t n);
dg_err dgi_batch_get(dg_cache *c, dgi_bitem *it, size_t n, bool unwrap, dg_buf *vals,
    size_t *found);

/* batch.c: a thread's scratch for its batch calls, kept from one call to
 * the next so a steady stream of batches allocates nothing: the items
 * (api.c) and their encodings, the per-key states (batch.c), the answers'
 * values.  A call takes it with dgi_bscratch_take (NULL: out of memory)
 * and gives it back with dgi_bscratch_put, which frees what grew past
 * BSCRATCH_KEEP; freed when the thread exits.  Each user empties what it
 * uses (api.c: items, enc; batch.c: keys, rbuf, lbuf).  A batch call never
 * runs inside another on one thread. */
#define BSCRATCH_KEEP (1u << 20)
typedef struct dgi_bscratch {
	dgi_bitem *items;
	size_t items_cap;           /* bytes */
	void *keys;
	size_t keys_cap;            /* bytes */
	void *groups;               /* batch.c: one per message of many keys */
	size_t groups_cap;          /* bytes */
	dg_buf enc, rbuf, lbuf;
	dg_buf mbuf;                /* batch.c: a message's list being encoded */
} dgi_bscratch;
dgi_bscratch *dgi_bscratch_take(void);
void dgi_bscratch_put(dgi_bscratch *s);
/* *p with room for bytes (grown, contents not kept), or NULL. */
void *dgi_bscratch_room(void **p, size_t *cap, size_t bytes);

/* The pieces of dgi_update_op, for batches (batch.c): dgi_upd_init fills u
 * for one update from this node (a new update id; counted); dgi_upd_msg is
 * its UPDATE to a remote primary (u->topver set); dgi_update_run runs it
 * to the end as dgi_update_op does — attempts, remaps, retries with the
 * same id — until deadline (0: request_timeout_ms from the first time an
 * attempt needs one — a remote request, a wait, a retry); maybe: an earlier attempt may have been
 * applied (errors then say DG_ERR_TIMEOUT, never "not applied"). */
void dgi_upd_init(dg_cache *c, struct upd *u, int op, const uint8_t *key, size_t klen,
    const uint8_t *exp, size_t elen, const uint8_t *val, size_t vlen);
dgi_msg_update dgi_upd_msg(const dg_cache *c, const struct upd *u);
dg_err dgi_update_run(dg_cache *c, struct upd *u, uint64_t deadline, bool maybe,
    int64_t *flag, dg_buf *old);
/* After a remap: a short pause (the topology this node maps on is behind
 * or ahead of the primary's).  DG_ERR_TIMEOUT past deadline. */
dg_err dgi_wait_topology_change(dgi_grid *g, int64_t seen, uint64_t deadline);
/* Errors after which an operation maps its key again and retries. */
bool dgi_retriable(dg_err e);
/* Records an operation of kind begun at t0 (dgi_lat_ticks) in c's latency
 * histogram, unless e is DG_ERR_INVAL (no operation); returns e.  Enters
 * a section of its own (for the batches; the single-key operations record
 * inside theirs, dgi_lat_record). */
dg_err dgi_timed(dg_cache *c, dg_cache_op_kind kind, uint64_t t0, dg_err e);

/* read.c: reads the encoded value of key into out (unwrap: the bytes
 * inside a BYTES value); dgi_get_enc is the same, timed.  DG_ERR_NOT_FOUND. */
dg_err dgi_get_op(dg_cache *c, const uint8_t *key, size_t klen, dg_buf *out, bool unwrap);
dg_err dgi_get_enc(dg_cache *c, const uint8_t *key, size_t klen, dg_buf *out, bool unwrap);
/* dgi_get_enc of a raw API key and unwrap (8 <= klen < 128: the caller checks): the key's
 * BYTES encoding is built only if the read leaves the lock-free path. */
dg_err dgi_get_raw(dg_cache *c, const uint8_t *key, size_t klen, dg_buf *out);

/* api.c: appends p/n to out (out NULL: nothing); appends the byte string
 * inside an encoded BYTES value to out. */
dg_err dgi_append(dg_buf *out, const uint8_t *p, size_t n);
dg_err dgi_unwrap_to(const uint8_t *enc, size_t len, dg_buf *out);
/* Applies a copy (backup, rebalancing): only when newer; tombstone when
 * val is NULL and the partition is MOVING, else a removal.  Persists.
 * Caller holds no lock.  A key or version an entry cannot hold is refused
 * (dgi_entry_storable: DG_ERR_INVAL, DG_ERR_LIMIT), nothing written. */
dg_err dgi_apply_copy(dgi_grid *g, dg_cache *c, uint32_t part, uint64_t hash,
    const uint8_t *key, uint32_t klen, const uint8_t *val, uint32_t vlen,
    const dgi_pver *ver, int64_t expire_ms, uint64_t op_node, uint64_t op_seq);

/* rebalance.c */
void *dgi_rebalancer(void *arg);
void dgi_rebalance_register(dgi_grid *g);
/* Drops the copies this node still holds of partitions it no longer owns
 * (kept for their new owners to fetch) once they have been held for the
 * rent grace and every current owner answers that it OWNS the partition
 * whole, or has taken this node's copy (REBALANCE_OWNED; PROTOCOL.md,
 * "Rebalancing").  Every owner is asked, however many (a REPLICATED
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
/* Test hook: the node with this id ignores FULL_SYNC copies (BACKUP with a
 * pending-write id): no apply, no answer — a backup that stopped
 * answering, without a topology change.  0: off. */
extern _Atomic uint64_t dgi_test_drop_backups_at;
/* Adds id to a partition's node list (srcs, taken; partition locked)
 * unless there; false when the list is full (not added). */
bool dgi_part_node_add(dg_node_id *list, uint8_t *n, dg_node_id id);
static inline bool dgi_part_src_add(dgi_part *p, dg_node_id src)
{
	return dgi_part_node_add(p->srcs, &p->nsrcs, src);
}
/* The entries a page of about `bytes` holds, from pt's average entry
 * (16..65536; partition locked): rebalancing's and psync's pages' entry
 * count (dgi_part_scan's max; its max_bytes ends a page of large
 * entries). */
uint32_t dgi_page_cap(const dgi_part *pt, uint64_t bytes);
/* Encodes entries of a partition page (SUPPLY, SCAN_RES) into b: max
 * bytes (bytes_limit: rebalancing's pages) or entries (a scan's), and
 * never more bytes than rebalance_batch_bytes but for one larger entry
 * alone (dgi_part_scan). */
dg_err dgi_page_encode(dgi_grid *g, dg_cache *c, uint32_t part, uint64_t after,
    bool first, uint64_t max, bool bytes_limit, bool live_only, dg_buf *b);

#endif /* DG_CACHE_INT_H */
