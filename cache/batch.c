/*
 * batch.c — put_all, get_all and remove_all of an ATOMIC cache: every
 * key's operation in flight at once, one message per primary.
 *
 * Each key follows the single-key protocol (update.c, read.c): its own
 * update id, the primary's checks, FULL_SYNC's wait for every backup.  A
 * batch only does not run them one after another, nor send each alone.
 * First the keys whose primary (for a read: the owner it reads from) is
 * another node go as one UPDATE_ALL (GET_ALL) per primary, at most
 * DGI_MANY_MAX keys each, the frames for one peer in one write
 * (dg_tp_cork_begin).  The primary applies each item as the UPDATE it
 * stands for and sends its FULL_SYNC copies as one BACKUP_ALL per backup
 * (pending.c, dgi_copies_begin), answered by one BACKUP_ALL_ACK; it
 * answers the UPDATE_ALL once its last key is confirmed.  Then the keys
 * this node holds are done here, a FULL_SYNC write's wait parked on its
 * pending record, their copies gathered the same way; then the caller
 * waits once for all the answers.  A key answered with an error that
 * asks for another try (a remap, a primary not ready, a broken
 * connection; a read of an entry still pending on its primary) is
 * finished alone by the single-key path — an update with the same update
 * id, so a retry of an applied update is recognised.  So n keys over k
 * primaries cost one round trip and about 4k messages, not 5n
 * (`dgbench cache`, put_all_100 / get_all_100; PROTOCOL.md types 87-92).
 *
 * The batch's result is the error of the first key (in the caller's
 * order) that failed, DG_OK when none did.  Unlike a loop of single calls
 * the keys after a failed one were tried too.
 */
#include "cache_int.h"

#include <errno.h>
#include <pthread.h>
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

/* One message of many keys (UPDATE_ALL, GET_ALL): the keys of one
 * primary (at most DGI_MANY_MAX, and what fits one frame: group_add),
 * chained through next[] in the order they were given. */
struct group {
	dgi_grid *g;
	void *k;                    /* the batch's keys (struct ukey, struct gkey) */
	size_t *next;               /* per key: the next of its group, or GNONE */
	struct bwait *w;
	dg_node_id to;
	size_t first, last;
	uint32_t n;
	size_t bytes;               /* its items' (group_add's count) */
};

/* What an item of a batch message takes besides its key and value bytes
 * (its I64s, the BYTES headers), generously, and the message's head:
 * group_add fills a group up to recv_max by these. */
#define ITEM_ROOM 48
#define HEAD_ROOM 1024

#define GNONE SIZE_MAX

/* The groups' room for n keys in bs: *next gets n slots after them. */
static struct group *groups_room(dgi_bscratch *bs, size_t n, size_t **next)
{
	size_t gb = n * sizeof(struct group);
	uint8_t *p = dgi_bscratch_room(&bs->groups, &bs->groups_cap, gb + n * sizeof(size_t));
	if (p == NULL)
		return NULL;
	*next = (size_t *)(void *)(p + gb);
	return (struct group *)(void *)p;
}

/* Puts key i (its item `bytes`: key, value and ITEM_ROOM), of primary
 * to, into the last group of that primary when it has room, or a new one
 * (gr[*ng] then): a primary's keys keep their order from group to group.
 * A group has room while it holds fewer than DGI_MANY_MAX keys and the
 * item keeps it within max bytes (a group of one key always: a key and
 * value fit a frame).  Before, a count alone: 16 values of 1.5 MiB made a
 * 24 MiB UPDATE_ALL the transport refused, and every key went alone, one
 * round trip each (test_put_all_large_values_from_client). */
