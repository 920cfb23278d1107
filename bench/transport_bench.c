/*
 * transport_bench.c — the "transport" suite: datagrid's node-to-node
 * transport between two processes over loopback, against raw nng req/rep,
 * nng's bare stream API and a plain blocking TCP ping-pong in the same run.
 *
 * Cases (payload: 64 bytes, PING/ECHO bodies are dg_msg_bytes):
 *   oneway64        N one-way ECHO messages, timed until the server has
 *                   handled all N (a PING request after the last ECHO: its
 *                   reply comes back on the same ordered connection, after
 *                   every earlier frame was dispatched); ops_per_s.
 *   oneway64_tls    the same over tls+tcp://.
 *   rtt64           sequential request/response round trips; p50_us and
 *                   p99_us.  datagrid: dg_tp_call(PING) (the server's
 *                   built-in PING handler echoes the payload);
 *                   nng-reqrep: nng_req0 / nng_rep0 sockets over tcp://,
 *                   the server echoes the message (the client reuses the
 *                   reply message for its next request: nng's best case);
 *                   nng-stream: nng's stream API, the layer datagrid's
 *                   tls+tcp:// is built on (and its tcp:// was, before the
 *                   native reactor), with nothing above it: the server
 *                   echoes from its aio callbacks, the client sends and
 *                   receives with nng_aio_wait — the floor of that design;
 *                   tcp: two blocking sockets, TCP_NODELAY, one thread per
 *                   side, 64 bytes each way (the floor of this machine);
 *                   tcp-handoff: the same socket pair with datagrid's
 *                   thread structure and none of its code — the client's
 *                   reply is read by a thread of its own waiting in
 *                   epoll_wait (as the reactor does) and handed to the
 *                   caller, who waits as dg_tp_call does
 *                   (dgi_sem_wait_spin: a 30 us spin, then the semaphore).
 *                   It is the floor of that design: three threads on a
 *                   round trip's path where tcp has two.
 *   rtt64_tls       datagrid's round trip over tls+tcp:// (certificates made
 *                   at run time with libcrypto: an EC P-256 CA and one node
 *                   certificate, CN and SAN "datagrid", in a temporary
 *                   directory removed once both nodes have loaded them, and
 *                   at exit).  Skipped, with the reason on stderr, if TLS
 *                   cannot be set up.
 *   metrics_update  the per-type counter updates one message pays
 *                   (dgi_count_tx at the sender + dgi_count_rx at the
 *                   receiver), in-process on a local dg_tp, measured by the
 *                   harness; impl "datagrid" with the updates,
 *                   "datagrid-nocount" the same loop without them: the
 *                   difference is the cost.
 *
 * Two processes: the suite forks a server child before the parent creates
 * any nng object (nng must not be used across fork).  The child starts its
 * own registry and dg_tp (tcp://, and tls+tcp:// when the certificates could
 * be made), an nng rep socket, an nng stream listener and a TCP listener,
 * reports their addresses on a pipe and serves until the parent closes its
 * command pipe (or dies: PR_SET_PDEATHSIG).  Through the same pipes the
 * parent asks it for its counters ('S': datagrid allocations, malloc calls,
 * ECHOs handled) before and after each timed loop.  The parent stops the
 * child at the end and on every exit path (atexit: close, wait 2 s,
 * SIGKILL, waitpid).
 *
 * Method.  Every case is warmed up first (connections open, buffers grown).
 * Round trips: the implementations of a case alternate repetition by
 * repetition (5, or 3 with --quick; 2000 or 500 round trips each), every
 * round trip is timed alone (CLOCK_MONOTONIC); p50_us/p99_us are the
 * nearest-rank percentiles of all timed samples, ns_per_op the mean round
 * trip of the best repetition (as the harness reports).  One-way: N is
 * calibrated on the warm-up runs to ~300 ms (~60 ms) per repetition;
 * ops_per_s is the best repetition, ns_per_op its inverse.  Back-pressure
 * (DG_ERR_BUSY from dg_tp_send) is retried after sched_yield and the
 * retries counted (stderr).  "bytes" is one message on the wire:
 * datagrid's frame (header + body, from its own byte counters), nng's
 * SP/TCP message (8-byte length, 4-byte request id, payload), nng-stream's
 * and tcp's payload.
 *
 * allocs_per_op: datagrid lines count datagrid's allocator (dgi_alloc) in
 * both processes over the timed loops, and report the larger of the two
 * per operation (each process's count is on stderr, with the malloc calls
 * of each process, nng's included).  Peer lines count malloc calls the same
 * way (the larger of the two processes).  The malloc counter of the harness
 * is not atomic; with nng's threads allocating at once it may miss a few.
 */
#define _GNU_SOURCE
#include "harness.h"
#include "transport/transport_int.h" /* dgi_count_tx/rx (metrics_update) */

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/resource.h>
#include <openssl/x509v3.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <semaphore.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SUITE "transport"
#define PAYLOAD 64
#define CALL_TIMEOUT_MS 10000
#define CHILD_TIMEOUT_MS 20000 /* the child answers a command within this */

/* Lines this suite prints itself (main.c): latency and throughput do not fit
 * the harness's ns_per_op rows. */
int dgb_transport_suite(const dgb_opts *o);

#define NNG_DO(expr)                                                       \
	do {                                                                   \
		int rv_ = (expr);                                                  \
		if (__builtin_expect(rv_ != 0, 0))                                 \
			dgb_die("%s:%d: %s: %s", __FILE__, __LINE__, #expr,            \
			    nng_strerror(rv_));                                        \
	} while (0)

