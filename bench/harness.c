/* harness.c — timing, allocation counting and reporting for dgbench (see
 * harness.h for the method). */
#define _POSIX_C_SOURCE 200809L
#include "harness.h"

#include "marshal.h"

#include <errno.h>
#include <fnmatch.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------------
 * Allocation counting.
 *
 * One honest counter for every implementation: dgbench defines malloc,
 * calloc, realloc, free, aligned_alloc and posix_memalign itself.  The
 * executable's definitions take precedence over glibc's in the dynamic
 * linker's lookup order, so every allocation of the process — datagrid's
 * dgi_alloc (which calls malloc), libmsgpackc.so, libprotobuf-c.so, libc
 * internals — lands here; each forwards to glibc's exported __libc_*
 * entry point and counts the calls that returned memory (the same rule as
 * dgi_alloc's counter: successful malloc/calloc/realloc calls).
 *
 * Datagrid lines report dgi_alloc_get_stats().allocs over the timed loops,
 * as the project defines it; the harness cross-checks that the process-wide
 * counter saw exactly as many allocations in the same loops (it would see
 * more if datagrid ever allocated outside dgi_alloc) and says so on stderr
 * if not.  Peer lines report the process-wide counter.
 *
 * The counter is a plain variable: dgbench is single-threaded, and an
 * atomic add per malloc would tax the peers' timings for nothing.
 * Sanitizer builds (DGB_NO_MALLOC_HOOK) leave the allocator to the
 * sanitizer: peers then report no allocs_per_op, datagrid still does.
 * (memalign, valloc and pvalloc are obsolete and left to glibc, uncounted.)
 * ------------------------------------------------------------------------ */
static uint64_t heap_allocs;

#ifndef DGB_NO_MALLOC_HOOK
/* Exported explicitly: the project builds with -fvisibility=hidden, and a
 * hidden malloc would only replace the executable's own calls. */
#define DGB_EXPORT __attribute__((visibility("default")))
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t count, size_t n);
extern void *__libc_realloc(void *p, size_t n);
extern void *__libc_memalign(size_t align, size_t n);
extern void __libc_free(void *p);

static inline void *counted(void *p)
{
	if (p != NULL)
		heap_allocs++;
	return p;
}

DGB_EXPORT void *malloc(size_t n) { return counted(__libc_malloc(n)); }
DGB_EXPORT void *calloc(size_t count, size_t n) { return counted(__libc_calloc(count, n)); }
DGB_EXPORT void *realloc(void *p, size_t n) { return counted(__libc_realloc(p, n)); }
DGB_EXPORT void free(void *p) { __libc_free(p); }

DGB_EXPORT void *aligned_alloc(size_t align, size_t n)
{
	return counted(__libc_memalign(align, n));
}

DGB_EXPORT int posix_memalign(void **out, size_t align, size_t n)
{
	if (align < sizeof(void *) || (align & (align - 1)) != 0)
		return EINVAL;
	void *p = counted(__libc_memalign(align, n));
	if (p == NULL)
		return ENOMEM;
	*out = p;
	return 0;
}
#endif

uint64_t dgb_heap_allocs(void) { return heap_allocs; }

bool dgb_heap_counting(void)
{
	static int state = -1; /* unknown */
	if (state < 0) {
		/* through a volatile pointer: the compiler may not fold it away */
		void *(*volatile m)(size_t) = malloc;
		uint64_t before = heap_allocs;
		void *p = m(24);
		state = heap_allocs != before;
		free(p);
	}
	return state == 1;
}

/* ------------------------------------------------------------------------
 * Messages.
 * ------------------------------------------------------------------------ */
/* One fputs per line: stdio locks the stream per call, so notes from
 * client threads (the txn suite's) do not interleave within a line. */
