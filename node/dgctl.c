/*
 * dgctl.c — the datagrid admin CLI (man page: node/man/dgctl.1; protocol:
 * node/ADMIN.md).
 *
 * Connects to one node's admin endpoint, proves the cluster secret (and
 * checks the node's proof), sends one request per command (rebalance
 * status --watch: one per refresh) and prints the result as an aligned
 * table, or as JSON with --json.
 *
 * Exit status: 0 ok; 1 the operation failed (message on stderr: node
 * unreachable, authentication, the node's error, idle-verify divergence);
 * 2 usage error.
 */
#include "adminwire.h"
#include "datagrid.h"
#include "transport/transport_int.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EXIT_FAIL 1
#define EXIT_USAGE 2

/* ---- options ---- */

static struct {
	const char *host, *port, *url, *tls_ca, *tls_cert_key, *secret_file, *cluster;
	uint32_t timeout_ms;
	bool json, watch, all, persistence, cluster_wide, yes, map;
	const char *mode, *backups, *sync, *atomicity, *ttl, *limit, *interval, *min_age;
	const char *value_file;
} opt = { .host = "127.0.0.1", .port = "47600", .cluster = "datagrid", .timeout_ms = 5000 };

static const char usage_text[] =
"usage: dgctl [OPTIONS] COMMAND [ARGS]\n"
"\n"
"Inspects and operates a datagrid cluster through one node's admin endpoint\n"
"(dgnode --admin-listen; by default the node's cluster port + 100).\n"
"\n"
"Commands:\n"
"  state                          cluster state, topology, nodes, caches\n"
"  nodes                          the nodes: order, id, address, role, uptime\n"
"  baseline [show]                the baseline (server nodes that own data)\n"
"  baseline set|add|remove ADDR...\n"
"  cache list                     the caches and their settings and sizes\n"
"  cache create NAME [--mode M] [--backups N] [--sync S] [--atomicity A]\n"
"                    [--persistence] [--ttl DURATION]\n"
"  cache destroy NAME\n"
"  cache reset-lost NAME          own what is left of LOST partitions\n"
"  cache put NAME KEY VALUE | --value-file PATH|-\n"
"  cache get NAME KEY\n"
"  cache remove NAME KEY\n"
"  cache scan NAME [--limit N]\n"
"  idle-verify [CACHE...]         compare every partition's copies\n"
"  tx list [--min-age DURATION]   running transactions on every node\n"
"  tx kill ID                     roll a transaction back\n"
"  metrics [--all]                the node's message, cache and tx metrics\n"
"  rebalance status [--watch] [--interval DURATION]\n"
"  partitions [CACHE] [--map]     every server's partitions: primary, backup,\n"
"                                 moving, lost (--map: one character each)\n"
"  shutdown [--cluster]           stop the node (or every node) gracefully\n"
"  encryption rotate              re-wrap every node's data keys (new key file)\n"
"  debug put-local CACHE KEY VALUE  test hook (nodes with DG_ADMIN_TEST_HOOKS=1)\n"
"\n"
"Options:\n"
"  --host HOST           node host (default 127.0.0.1)\n"
"  --port PORT           admin port (default 47600)\n"
"  --url URL             tcp://HOST:PORT or tls+tcp://HOST:PORT (overrides both)\n"
"  --tls-ca FILE         CA certificate that signs the nodes' certificates\n"
"  --tls-cert-key FILE   this client's certificate and key (PEM)\n"
"  --secret-file FILE    the cluster secret; else $DG_CLUSTER_SECRET\n"
"  --cluster-name NAME   default datagrid\n"
"  --timeout DURATION    connect and request bound (default 5s)\n"
"  --json                print JSON\n"
"  --help, -h            this text (dgctl COMMAND --help: the command's)\n"
"  --version             print the version\n"
"\n"
"Exit status: 0 ok, 1 the operation failed, 2 usage error.\n";

