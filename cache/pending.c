/*
 * pending.c — FULL_SYNC writes awaiting their backups, on the primary.
 *
 * A FULL_SYNC write (ATOMIC caches, one or more backups) is applied by the
 * primary and then *pending*: its entry carries DGI_ENTRY_PENDING and a
 * pending-write record (struct pw, in the partition's `pending` list)
 * names the backups the copy went to.  Each backup answers BACKUP_ACK to
 * the primary.  When every one said DG_OK the write is *committed*: the
 * flag is cleared and everyone waiting on it is answered — the update's
 * originator, later retries of the same update, and reads that found the
 * entry pending.  So nobody is told about a value (not even a reader)
 * before every owner holds it: a primary that dies after applying a write
 * but before its backups have it cannot have shown that write to anyone.
 *
 * A record fails (a backup refused, the topology moved the partition, no
 * answer before the deadline): its waiters are answered — writes with the
 * error and `applied` (the originator maps again and retries with the same
 * update id; the new primary recognises it), reads with DG_ERR_NOT_READY
 * (they read again) — and the record stays, idle, until it is sent again
 * (at the next topology this node installs, the sweeper's next tick, or a
 * retry of its update), while this node is still the partition's primary
 * and the entry still holds its version.  A newer version of the key, or
 * this node losing the primary role, ends the record (the flag goes with
 * it: the entry is no longer this node's to vouch for).
 *
 * Invariant (partition locked): an entry carries DGI_ENTRY_PENDING only
 * while a record for its (hash, version) is in the partition's list.
 *
 * Everything here runs under the partition's lock, the records included:
 * BACKUP_ACK names the cache and partition, so the handler finds its
 * record in the partition's short list.  No other lock; records come from
 * a small free list per partition, so a steady state allocates nothing.
 */
#include "cache_int.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#define PW_FREE_MAX 8           /* records kept for reuse per partition */
#define WW_FREE_MAX 8           /* remote waiters kept for reuse per partition */
#define WW_VAL_KEEP 1024        /* ... with their value buffers up to this size */

enum { PW_SENT = 1, PW_IDLE = 2 };

static struct pw *pw_get(dgi_part *pt)
{
	struct pw *w = pt->pw_free;
	if (w != NULL) {
		pt->pw_free = w->next;
		pt->pw_nfree--;
	} else if ((w = dgi_calloc(1, sizeof(*w))) == NULL) {
		return NULL;
	} else {
		dg_buf_init(&w->owner.val);
	}
	dg_buf owner_val = w->owner.val;
	dg_node_id *heap = w->expect != w->expect_in ? w->expect : NULL;
	uint32_t heap_cap = heap != NULL ? w->cap : 0;
	memset(w, 0, sizeof(*w));
	w->owner.val = owner_val;
	w->owner.val.len = 0;
	w->expect = heap != NULL ? heap : w->expect_in;
	w->cap = heap != NULL ? heap_cap : DGI_PW_INLINE;
	w->pt = pt;
	return w;
}

static void pw_put(dgi_part *pt, struct pw *w)
{
	if (pt->pw_nfree < PW_FREE_MAX) {
		w->next = pt->pw_free;
		pt->pw_free = w;
		pt->pw_nfree++;
		return;
	}
	if (w->expect != w->expect_in)
		dgi_free(w->expect);
	dg_buf_free(&w->owner.val);
	dgi_free(w);
}

static void unlink_pw(dgi_part *pt, struct pw *w)
{
	for (struct pw **pp = &pt->pending; *pp != NULL; pp = &(*pp)->next)
		if (*pp == w) {
			*pp = w->next;
			return;
		}
}

struct pw *dgi_pw_find(dgi_part *pt, uint64_t hash, const dgi_pver *ver)
{
	for (struct pw *w = pt->pending; w != NULL; w = w->next)
		if (w->hash == hash && dgi_pver_cmp(&w->ver, ver) == 0)
			return w;
	return NULL;
}

static struct pw *find_id(dgi_part *pt, uint64_t id)
{
	for (struct pw *w = pt->pending; w != NULL; w = w->next)
		if (w->id == id)
			return w;
	return NULL;
}

/* The entry a record replicates, when the partition still holds that
 * version of it. */
static dgi_entry *entry_of(dgi_part *pt, const struct pw *w)
{
	return dgi_part_find_ver(pt, w->hash, &w->ver);
}

/* ---- remote waiters: kept for reuse, as the records are ---- */

