/*
 * marshal_invoice.c — the marshal suite's "invoice" case: nested objects
 * and lists of objects and strings, round trip.
 *
 *   Invoice  {id i64, issued i64, customer Customer, lines [20 Line],
 *             notes [2 string]}
 *   Customer {id i64, name, email, address Address}
 *   Address  {street, city, zip}
 *   Line     {sku string, qty i32, price double, discount double}
 *
 * One operation encodes the invoice and decodes it into the C struct
 * `invoice` below — the same struct for every implementation, with dg_str
 * strings and dg_list lists.  Each implementation's best documented usage,
 * as in marshal_bench.c:
 *   - datagrid: registered types bound to the structs (Customer and Address
 *     embedded, DG_FIELD_TYPED; lines and notes DG_FIELD_LIST), a reused
 *     dg_buf, dg_write_object then dg_decode_object into an arena made with
 *     dg_arena_init_views over reused memory, re-initialised every
 *     operation: strings are views into the input, the lines and notes
 *     arrays go in the arena.
 *   - datagrid-zero: the same with the writer's zero-form mode on
 *     (dg_writer_set_zero_form, FORMAT.md "Zero form"): the lines without
 *     a discount leave their 0.0 out behind a 1-byte mask.
 *   - msgpack-c: maps keyed by field name (nested maps, arrays for the
 *     lists) into the reused msgpack_sbuffer, msgpack_unpack into one
 *     reused zone (cleared per operation, one chunk big enough), read by key
 *     into the struct; strings are views into the input.
 *   - msgpack-c-array: the same with each object an array of its fields in
 *     declaration order, read by position.
 *   - protobuf-c: generated code (Invoice and its messages in
 *     marshal_bench.proto), packed into a buffer sized once at setup,
 *     unpacked with the NULL allocator, fields copied into the struct
 *     (strings as pointers into the unpacked message, freed by the next
 *     operation).
 * The peers' lines and notes arrays are reused memory of this file (no
 * allocation of ours per operation); the datagrid ones live in its arena.
 */
#include "marshal_invoice.h"
#include "marshal.h"

#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DGB_HAVE_MSGPACK
#include <msgpack.h>
#endif
#ifdef DGB_HAVE_PROTOBUF_C
#include "marshal_bench.pb-c.h"
#endif

#define NLINES 20
#define NNOTES 2

