/*
 * read.c — reads: local when this node owns a copy (the primary, or a
 * backup when read_from_backup allows), else from the primary.  A MOVING
 * owner answers what it holds and asks its supplier for the rest.
 */
#include "cache_int.h"
#include "marshal/marshal_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- reads ---- */

/* Appends a stored value to out: whole, or (unwrap) the byte string inside
 * its BYTES encoding — what the raw API returns, copied once. */
static dg_err put_value(dg_buf *out, const uint8_t *v, uint32_t n, bool unwrap)
{
	if (out == NULL)
		return DG_OK;
	return unwrap ? dgi_unwrap_to(v, n, out) : dgi_append(out, v, n);
}



struct get_wait {
	sem_t sem;
	dg_err err;
	bool found;
	dg_buf *out;
	bool unwrap;
};

static void on_get_res(void *ctx, dg_err err, const dg_msg_in *reply)
{
	struct get_wait *w = ctx;
	if (err == DG_OK) {
		const dgi_msg_get_res *r = reply->body;
		w->found = r->found != 0;
		if (w->found && r->val.ptr != NULL)
			err = put_value(w->out, r->val.ptr, r->val.len, w->unwrap);
	}
	w->err = err;
	sem_post(&w->sem);
}

static dg_err remote_get(dgi_grid *g, dg_node_id to, const dgi_msg_get *m, dg_buf *out,
    uint64_t deadline, bool unwrap)
{
	struct get_wait w = { .err = DG_OK, .found = false, .out = out, .unwrap = unwrap };
	dgi_lat_slow(); /* (always timed: cache_int.h) */
	uint64_t now = dgi_now_ms();
	if (now >= deadline)
		return DG_ERR_TIMEOUT;
	sem_init(&w.sem, 0, 0);
	dg_err e = dg_tp_request(g->tp, to, DGI_MSG_GET, m, (uint32_t)(deadline - now),
	    on_get_res, &w);
	if (e == DG_OK) {
		dgi_sem_wait_spin(g->tp, &w.sem, true); /* one hop: often back within the spin */
		e = w.err;
	}
	sem_destroy(&w.sem);
	if (e == DG_OK && !w.found)
		e = DG_ERR_NOT_FOUND;
	return e;
}

/* A read that found its entry pending on this primary (pt locked, the
 * value already copied out): waits until that version is on every backup
 * (pending.c).  Unlocks pt.  DG_ERR_NOT_READY when the write failed (read
 * again), DG_ERR_TIMEOUT past deadline. */
static dg_err wait_pending(dgi_grid *g, dg_cache *c, dgi_part *pt, uint64_t hash,
    dgi_entry *en, uint64_t *deadline)
{
	dgi_pver ver = dgi_entry_ver(en);
	struct pw *w = dgi_pw_find(pt, hash, &ver);
	if (w == NULL) {
		en->flags &= ~DGI_ENTRY_PENDING; /* nobody replicates it: never left pending */
		dgi_part_unlock(pt);
		return DG_OK;
	}
	(void)c;
	dgi_lat_slow();
	if (*deadline == 0)
		*deadline = dgi_now_ms() + g->cfg.request_timeout_ms;
	struct pw_wait x;
	memset(&x, 0, sizeof(x));
	x.kind = PWW_READ;
	sem_init(&x.sem, 0, 0);
	dgi_pw_attach(w, &x);
	dg_err e = dgi_pw_wait(g->tp, pt, &x, *deadline);
	sem_destroy(&x.sem);
	return e;
}

/* Local read of this node's copy (dgi_part_may_serve's rule):
 * DG_ERR_NOT_READY when MOVING without a current copy.  A FULL_SYNC write
 * still pending here is read once every backup has it. */
dg_err dgi_local_get(dg_cache *c, uint32_t part, uint64_t hash, const uint8_t *key,
    uint32_t klen, dg_buf *out, bool unwrap, uint64_t *deadline)
{
	dgi_part *pt = &c->parts[part];
	dgi_part_lock(pt);
	int st = atomic_load_explicit(&pt->state, memory_order_relaxed);
	dgi_entry *en = dgi_part_find(pt, hash, key, klen);
	dg_err e = dgi_part_may_serve(c, pt, part, st, en);
	if (e == DG_OK) {
		int64_t wall = c->cfg.ttl_ms ? dgi_wall_ms() : 0;
		if (dgi_entry_live(en, wall))
			e = put_value(out, dgi_entry_val(en), en->vlen, unwrap);
		else
			e = DG_ERR_NOT_FOUND;
		if (en != NULL && (en->flags & DGI_ENTRY_PENDING) && e != DG_ERR_NOMEM &&
		    e != DG_ERR_TYPE_MISMATCH) {
			dg_err we = wait_pending(c->g, c, pt, hash, en, deadline); /* unlocks */
			return we != DG_OK ? we : e;
		}
	}
	dgi_part_unlock(pt);
	return e;
}

