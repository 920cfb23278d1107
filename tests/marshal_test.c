/*
 * marshal_test.c — unit tests of marshal/, the binary codec.
 *
 * Every test asserts behaviour from marshal.h / FORMAT.md: values and C
 * structs round-trip, the encoding is pinned byte by byte in a few places,
 * sorted containers and canonical order, the registry (builds once, conflicts,
 * limits, the registration hook and accepted definitions), binary objects and
 * the builder, DEF/REF scopes, no allocation per operation, allocation
 * failures at every point, hostile input (prefixes, bit flips, one distinct
 * error per defect), writer misuse and concurrent lookups.
 *
 * The ASan/UBSan build of this file is what proves "no crash, no over-read,
 * no leak" for the hostile-input and allocation-failure tests.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "marshal/marshal.h"
#include "marshal/marshal_int.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------
 * Assertion helpers
 * ------------------------------------------------------------------------ */

#include "expect.h"

/* The buffer holds exactly these bytes. */
#define EXPECT_BYTES(buf, ...)                                  \
	do {                                                        \
		static const uint8_t want_[] = { __VA_ARGS__ };         \
		assert_int_equal((buf)->len, sizeof(want_));            \
		assert_memory_equal((buf)->data, want_, sizeof(want_)); \
	} while (0)

/* An independent FNV-1a 32 (FORMAT.md "Ids and schemas"). */
static uint32_t ref_fnv(const void *p, size_t n)
{
	const uint8_t *s = p;
	uint32_t h = 0x811C9DC5u;
	for (size_t i = 0; i < n; i++) {
		h ^= s[i];
		h *= 0x01000193u;
	}
	return h ? h : 1;
}

static uint32_t ref_schema_id(const char *const *names, int n)
{
	uint8_t le[4 * DG_MAX_FIELDS];
	for (int i = 0; i < n; i++) {
		uint32_t id = ref_fnv(names[i], strlen(names[i]));
		le[4 * i] = (uint8_t)id;
		le[4 * i + 1] = (uint8_t)(id >> 8);
		le[4 * i + 2] = (uint8_t)(id >> 16);
		le[4 * i + 3] = (uint8_t)(id >> 24);
	}
	return ref_fnv(le, 4 * (size_t)n);
}

/* memmem is not in C11. */
static uint8_t *find_bytes(uint8_t *hay, size_t n, const void *needle, size_t m)
{
	for (size_t i = 0; i + m <= n; i++)
		if (memcmp(hay + i, needle, m) == 0)
			return hay + i;
	return NULL;
}

static uint32_t ld32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	    (uint32_t)p[3] << 24;
}

/* ------------------------------------------------------------------------
 * Types used throughout
 * ------------------------------------------------------------------------ */

typedef struct person {
	int64_t id;
	dg_str name;
	double score;
	int64_t ts;
} person_t;

static const dg_field_def person_fields[] = {
	DG_FIELD(person_t, id, DG_I64),
	DG_FIELD(person_t, name, DG_STRING),
	DG_FIELD(person_t, score, DG_DOUBLE),
	DG_FIELD(person_t, ts, DG_I64),
};
static const dg_type_def person_def = { "Person", person_fields, 4, sizeof(person_t) };

typedef struct inner {
	int32_t x;
	dg_str tag;
} inner_t;

static const dg_field_def inner_fields[] = {
	DG_FIELD(inner_t, x, DG_I32),
	DG_FIELD(inner_t, tag, DG_STRING),
};
static const dg_type_def inner_def = { "Inner", inner_fields, 2, sizeof(inner_t) };

/* One field of every kind. */
typedef struct wide {
	bool b;
	int8_t i8;
	int16_t i16;
	int32_t i32;
	int64_t i64;
	float f;
	double d;
	dg_str s;
	dg_bytes by;
	dg_uuid u;
	dg_timestamp ts;
	int32_t color;
	dg_array arr;
	dg_array darr;
	dg_raw list;
	dg_raw map;
	dg_raw smap;
	inner_t in;
	dg_raw any;
} wide_t;

static const dg_field_def wide_fields[] = {
	DG_FIELD(wide_t, b, DG_BOOL),
	DG_FIELD(wide_t, i8, DG_I8),
	DG_FIELD(wide_t, i16, DG_I16),
	DG_FIELD(wide_t, i32, DG_I32),
	DG_FIELD(wide_t, i64, DG_I64),
	DG_FIELD(wide_t, f, DG_FLOAT),
	DG_FIELD(wide_t, d, DG_DOUBLE),
	DG_FIELD(wide_t, s, DG_STRING),
	DG_FIELD(wide_t, by, DG_BYTES),
	DG_FIELD(wide_t, u, DG_UUID),
	DG_FIELD(wide_t, ts, DG_TIMESTAMP),
	DG_FIELD_TYPED(wide_t, color, DG_ENUM, "Color"),
	DG_FIELD_ARRAY(wide_t, arr, DG_I32),
	DG_FIELD_ARRAY(wide_t, darr, DG_DOUBLE),
	DG_FIELD(wide_t, list, DG_LIST),
	DG_FIELD(wide_t, map, DG_MAP),
	DG_FIELD(wide_t, smap, DG_SORTED_MAP),
	DG_FIELD_TYPED(wide_t, in, DG_OBJECT, "Inner"),
	DG_FIELD(wide_t, any, DG_ANY),
};
#define WIDE_NFIELDS (sizeof(wide_fields) / sizeof(wide_fields[0]))
static const dg_type_def wide_def = { "Wide", wide_fields, WIDE_NFIELDS, sizeof(wide_t) };

/* Fixed-width fields only: no footer, no var area. */
typedef struct point {
	double x;
	double y;
	bool flag;
	int16_t k;
	int8_t s;
	float f;
	dg_uuid id;
} point_t;

static const dg_field_def point_fields[] = {
	DG_FIELD(point_t, x, DG_DOUBLE),
	DG_FIELD(point_t, y, DG_DOUBLE),
	DG_FIELD(point_t, flag, DG_BOOL),
	DG_FIELD(point_t, k, DG_I16),
	DG_FIELD(point_t, s, DG_I8),
	DG_FIELD(point_t, f, DG_FLOAT),
	DG_FIELD(point_t, id, DG_UUID),
};
static const dg_type_def point_def = { "Point", point_fields, 7, sizeof(point_t) };

/* Schema evolution: the builder adds field "c" to this type. */
typedef struct evo {
	int64_t a;
	dg_str b;
} evo_t;

static const dg_field_def evo_fields[] = {
	DG_FIELD(evo_t, a, DG_I64),
	DG_FIELD(evo_t, b, DG_STRING),
};
static const dg_type_def evo_def = { "Evo", evo_fields, 2, sizeof(evo_t) };

/* Three var fields: footers of 1, 2 and 4 bytes per entry. */
typedef struct tri {
	dg_str a;
	dg_str b;
	dg_str c;
} tri_t;

static const dg_field_def tri_fields[] = {
	DG_FIELD(tri_t, a, DG_STRING),
	DG_FIELD(tri_t, b, DG_STRING),
	DG_FIELD(tri_t, c, DG_STRING),
};
static const dg_type_def tri_def = { "Tri", tri_fields, 3, sizeof(tri_t) };

static struct {
	dg_registry *reg;
	const dg_desc *person, *inner, *wide, *point, *evo, *tri;
	dg_buf raw_list, raw_map, raw_smap, raw_any;
} g;

static const char g_utf8[] = "h\xC3\xA9llo \xE2\x82\xAC \xF0\x9D\x84\x9E"; /* é € 𝄞 */
static const uint8_t g_blob[] = { 0x00, 0xFF, 0x80, 0x00, 0x7F };
static const int32_t g_i32s[] = { INT32_MIN, -1, 0, INT32_MAX };
static const double g_dbls[] = { -0.0, 1e300, 0.1 };

static person_t person_make(int64_t id, const char *name, double score, int64_t ts)
{
	person_t p;
	p.id = id;
	p.name.ptr = name;
	p.name.len = name ? (uint32_t)strlen(name) : 0;
	p.score = score;
	p.ts = ts;
	return p;
}

static void wide_fill(wide_t *w, int seed)
{
	memset(w, 0, sizeof(*w));
	w->b = (seed & 1) != 0;
	w->i8 = (int8_t)(-100 + seed);
	w->i16 = (int16_t)(-30000 + seed);
	w->i32 = INT32_MIN + seed;
	w->i64 = INT64_MAX - seed;
	w->f = seed ? 1.25f * (float)seed : -0.0f;
	w->d = 3.5 + seed;
	w->s.ptr = g_utf8;
	w->s.len = (uint32_t)strlen(g_utf8);
	w->by.ptr = g_blob;
	w->by.len = sizeof(g_blob);
	for (int i = 0; i < 16; i++)
		w->u.b[i] = (uint8_t)(i * 13 + seed);
	w->ts.ms = -1767225600000 - seed;
	w->ts.ns = 999999 - seed;
	w->color = 2 + seed;
	w->arr.ptr = g_i32s;
	w->arr.count = 4;
	w->darr.ptr = g_dbls;
	w->darr.count = 3;
	w->list.ptr = g.raw_list.data;
	w->list.len = (uint32_t)g.raw_list.len;
	w->map.ptr = g.raw_map.data;
	w->map.len = (uint32_t)g.raw_map.len;
	w->smap.ptr = g.raw_smap.data;
	w->smap.len = (uint32_t)g.raw_smap.len;
	w->in.x = -7 - seed;
	w->in.tag.ptr = "inner";
	w->in.tag.len = 5;
	w->any.ptr = g.raw_any.data;
	w->any.len = (uint32_t)g.raw_any.len;
}

static void str_eq(dg_str a, dg_str b)
{
	assert_true((a.ptr == NULL) == (b.ptr == NULL));
	assert_int_equal(a.len, b.len);
	if (a.len)
		assert_memory_equal(a.ptr, b.ptr, a.len);
}

static void bytes_eq(dg_bytes a, dg_bytes b)
{
	assert_true((a.ptr == NULL) == (b.ptr == NULL));
	assert_int_equal(a.len, b.len);
	if (a.len)
		assert_memory_equal(a.ptr, b.ptr, a.len);
}

static void raw_eq(dg_raw a, dg_raw b)
{
	assert_true((a.ptr == NULL) == (b.ptr == NULL));
	assert_int_equal(a.len, b.len);
	if (a.len)
		assert_memory_equal(a.ptr, b.ptr, a.len);
}

static void array_eq(dg_array a, dg_array b, size_t width)
{
	assert_true((a.ptr == NULL) == (b.ptr == NULL));
	assert_int_equal(a.count, b.count);
	if (a.count)
		assert_memory_equal(a.ptr, b.ptr, a.count * width);
}

static void person_eq(const person_t *a, const person_t *b)
{
	assert_int_equal(a->id, b->id);
	str_eq(a->name, b->name);
	assert_memory_equal(&a->score, &b->score, sizeof(double));
	assert_int_equal(a->ts, b->ts);
}

static void wide_eq(const wide_t *a, const wide_t *b)
{
	assert_int_equal(a->b, b->b);
	assert_int_equal(a->i8, b->i8);
	assert_int_equal(a->i16, b->i16);
	assert_int_equal(a->i32, b->i32);
	assert_int_equal(a->i64, b->i64);
	assert_memory_equal(&a->f, &b->f, sizeof(float));
	assert_memory_equal(&a->d, &b->d, sizeof(double));
	str_eq(a->s, b->s);
	bytes_eq(a->by, b->by);
	assert_memory_equal(a->u.b, b->u.b, 16);
	assert_int_equal(a->ts.ms, b->ts.ms);
	assert_int_equal(a->ts.ns, b->ts.ns);
	assert_int_equal(a->color, b->color);
	array_eq(a->arr, b->arr, 4);
	array_eq(a->darr, b->darr, 8);
	raw_eq(a->list, b->list);
	raw_eq(a->map, b->map);
	raw_eq(a->smap, b->smap);
	assert_int_equal(a->in.x, b->in.x);
	str_eq(a->in.tag, b->in.tag);
	raw_eq(a->any, b->any);
}

/* Encodes one object alone (a fresh writer) into b. */
static void enc_object(dg_buf *b, const dg_desc *d, const void *obj)
{
	dg_writer w;
	dg_buf_reset(b);
	dg_writer_init(&w, g.reg, b);
	OK(dg_write_object(&w, d, obj));
	OK(dg_writer_finish(&w));
}

/* A small encoding in a fixed buffer. */
typedef struct enc {
	uint8_t b[64];
	size_t n;
} enc_t;

#define ENC(e, call)                                               \
	do {                                                           \
		enc_t *e_ = (e);                                           \
		dg_buf fb_;                                                \
		dg_writer w_;                                              \
		dg_buf_init_fixed(&fb_, e_->b, sizeof(e_->b));             \
		dg_writer_init(&w_, g.reg, &fb_);                          \
		OK(call);                                                  \
		OK(dg_writer_finish(&w_));                                 \
		e_->n = fb_.len;                                           \
	} while (0)

static void next_is(dg_reader *r, dg_value *v, dg_kind kind)
{
	OK(dg_read_next(r, v));
	assert_int_equal(v->kind, kind);
}

/* dg_bobj_get of every field of o's schema. */
static dg_err walk_fields(const dg_bobj *o)
{
	uint32_t n = dg_desc_nfields(o->desc);
	for (uint32_t i = 0; i < n; i++) {
		dg_field_info fi;
		dg_value v;
		dg_err e = dg_desc_field(o->desc, i, &fi);
		if (e == DG_OK)
			e = dg_bobj_get(o, fi.id, &v);
		if (e != DG_OK)
			return e;
	}
	return DG_OK;
}

/* Reads everything with dg_read_next (opening every field of every object);
 * DG_OK when the input ends cleanly after whole values. */
static dg_err drain(const dg_registry *reg, const uint8_t *p, size_t n,
    uint32_t *nvalues)
{
	dg_reader r;
	dg_value v;
	dg_err e;
	uint32_t count = 0;
	dg_reader_init(&r, reg, p, n);
	for (;;) {
		e = dg_read_next(&r, &v);
		if (e == DG_ERR_STATE && dg_reader_left(&r) == 0) {
			e = DG_OK;
			break;
		}
		if (e != DG_OK)
			break;
		count++;
		if (v.kind == DG_OBJECT && (e = walk_fields(&v.v.obj)) != DG_OK)
			break;
	}
	if (nvalues)
		*nvalues = count;
	return e;
}

/* ------------------------------------------------------------------------
 * Group fixture: one registry with the types above.
 * ------------------------------------------------------------------------ */

static int group_setup(void **state)
{
	dg_writer w;
	person_t p = person_make(7, "pat", 1.5, 1000);

	if (dg_registry_create(&g.reg) != DG_OK)
		return -1;
	if (dg_registry_register(g.reg, &person_def, &g.person) != DG_OK ||
	    dg_registry_register(g.reg, &inner_def, &g.inner) != DG_OK ||
	    dg_registry_register(g.reg, &wide_def, &g.wide) != DG_OK ||
	    dg_registry_register(g.reg, &point_def, &g.point) != DG_OK ||
	    dg_registry_register(g.reg, &evo_def, &g.evo) != DG_OK ||
	    dg_registry_register(g.reg, &tri_def, &g.tri) != DG_OK)
		return -1;

	/* raw values for the container and any fields of Wide */
	dg_buf_init(&g.raw_list);
	dg_writer_init(&w, g.reg, &g.raw_list);
	dg_write_list_begin(&w, 3);
	dg_write_i64(&w, 1);
	dg_write_str(&w, "two", 3);
	dg_write_object(&w, g.person, &p); /* a DEF inside the field's list */
	dg_write_end(&w);
	if (dg_writer_finish(&w) != DG_OK)
		return -1;

	dg_buf_init(&g.raw_map);
	dg_writer_init(&w, g.reg, &g.raw_map);
	dg_write_map_begin(&w, 2);
	dg_write_str(&w, "a", 1);
	dg_write_i64(&w, 1);
	dg_write_str(&w, "b", 1);
	dg_write_list_begin(&w, 0);
	dg_write_end(&w);
	dg_write_end(&w);
	if (dg_writer_finish(&w) != DG_OK)
		return -1;

	dg_buf_init(&g.raw_smap);
	dg_writer_init(&w, g.reg, &g.raw_smap);
	dg_write_sorted_map_begin(&w, 2);
	dg_write_i64(&w, 1);
	dg_write_str(&w, "x", 1);
	dg_write_i64(&w, 2);
	dg_write_null(&w);
	dg_write_end(&w);
	if (dg_writer_finish(&w) != DG_OK)
		return -1;

	dg_buf_init(&g.raw_any);
	dg_writer_init(&w, g.reg, &g.raw_any);
	dg_write_object(&w, g.person, &p);
	if (dg_writer_finish(&w) != DG_OK)
		return -1;
	return 0;
}

static int group_teardown(void **state)
{
	dg_buf_free(&g.raw_list);
	dg_buf_free(&g.raw_map);
	dg_buf_free(&g.raw_smap);
	dg_buf_free(&g.raw_any);
	dg_registry_destroy(g.reg);
	return 0;
}

/* Every test leaves the failure injection off, whatever happened. */
static int test_teardown(void **state)
{
	dgi_alloc_fail_nth(0);
	return 0;
}

/* ========================================================================
 * 1. Round trips: scalars, arrays, containers, objects, C structs
 * ======================================================================== */

static void test_scalars_roundtrip(void **state)
{
	static const char nul3[] = { 'a', 0, 'b' };
	const uint64_t dnan_bits = 0x7FF80000DEADBEEFull;
	const uint32_t fnan_bits = 0x7FC00123u;
	const dg_timestamp ts[] = {
		{ -1, 999999 }, { INT64_MIN, 0 }, { INT64_MAX, 1 }, { 1767225600000, 123456 },
	};
	double dnan;
	float fnan;
	dg_uuid u;
	dg_buf b;
	dg_writer w;
	dg_reader r;
	dg_value v;

	memcpy(&dnan, &dnan_bits, 8);
	memcpy(&fnan, &fnan_bits, 4);
	for (int i = 0; i < 16; i++)
		u.b[i] = (uint8_t)(i * 17 + 1);

	dg_buf_init(&b);
	dg_writer_init(&w, g.reg, &b);
	OK(dg_write_null(&w));
	OK(dg_write_bool(&w, true));
	OK(dg_write_bool(&w, false));
	OK(dg_write_i8(&w, INT8_MIN));
	OK(dg_write_i8(&w, INT8_MAX));
	OK(dg_write_i16(&w, INT16_MIN));
	OK(dg_write_i16(&w, INT16_MAX));
	OK(dg_write_i32(&w, INT32_MIN));
	OK(dg_write_i32(&w, INT32_MAX));
	OK(dg_write_i32(&w, 0));
	OK(dg_write_i64(&w, INT64_MIN));
	OK(dg_write_i64(&w, INT64_MAX));
	OK(dg_write_i64(&w, -1));
	OK(dg_write_float(&w, -0.0f));
	OK(dg_write_float(&w, fnan));
	OK(dg_write_float(&w, -INFINITY));
	OK(dg_write_float(&w, FLT_TRUE_MIN));
	OK(dg_write_double(&w, -0.0));
	OK(dg_write_double(&w, dnan));
	OK(dg_write_double(&w, INFINITY));
	OK(dg_write_double(&w, DBL_TRUE_MIN));
	OK(dg_write_str(&w, "", 0));
	OK(dg_write_str(&w, NULL, 0));
	OK(dg_write_str(&w, g_utf8, strlen(g_utf8)));
	OK(dg_write_str(&w, nul3, 3));
	OK(dg_write_bytes(&w, g_blob, sizeof(g_blob)));
	OK(dg_write_bytes(&w, g_blob, 0));
	OK(dg_write_bytes(&w, NULL, 0));
	OK(dg_write_uuid(&w, &u));
	for (int i = 0; i < 4; i++)
		OK(dg_write_timestamp(&w, ts[i]));
	OK(dg_write_enum(&w, dg_type_id("Color"), 0));
	OK(dg_write_enum(&w, dg_type_id("Color"), INT32_MAX));
	OK(dg_writer_finish(&w));
	OK(dg_validate(g.reg, b.data, b.len));

	dg_reader_init(&r, g.reg, b.data, b.len);
	next_is(&r, &v, DG_NULL);
	next_is(&r, &v, DG_BOOL);
	assert_true(v.v.b);
	next_is(&r, &v, DG_BOOL);
	assert_false(v.v.b);
	next_is(&r, &v, DG_I8);
	assert_int_equal(v.v.i, INT8_MIN);
	next_is(&r, &v, DG_I8);
	assert_int_equal(v.v.i, INT8_MAX);
	next_is(&r, &v, DG_I16);
	assert_int_equal(v.v.i, INT16_MIN);
	next_is(&r, &v, DG_I16);
	assert_int_equal(v.v.i, INT16_MAX);
	next_is(&r, &v, DG_I32);
	assert_int_equal(v.v.i, INT32_MIN);
	next_is(&r, &v, DG_I32);
	assert_int_equal(v.v.i, INT32_MAX);
	next_is(&r, &v, DG_I32);
	assert_int_equal(v.v.i, 0);
	next_is(&r, &v, DG_I64);
	assert_true(v.v.i == INT64_MIN);
	next_is(&r, &v, DG_I64);
	assert_true(v.v.i == INT64_MAX);
	next_is(&r, &v, DG_I64);
	assert_true(v.v.i == -1);
	next_is(&r, &v, DG_FLOAT);
	assert_true(v.v.f == 0.0f && signbit(v.v.f));
	next_is(&r, &v, DG_FLOAT);
	assert_memory_equal(&v.v.f, &fnan_bits, 4); /* NaN payload kept */
	next_is(&r, &v, DG_FLOAT);
	assert_true(isinf(v.v.f) && v.v.f < 0);
	next_is(&r, &v, DG_FLOAT);
	assert_true(v.v.f == FLT_TRUE_MIN);
	next_is(&r, &v, DG_DOUBLE);
	assert_true(v.v.d == 0.0 && signbit(v.v.d));
	next_is(&r, &v, DG_DOUBLE);
	assert_memory_equal(&v.v.d, &dnan_bits, 8);
	next_is(&r, &v, DG_DOUBLE);
	assert_true(isinf(v.v.d) && v.v.d > 0);
	next_is(&r, &v, DG_DOUBLE);
	assert_true(v.v.d == DBL_TRUE_MIN);
	next_is(&r, &v, DG_STRING); /* empty: a string, not null */
	assert_int_equal(v.v.str.len, 0);
	assert_non_null(v.v.str.ptr);
	next_is(&r, &v, DG_NULL); /* the NULL string */
	next_is(&r, &v, DG_STRING);
	assert_int_equal(v.v.str.len, strlen(g_utf8));
	assert_memory_equal(v.v.str.ptr, g_utf8, strlen(g_utf8));
	/* a zero-copy view into the input */
	assert_true((const uint8_t *)v.v.str.ptr > b.data &&
	    (const uint8_t *)v.v.str.ptr < b.data + b.len);
	next_is(&r, &v, DG_STRING);
	assert_int_equal(v.v.str.len, 3);
	assert_memory_equal(v.v.str.ptr, nul3, 3);
	next_is(&r, &v, DG_BYTES);
	assert_int_equal(v.v.bytes.len, sizeof(g_blob));
	assert_memory_equal(v.v.bytes.ptr, g_blob, sizeof(g_blob));
	next_is(&r, &v, DG_BYTES);
	assert_int_equal(v.v.bytes.len, 0);
	next_is(&r, &v, DG_NULL);
	next_is(&r, &v, DG_UUID);
	assert_memory_equal(v.v.uuid.b, u.b, 16);
	for (int i = 0; i < 4; i++) {
		next_is(&r, &v, DG_TIMESTAMP);
		assert_true(v.v.ts.ms == ts[i].ms);
		assert_int_equal(v.v.ts.ns, ts[i].ns);
	}
	next_is(&r, &v, DG_ENUM);
	assert_int_equal(v.v.en.type_id, dg_type_id("Color"));
	assert_int_equal(v.v.en.ordinal, 0);
	next_is(&r, &v, DG_ENUM);
	assert_int_equal(v.v.en.ordinal, INT32_MAX);
	EXPECT(dg_read_next(&r, &v), DG_ERR_STATE); /* end of input */
	assert_int_equal(dg_reader_left(&r), 0);
	dg_buf_free(&b);
}

static void test_typed_readers(void **state)
{
	uint8_t mem[64];
	dg_arena a;
	dg_buf b;
	dg_writer w;
	dg_reader r;
	int64_t i64;
	int32_t i32;
	double d;
	bool bo;
	dg_str s;
	dg_bytes by;
	uint32_t count;

	dg_buf_init(&b);
	dg_writer_init(&w, g.reg, &b);
	dg_write_i8(&w, -5);                   /* read as i64 */
	dg_write_i64(&w, (int64_t)INT32_MAX + 1); /* read as i32: range */
	dg_write_i64(&w, -77);                 /* read as i32 */
	dg_write_float(&w, 0.5f);              /* read as double */
	dg_write_bool(&w, true);
	dg_write_str(&w, "abc", 3);            /* with arena */
	dg_write_str(&w, NULL, 0);             /* null string */
	dg_write_bytes(&w, "\x01\x02", 2);
	dg_write_str(&w, "x", 1);              /* read as i64: mismatch */
	dg_write_list_begin(&w, 1);            /* read as map: mismatch */
	dg_write_null(&w);
	dg_write_end(&w);
	OK(dg_writer_finish(&w));

	dg_arena_init(&a, mem, sizeof(mem));
	dg_reader_init(&r, g.reg, b.data, b.len);
	OK(dg_read_i64(&r, &i64));
	assert_int_equal(i64, -5);
	EXPECT(dg_read_i32(&r, &i32), DG_ERR_RANGE);
	OK(dg_read_i32(&r, &i32));
	assert_int_equal(i32, -77);
	OK(dg_read_double(&r, &d));
	assert_true(d == 0.5);
	OK(dg_read_bool(&r, &bo));
	assert_true(bo);
	OK(dg_read_str(&r, &s, &a));
	assert_int_equal(s.len, 3);
	assert_string_equal(s.ptr, "abc"); /* NUL-terminated copy */
	assert_true((const uint8_t *)s.ptr >= mem && (const uint8_t *)s.ptr < mem + sizeof(mem));
	OK(dg_read_str(&r, &s, NULL));
	assert_null(s.ptr);
	OK(dg_read_bytes(&r, &by, NULL));
	assert_int_equal(by.len, 2);
	assert_memory_equal(by.ptr, "\x01\x02", 2);
	EXPECT(dg_read_i64(&r, &i64), DG_ERR_TYPE_MISMATCH);
	EXPECT(dg_read_begin(&r, DG_MAP, &count), DG_ERR_TYPE_MISMATCH);
	dg_buf_free(&b);

	/* dg_read_begin on the right kind */
	dg_buf_init(&b);
	dg_writer_init(&w, g.reg, &b);
	dg_write_map_begin(&w, 1);
	dg_write_i64(&w, 1);
	dg_write_i64(&w, 2);
	dg_write_end(&w);
	OK(dg_writer_finish(&w));
	dg_reader_init(&r, g.reg, b.data, b.len);
	OK(dg_read_begin(&r, DG_MAP, &count));
	assert_int_equal(count, 1);
	OK(dg_read_i64(&r, &i64));
	assert_int_equal(i64, 1);
	OK(dg_read_i64(&r, &i64));
	assert_int_equal(i64, 2);
	dg_buf_free(&b);
}