static struct pw_wait *ww_get(dgi_part *pt)
{
	struct pw_wait *x = pt->ww_free;
	if (x != NULL) {
		pt->ww_free = x->next;
		pt->ww_nfree--;
	} else if ((x = dgi_alloc(sizeof(*x))) != NULL) {
		dg_buf_init(&x->val);
	}
	return x;
}

static void ww_put(dgi_part *pt, struct pw_wait *x)
{
	if (pt->ww_nfree < WW_FREE_MAX && x->val.cap <= WW_VAL_KEEP) {
		x->next = pt->ww_free;
		pt->ww_free = x;
		pt->ww_nfree++;
		return;
	}
	dg_buf_free(&x->val);
	dgi_free(x);
}

/* ---- answering waiters ---- */

static void answer(dgi_grid *g, struct pw_wait *x, dg_err err)
{
	x->err = err;
	if (!x->remote) {
		sem_t *s = x->post != NULL ? x->post : &x->sem;
		x->done = true;
		sem_post(s); /* the last touch: the waiter may return now */
		return;
	}
	if (x->kind == PWW_TXREAD) {
		x->fn(x->fnctx, &x->in, err, x->found, &x->val, &x->ver);
	} else if (x->kind == PWW_READ) {
		if (err != DG_OK) {
			dg_tp_reply_error(g->tp, &x->in, err);
		} else {
			dgi_msg_get_res r = { x->found, { x->found ? x->val.data : NULL,
				(uint32_t)x->val.len } };
			if (r.val.ptr == NULL && x->found)
				r.val.ptr = (const uint8_t *)"";
			dg_tp_reply(g->tp, &x->in, DGI_MSG_GET_RES, &r);
		}
	} else if (x->group != NULL) {
		dgi_uall_done(g, x->group, x->gi, err, x->flag, err != DG_OK && x->applied);
	} else {
		dgi_msg_update_res r = { err, x->flag, err != DG_OK && x->applied,
			{ NULL, 0 } };
		if (err == DG_OK && x->has_old)
			r.old = (dg_bytes){ x->val.data ? x->val.data : (const uint8_t *)"",
				(uint32_t)x->val.len };
		dg_tp_reply(g->tp, &x->in, DGI_MSG_UPDATE_RES, &r);
	}
}

/* Answers and releases every waiter of w (the owner included).  A write
 * that failed was applied here (it is pending): `applied` goes with it. */
static void answer_all(dgi_grid *g, struct pw *w, dg_err err)
{
	struct pw_wait *x = w->waiters;
	w->waiters = NULL;
	while (x != NULL) {
		struct pw_wait *next = x->next;
		bool heap = x->remote && x != &w->owner;
		if (x->kind == PWW_WRITE)
			x->applied = true;
		answer(g, x, (x->kind == PWW_READ || x->kind == PWW_TXREAD) && err != DG_OK ?
		    DG_ERR_NOT_READY : err);
		if (heap)
			ww_put(w->pt, x);
		x = next;
	}
	w->has_owner = false;
}

void dgi_pw_attach(struct pw *w, struct pw_wait *x)
{
	x->next = w->waiters;
	w->waiters = x;
}

bool dgi_pw_detach(struct pw *w, struct pw_wait *x)
{
	for (struct pw_wait **pp = &w->waiters; *pp != NULL; pp = &(*pp)->next)
		if (*pp == x) {
			*pp = x->next;
			return true;
		}
	return false;
}

struct pw_wait *dgi_pw_remote_waiter(struct pw *w, int kind)
{
	struct pw_wait *x;
	if (kind == PWW_WRITE && !w->has_owner) {
		x = &w->owner;
		w->has_owner = true;
	} else if ((x = ww_get(w->pt)) == NULL) {
		return NULL;
	}
	dg_buf val = x->val;
	memset(x, 0, sizeof(*x));
	x->val = val;
	x->val.len = 0;
	x->kind = kind;
	x->remote = true;
	return x;
}

void dgi_pw_waiter_free(struct pw *w, struct pw_wait *x)
{
	if (x == &w->owner) {
		w->has_owner = false;
		return;
	}
	ww_put(w->pt, x);
}

/* ---- copies gathered per backup (cache_int.h, dgi_copies_begin) ---- */

struct citem {
	dgi_msg_backup b;           /* key and val: offsets into data until sent */
	size_t koff, voff;
	bool tomb;
	uint8_t npeers;
	uint8_t peers[DGI_COPIES_PEERS]; /* indices into copies.peer */
};

struct copies {
	dgi_grid *g;
	dg_cache *c;
	int depth;
	struct citem *items;
	size_t n, cap;
	dg_buf data;                /* the copies' keys and values */
	dg_buf out;                 /* a BACKUP_ALL list being encoded */
	dg_node_id peer[DGI_COPIES_PEERS];
	uint32_t npeers;
};

