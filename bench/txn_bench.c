/*
 * txn_bench.c — the "txn" suite: 2-key money transfers, datagrid
 * transactions against Redis WATCH/MULTI/EXEC + WAIT 2 in the same run.
 *
 * Accounts: NACCOUNTS keys "account-NNNN" (12 bytes), each holding a
 * balance (datagrid: 8 bytes, int64 in host order; Redis: decimal text),
 * all INITIAL_BALANCE before the first case.  A transfer picks two distinct
 * accounts and an amount (1..100) from the thread's own random sequence,
 * reads both balances, writes from - amount and to + amount, and commits.
 * Balances may go negative: the total is what must hold, and it is checked
 * after every case (every account read back; a wrong total is reported on
 * stderr and makes dgbench exit 1 after the suite).
 *
 * Cases (1c: one client thread; 32c, 128c: 32 or 128 threads in this
 * process):
 *   transfer_pess_rr_1c, transfer_pess_rr_32c    PESSIMISTIC REPEATABLE_READ
 *   transfer_opt_ser_1c, transfer_opt_ser_32c    OPTIMISTIC SERIALIZABLE
 *   transfer_pess_rr_128c, transfer_opt_ser_128c the same at 128 clients
 *                  (issue 15), run after the four above so that those run
 *                  as they did before these were added
 *
 *   datagrid  3 dgnode processes on loopback (clusters.h), each with
 *             --cache accounts,backups=2,sync=full_sync,atomicity=transactional,
 *             and in this process an embedded client node: each thread runs
 *             dg_tx_begin, dg_tx_get_all {from, to} (both reads at once,
 *             as Redis pipelines them; until 2026-12-05 two dg_tx_gets, one
 *             round trip each), dg_tx_put from, dg_tx_put to, dg_tx_commit.
 *   redis     redis-server primary + 2 replicas, one connection per thread:
 *             WATCH from to, GET from, GET to (one write: the reads), then
 *             MULTI, SET from, SET to, EXEC, WAIT 2 1000 (one write: the
 *             commit) — two round trips, Redis's pipelined best case.  EXEC
 *             answering nil (a watched key changed) is Redis's conflict.
 *             The concurrency and isolation of a case do not apply: both
 *             Redis lines of a thread count run the same transfer.  Skipped,
 *             with the reason on stderr, when redis-server is not installed.
 *
 * Retries: an attempt failing with DG_ERR_TX_CONFLICT, DG_ERR_DEADLOCK,
 * DG_ERR_TIMEOUT or DG_ERR_TX_ROLLED_BACK (Redis: EXEC nil) is retried with
 * the same accounts and amount until it commits or RETRY_LIMIT_NS passed
 * since its first attempt; the operation timed is the whole transfer, first
 * begin to commit.  `retries` counts the re-attempts; `failed` counts the
 * transfers that did not commit: given up, or another error (not retried:
 * DG_ERR_TX_UNKNOWN may have committed; Redis: WAIT saw fewer than 2
 * replicas in 1 s, after EXEC applied on the primary).  stderr breaks the
 * failed attempts down by error.
 *
 * Method: as the cache suite's fullsync cases (load.h): per (case,
 * implementation) 3 repetitions of 1 s after a 0.3 s warm-up (--quick: 1 of
 * 0.5 s after 0.2 s), interleaved with the peer; p50_us/p99_us over every
 * committed transfer started in a window, ops_per_s = those / window time.
 *
 * heap_bytes_per_op (datagrid): bytes allocated through dgi_alloc during the
 * timed windows on every node — this process (the client node:
 * dgi_alloc_get_stats) plus the 3 dgnode processes (SIGUSR1 when a window
 * starts and after it; each logs ALLOC-STATS with its counters, dgnode.c) —
 * over the transfers timed in them.  Warm-ups are left out: a client
 * thread's first transactions set up the tx state and buffers it reuses.
 * allocs_per_op: the allocations counted the same way.  Not reported for
 * Redis (its allocator is not ours to count).
 */
#define _GNU_SOURCE
#include "harness.h"
#include "clusters.h"
#include "load.h"
#include "resp.h"
#include "datagrid.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SUITE "txn"
#define NACCOUNTS 1000         /* 32 threads touch 64 of them at a time,
                                  128 threads 256 */
#define KLEN 12                /* "account-NNNN" */
#define INITIAL_BALANCE 1000000
#define MAX_AMOUNT 100
#define MAX_THREADS DGB_LOAD_MAX_THREADS
/* A thread's random sequence: seed (case index * SEED_SPAN + thread + 1).
 * 32, as when 32 threads were the most: the first four cases keep their
 * transfers.  A 128c case's threads share seeds with the next case's,
 * which never runs at the same time. */
