/*
 * marshal_nested_test.c — nested objects and collections as descriptor
 * fields (issue 16): lists and sets of objects, strings and scalars bound as
 * dg_list, pointers to objects, written in one pass and decoded in one pass
 * into an arena.
 *
 *  1. The invoice round trip: every field back, one schema definition per
 *     list on the wire, views or copies as the arena says.
 *  2. Null and empty lists, null elements, a null pointer.
 *  3. Every element kind, sets, pointers, lists inside list elements.
 *  4. Arena: none or too small is DG_ERR_NOSPACE, exactly enough is fine.
 *  5. The wire is the generic one: a list written by the generic writer
 *     decodes into a dg_list field, and a dg_list field reads with the
 *     generic reader; O(1) access reaches nested fields without decoding.
 *  6. Schema evolution of the element type (both directions).
 *  7. Hostile input and bad values: wrong element kinds, counts, REF
 *     before DEF, UTF-8, cycles, registration errors.
 *  8. Maps with string keys: values of every kind, hostile maps.
 *  9. No allocation per encode and decode.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "marshal/marshal.h"

#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expect.h"

/* ---- the types ---- */

typedef struct address { dg_str street, city, zip; } address;
typedef struct customer {
	int64_t id;
	dg_str name, email;
	address addr;
} customer;
typedef struct line {
	dg_str sku;
	int32_t qty;
	double price, discount;
} line;
typedef struct invoice {
	int64_t id, issued;
	customer cust;
	dg_list lines;   /* of line */
	dg_list notes;   /* of dg_str */
} invoice;

static const dg_field_def address_fields[] = {
	DG_FIELD(address, street, DG_STRING),
	DG_FIELD(address, city, DG_STRING),
	DG_FIELD(address, zip, DG_STRING),
};
static const dg_field_def customer_fields[] = {
	DG_FIELD(customer, id, DG_I64),
	DG_FIELD(customer, name, DG_STRING),
	DG_FIELD(customer, email, DG_STRING),
	DG_FIELD_TYPED(customer, addr, DG_OBJECT, "Address"),
};
static const dg_field_def line_fields[] = {
	DG_FIELD(line, sku, DG_STRING),
	DG_FIELD(line, qty, DG_I32),
	DG_FIELD(line, price, DG_DOUBLE),
	DG_FIELD(line, discount, DG_DOUBLE),
};
static const dg_field_def invoice_fields[] = {
	DG_FIELD(invoice, id, DG_I64),
	DG_FIELD(invoice, issued, DG_I64),
	DG_FIELD_TYPED(invoice, cust, DG_OBJECT, "Customer"),
	DG_FIELD_LIST(invoice, lines, DG_LIST, DG_OBJECT, "Line"),
	DG_FIELD_LIST(invoice, notes, DG_LIST, DG_STRING, NULL),
};
#define NF(a) ((uint32_t)(sizeof(a) / sizeof((a)[0])))

/* Every element kind, a set, a pointer, and a list inside list elements. */
typedef struct emp {
	dg_str name;
	dg_list tags;    /* of dg_str */
	dg_list scores;  /* of double */
} emp;
typedef struct dept {
	dg_str name;
	dg_list staff;   /* of emp: lists inside list elements */
} dept;
typedef struct org {
	emp *boss;       /* a pointer to an object */
	dg_list depts;   /* of dept */
	dg_list ids;     /* set of int32_t */
	dg_list flags;   /* of bool */
	dg_list i8s, i16s, i64s;
	dg_list fl;      /* of float */
	dg_list blobs;   /* of dg_bytes */
} org;

static const dg_field_def emp_fields[] = {
	DG_FIELD(emp, name, DG_STRING),
	DG_FIELD_LIST(emp, tags, DG_LIST, DG_STRING, NULL),
	DG_FIELD_LIST(emp, scores, DG_LIST, DG_DOUBLE, NULL),
};
static const dg_field_def dept_fields[] = {
	DG_FIELD(dept, name, DG_STRING),
	DG_FIELD_LIST(dept, staff, DG_LIST, DG_OBJECT, "Emp"),
};
static const dg_field_def org_fields[] = {
	DG_FIELD_OBJ_PTR(org, boss, "Emp"),
	DG_FIELD_LIST(org, depts, DG_LIST, DG_OBJECT, "Dept"),
	DG_FIELD_LIST(org, ids, DG_SET, DG_I32, NULL),
	DG_FIELD_LIST(org, flags, DG_LIST, DG_BOOL, NULL),
	DG_FIELD_LIST(org, i8s, DG_LIST, DG_I8, NULL),
	DG_FIELD_LIST(org, i16s, DG_LIST, DG_I16, NULL),
	DG_FIELD_LIST(org, i64s, DG_LIST, DG_I64, NULL),
	DG_FIELD_LIST(org, fl, DG_LIST, DG_FLOAT, NULL),
	DG_FIELD_LIST(org, blobs, DG_LIST, DG_BYTES, NULL),
};

/* A self-referencing type: a pointer to its own type (cycles in data). */
typedef struct chain {
	int64_t v;
	struct chain *next;
} chain;

static struct {
	dg_registry *reg;
	const dg_desc *address, *customer, *line, *invoice, *emp, *dept, *org;
} g;

static dg_err reg_type(dg_registry *reg, const char *name,
    const dg_field_def *f, uint32_t n, size_t size, const dg_desc **out)
{
	dg_type_def t = { name, f, n, size };
	return dg_registry_register(reg, &t, out);
}

static void register_all(dg_registry *reg, bool with_line)
{
	OK(reg_type(reg, "Address", address_fields, NF(address_fields),
	    sizeof(address), &g.address));
	OK(reg_type(reg, "Customer", customer_fields, NF(customer_fields),
	    sizeof(customer), &g.customer));
	if (with_line)
		OK(reg_type(reg, "Line", line_fields, NF(line_fields), sizeof(line),
		    &g.line));
}

static int setup(void **state)
{
	(void)state;
	OK(dg_registry_create(&g.reg));
	register_all(g.reg, true);
	OK(reg_type(g.reg, "Invoice", invoice_fields, NF(invoice_fields),
	    sizeof(invoice), &g.invoice));
	OK(reg_type(g.reg, "Emp", emp_fields, NF(emp_fields), sizeof(emp), &g.emp));
	OK(reg_type(g.reg, "Dept", dept_fields, NF(dept_fields), sizeof(dept),
	    &g.dept));
	OK(reg_type(g.reg, "Org", org_fields, NF(org_fields), sizeof(org), &g.org));
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	dg_registry_destroy(g.reg);
	return 0;
}

