/* register.c — the register workload of cacheclient (see register.h).
 *
 * Each thread keeps, per key, the value it last read or wrote (its
 * "known" value): a compare-and-set expects it, so that some of them
 * succeed.  A thread with no known value for the key (never touched, or
 * last read nil: an absent key equals no expected value) reads instead.
 * After a write or cas whose outcome is unknown, the known value is the
 * one it tried to write (a guess; a wrong guess only makes a cas fail).
 *
 * Values are "<client-id>.<thread>.<n>" (n counts the thread's ops), so no
 * two ops of any clients write the same value as long as client ids are
 * distinct; that is what lets a checker tell which write a read saw.
 *
 * The main thread prints PROGRESS every 5 s and a STUCK line (once per op)
 * for an op running longer than op_bound_ms; after the duration it waits
 * up to op_bound_ms + 10 s for the threads' last ops, else prints HUNG
 * lines and the summary and exits 1 at once, without leaving the cluster
 * (a hang is a finding: the test reports it).
 */
#define _GNU_SOURCE
#include "register.h"
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
#define VAL_MAX 64               /* the workload's values are shorter */
#define PROGRESS_MS 5000
#define HANG_GRACE_MS 10000
#define LINE_MAX_ 512

enum op { OP_READ, OP_WRITE, OP_CAS, OP__COUNT };
static const char *const op_names[OP__COUNT] = { "read", "write", "cas" };

#define ERRNAME(e) wl_err_name((e), 0, (char[48]){ 0 }, 48)

/* Whether a write's error leaves its outcome unknown (DESIGN.md). */
static bool outcome_unknown(dg_err e)
{
	return e == DG_ERR_TIMEOUT || e == DG_ERR_TX_UNKNOWN || e == DG_ERR_CONN_BROKEN;
}

/* A value read, as the history writes it: itself when it looks like one
 * of the workload's values, else x:<hex of its first 32 bytes>. */
static void value_token(const uint8_t *v, size_t n, char *buf, size_t cap)
{
	bool plain = n > 0 && n <= VAL_MAX;
	for (size_t i = 0; plain && i < n; i++)
		plain = (v[i] >= 'a' && v[i] <= 'z') || (v[i] >= 'A' && v[i] <= 'Z') ||
		    (v[i] >= '0' && v[i] <= '9') || v[i] == '_' || v[i] == '.' || v[i] == '-';
	if (plain) {
		snprintf(buf, cap, "%.*s", (int)n, (const char *)v);
		return;
	}
	size_t len = (size_t)snprintf(buf, cap, "x:");
	for (size_t i = 0; i < n && i < 32 && len + 3 < cap; i++)
		len += (size_t)snprintf(buf + len, cap - len, "%02x", v[i]);
	if (n == 0 && len + 6 < cap)
		snprintf(buf + len, cap - len, "empty");
}

/* ---- the history ---- */

struct hist {
	int fd;
	atomic_uint_fast64_t errors;    /* failed or short writes */
};

static int hist_open(struct hist *h, const char *path)
{
	h->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	atomic_store(&h->errors, 0);
	if (h->fd < 0) {
		fprintf(stderr, "cacheclient: --history %s: %s\n", path, strerror(errno));
		return -1;
	}
	return 0;
}

/* One event: "<t> <proc> <phase> <key> <op>[ <args>]\n", one write(2),
 * t taken now. */
static void hist_event(struct hist *h, const char *proc, const char *phase, const char *key,
    const char *op, const char *args)
{
	char line[LINE_MAX_];
	int n = snprintf(line, sizeof(line), "%" PRIu64 " %s %s %s %s%s%s\n", wl_mono_ns(), proc, phase,
	    key, op, args[0] ? " " : "", args);
	if (n < 0 || (size_t)n >= sizeof(line) || write(h->fd, line, (size_t)n) != n)
		atomic_fetch_add(&h->errors, 1);
}

/* ---- register-run ---- */