#define SEED_SPAN 32u
#define TX_TIMEOUT_MS 2000     /* dg_tx_begin: bounds lock waits and commit */
#define RETRY_LIMIT_NS 5000000000u /* a transfer is given up after */
#define TX_DONE_CAPACITY (1u << 22) /* every node's --tx-done-capacity */
#define REDIS_WAIT_MS "1000"   /* WAIT 2 <this> */
#define INIT_BATCH 50          /* accounts per tx when filling and auditing */
#define CACHE_SPEC "accounts,backups=2,sync=full_sync,atomicity=transactional"

extern unsigned dgb_own_lines;
int dgb_txn_suite(const dgb_opts *o);

static const struct tcase {
	const char *name;
	unsigned threads;
	dg_tx_concurrency conc;
	dg_tx_isolation iso;
} cases[] = {
	{ "transfer_pess_rr_1c", 1, DG_PESSIMISTIC, DG_REPEATABLE_READ },
	{ "transfer_pess_rr_32c", 32, DG_PESSIMISTIC, DG_REPEATABLE_READ },
	{ "transfer_opt_ser_1c", 1, DG_OPTIMISTIC, DG_SERIALIZABLE },
	{ "transfer_opt_ser_32c", 32, DG_OPTIMISTIC, DG_SERIALIZABLE },
	{ "transfer_pess_rr_128c", 128, DG_PESSIMISTIC, DG_REPEATABLE_READ },
	{ "transfer_opt_ser_128c", 128, DG_OPTIMISTIC, DG_SERIALIZABLE },
};
#define NCASES (sizeof cases / sizeof cases[0])

static char account[NACCOUNTS][KLEN + 1];

static void make_accounts(void)
{
	for (unsigned i = 0; i < NACCOUNTS; i++)
		snprintf(account[i], sizeof account[i], "account-%04u", i);
}

/* ------------------------------------------------------------------------
 * The clusters and the suite's state.
 * ------------------------------------------------------------------------ */
static struct {
	char dgnode[PATH_MAX];
	dgb_dgcluster dg;
	dgb_redis rs;
	dgb_rconn *rc[MAX_THREADS];   /* one connection per client thread */
	bool wrong_total;             /* exit 1 after the suite */
	uint64_t heap_bytes, heap_ops;   /* every datagrid case's windows */
} S;

enum impl { IMPL_DATAGRID, IMPL_REDIS };

/* A client thread's own state (the load keeps the counts and timings). */
typedef struct tworker {
	uint64_t rng;                 /* xorshift64 state, never 0 */
	uint64_t retries;
	uint64_t errs[DG_ERR__COUNT]; /* datagrid: failed attempts by error */
	uint64_t aborted;             /* redis: EXEC nil */
	uint64_t wait_short;          /* redis: WAIT answered < 2 */
	char redis_err[128];          /* redis: why the thread stopped */
	dg_buf val;                   /* datagrid: a balance read */
	char req[512];                /* redis: the request being sent */
	char reply[64];
} tworker;

/* One (case, implementation): its threads and what the repetitions add. */
typedef struct tacc {
	enum impl impl;
	const char *name;
	const struct tcase *tc;
	tworker w[MAX_THREADS];
	dgb_load *load;
	uint64_t allocs, bytes;       /* every node, over the repetitions */
	uint64_t client_allocs, client_bytes;   /* of those, this process */
	uint64_t tx_heap;             /* dg_tx_metrics.heap_bytes, this node */
	bool servers_counted;         /* every repetition had the dgnodes' lines */
	int topo_changes;
	struct heapsnap {             /* counters at the start of a window */
		uint64_t allocs, bytes, client_allocs, client_bytes, tx_heap;
		bool servers;
	} w0;
} tacc;

static uint64_t next_rand(tworker *w)
{
	uint64_t x = w->rng;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return w->rng = x;
}

/* Two distinct accounts and an amount. */
static void pick(tworker *w, unsigned *from, unsigned *to, int64_t *amount)
{
	*from = (unsigned)(next_rand(w) % NACCOUNTS);
	*to = (*from + 1 + (unsigned)(next_rand(w) % (NACCOUNTS - 1))) % NACCOUNTS;
	*amount = 1 + (int64_t)(next_rand(w) % MAX_AMOUNT);
}

/* ------------------------------------------------------------------------
 * datagrid: a transfer is one transaction.
 * ------------------------------------------------------------------------ */
static bool retryable(dg_err e)
{
	return e == DG_ERR_TX_CONFLICT || e == DG_ERR_DEADLOCK ||
	    e == DG_ERR_TIMEOUT || e == DG_ERR_TX_ROLLED_BACK;
}

static dg_err tx_read_balance(dg_tx *tx, dg_buf *buf, unsigned k, int64_t *out)
{
	dg_buf_reset(buf);
	dg_err e = dg_tx_get(tx, S.dg.cache, account[k], KLEN, buf);
	if (e != DG_OK)
		return e;
	if (buf->len != sizeof *out)
		return DG_ERR_BAD_LENGTH;   /* not a balance: counted, not retried */
	memcpy(out, buf->data, sizeof *out);
	return DG_OK;
}

