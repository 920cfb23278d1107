/*
 * marshal_int.h — internals shared by the files of marshal/ (not installed).
 *
 * Design notes
 * ------------
 * Descriptor.  A dg_desc is one schema of one type: its fields in *layout
 * order* (fixed-width fields first, then variable-width fields, each group in
 * declaration order), the fixed-area size, and an open-addressing table from
 * field id to layout index.  It is built once (desc_build, the only place
 * that increments the registry's build counter), published, and immutable
 * afterwards, so readers use it without locks.
 *
 * Registry.  type id -> struct dgi_type, in an open-addressing table keyed
 * by the 32-bit id (no boxing, no allocation per lookup).  The table and each
 * type's schema array are copy-on-write: writers (registrations, under
 * reg->mu) build a new version and publish it with a release store; readers
 * load it with acquire and never lock.  Old versions are retired to a list
 * and freed with the registry, so a reader can never see freed memory;
 * registrations are rare, so the retired memory stays within 2x of the live.
 *
 * Plans.  A bound descriptor also carries what its struct encoder and
 * decoder would otherwise work out for every object: the fixed area as
 * copy runs (fops: fields adjacent in the struct move in one copy, since
 * both sides are little-endian), the headroom one reservation must leave
 * (tail), and whether it is *flat* — every var field an I32, I64, STRING or
 * BYTES.  Flat descriptors get their own encoder and decoder (object.c):
 * no call and no address-taken cursor in the loop, integers and blobs
 * decoded knowing the span the footer gives them, and at the top level
 * (dg_write_object, dg_decode_object) one function from header to footer.
 * The bytes are the same on every path.
 *
 * Zero form.  Opt-in per writer (w_zero, dg_writer_set_zero_form): off,
 * the writers write the plain form and pay one branch per object
 * (put_fixed_area, dg_builder_write).  On, the struct writers test the
 * fixed fields of the struct for all-zero bytes before writing the fixed
 * area (zero_fields_src, one masked 8-byte load per field where the struct
 * has the bytes: zsafe) and write the mask and the other fields instead
 * when that is shorter; the caller turns the tag it wrote into its twin.  Decoders learn the form
 * from the tag (dg_bobj.zero) and read the fixed area field by field only
 * then; the plain form keeps the copy runs.
 *
 * Built-ins.  Every container and special kind has a descriptor of its own
 * (name "dg.<Kind>"), built and published REGISTERED when the registry is
 * created; reg->builtin[kind] points at it directly so writers and readers
 * get it without a lookup.  Sorted containers take their key comparator
 * from it.
 */
#ifndef DG_MARSHAL_INT_H
#define DG_MARSHAL_INT_H

#include "marshal.h"

#include <assert.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <string.h>

#define DG_LIKELY(x) __builtin_expect(!!(x), 1)
#define DG_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define DG_NOINLINE __attribute__((noinline))

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "datagrid's codec is written for little-endian hosts"
#endif

/* Wire tags (FORMAT.md, "Tags"). */
enum {
	TAG_NULL = 0x00,
	TAG_FALSE = 0x01,
	TAG_TRUE = 0x02,
	TAG_I8 = 0x03,
	TAG_I16 = 0x04,
	TAG_I32 = 0x05,
	TAG_I64 = 0x06,
	TAG_FLOAT = 0x07,
	TAG_DOUBLE = 0x08,
	TAG_STRING = 0x09,
	TAG_BYTES = 0x0A,
	TAG_UUID = 0x0B,
	TAG_TIMESTAMP = 0x0C,
	TAG_ENUM = 0x0D,
	TAG_ARRAY = 0x0E,
	TAG_LIST = 0x0F,
	TAG_SET = 0x10,
	TAG_SORTED_SET = 0x11,
	TAG_MAP = 0x12,
	TAG_SORTED_MAP = 0x13,
	TAG_OBJ = 0x14,    /* u32 type id, body (primary schema) */
	TAG_OBJ_S = 0x15,  /* u32 type id, u32 schema id, body */
	TAG_DEF = 0x16,    /* as OBJ, and defines the next scope index */
	TAG_DEF_S = 0x17,  /* as OBJ_S, and defines the next scope index */
	TAG_OBJ_Z = 0x18,  /* OBJ .. DEF_S + 4: the same with a zero-form body */
	TAG_OBJ_SZ = 0x19,
	TAG_DEF_Z = 0x1A,
	TAG_DEF_SZ = 0x1B,
	TAG__LAST = 0x1B,
	TAG_REF = 0x80,    /* 0x80 | index (0..63): body of scope schema index */
	TAG_REF_Z = 0xC0,  /* 0xC0 | index: the same with a zero-form body */
};

/* Zero form (FORMAT.md "Zero form"): every object tag has a twin whose
 * body leaves out the fixed fields that are all zero, named in a mask. */