static void group_add(struct group *gr, size_t *ng, const struct group *proto, size_t i,
    dg_node_id to, size_t bytes, size_t max)
{
	size_t j = *ng;
	while (j > 0 && gr[j - 1].to != to)
		j--;
	if (j == 0 || gr[j - 1].n == DGI_MANY_MAX || gr[j - 1].bytes + bytes > max) {
		gr[*ng] = *proto;
		gr[*ng].to = to;
		gr[*ng].first = gr[*ng].last = i;
		gr[*ng].n = 0;
		gr[*ng].bytes = HEAD_ROOM;
		j = ++*ng;
	} else {
		gr[j - 1].next[gr[j - 1].last] = i;
		gr[j - 1].last = i;
	}
	gr[j - 1].next[i] = GNONE;
	gr[j - 1].n++;
	gr[j - 1].bytes += bytes;
}

/* The answer to group gr's message opened in *r: err, or
 * DG_ERR_CONN_BROKEN when it does not match the request (not a list of
 * gr->n items of `values` values). */
static dg_err group_open(const struct group *gr, dg_err err, const dg_msg_in *reply,
    uint32_t values, dg_reader *r)
{
	uint32_t n = 0;
	if (err == DG_OK && (dgi_many_open(gr->g->reg, reply->body, values, r, &n) != DG_OK ||
	    n != gr->n))
		err = DG_ERR_CONN_BROKEN;
	return err;
}

/* UPDATE_ALL_RES: each key's answer, as an UPDATE_RES gives one; the
 * group posts once.  An answer that does not match the request (item
 * count, decoding) counts as a broken connection: maybe applied, tried
 * again alone with the same update ids. */
static void on_update_all_res(void *ctx, dg_err err, const dg_msg_in *reply)
{
	struct group *gr = ctx;
	struct bwait *w = gr->w;
	struct ukey *keys = gr->k;
	dg_reader r;
	err = group_open(gr, err, reply, 3, &r);
	for (size_t i = gr->first; i != GNONE; i = gr->next[i]) {
		struct ukey *k = &keys[i];
		struct dgi_ures_item a;
		if (err == DG_OK && dgi_ures_item_get(&r, &a) != DG_OK)
			err = DG_ERR_CONN_BROKEN;
		if (err == DG_OK) {
			k->err = (dg_err)a.res;
			k->flag = a.flag;
			k->applied = a.applied != 0;
		} else {
			k->err = err;
			k->applied = err == DG_ERR_TIMEOUT || err == DG_ERR_CONN_BROKEN;
		}
	}
	sem_post(&w->sem); /* the last touch */
}

/* Sends group gr as one UPDATE_ALL (FULL_ASYNC: one-way, its keys done);
 * its keys go K_FLIGHT, or stay K_ALONE when it could not be sent.  The
 * number of answers to wait for: 1 or 0. */
static size_t send_group(dg_cache *c, dgi_bscratch *bs, struct group *gr, int op,
    int64_t topver, uint64_t deadline)
{
	dgi_grid *g = c->g;
	struct ukey *k = gr->k;
	dg_writer w;
	bs->mbuf.len = 0;
	dg_writer_init(&w, g->reg, &bs->mbuf);
	dg_write_list_begin(&w, gr->n * 4);
	for (size_t i = gr->first; i != GNONE; i = gr->next[i]) {
		const struct upd *u = &k[i].u;
		struct dgi_uall_item it = { u->part, (int64_t)u->op_seq, { u->key, u->klen },
			{ op == OP_REMOVE ? NULL : u->val, u->vlen } };
		dgi_uall_item_put(&w, &it);
	}
	dg_write_end(&w);
	if (dg_writer_finish(&w) != DG_OK)
		return 0;
	dg_write_sync sync = c->cfg.write_sync;
	dgi_msg_many m = { c->id, topver, op, sync, (int64_t)g->self,
		{ bs->mbuf.data, (uint32_t)bs->mbuf.len } };
	int to_state;
	size_t waits = 0;
	if (sync == DG_FULL_ASYNC) {
		if (dg_tp_send(g->tp, gr->to, DGI_MSG_UPDATE_ALL, &m) != DG_OK)
			return 0;
		to_state = K_DONE;
	} else {
		uint64_t now = dgi_now_ms();
		if (now >= deadline || dg_tp_request(g->tp, gr->to, DGI_MSG_UPDATE_ALL, &m,
		    (uint32_t)(deadline - now), on_update_all_res, gr) != DG_OK)
			return 0;
		to_state = K_FLIGHT;
		waits = 1;
	}
	for (size_t i = gr->first; i != GNONE; i = gr->next[i])
		k[i].state = to_state;
	return waits;
}