/* Both balances in one dg_tx_get_all: the two reads go out at once, as
 * Redis pipelines its WATCH and two GETs. */
static dg_err tx_read_balances(dg_tx *tx, dg_buf *buf, unsigned from, unsigned to,
    int64_t *fb, int64_t *tb)
{
	dg_kv kv[2] = { { account[from], KLEN, NULL, 0 }, { account[to], KLEN, NULL, 0 } };
	size_t found;
	dg_buf_reset(buf);
	dg_err e = dg_tx_get_all(tx, S.dg.cache, kv, 2, buf, &found);
	if (e != DG_OK)
		return e;
	if (found != 2)
		return DG_ERR_NOT_FOUND;
	if (kv[0].vlen != sizeof *fb || kv[1].vlen != sizeof *tb)
		return DG_ERR_BAD_LENGTH;   /* not a balance: counted, not retried */
	memcpy(fb, kv[0].val, sizeof *fb);
	memcpy(tb, kv[1].val, sizeof *tb);
	return DG_OK;
}

static dg_err tx_write_balance(dg_tx *tx, unsigned k, int64_t v)
{
	return dg_tx_put(tx, S.dg.cache, account[k], KLEN, &v, sizeof v);
}

/* One attempt: begin, read both (at once), write both, commit.  The tx is freed on
 * every path (commit frees it; after a failed operation, rollback). */
static dg_err dg_attempt(const struct tcase *tc, tworker *w, unsigned from,
    unsigned to, int64_t amount)
{
	dg_tx *tx;
	int64_t fb, tb;
	dg_err e = dg_tx_begin(S.dg.client, tc->conc, tc->iso, TX_TIMEOUT_MS,
	    NULL, &tx);
	if (e != DG_OK)
		return e;
	if ((e = tx_read_balances(tx, &w->val, from, to, &fb, &tb)) == DG_OK &&
	    (e = tx_write_balance(tx, from, fb - amount)) == DG_OK &&
	    (e = tx_write_balance(tx, to, tb + amount)) == DG_OK)
		return dg_tx_commit(tx);
	dg_tx_rollback(tx);
	return e;
}

static dgb_op_res dg_transfer(const struct tcase *tc, tworker *w)
{
	unsigned from, to;
	int64_t amount;
	pick(w, &from, &to, &amount);
	uint64_t give_up = dgb_now_ns() + RETRY_LIMIT_NS;
	for (;;) {
		dg_err e = dg_attempt(tc, w, from, to, amount);
		if (e == DG_OK)
			return DGB_OP_OK;
		w->errs[e < DG_ERR__COUNT ? e : 0]++;
		if (e == DG_ERR_TX_UNKNOWN)   /* rare: named, to trace a wrong total */
			dgb_note("%s/datagrid: transfer of %" PRId64 " from %s to %s: %s "
			    "(not retried: it may have committed)", tc->name, amount,
			    account[from], account[to], dg_strerror(e));
		if (!retryable(e) || dgb_now_ns() >= give_up)
			return DGB_OP_FAILED;
		w->retries++;
	}
}

/* ------------------------------------------------------------------------
 * redis: WATCH + GET GET, then MULTI SET SET EXEC WAIT.
 * ------------------------------------------------------------------------ */
/* Appends "CMD key [key]" or "SET key value" to w->req. */
static int r_append(tworker *w, size_t *n, const char *cmd, const char *k1,
    const char *k2)
{
	const char *argv[3] = { cmd, k1, k2 };
	return dgb_resp_append(w->req, sizeof w->req, n, k2 != NULL ? 3 : 2, argv,
	    NULL);
}

/* The reads: WATCH from to, GET from, GET to. */
static bool r_reads(tworker *w, dgb_rconn *c, unsigned from, unsigned to,
    int64_t *fb, int64_t *tb)
{
	size_t n = 0;
	int nil;
	if (r_append(w, &n, "WATCH", account[from], account[to]) != 0 ||
	    r_append(w, &n, "GET", account[from], NULL) != 0 ||
	    r_append(w, &n, "GET", account[to], NULL) != 0 ||
	    dgb_send_full(c->fd, w->req, n) != 0)
		return false;
	if (dgb_rc_reply(c, w->reply, sizeof w->reply, NULL) != '+' ||
	    dgb_rc_reply(c, w->reply, sizeof w->reply, &nil) != '$' || nil)
		return false;
	*fb = strtoll(w->reply, NULL, 10);
	if (dgb_rc_reply(c, w->reply, sizeof w->reply, &nil) != '$' || nil)
		return false;
	*tb = strtoll(w->reply, NULL, 10);
	return true;
}

/* The commit: MULTI, SET, SET, EXEC, WAIT 2.  *applied: EXEC ran the
 * SETs (not nil); *replicas: WAIT's answer. */
