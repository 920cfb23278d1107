/*
 * batch.c — put_all, get_all and remove_all of an ATOMIC cache: every
 * key's operation in flight at once.
 *
 * Each key follows the single-key protocol (update.c, read.c): its own
 * update id, the primary's checks, FULL_SYNC's wait for every backup.  A
 * batch only does not run them one after another.  First every key whose
 * primary (for a read: the owner it reads from) is another node is sent,
 * the frames for one peer in one write (dg_tp_cork_begin); then the keys
 * this node holds are done here, a FULL_SYNC write's wait parked on its
 * pending record; then the caller waits once for all the answers.  A key
 * answered with an error that asks for another try (a remap, a primary not
 * ready, a broken connection) is finished alone by the single-key path —
 * an update with the same update id, so a retry of an applied update is
 * recognised.  So n keys over k primaries cost about one round trip, not
 * n (`dgbench cache`, put_all_100 / get_all_100).
 *
 * The batch's result is the error of the first key (in the caller's
 * order) that failed, DG_OK when none did.  Unlike a loop of single calls
 * the keys after a failed one were tried too.
 */
#include "cache_int.h"

#include <errno.h>
#include <semaphore.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The round's answers: every callback and parked write posts sem once. */
struct bwait {
	sem_t sem;
	pthread_mutex_t mu;         /* rbuf (reads' values from callbacks) */
	dg_buf rbuf;
	bool unwrap;
};

enum { K_ALONE, K_FLIGHT, K_LOCAL, K_ANSWERED, K_DONE };

/* ---- updates ---- */

struct ukey {
	struct upd u;
	struct bwait *w;
	int state;
	dg_err err;
	int64_t flag;
	bool applied;               /* this round's attempt may have been applied */
	struct pw_wait x;           /* K_LOCAL: parked on the pending write */
};

static void on_update_res(void *ctx, dg_err err, const dg_msg_in *reply)
{
	struct ukey *k = ctx;
	struct bwait *w = k->w;
	if (err == DG_OK) {
		const dgi_msg_update_res *r = reply->body;
		err = (dg_err)r->res;
		k->flag = r->flag;
		k->applied = r->applied != 0;
	} else if (err == DG_ERR_TIMEOUT || err == DG_ERR_CONN_BROKEN) {
		k->applied = true; /* it may have reached the primary */
	}
	k->err = err;
	sem_post(&w->sem); /* the last touch */
}

/* Waits for n posts on w->sem until deadline, then gives up the parked
 * local writes not answered (locals: their keys; each answered one's post
 * is still counted) and waits for the rest: remote requests end by their
 * own timeout. */
static void wait_round(dg_cache *c, struct bwait *w, size_t n, struct ukey *k, size_t nk,
    uint64_t deadline)
{
	bool timed = true;
	while (n > 0) {
		if (!timed) {
			if (sem_wait(&w->sem) == 0)
				n--;
			continue;
		}
		uint64_t now = dgi_now_ms();
		struct timespec ts;
		dgi_abstime_in(&ts, deadline > now ? deadline - now : 0);
		if (sem_timedwait(&w->sem, &ts) == 0) {
			n--;
			continue;
		}
		if (errno == EINTR)
			continue;
		timed = false;
		for (size_t i = 0; k != NULL && i < nk; i++) {
			if (k[i].state != K_LOCAL)
				continue;
			dgi_part *pt = &c->parts[k[i].u.part];
			pthread_mutex_lock(&pt->mu);
			if (dgi_pw_give_up(pt, &k[i].x))
				n--;
			pthread_mutex_unlock(&pt->mu);
		}
	}
}

