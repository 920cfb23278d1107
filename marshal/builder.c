/* builder.c — binary objects built field by field, without a C struct.
 *
 * The builder keeps its fields in the order they were first set (that order
 * is the declaration order of the schema it produces).  On write it resolves
 * the schema of its current field list: first against the schema it used
 * last time (an array compare, no lookup), then in the registry, and only
 * when the shape is new does it register a schema (one descriptor build, the
 * hook consulted).  So writing many objects of one shape builds once. */
#include "marshal_int.h"

struct bfield {
	uint32_t id;
	uint32_t name_off;   /* into b->names */
	uint32_t name_len;
	dg_kind kind;
	dg_kind elem;
	uint32_t ref_type;
	dg_value val;
};

struct dg_builder {
	dg_registry *reg;
	uint32_t type_id;
	uint32_t n, cap;
	struct bfield *f;
	uint32_t *ids;        /* field ids in builder order */
	dg_buf names;         /* type name, then field names */
	uint32_t type_len;
	/* the schema used last, for the field list in cached_ids */
	const dg_desc *cached;
	uint32_t cached_n;
	uint32_t *cached_ids;
	uint16_t *perm;       /* layout index -> builder index */
};

dg_err dg_builder_create(dg_registry *reg, const char *type_name,
    dg_builder **out)
{
	if (reg == NULL || type_name == NULL || *type_name == 0 || out == NULL)
		return DG_ERR_INVAL;
	size_t tl = strlen(type_name);
	if (tl > UINT32_MAX / 2 || !dgi_utf8_valid((const uint8_t *)type_name, tl))
		return DG_ERR_INVAL;
	dg_builder *b = dgi_calloc(1, sizeof(*b));
	if (b == NULL)
		return DG_ERR_NOMEM;
	dg_buf_init(&b->names);
	if (dg_buf_reserve(&b->names, tl) != DG_OK) {
		dgi_free(b);
		return DG_ERR_NOMEM;
	}
	memcpy(b->names.data, type_name, tl);
	b->names.len = tl;
	b->type_len = (uint32_t)tl;
	b->reg = reg;
	b->type_id = dgi_fnv1a(type_name, tl);
	*out = b;
	return DG_OK;
}

void dg_builder_destroy(dg_builder *b)
{
	if (b == NULL)
		return;
	dg_buf_free(&b->names);
	dgi_free(b->f);
	dgi_free(b->ids);
	dgi_free(b->cached_ids);
	dgi_free(b->perm);
	dgi_free(b);
}

void dg_builder_clear(dg_builder *b)
{
	b->n = 0;
	b->names.len = b->type_len;
}

static int find(const dg_builder *b, uint32_t id)
{
	for (uint32_t i = 0; i < b->n; i++)
		if (b->ids[i] == id)
			return (int)i;
	return -1;
}

static dg_err grow(dg_builder *b)
{
	uint32_t cap = b->cap ? b->cap * 2 : 8;
	if (cap > DG_MAX_FIELDS)
		cap = DG_MAX_FIELDS;
	if (b->n >= cap)
		return DG_ERR_LIMIT;
	struct bfield *f = dgi_realloc(b->f, cap * sizeof(*f));
	if (f == NULL)
		return DG_ERR_NOMEM;
	b->f = f;
	uint32_t *ids = dgi_realloc(b->ids, cap * sizeof(*ids));
	if (ids == NULL)
		return DG_ERR_NOMEM;
	b->ids = ids;
	b->cap = cap;
	return DG_OK;
}

/* The field kind a value implies when a field is new. */
static dg_err kind_of(const dg_value *v, dg_kind *kind, dg_kind *elem,
    uint32_t *ref)
{
	*elem = DG_NULL;
	*ref = 0;
	switch (v->kind) {
	case DG_NULL:
		return DG_ERR_INVAL;
	case DG_ARRAY:
		*elem = v->v.arr.elem;
		break;
	case DG_ENUM:
		*ref = v->v.en.type_id;
		break;
	case DG_OBJECT:
		*ref = v->v.obj.desc->type_id;
		break;
	default:
		break;
	}
	*kind = v->kind;
	return DG_OK;
}