static void usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void usage_error(const char *fmt, ...)
{
	va_list ap;
	fputs("dgctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\n(dgctl --help lists the commands and options)\n", stderr);
	exit(EXIT_USAGE);
}

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail(const char *fmt, ...)
{
	va_list ap;
	fputs("dgctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(EXIT_FAIL);
}

/* "250", "250ms", "5s", "2m", "1h" -> ms; false when malformed. */
static bool parse_duration(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (end == s || errno != 0 || s[0] == '-')
		return false;
	uint64_t mul = 1;
	if (strcmp(end, "") == 0 || strcmp(end, "ms") == 0)
		mul = 1;
	else if (strcmp(end, "s") == 0)
		mul = 1000;
	else if (strcmp(end, "m") == 0)
		mul = 60000;
	else if (strcmp(end, "h") == 0)
		mul = 3600000;
	else
		return false;
	if (v > UINT64_MAX / mul)
		return false;
	*out = v * mul;
	return true;
}

static uint64_t duration_arg(const char *name, const char *v)
{
	uint64_t ms;
	if (!parse_duration(v, &ms))
		usage_error("--%s=%s: expected a duration (ms, or with an ms, s, m or h suffix)",
		    name, v);
	return ms;
}

/* ---- the connection ---- */

static dgi_aconn conn;
static nng_stream_dialer *dialer;
static nng_tls_config *tls;
static char url[300];

static uint8_t *load_secret(size_t *len)
{
	*len = 0;
	if (opt.secret_file != NULL) {
		FILE *f = fopen(opt.secret_file, "rb");
		if (f == NULL)
			fail("--secret-file=%s: %s", opt.secret_file, strerror(errno));
		uint8_t *buf = malloc(4096);
		size_t n = buf ? fread(buf, 1, 4096, f) : 0;
		bool more = buf && fgetc(f) != EOF;
		fclose(f);
		if (buf == NULL)
			fail("out of memory");
		if (more)
			fail("--secret-file=%s: larger than 4096 bytes", opt.secret_file);
		if (n > 0 && buf[n - 1] == '\n')
			n--;
		if (n == 0)
			fail("--secret-file=%s: empty secret", opt.secret_file);
		*len = n;
		return buf;
	}
	const char *env = getenv("DG_CLUSTER_SECRET");
	if (env == NULL || env[0] == 0)
		return NULL;
	*len = strlen(env);
	uint8_t *buf = malloc(*len);
	if (buf == NULL)
		fail("out of memory");
	memcpy(buf, env, *len);
	return buf;
}

static cJSON *recv_json(const char *what)
{
	char *raw;
	size_t len;
	dg_err e = dgi_aconn_recv(&conn, &raw, &len);
	if (e == DG_ERR_TIMEOUT)
		fail("%s: no answer from %s within %" PRIu32 " ms", what, url, opt.timeout_ms);
	if (e != DG_OK)
		fail("%s: %s: %s", what, url, e == DG_ERR_CONN_BROKEN || e == DG_ERR_CLOSED ?
		    "the node closed the connection" : dg_strerror(e));
	cJSON *o = cJSON_ParseWithLength(raw, len);
	dgi_free(raw);
	if (o == NULL)
		fail("%s: %s answered something that is not JSON", what, url);
	return o;
}

static void send_json(const cJSON *o, const char *what)
{
	char *s = cJSON_PrintUnformatted(o);
	if (s == NULL)
		fail("out of memory");
	dg_err e = dgi_aconn_send(&conn, s, strlen(s));
	cJSON_free(s);
	if (e != DG_OK)
		fail("%s: %s: %s", what, url, dg_strerror(e));
}

static const char *jstr(const cJSON *o, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static double jnum(const cJSON *o, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
	return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static void setup_tls(void)
{
	if (opt.tls_ca == NULL || opt.tls_cert_key == NULL)
		usage_error("%s: tls+tcp:// needs --tls-ca and --tls-cert-key", url);
	int rv;
	if ((rv = nng_tls_config_alloc(&tls, NNG_TLS_MODE_CLIENT)) != 0 ||
	    (rv = nng_tls_config_ca_file(tls, opt.tls_ca)) != 0 ||
	    (rv = nng_tls_config_cert_key_file(tls, opt.tls_cert_key, NULL)) != 0 ||
	    (rv = nng_tls_config_auth_mode(tls, NNG_TLS_AUTH_MODE_REQUIRED)) != 0 ||
	    (rv = nng_tls_config_server_name(tls, "datagrid")) != 0 ||
	    (rv = nng_stream_dialer_set_ptr(dialer, NNG_OPT_TLS_CONFIG, tls)) != 0)
		fail("TLS files (--tls-ca %s, --tls-cert-key %s): %s", opt.tls_ca,
		    opt.tls_cert_key, nng_strerror(rv));
}

static void dial(void)
{
	if (opt.url != NULL)
		snprintf(url, sizeof(url), "%s", opt.url);
	else
		snprintf(url, sizeof(url), "tcp://%s:%s", opt.host, opt.port);
	int rv = nng_stream_dialer_alloc(&dialer, url);
	if (rv != 0)
		usage_error("%s: not a tcp:// or tls+tcp:// URL (%s)", url, nng_strerror(rv));
	if (strncmp(url, "tls+tcp://", 10) == 0)
		setup_tls();
	rv = dgi_aconn_dial(&conn, dialer, opt.timeout_ms);
	if (rv == NNG_ETIMEDOUT)
		fail("cannot connect to %s: no answer within %" PRIu32 " ms (is the node up, "
		    "and is that its admin port?)", url, opt.timeout_ms);
	if (rv == NNG_ENOMEM)
		fail("out of memory");
	if (rv != 0)
		fail("cannot connect to %s: %s", url, nng_strerror(rv));
}

/* HELLO, AUTH, WELCOME (ADMIN.md).  The messages stay reachable from
 * here while fail() exits on the way (no leak reports). */
static cJSON *hello, *welcome;

static void authenticate(void)
{
	hello = recv_json("handshake");
	const char *proto = jstr(hello, "proto"), *cluster = jstr(hello, "cluster");
	const char *node = jstr(hello, "node"), *nonce = jstr(hello, "nonce");
	uint8_t nn[DG_NONCE_LEN], cn[DG_NONCE_LEN];
	uint64_t id;
	if (proto == NULL || strcmp(proto, DGI_ADMIN_PROTO) != 0 || cluster == NULL ||
	    node == NULL || nonce == NULL || !dgi_unhex(nonce, nn, sizeof(nn)) ||
	    sscanf(node, "%" SCNx64, &id) != 1) {
		const char *err = jstr(hello, "error");
		if (err != NULL)
			fail("%s refused the connection: %s", url, err);
		fail("%s is not a datagrid admin endpoint (protocol %s)", url,
		    proto ? proto : "unknown");
	}
	if (strcmp(cluster, opt.cluster) != 0)
		fail("%s belongs to cluster \"%s\", not \"%s\" (--cluster-name)", url, cluster,
		    opt.cluster);
	size_t slen;
	uint8_t *secret = load_secret(&slen);
	char mac[65], proof[65], hex[2 * DG_NONCE_LEN + 1];
	if (dgi_random(cn, sizeof(cn)) != DG_OK ||
	    dgi_admin_mac('d', secret, slen, nn, cn, id, opt.cluster, mac) != DG_OK ||
	    dgi_admin_mac('l', secret, slen, nn, cn, id, opt.cluster, proof) != DG_OK)
		fail("cannot compute the handshake");
	if (secret != NULL) {
		memset(secret, 0, slen);
		free(secret);
	}
	dgi_hex(cn, sizeof(cn), hex);
	cJSON *auth = cJSON_CreateObject();
	cJSON_AddStringToObject(auth, "nonce", hex);
	cJSON_AddStringToObject(auth, "mac", mac);
	send_json(auth, "handshake");
	cJSON_Delete(auth);
	cJSON *w = welcome = recv_json("authentication");
	if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(w, "ok"))) {
		const char *err = jstr(w, "error");
		fail("%s: %s", url, err ? err : "authentication failed");
	}
	const char *theirs = jstr(w, "mac");
	if (theirs == NULL || strcmp(theirs, proof) != 0)
		fail("%s did not prove the cluster secret: not a node of this cluster", url);
	cJSON_Delete(w);
	cJSON_Delete(hello);
	welcome = hello = NULL;
}

static bool connected;

/* Sends {"cmd", "args"} (args consumed) and returns the result; the node's
 * error ends dgctl with exit 1.  The first request connects: a command
 * checks its arguments before it, so a usage error exits 2 whether or not
 * the node is reachable. */
static cJSON *request(const char *cmd, cJSON *args)
{
	if (!connected) {
		dial();
		authenticate();
		connected = true;
	}
	cJSON *req = cJSON_CreateObject();
	cJSON_AddStringToObject(req, "cmd", cmd);
	/* the node ends its fan-outs in time for the answer to arrive */
	cJSON_AddNumberToObject(req, "timeout_ms", opt.timeout_ms);
	if (args != NULL)
		cJSON_AddItemToObject(req, "args", args);
	send_json(req, cmd);
	cJSON_Delete(req);
	cJSON *rep = recv_json(cmd);
	if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rep, "ok"))) {
		const char *err = jstr(rep, "error"), *code = jstr(rep, "code");
		fail("%s: %s%s%s%s", cmd, err ? err : "failed", code ? " (" : "", code ? code : "",
		    code ? ")" : "");
	}
	cJSON *res = cJSON_DetachItemFromObjectCaseSensitive(rep, "result");
	cJSON_Delete(rep);
	return res ? res : cJSON_CreateObject();
}

static void print_json(const cJSON *o, bool line)
{
	char *s = line ? cJSON_PrintUnformatted(o) : cJSON_Print(o);
	if (s == NULL)
		fail("out of memory");
	puts(s);
	fflush(stdout);
	cJSON_free(s);
}

/* ---- tables ---- */

#define MAXCOLS 12
typedef struct table {
	int ncols, nrows, cap;
	char **cells;             /* nrows * ncols, row 0 the header */
	bool right[MAXCOLS];      /* right-aligned (numbers) */
} table;

static void t_row(table *t, ...)
{
	if (t->nrows == t->cap) {
		t->cap = t->cap ? 2 * t->cap : 16;
		t->cells = realloc(t->cells, (size_t)t->cap * (size_t)t->ncols * sizeof(char *));
		if (t->cells == NULL)
			fail("out of memory");
	}
	va_list ap;
	va_start(ap, t);
	for (int i = 0; i < t->ncols; i++) {
		const char *s = va_arg(ap, const char *);
		t->cells[t->nrows * t->ncols + i] = strdup(s ? s : "");
	}
	va_end(ap);
	t->nrows++;
}

