/*
 * lockq.c — per-key lock queues (lockq.h).
 *
 * Objects
 *
 *   request (struct lreq)   one dgi_lock_acquire that did not fail and was
 *                           not re-entrant.  States: WAITING (in its entry's
 *                           FIFO), HELD (its entry's owner), DEAD (timed out
 *                           or cancelled; kept only until its tx is
 *                           released).  The request that holds a key is the
 *                           same object that waited for it: a grant changes
 *                           its state, nothing moves.
 *   entry (struct lentry)   one locked key: (cache id, key bytes, hash), the
 *                           owner request and the FIFO of waiting requests
 *                           (doubly linked, so a timeout or cancel unlinks
 *                           from the middle).  Key bytes up to KEY_INLINE sit
 *                           in the entry, longer ones in a heap copy.
 *   key stripe              a mutex, an open-addressing table of entries
 *                           (linear probing, backward-shift deletion: no
 *                           tombstones, so a steady state never rebuilds),
 *                           the list of its waiting requests (for expire and
 *                           edges), free lists of entries and requests, and
 *                           counters.  A key's stripe comes from its hash.
 *   tx stripe               a mutex and an open-addressing table keyed by the
 *                           txid's two integers inline; a slot holds the head
 *                           of the tx's list of requests (any state).
 *
 * Invariants (under the key stripe's mutex): an entry is in its table iff it
 * has an owner; waiting requests exist only behind an owner (a release hands
 * the key to the FIFO head at once).  Every request in use is on exactly one
 * tx list; a request goes back to its stripe's free list only in
 * release_all, so its memory stays valid while a tx list names it.
 *
 * Locking.  Order: key stripe, then tx stripe; never the reverse, and never
 * two of a kind.  acquire links its new request into the tx list under both.
 * release_all takes the tx's list out of the tx table (tx stripe only), then
 * visits each request under its key stripe (recorded in the request, so a
 * DEAD request whose entry is gone needs nothing else).  Grants, timeouts and
 * cancels only change a request's state and its entry/stripe links, never a
 * tx list, which is why they need no tx stripe.  Callbacks are collected in a
 * small batch under the stripe mutex and run after unlocking, so a callback
 * may call back into the table.  One tx's calls are expected in sequence;
 * an acquire racing its own tx's release_all is safe but may outlive it.
 *
 * Memory.  Entries and requests come from per-stripe free lists; the tables
 * grow and never shrink.  After warm-up, lock/unlock allocates nothing
 * (except heap copies of keys longer than KEY_INLINE).
 */
#include "txn/lockq.h"

#include <pthread.h>
#include <string.h>

enum { KEY_INLINE = 32, CB_BATCH = 16, TABLE_MIN = 16, STRIPES_MAX = 1u << 16 };
enum { Q_WAITING, Q_HELD, Q_DEAD };

struct lentry;

struct lreq {
	dgi_txid q_tx;
	struct lentry *q_entry;        /* WAITING or HELD only */
	uint64_t q_deadline;           /* 0: never */
	dgi_lock_cb q_cb;
	void *q_ctx;
	struct lreq *q_fprev, *q_fnext; /* entry FIFO */
	struct lreq *q_wprev, *q_wnext; /* stripe's waiting list */
	struct lreq *q_txnext;         /* tx list, or the free list when free */
	uint32_t q_stripe;             /* fixed: a request is reused in one stripe */
	uint8_t q_state;
};

struct lentry {
	uint64_t e_hash;               /* mixed hash: slot and stripe */
	uint32_t e_cache;
	uint32_t e_klen;
	uint8_t *e_key;                /* e_inline or a heap copy */
	struct lreq *e_owner;
	struct lreq *e_head, *e_tail;  /* waiting, FIFO */
	struct lentry *e_nextfree;
	uint8_t e_inline[KEY_INLINE];
};

struct eslot {
	uint64_t hash;
	struct lentry *e;              /* NULL: empty */
};

struct lstripe {
	pthread_mutex_t s_mu;
	struct eslot *s_slots;
	uint32_t s_cap, s_count;
	struct lreq *s_wait;           /* waiting requests, any order */
	uint64_t s_min_deadline;       /* lower bound of their deadlines */
	struct lentry *s_free_e;
	struct lreq *s_free_q;
	uint64_t s_nwait, s_granted, s_queued, s_timeouts, s_cancelled, s_allocs;
	char s_pad[64];                /* keeps stripes off each other's lines */
};

