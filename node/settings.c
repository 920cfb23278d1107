/* settings.c — dgnode's settings table and what it drives: defaults, the
 * config file, the command line (getopt_long), --help and validation.
 * See settings.h for the syntax and the precedence of sources. */
#define _POSIX_C_SOURCE 200809L
#include "settings.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Sources, lowest first: a list set by a higher one drops the lower's items. */
enum { SRC_DEFAULT = 0, SRC_FILE = 1, SRC_ARGS = 2 };

#define KIB ((uint64_t)1 << 10)
#define MIB ((uint64_t)1 << 20)
#define GIB ((uint64_t)1 << 30)
#define TIB ((uint64_t)1 << 40)
#define HOUR_MS 3600000u
#define LINE_MAX_BYTES 4096   /* config file line, with its newline */
#define SPEC_MAX_BYTES 1024   /* cache spec */
#define SECRET_MAX 4096
#define BACKUPS_MAX 64
#define TTL_MAX_MS ((uint64_t)10 * 365 * 24 * HOUR_MS) /* ten years */

/* ------------------------------------------------------------------------
 * Extra checks of string values
 * ------------------------------------------------------------------------ */

static const char url_expected[] =
    "expected a URL: tcp://HOST:PORT, tls+tcp://HOST:PORT or ipc://PATH";

/* "scheme://rest" with a non-empty scheme of letters, digits, '+', '-', '.'. */
static const char *check_url(const char *v, char *why, size_t n)
{
	const char *sep = strstr(v, "://");
	if (sep == NULL || sep == v || sep[3] == 0)
		return url_expected;
	for (const char *p = v; p < sep; p++)
		if (!isalnum((unsigned char)*p) && *p != '+' && *p != '-' && *p != '.')
			return url_expected;
	return NULL;
}

static const char *check_url_or_empty(const char *v, char *why, size_t n)
{
	return v[0] == 0 ? NULL : check_url(v, why, n);
}

static const char *check_endpoint(const char *v, char *why, size_t n)
{
	if (strcmp(v, "auto") == 0 || strcmp(v, "none") == 0)
		return NULL;
	return check_url(v, why, n);
}

static const char *check_nonempty(const char *v, char *why, size_t n)
{
	return v[0] == 0 ? "expected a non-empty name" : NULL;
}

static const char *cache_spec(const char *spec, dg_cache_config *out, char *why,
    size_t n);

static const char *check_cache(const char *v, char *why, size_t n)
{
	dg_cache_config c;
	return cache_spec(v, &c, why, n);
}

/* ------------------------------------------------------------------------
 * The table
 * ------------------------------------------------------------------------ */

static const char *const log_levels[] = { "debug", "info", "warn", "error", NULL };
static const char *const partition_policies[] = { "majority", "none", NULL };

#define F(field) offsetof(dgnode_settings, field)