/* An answer from primary that came back after this node installed a newer
 * topology in which primary no longer is the partition's primary: it may
 * come from a node that was paused or cut off meanwhile, while the new
 * primary took writes — read again. */
bool dgi_read_stale(dgi_grid *g, dg_cache *c, uint32_t part, dg_node_id primary,
    int64_t seen)
{
	if (atomic_load(&g->topver) == seen)
		return false;
	dgi_aff *now = atomic_load_explicit(&c->aff, memory_order_acquire);
	return now == NULL || dgi_aff_owner(now, part, 0) != primary;
}

static dg_err get_in_section(dg_cache *c, const uint8_t *key, size_t klen, dg_buf *out,
    bool unwrap);

/* Reads the encoded value of key into out (unwrap: the bytes inside a BYTES
 * value), untimed, inside a section (cache_int.h, "Lifetime").
 * DG_ERR_NOT_FOUND. */

static dg_err get_in_section(dg_cache *c, const uint8_t *key, size_t klen, dg_buf *out,
    bool unwrap)
{
	if (c == NULL || key == NULL || klen == 0 || klen > DG_KEY_MAX)
		return DG_ERR_INVAL;
	dgi_grid *g = c->g;
	if (c->cfg.atomicity == DG_TRANSACTIONAL && g->tx_hook != NULL) {
		dgi_lat_slow();
		dg_err te = g->tx_hook(g->tx_hook_ctx, c, DGI_CACHE_OP_GET, key, klen, NULL, 0, NULL, 0,
		    out,
		    unwrap, NULL);
		if (te != DG_ERR__COUNT)
			return te; /* read inside the thread's tx */
	}
	uint64_t hash = dgi_key_hash(key, klen);
	uint32_t part = dgi_part_of(hash, c->cfg.partitions);
	uint64_t deadline = 0;
	size_t len0 = out != NULL ? out->len : 0;
	for (;;) {
		if (atomic_load_explicit(&c->dead, memory_order_relaxed))
			return DG_ERR_CLOSED;
		if (dg_member_segmented(g->m))
			return DG_ERR_SEGMENTED;
		if (atomic_load_explicit(&c->lost[part], memory_order_relaxed))
			return DG_ERR_PARTITION_LOST;
		dgi_aff *aff = atomic_load_explicit(&c->aff, memory_order_acquire);
		int64_t seen = atomic_load(&g->topver);
		dg_err e = DG_ERR_NOT_READY;
		if (out != NULL)
			out->len = len0;
		if (aff != NULL) {
			int role = dgi_aff_role(aff, part, g->self);
			dg_node_id primary = dgi_aff_owner(aff, part, 0);
			e = DG_ERR_REMAP;
			if (role == 0 || (role > 0 && c->cfg.read_from_backup))
				e = dgi_local_get(c, part, hash, key, (uint32_t)klen, out, unwrap, &deadline);
			if (e == DG_ERR_NOT_READY && dg_member_serving(g->m) == DG_OK) {
				/* MOVING: the supplier has what this copy lacks */
				dgi_part *pt = &c->parts[part];
				dgi_part_lock(pt);
				dg_node_id sup = pt->supplier;
				dgi_part_unlock(pt);
				if (deadline == 0)
					deadline = dgi_now_ms() + g->cfg.request_timeout_ms;
				dgi_msg_get m = { c->id, part, aff->topver, DGI_GET_SUPPLIER,
					{ key, (uint32_t)klen } };
				/* (a pending write's failure leaves the value its
				 * read copied out: the supplier's answer replaces it) */
				if (out != NULL)
					out->len = len0;
				e = sup != 0 ? remote_get(g, sup, &m, out, deadline, unwrap) :
				    DG_ERR_NOT_READY;
			} else if (e == DG_ERR_REMAP && primary != 0 && primary != g->self) {
				if (deadline == 0)
					deadline = dgi_now_ms() + g->cfg.request_timeout_ms;
				dgi_msg_get m = { c->id, part, aff->topver, 0, { key, (uint32_t)klen } };
				e = remote_get(g, primary, &m, out, deadline, unwrap);
				if ((e == DG_OK || e == DG_ERR_NOT_FOUND) && dgi_read_stale(g, c, part, primary,
				    seen))
					e = DG_ERR_REMAP;
			}
		}
		if (e == DG_OK) {
			DGI_COUNT(c, hits, 1);
			return DG_OK;
		}
		if (e == DG_ERR_NOT_FOUND) {
			DGI_COUNT(c, misses, 1);
			return e;
		}
		if (!dgi_retriable(e) && e != DG_ERR_TIMEOUT)
			return e;
		if (deadline == 0)
			deadline = dgi_now_ms() + g->cfg.request_timeout_ms;
		if (e == DG_ERR_TIMEOUT || dgi_now_ms() >= deadline)
			return DG_ERR_TIMEOUT;
		atomic_fetch_add_explicit(&c->remaps, 1, memory_order_relaxed);
		if (dgi_wait_topology_change(g, seen, deadline) != DG_OK)
			return DG_ERR_TIMEOUT;
	}
}

