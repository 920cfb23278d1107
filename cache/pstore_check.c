/*
 * pstore_check.c — the file check and the fault guard of pstore_check.h.
 *
 * LMDB's meta page (lmdb/mdb.c, MDB_meta after the 16-byte page header;
 * one at page 0, one at page 1, the one with the larger txnid is current):
 *   +16 u32 magic 0xBEEFC0DE   +20 u32 version (1)
 *   +24 u64 address            +32 u64 mapsize
 *   +40 two MDB_db of 48 bytes (free list, main): u32 pad (the free list's
 *       holds the page size), u16 flags, u16 depth, u64 branch, leaf and
 *       overflow pages, u64 entries, u64 root page (~0: empty)
 *   +136 u64 last page         +144 u64 txnid
 * Read little-endian: LMDB files are native-endian and this is x86-64 /
 * aarch64 only.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "cache/pstore_check.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define META_MAGIC 0xBEEFC0DEu
#define PAGEHDR 16u
#define META_END (PAGEHDR + 136u)    /* through txnid */

static uint64_t le(const uint8_t *p, unsigned n)
{
	uint64_t v = 0;
	for (unsigned i = 0; i < n; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

struct meta {
	bool ok;
	uint32_t psize;
	uint64_t last_pg, txnid, root[2];
};

static struct meta parse(const uint8_t *p)
{
	struct meta m = { 0 };
	const uint8_t *x = p + PAGEHDR;
	if (le(x, 4) != META_MAGIC || le(x + 4, 4) != 1)
		return m;
	m.psize = (uint32_t)le(x + 24, 4);
	m.last_pg = le(x + 120, 8);
	m.txnid = le(x + 128, 8);
	m.root[0] = le(x + 24 + 40, 8);
	m.root[1] = le(x + 24 + 48 + 40, 8);
	m.ok = m.psize >= 512 && m.psize <= 65536 && (m.psize & (m.psize - 1)) == 0 &&
	    m.last_pg >= 1;
	for (int i = 0; i < 2 && m.ok; i++)
		m.ok = m.root[i] == UINT64_MAX || (m.root[i] >= 2 && m.root[i] <= m.last_pg);
	return m;
}

int dgi_pstore_precheck(const char *dir, char *why, size_t n)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/data.mdb", dir);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)
			return 1;
		snprintf(why, n, "cannot open %s: %s", path, strerror(errno));
		return -1;
	}
	struct stat st;
	uint8_t p0[META_END], p1[META_END];
	int rc = -1;
	if (fstat(fd, &st) != 0) {
		snprintf(why, n, "cannot stat %s: %s", path, strerror(errno));
	} else if (st.st_size == 0) {
		snprintf(why, n, "%s is empty (0 bytes): truncated", path);
	} else if (pread(fd, p0, sizeof(p0), 0) != (ssize_t)sizeof(p0)) {
		snprintf(why, n, "%s is %lld bytes: shorter than a meta page", path,
		    (long long)st.st_size);
	} else {
		struct meta a = parse(p0), b = { 0 };
		/* the second meta sits one page in: the page size from the
		 * first, else the usual 4 KiB */
		uint32_t ps = a.ok ? a.psize : 4096;
		if (pread(fd, p1, sizeof(p1), ps) == (ssize_t)sizeof(p1))
			b = parse(p1);
		struct meta *m = a.ok && (!b.ok || a.txnid >= b.txnid) ? &a : b.ok ? &b : NULL;
		if (m == NULL)
			snprintf(why, n, "%s: neither meta page is valid", path);
		else if ((uint64_t)st.st_size < (m->last_pg + 1) * (uint64_t)m->psize)
			snprintf(why, n, "%s is %lld bytes, its meta page says %llu pages of %u: "
			    "truncated", path, (long long)st.st_size,
			    (unsigned long long)(m->last_pg + 1), m->psize);
		else
			rc = 0;
	}
	close(fd);
	return rc;
}

/* ---- the fault guard ---- */

static _Thread_local sigjmp_buf *guard_jb;
static pthread_mutex_t guard_mu = PTHREAD_MUTEX_INITIALIZER;
static int guard_users;
static struct sigaction old_bus, old_segv;

static void on_fault(int sig, siginfo_t *si, void *uc)
{
	(void)si;
	(void)uc;
	if (guard_jb != NULL)
		siglongjmp(*guard_jb, sig);
	/* not ours: give the signal back to who had it; the faulting access
	 * runs again and faults into that handler */
	sigaction(sig, sig == SIGBUS ? &old_bus : &old_segv, NULL);
}

static void guard_begin(void)
{
	pthread_mutex_lock(&guard_mu);
	if (guard_users++ == 0) {
		struct sigaction sa;
		memset(&sa, 0, sizeof(sa));
		sa.sa_sigaction = on_fault;
		sa.sa_flags = SA_SIGINFO | SA_NODEFER;
		sigemptyset(&sa.sa_mask);
		sigaction(SIGBUS, &sa, &old_bus);
		sigaction(SIGSEGV, &sa, &old_segv);
	}
	pthread_mutex_unlock(&guard_mu);
}

static void guard_end(void)
{
	pthread_mutex_lock(&guard_mu);
	if (--guard_users == 0) {
		sigaction(SIGBUS, &old_bus, NULL);
		sigaction(SIGSEGV, &old_segv, NULL);
	}
	pthread_mutex_unlock(&guard_mu);
}

int dgi_pstore_guarded(int (*fn)(void *arg), void *arg)
{
	sigjmp_buf jb;
	volatile int rc = 0;
	guard_begin();
	int sig = sigsetjmp(jb, 1);
	if (sig == 0) {
		guard_jb = &jb;
		rc = fn(arg);
	}
	guard_jb = NULL;
	guard_end();
	return sig != 0 ? -sig : rc;
}