const dgnode_setting dgnode_settings_table[] = {
	{ "cluster-name", DGNODE_STRING, F(cluster_name), "datagrid", 0, 0, NULL,
	  "NAME", "Name of the cluster: a node joins only a cluster of its name.",
	  "dg_node_config.cluster_name", check_nonempty },
	{ "listen", DGNODE_STRING, F(listen), "tcp://127.0.0.1:47500", 0, 0, NULL,
	  "URL", "Where to listen for peers: tcp://HOST:PORT, tls+tcp://HOST:PORT "
	  "(TLS) or ipc://PATH; port 0 picks a free port.",
	  "dg_node_config.listen_url", check_url },
	{ "advertise", DGNODE_STRING, F(advertise), "", 0, 0, NULL,
	  "URL", "The address peers dial to reach this node; empty: the listen "
	  "address.", "dg_node_config.advertise_url (\"\": NULL)",
	  check_url_or_empty },
	{ "seed", DGNODE_LIST, F(seeds), "", 0, 0, NULL,
	  "URL", "A node to join the cluster through; repeatable; none: form a "
	  "cluster alone.", "dg_node_config.seeds, nseeds", check_url },
	{ "secret-file", DGNODE_STRING, F(secret_file), "", 0, 0, NULL,
	  "FILE", "File holding the cluster secret (one trailing newline "
	  "stripped); empty: the environment variable DG_CLUSTER_SECRET, and "
	  "without it no authentication.",
	  "dg_node_config.secret, secret_len (the file's bytes)", NULL },
	{ "tls-cert-key", DGNODE_STRING, F(tls_cert_key), "", 0, 0, NULL,
	  "FILE", "PEM certificate and private key of this node; with --tls-ca "
	  "and a tls+tcp:// listen URL, peers talk TLS.",
	  "dg_node_config.tls_cert_key_file (\"\": NULL)", NULL },
	{ "tls-ca", DGNODE_STRING, F(tls_ca), "", 0, 0, NULL,
	  "FILE", "PEM certificate of the CA that signs every node's "
	  "certificate.", "dg_node_config.tls_ca_file (\"\": NULL)", NULL },
	{ "failure-detection-timeout", DGNODE_DURATION, F(failure_timeout_ms),
	  "10000", 100, 600000, NULL, "DURATION", "A peer silent this long is "
	  "declared failed.", "dg_node_config.failure_timeout_ms", NULL },
	{ "heartbeat-interval", DGNODE_DURATION, F(heartbeat_ms), "0", 0, 600000,
	  NULL, "DURATION", "Time between heartbeats; 0: "
	  "failure-detection-timeout / 5.",
	  "dg_node_config.heartbeat_ms (0: failure_timeout_ms / 5)", NULL },
	{ "join-timeout", DGNODE_DURATION, F(join_timeout_ms), "10000", 100,
	  HOUR_MS, NULL, "DURATION", "Give up joining the cluster after this "
	  "long; while seeds of a cluster answer, keep asking up to this plus "
	  "the longer of twice this and twice the failure detection.",
	  "dg_node_config.join_timeout_ms", NULL },
	{ "request-timeout", DGNODE_DURATION, F(request_timeout_ms), "10000", 1,
	  HOUR_MS, NULL, "DURATION", "Bound of each cache operation and of the "
	  "hand-over when leaving.", "dg_node_config.request_timeout_ms", NULL },
	{ "tx-topology-timeout", DGNODE_DURATION, F(tx_topology_timeout_ms), "1000", 1,
	  HOUR_MS, NULL, "DURATION", "How long a topology change waits for the "
	  "transactions of the older topology; then those not yet prepared are "
	  "rolled back (a long transaction never freezes the cluster).",
	  "dg_node_config.tx_topology_timeout_ms", NULL },
	{ "tx-done-capacity", DGNODE_UINT, F(tx_done_capacity), "65536", 0,
	  1u << 28, NULL, "N", "Finished transactions remembered (each for 60 s: "
	  "late messages, recovery questions) in memory reserved and touched at "
	  "start, 56 bytes each; past it the memory grows (TX-DONE-GROW). Size "
	  "it to the transactions this node takes part in per minute.",
	  "dg_node_config.tx_done_capacity", NULL },
	{ "data-dir", DGNODE_STRING, F(data_dir), "", 0, 0, NULL,
	  "DIR", "Persistence directory; empty: none (caches with persistence "
	  "cannot be created).", "dg_node_config.data_dir (\"\": NULL)", NULL },
	{ "storage-map-size", DGNODE_SIZE, F(storage_map_size), "1g", MIB, TIB,
	  NULL, "SIZE", "Largest size of the persisted data (LMDB map size).",
	  "dg_node_config.storage_map_size", NULL },
	{ "storage-sync", DGNODE_BOOL, F(storage_sync), "true", 0, 0, NULL,
	  NULL, "Flush to disk at every commit; false (MDB_NOSYNC) is faster, "
	  "but a machine crash may lose the last acknowledged writes.",
	  "dg_node_config.storage_nosync (negated)", NULL },
	{ "encryption-key-file", DGNODE_STRING, F(encryption_key_file), "", 0, 0, NULL,
	  "FILE", "Encryption at rest: a file of 64 hex digits (openssl rand -hex "
	  "32), mode 0600: the master key that wraps one AES-256-GCM data key per "
	  "persistent cache; every record written is sealed.  Empty: none.",
	  "dg_node_config.encryption_key_file (\"\": NULL)", NULL },
	{ "storage-recover", DGNODE_BOOL, F(storage_recover), "false", 0, 0, NULL,
	  NULL, "When the store in data-dir fails its checks at start (a "
	  "truncated file, a record whose CRC-32C does not match, a damaged "
	  "tree), move it aside to data.mdb.damaged-TIME and start empty, "
	  "fetching this node's partitions from their backups; without it the "
	  "node refuses to start on a damaged store.",
	  "dg_node_config.storage_recover", NULL },
	{ "recv-max", DGNODE_SIZE, F(recv_max), "16m", MIB, GIB, NULL,
	  "SIZE", "Largest message accepted from a peer.",
	  "dg_node_config.recv_max", NULL },
	{ "reactor-spin-us", DGNODE_UINT, F(reactor_spin_us), "0", 0, 100000, NULL,
	  "N", "Microseconds the thread reading the peer connections polls for "
	  "more messages after it handled some and sent some (or while a call "
	  "waits), yielding its CPU, before it sleeps: a loaded node saves a "
	  "wake-up per message (on VMs whose idle CPUs halt, tens of "
	  "microseconds each); an idle node never spins. 0 (the default): "
	  "sleep at once; 50 is what the benchmarks measured.",
	  "dg_node_config.reactor_spin_us", NULL },
	{ "rebalance-batch", DGNODE_SIZE, F(rebalance_batch), "512k", 4 * KIB,
	  64 * MIB, NULL, "SIZE", "Bytes of entries per message of a partition's "
	  "entries (rebalancing, a new primary's catch-up, scan pages; one "
	  "larger entry alone); at most half of recv-max.", "dg_node_config.rebalance_batch_bytes", NULL },
	{ "rebalance-throttle", DGNODE_DURATION, F(rebalance_throttle_ms), "0", 0,
	  60000, NULL, "DURATION", "A new owner's pause after each rebalancing "
	  "batch of entries it receives, to spare its suppliers and the network while "
	  "partitions move; 0: none.", "dg_node_config.rebalance_throttle_ms",
	  NULL },
	{ "client", DGNODE_BOOL, F(client), "false", 0, 0, NULL,
	  NULL, "Run a client node: it joins the cluster but owns no "
	  "partitions.", "dg_node_config.client", NULL },
	{ "partition-policy", DGNODE_ENUM, F(partition_policy), "majority", 0, 0,
	  partition_policies, "POLICY", "What a node cut off from the majority "
	  "of the voting servers does. majority: it refuses every operation "
	  "(DG_ERR_SEGMENTED) until the network heals, and the majority goes "
	  "on — no acknowledged write is lost; two voting servers stop when "
	  "either is unreachable. none: every side goes on alone (unsafe: "
	  "writes are lost when the sides meet again).",
	  "dg_node_config.partition_policy", NULL },
	{ "admin-listen", DGNODE_STRING, F(admin_listen), "auto", 0, 0, NULL,
	  "URL", "Where dgctl connects: tcp://HOST:PORT (tls+tcp:// with the "
	  "node's TLS files; the cluster secret authenticates dgctl like a "
	  "peer); auto: the --listen scheme and host, port + 100 (0 stays 0); "
	  "none: no admin endpoint.", "dg_node_config.admin_url (none: NULL)",
	  check_endpoint },
	{ "http-listen", DGNODE_STRING, F(http_listen), "auto", 0, 0, NULL,
	  "URL", "Where Prometheus scrapes /metrics: http://HOST:PORT, or "
	  "https://HOST:PORT with the node's TLS files (required with them "
	  "unless --insecure); auto: the --listen host, port + 200 (0 stays 0), "
	  "https:// with tls+tcp://; none: no HTTP endpoint.",
	  "dg_node_config.http_url (none: NULL)", check_endpoint },
	{ "http-basic-auth-file", DGNODE_STRING, F(http_basic_auth_file), "", 0,
	  0, NULL, "FILE", "File holding user:password (one trailing newline "
	  "stripped): /metrics asks for HTTP basic auth with it (Prometheus "
	  "basic_auth); empty: none.", "dg_node_config.http_auth_basic", NULL },
	{ "http-bearer-token-file", DGNODE_STRING, F(http_bearer_token_file), "",
	  0, 0, NULL, "FILE", "File holding a token (one trailing newline "
	  "stripped): /metrics accepts \"Authorization: Bearer TOKEN\" "
	  "(Prometheus authorization); empty: none.",
	  "dg_node_config.http_auth_token", NULL },
	{ "http-max-connections", DGNODE_UINT, F(http_max_connections), "64", 1,
	  4096, NULL, "N", "Open HTTP connections at most; a new one past it "
	  "closes the one idle longest.", "dg_node_config.http_max_connections",
	  NULL },
	{ "http-idle-timeout", DGNODE_DURATION, F(http_idle_timeout_ms), "10000",
	  100, HOUR_MS, NULL, "DURATION", "An HTTP connection whose next "
	  "request has not arrived whole this long after its accept or its last "
	  "answer is closed.", "dg_node_config.http_idle_timeout_ms", NULL },
	{ "insecure", DGNODE_BOOL, F(insecure), "false", 0, 0, NULL, NULL,
	  "Allow what is open to anyone on the network: without a cluster "
	  "secret, listening (peers, admin, HTTP) on an address that is not "
	  "loopback; plain http:// metrics on a node with TLS files.",
	  "dg_node_config.insecure", NULL },
	{ "log-level", DGNODE_ENUM, F(log_level), "info", 0, 0, log_levels,
	  "LEVEL", "The least severe level logged, by dgnode and the library "
	  "alike (debug adds the transactions' TX-DEBUG lines).",
	  "dg_node_config.log_level (dg_log_configure)", NULL },
	{ "cache", DGNODE_LIST, F(caches), "", 0, 0, NULL,
	  "SPEC", "A cache to create at start (CACHE SPEC below); repeatable.",
	  "dg_cache_create after dg_node_start (dgnode_parse_cache_spec)",
	  check_cache },
};

const size_t dgnode_settings_count =
    sizeof(dgnode_settings_table) / sizeof(dgnode_settings_table[0]);

/* Parts of a cache spec after the name: the same row type, no field. */
static const char *const cache_modes[] = { "partitioned", "replicated", NULL };
static const char *const cache_syncs[] = { "full_sync", "primary_sync",
	"full_async", NULL };
static const char *const cache_atomicities[] = { "atomic", "transactional", NULL };

