/*
 * admin_cmds.c — the commands of the admin endpoint (admin.h,
 * dgi_admin_dispatch; ADMIN.md lists each with its arguments and result).
 *
 * A request is {"cmd": NAME, "args": {...}}; the reply {"ok": true,
 * "result": {...}} or {"ok": false, "error": TEXT, "code": "DG_ERR_..."}.
 * Each command runs on the connection's admin thread through the node's
 * public API (or a fan-out to every node, admin_peer.c); none runs on a
 * transport thread.
 */
#include "admin.h"
#include "admin_baseline.h"
#include "metrics.h"
#include "node_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A request's fan-outs end by its deadline: the client's "timeout_ms"
 * (dgctl sends its --timeout) less a fifth for the answer's way back, or
 * FANOUT_MS when the client says nothing. */
#define FANOUT_MS 10000
#define FANOUT_MIN_MS 100


typedef struct call {
	dg_node *n;
	const cJSON *args;
	cJSON *result;             /* the command fills it */
	char why[512];             /* error text, when the command sets one */
	bool stop_after;           /* stop this node once the reply is sent */
	uint64_t deadline;         /* dgi_now_ms() by which fan-outs end */
} call;

/* How long the next fan-out may wait: what is left of the deadline. */
static uint32_t fan_ms(const call *c)
{
	uint64_t now = dgi_now_ms();
	uint64_t left = c->deadline > now ? c->deadline - now : 0;
	return left < FANOUT_MIN_MS ? FANOUT_MIN_MS : (uint32_t)left;
}

typedef dg_err (*cmd_fn)(call *c);

/* ---- argument helpers ---- */

static const char *arg_str(call *c, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->args, name);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool arg_num(call *c, const char *name, double *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->args, name);
	if (!cJSON_IsNumber(v))
		return false;
	*out = v->valuedouble;
	return true;
}

static bool arg_bool(call *c, const char *name)
{
	return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c->args, name));
}

static dg_err need(call *c, const char *name, const char **out)
{
	if ((*out = arg_str(c, name)) == NULL) {
		snprintf(c->why, sizeof(c->why), "argument \"%s\" (a string) is required", name);
		return DG_ERR_INVAL;
	}
	return DG_OK;
}

static dg_err open_cache(call *c, dg_cache **out)
{
	const char *name;
	dg_err e = need(c, "cache", &name);
	if (e != DG_OK)
		return e;
	if ((e = dg_cache_get_by_name(c->n, name, out)) == DG_ERR_NOT_FOUND)
		snprintf(c->why, sizeof(c->why), "no cache named \"%s\"", name);
	return e;
}

/* The cache and key arguments of put, get, remove and the test hook. */
static dg_err open_key(call *c, dg_cache **h, const char **key)
{
	dg_err e = open_cache(c, h);
	return e != DG_OK ? e : need(c, "key", key);
}

static cJSON *add_hex(cJSON *o, const char *name, uint64_t v)
{
	char h[17];
	dgi_admin_hex64(v, h);
	return cJSON_AddStringToObject(o, name, h);
}

/* bytes as a JSON string when they are printable UTF-8-free ASCII, else
 * "0x" + hex (the caller's dgctl prints either as it comes) */
static cJSON *bytes_item(const uint8_t *p, size_t n)
{
	bool text = true;
	for (size_t i = 0; i < n && text; i++)
		text = p[i] >= 0x20 && p[i] < 0x7f;
	if (text && !(n >= 2 && p[0] == '0' && p[1] == 'x')) {
		char *s = dgi_alloc(n + 1);
		if (s == NULL)
			return NULL;
		memcpy(s, p, n);
		s[n] = 0;
		cJSON *j = cJSON_CreateString(s);
		dgi_free(s);
		return j;
	}
	char *h = dgi_alloc(2 * n + 3);
	if (h == NULL)
		return NULL;
	h[0] = '0';
	h[1] = 'x';
	static const char digits[] = "0123456789abcdef"; /* (snprintf a byte: half a scan's CPU) */
	for (size_t i = 0; i < n; i++) {
		h[2 + 2 * i] = digits[p[i] >> 4];
		h[3 + 2 * i] = digits[p[i] & 15];
	}
	h[2 + 2 * n] = 0;
	cJSON *j = cJSON_CreateString(h);
	dgi_free(h);
	return j;
}

static const char *mode_name(dg_cache_mode m) { return m == DG_REPLICATED ? "replicated" : "partitioned"; }
static const char *sync_name(dg_write_sync s)
{
	return s == DG_PRIMARY_SYNC ? "primary_sync" : s == DG_FULL_ASYNC ? "full_async" : "full_sync";
}
static const char *atom_name(dg_atomicity a) { return a == DG_TRANSACTIONAL ? "transactional" : "atomic"; }

/* ---- state, nodes ---- */

static int64_t coordinator(const dg_topology *t, uint64_t *id)
{
	int64_t best = -1;
	for (uint32_t i = 0; i < t->count; i++)
		if (best < 0 || t->nodes[i].order < best) {
			best = t->nodes[i].order;
			*id = t->nodes[i].id;
		}
	return best;
}

static dg_err cmd_nodes(call *c)
{
	dgi_fanres *r;
	size_t nr;
	int64_t ver;
	dg_err e = dgi_fanout(c->n, "local.info", NULL, fan_ms(c), &r, &nr, &ver);
	if (e != DG_OK)
		return e;
	int64_t lowest = -1;
	for (size_t i = 0; i < nr; i++)
		if (lowest < 0 || r[i].order < lowest)
			lowest = r[i].order;
	cJSON_AddNumberToObject(c->result, "topology_version", (double)ver);
	add_hex(c->result, "self", dg_node_get_id(c->n));
	cJSON *arr = cJSON_AddArrayToObject(c->result, "nodes");
	for (size_t i = 0; i < nr && arr; i++) {
		cJSON *o = cJSON_CreateObject();
		if (o == NULL)
			break;
		cJSON_AddItemToArray(arr, o);
		cJSON_AddNumberToObject(o, "order", (double)r[i].order);
		add_hex(o, "id", r[i].id);
		cJSON_AddStringToObject(o, "address", r[i].address);
		cJSON_AddStringToObject(o, "role", r[i].client ? "client" : "server");
		cJSON_AddBoolToObject(o, "standby", r[i].standby);
		cJSON_AddBoolToObject(o, "coordinator", r[i].order == lowest);
		const cJSON *res = r[i].result;
		const cJSON *up = cJSON_GetObjectItemCaseSensitive(res, "uptime_ms");
		const cJSON *ad = cJSON_GetObjectItemCaseSensitive(res, "admin");
		const cJSON *ht = cJSON_GetObjectItemCaseSensitive(res, "http");
		const cJSON *vs = cJSON_GetObjectItemCaseSensitive(res, "version");
		if (cJSON_IsNumber(up))
			cJSON_AddNumberToObject(o, "uptime_ms", up->valuedouble);
		else
			cJSON_AddNullToObject(o, "uptime_ms");
		cJSON_AddStringToObject(o, "admin", cJSON_IsString(ad) ? ad->valuestring : "");
		cJSON_AddStringToObject(o, "http", cJSON_IsString(ht) ? ht->valuestring : "");
		cJSON_AddStringToObject(o, "version", cJSON_IsString(vs) ? vs->valuestring : "");
		if (r[i].err != DG_OK)
			cJSON_AddStringToObject(o, "error", r[i].errmsg[0] ? r[i].errmsg :
			    dg_strerror(r[i].err));
	}
	dgi_fanout_free(r, nr);
	return arr ? DG_OK : DG_ERR_NOMEM;
}

