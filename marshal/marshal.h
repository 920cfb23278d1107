/*
 * marshal.h — datagrid's binary codec, and the project-wide basics every
 * module shares (the dg_err enum, the allocator wrapper, growable buffers).
 *
 * The codec writes and reads a self-describing, compact binary format
 * (documented byte by byte in marshal/FORMAT.md) built on *registered type
 * descriptors*:
 *
 *   - A user registers a type once (name + fields, optionally bound to a C
 *     struct by offsetof).  The registry builds its descriptor once, caches it
 *     in the REGISTERED state and never builds it again; built-in types (list,
 *     sorted map, ...) are pre-registered the same way when the registry is
 *     created.  dg_registry_stats().builds counts every build ever made.
 *   - Objects carry their type id (and schema id unless it is the type's
 *     primary schema) and a footer of field offsets: one field is read in O(1)
 *     without decoding the rest (dg_bobj_get).  A writer can opt in to the
 *     zero form (dg_writer_set_zero_form): fixed-width fields that are all
 *     zero left out behind a mask when that is shorter, as proto3 leaves
 *     out defaults; by default writers write the plain form, and decoders
 *     read both forms.
 *   - The descriptor precomputes what the struct encoder and decoder need
 *     (copy runs of the fixed area, the flat fast paths): see marshal_int.h.
 *   - Inside a LIST, SET or MAP (a "scope") each schema is written once and
 *     later objects refer to it by a one-byte scope-local index; the reader
 *     keeps the matching table, so it consults the registry once per schema
 *     per scope, never per object.
 *   - Decoding a C struct runs a flat loop over the descriptor's field table
 *     with one dense switch on the field kind: no indirect call per field.
 *   - Writers append to a caller-owned growable buffer that is reused;
 *     readers decode into caller structs with strings as zero-copy views or
 *     copies in a caller arena.  No heap allocation per write or read once
 *     buffers are warm.
 *   - Every decode treats its input as hostile: bounds-checked, depth-limited
 *     (DG_MAX_DEPTH), counts checked against the bytes left, UTF-8 validated,
 *     sorted containers checked for order; each failure is a distinct dg_err.
 *
 * Threads: a dg_registry is safe to use from many threads at once (lookups
 * take no lock; registrations serialize on a mutex).  dg_writer, dg_reader,
 * dg_builder and dg_buf are single-threaded objects: one thread at a time.
 *
 * Ownership: the caller owns every struct it passes in.  Zero-copy views
 * (dg_str, dg_bytes, dg_array, dg_raw, dg_bobj) point into the input buffer
 * (or into the caller's arena) and live as long as it does.  A dg_desc lives
 * as long as its registry.
 */
#ifndef DG_MARSHAL_H
#define DG_MARSHAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DG_API __attribute__((visibility("default")))

/* ------------------------------------------------------------------------
 * Errors — one enum for the whole project.  New codes are appended only.
 * ------------------------------------------------------------------------ */