enum { PART_MODE, PART_BACKUPS, PART_SYNC, PART_ATOMICITY, PART_PARTITIONS,
	PART_READ_FROM_BACKUP, PART_PERSISTENCE, PART_TTL, PART__COUNT };

static const dgnode_setting cache_parts[PART__COUNT] = {
	[PART_MODE] = { "mode", DGNODE_ENUM, 0, "partitioned", 0, 0, cache_modes,
	    NULL, "Partitioned: each key on a primary and its backups; "
	    "replicated: on every node.", "dg_cache_config.mode", NULL },
	[PART_BACKUPS] = { "backups", DGNODE_UINT, 0, "0", 0, BACKUPS_MAX, NULL,
	    "N", "Backup copies of each partition (partitioned caches).",
	    "dg_cache_config.backups", NULL },
	[PART_SYNC] = { "sync", DGNODE_ENUM, 0, "full_sync", 0, 0, cache_syncs,
	    NULL, "A write returns once every copy applied it, once the primary "
	    "did, or once sent.", "dg_cache_config.write_sync", NULL },
	[PART_ATOMICITY] = { "atomicity", DGNODE_ENUM, 0, "atomic", 0, 0,
	    cache_atomicities, NULL, "Transactional caches take part in "
	    "transactions.", "dg_cache_config.atomicity", NULL },
	[PART_PARTITIONS] = { "partitions", DGNODE_UINT, 0, "1024", 1,
	    DG_PARTITIONS_MAX, NULL, "N", "Number of partitions.",
	    "dg_cache_config.partitions", NULL },
	[PART_READ_FROM_BACKUP] = { "read-from-backup", DGNODE_BOOL, 0, "true", 0,
	    0, NULL, NULL, "A node holding a backup copy reads it locally.",
	    "dg_cache_config.read_from_backup", NULL },
	[PART_PERSISTENCE] = { "persistence", DGNODE_BOOL, 0, "false", 0, 0, NULL,
	    NULL, "Persist the entries in --data-dir.",
	    "dg_cache_config.persistence", NULL },
	[PART_TTL] = { "ttl", DGNODE_DURATION, 0, "0", 0, TTL_MAX_MS, NULL,
	    "DURATION", "Entries expire after this long; 0: never.",
	    "dg_cache_config.ttl_ms", NULL },
};

const dgnode_setting *dgnode_setting_find(const char *name)
{
	for (size_t i = 0; i < dgnode_settings_count; i++)
		if (strcmp(dgnode_settings_table[i].name, name) == 0)
			return &dgnode_settings_table[i];
	return NULL;
}

const char *dgnode_log_level_name(int level)
{
	return level >= 0 && level <= DGNODE_LOG_ERROR ? log_levels[level] : "?";
}

/* ------------------------------------------------------------------------
 * Scalar values
 * ------------------------------------------------------------------------ */

/* Decimal digits (at least one) at s; false on overflow.  *end after them. */
static bool parse_digits(const char *s, uint64_t *v, const char **end)
{
	uint64_t x = 0;
	const char *p = s;
	if (!isdigit((unsigned char)*p))
		return false;
	for (; isdigit((unsigned char)*p); p++) {
		unsigned d = (unsigned)(*p - '0');
		if (x > (UINT64_MAX - d) / 10)
			return false;
		x = x * 10 + d;
	}
	*v = x;
	*end = p;
	return true;
}

static bool times(uint64_t v, uint64_t unit, uint64_t *out)
{
	if (v > UINT64_MAX / unit)
		return false;
	*out = v * unit;
	return true;
}

static bool parse_size(const char *s, uint64_t *out)
{
	static const struct { const char *sfx; uint64_t unit; } units[] = {
		{ "", 1 }, { "b", 1 },
		{ "k", KIB }, { "kb", KIB }, { "kib", KIB },
		{ "m", MIB }, { "mb", MIB }, { "mib", MIB },
		{ "g", GIB }, { "gb", GIB }, { "gib", GIB },
		{ "t", TIB }, { "tb", TIB }, { "tib", TIB },
	};
	uint64_t v;
	const char *end;
	if (!parse_digits(s, &v, &end))
		return false;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (strcasecmp(end, units[i].sfx) == 0)
			return times(v, units[i].unit, out);
	return false;
}

static bool parse_duration(const char *s, uint64_t *out)
{
	static const struct { const char *sfx; uint64_t unit; } units[] = {
		{ "", 1 }, { "ms", 1 }, { "s", 1000 }, { "m", 60000 }, { "h", HOUR_MS },
	};
	uint64_t v;
	const char *end;
	if (!parse_digits(s, &v, &end))
		return false;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (strcmp(end, units[i].sfx) == 0)
			return times(v, units[i].unit, out);
	return false;
}

static bool parse_bool(const char *s, bool *out)
{
	static const char *const yes[] = { "true", "yes", "on", "1" };
	static const char *const no[] = { "false", "no", "off", "0" };
	for (size_t i = 0; i < 4; i++) {
		if (strcasecmp(s, yes[i]) == 0) {
			*out = true;
			return true;
		}
		if (strcasecmp(s, no[i]) == 0) {
			*out = false;
			return true;
		}
	}
	return false;
}

/* Exact multiples of t, g, m, k print with that suffix: 1g, 512k. */
static const char *format_size(uint64_t v, char *buf, size_t n)
{
	static const struct { char sfx; uint64_t unit; } units[] = {
		{ 't', TIB }, { 'g', GIB }, { 'm', MIB }, { 'k', KIB },
	};
	for (size_t i = 0; i < 4; i++)
		if (v != 0 && v % units[i].unit == 0) {
			snprintf(buf, n, "%" PRIu64 "%c", v / units[i].unit, units[i].sfx);
			return buf;
		}
	snprintf(buf, n, "%" PRIu64, v);
	return buf;
}

/* "a, b, c" */
static void join_values(const char *const *values, const char *sep, char *buf,
    size_t n)
{
	size_t used = 0;
	buf[0] = 0;
	for (size_t i = 0; values[i] != NULL && used < n; i++) {
		int w = snprintf(buf + used, n - used, "%s%s", i ? sep : "", values[i]);
		if (w < 0)
			break;
		used += (size_t)w;
	}
}

/* What a scalar of st accepts, for messages: "expected ...". */
static const char *expectation(const dgnode_setting *st, char *buf, size_t n)
{
	char a[32], b[32], list[160];
	switch (st->type) {
	case DGNODE_BOOL:
		return "expected true or false";
	case DGNODE_UINT:
		snprintf(buf, n, "expected an integer in [%" PRIu64 ", %" PRIu64 "]",
		    st->min, st->max);
		return buf;
	case DGNODE_SIZE:
		snprintf(buf, n, "expected a size (bytes, or with suffix k, m, g, t) "
		    "in [%s, %s]", format_size(st->min, a, sizeof(a)),
		    format_size(st->max, b, sizeof(b)));
		return buf;
	case DGNODE_DURATION:
		snprintf(buf, n, "expected a duration in ms in [%" PRIu64 ", %" PRIu64
		    "]", st->min, st->max);
		return buf;
	case DGNODE_ENUM:
		join_values(st->values, ", ", list, sizeof(list));
		snprintf(buf, n, "expected one of %s", list);
		return buf;
	case DGNODE_STRING:
	case DGNODE_LIST:
		break;
	}
	return "expected a string";
}

