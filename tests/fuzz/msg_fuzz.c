/* msg_fuzz.c — libFuzzer target for what a peer's bytes reach first: the
 * frame header, every message type's body codec (transport, cache, txn
 * and the node's admin rows, installed as a node installs them), and the
 * two lists whose readers live outside the codecs and take hostile input
 * as they come: TOPOLOGY (dgi_member_topo_decode) and the entries of
 * TX_PREPARE / TX_COMMIT_COPY (dgi_txwire_get).
 *
 * Input byte 0 picks the mode (its low two bits), the rest is the peer's:
 *   0  byte 1 is a dg_msg_type, the rest its body: dg_msg_decode with the
 *      registry a transport passes and, when that accepts it, again with
 *      none (txn decodes so what it received);
 *   1  a stream of frames as a connection reads them: dgi_frame_get
 *      (byte 0's bit 4: the handshake's recv_max, else the default), each
 *      complete frame's body decoded as its type (or, with
 *      DG_FRAME_ERROR, as the dg_err an error response carries);
 *   2  a TOPOLOGY list;
 *   3  a TX_PREPARE body, then its entries one by one (as mode 0, with
 *      no registry once the transport's accepted it).
 * Each body is decoded into a heap block of exactly the row's body_size,
 * and read from a heap copy of exactly its length, so a codec that writes
 * past its struct or reads past the frame is an ASan report.
 *
 * A bug: any crash or sanitizer report, and these invariants (abort):
 *   - a body that decodes, and whose bytes dg_validate accepts, encodes
 *     again (dg_msg_encode), decodes from that encoding, and encodes to the
 *     same bytes a second time.  Gated on dg_validate because a list body
 *     (dg_msg_list_get) is only skipped on decode, its strings unchecked,
 *     while the encoder checks the list deeply (marshal's write_raw): a
 *     list with a bad string inside decodes and does not encode, as
 *     marshal is written (the handler reading the list checks it then);
 *   - a frame header that dgi_frame_get accepts is written back by
 *     dgi_frame_put to the same 24 bytes;
 *   - a decoded topology encodes (dgi_member_topo_encode) and decodes to
 *     the same topology, ordered by join order;
 *   - an entry dgi_txwire_get accepts is written by dgi_txwire_put and
 *     read back to the same entry;
 *   - an item of a batch list (UPDATE_ALL and the rest, TX_LOCK_ALL and
 *     its answer: mode 0 and 1 bodies that validate) that its reader
 *     accepts is written by its writer as a list of one, read back, and
 *     written to the same bytes.
 * Decode errors are fine: a peer sending garbage loses its connection. */
#include "fuzz_types.h"
#include "fuzz_node.h"
#include "transport/member_int.h"
#include "txn/txsvc.h"
#include "cache/cache_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static dg_registry *reg;            /* the "transport's" registry */
/* What txn decodes peer bytes with: no registry (txn/txwire.c and the handlers). */
static const dg_registry *const txn_reg = NULL;
static struct dg_member *member;    /* only its reg: all topo decode reads */

static void *dup_exact(const uint8_t *p, size_t n)
{
	uint8_t *c = malloc(n ? n : 1);
	if (c == NULL)
		abort();
	memcpy(c, p, n);
	return c;
}

/* One row of each layer, so a change that stops installing some does not
 * silently shrink what this target reaches. */
static void check_rows(void)
{
	static const int some[] = { DG_MSG_HELLO, 64, 128, 192 };
	for (size_t i = 0; i < sizeof(some) / sizeof(some[0]); i++)
		if (dg_msg_row_of((dg_msg_type)some[i]) == NULL) {
			fprintf(stderr, "msg_fuzz: no row for type %d\n", some[i]);
			abort();
		}
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	const dg_desc *person, *wide;
	if (dg_registry_create(&reg) != DG_OK || fz_register(reg, &person, &wide, NULL) != DG_OK)
		abort();
	fz_install_rows();
	check_rows();
	member = calloc(1, sizeof(*member));
	if (member == NULL)
		abort();
	member->reg = reg;
	return 0;
}

/* ---- bodies ---- */

static void encode_or_die(dg_msg_type type, const void *body, dg_buf *out)
{
	dg_writer w;
	dg_writer_init(&w, reg, out);
	dg_err e = dg_msg_encode(type, body, &w);
	if (e != DG_OK) {
		fprintf(stderr, "msg_fuzz: %s decoded but does not encode: %s\n",
		    dg_msg_name(type), dg_strerror(e));
		abort();
	}
}

