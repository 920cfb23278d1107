/*
 * admin_local.c — the local commands every node answers for a fan-out
 * (admin.h, dgi_admin_local): this node's part of `dgctl nodes`,
 * `rebalance status`, `idle-verify`, `tx list` and `shutdown --cluster`.
 * Results are cJSON objects; 64-bit ids and digests travel as 16 hex
 * digits (JSON numbers lose precision above 2^53).
 */
#include "cache/pcrypt.h"
#include "admin.h"
#include "node_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

size_t dgi_admin_caches(dg_node *n, dg_cache_config **out)
{
	/* the list may grow between the count and the copy: copy what fits */
	size_t want = dg_cache_list(n, NULL, 0) + 8;
	*out = dgi_calloc(want, sizeof(**out));
	if (*out == NULL)
		return 0;
	size_t got = dg_cache_list(n, *out, want);
	return got < want ? got : want;
}

void dgi_admin_hex64(uint64_t v, char out[17])
{
	snprintf(out, 17, "%016llx", (unsigned long long)v);
}

static cJSON *add_hex(cJSON *o, const char *name, uint64_t v)
{
	char h[17];
	dgi_admin_hex64(v, h);
	return cJSON_AddStringToObject(o, name, h);
}

static dg_err local_info(dg_node *n, cJSON *r)
{
	const dg_node_config *cfg = dgi_node_config(n);
	add_hex(r, "id", dg_node_get_id(n));
	cJSON_AddStringToObject(r, "address", dg_node_address(n));
	cJSON_AddStringToObject(r, "version", dg_version());
	cJSON_AddNumberToObject(r, "uptime_ms", (double)(dgi_now_ms() - dgi_node_started_ms(n)));
	cJSON_AddBoolToObject(r, "client", cfg->client);
	const char *admin = dg_node_admin_address(n), *http = dg_node_http_address(n);
	cJSON_AddStringToObject(r, "admin", admin ? admin : "");
	cJSON_AddStringToObject(r, "http", http ? http : "");
	cJSON_AddBoolToObject(r, "persistence", cfg->data_dir != NULL);
	return DG_OK;
}

/* Per cache: this node's partitions by state and its rebalancing progress. */
static dg_err local_rebalance(dg_node *n, cJSON *r)
{
	dg_cache_config *cc;
	size_t nc = dgi_admin_caches(n, &cc);
	/* the topology this node's caches have applied: the asker counts a
	 * node not at its own version as still rebalancing */
	cJSON_AddNumberToObject(r, "topology_version", (double)dgi_grid_topver(dgi_node_grid(n)));
	cJSON *arr = cJSON_AddArrayToObject(r, "caches");
	if (arr == NULL || cc == NULL) {
		dgi_free(cc);
		return DG_ERR_NOMEM;
	}
	for (size_t i = 0; i < nc; i++) {
		dg_cache *c;
		dg_cache_metrics m;
		if (dg_cache_get_by_name(n, cc[i].name, &c) != DG_OK ||
		    dg_cache_get_metrics(c, &m) != DG_OK)
			continue;
		cJSON *o = cJSON_CreateObject();
		if (o == NULL) {
			dgi_free(cc);
			return DG_ERR_NOMEM;
		}
		cJSON_AddItemToArray(arr, o);
		cJSON_AddStringToObject(o, "cache", cc[i].name);
		cJSON_AddNumberToObject(o, "partitions", cc[i].partitions);
		cJSON_AddNumberToObject(o, "owning", m.partitions_owning);
		cJSON_AddNumberToObject(o, "moving", m.partitions_moving);
		cJSON_AddNumberToObject(o, "lost", m.partitions_lost);
		cJSON_AddNumberToObject(o, "repairing", m.partitions_repairing);
		cJSON_AddNumberToObject(o, "done", (double)m.rebalance_partitions_done);
		cJSON_AddNumberToObject(o, "left", (double)m.rebalance_partitions_left);
		cJSON_AddNumberToObject(o, "bytes", (double)m.rebalance_bytes);
		cJSON_AddNumberToObject(o, "entries", (double)m.entries);
		cJSON_AddNumberToObject(o, "primary_entries", (double)m.primary_entries);
	}
	dgi_free(cc);
	return DG_OK;
}

