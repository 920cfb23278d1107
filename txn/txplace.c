/*
 * txplace.c — where a tx's entries belong: this node's TRANSACTIONAL
 * caches, whether an entry from the wire names its key's partition,
 * whether this node is a key's primary, and the owners of the written
 * partitions — the targets of a primary's copies and the owner digest its
 * backups compare with their own (dgi_svc_backup_agrees).
 */
#include "txsvc_int.h"
#include "marshal/mix.h"

/* ---- this node's caches, a key's partition and primary ---- */

dg_cache *dgi_svc_tx_cache(dgi_txsvc *s, int64_t id, dg_err *err)
{
	dg_cache *c = s->g != NULL ? dgi_grid_cache_by_id(s->g, (uint32_t)id) : NULL;
	if (c == NULL)
		*err = DG_ERR_NOT_FOUND;
	else if (dg_cache_config_of(c)->atomicity != DG_TRANSACTIONAL)
		*err = DG_ERR_UNSUPPORTED;
	else
		*err = DG_OK;
	return *err == DG_OK ? c : NULL;
}

/* Whether an entry from the wire names its key's partition: part is one
 * of c's and the key hashes to it.  A forged or corrupt partition would
 * otherwise pass the placement check of another partition this node owns,
 * and store the key where no lookup finds it.  DG_ERR_INVAL; *hash (may be
 * NULL): the key's. */
dg_err dgi_svc_ent_place(dg_cache *c, const dgi_txwire_ent *en, uint64_t *hash)
{
	uint64_t h;
	if (en->part < 0 || (uint64_t)en->part >= dg_cache_config_of(c)->partitions ||
	    dgi_cache_key_part(c, en->key.ptr, en->key.len, &h) != (uint64_t)en->part)
		return DG_ERR_INVAL;
	if (hash != NULL)
		*hash = h;
	return DG_OK;
}

/* Every entry of a PREPARE or COMMIT_COPY body whose cache this node has
 * names its key's partition (dgi_svc_ent_place); DG_ERR_INVAL (or the body's
 * decoding error) and *bad, the entry's index, otherwise. */
dg_err dgi_svc_ents_placed(dgi_txsvc *s, const dg_msg_in *in, int64_t *bad)
{
	dg_reader rd;
	uint32_t n;
	dgi_msg_tx_prepare m;
	dg_err e = dgi_svc_in_ents(in, &m, &rd, &n);
	for (uint32_t i = 0; i < n && e == DG_OK; i++) {
		dgi_txwire_ent en;
		dg_err ce;
		if ((e = dgi_txwire_get(&rd, &en)) != DG_OK)
			break;
		dg_cache *c = dgi_svc_tx_cache(s, en.cache_id, &ce);
		if (c != NULL && (e = dgi_svc_ent_place(c, &en, NULL)) != DG_OK)
			*bad = i;
	}
	return e;
}

/* Is this node key's primary under topver (any: the current topology)? */
dg_err dgi_svc_check_primary(dgi_txsvc *s, dg_cache *c, uint32_t part, int64_t topver,
    int64_t *tvp)
{
	uint64_t own[8];
	int64_t tv;
	uint32_t n = dgi_cache_owners(c, part, own, DGI_OWNERS_BUF, &tv);
	if (tvp != NULL)
		*tvp = tv;
	if (n == 0)
		return DG_ERR_NOT_READY;
	if (own[0] != s->self || (topver != 0 && tv != topver))
		return DG_ERR_REMAP;
	return DG_OK;
}

/* ---- copies: do the sender and this node agree on the owners? ----
 * A primary's copies (TX_COMMIT_COPY) and its forwarded prepares
 * (TX_PREPARE with DGI_TXP_BACKUP) carry the digest of the owner sets of
 * the written entries' partitions under the sender's affinity (owners_of)
 * and its version.  A backup answers DG_OK only when its own affinity
 * gives the same digest — then every owner of its topology was among the
 * sender's targets — and the sender is in its topology (a removed primary,
 * woken from a pause, acts on a topology the others left). */

/* Adds entry (cache id, part)'s owner set to a digest. */
static uint64_t digest_add(uint64_t d, int64_t cache_id, uint32_t part, uint64_t ohash)
{
	return d + dgi_mix64(((uint64_t)cache_id << 32 ^ part) * 0x9e3779b97f4a7c15ULL ^ ohash);
}

