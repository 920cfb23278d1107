/* registry.c — type descriptors: building them (once), publishing them
 * copy-on-write for lock-free lookup, the registration hook, and the
 * exported definition format (FORMAT.md, "Type definitions"). */
#include "marshal_int.h"

#include <stdalign.h>
#include <stdlib.h>

#define fdef dgi_fdef

/* ---- ids ---- */

uint32_t dgi_fnv1a(const void *p, size_t n)
{
	const uint8_t *s = p;
	uint32_t h = 0x811C9DC5u;
	for (size_t i = 0; i < n; i++) {
		h ^= s[i];
		h *= 0x01000193u;
	}
	return h ? h : 1;
}

uint32_t dg_type_id(const char *name)
{
	return dgi_fnv1a(name, strlen(name));
}

uint32_t dg_field_id(const char *name)
{
	return dgi_fnv1a(name, strlen(name));
}

uint32_t dgi_schema_id(const uint32_t *ids, uint32_t n)
{
	uint8_t le[4];
	uint32_t h = 0x811C9DC5u;
	for (uint32_t i = 0; i < n; i++) {
		dgi_st32(le, ids[i]);
		for (int k = 0; k < 4; k++) {
			h ^= le[k];
			h *= 0x01000193u;
		}
	}
	return h ? h : 1;
}

/* ---- descriptor accessors ---- */

uint32_t dg_desc_type_id(const dg_desc *d) { return d->type_id; }
uint32_t dg_desc_schema_id(const dg_desc *d) { return d->schema_id; }
const char *dg_desc_name(const dg_desc *d) { return d->name; }
uint32_t dg_desc_nfields(const dg_desc *d) { return d->nfields; }
bool dg_desc_is_registered(const dg_desc *d) { return d->state == DESC_REGISTERED; }

dg_err dg_desc_field(const dg_desc *d, uint32_t i, dg_field_info *out)
{
	if (i >= d->nfields)
		return DG_ERR_INVAL;
	const struct dgi_field *f = &d->fields[d->decl_to_layout[i]];
	out->name = f->name;
	out->id = f->id;
	out->kind = (dg_kind)f->kind;
	out->elem = (dg_kind)f->elem;
	out->type_id = f->ref_type;
	return DG_OK;
}

size_t dgi_binding_size(dg_kind k, dg_kind elem, unsigned flags,
    const dg_desc *ref)
{
	if (k == DG_OBJECT && (flags & DG_FF_PTR))
		return sizeof(void *);
	if (dgi_typed_list(k, elem))
		return sizeof(dg_list);
	switch (k) {
	case DG_BOOL: return sizeof(bool);
	case DG_I8: return 1;
	case DG_I16: return 2;
	case DG_I32: return 4;
	case DG_I64: return 8;
	case DG_FLOAT: return sizeof(float);
	case DG_DOUBLE: return sizeof(double);
	case DG_STRING: return sizeof(dg_str);
	case DG_BYTES: return sizeof(dg_bytes);
	case DG_UUID: return sizeof(dg_uuid);
	case DG_TIMESTAMP: return sizeof(dg_timestamp);
	case DG_ENUM: return sizeof(int32_t);
	case DG_ARRAY: return sizeof(dg_array);
	case DG_OBJECT: return ref ? ref->struct_size : 0;
	default: return sizeof(dg_raw);
	}
}

static size_t binding_align(dg_kind k, unsigned flags)
{
	if (flags & DG_FF_PTR)
		return alignof(void *);
	switch (k) {
	case DG_BOOL: return alignof(bool);
	case DG_I8: return 1;
	case DG_I16: return 2;
	case DG_I32: case DG_ENUM: case DG_FLOAT: return 4;
	case DG_I64: case DG_DOUBLE: return 8;
	case DG_UUID: return 1;
	case DG_OBJECT: return 1; /* see desc_align */
	default: return alignof(void *);
	}
}

/* Alignment an embedded struct needs: that of its most aligned field, so
 * that its fields stay aligned wherever the outer struct places it. */
static size_t desc_align(const dg_desc *d)
{
	size_t a = 1;
	for (uint32_t i = 0; i < d->nfields; i++) {
		const struct dgi_field *f = &d->fields[i];
		size_t fa = f->kind == DG_OBJECT && !(f->flags & DG_FF_PTR) ?
		    f->ref->align : binding_align((dg_kind)f->kind, f->flags);
		if (fa > a)
			a = fa;
	}
	return a;
}

/* ---- building ---- */

static uint32_t pow2_at_least(uint32_t n)
{
	uint32_t c = 1;
	while (c < n)
		c <<= 1;
	return c;
}