struct txslot {
	uint64_t hash;
	dgi_txid tx;
	struct lreq *head;             /* NULL: empty (a listed tx has requests) */
};

struct txstripe {
	pthread_mutex_t t_mu;
	struct txslot *t_slots;
	uint32_t t_cap, t_count;
	char t_pad[64];
};

struct dgi_locks {
	uint32_t l_mask;               /* stripes - 1 */
	struct lstripe *l_stripes;
	struct txstripe *l_txs;
};

/* Callbacks owed, run once no mutex is held. */
struct cbbatch {
	uint32_t n;
	struct {
		dgi_lock_cb cb;
		void *ctx;
		dg_err err;
	} c[CB_BATCH];
};

/* ------------------------------------------------------------------------
 * Small helpers
 * ------------------------------------------------------------------------ */

/* (A key's hash may be weak in its low bits: the stripe and the slot take
 * different bits of one well-mixed value, dgi_mix64 of it.) */
static uint64_t tx_hash(const dgi_txid *tx)
{
	return dgi_txid_hash(tx);
}

static uint32_t stripe_of(const dgi_locks *l, uint64_t h)
{
	return (uint32_t)(h >> 40) & l->l_mask;
}

static void batch_add(struct cbbatch *b, const struct lreq *q, dg_err err)
{
	b->c[b->n].cb = q->q_cb;
	b->c[b->n].ctx = q->q_ctx;
	b->c[b->n].err = err;
	b->n++;
}

static void batch_run(struct cbbatch *b)
{
	for (uint32_t i = 0; i < b->n; i++)
		b->c[i].cb(b->c[i].ctx, b->c[i].err);
	b->n = 0;
}

static bool batch_full(const struct cbbatch *b)
{
	return b->n == CB_BATCH;
}

/* ------------------------------------------------------------------------
 * Entry table of a key stripe (linear probing, backward-shift deletion)
 * ------------------------------------------------------------------------ */

static bool entry_is(const struct lentry *e, uint32_t cache, const uint8_t *key, uint32_t klen)
{
	return e->e_cache == cache && e->e_klen == klen &&
	    (klen == 0 || memcmp(e->e_key, key, klen) == 0);
}

static struct lentry *etab_find(const struct lstripe *s, uint64_t h, uint32_t cache,
    const uint8_t *key, uint32_t klen)
{
	if (s->s_cap == 0)
		return NULL;
	uint32_t mask = s->s_cap - 1;
	for (uint32_t i = (uint32_t)h & mask;; i = (i + 1) & mask) {
		const struct eslot *sl = &s->s_slots[i];
		if (sl->e == NULL)
			return NULL;
		if (sl->hash == h && entry_is(sl->e, cache, key, klen))
			return sl->e;
	}
}

static void eslots_put(struct eslot *slots, uint32_t cap, uint64_t h, struct lentry *e)
{
	uint32_t i = (uint32_t)h & (cap - 1);
	while (slots[i].e != NULL)
		i = (i + 1) & (cap - 1);
	slots[i].hash = h;
	slots[i].e = e;
}

/* Room for one more entry at most half full.  Allocates only to grow. */
static dg_err etab_reserve(struct lstripe *s)
{
	if ((s->s_count + 1) * 2 <= s->s_cap)
		return DG_OK;
	uint32_t cap = s->s_cap ? s->s_cap * 2 : TABLE_MIN;
	struct eslot *slots = dgi_calloc(cap, sizeof(*slots));
	if (slots == NULL)
		return DG_ERR_NOMEM;
	for (uint32_t i = 0; i < s->s_cap; i++)
		if (s->s_slots[i].e != NULL)
			eslots_put(slots, cap, s->s_slots[i].hash, s->s_slots[i].e);
	dgi_free(s->s_slots);
	s->s_slots = slots;
	s->s_cap = cap;
	return DG_OK;
}