/* A BOOL (0/1), ENUM (index) or number in range, from text. */
static bool parse_scalar(const dgnode_setting *st, const char *v, uint64_t *out)
{
	bool b;
	switch (st->type) {
	case DGNODE_BOOL:
		if (!parse_bool(v, &b))
			return false;
		*out = b;
		return true;
	case DGNODE_ENUM:
		for (uint64_t i = 0; st->values[i] != NULL; i++)
			if (strcmp(v, st->values[i]) == 0) {
				*out = i;
				return true;
			}
		return false;
	case DGNODE_UINT: {
		const char *end;
		if (!parse_digits(v, out, &end) || *end != 0)
			return false;
		break;
	}
	case DGNODE_SIZE:
		if (!parse_size(v, out))
			return false;
		break;
	case DGNODE_DURATION:
		if (!parse_duration(v, out))
			return false;
		break;
	case DGNODE_STRING:
	case DGNODE_LIST:
		return false;
	}
	return *out >= st->min && *out <= st->max;
}

/* ------------------------------------------------------------------------
 * Cache specs
 * ------------------------------------------------------------------------ */

static char *trim(char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	size_t n = strlen(s);
	while (n > 0 && isspace((unsigned char)s[n - 1]))
		s[--n] = 0;
	return s;
}

static void store_part(dg_cache_config *c, int part, uint64_t v)
{
	switch (part) {
	case PART_MODE: c->mode = (dg_cache_mode)v; break;
	case PART_BACKUPS: c->backups = (uint32_t)v; break;
	case PART_SYNC: c->write_sync = (dg_write_sync)v; break;
	case PART_ATOMICITY: c->atomicity = (dg_atomicity)v; break;
	case PART_PARTITIONS: c->partitions = (uint32_t)v; break;
	case PART_READ_FROM_BACKUP: c->read_from_backup = v != 0; break;
	case PART_PERSISTENCE: c->persistence = v != 0; break;
	case PART_TTL: c->ttl_ms = v; break;
	default: break;
	}
}

/* NULL when spec is good (and *out filled), else the message into why. */
static const char *cache_spec(const char *spec, dg_cache_config *out, char *why,
    size_t n)
{
	char buf[SPEC_MAX_BYTES], expect[192];
	unsigned seen = 0;

	if (strlen(spec) >= sizeof(buf)) {
		snprintf(why, n, "longer than %zu bytes", sizeof(buf) - 1);
		return why;
	}
	memcpy(buf, spec, strlen(spec) + 1);
	char *rest = buf;
	char *part = rest;
	rest = strchr(rest, ',');
	if (rest != NULL)
		*rest++ = 0;
	char *name = trim(part);
	if (name[0] == 0) {
		snprintf(why, n, "empty cache name (the name comes first)");
		return why;
	}
	if (strchr(name, '=') != NULL) {
		snprintf(why, n, "'%s': expected the cache name first", name);
		return why;
	}
	if (strlen(name) >= DG_CACHE_NAME_MAX) {
		snprintf(why, n, "name '%.20s...': longer than %d bytes", name,
		    DG_CACHE_NAME_MAX - 1);
		return why;
	}
	dg_cache_config_init(out, name);

	while (rest != NULL) {
		part = rest;
		rest = strchr(rest, ',');
		if (rest != NULL)
			*rest++ = 0;
		part = trim(part);
		char *eq = strchr(part, '=');
		if (part[0] == 0) {
			snprintf(why, n, "empty part between commas");
			return why;
		}
		if (eq == NULL) {
			snprintf(why, n, "'%s': expected key=value", part);
			return why;
		}
		*eq = 0;
		char *key = trim(part), *val = trim(eq + 1);
		int p = 0;
		while (p < PART__COUNT && strcmp(cache_parts[p].name, key) != 0)
			p++;
		if (p == PART__COUNT) {
			snprintf(why, n, "'%s': unknown part (expected mode, backups, "
			    "sync, atomicity, partitions, read-from-backup, "
			    "persistence or ttl)", key);
			return why;
		}
		if (seen & (1u << p)) {
			snprintf(why, n, "'%s': given twice", key);
			return why;
		}
		seen |= 1u << p;
		uint64_t v;
		if (!parse_scalar(&cache_parts[p], val, &v)) {
			snprintf(why, n, "%s=%s: %s", key, val,
			    expectation(&cache_parts[p], expect, sizeof(expect)));
			return why;
		}
		store_part(out, p, v);
	}
	return NULL;
}

int dgnode_parse_cache_spec(const char *spec, dg_cache_config *out, FILE *err)
{
	char why[512];
	const char *w = cache_spec(spec, out, why, sizeof(why));
	if (w == NULL)
		return DGNODE_OK;
	if (err != NULL)
		fprintf(err, "dgnode: --cache=%s: %s\n", spec, w);
	return DGNODE_USAGE;
}

/* ------------------------------------------------------------------------
 * Setting values
 * ------------------------------------------------------------------------ */

/* Where a value came from, for messages. */
typedef struct origin {
	const char *file;   /* NULL: the command line */
	unsigned line;
	const char *name;
	const char *value;
} origin;

static void report(FILE *err, const origin *o, const char *fmt, ...)
{
	va_list ap;
	if (err == NULL)
		return;
	if (o->file != NULL)
		fprintf(err, "dgnode: %s:%u: %s = %s: ", o->file, o->line, o->name,
		    o->value);
	else
		fprintf(err, "dgnode: --%s=%s: ", o->name, o->value);
	va_start(ap, fmt);
	vfprintf(err, fmt, ap);
	va_end(ap);
	fputc('\n', err);
}

/* A copy of v that s owns (freed by dgnode_settings_free). */
static const char *pool_strdup(dgnode_settings *s, const char *v)
{
	if (s->s_npool == s->s_cappool) {
		size_t cap = s->s_cappool ? 2 * s->s_cappool : 16;
		char **p = dgi_realloc(s->s_pool, cap * sizeof(*p));
		if (p == NULL)
			return NULL;
		s->s_pool = p;
		s->s_cappool = cap;
	}
	size_t len = strlen(v) + 1;
	char *c = dgi_alloc(len);
	if (c == NULL)
		return NULL;
	memcpy(c, v, len);
	s->s_pool[s->s_npool++] = c;
	return c;
}

static bool list_push(dgnode_list *l, const char *item)
{
	if (l->l_n == l->l_cap) {
		size_t cap = l->l_cap ? 2 * l->l_cap : 4;
		const char **p = dgi_realloc(l->l_items, cap * sizeof(*p));
		if (p == NULL)
			return false;
		l->l_items = p;
		l->l_cap = cap;
	}
	l->l_items[l->l_n++] = item;
	return true;
}