/* The fixed area of a bound descriptor as the encode and decode loops copy
 * it (DGI_OP_RUN): fields adjacent in the struct in layout order merge into
 * one run, so a struct whose fixed fields sit together in declaration order
 * moves its whole fixed area with one copy.  Bools stay single ops.  Returns
 * the number of ops written to d->fops. */
static uint32_t fixed_runs(dg_desc *d)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < d->nfixed; i++) {
		const struct dgi_op *o = &d->ops[i];
		struct dgi_op *run = n > 0 ? &d->fops[n - 1] : NULL;
		if (run != NULL && run->kind == DGI_OP_RUN && o->kind != DG_BOOL &&
		    run->c_off + run->width == o->c_off &&
		    run->width + o->width <= UINT8_MAX) {
			run->width = (uint8_t)(run->width + o->width);
			continue;
		}
		d->fops[n] = *o;
		if (o->kind != DG_BOOL)
			d->fops[n].kind = DGI_OP_RUN;
		n++;
	}
	return n;
}

/* The one place that builds a descriptor: counted in reg->builds. */
static dg_err desc_build(dg_registry *reg, const char *name, size_t name_len,
    const struct fdef *f, uint32_t n, size_t struct_size, uint8_t builtin,
    const dg_desc *const *refs, dg_desc **out)
{
	uint32_t idxcap = pow2_at_least(n * 2 > 2 ? n * 2 : 2);
	size_t names = name_len + 1;
	for (uint32_t i = 0; i < n; i++)
		names += f[i].name_len + 1;
	size_t size = sizeof(dg_desc) + n * sizeof(uint64_t) +
	    n * sizeof(struct dgi_field) + 2 * n * sizeof(struct dgi_op) +
	    (n + idxcap) * sizeof(uint16_t) + names;
	uint8_t *mem = dgi_calloc(1, size);
	if (mem == NULL)
		return DG_ERR_NOMEM;

	dg_desc *d = (dg_desc *)mem;
	d->zmask = (uint64_t *)(mem + sizeof(dg_desc));
	d->fields = (struct dgi_field *)(d->zmask + n);
	d->ops = (struct dgi_op *)(d->fields + n);
	d->fops = d->ops + n;
	d->decl_to_layout = (uint16_t *)(d->fops + n);
	d->idx = d->decl_to_layout + n;
	char *str = (char *)(d->idx + idxcap);
	d->idx_mask = idxcap - 1;
	d->nfields = n;
	d->struct_size = struct_size;
	d->bound = struct_size > 0;
	d->builtin = builtin;
	d->reg = reg;
	memcpy(str, name, name_len);
	d->name = str;
	str += name_len + 1;
	d->type_id = dgi_fnv1a(name, name_len);

	uint32_t ids[DG_MAX_FIELDS];
	uint32_t pos = 0, off = 0, nvar = 0;
	for (int pass = 0; pass < 2; pass++) {
		for (uint32_t i = 0; i < n; i++) {
			unsigned w = dgi_fixed_width(f[i].kind);
			if ((pass == 0) != (w != 0))
				continue;
			struct dgi_field *lf = &d->fields[pos];
			memcpy(str, f[i].name, f[i].name_len);
			lf->name = str;
			str += f[i].name_len + 1;
			lf->id = dgi_fnv1a(f[i].name, f[i].name_len);
			lf->kind = (uint8_t)f[i].kind;
			lf->elem = (uint8_t)f[i].elem;
			lf->width = (uint8_t)w;
			lf->decl = (uint16_t)i;
			lf->ref_type = f[i].ref_type;
			lf->ref = refs ? refs[i] : NULL;
			lf->flags = f[i].flags;
			lf->c_off = struct_size ? f[i].c_off : DG_UNBOUND;
			if (w) {
				lf->body_off = off;
				off += w;
			} else {
				lf->var = (uint16_t)nvar++;
			}
			d->ops[pos].c_off = lf->c_off;
			d->ops[pos].kind = lf->kind;
			d->ops[pos].width = lf->width;
			d->ops[pos].field = (uint16_t)pos;
			d->decl_to_layout[i] = (uint16_t)pos;
			uint32_t h = (lf->id * 0x9E3779B1u) & d->idx_mask;
			while (d->idx[h] != 0)
				h = (h + 1) & d->idx_mask;
			d->idx[h] = (uint16_t)(pos + 1);
			pos++;
		}
		if (pass == 0)
			d->nfixed = pos;
	}
	d->fixed_size = off;
	d->align = d->bound ? desc_align(d) : 1;
	for (uint32_t i = 0; i < n && d->bound; i++)
		if (dgi_typed_list(f[i].kind, f[i].elem))
			d->big = 1;
	d->nvar = nvar;
	d->nfoot = nvar > 1 ? nvar - 1 : 0;
	d->tail = nvar * 20 + 8;
	/* the zero form (FORMAT.md): a mask of nfixed bits, for 1..64 fixed
	 * fields; worth a test per object only if it can be the shorter */
	if (d->nfixed >= 1 && d->nfixed <= 64) {
		d->zbytes = (uint8_t)((d->nfixed + 7) / 8);
		d->zable = d->fixed_size > d->zbytes;
	}
	d->zsafe = d->bound;
	for (uint32_t i = 0; i < d->nfixed; i++) {
		unsigned w = d->fields[i].width;
		d->zmask[i] = w >= 8 ? ~UINT64_C(0) : (UINT64_C(1) << (8 * w)) - 1;
		if (d->bound && (size_t)d->fields[i].c_off + 8 > struct_size)
			d->zsafe = 0;
	}
	if (d->bound) {
		d->nfops = fixed_runs(d);
		d->fixed1 = d->nfops == 1 && d->fops[0].kind == DGI_OP_RUN;
		d->flat = 1;
		for (uint32_t i = d->nfixed; i < n; i++) {
			uint8_t k = d->fields[i].kind;
			if (k != DG_I32 && k != DG_I64 && k != DG_STRING && k != DG_BYTES)
				d->flat = 0;
		}
	}
	for (uint32_t i = 0; i < n; i++)
		ids[i] = d->fields[d->decl_to_layout[i]].id;
	d->schema_id = dgi_schema_id(ids, n);
	if (builtin == DG_SORTED_SET || builtin == DG_SORTED_MAP)
		d->cmp = dgi_cmp_encoded;
	atomic_fetch_add_explicit(&reg->builds, 1, memory_order_relaxed);
	*out = d;
	return DG_OK;
}

