/*
 * node.c — the embedded node: a transport, its membership and the grid of
 * caches, started and stopped together (datagrid.h).
 *
 * Start order: registry, transport (listening), grid (handlers, persisted
 * caches), membership (join), grid attached to membership.  Stop is the
 * reverse, with the graceful part first: the node leaves the cluster (its
 * partitions are taken over by the nodes that own them next), then the
 * grid stops, then the transport.  The HTTP /metrics endpoint starts last,
 * once the node is fully up, and stops first, so its handlers never see a
 * node being built or torn down.
 */
#include "datagrid.h"
#include "cache/cache.h"
#include "admin.h"
#include "metrics_http.h"
#include "cache/pcrypt.h"
#include "node_int.h"
#include "settings.h"
#include "transport/transport_int.h"
#include "txn/txsvc.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dg_node {
	dg_node_config cfg;
	char *strs;                 /* copies of the config's strings */
	const char **seeds;
	dg_registry *reg;
	bool own_reg;
	dg_tp *tp;
	dg_member *m;
	dgi_grid *g;
	dgi_txsvc *txs;             /* the lock service (primaries' side of transactions) */
	uint64_t started_ms;        /* dgi_now_ms() at dg_node_start */
	dgi_adminpeer *ap;          /* node-to-node admin messages */
	dgi_admin *admin;           /* the dgctl endpoint, or NULL */
	dgi_http *http;             /* GET /metrics; NULL: none */
	uint8_t master[32];         /* encryption_key_file's key (grid's copy
	                               is pstore's) */
};

void dg_node_config_init(dg_node_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->cluster_name = "datagrid";
	cfg->listen_url = "tcp://127.0.0.1:47500";
	cfg->failure_timeout_ms = 10000;
	cfg->join_timeout_ms = 10000;
	cfg->request_timeout_ms = 10000;
	cfg->tx_topology_timeout_ms = 1000;
	cfg->tx_done_capacity = 65536;
	cfg->storage_map_size = (size_t)1 << 30;
	cfg->recv_max = 16u << 20;
	cfg->rebalance_batch_bytes = 512u << 10;
	cfg->http_idle_timeout_ms = 10000;
	cfg->http_max_connections = 64;
	cfg->wait_spin_us = DG_WAIT_SPIN_US_DEFAULT;
	cfg->reactor_spin_us = DG_REACTOR_SPIN_US_DEFAULT;
}

/* Copies every string of the config into one block owned by the node. */
static dg_err copy_strings(dg_node *n, const dg_node_config *cfg)
{
	const char *one[] = { cfg->cluster_name, cfg->listen_url, cfg->advertise_url,
		cfg->tls_cert_key_file, cfg->tls_ca_file, cfg->data_dir,
		cfg->admin_url, cfg->http_url, cfg->http_auth_basic, cfg->http_auth_token,
		cfg->encryption_key_file };
	size_t total = 0;
	for (size_t i = 0; i < sizeof(one) / sizeof(one[0]); i++)
		total += one[i] ? strlen(one[i]) + 1 : 0;
	for (size_t i = 0; i < cfg->nseeds; i++) {
		if (cfg->seeds[i] == NULL)
			return DG_ERR_INVAL;
		total += strlen(cfg->seeds[i]) + 1;
	}
	total += cfg->secret_len;
	n->strs = dgi_alloc(total ? total : 1);
	n->seeds = dgi_calloc(cfg->nseeds ? cfg->nseeds : 1, sizeof(char *));
	if (n->strs == NULL || n->seeds == NULL)
		return DG_ERR_NOMEM;
	char *p = n->strs;
	const char **dst[] = { &n->cfg.cluster_name, &n->cfg.listen_url, &n->cfg.advertise_url,
		&n->cfg.tls_cert_key_file, &n->cfg.tls_ca_file, &n->cfg.data_dir,
		&n->cfg.admin_url, &n->cfg.http_url, &n->cfg.http_auth_basic,
		&n->cfg.http_auth_token, &n->cfg.encryption_key_file };
	for (size_t i = 0; i < sizeof(one) / sizeof(one[0]); i++) {
		if (one[i] == NULL)
			continue;
		size_t l = strlen(one[i]) + 1;
		memcpy(p, one[i], l);
		*dst[i] = p;
		p += l;
	}
	for (size_t i = 0; i < cfg->nseeds; i++) {
		size_t l = strlen(cfg->seeds[i]) + 1;
		memcpy(p, cfg->seeds[i], l);
		n->seeds[i] = p;
		p += l;
	}
	n->cfg.seeds = n->seeds;
	if (cfg->secret_len) {
		memcpy(p, cfg->secret, cfg->secret_len);
		n->cfg.secret = (const uint8_t *)p;
	}
	return DG_OK;
}

