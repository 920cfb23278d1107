/* cacheclient.c — a cache client process for the cluster tests.
 *
 * Starts an embedded CLIENT node (dg_node_config.client: it joins the
 * cluster through the seeds but owns no partitions), waits until the cache
 * named by --cache is known to it, runs one command against that cache,
 * leaves the cluster (dg_node_stop) and exits:
 *
 *   put --count N [--round R]   puts "k<i>" = "v<i>-r<R>" for i in 0..N-1
 *                               (R default 1) from --threads threads; prints
 *                               "acked <n> of <N> ..." with the throughput;
 *                               exit 0 only when every put returned DG_OK
 *   verify --count N --round R  gets every "k<i>" and checks it is
 *                               "v<i>-r<R>"; prints the first 10 missing,
 *                               wrong or failed keys and "verified ..."
 *                               counts; exit 0 only when all N match
 *   size                        prints "size <n>" (dg_cache_size)
 *   tx-hold --key K [--duration S] [--label L] [--timeout-ms MS]
 *                               begins a PESSIMISTIC REPEATABLE_READ tx,
 *                               puts K in it, prints "HOLDING key=K" and
 *                               keeps it open (a tx get of K every 100 ms
 *                               notices a `dgctl tx kill`) until S seconds
 *                               passed (then commits) or SIGTERM (then
 *                               commits); prints "tx-hold result=<error>";
 *                               exit 0 when it committed
 *   bank-init, bank-run, bank-verify
 *                               the bank workload over a TRANSACTIONAL
 *                               cache (bank.h, bank.c): transfers between
 *                               accounts whose total must never change
 *   register-run, register-read-all
 *                               the register workload (register.h,
 *                               register.c): reads, writes and
 *                               compare-and-sets logged to a history that
 *                               a linearizability checker judges
 *
 * Exit status: 0 success, 1 a failed command (or the node cannot start, or
 * the cache never shows up), 2 a usage error.  Result lines go to stdout;
 * the library's logs and error messages to stderr.  The cluster secret
 * comes from --secret-file, else DG_CLUSTER_SECRET (as dgnode), never the
 * command line.
 */
#define _POSIX_C_SOURCE 200809L
#include "datagrid.h"
#include "bank.h"
#include "register.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_SEEDS 64
#define MAX_THREADS 64
#define BATCH_MAX 1000            /* --batch */
#define SECRET_MAX 4096
#define REPORT_MAX 10 /* problems printed per command */