struct run {
	const struct reg_opts *o;
	struct hist h;
	atomic_bool stop;
	unsigned weight[OP__COUNT], wsum;
	atomic_uint_fast64_t ops[OP__COUNT];                   /* invoked, by op */
	atomic_uint_fast64_t ok, fail, info, cas_true, cas_false, reads_nil, broken;
	atomic_uint_fast64_t errors[DG_ERR__COUNT];
	atomic_uint_fast64_t max_op_ms;
};

struct rthread {
	struct run *r;
	unsigned index;
	pthread_t tid;
	char proc[32];
	char (*known)[VAL_MAX + 1];     /* per key; "" none */
	atomic_uint_fast64_t op_start;  /* monotonic ms of the running op; 0 none */
	atomic_uint_fast64_t op_n;
	_Atomic unsigned op_kind, op_key;
	uint64_t stuck_reported;        /* main thread: the op_start reported */
	atomic_bool done;
};

static void key_name(const struct reg_opts *o, unsigned k, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s%u", o->key_prefix, k);
}

static void count_outcome(struct run *r, dg_err e, const char *phase)
{
	if (e != DG_OK)
		atomic_fetch_add(&r->errors[e], 1);
	atomic_fetch_add(phase[0] == 'o' ? &r->ok : phase[0] == 'f' ? &r->fail : &r->info, 1);
}

static void op_begin(struct rthread *t, uint64_t n, enum op kind, unsigned key)
{
	atomic_store(&t->op_n, n);
	atomic_store(&t->op_kind, (unsigned)kind);
	atomic_store(&t->op_key, key);
	atomic_store(&t->op_start, wl_now_ms());
}

static void op_end(struct rthread *t)
{
	struct run *r = t->r;
	uint64_t ms = wl_now_ms() - atomic_load(&t->op_start);
	atomic_store(&t->op_start, 0);
	uint64_t max = atomic_load(&r->max_op_ms);
	while (ms > max && !atomic_compare_exchange_weak(&r->max_op_ms, &max, ms))
		;
}

static void do_read(struct rthread *t, const char *key, unsigned k, dg_buf *b)
{
	struct run *r = t->r;
	char args[2 * VAL_MAX + 16];
	hist_event(&r->h, t->proc, "invoke", key, "read", "");
	dg_buf_reset(b);
	dg_err e = dg_cache_get(r->o->cache, key, strlen(key), b);
	const char *phase = "fail";
	args[0] = 0;
	if (e == DG_OK) {
		phase = "ok";
		value_token(b->data, b->len, args, sizeof(args));
		snprintf(t->known[k], VAL_MAX + 1, "%s", args);
	} else if (e == DG_ERR_NOT_FOUND) {
		phase = "ok";
		snprintf(args, sizeof(args), "nil");
		t->known[k][0] = 0;
		atomic_fetch_add(&r->reads_nil, 1);
		e = DG_OK;
	}
	hist_event(&r->h, t->proc, phase, key, "read", args);
	count_outcome(r, e, phase);
}

static void do_write(struct rthread *t, const char *key, unsigned k, uint64_t n)
{
	struct run *r = t->r;
	const struct reg_opts *o = r->o;
	char val[VAL_MAX + 1];
	snprintf(val, sizeof(val), "%s.%u.%" PRIu64, o->client_id, t->index, n);
	hist_event(&r->h, t->proc, "invoke", key, "write", val);
	dg_err e;
	if (o->break_every != 0 && (n + 1) % o->break_every == 0) {
		e = DG_OK; /* testing the checker: acknowledged, never made */
		atomic_fetch_add(&r->broken, 1);
	} else {
		e = dg_cache_put(o->cache, key, strlen(key), val, strlen(val));
	}
	const char *phase = e == DG_OK ? "ok" : outcome_unknown(e) ? "info" : "fail";
	hist_event(&r->h, t->proc, phase, key, "write", val);
	count_outcome(r, e, phase);
	if (phase[0] != 'f')
		snprintf(t->known[k], VAL_MAX + 1, "%s", val);
}

