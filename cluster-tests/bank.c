/* bank.c — the bank workload of cacheclient (see bank.h).
 *
 * Keys and values are raw byte strings: "acct<i>" = the balance in
 * decimal; "x<ID>-<thread>-<n>" = "<from> <to> <amount> <from_before>
 * <to_before>", the record of one transfer (what it moved, the balances
 * it read), written in the transfer's transaction (n counts the thread's
 * attempts, so every attempt has its own record key).
 *
 * bank-run's threads: T transfer threads and one auditor.  A transfer
 * picks two distinct accounts and an amount in 1..10, begins a tx in the
 * --mode (PESSIMISTIC REPEATABLE_READ or OPTIMISTIC SERIALIZABLE), reads
 * the source then the destination (--ordered: the lower-numbered account
 * first, the order the auditor locks them in), rolls back when the source
 * holds less than the amount, else writes both balances and the record
 * and commits.  The auditor reads every account in one PESSIMISTIC
 * REPEATABLE_READ tx, acct0 first, and commits it (a read-only commit
 * validates the versions read); only a committed audit's reads are
 * checked (--batch-reads: a transfer reads its two accounts, an audit all
 * of them, with one dg_tx_get_all — the reads in flight at once, the locks
 * granted in any order); it pauses --audit-pause-ms between audits (while it holds the
 * accounts' locks, transfers wait, and a lock cycle across primaries
 * lasts until a tx's timeout).  Every tx is timed from begin to
 * the return of its commit or rollback: longer than its timeout + 2 s is
 * a violation (outlived-timeout).  --stall-ms without any committed
 * transfer is a stall (STALL lines, counted as "stalls" in the summary,
 * not a violation: the exit status does not count them).  The main thread watches the running
 * txs (STUCK lines while one runs past that bound) and, after the
 * duration, waits for the threads up to the timeout + 10 s: a thread
 * still inside a tx then is a violation (hung-tx), and the process prints
 * its summary and exits 1 without leaving the cluster.
 *
 * Logs (append-only, one line per transfer, written with one write(2) as
 * the commit returns, so they survive the client's death; <record> as in
 * the cache, begin_ms the wall-clock ms of dg_tx_begin, ms the time to
 * the commit's return):
 *   --ok-log    "<key> <record> begin_ms=.. ms=.."          commit returned DG_OK
 *   --fail-log  "<key> <ERROR> <record> begin_ms=.. ms=.."  commit returned an
 *               error (TX_UNKNOWN included: applied or not, all or nothing)
 */
#define _GNU_SOURCE
#include "bank.h"
#include "wl.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 64
#define MAX_ACCOUNTS 1000
#define MAX_AMOUNT 10
#define FAIL_PAUSE_MS 5         /* after a failed transfer */
#define SLACK_MS 2000           /* a tx may outlive its timeout by this much */
#define HANG_GRACE_MS 10000     /* after the duration: threads still in a tx */
#define PRINT_MAX 50
#define PROGRESS_MS 5000            /* violation lines printed per command */

#define ERRNAME(e) wl_err_name((e), 1, (char[48]){ 0 }, 48)

/* A decimal int64 filling exactly [p, p+n). */
static bool parse_i64(const uint8_t *p, size_t n, int64_t *out)
{
	char tmp[32];
	if (n == 0 || n >= sizeof(tmp))
		return false;
	memcpy(tmp, p, n);
	tmp[n] = 0;
	char *end;
	errno = 0;
	long long v = strtoll(tmp, &end, 10);
	if (errno != 0 || *end != 0 || !(tmp[0] == '-' || (tmp[0] >= '0' && tmp[0] <= '9')))
		return false;
	*out = v;
	return true;
}

/* A transfer's record: what it moved and the balances it read. */
struct xfer {
	unsigned from, to;
	int64_t amt, from_before, to_before;
};

/* "<from> <to> <amount> <from_before> <to_before>" at s, from != to both
 * below accounts, amount > 0; *used: the characters parsed. */
static bool parse_record(const char *s, unsigned accounts, struct xfer *x, int *used)
{
	unsigned f, t;
	long long a, fb, tb;
	*used = 0;
	if (sscanf(s, "%u %u %lld %lld %lld%n", &f, &t, &a, &fb, &tb, used) != 5 ||
	    f >= accounts || t >= accounts || f == t || a <= 0)
		return false;
	*x = (struct xfer){ f, t, a, fb, tb };
	return true;
}

static int acct_key(char *buf, size_t cap, unsigned i)
{
	return snprintf(buf, cap, "acct%u", i);
}

/* Reads account i inside tx into *v.  DG_OK with *bad set when the value
 * is not a decimal; DG_ERR_NOT_FOUND when absent (tx still active); any
 * other error rolled tx back. */
static dg_err tx_balance(dg_tx *tx, dg_cache *c, unsigned i, dg_buf *b, int64_t *v, bool *bad)
{
	char key[24];
	int kl = acct_key(key, sizeof(key), i);
	dg_buf_reset(b);
	dg_err e = dg_tx_get(tx, c, key, (size_t)kl, b);
	if (e == DG_OK)
		*bad = !parse_i64(b->data, b->len, v);
	return e;
}

/* Reads accounts idx[0..n) inside tx with one dg_tx_get_all (every read
 * in flight at once): v[k], bad[k] (not a decimal) and found[k]; errors
 * as tx_balance's (NOT_FOUND is found[k] false). */
static dg_err tx_balances(dg_tx *tx, dg_cache *c, const unsigned *idx, unsigned n, dg_buf *b,
    int64_t *v, bool *bad, bool *found)
{
	char (*keys)[24] = calloc(n ? n : 1, sizeof(*keys));
	dg_kv *kv = calloc(n ? n : 1, sizeof(*kv));
	dg_err e = keys != NULL && kv != NULL ? DG_OK : DG_ERR_NOMEM;
	for (unsigned k = 0; k < n && e == DG_OK; k++) {
		int kl = acct_key(keys[k], sizeof(keys[k]), idx[k]);
		kv[k] = (dg_kv){ keys[k], (size_t)kl, NULL, 0 };
	}
	dg_buf_reset(b);
	if (e == DG_OK)
		e = dg_tx_get_all(tx, c, kv, n, b, NULL);
	for (unsigned k = 0; k < n && e == DG_OK; k++) {
		found[k] = kv[k].val != NULL;
		bad[k] = found[k] && !parse_i64(kv[k].val, kv[k].vlen, &v[k]);
	}
	free(keys);
	free(kv);
	return e;
}

static dg_err tx_set_balance(dg_tx *tx, dg_cache *c, unsigned i, int64_t v)
{
	char key[24], val[32];
	int kl = acct_key(key, sizeof(key), i);
	int vl = snprintf(val, sizeof(val), "%" PRId64, v);
	return dg_tx_put(tx, c, key, (size_t)kl, val, (size_t)vl);
}