static bool accepts(const struct bfield *f, const dg_value *v)
{
	if (v->kind == DG_NULL || f->kind == DG_ANY)
		return true;
	if (v->kind == DG_ANY) { /* pre-encoded: its tag must fit the field */
		if (v->v.raw.len == 0)
			return false;
		uint8_t tag = v->v.raw.ptr[0];
		if (tag == TAG_NULL)
			return true;
		if (f->kind == DG_OBJECT)
			return (dgi_tag_plain(tag) == TAG_OBJ ||
			    dgi_tag_plain(tag) == TAG_OBJ_S) && v->v.raw.len >= 5 &&
			    (f->ref_type == 0 || dgi_ld32(v->v.raw.ptr + 1) == f->ref_type);
		return f->kind >= DG_LIST && f->kind <= DG_SORTED_MAP &&
		    tag == TAG_LIST + (f->kind - DG_LIST);
	}
	if (v->kind != f->kind)
		return false;
	if (f->kind == DG_ARRAY)
		return v->v.arr.elem == f->elem;
	if (f->kind == DG_OBJECT && f->ref_type != 0)
		return v->v.obj.desc->type_id == f->ref_type;
	return true;
}

static dg_err add_field(dg_builder *b, const char *name, size_t nl,
    dg_kind kind, dg_kind elem, uint32_t ref, const dg_value *v)
{
	dg_err e;
	if (nl == 0 || nl > UINT32_MAX / 2 || !dgi_utf8_valid((const uint8_t *)name, nl))
		return DG_ERR_INVAL;
	if (b->n == b->cap && (e = grow(b)) != DG_OK)
		return e;
	if ((e = dg_buf_reserve(&b->names, nl)) != DG_OK)
		return e;
	struct bfield *f = &b->f[b->n];
	f->id = dgi_fnv1a(name, nl);
	f->name_off = (uint32_t)b->names.len;
	f->name_len = (uint32_t)nl;
	memcpy(b->names.data + b->names.len, name, nl);
	b->names.len += nl;
	f->kind = kind;
	f->elem = elem;
	f->ref_type = ref;
	f->val = *v;
	b->ids[b->n++] = f->id;
	return DG_OK;
}

dg_err dg_builder_set(dg_builder *b, const char *name, const dg_value *v)
{
	if (b == NULL || name == NULL || v == NULL)
		return DG_ERR_INVAL;
	size_t nl = strlen(name);
	uint32_t id = dgi_fnv1a(name, nl);
	int i = find(b, id);
	if (i >= 0) {
		if (!accepts(&b->f[i], v))
			return DG_ERR_TYPE_MISMATCH;
		b->f[i].val = *v;
		return DG_OK;
	}
	/* a new field: the registered type decides its kind when it has it */
	dg_kind kind, elem;
	uint32_t ref;
	const dg_desc *d = dg_registry_find(b->reg, b->type_id);
	int at = d ? dgi_field_index(d, id) : -1;
	if (at >= 0) {
		kind = (dg_kind)d->fields[at].kind;
		elem = (dg_kind)d->fields[at].elem;
		ref = d->fields[at].ref_type;
	} else {
		dg_err e = kind_of(v, &kind, &elem, &ref);
		if (e != DG_OK)
			return e;
	}
	struct bfield probe = { .kind = kind, .elem = elem, .ref_type = ref };
	if (!accepts(&probe, v))
		return DG_ERR_TYPE_MISMATCH;
	return add_field(b, name, nl, kind, elem, ref, v);
}

dg_err dg_builder_remove(dg_builder *b, const char *name)
{
	int i = find(b, dg_field_id(name));
	if (i < 0)
		return DG_ERR_UNKNOWN_FIELD;
	memmove(&b->f[i], &b->f[i + 1], (b->n - (uint32_t)i - 1) * sizeof(b->f[0]));
	memmove(&b->ids[i], &b->ids[i + 1], (b->n - (uint32_t)i - 1) * sizeof(b->ids[0]));
	b->n--;
	return DG_OK;
}

dg_err dg_builder_load(dg_builder *b, const dg_bobj *o)
{
	const dg_desc *d = o->desc;
	if (d->type_id != b->type_id)
		return DG_ERR_TYPE_MISMATCH;
	dg_builder_clear(b);
	for (uint32_t i = 0; i < d->nfields; i++) {
		uint32_t li = d->decl_to_layout[i];
		const struct dgi_field *f = &d->fields[li];
		dg_value v;
		dg_err e = dgi_body_field(o, li, &v, 1, false);
		if (e == DG_OK)
			e = add_field(b, f->name, strlen(f->name), (dg_kind)f->kind,
			    (dg_kind)f->elem, f->ref_type, &v);
		if (e != DG_OK)
			return e;
	}
	return DG_OK;
}

