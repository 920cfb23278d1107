/*
 * txn.c — the near side of transactions: the public API of txn/txn.h.
 *
 * A tx lives on the node where it began.  Its entries (txentries.c) record
 * what it read (value and version) and wrote; its state walks the near
 * table of txstate.c.  Reads and PESSIMISTIC locks go to the key's primary
 * as TX_LOCK; commit groups the entries by primary (current affinity) and
 * runs two-phase commit (one phase when a single primary holds them all):
 *
 *   PREPARE  every primary locks its entries (re-entrant for PESSIMISTIC
 *            locks taken earlier), checks the versions of the entries read
 *            (PESSIMISTIC REPEATABLE_READ/SERIALIZABLE: catches a lock lost
 *            to a topology change; OPTIMISTIC SERIALIZABLE: the optimistic
 *            check) and hands the entries to its backups.
 *   COMMIT   once every primary prepared: they apply, send the copies to
 *            their backups and (FULL_SYNC) answer when those applied.
 * A failure before the decision rolls back everywhere.  After it, a
 * primary that does not answer (left, restarted) has its entries re-sent
 * to the keys' current primaries as a one-phase PREPARE marked RESEND
 * (no version check: the tx is decided) — a primary that applied them
 * already (as a backup that got the copies) answers from its memory of
 * finished txs and re-sends its copies to its backups — until every entry
 * is confirmed or the timeout passes (DG_ERR_TX_UNKNOWN).
 *
 * Memory: a tx struct (with its entry set and a reply buffer) is kept per
 * thread and reused: a steady stream of small txs allocates nothing on the
 * near node.
 *
 * The admin CLI sees a node's live txs through an intrusive list (linked at
 * begin, unlinked when commit or rollback frees the tx, under the list's
 * mutex); what it reads of a tx while its thread runs it — the state, the
 * key count, whether it was killed — is mirrored in atomics.
 */
#include "txn.h"
#include "txentries.h"
#include "txstate.h"
#include "txsvc.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_NODES 64            /* primaries (and lock holders) per tx */

struct call {                   /* one request's answer */
	struct dg_tx *tx;
	dg_err err;
	int64_t idx;
	bool answered;              /* the peer answered (err is its verdict) */
	bool sent;                  /* the request went out (the peer may have
	                               acted on it even if it did not answer) */
	bool applied;               /* TX_ACK with DGI_TXA_APPLIED: a commit applied
	                               on that primary, not confirmed by every backup */
};

struct dg_tx {
	dgi_txsvc *s;
	dgi_txid id;
	dg_tx_concurrency conc;
	dg_tx_isolation iso;
	uint32_t timeout_ms;
	uint64_t deadline;          /* monotonic ms */
	int64_t start_ms;           /* wall ms */
	dgi_txs state;
	int64_t topver;             /* of the first lock (PESSIMISTIC) */
	dgi_txents *ents;
	uint32_t nlocked;
	uint64_t locked[MAX_NODES]; /* nodes holding locks or records of this tx */
	char label[DG_TX_LABEL_MAX];
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint32_t outstanding;           /* answers due (__atomic: wait_all spins on it) */
	/* a 2PC's COMMIT sent by its last PREPARE answer (commit_on_answer),
	 * under mu: the PREPARE round armed for it (arm_ng 0: none) */
	uint32_t arm_ng, commit_ng;
	const struct group *arm_groups;
	struct call *arm_calls;
	bool commit_sent;           /* the COMMITs went out (read after wait_all) */
	/* the last TX_LOCK answer (fetch_all's: in struct fetched, values in vals) */
	bool found;
	dgi_pver ver;
	dg_buf val;
	dg_buf vals;                /* fetch_all's answers' values */
	dg_buf wire;                /* PREPARE bodies */
	uint64_t heap;              /* bytes this tx allocated */
	/* the admin CLI's view (dgi_tx_list, dgi_tx_kill) */
	struct dg_tx *live_prev, *live_next;  /* the service's live list */
	_Atomic int fate;           /* FATE_*: killed, or past the point of no kill */
	_Atomic bool victim;        /* a deadlock's victim: its calls fail DG_ERR_DEADLOCK */
	_Atomic int shown;          /* state, for other threads */
	_Atomic uint32_t nkeys;     /* entries, for other threads */
};

enum {
	FATE_NONE = 0,
	FATE_KILLED,                /* dgi_tx_kill: every next call rolls back */
	FATE_SEALED,                /* commit began: a kill is refused */
};

/* Tests only: make commit() stop as if the near node crashed —
 * 1 after every participant prepared (no COMMIT sent), 2 after COMMIT went
 * to the first participant only, 3 after PREPARE went to the first
 * participant only.  commit() then returns DG_ERR_TX_UNKNOWN at once; the
 * test kills the node.  4: the near node loses contact once every
 * participant prepared (dgi_tx_cut_node: their answers are lost, nothing
 * it sends arrives) and commit() goes on as if its PREPAREs timed out.
 * 5: no crash — commit() waits 500 ms once every participant prepared,
 * then sends its COMMITs (a test cuts or kills something meanwhile). */
_Atomic int dgi_tx_crash_point;
_Atomic int dgi_tx_crash_reached; /* tests: the last crash point a commit reached */

static _Thread_local dg_tx *tl_current;
/* Per thread: a finished tx kept for reuse, and the raw API's key and
 * value encodings; freed when the thread exits. */
struct near_tls {
	dg_tx *spare;
	dg_buf kenc, venc;
	dg_buf cas;                 /* a compare-and-set's current value */
	dg_buf lenc;                /* a TX_LOCK_ALL's list (fetch_all) */
};

static pthread_key_t near_key;
static pthread_once_t near_once = PTHREAD_ONCE_INIT;
static void tx_destroy(dg_tx *tx);

static void near_tls_free(void *p)
{
	struct near_tls *t = p;
	if (t->spare != NULL)
		tx_destroy(t->spare);
	dg_buf_free(&t->kenc);
	dg_buf_free(&t->venc);
	dg_buf_free(&t->cas);
	dg_buf_free(&t->lenc);
	dgi_free(t);
}

static void near_tls_init(void)
{
	pthread_key_create(&near_key, near_tls_free);
}

/* This thread's near buffers, or NULL when they could not be allocated
 * (callers answer DG_ERR_NOMEM or do without). */
static struct near_tls *near_tls(void)
{
	static _Thread_local struct near_tls *mine;
	if (atomic_load_explicit(&dgi_tx_tls_fail, memory_order_relaxed))
		return NULL;
	if (mine != NULL)
		return mine;
	pthread_once(&near_once, near_tls_init);
	struct near_tls *t = dgi_calloc(1, sizeof(*t));
	if (t != NULL)
		pthread_setspecific(near_key, t);
	return mine = t;
}
static _Atomic uint64_t tx_seq_next = 1;


/* A participant answers a wait that ends with the tx's timeout itself;
 * this much more lets its answer arrive. */
#define NET_SLACK_MS 200

/* lock_key's pauses before it asks again after a retriable answer: the
 * first, doubled each time up to the last (a key whose last write is not
 * yet on every backup — refused so to a TX_LOCK_ALL item or this node's
 * own request; a remote TX_LOCK waits for it, txlock.c — is settled
 * about a round trip later; a topology change takes milliseconds) */
#define LOCK_RETRY_FIRST_US 400
#define LOCK_RETRY_MAX_US 5000

/* How long releasing may wait for the participants' answers: they also
 * release on their own once the tx's timeout passed, so a tx past it
 * does not wait long. */
static uint32_t release_wait(const struct dg_tx *tx);

/* Whether node is one of tx->locked, or can become one: a tx holds locks
 * or records on at most MAX_NODES nodes, and the calls that would take it
 * past that fail with DG_ERR_LIMIT before anything is sent (a node left
 * out of the list would get no rollback: its locks would stay until they
 * expire). */
static bool lockable_on(const dg_tx *tx, uint64_t node)
{
	for (uint32_t i = 0; i < tx->nlocked; i++)
		if (tx->locked[i] == node)
			return true;
	return tx->nlocked < MAX_NODES;
}

static void add_locked(dg_tx *tx, uint64_t node)
{
	for (uint32_t i = 0; i < tx->nlocked; i++)
		if (tx->locked[i] == node)
			return;
	if (tx->nlocked < MAX_NODES) /* (lockable_on was asked first) */
		tx->locked[tx->nlocked++] = node;
}

static uint32_t left_ms(const dg_tx *tx)
{
	uint64_t now = dgi_now_ms();
	return now < tx->deadline ? (uint32_t)(tx->deadline - now) : 0;
}

static uint32_t release_wait(const struct dg_tx *tx)
{
	uint32_t left = left_ms(tx);
	return left > 2000 ? 2000 : left < 200 ? 200 : left;
}

static void sleep_us(long us)
{
	struct timespec ts = { us / 1000000, (us % 1000000) * 1000L };
	nanosleep(&ts, NULL);
}

static void sleep_ms(long ms)
{
	sleep_us(ms * 1000);
}

/* ---- the live list (dgi_tx_list, dgi_tx_kill) ---- */

/* Called with every field the list shows already set: the mutex publishes
 * them to the listing thread. */
static void live_link(dg_tx *tx)
{
	dgi_txnear_live *l = dgi_txsvc_live(tx->s);
	pthread_mutex_lock(&l->mu);
	tx->live_prev = NULL;
	tx->live_next = l->head;
	if (l->head != NULL)
		l->head->live_prev = tx;
	l->head = tx;
	pthread_mutex_unlock(&l->mu);
}

static void live_unlink(dg_tx *tx)
{
	dgi_txnear_live *l = dgi_txsvc_live(tx->s);
	pthread_mutex_lock(&l->mu);
	if (tx->live_prev != NULL)
		tx->live_prev->live_next = tx->live_next;
	else
		l->head = tx->live_next;
	if (tx->live_next != NULL)
		tx->live_next->live_prev = tx->live_prev;
	tx->live_prev = tx->live_next = NULL;
	pthread_mutex_unlock(&l->mu);
}

static bool killed(const dg_tx *tx)
{
	return atomic_load_explicit(&tx->fate, memory_order_acquire) == FATE_KILLED;
}

/* What a killed tx's calls fail with: an operator's kill rolls back, a
 * deadlock's victim hears why. */
static dg_err kill_err(const dg_tx *tx)
{
	return atomic_load_explicit(&tx->victim, memory_order_acquire) ? DG_ERR_DEADLOCK :
	    DG_ERR_TX_ROLLED_BACK;
}

static void near_info(const dg_tx *tx, uint64_t now, dgi_tx_info *o)
{
	memset(o, 0, sizeof(*o));
	o->id = tx->id.seq;
	o->near = tx->id.node;
	o->role = 0;
	o->state = dgi_txs_name((dgi_txs)atomic_load_explicit(&tx->shown, memory_order_relaxed));
	o->concurrency = tx->conc;
	o->isolation = tx->iso;
	uint64_t begun = tx->deadline - tx->timeout_ms;
	o->age_ms = now > begun ? now - begun : 0;
	o->timeout_ms = tx->timeout_ms;
	o->keys = atomic_load_explicit(&tx->nkeys, memory_order_relaxed);
	/* truncated on purpose (memset above left the terminator) */
	memcpy(o->label, tx->label, strnlen(tx->label, sizeof(o->label) - 1));
}

size_t dgi_tx_near_list(dgi_txsvc *s, dgi_tx_info *out, size_t cap)
{
	dgi_txnear_live *l = dgi_txsvc_live(s);
	uint64_t now = dgi_now_ms();
	size_t n = 0;
	pthread_mutex_lock(&l->mu);
	for (const dg_tx *tx = l->head; tx != NULL; tx = tx->live_next) {
		if (dgi_txs_final((dgi_txs)atomic_load_explicit(&tx->shown, memory_order_relaxed)))
			continue; /* finished; commit or rollback is freeing it */
		if (n < cap)
			near_info(tx, now, &out[n]);
		n++;
	}
	pthread_mutex_unlock(&l->mu);
	return n;
}

/* The kill is decided under the list's mutex (the tx cannot be freed or
 * reused meanwhile) by one compare-and-swap that commit races with its
 * own: exactly one of them wins.  The release runs after, on the copied id. */
dg_err dgi_tx_near_kill(dgi_txsvc *s, uint64_t id)
{
	dgi_txnear_live *l = dgi_txsvc_live(s);
	dg_err e = DG_ERR_NOT_FOUND;
	dgi_txid txid = { 0, 0 };
	char label[DG_TX_LABEL_MAX] = "";
	pthread_mutex_lock(&l->mu);
	for (dg_tx *tx = l->head; tx != NULL; tx = tx->live_next) {
		if (tx->id.seq != id)
			continue;
		int was = FATE_NONE;
		if (atomic_compare_exchange_strong(&tx->fate, &was, FATE_KILLED)) {
			e = DG_OK;
			txid = tx->id;
			snprintf(label, sizeof(label), "%s", tx->label);
		} else {
			e = was == FATE_KILLED ? DG_OK : DG_ERR_CONFLICT;
		}
		break;
	}
	pthread_mutex_unlock(&l->mu);
	if (txid.seq == 0)
		return e;
	dgi_log("warn", "TX-KILLED", "tx=%016llx:%llu label=\"%s\"",
	    (unsigned long long)txid.node, (unsigned long long)txid.seq, label);
	dgi_txsvc_kill(s, &txid, DGI_TXK_ADMIN);
	return e;
}

