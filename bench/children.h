/*
 * children.h — the processes a dgbench suite starts (dgnode, redis-server)
 * and the temporary directory that holds their logs and data.
 *
 * Every child gets PR_SET_PDEATHSIG(SIGKILL) (it dies with dgbench, even
 * on SIGKILL), has stdout and stderr in DIR/<name>.log, and is stopped at
 * the end of the suite and on every exit path (an atexit handler, so
 * dgb_die covers the error paths): SIGTERM, up to 2 s, then SIGKILL and
 * waitpid.  The directory is removed then too.
 *
 * Not thread-safe: call from the suite's main thread, before the suite
 * starts threads of its own (fork copies only the calling thread).
 */
#ifndef DGB_CHILDREN_H
#define DGB_CHILDREN_H

#include "harness.h"

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct dgb_child {
	pid_t pid;                /* > 0 while running */
	pid_t was;                /* its pid, kept after it exited */
	int status;               /* wait status once it exited */
	char name[32];
	char log[128];            /* its stdout and stderr */
} dgb_child;

/* The temporary directory (/tmp/dgbench-XXXXXX), made on first use; the
 * atexit cleanup is registered then. */
const char *dgb_tmpdir(void);
/* Removes it and everything in it now (nothing if there is none). */
void dgb_tmpdir_remove(void);
/* Removes path and everything under it (errors ignored). */
void dgb_remove_tree(const char *path);

/* Starts argv[0] (argv NULL-terminated) with its output to
 * DIR/<name>.log.  The child stays in a static table: the pointer is valid
 * until dgb_children_stop. */
dgb_child *dgb_spawn(const char *name, char *const argv[]);
/* Reaps it if it exited (c->status then holds the wait status). */
bool dgb_child_alive(dgb_child *c);
/* Every child: SIGTERM, up to 2 s for all, then SIGKILL; forgets them. */
void dgb_children_stop(void);

/* The last 4 KB of c's log on stderr. */
void dgb_child_log_tail(const dgb_child *c);
/* Prints c's log tail, then dies (dgb_die) with "<name>: <message>". */
_Noreturn void dgb_child_die(const dgb_child *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The size of c's log now, the place to read its next lines from. */
long dgb_child_log_size(const dgb_child *c);
/* Scans c's log from byte `from` for the first whole line (a last line
 * not yet ended by its newline is left for a later call) containing `needle`;
 * copies it (without the newline, truncated to cap - 1) into line. */
bool dgb_child_log_find(const dgb_child *c, long from, const char *needle,
    char *line, size_t cap);

/* dgnode: --dgnode PATH, else $DG_DGNODE, else next to dgbench (./dgnode,
 * ../node/dgnode: the build tree).  false with *why when not found. */
bool dgb_find_dgnode(const dgb_opts *o, char *out, size_t cap, const char **why);
/* redis-server: $DG_REDIS_SERVER, else PATH, else /usr/sbin. */
bool dgb_find_redis(char *out, size_t cap, const char **why);

#endif /* DGB_CHILDREN_H */
