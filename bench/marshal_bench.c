/*
 * marshal_bench.c — the "marshal" suite: datagrid's codec against msgpack-c
 * and protobuf-c on the same logical data, in the same run.
 *
 * Cases (a round trip is encode + decode into a C struct):
 *   small_object    Person {id, name, score, ts}, round trip
 *   list100         a list of 100 Persons, round trip
 *   map50_str_uuid  50 string keys -> 16-byte uuid, round trip
 *   sorted_map12    12 string -> int64 entries as a sorted map, encode only
 *   hash_map12      the same entries as a hash map, encode only (datagrid)
 *   decode1000      1000 Persons encoded once; decode, reported per object
 *   invoice         an Invoice {id, issued, Customer {id, name, email,
 *                   Address {street, city, zip}}, 20 Lines {sku, qty, price,
 *                   discount}, 2 note strings}, round trip (marshal_invoice.c)
 * "bytes" is the encoded size (decode1000: of the whole 1000-object list).
 *
 * Each implementation is used the way its documentation recommends for
 * speed, and every peer gets its best case:
 *   - datagrid: a registered type bound to a C struct (DG_FIELD), a reused
 *     dg_buf (dg_buf_reset + dg_writer_init per operation), strings decoded
 *     as zero-copy views.  invoice: Customer and Address embedded
 *     (DG_FIELD_TYPED), lines and notes bound as dg_list (DG_FIELD_LIST),
 *     decoded with an arena made by dg_arena_init_views over reused memory
 *     (re-initialised per operation): strings stay views, the lines and
 *     notes arrays go in the arena.
 *   - datagrid-zero (small_object, invoice): the same with the writer's
 *     zero-form mode on (dg_writer_set_zero_form).
 *   - msgpack-c: maps keyed by field name packed into a reused
 *     msgpack_sbuffer (its size reset per operation), decoded with
 *     msgpack_unpack into one reused msgpack_zone (cleared per operation)
 *     whose chunk is big enough for the largest case, so the zone never
 *     mallocs after warm-up; strings are views into the input, as with
 *     datagrid; fields are read by key into the same C struct.  invoice:
 *     nested maps, arrays for the lists.
 *   - msgpack-c-array (invoice): the same, with each object packed as an
 *     array of its fields in declaration order and read by position.
 *   - protobuf-c: generated code (marshal_bench.proto); the data never
 *     changes, so the output buffer is sized once at setup with
 *     get_packed_size and the timed loop only packs (real code would size
 *     each message first: an extra pass that is not charged here); decoded
 *     with <msg>__unpack(NULL allocator), fields copied into the same C
 *     struct (strings as pointers into the unpacked message, which the next
 *     operation frees with free_unpacked: one unpack + one free each).
 *     invoice: nested messages, `repeated Line`, `repeated string`.
 * The peers decode lists into arrays the operation reuses; datagrid puts
 * them in its arena.
 * Decoded fields are summed into a checksum (stderr at exit) and checked
 * against the input once before timing.
 */
#include "harness.h"
#include "marshal.h"
#include "marshal_invoice.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DGB_HAVE_MSGPACK
#include <msgpack.h>
#endif
#ifdef DGB_HAVE_PROTOBUF_C
#include "marshal_bench.pb-c.h"
#endif

#define SUITE "marshal"
#define LIST_N 100
#define DEC_N 1000
#define MAP_N 50
#define SMAP_N 12

#define P_ID INT64_C(12345678)
#define P_NAME "alice-smith"
#define P_SCORE 98.5
#define P_TS INT64_C(1767225600000)

