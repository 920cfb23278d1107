/* hashtab.c — the minimal open-addressing table of hashtab.h. */
#include "hashtab.h"

#include "mix.h"   /* marshal/mix.h: dgi_mix64, murmur3's fmix64 */

#include <stdlib.h>
#include <string.h>

/* 8 bytes at a time, each word folded in through fmix64 (a 16-byte key:
 * two mixes, four multiplications). */
static inline uint64_t ht_hash(const uint8_t *k, uint32_t n)
{
	uint64_t h = 0x9e3779b97f4a7c15ULL ^ n;
	for (; n >= 8; k += 8, n -= 8) {
		uint64_t w;
		memcpy(&w, k, 8);
		h = dgi_mix64(h ^ w);
	}
	if (n > 0) {
		uint64_t w = 0;
		memcpy(&w, k, n);
		h = dgi_mix64(h ^ w ^ 0xff);
	}
	return h;
}

void dgb_ht_init(dgb_ht *t)
{
	t->slots = NULL;
	t->cap = t->count = 0;
}

void dgb_ht_free(dgb_ht *t)
{
	for (size_t i = 0; i < t->cap; i++)
		free(t->slots[i].e);
	free(t->slots);
	dgb_ht_init(t);
}

/* The slot holding key, or the empty slot where it would go. */
static inline size_t find(const dgb_ht *t, uint64_t h, const void *key, uint32_t klen)
{
	size_t mask = t->cap - 1;
	for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
		const dgb_ht_slot *s = &t->slots[i];
		if (s->e == NULL || (s->hash == h && s->e->klen == klen &&
		    memcmp(s->e->data, key, klen) == 0))
			return i;
	}
}

static int grow(dgb_ht *t)
{
	size_t ncap = t->cap ? t->cap * 2 : 16;
	dgb_ht_slot *ns = calloc(ncap, sizeof(*ns));
	if (ns == NULL)
		return -1;
	for (size_t i = 0; i < t->cap; i++) {
		if (t->slots[i].e == NULL)
			continue;
		size_t j = (size_t)t->slots[i].hash & (ncap - 1);
		while (ns[j].e != NULL)
			j = (j + 1) & (ncap - 1);
		ns[j] = t->slots[i];
	}
	free(t->slots);
	t->slots = ns;
	t->cap = ncap;
	return 0;
}

int dgb_ht_put(dgb_ht *t, const void *key, uint32_t klen, const void *val,
    uint32_t vlen)
{
	uint64_t h = ht_hash(key, klen);
	size_t i = 0;
	int have = 0;   /* i is key's slot, or the empty slot it would take */
	if (t->cap > 0) {
		i = find(t, h, key, klen);
		dgb_ht_slot *s = &t->slots[i];
		if (s->e != NULL) {
			if (s->e->vlen != vlen) {
				dgb_ht_entry *ne = realloc(s->e, sizeof(*ne) + klen + vlen);
				if (ne == NULL)
					return -1;
				ne->vlen = vlen;
				s->e = ne;
			}
			memcpy(s->e->data + klen, val, vlen);
			return 0;
		}
		have = 1;
	}
	if ((t->count + 1) * 4 > t->cap * 3) {
		if (grow(t) != 0)
			return -1;
		have = 0;
	}
	dgb_ht_entry *e = malloc(sizeof(*e) + klen + vlen);
	if (e == NULL)
		return -1;
	e->klen = klen;
	e->vlen = vlen;
	memcpy(e->data, key, klen);
	memcpy(e->data + klen, val, vlen);
	if (!have)
		i = find(t, h, key, klen);
	t->slots[i].hash = h;
	t->slots[i].e = e;
	t->count++;
	return 0;
}

long dgb_ht_get(const dgb_ht *t, const void *key, uint32_t klen, void *out,
    size_t cap)
{
	if (t->cap == 0)
		return -1;
	uint64_t h = ht_hash(key, klen);
	const dgb_ht_entry *e = t->slots[find(t, h, key, klen)].e;
	if (e == NULL)
		return -1;
	memcpy(out, e->data + klen, e->vlen < cap ? e->vlen : cap);
	return (long)e->vlen;
}