/* True when url listens on loopback only (127.0.0.0/8, ::1, localhost) or
 * is not a network address at all (ipc://, inproc://). */
static bool loopback_only(const char *url)
{
	const char *h = strstr(url, "://");
	if (h == NULL)
		return false;
	if (strncmp(url, "ipc://", 6) == 0 || strncmp(url, "inproc://", 9) == 0)
		return true;
	h += 3;
	return strncmp(h, "127.", 4) == 0 || strncmp(h, "[::1]:", 6) == 0 ||
	    strncmp(h, "localhost:", 10) == 0;
}

/* Without a secret, nothing listens where others can reach it unless the
 * embedder said insecure (issue 14, finding 7); a node with TLS files
 * serves metrics over https:// unless insecure (finding 8).  The
 * offending URL goes into why[n]. */
static const char *check_exposure(const dg_node_config *c, char *why, size_t n)
{
	if (c->insecure)
		return NULL;
	const char *urls[] = { c->listen_url, c->admin_url, c->http_url };
	const char *what[] = { "listen_url", "admin_url", "http_url" };
	for (size_t i = 0; c->secret_len == 0 && i < 3; i++) {
		if (urls[i] == NULL || loopback_only(urls[i]))
			continue;
		snprintf(why, n, "%s %s is not a loopback address and there is no cluster "
		    "secret: anyone who reaches it could join as a server or run any admin "
		    "command; set a secret (dgnode: --secret-file), listen on 127.0.0.1, or "
		    "set insecure", what[i], urls[i]);
		return why;
	}
	if (c->http_url != NULL && c->tls_cert_key_file != NULL &&
	    strncmp(c->http_url, "http://", 7) == 0) {
		snprintf(why, n, "http_url %s is plain HTTP on a node with TLS files: use "
		    "https://, or set insecure", c->http_url);
		return why;
	}
	return NULL;
}

static dg_err check(const dg_node_config *c)
{
	const char *why = NULL;
	char buf[512];
	if (c->listen_url == NULL || c->listen_url[0] == 0)
		why = "listen_url is required";
	else if (c->nseeds > 0 && c->seeds == NULL)
		why = "seeds is NULL with nseeds > 0";
	else if (c->secret_len > 0 && c->secret == NULL)
		why = "secret is NULL with secret_len > 0";
	else if (c->failure_timeout_ms < 100)
		why = "failure_timeout_ms must be at least 100";
	else if (c->request_timeout_ms == 0)
		why = "request_timeout_ms must be positive";
	else if (c->rebalance_batch_bytes > (c->recv_max ? c->recv_max : 16u << 20) / 2)
		/* (a page of entries is a batch, and may pass it by one entry:
		 * settings.c says the same of dgnode's flags) */
		why = "rebalance_batch_bytes must be at most half of recv_max";
	else
		why = check_exposure(c, buf, sizeof(buf));
	if (why != NULL) {
		dgi_log("error", "NODE-CONFIG", "why=\"%s\"", why);
		return DG_ERR_INVAL;
	}
	return DG_OK;
}