dg_err dgi_tx_near_victim(dgi_txsvc *s, uint64_t id)
{
	dgi_txnear_live *l = dgi_txsvc_live(s);
	dg_err e = DG_ERR_NOT_FOUND;
	pthread_mutex_lock(&l->mu);
	for (dg_tx *tx = l->head; tx != NULL; tx = tx->live_next) {
		if (tx->id.seq != id)
			continue;
		atomic_store(&tx->victim, true);
		int was = FATE_NONE;
		atomic_compare_exchange_strong(&tx->fate, &was, FATE_KILLED);
		e = DG_OK;
		break;
	}
	pthread_mutex_unlock(&l->mu);
	return e;
}

/* ---- begin / free ---- */

dg_err dgi_tx_begin(dgi_txsvc *s, dg_tx_concurrency conc, dg_tx_isolation iso,
    uint32_t timeout_ms, const char *label, dg_tx **out)
{
	if (s == NULL || out == NULL || (conc != DG_PESSIMISTIC && conc != DG_OPTIMISTIC) ||
	    (iso != DG_READ_COMMITTED && iso != DG_REPEATABLE_READ && iso != DG_SERIALIZABLE))
		return DG_ERR_INVAL;
	if (tl_current != NULL)
		return DG_ERR_STATE;
	struct near_tls *tls = near_tls();
	if (tls == NULL)
		return DG_ERR_NOMEM;
	dg_tx *tx = tls->spare;
	uint64_t heap = 0;
	if (tx != NULL) {
		tls->spare = NULL;
		dgi_txents_reset(tx->ents);
	} else {
		if ((tx = dgi_calloc(1, sizeof(*tx))) == NULL)
			return DG_ERR_NOMEM;
		if (dgi_txents_create(&tx->ents) != DG_OK) {
			dgi_free(tx);
			return DG_ERR_NOMEM;
		}
		pthread_mutex_init(&tx->mu, NULL);
		pthread_cond_init(&tx->cv, NULL);
		dg_buf_init(&tx->val);
		dg_buf_init(&tx->vals);
		dg_buf_init(&tx->wire);
		heap = sizeof(*tx) + dgi_txents_bytes(tx->ents);
	}
	tx->s = s;
	tx->id = (dgi_txid){ dgi_txsvc_self(s), atomic_fetch_add(&tx_seq_next, 1) };
	tx->conc = conc;
	tx->iso = iso;
	tx->timeout_ms = timeout_ms ? timeout_ms : DG_TX_TIMEOUT_DEFAULT;
	tx->deadline = dgi_now_ms() + tx->timeout_ms;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	tx->start_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
	tx->state = DGI_TXS_ACTIVE;
	tx->topver = 0;
	tx->nlocked = 0;
	__atomic_store_n(&tx->outstanding, 0, __ATOMIC_RELAXED);
	tx->arm_ng = 0;
	tx->commit_sent = false;
	tx->heap = heap;
	tx->label[0] = 0;
	if (label != NULL)
		snprintf(tx->label, sizeof(tx->label), "%s", label);
	atomic_store_explicit(&tx->fate, FATE_NONE, memory_order_relaxed);
	atomic_store_explicit(&tx->victim, false, memory_order_relaxed);
	atomic_store_explicit(&tx->shown, DGI_TXS_ACTIVE, memory_order_relaxed);
	atomic_store_explicit(&tx->nkeys, 0, memory_order_relaxed);
	live_link(tx);
	/* a caller waiting, between its calls too: with others in a tx or a
	 * wait — runnable, not counted as waiting, between the answers they
	 * got and their next call — nobody spins (transport.h) */
	dgi_wait_enter();
	atomic_fetch_add(&dgi_txsvc_near(s)->started, 1);
	tl_current = tx;
	*out = tx;
	return DG_OK;
}

static void tx_free(dg_tx *tx)
{
	live_unlink(tx);
	dgi_wait_leave();
	size_t vcap = tx->val.cap > tx->vals.cap ? tx->val.cap : tx->vals.cap, wcap = tx->wire.cap;
	atomic_fetch_add(&dgi_txsvc_near(tx->s)->heap, tx->heap);
	if (tl_current == tx)
		tl_current = NULL;
	struct near_tls *tls = near_tls();
	if (tls != NULL && tls->spare == NULL && vcap <= 64 * 1024 && wcap <= 64 * 1024) {
		tls->spare = tx;
		return;
	}
	tx_destroy(tx);
}

static void tx_destroy(dg_tx *tx)
{
	dgi_txents_destroy(tx->ents);
	dg_buf_free(&tx->val);
	dg_buf_free(&tx->vals);
	dg_buf_free(&tx->wire);
	pthread_mutex_destroy(&tx->mu);
	pthread_cond_destroy(&tx->cv);
	dgi_free(tx);
}

dg_tx *dg_tx_current(void)
{
	return tl_current;
}

dg_tx_state dg_tx_get_state(const dg_tx *tx)
{
	return tx != NULL ? (dg_tx_state)tx->state : DG_TX_UNKNOWN;
}

const char *dg_tx_state_name(dg_tx_state s)
{
	return dgi_txs_name((dgi_txs)s);
}

/* ---- requests ---- */

static void commit_on_answer(dg_tx *tx);

/* Under tx->mu: one answer due is in (a reply, or the sender's hold on an
 * armed round).  The last one of a PREPARE round armed for it, every
 * primary having answered DG_OK: true, the count left at 1 (the hold the
 * caller drops once it sent the COMMITs: commit_on_answer), so the waiting
 * thread sleeps on through both phases. */
static bool count_in(dg_tx *tx)
{
	if (tx->arm_ng != 0 && __atomic_load_n(&tx->outstanding, __ATOMIC_RELAXED) == 1) {
		bool ok = true;
		for (uint32_t i = 0; i < tx->arm_ng && ok; i++)
			ok = tx->arm_calls[i].answered && tx->arm_calls[i].err == DG_OK;
		tx->commit_ng = tx->arm_ng;
		tx->arm_ng = 0;
		if (ok)
			return true;
	}
	if (__atomic_sub_fetch(&tx->outstanding, 1, __ATOMIC_RELEASE) == 0)
		pthread_cond_broadcast(&tx->cv);
	return false;
}

static void call_done(struct call *c, dg_err err, int64_t idx, bool answered, bool applied)
{
	dg_tx *tx = c->tx;
	pthread_mutex_lock(&tx->mu);
	c->err = err;
	c->idx = idx;
	c->answered = answered;
	c->applied = applied;
	bool commit_now = count_in(tx);
	pthread_mutex_unlock(&tx->mu);
	if (commit_now)
		commit_on_answer(tx);
}

static void on_ack(void *ctx, dg_err err, const dg_msg_in *reply)
{
	const dgi_msg_tx_ctl *r = err == DG_OK ? reply->body : NULL;
	call_done(ctx, err != DG_OK ? err : (dg_err)r->res, r != NULL ? r->value : -1, r != NULL,
	    r != NULL && (r->flags & DGI_TXA_APPLIED) != 0);
}

static void on_lock_res(void *ctx, dg_err err, const dg_msg_in *reply)
{
	struct call *c = ctx;
	dg_tx *tx = c->tx;
	const dgi_msg_tx_lock_res *r = err == DG_OK ? reply->body : NULL;
	if (r != NULL) {
		err = (dg_err)r->res;
		tx->found = r->found != 0;
		tx->ver = (dgi_pver){ r->ver_topver, (uint64_t)r->ver_counter,
			(uint32_t)r->ver_order, 0 };
		tx->val.len = 0;
		if (err == DG_OK && tx->found && r->val.ptr != NULL) {
			if (dg_buf_reserve(&tx->val, r->val.len) != DG_OK) {
				err = DG_ERR_NOMEM;
			} else {
				memcpy(tx->val.data, r->val.ptr, r->val.len);
				tx->val.len = r->val.len;
			}
		}
	}
	call_done(c, err, -1, r != NULL, false);
}

/* Waits for every answer due (spinning first while the tx is the
 * process's only waiting caller: transport.h; it counts as one from
 * begin to end). */
static void wait_all(dg_tx *tx)
{
	(void)dgi_spin_zero(dgi_txsvc_tp(tx->s), &tx->outstanding);
	pthread_mutex_lock(&tx->mu); /* (also after the spin: the answers' writer unlocks) */
	while (__atomic_load_n(&tx->outstanding, __ATOMIC_RELAXED) > 0)
		pthread_cond_wait(&tx->cv, &tx->mu);
	pthread_mutex_unlock(&tx->mu);
}

static dg_err request(dg_tx *tx, struct call *c, uint64_t to, dg_msg_type type,
    const void *body, uint32_t timeout_ms, dg_reply_fn cb)
{
	c->tx = tx;
	c->err = DG_ERR_TIMEOUT;
	c->idx = -1;
	c->answered = false;
	c->applied = false;
	c->sent = true; /* (read by this thread only, after wait_all) */
	pthread_mutex_lock(&tx->mu);
	__atomic_add_fetch(&tx->outstanding, 1, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&tx->mu);
	dg_err e = dgi_txsvc_request(tx->s, to, type, body, timeout_ms ? timeout_ms : 1, cb, c);
	if (e != DG_OK) {
		c->sent = false;
		call_done(c, e, -1, false, false);
	}
	return e;
}

static bool retriable(dg_err e)
{
	return e == DG_ERR_REMAP || e == DG_ERR_NOT_READY || e == DG_ERR_CONN_BROKEN ||
	    e == DG_ERR_UNREACHABLE || e == DG_ERR_BUSY;
}

/* ---- failure: roll back everywhere ---- */

static void release_all(dg_tx *tx, uint32_t wait_ms)
{
	struct call calls[MAX_NODES];
	dgi_msg_tx_ctl m = { (int64_t)tx->id.node, (int64_t)tx->id.seq, 0, 0, 0 };
	for (uint32_t i = 0; i < tx->nlocked; i++)
		if (!dgi_txsvc_gone(tx->s, tx->locked[i])) /* (its locks left with it) */
			request(tx, &calls[i], tx->locked[i], DGI_MSG_TX_ROLLBACK, &m, wait_ms, on_ack);
	wait_all(tx);
	tx->nlocked = 0;
}

/* Moves tx by event ev through txstate.c's near table (the one definition
 * of the legal transitions); a refused one is a bug: logged, the state
 * stays. */
static void step(dg_tx *tx, dgi_txe ev)
{
	dgi_txs next;
	if (dgi_txs_next(DGI_TX_NEAR, tx->state, ev, &next) == DG_OK) {
		tx->state = next;
		atomic_store_explicit(&tx->shown, next, memory_order_relaxed);
		return;
	}
	dgi_log("error", "TX-STATE", "tx=%016llx:%llu state=%s event=%s",
	    (unsigned long long)tx->id.node, (unsigned long long)tx->id.seq,
	    dgi_txs_name(tx->state), dgi_txe_name(ev));
}

/* The tx failed with e: rolled back everywhere; returns the error the
 * caller sees. */
static dg_err fail_tx(dg_tx *tx, dg_err e)
{
	if (killed(tx))
		e = kill_err(tx); /* whatever the kill made the call fail with */
	else if (e == DG_ERR_TX_ROLLED_BACK && atomic_load(&tx->victim))
		e = DG_ERR_DEADLOCK; /* its commit began as it was chosen: refused for that */
	if (dgi_txs_final(tx->state) || tx->state == DGI_TXS_ROLLING_BACK)
		return e;
	step(tx, e == DG_ERR_TIMEOUT ? DGI_TXE_TIMEOUT : DGI_TXE_PREPARE_FAILED);
	if (dg_log_enabled(DG_LOG_DEBUG))
		dgi_log("debug", "TX-DEBUG", "tx fail: %s", dg_strerror(e));
	release_all(tx, release_wait(tx));
	step(tx, DGI_TXE_ROLLED_BACK);
	atomic_fetch_add(&dgi_txsvc_near(tx->s)->rolled_back, 1);
	switch (e) {
	case DG_ERR_DEADLOCK:
		atomic_fetch_add(&dgi_txsvc_near(tx->s)->deadlocks, 1);
		return e;
	case DG_ERR_TX_CONFLICT:
		atomic_fetch_add(&dgi_txsvc_near(tx->s)->conflicts, 1);
		return e;
	case DG_ERR_TIMEOUT:
		atomic_fetch_add(&dgi_txsvc_near(tx->s)->timeouts, 1);
		return e;
	case DG_ERR_NOMEM:
	case DG_ERR_LIMIT:
	case DG_ERR_TX_ROLLED_BACK:
	case DG_ERR_PARTITION_LOST:
	case DG_ERR_STORAGE:
	case DG_ERR_STORAGE_FULL:
	case DG_ERR_CLOSED:
	case DG_ERR_SEGMENTED: /* no majority here: said as such, at once */
		return e;
	default:
		/* the cause, for the operator: the caller sees "rolled back" */
		dgi_log("warn", "TX-ROLLED-BACK", "tx=%016llx:%llu cause=\"%s\"",
		    (unsigned long long)tx->id.node, (unsigned long long)tx->id.seq, dg_strerror(e));
		return DG_ERR_TX_ROLLED_BACK;
	}
}