static void test_write_value_errors(void **state)
{
	dg_buf b;
	dg_writer w;
	dg_timestamp t = { 0, 1000000 };
	dg_value v;

	dg_buf_init(&b);
#define FRESH() (dg_buf_reset(&b), dg_writer_init(&w, g.reg, &b))
	FRESH();
	EXPECT(dg_write_timestamp(&w, t), DG_ERR_RANGE);
	assert_int_equal(b.len, 0);
	FRESH();
	t.ns = -1;
	EXPECT(dg_write_timestamp(&w, t), DG_ERR_RANGE);
	FRESH();
	EXPECT(dg_write_enum(&w, 1, -1), DG_ERR_RANGE);
	FRESH();
	EXPECT(dg_write_str(&w, "\xC0\x80", 2), DG_ERR_UTF8);
	assert_int_equal(b.len, 0);
	FRESH();
	EXPECT(dg_write_str(&w, "\xED\xA0\x80", 3), DG_ERR_UTF8);
	FRESH();
	EXPECT(dg_write_array(&w, DG_STRING, "x", 1), DG_ERR_INVAL);
	FRESH();
	EXPECT(dg_write_array(&w, DG_I32, NULL, 2), DG_ERR_INVAL);
	FRESH();
	v.kind = DG_I8;
	v.v.i = 128;
	EXPECT(dg_write_value(&w, &v), DG_ERR_RANGE);
	FRESH();
	v.kind = DG_I32;
	v.v.i = (int64_t)INT32_MIN - 1;
	EXPECT(dg_write_value(&w, &v), DG_ERR_RANGE);
	FRESH();
	v.kind = DG_ANY; /* a raw value is checked before it is copied */
	v.v.raw.ptr = (const uint8_t *)"\x09\x02\xC0\x80";
	v.v.raw.len = 4;
	EXPECT(dg_write_value(&w, &v), DG_ERR_UTF8);
	FRESH();
	v.v.raw.ptr = (const uint8_t *)"\x06\x02\x06";
	v.v.raw.len = 3; /* two values, not one */
	EXPECT(dg_write_value(&w, &v), DG_ERR_BAD_LENGTH);
	FRESH();
	v.kind = DG_LIST; /* from dg_read_next: no raw, cannot be copied */
	v.v.coll.count = 0;
	v.v.coll.raw.ptr = NULL;
	v.v.coll.raw.len = 0;
	EXPECT(dg_write_value(&w, &v), DG_ERR_INVAL);
	FRESH();
	v.kind = DG_ANY;
	v.v.raw.ptr = (const uint8_t *)"\x06\x04";
	v.v.raw.len = 2;
	OK(dg_write_value(&w, &v));
	EXPECT_BYTES(&b, 0x06, 0x04);
#undef FRESH
	dg_buf_free(&b);
}

static void test_arrays_roundtrip(void **state)
{
	static const bool bools[] = { true, false, true, true };
	static const int8_t i8s[] = { INT8_MIN, -1, 0, INT8_MAX };
	static const int16_t i16s[] = { INT16_MIN, -2, 0x1234, INT16_MAX };
	static const int32_t i32s[] = { INT32_MIN, -1, 7, INT32_MAX };
	static const int64_t i64s[] = { INT64_MIN, -1, 1, INT64_MAX };
	static const float fs[] = { -0.0f, 1.5f, INFINITY, -3.25f };
	static const double ds[] = { -0.0, 1e300, -INFINITY, 0.1 };
	static const struct {
		dg_kind elem;
		const void *data;
		size_t width;
	} t[] = {
		{ DG_BOOL, bools, 1 }, { DG_I8, i8s, 1 }, { DG_I16, i16s, 2 },
		{ DG_I32, i32s, 4 }, { DG_I64, i64s, 8 }, { DG_FLOAT, fs, 4 },
		{ DG_DOUBLE, ds, 8 },
	};
	dg_buf b;
	dg_writer w;
	dg_reader r;
	dg_value v;

	dg_buf_init(&b);
	dg_writer_init(&w, g.reg, &b);
	for (size_t k = 0; k < 7; k++) {
		OK(dg_write_array(&w, t[k].elem, t[k].data, 4));
		OK(dg_write_array(&w, t[k].elem, t[k].data, 0));  /* empty */
		OK(dg_write_array(&w, t[k].elem, NULL, 0));       /* null */
	}
	OK(dg_writer_finish(&w));
	OK(dg_validate(g.reg, b.data, b.len));

	dg_reader_init(&r, g.reg, b.data, b.len);
	for (size_t k = 0; k < 7; k++) {
		next_is(&r, &v, DG_ARRAY);
		assert_int_equal(v.v.arr.elem, t[k].elem);
		assert_int_equal(v.v.arr.a.count, 4);
		for (uint32_t i = 0; i < 4; i++) {
			switch (t[k].elem) {
			case DG_BOOL:
				assert_int_equal(dg_array_get_int(&v.v.arr.a, DG_BOOL, i), bools[i]);
				break;
			case DG_I8:
				assert_int_equal(dg_array_get_int(&v.v.arr.a, DG_I8, i), i8s[i]);
				break;
			case DG_I16:
				assert_int_equal(dg_array_get_int(&v.v.arr.a, DG_I16, i), i16s[i]);
				break;
			case DG_I32:
				assert_int_equal(dg_array_get_int(&v.v.arr.a, DG_I32, i), i32s[i]);
				break;
			case DG_I64:
				assert_true(dg_array_get_int(&v.v.arr.a, DG_I64, i) == i64s[i]);
				break;
			case DG_FLOAT: {
				double x = dg_array_get_double(&v.v.arr.a, DG_FLOAT, i);
				assert_true(x == fs[i] && !!signbit(x) == !!signbit(fs[i]));
				break;
			}
			default: {
				double x = dg_array_get_double(&v.v.arr.a, DG_DOUBLE, i);
				assert_true(x == ds[i] && !!signbit(x) == !!signbit(ds[i]));
				break;
			}
			}
		}
		if (t[k].elem != DG_BOOL) /* packed little-endian = host order */
			assert_memory_equal(v.v.arr.a.ptr, t[k].data, 4 * t[k].width);
		next_is(&r, &v, DG_ARRAY);
		assert_int_equal(v.v.arr.a.count, 0);
		assert_non_null(v.v.arr.a.ptr);
		next_is(&r, &v, DG_NULL);
	}
	EXPECT(dg_read_next(&r, &v), DG_ERR_STATE);
	dg_buf_free(&b);
}

/* list [ map{"k1": list[1,2], i32 7: sorted_set{1,2,3}}, set{"x","y"},
 *        sorted_map{-5: "neg", 10: list[]}, list[list[null]] ] */
static void write_nested(dg_writer *w)
{
	dg_write_list_begin(w, 4);
	dg_write_map_begin(w, 2);
	dg_write_str(w, "k1", 2);
	dg_write_list_begin(w, 2);
	dg_write_i64(w, 1);
	dg_write_i64(w, 2);
	dg_write_end(w);
	dg_write_i32(w, 7);
	dg_write_sorted_set_begin(w, 3);
	dg_write_i64(w, 1);
	dg_write_i64(w, 2);
	dg_write_i64(w, 3);
	dg_write_end(w);
	dg_write_end(w);
	dg_write_set_begin(w, 2);
	dg_write_str(w, "x", 1);
	dg_write_str(w, "y", 1);
	dg_write_end(w);
	dg_write_sorted_map_begin(w, 2);
	dg_write_i64(w, -5);
	dg_write_str(w, "neg", 3);
	dg_write_i64(w, 10);
	dg_write_list_begin(w, 0);
	dg_write_end(w);
	dg_write_end(w);
	dg_write_list_begin(w, 1);
	dg_write_list_begin(w, 1);
	dg_write_null(w);
	dg_write_end(w);
	dg_write_end(w);
	dg_write_end(w);
}

static void test_nested_containers(void **state)
{
	static const struct {
		dg_kind kind;
		int64_t x; /* container count or integer value */
	} want[] = {
		{ DG_LIST, 4 }, { DG_MAP, 2 }, { DG_STRING, 2 }, { DG_LIST, 2 },
		{ DG_I64, 1 }, { DG_I64, 2 }, { DG_I32, 7 }, { DG_SORTED_SET, 3 },
		{ DG_I64, 1 }, { DG_I64, 2 }, { DG_I64, 3 }, { DG_SET, 2 },
		{ DG_STRING, 1 }, { DG_STRING, 1 }, { DG_SORTED_MAP, 2 },
		{ DG_I64, -5 }, { DG_STRING, 3 }, { DG_I64, 10 }, { DG_LIST, 0 },
		{ DG_LIST, 1 }, { DG_LIST, 1 }, { DG_NULL, 0 },
	};
	dg_buf b;
	dg_writer w;
	dg_reader r;
	dg_value v;
	uint32_t count;

	dg_buf_init(&b);
	dg_writer_init(&w, g.reg, &b);
	write_nested(&w);
	OK(dg_writer_finish(&w));
	OK(dg_validate(g.reg, b.data, b.len));

	dg_reader_init(&r, g.reg, b.data, b.len);
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		next_is(&r, &v, want[i].kind);
		if (want[i].kind >= DG_LIST && want[i].kind <= DG_SORTED_MAP)
			assert_int_equal(v.v.coll.count, want[i].x);
		else if (want[i].kind == DG_STRING)
			assert_int_equal(v.v.str.len, want[i].x);
		else if (want[i].kind != DG_NULL)
			assert_true(v.v.i == want[i].x);
	}
	EXPECT(dg_read_next(&r, &v), DG_ERR_STATE);

	/* skipping whole containers */
	dg_reader_init(&r, g.reg, b.data, b.len);
	OK(dg_read_begin(&r, DG_LIST, &count));
	assert_int_equal(count, 4);
	OK(dg_read_skip(&r));                 /* the map, with everything in it */
	OK(dg_read_begin(&r, DG_SET, &count));
	assert_int_equal(count, 2);
	OK(dg_read_skip(&r));
	OK(dg_read_skip(&r));
	OK(dg_read_skip(&r));                 /* the sorted map */
	next_is(&r, &v, DG_LIST);             /* list[list[null]] */
	OK(dg_read_skip(&r));
	EXPECT(dg_read_next(&r, &v), DG_ERR_STATE);
	dg_buf_free(&b);
}

static void test_struct_roundtrip(void **state)
{
	wide_t in, out;
	dg_buf b;

	dg_buf_init(&b);
	for (int seed = 0; seed < 3; seed++) {
		wide_fill(&in, seed);
		enc_object(&b, g.wide, &in);
		OK(dg_validate(g.reg, b.data, b.len));
		memset(&out, 0xAB, sizeof(out));
		OK(dg_decode_object(g.reg, g.wide, b.data, b.len, &out, NULL));
		wide_eq(&in, &out);
		/* without an arena, strings are views into the input */
		assert_true((const uint8_t *)out.s.ptr > b.data &&
		    (const uint8_t *)out.s.ptr < b.data + b.len);
		assert_true(out.list.ptr > b.data && out.list.ptr < b.data + b.len);

		/* through the reader too */
		dg_reader r;
		memset(&out, 0, sizeof(out));
		dg_reader_init(&r, g.reg, b.data, b.len);
		OK(dg_read_object(&r, g.wide, &out, NULL));
		wide_eq(&in, &out);
		assert_int_equal(dg_reader_left(&r), 0);
	}

	/* nulls: strings, bytes, arrays and containers */
	wide_fill(&in, 1);
	in.s.ptr = NULL;
	in.s.len = 0;
	in.by.ptr = NULL;
	in.by.len = 0;
	in.arr.ptr = NULL;
	in.arr.count = 0;
	in.list.ptr = NULL;
	in.list.len = 0;
	in.any.ptr = NULL;
	in.any.len = 0;
	in.in.tag.ptr = NULL;
	in.in.tag.len = 0;
	enc_object(&b, g.wide, &in);
	memset(&out, 0xAB, sizeof(out));
	OK(dg_decode_object(g.reg, g.wide, b.data, b.len, &out, NULL));
	assert_null(out.s.ptr);
	assert_null(out.by.ptr);
	assert_null(out.arr.ptr);
	assert_int_equal(out.arr.count, 0);
	assert_null(out.in.tag.ptr);
	/* a null container or any field: dg_raw with ptr NULL */
	assert_null(out.list.ptr);
	assert_int_equal(out.list.len, 0);
	assert_null(out.any.ptr);
	assert_int_equal(out.any.len, 0);
	/* ... and it is written back as null */
	{
		dg_buf b2;
		dg_buf_init(&b2);
		enc_object(&b2, g.wide, &out);
		assert_int_equal(b2.len, b.len);
		assert_memory_equal(b2.data, b.data, b.len);
		dg_buf_free(&b2);
	}
	assert_int_equal(out.i64, in.i64);

	/* the any field holding a scalar, a list, and a whole object */
	{
		uint8_t raw_i[] = { 0x06, 0x05 };
		wide_fill(&in, 2);
		in.any.ptr = raw_i;
		in.any.len = 2;
		enc_object(&b, g.wide, &in);
		OK(dg_decode_object(g.reg, g.wide, b.data, b.len, &out, NULL));
		wide_eq(&in, &out);
		in.any = in.list;
		enc_object(&b, g.wide, &in);
		OK(dg_decode_object(g.reg, g.wide, b.data, b.len, &out, NULL));
		wide_eq(&in, &out);
	}

	/* Point: fixed fields only */
	{
		point_t p = { -1.5, 1e-300, true, -12345, -128, 2.5f, { { 0 } } }, q;
		for (int i = 0; i < 16; i++)
			p.id.b[i] = (uint8_t)(0xF0 + i);
		enc_object(&b, g.point, &p);
		memset(&q, 0, sizeof(q));
		OK(dg_decode_object(g.reg, g.point, b.data, b.len, &q, NULL));
		assert_true(q.x == p.x && q.y == p.y && q.flag && q.k == p.k &&
		    q.s == p.s && q.f == p.f);
		assert_memory_equal(q.id.b, p.id.b, 16);
		/* 1 tag + 4 type id + 1 length + 8+8+1+2+1+4+16 fixed bytes */
		assert_int_equal(b.len, 6 + 40);
		assert_int_equal(b.data[5], 40);
	}

	/* a null value zeroes the struct */
	{
		uint8_t nul = 0x00;
		static const wide_t zero;
		memset(&out, 0xAB, sizeof(out));
		OK(dg_decode_object(g.reg, g.wide, &nul, 1, &out, NULL));
		assert_memory_equal(&out, &zero, sizeof(out));
	}

	/* wrong type, wrong kind, trailing bytes */
	{
		person_t p = person_make(1, "a", 1, 1), pq;
		enc_object(&b, g.person, &p);
		EXPECT(dg_decode_object(g.reg, g.wide, b.data, b.len, &out, NULL),
		    DG_ERR_TYPE_MISMATCH);
		OK(dg_buf_reserve(&b, 1));
		b.data[b.len++] = 0x00;
		EXPECT(dg_decode_object(g.reg, g.person, b.data, b.len, &pq, NULL),
		    DG_ERR_BAD_LENGTH);
		uint8_t i64[] = { 0x06, 0x02 };
		EXPECT(dg_decode_object(g.reg, g.person, i64, 2, &pq, NULL),
		    DG_ERR_TYPE_MISMATCH);
	}
	dg_buf_free(&b);
}

static void test_struct_arena(void **state)
{
	alignas(16) uint8_t mem[1024];
	wide_t in, out;
	dg_arena a;
	dg_buf b;
	size_t need;

	dg_buf_init(&b);
	wide_fill(&in, 0);
	enc_object(&b, g.wide, &in);

	/* copies live in the arena, NUL-terminated, and outlive the input */
	uint8_t *copy = malloc(b.len);
	assert_non_null(copy);
	memcpy(copy, b.data, b.len);
	dg_arena_init(&a, mem, sizeof(mem));
	OK(dg_decode_object(g.reg, g.wide, copy, b.len, &out, &a));
	need = a.used;
	assert_true(need > 0);
	memset(copy, 0xEE, b.len);
	free(copy);
	wide_eq(&in, &out);
	assert_true((const uint8_t *)out.s.ptr >= mem && (const uint8_t *)out.s.ptr < mem + need);
	assert_int_equal(out.s.ptr[out.s.len], 0);
	assert_string_equal(out.s.ptr, g_utf8);
	assert_string_equal(out.in.tag.ptr, "inner");
	assert_true(out.list.ptr >= mem && out.list.ptr < mem + need);
	assert_true((const uint8_t *)out.arr.ptr >= mem && (const uint8_t *)out.arr.ptr < mem + need);
	assert_int_equal((uintptr_t)out.arr.ptr % alignof(int32_t), 0);
	assert_int_equal((uintptr_t)out.darr.ptr % alignof(double), 0);
	assert_true(((const double *)out.darr.ptr)[1] == 1e300);

	/* any arena smaller than what the copies take is DG_ERR_NOSPACE */
	for (size_t cap = 0; cap < need; cap++) {
		dg_arena_init(&a, mem, cap);
		EXPECT(dg_decode_object(g.reg, g.wide, b.data, b.len, &out, &a),
		    DG_ERR_NOSPACE);
	}
	dg_arena_init(&a, mem, need);
	OK(dg_decode_object(g.reg, g.wide, b.data, b.len, &out, &a));
	wide_eq(&in, &out);

	/* "copies made into an arena are aligned": also over unaligned memory */
	dg_arena_init(&a, mem + 1, sizeof(mem) - 1);
	OK(dg_decode_object(g.reg, g.wide, b.data, b.len, &out, &a));
	assert_int_equal((uintptr_t)out.arr.ptr % alignof(int32_t), 0);
	assert_int_equal((uintptr_t)out.darr.ptr % alignof(double), 0);
	assert_true(((const int32_t *)out.arr.ptr)[0] == INT32_MIN);
	assert_true(((const double *)out.darr.ptr)[2] == 0.1);
	wide_eq(&in, &out);
	dg_buf_free(&b);
}

/* dg_write_value of a binary object, and objects inside containers. */
static void test_objects_in_values(void **state)
{
	person_t p = person_make(42, "zed", 0.25, -9), q;
	dg_buf one, b;
	dg_writer w;
	dg_reader r;
	dg_value v;
	dg_bobj o;

	dg_buf_init(&one);
	dg_buf_init(&b);
	enc_object(&one, g.person, &p);
	OK(dg_bobj_open(g.reg, one.data, one.len, &o));
	assert_int_equal(dg_bobj_type_id(&o), dg_type_id("Person"));

	/* copy the binary object twice into a list: DEF then REF */
	dg_writer_init(&w, g.reg, &b);
	OK(dg_write_list_begin(&w, 3));
	v.kind = DG_OBJECT;
	v.v.obj = o;
	OK(dg_write_value(&w, &v));
	OK(dg_write_value(&w, &v));
	OK(dg_write_object(&w, g.person, &p));
	OK(dg_write_end(&w));
	OK(dg_writer_finish(&w));
	assert_int_equal(b.data[2], 0x16);                 /* DEF */
	assert_int_equal(b.data[2 + one.len], 0x80);       /* REF 0 */
	assert_int_equal(b.len, 2 + one.len + 2 * (one.len - 4));
	OK(dg_validate(g.reg, b.data, b.len));
	dg_reader_init(&r, g.reg, b.data, b.len);
	next_is(&r, &v, DG_LIST);
	for (int i = 0; i < 3; i++) {
		memset(&q, 0, sizeof(q));
		OK(dg_read_object(&r, g.person, &q, NULL));
		person_eq(&p, &q);
	}
	EXPECT(dg_read_next(&r, &v), DG_ERR_STATE);
	dg_buf_free(&one);
	dg_buf_free(&b);
}

/* ========================================================================
 * 2. Exact bytes: the format cannot drift silently
 * ======================================================================== */

static void test_exact_person(void **state)
{
	person_t p = person_make(12345678, "alice-smith", 98.5, 1767225600000);
	dg_buf b;

	assert_int_equal(dg_type_id("Person"), 0xC36EEBA0u);
	assert_int_equal(dg_type_id("Person"), ref_fnv("Person", 6));
	assert_int_equal(dg_field_id("id"), 0x37386AE0u);
	{
		static const char *const names[] = { "id", "name", "score", "ts" };
		assert_int_equal(dg_desc_schema_id(g.person), 0x5B81F884u);
		assert_int_equal(dg_desc_schema_id(g.person), ref_schema_id(names, 4));
	}
	dg_buf_init(&b);
	enc_object(&b, g.person, &p);
	EXPECT_BYTES(&b,
	    0x14,                                           /* OBJ */
	    0xA0, 0xEB, 0x6E, 0xC3,                         /* type id */
	    0x20,                                           /* body_len 32 */
	    0x00, 0x00, 0x00, 0x00, 0x00, 0xA0, 0x58, 0x40, /* score 98.5 */
	    0x9C, 0x85, 0xE3, 0x0B,                         /* id */
	    0x0C, 'a', 'l', 'i', 'c', 'e', '-', 's', 'm', 'i', 't', 'h',
	    0x80, 0xA0, 0xD5, 0xED, 0xEE, 0x66,             /* ts */
	    0x0C, 0x18);                                    /* footer */
	assert_int_equal(b.len, 38);

	/* two in a list: DEF, then REF with no type id */
	{
		dg_writer w;
		dg_buf l;
		dg_buf_init(&l);
		dg_writer_init(&w, g.reg, &l);
		dg_write_list_begin(&w, 2);
		dg_write_object(&w, g.person, &p);
		dg_write_object(&w, g.person, &p);
		dg_write_end(&w);
		OK(dg_writer_finish(&w));
		assert_int_equal(l.len, 2 + 38 + 34);
		assert_int_equal(l.data[0], 0x0F);
		assert_int_equal(l.data[1], 0x02);
		assert_int_equal(l.data[2], 0x16);
		assert_memory_equal(l.data + 3, b.data + 1, 37);
		assert_int_equal(l.data[40], 0x80);
		assert_memory_equal(l.data + 41, b.data + 5, 33);
		dg_buf_free(&l);
	}
	dg_buf_free(&b);
}