static dg_str S(const char *s) { return (dg_str){ s, (uint32_t)strlen(s) }; }

static bool str_eq(dg_str a, dg_str b)
{
	if (a.ptr == NULL || b.ptr == NULL)
		return a.ptr == b.ptr;
	return a.len == b.len && memcmp(a.ptr, b.ptr, a.len) == 0;
}

/* ---- the invoice ---- */

#define NLINES 20
static line lines_in[NLINES];
static char skus[NLINES][16];
static dg_str notes_in[2];

static invoice invoice_make(void)
{
	invoice v;
	memset(&v, 0, sizeof v);
	v.id = 4000001;
	v.issued = 1767225600123;
	v.cust.id = 77;
	v.cust.name = S("Ada Lovelace");
	v.cust.email = S("ada@example.org");
	v.cust.addr.street = S("12 Analytical Row");
	v.cust.addr.city = S("London");
	v.cust.addr.zip = S("NW1 6XE");
	for (int i = 0; i < NLINES; i++) {
		snprintf(skus[i], sizeof skus[i], "SKU-%05d", 100 + i * 7);
		lines_in[i].sku = S(skus[i]);
		lines_in[i].qty = i + 1;
		lines_in[i].price = 9.99 * (i + 1);
		lines_in[i].discount = i % 3 == 0 ? 0.1 : 0.0;
	}
	v.lines.ptr = lines_in;
	v.lines.count = NLINES;
	notes_in[0] = S("deliver before noon");
	notes_in[1] = S("gift wrap — «fragile»");
	v.notes.ptr = notes_in;
	v.notes.count = 2;
	return v;
}

static void invoice_check(const invoice *a, const invoice *b)
{
	assert_int_equal(a->id, b->id);
	assert_int_equal(a->issued, b->issued);
	assert_int_equal(a->cust.id, b->cust.id);
	assert_true(str_eq(a->cust.name, b->cust.name));
	assert_true(str_eq(a->cust.email, b->cust.email));
	assert_true(str_eq(a->cust.addr.street, b->cust.addr.street));
	assert_true(str_eq(a->cust.addr.city, b->cust.addr.city));
	assert_true(str_eq(a->cust.addr.zip, b->cust.addr.zip));
	assert_int_equal(a->lines.count, b->lines.count);
	assert_int_equal(a->lines.ptr == NULL, b->lines.ptr == NULL);
	for (uint32_t i = 0; i < a->lines.count; i++) {
		const line *x = (const line *)a->lines.ptr + i;
		const line *y = (const line *)b->lines.ptr + i;
		assert_true(str_eq(x->sku, y->sku));
		assert_int_equal(x->qty, y->qty);
		assert_true(x->price == y->price);
		assert_true(x->discount == y->discount);
	}
	assert_int_equal(a->notes.count, b->notes.count);
	assert_int_equal(a->notes.ptr == NULL, b->notes.ptr == NULL);
	for (uint32_t i = 0; i < a->notes.count; i++)
		assert_true(str_eq(((const dg_str *)a->notes.ptr)[i],
		    ((const dg_str *)b->notes.ptr)[i]));
}

/* zero: the writer's zero-form mode (FORMAT.md "Zero form"). */
static void encode_mode(const dg_registry *reg, const dg_desc *d,
    const void *obj, dg_buf *b, bool zero)
{
	dg_writer w;
	dg_buf_reset(b);
	dg_writer_init(&w, reg, b);
	if (zero)
		dg_writer_set_zero_form(&w, true);
	OK(dg_write_object(&w, d, obj));
	OK(dg_writer_finish(&w));
}

static void encode(const dg_registry *reg, const dg_desc *d, const void *obj,
    dg_buf *b)
{
	encode_mode(reg, d, obj, b, false);
}

/* The tags of the invoice's lines in b (the "lines" field's elements). */
static void line_tags(const dg_buf *b, uint8_t *tags)
{
	dg_bobj o;
	dg_value v;
	dg_reader r;
	OK(dg_bobj_open(g.reg, b->data, b->len, &o));
	OK(dg_bobj_get_name(&o, "lines", &v));
	dg_reader_init(&r, g.reg, v.v.coll.raw.ptr, v.v.coll.raw.len);
	OK(dg_read_next(&r, &v));
	for (int i = 0; i < NLINES; i++) {
		tags[i] = *r.r_p;
		OK(dg_read_next(&r, &v));
	}
}

/* How many times the 4 bytes of a type id appear in the buffer. */
static int count_id(const dg_buf *b, uint32_t id)
{
	int n = 0;
	for (size_t i = 0; i + 4 <= b->len; i++)
		if (memcmp(b->data + i, &id, 4) == 0)
			n++;
	return n;
}

static bool inside(const void *p, const dg_buf *b)
{
	const uint8_t *q = p;
	return q >= b->data && q < b->data + b->len;
}

