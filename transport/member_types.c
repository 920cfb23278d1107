/* member_types.c — cluster-wide type metadata (PROTOCOL.md, "Cluster-wide
 * types"): a type registered on one member is proposed to the
 * coordinator, announced to every member and accepted everywhere before
 * the registration returns; a joining node takes a snapshot of them all.
 */
#define _POSIX_C_SOURCE 200809L
#include "member_int.h"

#include <stdio.h>
#include <string.h>

struct announce {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int left;
	dg_err err;
	dg_member *m;
	dg_msg_in req;      /* a TYPE_PROPOSE to answer when all replied */
	bool reply;
};

static void announce_free(struct announce *a)
{
	member_put(a->m);
	pthread_cond_destroy(&a->cv);
	pthread_mutex_destroy(&a->mu);
	dgi_free(a);
}

static void announce_done(void *ctx, dg_err err, const dg_msg_in *in)
{
	struct announce *a = ctx;
	(void)in;
	pthread_mutex_lock(&a->mu);
	if (err == DG_ERR_CONFLICT)
		a->err = err; /* a node refused it: the proposer hears why */
	bool last = --a->left == 0;
	bool reply = a->reply; /* without reply, the waiter frees a once woken */
	if (last && !reply)
		pthread_cond_signal(&a->cv);
	pthread_mutex_unlock(&a->mu);
	if (last && reply) {
		if (a->err == DG_OK)
			dg_tp_reply(a->m->tp, &a->req, DG_MSG_TYPE_PROPOSE, &(dg_msg_bytes){ { (const uint8_t *)"", 0 } });
		else
			dg_tp_reply_error(a->m->tp, &a->req, a->err);
		announce_free(a);
	}
}

/* Announce a definition to every member but this node and `skip`; the
 * replies arrive in announce_done.  Returns how many were sent. */
static int announce_all(dg_member *m, struct announce *a, const uint8_t *def,
    size_t len, dg_node_id skip)
{
	dg_topology *t = dg_member_topology(m);
	dg_msg_bytes body = { { def, (uint32_t)len } };
	int sent = 0;
	pthread_mutex_lock(&a->mu);
	a->left = 1; /* held until all are sent */
	pthread_mutex_unlock(&a->mu);
	for (uint32_t i = 0; t != NULL && i < t->count; i++) {
		dg_node_id id = t->nodes[i].id;
		if (id == dg_tp_self(m->tp) || id == skip)
			continue;
		pthread_mutex_lock(&a->mu);
		a->left++;
		pthread_mutex_unlock(&a->mu);
		if (dg_tp_request(m->tp, id, DG_MSG_TYPE_ANNOUNCE, &body,
		    atomic_load_explicit(&m->ft_ms, memory_order_relaxed), announce_done, a) != DG_OK) {
			pthread_mutex_lock(&a->mu);
			a->left--;
			pthread_mutex_unlock(&a->mu);
		} else {
			sent++;
		}
	}
	dg_topology_release(t);
	announce_done(a, DG_OK, NULL); /* drop the hold */
	return sent;
}

void dgi_member_on_type_propose(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	dg_member *m = ctx;
	const dg_msg_bytes *b = in->body;
	dg_err e = dg_registry_accept(m->reg, b->data.ptr, b->data.len, NULL);
	if (e != DG_OK) {
		dgi_log("warn", "TYPE-REFUSED", "from=%016llx err=%s", (unsigned long long)in->from,
		    dg_strerror(e));
		dg_tp_reply_error(tp, in, e);
		return;
	}
	struct announce *a = dgi_calloc(1, sizeof(*a));
	if (a == NULL) {
		dg_tp_reply_error(tp, in, DG_ERR_NOMEM);
		return;
	}
	pthread_mutex_init(&a->mu, NULL);
	pthread_cond_init(&a->cv, NULL);
	a->m = member_get(m);
	a->req = *in;
	a->reply = true;
	announce_all(m, a, b->data.ptr, b->data.len, in->from);
}

void dgi_member_on_type_announce(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	dg_member *m = ctx;
	const dg_msg_bytes *b = in->body;
	dg_err e = dg_registry_accept(m->reg, b->data.ptr, b->data.len, NULL);
	if (e != DG_OK)
		dg_tp_reply_error(tp, in, e);
	else
		dg_tp_reply(tp, in, DG_MSG_TYPE_ANNOUNCE, b);
}

void dgi_member_on_types_snapshot(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	dg_member *m = ctx;
	size_t n = dg_registry_list(m->reg, NULL, 0);
	const dg_desc **ds = dgi_alloc((n ? n : 1) * sizeof(*ds));
	dg_buf defs, list;
	dg_buf_init(&defs);
	dg_buf_init(&list);
	if (ds == NULL) {
		dg_tp_reply_error(tp, in, DG_ERR_NOMEM);
		return;
	}
	n = dg_registry_list(m->reg, ds, n);
	dg_writer w;
	dg_writer_init(&w, m->reg, &list);
	dg_write_list_begin(&w, (uint32_t)n);
	for (size_t i = 0; i < n; i++) {
		dg_buf_reset(&defs);
		if (dg_desc_export(ds[i], &defs) == DG_OK)
			dg_write_bytes(&w, defs.data, defs.len);
		else
			dg_write_bytes(&w, "", 0);
	}
	dg_write_end(&w);
	dg_err e = dg_writer_finish(&w);
	if (e == DG_OK) {
		dg_msg_raw body = { { list.data, (uint32_t)list.len } };
		dg_tp_reply(tp, in, DG_MSG_TYPES_SNAPSHOT, &body);
	} else {
		dg_tp_reply_error(tp, in, e);
	}
	dgi_free(ds);
	dg_buf_free(&defs);
	dg_buf_free(&list);
}

