/*
 * dgbench — datagrid's benchmark program (DESIGN.md, "Benchmarks").
 *
 *   dgbench SUITE [--json] [--quick] [--case=NAME] [--impl=NAME]
 *
 * Runs one suite; each suite measures datagrid and, in the same invocation
 * on the same data, the peers that were found at configure time.  Human
 * output is an aligned table on stdout; --json prints one JSON object per
 * line and per (case, implementation) on stdout, and nothing else there.
 * Notes, ratios and the result checksum go to stderr.
 *
 * A suite is one file, bench/<suite>_bench.c, with one entry point listed
 * in the table below.  Benchmarks are not tests: nothing here asserts on
 * timings (the ctest smoke run only checks that the JSON lines parse).
 */
#include "harness.h"

#include <stdio.h>
#include <string.h>

/* transport_bench.c: its latency and throughput lines (p50_us, p99_us,
 * ops_per_s) do not fit the harness's ns_per_op rows, so it prints them
 * itself and counts them here. */
int dgb_transport_suite(const dgb_opts *o);
int dgb_cache_suite(const dgb_opts *o); /* cache_bench.c: the same */
int dgb_txn_suite(const dgb_opts *o);   /* txn_bench.c: the same */
int dgb_admin_suite(const dgb_opts *o); /* admin_bench.c: the same */
unsigned dgb_own_lines;

static const struct suite {
	const char *name;
	int (*run)(const dgb_opts *o);
	const char *what;
} suites[] = {
	{ "marshal", dgb_marshal_suite,
	  "codec round trips vs msgpack-c and protobuf-c" },
	{ "transport", dgb_transport_suite,
	  "node-to-node messages, two processes: vs nng req/rep and plain TCP" },
	{ "cache", dgb_cache_suite,
	  "cache puts and gets: embedded vs LMDB and a minimal hash table (10k and\n"
	  "             1M keys, memory per entry); FULL_SYNC puts (1-128 clients)\n"
	  "             and 100-key batches, 3 dgnodes vs Redis" },
	{ "txn", dgb_txn_suite,
	  "2-key transfers in transactions, 3 dgnodes vs Redis MULTI/EXEC + WAIT" },
	{ "admin", dgb_admin_suite,
	  "/metrics text and scrapes, dgctl round trips; cache load under admin work" },
};
#define NSUITES (sizeof suites / sizeof suites[0])

static void usage(FILE *f)
{
	fprintf(f,
	    "usage: dgbench SUITE [--json] [--quick] [--case=NAME] [--impl=NAME]"
	    " [--dgnode PATH] [--help]\n"
	    "\n"
	    "  --json   one JSON object per line per case and implementation:\n"
	    "           {\"suite\":..,\"case\":..,\"impl\":..,\"ns_per_op\":..,"
	    "\"bytes\":..,\"allocs_per_op\":..}\n"
	    "           (transport, cache, txn and admin add ops_per_s, p50_us,\n"
	    "           p99_us where they apply; txn also heap_bytes_per_op, retries,\n"
	    "           failed; cache's batch cases heap_bytes_per_op)\n"
	    "  --quick  ~20 ms x 3 repetitions per case instead of ~100 ms x 5\n"
	    "  --case=NAME, --impl=NAME\n"
	    "           only that case / implementation (for profiling); NAME is a\n"
	    "           shell pattern: --case='embedded_*'\n"
	    "  --dgnode PATH\n"
	    "           the dgnode binary the cache, txn and admin suites start (else\n"
	    "           $DG_DGNODE, else next to dgbench: ./dgnode, ../node/dgnode)\n"
	    "  --help   this text\n"
	    "\n"
	    "ns_per_op is the best repetition (CLOCK_MONOTONIC); allocs_per_op\n"
	    "counts heap allocations over all timed repetitions (datagrid: its\n"
	    "counting allocator; peers: malloc/calloc/realloc calls).\n"
	    "\n"
	    "suites:\n");
	for (size_t i = 0; i < NSUITES; i++)
		fprintf(f, "  %-10s %s\n", suites[i].name, suites[i].what);
}

int main(int argc, char **argv)
{
	dgb_opts o = { false, false, NULL, NULL, NULL };
	const struct suite *s = NULL;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "--json") == 0) {
			o.json = true;
		} else if (strcmp(a, "--quick") == 0) {
			o.quick = true;
		} else if (strncmp(a, "--case=", 7) == 0) {
			o.only_case = a + 7;
		} else if (strncmp(a, "--impl=", 7) == 0) {
			o.only_impl = a + 7;
		} else if (strncmp(a, "--dgnode=", 9) == 0) {
			o.dgnode = a + 9;
		} else if (strcmp(a, "--dgnode") == 0) {
			if (i + 1 >= argc) {
				fprintf(stderr, "dgbench: --dgnode needs a PATH\n");
				return 2;
			}
			o.dgnode = argv[++i];
		} else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			usage(stdout);
			return 0;
		} else if (a[0] == '-') {
			fprintf(stderr, "dgbench: unknown option '%s'\n", a);
			usage(stderr);
			return 2;
		} else if (s != NULL) {
			fprintf(stderr, "dgbench: one suite at a time ('%s')\n", a);
			return 2;
		} else {
			for (size_t k = 0; k < NSUITES; k++)
				if (strcmp(a, suites[k].name) == 0)
					s = &suites[k];
			if (s == NULL) {
				fprintf(stderr, "dgbench: unknown suite '%s'\n", a);
				usage(stderr);
				return 2;
			}
		}
	}
	if (s == NULL) {
		usage(stderr);
		return 2;
	}
	int rc = s->run(&o);
	if (rc == 0 && dgb_measured() == 0 && dgb_own_lines == 0) {
		fprintf(stderr, "dgbench: no case of suite '%s' matches --case/--impl\n",
		    s->name);
		return 2;
	}
	dgb_note("checksum %016llx", (unsigned long long)dgb_checksum());
	return rc;
}