#define CHECK(cond)                                                        \
	do {                                                                   \
		if (__builtin_expect(!(cond), 0))                                  \
			dgb_die("%s:%d: check failed: %s", __FILE__, __LINE__, #cond); \
	} while (0)

/* The C struct every implementation decodes into. */
typedef struct person {
	int64_t id;
	dg_str name;
	double score;
	int64_t ts;
} person;

static const dg_field_def person_fields[] = {
	DG_FIELD(person, id, DG_I64),
	DG_FIELD(person, name, DG_STRING),
	DG_FIELD(person, score, DG_DOUBLE),
	DG_FIELD(person, ts, DG_I64),
};
static const dg_type_def person_def = {
	"Person", person_fields, 4, sizeof(person)
};

typedef struct str_uuid {
	dg_str key;
	dg_uuid val;
} str_uuid;

/* Suite state: inputs, outputs, reused buffers.  Static: the arrays are
 * large and dgbench runs one suite at a time. */
static struct mctx {
	dg_registry *reg;
	const dg_desc *person;
	dg_buf buf;           /* reused output of every datagrid encode */
	dg_buf dec_dg;        /* decode1000 input */
	dg_writer w;
	dg_reader r;

	person one;           /* small_object input */
	person list[DEC_N];   /* list100 (first 100) and decode1000 input */
	person out[DEC_N];    /* decoded persons */
	char keys[MAP_N][8];  /* "key-00".."key-49" */
	dg_uuid uuids[MAP_N];
	str_uuid map_out[MAP_N];
	const char *skeys[SMAP_N];
	size_t sklen[SMAP_N];
	int64_t svals[SMAP_N];

#ifdef DGB_HAVE_MSGPACK
	msgpack_sbuffer sbuf;
	msgpack_packer pk;
	msgpack_zone zone;
	msgpack_sbuffer dec_mp;
#endif
#ifdef DGB_HAVE_PROTOBUF_C
	char pb_name[sizeof P_NAME];
	Dgbench__Person pb_one;
	Dgbench__Person pb_items[DEC_N];
	Dgbench__Person *pb_ptrs[DEC_N];
	Dgbench__PersonList pb_list100, pb_list1000;
	Dgbench__StrUuidMap__EntriesEntry pb_entries[MAP_N];
	Dgbench__StrUuidMap__EntriesEntry *pb_entry_ptrs[MAP_N];
	Dgbench__StrUuidMap pb_map;
	uint8_t *pb_buf;      /* reused pack output, sized at setup */
	uint8_t *dec_pb;      /* decode1000 input */
	size_t dec_pb_len;
	ProtobufCMessage *pb_last; /* last unpacked message, freed by the next
	                              operation: decoded views live until then */
#endif
} M;

/* ---- checksums and verification (the same for every implementation) ---- */

static inline uint64_t person_sum(const person *p)
{
	uint64_t s;
	memcpy(&s, &p->score, sizeof s);
	return (uint64_t)p->id + (uint64_t)p->ts + p->name.len + s +
	    (unsigned char)p->name.ptr[0];
}

static inline uint64_t entry_sum(const str_uuid *e)
{
	return e->key.len + (unsigned char)e->key.ptr[5] + e->val.b[0] +
	    e->val.b[15];
}

static bool person_eq(const person *a, const person *b)
{
	return a->id == b->id && a->score == b->score && a->ts == b->ts &&
	    a->name.len == b->name.len &&
	    memcmp(a->name.ptr, b->name.ptr, a->name.len) == 0;
}

static void verify_persons(const char *what, const person *want, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		if (!person_eq(&M.out[i], &want[i]))
			dgb_die("%s: decoded person %u differs from the input", what, i);
	memset(M.out, 0, sizeof M.out);
}

static void verify_map(const char *what)
{
	for (uint32_t i = 0; i < MAP_N; i++) {
		const str_uuid *e = &M.map_out[i];
		if (e->key.len != 6 || memcmp(e->key.ptr, M.keys[i], 6) != 0 ||
		    memcmp(e->val.b, M.uuids[i].b, 16) != 0)
			dgb_die("%s: decoded entry %u differs from the input", what, i);
	}
	memset(M.map_out, 0, sizeof M.map_out);
}

/* ------------------------------------------------------------------------
 * datagrid
 * ------------------------------------------------------------------------ */

/* zero: the writer's zero-form mode (a constant in each caller) */
static inline __attribute__((always_inline)) uint64_t dg_small_run(
    uint64_t iters, bool zero)
{
	uint64_t sum = 0;
	for (uint64_t i = 0; i < iters; i++) {
		dgb_clobber(&M.one);
		dg_buf_reset(&M.buf);
		dg_writer_init(&M.w, M.reg, &M.buf);
		if (zero)
			dg_writer_set_zero_form(&M.w, true);
		DG_DO(dg_write_object(&M.w, M.person, &M.one));
		DG_DO(dg_writer_finish(&M.w));
		DG_DO(dg_decode_object(M.reg, M.person, M.buf.data, M.buf.len,
		    &M.out[0], NULL));
		sum += person_sum(&M.out[0]);
	}
	return sum;
}

static uint64_t dg_small(void *ctx, uint64_t iters)
{
	(void)ctx;
	return dg_small_run(iters, false);
}

/* The same with the zero-form mode on (score 98.5: nothing to leave out,
 * so the plain bytes, after the zero test). */
static uint64_t dg_small_zero(void *ctx, uint64_t iters)
{
	(void)ctx;
	return dg_small_run(iters, true);
}

static void dg_encode_list(dg_buf *b, uint32_t n)
{
	dg_buf_reset(b);
	dg_writer_init(&M.w, M.reg, b);
	DG_DO(dg_write_list_begin(&M.w, n));
	/* the array API: what a list or a page of structs is written with */
	DG_DO(dg_write_objects(&M.w, M.person, M.list, sizeof(M.list[0]), n));
	DG_DO(dg_write_end(&M.w));
	DG_DO(dg_writer_finish(&M.w));
}

static uint64_t dg_decode_list(const dg_buf *b, uint32_t n)
{
	uint64_t sum = 0;
	uint32_t count;
	dg_reader_init(&M.r, M.reg, b->data, b->len);
	DG_DO(dg_read_begin(&M.r, DG_LIST, &count));
	CHECK(count == n);
	DG_DO(dg_read_objects(&M.r, M.person, M.out, sizeof(M.out[0]), count, NULL));
	for (uint32_t k = 0; k < count; k++)
		sum += person_sum(&M.out[k]);
	return sum;
}

static uint64_t dg_list100(void *ctx, uint64_t iters)
{
	(void)ctx;
	uint64_t sum = 0;
	for (uint64_t i = 0; i < iters; i++) {
		dgb_clobber(M.list);
		dg_encode_list(&M.buf, LIST_N);
		sum += dg_decode_list(&M.buf, LIST_N);
	}
	return sum;
}

static uint64_t dg_map50(void *ctx, uint64_t iters)
{
	(void)ctx;
	uint64_t sum = 0;
	for (uint64_t i = 0; i < iters; i++) {
		dgb_clobber(M.keys);
		dgb_clobber(M.uuids);
		dg_buf_reset(&M.buf);
		dg_writer_init(&M.w, M.reg, &M.buf);
		DG_DO(dg_write_map_begin(&M.w, MAP_N));
		for (uint32_t k = 0; k < MAP_N; k++) {
			DG_DO(dg_write_str(&M.w, M.keys[k], 6));
			DG_DO(dg_write_uuid(&M.w, &M.uuids[k]));
		}
		DG_DO(dg_write_end(&M.w));
		DG_DO(dg_writer_finish(&M.w));

		uint32_t count;
		dg_value v;
		dg_reader_init(&M.r, M.reg, M.buf.data, M.buf.len);
		DG_DO(dg_read_begin(&M.r, DG_MAP, &count));
		CHECK(count == MAP_N);
		for (uint32_t k = 0; k < count; k++) {
			str_uuid *e = &M.map_out[k];
			DG_DO(dg_read_next(&M.r, &v));
			CHECK(v.kind == DG_STRING);
			e->key = v.v.str;
			DG_DO(dg_read_next(&M.r, &v));
			CHECK(v.kind == DG_UUID);
			e->val = v.v.uuid;
			sum += entry_sum(e);
		}
	}
	return sum;
}

static uint64_t dg_map12(bool sorted, uint64_t iters)
{
	uint64_t sum = 0;
	for (uint64_t i = 0; i < iters; i++) {
		dgb_clobber(M.skeys);
		dgb_clobber(M.svals);
		dg_buf_reset(&M.buf);
		dg_writer_init(&M.w, M.reg, &M.buf);
		if (sorted)
			DG_DO(dg_write_sorted_map_begin(&M.w, SMAP_N));
		else
			DG_DO(dg_write_map_begin(&M.w, SMAP_N));
		for (uint32_t k = 0; k < SMAP_N; k++) {
			DG_DO(dg_write_str(&M.w, M.skeys[k], M.sklen[k]));
			DG_DO(dg_write_i64(&M.w, M.svals[k]));
		}
		DG_DO(dg_write_end(&M.w));
		DG_DO(dg_writer_finish(&M.w));
		sum += M.buf.len + M.buf.data[M.buf.len - 1];
	}
	return sum;
}

static uint64_t dg_sorted12(void *ctx, uint64_t iters)
{
	(void)ctx;
	return dg_map12(true, iters);
}

static uint64_t dg_hash12(void *ctx, uint64_t iters)
{
	(void)ctx;
	return dg_map12(false, iters);
}

static uint64_t dg_decode1000(void *ctx, uint64_t iters)
{
	(void)ctx;
	uint64_t sum = 0;
	for (uint64_t i = 0; i < iters; i++) {
		dgb_clobber(M.dec_dg.data);
		sum += dg_decode_list(&M.dec_dg, DEC_N);
	}
	return sum;
}

/* ------------------------------------------------------------------------
 * msgpack-c
 * ------------------------------------------------------------------------ */
#ifdef DGB_HAVE_MSGPACK

/* The zone's chunk holds the largest decoded tree (decode1000: ~220 KB). */
#define MP_ZONE_CHUNK (1u << 20)

static int mp_key(msgpack_packer *pk, const char *k, size_t n)
{
	return msgpack_pack_str(pk, n) | msgpack_pack_str_body(pk, k, n);
}

static int mp_pack_person(msgpack_packer *pk, const person *p)
{
	int rc = msgpack_pack_map(pk, 4);
	rc |= mp_key(pk, "id", 2) | msgpack_pack_int64(pk, p->id);
	rc |= mp_key(pk, "name", 4) | msgpack_pack_str(pk, p->name.len) |
	    msgpack_pack_str_body(pk, p->name.ptr, p->name.len);
	rc |= mp_key(pk, "score", 5) | msgpack_pack_double(pk, p->score);
	rc |= mp_key(pk, "ts", 2) | msgpack_pack_int64(pk, p->ts);
	return rc;
}

static bool mp_is(const msgpack_object *k, const char *s, uint32_t n)
{
	return k->via.str.size == n && memcmp(k->via.str.ptr, s, n) == 0;
}

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

/* Reads a map by key into *out (missing fields stay zero). */
static bool mp_read_person(const msgpack_object *o, person *out)
{
	if (o->type != MSGPACK_OBJECT_MAP)
		return false;
	memset(out, 0, sizeof *out);
	const msgpack_object_kv *kv = o->via.map.ptr;
	for (uint32_t i = 0; i < o->via.map.size; i++) {
		const msgpack_object *k = &kv[i].key, *v = &kv[i].val;
		if (k->type != MSGPACK_OBJECT_STR)
			return false;
		if (mp_is(k, "id", 2)) {
			if (!mp_int(v, &out->id))
				return false;
		} else if (mp_is(k, "name", 4)) {
			if (v->type != MSGPACK_OBJECT_STR)
				return false;
			out->name.ptr = v->via.str.ptr;
			out->name.len = v->via.str.size;
		} else if (mp_is(k, "score", 5)) {
			if (v->type != MSGPACK_OBJECT_FLOAT64 &&
			    v->type != MSGPACK_OBJECT_FLOAT32)
				return false;
			out->score = v->via.f64;
		} else if (mp_is(k, "ts", 2)) {
			if (!mp_int(v, &out->ts))
				return false;
		}
	}
	return true;
}

static void mp_reset(msgpack_sbuffer *b)
{
	b->size = 0; /* keep the memory: msgpack_sbuffer_clear does the same */
}

static const msgpack_object *mp_unpack(const msgpack_sbuffer *b,
    msgpack_object *obj)
{
	size_t off = 0;
	msgpack_zone_clear(&M.zone);
	msgpack_unpack_return rc = msgpack_unpack(b->data, b->size, &off,
	    &M.zone, obj);
	CHECK(rc == MSGPACK_UNPACK_SUCCESS);
	return obj;
}

static uint64_t mp_small(void *ctx, uint64_t iters)
{
	(void)ctx;
	uint64_t sum = 0;
	msgpack_object obj;
	for (uint64_t i = 0; i < iters; i++) {
		dgb_clobber(&M.one);
		mp_reset(&M.sbuf);
		CHECK(mp_pack_person(&M.pk, &M.one) == 0);
		CHECK(mp_read_person(mp_unpack(&M.sbuf, &obj), &M.out[0]));
		sum += person_sum(&M.out[0]);
	}
	return sum;
}

static void mp_encode_list(msgpack_sbuffer *b, uint32_t n)
{
	msgpack_packer pk;
	msgpack_packer_init(&pk, b, msgpack_sbuffer_write);
	mp_reset(b);
	int rc = msgpack_pack_array(&pk, n);
	for (uint32_t k = 0; k < n; k++)
		rc |= mp_pack_person(&pk, &M.list[k]);
	CHECK(rc == 0);
}

static uint64_t mp_decode_list(const msgpack_sbuffer *b, uint32_t n)
{
	msgpack_object obj;
	uint64_t sum = 0;
	mp_unpack(b, &obj);
	CHECK(obj.type == MSGPACK_OBJECT_ARRAY && obj.via.array.size == n);
	for (uint32_t k = 0; k < obj.via.array.size; k++) {
		CHECK(mp_read_person(&obj.via.array.ptr[k], &M.out[k]));
		sum += person_sum(&M.out[k]);
	}
	return sum;
}

static uint64_t mp_list100(void *ctx, uint64_t iters)
{
	(void)ctx;
	uint64_t sum = 0;
	for (uint64_t i = 0; i < iters; i++) {
		dgb_clobber(M.list);
		mp_encode_list(&M.sbuf, LIST_N);
		sum += mp_decode_list(&M.sbuf, LIST_N);
	}
	return sum;
}

static uint64_t mp_map50(void *ctx, uint64_t iters)
{
	(void)ctx;
	uint64_t sum = 0;
	msgpack_object obj;
	for (uint64_t i = 0; i < iters; i++) {
		dgb_clobber(M.keys);
		dgb_clobber(M.uuids);
		mp_reset(&M.sbuf);
		int rc = msgpack_pack_map(&M.pk, MAP_N);
		for (uint32_t k = 0; k < MAP_N; k++) {
			rc |= mp_key(&M.pk, M.keys[k], 6);
			rc |= msgpack_pack_bin(&M.pk, 16) |
			    msgpack_pack_bin_body(&M.pk, M.uuids[k].b, 16);
		}
		CHECK(rc == 0);

		mp_unpack(&M.sbuf, &obj);
		CHECK(obj.type == MSGPACK_OBJECT_MAP && obj.via.map.size == MAP_N);
		for (uint32_t k = 0; k < obj.via.map.size; k++) {
			const msgpack_object_kv *kv = &obj.via.map.ptr[k];
			str_uuid *e = &M.map_out[k];
			CHECK(kv->key.type == MSGPACK_OBJECT_STR);
			CHECK(kv->val.type == MSGPACK_OBJECT_BIN && kv->val.via.bin.size == 16);
			e->key.ptr = kv->key.via.str.ptr;
			e->key.len = kv->key.via.str.size;
			memcpy(e->val.b, kv->val.via.bin.ptr, 16);
			sum += entry_sum(e);
		}
	}
	return sum;
}

static uint64_t mp_decode1000(void *ctx, uint64_t iters)
{
	(void)ctx;
	uint64_t sum = 0;
	for (uint64_t i = 0; i < iters; i++) {
		dgb_clobber(M.dec_mp.data);
		sum += mp_decode_list(&M.dec_mp, DEC_N);
	}
	return sum;
}
#endif /* DGB_HAVE_MSGPACK */

/* ------------------------------------------------------------------------
 * protobuf-c
 * ------------------------------------------------------------------------ */
#ifdef DGB_HAVE_PROTOBUF_C

/* Frees the previous operation's message and keeps this one: the decoded
 * struct's strings point into it (one unpack + one free per operation). */
static void pb_keep(ProtobufCMessage *m)
{
	if (M.pb_last != NULL)
		protobuf_c_message_free_unpacked(M.pb_last, NULL);
	M.pb_last = m;
}

static void pb_to_person(const Dgbench__Person *m, person *out)
{
	out->id = m->id;
	out->name.ptr = m->name;
	out->name.len = (uint32_t)strlen(m->name);
	out->score = m->score;
	out->ts = m->ts;
}

static uint64_t pb_small(void *ctx, uint64_t iters)
{
	(void)ctx;
	uint64_t sum = 0;
	for (uint64_t i = 0; i < iters; i++) {
		dgb_clobber(&M.pb_one);
		size_t n = dgbench__person__pack(&M.pb_one, M.pb_buf);
		Dgbench__Person *m = dgbench__person__unpack(NULL, n, M.pb_buf);
		CHECK(m != NULL);
		pb_to_person(m, &M.out[0]);
		sum += person_sum(&M.out[0]);
		pb_keep(&m->base);
	}
	return sum;
}

static uint64_t pb_decode_list(const uint8_t *data, size_t len, uint32_t n)
{
	uint64_t sum = 0;
	Dgbench__PersonList *l = dgbench__person_list__unpack(NULL, len, data);
	CHECK(l != NULL && l->n_items == n);
	for (size_t k = 0; k < l->n_items; k++) {
		pb_to_person(l->items[k], &M.out[k]);
		sum += person_sum(&M.out[k]);
	}
	pb_keep(&l->base);
	return sum;
}

static uint64_t pb_list100(void *ctx, uint64_t iters)
{
	(void)ctx;
	uint64_t sum = 0;
	for (uint64_t i = 0; i < iters; i++) {
		dgb_clobber(M.pb_items);
		size_t n = dgbench__person_list__pack(&M.pb_list100, M.pb_buf);
		sum += pb_decode_list(M.pb_buf, n, LIST_N);
	}
	return sum;
}

static uint64_t pb_map50(void *ctx, uint64_t iters)
{
	(void)ctx;
	uint64_t sum = 0;
	for (uint64_t i = 0; i < iters; i++) {
		dgb_clobber(M.pb_entries);
		size_t n = dgbench__str_uuid_map__pack(&M.pb_map, M.pb_buf);
		Dgbench__StrUuidMap *m = dgbench__str_uuid_map__unpack(NULL, n, M.pb_buf);
		CHECK(m != NULL && m->n_entries == MAP_N);
		for (size_t k = 0; k < m->n_entries; k++) {
			const Dgbench__StrUuidMap__EntriesEntry *en = m->entries[k];
			str_uuid *e = &M.map_out[k];
			CHECK(en->value.len == 16);
			e->key.ptr = en->key;
			e->key.len = (uint32_t)strlen(en->key);
			memcpy(e->val.b, en->value.data, 16);
			sum += entry_sum(e);
		}
		pb_keep(&m->base);
	}
	return sum;
}

static uint64_t pb_decode1000(void *ctx, uint64_t iters)
{
	(void)ctx;
	uint64_t sum = 0;
	for (uint64_t i = 0; i < iters; i++) {
		dgb_clobber(M.dec_pb);
		sum += pb_decode_list(M.dec_pb, M.dec_pb_len, DEC_N);
	}
	return sum;
}
#endif /* DGB_HAVE_PROTOBUF_C */

/* ------------------------------------------------------------------------
 * Setup and the suite.
 * ------------------------------------------------------------------------ */

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
	z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
	return z ^ (z >> 31);
}

