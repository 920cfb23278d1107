/*
 * admin_peer.c — node-to-node admin messages (admin.h): the fan-out that
 * gives dgctl every node's view, and the worker that answers it.
 *
 * ADMIN_REQ (192) carries {"cmd": "local.*", "args": {...}} as JSON bytes
 * in a one-field body; ADMIN_REP (193) carries {"ok": true, "result": ...}
 * or {"ok": false, "error": "...", "code": "DG_ERR_..."} (PROTOCOL.md).
 * The transport thread only copies the request into a queue; one worker
 * thread per node runs the command (a scan of a cache's partitions for
 * idle-verify may take a while) and replies from there.
 */
#include "admin.h"
#include "node_int.h"
#include "transport/transport_int.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define DGI_MSG_ADMIN_REQ 192
#define DGI_MSG_ADMIN_REP 193
#define QUEUE_MAX 64      /* requests waiting for the worker; more are refused BUSY */

typedef struct admin_body {
	dg_bytes json;
} admin_body;

static dg_err enc_admin(dg_writer *w, const void *body)
{
	const admin_body *b = body;
	return dg_write_bytes(w, b->json.ptr, b->json.len);
}

static dg_err dec_admin(dg_reader *r, void *body)
{
	return dg_read_bytes(r, &((admin_body *)body)->json, NULL);
}

void dgi_adminpeer_define(void)
{
	dg_msg_define(DGI_MSG_ADMIN_REQ, &(dg_msg_row){ "ADMIN_REQ", sizeof(admin_body),
	    enc_admin, dec_admin, DGI_MSG_ADMIN_REP });
	dg_msg_define(DGI_MSG_ADMIN_REP, &(dg_msg_row){ "ADMIN_REP", sizeof(admin_body),
	    enc_admin, dec_admin, DG_MSG_UNKNOWN });
}

typedef struct job {
	struct job *next;
	dg_msg_in req;            /* type, flags, from, corr: enough to reply */
	char *json;
	size_t len;
} job;

struct dgi_adminpeer {
	dg_node *n;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	job *head, *tail;
	int queued;
	bool stopping;
	pthread_t thr;
	bool started;
	bool handling;            /* the handler is installed */
};

/* {"ok":false,"error":why,"code":"DG_ERR_..."} */
static cJSON *error_reply(dg_err e, const char *why)
{
	cJSON *o = cJSON_CreateObject();
	if (o == NULL)
		return NULL;
	cJSON_AddFalseToObject(o, "ok");
	cJSON_AddStringToObject(o, "error", why && why[0] ? why : dg_strerror(e));
	char code[64];
	dgi_admin_err_code(e, code, sizeof(code));
	cJSON_AddStringToObject(o, "code", code);
	return o;
}

/* The reply to one request, as JSON text (cJSON_free). */
static char *answer(dg_node *n, const char *json, size_t len, bool *stop_after)
{
	cJSON *req = cJSON_ParseWithLength(json, len), *rep;
	const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(req, "cmd");
	if (!cJSON_IsString(cmd)) {
		rep = error_reply(DG_ERR_INVAL, "malformed admin request");
	} else {
		char why[256] = "";
		cJSON *res = NULL;
		dg_err e = dgi_admin_local(n, cmd->valuestring,
		    cJSON_GetObjectItemCaseSensitive(req, "args"), &res, why, sizeof(why),
		    stop_after);
		if (e != DG_OK) {
			rep = error_reply(e, why);
		} else if ((rep = cJSON_CreateObject()) != NULL) {
			cJSON_AddTrueToObject(rep, "ok");
			cJSON_AddItemToObject(rep, "result", res ? res : cJSON_CreateNull());
		} else {
			cJSON_Delete(res);
		}
	}
	cJSON_Delete(req);
	char *s = rep ? cJSON_PrintUnformatted(rep) : NULL;
	cJSON_Delete(rep);
	return s;
}