#define CHECK(cond)                                                        \
	do {                                                                   \
		if (__builtin_expect(!(cond), 0))                                  \
			dgb_die("%s:%d: check failed: %s", __FILE__, __LINE__, #cond); \
	} while (0)

/* ---- the C structs every implementation decodes into ---- */

typedef struct inv_address {
	dg_str street, city, zip;
} inv_address;

typedef struct inv_customer {
	int64_t id;
	dg_str name, email;
	inv_address address;
} inv_customer;

typedef struct inv_line {
	dg_str sku;
	int32_t qty;
	double price, discount;
} inv_line;

typedef struct invoice {
	int64_t id, issued;
	inv_customer customer;
	dg_list lines;   /* of inv_line */
	dg_list notes;   /* of dg_str */
} invoice;

static const dg_field_def address_fields[] = {
	DG_FIELD(inv_address, street, DG_STRING),
	DG_FIELD(inv_address, city, DG_STRING),
	DG_FIELD(inv_address, zip, DG_STRING),
};
static const dg_field_def customer_fields[] = {
	DG_FIELD(inv_customer, id, DG_I64),
	DG_FIELD(inv_customer, name, DG_STRING),
	DG_FIELD(inv_customer, email, DG_STRING),
	DG_FIELD_TYPED(inv_customer, address, DG_OBJECT, "Address"),
};
static const dg_field_def line_fields[] = {
	DG_FIELD(inv_line, sku, DG_STRING),
	DG_FIELD(inv_line, qty, DG_I32),
	DG_FIELD(inv_line, price, DG_DOUBLE),
	DG_FIELD(inv_line, discount, DG_DOUBLE),
};
static const dg_field_def invoice_fields[] = {
	DG_FIELD(invoice, id, DG_I64),
	DG_FIELD(invoice, issued, DG_I64),
	DG_FIELD_TYPED(invoice, customer, DG_OBJECT, "Customer"),
	DG_FIELD_LIST(invoice, lines, DG_LIST, DG_OBJECT, "Line"),
	DG_FIELD_LIST(invoice, notes, DG_LIST, DG_STRING, NULL),
};
#define NF(a) ((uint32_t)(sizeof(a) / sizeof((a)[0])))

/* ---- the data (char arrays, not literals: protobuf-c wants char *) ---- */

static char s_name[] = "Margaret Okonkwo-Lindqvist";
static char s_email[] = "m.okonkwo-lindqvist@northwind-traders.com";
static char s_street[] = "1427 Harbor View Drive, Suite 300";
static char s_city[] = "San Francisco";
static char s_zip[] = "94107-2341";
static char s_note0[] = "Deliver to loading dock B";
static char s_note1[] = "Net 30; late fee 1.5%/month";

#define INV_ID INT64_C(2026000417)
#define INV_ISSUED INT64_C(1767225600123)
#define CUST_ID INT64_C(880042)

static struct ictx {
	dg_registry *reg;
	const dg_desc *invoice;
	dg_buf buf;                /* reused output of every datagrid encode */
	dg_writer w;
	dg_arena arena;            /* views arena over arena_mem, per operation */
	alignas(16) uint8_t arena_mem[4096];

	invoice in;
	inv_line lines_in[NLINES];
	dg_str notes_in[NNOTES];
	char skus[NLINES][16];

	invoice out;               /* decoded */
	inv_line out_lines[NLINES];  /* the peers' decoded lines and notes */
	dg_str out_notes[NNOTES];

#ifdef DGB_HAVE_MSGPACK
	msgpack_sbuffer sbuf;
	msgpack_packer pk;
	msgpack_zone zone;
#endif
#ifdef DGB_HAVE_PROTOBUF_C
	Dgbench__Address pb_addr;
	Dgbench__Customer pb_cust;
	Dgbench__Line pb_lines[NLINES];
	Dgbench__Line *pb_line_ptrs[NLINES];
	char *pb_notes[NNOTES];
	Dgbench__Invoice pb_inv;
	uint8_t *pb_buf;           /* pack output, sized at setup */
	ProtobufCMessage *pb_last; /* last unpacked message, freed by the next
	                              operation: decoded views live until then */
#endif
} I;

/* ---- checksum and verification (the same for every implementation) ---- */

static inline uint64_t dbits(double d)
{
	uint64_t u;
	memcpy(&u, &d, sizeof u);
	return u;
}

static inline uint64_t invoice_sum(const invoice *v)
{
	const inv_customer *c = &v->customer;
	uint64_t s = (uint64_t)v->id + (uint64_t)v->issued + (uint64_t)c->id +
	    c->name.len + c->email.len + c->address.street.len +
	    c->address.city.len + (unsigned char)c->address.zip.ptr[0];
	const inv_line *l = v->lines.ptr;
	for (uint32_t k = 0; k < v->lines.count; k++)
		s += (uint64_t)l[k].qty + l[k].sku.len +
		    (unsigned char)l[k].sku.ptr[4] + dbits(l[k].price) +
		    dbits(l[k].discount);
	const dg_str *n = v->notes.ptr;
	for (uint32_t k = 0; k < v->notes.count; k++)
		s += n[k].len;
	return s;
}

static bool str_eq(dg_str a, dg_str b)
{
	if (a.ptr == NULL || b.ptr == NULL)
		return a.ptr == b.ptr;
	return a.len == b.len && memcmp(a.ptr, b.ptr, a.len) == 0;
}

/* The first field of b that differs from a (NULL: none), into what. */
static const char *invoice_diff(const invoice *a, const invoice *b,
    char *what, size_t cap)
{
	const inv_customer *ca = &a->customer, *cb = &b->customer;
	if (a->id != b->id) return "id";
	if (a->issued != b->issued) return "issued";
	if (ca->id != cb->id) return "customer.id";
	if (!str_eq(ca->name, cb->name)) return "customer.name";
	if (!str_eq(ca->email, cb->email)) return "customer.email";
	if (!str_eq(ca->address.street, cb->address.street))
		return "customer.address.street";
	if (!str_eq(ca->address.city, cb->address.city))
		return "customer.address.city";
	if (!str_eq(ca->address.zip, cb->address.zip))
		return "customer.address.zip";
	if (a->lines.count != b->lines.count || b->lines.ptr == NULL)
		return "lines (count or null)";
	for (uint32_t k = 0; k < a->lines.count; k++) {
		const inv_line *x = (const inv_line *)a->lines.ptr + k;
		const inv_line *y = (const inv_line *)b->lines.ptr + k;
		const char *f = !str_eq(x->sku, y->sku) ? "sku"
		    : x->qty != y->qty ? "qty"
		    : x->price != y->price ? "price"
		    : x->discount != y->discount ? "discount" : NULL;
		if (f != NULL) {
			snprintf(what, cap, "lines[%u].%s", k, f);
			return what;
		}
	}
	if (a->notes.count != b->notes.count || b->notes.ptr == NULL)
		return "notes (count or null)";
	for (uint32_t k = 0; k < a->notes.count; k++)
		if (!str_eq(((const dg_str *)a->notes.ptr)[k],
		    ((const dg_str *)b->notes.ptr)[k])) {
			snprintf(what, cap, "notes[%u]", k);
			return what;
		}
	return NULL;
}

void dgb_invoice_verify(const char *what)
{
	char field[32];
	const char *d = invoice_diff(&I.in, &I.out, field, sizeof field);
	if (d != NULL)
		dgb_die("%s: decoded invoice differs from the input: %s", what, d);
	/* nothing of this run may help the next implementation's check */
	memset(&I.out, 0, sizeof I.out);
	memset(I.out_lines, 0, sizeof I.out_lines);
	memset(I.out_notes, 0, sizeof I.out_notes);
	memset(I.arena_mem, 0, sizeof I.arena_mem);
}

/* ------------------------------------------------------------------------
 * datagrid
 * ------------------------------------------------------------------------ */

/* zero: the writer's zero-form mode (a constant in each caller) */
static inline __attribute__((always_inline)) uint64_t dg_invoice_run(
    uint64_t iters, bool zero)
{
	uint64_t sum = 0;
	for (uint64_t i = 0; i < iters; i++) {
		dgb_clobber(&I.in);
		dgb_clobber(I.lines_in);
		dg_buf_reset(&I.buf);
		dg_writer_init(&I.w, I.reg, &I.buf);
		if (zero)
			dg_writer_set_zero_form(&I.w, true);
		DG_DO(dg_write_object(&I.w, I.invoice, &I.in));
		DG_DO(dg_writer_finish(&I.w));
		dg_arena_init_views(&I.arena, I.arena_mem, sizeof I.arena_mem);
		DG_DO(dg_decode_object(I.reg, I.invoice, I.buf.data, I.buf.len,
		    &I.out, &I.arena));
		sum += invoice_sum(&I.out);
	}
	return sum;
}

static uint64_t dg_invoice(void *ctx, uint64_t iters)
{
	(void)ctx;
	return dg_invoice_run(iters, false);
}

static uint64_t dg_invoice_zero(void *ctx, uint64_t iters)
{
	(void)ctx;
	return dg_invoice_run(iters, true);
}

/* ------------------------------------------------------------------------
 * msgpack-c
 * ------------------------------------------------------------------------ */
#ifdef DGB_HAVE_MSGPACK

/* One invoice's tree is ~6 KB of msgpack_objects: one chunk holds it. */
#define MP_ZONE_CHUNK (64u * 1024)

/* Each pack call is its own statement: the operands of | are unsequenced,
 * and the bytes must come out in call order. */
static int mp_str(msgpack_packer *pk, dg_str s)
{
	int rc = msgpack_pack_str(pk, s.len);
	rc |= msgpack_pack_str_body(pk, s.ptr, s.len);
	return rc;
}

/* A key, then its value (one pack call), added to the caller's rc:
 * MP_KV(pk, "id", msgpack_pack_int64(pk, v->id)). */
#define MP_KV(pk, lit, value)                                          \
	do {                                                               \
		rc |= mp_str(pk, (dg_str){ lit, (uint32_t)(sizeof lit - 1) }); \
		rc |= (value);                                                 \
	} while (0)

static bool mp_is(const msgpack_object *k, const char *s, uint32_t n)
{
	return k->via.str.size == n && memcmp(k->via.str.ptr, s, n) == 0;
}
#define MP_IS(k, lit) mp_is(k, lit, sizeof lit - 1)

static bool mp_int(const msgpack_object *o, int64_t *out)
{
	if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT64_MAX) {
		*out = (int64_t)o->via.u64;
		return true;
	}
	if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
		*out = o->via.i64;
		return true;
	}
	return false;
}