static void usage(FILE *f)
{
	fprintf(f,
	    "usage: cacheclient --seed URL --cache NAME [options] put --count N [--round R]\n"
	    "       cacheclient --seed URL --cache NAME [options] verify --count N --round R\n"
	    "       cacheclient --seed URL --cache NAME [options] size\n"
	    "       cacheclient --seed URL --cache NAME [options] tx-hold --key K\n"
	    "                   [--duration S] [--label L]\n"
	    "       cacheclient --seed URL --cache NAME [options] bank-init\n"
	    "       cacheclient --seed URL --cache NAME [options] bank-run --duration S\n"
	    "                   --mode pess-rr|opt-ser --client-id ID [--ok-log PATH]\n"
	    "                   [--fail-log PATH]\n"
	    "       cacheclient --seed URL --cache NAME [options] bank-verify\n"
	    "                   [--ok-log PATH]... [--fail-log PATH]...\n"
	    "       cacheclient --seed URL --cache NAME [options] register-run --duration S\n"
	    "                   --client-id ID --history PATH\n"
	    "       cacheclient --seed URL --cache NAME [options] register-read-all\n"
	    "                   --history PATH\n"
	    "A datagrid client node for the cluster tests: joins the cluster (owning\n"
	    "no partitions), waits for the cache, runs one command, leaves.\n"
	    "\n"
	    "Commands:\n"
	    "  put       put k<i> = v<i>-r<R> for i in 0..N-1 (R default 1);\n"
	    "            exit 0 only when every put is acknowledged (DG_OK)\n"
	    "  verify    get every k<i>, check it is v<i>-r<R>; exit 0 only when all match\n"
	    "  size      print the cache's size (primary copies, cluster-wide)\n"
	    "  tx-hold   begin a PESSIMISTIC REPEATABLE_READ tx labelled --label (default\n"
	    "            tx-hold), put --key = held in it, print \"HOLDING key=K\", keep it\n"
	    "            open (a tx get of the key every 100 ms) for --duration seconds\n"
	    "            (default 30) or until SIGTERM, then commit; print \"tx-hold\n"
	    "            result=<error>\" (DG_OK, DG_ERR_TX_ROLLED_BACK after a `dgctl tx\n"
	    "            kill`, ...); exit 0 only when it committed.  Its tx timeout\n"
	    "            (--timeout-ms, default 2000) is raised to outlast --duration\n"
	    "\n");
	fprintf(f,
	    "Bank commands (the cache must be TRANSACTIONAL; print VIOLATION lines,\n"
	    "exit 1 when any guarantee broke):\n"
	    "  bank-init    one tx: acct0..acct<N-1> = B (retried until it commits or\n"
	    "               --duration passes)\n"
	    "  bank-run     --threads threads transfer 1..10 between two random accounts\n"
	    "               (read both; skip when the source holds too little; write\n"
	    "               both and the record x<ID>-<thread>-<n> = \"<from> <to> <amount>\n"
	    "               <from's balance read> <to's balance read>\"; commit), in --mode,\n"
	    "               for --duration seconds; one auditor reads\n"
	    "               every account in a PESSIMISTIC REPEATABLE_READ tx (its total\n"
	    "               must be N*B, no balance negative); any tx lasting longer than\n"
	    "               --timeout-ms + 2 s is a violation, and so is one still running\n"
	    "               --timeout-ms + 10 s after the end; prints a summary line\n"
	    "  bank-verify  the total is N*B and no balance is negative; every --ok-log\n"
	    "               record is in the cache, no --fail-log record whose commit\n"
	    "               failed (anything but TX_UNKNOWN) is; each balance is B plus\n"
	    "               what the records in the cache moved; each account's records\n"
	    "               chain up (each balance read as often as written)\n"
	    "\n");
	fprintf(f,
	    "Register commands (register.h: the history's format; exit 1 only when the\n"
	    "workload could not run: linearizability is the checker's verdict):\n"
	    "  register-run       --threads threads (default 10) for --duration seconds,\n"
	    "                     each op on a random key of --keys: a read, a write of a\n"
	    "                     unique value <client-id>.<thread>.<n>, or a compare-and-set\n"
	    "                     from the value the thread last read or wrote for the key;\n"
	    "                     every invoke and completion appended to --history\n"
	    "  register-read-all  one read of every key (each retried until it succeeds or\n"
	    "                     --duration passes), appended to --history\n"
	    "  --keys K                keys <prefix>0..<prefix><K-1> (default 10, 1..%d)\n"
	    "  --key-prefix P          [A-Za-z0-9_]{1,%d} (default r)\n"
	    "  --mix R:W:C             relative weights of read, write, cas (default 2:1:1)\n"
	    "  --pause-us US           after each op a pause of 0..US microseconds (default\n"
	    "                          1000)\n"
	    "  --history PATH          the history file, appended to (required)\n"
	    "  --client-id ID          names the procs <ID>-<thread> and the values\n"
	    "                          (register-run: required; register-read-all: default\n"
	    "                          final)\n"
	    "  --break-every K         register-run, testing the checker: every K-th write of\n"
	    "                          a thread is logged ok without being made\n"
	    "\n", REG_MAX_KEYS, REG_PREFIX_MAX);
	fprintf(f,
	    "Options:\n"
	    "  --seed URL              a server node to join through (repeatable, required)\n"
	    "  --cache NAME            the cache (required); it is not created\n"
	    "  --count N               keys k0..k<N-1> (put, verify)\n"
	    "  --round R               the value's round (verify: required)\n"
	    "  --threads T             threads issuing operations (default 8, 1..%d;\n"
	    "                          bank-run: transfer threads, plus one auditor)\n"
	    "  --batch B               put, verify: each thread writes (reads) B of its\n"
	    "                          keys with one dg_cache_put_all (get_all) (default\n"
	    "                          1: single calls; 1..%d); a failed put_all fails\n"
	    "                          all its keys\n",
	    MAX_THREADS, BATCH_MAX);
	fprintf(f,
	    "  --accounts N            bank: accounts acct0..acct<N-1> (default 10, 2..1000)\n"
	    "  --balance B             bank: each account's initial balance (default 100)\n"
	    "  --duration S            bank-run: seconds of transfers (required);\n"
	    "                          bank-init, bank-verify: retry bound (default 30)\n"
	    "  --mode M                bank-run: pess-rr (PESSIMISTIC REPEATABLE_READ) or\n"
	    "                          opt-ser (OPTIMISTIC SERIALIZABLE) (required)\n"
	    "  --timeout-ms MS         bank: each transaction's timeout (default 2000)\n"
	    "  --client-id ID          bank-run: names the records, [A-Za-z0-9_]{1,16}\n"
	    "                          (required; distinct per concurrent client)\n"
	    "  --ok-log PATH           bank-run: append \"<key> <record> begin_ms=<wall ms>\n"
	    "                          ms=<duration>\" for each commit that returned DG_OK;\n"
	    "                          bank-verify: such a log to check (repeatable, up\n"
	    "                          to %d)\n"
	    "  --fail-log PATH         bank-run: the same, \"<key> <ERROR> <record> ...\", for\n"
	    "                          each commit that returned an error; bank-verify:\n"
	    "                          such a log to check (repeatable, up to %d)\n"
	    "  --ordered               bank-run: read (PESSIMISTIC: lock) the lower-numbered\n"
	    "                          account of a transfer first, not the source (no\n"
	    "                          deadlock between transfers and audits)\n"
	    "  --batch-reads           bank-run: a transfer reads its two accounts, an audit\n"
	    "                          all of them, with one dg_tx_get_all (the reads at\n"
	    "                          once; PESSIMISTIC: the locks granted in any order)\n"
	    "  --audit-pause-ms MS     bank-run: the auditor's pause before each audit\n"
	    "                          (default 100; longer than --duration: no audit)\n"
	    "  --stall-ms MS           bank-run: this long without a committed transfer is\n"
	    "                          a stall: a STALL line, counted in the summary's\n"
	    "                          stalls= (not in the exit status); 0: no check\n"
	    "                          (default 10000)\n"
	    "  --rand-seed N           bank-run: seed of the transfers (default: time)\n"
	    "  --lose-credit-every K   bank-run, testing the checker: every K-th transfer of\n"
	    "                          a thread commits its debit without its credit\n",
	    BANK_MAX_LOGS, BANK_MAX_LOGS);
	fprintf(f,
	    "  --listen URL            this client's address (default tcp://127.0.0.1:0)\n"
	    "  --cluster-name NAME     cluster name (default datagrid)\n"
	    "  --secret-file FILE      the cluster secret (default: $DG_CLUSTER_SECRET,\n"
	    "                          else no authentication)\n"
	    "  --log-level LEVEL       debug, info (default), warn or error\n"
	    "  --wait-cache MS         how long to wait for the cache to be known\n"
	    "                          (default 15000)\n"
	    "  --failure-detection-timeout MS\n"
	    "                          a peer silent this long is declared failed; use\n"
	    "                          the servers' value: they drop a client whose\n"
	    "                          heartbeats (every MS/5) come slower (default 10000)\n"
	    "  --join-timeout MS       give up joining after MS (default 10000)\n"
	    "  --request-timeout MS    bound of each operation (default 10000)\n"
	    "  --data-dir DIR          the node's persistence directory (default none;\n"
	    "                          a client holds no data)\n"
	    "  --help                  this text\n"
	    "\n"
	    "Exit status: 0 success, 1 the command failed (or no node, no cache),\n"
	    "2 usage error.\n");
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* A decimal in [lo, hi]; -1 after a message naming the option. */
static int parse_u64(const char *opt, const char *s, uint64_t lo, uint64_t hi,
    uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno != 0 || end == s || *end != 0 || s[0] == '-' || v < lo || v > hi) {
		fprintf(stderr, "cacheclient: %s: not a number in %" PRIu64 "..%" PRIu64
		    ": '%s'\n", opt, lo, hi, s);
		return -1;
	}
	*out = v;
	return 0;
}

