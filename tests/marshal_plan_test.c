/*
 * marshal_plan_test.c — what the descriptor precomputes at registration
 * and the paths built on it (issue 16, "registration-time specialisation"):
 *
 *  1. Fixed-area runs: fixed fields adjacent in the struct are copied as
 *     one block, fields that are not (gaps, another order, bools) are not;
 *     the bytes are those of the per-field writer (the builder).
 *  2. Flat descriptors (every var field an I32, I64, STRING or BYTES):
 *     integers of every varint length, strings on both sides of the 1-byte
 *     length prefix, and bodies on both sides of the 1-byte length and
 *     footer — the same bytes as the builder, the same values back through
 *     every decoding entry point (dg_decode_object, the stream reader,
 *     the array reader, O(1) field access).
 *  3. Hostile bodies of a flat type: the span decoders give the errors the
 *     general decoder gives (bad varints, spans that a value under- or
 *     overruns, footers out of order).
 *  4. The top-level fast paths: fixed buffers, a writer in error, objects
 *     in containers, lengths of 1 and 2 bytes.
 *
 * The bytes are checked against dg_builder, which writes each field on its
 * own from a dg_value and shares none of these paths.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "marshal/marshal.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void expect_err_(dg_err got, dg_err want, const char *what,
    const char *file, int line)
{
	if (got != want)
		fail_msg("%s:%d: %s returned %s, expected %s", file, line, what,
		    dg_strerror(got), dg_strerror(want));
}
#define EXPECT(expr, want) expect_err_((expr), (want), #expr, __FILE__, __LINE__)
#define OK(expr) EXPECT((expr), DG_OK)
#define NF(a) ((uint32_t)(sizeof(a) / sizeof((a)[0])))

/* ---- the types ---- */

/* Fixed fields in struct order: runs {a b c d} (19 bytes), the bools one
 * by one, then {g u} after the padding before g. */
typedef struct runs {
	double a, b;
	int16_t c;
	int8_t d;
	bool e, f;
	float g;
	dg_uuid u;
	int64_t id;
} runs;
static const dg_field_def runs_fields[] = {
	DG_FIELD(runs, a, DG_DOUBLE), DG_FIELD(runs, b, DG_DOUBLE),
	DG_FIELD(runs, c, DG_I16), DG_FIELD(runs, d, DG_I8),
	DG_FIELD(runs, e, DG_BOOL), DG_FIELD(runs, f, DG_BOOL),
	DG_FIELD(runs, g, DG_FLOAT), DG_FIELD(runs, u, DG_UUID),
	DG_FIELD(runs, id, DG_I64),
};

/* Declared in the other order than the struct's: no run may form. */
typedef struct swap {
	double x, y;
} swap;
static const dg_field_def swap_fields[] = {
	DG_FIELD(swap, y, DG_DOUBLE), DG_FIELD(swap, x, DG_DOUBLE),
};

typedef struct ints {
	int64_t a;
	int32_t b;
	dg_str s;
	dg_bytes raw;
} ints;
static const dg_field_def ints_fields[] = {
	DG_FIELD(ints, a, DG_I64), DG_FIELD(ints, b, DG_I32),
	DG_FIELD(ints, s, DG_STRING), DG_FIELD(ints, raw, DG_BYTES),
};

/* One var field: the integer is the last byte of the input. */
typedef struct one {
	int64_t v;
} one;
static const dg_field_def one_fields[] = { DG_FIELD(one, v, DG_I64) };

/* Six var fields: five footer entries (the unrolled footer takes four). */
typedef struct six {
	dg_str a, b, c, d, e, f;
} six;
static const dg_field_def six_fields[] = {
	DG_FIELD(six, a, DG_STRING), DG_FIELD(six, b, DG_STRING),
	DG_FIELD(six, c, DG_STRING), DG_FIELD(six, d, DG_STRING),
	DG_FIELD(six, e, DG_STRING), DG_FIELD(six, f, DG_STRING),
};