static void test_invoice_roundtrip(void **state)
{
	(void)state;
	alignas(16) static uint8_t mem[8192];
	invoice in = invoice_make(), out;
	dg_arena a;
	dg_buf b;
	dg_buf_init(&b);
	encode(g.reg, g.invoice, &in, &b);
	OK(dg_validate(g.reg, b.data, b.len));
	/* the Line schema is written once for the 20 lines (one DEF, 19
	 * one-byte REFs); Customer and Address once each */
	assert_int_equal(count_id(&b, dg_type_id("Line")), 1);
	assert_int_equal(count_id(&b, dg_type_id("Customer")), 1);
	assert_int_equal(count_id(&b, dg_type_id("Address")), 1);

	/* a default writer writes every line in the plain form, DEF then
	 * REFs, discount 0.0 or not (FORMAT.md "Zero form": opt-in) */
	uint8_t tags[NLINES];
	int zero = 0;
	line_tags(&b, tags);
	for (int i = 0; i < NLINES; i++) {
		assert_int_equal(tags[i], i == 0 ? 0x16 : 0x80);
		zero += lines_in[i].discount == 0.0;
	}
	assert_true(zero > 0);

	/* with the zero-form mode on, the lines without a discount are
	 * DEF_Z / REF_Z, 7 bytes shorter each (a 1-byte mask instead of the 8
	 * bytes of 0.0), and the invoice reads back the same */
	{
		dg_buf bz;
		dg_buf_init(&bz);
		encode_mode(g.reg, g.invoice, &in, &bz, true);
		OK(dg_validate(g.reg, bz.data, bz.len));
		line_tags(&bz, tags);
		for (int i = 0; i < NLINES; i++) {
			bool z = lines_in[i].discount == 0.0;
			assert_int_equal(tags[i],
			    i == 0 ? (z ? 0x1A : 0x16) : (z ? 0xC0 : 0x80));
		}
		assert_int_equal(b.len - bz.len, 7 * (size_t)zero);
		memset(&out, 0xAB, sizeof out);
		dg_arena_init(&a, mem, sizeof mem);
		OK(dg_decode_object(g.reg, g.invoice, bz.data, bz.len, &out, &a));
		invoice_check(&in, &out);
		dg_buf_free(&bz);
	}

	/* copies: nothing points into the input */
	memset(&out, 0xAB, sizeof out);
	dg_arena_init(&a, mem, sizeof mem);
	OK(dg_decode_object(g.reg, g.invoice, b.data, b.len, &out, &a));
	invoice_check(&in, &out);
	assert_false(inside(out.cust.addr.city.ptr, &b));
	assert_false(inside(((const line *)out.lines.ptr)[3].sku.ptr, &b));
	assert_false(inside(((const dg_str *)out.notes.ptr)[1].ptr, &b));
	assert_true((uintptr_t)out.lines.ptr % alignof(line) == 0);

	/* views: strings point into the input, only the lists take arena */
	size_t copies = a.used;
	memset(&out, 0xAB, sizeof out);
	dg_arena_init_views(&a, mem, sizeof mem);
	OK(dg_decode_object(g.reg, g.invoice, b.data, b.len, &out, &a));
	invoice_check(&in, &out);
	assert_true(inside(out.cust.addr.city.ptr, &b));
	assert_true(inside(((const line *)out.lines.ptr)[3].sku.ptr, &b));
	assert_true(inside(((const dg_str *)out.notes.ptr)[1].ptr, &b));
	assert_true(a.used <= NLINES * sizeof(line) + 2 * sizeof(dg_str) + 16);
	assert_true(a.used < copies);

	/* the reader's entry point reads it the same way, as one value of a
	 * stream: the stream's two invoices cost one lookup each (fields are
	 * self-contained values) */
	dg_writer w;
	dg_reader r;
	dg_buf_reset(&b);
	dg_writer_init(&w, g.reg, &b);
	OK(dg_write_list_begin(&w, 2));
	OK(dg_write_object(&w, g.invoice, &in));
	OK(dg_write_object(&w, g.invoice, &in));
	OK(dg_write_end(&w));
	OK(dg_writer_finish(&w));
	uint32_t count;
	dg_reader_init(&r, g.reg, b.data, b.len);
	OK(dg_read_begin(&r, DG_LIST, &count));
	assert_int_equal(count, 2);
	for (int i = 0; i < 2; i++) {
		dg_arena_init(&a, mem, sizeof mem);
		OK(dg_read_object(&r, g.invoice, &out, &a));
		invoice_check(&in, &out);
	}
	assert_int_equal(dg_reader_left(&r), 0);
	dg_buf_free(&b);
}

static void test_null_and_empty(void **state)
{
	(void)state;
	alignas(16) static uint8_t mem[4096];
	invoice in = invoice_make(), out;
	dg_str notes[3] = { S("a"), { NULL, 0 }, S("") };
	dg_arena a;
	dg_buf b;
	dg_buf_init(&b);

	/* null lists */
	in.lines.ptr = NULL;
	in.lines.count = 0;
	in.notes.ptr = NULL;
	in.notes.count = 0;
	encode(g.reg, g.invoice, &in, &b);
	dg_arena_init(&a, mem, sizeof mem);
	memset(&out, 0xAB, sizeof out);
	OK(dg_decode_object(g.reg, g.invoice, b.data, b.len, &out, &a));
	assert_null(out.lines.ptr);
	assert_int_equal(out.lines.count, 0);
	assert_null(out.notes.ptr);
	/* without an arena too: nothing to put in it */
	OK(dg_decode_object(g.reg, g.invoice, b.data, b.len, &out, NULL));

	/* empty lists stay empty, not null; a null string element stays null
	 * and an empty one empty */
	in.lines.ptr = lines_in;
	in.lines.count = 0;
	in.notes.ptr = notes;
	in.notes.count = 3;
	encode(g.reg, g.invoice, &in, &b);
	dg_arena_init(&a, mem, sizeof mem);
	OK(dg_decode_object(g.reg, g.invoice, b.data, b.len, &out, &a));
	assert_non_null(out.lines.ptr);
	assert_int_equal(out.lines.count, 0);
	assert_int_equal(out.notes.count, 3);
	const dg_str *n = out.notes.ptr;
	assert_true(str_eq(n[0], S("a")));
	assert_null(n[1].ptr);
	assert_non_null(n[2].ptr);
	assert_int_equal(n[2].len, 0);

	/* a count with a NULL pointer is a bad value */
	dg_writer w;
	in.lines.ptr = NULL;
	in.lines.count = 2;
	dg_buf_reset(&b);
	dg_writer_init(&w, g.reg, &b);
	EXPECT(dg_write_object(&w, g.invoice, &in), DG_ERR_INVAL);
	dg_buf_free(&b);
}