static inline bool dgi_tag_is_zero(uint8_t tag)
{
	return tag >= TAG_REF_Z || (tag >= TAG_OBJ_Z && tag <= TAG_DEF_SZ);
}
/* The zero-form twin of an object tag, and the plain tag of either. */
static inline uint8_t dgi_tag_zero(uint8_t tag)
{
	return tag >= TAG_REF ? (uint8_t)(tag | 0x40) : (uint8_t)(tag + 4);
}
static inline uint8_t dgi_tag_plain(uint8_t tag)
{
	if (tag >= TAG_REF)
		return (uint8_t)(tag & ~0x40);
	return tag >= TAG_OBJ_Z ? (uint8_t)(tag - 4) : tag;
}
#define NO_SCOPE UINT32_MAX

/* Field kinds stored in the descriptor's layout table. */
struct dgi_field {
	uint32_t id;          /* dg_field_id(name) */
	uint32_t c_off;       /* offset in the bound struct or DG_UNBOUND */
	uint32_t body_off;    /* fixed fields: offset in the body */
	uint32_t ref_type;    /* DG_OBJECT / DG_ENUM: referenced type id */
	const dg_desc *ref;   /* DG_OBJECT: descriptor of the embedded type */
	uint16_t decl;        /* declaration index */
	uint16_t var;         /* var fields: index among var fields */
	uint8_t kind;         /* dg_kind */
	uint8_t elem;         /* DG_ARRAY element kind; DG_LIST / DG_SET: the
	                         element kind of a dg_list binding (0: dg_raw) */
	uint8_t width;        /* fixed fields: bytes; 0 for var fields */
	uint8_t flags;        /* DG_FF_* (the C binding only) */
	const char *name;
};

/* The compact per-field program the struct encode/decode loops run (layout
 * order, 8 bytes per field): built once with the descriptor. */
struct dgi_op {
	uint32_t c_off;       /* offset in the bound struct */
	uint8_t kind;         /* dg_kind, or DGI_OP_RUN */
	uint8_t width;        /* fixed fields and runs: bytes */
	uint16_t field;       /* layout index into fields[] (rare kinds) */
};

/* dgi_op.kind of a run of the fixed area (dg_desc.fops): consecutive fixed
 * fields whose C layout is the wire's — adjacent in the struct in layout
 * order, none a bool (a bool is checked or normalised on its own) — copied
 * as one block of `width` bytes.  Both sides are little-endian (the #error
 * above), so a struct's bytes are the wire's. */
#define DGI_OP_RUN 0xFF

#define DESC_REGISTERED 0x52454731u  /* "REG1": published and immutable */

struct dg_desc {
	uint32_t type_id;
	uint32_t schema_id;
	uint32_t state;          /* DESC_REGISTERED once published */
	uint32_t nfields;
	uint32_t nfixed;         /* fields [0, nfixed) are fixed-width */
	uint32_t nvar;           /* nfields - nfixed */
	uint32_t nfoot;          /* footer entries: max(nvar - 1, 0) */
	uint32_t fixed_size;     /* bytes of the fixed area */
	uint32_t idx_mask;       /* field-id table size - 1 */
	uint8_t builtin;         /* dg_kind for built-in descriptors, else 0 */
	uint8_t bound;           /* every field bound to the C struct */
	uint8_t primary;         /* the type's primary schema (tags OBJ/DEF) */
	uint8_t zbytes;          /* zero form: bytes of the mask, nfixed / 8
	                            rounded up; 0 when the schema has none
	                            (no fixed field, or more than 64) */
	uint8_t zable;           /* the zero form can be the shorter one:
	                            fixed_size > zbytes */
	uint64_t *zmask;         /* per fixed field: the bits of its value in
	                            an 8-byte load (all for 8 and 16 bytes),
	                            for the zero-form test */
	uint8_t zsafe;           /* bound, and every fixed field has 8 bytes
	                            of the struct from its offset on: the zero
	                            test loads 8 bytes per field */
	uint8_t flat;            /* bound, and every var field an I32, I64,
	                            STRING or BYTES: encode_flat / decode_flat
	                            (so never a built-in) */
	uint8_t flat_top;        /* flat, and the primary schema: what
	                            dg_decode_object's fast path needs */
	uint8_t big;             /* bound, with a collection field: its objects
	                            are usually 128 bytes or more (a 2-byte
	                            length slot when encoding) */
	size_t struct_size;
	size_t align;            /* bound: alignment the struct needs (that of
	                            its most aligned field) */
	const char *name;
	struct dgi_field *fields;  /* layout order */
	struct dgi_op *ops;        /* layout order, bound descriptors */
	struct dgi_op *fops;       /* bound: the fixed area as runs and bools */
	uint32_t nfops;
	uint8_t fixed1;          /* the fixed area is one run (no bool): the
	                            struct holds it as the wire does */
	uint32_t tail;           /* encode headroom kept after each field: every
	                            bounded var field (<= 15 bytes, plus the
	                            slack of 8-byte varint stores), the footer
	                            and a longer length prefix */
	uint16_t *decl_to_layout;
	uint16_t *idx;           /* field id table: layout index + 1, 0 empty */
	/* built-in sorted containers: canonical key order */
	int (*cmp)(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen);
	const dg_registry *reg;
};