void dgb_note(const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(line, sizeof line - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	size_t len = (size_t)n < sizeof line - 1 ? (size_t)n : sizeof line - 2;
	line[len] = '\n';
	line[len + 1] = 0;
	fprintf(stderr, "dgbench: %s", line);
}

_Noreturn void dgb_die(const char *fmt, ...)
{
	va_list ap;
	fflush(stdout);
	fputs("dgbench: error: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

/* ------------------------------------------------------------------------
 * Timing.
 * ------------------------------------------------------------------------ */
static uint64_t checksum;

uint64_t dgb_checksum(void) { return checksum; }

uint64_t dgb_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t timed(const dgb_bench *b, uint64_t iters)
{
	uint64_t t0 = dgb_now_ns();
	checksum += b->run(b->ctx, iters);
	uint64_t t1 = dgb_now_ns();
	return t1 > t0 ? t1 - t0 : 1;
}

/* Results so far, for the "vs datagrid" column. */
#define MAX_RESULTS 256
static struct {
	const char *suite, *name, *impl;
	double ns;
} results[MAX_RESULTS];
static unsigned nresults;

unsigned dgb_measured(void) { return nresults; }

static double datagrid_ns(const dgb_bench *b)
{
	for (unsigned i = 0; i < nresults && i < MAX_RESULTS; i++)
		if (strcmp(results[i].suite, b->suite) == 0 &&
		    strcmp(results[i].name, b->name) == 0 &&
		    strcmp(results[i].impl, "datagrid") == 0)
			return results[i].ns;
	return 0;
}

static void json_str(const char *key, const char *s)
{
	printf("\"%s\":\"", key);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

static void report(const dgb_opts *o, const dgb_bench *b, const dgb_result *r)
{
	/* two decimals below 10 ns, one above: enough digits, no noise */
	const char *nsfmt = r->ns_per_op < 10 ? "%.2f" : "%.1f";
	if (o->json) {
		putchar('{');
		json_str("suite", b->suite);
		putchar(',');
		json_str("case", b->name);
		putchar(',');
		json_str("impl", b->impl);
		printf(",\"ns_per_op\":");
		printf(nsfmt, r->ns_per_op);
		if (b->bytes >= 0)
			printf(",\"bytes\":%lld", b->bytes);
		if (r->has_allocs)
			printf(",\"allocs_per_op\":%.6g", r->allocs_per_op);
		printf("}\n");
	} else {
		char ns[32], bytes[32], allocs[32], ratio[32];
		snprintf(ns, sizeof ns, nsfmt, r->ns_per_op);
		if (b->bytes >= 0)
			snprintf(bytes, sizeof bytes, "%lld", b->bytes);
		else
			snprintf(bytes, sizeof bytes, "-");
		if (r->has_allocs)
			snprintf(allocs, sizeof allocs, "%.6g", r->allocs_per_op);
		else
			snprintf(allocs, sizeof allocs, "n/a");
		double dg = datagrid_ns(b);
		if (dg > 0)
			snprintf(ratio, sizeof ratio, "%.2fx", r->ns_per_op / dg);
		else
			snprintf(ratio, sizeof ratio, "-");
		printf("%-16s %-15s %12s %10s %11s %12s\n", b->name, b->impl, ns,
		    bytes, allocs, ratio);
	}
	fflush(stdout);
}

bool dgb_selected(const dgb_opts *o, const char *name, const char *impl)
{
	/* shell patterns (fnmatch): a plain name matches only itself */
	return (o->only_case == NULL || fnmatch(o->only_case, name, 0) == 0) &&
	    (o->only_impl == NULL || fnmatch(o->only_impl, impl, 0) == 0);
}

void dgb_begin_suite(const dgb_opts *o, const char *suite)
{
	if (o->json)
		return;
	printf("suite %s (%s; ns/op = best of %d repetitions)\n", suite,
	    o->quick ? "quick" : "full", o->quick ? 3 : 5);
	printf("%-16s %-15s %12s %10s %11s %12s\n", "case", "impl", "ns/op",
	    "bytes", "allocs/op", "vs datagrid");
	fflush(stdout);
}

/* Iterations for ~target ns per repetition.  The first call is the
 * warm-up (it grows every buffer); then the count grows until a run lasts a
 * tenth of the target, and is scaled. */
static uint64_t calibrate(const dgb_bench *b, uint64_t target)
{
	uint64_t n = 1, t = timed(b, 1);
	while (t < target / 10 && n < (UINT64_C(1) << 40)) {
		n *= t < target / 1000 ? 10 : 2;
		t = timed(b, n);
	}
	uint64_t iters = (uint64_t)((double)n * (double)target / (double)t);
	return iters ? iters : 1;
}

/* One timed repetition; accumulates its allocations into *heap / *dg. */
static double repetition(const dgb_bench *b, uint64_t iters, uint64_t *heap,
    uint64_t *dg)
{
	dgi_alloc_stats dg0, dg1;
	uint64_t heap0 = heap_allocs;
	dgi_alloc_get_stats(&dg0);
	uint64_t t = timed(b, iters);
	dgi_alloc_get_stats(&dg1);
	*heap += heap_allocs - heap0;
	*dg += dg1.allocs - dg0.allocs;
	return (double)t / ((double)iters * (double)b->ops_per_iter);
}

void dgb_run_group(const dgb_opts *o, const dgb_bench *b, unsigned n,
    dgb_result *out)
{
	const uint64_t target = o->quick ? 20000000u : 100000000u; /* ns */
	const int reps = o->quick ? 3 : 5;
	uint64_t iters[DGB_GROUP_MAX], heap[DGB_GROUP_MAX], dg[DGB_GROUP_MAX];

	if (n > DGB_GROUP_MAX)
		dgb_die("dgb_run_group: %u benchmarks, at most %d", n, DGB_GROUP_MAX);
	for (unsigned k = 0; k < n; k++) {
		iters[k] = calibrate(&b[k], target);
		heap[k] = dg[k] = 0;
		out[k] = (dgb_result){ 0 };
		out[k].iters = iters[k];
	}
	/* Interleaved: a burst of load from elsewhere hits one repetition of
	 * every implementation rather than all repetitions of one. */
	for (int i = 0; i < reps; i++)
		for (unsigned k = 0; k < n; k++) {
			double ns = repetition(&b[k], iters[k], &heap[k], &dg[k]);
			if (i == 0 || ns < out[k].ns_per_op)
				out[k].ns_per_op = ns;
		}

	for (unsigned k = 0; k < n; k++) {
		dgb_result *r = &out[k];
		double ops = (double)iters[k] * (double)reps * (double)b[k].ops_per_iter;
		if (b[k].alloc_src == DGB_ALLOC_DG) {
			r->has_allocs = true;
			r->allocs_per_op = (double)dg[k] / ops;
			if (dgb_heap_counting() && heap[k] != dg[k])
				dgb_note("%s/%s/%s: malloc saw %llu allocations in the timed "
				    "loops, dgi_alloc %llu: datagrid allocates outside dgi_alloc",
				    b[k].suite, b[k].name, b[k].impl,
				    (unsigned long long)heap[k], (unsigned long long)dg[k]);
		} else if (dgb_heap_counting()) {
			r->has_allocs = true;
			r->allocs_per_op = (double)heap[k] / ops;
		}
		if (nresults < MAX_RESULTS) {
			results[nresults].suite = b[k].suite;
			results[nresults].name = b[k].name;
			results[nresults].impl = b[k].impl;
			results[nresults].ns = r->ns_per_op;
		}
		nresults++;
		report(o, &b[k], r);
	}
}

dgb_result dgb_run(const dgb_opts *o, const dgb_bench *b)
{
	dgb_result r;
	dgb_run_group(o, b, 1, &r);
	return r;
}

void dgb_print_line(const dgb_opts *o, const char *suite, const dgb_line *l)
{
	static const char *header_done;   /* the suite whose header is out */
	const char *nsfmt = l->ns_per_op < 10 ? "%.2f" : "%.1f";
	if (o->json) {
		printf("{\"suite\":\"%s\",\"case\":\"%s\",\"impl\":\"%s\",\"ns_per_op\":",
		    suite, l->name, l->impl);
		printf(nsfmt, l->ns_per_op);
		if (l->ops_per_s >= 0)
			printf(",\"ops_per_s\":%.0f", l->ops_per_s);
		if (l->p50_us >= 0)
			printf(",\"p50_us\":%.1f,\"p99_us\":%.1f", l->p50_us, l->p99_us);
		if (l->bytes >= 0)
			printf(",\"bytes\":%lld", l->bytes);
		if (l->allocs_per_op >= 0)
			printf(",\"allocs_per_op\":%.6g", l->allocs_per_op);
		if (l->has_csw)
			printf(",\"ctx_switches_per_op\":%.3g", l->ctx_switches_per_op);
		printf("}\n");
	} else {
		char ns[32], ops[32], p50[32], p99[32], bytes[32], allocs[32];
		if (header_done != suite) {
			printf("suite %s (%s)\n", suite, o->quick ? "quick" : "full");
			printf("%-20s %-17s %12s %10s %9s %9s %6s %10s\n", "case", "impl",
			    "ns/op", "ops/s", "p50_us", "p99_us", "bytes", "allocs/op");
			header_done = suite;
		}
		snprintf(ns, sizeof ns, nsfmt, l->ns_per_op);
		snprintf(ops, sizeof ops, l->ops_per_s >= 0 ? "%.0f" : "-", l->ops_per_s);
		snprintf(p50, sizeof p50, l->p50_us >= 0 ? "%.1f" : "-", l->p50_us);
		snprintf(p99, sizeof p99, l->p99_us >= 0 ? "%.1f" : "-", l->p99_us);
		snprintf(bytes, sizeof bytes, l->bytes >= 0 ? "%lld" : "-", l->bytes);
		snprintf(allocs, sizeof allocs, l->allocs_per_op >= 0 ? "%.6g" : "n/a",
		    l->allocs_per_op);
		printf("%-20s %-17s %12s %10s %9s %9s %6s %10s\n", l->name, l->impl, ns,
		    ops, p50, p99, bytes, allocs);
	}
	fflush(stdout);
	dgb_own_lines++;
}