static void test_every_element_kind(void **state)
{
	(void)state;
	alignas(16) static uint8_t mem[16384];
	static const char *tags[] = { "x", "yy", "zzz" };
	dg_str t[3] = { S(tags[0]), S(tags[1]), S(tags[2]) };
	double sc[4] = { 1.5, -2.25, 0.0, 1e300 };
	emp staff[3] = {
		{ S("ann"), { t, 3 }, { sc, 4 } },
		{ S("bob"), { t, 0 }, { NULL, 0 } },
		{ S("cy"), { NULL, 0 }, { sc + 1, 2 } },
	};
	dept depts[2] = { { S("ops"), { staff, 3 } }, { S("r&d"), { staff + 1, 1 } } };
	emp boss = { S("the boss"), { t + 1, 2 }, { sc, 1 } };
	int32_t ids[3] = { 7, -1, 2147483647 };
	bool flags[3] = { true, false, true };
	int8_t i8s[2] = { -128, 127 };
	int16_t i16s[2] = { -32768, 32767 };
	int64_t i64s[2] = { INT64_MIN, INT64_MAX };
	float fl[2] = { 0.5f, -3.25f };
	dg_bytes blobs[2] = { { (const uint8_t *)"\0\1\2", 3 }, { NULL, 0 } };
	org in = {
		&boss, { depts, 2 }, { ids, 3 }, { flags, 3 }, { i8s, 2 },
		{ i16s, 2 }, { i64s, 2 }, { fl, 2 }, { blobs, 2 },
	}, out;
	dg_arena a;
	dg_buf b;
	dg_buf_init(&b);

	encode(g.reg, g.org, &in, &b);
	OK(dg_validate(g.reg, b.data, b.len));
	dg_arena_init(&a, mem, sizeof mem);
	OK(dg_decode_object(g.reg, g.org, b.data, b.len, &out, &a));

	assert_non_null(out.boss);
	assert_true(out.boss != &boss);
	assert_true(str_eq(out.boss->name, S("the boss")));
	assert_int_equal(out.boss->tags.count, 2);
	assert_true(str_eq(((dg_str *)out.boss->tags.ptr)[1], S("zzz")));
	assert_int_equal(out.depts.count, 2);
	const dept *d = out.depts.ptr;
	assert_true(str_eq(d[1].name, S("r&d")));
	assert_int_equal(d[0].staff.count, 3);
	const emp *e = d[0].staff.ptr;
	assert_true(str_eq(e[0].name, S("ann")));
	assert_int_equal(e[0].tags.count, 3);
	assert_true(str_eq(((dg_str *)e[0].tags.ptr)[2], S("zzz")));
	assert_int_equal(e[0].scores.count, 4);
	assert_true(((double *)e[0].scores.ptr)[3] == 1e300);
	assert_non_null(e[1].tags.ptr);
	assert_int_equal(e[1].tags.count, 0);
	assert_null(e[1].scores.ptr);
	assert_null(e[2].tags.ptr);
	assert_true(((double *)e[2].scores.ptr)[1] == 0.0);
	assert_true(str_eq(((const emp *)d[1].staff.ptr)[0].name, S("bob")));
	assert_memory_equal(out.ids.ptr, ids, sizeof ids);
	assert_int_equal(out.ids.count, 3);
	assert_memory_equal(out.flags.ptr, flags, sizeof flags);
	assert_memory_equal(out.i8s.ptr, i8s, sizeof i8s);
	assert_memory_equal(out.i16s.ptr, i16s, sizeof i16s);
	assert_memory_equal(out.i64s.ptr, i64s, sizeof i64s);
	assert_memory_equal(out.fl.ptr, fl, sizeof fl);
	assert_int_equal(out.blobs.count, 2);
	assert_memory_equal(((dg_bytes *)out.blobs.ptr)[0].ptr, "\0\1\2", 3);
	assert_null(((dg_bytes *)out.blobs.ptr)[1].ptr);
	/* the set field is a SET value on the wire */
	dg_bobj o;
	dg_value v;
	OK(dg_bobj_open(g.reg, b.data, b.len, &o));
	OK(dg_bobj_get_name(&o, "ids", &v));
	assert_int_equal(v.kind, DG_SET);
	assert_int_equal(v.v.coll.count, 3);

	/* a null pointer */
	in.boss = NULL;
	encode(g.reg, g.org, &in, &b);
	dg_arena_init(&a, mem, sizeof mem);
	out.boss = &boss;
	OK(dg_decode_object(g.reg, g.org, b.data, b.len, &out, &a));
	assert_null(out.boss);
	dg_buf_free(&b);
}

static void test_arena_bounds(void **state)
{
	(void)state;
	alignas(16) static uint8_t mem[8192];
	invoice in = invoice_make(), out;
	dg_arena a;
	dg_buf b;
	dg_buf_init(&b);
	encode(g.reg, g.invoice, &in, &b);
	/* lists need an arena */
	EXPECT(dg_decode_object(g.reg, g.invoice, b.data, b.len, &out, NULL),
	    DG_ERR_NOSPACE);
	/* exactly the bytes a views decode needs, and one fewer */
	dg_arena_init_views(&a, mem, sizeof mem);
	OK(dg_decode_object(g.reg, g.invoice, b.data, b.len, &out, &a));
	size_t need = a.used;
	dg_arena_init_views(&a, mem, need);
	OK(dg_decode_object(g.reg, g.invoice, b.data, b.len, &out, &a));
	invoice_check(&in, &out);
	dg_arena_init_views(&a, mem, need - 1);
	EXPECT(dg_decode_object(g.reg, g.invoice, b.data, b.len, &out, &a),
	    DG_ERR_NOSPACE);
	/* a pointed-to object needs one too */
	emp boss = { S("b"), { NULL, 0 }, { NULL, 0 } };
	org o;
	memset(&o, 0, sizeof o);
	o.boss = &boss;
	encode(g.reg, g.org, &o, &b);
	EXPECT(dg_decode_object(g.reg, g.org, b.data, b.len, &o, NULL),
	    DG_ERR_NOSPACE);
	dg_buf_free(&b);
}

/* An object with a collection field reserves a 2-byte length: bodies
 * under 128 bytes and of 16 KiB or more move, and every length stays a
 * minimal varint. */
static void test_body_length_slot(void **state)
{
	(void)state;
	static uint8_t mem[1 << 17];
	static line many[1000];
	invoice in = invoice_make(), out;
	dg_arena a;
	dg_buf b;
	dg_buf_init(&b);
	for (int i = 0; i < 1000; i++)
		many[i] = lines_in[i % NLINES];
	const uint32_t counts[] = { 0, 1, 3, 20, 600, 1000 };
	for (unsigned k = 0; k < sizeof counts / sizeof counts[0]; k++) {
		in.lines = (dg_list){ many, counts[k] };
		in.notes.count = counts[k] == 0 ? 0 : 2;
		encode(g.reg, g.invoice, &in, &b);
		OK(dg_validate(g.reg, b.data, b.len));
		/* the length after OBJ and the type id */
		size_t lenlen = 1;
		while (b.data[5 + lenlen - 1] & 0x80)
			lenlen++;
		size_t body = b.len - 5 - lenlen;
		assert_int_equal(lenlen, body < 0x80 ? 1 : body < 0x4000 ? 2 : 3);
		dg_arena_init_views(&a, mem, sizeof mem);
		OK(dg_decode_object(g.reg, g.invoice, b.data, b.len, &out, &a));
		invoice_check(&in, &out);
	}
	dg_buf_free(&b);
}

/* ---- the wire is the generic one ---- */

typedef struct bag_raw { dg_raw items; } bag_raw;
typedef struct bag_typed { dg_list items; } bag_typed;

