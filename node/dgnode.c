/* dgnode.c — the datagrid node process.
 *
 * Reads its settings (settings.h: defaults, --config files, flags), starts
 * a node (dg_node_start: joins the cluster through the seeds or forms one),
 * creates the --cache caches, and serves until SIGTERM or SIGINT; then it
 * leaves the cluster gracefully (dg_node_stop hands this node's partitions
 * over, bounded by request-timeout) and exits 0.
 *
 * Exit status: 0 after a graceful stop (or --help, --version), 1 when the
 * node cannot start or a cache cannot be created, 2 on a usage error.
 *
 * Logs: stderr, one line per event (DESIGN.md): level, a stable id, then
 * key=value fields; values with spaces or quotes are quoted.
 *   level=info id=NODE-STARTING version="datagrid 0.1.0" cluster=... listen=...
 *   level=error id=NODE-START err="..."
 *   level=error id=HTTP-LISTEN url=... err="..."   (the library's: --http-listen
 *              cannot be served; the start fails)
 *   level=error id=CACHE-CREATE cache=... err="..."
 *   level=info id=NODE-READY node=<16 hex digits> address=<url> caches=<n>
 *       admin=<url dgctl dials, or none>
 *       http=<url of GET /metrics' server, bound port>|none
 *   level=info id=NODE-LEAVING signal=SIGTERM [cause=dgctl-shutdown]
 *   level=info id=NODE-STOPPED node=<16 hex digits>
 *   level=info id=ALLOC-STATS allocs=<n> frees=<n> bytes=<n>   (on SIGUSR1)
 *   level=debug id=SETTING name=... value=...        (log-level=debug)
 * log-level filters these lines only: the library logs on its own.
 *
 * Signals: SIGTERM, SIGINT and SIGUSR1 are blocked before any thread
 * starts, so every node thread inherits the mask and only sigwait() here
 * takes them; a second signal while leaving is ignored (the leave is
 * bounded).  SIGUSR1 logs ALLOC-STATS: the process's dgi_alloc counters
 * since start (successful allocations, frees, bytes requested), so a
 * benchmark can take the difference over a run (dgbench txn sums it over
 * its dgnodes).  Taken by sigwait, not a handler: the line is printed from
 * the main thread, where stdio is safe.  It is an info line: log-level
 * warn or error silences it.
 * SIGPIPE is ignored: a peer closing a socket is an error, not a death.
 */
#define _POSIX_C_SOURCE 200809L
#include "datagrid.h"
#include "settings.h"

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int log_level = DGNODE_LOG_INFO;

/* v as a log value: bare when it has no space, quote, '=' or control
 * character, else quoted with \" and \\ escaped (control bytes as '?'). */
static const char *logval(const char *v, char *buf, size_t n)
{
	bool bare = v[0] != 0;
	for (const char *p = v; *p != 0 && bare; p++)
		if ((unsigned char)*p <= ' ' || *p == '"' || *p == '=' || *p == 0x7f)
			bare = false;
	if (bare)
		return v;
	size_t o = 0;
	buf[o++] = '"';
	for (const char *p = v; *p != 0 && o + 4 < n; p++) {
		unsigned char c = (unsigned char)*p;
		if (c == '"' || c == '\\')
			buf[o++] = '\\';
		buf[o++] = c < ' ' || c == 0x7f ? '?' : (char)c;
	}
	buf[o++] = '"';
	buf[o] = 0;
	return buf;
}

/* dgnode's own lines go into the library's log (marshal.h "Logging"):
 * one format, one minimum level (--log-level) for both. */
#define logline(level, ...) dg_log((dg_log_level)((level) + 1), __VA_ARGS__)

static void log_settings(const dgnode_settings *s)
{
	char value[1024], q[1100];
	if (log_level > DGNODE_LOG_DEBUG)
		return;
	for (size_t i = 0; i < dgnode_settings_count; i++) {
		const dgnode_setting *st = &dgnode_settings_table[i];
		dgnode_setting_format(s, st, value, sizeof(value));
		logline(DGNODE_LOG_DEBUG, "SETTING", "name=%s value=%s", st->name,
		    logval(value, q, sizeof(q)));
	}
}

/* Creates every --cache cache; returns how many, or -1 after logging. */
static long create_caches(dg_node *node, const dgnode_settings *s)
{
	char q[300], eq[300];
	for (size_t i = 0; i < s->caches.l_n; i++) {
		dg_cache_config cc;
		dg_cache *c;
		dg_err e;
		/* Validated by dgnode_settings_to_config: this cannot fail. */
		if (dgnode_parse_cache_spec(s->caches.l_items[i], &cc, stderr) != DGNODE_OK)
			return -1;
		if ((e = dg_cache_create(node, &cc, &c)) != DG_OK) {
			logline(DGNODE_LOG_ERROR, "CACHE-CREATE", "cache=%s err=%s",
			    logval(cc.name, q, sizeof(q)),
			    logval(dg_strerror(e), eq, sizeof(eq)));
			return -1;
		}
		logline(DGNODE_LOG_DEBUG, "CACHE-READY", "cache=%s",
		    logval(cc.name, q, sizeof(q)));
	}
	return (long)s->caches.l_n;
}

