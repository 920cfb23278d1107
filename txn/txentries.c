/*
 * txentries.c — a transaction's entry set on its near node (txentries.h).
 *
 * Layout.  One struct dgi_txents, the only allocation of dgi_txents_create:
 *
 *   arena     the inline chunk t_inline[DGI_TXENTS_INLINE], then heap chunks
 *             (struct chunk, newest first on t_chunks) of doubling size:
 *             2 KiB, 4 KiB, ... (a larger power of two when one request
 *             needs more).  Bump allocation in the newest chunk only; the
 *             tail of a chunk a request did not fit in stays unused until
 *             reset.  Holds key bytes, value bytes and entry segments 1...
 *   entries   struct ent (the public dgi_txent, then the entry's value
 *             buffer) in segments.  Segment 0 is ENTS_INLINE (8) entries
 *             inline in the struct; segment k >= 1 holds 8 << (k - 1)
 *             entries, positions [8 << (k - 1), 8 << k), carved from the
 *             arena when its first position is used.  Position i (first
 *             touched order) maps to its segment by i's top bit; entries
 *             never move, so a dgi_txent pointer stays valid until reset.
 *   index     open addressing with linear probing over a power-of-two array
 *             of uint32 (0: empty, else position + 1), slot from
 *             dgi_mix64(caller's hash ^ cache_id * golden ratio).  16 slots
 *             inline; adding past load 1/2 replaces it by a heap array of
 *             twice the slots (the previous heap array is freed).  No
 *             deletion: an entry lives until reset.
 *
 * Values.  An entry keeps the buffer its value was last copied to (e_vbuf,
 * e_vcap bytes).  A new value that fits is copied there in place; a larger
 * one gets new arena space (the old is not reclaimed until reset).  A REMOVE
 * keeps the buffer for a later PUT.
 *
 * Errors leave the set unchanged: whatever can fail (an index array, an
 * arena chunk) is obtained before anything is modified.
 *
 * A small tx — up to 8 keys whose key and value bytes total at most
 * DGI_TXENTS_INLINE, e.g. 8 x (16 + 100) — allocates nothing beyond the
 * struct.  Reset frees every heap chunk and a heap index and keeps the rest.
 */
#include "txn/txentries.h"
#include "marshal/mix.h"

#include <string.h>

enum {
	ENTS_INLINE = 8,               /* segment 0, in the struct */
	IDX_INLINE = 2 * ENTS_INLINE,  /* slots holding segment 0 at load 1/2 */
	SEGS = 30,                     /* segment 29 starts at 2^31 */
	ALIGN_SLACK = 7                /* worst padding before a segment */
};

#define POS_MAX (UINT32_MAX - 1u)    /* a slot holds position + 1 */

struct chunk {
	struct chunk *c_next;
	size_t c_size;                 /* bytes in c_data */
	uint8_t c_data[];
};

struct ent {
	dgi_txent e_pub;               /* first: &x->e_pub is what callers get */
	uint8_t *e_vbuf;               /* value space last used, NULL: none */
	uint32_t e_vcap;               /* its bytes */
};

struct dgi_txents {
	uint8_t *t_cur;                /* arena: next free byte */
	uint8_t *t_end;                /* arena: end of the newest chunk */
	struct chunk *t_chunks;        /* heap chunks, newest first */
	size_t t_next;                 /* size of the next heap chunk */
	size_t t_heap;                 /* bytes of heap chunks, headers included */
	uint32_t *t_idx;               /* t_idx_inline or a heap array */
	uint32_t t_icap;               /* slots, a power of two */
	uint32_t t_count;              /* entries */
	struct ent *t_seg[SEGS];       /* t_seg[0] == t_ents_inline */
	uint32_t t_idx_inline[IDX_INLINE];
	struct ent t_ents_inline[ENTS_INLINE];
	_Alignas(16) uint8_t t_inline[DGI_TXENTS_INLINE];
};

/* What names a key: the arguments every lookup carries. */
struct kref {
	uint32_t cache_id;
	uint32_t part;
	const uint8_t *key;
	uint32_t klen;
	uint64_t hash;
};

static const uint8_t empty_val[1];   /* val of a PUT of 0 bytes, never NULL */

/* ------------------------------------------------------------------------
 * Arena
 * ------------------------------------------------------------------------ */

