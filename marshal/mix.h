/*
 * mix.h — the project's one 64-bit hash mixer (and its 32-bit sibling).
 * Not installed.
 *
 * dgi_mix64 is murmur3's fmix64 finalizer: a bijection in which every
 * input bit flips each output bit with probability near 1/2.  It turns a
 * value weak in some bits (a counter, a node id, a hash used for a stripe
 * and a slot at once) into one whose every bit range can be used.  The key
 * hash (cache/affinity.c) ends in it, so it decides partitions and with
 * them where persisted records live: changing it moves every stored key.
 */
#ifndef DG_MARSHAL_MIX_H
#define DG_MARSHAL_MIX_H

#include <stdint.h>

static inline uint64_t dgi_mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

/* murmur3's fmix32, the same for 32-bit keys (cache/intmap.c: cache ids
 * are small and dense, and keys sharing low bits would pile into one run
 * of slots). */
static inline uint32_t dgi_mix32(uint32_t h)
{
	h ^= h >> 16;
	h *= 0x85ebca6bu;
	h ^= h >> 13;
	h *= 0xc2b2ae35u;
	h ^= h >> 16;
	return h;
}

#endif