/* decode -> encode -> decode -> encode: the two encodings are equal. */
static void reencode(dg_msg_type type, const dg_msg_row *row, const void *body)
{
	dg_buf a, b;
	dg_buf_init(&a);
	dg_buf_init(&b);
	encode_or_die(type, body, &a);
	void *again = malloc(row->body_size ? row->body_size : 1);
	if (again == NULL)
		abort();
	dg_err e = dg_msg_decode(type, reg, a.data, a.len, again);
	if (e != DG_OK) {
		fprintf(stderr, "msg_fuzz: %s: its own encoding does not decode: %s\n",
		    dg_msg_name(type), dg_strerror(e));
		abort();
	}
	encode_or_die(type, again, &b);
	if (a.len != b.len || (a.len > 0 && memcmp(a.data, b.data, a.len) != 0)) {
		fprintf(stderr, "msg_fuzz: %s: encodings differ\n", dg_msg_name(type));
		abort();
	}
	free(again);
	dg_buf_free(&a);
	dg_buf_free(&b);
}

/* ---- the cache's batch lists (cache/msgs.c item readers) ---- */

/* One item type: its values per item, and its reader and writer. */
struct item_kind {
	uint32_t values;
	dg_err (*get)(dg_reader *r, void *it);
	dg_err (*put)(dg_writer *w, const void *it);
};

static dg_err ball_get(dg_reader *r, void *it)
{
	return dgi_ball_item_get(r, 7, it);
}

#define KIND(v, name) { v, (dg_err (*)(dg_reader *, void *))dgi_##name##_item_get, \
	(dg_err (*)(dg_writer *, const void *))dgi_##name##_item_put }

static const struct item_kind *item_kind_of(dg_msg_type type)
{
	static const struct item_kind uall = KIND(4, uall), ures = KIND(3, ures),
	    back = KIND(3, back), gall = KIND(2, gall), gres = KIND(2, gres),
	    ball = { DGI_BALL_ITEM_VALUES, ball_get,
		(dg_err (*)(dg_writer *, const void *))dgi_ball_item_put };
	switch ((int)type) {
	case DGI_MSG_UPDATE_ALL: return &uall;
	case DGI_MSG_UPDATE_ALL_RES: return &ures;
	case DGI_MSG_BACKUP_ALL: return &ball;
	case DGI_MSG_BACKUP_ALL_ACK: return &back;
	case DGI_MSG_GET_ALL: return &gall;
	case DGI_MSG_GET_ALL_RES: return &gres;
	default: return NULL;
	}
}

/* An item written back as a list of one reads back, and writes the same
 * bytes again. */
static void item_roundtrip(const struct item_kind *k, const void *it)
{
	_Alignas(16) uint8_t again[sizeof(dgi_msg_backup)];
	dg_buf a, b;
	dg_buf_init(&a);
	dg_buf_init(&b);
	for (int pass = 0; pass < 2; pass++) {
		dg_buf *out = pass == 0 ? &a : &b;
		dg_writer w;
		dg_writer_init(&w, reg, out);
		dg_write_list_begin(&w, k->values);
		k->put(&w, pass == 0 ? it : again);
		dg_write_end(&w);
		dg_err e = dg_writer_finish(&w);
		dg_reader r;
		uint32_t count = 0;
		dg_reader_init(&r, reg, out->data, out->len);
		if (e == DG_OK)
			e = dg_read_begin(&r, DG_LIST, &count);
		if (e == DG_OK && pass == 0)
			e = k->get(&r, again);
		if (e != DG_OK || count != k->values) {
			fprintf(stderr, "msg_fuzz: a batch item does not round-trip: %s\n",
			    dg_strerror(e));
			abort();
		}
	}
	if (a.len != b.len || memcmp(a.data, b.data, a.len) != 0) {
		fprintf(stderr, "msg_fuzz: a batch item's encodings differ\n");
		abort();
	}
	dg_buf_free(&a);
	dg_buf_free(&b);
}

static dg_err txla_item_put(dg_writer *w, const void *it)
{
	return dgi_txla_item_put(w, it);
}

static dg_err txla_item_get(dg_reader *r, void *it)
{
	return dgi_txla_item_get(r, it);
}

static dg_err txla_res_put(dg_writer *w, const void *it)
{
	return dgi_txla_res_put(w, it);
}

static dg_err txla_res_get(dg_reader *r, void *it)
{
	return dgi_txla_res_get(r, it);
}

/* As the handlers read a batch message's list (many.c, read.c, batch.c;
 * txlock.c and txn.c for TX_LOCK_ALL): the list opened, then item after
 * item until one fails. */
