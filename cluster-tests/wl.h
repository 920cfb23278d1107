/* wl.h — what cacheclient's workloads (bank.c, register.c) share: clocks,
 * a locked stdout, a seeded PRNG and short error names.  Test code only. */
#ifndef DG_CLUSTER_WL_H
#define DG_CLUSTER_WL_H

#include "datagrid.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

uint64_t wl_mono_ns(void);
uint64_t wl_now_ms(void);   /* monotonic */
/* Wall-clock ms, printed on PROGRESS, STUCK and VIOLATION lines to line
 * them up with the test's nemesis events. */
uint64_t wl_wall_ms(void);
void wl_sleep_us(uint64_t us);
/* printf to stdout under one lock, flushed: lines of threads never mix */
void wl_out(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void wl_vout(const char *fmt, va_list ap);
/* xorshift64*, seeded through splitmix64 (wl_mix) */
uint64_t wl_mix(uint64_t z);
uint64_t wl_rnd(uint64_t *s);
/* dg_strerror(e) up to its ':' ("DG_ERR_TIMEOUT"); without the "DG_ERR_"
 * prefix when short ("TIMEOUT"; "DG_OK" stays). */
const char *wl_err_name(dg_err e, int short_form, char *buf, size_t cap);

#endif