static pthread_key_t cp_key;
static pthread_once_t cp_once = PTHREAD_ONCE_INIT;
static _Thread_local struct copies *cp_tls;

static void cp_free(void *p)
{
	struct copies *cp = p;
	if (cp == NULL)
		return;
	dgi_free(cp->items);
	dg_buf_free(&cp->data);
	dg_buf_free(&cp->out);
	dgi_free(cp);
}

static void cp_init(void)
{
	pthread_key_create(&cp_key, cp_free);
}

void dgi_copies_begin(dgi_grid *g, dg_cache *c)
{
	struct copies *cp = cp_tls;
	if (cp == NULL) {
		pthread_once(&cp_once, cp_init);
		if ((cp = dgi_calloc(1, sizeof(*cp))) == NULL)
			return; /* sent one by one */
		dg_buf_init(&cp->data);
		dg_buf_init(&cp->out);
		if (pthread_setspecific(cp_key, cp) != 0) {
			dgi_free(cp);
			return;
		}
		cp_tls = cp;
	}
	if (cp->depth++ == 0) {
		cp->g = g;
		cp->c = c;
		cp->n = 0;
		cp->npeers = 0;
		cp->data.len = 0;
	}
}

static void copies_round_end(void *ctx)
{
	dgi_copies_end(ctx);
}

void dgi_copies_round(dgi_grid *g, dg_cache *c)
{
	struct copies *cp = cp_tls;
	if (cp != NULL && cp->depth > 0)
		return; /* gathering already (this round's, or a batch's) */
	if (!dg_tp_at_round_end(copies_round_end, g))
		return; /* not the reactor thread: sent one by one */
	dgi_copies_begin(g, c); /* (no memory: the end finds nothing to do) */
}

/* Keeps w's copy b of entry e for the backups in to[0..n) (partition
 * locked); false: not kept (send it now). */
static bool cp_keep(dg_cache *c, const dgi_msg_backup *b, const dg_node_id *to, uint32_t n)
{
	struct copies *cp = cp_tls;
	if (cp == NULL || cp->depth == 0 || cp->c != c || n > DGI_COPIES_PEERS)
		return false;
	struct citem it = { .b = *b, .tomb = b->val.ptr == NULL };
	for (uint32_t i = 0; i < n; i++) {
		uint32_t pi = 0;
		while (pi < cp->npeers && cp->peer[pi] != to[i])
			pi++;
		if (pi == cp->npeers) {
			if (cp->npeers == DGI_COPIES_PEERS)
				return false;
			cp->peer[cp->npeers++] = to[i];
		}
		it.peers[it.npeers++] = (uint8_t)pi;
	}
	if (cp->n == cp->cap) {
		size_t cap = cp->cap ? cp->cap * 2 : 128;
		struct citem *m = dgi_realloc(cp->items, cap * sizeof(*m));
		if (m == NULL)
			return false;
		cp->items = m;
		cp->cap = cap;
	}
	size_t at = cp->data.len;
	it.koff = at;
	it.voff = at + b->key.len;
	if (dgi_append(&cp->data, b->key.ptr, b->key.len) != DG_OK ||
	    (!it.tomb && dgi_append(&cp->data, b->val.ptr, b->val.len) != DG_OK)) {
		cp->data.len = at;
		return false;
	}
	cp->items[cp->n++] = it;
	return true;
}

/* Sends peer pi's copies as one BACKUP_ALL, or as many as DGI_MANY_MAX
 * and one frame (recv_max: the items' keys and values, DGI_BALL_ITEM_ROOM
 * each besides) allow — a copy alone always fits.  Before, a count
 * alone: 16 values of 1.5 MiB gathered for a backup made a 24 MiB
 * BACKUP_ALL the transport refused, and every key of the batch was
 * written again alone (test_put_all_large_values_on_primary).  A send
 * that fails fails their records as a refusal would. */
