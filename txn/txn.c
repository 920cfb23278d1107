/*
 * txn.c — the near side of transactions: the public API of txn/txn.h
 * (the commit itself in txnear_commit.c; txnear_int.h what both share).
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
#include "txnear_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* lock_key's pauses before it asks again after a retriable answer: the
 * first, doubled each time up to the last (a key whose last write is not
 * yet on every backup — refused so to a TX_LOCK_ALL item or this node's
 * own request; a remote TX_LOCK waits for it, txlock.c — is settled
 * about a round trip later; a topology change takes milliseconds) */
#define LOCK_RETRY_FIRST_US 400
#define LOCK_RETRY_MAX_US 5000

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

void dgi_txn_add_locked(dg_tx *tx, uint64_t node)
{
	for (uint32_t i = 0; i < tx->nlocked; i++)
		if (tx->locked[i] == node)
			return;
	if (tx->nlocked < MAX_NODES) /* (lockable_on was asked first) */
		tx->locked[tx->nlocked++] = node;
}

uint32_t dgi_txn_left_ms(const dg_tx *tx)
{
	uint64_t now = dgi_now_ms();
	return now < tx->deadline ? (uint32_t)(tx->deadline - now) : 0;
}

uint32_t dgi_txn_release_wait(const struct dg_tx *tx)
{
	uint32_t left = dgi_txn_left_ms(tx);
	return left > 2000 ? 2000 : left < 200 ? 200 : left;
}

static void sleep_us(long us)
{
	struct timespec ts = { us / 1000000, (us % 1000000) * 1000L };
	nanosleep(&ts, NULL);
}

void dgi_txn_sleep_ms(long ms)
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

void dgi_txn_tx_free(dg_tx *tx)
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
	/* an answer's writer that counted its answer in may not have
	 * unlocked yet (dgi_txn_wait_all returns on the count) */
	pthread_mutex_lock(&tx->mu);
	pthread_mutex_unlock(&tx->mu);
	pthread_mutex_destroy(&tx->mu);
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

/* The last answer of a PREPARE round armed for it (dgi_txn_count_in):
 * every primary answered DG_OK? The round is disarmed either way. */
static bool commit_armed(void *arg)
{
	dg_tx *tx = arg;
	if (tx->arm_ng == 0)
		return false;
	bool ok = true;
	for (uint32_t i = 0; i < tx->arm_ng && ok; i++)
		ok = tx->arm_calls[i].answered && tx->arm_calls[i].err == DG_OK;
	tx->commit_ng = tx->arm_ng;
	tx->arm_ng = 0;
	return ok;
}

/* One answer due is in (a reply, or the sender's hold on an armed round),
 * its struct call written.  The last one of a PREPARE round armed for it,
 * every primary having answered DG_OK: true, the count left at 1 (the
 * hold the caller drops once it sent the COMMITs:
 * dgi_txn_commit_on_answer), so the waiting thread sleeps on through both
 * phases.  No lock: the count itself tells the last answer
 * (dgi_due_done_or_keep). */
bool dgi_txn_count_in(dg_tx *tx)
{
	return dgi_due_done_or_keep(&tx->outstanding, commit_armed, tx);
}

static void call_done(struct call *c, dg_err err, int64_t idx, bool answered, bool applied)
{
	dg_tx *tx = c->tx;
	c->err = err;
	c->idx = idx;
	c->answered = answered;
	c->applied = applied;
	if (dgi_txn_count_in(tx))
		dgi_txn_commit_on_answer(tx);
}

void dgi_txn_on_ack(void *ctx, dg_err err, const dg_msg_in *reply)
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
void dgi_txn_wait_all(dg_tx *tx)
{
	dgi_due_wait(dgi_txsvc_tp(tx->s), &tx->outstanding);
}