static int set_value(dgnode_settings *s, const dgnode_setting *st,
    const char *value, int source, const origin *o, FILE *err)
{
	void *field = (char *)s + st->offset;
	char why[512];
	const char *w, *copy;
	uint64_t v;

	switch (st->type) {
	case DGNODE_STRING:
		if (st->check != NULL && (w = st->check(value, why, sizeof(why))) != NULL) {
			report(err, o, "%s", w);
			return DGNODE_USAGE;
		}
		if ((copy = pool_strdup(s, value)) == NULL)
			goto nomem;
		*(const char **)field = copy;
		return DGNODE_OK;
	case DGNODE_LIST: {
		dgnode_list *l = field;
		if (l->l_source != source) {
			l->l_n = 0;
			l->l_source = source;
		}
		if (value[0] == 0) {          /* "seed =" clears the list */
			l->l_n = 0;
			return DGNODE_OK;
		}
		if (st->check != NULL && (w = st->check(value, why, sizeof(why))) != NULL) {
			report(err, o, "%s", w);
			return DGNODE_USAGE;
		}
		if ((copy = pool_strdup(s, value)) == NULL || !list_push(l, copy))
			goto nomem;
		return DGNODE_OK;
	}
	default:
		break;
	}
	if (!parse_scalar(st, value, &v)) {
		report(err, o, "%s", expectation(st, why, sizeof(why)));
		return DGNODE_USAGE;
	}
	if (st->type == DGNODE_BOOL)
		*(bool *)field = v != 0;
	else if (st->type == DGNODE_ENUM)
		*(int *)field = (int)v;
	else
		*(uint64_t *)field = v;
	return DGNODE_OK;
nomem:
	report(err, o, "out of memory");
	return DGNODE_USAGE;
}

void dgnode_settings_init(dgnode_settings *s)
{
	memset(s, 0, sizeof(*s));
	for (size_t i = 0; i < dgnode_settings_count; i++) {
		const dgnode_setting *st = &dgnode_settings_table[i];
		void *field = (char *)s + st->offset;
		uint64_t v = 0;
		switch (st->type) {
		case DGNODE_STRING:
			*(const char **)field = st->def;  /* static: not in the pool */
			break;
		case DGNODE_LIST:
			break;                            /* defaults are empty */
		default:
			/* The tests check that every default parses. */
			(void)parse_scalar(st, st->def, &v);
			if (st->type == DGNODE_BOOL)
				*(bool *)field = v != 0;
			else if (st->type == DGNODE_ENUM)
				*(int *)field = (int)v;
			else
				*(uint64_t *)field = v;
			break;
		}
	}
}

static void wipe(void *p, size_t n)
{
	volatile uint8_t *b = p;
	while (n-- > 0)
		*b++ = 0;
}

static void drop_secret(uint8_t **p, size_t *n)
{
	if (*p != NULL) {
		wipe(*p, *n);
		dgi_free(*p);
	}
	*p = NULL;
	*n = 0;
}

void dgnode_settings_free(dgnode_settings *s)
{
	for (size_t i = 0; i < s->s_npool; i++)
		dgi_free(s->s_pool[i]);
	dgi_free(s->s_pool);
	dgi_free(s->seeds.l_items);
	dgi_free(s->caches.l_items);
	drop_secret(&s->s_secret, &s->s_secret_len);
	drop_secret(&s->s_http_basic, &s->s_http_basic_len);
	drop_secret(&s->s_http_token, &s->s_http_token_len);
	dgnode_settings_init(s);
}

int dgnode_settings_set(dgnode_settings *s, const char *name, const char *value,
    FILE *err)
{
	const dgnode_setting *st = dgnode_setting_find(name);
	if (st == NULL) {
		if (err != NULL)
			fprintf(err, "dgnode: --%s: unknown setting (see --help)\n", name);
		return DGNODE_USAGE;
	}
	origin o = { NULL, 0, name, value };
	return set_value(s, st, value, SRC_ARGS, &o, err);
}

const char *dgnode_setting_format(const dgnode_settings *s,
    const dgnode_setting *st, char *buf, size_t n)
{
	const void *field = (const char *)s + st->offset;
	if (n == 0)
		return buf;
	buf[0] = 0;
	switch (st->type) {
	case DGNODE_STRING:
		snprintf(buf, n, "%s", *(const char *const *)field);
		break;
	case DGNODE_BOOL:
		snprintf(buf, n, "%s", *(const bool *)field ? "true" : "false");
		break;
	case DGNODE_UINT:
	case DGNODE_DURATION:
		snprintf(buf, n, "%" PRIu64, *(const uint64_t *)field);
		break;
	case DGNODE_SIZE:
		format_size(*(const uint64_t *)field, buf, n);
		break;
	case DGNODE_ENUM:
		snprintf(buf, n, "%s", st->values[*(const int *)field]);
		break;
	case DGNODE_LIST: {
		const dgnode_list *l = field;
		size_t used = 0;
		for (size_t i = 0; i < l->l_n && used < n; i++) {
			int w = snprintf(buf + used, n - used, "%s%s", i ? "; " : "",
			    l->l_items[i]);
			if (w < 0)
				break;
			used += (size_t)w;
		}
		break;
	}
	}
	return buf;
}

/* ------------------------------------------------------------------------
 * Config files
 * ------------------------------------------------------------------------ */

/* '#' at the start of the line or after whitespace starts a comment. */
static void strip_comment(char *line)
{
	for (size_t i = 0; line[i] != 0; i++)
		if (line[i] == '#' && (i == 0 || isspace((unsigned char)line[i - 1]))) {
			line[i] = 0;
			return;
		}
}

int dgnode_settings_load_file(dgnode_settings *s, const char *path, FILE *err)
{
	char line[LINE_MAX_BYTES];
	unsigned lineno = 0;
	int rc = DGNODE_OK;
	FILE *f = fopen(path, "r");

	if (f == NULL) {
		if (err != NULL)
			fprintf(err, "dgnode: %s: %s\n", path, strerror(errno));
		return DGNODE_USAGE;
	}
	while (rc == DGNODE_OK && fgets(line, sizeof(line), f) != NULL) {
		lineno++;
		size_t len = strlen(line);
		if (len == sizeof(line) - 1 && line[len - 1] != '\n' &&
		    fgetc(f) != EOF) {
			if (err != NULL)
				fprintf(err, "dgnode: %s:%u: line longer than %d bytes\n",
				    path, lineno, LINE_MAX_BYTES - 1);
			rc = DGNODE_USAGE;
			break;
		}
		strip_comment(line);
		char *p = trim(line);
		if (*p == 0)
			continue;
		char *eq = strchr(p, '=');
		if (eq == NULL) {
			if (err != NULL)
				fprintf(err, "dgnode: %s:%u: '%s': expected setting = value\n",
				    path, lineno, p);
			rc = DGNODE_USAGE;
			break;
		}
		*eq = 0;
		char *key = trim(p), *value = trim(eq + 1);
		const dgnode_setting *st = dgnode_setting_find(key);
		if (st == NULL) {
			if (err != NULL)
				fprintf(err, "dgnode: %s:%u: unknown setting '%s' (see "
				    "--help)\n", path, lineno, key);
			rc = DGNODE_USAGE;
			break;
		}
		origin o = { path, lineno, key, value };
		rc = set_value(s, st, value, SRC_FILE, &o, err);
	}
	if (rc == DGNODE_OK && ferror(f)) {
		if (err != NULL)
			fprintf(err, "dgnode: %s: read error\n", path);
		rc = DGNODE_USAGE;
	}
	fclose(f);
	return rc;
}

/* ------------------------------------------------------------------------
 * Command line
 * ------------------------------------------------------------------------ */

enum { OPT_HELP = 'h', OPT_CONFIG = 1000, OPT_VERSION, OPT_SET = 2000,
	OPT_NEGATE = 4000 };

/* The argv element getopt_long just consumed as an option (not its value). */
static const char *option_text(char **argv)
{
	if (optarg != NULL && optind >= 2 && optarg == argv[optind - 1])
		return argv[optind - 2];
	return argv[optind - 1];
}