static bool mp_i32(const msgpack_object *o, int32_t *out)
{
	int64_t v;
	if (!mp_int(o, &v) || v < INT32_MIN || v > INT32_MAX)
		return false;
	*out = (int32_t)v;
	return true;
}

static bool mp_double(const msgpack_object *o, double *out)
{
	if (o->type != MSGPACK_OBJECT_FLOAT64 && o->type != MSGPACK_OBJECT_FLOAT32)
		return false;
	*out = o->via.f64;
	return true;
}

static bool mp_get_str(const msgpack_object *o, dg_str *out)
{
	if (o->type != MSGPACK_OBJECT_STR)
		return false;
	out->ptr = o->via.str.ptr;
	out->len = o->via.str.size;
	return true;
}

static void mp_unpack(msgpack_object *obj)
{
	size_t off = 0;
	msgpack_zone_clear(&I.zone);
	msgpack_unpack_return rc = msgpack_unpack(I.sbuf.data, I.sbuf.size, &off,
	    &I.zone, obj);
	CHECK(rc == MSGPACK_UNPACK_SUCCESS);
}

/* Reads the notes array (both encodings) into out_notes. */
static bool mp_read_notes(const msgpack_object *o, invoice *out)
{
	if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size > NNOTES)
		return false;
	for (uint32_t k = 0; k < o->via.array.size; k++)
		if (!mp_get_str(&o->via.array.ptr[k], &I.out_notes[k]))
			return false;
	out->notes.ptr = I.out_notes;
	out->notes.count = o->via.array.size;
	return true;
}