/* The per-cache numbers of local.rebalance that rebalance_totals sums. */
static const char *const sums[] = { "moving", "lost", "done", "left", "bytes", "repairing" };
#define NSUMS (sizeof(sums) / sizeof(sums[0]))

/* The object of arr whose "cache" is name; else a new one with only that
 * member (*made), or NULL when out of memory. */
static cJSON *cache_row(cJSON *arr, const char *name, bool *made)
{
	cJSON *it;
	*made = false;
	cJSON_ArrayForEach(it, arr)
		if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(it, "cache")),
		    name) == 0)
			return it;
	cJSON *o = cJSON_CreateObject();
	if (o == NULL || !cJSON_AddItemToArray(arr, o)) {
		cJSON_Delete(o);
		return NULL;
	}
	*made = true;
	return cJSON_AddStringToObject(o, "cache", name) != NULL ? o : NULL;
}

/* The totals object of cache `name` in caches, made (zeroed) if absent. */
static cJSON *cache_total(cJSON *caches, const char *name)
{
	bool made;
	cJSON *tot = cache_row(caches, name, &made);
	for (size_t k = 0; made && tot != NULL && k < NSUMS; k++)
		cJSON_AddNumberToObject(tot, sums[k], 0);
	return tot;
}

/* Sums every node's local.rebalance into per-cache totals; adds a
 * per-node array when per_node.  *behind: the nodes whose caches are not
 * at this node's topology version (nodes_behind) — right after a change
 * nothing is MOVING anywhere until every node applied it, and that is no
 * settled cluster: the state is REBALANCING, the rebalancing incomplete. */
static dg_err rebalance_totals(call *c, bool per_node, int *moving, int *lost, int *behind,
    int *repairing)
{
	dgi_fanres *r;
	size_t nr;
	int64_t ver;
	dg_err e = dgi_fanout(c->n, "local.rebalance", NULL, fan_ms(c), &r, &nr, &ver);
	if (e != DG_OK)
		return e;
	*moving = *lost = *repairing = 0;
	if (!cJSON_HasObjectItem(c->result, "topology_version"))
		cJSON_AddNumberToObject(c->result, "topology_version", (double)ver);
	cJSON *caches = cJSON_AddArrayToObject(c->result, "caches");
	cJSON *nodes = per_node ? cJSON_AddArrayToObject(c->result, "nodes") : NULL;
	int unanswered = 0;
	*behind = 0;
	for (size_t i = 0; i < nr && caches; i++) {
		if (r[i].err != DG_OK) {
			unanswered++;
			continue;
		}
		const cJSON *tv = cJSON_GetObjectItemCaseSensitive(r[i].result, "topology_version");
		if (cJSON_IsNumber(tv) && tv->valuedouble != (double)ver) /* (no cast of a peer's number) */
			(*behind)++;
		const cJSON *arr = cJSON_GetObjectItemCaseSensitive(r[i].result, "caches"), *one;
		cJSON_ArrayForEach(one, arr) {
			const cJSON *name = cJSON_GetObjectItemCaseSensitive(one, "cache");
			if (!cJSON_IsString(name))
				continue;
			cJSON *tot = cache_total(caches, name->valuestring);
			for (size_t k = 0; tot != NULL && k < NSUMS; k++) {
				const cJSON *v = cJSON_GetObjectItemCaseSensitive(one, sums[k]);
				cJSON *t = cJSON_GetObjectItemCaseSensitive(tot, sums[k]);
				if (cJSON_IsNumber(v) && t != NULL)
					cJSON_SetNumberValue(t, t->valuedouble + v->valuedouble);
			}
			const cJSON *mv = cJSON_GetObjectItemCaseSensitive(one, "moving");
			const cJSON *ls = cJSON_GetObjectItemCaseSensitive(one, "lost");
			*moving += cJSON_IsNumber(mv) ? mv->valueint : 0;
			*lost += cJSON_IsNumber(ls) ? ls->valueint : 0;
			const cJSON *rp = cJSON_GetObjectItemCaseSensitive(one, "repairing");
			*repairing += cJSON_IsNumber(rp) ? rp->valueint : 0;
		}
		if (nodes != NULL) {
			cJSON *o = cJSON_CreateObject();
			cJSON_AddItemToArray(nodes, o);
			add_hex(o, "id", r[i].id);
			cJSON_AddStringToObject(o, "address", r[i].address);
			cJSON_AddItemToObject(o, "caches", cJSON_Duplicate(arr, true));
		}
	}
	cJSON_AddNumberToObject(c->result, "nodes_unanswered", unanswered);
	cJSON_AddNumberToObject(c->result, "nodes_behind", *behind);
	dgi_fanout_free(r, nr);
	return caches ? DG_OK : DG_ERR_NOMEM;
}

static dg_err cmd_state(call *c)
{
	dg_topology *t = dg_member_topology(dgi_node_member(c->n));
	if (t == NULL)
		return DG_ERR_NOT_READY;
	uint32_t servers = 0, clients = 0, standby = 0;
	for (uint32_t i = 0; i < t->count; i++) {
		(t->nodes[i].attrs & DG_NODE_CLIENT) ? clients++ : servers++;
		standby += (t->nodes[i].attrs & DG_NODE_STANDBY) != 0;
	}
	uint64_t cid = 0;
	coordinator(t, &cid);
	cJSON_AddStringToObject(c->result, "cluster", dgi_node_config(c->n)->cluster_name);
	cJSON_AddNumberToObject(c->result, "topology_version", (double)t->version);
	cJSON_AddNumberToObject(c->result, "servers", servers);
	cJSON_AddNumberToObject(c->result, "clients", clients);
	cJSON_AddNumberToObject(c->result, "standby", standby);
	cJSON_AddBoolToObject(c->result, "baseline_set", t->baseline_set);
	add_hex(c->result, "coordinator", cid);
	for (uint32_t i = 0; i < t->count; i++)
		if (t->nodes[i].id == cid)
			cJSON_AddStringToObject(c->result, "coordinator_address", t->nodes[i].url);
	dg_topology_release(t);
	int moving, lost, behind, repairing;
	dg_err e = rebalance_totals(c, false, &moving, &lost, &behind, &repairing);
	if (e != DG_OK)
		return e;
	cJSON_AddNumberToObject(c->result, "caches_count",
	    cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(c->result, "caches")));
	cJSON_AddNumberToObject(c->result, "partitions_moving", moving);
	cJSON_AddNumberToObject(c->result, "partitions_lost", lost);
	cJSON_AddNumberToObject(c->result, "partitions_repairing", repairing);
	/* the majority (PROTOCOL.md, "Majority"): this node's view */
	dg_member_quorum q;
	dg_member_quorum_get(dgi_node_member(c->n), &q);
	cJSON *mj = cJSON_AddObjectToObject(c->result, "quorum");
	if (mj == NULL)
		return DG_ERR_NOMEM;
	cJSON_AddStringToObject(mj, "partition_policy",
	    q.policy == DG_PARTITION_NONE ? "none" : "majority");
	cJSON_AddBoolToObject(mj, "segmented", q.segmented);
	cJSON_AddNumberToObject(mj, "segmented_ms", (double)q.segmented_ms);
	cJSON_AddBoolToObject(mj, "leased", q.leased);
	cJSON_AddNumberToObject(mj, "voters", q.voters);
	cJSON_AddNumberToObject(mj, "need", q.need);
	cJSON_AddNumberToObject(mj, "reachable", q.reachable);
	cJSON *reach = cJSON_AddArrayToObject(mj, "reachable_voters");
	for (uint32_t i = 0; reach != NULL && i < q.nreach; i++)
		cJSON_AddItemToArray(reach, cJSON_CreateString(q.reach[i]));
	cJSON_AddNumberToObject(mj, "segmentations", (double)q.segmentations);
	cJSON_AddNumberToObject(mj, "rejoins", (double)q.rejoins);
	cJSON_AddNumberToObject(mj, "lease_losses", (double)q.lease_losses);
	cJSON_AddNumberToObject(mj, "segmented_dials", (double)q.segmented_dials);
	cJSON_AddStringToObject(c->result, "state", q.segmented ? "SEGMENTED" :
	    lost > 0 ? "LOST_PARTITIONS" : moving > 0 || repairing > 0 || behind > 0 ?
	    "REBALANCING" : "ACTIVE");
	return DG_OK;
}

