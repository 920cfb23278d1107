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
 *  5. The zero form (FORMAT.md "Zero form"): the exact bytes, the writer's
 *     rule on every subset of zero fields (1- and 2-byte masks), every
 *     object tag's twin, zero-form objects nested in fields, lists and
 *     maps, schema evolution both ways, field access of left-out fields,
 *     objects in the plain form with zero fields (written before the zero
 *     form) still read, and hostile zero-form bodies.
 *
 * The bytes are checked against dg_builder, which writes each field on its
 * own from a dg_value and shares none of the struct paths.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "marshal/marshal.h"

#include <math.h>
#include <stdalign.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expect.h"
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

/* Every fixed kind, and a var field. */
typedef struct fx {
	bool b;
	int8_t i8;
	int16_t i16;
	float f;
	double d;
	dg_uuid u;
	dg_str s;
} fx;
static const dg_field_def fx_fields[] = {
	DG_FIELD(fx, b, DG_BOOL), DG_FIELD(fx, i8, DG_I8),
	DG_FIELD(fx, i16, DG_I16), DG_FIELD(fx, f, DG_FLOAT),
	DG_FIELD(fx, d, DG_DOUBLE), DG_FIELD(fx, u, DG_UUID),
	DG_FIELD(fx, s, DG_STRING),
};

/* Nine fixed fields (a 2-byte mask), none with a var field after them. */
typedef struct nine {
	bool b[8];
	double d;
} nine;
static const dg_field_def nine_fields[] = {
	DG_FIELD(nine, b[0], DG_BOOL), DG_FIELD(nine, b[1], DG_BOOL),
	DG_FIELD(nine, b[2], DG_BOOL), DG_FIELD(nine, b[3], DG_BOOL),
	DG_FIELD(nine, b[4], DG_BOOL), DG_FIELD(nine, b[5], DG_BOOL),
	DG_FIELD(nine, b[6], DG_BOOL), DG_FIELD(nine, b[7], DG_BOOL),
	DG_FIELD(nine, d, DG_DOUBLE),
};

/* Person, as in FORMAT.md. */
typedef struct person {
	int64_t id;
	dg_str name;
	double score;
	int64_t ts;
} person;
static const dg_field_def person_fields[] = {
	DG_FIELD(person, id, DG_I64), DG_FIELD(person, name, DG_STRING),
	DG_FIELD(person, score, DG_DOUBLE), DG_FIELD(person, ts, DG_I64),
};

/* FORMAT.md's list of Lines. */
typedef struct line {
	dg_str sku;
	int32_t qty;
	double price, discount;
} line;
static const dg_field_def line_fields[] = {
	DG_FIELD(line, sku, DG_STRING), DG_FIELD(line, qty, DG_I32),
	DG_FIELD(line, price, DG_DOUBLE), DG_FIELD(line, discount, DG_DOUBLE),
};

/* Zero-form objects nested: an embedded one, a pointer, a list, a map. */
typedef struct pe { dg_str key; person value; } pe;
typedef struct holder {
	person emb;
	person *ptr;
	dg_list list;    /* of person */
	dg_list map;     /* of pe */
	int64_t tail;
} holder;
static const dg_field_def holder_fields[] = {
	DG_FIELD_TYPED(holder, emb, DG_OBJECT, "Person"),
	DG_FIELD_OBJ_PTR(holder, ptr, "Person"),
	DG_FIELD_LIST(holder, list, DG_LIST, DG_OBJECT, "Person"),
	DG_FIELD_LIST(holder, map, DG_MAP, DG_OBJECT, "Person"),
	DG_FIELD(holder, tail, DG_I64),
};

/* Schema evolution: Evo {a i64, x double, s string} in the primary
 * schema, {a, y double, x, s} in a second one (fields by id). */
typedef struct evo1 {
	int64_t a;
	double x;
	dg_str s;
} evo1;
typedef struct evo2 {
	int64_t a;
	double y, x;
	dg_str s;
} evo2;
static const dg_field_def evo1_fields[] = {
	DG_FIELD(evo1, a, DG_I64), DG_FIELD(evo1, x, DG_DOUBLE),
	DG_FIELD(evo1, s, DG_STRING),
};
static const dg_field_def evo2_fields[] = {
	DG_FIELD(evo2, a, DG_I64), DG_FIELD(evo2, y, DG_DOUBLE),
	DG_FIELD(evo2, x, DG_DOUBLE), DG_FIELD(evo2, s, DG_STRING),
};