static void do_cas(struct rthread *t, const char *key, unsigned k, uint64_t n)
{
	struct run *r = t->r;
	const struct reg_opts *o = r->o;
	char val[VAL_MAX + 1], args[2 * VAL_MAX + 16];
	const char *exp = t->known[k];
	snprintf(val, sizeof(val), "%s.%u.%" PRIu64, o->client_id, t->index, n);
	int al = snprintf(args, sizeof(args), "%s %s", exp, val);
	hist_event(&r->h, t->proc, "invoke", key, "cas", args);
	bool replaced = false;
	dg_err e = dg_cache_replace_if_equals(o->cache, key, strlen(key), exp, strlen(exp), val,
	    strlen(val), &replaced);
	const char *phase = e == DG_OK ? "ok" : outcome_unknown(e) ? "info" : "fail";
	if (e == DG_OK) {
		snprintf(args + al, sizeof(args) - (size_t)al, " %s", replaced ? "true" : "false");
		atomic_fetch_add(replaced ? &r->cas_true : &r->cas_false, 1);
	}
	hist_event(&r->h, t->proc, phase, key, "cas", args);
	count_outcome(r, e, phase);
	if ((e == DG_OK && replaced) || phase[0] == 'i')
		snprintf(t->known[k], VAL_MAX + 1, "%s", val);
}

static void *run_thread(void *arg)
{
	struct rthread *t = arg;
	struct run *r = t->r;
	const struct reg_opts *o = r->o;
	uint64_t rs = wl_mix(o->rand_seed ^ wl_mix(t->index + 1)) | 1;
	dg_buf b;
	dg_buf_init(&b);
	char key[REG_PREFIX_MAX + 16];
	for (uint64_t n = 0; !atomic_load(&r->stop); n++) {
		unsigned k = (unsigned)(wl_rnd(&rs) % o->keys);
		unsigned w = (unsigned)(wl_rnd(&rs) % r->wsum);
		enum op kind = w < r->weight[OP_READ] ? OP_READ :
		    w < r->weight[OP_READ] + r->weight[OP_WRITE] ? OP_WRITE : OP_CAS;
		if (kind == OP_CAS && t->known[k][0] == 0)
			kind = OP_READ; /* nothing to expect: an absent key equals nothing */
		key_name(o, k, key, sizeof(key));
		atomic_fetch_add(&r->ops[kind], 1);
		op_begin(t, n, kind, k);
		if (kind == OP_READ)
			do_read(t, key, k, &b);
		else if (kind == OP_WRITE)
			do_write(t, key, k, n);
		else
			do_cas(t, key, k, n);
		op_end(t);
		if (o->pause_us != 0)
			wl_sleep_us(wl_rnd(&rs) % ((uint64_t)o->pause_us + 1));
	}
	dg_buf_free(&b);
	atomic_store(&t->done, true);
	return NULL;
}

/* "DG_ERR_X:n,DG_ERR_Y:m" for the non-zero counters, or "none". */
static void err_counts(atomic_uint_fast64_t *c, char *buf, size_t cap)
{
	size_t len = 0;
	buf[0] = 0;
	for (int e = 1; e < DG_ERR__COUNT; e++) {
		uint64_t v = atomic_load(&c[e]);
		if (v != 0 && len + 48 < cap)
			len += (size_t)snprintf(buf + len, cap - len, "%s%s:%" PRIu64, len ? "," : "",
			    ERRNAME((dg_err)e), v);
	}
	if (len == 0)
		snprintf(buf, cap, "none");
}

static uint64_t total_ops(struct run *r)
{
	return atomic_load(&r->ops[OP_READ]) + atomic_load(&r->ops[OP_WRITE]) +
	    atomic_load(&r->ops[OP_CAS]);
}

static void summary(struct run *r, uint64_t ms)
{
	char errs[2048];
	err_counts(r->errors, errs, sizeof(errs));
	wl_out("register-run summary client=%s cache=%s ms=%" PRIu64 " ops=%" PRIu64 " ok=%" PRIu64
	    " fail=%" PRIu64 " info=%" PRIu64 " reads=%" PRIu64 " reads_nil=%" PRIu64
	    " writes=%" PRIu64 " cas=%" PRIu64 " cas_true=%" PRIu64 " cas_false=%" PRIu64
	    " max_op_ms=%" PRIu64 " broken=%" PRIu64 " history_errors=%" PRIu64 " errors=%s\n",
	    r->o->client_id, r->o->cache_name, ms, total_ops(r), atomic_load(&r->ok),
	    atomic_load(&r->fail), atomic_load(&r->info), atomic_load(&r->ops[OP_READ]),
	    atomic_load(&r->reads_nil), atomic_load(&r->ops[OP_WRITE]),
	    atomic_load(&r->ops[OP_CAS]), atomic_load(&r->cas_true), atomic_load(&r->cas_false),
	    atomic_load(&r->max_op_ms), atomic_load(&r->broken), atomic_load(&r->h.errors), errs);
}