/* ---- publication ---- */

static dg_err retire(dg_registry *reg, void *p)
{
	struct dgi_retired *r = dgi_alloc(sizeof(*r));
	if (r == NULL)
		return DG_ERR_NOMEM;
	r->p = p;
	r->next = reg->retired;
	reg->retired = r;
	return DG_OK;
}

static struct dgi_type *table_get(const struct dgi_table *t, uint32_t id)
{
	uint32_t i = (id * 0x9E3779B1u) & t->mask;
	for (;;) {
		const struct dgi_slot *s = &t->slots[i];
		uint32_t k = atomic_load_explicit((_Atomic uint32_t *)&s->key,
		    memory_order_acquire);
		if (k == id)
			return s->type;
		if (k == 0)
			return NULL;
		i = (i + 1) & t->mask;
	}
}

static struct dgi_table *table_new(uint32_t cap)
{
	struct dgi_table *t = dgi_calloc(1, sizeof(*t) + cap * sizeof(struct dgi_slot));
	if (t != NULL)
		t->mask = cap - 1;
	return t;
}

static void table_put(struct dgi_table *t, struct dgi_type *ty)
{
	uint32_t i = (ty->type_id * 0x9E3779B1u) & t->mask;
	while (t->slots[i].key != 0)
		i = (i + 1) & t->mask;
	t->slots[i].type = ty;
	atomic_store_explicit((_Atomic uint32_t *)&t->slots[i].key, ty->type_id,
	    memory_order_release);
	t->count++;
}

/* Under reg->mu: publish a new type holding descriptor d. */
static dg_err publish_type(dg_registry *reg, const dg_desc *d)
{
	struct dgi_table *t = atomic_load_explicit(&reg->table, memory_order_relaxed);
	struct dgi_type *ty = dgi_alloc(sizeof(*ty));
	struct dgi_schemas *s = dgi_alloc(sizeof(*s) + sizeof(s->d[0]));
	struct dgi_retired *r1 = dgi_alloc(sizeof(*r1));
	struct dgi_retired *r2 = dgi_alloc(sizeof(*r2));
	struct dgi_table *nt = NULL;
	struct dgi_retired *r3 = NULL; /* retires the old table when it grows */
	if (ty == NULL || s == NULL || r1 == NULL || r2 == NULL)
		goto nomem;
	if ((t->count + 1) * 2 > t->mask + 1) {
		uint32_t cap = (t->mask + 1) * 2;
		/* both before publishing: a failure after it would leave the old
		 * table neither freeable (readers) nor on the retired list */
		if ((nt = table_new(cap)) == NULL ||
		    (r3 = dgi_alloc(sizeof(*r3))) == NULL)
			goto nomem;
		for (uint32_t i = 0; i <= t->mask; i++)
			if (t->slots[i].key != 0)
				table_put(nt, t->slots[i].type);
	}
	s->n = 1;
	s->d[0] = d;
	ty->type_id = d->type_id;
	atomic_init(&ty->schemas, s);
	/* type and schema array live until the registry is destroyed */
	r1->p = ty;
	r1->next = reg->retired;
	r2->p = s;
	r2->next = r1;
	reg->retired = r2;
	if (nt != NULL) {
		table_put(nt, ty);
		atomic_store_explicit(&reg->table, nt, memory_order_release);
		r3->p = t; /* freed with the registry: readers may still use it */
		r3->next = reg->retired;
		reg->retired = r3;
	} else {
		table_put(t, ty);
	}
	atomic_fetch_add_explicit(&reg->types, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&reg->schemas, 1, memory_order_relaxed);
	return DG_OK;
nomem:
	dgi_free(ty);
	dgi_free(s);
	dgi_free(r1);
	dgi_free(r2);
	dgi_free(nt);
	dgi_free(r3);
	return DG_ERR_NOMEM;
}

