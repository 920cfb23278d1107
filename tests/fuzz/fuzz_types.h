/* fuzz_types.h — the types the marshal fuzz target and its seed generator
 * share, so seeds exercise registered objects (struct decode, O(1) field
 * access, DEF/REF scopes) and not only scalars. */
#ifndef DG_FUZZ_TYPES_H
#define DG_FUZZ_TYPES_H

#include "marshal/marshal.h"

typedef struct fz_person {
	int64_t id;
	dg_str name;
	double score;
	int64_t ts;
} fz_person;

typedef struct fz_wide {
	bool flag;
	int8_t i8;
	int16_t i16;
	int32_t i32;
	float f;
	dg_uuid uuid;
	dg_timestamp at;
	int32_t color;
	dg_bytes blob;
	dg_array nums;
	dg_raw tags;
	dg_raw extra;
	fz_person owner;
} fz_wide;

static const dg_field_def fz_person_fields[] = {
	DG_FIELD(fz_person, id, DG_I64),
	DG_FIELD(fz_person, name, DG_STRING),
	DG_FIELD(fz_person, score, DG_DOUBLE),
	DG_FIELD(fz_person, ts, DG_I64),
};

static const dg_field_def fz_wide_fields[] = {
	DG_FIELD(fz_wide, flag, DG_BOOL),
	DG_FIELD(fz_wide, i8, DG_I8),
	DG_FIELD(fz_wide, i16, DG_I16),
	DG_FIELD(fz_wide, i32, DG_I32),
	DG_FIELD(fz_wide, f, DG_FLOAT),
	DG_FIELD(fz_wide, uuid, DG_UUID),
	DG_FIELD(fz_wide, at, DG_TIMESTAMP),
	DG_FIELD_TYPED(fz_wide, color, DG_ENUM, "Color"),
	DG_FIELD(fz_wide, blob, DG_BYTES),
	DG_FIELD_ARRAY(fz_wide, nums, DG_I32),
	DG_FIELD(fz_wide, tags, DG_LIST),
	DG_FIELD(fz_wide, extra, DG_ANY),
	DG_FIELD_TYPED(fz_wide, owner, DG_OBJECT, "Person"),
};

/* Nesting (issue 16): lists and string-keyed maps of objects, strings
 * and scalars bound as dg_list, a pointer to an object, and a list of Teams each holding a
 * list: two levels of lists decoded in one pass into the arena. */
typedef struct fz_team {
	dg_str name;
	dg_list members;  /* of fz_person */
	fz_person *lead;
} fz_team;

typedef struct fz_nest {
	int64_t id;
	dg_list teams;    /* of fz_team */
	dg_list tags;     /* of dg_str */
	dg_list nums;     /* set of int16_t */
	dg_list flags;    /* of bool */
	dg_list ws;       /* of double */
	fz_wide *wide;
	dg_list byname;   /* map: string -> fz_person */
	dg_list counts;   /* map: string -> int64_t */
} fz_nest;

typedef struct fz_person_e { dg_str key; fz_person value; } fz_person_e;
typedef struct fz_count_e { dg_str key; int64_t value; } fz_count_e;

static const dg_field_def fz_team_fields[] = {
	DG_FIELD(fz_team, name, DG_STRING),
	DG_FIELD_LIST(fz_team, members, DG_LIST, DG_OBJECT, "Person"),
	DG_FIELD_OBJ_PTR(fz_team, lead, "Person"),
};

static const dg_field_def fz_nest_fields[] = {
	DG_FIELD(fz_nest, id, DG_I64),
	DG_FIELD_LIST(fz_nest, teams, DG_LIST, DG_OBJECT, "Team"),
	DG_FIELD_LIST(fz_nest, tags, DG_LIST, DG_STRING, NULL),
	DG_FIELD_LIST(fz_nest, nums, DG_SET, DG_I16, NULL),
	DG_FIELD_LIST(fz_nest, flags, DG_LIST, DG_BOOL, NULL),
	DG_FIELD_LIST(fz_nest, ws, DG_LIST, DG_DOUBLE, NULL),
	DG_FIELD_OBJ_PTR(fz_nest, wide, "Wide"),
	DG_FIELD_LIST(fz_nest, byname, DG_MAP, DG_OBJECT, "Person"),
	DG_FIELD_LIST(fz_nest, counts, DG_MAP, DG_I64, NULL),
};

static inline dg_err fz_register(dg_registry *reg, const dg_desc **person,
    const dg_desc **wide, const dg_desc **nest)
{
	dg_type_def p = { "Person", fz_person_fields, 4, sizeof(fz_person) };
	dg_type_def w = { "Wide", fz_wide_fields,
		sizeof(fz_wide_fields) / sizeof(fz_wide_fields[0]), sizeof(fz_wide) };
	dg_type_def t = { "Team", fz_team_fields, 3, sizeof(fz_team) };
	dg_type_def n = { "Nest", fz_nest_fields,
		sizeof(fz_nest_fields) / sizeof(fz_nest_fields[0]), sizeof(fz_nest) };
	dg_err e = dg_registry_register(reg, &p, person);
	if (e == DG_OK)
		e = dg_registry_register(reg, &w, wide);
	if (e == DG_OK)
		e = dg_registry_register(reg, &t, NULL);
	return e != DG_OK ? e : dg_registry_register(reg, &n, nest);
}

#endif