char dgi_admin_part_char(uint8_t role_state)
{
	int role = role_state >> 4, state = role_state & 0xf;
	switch (state) {
	case DGI_PART_NONE:
		return '.';
	case DGI_PART_OWNING:
		return role == 1 ? 'P' : role == 2 ? 'B' : 'O';
	case DGI_PART_MOVING:
		return role == 1 ? 'M' : 'm';
	case DGI_PART_LOST:
		return role == 1 ? 'L' : 'l';
	default:
		return '?';
	}
}

/* Per cache: this node's role and state of every partition as one
 * character each (ADMIN.md, local.partitions): 1 KiB a cache. */
static dg_err local_partitions(dg_node *n, cJSON *r)
{
	dg_cache_config *cc;
	size_t nc = dgi_admin_caches(n, &cc);
	cJSON_AddNumberToObject(r, "topology_version", (double)dgi_grid_topver(dgi_node_grid(n)));
	cJSON *arr = cJSON_AddArrayToObject(r, "caches");
	uint8_t *rs = dgi_alloc(DG_PARTITIONS_MAX);
	char *map = dgi_alloc(DG_PARTITIONS_MAX + 1);
	dg_err e = arr == NULL || cc == NULL || rs == NULL || map == NULL ? DG_ERR_NOMEM : DG_OK;
	for (size_t i = 0; e == DG_OK && i < nc; i++) {
		dg_cache *c;
		uint32_t count = 0;
		if (dg_cache_get_by_name(n, cc[i].name, &c) != DG_OK ||
		    dgi_cache_part_map(c, rs, DG_PARTITIONS_MAX, &count) != DG_OK)
			continue; /* destroyed meanwhile */
		if (count > DG_PARTITIONS_MAX)
			count = DG_PARTITIONS_MAX;
		for (uint32_t p = 0; p < count; p++)
			map[p] = dgi_admin_part_char(rs[p]);
		map[count] = '\0';
		cJSON *o = cJSON_CreateObject();
		if (o == NULL || !cJSON_AddItemToArray(arr, o)) {
			cJSON_Delete(o);
			e = DG_ERR_NOMEM;
			break;
		}
		cJSON_AddStringToObject(o, "cache", cc[i].name);
		cJSON_AddNumberToObject(o, "partitions", count);
		if (cJSON_AddStringToObject(o, "map", map) == NULL)
			e = DG_ERR_NOMEM;
	}
	dgi_free(rs);
	dgi_free(map);
	dgi_free(cc);
	return e;
}

void dgi_admin_stop_node(dg_node *n)
{
	const dg_node_config *cfg = dgi_node_config(n);
	char me[17];
	dgi_admin_hex64(dg_node_get_id(n), me);
	dgi_log("info", "ADMIN-SHUTDOWN", "node=%s", me);
	cfg->on_shutdown(cfg->shutdown_ctx);
}

static dg_err local_shutdown(dg_node *n, const cJSON *args, cJSON *r, char *why, size_t wl,
    bool *stop_after)
{
	const dg_node_config *cfg = dgi_node_config(n);
	const cJSON *skip = cJSON_GetObjectItemCaseSensitive(args, "skip");
	char me[17];
	dgi_admin_hex64(dg_node_get_id(n), me);
	if (cJSON_IsString(skip) && strcmp(skip->valuestring, me) == 0) {
		cJSON_AddBoolToObject(r, "stopping", false);
		return DG_OK;
	}
	if (cfg->on_shutdown == NULL) {
		snprintf(why, wl, "this node is embedded in an application: it stops "
		    "when the application calls dg_node_stop");
		return DG_ERR_UNSUPPORTED;
	}
	*stop_after = true;
	cJSON_AddBoolToObject(r, "stopping", true);
	return DG_OK;
}