/* The whole file, one trailing "\n" or "\r\n" dropped; empty is an error. */
static int read_secret(const char *path, uint8_t *buf, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (f == NULL) {
		fprintf(stderr, "cacheclient: --secret-file %s: %s\n", path, strerror(errno));
		return -1;
	}
	size_t n = fread(buf, 1, SECRET_MAX + 1, f);
	int err = ferror(f);
	fclose(f);
	if (err || n > SECRET_MAX) {
		fprintf(stderr, "cacheclient: --secret-file %s: %s\n", path,
		    err ? "read error" : "longer than 4096 bytes");
		return -1;
	}
	if (n > 0 && buf[n - 1] == '\n')
		n--;
	if (n > 0 && buf[n - 1] == '\r')
		n--;
	if (n == 0) {
		fprintf(stderr, "cacheclient: --secret-file %s: empty secret\n", path);
		return -1;
	}
	*len = n;
	return 0;
}

/* ---- the commands: T threads, thread t takes keys t, t+T, t+2T, ... ---- */

enum cmd { CMD_PUT, CMD_VERIFY, CMD_SIZE, CMD_TX_HOLD, CMD_BANK_INIT, CMD_BANK_RUN,
	CMD_BANK_VERIFY, CMD_REG_RUN, CMD_REG_READ_ALL };

struct job {
	dg_cache *cache;
	enum cmd cmd;
	uint64_t count, round;
	unsigned threads;
	unsigned batch;           /* keys per put_all / get_all (1: single calls) */
	atomic_uint_fast64_t ok, missing, wrong, failed;
	atomic_uint reported;     /* problems printed so far */
	pthread_mutex_t out_mu;   /* one problem line at a time */
};

struct worker {
	struct job *job;
	unsigned index;
};

