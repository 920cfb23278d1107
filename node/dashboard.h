/*
 * dashboard.h — what the node's HTTP endpoint (http.c) serves besides
 * /metrics: the dashboard page and its read-only JSON.
 *
 *  - GET / , /dashboard.css , /dashboard.js: the page (node/dashboard/,
 *    written by hand, embedded at build time by embed.cmake; it makes no
 *    request but to this node).
 *  - GET /api/NAME: the answer of the admin command the table in
 *    dashboard.c maps NAME to — the very object `dgctl --json` prints
 *    ({"ok": true, "result": ...} or {"ok": false, "error", "code"}), so
 *    the page and dgctl have one source.  Only commands that change
 *    nothing are in the table.
 * ADMIN.md, "HTTP", lists the names.
 */
#ifndef DG_NODE_DASHBOARD_H
#define DG_NODE_DASHBOARD_H

#include "datagrid.h"

#include <stddef.h>

typedef struct dgi_dash_asset {
	const char *path;            /* "/", "/dashboard.js", ... */
	const char *type;            /* Content-Type */
	const unsigned char *data;
	size_t len;
} dgi_dash_asset;

/* The embedded files, ended by a row with path NULL (generated). */
extern const dgi_dash_asset dgi_dash_assets[];

/* The asset served at path[0..len), or NULL. */
const dgi_dash_asset *dgi_dash_asset_at(const char *path, size_t len);

/* path[0..len) starts with "/api/": 1 when it names an API answer, which
 * *json then holds (cJSON_PrintUnformatted's text: the caller frees it
 * with dgi_dash_free) and *status its HTTP status (200 ok; 503 the node
 * is not in a cluster yet; 500 another error; the body says which).
 * 0: no such name (404).  -1: out of memory. */
int dgi_dash_api(dg_node *n, const char *path, size_t len, char **json, int *status);
void dgi_dash_free(char *json);

#endif