/* The ALLOC-STATS line: cumulative counters, so a reader takes the
 * difference of two lines (one dgi_alloc_get_stats call: consistent enough
 * for that, each counter being exact on its own). */
static void log_alloc_stats(void)
{
	dgi_alloc_stats st;
	dgi_alloc_get_stats(&st);
	logline(DGNODE_LOG_INFO, "ALLOC-STATS", "allocs=%" PRIu64 " frees=%" PRIu64
	    " bytes=%" PRIu64, st.allocs, st.frees, st.bytes);
}

/* dgctl shutdown: from an admin thread, which must not stop the node
 * itself (dg_node_stop joins the admin threads); the main thread's sigwait
 * takes the SIGTERM and leaves as for any other. */
static _Atomic bool admin_shutdown;
static void on_admin_shutdown(void *ctx)
{
	(void)ctx;
	admin_shutdown = true;
	kill(getpid(), SIGTERM);
}

int main(int argc, char **argv)
{
	dgnode_settings s;
	dg_node_config cfg;
	dg_node *node = NULL;
	sigset_t stop;
	struct sigaction ign;
	char q1[300], q2[300], q3[300];
	int rc, sig = 0;
	dg_err e;

	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGUSR1);
	if ((rc = pthread_sigmask(SIG_BLOCK, &stop, NULL)) != 0) {
		fprintf(stderr, "dgnode: pthread_sigmask: %s\n", strerror(rc));
		return 1;
	}
	memset(&ign, 0, sizeof(ign));
	ign.sa_handler = SIG_IGN;
	sigemptyset(&ign.sa_mask);
	sigaction(SIGPIPE, &ign, NULL);

	dgnode_settings_init(&s);
	rc = dgnode_settings_parse_args(&s, argc, argv, stderr);
	if (rc != DGNODE_OK) {
		dgnode_settings_free(&s);
		return rc == DGNODE_EXIT ? 0 : 2;
	}
	log_level = s.log_level;
	/* DGNODE_LOG_DEBUG.. are DG_LOG_DEBUG.. less one */
	dg_log_configure(NULL, NULL, (dg_log_level)(log_level + 1));
	if (dgnode_settings_to_config(&s, &cfg, stderr) != DGNODE_OK) {
		dgnode_settings_free(&s);
		return 2;
	}
	log_settings(&s);
	logline(DGNODE_LOG_INFO, "NODE-STARTING", "version=%s cluster=%s listen=%s "
	    "seeds=%zu caches=%zu", logval(dg_version(), q1, sizeof(q1)),
	    logval(s.cluster_name, q2, sizeof(q2)), logval(s.listen, q3, sizeof(q3)),
	    s.seeds.l_n, s.caches.l_n);

	cfg.on_shutdown = on_admin_shutdown;
	if ((e = dg_node_start(&cfg, &node)) != DG_OK) {
		logline(DGNODE_LOG_ERROR, "NODE-START", "err=\"%s\"", dg_strerror(e));
		dgnode_settings_free(&s);
		return 1;
	}
	long ncaches = create_caches(node, &s);
	if (ncaches < 0) {
		dg_node_stop(node);
		dgnode_settings_free(&s);
		return 1;
	}
	uint64_t id = dg_node_get_id(node);
	const char *admin = dg_node_admin_address(node);
	const char *http = dg_node_http_address(node);
	logline(DGNODE_LOG_INFO, "NODE-READY", "node=%016" PRIx64 " address=%s "
	    "caches=%ld admin=%s http=%s", id, logval(dg_node_address(node), q1, sizeof(q1)),
	    ncaches, logval(admin ? admin : "none", q2, sizeof(q2)),
	    logval(http != NULL ? http : "none", q3, sizeof(q3)));

	do {
		if (sigwait(&stop, &sig) != 0)
			sig = 0;
		if (sig == SIGUSR1)
			log_alloc_stats();
	} while (sig != SIGTERM && sig != SIGINT);
	logline(DGNODE_LOG_INFO, "NODE-LEAVING", "signal=%s%s",
	    sig == SIGTERM ? "SIGTERM" : "SIGINT",
	    admin_shutdown ? " cause=dgctl-shutdown" : "");
	dg_node_stop(node);
	logline(DGNODE_LOG_INFO, "NODE-STOPPED", "node=%016" PRIx64, id);
	dgnode_settings_free(&s);
	return 0;
}