static void cp_send(struct copies *cp, uint32_t pi)
{
	dgi_grid *g = cp->g;
	dg_cache *c = cp->c;
	size_t max = dg_tp_recv_max(g->tp), i = 0;
	while (i < cp->n) {
		uint32_t cnt = 0;
		size_t j = i, bytes = 1024;
		for (; j < cp->n && cnt < DGI_MANY_MAX; j++) {
			const struct citem *it = &cp->items[j];
			if (memchr(it->peers, (int)pi, it->npeers) == NULL)
				continue;
			size_t b = (size_t)it->b.key.len + (it->tomb ? 0 : it->b.val.len) +
			    DGI_BALL_ITEM_ROOM;
			if (cnt > 0 && bytes + b > max)
				break; /* the next frame's */
			bytes += b;
			cnt++;
		}
		if (cnt == 0)
			return;
		if (cnt == 1 && i == 0 && j == cp->n) {
			/* one copy for this backup: a BACKUP, as if never gathered */
			while (memchr(cp->items[i].peers, (int)pi, cp->items[i].npeers) == NULL)
				i++;
			struct citem *it = &cp->items[i];
			dgi_msg_backup b = it->b;
			b.key.ptr = cp->data.data + it->koff;
			b.val.ptr = it->tomb ? NULL : cp->data.data != NULL ?
			    cp->data.data + it->voff : (const uint8_t *)"";
			dg_err e = dg_tp_send(g->tp, cp->peer[pi], DGI_MSG_BACKUP, &b);
			if (e != DG_OK)
				dgi_pw_ack(g, c, (uint32_t)b.part, (uint64_t)b.pw, cp->peer[pi],
				    e == DG_ERR_BUSY ? DG_ERR_NOT_READY : DG_ERR_CONN_BROKEN);
			return;
		}
		dg_writer w;
		cp->out.len = 0;
		dg_writer_init(&w, g->reg, &cp->out);
		dg_write_list_begin(&w, cnt * DGI_BALL_ITEM_VALUES);
		for (size_t k = i; k < j; k++) {
			struct citem *it = &cp->items[k];
			if (memchr(it->peers, (int)pi, it->npeers) == NULL)
				continue;
			dgi_msg_backup b = it->b;
			b.key.ptr = cp->data.data + it->koff;
			b.val.ptr = it->tomb ? NULL : cp->data.data != NULL ?
			    cp->data.data + it->voff : (const uint8_t *)""; /* (null: a tombstone) */
			dgi_ball_item_put(&w, &b);
		}
		dg_write_end(&w);
		dg_err e = dg_writer_finish(&w);
		if (e == DG_OK) {
			dgi_msg_many m = { c->id, 0, 0, 0, 0, { cp->out.data, (uint32_t)cp->out.len } };
			e = dg_tp_send(g->tp, cp->peer[pi], DGI_MSG_BACKUP_ALL, &m);
		}
		if (e != DG_OK) {
			dg_err why = e == DG_ERR_BUSY ? DG_ERR_NOT_READY : DG_ERR_CONN_BROKEN;
			for (size_t k = i; k < j; k++) {
				struct citem *it = &cp->items[k];
				if (memchr(it->peers, (int)pi, it->npeers) != NULL)
					dgi_pw_ack(g, c, (uint32_t)it->b.part, (uint64_t)it->b.pw,
					    cp->peer[pi], why);
			}
		}
		i = j;
	}
}

void dgi_copies_end(dgi_grid *g)
{
	(void)g;
	struct copies *cp = cp_tls;
	if (cp == NULL || cp->depth == 0 || --cp->depth > 0)
		return;
	/* back to back, peer after peer: see the header on the order */
	for (uint32_t pi = 0; pi < cp->npeers; pi++)
		cp_send(cp, pi);
	cp->n = 0;
	cp->npeers = 0;
	cp->data.len = 0;
	if (cp->cap * sizeof(*cp->items) > BSCRATCH_KEEP) {
		dgi_free(cp->items);
		cp->items = NULL;
		cp->cap = 0;
	}
	if (cp->data.cap > BSCRATCH_KEEP)
		dg_buf_free(&cp->data);
	if (cp->out.cap > BSCRATCH_KEEP)
		dg_buf_free(&cp->out);
}

/* ---- sending ---- */

/* Sends the entry e (w's version) to every backup of part under aff and
 * arms w to wait for them (partition locked).  A send that fails fails
 * the record at once. */