/* ---- bank-init ---- */

int bank_init(const struct bank_opts *o)
{
	uint64_t t0 = wl_now_ms(), end = t0 + o->duration_s * 1000u;
	unsigned attempts = 0;
	dg_err e = DG_ERR_TIMEOUT;
	while (wl_now_ms() < end) {
		attempts++;
		dg_tx *tx;
		e = dg_tx_begin(o->node, DG_PESSIMISTIC, DG_REPEATABLE_READ, o->timeout_ms,
		    "bank-init", &tx);
		if (e != DG_OK) {
			fprintf(stderr, "cacheclient: bank-init: begin: %s\n", dg_strerror(e));
			return 1;
		}
		for (unsigned i = 0; i < o->accounts && e == DG_OK; i++)
			e = tx_set_balance(tx, o->cache, i, o->balance);
		e = e == DG_OK ? dg_tx_commit(tx) : (dg_tx_rollback(tx), e);
		if (e == DG_OK)
			break;
		wl_out("bank-init attempt %u: %s (retrying)\n", attempts, ERRNAME(e));
		wl_sleep_us(1000u * 100);
	}
	if (e != DG_OK) {
		wl_out("bank-init failed after %u attempts in %" PRIu64 " ms: %s\n", attempts,
		    wl_now_ms() - t0, ERRNAME(e));
		return 1;
	}
	wl_out("bank-init accounts=%u balance=%" PRId64 " total=%" PRId64 " attempts=%u ms=%" PRIu64
	    "\n", o->accounts, o->balance, o->balance * (int64_t)o->accounts, attempts,
	    wl_now_ms() - t0);
	return 0;
}

/* ---- bank-run ---- */

struct run {
	const struct bank_opts *o;
	uint64_t limit_ms;          /* a tx longer than this outlived its timeout */
	atomic_bool stop;
	int ok_fd, fail_fd;
	atomic_uint_fast64_t transfers, committed, skipped, unknown, lost_credit;
	atomic_uint_fast64_t failed[DG_ERR__COUNT];       /* transfers, any stage */
	atomic_uint_fast64_t audits, audit_failed[DG_ERR__COUNT];
	atomic_uint_fast64_t violations, printed, max_tx_ms, log_errors;
	atomic_uint_fast64_t last_commit_ms; /* monotonic ms of the last DG_OK transfer */
	uint64_t stalls;            /* main thread: periods of stall_ms without one */
	bool stalled;
};

struct rthread {
	struct run *r;
	unsigned index;             /* transfer threads 0..T-1; the auditor T */
	bool auditor;
	pthread_t tid;
	atomic_uint_fast64_t tx_start; /* monotonic ms of the running tx's begin; 0: none */
	atomic_uint_fast64_t tx_n;
	uint64_t stuck_reported;    /* main thread: the tx_start reported STUCK */
	atomic_bool done;
};