/* ---- reads and locks ---- */

/* TX_LOCK on key's primary: lock (unless NOLOCK) and read (READ/NOLOCK);
 * the answer's value and version land in tx->val / tx->found / tx->ver. */
static dg_err lock_key(dg_tx *tx, dg_cache *c, uint32_t part, const uint8_t *key,
    uint32_t klen, int64_t flags, uint64_t *node)
{
	bool locking = !(flags & DGI_TXL_NOLOCK);
	long pause_us = LOCK_RETRY_FIRST_US;
	for (;;) {
		uint32_t left = left_ms(tx);
		if (left == 0)
			return DG_ERR_TIMEOUT;
		uint64_t own[8];
		int64_t tv;
		uint32_t n = dgi_cache_owners(c, part, own, DGI_OWNERS_BUF, &tv);
		dg_err e = DG_ERR_NOT_READY;
		if (n > 0 && locking && tx->topver != 0 && tv != tx->topver)
			return DG_ERR_TX_ROLLED_BACK; /* the topology changed under our locks */
		if (n > 0 && locking && !lockable_on(tx, own[0]))
			return DG_ERR_LIMIT;
		if (n > 0) {
			dgi_msg_tx_lock m = { (int64_t)tx->id.node, (int64_t)tx->id.seq, tx->start_ms,
				dgi_cache_id_of(c), left, { key, klen }, tv, part, flags };
			struct call call;
			request(tx, &call, own[0], DGI_MSG_TX_LOCK, &m, left + NET_SLACK_MS, on_lock_res);
			wait_all(tx);
			e = call.err;
			/* granted by a node that left this node's topology meanwhile
			 * (a primary woken from a pause answering on its old one):
			 * not a lock of the cluster's — map the key again */
			if (e == DG_OK && dgi_txsvc_gone(tx->s, own[0]))
				e = DG_ERR_NOT_READY;
			if (locking && (e == DG_OK || !retriable(e)))
				add_locked(tx, own[0]);
			if (killed(tx))
				return kill_err(tx); /* a lock granted after the kill goes too */
			if (e == DG_OK && locking && tx->topver == 0)
				tx->topver = tv;
			if (e == DG_OK && node != NULL)
				*node = own[0];
		}
		if (!retriable(e))
			return e;
		if (locking && tx->topver != 0 && tv != tx->topver)
			return DG_ERR_TX_ROLLED_BACK;
		/* map again and ask again: soon at first (the key's last write
		 * not yet on every backup: settled about a round trip later),
		 * then less and less often (a topology change) */
		sleep_us(pause_us);
		pause_us = pause_us * 2 < LOCK_RETRY_MAX_US ? pause_us * 2 : LOCK_RETRY_MAX_US;
	}
}

/* One key's TX_LOCK among several in flight at once (fetch_all): the answer
 * lands here, its value appended to tx->val at voff. */
struct fetched {
	struct call call;
	bool want;                  /* sent with the others (else: alone, as ever) */
	int64_t flags;              /* its DGI_TXL_* (0: lock only) */
	dg_err err;
	bool found;
	dgi_pver ver;
	size_t voff;
	uint32_t vlen;
	uint64_t node;              /* the primary asked */
	int64_t tv;                 /* the topology it was mapped under */
	uint32_t part;
	uint64_t hash;              /* the key's (repeats are found by it first) */
	struct fetched *gnext;      /* the next key of its TX_LOCK_ALL, or NULL */
};

/* A batch's release of one key (fetch_all): nobody waits for it. */
static void on_released(void *ctx, dg_err err, const dg_msg_in *reply)
{
	(void)ctx;
	(void)err;
	(void)reply;
}

/* One key's TX_LOCK_RES into f (tx->mu held); r NULL: not answered, err. */
static void fetched_res(dg_tx *tx, struct fetched *f, dg_err err, const dgi_msg_tx_lock_res *r)
{
	if (r != NULL) {
		err = (dg_err)r->res;
		f->found = r->found != 0;
		f->ver = (dgi_pver){ r->ver_topver, (uint64_t)r->ver_counter,
			(uint32_t)r->ver_order, 0 };
		f->voff = tx->vals.len;
		f->vlen = 0;
		if (err == DG_OK && f->found && r->val.ptr != NULL) {
			if (dg_buf_reserve(&tx->vals, r->val.len) != DG_OK) {
				err = DG_ERR_NOMEM;
			} else {
				memcpy(tx->vals.data + tx->vals.len, r->val.ptr, r->val.len);
				tx->vals.len += r->val.len;
				f->vlen = r->val.len;
			}
		}
	}
	f->call.err = err;
	f->call.answered = r != NULL;
}

static void on_lock_res_of(void *ctx, dg_err err, const dg_msg_in *reply)
{
	struct fetched *f = ctx;
	dg_tx *tx = f->call.tx;
	pthread_mutex_lock(&tx->mu);
	fetched_res(tx, f, err, err == DG_OK ? reply->body : NULL);
	if (__atomic_sub_fetch(&tx->outstanding, 1, __ATOMIC_RELEASE) == 0)
		pthread_cond_broadcast(&tx->cv);
	pthread_mutex_unlock(&tx->mu);
}

/* TX_LOCK_ALL_RES: each key of the group (chained from ctx, its first)
 * takes its item as a TX_LOCK_RES.  An answer that does not match the
 * request (the item count; empty: refused whole) leaves the keys not
 * answered, DG_ERR_CONN_BROKEN: each is asked again alone. */
static void on_lock_all_res(void *ctx, dg_err err, const dg_msg_in *reply)
{
	struct fetched *first = ctx;
	dg_tx *tx = first->call.tx;
	uint32_t want = 0, n = 0;
	for (struct fetched *f = first; f != NULL; f = f->gnext)
		want++;
	dg_reader rd;
	if (err == DG_OK) {
		const dg_msg_raw *m = reply->body;
		if (dgi_txla_open(&m->list, DGI_TXLAR_VALUES, &rd, &n) != DG_OK || n != want)
			err = DG_ERR_CONN_BROKEN;
	}
	pthread_mutex_lock(&tx->mu);
	for (struct fetched *f = first; f != NULL; f = f->gnext) {
		dgi_msg_tx_lock_res r;
		if (err == DG_OK && dgi_txla_res_get(&rd, &r) != DG_OK)
			err = DG_ERR_CONN_BROKEN;
		fetched_res(tx, f, err, err == DG_OK ? &r : NULL);
	}
	if (__atomic_sub_fetch(&tx->outstanding, 1, __ATOMIC_RELEASE) == 0)
		pthread_cond_broadcast(&tx->cv);
	pthread_mutex_unlock(&tx->mu);
}

static dg_err check_cache(dg_tx *tx, dg_cache *c)
{
	if (tx == NULL || c == NULL)
		return DG_ERR_INVAL;
	if (tx->state != DGI_TXS_ACTIVE)
		return DG_ERR_STATE;
	if (killed(tx))
		return fail_tx(tx, kill_err(tx));
	if (dg_cache_config_of(c)->atomicity != DG_TRANSACTIONAL)
		return DG_ERR_UNSUPPORTED;
	if (dgi_txsvc_segmented(tx->s))
		return fail_tx(tx, DG_ERR_SEGMENTED); /* no majority: at once */
	return DG_OK;
}

static void keys_changed(dg_tx *tx)
{
	atomic_store_explicit(&tx->nkeys, (uint32_t)dgi_txents_count(tx->ents),
	    memory_order_relaxed);
}

/* Does an access to entry e (NULL: untouched) need the key's lock first? */
static bool needs_lock(const dg_tx *tx, const dgi_txent *e, bool write)
{
	if (tx->conc != DG_PESSIMISTIC)
		return false;
	if (e == NULL)
		return write || tx->iso != DG_READ_COMMITTED;
	if (tx->iso == DG_READ_COMMITTED)
		return write && e->op == DGI_TXOP_READ && !e->read_locked;
	return false;
}

/* How a read of entry e (NULL: untouched) is answered: 0 from the entry
 * (the tx wrote the key, or read it and keeps what it read), else the
 * TX_LOCK flags of the read at the key's primary — DGI_TXL_READ under the
 * key's lock, DGI_TXL_NOLOCK without.  lock_it: as tx_read_as. */
static int64_t read_flags(const dg_tx *tx, const dgi_txent *e, bool lock_it)
{
	if (e != NULL && (e->op == DGI_TXOP_PUT || e->op == DGI_TXOP_REMOVE ||
	    (e->read && tx->iso != DG_READ_COMMITTED)))
		return 0;
	bool lock = needs_lock(tx, e, false) ||
	    (lock_it && tx->conc == DG_PESSIMISTIC && (e == NULL || !e->read_locked));
	return lock ? DGI_TXL_READ : DGI_TXL_NOLOCK;
}

/* Reads key inside the tx: *found, and the value appended to out (raw:
 * the byte string inside the BYTES value).  lock: a PESSIMISTIC tx reads
 * under the key's lock whatever its isolation (a compare-and-set). */
static dg_err tx_read_as(dg_tx *tx, dg_cache *c, const uint8_t *key, size_t klen, dg_buf *out,
    bool unwrap, bool *found_out, bool lock_it, const struct fetched *pf)
{
	dg_err e = check_cache(tx, c);
	if (e != DG_OK)
		return e;
	uint64_t hash;
	uint32_t part = dgi_cache_key_part(c, key, klen, &hash);
	if (dgi_cache_part_lost(c, part))
		return fail_tx(tx, DG_ERR_PARTITION_LOST); /* as the ATOMIC path says */
	uint32_t cid = dgi_cache_id_of(c);
	dgi_txent *en = dgi_txents_find(tx->ents, cid, key, (uint32_t)klen, hash);
	const uint8_t *v = NULL;
	uint32_t vlen = 0;
	bool found;
	int64_t flags = read_flags(tx, en, lock_it);
	if (flags == 0 && en->op == DGI_TXOP_PUT) {
		found = true;
		v = en->val;
		vlen = en->vlen;
	} else if (flags == 0 && en->op == DGI_TXOP_REMOVE) {
		found = false;
	} else if (flags == 0) {
		found = en->found;
		v = en->val;
		vlen = en->vlen;
	} else {
		bool lock = flags == DGI_TXL_READ;
		uint64_t at = 0;
		const uint8_t *rv;
		uint32_t rlen;
		dgi_pver ver;
		if (pf != NULL && pf->want && pf->flags == flags) { /* fetch_all's answer */
			if ((e = pf->err) != DG_OK)
				return fail_tx(tx, e);
			at = pf->node;
			found = pf->found;
			ver = pf->ver;
			rv = tx->vals.data + pf->voff;
			rlen = pf->vlen;
		} else {
			e = lock_key(tx, c, part, key, (uint32_t)klen, flags, &at);
			if (e != DG_OK)
				return fail_tx(tx, e);
			found = tx->found;
			ver = tx->ver;
			rv = tx->val.data;
			rlen = (uint32_t)tx->val.len;
		}
		size_t before = dgi_txents_bytes(tx->ents);
		e = dgi_txents_read(tx->ents, cid, part, key, (uint32_t)klen, hash,
		    found ? rv : NULL, found ? rlen : 0, ver.topver, ver.counter, ver.order, &en);
		tx->heap += dgi_txents_bytes(tx->ents) - before;
		keys_changed(tx);
		if (e != DG_OK)
			return fail_tx(tx, e);
		if (lock) {
			en->read_locked = true;
			en->origin = at; /* where the lock is: the tx prepares there */
		}
		v = found ? rv : NULL;
		vlen = found ? rlen : 0;
	}
	if (found_out != NULL)
		*found_out = found;
	if (!found)
		return DG_ERR_NOT_FOUND;
	if (out == NULL)
		return DG_OK;
	if (unwrap) {
		const uint8_t *p;
		size_t n;
		if ((e = dg_bytes_of(v, vlen, &p, &n)) != DG_OK)
			return e;
		v = p;
		vlen = (uint32_t)n;
	}
	if ((e = dg_buf_reserve(out, vlen)) != DG_OK)
		return e;
	memcpy(out->data + out->len, v, vlen);
	out->len += vlen;
	return DG_OK;
}

