/* tpnode.c — a transport + membership node process for the cluster tests.
 *
 * Until dgnode exists this is the daemon the multi-process tests start: a
 * registry, a transport (dg_tp_start) and membership (dg_member_start), and
 * one line on stdout per event, flushed, for the test scripts to poll:
 *
 *   READY node=<16 hex digits> address=<url>      once joined (or formed)
 *   TOPOLOGY version=<v> nodes=<id>,<id>,...      every installed topology,
 *                                                 ids in order (coordinator
 *                                                 first)
 *   STATS auth_failures=<n> handshake_failures=<n> malformed=<n>
 *                                                 every 200 ms with --stats,
 *                                                 and once more at exit
 *
 * SIGTERM/SIGINT: leave the cluster (dg_member_stop), stop the transport,
 * exit 0.  A failed start: a message on stderr, exit 1.  The library logs to
 * stderr.  The cluster secret comes from a file, never the command line.
 */
#define _POSIX_C_SOURCE 200809L
#include "transport/transport.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SEEDS 64
#define SECRET_MAX 4096

static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;
static int64_t printed_version; /* the newest TOPOLOGY printed (out_mu) */

static void usage(FILE *f)
{
	fprintf(f,
	    "usage: tpnode [options]\n"
	    "A datagrid transport + membership node for the cluster tests.\n"
	    "Prints READY, TOPOLOGY and (with --stats) STATS lines on stdout.\n"
	    "\n"
	    "  --listen URL            where to listen (default tcp://127.0.0.1:0)\n"
	    "  --seed URL              a seed to join through (repeatable)\n"
	    "  --secret-file FILE      the cluster secret: the file's bytes, one\n"
	    "                          trailing newline dropped (default: no auth)\n"
	    "  --cluster NAME          cluster name (default datagrid)\n"
	    "  --failure-timeout MS    failure detection timeout (default 10000)\n"
	    "  --join-timeout MS       give up joining after MS (default 10000)\n"
	    "  --tls-cert FILE         PEM certificate + private key of this node\n"
	    "  --tls-ca FILE           PEM CA certificate (listen URL: tls+tcp://)\n"
	    "  --stats                 print STATS every 200 ms\n"
	    "  --help                  this text\n"
	    "\n"
	    "SIGTERM or SIGINT: leave the cluster and exit 0.  Exit 1 when the\n"
	    "node cannot start or join.\n");
}

static int parse_ms(const char *opt, const char *s, uint32_t *out)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno != 0 || end == s || *end != 0 || v == 0 || v > 3600000ul ||
	    s[0] == '-') {
		fprintf(stderr, "tpnode: %s: not a number of milliseconds (1..3600000): '%s'\n",
		    opt, s);
		return -1;
	}
	*out = (uint32_t)v;
	return 0;
}

/* The whole file, one trailing "\n" or "\r\n" dropped.  Empty is an error:
 * a secret file that says nothing is a mistake, not "authentication off". */
static int read_secret(const char *path, uint8_t *buf, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (f == NULL) {
		fprintf(stderr, "tpnode: --secret-file %s: %s\n", path, strerror(errno));
		return -1;
	}
	size_t n = fread(buf, 1, SECRET_MAX + 1, f);
	int err = ferror(f);
	fclose(f);
	if (err) {
		fprintf(stderr, "tpnode: --secret-file %s: read error\n", path);
		return -1;
	}
	if (n > SECRET_MAX) {
		fprintf(stderr, "tpnode: --secret-file %s: longer than %d bytes\n", path,
		    SECRET_MAX);
		return -1;
	}
	if (n > 0 && buf[n - 1] == '\n')
		n--;
	if (n > 0 && buf[n - 1] == '\r')
		n--;
	if (n == 0) {
		fprintf(stderr, "tpnode: --secret-file %s: empty secret\n", path);
		return -1;
	}
	*len = n;
	return 0;
}

/* Prints t if it is newer than anything printed so far (listeners may run
 * concurrently and out of order; the output stays monotonic). */
static void print_topology(const dg_topology *t)
{
	pthread_mutex_lock(&out_mu);
	if (t != NULL && t->version > printed_version) {
		printed_version = t->version;
		printf("TOPOLOGY version=%" PRId64 " nodes=", t->version);
		for (uint32_t i = 0; i < t->count; i++)
			printf("%s%016" PRIx64, i ? "," : "", t->nodes[i].id);
		printf("\n");
		fflush(stdout);
	}
	pthread_mutex_unlock(&out_mu);
}

static void on_topology(void *ctx, const dg_topology *old, const dg_topology *now)
{
	(void)ctx;
	(void)old;
	print_topology(now);
}