static void send(dgi_grid *g, dg_cache *c, uint32_t part, struct pw *w, const dgi_aff *aff,
    const dgi_entry *e, int64_t flag)
{
	bool tomb = (e->flags & DGI_ENTRY_TOMB) != 0;
	uint64_t op_node, op_seq;
	dgi_entry_op(&c->parts[part], e, &op_node, &op_seq);
	dgi_msg_backup b = {
		c->id, part, aff->topver, dgi_entry_topver(e), (int64_t)e->counter, e->order,
		dgi_entry_expire(e), (int64_t)op_node, (int64_t)op_seq, (int64_t)w->id, flag,
		(int64_t)dgi_aff_owners_hash(aff, part),
		{ dgi_entry_key(e), dgi_entry_klen(e) }, { tomb ? NULL : dgi_entry_val(e), e->vlen }
	};
	uint32_t n = aff->copies > 0 ? aff->copies - 1 : 0;
	if (n > w->cap) {
		dg_node_id *ids = dgi_alloc(n * (sizeof(*ids) + 1));
		if (ids == NULL) {
			w->state = PW_IDLE;
			w->err = DG_ERR_NOMEM;
			return;
		}
		if (w->expect != w->expect_in)
			dgi_free(w->expect);
		w->expect = ids;
		w->cap = n;
	}
	uint8_t *acked = w->expect == w->expect_in ? w->acked_in : (uint8_t *)(w->expect + w->cap);
	w->acked = acked;
	w->nexpect = w->nacked = 0;
	w->err = DG_OK;
	w->topver = aff->topver;
	w->deadline = dgi_now_ms() + g->cfg.request_timeout_ms;
	w->state = PW_SENT;
	dg_err err = DG_OK;
	for (uint32_t i = 0; i < aff->copies; i++) {
		dg_node_id o = dgi_aff_owner(aff, part, i);
		if (o == 0 || o == g->self)
			continue;
		w->expect[w->nexpect] = o;
		acked[w->nexpect++] = 0;
	}
	if (w->nexpect > 0 && cp_keep(c, &b, w->expect, w->nexpect))
		return; /* sent by dgi_copies_end, with the others */
	for (uint32_t i = 0; i < w->nexpect; i++) {
		dg_err se = dg_tp_send(g->tp, w->expect[i], DGI_MSG_BACKUP, &b);
		if (se != DG_OK && err == DG_OK)
			err = se;
	}
	if (err != DG_OK) {
		w->state = PW_IDLE;
		w->err = err == DG_ERR_BUSY ? DG_ERR_NOT_READY : DG_ERR_CONN_BROKEN;
	}
}

/* Commits w (every backup has its version): the flag goes, waiters are
 * answered, the record is freed. */
static void commit(dgi_grid *g, dgi_part *pt, struct pw *w)
{
	dgi_entry *e = entry_of(pt, w);
	if (e != NULL)
		e->flags &= ~DGI_ENTRY_PENDING;
	unlink_pw(pt, w);
	answer_all(g, w, DG_OK);
	pw_put(pt, w);
}

/* Ends w without a commit: waiters answered with err, the entry's flag
 * cleared (nobody vouches for it any more), the record freed. */
static void drop(dgi_grid *g, dgi_part *pt, struct pw *w, dg_err err)
{
	dgi_entry *e = entry_of(pt, w);
	if (e != NULL)
		e->flags &= ~DGI_ENTRY_PENDING;
	unlink_pw(pt, w);
	answer_all(g, w, err);
	pw_put(pt, w);
}

/* The record failed: answer its waiters, keep it idle for a resend. */
static void fail(dgi_grid *g, struct pw *w, dg_err err)
{
	w->state = PW_IDLE;
	answer_all(g, w, err);
}

struct pw *dgi_pw_start(dgi_grid *g, dg_cache *c, uint32_t part, const dgi_aff *aff,
    uint64_t hash, dgi_entry *e, dg_err *err)
{
	dgi_part *pt = &c->parts[part];
	*err = DG_OK;
	dgi_pver ver = dgi_entry_ver(e);
	struct pw *w = dgi_pw_find(pt, hash, &ver);
	if (w != NULL && w->state == PW_SENT)
		return w; /* on its way already: wait for it */
	if (w == NULL) {
		if ((w = pw_get(pt)) == NULL) {
			*err = DG_ERR_NOMEM;
			return NULL;
		}
		w->id = atomic_fetch_add_explicit(&g->next_pw, 1, memory_order_relaxed);
		w->hash = hash;
		w->ver = ver;
		/* the flag of the update that wrote this version, for the
		 * backups' update-id tables (a write is recorded before its
		 * copies go; a version that came otherwise: it wrote, 1) */
		uint64_t op_node, op_seq;
		dgi_entry_op(pt, e, &op_node, &op_seq);
		if (!dgi_dedup_find(pt, op_node, op_seq, &w->flag))
			w->flag = 1;
		w->next = pt->pending;
		pt->pending = w;
	}
	e->flags |= DGI_ENTRY_PENDING;
	send(g, c, part, w, aff, e, w->flag);
	if (w->state == PW_SENT && w->nexpect == 0) {
		commit(g, pt, w); /* no backup to wait for */
		return NULL;
	}
	if (w->state == PW_IDLE)
		*err = w->err;
	return w;
}

/* ---- events ---- */