static bool r_commit(tworker *w, dgb_rconn *c, unsigned from, unsigned to,
    int64_t fv, int64_t tv, bool *applied, long *replicas)
{
	char fs[24], ts[24];
	size_t n = 0;
	int nil;
	snprintf(fs, sizeof fs, "%" PRId64, fv);
	snprintf(ts, sizeof ts, "%" PRId64, tv);
	const char *multi[] = { "MULTI" }, *exec[] = { "EXEC" };
	const char *wait[] = { "WAIT", "2", REDIS_WAIT_MS };
	if (dgb_resp_append(w->req, sizeof w->req, &n, 1, multi, NULL) != 0 ||
	    r_append(w, &n, "SET", account[from], fs) != 0 ||
	    r_append(w, &n, "SET", account[to], ts) != 0 ||
	    dgb_resp_append(w->req, sizeof w->req, &n, 1, exec, NULL) != 0 ||
	    dgb_resp_append(w->req, sizeof w->req, &n, 3, wait, NULL) != 0 ||
	    dgb_send_full(c->fd, w->req, n) != 0)
		return false;
	if (dgb_rc_reply(c, w->reply, sizeof w->reply, NULL) != '+' ||
	    dgb_rc_reply(c, w->reply, sizeof w->reply, NULL) != '+' ||
	    dgb_rc_reply(c, w->reply, sizeof w->reply, NULL) != '+' ||
	    dgb_rc_reply(c, w->reply, sizeof w->reply, &nil) != '*')
		return false;
	*applied = !nil;
	if (*applied)
		for (int i = 0; i < 2; i++)
			if (dgb_rc_reply(c, w->reply, sizeof w->reply, NULL) != '+')
				return false;
	if (dgb_rc_reply(c, w->reply, sizeof w->reply, NULL) != ':')
		return false;
	*replicas = strtol(w->reply, NULL, 10);
	return true;
}

/* An I/O error or an unexpected reply stops the thread: the connection's
 * state is unknown. */
static dgb_op_res r_stop(tworker *w, const char *what)
{
	snprintf(w->redis_err, sizeof w->redis_err, "%s: %s", what,
	    errno != 0 ? strerror(errno) : "unexpected reply");
	return DGB_OP_STOP;
}

static dgb_op_res redis_transfer(tworker *w, dgb_rconn *c)
{
	unsigned from, to;
	int64_t amount, fb, tb;
	pick(w, &from, &to, &amount);
	uint64_t give_up = dgb_now_ns() + RETRY_LIMIT_NS;
	for (;;) {
		bool applied;
		long replicas;
		errno = 0;
		if (!r_reads(w, c, from, to, &fb, &tb))
			return r_stop(w, "WATCH/GET");
		if (!r_commit(w, c, from, to, fb - amount, tb + amount, &applied,
		    &replicas))
			return r_stop(w, "MULTI/SET/SET/EXEC/WAIT");
		if (applied && replicas >= 2)
			return DGB_OP_OK;
		if (applied) {
			w->wait_short++;
			return DGB_OP_FAILED;
		}
		w->aborted++;
		if (dgb_now_ns() >= give_up)
			return DGB_OP_FAILED;
		w->retries++;
	}
}

static dgb_op_res transfer_op(void *ctx, unsigned t, uint64_t seq)
{
	tacc *a = ctx;
	(void)seq;
	if (a->impl == IMPL_DATAGRID)
		return dg_transfer(a->tc, &a->w[t]);
	return redis_transfer(&a->w[t], S.rc[t]);
}

/* ------------------------------------------------------------------------
 * Accounts: filled before the first case, audited after each.
 * ------------------------------------------------------------------------ */
/* Accounts [k0, k0 + n) in one PESSIMISTIC tx: set to `set` (>= 0), or
 * their balances added to *sum. */
static dg_err dg_batch(unsigned k0, unsigned n, int64_t set, int64_t *sum,
    dg_buf *buf)
{
	dg_tx *tx;
	dg_err e = dg_tx_begin(S.dg.client, DG_PESSIMISTIC, DG_REPEATABLE_READ,
	    0, "dgbench-accounts", &tx);
	if (e != DG_OK)
		return e;
	for (unsigned k = k0; k < k0 + n && e == DG_OK; k++) {
		int64_t v;
		if (set >= 0)
			e = tx_write_balance(tx, k, set);
		else if ((e = tx_read_balance(tx, buf, k, &v)) == DG_OK)
			*sum += v;
	}
	if (e != DG_OK) {
		dg_tx_rollback(tx);
		return e;
	}
	return dg_tx_commit(tx);
}

/* Every account to INITIAL_BALANCE (set) or their sum into *sum (audit);
 * the first error, with the accounts of its batch in *k0. */
static dg_err dg_accounts(bool set, int64_t *sum, unsigned *k0)
{
	dg_buf buf;
	dg_err e = DG_OK;
	*sum = 0;
	dg_buf_init(&buf);
	for (*k0 = 0; *k0 < NACCOUNTS && e == DG_OK; *k0 += INIT_BATCH)
		e = dg_batch(*k0, INIT_BATCH, set ? INITIAL_BALANCE : -1, sum, &buf);
	dg_buf_free(&buf);
	if (e != DG_OK)
		*k0 -= INIT_BATCH;
	return e;
}