/* Schemas of one type: [0] is the primary schema. Immutable once published. */
struct dgi_schemas {
	uint32_t n;
	const dg_desc *d[];
};

struct dgi_type {
	uint32_t type_id;
	_Atomic(struct dgi_schemas *) schemas;
};

struct dgi_slot {
	uint32_t key;            /* type id, 0 = empty */
	struct dgi_type *type;
};

struct dgi_table {
	uint32_t mask;
	uint32_t count;
	struct dgi_slot slots[];
};

struct dgi_retired {
	struct dgi_retired *next;
	void *p;
};

struct dg_registry {
	_Atomic(struct dgi_table *) table;
	pthread_mutex_t mu;           /* serializes registrations */
	struct dgi_retired *retired;  /* freed with the registry */
	_Atomic uint64_t builds;
	_Atomic uint64_t types;
	_Atomic uint64_t schemas;
	dg_propose_fn hook;
	void *hook_ctx;
	uint32_t hook_calls;          /* calls of the hook running now (mu) */
	pthread_cond_t hook_cv;       /* signalled when hook_calls drops to 0 */
	const dg_desc *builtin[DG_KIND__COUNT];
};

/* ---- registry.c ---- */
/* A field definition with the referenced type resolved to an id. */
struct dgi_fdef {
	const char *name;
	size_t name_len;
	dg_kind kind;
	dg_kind elem;
	uint32_t ref_type;
	uint32_t c_off;
	uint8_t flags;       /* DG_FF_* */
};
dg_err dgi_register_fdefs(dg_registry *reg, const char *name, size_t name_len,
    const struct dgi_fdef *f, uint32_t n, size_t struct_size, bool propose,
    const dg_desc **out);
const dg_desc *dgi_find_schema(const dg_registry *reg, uint32_t type_id,
    uint32_t schema_id);
/* Register a definition; bound descriptors need def->struct_size. */
dg_err dgi_register(dg_registry *reg, const dg_type_def *def, bool propose,
    const dg_desc **out);
uint32_t dgi_fnv1a(const void *p, size_t n);
/* Does any registered schema of the type have this field? */
bool dgi_type_has_field(const dg_registry *reg, uint32_t type_id,
    uint32_t field_id);
uint32_t dgi_schema_id(const uint32_t *ids, uint32_t n);
static inline int dgi_field_index(const dg_desc *d, uint32_t id)
{
	uint32_t i = (id * 0x9E3779B1u) & d->idx_mask;
	for (;;) {
		uint16_t v = d->idx[i];
		if (v == 0)
			return -1;
		if (d->fields[v - 1].id == id)
			return v - 1;
		i = (i + 1) & d->idx_mask;
	}
}

/* ---- utf8.c ---- */
bool dgi_utf8_valid(const uint8_t *s, size_t n);

/* ---- reader.c ---- */
/* Decode one tagged value at *pp that must be self-contained (no scope):
 * used for object fields and dg_bobj_get. */
dg_err dgi_decode_tagged(const dg_registry *reg, const uint8_t **pp,
    const uint8_t *end, dg_value *out, unsigned depth, bool deep);
/* Structural skip of one tagged value in a scope-less position. */
dg_err dgi_skip_tagged(const dg_registry *reg, const uint8_t **pp,
    const uint8_t *end, unsigned depth, bool deep);
int dgi_cmp_encoded(const uint8_t *a, size_t alen, const uint8_t *b,
    size_t blen);
/* A run of ni I64 values into v[0..ni), then nb BYTES views into
 * b[0..nb): what ni dg_read_i64 and nb dg_read_bytes (no arena) calls
 * would read, check and answer, in one loop — the messages' bodies and
 * batch items (cache/msgs.c, txn/txwire.c) are such runs.  Anything
 * other than an I64, or a BYTES or NULL where bytes are due, that fits
 * (an I32, an error, a container to leave first) goes value by value
 * through those calls from where the loop stopped. */
dg_err dgi_read_run(dg_reader *r, int64_t *v, unsigned ni, dg_bytes *b, unsigned nb);
/* ---- writer.c ---- */
/* The writing side: ni dg_write_i64 then nb dg_write_bytes calls, one
 * count for the run where the writer stands in no sorted container and
 * its buffer has the run's worst case free (else value by value through
 * them: the same bytes and errors either way). */
dg_err dgi_write_run(dg_writer *w, const int64_t *v, unsigned ni, const dg_bytes *b,
    unsigned nb);