/* Does schema field f take builder field bf as it is (kind, array element,
 * referenced type)?  Field ids alone do not say: the same names may have
 * been set with other kinds, and put_field trusts the schema's kind. */
static bool same_kind(const struct dgi_field *f, const struct bfield *bf)
{
	return f->kind == bf->kind && f->elem == bf->elem &&
	    f->ref_type == bf->ref_type;
}

/* Resolve (or register) the schema of the current field list. */
static dg_err resolve(dg_builder *b, const dg_desc **out)
{
	if (b->cached && b->cached_n == b->n &&
	    memcmp(b->cached_ids, b->ids, b->n * sizeof(uint32_t)) == 0) {
		const dg_desc *c = b->cached;
		uint32_t i = 0;
		while (i < c->nfields && same_kind(&c->fields[i], &b->f[b->perm[i]]))
			i++;
		if (i == c->nfields) {
			*out = c;
			return DG_OK;
		}
	}
	b->cached = NULL; /* perm is rewritten below: no stale cache on failure */
	uint32_t sid = dgi_schema_id(b->ids, b->n);
	const dg_desc *d = dgi_find_schema(b->reg, b->type_id, sid);
	dg_err e;
	if (d == NULL) {
		struct dgi_fdef fd[DG_MAX_FIELDS];
		for (uint32_t i = 0; i < b->n; i++) {
			fd[i].name = (const char *)b->names.data + b->f[i].name_off;
			fd[i].name_len = b->f[i].name_len;
			fd[i].kind = b->f[i].kind;
			fd[i].elem = b->f[i].elem;
			fd[i].ref_type = b->f[i].ref_type;
			fd[i].c_off = DG_UNBOUND;
			fd[i].flags = 0;
		}
		e = dgi_register_fdefs(b->reg, (const char *)b->names.data, b->type_len,
		    fd, b->n, 0, true, &d);
		if (e != DG_OK)
			return e;
	}
	if (d->nfields != b->n)
		return DG_ERR_CONFLICT;
	uint32_t *ids = dgi_realloc(b->cached_ids, (b->n + 1) * sizeof(uint32_t));
	if (ids == NULL)
		return DG_ERR_NOMEM;
	b->cached_ids = ids;
	uint16_t *perm = dgi_realloc(b->perm, (b->n + 1) * sizeof(uint16_t));
	if (perm == NULL)
		return DG_ERR_NOMEM;
	b->perm = perm;
	for (uint32_t i = 0; i < b->n; i++) {
		int at = dgi_field_index(d, b->ids[i]);
		if (at < 0 || !same_kind(&d->fields[at], &b->f[i]))
			return DG_ERR_CONFLICT;
		perm[at] = (uint16_t)i;
	}
	memcpy(ids, b->ids, b->n * sizeof(uint32_t));
	b->cached_n = b->n;
	b->cached = d;
	*out = d;
	return DG_OK;
}

