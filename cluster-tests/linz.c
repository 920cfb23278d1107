/* linz.c — the linearizability checker of linz.h: history parsing and
 * merging, per-key preparation (the exact simplifications of info
 * operations), the memoised Wing & Gong / Lowe search, and its report. */
#include "linz.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * Allocation (one place, so tests can make the n-th allocation fail)
 * ------------------------------------------------------------------------ */
static uint64_t alloc_fail_countdown;

void linz_alloc_fail_nth(uint64_t n)
{
	alloc_fail_countdown = n;
}

static bool alloc_should_fail(void)
{
	return alloc_fail_countdown != 0 && --alloc_fail_countdown == 0;
}

/* count * size bytes, NULL on overflow or failure. */
static void *xalloc(size_t count, size_t size)
{
	if (size != 0 && count > SIZE_MAX / size)
		return NULL;
	if (alloc_should_fail())
		return NULL;
	size_t bytes = count * size;
	return malloc(bytes != 0 ? bytes : 1);
}

static void *xcalloc(size_t count, size_t size)
{
	if (alloc_should_fail())
		return NULL;
	return calloc(count ? count : 1, size ? size : 1);
}

/* Grows *p to hold at least need elements of size bytes (doubling); *p
 * stays valid on failure.  false: out of memory or overflow. */
static bool grow(void **p, size_t *cap, size_t need, size_t size)
{
	if (need <= *cap)
		return true;
	size_t ncap = *cap ? *cap : 16;
	while (ncap < need) {
		if (ncap > SIZE_MAX / 2)
			return false;
		ncap *= 2;
	}
	if (ncap > SIZE_MAX / size || alloc_should_fail())
		return false;
	void *np = realloc(*p, ncap * size);
	if (np == NULL)
		return false;
	*p = np;
	*cap = ncap;
	return true;
}

#define GROW(arr, cap, need) grow((void **)&(arr), &(cap), (need), sizeof(*(arr)))

/* ------------------------------------------------------------------------
 * Names
 * ------------------------------------------------------------------------ */
const char *linz_strerror(linz_err err)
{
	switch (err) {
	case LINZ_OK: return "LINZ_OK: success";
	case LINZ_ERR_NOMEM: return "LINZ_ERR_NOMEM: out of memory";
	case LINZ_ERR_IO: return "LINZ_ERR_IO: cannot read the history";
	case LINZ_ERR_PARSE: return "LINZ_ERR_PARSE: malformed history";
	case LINZ_ERR_INVAL: return "LINZ_ERR_INVAL: invalid argument";
	case LINZ_ERR__COUNT: break;
	}
	return "LINZ_ERR: unknown error";
}

const char *linz_verdict_name(linz_verdict v)
{
	switch (v) {
	case LINZ_LINEARIZABLE: return "linearizable";
	case LINZ_NOT_LINEARIZABLE: return "not-linearizable";
	case LINZ_UNKNOWN: return "unknown";
	}
	return "?";
}

void linz_config_init(linz_config *cfg)
{
	cfg->max_states = LINZ_DEFAULT_MAX_STATES;
}

static uint64_t mix64(uint64_t x)
{
	/* splitmix64's finaliser */
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

/* ------------------------------------------------------------------------
 * Interned strings: id -> NUL-terminated bytes.  Id 0 is "nil" (the
 * absent value), so a value id is 0 exactly when the token is nil.
 * ------------------------------------------------------------------------ */
#define VAL_NIL 0u

struct strtab {
	char *st_buf;           /* the strings, each NUL-terminated */
	size_t st_len, st_cap;
	size_t *st_off;         /* id -> offset in st_buf */
	size_t st_n, st_offcap;
	uint32_t *st_slots;     /* open addressing: id + 1, 0 empty */
	size_t st_nslots;       /* a power of two, or 0 */
};

static uint64_t str_hash(const char *s, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ULL;   /* FNV-1a */
	for (size_t i = 0; i < len; i++) {
		h ^= (unsigned char)s[i];
		h *= 0x100000001b3ULL;
	}
	return mix64(h);
}

static const char *str_get(const struct strtab *t, uint32_t id)
{
	return t->st_buf + t->st_off[id];
}

static bool str_rehash(struct strtab *t, size_t nslots)
{
	uint32_t *slots = xcalloc(nslots, sizeof(*slots));
	if (slots == NULL)
		return false;
	for (size_t id = 0; id < t->st_n; id++) {
		const char *s = str_get(t, (uint32_t)id);
		size_t j = str_hash(s, strlen(s)) & (nslots - 1);
		while (slots[j] != 0)
			j = (j + 1) & (nslots - 1);
		slots[j] = (uint32_t)id + 1;
	}
	free(t->st_slots);
	t->st_slots = slots;
	t->st_nslots = nslots;
	return true;
}

/* The id of s (len bytes, no NUL inside), interning it if new. */
static linz_err str_intern(struct strtab *t, const char *s, size_t len, uint32_t *id)
{
	if ((t->st_n + 1) * 2 > t->st_nslots) {
		if (t->st_n >= UINT32_MAX / 4)
			return LINZ_ERR_NOMEM;   /* ids are 32-bit */
		if (!str_rehash(t, t->st_nslots ? t->st_nslots * 2 : 64))
			return LINZ_ERR_NOMEM;
	}
	size_t j = str_hash(s, len) & (t->st_nslots - 1);
	while (t->st_slots[j] != 0) {
		uint32_t cand = t->st_slots[j] - 1;
		const char *c = str_get(t, cand);
		if (memcmp(c, s, len) == 0 && c[len] == '\0') {
			*id = cand;
			return LINZ_OK;
		}
		j = (j + 1) & (t->st_nslots - 1);
	}
	if (!GROW(t->st_buf, t->st_cap, t->st_len + len + 1) ||
	    !GROW(t->st_off, t->st_offcap, t->st_n + 1))
		return LINZ_ERR_NOMEM;
	memcpy(t->st_buf + t->st_len, s, len);
	t->st_buf[t->st_len + len] = '\0';
	t->st_off[t->st_n] = t->st_len;
	t->st_len += len + 1;
	t->st_slots[j] = (uint32_t)t->st_n + 1;
	*id = (uint32_t)t->st_n++;
	return LINZ_OK;
}

static void str_free(struct strtab *t)
{
	free(t->st_buf);
	free(t->st_off);
	free(t->st_slots);
}

/* ------------------------------------------------------------------------
 * Histories
 * ------------------------------------------------------------------------ */
enum { PH_INVOKE, PH_OK, PH_FAIL, PH_INFO };

/* One parsed line. */
struct ev {
	uint64_t e_t;
	uint64_t e_seq;         /* file order, then line order: ties in e_t */
	uint32_t e_file, e_line;
	uint32_t e_proc, e_key;
	uint32_t e_a, e_b;      /* read ok: a = value; write: a; cas: a, b */
	uint8_t e_phase, e_op, e_res;
};

/* One operation: an invoke and its completion. */
struct hop {
	uint64_t o_inv, o_ret;  /* absolute ns; o_ret LINZ_NO_TIME: none */
	uint32_t o_proc, o_key;
	uint32_t o_a, o_b;      /* as struct ev */
	uint32_t o_file, o_line;
	uint8_t o_type, o_status, o_res;
};

struct linz_history {
	struct strtab h_str;
	char **h_files;
	size_t h_nfiles, h_filescap;
	struct ev *h_ev;
	size_t h_nev, h_evcap;
	struct hop *h_ops;
	size_t h_nops;
	uint32_t *h_keyname;    /* key -> string id */
	size_t *h_keystart;     /* ops of key k: h_keyops[h_keystart[k] .. [k+1]) */
	uint32_t *h_keyops;
	size_t h_nkeys;
	linz_counts h_counts;
	bool h_finished;
	bool h_broken;          /* an add failed: only destroy */
	char h_line[LINZ_MAX_LINE + 1];
};

linz_err linz_history_create(linz_history **out)
{
	if (out == NULL)
		return LINZ_ERR_INVAL;
	*out = NULL;
	linz_history *h = xcalloc(1, sizeof(*h));
	if (h == NULL)
		return LINZ_ERR_NOMEM;
	uint32_t id;
	if (str_intern(&h->h_str, "nil", 3, &id) != LINZ_OK) {
		linz_history_destroy(h);
		return LINZ_ERR_NOMEM;
	}
	*out = h;
	return LINZ_OK;
}

void linz_history_destroy(linz_history *h)
{
	if (h == NULL)
		return;
	str_free(&h->h_str);
	for (size_t i = 0; i < h->h_nfiles; i++)
		free(h->h_files[i]);
	free(h->h_files);
	free(h->h_ev);
	free(h->h_ops);
	free(h->h_keyname);
	free(h->h_keystart);
	free(h->h_keyops);
	free(h);
}

#if defined(__GNUC__)
__attribute__((format(printf, 6, 7)))
#endif
static linz_err fail_at(char *err, size_t errlen, linz_err code, const char *file,
    uint32_t line, const char *fmt, ...)
{
	if (err != NULL && errlen > 0) {
		int n = line ? snprintf(err, errlen, "%s:%u: ", file, (unsigned)line)
		             : snprintf(err, errlen, "%s: ", file);
		if (n >= 0 && (size_t)n < errlen) {
			va_list ap;
			va_start(ap, fmt);
			vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
			va_end(ap);
		}
	}
	return code;
}

static bool parse_u64(const char *s, uint64_t *out)
{
	uint64_t v = 0;
	if (*s == '\0')
		return false;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return false;
		unsigned d = (unsigned)(*s - '0');
		if (v > (UINT64_MAX - d) / 10)
			return false;
		v = v * 10 + d;
	}
	*out = v;
	return true;
}