/* The cache object named `name` in arr, made (with an empty "nodes"
 * array) if absent. */
static cJSON *map_cache(cJSON *arr, const char *name, double partitions)
{
	bool made;
	cJSON *o = cache_row(arr, name, &made);
	if (o == NULL || !made)
		return o;
	cJSON_AddNumberToObject(o, "partitions", partitions);
	return cJSON_AddArrayToObject(o, "nodes") != NULL ? o : NULL;
}

/* Every server's role and state of every partition of every cache (or of
 * args.cache): local.partitions on each node, regrouped by cache.  Per
 * node the map string and its counts by kind of character. */
static dg_err cmd_partitions(call *c)
{
	const char *only = arg_str(c, "cache");
	dgi_fanres *r;
	size_t nr;
	int64_t ver;
	dg_err e = dgi_fanout(c->n, "local.partitions", NULL, fan_ms(c), &r, &nr, &ver);
	if (e != DG_OK)
		return e;
	cJSON_AddNumberToObject(c->result, "topology_version", (double)ver);
	cJSON *caches = cJSON_AddArrayToObject(c->result, "caches");
	cJSON *unanswered = cJSON_AddArrayToObject(c->result, "nodes_unanswered");
	for (size_t i = 0; i < nr && caches && unanswered; i++) {
		if (r[i].client)
			continue; /* owns no partition */
		if (r[i].err != DG_OK) {
			cJSON *o = cJSON_CreateObject();
			cJSON_AddItemToArray(unanswered, o);
			add_hex(o, "id", r[i].id);
			cJSON_AddStringToObject(o, "address", r[i].address);
			cJSON_AddStringToObject(o, "error", r[i].errmsg[0] ? r[i].errmsg :
			    dg_strerror(r[i].err));
			continue;
		}
		const cJSON *arr = cJSON_GetObjectItemCaseSensitive(r[i].result, "caches"), *one;
		cJSON_ArrayForEach(one, arr) {
			const cJSON *name = cJSON_GetObjectItemCaseSensitive(one, "cache");
			const cJSON *map = cJSON_GetObjectItemCaseSensitive(one, "map");
			const cJSON *np = cJSON_GetObjectItemCaseSensitive(one, "partitions");
			if (!cJSON_IsString(name) || !cJSON_IsString(map) || !cJSON_IsNumber(np) ||
			    (only != NULL && strcmp(only, name->valuestring) != 0))
				continue;
			cJSON *mc = map_cache(caches, name->valuestring, np->valuedouble);
			cJSON *o = cJSON_CreateObject();
			if (mc == NULL || o == NULL ||
			    !cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(mc, "nodes"), o)) {
				cJSON_Delete(o);
				dgi_fanout_free(r, nr);
				return DG_ERR_NOMEM;
			}
			add_hex(o, "id", r[i].id);
			cJSON_AddStringToObject(o, "address", r[i].address);
			cJSON_AddBoolToObject(o, "standby", r[i].standby);
			int k[6] = { 0 }; /* P B M+m L+l . other */
			for (const char *m = map->valuestring; *m; m++)
				k[*m == 'P' ? 0 : *m == 'B' ? 1 : (*m == 'M' || *m == 'm') ? 2 :
				    (*m == 'L' || *m == 'l') ? 3 : *m == '.' ? 4 : 5]++;
			cJSON_AddNumberToObject(o, "primary", k[0]);
			cJSON_AddNumberToObject(o, "backup", k[1]);
			cJSON_AddNumberToObject(o, "moving", k[2]);
			cJSON_AddNumberToObject(o, "lost", k[3]);
			cJSON_AddNumberToObject(o, "none", k[4]);
			cJSON_AddStringToObject(o, "map", map->valuestring);
		}
	}
	dgi_fanout_free(r, nr);
	if (only != NULL && caches != NULL && cJSON_GetArraySize(caches) == 0) {
		snprintf(c->why, sizeof(c->why), "no cache named \"%s\" on any node that answered",
		    only);
		return DG_ERR_NOT_FOUND;
	}
	return caches && unanswered ? DG_OK : DG_ERR_NOMEM;
}

static dg_err cmd_rebalance(call *c)
{
	int moving, lost, behind, repairing;
	dg_err e = rebalance_totals(c, true, &moving, &lost, &behind, &repairing);
	if (e != DG_OK)
		return e;
	cJSON_AddNumberToObject(c->result, "partitions_moving", moving);
	cJSON_AddNumberToObject(c->result, "partitions_repairing", repairing);
	/* (a copy still repairing is not whole: a node lost meanwhile can
	 * take the rest of it along) */
	cJSON_AddBoolToObject(c->result, "complete", moving == 0 && behind == 0 && repairing == 0);
	return DG_OK;
}

/* ---- caches ---- */

