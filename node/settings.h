/*
 * settings.h — dgnode's settings: one table drives the config file, the
 * command line, --help and validation.
 *
 * Every setting is one row of dgnode_settings_table (settings.c), in the
 * spirit of Valkey's static_configs[]: name, type, default, range or allowed
 * values, help text, the field of dgnode_settings that holds it and the
 * dg_node_config field (or other use) it ends up in.  Nothing about a
 * setting is written anywhere else: the parsers, the usage text, the
 * defaults and the range checks all read the row.
 *
 * Sources, lowest to highest: the table's defaults, then --config files
 * (in the order given), then the other flags — whatever their order on the
 * command line.  A list setting (seed, cache) given by a higher source
 * replaces the lower source's list; repeats within one source append; an
 * empty value clears the list.
 *
 * Config file: one "key = value" per line, key being the setting's name;
 * blank lines and comments ('#' at the start of a line, or after
 * whitespace) are skipped; values are taken verbatim after trimming
 * surrounding whitespace (no quoting).  Lines are at most 4095 bytes.
 *
 * Command line: --name=value or --name value; bools as --name (true),
 * --no-name (false) or --name=true|false; --config FILE; --help; --version.
 * Option names must be spelled out (no abbreviations).
 *
 * Value types: string; bool (true|false, yes|no, on|off, 1|0); uint
 * (decimal); size (bytes, or with suffix k, m, g, t — powers of 1024 — and
 * an optional trailing "b" or "ib"); duration (ms, or with suffix ms, s, m,
 * h); list (a string list, repeatable); enum (one of the listed names).
 *
 * Errors are written to the caller's FILE as one line naming the setting,
 * the value and what is accepted:
 *   dgnode: --failure-detection-timeout=abc: expected a duration in ms in [100, 600000]
 *   dgnode: node.conf:7: unknown setting 'listn'
 *
 * Memory: strings and lists of a dgnode_settings are owned by it (through
 * dgi_alloc) until dgnode_settings_free; dgnode_settings_init allocates
 * nothing.  Not thread-safe: parse at process start (the command-line parser
 * uses getopt_long, whose state is global).
 */
#ifndef DGNODE_SETTINGS_H
#define DGNODE_SETTINGS_H

#include "datagrid.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Return values of the parsers. */
#define DGNODE_OK 0     /* go on */
#define DGNODE_EXIT 1   /* --help or --version was printed on stdout: exit 0 */
#define DGNODE_USAGE 2  /* an error was written to err: exit 2 */

typedef enum dgnode_log_level {
	DGNODE_LOG_DEBUG = 0,
	DGNODE_LOG_INFO,
	DGNODE_LOG_WARN,
	DGNODE_LOG_ERROR,
} dgnode_log_level;

/* A repeatable string setting: items in the order given. */
typedef struct dgnode_list {
	const char **l_items;
	size_t l_n;
	size_t l_cap;
	int l_source;        /* the source that set it (private) */
} dgnode_list;

/* Values of every setting.  Strings are never NULL ("" = not set). */
typedef struct dgnode_settings {
	const char *cluster_name;
	const char *listen;
	const char *advertise;
	dgnode_list seeds;
	const char *secret_file;
	const char *tls_cert_key;
	const char *tls_ca;
	uint64_t failure_timeout_ms;
	uint64_t heartbeat_ms;           /* 0: failure_timeout_ms / 5 */
	uint64_t join_timeout_ms;
	uint64_t request_timeout_ms;
	uint64_t tx_topology_timeout_ms;
	uint64_t tx_done_capacity;
	uint64_t reactor_spin_us;
	const char *data_dir;
	uint64_t storage_map_size;
	bool storage_sync;
	bool storage_recover;
	const char *encryption_key_file;
	uint64_t recv_max;
	uint64_t rebalance_batch;
	uint64_t rebalance_throttle_ms;
	bool client;
	int partition_policy;            /* dg_partition_policy */
	const char *admin_listen;        /* "" or "none": no admin endpoint */
	const char *http_listen;         /* "" or "none": no /metrics */
	const char *http_basic_auth_file;  /* "user:password" */
	const char *http_bearer_token_file;
	uint64_t http_max_connections;
	uint64_t http_idle_timeout_ms;
	bool insecure;
	int log_level;                   /* dgnode_log_level */
	dgnode_list caches;              /* cache specs, validated when set */

	/* private */
	char **s_pool;                   /* every string this struct owns */
	size_t s_npool, s_cappool;
	uint8_t *s_secret;               /* loaded by dgnode_settings_to_config */
	size_t s_secret_len;
	uint8_t *s_http_basic, *s_http_token; /* NUL-terminated, loaded likewise */
	size_t s_http_basic_len, s_http_token_len;
	char s_admin[256], s_http[256];  /* resolved by dgnode_settings_to_config */
} dgnode_settings;