static void violation(struct run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void violation(struct run *r, const char *fmt, ...)
{
	atomic_fetch_add(&r->violations, 1);
	if (atomic_fetch_add(&r->printed, 1) >= PRINT_MAX)
		return;
	va_list ap;
	va_start(ap, fmt);
	wl_vout(fmt, ap);
	va_end(ap);
}

static void tx_label(const struct rthread *t, uint64_t n, char *buf, size_t cap)
{
	if (t->auditor)
		snprintf(buf, cap, "audit%s-%" PRIu64, t->r->o->client_id, n);
	else
		snprintf(buf, cap, "x%s-%u-%" PRIu64, t->r->o->client_id, t->index, n);
}

static void tx_begun(struct rthread *t, uint64_t n, uint64_t t0)
{
	atomic_store(&t->tx_n, n);
	atomic_store(&t->tx_start, t0);
}

/* The tx named label (begun at t0) returned e: times it. */
static void tx_end(struct rthread *t, const char *label, dg_err e, uint64_t t0)
{
	struct run *r = t->r;
	uint64_t ms = wl_now_ms() - t0;
	atomic_store(&t->tx_start, 0);
	uint64_t max = atomic_load(&r->max_tx_ms);
	while (ms > max && !atomic_compare_exchange_weak(&r->max_tx_ms, &max, ms))
		;
	if (ms > r->limit_ms)
		violation(r, "VIOLATION outlived-timeout tx=%s result=%s ms=%" PRIu64
		    " timeout_ms=%u at_ms=%" PRIu64 "\n", label, ERRNAME(e), ms, r->o->timeout_ms,
		    wl_wall_ms());
}

static void log_line(struct run *r, int fd, const char *line, size_t len)
{
	if (fd < 0)
		return;
	if (write(fd, line, len) != (ssize_t)len)
		atomic_fetch_add(&r->log_errors, 1);
}

static void transfer(struct rthread *t, uint64_t n, uint64_t *rs, dg_buf *b)
{
	struct run *r = t->r;
	const struct bank_opts *o = r->o;
	dg_cache *c = o->cache;
	unsigned from = (unsigned)(wl_rnd(rs) % o->accounts);
	unsigned to = (unsigned)(wl_rnd(rs) % (o->accounts - 1));
	if (to >= from)
		to++;
	/* the account read (and, PESSIMISTIC, locked) first */
	unsigned first = o->ordered && to < from ? to : from, second = first == from ? to : from;
	int64_t amt = 1 + (int64_t)(wl_rnd(rs) % MAX_AMOUNT);
	char key[48];
	tx_label(t, n, key, sizeof(key));
	uint64_t t0 = wl_now_ms();
	tx_begun(t, n, t0);
	atomic_fetch_add(&r->transfers, 1);
	dg_tx *tx;
	dg_err e = dg_tx_begin(o->node, o->conc, o->iso, o->timeout_ms, key, &tx);
	if (e != DG_OK) {
		atomic_fetch_add(&r->failed[e], 1);
		tx_end(t, key, e, t0);
		wl_sleep_us(1000u * FAIL_PAUSE_MS);
		return;
	}
	int64_t v1 = 0, v2 = 0;
	bool bad = false;
	unsigned badacct = first;
	if (o->batch_reads) {
		unsigned idx[2] = { first, second };
		int64_t v[2] = { 0, 0 };
		bool bd[2] = { false, false }, fd[2] = { false, false };
		e = tx_balances(tx, c, idx, 2, b, v, bd, fd);
		v1 = v[0];
		v2 = v[1];
		if (e == DG_OK && (!fd[0] || bd[0] || !fd[1] || bd[1])) {
			badacct = !fd[0] || bd[0] ? first : second;
			bad = bd[0] || bd[1];
			e = bad ? DG_OK : DG_ERR_NOT_FOUND;
		}
	} else {
		e = tx_balance(tx, c, first, b, &v1, &bad);
		if (e == DG_OK && !bad) {
			badacct = second;
			e = tx_balance(tx, c, second, b, &v2, &bad);
		}
	}
	int64_t vf = first == from ? v1 : v2, vt = first == from ? v2 : v1;
	if (e == DG_ERR_NOT_FOUND || bad) {
		dg_tx_rollback(tx);
		violation(r, "VIOLATION bad-account tx=%s acct%u %s at_ms=%" PRIu64 "\n", key, badacct,
		    bad ? "holds no decimal" : "not found", wl_wall_ms());
		tx_end(t, key, e, t0);
		return;
	}
	if (e != DG_OK) {
		dg_tx_rollback(tx);
		atomic_fetch_add(&r->failed[e], 1);
		tx_end(t, key, e, t0);
		wl_sleep_us(1000u * FAIL_PAUSE_MS);
		return;
	}
	if (vf < amt) {
		e = dg_tx_rollback(tx);
		atomic_fetch_add(&r->skipped, 1);
		tx_end(t, key, e, t0);
		return;
	}
	bool lose = o->lose_credit_every != 0 && (n + 1) % o->lose_credit_every == 0;
	char rec[96];
	int rl = snprintf(rec, sizeof(rec), "%u %u %" PRId64 " %" PRId64 " %" PRId64, from, to, amt,
	    vf, vt);
	e = tx_set_balance(tx, c, from, vf - amt);
	if (e == DG_OK && !lose)
		e = tx_set_balance(tx, c, to, vt + amt);
	if (e == DG_OK)
		e = dg_tx_put(tx, c, key, strlen(key), rec, (size_t)rl);
	if (e != DG_OK) {
		dg_tx_rollback(tx);
		atomic_fetch_add(&r->failed[e], 1);
		tx_end(t, key, e, t0);
		wl_sleep_us(1000u * FAIL_PAUSE_MS);
		return;
	}
	uint64_t begun_at = wl_wall_ms() - (wl_now_ms() - t0);
	e = dg_tx_commit(tx);
	uint64_t ms = wl_now_ms() - t0;
	tx_end(t, key, e, t0);
	char line[256];
	int ll;
	if (e == DG_OK) {
		atomic_fetch_add(&r->committed, 1);
		atomic_store(&r->last_commit_ms, wl_now_ms());
		if (lose)
			atomic_fetch_add(&r->lost_credit, 1);
		ll = snprintf(line, sizeof(line), "%s %s begin_ms=%" PRIu64 " ms=%" PRIu64 "\n", key,
		    rec, begun_at, ms);
		log_line(r, r->ok_fd, line, (size_t)ll);
		return;
	}
	if (e == DG_ERR_TX_UNKNOWN)
		atomic_fetch_add(&r->unknown, 1);
	else
		atomic_fetch_add(&r->failed[e], 1);
	ll = snprintf(line, sizeof(line), "%s %s %s begin_ms=%" PRIu64 " ms=%" PRIu64 "\n", key,
	    ERRNAME(e), rec, begun_at, ms);
	log_line(r, r->fail_fd, line, (size_t)ll);
	wl_sleep_us(1000u * FAIL_PAUSE_MS);
}

static void audit(struct rthread *t, uint64_t n, dg_buf *b, int64_t *vals, bool *ok)
{
	struct run *r = t->r;
	const struct bank_opts *o = r->o;
	char label[48];
	tx_label(t, n, label, sizeof(label));
	uint64_t t0 = wl_now_ms();
	tx_begun(t, n, t0);
	dg_tx *tx;
	dg_err e = dg_tx_begin(o->node, DG_PESSIMISTIC, DG_REPEATABLE_READ, o->timeout_ms, label,
	    &tx);
	if (e != DG_OK) {
		atomic_fetch_add(&r->audit_failed[e], 1);
		tx_end(t, label, e, t0);
		return;
	}
	if (o->batch_reads) {
		unsigned *idx = calloc(o->accounts, sizeof(*idx));
		bool *bad = calloc(o->accounts, sizeof(*bad));
		e = idx != NULL && bad != NULL ? DG_OK : DG_ERR_NOMEM;
		for (unsigned i = 0; i < o->accounts && e == DG_OK; i++)
			idx[i] = i;
		if (e == DG_OK)
			e = tx_balances(tx, o->cache, idx, o->accounts, b, vals, bad, ok);
		for (unsigned i = 0; i < o->accounts && e == DG_OK; i++)
			ok[i] = ok[i] && !bad[i];
		free(idx);
		free(bad);
	}
	for (unsigned i = 0; i < o->accounts && e == DG_OK && !o->batch_reads; i++) {
		bool bad = false;
		e = tx_balance(tx, o->cache, i, b, &vals[i], &bad);
		ok[i] = e == DG_OK && !bad;
		if (e == DG_ERR_NOT_FOUND)
			e = DG_OK;
	}
	e = e == DG_OK ? dg_tx_commit(tx) : (dg_tx_rollback(tx), e);
	tx_end(t, label, e, t0);
	if (e != DG_OK) {
		atomic_fetch_add(&r->audit_failed[e], 1);
		return;
	}
	atomic_fetch_add(&r->audits, 1);
	int64_t total = 0;
	bool broken = false;
	for (unsigned i = 0; i < o->accounts; i++) {
		if (!ok[i] || vals[i] < 0)
			broken = true;
		if (ok[i])
			total += vals[i];
	}
	if (!broken && total == o->balance * (int64_t)o->accounts)
		return;
	char list[MAX_ACCOUNTS * 8 + 1];
	size_t len = 0;
	list[0] = 0;
	for (unsigned i = 0; i < o->accounts && len + 24 < sizeof(list); i++) {
		if (ok[i])
			len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%" PRId64,
			    i ? "," : "", vals[i]);
		else
			len += (size_t)snprintf(list + len, sizeof(list) - len, "%s?", i ? "," : "");
	}
	violation(r, "VIOLATION audit tx=%s total=%" PRId64 " want=%" PRId64 " balances=%s at_ms=%"
	    PRIu64 "\n", label, total, o->balance * (int64_t)o->accounts, list, wl_wall_ms());
}

static void *run_thread(void *arg)
{
	struct rthread *t = arg;
	struct run *r = t->r;
	const struct bank_opts *o = r->o;
	uint64_t rs = wl_mix(o->rand_seed ^ wl_mix(t->index + 1)) | 1;
	dg_buf b;
	dg_buf_init(&b);
	int64_t vals[MAX_ACCOUNTS];
	bool ok[MAX_ACCOUNTS];
	for (uint64_t n = 0; !atomic_load(&r->stop); n++) {
		if (t->auditor) {
			for (uint64_t end = wl_now_ms() + o->audit_pause_ms;
			    wl_now_ms() < end && !atomic_load(&r->stop);)
				wl_sleep_us(1000u * 10);
			if (!atomic_load(&r->stop))
				audit(t, n, &b, vals, ok);
		} else {
			transfer(t, n, &rs, &b);
		}
	}
	dg_buf_free(&b);
	atomic_store(&t->done, true);
	return NULL;
}