static void test_exact_values(void **state)
{
	dg_buf b;
	dg_writer w;
	dg_uuid u;
	char s128[128];
	dg_buf_init(&b);
#define FRESH() (dg_buf_reset(&b), dg_writer_init(&w, g.reg, &b))
	FRESH(); OK(dg_write_i64(&w, -1));
	EXPECT_BYTES(&b, 0x06, 0x01);
	FRESH(); OK(dg_write_str(&w, "ab", 2));
	EXPECT_BYTES(&b, 0x09, 0x02, 0x61, 0x62);
	FRESH(); OK(dg_write_null(&w));
	EXPECT_BYTES(&b, 0x00);
	FRESH(); OK(dg_write_bool(&w, false)); OK(dg_write_bool(&w, true));
	EXPECT_BYTES(&b, 0x01, 0x02);
	FRESH(); OK(dg_write_i8(&w, -128));
	EXPECT_BYTES(&b, 0x03, 0x80);
	FRESH(); OK(dg_write_i16(&w, -2));
	EXPECT_BYTES(&b, 0x04, 0xFE, 0xFF);
	FRESH(); OK(dg_write_i32(&w, 300));
	EXPECT_BYTES(&b, 0x05, 0xD8, 0x04);
	FRESH(); OK(dg_write_i32(&w, INT32_MIN));
	EXPECT_BYTES(&b, 0x05, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F);
	FRESH(); OK(dg_write_i64(&w, INT64_MIN));
	EXPECT_BYTES(&b, 0x06, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01);
	FRESH(); OK(dg_write_i64(&w, INT64_MAX));
	EXPECT_BYTES(&b, 0x06, 0xFE, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01);
	FRESH(); OK(dg_write_i64(&w, 64));
	EXPECT_BYTES(&b, 0x06, 0x80, 0x01);
	FRESH(); OK(dg_write_float(&w, 1.0f));
	EXPECT_BYTES(&b, 0x07, 0x00, 0x00, 0x80, 0x3F);
	FRESH(); OK(dg_write_double(&w, -0.0));
	EXPECT_BYTES(&b, 0x08, 0, 0, 0, 0, 0, 0, 0, 0x80);
	FRESH(); OK(dg_write_bytes(&w, "\x01\x02", 2));
	EXPECT_BYTES(&b, 0x0A, 0x02, 0x01, 0x02);
	for (int i = 0; i < 16; i++)
		u.b[i] = (uint8_t)i;
	FRESH(); OK(dg_write_uuid(&w, &u));
	EXPECT_BYTES(&b, 0x0B, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
	FRESH(); OK(dg_write_timestamp(&w, (dg_timestamp){ -1, 999999 }));
	EXPECT_BYTES(&b, 0x0C, 0x01, 0xBF, 0x84, 0x3D);
	FRESH(); OK(dg_write_enum(&w, 0x11223344u, 300));
	EXPECT_BYTES(&b, 0x0D, 0x44, 0x33, 0x22, 0x11, 0xAC, 0x02);
	{
		static const bool bo[] = { true, false, true };
		static const int16_t sh[] = { 1, -1 };
		FRESH(); OK(dg_write_array(&w, DG_BOOL, bo, 3));
		EXPECT_BYTES(&b, 0x0E, 0x01, 0x03, 0x01, 0x00, 0x01);
		FRESH(); OK(dg_write_array(&w, DG_I16, sh, 2));
		EXPECT_BYTES(&b, 0x0E, 0x03, 0x02, 0x01, 0x00, 0xFF, 0xFF);
	}
	FRESH();
	dg_write_list_begin(&w, 2);
	dg_write_bool(&w, true);
	dg_write_bool(&w, false);
	OK(dg_write_end(&w));
	EXPECT_BYTES(&b, 0x0F, 0x02, 0x02, 0x01);
	FRESH();
	dg_write_set_begin(&w, 1);
	dg_write_null(&w);
	OK(dg_write_end(&w));
	EXPECT_BYTES(&b, 0x10, 0x01, 0x00);
	FRESH();
	dg_write_sorted_set_begin(&w, 2);
	dg_write_i64(&w, 1);
	dg_write_i64(&w, 2);
	OK(dg_write_end(&w));
	EXPECT_BYTES(&b, 0x11, 0x02, 0x06, 0x02, 0x06, 0x04);
	FRESH();
	dg_write_map_begin(&w, 1);
	dg_write_i64(&w, 1);
	dg_write_str(&w, "a", 1);
	OK(dg_write_end(&w));
	EXPECT_BYTES(&b, 0x12, 0x01, 0x06, 0x02, 0x09, 0x01, 0x61);
	FRESH();
	dg_write_sorted_map_begin(&w, 0);
	OK(dg_write_end(&w));
	EXPECT_BYTES(&b, 0x13, 0x00);
	memset(s128, 'x', sizeof(s128));
	FRESH(); OK(dg_write_str(&w, s128, 128));
	assert_int_equal(b.len, 3 + 128);
	assert_int_equal(b.data[1], 0x80);
	assert_int_equal(b.data[2], 0x01);
#undef FRESH
	dg_buf_free(&b);
}

/* Exported definitions (FORMAT.md "Type definitions"). */
static void test_exact_definition(void **state)
{
	dg_buf b;
	dg_buf_init(&b);
	OK(dg_desc_export(g.person, &b));
	EXPECT_BYTES(&b, 0x01, 0x06, 'P', 'e', 'r', 's', 'o', 'n', 0x04,
	    0x02, 'i', 'd', DG_I64, 0x00, 0, 0, 0, 0,
	    0x04, 'n', 'a', 'm', 'e', DG_STRING, 0x00, 0, 0, 0, 0,
	    0x05, 's', 'c', 'o', 'r', 'e', DG_DOUBLE, 0x00, 0, 0, 0, 0,
	    0x02, 't', 's', DG_I64, 0x00, 0, 0, 0, 0);
	assert_int_equal(DG_I64, 5);
	assert_int_equal(DG_STRING, 8);
	assert_int_equal(DG_DOUBLE, 7);
	dg_buf_free(&b);
}

/* ========================================================================
 * 3. Canonical keys and dg_value_cmp
 * ======================================================================== */

static void write_key(dg_writer *w, const person_t *p)
{
	dg_write_sorted_map_begin(w, 3);
	dg_write_str(w, "a", 1);
	dg_write_object(w, g.person, p);
	dg_write_str(w, "b", 1);
	dg_write_list_begin(w, 2);
	dg_write_object(w, g.person, p);
	dg_write_object(w, g.person, p);
	dg_write_end(w);
	dg_write_str(w, "c", 1);
	dg_write_double(w, 0.1);
	dg_write_end(w);
}

static void test_canonical_equal_bytes(void **state)
{
	person_t p1 = person_make(5, "same", 2.0, 99);
	char name[8] = "same";
	person_t p2 = person_make(5, name, 2.0, 99); /* equal, other memory */
	dg_buf a, b;
	dg_writer w;

	dg_buf_init(&a);
	dg_buf_init(&b);
	dg_writer_init(&w, g.reg, &a);
	write_key(&w, &p1);
	OK(dg_writer_finish(&w));
	/* the second writer first writes something else into its buffer */
	dg_writer_init(&w, g.reg, &b);
	dg_write_list_begin(&w, 1);
	dg_write_object(&w, g.person, &p1);
	dg_write_end(&w);
	OK(dg_writer_finish(&w));
	size_t off = b.len;
	dg_writer_init(&w, g.reg, &b);
	write_key(&w, &p2);
	OK(dg_writer_finish(&w));
	assert_int_equal(b.len - off, a.len);
	assert_memory_equal(b.data + off, a.data, a.len);
	assert_int_equal(dg_value_cmp(a.data, a.len, b.data + off, a.len), 0);
	/* a different key gives different bytes */
	p2.ts = 100;
	dg_buf_reset(&b);
	dg_writer_init(&w, g.reg, &b);
	write_key(&w, &p2);
	OK(dg_writer_finish(&w));
	assert_true(b.len != a.len || memcmp(a.data, b.data, a.len) != 0);
	assert_int_not_equal(dg_value_cmp(a.data, a.len, b.data, b.len), 0);
	dg_buf_free(&a);
	dg_buf_free(&b);
}

static int sgn(int x) { return (x > 0) - (x < 0); }

static void test_value_cmp_order(void **state)
{
	enc_t k[40];
	int n = 0;
	double dnan;
	const uint64_t nan_bits = 0x7FF8000000000001ull;
	memcpy(&dnan, &nan_bits, 8);

	/* strictly increasing in the canonical order (FORMAT.md) */
	ENC(&k[n++], dg_write_null(&w_));
	ENC(&k[n++], dg_write_bool(&w_, false));
	ENC(&k[n++], dg_write_bool(&w_, true));
	ENC(&k[n++], dg_write_i64(&w_, INT64_MIN));
	ENC(&k[n++], dg_write_i32(&w_, -300));
	ENC(&k[n++], dg_write_i8(&w_, -1));
	ENC(&k[n++], dg_write_i64(&w_, 2));        /* numeric, not by encoding */
	ENC(&k[n++], dg_write_i8(&w_, 5));         /* equal numbers: by tag */
	ENC(&k[n++], dg_write_i64(&w_, 5));
	ENC(&k[n++], dg_write_i16(&w_, 300));
	ENC(&k[n++], dg_write_i32(&w_, 70000));
	ENC(&k[n++], dg_write_i64(&w_, INT64_MAX));
	ENC(&k[n++], dg_write_double(&w_, -INFINITY));
	ENC(&k[n++], dg_write_double(&w_, -1.0));
	ENC(&k[n++], dg_write_float(&w_, -0.5f));
	ENC(&k[n++], dg_write_double(&w_, -0.0));
	ENC(&k[n++], dg_write_double(&w_, 0.0));
	ENC(&k[n++], dg_write_double(&w_, DBL_TRUE_MIN));
	ENC(&k[n++], dg_write_float(&w_, 1.5f));
	ENC(&k[n++], dg_write_double(&w_, 1.5));
	ENC(&k[n++], dg_write_double(&w_, 2.0));
	ENC(&k[n++], dg_write_double(&w_, INFINITY));
	ENC(&k[n++], dg_write_double(&w_, dnan));
	ENC(&k[n++], dg_write_str(&w_, "", 0));
	ENC(&k[n++], dg_write_str(&w_, "a", 1));
	ENC(&k[n++], dg_write_str(&w_, "ab", 2));   /* shorter first */
	ENC(&k[n++], dg_write_str(&w_, "b", 1));    /* bytewise before length */
	ENC(&k[n++], dg_write_str(&w_, "z", 1));
	ENC(&k[n++], dg_write_str(&w_, "\xC3\xA9", 2));
	ENC(&k[n++], dg_write_bytes(&w_, "\x00", 1));
	ENC(&k[n++], dg_write_bytes(&w_, "\x00\x00", 2));
	ENC(&k[n++], dg_write_bytes(&w_, "\x01", 1));
	ENC(&k[n++], dg_write_timestamp(&w_, (dg_timestamp){ -1, 0 }));
	ENC(&k[n++], dg_write_timestamp(&w_, (dg_timestamp){ -1, 5 }));
	ENC(&k[n++], dg_write_timestamp(&w_, (dg_timestamp){ 0, 0 }));
	ENC(&k[n++], dg_write_timestamp(&w_, (dg_timestamp){ 0, 999999 }));
	ENC(&k[n++], dg_write_timestamp(&w_, (dg_timestamp){ 1, 0 }));

	for (int i = 0; i < n; i++)
		for (int j = 0; j < n; j++) {
			int c = dg_value_cmp(k[i].b, k[i].n, k[j].b, k[j].n);
			if (sgn(c) != (i > j) - (i < j))
				fail_msg("dg_value_cmp(key %d, key %d) = %d", i, j, c);
		}

	/* the writer and the reader use the same order */
	{
		dg_buf b;
		dg_writer w;
		dg_buf_init(&b);
		dg_writer_init(&w, g.reg, &b);
		OK(dg_write_sorted_set_begin(&w, (uint32_t)n));
		for (int i = 0; i < n; i++) {
			dg_value v;
			v.kind = DG_ANY;
			v.v.raw.ptr = k[i].b;
			v.v.raw.len = (uint32_t)k[i].n;
			OK(dg_write_value(&w, &v));
		}
		OK(dg_write_end(&w));
		OK(dg_writer_finish(&w));
		OK(dg_validate(g.reg, b.data, b.len));
		assert_int_equal(drain(g.reg, b.data, b.len, NULL), DG_OK);
		dg_buf_free(&b);
	}
}

/* ========================================================================
 * 4. Sorted containers
 * ======================================================================== */

static void test_sorted_writer_order(void **state)
{
	dg_buf b;
	dg_writer w;
	dg_buf_init(&b);
#define FRESH() (dg_buf_reset(&b), dg_writer_init(&w, g.reg, &b))
	/* out of order (set) */
	FRESH();
	OK(dg_write_sorted_set_begin(&w, 3));
	OK(dg_write_i64(&w, 1));
	OK(dg_write_i64(&w, 3));
	EXPECT(dg_write_i64(&w, 2), DG_ERR_ORDER);
	size_t len = b.len;
	EXPECT(dg_write_end(&w), DG_ERR_ORDER);      /* sticky */
	EXPECT(dg_write_i64(&w, 4), DG_ERR_ORDER);
	assert_int_equal(b.len, len);                 /* nothing more written */
	EXPECT(dg_writer_finish(&w), DG_ERR_ORDER);
	/* duplicate (set) */
	FRESH();
	OK(dg_write_sorted_set_begin(&w, 2));
	OK(dg_write_str(&w, "k", 1));
	EXPECT(dg_write_str(&w, "k", 1), DG_ERR_ORDER);
	EXPECT(dg_writer_finish(&w), DG_ERR_ORDER);
	/* out of order (map) */
	FRESH();
	OK(dg_write_sorted_map_begin(&w, 2));
	OK(dg_write_str(&w, "b", 1));
	OK(dg_write_i64(&w, 1));
	EXPECT(dg_write_str(&w, "a", 1), DG_ERR_ORDER);
	EXPECT(dg_writer_finish(&w), DG_ERR_ORDER);
	/* duplicate (map) */
	FRESH();
	OK(dg_write_sorted_map_begin(&w, 2));
	OK(dg_write_i64(&w, 7));
	OK(dg_write_i64(&w, 1));
	EXPECT(dg_write_i32(&w, 7), DG_ERR_ORDER); /* numerically equal */
	EXPECT(dg_writer_finish(&w), DG_ERR_ORDER);
	/* a duplicate key that is a container (compared when it ends) */
	FRESH();
	OK(dg_write_sorted_set_begin(&w, 2));
	OK(dg_write_list_begin(&w, 1));
	OK(dg_write_i64(&w, 1));
	OK(dg_write_end(&w));
	OK(dg_write_list_begin(&w, 1));
	OK(dg_write_i64(&w, 1));
	EXPECT(dg_write_end(&w), DG_ERR_ORDER);
	/* values of a sorted map are not keys: any order */
	FRESH();
	OK(dg_write_sorted_map_begin(&w, 3));
	OK(dg_write_i64(&w, 1));
	OK(dg_write_i64(&w, 9));
	OK(dg_write_i64(&w, 2));
	OK(dg_write_i64(&w, 9));
	OK(dg_write_i64(&w, 3));
	OK(dg_write_i64(&w, 0));
	OK(dg_write_end(&w));
	OK(dg_writer_finish(&w));
	OK(dg_validate(g.reg, b.data, b.len));
	/* hash containers keep the caller's order and duplicates */
	FRESH();
	OK(dg_write_set_begin(&w, 2));
	OK(dg_write_i64(&w, 2));
	OK(dg_write_i64(&w, 1));
	OK(dg_write_end(&w));
	OK(dg_writer_finish(&w));
#undef FRESH
	dg_buf_free(&b);
}

static void test_sorted_reader_order(void **state)
{
	/* sorted map {"b": 1, "a": 2} */
	static const uint8_t bad_map[] = { 0x13, 0x02, 0x09, 0x01, 'b', 0x06, 0x02,
		0x09, 0x01, 'a', 0x06, 0x04 };
	static const uint8_t dup_map[] = { 0x13, 0x02, 0x09, 0x01, 'a', 0x06, 0x02,
		0x09, 0x01, 'a', 0x06, 0x04 };
	static const uint8_t good_map[] = { 0x13, 0x02, 0x09, 0x01, 'a', 0x06, 0x02,
		0x09, 0x01, 'b', 0x06, 0x04 };
	static const uint8_t bad_set[] = { 0x11, 0x02, 0x06, 0x04, 0x06, 0x02 };
	/* a list holding an unsorted sorted set, deeper down */
	static const uint8_t nested[] = { 0x0F, 0x01, 0x11, 0x02, 0x06, 0x04, 0x06, 0x02 };
	/* an object whose any field holds an unsorted sorted set */
	dg_reader r;
	dg_value v;

	EXPECT(dg_validate(g.reg, bad_map, sizeof(bad_map)), DG_ERR_ORDER);
	dg_reader_init(&r, g.reg, bad_map, sizeof(bad_map));
	EXPECT(dg_read_next(&r, &v), DG_ERR_ORDER);
	EXPECT(dg_validate(g.reg, dup_map, sizeof(dup_map)), DG_ERR_ORDER);
	dg_reader_init(&r, g.reg, dup_map, sizeof(dup_map));
	EXPECT(dg_read_next(&r, &v), DG_ERR_ORDER);
	OK(dg_validate(g.reg, good_map, sizeof(good_map)));
	OK(drain(g.reg, good_map, sizeof(good_map), NULL));
	EXPECT(dg_validate(g.reg, bad_set, sizeof(bad_set)), DG_ERR_ORDER);
	dg_reader_init(&r, g.reg, bad_set, sizeof(bad_set));
	EXPECT(dg_read_next(&r, &v), DG_ERR_ORDER);
	dg_reader_init(&r, g.reg, bad_set, sizeof(bad_set));
	EXPECT(dg_read_skip(&r), DG_ERR_ORDER);
	EXPECT(dg_validate(g.reg, nested, sizeof(nested)), DG_ERR_ORDER);
	dg_reader_init(&r, g.reg, nested, sizeof(nested));
	next_is(&r, &v, DG_LIST);
	EXPECT(dg_read_next(&r, &v), DG_ERR_ORDER);

	/* inside an object field: writing it is refused, decoding it too */
	{
		wide_t w, out;
		dg_buf b;
		dg_writer wr;
		wide_fill(&w, 0);
		w.any.ptr = bad_set;
		w.any.len = sizeof(bad_set);
		dg_buf_init(&b);
		dg_writer_init(&wr, g.reg, &b);
		EXPECT(dg_write_object(&wr, g.wide, &w), DG_ERR_ORDER);
		/* forge it: encode with a sorted set, then swap the two keys */
		static uint8_t good_set[] = { 0x11, 0x02, 0x06, 0x02, 0x06, 0x04 };
		w.any.ptr = good_set;
		w.any.len = sizeof(good_set);
		enc_object(&b, g.wide, &w);
		uint8_t *at = find_bytes(b.data, b.len, good_set, sizeof(good_set));
		assert_non_null(at);
		at[3] = 0x04;
		at[5] = 0x02;
		EXPECT(dg_validate(g.reg, b.data, b.len), DG_ERR_ORDER);
		dg_bobj o;
		OK(dg_bobj_open(g.reg, b.data, b.len, &o));
		EXPECT(dg_bobj_get_name(&o, "any", &v), DG_ERR_ORDER);
		EXPECT(dg_decode_object(g.reg, g.wide, b.data, b.len, &out, NULL),
		    DG_ERR_ORDER);
		dg_buf_free(&b);
	}
}

/* ========================================================================
 * 5. Registry
 * ======================================================================== */

static const char *const builtin_names[] = {
	"dg.Bool", "dg.I8", "dg.I16", "dg.I32", "dg.I64", "dg.Float", "dg.Double",
	"dg.String", "dg.Bytes", "dg.Uuid", "dg.Timestamp", "dg.Enum", "dg.Array",
	"dg.List", "dg.Set", "dg.SortedSet", "dg.Map", "dg.SortedMap",
};
#define NBUILTIN 18

static void test_builtins_registered(void **state)
{
	dg_registry *reg;
	dg_registry_stats st;
	OK(dg_registry_create(&reg));
	dg_registry_get_stats(reg, &st);
	assert_int_equal(st.builds, NBUILTIN);
	assert_int_equal(st.types, NBUILTIN);
	assert_int_equal(st.schemas, NBUILTIN);
	for (int i = 0; i < NBUILTIN; i++) {
		const dg_desc *d = dg_registry_find(reg, dg_type_id(builtin_names[i]));
		assert_non_null(d);
		assert_true(dg_desc_is_registered(d));
		assert_string_equal(dg_desc_name(d), builtin_names[i]);
		assert_int_equal(dg_desc_type_id(d), dg_type_id(builtin_names[i]));
		assert_int_equal(dg_desc_nfields(d), 0);
		assert_ptr_equal(dg_registry_find_schema(reg, dg_desc_type_id(d),
		    dg_desc_schema_id(d)), d);
	}
	assert_null(dg_registry_find(reg, dg_type_id("Person")));
	/* a built-in is not an object type */
	{
		uint8_t obj[] = { 0x14, 0, 0, 0, 0, 0x00 };
		uint32_t id = dg_type_id("dg.SortedMap");
		memcpy(obj + 1, &id, 4);
		EXPECT(dg_validate(reg, obj, sizeof(obj)), DG_ERR_TYPE_MISMATCH);
	}
	dg_registry_destroy(reg);
}

/* IGNITE-29109: no descriptor is built per operation — only on registration. */
static void test_no_builds_per_op(void **state)
{
	enum { N = 10000 };
	dg_registry_stats s0, s1;
	dg_builder *bl;
	dg_buf b;
	dg_writer w;
	dg_reader r;
	dg_value v;
	uint32_t nv;
	person_t p = person_make(1, "p", 2.5, 3), q;

	dg_buf_init(&b);
	OK(dg_builder_create(g.reg, "Shape", &bl));
	/* warm-up: one of everything (the builder's shape registers here) */
	for (int round = 0; round < 2; round++) {
		if (round == 1)
			dg_registry_get_stats(g.reg, &s0);
		int n = round == 0 ? 1 : N;
		for (int i = 0; i < n; i++) {
			dg_buf_reset(&b);
			dg_writer_init(&w, g.reg, &b);
			OK(dg_write_sorted_map_begin(&w, 2));
			dg_write_i64(&w, i);
			dg_write_str(&w, "v", 1);
			dg_write_i64(&w, i + 1);
			dg_write_object(&w, g.person, &p);
			OK(dg_write_end(&w));
			OK(dg_write_sorted_set_begin(&w, 3));
			dg_write_i64(&w, -i - 1);
			dg_write_i64(&w, i);
			dg_write_i64(&w, i + 1);
			OK(dg_write_end(&w));
			OK(dg_write_list_begin(&w, 2));
			dg_write_object(&w, g.person, &p);
			dg_write_object(&w, g.person, &p);
			OK(dg_write_end(&w));
			OK(dg_write_map_begin(&w, 1));
			dg_write_str(&w, "k", 1);
			dg_write_object(&w, g.person, &p);
			OK(dg_write_end(&w));
			OK(dg_write_object(&w, g.person, &p));
			dg_builder_clear(bl);
			dg_value x;
			x.kind = DG_I64;
			x.v.i = i;
			OK(dg_builder_set(bl, "x", &x));
			x.kind = DG_STRING;
			x.v.str.ptr = "shape";
			x.v.str.len = 5;
			OK(dg_builder_set(bl, "y", &x));
			OK(dg_builder_write(bl, &w));
			OK(dg_writer_finish(&w));

			OK(dg_validate(g.reg, b.data, b.len));
			OK(drain(g.reg, b.data, b.len, &nv));
			assert_int_equal(nv, 1 + 4 + 1 + 3 + 1 + 2 + 1 + 2 + 1 + 1);
			dg_reader_init(&r, g.reg, b.data, b.len);
			OK(dg_read_skip(&r));
			OK(dg_read_skip(&r));
			next_is(&r, &v, DG_LIST);
			OK(dg_read_object(&r, g.person, &q, NULL));
			OK(dg_read_object(&r, g.person, &q, NULL));
			OK(dg_read_skip(&r));
			OK(dg_read_object(&r, g.person, &q, NULL));
			next_is(&r, &v, DG_OBJECT);
			OK(dg_bobj_get_name(&v.v.obj, "x", &x));
			assert_true(x.v.i == i);
		}
	}
	dg_registry_get_stats(g.reg, &s1);
	assert_int_equal(s1.builds, s0.builds);
	assert_int_equal(s1.types, s0.types);
	assert_int_equal(s1.schemas, s0.schemas);
	/* the built-ins used on every container are registered descriptors */
	assert_true(dg_desc_is_registered(dg_registry_find(g.reg, dg_type_id("dg.SortedMap"))));
	assert_true(dg_desc_is_registered(dg_registry_find(g.reg, dg_type_id("dg.SortedSet"))));
	assert_true(dg_desc_is_registered(dg_registry_find(g.reg, dg_type_id("dg.List"))));
	assert_true(dg_desc_is_registered(dg_registry_find(g.reg, dg_type_id("dg.Map"))));
	dg_builder_destroy(bl);
	dg_buf_free(&b);
}

static void test_register_idempotent(void **state)
{
	dg_registry *reg;
	dg_registry_stats s0, s1;
	const dg_desc *d1, *d2;
	dg_field_info fi;

	OK(dg_registry_create(&reg));
	dg_registry_get_stats(reg, &s0);
	OK(dg_registry_register(reg, &person_def, &d1));
	OK(dg_registry_register(reg, &person_def, &d2));
	assert_ptr_equal(d1, d2);
	dg_registry_get_stats(reg, &s1);
	assert_int_equal(s1.builds, s0.builds + 1);
	assert_int_equal(s1.types, s0.types + 1);
	assert_int_equal(s1.schemas, s0.schemas + 1);
	assert_ptr_equal(dg_registry_find(reg, dg_type_id("Person")), d1);
	assert_true(dg_desc_is_registered(d1));
	OK(dg_registry_register(reg, &person_def, NULL)); /* out is optional */

	/* accessors: fields in declaration order */
	assert_string_equal(dg_desc_name(d1), "Person");
	assert_int_equal(dg_desc_nfields(d1), 4);
	static const dg_kind kinds[] = { DG_I64, DG_STRING, DG_DOUBLE, DG_I64 };
	for (uint32_t i = 0; i < 4; i++) {
		OK(dg_desc_field(d1, i, &fi));
		assert_string_equal(fi.name, person_fields[i].name);
		assert_int_equal(fi.id, dg_field_id(person_fields[i].name));
		assert_int_equal(fi.kind, kinds[i]);
	}
	EXPECT(dg_desc_field(d1, 4, &fi), DG_ERR_INVAL);

	/* an unbound definition, twice */
	{
		static const dg_field_def f[] = {
			{ "a", DG_I64, DG_NULL, NULL, DG_UNBOUND, 0 },
			{ "e", DG_ENUM, DG_NULL, "Color", DG_UNBOUND, 0 },
			{ "v", DG_ARRAY, DG_FLOAT, NULL, DG_UNBOUND, 0 },
		};
		dg_type_def t = { "Loose", f, 3, 0 };
		OK(dg_registry_register(reg, &t, &d1));
		OK(dg_registry_register(reg, &t, &d2));
		assert_ptr_equal(d1, d2);
		OK(dg_desc_field(d1, 1, &fi));
		assert_int_equal(fi.type_id, dg_type_id("Color"));
		OK(dg_desc_field(d1, 2, &fi));
		assert_int_equal(fi.elem, DG_FLOAT);
		dg_registry_get_stats(reg, &s0);
		assert_int_equal(s0.builds, s1.builds + 1);
	}
	dg_registry_destroy(reg);
}

/* Registers def; expects err, and that nothing new became registered. */
static void expect_register_fails(dg_registry *reg, const dg_type_def *def,
    dg_err err, int line)
{
	dg_registry_stats s0, s1;
	const dg_desc *d = (const dg_desc *)&d;
	const dg_desc *before = def->name ? dg_registry_find(reg, dg_type_id(def->name)) : NULL;
	dg_registry_get_stats(reg, &s0);
	dg_err e = dg_registry_register(reg, def, &d);
	if (e != err)
		fail_msg("line %d: register %s returned %s, expected %s", line,
		    def->name ? def->name : "(null)", dg_strerror(e), dg_strerror(err));
	dg_registry_get_stats(reg, &s1);
	assert_int_equal(s1.types, s0.types);
	assert_int_equal(s1.schemas, s0.schemas);
	if (def->name)
		assert_ptr_equal(dg_registry_find(reg, dg_type_id(def->name)), before);
}
#define REG_FAILS(reg, def, err) expect_register_fails((reg), (def), (err), __LINE__)

static void test_register_errors(void **state)
{
	typedef struct s16 { int64_t a; int32_t b; char c; } s16_t;
	typedef struct outer { char c; inner_t in; } outer_t;
	dg_registry *reg;
	const dg_desc *d;
	OK(dg_registry_create(&reg));
	OK(dg_registry_register(reg, &person_def, NULL));

#define ONE(tname_, fname_, kind_, elem_, tref_, off_, size_)                \
	do {                                                                    \
		f1.name = (fname_); f1.kind = (kind_); f1.elem = (elem_);           \
		f1.type_name = (tref_); f1.offset = (off_); f1.flags = 0;           \
		t1.name = (tname_); t1.fields = &f1; t1.nfields = 1;                \
		t1.struct_size = (size_);                                           \
	} while (0)
	dg_field_def f1;
	dg_type_def t1;

	/* bad offsets, misaligned, struct too small */
	ONE("Bad", "a", DG_I64, DG_NULL, NULL, 4, sizeof(s16_t));
	REG_FAILS(reg, &t1, DG_ERR_INVAL);
	ONE("Bad", "a", DG_I32, DG_NULL, NULL, 2, sizeof(s16_t));
	REG_FAILS(reg, &t1, DG_ERR_INVAL);
	ONE("Bad", "a", DG_STRING, DG_NULL, NULL, 12, sizeof(s16_t));
	REG_FAILS(reg, &t1, DG_ERR_INVAL);
	ONE("Bad", "a", DG_I64, DG_NULL, NULL, 16, sizeof(s16_t));
	REG_FAILS(reg, &t1, DG_ERR_INVAL);
	ONE("Bad", "a", DG_I64, DG_NULL, NULL, 8, 12);
	REG_FAILS(reg, &t1, DG_ERR_INVAL);
	ONE("Bad", "a", DG_I64, DG_NULL, NULL, 4096, sizeof(s16_t));
	REG_FAILS(reg, &t1, DG_ERR_INVAL);
	ONE("Bad", "a", DG_I64, DG_NULL, NULL, DG_UNBOUND, sizeof(s16_t));
	REG_FAILS(reg, &t1, DG_ERR_INVAL);
	ONE("Bad", "a", DG_STRING, DG_NULL, NULL, 0, sizeof(dg_str) - 1);
	REG_FAILS(reg, &t1, DG_ERR_INVAL);
	/* an embedded struct must be aligned for its own fields too */
	OK(dg_registry_register(reg, &inner_def, NULL));
	ONE("Bad", "in", DG_OBJECT, DG_NULL, "Inner", 1, sizeof(outer_t));
	REG_FAILS(reg, &t1, DG_ERR_INVAL);
	ONE("Bad", "in", DG_OBJECT, DG_NULL, "Inner", offsetof(outer_t, in), sizeof(outer_t) - 1);
	REG_FAILS(reg, &t1, DG_ERR_INVAL);
	ONE("Good", "in", DG_OBJECT, DG_NULL, "Inner", offsetof(outer_t, in), sizeof(outer_t));
	OK(dg_registry_register(reg, &t1, &d));
	/* bad kinds and names */
	ONE("Bad", "a", DG_NULL, DG_NULL, NULL, DG_UNBOUND, 0);
	REG_FAILS(reg, &t1, DG_ERR_INVAL);
	ONE("Bad", "a", DG_KIND__COUNT, DG_NULL, NULL, DG_UNBOUND, 0);
	REG_FAILS(reg, &t1, DG_ERR_INVAL);
	ONE("Bad", "a", DG_ARRAY, DG_STRING, NULL, DG_UNBOUND, 0);
	REG_FAILS(reg, &t1, DG_ERR_INVAL);
	ONE("Bad", "a", DG_ARRAY, DG_NULL, NULL, DG_UNBOUND, 0);
	REG_FAILS(reg, &t1, DG_ERR_INVAL);
	ONE("Bad", "a", DG_I32, DG_I32, NULL, DG_UNBOUND, 0);
	REG_FAILS(reg, &t1, DG_ERR_INVAL);
	ONE("Bad", "a", DG_ENUM, DG_NULL, NULL, DG_UNBOUND, 0);
	REG_FAILS(reg, &t1, DG_ERR_INVAL);
	ONE("Bad", "", DG_I32, DG_NULL, NULL, DG_UNBOUND, 0);
	REG_FAILS(reg, &t1, DG_ERR_INVAL);
	ONE("Bad", NULL, DG_I32, DG_NULL, NULL, DG_UNBOUND, 0);
	REG_FAILS(reg, &t1, DG_ERR_INVAL);
	ONE("Bad", "\xC0\x80", DG_I32, DG_NULL, NULL, DG_UNBOUND, 0);
	REG_FAILS(reg, &t1, DG_ERR_INVAL);
	ONE("", "a", DG_I32, DG_NULL, NULL, DG_UNBOUND, 0);
	REG_FAILS(reg, &t1, DG_ERR_INVAL);
	ONE("B\xFF", "a", DG_I32, DG_NULL, NULL, DG_UNBOUND, 0);
	REG_FAILS(reg, &t1, DG_ERR_INVAL);
	ONE(NULL, "a", DG_I32, DG_NULL, NULL, DG_UNBOUND, 0);
	REG_FAILS(reg, &t1, DG_ERR_INVAL);
	/* DG_OBJECT of an unregistered type, or of a type with no C struct */
	ONE("Bad", "o", DG_OBJECT, DG_NULL, "Nope", 0, sizeof(inner_t));
	REG_FAILS(reg, &t1, DG_ERR_UNKNOWN_TYPE);
	ONE("Unb", "x", DG_I32, DG_NULL, NULL, DG_UNBOUND, 0);
	OK(dg_registry_register(reg, &t1, NULL));
	ONE("Bad", "o", DG_OBJECT, DG_NULL, "Unb", 0, sizeof(inner_t));
	REG_FAILS(reg, &t1, DG_ERR_UNKNOWN_TYPE);

	/* conflicts: same field name with another kind */
	{
		dg_field_def f[] = {
			{ "id", DG_STRING, DG_NULL, NULL, DG_UNBOUND, 0 },
		};
		dg_type_def t = { "Person", f, 1, 0 };
		REG_FAILS(reg, &t, DG_ERR_CONFLICT);
		f[0].kind = DG_I32; /* I32 is not I64 */
		REG_FAILS(reg, &t, DG_ERR_CONFLICT);
		f[0].kind = DG_I64; /* a compatible subset: a new schema */
		OK(dg_registry_register(reg, &t, &d));
		assert_ptr_not_equal(d, dg_registry_find(reg, dg_type_id("Person")));
	}
	/* the same fields bound to another layout */
	{
		typedef struct p2 { dg_str name; int64_t id; double score; int64_t ts; } p2_t;
		dg_field_def f[] = {
			DG_FIELD(p2_t, id, DG_I64), DG_FIELD(p2_t, name, DG_STRING),
			DG_FIELD(p2_t, score, DG_DOUBLE), DG_FIELD(p2_t, ts, DG_I64),
		};
		dg_type_def t = { "Person", f, 4, sizeof(p2_t) };
		REG_FAILS(reg, &t, DG_ERR_CONFLICT);
	}
	/* duplicate field names, and two names with one field id */
	{
		dg_field_def f[] = {
			{ "a", DG_I64, DG_NULL, NULL, DG_UNBOUND, 0 },
			{ "a", DG_I64, DG_NULL, NULL, DG_UNBOUND, 0 },
		};
		dg_type_def t = { "Dup", f, 2, 0 };
		REG_FAILS(reg, &t, DG_ERR_CONFLICT);
		f[1].kind = DG_STRING;
		REG_FAILS(reg, &t, DG_ERR_CONFLICT);
		assert_int_equal(dg_field_id("T7d18d"), dg_field_id("Tb7038"));
		f[0].name = "T7d18d";
		f[1].name = "Tb7038";
		REG_FAILS(reg, &t, DG_ERR_CONFLICT);
		/* ... also across two schemas of one type */
		t.nfields = 1;
		OK(dg_registry_register(reg, &t, NULL));
		f[0] = f[1];
		f[0].kind = DG_I64;
		REG_FAILS(reg, &t, DG_ERR_CONFLICT);
	}
	/* two type names with one type id are refused, never confused */
	{
		dg_field_def f[] = { { "a", DG_I64, DG_NULL, NULL, DG_UNBOUND, 0 } };
		dg_type_def t = { "T7d18d", f, 1, 0 };
		assert_int_equal(dg_type_id("T7d18d"), dg_type_id("Tb7038"));
		OK(dg_registry_register(reg, &t, &d));
		t.name = "Tb7038";
		REG_FAILS(reg, &t, DG_ERR_CONFLICT);
		assert_string_equal(dg_desc_name(dg_registry_find(reg, dg_type_id("Tb7038"))),
		    "T7d18d");
	}
#undef ONE
	dg_registry_destroy(reg);
}

static void test_register_limits(void **state)
{
	static dg_field_def f[DG_MAX_FIELDS + 1];
	static char names[DG_MAX_FIELDS + 1][8];
	dg_registry *reg;
	const dg_desc *d;
	OK(dg_registry_create(&reg));
	for (int i = 0; i <= DG_MAX_FIELDS; i++) {
		snprintf(names[i], sizeof(names[i]), "f%d", i);
		f[i].name = names[i];
		f[i].kind = (i % 3 == 0) ? DG_BOOL : (i % 3 == 1) ? DG_I64 : DG_STRING;
		f[i].elem = DG_NULL;
		f[i].type_name = NULL;
		f[i].offset = DG_UNBOUND;
	}
	dg_type_def t = { "Many", f, DG_MAX_FIELDS + 1, 0 };
	REG_FAILS(reg, &t, DG_ERR_LIMIT);
	t.nfields = DG_MAX_FIELDS;
	OK(dg_registry_register(reg, &t, &d));
	assert_int_equal(dg_desc_nfields(d), DG_MAX_FIELDS);

	/* a 256-field object through the builder, read back by name */
	{
		dg_builder *b;
		dg_buf buf;
		dg_writer w;
		dg_bobj o;
		dg_value v;
		OK(dg_builder_create(reg, "Many", &b));
		for (int i = 0; i < DG_MAX_FIELDS; i++) {
			if (i % 3 == 0) {
				v.kind = DG_BOOL;
				v.v.b = (i & 1) != 0;
			} else if (i % 3 == 1) {
				v.kind = DG_I64;
				v.v.i = (int64_t)i * 1000003;
			} else {
				v.kind = DG_STRING;
				v.v.str.ptr = names[i];
				v.v.str.len = (uint32_t)strlen(names[i]);
			}
			OK(dg_builder_set(b, names[i], &v));
		}
		v.kind = DG_I64;
		EXPECT(dg_builder_set(b, names[DG_MAX_FIELDS], &v), DG_ERR_LIMIT);
		dg_buf_init(&buf);
		dg_writer_init(&w, reg, &buf);
		OK(dg_builder_write(b, &w));
		OK(dg_writer_finish(&w));
		OK(dg_bobj_open(reg, buf.data, buf.len, &o));
		assert_ptr_equal(o.desc, d); /* same field list: the same schema */
		for (int i = 0; i < DG_MAX_FIELDS; i++) {
			OK(dg_bobj_get_name(&o, names[i], &v));
			if (i % 3 == 0)
				assert_int_equal(v.v.b, (i & 1) != 0);
			else if (i % 3 == 1)
				assert_true(v.v.i == (int64_t)i * 1000003);
			else
				assert_memory_equal(v.v.str.ptr, names[i], strlen(names[i]));
		}
		dg_buf_free(&buf);
		dg_builder_destroy(b);
	}
	dg_registry_destroy(reg);
}

/* A C struct bound to a type that was accepted unbound from the cluster. */
static void test_bind_accepted_type(void **state)
{
	dg_registry *reg;
	dg_registry_stats s0, s1;
	const dg_desc *un, *bound;
	dg_buf def, b;
	person_t p = person_make(3, "bound", 4.0, 5), q;

	dg_buf_init(&def);
	dg_buf_init(&b);
	OK(dg_desc_export(g.person, &def));
	OK(dg_registry_create(&reg));
	OK(dg_registry_accept(reg, def.data, def.len, &un));
	assert_true(dg_desc_is_registered(un));
	/* an unbound descriptor cannot write C structs */
	{
		dg_writer w;
		dg_writer_init(&w, reg, &b);
		EXPECT(dg_write_object(&w, un, &p), DG_ERR_INVAL);
	}
	dg_registry_get_stats(reg, &s0);
	OK(dg_registry_register(reg, &person_def, &bound));
	dg_registry_get_stats(reg, &s1);
	assert_int_equal(s1.builds, s0.builds + 1);
	assert_int_equal(s1.types, s0.types);
	assert_int_equal(s1.schemas, s0.schemas);
	assert_ptr_not_equal(un, bound);
	assert_ptr_equal(dg_registry_find(reg, dg_type_id("Person")), bound);
	assert_int_equal(dg_desc_schema_id(un), dg_desc_schema_id(bound));
	/* and again: no build */
	OK(dg_registry_register(reg, &person_def, &un));
	assert_ptr_equal(un, bound);
	/* the bound type writes the same bytes as elsewhere */
	{
		dg_writer w;
		dg_buf_reset(&b);
		dg_writer_init(&w, reg, &b);
		OK(dg_write_object(&w, bound, &p));
		OK(dg_writer_finish(&w));
		dg_buf ref;
		dg_buf_init(&ref);
		enc_object(&ref, g.person, &p);
		assert_int_equal(ref.len, b.len);
		assert_memory_equal(ref.data, b.data, b.len);
		dg_buf_free(&ref);
		OK(dg_decode_object(reg, bound, b.data, b.len, &q, NULL));
		person_eq(&p, &q);
	}
	dg_buf_free(&def);
	dg_buf_free(&b);
	dg_registry_destroy(reg);
}

/* ========================================================================
 * 6. Registration hook, accepted definitions, unknown types and schemas
 * ======================================================================== */

struct hookrec {
	int calls;
	dg_err ret;
	bool accept_self;     /* accept the definition into reg from the hook */
	bool saw_registered;  /* desc was already registered during the call */
	bool saw_findable;    /* its schema was already findable */
	dg_registry *reg;
	const dg_desc *desc[16];
	uint32_t type_id[16];
	uint8_t def[16][1024];
	size_t len[16];
};

static dg_err hook_fn(void *ctx, const dg_desc *d, const uint8_t *def, size_t len)
{
	struct hookrec *h = ctx;
	int i = h->calls++;
	if (i < 16 && len <= sizeof(h->def[0])) {
		memcpy(h->def[i], def, len);
		h->len[i] = len;
		h->desc[i] = d;
		h->type_id[i] = dg_desc_type_id(d);
	}
	if (dg_desc_is_registered(d))
		h->saw_registered = true;
	if (dg_registry_find_schema(h->reg, dg_desc_type_id(d), dg_desc_schema_id(d)))
		h->saw_findable = true;
	if (h->accept_self) {
		dg_err e = dg_registry_accept(h->reg, def, len, NULL);
		if (e != DG_OK)
			return e;
	}
	return h->ret;
}

static void desc_equivalent(const dg_desc *a, const dg_desc *b)
{
	dg_field_info fa, fb;
	assert_int_equal(dg_desc_type_id(a), dg_desc_type_id(b));
	assert_int_equal(dg_desc_schema_id(a), dg_desc_schema_id(b));
	assert_string_equal(dg_desc_name(a), dg_desc_name(b));
	assert_int_equal(dg_desc_nfields(a), dg_desc_nfields(b));
	for (uint32_t i = 0; i < dg_desc_nfields(a); i++) {
		OK(dg_desc_field(a, i, &fa));
		OK(dg_desc_field(b, i, &fb));
		assert_string_equal(fa.name, fb.name);
		assert_int_equal(fa.id, fb.id);
		assert_int_equal(fa.kind, fb.kind);
		assert_int_equal(fa.elem, fb.elem);
		assert_int_equal(fa.type_id, fb.type_id);
	}
}

static void test_hook_propose_accept(void **state)
{
	static struct hookrec h;
	dg_registry *r1, *r2;
	const dg_desc *d, *dp, *dw;
	dg_builder *b;
	dg_buf buf, obj;
	dg_writer w;
	dg_value v;

	memset(&h, 0, sizeof(h));
	OK(dg_registry_create(&r1));
	h.reg = r1;
	dg_registry_set_hook(r1, hook_fn, &h);
	OK(dg_registry_register(r1, &person_def, &dp));
	assert_int_equal(h.calls, 1);
	assert_ptr_equal(h.desc[0], dp);
	OK(dg_registry_register(r1, &person_def, &d));       /* known: no call */
	assert_int_equal(h.calls, 1);
	OK(dg_registry_register(r1, &inner_def, &d));
	assert_int_equal(h.calls, 2);
	OK(dg_registry_register(r1, &wide_def, &dw));
	assert_int_equal(h.calls, 3);
	assert_ptr_equal(h.desc[2], dw);
	/* a new schema of a known type, from the builder */
	OK(dg_builder_create(r1, "Person", &b));
	v.kind = DG_I64;
	v.v.i = 77;
	OK(dg_builder_set(b, "id", &v));
	v.kind = DG_STRING;
	v.v.str.ptr = "nick";
	v.v.str.len = 4;
	OK(dg_builder_set(b, "nick", &v));
	dg_buf_init(&obj);
	dg_writer_init(&w, r1, &obj);
	OK(dg_builder_write(b, &w));
	OK(dg_writer_finish(&w));
	assert_int_equal(h.calls, 4);
	assert_int_equal(obj.data[0], 0x15); /* OBJ_S: not the primary schema */
	dg_buf_reset(&obj);
	dg_writer_init(&w, r1, &obj);
	OK(dg_builder_write(b, &w));         /* same shape: no call */
	OK(dg_writer_finish(&w));
	assert_int_equal(h.calls, 4);
	dg_builder_destroy(b);
	/* accept never calls the hook */
	{
		static const dg_field_def f[] = { { "r", DG_I64, DG_NULL, NULL, DG_UNBOUND, 0 } };
		dg_type_def t = { "Remote", f, 1, 0 };
		dg_registry *r3;
		OK(dg_registry_create(&r3));
		OK(dg_registry_register(r3, &t, &d));
		dg_buf_init(&buf);
		OK(dg_desc_export(d, &buf));
		OK(dg_registry_accept(r1, buf.data, buf.len, &d));
		assert_non_null(dg_registry_find(r1, dg_type_id("Remote")));
		assert_int_equal(h.calls, 4);
		dg_buf_free(&buf);
		dg_registry_destroy(r3);
	}
	/* the hook ran before the type or schema became usable */
	assert_false(h.saw_registered);
	assert_false(h.saw_findable);

	/* a second registry accepts every proposal into an equivalent descriptor */
	OK(dg_registry_create(&r2));
	for (int i = 0; i < 4; i++) {
		const dg_desc *d2;
		OK(dg_registry_accept(r2, h.def[i], h.len[i], &d2));
		assert_true(dg_desc_is_registered(d2));
		desc_equivalent(h.desc[i], d2);
		assert_ptr_equal(dg_registry_find_schema(r2, h.type_id[i],
		    dg_desc_schema_id(d2)), d2);
	}
	/* ... and reads r1's objects without their C structs */
	{
		dg_bobj o;
		person_t p = person_make(9, "nine", 9.5, 99);
		dg_buf_init(&buf);
		dg_writer_init(&w, r1, &buf);
		OK(dg_write_object(&w, dp, &p));
		OK(dg_writer_finish(&w));
		OK(dg_validate(r2, buf.data, buf.len));
		OK(dg_bobj_open(r2, buf.data, buf.len, &o));
		OK(dg_bobj_get_name(&o, "name", &v));
		assert_memory_equal(v.v.str.ptr, "nine", 4);
		OK(dg_bobj_get_name(&o, "nick", &v)); /* in the other schema only */
		assert_int_equal(v.kind, DG_NULL);
		OK(dg_bobj_open(r2, obj.data, obj.len, &o));
		OK(dg_bobj_get_name(&o, "nick", &v));
		assert_memory_equal(v.v.str.ptr, "nick", 4);
		OK(dg_bobj_get_name(&o, "id", &v));
		assert_int_equal(v.v.i, 77);
		dg_buf_free(&buf);
	}
	dg_buf_free(&obj);
	dg_registry_destroy(r2);
	dg_registry_destroy(r1);
}

static void test_hook_refuses(void **state)
{
	static struct hookrec h;
	dg_registry *reg;
	dg_registry_stats s0, s1;
	const dg_desc *d = NULL;
	dg_builder *b;
	dg_buf buf;
	dg_writer w;
	dg_value v;

	memset(&h, 0, sizeof(h));
	OK(dg_registry_create(&reg));
	h.reg = reg;
	h.ret = DG_ERR_REFUSED;
	dg_registry_set_hook(reg, hook_fn, &h);
	dg_registry_get_stats(reg, &s0);
	EXPECT(dg_registry_register(reg, &person_def, &d), DG_ERR_REFUSED);
	assert_int_equal(h.calls, 1);
	assert_null(dg_registry_find(reg, dg_type_id("Person")));
	dg_registry_get_stats(reg, &s1);
	assert_int_equal(s1.types, s0.types);
	assert_int_equal(s1.schemas, s0.schemas);
	/* the hook's own error is returned as is */
	h.ret = DG_ERR_NOMEM;
	EXPECT(dg_registry_register(reg, &person_def, &d), DG_ERR_NOMEM);
	assert_null(dg_registry_find(reg, dg_type_id("Person")));
	/* the builder's new type too */
	h.ret = DG_ERR_REFUSED;
	OK(dg_builder_create(reg, "Dyn", &b));
	v.kind = DG_I64;
	v.v.i = 1;
	OK(dg_builder_set(b, "x", &v));
	dg_buf_init(&buf);
	dg_writer_init(&w, reg, &buf);
	EXPECT(dg_builder_write(b, &w), DG_ERR_REFUSED);
	EXPECT(dg_writer_finish(&w), DG_ERR_REFUSED);
	assert_null(dg_registry_find(reg, dg_type_id("Dyn")));
	/* once allowed, both register (each proposed once more) */
	h.ret = DG_OK;
	int calls = h.calls;
	OK(dg_registry_register(reg, &person_def, &d));
	assert_non_null(dg_registry_find(reg, dg_type_id("Person")));
	dg_buf_reset(&buf);
	dg_writer_init(&w, reg, &buf);
	OK(dg_builder_write(b, &w));
	OK(dg_writer_finish(&w));
	assert_int_equal(h.calls, calls + 2);
	dg_builder_destroy(b);
	dg_buf_free(&buf);
	dg_registry_destroy(reg);
}

/* The hook may accept the definition itself (the cluster echoes it back). */
static void test_hook_accepts_itself(void **state)
{
	static struct hookrec h;
	dg_registry *reg;
	const dg_desc *d;
	dg_buf b;
	person_t p = person_make(1, "echo", 1, 1), q;

	memset(&h, 0, sizeof(h));
	OK(dg_registry_create(&reg));
	h.reg = reg;
	h.accept_self = true;
	dg_registry_set_hook(reg, hook_fn, &h);
	OK(dg_registry_register(reg, &person_def, &d));
	assert_int_equal(h.calls, 1);
	assert_ptr_equal(dg_registry_find(reg, dg_type_id("Person")), d);
	dg_buf_init(&b);
	dg_writer w;
	dg_writer_init(&w, reg, &b);
	OK(dg_write_object(&w, d, &p)); /* bound: usable for C structs */
	OK(dg_writer_finish(&w));
	assert_int_equal(b.data[0], 0x14);
	OK(dg_decode_object(reg, d, b.data, b.len, &q, NULL));
	person_eq(&p, &q);
	dg_buf_free(&b);
	dg_registry_destroy(reg);
}

/* Unhooking waits for the hook's calls under way: once
 * dg_registry_set_hook(reg, NULL, NULL) returns, the old ctx may be freed
 * (membership's stop frees its dg_member right after) — no call of the
 * hook reaches it any more. */
struct slow_hook {
	_Atomic int entered;
	_Atomic bool freed;         /* "the ctx is gone" */
	_Atomic int touched_freed;  /* the hook used it after that */
};

static dg_err slow_hook_fn(void *ctx, const dg_desc *d, const uint8_t *def, size_t len)
{
	struct slow_hook *h = ctx;
	(void)d;
	(void)def;
	(void)len;
	atomic_store(&h->entered, 1);
	struct timespec ts = { 0, 200 * 1000000L }; /* a cluster round trip */
	nanosleep(&ts, NULL);
	if (atomic_load(&h->freed))
		atomic_fetch_add(&h->touched_freed, 1);
	return DG_OK;
}

struct reg_arg {
	dg_registry *reg;
	dg_err e;
};

static void *register_person(void *p)
{
	struct reg_arg *a = p;
	const dg_desc *d;
	a->e = dg_registry_register(a->reg, &person_def, &d);
	return NULL;
}

static void test_hook_unset_waits_for_calls(void **state)
{
	static struct slow_hook h;
	(void)state;
	memset(&h, 0, sizeof(h));
	struct reg_arg a;
	OK(dg_registry_create(&a.reg));
	dg_registry_set_hook(a.reg, slow_hook_fn, &h);
	pthread_t t;
	pthread_create(&t, NULL, register_person, &a);
	while (!atomic_load(&h.entered)) {
		struct timespec ts = { 0, 1000000L };
		nanosleep(&ts, NULL);
	}
	dg_registry_set_hook(a.reg, NULL, NULL);
	atomic_store(&h.freed, true); /* what the owner may now do */
	pthread_join(t, NULL);
	OK(a.e);
	assert_int_equal(atomic_load(&h.touched_freed), 0);
	dg_registry_destroy(a.reg);
}

static void test_accept_malformed(void **state)
{
	dg_registry *reg;
	dg_registry_stats s0, s1;
	dg_buf def;
	uint8_t bad[1200];
	const dg_desc *d;

	dg_buf_init(&def);
	OK(dg_desc_export(g.wide, &def));
	assert_true(def.len < sizeof(bad) - 1);
	OK(dg_registry_create(&reg));
	dg_registry_get_stats(reg, &s0);
	/* every truncation */
	for (size_t n = 0; n < def.len; n++) {
		uint8_t *p = malloc(n ? n : 1);
		assert_non_null(p);
		memcpy(p, def.data, n);
		dg_err e = dg_registry_accept(reg, p, n, &d);
		free(p);
		if (e == DG_OK)
			fail_msg("accept of %zu of %zu bytes succeeded", n, def.len);
	}
	/* no definition at all, as a TYPES_SNAPSHOT with an empty element
	 * hands it (NULL, 0): refused before any pointer arithmetic on NULL
	 * (UBSan reported def + len with def NULL; issue 14) */
	EXPECT(dg_registry_accept(reg, NULL, 0, &d), DG_ERR_TRUNCATED);
	EXPECT(dg_registry_accept(reg, NULL, 5, &d), DG_ERR_INVAL);
	dg_registry_get_stats(reg, &s1);
	assert_int_equal(s1.types, s0.types);
	assert_null(dg_registry_find(reg, dg_type_id("Wide")));
	/* bad version */
	memcpy(bad, def.data, def.len);
	bad[0] = 2;
	EXPECT(dg_registry_accept(reg, bad, def.len, &d), DG_ERR_BAD_TAG);
	/* trailing bytes */
	memcpy(bad, def.data, def.len);
	bad[def.len] = 0;
	EXPECT(dg_registry_accept(reg, bad, def.len + 1, &d), DG_ERR_BAD_LENGTH);
	/* a field kind that does not exist, or is null */
	{
		/* 01 04 "Wide" 13 | 01 "b" kind elem id... */
		size_t kind_at = 1 + 1 + 4 + 1 + 1 + 1;
		assert_int_equal(def.data[kind_at], DG_BOOL);
		memcpy(bad, def.data, def.len);
		bad[kind_at] = 0xFF;
		EXPECT(dg_registry_accept(reg, bad, def.len, &d), DG_ERR_BAD_TAG);
		bad[kind_at] = DG_NULL;
		EXPECT(dg_registry_accept(reg, bad, def.len, &d), DG_ERR_INVAL);
		bad[kind_at] = DG_BOOL;
		bad[kind_at + 1] = DG_I32; /* elem on a non-array */
		EXPECT(dg_registry_accept(reg, bad, def.len, &d), DG_ERR_INVAL);
	}
	/* more fields than allowed */
	{
		static const uint8_t many[] = { 0x01, 0x01, 'M', 0xAD, 0x02 }; /* 301 */
		EXPECT(dg_registry_accept(reg, many, sizeof(many), &d), DG_ERR_LIMIT);
	}
	/* an invalid UTF-8 type name */
	{
		static const uint8_t name[] = { 0x01, 0x02, 0xC0, 0x80, 0x00 };
		EXPECT(dg_registry_accept(reg, name, sizeof(name), &d), DG_ERR_INVAL);
	}
	dg_registry_get_stats(reg, &s1);
	assert_int_equal(s1.types, s0.types);
	/* the intact definition still registers */
	OK(dg_registry_accept(reg, def.data, def.len, &d));
	desc_equivalent(d, g.wide);
	dg_buf_free(&def);
	dg_registry_destroy(reg);
}

static void test_unknown_type_and_schema(void **state)
{
	dg_registry *only_person, *empty;
	dg_builder *b;
	dg_buf obj_s, obj;
	dg_writer w;
	dg_reader r;
	dg_value v;
	dg_bobj o;
	evo_t e;
	person_t p = person_make(1, "u", 1, 1);

	/* an Evo object with a schema only g.reg knows */
	OK(dg_builder_create(g.reg, "Evo", &b));
	v.kind = DG_I64;
	v.v.i = 5;
	OK(dg_builder_set(b, "a", &v));
	v.kind = DG_I32;
	v.v.i = 6;
	OK(dg_builder_set(b, "extra", &v));
	dg_buf_init(&obj_s);
	dg_writer_init(&w, g.reg, &obj_s);
	OK(dg_builder_write(b, &w));
	OK(dg_writer_finish(&w));
	dg_builder_destroy(b);
	assert_int_equal(obj_s.data[0], 0x15);
	dg_buf_init(&obj);
	enc_object(&obj, g.person, &p);

	OK(dg_registry_create(&only_person));
	OK(dg_registry_create(&empty));
	OK(dg_registry_register(only_person, &person_def, NULL));
	OK(dg_registry_register(only_person, &evo_def, NULL));

	EXPECT(dg_validate(only_person, obj_s.data, obj_s.len), DG_ERR_UNKNOWN_SCHEMA);
	EXPECT(dg_bobj_open(only_person, obj_s.data, obj_s.len, &o), DG_ERR_UNKNOWN_SCHEMA);
	dg_reader_init(&r, only_person, obj_s.data, obj_s.len);
	EXPECT(dg_read_next(&r, &v), DG_ERR_UNKNOWN_SCHEMA);
	EXPECT(dg_decode_object(only_person, dg_registry_find(only_person, dg_type_id("Evo")),
	    obj_s.data, obj_s.len, &e, NULL), DG_ERR_UNKNOWN_SCHEMA);
	EXPECT(dg_validate(empty, obj_s.data, obj_s.len), DG_ERR_UNKNOWN_TYPE);
	EXPECT(dg_validate(empty, obj.data, obj.len), DG_ERR_UNKNOWN_TYPE);
	EXPECT(dg_bobj_open(empty, obj.data, obj.len, &o), DG_ERR_UNKNOWN_TYPE);
	dg_reader_init(&r, empty, obj.data, obj.len);
	EXPECT(dg_read_next(&r, &v), DG_ERR_UNKNOWN_TYPE);
	/* no registry at all: one that knows no type (it dereferenced NULL:
	 * tests/fuzz crash msg_fuzz-1) */
	dg_reader_init(&r, NULL, obj.data, obj.len);
	EXPECT(dg_read_next(&r, &v), DG_ERR_UNKNOWN_TYPE);
	dg_reader_init(&r, NULL, obj.data, obj.len);
	EXPECT(dg_read_skip(&r), DG_ERR_UNKNOWN_TYPE);
	/* in a list: the DEF */
	{
		dg_buf l;
		dg_buf_init(&l);
		dg_writer_init(&w, g.reg, &l);
		dg_write_list_begin(&w, 2);
		dg_write_object(&w, g.person, &p);
		dg_write_object(&w, g.person, &p);
		dg_write_end(&w);
		OK(dg_writer_finish(&w));
		EXPECT(dg_validate(empty, l.data, l.len), DG_ERR_UNKNOWN_TYPE);
		dg_reader_init(&r, empty, l.data, l.len);
		next_is(&r, &v, DG_LIST);
		EXPECT(dg_read_next(&r, &v), DG_ERR_UNKNOWN_TYPE);
		dg_buf_free(&l);
	}
	/* the schema known in g.reg decodes into the struct (extra ignored) */
	memset(&e, 0xAB, sizeof(e));
	OK(dg_decode_object(g.reg, g.evo, obj_s.data, obj_s.len, &e, NULL));
	assert_int_equal(e.a, 5);
	assert_null(e.b.ptr); /* absent from that schema: null */
	dg_buf_free(&obj_s);
	dg_buf_free(&obj);
	dg_registry_destroy(only_person);
	dg_registry_destroy(empty);
}

/* ========================================================================
 * 7. Binary objects and the builder
 * ======================================================================== */

static void test_bobj_fields(void **state)
{
	wide_t w;
	dg_buf b;
	dg_bobj o;
	dg_value v;

	dg_buf_init(&b);
	wide_fill(&w, 1);
	enc_object(&b, g.wide, &w);
	OK(dg_bobj_open(g.reg, b.data, b.len, &o));
	assert_ptr_equal(o.desc, g.wide);
	assert_int_equal(dg_bobj_type_id(&o), dg_type_id("Wide"));

	/* by id and by name give the same value */
	for (uint32_t i = 0; i < WIDE_NFIELDS; i++) {
		dg_value a, c;
		memset(&a, 0, sizeof(a));
		memset(&c, 0, sizeof(c));
		OK(dg_bobj_get(&o, dg_field_id(wide_fields[i].name), &a));
		OK(dg_bobj_get_name(&o, wide_fields[i].name, &c));
		assert_int_equal(a.kind, c.kind);
		assert_memory_equal(&a.v, &c.v, sizeof(a.v));
	}
#define GET(name_, kind_) (OK(dg_bobj_get_name(&o, (name_), &v)), assert_int_equal(v.kind, (kind_)))
	GET("b", DG_BOOL);
	assert_int_equal(v.v.b, w.b);
	GET("i8", DG_I8);
	assert_int_equal(v.v.i, w.i8);
	GET("i16", DG_I16);
	assert_int_equal(v.v.i, w.i16);
	GET("i32", DG_I32);
	assert_int_equal(v.v.i, w.i32);
	GET("i64", DG_I64);
	assert_true(v.v.i == w.i64);
	GET("f", DG_FLOAT);
	assert_true(v.v.f == w.f);
	GET("d", DG_DOUBLE);
	assert_true(v.v.d == w.d);
	GET("s", DG_STRING);
	str_eq(v.v.str, w.s);
	GET("by", DG_BYTES);
	bytes_eq(v.v.bytes, w.by);
	GET("u", DG_UUID);
	assert_memory_equal(v.v.uuid.b, w.u.b, 16);
	GET("ts", DG_TIMESTAMP);
	assert_true(v.v.ts.ms == w.ts.ms);
	assert_int_equal(v.v.ts.ns, w.ts.ns);
	GET("color", DG_ENUM);
	assert_int_equal(v.v.en.ordinal, w.color);
	assert_int_equal(v.v.en.type_id, dg_type_id("Color"));
	GET("arr", DG_ARRAY);
	assert_int_equal(v.v.arr.elem, DG_I32);
	assert_int_equal(v.v.arr.a.count, 4);
	for (uint32_t i = 0; i < 4; i++)
		assert_int_equal(dg_array_get_int(&v.v.arr.a, DG_I32, i), g_i32s[i]);
	GET("darr", DG_ARRAY);
	assert_true(dg_array_get_double(&v.v.arr.a, DG_DOUBLE, 1) == 1e300);
	GET("list", DG_LIST);
	assert_int_equal(v.v.coll.count, 3);
	assert_int_equal(v.v.coll.raw.len, w.list.len);
	assert_memory_equal(v.v.coll.raw.ptr, w.list.ptr, w.list.len);
	GET("map", DG_MAP);
	assert_int_equal(v.v.coll.count, 2);
	assert_memory_equal(v.v.coll.raw.ptr, w.map.ptr, w.map.len);
	GET("smap", DG_SORTED_MAP);
	assert_int_equal(v.v.coll.count, 2);
	GET("in", DG_OBJECT);
	{
		dg_bobj io = v.v.obj;
		assert_int_equal(dg_bobj_type_id(&io), dg_type_id("Inner"));
		OK(dg_bobj_get_name(&io, "x", &v));
		assert_int_equal(v.v.i, w.in.x);
		OK(dg_bobj_get_name(&io, "tag", &v));
		assert_memory_equal(v.v.str.ptr, "inner", 5);
	}
	GET("any", DG_OBJECT); /* the any field holds a Person */
	{
		dg_bobj po = v.v.obj;
		OK(dg_bobj_get_name(&po, "name", &v));
		assert_memory_equal(v.v.str.ptr, "pat", 3);
	}
	EXPECT(dg_bobj_get_name(&o, "nope", &v), DG_ERR_UNKNOWN_FIELD);
	EXPECT(dg_bobj_get(&o, dg_field_id("id"), &v), DG_ERR_UNKNOWN_FIELD);

	/* only fixed fields */
	{
		point_t p = { 1.0, 2.0, true, 3, 4, 5.0f, { { 9 } } };
		enc_object(&b, g.point, &p);
		OK(dg_bobj_open(g.reg, b.data, b.len, &o));
		GET("x", DG_DOUBLE);
		assert_true(v.v.d == 1.0);
		GET("y", DG_DOUBLE);
		assert_true(v.v.d == 2.0);
		GET("flag", DG_BOOL);
		assert_true(v.v.b);
		GET("k", DG_I16);
		assert_int_equal(v.v.i, 3);
		GET("s", DG_I8);
		assert_int_equal(v.v.i, 4);
		GET("f", DG_FLOAT);
		assert_true(v.v.f == 5.0f);
		GET("id", DG_UUID);
		assert_int_equal(v.v.uuid.b[0], 9);
		EXPECT(dg_bobj_get_name(&o, "z", &v), DG_ERR_UNKNOWN_FIELD);
	}
	/* not an object; trailing bytes */
	{
		uint8_t i64[] = { 0x06, 0x02 };
		EXPECT(dg_bobj_open(g.reg, i64, 2, &o), DG_ERR_TYPE_MISMATCH);
		EXPECT(dg_bobj_open(g.reg, i64, 0, &o), DG_ERR_TRUNCATED);
		person_t p = person_make(1, "a", 1, 1);
		enc_object(&b, g.person, &p);
		OK(dg_buf_reserve(&b, 1));
		b.data[b.len++] = 0;
		EXPECT(dg_bobj_open(g.reg, b.data, b.len, &o), DG_ERR_BAD_LENGTH);
	}
#undef GET
	dg_buf_free(&b);
}

/* Footer entries of 1, 2 and 4 bytes (FORMAT.md "Footer"). */
static void test_bobj_footer_widths(void **state)
{
	static const size_t sizes[] = { 10, 300, 70000 };
	static const unsigned widths[] = { 1, 2, 4 };
	char *big = malloc(70000);
	dg_buf b;
	assert_non_null(big);
	for (size_t i = 0; i < 70000; i++)
		big[i] = (char)('a' + i % 26);
	dg_buf_init(&b);
	for (int k = 0; k < 3; k++) {
		tri_t t = { { "x", 1 }, { big, (uint32_t)sizes[k] }, { "yz", 2 } }, u;
		dg_bobj o;
		dg_value v;
		const uint8_t *p;
		uint64_t body_len;
		enc_object(&b, g.tri, &t);
		p = b.data + 5;
		OK(dgi_get_uvarint(&p, b.data + b.len, &body_len));
		assert_int_equal((size_t)(p - b.data) + body_len, b.len);
		/* offsets of var 1 and var 2, at the end, w bytes each */
		unsigned w = widths[k];
		size_t blen = dgi_uvarint_len(sizes[k] + 1);
		uint32_t off1 = 0, off2 = 0;
		for (unsigned j = 0; j < w; j++) {
			off1 |= (uint32_t)b.data[b.len - 2 * w + j] << (8 * j);
			off2 |= (uint32_t)b.data[b.len - w + j] << (8 * j);
		}
		assert_int_equal(off1, 2);
		assert_int_equal(off2, 2 + blen + sizes[k]);
		assert_int_equal(body_len, 2 + blen + sizes[k] + 3 + 2 * w);
		OK(dg_bobj_open(g.reg, b.data, b.len, &o));
		OK(dg_bobj_get_name(&o, "a", &v));
		assert_memory_equal(v.v.str.ptr, "x", 1);
		OK(dg_bobj_get_name(&o, "b", &v));
		assert_int_equal(v.v.str.len, sizes[k]);
		assert_memory_equal(v.v.str.ptr, big, sizes[k]);
		OK(dg_bobj_get_name(&o, "c", &v));
		assert_int_equal(v.v.str.len, 2);
		assert_memory_equal(v.v.str.ptr, "yz", 2);
		OK(dg_decode_object(g.reg, g.tri, b.data, b.len, &u, NULL));
		str_eq(u.a, t.a);
		str_eq(u.b, t.b);
		str_eq(u.c, t.c);
		OK(dg_validate(g.reg, b.data, b.len));
	}
	free(big);
	dg_buf_free(&b);
}

static dg_value val_i64(int64_t x)
{
	dg_value v;
	v.kind = DG_I64;
	v.v.i = x;
	return v;
}

static dg_value val_str(const char *s)
{
	dg_value v;
	v.kind = DG_STRING;
	v.v.str.ptr = s;
	v.v.str.len = (uint32_t)strlen(s);
	return v;
}

static void test_builder_dynamic(void **state)
{
	static const int16_t sh[] = { 1, -2, 3 };
	dg_builder *b;
	dg_buf buf, pbuf;
	dg_writer w;
	dg_bobj o, po;
	dg_value v;
	dg_uuid u;
	const dg_desc *d;
	person_t p = person_make(11, "emb", 0.5, 12);

	dg_buf_init(&buf);
	dg_buf_init(&pbuf);
	enc_object(&pbuf, g.person, &p);
	OK(dg_bobj_open(g.reg, pbuf.data, pbuf.len, &po));
	for (int i = 0; i < 16; i++)
		u.b[i] = (uint8_t)(255 - i);

	assert_null(dg_registry_find(g.reg, dg_type_id("Dyn")));
	OK(dg_builder_create(g.reg, "Dyn", &b));
	v = val_i64(-42);
	OK(dg_builder_set(b, "n", &v));
	v = val_str("hello");
	OK(dg_builder_set(b, "s", &v));
	v.kind = DG_DOUBLE;
	v.v.d = 2.5;
	OK(dg_builder_set(b, "f", &v));
	v.kind = DG_BOOL;
	v.v.b = true;
	OK(dg_builder_set(b, "ok", &v));
	v.kind = DG_UUID;
	v.v.uuid = u;
	OK(dg_builder_set(b, "u", &v));
	v.kind = DG_ARRAY;
	v.v.arr.elem = DG_I16;
	v.v.arr.a.ptr = sh;
	v.v.arr.a.count = 3;
	OK(dg_builder_set(b, "arr", &v));
	v.kind = DG_TIMESTAMP;
	v.v.ts.ms = -5;
	v.v.ts.ns = 6;
	OK(dg_builder_set(b, "when", &v));
	v.kind = DG_ENUM;
	v.v.en.type_id = dg_type_id("Color");
	v.v.en.ordinal = 3;
	OK(dg_builder_set(b, "e", &v));
	v.kind = DG_OBJECT;
	v.v.obj = po;
	OK(dg_builder_set(b, "obj", &v));
	v.kind = DG_LIST;
	v.v.coll.count = 3;
	v.v.coll.raw.ptr = g.raw_list.data;
	v.v.coll.raw.len = (uint32_t)g.raw_list.len;
	OK(dg_builder_set(b, "lst", &v));
	v.kind = DG_ANY;
	v.v.raw.ptr = g.raw_smap.data;
	v.v.raw.len = (uint32_t)g.raw_smap.len;
	OK(dg_builder_set(b, "any", &v));
	/* misuse */
	v.kind = DG_NULL;
	EXPECT(dg_builder_set(b, "new", &v), DG_ERR_INVAL);
	OK(dg_builder_set(b, "s", &v)); /* null on a known field is fine */
	v = val_str("hello");
	OK(dg_builder_set(b, "s", &v));
	v = val_str("x");
	EXPECT(dg_builder_set(b, "n", &v), DG_ERR_TYPE_MISMATCH);
	EXPECT(dg_builder_remove(b, "absent"), DG_ERR_UNKNOWN_FIELD);

	dg_writer_init(&w, g.reg, &buf);
	OK(dg_builder_write(b, &w));
	OK(dg_writer_finish(&w));
	assert_int_equal(buf.data[0], 0x14);
	d = dg_registry_find(g.reg, dg_type_id("Dyn"));
	assert_non_null(d);
	assert_int_equal(dg_desc_nfields(d), 11);
	OK(dg_validate(g.reg, buf.data, buf.len));

	OK(dg_bobj_open(g.reg, buf.data, buf.len, &o));
	assert_ptr_equal(o.desc, d);
	OK(dg_bobj_get_name(&o, "n", &v));
	assert_int_equal(v.kind, DG_I64);
	assert_int_equal(v.v.i, -42);
	OK(dg_bobj_get_name(&o, "s", &v));
	assert_int_equal(v.kind, DG_STRING);
	assert_memory_equal(v.v.str.ptr, "hello", 5);
	OK(dg_bobj_get_name(&o, "f", &v));
	assert_true(v.v.d == 2.5);
	OK(dg_bobj_get_name(&o, "ok", &v));
	assert_true(v.v.b);
	OK(dg_bobj_get_name(&o, "u", &v));
	assert_memory_equal(v.v.uuid.b, u.b, 16);
	OK(dg_bobj_get_name(&o, "arr", &v));
	assert_int_equal(v.v.arr.elem, DG_I16);
	assert_int_equal(v.v.arr.a.count, 3);
	assert_int_equal(dg_array_get_int(&v.v.arr.a, DG_I16, 1), -2);
	OK(dg_bobj_get_name(&o, "when", &v));
	assert_true(v.v.ts.ms == -5 && v.v.ts.ns == 6);
	OK(dg_bobj_get_name(&o, "e", &v));
	assert_int_equal(v.v.en.ordinal, 3);
	assert_int_equal(v.v.en.type_id, dg_type_id("Color"));
	OK(dg_bobj_get_name(&o, "obj", &v));
	assert_int_equal(v.kind, DG_OBJECT);
	{
		dg_bobj eo = v.v.obj;
		OK(dg_bobj_get_name(&eo, "name", &v));
		assert_memory_equal(v.v.str.ptr, "emb", 3);
		/* an embedded object is a complete encoding of its own */
		OK(dg_bobj_get_name(&o, "obj", &v));
		assert_int_equal(v.v.obj.len, pbuf.len - 6);
		assert_memory_equal(v.v.obj.body, pbuf.data + 6, pbuf.len - 6);
	}
	OK(dg_bobj_get_name(&o, "lst", &v));
	assert_int_equal(v.kind, DG_LIST);
	assert_int_equal(v.v.coll.count, 3);
	OK(dg_bobj_get_name(&o, "any", &v));
	assert_int_equal(v.kind, DG_SORTED_MAP);

	/* remove a field: another schema of the same type */
	OK(dg_builder_remove(b, "any"));
	dg_buf_reset(&buf);
	dg_writer_init(&w, g.reg, &buf);
	OK(dg_builder_write(b, &w));
	OK(dg_writer_finish(&w));
	assert_int_equal(buf.data[0], 0x15);
	OK(dg_bobj_open(g.reg, buf.data, buf.len, &o));
	assert_int_equal(dg_desc_nfields(o.desc), 10);
	OK(dg_bobj_get_name(&o, "any", &v));
	assert_int_equal(v.kind, DG_NULL);
	OK(dg_bobj_get_name(&o, "n", &v));
	assert_int_equal(v.v.i, -42);
	dg_builder_destroy(b);

	/* fields of a registered type take its kinds */
	OK(dg_builder_create(g.reg, "Person", &b));
	v.kind = DG_I32;
	v.v.i = 1;
	EXPECT(dg_builder_set(b, "id", &v), DG_ERR_TYPE_MISMATCH);
	dg_builder_destroy(b);
	/* bad names */
	EXPECT(dg_builder_create(g.reg, "", &b), DG_ERR_INVAL);
	EXPECT(dg_builder_create(g.reg, "\xFF", &b), DG_ERR_INVAL);
	dg_buf_free(&buf);
	dg_buf_free(&pbuf);
}

static void test_builder_load_rewrite(void **state)
{
	wide_t in, out;
	dg_buf a, b;
	dg_bobj o, o2;
	dg_builder *bl;
	dg_writer w;
	dg_value v;

	dg_buf_init(&a);
	dg_buf_init(&b);
	wide_fill(&in, 2);
	enc_object(&a, g.wide, &in);
	OK(dg_bobj_open(g.reg, a.data, a.len, &o));

	OK(dg_builder_create(g.reg, "Person", &bl));
	EXPECT(dg_builder_load(bl, &o), DG_ERR_TYPE_MISMATCH);
	dg_builder_destroy(bl);

	OK(dg_builder_create(g.reg, "Wide", &bl));
	OK(dg_builder_load(bl, &o));
	v = val_str("rewritten");
	OK(dg_builder_set(bl, "s", &v));
	dg_writer_init(&w, g.reg, &b);
	OK(dg_builder_write(bl, &w));
	OK(dg_writer_finish(&w));
	assert_int_equal(b.data[0], 0x14); /* the same (primary) schema */
	OK(dg_bobj_open(g.reg, b.data, b.len, &o2));
	assert_ptr_equal(o2.desc, g.wide);

	/* only "s" changed: every other field has the same value */
	for (uint32_t i = 0; i < WIDE_NFIELDS; i++) {
		dg_value x, y;
		uint32_t id = dg_field_id(wide_fields[i].name);
		memset(&x, 0, sizeof(x));
		memset(&y, 0, sizeof(y));
		OK(dg_bobj_get(&o, id, &x));
		OK(dg_bobj_get(&o2, id, &y));
		assert_int_equal(x.kind, y.kind);
		if (strcmp(wide_fields[i].name, "s") == 0) {
			assert_int_equal(y.v.str.len, 9);
			assert_memory_equal(y.v.str.ptr, "rewritten", 9);
			continue;
		}
		switch (x.kind) {
		case DG_STRING:
		case DG_BYTES:
			bytes_eq(x.v.bytes, y.v.bytes);
			break;
		case DG_ARRAY:
			array_eq(x.v.arr.a, y.v.arr.a, x.v.arr.elem == DG_I32 ? 4 : 8);
			break;
		case DG_LIST:
		case DG_MAP:
		case DG_SORTED_MAP:
			raw_eq(x.v.coll.raw, y.v.coll.raw);
			break;
		case DG_OBJECT:
			assert_int_equal(x.v.obj.len, y.v.obj.len);
			assert_memory_equal(x.v.obj.body, y.v.obj.body, x.v.obj.len);
			break;
		default:
			assert_memory_equal(&x.v, &y.v, sizeof(x.v));
			break;
		}
	}
	/* as a struct too */
	OK(dg_decode_object(g.reg, g.wide, b.data, b.len, &out, NULL));
	in.s.ptr = "rewritten";
	in.s.len = 9;
	wide_eq(&in, &out);
	/* the same bytes as the struct writer gives for that struct */
	enc_object(&a, g.wide, &in);
	assert_int_equal(a.len, b.len);
	assert_memory_equal(a.data, b.data, a.len);
	dg_builder_destroy(bl);
	dg_buf_free(&a);
	dg_buf_free(&b);
}

static void test_schema_evolution(void **state)
{
	dg_builder *bl;
	dg_buf b;
	dg_writer w;
	dg_value v;
	dg_bobj o;
	evo_t e = { 10, { "bee", 3 } }, out;

	/* newer writer: Evo with an extra field "c" */
	dg_buf_init(&b);
	OK(dg_builder_create(g.reg, "Evo", &bl));
	v = val_i64(-10);
	OK(dg_builder_set(bl, "a", &v));
	v = val_str("new");
	OK(dg_builder_set(bl, "b", &v));
	v.kind = DG_I32;
	v.v.i = 33;
	OK(dg_builder_set(bl, "c", &v));
	dg_writer_init(&w, g.reg, &b);
	OK(dg_builder_write(bl, &w));
	OK(dg_writer_finish(&w));
	dg_builder_destroy(bl);
	assert_int_equal(b.data[0], 0x15);
	{
		static const char *const names[] = { "a", "b", "c" };
		assert_int_equal(ld32(b.data + 1), dg_type_id("Evo"));
		assert_int_equal(ld32(b.data + 5), ref_schema_id(names, 3));
	}
	/* ... read into the older C struct: the extra field is ignored */
	memset(&out, 0xAB, sizeof(out));
	OK(dg_decode_object(g.reg, g.evo, b.data, b.len, &out, NULL));
	assert_int_equal(out.a, -10);
	assert_int_equal(out.b.len, 3);
	assert_memory_equal(out.b.ptr, "new", 3);
	OK(dg_bobj_open(g.reg, b.data, b.len, &o));
	OK(dg_bobj_get_name(&o, "c", &v));
	assert_int_equal(v.v.i, 33);

	/* older writer (the struct): the newer field reads as null */
	enc_object(&b, g.evo, &e);
	assert_int_equal(b.data[0], 0x14);
	OK(dg_bobj_open(g.reg, b.data, b.len, &o));
	OK(dg_bobj_get_name(&o, "c", &v));
	assert_int_equal(v.kind, DG_NULL);
	OK(dg_bobj_get_name(&o, "b", &v));
	assert_memory_equal(v.v.str.ptr, "bee", 3);
	EXPECT(dg_bobj_get_name(&o, "zz", &v), DG_ERR_UNKNOWN_FIELD);
	dg_buf_free(&b);
}

/* A field set that matches a registered schema by ids but not by kinds
 * must not be written with that schema's layout. */
static void test_builder_kind_conflict(void **state)
{
	static const int32_t small[1] = { 7 };
	dg_builder *b1, *b2;
	dg_buf buf;
	dg_writer w;
	dg_value v;
	dg_err e1, e2;

	dg_buf_init(&buf);
	OK(dg_builder_create(g.reg, "KindC", &b1));
	v = val_i64(1);
	OK(dg_builder_set(b1, "a", &v));
	dg_writer_init(&w, g.reg, &buf);
	OK(dg_builder_write(b1, &w));           /* primary schema {a} */
	OK(dg_builder_set(b1, "x", &v));        /* x: I64 */
	{
		static const int64_t big[1] = { 8 };
		dg_value av;
		av.kind = DG_ARRAY;
		av.v.arr.elem = DG_I64;
		av.v.arr.a.ptr = big;
		av.v.arr.a.count = 1;
		OK(dg_builder_set(b1, "arr", &av)); /* arr: ARRAY of I64 */
	}
	dg_buf_reset(&buf);
	dg_writer_init(&w, g.reg, &buf);
	OK(dg_builder_write(b1, &w));           /* schema {a, x, arr} */

	/* the same builder (its schema cache), x now given as a string */
	dg_builder_clear(b1);
	v = val_i64(2);
	OK(dg_builder_set(b1, "a", &v));
	v = val_str("not an i64");
	e1 = dg_builder_set(b1, "x", &v);
	if (e1 == DG_OK) {
		dg_value av;
		av.kind = DG_ARRAY;
		av.v.arr.elem = DG_I64;
		av.v.arr.a.ptr = small;
		av.v.arr.a.count = 0;
		OK(dg_builder_set(b1, "arr", &av));
		dg_buf_reset(&buf);
		dg_writer_init(&w, g.reg, &buf);
		e2 = dg_builder_write(b1, &w);
		assert_int_equal(e1 == DG_OK && e2 == DG_OK, 0);
		EXPECT(e2, DG_ERR_CONFLICT);
	} else {
		EXPECT(e1, DG_ERR_TYPE_MISMATCH);
	}

	/* a fresh builder: arr given as an I32 array (elements half as wide) */
	OK(dg_builder_create(g.reg, "KindC", &b2));
	v = val_i64(3);
	OK(dg_builder_set(b2, "a", &v));
	OK(dg_builder_set(b2, "x", &v));
	v.kind = DG_ARRAY;
	v.v.arr.elem = DG_I32;
	v.v.arr.a.ptr = small;
	v.v.arr.a.count = 1;
	e1 = dg_builder_set(b2, "arr", &v);
	if (e1 == DG_OK) {
		dg_buf_reset(&buf);
		dg_writer_init(&w, g.reg, &buf);
		EXPECT(dg_builder_write(b2, &w), DG_ERR_CONFLICT);
	} else {
		EXPECT(e1, DG_ERR_TYPE_MISMATCH);
	}
	/* and a well-typed object of that schema still writes */
	dg_builder_clear(b2);
	v = val_i64(3);
	OK(dg_builder_set(b2, "a", &v));
	OK(dg_builder_set(b2, "x", &v));
	dg_buf_reset(&buf);
	dg_writer_init(&w, g.reg, &buf);
	OK(dg_builder_write(b2, &w));
	OK(dg_writer_finish(&w));
	OK(dg_validate(g.reg, buf.data, buf.len));
	dg_builder_destroy(b1);
	dg_builder_destroy(b2);
	dg_buf_free(&buf);
}

/* ========================================================================
 * 8. Streams: schemas once per scope (PR 13462, JDK-8247532)
 * ======================================================================== */

/* dg_write_objects / dg_read_objects: the same bytes as one call per object,
 * and the REF-run fast paths fall back correctly when the run breaks. */
static void test_object_arrays(void **state)
{
	enum { N = 50 };
	person_t p[N], q[N];
	point_t pt = { 0 };
	char names[N][16];
	dg_buf a, b;
	dg_writer w;
	dg_reader r;
	uint32_t n;
	(void)state;

	dg_buf_init(&a);
	dg_buf_init(&b);
	for (int i = 0; i < N; i++) {
		snprintf(names[i], sizeof(names[i]), "n%d", i * 31);
		p[i] = person_make(i * 1000003LL - 7, names[i], i * 0.25, 1767225600000 + i);
	}
	/* one call per object vs the array call, in a list */
	dg_writer_init(&w, g.reg, &a);
	OK(dg_write_list_begin(&w, N));
	for (int i = 0; i < N; i++)
		OK(dg_write_object(&w, g.person, &p[i]));
	OK(dg_write_end(&w));
	OK(dg_writer_finish(&w));
	dg_writer_init(&w, g.reg, &b);
	OK(dg_write_list_begin(&w, N));
	OK(dg_write_objects(&w, g.person, p, sizeof(p[0]), N));
	OK(dg_write_end(&w));
	OK(dg_writer_finish(&w));
	assert_int_equal(a.len, b.len);
	assert_memory_equal(a.data, b.data, a.len);

	/* read back in chunks of uneven size */
	memset(q, 0, sizeof(q));
	dg_reader_init(&r, g.reg, b.data, b.len);
	OK(dg_read_begin(&r, DG_LIST, &n));
	assert_int_equal(n, N);
	OK(dg_read_objects(&r, g.person, q, sizeof(q[0]), 7, NULL));
	OK(dg_read_objects(&r, g.person, q + 7, sizeof(q[0]), N - 7, NULL));
	for (int i = 0; i < N; i++)
		person_eq(&p[i], &q[i]);
	assert_int_equal(dg_reader_left(&r), 0);

	/* past the end of the list: STATE */
	EXPECT(dg_read_objects(&r, g.person, q, sizeof(q[0]), 1, NULL), DG_ERR_STATE);

	/* a run broken by another type: the array read stops there with
	 * TYPE_MISMATCH and the rest of the stream is still readable */
	dg_buf_reset(&a);
	dg_writer_init(&w, g.reg, &a);
	OK(dg_write_list_begin(&w, 5));
	OK(dg_write_objects(&w, g.person, p, sizeof(p[0]), 3));
	OK(dg_write_object(&w, g.point, &pt));
	OK(dg_write_object(&w, g.person, &p[3]));
	OK(dg_write_end(&w));
	OK(dg_writer_finish(&w));
	dg_reader_init(&r, g.reg, a.data, a.len);
	OK(dg_read_begin(&r, DG_LIST, &n));
	memset(q, 0, sizeof(q));
	EXPECT(dg_read_objects(&r, g.person, q, sizeof(q[0]), 5, NULL), DG_ERR_TYPE_MISMATCH);
	for (int i = 0; i < 3; i++)
		person_eq(&p[i], &q[i]);
	OK(dg_read_object(&r, g.point, &pt, NULL));
	OK(dg_read_objects(&r, g.person, q, sizeof(q[0]), 1, NULL));
	person_eq(&p[3], &q[0]);

	/* a REF whose body is 128 bytes or more (2-byte length) mid-run */
	char longname[200];
	memset(longname, 'x', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = 0;
	p[1].name.ptr = longname;
	p[1].name.len = (uint32_t)strlen(longname);
	dg_buf_reset(&a);
	dg_writer_init(&w, g.reg, &a);
	OK(dg_write_list_begin(&w, 4));
	OK(dg_write_objects(&w, g.person, p, sizeof(p[0]), 4));
	OK(dg_write_end(&w));
	OK(dg_writer_finish(&w));
	dg_reader_init(&r, g.reg, a.data, a.len);
	OK(dg_read_begin(&r, DG_LIST, &n));
	OK(dg_read_objects(&r, g.person, q, sizeof(q[0]), 4, NULL));
	for (int i = 0; i < 4; i++)
		person_eq(&p[i], &q[i]);

	/* top level (no scope) and bad arguments */
	dg_buf_reset(&a);
	dg_writer_init(&w, g.reg, &a);
	OK(dg_write_objects(&w, g.person, p, sizeof(p[0]), 3));
	OK(dg_writer_finish(&w));
	dg_reader_init(&r, g.reg, a.data, a.len);
	OK(dg_read_objects(&r, g.person, q, sizeof(q[0]), 3, NULL));
	for (int i = 0; i < 3; i++)
		person_eq(&p[i], &q[i]);
	dg_writer_init(&w, g.reg, &a);
	EXPECT(dg_write_objects(&w, g.person, p, sizeof(p[0]) - 1, 3), DG_ERR_INVAL);
	EXPECT(dg_read_objects(&r, g.person, q, sizeof(q[0]) - 1, 1, NULL), DG_ERR_INVAL);

	/* more objects than the list declared: STATE, like dg_write_object */
	dg_buf_reset(&a);
	dg_writer_init(&w, g.reg, &a);
	OK(dg_write_list_begin(&w, 2));
	EXPECT(dg_write_objects(&w, g.person, p, sizeof(p[0]), 3), DG_ERR_STATE);
	dg_buf_free(&a);
	dg_buf_free(&b);
}

static void test_stream_list_of_objects(void **state)
{
	enum { N = 100 };
	person_t p[N], q;
	dg_buf one, b;
	dg_writer w;
	dg_reader r;
	dg_value v;
	size_t standalone = 0;
	char names[N][16];

	dg_buf_init(&one);
	dg_buf_init(&b);
	for (int i = 0; i < N; i++) {
		snprintf(names[i], sizeof(names[i]), "name-%d", i);
		p[i] = person_make(1000 + i * 7919, names[i], i * 0.5, 1767225600000 + i);
		enc_object(&one, g.person, &p[i]);
		standalone += one.len;
	}
	dg_writer_init(&w, g.reg, &b);
	OK(dg_write_list_begin(&w, N));
	for (int i = 0; i < N; i++)
		OK(dg_write_object(&w, g.person, &p[i]));
	OK(dg_write_end(&w));
	OK(dg_writer_finish(&w));
	assert_true(b.len + N * 3 <= standalone);

	/* tags: DEF first, then REF 0 for every later object */
	dg_reader_init(&r, g.reg, b.data, b.len);
	next_is(&r, &v, DG_LIST);
	for (int i = 0; i < N; i++) {
		uint8_t tag = *r.r_p;
		/* person 0's score is 0.0, but a default writer writes the
		 * plain form (FORMAT.md "Zero form": opt-in) */
		assert_int_equal(tag, i == 0 ? 0x16 : 0x80);
		memset(&q, 0, sizeof(q));
		OK(dg_read_object(&r, g.person, &q, NULL));
		person_eq(&p[i], &q);
	}
	EXPECT(dg_read_next(&r, &v), DG_ERR_STATE);
	assert_int_equal(dg_reader_lookups(&r), 1);

	/* the same through dg_read_next */
	dg_reader_init(&r, g.reg, b.data, b.len);
	next_is(&r, &v, DG_LIST);
	assert_int_equal(v.v.coll.count, N);
	for (int i = 0; i < N; i++) {
		dg_value f;
		next_is(&r, &v, DG_OBJECT);
		OK(dg_bobj_get_name(&v.v.obj, "id", &f));
		assert_int_equal(f.v.i, p[i].id);
	}
	assert_int_equal(dg_reader_lookups(&r), 1);
	OK(dg_validate(g.reg, b.data, b.len));
	dg_buf_free(&one);
	dg_buf_free(&b);
}

static void test_stream_two_types(void **state)
{
	person_t p = person_make(1, "p", 1.0, 1), pq;
	point_t pt = { 1.0, 2.0, false, 3, 4, 5.0f, { { 0 } } }, ptq;
	/* the point's flag and uuid are zero, but a default writer writes
	 * the plain form: no zero-form twins (FORMAT.md "Zero form") */
	static const uint8_t want_tags[] = { 0x16, 0x16, 0x80, 0x81, 0x80, 0x81 };
	dg_buf b;
	dg_writer w;
	dg_reader r;
	dg_value v;

	dg_buf_init(&b);
	dg_writer_init(&w, g.reg, &b);
	OK(dg_write_list_begin(&w, 6));
	for (int i = 0; i < 6; i++) {
		p.id = i;
		pt.k = (int16_t)i;
		if (i % 2 == 0)
			OK(dg_write_object(&w, g.person, &p));
		else
			OK(dg_write_object(&w, g.point, &pt));
	}
	OK(dg_write_end(&w));
	OK(dg_writer_finish(&w));
	OK(dg_validate(g.reg, b.data, b.len));

	dg_reader_init(&r, g.reg, b.data, b.len);
	next_is(&r, &v, DG_LIST);
	for (int i = 0; i < 6; i++) {
		assert_int_equal(*r.r_p, want_tags[i]);
		if (i % 2 == 0) {
			OK(dg_read_object(&r, g.person, &pq, NULL));
			assert_int_equal(pq.id, i);
		} else {
			OK(dg_read_object(&r, g.point, &ptq, NULL));
			assert_int_equal(ptq.k, i);
		}
	}
	assert_int_equal(dg_reader_lookups(&r), 2);

	/* a reader that tries one type, then the other: a failed
	 * dg_read_object leaves the reader where it was */
	dg_reader_init(&r, g.reg, b.data, b.len);
	next_is(&r, &v, DG_LIST);
	for (int i = 0; i < 6; i++) {
		dg_err e = dg_read_object(&r, g.point, &ptq, NULL);
		if (e == DG_ERR_TYPE_MISMATCH) {
			OK(dg_read_object(&r, g.person, &pq, NULL));
			assert_int_equal(i % 2, 0);
			assert_int_equal(pq.id, i);
		} else {
			OK(e);
			assert_int_equal(i % 2, 1);
			assert_int_equal(ptq.k, i);
		}
	}
	EXPECT(dg_read_next(&r, &v), DG_ERR_STATE);

	/* REF to an index the scope has not defined */
	{
		uint8_t *at = b.data + 2;
		dg_value x;
		/* first element: turn the DEF into REF 0 */
		uint8_t save = *at;
		*at = 0x80;
		EXPECT(dg_validate(g.reg, b.data, b.len), DG_ERR_UNKNOWN_SCHEMA);
		dg_reader_init(&r, g.reg, b.data, b.len);
		next_is(&r, &v, DG_LIST);
		EXPECT(dg_read_next(&r, &x), DG_ERR_UNKNOWN_SCHEMA);
		*at = save;
	}
	dg_buf_free(&b);
}

static void test_stream_nested_scopes(void **state)
{
	person_t p = person_make(5, "n", 1, 2), q;
	dg_buf b;
	dg_writer w;
	dg_reader r;
	dg_value v;
	/* list[P, list[P, P], P, map{"k": P}, sorted_set{P}] */
	static const uint8_t want[] = { 0x16, 0x0F, 0x16, 0x80, 0x80, 0x12, 0x09, 0x16, 0x11, 0x14 };
	uint64_t scoped_lookups = 0;

	dg_buf_init(&b);
	dg_writer_init(&w, g.reg, &b);
	dg_write_list_begin(&w, 5);
	dg_write_object(&w, g.person, &p);
	dg_write_list_begin(&w, 2);
	dg_write_object(&w, g.person, &p);
	dg_write_object(&w, g.person, &p);
	dg_write_end(&w);
	dg_write_object(&w, g.person, &p);
	dg_write_map_begin(&w, 1);
	dg_write_str(&w, "k", 1);
	dg_write_object(&w, g.person, &p);
	dg_write_end(&w);
	dg_write_sorted_set_begin(&w, 1);
	dg_write_object(&w, g.person, &p);
	dg_write_end(&w);
	dg_write_end(&w);
	OK(dg_writer_finish(&w));
	OK(dg_validate(g.reg, b.data, b.len));

	dg_reader_init(&r, g.reg, b.data, b.len);
	next_is(&r, &v, DG_LIST);
	for (size_t i = 0; i < sizeof(want); i++) {
		assert_int_equal(*r.r_p, want[i]);
		if (want[i] == 0x11) /* the scoped part ends here */
			scoped_lookups = dg_reader_lookups(&r);
		if (want[i] == 0x0F || want[i] == 0x12 || want[i] == 0x11 || want[i] == 0x09) {
			OK(dg_read_next(&r, &v));
		} else {
			memset(&q, 0, sizeof(q));
			OK(dg_read_object(&r, g.person, &q, NULL));
			person_eq(&p, &q);
		}
	}
	EXPECT(dg_read_next(&r, &v), DG_ERR_STATE);
	/* one DEF per scope: outer list, inner list, map */
	assert_int_equal(scoped_lookups, 3);
	/* the sorted set's OBJ is self-contained: at least one more lookup */
	assert_true(dg_reader_lookups(&r) > 3);

	/* the inner list cannot refer to the outer scope's schemas */
	{
		uint8_t *inner_list = find_bytes(b.data + 3, b.len - 3,
		    (const uint8_t[]){ 0x0F, 0x02, 0x16 }, 3);
		assert_non_null(inner_list);
		inner_list[2] = 0x80;
		EXPECT(dg_validate(g.reg, b.data, b.len), DG_ERR_UNKNOWN_SCHEMA);
		inner_list[2] = 0x16;
	}
	/* no REF inside a sorted container (it is the last value) */
	{
		dg_buf one;
		dg_buf_init(&one);
		enc_object(&one, g.person, &p);
		uint8_t *obj = b.data + b.len - one.len;
		dg_buf_free(&one);
		assert_int_equal(obj[0], 0x14);
		obj[0] = 0x80;
		EXPECT(dg_validate(g.reg, b.data, b.len), DG_ERR_BAD_TAG);
		obj[0] = 0x14;
	}
	dg_buf_free(&b);
}

/* More than DG_SCOPE_MAX schemas in one scope. */
static void test_stream_scope_overflow(void **state)
{
	enum { N = DG_SCOPE_MAX + 1 };
	dg_builder *bl[N];
	dg_buf b;
	dg_writer w;
	dg_reader r;
	dg_value v;
	char name[16];

	dg_buf_init(&b);
	dg_writer_init(&w, g.reg, &b);
	OK(dg_write_list_begin(&w, N + 1));
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof(name), "Sc%d", i);
		OK(dg_builder_create(g.reg, name, &bl[i]));
		v = val_i64(i);
		OK(dg_builder_set(bl[i], "v", &v));
		OK(dg_builder_write(bl[i], &w));
	}
	OK(dg_builder_write(bl[0], &w)); /* index 0 is still defined */
	OK(dg_write_end(&w));
	OK(dg_writer_finish(&w));
	OK(dg_validate(g.reg, b.data, b.len));

	dg_reader_init(&r, g.reg, b.data, b.len);
	next_is(&r, &v, DG_LIST);
	uint8_t *last_obj = NULL;
	for (int i = 0; i <= N; i++) {
		uint8_t tag = *r.r_p;
		if (i < DG_SCOPE_MAX)
			assert_int_equal(tag, 0x16);
		else if (i == DG_SCOPE_MAX)
			assert_int_equal(tag, 0x14); /* table full: self-contained */
		else
			assert_int_equal(tag, 0x80);
		if (i == DG_SCOPE_MAX)
			last_obj = (uint8_t *)r.r_p;
		dg_value f;
		next_is(&r, &v, DG_OBJECT);
		OK(dg_bobj_get_name(&v.v.obj, "v", &f));
		assert_int_equal(f.v.i, i == N ? 0 : i);
	}
	assert_int_equal(dg_reader_lookups(&r), N);
	/* a 65th DEF is refused */
	*last_obj = 0x16;
	EXPECT(dg_validate(g.reg, b.data, b.len), DG_ERR_LIMIT);
	dg_reader_init(&r, g.reg, b.data, b.len);
	next_is(&r, &v, DG_LIST);
	for (int i = 0; i < DG_SCOPE_MAX; i++)
		next_is(&r, &v, DG_OBJECT);
	EXPECT(dg_read_next(&r, &v), DG_ERR_LIMIT);
	for (int i = 0; i < N; i++)
		dg_builder_destroy(bl[i]);
	dg_buf_free(&b);
}