/* ---- full backups ----
 * A backup whose map is full answers the copies it cannot store
 * DG_ERR_STORAGE_FULL.  The write is applied here already and waits for it
 * (sent again each second), its key unreadable, its writer answered
 * DG_ERR_TIMEOUT; every later write to the partitions it backs would do the
 * same.  So the primary keeps, per such backup (dg_cache.full, 4 at most:
 * a fifth takes the slot that ends first), the least copy it refused
 * within 5 s, and refuses writes as large to its partitions before
 * applying them (dgi_backup_full; DG_ERR_STORAGE_FULL, nothing applied or
 * recorded), while smaller ones that may fit and removals go on.  A slot
 * ends 5 s after the backup's last refusal (the waiting write's resends
 * renew it), or when it takes a copy as large of the first record it
 * refused or of a later one (an answer to an earlier copy, applied on a
 * worker thread, can come after the refusal).  The slots change only
 * here, under full_lk, and are read under it only while one is in use
 * (test_persist_backup_full_refuses_at_once). */

static void full_lock(dg_cache *c)
{
	uint32_t free_ = 0;
	while (!atomic_compare_exchange_weak_explicit(&c->full_lk, &free_, 1,
	    memory_order_acquire, memory_order_relaxed)) {
		free_ = 0;
#if defined(__x86_64__) || defined(__i386__)
		__builtin_ia32_pause();
#endif
	}
}

static void full_unlock(dg_cache *c)
{
	atomic_store_explicit(&c->full_lk, 0, memory_order_release);
}

/* full_until_ms again from the slots (full_lk held). */
static void full_recount(dg_cache *c)
{
	uint64_t until = 0;
	for (int i = 0; i < DGI_FULL_NODES; i++)
		if (c->full[i].until_ms > until)
			until = c->full[i].until_ms;
	atomic_store_explicit(&c->full_until_ms, until, memory_order_relaxed);
}

/* from refused w's copy for a full map (partition locked). */
static void full_refused(dg_cache *c, dg_node_id from, const struct pw *w)
{
	uint64_t now = dgi_coarse_ms(), bytes = UINT64_MAX;
	dgi_entry *e = w != NULL ? entry_of(w->pt, w) : NULL;
	if (e != NULL)
		bytes = (uint64_t)dgi_entry_klen(e) + e->vlen;
	full_lock(c);
	struct dgi_full *f = NULL, *first = &c->full[0];
	for (int i = 0; i < DGI_FULL_NODES && f == NULL; i++)
		if (c->full[i].until_ms > now && c->full[i].node == from)
			f = &c->full[i];
	bool fresh = f == NULL;
	for (int i = 0; i < DGI_FULL_NODES && f == NULL; i++)
		if (c->full[i].until_ms <= now)
			f = &c->full[i];
	for (int i = 1; i < DGI_FULL_NODES && f == NULL; i++)
		if (c->full[i].until_ms < first->until_ms)
			first = &c->full[i];
	if (f == NULL)
		f = first; /* (a fifth full backup: the slot that ends first) */
	if (fresh)
		*f = (struct dgi_full){ from, 0, UINT64_MAX, 0, UINT64_MAX };
	f->until_ms = now + DGI_BACKUP_FULL_MS;
	if (bytes != UINT64_MAX && (bytes <= f->bytes || now >= f->bytes_until_ms)) {
		f->bytes = bytes;
		f->bytes_until_ms = now + DGI_BACKUP_FULL_MS;
	}
	if (w != NULL && w->id < f->pw_id)
		f->pw_id = w->id;
	uint64_t least = f->bytes;
	full_recount(c);
	full_unlock(c);
	uint32_t quiet;
	if (dgi_lograte_due(&c->lr_full, dgi_now_ms(), 10000, &quiet))
		dgi_log("warn", "BACKUP-STORAGE-FULL", "cache=\"%s\" node=%016llx bytes=%llu "
		    "repeated=%u why=\"a backup's persistent storage is full: writes of as many "
		    "bytes or more to the partitions it backs are refused DG_ERR_STORAGE_FULL "
		    "until it takes a copy as large again (the write it refused waits, sent again "
		    "every second)\"", c->cfg.name, (unsigned long long)from,
		    (unsigned long long)least, quiet);
}