/* One command of argc arguments on c, in a heap buffer (MSET and MGET of
 * every account do not fit the stack buffers). */
static void redis_send_big(dgb_rconn *c, int argc, const char *const *argv)
{
	size_t cap = 64 * (size_t)argc, n = 0;
	char *req = malloc(cap);
	if (req == NULL)
		dgb_die("out of memory");
	if (dgb_resp_append(req, cap, &n, argc, argv, NULL) != 0 ||
	    dgb_send_full(c->fd, req, n) != 0)
		dgb_die("redis: sending %s: %s", argv[0], strerror(errno));
	free(req);
}

static void redis_fill(dgb_rconn *c)
{
	static const char *argv[1 + 2 * NACCOUNTS];
	char bal[24], reply[64];
	snprintf(bal, sizeof bal, "%d", INITIAL_BALANCE);
	argv[0] = "MSET";
	for (unsigned k = 0; k < NACCOUNTS; k++) {
		argv[1 + 2 * k] = account[k];
		argv[2 + 2 * k] = bal;
	}
	redis_send_big(c, 1 + 2 * NACCOUNTS, argv);
	if (dgb_rc_reply(c, reply, sizeof reply, NULL) != '+')
		dgb_die("redis: MSET: %s", reply);
	const char *wait[] = { "WAIT", "2", "5000" };
	if (dgb_rc_cmd(c, reply, sizeof reply, 3, wait) != ':' || strcmp(reply, "2") != 0)
		dgb_die("redis: WAIT after MSET: '%s'", reply);
}

static int64_t redis_sum(dgb_rconn *c)
{
	static const char *argv[1 + NACCOUNTS];
	char reply[64];
	int64_t sum = 0;
	argv[0] = "MGET";
	for (unsigned k = 0; k < NACCOUNTS; k++)
		argv[1 + k] = account[k];
	redis_send_big(c, 1 + NACCOUNTS, argv);
	if (dgb_rc_reply(c, reply, sizeof reply, NULL) != '*' ||
	    atoi(reply) != NACCOUNTS)
		dgb_die("redis: MGET: '%s'", reply);
	for (unsigned k = 0; k < NACCOUNTS; k++) {
		int nil;
		if (dgb_rc_reply(c, reply, sizeof reply, &nil) != '$' || nil)
			dgb_die("redis: MGET: %s missing", account[k]);
		sum += strtoll(reply, NULL, 10);
	}
	return sum;
}

/* The total after a case: what every transfer must keep.  A failed audit
 * is reported like a wrong total (exit status 1), not fatal: the other
 * cases still run and print. */
static void audit(const char *name, enum impl impl)
{
	const int64_t want = (int64_t)NACCOUNTS * INITIAL_BALANCE;
	int64_t got;
	unsigned k0;
	if (impl == IMPL_REDIS) {
		got = redis_sum(S.rc[0]);
	} else {
		dg_err e = dg_accounts(false, &got, &k0);
		if (e != DG_OK) {
			S.wrong_total = true;
			dgb_note("%s/datagrid: AUDIT FAILED: reading accounts %u..%u in "
			    "one tx: %s", name, k0, k0 + INIT_BATCH - 1, dg_strerror(e));
			return;
		}
	}
	if (got == want)
		return;
	S.wrong_total = true;
	dgb_note("%s/%s: WRONG TOTAL: the accounts sum to %" PRId64 ", expected %"
	    PRId64 " (difference %" PRId64 ")", name,
	    impl == IMPL_DATAGRID ? "datagrid" : "redis", got, want, got - want);
}

/* ------------------------------------------------------------------------
 * Repetitions and reporting.
 * ------------------------------------------------------------------------ */
static tacc *tacc_new(enum impl impl, const struct tcase *tc, unsigned ci)
{
	tacc *a = calloc(1, sizeof *a);
	if (a == NULL)
		dgb_die("out of memory");
	a->impl = impl;
	a->name = impl == IMPL_DATAGRID ? "datagrid" : "redis";
	a->tc = tc;
	a->servers_counted = true;
	a->load = dgb_load_new(transfer_op, a, tc->threads);
	for (unsigned t = 0; t < tc->threads; t++) {
		/* the same transfers for both implementations of a case */
		a->w[t].rng = 0x9e3779b97f4a7c15u * (ci * SEED_SPAN + t + 1);
		dg_buf_init(&a->w[t].val);
	}
	return a;
}

static void tacc_free(tacc *a)
{
	dgb_load_free(a->load);   /* the threads first: they use the buffers */
	for (unsigned t = 0; t < a->tc->threads; t++)
		dg_buf_free(&a->w[t].val);
	free(a);
}

/* Heap counters of every node now: this process, then the dgnodes
 * (h.servers false if one did not answer). */