typedef struct pair {
	int64_t a;
	dg_str s;
} pair;
static const dg_field_def pair_fields[] = {
	DG_FIELD(pair, a, DG_I64), DG_FIELD(pair, s, DG_STRING),
};

static struct {
	dg_registry *reg;
	const dg_desc *runs, *swap, *ints, *one, *six, *pair;
} g;

static const dg_desc *reg_type(const char *name, const dg_field_def *f,
    uint32_t n, size_t size)
{
	const dg_desc *d;
	dg_type_def def = { name, f, n, size };
	OK(dg_registry_register(g.reg, &def, &d));
	return d;
}

static int setup(void **state)
{
	(void)state;
	OK(dg_registry_create(&g.reg));
	g.runs = reg_type("Runs", runs_fields, NF(runs_fields), sizeof(runs));
	g.swap = reg_type("Swap", swap_fields, NF(swap_fields), sizeof(swap));
	g.ints = reg_type("Ints", ints_fields, NF(ints_fields), sizeof(ints));
	g.one = reg_type("One", one_fields, NF(one_fields), sizeof(one));
	g.six = reg_type("Six", six_fields, NF(six_fields), sizeof(six));
	g.pair = reg_type("Pair", pair_fields, NF(pair_fields), sizeof(pair));
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	dg_registry_destroy(g.reg);
	return 0;
}

/* ---- helpers ---- */

static dg_str S(const char *s)
{
	return (dg_str){ s, s ? (uint32_t)strlen(s) : 0 };
}

static void encode(const dg_desc *d, const void *obj, dg_buf *b)
{
	dg_writer w;
	dg_buf_reset(b);
	dg_writer_init(&w, g.reg, b);
	OK(dg_write_object(&w, d, obj));
	OK(dg_writer_finish(&w));
}

/* The builder's encoding of the same values (fields in declaration order,
 * so it finds the registered schema). */
static void build(const char *type, const char *const *names,
    const dg_value *vals, uint32_t n, dg_buf *b)
{
	dg_builder *bl;
	dg_writer w;
	OK(dg_builder_create(g.reg, type, &bl));
	for (uint32_t i = 0; i < n; i++)
		OK(dg_builder_set(bl, names[i], &vals[i]));
	dg_buf_reset(b);
	dg_writer_init(&w, g.reg, b);
	OK(dg_builder_write(bl, &w));
	OK(dg_writer_finish(&w));
	dg_builder_destroy(bl);
}

static void same_bytes(const dg_buf *a, const dg_buf *b, const char *what)
{
	if (a->len != b->len || memcmp(a->data, b->data, a->len) != 0) {
		char hex[3 * 64 + 1] = "";
		for (size_t i = 0; i < a->len && i < 64; i++)
			snprintf(hex + 3 * i, 4, "%02X ", a->data[i]);
		fail_msg("%s: %zu bytes from dg_write_object (%s...), %zu from the builder",
		    what, a->len, hex, b->len);
	}
}

static dg_value vi(dg_kind k, int64_t i)
{
	dg_value v = { .kind = k };
	v.v.i = i;
	return v;
}
static dg_value vd(double d)
{
	dg_value v = { .kind = DG_DOUBLE };
	v.v.d = d;
	return v;
}
static dg_value vs(dg_str s)
{
	dg_value v = { .kind = s.ptr ? DG_STRING : DG_NULL };
	v.v.str = s;
	return v;
}

static bool str_eq(dg_str a, dg_str b)
{
	if (a.ptr == NULL || b.ptr == NULL)
		return a.ptr == b.ptr && a.len == 0 && b.len == 0;
	return a.len == b.len && memcmp(a.ptr, b.ptr, a.len) == 0;
}