static struct {
	dg_registry *reg;
	const dg_desc *runs, *swap, *ints, *one, *six, *pair;
	const dg_desc *fx, *nine, *person, *holder, *evo1, *evo2, *line;
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
	g.fx = reg_type("Fx", fx_fields, NF(fx_fields), sizeof(fx));
	g.nine = reg_type("Nine", nine_fields, NF(nine_fields), sizeof(nine));
	g.person = reg_type("Person", person_fields, NF(person_fields),
	    sizeof(person));
	g.holder = reg_type("Holder", holder_fields, NF(holder_fields),
	    sizeof(holder));
	g.evo1 = reg_type("Evo", evo1_fields, NF(evo1_fields), sizeof(evo1));
	g.evo2 = reg_type("Evo", evo2_fields, NF(evo2_fields), sizeof(evo2));
	g.line = reg_type("Line", line_fields, NF(line_fields), sizeof(line));
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

/* zero: the writer's zero-form mode (FORMAT.md "Zero form"); encode and
 * build write with a default writer, encode_z and build_z with it on. */
static void encode_mode(const dg_desc *d, const void *obj, dg_buf *b,
    bool zero)
{
	dg_writer w;
	dg_buf_reset(b);
	dg_writer_init(&w, g.reg, b);
	if (zero)
		dg_writer_set_zero_form(&w, true);
	OK(dg_write_object(&w, d, obj));
	OK(dg_writer_finish(&w));
}

static void encode(const dg_desc *d, const void *obj, dg_buf *b)
{
	encode_mode(d, obj, b, false);
}

static void encode_z(const dg_desc *d, const void *obj, dg_buf *b)
{
	encode_mode(d, obj, b, true);
}

/* The builder's encoding of the same values (fields in declaration order,
 * so it finds the registered schema), into a writer in the given mode. */
static void build_mode(const char *type, const char *const *names,
    const dg_value *vals, uint32_t n, dg_buf *b, bool zero)
{
	dg_builder *bl;
	dg_writer w;
	OK(dg_builder_create(g.reg, type, &bl));
	for (uint32_t i = 0; i < n; i++)
		OK(dg_builder_set(bl, names[i], &vals[i]));
	dg_buf_reset(b);
	dg_writer_init(&w, g.reg, b);
	if (zero)
		dg_writer_set_zero_form(&w, true);
	OK(dg_builder_write(bl, &w));
	OK(dg_writer_finish(&w));
	dg_builder_destroy(bl);
}

static void build(const char *type, const char *const *names,
    const dg_value *vals, uint32_t n, dg_buf *b)
{
	build_mode(type, names, vals, n, b, false);
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

/* ========================================================================
 * 5. The zero form
 * ======================================================================== */

#define EXPECT_BUF(buf, ...)                                    \
	do {                                                        \
		static const uint8_t want_[] = { __VA_ARGS__ };         \
		assert_int_equal((buf)->len, sizeof(want_));            \
		assert_memory_equal((buf)->data, want_, sizeof(want_)); \
	} while (0)

static bool eq_person(const void *x, const void *y)
{
	const person *a = x, *b = y;
	return a->id == b->id && str_eq(a->name, b->name) &&
	    memcmp(&a->score, &b->score, 8) == 0 && a->ts == b->ts;
}

/* FORMAT.md's list of Lines, written by dg_write_objects into a writer in
 * the given mode; read back with dg_read_objects and, one by one, with
 * dg_read_object. */
static void write_lines(dg_buf *b, bool zero)
{
	const line l[3] = { { S("A"), 1, 2.5, 0.0 }, { S("B"), 2, 4.0, 0.25 },
		{ S("A"), 1, 0.0, 0.0 } };
	line got[3];
	dg_writer w;
	dg_reader r;
	uint32_t count;
	dg_buf_reset(b);
	dg_writer_init(&w, g.reg, b);
	if (zero)
		dg_writer_set_zero_form(&w, true);
	OK(dg_write_list_begin(&w, 3));
	OK(dg_write_objects(&w, g.line, l, sizeof l[0], 3));
	OK(dg_write_end(&w));
	OK(dg_writer_finish(&w));
	for (int each = 0; each < 2; each++) {
		memset(got, 0xA5, sizeof got);
		dg_reader_init(&r, g.reg, b->data, b->len);
		OK(dg_read_begin(&r, DG_LIST, &count));
		assert_int_equal(count, 3);
		if (each)
			for (int i = 0; i < 3; i++)
				OK(dg_read_object(&r, g.line, &got[i], NULL));
		else
			OK(dg_read_objects(&r, g.line, got, sizeof got[0], 3, NULL));
		assert_int_equal(dg_reader_left(&r), 0);
		for (int i = 0; i < 3; i++)
			assert_true(str_eq(got[i].sku, l[i].sku) && got[i].qty == l[i].qty &&
			    got[i].price == l[i].price && got[i].discount == l[i].discount);
	}
}

/* A default writer writes the plain form whatever the values: FORMAT.md's
 * examples with their zero fields, byte for byte as before the zero form
 * existed, and every decoder reads them. */
static void test_zero_off_by_default(void **state)
{
	(void)state;
	person p = { 12345678, S("alice-smith"), 0.0, 1767225600000 }, q;
	dg_buf b;
	dg_buf_init(&b);
	/* FORMAT.md's Person with score +0.0: the plain 38 bytes */
	encode(g.person, &p, &b);
	EXPECT_BUF(&b,
	    0x14,                         /* OBJ */
	    0xA0, 0xEB, 0x6E, 0xC3,       /* type id of "Person" */
	    0x20,                         /* body_len 32 */
	    0, 0, 0, 0, 0, 0, 0, 0,       /* score +0.0, written */
	    0x9C, 0x85, 0xE3, 0x0B,       /* id: var 0, at 8 */
	    0x0C, 'a', 'l', 'i', 'c', 'e', '-', 's', 'm', 'i', 't', 'h',
	    0x80, 0xA0, 0xD5, 0xED, 0xEE, 0x66,
	    0x0C, 0x18);                  /* footer: var 1 at 12, var 2 at 24 */
	decode_all(g.person, &b, &q, sizeof q, eq_person);
	assert_true(eq_person(&p, &q));
	dg_bobj o;
	OK(dg_bobj_open(g.reg, b.data, b.len, &o));
	assert_false(o.zero);

	/* FORMAT.md's list of Lines: DEF, REF, REF, 72 bytes */
	write_lines(&b, false);
	EXPECT_BUF(&b, 0x0F, 0x03,
	    0x16, 0x47, 0xF5, 0x08, 0x98, 0x14,
	    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x40,
	    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x41, 0x02, 0x12,
	    0x80, 0x14,
	    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x40,
	    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xD0, 0x3F, 0x02, 0x42, 0x04, 0x12,
	    0x80, 0x14,
	    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x41, 0x02, 0x12);
	OK(dg_validate(g.reg, b.data, b.len));

	/* the mode: dg_writer_init turns it off, dg_writer_reset keeps it */
	dg_writer w;
	dg_buf_reset(&b);
	dg_writer_init(&w, g.reg, &b);
	dg_writer_set_zero_form(&w, true);
	dg_writer_reset(&w);
	OK(dg_write_object(&w, g.person, &p));
	assert_int_equal(b.len, 31);
	dg_writer_set_zero_form(&w, false);
	OK(dg_write_object(&w, g.person, &p));
	assert_int_equal(b.len, 31 + 38);
	dg_writer_set_zero_form(&w, true);
	dg_writer_init(&w, g.reg, &b);
	OK(dg_write_object(&w, g.person, &p));
	assert_int_equal(b.len, 31 + 38 + 38);
	dg_buf_free(&b);
}

static void test_zero_exact(void **state)
{
	(void)state;
	person p = { 12345678, S("alice-smith"), 0.0, 1767225600000 }, q;
	dg_buf b;
	dg_buf_init(&b);
	/* FORMAT.md's Person with score +0.0, the mode on: 31 bytes, not 38 */
	encode_z(g.person, &p, &b);
	EXPECT_BUF(&b,
	    0x18,                         /* OBJ_Z */
	    0xA0, 0xEB, 0x6E, 0xC3,       /* type id of "Person" */
	    0x19,                         /* body_len 25 */
	    0x01,                         /* mask: fixed field 0 (score) left out */
	    0x9C, 0x85, 0xE3, 0x0B,       /* id: var 0, at 1 */
	    0x0C, 'a', 'l', 'i', 'c', 'e', '-', 's', 'm', 'i', 't', 'h',
	    0x80, 0xA0, 0xD5, 0xED, 0xEE, 0x66,
	    0x05, 0x11);                  /* footer: var 1 at 5, var 2 at 17 */
	decode_all(g.person, &b, &q, sizeof q, eq_person);
	assert_true(eq_person(&p, &q));
	dg_bobj o;
	dg_value v;
	OK(dg_bobj_open(g.reg, b.data, b.len, &o));
	assert_true(o.zero);
	OK(dg_bobj_get_name(&o, "score", &v));
	assert_int_equal(v.kind, DG_DOUBLE);
	assert_true(v.v.d == 0.0 && !signbit(v.v.d));
	OK(dg_bobj_get_name(&o, "ts", &v));
	assert_true(v.v.i == 1767225600000);

	/* FORMAT.md's list of Lines: DEF_Z, REF, REF_Z */
	write_lines(&b, true);
	EXPECT_BUF(&b, 0x0F, 0x03,
	    0x1A, 0x47, 0xF5, 0x08, 0x98, 0x0D, 0x02,
	    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x40, 0x02, 0x41, 0x02, 0x0B,
	    0x80, 0x14,
	    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x40,
	    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xD0, 0x3F, 0x02, 0x42, 0x04, 0x12,
	    0xC0, 0x05, 0x03, 0x02, 0x41, 0x02, 0x03);
	OK(dg_validate(g.reg, b.data, b.len));

	/* -0.0 is not all zero bytes: the plain form */
	p.score = -0.0;
	encode_z(g.person, &p, &b);
	assert_int_equal(b.len, 38);
	assert_int_equal(b.data[0], 0x14);
	decode_all(g.person, &b, &q, sizeof q, eq_person);
	assert_true(signbit(q.score));
	dg_buf_free(&b);
}

/* Fx with the fixed fields in `zeros` (bit i: layout field i) at zero,
 * written in the mode zmode: the writer's rule (only with the mode on),
 * the builder's bytes in the same mode, every decoder. */
static void check_fx(unsigned zeros, bool zmode, dg_buf *b1, dg_buf *b2)
{
	static const char *const names[] = { "b", "i8", "i16", "f", "d", "u", "s" };
	static const unsigned width[] = { 1, 1, 2, 4, 8, 16 };
	fx in = { true, -3, 300, 1.5f, -2.25, { { 0 } }, S("fx") }, out;
	for (int i = 0; i < 16; i++)
		in.u.b[i] = (uint8_t)(i + 1);
	if (zeros & 1) in.b = false;
	if (zeros & 2) in.i8 = 0;
	if (zeros & 4) in.i16 = 0;
	if (zeros & 8) in.f = 0.0f;
	if (zeros & 16) in.d = 0.0;
	if (zeros & 32) memset(in.u.b, 0, 16);
	unsigned saved = 0;
	for (int i = 0; i < 6; i++)
		if (zeros >> i & 1)
			saved += width[i];
	bool zero = zmode && saved > 1; /* more than the 1-byte mask */

	dg_value v[7] = { { .kind = DG_BOOL }, vi(DG_I8, in.i8), vi(DG_I16, in.i16),
		{ .kind = DG_FLOAT }, vd(in.d), { .kind = DG_UUID }, vs(in.s) };
	v[0].v.b = in.b;
	v[3].v.f = in.f;
	v[5].v.uuid = in.u;
	encode_mode(g.fx, &in, b1, zmode);
	build_mode("Fx", names, v, 7, b2, zmode);
	same_bytes(b1, b2, "Fx");
	assert_int_equal(b1->data[0], zero ? 0x18 : 0x14);
	/* plain: 32 fixed bytes; zero form: the mask and the others */
	assert_int_equal(b1->len, 6 + (zero ? 1 + 32 - saved : 32) + 3);
	if (zero)
		assert_int_equal(b1->data[6], zeros);
	OK(dg_validate(g.reg, b1->data, b1->len));

	memset(&out, 0x77, sizeof out);
	OK(dg_decode_object(g.reg, g.fx, b1->data, b1->len, &out, NULL));
	assert_true(out.b == in.b && out.i8 == in.i8 && out.i16 == in.i16 &&
	    out.f == in.f && out.d == in.d && str_eq(out.s, in.s));
	assert_memory_equal(out.u.b, in.u.b, 16);
	dg_bobj o;
	dg_value x;
	OK(dg_bobj_open(g.reg, b1->data, b1->len, &o));
	assert_int_equal(o.zero, zero);
	OK(dg_bobj_get_name(&o, "i16", &x));
	assert_int_equal(x.kind, DG_I16);
	assert_true(x.v.i == in.i16);
	OK(dg_bobj_get_name(&o, "u", &x));
	assert_memory_equal(x.v.uuid.b, in.u.b, 16);
	OK(dg_bobj_get_name(&o, "b", &x));
	assert_true(x.kind == DG_BOOL && x.v.b == in.b);
	OK(dg_bobj_get_name(&o, "s", &x));
	assert_true(x.v.str.len == 2);
}

static void test_zero_rule(void **state)
{
	(void)state;
	dg_buf b1, b2;
	dg_buf_init(&b1);
	dg_buf_init(&b2);
	for (unsigned z = 0; z < 64; z++) {
		check_fx(z, false, &b1, &b2);
		check_fx(z, true, &b1, &b2);
	}

	/* nine fixed fields: a 2-byte mask; all fixed, so no footer */
	static const char *const names[] = { "b[0]", "b[1]", "b[2]", "b[3]",
		"b[4]", "b[5]", "b[6]", "b[7]", "d" };
	for (unsigned zm = 0; zm < 2 * 512; zm++) {
		unsigned z = zm % 512;
		bool zmode = zm >= 512;
		nine in, out;
		dg_value v[9];
		unsigned saved = 0;
		for (int i = 0; i < 8; i++) {
			in.b[i] = !(z >> i & 1);
			saved += !in.b[i];
			v[i] = (dg_value){ .kind = DG_BOOL };
			v[i].v.b = in.b[i];
		}
		in.d = z >> 8 ? 0.0 : 7.5;
		saved += z >> 8 ? 8 : 0;
		v[8] = vd(in.d);
		encode_mode(g.nine, &in, &b1, zmode);
		build_mode("Nine", names, v, 9, &b2, zmode);
		same_bytes(&b1, &b2, "Nine");
		bool zero = zmode && saved > 2;
		assert_int_equal(b1.data[0], zero ? 0x18 : 0x14);
		if (zero) {
			assert_int_equal(b1.data[6], z & 0xFF);
			assert_int_equal(b1.data[7], z >> 8);
		}
		memset(&out, 0x55, sizeof out);
		OK(dg_decode_object(g.reg, g.nine, b1.data, b1.len, &out, NULL));
		assert_memory_equal(out.b, in.b, 8);
		assert_true(out.d == in.d);
		OK(dg_validate(g.reg, b1.data, b1.len));
	}
	dg_buf_free(&b1);
	dg_buf_free(&b2);
}

/* Tags of the values a reader meets, in order (containers included). */
static int tags_of(const dg_buf *b, uint8_t *tags, int cap)
{
	dg_reader r;
	dg_value v;
	int n = 0;
	dg_reader_init(&r, g.reg, b->data, b->len);
	while (dg_reader_left(&r) > 0 && n < cap) {
		tags[n++] = *r.r_p;
		OK(dg_read_next(&r, &v));
	}
	return n;
}

static void test_zero_nested(void **state)
{
	(void)state;
	alignas(16) static uint8_t mem[4096];
	person ps[5], pz = { 9, S("p"), 0.0, 10 };
	for (int i = 0; i < 5; i++)
		ps[i] = (person){ i, S("q"), i % 2 ? 1.25 : 0.0, 100 + i };
	pe map[2] = { { S("k0"), ps[1] }, { S("k1"), ps[0] } };
	holder in = { pz, &ps[1], { ps, 5 }, { map, 2 }, -7 }, out;
	dg_buf b;
	dg_arena a;
	dg_buf_init(&b);
	uint8_t t[16];
	int n;
	dg_bobj o;
	dg_value v, x;

	/* a default writer: the plain form at every depth */
	encode(g.holder, &in, &b);
	OK(dg_validate(g.reg, b.data, b.len));
	OK(dg_bobj_open(g.reg, b.data, b.len, &o));
	OK(dg_bobj_get_name(&o, "emb", &v));
	assert_false(v.v.obj.zero);
	assert_int_equal(b.data[0], 0x14);
	OK(dg_bobj_get_name(&o, "list", &v));
	dg_buf lst0 = { (uint8_t *)v.v.coll.raw.ptr, v.v.coll.raw.len, 0, 0 };
	static const uint8_t want0[] = { 0x0F, 0x16, 0x80, 0x80, 0x80, 0x80 };
	assert_int_equal(tags_of(&lst0, t, 16), 6);
	assert_memory_equal(t, want0, 6);
	OK(dg_bobj_get_name(&o, "map", &v));
	dg_buf mp0 = { (uint8_t *)v.v.coll.raw.ptr, v.v.coll.raw.len, 0, 0 };
	static const uint8_t wantm0[] = { 0x12, 0x09, 0x16, 0x09, 0x80 };
	assert_int_equal(tags_of(&mp0, t, 16), 5);
	assert_memory_equal(t, wantm0, 5);
	size_t plain_len = b.len;
	memset(&out, 0xA5, sizeof out);
	dg_arena_init(&a, mem, sizeof mem);
	OK(dg_decode_object(g.reg, g.holder, b.data, b.len, &out, &a));
	assert_true(eq_person(&out.emb, &pz));
	assert_true(eq_person((const person *)out.list.ptr, &ps[0]));

	/* the mode on */
	encode_z(g.holder, &in, &b);
	OK(dg_validate(g.reg, b.data, b.len));
	/* 7 bytes saved by each of emb, list[0], list[2], list[4] and the
	 * map's second value */
	assert_int_equal(plain_len - b.len, 5 * 7);

	/* the embedded object is an OBJ_Z, the pointed-to one an OBJ, the
	 * list DEF_Z, REF, REF_Z, REF, REF_Z, the map's values REF / DEF_Z */
	OK(dg_bobj_open(g.reg, b.data, b.len, &o));
	OK(dg_bobj_get_name(&o, "emb", &v));
	assert_int_equal(v.kind, DG_OBJECT);
	assert_true(v.v.obj.zero);
	OK(dg_bobj_get_name(&v.v.obj, "score", &x));
	assert_true(x.kind == DG_DOUBLE && x.v.d == 0.0);
	OK(dg_bobj_get_name(&o, "ptr", &v));
	assert_false(v.v.obj.zero);
	OK(dg_bobj_get_name(&o, "list", &v));
	assert_int_equal(v.kind, DG_LIST);
	dg_buf lst = { (uint8_t *)v.v.coll.raw.ptr, v.v.coll.raw.len, 0, 0 };
	n = tags_of(&lst, t, 16);
	assert_int_equal(n, 6);
	static const uint8_t want[] = { 0x0F, 0x1A, 0x80, 0xC0, 0x80, 0xC0 };
	assert_memory_equal(t, want, 6);
	OK(dg_bobj_get_name(&o, "map", &v));
	dg_buf mp = { (uint8_t *)v.v.coll.raw.ptr, v.v.coll.raw.len, 0, 0 };
	n = tags_of(&mp, t, 16);
	static const uint8_t wantm[] = { 0x12, 0x09, 0x16, 0x09, 0xC0 };
	assert_int_equal(n, 5);
	assert_memory_equal(t, wantm, 5);

	/* decoded into the struct: copies, then views */
	for (int views = 0; views < 2; views++) {
		memset(&out, 0xA5, sizeof out);
		if (views)
			dg_arena_init_views(&a, mem, sizeof mem);
		else
			dg_arena_init(&a, mem, sizeof mem);
		OK(dg_decode_object(g.reg, g.holder, b.data, b.len, &out, &a));
		assert_true(eq_person(&out.emb, &pz));
		assert_true(eq_person(out.ptr, &ps[1]));
		assert_int_equal(out.list.count, 5);
		for (int i = 0; i < 5; i++)
			assert_true(eq_person((const person *)out.list.ptr + i, &ps[i]));
		assert_int_equal(out.map.count, 2);
		for (int i = 0; i < 2; i++) {
			const pe *e = (const pe *)out.map.ptr + i;
			assert_true(str_eq(e->key, map[i].key));
			assert_true(eq_person(&e->value, &map[i].value));
		}
		assert_true(out.tail == -7);
	}

	/* the array API in a stream: REF and REF_Z mixed in one run */
	dg_writer w;
	dg_reader r;
	uint32_t count;
	person got[5];
	dg_buf_reset(&b);
	dg_writer_init(&w, g.reg, &b);
	dg_writer_set_zero_form(&w, true);
	OK(dg_write_list_begin(&w, 5));
	OK(dg_write_objects(&w, g.person, ps, sizeof ps[0], 5));
	OK(dg_write_end(&w));
	OK(dg_writer_finish(&w));
	n = tags_of(&b, t, 16);
	assert_memory_equal(t, want, 6);
	dg_reader_init(&r, g.reg, b.data, b.len);
	OK(dg_read_begin(&r, DG_LIST, &count));
	memset(got, 0, sizeof got);
	OK(dg_read_objects(&r, g.person, got, sizeof got[0], 5, NULL));
	for (int i = 0; i < 5; i++)
		assert_true(eq_person(&got[i], &ps[i]));
	assert_int_equal(dg_reader_left(&r), 0);
	dg_buf_free(&b);
}

static void test_zero_evolution(void **state)
{
	(void)state;
	dg_buf b;
	dg_buf_init(&b);
	evo1 e1, r1;
	evo2 e2, r2;

	/* the second schema with y = 0 (left out) read as the first */
	e2 = (evo2){ 5, 0.0, 1.5, S("two") };
	encode_z(g.evo2, &e2, &b);
	assert_int_equal(b.data[0], 0x19); /* OBJ_SZ */
	memset(&r1, 0xEE, sizeof r1);
	OK(dg_decode_object(g.reg, g.evo1, b.data, b.len, &r1, NULL));
	assert_true(r1.a == 5 && r1.x == 1.5 && str_eq(r1.s, S("two")));
	/* both left out */
	e2.x = 0.0;
	encode_z(g.evo2, &e2, &b);
	OK(dg_decode_object(g.reg, g.evo1, b.data, b.len, &r1, NULL));
	assert_true(r1.a == 5 && r1.x == 0.0);
	dg_bobj o;
	dg_value v;
	OK(dg_bobj_open(g.reg, b.data, b.len, &o));
	OK(dg_bobj_get_name(&o, "y", &v));
	assert_true(v.kind == DG_DOUBLE && v.v.d == 0.0);

	/* the first schema in zero form read as the second: y absent (zero),
	 * x left out (zero) */
	e1 = (evo1){ -9, 0.0, S("one") };
	encode_z(g.evo1, &e1, &b);
	assert_int_equal(b.data[0], 0x18); /* OBJ_Z */
	memset(&r2, 0xEE, sizeof r2);
	OK(dg_decode_object(g.reg, g.evo2, b.data, b.len, &r2, NULL));
	assert_true(r2.a == -9 && r2.y == 0.0 && r2.x == 0.0 &&
	    str_eq(r2.s, S("one")));
	OK(dg_bobj_open(g.reg, b.data, b.len, &o));
	OK(dg_bobj_get_name(&o, "y", &v));
	assert_int_equal(v.kind, DG_NULL); /* not in this schema */

	/* in a list: DEF_SZ, REF_Z, REF, read with the other schema */
	evo2 list[3] = { { 1, 0.0, 2.0, S("a") }, { 2, 0.0, 0.0, S("b") },
		{ 3, 4.0, 5.0, S("c") } };
	dg_writer w;
	dg_reader r;
	uint32_t count;
	dg_buf_reset(&b);
	dg_writer_init(&w, g.reg, &b);
	dg_writer_set_zero_form(&w, true);
	OK(dg_write_list_begin(&w, 3));
	OK(dg_write_objects(&w, g.evo2, list, sizeof list[0], 3));
	OK(dg_write_end(&w));
	OK(dg_writer_finish(&w));
	uint8_t t[8];
	assert_int_equal(tags_of(&b, t, 8), 4);
	static const uint8_t want[] = { 0x0F, 0x1B, 0xC0, 0x80 };
	assert_memory_equal(t, want, 4);
	dg_reader_init(&r, g.reg, b.data, b.len);
	OK(dg_read_begin(&r, DG_LIST, &count));
	for (int i = 0; i < 3; i++) {
		OK(dg_read_object(&r, g.evo1, &r1, NULL));
		assert_true(r1.a == list[i].a && r1.x == list[i].x &&
		    str_eq(r1.s, list[i].s));
	}
	dg_buf_free(&b);
}

/* Plain objects with zero fields (as written before the zero form) and a
 * zero form that leaves nothing out read as what they say. */
static void test_zero_plain_still_reads(void **state)
{
	(void)state;
	static const uint8_t plain[] = {
		0x14, 0xA0, 0xEB, 0x6E, 0xC3, 0x20,
		0, 0, 0, 0, 0, 0, 0, 0,                     /* score +0.0 */
		0x9C, 0x85, 0xE3, 0x0B,
		0x0C, 'a', 'l', 'i', 'c', 'e', '-', 's', 'm', 'i', 't', 'h',
		0x80, 0xA0, 0xD5, 0xED, 0xEE, 0x66,
		0x0C, 0x18,
	};
	static const uint8_t nothing_out[] = {
		0x18, 0xA0, 0xEB, 0x6E, 0xC3, 0x21,
		0x00,                                       /* mask: none */
		0, 0, 0, 0, 0, 0xA0, 0x58, 0x40,            /* score 98.5 */
		0x9C, 0x85, 0xE3, 0x0B,
		0x0C, 'a', 'l', 'i', 'c', 'e', '-', 's', 'm', 'i', 't', 'h',
		0x80, 0xA0, 0xD5, 0xED, 0xEE, 0x66,
		0x0D, 0x19,
	};
	person q;
	dg_buf b = { (uint8_t *)plain, sizeof plain, 0, 0 };
	OK(dg_validate(g.reg, plain, sizeof plain));
	decode_all(g.person, &b, &q, sizeof q, eq_person);
	assert_true(q.score == 0.0 && q.id == 12345678 && q.ts == 1767225600000);
	b = (dg_buf){ (uint8_t *)nothing_out, sizeof nothing_out, 0, 0 };
	OK(dg_validate(g.reg, nothing_out, sizeof nothing_out));
	decode_all(g.person, &b, &q, sizeof q, eq_person);
	assert_true(q.score == 98.5 && q.id == 12345678);
	/* written again, each in the writer's form: a default writer the
	 * plain form (score 0.0 included), one in zero-form mode the zero form
	 * where it is shorter */
	dg_buf out;
	dg_buf_init(&out);
	encode_z(g.person, &q, &out);
	assert_int_equal(out.len, 38);
	assert_int_equal(out.data[0], 0x14);
	q.score = 0.0;
	encode(g.person, &q, &out);
	assert_int_equal(out.len, sizeof plain);
	assert_memory_equal(out.data, plain, sizeof plain);
	encode_z(g.person, &q, &out);
	assert_int_equal(out.len, 31);
	assert_int_equal(out.data[0], 0x18);
	dg_buf_free(&out);
}

/* dg_decode_object, dg_validate and the pull reader agree on the error. */
static void expect_all(const uint8_t *p, size_t n, const dg_desc *d,
    void *out, dg_err want, const char *what)
{
	dg_err e1 = dg_decode_object(g.reg, d, p, n, out, NULL);
	dg_err e2 = dg_validate(g.reg, p, n);
	dg_reader r;
	dg_value v;
	dg_err e3 = DG_OK;
	dg_reader_init(&r, g.reg, p, n);
	while (e3 == DG_OK && dg_reader_left(&r) > 0) {
		if ((e3 = dg_read_next(&r, &v)) == DG_OK && v.kind == DG_OBJECT) {
			uint32_t nf = dg_desc_nfields(v.v.obj.desc);
			for (uint32_t i = 0; i < nf && e3 == DG_OK; i++) {
				dg_field_info fi;
				dg_value x;
				OK(dg_desc_field(v.v.obj.desc, i, &fi));
				e3 = dg_bobj_get(&v.v.obj, fi.id, &x);
			}
		}
	}
	if (e1 != want || e2 != want || e3 != want)
		fail_msg("%s: dg_decode_object %s, dg_validate %s, reader %s; "
		    "expected %s", what, dg_strerror(e1), dg_strerror(e2),
		    dg_strerror(e3), dg_strerror(want));
}

#define HOSTILE(d, out, want, what, ...) do {                          \
		static const uint8_t in_[] = { __VA_ARGS__ };                  \
		expect_all(in_, sizeof in_, d, out, want, what);               \
	} while (0)

static void test_zero_hostile(void **state)
{
	(void)state;
	person q;
	pair pr;
	fx f;
	/* Pair has no fixed field: no zero form */
	HOSTILE(g.pair, &pr, DG_ERR_BAD_TAG, "OBJ_Z of a type without fixed fields",
	    0x18, 0xD1, 0xF1, 0x23, 0xE3, 0x04, 0x0A, 0x02, 'h', 0x01);
	/* a mask bit past Person's one fixed field (test_zero_exact's bytes
	 * but for that bit) */
	HOSTILE(g.person, &q, DG_ERR_BAD_LENGTH, "mask bit 1 of 1 field",
	    0x18, 0xA0, 0xEB, 0x6E, 0xC3, 0x19, 0x03, 0x9C, 0x85, 0xE3, 0x0B,
	    0x0C, 'a', 'l', 'i', 'c', 'e', '-', 's', 'm', 'i', 't', 'h',
	    0x80, 0xA0, 0xD5, 0xED, 0xEE, 0x66, 0x05, 0x11);
	/* a body without room for its mask */
	HOSTILE(g.person, &q, DG_ERR_BAD_LENGTH, "empty zero-form body",
	    0x18, 0xA0, 0xEB, 0x6E, 0xC3, 0x00);
	/* mask 0: the 8 bytes of score are due, and the footer runs short */
	HOSTILE(g.person, &q, DG_ERR_BAD_LENGTH, "present field past the footer",
	    0x18, 0xA0, 0xEB, 0x6E, 0xC3, 0x06, 0x00, 0x02, 0x02, 0x01, 0x03, 0x04);
	/* a bool kept in the zero form must still be 0 or 1 */
	HOSTILE(g.fx, &f, DG_ERR_RANGE, "bool 2 in a zero-form body",
	    0x18, 0x53, 0x15, 0xD3, 0x4C, 0x23,
	    0x02,                                            /* i8 left out */
	    0x02,                                            /* b = 2 */
	    0x2C, 0x01, 0x00, 0x00, 0xC0, 0x3F,              /* i16, f */
	    0, 0, 0, 0, 0, 0, 0x02, 0xC0,                    /* d */
	    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
	    0x03, 'f', 'x');
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fixed_runs),
		cmocka_unit_test(test_flat_ints),
		cmocka_unit_test(test_flat_lengths),
		cmocka_unit_test(test_flat_hostile),
		cmocka_unit_test(test_top_level),
		cmocka_unit_test(test_zero_off_by_default),
		cmocka_unit_test(test_zero_exact),
		cmocka_unit_test(test_zero_rule),
		cmocka_unit_test(test_zero_nested),
		cmocka_unit_test(test_zero_evolution),
		cmocka_unit_test(test_zero_plain_still_reads),
		cmocka_unit_test(test_zero_hostile),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
