/*
 * affinity.c — key hashing and rendezvous affinity.
 *
 * A partition's owners are the nodes with the highest score
 * mix(partition, node id): every node computes the same owners from the
 * same server list, and a node joining or leaving changes the owners of
 * only the partitions whose top `copies` scores it enters or leaves —
 * about copies/n of them (tests/cache_test.c checks the bound).
 */
#include "cache_int.h"
#include "marshal/mix.h"
#include "marshal/marshal_int.h" /* TAG_BYTES */

#include <string.h>
#include <time.h>

/* The key hash's steps (dgi_kh_*) are in cache_int.h, with
 * dgi_key_hash_bytes, in line on the local get's path. */
uint64_t dgi_key_hash(const uint8_t *p, size_t n)
{
	size_t total = n;
	uint64_t h = dgi_kh_start(n);
	for (; n >= 8; p += 8, n -= 8)
		h = dgi_kh_step(h, dgi_kh_rd64(p));
	uint64_t t = 0;
	if (n != 0 && total >= 8)
		t = dgi_kh_rd64(p + n - 8) >> (64 - 8 * n); /* (the same bytes, one load) */
	else
		for (size_t i = 0; i < n; i++)
			t |= (uint64_t)p[i] << (8 * i);
	return dgi_kh_end(h, t);
}

int64_t dgi_wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

dgi_aff *dgi_aff_build(int64_t topver, uint32_t parts, uint32_t copies,
    const dg_node_id *nodes, const int64_t *orders, uint32_t nnodes, dg_node_id self)
{
	if (copies > nnodes)
		copies = nnodes;
	uint32_t c = copies ? copies : 1;
	size_t sz = sizeof(dgi_aff) + nnodes * (sizeof(dg_node_id) + sizeof(int64_t)) +
	    (size_t)parts * c * sizeof(uint16_t) + parts;
	dgi_aff *a = dgi_calloc(1, sz);
	if (a == NULL)
		return NULL;
	a->topver = topver;
	a->parts = parts;
	a->copies = c;
	a->nnodes = nnodes;
	a->nodes = (dg_node_id *)(a + 1);
	a->orders = (int64_t *)(a->nodes + nnodes);
	a->owners = (uint16_t *)(a->orders + nnodes);
	a->self_kind = (uint8_t *)(a->owners + (size_t)parts * c);
	memcpy(a->nodes, nodes, nnodes * sizeof(*nodes));
	memcpy(a->orders, orders, nnodes * sizeof(*orders));
	uint64_t *best = dgi_alloc(c * sizeof(*best)); /* a partition's top scores */
	if (best == NULL) {
		dgi_free(a);
		return NULL;
	}
	for (uint32_t p = 0; p < parts; p++) {
		uint16_t *own = &a->owners[(size_t)p * c];
		for (uint32_t i = 0; i < c; i++)
			own[i] = UINT16_MAX;
		uint32_t have = 0;
		uint64_t ps = dgi_mix64((uint64_t)p * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e019ULL);
		for (uint32_t k = 0; k < nnodes && copies > 0; k++) {
			uint64_t s = dgi_mix64(ps ^ dgi_mix64(nodes[k]));
			/* insertion into the top-c list, highest first; ties by id */
			uint32_t j = have < c ? have++ : c;
			while (j > 0 && (best[j - 1] < s ||
			    (best[j - 1] == s && nodes[own[j - 1]] > nodes[k]))) {
				if (j < c) {
					best[j] = best[j - 1];
					own[j] = own[j - 1];
				}
				j--;
			}
			if (j < c) {
				best[j] = s;
				own[j] = (uint16_t)k;
			}
		}
	}
	dgi_free(best);
	for (uint32_t p = 0; p < parts; p++) {
		int role = self != 0 ? dgi_aff_role(a, p, self) : -1;
		a->self_kind[p] = role == 0 ? DGI_AFF_PRIMARY : role > 0 ? DGI_AFF_BACKUP : DGI_AFF_NONE;
	}
	return a;
}

void dgi_aff_free(dgi_aff *a)
{
	dgi_free(a);
}

uint64_t dgi_aff_owners_hash(const dgi_aff *a, uint32_t p)
{
	if (a == NULL || a->nnodes == 0 || p >= a->parts)
		return 0;
	uint64_t h = dgi_mix64(dgi_aff_owner(a, p, 0) ^ 0x5ca1ab1eull);
	for (uint32_t i = 1; i < a->copies; i++) {
		dg_node_id o = dgi_aff_owner(a, p, i);
		if (o != 0)
			h += dgi_mix64(o); /* backups in any order */
	}
	return h;
}