static dg_err cmd_cache_list(call *c)
{
	dg_cache_config *cc;
	size_t nc = dgi_admin_caches(c->n, &cc);
	if (cc == NULL)
		return DG_ERR_NOMEM;
	cJSON *arr = cJSON_AddArrayToObject(c->result, "caches");
	for (size_t i = 0; i < nc && arr; i++) {
		cJSON *o = cJSON_CreateObject();
		if (o == NULL)
			break;
		cJSON_AddItemToArray(arr, o);
		cJSON_AddStringToObject(o, "name", cc[i].name);
		cJSON_AddStringToObject(o, "mode", mode_name(cc[i].mode));
		cJSON_AddNumberToObject(o, "backups", cc[i].backups);
		cJSON_AddStringToObject(o, "sync", sync_name(cc[i].write_sync));
		cJSON_AddStringToObject(o, "atomicity", atom_name(cc[i].atomicity));
		cJSON_AddNumberToObject(o, "partitions", cc[i].partitions);
		cJSON_AddBoolToObject(o, "persistence", cc[i].persistence);
		cJSON_AddNumberToObject(o, "ttl_ms", (double)cc[i].ttl_ms);
		dg_cache *h;
		uint64_t size = 0;
		if (dg_cache_get_by_name(c->n, cc[i].name, &h) == DG_OK &&
		    dg_cache_size(h, &size) == DG_OK)
			cJSON_AddNumberToObject(o, "size", (double)size);
		else
			cJSON_AddNullToObject(o, "size");
	}
	dgi_free(cc);
	return arr ? DG_OK : DG_ERR_NOMEM;
}

static bool pick(const char *v, const char *const *names, int count, int *out)
{
	for (int i = 0; i < count; i++)
		if (strcmp(v, names[i]) == 0) {
			*out = i;
			return true;
		}
	return false;
}

static dg_err cmd_cache_create(call *c)
{
	static const char *const modes[] = { "partitioned", "replicated" };
	static const char *const syncs[] = { "full_sync", "primary_sync", "full_async" };
	static const char *const atoms[] = { "atomic", "transactional" };
	const char *name, *v;
	dg_err e = need(c, "cache", &name);
	if (e != DG_OK)
		return e;
	if (strlen(name) == 0 || strlen(name) >= DG_CACHE_NAME_MAX) {
		snprintf(c->why, sizeof(c->why), "a cache name has 1 to %d bytes",
		    DG_CACHE_NAME_MAX - 1);
		return DG_ERR_INVAL;
	}
	dg_cache_config cc;
	dg_cache_config_init(&cc, name);
	int k;
	double d;
	if ((v = arg_str(c, "mode")) != NULL) {
		if (!pick(v, modes, 2, &k))
			goto bad;
		cc.mode = (dg_cache_mode)k;
	}
	if ((v = arg_str(c, "sync")) != NULL) {
		if (!pick(v, syncs, 3, &k))
			goto bad;
		cc.write_sync = (dg_write_sync)k;
	}
	if ((v = arg_str(c, "atomicity")) != NULL) {
		if (!pick(v, atoms, 2, &k))
			goto bad;
		cc.atomicity = (dg_atomicity)k;
	}
	if (arg_num(c, "backups", &d)) {
		if (d < 0 || d > 64 || d != (uint32_t)d)
			goto bad;
		cc.backups = (uint32_t)d;
	}
	if (arg_num(c, "ttl_ms", &d)) {
		/* checked before the cast: 1e30 into a uint64_t is undefined
		 * (tests/fuzz crash admin_fuzz-1); 1e15 ms is 31,000 years */
		if (!(d >= 0 && d <= 1e15))
			goto bad;
		cc.ttl_ms = (uint64_t)d;
	}
	cc.persistence = arg_bool(c, "persistence");
	dg_cache *h;
	e = dg_cache_create(c->n, &cc, &h);
	if (e == DG_ERR_EXISTS)
		snprintf(c->why, sizeof(c->why), "a cache named \"%s\" exists with another "
		    "configuration", name);
	else if (e == DG_ERR_INVAL && cc.persistence && dgi_node_config(c->n)->data_dir == NULL)
		snprintf(c->why, sizeof(c->why), "persistence needs a data directory on "
		    "every server node (dgnode --data-dir)");
	if (e == DG_OK)
		cJSON_AddStringToObject(c->result, "created", name);
	return e;
bad:
	snprintf(c->why, sizeof(c->why), "bad cache setting (mode: partitioned|replicated, "
	    "sync: full_sync|primary_sync|full_async, atomicity: atomic|transactional, "
	    "backups: 0..64, ttl_ms: 0..1e15)");
	return DG_ERR_INVAL;
}

static dg_err cmd_cache_destroy(call *c)
{
	const char *name;
	dg_err e = need(c, "cache", &name);
	if (e != DG_OK)
		return e;
	if ((e = dg_cache_destroy(c->n, name)) == DG_ERR_NOT_FOUND)
		snprintf(c->why, sizeof(c->why), "no cache named \"%s\"", name);
	if (e == DG_OK)
		cJSON_AddStringToObject(c->result, "destroyed", name);
	return e;
}

/* Every node's LOST partitions of the cache owned as they are: after every
 * copy of a partition was lost (crashes, a cut during rebalancing), the
 * operator accepts what is left (transport/PROTOCOL.md, CACHE_LOST_RESET). */
static dg_err cmd_cache_reset_lost(call *c)
{
	dg_cache *h;
	dg_err e = open_cache(c, &h);
	if (e != DG_OK)
		return e;
	size_t before = dg_cache_lost_partitions(h, NULL, 0);
	if ((e = dg_cache_reset_lost(h)) != DG_OK)
		return e;
	cJSON_AddNumberToObject(c->result, "lost_here_before", (double)before);
	cJSON_AddNumberToObject(c->result, "lost_here_after", (double)dg_cache_lost_partitions(h, NULL, 0));
	return DG_OK;
}

static dg_err cmd_cache_put(call *c)
{
	dg_cache *h;
	const char *k, *v;
	dg_err e;
	if ((e = open_key(c, &h, &k)) != DG_OK || (e = need(c, "value", &v)) != DG_OK)
		return e;
	size_t kl = strlen(k), vl = strlen(v);
	if (kl > DG_KEY_MAX - 8 || vl > DG_VALUE_MAX - 8) {
		/* (what dg_cache_put would refuse as DG_ERR_INVAL, unsaid) */
		snprintf(c->why, sizeof(c->why), "%s of %zu bytes: at most %u", kl > DG_KEY_MAX - 8 ?
		    "key" : "value", kl > DG_KEY_MAX - 8 ? kl : vl, kl > DG_KEY_MAX - 8 ?
		    DG_KEY_MAX - 8 : DG_VALUE_MAX - 8);
		return DG_ERR_LIMIT;
	}
	return dg_cache_put(h, k, kl, v, vl);
}

static dg_err cmd_cache_get(call *c)
{
	dg_cache *h;
	const char *k;
	dg_err e;
	if ((e = open_key(c, &h, &k)) != DG_OK)
		return e;
	dg_buf v;
	dg_buf_init(&v);
	if ((e = dg_cache_get(h, k, strlen(k), &v)) == DG_OK) {
		cJSON *j = bytes_item(v.data, v.len);
		if (j == NULL)
			e = DG_ERR_NOMEM;
		else
			cJSON_AddItemToObject(c->result, "value", j);
	} else if (e == DG_ERR_NOT_FOUND) {
		snprintf(c->why, sizeof(c->why), "key \"%s\" not found", k);
	}
	dg_buf_free(&v);
	return e;
}

static dg_err cmd_cache_remove(call *c)
{
	dg_cache *h;
	const char *k;
	dg_err e;
	if ((e = open_key(c, &h, &k)) != DG_OK)
		return e;
	bool removed = false;
	e = dg_cache_remove(h, k, strlen(k), &removed);
	if (e == DG_OK)
		cJSON_AddBoolToObject(c->result, "removed", removed);
	return e;
}