/* ========================================================================
 * 9. No allocation per operation
 * ======================================================================== */

static void test_no_alloc_per_op(void **state)
{
	alignas(16) static uint8_t mem[2048];
	person_t p = person_make(12345678, "alice-smith", 98.5, 1767225600000), q;
	wide_t wd, wq;
	dg_buf b;
	dg_writer w;
	dg_reader r;
	dg_value v;
	dg_bobj o;
	dg_arena a;
	dgi_alloc_stats s0, s1;
	uint32_t count;

	dg_buf_init(&b);
	wide_fill(&wd, 1);
	for (int round = 0; round < 2; round++) {
		int n = round == 0 ? 1 : 1000;
		if (round == 1)
			dgi_alloc_get_stats(&s0);
		for (int i = 0; i < n; i++) {
			/* the small object */
			dg_buf_reset(&b);
			dg_writer_init(&w, g.reg, &b);
			OK(dg_write_object(&w, g.person, &p));
			OK(dg_writer_finish(&w));
			OK(dg_decode_object(g.reg, g.person, b.data, b.len, &q, NULL));
			dg_arena_init(&a, mem, sizeof(mem));
			OK(dg_decode_object(g.reg, g.person, b.data, b.len, &q, &a));
			OK(dg_bobj_open(g.reg, b.data, b.len, &o));
			OK(dg_bobj_get_name(&o, "name", &v));
			OK(dg_validate(g.reg, b.data, b.len));
			/* a list of objects */
			dg_buf_reset(&b);
			dg_writer_init(&w, g.reg, &b);
			OK(dg_write_list_begin(&w, 20));
			for (int k = 0; k < 20; k++)
				OK(dg_write_object(&w, g.person, &p));
			OK(dg_write_end(&w));
			OK(dg_writer_finish(&w));
			dg_reader_init(&r, g.reg, b.data, b.len);
			OK(dg_read_begin(&r, DG_LIST, &count));
			for (uint32_t k = 0; k < count; k++)
				OK(dg_read_object(&r, g.person, &q, NULL));
			OK(dg_validate(g.reg, b.data, b.len));
			/* every field kind */
			dg_buf_reset(&b);
			dg_writer_init(&w, g.reg, &b);
			OK(dg_write_object(&w, g.wide, &wd));
			OK(dg_writer_finish(&w));
			OK(dg_decode_object(g.reg, g.wide, b.data, b.len, &wq, NULL));
			OK(dg_bobj_open(g.reg, b.data, b.len, &o));
			OK(walk_fields(&o));
		}
	}
	dgi_alloc_get_stats(&s1);
	assert_int_equal(s1.allocs, s0.allocs);
	assert_int_equal(s1.failed, s0.failed);
	assert_int_equal(s1.frees, s0.frees);
	person_eq(&p, &q);
	wide_eq(&wd, &wq);
	dg_buf_free(&b);
}