static void etab_remove(struct lstripe *s, const struct lentry *e)
{
	uint32_t mask = s->s_cap - 1;
	uint32_t i = (uint32_t)e->e_hash & mask;
	while (s->s_slots[i].e != e)
		i = (i + 1) & mask;
	/* Pull later members of the chain back into the hole unless that
	 * would put one before its home slot. */
	for (uint32_t j = (i + 1) & mask; s->s_slots[j].e != NULL; j = (j + 1) & mask) {
		uint32_t home = (uint32_t)s->s_slots[j].hash & mask;
		if (((j - home) & mask) >= ((j - i) & mask)) {
			s->s_slots[i] = s->s_slots[j];
			i = j;
		}
	}
	s->s_slots[i].e = NULL;
	s->s_count--;
}

/* ------------------------------------------------------------------------
 * Tx table of a tx stripe (same scheme, keyed by the txid inline)
 * ------------------------------------------------------------------------ */

static struct txslot *txtab_find(const struct txstripe *t, uint64_t h, const dgi_txid *tx)
{
	if (t->t_cap == 0)
		return NULL;
	uint32_t mask = t->t_cap - 1;
	for (uint32_t i = (uint32_t)h & mask;; i = (i + 1) & mask) {
		struct txslot *sl = &t->t_slots[i];
		if (sl->head == NULL)
			return NULL;
		if (sl->hash == h && dgi_txid_eq(&sl->tx, tx))
			return sl;
	}
}

static struct txslot *txslots_free_slot(struct txslot *slots, uint32_t cap, uint64_t h)
{
	uint32_t i = (uint32_t)h & (cap - 1);
	while (slots[i].head != NULL)
		i = (i + 1) & (cap - 1);
	return &slots[i];
}

static dg_err txtab_reserve(struct txstripe *t)
{
	if ((t->t_count + 1) * 2 <= t->t_cap)
		return DG_OK;
	uint32_t cap = t->t_cap ? t->t_cap * 2 : TABLE_MIN;
	struct txslot *slots = dgi_calloc(cap, sizeof(*slots));
	if (slots == NULL)
		return DG_ERR_NOMEM;
	for (uint32_t i = 0; i < t->t_cap; i++)
		if (t->t_slots[i].head != NULL)
			*txslots_free_slot(slots, cap, t->t_slots[i].hash) = t->t_slots[i];
	dgi_free(t->t_slots);
	t->t_slots = slots;
	t->t_cap = cap;
	return DG_OK;
}

static void txtab_remove(struct txstripe *t, struct txslot *sl)
{
	uint32_t mask = t->t_cap - 1;
	uint32_t i = (uint32_t)(sl - t->t_slots);
	for (uint32_t j = (i + 1) & mask; t->t_slots[j].head != NULL; j = (j + 1) & mask) {
		uint32_t home = (uint32_t)t->t_slots[j].hash & mask;
		if (((j - home) & mask) >= ((j - i) & mask)) {
			t->t_slots[i] = t->t_slots[j];
			i = j;
		}
	}
	t->t_slots[i].head = NULL;
	t->t_count--;
}

static struct txstripe *txstripe_of(const dgi_locks *l, uint64_t h)
{
	return &l->l_txs[stripe_of(l, h)];
}

/* Puts q at the head of tx's list.  Called with q's key stripe held (the
 * lock order is key stripe, then tx stripe).  DG_ERR_NOMEM: nothing
 * changed. */
static dg_err tx_link(dgi_locks *l, const dgi_txid *tx, struct lreq *q)
{
	uint64_t h = tx_hash(tx);
	struct txstripe *t = txstripe_of(l, h);
	dg_err err = DG_OK;
	pthread_mutex_lock(&t->t_mu);
	struct txslot *sl = txtab_find(t, h, tx);
	if (sl == NULL && (err = txtab_reserve(t)) == DG_OK) {
		sl = txslots_free_slot(t->t_slots, t->t_cap, h);
		sl->hash = h;
		sl->tx = *tx;
		sl->head = NULL;
		t->t_count++;
	}
	if (sl != NULL) {
		q->q_txnext = sl->head;
		sl->head = q;
	}
	pthread_mutex_unlock(&t->t_mu);
	return err;
}

/* Takes tx's whole list out of the tx table; the caller then owns its
 * links (nothing else changes q_txnext of a listed request). */
