/* wl.c — see wl.h. */
#define _GNU_SOURCE
#include "wl.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

uint64_t wl_mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t wl_now_ms(void)
{
	return wl_mono_ns() / 1000000u;
}

uint64_t wl_wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void wl_sleep_us(uint64_t us)
{
	struct timespec ts = { (time_t)(us / 1000000u), (long)(us % 1000000u) * 1000L };
	nanosleep(&ts, NULL);
}

static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;

void wl_vout(const char *fmt, va_list ap)
{
	pthread_mutex_lock(&out_mu);
	vprintf(fmt, ap);
	fflush(stdout);
	pthread_mutex_unlock(&out_mu);
}

void wl_out(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	wl_vout(fmt, ap);
	va_end(ap);
}

uint64_t wl_mix(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

uint64_t wl_rnd(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545f4914f6cdd1dull;
}

const char *wl_err_name(dg_err e, int short_form, char *buf, size_t cap)
{
	const char *s = dg_strerror(e);
	if (short_form && strncmp(s, "DG_ERR_", 7) == 0)
		s += 7;
	snprintf(buf, cap, "%.*s", (int)strcspn(s, ":"), s);
	return buf;
}
