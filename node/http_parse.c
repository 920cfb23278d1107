/* http_parse.c — the HTTP request head parser (http_parse.h). */
#include "http_parse.h"

#include <string.h>

static bool is_tchar(unsigned char c)
{
	if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
		return true;
	return c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static bool ieq(const char *a, size_t n, const char *lit)
{
	size_t m = strlen(lit);
	if (n != m)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = a[i];
		if (c >= 'A' && c <= 'Z')
			c = (char)(c - 'A' + 'a');
		if (c != lit[i])
			return false;
	}
	return true;
}

/* The end of the line starting at p (the LF), or NULL when none in
 * [p, end). */
static const char *line_end(const char *p, const char *end)
{
	return memchr(p, '\n', (size_t)(end - p));
}

/* [p, e) without a trailing CR. */
static const char *chomp(const char *p, const char *e)
{
	return e > p && e[-1] == '\r' ? e - 1 : e;
}

static int request_line(const char *p, const char *e, dgi_http_req *r)
{
	const char *m = p;
	while (p < e && *p >= 'A' && *p <= 'Z')
		p++;
	if (p == m || p == e || *p != ' ')
		return -1;
	size_t ml = (size_t)(p - m);
	r->method = ml == 3 && memcmp(m, "GET", 3) == 0 ? DGI_HTTP_GET :
	    ml == 4 && memcmp(m, "HEAD", 4) == 0 ? DGI_HTTP_HEAD : DGI_HTTP_OTHER;
	const char *t = ++p;
	while (p < e && *p > ' ' && *p < 0x7f)
		p++;
	if (p == t || *t != '/' || p == e || *p != ' ')
		return -1;
	const char *q = memchr(t, '?', (size_t)(p - t));
	r->path = t;
	r->path_len = (size_t)((q != NULL ? q : p) - t);
	p++;
	if (e - p != 8 || memcmp(p, "HTTP/1.", 7) != 0 || p[7] < '0' || p[7] > '9')
		return -1;
	r->minor = p[7] == '0' ? 0 : 1;
	r->keep_alive = r->minor == 1;
	return 0;
}

/* Comma-separated tokens of a Connection value. */
static void connection(const char *v, const char *e, dgi_http_req *r)
{
	while (v < e) {
		while (v < e && (*v == ' ' || *v == '\t' || *v == ','))
			v++;
		const char *t = v;
		while (v < e && *v != ',' && *v != ' ' && *v != '\t')
			v++;
		if (ieq(t, (size_t)(v - t), "close"))
			r->keep_alive = false;
		else if (ieq(t, (size_t)(v - t), "keep-alive") && r->minor == 0)
			r->keep_alive = true;
	}
}

static int header(const char *p, const char *e, dgi_http_req *r, bool *seen_cl)
{
	const char *n = p;
	while (p < e && is_tchar((unsigned char)*p))
		p++;
	if (p == n || p == e || *p != ':')
		return -1;
	size_t nl = (size_t)(p - n);
	p++;
	while (p < e && (*p == ' ' || *p == '\t'))
		p++;
	const char *v = p;
	for (const char *x = v; x < e; x++)
		if ((unsigned char)*x < ' ' && *x != '\t')
			return -1;
		else if ((unsigned char)*x == 0x7f)
			return -1;
	while (e > v && (e[-1] == ' ' || e[-1] == '\t'))
		e--;
	if (ieq(n, nl, "connection")) {
		connection(v, e, r);
	} else if (ieq(n, nl, "content-length")) {
		if (*seen_cl || v == e)
			return -1;
		*seen_cl = true;
		for (const char *x = v; x < e; x++) {
			if (*x < '0' || *x > '9')
				return -1;
			if (*x != '0')
				r->has_body = true;
		}
	} else if (ieq(n, nl, "transfer-encoding")) {
		r->has_body = true;
	} else if (ieq(n, nl, "authorization")) {
		r->auth = v;
		r->auth_len = (size_t)(e - v);
	}
	return 0;
}

int dgi_http_parse(const char *buf, size_t len, dgi_http_req *r)
{
	memset(r, 0, sizeof(*r));
	const char *p = buf, *end = buf + len;
	const char *lf = line_end(p, end);
	if (lf == NULL)
		return 0;
	if (request_line(p, chomp(p, lf), r) != 0)
		return -1;
	bool seen_cl = false;
	for (int lines = 0;; lines++) {
		p = lf + 1;
		if ((lf = line_end(p, end)) == NULL)
			return 0;
		const char *e = chomp(p, lf);
		if (e == p) {
			r->head_len = (size_t)(lf + 1 - buf);
			return 1;
		}
		if (lines == DGI_HTTP_MAX_HEADERS || *p == ' ' || *p == '\t' ||
		    header(p, e, r, &seen_cl) != 0)
			return -1;
	}
}