/* Waits for n posts on w->sem until deadline, then gives up the parked
 * local writes not answered (locals: their keys; each answered one's post
 * is still counted) and waits for the rest: remote requests end by their
 * own timeout. */
static void wait_round(dg_cache *c, struct bwait *w, size_t n, struct ukey *k, size_t nk,
    uint64_t deadline)
{
	bool timed = true;
	dgi_wait_enter();
	while (n > 0) {
		if (timed && dgi_spin_sem(c->g->tp, &w->sem, false)) {
			n--;
			continue;
		}
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
			dgi_part_lock(pt);
			if (dgi_pw_give_up(pt, &k[i].x))
				n--;
			dgi_part_unlock(pt);
		}
	}
	dgi_wait_leave();
}

/* ---- a thread's scratch ---- */

static pthread_key_t bs_key;
static pthread_once_t bs_once = PTHREAD_ONCE_INIT;

static void bs_free(void *p)
{
	dgi_bscratch *s = p;
	if (s == NULL)
		return;
	dgi_free(s->items);
	dgi_free(s->keys);
	dgi_free(s->groups);
	dg_buf_free(&s->mbuf);
	dg_buf_free(&s->enc);
	dg_buf_free(&s->rbuf);
	dg_buf_free(&s->lbuf);
	dgi_free(s);
}

static void bs_init(void)
{
	pthread_key_create(&bs_key, bs_free);
}

dgi_bscratch *dgi_bscratch_take(void)
{
	pthread_once(&bs_once, bs_init);
	dgi_bscratch *s = pthread_getspecific(bs_key);
	if (s == NULL) {
		if ((s = dgi_calloc(1, sizeof(*s))) == NULL)
			return NULL;
		dg_buf_init(&s->enc);
		dg_buf_init(&s->mbuf);
		dg_buf_init(&s->rbuf);
		dg_buf_init(&s->lbuf);
		if (pthread_setspecific(bs_key, s) != 0) {
			dgi_free(s);
			return NULL;
		}
	}
	return s;
}

void *dgi_bscratch_room(void **p, size_t *cap, size_t bytes)
{
	if (bytes <= *cap)
		return *p;
	void *n = dgi_alloc(bytes);
	if (n == NULL)
		return NULL;
	dgi_free(*p);
	*p = n;
	*cap = bytes;
	return n;
}

static void bs_trim(dg_buf *b)
{
	if (b->cap > BSCRATCH_KEEP)
		dg_buf_free(b);
}

void dgi_bscratch_put(dgi_bscratch *s)
{
	if (s->items_cap > BSCRATCH_KEEP) {
		dgi_free(s->items);
		s->items = NULL;
		s->items_cap = 0;
	}
	if (s->keys_cap > BSCRATCH_KEEP) {
		dgi_free(s->keys);
		s->keys = NULL;
		s->keys_cap = 0;
	}
	if (s->groups_cap > BSCRATCH_KEEP) {
		dgi_free(s->groups);
		s->groups = NULL;
		s->groups_cap = 0;
	}
	bs_trim(&s->enc);
	bs_trim(&s->mbuf);
	bs_trim(&s->rbuf);
	bs_trim(&s->lbuf);
}

/* ---- put_all / remove_all ---- */

