/*
 * intmap.c — the int-keyed open-addressing map of intmap.h.
 *
 * A table is two arrays of cap (a power of two) slots: values, then keys.
 * Keys sit apart from values so a probe walks 4-byte keys, 16 to a cache
 * line, and touches one value at the end.  A slot is
 *
 *   empty     key 0
 *   live      key k, value non-NULL
 *   deleted   key k, value NULL   (a tombstone)
 *
 * Within one table a slot's key goes from 0 to k once and never changes
 * again.  That is what lets a reader probe a table a writer is changing:
 * a key it has matched still names the slot when it loads the value (if a
 * slot could be reused for another key, a reader could match key j and then
 * read the value just stored for key k).  Deleted slots keep their key so the
 * probe chains running through them stay intact.
 *
 * Writers (under im_mu) change the current table in place while that keeps
 * "used" slots (live + deleted) at most half of cap: a replace or delete
 * stores one value, an insert stores the value then the key.  Only an insert
 * that would pass the half builds a new table, from the live slots (growing,
 * or shrinking and dropping tombstones), and publishes it with a release
 * store.  A table is rebuilt at most 3/8 full, so at least cap/8 inserts pass
 * before the next rebuild: a write costs O(1) amortized and the retired
 * tables add up to a few slots per insert, not a table per write.
 *
 * Memory order.  Readers load im_cur with acquire (pairs with the release
 * that published the table, so its initial contents are visible), keys
 * relaxed, and the matched value with acquire (pairs with the release store
 * of a value put in place, so the caller's object behind it is visible).
 * Writers need nothing stronger among themselves: the mutex orders them.
 */
#include "cache/intmap.h"
#include "marshal/mix.h"

#include <assert.h>
#include <stdbool.h>
#include <stdint.h>

/* Readers must never fall back to a hidden lock. */
static_assert(ATOMIC_POINTER_LOCK_FREE == 2, "atomic pointers must be lock-free");
static_assert(ATOMIC_INT_LOCK_FREE == 2, "atomic ints must be lock-free");

#define MIN_CAP 8u

struct dgi_intmap_table {
	size_t t_cap;                     /* power of two, >= MIN_CAP */
	size_t t_used;                    /* live + deleted slots; writers only */
	_Atomic size_t t_count;           /* live slots */
	struct dgi_intmap_table *t_next;  /* retired list link */
	_Atomic(void *) t_vals[];         /* cap values, then cap keys */
};

static _Atomic uint32_t *tbl_keys(const struct dgi_intmap_table *t)
{
	/* Cast away const: readers only load through it. */
	return (_Atomic uint32_t *)(uintptr_t)(t->t_vals + t->t_cap);
}

/* (Slots: dgi_mix32 of the key, marshal/mix.h.) */
static uint32_t mix32(uint32_t h)
{
	return dgi_mix32(h);
}

/* The slot holding key (*hit), or the empty slot that ends its probe chain.
 * There is always an empty slot: at most half the slots are ever used. */
static size_t tbl_find(const struct dgi_intmap_table *t, uint32_t key,
    bool *hit)
{
	const _Atomic uint32_t *keys = tbl_keys(t);
	size_t mask = t->t_cap - 1;
	size_t i = mix32(key) & mask;

	for (;;) {
		uint32_t k = atomic_load_explicit(&keys[i], memory_order_relaxed);
		if (k == key || k == 0) {
			*hit = k == key;
			return i;
		}
		i = (i + 1) & mask;
	}
}

static struct dgi_intmap_table *tbl_new(size_t cap)
{
	size_t slot = sizeof(_Atomic(void *)) + sizeof(_Atomic uint32_t);
	if (cap > (SIZE_MAX - sizeof(struct dgi_intmap_table)) / slot)
		return NULL;
	/* All-zero bytes are key 0 and NULL values: every slot empty. */
	struct dgi_intmap_table *t =
	    dgi_calloc(1, sizeof(struct dgi_intmap_table) + cap * slot);
	if (t != NULL)
		t->t_cap = cap;
	return t;
}