static void node_stop(dg_node *n, bool graceful)
{
	if (n == NULL)
		return;
	dgi_http_stop(n->http);
	n->http = NULL;
	dgi_admin_stop(n->admin);   /* no dgctl request runs past here */
	n->admin = NULL;
	if (graceful && n->g != NULL && n->m != NULL)
		dgi_grid_leave(n->g);
	if (n->m != NULL && graceful)
		dg_member_stop(n->m);
	else if (n->m != NULL)
		dgi_member_kill(n->m);
	dgi_adminpeer_stop(n->ap);
	dgi_txsvc_stop(n->txs);
	if (n->g != NULL)
		dgi_grid_stop(n->g);
	if (n->tp != NULL)
		dg_tp_stop(n->tp);
	if (n->own_reg)
		dg_registry_destroy(n->reg);
	dgi_free(n->strs);
	dgi_free(n->seeds);
	memset(n->master, 0, sizeof(n->master));
	dgi_free(n);
}

void dg_node_stop(dg_node *n)
{
	node_stop(n, true);
}

/* For tests (declared by them): stops like a crash — no handoff, no LEAVE;
 * the others find out by failure detection. */
void dgi_node_kill(dg_node *n);
void dgi_node_kill(dg_node *n)
{
	node_stop(n, false);
}

/* The /metrics endpoint, when the config asks for one.  Its failure fails
 * the start: an operator who asked for metrics wants to know at once. */
static dg_err start_http(dg_node *n)
{
	if (n->cfg.http_url == NULL)
		return DG_OK;
	dg_err e = dgi_http_start(n, n->cfg.http_url, &n->http);
	if (e != DG_OK)
		dgi_log("error", "HTTP-LISTEN", "url=\"%s\" err=\"%s\"", n->cfg.http_url,
		    dg_strerror(e));
	return e;
}

/* The NODE-OPEN line: what listens where, and who may use it. */
static void log_open(const dg_node *n)
{
	const dg_node_config *c = &n->cfg;
	bool sec = c->secret_len > 0, tls = c->tls_cert_key_file != NULL;
	const char *admin = dgi_admin_address(n->admin), *http = dgi_http_address(n->http);
	const char *hauth = c->http_auth_basic && c->http_auth_token ? "basic+bearer" :
	    c->http_auth_basic ? "basic" : c->http_auth_token ? "bearer" : "none";
	dgi_log(c->insecure && !sec ? "warn" : "info", "NODE-OPEN", "peers=%s peers_auth=%s "
	    "peers_tls=%s admin=%s admin_auth=%s admin_tls=%s http=%s http_auth=%s http_tls=%s%s",
	    dg_tp_address(n->tp),
	    sec ? "secret" : "none", tls && strncmp(c->listen_url, "tls+", 4) == 0 ? "on" : "off",
	    admin ? admin : "none", admin ? (sec ? "secret" : "none") : "-",
	    admin && strncmp(admin, "tls+", 4) == 0 ? "on" : admin ? "off" : "-",
	    http ? http : "none", http ? hauth : "-",
	    http && strncmp(http, "https", 5) == 0 ? "on" : http ? "off" : "-",
	    c->insecure ? " insecure=true" : "");
}

