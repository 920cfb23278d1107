/*
 * store.c — one partition's entries: an open-addressing table (linear
 * probing on the key hash, backward-shift deletion: no tombstone slots,
 * load factor at most 1/2) of 8-byte slots, each an entry's address tagged
 * with 16 bits of its key hash (cache_int.h, dgi_pslot); entries hold
 * their expiry (when they have one), key and value inline after a 32-byte
 * header (cache_int.h, "An entry").  The caller holds the partition's lock
 * for every call.  A put over an existing key reuses the entry's memory
 * when the new value fits, so overwriting a key allocates nothing.
 *
 * Retired memory.  Local reads look at the table without the lock
 * (read.c, get_fast: a sequence lock, cache_int.h dgi_part_lock), so an
 * entry or a table unlinked here is not freed at once: it goes on the
 * partition's limbo list, and is freed once every read section
 * (transport.h, "Read sections": only the lock-free reads, which never
 * wait, run in one) that could have seen it linked has ended — a batch
 * at a time: LIMBO_BATCH retired objects take one tag
 * (dgi_epoch_rd_retire), and the batch before is freed when its tag has
 * passed; writes into the partition move it along every LIMBO_TICK, and
 * the sweeper flushes what is left once a second (dgi_part_limbo_flush).
 * What such a read loads from an entry it reaches, however stale, stays
 * inside the entry's memory:
 * - an entry is published whole: its slot is stored with release order
 *   after its fields (and a new table after its slots);
 * - klen and what is before the key (the expiry, a whole update id:
 *   DGI_ENTRY_LAYOUT) never change in an entry's life (an update that
 *   needs one the entry lacks gets a new entry);
 * - vlen changes in place only to a value that fits the entry's room, so
 *   key + value of any vlen it ever held lie inside the allocation;
 * - a retired entry's link to the next (limbo) is kept in its `counter`,
 *   a field such a read does not load; a retired table's in slots[-1].
 * The read checks the sequence before it trusts what it loaded.
 *
 * The partition's table of update-id originators (dgi_part.opn): an
 * entry keeps its last update's id as an index into it (the id's node and
 * its sequence's top 16 bits) and the sequence's low 48 bits.  Interning
 * looks at the index used last, then probes 2 * opn_cap 16-bit slots.
 * Nothing is removed from the table one by one: when it is full it is
 * collected — a pass over the entries keeps the originators some entry
 * still names, renumbered, and rewrites the entries' indexes — and grown
 * when that leaves it more than half full.  It grows without a pass while
 * it has fewer than one index per 8 entries, so a pass costs at most ~16
 * entries visited per originator interned.  At 65535 originators in use a
 * new one's id is kept whole in the entry (DGI_ENTRY_OPX, 16 bytes of
 * data[]), and after a pass that freed less than 1/16 of the table the
 * next 4096 new ones are too, without a pass each.  e->op is read and
 * written only under the partition's lock (readers without it look at
 * flags, klen_m1, vlen and data[], never at op).
 */
#define _DEFAULT_SOURCE /* syscall */
#include "cache_int.h"

#ifdef __GLIBC__
#include <malloc.h>   /* malloc_usable_size */
#endif
#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#else
#include <sched.h>
#endif

#include <assert.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* ---- slots ---- */

#define TAG_SHIFT DGI_SLOT_TAG_SHIFT
#define ADDR_MASK ((UINT64_C(1) << TAG_SHIFT) - 1)
#define TAG_HOME_MAX 65536u  /* a table this size or less: home from the tag */

static_assert(sizeof(dgi_entry) == 32, "an entry's header is 32 bytes");
static_assert(offsetof(dgi_entry, flags) == 24 && offsetof(dgi_entry, vlen) == 28 &&
    offsetof(dgi_entry, data) == 32, "what a read looks at ends right before the key");
static_assert(DGI_ENTRY_EXP == 0x10 && DGI_ENTRY_OPX == 0x20,
    "the layout bits >> 1 are the bytes before the key (dgi_entry_key)");


static inline dgi_pslot slot_make(dgi_entry *e, uint64_t hash)
{
	return (uint64_t)(uintptr_t)e | (dgi_slot_tag_of(hash) << TAG_SHIFT);
}