static void t_print(table *t)
{
	int w[MAXCOLS] = { 0 };
	for (int r = 0; r < t->nrows; r++)
		for (int c = 0; c < t->ncols; c++) {
			int l = (int)strlen(t->cells[r * t->ncols + c]);
			if (l > w[c])
				w[c] = l;
		}
	for (int r = 0; r < t->nrows; r++) {
		for (int c = 0; c < t->ncols; c++) {
			const char *s = t->cells[r * t->ncols + c];
			bool last = c == t->ncols - 1;
			if (t->right[c] && r > 0)
				printf("%*s%s", w[c], s, last ? "" : "  ");
			else if (last)
				printf("%s", s);
			else
				printf("%-*s  ", w[c], s);
			free(t->cells[r * t->ncols + c]);
		}
		putchar('\n');
	}
	free(t->cells);
	t->cells = NULL;
	t->nrows = t->cap = 0;
}

static const char *num(double v, char *buf)
{
	snprintf(buf, 32, "%.0f", v);
	return buf;
}

static const char *human_bytes(double v, char *buf)
{
	static const char *const u[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	int i = 0;
	while (v >= 1024 && i < 4) {
		v /= 1024;
		i++;
	}
	snprintf(buf, 32, i ? "%.1f %s" : "%.0f %s", v, u[i]);
	return buf;
}

static const char *human_ms(double ms, char *buf)
{
	uint64_t s = (uint64_t)(ms / 1000);
	if (ms < 1000)
		snprintf(buf, 32, "%.0fms", ms);
	else if (s < 60)
		snprintf(buf, 32, "%.1fs", ms / 1000);
	else if (s < 3600)
		snprintf(buf, 32, "%" PRIu64 "m%02" PRIu64 "s", s / 60, s % 60);
	else if (s < 86400)
		snprintf(buf, 32, "%" PRIu64 "h%02" PRIu64 "m", s / 3600, s / 60 % 60);
	else
		snprintf(buf, 32, "%" PRIu64 "d%02" PRIu64 "h", s / 86400, s / 3600 % 24);
	return buf;
}

/* ---- commands ---- */

typedef struct cmdline {
	int argc;                 /* the command's words after its name(s) */
	char **argv;
} cmdline;

static void want_args(const cmdline *c, int min, int max, const char *synopsis)
{
	if (c->argc < min || (max >= 0 && c->argc > max))
		usage_error("usage: dgctl %s", synopsis);
}

static void do_state(const cmdline *c)
{
	want_args(c, 0, 0, "state");
	cJSON *r = request("state", NULL);
	if (opt.json) {
		print_json(r, false);
	} else {
		char b[32];
		printf("cluster:           %s\n", jstr(r, "cluster"));
		printf("state:             %s\n", jstr(r, "state"));
		printf("topology version:  %s\n", num(jnum(r, "topology_version"), b));
		printf("server nodes:      %s\n", num(jnum(r, "servers"), b));
		printf("client nodes:      %s\n", num(jnum(r, "clients"), b));
		printf("baseline:          %s", cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r,
		    "baseline_set")) ? "set" : "auto (every server node owns data)");
		if (jnum(r, "standby") > 0)
			printf(", %s standby server nodes", num(jnum(r, "standby"), b));
		putchar('\n');
		printf("coordinator:       %s %s\n", jstr(r, "coordinator"),
		    jstr(r, "coordinator_address") ? jstr(r, "coordinator_address") : "");
		printf("caches:            %s\n", num(jnum(r, "caches_count"), b));
		printf("partitions moving: %s\n", num(jnum(r, "partitions_moving"), b));
		printf("partitions lost:   %s\n", num(jnum(r, "partitions_lost"), b));
		const cJSON *q = cJSON_GetObjectItemCaseSensitive(r, "quorum");
		if (q != NULL) {
			char c2[32], c3[32];
			printf("majority:          %s of %s voting servers reachable, %s needed "
			    "(partition policy %s)\n", num(jnum(q, "reachable"), b),
			    num(jnum(q, "voters"), c2), num(jnum(q, "need"), c3),
			    jstr(q, "partition_policy") ? jstr(q, "partition_policy") : "?");
			if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(q, "segmented")))
				printf("segmented for:     %s ms (every operation here fails with "
				    "DG_ERR_SEGMENTED)\n", num(jnum(q, "segmented_ms"), b));
			const cJSON *rv = cJSON_GetObjectItemCaseSensitive(q, "reachable_voters"), *it;
			cJSON_ArrayForEach(it, rv)
				if (cJSON_IsString(it))
					printf("  reaches:         %s\n", it->valuestring);
		}
	}
	cJSON_Delete(r);
}

static void do_nodes(const cmdline *c)
{
	want_args(c, 0, 0, "nodes");
	cJSON *r = request("nodes", NULL);
	if (opt.json) {
		print_json(r, false);
		cJSON_Delete(r);
		return;
	}
	char b[32], u[32];
	printf("topology version %s\n", num(jnum(r, "topology_version"), b));
	table t = { .ncols = 7, .right = { true } };
	t_row(&t, "ORDER", "ID", "ADDRESS", "ROLE", "UPTIME", "ADMIN", "HTTP");
	const cJSON *n;
	const char *self = jstr(r, "self");
	cJSON_ArrayForEach(n, cJSON_GetObjectItemCaseSensitive(r, "nodes")) {
		char role[48];
		const char *id = jstr(n, "id");
		snprintf(role, sizeof(role), "%s%s%s%s", jstr(n, "role"),
		    cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(n, "standby")) ? ",standby" : "",
		    cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(n, "coordinator")) ?
		    ",coordinator" : "", self && id && strcmp(self, id) == 0 ? " (this)" : "");
		const cJSON *up = cJSON_GetObjectItemCaseSensitive(n, "uptime_ms");
		const char *err = jstr(n, "error");
		t_row(&t, num(jnum(n, "order"), b), id, jstr(n, "address"), role,
		    cJSON_IsNumber(up) ? human_ms(up->valuedouble, u) : err ? "no answer" : "?",
		    jstr(n, "admin"), jstr(n, "http"));
	}
	t_print(&t);
	cJSON_Delete(r);
}

static void do_partitions(const cmdline *c)
{
	want_args(c, 0, 1, "partitions");
	cJSON *args = cJSON_CreateObject();
	if (c->argc == 1)
		cJSON_AddStringToObject(args, "cache", c->argv[0]);
	cJSON *r = request("partitions", args);
	if (opt.json) {
		print_json(r, false);
		cJSON_Delete(r);
		return;
	}
	char b[32];
	printf("topology version %s\n", num(jnum(r, "topology_version"), b));
	const cJSON *cache, *n;
	cJSON_ArrayForEach(cache, cJSON_GetObjectItemCaseSensitive(r, "caches")) {
		const char *name = jstr(cache, "cache");
		printf("\ncache %s (%s partitions)\n", name ? name : "?",
		    num(jnum(cache, "partitions"), b));
		table t = { .ncols = 6, .right = { false, true, true, true, true, true } };
		t_row(&t, "ADDRESS", "PRIMARY", "BACKUP", "MOVING", "LOST", "NONE");
		char v[5][32];
		cJSON_ArrayForEach(n, cJSON_GetObjectItemCaseSensitive(cache, "nodes"))
			t_row(&t, jstr(n, "address"), num(jnum(n, "primary"), v[0]),
			    num(jnum(n, "backup"), v[1]), num(jnum(n, "moving"), v[2]),
			    num(jnum(n, "lost"), v[3]), num(jnum(n, "none"), v[4]));
		t_print(&t);
		if (!opt.map)
			continue;
		cJSON_ArrayForEach(n, cJSON_GetObjectItemCaseSensitive(cache, "nodes")) {
			const char *m = jstr(n, "map"), *addr = jstr(n, "address");
			printf("\n%s\n", addr ? addr : "?");
			for (size_t i = 0, l = m ? strlen(m) : 0; i < l; i += 64)
				printf("  %5zu  %.64s\n", i, m + i);
		}
	}
	const cJSON *u = cJSON_GetObjectItemCaseSensitive(r, "nodes_unanswered");
	if (cJSON_GetArraySize(u) > 0) {
		cJSON_ArrayForEach(n, u)
			fprintf(stderr, "dgctl: %s did not answer: %s\n",
			    jstr(n, "address") ? jstr(n, "address") : "?",
			    jstr(n, "error") ? jstr(n, "error") : "?");
		cJSON_Delete(r);
		exit(EXIT_FAIL);
	}
	cJSON_Delete(r);
}