static dg_err tx_read(dg_tx *tx, dg_cache *c, const uint8_t *key, size_t klen, dg_buf *out,
    bool unwrap, bool *found_out)
{
	return tx_read_as(tx, c, key, klen, out, unwrap, found_out, false, NULL);
}

/* Writes (val NULL: removes) key inside the tx. */
static dg_err tx_write(dg_tx *tx, dg_cache *c, const uint8_t *key, size_t klen,
    const uint8_t *val, size_t vlen, bool *had, const struct fetched *pf)
{
	dg_err e = check_cache(tx, c);
	if (e != DG_OK)
		return e;
	if (key == NULL || klen == 0 || klen > DG_KEY_MAX || vlen > DG_VALUE_MAX)
		return DG_ERR_INVAL;
	if (dg_cache_config_of(c)->persistence && klen > DG_PERSIST_KEY_MAX)
		return DG_ERR_INVAL;
	uint64_t hash;
	uint32_t part = dgi_cache_key_part(c, key, klen, &hash);
	if (dgi_cache_part_lost(c, part))
		return fail_tx(tx, DG_ERR_PARTITION_LOST);
	uint32_t cid = dgi_cache_id_of(c);
	dgi_txent *en = dgi_txents_find(tx->ents, cid, key, (uint32_t)klen, hash);
	if (had != NULL) {
		/* what the key holds now, as this tx sees it (reads it if needed) */
		bool found = false;
		e = tx_read_as(tx, c, key, klen, NULL, false, &found, false, pf);
		if (e != DG_OK && e != DG_ERR_NOT_FOUND)
			return e;
		*had = found;
		en = dgi_txents_find(tx->ents, cid, key, (uint32_t)klen, hash);
	}
	uint64_t at = 0;
	if (needs_lock(tx, en, true)) {
		if (had == NULL && pf != NULL && pf->want && pf->flags == 0) /* fetch_all's lock */
			e = pf->err, at = pf->node;
		else
			e = lock_key(tx, c, part, key, (uint32_t)klen, 0, &at);
		if (e != DG_OK)
			return fail_tx(tx, e);
	}
	size_t before = dgi_txents_bytes(tx->ents);
	e = dgi_txents_write(tx->ents, cid, part, key, (uint32_t)klen, hash, val,
	    (uint32_t)vlen, &en);
	tx->heap += dgi_txents_bytes(tx->ents) - before;
	keys_changed(tx);
	if (e != DG_OK)
		return fail_tx(tx, e);
	if (tx->conc == DG_PESSIMISTIC) {
		en->read_locked = true; /* written under the key's lock */
		if (at != 0)
			en->origin = at;
	}
	return DG_OK;
}

/* ---- the plain operations of TRANSACTIONAL caches (cache.h's hook) ---- */

/* A compare-and-set's read (the current value into cur): what it compares
 * must still be the key's value when the tx commits.  PESSIMISTIC: read
 * under the key's lock (READ_COMMITTED too, whose reads otherwise take
 * none), held to the end; OPTIMISTIC (and PESSIMISTIC, against a lock
 * lost to a topology change): the entry's version is checked at prepare
 * against the one read — changed, the commit fails DG_ERR_TX_CONFLICT —
 * as a SERIALIZABLE read's is.  The tx's own write needs neither. */
static dg_err cas_read(dg_tx *tx, dg_cache *c, const uint8_t *key, size_t klen, dg_buf *cur,
    bool *found)
{
	dg_err e = check_cache(tx, c);
	if (e != DG_OK)
		return e;
	uint64_t hash;
	dgi_cache_key_part(c, key, klen, &hash);
	uint32_t cid = dgi_cache_id_of(c);
	dgi_txent *en = dgi_txents_find(tx->ents, cid, key, (uint32_t)klen, hash);
	bool own = en != NULL && (en->op == DGI_TXOP_PUT || en->op == DGI_TXOP_REMOVE);
	e = tx_read_as(tx, c, key, klen, cur, false, found, !own, NULL);
	if ((e != DG_OK && e != DG_ERR_NOT_FOUND) || own)
		return e;
	en = dgi_txents_find(tx->ents, cid, key, (uint32_t)klen, hash);
	if (en == NULL || !en->read)
		return e;
	en->check = true;
	if (tx->iso == DG_READ_COMMITTED) {
		/* read again just now (READ_COMMITTED reads are not cached): the
		 * version compared is this read's, not the first one's */
		en->ver_topver = tx->ver.topver;
		en->ver_counter = tx->ver.counter;
		en->ver_order = tx->ver.order;
	}
	return e;
}

static dg_err plain_op(dg_tx *tx, dg_cache *c, int op, const uint8_t *key, size_t klen,
    const uint8_t *exp, size_t elen, const uint8_t *val, size_t vlen, dg_buf *out,
    bool unwrap, int64_t *flag)
{
	bool found = false;
	dg_err e;
	switch (op) {
	case DGI_CACHE_OP_GET:
		return tx_read(tx, c, key, klen, out, unwrap, NULL);
	case DGI_CACHE_OP_PUT:
		e = tx_write(tx, c, key, klen, val, vlen, NULL, NULL);
		found = true;
		break;
	case DGI_CACHE_OP_REMOVE:
		e = tx_write(tx, c, key, klen, NULL, 0, &found, NULL);
		break;
	case DGI_CACHE_OP_PUT_IF_ABSENT:
	case DGI_CACHE_OP_REPLACE:
	case DGI_CACHE_OP_GET_AND_PUT:
		e = tx_read(tx, c, key, klen, op == DGI_CACHE_OP_GET_AND_PUT ? out : NULL, false,
		    &found);
		if (e != DG_OK && e != DG_ERR_NOT_FOUND)
			return e;
		e = DG_OK;
		if (op == DGI_CACHE_OP_GET_AND_PUT || found == (op == DGI_CACHE_OP_REPLACE))
			e = tx_write(tx, c, key, klen, val, vlen, NULL, NULL);
		if (op == DGI_CACHE_OP_PUT_IF_ABSENT)
			found = !found;
		break;
	case DGI_CACHE_OP_REPLACE_IF_EQ:
	case DGI_CACHE_OP_REMOVE_IF_EQ: {
		dg_buf *cur = &near_tls()->cas;
		cur->len = 0;
		e = cas_read(tx, c, key, klen, cur, &found);
		if (e != DG_OK && e != DG_ERR_NOT_FOUND)
			return e;
		e = DG_OK;
		found = found && cur->len == elen && (elen == 0 || memcmp(cur->data, exp, elen) == 0);
		if (found)
			e = tx_write(tx, c, key, klen, op == DGI_CACHE_OP_REPLACE_IF_EQ ? val : NULL,
			    op == DGI_CACHE_OP_REPLACE_IF_EQ ? vlen : 0, NULL, NULL);
		break;
	}
	default:
		return DG_ERR_INVAL;
	}
	if (e == DG_OK && flag != NULL)
		*flag = found;
	return e;
}

/* A plain operation on a TRANSACTIONAL cache: inside this thread's tx,
 * else (writes) as a one-operation PESSIMISTIC REPEATABLE_READ tx, so it
 * takes the key's lock like any tx — bounded, like every plain
 * operation, by the node's request_timeout_ms (not the tx default). */
dg_err dgi_tx_plain_op(void *ctx, dg_cache *c, int op, const uint8_t *key, size_t klen,
    const uint8_t *exp, size_t elen, const uint8_t *val, size_t vlen, dg_buf *out,
    bool unwrap, int64_t *flag)
{
	if (tl_current != NULL)
		return plain_op(tl_current, c, op, key, klen, exp, elen, val, vlen, out, unwrap,
		    flag);
	if (op == DGI_CACHE_OP_GET)
		return DG_ERR__COUNT; /* outside a tx: the committed value, as any read */
	dg_tx *tx;
	uint32_t timeout = dgi_grid_request_timeout(dgi_txsvc_grid(ctx));
	dg_err e = dgi_tx_begin(ctx, DG_PESSIMISTIC, DG_REPEATABLE_READ, timeout, "implicit", &tx);
	if (e != DG_OK)
		return e;
	e = plain_op(tx, c, op, key, klen, exp, elen, val, vlen, out, unwrap, flag);
	if (e == DG_OK)
		return dg_tx_commit(tx);
	dg_tx_rollback(tx);
	return e;
}

/* ---- encodings of raw byte strings (BYTES values) ---- */


static const uint8_t *as_bytes(dg_buf *b, const void *p, size_t n, size_t *len)
{
	b->len = 0;
	dg_writer w;
	dg_writer_init(&w, NULL, b);
	if (dg_write_bytes(&w, p, n) != DG_OK)
		return NULL;
	*len = b->len;
	return b->data;
}

dg_err dg_tx_get_val(dg_tx *tx, dg_cache *c, const uint8_t *key, size_t klen, dg_buf *val)
{
	if (key == NULL || klen == 0)
		return DG_ERR_INVAL;
	return tx_read(tx, c, key, klen, val, false, NULL);
}

dg_err dg_tx_put_val(dg_tx *tx, dg_cache *c, const uint8_t *key, size_t klen,
    const uint8_t *val, size_t vlen)
{
	if (val == NULL || vlen == 0)
		return DG_ERR_INVAL;
	return tx_write(tx, c, key, klen, val, vlen, NULL, NULL);
}

dg_err dg_tx_remove_val(dg_tx *tx, dg_cache *c, const uint8_t *key, size_t klen,
    bool *removed)
{
	return tx_write(tx, c, key, klen, NULL, 0, removed, NULL);
}

dg_err dg_tx_get(dg_tx *tx, dg_cache *c, const void *key, size_t klen, dg_buf *val)
{
	size_t kl;
	struct near_tls *t = key != NULL && klen > 0 ? near_tls() : NULL;
	if (key == NULL || klen == 0)
		return DG_ERR_INVAL;
	if (t == NULL)
		return DG_ERR_NOMEM;
	const uint8_t *k = as_bytes(&t->kenc, key, klen, &kl);
	if (k == NULL)
		return DG_ERR_INVAL;
	return tx_read(tx, c, k, kl, val, true, NULL);
}

dg_err dg_tx_put(dg_tx *tx, dg_cache *c, const void *key, size_t klen, const void *val,
    size_t vlen)
{
	size_t kl, vl;
	if (key == NULL || klen == 0 || (val == NULL && vlen > 0))
		return DG_ERR_INVAL;
	struct near_tls *t = near_tls();
	if (t == NULL)
		return DG_ERR_NOMEM;
	const uint8_t *k = as_bytes(&t->kenc, key, klen, &kl);
	const uint8_t *v = as_bytes(&t->venc, val ? val : "", vlen, &vl);
	if (k == NULL || v == NULL)
		return DG_ERR_INVAL;
	return tx_write(tx, c, k, kl, v, vl, NULL, NULL);
}

dg_err dg_tx_remove(dg_tx *tx, dg_cache *c, const void *key, size_t klen, bool *removed)
{
	size_t kl;
	if (key == NULL || klen == 0)
		return DG_ERR_INVAL;
	struct near_tls *t = near_tls();
	if (t == NULL)
		return DG_ERR_NOMEM;
	const uint8_t *k = as_bytes(&t->kenc, key, klen, &kl);
	if (k == NULL)
		return DG_ERR_INVAL;
	return tx_write(tx, c, k, kl, NULL, 0, removed, NULL);
}

/* The TX_LOCKs of a batch call (dg_tx_get_all, _put_all, _remove_all),
 * in flight at once: each key (keys + offs[i], length offs[i + 1] -
 * offs[i]) that needs its primary — to read it (write false: as
 * tx_read_as would, read_flags) or to lock it for a write (write true: as
 * tx_write would, needs_lock) — gets one TX_LOCK, all sent together, one
 * wait; f[i] keeps the answer for tx_read_as / tx_write.  A key this does
 * not plan — a repeat of an earlier one, its partition lost or its owners
 * unknown, mapped under another topology than the others or than the tx's
 * locks, past the tx's MAX_NODES — and one whose answer was retriable (a
 * topology change) goes alone (f[i].want false), as in a single call,
 * which says why or maps it again.
 *
 * Locks keep the caller's order.  Granted at once in any order, a batch
 * could hold a later key while it waits for an earlier one — a deadlock
 * with every tx that locks the same keys in that order (the discipline
 * callers use to avoid them; a long batch would be the victim of most).
 * So a batch's locks are asked at once without waiting (DGI_TXL_NOWAIT):
 * all granted, the batch is done in one round trip; one held by another
 * tx (DG_ERR_BUSY), the keys before it in the caller's order stay locked,
 * those after it are given back (DGI_TXL_RELEASE, that key alone) and
 * from it on the keys are locked one by one, in order, as single calls
 * would. */