/* "NAME:n,NAME:n" for the non-zero counters, or "none". */
static void counts(atomic_uint_fast64_t *c, char *buf, size_t cap)
{
	size_t len = 0;
	buf[0] = 0;
	for (int e = 0; e < DG_ERR__COUNT; e++) {
		uint64_t v = atomic_load(&c[e]);
		if (v != 0 && len + 48 < cap)
			len += (size_t)snprintf(buf + len, cap - len, "%s%s:%" PRIu64, len ? "," : "",
			    ERRNAME((dg_err)e), v);
	}
	if (len == 0)
		snprintf(buf, cap, "none");
}

static void summary(struct run *r, uint64_t ms)
{
	char failed[1024], afailed[1024];
	counts(r->failed, failed, sizeof(failed));
	counts(r->audit_failed, afailed, sizeof(afailed));
	wl_out("bank-run summary client=%s mode=%s ms=%" PRIu64 " transfers=%" PRIu64
	    " committed=%" PRIu64 " skipped=%" PRIu64 " unknown=%" PRIu64 " failed=%s audits=%"
	    PRIu64 " audit_failed=%s max_tx_ms=%" PRIu64 " lost_credit=%" PRIu64
	    " log_errors=%" PRIu64 " stalls=%" PRIu64 " violations=%" PRIu64 "\n",
	    r->o->client_id, r->o->mode, ms, atomic_load(&r->transfers),
	    atomic_load(&r->committed), atomic_load(&r->skipped), atomic_load(&r->unknown), failed,
	    atomic_load(&r->audits), afailed, atomic_load(&r->max_tx_ms),
	    atomic_load(&r->lost_credit), atomic_load(&r->log_errors), r->stalls,
	    atomic_load(&r->violations));
}

/* Every PROGRESS_MS: the counters so far (a stall after a kill shows). */
static void progress(struct run *r, uint64_t *next)
{
	uint64_t now = wl_now_ms();
	if (now < *next)
		return;
	*next = now + PROGRESS_MS;
	char failed[1024];
	counts(r->failed, failed, sizeof(failed));
	wl_out("PROGRESS at_ms=%" PRIu64 " transfers=%" PRIu64 " committed=%" PRIu64 " unknown=%"
	    PRIu64 " failed=%s audits=%" PRIu64 " violations=%" PRIu64 "\n", wl_wall_ms(),
	    atomic_load(&r->transfers), atomic_load(&r->committed), atomic_load(&r->unknown),
	    failed, atomic_load(&r->audits), atomic_load(&r->violations));
}

/* Main thread: --stall-ms without a committed transfer is a stall (one
 * STALL line when it starts, STALL-END when transfers commit again). */
static void stall_check(struct run *r, uint64_t t0)
{
	if (r->o->stall_ms == 0)
		return;
	uint64_t now = wl_now_ms(), last = atomic_load(&r->last_commit_ms);
	if (last < t0)
		last = t0;
	if (!r->stalled && now - last > r->o->stall_ms) {
		r->stalled = true;
		r->stalls++;
		wl_out("STALL no transfer committed for %" PRIu64 " ms at_ms=%" PRIu64 "\n", now - last,
		    wl_wall_ms());
	} else if (r->stalled && now - last <= r->o->stall_ms) {
		r->stalled = false;
		wl_out("STALL-END transfers commit again at_ms=%" PRIu64 "\n", wl_wall_ms());
	}
}

/* Main thread: a tx running past the bound is reported (once) as STUCK. */
static void watch(struct rthread *ts, unsigned n)
{
	uint64_t now = wl_now_ms();
	for (unsigned i = 0; i < n; i++) {
		uint64_t start = atomic_load(&ts[i].tx_start);
		if (start == 0 || start == ts[i].stuck_reported || now - start <= ts[i].r->limit_ms)
			continue;
		ts[i].stuck_reported = start;
		char label[48];
		tx_label(&ts[i], atomic_load(&ts[i].tx_n), label, sizeof(label));
		wl_out("STUCK tx=%s running_ms=%" PRIu64 " timeout_ms=%u at_ms=%" PRIu64 "\n", label,
		    now - start, ts[i].r->o->timeout_ms, wl_wall_ms());
	}
}

static int open_log(const char *path)
{
	if (path == NULL)
		return -1;
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0)
		fprintf(stderr, "cacheclient: %s: %s\n", path, strerror(errno));
	return fd;
}

int bank_run(const struct bank_opts *o)
{
	static struct run r;
	static struct rthread ts[MAX_THREADS + 1];
	memset(&r, 0, sizeof(r));
	r.o = o;
	r.limit_ms = (uint64_t)o->timeout_ms + SLACK_MS;
	r.ok_fd = open_log(o->ok_log);
	r.fail_fd = open_log(o->fail_log);
	if ((o->ok_log != NULL && r.ok_fd < 0) || (o->fail_log != NULL && r.fail_fd < 0))
		return 1;
	wl_out("bank-run client=%s mode=%s reads=%s%s threads=%u audit_pause_ms=%u accounts=%u balance=%" PRId64 " timeout_ms=%u"
	    " duration_s=%" PRIu64 " rand_seed=%" PRIu64 " at_ms=%" PRIu64 "%s\n", o->client_id,
	    o->mode, o->ordered ? "ordered" : "source-first", o->batch_reads ? ",batched" : "", o->threads, o->audit_pause_ms, o->accounts, o->balance, o->timeout_ms, o->duration_s,
	    o->rand_seed, wl_wall_ms(),
	    o->lose_credit_every ? " (LOSING CREDITS: testing the checker)" : "");
	unsigned n = o->threads + 1, started = 0;
	uint64_t t0 = wl_now_ms();
	for (unsigned i = 0; i < n; i++) {
		ts[i] = (struct rthread){ .r = &r, .index = i, .auditor = i == o->threads };
		int rc = pthread_create(&ts[i].tid, NULL, run_thread, &ts[i]);
		if (rc != 0) {
			fprintf(stderr, "cacheclient: pthread_create: %s\n", strerror(rc));
			break;
		}
		started++;
	}
	uint64_t end = t0 + (started == n ? o->duration_s * 1000u : 0), next = t0 + PROGRESS_MS;
	while (wl_now_ms() < end) {
		wl_sleep_us(1000u * 100);
		watch(ts, started);
		progress(&r, &next);
		stall_check(&r, t0);
	}
	atomic_store(&r.stop, true);
	uint64_t hang_end = wl_now_ms() + o->timeout_ms + HANG_GRACE_MS;
	for (;;) {
		unsigned running = 0;
		for (unsigned i = 0; i < started; i++)
			running += !atomic_load(&ts[i].done);
		if (running == 0)
			break;
		if (wl_now_ms() >= hang_end) {
			for (unsigned i = 0; i < started; i++) {
				uint64_t start = atomic_load(&ts[i].tx_start);
				if (atomic_load(&ts[i].done) || start == 0)
					continue;
				char label[48];
				tx_label(&ts[i], atomic_load(&ts[i].tx_n), label, sizeof(label));
				violation(&r, "VIOLATION hung-tx tx=%s running_ms=%" PRIu64
				    " timeout_ms=%u at_ms=%" PRIu64 "\n", label, wl_now_ms() - start,
				    o->timeout_ms, wl_wall_ms());
			}
			summary(&r, wl_now_ms() - t0);
			wl_out("bank-run: %u thread(s) still inside a transaction %u ms after the end: "
			    "exiting without leaving the cluster\n", running,
			    o->timeout_ms + HANG_GRACE_MS);
			_exit(1);
		}
		wl_sleep_us(1000u * 50);
		watch(ts, started);
	}
	for (unsigned i = 0; i < started; i++)
		pthread_join(ts[i].tid, NULL);
	summary(&r, wl_now_ms() - t0);
	if (r.ok_fd >= 0)
		close(r.ok_fd);
	if (r.fail_fd >= 0)
		close(r.fail_fd);
	return started == n && atomic_load(&r.violations) == 0 &&
	    atomic_load(&r.log_errors) == 0 ? 0 : 1;
}