/* --value-file: the file's bytes (PATH "-": standard input) as a string:
 * a value too large for a command line (its 128 KiB per argument).  A NUL
 * byte is refused: values travel as JSON text. */
static char *read_value_file(const char *path)
{
	FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
	if (f == NULL)
		fail("--value-file=%s: %s", path, strerror(errno));
	size_t cap = 1 << 16, n = 0;
	char *buf = malloc(cap);
	for (;;) {
		if (buf == NULL)
			fail("out of memory");
		n += fread(buf + n, 1, cap - 1 - n, f);
		if (n < cap - 1 || n > DG_VALUE_MAX)
			break;
		cap *= 2;
		char *nb = realloc(buf, cap);
		if (nb == NULL)
			free(buf);
		buf = nb;
	}
	bool err = ferror(f) != 0;
	if (f != stdin)
		fclose(f);
	if (err)
		fail("--value-file=%s: read error", path);
	if (n > DG_VALUE_MAX - 8)
		usage_error("--value-file=%s: more than %u bytes (the largest value)", path,
		    DG_VALUE_MAX - 8);
	if (memchr(buf, 0, n) != NULL)
		usage_error("--value-file=%s: a NUL byte at %zu: values are text", path,
		    (size_t)((char *)memchr(buf, 0, n) - buf));
	buf[n] = 0;
	return buf;
}

static void do_cache(const cmdline *c)
{
	if (c->argc < 1)
		usage_error("usage: dgctl cache list|create|destroy|put|get|remove|scan ...");
	const char *sub = c->argv[0];
	cmdline rest = { c->argc - 1, c->argv + 1 };
	cJSON *args = cJSON_CreateObject();
	if (strcmp(sub, "list") == 0) {
		want_args(&rest, 0, 0, "cache list");
		cJSON_Delete(args);
		cJSON *r = request("cache.list", NULL);
		if (opt.json) {
			print_json(r, false);
		} else {
			table t = { .ncols = 9, .right = { [2] = true, [5] = true, [8] = true } };
			t_row(&t, "NAME", "MODE", "BACKUPS", "SYNC", "ATOMICITY", "PARTITIONS",
			    "PERSISTENCE", "TTL", "SIZE");
			const cJSON *o;
			cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(r, "caches")) {
				char b1[32], b2[32], b3[32], b4[32];
				double ttl = jnum(o, "ttl_ms");
				const cJSON *sz = cJSON_GetObjectItemCaseSensitive(o, "size");
				t_row(&t, jstr(o, "name"), jstr(o, "mode"), num(jnum(o, "backups"), b1),
				    jstr(o, "sync"), jstr(o, "atomicity"), num(jnum(o, "partitions"), b2),
				    cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "persistence")) ?
				    "yes" : "no", ttl > 0 ? human_ms(ttl, b3) : "-",
				    cJSON_IsNumber(sz) ? num(sz->valuedouble, b4) : "?");
			}
			t_print(&t);
		}
		cJSON_Delete(r);
		return;
	}
	if (strcmp(sub, "create") == 0) {
		want_args(&rest, 1, 1, "cache create NAME [--mode M] [--backups N] [--sync S] "
		    "[--atomicity A] [--persistence] [--ttl DURATION]");
		cJSON_AddStringToObject(args, "cache", rest.argv[0]);
		if (opt.mode)
			cJSON_AddStringToObject(args, "mode", opt.mode);
		if (opt.sync)
			cJSON_AddStringToObject(args, "sync", opt.sync);
		if (opt.atomicity)
			cJSON_AddStringToObject(args, "atomicity", opt.atomicity);
		if (opt.backups) {
			char *end;
			long b = strtol(opt.backups, &end, 10);
			if (*end != 0 || end == opt.backups || b < 0 || b > 64)
				usage_error("--backups=%s: expected 0..64", opt.backups);
			cJSON_AddNumberToObject(args, "backups", (double)b);
		}
		if (opt.ttl)
			cJSON_AddNumberToObject(args, "ttl_ms", (double)duration_arg("ttl", opt.ttl));
		if (opt.persistence)
			cJSON_AddTrueToObject(args, "persistence");
		cJSON *r = request("cache.create", args);
		if (opt.json)
			print_json(r, false);
		else
			printf("created cache %s\n", rest.argv[0]);
		cJSON_Delete(r);
		return;
	}
	if (strcmp(sub, "destroy") == 0) {
		want_args(&rest, 1, 1, "cache destroy NAME");
		cJSON_AddStringToObject(args, "cache", rest.argv[0]);
		cJSON *r = request("cache.destroy", args);
		if (opt.json)
			print_json(r, false);
		else
			printf("destroyed cache %s\n", rest.argv[0]);
		cJSON_Delete(r);
		return;
	}
	if (strcmp(sub, "reset-lost") == 0) {
		want_args(&rest, 1, 1, "cache reset-lost NAME");
		cJSON_AddStringToObject(args, "cache", rest.argv[0]);
		cJSON *r = request("cache.reset-lost", args);
		if (opt.json)
			print_json(r, false);
		else
			printf("cache %s: every node owns what it holds of its LOST partitions "
			    "(LOST here: %.0f before, %.0f after)\n", rest.argv[0],
			    jnum(r, "lost_here_before"), jnum(r, "lost_here_after"));
		cJSON_Delete(r);
		return;
	}
	if (strcmp(sub, "put") == 0 || strcmp(sub, "get") == 0 || strcmp(sub, "remove") == 0) {
		bool put = sub[0] == 'p';
		char *fval = NULL;
		if (!put && opt.value_file != NULL)
			usage_error("--value-file is for cache put");
		if (put && opt.value_file != NULL) {
			want_args(&rest, 2, 2, "cache put NAME KEY --value-file PATH|-");
			fval = read_value_file(opt.value_file);
		} else if (put)
			want_args(&rest, 3, 3, "cache put NAME KEY VALUE | --value-file PATH|-");
		else
			want_args(&rest, 2, 2, sub[0] == 'g' ? "cache get NAME KEY" :
			    "cache remove NAME KEY");
		cJSON_AddStringToObject(args, "cache", rest.argv[0]);
		cJSON_AddStringToObject(args, "key", rest.argv[1]);
		if (put) {
			const char *v = fval != NULL ? fval : rest.argv[2];
			if (strlen(v) > DG_VALUE_MAX - 8) /* (before connecting: the node says so too) */
				usage_error("cache put: value of %zu bytes: at most %u", strlen(v),
				    DG_VALUE_MAX - 8);
			cJSON_AddStringToObject(args, "value", v);
			free(fval);
		}
		char cmd[32];
		snprintf(cmd, sizeof(cmd), "cache.%s", sub);
		cJSON *r = request(cmd, args);
		if (opt.json)
			print_json(r, false);
		else if (sub[0] == 'g')
			printf("%s\n", jstr(r, "value") ? jstr(r, "value") : "");
		else if (put)
			printf("ok\n");
		else
			printf("%s\n", cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "removed")) ?
			    "removed" : "not found (nothing removed)");
		cJSON_Delete(r);
		return;
	}
	if (strcmp(sub, "scan") == 0) {
		want_args(&rest, 1, 1, "cache scan NAME [--limit N]");
		cJSON_AddStringToObject(args, "cache", rest.argv[0]);
		if (opt.limit) {
			char *end;
			long l = strtol(opt.limit, &end, 10);
			if (*end != 0 || end == opt.limit || l < 1 || l > 1000000)
				usage_error("--limit=%s: expected 1..1000000", opt.limit);
			cJSON_AddNumberToObject(args, "limit", (double)l);
		}
		cJSON *r = request("cache.scan", args);
		if (opt.json) {
			print_json(r, false);
		} else {
			table t = { .ncols = 2 };
			t_row(&t, "KEY", "VALUE");
			const cJSON *o;
			cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(r, "entries"))
				t_row(&t, jstr(o, "key"), jstr(o, "value"));
			t_print(&t);
			char b[32];
			bool by_bytes = jstr(r, "truncated_by") != NULL &&
			    strcmp(jstr(r, "truncated_by"), "bytes") == 0;
			char mb[32];
			printf("(%s entries%s%s%s)\n", num(jnum(r, "count"), b),
			    !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "truncated")) ? "" :
			    by_bytes ? ", more not shown: the answer's size limit (" :
			    ", more not shown: --limit", by_bytes ? num(jnum(r, "max_bytes"), mb) : "",
			    by_bytes ? " bytes of entries) was reached" : "");
		}
		cJSON_Delete(r);
		return;
	}
	usage_error("unknown cache command \"%s\" (list, create, destroy, put, get, remove, scan)",
	    sub);
}

