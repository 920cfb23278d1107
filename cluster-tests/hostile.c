/* hostile.c — a hostile client for the cluster tests (hostile_clients.sh):
 * it does to a node's ports what an attacker without the secret can.
 *
 *   hostile hello PORT COUNT CONNS
 *       COUNT peer HELLOs, each with a fresh random node id, over CONNS
 *       connections at a time to 127.0.0.1:PORT (connect, HELLO, read the
 *       answer or the close, close); prints "hello sent=N answered=M".
 *   hostile idle PORT COUNT HOLD_MS
 *       opens COUNT TCP connections to 127.0.0.1:PORT that send nothing,
 *       holds them HOLD_MS, then prints "idle opened=N refused=R
 *       closed_by_node=C" (C: closed by the other side meanwhile).
 *   hostile reopen PORT THREADS MS
 *       THREADS threads connect and close, again and again, for MS;
 *       prints "reopen connections=N".
 * Exit 0 unless the arguments are wrong (2).  It raises its own file limit
 * to the hard limit first.
 */
#include "transport/transport.h"
#include "transport/transport_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int port;

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int connect_one(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		return -1;
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* ---- hello ---- */

static _Atomic long hello_left, hello_sent, hello_answered;

static void *hello_main(void *arg)
{
	(void)arg;
	uint8_t body[512], frame[600], nonce[DG_NONCE_LEN], in[256];
	while (atomic_fetch_sub(&hello_left, 1) > 0) {
		uint64_t id;
		if (dgi_random(&id, sizeof(id)) != DG_OK || dgi_random(nonce, sizeof(nonce)) != DG_OK)
			return NULL;
		id |= 1;
		dg_msg_hello h = { DG_FRAME_VERSION, { "datagrid", 8 }, (int64_t)id,
			{ "tcp://127.0.0.1:1", 17 }, { nonce, DG_NONCE_LEN }, true };
		dg_buf b;
		dg_writer w;
		dg_buf_init(&b);
		dg_writer_init(&w, NULL, &b);
		if (dg_msg_encode(DG_MSG_HELLO, &h, &w) != DG_OK || b.len > sizeof(body)) {
			dg_buf_free(&b);
			return NULL;
		}
		dg_frame_header fh = { DG_FRAME_VERSION, 0, DG_MSG_HELLO, (uint32_t)b.len, 0, id };
		dgi_frame_put(frame, &fh);
		memcpy(frame + DG_FRAME_HEADER, b.data, b.len);
		size_t n = DG_FRAME_HEADER + b.len;
		dg_buf_free(&b);
		int fd = connect_one();
		if (fd < 0)
			continue;
		struct timeval tv = { 2, 0 };
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		if (write(fd, frame, n) == (ssize_t)n) {
			hello_sent++;
			if (read(fd, in, sizeof(in)) > 0)
				hello_answered++;
		}
		close(fd);
	}
	return NULL;
}

static int cmd_hello(long count, int conns)
{
	hello_left = count;
	pthread_t t[64];
	if (conns < 1 || conns > 64)
		return 2;
	for (int i = 0; i < conns; i++)
		pthread_create(&t[i], NULL, hello_main, NULL);
	for (int i = 0; i < conns; i++)
		pthread_join(t[i], NULL);
	printf("hello sent=%ld answered=%ld\n", (long)hello_sent, (long)hello_answered);
	return 0;
}

/* ---- idle ---- */

static int cmd_idle(long count, long hold_ms)
{
	int *fds = calloc((size_t)count, sizeof(int));
	if (fds == NULL)
		return 1;
	long opened = 0, refused = 0, closed = 0;
	for (long i = 0; i < count; i++) {
		fds[i] = connect_one();
		if (fds[i] < 0)
			refused++;
		else
			opened++;
	}
	uint64_t end = now_ms() + (uint64_t)hold_ms;
	while (now_ms() < end)
		usleep(20000);
	for (long i = 0; i < count; i++) {
		if (fds[i] < 0)
			continue;
		struct pollfd p = { fds[i], POLLIN, 0 };
		char c;
		if (poll(&p, 1, 0) > 0 && recv(fds[i], &c, 1, MSG_DONTWAIT) <= 0)
			closed++;
		close(fds[i]);
	}
	free(fds);
	printf("idle opened=%ld refused=%ld closed_by_node=%ld\n", opened, refused, closed);
	return 0;
}

/* ---- reopen ---- */

static _Atomic long reopened;
static uint64_t reopen_end;

static void *reopen_main(void *arg)
{
	(void)arg;
	while (now_ms() < reopen_end) {
		int fd = connect_one();
		if (fd >= 0) {
			reopened++;
			close(fd);
		} else {
			usleep(1000);
		}
	}
	return NULL;
}

static int cmd_reopen(int threads, long ms)
{
	if (threads < 1 || threads > 64)
		return 2;
	reopen_end = now_ms() + (uint64_t)ms;
	pthread_t t[64];
	for (int i = 0; i < threads; i++)
		pthread_create(&t[i], NULL, reopen_main, NULL);
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	printf("reopen connections=%ld\n", (long)reopened);
	return 0;
}

int main(int argc, char **argv)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (argc != 5) {
		fprintf(stderr, "usage: hostile hello|idle|reopen PORT N M\n");
		return 2;
	}
	port = atoi(argv[2]);
	long a = atol(argv[3]), b = atol(argv[4]);
	if (port <= 0 || port > 65535 || a <= 0 || b < 0)
		return 2;
	if (strcmp(argv[1], "hello") == 0)
		return cmd_hello(a, (int)b);
	if (strcmp(argv[1], "idle") == 0)
		return cmd_idle(a, b);
	if (strcmp(argv[1], "reopen") == 0)
		return cmd_reopen((int)a, b);
	fprintf(stderr, "hostile: unknown command %s\n", argv[1]);
	return 2;
}