dg_err dgi_batch_update(dg_cache *c, int op, dgi_bitem *it, size_t n)
{
	if (n == 0)
		return DG_OK;
	dgi_grid *g = c->g;
	struct ukey *k = dgi_alloc(n * sizeof(*k));
	if (k == NULL)
		return DG_ERR_NOMEM;
	struct bwait w;
	sem_init(&w.sem, 0, 0);
	uint64_t deadline = dgi_now_ms() + g->cfg.request_timeout_ms;
	dgi_epoch_enter(); /* (cache_int.h, "Lifetime") */
	for (size_t i = 0; i < n; i++) {
		dgi_upd_init(c, &k[i].u, op, it[i].key, it[i].klen, NULL, 0, it[i].val,
		    it[i].vlen);
		k[i].w = &w;
		k[i].state = K_ALONE;
		k[i].err = DG_OK;
		k[i].flag = 0;
		k[i].applied = false;
	}
	dgi_aff *aff = atomic_load_explicit(&c->aff, memory_order_acquire);
	size_t expect = 0;
	if (aff != NULL && !atomic_load(&c->dead) && !dg_member_segmented(g->m)) {
		/* the other primaries' keys first, corked: one write per peer */
		bool corked = dg_tp_cork_begin();
		for (size_t i = 0; i < n; i++) {
			struct upd *u = &k[i].u;
			dg_node_id primary = dgi_aff_owner(aff, u->part, 0);
			if (primary == 0 || primary == g->self ||
			    atomic_load_explicit(&c->lost[u->part], memory_order_relaxed))
				continue; /* here, below; or alone (it says why) */
			u->topver = aff->topver;
			dgi_msg_update m = dgi_upd_msg(c, u);
			uint64_t now = dgi_now_ms();
			if (u->sync == DG_FULL_ASYNC) {
				if (dg_tp_send(g->tp, primary, DGI_MSG_UPDATE, &m) == DG_OK)
					k[i].state = K_DONE;
			} else if (now < deadline && dg_tp_request(g->tp, primary, DGI_MSG_UPDATE, &m,
			    (uint32_t)(deadline - now), on_update_res, &k[i]) == DG_OK) {
				k[i].state = K_FLIGHT;
				expect++;
			}
		}
		dg_tp_cork_end(corked);
		/* then this node's: applied now, a FULL_SYNC write parked; their
		 * copies to the backups corked too — unless each apply waits for
		 * the disk (a persistent cache), which would hold back what other
		 * threads queue for those peers meanwhile */
		corked = !c->cfg.persistence && dg_tp_cork_begin();
		for (size_t i = 0; i < n; i++) {
			struct upd *u = &k[i].u;
			if (k[i].state != K_ALONE || dgi_aff_owner(aff, u->part, 0) != g->self ||
			    atomic_load_explicit(&c->lost[u->part], memory_order_relaxed))
				continue;
			u->topver = aff->topver;
			dg_err e = dgi_primary_apply(g, c, u);
			if (e == DG_OK && u->pw != NULL) {
				struct pw_wait *x = &k[i].x;
				memset(x, 0, sizeof(*x));
				x->kind = PWW_WRITE;
				x->flag = u->flag;
				x->post = &w.sem;
				dgi_pw_attach(u->pw, x);
				pthread_mutex_unlock(&c->parts[u->part].mu);
				k[i].state = K_LOCAL;
				expect++;
			} else {
				k[i].state = K_ANSWERED;
				k[i].err = e;
				k[i].flag = u->flag;
				k[i].applied = u->applied;
			}
		}
		dg_tp_cork_end(corked);
	}
	wait_round(c, &w, expect, k, n, deadline);
	dg_err first = DG_OK;
	for (size_t i = 0; i < n; i++) {
		struct ukey *q = &k[i];
		bool maybe = false;
		if (q->state == K_LOCAL) {
			q->err = q->x.err;
			q->flag = q->u.flag;
			q->applied = q->x.applied;
		}
		if (q->state == K_FLIGHT || q->state == K_LOCAL || q->state == K_ANSWERED) {
			if (q->err == DG_OK) {
				q->state = K_DONE;
			} else {
				maybe = q->applied;
				if (!dgi_retriable(q->err) ||
				    (q->err == DG_ERR_CLOSED && atomic_load(&c->dead))) {
					q->err = maybe ? DG_ERR_TIMEOUT : q->err;
					q->state = K_DONE;
				} else {
					atomic_fetch_add_explicit(&c->remaps, 1, memory_order_relaxed);
				}
			}
		}
		if (q->state != K_DONE) /* the single-key path, with its update id */
			q->err = dgi_update_run(c, &q->u, deadline, maybe, &q->flag, NULL);
		it[i].err = q->err;
		it[i].flag = q->err == DG_OK ? q->flag : 0;
		if (first == DG_OK)
			first = q->err;
	}
	dgi_epoch_leave();
	sem_destroy(&w.sem);
	dgi_free(k);
	return first;
}