/* ---- bank-verify ----
 *
 * Beyond the total and the logs, two checks over the records in the cache:
 *   ledger  each balance is B plus what the records moved;
 *   chain   each account's balances form one history: every record read a
 *           value (the *_before of its record) and wrote one, so, per
 *           value, the times it was read (by a record, or as the final
 *           balance) equal the times it was written (by a record, or as
 *           the initial B).  A value read more often than written: two
 *           transfers read the same balance (a lost update), or the
 *           transfer that wrote it has no record (the transfers of the
 *           logs absent from the cache, acknowledged or TX_UNKNOWN, that
 *           would have written it are named).  A value
 *           written more often than read: a write nobody saw (lost, or
 *           overwritten).
 * For an account whose chain breaks, CHAIN-DETAIL lines (diagnostic, not
 * counted) rebuild its history from the records (each step: the earliest
 * commit, by the logs' times, that read the current balance) and name
 * where it breaks: a record that read what no record before it wrote,
 * and the record whose write nobody read.
 */

struct xrec {                   /* a record found in the cache */
	char *key;                  /* NULL: empty slot */
	struct xfer x;
	bool valid;                 /* x parsed */
	bool logged;                /* named by some log */
	uint64_t begin_ms, end_ms;  /* from the log: dg_tx_begin, commit's return */
	char status[16];            /* from the log: "OK" or the commit's error */
};

struct xset {
	struct xrec *slots;
	size_t cap, n;
};

static uint64_t hash_str(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
	return h;
}

static struct xrec *xset_find(struct xset *x, const char *key, size_t n)
{
	if (x->cap == 0)
		return NULL;
	for (size_t i = hash_str(key, n) & (x->cap - 1);; i = (i + 1) & (x->cap - 1)) {
		struct xrec *r = &x->slots[i];
		if (r->key == NULL)
			return NULL;
		if (strlen(r->key) == n && memcmp(r->key, key, n) == 0)
			return r;
	}
}

/* Adds key (n bytes); NULL on allocation failure or when present (*dup). */
static struct xrec *xset_add(struct xset *x, const char *key, size_t n, bool *dup)
{
	*dup = false;
	if (xset_find(x, key, n) != NULL) {
		*dup = true;
		return NULL;
	}
	if ((x->n + 1) * 2 > x->cap) {
		size_t cap = x->cap ? x->cap * 2 : 1024;
		struct xrec *s = calloc(cap, sizeof(*s));
		if (s == NULL)
			return NULL;
		for (size_t i = 0; i < x->cap; i++) {
			struct xrec *o = &x->slots[i];
			if (o->key == NULL)
				continue;
			size_t j = hash_str(o->key, strlen(o->key)) & (cap - 1);
			while (s[j].key != NULL)
				j = (j + 1) & (cap - 1);
			s[j] = *o;
		}
		free(x->slots);
		x->slots = s;
		x->cap = cap;
	}
	size_t i = hash_str(key, n) & (x->cap - 1);
	while (x->slots[i].key != NULL)
		i = (i + 1) & (x->cap - 1);
	if ((x->slots[i].key = strndup(key, n)) == NULL)
		return NULL;
	x->n++;
	return &x->slots[i];
}

static void xset_free(struct xset *x)
{
	for (size_t i = 0; i < x->cap; i++)
		free(x->slots[i].key);
	free(x->slots);
	*x = (struct xset){ 0 };
}

struct logent {                 /* a logged transfer whose record is not in the cache */
	char key[48];
	char status[32];            /* "OK" or the commit's error */
	char when[64];              /* "begin_ms=.. ms=.." */
	struct xfer x;
};

struct verify {
	const struct bank_opts *o;
	unsigned problems, printed;
	struct logent *absent;
	size_t nabsent, cabsent;
};

