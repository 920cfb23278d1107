/*
 * admin_baseline.h — the admin endpoint's "baseline" command (node module
 * only; wired into the command table of admin_cmds.c and into dgctl).
 */
#ifndef DG_NODE_ADMIN_BASELINE_H
#define DG_NODE_ADMIN_BASELINE_H

#include "datagrid.h"

#include <cjson/cJSON.h>

/* Shows or changes the baseline topology (datagrid.h, "Baseline
 * topology").  args: {"op": "show" (the default) | "set" | "add" |
 * "remove", "nodes": ["tcp://HOST:PORT", ...]} — nodes required (non-empty)
 * except for show.  Fills result (an object the caller owns) with
 *   {"auto": bool, "baseline": [{"address": S, "online": bool, "id": HEX16
 *    or ""}], "standby": [{"address": S, "id": HEX16}], "topology_version": N}
 * as it is after the change.  Runs on an admin thread (blocks up to the
 * node's request_timeout_ms).  Errors: DG_ERR_INVAL with the reason in why
 * (bad arguments, a set leaving no online server owning data),
 * DG_ERR_TIMEOUT, DG_ERR_STATE, DG_ERR_NOMEM (also when result cannot be
 * filled), transport errors reaching the coordinator. */
dg_err dgi_admin_cmd_baseline(dg_node *n, const cJSON *args, cJSON *result, char *why,
    size_t whylen);

#endif
