/*
 * pstore.c — LMDB persistence of cache entries with group commit
 * (see pstore.h for the on-disk layout and the contract).
 *
 * Queue.  Every mutation (a write's records, a drop, a meta put) is an
 * `op` on the caller's stack: the caller blocks until its op is done, so the
 * op and the caller's records stay valid without a copy, and a write
 * allocates nothing.  Ops queue FIFO under ps_mu.  A caller that finds no
 * committer becomes it: it detaches ops from the head (up to max_batch
 * records, always at least one op), applies them in ONE write transaction
 * with ps_mu released, commits, marks them done and broadcasts.  It repeats
 * until its own op is done, then hands over: clearing ps_committing and the
 * broadcast wake a writer whose op is still queued, which becomes the next
 * committer.  So the queue never stalls, no caller commits for others
 * forever, and only one write transaction exists at a time (MDB_NOTLS: the
 * committer's thread runs the whole transaction).
 *
 * Drops run alone, in steps of at most DROP_STEP_PAGES freed pages (or
 * max_batch records), one transaction each, while the committer keeps the
 * queue: no write interleaves with a drop's steps.
 *
 * Failure.  A failed group transaction is aborted; if it held more than one
 * op, each op is retried alone so a bad op (say, larger than the map) fails
 * only its own caller.
 *
 * Reserve.  An LMDB map filled to its last page cannot commit anything, not
 * even a delete: every commit copies a path of pages and saves the
 * freelist.  So a transaction that stores something (a put or a meta put)
 * and grows the live pages (branch + leaf + overflow of the three trees, as
 * mdb_stat sees them inside the transaction) past the map less a reserve
 * (1/32 of the map, at least 32 pages, at most 32 MiB) fails with
 * MDB_MAP_FULL before committing.  Removals, drops and meta deletes may use
 * the reserve, so a full store can always be emptied and used again.
 *
 * Record formats (pstore.h): every write stores format 2 (the update id
 * after the expiry, marked by DGI_PREC_FORMAT2 in the stored flags); loads
 * read both, so records written before the update id was kept load with
 * the id (0, 0) and are rewritten in format 2 by their next write.
 *
 * Values are written in place with MDB_RESERVE and keys are built on the
 * stack (an LMDB key is at most 511 bytes), so the write path allocates
 * nothing; loads hand out pointers into the map.
 */
#define _POSIX_C_SOURCE 200809L
#include "cache/pstore.h"
#include "transport/transport.h"

#include <errno.h>
#include <lmdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define KEY_HDR 6u              /* be32 cache id | be16 partition */
#define VER_LEN 24u             /* dgi_pver, little-endian */
#define VAL_HDR 32u             /* format 1: dgi_pver | expire_ms i64 LE */
#define VAL_HDR2 48u            /* format 2: ... | op_node u64 LE | op_seq u64 LE */
#define PART_LIMIT 65536u
#define MAX_KEY 511u            /* LMDB's compile-time default maxkeysize */
#define DEFAULT_MAP ((size_t)1 << 30)
#define DEFAULT_BATCH 4096u
#define DROP_STEP_PAGES 1024u   /* most pages one drop transaction frees */
#define RESERVE_MIN 32u         /* pages kept for deletes (see Reserve) */

enum op_kind { OP_WRITE, OP_DROP, OP_META };

typedef struct op {
	struct op *o_next;
	enum op_kind o_kind;
	const dgi_prec *o_recs;    /* OP_WRITE */
	size_t o_n;
	uint32_t o_cache, o_part;  /* OP_DROP; o_part UINT32_MAX: whole cache */
	bool o_more;               /* OP_DROP: the step committed, more to delete */
	const char *o_name;        /* OP_META; o_val NULL deletes */
	const void *o_val;
	size_t o_len;
	uint64_t o_skipped;        /* OP_WRITE: records not applied (older) */
	bool o_stores;             /* stores something (not only deletes) */
	bool o_done;
	int o_rc;                  /* LMDB result of the op's transaction */
} op;