/* ---- reads ---- */

struct gkey {
	const uint8_t *key;
	uint32_t klen;
	uint32_t part;
	uint64_t hash;
	struct bwait *w;
	int state;
	dg_err err;
	dg_node_id from;            /* K_FLIGHT: the primary asked */
	size_t at, len;             /* the value: in w->rbuf (remote) or lbuf */
	bool remote_val;
};

static void on_get_res(void *ctx, dg_err err, const dg_msg_in *reply)
{
	struct gkey *k = ctx;
	struct bwait *w = k->w;
	if (err == DG_OK) {
		const dgi_msg_get_res *r = reply->body;
		if (r->found == 0) {
			err = DG_ERR_NOT_FOUND;
		} else {
			pthread_mutex_lock(&w->mu);
			k->at = w->rbuf.len;
			const uint8_t *v = r->val.ptr != NULL ? r->val.ptr : (const uint8_t *)"";
			err = w->unwrap ? dgi_unwrap_to(v, r->val.len, &w->rbuf) :
			    dgi_append(&w->rbuf, v, r->val.len);
			k->len = w->rbuf.len - k->at;
			k->remote_val = true;
			pthread_mutex_unlock(&w->mu);
		}
	}
	k->err = err;
	sem_post(&w->sem); /* the last touch */
}