/* Makes n bytes available in the newest chunk, adding a chunk if needed.
 * Only a new chunk is linked (the entries are untouched).  DG_ERR_NOMEM. */
static dg_err arena_reserve(dgi_txents *t, uint64_t n)
{
	if (n <= (uint64_t)(t->t_end - t->t_cur))
		return DG_OK;
	size_t size = t->t_next;
	while (size < n) {
		if (size > SIZE_MAX / 4)
			return DG_ERR_NOMEM;
		size *= 2;
	}
	struct chunk *c = dgi_alloc(sizeof *c + size);
	if (c == NULL)
		return DG_ERR_NOMEM;
	c->c_next = t->t_chunks;
	c->c_size = size;
	t->t_chunks = c;
	t->t_heap += sizeof *c + size;
	t->t_cur = c->c_data;
	t->t_end = c->c_data + size;
	t->t_next = size <= SIZE_MAX / 4 ? size * 2 : size;
	return DG_OK;
}

/* n bytes aligned to align (a power of two) from the reserved space. */
static void *arena_take(dgi_txents *t, size_t n, size_t align)
{
	uint8_t *p = t->t_cur + (-(uintptr_t)t->t_cur & (align - 1));
	t->t_cur = p + n;
	return p;
}

static void chunks_free(dgi_txents *t)
{
	struct chunk *c = t->t_chunks;
	while (c != NULL) {
		struct chunk *next = c->c_next;
		dgi_free(c);
		c = next;
	}
	t->t_chunks = NULL;
}

/* ------------------------------------------------------------------------
 * Entries by position
 * ------------------------------------------------------------------------ */

/* Segment of position i >= ENTS_INLINE: 1 + the top bit of i / 8. */
static unsigned seg_of(uint32_t i)
{
	return 32u - (unsigned)__builtin_clz(i / ENTS_INLINE);
}

static struct ent *ent_at(const dgi_txents *t, uint32_t i)
{
	if (i < ENTS_INLINE)
		return &t->t_seg[0][i];
	unsigned k = seg_of(i);
	return &t->t_seg[k][i - (ENTS_INLINE << (k - 1))];
}

/* Bytes of the segment position i opens, 0 if it opens none.  A segment
 * starting at a power of two p >= 8 holds p entries. */
static uint64_t seg_bytes(uint32_t i)
{
	if (i < ENTS_INLINE || (i & (i - 1)) != 0)
		return 0;
	return (uint64_t)i * sizeof(struct ent);
}

static bool ent_is(const struct ent *x, const struct kref *k)
{
	const dgi_txent *e = &x->e_pub;
	return e->hash == k->hash && e->cache_id == k->cache_id &&
	    e->klen == k->klen && memcmp(e->key, k->key, k->klen) == 0;
}

/* ------------------------------------------------------------------------
 * Index
 * ------------------------------------------------------------------------ */

/* The caller's hash may be weak in its low bits (dgi_mix64 of it). */
static uint32_t slot_home(uint32_t cache_id, uint64_t hash, uint32_t cap)
{
	uint64_t h = dgi_mix64(hash ^ (uint64_t)cache_id * 0x9e3779b97f4a7c15ull);
	return (uint32_t)h & (cap - 1);
}

/* The slot holding k's position, or the empty slot where it would go.
 * Terminates: the load is at most 1/2. */
static uint32_t idx_probe(const dgi_txents *t, const struct kref *k)
{
	uint32_t mask = t->t_icap - 1;
	uint32_t s = slot_home(k->cache_id, k->hash, t->t_icap);
	while (t->t_idx[s] != 0 && !ent_is(ent_at(t, t->t_idx[s] - 1), k))
		s = (s + 1) & mask;
	return s;
}

/* A zeroed array of twice the slots if adding one entry would pass load
 * 1/2; *out NULL if none is needed.  DG_ERR_NOMEM. */
static dg_err idx_prepare(const dgi_txents *t, uint32_t **out)
{
	*out = NULL;
	if ((uint64_t)(t->t_count + 1) * 2 <= t->t_icap)
		return DG_OK;
	if (t->t_icap > UINT32_MAX / 2)
		return DG_ERR_NOMEM;
	*out = dgi_calloc((size_t)t->t_icap * 2, sizeof **out);
	return *out != NULL ? DG_OK : DG_ERR_NOMEM;
}

