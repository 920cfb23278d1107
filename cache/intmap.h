/*
 * intmap.h — an int-keyed open-addressing map published copy-on-write
 * (cache/, private to the module).
 *
 * Maps a uint32 key (a cache id) to a pointer.  Readers look up without a
 * lock, box nothing and allocate nothing: dgi_intmap_get loads the current
 * table with one acquire load and probes it linearly (IGNITE-29099: Ignite
 * looked cache contexts up by a boxed Integer on every message).
 *
 * Writers (rare: cache create/destroy) serialize on the map's mutex.  While
 * the table stays at most half full they change it in place with atomic
 * stores readers tolerate (a slot's key is set once; a deleted key stays as
 * a tombstone so probe chains hold).  An insert that would pass half full
 * builds a new table (grown, or rebuilt without tombstones) and publishes it
 * with a release store.  Old tables are retired, not freed at once, because
 * a reader may still be probing one: they are freed by dgi_intmap_destroy.
 * A table is rebuilt at most 3/8 full, so writes are O(1) amortized and the
 * retired tables add up to a few slots per inserted key.
 *
 * Values are the caller's; the map never frees them.  A reader may still
 * return a value a writer has just replaced or deleted, so the caller must
 * not free it while a reader could hold it.
 *
 * Key 0 is reserved (empty slot marker): dgi_intmap_put refuses it.
 */
#ifndef DG_CACHE_INTMAP_H
#define DG_CACHE_INTMAP_H

#include "marshal/marshal.h"

#include <pthread.h>
#include <stdatomic.h>

struct dgi_intmap_table;   /* private: cap (power of two), count, slots */

typedef struct dgi_intmap {
	_Atomic(struct dgi_intmap_table *) im_cur;
	pthread_mutex_t im_mu;                 /* writers */
	struct dgi_intmap_table *im_retired;   /* older tables, freed at destroy */
} dgi_intmap;

/* An empty map.  DG_ERR_NOMEM; on failure there is nothing to destroy
 * (dgi_intmap_destroy is then a no-op). */
dg_err dgi_intmap_init(dgi_intmap *m);
/* Frees every table (the values are the caller's).  No reader may run. */
void dgi_intmap_destroy(dgi_intmap *m);

/* The value for key, or NULL.  Lock-free, allocation-free, any thread. */
void *dgi_intmap_get(const dgi_intmap *m, uint32_t key);

/* Inserts or replaces.  DG_ERR_INVAL (key 0 or value NULL), DG_ERR_NOMEM
 * (map unchanged; only an insert that needs a new table allocates).
 * Thread-safe against readers and other writers. */
dg_err dgi_intmap_put(dgi_intmap *m, uint32_t key, void *value);
/* Removes key; returns its value or NULL.  Never allocates, cannot fail. */
void *dgi_intmap_del(dgi_intmap *m, uint32_t key);
/* Number of keys. */
size_t dgi_intmap_count(const dgi_intmap *m);
/* Calls fn for each (key, value) of the current table.  Keys present for the
 * whole walk are seen exactly once; keys put or deleted meanwhile may or may
 * not be.  fn may call into the map. */
void dgi_intmap_each(const dgi_intmap *m,
    void (*fn)(void *ctx, uint32_t key, void *value), void *ctx);

#endif