/* -- maps keyed by field name -- */

static int mp_pack_invoice(msgpack_packer *pk, const invoice *v)
{
	const inv_customer *c = &v->customer;
	int rc = msgpack_pack_map(pk, 5);
	MP_KV(pk, "id", msgpack_pack_int64(pk, v->id));
	MP_KV(pk, "issued", msgpack_pack_int64(pk, v->issued));
	MP_KV(pk, "customer", msgpack_pack_map(pk, 4));
	MP_KV(pk, "id", msgpack_pack_int64(pk, c->id));
	MP_KV(pk, "name", mp_str(pk, c->name));
	MP_KV(pk, "email", mp_str(pk, c->email));
	MP_KV(pk, "address", msgpack_pack_map(pk, 3));
	MP_KV(pk, "street", mp_str(pk, c->address.street));
	MP_KV(pk, "city", mp_str(pk, c->address.city));
	MP_KV(pk, "zip", mp_str(pk, c->address.zip));
	MP_KV(pk, "lines", msgpack_pack_array(pk, v->lines.count));
	const inv_line *l = v->lines.ptr;
	for (uint32_t k = 0; k < v->lines.count; k++) {
		rc |= msgpack_pack_map(pk, 4);
		MP_KV(pk, "sku", mp_str(pk, l[k].sku));
		MP_KV(pk, "qty", msgpack_pack_int32(pk, l[k].qty));
		MP_KV(pk, "price", msgpack_pack_double(pk, l[k].price));
		MP_KV(pk, "discount", msgpack_pack_double(pk, l[k].discount));
	}
	MP_KV(pk, "notes", msgpack_pack_array(pk, v->notes.count));
	const dg_str *n = v->notes.ptr;
	for (uint32_t k = 0; k < v->notes.count; k++)
		rc |= mp_str(pk, n[k]);
	return rc;
}

