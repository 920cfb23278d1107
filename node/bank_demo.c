/* bank_demo.c — dgbank: the bank-transfer workload of the README's cluster
 * demo (node/cluster-demo.sh), a small client of a running cluster.
 *
 * A CLIENT node (dg_node_config.client: joins through --seed, owns no
 * partitions) over a TRANSACTIONAL cache (default "bank") holding accounts
 * "acct0".."acct<N-1>", each a decimal balance:
 *
 *   init    one tx: if no account exists, every account = B; if every
 *           account exists, nothing (idempotent); else an error
 *   run     --threads T threads, for --seconds S, move 1..10 between two
 *           random accounts: one PESSIMISTIC REPEATABLE_READ tx reads (and
 *           locks) both, the lower-numbered first, writes both, commits;
 *           a transfer that fails with DG_ERR_DEADLOCK, TX_CONFLICT,
 *           TX_ROLLED_BACK, TIMEOUT, NOT_READY, REMAP or a broken
 *           connection is retried after a short back-off; one line per
 *           second: committed tx/s, retries, errors
 *   total   one tx reads every account; prints the total and whether it
 *           is N*B; exit 1 when not
 *
 * Both writes of a transfer are in its tx, so the total is invariant
 * whatever fails (a commit is all or nothing, DG_ERR_TX_UNKNOWN included).
 * cluster-tests/bank.c is the checking version of this workload (records
 * of every transfer, audits, verification); this one only shows it.
 *
 * Exit status: 0 ok (total: balanced; run: some transfer committed), 1
 * failed, 2 usage error.  SIGINT
 * and SIGTERM stop a run early (the client leaves the cluster, then the
 * signal's default action ends the process).
 */
#define _POSIX_C_SOURCE 200809L
#include "datagrid.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_SEEDS 8
#define MAX_THREADS 64
#define MAX_AMOUNT 10
#define RETRY_BOUND_MS 30000    /* init and total: give up after this long */

static struct {
	const char *seeds[MAX_SEEDS];
	size_t nseeds;
	const char *cache, *cluster;
	unsigned accounts, threads, seconds;
	int64_t balance;
	uint32_t tx_timeout_ms, failure_ms;
} opt = { .cache = "bank", .accounts = 100, .threads = 4, .seconds = 20,
	  .balance = 1000, .tx_timeout_ms = 3000, .failure_ms = 10000 };

static dg_node *node;
static dg_cache *cache;
static volatile sig_atomic_t stop_sig;

static void on_signal(int sig) { stop_sig = sig; }

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

static uint64_t rnd(uint64_t *s)    /* xorshift64* */
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545f4914f6cdd1dull;
}

/* Errors after which the same transfer is tried again: the cluster was
 * busy or changing, nothing was written. */
static bool retryable(dg_err e)
{
	switch (e) {
	case DG_ERR_DEADLOCK: case DG_ERR_TX_CONFLICT: case DG_ERR_TX_ROLLED_BACK:
	case DG_ERR_TIMEOUT: case DG_ERR_NOT_READY: case DG_ERR_REMAP:
	case DG_ERR_CONN_BROKEN: case DG_ERR_UNREACHABLE: case DG_ERR_BUSY:
		return true;
	default:
		return false;
	}
}

static int acct_key(char *buf, unsigned i)
{
	return snprintf(buf, 24, "acct%u", i);
}

/* Reads account i in tx: DG_OK and *v, DG_ERR_NOT_FOUND, DG_ERR_RANGE
 * (not a decimal), or the tx's error. */
static dg_err get_balance(dg_tx *tx, unsigned i, dg_buf *b, int64_t *v)
{
	char key[24], num[32], *end;
	int kl = acct_key(key, i);
	dg_buf_reset(b);
	dg_err e = dg_tx_get(tx, cache, key, (size_t)kl, b);
	if (e != DG_OK)
		return e;
	if (b->len == 0 || b->len >= sizeof(num))
		return DG_ERR_RANGE;
	memcpy(num, b->data, b->len);
	num[b->len] = 0;
	errno = 0;
	*v = strtoll(num, &end, 10);
	return errno != 0 || *end != 0 ? DG_ERR_RANGE : DG_OK;
}

static dg_err put_balance(dg_tx *tx, unsigned i, int64_t v)
{
	char key[24], val[32];
	int kl = acct_key(key, i);
	int vl = snprintf(val, sizeof(val), "%" PRId64, v);
	return dg_tx_put(tx, cache, key, (size_t)kl, val, (size_t)vl);
}