static struct lreq *tx_detach(dgi_locks *l, const dgi_txid *tx)
{
	uint64_t h = tx_hash(tx);
	struct txstripe *t = txstripe_of(l, h);
	struct lreq *head = NULL;
	pthread_mutex_lock(&t->t_mu);
	struct txslot *sl = txtab_find(t, h, tx);
	if (sl != NULL) {
		head = sl->head;
		txtab_remove(t, sl);
	}
	pthread_mutex_unlock(&t->t_mu);
	return head;
}

/* ------------------------------------------------------------------------
 * Free lists
 * ------------------------------------------------------------------------ */

static void entry_put(struct lstripe *s, struct lentry *e)
{
	if (e->e_key != e->e_inline)
		dgi_free(e->e_key);
	e->e_key = e->e_inline;
	e->e_nextfree = s->s_free_e;
	s->s_free_e = e;
}

static struct lentry *entry_get(struct lstripe *s, uint64_t h, uint32_t cache,
    const uint8_t *key, uint32_t klen)
{
	struct lentry *e = s->s_free_e;
	if (e != NULL) {
		s->s_free_e = e->e_nextfree;
	} else {
		if ((e = dgi_alloc(sizeof(*e))) == NULL)
			return NULL;
		s->s_allocs++;
		e->e_key = e->e_inline;
	}
	if (klen > KEY_INLINE && (e->e_key = dgi_alloc(klen)) == NULL) {
		e->e_key = e->e_inline;
		entry_put(s, e);
		return NULL;
	}
	if (klen > 0)
		memcpy(e->e_key, key, klen);
	e->e_hash = h;
	e->e_cache = cache;
	e->e_klen = klen;
	e->e_owner = e->e_head = e->e_tail = NULL;
	return e;
}

static void req_put(struct lstripe *s, struct lreq *q)
{
	q->q_txnext = s->s_free_q;
	s->s_free_q = q;
}

static struct lreq *req_get(struct lstripe *s, uint32_t si)
{
	struct lreq *q = s->s_free_q;
	if (q != NULL) {
		s->s_free_q = q->q_txnext;
		return q;
	}
	if ((q = dgi_alloc(sizeof(*q))) == NULL)
		return NULL;
	s->s_allocs++;
	q->q_stripe = si;
	return q;
}

/* ------------------------------------------------------------------------
 * Waiting requests: the entry's FIFO and the stripe's list
 * ------------------------------------------------------------------------ */

static void enqueue(struct lstripe *s, struct lentry *e, struct lreq *q)
{
	q->q_fnext = NULL;
	q->q_fprev = e->e_tail;
	if (e->e_tail != NULL)
		e->e_tail->q_fnext = q;
	else
		e->e_head = q;
	e->e_tail = q;

	q->q_wprev = NULL;
	q->q_wnext = s->s_wait;
	if (s->s_wait != NULL)
		s->s_wait->q_wprev = q;
	s->s_wait = q;
	if (q->q_deadline != 0 && q->q_deadline < s->s_min_deadline)
		s->s_min_deadline = q->q_deadline;
	s->s_nwait++;
	s->s_queued++;
}

/* Takes a waiting request out of its FIFO and the stripe's list. */
static void dequeue(struct lstripe *s, struct lreq *q)
{
	struct lentry *e = q->q_entry;
	if (q->q_fprev != NULL)
		q->q_fprev->q_fnext = q->q_fnext;
	else
		e->e_head = q->q_fnext;
	if (q->q_fnext != NULL)
		q->q_fnext->q_fprev = q->q_fprev;
	else
		e->e_tail = q->q_fprev;

	if (q->q_wprev != NULL)
		q->q_wprev->q_wnext = q->q_wnext;
	else
		s->s_wait = q->q_wnext;
	if (q->q_wnext != NULL)
		q->q_wnext->q_wprev = q->q_wprev;
	s->s_nwait--;
}

/* Ends a waiting request with err (TIMEOUT or CLOSED). */
static void drop_waiter(struct lstripe *s, struct lreq *q, dg_err err, struct cbbatch *b)
{
	dequeue(s, q);
	q->q_state = Q_DEAD;
	if (err == DG_ERR_TIMEOUT)
		s->s_timeouts++;
	else
		s->s_cancelled++;
	batch_add(b, q, err);
}