static void *worker(void *arg)
{
	dgi_thread_name("dg-admin-peer");
	dgi_adminpeer *p = arg;
	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (p->head == NULL && !p->stopping)
			pthread_cond_wait(&p->cv, &p->mu);
		if (p->stopping)
			break;
		job *j = p->head;
		p->head = j->next;
		if (p->head == NULL)
			p->tail = NULL;
		p->queued--;
		pthread_mutex_unlock(&p->mu);
		bool stop = false;
		char *s = answer(p->n, j->json, j->len, &stop);
		if (s == NULL) {
			dg_tp_reply_error(dgi_node_tp(p->n), &j->req, DG_ERR_NOMEM);
		} else {
			admin_body b = { { (const uint8_t *)s, (uint32_t)strlen(s) } };
			dg_tp_reply(dgi_node_tp(p->n), &j->req, DGI_MSG_ADMIN_REP, &b);
		}
		cJSON_free(s);
		dgi_free(j);
		if (stop)
			dgi_admin_stop_node(p->n);
		pthread_mutex_lock(&p->mu);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

/* On the transport thread: queue a copy, never run the command here. */
static void on_request(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	dgi_adminpeer *p = ctx;
	const admin_body *b = in->body;
	job *j = b ? dgi_alloc(sizeof(*j) + b->json.len + 1) : NULL;
	if (j == NULL) {
		dg_tp_reply_error(tp, in, b ? DG_ERR_NOMEM : DG_ERR_INVAL);
		return;
	}
	j->next = NULL;
	j->req = (dg_msg_in){ .type = in->type, .flags = in->flags, .corr = in->corr,
		.from = in->from };
	j->json = (char *)(j + 1);
	j->len = b->json.len;
	if (b->json.len)
		memcpy(j->json, b->json.ptr, b->json.len);
	j->json[j->len] = 0;
	pthread_mutex_lock(&p->mu);
	if (p->queued >= QUEUE_MAX || p->stopping) {
		pthread_mutex_unlock(&p->mu);
		dgi_free(j);
		dg_tp_reply_error(tp, in, DG_ERR_BUSY);
		return;
	}
	if (p->tail)
		p->tail->next = j;
	else
		p->head = j;
	p->tail = j;
	p->queued++;
	pthread_cond_signal(&p->cv);
	pthread_mutex_unlock(&p->mu);
}

dg_err dgi_adminpeer_start(dg_node *n, dgi_adminpeer **out)
{
	dgi_adminpeer *p = dgi_calloc(1, sizeof(*p));
	if (p == NULL)
		return DG_ERR_NOMEM;
	p->n = n;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	if (pthread_create(&p->thr, NULL, worker, p) != 0) {
		dgi_adminpeer_stop(p);
		return DG_ERR_NOMEM;
	}
	p->started = true;
	dg_err e = dg_tp_handle(dgi_node_tp(n), DGI_MSG_ADMIN_REQ, on_request, p);
	if (e != DG_OK) {
		dgi_adminpeer_stop(p);
		return e;
	}
	p->handling = true;
	*out = p;
	return DG_OK;
}

/* Before the transport stops: no handler runs after the quiesce, and the
 * worker's last reply goes out through a live transport. */
void dgi_adminpeer_stop(dgi_adminpeer *p)
{
	if (p == NULL)
		return;
	if (p->handling) {
		dg_tp_handle(dgi_node_tp(p->n), DGI_MSG_ADMIN_REQ, NULL, NULL);
		dg_tp_quiesce(dgi_node_tp(p->n));
	}
	pthread_mutex_lock(&p->mu);
	p->stopping = true;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
	if (p->started)
		pthread_join(p->thr, NULL);
	while (p->head != NULL) {
		job *j = p->head;
		p->head = j->next;
		dgi_free(j);
	}
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
	dgi_free(p);
}

/* ---- fan-out ---- */

typedef struct fanout {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	size_t pending;
} fanout;

typedef struct fanctx {
	fanout *f;
	dgi_fanres *r;
} fanctx;

/* Fills r from an ADMIN_REP (or the node-level error). */
static void take_reply(dgi_fanres *r, dg_err err, const char *json, size_t len)
{
	r->err = err;
	if (err != DG_OK)
		return;
	cJSON *o = cJSON_ParseWithLength(json, len);
	const cJSON *ok = cJSON_GetObjectItemCaseSensitive(o, "ok");
	if (!cJSON_IsBool(ok)) {
		r->err = DG_ERR_BAD_TAG;
	} else if (cJSON_IsFalse(ok)) {
		const cJSON *why = cJSON_GetObjectItemCaseSensitive(o, "error");
		r->err = DG_ERR_REFUSED;
		snprintf(r->errmsg, sizeof(r->errmsg), "%s",
		    cJSON_IsString(why) ? why->valuestring : "refused");
	} else {
		r->result = cJSON_DetachItemFromObjectCaseSensitive(o, "result");
	}
	cJSON_Delete(o);
}

static void on_reply(void *ctx, dg_err err, const dg_msg_in *reply)
{
	fanctx *c = ctx;
	const admin_body *b = reply && err == DG_OK ? reply->body : NULL;
	if (err == DG_OK && b == NULL)
		err = DG_ERR_BAD_TAG;
	take_reply(c->r, err, b ? (const char *)b->json.ptr : NULL, b ? b->json.len : 0);
	pthread_mutex_lock(&c->f->mu);
	if (--c->f->pending == 0)
		pthread_cond_broadcast(&c->f->cv);
	pthread_mutex_unlock(&c->f->mu);
}

static void run_local(dg_node *n, const char *cmd, const cJSON *args, dgi_fanres *r)
{
	char why[160] = "";
	bool stop = false;     /* a fan-out never stops the node it runs on */
	r->err = dgi_admin_local(n, cmd, args, &r->result, why, sizeof(why), &stop);
	if (r->err != DG_OK)
		snprintf(r->errmsg, sizeof(r->errmsg), "%s", why);
}

dg_err dgi_fanout(dg_node *n, const char *cmd, const cJSON *args, uint32_t timeout_ms,
    dgi_fanres **out, size_t *count, int64_t *topver)
{
	dg_topology *t = dg_member_topology(dgi_node_member(n));
	if (t == NULL)
		return DG_ERR_NOT_READY;
	dgi_fanres *res = dgi_calloc(t->count ? t->count : 1, sizeof(*res));
	fanctx *ctx = dgi_calloc(t->count ? t->count : 1, sizeof(*ctx));
	cJSON *req = cJSON_CreateObject();
	char *json = NULL;
	if (req != NULL) {
		cJSON_AddStringToObject(req, "cmd", cmd);
		if (args != NULL)
			cJSON_AddItemToObject(req, "args", cJSON_Duplicate(args, true));
		json = cJSON_PrintUnformatted(req);
	}
	cJSON_Delete(req);
	if (res == NULL || ctx == NULL || json == NULL) {
		dgi_free(res);
		dgi_free(ctx);
		cJSON_free(json);
		dg_topology_release(t);
		return DG_ERR_NOMEM;
	}
	fanout f = { .pending = 0 };
	pthread_mutex_init(&f.mu, NULL);
	pthread_cond_init(&f.cv, NULL);
	uint64_t self = dg_node_get_id(n);
	admin_body b = { { (const uint8_t *)json, (uint32_t)strlen(json) } };
	for (uint32_t i = 0; i < t->count; i++) {
		dgi_fanres *r = &res[i];
		r->id = t->nodes[i].id;
		r->order = t->nodes[i].order;
		r->client = (t->nodes[i].attrs & DG_NODE_CLIENT) != 0;
		r->standby = (t->nodes[i].attrs & DG_NODE_STANDBY) != 0;
		snprintf(r->address, sizeof(r->address), "%s", t->nodes[i].url);
		if (r->id == self)
			continue;
		ctx[i] = (fanctx){ &f, r };
		pthread_mutex_lock(&f.mu);
		f.pending++;
		pthread_mutex_unlock(&f.mu);
		dg_err e = dg_tp_request(dgi_node_tp(n), r->id, DGI_MSG_ADMIN_REQ, &b, timeout_ms,
		    on_reply, &ctx[i]);
		if (e != DG_OK) {
			r->err = e;
			pthread_mutex_lock(&f.mu);
			f.pending--;
			pthread_mutex_unlock(&f.mu);
		}
	}
	for (uint32_t i = 0; i < t->count; i++)
		if (res[i].id == self)
			run_local(n, cmd, args, &res[i]);
	/* every request's callback runs once, by its own timeout at the latest */
	pthread_mutex_lock(&f.mu);
	while (f.pending > 0)
		pthread_cond_wait(&f.cv, &f.mu);
	pthread_mutex_unlock(&f.mu);
	pthread_cond_destroy(&f.cv);
	pthread_mutex_destroy(&f.mu);
	cJSON_free(json);
	dgi_free(ctx);
	*out = res;
	*count = t->count;
	if (topver)
		*topver = t->version;
	dg_topology_release(t);
	return DG_OK;
}

void dgi_fanout_free(dgi_fanres *r, size_t count)
{
	if (r == NULL)
		return;
	for (size_t i = 0; i < count; i++)
		cJSON_Delete(r[i].result);
	dgi_free(r);
}