static void test_generic_interop(void **state)
{
	(void)state;
	alignas(16) static uint8_t mem[8192];
	dg_registry *raw_reg;
	const dg_desc *bag_r, *bag_t, *line_r;
	dg_field_def fr[] = { DG_FIELD(bag_raw, items, DG_LIST) };
	dg_field_def ft[] = { DG_FIELD_LIST(bag_typed, items, DG_LIST, DG_OBJECT, "Line") };
	dg_type_def tr = { "Bag", fr, 1, sizeof(bag_raw) };
	dg_type_def tt = { "Bag", ft, 1, sizeof(bag_typed) };
	dg_buf inner, b;
	dg_writer w;
	dg_reader r;
	dg_arena a;
	bag_typed bt;
	bag_raw br;
	uint32_t count;

	/* one registry binds Bag.items as raw bytes, the other as dg_list */
	OK(dg_registry_create(&raw_reg));
	OK(reg_type(raw_reg, "Line", line_fields, NF(line_fields), sizeof(line),
	    &line_r));
	OK(dg_registry_register(raw_reg, &tr, &bag_r));
	OK(dg_registry_register(g.reg, &tt, &bag_t));
	(void)invoice_make();

	/* generic writer -> typed field */
	dg_buf_init(&inner);
	dg_buf_init(&b);
	dg_writer_init(&w, raw_reg, &inner);
	OK(dg_write_list_begin(&w, NLINES));
	OK(dg_write_objects(&w, line_r, lines_in, sizeof(line), NLINES));
	OK(dg_write_end(&w));
	OK(dg_writer_finish(&w));
	br.items = (dg_raw){ inner.data, (uint32_t)inner.len };
	encode(raw_reg, bag_r, &br, &b);
	dg_arena_init(&a, mem, sizeof mem);
	OK(dg_decode_object(g.reg, bag_t, b.data, b.len, &bt, &a));
	assert_int_equal(bt.items.count, NLINES);
	for (int i = 0; i < NLINES; i++) {
		const line *x = (const line *)bt.items.ptr + i;
		assert_true(str_eq(x->sku, lines_in[i].sku));
		assert_int_equal(x->qty, lines_in[i].qty);
	}

	/* typed field -> the same bytes the generic writer wrote, read back
	 * by the generic reader with one registry lookup for 20 objects */
	bt.items = (dg_list){ lines_in, NLINES };
	dg_buf bt_bytes;
	dg_buf_init(&bt_bytes);
	encode(g.reg, bag_t, &bt, &bt_bytes);
	assert_int_equal(bt_bytes.len, b.len);
	assert_memory_equal(bt_bytes.data, b.data, b.len);
	OK(dg_decode_object(raw_reg, bag_r, bt_bytes.data, bt_bytes.len, &br, NULL));
	dg_reader_init(&r, raw_reg, br.items.ptr, br.items.len);
	OK(dg_read_begin(&r, DG_LIST, &count));
	assert_int_equal(count, NLINES);
	line l;
	for (uint32_t i = 0; i < count; i++) {
		OK(dg_read_object(&r, line_r, &l, NULL));
		assert_int_equal(l.qty, lines_in[i].qty);
	}
	assert_int_equal(dg_reader_lookups(&r), 1);

	dg_buf_free(&inner);
	dg_buf_free(&b);
	dg_buf_free(&bt_bytes);
	dg_registry_destroy(raw_reg);
}

/* Field access reaches nested fields without decoding the parent. */
static void test_nested_field_access(void **state)
{
	(void)state;
	invoice in = invoice_make();
	dg_bobj o, cust, addr;
	dg_value v;
	dg_buf b;
	dg_buf_init(&b);
	encode(g.reg, g.invoice, &in, &b);
	OK(dg_bobj_open(g.reg, b.data, b.len, &o));
	OK(dg_bobj_get_name(&o, "cust", &v));
	assert_int_equal(v.kind, DG_OBJECT);
	cust = v.v.obj;
	OK(dg_bobj_get_name(&cust, "addr", &v));
	addr = v.v.obj;
	OK(dg_bobj_get_name(&addr, "city", &v));
	assert_int_equal(v.kind, DG_STRING);
	assert_true(str_eq(v.v.str, S("London")));
	assert_true(inside(v.v.str.ptr, &b));
	OK(dg_bobj_get_name(&o, "lines", &v));
	assert_int_equal(v.kind, DG_LIST);
	assert_int_equal(v.v.coll.count, NLINES);
	OK(dg_bobj_get_name(&o, "notes", &v));
	assert_int_equal(v.v.coll.count, 2);
	/* the schemas say what the lists hold */
	dg_field_info fi;
	OK(dg_desc_field(g.invoice, 3, &fi));
	assert_int_equal(fi.kind, DG_LIST);
	assert_int_equal(fi.elem, DG_OBJECT);
	assert_int_equal(fi.type_id, dg_type_id("Line"));
	OK(dg_desc_field(g.invoice, 4, &fi));
	assert_int_equal(fi.elem, DG_STRING);
	assert_int_equal(fi.type_id, 0);
	dg_buf_free(&b);
}

/* ---- schema evolution of the element type ---- */

typedef struct line2 {
	dg_str sku;
	int32_t qty;
	double price, discount;
	double tax;   /* added in the second schema */
} line2;
typedef struct invoice2 {
	int64_t id, issued;
	customer cust;
	dg_list lines;  /* of line2 */
	dg_list notes;
} invoice2;