/* ---- init and total: one tx over every account, retried ---- */

/* One attempt: reads every account; *found counts those present, *sum
 * their total; with write and none found, writes them all.  Commits. */
static dg_err scan_accounts(bool write, unsigned *found, int64_t *sum, dg_buf *b)
{
	dg_tx *tx;
	dg_err e = dg_tx_begin(node, DG_PESSIMISTIC, DG_REPEATABLE_READ, opt.tx_timeout_ms,
	    write ? "dgbank-init" : "dgbank-total", &tx);
	if (e != DG_OK)
		return e;
	*found = 0;
	*sum = 0;
	for (unsigned i = 0; i < opt.accounts; i++) {
		int64_t v;
		e = get_balance(tx, i, b, &v);
		if (e == DG_ERR_NOT_FOUND)
			continue;
		if (e != DG_OK) {
			dg_tx_rollback(tx);
			return e;
		}
		(*found)++;
		*sum += v;
	}
	if (write && *found == 0)
		for (unsigned i = 0; i < opt.accounts; i++)
			if ((e = put_balance(tx, i, opt.balance)) != DG_OK) {
				dg_tx_rollback(tx);
				return e;
			}
	return dg_tx_commit(tx);
}

static int cmd_scan(bool write)
{
	uint64_t end = now_ms() + RETRY_BOUND_MS;
	int64_t expect = opt.balance * (int64_t)opt.accounts, sum = 0;
	unsigned found = 0, attempts = 0;
	dg_buf b;
	dg_err e;
	dg_buf_init(&b);
	do {
		if (attempts++ > 0)
			sleep_ms(100);
		e = scan_accounts(write, &found, &sum, &b);
	} while (retryable(e) && now_ms() < end && !stop_sig);
	dg_buf_free(&b);
	if (e != DG_OK) {
		fprintf(stderr, "dgbank: %s: %s (%u attempts)\n", write ? "init" : "total",
		    dg_strerror(e), attempts);
		return 1;
	}
	if (write) {
		if (found == 0)
			printf("initialized %u accounts of %" PRId64 ": total %" PRId64 "\n",
			    opt.accounts, opt.balance, expect);
		else if (found == opt.accounts)
			printf("already initialized: %u accounts, total %" PRId64 "\n", found, sum);
		else
			fprintf(stderr, "dgbank: init: %u of %u accounts exist: another "
			    "--accounts?\n", found, opt.accounts);
		return found == 0 || found == opt.accounts ? 0 : 1;
	}
	bool ok = found == opt.accounts && sum == expect;
	printf("total %" PRId64 " over %u of %u accounts, expected %" PRId64 ": %s\n", sum,
	    found, opt.accounts, expect, ok ? "BALANCED" : "NOT BALANCED");
	return ok ? 0 : 1;
}

/* ---- run ---- */

static atomic_bool run_over;
static atomic_uint_fast64_t committed, retries, errors;

/* One transfer, retried until it commits, fails otherwise or the run ends. */
static void transfer(uint64_t *rs, dg_buf *b)
{
	unsigned from = (unsigned)(rnd(rs) % opt.accounts);
	unsigned to = (unsigned)(rnd(rs) % (opt.accounts - 1));
	to += to >= from;
	unsigned lo = from < to ? from : to, hi = from < to ? to : from;
	int64_t amt = 1 + (int64_t)(rnd(rs) % MAX_AMOUNT);
	for (unsigned backoff = 5; !atomic_load(&run_over); backoff *= 2) {
		dg_tx *tx;
		int64_t vlo = 0, vhi = 0;
		dg_err e = dg_tx_begin(node, DG_PESSIMISTIC, DG_REPEATABLE_READ, opt.tx_timeout_ms,
		    "dgbank-transfer", &tx);
		if (e == DG_OK) {
			/* locks in account order: transfers never deadlock each other */
			if ((e = get_balance(tx, lo, b, &vlo)) == DG_OK)
				e = get_balance(tx, hi, b, &vhi);
			int64_t *src = from == lo ? &vlo : &vhi, *dst = from == lo ? &vhi : &vlo;
			if (e == DG_OK && *src < amt) {
				dg_tx_rollback(tx);  /* too poor: not a transfer */
				return;
			}
			if (e == DG_OK && (e = put_balance(tx, from, *src - amt)) == DG_OK)
				e = put_balance(tx, to, *dst + amt);
			e = e == DG_OK ? dg_tx_commit(tx) : (dg_tx_rollback(tx), e);
		}
		if (e == DG_OK) {
			atomic_fetch_add(&committed, 1);
			return;
		}
		if (!retryable(e)) {
			if (atomic_fetch_add(&errors, 1) < 5)
				fprintf(stderr, "dgbank: transfer acct%u -> acct%u: %s\n", from, to,
				    dg_strerror(e));
			sleep_ms(50);
			return;
		}
		atomic_fetch_add(&retries, 1);
		sleep_ms(backoff + (unsigned)(rnd(rs) % backoff));
		if (backoff > 200)
			backoff = 200;
	}
}