/* ========================================================================
 * 10. Allocation failure at every point
 * ======================================================================== */

#define MAX_FAIL_ROUNDS 10000

static void test_nomem_registry_create(void **state)
{
	dgi_alloc_stats a0, a1, base;
	dg_registry *reg = NULL;
	dg_err e;
	uint64_t n;

	dgi_alloc_get_stats(&base);
	for (n = 1;; n++) {
		assert_true(n < MAX_FAIL_ROUNDS);
		dgi_alloc_get_stats(&a0);
		dgi_alloc_fail_nth(n);
		e = dg_registry_create(&reg);
		dgi_alloc_fail_nth(0);
		dgi_alloc_get_stats(&a1);
		if (e == DG_OK)
			break;
		EXPECT(e, DG_ERR_NOMEM);
		assert_int_equal(a1.failed, a0.failed + 1);
		/* everything allocated before the failure was freed */
		assert_int_equal(a1.allocs - a0.allocs, a1.frees - a0.frees);
	}
	assert_true(n > 1);
	/* the registry works (a buffer with headroom: no scratch allocation) */
	{
		uint8_t mem[256];
		dg_buf b;
		dg_writer w;
		const dg_desc *d;
		person_t p = person_make(1, "ok", 1, 1), q;
		OK(dg_registry_register(reg, &person_def, &d));
		dg_buf_init_fixed(&b, mem, sizeof(mem));
		dg_writer_init(&w, reg, &b);
		OK(dg_write_object(&w, d, &p));
		OK(dg_decode_object(reg, d, b.data, b.len, &q, NULL));
		person_eq(&p, &q);
	}
	dg_registry_destroy(reg);
	dgi_alloc_get_stats(&a1);
	assert_int_equal(a1.allocs - base.allocs, a1.frees - base.frees);
}

