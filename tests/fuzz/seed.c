/* seed.c — writes a seed corpus for marshal_fuzz into the directory given:
 * one file per encoding, each prefixed with the mode byte (0 = decoders,
 * 1 = type definitions). */
#define _POSIX_C_SOURCE 200809L
#include "fuzz_types.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static int nfile;
static const char *dir;

static void emit(uint8_t mode, const dg_buf *b)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/seed-%03d", dir, nfile++);
	FILE *f = fopen(path, "wb");
	if (f == NULL) {
		perror(path);
		return;
	}
	fputc(mode, f);
	fwrite(b->data, 1, b->len, f);
	fclose(f);
}

/* b emptied, and w writing into it with the zero-form mode on. */
static void zero_writer(dg_writer *w, dg_registry *reg, dg_buf *b)
{
	dg_buf_reset(b);
	dg_writer_init(w, reg, b);
	dg_writer_set_zero_form(w, true);
}

int main(int argc, char **argv)
{
	dg_registry *reg;
	const dg_desc *person, *wide, *nest;
	dg_buf b, inner;
	dg_writer w, iw;
	if (argc != 2) {
		fprintf(stderr, "usage: %s DIR\n", argv[0]);
		return 2;
	}
	dir = argv[1];
	if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
		perror(dir);
		return 1;
	}
	if (dg_registry_create(&reg) != DG_OK || fz_register(reg, &person, &wide, &nest) != DG_OK)
		return 1;
	dg_buf_init(&b);
	dg_buf_init(&inner);

	fz_person p = { 12345678, { "alice-smith", 11 }, 98.5, 1767225600000LL };
	dg_writer_init(&w, reg, &b);
	dg_write_object(&w, person, &p);
	emit(0, &b);

	/* a list of objects: DEF then REFs */
	dg_buf_reset(&b);
	dg_writer_init(&w, reg, &b);
	dg_write_list_begin(&w, 3);
	for (int i = 0; i < 3; i++) {
		p.id = i;
		dg_write_object(&w, person, &p);
	}
	dg_write_end(&w);
	emit(0, &b);

	/* the wide object with every field kind */
	int32_t nums[3] = { 1, -2, 3 };
	dg_writer_init(&iw, reg, &inner);
	dg_write_list_begin(&iw, 2);
	dg_write_str(&iw, "x", 1);
	dg_write_i32(&iw, 7);
	dg_write_end(&iw);
	fz_wide wd;
	memset(&wd, 0, sizeof(wd));
	wd.flag = true;
	wd.i8 = -5;
	wd.i16 = 300;
	wd.i32 = -70000;
	wd.f = 1.5f;
	wd.at.ms = 1767225600000LL;
	wd.at.ns = 42;
	wd.color = 2;
	wd.blob.ptr = (const uint8_t *)"\x00\x01\x02";
	wd.blob.len = 3;
	wd.nums.ptr = nums;
	wd.nums.count = 3;
	wd.tags.ptr = inner.data;
	wd.tags.len = (uint32_t)inner.len;
	wd.owner = p;
	dg_buf_reset(&b);
	dg_writer_init(&w, reg, &b);
	dg_write_object(&w, wide, &wd);
	emit(0, &b);

	/* nesting: lists of objects in list elements, pointers, scalar lists */
	{
		fz_person members[3] = { p, p, p };
		fz_team teams[2] = {
			{ { "core", 4 }, { members, 3 }, &members[0] },
			{ { "edge", 4 }, { members, 1 }, NULL },
		};
		dg_str tags[2] = { { "a", 1 }, { NULL, 0 } };
		int16_t snums[2] = { -3, 300 };
		bool flags[2] = { true, false };
		double ws[1] = { 0.25 };
		fz_person_e byname[2] = { { { "ann", 3 }, p }, { { "bo", 2 }, p } };
		fz_count_e counts[1] = { { { "n", 1 }, -5 } };
		fz_nest nt = { 9, { teams, 2 }, { tags, 2 }, { snums, 2 },
			{ flags, 2 }, { ws, 1 }, &wd, { byname, 2 }, { counts, 1 } };
		dg_buf_reset(&b);
		dg_writer_init(&w, reg, &b);
		dg_write_object(&w, nest, &nt);
		emit(0, &b);
		dg_buf_reset(&b);
		dg_desc_export(nest, &b);
		emit(1, &b);
	}

	/* the zero form (FORMAT.md), written with the writer's zero-form mode
	 * on: OBJ_Z; a list of DEF_Z, REF, REF_Z; the wide object with every
	 * fixed field zero; a nest whose team members and map values are
	 * zero-form objects in typed lists */
	{
		fz_person z = p, ps[3] = { p, p, p };
		z.score = 0.0;
		ps[0].score = 0.0;
		ps[2].score = 0.0;
		zero_writer(&w, reg, &b);
		dg_write_object(&w, person, &z);
		emit(0, &b);
		zero_writer(&w, reg, &b);
		dg_write_list_begin(&w, 3);
		dg_write_objects(&w, person, ps, sizeof ps[0], 3);
		dg_write_end(&w);
		emit(0, &b);
		fz_wide wz = wd;
		wz.flag = false;
		wz.i8 = 0;
		wz.i16 = 0;
		wz.f = 0.0f;
		memset(&wz.uuid, 0, sizeof wz.uuid);
		wz.owner = z;
		zero_writer(&w, reg, &b);
		dg_write_object(&w, wide, &wz);
		emit(0, &b);
		fz_team teams[1] = { { { "zero", 4 }, { ps, 3 }, &z } };
		fz_person_e byname[2] = { { { "z", 1 }, z }, { { "p", 1 }, p } };
		fz_nest nz;
		memset(&nz, 0, sizeof nz);
		nz.id = 1;
		nz.teams = (dg_list){ teams, 1 };
		nz.wide = &wz;
		nz.byname = (dg_list){ byname, 2 };
		zero_writer(&w, reg, &b);
		dg_write_object(&w, nest, &nz);
		emit(0, &b);
	}

	/* scalars and containers */
	dg_buf_reset(&b);
	dg_writer_init(&w, reg, &b);
	dg_write_sorted_map_begin(&w, 2);
	dg_write_str(&w, "a", 1);
	dg_write_double(&w, 0.5);
	dg_write_str(&w, "b", 1);
	dg_write_null(&w);
	dg_write_end(&w);
	dg_write_sorted_set_begin(&w, 3);
	dg_write_i8(&w, -1);
	dg_write_i64(&w, 1000);
	dg_write_float(&w, 2.0f);
	dg_write_end(&w);
	dg_write_map_begin(&w, 1);
	dg_write_uuid(&w, &wd.uuid);
	dg_write_timestamp(&w, wd.at);
	dg_write_end(&w);
	dg_write_set_begin(&w, 2);
	dg_write_enum(&w, dg_type_id("Color"), 1);
	dg_write_array(&w, DG_I64, (int64_t[]){ 1, 2 }, 2);
	dg_write_end(&w);
	dg_write_bytes(&w, "zz", 2);
	dg_write_bool(&w, false);
	dg_write_i16(&w, -2);
	emit(0, &b);

	/* type definition for accept */
	dg_buf_reset(&b);
	dg_desc_export(wide, &b);
	emit(1, &b);

	dg_buf_free(&b);
	dg_buf_free(&inner);
	dg_registry_destroy(reg);
	printf("%d seeds in %s\n", nfile, dir);
	return 0;
}