static void do_metrics(const cmdline *c)
{
	want_args(c, 0, 0, "metrics [--all]");
	cJSON *args = cJSON_CreateObject();
	if (opt.all)
		cJSON_AddTrueToObject(args, "all");
	cJSON *r = request("metrics", args);
	if (opt.json) {
		print_json(r, false);
		cJSON_Delete(r);
		return;
	}
	char b[6][32];
	printf("node %s %s\n\n", jstr(r, "node"), jstr(r, "address"));
	table t = { .ncols = 6, .right = { false, true, true, true, true, true } };
	t_row(&t, "MESSAGE TYPE", "SENT", "RECEIVED", "BYTES SENT", "BYTES RECEIVED", "FAILURES");
	const cJSON *o;
	cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(r, "messages"))
		t_row(&t, jstr(o, "type"), num(jnum(o, "sent"), b[0]), num(jnum(o, "received"), b[1]),
		    num(jnum(o, "bytes_sent"), b[2]), num(jnum(o, "bytes_received"), b[3]),
		    num(jnum(o, "failures"), b[4]));
	t_print(&t);
	putchar('\n');
	table k = { .ncols = 10, .right = { false, true, true, true, true, true, true, true, true, true } };
	t_row(&k, "CACHE", "PUTS", "GETS", "REMOVES", "HITS", "MISSES", "ENTRIES", "GET P50/P99",
	    "PUT P50/P99", "REMOVE P50/P99");
	cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(r, "caches")) {
		char lat[3][48];
		static const char *const ops[] = { "get", "put", "remove" };
		for (int i = 0; i < 3; i++) {
			const cJSON *l = cJSON_GetObjectItemCaseSensitive(o, ops[i]);
			if (l == NULL || jnum(l, "count") == 0)
				snprintf(lat[i], sizeof(lat[i]), "-");
			else
				snprintf(lat[i], sizeof(lat[i]), "%.0f/%.0fus", jnum(l, "p50_us"),
				    jnum(l, "p99_us"));
		}
		t_row(&k, jstr(o, "cache"), num(jnum(o, "puts"), b[0]), num(jnum(o, "gets"), b[1]),
		    num(jnum(o, "removes"), b[2]), num(jnum(o, "hits"), b[3]),
		    num(jnum(o, "misses"), b[4]), num(jnum(o, "entries"), b[5]), lat[0], lat[1], lat[2]);
	}
	t_print(&k);
	const cJSON *tx = cJSON_GetObjectItemCaseSensitive(r, "tx");
	if (tx != NULL) {
		printf("\ntransactions: started %s, committed %s, rolled back %s, ",
		    num(jnum(tx, "started"), b[0]), num(jnum(tx, "committed"), b[1]),
		    num(jnum(tx, "rolled_back"), b[2]));
		printf("deadlocks %s, timeouts %s, conflicts %s\n", num(jnum(tx, "deadlocks"), b[3]),
		    num(jnum(tx, "timeouts"), b[4]), num(jnum(tx, "conflicts"), b[5]));
	}
	cJSON_Delete(r);
}

static volatile sig_atomic_t interrupted;
static void on_sigint(int sig)
{
	(void)sig;
	interrupted = 1;
}

static void draw_bar(double frac, char *out, size_t width)
{
	size_t full = (size_t)(frac * (double)width + 0.5);
	for (size_t i = 0; i < width; i++)
		out[i] = i < full ? '#' : '.';
	out[width] = 0;
}

static void do_rebalance(const cmdline *c)
{
	if (c->argc < 1 || strcmp(c->argv[0], "status") != 0 || c->argc > 1)
		usage_error("usage: dgctl rebalance status [--watch] [--interval DURATION]");
	uint64_t every = opt.interval ? duration_arg("interval", opt.interval) : 500;
	if (every < 50)
		usage_error("--interval: at least 50ms");
	bool tty = isatty(STDOUT_FILENO) && !opt.json;
	if (opt.watch)
		signal(SIGINT, on_sigint);
	/* the bar counts this rebalancing only: done and bytes since the first
	 * poll, over what was left then plus what was added since */
	double done0 = -1, bytes0 = 0;
	for (;;) {
		cJSON *r = request("rebalance", NULL);
		bool complete = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "complete"));
		double done = 0, left = 0, bytes = 0;
		const cJSON *o;
		cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(r, "caches")) {
			done += jnum(o, "done");
			left += jnum(o, "left");
			bytes += jnum(o, "bytes");
		}
		if (done0 < 0) {
			done0 = done;
			bytes0 = bytes;
		}
		if (opt.json) {
			print_json(r, opt.watch);
		} else if (opt.watch) {
			char bar[41], b1[32], b2[32], b3[32], b4[32];
			double now = done - done0, total = now + left;
			draw_bar(total > 0 ? now / total : 1.0, bar, 40);
			printf("%s[%s] %s/%s partitions, %s received, %s moving%s",
			    tty ? "\r" : "", bar, num(now, b1), num(total, b2),
			    human_bytes(bytes - bytes0, b3), num(jnum(r, "partitions_moving"), b4),
			    tty ? "   " : "\n");
			fflush(stdout);
		} else {
			char b[6][32];
			printf("topology version %s: rebalancing %s\n",
			    num(jnum(r, "topology_version"), b[0]), complete ? "complete" : "in progress");
			table t = { .ncols = 7, .right = { false, true, true, true, true, true, true } };
			t_row(&t, "CACHE", "MOVING", "DONE", "LEFT", "RECEIVED", "LOST", "REPAIRING");
			cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(r, "caches"))
				t_row(&t, jstr(o, "cache"), num(jnum(o, "moving"), b[0]),
				    num(jnum(o, "done"), b[1]), num(jnum(o, "left"), b[2]),
				    human_bytes(jnum(o, "bytes"), b[3]), num(jnum(o, "lost"), b[4]),
				    num(jnum(o, "repairing"), b[5]));
			t_print(&t);
		}
		cJSON_Delete(r);
		if (!opt.watch)
			return;
		if (complete) {
			if (!opt.json)
				printf("%srebalancing complete\n", tty ? "\n" : "");
			return;
		}
		if (interrupted) {
			if (tty)
				putchar('\n');
			exit(EXIT_FAIL);
		}
		struct timespec ts = { (time_t)(every / 1000), (long)(every % 1000) * 1000000 };
		nanosleep(&ts, NULL);
		if (interrupted) {
			if (tty)
				putchar('\n');
			exit(EXIT_FAIL);
		}
	}
}