/* One value already encoded (n bytes at p, a whole value as a dg_writer of
 * the same registry wrote it, or as dg_read_skip found it in a checked
 * input), copied in as it is: what dg_write_value's DG_ANY writes,
 * without its walk over the value (the messages' lists: transport's
 * dg_msg_list_put). */
dg_err dgi_write_encoded(dg_writer *w, const uint8_t *p, size_t n);

/* ---- object.c ---- */
/* Encode the body of obj (bound struct) with descriptor d at the writer's
 * end (length prefix included), in the zero form only if the writer's mode
 * (w->w_zero) allows it.  *zero: the body is in zero form, and the caller
 * turns the tag it wrote into its twin (dgi_tag_zero). */
dg_err dgi_obj_encode(dg_writer *w, const dg_desc *d, const void *obj,
    unsigned depth, bool *zero);
/* After a plain fixed area written at body (fixed_size bytes, and 8
 * writable bytes after them): when the zero form is shorter, rewrite it as
 * the mask and the fields that are not all zero.  Returns the end of the
 * fixed area; *zero: which form. */
uint8_t *dgi_zero_form(const dg_desc *d, uint8_t *body, bool *zero);
/* dg_write_object of a flat descriptor at the top level (depth 0, no
 * error yet): header and body.  On any failure it leaves the buffer as it
 * was and hands over to dgi_w_top_failed (writer.c), the general path. */
dg_err dgi_write_top_flat(dg_writer *w, const dg_desc *d, const void *obj);
dg_err dgi_w_top_failed(dg_writer *w, const dg_desc *d, const void *obj);
/* The fixed area of a body of schema s (zero: in zero form): where it
 * ends (var field 0 starts) and which fields it leaves out (0 in the
 * plain form).  DG_ERR_BAD_TAG (s has no zero form), DG_ERR_BAD_LENGTH. */
dg_err dgi_fixed_area(const dg_desc *s, const uint8_t *body, uint32_t len,
    bool zero, uint32_t *end, uint64_t *omit);
/* Check body framing: footer offsets monotonic and inside the var area. */
dg_err dgi_body_check(const dg_bobj *o);
/* Decode body (schema s; zero: in zero form) into struct out bound by d
 * (same type). */
dg_err dgi_obj_decode(const dg_registry *reg, const dg_desc *s,
    const dg_desc *d, const uint8_t *body, uint32_t len, bool zero,
    void *out, dg_arena *arena, unsigned depth);
/* Read an object header at *pp (OBJ/OBJ_S tags and their zero twins):
 * schema and body into o.  check: run dgi_body_check (callers that decode
 * every field sequentially with dgi_obj_decode validate the footer as they
 * go and skip it). */
dg_err dgi_obj_header(const dg_registry *reg, uint8_t tag, const uint8_t **pp,
    const uint8_t *end, dg_bobj *o, bool check);
dg_err dgi_body_deep_check(const dg_registry *reg, const dg_bobj *o,
    unsigned depth);
/* Copy the body of o as an object value into w (OBJ/OBJ_S/DEF/REF). */
dg_err dgi_write_bobj(dg_writer *w, const dg_bobj *o);

/* Object body framing shared by the struct and builder encoders: reserve
 * the length slot (slot bytes: 1, or 2 for objects that are usually 128
 * bytes or more), then (after the fields) write the footer and length,
 * moving the body only when its length takes another number of bytes. */
void dgi_body_resize(dg_buf *b, size_t start, unsigned slot, size_t body_len);

static inline dg_err dgi_body_begin(dg_buf *b, size_t *start, unsigned slot)
{
	dg_err e;
	if (b->cap - b->len < slot && (e = dg_buf_reserve(b, slot)) != DG_OK)
		return e;
	*start = b->len;
	b->len += slot;
	return DG_OK;
}