dg_err dgi_batch_update(dg_cache *c, int op, dgi_bitem *it, size_t n)
{
	if (n == 0)
		return DG_OK;
	dgi_grid *g = c->g;
	dgi_bscratch *bs = dgi_bscratch_take();
	struct ukey *k = bs != NULL ? dgi_bscratch_room(&bs->keys, &bs->keys_cap, n * sizeof(*k)) :
	    NULL;
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
		/* the other primaries' keys first: one UPDATE_ALL per primary
		 * (per DGI_MANY_MAX keys), corked: one write per peer */
		size_t *next = NULL, ng = 0;
		struct group *gr = groups_room(bs, n, &next);
		struct group proto = { g, k, next, &w, 0, 0, 0, 0, 0 };
		size_t max = dg_tp_recv_max(g->tp);
		for (size_t i = 0; gr != NULL && i < n; i++) {
			struct upd *u = &k[i].u;
			dg_node_id primary = dgi_aff_owner(aff, u->part, 0);
			if (primary == 0 || primary == g->self ||
			    atomic_load_explicit(&c->lost[u->part], memory_order_relaxed))
				continue; /* here, below; or alone (it says why) */
			u->topver = aff->topver;
			u->fresh = false;
			group_add(gr, &ng, &proto, i, primary, (size_t)u->klen + u->vlen + ITEM_ROOM,
			    max);
		}
		bool corked = dg_tp_cork_begin();
		for (size_t j = 0; j < ng; j++)
			expect += send_group(c, bs, &gr[j], op, aff->topver, deadline);
		dg_tp_cork_end(corked);
		/* then this node's: applied now, a FULL_SYNC write parked; their
		 * copies to each backup gathered into one BACKUP_ALL, and corked
		 * — unless each apply waits for the disk (a persistent cache),
		 * which would hold back what other threads queue for those
		 * peers meanwhile */
		corked = !c->cfg.persistence && dg_tp_cork_begin();
		dgi_copies_begin(g, c);
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
				dgi_part_unlock(&c->parts[u->part]);
				k[i].state = K_LOCAL;
				expect++;
			} else {
				k[i].state = K_ANSWERED;
				k[i].err = e;
				k[i].flag = u->flag;
				k[i].applied = u->applied;
			}
		}
		dgi_copies_end(g);
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
	dgi_bscratch_put(bs);
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

/* GET_ALL_RES: each key's answer, as a GET_RES would be (values
 * appended to w->rbuf, under its lock: groups answer on any thread); the
 * group posts once.  A reply that does not match the request counts as a
 * broken connection: its keys are read again alone. */
static void on_get_all_res(void *ctx, dg_err err, const dg_msg_in *reply)
{
	struct group *gr = ctx;
	struct bwait *w = gr->w;
	struct gkey *keys = gr->k;
	dg_reader r;
	err = group_open(gr, err, reply, 2, &r);
	pthread_mutex_lock(&w->mu);
	for (size_t i = gr->first; i != GNONE; i = gr->next[i]) {
		struct gkey *k = &keys[i];
		struct dgi_gres_item a;
		dg_err e = err;
		if (e == DG_OK && dgi_gres_item_get(&r, &a) != DG_OK)
			e = err = DG_ERR_CONN_BROKEN;
		if (e == DG_OK && (e = (dg_err)a.res) == DG_OK) {
			k->at = w->rbuf.len;
			const uint8_t *v = a.val.ptr != NULL ? a.val.ptr : (const uint8_t *)"";
			e = w->unwrap ? dgi_unwrap_to(v, a.val.len, &w->rbuf) :
			    dgi_append(&w->rbuf, v, a.val.len);
			k->len = w->rbuf.len - k->at;
			k->remote_val = true;
		}
		k->err = e;
	}
	pthread_mutex_unlock(&w->mu);
	sem_post(&w->sem); /* the last touch */
}

/* Sends group gr as one GET_ALL: its keys go K_FLIGHT (0 answers to wait
 * for when it could not be sent: they stay K_ALONE). */