static void do_shutdown(const cmdline *c)
{
	want_args(c, 0, 0, "shutdown [--cluster]");
	cJSON *args = cJSON_CreateObject();
	if (opt.cluster_wide)
		cJSON_AddTrueToObject(args, "cluster");
	cJSON *r = request("shutdown", args);
	if (opt.json) {
		print_json(r, false);
	} else {
		const cJSON *o;
		cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(r, "stopping")) {
			const char *err = jstr(o, "error"), *id = jstr(o, "id"), *a = jstr(o, "address");
			printf("%s %s: %s\n", id ? id : "?", a ? a : "?",
			    err ? err : "stopping (hands its partitions over, then exits)");
		}
	}
	cJSON_Delete(r);
}

static void do_encryption(const cmdline *c)
{
	if (c->argc < 1 || strcmp(c->argv[0], "rotate") != 0)
		usage_error("encryption: expected 'rotate'");
	cmdline rest = { c->argc - 1, c->argv + 1 };
	want_args(&rest, 0, 0, "encryption rotate");
	cJSON *r = request("encryption.rotate", cJSON_CreateObject());
	int failed = 0;
	const cJSON *o;
	cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(r, "nodes")) {
		const char *err = jstr(o, "error");
		const char *code = jstr(o, "code");
		/* a node without encryption (a client, no data_dir) has nothing
		 * to rotate */
		if (err != NULL && (code == NULL || strncmp(code, "DG_ERR_STATE", 12) != 0))
			failed++;
	}
	if (opt.json) {
		print_json(r, false);
	} else {
		cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(r, "nodes")) {
			const char *err = jstr(o, "error"), *id = jstr(o, "id"), *a = jstr(o, "address");
			const char *kid = jstr(o, "key_id");
			if (err != NULL)
				printf("%s %s: %s\n", id ? id : "?", a ? a : "?", err);
			else
				printf("%s %s: data keys re-wrapped under key %s\n", id ? id : "?",
				    a ? a : "?", kid ? kid : "?");
		}
	}
	cJSON_Delete(r);
	if (failed > 0)
		exit(EXIT_FAIL);
}

static void do_idle_verify(const cmdline *c)
{
	cJSON *args = cJSON_CreateObject();
	cJSON *names = cJSON_AddArrayToObject(args, "caches");
	for (int i = 0; i < c->argc; i++)
		cJSON_AddItemToArray(names, cJSON_CreateString(c->argv[i]));
	cJSON *r = request("idle-verify", args);
	int ndiv = (int)jnum(r, "divergent_count"), unanswered = (int)jnum(r, "nodes_unanswered");
	if (opt.json) {
		print_json(r, false);
	} else {
		char b[3][32];
		printf("idle-verify: %s partitions checked in %d caches, %s skipped (no OWNING "
		    "copy: rebalancing or lost)\n", num(jnum(r, "partitions_checked"), b[0]),
		    cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(r, "caches")),
		    num(jnum(r, "partitions_skipped"), b[1]));
		if (ndiv == 0) {
			printf("no divergence: every partition's copies agree\n");
		} else {
			printf("%d partitions diverge:\n", ndiv);
			table t = { .ncols = 8, .right = { [1] = true, [5] = true, [7] = true } };
			t_row(&t, "CACHE", "PARTITION", "NODE", "ADDRESS", "ROLE", "ENTRIES", "DIGEST",
			    "BYTES");
			const cJSON *d, *k;
			cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(r, "divergent"))
				cJSON_ArrayForEach(k, cJSON_GetObjectItemCaseSensitive(d, "copies"))
					t_row(&t, jstr(d, "cache"), num(jnum(d, "partition"), b[0]),
					    jstr(k, "node"), jstr(k, "address"), jstr(k, "role"),
					    num(jnum(k, "entries"), b[1]), jstr(k, "digest"),
					    num(jnum(k, "bytes"), b[2]));
			t_print(&t);
		}
	}
	cJSON_Delete(r);
	if (unanswered > 0)
		fail("idle-verify: %d nodes did not answer: the check is incomplete", unanswered);
	if (ndiv > 0)
		fail("idle-verify: %d partitions diverge between their copies", ndiv);
}

static void do_tx(const cmdline *c)
{
	if (c->argc >= 1 && strcmp(c->argv[0], "list") == 0 && c->argc == 1) {
		cJSON *args = cJSON_CreateObject();
		if (opt.min_age)
			cJSON_AddNumberToObject(args, "min_age_ms",
			    (double)duration_arg("min-age", opt.min_age));
		cJSON *r = request("tx.list", args);
		if (opt.json) {
			print_json(r, false);
		} else {
			table t = { .ncols = 8, .right = { [4] = true, [5] = true } };
			t_row(&t, "ID", "NODE", "ROLE", "STATE", "AGE", "KEYS", "MODE", "LABEL");
			const cJSON *o;
			cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(r, "txs")) {
				char b[2][32], mode[64];
				const char *cc = jstr(o, "concurrency"), *iso = jstr(o, "isolation");
				snprintf(mode, sizeof(mode), "%s%s%s", cc ? cc : "",
				    cc && cc[0] && iso && iso[0] ? " " : "", iso ? iso : "");
				t_row(&t, jstr(o, "id"), jstr(o, "address"), jstr(o, "role"),
				    jstr(o, "state"), human_ms(jnum(o, "age_ms"), b[0]),
				    num(jnum(o, "keys"), b[1]), mode, jstr(o, "label"));
			}
			t_print(&t);
			printf("(%d rows: each transaction once on its near node and once per "
			    "node where it holds locks or copies)\n",
			    cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(r, "txs")));
		}
		cJSON_Delete(r);
		return;
	}
	if (c->argc == 2 && strcmp(c->argv[0], "kill") == 0) {
		if (opt.min_age)
			usage_error("tx kill does not take --min-age");
		cJSON *args = cJSON_CreateObject();
		cJSON_AddStringToObject(args, "id", c->argv[1]);
		cJSON *r = request("tx.kill", args);
		if (opt.json)
			print_json(r, false);
		else
			printf("rolled back %s\n", c->argv[1]);
		cJSON_Delete(r);
		return;
	}
	usage_error("usage: dgctl tx list [--min-age DURATION] | dgctl tx kill ID");
}