/* A scan's answer: what its entries may print to (the admin frame is 64
 * MiB; 8 MiB are left for the JSON around them). */
#define SCAN_ANSWER_MAX ((size_t)56 << 20)

static dg_err cmd_cache_scan(call *c)
{
	dg_cache *h;
	dg_err e;
	if ((e = open_cache(c, &h)) != DG_OK)
		return e;
	double lim = 100;
	if (arg_num(c, "limit", &lim) && (lim < 1 || lim > 1e6)) {
		snprintf(c->why, sizeof(c->why), "limit: 1..1000000");
		return DG_ERR_INVAL;
	}
	dg_scan *s;
	if ((e = dg_scan_open(h, 256, &s)) != DG_OK)
		return e;
	cJSON *arr = cJSON_AddArrayToObject(c->result, "entries");
	size_t n = 0, bytes = 0;
	bool more = false, by_bytes = false;
	for (;;) {
		const uint8_t *k, *v;
		size_t kl, vl;
		if ((e = dg_scan_next(s, &k, &kl, &v, &vl)) != DG_OK)
			break;
		if (n == (size_t)lim) {
			more = true;
			break;
		}
		const uint8_t *kb, *vb;
		size_t kbl, vbl;
		cJSON *o = cJSON_CreateObject();
		if (o == NULL || arr == NULL) {
			e = DG_ERR_NOMEM;
			break;
		}
		cJSON_AddItemToArray(arr, o);
		/* raw-bytes keys and values show as their bytes; others encoded */
		if (dg_bytes_of(k, kl, &kb, &kbl) != DG_OK) {
			kb = k;
			kbl = kl;
		}
		if (dg_bytes_of(v, vl, &vb, &vbl) != DG_OK) {
			vb = v;
			vbl = vl;
		}
		/* the answer is one frame: at most SCAN_ANSWER_MAX of printed
		 * entries (2 characters a byte at most, as hex), one always —
		 * before, a scan past the frame had the node close the
		 * connection (test_admin_scan_large_values) */
		size_t need = 2 * (kbl + vbl) + 64;
		if (n > 0 && bytes + need > SCAN_ANSWER_MAX) {
			cJSON_DetachItemFromArray(arr, cJSON_GetArraySize(arr) - 1);
			cJSON_Delete(o);
			more = by_bytes = true;
			break;
		}
		bytes += need;
		cJSON_AddItemToObject(o, "key", bytes_item(kb, kbl));
		cJSON_AddItemToObject(o, "value", bytes_item(vb, vbl));
		n++;
	}
	dg_scan_close(s);
	if (e == DG_ERR_NOT_FOUND)   /* the end of the scan */
		e = DG_OK;
	cJSON_AddNumberToObject(c->result, "count", (double)n);
	cJSON_AddBoolToObject(c->result, "truncated", more);
	if (by_bytes) {
		cJSON_AddStringToObject(c->result, "truncated_by", "bytes");
		cJSON_AddNumberToObject(c->result, "max_bytes", (double)SCAN_ANSWER_MAX);
	}
	return e;
}

/* ---- metrics ---- */

static void add_number(void *ctx, const char *name, uint64_t v)
{
	cJSON_AddNumberToObject(ctx, name, (double)v);
}

static void put_latency(cJSON *o, dg_cache *h)
{
	static const char *const ops[DG_OP__COUNT] = { "get", "put", "remove" };
	for (int op = 0; op < DG_OP__COUNT; op++) {
		dg_latency l;
		if (dg_cache_get_latency(h, (dg_cache_op_kind)op, &l) != DG_OK)
			continue;
		cJSON *k = cJSON_AddObjectToObject(o, ops[op]);
		uint64_t p50 = dg_latency_quantile_us(&l, 0.5), p99 = dg_latency_quantile_us(&l, 0.99);
		cJSON_AddNumberToObject(k, "count", (double)l.count);
		cJSON_AddNumberToObject(k, "mean_us", l.count ? (double)l.sum_us / (double)l.count : 0);
		/* bucket upper bounds; the last bucket (no bound) as -1 */
		cJSON_AddNumberToObject(k, "p50_us", p50 == UINT64_MAX ? -1 : (double)p50);
		cJSON_AddNumberToObject(k, "p99_us", p99 == UINT64_MAX ? -1 : (double)p99);
	}
}

static dg_err cmd_metrics(call *c)
{
	dg_msg_metric *mm = dgi_calloc(DG_MSG__COUNT, sizeof(*mm));
	if (mm == NULL)
		return DG_ERR_NOMEM;
	size_t nm = dg_tp_metrics(dgi_node_tp(c->n), mm, DG_MSG__COUNT);
	bool all = arg_bool(c, "all");
	add_hex(c->result, "node", dg_node_get_id(c->n));
	cJSON_AddStringToObject(c->result, "address", dg_node_address(c->n));
	cJSON *types = cJSON_AddArrayToObject(c->result, "messages");
	for (size_t i = 0; i < nm && i < DG_MSG__COUNT && types; i++) {
		const dg_msg_counters *k = &mm[i].c;
		if (!all && k->sent == 0 && k->recv == 0 && k->failures == 0)
			continue;
		cJSON *o = cJSON_CreateObject();
		cJSON_AddItemToArray(types, o);
		cJSON_AddStringToObject(o, "type", mm[i].name);
		cJSON_AddNumberToObject(o, "id", mm[i].type);
		cJSON_AddNumberToObject(o, "sent", (double)k->sent);
		cJSON_AddNumberToObject(o, "received", (double)k->recv);
		cJSON_AddNumberToObject(o, "bytes_sent", (double)k->bytes_sent);
		cJSON_AddNumberToObject(o, "bytes_received", (double)k->bytes_recv);
		cJSON_AddNumberToObject(o, "failures", (double)k->failures);
	}
	dgi_free(mm);
	dg_cache_config *cc;
	size_t nc = dgi_admin_caches(c->n, &cc);
	cJSON *caches = cJSON_AddArrayToObject(c->result, "caches");
	for (size_t i = 0; cc && i < nc && caches; i++) {
		dg_cache *h;
		dg_cache_metrics m;
		if (dg_cache_get_by_name(c->n, cc[i].name, &h) != DG_OK ||
		    dg_cache_get_metrics(h, &m) != DG_OK)
			continue;
		cJSON *o = cJSON_CreateObject();
		cJSON_AddItemToArray(caches, o);
		cJSON_AddStringToObject(o, "cache", cc[i].name);
		dgi_metrics_each(DGI_METRICS_CACHE, &m, add_number, o);
		put_latency(o, h);
	}
	dgi_free(cc);
	dg_tx_metrics tm;
	if (dg_tx_get_metrics(c->n, &tm) == DG_OK)
		dgi_metrics_each(DGI_METRICS_TX, &tm, add_number,
		    cJSON_AddObjectToObject(c->result, "tx"));
	dg_tp_stats st;
	dg_tp_get_stats(dgi_node_tp(c->n), &st);
	dgi_metrics_each(DGI_METRICS_TRANSPORT, &st, add_number,
	    cJSON_AddObjectToObject(c->result, "transport"));
	return DG_OK;
}

