/*
 * http_parse.h — the request head parser of the node's HTTP endpoint
 * (http.c).  Pure: bytes in, a parsed head out, no allocation, nothing
 * kept; every byte a client sends goes through it first (it has its own
 * fuzz target, tests/fuzz/http_fuzz.c).
 *
 * What it accepts (RFC 9112, the part a metrics scraper or a browser
 * uses): a request line METHOD SP TARGET SP HTTP/1.x, then header lines
 * NAME ":" OWS VALUE OWS, each ended by CRLF (a bare LF too), then an
 * empty line.  The method is one or more of A-Z; the target starts with
 * '/' and holds visible ASCII only; a name is a token; a value holds
 * visible ASCII, spaces and tabs.  Refused as malformed: anything else,
 * continuation lines (obs-fold), more than DGI_HTTP_MAX_HEADERS lines, two
 * Content-Length headers, a Content-Length that is not digits.
 */
#ifndef DG_NODE_HTTP_PARSE_H
#define DG_NODE_HTTP_PARSE_H

#include <stdbool.h>
#include <stddef.h>

#define DGI_HTTP_MAX_HEADERS 64

enum { DGI_HTTP_GET = 1, DGI_HTTP_HEAD = 2, DGI_HTTP_OTHER = 3 };

typedef struct dgi_http_req {
	int method;              /* DGI_HTTP_GET / _HEAD / _OTHER */
	const char *path;        /* into the buffer; up to '?' or the end */
	size_t path_len;
	int minor;               /* HTTP/1.minor (0 or 1; 2..9 taken as 1) */
	bool keep_alive;         /* 1.1 unless "Connection: close"; 1.0 only
	                            with "Connection: keep-alive" */
	bool has_body;           /* Content-Length > 0, or Transfer-Encoding */
	const char *auth;        /* the Authorization value, trimmed; NULL: none */
	size_t auth_len;
	size_t head_len;         /* bytes of the head, its empty line included */
} dgi_http_req;

/* Parses the head at the start of buf[0..len).  1: a complete head, *r
 * filled (pointers into buf); 0: no empty line yet and nothing wrong so
 * far (read more); -1: malformed. */
int dgi_http_parse(const char *buf, size_t len, dgi_http_req *r);

#endif