dg_err dgi_batch_get(dg_cache *c, dgi_bitem *it, size_t n, bool unwrap, dg_buf *vals,
    size_t *found)
{
	size_t f = 0;
	if (n == 0) {
		if (found != NULL)
			*found = 0;
		return DG_OK;
	}
	dgi_grid *g = c->g;
	struct gkey *k = dgi_alloc(n * sizeof(*k));
	if (k == NULL)
		return DG_ERR_NOMEM;
	struct bwait w;
	sem_init(&w.sem, 0, 0);
	pthread_mutex_init(&w.mu, NULL);
	dg_buf_init(&w.rbuf);
	w.unwrap = unwrap;
	dg_buf lbuf;
	dg_buf_init(&lbuf);
	uint64_t deadline = dgi_now_ms() + g->cfg.request_timeout_ms;
	dgi_epoch_enter();
	for (size_t i = 0; i < n; i++) {
		struct gkey *q = &k[i];
		q->key = it[i].key;
		q->klen = it[i].klen;
		q->hash = dgi_key_hash(q->key, q->klen);
		q->part = dgi_part_of(q->hash, c->cfg.partitions);
		q->w = &w;
		q->state = K_ALONE;
		q->err = DG_OK;
		q->from = 0;
		q->at = q->len = 0;
		q->remote_val = false;
	}
	dgi_aff *aff = atomic_load_explicit(&c->aff, memory_order_acquire);
	int64_t seen = atomic_load(&g->topver);
	size_t expect = 0;
	if (aff != NULL && !atomic_load(&c->dead) && !dg_member_segmented(g->m)) {
		bool corked = dg_tp_cork_begin();
		for (size_t i = 0; i < n; i++) {
			struct gkey *q = &k[i];
			int role = dgi_aff_role(aff, q->part, g->self);
			dg_node_id primary = dgi_aff_owner(aff, q->part, 0);
			if (role == 0 || (role > 0 && c->cfg.read_from_backup) || primary == 0 ||
			    atomic_load_explicit(&c->lost[q->part], memory_order_relaxed))
				continue; /* here, below; or alone */
			dgi_msg_get m = { c->id, q->part, aff->topver, 0, { q->key, q->klen } };
			uint64_t now = dgi_now_ms();
			if (now < deadline && dg_tp_request(g->tp, primary, DGI_MSG_GET, &m,
			    (uint32_t)(deadline - now), on_get_res, q) == DG_OK) {
				q->state = K_FLIGHT;
				q->from = primary;
				expect++;
			}
		}
		dg_tp_cork_end(corked);
		for (size_t i = 0; i < n; i++) {
			struct gkey *q = &k[i];
			int role = dgi_aff_role(aff, q->part, g->self);
			if (q->state != K_ALONE || !(role == 0 || (role > 0 && c->cfg.read_from_backup)) ||
			    atomic_load_explicit(&c->lost[q->part], memory_order_relaxed))
				continue;
			uint64_t dl = 0;
			size_t at = lbuf.len;
			dg_err e = dgi_local_get(c, q->part, q->hash, q->key, q->klen, &lbuf, unwrap,
			    &dl);
			if (e == DG_OK || e == DG_ERR_NOT_FOUND) {
				q->state = K_ANSWERED;
				q->err = e;
				q->at = at;
				q->len = lbuf.len - at;
			} else {
				lbuf.len = at; /* NOT_READY (MOVING) and the rest: alone */
			}
		}
	}
	wait_round(c, &w, expect, NULL, 0, deadline);
	dg_err first = DG_OK;
	size_t base = vals->len;
	for (size_t i = 0; i < n && first == DG_OK; i++) {
		struct gkey *q = &k[i];
		bool tried = q->state == K_ANSWERED || q->state == K_FLIGHT;
		bool answered = tried && (q->err == DG_OK || q->err == DG_ERR_NOT_FOUND);
		if (answered && q->state == K_FLIGHT && dgi_read_stale(g, c, q->part, q->from, seen))
			answered = false; /* from a node no longer the primary: read again */
		else if (tried && !answered && !dgi_retriable(q->err)) {
			first = q->err; /* as the single read: lost, timed out, ... */
			break;
		}
		size_t at = vals->len;
		dg_err e;
		if (answered) {
			e = q->err;
			if (e == DG_OK)
				e = dgi_append(vals, (q->remote_val ? w.rbuf.data : lbuf.data) + q->at,
				    q->len);
		} else {
			if (tried)
				atomic_fetch_add_explicit(&c->remaps, 1, memory_order_relaxed);
			e = dgi_get_op(c, q->key, q->klen, vals, unwrap); /* alone (counted there) */
		}
		if (e == DG_OK) {
			if (answered)
				atomic_fetch_add_explicit(&c->hits, 1, memory_order_relaxed);
			it[i].flag = 1;
			it[i].val = NULL; /* (an offset until the end: vals may move) */
			it[i].vlen = (uint32_t)(vals->len - at);
			it[i].at = at;
			f++;
		} else if (e == DG_ERR_NOT_FOUND) {
			if (answered)
				atomic_fetch_add_explicit(&c->misses, 1, memory_order_relaxed);
			it[i].flag = 0;
			it[i].val = NULL;
			it[i].vlen = 0;
		} else {
			vals->len = at;
			first = e;
		}
		it[i].err = e;
	}
	dgi_epoch_leave();
	if (first != DG_OK)
		vals->len = base;
	dg_buf_free(&lbuf);
	dg_buf_free(&w.rbuf);
	pthread_mutex_destroy(&w.mu);
	sem_destroy(&w.sem);
	dgi_free(k);
	if (found != NULL)
		*found = f;
	return first;
}