static size_t send_get_group(dg_cache *c, dgi_bscratch *bs, struct group *gr, int64_t topver,
    uint64_t deadline)
{
	dgi_grid *g = c->g;
	struct gkey *k = gr->k;
	dg_writer w;
	bs->mbuf.len = 0;
	dg_writer_init(&w, g->reg, &bs->mbuf);
	dg_write_list_begin(&w, gr->n * 2);
	for (size_t i = gr->first; i != GNONE; i = gr->next[i]) {
		struct dgi_gall_item it = { k[i].part, { k[i].key, k[i].klen } };
		dgi_gall_item_put(&w, &it);
	}
	dg_write_end(&w);
	if (dg_writer_finish(&w) != DG_OK)
		return 0;
	dgi_msg_many m = { c->id, topver, 0, 0, 0, { bs->mbuf.data, (uint32_t)bs->mbuf.len } };
	uint64_t now = dgi_now_ms();
	if (now >= deadline || dg_tp_request(g->tp, gr->to, DGI_MSG_GET_ALL, &m,
	    (uint32_t)(deadline - now), on_get_all_res, gr) != DG_OK)
		return 0;
	for (size_t i = gr->first; i != GNONE; i = gr->next[i]) {
		k[i].state = K_FLIGHT;
		k[i].from = gr->to;
	}
	return 1;
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
	dgi_bscratch *bs = dgi_bscratch_take();
	struct gkey *k = bs != NULL ? dgi_bscratch_room(&bs->keys, &bs->keys_cap, n * sizeof(*k)) :
	    NULL;
	if (k == NULL)
		return DG_ERR_NOMEM;
	struct bwait w;
	sem_init(&w.sem, 0, 0);
	pthread_mutex_init(&w.mu, NULL);
	w.rbuf = bs->rbuf; /* (handed back below: it may grow) */
	w.rbuf.len = 0;
	w.unwrap = unwrap;
	dg_buf lbuf = bs->lbuf;
	lbuf.len = 0;
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
		/* the other primaries' keys: one GET_ALL per primary (per
		 * DGI_MANY_MAX keys), corked: one write per peer */
		size_t *next = NULL, ng = 0;
		struct group *gr = groups_room(bs, n, &next);
		struct group proto = { g, k, next, &w, 0, 0, 0, 0, 0 };
		for (size_t i = 0; gr != NULL && i < n; i++) {
			struct gkey *q = &k[i];
			int role = dgi_aff_role(aff, q->part, g->self);
			dg_node_id primary = dgi_aff_owner(aff, q->part, 0);
			if (role == 0 || (role > 0 && c->cfg.read_from_backup) || primary == 0 ||
			    atomic_load_explicit(&c->lost[q->part], memory_order_relaxed))
				continue; /* here, below; or alone */
			group_add(gr, &ng, &proto, i, primary, (size_t)q->klen + ITEM_ROOM,
			    dg_tp_recv_max(g->tp));
		}
		bool corked = dg_tp_cork_begin();
		for (size_t j = 0; j < ng; j++)
			expect += send_get_group(c, bs, &gr[j], aff->topver, deadline);
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
		/* (DG_ERR_LIMIT: the primary's answer had no room for its value —
		 * read alone, and no remap: nothing moved) */
		bool no_room = tried && q->state == K_FLIGHT && q->err == DG_ERR_LIMIT;
		if (answered && q->state == K_FLIGHT && dgi_read_stale(g, c, q->part, q->from, seen))
			answered = false; /* from a node no longer the primary: read again */
		else if (tried && !answered && !no_room && !dgi_retriable(q->err)) {
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
			if (tried && !no_room)
				atomic_fetch_add_explicit(&c->remaps, 1, memory_order_relaxed);
			e = dgi_get_op(c, q->key, q->klen, vals, unwrap); /* alone (counted there) */
		}
		if (e == DG_OK) {
			if (answered)
				DGI_COUNT(c, hits, 1);
			it[i].flag = 1;
			it[i].val = NULL; /* (an offset until the end: vals may move) */
			it[i].vlen = (uint32_t)(vals->len - at);
			it[i].at = at;
			f++;
		} else if (e == DG_ERR_NOT_FOUND) {
			if (answered)
				DGI_COUNT(c, misses, 1);
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
	bs->lbuf = lbuf;
	bs->rbuf = w.rbuf;
	pthread_mutex_destroy(&w.mu);
	sem_destroy(&w.sem);
	dgi_bscratch_put(bs);
	if (found != NULL)
		*found = f;
	return first;
}