/* Under reg->mu: publish a new schema array for ty where d replaces
 * entry `at` (or is appended when at == old->n). */
static dg_err publish_schema(dg_registry *reg, struct dgi_type *ty,
    const dg_desc *d, uint32_t at)
{
	struct dgi_schemas *old = atomic_load_explicit(&ty->schemas, memory_order_relaxed);
	uint32_t n = old->n + (at == old->n ? 1 : 0);
	struct dgi_schemas *s = dgi_alloc(sizeof(*s) + n * sizeof(s->d[0]));
	if (s == NULL)
		return DG_ERR_NOMEM;
	if (retire(reg, s) != DG_OK) {
		dgi_free(s);
		return DG_ERR_NOMEM;
	}
	memcpy(s->d, old->d, old->n * sizeof(s->d[0]));
	s->n = n;
	s->d[at] = d;
	atomic_store_explicit(&ty->schemas, s, memory_order_release);
	if (at == old->n)
		atomic_fetch_add_explicit(&reg->schemas, 1, memory_order_relaxed);
	return DG_OK;
}

/* ---- lookup ---- */

/* reg NULL is a registry that knows no type: a reader without one (txn
 * reads peer bytes so) answers DG_ERR_UNKNOWN_TYPE for an object, where it
 * dereferenced NULL (found by tests/fuzz/msg_fuzz, crash msg_fuzz-1). */
static struct dgi_type *find_type(const dg_registry *reg, uint32_t id)
{
	if (reg == NULL)
		return NULL;
	const struct dgi_table *t = atomic_load_explicit(
	    (_Atomic(struct dgi_table *) *)&reg->table, memory_order_acquire);
	return table_get(t, id);
}

const dg_desc *dg_registry_find(const dg_registry *reg, uint32_t type_id)
{
	struct dgi_type *ty = find_type(reg, type_id);
	if (ty == NULL)
		return NULL;
	return atomic_load_explicit(&ty->schemas, memory_order_acquire)->d[0];
}

const dg_desc *dgi_find_schema(const dg_registry *reg, uint32_t type_id,
    uint32_t schema_id)
{
	struct dgi_type *ty = find_type(reg, type_id);
	if (ty == NULL)
		return NULL;
	struct dgi_schemas *s = atomic_load_explicit(&ty->schemas, memory_order_acquire);
	for (uint32_t i = 0; i < s->n; i++)
		if (s->d[i]->schema_id == schema_id)
			return s->d[i];
	return NULL;
}

bool dgi_type_has_field(const dg_registry *reg, uint32_t type_id,
    uint32_t field_id)
{
	struct dgi_type *ty = find_type(reg, type_id);
	if (ty == NULL)
		return false;
	struct dgi_schemas *s = atomic_load_explicit(&ty->schemas, memory_order_acquire);
	for (uint32_t i = 0; i < s->n; i++)
		if (dgi_field_index(s->d[i], field_id) >= 0)
			return true;
	return false;
}

const dg_desc *dg_registry_find_schema(const dg_registry *reg, uint32_t type_id,
    uint32_t schema_id)
{
	return dgi_find_schema(reg, type_id, schema_id);
}

size_t dg_registry_list(const dg_registry *reg, const dg_desc **out, size_t cap)
{
	const struct dgi_table *t = atomic_load_explicit(
	    (_Atomic(struct dgi_table *) *)&reg->table, memory_order_acquire);
	size_t n = 0;
	for (uint32_t i = 0; i <= t->mask; i++) {
		uint32_t k = atomic_load_explicit((_Atomic uint32_t *)&t->slots[i].key,
		    memory_order_acquire);
		if (k == 0)
			continue;
		struct dgi_schemas *s = atomic_load_explicit(&t->slots[i].type->schemas,
		    memory_order_acquire);
		for (uint32_t j = 0; j < s->n; j++) {
			if (s->d[j]->builtin)
				continue;
			if (n < cap)
				out[n] = s->d[j];
			n++;
		}
	}
	return n;
}