static void report(struct job *j, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void report(struct job *j, const char *fmt, ...)
{
	if (atomic_fetch_add(&j->reported, 1) >= REPORT_MAX)
		return;
	va_list ap;
	va_start(ap, fmt);
	pthread_mutex_lock(&j->out_mu);
	vprintf(fmt, ap);
	fflush(stdout);
	pthread_mutex_unlock(&j->out_mu);
	va_end(ap);
}

/* put or verify one batch: keys idx[0..n) with one put_all or get_all. */
static void work_batch(struct job *j, const uint64_t *idx, size_t n, char (*keys)[32],
    char (*vals)[64], dg_kv *kv, dg_buf *got)
{
	for (size_t i = 0; i < n; i++) {
		int kl = snprintf(keys[i], 32, "k%" PRIu64, idx[i]);
		int vl = snprintf(vals[i], 64, "v%" PRIu64 "-r%" PRIu64, idx[i], j->round);
		kv[i] = (dg_kv){ keys[i], (size_t)kl, j->cmd == CMD_PUT ? vals[i] : NULL,
			j->cmd == CMD_PUT ? (size_t)vl : 0 };
	}
	if (j->cmd == CMD_PUT) {
		dg_err e = dg_cache_put_all(j->cache, kv, n);
		if (e == DG_OK) {
			atomic_fetch_add(&j->ok, n);
		} else {
			atomic_fetch_add(&j->failed, n);
			report(j, "put_all of %zu keys from %s failed: %s\n", n, keys[0],
			    dg_strerror(e));
		}
		return;
	}
	dg_buf_reset(got);
	size_t found = 0;
	dg_err e = dg_cache_get_all(j->cache, kv, n, got, &found);
	if (e != DG_OK) {
		atomic_fetch_add(&j->failed, n);
		report(j, "get_all of %zu keys from %s failed: %s\n", n, keys[0], dg_strerror(e));
		return;
	}
	for (size_t i = 0; i < n; i++) {
		size_t vl = strlen(vals[i]);
		if (kv[i].val == NULL) {
			atomic_fetch_add(&j->missing, 1);
			report(j, "missing %s (want %s)\n", keys[i], vals[i]);
		} else if (kv[i].vlen != vl || memcmp(kv[i].val, vals[i], vl) != 0) {
			atomic_fetch_add(&j->wrong, 1);
			report(j, "wrong %s: got \"%.*s\" want \"%s\"\n", keys[i],
			    kv[i].vlen > 60 ? 60 : (int)kv[i].vlen, (const char *)kv[i].val, vals[i]);
		} else {
			atomic_fetch_add(&j->ok, 1);
		}
	}
}

/* A thread's keys in batches of j->batch. */
static void *work_batches(struct worker *w)
{
	struct job *j = w->job;
	size_t b = j->batch;
	uint64_t *idx = malloc(b * sizeof(*idx));
	char (*keys)[32] = malloc(b * sizeof(*keys));
	char (*vals)[64] = malloc(b * sizeof(*vals));
	dg_kv *kv = malloc(b * sizeof(*kv));
	dg_buf got;
	dg_buf_init(&got);
	if (idx == NULL || keys == NULL || vals == NULL || kv == NULL) {
		fprintf(stderr, "cacheclient: out of memory\n");
		exit(1);
	}
	size_t n = 0;
	for (uint64_t i = w->index; i < j->count; i += j->threads) {
		idx[n++] = i;
		if (n == b) {
			work_batch(j, idx, n, keys, vals, kv, &got);
			n = 0;
		}
	}
	if (n > 0)
		work_batch(j, idx, n, keys, vals, kv, &got);
	dg_buf_free(&got);
	free(idx);
	free(keys);
	free(vals);
	free(kv);
	return NULL;
}

static void *work(void *arg)
{
	struct worker *w = arg;
	struct job *j = w->job;
	if (j->batch > 1)
		return work_batches(w);
	char key[32], val[64];
	dg_buf got;
	dg_buf_init(&got);
	for (uint64_t i = w->index; i < j->count; i += j->threads) {
		int kl = snprintf(key, sizeof(key), "k%" PRIu64, i);
		int vl = snprintf(val, sizeof(val), "v%" PRIu64 "-r%" PRIu64, i, j->round);
		dg_err e;
		if (j->cmd == CMD_PUT) {
			e = dg_cache_put(j->cache, key, (size_t)kl, val, (size_t)vl);
			if (e == DG_OK) {
				atomic_fetch_add(&j->ok, 1);
			} else {
				atomic_fetch_add(&j->failed, 1);
				report(j, "put %s failed: %s\n", key, dg_strerror(e));
			}
			continue;
		}
		dg_buf_reset(&got);
		e = dg_cache_get(j->cache, key, (size_t)kl, &got);
		if (e == DG_ERR_NOT_FOUND) {
			atomic_fetch_add(&j->missing, 1);
			report(j, "missing %s (want %s)\n", key, val);
		} else if (e != DG_OK) {
			atomic_fetch_add(&j->failed, 1);
			report(j, "get %s failed: %s\n", key, dg_strerror(e));
		} else if (got.len != (size_t)vl || memcmp(got.data, val, got.len) != 0) {
			atomic_fetch_add(&j->wrong, 1);
			report(j, "wrong %s: got \"%.*s\" want \"%s\"\n", key,
			    got.len > 60 ? 60 : (int)got.len, (const char *)got.data, val);
		} else {
			atomic_fetch_add(&j->ok, 1);
		}
	}
	dg_buf_free(&got);
	return NULL;
}

/* Runs put or verify; 0 when every key succeeded, 1 otherwise. */
static int run(struct job *j)
{
	pthread_t tids[MAX_THREADS];
	struct worker ws[MAX_THREADS];
	unsigned started = 0;
	uint64_t t0 = now_ms();
	for (unsigned t = 0; t < j->threads; t++) {
		ws[t] = (struct worker){ j, t };
		int rc = pthread_create(&tids[t], NULL, work, &ws[t]);
		if (rc != 0) {
			fprintf(stderr, "cacheclient: pthread_create: %s\n", strerror(rc));
			break;
		}
		started++;
	}
	if (started < j->threads) {
		/* the keys of the missing threads are not done: fail */
		for (unsigned t = 0; t < started; t++)
			pthread_join(tids[t], NULL);
		return 1;
	}
	for (unsigned t = 0; t < started; t++)
		pthread_join(tids[t], NULL);
	uint64_t ms = now_ms() - t0;
	uint64_t ok = atomic_load(&j->ok), failed = atomic_load(&j->failed);
	double rate = ms ? (double)ok * 1000.0 / (double)ms : 0.0;
	unsigned rep = atomic_load(&j->reported);
	if (rep > REPORT_MAX)
		printf("... %u more problems not printed\n", rep - REPORT_MAX);
	if (j->cmd == CMD_PUT) {
		printf("acked %" PRIu64 " of %" PRIu64 " round=%" PRIu64 " failed=%" PRIu64
		    " ms=%" PRIu64 " puts_per_s=%.0f threads=%u batch=%u\n", ok, j->count, j->round,
		    failed, ms, rate, j->threads, j->batch);
	} else {
		printf("verified %" PRIu64 " of %" PRIu64 " round=%" PRIu64 " missing=%" PRIu64
		    " wrong=%" PRIu64 " failed=%" PRIu64 " ms=%" PRIu64 " gets_per_s=%.0f"
		    " threads=%u batch=%u\n", ok, j->count, j->round, atomic_load(&j->missing),
		    atomic_load(&j->wrong), failed, ms, rate, j->threads, j->batch);
	}
	fflush(stdout);
	return ok == j->count ? 0 : 1;
}

/* Polls dg_cache_get_by_name until the cache is known or wait_ms passed. */
static dg_err find_cache(dg_node *node, const char *name, uint32_t wait_ms,
    dg_cache **out)
{
	uint64_t end = now_ms() + wait_ms;
	for (;;) {
		dg_err e = dg_cache_get_by_name(node, name, out);
		if (e != DG_ERR_NOT_FOUND || now_ms() >= end)
			return e;
		struct timespec ts = { 0, 20 * 1000000 };
		nanosleep(&ts, NULL);
	}
}

static volatile sig_atomic_t hold_stop;
static void on_hold_signal(int sig)
{
	(void)sig;
	hold_stop = 1;
}

/* tx-hold: one open PESSIMISTIC tx holding key's lock, for the admin tests
 * (dgctl tx list shows it, dgctl tx kill rolls it back). */
static int tx_hold(dg_node *node, dg_cache *cache, const char *key, const char *label,
    uint64_t duration_s, uint64_t timeout_ms)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_hold_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	uint64_t tmo = duration_s * 1000 + 5000;
	if (timeout_ms > tmo)
		tmo = timeout_ms;
	dg_tx *tx;
	dg_err e = dg_tx_begin(node, DG_PESSIMISTIC, DG_REPEATABLE_READ, (uint32_t)tmo, label, &tx);
	if (e != DG_OK) {
		printf("tx-hold result=%s (begin)\n", dg_strerror(e));
		return 1;
	}
	if ((e = dg_tx_put(tx, cache, key, strlen(key), "held", 4)) != DG_OK) {
		dg_tx_rollback(tx);
		printf("tx-hold result=%s (put)\n", dg_strerror(e));
		return 1;
	}
	printf("HOLDING key=%s label=%s\n", key, label);
	fflush(stdout);
	uint64_t end = now_ms() + duration_s * 1000;
	dg_buf v;
	dg_buf_init(&v);
	while (!hold_stop && now_ms() < end) {
		struct timespec ts = { 0, 100 * 1000000 };
		nanosleep(&ts, NULL);
		if ((e = dg_tx_get(tx, cache, key, strlen(key), &v)) != DG_OK)
			break;
	}
	dg_buf_free(&v);
	if (e == DG_OK)
		e = dg_tx_commit(tx);
	else
		dg_tx_rollback(tx);
	printf("tx-hold result=%s\n", dg_strerror(e));
	return e == DG_OK ? 0 : 1;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "seed", required_argument, NULL, 's' },
		{ "cache", required_argument, NULL, 'c' },
		{ "count", required_argument, NULL, 'n' },
		{ "round", required_argument, NULL, 'r' },
		{ "threads", required_argument, NULL, 't' },
		{ "listen", required_argument, NULL, 'l' },
		{ "cluster-name", required_argument, NULL, 'N' },
		{ "secret-file", required_argument, NULL, 'k' },
		{ "log-level", required_argument, NULL, 'g' },
		{ "wait-cache", required_argument, NULL, 'w' },
		{ "join-timeout", required_argument, NULL, 'j' },
		{ "request-timeout", required_argument, NULL, 'q' },
		{ "failure-detection-timeout", required_argument, NULL, 'f' },
		{ "data-dir", required_argument, NULL, 'd' },
		{ "accounts", required_argument, NULL, 'A' },
		{ "balance", required_argument, NULL, 'B' },
		{ "duration", required_argument, NULL, 'D' },
		{ "mode", required_argument, NULL, 'M' },
		{ "timeout-ms", required_argument, NULL, 'T' },
		{ "client-id", required_argument, NULL, 'I' },
		{ "ok-log", required_argument, NULL, 'O' },
		{ "fail-log", required_argument, NULL, 'F' },
		{ "rand-seed", required_argument, NULL, 'R' },
		{ "lose-credit-every", required_argument, NULL, 'L' },
		{ "ordered", no_argument, NULL, 'o' },
		{ "batch-reads", no_argument, NULL, 'G' },
		{ "audit-pause-ms", required_argument, NULL, 'P' },
		{ "stall-ms", required_argument, NULL, 'S' },
		{ "key", required_argument, NULL, 'K' },
		{ "label", required_argument, NULL, 'a' },
		{ "keys", required_argument, NULL, 'Y' },
		{ "key-prefix", required_argument, NULL, 'X' },
		{ "mix", required_argument, NULL, 'm' },
		{ "pause-us", required_argument, NULL, 'u' },
		{ "history", required_argument, NULL, 'H' },
		{ "break-every", required_argument, NULL, 'b' },
		{ "batch", required_argument, NULL, 'z' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *seeds[MAX_SEEDS];
	size_t nseeds = 0;
	const char *cache_name = NULL, *listen_url = "tcp://127.0.0.1:0";
	const char *cluster = NULL, *secret_file = NULL, *data_dir = NULL;
	int log_level = 0;
	uint64_t count = 0, round = 1, threads = 8, wait_ms = 15000;
	uint64_t join_ms = 0, request_ms = 0, failure_ms = 0;
	bool have_count = false, have_round = false, have_duration = false, ordered = false;
	bool batch_reads = false;
	uint64_t accounts = 10, balance = 100, duration = 30, timeout_ms = 2000, audit_pause = 100,
	    stall_ms = 10000;
	uint64_t rand_seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32), lose_every = 0;
	const char *mode = NULL, *client_id = NULL, *hold_key = NULL, *label = "tx-hold";
	const char *ok_logs[BANK_MAX_LOGS], *fail_logs[BANK_MAX_LOGS];
	size_t nok = 0, nfail = 0;
	uint64_t keys = 10, pause_us = 1000, break_every = 0, batch = 1;
	unsigned mix_r = 2, mix_w = 1, mix_c = 1;
	const char *key_prefix = "r", *history = NULL;
	bool have_threads = false;
	static uint8_t secret[SECRET_MAX + 1];
	size_t secret_len = 0;
	int c;

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		int bad = 0;
		switch (c) {
		case 's':
			if (nseeds == MAX_SEEDS) {
				fprintf(stderr, "cacheclient: more than %d seeds\n", MAX_SEEDS);
				return 2;
			}
			seeds[nseeds++] = optarg;
			break;
		case 'c': cache_name = optarg; break;
		case 'n':
			bad = parse_u64("--count", optarg, 0, UINT64_MAX / 2, &count);
			have_count = true;
			break;
		case 'r':
			bad = parse_u64("--round", optarg, 0, UINT64_MAX, &round);
			have_round = true;
			break;
		case 't':
			bad = parse_u64("--threads", optarg, 1, MAX_THREADS, &threads);
			have_threads = true;
			break;
		case 'l': listen_url = optarg; break;
		case 'N': cluster = optarg; break;
		case 'k': secret_file = optarg; break;
		case 'g':
			log_level = strcmp(optarg, "debug") == 0 ? DG_LOG_DEBUG :
			    strcmp(optarg, "info") == 0 ? DG_LOG_INFO :
			    strcmp(optarg, "warn") == 0 ? DG_LOG_WARN :
			    strcmp(optarg, "error") == 0 ? DG_LOG_ERROR : 0;
			bad = log_level == 0;
			if (bad)
				fprintf(stderr, "cacheclient: --log-level %s: debug, info, warn "
				    "or error\n", optarg);
			break;
		case 'w': bad = parse_u64("--wait-cache", optarg, 0, 3600000, &wait_ms); break;
		case 'j': bad = parse_u64("--join-timeout", optarg, 1, 3600000, &join_ms); break;
		case 'q':
			bad = parse_u64("--request-timeout", optarg, 1, 3600000, &request_ms);
			break;
		case 'f':
			bad = parse_u64("--failure-detection-timeout", optarg, 100, 600000,
			    &failure_ms);
			break;
		case 'd': data_dir = optarg; break;
		case 'A': bad = parse_u64("--accounts", optarg, 2, 1000, &accounts); break;
		case 'B': bad = parse_u64("--balance", optarg, 1, 1000000000, &balance); break;
		case 'D':
			bad = parse_u64("--duration", optarg, 1, 86400, &duration);
			have_duration = true;
			break;
		case 'M':
			if (strcmp(optarg, "pess-rr") != 0 && strcmp(optarg, "opt-ser") != 0) {
				fprintf(stderr, "cacheclient: --mode: pess-rr or opt-ser, not '%s'\n", optarg);
				bad = -1;
			}
			mode = optarg;
			break;
		case 'T': bad = parse_u64("--timeout-ms", optarg, 1, 3600000, &timeout_ms); break;
		case 'I':
			if (optarg[0] == 0 || strlen(optarg) > 16 ||
			    strspn(optarg, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
			    "0123456789_") != strlen(optarg)) {
				fprintf(stderr, "cacheclient: --client-id: [A-Za-z0-9_]{1,16}, not '%s'\n",
				    optarg);
				bad = -1;
			}
			client_id = optarg;
			break;
		case 'O':
		case 'F':
			if ((c == 'O' ? nok : nfail) == BANK_MAX_LOGS) {
				fprintf(stderr, "cacheclient: more than %d --%s\n", BANK_MAX_LOGS,
				    c == 'O' ? "ok-log" : "fail-log");
				return 2;
			}
			if (c == 'O')
				ok_logs[nok++] = optarg;
			else
				fail_logs[nfail++] = optarg;
			break;
		case 'R': bad = parse_u64("--rand-seed", optarg, 0, UINT64_MAX, &rand_seed); break;
		case 'L':
			bad = parse_u64("--lose-credit-every", optarg, 1, UINT64_MAX, &lose_every);
			break;
		case 'o': ordered = true; break;
		case 'G': batch_reads = true; break;
		case 'P': bad = parse_u64("--audit-pause-ms", optarg, 0, 3600000, &audit_pause); break;
		case 'S': bad = parse_u64("--stall-ms", optarg, 0, 3600000, &stall_ms); break;
		case 'K': hold_key = optarg; break;
		case 'a': label = optarg; break;
		case 'Y': bad = parse_u64("--keys", optarg, 1, REG_MAX_KEYS, &keys); break;
		case 'X':
			if (optarg[0] == 0 || strlen(optarg) > REG_PREFIX_MAX ||
			    strspn(optarg, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
			    "0123456789_") != strlen(optarg)) {
				fprintf(stderr, "cacheclient: --key-prefix: [A-Za-z0-9_]{1,%d}, not '%s'\n",
				    REG_PREFIX_MAX, optarg);
				bad = -1;
			}
			key_prefix = optarg;
			break;
		case 'm': {
			int used = -1;
			if (sscanf(optarg, "%3u:%3u:%3u%n", &mix_r, &mix_w, &mix_c, &used) != 3 ||
			    used < 0 || optarg[used] != 0 || mix_r + mix_w + mix_c == 0) {
				fprintf(stderr, "cacheclient: --mix: R:W:C (weights 0..999, not all 0),"
				    " not '%s'\n", optarg);
				bad = -1;
			}
			break;
		}
		case 'u': bad = parse_u64("--pause-us", optarg, 0, 10000000, &pause_us); break;
		case 'H': history = optarg; break;
		case 'b': bad = parse_u64("--break-every", optarg, 1, UINT64_MAX, &break_every); break;
		case 'z': bad = parse_u64("--batch", optarg, 1, BATCH_MAX, &batch); break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
		if (bad)
			return 2;
	}
	if (optind != argc - 1) {
		fprintf(stderr, "cacheclient: %s\n", optind == argc ?
		    "no command (put, verify, size, tx-hold, bank-init, bank-run, bank-verify,"
		    " register-run or register-read-all)" :
		    "one command only");
		usage(stderr);
		return 2;
	}
	const char *cmd_name = argv[optind];
	struct job job;
	memset(&job, 0, sizeof(job));
	if (strcmp(cmd_name, "put") == 0) {
		job.cmd = CMD_PUT;
	} else if (strcmp(cmd_name, "verify") == 0) {
		job.cmd = CMD_VERIFY;
	} else if (strcmp(cmd_name, "size") == 0) {
		job.cmd = CMD_SIZE;
	} else if (strcmp(cmd_name, "tx-hold") == 0) {
		job.cmd = CMD_TX_HOLD;
	} else if (strcmp(cmd_name, "bank-init") == 0) {
		job.cmd = CMD_BANK_INIT;
	} else if (strcmp(cmd_name, "bank-run") == 0) {
		job.cmd = CMD_BANK_RUN;
	} else if (strcmp(cmd_name, "bank-verify") == 0) {
		job.cmd = CMD_BANK_VERIFY;
	} else if (strcmp(cmd_name, "register-run") == 0) {
		job.cmd = CMD_REG_RUN;
	} else if (strcmp(cmd_name, "register-read-all") == 0) {
		job.cmd = CMD_REG_READ_ALL;
	} else {
		fprintf(stderr, "cacheclient: unknown command '%s'\n", cmd_name);
		usage(stderr);
		return 2;
	}
	bool bank = job.cmd >= CMD_BANK_INIT && job.cmd <= CMD_BANK_VERIFY;
	bool reg = job.cmd == CMD_REG_RUN || job.cmd == CMD_REG_READ_ALL;
	const char *missing = nseeds == 0 ? "--seed" : cache_name == NULL ? "--cache" :
	    job.cmd == CMD_TX_HOLD && hold_key == NULL ? "--key" :
	    !bank && !reg && job.cmd != CMD_SIZE && job.cmd != CMD_TX_HOLD && !have_count ?
	    "--count" :
	    job.cmd == CMD_VERIFY && !have_round ? "--round" :
	    job.cmd == CMD_BANK_RUN && !have_duration ? "--duration" :
	    job.cmd == CMD_BANK_RUN && mode == NULL ? "--mode" :
	    job.cmd == CMD_BANK_RUN && client_id == NULL ? "--client-id" :
	    job.cmd == CMD_REG_RUN && !have_duration ? "--duration" :
	    job.cmd == CMD_REG_RUN && client_id == NULL ? "--client-id" :
	    reg && history == NULL ? "--history" : NULL;
	if (missing != NULL) {
		fprintf(stderr, "cacheclient: %s: %s is required\n", cmd_name, missing);
		usage(stderr);
		return 2;
	}
	if ((job.cmd == CMD_SIZE || job.cmd == CMD_TX_HOLD || bank || reg) &&
	    (have_count || have_round)) {
		fprintf(stderr, "cacheclient: %s takes no --count or --round\n", cmd_name);
		return 2;
	}
	if (job.cmd == CMD_BANK_RUN && (nok > 1 || nfail > 1)) {
		fprintf(stderr, "cacheclient: bank-run writes one --ok-log and one --fail-log\n");
		return 2;
	}
	if (secret_file != NULL) {
		if (read_secret(secret_file, secret, &secret_len) != 0)
			return 2;
	} else {
		const char *env = getenv("DG_CLUSTER_SECRET");
		if (env != NULL && env[0] != 0) {
			secret_len = strlen(env);
			if (secret_len > SECRET_MAX) {
				fprintf(stderr, "cacheclient: DG_CLUSTER_SECRET: longer than %d bytes\n",
				    SECRET_MAX);
				return 2;
			}
			memcpy(secret, env, secret_len);
		}
	}
	signal(SIGPIPE, SIG_IGN);

	dg_node_config cfg;
	dg_node_config_init(&cfg);
	cfg.client = true;
	cfg.log_level = log_level;
	cfg.listen_url = listen_url;
	cfg.seeds = seeds;
	cfg.nseeds = nseeds;
	if (cluster != NULL)
		cfg.cluster_name = cluster;
	cfg.secret = secret_len ? secret : NULL;
	cfg.secret_len = secret_len;
	if (join_ms != 0)
		cfg.join_timeout_ms = (uint32_t)join_ms;
	if (request_ms != 0)
		cfg.request_timeout_ms = (uint32_t)request_ms;
	if (failure_ms != 0)
		cfg.failure_timeout_ms = (uint32_t)failure_ms;
	cfg.data_dir = data_dir;
	dg_node *node = NULL;
	uint64_t t0 = now_ms();
	dg_err e = dg_node_start(&cfg, &node);
	memset(secret, 0, sizeof(secret));
	if (e != DG_OK) {
		fprintf(stderr, "cacheclient: the client node could not join through %s "
		    "(%zu seed(s)): %s\n", seeds[0], nseeds, dg_strerror(e));
		return 1;
	}
	dg_cache *cache = NULL;
	if ((e = find_cache(node, cache_name, (uint32_t)wait_ms, &cache)) != DG_OK) {
		fprintf(stderr, "cacheclient: cache '%s' %s within %" PRIu64 " ms of joining: %s\n",
		    cache_name, e == DG_ERR_NOT_FOUND ? "not known" : "unusable", wait_ms,
		    dg_strerror(e));
		dg_node_stop(node);
		return 1;
	}
	fprintf(stderr, "cacheclient: node %016" PRIx64 " joined, cache '%s' found, %" PRIu64
	    " ms after start\n", dg_node_get_id(node), cache_name, now_ms() - t0);

	int rc;
	if (job.cmd == CMD_SIZE) {
		uint64_t size = 0;
		if ((e = dg_cache_size(cache, &size)) != DG_OK) {
			fprintf(stderr, "cacheclient: size of '%s': %s\n", cache_name, dg_strerror(e));
			rc = 1;
		} else {
			printf("size %" PRIu64 "\n", size);
			rc = 0;
		}
	} else if (job.cmd == CMD_TX_HOLD) {
		rc = tx_hold(node, cache, hold_key, label, have_duration ? duration : 30, timeout_ms);
	} else if (bank) {
		struct bank_opts bo = {
			.node = node, .cache = cache, .accounts = (unsigned)accounts,
			.balance = (int64_t)balance, .duration_s = duration, .threads = (unsigned)threads,
			.conc = mode != NULL && strcmp(mode, "opt-ser") == 0 ? DG_OPTIMISTIC :
			    DG_PESSIMISTIC,
			.iso = mode != NULL && strcmp(mode, "opt-ser") == 0 ? DG_SERIALIZABLE :
			    DG_REPEATABLE_READ,
			.mode = mode != NULL ? mode : "pess-rr", .timeout_ms = (uint32_t)timeout_ms,
			.client_id = client_id != NULL ? client_id : "0", .rand_seed = rand_seed,
			.ok_log = nok ? ok_logs[0] : NULL, .fail_log = nfail ? fail_logs[0] : NULL,
			.nok = nok, .nfail = nfail, .lose_credit_every = lose_every, .ordered = ordered,
			.batch_reads = batch_reads,
			.audit_pause_ms = (uint32_t)audit_pause, .stall_ms = (uint32_t)stall_ms,
		};
		memcpy(bo.ok_logs, ok_logs, nok * sizeof(ok_logs[0]));
		memcpy(bo.fail_logs, fail_logs, nfail * sizeof(fail_logs[0]));
		rc = job.cmd == CMD_BANK_INIT ? bank_init(&bo) :
		    job.cmd == CMD_BANK_RUN ? bank_run(&bo) : bank_verify(&bo);
	} else if (reg) {
		struct reg_opts ro = {
			.node = node, .cache = cache, .cache_name = cache_name,
			.threads = have_threads ? (unsigned)threads : 10, .duration_s = duration,
			.keys = (unsigned)keys, .key_prefix = key_prefix,
			.client_id = client_id != NULL ? client_id : "final", .history = history,
			.mix_read = mix_r, .mix_write = mix_w, .mix_cas = mix_c,
			.pause_us = (uint32_t)pause_us, .rand_seed = rand_seed,
			.op_bound_ms = (uint32_t)(request_ms != 0 ? request_ms : 10000) + 5000,
			.break_every = break_every,
		};
		rc = job.cmd == CMD_REG_RUN ? register_run(&ro) : register_read_all(&ro);
	} else {
		job.cache = cache;
		job.count = count;
		job.round = round;
		job.threads = (unsigned)threads;
		job.batch = (unsigned)batch;
		pthread_mutex_init(&job.out_mu, NULL);
		rc = run(&job);
		pthread_mutex_destroy(&job.out_mu);
	}
	fflush(stdout);
	dg_node_stop(node);
	return rc;
}