/* put_value, in line when the value fits the room out already has: the
 * raw API's short BYTES form (a one-byte length: values under 128 bytes)
 * unwrapped, any value whole. */
static inline dg_err copy_out(dg_buf *out, const uint8_t *v, uint32_t n, bool unwrap)
{
	if (out == NULL)
		return DG_OK;
	const uint8_t *p = v;
	uint32_t m = n;
	if (unwrap) {
		if (n < 2 || v[0] != TAG_BYTES || v[1] >= 0x80 || (uint32_t)v[1] != n - 2)
			return put_value(out, v, n, unwrap);
		p += 2;
		m -= 2;
	}
	if (m == 0)
		return DG_OK; /* (an empty buffer's data may be NULL) */
	if (out->cap - out->len < m)
		return put_value(out, v, n, unwrap);
	memcpy(out->data + out->len, p, m);
	out->len += m;
	return DG_OK;
}


/* Why a lock-free read did not answer (get_fast). */
enum { READ_DONE, READ_TORN /* changed meanwhile: read again */,
	READ_LOCK /* needs what only the locked read does: take the lock now */ };

/* What a local read of a found entry answers: DG_OK with the value
 * appended (copy_out; locked: put_value when it does not fit the room out
 * has), DG_ERR_NOT_FOUND (a tombstone, expired), DG_ERR__COUNT (pending:
 * the general path waits for it), or without the lock *again: READ_TORN
 * (the entry changed while it was copied) or READ_LOCK (out's room is too
 * small, a long or typed value: the general copy) — out->len kept, the
 * bytes past it garbage.  en NULL: not found. */
static inline __attribute__((always_inline)) dg_err read_entry(const dg_cache *c,
    const dgi_part *pt, uint32_t seq, const dgi_entry *en, dg_buf *out, bool unwrap,
    bool locked, int *again)
{
	if (en == NULL)
		return DG_ERR_NOT_FOUND;
	uint8_t flags = __atomic_load_n(&en->flags, __ATOMIC_RELAXED);
	if (flags & (DGI_ENTRY_PENDING | DGI_ENTRY_TOMB | DGI_ENTRY_EXP)) { /* (one test) */
		if (flags & DGI_ENTRY_PENDING)
			return DG_ERR__COUNT;
		int64_t x = 0;
		if (flags & DGI_ENTRY_EXP)
			memcpy(&x, en->data, sizeof(x));
		if ((flags & DGI_ENTRY_TOMB) || (x != 0 && c->cfg.ttl_ms != 0 && x <= dgi_wall_ms()))
			return DG_ERR_NOT_FOUND;
	}
	const uint8_t *v = en->data + dgi_entry_prefix(flags) + dgi_entry_klen(en);
	uint32_t n = __atomic_load_n(&en->vlen, __ATOMIC_RELAXED);
	if (locked)
		return copy_out(out, v, n, unwrap);
	const uint8_t *p = v;
	uint32_t m = 0;
	if (out != NULL) {
		m = n;
		if (unwrap) {
			/* (the short BYTES form: n - 2 < 0x80 first, so never a
			 * byte past a shorter value) */
			if (n - 2 >= 0x80 || (v[0] | (uint32_t)v[1] << 8) != (TAG_BYTES | (n - 2) << 8)) {
				*again = READ_LOCK; /* (the general unwrap) */
				return DG_ERR__COUNT;
			}
			p += 2;
			m -= 2;
		}
		if (out->cap - out->len < m) {
			*again = READ_LOCK; /* (the buffer grows under the lock) */
			return DG_ERR__COUNT;
		}
		if (m != 0) /* (an empty buffer's data may be NULL) */
			dgi_copy_short(out->data + out->len, p, m);
	}
	atomic_thread_fence(memory_order_acquire);
	if (atomic_load_explicit(&pt->seq, memory_order_relaxed) != seq) {
		*again = READ_TORN;
		return DG_ERR__COUNT;
	}
	if (out != NULL)
		out->len += m;
	return DG_OK;
}

