/* fuzz_node.h — the node the fuzz targets start: alone on loopback, in
 * memory, its log dropped (a run logs nothing a campaign could read, and
 * formatting lines would cost more than the run). */
#ifndef DG_FUZZ_NODE_H
#define DG_FUZZ_NODE_H

#include "node/datagrid.h"

#include <stdio.h>
#include <stdlib.h>

static inline void fz_quiet(void *ctx, dg_log_level level, const char *id,
    const char *line)
{
	(void)ctx, (void)level, (void)id, (void)line;
}

static inline void fz_node_config(dg_node_config *cfg)
{
	dg_node_config_init(cfg);
	cfg->cluster_name = "fuzz";
	cfg->listen_url = "tcp://127.0.0.1:0";
	cfg->log_fn = fz_quiet;
	cfg->log_level = DG_LOG_ERROR;
}

/* The upper layers install their message rows when a node starts (cache:
 * the grid, txn: dgi_txsvc_start, node: dg_node_start); one node started
 * and stopped leaves the process's table as every running node has it. */
static inline void fz_install_rows(void)
{
	dg_node_config cfg;
	dg_node *n;
	fz_node_config(&cfg);
	if (dg_node_start(&cfg, &n) != DG_OK) {
		fprintf(stderr, "fuzz: no node to install the message rows\n");
		abort();
	}
	dg_node_stop(n);
}

#endif