/* getopt_long takes unique prefixes ("--fail"); only full names are ours. */
static bool spelled_out(const char *text, const char *name)
{
	if (strncmp(text, "--", 2) != 0)
		return false;
	size_t n = strcspn(text + 2, "=");
	return strlen(name) == n && strncmp(text + 2, name, n) == 0;
}

/* One getopt_long pass.  Phase 1: checks every option, loads the --config
 * files, handles --help and --version.  Phase 2: applies the settings. */
static int args_pass(dgnode_settings *s, int argc, char **argv,
    const struct option *opts, int phase, FILE *err)
{
	int c, idx = 0;

	opterr = 0;
	optind = 0;   /* glibc: 0 starts a fresh scan */
	while ((c = getopt_long(argc, argv, "+:h", opts, &idx)) != -1) {
		if (c == '?' || c == ':') {
			const char *text = argv[optind - 1];
			if (err == NULL)
				return DGNODE_USAGE;
			if (strncmp(text, "--", 2) != 0)
				fprintf(err, "dgnode: -%c: unknown option (see --help)\n",
				    optopt);
			else if (c == ':')
				fprintf(err, "dgnode: %s: expects a value\n", text);
			else if (optopt != 0)
				fprintf(err, "dgnode: %s: takes no value\n", text);
			else
				fprintf(err, "dgnode: %s: unknown option (see --help)\n",
				    text);
			return DGNODE_USAGE;
		}
		if (c != 'h' && !spelled_out(option_text(argv), opts[idx].name)) {
			const char *text = option_text(argv);
			if (err != NULL)
				fprintf(err, "dgnode: %.*s: unknown option (did you mean "
				    "--%s?)\n", (int)strcspn(text, "="), text,
				    opts[idx].name);
			return DGNODE_USAGE;
		}
		if (phase == 1) {
			if (c == OPT_HELP) {
				dgnode_settings_usage(stdout);
				return DGNODE_EXIT;
			}
			if (c == OPT_VERSION) {
				printf("%s\n", dg_version());
				return DGNODE_EXIT;
			}
			if (c == OPT_CONFIG) {
				int rc = dgnode_settings_load_file(s, optarg, err);
				if (rc != DGNODE_OK)
					return rc;
			}
			continue;
		}
		if (c >= OPT_SET && c < OPT_SET + (int)dgnode_settings_count) {
			const dgnode_setting *st = &dgnode_settings_table[c - OPT_SET];
			const char *value = optarg != NULL ? optarg : "true";
			origin o = { NULL, 0, st->name, value };
			int rc = set_value(s, st, value, SRC_ARGS, &o, err);
			if (rc != DGNODE_OK)
				return rc;
		} else if (c >= OPT_NEGATE && c < OPT_NEGATE + (int)dgnode_settings_count) {
			const dgnode_setting *st = &dgnode_settings_table[c - OPT_NEGATE];
			*(bool *)((char *)s + st->offset) = false;
		}
	}
	if (optind < argc) {
		if (err != NULL)
			fprintf(err, "dgnode: '%s': unexpected argument (settings are "
			    "--name=value)\n", argv[optind]);
		return DGNODE_USAGE;
	}
	return DGNODE_OK;
}

int dgnode_settings_parse_args(dgnode_settings *s, int argc, char **argv,
    FILE *err)
{
	size_t n = dgnode_settings_count, names = 0, k = 0;
	for (size_t i = 0; i < n; i++)
		if (dgnode_settings_table[i].type == DGNODE_BOOL)
			names += strlen(dgnode_settings_table[i].name) + 4;
	struct option *opts = dgi_calloc(2 * n + 4, sizeof(*opts));
	char *neg = dgi_alloc(names + 1), *next = neg;
	if (opts == NULL || neg == NULL) {
		dgi_free(opts);
		dgi_free(neg);
		if (err != NULL)
			fprintf(err, "dgnode: out of memory\n");
		return DGNODE_USAGE;
	}
	for (size_t i = 0; i < n; i++) {
		const dgnode_setting *st = &dgnode_settings_table[i];
		bool b = st->type == DGNODE_BOOL;
		opts[k++] = (struct option){ st->name,
			b ? optional_argument : required_argument, NULL, OPT_SET + (int)i };
		if (b) {
			size_t len = strlen(st->name) + 4;
			snprintf(next, len, "no-%s", st->name);
			opts[k++] = (struct option){ next, no_argument, NULL,
				OPT_NEGATE + (int)i };
			next += len;
		}
	}
	opts[k++] = (struct option){ "config", required_argument, NULL, OPT_CONFIG };
	opts[k++] = (struct option){ "help", no_argument, NULL, OPT_HELP };
	opts[k++] = (struct option){ "version", no_argument, NULL, OPT_VERSION };
	opts[k] = (struct option){ NULL, 0, NULL, 0 };

	int rc = args_pass(s, argc, argv, opts, 1, err);
	if (rc == DGNODE_OK)
		rc = args_pass(s, argc, argv, opts, 2, err);
	dgi_free(opts);
	dgi_free(neg);
	return rc;
}

/* ------------------------------------------------------------------------
 * Usage
 * ------------------------------------------------------------------------ */

#define USAGE_COL 34     /* where descriptions start */
#define USAGE_WIDTH 79

/* "  LEFT   text text ...", text word-wrapped at USAGE_WIDTH under USAGE_COL;
 * a LEFT too wide for the column gets a line of its own. */
static void usage_row(FILE *out, const char *left, const char *text)
{
	int pos = fprintf(out, "  %s", left);
	if (pos + 2 > USAGE_COL) {
		fputc('\n', out);
		pos = 0;
	}
	bool fresh = true;   /* nothing written on this line after the column */
	for (const char *p = text; *p != 0;) {
		while (*p == ' ')
			p++;
		int w = (int)strcspn(p, " ");
		if (w == 0)
			break;
		if (!fresh && pos + 1 + w > USAGE_WIDTH) {
			fputc('\n', out);
			pos = 0;
			fresh = true;
		}
		if (fresh) {
			fprintf(out, "%*s", USAGE_COL - pos, "");
			pos = USAGE_COL;
		} else {
			fputc(' ', out);
			pos++;
		}
		fprintf(out, "%.*s", w, p);
		pos += w;
		p += w;
		fresh = false;
	}
	fputc('\n', out);
}

/* The default and accepted values of a setting, for --help. */
static void describe(const dgnode_setting *st, bool values_shown, char *buf,
    size_t n)
{
	char a[32], b[32], list[160];
	buf[0] = 0;
	switch (st->type) {
	case DGNODE_STRING:
		if (st->def[0] != 0)
			snprintf(buf, n, "(default %s)", st->def);
		break;
	case DGNODE_BOOL:
		snprintf(buf, n, "(default %s)", st->def);
		break;
	case DGNODE_UINT:
		snprintf(buf, n, "(default %s; %" PRIu64 "..%" PRIu64 ")", st->def,
		    st->min, st->max);
		break;
	case DGNODE_SIZE:
		snprintf(buf, n, "(default %s; %s..%s)", st->def,
		    format_size(st->min, a, sizeof(a)), format_size(st->max, b,
		    sizeof(b)));
		break;
	case DGNODE_DURATION:
		snprintf(buf, n, "(default %s; %" PRIu64 "..%" PRIu64 " ms)", st->def,
		    st->min, st->max);
		break;
	case DGNODE_ENUM:
		join_values(st->values, ", ", list, sizeof(list));
		if (values_shown)
			snprintf(buf, n, "(default %s)", st->def);
		else
			snprintf(buf, n, "(default %s; one of %s)", st->def, list);
		break;
	case DGNODE_LIST:
		break;
	}
}