/* The body is [start + slot, b->len); offs[j] = offset of var field j. */
static inline dg_err dgi_body_finish(dg_buf *b, size_t start, unsigned slot,
    const uint32_t *offs, uint32_t nvar)
{
	size_t body = start + slot;
	size_t data_len = b->len - body;
	uint32_t k = nvar > 1 ? nvar - 1 : 0;
	unsigned ow = data_len + k <= 0xFF ? 1 : data_len + 2 * (size_t)k <= 0xFFFF ? 2 : 4;
	size_t body_len = data_len + (size_t)k * ow;
	size_t need = (size_t)k * ow + 4;
	dg_err e;
	if (DG_UNLIKELY(body_len > UINT32_MAX))
		return DG_ERR_LIMIT;
	if (DG_UNLIKELY(b->cap - b->len < need) && (e = dg_buf_reserve(b, need)) != DG_OK)
		return e;
	uint8_t *p = b->data + b->len;
	if (DG_LIKELY(ow == 1)) {
		/* unrolled for the usual few var fields (a loop here gets
		 * vectorized, whose setup costs more than the stores) */
		switch (k) {
		case 4: p[3] = (uint8_t)offs[4]; /* fallthrough */
		case 3: p[2] = (uint8_t)offs[3]; /* fallthrough */
		case 2: p[1] = (uint8_t)offs[2]; /* fallthrough */
		case 1: p[0] = (uint8_t)offs[1]; /* fallthrough */
		case 0: break;
		default:
			for (uint32_t j = 1; j < nvar; j++)
				p[j - 1] = (uint8_t)offs[j];
		}
		p += k;
	} else {
		for (uint32_t j = 1; j < nvar; j++) {
			uint32_t o = offs[j];
			p[0] = (uint8_t)o;
			p[1] = (uint8_t)(o >> 8);
			if (ow == 4) {
				p[2] = (uint8_t)(o >> 16);
				p[3] = (uint8_t)(o >> 24);
			}
			p += ow;
		}
	}
	if (DG_LIKELY(slot == 1 && body_len < 0x80)) {
		b->data[start] = (uint8_t)body_len;
		b->len = body + body_len;
	} else if (slot == 2 && body_len >= 0x80 && body_len < 0x4000) {
		b->data[start] = (uint8_t)(body_len | 0x80);
		b->data[start + 1] = (uint8_t)(body_len >> 7);
		b->len = body + body_len;
	} else {
		dgi_body_resize(b, start, slot, body_len);
	}
	return DG_OK;
}
/* Field access on a checked body (layout index i). */
dg_err dgi_body_field(const dg_bobj *o, uint32_t i, dg_value *out,
    unsigned depth, bool deep);

/* ---- writer.c ---- */
dg_err dgi_w_fail(dg_writer *w, dg_err e);
/* Writer helpers for object encoding: begin an object value (tag +
 * header) honouring the current scope. */
dg_err dgi_w_object_header(dg_writer *w, const dg_desc *d);
void dgi_w_elem_done(dg_writer *w);
dg_err dgi_w_elem_begin(dg_writer *w);