void dg_registry_get_stats(const dg_registry *reg, dg_registry_stats *out)
{
	out->builds = atomic_load_explicit(&reg->builds, memory_order_relaxed);
	out->types = atomic_load_explicit(&reg->types, memory_order_relaxed);
	out->schemas = atomic_load_explicit(&reg->schemas, memory_order_relaxed);
}

/* Registering threads call the hook outside reg->mu (it may wait for the
 * cluster): hook_calls counts those running, and a change of the hook
 * waits for them, so the old hook's ctx may be freed once it returns (the
 * membership that installed it stops, for one). */
void dg_registry_set_hook(dg_registry *reg, dg_propose_fn fn, void *ctx)
{
	pthread_mutex_lock(&reg->mu);
	reg->hook = fn;
	reg->hook_ctx = ctx;
	while (reg->hook_calls > 0)
		pthread_cond_wait(&reg->hook_cv, &reg->mu);
	pthread_mutex_unlock(&reg->mu);
}

/* ---- registration ---- */

static bool same_field(const struct dgi_field *a, const struct fdef *b)
{
	return a->kind == b->kind && a->elem == b->elem &&
	    a->ref_type == b->ref_type;
}

/* Compare a definition with the schemas of an existing type.
 * Returns DG_ERR_CONFLICT if a shared field id has another kind; sets
 * *match to the index of the schema with the same field list (or n). */
static dg_err check_against(const struct dgi_schemas *s, const char *name,
    size_t name_len, const struct fdef *f, uint32_t n, uint32_t schema_id,
    uint32_t *match)
{
	*match = s->n;
	const dg_desc *p = s->d[0];
	if (strlen(p->name) != name_len || memcmp(p->name, name, name_len) != 0)
		return DG_ERR_CONFLICT; /* two names hash to one type id */
	for (uint32_t k = 0; k < s->n; k++) {
		const dg_desc *d = s->d[k];
		for (uint32_t i = 0; i < n; i++) {
			int at = dgi_field_index(d, dgi_fnv1a(f[i].name, f[i].name_len));
			if (at >= 0) {
				const struct dgi_field *df = &d->fields[at];
				if (!same_field(df, &f[i]) ||
				    strlen(df->name) != f[i].name_len ||
				    memcmp(df->name, f[i].name, f[i].name_len) != 0)
					return DG_ERR_CONFLICT;
			}
		}
		if (d->schema_id == schema_id) {
			/* one schema id must mean one field list: two lists that
			 * hash alike are refused, never confused */
			bool same = d->nfields == n;
			for (uint32_t i = 0; same && i < n; i++)
				same = d->fields[d->decl_to_layout[i]].id ==
				    dgi_fnv1a(f[i].name, f[i].name_len);
			if (!same)
				return DG_ERR_CONFLICT;
			*match = k;
		}
	}
	return DG_OK;
}

static bool same_binding(const dg_desc *d, const struct fdef *f, uint32_t n,
    size_t struct_size)
{
	if (d->struct_size != struct_size)
		return false;
	for (uint32_t i = 0; i < n; i++)
		if (d->fields[d->decl_to_layout[i]].c_off != f[i].c_off ||
		    d->fields[d->decl_to_layout[i]].flags != f[i].flags)
			return false;
	return true;
}