/* One --help row: LEFT, then help and describe()'s text. */
static void usage_setting(FILE *out, const char *left, const dgnode_setting *st,
    bool values_shown)
{
	char text[640], desc[256];
	describe(st, values_shown, desc, sizeof(desc));
	snprintf(text, sizeof(text), "%s%s%s", st->help, desc[0] ? " " : "", desc);
	usage_row(out, left, text);
}

void dgnode_settings_usage(FILE *out)
{
	char left[192], vals[96];

	fputs("usage: dgnode [--config FILE] [--SETTING=VALUE]...\n"
	    "       dgnode --help | --version\n"
	    "\n"
	    "Runs one datagrid node: joins the cluster through the seeds (or forms\n"
	    "one), creates the --cache caches, serves until SIGTERM or SIGINT, then\n"
	    "leaves the cluster gracefully.  Exit status: 0 after a graceful stop,\n"
	    "1 when the node cannot start, 2 on a usage error.\n"
	    "\n"
	    "Settings come from their defaults, then the --config files, then the\n"
	    "flags, whatever their order.  A config file has one 'setting = value'\n"
	    "per line and '#' comments.  Flags: --SETTING=VALUE or --SETTING VALUE;\n"
	    "bools also --SETTING and --no-SETTING.  Sizes take a k, m, g or t\n"
	    "suffix (powers of 1024); durations are ms, or take an ms, s, m or h\n"
	    "suffix.  Repeatable settings given as flags replace the file's list.\n"
	    "\n", out);
	usage_row(out, "--config FILE", "Load settings from FILE before the flags "
	    "(repeatable: in order).");
	usage_row(out, "--help, -h", "Print this text and exit.");
	usage_row(out, "--version", "Print the version and exit.");
	fputc('\n', out);
	for (size_t i = 0; i < dgnode_settings_count; i++) {
		const dgnode_setting *st = &dgnode_settings_table[i];
		if (st->type == DGNODE_BOOL)
			snprintf(left, sizeof(left), "--[no-]%s", st->name);
		else
			snprintf(left, sizeof(left), "--%s %s", st->name, st->metavar);
		usage_setting(out, left, st, false);
	}

	fputs("\nCACHE SPEC: --cache NAME[,PART]..., each PART at most once:\n", out);
	for (int p = 0; p < PART__COUNT; p++) {
		const dgnode_setting *st = &cache_parts[p];
		if (st->type == DGNODE_ENUM)
			join_values(st->values, "|", vals, sizeof(vals));
		else
			snprintf(vals, sizeof(vals), "%s",
			    st->type == DGNODE_BOOL ? "true|false" : st->metavar);
		snprintf(left, sizeof(left), "%s=%s", st->name, vals);
		usage_setting(out, left, st, true);
	}
	fputs("\nExample: --cache=users,backups=1,ttl=10m\n"
	    "\nThe cluster secret is read from --secret-file, else from the\n"
	    "environment variable DG_CLUSTER_SECRET; with neither, peers are not\n"
	    "authenticated.\n", out);
}

/* ------------------------------------------------------------------------
 * Validation and the node config
 * ------------------------------------------------------------------------ */

static int fail(FILE *err, const char *fmt, ...)
{
	va_list ap;
	if (err != NULL) {
		fputs("dgnode: ", err);
		va_start(ap, fmt);
		vfprintf(err, fmt, ap);
		va_end(ap);
		fputc('\n', err);
	}
	return DGNODE_USAGE;
}

/* Reads a small secret file: at most SECRET_MAX bytes, one trailing
 * newline (and CR) stripped, not empty.  *out is dgi_alloc'ed with a NUL
 * after its *n bytes (wipe it before freeing). */
static int read_secret_file(const char *opt, const char *path, uint8_t **out, size_t *n,
    FILE *err)
{
	FILE *f = fopen(path, "rb");
	if (f == NULL)
		return fail(err, "--%s=%s: %s", opt, path, strerror(errno));
	uint8_t *buf = dgi_alloc(SECRET_MAX + 2);
	if (buf == NULL) {
		fclose(f);
		return fail(err, "out of memory");
	}
	size_t len = fread(buf, 1, SECRET_MAX + 1, f);
	bool bad = ferror(f) != 0;
	fclose(f);
	const char *why = bad ? "read error" : len > SECRET_MAX ? "longer than 4096 bytes" : NULL;
	if (why == NULL) {
		if (len > 0 && buf[len - 1] == '\n')
			len--;
		if (len > 0 && buf[len - 1] == '\r')
			len--;
		if (len == 0)
			why = "empty file";
	}
	if (why != NULL) {
		wipe(buf, SECRET_MAX + 2);
		dgi_free(buf);
		return fail(err, "--%s=%s: %s", opt, path, why);
	}
	buf[len] = 0;
	*out = buf;
	*n = len;
	return DGNODE_OK;
}

static int load_secret(dgnode_settings *s, FILE *err)
{
	drop_secret(&s->s_secret, &s->s_secret_len);
	drop_secret(&s->s_http_basic, &s->s_http_basic_len);
	drop_secret(&s->s_http_token, &s->s_http_token_len);
	if (s->http_basic_auth_file[0] != 0) {
		if (read_secret_file("http-basic-auth-file", s->http_basic_auth_file,
		    &s->s_http_basic, &s->s_http_basic_len, err) != DGNODE_OK)
			return DGNODE_USAGE;
		if (strchr((char *)s->s_http_basic, ':') == NULL ||
		    strlen((char *)s->s_http_basic) != s->s_http_basic_len)
			return fail(err, "--http-basic-auth-file=%s: expected one line "
			    "user:password", s->http_basic_auth_file);
	}
	if (s->http_bearer_token_file[0] != 0) {
		if (read_secret_file("http-bearer-token-file", s->http_bearer_token_file,
		    &s->s_http_token, &s->s_http_token_len, err) != DGNODE_OK)
			return DGNODE_USAGE;
		for (size_t i = 0; i < s->s_http_token_len; i++)
			if (s->s_http_token[i] <= ' ' || s->s_http_token[i] >= 0x7f)
				return fail(err, "--http-bearer-token-file=%s: the token must "
				    "be printable ASCII without spaces", s->http_bearer_token_file);
	}
	if (s->secret_file[0] != 0)
		return read_secret_file("secret-file", s->secret_file, &s->s_secret,
		    &s->s_secret_len, err);
	const char *env = getenv("DG_CLUSTER_SECRET");
	if (env == NULL)
		return DGNODE_OK;
	size_t n = strlen(env);
	if (n == 0)
		return fail(err, "DG_CLUSTER_SECRET is set but empty");
	if ((s->s_secret = dgi_alloc(n)) == NULL)
		return fail(err, "out of memory");
	memcpy(s->s_secret, env, n);
	s->s_secret_len = n;
	return DGNODE_OK;
}