/* Moves every position into idx (twice the slots) and makes it the index. */
static void idx_install(dgi_txents *t, uint32_t *idx)
{
	uint32_t cap = t->t_icap * 2;
	for (uint32_t i = 0; i < t->t_count; i++) {
		const dgi_txent *e = &ent_at(t, i)->e_pub;
		uint32_t s = slot_home(e->cache_id, e->hash, cap);
		while (idx[s] != 0)
			s = (s + 1) & (cap - 1);
		idx[s] = i + 1;
	}
	if (t->t_idx != t->t_idx_inline)
		dgi_free(t->t_idx);
	t->t_idx = idx;
	t->t_icap = cap;
}

/* ------------------------------------------------------------------------
 * Adding and updating
 * ------------------------------------------------------------------------ */

/* Copies val (NULL: none) into x's buffer, or new arena space reserved by
 * the caller when it does not fit.  memmove: val may be x's own value. */
static void val_store(dgi_txents *t, struct ent *x, const uint8_t *val,
    uint32_t vlen)
{
	dgi_txent *e = &x->e_pub;
	if (val == NULL) {
		e->val = NULL;
		e->vlen = 0;
		return;
	}
	if (vlen > x->e_vcap) {
		x->e_vbuf = arena_take(t, vlen, 1);
		x->e_vcap = vlen;
	}
	if (vlen > 0)
		memmove(x->e_vbuf, val, vlen);
	e->val = x->e_vbuf != NULL ? x->e_vbuf : empty_val;
	e->vlen = vlen;
}

static void ent_init(struct ent *x, const struct kref *k, const uint8_t *key)
{
	memset(x, 0, sizeof *x);
	x->e_pub.cache_id = k->cache_id;
	x->e_pub.part = k->part;
	x->e_pub.hash = k->hash;
	x->e_pub.key = key;
	x->e_pub.klen = k->klen;
}

/* A new entry for k at the next position, with arena room for vbytes of
 * value left reserved.  DG_ERR_NOMEM with nothing changed. */
static dg_err ent_add(dgi_txents *t, const struct kref *k, uint32_t vbytes,
    struct ent **out)
{
	uint32_t pos = t->t_count;
	if (pos >= POS_MAX)
		return DG_ERR_NOMEM;
	uint32_t *idx;
	dg_err rv = idx_prepare(t, &idx);
	if (rv != DG_OK)
		return rv;
	uint64_t seg = seg_bytes(pos);
	uint64_t room = (seg != 0 ? seg + ALIGN_SLACK : 0) + k->klen + vbytes;
	if (arena_reserve(t, room) != DG_OK) {
		dgi_free(idx);
		return DG_ERR_NOMEM;
	}
	if (idx != NULL)
		idx_install(t, idx);
	if (seg != 0)
		t->t_seg[seg_of(pos)] =
		    arena_take(t, (size_t)seg, _Alignof(struct ent));
	uint8_t *key = arena_take(t, k->klen, 1);
	memcpy(key, k->key, k->klen);
	struct ent *x = ent_at(t, pos);
	ent_init(x, k, key);
	t->t_idx[idx_probe(t, k)] = pos + 1;
	t->t_count = pos + 1;
	*out = x;
	return DG_OK;
}

/* The entry for k, created (with room for vbytes of value) if absent.
 * For an existing entry, room is reserved only if need_room. */
static dg_err ent_get(dgi_txents *t, const struct kref *k, uint32_t vbytes,
    bool need_room, struct ent **out)
{
	uint32_t s = idx_probe(t, k);
	if (t->t_idx[s] == 0)
		return ent_add(t, k, vbytes, out);
	*out = ent_at(t, t->t_idx[s] - 1);
	if (need_room && vbytes > (*out)->e_vcap)
		return arena_reserve(t, vbytes);
	return DG_OK;
}

/* ------------------------------------------------------------------------
 * API
 * ------------------------------------------------------------------------ */