/* The local reads' partition checks (get_fast, get_short): the copy of
 * hash's partition this node may read without asking another — the cache
 * has an affinity, the partition is not lost, this node is its primary or
 * (read_from_backup) a backup — or NULL: the general path decides. */
static inline __attribute__((always_inline)) dgi_part *local_part(dg_cache *c,
    const dgi_grid *g, uint64_t hash)
{
	uint32_t part = dgi_part_of(hash, c->cfg.partitions);
	dgi_aff *aff = atomic_load_explicit(&c->aff, memory_order_acquire);
	if (aff == NULL || atomic_load_explicit(&c->lost[part], memory_order_relaxed))
		return NULL;
	uint8_t kind = aff->self_kind[part]; /* (built for g->self) */
	if (kind != DGI_AFF_PRIMARY && (kind != DGI_AFF_BACKUP || !c->cfg.read_from_backup))
		return NULL;
	return &c->parts[part];
}

/* Whether pt's copy is served now: OWNING, under a majority's lease —
 * dg_member_serving, read in line from the words g->lease holds
 * (g->m's: set with it, when the node joined; none before, as with no
 * membership: serving). */
static inline __attribute__((always_inline)) bool part_serves(const dgi_grid *g,
    const dgi_part *pt)
{
	return atomic_load_explicit(&pt->state, memory_order_relaxed) == P_OWNING &&
	    dgi_member_lease_serving(g->lease) == DG_OK;
}

/* The common read, in one pass: this node holds an OWNING copy of the
 * key's partition it may serve (the primary, or a backup under
 * read_from_backup), under a majority's lease, not lost, the cache alive,
 * this thread in no transaction of it, the entry not pending.  The same
 * checks as get_in_section + dgi_local_get, with the same answers (the
 * value's own errors too: a typed value through the raw API, no memory);
 * for anything else (a remote primary, a MOVING copy, a pending write, an
 * error the general path names) it returns DG_ERR__COUNT having changed
 * nothing, and the general path starts from the beginning.  The caller
 * counts the hit or miss.
 *
 * Without the partition lock: a sequence lock (cache_int.h,
 * dgi_part_lock).  It reads the partition's sequence (even: no writer
 * inside), the state, the table, the entry and its value, then the
 * sequence again: unchanged, nothing it read was written meanwhile, and
 * the read took effect at that point, as if under the lock.  The memory it
 * reaches is not freed before its section ends (store.c, "Retired
 * memory").  A writer inside, a change meanwhile (a few tries), or a value
 * the buffer has no room for: the same read under the lock.
 *
 * The key is pre[0..npre) + key[0..klen) (npre 0: key is the encoded key;
 * else the raw API's key and its BYTES header, never built for the
 * lock-free read), hash its dgi_key_hash. */
static inline __attribute__((always_inline)) dg_err get_fast(dg_cache *c, uint64_t hash, const uint8_t *pre, uint32_t npre,
    const uint8_t *key, uint32_t klen, dg_buf *out, bool unwrap)
{
	dgi_grid *g = c->g;
	if ((c->cfg.atomicity == DG_TRANSACTIONAL && g->tx_hook != NULL) ||
	    atomic_load_explicit(&c->dead, memory_order_relaxed))
		return DG_ERR__COUNT;
	dgi_part *pt = local_part(c, g, hash);
	if (pt == NULL)
		return DG_ERR__COUNT;
	dg_err e = DG_ERR__COUNT;
	int again = READ_LOCK;
#ifndef DGI_READ_LOCKED_ONLY
	again = READ_TORN;
	dgi_epoch_rd_enter(); /* (what it reaches stays allocated: store.c) */
	for (int tries = 0; tries < 3 && again == READ_TORN; tries++) {
		again = READ_DONE;
		uint32_t seq = atomic_load_explicit(&pt->seq, memory_order_acquire);
		if (seq & 1) {
			again = READ_LOCK; /* a writer is inside: wait for it on the lock */
			break;
		}
		if (!part_serves(g, pt)) {
			e = DG_ERR__COUNT; /* the general path's */
			break;
		}
		bool torn = false;
		const dgi_entry *en = dgi_part_peek(pt, seq, hash, pre, npre, key, klen, &torn);
		if (torn) {
			again = READ_TORN;
			continue;
		}
		e = read_entry(c, pt, seq, en, out, unwrap, false, &again);
		if (again == READ_DONE && e != DG_OK) {
			/* (not found, pending: so only if nothing changed) */
			atomic_thread_fence(memory_order_acquire);
			if (atomic_load_explicit(&pt->seq, memory_order_relaxed) != seq)
				again = READ_TORN;
		}
	}
	dgi_epoch_rd_leave();
#endif
	if (again != READ_DONE) {
		uint8_t whole[2 + 127];
		if (npre != 0) { /* (the key whole, for the table's own lookup) */
			if (npre + klen > sizeof(whole))
				return DG_ERR__COUNT;
			memcpy(whole, pre, npre);
			memcpy(whole + npre, key, klen);
			key = whole;
			klen += npre;
		}
		e = DG_ERR__COUNT;
		dgi_part_lock(pt);
		/* (the lease under the lock, as dgi_part_may_serve reads it) */
		if (part_serves(g, pt))
			e = read_entry(c, pt, 0, dgi_part_find(pt, hash, key, klen), out, unwrap, true,
			    &again);
		dgi_part_unlock(pt);
	}
	return e;
}