static int check_caches(const dgnode_settings *s, FILE *err)
{
	for (size_t i = 0; i < s->caches.l_n; i++) {
		dg_cache_config c, d;
		const char *spec = s->caches.l_items[i];
		if (dgnode_parse_cache_spec(spec, &c, err) != DGNODE_OK)
			return DGNODE_USAGE;
		if (c.persistence && s->data_dir[0] == 0)
			return fail(err, "--cache=%s: persistence=true needs --data-dir",
			    spec);
		for (size_t j = 0; j < i; j++)
			if (dgnode_parse_cache_spec(s->caches.l_items[j], &d, NULL) ==
			    DGNODE_OK && strcmp(c.name, d.name) == 0)
				return fail(err, "--cache=%s: cache '%s' given twice", spec,
				    c.name);
	}
	return DGNODE_OK;
}

static const char *or_null(const char *v)
{
	return v[0] == 0 ? NULL : v;
}

/* Resolves an endpoint setting into out: "none" -> "", "auto" -> scheme
 * (NULL: the listen URL's, tcp:// or tls+tcp://) + the host of the tcp:// or tls+tcp:// listen URL + its port + delta (port
 * 0 stays 0; an ipc:// listen URL gives 127.0.0.1, port 0), else the value
 * itself. */
static int endpoint(const char *v, const char *listen, unsigned delta,
    const char *scheme, char *out, size_t n, FILE *err)
{
	out[0] = 0;
	if (strcmp(v, "none") == 0)
		return DGNODE_OK;
	if (strcmp(v, "auto") != 0) {
		if ((size_t)snprintf(out, n, "%s", v) >= n)
			return fail(err, "%s: too long", v);
		return DGNODE_OK;
	}
	const char *h = strstr(listen, "://");
	const char *colon = h ? strrchr(h + 3, ':') : NULL;
	if (strncmp(listen, "ipc://", 6) == 0 || h == NULL || colon == NULL) {
		snprintf(out, n, "%s127.0.0.1:0", scheme ? scheme : "tcp://");
		return DGNODE_OK;
	}
	if (scheme == NULL)
		scheme = strncmp(listen, "tls+tcp://", 10) == 0 ? "tls+tcp://" : "tcp://";
	char *end;
	unsigned long port = strtoul(colon + 1, &end, 10);
	if (*end != 0 || port > 65535)
		return fail(err, "--listen=%s: no port to derive the admin and http "
		    "ports from; set them", listen);
	unsigned long p = port == 0 ? 0 : port + delta;
	if (p > 65535)
		return fail(err, "--listen=%s: port + %u is beyond 65535; set "
		    "--admin-listen and --http-listen", listen, delta);
	h += 3;
	if ((size_t)snprintf(out, n, "%s%.*s:%lu", scheme, (int)(colon - h), h, p) >= n)
		return fail(err, "--listen=%s: too long", listen);
	return DGNODE_OK;
}

int dgnode_settings_to_config(dgnode_settings *s, dg_node_config *cfg,
    FILE *err)
{
	bool tls_listen = strncmp(s->listen, "tls+tcp://", 10) == 0;
	bool cert = s->tls_cert_key[0] != 0, ca = s->tls_ca[0] != 0;

	if (cert != ca)
		return fail(err, "--tls-cert-key and --tls-ca go together: give both "
		    "or neither");
	if (tls_listen && !cert)
		return fail(err, "--listen=%s: tls+tcp:// needs --tls-cert-key and "
		    "--tls-ca", s->listen);
	if (cert && !tls_listen)
		return fail(err, "--listen=%s: --tls-cert-key and --tls-ca need a "
		    "tls+tcp:// listen URL", s->listen);
	if (s->heartbeat_ms != 0 && s->heartbeat_ms >= s->failure_timeout_ms)
		return fail(err, "--heartbeat-interval=%" PRIu64 ": must be below "
		    "--failure-detection-timeout (%" PRIu64 ")", s->heartbeat_ms,
		    s->failure_timeout_ms);
	if (s->rebalance_batch > s->recv_max / 2) {
		/* (a page holds a batch and may pass it by one entry, and its
		 * records and encoding: half the frame leaves room for them) */
		char a[32], b[32];
		return fail(err, "--rebalance-batch=%s: at most half of --recv-max (%s)",
		    format_size(s->rebalance_batch, a, sizeof(a)),
		    format_size(s->recv_max, b, sizeof(b)));
	}
	if ((uint64_t)(size_t)s->storage_map_size != s->storage_map_size ||
	    (uint64_t)(size_t)s->recv_max != s->recv_max)
		return fail(err, "--storage-map-size or --recv-max: too large for "
		    "this platform");
	if (check_caches(s, err) != DGNODE_OK || load_secret(s, err) != DGNODE_OK)
		return DGNODE_USAGE;

	dg_node_config_init(cfg);
	cfg->cluster_name = s->cluster_name;
	cfg->listen_url = s->listen;
	cfg->advertise_url = or_null(s->advertise);
	cfg->seeds = s->seeds.l_items;
	cfg->nseeds = s->seeds.l_n;
	cfg->secret = s->s_secret;
	cfg->secret_len = s->s_secret_len;
	cfg->tls_cert_key_file = or_null(s->tls_cert_key);
	cfg->tls_ca_file = or_null(s->tls_ca);
	cfg->failure_timeout_ms = (uint32_t)s->failure_timeout_ms;
	cfg->heartbeat_ms = (uint32_t)(s->heartbeat_ms != 0 ? s->heartbeat_ms :
	    s->failure_timeout_ms / 5);
	cfg->join_timeout_ms = (uint32_t)s->join_timeout_ms;
	cfg->request_timeout_ms = (uint32_t)s->request_timeout_ms;
	cfg->tx_topology_timeout_ms = (uint32_t)s->tx_topology_timeout_ms;
	cfg->tx_done_capacity = (uint32_t)s->tx_done_capacity;
	cfg->reactor_spin_us = (uint32_t)s->reactor_spin_us;
	cfg->data_dir = or_null(s->data_dir);
	cfg->storage_map_size = (size_t)s->storage_map_size;
	cfg->storage_nosync = !s->storage_sync;
	cfg->storage_recover = s->storage_recover;
	cfg->encryption_key_file = or_null(s->encryption_key_file);
	cfg->recv_max = (size_t)s->recv_max;
	cfg->rebalance_batch_bytes = (uint32_t)s->rebalance_batch;
	cfg->rebalance_throttle_ms = (uint32_t)s->rebalance_throttle_ms;
	cfg->client = s->client;
	cfg->partition_policy = s->partition_policy;
	if (endpoint(s->admin_listen, s->listen, 100, NULL, s->s_admin,
	    sizeof(s->s_admin), err) != DGNODE_OK ||
	    endpoint(s->http_listen, s->listen, 200, tls_listen ? "https://" : "http://", s->s_http,
	    sizeof(s->s_http), err) != DGNODE_OK)
		return DGNODE_USAGE;
	cfg->admin_url = s->s_admin[0] ? s->s_admin : NULL;
	cfg->http_url = s->s_http[0] ? s->s_http : NULL;
	cfg->http_auth_basic = (const char *)s->s_http_basic;
	cfg->http_auth_token = (const char *)s->s_http_token;
	cfg->http_max_connections = (uint32_t)s->http_max_connections;
	cfg->http_idle_timeout_ms = (uint32_t)s->http_idle_timeout_ms;
	cfg->insecure = s->insecure;
	return DGNODE_OK;
}