dg_err dg_node_start(const dg_node_config *cfg, dg_node **out)
{
	if (cfg == NULL || out == NULL)
		return DG_ERR_INVAL;
	if (cfg->log_fn != NULL || cfg->log_level != 0)
		dg_log_configure(cfg->log_fn, cfg->log_ctx, (dg_log_level)cfg->log_level);
	dg_err e = check(cfg);
	if (e != DG_OK)
		return e;
	dg_node *n = dgi_calloc(1, sizeof(*n));
	if (n == NULL)
		return DG_ERR_NOMEM;
	n->cfg = *cfg;
	n->started_ms = dgi_now_ms();
	if ((e = copy_strings(n, cfg)) != DG_OK)
		goto fail;
	if (cfg->registry != NULL) {
		n->reg = cfg->registry;
	} else {
		if ((e = dg_registry_create(&n->reg)) != DG_OK)
			goto fail;
		n->own_reg = true;
	}

	dg_tp_config tc;
	dg_tp_config_init(&tc);
	tc.listen_url = n->cfg.listen_url;
	tc.advertise_url = n->cfg.advertise_url;
	tc.cluster_name = n->cfg.cluster_name;
	tc.secret = n->cfg.secret;
	tc.secret_len = n->cfg.secret_len;
	tc.tls_cert_key_file = n->cfg.tls_cert_key_file;
	tc.tls_ca_file = n->cfg.tls_ca_file;
	if (n->cfg.recv_max)
		tc.recv_max = n->cfg.recv_max;
	tc.wait_spin_us = n->cfg.wait_spin_us;
	tc.reactor_spin_us = n->cfg.reactor_spin_us;
	tc.reg = n->reg;
	static pthread_once_t admin_rows = PTHREAD_ONCE_INIT;
	pthread_once(&admin_rows, dgi_adminpeer_define);
	if ((e = dg_tp_start(&tc, &n->tp)) != DG_OK)
		goto fail;
	if ((e = dgi_adminpeer_start(n, &n->ap)) != DG_OK)
		goto fail;

	dgi_grid_config gc = {
		n->cfg.request_timeout_ms, n->cfg.rebalance_batch_bytes, n->cfg.data_dir,
		n->cfg.storage_map_size, n->cfg.storage_nosync, n->cfg.client,
		n->cfg.partition_policy != DG_PARTITION_POLICY_NONE,
		n->cfg.on_event, n->cfg.event_ctx, n->cfg.storage_recover, NULL,
		n->cfg.rebalance_throttle_ms
	};
	if (n->cfg.encryption_key_file != NULL) {
		char why[512];
		if (dgi_key_file_read(n->cfg.encryption_key_file, n->master, why, sizeof(why)) != 0) {
			dgi_log("error", "ENCRYPTION-KEY", "why=\"%s\"", why);
			e = DG_ERR_INVAL;
			goto fail;
		}
		gc.master_key = n->master;
	}
	if ((e = dgi_grid_start(n->tp, n->reg, &gc, &n->g)) != DG_OK)
		goto fail;
	if ((e = dgi_txsvc_start(n->tp, n->g, n->cfg.tx_done_capacity, &n->txs)) != DG_OK)
		goto fail;
	dgi_grid_set_tx_hook(n->g, dgi_tx_plain_op, n->txs);

	dg_member_config mc;
	dg_member_config_init(&mc);
	mc.seeds = n->cfg.seeds;
	mc.nseeds = n->cfg.nseeds;
	mc.failure_timeout_ms = n->cfg.failure_timeout_ms;
	mc.heartbeat_ms = n->cfg.heartbeat_ms;
	mc.join_timeout_ms = n->cfg.join_timeout_ms;
	mc.reg = n->reg;
	mc.attrs = n->cfg.client ? DG_NODE_CLIENT : 0;
	mc.partition_policy = n->cfg.partition_policy == DG_PARTITION_POLICY_NONE ?
	    DG_PARTITION_NONE : DG_PARTITION_MAJORITY;
	mc.version_floor = dgi_grid_version_floor(n->g);
	const char *const *pbl;
	mc.nbaseline = dgi_grid_persisted_baseline(n->g, &pbl);
	mc.baseline = pbl;
	char accpath[4096];
	if (n->cfg.data_dir != NULL && !n->cfg.client) {
		/* what this voter promised survives a restart (PROTOCOL.md, "A
		 * voter that restarted") */
		int l = snprintf(accpath, sizeof(accpath), "%s/acceptor", n->cfg.data_dir);
		if (l < 0 || (size_t)l >= sizeof(accpath)) {
			e = DG_ERR_INVAL;
			goto fail;
		}
		mc.acceptor_path = accpath;
	}
	if ((e = dg_member_start(n->tp, &mc, &n->m)) != DG_OK)
		goto fail;
	if ((e = dgi_grid_joined(n->g, n->m)) != DG_OK)
		goto fail;
	if ((e = dgi_txsvc_joined(n->txs, n->m, n->cfg.tx_topology_timeout_ms)) != DG_OK)
		goto fail;
	if (n->cfg.admin_url != NULL &&
	    (e = dgi_admin_start(n, n->cfg.admin_url, &n->admin)) != DG_OK)
		goto fail;
	if ((e = start_http(n)) != DG_OK)
		goto fail;
	log_open(n);
	*out = n;
	return DG_OK;
fail:
	dgi_log("error", "NODE-START", "err=\"%s\"", dg_strerror(e));
	if (n->m != NULL) {
		dg_member_stop(n->m);
		n->m = NULL;
	}
	dg_node_stop(n);
	return e;
}

