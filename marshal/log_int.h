/*
 * log_int.h — the library's side of the log (log.c; the public side,
 * dg_log_configure and dg_log, is in marshal.h).  Not installed.
 */
#ifndef DG_MARSHAL_LOG_INT_H
#define DG_MARSHAL_LOG_INT_H

#include "marshal.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

/* The library's own call sites: level as text ("debug", "info", "warn",
 * "error"). */
void dgi_log(const char *level, const char *id, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void dgi_logv(const char *level, const char *id, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/* A log line that can repeat fast (a flood of refused connections):
 * written at most once per interval, saying how many were left out since
 * (dgi_lograte_due). */
struct dgi_lograte {
	_Atomic uint64_t last_ms;   /* 0: never written */
	_Atomic uint32_t suppressed;
};
/* Whether to write the line now (now_ms: monotonic, > 0); *suppressed: the
 * lines left out since the last one written.  Thread-safe. */
bool dgi_lograte_due(struct dgi_lograte *r, uint64_t now_ms, uint32_t interval_ms,
    uint32_t *suppressed);
/* "level=L id=ID repeated=N why=\"WHY\"" at most once a second per r (now:
 * dgi_now_ms's clock); r NULL: always, repeated=0. */
void dgi_log_rated(struct dgi_lograte *r, uint64_t now_ms, const char *level, const char *id,
    const char *why);

#endif
