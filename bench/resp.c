/* resp.c — dgbench's minimal RESP client (resp.h). */
#define _GNU_SOURCE
#include "resp.h"
#include "harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

int dgb_free_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof sa;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &len) != 0)
		dgb_die("free port: %s", strerror(errno));
	close(fd);
	return ntohs(sa.sin_port);
}

int dgb_tcp_connect(int port, int io_timeout_s)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	struct timeval tv = { io_timeout_s, 0 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	return fd;
}

int dgb_send_full(int fd, const void *p, size_t n)
{
	const char *b = p;
	while (n > 0) {
		ssize_t r = send(fd, b, n, MSG_NOSIGNAL);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

int dgb_resp_append(char *req, size_t cap, size_t *n, int argc,
    const char *const *argv, const size_t *len)
{
	size_t at = *n;
	int k = snprintf(req + at, cap - at, "*%d\r\n", argc);
	if (k < 0 || (size_t)k >= cap - at)
		return -1;
	at += (size_t)k;
	for (int i = 0; i < argc; i++) {
		size_t l = len != NULL ? len[i] : strlen(argv[i]);
		k = snprintf(req + at, cap - at, "$%zu\r\n", l);
		if (k < 0 || (size_t)k + l + 2 >= cap - at)
			return -1;
		at += (size_t)k;
		memcpy(req + at, argv[i], l);
		memcpy(req + at + l, "\r\n", 2);
		at += l + 2;
	}
	*n = at;
	return 0;
}

/* Refills the buffer when it is empty; -1 on I/O error or EOF. */
static int fill(dgb_rconn *c)
{
	while (c->beg == c->end) {
		ssize_t r = recv(c->fd, c->buf, sizeof c->buf, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		c->beg = 0;
		c->end = (size_t)r;
	}
	return 0;
}

int dgb_rc_line(dgb_rconn *c, char *out, size_t cap)
{
	size_t n = 0;
	for (;;) {
		if (fill(c) != 0)
			return -1;
		while (c->beg < c->end) {
			char ch = c->buf[c->beg++];
			if (ch == '\n') {
				if (n > 0 && out[n - 1] == '\r')
					n--;
				out[n] = 0;
				return 0;
			}
			if (n + 1 < cap)
				out[n++] = ch;
		}
	}
}

/* Exactly n bytes into out (as many as fit in cap; the rest skipped). */
static int rc_bytes(dgb_rconn *c, char *out, size_t n, size_t cap)
{
	size_t got = 0;
	while (got < n) {
		if (fill(c) != 0)
			return -1;
		size_t k = c->end - c->beg;
		if (k > n - got)
			k = n - got;
		size_t room = got < cap ? cap - got : 0;
		memcpy(out + got, c->buf + c->beg, k < room ? k : room);
		c->beg += k;
		got += k;
	}
	return 0;
}

char dgb_rc_reply(dgb_rconn *c, char *out, size_t cap, int *nil)
{
	char line[256];
	if (nil != NULL)
		*nil = 0;
	if (dgb_rc_line(c, line, sizeof line) != 0 || line[0] == 0)
		return 0;
	if (line[0] == '$') {
		long len = strtol(line + 1, NULL, 10);
		if (len < 0) {
			out[0] = 0;
			if (nil != NULL)
				*nil = 1;
			return '$';
		}
		char crlf[2];
		if ((size_t)len >= cap ||
		    rc_bytes(c, out, (size_t)len, cap) != 0 || rc_bytes(c, crlf, 2, 2) != 0)
			return 0;
		out[len] = 0;
		return '$';
	}
	snprintf(out, cap, "%s", line + 1);
	if (nil != NULL && line[0] == '*')
		*nil = strcmp(line + 1, "-1") == 0;
	return line[0];
}

char dgb_rc_cmd(dgb_rconn *c, char *out, size_t cap, int argc,
    const char *const *argv)
{
	char req[1024];
	size_t n = 0;
	if (dgb_resp_append(req, sizeof req, &n, argc, argv, NULL) != 0 ||
	    dgb_send_full(c->fd, req, n) != 0)
		return 0;
	return dgb_rc_reply(c, out, cap, NULL);
}