static void print_stats(const dg_tp *tp)
{
	dg_tp_stats s;
	dg_tp_get_stats(tp, &s);
	pthread_mutex_lock(&out_mu);
	printf("STATS auth_failures=%" PRIu64 " handshake_failures=%" PRIu64
	    " malformed=%" PRIu64 "\n", s.auth_failures, s.handshake_failures,
	    s.malformed_frames);
	fflush(stdout);
	pthread_mutex_unlock(&out_mu);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "listen", required_argument, NULL, 'l' },
		{ "seed", required_argument, NULL, 's' },
		{ "secret-file", required_argument, NULL, 'k' },
		{ "cluster", required_argument, NULL, 'c' },
		{ "failure-timeout", required_argument, NULL, 'f' },
		{ "join-timeout", required_argument, NULL, 'j' },
		{ "tls-cert", required_argument, NULL, 'C' },
		{ "tls-ca", required_argument, NULL, 'A' },
		{ "stats", no_argument, NULL, 'S' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *listen_url = "tcp://127.0.0.1:0";
	const char *seeds[MAX_SEEDS];
	size_t nseeds = 0;
	const char *secret_file = NULL, *cluster = NULL;
	const char *tls_cert = NULL, *tls_ca = NULL;
	uint32_t failure_ms = 10000, join_ms = 0;
	bool stats = false;
	static uint8_t secret[SECRET_MAX + 1];
	size_t secret_len = 0;
	int c;

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'l': listen_url = optarg; break;
		case 's':
			if (nseeds == MAX_SEEDS) {
				fprintf(stderr, "tpnode: more than %d seeds\n", MAX_SEEDS);
				return 1;
			}
			seeds[nseeds++] = optarg;
			break;
		case 'k': secret_file = optarg; break;
		case 'c': cluster = optarg; break;
		case 'f':
			if (parse_ms("--failure-timeout", optarg, &failure_ms) != 0)
				return 1;
			break;
		case 'j':
			if (parse_ms("--join-timeout", optarg, &join_ms) != 0)
				return 1;
			break;
		case 'C': tls_cert = optarg; break;
		case 'A': tls_ca = optarg; break;
		case 'S': stats = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 1;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "tpnode: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 1;
	}
	bool tls_url = strncmp(listen_url, "tls+tcp://", 10) == 0;
	if ((tls_cert != NULL) != (tls_ca != NULL)) {
		fprintf(stderr, "tpnode: --tls-cert and --tls-ca go together\n");
		return 1;
	}
	if (tls_ca != NULL && !tls_url) {
		fprintf(stderr, "tpnode: with --tls-ca the listen URL must be tls+tcp:// (got %s)\n",
		    listen_url);
		return 1;
	}
	if (tls_url && tls_ca == NULL) {
		fprintf(stderr, "tpnode: a tls+tcp:// listen URL needs --tls-cert and --tls-ca\n");
		return 1;
	}
	if (secret_file != NULL && read_secret(secret_file, secret, &secret_len) != 0)
		return 1;

	/* SIGTERM/SIGINT are taken by sigtimedwait in this thread only: block
	 * them before any thread exists so every nng thread inherits the mask.
	 * Default dispositions first: a shell starts background jobs with
	 * SIGINT ignored, and an ignored signal is discarded, never waited for. */
	signal(SIGTERM, SIG_DFL);
	signal(SIGINT, SIG_DFL);
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);

	dg_registry *reg = NULL;
	dg_tp *tp = NULL;
	dg_member *m = NULL;
	dg_err e;
	int rc = 1;

	if ((e = dg_registry_create(&reg)) != DG_OK) {
		fprintf(stderr, "tpnode: registry: %s\n", dg_strerror(e));
		return 1;
	}
	dg_tp_config tcfg;
	dg_tp_config_init(&tcfg);
	tcfg.listen_url = listen_url;
	if (cluster != NULL)
		tcfg.cluster_name = cluster;
	tcfg.secret = secret_len ? secret : NULL;
	tcfg.secret_len = secret_len;
	tcfg.tls_cert_key_file = tls_cert;
	tcfg.tls_ca_file = tls_ca;
	tcfg.reg = reg;
	if ((e = dg_tp_start(&tcfg, &tp)) != DG_OK) {
		fprintf(stderr, "tpnode: cannot start the transport on %s: %s\n", listen_url,
		    dg_strerror(e));
		goto out;
	}
	memset(secret, 0, sizeof(secret));

	dg_member_config mcfg;
	dg_member_config_init(&mcfg);
	mcfg.seeds = nseeds ? seeds : NULL;
	mcfg.nseeds = nseeds;
	mcfg.failure_timeout_ms = failure_ms;
	if (join_ms != 0)
		mcfg.join_timeout_ms = join_ms;
	mcfg.reg = reg;
	if ((e = dg_member_start(tp, &mcfg, &m)) != DG_OK) {
		fprintf(stderr, "tpnode: node %016" PRIx64 " could not join or form a cluster "
		    "(%zu seed(s), join timeout %u ms): %s\n", dg_tp_self(tp), nseeds,
		    mcfg.join_timeout_ms, dg_strerror(e));
		if (stats)
			print_stats(tp);
		goto out;
	}

	pthread_mutex_lock(&out_mu);
	printf("READY node=%016" PRIx64 " address=%s\n", dg_tp_self(tp), dg_tp_address(tp));
	fflush(stdout);
	pthread_mutex_unlock(&out_mu);
	/* The topology installed while joining came before the listener: print
	 * it now; the listener prints every newer one. */
	if ((e = dg_member_listen(m, on_topology, NULL)) != DG_OK) {
		fprintf(stderr, "tpnode: dg_member_listen: %s\n", dg_strerror(e));
		goto out;
	}
	dg_topology *t = dg_member_topology(m);
	print_topology(t);
	dg_topology_release(t);

	for (;;) {
		struct timespec wait = { 0, 200 * 1000000 };
		int sig = sigtimedwait(&sigs, NULL, &wait);
		if (sig == SIGTERM || sig == SIGINT)
			break;
		if (sig < 0 && errno != EAGAIN && errno != EINTR) {
			perror("tpnode: sigtimedwait");
			break;
		}
		if (stats)
			print_stats(tp);
	}
	if (stats)
		print_stats(tp);
	rc = 0;
out:
	dg_member_stop(m);
	dg_tp_stop(tp);
	dg_registry_destroy(reg);
	return rc;
}