/* Field by field (decoded strings point into different inputs). */
static bool eq_runs(const void *x, const void *y)
{
	const runs *a = x, *b = y;
	return a->a == b->a && a->b == b->b && a->c == b->c && a->d == b->d &&
	    a->e == b->e && a->f == b->f && a->g == b->g &&
	    memcmp(a->u.b, b->u.b, 16) == 0 && a->id == b->id;
}
static bool eq_swap(const void *x, const void *y)
{
	const swap *a = x, *b = y;
	return a->x == b->x && a->y == b->y;
}
static bool eq_ints(const void *x, const void *y)
{
	const ints *a = x, *b = y;
	return a->a == b->a && a->b == b->b && str_eq(a->s, b->s) &&
	    str_eq((dg_str){ (const char *)a->raw.ptr, a->raw.len },
	    (dg_str){ (const char *)b->raw.ptr, b->raw.len });
}
static bool eq_one(const void *x, const void *y)
{
	return ((const one *)x)->v == ((const one *)y)->v;
}
static bool eq_six(const void *x, const void *y)
{
	const dg_str *a = &((const six *)x)->a, *b = &((const six *)y)->a;
	for (int i = 0; i < 6; i++)
		if (!str_eq(a[i], b[i]))
			return false;
	return true;
}

/* Decodes b (one object of d's type) through every entry point — into
 * out with dg_decode_object, then with dg_read_object from a stream of
 * two (a DEF, then a REF) and with dg_read_objects — each time into
 * poisoned memory, and checks that they agree. */
static void decode_all(const dg_desc *d, const dg_buf *b, void *out,
    size_t size, bool (*eq)(const void *, const void *))
{
	uint8_t *a1 = malloc(size), *a2 = malloc(2 * size);
	dg_buf lst;
	dg_writer w;
	dg_reader r;
	uint32_t count;
	assert_non_null(a1);
	assert_non_null(a2);
	memset(out, 0xA5, size);
	OK(dg_decode_object(g.reg, d, b->data, b->len, out, NULL));

	dg_bobj o;
	dg_value v;
	OK(dg_bobj_open(g.reg, b->data, b->len, &o));
	dg_buf_init(&lst);
	dg_writer_init(&w, g.reg, &lst);
	OK(dg_write_list_begin(&w, 2));
	v.kind = DG_OBJECT;
	v.v.obj = o;
	OK(dg_write_value(&w, &v));
	OK(dg_write_value(&w, &v));
	OK(dg_write_end(&w));
	OK(dg_writer_finish(&w));

	dg_reader_init(&r, g.reg, lst.data, lst.len);
	OK(dg_read_begin(&r, DG_LIST, &count));
	assert_int_equal(count, 2);
	for (int i = 0; i < 2; i++) {
		memset(a1, 0x5A, size);
		OK(dg_read_object(&r, d, a1, NULL));
		assert_true(eq(a1, out));
	}
	dg_reader_init(&r, g.reg, lst.data, lst.len);
	OK(dg_read_begin(&r, DG_LIST, &count));
	memset(a2, 0x3C, 2 * size);
	OK(dg_read_objects(&r, d, a2, size, 2, NULL));
	assert_true(eq(a2, out));
	assert_true(eq(a2 + size, out));
	dg_buf_free(&lst);
	free(a1);
	free(a2);
}

/* ========================================================================
 * 1. Fixed-area runs
 * ======================================================================== */