/* Smallest capacity holding n keys at most 3/8 full; 0 on overflow. */
static size_t cap_for(size_t n)
{
	size_t cap = MIN_CAP;
	while (n > cap / 8 * 3) {
		if (cap > SIZE_MAX / 2)
			return 0;
		cap *= 2;
	}
	return cap;
}

/* Writers only (under the mutex), so no read-modify-write is needed;
 * atomic because count() reads it without the lock. */
static void count_add(struct dgi_intmap_table *t, size_t delta)
{
	atomic_store_explicit(&t->t_count,
	    atomic_load_explicit(&t->t_count, memory_order_relaxed) + delta,
	    memory_order_relaxed);
}

/* Stores a key known to be absent into an unpublished or current table. */
static void tbl_insert(struct dgi_intmap_table *t, size_t i, uint32_t key,
    void *value)
{
	/* A reader matching the key before the value lands finds NULL: "not
	 * there yet", a right answer while the put is in progress. */
	atomic_store_explicit(&t->t_vals[i], value, memory_order_release);
	atomic_store_explicit(&tbl_keys(t)[i], key, memory_order_relaxed);
	t->t_used++;
	count_add(t, 1);
}

/* A new table with old's live slots and room for extra more.  NULL on
 * NOMEM.  Writers only: nothing else changes old meanwhile. */
static struct dgi_intmap_table *tbl_rebuild(const struct dgi_intmap_table *old,
    size_t extra)
{
	size_t live = atomic_load_explicit(&old->t_count, memory_order_relaxed);
	size_t cap = cap_for(live + extra);
	struct dgi_intmap_table *t = cap ? tbl_new(cap) : NULL;
	if (t == NULL)
		return NULL;

	const _Atomic uint32_t *keys = tbl_keys(old);
	for (size_t i = 0; i < old->t_cap; i++) {
		uint32_t k = atomic_load_explicit(&keys[i], memory_order_relaxed);
		void *v = atomic_load_explicit(&old->t_vals[i], memory_order_relaxed);
		bool hit;
		if (k != 0 && v != NULL)
			tbl_insert(t, tbl_find(t, k, &hit), k, v);
	}
	return t;
}

static void tbl_free_list(struct dgi_intmap_table *t)
{
	while (t != NULL) {
		struct dgi_intmap_table *next = t->t_next;
		dgi_free(t);
		t = next;
	}
}

dg_err dgi_intmap_init(dgi_intmap *m)
{
	struct dgi_intmap_table *t = tbl_new(MIN_CAP);

	/* A failed init leaves im_cur NULL, which makes destroy a no-op. */
	atomic_init(&m->im_cur, NULL);
	m->im_retired = NULL;
	if (t == NULL)
		return DG_ERR_NOMEM;
	if (pthread_mutex_init(&m->im_mu, NULL) != 0) {
		dgi_free(t);
		return DG_ERR_NOMEM;
	}
	atomic_init(&m->im_cur, t);
	return DG_OK;
}

void dgi_intmap_destroy(dgi_intmap *m)
{
	struct dgi_intmap_table *t =
	    atomic_load_explicit(&m->im_cur, memory_order_relaxed);
	if (t == NULL)
		return;
	tbl_free_list(t);
	tbl_free_list(m->im_retired);
	atomic_store_explicit(&m->im_cur, NULL, memory_order_relaxed);
	m->im_retired = NULL;
	pthread_mutex_destroy(&m->im_mu);
}

void *dgi_intmap_get(const dgi_intmap *m, uint32_t key)
{
	const struct dgi_intmap_table *t =
	    atomic_load_explicit(&m->im_cur, memory_order_acquire);
	bool hit;

	if (key == 0)   /* would "match" the first empty slot */
		return NULL;
	size_t i = tbl_find(t, key, &hit);
	/* Not the value of an empty slot: a writer filling it stores the value
	 * before the key, so it may already hold another key's value. */
	if (!hit)
		return NULL;
	return atomic_load_explicit(&t->t_vals[i], memory_order_acquire);
}

