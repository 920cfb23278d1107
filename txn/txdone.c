/*
 * txdone.c — finished transactions remembered for a bounded time
 * (txdone.h).
 *
 * One mutex guards two structures that always hold the same ids:
 *   - an open-addressing table of (id, outcome) in 16 bytes a slot,
 *     linear probing, capacity a power of two kept at load <= 1/2, doubled
 *     when a put would exceed it.
 *     An empty slot holds the id {0,0} (never a valid tx id).  Deletion is
 *     by backward shift (no tombstones): after emptying a slot, later
 *     entries of the same cluster whose home is not cyclically in (hole,
 *     slot] move back into the hole, so every probe chain stays unbroken;
 *   - a FIFO ring of (id, finish time) in put order, doubled when full.
 *     Expiry pops from the front while the front finished more than keep_ms
 *     before now, deleting each popped id from the table.
 *
 * Both are sized at create for `capacity` ids (table 2 x, ring 1 x, each
 * rounded up to a power of two) and touched there (huge pages where the
 * kernel allows), so a node whose tx rate times keep_ms stays within it
 * neither allocates nor faults a page in here after start.  A put of a new id
 * past that first allocates whatever must grow (table and/or ring), and
 * only then mutates, so DG_ERR_NOMEM leaves everything unchanged.
 */
#include "txn/txdone.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#define HUGE_PAGE ((uintptr_t)2 << 20)

#define TD_TABLE_MIN 16u
#define TD_RING_MIN 8u

/* 16 bytes: the id, its outcome in the seq's top bit (a tx seq never
 * reaches 2^63: a put of one is refused). */
#define TD_COMMITTED (1ull << 63)

typedef struct td_slot {
	uint64_t node;           /* {0,0}: empty */
	uint64_t seq;            /* | TD_COMMITTED */
} td_slot;

typedef struct td_ring_ent {
	dgi_txid id;
	uint64_t finish_ms;
} td_ring_ent;

struct dgi_txdone {
	pthread_mutex_t mu;
	uint64_t keep_ms;
	td_slot *tab;            /* tcap slots, tcap a power of two */
	size_t tcap;
	size_t count;            /* ids in the table (== ring length) */
	td_ring_ent *ring;       /* rcap entries, rcap a power of two */
	size_t rcap;
	size_t rhead;            /* index of the oldest entry */
	uint32_t grown;          /* times the table or ring grew past its start size */
};

/* ---- hashing ---- */

static uint64_t td_hash(const dgi_txid *id)
{
	return dgi_txid_hash(id);
}

static bool td_empty(const td_slot *s)
{
	return s->node == 0 && s->seq == 0;
}

static bool td_id_valid(const dgi_txid *id)
{
	return (id->node != 0 || id->seq != 0) && !(id->seq & TD_COMMITTED);
}

static dgi_txid td_id(const td_slot *s)
{
	return (dgi_txid){ s->node, s->seq & ~TD_COMMITTED };
}

static dgi_txs td_outcome(const td_slot *s)
{
	return (s->seq & TD_COMMITTED) ? DGI_TXS_COMMITTED : DGI_TXS_ROLLED_BACK;
}

/* ---- table ---- */

/* The slot holding id, or the empty slot ending its probe chain. */
static size_t td_find(const td_slot *tab, size_t tcap, const dgi_txid *id)
{
	size_t mask = tcap - 1;
	size_t i = (size_t)td_hash(id) & mask;

	while (!td_empty(&tab[i]) && !(tab[i].node == id->node &&
	    (tab[i].seq & ~TD_COMMITTED) == id->seq))
		i = (i + 1) & mask;
	return i;
}

static void td_insert(td_slot *tab, size_t tcap, const dgi_txid *id, dgi_txs outcome)
{
	size_t i = td_find(tab, tcap, id);

	tab[i].node = id->node;
	tab[i].seq = id->seq | (outcome == DGI_TXS_COMMITTED ? TD_COMMITTED : 0);
}

/* True when home h is cyclically within (hole, j]: the entry at j may not
 * move back to hole. */
static bool td_between(size_t hole, size_t h, size_t j)
{
	if (hole <= j)
		return hole < h && h <= j;
	return hole < h || h <= j;
}