static void test_fixed_runs(void **state)
{
	(void)state;
	static const char *const names[] = { "a", "b", "c", "d", "e", "f", "g",
		"u", "id" };
	runs in, out;
	dg_buf b1, b2;
	dg_buf_init(&b1);
	dg_buf_init(&b2);

	for (int k = 0; k < 4; k++) {
		/* padding bytes of the struct hold garbage: a run that spanned
		 * a gap would put it on the wire */
		memset(&in, 0xEE, sizeof in);
		in.a = 1.5 * k - 7;
		in.b = -0.25 * k;
		in.c = (int16_t)(-300 + 1000 * k);
		in.d = (int8_t)(k - 2);
		in.e = k & 1;
		in.f = !(k & 2);
		in.g = 3.75f * (float)k;
		for (int i = 0; i < 16; i++)
			in.u.b[i] = (uint8_t)(i * 17 + k);
		in.id = -123456789 * k;
		encode(g.runs, &in, &b1);

		dg_value v[9] = { vd(in.a), vd(in.b), vi(DG_I16, in.c),
			vi(DG_I8, in.d), { .kind = DG_BOOL }, { .kind = DG_BOOL },
			{ .kind = DG_FLOAT }, { .kind = DG_UUID }, vi(DG_I64, in.id) };
		v[4].v.b = in.e;
		v[5].v.b = in.f;
		v[6].v.f = in.g;
		v[7].v.uuid = in.u;
		build("Runs", names, v, 9, &b2);
		same_bytes(&b1, &b2, "Runs");

		decode_all(g.runs, &b1, &out, sizeof out, eq_runs);
		assert_true(out.a == in.a && out.b == in.b && out.c == in.c &&
		    out.d == in.d && out.e == in.e && out.f == in.f &&
		    out.g == in.g && out.id == in.id);
		assert_memory_equal(out.u.b, in.u.b, 16);
	}

	/* declared y, x over a struct {x, y}: the wire has y first */
	swap s = { 1.0, 2.0 }, t;
	static const char *const sn[] = { "y", "x" };
	dg_value sv[2] = { vd(2.0), vd(1.0) };
	encode(g.swap, &s, &b1);
	build("Swap", sn, sv, 2, &b2);
	same_bytes(&b1, &b2, "Swap");
	double y;
	memcpy(&y, b1.data + 6, 8); /* OBJ, type id, length: the body */
	assert_true(y == 2.0);
	decode_all(g.swap, &b1, &t, sizeof t, eq_swap);
	assert_true(t.x == 1.0 && t.y == 2.0);

	/* a bool byte other than 0 or 1 inside a fixed area of runs */
	encode(g.runs, &in, &b1);
	b1.data[6 + 19] = 2; /* e: after the run {a b c d} */
	EXPECT(dg_decode_object(g.reg, g.runs, b1.data, b1.len, &out, NULL),
	    DG_ERR_RANGE);

	dg_buf_free(&b1);
	dg_buf_free(&b2);
}

/* ========================================================================
 * 2. Flat descriptors: every varint length, strings, bodies
 * ======================================================================== */

static void check_ints(int64_t a, int32_t b, const char *s, dg_buf *b1,
    dg_buf *b2)
{
	static const char *const names[] = { "a", "b", "s", "raw" };
	ints in = { a, b, S(s), { (const uint8_t *)"\x00\xFF", 2 } }, out;
	dg_value v[4] = { vi(DG_I64, a), vi(DG_I32, b), vs(S(s)),
		{ .kind = DG_BYTES } };
	v[3].v.bytes = in.raw;
	encode(g.ints, &in, b1);
	build("Ints", names, v, 4, b2);
	same_bytes(b1, b2, "Ints");
	decode_all(g.ints, b1, &out, sizeof out, eq_ints);
	assert_true(out.a == a);
	assert_true(out.b == b);
	if (s == NULL) {
		assert_null(out.s.ptr);
	} else {
		assert_int_equal(out.s.len, strlen(s));
		assert_memory_equal(out.s.ptr, s, out.s.len);
	}
	assert_int_equal(out.raw.len, 2);
	assert_memory_equal(out.raw.ptr, "\x00\xFF", 2);

	/* O(1) access reads the same values */
	dg_bobj o;
	dg_value x;
	OK(dg_bobj_open(g.reg, b1->data, b1->len, &o));
	OK(dg_bobj_get_name(&o, "a", &x));
	assert_true(x.v.i == a);
	OK(dg_bobj_get_name(&o, "b", &x));
	assert_true(x.v.i == b);

	/* and a one-field object, whose integer ends the input */
	one o1 = { a }, o2;
	static const char *const on[] = { "v" };
	dg_value ov = vi(DG_I64, a);
	encode(g.one, &o1, b1);
	build("One", on, &ov, 1, b2);
	same_bytes(b1, b2, "One");
	decode_all(g.one, b1, &o2, sizeof o2, eq_one);
	assert_true(o2.v == a);
}

