/* dglinz.c — the linearizability checker's command line (linz.h).
 *
 *   dglinz [--max-states N] [--quiet] [--json] FILE...
 *
 * Merges the history files by time, checks every key as an independent
 * register and prints, for each key that is not linearizable or that the
 * search could not decide within --max-states, a line (and, unless
 * --quiet, what could not be linearised), then one summary line.  --json:
 * the same as one JSON object per line ("type": "key" or "summary").
 *
 * Exit status: 0 every key linearizable; 1 some key is not; 3 none is
 * not, but some undecided (budget exceeded); 2 usage, I/O or parse error.
 */
#define _GNU_SOURCE
#include "linz.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { EXIT_LINEARIZABLE = 0, EXIT_NOT_LINEARIZABLE = 1, EXIT_USAGE = 2, EXIT_UNKNOWN = 3 };

static void usage(FILE *f)
{
	fprintf(f,
	    "usage: dglinz [--max-states N] [--quiet] [--json] FILE...\n"
	    "\n"
	    "Checks that register histories are linearizable, key by key.  Each FILE\n"
	    "holds lines \"<t> <proc> <phase> <key> <op> [args...]\" (see\n"
	    "cluster-tests/linz.h); the files are merged by t.\n"
	    "\n"
	    "  --max-states N  memoised search states per key before its verdict is\n"
	    "                  \"unknown\" (default %u)\n"
	    "  --quiet         one line per failing key, without the anomaly's details\n"
	    "  --json          JSON objects, one per line, instead of text\n"
	    "  -h, --help      this text\n"
	    "\n"
	    "Exit status: 0 all keys linearizable, 1 some key not linearizable,\n"
	    "3 undecided (budget exceeded, none failed), 2 usage, I/O or parse error.\n",
	    LINZ_DEFAULT_MAX_STATES);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static bool parse_count(const char *s, uint64_t *out)
{
	if (*s < '0' || *s > '9')
		return false;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno != 0 || *end != '\0' || v == 0)
		return false;
	*out = v;
	return true;
}

/* ------------------------------------------------------------------------
 * JSON output (cJSON: one object per line)
 * ------------------------------------------------------------------------ */
static const char *const type_names[] = { "read", "write", "cas" };
static const char *const status_names[] = { "ok", "fail", "info" };

static cJSON *op_json(const linz_op *op)
{
	cJSON *o = cJSON_CreateObject();
	if (o == NULL)
		return NULL;
	cJSON_AddStringToObject(o, "proc", op->proc);
	cJSON_AddStringToObject(o, "op", type_names[op->type]);
	cJSON_AddStringToObject(o, "status", status_names[op->status]);
	if (op->type == LINZ_CAS) {
		cJSON_AddStringToObject(o, "expected", op->value);
		cJSON_AddStringToObject(o, "new", op->new_value);
		if (op->status == LINZ_STATUS_OK)
			cJSON_AddBoolToObject(o, "result", op->cas_result);
	} else if (op->type == LINZ_WRITE || op->status == LINZ_STATUS_OK) {
		cJSON_AddStringToObject(o, "value", op->value);
	}
	cJSON_AddNumberToObject(o, "invoke_ns", (double)op->invoke_ns);
	if (op->complete_ns == LINZ_NO_TIME)
		cJSON_AddNullToObject(o, "complete_ns");
	else
		cJSON_AddNumberToObject(o, "complete_ns", (double)op->complete_ns);
	cJSON_AddStringToObject(o, "file", op->file);
	cJSON_AddNumberToObject(o, "line", op->line);
	return o;
}

static void add_ops(cJSON *o, const char *name, const linz_op *ops, size_t n)
{
	cJSON *a = cJSON_AddArrayToObject(o, name);
	for (size_t i = 0; a != NULL && i < n; i++)
		cJSON_AddItemToArray(a, op_json(&ops[i]));
}

/* Prints o on one line and frees it; false: out of memory. */
static bool print_json(cJSON *o)
{
	char *s = o != NULL ? cJSON_PrintUnformatted(o) : NULL;
	cJSON_Delete(o);
	if (s == NULL)
		return false;
	puts(s);
	cJSON_free(s);
	return true;
}

static bool result_json(const linz_result *r, bool details)
{
	cJSON *o = cJSON_CreateObject();
	if (o == NULL)
		return false;
	cJSON_AddStringToObject(o, "type", "key");
	cJSON_AddStringToObject(o, "key", r->key_name);
	cJSON_AddStringToObject(o, "verdict", linz_verdict_name(r->verdict));
	cJSON_AddNumberToObject(o, "ops", (double)r->ops);
	cJSON_AddNumberToObject(o, "states", (double)r->states);
	cJSON_AddNumberToObject(o, "info_required", (double)r->info_required);
	cJSON_AddNumberToObject(o, "info_dropped", (double)r->info_dropped);
	cJSON_AddNumberToObject(o, "info_ghost", (double)r->info_ghost);
	if (r->verdict == LINZ_NOT_LINEARIZABLE) {
		cJSON_AddNumberToObject(o, "linearised", (double)r->depth);
		cJSON_AddStringToObject(o, "value", r->value);
		cJSON_AddNumberToObject(o, "stuck_total", (double)r->nstuck_total);
		if (details) {
			add_ops(o, "tail", r->tail, r->ntail);
			add_ops(o, "stuck", r->stuck, r->nstuck);
			if (r->blocking_valid)
				cJSON_AddItemToObject(o, "completed_first", op_json(&r->blocking_op));
		}
	}
	return print_json(o);
}