static void setup(void)
{
	/* 12 realistic field names, in canonical (byte-wise) order */
	static const char *const names[SMAP_N] = {
		"age", "city", "country", "created_at", "email", "id",
		"last_login", "name", "phone", "score", "status", "updated_at",
	};
	static const int64_t vals[SMAP_N] = {
		42, 7, 250, P_TS - 86400000, 1, P_ID, P_TS, 11, 5551234567,
		98, 2, P_TS + 1,
	};
	uint64_t seed = 42;

	DG_DO(dg_registry_create(&M.reg));
	DG_DO(dg_registry_register(M.reg, &person_def, &M.person));
	dg_buf_init(&M.buf);
	dg_buf_init(&M.dec_dg);

	M.one = (person){ P_ID, { P_NAME, sizeof P_NAME - 1 }, P_SCORE, P_TS };
	for (uint32_t i = 0; i < DEC_N; i++)
		M.list[i] = (person){ (int64_t)i, { P_NAME, sizeof P_NAME - 1 },
		    P_SCORE, P_TS + (int64_t)i };
	for (uint32_t i = 0; i < MAP_N; i++) {
		snprintf(M.keys[i], sizeof M.keys[i], "key-%02u", i);
		uint64_t a = splitmix64(&seed), b = splitmix64(&seed);
		memcpy(M.uuids[i].b, &a, 8);
		memcpy(M.uuids[i].b + 8, &b, 8);
	}
	for (uint32_t i = 0; i < SMAP_N; i++) {
		M.skeys[i] = names[i];
		M.sklen[i] = strlen(names[i]);
		M.svals[i] = vals[i];
	}
	dg_encode_list(&M.dec_dg, DEC_N);

#ifdef DGB_HAVE_MSGPACK
	msgpack_sbuffer_init(&M.sbuf);
	msgpack_sbuffer_init(&M.dec_mp);
	msgpack_packer_init(&M.pk, &M.sbuf, msgpack_sbuffer_write);
	CHECK(msgpack_zone_init(&M.zone, MP_ZONE_CHUNK));
	mp_encode_list(&M.dec_mp, DEC_N);
#endif

#ifdef DGB_HAVE_PROTOBUF_C
	memcpy(M.pb_name, P_NAME, sizeof P_NAME);
	dgbench__person__init(&M.pb_one);
	M.pb_one.id = P_ID;
	M.pb_one.name = M.pb_name;
	M.pb_one.score = P_SCORE;
	M.pb_one.ts = P_TS;
	for (uint32_t i = 0; i < DEC_N; i++) {
		dgbench__person__init(&M.pb_items[i]);
		M.pb_items[i].id = M.list[i].id;
		M.pb_items[i].name = M.pb_name;
		M.pb_items[i].score = M.list[i].score;
		M.pb_items[i].ts = M.list[i].ts;
		M.pb_ptrs[i] = &M.pb_items[i];
	}
	dgbench__person_list__init(&M.pb_list100);
	M.pb_list100.n_items = LIST_N;
	M.pb_list100.items = M.pb_ptrs;
	dgbench__person_list__init(&M.pb_list1000);
	M.pb_list1000.n_items = DEC_N;
	M.pb_list1000.items = M.pb_ptrs;
	for (uint32_t i = 0; i < MAP_N; i++) {
		dgbench__str_uuid_map__entries_entry__init(&M.pb_entries[i]);
		M.pb_entries[i].key = M.keys[i];
		M.pb_entries[i].value.len = 16;
		M.pb_entries[i].value.data = M.uuids[i].b;
		M.pb_entry_ptrs[i] = &M.pb_entries[i];
	}
	dgbench__str_uuid_map__init(&M.pb_map);
	M.pb_map.n_entries = MAP_N;
	M.pb_map.entries = M.pb_entry_ptrs;

	size_t cap = dgbench__person__get_packed_size(&M.pb_one);
	size_t n = dgbench__person_list__get_packed_size(&M.pb_list100);
	cap = n > cap ? n : cap;
	n = dgbench__str_uuid_map__get_packed_size(&M.pb_map);
	cap = n > cap ? n : cap;
	M.pb_buf = malloc(cap);
	M.dec_pb_len = dgbench__person_list__get_packed_size(&M.pb_list1000);
	M.dec_pb = malloc(M.dec_pb_len);
	CHECK(M.pb_buf != NULL && M.dec_pb != NULL);
	CHECK(dgbench__person_list__pack(&M.pb_list1000, M.dec_pb) == M.dec_pb_len);
#endif
}