static void fetch_all(dg_tx *tx, dg_cache *c, const uint8_t *keys, const size_t *offs, size_t n,
    bool write, struct fetched *f)
{
	uint32_t cid = dgi_cache_id_of(c), nsend = 0, nnew = 0;
	uint64_t fresh[MAX_NODES];  /* nodes these locks add to tx->locked */
	int64_t tv0 = 0;
	for (size_t i = 0; i < n; i++) {
		const uint8_t *k = keys + offs[i];
		uint32_t kl = (uint32_t)(offs[i + 1] - offs[i]);
		f[i].want = false;
		uint64_t hash, own[DGI_OWNERS_BUF];
		int64_t tv;
		uint32_t part = dgi_cache_key_part(c, k, kl, &hash);
		f[i].hash = hash;
		bool rep = false; /* (hashes first: n keys cost n^2/2 compares of them) */
		for (size_t j = 0; j < i && !rep; j++)
			rep = f[j].hash == hash && offs[j + 1] - offs[j] == kl &&
			    memcmp(keys + offs[j], k, kl) == 0;
		if (rep || dgi_cache_part_lost(c, part))
			continue;
		const dgi_txent *en = dgi_txents_find(tx->ents, cid, k, kl, hash);
		int64_t flags = write ? 0 : read_flags(tx, en, false);
		if ((write ? !needs_lock(tx, en, true) : flags == 0) ||
		    dgi_cache_owners(c, part, own, DGI_OWNERS_BUF, &tv) == 0 ||
		    (tv0 != 0 && tv != tv0))
			continue;
		if (!(flags & DGI_TXL_NOLOCK)) {
			if (tx->topver != 0 && tv != tx->topver)
				continue;
			bool have = false;
			for (uint32_t q = 0; q < tx->nlocked && !have; q++)
				have = tx->locked[q] == own[0];
			for (uint32_t q = 0; q < nnew && !have; q++)
				have = fresh[q] == own[0];
			if (!have && tx->nlocked + nnew >= MAX_NODES)
				continue;
			if (!have)
				fresh[nnew++] = own[0];
		}
		tv0 = tv;
		f[i].want = true;
		f[i].flags = flags;
		f[i].node = own[0];
		f[i].tv = tv;
		f[i].part = part;
		nsend++;
	}
	uint32_t left = left_ms(tx);
	if (nsend < 2 || left == 0) { /* one (or none): as a single call */
		for (size_t i = 0; i < n; i++)
			f[i].want = false;
		return;
	}
	tx->vals.len = 0;
	/* the keys of one primary chained (in the caller's order) behind the
	 * first: one TX_LOCK_ALL when there are several, else a TX_LOCK */
	struct { uint64_t node; struct fetched *tail; } grp[16];
	uint32_t ng = 0;
	for (size_t i = 0; i < n; i++)
		f[i].gnext = NULL;
	for (size_t i = 0; i < n; i++) {
		if (!f[i].want)
			continue;
		uint32_t j = 0;
		while (j < ng && grp[j].node != f[i].node)
			j++;
		if (j < ng) {
			grp[j].tail->gnext = &f[i];
			grp[j].tail = &f[i];
			f[i].want = false; /* (sent with its head; set again below) */
		} else if (ng < sizeof(grp) / sizeof(grp[0])) {
			grp[ng].node = f[i].node;
			grp[ng++].tail = &f[i];
		} /* (more primaries than that: the rest alone) */
	}
	struct near_tls *t = near_tls();
	for (size_t i = 0; i < n; i++) {
		if (!f[i].want)
			continue;
		dgi_msg_tx_lock m = { (int64_t)tx->id.node, (int64_t)tx->id.seq, tx->start_ms, cid,
			left, { keys + offs[i], (uint32_t)(offs[i + 1] - offs[i]) }, f[i].tv, f[i].part,
			f[i].flags | (f[i].flags & DGI_TXL_NOLOCK ? 0 : DGI_TXL_NOWAIT) };
		if (f[i].gnext == NULL || t == NULL) {
			/* (no buffer to encode a list: each alone, still chained so
			 * that the pass below counts them in) */
			for (struct fetched *q = f[i].gnext; q != NULL; q = q->gnext) {
				dgi_msg_tx_lock mq = m;
				size_t k = (size_t)(q - f);
				mq.key = (dg_bytes){ keys + offs[k], (uint32_t)(offs[k + 1] - offs[k]) };
				mq.part = q->part;
				mq.flags = q->flags | (q->flags & DGI_TXL_NOLOCK ? 0 : DGI_TXL_NOWAIT);
				request(tx, &q->call, q->node, DGI_MSG_TX_LOCK, &mq, left + NET_SLACK_MS,
				    on_lock_res_of);
			}
			request(tx, &f[i].call, f[i].node, DGI_MSG_TX_LOCK, &m, left + NET_SLACK_MS,
			    on_lock_res_of);
			continue;
		}
		dg_writer w;
		uint32_t cnt = 0;
		for (struct fetched *q = &f[i]; q != NULL; q = q->gnext)
			cnt++;
		t->lenc.len = 0;
		dg_writer_init(&w, dgi_txwire_registry(), &t->lenc);
		dg_write_list_begin(&w, cnt * DGI_TXLA_VALUES);
		for (struct fetched *q = &f[i]; q != NULL; q = q->gnext) {
			size_t k = (size_t)(q - f);
			dgi_msg_tx_lock it = m;
			it.key = (dg_bytes){ keys + offs[k], (uint32_t)(offs[k + 1] - offs[k]) };
			it.part = q->part;
			it.flags = q->flags | (q->flags & DGI_TXL_NOLOCK ? 0 : DGI_TXL_NOWAIT);
			dgi_txla_item_put(&w, &it);
			if (q != &f[i]) /* answered through the head's request */
				q->call = (struct call){ tx, DG_ERR_TIMEOUT, -1, false, true, false };
		}
		dg_write_end(&w);
		dg_err we = dg_writer_finish(&w);
		dgi_msg_tx_lock_all ma = { (int64_t)tx->id.node, (int64_t)tx->id.seq, tx->start_ms,
			cid, left, f[i].tv, { t->lenc.data, (uint32_t)t->lenc.len } };
		dg_err e = we != DG_OK ? we : request(tx, &f[i].call, f[i].node, DGI_MSG_TX_LOCK_ALL,
		    &ma, left + NET_SLACK_MS, on_lock_all_res);
		if (e != DG_OK) {
			/* not sent (request() answered the head): nobody answers
			 * the others */
			if (we != DG_OK)
				f[i].call = (struct call){ tx, we, -1, false, false, false };
			for (struct fetched *q = f[i].gnext; q != NULL; q = q->gnext)
				q->call = (struct call){ tx, e, -1, false, false, false };
		}
	}
	for (size_t i = 0; i < n; i++) /* the heads' keys are the batch's again */
		for (struct fetched *q = f[i].want ? f[i].gnext : NULL; q != NULL; q = q->gnext)
			q->want = true;
	wait_all(tx);
	atomic_fetch_add(&dgi_txsvc_near(tx->s)->batch_rounds, 1);
	bool dead = killed(tx), busy = false;
	for (size_t i = 0; i < n && !dead; i++)
		busy |= f[i].want && f[i].call.answered && f[i].call.err == DG_ERR_BUSY;
	if (busy) {
		/* from the first lock (in the caller's order) not granted on:
		 * one by one, in order.  The keys before it stay locked; those
		 * after it that were granted out of order are given back, each
		 * alone — no wait: the release goes ahead of any later request
		 * to that node on its connection */
		size_t j = 0;
		while (j < n && !(f[j].want && !(f[j].flags & DGI_TXL_NOLOCK) &&
		    f[j].call.err != DG_OK))
			j++;
		for (size_t i = j; i < n; i++) {
			if (!f[i].want || (f[i].flags & DGI_TXL_NOLOCK))
				continue;
			if (i > j && f[i].call.err == DG_OK) {
				add_locked(tx, f[i].node);
				dgi_msg_tx_lock m = { (int64_t)tx->id.node, (int64_t)tx->id.seq,
					tx->start_ms, cid, 0, { keys + offs[i],
					(uint32_t)(offs[i + 1] - offs[i]) }, f[i].tv, f[i].part,
					DGI_TXL_RELEASE };
				dgi_txsvc_request(tx->s, f[i].node, DGI_MSG_TX_LOCK, &m,
				    NET_SLACK_MS + left, on_released, NULL);
			}
			f[i].want = false;
		}
		atomic_fetch_add(&dgi_txsvc_near(tx->s)->batch_restarts, 1);
	}
	for (size_t i = 0; i < n; i++) {
		if (!f[i].want)
			continue;
		bool locking = !(f[i].flags & DGI_TXL_NOLOCK);
		dg_err e = f[i].call.err;
		/* (as lock_key: granted by a node that left meanwhile is no lock) */
		if (e == DG_OK && dgi_txsvc_gone(tx->s, f[i].node))
			e = DG_ERR_NOT_READY;
		if (locking && (e == DG_OK || !retriable(e)))
			add_locked(tx, f[i].node);
		if (e == DG_OK && locking && tx->topver == 0)
			tx->topver = f[i].tv;
		if (retriable(e) && !dead)
			f[i].want = false; /* alone: mapped again */
		f[i].err = dead ? kill_err(tx) : e;
	}
}

/* The encodings of a batch's keys, one after another in b: offs[i] where
 * key i begins, offs[n] the end. */
static dg_err encode_keys(dg_buf *b, const dg_kv *kvs, size_t n, size_t *offs)
{
	dg_writer w;
	dg_err e = DG_OK;
	b->len = 0;
	dg_writer_init(&w, NULL, b);
	for (size_t i = 0; i < n && e == DG_OK; i++) {
		if (kvs[i].key == NULL || kvs[i].klen == 0)
			return DG_ERR_INVAL;
		offs[i] = b->len;
		e = dg_write_bytes(&w, kvs[i].key, kvs[i].klen);
	}
	offs[n] = b->len;
	return e;
}

/* A batch's scratch: on the stack up to BATCH_STACK keys. */
#define BATCH_STACK 64

struct batch {
	size_t *offs;
	struct fetched *f;
	bool heap;
};

static dg_err batch_init(struct batch *b, size_t n, size_t *offs_st, struct fetched *f_st)
{
	b->heap = n > BATCH_STACK;
	b->offs = b->heap ? dgi_alloc(sizeof(*b->offs) * (n + 1)) : offs_st;
	b->f = b->heap ? dgi_alloc(sizeof(*b->f) * n) : f_st;
	return b->offs != NULL && b->f != NULL ? DG_OK : DG_ERR_NOMEM;
}

/* A batch call's start: its scratch (b, on the caller's stack up to
 * BATCH_STACK keys), the keys' encodings in t->kenc, the tx's checks and
 * fetch_all (write: as fetch_all's).  b is set up even on error
 * (batch_fini). */
static dg_err batch_start(dg_tx *tx, dg_cache *c, const dg_kv *kvs, size_t n, bool write,
    struct near_tls *t, struct batch *b, size_t *offs_st, struct fetched *f_st)
{
	dg_err e = batch_init(b, n, offs_st, f_st);
	if (e == DG_OK)
		e = encode_keys(&t->kenc, kvs, n, b->offs);
	if (e == DG_OK && (e = check_cache(tx, c)) == DG_OK)
		fetch_all(tx, c, t->kenc.data, b->offs, n, write, b->f);
	return e;
}

static void batch_fini(struct batch *b)
{
	if (b->heap) {
		dgi_free(b->offs);
		dgi_free(b->f);
	}
}

dg_err dg_tx_get_all(dg_tx *tx, dg_cache *c, dg_kv *kvs, size_t n, dg_buf *vals,
    size_t *found)
{
	if (kvs == NULL && n > 0)
		return DG_ERR_INVAL;
	struct near_tls *t = near_tls();
	if (t == NULL)
		return DG_ERR_NOMEM;
	size_t offs_st[BATCH_STACK + 1];
	struct fetched f_st[BATCH_STACK];
	struct batch b;
	dg_err e = batch_start(tx, c, kvs, n, false, t, &b, offs_st, f_st);
	size_t nf = 0;
	/* values go to vals; pointers are set at the end (vals may move) */
	for (size_t i = 0; i < n && e == DG_OK; i++) {
		size_t before = vals != NULL ? vals->len : 0;
		e = tx_read_as(tx, c, t->kenc.data + b.offs[i], b.offs[i + 1] - b.offs[i], vals, true,
		    NULL, false, &b.f[i]);
		if (e == DG_ERR_NOT_FOUND) {
			kvs[i].val = NULL;
			kvs[i].vlen = 0;
			e = DG_OK;
			continue;
		}
		if (e != DG_OK)
			break;
		nf++;
		kvs[i].val = (const void *)(uintptr_t)(before + 1); /* offset + 1 */
		kvs[i].vlen = vals != NULL ? vals->len - before : 0;
	}
	batch_fini(&b);
	if (e != DG_OK)
		return e;
	for (size_t i = 0; i < n; i++)
		if (kvs[i].val != NULL)
			kvs[i].val = vals != NULL ? vals->data + ((uintptr_t)kvs[i].val - 1) : NULL;
	if (found != NULL)
		*found = nf;
	return DG_OK;
}