static void test_element_schema_evolution(void **state)
{
	(void)state;
	alignas(16) static uint8_t mem[8192];
	static const dg_field_def line2_fields[] = {
		DG_FIELD(line2, sku, DG_STRING),
		DG_FIELD(line2, qty, DG_I32),
		DG_FIELD(line2, price, DG_DOUBLE),
		DG_FIELD(line2, discount, DG_DOUBLE),
		DG_FIELD(line2, tax, DG_DOUBLE),
	};
	static const dg_field_def invoice2_fields[] = {
		DG_FIELD(invoice2, id, DG_I64),
		DG_FIELD(invoice2, issued, DG_I64),
		DG_FIELD_TYPED(invoice2, cust, DG_OBJECT, "Customer"),
		DG_FIELD_LIST(invoice2, lines, DG_LIST, DG_OBJECT, "Line"),
		DG_FIELD_LIST(invoice2, notes, DG_LIST, DG_STRING, NULL),
	};
	dg_registry *nreg;
	const dg_desc *l1, *l2, *inv2, *acc;
	dg_buf def, b;
	dg_arena a;

	/* the newer node knows Line v1 only as a definition from the cluster
	 * (unbound) and binds v2; the older (g.reg) accepts v2's definition */
	OK(dg_registry_create(&nreg));
	register_all(nreg, false);
	dg_buf_init(&def);
	OK(dg_desc_export(g.line, &def));
	OK(dg_registry_accept(nreg, def.data, def.len, &l1));
	OK(reg_type(nreg, "Line", line2_fields, NF(line2_fields), sizeof(line2), &l2));
	assert_int_not_equal(dg_desc_schema_id(l1), dg_desc_schema_id(l2));
	OK(reg_type(nreg, "Invoice", invoice2_fields, NF(invoice2_fields),
	    sizeof(invoice2), &inv2));
	dg_buf_reset(&def);
	OK(dg_desc_export(l2, &def));
	OK(dg_registry_accept(g.reg, def.data, def.len, &acc));

	/* v2 lines read as v1: the tax is dropped */
	line2 l2s[3];
	for (int i = 0; i < 3; i++)
		l2s[i] = (line2){ S(skus[i]), i + 1, 1.5 * i, 0.25, 0.2 };
	invoice2 in2;
	memset(&in2, 0, sizeof in2);
	in2.id = 9;
	in2.lines = (dg_list){ l2s, 3 };
	dg_buf_init(&b);
	encode(nreg, inv2, &in2, &b);
	invoice out;
	dg_arena_init(&a, mem, sizeof mem);
	OK(dg_decode_object(g.reg, g.invoice, b.data, b.len, &out, &a));
	assert_int_equal(out.id, 9);
	assert_int_equal(out.lines.count, 3);
	for (int i = 0; i < 3; i++) {
		const line *x = (const line *)out.lines.ptr + i;
		assert_true(str_eq(x->sku, S(skus[i])));
		assert_int_equal(x->qty, i + 1);
		assert_true(x->price == 1.5 * i);
		assert_true(x->discount == 0.25);
	}
	/* v1 lines read as v2: the tax is null, read as 0 */
	invoice in = invoice_make();
	encode(g.reg, g.invoice, &in, &b);
	invoice2 out2;
	dg_arena_init(&a, mem, sizeof mem);
	OK(dg_decode_object(nreg, inv2, b.data, b.len, &out2, &a));
	assert_int_equal(out2.lines.count, NLINES);
	for (int i = 0; i < NLINES; i++) {
		const line2 *x = (const line2 *)out2.lines.ptr + i;
		assert_true(str_eq(x->sku, lines_in[i].sku));
		assert_true(x->price == lines_in[i].price);
		assert_true(x->tax == 0.0);
	}
	dg_buf_free(&b);
	dg_buf_free(&def);
	dg_registry_destroy(nreg);
}

/* ---- hostile input and bad values ---- */

/* An Invoice whose `lines` field holds the given bytes, laid out by hand
 * (FORMAT.md, "Objects"; no writer checks them): every field is var —
 * id 1, issued 1, cust null, lines, notes null — and the footer holds the
 * offsets of var fields 1..4. */
static dg_err decode_with_lines(const uint8_t *lines, uint32_t n)
{
	alignas(16) static uint8_t mem[8192];
	uint8_t buf[256];
	uint32_t tid = dg_type_id("Invoice"), len = n + 8;
	size_t at = 0;
	invoice out;
	dg_arena a;
	assert_true(n + 16 <= sizeof buf && len < 0x80);
	buf[at++] = 0x14;
	memcpy(buf + at, &tid, 4);
	at += 4;
	buf[at++] = (uint8_t)len;
	buf[at++] = 0x02;               /* id: svarint 1 */
	buf[at++] = 0x02;               /* issued */
	buf[at++] = 0x00;               /* cust: null */
	memcpy(buf + at, lines, n);     /* lines */
	at += n;
	buf[at++] = 0x00;               /* notes: null */
	buf[at++] = 1;                  /* footer: issued, cust, lines, notes */
	buf[at++] = 2;
	buf[at++] = 3;
	buf[at++] = (uint8_t)(3 + n);
	dg_arena_init(&a, mem, sizeof mem);
	return dg_decode_object(g.reg, g.invoice, buf, at, &out, &a);
}

static void test_hostile_lists(void **state)
{
	(void)state;
	uint32_t lt = dg_type_id("Line"), ct = dg_type_id("Customer");
	uint8_t lid[4], cid[4];
	memcpy(lid, &lt, 4);
	memcpy(cid, &ct, 4);
	/* Line body of {sku "A", qty 1, price 0, discount 0}: fixed area 16,
	 * sku "A" (02 41), qty svarint 1 (02), footer offset of qty (18) */
	uint8_t body[] = { 20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		0x02, 0x41, 0x02, 18 };
	assert_int_equal(sizeof body, 21);
	uint8_t buf[128];
	size_t n;

	/* a good one first: LIST 1 DEF Line body */
	n = 0;
	buf[n++] = 0x0F; buf[n++] = 1; buf[n++] = 0x16;
	memcpy(buf + n, lid, 4); n += 4;
	memcpy(buf + n, body, sizeof body); n += sizeof body;
	OK(decode_with_lines(buf, (uint32_t)n));
	/* a REF before any DEF */
	n = 0;
	buf[n++] = 0x0F; buf[n++] = 1; buf[n++] = 0x80;
	memcpy(buf + n, body, sizeof body); n += sizeof body;
	EXPECT(decode_with_lines(buf, (uint32_t)n), DG_ERR_UNKNOWN_SCHEMA);
	/* an element of another type (a Customer where Lines go) */
	n = 0;
	buf[n++] = 0x0F; buf[n++] = 1; buf[n++] = 0x14;
	memcpy(buf + n, cid, 4); n += 4;
	buf[n++] = 0x01; buf[n++] = 0x00; /* never reached: type checked first */
	EXPECT(decode_with_lines(buf, (uint32_t)n), DG_ERR_TYPE_MISMATCH);
	/* a string where objects go */
	static const uint8_t strs[] = { 0x0F, 1, 0x09, 1, 'x' };
	EXPECT(decode_with_lines(strs, sizeof strs), DG_ERR_TYPE_MISMATCH);
	/* a MAP where a list goes */
	static const uint8_t map[] = { 0x12, 0 };
	EXPECT(decode_with_lines(map, sizeof map), DG_ERR_TYPE_MISMATCH);
	/* a count larger than the bytes left: refused before the arena */
	static const uint8_t big[] = { 0x0F, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F, 0x80 };
	EXPECT(decode_with_lines(big, sizeof big), DG_ERR_COUNT);
}