#define CHECK(cond)                                                        \
	do {                                                                   \
		if (__builtin_expect(!(cond), 0))                                  \
			dgb_die("%s:%d: check failed: %s", __FILE__, __LINE__, #cond); \
	} while (0)

/* Context switches of every thread of this process so far, voluntary
 * (blocking: a wait, a sleep) and not (preempted). */
static uint64_t ctx_switches(void)
{
	struct rusage ru;
	if (getrusage(RUSAGE_SELF, &ru) != 0)
		return 0;
	return (uint64_t)ru.ru_nvcsw + (uint64_t)ru.ru_nivcsw;
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t dg_allocs(void)
{
	dgi_alloc_stats s;
	dgi_alloc_get_stats(&s);
	return s.allocs;
}

/* ---- process state (parent) ---- */
static struct {
	pid_t parent;
	pid_t child;        /* > 0 while the server runs */
	int cmd_w;          /* parent -> child commands; closing it stops the child */
	int rep_r;          /* child -> parent lines */
	char dir[64];       /* temporary directory of the TLS files, or "" */
	char cert[128];     /* node certificate + key (PEM) */
	char ca[128];       /* CA certificate (PEM) */
	bool tls_files;     /* the files exist */
	bool cleanup_registered;
} G = { .cmd_w = -1, .rep_r = -1 };

/* ------------------------------------------------------------------------
 * TLS material: a CA and one node certificate, EC P-256, made with
 * libcrypto.  The client verifies the server name "datagrid" (tp.c), so the
 * node certificate carries it as CN and SAN; both nodes use it.
 * ------------------------------------------------------------------------ */
static bool add_ext(X509 *cert, X509 *issuer, int nid, const char *value)
{
	X509V3_CTX ctx;
	X509V3_set_ctx_nodb(&ctx);
	X509V3_set_ctx(&ctx, issuer, cert, NULL, NULL, 0);
	X509_EXTENSION *ex = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
	if (ex == NULL)
		return false;
	bool ok = X509_add_ext(cert, ex, -1) == 1;
	X509_EXTENSION_free(ex);
	return ok;
}

/* issuer NULL: self-signed CA. */
static X509 *make_cert(EVP_PKEY *key, const char *cn, long serial, X509 *issuer,
    EVP_PKEY *issuer_key)
{
	X509 *x = X509_new();
	if (x == NULL)
		return NULL;
	bool ca = issuer == NULL;
	X509_NAME *name = X509_get_subject_name(x);
	bool ok = X509_set_version(x, 2) == 1 &&
	    ASN1_INTEGER_set(X509_get_serialNumber(x), serial) == 1 &&
	    X509_gmtime_adj(X509_getm_notBefore(x), -3600) != NULL &&
	    X509_gmtime_adj(X509_getm_notAfter(x), 2 * 86400) != NULL &&
	    X509_set_pubkey(x, key) == 1 &&
	    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
	        (const unsigned char *)cn, -1, -1, 0) == 1 &&
	    X509_set_issuer_name(x, ca ? name : X509_get_subject_name(issuer)) == 1;
	if (ok && ca)
		ok = add_ext(x, x, NID_basic_constraints, "critical,CA:TRUE") &&
		    add_ext(x, x, NID_key_usage, "critical,keyCertSign,cRLSign") &&
		    add_ext(x, x, NID_subject_key_identifier, "hash");
	else if (ok)
		ok = add_ext(x, issuer, NID_basic_constraints, "critical,CA:FALSE") &&
		    add_ext(x, issuer, NID_key_usage,
		        "critical,digitalSignature,keyAgreement") &&
		    add_ext(x, issuer, NID_ext_key_usage, "serverAuth,clientAuth") &&
		    add_ext(x, issuer, NID_subject_alt_name, "DNS:datagrid") &&
		    add_ext(x, issuer, NID_subject_key_identifier, "hash") &&
		    add_ext(x, issuer, NID_authority_key_identifier, "keyid:always");
	if (ok)
		ok = X509_sign(x, ca ? key : issuer_key, EVP_sha256()) > 0;
	if (!ok) {
		X509_free(x);
		return NULL;
	}
	return x;
}

/* Writes cert (and key, if not NULL) to a new file only we can read. */
static bool write_pem(const char *path, X509 *cert, EVP_PKEY *key)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return false;
	FILE *f = fdopen(fd, "w");
	if (f == NULL) {
		close(fd);
		return false;
	}
	bool ok = PEM_write_X509(f, cert) == 1 &&
	    (key == NULL ||
	        PEM_write_PrivateKey(f, key, NULL, NULL, 0, NULL, NULL) == 1);
	return fclose(f) == 0 && ok;
}

static void remove_tls_files(void)
{
	if (G.dir[0] == 0)
		return;
	unlink(G.cert);
	unlink(G.ca);
	rmdir(G.dir);
	G.dir[0] = 0;
	G.tls_files = false;
}

/* Writes G.ca and G.cert; false (and why, on stderr) if it cannot. */
static bool make_tls_files(void)
{
	EVP_PKEY *ca_key = NULL, *node_key = NULL;
	X509 *ca = NULL, *node = NULL;
	const char *why = NULL;

	snprintf(G.dir, sizeof G.dir, "/tmp/dgbench-tls-XXXXXX");
	if (mkdtemp(G.dir) == NULL) {
		dgb_note("TLS cases skipped: mkdtemp: %s", strerror(errno));
		G.dir[0] = 0;
		return false;
	}
	snprintf(G.cert, sizeof G.cert, "%s/node.pem", G.dir);
	snprintf(G.ca, sizeof G.ca, "%s/ca.pem", G.dir);

	if ((ca_key = EVP_EC_gen("P-256")) == NULL ||
	    (node_key = EVP_EC_gen("P-256")) == NULL)
		why = "EC P-256 key generation";
	else if ((ca = make_cert(ca_key, "dgbench CA", 1, NULL, NULL)) == NULL)
		why = "CA certificate";
	else if ((node = make_cert(node_key, "datagrid", 2, ca, ca_key)) == NULL)
		why = "node certificate";
	else if (!write_pem(G.ca, ca, NULL))
		why = "writing the CA file";
	else if (!write_pem(G.cert, node, node_key))
		why = "writing the node certificate file";
	X509_free(node);
	X509_free(ca);
	EVP_PKEY_free(node_key);
	EVP_PKEY_free(ca_key);
	if (why != NULL) {
		char err[256] = "";
		unsigned long code = ERR_get_error();
		if (code != 0)
			ERR_error_string_n(code, err, sizeof err);
		dgb_note("TLS cases skipped: %s failed%s%s", why, err[0] ? ": " : "", err);
		remove_tls_files();
		return false;
	}
	G.tls_files = true;
	return true;
}

/* ------------------------------------------------------------------------
 * The server child.
 * ------------------------------------------------------------------------ */
static _Atomic uint64_t srv_echoes;

static void srv_on_echo(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	(void)ctx;
	atomic_fetch_add_explicit(&srv_echoes, 1, memory_order_relaxed);
	dg_tp_reply(tp, in, in->type, in->body); /* no-op for one-way */
}