static void progress(struct run *r, uint64_t *next)
{
	uint64_t now = wl_now_ms();
	if (now < *next)
		return;
	*next = now + PROGRESS_MS;
	char errs[2048];
	err_counts(r->errors, errs, sizeof(errs));
	wl_out("PROGRESS at_ms=%" PRIu64 " ops=%" PRIu64 " ok=%" PRIu64 " fail=%" PRIu64 " info=%"
	    PRIu64 " max_op_ms=%" PRIu64 " errors=%s\n", wl_wall_ms(), total_ops(r),
	    atomic_load(&r->ok), atomic_load(&r->fail), atomic_load(&r->info),
	    atomic_load(&r->max_op_ms), errs);
}

/* An op running past the bound is reported once, as STUCK (or, with hung
 * set, as HUNG: after the end). */
static void watch(struct rthread *ts, unsigned n, bool hung)
{
	uint64_t now = wl_now_ms();
	for (unsigned i = 0; i < n; i++) {
		struct rthread *t = &ts[i];
		uint64_t start = atomic_load(&t->op_start);
		if (start == 0 || (!hung && (start == t->stuck_reported ||
		    now - start <= t->r->o->op_bound_ms)))
			continue;
		t->stuck_reported = start;
		char key[REG_PREFIX_MAX + 16];
		key_name(t->r->o, atomic_load(&t->op_key), key, sizeof(key));
		wl_out("%s proc=%s key=%s op=%s n=%" PRIu64 " running_ms=%" PRIu64 " at_ms=%" PRIu64
		    "\n", hung ? "HUNG" : "STUCK", t->proc, key, op_names[atomic_load(&t->op_kind)],
		    atomic_load(&t->op_n), now - start, wl_wall_ms());
	}
}

int register_run(const struct reg_opts *o)
{
	static struct run r;
	static struct rthread ts[MAX_THREADS];
	memset(&r, 0, sizeof(r));
	r.o = o;
	r.weight[OP_READ] = o->mix_read;
	r.weight[OP_WRITE] = o->mix_write;
	r.weight[OP_CAS] = o->mix_cas;
	r.wsum = o->mix_read + o->mix_write + o->mix_cas;
	if (o->threads == 0 || o->threads > MAX_THREADS || o->keys == 0 || r.wsum == 0) {
		fprintf(stderr, "cacheclient: register-run: bad threads, keys or mix\n");
		return 1;
	}
	if (hist_open(&r.h, o->history) != 0)
		return 1;
	uint64_t mono0 = wl_mono_ns(), wall0 = wl_wall_ms();
	wl_out("register-run client=%s cache=%s threads=%u keys=%u prefix=%s mix=%u:%u:%u pause_us=%u"
	    " duration_s=%" PRIu64 " rand_seed=%" PRIu64 " mono_ns=%" PRIu64 " at_ms=%" PRIu64
	    "%s\n", o->client_id, o->cache_name, o->threads, o->keys, o->key_prefix, o->mix_read,
	    o->mix_write, o->mix_cas, o->pause_us, o->duration_s, o->rand_seed, mono0, wall0,
	    o->break_every ? " (FAKE WRITES: testing the checker)" : "");
	unsigned started = 0;
	bool fail = false;
	for (unsigned i = 0; i < o->threads; i++) {
		ts[i] = (struct rthread){ .r = &r, .index = i };
		snprintf(ts[i].proc, sizeof(ts[i].proc), "%s-%u", o->client_id, i);
		ts[i].known = calloc(o->keys, sizeof(*ts[i].known));
		if (ts[i].known == NULL) {
			fprintf(stderr, "cacheclient: register-run: out of memory\n");
			fail = true;
			break;
		}
		int rc = pthread_create(&ts[i].tid, NULL, run_thread, &ts[i]);
		if (rc != 0) {
			fprintf(stderr, "cacheclient: pthread_create: %s\n", strerror(rc));
			free(ts[i].known);
			fail = true;
			break;
		}
		started++;
	}
	uint64_t t0 = wl_now_ms();
	uint64_t end = t0 + (fail ? 0 : o->duration_s * 1000u), next = t0 + PROGRESS_MS;
	while (wl_now_ms() < end) {
		wl_sleep_us(100000);
		watch(ts, started, false);
		progress(&r, &next);
	}
	atomic_store(&r.stop, true);
	uint64_t hang_end = wl_now_ms() + o->op_bound_ms + HANG_GRACE_MS;
	for (;;) {
		unsigned running = 0;
		for (unsigned i = 0; i < started; i++)
			running += !atomic_load(&ts[i].done);
		if (running == 0)
			break;
		if (wl_now_ms() >= hang_end) {
			watch(ts, started, true);
			summary(&r, wl_now_ms() - t0);
			wl_out("register-run: %u thread(s) still inside an op %u ms after the end: "
			    "exiting without leaving the cluster\n", running,
			    o->op_bound_ms + HANG_GRACE_MS);
			_exit(1);
		}
		wl_sleep_us(50000);
		watch(ts, started, false);
	}
	for (unsigned i = 0; i < started; i++) {
		pthread_join(ts[i].tid, NULL);
		free(ts[i].known);
	}
	summary(&r, wl_now_ms() - t0);
	close(r.h.fd);
	return !fail && atomic_load(&r.h.errors) == 0 ? 0 : 1;
}