static dg_err validate_fields(const dg_registry *reg, const struct fdef *f,
    uint32_t n, size_t struct_size, const dg_desc **refs)
{
	uint32_t ids[DG_MAX_FIELDS];
	for (uint32_t i = 0; i < n; i++) {
		if (f[i].name == NULL || f[i].name_len == 0 ||
		    !dgi_utf8_valid((const uint8_t *)f[i].name, f[i].name_len))
			return DG_ERR_INVAL;
		if (f[i].kind <= DG_NULL || f[i].kind >= DG_KIND__COUNT)
			return DG_ERR_INVAL;
		bool typed = dgi_typed_list(f[i].kind, f[i].elem);
		bool objs = typed && f[i].elem == DG_OBJECT;
		if (f[i].kind == DG_ARRAY && dgi_elem_width(f[i].elem) == 0)
			return DG_ERR_INVAL;
		if (typed && f[i].elem != DG_OBJECT && f[i].elem != DG_STRING &&
		    f[i].elem != DG_BYTES && dgi_elem_width(f[i].elem) == 0)
			return DG_ERR_INVAL;
		if (f[i].kind != DG_ARRAY && !typed && f[i].elem != DG_NULL)
			return DG_ERR_INVAL;
		if ((f[i].kind == DG_ENUM || objs) && f[i].ref_type == 0)
			return DG_ERR_INVAL;
		if (f[i].kind != DG_ENUM && f[i].kind != DG_OBJECT && !objs &&
		    f[i].ref_type != 0)
			return DG_ERR_INVAL;
		if ((f[i].flags & ~DG_FF_PTR) != 0 ||
		    ((f[i].flags & DG_FF_PTR) && f[i].kind != DG_OBJECT))
			return DG_ERR_INVAL;
		refs[i] = NULL;
		if ((f[i].kind == DG_OBJECT || objs) && struct_size > 0) {
			/* an embedded struct: its type must be registered and bound */
			if (f[i].ref_type == 0)
				return DG_ERR_INVAL;
			struct dgi_type *ty = find_type(reg, f[i].ref_type);
			if (ty == NULL)
				return DG_ERR_UNKNOWN_TYPE;
			struct dgi_schemas *s = atomic_load_explicit(&ty->schemas,
			    memory_order_acquire);
			for (uint32_t k = 0; k < s->n && refs[i] == NULL; k++)
				if (s->d[k]->bound)
					refs[i] = s->d[k];
			if (refs[i] == NULL)
				return DG_ERR_UNKNOWN_TYPE;
		}
		if (struct_size > 0) {
			size_t bs = dgi_binding_size(f[i].kind, f[i].elem,
			    f[i].flags, refs[i]);
			bool embedded = f[i].kind == DG_OBJECT &&
			    !(f[i].flags & DG_FF_PTR);
			if (f[i].c_off == DG_UNBOUND || f[i].c_off > struct_size ||
			    struct_size - f[i].c_off < bs ||
			    f[i].c_off % binding_align(f[i].kind, f[i].flags) != 0 ||
			    (embedded && f[i].c_off % refs[i]->align != 0))
				return DG_ERR_INVAL;
		}
		ids[i] = dgi_fnv1a(f[i].name, f[i].name_len);
		for (uint32_t j = 0; j < i; j++)
			if (ids[j] == ids[i])
				return DG_ERR_CONFLICT;
	}
	return DG_OK;
}

dg_err dgi_register_fdefs(dg_registry *reg, const char *name,
    size_t name_len, const struct fdef *f, uint32_t n, size_t struct_size,
    bool propose, const dg_desc **out)
{
	const dg_desc *refs[DG_MAX_FIELDS];
	uint32_t ids[DG_MAX_FIELDS];
	dg_desc *d = NULL;
	dg_buf def;
	dg_err e;

	if (name == NULL || name_len == 0 ||
	    !dgi_utf8_valid((const uint8_t *)name, name_len))
		return DG_ERR_INVAL;
	if (n > DG_MAX_FIELDS)
		return DG_ERR_LIMIT;
	if ((e = validate_fields(reg, f, n, struct_size, refs)) != DG_OK)
		return e;
	for (uint32_t i = 0; i < n; i++)
		ids[i] = dgi_fnv1a(f[i].name, f[i].name_len);
	uint32_t type_id = dgi_fnv1a(name, name_len);
	uint32_t schema_id = dgi_schema_id(ids, n);
	dg_buf_init(&def);

	for (int attempt = 0;; attempt++) {
		pthread_mutex_lock(&reg->mu);
		struct dgi_type *ty = find_type(reg, type_id);
		uint32_t match = 0;
		struct dgi_schemas *s = NULL;
		if (ty != NULL) {
			s = atomic_load_explicit(&ty->schemas, memory_order_relaxed);
			if ((e = check_against(s, name, name_len, f, n, schema_id, &match)) != DG_OK)
				goto unlock;
			if (match < s->n) {
				const dg_desc *have = s->d[match];
				if (struct_size == 0 || (have->bound &&
				    same_binding(have, f, n, struct_size))) {
					if (out)
						*out = have;
					e = DG_OK;
					goto unlock; /* already registered: no build */
				}
				if (have->bound) {
					e = DG_ERR_CONFLICT; /* bound to another layout */
					goto unlock;
				}
			}
		}
		bool is_new = ty == NULL || match == s->n;
		if (d == NULL) {
			e = desc_build(reg, name, name_len, f, n, struct_size, 0, refs, &d);
			if (e != DG_OK)
				goto unlock;
		}
		if (is_new && propose && reg->hook != NULL && attempt == 0) {
			/* ask the cluster first, without holding the lock */
			dg_propose_fn hook = reg->hook;
			void *ctx = reg->hook_ctx;
			reg->hook_calls++; /* dg_registry_set_hook waits for it */
			pthread_mutex_unlock(&reg->mu);
			if ((e = dg_desc_export(d, &def)) == DG_OK)
				e = hook(ctx, d, def.data, def.len);
			pthread_mutex_lock(&reg->mu);
			if (--reg->hook_calls == 0)
				pthread_cond_broadcast(&reg->hook_cv);
			pthread_mutex_unlock(&reg->mu);
			if (e != DG_OK) {
				dgi_free(d);
				dg_buf_free(&def);
				return e;
			}
			continue; /* re-check: the hook may have accepted it already */
		}
		/* on the free list first: a failed publish leaves it unseen */
		if ((e = retire(reg, d)) != DG_OK)
			goto unlock;
		dg_desc *pub = d;
		d = NULL;
		pub->state = DESC_REGISTERED;
		pub->primary = ty == NULL || match == 0;
		pub->flat_top = pub->flat && pub->primary;
		if (ty == NULL)
			e = publish_type(reg, pub);
		else
			e = publish_schema(reg, ty, pub, match);
		if (e == DG_OK && out)
			*out = pub;
	unlock:
		pthread_mutex_unlock(&reg->mu);
		break;
	}
	if (d != NULL)
		dgi_free(d);
	dg_buf_free(&def);
	return e;
}