static void problem(struct verify *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void problem(struct verify *v, const char *fmt, ...)
{
	v->problems++;
	if (v->printed++ >= PRINT_MAX)
		return;
	va_list ap;
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	fflush(stdout);
}

/* Reads every account in one PESSIMISTIC REPEATABLE_READ tx, retried
 * until it commits or end passes. */
static dg_err read_accounts(const struct bank_opts *o, uint64_t end, int64_t *vals, bool *ok)
{
	dg_buf b;
	dg_buf_init(&b);
	dg_err e = DG_ERR_TIMEOUT;
	for (unsigned attempt = 1; wl_now_ms() < end; attempt++) {
		dg_tx *tx;
		if ((e = dg_tx_begin(o->node, DG_PESSIMISTIC, DG_REPEATABLE_READ, o->timeout_ms,
		    "bank-verify", &tx)) != DG_OK)
			break;
		for (unsigned i = 0; i < o->accounts && e == DG_OK; i++) {
			bool bad = false;
			e = tx_balance(tx, o->cache, i, &b, &vals[i], &bad);
			ok[i] = e == DG_OK && !bad;
			if (e == DG_ERR_NOT_FOUND)
				e = DG_OK;
		}
		e = e == DG_OK ? dg_tx_commit(tx) : (dg_tx_rollback(tx), e);
		if (e == DG_OK)
			break;
		wl_out("bank-verify: reading the accounts, attempt %u: %s (retrying)\n", attempt,
		    ERRNAME(e));
		wl_sleep_us(1000u * 100);
	}
	dg_buf_free(&b);
	return e;
}

/* Every record of the cache into x; other keys counted in *others. */
static dg_err scan_records(struct verify *v, struct xset *x, uint64_t *others)
{
	dg_scan *sc;
	dg_err e = dg_scan_open(v->o->cache, 0, &sc);
	if (e != DG_OK)
		return e;
	const uint8_t *k, *val;
	size_t kl, vl;
	while ((e = dg_scan_next(sc, &k, &kl, &val, &vl)) == DG_OK) {
		const uint8_t *kp, *vp;
		size_t kn, vn;
		if (dg_bytes_of(k, kl, &kp, &kn) != DG_OK || dg_bytes_of(val, vl, &vp, &vn) != DG_OK) {
			problem(v, "VIOLATION bad-entry: a key or value is not a byte string\n");
			continue;
		}
		if (kn == 0 || kp[0] != 'x') {
			if (!(kn > 4 && memcmp(kp, "acct", 4) == 0))
				(*others)++;
			continue;
		}
		char rec[128];
		snprintf(rec, sizeof(rec), "%.*s", vn < 100 ? (int)vn : 100, (const char *)vp);
		bool dup;
		struct xrec *r = xset_add(x, (const char *)kp, kn, &dup);
		if (dup) {
			problem(v, "VIOLATION scan returned %.*s twice\n", (int)kn, (const char *)kp);
			continue;
		}
		if (r == NULL) {
			e = DG_ERR_NOMEM;
			break;
		}
		int used;
		r->valid = parse_record(rec, v->o->accounts, &r->x, &used) && rec[used] == 0;
		if (!r->valid)
			problem(v, "VIOLATION bad-record %s = \"%s\"\n", r->key, rec);
	}
	dg_scan_close(sc);
	return e == DG_ERR_NOT_FOUND ? DG_OK : e;
}

/* Whether key is in the cache, by a plain get (to tell a scan's miss from
 * a lost record). */
static dg_err present(dg_cache *c, const char *key, bool *found)
{
	dg_buf b;
	dg_buf_init(&b);
	dg_err e = dg_cache_get(c, key, strlen(key), &b);
	dg_buf_free(&b);
	*found = e == DG_OK;
	return e == DG_ERR_NOT_FOUND ? DG_OK : e;
}

static void add_absent(struct verify *v, const char *key, const char *status,
    const struct xfer *x, const char *when)
{
	if (v->nabsent == v->cabsent) {
		size_t cap = v->cabsent ? v->cabsent * 2 : 256;
		struct logent *a = realloc(v->absent, cap * sizeof(*a));
		if (a == NULL)
			return;
		v->absent = a;
		v->cabsent = cap;
	}
	struct logent *l = &v->absent[v->nabsent++];
	snprintf(l->key, sizeof(l->key), "%s", key);
	snprintf(l->status, sizeof(l->status), "%s", status);
	snprintf(l->when, sizeof(l->when), "%s", when);
	l->x = *x;
}

struct logstats {
	uint64_t lines, acked, acked_missing, scan_missed, failed, failed_applied;
	uint64_t unknown, unknown_applied;
};

static bool same_xfer(const struct xfer *a, const struct xfer *b)
{
	return a->from == b->from && a->to == b->to && a->amt == b->amt &&
	    a->from_before == b->from_before && a->to_before == b->to_before;
}

/* One log: ok (each key must be there, as logged) or fail (a key whose
 * commit failed with anything but TX_UNKNOWN must not be there).  The
 * logged transfers absent from the cache go to v->absent. */
static int check_log(struct verify *v, struct xset *x, const char *path, bool ok_log,
    struct logstats *st)
{
	FILE *f = fopen(path, "r");
	if (f == NULL) {
		wl_out("bank-verify: %s: %s\n", path, strerror(errno));
		return -1;
	}
	char line[320];
	while (fgets(line, sizeof(line), f) != NULL) {
		size_t len = strcspn(line, "\n");
		line[len] = 0;
		if (len == 0)
			continue;
		st->lines++;
		char key[48], err[32] = "OK";
		int used = 0, rused = 0;
		int got = ok_log ? sscanf(line, "%47s %n", key, &used) :
		    sscanf(line, "%47s %31s %n", key, err, &used);
		struct xfer lx;
		if (got != (ok_log ? 1 : 2) || !parse_record(line + used, v->o->accounts, &lx, &rused)) {
			problem(v, "bank-verify: %s: bad line \"%s\"\n", path, line);
			continue;
		}
		const char *rec = line + used, *when = line + used + rused;
		while (*when == ' ')
			when++;
		struct xrec *r = xset_find(x, key, strlen(key));
		if (r != NULL) {
			unsigned long long b = 0, ms = 0;
			r->logged = true;
			snprintf(r->status, sizeof(r->status), "%s", err);
			if (sscanf(when, "begin_ms=%llu ms=%llu", &b, &ms) == 2) {
				r->begin_ms = b;
				r->end_ms = b + ms;
			}
		}
		if (ok_log) {
			st->acked++;
			if (r != NULL) {
				if (r->valid && !same_xfer(&r->x, &lx))
					problem(v, "VIOLATION wrong-record %s: logged \"%.*s\", the cache has "
					    "%u %u %" PRId64 " %" PRId64 " %" PRId64 "\n", key, rused, rec,
					    r->x.from, r->x.to, r->x.amt, r->x.from_before, r->x.to_before);
				continue;
			}
			bool found = false;
			dg_err e = present(v->o->cache, key, &found);
			if (e != DG_OK) {
				problem(v, "bank-verify: get %s: %s\n", key, ERRNAME(e));
			} else if (found) {
				st->scan_missed++;
				problem(v, "VIOLATION scan-missed %s: a get finds it, the scan did not\n",
				    key);
			} else {
				st->acked_missing++;
				add_absent(v, key, err, &lx, when);
				problem(v, "VIOLATION lost-ack %s (%.*s; %s): its commit returned DG_OK, "
				    "its record is not in the cache\n", key, rused, rec, when);
			}
			continue;
		}
		bool applied = r != NULL;
		if (!applied)
			add_absent(v, key, err, &lx, when);
		if (strcmp(err, "TX_UNKNOWN") == 0) {
			st->unknown++;
			st->unknown_applied += applied;
			continue;
		}
		st->failed++;
		if (applied) {
			st->failed_applied++;
			problem(v, "VIOLATION failed-but-applied %s (%.*s; %s): its commit returned %s, "
			    "its record is in the cache\n", key, rused, rec, when, err);
		}
	}
	fclose(f);
	return 0;
}

struct ev {                     /* a balance of one account read or written */
	int64_t v;
	int read;                   /* 1 read, 0 written */
	const struct xrec *r;       /* NULL: the initial or the final balance */
};

static int ev_cmp(const void *a, const void *b)
{
	const struct ev *x = a, *y = b;
	if (x->v != y->v)
		return x->v < y->v ? -1 : 1;
	return x->read - y->read;
}

/* Appends " key(old->new)" for ev e of account a to buf. */
static size_t ev_str(const struct ev *e, unsigned a, char *buf, size_t len, size_t cap)
{
	if (len + 80 >= cap)
		return len;
	if (e->r == NULL)
		return len + (size_t)snprintf(buf + len, cap - len, " %s",
		    e->read ? "(final)" : "(initial)");
	const struct xfer *x = &e->r->x;
	int64_t old = x->from == a ? x->from_before : x->to_before;
	int64_t now = x->from == a ? x->from_before - x->amt : x->to_before + x->amt;
	return len + (size_t)snprintf(buf + len, cap - len, " %s(%" PRId64 "->%" PRId64 ")",
	    e->r->key, old, now);
}

/* The chain check of account a (final balance fin); returns the number of
 * values whose reads and writes differ. */
static unsigned chain(struct verify *v, struct xset *x, unsigned a, int64_t fin)
{
	size_t n = 2;
	for (size_t i = 0; i < x->cap; i++)
		n += x->slots[i].key != NULL && x->slots[i].valid &&
		    (x->slots[i].x.from == a || x->slots[i].x.to == a) ? 2 : 0;
	struct ev *ev = malloc(n * sizeof(*ev));
	if (ev == NULL) {
		problem(v, "bank-verify: out of memory for the chain of acct%u\n", a);
		return 1;
	}
	size_t k = 0;
	ev[k++] = (struct ev){ v->o->balance, 0, NULL };
	ev[k++] = (struct ev){ fin, 1, NULL };
	for (size_t i = 0; i < x->cap; i++) {
		const struct xrec *r = &x->slots[i];
		if (r->key == NULL || !r->valid || (r->x.from != a && r->x.to != a))
			continue;
		int64_t old = r->x.from == a ? r->x.from_before : r->x.to_before;
		int64_t now = r->x.from == a ? old - r->x.amt : old + r->x.amt;
		ev[k++] = (struct ev){ old, 1, r };
		ev[k++] = (struct ev){ now, 0, r };
	}
	qsort(ev, k, sizeof(ev[0]), ev_cmp);
	unsigned bad = 0;
	for (size_t i = 0; i < k;) {
		size_t j = i;
		unsigned reads = 0, writes = 0;
		for (; j < k && ev[j].v == ev[i].v; j++)
			*(ev[j].read ? &reads : &writes) += 1;
		if (reads != writes) {
			bad++;
			char buf[1024];
			size_t len = (size_t)snprintf(buf, sizeof(buf), "VIOLATION chain acct%u value %"
			    PRId64 " read %u times, written %u times; written by", a, ev[i].v, reads,
			    writes);
			for (size_t q = i, shown = 0; q < j && shown < 4; q++)
				if (!ev[q].read) {
					len = ev_str(&ev[q], a, buf, len, sizeof(buf));
					shown++;
				}
			if (len + 16 < sizeof(buf))
				len += (size_t)snprintf(buf + len, sizeof(buf) - len, "; read by");
			for (size_t q = i, shown = 0; q < j && shown < 4; q++)
				if (ev[q].read) {
					len = ev_str(&ev[q], a, buf, len, sizeof(buf));
					shown++;
				}
			/* a write whose record is missing: the logged transfers that wrote it */
			for (size_t q = 0, shown = 0; reads > writes && q < v->nabsent && shown < 3; q++) {
				const struct logent *l = &v->absent[q];
				if ((strcmp(l->status, "OK") != 0 && strcmp(l->status, "TX_UNKNOWN") != 0) ||
				    !((l->x.from == a && l->x.from_before - l->x.amt == ev[i].v) ||
				    (l->x.to == a && l->x.to_before + l->x.amt == ev[i].v)) ||
				    len + 140 >= sizeof(buf))
					continue;
				len += (size_t)snprintf(buf + len, sizeof(buf) - len, "%s %s (%s, %s) could"
				    " have written it", shown ? ";" : "; not in the cache:", l->key,
				    l->status, l->when);
				shown++;
			}
			problem(v, "%s\n", buf);
		}
		i = j;
	}
	free(ev);
	return bad;
}

struct wedge {                  /* a record's change of one account, for the walk */
	const struct xrec *r;
	int64_t old, now;
	uint64_t t;                 /* its commit's return (wall ms); UINT64_MAX unknown */
	bool used;
};

static int wedge_by_val(const void *a, const void *b)
{
	const struct wedge *x = a, *y = b;
	if (x->old != y->old)
		return x->old < y->old ? -1 : 1;
	return x->t < y->t ? -1 : x->t > y->t;
}

static int wedge_by_time(const void *a, const void *b)
{
	const struct wedge *x = *(const struct wedge *const *)a, *y = *(const struct wedge *const *)b;
	return x->t < y->t ? -1 : x->t > y->t;
}

#define WALK_REPORTS 5          /* CHAIN-DETAIL lines per account */

/* Rebuilds the history of account a (a broken chain): from B, each step
 * takes the earliest-returned unused record that read the current
 * balance; when none did, the earliest-returned unused record is the
 * next step and a CHAIN-DETAIL line names it (what it read, when) and the
 * record before it (what it wrote, when).  Diagnostic only. */
static void chain_walk(struct verify *v, struct xset *x, unsigned a, int64_t fin)
{
	size_t n = 0;
	for (size_t i = 0; i < x->cap; i++)
		n += x->slots[i].key != NULL && x->slots[i].valid &&
		    (x->slots[i].x.from == a || x->slots[i].x.to == a);
	struct wedge *w = malloc((n ? n : 1) * sizeof(*w));
	struct wedge **byt = malloc((n ? n : 1) * sizeof(*byt));
	if (w == NULL || byt == NULL) {
		free(w);
		free(byt);
		return;
	}
	size_t k = 0;
	for (size_t i = 0; i < x->cap; i++) {
		const struct xrec *r = &x->slots[i];
		if (r->key == NULL || !r->valid || (r->x.from != a && r->x.to != a))
			continue;
		int64_t old = r->x.from == a ? r->x.from_before : r->x.to_before;
		w[k++] = (struct wedge){ r, old, r->x.from == a ? old - r->x.amt : old + r->x.amt,
			r->end_ms ? r->end_ms : UINT64_MAX, false };
	}
	qsort(w, k, sizeof(w[0]), wedge_by_val);
	for (size_t i = 0; i < k; i++)
		byt[i] = &w[i];
	qsort(byt, k, sizeof(byt[0]), wedge_by_time);
	int64_t cur = v->o->balance;
	const struct wedge *prev = NULL;
	unsigned reports = 0;
	size_t tnext = 0;
	for (size_t done = 0; done < k; done++) {
		/* the first unused record that read cur (binary search, then skip used) */
		size_t lo = 0, hi = k;
		while (lo < hi) {
			size_t mid = (lo + hi) / 2;
			if (w[mid].old < cur)
				lo = mid + 1;
			else
				hi = mid;
		}
		while (lo < k && w[lo].old == cur && w[lo].used)
			lo++;
		struct wedge *e;
		if (lo < k && w[lo].old == cur) {
			e = &w[lo];
		} else {
			while (byt[tnext]->used)
				tnext++;
			e = byt[tnext];
			if (reports++ < WALK_REPORTS)
				wl_out("CHAIN-DETAIL acct%u: %s (%s, begin_ms=%" PRIu64 " end_ms=%" PRIu64
				    ") read %" PRId64 " and wrote %" PRId64 ", but no record read the %"
				    PRId64 " that %s (%s, end_ms=%" PRIu64 ") wrote\n", a, e->r->key,
				    e->r->status, e->r->begin_ms, e->r->end_ms, e->old, e->now, cur,
				    prev != NULL ? prev->r->key : "bank-init",
				    prev != NULL ? prev->r->status : "-", prev != NULL ? prev->r->end_ms : 0);
		}
		e->used = true;
		cur = e->now;
		prev = e;
	}
	if (cur != fin && reports++ < WALK_REPORTS)
		wl_out("CHAIN-DETAIL acct%u: the history ends at %" PRId64 " (%s, end_ms=%" PRIu64
		    "), the balance is %" PRId64 "\n", a, cur, prev != NULL ? prev->r->key : "bank-init",
		    prev != NULL ? prev->r->end_ms : 0, fin);
	free(byt);
	free(w);
}

int bank_verify(const struct bank_opts *o)
{
	struct verify v = { .o = o };
	uint64_t t0 = wl_now_ms(), end = t0 + o->duration_s * 1000u;
	int64_t vals[MAX_ACCOUNTS];
	bool ok[MAX_ACCOUNTS];
	dg_err e = read_accounts(o, end, vals, ok);
	if (e != DG_OK) {
		wl_out("bank-verify: could not read the accounts within %" PRIu64 " s: %s\n",
		    o->duration_s, ERRNAME(e));
		return 1;
	}
	int64_t total = 0, want = o->balance * (int64_t)o->accounts;
	unsigned negative = 0;
	char list[MAX_ACCOUNTS * 8 + 1];
	size_t len = 0;
	list[0] = 0;
	for (unsigned i = 0; i < o->accounts; i++) {
		if (!ok[i]) {
			problem(&v, "VIOLATION bad-account acct%u: missing or not a decimal\n", i);
			len += (size_t)snprintf(list + len, sizeof(list) - len, "%s?", i ? "," : "");
			continue;
		}
		total += vals[i];
		if (vals[i] < 0) {
			negative++;
			problem(&v, "VIOLATION negative acct%u = %" PRId64 "\n", i, vals[i]);
		}
		if (len + 24 < sizeof(list))
			len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%" PRId64,
			    i ? "," : "", vals[i]);
	}
	wl_out("bank-verify balances=%s total=%" PRId64 " want=%" PRId64 "\n", list, total, want);
	if (total != want)
		problem(&v, "VIOLATION total %" PRId64 " != %" PRId64 "\n", total, want);

	/* the records in the cache */
	struct xset x = { 0 };
	uint64_t others = 0;
	for (unsigned attempt = 1;; attempt++) {
		unsigned before = v.problems, printed = v.printed;
		e = scan_records(&v, &x, &others);
		if (e == DG_OK || wl_now_ms() >= end)
			break;
		wl_out("bank-verify: scan attempt %u: %s (retrying)\n", attempt, ERRNAME(e));
		xset_free(&x);
		v.problems = before;
		v.printed = printed;
		others = 0;
		wl_sleep_us(1000u * 200);
	}
	if (e != DG_OK) {
		wl_out("bank-verify: could not scan the cache: %s\n", ERRNAME(e));
		xset_free(&x);
		return 1;
	}

	/* the clients' logs */
	struct logstats st = { 0 };
	int bad_logs = 0;
	for (size_t i = 0; i < o->nok; i++)
		bad_logs |= check_log(&v, &x, o->ok_logs[i], true, &st);
	for (size_t i = 0; i < o->nfail; i++)
		bad_logs |= check_log(&v, &x, o->fail_logs[i], false, &st);
	uint64_t unlogged = 0;
	for (size_t i = 0; i < x.cap; i++)
		unlogged += x.slots[i].key != NULL && !x.slots[i].logged;

	/* the ledger and the chains */
	int64_t expect[MAX_ACCOUNTS];
	for (unsigned i = 0; i < o->accounts; i++)
		expect[i] = o->balance;
	for (size_t i = 0; i < x.cap; i++) {
		struct xrec *r = &x.slots[i];
		if (r->key == NULL || !r->valid)
			continue;
		expect[r->x.from] -= r->x.amt;
		expect[r->x.to] += r->x.amt;
	}
	unsigned ledger_bad = 0, chain_bad = 0;
	for (unsigned i = 0; i < o->accounts; i++) {
		if (!ok[i])
			continue;
		if (vals[i] != expect[i]) {
			ledger_bad++;
			problem(&v, "VIOLATION ledger acct%u = %" PRId64 ", the %zu transfers in the "
			    "cache make it %" PRId64 "\n", i, vals[i], x.n, expect[i]);
		}
		unsigned bad = chain(&v, &x, i, vals[i]);
		if (bad != 0)
			chain_walk(&v, &x, i, vals[i]);
		chain_bad += bad;
	}
	if (v.printed > PRINT_MAX)
		wl_out("... %u more problems not printed\n", v.printed - PRINT_MAX);
	wl_out("bank-verify summary total=%" PRId64 " want=%" PRId64 " negative=%u records=%zu"
	    " ledger_mismatch=%u chain_breaks=%u acked=%" PRIu64 " acked_missing=%" PRIu64
	    " scan_missed=%" PRIu64 " failed=%" PRIu64 " failed_but_applied=%" PRIu64
	    " unknown=%" PRIu64 " unknown_applied=%" PRIu64 " unlogged_records=%" PRIu64
	    " other_keys=%" PRIu64 " problems=%u ms=%" PRIu64 "\n", total, want, negative, x.n,
	    ledger_bad, chain_bad, st.acked, st.acked_missing, st.scan_missed, st.failed,
	    st.failed_applied, st.unknown, st.unknown_applied, unlogged, others, v.problems,
	    wl_now_ms() - t0);
	xset_free(&x);
	free(v.absent);
	return v.problems == 0 && bad_logs == 0 ? 0 : 1;
}
