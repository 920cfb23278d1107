/* settings_fuzz.c — libFuzzer target for dgnode's config-file parser
 * (node/settings.h): dgnode_settings_load_file over the input as a file,
 * then, when it loads, dgnode_settings_to_config (cross-checks, cache
 * specs, the secret and HTTP credential files, endpoints).  A config file
 * is not a peer's input, but it is the operator's, often templated, and a
 * node must refuse a bad one with a message, never crash on it.
 *
 * load_file takes a path, so each input is written to one file in a
 * directory made at start-up (under $TMPDIR, else /dev/shm or /tmp;
 * removed at exit).
 * The files a config names and to_config reads (secret-file,
 * http-basic-auth-file, http-bearer-token-file) are mapped onto files of
 * that directory (a good one, an empty one, one too long, one without the
 * colon or with a space, one missing), picked by the length of the path
 * given: the fuzzer must not make the parser open /dev/stdin, a FIFO or
 * another process's files.
 *
 * A bug: any crash, sanitizer report or leak (every run starts with
 * dgnode_settings_init and ends with dgnode_settings_free), and these
 * invariants (abort):
 *   - a loaded config's every setting, as dgnode_setting_format writes it,
 *     is accepted by dgnode_settings_set and formats the same again (list
 *     settings item by item) — one table drives parsing and printing;
 *   - every cache spec a loaded config holds parses (they are validated
 *     when set);
 *   - a config that to_config accepts gives the node the values parsed. */
#include "fuzz_check.h"
#include "node/settings.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[4096];
static char conf[4200];
static FILE *devnull;

/* What a config's file settings are mapped onto. */
static const struct {
	const char *name;
	const char *text;
	size_t len;
} files[] = {
	{ "secret", "a-cluster-secret-0123456789\n", 28 },
	{ "basic", "scraper:pass word\r\n", 19 },
	{ "token", "Zm9vYmFy.token-1\n", 17 },
	{ "empty", "", 0 },
	{ "nocolon", "justuser\n", 9 },
	{ "nul", "user:pa\0ss\n", 11 },
	{ "big", NULL, 4097 },
	{ "missing", NULL, 0 },
};
#define NFILES (sizeof(files) / sizeof(files[0]))
static char paths[NFILES][4300];

static void write_file(const char *path, const void *p, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0 || (n > 0 && write(fd, p, n) != (ssize_t)n) || close(fd) != 0) {
		perror(path);
		abort();
	}
}

static void cleanup(void)
{
	unlink(conf);
	for (size_t i = 0; i < NFILES; i++)
		unlink(paths[i]);
	rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	/* memory-backed when there is one: a rewrite per run on a disk file
	 * system costs five times the parse */
	const char *tmp = getenv("TMPDIR");
	if (tmp == NULL || tmp[0] == 0)
		tmp = access("/dev/shm", W_OK | X_OK) == 0 ? "/dev/shm" : "/tmp";
	snprintf(dir, sizeof(dir), "%s/dg-settings-fuzz-XXXXXX", tmp);
	if (mkdtemp(dir) == NULL) {
		perror(dir);
		abort();
	}
	snprintf(conf, sizeof(conf), "%s/node.conf", dir);
	for (size_t i = 0; i < NFILES; i++) {
		snprintf(paths[i], sizeof(paths[i]), "%s/%s", dir, files[i].name);
		if (strcmp(files[i].name, "big") == 0) {
			char big[4097];
			memset(big, 's', sizeof(big));
			write_file(paths[i], big, sizeof(big));
		} else if (files[i].text != NULL) {
			write_file(paths[i], files[i].text, files[i].len);
		}
	}
	atexit(cleanup);
	/* the secret comes from the config's files only, run after run */
	unsetenv("DG_CLUSTER_SECRET");
	if ((devnull = fopen("/dev/null", "w")) == NULL)
		abort();
	return 0;
}

/* Every setting printed, set again from that text on a fresh struct, and
 * printed the same. */
static void reformat(const dgnode_settings *s)
{
	static char a[16384], b[16384];
	dgnode_settings t;
	dgnode_settings_init(&t);
	for (size_t i = 0; i < dgnode_settings_count; i++) {
		const dgnode_setting *st = &dgnode_settings_table[i];
		if (st->type == DGNODE_LIST) {
			const dgnode_list *l = (const dgnode_list *)(const void *)
			    ((const char *)s + st->offset);
			for (size_t k = 0; k < l->l_n; k++)
				CHECK(dgnode_settings_set(&t, st->name, l->l_items[k], devnull) ==
				    DGNODE_OK);
			const dgnode_list *m = (const dgnode_list *)(const void *)
			    ((const char *)&t + st->offset);
			CHECK(m->l_n == l->l_n);
			for (size_t k = 0; k < l->l_n; k++)
				CHECK(strcmp(m->l_items[k], l->l_items[k]) == 0);
			continue;
		}
		dgnode_setting_format(s, st, a, sizeof(a));
		CHECK(strlen(a) < sizeof(a) - 1);
		CHECK(dgnode_settings_set(&t, st->name, a, devnull) == DGNODE_OK);
		dgnode_setting_format(&t, st, b, sizeof(b));
		CHECK(strcmp(a, b) == 0);
	}
	dgnode_settings_free(&t);
}

/* A file setting given: one of ours instead, by the length of the path. */
static void sandbox(const char **path)
{
	if ((*path)[0] != 0)
		*path = paths[strlen(*path) % NFILES];
}

static void to_config(dgnode_settings *s)
{
	dg_node_config cfg;
	sandbox(&s->secret_file);
	sandbox(&s->http_basic_auth_file);
	sandbox(&s->http_bearer_token_file);
	if (dgnode_settings_to_config(s, &cfg, devnull) != DGNODE_OK)
		return;
	CHECK(cfg.cluster_name == s->cluster_name && cfg.listen_url == s->listen);
	CHECK(cfg.nseeds == s->seeds.l_n && cfg.recv_max == s->recv_max);
	CHECK((cfg.secret == NULL) == (s->secret_file[0] == 0));
	CHECK(cfg.heartbeat_ms < cfg.failure_timeout_ms || cfg.heartbeat_ms == 0);
	CHECK(cfg.rebalance_batch_bytes < cfg.recv_max);
	if (cfg.http_auth_basic != NULL)
		CHECK(strchr(cfg.http_auth_basic, ':') != NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	dgnode_settings s;
	write_file(conf, data, size);
	dgnode_settings_init(&s);
	if (dgnode_settings_load_file(&s, conf, devnull) == DGNODE_OK) {
		reformat(&s);
		for (size_t i = 0; i < s.caches.l_n; i++) {
			dg_cache_config cc;
			CHECK(dgnode_parse_cache_spec(s.caches.l_items[i], &cc, NULL) == DGNODE_OK);
		}
		to_config(&s);
	}
	dgnode_settings_free(&s);
	return 0;
}
