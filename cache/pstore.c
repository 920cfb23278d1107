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
 * Record formats (pstore.h): every write stores format 3 (format 2, the
 * update id after the expiry, plus a trailing CRC-32C; the value sealed
 * with a master key); loads read all three, so records written before the
 * update id was kept load with the id (0, 0), and older records are
 * rewritten in format 3 by their next write.
 *
 * Values are written in place with MDB_RESERVE and keys are built on the
 * stack (an LMDB key is at most 511 bytes), so the write path allocates
 * nothing; loads hand out pointers into the map.
 */
#define _POSIX_C_SOURCE 200809L
#include "cache/pstore.h"
#include "cache/cache_int.h"
#include "cache/pstore_check.h"
#include "cache/pcrypt.h"
#include "marshal/crc32c.h"
#include "transport/transport.h"

#include <errno.h>
#include <signal.h>
#include <lmdb.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>

#define KEY_HDR 6u              /* be32 cache id | be16 partition */
#define VER_LEN 24u             /* dgi_pver, little-endian */
#define VAL_HDR 32u             /* format 1: dgi_pver | expire_ms i64 LE */
#define VAL_HDR2 48u            /* format 2: ... | op_node u64 LE | op_seq u64 LE */
#define CRC_LEN 4u              /* format 3: ... value | CRC-32C u32 LE */
#define FORMAT_KEY "dg-record-format" /* in the main DB: every record has a CRC */
#define PART_LIMIT 65536u
#define MAX_KEY 511u            /* LMDB's compile-time default maxkeysize */
#define DEFAULT_MAP ((size_t)1 << 30)
#define DEFAULT_BATCH 4096u
#define DROP_STEP_PAGES 1024u   /* most pages one drop transaction frees */
#define RESERVE_MIN 32u         /* pages kept for deletes (see Reserve) */

enum op_kind { OP_WRITE, OP_DROP, OP_META, OP_KEY, OP_REKEY };
#define RC_BADKEY (-99999)      /* not LMDB's: a data key the master key
                                   does not open (wrong master key) */
#define RC_NOKEY (-99998)       /* a write to a cache whose data key was
                                   not made first (dgi_pstore_use_key) */
#define MAX_DKEYS 1024          /* data keys known at once (caches) */
#define DKEY_MAGIC "DGK1"
#define DKEY_LEN (4u + 8u + DGI_GCM_NONCE + DGI_GCM_KEY + DGI_GCM_TAG)

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
	uint8_t o_key[DGI_GCM_KEY];/* OP_KEY: the data key found or made;
	                              OP_REKEY: the new master key */
	bool o_stores;             /* stores something (not only deletes) */
	bool o_done;
	int o_rc;                  /* LMDB result of the op's transaction */
} op;

struct dgi_pstore {
	MDB_env *ps_env;
	char ps_dir[4096];
	bool ps_crc_only;          /* the store was made with CRCs: a record
	                              without one is damage */
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
	/* encryption at rest: the master key wraps one data key per cache
	 * ("dkey:%08x" in meta); ps_klock guards the four below */
	pthread_rwlock_t ps_klock;
	bool ps_has_master;
	uint8_t ps_master[DGI_GCM_KEY];
	uint32_t ps_nkeys, ps_key_ids[MAX_DKEYS];
	uint8_t (*ps_keys)[DGI_GCM_KEY];
	uint32_t ps_salt;          /* nonce: salt ‖ counter, both random at open */
	_Atomic uint64_t ps_nonce_ctr;
	_Atomic uint64_t ps_commits, ps_records, ps_skipped, ps_failures;
	struct dgi_lograte ps_lr_full; /* PSTORE-ERROR of a full map: each 10 s */
};

static dg_err damaged(const dgi_pstore *ps, const char *what, const char *why,
    const MDB_val *k, const char *name);
static const char *check_rec(const dgi_pstore *ps, const MDB_val *k, const MDB_val *v,
    dgi_prec *r);
static const char *decrypt_rec(dgi_pstore *ps, const MDB_val *k, const MDB_val *v,
    dgi_prec *r, dg_buf *buf);
static bool key_lookup(dgi_pstore *ps, uint32_t id, uint8_t out[DGI_GCM_KEY]);
static void key_remember(dgi_pstore *ps, uint32_t id, const uint8_t k[DGI_GCM_KEY]);
static bool dkey_unwrap(const uint8_t master[DGI_GCM_KEY], const char *name,
    const uint8_t *v, size_t len, uint8_t dk[DGI_GCM_KEY]);
static const uint8_t *meta_value(const dgi_pstore *ps, const MDB_val *k, const MDB_val *v,
    size_t *len);
static const char *meta_check(const dgi_pstore *ps, const MDB_val *k, const MDB_val *v);

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
	if (rc == RC_BADKEY)
		return DG_ERR_AUTH;
	if (rc == RC_NOKEY)
		return DG_ERR_STATE;
	return rc == MDB_MAP_FULL || rc == ENOSPC ? DG_ERR_STORAGE_FULL : DG_ERR_STORAGE;
}

/* LMDB reports a short write as EIO: on a file system with (almost) no
 * space left that is ENOSPC, and the log should say so. */