/* ---- primitive encoding ---- */
static inline size_t dgi_uvarint_len(uint64_t v)
{
	size_t n = 1;
	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

static inline uint8_t *dgi_put_uvarint(uint8_t *p, uint64_t v)
{
	while (v >= 0x80) {
		*p++ = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	*p++ = (uint8_t)v;
	return p;
}

/* A varint's 7-bit groups, one a byte in x (little-endian, continuation
 * bits cleared), gathered into one number of up to 56 bits; and back. */
static inline uint64_t dgi_varint_gather(uint64_t x)
{
	x = ((x & 0x7F007F007F007F00ull) >> 1) | (x & 0x007F007F007F007Full);
	x = ((x & 0x3FFF00003FFF0000ull) >> 2) | (x & 0x00003FFF00003FFFull);
	x = ((x & 0x0FFFFFFF00000000ull) >> 4) | (x & 0x000000000FFFFFFFull);
	return x;
}

static inline uint64_t dgi_varint_spread(uint64_t x)
{
	x = ((x << 4) & 0x0FFFFFFF00000000ull) | (x & 0x000000000FFFFFFFull);
	x = ((x << 2) & 0x3FFF00003FFF0000ull) | (x & 0x00003FFF00003FFFull);
	x = ((x << 1) & 0x7F007F007F007F00ull) | (x & 0x007F007F007F007Full);
	return x;
}

/* 9- and 10-byte varints a word at a time (a random 64-bit id, zigzagged,
 * takes 10): dg_write_i64's (writer.c) and dgi_get_uvarint_id's (reader.c;
 * w the eight bytes at *pp, all continuing — a malformed one goes through
 * dgi_get_uvarint for its precise error). */
uint8_t *dgi_put_uvarint_long(uint8_t *p, uint64_t v);
dg_err dgi_get_uvarint_long(const uint8_t **pp, const uint8_t *end, uint64_t w,
    uint64_t *out);

/* As dgi_put_uvarint, without a loop for values below 2^56: spreads the
 * 7-bit groups into bytes and writes them with one 8-byte store.  The
 * caller guarantees 10 writable bytes at p (8 for the store, or the loop). */
static inline uint8_t *dgi_put_uvarint_fast(uint8_t *p, uint64_t v)
{
	if (DG_LIKELY(v < 0x80)) {
		*p = (uint8_t)v;
		return p + 1;
	}
	if (v < (1u << 28)) {
		/* 2..4 bytes: the same in 32 bits, whose masks are immediates */
		uint32_t y = (uint32_t)v;
		unsigned n = 2 + (y >= (1u << 14)) + (y >= (1u << 21));
		y = ((y << 2) & 0x3FFF0000u) | (y & 0x00003FFFu);
		y = ((y << 1) & 0x7F007F00u) | (y & 0x007F007Fu);
		y |= 0x808080u >> (8 * (4 - n));   /* continuation bits */
		memcpy(p, &y, 4);
		return p + n;
	}
	if (DG_UNLIKELY(v >> 56))
		return dgi_put_uvarint(p, v);
	/* bytes (5..8) and their continuation bits by the highest bit set */
	static const uint8_t bytes[56] = {
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		0, 0, 0, 0, 0, 0, 0, 5, 5, 5, 5, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6,
		7, 7, 7, 7, 7, 7, 7, 8, 8, 8, 8, 8, 8, 8,
	};
	unsigned n = bytes[63 - __builtin_clzll(v)];
	uint64_t x = dgi_varint_spread(v);
	x |= 0x8080808080808080ull >> (8 * (9 - n));   /* continuation bits */
	memcpy(p, &x, 8);
	return p + n;
}

static inline uint64_t dgi_zigzag(int64_t v)
{
	return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}
static inline int64_t dgi_unzigzag(uint64_t v)
{
	return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}


/* Decode a minimal LEB128 varint: at most 10 bytes, the 10th only 0x01, no
 * trailing 0x00 byte.  One bounded loop, inline: no call per varint. */
static inline dg_err dgi_get_uvarint(const uint8_t **pp, const uint8_t *end,
    uint64_t *out)
{
	const uint8_t *p = *pp;
	if (DG_LIKELY(p < end && p[0] < 0x80)) {
		*out = p[0];
		*pp = p + 1;
		return DG_OK;
	}
	const uint8_t *lim = end - p > 10 ? p + 10 : end;
	uint64_t v = 0;
	unsigned shift = 0;
	for (;;) {
		if (DG_UNLIKELY(p >= lim))
			return lim == end ? DG_ERR_TRUNCATED : DG_ERR_BAD_VARINT;
		uint64_t c = *p++;
		v |= (c & 0x7F) << shift;
		if (c < 0x80) {
			if (DG_UNLIKELY(c == 0 || (shift == 63 && c > 1)))
				return DG_ERR_BAD_VARINT; /* non-minimal, or > 64 bits */
			break;
		}
		shift += 7;
	}
	*out = v;
	*pp = p;
	return DG_OK;
}

/* dgi_get_uvarint for hot paths that know 8 bytes at p can be loaded
 * (p + 8 <= lim, lim >= end being the end of the whole input; lim == end
 * is always right): reads the varint a word at a time, still bounded by
 * end. */
static inline dg_err dgi_get_uvarint_lim(const uint8_t **pp, const uint8_t *end,
    const uint8_t *lim, uint64_t *out)
{
	const uint8_t *p = *pp;
	if (DG_LIKELY(p < end && p[0] < 0x80)) {
		*out = p[0];
		*pp = p + 1;
		return DG_OK;
	}
	if (DG_LIKELY(lim - p >= 8 && p < end)) {
		uint64_t w;
		memcpy(&w, p, 8);
		uint64_t stop = ~w & 0x8080808080808080ull;
		if (DG_LIKELY(stop != 0)) {
			unsigned n = (unsigned)__builtin_ctzll(stop) / 8 + 1;
			if (DG_UNLIKELY(n > (size_t)(end - p)))
				return DG_ERR_TRUNCATED;
			if (DG_UNLIKELY(n > 1 && ((w >> (8 * (n - 1))) & 0xFF) == 0))
				return DG_ERR_BAD_VARINT; /* non-minimal */
			uint64_t x = n == 8 ? w : w & ((1ull << (8 * n)) - 1);
			*out = dgi_varint_gather(x & 0x7F7F7F7F7F7F7F7Full);
			*pp = p + n;
			return DG_OK;
		}
	}
	return dgi_get_uvarint(pp, end, out);
}

/* dgi_get_uvarint_lim for integers that are often ids (the pull reader's
 * dg_read_i64): a 9- or 10-byte varint a word at a time too.  Not in the
 * descriptor decoders' loops: the call would cost them registers. */
static inline dg_err dgi_get_uvarint_id(const uint8_t **pp, const uint8_t *end,
    uint64_t *out)
{
	const uint8_t *p = *pp;
	if (end - p >= 9) {
		uint64_t w;
		memcpy(&w, p, 8);
		if (DG_UNLIKELY((~w & 0x8080808080808080ull) == 0))
			return dgi_get_uvarint_long(pp, end, w, out);
	}
	return dgi_get_uvarint_lim(pp, end, end, out);
}

/* A varint that must fill exactly the n >= 1 bytes at p — an integer field
 * whose span the footer gives: true with *out when it does.  For 2..8
 * bytes with 8 loadable at p (lim - p >= 8) one word load checks the shape:
 * every byte but the last continues, the last ends and is not 0 (minimal).
 * False for anything else, which the caller decodes the general way for
 * its precise error (or for a 9- or 10-byte varint, its value). */
static inline bool dgi_uvarint_span(const uint8_t *p, size_t n,
    const uint8_t *lim, uint64_t *out)
{
	if (n == 1) {
		*out = p[0];
		return p[0] < 0x80;
	}
	if (n <= 4 && lim - p >= 4) {
		/* the same in 32 bits, whose masks are immediates */
		uint32_t w;
		memcpy(&w, p, 4);
		unsigned sh = 32 - 8 * (unsigned)n;        /* 0..16 */
		uint32_t hi = 0x80808080u >> sh, last = 0x80000000u >> sh;
		if (DG_UNLIKELY((w & hi) != (hi ^ last) || (w << sh) >> 24 == 0))
			return false;
		uint32_t x = ((w << sh) >> sh) & 0x7F7F7F7Fu;
		x = ((x & 0x7F007F00u) >> 1) | (x & 0x007F007Fu);
		x = ((x & 0x3FFF0000u) >> 2) | (x & 0x00003FFFu);
		*out = x;
		return true;
	}
	if (DG_UNLIKELY(n > 8 || lim - p < 8))
		return false;
	uint64_t w;
	memcpy(&w, p, 8);
	unsigned sh = 64 - 8 * (unsigned)n;            /* 0..48 */
	uint64_t hi = 0x8080808080808080ull >> sh;     /* high bits of n bytes */
	uint64_t last = 0x8000000000000000ull >> sh;   /* that of byte n-1 */
	if (DG_UNLIKELY((w & hi) != (hi ^ last) || (w << sh) >> 56 == 0))
		return false;
	*out = dgi_varint_gather(((w << sh) >> sh) & 0x7F7F7F7F7F7F7F7Full);
	return true;
}

/* A timestamp's payload: svarint ms, uvarint ns (0..999999). */
static inline dg_err dgi_get_timestamp(const uint8_t **pp, const uint8_t *end,
    dg_timestamp *out)
{
	uint64_t v;
	dg_err e = dgi_get_uvarint(pp, end, &v);
	if (e != DG_OK)
		return e;
	out->ms = dgi_unzigzag(v);
	if ((e = dgi_get_uvarint(pp, end, &v)) != DG_OK)
		return e;
	if (v > 999999)
		return DG_ERR_RANGE;
	out->ns = (int32_t)v;
	return DG_OK;
}

/* UTF-8 check with the ASCII case of strings up to 64 bytes inline (names,
 * keys, addresses, short texts): the OR of their 8-byte words, the last
 * one overlapping, has no high bit. */
static inline bool dgi_utf8_ok(const uint8_t *s, size_t n)
{
	if (n <= 64) {
		uint64_t a = 0, b = 0;
		if (n >= 8 && n <= 16) {
			/* two overlapping words: no loop for the usual short text */
			memcpy(&a, s, 8);
			memcpy(&b, s + n - 8, 8);
		} else if (n >= 8) {
			for (size_t i = 0; i + 8 < n; i += 8) {
				uint64_t x;
				memcpy(&x, s + i, 8);
				a |= x;
			}
			memcpy(&b, s + n - 8, 8);
		} else if (n >= 4) {
			uint32_t x, y;
			memcpy(&x, s, 4);
			memcpy(&y, s + n - 4, 4);
			a = x | y;
		} else {
			for (size_t i = 0; i < n; i++)
				a |= s[i];
		}
		if (((a | b) & 0x8080808080808080ull) == 0)
			return true;
	}
	return dgi_utf8_valid(s, n);
}

static inline dg_err dgi_get_u32var(const uint8_t **pp, const uint8_t *end,
    uint32_t *out)
{
	uint64_t v;
	dg_err e = dgi_get_uvarint(pp, end, &v);
	if (e != DG_OK)
		return e;
	if (v > UINT32_MAX)
		return DG_ERR_BAD_LENGTH;
	*out = (uint32_t)v;
	return DG_OK;
}

static inline uint32_t dgi_ld32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}
static inline void dgi_st32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

/* Footer entry width for a body of `len` bytes (FORMAT.md, "Objects"). */
static inline unsigned dgi_off_width(uint32_t len)
{
	return len <= 0xFF ? 1 : len <= 0xFFFF ? 2 : 4;
}

static inline uint32_t dgi_ld_off(const uint8_t *p, unsigned w)
{
	if (w == 1)
		return p[0];
	if (w == 2)
		return (uint32_t)p[0] | (uint32_t)p[1] << 8;
	return dgi_ld32(p);
}

/* Width of a fixed field kind, 0 for variable width. */
static inline unsigned dgi_fixed_width(dg_kind k)
{
	switch (k) {
	case DG_BOOL:
	case DG_I8:
		return 1;
	case DG_I16:
		return 2;
	case DG_FLOAT:
		return 4;
	case DG_DOUBLE:
		return 8;
	case DG_UUID:
		return 16;
	default:
		return 0;
	}
}

/* Width of an array element kind, 0 if not an array element kind. */
static inline unsigned dgi_elem_width(dg_kind k)
{
	switch (k) {
	case DG_BOOL:
	case DG_I8:
		return 1;
	case DG_I16:
		return 2;
	case DG_I32:
	case DG_FLOAT:
		return 4;
	case DG_I64:
	case DG_DOUBLE:
		return 8;
	default:
		return 0;
	}
}

/* Bytes of the C binding of a field (for offset checks and nulls): kind,
 * element kind, DG_FF_* flags, the referenced bound descriptor. */
size_t dgi_binding_size(dg_kind k, dg_kind elem, unsigned flags,
    const dg_desc *ref);
/* A LIST / SET / MAP field bound as a dg_list (elements, or map values,
 * of kind elem; map keys are strings). */
static inline bool dgi_typed_list(unsigned kind, unsigned elem)
{
	return (kind == DG_LIST || kind == DG_SET || kind == DG_MAP) &&
	    elem != DG_NULL;
}
/* Bytes of one element of a dg_list of elem (ref: its object type). */
static inline size_t dgi_list_elem_size(unsigned elem, const dg_desc *ref)
{
	switch (elem) {
	case DG_OBJECT: return ref->struct_size;
	case DG_STRING: return sizeof(dg_str);
	case DG_BYTES: return sizeof(dg_bytes);
	case DG_BOOL: return sizeof(bool);
	case DG_I8: return 1;
	case DG_I16: return 2;
	case DG_I32: case DG_FLOAT: return 4;
	default: return 8;  /* DG_I64, DG_DOUBLE */
	}
}
static inline size_t dgi_list_elem_align(unsigned elem, const dg_desc *ref)
{
	switch (elem) {
	case DG_OBJECT: return ref->align;
	case DG_STRING: case DG_BYTES: return alignof(dg_str);
	default: return dgi_list_elem_size(elem, ref);
	}
}
/* The C layout of a dg_list's items: a list's or set's elements, or a
 * map's entries — the C struct { dg_str key; V value; } with the usual
 * alignment rules: the value at the first offset after the key aligned for
 * it, the struct's size a multiple of its alignment. */
static inline size_t dgi_coll_align(unsigned kind, unsigned elem,
    const dg_desc *ref)
{
	size_t a = dgi_list_elem_align(elem, ref);
	if (kind == DG_MAP && a < alignof(dg_str))
		a = alignof(dg_str);
	return a;
}
static inline size_t dgi_coll_value_off(unsigned kind, unsigned elem,
    const dg_desc *ref)
{
	if (kind != DG_MAP)
		return 0;
	size_t a = dgi_list_elem_align(elem, ref);
	return (sizeof(dg_str) + a - 1) / a * a;
}
static inline size_t dgi_coll_stride(unsigned kind, unsigned elem,
    const dg_desc *ref)
{
	size_t n = dgi_coll_value_off(kind, elem, ref) +
	    dgi_list_elem_size(elem, ref);
	size_t a = dgi_coll_align(kind, elem, ref);
	return (n + a - 1) / a * a;
}

/* memcpy for the short strings of keys and names, without a libc call;
 * never reads or writes outside [src, src+n) and [dst, dst+n). */
static inline void dgi_copy(uint8_t *dst, const uint8_t *src, size_t n)
{
	if (n > 16) {
		memcpy(dst, src, n);
	} else if (n >= 8) {
		uint64_t a, b;
		memcpy(&a, src, 8);
		memcpy(&b, src + n - 8, 8);
		memcpy(dst, &a, 8);
		memcpy(dst + n - 8, &b, 8);
	} else if (n >= 4) {
		uint32_t a, b;
		memcpy(&a, src, 4);
		memcpy(&b, src + n - 4, 4);
		memcpy(dst, &a, 4);
		memcpy(dst + n - 4, &b, 4);
	} else {
		for (size_t i = 0; i < n; i++)
			dst[i] = src[i];
	}
}

/* Arena copy; NULL when full. */
static inline void *dgi_arena_copy(dg_arena *a, const void *p, size_t n,
    size_t align, bool nul)
{
	/* align the address, not the offset: the caller's memory may itself
	 * be unaligned, and copies are read as typed arrays */
	uintptr_t base = (uintptr_t)a->mem;
	size_t at = (size_t)(((base + a->used + (align - 1)) &
	    ~(uintptr_t)(align - 1)) - base);
	size_t need = n + (nul ? 1 : 0);
	if (at > a->cap || a->cap - at < need)
		return NULL;
	uint8_t *dst = a->mem + at;
	if (n && p != NULL) /* p NULL: room only (list elements) */
		memcpy(dst, p, n);
	if (nul)
		dst[n] = 0;
	a->used = at + need;
	return dst;
}

#endif /* DG_MARSHAL_INT_H */