static void teardown(void)
{
#ifdef DGB_HAVE_PROTOBUF_C
	pb_keep(NULL);
	free(M.pb_buf);
	free(M.dec_pb);
#endif
#ifdef DGB_HAVE_MSGPACK
	msgpack_zone_destroy(&M.zone);
	msgpack_sbuffer_destroy(&M.sbuf);
	msgpack_sbuffer_destroy(&M.dec_mp);
#endif
	dg_buf_free(&M.buf);
	dg_buf_free(&M.dec_dg);
	dg_registry_destroy(M.reg);
}

enum check {
	CHECK_ONE, CHECK_LIST100, CHECK_DEC, CHECK_MAP, CHECK_VALID, CHECK_INVOICE
};

/* The implementations of one case, measured together (interleaved). */
struct group {
	dgb_bench b[DGB_GROUP_MAX];
	dgb_result *res[DGB_GROUP_MAX];
	unsigned n;
};

/* Adds a (case, implementation) pair if --case/--impl select it, after one
 * run that checks the case's code: decoded values equal the input
 * (CHECK_VALID: the encoding passes dg_validate, sorted order included). */
static void add(const dgb_opts *o, struct group *g, const char *name,
    const char *impl, dgb_run_fn fn, uint64_t ops, long long bytes,
    enum check chk, dgb_result *res)
{
	char what[64];
	if (!dgb_selected(o, name, impl))
		return;
	CHECK(g->n < DGB_GROUP_MAX);
	snprintf(what, sizeof what, "%s/%s", name, impl);
	fn(NULL, 1);
	switch (chk) {
	case CHECK_ONE: verify_persons(what, &M.one, 1); break;
	case CHECK_LIST100: verify_persons(what, M.list, LIST_N); break;
	case CHECK_DEC: verify_persons(what, M.list, DEC_N); break;
	case CHECK_MAP: verify_map(what); break;
	case CHECK_VALID: DG_DO(dg_validate(M.reg, M.buf.data, M.buf.len)); break;
	case CHECK_INVOICE: dgb_invoice_verify(what); break;
	}
	g->b[g->n] = (dgb_bench){
		.suite = SUITE, .name = name, .impl = impl, .run = fn, .ctx = NULL,
		.ops_per_iter = ops, .bytes = bytes,
		.alloc_src = strncmp(impl, "datagrid", 8) == 0 ? DGB_ALLOC_DG :
		    DGB_ALLOC_HEAP,
	};
	g->res[g->n] = res;
	g->n++;
}