/* Each reader: a map by key into *out (missing fields stay zero). */
static bool mp_read_address(const msgpack_object *o, inv_address *out)
{
	if (o->type != MSGPACK_OBJECT_MAP)
		return false;
	memset(out, 0, sizeof *out);
	const msgpack_object_kv *kv = o->via.map.ptr;
	for (uint32_t i = 0; i < o->via.map.size; i++) {
		const msgpack_object *k = &kv[i].key, *v = &kv[i].val;
		if (k->type != MSGPACK_OBJECT_STR)
			return false;
		if (MP_IS(k, "street")) {
			if (!mp_get_str(v, &out->street))
				return false;
		} else if (MP_IS(k, "city")) {
			if (!mp_get_str(v, &out->city))
				return false;
		} else if (MP_IS(k, "zip")) {
			if (!mp_get_str(v, &out->zip))
				return false;
		}
	}
	return true;
}

static bool mp_read_customer(const msgpack_object *o, inv_customer *out)
{
	if (o->type != MSGPACK_OBJECT_MAP)
		return false;
	memset(out, 0, sizeof *out);
	const msgpack_object_kv *kv = o->via.map.ptr;
	for (uint32_t i = 0; i < o->via.map.size; i++) {
		const msgpack_object *k = &kv[i].key, *v = &kv[i].val;
		if (k->type != MSGPACK_OBJECT_STR)
			return false;
		if (MP_IS(k, "id")) {
			if (!mp_int(v, &out->id))
				return false;
		} else if (MP_IS(k, "name")) {
			if (!mp_get_str(v, &out->name))
				return false;
		} else if (MP_IS(k, "email")) {
			if (!mp_get_str(v, &out->email))
				return false;
		} else if (MP_IS(k, "address")) {
			if (!mp_read_address(v, &out->address))
				return false;
		}
	}
	return true;
}

static bool mp_read_line(const msgpack_object *o, inv_line *out)
{
	if (o->type != MSGPACK_OBJECT_MAP)
		return false;
	memset(out, 0, sizeof *out);
	const msgpack_object_kv *kv = o->via.map.ptr;
	for (uint32_t i = 0; i < o->via.map.size; i++) {
		const msgpack_object *k = &kv[i].key, *v = &kv[i].val;
		if (k->type != MSGPACK_OBJECT_STR)
			return false;
		if (MP_IS(k, "sku")) {
			if (!mp_get_str(v, &out->sku))
				return false;
		} else if (MP_IS(k, "qty")) {
			if (!mp_i32(v, &out->qty))
				return false;
		} else if (MP_IS(k, "price")) {
			if (!mp_double(v, &out->price))
				return false;
		} else if (MP_IS(k, "discount")) {
			if (!mp_double(v, &out->discount))
				return false;
		}
	}
	return true;
}

static bool mp_read_invoice(const msgpack_object *o, invoice *out)
{
	if (o->type != MSGPACK_OBJECT_MAP)
		return false;
	memset(out, 0, sizeof *out);
	const msgpack_object_kv *kv = o->via.map.ptr;
	for (uint32_t i = 0; i < o->via.map.size; i++) {
		const msgpack_object *k = &kv[i].key, *v = &kv[i].val;
		if (k->type != MSGPACK_OBJECT_STR)
			return false;
		if (MP_IS(k, "id")) {
			if (!mp_int(v, &out->id))
				return false;
		} else if (MP_IS(k, "issued")) {
			if (!mp_int(v, &out->issued))
				return false;
		} else if (MP_IS(k, "customer")) {
			if (!mp_read_customer(v, &out->customer))
				return false;
		} else if (MP_IS(k, "lines")) {
			if (v->type != MSGPACK_OBJECT_ARRAY || v->via.array.size > NLINES)
				return false;
			for (uint32_t j = 0; j < v->via.array.size; j++)
				if (!mp_read_line(&v->via.array.ptr[j], &I.out_lines[j]))
					return false;
			out->lines.ptr = I.out_lines;
			out->lines.count = v->via.array.size;
		} else if (MP_IS(k, "notes")) {
			if (!mp_read_notes(v, out))
				return false;
		}
	}
	return true;
}