static bool is_queued(const struct lentry *e, const dgi_txid *tx)
{
	for (const struct lreq *q = e->e_head; q != NULL; q = q->q_fnext)
		if (dgi_txid_eq(&q->q_tx, tx))
			return true;
	return false;
}

/* The owner q lets go of its entry: the FIFO head gets it, or the entry
 * leaves the table when nobody waits. */
static void release_held(struct lstripe *s, struct lreq *q, struct cbbatch *b)
{
	struct lentry *e = q->q_entry;
	struct lreq *next = e->e_head;
	if (next == NULL) {
		etab_remove(s, e);
		entry_put(s, e);
		return;
	}
	dequeue(s, next);
	next->q_state = Q_HELD;
	e->e_owner = next;
	s->s_granted++;
	batch_add(b, next, DG_OK);
}

/* ------------------------------------------------------------------------
 * Create / destroy
 * ------------------------------------------------------------------------ */

static void stripes_free(dgi_locks *l, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		struct lstripe *s = &l->l_stripes[i];
		for (uint32_t j = 0; j < s->s_cap; j++)
			if (s->s_slots[j].e != NULL)
				entry_put(s, s->s_slots[j].e);
		for (struct lentry *e; (e = s->s_free_e) != NULL;) {
			s->s_free_e = e->e_nextfree;
			dgi_free(e);
		}
		for (struct lreq *q; (q = s->s_free_q) != NULL;) {
			s->s_free_q = q->q_txnext;
			dgi_free(q);
		}
		dgi_free(s->s_slots);
		pthread_mutex_destroy(&s->s_mu);
	}
}

/* Requests still on tx lists (held, waiting or dead) are only reachable
 * from there. */
static void txstripes_free(dgi_locks *l, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		struct txstripe *t = &l->l_txs[i];
		for (uint32_t j = 0; j < t->t_cap; j++) {
			for (struct lreq *q = t->t_slots[j].head, *nx; q != NULL; q = nx) {
				nx = q->q_txnext;
				dgi_free(q);
			}
		}
		dgi_free(t->t_slots);
		pthread_mutex_destroy(&t->t_mu);
	}
}

static void locks_free(dgi_locks *l, uint32_t nstripes, uint32_t ntxs)
{
	if (l->l_stripes != NULL)
		stripes_free(l, nstripes);
	if (l->l_txs != NULL)
		txstripes_free(l, ntxs);
	dgi_free(l->l_stripes);
	dgi_free(l->l_txs);
	dgi_free(l);
}

dg_err dgi_locks_create(uint32_t stripes, dgi_locks **out)
{
	if (out == NULL)
		return DG_ERR_INVAL;
	*out = NULL;
	if (stripes == 0)
		stripes = 64;
	if (stripes > STRIPES_MAX || (stripes & (stripes - 1)) != 0)
		return DG_ERR_INVAL;
	dgi_locks *l = dgi_calloc(1, sizeof(*l));
	if (l == NULL)
		return DG_ERR_NOMEM;
	l->l_mask = stripes - 1;
	l->l_stripes = dgi_calloc(stripes, sizeof(*l->l_stripes));
	l->l_txs = dgi_calloc(stripes, sizeof(*l->l_txs));
	if (l->l_stripes == NULL || l->l_txs == NULL) {
		locks_free(l, 0, 0);
		return DG_ERR_NOMEM;
	}
	uint32_t i;
	for (i = 0; i < stripes; i++) {
		l->l_stripes[i].s_min_deadline = UINT64_MAX;
		if (pthread_mutex_init(&l->l_stripes[i].s_mu, NULL) != 0)
			break;
		if (pthread_mutex_init(&l->l_txs[i].t_mu, NULL) != 0) {
			pthread_mutex_destroy(&l->l_stripes[i].s_mu);
			break;
		}
	}
	if (i < stripes) {
		locks_free(l, i, i);
		return DG_ERR_NOMEM;
	}
	*out = l;
	return DG_OK;
}

/* Cancels up to a batch of s's waiters; true if some remain. */
static bool cancel_some(struct lstripe *s, struct cbbatch *b)
{
	pthread_mutex_lock(&s->s_mu);
	while (s->s_wait != NULL && !batch_full(b))
		drop_waiter(s, s->s_wait, DG_ERR_CLOSED, b);
	bool more = s->s_wait != NULL;
	pthread_mutex_unlock(&s->s_mu);
	return more;
}