typedef enum dg_err {
	DG_OK = 0,
	DG_ERR_NOMEM,          /* an allocation failed */
	DG_ERR_INVAL,          /* invalid argument */
	DG_ERR_NOSPACE,        /* a fixed buffer or arena is too small */
	DG_ERR_STATE,          /* call out of sequence (unbalanced containers, ...) */
	DG_ERR_LIMIT,          /* a documented limit was exceeded */
	DG_ERR_CONFLICT,       /* definition conflicts with a registered one */
	DG_ERR_REFUSED,        /* the registration hook refused a new type */
	DG_ERR_TRUNCATED,      /* decode: input ends inside a value */
	DG_ERR_BAD_TAG,        /* decode: unknown or misplaced tag byte */
	DG_ERR_BAD_LENGTH,     /* decode: a length or offset is inconsistent */
	DG_ERR_BAD_VARINT,     /* decode: varint overlong, overflowing or non-minimal */
	DG_ERR_DEPTH,          /* decode: nesting deeper than DG_MAX_DEPTH */
	DG_ERR_COUNT,          /* decode: element count larger than the bytes left */
	DG_ERR_UTF8,           /* decode: string is not valid UTF-8 */
	DG_ERR_ORDER,          /* sorted set/map keys not strictly increasing */
	DG_ERR_UNKNOWN_TYPE,   /* type id not registered */
	DG_ERR_UNKNOWN_SCHEMA, /* schema id (or scope index) not known for the type */
	DG_ERR_UNKNOWN_FIELD,  /* no field with that name or id */
	DG_ERR_TYPE_MISMATCH,  /* value has another kind/type than asked for */
	DG_ERR_RANGE,          /* value out of range for its target */
	/* transport */
	DG_ERR_TIMEOUT,        /* a bounded wait expired */
	DG_ERR_CLOSED,         /* the object was stopped or closed */
	DG_ERR_CONN_BROKEN,    /* the connection to a peer broke; outcome unknown */
	DG_ERR_BUSY,           /* a bounded queue is full */
	DG_ERR_UNREACHABLE,    /* no connection and no address for the peer */
	DG_ERR_AUTH,           /* authentication failed */
	DG_ERR_TLS,            /* TLS setup or verification failed */
	DG_ERR_NET,            /* network error (dial, listen, I/O) */
	DG_ERR_ADDRINUSE,      /* listen address already in use */
	DG_ERR_UNSUPPORTED,    /* no handler for the request's type */
	/* cache and node */
	DG_ERR_NOT_FOUND,      /* no such key, cache or node */
	DG_ERR_EXISTS,         /* a cache of that name exists with another config */
	DG_ERR_PARTITION_LOST, /* every copy of the key's partition is gone (reset it) */
	DG_ERR_REMAP,          /* sender mapped on another topology version: map again */
	DG_ERR_STORAGE,        /* persistent storage (LMDB) failed; the write was not applied */
	DG_ERR_STORAGE_FULL,   /* persistent storage is full (map size); the write was not applied */
	DG_ERR_NOT_READY,      /* the node is starting, leaving or rebalancing that partition */
	/* transactions */
	DG_ERR_DEADLOCK,       /* the tx was chosen the victim of a deadlock; it holds nothing */
	DG_ERR_TX_CONFLICT,    /* optimistic serializable: a key read changed before commit */
	DG_ERR_TX_ROLLED_BACK, /* the tx was rolled back (topology change, earlier failure) */
	DG_ERR_TX_UNKNOWN,     /* commit: outcome not learnt in time (all or nothing, either way) */
	/* membership */
	DG_ERR_SEGMENTED,      /* this node cannot reach a majority of the voting servers: it refuses at once */
	DG_ERR_STORAGE_DAMAGED, /* the persisted store failed its checks (logged: file, cache, partition, key) */
	DG_ERR__COUNT
} dg_err;

/* Name of an error ("DG_ERR_UTF8: invalid UTF-8").  Never NULL; static. */
DG_API const char *dg_strerror(dg_err err);

/* ------------------------------------------------------------------------
 * Allocator wrapper.  Every allocation of every module goes through these,
 * so tests and benchmarks can count allocations and fail the N-th one.
 * ------------------------------------------------------------------------ */
void *dgi_alloc(size_t n);               /* NULL on failure (or injected failure) */
void *dgi_calloc(size_t count, size_t n);
void *dgi_realloc(void *p, size_t n);    /* on failure p stays valid */
void dgi_free(void *p);

typedef struct dgi_alloc_stats {
	uint64_t allocs;   /* successful dgi_alloc/calloc/realloc calls */
	uint64_t frees;    /* dgi_free calls with a non-NULL pointer */
	uint64_t bytes;    /* bytes requested by successful calls */
	uint64_t failed;   /* calls that returned NULL */
} dgi_alloc_stats;

void dgi_alloc_get_stats(dgi_alloc_stats *out);
/* Make the n-th allocation from now fail (1 = the next one); 0 disables. */
void dgi_alloc_fail_nth(uint64_t n);

/* ------------------------------------------------------------------------
 * Logging (log.c): the one log of the whole library.  A line is one event:
 *   ts=<UTC, ms> level=<debug|info|warn|error> id=<STABLE-ID> key=value ...
 * written to stderr with one call, or handed to the program's sink.  The
 * sink and the minimum level are process-wide (every node of a process
 * shares them).
 * ------------------------------------------------------------------------ */
typedef enum dg_log_level {
	DG_LOG_DEBUG = 1,
	DG_LOG_INFO = 2,
	DG_LOG_WARN = 3,
	DG_LOG_ERROR = 4
} dg_log_level;

/* A sink: gets each line at or above the minimum level — its level, its
 * id ("TOPOLOGY") and the whole line as stderr would have it, without the
 * newline.  Called from any of the library's threads, one line at a time
 * (under the log's lock): it must not log through dg_log itself, nor call
 * into a node. */
typedef void (*dg_log_fn)(void *ctx, dg_log_level level, const char *id, const char *line);

/* Routes the log: fn NULL writes to stderr (the default); min: the least
 * severe level written (default DG_LOG_INFO; 0 keeps the current one).
 * Thread-safe; takes effect for the next line. */