static void test_flat_ints(void **state)
{
	(void)state;
	dg_buf b1, b2;
	dg_buf_init(&b1);
	dg_buf_init(&b2);
	/* both sides of every varint length (7 bits per byte, zigzag) */
	for (int k = 0; k < 64; k++) {
		uint64_t p = UINT64_C(1) << k; /* unsigned: 2^63 wraps, no UB */
		int64_t vals[] = { (int64_t)p, (int64_t)(p - 1), (int64_t)(0 - p),
			(int64_t)(1 - p), (int64_t)(p >> 1) };
		for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
			int32_t b = (int32_t)vals[i];
			check_ints(vals[i], b, "x", &b1, &b2);
		}
	}
	check_ints(INT64_MIN, INT32_MIN, "", &b1, &b2);
	check_ints(INT64_MAX, INT32_MAX, NULL, &b1, &b2);
	check_ints(0, 0, "alice-smith", &b1, &b2);
	dg_buf_free(&b1);
	dg_buf_free(&b2);
}

static void test_flat_lengths(void **state)
{
	(void)state;
	static const char *const names[] = { "a", "b", "c", "d", "e", "f" };
	char text[400];
	dg_buf b1, b2;
	dg_buf_init(&b1);
	dg_buf_init(&b2);
	for (size_t i = 0; i < sizeof text; i++)
		text[i] = (char)('a' + i % 26);

	/* strings across the 1-byte length prefix (127 bytes), bodies across
	 * the 1-byte length (127) and the 1-byte footer (255) */
	for (size_t n = 0; n < 300; n++) {
		char *s = malloc(n + 1);
		assert_non_null(s);
		memcpy(s, text, n);
		s[n] = 0;
		check_ints(-5, 7, s, &b1, &b2);

		six in = { S(s), S("x"), S(NULL), S(""), S(s + n / 2), S("yz") }, out;
		dg_value v[6];
		for (int i = 0; i < 6; i++)
			v[i] = vs((&in.a)[i]);
		encode(g.six, &in, &b1);
		build("Six", names, v, 6, &b2);
		same_bytes(&b1, &b2, "Six");
		decode_all(g.six, &b1, &out, sizeof out, eq_six);
		for (int i = 0; i < 6; i++) {
			const dg_str *x = &(&in.a)[i], *y = &(&out.a)[i];
			assert_true((x->ptr == NULL) == (y->ptr == NULL));
			assert_int_equal(x->len, y->len);
			if (x->len)
				assert_memory_equal(x->ptr, y->ptr, x->len);
		}
		free(s);
	}
	dg_buf_free(&b1);
	dg_buf_free(&b2);
}

/* ========================================================================
 * 3. Hostile bodies of a flat type
 * ======================================================================== */

/* Pair {a i64, s string} with this body: OBJ, type id, length, body. */
static dg_err decode_pair_body(const uint8_t *body, size_t n, pair *out)
{
	uint8_t buf[64];
	uint32_t tid = dg_type_id("Pair");
	assert_true(n < 0x80 && n + 6 <= sizeof buf);
	buf[0] = 0x14;
	memcpy(buf + 1, &tid, 4);
	buf[5] = (uint8_t)n;
	memcpy(buf + 6, body, n);
	dg_err e = dg_decode_object(g.reg, g.pair, buf, n + 6, out, NULL);

	/* the stream reader (a list of one: DEF) says the same */
	uint8_t lst[64] = { 0x0F, 0x01, 0x16 };
	memcpy(lst + 3, &tid, 4);
	lst[7] = (uint8_t)n;
	memcpy(lst + 8, body, n);
	dg_reader r;
	uint32_t count;
	pair o2;
	dg_reader_init(&r, g.reg, lst, n + 8);
	OK(dg_read_begin(&r, DG_LIST, &count));
	dg_err e2 = dg_read_object(&r, g.pair, &o2, NULL);
	if (e2 != e)
		fail_msg("dg_decode_object: %s, dg_read_object: %s", dg_strerror(e),
		    dg_strerror(e2));
	return e;
}