/* Each partition's digest holds its lock while it hashes the entries; a
 * scan that runs flat out is preempted at the end of its time slice, most
 * likely inside such a hold, and the transport thread (which applies every
 * message of this node) then waits for it to be scheduled again — ms of
 * stall (dgbench admin, cache_under_admin).  Sleeping briefly between
 * partitions every SCAN_RUN_NS gives the CPU back at a point where no lock
 * is held, so the slice rarely ends inside one. */
#define SCAN_RUN_NS 200000
#define SCAN_PAUSE_NS 100000

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void pause_now_and_then(uint64_t *ran)
{
	if (mono_ns() - *ran < SCAN_RUN_NS)
		return;
	struct timespec ts = { 0, SCAN_PAUSE_NS };
	nanosleep(&ts, NULL);
	*ran = mono_ns();
}

/* This node's digest of every partition of one cache it holds a copy of
 * as an owner: "parts": [[part, role, state, entries, "digest", bytes], ...]
 * (arrays, not objects: 1024 partitions per cache). */
static dg_err local_digests(dg_node *n, const cJSON *args, cJSON *r, char *why, size_t wl)
{
	const cJSON *name = cJSON_GetObjectItemCaseSensitive(args, "cache");
	dg_cache *c;
	if (!cJSON_IsString(name) || dg_cache_get_by_name(n, name->valuestring, &c) != DG_OK) {
		snprintf(why, wl, "no cache named \"%s\" on this node",
		    cJSON_IsString(name) ? name->valuestring : "");
		return DG_ERR_NOT_FOUND;
	}
	uint32_t parts = dg_cache_config_of(c)->partitions;
	cJSON *arr = cJSON_AddArrayToObject(r, "parts");
	uint64_t ran = mono_ns();
	for (uint32_t p = 0; p < parts && arr; p++) {
		dgi_part_digest d;
		dg_err e = dgi_cache_part_digest(c, p, &d);
		if (e != DG_OK)
			return e;
		pause_now_and_then(&ran);
		if (d.role == 0)
			continue;   /* not an owner: a copy being handed over is not compared */
		char hex[17];
		dgi_admin_hex64(d.digest, hex);
		cJSON *row = cJSON_CreateArray();
		if (row == NULL)
			return DG_ERR_NOMEM;
		cJSON_AddItemToArray(arr, row);
		cJSON_AddItemToArray(row, cJSON_CreateNumber(p));
		cJSON_AddItemToArray(row, cJSON_CreateNumber(d.role));
		cJSON_AddItemToArray(row, cJSON_CreateString(dgi_part_state_name(d.state)));
		cJSON_AddItemToArray(row, cJSON_CreateNumber((double)d.entries));
		cJSON_AddItemToArray(row, cJSON_CreateString(hex));
		cJSON_AddItemToArray(row, cJSON_CreateNumber((double)d.bytes));
	}
	return arr ? DG_OK : DG_ERR_NOMEM;
}

static const char *conc_name(int c)
{
	return c == DG_PESSIMISTIC ? "PESSIMISTIC" : c == DG_OPTIMISTIC ? "OPTIMISTIC" : "";
}

static const char *iso_name(int i)
{
	return i == DG_READ_COMMITTED ? "READ_COMMITTED" : i == DG_REPEATABLE_READ ?
	    "REPEATABLE_READ" : i == DG_SERIALIZABLE ? "SERIALIZABLE" : "";
}