static uint64_t mp_invoice(void *ctx, uint64_t iters)
{
	(void)ctx;
	uint64_t sum = 0;
	msgpack_object obj;
	for (uint64_t i = 0; i < iters; i++) {
		dgb_clobber(&I.in);
		dgb_clobber(I.lines_in);
		I.sbuf.size = 0; /* keep the memory, as msgpack_sbuffer_clear does */
		CHECK(mp_pack_invoice(&I.pk, &I.in) == 0);
		mp_unpack(&obj);
		CHECK(mp_read_invoice(&obj, &I.out));
		sum += invoice_sum(&I.out);
	}
	return sum;
}

/* -- positional arrays: each object an array of its fields in declaration
 * order -- */

static int mpa_pack_invoice(msgpack_packer *pk, const invoice *v)
{
	const inv_customer *c = &v->customer;
	int rc = msgpack_pack_array(pk, 5);
	rc |= msgpack_pack_int64(pk, v->id);
	rc |= msgpack_pack_int64(pk, v->issued);
	rc |= msgpack_pack_array(pk, 4);
	rc |= msgpack_pack_int64(pk, c->id);
	rc |= mp_str(pk, c->name);
	rc |= mp_str(pk, c->email);
	rc |= msgpack_pack_array(pk, 3);
	rc |= mp_str(pk, c->address.street);
	rc |= mp_str(pk, c->address.city);
	rc |= mp_str(pk, c->address.zip);
	rc |= msgpack_pack_array(pk, v->lines.count);
	const inv_line *l = v->lines.ptr;
	for (uint32_t k = 0; k < v->lines.count; k++) {
		rc |= msgpack_pack_array(pk, 4);
		rc |= mp_str(pk, l[k].sku);
		rc |= msgpack_pack_int32(pk, l[k].qty);
		rc |= msgpack_pack_double(pk, l[k].price);
		rc |= msgpack_pack_double(pk, l[k].discount);
	}
	rc |= msgpack_pack_array(pk, v->notes.count);
	const dg_str *n = v->notes.ptr;
	for (uint32_t k = 0; k < v->notes.count; k++)
		rc |= mp_str(pk, n[k]);
	return rc;
}

/* The elements of an array of exactly n fields, or NULL. */
static const msgpack_object *mpa_fields(const msgpack_object *o, uint32_t n)
{
	if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != n)
		return NULL;
	return o->via.array.ptr;
}

static bool mpa_read_invoice(const msgpack_object *o, invoice *out)
{
	const msgpack_object *f = mpa_fields(o, 5), *c, *a, *l;
	if (f == NULL || !mp_int(&f[0], &out->id) || !mp_int(&f[1], &out->issued))
		return false;
	inv_customer *oc = &out->customer;
	if ((c = mpa_fields(&f[2], 4)) == NULL || !mp_int(&c[0], &oc->id) ||
	    !mp_get_str(&c[1], &oc->name) || !mp_get_str(&c[2], &oc->email))
		return false;
	if ((a = mpa_fields(&c[3], 3)) == NULL ||
	    !mp_get_str(&a[0], &oc->address.street) ||
	    !mp_get_str(&a[1], &oc->address.city) ||
	    !mp_get_str(&a[2], &oc->address.zip))
		return false;
	if (f[3].type != MSGPACK_OBJECT_ARRAY || f[3].via.array.size > NLINES)
		return false;
	for (uint32_t k = 0; k < f[3].via.array.size; k++) {
		inv_line *ol = &I.out_lines[k];
		if ((l = mpa_fields(&f[3].via.array.ptr[k], 4)) == NULL ||
		    !mp_get_str(&l[0], &ol->sku) || !mp_i32(&l[1], &ol->qty) ||
		    !mp_double(&l[2], &ol->price) || !mp_double(&l[3], &ol->discount))
			return false;
	}
	out->lines.ptr = I.out_lines;
	out->lines.count = f[3].via.array.size;
	return mp_read_notes(&f[4], out);
}

static uint64_t mpa_invoice(void *ctx, uint64_t iters)
{
	(void)ctx;
	uint64_t sum = 0;
	msgpack_object obj;
	for (uint64_t i = 0; i < iters; i++) {
		dgb_clobber(&I.in);
		dgb_clobber(I.lines_in);
		I.sbuf.size = 0;
		CHECK(mpa_pack_invoice(&I.pk, &I.in) == 0);
		mp_unpack(&obj);
		CHECK(mpa_read_invoice(&obj, &I.out));
		sum += invoice_sum(&I.out);
	}
	return sum;
}
#endif /* DGB_HAVE_MSGPACK */