dg_err dgi_register(dg_registry *reg, const dg_type_def *def, bool propose,
    const dg_desc **out)
{
	struct fdef f[DG_MAX_FIELDS];
	if (reg == NULL || def == NULL || def->name == NULL)
		return DG_ERR_INVAL;
	if (def->nfields > DG_MAX_FIELDS)
		return DG_ERR_LIMIT;
	if (def->nfields > 0 && def->fields == NULL)
		return DG_ERR_INVAL;
	for (uint32_t i = 0; i < def->nfields; i++) {
		const dg_field_def *fd = &def->fields[i];
		f[i].name = fd->name;
		f[i].name_len = fd->name ? strlen(fd->name) : 0;
		f[i].kind = fd->kind;
		f[i].elem = fd->elem;
		f[i].c_off = fd->offset;
		f[i].flags = (uint8_t)fd->flags;
		if (fd->flags > 0xFF)
			return DG_ERR_INVAL;
		f[i].ref_type = 0;
		if ((fd->kind == DG_OBJECT || fd->kind == DG_ENUM ||
		    (dgi_typed_list(fd->kind, fd->elem) && fd->elem == DG_OBJECT)) &&
		    fd->type_name)
			f[i].ref_type = dg_type_id(fd->type_name);
	}
	return dgi_register_fdefs(reg, def->name, strlen(def->name), f, def->nfields,
	    def->struct_size, propose, out);
}

dg_err dg_registry_register(dg_registry *reg, const dg_type_def *def,
    const dg_desc **out)
{
	return dgi_register(reg, def, true, out);
}

/* ---- exported definitions ---- */

#define DEF_VERSION 1

dg_err dg_desc_export(const dg_desc *d, dg_buf *out)
{
	size_t nl = strlen(d->name);
	size_t need = 1 + 10 + nl + 5;
	for (uint32_t i = 0; i < d->nfields; i++)
		need += 10 + strlen(d->fields[i].name) + 2 + 4;
	dg_err e = dg_buf_reserve(out, need);
	if (e != DG_OK)
		return e;
	uint8_t *p = out->data + out->len;
	*p++ = DEF_VERSION;
	p = dgi_put_uvarint(p, nl);
	memcpy(p, d->name, nl);
	p += nl;
	p = dgi_put_uvarint(p, d->nfields);
	for (uint32_t i = 0; i < d->nfields; i++) {
		const struct dgi_field *f = &d->fields[d->decl_to_layout[i]];
		size_t fl = strlen(f->name);
		p = dgi_put_uvarint(p, fl);
		memcpy(p, f->name, fl);
		p += fl;
		*p++ = f->kind;
		*p++ = f->elem;
		dgi_st32(p, f->ref_type);
		p += 4;
	}
	out->len = (size_t)(p - out->data);
	return DG_OK;
}