dg_err dgi_txn_request(dg_tx *tx, struct call *c, uint64_t to, dg_msg_type type,
    const void *body, uint32_t timeout_ms, dg_reply_fn cb)
{
	c->tx = tx;
	c->err = DG_ERR_TIMEOUT;
	c->idx = -1;
	c->answered = false;
	c->applied = false;
	c->sent = true; /* (read by this thread only, after wait_all) */
	dgi_due_add(&tx->outstanding, 1);
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

void dgi_txn_release_all(dg_tx *tx, uint32_t wait_ms)
{
	struct call calls[MAX_NODES];
	dgi_msg_tx_ctl m = { (int64_t)tx->id.node, (int64_t)tx->id.seq, 0, 0, 0 };
	for (uint32_t i = 0; i < tx->nlocked; i++)
		if (!dgi_txsvc_gone(tx->s, tx->locked[i])) /* (its locks left with it) */
			dgi_txn_request(tx, &calls[i], tx->locked[i], DGI_MSG_TX_ROLLBACK, &m, wait_ms, dgi_txn_on_ack);
	dgi_txn_wait_all(tx);
	tx->nlocked = 0;
}

/* Moves tx by event ev through txstate.c's near table (the one definition
 * of the legal transitions); a refused one is a bug: logged, the state
 * stays. */
void dgi_txn_step(dg_tx *tx, dgi_txe ev)
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
dg_err dgi_txn_fail_tx(dg_tx *tx, dg_err e)
{
	if (killed(tx))
		e = kill_err(tx); /* whatever the kill made the call fail with */
	else if (e == DG_ERR_TX_ROLLED_BACK && atomic_load(&tx->victim))
		e = DG_ERR_DEADLOCK; /* its commit began as it was chosen: refused for that */
	if (dgi_txs_final(tx->state) || tx->state == DGI_TXS_ROLLING_BACK)
		return e;
	dgi_txn_step(tx, e == DG_ERR_TIMEOUT ? DGI_TXE_TIMEOUT : DGI_TXE_PREPARE_FAILED);
	if (dg_log_enabled(DG_LOG_DEBUG))
		dgi_log("debug", "TX-DEBUG", "tx fail: %s", dg_strerror(e));
	dgi_txn_release_all(tx, dgi_txn_release_wait(tx));
	dgi_txn_step(tx, DGI_TXE_ROLLED_BACK);
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
		uint32_t left = dgi_txn_left_ms(tx);
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
			dgi_txn_request(tx, &call, own[0], DGI_MSG_TX_LOCK, &m, left + NET_SLACK_MS, on_lock_res);
			dgi_txn_wait_all(tx);
			e = call.err;
			/* granted by a node that left this node's topology meanwhile
			 * (a primary woken from a pause answering on its old one):
			 * not a lock of the cluster's — map the key again */
			if (e == DG_OK && dgi_txsvc_gone(tx->s, own[0]))
				e = DG_ERR_NOT_READY;
			if (locking && (e == DG_OK || !retriable(e)))
				dgi_txn_add_locked(tx, own[0]);
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
	(void)dgi_due_done(&tx->outstanding);
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
	(void)dgi_due_done(&tx->outstanding);
	pthread_mutex_unlock(&tx->mu);
}

static dg_err check_cache(dg_tx *tx, dg_cache *c)
{
	if (tx == NULL || c == NULL)
		return DG_ERR_INVAL;
	if (tx->state != DGI_TXS_ACTIVE)
		return DG_ERR_STATE;
	if (killed(tx))
		return dgi_txn_fail_tx(tx, kill_err(tx));
	if (dg_cache_config_of(c)->atomicity != DG_TRANSACTIONAL)
		return DG_ERR_UNSUPPORTED;
	if (dgi_txsvc_segmented(tx->s))
		return dgi_txn_fail_tx(tx, DG_ERR_SEGMENTED); /* no majority: at once */
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
		return dgi_txn_fail_tx(tx, DG_ERR_PARTITION_LOST); /* as the ATOMIC path says */
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
				return dgi_txn_fail_tx(tx, e);
			at = pf->node;
			found = pf->found;
			ver = pf->ver;
			rv = tx->vals.data + pf->voff;
			rlen = pf->vlen;
		} else {
			e = lock_key(tx, c, part, key, (uint32_t)klen, flags, &at);
			if (e != DG_OK)
				return dgi_txn_fail_tx(tx, e);
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
			return dgi_txn_fail_tx(tx, e);
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
		return dgi_txn_fail_tx(tx, DG_ERR_PARTITION_LOST);
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
			return dgi_txn_fail_tx(tx, e);
	}
	size_t before = dgi_txents_bytes(tx->ents);
	e = dgi_txents_write(tx->ents, cid, part, key, (uint32_t)klen, hash, val,
	    (uint32_t)vlen, &en);
	tx->heap += dgi_txents_bytes(tx->ents) - before;
	keys_changed(tx);
	if (e != DG_OK)
		return dgi_txn_fail_tx(tx, e);
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
	uint32_t left = dgi_txn_left_ms(tx);
	if (nsend < 2 || left == 0) { /* one (or none): as a single call */
		for (size_t i = 0; i < n; i++)
			f[i].want = false;
		return;
	}
	tx->vals.len = 0;
	/* the keys of one primary chained (in the caller's order) behind the
	 * first: one TX_LOCK_ALL when there are several, else a TX_LOCK — or
	 * several, in order, when the keys would pass half a frame (keys of up
	 * to 64 KiB: a batch of them was refused DG_ERR_LIMIT,
	 * test_tx_get_all_keys_larger_than_a_frame) */
	struct { uint64_t node; struct fetched *tail; size_t bytes; } grp[16];
	size_t room = dg_tp_recv_max(dgi_txsvc_tp(tx->s)) / 2;
	uint32_t ng = 0;
	for (size_t i = 0; i < n; i++)
		f[i].gnext = NULL;
	for (size_t i = 0; i < n; i++) {
		if (!f[i].want)
			continue;
		size_t kb = offs[i + 1] - offs[i] + 64; /* (an item's other values) */
		uint32_t j = ng;
		while (j > 0 && grp[j - 1].node != f[i].node)
			j--; /* (that primary's last group) */
		if (j > 0 && grp[j - 1].bytes + kb <= room) {
			grp[j - 1].tail->gnext = &f[i];
			grp[j - 1].tail = &f[i];
			grp[j - 1].bytes += kb;
			f[i].want = false; /* (sent with its head; set again below) */
		} else if (ng < sizeof(grp) / sizeof(grp[0])) {
			grp[ng].node = f[i].node;
			grp[ng].bytes = 1024 + kb;
			grp[ng++].tail = &f[i];
		} /* (more groups than that: the rest alone) */
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
				dgi_txn_request(tx, &q->call, q->node, DGI_MSG_TX_LOCK, &mq, left + NET_SLACK_MS,
				    on_lock_res_of);
			}
			dgi_txn_request(tx, &f[i].call, f[i].node, DGI_MSG_TX_LOCK, &m, left + NET_SLACK_MS,
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
		dg_err e = we != DG_OK ? we : dgi_txn_request(tx, &f[i].call, f[i].node, DGI_MSG_TX_LOCK_ALL,
		    &ma, left + NET_SLACK_MS, on_lock_all_res);
		if (e != DG_OK) {
			/* not sent (dgi_txn_request answered the head): nobody
			 * answers the others */
			if (we != DG_OK)
				f[i].call = (struct call){ tx, we, -1, false, false, false };
			for (struct fetched *q = f[i].gnext; q != NULL; q = q->gnext)
				q->call = (struct call){ tx, e, -1, false, false, false };
		}
	}
	for (size_t i = 0; i < n; i++) /* the heads' keys are the batch's again */
		for (struct fetched *q = f[i].want ? f[i].gnext : NULL; q != NULL; q = q->gnext)
			q->want = true;
	dgi_txn_wait_all(tx);
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
			/* (an item answered DG_ERR_NOT_READY may hold its lock: a
			 * value left out of a full answer, txlock.c lall_finish —
			 * given back likewise, or at j recorded for the rollback) */
			bool held = f[i].call.err == DG_OK || (f[i].call.answered &&
			    f[i].call.err == DG_ERR_NOT_READY);
			if (i == j && held)
				dgi_txn_add_locked(tx, f[i].node);
			if (i > j && held) {
				dgi_txn_add_locked(tx, f[i].node);
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
		/* an item the primary answered DG_ERR_NOT_READY may hold its lock
		 * there (a value left out of a full answer: txlock.c,
		 * lall_finish): the rollback must reach that node even if the
		 * key's own request fails */
		bool may_hold = f[i].call.answered && e == DG_ERR_NOT_READY;
		/* (as lock_key: granted by a node that left meanwhile is no lock) */
		if (e == DG_OK && dgi_txsvc_gone(tx->s, f[i].node))
			e = DG_ERR_NOT_READY;
		if (locking && (e == DG_OK || !retriable(e) || may_hold))
			dgi_txn_add_locked(tx, f[i].node);
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

dg_err dg_tx_rollback(dg_tx *tx)
{
	if (tx == NULL)
		return DG_ERR_INVAL;
	dg_err e = DG_OK;
	if (tx->state == DGI_TXS_ACTIVE) {
		dgi_txn_step(tx, DGI_TXE_ROLLBACK);
		dgi_txn_release_all(tx, dgi_txn_release_wait(tx));
		dgi_txn_step(tx, DGI_TXE_ROLLED_BACK);
		atomic_fetch_add(&dgi_txsvc_near(tx->s)->rolled_back, 1);
	}
	dgi_txn_tx_free(tx);
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