typedef struct heapsnap heapsnap;

static heapsnap heap_now(void)
{
	heapsnap h = { 0, 0, 0, 0, 0, false };
	dgi_alloc_stats st;
	dg_tx_metrics m;
	dgi_alloc_get_stats(&st);
	if (dg_tx_get_metrics(S.dg.client, &m) == DG_OK)
		h.tx_heap = m.heap_bytes;
	uint64_t sa = 0, sb = 0;
	h.servers = dgb_dgcluster_alloc_stats(&S.dg, &sa, &sb);
	h.allocs = st.allocs + sa;
	h.bytes = st.bytes + sb;
	h.client_allocs = st.allocs;
	h.client_bytes = st.bytes;
	return h;
}

/* The warm-up ended: heap counters from here on (a thread's first
 * transactions set up the state it reuses, which is not per transfer). */
static void window_start(void *arg)
{
	tacc *a = arg;
	a->w0 = heap_now();
}

static void repetition(tacc *a, uint64_t warm_ns, uint64_t window_ns)
{
	if (a->impl == IMPL_REDIS) {
		dgb_load_rep(a->load, warm_ns, window_ns, NULL, NULL);
		return;
	}
	int64_t v0 = dgb_dgcluster_topo_version(&S.dg);
	uint64_t ok0 = a->load->ops_ok;
	dgb_load_rep(a->load, warm_ns, window_ns, window_start, a);
	heapsnap h0 = a->w0, h1 = heap_now();
	a->allocs += h1.allocs - h0.allocs;
	a->bytes += h1.bytes - h0.bytes;
	a->client_allocs += h1.client_allocs - h0.client_allocs;
	a->client_bytes += h1.client_bytes - h0.client_bytes;
	a->tx_heap += h1.tx_heap - h0.tx_heap;
	a->servers_counted &= h0.servers && h1.servers;
	int64_t v1 = dgb_dgcluster_topo_version(&S.dg);
	if (v1 != v0) {
		a->topo_changes++;
		dgb_note("%s/datagrid: repetition %d: topology version %" PRId64
		    " -> %" PRId64 "; %" PRIu64 " transfers committed in it",
		    a->tc->name, a->load->reps, v0, v1, a->load->ops_ok - ok0);
	}
}

typedef struct tline {
	const char *name, *impl;
	double ops_per_s, p50_us, p99_us;
	double heap_bytes_per_op, allocs_per_op;   /* < 0: not reported */
	uint64_t retries, failed;
} tline;

static void tprint(const dgb_opts *o, const tline *l)
{
	static bool header_done;
	double ns = l->ops_per_s > 0 ? 1e9 / l->ops_per_s : 0;
	if (o->json) {
		printf("{\"suite\":\"%s\",\"case\":\"%s\",\"impl\":\"%s\",\"ns_per_op\":"
		    "%.1f,\"ops_per_s\":%.0f,\"p50_us\":%.1f,\"p99_us\":%.1f", SUITE,
		    l->name, l->impl, ns, l->ops_per_s, l->p50_us, l->p99_us);
		if (l->heap_bytes_per_op >= 0)
			printf(",\"heap_bytes_per_op\":%.1f,\"allocs_per_op\":%.3f",
			    l->heap_bytes_per_op, l->allocs_per_op);
		printf(",\"retries\":%" PRIu64 ",\"failed\":%" PRIu64 "}\n", l->retries,
		    l->failed);
	} else {
		char heap[32], allocs[32];
		if (!header_done) {
			printf("\nsuite %s, 2-key transfers, FULL_SYNC, 2 backups (%s)\n",
			    SUITE, o->quick ? "quick" : "full");
			printf("%-22s %-9s %9s %9s %9s %11s %10s %8s %7s\n", "case", "impl",
			    "ops/s", "p50_us", "p99_us", "heap_B/op", "allocs/op",
			    "retries", "failed");
			header_done = true;
		}
		snprintf(heap, sizeof heap, l->heap_bytes_per_op >= 0 ? "%.1f" : "n/a",
		    l->heap_bytes_per_op);
		snprintf(allocs, sizeof allocs, l->allocs_per_op >= 0 ? "%.3f" : "n/a",
		    l->allocs_per_op);
		printf("%-22s %-9s %9.0f %9.1f %9.1f %11s %10s %8" PRIu64 " %7" PRIu64
		    "\n", l->name, l->impl, l->ops_per_s, l->p50_us, l->p99_us, heap,
		    allocs, l->retries, l->failed);
	}
	fflush(stdout);
	dgb_own_lines++;
}

/* The failed attempts of a's threads by error, and why a Redis thread
 * stopped, on stderr. */