static void run(const dgb_opts *o, struct group *g)
{
	dgb_result out[DGB_GROUP_MAX];
	if (g->n == 0)
		return;
	dgb_run_group(o, g->b, g->n, out);
	for (unsigned k = 0; k < g->n; k++)
		if (g->res[k] != NULL)
			*g->res[k] = out[k];
	g->n = 0;
}

/* Encoded size of a datagrid case: one run leaves its output in M.buf. */
static long long dg_size(dgb_run_fn fn)
{
	fn(NULL, 1);
	return (long long)M.buf.len;
}

#ifdef DGB_HAVE_MSGPACK
static long long mp_size(dgb_run_fn fn)
{
	fn(NULL, 1);
	return (long long)M.sbuf.size;
}
#endif

int dgb_marshal_suite(const dgb_opts *o)
{
	setup();
#ifndef DGB_HAVE_MSGPACK
	dgb_note("msgpack-c was not found at configure time: its lines are skipped");
#endif
#ifndef DGB_HAVE_PROTOBUF_C
	dgb_note("protobuf-c was not found at configure time: its lines are skipped");
#endif
	if (!dgb_heap_counting())
		dgb_note("malloc counting is off in this build (sanitizer): peers "
		    "report no allocs_per_op");
	dgb_begin_suite(o, SUITE);

	struct group g = { .n = 0 };
	dgb_result s = { 0 }, h = { 0 };

	add(o, &g, "small_object", "datagrid", dg_small, 1, dg_size(dg_small),
	    CHECK_ONE, NULL);
	add(o, &g, "small_object", "datagrid-zero", dg_small_zero, 1,
	    dg_size(dg_small_zero), CHECK_ONE, NULL);
#ifdef DGB_HAVE_MSGPACK
	add(o, &g, "small_object", "msgpack-c", mp_small, 1, mp_size(mp_small),
	    CHECK_ONE, NULL);
#endif
#ifdef DGB_HAVE_PROTOBUF_C
	add(o, &g, "small_object", "protobuf-c", pb_small, 1,
	    (long long)dgbench__person__get_packed_size(&M.pb_one), CHECK_ONE, NULL);
#endif
	run(o, &g);

	add(o, &g, "list100", "datagrid", dg_list100, 1, dg_size(dg_list100),
	    CHECK_LIST100, NULL);
#ifdef DGB_HAVE_MSGPACK
	add(o, &g, "list100", "msgpack-c", mp_list100, 1, mp_size(mp_list100),
	    CHECK_LIST100, NULL);
#endif
#ifdef DGB_HAVE_PROTOBUF_C
	add(o, &g, "list100", "protobuf-c", pb_list100, 1,
	    (long long)dgbench__person_list__get_packed_size(&M.pb_list100),
	    CHECK_LIST100, NULL);
#endif
	run(o, &g);

	add(o, &g, "map50_str_uuid", "datagrid", dg_map50, 1, dg_size(dg_map50),
	    CHECK_MAP, NULL);
#ifdef DGB_HAVE_MSGPACK
	add(o, &g, "map50_str_uuid", "msgpack-c", mp_map50, 1, mp_size(mp_map50),
	    CHECK_MAP, NULL);
#endif
#ifdef DGB_HAVE_PROTOBUF_C
	add(o, &g, "map50_str_uuid", "protobuf-c", pb_map50, 1,
	    (long long)dgbench__str_uuid_map__get_packed_size(&M.pb_map),
	    CHECK_MAP, NULL);
#endif
	run(o, &g);

	/* sorted vs hash map: encode only, datagrid only, measured together */
	add(o, &g, "sorted_map12", "datagrid", dg_sorted12, 1,
	    dg_size(dg_sorted12), CHECK_VALID, &s);
	add(o, &g, "hash_map12", "datagrid", dg_hash12, 1, dg_size(dg_hash12),
	    CHECK_VALID, &h);
	run(o, &g);

	/* decode1000: reported per object */
	add(o, &g, "decode1000", "datagrid", dg_decode1000, DEC_N,
	    (long long)M.dec_dg.len, CHECK_DEC, NULL);
#ifdef DGB_HAVE_MSGPACK
	add(o, &g, "decode1000", "msgpack-c", mp_decode1000, DEC_N,
	    (long long)M.dec_mp.size, CHECK_DEC, NULL);
#endif
#ifdef DGB_HAVE_PROTOBUF_C
	add(o, &g, "decode1000", "protobuf-c", pb_decode1000, DEC_N,
	    (long long)M.dec_pb_len, CHECK_DEC, NULL);
#endif
	run(o, &g);

	/* invoice: nested objects and lists (marshal_invoice.c) */
	dgb_invoice_impl inv[DGB_INVOICE_IMPLS];
	unsigned ninv = dgb_invoice_setup(inv);
	for (unsigned k = 0; k < ninv; k++)
		add(o, &g, "invoice", inv[k].impl, inv[k].run, 1, inv[k].bytes,
		    CHECK_INVOICE, NULL);
	run(o, &g);
	dgb_invoice_teardown();

	if (s.ns_per_op > 0 && h.ns_per_op > 0)
		dgb_note("sorted_map12/hash_map12 = %.2f", s.ns_per_op / h.ns_per_op);
	teardown();
	return 0;
}