/* The short local get: get_fast's lock-free read of a raw key (8..127
 * bytes), timed and counted as dgi_lat_begin / dgi_lat_end would, in as
 * few instructions as the common case allows — both sections entered in
 * line (dgi_epoch_short_enter: a thread in no section), one try, the
 * partition checks in line, the counter block's sampling as in
 * dgi_lat_end.  It answers what get_fast answers on its first try without
 * the lock; for anything else (DG_ERR__COUNT) it has answered nothing and
 * counted nothing — out->len kept — and the caller takes the general
 * path (get_raw_general), which decides again from the start. */
static inline __attribute__((always_inline)) dg_err get_short(dg_cache *c, const uint8_t *key,
    uint32_t klen, dg_buf *out)
{
#ifdef DGI_READ_LOCKED_ONLY
	(void)c, (void)key, (void)klen, (void)out;
	return DG_ERR__COUNT;
#else
	if (!dgi_epoch_short_enter(true))
		return DG_ERR__COUNT;
	dg_err e = DG_ERR__COUNT;
	dgi_ctrs *b;
	dgi_grid *g = c->g;
	if (atomic_load_explicit(&c->dead, memory_order_relaxed) ||
	    (c->cfg.atomicity == DG_TRANSACTIONAL && g->tx_hook != NULL) ||
	    (b = dgi_ctrs_short(c)) == NULL) /* (after dead: see dgi_ctrs_short) */
		goto out;
	uint64_t t0 = dgi_lat_short_t0(b, DG_OP_GET);
	uint64_t hash = dgi_key_hash_bytes(key, klen);
	dgi_part *pt = local_part(c, g, hash);
	if (pt == NULL)
		goto out;
	uint32_t seq = atomic_load_explicit(&pt->seq, memory_order_acquire);
	if ((seq & 1) || !part_serves(g, pt))
		goto out;
	const uint8_t pre[2] = { TAG_BYTES, (uint8_t)klen };
	bool torn = false;
	const dgi_entry *en = dgi_part_peek(pt, seq, hash, pre, 2, key, klen, &torn);
	if (torn)
		goto out;
	int again = READ_DONE;
	e = read_entry(c, pt, seq, en, out, true, false, &again);
	if (again != READ_DONE || e == DG_ERR__COUNT) {
		e = DG_ERR__COUNT;
		goto out;
	}
	if (e != DG_OK) { /* (not found: so only if nothing changed) */
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&pt->seq, memory_order_relaxed) != seq) {
			e = DG_ERR__COUNT;
			goto out;
		}
	}
	/* answered: counted */
	dgi_ctr_add(e == DG_OK ? &b->hits : &b->misses, 1, false);
	dgi_lat_fast_done(b, DG_OP_GET, t0, false);
out:
	dgi_epoch_short_leave(true);
	return e;
#endif
}

dg_err dgi_get_short(dg_cache *c, const uint8_t *key, uint32_t klen, dg_buf *out)
{
	return get_short(c, key, klen, out);
}

/* A hit (DG_OK) or a miss (DG_ERR_NOT_FOUND) get_fast answered, counted
 * in b, the calling thread's counter block of c. */
static inline void count_answer(dg_cache *c, dgi_ctrs *b, dg_err e)
{
	dgi_ctr_add(e == DG_OK ? &b->hits : &b->misses, 1, b == &c->ctr_shared);
}