static void note_errors(const tacc *a)
{
	uint64_t errs[DG_ERR__COUNT] = { 0 }, aborted = 0, wait_short = 0;
	const char *stopped = NULL;
	for (unsigned t = 0; t < a->tc->threads; t++) {
		const tworker *w = &a->w[t];
		for (unsigned e = 0; e < DG_ERR__COUNT; e++)
			errs[e] += w->errs[e];
		aborted += w->aborted;
		wait_short += w->wait_short;
		if (w->redis_err[0] != 0 && stopped == NULL)
			stopped = w->redis_err;
	}
	for (unsigned e = 0; e < DG_ERR__COUNT; e++)
		if (errs[e] > 0)
			dgb_note("%s/%s: %" PRIu64 " attempts failed with %s", a->tc->name,
			    a->name, errs[e], dg_strerror((dg_err)e));
	if (aborted > 0)
		dgb_note("%s/%s: %" PRIu64 " attempts aborted (EXEC nil: a watched "
		    "key changed)", a->tc->name, a->name, aborted);
	if (wait_short > 0)
		dgb_note("%s/%s: %" PRIu64 " transfers applied on the primary but WAIT "
		    "2 saw fewer replicas within %s ms", a->tc->name, a->name,
		    wait_short, REDIS_WAIT_MS);
	if (stopped != NULL)
		dgb_note("%s/%s: a client thread stopped: %s", a->tc->name, a->name,
		    stopped);
}

static void report(const dgb_opts *o, tacc *a, uint64_t warm, uint64_t window,
    tline *out)
{
	dgb_load *l = a->load;
	uint64_t retries = 0;
	for (unsigned t = 0; t < a->tc->threads; t++)
		retries += a->w[t].retries;
	note_errors(a);
	if (l->ops_timed == 0)
		dgb_die("%s/%s: no transfer committed (%" PRIu64 " failed)",
		    a->tc->name, a->name, l->failed);
	bool heap = a->impl == IMPL_DATAGRID && a->servers_counted;
	*out = (tline){ a->tc->name, a->name, dgb_load_ops_per_s(l),
		dgb_load_pct_us(l, 0.50), dgb_load_pct_us(l, 0.99),
		heap ? (double)a->bytes / (double)l->ops_timed : -1,
		heap ? (double)a->allocs / (double)l->ops_timed : -1, retries,
		l->failed };
	tprint(o, out);
	dgb_note("%s/%s: %u threads, %d x %.1f s (+ %.1f s warm-up): %" PRIu64
	    " transfers timed, %" PRIu64 " committed in all, %" PRIu64 " retries, %"
	    PRIu64 " failed", a->tc->name, a->name, a->tc->threads, l->reps,
	    (double)window / 1e9, (double)warm / 1e9, l->ops_timed, l->ops_ok,
	    retries, l->failed);
	if (a->impl != IMPL_DATAGRID)
		return;
	double n = (double)l->ops_timed;
	if (heap) {
		S.heap_bytes += a->bytes;
		S.heap_ops += l->ops_timed;
	}
	if (heap)
		dgb_note("%s/datagrid: per committed tx over all nodes: heap %.1f B "
		    "(target <= 512), %.3f allocations; client node %.1f B, %.3f "
		    "(its txs' own count, dg_tx_metrics: %.1f B); 3 dgnodes %.1f B, "
		    "%.3f", a->tc->name, out->heap_bytes_per_op, out->allocs_per_op,
		    (double)a->client_bytes / n, (double)a->client_allocs / n,
		    (double)a->tx_heap / n, (double)(a->bytes - a->client_bytes) / n,
		    (double)(a->allocs - a->client_allocs) / n);
	else
		dgb_note("%s/datagrid: heap_bytes_per_op not reported: a dgnode did "
		    "not log ALLOC-STATS", a->tc->name);
	if (a->topo_changes > 0)
		dgb_note("%s/datagrid: the topology changed during %d repetition(s): "
		    "a node was suspected or left; numbers are suspect", a->tc->name,
		    a->topo_changes);
}

static void run_case(const dgb_opts *o, unsigned ci, bool dg, bool redis)
{
	const struct tcase *tc = &cases[ci];
	const int reps = o->quick ? 1 : 3;
	const uint64_t window = o->quick ? 500000000u : 1000000000u;
	const uint64_t warm = o->quick ? 200000000u : 300000000u;
	tacc *acc[2];
	tline line[2];
	unsigned n = 0;
	if (dg)
		acc[n++] = tacc_new(IMPL_DATAGRID, tc, ci);
	if (redis)
		acc[n++] = tacc_new(IMPL_REDIS, tc, ci);
	/* interleaved: a burst of load from elsewhere hits one repetition of
	 * each implementation */
	for (int r = 0; r < reps; r++)
		for (unsigned k = 0; k < n; k++)
			repetition(acc[k], warm, window);
	for (unsigned k = 0; k < n; k++) {
		report(o, acc[k], warm, window, &line[k]);
		audit(tc->name, acc[k]->impl);
	}
	if (dg)
		dgb_note("%s/datagrid: p50 %.1f us (target <= 4 round trips of "
		    "dgbench transport's rtt64 p50)", tc->name, line[0].p50_us);
	if (dg && redis)
		dgb_note("%s: datagrid / redis: throughput %.2fx (target >= 1.2x%s), "
		    "p50 %.2fx", tc->name, line[0].ops_per_s / line[1].ops_per_s,
		    tc->threads >= 32 ? "" : ", set for 32c and 128c",
		    line[0].p50_us / line[1].p50_us);
	for (unsigned k = 0; k < n; k++)
		tacc_free(acc[k]);
}