/* ---- idle-verify ---- */

typedef struct copy {
	uint32_t part;
	uint32_t node;            /* index into the fan-out's results */
	int role;
	const char *state;        /* views into the fan-out's cJSON */
	double entries, bytes;
	const char *digest;
} copy;

static int copy_cmp(const void *a, const void *b)
{
	const copy *x = a, *y = b;
	return x->part != y->part ? (x->part < y->part ? -1 : 1) :
	    (x->node < y->node ? -1 : x->node > y->node);
}

/* Collects every owner's row of every node's answer; *unanswered counts
 * the nodes that gave none. */
static copy *gather(dgi_fanres *r, size_t nr, size_t *count, int *unanswered)
{
	size_t n = 0, cap = 0;
	copy *all = NULL;
	*unanswered = 0;
	for (size_t i = 0; i < nr; i++) {
		if (r[i].err != DG_OK) {
			(*unanswered)++;
			continue;
		}
		const cJSON *row;
		cJSON_ArrayForEach(row, cJSON_GetObjectItemCaseSensitive(r[i].result, "parts")) {
			/* a peer's row: a partition number out of range is
			 * skipped, never cast (undefined for a huge double) */
			const cJSON *pn = cJSON_GetArrayItem(row, 0);
			if (cJSON_GetArraySize(row) != 6 || !cJSON_IsNumber(pn) ||
			    !(pn->valuedouble >= 0 && pn->valuedouble <= DG_PARTITIONS_MAX))
				continue;
			if (n == cap) {
				cap = cap ? 2 * cap : 1024;
				copy *g = dgi_realloc(all, cap * sizeof(*all));
				if (g == NULL) {
					dgi_free(all);
					return NULL;
				}
				all = g;
			}
			copy *c = &all[n++];
			c->part = (uint32_t)pn->valuedouble;
			c->node = (uint32_t)i;
			c->role = cJSON_GetArrayItem(row, 1)->valueint;
			c->state = cJSON_GetStringValue(cJSON_GetArrayItem(row, 2));
			c->entries = cJSON_GetArrayItem(row, 3)->valuedouble;
			c->digest = cJSON_GetStringValue(cJSON_GetArrayItem(row, 4));
			c->bytes = cJSON_GetArrayItem(row, 5)->valuedouble;
			if (c->state == NULL || c->digest == NULL)
				n--;
		}
	}
	if (n > 1)
		qsort(all, n, sizeof(*all), copy_cmp);
	*count = n;
	return all ? all : dgi_calloc(1, sizeof(copy));
}

size_t dgi_idle_rows_kept(dgi_fanres *r, size_t nr)
{
	size_t n = 0;
	int unanswered;
	copy *all = gather(r, nr, &n, &unanswered);
	dgi_free(all);
	return all != NULL ? n : 0;
}

/* Whether the OWNING copies of one partition (g[0..n)) disagree; *owning:
 * how many OWNING copies there are. */
static bool diverges(const copy *g, size_t n, int *owning)
{
	const copy *first = NULL;
	bool differ = false;
	*owning = 0;
	for (size_t i = 0; i < n; i++) {
		if (strcmp(g[i].state, "OWNING") != 0)
			continue;
		(*owning)++;
		if (first == NULL)
			first = &g[i];
		else if (first->entries != g[i].entries || strcmp(first->digest, g[i].digest) != 0)
			differ = true;
	}
	return differ;
}

typedef struct verify_round {
	dgi_fanres *r;
	size_t nr;
	copy *copies;
	size_t ncopies;
	int unanswered;
} verify_round;

static void round_free(verify_round *v)
{
	dgi_fanout_free(v->r, v->nr);
	dgi_free(v->copies);
	memset(v, 0, sizeof(*v));
}

static dg_err verify_round_run(call *c, const char *cache, verify_round *v)
{
	cJSON *args = cJSON_CreateObject();
	if (args == NULL)
		return DG_ERR_NOMEM;
	cJSON_AddStringToObject(args, "cache", cache);
	dg_err e = dgi_fanout(c->n, "local.digests", args, fan_ms(c), &v->r, &v->nr, NULL);
	cJSON_Delete(args);
	if (e != DG_OK)
		return e;
	v->copies = gather(v->r, v->nr, &v->ncopies, &v->unanswered);
	return v->copies ? DG_OK : DG_ERR_NOMEM;
}

/* Whether partition p diverged in round v. */
static bool round_diverges(const verify_round *v, uint32_t p)
{
	size_t i = 0;
	while (i < v->ncopies && v->copies[i].part < p)
		i++;
	size_t j = i;
	while (j < v->ncopies && v->copies[j].part == p)
		j++;
	int owning;
	return diverges(v->copies + i, j - i, &owning);
}

static void report_partition(cJSON *div, const char *cache, const verify_round *v,
    const copy *g, size_t n)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddItemToArray(div, o);
	cJSON_AddStringToObject(o, "cache", cache);
	cJSON_AddNumberToObject(o, "partition", g[0].part);
	cJSON *arr = cJSON_AddArrayToObject(o, "copies");
	for (size_t i = 0; i < n; i++) {
		cJSON *k = cJSON_CreateObject();
		cJSON_AddItemToArray(arr, k);
		add_hex(k, "node", v->r[g[i].node].id);
		cJSON_AddStringToObject(k, "address", v->r[g[i].node].address);
		cJSON_AddStringToObject(k, "role", g[i].role == 1 ? "primary" : "backup");
		cJSON_AddStringToObject(k, "state", g[i].state);
		cJSON_AddNumberToObject(k, "entries", g[i].entries);
		cJSON_AddStringToObject(k, "digest", g[i].digest);
		cJSON_AddNumberToObject(k, "bytes", g[i].bytes);
	}
}

/* One cache: a partition is reported when its OWNING copies disagree in
 * three checks 200 ms apart (a write in flight between the owners makes
 * one check disagree, not three: "idle" verify). */
static dg_err verify_cache(call *c, const char *cache, cJSON *div, double *checked,
    double *skipped, int *unanswered)
{
	verify_round first = { 0 }, again = { 0 };
	dg_err e = verify_round_run(c, cache, &first);
	if (e != DG_OK)
		return e;
	*unanswered += first.unanswered;
	/* the divergent partitions of the first round, re-checked */
	uint32_t *sus = dgi_calloc(first.ncopies + 1, sizeof(*sus));
	size_t nsus = 0;
	if (sus == NULL) {
		round_free(&first);
		return DG_ERR_NOMEM;
	}
	for (size_t i = 0; i < first.ncopies; ) {
		size_t j = i;
		while (j < first.ncopies && first.copies[j].part == first.copies[i].part)
			j++;
		int owning;
		if (diverges(first.copies + i, j - i, &owning))
			sus[nsus++] = first.copies[i].part;
		if (owning == 0)
			(*skipped)++;
		else
			(*checked)++;
		i = j;
	}
	for (int round = 0; round < 2 && nsus > 0 && e == DG_OK; round++) {
		struct timespec ts = { 0, 200 * 1000000L };
		nanosleep(&ts, NULL);
		if ((e = verify_round_run(c, cache, &again)) != DG_OK)
			break;
		size_t keep = 0;
		for (size_t k = 0; k < nsus; k++)
			if (round_diverges(&again, sus[k]))
				sus[keep++] = sus[k];
		nsus = keep;
		round_free(&again);
	}
	for (size_t k = 0; k < nsus && e == DG_OK; k++) {
		size_t i = 0;
		while (i < first.ncopies && first.copies[i].part != sus[k])
			i++;
		size_t j = i;
		while (j < first.ncopies && first.copies[j].part == sus[k])
			j++;
		report_partition(div, cache, &first, first.copies + i, j - i);
	}
	dgi_free(sus);
	round_free(&first);
	return e;
}