static int lookup(const char *s, const char *const *names, int n)
{
	for (int i = 0; i < n; i++)
		if (strcmp(s, names[i]) == 0)
			return i;
	return -1;
}

static const char *const phase_names[] = { "invoke", "ok", "fail", "info" };
static const char *const op_names[] = { "read", "write", "cas" };

/* Arguments an (op, phase) line carries. */
static int nargs_of(int op, int phase)
{
	switch (op) {
	case LINZ_READ: return phase == PH_OK ? 1 : 0;
	case LINZ_WRITE: return 1;
	default: return phase == PH_OK ? 3 : 2;
	}
}

#define MAX_FIELDS 8

/* Parses one line (len <= LINZ_MAX_LINE bytes, no newline). */
static linz_err parse_line(linz_history *h, uint32_t file, uint32_t lineno,
    const char *src, size_t len, char *err, size_t errlen)
{
	const char *fname = h->h_files[file];
	char *line = h->h_line;
	if (len > LINZ_MAX_LINE)
		return fail_at(err, errlen, LINZ_ERR_PARSE, fname, lineno,
		    "line longer than %d bytes", LINZ_MAX_LINE);
	memcpy(line, src, len);
	line[len] = '\0';

	char *tok[MAX_FIELDS];
	size_t ntok = 0;
	for (size_t i = 0; i < len;) {
		unsigned char c = (unsigned char)line[i];
		if (c == ' ' || c == '\t' || c == '\r') {
			line[i++] = '\0';
			continue;
		}
		if (ntok == 0 && c == '#')
			return LINZ_OK;   /* comment */
		if (ntok == MAX_FIELDS)
			return fail_at(err, errlen, LINZ_ERR_PARSE, fname, lineno,
			    "more than %d fields", MAX_FIELDS);
		tok[ntok++] = line + i;
		for (; i < len; i++) {
			c = (unsigned char)line[i];
			if (c == ' ' || c == '\t' || c == '\r')
				break;
			if (c < 0x20 || c == 0x7f)
				return fail_at(err, errlen, LINZ_ERR_PARSE, fname, lineno,
				    "control character 0x%02x", c);
		}
	}
	if (ntok == 0)
		return LINZ_OK;   /* blank */
	if (ntok < 5)
		return fail_at(err, errlen, LINZ_ERR_PARSE, fname, lineno,
		    "expected <t> <proc> <phase> <key> <op> [args...], got %zu fields", ntok);

	struct ev e;
	memset(&e, 0, sizeof(e));
	if (!parse_u64(tok[0], &e.e_t))
		return fail_at(err, errlen, LINZ_ERR_PARSE, fname, lineno,
		    "time \"%.40s\" is not an unsigned 64-bit decimal", tok[0]);
	int phase = lookup(tok[2], phase_names, 4);
	if (phase < 0)
		return fail_at(err, errlen, LINZ_ERR_PARSE, fname, lineno,
		    "unknown phase \"%.40s\" (invoke, ok, fail, info)", tok[2]);
	int op = lookup(tok[4], op_names, 3);
	if (op < 0)
		return fail_at(err, errlen, LINZ_ERR_PARSE, fname, lineno,
		    "unknown op \"%.40s\" (read, write, cas)", tok[4]);
	int want = nargs_of(op, phase);
	if ((int)ntok - 5 != want)
		return fail_at(err, errlen, LINZ_ERR_PARSE, fname, lineno,
		    "%s %s takes %d argument%s, got %d", op_names[op], phase_names[phase],
		    want, want == 1 ? "" : "s", (int)ntok - 5);
	if (op == LINZ_CAS && phase == PH_OK) {
		int r = lookup(tok[7], (const char *const[]){ "false", "true" }, 2);
		if (r < 0)
			return fail_at(err, errlen, LINZ_ERR_PARSE, fname, lineno,
			    "cas ok result \"%.40s\" is neither true nor false", tok[7]);
		e.e_res = (uint8_t)r;
	}
	linz_err rc;
	if ((rc = str_intern(&h->h_str, tok[1], strlen(tok[1]), &e.e_proc)) != LINZ_OK ||
	    (rc = str_intern(&h->h_str, tok[3], strlen(tok[3]), &e.e_key)) != LINZ_OK)
		return rc;
	if (want >= 1 && (rc = str_intern(&h->h_str, tok[5], strlen(tok[5]), &e.e_a)) != LINZ_OK)
		return rc;
	if (op == LINZ_CAS && (rc = str_intern(&h->h_str, tok[6], strlen(tok[6]), &e.e_b)) != LINZ_OK)
		return rc;
	e.e_phase = (uint8_t)phase;
	e.e_op = (uint8_t)op;
	e.e_file = file;
	e.e_line = lineno;
	e.e_seq = h->h_nev;
	if (!GROW(h->h_ev, h->h_evcap, h->h_nev + 1))
		return LINZ_ERR_NOMEM;
	h->h_ev[h->h_nev++] = e;
	return LINZ_OK;
}

static char *dup_str(const char *s)
{
	size_t n = strlen(s) + 1;
	char *d = xalloc(n, 1);
	if (d != NULL)
		memcpy(d, s, n);
	return d;
}

/* Registers a file name; its index in *file. */
static linz_err add_name(linz_history *h, const char *name, uint32_t *file)
{
	if (h->h_nfiles >= UINT32_MAX || !GROW(h->h_files, h->h_filescap, h->h_nfiles + 1))
		return LINZ_ERR_NOMEM;
	char *d = dup_str(name);
	if (d == NULL)
		return LINZ_ERR_NOMEM;
	*file = (uint32_t)h->h_nfiles;
	h->h_files[h->h_nfiles++] = d;
	return LINZ_OK;
}

static linz_err check_adding(linz_history *h, const void *a, const void *b)
{
	if (h == NULL || a == NULL || b == NULL || h->h_finished || h->h_broken)
		return LINZ_ERR_INVAL;
	return LINZ_OK;
}

static linz_err next_lineno(linz_history *h, uint32_t file, uint32_t *lineno,
    char *err, size_t errlen)
{
	if (*lineno == UINT32_MAX)
		return fail_at(err, errlen, LINZ_ERR_PARSE, h->h_files[file], 0,
		    "more than %u lines", (unsigned)UINT32_MAX - 1);
	++*lineno;
	return LINZ_OK;
}

/* Parses text as the lines of file; a last line may lack its newline. */
static linz_err parse_text(linz_history *h, uint32_t file, uint32_t *lineno,
    const char *text, size_t len, bool final, size_t *consumed, char *err, size_t errlen)
{
	size_t pos = 0;
	linz_err rc;
	for (;;) {
		const char *nl = memchr(text + pos, '\n', len - pos);
		size_t end = nl ? (size_t)(nl - text) : len;
		if (nl == NULL && !final) {
			/* a partial line: the caller brings more bytes */
			if (len - pos > LINZ_MAX_LINE)
				goto too_long;
			break;
		}
		if (nl == NULL && pos == len)
			break;
		if ((rc = next_lineno(h, file, lineno, err, errlen)) != LINZ_OK)
			return rc;
		if (memchr(text + pos, '\0', end - pos) != NULL)
			return fail_at(err, errlen, LINZ_ERR_PARSE, h->h_files[file], *lineno,
			    "NUL byte");
		if ((rc = parse_line(h, file, *lineno, text + pos, end - pos, err, errlen)) != LINZ_OK)
			return rc;
		if (nl == NULL) {
			pos = len;
			break;
		}
		pos = end + 1;
	}
	*consumed = pos;
	return LINZ_OK;
too_long:
	return fail_at(err, errlen, LINZ_ERR_PARSE, h->h_files[file], *lineno + 1,
	    "line longer than %d bytes", LINZ_MAX_LINE);
}

linz_err linz_history_add_text(linz_history *h, const char *name,
    const char *text, size_t len, char *err, size_t errlen)
{
	linz_err rc = check_adding(h, name, text);
	if (rc != LINZ_OK)
		return rc;
	uint32_t file, lineno = 0;
	size_t used;
	if ((rc = add_name(h, name, &file)) == LINZ_OK)
		rc = parse_text(h, file, &lineno, text, len, true, &used, err, errlen);
	if (rc == LINZ_ERR_NOMEM)
		fail_at(err, errlen, rc, name, 0, "out of memory");
	if (rc != LINZ_OK)
		h->h_broken = true;
	return rc;
}

#define READ_CHUNK 65536