/* ------------------------------------------------------------------------
 * protobuf-c
 * ------------------------------------------------------------------------ */
#ifdef DGB_HAVE_PROTOBUF_C

/* Frees the previous operation's message and keeps this one. */
static void pb_keep(ProtobufCMessage *m)
{
	if (I.pb_last != NULL)
		protobuf_c_message_free_unpacked(I.pb_last, NULL);
	I.pb_last = m;
}

static inline dg_str pb_str(const char *s)
{
	return (dg_str){ s, (uint32_t)strlen(s) };
}

static void pb_to_invoice(const Dgbench__Invoice *m, invoice *out)
{
	const Dgbench__Customer *c = m->customer;
	CHECK(c != NULL && c->address != NULL);
	CHECK(m->n_lines <= NLINES && m->n_notes <= NNOTES);
	out->id = m->id;
	out->issued = m->issued;
	out->customer.id = c->id;
	out->customer.name = pb_str(c->name);
	out->customer.email = pb_str(c->email);
	out->customer.address.street = pb_str(c->address->street);
	out->customer.address.city = pb_str(c->address->city);
	out->customer.address.zip = pb_str(c->address->zip);
	for (size_t k = 0; k < m->n_lines; k++) {
		const Dgbench__Line *l = m->lines[k];
		I.out_lines[k] = (inv_line){ pb_str(l->sku), l->qty, l->price,
		    l->discount };
	}
	out->lines.ptr = I.out_lines;
	out->lines.count = (uint32_t)m->n_lines;
	for (size_t k = 0; k < m->n_notes; k++)
		I.out_notes[k] = pb_str(m->notes[k]);
	out->notes.ptr = I.out_notes;
	out->notes.count = (uint32_t)m->n_notes;
}

static uint64_t pb_invoice(void *ctx, uint64_t iters)
{
	(void)ctx;
	uint64_t sum = 0;
	for (uint64_t i = 0; i < iters; i++) {
		dgb_clobber(&I.pb_inv);
		dgb_clobber(I.pb_lines);
		size_t n = dgbench__invoice__pack(&I.pb_inv, I.pb_buf);
		Dgbench__Invoice *m = dgbench__invoice__unpack(NULL, n, I.pb_buf);
		CHECK(m != NULL);
		pb_to_invoice(m, &I.out);
		sum += invoice_sum(&I.out);
		pb_keep(&m->base);
	}
	return sum;
}
#endif /* DGB_HAVE_PROTOBUF_C */

/* ------------------------------------------------------------------------
 * Setup.
 * ------------------------------------------------------------------------ */

static dg_str S(const char *s)
{
	return (dg_str){ s, (uint32_t)strlen(s) };
}

static void reg_type(const char *name, const dg_field_def *f, uint32_t n,
    size_t size, const dg_desc **out)
{
	dg_type_def t = { name, f, n, size };
	DG_DO(dg_registry_register(I.reg, &t, out));
}