static int disk_rc(const dgi_pstore *ps, int rc)
{
	struct statvfs vs;
	if ((rc == EIO || rc == ENOSPC) && statvfs(ps->ps_dir, &vs) == 0 &&
	    (uint64_t)vs.f_bavail * vs.f_frsize < ((uint64_t)1 << 20))
		return ENOSPC;
	return rc;
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
	return dgi_pver_order(a, b);
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

/* A store without records is (re)made with CRCs: FORMAT_KEY in the main
 * DB says every record and metadata value of it carries one.  A store
 * with records and no marker was written by an older build: its records
 * are checked where they carry a CRC. */
static int format_marker(dgi_pstore *ps, MDB_txn *txn)
{
	MDB_val k = { sizeof(FORMAT_KEY) - 1, (void *)FORMAT_KEY }, v;
	int rc = mdb_get(txn, ps->ps_main, &k, &v);
	if (rc == 0) {
		ps->ps_crc_only = v.mv_size == 4 && get_le(v.mv_data, 4) >= 3;
		return 0;
	}
	if (rc != MDB_NOTFOUND)
		return rc;
	MDB_stat se, sm;
	if ((rc = mdb_stat(txn, ps->ps_entries, &se)) != 0 ||
	    (rc = mdb_stat(txn, ps->ps_meta, &sm)) != 0)
		return rc;
	if (se.ms_entries != 0 || sm.ms_entries != 0)
		return 0;
	uint8_t three[4];
	put_le(three, 3, 4);
	v.mv_size = 4;
	v.mv_data = three;
	if ((rc = mdb_put(txn, ps->ps_main, &k, &v, 0)) == 0)
		ps->ps_crc_only = true;
	return rc;
}

/* Opens the environment; fresh: there was no file, the databases are
 * made (a store that had a file has both: one missing is damage — a
 * damaged name in the main tree made LMDB create a new, empty "entries"
 * in its place, and the node started without its records). */
static dg_err open_env(dgi_pstore *ps, const dgi_pstore_config *cfg, bool fresh)
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
	unsigned create = fresh ? MDB_CREATE : 0;
	if ((rc = mdb_dbi_open(txn, NULL, 0, &ps->ps_main)) != 0 ||
	    (rc = mdb_dbi_open(txn, "entries", create, &ps->ps_entries)) != 0 ||
	    (rc = mdb_dbi_open(txn, "meta", create, &ps->ps_meta)) != 0 ||
	    (rc = format_marker(ps, txn)) != 0) {
		mdb_txn_abort(txn);
		if (rc == MDB_NOTFOUND || rc == MDB_INCOMPATIBLE || rc == MDB_CORRUPTED)
			return damaged(ps, "open", rc == MDB_NOTFOUND ? "the entries or metadata "
			    "database is missing from the main tree" : mdb_strerror(rc), NULL, NULL);
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

/* ---- the check at open (pstore_check.h) ---- */


#define SCAN_NAMES 256

struct scan {
	dgi_pstore *ps;
	dg_err err;
	dg_buf plain;
	MDB_txn *txn;                  /* open while scanning: a fault leaves */
	MDB_cursor *cur;               /* them to verify() to free */
	uint32_t ids[SCAN_NAMES];      /* caches named in the metadata */
	char names[SCAN_NAMES][DG_CACHE_NAME_MAX + 1];
	unsigned nnames;
};

static const char *scan_name(const struct scan *sc, const MDB_val *k)
{
	const uint8_t *p = k->mv_data;
	uint32_t id = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
	for (unsigned i = 0; i < sc->nnames; i++)
		if (sc->ids[i] == id)
			return sc->names[i];
	return NULL;
}

/* Reads every metadata value and record once: each must check, the keys
 * must come in strictly increasing order and as many as the tree counts
 * (a damaged branch page can hide records, or show some twice). */
/* A data key met by the scan at open: unwrapped with the master key and
 * remembered; a store with data keys and no master key, or a master key
 * that opens none of them, is refused (STORAGE-KEY, DG_ERR_AUTH). */
static dg_err data_key_at_open(dgi_pstore *ps, const MDB_val *k, const MDB_val *v)
{
	char name[32];
	snprintf(name, sizeof(name), "%.*s", (int)(k->mv_size - 1), (const char *)k->mv_data);
	unsigned id;
	size_t len;
	const uint8_t *p = meta_value(ps, k, v, &len);
	uint8_t dk[DGI_GCM_KEY], mine[8];
	if (!ps->ps_has_master) {
		dgi_log("error", "STORAGE-KEY", "dir=\"%s\" why=\"the store is encrypted (it holds "
		    "data keys) and this node has no encryption key file\"", ps->ps_dir);
		return DG_ERR_AUTH;
	}
	if (sscanf(name, "dkey:%8x", &id) != 1 || p == NULL || len != DKEY_LEN)
		return damaged(ps, "open", "a malformed data key", NULL, NULL);
	if (!dkey_unwrap(ps->ps_master, name, p, len, dk)) {
		char have[17], want[17];
		dgi_key_id(ps->ps_master, mine);
		for (int i = 0; i < 8; i++) {
			snprintf(have + 2 * i, 3, "%02x", mine[i]);
			snprintf(want + 2 * i, 3, "%02x", p[4 + i]);
		}
		dgi_log("error", "STORAGE-KEY", "dir=\"%s\" key=%s key_id=%s wrapped_by=%s "
		    "why=\"the encryption key file's key does not open this data key: the wrong "
		    "master key (a rotation not finished on this node?)\"", ps->ps_dir, name, have,
		    want);
		return DG_ERR_AUTH;
	}
	key_remember(ps, (uint32_t)id, dk);
	memset(dk, 0, sizeof(dk));
	return DG_OK;
}

static const char *lmdb_why(int rc, char *buf, size_t n)
{
	snprintf(buf, n, "LMDB error %d: %s", rc, mdb_strerror(rc));
	return buf;
}

static int scan_all(void *arg)
{
	struct scan *sc = arg;
	char why[200];
	dgi_pstore *ps = sc->ps;
	MDB_txn *txn;
	MDB_cursor *cur;
	MDB_stat st;
	MDB_val k, v, prev = { 0, NULL };
	uint64_t n = 0;
	int rc;
	if ((rc = mdb_txn_begin(ps->ps_env, NULL, MDB_RDONLY, &txn)) != 0) {
		sc->err = damaged(ps, "open", lmdb_why(rc, why, sizeof(why)), NULL, NULL);
		return 0;
	}
	sc->txn = txn;
	MDB_dbi dbis[2] = { ps->ps_meta, ps->ps_entries };
	for (int d = 0; d < 2 && sc->err == DG_OK; d++) {
		const char *what = d == 0 ? "metadata" : "entries";
		if ((rc = mdb_stat(txn, dbis[d], &st)) != 0 ||
		    (rc = mdb_cursor_open(txn, dbis[d], &cur)) != 0) {
			sc->err = damaged(ps, "open", lmdb_why(rc, why, sizeof(why)), NULL, NULL);
			break;
		}
		sc->cur = cur;
		n = 0;
		prev.mv_data = NULL;
		while ((rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) == 0) {
			n++;
			dgi_prec r;
			const char *bad = d == 0 ? meta_check(ps, &k, &v) : check_rec(ps, &k, &v, &r);
			if (bad == NULL && d == 0 && strncmp(k.mv_data, "dkey:", 5) == 0 &&
			    (sc->err = data_key_at_open(ps, &k, &v)) != DG_OK)
				break;
			if (bad == NULL && d == 1)
				bad = decrypt_rec(ps, &k, &v, &r, &sc->plain);
			if (bad == NULL && prev.mv_data != NULL &&
			    mdb_cmp(txn, dbis[d], &prev, &k) >= 0)
				bad = "keys out of order";
			if (bad != NULL) {
				sc->err = damaged(ps, "open", bad, d == 0 ? NULL : &k,
				    d == 0 ? NULL : scan_name(sc, &k));
				break;
			}
			prev = k;
			const char *name = k.mv_data;
			if (d == 0 && strncmp(name, "cache:", 6) == 0 && sc->nnames < SCAN_NAMES &&
			    strlen(name + 6) <= DG_CACHE_NAME_MAX) {
				sc->ids[sc->nnames] = dgi_cache_id(name + 6);
				strcpy(sc->names[sc->nnames++], name + 6);
			}
		}
		mdb_cursor_close(cur);
		sc->cur = NULL;
		if (sc->err == DG_OK && rc != MDB_NOTFOUND)
			sc->err = damaged(ps, "open", lmdb_why(rc, why, sizeof(why)), NULL, NULL);
		else if (sc->err == DG_OK && n != st.ms_entries) {
			snprintf(why, sizeof(why), "the %s tree counts %llu records, %llu were read",
			    what, (unsigned long long)st.ms_entries, (unsigned long long)n);
			sc->err = damaged(ps, "open", why, NULL, NULL);
		}
	}
	mdb_txn_abort(txn);
	sc->txn = NULL;
	return 0;
}

static dg_err verify(dgi_pstore *ps)
{
	struct scan *sc = dgi_calloc(1, sizeof(*sc));
	if (sc == NULL)
		return DG_ERR_NOMEM;
	sc->ps = ps;
	dg_buf_init(&sc->plain);
	int r = dgi_pstore_guarded(scan_all, sc);
	/* cut off by a fault: the cursor and the read transaction it left are
	 * freed here (their memory and the reader slot; neither touches the
	 * damaged map) */
	if (sc->cur != NULL)
		mdb_cursor_close(sc->cur);
	if (sc->txn != NULL)
		mdb_txn_abort(sc->txn);
	dg_err err = sc->err;
	dg_buf_free(&sc->plain);
	dgi_free(sc);
	if (r < 0)
		return damaged(ps, "open", r == -SIGBUS ? "reading the file faulted (SIGBUS): a "
		    "page number points past its end" : "reading the file faulted (SIGSEGV): "
		    "damaged pages", NULL, NULL);
	return err;
}

/* DIR/data.mdb goes to DIR/data.mdb.damaged-<UTC time>; lock.mdb is
 * removed (it holds nothing durable). */
static dg_err move_aside(const char *dir)
{
	char from[4200], to[4300], lock[4200], ts[32];
	time_t now = time(NULL);
	struct tm tm;
	gmtime_r(&now, &tm);
	strftime(ts, sizeof(ts), "%Y%m%dT%H%M%SZ", &tm);
	snprintf(from, sizeof(from), "%s/data.mdb", dir);
	snprintf(to, sizeof(to), "%s/data.mdb.damaged-%s", dir, ts);
	snprintf(lock, sizeof(lock), "%s/lock.mdb", dir);
	if (rename(from, to) != 0) {
		dgi_log("error", "STORAGE-MOVE-ASIDE", "from=\"%s\" to=\"%s\" err=\"%s\"", from, to,
		    strerror(errno));
		return DG_ERR_STORAGE;
	}
	(void)unlink(lock);
	dgi_log("warn", "STORAGE-MOVED-ASIDE", "from=\"%s\" to=\"%s\" why=\"the store was "
	    "damaged (--storage-recover): this node starts empty and fetches its partitions "
	    "from their backups\"", from, to);
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
	pthread_rwlock_init(&ps->ps_klock, NULL);
	uint64_t ctr;
	if ((ps->ps_keys = dgi_calloc(MAX_DKEYS, DGI_GCM_KEY)) == NULL ||
	    RAND_bytes((uint8_t *)&ps->ps_salt, sizeof(ps->ps_salt)) != 1 ||
	    RAND_bytes((uint8_t *)&ctr, sizeof(ctr)) != 1) {
		dgi_free(ps->ps_keys);
		dgi_free(ps);
		return DG_ERR_NOMEM;
	}
	atomic_init(&ps->ps_nonce_ctr, ctr);
	if (cfg->master_key != NULL) {
		ps->ps_has_master = true;
		memcpy(ps->ps_master, cfg->master_key, DGI_GCM_KEY);
	}
	if (pthread_mutex_init(&ps->ps_mu, NULL) != 0) {
		dgi_free(ps);
		return DG_ERR_NOMEM;
	}
	if (pthread_cond_init(&ps->ps_cv, NULL) != 0) {
		pthread_mutex_destroy(&ps->ps_mu);
		dgi_free(ps);
		return DG_ERR_NOMEM;
	}
	snprintf(ps->ps_dir, sizeof(ps->ps_dir), "%s", cfg->dir);
	char why[512];
	int pre = dgi_pstore_precheck(cfg->dir, why, sizeof(why));
	err = pre < 0 ? damaged(ps, "open", why, NULL, NULL) : open_env(ps, cfg, pre == 1);
	if (err == DG_OK)
		err = verify(ps);
	if (err == DG_ERR_STORAGE_DAMAGED && cfg->recover) {
		/* what the node held comes back from the backups */
		if (ps->ps_env != NULL)
			mdb_env_close(ps->ps_env);
		ps->ps_env = NULL;
		if ((err = move_aside(cfg->dir)) == DG_OK)
			err = open_env(ps, cfg, true);
	} else if (err == DG_ERR_STORAGE_DAMAGED) {
		dgi_log("error", "STORAGE-REFUSED", "dir=\"%s\" why=\"the store is damaged: this "
		    "node does not start on it\" fix=\"start it again with --storage-recover "
		    "(dg_node_config.storage_recover): the damaged file is moved aside to "
		    "data.mdb.damaged-TIME in the same directory and the node fetches its "
		    "partitions from their backups (without backups, what only this node held "
		    "is lost)\"", cfg->dir);
	}
	if (err != DG_OK) {
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
	pthread_rwlock_destroy(&ps->ps_klock);
	memset(ps->ps_master, 0, sizeof(ps->ps_master));
	if (ps->ps_keys != NULL)
		memset(ps->ps_keys, 0, (size_t)MAX_DKEYS * DGI_GCM_KEY);
	dgi_free(ps->ps_keys);
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

/* The CRC-32C of a format-3 record: its whole LMDB key, then its value
 * without the CRC (n bytes). */
static uint32_t record_crc(const MDB_val *k, const uint8_t *v, size_t n)
{
	return dgi_crc32c(dgi_crc32c(0, k->mv_data, k->mv_size), v, n);
}

/* Checks one stored record and decodes it into *r (pointers into the
 * map).  NULL when fine, else what is wrong with it. */
static const char *check_rec(const dgi_pstore *ps, const MDB_val *k, const MDB_val *v,
    dgi_prec *r)
{
	if (k->mv_size <= KEY_HDR)
		return "key without bytes after its prefix";
	if (v->mv_size < VAL_HDR)
		return "value shorter than its header";
	const uint8_t *kp = k->mv_data, *vp = v->mv_data;
	memset(r, 0, sizeof(*r));
	r->cache_id = (uint32_t)kp[0] << 24 | (uint32_t)kp[1] << 16 | (uint32_t)kp[2] << 8 | kp[3];
	r->part = (uint32_t)kp[4] << 8 | kp[5];
	r->key = kp + KEY_HDR;
	r->klen = (uint32_t)(k->mv_size - KEY_HDR);
	r->expire_ms = (int64_t)get_le(vp + VER_LEN, 8);
	get_ver(vp, &r->ver);
	size_t hdr = VAL_HDR, end = v->mv_size;   /* format 1: no update id */
	if (r->ver.flags & DGI_PREC_CRC) {
		if (end < VAL_HDR2 + CRC_LEN || !(r->ver.flags & DGI_PREC_FORMAT2))
			return "value shorter than its header and checksum";
		end -= CRC_LEN;
		if (get_le(vp + end, 4) != record_crc(k, vp, end))
			return "checksum mismatch";
	} else if (ps->ps_crc_only) {
		return "record without a checksum in a store made with them";
	}
	if (r->ver.flags & DGI_PREC_FORMAT2) {
		if (end < VAL_HDR2)
			return "value shorter than its header";
		r->op_node = get_le(vp + VAL_HDR, 8);
		r->op_seq = get_le(vp + VAL_HDR + 8, 8);
		hdr = VAL_HDR2;
	}
	r->ver.flags &= ~(DGI_PREC_FORMAT2 | DGI_PREC_CRC);
	r->val = vp + hdr;
	r->vlen = (uint32_t)(end - hdr);
	return NULL;
}

/* An encrypted record's value (r as check_rec left it: DGI_PREC_ENC set)
 * decrypted into *buf: r then points there, the flag gone.  NULL when
 * fine (or not encrypted), else what is wrong. */
static const char *decrypt_rec(dgi_pstore *ps, const MDB_val *k, const MDB_val *v,
    dgi_prec *r, dg_buf *buf)
{
	if (!(r->ver.flags & DGI_PREC_ENC))
		return NULL;
	uint8_t dk[DGI_GCM_KEY];
	if (!key_lookup(ps, r->cache_id, dk))
		return ps->ps_has_master ? "an encrypted record whose cache has no data key" :
		    "an encrypted record, and no encryption key file";
	if (r->vlen < DGI_GCM_NONCE + DGI_GCM_TAG)
		return "an encrypted value shorter than its nonce and tag";
	uint32_t n = r->vlen - DGI_GCM_NONCE - DGI_GCM_TAG;
	buf->len = 0;
	if (dg_buf_reserve(buf, n + 1) != DG_OK)
		return "out of memory";
	bool ok = dgi_gcm_open(dk, r->val, k->mv_data, k->mv_size, v->mv_data, VAL_HDR2,
	    r->val + DGI_GCM_NONCE, n, buf->data);
	memset(dk, 0, sizeof(dk));
	if (!ok)
		return "the authentication tag does not match: tampered with, or moved from "
		    "another record";
	r->val = buf->data;
	r->vlen = n;
	r->ver.flags &= ~DGI_PREC_ENC;
	return NULL;
}

/* Checks a meta record: NULL when fine, else what is wrong. */
static const char *meta_check(const dgi_pstore *ps, const MDB_val *k, const MDB_val *v)
{
	const char *name = k->mv_data;
	/* names are stored with their NUL, so they are handed out in place */
	if (k->mv_size < 2 || name[k->mv_size - 1] != '\0' ||
	    memchr(name, '\0', k->mv_size - 1) != NULL)
		return "a metadata name that is not a string";
	if (!ps->ps_crc_only)
		return NULL;
	if (v->mv_size < CRC_LEN)
		return "metadata shorter than its checksum";
	size_t n = v->mv_size - CRC_LEN;
	if (get_le((const uint8_t *)v->mv_data + n, 4) != record_crc(k, v->mv_data, n))
		return "metadata checksum mismatch";
	return NULL;
}

/* A key for the log: printable ASCII as it is, else hex; at most 64
 * bytes of it. */
static void key_text(const uint8_t *p, size_t n, char *out, size_t cap)
{
	bool text = true;
	for (size_t i = 0; i < n && text; i++)
		text = p[i] >= 0x20 && p[i] < 0x7f && p[i] != '"' && p[i] != '\\';
	size_t o = 0, m = n > 64 ? 64 : n;
	for (size_t i = 0; i < m && o + 3 < cap; i++)
		o += (size_t)snprintf(out + o, cap - o, text ? "%c" : "%02x", p[i]);
	if (n > m && o + 4 < cap)
		o += (size_t)snprintf(out + o, cap - o, "...");
	out[o < cap ? o : cap - 1] = 0;
}

/* ---- encryption at rest ---- */

/* The data key of cache id, if known: true and *out. */
static bool key_lookup(dgi_pstore *ps, uint32_t id, uint8_t out[DGI_GCM_KEY])
{
	bool found = false;
	pthread_rwlock_rdlock(&ps->ps_klock);
	for (uint32_t i = 0; i < ps->ps_nkeys && !found; i++)
		if (ps->ps_key_ids[i] == id) {
			memcpy(out, ps->ps_keys[i], DGI_GCM_KEY);
			found = true;
		}
	pthread_rwlock_unlock(&ps->ps_klock);
	return found;
}

static void key_remember(dgi_pstore *ps, uint32_t id, const uint8_t k[DGI_GCM_KEY])
{
	pthread_rwlock_wrlock(&ps->ps_klock);
	uint32_t i = 0;
	while (i < ps->ps_nkeys && ps->ps_key_ids[i] != id)
		i++;
	if (i < MAX_DKEYS) {
		ps->ps_key_ids[i] = id;
		memcpy(ps->ps_keys[i], k, DGI_GCM_KEY);
		if (i == ps->ps_nkeys)
			ps->ps_nkeys++;
	}
	pthread_rwlock_unlock(&ps->ps_klock);
}

static void dkey_name(uint32_t id, char out[16])
{
	snprintf(out, 16, "dkey:%08x", id);
}

/* A wrapped data key: "DGK1" ‖ master key id (8) ‖ nonce ‖ key sealed
 * under the master key with the meta name as associated data. */
static bool dkey_wrap(const uint8_t master[DGI_GCM_KEY], const char *name,
    const uint8_t dk[DGI_GCM_KEY], uint8_t out[DKEY_LEN])
{
	memcpy(out, DKEY_MAGIC, 4);
	dgi_key_id(master, out + 4);
	return RAND_bytes(out + 12, DGI_GCM_NONCE) == 1 &&
	    dgi_gcm_seal(master, out + 12, (const uint8_t *)name, strlen(name), NULL, 0, dk,
	    DGI_GCM_KEY, out + 12 + DGI_GCM_NONCE);
}

static bool dkey_unwrap(const uint8_t master[DGI_GCM_KEY], const char *name,
    const uint8_t *v, size_t len, uint8_t dk[DGI_GCM_KEY])
{
	return len == DKEY_LEN && memcmp(v, DKEY_MAGIC, 4) == 0 &&
	    dgi_gcm_open(master, v + 12, (const uint8_t *)name, strlen(name), NULL, 0,
	    v + 12 + DGI_GCM_NONCE, DGI_GCM_KEY, dk);
}

/* A meta value as stored: without its CRC in a CRC store (NULL when it
 * does not check). */
static const uint8_t *meta_value(const dgi_pstore *ps, const MDB_val *k, const MDB_val *v,
    size_t *len)
{
	*len = v->mv_size;
	if (!ps->ps_crc_only)
		return v->mv_data;
	if (v->mv_size < CRC_LEN)
		return NULL;
	*len = v->mv_size - CRC_LEN;
	if (get_le((const uint8_t *)v->mv_data + *len, 4) != record_crc(k, v->mv_data, *len))
		return NULL;
	return v->mv_data;
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
	uint8_t dk[DGI_GCM_KEY];
	bool enc = ps->ps_has_master;
	if (enc && !key_lookup(ps, r->cache_id, dk))
		return RC_NOKEY;
	size_t body = enc ? DGI_GCM_NONCE + (size_t)r->vlen + DGI_GCM_TAG : r->vlen;
	v.mv_size = VAL_HDR2 + body + CRC_LEN;
	v.mv_data = NULL;
	if ((rc = mdb_put(txn, ps->ps_entries, &k, &v, MDB_RESERVE)) != 0)
		return rc;
	uint8_t *p = v.mv_data;
	dgi_pver ver = r->ver;
	ver.flags |= DGI_PREC_FORMAT2 | DGI_PREC_CRC | (enc ? DGI_PREC_ENC : 0);
	put_ver(p, &ver);
	put_le(p + VER_LEN, (uint64_t)r->expire_ms, 8);
	put_le(p + VAL_HDR, r->op_node, 8);
	put_le(p + VAL_HDR + 8, r->op_seq, 8);
	if (enc) {
		/* nonce: the salt of this open, then a counter — unique per
		 * data key; the key and the header are authenticated too, so a
		 * record cannot be moved to another key or version */
		uint8_t *nonce = p + VAL_HDR2;
		put_le(nonce, ps->ps_salt, 4);
		put_le(nonce + 4, atomic_fetch_add_explicit(&ps->ps_nonce_ctr, 1,
		    memory_order_relaxed), 8);
		bool ok = dgi_gcm_seal(dk, nonce, k.mv_data, k.mv_size, p, VAL_HDR2, r->val, r->vlen,
		    nonce + DGI_GCM_NONCE);
		memset(dk, 0, sizeof(dk));
		if (!ok)
			return EIO;
	} else if (r->vlen > 0) {
		memcpy(p + VAL_HDR2, r->val, r->vlen);
	}
	put_le(p + VAL_HDR2 + body, record_crc(&k, p, VAL_HDR2 + body), 4);
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

/* Puts a meta value (with its CRC in a CRC store). */
static int meta_put_txn(dgi_pstore *ps, MDB_txn *txn, MDB_val *k, const void *val, size_t len)
{
	MDB_val v = { len + (ps->ps_crc_only ? CRC_LEN : 0), NULL };
	int rc = mdb_put(txn, ps->ps_meta, k, &v, MDB_RESERVE);
	if (rc != 0)
		return rc;
	memcpy(v.mv_data, val, len);
	if (ps->ps_crc_only)   /* a store made with CRCs: its meta values too */
		put_le((uint8_t *)v.mv_data + len, record_crc(k, val, len), 4);
	return 0;
}

static int apply_meta(dgi_pstore *ps, MDB_txn *txn, const op *o)
{
	MDB_val k = { strlen(o->o_name) + 1, (void *)o->o_name };
	if (o->o_val == NULL) {
		int rc = mdb_del(txn, ps->ps_meta, &k, NULL);
		return rc == MDB_NOTFOUND ? 0 : rc;
	}
	return meta_put_txn(ps, txn, &k, o->o_val, o->o_len);
}

/* OP_KEY: the data key of o->o_cache into o->o_key — unwrapped from its
 * meta record, or made and stored now (remembered once committed). */
static int apply_key(dgi_pstore *ps, MDB_txn *txn, op *o)
{
	char name[16];
	dkey_name(o->o_cache, name);
	MDB_val k = { strlen(name) + 1, name }, v;
	uint8_t master[DGI_GCM_KEY], w[DKEY_LEN];
	pthread_rwlock_rdlock(&ps->ps_klock);
	memcpy(master, ps->ps_master, sizeof(master));
	pthread_rwlock_unlock(&ps->ps_klock);
	int rc = mdb_get(txn, ps->ps_meta, &k, &v);
	if (rc == 0) {
		size_t len;
		const uint8_t *p = meta_value(ps, &k, &v, &len);
		rc = p != NULL && dkey_unwrap(master, name, p, len, o->o_key) ? 0 : RC_BADKEY;
	} else if (rc == MDB_NOTFOUND) {
		o->o_stores = true;
		rc = RAND_bytes(o->o_key, DGI_GCM_KEY) == 1 && dkey_wrap(master, name, o->o_key, w) ?
		    meta_put_txn(ps, txn, &k, w, sizeof(w)) : EIO;
	}
	memset(master, 0, sizeof(master));
	return rc;
}

/* OP_REKEY: every data key re-wrapped under the new master key o->o_key
 * (the data stays as it is). */
static int apply_rekey(dgi_pstore *ps, MDB_txn *txn, op *o)
{
	uint8_t master[DGI_GCM_KEY], dk[DGI_GCM_KEY], w[DKEY_LEN];
	pthread_rwlock_rdlock(&ps->ps_klock);
	memcpy(master, ps->ps_master, sizeof(master));
	pthread_rwlock_unlock(&ps->ps_klock);
	MDB_cursor *cur;
	int rc = mdb_cursor_open(txn, ps->ps_meta, &cur);
	MDB_val k = { 6, "dkey:" }, v;
	if (rc == 0)
		rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
	while (rc == 0 && k.mv_size > 5 && memcmp(k.mv_data, "dkey:", 5) == 0) {
		char name[32];
		size_t len;
		const uint8_t *p = meta_value(ps, &k, &v, &len);
		snprintf(name, sizeof(name), "%.*s", (int)(k.mv_size - 1), (const char *)k.mv_data);
		if (p == NULL || !dkey_unwrap(master, name, p, len, dk)) {
			rc = RC_BADKEY;
			break;
		}
		if (!dkey_wrap(o->o_key, name, dk, w)) {
			rc = EIO;
			break;
		}
		MDB_val kk = k;
		/* MDB_CURRENT would do, but meta_put_txn reserves: put by key,
		 * then find our place again */
		if ((rc = meta_put_txn(ps, txn, &kk, w, sizeof(w))) != 0)
			break;
		k = kk;
		if ((rc = mdb_cursor_get(cur, &k, &v, MDB_SET_KEY)) == 0)
			rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
	}
	if (rc == MDB_NOTFOUND)
		rc = 0;
	mdb_cursor_close(cur);
	memset(master, 0, sizeof(master));
	memset(dk, 0, sizeof(dk));
	o->o_stores = true;
	return rc;
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
	case OP_KEY:
		rc = apply_key(ps, txn, o);
		break;
	case OP_REKEY:
		rc = apply_rekey(ps, txn, o);
		break;
	}
	return rc;
}

/* What a committed op changes in memory: a data key known, the master
 * key replaced.  The committer's thread, before the next group. */
static void post_commit(dgi_pstore *ps, op *o)
{
	if (o->o_kind == OP_KEY) {
		key_remember(ps, o->o_cache, o->o_key);
	} else if (o->o_kind == OP_REKEY) {
		pthread_rwlock_wrlock(&ps->ps_klock);
		memcpy(ps->ps_master, o->o_key, DGI_GCM_KEY);
		pthread_rwlock_unlock(&ps->ps_klock);
	}
}

static const char *op_name(const op *o)
{
	static const char *const names[] = { "write", "drop", "meta", "key", "rekey" };
	return names[o->o_kind];
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
	rc = disk_rc(ps, rc);
	size_t nops = 0, nrecs = 0;
	for (op *o = first;; o = o->o_next) {
		nops++;
		nrecs += o->o_kind == OP_WRITE ? o->o_n : 1;
		if (o == last)
			break;
	}
	/* a full map fails every write the same way until space is freed (a
	 * rebalancing retried each second, a new primary's catch-up each
	 * 500 ms): that line once in 10 s, counted; its callers hear
	 * DG_ERR_STORAGE_FULL every time */
	uint32_t quiet = 0;
	if ((rc != MDB_MAP_FULL && rc != ENOSPC) ||
	    dgi_lograte_due(&ps->ps_lr_full, dgi_now_ms(), 10000, &quiet))
		pstore_log(rc == RC_BADKEY ? "the master key does not open a data key" :
		    rc == RC_NOKEY ? "no data key for this cache (dgi_pstore_use_key first)" :
		    mdb_strerror(rc), "op=%s ops=%zu records=%zu%s repeated=%u",
		    nops == 1 ? op_name(first) : "group", nops, nrecs,
		    reserve ? " reason=reserve" : "", quiet);
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
			if ((o->o_rc = rc) == 0)
				post_commit(ps, o);
			if (o == last)
				break;
		}
		return;
	}
	for (op *o = first;; o = o->o_next) {
		if ((o->o_rc = run_txn(ps, o, o)) == 0)
			post_commit(ps, o);
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
			/* a drop, and a rekey (the master key it installs must
			 * wrap no key of another op of its group), run alone */
			while (first->o_kind != OP_DROP && first->o_kind != OP_REKEY &&
			    last->o_next != NULL) {
				op *nx = last->o_next;
				size_t r = nx->o_kind == OP_WRITE ? nx->o_n : 1;
				if (nx->o_kind == OP_DROP || nx->o_kind == OP_REKEY ||
				    recs + r > ps->ps_max_batch)
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
		    r->klen > ps->ps_max_key - KEY_HDR || (r->ver.flags & DGI_PREC_RESERVED))
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

/* Logs STORAGE-DAMAGED for the record at k (NULL: the file as a whole)
 * and returns DG_ERR_STORAGE_DAMAGED.  name: the cache's, when known. */
static dg_err damaged(const dgi_pstore *ps, const char *what, const char *why,
    const MDB_val *k, const char *name)
{
	if (k == NULL || k->mv_size < KEY_HDR) {
		dgi_log("error", "STORAGE-DAMAGED", "file=\"%s/data.mdb\" op=%s why=\"%s\"",
		    ps->ps_dir, what, why);
		return DG_ERR_STORAGE_DAMAGED;
	}
	const uint8_t *kp = k->mv_data;
	char key[200];
	key_text(kp + KEY_HDR, k->mv_size - KEY_HDR, key, sizeof(key));
	uint32_t id = (uint32_t)kp[0] << 24 | (uint32_t)kp[1] << 16 | (uint32_t)kp[2] << 8 | kp[3];
	dgi_log("error", "STORAGE-DAMAGED", "file=\"%s/data.mdb\" op=%s cache=\"%s\" "
	    "cache_id=%08x partition=%u key=\"%s\" why=\"%s\"", ps->ps_dir, what,
	    name != NULL ? name : "?", id, (unsigned)kp[4] << 8 | kp[5], key, why);
	return DG_ERR_STORAGE_DAMAGED;
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
	dg_buf plain;
	dg_buf_init(&plain);
	while (rc == 0 && has_prefix(&k, pre, sizeof pre)) {
		dgi_prec r;
		const char *bad = check_rec(ps, &k, &v, &r);
		if (bad == NULL)
			bad = decrypt_rec(ps, &k, &v, &r, &plain);
		if (bad != NULL) {
			err = damaged(ps, "load", bad, &k, NULL);
			break;
		}
		if ((err = fn(ctx, &r)) != DG_OK)
			break;
		rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
	}
	dg_buf_free(&plain);
	if (err == DG_OK && rc != 0 && rc != MDB_NOTFOUND) {
		pstore_log(mdb_strerror(rc), "op=load");
		err = map_rc(rc);
	}
	read_end(txn, cur);
	leave(ps);
	return err;
}

dg_err dgi_pstore_use_key(dgi_pstore *ps, uint32_t cache_id)
{
	uint8_t dk[DGI_GCM_KEY];
	if (ps == NULL)
		return DG_ERR_INVAL;
	if (!ps->ps_has_master || key_lookup(ps, cache_id, dk))
		return DG_OK;
	op o = { .o_kind = OP_KEY, .o_cache = cache_id };
	dg_err e = submit(ps, &o);
	memset(o.o_key, 0, sizeof(o.o_key));
	return e;
}

dg_err dgi_pstore_rekey(dgi_pstore *ps, const uint8_t master[32])
{
	if (ps == NULL || master == NULL)
		return DG_ERR_INVAL;
	if (!ps->ps_has_master)
		return DG_ERR_STATE;
	op o = { .o_kind = OP_REKEY };
	memcpy(o.o_key, master, DGI_GCM_KEY);
	dg_err e = submit(ps, &o);
	memset(o.o_key, 0, sizeof(o.o_key));
	return e;
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
		const char *bad = meta_check(ps, &k, &v);
		if (bad != NULL) {
			err = damaged(ps, "meta_each", bad, NULL, NULL);
			break;
		}
		if ((err = fn(ctx, name, v.mv_data, v.mv_size - (ps->ps_crc_only ? CRC_LEN : 0))) !=
		    DG_OK)
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