/* Registers def with the n-th allocation failing, n = 1, 2, ... until it
 * succeeds; every failure must be DG_ERR_NOMEM and leave the type and
 * schema unknown. */
static void register_until_ok(dg_registry *reg, const dg_type_def *def,
    bool new_type)
{
	dg_registry_stats s0, s1;
	const dg_desc *d;
	dg_err e;
	for (uint64_t n = 1;; n++) {
		assert_true(n < MAX_FAIL_ROUNDS);
		dg_registry_get_stats(reg, &s0);
		dgi_alloc_fail_nth(n);
		e = dg_registry_register(reg, def, &d);
		dgi_alloc_fail_nth(0);
		if (e == DG_OK)
			break;
		EXPECT(e, DG_ERR_NOMEM);
		dg_registry_get_stats(reg, &s1);
		assert_int_equal(s1.types, s0.types);
		assert_int_equal(s1.schemas, s0.schemas);
		if (new_type)
			assert_null(dg_registry_find(reg, dg_type_id(def->name)));
	}
	assert_ptr_equal(dg_registry_find_schema(reg, dg_type_id(def->name),
	    dg_desc_schema_id(d)), d);
	assert_true(dg_desc_is_registered(d));
}

static void test_nomem_register(void **state)
{
	static char names[48][8];
	static dg_field_def f[48][2];
	dg_type_def t[48];
	dgi_alloc_stats base, a1;
	dg_registry *reg;
	static struct hookrec h;

	for (int hooked = 0; hooked < 2; hooked++) {
		dgi_alloc_get_stats(&base);
		OK(dg_registry_create(&reg));
		if (hooked) {
			memset(&h, 0, sizeof(h));
			h.reg = reg;
			dg_registry_set_hook(reg, hook_fn, &h);
		}
		register_until_ok(reg, &person_def, true);
		register_until_ok(reg, &inner_def, true);
		register_until_ok(reg, &wide_def, true);
		/* a second schema of a known type */
		{
			static const dg_field_def sub[] = {
				{ "id", DG_I64, DG_NULL, NULL, DG_UNBOUND, 0 },
				{ "extra", DG_BOOL, DG_NULL, NULL, DG_UNBOUND, 0 },
			};
			dg_type_def ts = { "Person", sub, 2, 0 };
			register_until_ok(reg, &ts, false);
		}
		/* enough types to grow the type table several times */
		for (int i = 0; i < 48; i++) {
			snprintf(names[i], sizeof(names[i]), "Nm%d", i);
			f[i][0] = (dg_field_def){ "a", DG_I64, DG_NULL, NULL, DG_UNBOUND, 0 };
			f[i][1] = (dg_field_def){ "b", DG_STRING, DG_NULL, NULL, DG_UNBOUND, 0 };
			t[i] = (dg_type_def){ names[i], f[i], 2, 0 };
			register_until_ok(reg, &t[i], true);
		}
		for (int i = 0; i < 48; i++)
			assert_non_null(dg_registry_find(reg, dg_type_id(names[i])));
		/* the registry still works */
		{
			uint8_t mem[256];
			dg_buf b;
			dg_writer w;
			person_t p = person_make(2, "still", 1, 1), q;
			const dg_desc *d = dg_registry_find(reg, dg_type_id("Person"));
			dg_buf_init_fixed(&b, mem, sizeof(mem));
			dg_writer_init(&w, reg, &b);
			OK(dg_write_object(&w, d, &p));
			OK(dg_decode_object(reg, d, b.data, b.len, &q, NULL));
			person_eq(&p, &q);
		}
		dg_registry_destroy(reg);
		dgi_alloc_get_stats(&a1);
		/* nothing leaked (no reallocs on these paths: counts balance) */
		assert_int_equal(a1.allocs - base.allocs, a1.frees - base.frees);
	}
}

static void test_nomem_builder(void **state)
{
	enum { NF = 12 };
	static char names[NF][8];
	dg_registry *reg;
	dg_builder *b = NULL, *b2 = NULL;
	dg_buf buf;
	dg_writer w;
	dg_bobj o;
	dg_value v;
	dg_err e;
	uint64_t n;

	OK(dg_registry_create(&reg));
	for (n = 1;; n++) {
		assert_true(n < MAX_FAIL_ROUNDS);
		dgi_alloc_fail_nth(n);
		e = dg_builder_create(reg, "NmB", &b);
		dgi_alloc_fail_nth(0);
		if (e == DG_OK)
			break;
		EXPECT(e, DG_ERR_NOMEM);
	}
	for (int i = 0; i < NF; i++) {
		snprintf(names[i], sizeof(names[i]), "field%d", i);
		v = (i % 2) ? val_str(names[i]) : val_i64(i * 11);
		for (n = 1;; n++) {
			assert_true(n < MAX_FAIL_ROUNDS);
			dgi_alloc_fail_nth(n);
			e = dg_builder_set(b, names[i], &v);
			dgi_alloc_fail_nth(0);
			if (e == DG_OK)
				break;
			EXPECT(e, DG_ERR_NOMEM);
		}
	}
	for (n = 1;; n++) {
		assert_true(n < MAX_FAIL_ROUNDS);
		dg_buf_init(&buf);
		dg_writer_init(&w, reg, &buf);
		dgi_alloc_fail_nth(n);
		e = dg_builder_write(b, &w);
		dgi_alloc_fail_nth(0);
		if (e == DG_OK)
			break;
		EXPECT(e, DG_ERR_NOMEM);
		EXPECT(dg_writer_finish(&w), DG_ERR_NOMEM);
		dg_buf_free(&buf);
	}
	OK(dg_writer_finish(&w));
	OK(dg_bobj_open(reg, buf.data, buf.len, &o));
	assert_int_equal(dg_desc_nfields(o.desc), NF);
	for (int i = 0; i < NF; i++) {
		OK(dg_bobj_get_name(&o, names[i], &v));
		if (i % 2)
			assert_memory_equal(v.v.str.ptr, names[i], strlen(names[i]));
		else
			assert_int_equal(v.v.i, i * 11);
	}
	/* load into another builder, every allocation failing in turn */
	OK(dg_builder_create(reg, "NmB", &b2));
	for (n = 1;; n++) {
		assert_true(n < MAX_FAIL_ROUNDS);
		dgi_alloc_fail_nth(n);
		e = dg_builder_load(b2, &o);
		dgi_alloc_fail_nth(0);
		if (e == DG_OK)
			break;
		EXPECT(e, DG_ERR_NOMEM);
	}
	{
		dg_buf buf2;
		dg_buf_init(&buf2);
		dg_writer_init(&w, reg, &buf2);
		OK(dg_builder_write(b2, &w));
		OK(dg_writer_finish(&w));
		assert_int_equal(buf2.len, buf.len);
		assert_memory_equal(buf2.data, buf.data, buf.len);
		dg_buf_free(&buf2);
	}
	dg_builder_destroy(b2);
	dg_builder_destroy(b);
	dg_buf_free(&buf);
	dg_registry_destroy(reg);
}

static void test_nomem_buf(void **state)
{
	static char big[5000];
	dg_buf b;
	dg_writer w;
	wide_t wd, wq;
	uint64_t n;
	dg_err e;

	memset(big, 'q', sizeof(big));
	dg_buf_init(&b);
	dgi_alloc_fail_nth(1);
	EXPECT(dg_buf_reserve(&b, 100), DG_ERR_NOMEM);
	dgi_alloc_fail_nth(0);
	assert_null(b.data);
	assert_int_equal(b.cap, 0);
	assert_int_equal(b.len, 0);
	OK(dg_buf_reserve(&b, 10));
	assert_true(b.cap >= 10);

	/* growth failing in the writer keeps what was written */
	dg_writer_init(&w, g.reg, &b);
	OK(dg_write_str(&w, "abc", 3));
	size_t len = b.len;
	dgi_alloc_fail_nth(1);
	EXPECT(dg_write_str(&w, big, sizeof(big)), DG_ERR_NOMEM);
	dgi_alloc_fail_nth(0);
	assert_int_equal(b.len, len);
	assert_memory_equal(b.data, "\x09\x03" "abc", 5);
	EXPECT(dg_write_i64(&w, 1), DG_ERR_NOMEM); /* sticky */
	EXPECT(dg_writer_finish(&w), DG_ERR_NOMEM);
	dg_writer_reset(&w);
	OK(dg_write_str(&w, big, sizeof(big)));
	OK(dg_writer_finish(&w));
	OK(dg_validate(g.reg, b.data, b.len));
	dg_buf_free(&b);
	assert_null(b.data);

	/* an object and a list of objects, every growth failing in turn */
	wide_fill(&wd, 0);
	for (n = 1;; n++) {
		assert_true(n < MAX_FAIL_ROUNDS);
		dg_buf_init(&b);
		dg_writer_init(&w, g.reg, &b);
		dgi_alloc_fail_nth(n);
		dg_write_list_begin(&w, 3);
		dg_write_object(&w, g.wide, &wd);
		dg_write_str(&w, big, sizeof(big));
		dg_write_object(&w, g.wide, &wd);
		dg_write_end(&w);
		e = dg_writer_finish(&w);
		dgi_alloc_fail_nth(0);
		if (e == DG_OK)
			break;
		EXPECT(e, DG_ERR_NOMEM);
		dg_buf_free(&b);
	}
	assert_true(n > 2);
	{
		dg_reader r;
		uint32_t count;
		dg_str s;
		dg_reader_init(&r, g.reg, b.data, b.len);
		OK(dg_read_begin(&r, DG_LIST, &count));
		OK(dg_read_object(&r, g.wide, &wq, NULL));
		wide_eq(&wd, &wq);
		OK(dg_read_str(&r, &s, NULL));
		assert_int_equal(s.len, sizeof(big));
		OK(dg_read_object(&r, g.wide, &wq, NULL));
		wide_eq(&wd, &wq);
	}
	dg_buf_free(&b);
}

/* ========================================================================
 * 11. Hostile input
 * ======================================================================== */

#define CORPUS_MAX 48
typedef struct corpus {
	int n;
	uint8_t *p[CORPUS_MAX];
	size_t len[CORPUS_MAX];
} corpus_t;

static void corpus_add(corpus_t *c, const dg_buf *b)
{
	assert_true(c->n < CORPUS_MAX);
	c->p[c->n] = malloc(b->len);
	assert_non_null(c->p[c->n]);
	memcpy(c->p[c->n], b->data, b->len);
	c->len[c->n] = b->len;
	c->n++;
}

static void corpus_free(corpus_t *c)
{
	for (int i = 0; i < c->n; i++)
		free(c->p[i]);
	c->n = 0;
}

/* Builder objects of type Evo with the extra field "c" (schema OBJ_S). */
static void write_evo_c(dg_writer *w, int64_t a)
{
	dg_builder *bl;
	dg_value v;
	OK(dg_builder_create(g.reg, "Evo", &bl));
	v = val_i64(a);
	OK(dg_builder_set(bl, "a", &v));
	v = val_str("bee");
	OK(dg_builder_set(bl, "b", &v));
	v.kind = DG_I32;
	v.v.i = -a;
	OK(dg_builder_set(bl, "c", &v));
	OK(dg_builder_write(bl, w));
	dg_builder_destroy(bl);
}

/* Builder objects of type Zs {a, z double} in a second schema of the type
 * (its primary is {a}): z = 0.0 makes OBJ_SZ / DEF_SZ. */
static void write_zs(dg_writer *w, double z)
{
	dg_builder *bl;
	dg_value v;
	OK(dg_builder_create(g.reg, "Zs", &bl));
	if (dg_registry_find(g.reg, dg_type_id("Zs")) == NULL) {
		dg_buf tmp;
		dg_writer tw;
		dg_buf_init(&tmp);
		dg_writer_init(&tw, g.reg, &tmp);
		v = val_i64(0);
		OK(dg_builder_set(bl, "a", &v));
		OK(dg_builder_write(bl, &tw)); /* registers the primary {a} */
		dg_buf_free(&tmp);
	}
	v = val_i64(7);
	OK(dg_builder_set(bl, "a", &v));
	v.kind = DG_DOUBLE;
	v.v.d = z;
	OK(dg_builder_set(bl, "z", &v));
	OK(dg_builder_write(bl, w));
	dg_builder_destroy(bl);
}

