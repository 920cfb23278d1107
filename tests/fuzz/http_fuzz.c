/* http_fuzz.c — libFuzzer target for the HTTP endpoint's request head
 * parser (node/http_parse.h, dgi_http_parse): every byte an HTTP client
 * sends reaches it before anything else, authenticated or not.
 *
 * The input is what the connection has read.  It is parsed whole, and as
 * a prefix of it — the head arrives in pieces, and http.c parses what it
 * has after each read — cut where byte 0 says (its value modulo the
 * length + 1), and when the whole is a complete head, exactly that head
 * and the head less its last byte.  Each parse reads from a heap copy of
 * exactly the bytes given, so a read past them is an ASan report.
 *
 * A bug: any crash or sanitizer report, and these invariants (abort):
 *   - the result is -1, 0 or 1;
 *   - on 1: method is GET, HEAD or OTHER, minor 0 or 1; head_len <= len
 *     and the head ends with its LF; path lies in the head, starts with
 *     '/', holds no '?', space or control byte; auth (when set) lies in
 *     the head;
 *   - a prefix agrees with the whole ("0: nothing wrong so far"): cut
 *     before the head's end, 0 (or, when the whole is -1, -1 or 0); cut at
 *     or after it, 1 with the same head; when the whole is 0, 0.
 * Malformed input answered -1 is fine: the client gets a 400. */
#include "fuzz_check.h"
#include "node/http_parse.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_copy(const uint8_t *data, size_t len, dgi_http_req *r, char **keep)
{
	char *c = malloc(len ? len : 1);
	if (c == NULL)
		abort();
	memcpy(c, data, len);
	int rv = dgi_http_parse(c, len, r);
	CHECK(rv == -1 || rv == 0 || rv == 1);
	if (rv == 1) {
		const char *end = c + r->head_len;
		CHECK(r->method == DGI_HTTP_GET || r->method == DGI_HTTP_HEAD ||
		    r->method == DGI_HTTP_OTHER);
		CHECK(r->minor == 0 || r->minor == 1);
		CHECK(r->head_len >= 1 && r->head_len <= len && end[-1] == '\n');
		CHECK(r->path > c && r->path_len >= 1 && r->path + r->path_len <= end);
		CHECK(r->path[0] == '/');
		for (size_t i = 0; i < r->path_len; i++)
			CHECK(r->path[i] > ' ' && r->path[i] < 0x7f && r->path[i] != '?');
		if (r->auth != NULL)
			CHECK(r->auth >= c && r->auth + r->auth_len <= end);
		else
			CHECK(r->auth_len == 0);
	}
	if (keep != NULL)
		*keep = c;
	else
		free(c);
	return rv;
}

/* Two results of the same head: equal but for where the buffer was. */
static void same_head(const dgi_http_req *a, const char *abuf, const dgi_http_req *b,
    const char *bbuf)
{
	CHECK(a->method == b->method && a->minor == b->minor &&
	    a->keep_alive == b->keep_alive && a->has_body == b->has_body &&
	    a->head_len == b->head_len);
	CHECK(a->path - abuf == b->path - bbuf && a->path_len == b->path_len);
	CHECK((a->auth == NULL) == (b->auth == NULL) && a->auth_len == b->auth_len);
	if (a->auth != NULL)
		CHECK(a->auth - abuf == b->auth - bbuf);
}

static void prefix(const uint8_t *data, size_t cut, int whole, const dgi_http_req *w,
    const char *wbuf)
{
	dgi_http_req r;
	char *c;
	int rv = parse_copy(data, cut, &r, &c);
	if (whole == 1 && cut >= w->head_len) {
		CHECK(rv == 1);
		same_head(w, wbuf, &r, c);
	} else if (whole == -1) {
		CHECK(rv == -1 || rv == 0);
	} else {
		CHECK(rv == 0);
	}
	free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	dgi_http_req w;
	char *wbuf;
	int whole = parse_copy(data, size, &w, &wbuf);
	if (size > 0)
		prefix(data, data[0] % (size + 1), whole, &w, wbuf);
	if (whole == 1) {
		prefix(data, w.head_len, whole, &w, wbuf);
		prefix(data, w.head_len - 1, whole, &w, wbuf);
	}
	free(wbuf);
	return 0;
}