void dgi_locks_destroy(dgi_locks *l)
{
	if (l == NULL)
		return;
	struct cbbatch b = { 0 };
	/* The table stays whole while callbacks run: one may still call
	 * release_all (a tx rolling back), or even queue again, which the
	 * next pass cancels. */
	bool again = true;
	while (again) {
		again = false;
		for (uint32_t i = 0; i <= l->l_mask; i++) {
			again |= cancel_some(&l->l_stripes[i], &b);
			batch_run(&b);
		}
	}
	locks_free(l, l->l_mask + 1, l->l_mask + 1);
}

/* ------------------------------------------------------------------------
 * Acquire
 * ------------------------------------------------------------------------ */

struct lkey {
	uint64_t h;
	uint32_t cache;
	uint32_t klen;
	const uint8_t *key;
};

/* A new request of tx on e (queued) or on a new entry (granted).  All that
 * can fail is done before anything is linked, so NOMEM leaves no trace. */
static int acquire_new(dgi_locks *l, struct lstripe *s, uint32_t si, struct lentry *e,
    const struct lkey *k, const dgi_txid *tx, uint64_t deadline, dgi_lock_cb cb, void *ctx)
{
	struct lentry *ne = NULL;
	if (e == NULL) {
		if (etab_reserve(s) != DG_OK ||
		    (ne = entry_get(s, k->h, k->cache, k->key, k->klen)) == NULL)
			return -DG_ERR_NOMEM;
	}
	struct lreq *q = req_get(s, si);
	if (q == NULL)
		goto fail;
	q->q_tx = *tx;
	q->q_entry = e != NULL ? e : ne;
	q->q_deadline = deadline;
	q->q_cb = cb;
	q->q_ctx = ctx;
	q->q_state = e != NULL ? Q_WAITING : Q_HELD;
	if (tx_link(l, tx, q) != DG_OK)
		goto fail;
	if (e != NULL) {
		enqueue(s, e, q);
		return DGI_LOCK_QUEUED;
	}
	ne->e_owner = q;
	eslots_put(s->s_slots, s->s_cap, ne->e_hash, ne);
	s->s_count++;
	s->s_granted++;
	return DGI_LOCK_GRANTED;
fail:
	if (q != NULL)
		req_put(s, q);
	if (ne != NULL)
		entry_put(s, ne);
	return -DG_ERR_NOMEM;
}

static int acquire_locked(dgi_locks *l, struct lstripe *s, uint32_t si, const struct lkey *k,
    const dgi_txid *tx, uint64_t deadline, dgi_lock_cb cb, void *ctx)
{
	struct lentry *e = etab_find(s, k->h, k->cache, k->key, k->klen);
	if (e != NULL && dgi_txid_eq(&e->e_owner->q_tx, tx)) {
		s->s_granted++;     /* re-entrant: nothing new to release */
		return DGI_LOCK_GRANTED;
	}
	/* A second wait of one tx on one key has no meaning (which request
	 * would the grant answer?): the caller is out of sequence. */
	if (e != NULL && is_queued(e, tx))
		return -DG_ERR_INVAL;
	return acquire_new(l, s, si, e, k, tx, deadline, cb, ctx);
}

int dgi_lock_acquire(dgi_locks *l, uint32_t cache_id, const uint8_t *key, uint32_t klen,
    uint64_t hash, const dgi_txid *tx, uint64_t deadline_ms, dgi_lock_cb cb, void *ctx)
{
	if (l == NULL || tx == NULL || (tx->node == 0 && tx->seq == 0) || cb == NULL ||
	    (key == NULL && klen > 0))
		return -DG_ERR_INVAL;
	struct lkey k = { dgi_mix64(hash), cache_id, klen, key };
	uint32_t si = stripe_of(l, k.h);
	struct lstripe *s = &l->l_stripes[si];
	pthread_mutex_lock(&s->s_mu);
	int rc = acquire_locked(l, s, si, &k, tx, deadline_ms, cb, ctx);
	pthread_mutex_unlock(&s->s_mu);
	return rc;
}

/* ------------------------------------------------------------------------
 * Release, expire
 * ------------------------------------------------------------------------ */