struct dg_tp *dgi_node_tp(dg_node *n) { return n->tp; }
struct dg_member *dgi_node_member(dg_node *n) { return n->m; }
dgi_grid *dgi_node_grid(dg_node *n) { return n->g; }
dgi_txsvc *dgi_node_txs(dg_node *n) { return n->txs; }
const dg_node_config *dgi_node_config(const dg_node *n) { return &n->cfg; }
uint64_t dgi_node_started_ms(const dg_node *n) { return n->started_ms; }

dg_registry *dg_node_registry(dg_node *n)
{
	return n ? n->reg : NULL;
}

uint64_t dg_node_get_id(const dg_node *n)
{
	return n ? dg_tp_self(n->tp) : 0;
}

const char *dg_node_admin_address(const dg_node *n)
{
	return n ? dgi_admin_address(n->admin) : NULL;
}

const char *dg_node_address(const dg_node *n)
{
	return n ? dg_tp_address(n->tp) : NULL;
}

const char *dg_node_http_address(const dg_node *n)
{
	return n ? dgi_http_address(n->http) : NULL;
}

size_t dg_node_topology(dg_node *n, int64_t *version, dg_node_info *out, size_t cap)
{
	if (n == NULL || n->m == NULL)
		return 0;
	dg_topology *t = dg_member_topology(n->m);
	if (t == NULL)
		return 0;
	if (version != NULL)
		*version = t->version;
	for (uint32_t i = 0; i < t->count && i < cap; i++) {
		out[i].id = t->nodes[i].id;
		out[i].order = t->nodes[i].order;
		out[i].client = (t->nodes[i].attrs & DG_NODE_CLIENT) != 0;
		out[i].standby = (t->nodes[i].attrs & DG_NODE_STANDBY) != 0;
		snprintf(out[i].address, sizeof(out[i].address), "%s", t->nodes[i].url);
	}
	size_t count = t->count;
	dg_topology_release(t);
	return count;
}

/* ---- baseline ---- */

_Static_assert(DG_BASELINE_OP_SET == DG_BASELINE_SET && DG_BASELINE_OP_ADD == DG_BASELINE_ADD &&
    DG_BASELINE_OP_REMOVE == DG_BASELINE_REMOVE, "the public ops are membership's");

/* The server of t advertising addr, or NULL. */
static const dg_topology_node *server_at(const dg_topology *t, const char *addr)
{
	for (uint32_t i = 0; i < t->count; i++)
		if (!(t->nodes[i].attrs & DG_NODE_CLIENT) && strcmp(t->nodes[i].url, addr) == 0)
			return &t->nodes[i];
	return NULL;
}

size_t dg_node_baseline_get(dg_node *n, bool *is_set, int64_t *version,
    dg_baseline_node *out, size_t cap)
{
	dg_topology *t = n != NULL && n->m != NULL ? dg_member_topology(n->m) : NULL;
	if (is_set != NULL)
		*is_set = t != NULL && t->baseline_set;
	if (version != NULL)
		*version = t != NULL ? t->version : 0;
	if (t == NULL)
		return 0;
	for (uint32_t i = 0; i < t->nbaseline && i < cap; i++) {
		const dg_topology_node *s = server_at(t, t->baseline[i]);
		snprintf(out[i].address, sizeof(out[i].address), "%s", t->baseline[i]);
		out[i].online = s != NULL;
		out[i].id = s != NULL ? s->id : 0;
	}
	size_t count = t->nbaseline;
	dg_topology_release(t);
	return count;
}