/* The owner digest of an entry list's written entries under this node's
 * affinities, and the lowest affinity version among them (0: no written
 * entry).  DG_ERR_NOT_READY: a cache this node does not know (yet), or
 * has no affinity for. */
static dg_err owners_of(dgi_txsvc *s, dg_raw ents, uint64_t *digest, int64_t *topver)
{
	dg_reader rd;
	uint32_t n;
	*digest = 0;
	*topver = 0;
	dg_reader_init(&rd, NULL, ents.ptr, ents.len);
	dg_err e = dg_read_begin(&rd, DG_LIST, &n);
	if (e != DG_OK)
		return e;
	if (n % DGI_TXWIRE_FIELDS != 0)
		return DG_ERR_BAD_LENGTH;
	n /= DGI_TXWIRE_FIELDS;
	for (uint32_t i = 0; i < n; i++) {
		dgi_txwire_ent en;
		if ((e = dgi_txwire_get(&rd, &en)) != DG_OK)
			return e;
		if ((en.op & DGI_TXOP_MASK) == 0)
			continue;
		dg_err ce;
		dg_cache *c = dgi_svc_tx_cache(s, en.cache_id, &ce);
		uint64_t oh;
		int64_t tv;
		if (c == NULL || dgi_cache_owners_hash(c, (uint32_t)en.part, NULL, 0, &tv, &oh) == 0)
			return DG_ERR_NOT_READY;
		*digest = digest_add(*digest, en.cache_id, (uint32_t)en.part, oh);
		if (*topver == 0 || tv < *topver)
			*topver = tv;
	}
	return DG_OK;
}

/* May this node, a backup of m's sender, answer DG_OK to it?  DG_OK: it
 * agrees with the sender on every written entry's owners.  Else the
 * answer: DG_ERR_REMAP (this node is on a newer topology than the sender:
 * owners the sender did not know of may lack the copy, or the sender is
 * no longer a member), DG_ERR_NOT_READY (this node is behind the sender,
 * or does not know a cache yet), or a decoding error.  *member: whether
 * the sender is in this node's topology (a copy from a node that is not
 * is not applied at all: its writes are not the cluster's). */
dg_err dgi_svc_backup_agrees(dgi_txsvc *s, const dg_msg_in *in, const dgi_msg_tx_prepare *m,
    bool *member)
{
	uint64_t mine;
	int64_t tv;
	*member = in->from == s->self || !dgi_txsvc_gone(s, in->from);
	dg_err e = owners_of(s, m->ents, &mine, &tv);
	if (e != DG_OK)
		return e;
	if (tv == 0)
		tv = dgi_grid_topver(s->g); /* nothing written: the grid's */
	if (*member && m->otopver != 0 && (uint64_t)m->owners == mine)
		return DG_OK;
	return tv > m->otopver ? DG_ERR_REMAP : DG_ERR_NOT_READY;
}

/* Adds part's owners (current affinity) to t, but this node (which may
 * no longer be the primary) and those already there; and to its digest.
 * DG_ERR_NOMEM when t cannot grow. */
dg_err dgi_svc_add_owners(dgi_txsvc *s, dg_cache *c, int64_t cache_id, uint32_t part,
    struct targets *t)
{
	uint64_t buf[DGI_OWNERS_BUF], *own = buf, oh;
	int64_t tv;
	uint32_t k = dgi_cache_owners_hash(c, part, own, DGI_OWNERS_BUF, &tv, &oh);
	if (k > DGI_OWNERS_BUF) { /* a REPLICATED cache on many servers */
		uint32_t cap = k;
		if ((own = dgi_alloc(cap * sizeof(*own))) == NULL)
			return DG_ERR_NOMEM;
		if ((k = dgi_cache_owners_hash(c, part, own, cap, &tv, &oh)) > cap)
			k = cap; /* grew meanwhile: the digest tells the backups */
	}
	t->digest = digest_add(t->digest, cache_id, part, oh);
	if (k > 0 && (t->topver == 0 || tv < t->topver))
		t->topver = tv;
	dg_err e = DG_OK;
	for (uint32_t j = 0; j < k && e == DG_OK; j++)
		if (own[j] != s->self)
			e = ns_add(&t->bk, own[j]);
	if (own != buf)
		dgi_free(own);
	return e;
}