static void many_items(dg_msg_type type, const void *body)
{
	static const struct item_kind txla = { DGI_TXLA_VALUES, txla_item_get, txla_item_put },
	    txlar = { DGI_TXLAR_VALUES, txla_res_get, txla_res_put };
	const struct item_kind *k = item_kind_of(type);
	dg_reader r;
	uint32_t n = 0;
	dg_err e = DG_ERR_INVAL;
	if (type == DGI_MSG_TX_LOCK_ALL) {
		k = &txla;
		e = dgi_txla_open(&((const dgi_msg_tx_lock_all *)body)->items, k->values, &r, &n);
	} else if (type == DGI_MSG_TX_LOCK_ALL_RES) {
		k = &txlar;
		e = dgi_txla_open(&((const dg_msg_raw *)body)->list, k->values, &r, &n);
	} else if (k != NULL) {
		e = dgi_many_open(reg, body, k->values, &r, &n);
	}
	if (e != DG_OK)
		return;
	if (n > DGI_MANY_MAX || n > DGI_TXLA_MAX)
		abort(); /* the openers' own promise */
	for (uint32_t i = 0; i < n; i++) {
		_Alignas(16) uint8_t it[sizeof(dgi_msg_backup)];
		if (k->get(&r, it) != DG_OK)
			return;
		item_roundtrip(k, it);
	}
}

static void body(dg_msg_type type, const uint8_t *data, size_t n)
{
	const dg_msg_row *row = dg_msg_row_of(type);
	if (row == NULL)
		return;
	uint8_t *p = dup_exact(data, n);
	void *out = malloc(row->body_size ? row->body_size : 1);
	if (out == NULL)
		abort();
	if (dg_msg_decode(type, reg, p, n, out) == DG_OK) {
		/* txn decodes again, without a registry, what the transport
		 * accepted (txwire.c: dgi_svc_ents_open; txlocal.c: roundtrip) */
		void *again = malloc(row->body_size ? row->body_size : 1);
		if (again == NULL)
			abort();
		(void)dg_msg_decode(type, txn_reg, p, n, again);
		free(again);
		if (n == 0 || dg_validate(reg, p, n) == DG_OK) {
			reencode(type, row, out);
			many_items(type, out);
		}
	}
	free(out);
	free(p);
}

/* ---- frames ---- */

/* An error response's body: one I32, a dg_err (transport's dispatch). */
static void error_body(const uint8_t *data, size_t n)
{
	uint8_t *p = dup_exact(data, n);
	dg_reader r;
	int32_t v;
	dg_reader_init(&r, reg, p, n);
	(void)dg_read_i32(&r, &v);
	free(p);
}

static void frames(const uint8_t *p, size_t n, size_t recv_max)
{
	while (n >= DG_FRAME_HEADER) {
		dg_frame_header h;
		uint8_t back[DG_FRAME_HEADER];
		if (dgi_frame_get(p, recv_max, &h) != DG_OK)
			return;
		dgi_frame_put(back, &h);
		if (memcmp(back, p, DG_FRAME_HEADER) != 0) {
			fprintf(stderr, "msg_fuzz: frame header does not write back\n");
			abort();
		}
		if (h.body_len > recv_max)
			abort(); /* dgi_frame_get's own promise */
		size_t need = DG_FRAME_HEADER + (size_t)h.body_len;
		if (n < need)
			return; /* the rest of the frame is still on its way */
		if (h.flags & DG_FRAME_ERROR)
			error_body(p + DG_FRAME_HEADER, h.body_len);
		else
			body((dg_msg_type)h.type, p + DG_FRAME_HEADER, h.body_len);
		p += need;
		n -= need;
	}
}

/* ---- TOPOLOGY ---- */

static bool same_topology(const dg_topology *a, const dg_topology *b)
{
	if (a->version != b->version || a->count != b->count ||
	    a->baseline_set != b->baseline_set || a->nbaseline != b->nbaseline)
		return false;
	for (uint32_t i = 0; i < a->count; i++)
		if (a->nodes[i].id != b->nodes[i].id || a->nodes[i].order != b->nodes[i].order ||
		    a->nodes[i].attrs != b->nodes[i].attrs ||
		    strcmp(a->nodes[i].url, b->nodes[i].url) != 0)
			return false;
	for (uint32_t i = 0; i < a->nbaseline; i++)
		if (strcmp(a->baseline[i], b->baseline[i]) != 0)
			return false;
	return true;
}