/* dg_tx_put_all and dg_tx_remove_all (vals NULL): the locks (and, for
 * *removed, the reads) of all keys at once, then each write. */
static dg_err write_all(dg_tx *tx, dg_cache *c, const dg_kv *kvs, size_t n, bool put,
    size_t *removed)
{
	if (kvs == NULL && n > 0)
		return DG_ERR_INVAL;
	struct near_tls *t = near_tls();
	if (t == NULL)
		return DG_ERR_NOMEM;
	for (size_t i = 0; i < n && put; i++)
		if (kvs[i].val == NULL && kvs[i].vlen > 0)
			return DG_ERR_INVAL;
	size_t offs_st[BATCH_STACK + 1];
	struct fetched f_st[BATCH_STACK];
	struct batch b;
	dg_err e = batch_start(tx, c, kvs, n, removed == NULL, t, &b, offs_st, f_st);
	size_t nr = 0;
	for (size_t i = 0; i < n && e == DG_OK; i++) {
		const uint8_t *k = t->kenc.data + b.offs[i], *v = NULL;
		size_t kl = b.offs[i + 1] - b.offs[i], vl = 0;
		bool had = false;
		if (put && (v = as_bytes(&t->venc, kvs[i].val ? kvs[i].val : "", kvs[i].vlen,
		    &vl)) == NULL)
			e = DG_ERR_INVAL;
		else
			e = tx_write(tx, c, k, kl, v, vl, removed != NULL ? &had : NULL, &b.f[i]);
		nr += had;
	}
	batch_fini(&b);
	if (e == DG_OK && removed != NULL)
		*removed = nr;
	return e;
}

dg_err dg_tx_put_all(dg_tx *tx, dg_cache *c, const dg_kv *kvs, size_t n)
{
	return write_all(tx, c, kvs, n, true, NULL);
}

dg_err dg_tx_remove_all(dg_tx *tx, dg_cache *c, const dg_kv *kvs, size_t n, size_t *removed)
{
	return write_all(tx, c, kvs, n, false, removed);
}

/* ---- commit ---- */

struct group {                  /* the entries of one primary */
	uint64_t node;
	uint64_t origin;            /* resend: the primary that did not confirm */
	bool recopy;                /* resend: node applied them; DGI_TXP_RECOPY */
	uint32_t n;
	uint32_t first;             /* index into the order array */
};

struct ent_ref {
	uint64_t node;
	uint64_t origin;
	bool recopy;
	uint32_t cache_id;
	uint64_t hash;
	dgi_txent *e;
};

static int ref_cmp(const void *a, const void *b)
{
	const struct ent_ref *x = a, *y = b;
	if (x->node != y->node)
		return x->node < y->node ? -1 : 1;
	if (x->origin != y->origin)
		return x->origin < y->origin ? -1 : 1;
	if (x->recopy != y->recopy)
		return x->recopy ? 1 : -1;
	if (x->cache_id != y->cache_id)
		return x->cache_id < y->cache_id ? -1 : 1;
	if (x->hash != y->hash)
		return x->hash < y->hash ? -1 : 1;
	uint32_t m = x->e->klen < y->e->klen ? x->e->klen : y->e->klen;
	int c = memcmp(x->e->key, y->e->key, m);
	return c != 0 ? c : (int)x->e->klen - (int)y->e->klen;
}

/* Does entry e go to its primary at prepare, and with which op? */
static int64_t wire_op(const dg_tx *tx, const dgi_txent *e, bool resend)
{
	int64_t op = e->op == DGI_TXOP_PUT || e->op == DGI_TXOP_REMOVE ? e->op : 0;
	if (resend)
		return op;
	bool check = e->read && (e->check || (tx->conc == DG_PESSIMISTIC && e->read_locked &&
	    tx->iso != DG_READ_COMMITTED) ||
	    (tx->conc == DG_OPTIMISTIC && tx->iso == DG_SERIALIZABLE));
	return op | (check ? DGI_TXOP_CHECK : 0);
}

/* Maps the entries onto the current primaries: refs sorted by (node,
 * cache, hash, key), groups by node.  Entries whose op is 0 are left
 * out; only those with select[i] when select is not NULL. */
static dg_err map_entries(dg_tx *tx, struct ent_ref *refs, uint32_t *nrefs,
    struct group *groups, uint32_t *ngroups, bool resend, int64_t *topver)
{
	size_t n = dgi_txents_count(tx->ents);
	uint32_t k = 0;
	*topver = 0;
	for (size_t i = 0; i < n; i++) {
		dgi_txent *e = dgi_txents_at(tx->ents, i);
		if (wire_op(tx, e, resend) == 0)
			continue;
		dg_err err;
		dg_cache *c = dgi_grid_cache_by_id(dgi_txsvc_grid(tx->s), e->cache_id);
		if (c == NULL)
			return DG_ERR_CLOSED;
		uint64_t own[8];
		int64_t tv;
		if (!resend && tx->conc == DG_PESSIMISTIC && e->origin != 0) {
			/* locked on a primary under the tx's topology: it prepares
			 * there, under that topology (a topology change waits for
			 * it), even if the key has moved since */
			refs[k++] = (struct ent_ref){ e->origin, 0, false, e->cache_id, e->hash, e };
			*topver = tx->topver;
			continue;
		}
		if (resend && e->back_to != 0) {
			/* its record or its write is there: only there (on any
			 * topology) */
			if (!e->done)
				refs[k++] = (struct ent_ref){ e->back_to, e->origin, e->recopy, e->cache_id,
					e->hash, e };
			continue;
		}
		if (dgi_cache_owners(c, e->part, own, DGI_OWNERS_BUF, &tv) == 0)
			return DG_ERR_NOT_READY;
		if (*topver != 0 && tv != *topver)
			return DG_ERR_NOT_READY; /* affinities mid-change */
		*topver = tv;
		(void)err;
		if (resend && e->done)
			continue;
		refs[k++] = (struct ent_ref){ own[0], resend ? e->origin : 0, false, e->cache_id, e->hash,
			e };
	}
	qsort(refs, k, sizeof(refs[0]), ref_cmp);
	uint32_t ng = 0;
	for (uint32_t i = 0; i < k; i++) {
		if (ng == 0 || groups[ng - 1].node != refs[i].node ||
		    groups[ng - 1].origin != refs[i].origin || groups[ng - 1].recopy != refs[i].recopy) {
			if (ng == MAX_NODES)
				return DG_ERR_LIMIT;
			groups[ng++] = (struct group){ refs[i].node, refs[i].origin, refs[i].recopy, 0, i };
		}
		groups[ng - 1].n++;
	}
	*nrefs = k;
	*ngroups = ng;
	return DG_OK;
}

/* Encodes group g's entries into b (a LIST). */
static dg_err encode_group(dg_tx *tx, const struct ent_ref *refs, const struct group *g,
    bool resend, dg_buf *b)
{
	dg_writer w;
	dg_writer_init(&w, dgi_txwire_registry(), b);
	dg_err e = dg_write_list_begin(&w, g->n * DGI_TXWIRE_FIELDS);
	for (uint32_t i = 0; i < g->n && e == DG_OK; i++) {
		const dgi_txent *en = refs[g->first + i].e;
		int64_t op = wire_op(tx, en, resend);
		dgi_txwire_ent we = { en->cache_id, en->part, op, { en->key, en->klen },
			{ en->op == DGI_TXOP_PUT ? en->val : NULL, en->op == DGI_TXOP_PUT ? en->vlen : 0 },
			{ en->ver_topver, en->ver_counter, en->ver_order, 0 }, 0 };
		if (we.val.ptr == NULL && en->op == DGI_TXOP_PUT)
			we.val.ptr = (const uint8_t *)"";
		e = dgi_txwire_put(&w, &we);
	}
	return e != DG_OK ? e : dg_write_end(&w);
}

/* Sends PREPARE (flags) to every group; waits; the first failure in *bad. */
static dg_err prepare_groups(dg_tx *tx, const struct ent_ref *refs, const struct group *groups,
    uint32_t ng, int64_t topver, int64_t flags, struct call *calls, bool then_commit)
{
	dg_err e = DG_OK;
	size_t *offs = alloca(sizeof(size_t) * (ng + 1));
	for (uint32_t i = 0; i < ng; i++) /* not sent: a definite failure */
		calls[i] = (struct call){ .tx = tx, .err = DG_ERR_TIMEOUT, .idx = -1 };
	tx->wire.len = 0;
	for (uint32_t i = 0; i < ng && e == DG_OK; i++) {
		offs[i] = tx->wire.len;
		e = encode_group(tx, refs, &groups[i], (flags & DGI_TXP_RESEND) != 0, &tx->wire);
	}
	if (e != DG_OK)
		return e;
	offs[ng] = tx->wire.len;
	uint32_t left = left_ms(tx);
	if (left == 0)
		return DG_ERR_TIMEOUT;
	if (!(flags & DGI_TXP_RESEND)) {
		uint32_t more = 0; /* primaries not yet in tx->locked */
		for (uint32_t i = 0; i < ng; i++) {
			bool have = false;
			for (uint32_t k = 0; k < tx->nlocked && !have; k++)
				have = tx->locked[k] == groups[i].node;
			more += !have;
		}
		if (tx->nlocked + more > MAX_NODES)
			return DG_ERR_LIMIT;
	}
	if (then_commit) {
		/* armed: the last answer, every one DG_OK, sends the COMMITs
		 * (the hold keeps an answer before the last PREPARE went out
		 * from being the last) */
		pthread_mutex_lock(&tx->mu);
		tx->arm_ng = ng;
		tx->arm_groups = groups;
		tx->arm_calls = calls;
		tx->commit_sent = false;
		__atomic_add_fetch(&tx->outstanding, 1, __ATOMIC_RELAXED);
		pthread_mutex_unlock(&tx->mu);
	}
	for (uint32_t i = 0; i < ng; i++) {
		dgi_msg_tx_prepare m = { (int64_t)tx->id.node, (int64_t)tx->id.seq, tx->start_ms,
			left, topver, flags | (groups[i].recopy ? DGI_TXP_RECOPY : 0),
			(int64_t)groups[i].origin, ng, 0, 0,
			{ tx->wire.data + offs[i], (uint32_t)(offs[i + 1] - offs[i]) } };
		if (!(flags & DGI_TXP_RESEND))
			add_locked(tx, groups[i].node);
		request(tx, &calls[i], groups[i].node, DGI_MSG_TX_PREPARE, &m, left + NET_SLACK_MS, on_ack);
	}
	if (then_commit) {
		pthread_mutex_lock(&tx->mu);
		bool commit_now = count_in(tx); /* the hold */
		pthread_mutex_unlock(&tx->mu);
		if (commit_now)
			commit_on_answer(tx);
	}
	wait_all(tx);
	if (tx->commit_sent)
		return DG_OK; /* every primary prepared; calls[] holds the COMMITs' answers */
	for (uint32_t i = 0; i < ng; i++)
		if (calls[i].err != DG_OK)
			return calls[i].err;
	return DG_OK;
}

static int owner_applied(dg_tx *tx, struct dgi_txq_memo *m, const dgi_txent *e, uint64_t origin,
    bool want_resender, uint64_t *who);

/* After the decision: entries of primaries that did not confirm are
 * re-sent (one-phase, RESEND, naming the primary they were prepared on as
 * origin) until confirmed or the timeout.  They go back to that primary
 * while it is in the topology — it holds their prepared record, or
 * applied them — and to the keys' current primaries once it left (they
 * hold the backups' records, or its copies).  Entries a node applied
 * without every owner confirming (DGI_TXA_APPLIED) stay with that node,
 * which re-sends its copies (DGI_TXP_RECOPY): applying them anew
 * elsewhere, with a newer version, could overwrite what was written after
 * them there once their locks were released; that node gone, nobody can
 * vouch for them: the outcome is unknown. */