/* Empties slot i and shifts the rest of its cluster back. */
static void td_delete_at(td_slot *tab, size_t tcap, size_t i)
{
	size_t mask = tcap - 1;
	size_t hole = i;
	size_t j = i;

	for (;;) {
		j = (j + 1) & mask;
		if (td_empty(&tab[j]))
			break;
		dgi_txid id = td_id(&tab[j]);
		size_t h = (size_t)td_hash(&id) & mask;
		if (td_between(hole, h, j))
			continue;
		tab[hole] = tab[j];
		hole = j;
	}
	memset(&tab[hole], 0, sizeof tab[hole]);
}

static void td_table_remove(dgi_txdone *d, const dgi_txid *id)
{
	size_t i = td_find(d->tab, d->tcap, id);

	if (!td_empty(&d->tab[i]))
		td_delete_at(d->tab, d->tcap, i);
}

/* Moves every entry into ntab (ncap slots, zeroed) and frees the old one. */
static void td_table_rehash(dgi_txdone *d, td_slot *ntab, size_t ncap)
{
	for (size_t i = 0; i < d->tcap; i++)
		if (!td_empty(&d->tab[i]))
			ntab[td_find(ntab, ncap, &(dgi_txid){ d->tab[i].node,
			    d->tab[i].seq & ~TD_COMMITTED })] = d->tab[i];
	dgi_free(d->tab);
	d->tab = ntab;
	d->tcap = ncap;
}

/* ---- ring ---- */

static td_ring_ent *td_ring_at(dgi_txdone *d, size_t k)
{
	return &d->ring[(d->rhead + k) & (d->rcap - 1)];
}

/* Copies the ring in order into nring (ncap entries) and frees the old. */
static void td_ring_regrow(dgi_txdone *d, td_ring_ent *nring, size_t ncap)
{
	for (size_t k = 0; k < d->count; k++)
		nring[k] = *td_ring_at(d, k);
	dgi_free(d->ring);
	d->ring = nring;
	d->rcap = ncap;
	d->rhead = 0;
}

/* ---- growth ---- */

/* Makes room for one more id: allocates first, then swaps in. */
static dg_err td_reserve(dgi_txdone *d)
{
	bool grow_t = (d->count + 1) * 2 > d->tcap;
	bool grow_r = d->count == d->rcap;
	td_slot *ntab = NULL;
	td_ring_ent *nring = NULL;

	if (grow_t && (ntab = dgi_calloc(d->tcap * 2, sizeof *ntab)) == NULL)
		return DG_ERR_NOMEM;
	if (grow_r && (nring = dgi_alloc(d->rcap * 2 * sizeof *nring)) == NULL) {
		dgi_free(ntab);
		return DG_ERR_NOMEM;
	}
	d->grown += grow_t || grow_r;
	if (grow_t)
		td_table_rehash(d, ntab, d->tcap * 2);
	if (grow_r)
		td_ring_regrow(d, nring, d->rcap * 2);
	return DG_OK;
}

/* A large block in transparent huge pages where the kernel allows it
 * (its 2 MiB-aligned part): the table is probed at random, and with 4 KiB
 * pages nearly every probe of a large one misses the TLB. */