#define BODY(...) ((const uint8_t[]){ __VA_ARGS__ }), \
	sizeof((const uint8_t[]){ __VA_ARGS__ })

static void test_flat_hostile(void **state)
{
	(void)state;
	pair p;
	/* the valid one: a = 5, s = "hi", footer: s at 1 */
	OK(decode_pair_body(BODY(0x0A, 0x03, 'h', 'i', 0x01), &p));
	assert_true(p.a == 5 && p.s.len == 2 && memcmp(p.s.ptr, "hi", 2) == 0);
	/* a's span: a non-minimal varint, one that ends early, one that runs on */
	EXPECT(decode_pair_body(BODY(0x8A, 0x00, 0x03, 'h', 'i', 0x02), &p),
	    DG_ERR_BAD_VARINT);
	EXPECT(decode_pair_body(BODY(0x0A, 0x0A, 0x03, 'h', 'i', 0x02), &p),
	    DG_ERR_BAD_LENGTH);
	EXPECT(decode_pair_body(BODY(0x8A, 0x03, 'h', 'i', 0x01), &p),
	    DG_ERR_TRUNCATED);
	/* 11 bytes of continuation, and a 10th byte above 1 */
	EXPECT(decode_pair_body(BODY(0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
	    0x80, 0x80, 0x80, 0x80, 0x00, 0x03, 'h', 'i', 0x0C), &p),
	    DG_ERR_BAD_VARINT);
	EXPECT(decode_pair_body(BODY(0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
	    0xFF, 0xFF, 0x02, 0x03, 'h', 'i', 0x0A), &p), DG_ERR_BAD_VARINT);
	/* the largest: 10 bytes, INT64_MIN */
	OK(decode_pair_body(BODY(0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
	    0xFF, 0xFF, 0x01, 0x03, 'h', 'i', 0x0A), &p));
	assert_true(p.a == INT64_MIN);
	/* an 8-byte varint with a zero last byte (non-minimal) */
	EXPECT(decode_pair_body(BODY(0x81, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
	    0x00, 0x03, 'h', 'i', 0x08), &p), DG_ERR_BAD_VARINT);
	/* s's span: its length says more, less, null with bytes after, bad UTF-8 */
	EXPECT(decode_pair_body(BODY(0x0A, 0x05, 'h', 'i', 0x01), &p),
	    DG_ERR_TRUNCATED);
	EXPECT(decode_pair_body(BODY(0x0A, 0x02, 'h', 'i', 0x01), &p),
	    DG_ERR_BAD_LENGTH);
	EXPECT(decode_pair_body(BODY(0x0A, 0x00, 'h', 0x01), &p),
	    DG_ERR_BAD_LENGTH);
	EXPECT(decode_pair_body(BODY(0x0A, 0x03, 0xC3, 0x28, 0x01), &p),
	    DG_ERR_UTF8);
	OK(decode_pair_body(BODY(0x0A, 0x00, 0x01), &p));
	assert_null(p.s.ptr);
	/* the footer: s at 0 (a would be empty), at the footer, past it */
	EXPECT(decode_pair_body(BODY(0x0A, 0x03, 'h', 'i', 0x00), &p),
	    DG_ERR_BAD_LENGTH);
	EXPECT(decode_pair_body(BODY(0x0A, 0x03, 'h', 'i', 0x04), &p),
	    DG_ERR_BAD_LENGTH);
	EXPECT(decode_pair_body(BODY(0x0A, 0x03, 'h', 'i', 0x09), &p),
	    DG_ERR_BAD_LENGTH);
	/* a body shorter than its footer */
	EXPECT(decode_pair_body(BODY(0x01), &p), DG_ERR_BAD_LENGTH);
	EXPECT(decode_pair_body(BODY(0), &p), DG_ERR_BAD_LENGTH);
}