static dg_err finish_decided(dg_tx *tx, struct ent_ref *refs, struct group *groups,
    uint32_t ng, struct call *calls)
{
	bool lost = false;
	for (uint32_t i = 0; i < ng; i++) {
		if (calls[i].err != DG_OK && dg_log_enabled(DG_LOG_DEBUG))
			dgi_log("debug", "TX-DEBUG", "tx commit at %016llx: %s%s", (unsigned long long)groups[i].node,
			    dg_strerror(calls[i].err), calls[i].applied ? " (applied there)" : "");
		for (uint32_t j = 0; j < groups[i].n; j++) {
			dgi_txent *e = refs[groups[i].first + j].e;
			e->done = calls[i].err == DG_OK;
			e->origin = groups[i].origin != 0 ? groups[i].origin : groups[i].node;
			e->back_to = e->done ? 0 : groups[i].node;
			e->recopy = !e->done && (calls[i].applied || groups[i].recopy);
		}
	}
	for (;;) {
		size_t n = dgi_txents_count(tx->ents);
		struct dgi_txq_memo memo = { 0 }; /* this round's answers */
		for (size_t i = 0; i < n; i++) {
			dgi_txent *e = dgi_txents_at(tx->ents, i);
			if (e->back_to == 0 || e->done || !dgi_txsvc_gone(tx->s, e->back_to))
				continue;
			if (e->recopy) {
				/* it applied them (the primary they were prepared on)
				 * and left unconfirmed: an owner that applied its copies
				 * re-sends them; none: nobody can vouch for them */
				uint64_t who = 0;
				int a = e->back_to == e->origin ?
				    owner_applied(tx, &memo, e, e->back_to, true, &who) : 0;
				if (a > 0) {
					e->back_to = who;
				} else if (a == 0) {
					e->done = true;
					lost = true;
				} /* (-1: asked again next round) */
				continue;
			}
			/* the primary it was prepared on left.  An owner of the key
			 * that applied that primary's copies re-sends what it holds
			 * (RECOPY: that primary's version, or a later one).  Only
			 * when none did do the keys' current primaries apply the
			 * entries (they keep them prepared, or know nothing): a new
			 * primary that never got the copies would apply them anew,
			 * with a new version, over a later write the left primary
			 * made and copied to the other owner only (a cut reaches a
			 * node's peers one after another) — an acknowledged write
			 * lost (cluster_partition_netns, reg_tx;
			 * test_one_phase_resolved_by_the_owner_that_applied) */
			uint64_t who = 0;
			int a = owner_applied(tx, &memo, e, e->back_to, true, &who);
			if (a > 0) {
				e->back_to = who;
				e->recopy = true;
			} else if (a == 0) {
				e->back_to = 0; /* to the keys' current primaries */
			} /* (-1: asked again next round) */
		}
		uint32_t nrefs = 0, ng2 = 0;
		int64_t topver;
		dg_err e = map_entries(tx, refs, &nrefs, groups, &ng2, true, &topver);
		if (e == DG_OK && nrefs == 0) {
			if (lost)
				dgi_log("warn", "TX-UNKNOWN", "tx=%016llx:%llu phase=commit "
				    "why=\"a node that applied entries left before every owner confirmed "
				    "them\"", (unsigned long long)tx->id.node,
				    (unsigned long long)tx->id.seq);
			return lost ? DG_ERR_TX_UNKNOWN : DG_OK;
		}
		if (left_ms(tx) == 0)
			return DG_ERR_TX_UNKNOWN;
		sleep_ms(20); /* the topology catches up with the left primary */
		if (e != DG_OK)
			continue;
		prepare_groups(tx, refs, groups, ng2, topver, DGI_TXP_ONE_PHASE | DGI_TXP_RESEND,
		    calls, false);
		for (uint32_t i = 0; i < ng2; i++) {
			if (calls[i].err != DG_OK && dg_log_enabled(DG_LOG_DEBUG))
				dgi_log("debug", "TX-DEBUG", "tx resend at %016llx: %s%s",
				    (unsigned long long)groups[i].node, dg_strerror(calls[i].err),
				    calls[i].applied ? " (applied there)" : "");
			for (uint32_t j = 0; j < groups[i].n; j++) {
				dgi_txent *en = refs[groups[i].first + j].e;
				if (calls[i].err == DG_OK) {
					en->done = true;
				} else if (calls[i].applied) {
					en->back_to = groups[i].node; /* from now on, only there */
					en->recopy = true;
				} else if (en->back_to != 0 && !en->recopy &&
				    (calls[i].err == DG_ERR_REMAP || calls[i].err == DG_ERR_NOT_FOUND)) {
					en->back_to = 0; /* nothing there, not its primary: map */
				} else if (en->recopy && calls[i].err == DG_ERR_NOT_FOUND) {
					en->done = true; /* it cannot vouch for them any more */
					lost = true;
				}
			}
		}
	}
}

/* After a commit: the participants released their locks themselves;
 * locks on other nodes (a topology change moved keys since they were
 * taken) are released here. */
static void release_others(dg_tx *tx, const struct group *groups, uint32_t ng)
{
	uint32_t k = 0;
	for (uint32_t i = 0; i < tx->nlocked; i++) {
		bool part = false;
		for (uint32_t j = 0; j < ng && !part; j++)
			part = groups[j].node == tx->locked[i];
		if (!part)
			tx->locked[k++] = tx->locked[i];
	}
	tx->nlocked = k;
	if (k > 0)
		release_all(tx, release_wait(tx));
}

/* How long past its timeout a commit may spend learning the outcome of a
 * commit some primary did not answer (its PREPARE's answer comes up to
 * NET_SLACK_MS after the timeout). */
#define RESOLVE_GRACE_MS 1000

static uint32_t resolve_left(const dg_tx *tx)
{
	uint64_t now = dgi_now_ms(), until = tx->deadline + RESOLVE_GRACE_MS;
	return now < until ? (uint32_t)(until - now) : 0;
}

/* Primary `origin` left: which owner of e's key applied its copies
 * (dgi_txsvc_owner_applied, within resolve_left; m: the round's answers)? */
static int owner_applied(dg_tx *tx, struct dgi_txq_memo *m, const dgi_txent *e, uint64_t origin,
    bool want_resender, uint64_t *who)
{
	return dgi_txsvc_owner_applied(tx->s, m, e->cache_id, e->part, &tx->id, origin, 0,
	    want_resender, resolve_left(tx), who);
}

/* Primary g->node left: did a surviving owner of its keys apply its
 * entries (its copies, or a takeover of them)?  1 yes, 0 no (every owner
 * answered), -1 cannot tell (an owner did not answer, or the time to
 * learn it is up). */
static int owners_applied(dg_tx *tx, const struct ent_ref *refs, const struct group *g)
{
	struct dgi_txq_memo memo = { 0 }; /* each owner asked once */
	int res = 0;
	for (uint32_t i = 0; i < g->n && res != 1; i++) {
		int r = owner_applied(tx, &memo, refs[g->first + i].e, g->node, false, NULL);
		if (r != 0)
			res = r;
	}
	return res;
}

/* Has primary g->node (alive) committed the tx — recovery's doing, when
 * it took this node for gone?  1 yes (or committing), 0 no, -1 no answer. */
static int primary_committed(dg_tx *tx, const struct group *g)
{
	uint32_t left = resolve_left(tx);
	int64_t q = left > 0 ? dgi_txsvc_query(tx->s, g->node, &tx->id, 0, left) : -1;
	if (q < 0)
		return -1;
	return (q & 0xff) == DGI_TXQ_COMMITTED || (q & 0xff) == DGI_TXQ_COMMITTING;
}

/* The one primary p of a one-phase commit applied it, but not every owner
 * is known to have it (p did not get every backup's DG_OK, or its answer
 * was lost).  The decision is commit: join it — p re-sends its copies
 * (DGI_TXP_RECOPY) until every owner confirmed, or the outcome stays
 * unknown (the timeout, or p left). */
static dg_err join_one_phase(dg_tx *tx, struct ent_ref *refs, struct group *groups,
    struct call *calls)
{
	uint64_t p = groups[0].node;
	step(tx, DGI_TXE_PREPARED); /* it committed: the decision was made there */
	step(tx, DGI_TXE_COMMIT);
	calls[0].err = DG_ERR_TX_UNKNOWN;
	calls[0].applied = true;
	groups[0].origin = p;
	return finish_decided(tx, refs, groups, 1, calls);
}

/* The one primary of a one-phase commit did not answer: learn whether it
 * committed.  Alive, it is asked to roll back — it refuses (STATE) only
 * when it committed, and then the commit is joined (join_one_phase: its
 * copies may not have reached every owner).  Left, the tx committed iff a
 * surviving owner of its keys applied its copies: then the keys' current
 * primaries make sure every owner has them (a resend); an owner that does
 * not answer leaves it open (asked again).  No new lock is granted on
 * those keys meanwhile: this commit is in flight under the old topology
 * (the fence). */
static dg_err resolve_one_phase(dg_tx *tx, struct ent_ref *refs, struct group *groups,
    struct call *calls)
{
	uint64_t p = groups[0].node;
	for (;;) {
		uint32_t left = resolve_left(tx);
		if (left == 0)
			return DG_ERR_TX_UNKNOWN;
		if (dgi_txsvc_alive(tx->s, p)) {
			dgi_msg_tx_ctl m = { (int64_t)tx->id.node, (int64_t)tx->id.seq, 0, 0, 0 };
			request(tx, &calls[0], p, DGI_MSG_TX_ROLLBACK, &m, left, on_ack);
			wait_all(tx);
			if (calls[0].err == DG_OK)
				return DG_ERR_TX_ROLLED_BACK; /* it had not committed; now never will */
			if (calls[0].err == DG_ERR_STATE) {
				int64_t q = dgi_txsvc_query(tx->s, p, &tx->id, 0, left);
				if (q >= 0 && (q & 0xff) == DGI_TXQ_COMMITTED)
					return join_one_phase(tx, refs, groups, calls);
			}
			sleep_ms(20);
			continue;
		}
		int applied = owners_applied(tx, refs, &groups[0]);
		if (applied < 0) {
			sleep_ms(20);
			continue; /* an owner did not answer: it may hold the copies */
		}
		if (applied == 0)
			return DG_ERR_TX_ROLLED_BACK; /* its only copy left with it */
		step(tx, DGI_TXE_PREPARED); /* it committed: the decision was made there */
		step(tx, DGI_TXE_COMMIT);
		for (uint32_t i = 0; i < groups[0].n; i++) {
			refs[groups[0].first + i].e->done = false;
			refs[groups[0].first + i].e->origin = p;
		}
		calls[0].err = DG_ERR_CONN_BROKEN;
		calls[0].applied = false;
		groups[0].origin = p;
		return finish_decided(tx, refs, groups, 1, calls);
	}
}

/* After a failed PREPARE round: may every primary have prepared?  Not
 * when one refused (answered an error) or never got its PREPARE (not
 * sent): that one will not prepare now (a late PREPARE finds the tx
 * rolled back), so no one — recovery included — can commit the tx. */
static bool all_may_have_prepared(const struct call *calls, uint32_t ng)
{
	for (uint32_t i = 0; i < ng; i++)
		if (!calls[i].sent || (calls[i].answered && calls[i].err != DG_OK))
			return false;
	return true;
}

/* The first refusal of a PREPARE round (what the caller reports), else e. */
static dg_err first_refusal(const struct call *calls, uint32_t ng, dg_err e)
{
	for (uint32_t i = 0; i < ng; i++)
		if (calls[i].answered && calls[i].err != DG_OK)
			return calls[i].err;
	return e;
}

/* The PREPAREs went out and every primary may have prepared, but some did
 * not answer (why: the round's error): the tx may commit without this
 * node, since recovery commits a tx every primary of which prepared once
 * it takes the near node for gone.  Learn the outcome before saying
 * anything:
 *   - a primary committed it (recovery did), or a left primary's copies
 *     were applied: the decision is commit — *decided, the caller joins
 *     it (COMMIT to every primary, resends);
 *   - no primary committed (each answered, or left and no owner of its
 *     keys applied its copies), then every one still alive confirmed a
 *     ROLLBACK: the tx is rolled back everywhere, returns why;
 *   - neither learnt before the timeout (plus RESOLVE_GRACE_MS):
 *     DG_ERR_TX_UNKNOWN.
 * The primaries are asked before any is rolled back, so a commit decided
 * by recovery is joined rather than split.  One decided between the
 * question and the ROLLBACK (it refuses: STATE) is joined too — those
 * already rolled back stay so (the split recovery's assumption allows,
 * README "Known limits"): the caller's commit cannot be confirmed by
 * them, and ends DG_ERR_TX_UNKNOWN. */