unsigned dgb_invoice_setup(dgb_invoice_impl *out)
{
	unsigned n = 0;

	DG_DO(dg_registry_create(&I.reg));
	reg_type("Address", address_fields, NF(address_fields),
	    sizeof(inv_address), NULL);
	reg_type("Customer", customer_fields, NF(customer_fields),
	    sizeof(inv_customer), NULL);
	reg_type("Line", line_fields, NF(line_fields), sizeof(inv_line), NULL);
	reg_type("Invoice", invoice_fields, NF(invoice_fields), sizeof(invoice),
	    &I.invoice);
	dg_buf_init(&I.buf);

	invoice *v = &I.in;
	v->id = INV_ID;
	v->issued = INV_ISSUED;
	v->customer.id = CUST_ID;
	v->customer.name = S(s_name);
	v->customer.email = S(s_email);
	v->customer.address.street = S(s_street);
	v->customer.address.city = S(s_city);
	v->customer.address.zip = S(s_zip);
	/* unit prices $1.99..$240, with cents; half the lines discounted */
	for (int i = 0; i < NLINES; i++) {
		inv_line *l = &I.lines_in[i];
		snprintf(I.skus[i], sizeof I.skus[i], "SKU-%05d", 100 + i * 7);
		l->sku = S(I.skus[i]);
		l->qty = 1 + (i * 5) % 12;
		l->price = (double)(199 + (i * 7919) % 24000) / 100.0;
		l->discount = i % 4 == 1 ? 0.05 : i % 4 == 3 ? 0.15 : 0.0;
	}
	v->lines = (dg_list){ I.lines_in, NLINES };
	I.notes_in[0] = S(s_note0);
	I.notes_in[1] = S(s_note1);
	v->notes = (dg_list){ I.notes_in, NNOTES };

	/* datagrid: one run leaves the encoding in I.buf */
	dg_invoice(NULL, 1);
	DG_DO(dg_validate(I.reg, I.buf.data, I.buf.len));
	out[n++] = (dgb_invoice_impl){ "datagrid", dg_invoice, (long long)I.buf.len };
	dg_invoice_zero(NULL, 1);
	DG_DO(dg_validate(I.reg, I.buf.data, I.buf.len));
	out[n++] = (dgb_invoice_impl){ "datagrid-zero", dg_invoice_zero,
	    (long long)I.buf.len };

#ifdef DGB_HAVE_MSGPACK
	msgpack_sbuffer_init(&I.sbuf);
	msgpack_packer_init(&I.pk, &I.sbuf, msgpack_sbuffer_write);
	CHECK(msgpack_zone_init(&I.zone, MP_ZONE_CHUNK));
	mp_invoice(NULL, 1);
	out[n++] = (dgb_invoice_impl){ "msgpack-c", mp_invoice, (long long)I.sbuf.size };
	mpa_invoice(NULL, 1);
	out[n++] = (dgb_invoice_impl){ "msgpack-c-array", mpa_invoice,
	    (long long)I.sbuf.size };
#endif

#ifdef DGB_HAVE_PROTOBUF_C
	dgbench__address__init(&I.pb_addr);
	I.pb_addr.street = s_street;
	I.pb_addr.city = s_city;
	I.pb_addr.zip = s_zip;
	dgbench__customer__init(&I.pb_cust);
	I.pb_cust.id = CUST_ID;
	I.pb_cust.name = s_name;
	I.pb_cust.email = s_email;
	I.pb_cust.address = &I.pb_addr;
	for (int i = 0; i < NLINES; i++) {
		Dgbench__Line *l = &I.pb_lines[i];
		dgbench__line__init(l);
		l->sku = I.skus[i];
		l->qty = I.lines_in[i].qty;
		l->price = I.lines_in[i].price;
		l->discount = I.lines_in[i].discount;
		I.pb_line_ptrs[i] = l;
	}
	I.pb_notes[0] = s_note0;
	I.pb_notes[1] = s_note1;
	dgbench__invoice__init(&I.pb_inv);
	I.pb_inv.id = INV_ID;
	I.pb_inv.issued = INV_ISSUED;
	I.pb_inv.customer = &I.pb_cust;
	I.pb_inv.n_lines = NLINES;
	I.pb_inv.lines = I.pb_line_ptrs;
	I.pb_inv.n_notes = NNOTES;
	I.pb_inv.notes = I.pb_notes;
	size_t len = dgbench__invoice__get_packed_size(&I.pb_inv);
	I.pb_buf = malloc(len);
	CHECK(I.pb_buf != NULL);
	out[n++] = (dgb_invoice_impl){ "protobuf-c", pb_invoice, (long long)len };
#endif
	CHECK(n <= DGB_INVOICE_IMPLS);
	return n;
}

void dgb_invoice_teardown(void)
{
#ifdef DGB_HAVE_PROTOBUF_C
	pb_keep(NULL);
	free(I.pb_buf);
#endif
#ifdef DGB_HAVE_MSGPACK
	msgpack_zone_destroy(&I.zone);
	msgpack_sbuffer_destroy(&I.sbuf);
#endif
	dg_buf_free(&I.buf);
	dg_registry_destroy(I.reg);
}
