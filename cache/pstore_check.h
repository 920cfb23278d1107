/*
 * pstore_check.h — what pstore.c does before it trusts a store file
 * (cache/, private; issue 14, "Storage integrity").
 *
 * LMDB checksums nothing and maps the file: a truncated file, or a page
 * number damaged into one past the end, is a SIGBUS inside liblmdb.  So:
 *  - dgi_pstore_precheck reads the file's two meta pages with plain reads
 *    before LMDB maps it: a file of 0 bytes, a meta page with neither
 *    copy valid, or a file shorter than its newest meta's last page is
 *    damaged;
 *  - dgi_pstore_guarded runs the scan that reads every record (pstore.c)
 *    with SIGBUS and SIGSEGV turned into an error for the scanning thread
 *    only (any other thread's fault goes to the handler there was before,
 *    as if we were not there).  A store whose scan faulted is refused: the
 *    environment is closed and not used again.
 */
#ifndef DG_CACHE_PSTORE_CHECK_H
#define DG_CACHE_PSTORE_CHECK_H

#include <stdbool.h>
#include <stddef.h>

/* Checks DIR/data.mdb.  0: fine; 1: no file yet (a new store); -1: damaged,
 * why[n] says how. */
int dgi_pstore_precheck(const char *dir, char *why, size_t n);

/* Runs fn(arg) and returns what it returns, or, when fn faulted on a bad
 * mapping, -sig (SIGBUS or SIGSEGV).  fn must leave nothing to undo but
 * what its caller can abandon (it is cut off where it faulted). */
int dgi_pstore_guarded(int (*fn)(void *arg), void *arg);

#endif