static int read_full(int fd, void *p, size_t n)
{
	uint8_t *b = p;
	while (n > 0) {
		ssize_t r = read(fd, b, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

static int write_full(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;
	while (n > 0) {
		ssize_t r = write(fd, b, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

static void set_nodelay(int fd)
{
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static nng_socket srv_rep;

static void *srv_rep_thread(void *arg)
{
	(void)arg;
	for (;;) {
		nng_msg *m;
		if (nng_recvmsg(srv_rep, &m, 0) != 0)
			break;
		if (nng_sendmsg(srv_rep, m, 0) != 0) {
			nng_msg_free(m);
			break;
		}
	}
	return NULL;
}

/* nng-stream peer: an echo driven by aio callbacks, as datagrid's own
 * server side is (its handlers run in the receive callback). */
static struct {
	nng_stream_listener *l;
	nng_aio *acc, *rx, *tx;
	nng_stream *st;
	uint8_t buf[PAYLOAD];
	size_t got, sent;
} SS;

static void ss_recv(void)
{
	nng_iov iov = { SS.buf + SS.got, PAYLOAD - SS.got };
	nng_aio_set_iov(SS.rx, 1, &iov);
	nng_stream_recv(SS.st, SS.rx);
}

static void ss_send(void)
{
	nng_iov iov = { SS.buf + SS.sent, PAYLOAD - SS.sent };
	nng_aio_set_iov(SS.tx, 1, &iov);
	nng_stream_send(SS.st, SS.tx);
}

static void ss_rx_cb(void *arg)
{
	(void)arg;
	if (nng_aio_result(SS.rx) != 0)
		return;
	SS.got += nng_aio_count(SS.rx);
	if (SS.got < PAYLOAD) {
		ss_recv();
		return;
	}
	SS.got = 0;
	SS.sent = 0;
	ss_send();
}

static void ss_tx_cb(void *arg)
{
	(void)arg;
	if (nng_aio_result(SS.tx) != 0)
		return;
	SS.sent += nng_aio_count(SS.tx);
	if (SS.sent < PAYLOAD)
		ss_send();
	else
		ss_recv();
}

static void ss_acc_cb(void *arg)
{
	(void)arg;
	if (nng_aio_result(SS.acc) != 0)
		return;
	if (SS.st != NULL) { /* one client at a time: the newest wins */
		nng_stream_close(SS.st);
		nng_aio_stop(SS.rx);
		nng_aio_stop(SS.tx);
		nng_stream_free(SS.st);
	}
	SS.st = nng_aio_get_output(SS.acc, 0);
	SS.got = 0;
	ss_recv();
	nng_stream_listener_accept(SS.l, SS.acc);
}

/* One TCP client (tcp, tcp-handoff): echoes until it closes. */
static void *srv_tcp_echo(void *arg)
{
	int fd = (int)(intptr_t)arg;
	uint8_t b[PAYLOAD];
	while (read_full(fd, b, sizeof b) == 0 && write_full(fd, b, sizeof b) == 0)
		;
	close(fd);
	return NULL;
}

static void *srv_tcp_thread(void *arg)
{
	int lfd = (int)(intptr_t)arg;
	for (;;) {
		int fd = accept(lfd, NULL, NULL);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			break;
		}
		set_nodelay(fd);
		pthread_t th;
		if (pthread_create(&th, NULL, srv_tcp_echo, (void *)(intptr_t)fd) != 0)
			close(fd);
		else
			pthread_detach(th);
	}
	return NULL;
}

static void child_line(int fd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void child_line(int fd, const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof line || write_full(fd, line, (size_t)n) != 0)
		_exit(3);
}

_Noreturn static void child_fail(int fd, const char *what, const char *why)
{
	char line[512];
	int n = snprintf(line, sizeof line, "FAIL %s: %s\n", what, why);
	if (n > 0)
		(void)write_full(fd, line,
		    (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
	_exit(1);
}

/* Serves until cmd_r reaches EOF; never returns. */
_Noreturn static void serve(int cmd_r, int rep_w, bool tls)
{
	dg_registry *reg = NULL;
	dg_tp *tp = NULL, *tp_tls = NULL;
	dg_tp_config cfg;
	dg_err e;
	const char *tls_why = "no certificates";

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != G.parent)
		_exit(1); /* the parent died before prctl */

	if ((e = dg_registry_create(&reg)) != DG_OK)
		child_fail(rep_w, "dg_registry_create", dg_strerror(e));
	dg_tp_config_init(&cfg);
	cfg.listen_url = "tcp://127.0.0.1:0";
	cfg.cluster_name = "dgbench";
	cfg.reg = reg;
	if ((e = dg_tp_start(&cfg, &tp)) != DG_OK)
		child_fail(rep_w, "dg_tp_start tcp://", dg_strerror(e));
	dg_tp_handle(tp, DG_MSG_ECHO, srv_on_echo, NULL);
	if (tls) {
		cfg.listen_url = "tls+tcp://127.0.0.1:0";
		cfg.tls_cert_key_file = G.cert;
		cfg.tls_ca_file = G.ca;
		if ((e = dg_tp_start(&cfg, &tp_tls)) != DG_OK) {
			tp_tls = NULL;
			tls_why = dg_strerror(e);
		} else {
			dg_tp_handle(tp_tls, DG_MSG_ECHO, srv_on_echo, NULL);
		}
	}

	int rv;
	nng_listener nl;
	int nport = 0;
	if ((rv = nng_rep0_open(&srv_rep)) != 0 ||
	    (rv = nng_listen(srv_rep, "tcp://127.0.0.1:0", &nl, 0)) != 0 ||
	    (rv = nng_listener_get_int(nl, NNG_OPT_TCP_BOUND_PORT, &nport)) != 0)
		child_fail(rep_w, "nng rep socket", nng_strerror(rv));

	int sport = 0;
	if ((rv = nng_stream_listener_alloc(&SS.l, "tcp://127.0.0.1:0")) != 0 ||
	    (rv = nng_stream_listener_listen(SS.l)) != 0 ||
	    (rv = nng_stream_listener_get_int(SS.l, NNG_OPT_TCP_BOUND_PORT,
	        &sport)) != 0 ||
	    (rv = nng_aio_alloc(&SS.acc, ss_acc_cb, NULL)) != 0 ||
	    (rv = nng_aio_alloc(&SS.rx, ss_rx_cb, NULL)) != 0 ||
	    (rv = nng_aio_alloc(&SS.tx, ss_tx_cb, NULL)) != 0)
		child_fail(rep_w, "nng stream listener", nng_strerror(rv));
	nng_stream_listener_accept(SS.l, SS.acc);

	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t slen = sizeof sa;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
	    listen(lfd, 4) != 0 ||
	    getsockname(lfd, (struct sockaddr *)&sa, &slen) != 0)
		child_fail(rep_w, "tcp listener", strerror(errno));

	pthread_t rep_th, tcp_th;
	if (pthread_create(&rep_th, NULL, srv_rep_thread, NULL) != 0 ||
	    pthread_create(&tcp_th, NULL, srv_tcp_thread, (void *)(intptr_t)lfd) != 0)
		child_fail(rep_w, "pthread_create", "failed");

	child_line(rep_w, "READY %s %s tcp://127.0.0.1:%d %d tcp://127.0.0.1:%d\n",
	    dg_tp_address(tp), tp_tls ? dg_tp_address(tp_tls) : "-", nport,
	    ntohs(sa.sin_port), sport);
	if (tls && tp_tls == NULL)
		child_line(rep_w, "NOTE server dg_tp_start tls+tcp:// failed: %s\n", tls_why);

	for (;;) {
		char cmd;
		ssize_t r = read(cmd_r, &cmd, 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break; /* the parent closed the pipe (or died) */
		if (cmd == 'S')
			child_line(rep_w, "STATS %llu %llu %llu %llu\n",
			    (unsigned long long)dg_allocs(),
			    (unsigned long long)dgb_heap_allocs(),
			    (unsigned long long)atomic_load(&srv_echoes),
			    (unsigned long long)ctx_switches());
	}
	/* orderly stop; the parent SIGKILLs us if this hangs */
	nng_close(srv_rep);
	nng_stream_listener_close(SS.l);
	nng_aio_stop(SS.acc);
	if (SS.st != NULL)
		nng_stream_close(SS.st);
	nng_aio_stop(SS.rx);
	nng_aio_stop(SS.tx);
	shutdown(lfd, SHUT_RDWR);
	close(lfd);
	pthread_join(rep_th, NULL);
	dg_tp_stop(tp_tls);
	dg_tp_stop(tp);
	dg_registry_destroy(reg);
	_exit(0);
}

/* ------------------------------------------------------------------------
 * The parent's side of the pipes.
 * ------------------------------------------------------------------------ */

/* One line from the child (without the newline), or dies. */
static void child_read_line(char *out, size_t cap)
{
	size_t n = 0;
	for (;;) {
		struct pollfd p = { G.rep_r, POLLIN, 0 };
		int rv = poll(&p, 1, CHILD_TIMEOUT_MS);
		if (rv < 0 && errno == EINTR)
			continue;
		if (rv == 0)
			dgb_die("the server process did not answer in %d ms", CHILD_TIMEOUT_MS);
		char c;
		ssize_t r = read(G.rep_r, &c, 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			dgb_die("the server process exited");
		if (c == '\n')
			break;
		if (n + 1 < cap)
			out[n++] = c;
	}
	out[n] = 0;
}

typedef struct srv_stats {
	uint64_t dg_allocs, heap_allocs, echoes, csw;
} srv_stats;

static srv_stats child_stats(void)
{
	char line[256];
	srv_stats s;
	unsigned long long a, h, n, w;
	CHECK(write_full(G.cmd_w, "S", 1) == 0);
	child_read_line(line, sizeof line);
	if (sscanf(line, "STATS %llu %llu %llu %llu", &a, &h, &n, &w) != 4)
		dgb_die("server: unexpected answer '%s'", line);
	s.dg_allocs = a;
	s.heap_allocs = h;
	s.echoes = n;
	s.csw = w;
	return s;
}

/* Stops the child: EOF on its command pipe, 2 s to exit, then SIGKILL. */
static void child_stop(void)
{
	if (G.child <= 0)
		return;
	if (G.cmd_w >= 0) {
		close(G.cmd_w);
		G.cmd_w = -1;
	}
	int status;
	pid_t r = 0;
	for (int i = 0; i < 200; i++) {
		r = waitpid(G.child, &status, WNOHANG);
		if (r != 0)
			break;
		usleep(10000);
	}
	if (r == 0) {
		dgb_note("server process %d did not stop in 2 s: killed", (int)G.child);
		kill(G.child, SIGKILL);
		waitpid(G.child, &status, 0);
	} else if (r == G.child && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
		dgb_note("server process exited with status %d", status);
	}
	G.child = 0;
	if (G.rep_r >= 0) {
		close(G.rep_r);
		G.rep_r = -1;
	}
}

static void at_exit(void)
{
	if (getpid() != G.parent)
		return; /* the child: nothing of the parent's to clean */
	child_stop();
	remove_tls_files();
}

typedef struct srv_addrs {
	char tcp[256], tls[256], nng[256], stream[256];
	int tcp_port;
} srv_addrs;

/* Forks the server; fills a. */
static void child_start(bool tls, srv_addrs *a)
{
	int cmd[2], rep[2];
	G.parent = getpid();
	if (!G.cleanup_registered) {
		atexit(at_exit);
		G.cleanup_registered = true;
	}
	CHECK(pipe2(cmd, O_CLOEXEC) == 0 && pipe2(rep, O_CLOEXEC) == 0);
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	if (pid < 0)
		dgb_die("fork: %s", strerror(errno));
	if (pid == 0) {
		close(cmd[1]);
		close(rep[0]);
		serve(cmd[0], rep[1], tls);
	}
	G.child = pid;
	close(cmd[0]);
	close(rep[1]);
	G.cmd_w = cmd[1];
	G.rep_r = rep[0];
	signal(SIGPIPE, SIG_IGN); /* a dead child shows as EOF/EPIPE, not a signal */

	char line[1100];
	child_read_line(line, sizeof line);
	if (strncmp(line, "FAIL ", 5) == 0)
		dgb_die("server process: %s", line + 5);
	if (sscanf(line, "READY %255s %255s %255s %d %255s", a->tcp, a->tls, a->nng,
	    &a->tcp_port, a->stream) != 5)
		dgb_die("server process: unexpected line '%s'", line);
	if (strcmp(a->tls, "-") == 0) {
		a->tls[0] = 0;
		if (tls) {
			child_read_line(line, sizeof line);
			dgb_note("TLS cases skipped: %s", strncmp(line, "NOTE ", 5) == 0 ?
			    line + 5 : line);
		}
	}
}

/* ------------------------------------------------------------------------
 * Reporting (the harness's format, with the fields that apply).
 * ------------------------------------------------------------------------ */
/* ------------------------------------------------------------------------
 * The client (parent) side.
 * ------------------------------------------------------------------------ */
static struct tctx {
	const dgb_opts *o;
	int reps;
	dg_registry *reg;
	dg_tp *tp, *tp_tls;
	dg_node_id peer, peer_tls;
	nng_socket req;
	bool have_req;
	int tcp_fd;
	/* tcp-handoff: its socket, the reader thread's epoll and the reply it
	 * hands over */
	int ho_fd, ho_ep;
	pthread_t ho_th;
	bool ho_started;
	sem_t ho_sem;
	uint8_t ho_back[PAYLOAD];
	uint8_t payload[PAYLOAD];
	uint64_t seq;           /* stamped into each payload: every echo is fresh */
	nng_msg *req_msg;       /* reused by the nng req/rep client */
	nng_stream *st;         /* nng-stream client */
	nng_aio *st_aio;
} T = { .tcp_fd = -1, .ho_fd = -1, .ho_ep = -1 };

static dg_tp *client_tp(const char *listen, bool tls)
{
	dg_tp_config cfg;
	dg_tp *tp;
	dg_tp_config_init(&cfg);
	cfg.listen_url = listen;
	cfg.cluster_name = "dgbench";
	cfg.reg = T.reg;
	if (tls) {
		cfg.tls_cert_key_file = G.cert;
		cfg.tls_ca_file = G.ca;
	}
	dg_err e = dg_tp_start(&cfg, &tp);
	if (e != DG_OK) {
		if (!tls)
			dgb_die("dg_tp_start %s: %s", listen, dg_strerror(e));
		dgb_note("TLS cases skipped: client dg_tp_start %s: %s", listen,
		    dg_strerror(e));
		return NULL;
	}
	return tp;
}

static void stamp(void)
{
	T.seq++;
	memcpy(T.payload, &T.seq, sizeof T.seq);
}

/* Frame bytes per message of type on tp (its own counters). */
static long long frame_bytes(dg_tp *tp, dg_msg_type type)
{
	dg_msg_metric m[64];
	size_t n = dg_tp_metrics(tp, m, 64);
	for (size_t i = 0; i < n && i < 64; i++)
		if (m[i].type == type && m[i].c.sent > 0)
			return (long long)(m[i].c.bytes_sent / m[i].c.sent);
	return -1;
}

/* ---- one round trip of each implementation; returns its time in ns ---- */

static uint64_t rt_datagrid(dg_tp *tp, dg_node_id peer)
{
	_Alignas(16) uint8_t mem[256];
	dg_arena arena;
	dg_msg_bytes req = { { T.payload, PAYLOAD } }, rep = { { NULL, 0 } };
	dg_arena_init(&arena, mem, sizeof mem);
	stamp();
	uint64_t t0 = now_ns();
	dg_err e = dg_tp_call(tp, peer, DG_MSG_PING, &req, CALL_TIMEOUT_MS, &rep,
	    &arena);
	uint64_t t1 = now_ns();
	if (e != DG_OK)
		dgb_die("dg_tp_call(PING): %s", dg_strerror(e));
	CHECK(rep.data.len == PAYLOAD &&
	    memcmp(rep.data.ptr, T.payload, PAYLOAD) == 0);
	return t1 - t0;
}

static uint64_t rt_nng(void)
{
	nng_msg *m = T.req_msg;
	T.req_msg = NULL;
	stamp();
	uint64_t t0 = now_ns();
	if (m == NULL)
		NNG_DO(nng_msg_alloc(&m, 0));
	nng_msg_clear(m);
	nng_msg_header_clear(m);
	NNG_DO(nng_msg_append(m, T.payload, PAYLOAD));
	int rv = nng_sendmsg(T.req, m, 0);
	if (rv != 0) {
		nng_msg_free(m);
		dgb_die("nng_sendmsg: %s", nng_strerror(rv));
	}
	NNG_DO(nng_recvmsg(T.req, &m, 0));
	uint64_t t1 = now_ns();
	CHECK(nng_msg_len(m) == PAYLOAD &&
	    memcmp(nng_msg_body(m), T.payload, PAYLOAD) == 0);
	T.req_msg = m;
	return t1 - t0;
}

/* The whole iov through one aio, waiting for each part. */
static void st_io(bool send, uint8_t *p, size_t n)
{
	while (n > 0) {
		nng_iov iov = { p, n };
		nng_aio_set_iov(T.st_aio, 1, &iov);
		if (send)
			nng_stream_send(T.st, T.st_aio);
		else
			nng_stream_recv(T.st, T.st_aio);
		nng_aio_wait(T.st_aio);
		NNG_DO(nng_aio_result(T.st_aio));
		size_t k = nng_aio_count(T.st_aio);
		p += k;
		n -= k;
	}
}

static uint64_t rt_stream(void)
{
	uint8_t back[PAYLOAD];
	stamp();
	uint64_t t0 = now_ns();
	st_io(true, T.payload, PAYLOAD);
	st_io(false, back, PAYLOAD);
	uint64_t t1 = now_ns();
	CHECK(memcmp(back, T.payload, PAYLOAD) == 0);
	return t1 - t0;
}

static uint64_t rt_tcp(void)
{
	uint8_t back[PAYLOAD];
	stamp();
	uint64_t t0 = now_ns();
	if (write_full(T.tcp_fd, T.payload, PAYLOAD) != 0 ||
	    read_full(T.tcp_fd, back, PAYLOAD) != 0)
		dgb_die("tcp ping-pong: %s", strerror(errno));
	uint64_t t1 = now_ns();
	CHECK(memcmp(back, T.payload, PAYLOAD) == 0);
	return t1 - t0;
}

static int tcp_connect(int port);

/* tcp-handoff's reader: what the reactor does for a reply — wait in
 * epoll_wait, read the frame, hand it to the waiting caller — and nothing
 * else.  Ends at the socket's end (the client shuts it down). */
static void *ho_reader(void *arg)
{
	(void)arg;
	for (;;) {
		struct epoll_event ev;
		int k = epoll_wait(T.ho_ep, &ev, 1, -1);
		if (k < 0 && errno == EINTR)
			continue;
		if (k != 1 || read_full(T.ho_fd, T.ho_back, PAYLOAD) != 0)
			break;
		sem_post(&T.ho_sem);
	}
	return NULL;
}

static void ho_start(int port)
{
	T.ho_fd = tcp_connect(port);
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = T.ho_fd };
	CHECK(sem_init(&T.ho_sem, 0, 0) == 0);
	CHECK((T.ho_ep = epoll_create1(EPOLL_CLOEXEC)) >= 0 &&
	    epoll_ctl(T.ho_ep, EPOLL_CTL_ADD, T.ho_fd, &ev) == 0);
	CHECK(pthread_create(&T.ho_th, NULL, ho_reader, NULL) == 0);
	T.ho_started = true;
}

static void ho_stop(void)
{
	if (!T.ho_started)
		return;
	shutdown(T.ho_fd, SHUT_RDWR); /* the reader sees the end */
	pthread_join(T.ho_th, NULL);
	close(T.ho_ep);
	close(T.ho_fd);
	sem_destroy(&T.ho_sem);
	T.ho_started = false;
}

static uint64_t rt_tcp_handoff(void)
{
	stamp();
	uint64_t t0 = now_ns();
	if (write_full(T.ho_fd, T.payload, PAYLOAD) != 0)
		dgb_die("tcp-handoff write: %s", strerror(errno));
	dgi_sem_wait_spin(NULL, &T.ho_sem, true); /* as dg_tp_call waits */
	uint64_t t1 = now_ns();
	CHECK(memcmp(T.ho_back, T.payload, PAYLOAD) == 0);
	return t1 - t0;
}

enum rt_impl { RT_DATAGRID, RT_DATAGRID_TLS, RT_NNG, RT_STREAM, RT_TCP, RT_TCP_HANDOFF };

static uint64_t rt_one(enum rt_impl which)
{
	switch (which) {
	case RT_DATAGRID: return rt_datagrid(T.tp, T.peer);
	case RT_DATAGRID_TLS: return rt_datagrid(T.tp_tls, T.peer_tls);
	case RT_NNG: return rt_nng();
	case RT_STREAM: return rt_stream();
	case RT_TCP: return rt_tcp();
	case RT_TCP_HANDOFF: return rt_tcp_handoff();
	}
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted samples. */
static double pct_us(const uint64_t *s, size_t n, double q)
{
	size_t k = (size_t)((double)n * q + 0.999999);
	if (k < 1)
		k = 1;
	if (k > n)
		k = n;
	return (double)s[k - 1] / 1000.0;
}

struct rt_run {
	const char *impl;
	enum rt_impl which;
	long long bytes;
	bool dg;                 /* count dgi_alloc (else malloc) */
	uint64_t *samples;
	size_t nsamples;
	double best_mean_ns;
	uint64_t cli_allocs, srv_allocs;       /* the counted allocator */
	uint64_t cli_heap, srv_heap;           /* malloc calls, both processes */
	uint64_t cli_csw, srv_csw;             /* context switches, both */
};

/* The implementations of one round-trip case, interleaved repetition by
 * repetition. */
static void rt_case(const char *name, struct rt_run *r, unsigned n)
{
	const uint64_t per_rep = T.o->quick ? 500 : 2000;
	const uint64_t warm = T.o->quick ? 100 : 300;
	const int reps = T.reps;

	for (unsigned k = 0; k < n; k++) {
		for (uint64_t i = 0; i < warm; i++)
			rt_one(r[k].which);
		r[k].samples = malloc(sizeof(uint64_t) * per_rep * (size_t)reps);
		CHECK(r[k].samples != NULL);
		r[k].nsamples = 0;
		r[k].best_mean_ns = 0;
		r[k].cli_allocs = r[k].srv_allocs = r[k].cli_heap = r[k].srv_heap = 0;
		r[k].cli_csw = r[k].srv_csw = 0;
	}
	for (int rep = 0; rep < reps; rep++) {
		for (unsigned k = 0; k < n; k++) {
			srv_stats s0 = child_stats();
			uint64_t a0 = dg_allocs(), h0 = dgb_heap_allocs(), w0 = ctx_switches(), sum = 0;
			for (uint64_t i = 0; i < per_rep; i++) {
				uint64_t t = rt_one(r[k].which);
				r[k].samples[r[k].nsamples++] = t;
				sum += t;
			}
			uint64_t a1 = dg_allocs(), h1 = dgb_heap_allocs(), w1 = ctx_switches();
			srv_stats s1 = child_stats();
			r[k].cli_csw += w1 - w0;
			r[k].srv_csw += s1.csw - s0.csw;
			r[k].cli_allocs += a1 - a0;
			r[k].cli_heap += h1 - h0;
			r[k].srv_allocs += s1.dg_allocs - s0.dg_allocs;
			r[k].srv_heap += s1.heap_allocs - s0.heap_allocs;
			double mean = (double)sum / (double)per_rep;
			if (rep == 0 || mean < r[k].best_mean_ns)
				r[k].best_mean_ns = mean;
		}
	}
	for (unsigned k = 0; k < n; k++) {
		double ops = (double)r[k].nsamples;
		qsort(r[k].samples, r[k].nsamples, sizeof(uint64_t), cmp_u64);
		uint64_t cli = r[k].dg ? r[k].cli_allocs : r[k].cli_heap;
		uint64_t srv = r[k].dg ? r[k].srv_allocs : r[k].srv_heap;
		bool counted = r[k].dg || dgb_heap_counting(); /* sanitizers: no hook */
		/* both processes, every thread (the stats exchange with the
		 * server adds a few per repetition, in every implementation) */
		double csw = (double)(r[k].cli_csw + r[k].srv_csw) / ops;
		dgb_line l = { name, r[k].impl, r[k].best_mean_ns, -1,
			pct_us(r[k].samples, r[k].nsamples, 0.50),
			pct_us(r[k].samples, r[k].nsamples, 0.99), r[k].bytes,
			counted ? (double)(cli > srv ? cli : srv) / ops : -1, true, csw };
		dgb_print_line(T.o, SUITE, &l);
		dgb_note("%s/%s: context switches per round trip: client %.3g server %.3g",
		    name, r[k].impl, (double)r[k].cli_csw / ops, (double)r[k].srv_csw / ops);
		if (r[k].dg)
			dgb_note("%s/%s: per round trip: dgi_alloc client %.4g server %.4g; "
			    "malloc calls (nng included) client %.4g server %.4g",
			    name, r[k].impl, (double)r[k].cli_allocs / ops,
			    (double)r[k].srv_allocs / ops, (double)r[k].cli_heap / ops,
			    (double)r[k].srv_heap / ops);
		else
			dgb_note("%s/%s: malloc calls per round trip: client %.4g server %.4g",
			    name, r[k].impl, (double)r[k].cli_heap / ops,
			    (double)r[k].srv_heap / ops);
	}
}

/* ---- one-way throughput ---- */

struct ow_rep {
	uint64_t ns, retries, cli_allocs, srv_allocs, cli_heap, srv_heap;
};

/* n one-way ECHOs, then one PING round trip: all n were dispatched by the
 * server when its reply arrives. */
static struct ow_rep ow_once(dg_tp *tp, dg_node_id peer, uint64_t n)
{
	struct ow_rep r = { 0 };
	dg_msg_bytes body = { { T.payload, PAYLOAD } };
	srv_stats s0 = child_stats();
	uint64_t a0 = dg_allocs(), h0 = dgb_heap_allocs();
	uint64_t t0 = now_ns();
	for (uint64_t i = 0; i < n; i++) {
		memcpy(T.payload, &i, sizeof i);
		dg_err e;
		while ((e = dg_tp_send(tp, peer, DG_MSG_ECHO, &body)) == DG_ERR_BUSY) {
			r.retries++;
			sched_yield();
		}
		if (e != DG_OK)
			dgb_die("dg_tp_send(ECHO): %s", dg_strerror(e));
	}
	_Alignas(16) uint8_t mem[256];
	dg_arena arena;
	dg_msg_bytes rep;
	dg_arena_init(&arena, mem, sizeof mem);
	DG_DO(dg_tp_call(tp, peer, DG_MSG_PING, &body, CALL_TIMEOUT_MS, &rep, &arena));
	uint64_t t1 = now_ns();
	uint64_t a1 = dg_allocs(), h1 = dgb_heap_allocs();
	srv_stats s1 = child_stats();
	if (s1.echoes - s0.echoes != n)
		dgb_die("oneway: the server handled %llu ECHOs of %llu",
		    (unsigned long long)(s1.echoes - s0.echoes), (unsigned long long)n);
	r.ns = t1 > t0 ? t1 - t0 : 1;
	r.cli_allocs = a1 - a0;
	r.srv_allocs = s1.dg_allocs - s0.dg_allocs;
	r.cli_heap = h1 - h0;
	r.srv_heap = s1.heap_allocs - s0.heap_allocs;
	return r;
}

static void ow_case(const char *name, dg_tp *tp, dg_node_id peer)
{
	const double target = T.o->quick ? 0.06e9 : 0.3e9; /* ns per repetition */
	/* warm-up and calibration (the count doubles until a run lasts a
	 * quarter of the target, then is scaled), then a warm-up at the final
	 * size: the send queue and the wire buffer grow to the backlog it makes */
	uint64_t n = 10000;
	struct ow_rep w = ow_once(tp, peer, n);
	while (w.ns < target / 4 && n < (UINT64_C(1) << 30)) {
		n *= 2;
		w = ow_once(tp, peer, n);
	}
	for (int i = 0; i < 2; i++) { /* the first runs are slow: scale twice */
		n = (uint64_t)((double)n * target / (double)w.ns);
		if (n < 10000)
			n = 10000;
		w = ow_once(tp, peer, n);
	}

	struct ow_rep sum = { 0 };
	uint64_t best = UINT64_MAX;
	for (int rep = 0; rep < T.reps; rep++) {
		struct ow_rep r = ow_once(tp, peer, n);
		if (r.ns < best)
			best = r.ns;
		sum.retries += r.retries;
		sum.cli_allocs += r.cli_allocs;
		sum.srv_allocs += r.srv_allocs;
		sum.cli_heap += r.cli_heap;
		sum.srv_heap += r.srv_heap;
	}
	double ops = (double)n * T.reps;
	uint64_t worst = sum.cli_allocs > sum.srv_allocs ? sum.cli_allocs :
	    sum.srv_allocs;
	dgb_line l = { name, "datagrid", (double)best / (double)n,
		(double)n * 1e9 / (double)best, -1, -1, frame_bytes(tp, DG_MSG_ECHO),
		(double)worst / ops, false, 0 };
	dgb_print_line(T.o, SUITE, &l);
	dgb_note("%s/datagrid: %llu messages x %d repetitions; DG_ERR_BUSY "
	    "retries %llu; per message: dgi_alloc client %.4g server %.4g; "
	    "malloc calls client %.4g server %.4g", name, (unsigned long long)n,
	    T.reps, (unsigned long long)sum.retries, (double)sum.cli_allocs / ops,
	    (double)sum.srv_allocs / ops, (double)sum.cli_heap / ops,
	    (double)sum.srv_heap / ops);
}

/* ---- metrics_update: the harness measures it in-process ---- */

/* The per-type counters every application frame updates, as the message
 * path does (inline, transport_int.h): dgi_count_tx on the sender's peer
 * entry (under peer->mu there), dgi_count_rx on the receiving connection.
 * One operation = both updates of one message (its sender's and its
 * receiver's), the stricter reading of "per message".  The peer is a real
 * entry of a local dg_tp; the connection a zeroed struct conn (the update
 * touches only its rxc array). */
static struct mctx {
	dg_tp *tp;
	struct peer *p;
	struct conn *c;
} MC;

#define M_BYTES (DG_FRAME_HEADER + 2 + PAYLOAD)

static uint64_t m_count(void *ctx, uint64_t iters)
{
	struct mctx *m = ctx;
	for (uint64_t i = 0; i < iters; i++) {
		dgi_count_tx(m->p, DG_MSG_ECHO, M_BYTES);
		dgi_count_rx(m->c, DG_MSG_ECHO, M_BYTES);
		dgb_clobber(m);
	}
	return atomic_load_explicit(&m->c->rxc[DG_MSG_ECHO].n, memory_order_relaxed);
}

static uint64_t m_nocount(void *ctx, uint64_t iters)
{
	struct mctx *m = ctx;
	for (uint64_t i = 0; i < iters; i++)
		dgb_clobber(m);
	return iters;
}

/* Not a counter, but also paid per received frame: the peer's last-heard
 * time (dgi_now_ms, a clock read, and a store).  Timed here for the note. */
static double heard_ns(void)
{
	const uint64_t n = 2000000;
	uint64_t t0 = now_ns();
	for (uint64_t i = 0; i < n; i++) {
		atomic_store_explicit(&MC.p->heard_ms, dgi_now_ms(), memory_order_relaxed);
		dgb_clobber(MC.p);
	}
	return (double)(now_ns() - t0) / (double)n;
}

static void metrics_case(const dgb_opts *o)
{
	dgb_bench b[2];
	dgb_result res[2];
	unsigned n = 0;
	bool with = dgb_selected(o, "metrics_update", "datagrid");
	bool without = dgb_selected(o, "metrics_update", "datagrid-nocount");
	if (!with && !without)
		return;
	MC.tp = client_tp("tcp://127.0.0.1:0", false);
	MC.p = dgi_peer_get(MC.tp, 0x5eed, true); /* a peer entry, never dialed */
	MC.c = calloc(1, sizeof *MC.c);
	CHECK(MC.p != NULL && MC.c != NULL);
	if (with)
		b[n++] = (dgb_bench){ .suite = SUITE, .name = "metrics_update",
			.impl = "datagrid", .run = m_count, .ctx = &MC, .ops_per_iter = 1,
			.bytes = -1, .alloc_src = DGB_ALLOC_DG };
	if (without)
		b[n++] = (dgb_bench){ .suite = SUITE, .name = "metrics_update",
			.impl = "datagrid-nocount", .run = m_nocount, .ctx = &MC,
			.ops_per_iter = 1, .bytes = -1, .alloc_src = DGB_ALLOC_DG };
	if (!o->json)
		printf("\n");
	dgb_begin_suite(o, SUITE);
	dgb_run_group(o, b, n, res);
	if (n == 2)
		dgb_note("metrics_update: %.2f ns per message for the counters, both "
		    "ends (datagrid - datagrid-nocount)",
		    res[0].ns_per_op - res[1].ns_per_op);
	dgb_note("metrics_update: the last-heard time per received frame "
	    "(dgi_now_ms + store) costs %.1f ns more", heard_ns());
	free(MC.c);
	dg_tp_stop(MC.tp);
	MC.tp = NULL;
}

/* ------------------------------------------------------------------------ */

static int tcp_connect(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0)
		dgb_die("tcp connect to port %d: %s", port, strerror(errno));
	set_nodelay(fd);
	return fd;
}

int dgb_transport_suite(const dgb_opts *o)
{
	bool sel_ow = dgb_selected(o, "oneway64", "datagrid");
	bool sel_ow_tls = dgb_selected(o, "oneway64_tls", "datagrid");
	bool sel_rt_dg = dgb_selected(o, "rtt64", "datagrid");
	bool sel_rt_nng = dgb_selected(o, "rtt64", "nng-reqrep");
	bool sel_rt_st = dgb_selected(o, "rtt64", "nng-stream");
	bool sel_rt_tcp = dgb_selected(o, "rtt64", "tcp");
	bool sel_rt_ho = dgb_selected(o, "rtt64", "tcp-handoff");
	bool sel_rt_tls = dgb_selected(o, "rtt64_tls", "datagrid");
	bool want_tls = sel_ow_tls || sel_rt_tls;
	bool net = sel_ow || sel_ow_tls || sel_rt_dg || sel_rt_nng || sel_rt_st ||
	    sel_rt_tcp || sel_rt_ho || sel_rt_tls;

	T.o = o;
	T.reps = o->quick ? 3 : 5;
	memset(T.payload, 0xa5, sizeof T.payload);

	if (net) {
		srv_addrs a;
		/* TLS files before the fork, so both processes see them; no nng
		 * object exists in this process before the fork */
		bool tls = want_tls && make_tls_files();
		child_start(tls, &a);
		tls = tls && a.tls[0] != 0;

		DG_DO(dg_registry_create(&T.reg));
		T.tp = client_tp("tcp://127.0.0.1:0", false);
		DG_DO(dg_tp_connect(T.tp, a.tcp, &T.peer));
		if (tls && (T.tp_tls = client_tp("tls+tcp://127.0.0.1:0", true)) != NULL) {
			dg_err e = dg_tp_connect(T.tp_tls, a.tls, &T.peer_tls);
			if (e != DG_OK) {
				dgb_note("TLS cases skipped: dg_tp_connect %s: %s", a.tls,
				    dg_strerror(e));
				dg_tp_stop(T.tp_tls);
				T.tp_tls = NULL;
			}
		}
		/* both nodes loaded the TLS files at start: remove them now, so
		 * not even a SIGKILL leaves them behind */
		remove_tls_files();
		if (sel_rt_nng) {
			NNG_DO(nng_req0_open(&T.req));
			NNG_DO(nng_dial(T.req, a.nng, NULL, 0));
			T.have_req = true;
		}
		if (sel_rt_st) {
			nng_stream_dialer *d;
			NNG_DO(nng_stream_dialer_alloc(&d, a.stream));
			NNG_DO(nng_aio_alloc(&T.st_aio, NULL, NULL));
			nng_stream_dialer_dial(d, T.st_aio);
			nng_aio_wait(T.st_aio);
			NNG_DO(nng_aio_result(T.st_aio));
			T.st = nng_aio_get_output(T.st_aio, 0);
			nng_stream_dialer_free(d);
		}
		if (sel_rt_tcp)
			T.tcp_fd = tcp_connect(a.tcp_port);
		if (sel_rt_ho)
			ho_start(a.tcp_port);

		if (sel_ow)
			ow_case("oneway64", T.tp, T.peer);
		if (sel_ow_tls && T.tp_tls != NULL)
			ow_case("oneway64_tls", T.tp_tls, T.peer_tls);

		struct rt_run r[5];
		unsigned n = 0;
		if (sel_rt_dg)
			r[n++] = (struct rt_run){ .impl = "datagrid", .which = RT_DATAGRID,
				.dg = true };
		if (sel_rt_nng)
			r[n++] = (struct rt_run){ .impl = "nng-reqrep", .which = RT_NNG,
				.bytes = 8 + 4 + PAYLOAD };
		if (sel_rt_st)
			r[n++] = (struct rt_run){ .impl = "nng-stream", .which = RT_STREAM,
				.bytes = PAYLOAD };
		if (sel_rt_tcp)
			r[n++] = (struct rt_run){ .impl = "tcp", .which = RT_TCP,
				.bytes = PAYLOAD };
		if (sel_rt_ho)
			r[n++] = (struct rt_run){ .impl = "tcp-handoff",
				.which = RT_TCP_HANDOFF, .bytes = PAYLOAD };
		if (n > 0) {
			if (sel_rt_dg) {
				/* datagrid's frame size, from its counters once a PING went */
				rt_datagrid(T.tp, T.peer);
				r[0].bytes = frame_bytes(T.tp, DG_MSG_PING);
			}
			rt_case("rtt64", r, n);
			double dg = -1;
			for (unsigned k = 0; k < n; k++)
				if (r[k].which == RT_DATAGRID)
					dg = pct_us(r[k].samples, r[k].nsamples, 0.5);
			for (unsigned k = 0; k < n; k++) {
				if (r[k].which != RT_DATAGRID && dg > 0)
					dgb_note("rtt64 p50: datagrid / %s = %.2f", r[k].impl,
					    dg / pct_us(r[k].samples, r[k].nsamples, 0.5));
				free(r[k].samples);
			}
		}
		if (sel_rt_tls && T.tp_tls != NULL) {
			struct rt_run t = { .impl = "datagrid", .which = RT_DATAGRID_TLS,
				.dg = true };
			rt_datagrid(T.tp_tls, T.peer_tls);
			t.bytes = frame_bytes(T.tp_tls, DG_MSG_PING);
			rt_case("rtt64_tls", &t, 1);
			free(t.samples);
		}

		if (T.req_msg != NULL)
			nng_msg_free(T.req_msg);
		if (T.have_req)
			nng_close(T.req);
		if (T.st != NULL) {
			nng_stream_close(T.st);
			nng_stream_free(T.st);
		}
		nng_aio_free(T.st_aio);
		if (T.tcp_fd >= 0)
			close(T.tcp_fd);
		ho_stop();
		dg_tp_stop(T.tp_tls);
		dg_tp_stop(T.tp);
		child_stop();
		remove_tls_files();
	}

	if (T.reg == NULL)
		DG_DO(dg_registry_create(&T.reg));
	metrics_case(o);
	dg_registry_destroy(T.reg);
	T.reg = NULL;
	return 0;
}