static void init_empty(dgi_txents *t)
{
	t->t_cur = t->t_inline;
	t->t_end = t->t_inline + DGI_TXENTS_INLINE;
	t->t_chunks = NULL;
	t->t_next = 2 * DGI_TXENTS_INLINE;
	t->t_heap = 0;
	t->t_idx = t->t_idx_inline;
	t->t_icap = IDX_INLINE;
	t->t_count = 0;
	memset(t->t_seg, 0, sizeof t->t_seg);
	t->t_seg[0] = t->t_ents_inline;
	memset(t->t_idx_inline, 0, sizeof t->t_idx_inline);
}

dg_err dgi_txents_create(dgi_txents **out)
{
	dgi_txents *t = dgi_alloc(sizeof *t);
	if (t == NULL)
		return DG_ERR_NOMEM;
	init_empty(t);
	*out = t;
	return DG_OK;
}

void dgi_txents_reset(dgi_txents *t)
{
	if (t == NULL)
		return;
	chunks_free(t);
	if (t->t_idx != t->t_idx_inline)
		dgi_free(t->t_idx);
	init_empty(t);
}

void dgi_txents_destroy(dgi_txents *t)
{
	if (t == NULL)
		return;
	dgi_txents_reset(t);
	dgi_free(t);
}

dgi_txent *dgi_txents_find(dgi_txents *t, uint32_t cache_id, const uint8_t *key,
    uint32_t klen, uint64_t hash)
{
	if (t == NULL || key == NULL || klen == 0)
		return NULL;
	struct kref k = { cache_id, 0, key, klen, hash };
	uint32_t s = idx_probe(t, &k);
	return t->t_idx[s] != 0 ? &ent_at(t, t->t_idx[s] - 1)->e_pub : NULL;
}

dg_err dgi_txents_write(dgi_txents *t, uint32_t cache_id, uint32_t part,
    const uint8_t *key, uint32_t klen, uint64_t hash, const uint8_t *val,
    uint32_t vlen, dgi_txent **out)
{
	if (t == NULL || key == NULL || klen == 0)
		return DG_ERR_INVAL;
	struct kref k = { cache_id, part, key, klen, hash };
	struct ent *x;
	dg_err rv = ent_get(t, &k, val != NULL ? vlen : 0, true, &x);
	if (rv != DG_OK)
		return rv;
	val_store(t, x, val, vlen);
	x->e_pub.op = val != NULL ? DGI_TXOP_PUT : DGI_TXOP_REMOVE;
	if (out != NULL)
		*out = &x->e_pub;
	return DG_OK;
}

/* The first read records found and the version; a new entry also keeps the
 * value read.  Later reads, and reads of a key written, change nothing
 * else (repeatable reads; the tx sees its own writes). */
dg_err dgi_txents_read(dgi_txents *t, uint32_t cache_id, uint32_t part,
    const uint8_t *key, uint32_t klen, uint64_t hash, const uint8_t *val,
    uint32_t vlen, int64_t ver_topver, uint64_t ver_counter, uint32_t ver_order,
    dgi_txent **out)
{
	if (t == NULL || key == NULL || klen == 0)
		return DG_ERR_INVAL;
	struct kref k = { cache_id, part, key, klen, hash };
	uint32_t before = t->t_count;
	struct ent *x;
	dg_err rv = ent_get(t, &k, val != NULL ? vlen : 0, false, &x);
	if (rv != DG_OK)
		return rv;
	dgi_txent *e = &x->e_pub;
	if (t->t_count != before) {
		val_store(t, x, val, vlen);
		e->op = DGI_TXOP_READ;
	}
	if (!e->read) {
		e->read = true;
		e->found = val != NULL;
		e->ver_topver = ver_topver;
		e->ver_counter = ver_counter;
		e->ver_order = ver_order;
	}
	if (out != NULL)
		*out = e;
	return DG_OK;
}

size_t dgi_txents_count(const dgi_txents *t)
{
	return t != NULL ? t->t_count : 0;
}

dgi_txent *dgi_txents_at(dgi_txents *t, size_t i)
{
	if (t == NULL || i >= t->t_count)
		return NULL;
	return &ent_at(t, (uint32_t)i)->e_pub;
}

size_t dgi_txents_bytes(const dgi_txents *t)
{
	if (t == NULL)
		return 0;
	size_t idx = t->t_idx != t->t_idx_inline ?
	    (size_t)t->t_icap * sizeof *t->t_idx : 0;
	return sizeof *t + t->t_heap + idx;
}