/* A read started by a single-key call on this node, timed. */
dg_err dgi_get_enc(dg_cache *c, const uint8_t *key, size_t klen, dg_buf *out, bool unwrap)
{
	if (c == NULL)
		return DG_ERR_INVAL;
	dgi_epoch_enter();
	dgi_lat_op op;
	dgi_lat_begin(c, DG_OP_GET, &op); /* (sampled: cache_int.h) */
	dg_err e = DG_ERR__COUNT;
	if (key != NULL && klen != 0 && klen <= DG_KEY_MAX)
		e = get_fast(c, dgi_key_hash(key, klen), NULL, 0, key, (uint32_t)klen, out, unwrap);
	if (e == DG_OK || e == DG_ERR_NOT_FOUND)
		count_answer(c, op.b, e); /* (the block the timing counts in) */
	else if (e == DG_ERR__COUNT)
		e = get_in_section(c, key, klen, out, unwrap);
	e = dgi_lat_end(c, &op, e);
	dgi_epoch_leave();
	return e;
}

/* dgi_get_raw past the short get (out of line: its frame is not the
 * short get's). */
static __attribute__((noinline)) dg_err get_raw_general(dg_cache *c, const uint8_t *key,
    size_t klen, dg_buf *out)
{
	dgi_epoch_enter();
	dgi_lat_op op;
	dgi_lat_begin(c, DG_OP_GET, &op);
	uint8_t enc[2 + 127]; /* (its BYTES encoding: the header, the key when needed) */
	enc[0] = TAG_BYTES;
	enc[1] = (uint8_t)klen;
	dg_err e = get_fast(c, dgi_key_hash_bytes(key, klen), enc, 2, key, (uint32_t)klen, out,
	    true);
	if (e == DG_OK || e == DG_ERR_NOT_FOUND)
		count_answer(c, op.b, e);
	else if (e == DG_ERR__COUNT) {
		memcpy(enc + 2, key, klen);
		e = get_in_section(c, enc, klen + 2, out, true);
	}
	e = dgi_lat_end(c, &op, e);
	dgi_epoch_leave();
	return e;
}

dg_err dgi_get_raw(dg_cache *c, const uint8_t *key, size_t klen, dg_buf *out)
{
	/* (klen 8..127: dg_cache_get, its only caller, checked it) */
	if (c == NULL || key == NULL || out == NULL)
		return DG_ERR_INVAL;
	dg_err e = get_short(c, key, (uint32_t)klen, out);
	return __builtin_expect(e != DG_ERR__COUNT, 1) ? e : get_raw_general(c, key, klen, out);
}

/* A read that is part of a batch (untimed: the batch is one operation),
 * through the lock-free read when it can. */
dg_err dgi_get_op(dg_cache *c, const uint8_t *key, size_t klen, dg_buf *out, bool unwrap)
{
	dgi_epoch_enter();
	dg_err e = DG_ERR__COUNT;
	if (c != NULL && key != NULL && klen != 0 && klen <= DG_KEY_MAX)
		e = get_fast(c, dgi_key_hash(key, klen), NULL, 0, key, (uint32_t)klen, out, unwrap);
	if (e == DG_OK || e == DG_ERR_NOT_FOUND)
		count_answer(c, dgi_ctrs_of(c), e);
	else if (e == DG_ERR__COUNT)
		e = get_in_section(c, key, klen, out, unwrap);
	dgi_epoch_leave();
	return e;
}

/* A GET forwarded by a MOVING primary to its supplier: the answer goes
 * back to the original requester. */
struct fwd {
	dg_tp *tp;                  /* (not the grid: the answer may come after it stopped) */
	dg_msg_in in;
};

static void on_fwd_res(void *ctx, dg_err err, const dg_msg_in *reply)
{
	struct fwd *f = ctx;
	if (err == DG_OK)
		dg_tp_reply(f->tp, &f->in, DGI_MSG_GET_RES, reply->body);
	else
		dg_tp_reply_error(f->tp, &f->in, err == DG_ERR_NOT_FOUND ? err : DG_ERR_NOT_READY);
	dgi_free(f);
}

/* A remote read that found its entry pending here: parks with a copy of
 * the value until every backup has it (pt locked; unlocks).  False when
 * it cannot wait (no memory): the caller answers at once. */
static bool park_read(dgi_grid *g, dgi_part *pt, const dg_msg_in *in, uint64_t hash,
    dgi_entry *en, bool found)
{
	dgi_pver ver = dgi_entry_ver(en);
	struct pw *w = dgi_pw_find(pt, hash, &ver);
	if (w == NULL) {
		en->flags &= ~DGI_ENTRY_PENDING; /* nobody replicates it: never left pending */
		return false;
	}
	struct pw_wait *x = dgi_pw_remote_waiter(w, PWW_READ);
	if (x == NULL)
		return false;
	x->in = *in;
	x->in.body = NULL;
	x->found = found;
	if (found && dgi_append(&x->val, dgi_entry_val(en), en->vlen) != DG_OK) {
		dgi_pw_waiter_free(w, x);
		return false;
	}
	dgi_pw_attach(w, x);
	dgi_part_unlock(pt);
	(void)g;
	return true;
}