/* Can e's address be kept in 48 bits?  (User addresses on x86-64 and
 * arm64 are below 2^47 unless a program maps above on purpose.) */
static inline bool addr_fits(const void *e)
{
	return ((uint64_t)(uintptr_t)e & ~ADDR_MASK) == 0;
}

/* The home slot of s in a table of cap slots. */
static inline uint32_t slot_home(dgi_pslot s, uint32_t cap)
{
	uint64_t h = cap <= TAG_HOME_MAX ? dgi_slot_tag(s) : dgi_entry_hash(dgi_slot_entry(s));
	return (uint32_t)h & (cap - 1);
}

void dgi_part_init(dgi_part *p)
{
	memset(p, 0, sizeof(*p));
	atomic_init(&p->lk, 0);
}

/* ---- the partition lock's contended side (cache_int.h, dgi_part_lock) ---- */

/* Spins before sleeping: a holder is inside a section of a few hundred
 * instructions, unless it persists or waits (then the futex). */
#define LOCK_SPINS 64

void dgi_part_lock_wait(dgi_part *p)
{
	for (int i = 0; i < LOCK_SPINS; i++) {
		uint32_t free_ = 0;
		if (atomic_load_explicit(&p->lk, memory_order_relaxed) == 0 &&
		    atomic_compare_exchange_weak_explicit(&p->lk, &free_, 1, memory_order_acquire,
		    memory_order_relaxed))
			return;
#if defined(__x86_64__) || defined(__i386__)
		__builtin_ia32_pause();
#endif
	}
	/* 2 from now on: whoever gives it back wakes one sleeper (a 2 left
	 * when none sleeps costs a spurious wake, never a lost one) */
	while (atomic_exchange_explicit(&p->lk, 2, memory_order_acquire) != 0) {
#if defined(__linux__)
		syscall(SYS_futex, &p->lk, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
#else
		sched_yield();
#endif
	}
}

void dgi_part_lock_wake(dgi_part *p)
{
#if defined(__linux__)
	syscall(SYS_futex, &p->lk, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
#else
	(void)p;
#endif
}

/* ---- retired memory (see the top) ---- */

/* Retired objects per tag. */
#define LIMBO_BATCH 64

static inline dgi_entry *limbo_next_ent(const dgi_entry *e)
{
	return (dgi_entry *)(uintptr_t)e->counter;
}

static void free_ents(dgi_entry *e)
{
	while (e != NULL) {
		dgi_entry *n = limbo_next_ent(e);
		dgi_free(e);
		e = n;
	}
}

/* A table's allocation begins a slot before the table: its link. */
static void free_tabs(dgi_pslot *t)
{
	while (t != NULL) {
		dgi_pslot *n = (dgi_pslot *)(uintptr_t)t[-1];
		dgi_free(t - 1);
		t = n;
	}
}

/* Frees the tagged batch if its tag has passed, then tags the untagged
 * one if there is no tagged batch left (partition locked). */
static void limbo_step(dgi_part *p)
{
	if ((p->limbo_ents_old != NULL || p->limbo_tabs_old != NULL) &&
	    dgi_epoch_rd_passed(p->limbo_tag)) {
		free_ents(p->limbo_ents_old);
		free_tabs(p->limbo_tabs_old);
		p->limbo_ents_old = NULL;
		p->limbo_tabs_old = NULL;
	}
	if (p->limbo_ents_old == NULL && p->limbo_tabs_old == NULL && p->limbo_n > 0) {
		p->limbo_ents_old = p->limbo_ents_new;
		p->limbo_tabs_old = p->limbo_tabs_new;
		p->limbo_ents_new = NULL;
		p->limbo_tabs_new = NULL;
		p->limbo_n = 0;
		p->limbo_at = 0;
		p->limbo_tag = dgi_epoch_rd_retire(); /* (after the unlinks) */
	}
}

/* After a retire: a step once a batch is full.  While the tagged batch
 * cannot go (a section somewhere began before its tag and still runs: a
 * request waiting for its answer, say), the next try waits for the
 * untagged one to double — not a scan of every thread's slot per retire. */
static void limbo_after_retire(dgi_part *p)
{
	if (p->limbo_n < (p->limbo_at ? p->limbo_at : LIMBO_BATCH))
		return;
	limbo_step(p);
	bool stuck = p->limbo_ents_old != NULL || p->limbo_tabs_old != NULL;
	p->limbo_at = stuck && p->limbo_n > 0 ? 2 * p->limbo_n : 0;
}

static void retire_ent(dgi_part *p, dgi_entry *e)
{
	e->counter = (uint64_t)(uintptr_t)p->limbo_ents_new;
	p->limbo_ents_new = e;
	p->limbo_n++;
	limbo_after_retire(p);
}

/* A table counts for more than an entry: the old tables of a partition
 * growing under a load are as big as the new one, and should not wait for
 * the sweeper. */
static void retire_tab(dgi_part *p, dgi_pslot *t, uint32_t cap)
{
	t[-1] = (uint64_t)(uintptr_t)p->limbo_tabs_new;
	p->limbo_tabs_new = t;
	p->limbo_n += 1 + cap / 16;
	limbo_after_retire(p);
}

/* Writes into a partition with something retired try to move it along
 * every LIMBO_TICK of them, so a table retired by a growing load is freed
 * during the load, not a second later. */
#define LIMBO_TICK 64
static inline void limbo_tick(dgi_part *p)
{
	if (__builtin_expect(p->limbo_n == 0 && p->limbo_ents_old == NULL &&
	    p->limbo_tabs_old == NULL, 1))
		return;
	if (++p->limbo_ticks % LIMBO_TICK == 0)
		limbo_step(p);
}

void dgi_part_limbo_flush(dgi_part *p)
{
	limbo_step(p); /* the tagged batch, if it can go; tags the rest */
	limbo_step(p); /* (which goes now unless a read is inside) */
}

bool dgi_part_limbo_empty(const dgi_part *p)
{
	return p->limbo_n == 0 && p->limbo_ents_old == NULL && p->limbo_tabs_old == NULL;
}

void dgi_part_clear(dgi_part *p)
{
	for (uint32_t i = 0; i < p->cap; i++) {
		dgi_entry *e = dgi_slot_entry(p->slots[i]);
		if (e != NULL) {
			p->slots[i] = 0;
			retire_ent(p, e);
		}
	}
	p->count = p->live = 0;
	p->bytes = 0;
	dgi_free(p->opn); /* no entry names an originator any more */
	p->opn = NULL;
	p->opn_cap = 0;
	p->opn_n = p->opn_last = p->opn_skip = 0;
}

void dgi_part_free(dgi_part *p)
{
	/* (no read can be looking: the cache is gone) */
	for (uint32_t i = 0; i < p->cap; i++)
		dgi_free(dgi_slot_entry(p->slots[i]));
	free_ents(p->limbo_ents_new);
	free_ents(p->limbo_ents_old);
	free_tabs(p->limbo_tabs_new);
	free_tabs(p->limbo_tabs_old);
	if (p->slots != NULL)
		dgi_free(p->slots - 1);
	p->slots = NULL;
	p->cap = 0;
	dgi_free(p->opn);
	p->opn = NULL;
}

static inline bool same_key(const dgi_entry *e, const uint8_t *key, uint32_t klen)
{
	return dgi_entry_klen(e) == klen && memcmp(dgi_entry_key(e), key, klen) == 0;
}

static uint32_t find_slot(const dgi_part *p, uint64_t hash, const uint8_t *key,
    uint32_t klen)
{
	uint32_t mask = p->cap - 1;
	uint64_t tag = dgi_slot_tag_of(hash);
	for (uint32_t i = (uint32_t)hash & mask;; i = (i + 1) & mask) {
		dgi_pslot s = p->slots[i];
		if (s == 0 || (dgi_slot_tag(s) == tag && same_key(dgi_slot_entry(s), key, klen)))
			return i;
	}
}

dgi_entry *dgi_part_find(dgi_part *p, uint64_t hash, const uint8_t *key, uint32_t klen)
{
	if (p->cap == 0)
		return NULL;
	return dgi_slot_entry(p->slots[find_slot(p, hash, key, klen)]);
}

dgi_entry *dgi_part_find_ver(dgi_part *p, uint64_t hash, const dgi_pver *ver)
{
	if (p->cap == 0)
		return NULL;
	uint32_t mask = p->cap - 1;
	uint64_t tag = dgi_slot_tag_of(hash);
	for (uint32_t i = (uint32_t)hash & mask; p->slots[i] != 0; i = (i + 1) & mask) {
		dgi_entry *e = dgi_slot_entry(p->slots[i]);
		if (dgi_slot_tag(p->slots[i]) == tag && dgi_entry_topver(e) == ver->topver &&
		    e->counter == ver->counter && e->order == ver->order && dgi_entry_hash(e) == hash)
			return e;
	}
	return NULL;
}

static dg_err grow(dgi_part *p)
{
	uint32_t ncap = p->cap ? p->cap * 2 : 16;
	dgi_pslot *ns = dgi_calloc((size_t)ncap + 1, sizeof(*ns));
	if (ns == NULL)
		return DG_ERR_NOMEM;
	ns++; /* (ns[-1]: its link once retired) */
	for (uint32_t i = 0; i < p->cap; i++) {
		if (p->slots[i] == 0)
			continue;
		uint32_t j = slot_home(p->slots[i], ncap);
		while (ns[j] != 0)
			j = (j + 1) & (ncap - 1);
		ns[j] = p->slots[i];
	}
	dgi_pslot *old = p->slots;
	uint32_t ocap = p->cap;
	__atomic_store_n(&p->slots, ns, __ATOMIC_RELEASE); /* (published whole) */
	p->cap = ncap;
	if (old != NULL)
		retire_tab(p, old, ocap); /* (unlinked first: a tag it takes is after) */
	return DG_OK;
}

/* ---- update-id originators (the header comment) ---- */

static inline uint32_t opn_hash(uint64_t node, uint64_t hi, uint32_t mask)
{
	uint64_t h = (node ^ (hi * 0x9E3779B97F4A7C15ull)) * 0xBF58476D1CE4E5B9ull;
	return (uint32_t)(h >> 32) & mask;
}

static inline uint16_t *opn_slots(struct dgi_opn *t, uint32_t cap)
{
	return (uint16_t *)(t + cap);
}

/* The index of (node, hi) in p's table, or 0. */
static uint32_t opn_find(const dgi_part *p, uint64_t node, uint64_t hi)
{
	if (p->opn_cap == 0)
		return 0;
	const uint16_t *sl = opn_slots(p->opn, p->opn_cap);
	uint32_t mask = 2 * p->opn_cap - 1;
	for (uint32_t i = opn_hash(node, hi, mask);; i = (i + 1) & mask) {
		uint32_t x = sl[i];
		if (x == 0 || (p->opn[x].node == node && p->opn[x].hi == hi))
			return x;
	}
}

static void opn_slot_add(struct dgi_opn *t, uint32_t cap, uint32_t x)
{
	uint16_t *sl = opn_slots(t, cap);
	uint32_t mask = 2 * cap - 1;
	uint32_t i = opn_hash(t[x].node, t[x].hi, mask);
	while (sl[i] != 0)
		i = (i + 1) & mask;
	sl[i] = (uint16_t)x;
}

/* Indexes 1..n of t, a table of cap, into its slots afresh. */
static void opn_reindex(struct dgi_opn *t, uint32_t cap, uint32_t n)
{
	memset(opn_slots(t, cap), 0, 2 * (size_t)cap * sizeof(uint16_t));
	for (uint32_t x = 1; x <= n; x++)
		opn_slot_add(t, cap, x);
}

static bool opn_resize(dgi_part *p, uint32_t cap)
{
	struct dgi_opn *t = dgi_alloc(cap * sizeof(*t) + 2 * (size_t)cap * sizeof(uint16_t));
	if (t == NULL)
		return false;
	t[0] = (struct dgi_opn){ 0, 0 };
	if (p->opn_n > 0)
		memcpy(t + 1, p->opn + 1, p->opn_n * sizeof(*t));
	opn_reindex(t, cap, p->opn_n);
	dgi_free(p->opn);
	p->opn = t;
	p->opn_cap = cap;
	return true;
}

/* Keeps the originators some entry names, renumbered 1..n in their order,
 * and rewrites the entries' indexes.  false: no memory (nothing changed). */
static bool opn_collect(dgi_part *p)
{
	uint16_t *map = dgi_calloc(p->opn_cap, sizeof(*map)); /* old index -> new */
	if (map == NULL)
		return false;
	for (uint32_t i = 0; i < p->cap; i++) {
		const dgi_entry *e = dgi_slot_entry(p->slots[i]);
		if (e != NULL && e->op != 0)
			map[e->op >> DGI_OP_LOW_BITS] = 1;
	}
	uint32_t n = 0;
	for (uint32_t x = 1; x <= p->opn_n; x++)
		if (map[x] != 0) {
			p->opn[++n] = p->opn[x];
			map[x] = (uint16_t)n;
		}
	for (uint32_t i = 0; i < p->cap; i++) {
		dgi_entry *e = dgi_slot_entry(p->slots[i]);
		if (e != NULL && e->op != 0)
			e->op = (uint64_t)map[e->op >> DGI_OP_LOW_BITS] << DGI_OP_LOW_BITS |
			    (e->op & DGI_OP_LOW_MASK);
	}
	dgi_free(map);
	p->opn_n = (uint16_t)n;
	p->opn_last = 0;
	opn_reindex(p->opn, p->opn_cap, n);
	return true;
}

/* Room for one more originator in p's table (the header comment). */
static bool opn_make_room(dgi_part *p)
{
	uint32_t cap = p->opn_cap;
	if (cap == 0)
		return opn_resize(p, 2);
	if (cap < DGI_OPN_MAX && p->count / 8 >= cap)
		return opn_resize(p, cap * 2); /* a pass would cost more than it frees */
	if (p->opn_skip > 0) {
		p->opn_skip--;
		return false;
	}
	if (!opn_collect(p))
		return cap < DGI_OPN_MAX && opn_resize(p, cap * 2);
	if (p->opn_n + 1u > cap / 2 && cap < DGI_OPN_MAX && opn_resize(p, cap * 2))
		return true;
	if (p->opn_n + 1u > cap - cap / 16)
		p->opn_skip = (uint16_t)(cap / 16); /* the next passes would free little */
	return p->opn_n + 1u < cap;
}

/* dgi_opn_intern (cache_int.h): dgi_op_pack's miss. */
__attribute__((noinline)) bool dgi_opn_intern(dgi_part *p, uint64_t node, uint64_t hi,
    uint32_t *x)
{
	if ((*x = opn_find(p, node, hi)) == 0) {
		if (p->opn_n + 1u >= p->opn_cap && !opn_make_room(p))
			return false;
		*x = ++p->opn_n;
		p->opn[*x] = (struct dgi_opn){ node, hi };
		opn_slot_add(p->opn, p->opn_cap, *x);
	}
	p->opn_last = (uint16_t)*x;
	return true;
}

/* ---- entries ---- */

/* dgi_entry_vroom (cache_int.h) of an entry whose slack counts no more
 * (255): what malloc says its memory holds, when that is more. */
uint64_t dgi_entry_vroom_usable(const dgi_entry *e)
{
	uint64_t counted = (uint64_t)e->vlen + e->slack;
#ifdef __GLIBC__
	uint64_t before = sizeof(*e) + dgi_entry_prefix(e->flags) + dgi_entry_klen(e);
	size_t usable = malloc_usable_size((void *)(uintptr_t)e);
	if (usable > before + counted)
		return usable - before;
#endif
	return counted;
}

/* Bytes of data[] e can hold (dgi_entry_vroom: the value's). */
static inline uint64_t room_of(const dgi_entry *e)
{
	return (uint64_t)dgi_entry_prefix(e->flags) + dgi_entry_klen(e) + dgi_entry_vroom(e);
}

/* Writes the fields of an update into e, whose layout is set; room:
 * bytes of data[] (dgi_entry_fill_split). */
static void fill(dgi_entry *e, uint64_t room, const uint8_t *val, uint32_t vlen,
    const dgi_pver *ver, int64_t expire_ms, uint64_t op, uint64_t op_node, uint64_t op_seq)
{
	uint64_t vroom = room - dgi_entry_prefix(e->flags) - dgi_entry_klen(e);
	dgi_entry_fill_split(e, vroom, 0, 0, val, vlen, ver, expire_ms, op, op_node, op_seq);
}

/* Can e take a value of vlen with that expiry (and its id whole: opx) in
 * place, with room bytes of data[] (room_of)?  *layout: what it needs
 * before the key (bits set stay set).  An entry that lacks one of them
 * does not take it in place: its key would move under a lock-free read
 * (see the top); a new entry does. */
static bool fits(const dgi_entry *e, uint64_t room, uint32_t vlen, int64_t expire_ms, bool opx,
    uint32_t *layout)
{
	uint32_t was = e->flags & DGI_ENTRY_LAYOUT, l = was;
	if (expire_ms != 0)
		l |= DGI_ENTRY_EXP;
	if (opx)
		l |= DGI_ENTRY_OPX;
	*layout = l;
	return l == was && (uint64_t)dgi_entry_prefix(l) + dgi_entry_klen(e) + vlen <= room;
}

dg_err dgi_part_set(dgi_part *p, uint64_t hash, const uint8_t *key, uint32_t klen,
    const uint8_t *val, uint32_t vlen, const dgi_pver *ver, int64_t expire_ms,
    uint64_t op_node, uint64_t op_seq, uint32_t flags, dgi_entry **out)
{
	dg_err err = dgi_entry_storable(klen, ver->topver);
	if (err != DG_OK)
		return err;
	uint64_t op = 0;
	bool opx = !dgi_op_pack(p, op_node, op_seq, &op);
	limbo_tick(p);
	if ((p->count + 1) * 2 > p->cap && grow(p) != DG_OK)
		return DG_ERR_NOMEM;
	uint32_t i = find_slot(p, hash, key, klen);
	dgi_entry *e = dgi_slot_entry(p->slots[i]);
	uint32_t layout = 0;
	flags &= ~DGI_ENTRY_LAYOUT;
	uint64_t room = e != NULL ? room_of(e) : 0;
	if (e == NULL || !fits(e, room, vlen, expire_ms, opx, &layout)) {
		/* exactly what it holds: the slack is what malloc rounds up to
		 * anyway (up to 15 bytes), which a value growing by a few bytes
		 * reuses; a fixed 1/8 more put most entries in the next size
		 * class (16 B per entry for 16-byte keys and 100-byte values) */
		layout = (expire_ms != 0 ? DGI_ENTRY_EXP : 0) | (opx ? DGI_ENTRY_OPX : 0);
		size_t need = (size_t)dgi_entry_prefix(layout) + klen + vlen;
		dgi_entry *ne = dgi_alloc(sizeof(*ne) + need);
		if (ne == NULL)
			return DG_ERR_NOMEM;
		if (!addr_fits(ne)) {
			dgi_free(ne); /* (see addr_fits) */
			return DG_ERR_NOMEM;
		}
		room = need;
#ifdef __GLIBC__
		size_t usable = malloc_usable_size(ne);
		if (usable > sizeof(*ne) + need)
			room = usable - sizeof(*ne);
#endif
		ne->flags = (uint8_t)(flags | layout);
		ne->klen_m1 = (uint16_t)(klen - 1); /* (1..DGI_ENTRY_KEY_MAX: checked) */
		memcpy((uint8_t *)dgi_entry_key(ne), key, klen);
		fill(ne, room, val, vlen, ver, expire_ms, op, op_node, op_seq);
		if (e != NULL) {
			p->bytes -= dgi_entry_klen(e) + e->vlen;
			if (!(e->flags & DGI_ENTRY_TOMB))
				p->live--;
		} else {
			p->count++;
		}
		/* published whole (see the top) */
		__atomic_store_n(&p->slots[i], slot_make(ne, hash), __ATOMIC_RELEASE);
		if (e != NULL)
			retire_ent(p, e);
		e = ne;
	} else {
		p->bytes -= dgi_entry_klen(e) + e->vlen;
		if (!(e->flags & DGI_ENTRY_TOMB))
			p->live--;
		fill(e, room, val, vlen, ver, expire_ms, op, op_node, op_seq);
	}
	e->flags = (uint8_t)(flags | (e->flags & DGI_ENTRY_LAYOUT));
	p->bytes += klen + vlen;
	if (!(flags & DGI_ENTRY_TOMB))
		p->live++;
	if (out)
		*out = e;
	return DG_OK;
}

bool dgi_part_overwrite(dgi_part *p, dgi_entry *e, const uint8_t *val, uint32_t vlen,
    const dgi_pver *ver, int64_t expire_ms, uint64_t op_node, uint64_t op_seq)
{
	return dgi_part_overwrite_in(p, e, 0, 0, val, vlen, ver, expire_ms, op_node, op_seq);
}

/* Backward-shift deletion at slot i. */
static void del_at(dgi_part *p, uint32_t i)
{
	uint32_t mask = p->cap - 1;
	dgi_entry *e = dgi_slot_entry(p->slots[i]);
	p->bytes -= dgi_entry_klen(e) + e->vlen;
	if (!(e->flags & DGI_ENTRY_TOMB))
		p->live--;
	p->count--;
	p->slots[i] = 0;
	retire_ent(p, e);
	for (uint32_t j = (i + 1) & mask; p->slots[j] != 0; j = (j + 1) & mask) {
		uint32_t home = slot_home(p->slots[j], p->cap);
		/* move j back into the hole if its home is not in (i, j] */
		if (((j - home) & mask) >= ((j - i) & mask)) {
			/* (release: the entry's fields before its slot, wherever it
			 * moves — see the top) */
			__atomic_store_n(&p->slots[i], p->slots[j], __ATOMIC_RELEASE);
			p->slots[j] = 0;
			i = j;
		}
	}
}

void dgi_part_del(dgi_part *p, uint64_t hash, const uint8_t *key, uint32_t klen)
{
	if (p->cap == 0)
		return;
	uint32_t i = find_slot(p, hash, key, klen);
	if (p->slots[i] != 0)
		del_at(p, i);
}

void dgi_part_purge_tombs(dgi_part *p)
{
	for (uint32_t i = 0; i < p->cap;) {
		dgi_entry *e = dgi_slot_entry(p->slots[i]);
		if (e != NULL && (e->flags & DGI_ENTRY_TOMB))
			del_at(p, i); /* something may have shifted into i: look again */
		else
			i++;
	}
}

uint32_t dgi_part_expire_cb(dgi_part *p, int64_t now_ms, uint32_t max,
    void (*gone)(void *ctx, const dgi_entry *e), void *ctx)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < p->cap && n < max;) {
		dgi_entry *e = dgi_slot_entry(p->slots[i]);
		int64_t x = e != NULL ? dgi_entry_expire(e) : 0;
		if (x != 0 && x <= now_ms) {
			if (gone != NULL)
				gone(ctx, e);
			del_at(p, i); /* something may shift into i: look again */
			n++;
		} else {
			i++;
		}
	}
	return n;
}

