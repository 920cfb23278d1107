/*
 * intmap.h — an int-keyed open-addressing map published copy-on-write
 * (cache/, private to the module).
 *
 * Maps a uint32 key (a cache id) to a pointer.  Readers look up without a
 * lock, box nothing and allocate nothing: dgi_intmap_get loads the current
 * table with one acquire load and probes it linearly (IGNITE-29099: Ignite
 * looked cache contexts up by a boxed Integer on every message).
 *
 * Writers (rare: cache create/destroy) serialize on the map's mutex, build a
 * new table and publish it with a release store.  Old tables are retired,
 * not freed at once, because a reader may still be probing one: they are
 * freed by dgi_intmap_destroy (creates and destroys are rare, so the retired
 * list stays short).  Values are the caller's; the map never frees them.
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

/* An empty map.  DG_ERR_NOMEM. */
dg_err dgi_intmap_init(dgi_intmap *m);
/* Frees every table (the values are the caller's).  No reader may run. */
void dgi_intmap_destroy(dgi_intmap *m);

/* The value for key, or NULL.  Lock-free, allocation-free, any thread. */
void *dgi_intmap_get(const dgi_intmap *m, uint32_t key);

/* Inserts or replaces.  DG_ERR_INVAL (key 0 or value NULL), DG_ERR_NOMEM
 * (map unchanged).  Thread-safe against readers and other writers. */
dg_err dgi_intmap_put(dgi_intmap *m, uint32_t key, void *value);
/* Removes key; returns its value or NULL. */
void *dgi_intmap_del(dgi_intmap *m, uint32_t key);
/* Number of keys. */
size_t dgi_intmap_count(const dgi_intmap *m);
/* Calls fn for each (key, value) of the current table (a snapshot). */
void dgi_intmap_each(const dgi_intmap *m,
    void (*fn)(void *ctx, uint32_t key, void *value), void *ctx);

#endif