linz_err linz_history_add_file(linz_history *h, const char *path, char *err, size_t errlen)
{
	linz_err rc = check_adding(h, path, path);
	if (rc != LINZ_OK)
		return rc;
	uint32_t file, lineno = 0;
	char *buf = NULL;
	FILE *f = NULL;
	if ((rc = add_name(h, path, &file)) != LINZ_OK)
		goto fail;
	/* the buffer holds a partial line (<= LINZ_MAX_LINE) plus a chunk */
	if ((buf = xalloc(READ_CHUNK + LINZ_MAX_LINE + 1, 1)) == NULL) {
		rc = LINZ_ERR_NOMEM;
		goto fail;
	}
	if ((f = fopen(path, "rb")) == NULL) {
		rc = fail_at(err, errlen, LINZ_ERR_IO, path, 0, "%s", strerror(errno));
		goto fail;
	}
	size_t have = 0;
	for (;;) {
		size_t n = fread(buf + have, 1, READ_CHUNK, f);
		if (n == 0 && ferror(f)) {
			rc = fail_at(err, errlen, LINZ_ERR_IO, path, 0, "read error");
			goto fail;
		}
		have += n;
		size_t used = 0;
		rc = parse_text(h, file, &lineno, buf, have, n == 0, &used, err, errlen);
		if (rc != LINZ_OK)
			goto fail;
		memmove(buf, buf + used, have - used);
		have -= used;
		if (n == 0)
			break;
	}
	fclose(f);
	free(buf);
	return LINZ_OK;
fail:
	if (f != NULL)
		fclose(f);
	free(buf);
	if (rc == LINZ_ERR_NOMEM)
		fail_at(err, errlen, rc, path, 0, "out of memory");
	h->h_broken = true;
	return rc;
}

static int ev_cmp(const void *pa, const void *pb)
{
	const struct ev *a = pa, *b = pb;
	if (a->e_t != b->e_t)
		return a->e_t < b->e_t ? -1 : 1;
	return a->e_seq < b->e_seq ? -1 : a->e_seq > b->e_seq;
}

/* Does a completion repeat its invoke's key, op and values? */
static bool completes(const struct hop *o, const struct ev *e, const uint32_t *keyidx)
{
	if (keyidx[e->e_key] != o->o_key + 1 || o->o_type != e->e_op)
		return false;
	switch (e->e_op) {
	case LINZ_READ: return true;
	case LINZ_WRITE: return o->o_a == e->e_a;
	default: return o->o_a == e->e_a && o->o_b == e->e_b;
	}
}

static linz_err pair_events(linz_history *h, uint32_t *pending, uint32_t *keyidx,
    char *err, size_t errlen)
{
	size_t nops = 0;
	for (size_t i = 0; i < h->h_nev; i++)
		nops += h->h_ev[i].e_phase == PH_INVOKE;
	if ((h->h_ops = xalloc(nops, sizeof(*h->h_ops))) == NULL ||
	    (h->h_keyname = xalloc(nops, sizeof(*h->h_keyname))) == NULL)
		return LINZ_ERR_NOMEM;
	for (size_t i = 0; i < h->h_nev; i++) {
		const struct ev *e = &h->h_ev[i];
		const char *fname = h->h_files[e->e_file];
		uint32_t *pend = &pending[e->e_proc];
		if (e->e_phase == PH_INVOKE) {
			if (*pend != 0) {
				const struct hop *o = &h->h_ops[*pend - 1];
				return fail_at(err, errlen, LINZ_ERR_PARSE, fname, e->e_line,
				    "proc %.40s invokes while its operation from %s:%u is outstanding",
				    str_get(&h->h_str, e->e_proc), h->h_files[o->o_file],
				    (unsigned)o->o_line);
			}
			if (keyidx[e->e_key] == 0) {
				h->h_keyname[h->h_nkeys] = e->e_key;
				keyidx[e->e_key] = (uint32_t)++h->h_nkeys;
			}
			struct hop *o = &h->h_ops[h->h_nops];
			*o = (struct hop){ .o_inv = e->e_t, .o_ret = LINZ_NO_TIME,
				.o_proc = e->e_proc, .o_key = keyidx[e->e_key] - 1,
				.o_a = e->e_op == LINZ_READ ? VAL_NIL : e->e_a, .o_b = e->e_b,
				.o_file = e->e_file, .o_line = e->e_line, .o_type = e->e_op,
				.o_status = LINZ_STATUS_INFO };
			*pend = (uint32_t)++h->h_nops;
			continue;
		}
		if (*pend == 0)
			return fail_at(err, errlen, LINZ_ERR_PARSE, fname, e->e_line,
			    "%s of proc %.40s without an invoke", phase_names[e->e_phase],
			    str_get(&h->h_str, e->e_proc));
		struct hop *o = &h->h_ops[*pend - 1];
		if (!completes(o, e, keyidx))
			return fail_at(err, errlen, LINZ_ERR_PARSE, fname, e->e_line,
			    "completion does not repeat the key, op and values of its invoke at %s:%u",
			    h->h_files[o->o_file], (unsigned)o->o_line);
		o->o_ret = e->e_t;
		o->o_status = e->e_phase == PH_OK ? LINZ_STATUS_OK
		    : e->e_phase == PH_FAIL ? LINZ_STATUS_FAIL : LINZ_STATUS_INFO;
		o->o_res = e->e_res;
		if (o->o_type == LINZ_READ && e->e_phase == PH_OK)
			o->o_a = e->e_a;
		*pend = 0;
	}
	return LINZ_OK;
}

/* Groups the operations by key (each key's in invoke order). */
static linz_err index_keys(linz_history *h)
{
	if ((h->h_keystart = xcalloc(h->h_nkeys + 1, sizeof(*h->h_keystart))) == NULL ||
	    (h->h_keyops = xalloc(h->h_nops, sizeof(*h->h_keyops))) == NULL)
		return LINZ_ERR_NOMEM;
	for (size_t i = 0; i < h->h_nops; i++)
		h->h_keystart[h->h_ops[i].o_key + 1]++;
	for (size_t k = 0; k < h->h_nkeys; k++)
		h->h_keystart[k + 1] += h->h_keystart[k];
	size_t *fill = xalloc(h->h_nkeys + 1, sizeof(*fill));
	if (fill == NULL)
		return LINZ_ERR_NOMEM;
	memcpy(fill, h->h_keystart, (h->h_nkeys + 1) * sizeof(*fill));
	for (size_t i = 0; i < h->h_nops; i++)
		h->h_keyops[fill[h->h_ops[i].o_key]++] = (uint32_t)i;
	free(fill);
	return LINZ_OK;
}

linz_err linz_history_finish(linz_history *h, char *err, size_t errlen)
{
	if (h == NULL || h->h_finished || h->h_broken)
		return LINZ_ERR_INVAL;
	if (h->h_nev >= UINT32_MAX)
		return fail_at(err, errlen, LINZ_ERR_INVAL, "history", 0, "too many events");
	linz_err rc = LINZ_ERR_NOMEM;
	uint32_t *pending = xcalloc(h->h_str.st_n, sizeof(*pending));
	uint32_t *keyidx = xcalloc(h->h_str.st_n, sizeof(*keyidx));
	if (pending == NULL || keyidx == NULL)
		goto out;
	if (h->h_nev > 0)
		qsort(h->h_ev, h->h_nev, sizeof(*h->h_ev), ev_cmp);
	if ((rc = pair_events(h, pending, keyidx, err, errlen)) != LINZ_OK ||
	    (rc = index_keys(h)) != LINZ_OK)
		goto out;
	linz_counts *c = &h->h_counts;
	c->ops = h->h_nops;
	for (size_t i = 0; i < h->h_nops; i++) {
		switch (h->h_ops[i].o_status) {
		case LINZ_STATUS_OK: c->ok++; break;
		case LINZ_STATUS_FAIL: c->fail++; break;
		default: c->info++; break;
		}
	}
	c->keys = h->h_nkeys;
	if (h->h_nev > 0) {
		c->start_ns = h->h_ev[0].e_t;
		c->span_ns = h->h_ev[h->h_nev - 1].e_t - c->start_ns;
	}
	free(h->h_ev);   /* the operations hold everything now */
	h->h_ev = NULL;
	h->h_nev = h->h_evcap = 0;
	h->h_finished = true;
out:
	if (rc == LINZ_ERR_NOMEM)
		fail_at(err, errlen, rc, "history", 0, "out of memory");
	if (rc != LINZ_OK) {
		h->h_broken = true;
		memset(&h->h_counts, 0, sizeof(h->h_counts));
	}
	free(pending);
	free(keyidx);
	return rc;
}

void linz_history_counts(const linz_history *h, linz_counts *out)
{
	memset(out, 0, sizeof(*out));
	if (h != NULL && h->h_finished)
		*out = h->h_counts;
}

size_t linz_history_nkeys(const linz_history *h)
{
	return h != NULL && h->h_finished ? h->h_nkeys : 0;
}

const char *linz_history_key(const linz_history *h, size_t key)
{
	if (h == NULL || !h->h_finished || key >= h->h_nkeys)
		return NULL;
	return str_get(&h->h_str, h->h_keyname[key]);
}

/* ------------------------------------------------------------------------
 * Per-key preparation
 * ------------------------------------------------------------------------ */