struct totals {
	size_t linearizable, not_linearizable, unknown;
};

static const char *overall(const struct totals *t)
{
	return t->not_linearizable ? "not-linearizable" : t->unknown ? "unknown" : "linearizable";
}

static bool summary(const linz_counts *c, const struct totals *t, double secs, bool json)
{
	if (!json) {
		printf("dglinz: keys=%zu ops=%" PRIu64 " ok=%" PRIu64 " fail=%" PRIu64
		    " info=%" PRIu64 " linearizable=%zu not-linearizable=%zu unknown=%zu"
		    " verdict=%s seconds=%.3f\n", c->keys, c->ops, c->ok, c->fail, c->info,
		    t->linearizable, t->not_linearizable, t->unknown, overall(t), secs);
		return true;
	}
	cJSON *o = cJSON_CreateObject();
	if (o == NULL)
		return false;
	cJSON_AddStringToObject(o, "type", "summary");
	cJSON_AddNumberToObject(o, "keys", (double)c->keys);
	cJSON_AddNumberToObject(o, "ops", (double)c->ops);
	cJSON_AddNumberToObject(o, "ok", (double)c->ok);
	cJSON_AddNumberToObject(o, "fail", (double)c->fail);
	cJSON_AddNumberToObject(o, "info", (double)c->info);
	cJSON_AddNumberToObject(o, "linearizable", (double)t->linearizable);
	cJSON_AddNumberToObject(o, "not_linearizable", (double)t->not_linearizable);
	cJSON_AddNumberToObject(o, "unknown", (double)t->unknown);
	cJSON_AddStringToObject(o, "verdict", overall(t));
	cJSON_AddNumberToObject(o, "seconds", secs);
	return print_json(o);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "max-states", required_argument, NULL, 'm' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	linz_config cfg;
	linz_config_init(&cfg);
	bool quiet = false, json = false;
	int c;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'm':
			if (!parse_count(optarg, &cfg.max_states)) {
				fprintf(stderr, "dglinz: --max-states wants a positive integer, not \"%s\"\n",
				    optarg);
				return EXIT_USAGE;
			}
			break;
		case 'q': quiet = true; break;
		case 'j': json = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return EXIT_USAGE;
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "dglinz: no history file\n");
		usage(stderr);
		return EXIT_USAGE;
	}

	double t0 = now_s();
	char err[512] = "";
	linz_history *h = NULL;
	linz_err rc = linz_history_create(&h);
	for (int i = optind; rc == LINZ_OK && i < argc; i++)
		rc = linz_history_add_file(h, argv[i], err, sizeof(err));
	if (rc == LINZ_OK)
		rc = linz_history_finish(h, err, sizeof(err));
	if (rc != LINZ_OK) {
		fprintf(stderr, "dglinz: %s\n", err[0] ? err : linz_strerror(rc));
		linz_history_destroy(h);
		return EXIT_USAGE;
	}

	struct totals t = { 0, 0, 0 };
	int status = EXIT_LINEARIZABLE;
	size_t nkeys = linz_history_nkeys(h);
	for (size_t k = 0; k < nkeys; k++) {
		linz_result *r;
		if ((rc = linz_check_key(h, k, &cfg, &r)) != LINZ_OK) {
			fprintf(stderr, "dglinz: key %s: %s\n", linz_history_key(h, k),
			    linz_strerror(rc));
			status = EXIT_USAGE;
			break;
		}
		switch (r->verdict) {
		case LINZ_LINEARIZABLE: t.linearizable++; break;
		case LINZ_NOT_LINEARIZABLE: t.not_linearizable++; break;
		case LINZ_UNKNOWN: t.unknown++; break;
		}
		if (r->verdict != LINZ_LINEARIZABLE) {
			if (json) {
				if (!result_json(r, !quiet))
					status = EXIT_USAGE;
			} else {
				linz_result_print(r, !quiet, stdout);
			}
		}
		linz_result_destroy(r);
		if (status == EXIT_USAGE)
			break;
	}
	if (status != EXIT_USAGE) {
		linz_counts counts;
		linz_history_counts(h, &counts);
		if (!summary(&counts, &t, now_s() - t0, json))
			status = EXIT_USAGE;
		else if (t.not_linearizable)
			status = EXIT_NOT_LINEARIZABLE;
		else if (t.unknown)
			status = EXIT_UNKNOWN;
	}
	if (status == EXIT_USAGE && rc == LINZ_OK)
		fprintf(stderr, "dglinz: out of memory\n");
	linz_history_destroy(h);
	if (fflush(stdout) != 0) {
		fprintf(stderr, "dglinz: cannot write the output\n");
		return EXIT_USAGE;
	}
	return status;
}