static void test_bad_values(void **state)
{
	(void)state;
	invoice in = invoice_make();
	dg_str bad[1] = { { "\xC3\x28", 2 } };
	dg_buf b;
	dg_writer w;
	dg_buf_init(&b);
	/* invalid UTF-8 in a string list element */
	in.notes = (dg_list){ bad, 1 };
	dg_writer_init(&w, g.reg, &b);
	EXPECT(dg_write_object(&w, g.invoice, &in), DG_ERR_UTF8);

	/* cycles: a pointer can only name a type registered before its own,
	 * so no type reaches itself and no data can loop */
	static const dg_field_def cf[] = {
		DG_FIELD(chain, v, DG_I64),
		DG_FIELD_OBJ_PTR(chain, next, "Chain"),
	};
	dg_type_def ct = { "Chain", cf, 2, sizeof(chain) };
	const dg_desc *cd;
	EXPECT(dg_registry_register(g.reg, &ct, &cd), DG_ERR_UNKNOWN_TYPE);
	dg_buf_free(&b);
}

static void test_register_rules(void **state)
{
	(void)state;
	typedef struct t1 { dg_list l; dg_raw r; void *p; int32_t i; } t1;
	dg_field_def f;
	dg_type_def t = { "Rules", &f, 1, sizeof(t1) };
	const dg_desc *d;
#define TRY(want, ...)                                         \
	do {                                                       \
		f = (dg_field_def)__VA_ARGS__;                         \
		EXPECT(dg_registry_register(g.reg, &t, &d), want);     \
	} while (0)
	/* element kinds a dg_list cannot hold */
	TRY(DG_ERR_INVAL, { "l", DG_LIST, DG_UUID, NULL, offsetof(t1, l), 0 });
	TRY(DG_ERR_INVAL, { "l", DG_LIST, DG_LIST, NULL, offsetof(t1, l), 0 });
	/* lists of objects name a registered type */
	TRY(DG_ERR_INVAL, { "l", DG_LIST, DG_OBJECT, NULL, offsetof(t1, l), 0 });
	TRY(DG_ERR_UNKNOWN_TYPE, { "l", DG_LIST, DG_OBJECT, "Nope", offsetof(t1, l), 0 });
	/* an element kind on a sorted map (bound as dg_raw only) */
	TRY(DG_ERR_INVAL, { "l", DG_SORTED_MAP, DG_STRING, NULL, offsetof(t1, l), 0 });
	/* DG_FF_PTR only on objects; unknown flags */
	TRY(DG_ERR_INVAL, { "p", DG_I64, DG_NULL, NULL, offsetof(t1, p), DG_FF_PTR });
	TRY(DG_ERR_INVAL, { "p", DG_OBJECT, DG_NULL, "Line", offsetof(t1, p), 2 });
	/* misaligned, or too close to the end for a dg_list / pointer */
	TRY(DG_ERR_INVAL, { "l", DG_LIST, DG_I32, NULL, 4, 0 });
	TRY(DG_ERR_INVAL, { "p", DG_OBJECT, DG_NULL, "Line", offsetof(t1, i) + 4, DG_FF_PTR });
	/* and the good ones */
	TRY(DG_OK, { "l", DG_SET, DG_OBJECT, "Line", offsetof(t1, l), 0 });
#undef TRY
	/* the exported definition carries the element kind and type: another
	 * registry accepts it and reads the same field info */
	dg_registry *r2;
	const dg_desc *d2;
	dg_buf def;
	dg_field_info fi;
	dg_buf_init(&def);
	OK(dg_desc_export(d, &def));
	OK(dg_registry_create(&r2));
	OK(dg_registry_accept(r2, def.data, def.len, &d2));
	OK(dg_desc_field(d2, 0, &fi));
	assert_int_equal(fi.kind, DG_SET);
	assert_int_equal(fi.elem, DG_OBJECT);
	assert_int_equal(fi.type_id, dg_type_id("Line"));
	/* the same field as another kind of list is a conflict */
	typedef struct t2 { dg_list l; } t2;
	dg_field_def g2 = DG_FIELD_LIST(t2, l, DG_SET, DG_STRING, NULL);
	dg_type_def tt = { "Rules", &g2, 1, sizeof(t2) };
	EXPECT(dg_registry_register(r2, &tt, NULL), DG_ERR_CONFLICT);
	dg_buf_free(&def);
	dg_registry_destroy(r2);
}

/* ---- maps with string keys ---- */

typedef struct price_e { dg_str key; double value; } price_e;
typedef struct line_e { dg_str key; line value; } line_e;
typedef struct label_e { dg_str key; dg_str value; } label_e;
typedef struct flag_e { dg_str key; bool value; } flag_e;
typedef struct catalog {
	dg_list prices;  /* map of double */
	dg_list items;   /* map of line */
	dg_list labels;  /* map of string */
	dg_list flags;   /* map of bool */
} catalog;

static void test_maps(void **state)
{
	(void)state;
	alignas(16) static uint8_t mem[8192];
	static const dg_field_def cf[] = {
		DG_FIELD_LIST(catalog, prices, DG_MAP, DG_DOUBLE, NULL),
		DG_FIELD_LIST(catalog, items, DG_MAP, DG_OBJECT, "Line"),
		DG_FIELD_LIST(catalog, labels, DG_MAP, DG_STRING, NULL),
		DG_FIELD_LIST(catalog, flags, DG_MAP, DG_BOOL, NULL),
	};
	const dg_desc *cd;
	OK(reg_type(g.reg, "Catalog", cf, NF(cf), sizeof(catalog), &cd));
	(void)invoice_make();
	price_e prices[3] = { { S("tea"), 2.5 }, { S("cake"), 4.25 }, { S("jam"), -0.0 } };
	line_e items[3] = { { S("a"), lines_in[0] }, { S("b"), lines_in[1] },
		{ S("c"), lines_in[2] } };
	label_e labels[2] = { { S("colour"), S("blue") }, { S("size"), { NULL, 0 } } };
	flag_e flags[2] = { { S("x"), true }, { S("y"), false } };
	catalog in = { { prices, 3 }, { items, 3 }, { labels, 2 }, { flags, 2 } }, out;
	dg_arena a;
	dg_buf b;
	dg_buf_init(&b);

	encode(g.reg, cd, &in, &b);
	OK(dg_validate(g.reg, b.data, b.len));
	assert_int_equal(count_id(&b, dg_type_id("Line")), 1);
	dg_arena_init(&a, mem, sizeof mem);
	OK(dg_decode_object(g.reg, cd, b.data, b.len, &out, &a));
	assert_int_equal(out.prices.count, 3);
	const price_e *pe = out.prices.ptr;
	for (int i = 0; i < 3; i++) {
		assert_true(str_eq(pe[i].key, prices[i].key));
		assert_memory_equal(&pe[i].value, &prices[i].value, sizeof(double));
	}
	const line_e *le = out.items.ptr;
	assert_int_equal(out.items.count, 3);
	for (int i = 0; i < 3; i++) {
		assert_true(str_eq(le[i].key, items[i].key));
		assert_true(str_eq(le[i].value.sku, lines_in[i].sku));
		assert_int_equal(le[i].value.qty, lines_in[i].qty);
		assert_true(le[i].value.price == lines_in[i].price);
	}
	const label_e *lb = out.labels.ptr;
	assert_true(str_eq(lb[0].value, S("blue")));
	assert_null(lb[1].value.ptr);
	const flag_e *fe = out.flags.ptr;
	assert_true(fe[0].value && !fe[1].value);
	assert_true(str_eq(fe[1].key, S("y")));

	/* the generic reader sees a MAP of string -> value */
	dg_bobj o;
	dg_value v;
	dg_reader r;
	uint32_t count;
	OK(dg_bobj_open(g.reg, b.data, b.len, &o));
	OK(dg_bobj_get_name(&o, "prices", &v));
	assert_int_equal(v.kind, DG_MAP);
	dg_reader_init(&r, g.reg, v.v.coll.raw.ptr, v.v.coll.raw.len);
	OK(dg_read_begin(&r, DG_MAP, &count));
	assert_int_equal(count, 3);
	dg_str k;
	double d;
	OK(dg_read_str(&r, &k, NULL));
	assert_true(str_eq(k, S("tea")));
	OK(dg_read_double(&r, &d));
	assert_true(d == 2.5);

	/* a null key is a bad value */
	prices[1].key.ptr = NULL;
	dg_writer w;
	dg_buf_reset(&b);
	dg_writer_init(&w, g.reg, &b);
	EXPECT(dg_write_object(&w, cd, &in), DG_ERR_INVAL);
	dg_buf_free(&b);
}

