/* marshal_fuzz.c — libFuzzer target for every decoder of marshal/.
 *
 * Input byte 0 picks the entry point; the rest is hostile data:
 *   even: dg_validate, the pull reader over every value (with dg_bobj_get
 *         of every field of every object), dg_read_object into the
 *         registered structs (nested lists and pointers: fz_nest), dg_bobj_open, dg_read_objects over a list;
 *   odd:  dg_registry_accept of a type definition into a fresh registry.
 * Any crash, sanitizer report, leak or over-read is a bug; every decode
 * error is fine.  Invariants checked: dg_validate accepting the input means
 * the pull reader reads all of it without error; a valid input that
 * decodes into the nested struct writes again, and that rereads and rewrites to
 * the same bytes — with a default writer (plain form) and with one in
 * zero-form mode, and the value read from the zero form writes the same
 * plain bytes as the first. */
#include "fuzz_types.h"

#include <stdlib.h>
#include <string.h>

static dg_registry *reg;
static const dg_desc *person, *wide, *nest;

static void walk_object(const dg_bobj *o)
{
	uint32_t n = dg_desc_nfields(o->desc);
	for (uint32_t i = 0; i < n; i++) {
		dg_field_info fi;
		dg_value v;
		if (dg_desc_field(o->desc, i, &fi) == DG_OK)
			(void)dg_bobj_get(o, fi.id, &v);
	}
}

static void run_reader(const uint8_t *p, size_t n, bool must_pass)
{
	dg_reader r;
	dg_value v;
	dg_err e = DG_OK;
	dg_reader_init(&r, reg, p, n);
	while (dg_reader_left(&r) > 0) {
		if ((e = dg_read_next(&r, &v)) != DG_OK)
			break;
		if (v.kind == DG_OBJECT)
			walk_object(&v.v.obj);
	}
	if (must_pass && e != DG_OK)
		abort(); /* validate and the reader disagree */
}

/* A list of persons read with the array API (its REF-run fast path). */
static void run_array(const uint8_t *p, size_t n)
{
	fz_person out[8];
	dg_reader r;
	uint32_t count;
	dg_reader_init(&r, reg, p, n);
	if (dg_read_begin(&r, DG_LIST, &count) != DG_OK)
		return;
	while (count > 0) {
		uint32_t k = count < 8 ? count : 8;
		if (dg_read_objects(&r, person, out, sizeof(out[0]), k, NULL) != DG_OK)
			return;
		count -= k;
	}
}

static void run_structs(const uint8_t *p, size_t n, bool valid)
{
	static uint8_t arena_mem[1 << 16];
	fz_wide w;
	fz_person q;
	fz_nest t;
	dg_arena a;
	dg_arena_init(&a, arena_mem, sizeof(arena_mem));
	(void)dg_decode_object(reg, person, p, n, &q, NULL);
	(void)dg_decode_object(reg, wide, p, n, &w, &a);
	/* nested lists and pointers, copies and views (an arena that fills
	 * up is an error like any other) */
	dg_arena_init(&a, arena_mem, sizeof(arena_mem));
	if (dg_decode_object(reg, nest, p, n, &t, &a) == DG_OK && valid) {
		/* a valid input that decoded writes again, and that reads back
		 * and writes to the same bytes once more (one encoding per
		 * value).  Valid: a raw container field (Wide.tags) is checked
		 * deeply when written, not when decoded. */
		static uint8_t mem2[1 << 16];
		dg_buf b1, b2, plain;
		dg_writer wr;
		dg_buf_init(&b1);
		dg_buf_init(&b2);
		dg_buf_init(&plain);
		for (int zmode = 0; zmode < 3; zmode++) {
			/* plain, zero form, plain again from the zero form's value */
			dg_buf_reset(&b1);
			dg_writer_init(&wr, reg, &b1);
			dg_writer_set_zero_form(&wr, zmode == 1);
			if (dg_write_object(&wr, nest, &t) != DG_OK)
				abort();
			if (zmode == 0) {
				if (dg_buf_reserve(&plain, b1.len) != DG_OK)
					abort();
				memcpy(plain.data, b1.data, b1.len);
				plain.len = b1.len;
			}
			if (zmode == 2 && (b1.len != plain.len ||
			    memcmp(b1.data, plain.data, b1.len) != 0))
				abort();
			dg_arena_init(&a, mem2, sizeof(mem2));
			if (dg_decode_object(reg, nest, b1.data, b1.len, &t, &a) != DG_OK)
				abort();
			dg_buf_reset(&b2);
			dg_writer_init(&wr, reg, &b2);
			dg_writer_set_zero_form(&wr, zmode == 1);
			if (dg_write_object(&wr, nest, &t) != DG_OK || b1.len != b2.len ||
			    memcmp(b1.data, b2.data, b1.len) != 0)
				abort();
		}
		dg_buf_free(&b1);
		dg_buf_free(&b2);
		dg_buf_free(&plain);
	}
	dg_arena_init_views(&a, arena_mem, 512);
	(void)dg_decode_object(reg, nest, p, n, &t, &a);
	dg_bobj o;
	if (dg_bobj_open(reg, p, n, &o) == DG_OK)
		walk_object(&o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (reg == NULL) {
		if (dg_registry_create(&reg) != DG_OK || fz_register(reg, &person, &wide, &nest) != DG_OK)
			abort();
	}
	if (size == 0)
		return 0;
	const uint8_t *p = data + 1;
	size_t n = size - 1;
	if (data[0] & 1) {
		dg_registry *r2;
		const dg_desc *d;
		if (dg_registry_create(&r2) != DG_OK)
			abort();
		(void)dg_registry_accept(r2, p, n, &d);
		dg_registry_destroy(r2);
		return 0;
	}
	/* copy so that ASan sees reads past the exact end of the input */
	uint8_t *copy = malloc(n ? n : 1);
	if (copy == NULL)
		return 0;
	memcpy(copy, p, n);
	bool valid = dg_validate(reg, copy, n) == DG_OK;
	run_reader(copy, n, valid);
	run_structs(copy, n, valid);
	run_array(copy, n);
	free(copy);
	return 0;
}