static void *worker(void *arg)
{
	uint64_t rs = (uint64_t)(uintptr_t)arg * 0x9e3779b97f4a7c15ull ^ now_ms() ^ 1;
	dg_buf b;
	dg_buf_init(&b);
	while (!atomic_load(&run_over))
		transfer(&rs, &b);
	dg_buf_free(&b);
	return NULL;
}

static int cmd_run(void)
{
	pthread_t tids[MAX_THREADS];
	unsigned n = 0;
	for (; n < opt.threads; n++)
		if (pthread_create(&tids[n], NULL, worker, (void *)(uintptr_t)(n + 1)) != 0)
			break;
	if (n == 0) {
		fprintf(stderr, "dgbank: run: cannot start a thread\n");
		return 1;
	}
	uint64_t t0 = now_ms(), last_c = 0, last_r = 0, last_e = 0;
	for (unsigned s = 1; s <= opt.seconds && !stop_sig; s++) {
		while (now_ms() < t0 + 1000u * s && !stop_sig)
			sleep_ms(20);
		if (stop_sig)
			break;
		uint64_t c = atomic_load(&committed), r = atomic_load(&retries);
		uint64_t e = atomic_load(&errors);
		printf("[dgbank] %3us  %6" PRIu64 " tx/s  retries %4" PRIu64 "  errors %" PRIu64
		    "\n", s, c - last_c, r - last_r, e - last_e);
		fflush(stdout);
		last_c = c, last_r = r, last_e = e;
	}
	atomic_store(&run_over, true);
	for (unsigned i = 0; i < n; i++)
		pthread_join(tids[i], NULL);
	double secs = (double)(now_ms() - t0) / 1000.0;
	uint64_t c = atomic_load(&committed);
	printf("[dgbank] done: %" PRIu64 " transfers committed in %.1f s (%.0f tx/s), %"
	    PRIu64 " retries, %" PRIu64 " errors\n", c, secs, (double)c / secs,
	    atomic_load(&retries), atomic_load(&errors));
	fflush(stdout);
	return c > 0 ? 0 : 1;
}

/* ---- main ---- */

static void usage(FILE *f)
{
	fprintf(f,
	    "usage: dgbank [OPTIONS] init|total\n"
	    "       dgbank [OPTIONS] run [--seconds S] [--threads T]\n"
	    "A client node running a bank-transfer workload over a TRANSACTIONAL cache.\n"
	    "  init     accounts acct0..acct<N-1> = B in one tx (nothing if they exist)\n"
	    "  run      PESSIMISTIC REPEATABLE_READ transfers between random accounts,\n"
	    "           retried on deadlock, conflict, timeout, topology change; prints\n"
	    "           committed tx/s, retries and errors every second\n"
	    "  total    reads every account in one tx; exit 1 unless the total is N*B\n"
	    "Options:\n"
	    "  --seed URL          a server to join through (repeatable; default\n"
	    "                      tcp://127.0.0.1:47500)\n"
	    "  --cache NAME        the cache (default bank; it must exist)\n"
	    "  --accounts N        default 100 (2..100000)\n"
	    "  --balance B         each account's initial balance (default 1000)\n"
	    "  --seconds S         run: how long (default 20)\n"
	    "  --threads T         run: transfer threads (default 4, 1..%d)\n"
	    "  --tx-timeout MS     each transaction's timeout (default 3000)\n"
	    "  --failure-detection-timeout MS\n"
	    "                      the servers' value (default 10000)\n"
	    "  --cluster-name NAME default datagrid\n"
	    "The cluster secret, if any, comes from $DG_CLUSTER_SECRET.\n"
	    "Exit status: 0 ok, 1 failed (total: not balanced), 2 usage error.\n",
	    MAX_THREADS);
}

static bool num_arg(const char *name, const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno != 0 || end == s || *end != 0 || s[0] == '-' || v < lo || v > hi) {
		fprintf(stderr, "dgbank: --%s: expected %" PRIu64 "..%" PRIu64 ", not '%s'\n",
		    name, lo, hi, s);
		return false;
	}
	*out = v;
	return true;
}