/* ---- register-read-all ---- */

int register_read_all(const struct reg_opts *o)
{
	struct hist h;
	if (o->keys == 0 || hist_open(&h, o->history) != 0)
		return 1;
	char proc[32], key[REG_PREFIX_MAX + 16], args[2 * VAL_MAX + 16];
	snprintf(proc, sizeof(proc), "%s-0", o->client_id);
	uint64_t t0 = wl_now_ms(), end = t0 + o->duration_s * 1000u;
	uint64_t ok = 0, nil = 0, attempts = 0;
	atomic_uint_fast64_t errors[DG_ERR__COUNT];
	for (int e = 0; e < DG_ERR__COUNT; e++)
		atomic_store(&errors[e], 0);
	dg_buf b;
	dg_buf_init(&b);
	for (unsigned k = 0; k < o->keys; k++) {
		key_name(o, k, key, sizeof(key));
		for (;;) {
			attempts++;
			hist_event(&h, proc, "invoke", key, "read", "");
			dg_buf_reset(&b);
			dg_err e = dg_cache_get(o->cache, key, strlen(key), &b);
			if (e == DG_OK || e == DG_ERR_NOT_FOUND) {
				if (e == DG_OK)
					value_token(b.data, b.len, args, sizeof(args));
				else
					snprintf(args, sizeof(args), "nil");
				hist_event(&h, proc, "ok", key, "read", args);
				wl_out("read-all %s = %s\n", key, args);
				ok++;
				nil += e == DG_ERR_NOT_FOUND;
				break;
			}
			hist_event(&h, proc, "fail", key, "read", "");
			atomic_fetch_add(&errors[e], 1);
			if (wl_now_ms() >= end)
				break;
			wl_sleep_us(200000);
		}
	}
	dg_buf_free(&b);
	char errs[2048];
	err_counts(errors, errs, sizeof(errs));
	wl_out("register-read-all summary client=%s cache=%s keys=%u read=%" PRIu64 " nil=%" PRIu64
	    " attempts=%" PRIu64 " history_errors=%" PRIu64 " errors=%s ms=%" PRIu64 "\n",
	    o->client_id, o->cache_name, o->keys, ok, nil, attempts, atomic_load(&h.errors), errs,
	    wl_now_ms() - t0);
	close(h.fd);
	return ok == o->keys && atomic_load(&h.errors) == 0 ? 0 : 1;
}
