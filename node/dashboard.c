/*
 * dashboard.c — the dashboard's routes (dashboard.h): its embedded files
 * and /api/NAME, each answered by the admin command it maps to, run in
 * the HTTP connection's thread exactly as the admin endpoint runs it for
 * dgctl (admin.h, dgi_admin_dispatch).
 */
#include "dashboard.h"
#include "admin.h"

#include <cjson/cJSON.h>

#include <stdlib.h>
#include <string.h>

/* How long a fan-out behind one answer may take: under the page's refresh
 * period (2 s) plus what a node that stopped answering costs once.  The
 * node ends its fan-outs within four fifths of it (ADMIN.md). */
#define API_TIMEOUT_MS 2500

/* Read-only commands only: nothing here changes the cluster. */
static const struct {
	const char *name, *cmd;
} api[] = {
	{ "state", "state" },
	{ "nodes", "nodes" },
	{ "caches", "cache.list" },
	{ "partitions", "partitions" },
	{ "rebalance", "rebalance" },
	{ "metrics", "metrics" },
	{ "txs", "tx.list" },
	{ "baseline", "baseline" },
};

const dgi_dash_asset *dgi_dash_asset_at(const char *path, size_t len)
{
	for (const dgi_dash_asset *a = dgi_dash_assets; a->path != NULL; a++)
		if (strlen(a->path) == len && memcmp(a->path, path, len) == 0)
			return a;
	return NULL;
}

int dgi_dash_api(dg_node *n, const char *path, size_t len, char **json, int *status)
{
	const char *cmd = NULL;
	if (len <= 5 || memcmp(path, "/api/", 5) != 0)
		return 0;
	for (size_t i = 0; i < sizeof(api) / sizeof(api[0]) && cmd == NULL; i++)
		if (strlen(api[i].name) == len - 5 && memcmp(api[i].name, path + 5, len - 5) == 0)
			cmd = api[i].cmd;
	if (cmd == NULL)
		return 0;
	cJSON *req = cJSON_CreateObject();
	if (req == NULL || cJSON_AddStringToObject(req, "cmd", cmd) == NULL ||
	    cJSON_AddNumberToObject(req, "timeout_ms", API_TIMEOUT_MS) == NULL) {
		cJSON_Delete(req);
		return -1;
	}
	bool stop_after = false; /* no command in the table stops the node */
	cJSON *rep = dgi_admin_dispatch(n, req, &stop_after);
	cJSON_Delete(req);
	if (rep == NULL)
		return -1;
	const char *code = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(rep, "code"));
	*status = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rep, "ok")) ? 200 :
	    code != NULL && strcmp(code, "DG_ERR_NOT_READY") == 0 ? 503 : 500;
	*json = cJSON_PrintUnformatted(rep);
	cJSON_Delete(rep);
	return *json != NULL ? 1 : -1;
}

void dgi_dash_free(char *json)
{
	cJSON_free(json);
}