dg_err dg_registry_accept(dg_registry *reg, const uint8_t *def, size_t len,
    const dg_desc **out)
{
	struct fdef f[DG_MAX_FIELDS];
	uint64_t nl, n;
	dg_err e;
	if (reg == NULL || (def == NULL && len > 0))
		return DG_ERR_INVAL;
	if (len == 0) /* (before def + len: NULL + 0 is undefined, UBSan says) */
		return DG_ERR_TRUNCATED;
	const uint8_t *p = def, *end = def + len;
	if (*p++ != DEF_VERSION)
		return DG_ERR_BAD_TAG;
	if ((e = dgi_get_uvarint(&p, end, &nl)) != DG_OK)
		return e;
	if (nl > (uint64_t)(end - p))
		return DG_ERR_TRUNCATED;
	const char *name = (const char *)p;
	p += nl;
	if ((e = dgi_get_uvarint(&p, end, &n)) != DG_OK)
		return e;
	if (n > DG_MAX_FIELDS)
		return DG_ERR_LIMIT;
	if (n * 7 > (uint64_t)(end - p))
		return DG_ERR_COUNT;
	for (uint64_t i = 0; i < n; i++) {
		uint64_t fl;
		if ((e = dgi_get_uvarint(&p, end, &fl)) != DG_OK)
			return e;
		if (fl > (uint64_t)(end - p) || (uint64_t)(end - p) - fl < 6)
			return DG_ERR_TRUNCATED;
		f[i].name = (const char *)p;
		f[i].name_len = fl;
		p += fl;
		if (p[0] >= DG_KIND__COUNT || p[1] >= DG_KIND__COUNT)
			return DG_ERR_BAD_TAG;
		f[i].kind = (dg_kind)p[0];
		f[i].elem = (dg_kind)p[1];
		f[i].ref_type = dgi_ld32(p + 2);
		f[i].c_off = DG_UNBOUND;
		f[i].flags = 0;
		p += 6;
	}
	if (p != end)
		return DG_ERR_BAD_LENGTH;
	return dgi_register_fdefs(reg, name, nl, f, (uint32_t)n, 0, false, out);
}

/* ---- lifecycle ---- */

static const char *const builtin_names[DG_KIND__COUNT] = {
	[DG_BOOL] = "dg.Bool", [DG_I8] = "dg.I8", [DG_I16] = "dg.I16",
	[DG_I32] = "dg.I32", [DG_I64] = "dg.I64", [DG_FLOAT] = "dg.Float",
	[DG_DOUBLE] = "dg.Double", [DG_STRING] = "dg.String",
	[DG_BYTES] = "dg.Bytes", [DG_UUID] = "dg.Uuid",
	[DG_TIMESTAMP] = "dg.Timestamp", [DG_ENUM] = "dg.Enum",
	[DG_ARRAY] = "dg.Array", [DG_LIST] = "dg.List", [DG_SET] = "dg.Set",
	[DG_SORTED_SET] = "dg.SortedSet", [DG_MAP] = "dg.Map",
	[DG_SORTED_MAP] = "dg.SortedMap",
};

dg_err dg_registry_create(dg_registry **out)
{
	dg_registry *reg = dgi_calloc(1, sizeof(*reg));
	if (reg == NULL)
		return DG_ERR_NOMEM;
	struct dgi_table *t = table_new(64);
	if (t == NULL || pthread_mutex_init(&reg->mu, NULL) != 0) {
		dgi_free(t);
		dgi_free(reg);
		return DG_ERR_NOMEM;
	}
	if (pthread_cond_init(&reg->hook_cv, NULL) != 0) {
		pthread_mutex_destroy(&reg->mu);
		dgi_free(t);
		dgi_free(reg);
		return DG_ERR_NOMEM;
	}
	atomic_init(&reg->table, t);
	for (int k = 0; k < DG_KIND__COUNT; k++) {
		const char *name = builtin_names[k];
		dg_desc *d;
		if (name == NULL)
			continue;
		dg_err e = desc_build(reg, name, strlen(name), NULL, 0, 0,
		    (uint8_t)k, NULL, &d);
		if (e == DG_OK && (e = retire(reg, d)) != DG_OK)
			dgi_free(d);
		if (e == DG_OK) {
			d->state = DESC_REGISTERED;
			d->primary = 1;
			e = publish_type(reg, d);
		}
		if (e != DG_OK) {
			dg_registry_destroy(reg);
			return e;
		}
		reg->builtin[k] = d;
	}
	*out = reg;
	return DG_OK;
}

void dg_registry_destroy(dg_registry *reg)
{
	if (reg == NULL)
		return;
	struct dgi_retired *r = reg->retired;
	while (r != NULL) {
		struct dgi_retired *next = r->next;
		dgi_free(r->p);
		dgi_free(r);
		r = next;
	}
	dgi_free(atomic_load_explicit(&reg->table, memory_order_relaxed));
	pthread_cond_destroy(&reg->hook_cv);
	pthread_mutex_destroy(&reg->mu);
	dgi_free(reg);
}