DG_API void dg_log_configure(dg_log_fn fn, void *ctx, dg_log_level min);
/* Writes one line in the library's format (for programs that want their
 * own lines beside the library's, as dgnode does).  id: uppercase letters,
 * digits and '-'; fmt: the key=value fields. */
DG_API void dg_log(dg_log_level level, const char *id, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Whether a line at level would be written now. */
DG_API bool dg_log_enabled(dg_log_level level);

/* The library's own calls: marshal/log_int.h. */

/* ------------------------------------------------------------------------
 * Growable byte buffer, owned by the caller and reused across writes.
 * ------------------------------------------------------------------------ */
typedef struct dg_buf {
	uint8_t *data;
	size_t len;
	size_t cap;
	unsigned flags; /* private */
} dg_buf;

/* An empty buffer that grows with dgi_realloc. */
DG_API void dg_buf_init(dg_buf *b);
/* A buffer over caller memory that never grows; overflow is DG_ERR_NOSPACE. */
DG_API void dg_buf_init_fixed(dg_buf *b, void *mem, size_t cap);
/* Ensure room for `extra` more bytes.  DG_ERR_NOMEM, DG_ERR_NOSPACE. */
DG_API dg_err dg_buf_reserve(dg_buf *b, size_t extra);
/* Frees the memory of a growable buffer; the buffer is empty afterwards. */
DG_API void dg_buf_free(dg_buf *b);
static inline void dg_buf_reset(dg_buf *b) { b->len = 0; }

/* Bump arena in caller memory: decoded strings/bytes/arrays are copied here
 * when an arena is given.  Never grows; full is DG_ERR_NOSPACE. */
typedef struct dg_arena {
	uint8_t *mem;
	size_t cap;
	size_t used;
	bool views;    /* dg_arena_init_views: strings, bytes, arrays and raw
	                  values stay views into the input; only what has no
	                  place there (list elements, pointed-to objects) is
	                  put in the arena */
} dg_arena;
static inline void dg_arena_init(dg_arena *a, void *mem, size_t cap)
{
	a->mem = (uint8_t *)mem;
	a->cap = cap;
	a->used = 0;
	a->views = false;
}
/* An arena for decodes whose input outlives the decoded structs: nothing
 * that can point into the input is copied. */
static inline void dg_arena_init_views(dg_arena *a, void *mem, size_t cap)
{
	dg_arena_init(a, mem, cap);
	a->views = true;
}
static inline void dg_arena_reset(dg_arena *a) { a->used = 0; }

/* ------------------------------------------------------------------------
 * Value kinds and their C representations.
 * ------------------------------------------------------------------------ */
typedef enum dg_kind {
	DG_NULL = 0,
	DG_BOOL,        /* bool */
	DG_I8,          /* int8_t */
	DG_I16,         /* int16_t */
	DG_I32,         /* int32_t */
	DG_I64,         /* int64_t */
	DG_FLOAT,       /* float */
	DG_DOUBLE,      /* double */
	DG_STRING,      /* dg_str, UTF-8 */
	DG_BYTES,       /* dg_bytes */
	DG_UUID,        /* dg_uuid */
	DG_TIMESTAMP,   /* dg_timestamp */
	DG_ENUM,        /* int32_t ordinal (>= 0); the enum's type named by the field */
	DG_ARRAY,       /* dg_array of one primitive kind (BOOL..DOUBLE) */
	DG_LIST,        /* containers: bound as dg_raw (one encoded value) */
	DG_SET,
	DG_SORTED_SET,
	DG_MAP,
	DG_SORTED_MAP,
	DG_OBJECT,      /* field: embedded struct of a registered type */
	DG_ANY,         /* field: any value, bound as dg_raw; dg_value: v.raw */
	DG_KIND__COUNT
} dg_kind;

typedef struct dg_str {
	const char *ptr; /* NULL for a null string; not NUL-terminated as a view */
	uint32_t len;
} dg_str;

typedef struct dg_bytes {
	const uint8_t *ptr; /* NULL for null */
	uint32_t len;
} dg_bytes;

typedef struct dg_uuid {
	uint8_t b[16];
} dg_uuid;

typedef struct dg_timestamp {
	int64_t ms; /* milliseconds since the Unix epoch */
	int32_t ns; /* extra nanoseconds within the millisecond, 0..999999 */
} dg_timestamp;

/* An array of primitives.  As a decoded view `ptr` may be unaligned (it
 * points into the input): read it with dg_array_get_*().  Copies made into an
 * arena are aligned. */
typedef struct dg_array {
	const void *ptr; /* NULL for null */
	uint32_t count;
} dg_array;

/* One complete encoded value (tag included). ptr NULL = null. */
typedef struct dg_raw {
	const uint8_t *ptr;
	uint32_t len;
} dg_raw;

/* A LIST, SET or MAP field bound to a C array (DG_FIELD_LIST): count items
 * at ptr.  A list's or set's item is the C binding of the element kind — an
 * object type's struct (its struct_size apart), dg_str, dg_bytes, or a
 * native scalar (bool, int8_t .. int64_t, float, double); a map's item is
 * an entry, the C struct { dg_str key; V value; } with V that binding (keys
 * are strings, never null).  ptr NULL is a null collection; a decoded empty
 * one has a non-NULL ptr.  Decoded items live in the arena. */
typedef struct dg_list {
	void *ptr;
	uint32_t count;
} dg_list;

DG_API int64_t dg_array_get_int(const dg_array *a, dg_kind elem, uint32_t i);
DG_API double dg_array_get_double(const dg_array *a, dg_kind elem, uint32_t i);

/* ------------------------------------------------------------------------
 * Type definitions, descriptors and the registry.
 * ------------------------------------------------------------------------ */
#define DG_MAX_DEPTH 64    /* nesting limit for every decoder */
#define DG_MAX_FIELDS 256  /* fields per type */
#define DG_SCOPE_MAX 64    /* schemas live in scope tables at once */
#define DG_UNBOUND UINT32_MAX

/* dg_field_def.flags: how a field is bound to the C struct (not on the
 * wire, not part of the exported definition). */
#define DG_FF_PTR 1u  /* DG_OBJECT: a pointer to the struct (NULL = null),
                         not the struct embedded; decoded into the arena */

typedef struct dg_field_def {
	const char *name;      /* UTF-8; field id = dg_field_id(name) */
	dg_kind kind;          /* not DG_NULL */
	dg_kind elem;          /* DG_ARRAY: element kind (DG_BOOL..DG_DOUBLE);
	                          DG_LIST / DG_SET / DG_MAP: DG_NULL (bound
	                          as dg_raw), or the element (map value) kind
	                          of a dg_list binding: DG_OBJECT, DG_STRING,
	                          DG_BYTES, DG_BOOL..DG_DOUBLE */
	const char *type_name; /* DG_OBJECT, and collections of DG_OBJECT: the
	                          registered type of the struct; DG_ENUM: the
	                          enum's type name */
	uint32_t offset;       /* offsetof() in the bound struct, or DG_UNBOUND */
	uint32_t flags;        /* DG_FF_* */
} dg_field_def;

#define DG_FIELD(st, member, kind) \
	{ #member, kind, DG_NULL, NULL, (uint32_t)offsetof(st, member), 0 }
#define DG_FIELD_ARRAY(st, member, elemkind) \
	{ #member, DG_ARRAY, elemkind, NULL, (uint32_t)offsetof(st, member), 0 }
#define DG_FIELD_TYPED(st, member, kind, tname) \
	{ #member, kind, DG_NULL, tname, (uint32_t)offsetof(st, member), 0 }
/* A dg_list member: kind DG_LIST, DG_SET or DG_MAP (string keys), elements
 * or map values of elemkind (tname: their type for DG_OBJECT, else NULL).
 * Written in one pass as one LIST / SET / MAP value whose objects share one
 * schema definition (DEF, then REFs); decoded in one pass, items into the
 * arena. */
#define DG_FIELD_LIST(st, member, kind, elemkind, tname) \
	{ #member, kind, elemkind, tname, (uint32_t)offsetof(st, member), 0 }
/* A pointer member `T *` to a struct of registered type tname. */
#define DG_FIELD_OBJ_PTR(st, member, tname) \
	{ #member, DG_OBJECT, DG_NULL, tname, (uint32_t)offsetof(st, member), \
	  DG_FF_PTR }

typedef struct dg_type_def {
	const char *name;            /* type id = dg_type_id(name) */
	const dg_field_def *fields;  /* declaration order = primary schema */
	uint32_t nfields;
	size_t struct_size;          /* sizeof the bound struct; 0: not bound */
} dg_type_def;

typedef struct dg_registry dg_registry;
typedef struct dg_desc dg_desc;

/* Stable 32-bit ids: FNV-1a of the UTF-8 name (never 0; see FORMAT.md). */
DG_API uint32_t dg_type_id(const char *name);
DG_API uint32_t dg_field_id(const char *name);

/* Creates a registry with every built-in type pre-registered.
 * *out is owned by the caller (dg_registry_destroy).  DG_ERR_NOMEM. */
DG_API dg_err dg_registry_create(dg_registry **out);
DG_API void dg_registry_destroy(dg_registry *reg);

/* Registers a type: builds its descriptor once and publishes it REGISTERED.
 * Registering an identical definition again returns the same descriptor
 * without building; binding a C struct to a type accepted unbound (from the
 * cluster) builds one bound descriptor.  *out (optional) lives as long as reg.
 * Errors: DG_ERR_INVAL (bad names, offsets, kinds), DG_ERR_LIMIT (fields),
 * DG_ERR_CONFLICT (type id taken by another definition, or two fields with one
 * id), DG_ERR_UNKNOWN_TYPE (DG_OBJECT field of an unregistered type),
 * DG_ERR_REFUSED or the hook's error, DG_ERR_NOMEM. */
DG_API dg_err dg_registry_register(dg_registry *reg, const dg_type_def *def,
    const dg_desc **out);

/* Lock-free lookups; NULL when unknown. find() returns the primary schema. */
DG_API const dg_desc *dg_registry_find(const dg_registry *reg, uint32_t type_id);
DG_API const dg_desc *dg_registry_find_schema(const dg_registry *reg,
    uint32_t type_id, uint32_t schema_id);

/* Every registered schema of every user type (built-ins excluded), in no
 * particular order: up to cap descriptors into out; returns how many there
 * are.  Lock-free; a registration racing with it may or may not be seen. */
DG_API size_t dg_registry_list(const dg_registry *reg, const dg_desc **out,
    size_t cap);

typedef struct dg_registry_stats {
	uint64_t builds;  /* descriptors ever built (built-ins included) */
	uint64_t types;   /* registered type ids */
	uint64_t schemas; /* registered schemas (>= types) */
} dg_registry_stats;
DG_API void dg_registry_get_stats(const dg_registry *reg, dg_registry_stats *out);

/* Registration hook: called with the new descriptor and its exported
 * definition before a type or schema registered locally becomes usable (not
 * for dg_registry_accept).  Anything but DG_OK refuses the registration, and
 * that error is returned to the registering caller.  Called without registry
 * locks held, from the registering thread; it may call dg_registry_accept. */
typedef dg_err (*dg_propose_fn)(void *ctx, const dg_desc *desc,
    const uint8_t *def, size_t len);
/* Installs fn (NULL: none) with ctx, and returns once no call of the hook
 * it replaces is still running: from then on the old ctx is not touched
 * and may be freed.  It waits as long as such a call takes; not from the
 * hook itself (that would wait for itself).  Thread-safe. */
DG_API void dg_registry_set_hook(dg_registry *reg, dg_propose_fn fn, void *ctx);

/* Appends a descriptor's definition (name, fields; no C binding) to out. */
DG_API dg_err dg_desc_export(const dg_desc *d, dg_buf *out);
/* Registers a definition proposed elsewhere (bytes from dg_desc_export),
 * unbound, without calling the hook.  Same errors as register, plus decode
 * errors for malformed definition bytes. */
DG_API dg_err dg_registry_accept(dg_registry *reg, const uint8_t *def,
    size_t len, const dg_desc **out);

typedef struct dg_field_info {
	const char *name;
	uint32_t id;
	dg_kind kind;
	dg_kind elem;
	uint32_t type_id; /* DG_OBJECT / DG_ENUM: referenced type */
} dg_field_info;

DG_API uint32_t dg_desc_type_id(const dg_desc *d);
DG_API uint32_t dg_desc_schema_id(const dg_desc *d);
DG_API const char *dg_desc_name(const dg_desc *d);
DG_API uint32_t dg_desc_nfields(const dg_desc *d);
/* Field i in declaration order. DG_ERR_INVAL when out of range. */
DG_API dg_err dg_desc_field(const dg_desc *d, uint32_t i, dg_field_info *out);
DG_API bool dg_desc_is_registered(const dg_desc *d);

/* ------------------------------------------------------------------------
 * Writer.  Appends to a dg_buf.  Errors are sticky: after the first error
 * every call returns it and writes nothing; dg_writer_finish() reports it.
 * The value that failed may have left part of itself in the buffer: a
 * caller that reuses the buffer rolls buf->len back to where it started.
 * ------------------------------------------------------------------------ */
struct dgi_wframe {
	const dg_desc *f_desc;   /* built-in descriptor of the container */
	uint32_t f_left;         /* values still to write */
	uint32_t f_base;         /* scope table base (UINT32_MAX: no scope) */
	uint32_t f_key;          /* sorted: offset of the key being written */
	uint32_t f_prev;         /* sorted: offset of the previous key */
	uint32_t f_prevlen;      /* sorted: its length (0: none yet) */
	uint64_t f_pfx;          /* sorted: previous key's 8-byte prefix, if a
	                            short string/bytes (f_pfxtag != 0) */
	uint8_t f_pfxtag;
	uint8_t f_kind;
};

typedef struct dg_writer {   /* fields are private */
	dg_buf *w_buf;
	const dg_registry *w_reg;
	dg_err w_err;
	uint32_t w_depth;
	uint32_t w_nsch;
	bool w_zero;             /* dg_writer_set_zero_form: off by default */
	const dg_desc *w_sch[DG_SCOPE_MAX];
	struct dgi_wframe w_stack[DG_MAX_DEPTH];
} dg_writer;

/* Starts writing at the end of buf.  reg is needed for objects and built-in
 * container types; both must outlive the writer.  The writer starts in the
 * plain form (dg_writer_set_zero_form off). */
DG_API void dg_writer_init(dg_writer *w, const dg_registry *reg, dg_buf *buf);
/* Forgets scope state and errors (the buffer is untouched; the zero-form
 * mode stays as it was set). */
DG_API void dg_writer_reset(dg_writer *w);
/* The zero form (FORMAT.md "Zero form"), opt-in per writer.  on: every
 * object this writer writes from now on — dg_write_object, dg_write_objects,
 * the objects nested in their fields, pointers, lists and maps, and
 * dg_builder_write into this writer — leaves out its all-zero fixed fields
 * behind a mask when that is shorter (OBJ_Z/OBJ_SZ/DEF_Z/DEF_SZ/REF_Z);
 * off (the default, and after dg_writer_init): the plain form, byte for
 * byte what writers wrote before the zero form existed.  Decoders read
 * both forms whatever the mode.
 *
 * Why it is off by default: a key's partition is a hash of its bytes, so
 * if the default writer changed how a key with a zero fixed field is
 * encoded, keys persisted (LMDB) or held by nodes and clients of an
 * earlier build would no longer be found; and earlier builds cannot read
 * the zero-form tags at all.  Turn it on for values, and for keys only if
 * every writer of that cache's keys turns it on.  The node's own messages
 * and the cache's key encodings always use the plain form.
 *
 * Free when off: one predictable branch per object.  Thread safety: as any
 * call on w (one thread at a time).  No error; w must be initialised.
 * dg_write_value of an object value copies its body as it is, in whichever
 * form it was written. */
DG_API void dg_writer_set_zero_form(dg_writer *w, bool on);
/* DG_OK if every container was completed and no error happened; else the
 * first error (DG_ERR_STATE for an unfinished container). */
DG_API dg_err dg_writer_finish(dg_writer *w);

DG_API dg_err dg_write_null(dg_writer *w);
DG_API dg_err dg_write_bool(dg_writer *w, bool v);
DG_API dg_err dg_write_i8(dg_writer *w, int8_t v);
DG_API dg_err dg_write_i16(dg_writer *w, int16_t v);
DG_API dg_err dg_write_i32(dg_writer *w, int32_t v);
DG_API dg_err dg_write_i64(dg_writer *w, int64_t v);
DG_API dg_err dg_write_float(dg_writer *w, float v);
DG_API dg_err dg_write_double(dg_writer *w, double v);
/* s must be valid UTF-8 (checked: DG_ERR_UTF8); s == NULL writes null. */
DG_API dg_err dg_write_str(dg_writer *w, const char *s, size_t len);
DG_API dg_err dg_write_bytes(dg_writer *w, const void *p, size_t len);
DG_API dg_err dg_write_uuid(dg_writer *w, const dg_uuid *u);
DG_API dg_err dg_write_timestamp(dg_writer *w, dg_timestamp ts); /* ns range: DG_ERR_RANGE */
DG_API dg_err dg_write_enum(dg_writer *w, uint32_t type_id, int32_t ordinal);
/* elem: DG_BOOL..DG_DOUBLE; data holds count native values (bool: 1 byte). */
DG_API dg_err dg_write_array(dg_writer *w, dg_kind elem, const void *data,
    uint32_t count);

/* Containers: begin with the element count (maps: entry count), write that
 * many values (maps: key, value, key, value...), then dg_write_end.  Sorted
 * containers need strictly increasing keys in the order of FORMAT.md
 * ("Canonical order"): DG_ERR_ORDER otherwise. */
DG_API dg_err dg_write_list_begin(dg_writer *w, uint32_t count);
DG_API dg_err dg_write_set_begin(dg_writer *w, uint32_t count);
DG_API dg_err dg_write_sorted_set_begin(dg_writer *w, uint32_t count);
DG_API dg_err dg_write_map_begin(dg_writer *w, uint32_t entries);
DG_API dg_err dg_write_sorted_map_begin(dg_writer *w, uint32_t entries);
DG_API dg_err dg_write_end(dg_writer *w);

/* Writes the C struct at obj with descriptor d (which must be bound), and
 * the objects nested in it, in the plain form or, if w's mode is on, the
 * zero form where it is shorter (dg_writer_set_zero_form). */
DG_API dg_err dg_write_object(dg_writer *w, const dg_desc *d, const void *obj);
/* Writes count structs of an array (stride bytes apart, stride >=
 * sizeof the struct) as count consecutive values — the elements of a list
 * or a page — in one call.  Same bytes as count dg_write_object calls. */
DG_API dg_err dg_write_objects(dg_writer *w, const dg_desc *d,
    const void *objs, size_t stride, uint32_t count);

/* ------------------------------------------------------------------------
 * Values, readers and binary objects.
 * ------------------------------------------------------------------------ */

/* A binary object: a view of one encoded object whose fields are read in
 * O(1) each.  Valid while the bytes it points into are. */
typedef struct dg_bobj {
	const dg_desc *desc;   /* its schema */
	const uint8_t *body;   /* field area + footer */
	uint32_t len;          /* body length */
	bool zero;             /* the body is in zero form (FORMAT.md): its
	                          fixed fields that are all zero are left out */
} dg_bobj;

typedef struct dg_value {
	dg_kind kind;
	union {
		bool b;
		int64_t i;       /* I8..I64 */
		float f;
		double d;
		dg_str str;
		dg_bytes bytes;
		dg_uuid uuid;
		dg_timestamp ts;
		struct { uint32_t type_id; int32_t ordinal; } en;
		struct { dg_array a; dg_kind elem; } arr;
		/* containers: count (maps: entries); raw = whole encoding when
		 * known (dg_bobj_get), raw.ptr NULL from dg_read_next */
		struct { uint32_t count; dg_raw raw; } coll;
		dg_bobj obj;
		dg_raw raw;      /* DG_ANY: one complete encoded value */
	} v;
} dg_value;

struct dgi_rframe {
	uint32_t f_left;  /* values still to read in this container */
	uint32_t f_base;  /* scope table base (UINT32_MAX: no scope) */
};

typedef struct dg_reader {   /* fields are private */
	const uint8_t *r_p;
	const uint8_t *r_end;
	const dg_registry *r_reg;
	uint64_t r_lookups;      /* registry lookups made (tests/benchmarks) */
	uint32_t r_depth;
	uint32_t r_nsch;
	const dg_desc *r_sch[DG_SCOPE_MAX];
	struct dgi_rframe r_stack[DG_MAX_DEPTH];
} dg_reader;

/* reg NULL: a registry that knows no type (an object, DEF or REF is
 * DG_ERR_UNKNOWN_TYPE). */
DG_API void dg_reader_init(dg_reader *r, const dg_registry *reg,
    const void *data, size_t len);
/* Bytes not consumed yet. */
DG_API size_t dg_reader_left(const dg_reader *r);
/* Schemas this reader resolved: one per DEF/OBJ/OBJ_S tag (from the registry,
 * or from the descriptor the caller named in dg_read_object); a REF costs
 * none.  A stream of N objects of one type costs 1, not N. */
DG_API uint64_t dg_reader_lookups(const dg_reader *r);

/* Reads the next value in document order.  Scalars are decoded (strings and
 * bytes as views); a container yields its kind and count and its elements
 * follow in later calls; an object yields a dg_bobj (its body is skipped, its
 * footer checked).  Errors: every decode error; DG_ERR_STATE at the end. */
DG_API dg_err dg_read_next(dg_reader *r, dg_value *out);
/* Skips the next value whole (containers with everything in them). */
DG_API dg_err dg_read_skip(dg_reader *r);

/* Typed helpers over dg_read_next: DG_ERR_TYPE_MISMATCH for another kind,
 * DG_ERR_RANGE for an integer that does not fit.  Integer readers accept any
 * integer kind. */
DG_API dg_err dg_read_i64(dg_reader *r, int64_t *out);
DG_API dg_err dg_read_i32(dg_reader *r, int32_t *out);
DG_API dg_err dg_read_double(dg_reader *r, double *out);
DG_API dg_err dg_read_bool(dg_reader *r, bool *out);
/* arena NULL: view into the input; else a NUL-terminated copy in the arena. */
DG_API dg_err dg_read_str(dg_reader *r, dg_str *out, dg_arena *arena);
DG_API dg_err dg_read_bytes(dg_reader *r, dg_bytes *out, dg_arena *arena);
/* Container begin: *count = elements (maps: entries); kind must match. */
DG_API dg_err dg_read_begin(dg_reader *r, dg_kind kind, uint32_t *count);

/* Reads the next value, an object of d's type (any registered schema of it),
 * into the C struct at out (d must be bound).  Strings, bytes and arrays are
 * views, or copies in arena when given (views still with an arena made by
 * dg_arena_init_views); DG_OBJECT fields decode recursively, into the struct
 * or (DG_FF_PTR) into the arena; dg_list fields put their items in the
 * arena.  A null value zeroes the struct.  Errors: decode errors,
 * DG_ERR_TYPE_MISMATCH, DG_ERR_NOSPACE (arena full, or none where a list or
 * pointed-to object needs one). */
DG_API dg_err dg_read_object(dg_reader *r, const dg_desc *d, void *out,
    dg_arena *arena);

/* Reads count consecutive objects of d's type into an array of structs
 * (stride bytes apart), as count dg_read_object calls would; stops at the
 * first error, with the objects before it read. */
DG_API dg_err dg_read_objects(dg_reader *r, const dg_desc *d, void *out,
    size_t stride, uint32_t count, dg_arena *arena);

/* Decodes one object of d's type from a standalone encoding (a whole buffer
 * written by a fresh writer with one dg_write_object), in either form. */
DG_API dg_err dg_decode_object(const dg_registry *reg, const dg_desc *d,
    const void *data, size_t len, void *out, dg_arena *arena);

/* Validates a whole buffer of one or more values deeply (every string, every
 * nested object field, order of sorted containers).  DG_OK or the error. */
DG_API dg_err dg_validate(const dg_registry *reg, const void *data, size_t len);

/* Canonical order of two complete encoded values (FORMAT.md): <0, 0, >0. */
DG_API int dg_value_cmp(const uint8_t *a, size_t alen, const uint8_t *b,
    size_t blen);

/* Opens a standalone encoded object (a top-level OBJ/OBJ_S tag). */
DG_API dg_err dg_bobj_open(const dg_registry *reg, const void *data, size_t len,
    dg_bobj *out);
/* One field in O(1).  Scalars decoded, strings/bytes/arrays as views, objects
 * as dg_bobj, containers as kind + count + raw.  A field of the type that
 * this schema lacks reads as DG_NULL; DG_ERR_UNKNOWN_FIELD if the type has
 * no such field at all. */
DG_API dg_err dg_bobj_get(const dg_bobj *o, uint32_t field_id, dg_value *out);
DG_API dg_err dg_bobj_get_name(const dg_bobj *o, const char *name,
    dg_value *out);
DG_API uint32_t dg_bobj_type_id(const dg_bobj *o);

/* Writes a value: scalars; DG_ANY (v.raw, validated); DG_OBJECT (v.obj, its
 * body copied as is).  Containers are written with begin/end instead. */
DG_API dg_err dg_write_value(dg_writer *w, const dg_value *v);

/* ------------------------------------------------------------------------
 * Builder: builds binary objects field by field — new objects of a type
 * without a C struct (the schema is registered on first use, through the
 * hook), or a copy of an existing object with some fields rewritten.
 * ------------------------------------------------------------------------ */
typedef struct dg_builder dg_builder;

/* A builder for objects of type `type_name` (registered or not).
 * *out owned by the caller (dg_builder_destroy).  DG_ERR_NOMEM, DG_ERR_INVAL. */
DG_API dg_err dg_builder_create(dg_registry *reg, const char *type_name,
    dg_builder **out);
DG_API void dg_builder_destroy(dg_builder *b);
/* Clears all fields (keeps the type and its memory). */
DG_API void dg_builder_clear(dg_builder *b);
/* Loads every field of o (same type as the builder): DG_ERR_TYPE_MISMATCH. */
DG_API dg_err dg_builder_load(dg_builder *b, const dg_bobj *o);
/* Sets a field (adds it when new).  v's views must stay valid until the
 * object is written.  A DG_NULL value on a new field is DG_ERR_INVAL (its
 * kind is unknown); DG_ERR_TYPE_MISMATCH if the field has another kind. */
DG_API dg_err dg_builder_set(dg_builder *b, const char *name, const dg_value *v);
DG_API dg_err dg_builder_remove(dg_builder *b, const char *name);
/* Writes the object.  Finds the schema of this field set, or builds and
 * registers it (once) via dg_registry_register's rules.  Follows w's
 * zero-form mode (dg_writer_set_zero_form): the same bytes as
 * dg_write_object of the same values into a writer in the same mode. */
DG_API dg_err dg_builder_write(dg_builder *b, dg_writer *w);

#ifdef __cplusplus
}
#endif
#endif /* DG_MARSHAL_H */