/* ------------------------------------------------------------------------
 * The suite.
 * ------------------------------------------------------------------------ */
static void redis_open_conns(void)
{
	for (int t = 0; t < MAX_THREADS; t++) {
		S.rc[t] = calloc(1, sizeof(dgb_rconn));
		if (S.rc[t] == NULL)
			dgb_die("out of memory");
		S.rc[t]->fd = dgb_tcp_connect(S.rs.port, DGB_REDIS_IO_TIMEOUT_S);
		if (S.rc[t]->fd < 0)
			dgb_die("redis: connect to port %d: %s", S.rs.port, strerror(errno));
	}
}

static void redis_close_conns(void)
{
	for (int t = 0; t < MAX_THREADS; t++)
		if (S.rc[t] != NULL) {
			close(S.rc[t]->fd);
			free(S.rc[t]);
			S.rc[t] = NULL;
		}
}

/* Which implementations run at all, and can: false for one whose binary
 * is missing (with the reason on stderr). */
static void select_impls(const dgb_opts *o, bool *dg, bool *redis)
{
	const char *why;
	*dg = *redis = false;
	for (unsigned c = 0; c < NCASES; c++) {
		*dg |= dgb_selected(o, cases[c].name, "datagrid");
		*redis |= dgb_selected(o, cases[c].name, "redis");
	}
	if (*dg && !dgb_find_dgnode(o, S.dgnode, sizeof S.dgnode, &why)) {
		dgb_note("txn, datagrid: skipped: dgnode %s", why);
		*dg = false;
	}
	if (*redis && !dgb_find_redis(S.rs.path, sizeof S.rs.path, &why)) {
		dgb_note("txn, redis peer: skipped: %s", why);
		*redis = false;
	}
}

static void start(bool dg, bool redis)
{
	/* every child is forked before the client node starts its threads */
	if (redis) {
		dgb_redis_start(&S.rs, "txn/redis");
		redis_open_conns();
		redis_fill(S.rc[0]);
	}
	if (dg) {
		/* every node remembers each finished tx for 60 s: sized for this
		 * suite's rate (up to ~30k txs/s, ~2.3 finished-tx ids per tx per
		 * dgnode, 1 on the client), it reserves that memory at start
		 * (224 MiB each) instead of growing through the timed windows —
		 * what heap_bytes_per_op would count */
		S.dg.tx_done_capacity = TX_DONE_CAPACITY;
		dgb_dgcluster_start(&S.dg, S.dgnode, SUITE, CACHE_SPEC, "txn/datagrid");
		const dg_cache_config *cc = dg_cache_config_of(S.dg.cache);
		if (cc->backups != 2 || cc->write_sync != DG_FULL_SYNC ||
		    cc->atomicity != DG_TRANSACTIONAL)
			dgb_die("cache 'accounts': backups %u, write_sync %d, atomicity %d",
			    cc->backups, (int)cc->write_sync, (int)cc->atomicity);
		uint64_t t0 = dgb_now_ns();
		int64_t sum;
		unsigned k0;
		dg_err e = dg_accounts(true, &sum, &k0);
		if (e != DG_OK)
			dgb_die("datagrid: filling accounts %u..%u: %s", k0,
			    k0 + INIT_BATCH - 1, dg_strerror(e));
		dgb_note("txn/datagrid: %d accounts filled in %.0f ms", NACCOUNTS,
		    (double)(dgb_now_ns() - t0) / 1e6);
	}
}

int dgb_txn_suite(const dgb_opts *o)
{
	bool dg, redis;
	make_accounts();
	select_impls(o, &dg, &redis);
	if (!dg && !redis)
		return 0;
	start(dg, redis);
	for (unsigned c = 0; c < NCASES; c++) {
		bool cdg = dg && dgb_selected(o, cases[c].name, "datagrid");
		bool cre = redis && dgb_selected(o, cases[c].name, "redis");
		if (cdg || cre)
			run_case(o, c, cdg, cre);
	}
	/* the finished-tx memory of the participants grows by doubling, so one
	 * case's heap bytes depend on whether a doubling fell in its windows */
	if (S.heap_ops > 0)
		dgb_note("txn/datagrid: all cases: heap %.1f B per committed tx over "
		    "all nodes (target <= 512)", (double)S.heap_bytes /
		    (double)S.heap_ops);
	dgb_dgcluster_stop(&S.dg);
	redis_close_conns();
	dgb_children_stop();
	dgb_tmpdir_remove();
	return S.wrong_total ? 1 : 0;
}