uint32_t dgi_part_expire(dgi_part *p, int64_t now_ms, uint32_t max)
{
	return dgi_part_expire_cb(p, now_ms, max, NULL, NULL);
}

void dgi_part_each(dgi_part *p, void (*fn)(void *ctx, const dgi_entry *e), void *ctx)
{
	for (uint32_t i = 0; i < p->cap; i++)
		if (p->slots[i] != 0)
			fn(ctx, dgi_slot_entry(p->slots[i]));
}

/* An entry and its cursor (dgi_scan_key of its hash), for a page in
 * page order. */
struct hashed {
	uint64_t hash;
	const dgi_entry *e;
};

static int cmp_hash(const void *a, const void *b)
{
	uint64_t x = ((const struct hashed *)a)->hash, y = ((const struct hashed *)b)->hash;
	return x < y ? -1 : x > y;
}

/* A max-heap of hashed entries by hash (dgi_part_scan's page). */
static void heap_up(struct hashed *h, uint32_t i)
{
	struct hashed x = h[i];
	while (i > 0 && h[(i - 1) / 2].hash < x.hash) {
		h[i] = h[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h[i] = x;
}

/* Takes the top out of h[0..*n): it lands at h[*n - 1], *n one less. */
static void heap_pop(struct hashed *h, uint32_t *n)
{
	uint32_t m = --*n, i = 0;
	struct hashed top = h[0], x = h[m];
	for (;;) {
		uint32_t c = 2 * i + 1;
		if (c >= m)
			break;
		if (c + 1 < m && h[c + 1].hash > h[c].hash)
			c++;
		if (h[c].hash <= x.hash)
			break;
		h[i] = h[c];
		i = c;
	}
	h[i] = x;
	h[m] = top;
}

uint64_t dgi_part_scan(dgi_part *p, uint64_t after, bool first, uint32_t max,
    uint64_t max_bytes, bool (*want)(void *ctx, const dgi_entry *e),
    void (*fn)(void *ctx, const dgi_entry *e), void *ctx, bool *more)
{
	/* The smallest cursors above `after`: every entry whose cursor is at
	 * most T, the least cursor with `max` entries at or below it (all of
	 * a hash's entries: a page never splits one), kept in a max-heap of
	 * about max entries as the table is walked once, then sorted.  A
	 * cursor's first 16 bits are the slot's tag, so an entry whose tag
	 * is below the page's first, or above the heap's top once it is
	 * full, is passed over unread — in a table of up to 65,536 slots
	 * (the tag is the home slot's index) the walk meets the tags nearly
	 * in order.  Sorting every entry of the partition for each page, each
	 * key hashed (an entry does not keep its hash), made a scan quadratic
	 * under the lock: 100,000 entries in pages of 256 took 5.9 s, 15 ms a
	 * page (27 at worst) with the partition's writers waiting; 0.4 s now
	 * (transport/PROTOCOL.md, "Entry pages"). */
	*more = false;
	if (p->cap == 0 || max == 0)
		return after;
	uint32_t cap = (max < p->count ? max : p->count) + 4;
	struct hashed *c = dgi_alloc(sizeof(*c) * cap);
	if (c == NULL)
		return after;
	uint32_t n = 0, hashed = 0;
	bool beyond = false; /* an entry past the page was met */
	uint64_t from = first ? 0 : after >> 48; /* (the cursor's tag) */
	for (uint32_t i = 0; i < p->cap; i++) {
		dgi_pslot s = p->slots[i];
		dgi_entry *e = dgi_slot_entry(s);
		if (e == NULL)
			continue;
		/* the slot's tag is the order's first 16 bits: most entries
		 * before the cursor or past the page are passed over without
		 * a look at them (their keys hashed) */
		uint64_t t = dgi_slot_tag(s);
		if (t < from)
			continue;
		if (n >= max && t > c[0].hash >> 48) {
			beyond = true;
			continue;
		}
		uint64_t h = dgi_scan_key(dgi_entry_hash(e));
		hashed++;
		if (!first && h <= after)
			continue;
		if (n >= max && h > c[0].hash) {
			beyond = true;
			continue; /* past this page */
		}
		if (n == cap) { /* (entries of one hash past max: rare) */
			struct hashed *g = dgi_realloc(c, sizeof(*c) * (size_t)cap * 2);
			if (g == NULL) {
				dgi_free(c);
				return after;
			}
			c = g;
			cap *= 2;
		}
		c[n++] = (struct hashed){ h, e };
		heap_up(c, n - 1);
		while (n > max) { /* the top hash's entries go if max remain */
			uint64_t top = c[0].hash;
			uint32_t m = n;
			while (m > 0 && c[0].hash == top)
				heap_pop(c, &m);
			if (m >= max) {
				n = m;
				beyond = true;
				continue;
			}
			while (m < n) /* (back: the page needs them all) */
				heap_up(c, m++);
			break;
		}
	}
	qsort(c, n, sizeof(*c), cmp_hash);
	uint64_t last = after, took = 0;
	uint32_t i = 0;
	for (; i < n; i++) {
		bool w = want == NULL || want(ctx, c[i].e);
		if (i > 0 && c[i].hash != c[i - 1].hash && (i >= max || took >= max_bytes ||
		    (w && took > 0 && took + dgi_page_entry_bytes(c[i].e) > max_bytes)))
			break; /* (between two hashes only) */
		last = c[i].hash;
		if (w) {
			fn(ctx, c[i].e);
			took += dgi_page_entry_bytes(c[i].e);
		}
	}
	*more = i < n || beyond;
	p->scan_hashed += hashed;
	dgi_free(c);
	return last;
}