static void do_baseline(const cmdline *c)
{
	const char *op = c->argc == 0 ? "show" : c->argv[0];
	bool show = strcmp(op, "show") == 0;
	if (!show && strcmp(op, "set") != 0 && strcmp(op, "add") != 0 &&
	    strcmp(op, "remove") != 0)
		usage_error("usage: dgctl baseline [show] | dgctl baseline set|add|remove ADDR...");
	if (show && c->argc > 1)
		usage_error("usage: dgctl baseline [show]");
	if (!show && c->argc < 2)
		usage_error("usage: dgctl baseline %s ADDR... (node cluster addresses, as "
		    "dgctl nodes prints them)", op);
	cJSON *args = cJSON_CreateObject();
	cJSON_AddStringToObject(args, "op", op);
	cJSON *nodes = cJSON_AddArrayToObject(args, "nodes");
	for (int i = 1; i < c->argc; i++)
		cJSON_AddItemToArray(nodes, cJSON_CreateString(c->argv[i]));
	cJSON *r = request("baseline", args);
	if (opt.json) {
		print_json(r, false);
		cJSON_Delete(r);
		return;
	}
	char b[32];
	bool is_auto = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "auto"));
	printf("topology version %s; baseline: %s\n", num(jnum(r, "topology_version"), b),
	    is_auto ? "auto (every server node owns data)" : "set");
	table t = { .ncols = 3 };
	t_row(&t, "ADDRESS", "STATE", "ID");
	const cJSON *o;
	cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(r, "baseline"))
		t_row(&t, jstr(o, "address"), cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o,
		    "online")) ? "online" : "offline", jstr(o, "id"));
	cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(r, "standby"))
		t_row(&t, jstr(o, "address"), "standby (not in the baseline: owns no data)",
		    jstr(o, "id"));
	t_print(&t);
	cJSON_Delete(r);
}

/* Test hooks: served only by nodes started with DG_ADMIN_TEST_HOOKS=1. */
static void do_debug(const cmdline *c)
{
	if (c->argc != 4 || strcmp(c->argv[0], "put-local") != 0)
		usage_error("usage: dgctl debug put-local CACHE KEY VALUE");
	cJSON *args = cJSON_CreateObject();
	cJSON_AddStringToObject(args, "cache", c->argv[1]);
	cJSON_AddStringToObject(args, "key", c->argv[2]);
	cJSON_AddStringToObject(args, "value", c->argv[3]);
	cJSON *r = request("debug.put-local", args);
	if (opt.json)
		print_json(r, false);
	else
		printf("overwrote this node's copy of %s (no other copy changed)\n", c->argv[2]);
	cJSON_Delete(r);
}



/* ---- main ---- */

enum {
	O_HOST = 256, O_PORT, O_URL, O_CA, O_CERT, O_SECRET, O_CLUSTER, O_TIMEOUT, O_JSON,
	O_VERSION, O_MODE, O_BACKUPS, O_SYNC, O_ATOM, O_PERSIST, O_TTL, O_LIMIT, O_WATCH,
	O_INTERVAL, O_ALL, O_CLUSTERWIDE, O_MINAGE, O_YES, O_MAP, O_VALUE_FILE
};

static const struct option longopts[] = {
	{ "host", required_argument, NULL, O_HOST },
	{ "port", required_argument, NULL, O_PORT },
	{ "url", required_argument, NULL, O_URL },
	{ "tls-ca", required_argument, NULL, O_CA },
	{ "tls-cert-key", required_argument, NULL, O_CERT },
	{ "secret-file", required_argument, NULL, O_SECRET },
	{ "cluster-name", required_argument, NULL, O_CLUSTER },
	{ "timeout", required_argument, NULL, O_TIMEOUT },
	{ "json", no_argument, NULL, O_JSON },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, O_VERSION },
	{ "mode", required_argument, NULL, O_MODE },
	{ "backups", required_argument, NULL, O_BACKUPS },
	{ "sync", required_argument, NULL, O_SYNC },
	{ "atomicity", required_argument, NULL, O_ATOM },
	{ "persistence", no_argument, NULL, O_PERSIST },
	{ "ttl", required_argument, NULL, O_TTL },
	{ "limit", required_argument, NULL, O_LIMIT },
	{ "watch", no_argument, NULL, O_WATCH },
	{ "interval", required_argument, NULL, O_INTERVAL },
	{ "all", no_argument, NULL, O_ALL },
	{ "cluster", no_argument, NULL, O_CLUSTERWIDE },
	{ "min-age", required_argument, NULL, O_MINAGE },
	{ "yes", no_argument, NULL, O_YES },
	{ "map", no_argument, NULL, O_MAP },
	{ "value-file", required_argument, NULL, O_VALUE_FILE },
	{ NULL, 0, NULL, 0 },
};

