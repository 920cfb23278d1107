/* children.c — child processes and the temporary directory of a suite
 * (children.h). */
#define _GNU_SOURCE
#include "children.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_CHILDREN 8
#define STOP_GRACE_NS 2000000000u   /* SIGTERM to SIGKILL */

static struct {
	pid_t parent;                 /* the process that owns the children */
	bool atexit_done;
	char dir[64];                 /* temporary directory, or "" */
	dgb_child ch[MAX_CHILDREN];
	int nch;
} G;

static int rm_one(const char *path, const struct stat *st, int flag,
    struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

void dgb_remove_tree(const char *path)
{
	nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

void dgb_tmpdir_remove(void)
{
	if (G.dir[0] == 0)
		return;
	dgb_remove_tree(G.dir);
	G.dir[0] = 0;
}

void dgb_children_stop(void)
{
	for (int i = 0; i < G.nch; i++)
		if (G.ch[i].pid > 0)
			kill(G.ch[i].pid, SIGTERM);
	uint64_t deadline = dgb_now_ns() + STOP_GRACE_NS;
	for (;;) {
		bool left = false;
		for (int i = 0; i < G.nch; i++) {
			if (G.ch[i].pid <= 0)
				continue;
			int status;
			pid_t r = waitpid(G.ch[i].pid, &status, WNOHANG);
			if (r == G.ch[i].pid || (r < 0 && errno == ECHILD))
				G.ch[i].pid = 0;
			else
				left = true;
		}
		if (!left)
			break;
		if (dgb_now_ns() >= deadline) {
			for (int i = 0; i < G.nch; i++)
				if (G.ch[i].pid > 0) {
					dgb_note("%s (pid %d) did not stop in 2 s: killed",
					    G.ch[i].name, (int)G.ch[i].pid);
					kill(G.ch[i].pid, SIGKILL);
					waitpid(G.ch[i].pid, NULL, 0);
					G.ch[i].pid = 0;
				}
			break;
		}
		usleep(10000);
	}
	G.nch = 0;
}

/* A forked process that ends with exit() runs this too: only the process
 * that made the directory stops the children and removes it. */
static void at_exit(void)
{
	if (getpid() != G.parent)
		return;
	dgb_children_stop();
	dgb_tmpdir_remove();
}

const char *dgb_tmpdir(void)
{
	if (G.dir[0] != 0)
		return G.dir;
	G.parent = getpid();
	if (!G.atexit_done) {
		atexit(at_exit);
		G.atexit_done = true;
	}
	snprintf(G.dir, sizeof G.dir, "/tmp/dgbench-XXXXXX");
	if (mkdtemp(G.dir) == NULL) {
		G.dir[0] = 0;
		dgb_die("mkdtemp: %s", strerror(errno));
	}
	return G.dir;
}

void dgb_child_log_tail(const dgb_child *c)
{
	FILE *f = fopen(c->log, "r");
	if (f == NULL)
		return;
	char buf[4096];
	fseek(f, 0, SEEK_END);
	long size = ftell(f);
	long from = size > (long)sizeof buf - 1 ? size - (long)sizeof buf + 1 : 0;
	fseek(f, from, SEEK_SET);
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	buf[n] = 0;
	fclose(f);
	fprintf(stderr, "dgbench: --- last output of %s (pid %d) ---\n%s%s"
	    "dgbench: ---\n", c->name, (int)c->was, buf,
	    n > 0 && buf[n - 1] != '\n' ? "\n" : "");
}

_Noreturn void dgb_child_die(const dgb_child *c, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	dgb_child_log_tail(c);
	dgb_die("%s: %s", c->name, msg);
}

long dgb_child_log_size(const dgb_child *c)
{
	struct stat st;
	return stat(c->log, &st) == 0 ? (long)st.st_size : 0;
}

bool dgb_child_log_find(const dgb_child *c, long from, const char *needle,
    char *line, size_t cap)
{
	FILE *f = fopen(c->log, "r");
	if (f == NULL)
		return false;
	bool found = false;
	/* a line longer than the buffer is read in pieces; a needle split
	 * across two pieces is missed, so keep the buffer above any log line */
	char buf[2048];
	if (fseek(f, from, SEEK_SET) == 0)
		while (!found && fgets(buf, sizeof buf, f) != NULL) {
			/* a last line without its newline is still being written: a
			 * reader can see part of a write (ext4 shows a write that
			 * crosses a page one page at a time), and an ALLOC-STATS or
			 * NODE-READY line cut short has a wrong number or address.
			 * It is read once whole. */
			if (strchr(buf, '\n') == NULL && feof(f))
				break;
			if (strstr(buf, needle) != NULL) {
				buf[strcspn(buf, "\n")] = 0;
				snprintf(line, cap, "%s", buf);
				found = true;
			}
		}
	fclose(f);
	return found;
}

dgb_child *dgb_spawn(const char *name, char *const argv[])
{
	if (G.nch == MAX_CHILDREN)
		dgb_die("too many child processes");
	dgb_tmpdir();
	dgb_child *c = &G.ch[G.nch];
	snprintf(c->name, sizeof c->name, "%s", name);
	snprintf(c->log, sizeof c->log, "%s/%s.log", G.dir, name);
	int fd = open(c->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (fd < 0 || null < 0)
		dgb_die("open %s: %s", c->log, strerror(errno));
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	if (pid < 0)
		dgb_die("fork: %s", strerror(errno));
	if (pid == 0) {
		/* only async-signal-safe calls until exec */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != G.parent)
			_exit(127);
		dup2(null, 0);
		dup2(fd, 1);
		dup2(fd, 2);
		execv(argv[0], argv);
		_exit(127);
	}
	close(fd);
	close(null);
	c->pid = c->was = pid;
	c->status = 0;
	G.nch++;
	return c;
}

bool dgb_child_alive(dgb_child *c)
{
	int status;
	if (c->pid <= 0)
		return false;
	pid_t r = waitpid(c->pid, &status, WNOHANG);
	if (r == 0)
		return true;
	c->status = status;
	c->pid = 0;
	return false;
}

/* p: never NULL (a NULL check here makes GCC suspect every snprintf into
 * the callers' buffers after a failed check). */
static bool executable(const char *p)
{
	struct stat st;
	return p[0] != 0 && stat(p, &st) == 0 && S_ISREG(st.st_mode) &&
	    access(p, X_OK) == 0;
}

bool dgb_find_dgnode(const dgb_opts *o, char *out, size_t cap, const char **why)
{
	if (o->dgnode != NULL) {
		snprintf(out, cap, "%s", o->dgnode);
		*why = "--dgnode is not an executable file";
		return executable(out);
	}
	const char *env = getenv("DG_DGNODE");
	if (env != NULL && env[0] != 0) {
		snprintf(out, cap, "%s", env);
		*why = "$DG_DGNODE is not an executable file";
		return executable(out);
	}
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n > 0) {
		self[n] = 0;
		char *slash = strrchr(self, '/');
		if (slash != NULL) {
			*slash = 0;
			if ((size_t)snprintf(out, cap, "%s/dgnode", self) < cap &&
			    executable(out))
				return true;
			if ((size_t)snprintf(out, cap, "%s/../node/dgnode", self) < cap &&
			    executable(out))
				return true;
		}
	}
	*why = "not found next to dgbench (give --dgnode PATH or $DG_DGNODE)";
	return false;
}

bool dgb_find_redis(char *out, size_t cap, const char **why)
{
	const char *env = getenv("DG_REDIS_SERVER");
	if (env != NULL && env[0] != 0) {
		snprintf(out, cap, "%s", env);
		*why = "$DG_REDIS_SERVER is not an executable file";
		return executable(out);
	}
	const char *path = getenv("PATH");
	if (path == NULL)
		path = "/usr/local/bin:/usr/bin:/bin";
	while (*path) {
		const char *end = strchr(path, ':');
		size_t len = end ? (size_t)(end - path) : strlen(path);
		if (len > 0 && len < cap - 16) {
			snprintf(out, cap, "%.*s/redis-server", (int)len, path);
			if (executable(out))
				return true;
		}
		path += len + (end != NULL);
	}
	/* sbin directories are often not in PATH */
	snprintf(out, cap, "/usr/sbin/redis-server");
	if (executable(out))
		return true;
	*why = "redis-server not installed (not in PATH; apt-get install redis-server)";
	return false;
}