/* from took w's copy (partition locked; a slot may be in use). */
static void full_took(dg_cache *c, dgi_part *pt, dg_node_id from, const struct pw *w)
{
	uint64_t now = dgi_coarse_ms();
	dgi_entry *e = w != NULL ? entry_of(pt, w) : NULL;
	if (e == NULL || (e->flags & DGI_ENTRY_TOMB)) /* (a removal proves no room) */
		return;
	uint64_t bytes = (uint64_t)dgi_entry_klen(e) + e->vlen;
	bool ended = false;
	full_lock(c);
	for (int i = 0; i < DGI_FULL_NODES; i++) {
		struct dgi_full *f = &c->full[i];
		if (f->until_ms != 0 && f->until_ms <= now)
			f->until_ms = 0; /* (expired) */
		else if (f->until_ms != 0 && f->node == from && bytes >= f->bytes &&
		    w->id >= f->pw_id) {
			f->until_ms = 0;
			ended = true;
		}
	}
	full_recount(c);
	full_unlock(c);
	if (ended)
		dgi_log("info", "BACKUP-STORAGE-ROOM", "cache=\"%s\" node=%016llx why=\"the backup "
		    "took a copy as large again: its partitions' writes are accepted\"", c->cfg.name,
		    (unsigned long long)from);
}

bool dgi_backup_full_slow(dg_cache *c, const dgi_aff *aff, uint32_t part, uint64_t bytes,
    uint64_t now)
{
	bool refuse = false;
	full_lock(c);
	for (int i = 0; i < DGI_FULL_NODES && !refuse; i++) {
		const struct dgi_full *f = &c->full[i];
		if (f->until_ms <= now || bytes < f->bytes)
			continue;
		for (uint32_t k = 1; k < aff->copies && !refuse; k++)
			refuse = dgi_aff_owner(aff, part, k) == f->node;
	}
	full_unlock(c);
	return refuse;
}

void dgi_pw_ack(dgi_grid *g, dg_cache *c, uint32_t part, uint64_t id, dg_node_id from,
    dg_err res)
{
	dgi_part *pt = &c->parts[part];
	dgi_part_lock(pt);
	struct pw *w = find_id(pt, id);
	if (__builtin_expect(res == DG_ERR_STORAGE_FULL, 0))
		full_refused(c, from, w);
	else if (res == DG_OK && __builtin_expect(atomic_load_explicit(&c->full_until_ms,
	    memory_order_relaxed) != 0, 0))
		full_took(c, pt, from, w);
	if (w != NULL && w->state == PW_SENT) {
		for (uint32_t i = 0; i < w->nexpect; i++)
			if (w->expect[i] == from && !w->acked[i]) {
				w->acked[i] = 1;
				w->nacked++;
				if (res != DG_OK && w->err == DG_OK)
					w->err = res;
			}
		if (w->err != DG_OK)
			fail(g, w, w->err);
		else if (w->nacked == w->nexpect)
			commit(g, pt, w);
	}
	dgi_part_unlock(pt);
}

/* Whether this node is the partition's primary under aff. */
static bool primary_under(dgi_grid *g, const dgi_aff *aff, uint32_t part)
{
	return aff != NULL && aff->nnodes > 0 && dgi_aff_owner(aff, part, 0) == g->self;
}

/* Sends an idle record again, or ends it when its version is gone or
 * this node is no longer the primary (partition locked). */
static void resend(dgi_grid *g, dg_cache *c, uint32_t part, struct pw *w, const dgi_aff *aff)
{
	dgi_part *pt = &c->parts[part];
	dgi_entry *e = entry_of(pt, w);
	if (!primary_under(g, aff, part)) {
		/* the role moved on with the write unfinished: the next primary
		 * takes it from here (psync.c) */
		if (e != NULL)
			e->flags |= DGI_ENTRY_TENTATIVE;
		drop(g, pt, w, DG_ERR_REMAP);
		return;
	}
	if (e == NULL) {
		/* superseded or gone: the key's newer version (its own
		 * record, if pending) is what counts now */
		drop(g, pt, w, DG_ERR_REMAP);
		return;
	}
	send(g, c, part, w, aff, e, w->flag);
	if (w->state == PW_SENT && w->nexpect == 0)
		commit(g, pt, w);
	else if (w->state == PW_IDLE)
		fail(g, w, w->err);
}

void dgi_pw_retopo(dgi_grid *g, dg_cache *c, uint32_t part, const dgi_aff *now)
{
	dgi_part *pt = &c->parts[part];
	for (struct pw *w = pt->pending, *next; w != NULL; w = next) {
		next = w->next;
		if (w->state == PW_SENT && primary_under(g, now, part)) {
			/* still waiting: keep it when the owners are the same */
			bool same = now->copies - 1 == w->nexpect;
			for (uint32_t i = 0; same && i < w->nexpect; i++)
				same = dgi_aff_role(now, part, w->expect[i]) > 0;
			if (same)
				continue;
			fail(g, w, DG_ERR_REMAP);
		}
		resend(g, c, part, w, now);
	}
}

