/*
 * resp.h — a minimal Redis client of dgbench's own (no hiredis): RESP
 * requests of string arguments over a blocking TCP socket to 127.0.0.1,
 * replies read through a small buffer.  Enough for the Redis peers of the
 * cache and txn suites and for setting up their servers.
 *
 * One dgb_rconn per thread; nothing is allocated per request.
 */
#ifndef DGB_RESP_H
#define DGB_RESP_H

#include <stddef.h>

typedef struct dgb_rconn {
	int fd;
	size_t beg, end;          /* unread bytes of buf */
	char buf[8192];
} dgb_rconn;

/* A free TCP port on 127.0.0.1 (bound, read, closed: free right after). */
int dgb_free_port(void);
/* A connected socket to 127.0.0.1:port with TCP_NODELAY and send/receive
 * timeouts of io_timeout_s (a dead server fails a call, never hangs it);
 * -1 with errno on failure. */
int dgb_tcp_connect(int port, int io_timeout_s);
/* All n bytes; -1 on error (errno). */
int dgb_send_full(int fd, const void *p, size_t n);

/* Appends one command (argc arguments: argv[i] of len[i] bytes, or
 * strlen(argv[i]) when len is NULL) to req[*n..cap); -1 if it does not
 * fit (*n unchanged).  Several appended commands sent at once are a
 * pipeline. */
int dgb_resp_append(char *req, size_t cap, size_t *n, int argc,
    const char *const *argv, const size_t *len);

/* One line of a reply without its CRLF into out (NUL-terminated, truncated
 * to cap - 1); -1 on I/O error. */
int dgb_rc_line(dgb_rconn *c, char *out, size_t cap);
/* One reply, not an array's elements: returns its type byte ('+', '-',
 * ':', '$', '*'), 0 on I/O error or a bulk string longer than cap - 1.
 * out: the text of a simple string, error or integer, the bytes of a bulk
 * string (NUL-terminated; "" for a nil one, with *nil set if nil is not
 * NULL), or an array's count as text (-1: nil array; its elements are the
 * next replies). */
char dgb_rc_reply(dgb_rconn *c, char *out, size_t cap, int *nil);
/* Sends one command and reads its reply (dgb_rc_reply). */
char dgb_rc_cmd(dgb_rconn *c, char *out, size_t cap, int argc,
    const char *const *argv);

#endif /* DGB_RESP_H */