/* At least 30 valid single values covering every tag. */
static void corpus_build(corpus_t *c)
{
	static const bool bo[] = { true, false, true };
	static const int8_t i8s[] = { -1, 2 };
	static const int16_t i16s[] = { -300, 300 };
	static const int64_t i64s[] = { INT64_MIN, 5 };
	static const float fs[] = { 1.5f, -0.0f };
	static char s300[300];
	person_t p = person_make(12345678, "alice-smith", 98.5, 1767225600000);
	person_t p2 = person_make(-1, "", -0.0, 0);
	point_t pt = { 1.0, -2.0, true, 7, -8, 0.5f, { { 1, 2, 3 } } };
	tri_t tr = { { "x", 1 }, { NULL, 0 }, { "zz", 2 } };
	wide_t wd;
	dg_uuid u;
	dg_buf b;
	dg_writer w;

	memset(s300, 's', sizeof(s300));
	for (int i = 0; i < 16; i++)
		u.b[i] = (uint8_t)(i * 31);
	wide_fill(&wd, 1);
	dg_buf_init(&b);
#define ADD(...)                                    \
	do {                                            \
		dg_buf_reset(&b);                           \
		dg_writer_init(&w, g.reg, &b);              \
		__VA_ARGS__;                                \
		OK(dg_writer_finish(&w));                   \
		corpus_add(c, &b);                          \
	} while (0)
	ADD(dg_write_null(&w));
	ADD(dg_write_bool(&w, false));
	ADD(dg_write_bool(&w, true));
	ADD(dg_write_i8(&w, -7));
	ADD(dg_write_i16(&w, -300));
	ADD(dg_write_i32(&w, INT32_MIN));
	ADD(dg_write_i64(&w, INT64_MAX));
	ADD(dg_write_float(&w, 1.5f));
	ADD(dg_write_double(&w, -0.0));
	ADD(dg_write_str(&w, g_utf8, strlen(g_utf8)));
	ADD(dg_write_bytes(&w, g_blob, sizeof(g_blob)));
	ADD(dg_write_uuid(&w, &u));
	ADD(dg_write_timestamp(&w, (dg_timestamp){ -1767225600000, 999 }));
	ADD(dg_write_enum(&w, dg_type_id("Color"), 300));
	ADD(dg_write_array(&w, DG_I32, g_i32s, 4));
	ADD(dg_write_array(&w, DG_BOOL, bo, 3));
	ADD(dg_write_array(&w, DG_DOUBLE, g_dbls, 3));
	ADD(dg_write_list_begin(&w, 4), dg_write_i64(&w, 1), dg_write_str(&w, "two", 3),
	    dg_write_null(&w), dg_write_double(&w, 2.5), dg_write_end(&w));
	ADD(dg_write_set_begin(&w, 2), dg_write_str(&w, "a", 1), dg_write_str(&w, "b", 1),
	    dg_write_end(&w));
	ADD(dg_write_sorted_set_begin(&w, 3), dg_write_i64(&w, -1), dg_write_i8(&w, 5),
	    dg_write_i32(&w, 300), dg_write_end(&w));
	ADD(dg_write_map_begin(&w, 2), dg_write_str(&w, "a", 1), dg_write_i64(&w, 1),
	    dg_write_str(&w, "b", 1), dg_write_str(&w, "x", 1), dg_write_end(&w));
	ADD(dg_write_sorted_map_begin(&w, 2), dg_write_str(&w, "a", 1),
	    dg_write_list_begin(&w, 2), dg_write_i64(&w, 1), dg_write_i64(&w, 2),
	    dg_write_end(&w), dg_write_str(&w, "b", 1), dg_write_null(&w), dg_write_end(&w));
	ADD(dg_write_object(&w, g.person, &p));
	ADD(dg_write_object(&w, g.wide, &wd));
	ADD(dg_write_object(&w, g.point, &pt));
	ADD(write_evo_c(&w, 42));                               /* OBJ_S */
	ADD(dg_write_list_begin(&w, 3), dg_write_object(&w, g.person, &p),
	    dg_write_object(&w, g.person, &p2), dg_write_object(&w, g.person, &p),
	    dg_write_end(&w));
	ADD(dg_write_list_begin(&w, 4), dg_write_object(&w, g.person, &p),
	    dg_write_object(&w, g.point, &pt), dg_write_object(&w, g.person, &p2),
	    dg_write_object(&w, g.point, &pt), dg_write_end(&w));
	ADD(dg_write_list_begin(&w, 2), write_evo_c(&w, 1), write_evo_c(&w, 2),
	    dg_write_end(&w));                                  /* DEF_S, REF */
	ADD(dg_write_map_begin(&w, 2), dg_write_str(&w, "p", 1),
	    dg_write_object(&w, g.person, &p), dg_write_str(&w, "q", 1),
	    dg_write_object(&w, g.person, &p2), dg_write_end(&w));
	ADD(dg_write_list_begin(&w, 3), dg_write_object(&w, g.person, &p),
	    dg_write_list_begin(&w, 2), dg_write_object(&w, g.point, &pt),
	    dg_write_object(&w, g.person, &p), dg_write_end(&w),
	    dg_write_object(&w, g.person, &p2), dg_write_end(&w));
	ADD(dg_write_sorted_map_begin(&w, 2), dg_write_i64(&w, 1),
	    dg_write_object(&w, g.person, &p), dg_write_i64(&w, 2),
	    dg_write_object(&w, g.person, &p2), dg_write_end(&w));
	ADD(dg_write_list_begin(&w, 5), dg_write_array(&w, DG_I8, i8s, 2),
	    dg_write_array(&w, DG_I16, i16s, 2), dg_write_array(&w, DG_I64, i64s, 2),
	    dg_write_array(&w, DG_FLOAT, fs, 2), dg_write_array(&w, DG_BOOL, bo, 0),
	    dg_write_end(&w));
	ADD(for (int k = 0; k < 10; k++) dg_write_list_begin(&w, 1);
	    dg_write_str(&w, "deep", 4);
	    for (int k = 0; k < 10; k++) dg_write_end(&w));
	{
		wide_t w300 = wd;
		w300.s.ptr = s300;
		w300.s.len = sizeof(s300);
		ADD(dg_write_object(&w, g.wide, &w300));          /* 2-byte footer */
	}
	ADD(dg_write_list_begin(&w, 2), dg_write_object(&w, g.wide, &wd),
	    dg_write_object(&w, g.wide, &wd), dg_write_end(&w));
	ADD(dg_write_list_begin(&w, 40);
	    for (int k = 0; k < 40; k++) dg_write_i64(&w, (int64_t)k * k * k * 1000);
	    dg_write_end(&w));
	ADD(dg_write_object(&w, g.tri, &tr));
	ADD(dg_write_set_begin(&w, 2), dg_write_object(&w, g.inner, &wd.in),
	    dg_write_object(&w, g.inner, &wd.in), dg_write_end(&w));
	/* the zero form, the writer's mode on: OBJ_Z; DEF_Z, REF, REF_Z;
	 * OBJ_SZ; DEF_SZ, REF_Z */
	{
		person_t pz = person_make(3, "zero", 0.0, 4);
#define ZERO dg_writer_set_zero_form(&w, true)
		ADD(ZERO, dg_write_object(&w, g.person, &pz));
		ADD(ZERO, dg_write_list_begin(&w, 3), dg_write_object(&w, g.person, &pz),
		    dg_write_object(&w, g.person, &p), dg_write_object(&w, g.person, &pz),
		    dg_write_end(&w));
		ADD(ZERO, write_zs(&w, 0.0));
		ADD(ZERO, dg_write_list_begin(&w, 3), write_zs(&w, 0.0),
		    write_zs(&w, 2.0), write_zs(&w, 0.0), dg_write_end(&w));
#undef ZERO
	}
#undef ADD
	dg_buf_free(&b);
}

/* Tags of every value the pull reader meets, containers included. */
static void corpus_tags(const corpus_t *c, bool seen[256])
{
	for (int i = 0; i < c->n; i++) {
		dg_reader r;
		dg_value v;
		dg_reader_init(&r, g.reg, c->p[i], c->len[i]);
		while (dg_reader_left(&r) > 0) {
			/* finished containers are dropped before the next value */
			uint8_t tag = *r.r_p;
			OK(dg_read_next(&r, &v));
			seen[tag] = true;
		}
	}
}

union anyobj {
	person_t p;
	wide_t w;
	point_t pt;
	evo_t e;
	tri_t t;
	inner_t i;
};

/* Everything that reads: must stay in bounds on any input.  When dg_validate
 * accepts the input, the other readers must accept it too. */
static unsigned long hostile_runs;

static void hostile_run(const uint8_t *p, size_t n, const char *what, size_t pos)
{
	alignas(16) static uint8_t mem[1 << 14];
	const dg_desc *ds[] = { g.person, g.wide, g.point, g.evo, g.tri, g.inner };
	union anyobj u;
	dg_arena a;
	dg_bobj o;
	dg_err ev, e;

	hostile_runs++;
	ev = dg_validate(g.reg, p, n);
	e = drain(g.reg, p, n, NULL);
	if (ev == DG_OK && e != DG_OK)
		fail_msg("%s @%zu: validate OK but the reader says %s", what, pos, dg_strerror(e));
	bool whole = dg_bobj_open(g.reg, p, n, &o) == DG_OK;
	if (whole) {
		e = walk_fields(&o);
		if (ev == DG_OK && e != DG_OK)
			fail_msg("%s @%zu: validate OK but a field says %s", what, pos, dg_strerror(e));
	}
	for (size_t k = 0; k < sizeof(ds) / sizeof(ds[0]); k++) {
		e = dg_decode_object(g.reg, ds[k], p, n, &u, NULL);
		if (ev == DG_OK && whole && dg_bobj_type_id(&o) == dg_desc_type_id(ds[k]) &&
		    e != DG_OK)
			fail_msg("%s @%zu: validate OK but decode says %s", what, pos, dg_strerror(e));
		dg_arena_init(&a, mem, sizeof(mem));
		(void)dg_decode_object(g.reg, ds[k], p, n, &u, &a);
	}
	/* the pull reader with dg_read_object on every object it meets */
	{
		dg_reader r;
		dg_value v;
		dg_reader_init(&r, g.reg, p, n);
		for (int steps = 0; steps < 100000 && dg_reader_left(&r) > 0; steps++) {
			uint8_t tag = *r.r_p;
			bool done = false;
			if (tag >= 0x14) {
				for (size_t k = 0; k < sizeof(ds) / sizeof(ds[0]) && !done; k++) {
					dg_arena_init(&a, mem, sizeof(mem));
					done = dg_read_object(&r, ds[k], &u, (k & 1) ? &a : NULL) == DG_OK;
				}
			}
			if (done)
				continue;
			if (dg_read_next(&r, &v) != DG_OK)
				break;
			if (v.kind == DG_OBJECT)
				(void)walk_fields(&v.v.obj);
		}
	}
}

static void test_hostile_corpus_covers_tags(void **state)
{
	corpus_t c = { 0 };
	bool seen[256] = { false };
	corpus_build(&c);
	assert_true(c.n >= 30);
	for (int i = 0; i < c.n; i++) {
		uint32_t nv;
		OK(dg_validate(g.reg, c.p[i], c.len[i]));
		OK(drain(g.reg, c.p[i], c.len[i], &nv));
		assert_true(nv >= 1);
		/* exactly one value each */
		dg_reader r;
		dg_reader_init(&r, g.reg, c.p[i], c.len[i]);
		OK(dg_read_skip(&r));
		assert_int_equal(dg_reader_left(&r), 0);
	}
	corpus_tags(&c, seen);
	for (int t = 0x00; t <= 0x1B; t++)
		if (!seen[t])
			fail_msg("no corpus value has tag 0x%02X", t);
	bool ref = false, ref_z = false;
	for (int t = 0x80; t < 0xC0; t++)
		ref |= seen[t];
	for (int t = 0xC0; t < 0x100; t++)
		ref_z |= seen[t];
	assert_true(ref);
	assert_true(ref_z);
	corpus_free(&c);
}

static void test_hostile_prefixes(void **state)
{
	corpus_t c = { 0 };
	corpus_build(&c);
	for (int i = 0; i < c.n; i++) {
		for (size_t k = 0; k < c.len[i]; k++) {
			/* exact-size copy: ASan sees any read past the end */
			uint8_t *p = malloc(k ? k : 1);
			assert_non_null(p);
			memcpy(p, c.p[i], k);
			dg_err e = dg_validate(g.reg, p, k);
			if (e == DG_OK)
				fail_msg("entry %d: dg_validate accepted a %zu-byte prefix of %zu",
				    i, k, c.len[i]);
			if (k > 0 && drain(g.reg, p, k, NULL) == DG_OK)
				fail_msg("entry %d: the reader accepted a %zu-byte prefix", i, k);
			hostile_run(p, k, "prefix", k);
			free(p);
		}
	}
	corpus_free(&c);
}

static void test_hostile_bitflips(void **state)
{
	/* every single bit, and the whole byte */
	static const uint8_t masks[] = { 0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80, 0xFF };
	corpus_t c = { 0 };
	char what[32];
	size_t total = 0;
	unsigned long runs0 = hostile_runs;
	corpus_build(&c);
	for (int i = 0; i < c.n; i++) {
		total += c.len[i];
		snprintf(what, sizeof(what), "entry %d", i);
		uint8_t *p = malloc(c.len[i]);
		assert_non_null(p);
		for (size_t pos = 0; pos < c.len[i]; pos++)
			for (size_t m = 0; m < sizeof(masks); m++) {
				memcpy(p, c.p[i], c.len[i]);
				p[pos] ^= masks[m];
				hostile_run(p, c.len[i], what, pos);
			}
		free(p);
	}
	assert_int_equal(hostile_runs - runs0, total * sizeof(masks));
	print_message("      %d values, %zu bytes, %lu mutants\n", c.n, total,
	    hostile_runs - runs0);
	corpus_free(&c);
}

struct hcase {
	const char *what;
	const uint8_t *p;
	size_t n;
	dg_err err;
};
#define HC(what, err, ...) { what, (const uint8_t[]){ __VA_ARGS__ }, \
	sizeof((const uint8_t[]){ __VA_ARGS__ }), err }

static void check_case(const char *what, const uint8_t *bytes, size_t n, dg_err err)
{
	uint8_t *p = malloc(n ? n : 1);
	dg_err e;
	assert_non_null(p);
	memcpy(p, bytes, n);
	/* err DG_ERR__COUNT: any error will do */
	e = dg_validate(g.reg, p, n);
	if (err == DG_ERR__COUNT ? e == DG_OK : e != err)
		fail_msg("%s: dg_validate returned %s, expected %s", what,
		    dg_strerror(e), dg_strerror(err));
	e = drain(g.reg, p, n, NULL);
	if (err == DG_ERR__COUNT ? e == DG_OK : e != err)
		fail_msg("%s: the reader returned %s, expected %s", what,
		    dg_strerror(e), dg_strerror(err));
	free(p);
}

/* Integers of every varint length, 1 to 10 bytes, read back by
 * dg_read_i64 (its in-line path) and dg_read_next: alone in their input
 * (no word can be loaded past them) and followed by more bytes (the word
 * at a time path, and its ninth and tenth bytes read one by one).  Then
 * malformed 9- and 10-byte varints, followed by more, must give the
 * errors the byte-by-byte decoder gives. */
/* dgi_write_run / dgi_read_run (the messages' runs of I64 and BYTES) and
 * skip_value's in-line elements against the value-by-value calls and
 * dg_read_next: the same bytes, values, errors and reader positions, in
 * every frame (top level, a LIST with room left or without, a sorted
 * set), with NULL bytes, I32s where an I64 is expected, and every byte of
 * the run corrupted or cut. */