static void on_get(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	dgi_grid *g = ctx;
	const dgi_msg_get *m = in->body;
	dg_cache *c = dgi_grid_cache(g, (uint32_t)m->cache_id);
	if (c == NULL || m->key.ptr == NULL || m->key.len == 0 || m->part < 0 ||
	    (uint64_t)m->part >= c->cfg.partitions) {
		/* an unknown cache: this node joined and has not learnt it yet
		 * (not "no such key"): the reader retries */
		dg_tp_reply_error(tp, in, c == NULL ? DG_ERR_NOT_READY : DG_ERR_INVAL);
		return;
	}
	uint32_t part = (uint32_t)m->part;
	uint64_t hash = dgi_key_hash(m->key.ptr, m->key.len);
	dgi_part *pt = &c->parts[part];
	dgi_msg_get_res r = { 0, { NULL, 0 } };
	bool supplier = (m->flags & DGI_GET_SUPPLIER) != 0;
	dgi_part_lock(pt);
	int st = atomic_load(&pt->state);
	dg_node_id sup = pt->supplier;
	dgi_entry *en = dgi_part_find(pt, hash, m->key.ptr, m->key.len);
	/* a supplier read serves the store whatever the partition's state; a
	 * reader's read only on the topology this node's copy is at, as an
	 * update (a node that just rejoined after a pause may still hold the
	 * affinity under which it was primary, the reader the one it rejoined
	 * by: its copy is stale until it has fetched) */
	dgi_aff *aff = supplier ? NULL : atomic_load_explicit(&c->aff, memory_order_acquire);
	int64_t mine = aff != NULL ? aff->topver : 0;
	bool other = !supplier && m->topver != 0 && mine != m->topver;
	/* (a supplier's copy that is not whole — it was dropped out of the
	 * topology, or is still fetching — may be older than what the others
	 * wrote: the reader asks again) */
	dg_err e = supplier ? (atomic_load(&pt->whole) ? DG_OK : DG_ERR_NOT_READY) :
	    other ? (mine > m->topver ? DG_ERR_REMAP : DG_ERR_NOT_READY) :
	    dgi_part_may_serve(c, pt, part, st, en);
	if (other)
		sup = 0; /* (the reader asks again: nothing to forward) */
	if (e == DG_OK) {
		int64_t wall = c->cfg.ttl_ms ? dgi_wall_ms() : 0;
		if (dgi_entry_live(en, wall)) {
			r.found = 1;
			r.val = (dg_bytes){ dgi_entry_val(en), en->vlen };
		}
		if (!supplier && en != NULL && (en->flags & DGI_ENTRY_PENDING) &&
		    park_read(g, pt, in, hash, en, r.found))
			return; /* answered once every backup has it */
		dg_tp_reply(tp, in, DGI_MSG_GET_RES, &r); /* encoded under the lock: r views the entry */
	}
	dgi_part_unlock(pt);
	if (e == DG_ERR_NOT_READY && sup != 0 && dg_member_serving(g->m) == DG_OK) {
		struct fwd *f = dgi_alloc(sizeof(*f));
		dgi_msg_get fm = *m;
		fm.flags = DGI_GET_SUPPLIER;
		if (f != NULL) {
			f->tp = tp;
			f->in = *in;
			f->in.body = NULL;
			if (dg_tp_request(tp, sup, DGI_MSG_GET, &fm, g->cfg.request_timeout_ms,
			    on_fwd_res, f) == DG_OK)
				return;
			dgi_free(f);
		}
	}
	if (e != DG_OK)
		dg_tp_reply_error(tp, in, e);
}

/* One GET_ALL item's answer, as on_get would give it without parking or
 * forwarding: a key that would wait (its entry pending here) or be
 * forwarded (MOVING) is answered DG_ERR_NOT_READY, and the reader reads it
 * alone — and so is one whose value does not fit the *room the answer has
 * left (it is one frame: recv_max), answered DG_ERR_LIMIT.  Written into w under the partition's
 * lock (the value is a view of the entry). */
