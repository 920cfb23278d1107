/*
 * store.c — one partition's entries: an open-addressing table (linear
 * probing on the key hash, backward-shift deletion: no tombstone slots,
 * load factor at most 1/2) of (hash, entry) slots; entries hold key and
 * value inline.  The caller holds the
 * partition's lock for every call.  A put over an existing key reuses the
 * entry's memory when the new value fits, so overwriting a key allocates
 * nothing.
 */
#include "cache_int.h"

#ifdef __GLIBC__
#include <malloc.h>   /* malloc_usable_size */
#endif

#include <stdlib.h>
#include <string.h>

void dgi_part_init(dgi_part *p)
{
	memset(p, 0, sizeof(*p));
	pthread_mutex_init(&p->mu, NULL);
}

void dgi_part_clear(dgi_part *p)
{
	for (uint32_t i = 0; i < p->cap; i++) {
		dgi_free(p->slots[i].e);
		p->slots[i].e = NULL;
	}
	p->count = p->live = 0;
	p->bytes = 0;
}

void dgi_part_free(dgi_part *p)
{
	dgi_part_clear(p);
	dgi_free(p->slots);
	p->slots = NULL;
	p->cap = 0;
	pthread_mutex_destroy(&p->mu);
}

static inline bool same_key(const dgi_entry *e, uint64_t hash, const uint8_t *key,
    uint32_t klen)
{
	return e->hash == hash && e->klen == klen && memcmp(e->data, key, klen) == 0;
}

static uint32_t find_slot(const dgi_part *p, uint64_t hash, const uint8_t *key,
    uint32_t klen)
{
	uint32_t mask = p->cap - 1;
	for (uint32_t i = (uint32_t)hash & mask;; i = (i + 1) & mask) {
		const dgi_pslot *s = &p->slots[i];
		if (s->e == NULL || (s->hash == hash && same_key(s->e, hash, key, klen)))
			return i;
	}
}

dgi_entry *dgi_part_find(dgi_part *p, uint64_t hash, const uint8_t *key, uint32_t klen)
{
	if (p->cap == 0)
		return NULL;
	return p->slots[find_slot(p, hash, key, klen)].e;
}

dgi_entry *dgi_part_find_ver(dgi_part *p, uint64_t hash, const dgi_pver *ver)
{
	if (p->cap == 0)
		return NULL;
	uint32_t mask = p->cap - 1;
	for (uint32_t i = (uint32_t)hash & mask; p->slots[i].e != NULL; i = (i + 1) & mask)
		if (p->slots[i].hash == hash && dgi_pver_cmp(&p->slots[i].e->ver, ver) == 0)
			return p->slots[i].e;
	return NULL;
}

static dg_err grow(dgi_part *p)
{
	uint32_t ncap = p->cap ? p->cap * 2 : 16;
	dgi_pslot *ns = dgi_calloc(ncap, sizeof(*ns));
	if (ns == NULL)
		return DG_ERR_NOMEM;
	for (uint32_t i = 0; i < p->cap; i++) {
		if (p->slots[i].e == NULL)
			continue;
		uint32_t j = (uint32_t)p->slots[i].hash & (ncap - 1);
		while (ns[j].e != NULL)
			j = (j + 1) & (ncap - 1);
		ns[j] = p->slots[i];
	}
	dgi_free(p->slots);
	p->slots = ns;
	p->cap = ncap;
	return DG_OK;
}

dg_err dgi_part_set(dgi_part *p, uint64_t hash, const uint8_t *key, uint32_t klen,
    const uint8_t *val, uint32_t vlen, const dgi_pver *ver, int64_t expire_ms,
    uint64_t op_node, uint64_t op_seq, uint32_t flags, dgi_entry **out)
{
	if ((p->count + 1) * 2 > p->cap && grow(p) != DG_OK)
		return DG_ERR_NOMEM;
	uint32_t i = find_slot(p, hash, key, klen);
	dgi_entry *e = p->slots[i].e;
	uint32_t need = klen + vlen;
	if (e == NULL || e->cap < need) {
		/* exactly what it holds: the slack is what malloc rounds up to
		 * anyway (up to 15 bytes), which a value growing by a few bytes
		 * reuses; a fixed 1/8 more put most entries in the next size
		 * class (16 B per entry for 16-byte keys and 100-byte values) */
		dgi_entry *ne = dgi_alloc(sizeof(*ne) + need);
		if (ne == NULL)
			return DG_ERR_NOMEM;
		size_t cap = need;
#ifdef __GLIBC__
		size_t usable = malloc_usable_size(ne);
		if (usable > sizeof(*ne) + need && usable - sizeof(*ne) <= UINT32_MAX)
			cap = usable - sizeof(*ne);
#endif
		ne->cap = (uint32_t)cap;
		memcpy(ne->data, key, klen);
		if (e != NULL) {
			p->bytes -= e->klen + e->vlen;
			if (!(e->flags & DGI_ENTRY_TOMB))
				p->live--;
			dgi_free(e);
		} else {
			p->count++;
		}
		e = ne;
		p->slots[i].e = e;
		p->slots[i].hash = hash;
	} else {
		p->bytes -= e->klen + e->vlen;
		if (!(e->flags & DGI_ENTRY_TOMB))
			p->live--;
	}
	e->hash = hash;
	e->klen = klen;
	e->vlen = vlen;
	if (vlen)
		memcpy(e->data + klen, val, vlen);
	e->ver = *ver;
	e->expire_ms = expire_ms;
	e->op_node = op_node;
	e->op_seq = op_seq;
	e->flags = flags;
	p->bytes += need;
	if (!(flags & DGI_ENTRY_TOMB))
		p->live++;
	if (out)
		*out = e;
	return DG_OK;
}