typedef enum dgnode_setting_type {
	DGNODE_STRING,
	DGNODE_BOOL,
	DGNODE_UINT,
	DGNODE_SIZE,
	DGNODE_DURATION,
	DGNODE_LIST,
	DGNODE_ENUM,
} dgnode_setting_type;

/* One row of the table. */
typedef struct dgnode_setting {
	const char *name;             /* kebab-case: --name, "name = value" */
	dgnode_setting_type type;
	size_t offset;                /* of the field in dgnode_settings: const
	                                 char * (STRING), bool, uint64_t (UINT,
	                                 SIZE, DURATION), dgnode_list, int (ENUM) */
	const char *def;              /* default in canonical form (what
	                                 dgnode_setting_format prints) */
	uint64_t min, max;            /* UINT, SIZE, DURATION: inclusive range */
	const char *const *values;    /* ENUM: names, NULL-terminated; the field
	                                 holds the index */
	const char *metavar;          /* the value's name in --help */
	const char *help;             /* one sentence */
	const char *target;           /* where the value goes */
	/* STRING and LIST items: an extra check.  Returns NULL when value is
	 * fine, else what is expected ("a URL like tcp://HOST:PORT"), static
	 * or written into why[n]. */
	const char *(*check)(const char *value, char *why, size_t n);
} dgnode_setting;

extern const dgnode_setting dgnode_settings_table[];
extern const size_t dgnode_settings_count;

/* The row of a setting, or NULL. */
const dgnode_setting *dgnode_setting_find(const char *name);

/* Fills every setting with the table's default.  Allocates nothing. */
void dgnode_settings_init(dgnode_settings *s);

/* Sets one setting from text, as a flag would (a list set by a file is
 * replaced; repeats append).  The message names the setting and the value.
 * DGNODE_OK or DGNODE_USAGE (message written to err). */
int dgnode_settings_set(dgnode_settings *s, const char *name, const char *value,
    FILE *err);

/* Reads a config file into s.  Stops at the first bad line: unknown key,
 * missing '=', bad value (the message names path:line and the key).
 * DGNODE_OK or DGNODE_USAGE. */
int dgnode_settings_load_file(dgnode_settings *s, const char *path, FILE *err);

/* Parses the command line (argv[0] is the program): loads the --config
 * files first, then applies the flags over them.  Prints usage (--help,
 * -h) or dg_version() (--version) on stdout and returns DGNODE_EXIT.
 * Uses getopt_long (glibc: resets it with optind = 0); does not reorder
 * argv.  DGNODE_OK, DGNODE_EXIT or DGNODE_USAGE. */
int dgnode_settings_parse_args(dgnode_settings *s, int argc, char **argv,
    FILE *err);

/* The --help text, generated from the table: every setting with its value
 * type, default and range or values, aligned. */
void dgnode_settings_usage(FILE *out);

/* The current value of one setting as canonical text into buf (lists:
 * items joined by "; ").  Returns buf; truncates to n. */
const char *dgnode_setting_format(const dgnode_settings *s,
    const dgnode_setting *st, char *buf, size_t n);

/* Checks the settings against each other (TLS files go in pairs, heartbeat
 * below the failure timeout, rebalance batch below recv-max, cache
 * persistence needs data-dir, cache names unique), reads the cluster
 * secret (secret-file, one trailing newline stripped; or, without one, the
 * environment variable DG_CLUSTER_SECRET) and fills cfg: it calls
 * dg_node_config_init(cfg) first, then sets every field a setting drives
 * (registry and on_event stay at their defaults: set them after).
 * cfg points into s (strings, seeds, secret): s must outlive cfg's use
 * (dg_node_start copies it).  DGNODE_OK or DGNODE_USAGE. */
int dgnode_settings_to_config(dgnode_settings *s, dg_node_config *cfg,
    FILE *err);

/* Parses a cache spec
 *   name[,mode=partitioned|replicated][,backups=N][,sync=full_sync|
 *   primary_sync|full_async][,atomicity=atomic|transactional]
 *   [,partitions=N][,read-from-backup=BOOL][,persistence=BOOL][,ttl=DURATION]
 * into *out, starting from dg_cache_config_init's defaults.  Parts are
 * separated by commas (spaces around them ignored); each at most once.
 * The message names the bad part: "dgnode: --cache=c,backups=x: backups=x:
 * expected an integer in [0, 64]".  DGNODE_OK or DGNODE_USAGE. */
int dgnode_parse_cache_spec(const char *spec, dg_cache_config *out, FILE *err);

/* Frees what s owns (and wipes the secret), leaving s at the defaults. */
void dgnode_settings_free(dgnode_settings *s);

/* The name of a log level ("info"). */
const char *dgnode_log_level_name(int level);

#endif /* DGNODE_SETTINGS_H */