/* The register model's operations. */
enum {
	K_READ,    /* legal iff value == a */
	K_WRITE,   /* value := b */
	K_CAS,     /* legal iff value == a; value := b (ok true, or info applied) */
	K_CASF     /* legal iff value != a (ok false) */
};
/* How the search treats an operation. */
enum {
	REQUIRED,  /* must be placed, before its completion (ret) */
	OPTIONAL,  /* may be placed any time after its invoke, or never */
	GHOST,     /* optional, unobserved value: see linz.h */
	DROPPED
};

#define VAL_UNSEEN UINT32_MAX   /* every value nobody observes */

struct kop {
	uint64_t k_inv, k_ret;  /* k_ret: UINT64_MAX unless REQUIRED */
	uint64_t k_zob;         /* Zobrist key of the operation */
	uint32_t k_a, k_b;      /* model values (mapped) */
	uint32_t k_rb;          /* the real new value (for the report) */
	uint32_t k_hop;         /* index in h_ops */
	uint32_t k_cls;         /* GHOST: its class (struct prep) */
	uint8_t k_type, k_kind;
};

/* uint32 -> uint32 open-addressing map (keys != UINT32_MAX). */
struct u32map {
	uint32_t *m_keys;       /* UINT32_MAX: empty */
	uint32_t *m_vals;
	size_t m_cap, m_n;
};

static void u32map_free(struct u32map *m)
{
	free(m->m_keys);
	free(m->m_vals);
}

static size_t u32map_slot(const struct u32map *m, uint32_t key)
{
	size_t j = mix64(key) & (m->m_cap - 1);
	while (m->m_keys[j] != UINT32_MAX && m->m_keys[j] != key)
		j = (j + 1) & (m->m_cap - 1);
	return j;
}

/* The value of key, or UINT32_MAX. */
static uint32_t u32map_get(const struct u32map *m, uint32_t key)
{
	if (m->m_cap == 0)
		return UINT32_MAX;
	size_t j = u32map_slot(m, key);
	return m->m_keys[j] == key ? m->m_vals[j] : UINT32_MAX;
}

/* The value of key, inserting next_val if absent (*added: it was). */
static linz_err u32map_put(struct u32map *m, uint32_t key, uint32_t next_val,
    uint32_t *val, bool *added)
{
	if ((m->m_n + 1) * 2 > m->m_cap) {
		size_t ncap = m->m_cap ? m->m_cap * 2 : 64;
		uint32_t *keys = xalloc(ncap, sizeof(*keys));
		uint32_t *vals = xalloc(ncap, sizeof(*vals));
		if (keys == NULL || vals == NULL) {
			free(keys);
			free(vals);
			return LINZ_ERR_NOMEM;
		}
		memset(keys, 0xff, ncap * sizeof(*keys));
		struct u32map nm = { keys, vals, ncap, 0 };
		for (size_t i = 0; i < m->m_cap; i++) {
			if (m->m_keys[i] == UINT32_MAX)
				continue;
			size_t j = u32map_slot(&nm, m->m_keys[i]);
			nm.m_keys[j] = m->m_keys[i];
			nm.m_vals[j] = m->m_vals[i];
		}
		nm.m_n = m->m_n;
		u32map_free(m);
		*m = nm;
	}
	size_t j = u32map_slot(m, key);
	*added = m->m_keys[j] != key;
	if (*added) {
		m->m_keys[j] = key;
		m->m_vals[j] = next_val;
		m->m_n++;
	}
	*val = m->m_vals[j];
	return LINZ_OK;
}

/* What the preparation knows about one real value. */
struct vinfo {
	uint32_t v_producers;   /* ok/info writes and cas that may set it */
	uint64_t v_forced;      /* v_is_forced: the earliest completion of an
	                           ok read of it or ok cas=true expecting it */
	bool v_is_forced;
	bool v_observed;        /* read by an ok read or expected by a cas */
	bool v_info_expected;   /* expected by an info cas */
};

struct values {
	struct u32map vs_map;   /* real value -> index in vs_info */
	struct vinfo *vs_info;
	size_t vs_n, vs_cap;
};

static linz_err value_info(struct values *vs, uint32_t v, struct vinfo **out)
{
	uint32_t idx;
	bool added;
	linz_err rc = u32map_put(&vs->vs_map, v, (uint32_t)vs->vs_n, &idx, &added);
	if (rc != LINZ_OK)
		return rc;
	if (added) {
		if (!GROW(vs->vs_info, vs->vs_cap, vs->vs_n + 1))
			return LINZ_ERR_NOMEM;
		vs->vs_info[vs->vs_n++] = (struct vinfo){ 0, 0, false, false, false };
	}
	*out = &vs->vs_info[idx];
	return LINZ_OK;
}

static const struct vinfo *value_find(const struct values *vs, uint32_t v)
{
	uint32_t idx = u32map_get(&vs->vs_map, v);
	return idx == UINT32_MAX ? NULL : &vs->vs_info[idx];
}

static uint32_t map_value(const struct values *vs, uint32_t v)
{
	const struct vinfo *vi = value_find(vs, v);
	return vi != NULL && vi->v_observed ? v : VAL_UNSEEN;
}

struct prep {
	struct kop *p_ops;
	uint32_t p_n;
	uint32_t p_init;        /* the model's initial value (nil, mapped) */
	uint64_t p_required;
	uint64_t p_info_required, p_info_dropped, p_info_ghost;
	/* Ghosts with the same effect (a write of the same value, or a cas
	 * with the same expected and new values) form a class, placed in
	 * invoke order.  Classes are sorted: the writes first (p_nwcls of
	 * them; class 0 is the unseen value's if there are such ghosts), then
	 * the cas by expected value (p_cas_of: expected -> its first class,
	 * the others with that expected value follow it). */
	uint32_t p_nghost, p_nclass, p_nwcls;
	struct gclass *p_cls;
	uint32_t *p_cls_members;   /* class c: [p_cls[c].g_start, p_cls[c + 1].g_start) */
	struct u32map p_cas_of;
};

struct gclass {
	uint32_t g_start;       /* first member in p_cls_members */
	uint32_t g_a, g_b;      /* expected (cas), value set (mapped) */
	uint8_t g_type;
};

static void prep_free(struct prep *p)
{
	free(p->p_ops);
	free(p->p_cls);
	free(p->p_cls_members);
	u32map_free(&p->p_cas_of);
}

/* The key's operations as the model sees them (failed ones and reads
 * that did not complete ok left out), in invoke order. */
static linz_err gather(const linz_history *h, size_t key, struct prep *p)
{
	size_t lo = h->h_keystart[key], hi = h->h_keystart[key + 1];
	if ((p->p_ops = xalloc(hi - lo, sizeof(*p->p_ops))) == NULL)
		return LINZ_ERR_NOMEM;
	for (size_t i = lo; i < hi; i++) {
		const struct hop *o = &h->h_ops[h->h_keyops[i]];
		if (o->o_status == LINZ_STATUS_FAIL ||
		    (o->o_type == LINZ_READ && o->o_status != LINZ_STATUS_OK))
			continue;
		bool ok = o->o_status == LINZ_STATUS_OK;
		struct kop *k = &p->p_ops[p->p_n++];
		memset(k, 0, sizeof(*k));
		k->k_inv = o->o_inv;
		k->k_ret = ok ? o->o_ret : UINT64_MAX;
		k->k_kind = ok ? REQUIRED : OPTIONAL;
		k->k_hop = h->h_keyops[i];
		switch (o->o_type) {
		case LINZ_READ:
			k->k_type = K_READ;
			k->k_a = o->o_a;
			break;
		case LINZ_WRITE:
			k->k_type = K_WRITE;
			k->k_b = o->o_a;
			break;
		default:
			k->k_type = ok && !o->o_res ? K_CASF : K_CAS;
			k->k_a = o->o_a;
			k->k_b = o->o_b;
			break;
		}
		k->k_rb = k->k_b;
	}
	return LINZ_OK;
}

static bool sets_value(const struct kop *k)
{
	return k->k_type == K_WRITE || k->k_type == K_CAS;
}

/* Producers and observers of every value (real ids); *harmful: some ok
 * cas=false may need an unobserved info write to have happened, the last
 * of them completing at *harmful_ret. */
static linz_err survey(struct prep *p, struct values *vs, bool *harmful,
    uint64_t *harmful_ret)
{
	struct vinfo *vi;
	linz_err rc;
	if ((rc = value_info(vs, VAL_NIL, &vi)) != LINZ_OK)
		return rc;
	vi->v_producers++;   /* the initial value */
	for (uint32_t i = 0; i < p->p_n; i++) {
		struct kop *k = &p->p_ops[i];
		if (sets_value(k)) {
			if ((rc = value_info(vs, k->k_b, &vi)) != LINZ_OK)
				return rc;
			vi->v_producers++;
		}
		if (k->k_type != K_WRITE) {
			if ((rc = value_info(vs, k->k_a, &vi)) != LINZ_OK)
				return rc;
			vi->v_observed = true;
			if (k->k_kind == OPTIONAL)
				vi->v_info_expected = true;
			bool forces = k->k_kind == REQUIRED &&
			    (k->k_type == K_READ || k->k_type == K_CAS);
			if (forces && (!vi->v_is_forced || k->k_ret < vi->v_forced)) {
				vi->v_forced = k->k_ret;
				vi->v_is_forced = true;
			}
		}
	}
	/* an ok cas=false that expects a value the register can hold is what
	 * may need an unobserved info write to have happened (linz.h) */
	*harmful = false;
	*harmful_ret = 0;
	for (uint32_t i = 0; i < p->p_n; i++) {
		const struct kop *k = &p->p_ops[i];
		if (k->k_type != K_CASF)
			continue;
		const struct vinfo *e = value_find(vs, k->k_a);
		if (e != NULL && e->v_producers > 0 && (!*harmful || k->k_ret > *harmful_ret)) {
			*harmful_ret = k->k_ret;
			*harmful = true;
		}
	}
	return LINZ_OK;
}