/* Ends one request of a released tx; returns 1 if it held its key. */
static uint32_t release_one(struct lstripe *s, struct lreq *q, struct cbbatch *b)
{
	uint32_t held = 0;
	if (q->q_state == Q_HELD) {
		release_held(s, q, b);
		held = 1;
	} else if (q->q_state == Q_WAITING) {
		drop_waiter(s, q, DG_ERR_CLOSED, b);
	}
	req_put(s, q);
	return held;
}

uint32_t dgi_lock_release_all(dgi_locks *l, const dgi_txid *tx)
{
	if (l == NULL || tx == NULL)
		return 0;
	struct lreq *q = tx_detach(l, tx);
	struct cbbatch b = { 0 };
	uint32_t held = 0;
	while (q != NULL) {
		/* Stay in one stripe while the next request is in it too; each
		 * request owes at most one callback. */
		uint32_t si = q->q_stripe;
		struct lstripe *s = &l->l_stripes[si];
		pthread_mutex_lock(&s->s_mu);
		do {
			struct lreq *next = q->q_txnext;
			held += release_one(s, q, &b);
			q = next;
		} while (q != NULL && q->q_stripe == si && !batch_full(&b));
		pthread_mutex_unlock(&s->s_mu);
		batch_run(&b);
	}
	return held;
}

bool dgi_lock_release(dgi_locks *l, uint32_t cache_id, const uint8_t *key, uint32_t klen,
    uint64_t hash, const dgi_txid *tx)
{
	if (l == NULL || tx == NULL || (key == NULL && klen > 0))
		return false;
	uint64_t h = dgi_mix64(hash);
	struct lstripe *s = &l->l_stripes[stripe_of(l, h)];
	struct cbbatch b = { 0 };
	pthread_mutex_lock(&s->s_mu);
	struct lentry *e = etab_find(s, h, cache_id, key, klen);
	struct lreq *q = e != NULL ? e->e_owner : NULL;
	bool held = q != NULL && dgi_txid_eq(&q->q_tx, tx);
	if (held) {
		release_held(s, q, &b);
		q->q_state = Q_DEAD; /* (back to the free list at release_all) */
	}
	pthread_mutex_unlock(&s->s_mu);
	batch_run(&b);
	return held;
}

/* Times out s's due waiters, up to a batch; true if it stopped early. */
static bool expire_some(struct lstripe *s, uint64_t now, struct cbbatch *b)
{
	uint64_t min = UINT64_MAX;
	struct lreq *q = s->s_wait;
	while (q != NULL) {
		struct lreq *next = q->q_wnext;
		if (q->q_deadline != 0 && q->q_deadline <= now) {
			if (batch_full(b))
				return true;   /* s_min_deadline stays <= now: rescan */
			drop_waiter(s, q, DG_ERR_TIMEOUT, b);
		} else if (q->q_deadline != 0 && q->q_deadline < min) {
			min = q->q_deadline;
		}
		q = next;
	}
	s->s_min_deadline = min;
	return false;
}

uint32_t dgi_locks_expire(dgi_locks *l, uint64_t now_ms)
{
	if (l == NULL)
		return 0;
	struct cbbatch b = { 0 };
	uint32_t n = 0;
	for (uint32_t i = 0; i <= l->l_mask; i++) {
		struct lstripe *s = &l->l_stripes[i];
		bool more;
		do {
			pthread_mutex_lock(&s->s_mu);
			/* Most stripes have nothing due: one compare each. */
			more = s->s_min_deadline <= now_ms && expire_some(s, now_ms, &b);
			pthread_mutex_unlock(&s->s_mu);
			n += b.n;
			batch_run(&b);
		} while (more);
	}
	return n;
}

/* ------------------------------------------------------------------------
 * Queries
 * ------------------------------------------------------------------------ */

dgi_txid dgi_lock_owner(dgi_locks *l, uint32_t cache_id, const uint8_t *key, uint32_t klen,
    uint64_t hash)
{
	dgi_txid none = { 0, 0 };
	if (l == NULL || (key == NULL && klen > 0))
		return none;
	uint64_t h = dgi_mix64(hash);
	struct lstripe *s = &l->l_stripes[stripe_of(l, h)];
	pthread_mutex_lock(&s->s_mu);
	struct lentry *e = etab_find(s, h, cache_id, key, klen);
	dgi_txid owner = e != NULL ? e->e_owner->q_tx : none;
	pthread_mutex_unlock(&s->s_mu);
	return owner;
}

