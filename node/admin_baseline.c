/*
 * admin_baseline.c — the "baseline" admin command (admin_baseline.h):
 * dgctl baseline [show | set | add | remove ADDR...], like Ignite's
 * control.sh --baseline.  Everything goes through the public node API
 * (dg_node_baseline_get / dg_node_baseline_change, dg_node_topology).
 */
#include "admin_baseline.h"
#include "admin.h"
#include "node_int.h"

#include <stdio.h>
#include <string.h>

#define MAX_NODES 1024

static bool op_of(const char *s, int *op)
{
	static const struct { const char *name; int op; } ops[] = {
		{ "show", -1 }, { "set", DG_BASELINE_OP_SET }, { "add", DG_BASELINE_OP_ADD },
		{ "remove", DG_BASELINE_OP_REMOVE },
	};
	for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
		if (strcmp(s, ops[i].name) == 0) {
			*op = ops[i].op;
			return true;
		}
	return false;
}

/* args.nodes as an array of strings (views into args), dgi_alloc'ed. */
static dg_err nodes_arg(const cJSON *args, const char ***out, size_t *n, char *why,
    size_t whylen)
{
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(args, "nodes");
	int count = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : 0;
	if (count <= 0) {
		snprintf(why, whylen, "argument \"nodes\" (a non-empty array of addresses) is required");
		return DG_ERR_INVAL;
	}
	const char **v = dgi_calloc((size_t)count, sizeof(*v));
	if (v == NULL)
		return DG_ERR_NOMEM;
	int i = 0;
	const cJSON *it;
	cJSON_ArrayForEach(it, a) {
		if (!cJSON_IsString(it)) {
			snprintf(why, whylen, "\"nodes\" must hold strings (addresses such as tcp://host:port)");
			dgi_free(v);
			return DG_ERR_INVAL;
		}
		v[i++] = it->valuestring;
	}
	*out = v;
	*n = (size_t)count;
	return DG_OK;
}

static cJSON *entry(cJSON *arr, const char *address, uint64_t id)
{
	char h[17] = "";
	if (id != 0)
		dgi_admin_hex64(id, h);
	cJSON *o = cJSON_CreateObject();
	if (o == NULL || !cJSON_AddItemToArray(arr, o))
		return NULL;
	if (cJSON_AddStringToObject(o, "address", address) == NULL ||
	    cJSON_AddStringToObject(o, "id", h) == NULL)
		return NULL;
	return o;
}

/* result: the baseline and the STANDBY nodes now. */
static dg_err show(dg_node *n, cJSON *result)
{
	dg_baseline_node *bl = dgi_alloc(MAX_NODES * sizeof(*bl));
	dg_node_info *ni = dgi_alloc(MAX_NODES * sizeof(*ni));
	dg_err e = bl != NULL && ni != NULL ? DG_OK : DG_ERR_NOMEM;
	bool set = false;
	int64_t version = 0, tv = 0;
	size_t nb = 0, nn = 0;
	if (e == DG_OK) {
		nb = dg_node_baseline_get(n, &set, &version, bl, MAX_NODES);
		nn = dg_node_topology(n, &tv, ni, MAX_NODES);
	}
	cJSON *ba = e == DG_OK ? cJSON_AddArrayToObject(result, "baseline") : NULL;
	cJSON *sa = e == DG_OK ? cJSON_AddArrayToObject(result, "standby") : NULL;
	if (ba == NULL || sa == NULL || cJSON_AddBoolToObject(result, "auto", !set) == NULL ||
	    cJSON_AddNumberToObject(result, "topology_version", (double)version) == NULL)
		e = DG_ERR_NOMEM;
	for (size_t i = 0; e == DG_OK && i < nb && i < MAX_NODES; i++) {
		cJSON *o = entry(ba, bl[i].address, bl[i].id);
		if (o == NULL || cJSON_AddBoolToObject(o, "online", bl[i].online) == NULL)
			e = DG_ERR_NOMEM;
	}
	/* the topology read second may be newer: its STANDBY bits still
	 * describe a real version, and an operator reruns show anyway */
	for (size_t i = 0; e == DG_OK && i < nn && i < MAX_NODES; i++)
		if (ni[i].standby && entry(sa, ni[i].address, ni[i].id) == NULL)
			e = DG_ERR_NOMEM;
	dgi_free(bl);
	dgi_free(ni);
	return e;
}

dg_err dgi_admin_cmd_baseline(dg_node *n, const cJSON *args, cJSON *result, char *why,
    size_t whylen)
{
	const cJSON *o = cJSON_GetObjectItemCaseSensitive(args, "op");
	const char *name = cJSON_IsString(o) ? o->valuestring : "show";
	int op;
	if (!op_of(name, &op)) {
		snprintf(why, whylen, "\"op\" must be show, set, add or remove");
		return DG_ERR_INVAL;
	}
	if (op >= 0) {
		const char **addrs = NULL;
		size_t na = 0;
		dg_err e = nodes_arg(args, &addrs, &na, why, whylen);
		if (e != DG_OK)
			return e;
		e = dg_node_baseline_change(n, (dg_baseline_op)op, addrs, na, 0, why, whylen);
		dgi_free(addrs);
		if (e != DG_OK)
			return e;
	}
	return show(n, result);
}