/* Decides what each info operation becomes (linz.h, "Algorithm"). */
static void classify_info(struct prep *p, const struct values *vs, bool harmful,
    uint64_t harmful_ret)
{
	for (uint32_t i = 0; i < p->p_n; i++) {
		struct kop *k = &p->p_ops[i];
		if (k->k_kind != OPTIONAL)
			continue;
		const struct vinfo *vi = value_find(vs, k->k_b);
		if (vi == NULL || vi->v_producers != 1)
			continue;   /* not unique: an ordinary optional op */
		if (vi->v_is_forced) {
			if (vi->v_forced >= k->k_inv) {
				/* it happened, before its first observer completed */
				k->k_kind = REQUIRED;
				k->k_ret = vi->v_forced;
				p->p_info_required++;
			}   /* else observed before it began: the search finds that */
		} else if (!vi->v_info_expected) {
			/* nothing reads its value (ok cas=false may expect it):
			 * it can only make an ok cas=false legal */
			bool harmless = !harmful || harmful_ret < k->k_inv;
			k->k_kind = harmless ? DROPPED : GHOST;
			if (harmless)
				p->p_info_dropped++;
			else
				p->p_info_ghost++;
		}
	}
}

/* A ghost's sort key: writes before cas, then by expected value, then
 * the unseen value first, then by value, then invoke order. */
struct gkey {
	uint32_t gk_cas, gk_a;
	uint64_t gk_b;
	uint32_t gk_op;
};

static int gkey_cmp(const void *pa, const void *pb)
{
	const struct gkey *a = pa, *b = pb;
	if (a->gk_cas != b->gk_cas)
		return a->gk_cas < b->gk_cas ? -1 : 1;
	if (a->gk_a != b->gk_a)
		return a->gk_a < b->gk_a ? -1 : 1;
	if (a->gk_b != b->gk_b)
		return a->gk_b < b->gk_b ? -1 : 1;
	return a->gk_op < b->gk_op ? -1 : a->gk_op > b->gk_op;
}

static linz_err build_classes(struct prep *p)
{
	for (uint32_t i = 0; i < p->p_n; i++)
		p->p_nghost += p->p_ops[i].k_kind == GHOST;
	struct gkey *keys = xalloc(p->p_nghost, sizeof(*keys));
	if (keys == NULL ||
	    (p->p_cls_members = xalloc(p->p_nghost, sizeof(*p->p_cls_members))) == NULL ||
	    (p->p_cls = xalloc((size_t)p->p_nghost + 1, sizeof(*p->p_cls))) == NULL) {
		free(keys);
		return LINZ_ERR_NOMEM;
	}
	uint32_t m = 0;
	for (uint32_t i = 0; i < p->p_n; i++) {
		const struct kop *k = &p->p_ops[i];
		if (k->k_kind != GHOST)
			continue;
		bool cas = k->k_type == K_CAS;
		keys[m++] = (struct gkey){ cas, cas ? k->k_a : 0,
			k->k_b == VAL_UNSEEN ? 0 : (uint64_t)k->k_b + 1, i };
	}
	qsort(keys, m, sizeof(*keys), gkey_cmp);
	linz_err rc = LINZ_OK;
	for (uint32_t j = 0; j < m && rc == LINZ_OK; j++) {
		struct kop *k = &p->p_ops[keys[j].gk_op];
		p->p_cls_members[j] = keys[j].gk_op;
		bool fresh = j == 0 || gkey_cmp(&(struct gkey){ keys[j].gk_cas, keys[j].gk_a,
			keys[j].gk_b, 0 }, &(struct gkey){ keys[j - 1].gk_cas, keys[j - 1].gk_a,
			keys[j - 1].gk_b, 0 }) != 0;
		if (fresh) {
			p->p_cls[p->p_nclass++] = (struct gclass){ j, keys[j].gk_a, k->k_b, k->k_type };
			p->p_nwcls += k->k_type == K_WRITE;
			if (k->k_type == K_CAS) {
				uint32_t first;
				bool added;
				rc = u32map_put(&p->p_cas_of, k->k_a, p->p_nclass - 1, &first, &added);
			}
		}
		k->k_cls = p->p_nclass - 1;
	}
	p->p_cls[p->p_nclass].g_start = m;   /* the end of the last class */
	free(keys);
	return rc;
}

/* Removes dropped operations, maps values, builds the ghost classes. */
static linz_err finalize(struct prep *p, const struct values *vs)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < p->p_n; i++) {
		struct kop k = p->p_ops[i];
		if (k.k_kind == DROPPED)
			continue;
		if (k.k_type != K_WRITE)
			k.k_a = map_value(vs, k.k_a);
		if (sets_value(&k))
			k.k_b = map_value(vs, k.k_b);
		k.k_zob = mix64(((uint64_t)n << 1 | 1) * 0x9e3779b97f4a7c15ULL);
		p->p_required += k.k_kind == REQUIRED;
		p->p_ops[n++] = k;
	}
	p->p_n = n;
	p->p_init = map_value(vs, VAL_NIL);

	return build_classes(p);
}

static linz_err prepare(const linz_history *h, size_t key, struct prep *p)
{
	struct values vs;
	memset(&vs, 0, sizeof(vs));
	uint64_t harmful_ret;
	bool harmful;
	linz_err rc;
	if ((rc = gather(h, key, p)) == LINZ_OK &&
	    (rc = survey(p, &vs, &harmful, &harmful_ret)) == LINZ_OK) {
		classify_info(p, &vs, harmful, harmful_ret);
		rc = finalize(p, &vs);
	}
	u32map_free(&vs.vs_map);
	free(vs.vs_info);
	return rc;
}

/* ------------------------------------------------------------------------
 * The memo: the configurations (set of placed operations, model value)
 * explored.  The non-ghost part of a set is kept as (k = 1 + the highest
 * placed non-ghost index, the unplaced non-ghost indices below k), sorted:
 * a handful of numbers, as operations are placed roughly in invoke order.
 * The ghost part is a signature: the number of ghost writes placed and the
 * sorted ghost cas placed.  Ghosts are placed in invoke order within
 * their class, so a configuration whose signature has no more ghost
 * writes and a subset of the ghost cas of another's, all else equal, has
 * every option the other has: each entry keeps the signatures explored
 * with it, and a configuration one of them covers is not explored again.
 * ------------------------------------------------------------------------ */
struct centry {
	uint64_t c_hash;        /* Zobrist hash of the non-ghost part */
	uint64_t c_off;         /* in c_arena: c_nh holes */
	uint32_t c_value, c_k, c_nh;
	uint32_t c_sig;         /* its first signature (index + 1) */
};

struct csig {
	uint64_t g_off;         /* in c_arena: g_ng ghost cas */
	uint32_t g_ng, g_gw;    /* ghost cas, ghost writes */
	uint32_t g_next;        /* the entry's next signature (index + 1) */
};

struct cache {
	struct centry *c_e;
	size_t c_n, c_cap;
	struct csig *c_g;
	size_t c_ng, c_gcap;
	uint32_t *c_slots;      /* entry index + 1, 0 empty */
	size_t c_nslots;
	uint32_t *c_arena;
	size_t c_alen, c_acap;
};

static void cache_free(struct cache *c)
{
	free(c->c_e);
	free(c->c_g);
	free(c->c_slots);
	free(c->c_arena);
}

static size_t cache_slot_of(uint64_t hash, uint32_t value, size_t nslots)
{
	return mix64(hash ^ ((uint64_t)value * 0x9e3779b97f4a7c15ULL)) & (nslots - 1);
}

static bool cache_rehash(struct cache *c, size_t nslots)
{
	uint32_t *slots = xcalloc(nslots, sizeof(*slots));
	if (slots == NULL)
		return false;
	for (size_t i = 0; i < c->c_n; i++) {
		size_t j = cache_slot_of(c->c_e[i].c_hash, c->c_e[i].c_value, nslots);
		while (slots[j] != 0)
			j = (j + 1) & (nslots - 1);
		slots[j] = (uint32_t)i + 1;
	}
	free(c->c_slots);
	c->c_slots = slots;
	c->c_nslots = nslots;
	return true;
}