/* One field of the body, from its value, at the end of the buffer. */
static dg_err put_field(dg_writer *w, const struct dgi_field *f,
    const dg_value *v)
{
	dg_buf *b = w->w_buf;
	dg_err e;
	uint8_t *p;
	bool null = v->kind == DG_NULL;

	if (f->kind >= DG_LIST || f->kind == DG_OBJECT) {
		/* tagged: written as a value at depth 0 (no scope in a field) */
		if (f->kind >= DG_LIST && f->kind <= DG_SORTED_MAP && v->kind == DG_ANY &&
		    (v->v.raw.len == 0 || (v->v.raw.ptr[0] != TAG_NULL &&
		    v->v.raw.ptr[0] != TAG_LIST + (f->kind - DG_LIST))))
			return DG_ERR_TYPE_MISMATCH;
		uint32_t save = w->w_depth;
		w->w_depth = 0;
		e = dg_write_value(w, v);
		w->w_depth = save;
		return e;
	}
	size_t blob = 0;
	if (!null && (f->kind == DG_STRING || f->kind == DG_BYTES))
		blob = v->v.bytes.len;
	else if (!null && f->kind == DG_ARRAY)
		blob = (size_t)v->v.arr.a.count * dgi_elem_width((dg_kind)f->elem);
	if ((e = dg_buf_reserve(b, 16 + blob)) != DG_OK)
		return e;
	p = b->data + b->len;
	if (null && f->width) {
		memset(p, 0, f->width); /* fixed fields have no null: zero */
		p += f->width;
	} else switch (f->kind) {
	case DG_BOOL: *p++ = v->v.b ? 1 : 0; break;
	case DG_I8: *p++ = (uint8_t)v->v.i; break;
	case DG_I16: { int16_t x = (int16_t)v->v.i; memcpy(p, &x, 2); p += 2; break; }
	case DG_FLOAT: memcpy(p, &v->v.f, 4); p += 4; break;
	case DG_DOUBLE: memcpy(p, &v->v.d, 8); p += 8; break;
	case DG_UUID: memcpy(p, v->v.uuid.b, 16); p += 16; break;
	case DG_I32:
	case DG_I64:
		p = dgi_put_uvarint(p, null ? 0 : dgi_zigzag(v->v.i));
		break;
	case DG_ENUM:
		if (!null && v->v.en.ordinal < 0)
			return DG_ERR_RANGE;
		p = dgi_put_uvarint(p, null ? 0 : (uint32_t)v->v.en.ordinal);
		break;
	case DG_TIMESTAMP:
		if (!null && (v->v.ts.ns < 0 || v->v.ts.ns > 999999))
			return DG_ERR_RANGE;
		p = dgi_put_uvarint(p, null ? 0 : dgi_zigzag(v->v.ts.ms));
		p = dgi_put_uvarint(p, null ? 0 : (uint32_t)v->v.ts.ns);
		break;
	case DG_STRING:
	case DG_BYTES:
		if (null || v->v.bytes.ptr == NULL) {
			*p++ = 0;
			break;
		}
		if (f->kind == DG_STRING && !dgi_utf8_valid(v->v.bytes.ptr, v->v.bytes.len))
			return DG_ERR_UTF8;
		p = dgi_put_uvarint(p, (uint64_t)v->v.bytes.len + 1);
		memcpy(p, v->v.bytes.ptr, v->v.bytes.len);
		p += v->v.bytes.len;
		break;
	case DG_ARRAY:
		if (null || v->v.arr.a.ptr == NULL) {
			*p++ = 0;
			break;
		}
		p = dgi_put_uvarint(p, (uint64_t)v->v.arr.a.count + 1);
		memcpy(p, v->v.arr.a.ptr, blob); /* views hold wire bytes */
		if (f->elem == DG_BOOL)
			for (size_t i = 0; i < blob; i++)
				p[i] = p[i] ? 1 : 0;
		p += blob;
		break;
	default:
		return DG_ERR_INVAL;
	}
	b->len = (size_t)(p - b->data);
	return DG_OK;
}

dg_err dg_builder_write(dg_builder *b, dg_writer *w)
{
	uint32_t offs[DG_MAX_FIELDS];
	const dg_desc *d;
	size_t start;
	dg_err e;

	if (dgi_w_elem_begin(w) != DG_OK)
		return w->w_err;
	if ((e = resolve(b, &d)) != DG_OK)
		return dgi_w_fail(w, e);
	size_t tag = w->w_buf->len;
	if (dgi_w_object_header(w, d) != DG_OK)
		return w->w_err;
	if ((e = dgi_body_begin(w->w_buf, &start, 1)) != DG_OK)
		return dgi_w_fail(w, e);
	for (uint32_t i = 0; i < d->nfields; i++) {
		const struct dgi_field *f = &d->fields[i];
		if (!f->width)
			offs[f->var] = (uint32_t)(w->w_buf->len - start - 1);
		if ((e = put_field(w, f, &b->f[b->perm[i]].val)) != DG_OK)
			return dgi_w_fail(w, e);
		if (i + 1 == d->nfixed && w->w_zero) {
			/* the fixed area is complete: with the writer's zero-form
			 * mode on, the zero form when shorter, by the struct
			 * writer's rule, so the bytes are the same */
			bool zero;
			if ((e = dg_buf_reserve(w->w_buf, 8)) != DG_OK) /* its loads */
				return dgi_w_fail(w, e);
			uint8_t *body = w->w_buf->data + start + 1;
			w->w_buf->len = (size_t)(dgi_zero_form(d, body, &zero) -
			    w->w_buf->data);
			if (zero)
				w->w_buf->data[tag] = dgi_tag_zero(w->w_buf->data[tag]);
		}
	}
	if ((e = dgi_body_finish(w->w_buf, start, 1, offs, d->nfields - d->nfixed)) != DG_OK)
		return dgi_w_fail(w, e);
	dgi_w_elem_done(w);
	return w->w_err;
}