/* ========================================================================
 * 4. The top-level fast paths
 * ======================================================================== */

static void test_top_level(void **state)
{
	(void)state;
	ints in = { 1234567, -89, S("top"), { NULL, 0 } }, out;
	dg_buf ref, b;
	dg_writer w;
	dg_buf_init(&ref);
	encode(g.ints, &in, &ref);

	/* a fixed buffer of exactly the object's size, and one byte less */
	uint8_t *m = malloc(ref.len);
	assert_non_null(m);
	dg_buf_init_fixed(&b, m, ref.len);
	dg_writer_init(&w, g.reg, &b);
	OK(dg_write_object(&w, g.ints, &in));
	assert_int_equal(b.len, ref.len);
	assert_memory_equal(m, ref.data, ref.len);
	dg_buf_init_fixed(&b, m, ref.len - 1);
	dg_writer_init(&w, g.reg, &b);
	EXPECT(dg_write_object(&w, g.ints, &in), DG_ERR_NOSPACE);
	EXPECT(dg_writer_finish(&w), DG_ERR_NOSPACE);
	free(m);

	/* a writer in error writes nothing more */
	dg_buf_init(&b);
	dg_writer_init(&w, g.reg, &b);
	in.s = (dg_str){ "\xC3\x28", 2 };
	EXPECT(dg_write_object(&w, g.ints, &in), DG_ERR_UTF8);
	size_t len = b.len;
	in.s = S("top");
	EXPECT(dg_write_object(&w, g.ints, &in), DG_ERR_UTF8);
	assert_int_equal(b.len, len);
	dg_writer_reset(&w);
	dg_buf_reset(&b);
	OK(dg_write_object(&w, g.ints, &in));
	assert_int_equal(b.len, ref.len);
	assert_memory_equal(b.data, ref.data, ref.len);

	/* two top-level objects in a row, read back with a reader */
	OK(dg_write_object(&w, g.ints, &in));
	OK(dg_writer_finish(&w));
	dg_reader r;
	dg_reader_init(&r, g.reg, b.data, b.len);
	for (int i = 0; i < 2; i++) {
		OK(dg_read_object(&r, g.ints, &out, NULL));
		assert_true(out.a == in.a && out.b == in.b);
	}
	assert_int_equal(dg_reader_left(&r), 0);

	/* dg_decode_object: trailing bytes, a short input, a 2-byte length */
	EXPECT(dg_decode_object(g.reg, g.ints, b.data, b.len, &out, NULL),
	    DG_ERR_BAD_LENGTH);
	EXPECT(dg_decode_object(g.reg, g.ints, ref.data, ref.len - 1, &out, NULL),
	    DG_ERR_TRUNCATED);
	char big[200];
	memset(big, 'q', sizeof big);
	in.s = (dg_str){ big, sizeof big };
	encode(g.ints, &in, &ref);
	assert_true(ref.data[5] & 0x80); /* two length bytes */
	memset(&out, 0, sizeof out);
	OK(dg_decode_object(g.reg, g.ints, ref.data, ref.len, &out, NULL));
	assert_int_equal(out.s.len, sizeof big);
	/* another type's object is not mistaken for this one */
	pair pr = { 1, S("p") };
	encode(g.pair, &pr, &ref);
	EXPECT(dg_decode_object(g.reg, g.ints, ref.data, ref.len, &out, NULL),
	    DG_ERR_TYPE_MISMATCH);
	dg_buf_free(&ref);
	dg_buf_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fixed_runs),
		cmocka_unit_test(test_flat_ints),
		cmocka_unit_test(test_flat_lengths),
		cmocka_unit_test(test_flat_hostile),
		cmocka_unit_test(test_top_level),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