/* Is every element of sorted a (na) in sorted b (nb)? */
static bool subset(const uint32_t *a, uint32_t na, const uint32_t *b, uint32_t nb)
{
	uint32_t j = 0;
	for (uint32_t i = 0; i < na; i++) {
		while (j < nb && b[j] < a[i])
			j++;
		if (j == nb || b[j] != a[i])
			return false;
	}
	return true;
}

/* Appends n numbers to the arena; its offset in *off. */
static bool arena_put(struct cache *c, const uint32_t *a, uint32_t n, uint64_t *off)
{
	if (!GROW(c->c_arena, c->c_acap, c->c_alen + n))
		return false;
	memcpy(c->c_arena + c->c_alen, a, n * sizeof(*a));
	*off = c->c_alen;
	c->c_alen += n;
	return true;
}

/* Records a configuration: the non-ghost part (hash, value, k, holes),
 * the signature (gw ghost writes, ghosts: ng ghost cas).  1: recorded
 * (new), 0: covered by one explored, -1: out of memory. */
static int cache_insert(struct cache *c, uint64_t hash, uint32_t value, uint32_t k,
    const uint32_t *holes, uint32_t nh, const uint32_t *ghosts, uint32_t ng, uint32_t gw)
{
	if ((c->c_n + 1) * 2 > c->c_nslots &&
	    (c->c_n >= UINT32_MAX / 2 || !cache_rehash(c, c->c_nslots ? c->c_nslots * 2 : 1024)))
		return -1;
	if (c->c_ng >= UINT32_MAX - 1)
		return -1;
	size_t j = cache_slot_of(hash, value, c->c_nslots);
	struct centry *e = NULL;
	for (; c->c_slots[j] != 0; j = (j + 1) & (c->c_nslots - 1)) {
		struct centry *x = &c->c_e[c->c_slots[j] - 1];
		if (x->c_hash == hash && x->c_value == value && x->c_k == k && x->c_nh == nh &&
		    memcmp(c->c_arena + x->c_off, holes, nh * sizeof(*holes)) == 0) {
			e = x;
			break;
		}
	}
	if (e != NULL) {
		for (uint32_t g = e->c_sig; g != 0; g = c->c_g[g - 1].g_next) {
			const struct csig *sg = &c->c_g[g - 1];
			if (sg->g_gw <= gw && subset(c->c_arena + sg->g_off, sg->g_ng, ghosts, ng))
				return 0;
		}
	}
	struct csig sig = { 0, ng, gw, 0 };
	if (!GROW(c->c_g, c->c_gcap, c->c_ng + 1) || !arena_put(c, ghosts, ng, &sig.g_off))
		return -1;
	if (e == NULL) {
		struct centry ne = { hash, 0, value, k, nh, 0 };
		if (!GROW(c->c_e, c->c_cap, c->c_n + 1) || !arena_put(c, holes, nh, &ne.c_off))
			return -1;
		c->c_e[c->c_n] = ne;
		c->c_slots[j] = (uint32_t)++c->c_n;
		e = &c->c_e[c->c_n - 1];
	}
	sig.g_next = e->c_sig;
	c->c_g[c->c_ng] = sig;
	e->c_sig = (uint32_t)++c->c_ng;
	return 1;
}

/* ------------------------------------------------------------------------
 * The search
 * ------------------------------------------------------------------------ */
#define NIL (-1)
#define MAIN_MOVE UINT32_MAX           /* a candidate of the list */
#define FORCED_MOVE (UINT32_MAX - 1)   /* a forced one (forced_candidate) */
#define GHOSTS_DONE INT64_MAX

struct frame {
	uint32_t f_op;
	uint32_t f_value, f_real, f_k;
	uint32_t f_move;        /* MAIN_MOVE, FORCED_MOVE or the ghost option */
};

struct search {
	struct prep *s_p;
	const linz_config *s_cfg;
	/* the event list: node 2i = invoke of op i, 2i+1 = its completion
	 * (REQUIRED only), s_head = 2n; ghosts are not in it */
	int32_t *s_next, *s_prev;
	int32_t s_head;
	struct cache s_cache;
	struct frame *s_st;
	uint32_t s_sp;
	uint32_t *s_used;       /* ghosts placed per class */
	uint32_t *s_gset;       /* ghosts of classes > 0 placed, sorted */
	uint32_t s_ng;
	uint64_t s_states;      /* configurations explored (signatures) */
	uint32_t *s_holes, *s_gsorted;  /* scratch */
	/* the current configuration */
	uint32_t s_value, s_real, s_k;
	uint64_t s_hash, s_remaining;
	/* the deepest configuration a dead end was found at */
	bool s_have_best;
	uint64_t s_best_depth;
	uint32_t s_best_real;
	uint32_t s_best_tail[LINZ_REPORT_TAIL], s_nbest_tail;
	uint32_t s_best_stuck[LINZ_REPORT_STUCK], s_nbest_stuck;
	size_t s_best_stuck_total;
	int64_t s_best_blocking;    /* op index, or -1 */
};

enum { MOVED = 1, NOT_MOVED = 0, E_NOMEM = -1, E_BUDGET = -2 };

static void list_unlink(struct search *s, int32_t x)
{
	s->s_next[s->s_prev[x]] = s->s_next[x];
	if (s->s_next[x] != NIL)
		s->s_prev[s->s_next[x]] = s->s_prev[x];
}

static void list_relink(struct search *s, int32_t x)
{
	s->s_next[s->s_prev[x]] = x;
	if (s->s_next[x] != NIL)
		s->s_prev[s->s_next[x]] = x;
}

/* Is op k legal on value v; its result in *nv. */
static bool legal(const struct kop *k, uint32_t v, uint32_t *nv)
{
	switch (k->k_type) {
	case K_READ: *nv = v; return v == k->k_a;
	case K_WRITE: *nv = k->k_b; return true;
	case K_CAS: *nv = k->k_b; return v == k->k_a;
	default: *nv = v; return v != k->k_a;
	}
}

/* Copies the sorted a (n) to out with x inserted in order. */
static void insert_sorted(uint32_t *out, const uint32_t *a, uint32_t n, uint32_t x)
{
	uint32_t j = 0;
	for (; j < n && a[j] < x; j++)
		out[j] = a[j];
	out[j] = x;
	memcpy(out + j + 1, a + j, (n - j) * sizeof(*a));
}

/* Is k a ghost of class 0 (counted in a signature, not listed)? */
static bool counted_ghost(const struct kop *k)
{
	return k->k_kind == GHOST && k->k_cls == 0;
}

/* Tries to place op i next (move: MAIN_MOVE, FORCED_MOVE or the ghost
 * option): MOVED, NOT_MOVED (illegal, or covered by an explored
 * configuration), E_NOMEM, E_BUDGET. */
static int try_move(struct search *s, uint32_t i, uint32_t move)
{
	const struct kop *k = &s->s_p->p_ops[i];
	uint32_t nv;
	if (!legal(k, s->s_value, &nv))
		return NOT_MOVED;
	bool ghost = k->k_kind == GHOST;
	bool counted = counted_ghost(k);
	uint64_t hash = ghost ? s->s_hash : s->s_hash ^ k->k_zob;
	uint32_t nk = ghost || i + 1 <= s->s_k ? s->s_k : i + 1;
	uint32_t nh = 0, ng = s->s_ng;
	for (int32_t x = s->s_next[s->s_head]; x != NIL; x = s->s_next[x]) {
		if (x & 1)
			continue;
		uint32_t j = (uint32_t)x >> 1;
		if (j >= nk)
			break;
		if (j != i)
			s->s_holes[nh++] = j;
	}
	const uint32_t *gset = s->s_gset;
	if (ghost && !counted) {
		insert_sorted(s->s_gsorted, s->s_gset, ng++, i);
		gset = s->s_gsorted;
	}
	int r = cache_insert(&s->s_cache, hash, nv, nk, s->s_holes, nh, gset, ng,
	    s->s_used[0] + counted);
	if (r < 0)
		return E_NOMEM;
	if (r == 0)
		return NOT_MOVED;
	if (++s->s_states > s->s_cfg->max_states)
		return E_BUDGET;
	s->s_st[s->s_sp++] = (struct frame){ i, s->s_value, s->s_real, s->s_k, move };
	s->s_value = nv;
	if (sets_value(k))
		s->s_real = k->k_rb;
	s->s_hash = hash;
	s->s_k = nk;
	if (ghost) {
		s->s_used[k->k_cls]++;
		if (!counted)
			memcpy(s->s_gset, s->s_gsorted, ++s->s_ng * sizeof(*s->s_gset));
	} else {
		list_unlink(s, (int32_t)(2 * i));
		if (k->k_kind == REQUIRED)
			list_unlink(s, (int32_t)(2 * i + 1));
	}
	s->s_remaining -= k->k_kind == REQUIRED;
	return MOVED;
}