void dgi_pw_tick(dgi_grid *g, dg_cache *c, uint32_t part, uint64_t now_ms)
{
	dgi_part *pt = &c->parts[part];
	const dgi_aff *aff = atomic_load_explicit(&c->aff, memory_order_acquire);
	for (struct pw *w = pt->pending, *next; w != NULL; w = next) {
		next = w->next;
		if (w->state == PW_SENT && now_ms >= w->deadline)
			fail(g, w, DG_ERR_TIMEOUT);
		if (w->state == PW_IDLE)
			resend(g, c, part, w, aff);
	}
}

void dgi_pw_forget_all(dgi_grid *g, dg_cache *c, dg_err err)
{
	for (uint32_t p = 0; p < c->cfg.partitions; p++) {
		dgi_part *pt = &c->parts[p];
		dgi_part_lock(pt);
		while (pt->pending != NULL)
			drop(g, pt, pt->pending, err);
		dgi_part_unlock(pt);
	}
}

void dgi_pw_recent(dgi_part *pt, uint64_t hash, const dgi_pver *ver)
{
	if (pt->recent == NULL &&
	    (pt->recent = dgi_alloc(DGI_RECENT * sizeof(*pt->recent))) == NULL)
		return; /* the originator's retry still repairs it */
	pt->recent[pt->recent_at] = (struct dgi_recent){ hash, *ver };
	pt->recent_at = (uint8_t)((pt->recent_at + 1) % DGI_RECENT);
	if (pt->nrecent < DGI_RECENT)
		pt->nrecent++;
}

void dgi_pw_promoted(dgi_grid *g, dg_cache *c, uint32_t part, const dgi_aff *now)
{
	dgi_part *pt = &c->parts[part];
	for (uint8_t i = 0; i < pt->nrecent; i++) {
		dgi_entry *e = dgi_part_find_ver(pt, pt->recent[i].hash, &pt->recent[i].ver);
		if (e == NULL || (e->flags & DGI_ENTRY_PENDING))
			continue; /* superseded, gone, or already being sent */
		dg_err err;
		dgi_pw_start(g, c, part, now, pt->recent[i].hash, e, &err);
	}
	pt->nrecent = pt->recent_at = 0;
}

void dgi_pw_free_part(dgi_part *pt)
{
	dgi_free(pt->recent);
	pt->recent = NULL;
	pt->nrecent = pt->recent_at = 0;
	while (pt->pw_free != NULL) {
		struct pw *w = pt->pw_free;
		pt->pw_free = w->next;
		if (w->expect != w->expect_in)
			dgi_free(w->expect);
		dg_buf_free(&w->owner.val);
		dgi_free(w);
	}
	pt->pw_nfree = 0;
	while (pt->ww_free != NULL) {
		struct pw_wait *x = pt->ww_free;
		pt->ww_free = x->next;
		dg_buf_free(&x->val);
		dgi_free(x);
	}
	pt->ww_nfree = 0;
}

/* ---- a local caller waiting (partition locked on entry; unlocks) ---- */

dg_err dgi_pw_wait(const dg_tp *tp, dgi_part *pt, struct pw_wait *x, uint64_t deadline)
{
	dgi_part_unlock(pt);
	dgi_wait_enter();
	bool got = dgi_spin_sem(tp, &x->sem, false);
	while (!got) {
		uint64_t now = dgi_now_ms();
		if (now >= deadline)
			break;
		struct timespec ts;
		dgi_abstime_in(&ts, deadline - now);
		if (sem_timedwait(&x->sem, &ts) == 0)
			got = true;
		else if (errno != EINTR && errno != ETIMEDOUT)
			break;
	}
	dgi_wait_leave();
	if (got)
		return x->err;
	/* timed out: leave the record, unless it answered meanwhile */
	dgi_part_lock(pt);
	bool gave_up = dgi_pw_give_up(pt, x);
	dgi_part_unlock(pt);
	if (!gave_up) {
		sem_wait(&x->sem); /* posted: consume it */
		return x->err;
	}
	return DG_ERR_TIMEOUT;
}

bool dgi_pw_give_up(dgi_part *pt, struct pw_wait *x)
{
	if (x->done)
		return false;
	for (struct pw *r = pt->pending; r != NULL; r = r->next)
		if (dgi_pw_detach(r, x))
			break;
	x->applied = x->kind == PWW_WRITE;
	x->err = DG_ERR_TIMEOUT;
	return true;
}