static void huge(void *p, size_t n)
{
	uintptr_t a = ((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
	uintptr_t e = ((uintptr_t)p + n) & ~(uintptr_t)(HUGE_PAGE - 1);
	if (e > a)
		(void)madvise((void *)a, e - a, MADV_HUGEPAGE);
}

/* ---- API ---- */

dg_err dgi_txdone_create(uint64_t keep_ms, size_t capacity, dgi_txdone **out)
{
	if (keep_ms == 0 || out == NULL || capacity > DGI_TXDONE_CAPACITY_MAX)
		return DG_ERR_INVAL;
	size_t tcap = TD_TABLE_MIN, rcap = TD_RING_MIN;
	while (tcap < capacity * 2)
		tcap *= 2;
	while (rcap < capacity)
		rcap *= 2;
	dgi_txdone *d = dgi_calloc(1, sizeof *d);
	if (d == NULL)
		return DG_ERR_NOMEM;
	d->tab = dgi_calloc(tcap, sizeof *d->tab);
	d->ring = dgi_alloc(rcap * sizeof *d->ring);
	if (d->tab == NULL || d->ring == NULL || pthread_mutex_init(&d->mu, NULL) != 0) {
		dgi_free(d->tab);
		dgi_free(d->ring);
		dgi_free(d);
		return DG_ERR_NOMEM;
	}
	/* touched now, once: left to first use, a large table's pages fault
	 * in one by one under the mutex on the tx path (dgbench txn,
	 * transfer_pess_rr_1c with 4 Mi ids: p50 +50 us) */
	huge(d->tab, tcap * sizeof *d->tab);
	huge(d->ring, rcap * sizeof *d->ring);
	memset(d->tab, 0, tcap * sizeof *d->tab);
	memset(d->ring, 0, rcap * sizeof *d->ring);
	d->keep_ms = keep_ms;
	d->tcap = tcap;
	d->rcap = rcap;
	*out = d;
	return DG_OK;
}

void dgi_txdone_destroy(dgi_txdone *d)
{
	if (d == NULL)
		return;
	pthread_mutex_destroy(&d->mu);
	dgi_free(d->tab);
	dgi_free(d->ring);
	dgi_free(d);
}

static dg_err td_put_locked(dgi_txdone *d, const dgi_txid *tx, dgi_txs outcome, uint64_t now_ms)
{
	size_t i = td_find(d->tab, d->tcap, tx);

	if (!td_empty(&d->tab[i]))
		return td_outcome(&d->tab[i]) == outcome ? DG_OK : DG_ERR_EXISTS;
	dg_err err = td_reserve(d);
	if (err != DG_OK)
		return err;
	td_insert(d->tab, d->tcap, tx, outcome);
	*td_ring_at(d, d->count) = (td_ring_ent){ .id = *tx, .finish_ms = now_ms };
	d->count++;
	return DG_OK;
}

dg_err dgi_txdone_put(dgi_txdone *d, const dgi_txid *tx, dgi_txs outcome, uint64_t now_ms)
{
	if (d == NULL || tx == NULL || !td_id_valid(tx))
		return DG_ERR_INVAL;
	if (outcome != DGI_TXS_COMMITTED && outcome != DGI_TXS_ROLLED_BACK)
		return DG_ERR_INVAL;
	pthread_mutex_lock(&d->mu);
	dg_err err = td_put_locked(d, tx, outcome, now_ms);
	pthread_mutex_unlock(&d->mu);
	return err;
}

bool dgi_txdone_get(dgi_txdone *d, const dgi_txid *tx, dgi_txs *outcome)
{
	if (d == NULL || tx == NULL || !td_id_valid(tx))
		return false;
	pthread_mutex_lock(&d->mu);
	size_t i = td_find(d->tab, d->tcap, tx);
	bool found = !td_empty(&d->tab[i]);
	if (found && outcome != NULL)
		*outcome = td_outcome(&d->tab[i]);
	pthread_mutex_unlock(&d->mu);
	return found;
}

/* True when a tx finished at finish_ms is forgotten at now_ms. */
static bool td_expired(uint64_t finish_ms, uint64_t now_ms, uint64_t keep_ms)
{
	return now_ms > finish_ms && now_ms - finish_ms > keep_ms;
}

uint32_t dgi_txdone_expire(dgi_txdone *d, uint64_t now_ms)
{
	uint32_t n = 0;

	if (d == NULL)
		return 0;
	pthread_mutex_lock(&d->mu);
	while (d->count > 0 && td_expired(d->ring[d->rhead].finish_ms, now_ms, d->keep_ms)) {
		td_table_remove(d, &d->ring[d->rhead].id);
		d->rhead = (d->rhead + 1) & (d->rcap - 1);
		d->count--;
		n++;
	}
	pthread_mutex_unlock(&d->mu);
	return n;
}

uint32_t dgi_txdone_grown(dgi_txdone *d)
{
	if (d == NULL)
		return 0;
	pthread_mutex_lock(&d->mu);
	uint32_t n = d->grown;
	pthread_mutex_unlock(&d->mu);
	return n;
}

size_t dgi_txdone_count(dgi_txdone *d)
{
	if (d == NULL)
		return 0;
	pthread_mutex_lock(&d->mu);
	size_t n = d->count;
	pthread_mutex_unlock(&d->mu);
	return n;
}