/* Hostile maps, laid out by hand: Catalog with every field null but one. */
static dg_err decode_catalog_prices(const uint8_t *m, uint32_t n)
{
	alignas(16) static uint8_t mem[4096];
	const dg_desc *cd = dg_registry_find(g.reg, dg_type_id("Catalog"));
	uint8_t buf[128];
	uint32_t tid = dg_type_id("Catalog"), len = n + 6;
	size_t at = 0;
	catalog out;
	dg_arena a;
	assert_non_null(cd);
	buf[at++] = 0x14;
	memcpy(buf + at, &tid, 4);
	at += 4;
	buf[at++] = (uint8_t)len;
	memcpy(buf + at, m, n);         /* prices */
	at += n;
	buf[at++] = 0;                  /* items, labels, flags: null */
	buf[at++] = 0;
	buf[at++] = 0;
	buf[at++] = (uint8_t)n;         /* footer */
	buf[at++] = (uint8_t)(n + 1);
	buf[at++] = (uint8_t)(n + 2);
	dg_arena_init(&a, mem, sizeof mem);
	return dg_decode_object(g.reg, cd, buf, at, &out, &a);
}

static void test_hostile_maps(void **state)
{
	(void)state;
	/* test_maps registered Catalog */
	static const uint8_t good[] = { 0x12, 1, 0x09, 1, 'k', 0x08, 0, 0, 0, 0,
		0, 0, 0xF0, 0x3F };
	OK(decode_catalog_prices(good, sizeof good));
	/* a key that is not a string */
	static const uint8_t ikey[] = { 0x12, 1, 0x05, 2, 0x08, 0, 0, 0, 0, 0, 0,
		0xF0, 0x3F };
	EXPECT(decode_catalog_prices(ikey, sizeof ikey), DG_ERR_TYPE_MISMATCH);
	/* a null key */
	static const uint8_t nkey[] = { 0x12, 1, 0x00, 0x08, 0, 0, 0, 0, 0, 0,
		0xF0, 0x3F };
	EXPECT(decode_catalog_prices(nkey, sizeof nkey), DG_ERR_TYPE_MISMATCH);
	/* a value of another kind */
	static const uint8_t ival[] = { 0x12, 1, 0x09, 1, 'k', 0x05, 2 };
	EXPECT(decode_catalog_prices(ival, sizeof ival), DG_ERR_TYPE_MISMATCH);
	/* entries need two bytes each: 3 entries in 5 bytes */
	static const uint8_t cnt[] = { 0x12, 3, 0x09, 0, 0x01, 0x09, 0 };
	EXPECT(decode_catalog_prices(cnt, sizeof cnt), DG_ERR_COUNT);
	/* a LIST where the map goes */
	static const uint8_t lst[] = { 0x0F, 0 };
	EXPECT(decode_catalog_prices(lst, sizeof lst), DG_ERR_TYPE_MISMATCH);
	/* invalid UTF-8 in a key */
	static const uint8_t utf[] = { 0x12, 1, 0x09, 2, 0xC3, 0x28, 0x08, 0, 0,
		0, 0, 0, 0, 0xF0, 0x3F };
	EXPECT(decode_catalog_prices(utf, sizeof utf), DG_ERR_UTF8);
}

/* ---- no allocation per operation ---- */

static void test_no_alloc(void **state)
{
	(void)state;
	alignas(16) static uint8_t mem[8192];
	invoice in = invoice_make(), out;
	dgi_alloc_stats s0, s1;
	dg_arena a;
	dg_buf b;
	dg_buf_init(&b);
	encode(g.reg, g.invoice, &in, &b); /* the buffer grows once */
	dgi_alloc_get_stats(&s0);
	for (int i = 0; i < 1000; i++) {
		encode(g.reg, g.invoice, &in, &b);
		dg_arena_init_views(&a, mem, sizeof mem);
		OK(dg_decode_object(g.reg, g.invoice, b.data, b.len, &out, &a));
		dg_arena_init(&a, mem, sizeof mem);
		OK(dg_decode_object(g.reg, g.invoice, b.data, b.len, &out, &a));
	}
	dgi_alloc_get_stats(&s1);
	assert_int_equal(s1.allocs, s0.allocs);
	dg_buf_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_invoice_roundtrip),
		cmocka_unit_test(test_null_and_empty),
		cmocka_unit_test(test_every_element_kind),
		cmocka_unit_test(test_arena_bounds),
		cmocka_unit_test(test_body_length_slot),
		cmocka_unit_test(test_generic_interop),
		cmocka_unit_test(test_nested_field_access),
		cmocka_unit_test(test_element_schema_evolution),
		cmocka_unit_test(test_hostile_lists),
		cmocka_unit_test(test_bad_values),
		cmocka_unit_test(test_register_rules),
		cmocka_unit_test(test_maps),
		cmocka_unit_test(test_hostile_maps),
		cmocka_unit_test(test_no_alloc),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