static dg_err settle_prepare(dg_tx *tx, const struct ent_ref *refs, const struct group *groups,
    uint32_t ng, struct call *calls, dg_err why, bool *decided)
{
	bool undone[MAX_NODES] = { false }; /* rolled back there, for sure */
	bool asked = false;                  /* no primary committed it */
	dgi_msg_tx_ctl m = { (int64_t)tx->id.node, (int64_t)tx->id.seq, 0, 0, 0 };
	*decided = false;
	for (;;) {
		uint32_t left = resolve_left(tx);
		if (left == 0)
			return DG_ERR_TX_UNKNOWN;
		bool known = true;
		for (uint32_t i = 0; i < ng && !asked; i++) {
			if (undone[i])
				continue;
			bool alive = dgi_txsvc_alive(tx->s, groups[i].node);
			int c = alive ? primary_committed(tx, &groups[i]) :
			    owners_applied(tx, refs, &groups[i]);
			if (c > 0) {
				*decided = true;
				return DG_OK;
			}
			if (c < 0)
				known = false;
			else if (!alive)
				undone[i] = true; /* its prepared entries left with it */
		}
		asked = asked || known;
		if (!asked) {
			sleep_ms(20);
			continue;
		}
		bool sent[MAX_NODES] = { false };
		for (uint32_t i = 0; i < ng; i++)
			if (!undone[i] && (sent[i] = dgi_txsvc_alive(tx->s, groups[i].node)))
				request(tx, &calls[i], groups[i].node, DGI_MSG_TX_ROLLBACK, &m, left, on_ack);
		wait_all(tx);
		uint32_t open = 0;
		for (uint32_t i = 0; i < ng; i++) {
			if (undone[i])
				continue;
			if (sent[i] && calls[i].answered && calls[i].err == DG_ERR_STATE) {
				*decided = true; /* committed (or committing) there meanwhile */
				return DG_OK;
			}
			if (sent[i] && calls[i].answered && calls[i].err == DG_OK) {
				undone[i] = true;
				continue;
			}
			int c = sent[i] ? -1 : owners_applied(tx, refs, &groups[i]);
			if (c > 0) {
				*decided = true;
				return DG_OK;
			}
			undone[i] = c == 0;
			open += c != 0;
		}
		if (open == 0)
			return why;
		sleep_ms(20);
	}
}

/* Commit begins: from here a kill is refused (DG_ERR_CONFLICT) — unless
 * one came first, and then the tx rolls back. */
static bool seal(dg_tx *tx)
{
	int was = FATE_NONE;
	return atomic_compare_exchange_strong(&tx->fate, &was, FATE_SEALED);
}

/* The decision, taken by the last answer of a PREPARE round armed for it
 * (count_in), every primary prepared: as commit() would after its wait —
 * the steps, then a COMMIT to each primary — without waking the caller in
 * between; on the thread that got the answer (a reactor's, mostly: its
 * COMMITs ride on the round's writes).  Then the round's hold is dropped:
 * the caller wakes once every COMMIT answered, calls[] holding their
 * answers, and goes on as after its own COMMITs (finish_decided). */
static void commit_on_answer(dg_tx *tx)
{
	step(tx, DGI_TXE_PREPARED);
	step(tx, DGI_TXE_COMMIT); /* the decision */
	tx->commit_sent = true;
	dgi_msg_tx_ctl cm = { (int64_t)tx->id.node, (int64_t)tx->id.seq, 0, 0, 0 };
	uint32_t left = left_ms(tx);
	for (uint32_t i = 0; i < tx->commit_ng; i++)
		request(tx, &tx->arm_calls[i], tx->arm_groups[i].node, DGI_MSG_TX_COMMIT, &cm,
		    left + NET_SLACK_MS, on_ack);
	atomic_fetch_add(&dgi_txsvc_near(tx->s)->commit_on_answer, 1);
	pthread_mutex_lock(&tx->mu);
	(void)count_in(tx); /* the hold (disarmed: count_in cannot fire again) */
	pthread_mutex_unlock(&tx->mu);
}

static dg_err commit(dg_tx *tx)
{
	if (tx->state != DGI_TXS_ACTIVE)
		return tx->state == DGI_TXS_ROLLED_BACK ? DG_ERR_TX_ROLLED_BACK : DG_ERR_STATE;
	if (dgi_txsvc_segmented(tx->s) || !seal(tx)) {
		/* segmented: nothing was prepared yet, nothing will be */
		dg_err k = fail_tx(tx, dgi_txsvc_segmented(tx->s) ? DG_ERR_SEGMENTED :
		    DG_ERR_TX_ROLLED_BACK);
		dgi_txsvc_near_done(tx->s, &tx->id, false, true);
		return k;
	}
	size_t n = dgi_txents_count(tx->ents);
	struct ent_ref *refs = n <= 64 ? alloca(sizeof(*refs) * (n ? n : 1)) :
	    dgi_alloc(sizeof(*refs) * n);
	if (refs == NULL)
		return fail_tx(tx, DG_ERR_NOMEM);
	struct group groups[MAX_NODES];
	struct call calls[MAX_NODES];
	uint32_t nrefs = 0, ng = 0;
	int64_t topver = 0, inflight = 0;
	dg_err e;
	for (;;) {
		e = map_entries(tx, refs, &nrefs, groups, &ng, false, &topver);
		if (e != DG_ERR_NOT_READY || left_ms(tx) == 0)
			break;
		sleep_ms(5);
	}
	/* the topology fence: a change waits for older txs; commit under the
	 * new one once every node reported (the near's own view of it) */
	while (e == DG_OK && ng > 0 && topver != tx->topver &&
	    !dgi_txsvc_fence_open(tx->s, topver) && left_ms(tx) > 0) {
		sleep_ms(2);
		e = map_entries(tx, refs, &nrefs, groups, &ng, false, &topver);
	}
	if (e == DG_ERR_NOT_READY)
		e = DG_ERR_TIMEOUT;
	if (e != DG_OK)
		goto out_fail;
	dgi_txsvc_near_enter(tx->s, topver);
	inflight = topver;
	if (ng == 0) {
		/* nothing to write or check: release the locks, done */
		release_all(tx, release_wait(tx));
		step(tx, DGI_TXE_COMMIT); /* nothing can refuse */
		step(tx, DGI_TXE_COMMITTED);
		atomic_fetch_add(&dgi_txsvc_near(tx->s)->committed, 1);
		goto out;
	}
	/* locks on nodes that are not participants (a topology change moved
	 * the keys): release them */
	step(tx, DGI_TXE_PREPARE);
	if (ng == 1) {
		e = prepare_groups(tx, refs, groups, 1, topver, DGI_TXP_ONE_PHASE, calls, false);
		if (e != DG_OK && calls[0].answered && calls[0].applied)
			e = join_one_phase(tx, refs, groups, calls);
		else if (e != DG_OK && calls[0].sent && !calls[0].answered)
			e = resolve_one_phase(tx, refs, groups, calls);
		if (e == DG_OK || e == DG_ERR_TX_UNKNOWN) {
			/* the one answer (or what was learnt) stands for all three */
			if (tx->state == DGI_TXS_PREPARING) {
				step(tx, DGI_TXE_PREPARED);
				step(tx, DGI_TXE_COMMIT);
			}
			step(tx, e == DG_OK ? DGI_TXE_COMMITTED : DGI_TXE_TIMEOUT);
			dgi_txsvc_near_done(tx->s, &tx->id, true, e == DG_OK);
			if (e == DG_OK) {
				atomic_fetch_add(&dgi_txsvc_near(tx->s)->committed, 1);
				atomic_fetch_add(&dgi_txsvc_near(tx->s)->one_phase, 1);
			}
			release_others(tx, groups, 1);
			goto out;
		}
		goto out_fail;
	}
	if (atomic_load(&dgi_tx_crash_point) == 3) {
		prepare_groups(tx, refs, groups, 1, topver, 0, calls, false);
		e = DG_ERR_TX_UNKNOWN;
		goto out;
	}
	/* the COMMITs go out from the last PREPARE answer (commit_on_answer):
	 * from the reactor that got it, in no other handler's call chain.
	 * Not when this node is a participant (its own answer comes from its
	 * own handlers, which may hold their locks); nor for a caller alone,
	 * which spins through its waits rather than sleeping and sends them
	 * as soon as its spin sees the answers (transfer_*_1c p50 200-206
	 * us that way, 219-234 from the reactor); nor when a test stops the
	 * commit in between (a crash point) */
	bool arm = atomic_load(&dgi_tx_crash_point) == 0 && !dgi_wait_alone(dgi_txsvc_tp(tx->s));
	for (uint32_t i = 0; i < ng && arm; i++)
		arm = groups[i].node != dgi_txsvc_self(tx->s);
	e = prepare_groups(tx, refs, groups, ng, topver, 0, calls, arm);
	if (e == DG_OK && tx->commit_sent)
		goto committing;
	if (e == DG_OK && atomic_load(&dgi_tx_crash_point) == 4) {
		atomic_store(&dgi_tx_cut_node, tx->id.node);
		for (uint32_t i = 0; i < ng; i++) {
			calls[i].err = DG_ERR_TIMEOUT;
			calls[i].answered = false;
		}
		e = DG_ERR_TIMEOUT;
	}
	if (e != DG_OK && all_may_have_prepared(calls, ng)) {
		/* no primary refused: the outcome is not ours to assume */
		bool decided;
		e = settle_prepare(tx, refs, groups, ng, calls, e, &decided);
		if (e == DG_ERR_TX_UNKNOWN) {
			/* this node decided nothing but roll back; that it could
			 * not confirm: a primary may commit by recovery */
			step(tx, DGI_TXE_PREPARE_FAILED);
			release_all(tx, release_wait(tx));
			step(tx, DGI_TXE_RECOVERED_COMMIT);
			dgi_txsvc_near_done(tx->s, &tx->id, false, true);
			dgi_log("warn", "TX-UNKNOWN", "tx=%016llx:%llu phase=prepare",
			    (unsigned long long)tx->id.node, (unsigned long long)tx->id.seq);
			goto out;
		}
	} else if (e != DG_OK) {
		e = first_refusal(calls, ng, e); /* rolled back for sure */
	}
	if (e != DG_OK)
		goto out_fail;
	step(tx, DGI_TXE_PREPARED);
	step(tx, DGI_TXE_COMMIT); /* the decision */
	dgi_msg_tx_ctl cm = { (int64_t)tx->id.node, (int64_t)tx->id.seq, 0, 0, 0 };
	uint32_t left = left_ms(tx);
	int crash = atomic_load(&dgi_tx_crash_point);
	atomic_fetch_add(&dgi_txsvc_near(tx->s)->commit_waited, 1);
	if (crash == 5) {
		atomic_store(&dgi_tx_crash_reached, 5); /* every primary prepared */
		sleep_ms(500);
		crash = 0;
		left = left_ms(tx);
	}
	uint32_t ncommit = crash == 2 ? 1 : crash == 1 ? 0 : ng;
	for (uint32_t i = 0; i < ncommit; i++)
		request(tx, &calls[i], groups[i].node, DGI_MSG_TX_COMMIT, &cm, left + NET_SLACK_MS, on_ack);
	wait_all(tx);
	if (crash != 0) {
		e = DG_ERR_TX_UNKNOWN;
		goto out;
	}
committing:
	e = finish_decided(tx, refs, groups, ng, calls);
	step(tx, e == DG_OK ? DGI_TXE_COMMITTED : DGI_TXE_TIMEOUT);
	dgi_txsvc_near_done(tx->s, &tx->id, true, e == DG_OK);
	if (e == DG_OK)
		atomic_fetch_add(&dgi_txsvc_near(tx->s)->committed, 1);
	release_others(tx, groups, ng);
	goto out;
out_fail:
	e = fail_tx(tx, e);
	dgi_txsvc_near_done(tx->s, &tx->id, false, true);
out:
	if (inflight != 0)
		dgi_txsvc_near_leave(tx->s, inflight);
	if (n > 64)
		dgi_free(refs);
	return e;
}

dg_err dg_tx_commit(dg_tx *tx)
{
	if (tx == NULL)
		return DG_ERR_INVAL;
	dg_err e = commit(tx);
	tx_free(tx);
	return e;
}

dg_err dg_tx_rollback(dg_tx *tx)
{
	if (tx == NULL)
		return DG_ERR_INVAL;
	dg_err e = DG_OK;
	if (tx->state == DGI_TXS_ACTIVE) {
		step(tx, DGI_TXE_ROLLBACK);
		release_all(tx, release_wait(tx));
		step(tx, DGI_TXE_ROLLED_BACK);
		atomic_fetch_add(&dgi_txsvc_near(tx->s)->rolled_back, 1);
	}
	tx_free(tx);
	return e;
}

void dgi_tx_near_stats(dgi_txsvc *s, dg_tx_metrics *out)
{
	out->started = atomic_load(&dgi_txsvc_near(s)->started);
	out->committed = atomic_load(&dgi_txsvc_near(s)->committed);
	out->rolled_back = atomic_load(&dgi_txsvc_near(s)->rolled_back);
	out->conflicts = atomic_load(&dgi_txsvc_near(s)->conflicts);
	out->deadlocks = atomic_load(&dgi_txsvc_near(s)->deadlocks);
	out->timeouts = atomic_load(&dgi_txsvc_near(s)->timeouts);
	out->one_phase = atomic_load(&dgi_txsvc_near(s)->one_phase);
	out->heap_bytes = atomic_load(&dgi_txsvc_near(s)->heap);
}