/* The transactions this node knows: near ones and participant records. */
static dg_err local_txs(dg_node *n, cJSON *r)
{
	size_t cap = 256, count;
	dgi_tx_info *tx = NULL;
	for (;;) {
		dgi_free(tx);
		if ((tx = dgi_calloc(cap, sizeof(*tx))) == NULL)
			return DG_ERR_NOMEM;
		count = dgi_tx_list(dgi_node_txs(n), tx, cap);
		if (count <= cap)
			break;
		cap = count + 64;
	}
	static const char *const roles[] = { "near", "primary", "backup" };
	cJSON *arr = cJSON_AddArrayToObject(r, "txs");
	for (size_t i = 0; i < count && arr; i++) {
		cJSON *o = cJSON_CreateObject();
		if (o == NULL)
			break;
		cJSON_AddItemToArray(arr, o);
		char id[48];
		snprintf(id, sizeof(id), "%016llx:%llu", (unsigned long long)tx[i].near,
		    (unsigned long long)tx[i].id);
		cJSON_AddStringToObject(o, "id", id);
		add_hex(o, "near", tx[i].near);
		cJSON_AddStringToObject(o, "role", tx[i].role >= 0 && tx[i].role <= 2 ?
		    roles[tx[i].role] : "?");
		cJSON_AddStringToObject(o, "state", tx[i].state ? tx[i].state : "?");
		cJSON_AddStringToObject(o, "concurrency", conc_name(tx[i].concurrency));
		cJSON_AddStringToObject(o, "isolation", iso_name(tx[i].isolation));
		cJSON_AddNumberToObject(o, "age_ms", (double)tx[i].age_ms);
		cJSON_AddNumberToObject(o, "timeout_ms", tx[i].timeout_ms);
		cJSON_AddNumberToObject(o, "keys", tx[i].keys);
		cJSON_AddStringToObject(o, "label", tx[i].label);
	}
	dgi_free(tx);
	return arr ? DG_OK : DG_ERR_NOMEM;
}

/* Re-reads this node's encryption key file and re-wraps its data keys
 * under the key now there (the records stay as they are). */
static dg_err local_rekey(dg_node *n, cJSON *r, char *why, size_t wl)
{
	const dg_node_config *cfg = dgi_node_config(n);
	uint8_t key[32], id[8];
	char hex[17];
	if (cfg->encryption_key_file == NULL || cfg->data_dir == NULL) {
		snprintf(why, wl, "this node has no encryption at rest (encryption_key_file, "
		    "data_dir)");
		return DG_ERR_STATE;
	}
	if (dgi_key_file_read(cfg->encryption_key_file, key, why, wl) != 0)
		return DG_ERR_INVAL;
	dg_err e = dgi_grid_rekey(dgi_node_grid(n), key);
	dgi_key_id(key, id);
	memset(key, 0, sizeof(key));
	for (int i = 0; i < 8; i++)
		snprintf(hex + 2 * i, 3, "%02x", id[i]);
	if (e == DG_ERR_AUTH)
		snprintf(why, wl, "the key this node uses does not open one of its data keys");
	if (e != DG_OK)
		return e;
	dgi_log("info", "ENCRYPTION-ROTATED", "key_id=%s file=\"%s\"", hex,
	    cfg->encryption_key_file);
	cJSON_AddStringToObject(r, "key_id", hex);
	return DG_OK;
}

dg_err dgi_admin_local(dg_node *n, const char *cmd, const cJSON *args, cJSON **result,
    char *why, size_t whylen, bool *stop_after)
{
	cJSON *r = cJSON_CreateObject();
	if (r == NULL)
		return DG_ERR_NOMEM;
	dg_err e;
	if (strcmp(cmd, "local.info") == 0)
		e = local_info(n, r);
	else if (strcmp(cmd, "local.rebalance") == 0)
		e = local_rebalance(n, r);
	else if (strcmp(cmd, "local.partitions") == 0)
		e = local_partitions(n, r);
	else if (strcmp(cmd, "local.digests") == 0)
		e = local_digests(n, args, r, why, whylen);
	else if (strcmp(cmd, "local.txs") == 0)
		e = local_txs(n, r);
	else if (strcmp(cmd, "local.shutdown") == 0)
		e = local_shutdown(n, args, r, why, whylen, stop_after);
	else if (strcmp(cmd, "local.encryption-rotate") == 0)
		e = local_rekey(n, r, why, whylen);
	else {
		snprintf(why, whylen, "unknown local command %s (a node of another version?)", cmd);
		e = DG_ERR_UNSUPPORTED;
	}
	if (e != DG_OK) {
		cJSON_Delete(r);
		return e;
	}
	*result = r;
	return DG_OK;
}