bool dgi_part_overwrite(dgi_part *p, dgi_entry *e, const uint8_t *val, uint32_t vlen,
    const dgi_pver *ver, int64_t expire_ms, uint64_t op_node, uint64_t op_seq)
{
	if (e->cap < e->klen + vlen)
		return false;
	p->bytes -= e->vlen;
	p->bytes += vlen;
	if (e->flags & DGI_ENTRY_TOMB)
		p->live++;
	e->vlen = vlen;
	memcpy(e->data + e->klen, val, vlen);
	e->ver = *ver;
	e->expire_ms = expire_ms;
	e->op_node = op_node;
	e->op_seq = op_seq;
	e->flags = 0;
	return true;
}

/* Backward-shift deletion at slot i. */
static void del_at(dgi_part *p, uint32_t i)
{
	uint32_t mask = p->cap - 1;
	dgi_entry *e = p->slots[i].e;
	p->bytes -= e->klen + e->vlen;
	if (!(e->flags & DGI_ENTRY_TOMB))
		p->live--;
	p->count--;
	dgi_free(e);
	p->slots[i].e = NULL;
	for (uint32_t j = (i + 1) & mask; p->slots[j].e != NULL; j = (j + 1) & mask) {
		uint32_t home = (uint32_t)p->slots[j].hash & mask;
		/* move j back into the hole if its home is not in (i, j] */
		if (((j - home) & mask) >= ((j - i) & mask)) {
			p->slots[i] = p->slots[j];
			p->slots[j].e = NULL;
			i = j;
		}
	}
}

void dgi_part_del(dgi_part *p, uint64_t hash, const uint8_t *key, uint32_t klen)
{
	if (p->cap == 0)
		return;
	uint32_t i = find_slot(p, hash, key, klen);
	if (p->slots[i].e != NULL)
		del_at(p, i);
}

void dgi_part_purge_tombs(dgi_part *p)
{
	for (uint32_t i = 0; i < p->cap;) {
		dgi_entry *e = p->slots[i].e;
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
		dgi_entry *e = p->slots[i].e;
		if (e != NULL && e->expire_ms != 0 && e->expire_ms <= now_ms) {
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
		if (p->slots[i].e != NULL)
			fn(ctx, p->slots[i].e);
}

static int cmp_hash(const void *a, const void *b)
{
	uint64_t x = (*(dgi_entry *const *)a)->hash, y = (*(dgi_entry *const *)b)->hash;
	return x < y ? -1 : x > y;
}

uint64_t dgi_part_scan(dgi_part *p, uint64_t after, bool first, uint32_t max,
    bool (*fn)(void *ctx, const dgi_entry *e), void *ctx, bool *more)
{
	/* Collect the `max` smallest hashes above `after` (a bounded max-heap
	 * would do; pages are small, so: collect candidates, sort, cut). */
	*more = false;
	if (p->cap == 0 || max == 0)
		return after;
	dgi_entry **c = dgi_alloc(sizeof(*c) * p->count);
	if (c == NULL)
		return after;
	uint32_t n = 0;
	for (uint32_t i = 0; i < p->cap; i++) {
		dgi_entry *e = p->slots[i].e;
		if (e != NULL && (first || p->slots[i].hash > after))
			c[n++] = e;
	}
	qsort(c, n, sizeof(*c), cmp_hash);
	uint32_t take = n < max ? n : max;
	while (take < n && c[take]->hash == c[take - 1]->hash)
		take++; /* never split one hash over two pages */
	uint64_t last = after;
	for (uint32_t i = 0; i < take; i++) {
		last = c[i]->hash;
		if (!fn(ctx, c[i]))
			break;
	}
	*more = take < n;
	dgi_free(c);
	return last;
}