/* Publishes t in place of cur; cur is retired, not freed, because readers
 * that loaded it may still be probing it. */
static void publish(dgi_intmap *m, struct dgi_intmap_table *cur,
    struct dgi_intmap_table *t)
{
	atomic_store_explicit(&m->im_cur, t, memory_order_release);
	cur->t_next = m->im_retired;
	m->im_retired = cur;
}

/* Inserts a new key into a fresh table built from cur.  Slow path. */
static dg_err put_rebuild(dgi_intmap *m, struct dgi_intmap_table *cur,
    uint32_t key, void *value)
{
	struct dgi_intmap_table *t = tbl_rebuild(cur, 1);
	bool hit;
	if (t == NULL)
		return DG_ERR_NOMEM;
	tbl_insert(t, tbl_find(t, key, &hit), key, value);
	publish(m, cur, t);
	return DG_OK;
}

dg_err dgi_intmap_put(dgi_intmap *m, uint32_t key, void *value)
{
	dg_err err = DG_OK;

	if (key == 0 || value == NULL)
		return DG_ERR_INVAL;
	pthread_mutex_lock(&m->im_mu);
	struct dgi_intmap_table *t =
	    atomic_load_explicit(&m->im_cur, memory_order_relaxed);
	bool hit;
	size_t i = tbl_find(t, key, &hit);

	if (hit) {
		/* Replace, or revive a deleted slot: its key never left. */
		void *old = atomic_load_explicit(&t->t_vals[i], memory_order_relaxed);
		atomic_store_explicit(&t->t_vals[i], value, memory_order_release);
		if (old == NULL)
			count_add(t, 1);
	} else if (t->t_used + 1 <= t->t_cap / 2) {
		tbl_insert(t, i, key, value);
	} else {
		err = put_rebuild(m, t, key, value);
	}
	pthread_mutex_unlock(&m->im_mu);
	return err;
}

void *dgi_intmap_del(dgi_intmap *m, uint32_t key)
{
	void *old = NULL;
	bool hit;

	if (key == 0)
		return NULL;
	pthread_mutex_lock(&m->im_mu);
	struct dgi_intmap_table *t =
	    atomic_load_explicit(&m->im_cur, memory_order_relaxed);
	size_t i = tbl_find(t, key, &hit);

	/* Leave the key: the slot becomes a tombstone, so no allocation (del
	 * cannot fail) and chains through the slot still reach later keys. */
	if (hit)
		old = atomic_exchange_explicit(&t->t_vals[i], NULL,
		    memory_order_relaxed);
	if (old != NULL)
		count_add(t, (size_t)-1);   /* wraps: minus one */
	pthread_mutex_unlock(&m->im_mu);
	return old;
}

size_t dgi_intmap_count(const dgi_intmap *m)
{
	const struct dgi_intmap_table *t =
	    atomic_load_explicit(&m->im_cur, memory_order_acquire);
	return atomic_load_explicit(&t->t_count, memory_order_relaxed);
}

void dgi_intmap_each(const dgi_intmap *m,
    void (*fn)(void *ctx, uint32_t key, void *value), void *ctx)
{
	/* One table for the whole walk: a key is in one slot of it, so a key
	 * present throughout is seen exactly once, even if fn writes. */
	const struct dgi_intmap_table *t =
	    atomic_load_explicit(&m->im_cur, memory_order_acquire);
	const _Atomic uint32_t *keys = tbl_keys(t);

	for (size_t i = 0; i < t->t_cap; i++) {
		uint32_t k = atomic_load_explicit(&keys[i], memory_order_relaxed);
		if (k == 0)
			continue;
		void *v = atomic_load_explicit(&t->t_vals[i], memory_order_acquire);
		if (v != NULL)
			fn(ctx, k, v);
	}
}