static dg_err cmd_idle_verify(call *c)
{
	const cJSON *want = cJSON_GetObjectItemCaseSensitive(c->args, "caches");
	dg_cache_config *cc;
	size_t nc = dgi_admin_caches(c->n, &cc);
	if (cc == NULL)
		return DG_ERR_NOMEM;
	const cJSON *w;
	cJSON_ArrayForEach(w, want) {
		bool found = false;
		for (size_t i = 0; i < nc && !found; i++)
			found = cJSON_IsString(w) && strcmp(cc[i].name, w->valuestring) == 0;
		if (!found) {
			snprintf(c->why, sizeof(c->why), "no cache named \"%s\"",
			    cJSON_IsString(w) ? w->valuestring : "?");
			dgi_free(cc);
			return DG_ERR_NOT_FOUND;
		}
	}
	cJSON *names = cJSON_AddArrayToObject(c->result, "caches");
	cJSON *div = cJSON_AddArrayToObject(c->result, "divergent");
	double checked = 0, skipped = 0;
	int unanswered = 0;
	dg_err e = DG_OK;
	for (size_t i = 0; i < nc && e == DG_OK; i++) {
		bool asked = cJSON_GetArraySize(want) == 0;
		cJSON_ArrayForEach(w, want)
			asked |= strcmp(cc[i].name, w->valuestring) == 0;
		if (!asked)
			continue;
		cJSON_AddItemToArray(names, cJSON_CreateString(cc[i].name));
		e = verify_cache(c, cc[i].name, div, &checked, &skipped, &unanswered);
	}
	dgi_free(cc);
	cJSON_AddNumberToObject(c->result, "partitions_checked", checked);
	cJSON_AddNumberToObject(c->result, "partitions_skipped", skipped);
	cJSON_AddNumberToObject(c->result, "nodes_unanswered", unanswered);
	cJSON_AddNumberToObject(c->result, "divergent_count", cJSON_GetArraySize(div));
	return e;
}

/* ---- transactions ---- */

/* A participant row knows its tx's id, not its label or mode: take them
 * from the near row of the same id, when the near node answered. */
static void fill_from_near(cJSON *txs)
{
	static const char *const from_near[] = { "label", "concurrency", "isolation" };
	cJSON *t, *n;
	cJSON_ArrayForEach(t, txs) {
		const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "id"));
		const char *role = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(t, "role"));
		if (id == NULL || role == NULL || strcmp(role, "near") == 0)
			continue;
		cJSON_ArrayForEach(n, txs) {
			const char *nid = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(n, "id"));
			const char *nrole = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(n,
			    "role"));
			if (nid == NULL || nrole == NULL || strcmp(nrole, "near") != 0 ||
			    strcmp(nid, id) != 0)
				continue;
			for (size_t k = 0; k < 3; k++) {
				const cJSON *v = cJSON_GetObjectItemCaseSensitive(n, from_near[k]);
				if (cJSON_IsString(v))
					cJSON_ReplaceItemInObjectCaseSensitive(t, from_near[k],
					    cJSON_CreateString(v->valuestring));
			}
			break;
		}
	}
}

static dg_err cmd_tx_list(call *c)
{
	dgi_fanres *r;
	size_t nr;
	double min_age = 0;
	arg_num(c, "min_age_ms", &min_age);
	dg_err e = dgi_fanout(c->n, "local.txs", NULL, fan_ms(c), &r, &nr, NULL);
	if (e != DG_OK)
		return e;
	cJSON *arr = cJSON_AddArrayToObject(c->result, "txs");
	int unanswered = 0;
	for (size_t i = 0; i < nr && arr; i++) {
		if (r[i].err != DG_OK) {
			unanswered++;
			continue;
		}
		const cJSON *t;
		cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(r[i].result, "txs")) {
			const cJSON *age = cJSON_GetObjectItemCaseSensitive(t, "age_ms");
			if (cJSON_IsNumber(age) && age->valuedouble < min_age)
				continue;
			cJSON *o = cJSON_Duplicate(t, true);
			if (o == NULL)
				break;
			add_hex(o, "node", r[i].id);
			cJSON_AddStringToObject(o, "address", r[i].address);
			cJSON_AddItemToArray(arr, o);
		}
	}
	fill_from_near(arr);
	cJSON_AddNumberToObject(c->result, "nodes_unanswered", unanswered);
	dgi_fanout_free(r, nr);
	return arr ? DG_OK : DG_ERR_NOMEM;
}

static dg_err cmd_tx_kill(call *c)
{
	const char *id;
	dg_err e = need(c, "id", &id);
	if (e != DG_OK)
		return e;
	unsigned long long near, seq;
	char rest;
	if (sscanf(id, "%16llx:%llu%c", &near, &seq, &rest) != 2) {
		snprintf(c->why, sizeof(c->why), "\"%s\": a tx id is NEAR:SEQ as tx list "
		    "prints it (16 hex digits, a colon, a number)", id);
		return DG_ERR_INVAL;
	}
	e = dgi_tx_kill(dgi_node_txs(c->n), near, seq);
	if (e == DG_ERR_UNREACHABLE || e == DG_ERR_CONN_BROKEN) {
		/* its near node is gone (or cut off) and not yet removed: the
		 * tx ends with it, finished by recovery (a holder that just
		 * exited was found so, killed or not, until its removal) */
		e = DG_ERR_NOT_FOUND;
		snprintf(c->why, sizeof(c->why), "no running transaction %s: its near node "
		    "%016llx does not answer (gone or cut off: recovery finishes its "
		    "transactions)", id, near);
	} else if (e == DG_ERR_NOT_FOUND) {
		snprintf(c->why, sizeof(c->why), "no running transaction %s", id);
	}
	else if (e == DG_ERR_CONFLICT)
		snprintf(c->why, sizeof(c->why), "transaction %s is already committing: it "
		    "finishes", id);
	if (e == DG_OK)
		cJSON_AddStringToObject(c->result, "killed", id);
	return e;
}

/* ---- test hooks (DG_ADMIN_TEST_HOOKS=1) ---- */

static dg_err cmd_debug_put_local(call *c)
{
	const char *hooks = getenv("DG_ADMIN_TEST_HOOKS");
	if (hooks == NULL || strcmp(hooks, "1") != 0) {
		snprintf(c->why, sizeof(c->why), "test hooks are off (DG_ADMIN_TEST_HOOKS=1 "
		    "in the node's environment turns them on)");
		return DG_ERR_UNSUPPORTED;
	}
	dg_cache *h;
	const char *k, *v;
	dg_err e;
	if ((e = open_key(c, &h, &k)) != DG_OK || (e = need(c, "value", &v)) != DG_OK)
		return e;
	dgi_log("warn", "ADMIN-TEST-CORRUPT", "cache=\"%s\" why=\"a test overwrote this node's "
	    "copy of a key\"", dg_cache_config_of(h)->name);
	return dgi_cache_debug_put_local(h, k, strlen(k), v, strlen(v));
}

