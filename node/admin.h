/*
 * admin.h — the node's admin side (node module only):
 *   - the admin endpoint dgctl connects to (admin.c: listener, handshake,
 *     one thread per connection: at most DGI_ADMIN_CONNS
 *     authenticated sessions and DGI_ADMIN_HANDSHAKES handshakes at once);
 *   - the commands it serves (admin_cmds.c), answering with cJSON objects;
 *   - node-to-node admin messages (admin_peer.c): a command that needs
 *     every node's view (nodes, idle-verify, tx list, rebalance status,
 *     shutdown of the cluster) asks each node for its local part through
 *     ADMIN_REQ / ADMIN_REP, answered on a worker thread, never on the
 *     transport's.
 * Every node has the peer side (an embedded node answers too); only a node
 * with an admin_url serves dgctl.
 */
#ifndef DG_NODE_ADMIN_H
#define DG_NODE_ADMIN_H

#include "datagrid.h"

#include <cjson/cJSON.h>

#define DGI_ADMIN_CONNS 8       /* authenticated sessions at once */
#define DGI_ADMIN_HANDSHAKES 64 /* connections not yet authenticated: the
                                   oldest is closed to make room (room for
                                   a burst of newer sockets while a slow
                                   client answers: test_slow_handshake_
                                   survives_a_burst) */
#define DGI_ADMIN_AUTH_MS 3000  /* a handshake's deadline */

typedef struct dgi_admin dgi_admin;
typedef struct dgi_adminpeer dgi_adminpeer;

/* Listens on url (tcp:// or tls+tcp:// with the node's TLS files).
 * DG_ERR_ADDRINUSE, DG_ERR_TLS, DG_ERR_NET, DG_ERR_INVAL, DG_ERR_NOMEM. */
dg_err dgi_admin_start(dg_node *n, const char *url, dgi_admin **out);
/* The URL dgctl dials (port 0 replaced by the bound port). */
const char *dgi_admin_address(const dgi_admin *a);
/* Closes the listener and every connection; joins their threads. */
void dgi_admin_stop(dgi_admin *a);

/* Installs the ADMIN_REQ/ADMIN_REP rows; once per process, before any
 * transport starts. */
void dgi_adminpeer_define(void);
/* Registers the handler on the node's transport and starts the worker. */
dg_err dgi_adminpeer_start(dg_node *n, dgi_adminpeer **out);
void dgi_adminpeer_stop(dgi_adminpeer *p);

/* One node's answer to a fan-out. */
typedef struct dgi_fanres {
	uint64_t id;
	int64_t order;
	bool client;
	bool standby;            /* a server outside the baseline: owns no data */
	char address[128];
	dg_err err;              /* DG_OK: result holds the node's answer */
	char errmsg[160];        /* the node's error text, when it sent one */
	cJSON *result;           /* owned by the array (dgi_fanout_free) */
} dgi_fanres;

/* Runs the local command cmd (with args, may be NULL) on every node of the
 * current topology — this one in the calling thread, the others in
 * parallel — waiting at most timeout_ms for each.  *out: an array of
 * *count results in topology order (dgi_fanout_free); *topver the version
 * asked.  DG_ERR_NOT_READY before the node joined, DG_ERR_NOMEM. */
dg_err dgi_fanout(dg_node *n, const char *cmd, const cJSON *args, uint32_t timeout_ms,
    dgi_fanres **out, size_t *count, int64_t *topver);
void dgi_fanout_free(dgi_fanres *r, size_t count);

/* The local commands a fan-out runs ("local.info", ...): *result (cJSON,
 * caller frees) or an error with a message in why. */
dg_err dgi_admin_local(dg_node *n, const char *cmd, const cJSON *args, cJSON **result,
    char *why, size_t whylen, bool *stop_after);

/* A dgctl request ({"cmd": ..., "args": {...}}) answered: the reply object
 * ({"ok": true, "result": ...} or {"ok": false, "error": ..., "code": ...}).
 * NULL only when out of memory.  *stop_after (also for dgi_admin_local):
 * the command was a shutdown of this node — the caller sends the reply,
 * then calls dgi_admin_stop_node, so the reply is not lost to the stop. */
cJSON *dgi_admin_dispatch(dg_node *n, const cJSON *req, bool *stop_after);
/* How many partition rows of idle-verify's answers (local.digests) are
 * kept: a row with a partition number out of range is dropped (a seam for
 * tests: the rows come from peers). */
size_t dgi_idle_rows_kept(dgi_fanres *r, size_t nr);
/* Calls the node's on_shutdown (logged). */
void dgi_admin_stop_node(dg_node *n);

/* "DG_ERR_NOT_FOUND" out of dg_strerror's "DG_ERR_NOT_FOUND: no such ...":
 * the "code" of an error answer. */
void dgi_admin_err_code(dg_err e, char *out, size_t n);
/* v as 16 hex digits (ids, digests: JSON numbers stop at 2^53). */
void dgi_admin_hex64(uint64_t v, char out[17]);
/* One partition's character in local.partitions' map (ADMIN.md) from
 * dgi_cache_part_map's role << 4 | state. */
char dgi_admin_part_char(uint8_t role_state);
/* The node's caches' configs, dgi_alloc'ed into *out (NULL when out of
 * memory); returns how many. */
size_t dgi_admin_caches(dg_node *n, dg_cache_config **out);

/* Test hooks (debug.* commands) are served only when the environment had
 * DG_ADMIN_TEST_HOOKS=1 when the node started. */

#endif