/* The registration hook: a new local type is agreed cluster-wide first. */
dg_err dgi_member_propose(void *ctx, const dg_desc *d, const uint8_t *def, size_t len)
{
	dg_member *m = ctx;
	(void)d;
	pthread_mutex_lock(&m->mu);
	bool joined = m->joined;
	dg_node_id coord = joined ? dgi_member_coordinator_locked(m, dgi_now_ms()) : 0;
	pthread_mutex_unlock(&m->mu);
	if (!joined)
		return DG_OK; /* before the join: local; proposed after joining */
	if (coord != dg_tp_self(m->tp)) {
		dg_msg_bytes body = { { def, (uint32_t)len } }, reply;
		uint8_t mem[64];
		dg_arena a;
		dg_arena_init(&a, mem, sizeof(mem));
		return dg_tp_call(m->tp, coord, DG_MSG_TYPE_PROPOSE, &body,
		    atomic_load_explicit(&m->ft_ms, memory_order_relaxed) + m->cfg.join_timeout_ms, &reply, &a);
	}
	/* this node coordinates: announce to everyone and wait for them */
	struct announce *a = dgi_calloc(1, sizeof(*a));
	if (a == NULL)
		return DG_ERR_NOMEM;
	pthread_mutex_init(&a->mu, NULL);
	pthread_cond_init(&a->cv, NULL);
	a->m = member_get(m);
	pthread_mutex_lock(&a->mu);
	a->left = 1;
	pthread_mutex_unlock(&a->mu);
	announce_all(m, a, def, len, 0);
	pthread_mutex_lock(&a->mu);
	while (a->left > 0)
		pthread_cond_wait(&a->cv, &a->mu);
	dg_err e = a->err;
	pthread_mutex_unlock(&a->mu);
	announce_free(a);
	return e;
}

/* After joining: take every type the cluster has, offer every type this
 * node registered before it joined. */
void dgi_member_sync_types(dg_member *m, dg_node_id coord)
{
	dg_msg_raw snap;
	uint8_t *mem = dgi_alloc(m->tp->cfg.recv_max);
	dg_arena a;
	if (mem == NULL)
		return;
	dg_arena_init(&a, mem, m->tp->cfg.recv_max);
	static const uint8_t empty_list[] = { 0x0F, 0x00 }; /* the request's body */
	dg_msg_raw none = { { empty_list, sizeof(empty_list) } };
	dg_err e = dg_tp_call(m->tp, coord, DG_MSG_TYPES_SNAPSHOT, &none,
	    m->cfg.join_timeout_ms, &snap, &a);
	if (e == DG_OK) {
		dg_reader r;
		uint32_t n;
		dg_reader_init(&r, m->reg, snap.list.ptr, snap.list.len);
		if (dg_read_begin(&r, DG_LIST, &n) == DG_OK) {
			for (uint32_t i = 0; i < n; i++) {
				dg_bytes def;
				if (dg_read_bytes(&r, &def, NULL) != DG_OK)
					break;
				dg_err ae = dg_registry_accept(m->reg, def.ptr, def.len, NULL);
				if (ae != DG_OK)
					dgi_log("error", "TYPE-CONFLICT", "err=%s why=\"a local type differs from the cluster's\"",
					    dg_strerror(ae));
			}
		}
	} else {
		dgi_log("warn", "TYPES-SYNC", "err=%s", dg_strerror(e));
	}
	dgi_free(mem);
	/* offer local types (the coordinator refuses conflicting ones) */
	size_t n = dg_registry_list(m->reg, NULL, 0);
	const dg_desc **ds = dgi_alloc((n ? n : 1) * sizeof(*ds));
	dg_buf def;
	dg_buf_init(&def);
	if (ds != NULL && coord != dg_tp_self(m->tp)) {
		n = dg_registry_list(m->reg, ds, n);
		for (size_t i = 0; i < n; i++) {
			dg_buf_reset(&def);
			if (dg_desc_export(ds[i], &def) != DG_OK)
				continue;
			dg_msg_bytes body = { { def.data, (uint32_t)def.len } }, reply;
			uint8_t small[64];
			dg_arena sa;
			dg_arena_init(&sa, small, sizeof(small));
			dg_err pe = dg_tp_call(m->tp, coord, DG_MSG_TYPE_PROPOSE, &body,
			    atomic_load_explicit(&m->ft_ms, memory_order_relaxed), &reply, &sa);
			if (pe != DG_OK)
				dgi_log("error", "TYPE-CONFLICT", "type=%s err=%s", dg_desc_name(ds[i]),
				    dg_strerror(pe));
		}
	}
	dgi_free(ds);
	dg_buf_free(&def);
}