/* ---- shutdown ---- */

static dg_err cmd_shutdown(call *c)
{
	const dg_node_config *cfg = dgi_node_config(c->n);
	char me[17];
	dgi_admin_hex64(dg_node_get_id(c->n), me);
	if (cfg->on_shutdown == NULL) {
		snprintf(c->why, sizeof(c->why), "this node is embedded in an application: it "
		    "stops when the application calls dg_node_stop");
		return DG_ERR_UNSUPPORTED;
	}
	cJSON *arr = cJSON_AddArrayToObject(c->result, "stopping");
	if (arg_bool(c, "cluster")) {
		/* every other node first (they hand their partitions over while
		 * this one still serves), this one last */
		cJSON *args = cJSON_CreateObject();
		cJSON_AddStringToObject(args, "skip", me);
		dgi_fanres *r;
		size_t nr;
		dg_err e = dgi_fanout(c->n, "local.shutdown", args, fan_ms(c), &r, &nr, NULL);
		cJSON_Delete(args);
		if (e != DG_OK)
			return e;
		for (size_t i = 0; i < nr; i++) {
			if (r[i].id == dg_node_get_id(c->n))
				continue;
			cJSON *o = cJSON_CreateObject();
			cJSON_AddItemToArray(arr, o);
			add_hex(o, "id", r[i].id);
			cJSON_AddStringToObject(o, "address", r[i].address);
			if (r[i].err != DG_OK)
				cJSON_AddStringToObject(o, "error", r[i].errmsg[0] ? r[i].errmsg :
				    dg_strerror(r[i].err));
		}
		dgi_fanout_free(r, nr);
	}
	cJSON *o = cJSON_CreateObject();
	cJSON_AddItemToArray(arr, o);
	cJSON_AddStringToObject(o, "id", me);
	cJSON_AddStringToObject(o, "address", dg_node_address(c->n));
	c->stop_after = true;
	return DG_OK;
}

/* ---- encryption at rest ---- */

/* Every node re-reads its key file and re-wraps its data keys. */
static dg_err cmd_encryption_rotate(call *c)
{
	dgi_fanres *r;
	size_t nr;
	dg_err e = dgi_fanout(c->n, "local.encryption-rotate", NULL, fan_ms(c), &r, &nr, NULL);
	if (e != DG_OK)
		return e;
	cJSON *arr = cJSON_AddArrayToObject(c->result, "nodes");
	for (size_t i = 0; i < nr; i++) {
		cJSON *o = cJSON_CreateObject();
		cJSON_AddItemToArray(arr, o);
		add_hex(o, "id", r[i].id);
		cJSON_AddStringToObject(o, "address", r[i].address);
		if (r[i].err != DG_OK) {
			cJSON_AddStringToObject(o, "error", r[i].errmsg[0] ? r[i].errmsg :
			    dg_strerror(r[i].err));
			cJSON_AddStringToObject(o, "code", dg_strerror(r[i].err));
		} else {
			const cJSON *k = cJSON_GetObjectItemCaseSensitive(r[i].result, "key_id");
			if (cJSON_IsString(k))
				cJSON_AddStringToObject(o, "key_id", k->valuestring);
		}
	}
	dgi_fanout_free(r, nr);
	return DG_OK;
}

/* ---- baseline (admin_baseline.c) ---- */

static dg_err cmd_baseline(call *c)
{
	return dgi_admin_cmd_baseline(c->n, c->args, c->result, c->why, sizeof(c->why));
}

/* ---- the table ---- */

static const struct {
	const char *name;
	cmd_fn fn;
} cmds[] = {
	{ "state", cmd_state },
	{ "nodes", cmd_nodes },
	{ "cache.list", cmd_cache_list },
	{ "cache.create", cmd_cache_create },
	{ "cache.destroy", cmd_cache_destroy },
	{ "cache.reset-lost", cmd_cache_reset_lost },
	{ "cache.put", cmd_cache_put },
	{ "cache.get", cmd_cache_get },
	{ "cache.remove", cmd_cache_remove },
	{ "cache.scan", cmd_cache_scan },
	{ "metrics", cmd_metrics },
	{ "rebalance", cmd_rebalance },
	{ "partitions", cmd_partitions },
	{ "shutdown", cmd_shutdown },
	{ "encryption.rotate", cmd_encryption_rotate },
	{ "idle-verify", cmd_idle_verify },
	{ "tx.list", cmd_tx_list },
	{ "tx.kill", cmd_tx_kill },
	{ "baseline", cmd_baseline },
	{ "debug.put-local", cmd_debug_put_local },
};

void dgi_admin_err_code(dg_err e, char *out, size_t n)
{
	const char *s = dg_strerror(e);
	const char *colon = strchr(s, ':');
	snprintf(out, n, "%.*s", colon ? (int)(colon - s) : (int)strlen(s), s);
}

cJSON *dgi_admin_dispatch(dg_node *n, const cJSON *req, bool *stop_after)
{
	const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(req, "cmd");
	call c = { .n = n, .args = cJSON_GetObjectItemCaseSensitive(req, "args") };
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(req, "timeout_ms");
	uint64_t budget = FANOUT_MS;
	if (cJSON_IsNumber(t) && t->valuedouble >= 1 && t->valuedouble <= 3600000)
		budget = (uint64_t)t->valuedouble * 4 / 5;
	c.deadline = dgi_now_ms() + budget;
	cJSON *rep = cJSON_CreateObject();
	if (rep == NULL)
		return NULL;
	dg_err e = DG_ERR_UNSUPPORTED;
	if (!cJSON_IsString(cmd)) {
		e = DG_ERR_INVAL;
		snprintf(c.why, sizeof(c.why), "request without a \"cmd\" string");
	} else {
		cmd_fn fn = NULL;
		for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]) && !fn; i++)
			if (strcmp(cmds[i].name, cmd->valuestring) == 0)
				fn = cmds[i].fn;
		if (fn == NULL) {
			snprintf(c.why, sizeof(c.why), "unknown command \"%s\"", cmd->valuestring);
		} else if ((c.result = cJSON_CreateObject()) == NULL) {
			e = DG_ERR_NOMEM;
		} else {
			e = fn(&c);
		}
	}
	if (e == DG_OK) {
		cJSON_AddTrueToObject(rep, "ok");
		cJSON_AddItemToObject(rep, "result", c.result);
		*stop_after = c.stop_after;
		return rep;
	}
	cJSON_Delete(c.result);
	char code[64];
	dgi_admin_err_code(e, code, sizeof(code));
	cJSON_AddFalseToObject(rep, "ok");
	cJSON_AddStringToObject(rep, "error", c.why[0] ? c.why : dg_strerror(e));
	cJSON_AddStringToObject(rep, "code", code);
	return rep;
}