static void get_all_one(dg_cache *c, const struct dgi_gall_item *it, dg_writer *w,
    size_t *room)
{
	struct dgi_gres_item a = { DG_ERR_INVAL, { NULL, 0 } };
	uint64_t hash = 0;
	if (it->part < 0 || (uint64_t)it->part >= c->cfg.partitions || it->key.ptr == NULL ||
	    it->key.len == 0 || dgi_part_of(hash = dgi_key_hash(it->key.ptr, it->key.len),
	    c->cfg.partitions) != (uint32_t)it->part) {
		dgi_gres_item_put(w, &a);
		return;
	}
	uint32_t part = (uint32_t)it->part;
	dgi_part *pt = &c->parts[part];
	dgi_part_lock(pt);
	int st = atomic_load(&pt->state);
	dgi_entry *en = dgi_part_find(pt, hash, it->key.ptr, it->key.len);
	dg_err e = dgi_part_may_serve(c, pt, part, st, en);
	if (e == DG_OK && en != NULL && (en->flags & DGI_ENTRY_PENDING))
		e = DG_ERR_NOT_READY; /* read alone: it waits for the backups */
	if (e == DG_OK) {
		int64_t wall = c->cfg.ttl_ms ? dgi_wall_ms() : 0;
		if (!dgi_entry_live(en, wall))
			e = DG_ERR_NOT_FOUND;
		else if (en->vlen > *room)
			e = DG_ERR_LIMIT; /* read alone: this answer is full */
		else {
			a.val = (dg_bytes){ dgi_entry_val(en), en->vlen };
			*room -= en->vlen;
		}
	}
	a.res = e;
	if (a.res == DG_OK && a.val.ptr == NULL)
		a.val.ptr = (const uint8_t *)"";
	dgi_gres_item_put(w, &a);
	dgi_part_unlock(pt);
}

/* GET_ALL: a batch's keys of this primary, each read as a CACHE_GET at the
 * same topology version would be, answered at once in one GET_ALL_RES —
 * whose values must fit one frame: those past recv_max are left for the
 * reader to read alone (get_all_one: DG_ERR_LIMIT).  Before, 16 values of 1.5 MiB made an
 * answer the transport refused, unsaid, and the reader's get_all timed out
 * (test_get_all_large_values_from_client). */
static void on_get_all(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	dgi_grid *g = ctx;
	const dgi_msg_many *m = in->body;
	dg_cache *c = dgi_grid_cache(g, (uint32_t)m->cache_id);
	dg_reader r;
	uint32_t n = 0;
	dg_err e = dgi_many_open(g->reg, m, 2, &r, &n);
	dg_buf *out = e == DG_OK ? dgi_reply_buf() : NULL;
	if (e == DG_OK && out == NULL)
		e = DG_ERR_NOMEM;
	if (e != DG_OK) {
		dg_tp_reply_error(tp, in, e);
		return;
	}
	dgi_aff *aff = c != NULL ? atomic_load_explicit(&c->aff, memory_order_acquire) : NULL;
	int64_t mine = aff != NULL ? aff->topver : 0;
	/* an unknown cache: not learnt yet (the reader retries); another
	 * topology: as on_get, every key */
	dg_err all = c == NULL ? DG_ERR_NOT_READY : m->topver != 0 && mine != m->topver ?
	    (mine > m->topver ? DG_ERR_REMAP : DG_ERR_NOT_READY) : DG_OK;
	dg_writer w;
	dg_writer_init(&w, g->reg, out);
	dg_write_list_begin(&w, n * 2);
	/* room for values: recv_max less the head and each item's result and
	 * value header (DGI_GRES_ITEM_ROOM) */
	size_t room = dg_tp_recv_max(tp), fixed = 1024 + (size_t)n * DGI_GRES_ITEM_ROOM;
	room = room > fixed ? room - fixed : 0;
	bool bad = false;
	for (uint32_t i = 0; i < n; i++) {
		struct dgi_gall_item it;
		if (!bad && dgi_gall_item_get(&r, &it) != DG_OK)
			bad = true;
		if (bad || all != DG_OK) {
			struct dgi_gres_item a = { bad ? DG_ERR_INVAL : all, { NULL, 0 } };
			dgi_gres_item_put(&w, &a);
		} else {
			get_all_one(c, &it, &w, &room);
		}
	}
	dg_write_end(&w);
	if ((e = dg_writer_finish(&w)) == DG_OK) {
		dgi_msg_many res = { m->cache_id, 0, 0, 0, 0, { out->data, (uint32_t)out->len } };
		e = dg_tp_reply(tp, in, DGI_MSG_GET_ALL_RES, &res);
	}
	if (e != DG_OK) /* (the reader fails at once rather than at its timeout) */
		dg_tp_reply_error(tp, in, e);
	dgi_reply_buf_done(out);
}

void dgi_read_register(dgi_grid *g)
{
	dg_tp_handle(g->tp, DGI_MSG_GET, on_get, g);
	dg_tp_handle(g->tp, DGI_MSG_GET_ALL, on_get_all, g);
}