/* Which command-specific options each command takes. */
static const struct {
	const char *cmd;
	const char *opts;          /* option names, space-separated */
	void (*fn)(const cmdline *c);
	const char *help;
} commands[] = {
	{ "state", "", do_state, "dgctl state\n\nThe cluster's name and state (ACTIVE, "
	  "REBALANCING, LOST_PARTITIONS, SEGMENTED),\ntopology version, node counts, coordinator and "
	  "partitions moving or lost.\n" },
	{ "nodes", "", do_nodes, "dgctl nodes\n\nEvery node of the topology: join order, id, "
	  "cluster address, role\n(server or client; the coordinator is marked), uptime and "
	  "its admin and\nhttp endpoints.\n" },
	{ "cache", "mode backups sync atomicity persistence ttl limit value-file", do_cache,
	  "dgctl cache list\n"
	  "dgctl cache create NAME [--mode partitioned|replicated] [--backups N]\n"
	  "       [--sync full_sync|primary_sync|full_async] [--atomicity atomic|transactional]\n"
	  "       [--persistence] [--ttl DURATION]\n"
	  "dgctl cache destroy NAME\n"
	  "dgctl cache reset-lost NAME  (after every copy of a partition was lost: each\n"
	  "       node owns what it holds of it; its writes may be missing)\n"
	  "dgctl cache put NAME KEY VALUE\n"
	  "dgctl cache put NAME KEY --value-file PATH  (the file's bytes; -: standard\n"
	  "       input; text without NUL bytes, up to 8388600 bytes)\n"
	  "dgctl cache get NAME KEY      (exit 1 when the key is absent)\n"
	  "dgctl cache remove NAME KEY\n"
	  "dgctl cache scan NAME [--limit N]   (default 100 entries)\n"
	  "\nKeys and values are strings, stored as bytes (what dg_cache_put stores).\n" },
	{ "metrics", "all", do_metrics, "dgctl metrics [--all]\n\nThe connected node's "
	  "counters: per message type (sent, received, bytes,\nfailures; --all: every type, "
	  "not only those with traffic), per cache\n(operations, entries, latency p50/p99) "
	  "and transactions.\n" },
	{ "rebalance", "watch interval", do_rebalance, "dgctl rebalance status [--watch] "
	  "[--interval DURATION]\n\nPer cache: partitions moving, done and left, bytes "
	  "received, over every\nnode.  --watch redraws a progress bar every interval "
	  "(default 500ms)\nuntil rebalancing is complete (exit 0; Ctrl-C: exit 1).\n" },
	{ "partitions", "map", do_partitions, "dgctl partitions [CACHE] [--map]\n\nPer cache "
	  "(all, or CACHE), per server: how many partitions it owns as\nprimary and as "
	  "backup, how many are moving to it (being fetched) and\nhow many are lost.  --map "
	  "also prints each server's map, one character\nper partition, 64 a line: P "
	  "primary, B backup, M/m moving (as primary /\nbackup), L/l lost, . not an "
	  "owner.  The dashboard (GET / on a node's\nhttp endpoint) draws the same "
	  "answer.\n" },
	{ "encryption", "", do_encryption, "dgctl encryption rotate\n\nEvery node re-reads "
	  "its encryption key file (encryption-key-file)\nand re-wraps its data keys under "
	  "the key now in it; the data is not\nrewritten.  Put the new key in every node's "
	  "file first (node/DEPLOY.md,\n\"Encryption at rest\").  Exit 1 if a node with "
	  "encryption failed.\n" },
	{ "shutdown", "cluster yes", do_shutdown, "dgctl shutdown [--cluster]\n\nStops the "
	  "connected node gracefully: it hands its partitions over,\nleaves the cluster and "
	  "exits.  --cluster: every node of the cluster, this\none last (nodes embedded in "
	  "an application refuse: they stop when\nthe application stops them).\n" },
	{ "idle-verify", "", do_idle_verify, "dgctl idle-verify [CACHE...]\n\nCompares the "
	  "copies of every partition (all caches, or those named):\neach owner's entry count "
	  "and digest of keys, values and versions.\nA partition is reported when its "
	  "OWNING copies disagree in three\nchecks 200 ms apart (run it while the cache is "
	  "idle).  Exit 0: no\ndivergence; 1: some partitions diverge (listed), or a node "
	  "did not\nanswer in time (large caches: raise --timeout).\n" },
	{ "tx", "min-age", do_tx, "dgctl tx list [--min-age DURATION]\ndgctl tx kill ID\n\n"
	  "list: the transactions running on every node: id (NEAR:SEQ),\nnode, role (near, "
	  "primary, backup), state, age, keys, mode, label.\nkill: rolls the transaction "
	  "back (its next operation or commit fails\nwith DG_ERR_TX_ROLLED_BACK and its "
	  "locks are released); one\nalready committing finishes (exit 1).\n" },
	{ "debug", "", do_debug, "dgctl debug put-local CACHE KEY VALUE\n\nTest hook: "
	  "overwrites the connected node's own copy of KEY without\ntelling the other "
	  "owners (idle-verify then reports the partition).\nServed only by a node started "
	  "with DG_ADMIN_TEST_HOOKS=1.\n" },
	{ "baseline", "", do_baseline, "dgctl baseline [show]\n"
	  "dgctl baseline set|add|remove ADDR...\n\nThe baseline: the server nodes (by "
	  "cluster address) that own data.\nUnset (auto), every server node does.  A server "
	  "node outside a set\nbaseline is standby: it stays in the cluster and owns no "
	  "partitions.\nadd: the nodes get partitions (rebalancing starts); remove: their\n"
	  "partitions move to the others first (a decommission).  Offline\nbaseline nodes "
	  "stay listed; their partitions are served by the\nonline ones meanwhile.\n" },
};

static bool allowed(const char *opts, const char *name)
{
	size_t l = strlen(name);
	for (const char *p = opts; (p = strstr(p, name)) != NULL; p += l)
		if ((p == opts || p[-1] == ' ') && (p[l] == 0 || p[l] == ' '))
			return true;
	return false;
}

static const char *used[32];    /* command-specific options given */
static int nused;
static char *words[64];         /* the command and its arguments */
static int nwords;
static bool help;

static void take_option(int ch, const char *arg)
{
	for (const struct option *o = longopts; o->name; o++)
		if (o->val == ch && ch >= O_MODE && nused < 32)
			used[nused++] = o->name;
	switch (ch) {
	case 1:
		if (nwords == 64)
			usage_error("too many arguments");
		words[nwords++] = (char *)arg;
		break;
	case 'h': help = true; break;
	case O_HOST: opt.host = arg; break;
	case O_PORT: opt.port = arg; break;
	case O_URL: opt.url = arg; break;
	case O_CA: opt.tls_ca = arg; break;
	case O_CERT: opt.tls_cert_key = arg; break;
	case O_SECRET: opt.secret_file = arg; break;
	case O_CLUSTER: opt.cluster = arg; break;
	case O_TIMEOUT: {
		uint64_t ms = duration_arg("timeout", arg);
		if (ms == 0 || ms > 3600000)
			usage_error("--timeout=%s: 1ms..1h", arg);
		opt.timeout_ms = (uint32_t)ms;
		break;
	}
	case O_JSON: opt.json = true; break;
	case O_VERSION: printf("dgctl (%s)\n", dg_version()); exit(0);
	case O_MODE: opt.mode = arg; break;
	case O_BACKUPS: opt.backups = arg; break;
	case O_SYNC: opt.sync = arg; break;
	case O_ATOM: opt.atomicity = arg; break;
	case O_PERSIST: opt.persistence = true; break;
	case O_TTL: opt.ttl = arg; break;
	case O_LIMIT: opt.limit = arg; break;
	case O_WATCH: opt.watch = true; break;
	case O_INTERVAL: opt.interval = arg; break;
	case O_ALL: opt.all = true; break;
	case O_CLUSTERWIDE: opt.cluster_wide = true; break;
	case O_MINAGE: opt.min_age = arg; break;
	case O_YES: opt.yes = true; break;
	case O_MAP: opt.map = true; break;
	case O_VALUE_FILE: opt.value_file = arg; break;
	}
}

int main(int argc, char **argv)
{
	int ch;
	opterr = 0;
	/* "-": words come back in order as option 1, so options may stand
	 * anywhere; after "--" everything is a word */
	while ((ch = getopt_long(argc, argv, "-:h", longopts, NULL)) != -1) {
		if (ch == '?')
			usage_error("%s: unknown option", argv[optind - 1]);
		if (ch == ':')
			usage_error("%s: needs a value", argv[optind - 1]);
		take_option(ch, optarg);
	}
	for (; optind < argc; optind++)
		take_option(1, argv[optind]);
	if (nwords == 0) {
		if (help) {
			fputs(usage_text, stdout);
			return 0;
		}
		usage_error("no command given");
	}
	int which = -1;
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (strcmp(commands[i].cmd, words[0]) == 0)
			which = (int)i;
	if (which < 0)
		usage_error("unknown command \"%s\"", words[0]);
	if (help) {
		fputs("usage: ", stdout);
		fputs(commands[which].help, stdout);
		fputs("\nThe connection options (dgctl --help) apply to every command.\n", stdout);
		return 0;
	}
	for (int i = 0; i < nused; i++)
		if (!allowed(commands[which].opts, used[i]))
			usage_error("%s does not take --%s", words[0], used[i]);
	signal(SIGPIPE, SIG_IGN);
	cmdline c = { nwords - 1, words + 1 };
	commands[which].fn(&c);
	if (connected)
		dgi_aconn_close(&conn);
	if (dialer)
		nng_stream_dialer_free(dialer);
	if (tls)
		nng_tls_config_free(tls);
	return 0;
}