static uint64_t run_rng(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

enum { RUN_TOP, RUN_LIST_EXACT, RUN_LIST_MORE, RUN_SORTED, RUN_FRAMES };

/* Writes ni + nb values in frame `frame` (one more I64 after them where
 * the frame has room), through the run or value by value. */
static dg_err run_write(dg_buf *b, int frame, bool run, const int64_t *v, unsigned ni,
    const dg_bytes *bs, unsigned nb)
{
	dg_writer w;
	dg_writer_init(&w, g.reg, b);
	if (frame == RUN_LIST_EXACT)
		dg_write_list_begin(&w, ni + nb);
	else if (frame == RUN_LIST_MORE)
		dg_write_list_begin(&w, ni + nb + 1);
	else if (frame == RUN_SORTED)
		dg_write_sorted_set_begin(&w, ni + nb);
	dg_err e = DG_OK;
	if (run) {
		e = dgi_write_run(&w, v, ni, bs, nb);
	} else {
		for (unsigned i = 0; i < ni && e == DG_OK; i++)
			e = dg_write_i64(&w, v[i]);
		for (unsigned j = 0; j < nb && e == DG_OK; j++)
			e = dg_write_bytes(&w, bs[j].ptr, bs[j].len);
	}
	if (frame == RUN_LIST_MORE || frame == RUN_TOP)
		dg_write_i64(&w, 7);
	if (frame != RUN_TOP)
		dg_write_end(&w);
	dg_err f = dg_writer_finish(&w);
	return e != DG_OK ? e : f;
}

typedef struct {
	dg_err e, next_e;
	size_t left;
	int64_t v[16];
	dg_bytes b[4];
	dg_value next;
} run_seen;

/* Reads the run (opening the frame first) and then the next value. */
static void run_read(const uint8_t *p, size_t n, int frame, bool run, unsigned ni,
    unsigned nb, run_seen *out)
{
	dg_reader r;
	uint32_t count = 0;
	memset(out, 0, sizeof(*out));
	dg_reader_init(&r, g.reg, p, n);
	dg_err e = DG_OK;
	if (frame != RUN_TOP)
		e = dg_read_begin(&r, frame == RUN_SORTED ? DG_SORTED_SET : DG_LIST, &count);
	if (e == DG_OK) {
		if (run) {
			e = dgi_read_run(&r, out->v, ni, out->b, nb);
		} else {
			for (unsigned i = 0; i < ni && e == DG_OK; i++)
				e = dg_read_i64(&r, &out->v[i]);
			for (unsigned j = 0; j < nb && e == DG_OK; j++)
				e = dg_read_bytes(&r, &out->b[j], NULL);
		}
	}
	out->e = e;
	out->left = dg_reader_left(&r);
	out->next_e = dg_read_next(&r, &out->next);
}

static void run_same(const run_seen *a, const run_seen *b, const char *what, size_t at)
{
	if (a->e != b->e || a->left != b->left || a->next_e != b->next_e ||
	    memcmp(a->v, b->v, sizeof(a->v)) != 0)
		fail_msg("%s (byte %zu): run %s left %zu next %s, values %s left %zu next %s",
		    what, at, dg_strerror(a->e), a->left, dg_strerror(a->next_e),
		    dg_strerror(b->e), b->left, dg_strerror(b->next_e));
	for (unsigned j = 0; j < 4; j++)
		if (a->b[j].len != b->b[j].len || a->b[j].ptr != b->b[j].ptr)
			fail_msg("%s (byte %zu): bytes %u differ", what, at, j);
	if (a->next_e == DG_OK && (a->next.kind != b->next.kind || a->next.v.i != b->next.v.i))
		fail_msg("%s (byte %zu): the value after differs", what, at);
}

/* Every value at p read with dg_read_next (containers opened, their
 * values read): DG_OK when they all read and the buffer ends with every
 * container whole, else the first error. */
static dg_err run_walk(const uint8_t *p, size_t n)
{
	dg_reader r;
	dg_value v;
	dg_reader_init(&r, g.reg, p, n);
	dg_err e = DG_OK;
	while (e == DG_OK)
		e = dg_read_next(&r, &v);
	/* (the end: DG_ERR_STATE at the top level, every container whole) */
	return e == DG_ERR_STATE && dg_reader_left(&r) == 0 ? DG_OK : e;
}

static void test_runs_match_values(void **state)
{
	(void)state;
	static const int64_t pool[] = { 0, 1, -1, 63, -64, 64, 127, 128, 300, -300,
		(int64_t)1 << 31, INT32_MIN, INT64_MAX, INT64_MIN, (int64_t)1 << 55,
		((int64_t)1 << 55) - 1, (int64_t)0x9E3779B97F4A7C15ull, 0x123456789ABCDEF0 };
	static const uint32_t lens[] = { 0, 1, 5, 16, 127, 128, 300 };
	uint8_t data[4][300];
	uint64_t seed = 16;
	for (unsigned j = 0; j < 4; j++)
		for (unsigned k = 0; k < sizeof(data[j]); k++)
			data[j][k] = (uint8_t)run_rng(&seed);
	unsigned checked = 0, fell_back = 0;
	for (int round = 0; round < 600; round++) {
		unsigned ni = (unsigned)(run_rng(&seed) % 13), nb = (unsigned)(run_rng(&seed) % 4);
		int64_t v[16];
		dg_bytes bs[4];
		for (unsigned i = 0; i < ni; i++)
			v[i] = run_rng(&seed) % 3 == 0 ? (int64_t)run_rng(&seed) :
			    pool[run_rng(&seed) % (sizeof(pool) / sizeof(pool[0]))];
		for (unsigned j = 0; j < nb; j++) {
			bs[j].len = lens[run_rng(&seed) % (sizeof(lens) / sizeof(lens[0]))];
			bs[j].ptr = run_rng(&seed) % 8 == 0 ? NULL : data[j];
			if (bs[j].ptr == NULL)
				bs[j].len = 0;
		}
		int frame = (int)(run_rng(&seed) % RUN_FRAMES);
		dg_buf a, b;
		dg_buf_init(&a);
		dg_buf_init(&b);
		dg_err ea = run_write(&a, frame, true, v, ni, bs, nb);
		dg_err eb = run_write(&b, frame, false, v, ni, bs, nb);
		if (ea != eb)
			fail_msg("round %d: the run wrote %s, the values %s", round, dg_strerror(ea),
			    dg_strerror(eb));
		if (ea != DG_OK) { /* (a sorted set's keys out of order: refused alike) */
			assert_int_equal(frame, RUN_SORTED);
			dg_buf_free(&a);
			dg_buf_free(&b);
			continue;
		}
		assert_int_equal(a.len, b.len);
		assert_memory_equal(a.data, b.data, a.len);
		/* a fixed buffer of exactly the size, and one byte short: the
		 * run fills the one and fails in the other as the values do */
		for (size_t cut = 0; cut <= 1 && cut < b.len; cut++) {
			size_t cap = b.len - cut;
			uint8_t *m1 = test_malloc(cap), *m2 = test_malloc(cap);
			dg_buf fa, fb;
			dg_buf_init_fixed(&fa, m1, cap);
			dg_buf_init_fixed(&fb, m2, cap);
			dg_err xa = run_write(&fa, frame, true, v, ni, bs, nb);
			dg_err xb = run_write(&fb, frame, false, v, ni, bs, nb);
			if (xa != xb || fa.len != fb.len || memcmp(m1, m2, fa.len) != 0)
				fail_msg("round %d, fixed buffer of %zu: the run %s (%zu bytes), the values %s (%zu)",
				    round, cap, dg_strerror(xa), fa.len, dg_strerror(xb), fb.len);
			assert_int_equal(xa, cut == 0 ? DG_OK : DG_ERR_NOSPACE);
			test_free(m1);
			test_free(m2);
		}
		/* reading, the encoding whole, then every byte corrupted and cut */
		run_seen x, y;
		run_read(a.data, a.len, frame, true, ni, nb, &x);
		run_read(a.data, a.len, frame, false, ni, nb, &y);
		run_same(&x, &y, "whole", 0);
		if (x.e != DG_OK)
			fail_msg("round %d: a valid run read as %s", round, dg_strerror(x.e));
		static const uint8_t flips[] = { 0x00, 0x05, 0x06, 0x0A, 0x0F, 0x7F, 0x80, 0xFF };
		uint8_t *m = test_malloc(a.len);
		for (size_t at = 0; at < a.len; at++) {
			for (unsigned f = 0; f < sizeof(flips); f++) {
				memcpy(m, a.data, a.len);
				m[at] = flips[f];
				run_read(m, a.len, frame, true, ni, nb, &x);
				run_read(m, a.len, frame, false, ni, nb, &y);
				run_same(&x, &y, "corrupted", at);
				fell_back += x.e != DG_OK;
				checked++;
				/* the skip of the list against reading every element */
				if (frame == RUN_LIST_EXACT || frame == RUN_LIST_MORE) {
					dg_reader r;
					dg_reader_init(&r, g.reg, m, a.len);
					/* skipped: exactly what it skipped reads as values (the
					 * reads check UTF-8, skips leave it); refused: reading
					 * on from the start fails somewhere */
					dg_err es = dg_read_skip(&r);
					dg_err ew = run_walk(m, es == DG_OK ? a.len - dg_reader_left(&r) : a.len);
					if (ew != DG_ERR_UTF8 && (es == DG_OK) != (ew == DG_OK))
						fail_msg("round %d byte %zu = %02x: the skip says %s, reading %s",
						    round, at, flips[f], dg_strerror(es), dg_strerror(ew));
				}
			}
			run_read(a.data, at, frame, true, ni, nb, &x);
			run_read(a.data, at, frame, false, ni, nb, &y);
			run_same(&x, &y, "cut", at);
			checked++;
		}
		test_free(m);
		dg_buf_free(&a);
		dg_buf_free(&b);
	}
	/* the comparisons reached failures, not only clean reads */
	assert_true(checked > 100000);
	assert_true(fell_back > checked / 10);
}

static void test_varint_lengths(void **state)
{
	(void)state;
	int64_t vals[64 * 4 + 4];
	size_t nv = 0;
	for (int k = 0; k < 63; k++) {
		vals[nv++] = (int64_t)1 << k;
		vals[nv++] = ((int64_t)1 << k) - 1;
		vals[nv++] = -((int64_t)1 << k);
		vals[nv++] = -((int64_t)1 << k) - 1;
	}
	vals[nv++] = INT64_MAX;
	vals[nv++] = INT64_MIN;
	vals[nv++] = (int64_t)0x9E3779B97F4A7C15ull; /* a random-looking id */
	vals[nv++] = 0x123456789ABCDEF0;
	for (size_t i = 0; i < nv; i++) {
		for (int pad = 0; pad < 2; pad++) {
			dg_buf b;
			dg_buf_init(&b);
			dg_writer w;
			dg_writer_init(&w, g.reg, &b);
			OK(dg_write_i64(&w, vals[i]));
			if (pad)
				OK(dg_write_i64(&w, -1));
			OK(dg_writer_finish(&w));
			/* the bytes of the byte-at-a-time encoder */
			uint8_t ref[11];
			ref[0] = 0x06;
			size_t nref = (size_t)(dgi_put_uvarint(ref + 1, dgi_zigzag(vals[i])) - ref);
			assert_true(b.len >= nref);
			assert_memory_equal(b.data, ref, nref);
			assert_int_equal(dgi_uvarint_len(dgi_zigzag(vals[i])), nref - 1);
			dg_reader r;
			int64_t x = 0;
			dg_reader_init(&r, g.reg, b.data, b.len);
			OK(dg_read_i64(&r, &x));
			if (x != vals[i])
				fail_msg("dg_read_i64: %lld read as %lld (pad %d)", (long long)vals[i],
				    (long long)x, pad);
			if (pad) {
				OK(dg_read_i64(&r, &x));
				assert_int_equal(x, -1);
			}
			assert_int_equal(dg_reader_left(&r), 0);
			dg_value v;
			dg_reader_init(&r, g.reg, b.data, b.len);
			OK(dg_read_next(&r, &v));
			assert_int_equal(v.kind, DG_I64);
			assert_true(v.v.i == vals[i]);
			dg_buf_free(&b);
		}
	}
	/* malformed, each followed by an i64 so that words load */
	static const struct {
		const char *what;
		uint8_t b[14];
		dg_err err;
	} bad[] = {
		{ "9 bytes, the last 0 (not minimal)",
		    { 0x06, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x06, 0x00, 0x06, 0x00 },
		    DG_ERR_BAD_VARINT },
		{ "10 bytes, the last 0 (not minimal)",
		    { 0x06, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x80, 0x00, 0x06, 0x00, 0x06 },
		    DG_ERR_BAD_VARINT },
		{ "10 bytes, the last 2 (65 bits)",
		    { 0x06, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x02, 0x06, 0x00, 0x06 },
		    DG_ERR_BAD_VARINT },
		{ "11 bytes",
		    { 0x06, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x81, 0x01, 0x06, 0x00 },
		    DG_ERR_BAD_VARINT },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		dg_reader r;
		int64_t x;
		dg_reader_init(&r, g.reg, bad[i].b, sizeof(bad[i].b));
		dg_err e = dg_read_i64(&r, &x);
		if (e != bad[i].err)
			fail_msg("%s: dg_read_i64 returned %s", bad[i].what, dg_strerror(e));
		assert_int_equal(dg_reader_left(&r), sizeof(bad[i].b)); /* nothing consumed */
		check_case(bad[i].what, bad[i].b, sizeof(bad[i].b), bad[i].err);
	}
	/* cut after nine continuing bytes, with nothing after them */
	static const uint8_t cut[] = { 0x06, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF };
	dg_reader r;
	int64_t x;
	dg_reader_init(&r, g.reg, cut, sizeof(cut));
	EXPECT(dg_read_i64(&r, &x), DG_ERR_TRUNCATED);
	check_case("cut after 9 continuing bytes", cut, sizeof(cut), DG_ERR_TRUNCATED);
}

static void test_hostile_targeted(void **state)
{
	const struct hcase cases[] = {
		HC("string cut", DG_ERR_TRUNCATED, 0x09, 0x05, 'a', 'b'),
		HC("double cut", DG_ERR_TRUNCATED, 0x08, 0x00, 0x00),
		HC("varint cut", DG_ERR_TRUNCATED, 0x06, 0x80),
		HC("uuid cut", DG_ERR_TRUNCATED, 0x0B, 0x00),
		HC("enum cut", DG_ERR_TRUNCATED, 0x0D, 0x01, 0x02),
		HC("timestamp cut", DG_ERR_TRUNCATED, 0x0C, 0x02),
		HC("list cut", DG_ERR_TRUNCATED, 0x0F, 0x01, 0x06),
		HC("tag 0x1C", DG_ERR_BAD_TAG, 0x1C),
		HC("tag 0x40", DG_ERR_BAD_TAG, 0x40),
		HC("tag 0x7F", DG_ERR_BAD_TAG, 0x7F),
		HC("REF_Z at top level", DG_ERR_BAD_TAG, 0xC0, 0x01, 0x00),
		HC("REF_Z 63 in a list", DG_ERR_UNKNOWN_SCHEMA, 0x0F, 0x01, 0xFF),
		HC("DEF_Z at top level", DG_ERR_BAD_TAG, 0x1A, 0xA0, 0xEB, 0x6E, 0xC3, 0x00),
		HC("REF at top level", DG_ERR_BAD_TAG, 0x80, 0x01, 0x00),
		HC("DEF at top level", DG_ERR_BAD_TAG, 0x16, 0xA0, 0xEB, 0x6E, 0xC3, 0x00),
		HC("REF in a sorted set", DG_ERR_BAD_TAG, 0x11, 0x01, 0x80, 0x00),
		HC("array of strings", DG_ERR_BAD_TAG, 0x0E, 0x08, 0x01, 0x00),
		HC("overlong varint", DG_ERR_BAD_VARINT, 0x06, 0x80, 0x00),
		HC("overlong i32", DG_ERR_BAD_VARINT, 0x05, 0x81, 0x80, 0x00),
		HC("overlong length", DG_ERR_BAD_VARINT, 0x09, 0x80, 0x00),
		HC("varint of 11 bytes", DG_ERR_BAD_VARINT, 0x06, 0xFF, 0xFF, 0xFF, 0xFF,
		    0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01),
		HC("varint over 64 bits", DG_ERR_BAD_VARINT, 0x06, 0xFF, 0xFF, 0xFF, 0xFF,
		    0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x02),
		HC("list count 1000, 3 bytes", DG_ERR_COUNT, 0x0F, 0xE8, 0x07, 0x02, 0x02, 0x02),
		HC("map count 2, 3 bytes", DG_ERR_COUNT, 0x12, 0x02, 0x06, 0x02, 0x06),
		HC("array count 10, 0 bytes", DG_ERR_COUNT, 0x0E, 0x04, 0x0A),
		HC("UTF-8 overlong C0 80", DG_ERR_UTF8, 0x09, 0x02, 0xC0, 0x80),
		HC("UTF-8 overlong E0 80 80", DG_ERR_UTF8, 0x09, 0x03, 0xE0, 0x80, 0x80),
		HC("UTF-8 surrogate ED A0 80", DG_ERR_UTF8, 0x09, 0x03, 0xED, 0xA0, 0x80),
		HC("UTF-8 F5", DG_ERR_UTF8, 0x09, 0x04, 0xF5, 0x80, 0x80, 0x80),
		HC("UTF-8 above U+10FFFF", DG_ERR_UTF8, 0x09, 0x04, 0xF4, 0x90, 0x80, 0x80),
		HC("UTF-8 lone continuation", DG_ERR_UTF8, 0x09, 0x01, 0x80),
		HC("UTF-8 cut sequence", DG_ERR_UTF8, 0x09, 0x01, 0xC3),
		HC("UTF-8 in a map key", DG_ERR_UTF8, 0x12, 0x01, 0x09, 0x01, 0xFF, 0x00),
		HC("unsorted sorted set", DG_ERR_ORDER, 0x11, 0x02, 0x06, 0x04, 0x06, 0x02),
		HC("duplicate in sorted set", DG_ERR_ORDER, 0x11, 0x02, 0x09, 0x00, 0x09, 0x00),
		HC("unknown type", DG_ERR_UNKNOWN_TYPE, 0x14, 0xEF, 0xBE, 0xAD, 0xDE, 0x00),
		HC("unknown schema", DG_ERR_UNKNOWN_SCHEMA, 0x15, 0xA0, 0xEB, 0x6E, 0xC3,
		    0x78, 0x56, 0x34, 0x12, 0x00),
		HC("REF to undefined index", DG_ERR_UNKNOWN_SCHEMA, 0x0F, 0x01, 0x81, 0x00),
		HC("i32 out of range", DG_ERR_RANGE, 0x05, 0x80, 0x80, 0x80, 0x80, 0x10),
		HC("nanoseconds 1000000", DG_ERR_RANGE, 0x0C, 0x00, 0xC0, 0x84, 0x3D),
		HC("bool array element 2", DG_ERR_RANGE, 0x0E, 0x01, 0x01, 0x02),
		HC("enum ordinal 2^31", DG_ERR_RANGE, 0x0D, 0x01, 0x00, 0x00, 0x00, 0x80,
		    0x80, 0x80, 0x80, 0x08),
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		check_case(cases[i].what, cases[i].p, cases[i].n, cases[i].err);
	/* an empty input is not a value */
	EXPECT(dg_validate(g.reg, "", 0), DG_ERR_TRUNCATED);

	/* depth: 64 nested lists are fine, 65 are not */
	{
		uint8_t deep[2 * 65];
		for (int levels = 63; levels <= 65; levels++) {
			for (int k = 0; k < levels - 1; k++) {
				deep[2 * k] = 0x0F;
				deep[2 * k + 1] = 0x01;
			}
			deep[2 * (levels - 1)] = 0x0F;
			deep[2 * (levels - 1) + 1] = 0x00;
			char what[32];
			snprintf(what, sizeof(what), "%d nested lists", levels);
			check_case(what, deep, 2 * (size_t)levels,
			    levels <= DG_MAX_DEPTH ? DG_OK : DG_ERR_DEPTH);
		}
	}

	/* object framing: the Person of FORMAT.md with one byte changed */
	{
		static const uint8_t person[38] = {
			0x14, 0xA0, 0xEB, 0x6E, 0xC3, 0x20,
			0x00, 0x00, 0x00, 0x00, 0x00, 0xA0, 0x58, 0x40,
			0x9C, 0x85, 0xE3, 0x0B,
			0x0C, 'a', 'l', 'i', 'c', 'e', '-', 's', 'm', 'i', 't', 'h',
			0x80, 0xA0, 0xD5, 0xED, 0xEE, 0x66,
			0x0C, 0x18,
		};
		static const struct { size_t at; uint8_t to; dg_err err; const char *what; } m[] = {
			{ 36, 0x05, DG_ERR_BAD_LENGTH, "footer offset inside the fixed area" },
			{ 36, 0x08, DG_ERR_BAD_LENGTH, "footer offset = fixed area (empty var 0)" },
			{ 36, 0x19, DG_ERR_BAD_LENGTH, "footer offsets not increasing" },
			{ 37, 0x1E, DG_ERR_BAD_LENGTH, "footer offset at the footer" },
			{ 37, 0xFF, DG_ERR_BAD_LENGTH, "footer offset past the body" },
			{ 36, 0x0D, DG_ERR_BAD_LENGTH, "footer offset off by one" },
			{ 5, 0x01, DG_ERR_BAD_LENGTH, "body shorter than its fixed area" },
			{ 5, 0x30, DG_ERR_TRUNCATED, "body longer than the input" },
			{ 19, 0xC0, DG_ERR_UTF8, "invalid UTF-8 in a field" },
			/* TRUNCATED (within its span) or BAD_LENGTH: any error */
			{ 17, 0x8B, DG_ERR__COUNT, "varint field running into the next" },
		};
		uint8_t buf[38];
		person_t q;
		dg_bobj o;
		check_case("the FORMAT.md Person", person, sizeof(person), DG_OK);
		OK(dg_decode_object(g.reg, g.person, person, sizeof(person), &q, NULL));
		for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
			memcpy(buf, person, sizeof(buf));
			buf[m[i].at] = m[i].to;
			check_case(m[i].what, buf, sizeof(buf), m[i].err);
			dg_err e = dg_decode_object(g.reg, g.person, buf, sizeof(buf), &q, NULL);
			if (m[i].err == DG_ERR__COUNT ? e == DG_OK : e != m[i].err)
				fail_msg("%s: dg_decode_object returned %s, expected %s",
				    m[i].what, dg_strerror(e), dg_strerror(m[i].err));
			(void)dg_bobj_open(g.reg, buf, sizeof(buf), &o);
		}
	}
}

/* ========================================================================
 * 12. Writer misuse
 * ======================================================================== */

static void test_writer_misuse(void **state)
{
	dg_buf b;
	dg_writer w;
	wide_t wd;
	person_t p = person_make(1, "x", 1, 1);

	dg_buf_init(&b);
#define FRESH() (dg_buf_reset(&b), dg_writer_init(&w, g.reg, &b))
	FRESH();
	EXPECT(dg_write_end(&w), DG_ERR_STATE);
	EXPECT(dg_writer_finish(&w), DG_ERR_STATE);
	/* too many */
	FRESH();
	OK(dg_write_list_begin(&w, 1));
	OK(dg_write_i64(&w, 1));
	size_t len = b.len;
	EXPECT(dg_write_i64(&w, 2), DG_ERR_STATE);
	assert_int_equal(b.len, len);
	EXPECT(dg_writer_finish(&w), DG_ERR_STATE);
	/* too few */
	FRESH();
	OK(dg_write_list_begin(&w, 2));
	OK(dg_write_i64(&w, 1));
	EXPECT(dg_write_end(&w), DG_ERR_STATE);
	EXPECT(dg_writer_finish(&w), DG_ERR_STATE);
	/* a map entry without its value */
	FRESH();
	OK(dg_write_map_begin(&w, 1));
	OK(dg_write_i64(&w, 1));
	EXPECT(dg_write_end(&w), DG_ERR_STATE);
	/* never ended */
	FRESH();
	OK(dg_write_list_begin(&w, 1));
	OK(dg_write_i64(&w, 1));
	EXPECT(dg_writer_finish(&w), DG_ERR_STATE);
	/* sticky: the first error, and nothing written after it */
	FRESH();
	EXPECT(dg_write_str(&w, "\xFF", 1), DG_ERR_UTF8);
	EXPECT(dg_write_i64(&w, 1), DG_ERR_UTF8);
	EXPECT(dg_write_list_begin(&w, 0), DG_ERR_UTF8);
	EXPECT(dg_write_object(&w, g.person, &p), DG_ERR_UTF8);
	EXPECT(dg_write_timestamp(&w, (dg_timestamp){ 0, -5 }), DG_ERR_UTF8);
	assert_int_equal(b.len, 0);
	EXPECT(dg_writer_finish(&w), DG_ERR_UTF8);
	dg_writer_reset(&w);
	OK(dg_write_i64(&w, -1));
	OK(dg_writer_finish(&w));
	EXPECT_BYTES(&b, 0x06, 0x01);
	/* depth */
	FRESH();
	for (int i = 0; i < DG_MAX_DEPTH; i++)
		OK(dg_write_list_begin(&w, 1));
	EXPECT(dg_write_list_begin(&w, 1), DG_ERR_DEPTH);
	/* objects */
	FRESH();
	EXPECT(dg_write_object(&w, NULL, &p), DG_ERR_INVAL);
	FRESH();
	EXPECT(dg_write_object(&w, g.person, NULL), DG_ERR_INVAL);
	FRESH();
	EXPECT(dg_write_object(&w, dg_registry_find(g.reg, dg_type_id("dg.List")), &p),
	    DG_ERR_INVAL);
	wide_fill(&wd, 0);
	wd.s.ptr = "\xED\xA0\x80";
	wd.s.len = 3;
	FRESH();
	EXPECT(dg_write_object(&w, g.wide, &wd), DG_ERR_UTF8);
	wide_fill(&wd, 0);
	wd.ts.ns = 1000000;
	FRESH();
	EXPECT(dg_write_object(&w, g.wide, &wd), DG_ERR_RANGE);
	wide_fill(&wd, 0);
	wd.color = -1;
	FRESH();
	EXPECT(dg_write_object(&w, g.wide, &wd), DG_ERR_RANGE);
	wide_fill(&wd, 0);
	wd.list = wd.map; /* a map in a list field */
	FRESH();
	EXPECT(dg_write_object(&w, g.wide, &wd), DG_ERR_TYPE_MISMATCH);
	wide_fill(&wd, 0);
	wd.map.ptr = (const uint8_t *)"\x12\x01\x06";
	wd.map.len = 3; /* malformed */
	FRESH();
	assert_int_not_equal(dg_write_object(&w, g.wide, &wd), DG_OK);
	/* containers need a registry */
	dg_writer_init(&w, NULL, &b);
	EXPECT(dg_write_list_begin(&w, 0), DG_ERR_INVAL);
#undef FRESH
	dg_buf_free(&b);

	/* a fixed buffer never grows */
	{
		uint8_t mem[8];
		memset(mem, 0xAA, sizeof(mem));
		dg_buf_init_fixed(&b, mem, 4);
		dg_writer_init(&w, g.reg, &b);
		OK(dg_write_i8(&w, 1));
		EXPECT(dg_write_i16(&w, 2), DG_ERR_NOSPACE);   /* 3 bytes, 2 left */
		assert_int_equal(b.len, 2);
		EXPECT(dg_write_bool(&w, true), DG_ERR_NOSPACE); /* sticky */
		EXPECT(dg_writer_finish(&w), DG_ERR_NOSPACE);
		assert_int_equal(mem[4], 0xAA);
		EXPECT(dg_buf_reserve(&b, 3), DG_ERR_NOSPACE);
		OK(dg_buf_reserve(&b, 2));
		dg_buf_reset(&b);
		dg_writer_init(&w, g.reg, &b);
		EXPECT(dg_write_str(&w, "hello", 5), DG_ERR_NOSPACE);
		assert_int_equal(b.len, 0);
		dg_buf_init_fixed(&b, mem, 8);
		dg_writer_init(&w, g.reg, &b);
		EXPECT(dg_write_object(&w, g.person, &p), DG_ERR_NOSPACE);
		dg_buf_free(&b); /* frees nothing: caller memory */
	}
}

/* A fixed buffer takes any object that fits, however little room is left
 * over; a smaller one is DG_ERR_NOSPACE with nothing written past its end. */
/* Review findings: exact reservations, schema-id collisions, builder raw
 * values in object fields, map counts past 32 bits. */
typedef struct flag1 {
	bool b;
} flag1_t;

static void test_review_regressions(void **state)
{
	static const dg_field_def ff[] = { DG_FIELD(flag1_t, b, DG_BOOL) };
	dg_type_def fd = { "Flag1", ff, 1, sizeof(flag1_t) };
	const dg_desc *d, *pd;
	flag1_t one = { true };
	uint8_t mem[64];
	dg_buf b, fb;
	dg_writer w;
	(void)state;

	/* 1. a fixed buffer exactly the size of the value takes it, whichever
	 * call writes it: object, objects, bytes, i64 */
	dg_buf_init(&b);
	OK(dg_registry_register(g.reg, &fd, &d));
	enc_object(&b, d, &one);
	for (size_t cap = 0; cap <= b.len; cap++) {
		dg_buf_init_fixed(&fb, mem, cap);
		dg_writer_init(&w, g.reg, &fb);
		EXPECT(dg_write_object(&w, d, &one), cap < b.len ? DG_ERR_NOSPACE : DG_OK);
	}
	dg_buf_reset(&b);
	dg_writer_init(&w, g.reg, &b);
	OK(dg_write_list_begin(&w, 3));
	flag1_t three[3] = { { true }, { false }, { true } };
	OK(dg_write_objects(&w, d, three, sizeof(three[0]), 3));
	OK(dg_write_end(&w));
	for (size_t cap = b.len - 2; cap <= b.len; cap++) {
		dg_err e1, e2;
		dg_buf_init_fixed(&fb, mem, cap);
		dg_writer_init(&w, g.reg, &fb);
		dg_write_list_begin(&w, 3);
		for (int i = 0; i < 3; i++)
			dg_write_object(&w, d, &three[i]);
		dg_write_end(&w);
		e1 = dg_writer_finish(&w);
		dg_buf_init_fixed(&fb, mem, cap);
		dg_writer_init(&w, g.reg, &fb);
		dg_write_list_begin(&w, 3);
		dg_write_objects(&w, d, three, sizeof(three[0]), 3);
		dg_write_end(&w);
		e2 = dg_writer_finish(&w);
		assert_int_equal(e1, e2);
		assert_int_equal(e1, cap < b.len ? DG_ERR_NOSPACE : DG_OK);
	}
	dg_buf_init_fixed(&fb, mem, 2 + 5);
	dg_writer_init(&w, g.reg, &fb);
	OK(dg_write_bytes(&w, "abcde", 5));
	dg_buf_init_fixed(&fb, mem, 2);
	dg_writer_init(&w, g.reg, &fb);
	OK(dg_write_i64(&w, 5));
	assert_int_equal(fb.len, 2);

	/* 2. two field lists with one schema id: "f135,f42" and "f158,f552"
	 * hash alike; the second is refused, not confused with the first */
	{
		uint32_t a[2] = { dg_field_id("f135"), dg_field_id("f42") };
		uint32_t c[2] = { dg_field_id("f158"), dg_field_id("f552") };
		assert_int_equal(dgi_schema_id(a, 2), dgi_schema_id(c, 2));
		dg_field_def x[2] = { { "f158", DG_I64, DG_NULL, NULL, DG_UNBOUND, 0 },
			{ "f552", DG_STRING, DG_NULL, NULL, DG_UNBOUND, 0 } };
		dg_field_def y[2] = { { "f135", DG_I64, DG_NULL, NULL, DG_UNBOUND, 0 },
			{ "f42", DG_I64, DG_NULL, NULL, DG_UNBOUND, 0 } };
		dg_type_def tx = { "Collide", x, 2, 0 }, ty = { "Collide", y, 2, 0 };
		OK(dg_registry_register(g.reg, &tx, &pd));
		EXPECT(dg_registry_register(g.reg, &ty, NULL), DG_ERR_CONFLICT);
		assert_ptr_equal(dg_registry_find(g.reg, dg_type_id("Collide")), pd);
	}

	/* 3. a builder's object field takes only a null or an object of its
	 * type as pre-encoded bytes */
	{
		dg_builder *bl;
		dg_bobj o;
		dg_value v;
		dg_buf ob;
		dg_buf_init(&ob);
		enc_object(&ob, d, &one);
		OK(dg_bobj_open(g.reg, ob.data, ob.len, &o));
		OK(dg_builder_create(g.reg, "Holder", &bl));
		v.kind = DG_OBJECT;
		v.v.obj = o;
		OK(dg_builder_set(bl, "o", &v));
		static const uint8_t str[] = { 0x09, 0x01, 'x' };
		v.kind = DG_ANY;
		v.v.raw.ptr = str;
		v.v.raw.len = sizeof(str);
		EXPECT(dg_builder_set(bl, "o", &v), DG_ERR_TYPE_MISMATCH);
		v.v.raw.ptr = ob.data;
		v.v.raw.len = (uint32_t)ob.len;
		OK(dg_builder_set(bl, "o", &v));
		dg_buf_reset(&b);
		dg_writer_init(&w, g.reg, &b);
		OK(dg_builder_write(bl, &w));
		OK(dg_validate(g.reg, b.data, b.len));
		dg_builder_destroy(bl);
		dg_buf_free(&ob);
	}

	/* 4. a map claiming more than 2^31 entries */
	{
		static const uint8_t big[] = { 0x12, 0x80, 0x80, 0x80, 0x80, 0x08, 0x00 };
		dg_reader r;
		dg_value v;
		dg_reader_init(&r, g.reg, big, sizeof(big));
		EXPECT(dg_read_next(&r, &v), DG_ERR_COUNT);
		EXPECT(dg_validate(g.reg, big, sizeof(big)), DG_ERR_COUNT);
	}
	dg_buf_free(&b);
}

static void test_fixed_buffer_objects(void **state)
{
	person_t p = person_make(12345678, "alice-smith", 98.5, 1767225600000);
	point_t pt = { 1.0, 2.0, true, 3, 4, 5.0f, { { 6 } } };
	tri_t tr = { { "a", 1 }, { "bb", 2 }, { NULL, 0 } };
	wide_t wd;
	const struct {
		const dg_desc *d;
		const void *obj;
	} t[] = { { g.person, &p }, { g.wide, &wd }, { g.point, &pt }, { g.tri, &tr } };
	dg_buf ref, b;
	dg_writer w;

	wide_fill(&wd, 1);
	dg_buf_init(&ref);
	for (size_t k = 0; k < sizeof(t) / sizeof(t[0]); k++) {
		enc_object(&ref, t[k].d, t[k].obj);
		size_t len = ref.len;
		for (size_t cap = 0; cap <= 2 * len; cap++) {
			if (cap > len + 1 && cap != 2 * len)
				continue;
			uint8_t *m = malloc(cap ? cap : 1); /* ASan: exact size */
			assert_non_null(m);
			dg_buf_init_fixed(&b, m, cap);
			dg_writer_init(&w, g.reg, &b);
			dg_err e = dg_write_object(&w, t[k].d, t[k].obj);
			if (cap < len) {
				if (e != DG_ERR_NOSPACE)
					fail_msg("object %zu (%zu bytes) in %zu: %s", k, len, cap,
					    dg_strerror(e));
			} else {
				if (e != DG_OK)
					fail_msg("object %zu (%zu bytes) in %zu: %s", k, len, cap,
					    dg_strerror(e));
				assert_int_equal(b.len, len);
				assert_memory_equal(m, ref.data, len);
			}
			free(m);
		}
	}
	/* a list of them, with a little room to spare */
	{
		dg_buf lst;
		dg_buf_init(&lst);
		dg_writer_init(&w, g.reg, &lst);
		dg_write_list_begin(&w, 4);
		for (size_t k = 0; k < 4; k++)
			dg_write_object(&w, t[k].d, t[k].obj);
		dg_write_end(&w);
		OK(dg_writer_finish(&w));
		uint8_t *m = malloc(lst.len + 24);
		assert_non_null(m);
		dg_buf_init_fixed(&b, m, lst.len + 24);
		dg_writer_init(&w, g.reg, &b);
		dg_write_list_begin(&w, 4);
		for (size_t k = 0; k < 4; k++)
			OK(dg_write_object(&w, t[k].d, t[k].obj));
		OK(dg_write_end(&w));
		OK(dg_writer_finish(&w));
		assert_int_equal(b.len, lst.len);
		assert_memory_equal(m, lst.data, lst.len);
		free(m);
		dg_buf_free(&lst);
	}
	dg_buf_free(&ref);
}

/* ========================================================================
 * 13. Error names
 * ======================================================================== */

static void test_strerror(void **state)
{
	static const char *const names[DG_ERR__COUNT] = {
		"DG_OK", "DG_ERR_NOMEM", "DG_ERR_INVAL", "DG_ERR_NOSPACE",
		"DG_ERR_STATE", "DG_ERR_LIMIT", "DG_ERR_CONFLICT", "DG_ERR_REFUSED",
		"DG_ERR_TRUNCATED", "DG_ERR_BAD_TAG", "DG_ERR_BAD_LENGTH",
		"DG_ERR_BAD_VARINT", "DG_ERR_DEPTH", "DG_ERR_COUNT", "DG_ERR_UTF8",
		"DG_ERR_ORDER", "DG_ERR_UNKNOWN_TYPE", "DG_ERR_UNKNOWN_SCHEMA",
		"DG_ERR_UNKNOWN_FIELD", "DG_ERR_TYPE_MISMATCH", "DG_ERR_RANGE",
		"DG_ERR_TIMEOUT", "DG_ERR_CLOSED", "DG_ERR_CONN_BROKEN", "DG_ERR_BUSY",
		"DG_ERR_UNREACHABLE", "DG_ERR_AUTH", "DG_ERR_TLS", "DG_ERR_NET",
		"DG_ERR_ADDRINUSE", "DG_ERR_UNSUPPORTED", "DG_ERR_NOT_FOUND",
		"DG_ERR_EXISTS", "DG_ERR_PARTITION_LOST", "DG_ERR_REMAP",
		"DG_ERR_STORAGE", "DG_ERR_STORAGE_FULL", "DG_ERR_NOT_READY", "DG_ERR_DEADLOCK",
		"DG_ERR_TX_CONFLICT", "DG_ERR_TX_ROLLED_BACK", "DG_ERR_TX_UNKNOWN",
		"DG_ERR_SEGMENTED", "DG_ERR_STORAGE_DAMAGED",
	};
	for (int e = 0; e < DG_ERR__COUNT; e++) {
		const char *s = dg_strerror((dg_err)e);
		size_t n = strlen(names[e]);
		assert_non_null(s);
		assert_memory_equal(s, "DG_", 3);
		if (strncmp(s, names[e], n) != 0 || (s[n] != ':' && s[n] != 0))
			fail_msg("dg_strerror(%d) = \"%s\", expected %s", e, s, names[e]);
		for (int k = 0; k < e; k++)
			assert_string_not_equal(s, dg_strerror((dg_err)k));
	}
	assert_non_null(dg_strerror(DG_ERR__COUNT));
	assert_non_null(dg_strerror((dg_err)-1));
	assert_non_null(dg_strerror((dg_err)1000));
}

/* ========================================================================
 * 14. Concurrent lookups and decodes during registrations
 * ======================================================================== */

enum { NREG = 200, NREADERS = 4 };

static struct {
	dg_registry *reg;
	const dg_desc *person;
	uint8_t enc[64];
	size_t enc_len;
	person_t want;
	uint32_t ids[NREG];
	_Atomic int registered;
	_Atomic int done;
	_Atomic int started;
	_Atomic long failures;
	_Atomic long lookups;
	dg_err reg_err;
} th;

static void *reader_thread(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg * 2654435761u + 1;
	long iters = 0;
	bool announced = false;
	for (;;) {
		bool finishing = atomic_load(&th.done) != 0;
		person_t q;
		if (dg_registry_find(th.reg, dg_type_id("Person")) != th.person)
			atomic_fetch_add(&th.failures, 1);
		if (dg_registry_find(th.reg, dg_type_id("dg.SortedMap")) == NULL)
			atomic_fetch_add(&th.failures, 1);
		if (dg_decode_object(th.reg, th.person, th.enc, th.enc_len, &q, NULL) != DG_OK ||
		    q.id != th.want.id || q.name.len != th.want.name.len)
			atomic_fetch_add(&th.failures, 1);
		int k = atomic_load(&th.registered);
		for (int j = 0; j < 4 && k > 0; j++) {
			seed = seed * 1103515245u + 12345u;
			uint32_t id = th.ids[(seed >> 8) % (unsigned)k];
			const dg_desc *d = dg_registry_find(th.reg, id);
			if (d == NULL || dg_desc_type_id(d) != id || !dg_desc_is_registered(d))
				atomic_fetch_add(&th.failures, 1);
			atomic_fetch_add(&th.lookups, 1);
		}
		if (!announced) {
			atomic_fetch_add(&th.started, 1);
			announced = true;
		}
		if (finishing && ++iters > 100)
			break;
	}
	return NULL;
}

static void *registrar_thread(void *arg)
{
	static char names[NREG][16];
	static dg_field_def f[NREG];
	for (int i = 0; i < NREG; i++) {
		dg_type_def t;
		snprintf(names[i], sizeof(names[i]), "Conc%d", i);
		f[i] = (dg_field_def){ "v", DG_I64, DG_NULL, NULL, DG_UNBOUND, 0 };
		t = (dg_type_def){ names[i], &f[i], 1, 0 };
		dg_err e = dg_registry_register(th.reg, &t, NULL);
		if (e != DG_OK) {
			th.reg_err = e;
			break;
		}
		atomic_store(&th.registered, i + 1);
	}
	return NULL;
}

static void test_threads(void **state)
{
	pthread_t rd[NREADERS], wr;
	dg_buf b;
	dg_writer w;
	char name[16];

	memset(&th, 0, sizeof(th));
	OK(dg_registry_create(&th.reg));
	OK(dg_registry_register(th.reg, &person_def, &th.person));
	th.want = person_make(31337, "threaded", 1.0, 2);
	dg_buf_init_fixed(&b, th.enc, sizeof(th.enc));
	dg_writer_init(&w, th.reg, &b);
	OK(dg_write_object(&w, th.person, &th.want));
	th.enc_len = b.len;
	for (int i = 0; i < NREG; i++) {
		snprintf(name, sizeof(name), "Conc%d", i);
		th.ids[i] = dg_type_id(name);
	}
	for (int i = 0; i < NREADERS; i++)
		assert_int_equal(pthread_create(&rd[i], NULL, reader_thread, (void *)(uintptr_t)i), 0);
	while (atomic_load(&th.started) < NREADERS)
		;
	assert_int_equal(pthread_create(&wr, NULL, registrar_thread, NULL), 0);
	assert_int_equal(pthread_join(wr, NULL), 0);
	atomic_store(&th.done, 1);
	for (int i = 0; i < NREADERS; i++)
		assert_int_equal(pthread_join(rd[i], NULL), 0);
	OK(th.reg_err);
	assert_int_equal(atomic_load(&th.registered), NREG);
	assert_int_equal(atomic_load(&th.failures), 0);
	assert_true(atomic_load(&th.lookups) > 0);
	for (int i = 0; i < NREG; i++)
		assert_non_null(dg_registry_find(th.reg, th.ids[i]));
	dg_registry_destroy(th.reg);
}

/* ======================================================================== */

#define T(f) cmocka_unit_test_teardown(f, test_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_scalars_roundtrip),
		T(test_typed_readers),
		T(test_write_value_errors),
		T(test_arrays_roundtrip),
		T(test_nested_containers),
		T(test_struct_roundtrip),
		T(test_struct_arena),
		T(test_objects_in_values),
		T(test_exact_person),
		T(test_exact_values),
		T(test_exact_definition),
		T(test_canonical_equal_bytes),
		T(test_value_cmp_order),
		T(test_sorted_writer_order),
		T(test_sorted_reader_order),
		T(test_builtins_registered),
		T(test_no_builds_per_op),
		T(test_register_idempotent),
		T(test_register_errors),
		T(test_register_limits),
		T(test_bind_accepted_type),
		T(test_hook_propose_accept),
		T(test_hook_refuses),
		T(test_hook_accepts_itself),
		T(test_hook_unset_waits_for_calls),
		T(test_accept_malformed),
		T(test_unknown_type_and_schema),
		T(test_bobj_fields),
		T(test_bobj_footer_widths),
		T(test_builder_dynamic),
		T(test_builder_load_rewrite),
		T(test_schema_evolution),
		T(test_builder_kind_conflict),
		T(test_object_arrays),
		T(test_stream_list_of_objects),
		T(test_stream_two_types),
		T(test_stream_nested_scopes),
		T(test_stream_scope_overflow),
		T(test_no_alloc_per_op),
		T(test_nomem_registry_create),
		T(test_nomem_register),
		T(test_nomem_builder),
		T(test_nomem_buf),
		T(test_hostile_corpus_covers_tags),
		T(test_hostile_targeted),
		T(test_varint_lengths),
		T(test_runs_match_values),
		T(test_hostile_prefixes),
		T(test_hostile_bitflips),
		T(test_writer_misuse),
		T(test_review_regressions),
		T(test_fixed_buffer_objects),
		T(test_strerror),
		T(test_threads),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
