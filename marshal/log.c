/*
 * log.c — the one log of the library (marshal.h "Logging", log_int.h).
 *
 * Every layer logs through dgi_log; a line below the minimum level costs
 * one atomic load.  A line is formatted into a stack buffer (lines longer
 * than 1 KiB are cut) and written with one fprintf, or handed to the
 * program's sink, under log_mu so lines never interleave and a sink sees
 * one at a time.
 */
#define _POSIX_C_SOURCE 200809L
#include "log_int.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static dg_log_fn log_fn;      /* log_mu */
static void *log_ctx;         /* log_mu */
static _Atomic int log_min = DG_LOG_INFO;

static const char *const names[] = { "?", "debug", "info", "warn", "error" };

void dg_log_configure(dg_log_fn fn, void *ctx, dg_log_level min)
{
	pthread_mutex_lock(&log_mu);
	log_fn = fn;
	log_ctx = ctx;
	pthread_mutex_unlock(&log_mu);
	if (min >= DG_LOG_DEBUG && min <= DG_LOG_ERROR)
		atomic_store(&log_min, (int)min);
}

bool dg_log_enabled(dg_log_level level)
{
	return (int)level >= atomic_load_explicit(&log_min, memory_order_relaxed);
}

static void logv(dg_log_level level, const char *id, const char *fmt, va_list ap)
{
	if (!dg_log_enabled(level))
		return;
	char line[1024];
	struct timespec now;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &now);
	gmtime_r(&now.tv_sec, &tm);
	size_t n = strftime(line, sizeof(line), "ts=%Y-%m-%dT%H:%M:%S", &tm);
	int k = snprintf(line + n, sizeof(line) - n, ".%03ldZ level=%s id=%s%s",
	    now.tv_nsec / 1000000, names[level], id, fmt[0] != 0 ? " " : "");
	if (k < 0)
		return;
	n += (size_t)k;
	if (n < sizeof(line) && vsnprintf(line + n, sizeof(line) - n, fmt, ap) < 0)
		return;
	pthread_mutex_lock(&log_mu);
	if (log_fn != NULL)
		log_fn(log_ctx, level, id, line);
	else
		fprintf(stderr, "%s\n", line);
	pthread_mutex_unlock(&log_mu);
}

static dg_log_level level_of(const char *s)
{
	switch (s[0]) {
	case 'd': return DG_LOG_DEBUG;
	case 'w': return DG_LOG_WARN;
	case 'e': return DG_LOG_ERROR;
	default: return DG_LOG_INFO;
	}
}

void dg_log(dg_log_level level, const char *id, const char *fmt, ...)
{
	if (level < DG_LOG_DEBUG || level > DG_LOG_ERROR)
		level = DG_LOG_ERROR;
	va_list ap;
	va_start(ap, fmt);
	logv(level, id, fmt, ap);
	va_end(ap);
}

void dgi_logv(const char *level, const char *id, const char *fmt, va_list ap)
{
	logv(level_of(level), id, fmt, ap);
}

void dgi_log(const char *level, const char *id, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	logv(level_of(level), id, fmt, ap);
	va_end(ap);
}

void dgi_log_rated(struct dgi_lograte *r, uint64_t now_ms, const char *level, const char *id,
    const char *why)
{
	uint32_t repeated = 0;
	if (r == NULL || dgi_lograte_due(r, now_ms, 1000, &repeated))
		dgi_log(level, id, "repeated=%u why=\"%s\"", repeated, why);
}

bool dgi_lograte_due(struct dgi_lograte *r, uint64_t now_ms, uint32_t interval_ms,
    uint32_t *suppressed)
{
	uint64_t last = atomic_load(&r->last_ms);
	if ((last != 0 && now_ms - last < interval_ms) ||
	    !atomic_compare_exchange_strong(&r->last_ms, &last, now_ms)) {
		atomic_fetch_add(&r->suppressed, 1);
		return false;
	}
	*suppressed = atomic_exchange(&r->suppressed, 0);
	return true;
}