static void topology(const uint8_t *data, size_t n)
{
	uint8_t *p = dup_exact(data, n);
	dg_raw raw = { p, (uint32_t)n };
	dg_topology *t, *t2;
	if (n <= UINT32_MAX && dgi_member_topo_decode(member, &raw, &t) == DG_OK) {
		for (uint32_t i = 1; i < t->count; i++)
			if (t->nodes[i - 1].order > t->nodes[i].order)
				abort(); /* "ordered by order" */
		dg_buf b;
		dg_buf_init(&b);
		dg_err e = dgi_member_topo_encode(member, t, &b);
		dg_raw raw2 = { b.data, (uint32_t)b.len };
		if (e == DG_OK)
			e = dgi_member_topo_decode(member, &raw2, &t2);
		if (e != DG_OK) {
			fprintf(stderr, "msg_fuzz: a decoded topology does not round-trip: %s\n",
			    dg_strerror(e));
			abort();
		}
		if (!same_topology(t, t2)) {
			fprintf(stderr, "msg_fuzz: a decoded topology changes when sent on\n");
			abort();
		}
		dg_topology_release(t2);
		dg_buf_free(&b);
		dg_topology_release(t);
	}
	free(p);
}

/* ---- TX_PREPARE entries ---- */

static bool same_entry(const dgi_txwire_ent *a, const dgi_txwire_ent *b)
{
	return a->cache_id == b->cache_id && a->part == b->part && a->op == b->op &&
	    a->key.len == b->key.len && memcmp(a->key.ptr, b->key.ptr, a->key.len) == 0 &&
	    (a->val.ptr == NULL) == (b->val.ptr == NULL) && a->val.len == b->val.len &&
	    (a->val.len == 0 || memcmp(a->val.ptr, b->val.ptr, a->val.len) == 0) &&
	    a->ver.topver == b->ver.topver && a->ver.counter == b->ver.counter &&
	    a->ver.order == b->ver.order && a->expire_ms == b->expire_ms;
}

static void entry_roundtrip(const dgi_txwire_ent *en)
{
	dg_buf b;
	dg_writer w;
	dg_reader r;
	uint32_t count;
	dgi_txwire_ent back;
	dg_buf_init(&b);
	dg_writer_init(&w, dgi_txwire_registry(), &b);
	dg_write_list_begin(&w, DGI_TXWIRE_FIELDS);
	dgi_txwire_put(&w, en);
	dg_write_end(&w);
	dg_err e = dg_writer_finish(&w);
	dg_reader_init(&r, txn_reg, b.data, b.len);
	if (e == DG_OK)
		e = dg_read_begin(&r, DG_LIST, &count);
	if (e == DG_OK)
		e = dgi_txwire_get(&r, &back);
	if (e != DG_OK || !same_entry(en, &back)) {
		fprintf(stderr, "msg_fuzz: a tx entry does not round-trip: %s\n",
		    dg_strerror(e));
		abort();
	}
	dg_buf_free(&b);
}

static void tx_entries(const uint8_t *data, size_t n)
{
	uint8_t *p = dup_exact(data, n);
	dgi_msg_tx_prepare *m = malloc(sizeof(*m));
	dg_reader r;
	uint32_t count;
	if (m == NULL)
		abort();
	/* as the participant reads them (txwire.c, dgi_svc_ents_open) once the
	 * transport decoded the frame */
	if (dg_msg_decode(DGI_MSG_TX_PREPARE, reg, p, n, m) == DG_OK &&
	    dg_msg_decode(DGI_MSG_TX_PREPARE, txn_reg, p, n, m) == DG_OK) {
		dg_reader_init(&r, txn_reg, m->ents.ptr, m->ents.len);
		if (dg_read_begin(&r, DG_LIST, &count) == DG_OK &&
		    count % DGI_TXWIRE_FIELDS == 0) {
			for (uint32_t i = 0; i < count / DGI_TXWIRE_FIELDS; i++) {
				dgi_txwire_ent en;
				if (dgi_txwire_get(&r, &en) != DG_OK)
					break;
				entry_roundtrip(&en);
			}
		}
	}
	free(m);
	free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	const uint8_t *p = data + 1;
	size_t n = size - 1;
	switch (data[0] & 3) {
	case 0:
		if (n >= 1)
			body((dg_msg_type)p[0], p + 1, n - 1);
		break;
	case 1:
		frames(p, n, (data[0] & 0x10) ? DG_HANDSHAKE_MAX : 16u << 20);
		break;
	case 2:
		topology(p, n);
		break;
	default:
		tx_entries(p, n);
		break;
	}
	return 0;
}