dg_err dg_node_baseline_change(dg_node *n, dg_baseline_op op, const char *const *addrs,
    size_t naddrs, uint32_t timeout_ms, char *why, size_t whylen)
{
	const char *w = NULL;
	if (why != NULL && whylen > 0)
		why[0] = 0;
	if (n == NULL || n->m == NULL)
		return DG_ERR_INVAL;
	dg_err e = dgi_member_set_baseline(n->m, (int)op, addrs, naddrs,
	    timeout_ms ? timeout_ms : n->cfg.request_timeout_ms, &w);
	if (e != DG_OK && w != NULL && why != NULL && whylen > 0)
		snprintf(why, whylen, "%s", w);
	return e;
}

dg_err dg_cache_create(dg_node *n, const dg_cache_config *cfg, dg_cache **out)
{
	return n ? dgi_grid_cache_create(n->g, cfg, out) : DG_ERR_INVAL;
}

dg_err dg_cache_get_by_name(dg_node *n, const char *name, dg_cache **out)
{
	return n ? dgi_grid_cache_find(n->g, name, out) : DG_ERR_INVAL;
}

dg_err dg_cache_destroy(dg_node *n, const char *name)
{
	return n ? dgi_grid_cache_destroy(n->g, name) : DG_ERR_INVAL;
}

size_t dg_cache_list(dg_node *n, dg_cache_config *out, size_t cap)
{
	return n ? dgi_grid_cache_list(n->g, out, cap) : 0;
}

dg_err dg_node_start_file(const char *path, dg_node **out)
{
	if (path == NULL || out == NULL)
		return DG_ERR_INVAL;
	dgnode_settings s;
	dg_node_config cfg;
	dgnode_settings_init(&s);
	dg_err e = DG_ERR_INVAL; /* the settings code printed which setting and why */
	if (dgnode_settings_load_file(&s, path, stderr) != DGNODE_OK ||
	    dgnode_settings_to_config(&s, &cfg, stderr) != DGNODE_OK)
		goto out;
	if ((e = dg_node_start(&cfg, out)) != DG_OK)
		goto out;
	for (size_t i = 0; i < s.caches.l_n; i++) {
		dg_cache_config cc;
		dg_cache *c;
		if (dgnode_parse_cache_spec(s.caches.l_items[i], &cc, stderr) != DGNODE_OK) {
			e = DG_ERR_INVAL;
		} else if ((e = dg_cache_create(*out, &cc, &c)) != DG_OK) {
			dgi_log("error", "CACHE-CREATE", "cache=\"%s\" err=\"%s\"", cc.name,
			    dg_strerror(e));
		}
		if (e != DG_OK) {
			dg_node_stop(*out);
			*out = NULL;
			break;
		}
	}
out:
	dgnode_settings_free(&s);
	return e;
}

/* ---- transactions (txn/txn.h) ---- */


dg_err dg_tx_begin(dg_node *n, dg_tx_concurrency concurrency, dg_tx_isolation isolation,
    uint32_t timeout_ms, const char *label, dg_tx **out)
{
	if (n == NULL)
		return DG_ERR_INVAL;
	return dgi_tx_begin(n->txs, concurrency, isolation, timeout_ms, label, out);
}

dg_err dg_tx_get_metrics(dg_node *n, dg_tx_metrics *out)
{
	if (n == NULL || out == NULL)
		return DG_ERR_INVAL;
	memset(out, 0, sizeof(*out));
	dgi_tx_near_stats(n->txs, out);
	dgi_txsvc_stats st;
	dgi_txsvc_get_stats(n->txs, &st);
	out->participant_prepared = st.prepared + st.backup_prepared;
	out->participant_committed = st.committed + st.backup_committed;
	out->locks_held = st.locks_held;
	out->recovered_commit = st.recovered_commit;
	out->recovered_rollback = st.recovered_rollback;
	out->lock_waiters = st.lock_waiters;
	return DG_OK;
}