/* Undoes the last move; returns its frame. */
static struct frame undo(struct search *s)
{
	struct frame f = s->s_st[--s->s_sp];
	const struct kop *k = &s->s_p->p_ops[f.f_op];
	bool counted = counted_ghost(k);
	if (k->k_kind == GHOST) {
		s->s_used[k->k_cls]--;
		if (!counted) {
			uint32_t j = 0;
			while (s->s_gset[j] != f.f_op)
				j++;
			memmove(s->s_gset + j, s->s_gset + j + 1, (--s->s_ng - j) * sizeof(*s->s_gset));
		}
	} else {
		if (k->k_kind == REQUIRED)
			list_relink(s, (int32_t)(2 * f.f_op + 1));
		list_relink(s, (int32_t)(2 * f.f_op));
	}
	s->s_remaining += k->k_kind == REQUIRED;
	s->s_value = f.f_value;
	s->s_real = f.f_real;
	s->s_k = f.f_k;
	if (k->k_kind != GHOST)
		s->s_hash ^= k->k_zob;
	return f;
}

/* The first completion in the list (the window's end), or NIL; *gate:
 * some ok cas=false before it is blocked by the current value. */
static int32_t window_end(const struct search *s, bool *gate)
{
	*gate = false;
	int32_t x = s->s_next[s->s_head];
	for (; x != NIL && !(x & 1); x = s->s_next[x]) {
		const struct kop *k = &s->s_p->p_ops[(uint32_t)x >> 1];
		if (k->k_type == K_CASF && k->k_a == s->s_value)
			*gate = true;
	}
	return x;
}

/* The class of ghost option j at the current value: the write classes,
 * then the cas classes expecting the value; UINT32_MAX past the last. */
static uint32_t option_class(const struct search *s, uint64_t j)
{
	const struct prep *p = s->s_p;
	if (j < p->p_nwcls)
		return (uint32_t)j;
	uint32_t first = u32map_get(&p->p_cas_of, s->s_value);
	if (first == UINT32_MAX || j - p->p_nwcls >= p->p_nclass - first)
		return UINT32_MAX;
	uint32_t c = first + (uint32_t)(j - p->p_nwcls);
	return p->p_cls[c].g_a == s->s_value ? c : UINT32_MAX;
}

/* The ghost to try for class c: its first unplaced member, if invoked
 * before the window's end and if it changes the value; else UINT32_MAX. */
static uint32_t ghost_of(const struct search *s, uint32_t c, int32_t wend)
{
	const struct prep *p = s->s_p;
	uint32_t at = p->p_cls[c].g_start + s->s_used[c];
	if (at >= p->p_cls[c + 1].g_start || p->p_cls[c].g_b == s->s_value)
		return UINT32_MAX;
	uint32_t g = p->p_cls_members[at];
	if (wend != NIL && p->p_ops[g].k_inv > p->p_ops[(uint32_t)wend >> 1].k_ret)
		return UINT32_MAX;   /* not invoked yet */
	return g;
}

/* Remembers the current configuration if it is the deepest dead end. */
static void note_dead_end(struct search *s)
{
	if (s->s_have_best && s->s_sp <= s->s_best_depth)
		return;
	s->s_have_best = true;
	s->s_best_depth = s->s_sp;
	s->s_best_real = s->s_real;
	uint32_t from = s->s_sp > LINZ_REPORT_TAIL ? s->s_sp - LINZ_REPORT_TAIL : 0;
	s->s_nbest_tail = 0;
	for (uint32_t i = from; i < s->s_sp; i++)
		s->s_best_tail[s->s_nbest_tail++] = s->s_st[i].f_op;
	s->s_nbest_stuck = 0;
	s->s_best_stuck_total = 0;
	s->s_best_blocking = -1;
	int32_t x = s->s_next[s->s_head];
	for (; x != NIL && !(x & 1); x = s->s_next[x]) {
		if (s->s_p->p_ops[(uint32_t)x >> 1].k_kind != REQUIRED)
			continue;   /* an info op never has to come next */
		if (s->s_nbest_stuck < LINZ_REPORT_STUCK)
			s->s_best_stuck[s->s_nbest_stuck++] = (uint32_t)x >> 1;
		s->s_best_stuck_total++;
	}
	if (x != NIL)
		s->s_best_blocking = (uint32_t)x >> 1;
}

/* A legal read or cas=false in the window (calls before the first
 * completion), or UINT32_MAX.  Such an operation leaves the value as it
 * is, so if the configuration has a linearization it has one that places
 * it first: placing it is forced, no alternative needs trying. */
static uint32_t forced_candidate(const struct search *s)
{
	for (int32_t x = s->s_next[s->s_head]; x != NIL && !(x & 1); x = s->s_next[x]) {
		const struct kop *k = &s->s_p->p_ops[(uint32_t)x >> 1];
		if ((k->k_type == K_READ && k->k_a == s->s_value) ||
		    (k->k_type == K_CASF && k->k_a != s->s_value))
			return (uint32_t)x >> 1;
	}
	return UINT32_MAX;
}

/* Tries the ghost options from *gnext on (a ghost is only ever needed to
 * make a blocked ok cas=false legal: linz.h). */
static int try_ghosts(struct search *s, int64_t *gnext)
{
	bool gate;
	int32_t wend = window_end(s, &gate);
	if (!gate) {
		*gnext = GHOSTS_DONE;
		return NOT_MOVED;
	}
	for (;;) {
		int64_t j = (*gnext)++;
		uint32_t c = option_class(s, (uint64_t)j);
		if (c == UINT32_MAX) {
			*gnext = GHOSTS_DONE;
			return NOT_MOVED;
		}
		uint32_t g = ghost_of(s, c, wend);
		if (g == UINT32_MAX)
			continue;
		int r = try_move(s, g, (uint32_t)j);
		if (r != NOT_MOVED)
			return r;
	}
}

/* The search: LINZ_LINEARIZABLE, LINZ_NOT_LINEARIZABLE, E_NOMEM, E_BUDGET.
 * A configuration is entered after each move: a forced move if there is
 * one, else the candidates of the list in order, then the ghost options;
 * when none is left, the last move is undone (and a forced move's parent
 * is exhausted with it). */
static int run(struct search *s)
{
	int32_t cur = NIL;
	int64_t gnext = -1;   /* -1: scanning the list; else the next ghost option */
	bool enter = true;
	for (;;) {
		int r = NOT_MOVED;
		if (enter) {
			if (s->s_remaining == 0)
				return LINZ_LINEARIZABLE;
			enter = false;
			uint32_t f = forced_candidate(s);
			if (f != UINT32_MAX) {
				r = try_move(s, f, FORCED_MOVE);
				if (r < 0)
					return r;
				enter = r == MOVED;
				if (enter)
					continue;
				gnext = GHOSTS_DONE;   /* explored before, and failed */
			} else {
				cur = s->s_next[s->s_head];
				gnext = -1;
			}
		}
		if (gnext < 0) {
			if (cur != NIL && !(cur & 1)) {
				r = try_move(s, (uint32_t)cur >> 1, MAIN_MOVE);
				if (r < 0)
					return r;
				enter = r == MOVED;
				if (!enter)
					cur = s->s_next[cur];
				continue;
			}
			gnext = 0;
		}
		if (s->s_p->p_nghost > 0 && gnext != GHOSTS_DONE) {
			if ((r = try_ghosts(s, &gnext)) < 0)
				return r;
			enter = r == MOVED;
			if (enter)
				continue;
		}
		/* a dead end: undo the last move, try what comes after it */
		note_dead_end(s);
		struct frame f;
		do {
			if (s->s_sp == 0)
				return LINZ_NOT_LINEARIZABLE;
			f = undo(s);
		} while (f.f_move == FORCED_MOVE);
		if (f.f_move == MAIN_MOVE) {
			cur = s->s_next[2 * f.f_op];
			gnext = -1;
		} else {
			gnext = (int64_t)f.f_move + 1;
		}
	}
}

struct node_key {
	uint64_t nk_t;
	uint32_t nk_order;      /* invokes before completions, then op index */
	int32_t nk_node;
};

static int node_key_cmp(const void *pa, const void *pb)
{
	const struct node_key *a = pa, *b = pb;
	if (a->nk_t != b->nk_t)
		return a->nk_t < b->nk_t ? -1 : 1;
	if (a->nk_order != b->nk_order)
		return a->nk_order < b->nk_order ? -1 : 1;
	return 0;
}

/* Links the invokes and completions of the non-ghost ops in time order. */
static linz_err build_list(struct search *s)
{
	const struct prep *p = s->s_p;
	uint32_t n = p->p_n;
	struct node_key *keys = xalloc((size_t)2 * n + 1, sizeof(*keys));
	if (keys == NULL)
		return LINZ_ERR_NOMEM;
	size_t m = 0;
	for (uint32_t i = 0; i < n; i++) {
		const struct kop *k = &p->p_ops[i];
		if (k->k_kind == GHOST)
			continue;
		keys[m++] = (struct node_key){ k->k_inv, i, (int32_t)(2 * i) };
		if (k->k_kind == REQUIRED)
			keys[m++] = (struct node_key){ k->k_ret, 0x80000000u | i,
				(int32_t)(2 * i + 1) };
	}
	qsort(keys, m, sizeof(*keys), node_key_cmp);
	int32_t prev = s->s_head;
	s->s_prev[s->s_head] = NIL;
	for (size_t j = 0; j < m; j++) {
		int32_t x = keys[j].nk_node;
		s->s_next[prev] = x;
		s->s_prev[x] = prev;
		prev = x;
	}
	s->s_next[prev] = NIL;
	free(keys);
	return LINZ_OK;
}

