/*
 * hashtab.h — the `hash` implementation of dgbench's embedded cache cases
 * (embedded_bench.c): the floor issue 16 measures datagrid's single-node
 * store against.  The simplest fast table a C programmer writes in an
 * afternoon, nothing more:
 *
 *   - open addressing, linear probing, power-of-two capacity, load factor
 *     at most 3/4, doubled when an insert would exceed it (rehash from the
 *     cached hashes, no key is rehashed);
 *   - a slot is 16 bytes: the key's 64-bit hash and a pointer to its entry
 *     (NULL: empty), so a probe compares hashes without touching entries;
 *   - an entry is one malloc: an 8-byte header (key and value lengths),
 *     the key, the value (16 + 100 bytes here: malloc(124));
 *   - get: hash, probe, memcmp the key, memcpy the value out;
 *   - put: find and overwrite the value in place when its length is the
 *     same (no allocation), else realloc the entry; insert: malloc.
 *
 * No deletion, no locking, no iteration: the benchmark does not need them.
 * Allocations go through malloc/realloc, so the harness counts them.
 */
#ifndef DGB_HASHTAB_H
#define DGB_HASHTAB_H

#include <stddef.h>
#include <stdint.h>

typedef struct dgb_ht_entry {
	uint32_t klen, vlen;
	uint8_t data[];             /* key, then value */
} dgb_ht_entry;

typedef struct dgb_ht_slot {
	uint64_t hash;
	dgb_ht_entry *e;            /* NULL: empty */
} dgb_ht_slot;

typedef struct dgb_ht {
	dgb_ht_slot *slots;
	size_t cap;                 /* power of two, or 0 */
	size_t count;
} dgb_ht;

void dgb_ht_init(dgb_ht *t);
/* Frees every entry and the table; t is empty afterwards. */
void dgb_ht_free(dgb_ht *t);
/* Inserts or overwrites.  0, or -1 when out of memory (t unchanged). */
int dgb_ht_put(dgb_ht *t, const void *key, uint32_t klen, const void *val,
    uint32_t vlen);
/* The value's length, its first min(length, cap) bytes copied to out; -1
 * when absent. */
long dgb_ht_get(const dgb_ht *t, const void *key, uint32_t klen, void *out,
    size_t cap);
/* Bytes the table itself holds (slots), for the memory notes. */
static inline size_t dgb_ht_table_bytes(const dgb_ht *t)
{
	return t->cap * sizeof(dgb_ht_slot);
}

#endif /* DGB_HASHTAB_H */