struct dgi_pstore {
	MDB_env *ps_env;
	MDB_dbi ps_main, ps_entries, ps_meta;
	size_t ps_store_limit;     /* live pages a storing txn may reach */
	uint32_t ps_max_batch;
	uint32_t ps_max_key;       /* mdb_env_get_maxkeysize */
	pthread_mutex_t ps_mu;     /* guards the fields below */
	pthread_cond_t ps_cv;      /* ops done, committer handover, close */
	op *ps_head, *ps_tail;     /* queued, not yet taken by a committer */
	bool ps_committing;
	bool ps_closing;
	uint32_t ps_active;        /* calls in progress (close waits for 0) */
	_Atomic int ps_fail_next;  /* test hook: LMDB error for the next txn */
	_Atomic uint64_t ps_commits, ps_records, ps_skipped, ps_failures;
};

/* ---- log: one line per event, stderr ---- */

static void pstore_log(const char *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void pstore_log(const char *err, const char *fmt, ...)
{
	char extra[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(extra, sizeof extra, fmt, ap);
	va_end(ap);
	dgi_log("error", "PSTORE-ERROR", "err=\"%s\" %s", err, extra);
}

static dg_err map_rc(int rc)
{
	if (rc == 0)
		return DG_OK;
	return rc == MDB_MAP_FULL ? DG_ERR_STORAGE_FULL : DG_ERR_STORAGE;
}

/* ---- encodings ---- */

static void put_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static void put_le(uint8_t *p, uint64_t v, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, unsigned n)
{
	uint64_t v = 0;
	for (unsigned i = 0; i < n; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

static void put_ver(uint8_t *p, const dgi_pver *v)
{
	put_le(p, (uint64_t)v->topver, 8);
	put_le(p + 8, v->counter, 8);
	put_le(p + 16, v->order, 4);
	put_le(p + 20, v->flags, 4);
}

static void get_ver(const uint8_t *p, dgi_pver *v)
{
	v->topver = (int64_t)get_le(p, 8);
	v->counter = get_le(p + 8, 8);
	v->order = (uint32_t)get_le(p + 16, 4);
	v->flags = (uint32_t)get_le(p + 20, 4);
}

/* The key prefix of a cache (4 bytes) or of one partition (6 bytes). */
static size_t key_prefix(uint8_t *p, uint32_t cache_id, uint32_t part)
{
	put_be32(p, cache_id);
	if (part == UINT32_MAX)
		return 4;
	p[4] = (uint8_t)(part >> 8);
	p[5] = (uint8_t)part;
	return KEY_HDR;
}

static bool has_prefix(const MDB_val *k, const uint8_t *pre, size_t n)
{
	return k->mv_size >= n && memcmp(k->mv_data, pre, n) == 0;
}

int dgi_pver_cmp(const dgi_pver *a, const dgi_pver *b)
{
	if (a->topver != b->topver)
		return a->topver < b->topver ? -1 : 1;
	if (a->counter != b->counter)
		return a->counter < b->counter ? -1 : 1;
	if (a->order != b->order)
		return a->order < b->order ? -1 : 1;
	return 0;
}

void dgi_pstore_config_init(dgi_pstore_config *cfg)
{
	memset(cfg, 0, sizeof *cfg);
	cfg->map_size = DEFAULT_MAP;
	cfg->max_batch = DEFAULT_BATCH;
}

/* ---- open / close ---- */

static dg_err open_fail(dgi_pstore_config const *cfg, const char *what, int rc)
{
	pstore_log(mdb_strerror(rc), "op=open step=%s dir=\"%s\"", what, cfg->dir);
	return DG_ERR_STORAGE;
}

static dg_err open_env(dgi_pstore *ps, const dgi_pstore_config *cfg)
{
	int rc;
	if (mkdir(cfg->dir, 0700) != 0 && errno != EEXIST)
		return open_fail(cfg, "mkdir", errno);
	if ((rc = mdb_env_create(&ps->ps_env)) != 0)
		return open_fail(cfg, "env_create", rc);
	size_t map = cfg->map_size ? cfg->map_size : DEFAULT_MAP;
	unsigned flags = MDB_NOTLS | (cfg->nosync ? MDB_NOSYNC : 0);
	if ((rc = mdb_env_set_mapsize(ps->ps_env, map)) != 0)
		return open_fail(cfg, "set_mapsize", rc);
	if ((rc = mdb_env_set_maxdbs(ps->ps_env, 2)) != 0)
		return open_fail(cfg, "set_maxdbs", rc);
	if ((rc = mdb_env_open(ps->ps_env, cfg->dir, flags, 0600)) != 0)
		return open_fail(cfg, "env_open", rc);
	int mk = mdb_env_get_maxkeysize(ps->ps_env);
	ps->ps_max_key = mk > 0 && (unsigned)mk < MAX_KEY ? (uint32_t)mk : MAX_KEY;

	MDB_txn *txn;
	if ((rc = mdb_txn_begin(ps->ps_env, NULL, 0, &txn)) != 0)
		return open_fail(cfg, "txn_begin", rc);
	if ((rc = mdb_dbi_open(txn, NULL, 0, &ps->ps_main)) != 0 ||
	    (rc = mdb_dbi_open(txn, "entries", MDB_CREATE, &ps->ps_entries)) != 0 ||
	    (rc = mdb_dbi_open(txn, "meta", MDB_CREATE, &ps->ps_meta)) != 0) {
		mdb_txn_abort(txn);
		return open_fail(cfg, "dbi_open", rc);
	}
	if ((rc = mdb_txn_commit(txn)) != 0)
		return open_fail(cfg, "commit", rc);

	/* LMDB may round the map or keep a larger size of an existing file. */
	MDB_envinfo info;
	MDB_stat st;
	if ((rc = mdb_env_info(ps->ps_env, &info)) != 0 ||
	    (rc = mdb_env_stat(ps->ps_env, &st)) != 0)
		return open_fail(cfg, "env_info", rc);
	size_t pages = info.me_mapsize / st.ms_psize;
	size_t reserve = pages / 32, most = ((size_t)32 << 20) / st.ms_psize;
	reserve = reserve < RESERVE_MIN ? RESERVE_MIN : reserve > most ? most : reserve;
	ps->ps_store_limit = pages > reserve ? pages - reserve : 0;
	return DG_OK;
}

dg_err dgi_pstore_open(const dgi_pstore_config *cfg, dgi_pstore **out)
{
	dg_err err;
	*out = NULL;
	if (cfg == NULL || cfg->dir == NULL || cfg->dir[0] == '\0')
		return DG_ERR_INVAL;
	dgi_pstore *ps = dgi_calloc(1, sizeof *ps);
	if (ps == NULL)
		return DG_ERR_NOMEM;
	ps->ps_max_batch = cfg->max_batch ? cfg->max_batch : DEFAULT_BATCH;
	if (pthread_mutex_init(&ps->ps_mu, NULL) != 0) {
		dgi_free(ps);
		return DG_ERR_NOMEM;
	}
	if (pthread_cond_init(&ps->ps_cv, NULL) != 0) {
		pthread_mutex_destroy(&ps->ps_mu);
		dgi_free(ps);
		return DG_ERR_NOMEM;
	}
	if ((err = open_env(ps, cfg)) != DG_OK) {
		dgi_pstore_close(ps);
		return err;
	}
	*out = ps;
	return DG_OK;
}

void dgi_pstore_close(dgi_pstore *ps)
{
	if (ps == NULL)
		return;
	pthread_mutex_lock(&ps->ps_mu);
	ps->ps_closing = true;
	while (ps->ps_active > 0)
		pthread_cond_wait(&ps->ps_cv, &ps->ps_mu);
	pthread_mutex_unlock(&ps->ps_mu);
	if (ps->ps_env != NULL)
		mdb_env_close(ps->ps_env);
	pthread_cond_destroy(&ps->ps_cv);
	pthread_mutex_destroy(&ps->ps_mu);
	dgi_free(ps);
}

void dgi_pstore_fail_next(dgi_pstore *ps, int mdb_err)
{
	atomic_store(&ps->ps_fail_next, mdb_err);
}

/* Every call holds an "active" reference so close waits for it. */
static bool enter(dgi_pstore *ps)
{
	pthread_mutex_lock(&ps->ps_mu);
	bool ok = !ps->ps_closing;
	if (ok)
		ps->ps_active++;
	pthread_mutex_unlock(&ps->ps_mu);
	return ok;
}

static void leave_locked(dgi_pstore *ps)
{
	if (--ps->ps_active == 0 && ps->ps_closing)
		pthread_cond_broadcast(&ps->ps_cv);
}

static void leave(dgi_pstore *ps)
{
	pthread_mutex_lock(&ps->ps_mu);
	leave_locked(ps);
	pthread_mutex_unlock(&ps->ps_mu);
}

/* ---- applying ops inside a write transaction ---- */

static int apply_rec(dgi_pstore *ps, MDB_txn *txn, const dgi_prec *r, op *o)
{
	uint8_t kb[MAX_KEY];
	key_prefix(kb, r->cache_id, r->part);
	memcpy(kb + KEY_HDR, r->key, r->klen);
	MDB_val k = { KEY_HDR + r->klen, kb }, v;

	int rc = mdb_get(txn, ps->ps_entries, &k, &v);
	bool stored = rc == 0;
	if (rc != 0 && rc != MDB_NOTFOUND)
		return rc;
	/* A stored value too short to hold a version is corrupt: it counts
	 * as older than anything, so a write repairs it. */
	if (stored && v.mv_size >= VAL_HDR) {
		dgi_pver sv;
		get_ver(v.mv_data, &sv);
		int c = dgi_pver_cmp(&sv, &r->ver);
		if (r->val != NULL ? c >= 0 : c > 0) {
			o->o_skipped++;
			return 0;
		}
	}
	if (r->val == NULL)
		return stored ? mdb_del(txn, ps->ps_entries, &k, NULL) : 0;
	v.mv_size = VAL_HDR2 + (size_t)r->vlen;
	v.mv_data = NULL;
	if ((rc = mdb_put(txn, ps->ps_entries, &k, &v, MDB_RESERVE)) != 0)
		return rc;
	uint8_t *p = v.mv_data;
	dgi_pver ver = r->ver;
	ver.flags |= DGI_PREC_FORMAT2;
	put_ver(p, &ver);
	put_le(p + VER_LEN, (uint64_t)r->expire_ms, 8);
	put_le(p + VAL_HDR, r->op_node, 8);
	put_le(p + VAL_HDR + 8, r->op_seq, 8);
	if (r->vlen > 0)
		memcpy(p + VAL_HDR2, r->val, r->vlen);
	return 0;
}

static int live_pages(dgi_pstore *ps, MDB_txn *txn, size_t *out);

/* Deletes the op's range, or a step of it: it stops (o_more) once the
 * transaction freed DROP_STEP_PAGES pages or max_batch records, because
 * LMDB saves a transaction's freed page list as one record of contiguous
 * pages — a whole large range in one go can fail on a nearly full map. */
static int apply_drop(dgi_pstore *ps, MDB_txn *txn, op *o)
{
	uint8_t pre[KEY_HDR];
	size_t n = key_prefix(pre, o->o_cache, o->o_part), before, now, done = 0;
	MDB_cursor *cur;
	int rc = live_pages(ps, txn, &before);
	if (rc != 0 || (rc = mdb_cursor_open(txn, ps->ps_entries, &cur)) != 0)
		return rc;
	for (;;) {
		/* Seek again after each delete: simple, and O(log n) per key. */
		MDB_val k = { n, pre }, v;
		rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
		if (rc == MDB_NOTFOUND || (rc == 0 && !has_prefix(&k, pre, n))) {
			rc = 0;
			break;
		}
		if (rc != 0 || (rc = mdb_cursor_del(cur, 0)) != 0)
			break;
		if (++done % 16 == 0) {
			if ((rc = live_pages(ps, txn, &now)) != 0)
				break;
			if (before - now >= DROP_STEP_PAGES || done >= ps->ps_max_batch) {
				o->o_more = true;
				break;
			}
		}
	}
	mdb_cursor_close(cur);
	return rc;
}

static int apply_meta(dgi_pstore *ps, MDB_txn *txn, const op *o)
{
	MDB_val k = { strlen(o->o_name) + 1, (void *)o->o_name };
	if (o->o_val == NULL) {
		int rc = mdb_del(txn, ps->ps_meta, &k, NULL);
		return rc == MDB_NOTFOUND ? 0 : rc;
	}
	MDB_val v = { o->o_len, (void *)o->o_val };
	return mdb_put(txn, ps->ps_meta, &k, &v, 0);
}

static int apply_op(dgi_pstore *ps, MDB_txn *txn, op *o)
{
	int rc = 0;
	o->o_skipped = 0;
	o->o_more = false;
	switch (o->o_kind) {
	case OP_WRITE:
		for (size_t i = 0; i < o->o_n && rc == 0; i++)
			rc = apply_rec(ps, txn, &o->o_recs[i], o);
		break;
	case OP_DROP:
		rc = apply_drop(ps, txn, o);
		break;
	case OP_META:
		rc = apply_meta(ps, txn, o);
		break;
	}
	return rc;
}

static const char *op_name(const op *o)
{
	return o->o_kind == OP_WRITE ? "write" : o->o_kind == OP_DROP ? "drop" : "meta";
}

/* Pages of the trees as this transaction sees them (2 meta pages aside). */
static int live_pages(dgi_pstore *ps, MDB_txn *txn, size_t *out)
{
	MDB_dbi dbis[3] = { ps->ps_main, ps->ps_entries, ps->ps_meta };
	*out = 0;
	for (int i = 0; i < 3; i++) {
		MDB_stat st;
		int rc = mdb_stat(txn, dbis[i], &st);
		if (rc != 0)
			return rc;
		*out += st.ms_branch_pages + st.ms_leaf_pages + st.ms_overflow_pages;
	}
	return 0;
}

/* One write transaction over the ops first..last (inclusive).  Returns the
 * LMDB result; on failure nothing of it is applied, the failure is logged
 * and counted. */
static int run_txn(dgi_pstore *ps, op *first, op *last)
{
	MDB_txn *txn;
	size_t before = 0, after = 0;
	bool stores = false, reserve = false;
	int rc = mdb_txn_begin(ps->ps_env, NULL, 0, &txn);
	if (rc == 0) {
		rc = live_pages(ps, txn, &before);
		for (op *o = first; rc == 0; o = o->o_next) {
			rc = apply_op(ps, txn, o);
			stores |= o->o_stores;
			if (o == last)
				break;
		}
		if (rc == 0 && stores && (rc = live_pages(ps, txn, &after)) == 0 &&
		    after > before && after > ps->ps_store_limit) {
			rc = MDB_MAP_FULL;   /* keep the reserve for deletes */
			reserve = true;
		}
		int inj = atomic_exchange(&ps->ps_fail_next, 0);
		if (rc == 0 && inj != 0)
			rc = inj;
		if (rc == 0)
			rc = mdb_txn_commit(txn);  /* frees txn, even on error */
		else
			mdb_txn_abort(txn);
	}
	if (rc == 0) {
		atomic_fetch_add_explicit(&ps->ps_commits, 1, memory_order_relaxed);
		for (op *o = first;; o = o->o_next) {
			if (o->o_kind == OP_WRITE) {
				atomic_fetch_add_explicit(&ps->ps_records, o->o_n,
				    memory_order_relaxed);
				atomic_fetch_add_explicit(&ps->ps_skipped, o->o_skipped,
				    memory_order_relaxed);
			}
			if (o == last)
				break;
		}
		return 0;
	}
	atomic_fetch_add_explicit(&ps->ps_failures, 1, memory_order_relaxed);
	size_t nops = 0, nrecs = 0;
	for (op *o = first;; o = o->o_next) {
		nops++;
		nrecs += o->o_kind == OP_WRITE ? o->o_n : 1;
		if (o == last)
			break;
	}
	pstore_log(mdb_strerror(rc), "op=%s ops=%zu records=%zu%s",
	    nops == 1 ? op_name(first) : "group", nops, nrecs,
	    reserve ? " reason=reserve" : "");
	return rc;
}

/* Commits the detached group first..last; sets every op's o_rc. */
static void run_group(dgi_pstore *ps, op *first, op *last)
{
	int rc;
	if (first->o_kind == OP_DROP) {   /* always alone, in steps */
		while ((rc = run_txn(ps, first, first)) == 0 && first->o_more)
			;
		first->o_rc = rc;
		return;
	}
	rc = run_txn(ps, first, last);
	if (rc == 0 || first == last) {
		for (op *o = first;; o = o->o_next) {
			o->o_rc = rc;
			if (o == last)
				break;
		}
		return;
	}
	for (op *o = first;; o = o->o_next) {
		o->o_rc = run_txn(ps, o, o);
		if (o == last)
			break;
	}
}

/* Queues o, waits until it is done (committing it and others meanwhile if
 * no one else does).  Returns the op's result. */
static dg_err submit(dgi_pstore *ps, op *o)
{
	pthread_mutex_lock(&ps->ps_mu);
	if (ps->ps_closing) {
		pthread_mutex_unlock(&ps->ps_mu);
		return DG_ERR_CLOSED;
	}
	ps->ps_active++;
	o->o_next = NULL;
	o->o_done = false;
	if (ps->ps_tail != NULL)
		ps->ps_tail->o_next = o;
	else
		ps->ps_head = o;
	ps->ps_tail = o;

	while (!o->o_done) {
		if (ps->ps_committing) {
			pthread_cond_wait(&ps->ps_cv, &ps->ps_mu);
			continue;
		}
		/* Become the committer until our own op is done; o is queued
		 * or in a group we run, so the queue is not empty here. */
		ps->ps_committing = true;
		while (!o->o_done) {
			op *first = ps->ps_head, *last = first;
			size_t recs = last->o_kind == OP_WRITE ? last->o_n : 1;
			while (first->o_kind != OP_DROP && last->o_next != NULL) {
				op *nx = last->o_next;
				size_t r = nx->o_kind == OP_WRITE ? nx->o_n : 1;
				if (nx->o_kind == OP_DROP || recs + r > ps->ps_max_batch)
					break;
				recs += r;
				last = nx;
			}
			ps->ps_head = last->o_next;
			if (ps->ps_head == NULL)
				ps->ps_tail = NULL;
			pthread_mutex_unlock(&ps->ps_mu);

			run_group(ps, first, last);

			pthread_mutex_lock(&ps->ps_mu);
			for (op *g = first;; ) {
				op *nx = g->o_next;  /* read before its owner may return */
				bool end = g == last;
				g->o_done = true;
				if (end)
					break;
				g = nx;
			}
			pthread_cond_broadcast(&ps->ps_cv);
		}
		/* Hand over: the broadcast above wakes a queued writer, which
		 * sees no committer once we release the mutex. */
		ps->ps_committing = false;
	}
	dg_err err = map_rc(o->o_rc);
	leave_locked(ps);
	pthread_mutex_unlock(&ps->ps_mu);
	return err;
}

/* ---- public mutations ---- */

dg_err dgi_pstore_write(dgi_pstore *ps, const dgi_prec *recs, size_t n)
{
	if (ps == NULL || (recs == NULL && n > 0))
		return DG_ERR_INVAL;
	for (size_t i = 0; i < n; i++) {
		const dgi_prec *r = &recs[i];
		if (r->part >= PART_LIMIT || r->key == NULL || r->klen == 0 ||
		    r->klen > ps->ps_max_key - KEY_HDR || (r->ver.flags & DGI_PREC_FORMAT2))
			return DG_ERR_INVAL;
	}
	if (n == 0)
		return DG_OK;
	op o = { .o_kind = OP_WRITE, .o_recs = recs, .o_n = n };
	for (size_t i = 0; i < n && !o.o_stores; i++)
		o.o_stores = recs[i].val != NULL;
	return submit(ps, &o);
}

dg_err dgi_pstore_drop(dgi_pstore *ps, uint32_t cache_id, uint32_t part)
{
	if (ps == NULL || (part >= PART_LIMIT && part != UINT32_MAX))
		return DG_ERR_INVAL;
	op o = { .o_kind = OP_DROP, .o_cache = cache_id, .o_part = part };
	return submit(ps, &o);
}

dg_err dgi_pstore_meta_put(dgi_pstore *ps, const char *name,
    const void *val, size_t len)
{
	if (ps == NULL || name == NULL || name[0] == '\0' ||
	    strlen(name) + 1 > ps->ps_max_key)
		return DG_ERR_INVAL;
	op o = { .o_kind = OP_META, .o_name = name, .o_val = val, .o_len = len,
		.o_stores = val != NULL };
	return submit(ps, &o);
}

/* ---- reads ---- */

static dg_err read_begin(dgi_pstore *ps, MDB_dbi dbi, const char *what,
    MDB_txn **txn, MDB_cursor **cur)
{
	int rc = mdb_txn_begin(ps->ps_env, NULL, MDB_RDONLY, txn);
	if (rc == 0 && (rc = mdb_cursor_open(*txn, dbi, cur)) != 0)
		mdb_txn_abort(*txn);
	if (rc != 0) {
		pstore_log(mdb_strerror(rc), "op=%s", what);
		return map_rc(rc);
	}
	return DG_OK;
}

static void read_end(MDB_txn *txn, MDB_cursor *cur)
{
	mdb_cursor_close(cur);
	mdb_txn_abort(txn);
}

static dg_err corrupt(const char *what, const MDB_val *k, const MDB_val *v)
{
	pstore_log("corrupt record", "op=%s klen=%zu vlen=%zu", what,
	    k->mv_size, v->mv_size);
	return DG_ERR_STORAGE;
}

dg_err dgi_pstore_load(dgi_pstore *ps, uint32_t cache_id,
    dg_err (*fn)(void *ctx, const dgi_prec *rec), void *ctx)
{
	if (ps == NULL || fn == NULL)
		return DG_ERR_INVAL;
	if (!enter(ps))
		return DG_ERR_CLOSED;
	MDB_txn *txn;
	MDB_cursor *cur;
	dg_err err = read_begin(ps, ps->ps_entries, "load", &txn, &cur);
	if (err != DG_OK) {
		leave(ps);
		return err;
	}
	uint8_t pre[4];
	put_be32(pre, cache_id);
	MDB_val k = { sizeof pre, pre }, v;
	int rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
	while (rc == 0 && has_prefix(&k, pre, sizeof pre)) {
		if (k.mv_size <= KEY_HDR || v.mv_size < VAL_HDR) {
			err = corrupt("load", &k, &v);
			break;
		}
		const uint8_t *kp = k.mv_data, *vp = v.mv_data;
		dgi_prec r = {
			.cache_id = cache_id,
			.part = (uint32_t)kp[4] << 8 | kp[5],
			.key = kp + KEY_HDR,
			.klen = (uint32_t)(k.mv_size - KEY_HDR),
			.expire_ms = (int64_t)get_le(vp + VER_LEN, 8),
		};
		get_ver(vp, &r.ver);
		size_t hdr = VAL_HDR;   /* format 1: no update id, (0, 0) */
		if (r.ver.flags & DGI_PREC_FORMAT2) {
			if (v.mv_size < VAL_HDR2) {
				err = corrupt("load", &k, &v);
				break;
			}
			r.ver.flags &= ~DGI_PREC_FORMAT2;
			r.op_node = get_le(vp + VAL_HDR, 8);
			r.op_seq = get_le(vp + VAL_HDR + 8, 8);
			hdr = VAL_HDR2;
		}
		r.val = vp + hdr;
		r.vlen = (uint32_t)(v.mv_size - hdr);
		if ((err = fn(ctx, &r)) != DG_OK)
			break;
		rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
	}
	if (err == DG_OK && rc != 0 && rc != MDB_NOTFOUND) {
		pstore_log(mdb_strerror(rc), "op=load");
		err = map_rc(rc);
	}
	read_end(txn, cur);
	leave(ps);
	return err;
}

dg_err dgi_pstore_meta_each(dgi_pstore *ps,
    dg_err (*fn)(void *ctx, const char *name, const uint8_t *val, size_t len),
    void *ctx)
{
	if (ps == NULL || fn == NULL)
		return DG_ERR_INVAL;
	if (!enter(ps))
		return DG_ERR_CLOSED;
	MDB_txn *txn;
	MDB_cursor *cur;
	dg_err err = read_begin(ps, ps->ps_meta, "meta_each", &txn, &cur);
	if (err != DG_OK) {
		leave(ps);
		return err;
	}
	MDB_val k, v;
	int rc;
	while ((rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) == 0) {
		const char *name = k.mv_data;
		/* Names are stored with their NUL, so they are handed out in place. */
		if (k.mv_size < 2 || name[k.mv_size - 1] != '\0' ||
		    memchr(name, '\0', k.mv_size - 1) != NULL) {
			err = corrupt("meta_each", &k, &v);
			break;
		}
		if ((err = fn(ctx, name, v.mv_data, v.mv_size)) != DG_OK)
			break;
	}
	if (err == DG_OK && rc != MDB_NOTFOUND) {
		pstore_log(mdb_strerror(rc), "op=meta_each");
		err = map_rc(rc);
	}
	read_end(txn, cur);
	leave(ps);
	return err;
}

void dgi_pstore_get_stats(dgi_pstore *ps, dgi_pstore_stats *out)
{
	memset(out, 0, sizeof *out);
	if (ps == NULL)
		return;
	out->commits = atomic_load_explicit(&ps->ps_commits, memory_order_relaxed);
	out->records = atomic_load_explicit(&ps->ps_records, memory_order_relaxed);
	out->skipped_older = atomic_load_explicit(&ps->ps_skipped, memory_order_relaxed);
	out->failures = atomic_load_explicit(&ps->ps_failures, memory_order_relaxed);
	MDB_envinfo info;
	MDB_stat st;
	if (mdb_env_info(ps->ps_env, &info) == 0 && mdb_env_stat(ps->ps_env, &st) == 0) {
		out->map_size = info.me_mapsize;
		out->map_used = ((uint64_t)info.me_last_pgno + 1) * st.ms_psize;
	}
}