static void search_free(struct search *s)
{
	free(s->s_next);
	free(s->s_prev);
	cache_free(&s->s_cache);
	free(s->s_st);
	free(s->s_used);
	free(s->s_gset);
	free(s->s_holes);
	free(s->s_gsorted);
}

static linz_err search_init(struct search *s, struct prep *p, const linz_config *cfg)
{
	memset(s, 0, sizeof(*s));
	s->s_p = p;
	s->s_cfg = cfg;
	size_t n = p->p_n;
	s->s_head = (int32_t)(2 * n);
	if ((s->s_next = xalloc(2 * n + 1, sizeof(*s->s_next))) == NULL ||
	    (s->s_prev = xalloc(2 * n + 1, sizeof(*s->s_prev))) == NULL ||
	    (s->s_st = xalloc(n, sizeof(*s->s_st))) == NULL ||
	    (s->s_used = xcalloc(p->p_nclass + 1, sizeof(*s->s_used))) == NULL ||
	    (s->s_gset = xalloc(p->p_nghost, sizeof(*s->s_gset))) == NULL ||
	    (s->s_holes = xalloc(n, sizeof(*s->s_holes))) == NULL ||
	    (s->s_gsorted = xalloc(p->p_nghost, sizeof(*s->s_gsorted))) == NULL ||
	    !GROW(s->s_cache.c_arena, s->s_cache.c_acap, 1))   /* never NULL */
		return LINZ_ERR_NOMEM;
	s->s_value = p->p_init;
	s->s_real = VAL_NIL;
	s->s_remaining = p->p_required;
	return build_list(s);
}

/* ------------------------------------------------------------------------
 * Results
 * ------------------------------------------------------------------------ */
static void op_view(const linz_history *h, uint32_t hop, linz_op *out)
{
	const struct hop *o = &h->h_ops[hop];
	uint64_t t0 = h->h_counts.start_ns;
	out->proc = str_get(&h->h_str, o->o_proc);
	out->type = (linz_optype)o->o_type;
	out->status = (linz_status)o->o_status;
	out->value = str_get(&h->h_str, o->o_a);
	out->new_value = o->o_type == LINZ_CAS ? str_get(&h->h_str, o->o_b) : NULL;
	out->cas_result = o->o_res != 0;
	out->invoke_ns = o->o_inv - t0;
	out->complete_ns = o->o_ret == LINZ_NO_TIME ? LINZ_NO_TIME : o->o_ret - t0;
	out->file = h->h_files[o->o_file];
	out->line = o->o_line;
}

static void fill_report(const linz_history *h, const struct search *s, linz_result *r)
{
	const struct kop *ops = s->s_p->p_ops;
	r->depth = s->s_best_depth;
	r->value = str_get(&h->h_str, s->s_best_real);
	r->ntail = s->s_nbest_tail;
	for (uint32_t i = 0; i < s->s_nbest_tail; i++)
		op_view(h, ops[s->s_best_tail[i]].k_hop, &r->tail[i]);
	r->nstuck = s->s_nbest_stuck;
	r->nstuck_total = s->s_best_stuck_total;
	for (uint32_t i = 0; i < s->s_nbest_stuck; i++) {
		op_view(h, ops[s->s_best_stuck[i]].k_hop, &r->stuck[i]);
		if ((int64_t)s->s_best_stuck[i] == s->s_best_blocking)
			r->blocking = i;
	}
	if (s->s_best_blocking >= 0) {
		r->blocking_valid = true;
		op_view(h, ops[s->s_best_blocking].k_hop, &r->blocking_op);
	}
}

linz_err linz_check_key(const linz_history *h, size_t key, const linz_config *cfg,
    linz_result **out)
{
	linz_config defaults;
	if (cfg == NULL) {
		linz_config_init(&defaults);
		cfg = &defaults;
	}
	if (out == NULL)
		return LINZ_ERR_INVAL;
	*out = NULL;
	if (h == NULL || !h->h_finished || key >= h->h_nkeys || cfg->max_states == 0)
		return LINZ_ERR_INVAL;
	if (h->h_keystart[key + 1] - h->h_keystart[key] >= INT32_MAX / 2)
		return LINZ_ERR_INVAL;   /* more ops on one key than the list indexes */
	linz_result *r = xcalloc(1, sizeof(*r));
	if (r == NULL)
		return LINZ_ERR_NOMEM;
	r->key = key;
	r->key_name = linz_history_key(h, key);
	r->blocking = SIZE_MAX;
	struct prep p;
	struct search s;
	memset(&p, 0, sizeof(p));
	memset(&s, 0, sizeof(s));
	linz_err rc = prepare(h, key, &p);
	if (rc == LINZ_OK)
		rc = search_init(&s, &p, cfg);
	if (rc == LINZ_OK) {
		r->ops = p.p_n;
		r->info_required = p.p_info_required;
		r->info_dropped = p.p_info_dropped;
		r->info_ghost = p.p_info_ghost;
		int v = run(&s);
		r->states = s.s_states;
		if (v == E_NOMEM) {
			rc = LINZ_ERR_NOMEM;
		} else if (v == E_BUDGET) {
			r->verdict = LINZ_UNKNOWN;
		} else {
			r->verdict = (linz_verdict)v;
			if (v == LINZ_NOT_LINEARIZABLE)
				fill_report(h, &s, r);
		}
	}
	search_free(&s);
	prep_free(&p);
	if (rc != LINZ_OK) {
		free(r);
		return rc;
	}
	*out = r;
	return LINZ_OK;
}

void linz_result_destroy(linz_result *r)
{
	free(r);
}

static int fmt_time(char *buf, size_t cap, uint64_t ns)
{
	if (ns == LINZ_NO_TIME)
		return snprintf(buf, cap, "never");
	return snprintf(buf, cap, "+%llu.%09llus", (unsigned long long)(ns / 1000000000u),
	    (unsigned long long)(ns % 1000000000u));
}

static const char *const status_names[] = { "ok", "fail", "info" };

int linz_op_format(const linz_op *op, char *buf, size_t cap)
{
	char what[160], t1[32], t2[32];
	switch (op->type) {
	case LINZ_READ:
		if (op->status == LINZ_STATUS_OK)
			snprintf(what, sizeof(what), "read -> %.64s", op->value);
		else
			snprintf(what, sizeof(what), "read");
		break;
	case LINZ_WRITE:
		snprintf(what, sizeof(what), "write %.64s", op->value);
		break;
	default:
		snprintf(what, sizeof(what), "cas %.64s -> %.64s%s", op->value, op->new_value,
		    op->status != LINZ_STATUS_OK ? "" : op->cas_result ? " = true" : " = false");
		break;
	}
	fmt_time(t1, sizeof(t1), op->invoke_ns);
	fmt_time(t2, sizeof(t2), op->complete_ns);
	return snprintf(buf, cap, "%-10s %-28s %-4s %s .. %s  (%s:%u)", op->proc, what,
	    status_names[op->status], t1, t2, op->file, (unsigned)op->line);
}

static void print_op(FILE *f, const linz_op *op, const char *suffix)
{
	char line[512];
	linz_op_format(op, line, sizeof(line));
	fprintf(f, "    %s%s\n", line, suffix);
}

void linz_result_print(const linz_result *r, bool details, FILE *f)
{
	fprintf(f, "key %s: %s (ops=%llu states=%llu info: required=%llu dropped=%llu ghost=%llu)\n",
	    r->key_name, linz_verdict_name(r->verdict), (unsigned long long)r->ops,
	    (unsigned long long)r->states, (unsigned long long)r->info_required,
	    (unsigned long long)r->info_dropped, (unsigned long long)r->info_ghost);
	if (!details)
		return;
	if (r->verdict == LINZ_UNKNOWN) {
		fprintf(f, "  the search exceeded its budget of memoised states: undecided\n");
		return;
	}
	if (r->verdict != LINZ_NOT_LINEARIZABLE)
		return;
	fprintf(f, "  longest linearisable prefix: %llu of %llu operations, then the register holds %s\n",
	    (unsigned long long)r->depth, (unsigned long long)r->ops, r->value);
	if (r->ntail > 0)
		fprintf(f, "  %s, in linearisation order:\n",
		    r->ntail == 1 ? "its last operation" : "its last operations");
	for (size_t i = 0; i < r->ntail; i++)
		print_op(f, &r->tail[i], "");
	if (r->nstuck_total == 1)
		fprintf(f, "  the operation that had to come next is not legal on %s:\n", r->value);
	else
		fprintf(f, "  none of the %zu operations that had to come next is legal on %s:\n",
		    r->nstuck_total, r->value);
	for (size_t i = 0; i < r->nstuck; i++)
		print_op(f, &r->stuck[i], i == r->blocking ? "  <- completed first" : "");
	if (r->nstuck < r->nstuck_total)
		fprintf(f, "    ... and %zu more\n", r->nstuck_total - r->nstuck);
	if (r->blocking_valid && r->blocking == SIZE_MAX)
		print_op(f, &r->blocking_op, "  <- completed first");
}