static bool parse_args(int argc, char **argv, const char **cmd)
{
	static const struct option lo[] = {
		{ "seed", required_argument, NULL, 's' },
		{ "cache", required_argument, NULL, 'c' },
		{ "accounts", required_argument, NULL, 'a' },
		{ "balance", required_argument, NULL, 'b' },
		{ "seconds", required_argument, NULL, 'S' },
		{ "threads", required_argument, NULL, 't' },
		{ "tx-timeout", required_argument, NULL, 'T' },
		{ "failure-detection-timeout", required_argument, NULL, 'f' },
		{ "cluster-name", required_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;
	uint64_t v;
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		const char *name = "";
		for (const struct option *o = lo; o->name; o++)
			if (o->val == c)
				name = o->name;
		switch (c) {
		case 's':
			if (opt.nseeds == MAX_SEEDS)
				return fprintf(stderr, "dgbank: at most %d seeds\n", MAX_SEEDS), false;
			opt.seeds[opt.nseeds++] = optarg;
			break;
		case 'c': opt.cache = optarg; break;
		case 'n': opt.cluster = optarg; break;
		case 'h': usage(stdout); exit(0);
		case 'a': if (!num_arg(name, optarg, 2, 100000, &v)) return false;
			opt.accounts = (unsigned)v; break;
		case 'b': if (!num_arg(name, optarg, 1, 1000000000, &v)) return false;
			opt.balance = (int64_t)v; break;
		case 'S': if (!num_arg(name, optarg, 1, 86400, &v)) return false;
			opt.seconds = (unsigned)v; break;
		case 't': if (!num_arg(name, optarg, 1, MAX_THREADS, &v)) return false;
			opt.threads = (unsigned)v; break;
		case 'T': if (!num_arg(name, optarg, 100, 600000, &v)) return false;
			opt.tx_timeout_ms = (uint32_t)v; break;
		case 'f': if (!num_arg(name, optarg, 100, 600000, &v)) return false;
			opt.failure_ms = (uint32_t)v; break;
		default: usage(stderr); return false;
		}
	}
	if (optind != argc - 1 || (strcmp(argv[optind], "init") != 0 &&
	    strcmp(argv[optind], "run") != 0 && strcmp(argv[optind], "total") != 0)) {
		fprintf(stderr, "dgbank: one command: init, run or total (dgbank --help)\n");
		return false;
	}
	*cmd = argv[optind];
	if (opt.nseeds == 0)
		opt.seeds[opt.nseeds++] = "tcp://127.0.0.1:47500";
	return true;
}

int main(int argc, char **argv)
{
	const char *cmd;
	if (!parse_args(argc, argv, &cmd))
		return 2;
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	dg_node_config cfg;
	dg_node_config_init(&cfg);
	cfg.client = true;
	cfg.listen_url = "tcp://127.0.0.1:0";
	cfg.seeds = opt.seeds;
	cfg.nseeds = opt.nseeds;
	cfg.failure_timeout_ms = opt.failure_ms;
	if (opt.cluster)
		cfg.cluster_name = opt.cluster;
	const char *secret = getenv("DG_CLUSTER_SECRET");
	if (secret != NULL && secret[0] != 0) {
		cfg.secret = (const uint8_t *)secret;
		cfg.secret_len = strlen(secret);
	}
	dg_err e = dg_node_start(&cfg, &node);
	if (e != DG_OK) {
		fprintf(stderr, "dgbank: cannot join the cluster through %s: %s\n", opt.seeds[0],
		    dg_strerror(e));
		return 1;
	}
	/* the cache is known once the join's metadata arrived: wait for it */
	uint64_t end = now_ms() + 10000;
	while ((e = dg_cache_get_by_name(node, opt.cache, &cache)) == DG_ERR_NOT_FOUND &&
	    now_ms() < end && !stop_sig)
		sleep_ms(20);
	int rc = 1;
	if (e != DG_OK)
		fprintf(stderr, "dgbank: cache '%s': %s\n", opt.cache, dg_strerror(e));
	else if (strcmp(cmd, "run") == 0)
		rc = cmd_run();
	else
		rc = cmd_scan(strcmp(cmd, "init") == 0);
	dg_node_stop(node);
	if (stop_sig) {             /* die of it: the shell sees the interrupt */
		signal((int)stop_sig, SIG_DFL);
		raise((int)stop_sig);
	}
	return rc;
}