/* The tx list's links change only under its tx stripe; a request's state
 * needs its key stripe, which cannot be taken here, so every request on
 * the list counts. */
uint32_t dgi_locks_tx_count(dgi_locks *l, const dgi_txid *tx)
{
	if (l == NULL || tx == NULL)
		return 0;
	uint64_t h = tx_hash(tx);
	struct txstripe *t = txstripe_of(l, h);
	uint32_t n = 0;
	pthread_mutex_lock(&t->t_mu);
	struct txslot *sl = txtab_find(t, h, tx);
	for (const struct lreq *q = sl != NULL ? sl->head : NULL; q != NULL; q = q->q_txnext)
		n++;
	pthread_mutex_unlock(&t->t_mu);
	return n;
}

/* Waiting requests are listed per stripe, not per tx (a tx list can't be
 * read under a key stripe without breaking the lock order), so this walks
 * every stripe's waiters: O(waiters on the node). */
size_t dgi_locks_waits_for(dgi_locks *l, const dgi_txid *tx, dgi_txid *out, size_t cap)
{
	size_t n = 0;
	if (l == NULL || tx == NULL)
		return 0;
	for (uint32_t i = 0; i <= l->l_mask; i++) {
		struct lstripe *s = &l->l_stripes[i];
		pthread_mutex_lock(&s->s_mu);
		for (const struct lreq *q = s->s_wait; q != NULL; q = q->q_wnext) {
			if (!dgi_txid_eq(&q->q_tx, tx))
				continue;
			if (n < cap)
				out[n] = q->q_entry->e_owner->q_tx;
			n++;
		}
		pthread_mutex_unlock(&s->s_mu);
	}
	return n;
}

size_t dgi_locks_edges(dgi_locks *l, dgi_txid *out, size_t cap)
{
	size_t n = 0;
	if (l == NULL)
		return 0;
	for (uint32_t i = 0; i <= l->l_mask; i++) {
		struct lstripe *s = &l->l_stripes[i];
		pthread_mutex_lock(&s->s_mu);
		for (const struct lreq *q = s->s_wait; q != NULL; q = q->q_wnext) {
			if (n < cap) {
				out[2 * n] = q->q_tx;
				out[2 * n + 1] = q->q_entry->e_owner->q_tx;
			}
			n++;
		}
		pthread_mutex_unlock(&s->s_mu);
	}
	return n;
}

size_t dgi_locks_edge_list(dgi_locks *l, dgi_lock_edge *out, size_t cap)
{
	size_t n = 0;
	if (l == NULL)
		return 0;
	for (uint32_t i = 0; i <= l->l_mask; i++) {
		struct lstripe *s = &l->l_stripes[i];
		pthread_mutex_lock(&s->s_mu);
		for (const struct lreq *q = s->s_wait; q != NULL; q = q->q_wnext) {
			if (n < cap) {
				const struct lentry *e = q->q_entry;
				dgi_lock_edge *o = &out[n];
				o->waiter = q->q_tx;
				o->owner = e->e_owner->q_tx;
				o->cache_id = e->e_cache;
				o->klen = e->e_klen;
				memset(o->key, 0, sizeof(o->key));
				memcpy(o->key, e->e_key, e->e_klen < sizeof(o->key) ? e->e_klen :
				    sizeof(o->key));
			}
			n++;
		}
		pthread_mutex_unlock(&s->s_mu);
	}
	return n;
}

void dgi_locks_get_stats(dgi_locks *l, dgi_locks_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (l == NULL)
		return;
	for (uint32_t i = 0; i <= l->l_mask; i++) {
		struct lstripe *s = &l->l_stripes[i];
		pthread_mutex_lock(&s->s_mu);
		out->locks += s->s_count;
		out->waiters += s->s_nwait;
		out->granted += s->s_granted;
		out->queued += s->s_queued;
		out->timeouts += s->s_timeouts;
		out->cancelled += s->s_cancelled;
		out->allocs += s->s_allocs;
		pthread_mutex_unlock(&s->s_mu);
	}
}
