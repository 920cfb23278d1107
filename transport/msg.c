/* msg.c — the frame header and the message table: one row per dg_msg_type
 * (name, body codec), transport's own bodies, and the codecs' entry points.
 *
 * Codecs write each body's fields with marshal's primitives in a fixed
 * order: no descriptor, no lookup, no allocation.  Decoders read views into
 * the frame (strings and bytes are not copied). */
#include "transport_int.h"

#include <stddef.h>
#include <string.h>

/* ---- frame header ---- */

void dgi_frame_put(uint8_t *p, const dg_frame_header *h)
{
	p[0] = h->version;
	p[1] = h->flags;
	p[2] = (uint8_t)h->type;
	p[3] = (uint8_t)(h->type >> 8);
	memcpy(p + 4, &h->body_len, 4);
	memcpy(p + 8, &h->corr, 8);
	memcpy(p + 16, &h->sender, 8);
}

dg_err dgi_frame_get(const uint8_t *p, size_t recv_max, dg_frame_header *h)
{
	h->version = p[0];
	h->flags = p[1];
	h->type = (uint16_t)(p[2] | p[3] << 8);
	memcpy(&h->body_len, p + 4, 4);
	memcpy(&h->corr, p + 8, 8);
	memcpy(&h->sender, p + 16, 8);
	if (h->version != DG_FRAME_VERSION || (h->flags & ~DG_FRAME_FLAGS_KNOWN) != 0 ||
	    h->type >= DG_MSG__COUNT)
		return DG_ERR_BAD_TAG;
	if (h->body_len > recv_max)
		return DG_ERR_LIMIT;
	return DG_OK;
}

/* ---- codecs of transport's messages ---- */

#define W(x)                                  \
	do {                                      \
		dg_err e_ = (x);                      \
		if (e_ != DG_OK)                      \
			return e_;                        \
	} while (0)

static dg_err read_fixed(dg_reader *r, dg_bytes *b, uint32_t len)
{
	W(dg_read_bytes(r, b, NULL));
	return b->ptr != NULL && b->len == len ? DG_OK : DG_ERR_BAD_LENGTH;
}

static dg_err read_i64(dg_reader *r, int64_t *v) { return dg_read_i64(r, v); }

static dg_err enc_hello(dg_writer *w, const void *body)
{
	const dg_msg_hello *m = body;
	W(dg_write_i32(w, m->version));
	W(dg_write_str(w, m->cluster.ptr, m->cluster.len));
	W(dg_write_i64(w, m->node_id));
	W(dg_write_str(w, m->address.ptr, m->address.len));
	W(dg_write_bytes(w, m->nonce.ptr, m->nonce.len));
	return dg_write_bool(w, m->auth);
}

static dg_err dec_hello(dg_reader *r, void *body)
{
	dg_msg_hello *m = body;
	W(dg_read_i32(r, &m->version));
	W(dg_read_str(r, &m->cluster, NULL));
	W(read_i64(r, &m->node_id));
	W(dg_read_str(r, &m->address, NULL));
	W(read_fixed(r, &m->nonce, DG_NONCE_LEN));
	return dg_read_bool(r, &m->auth);
}

static dg_err enc_challenge(dg_writer *w, const void *body)
{
	const dg_msg_challenge *m = body;
	W(dg_write_i64(w, m->node_id));
	W(dg_write_bytes(w, m->nonce.ptr, m->nonce.len));
	W(dg_write_bool(w, m->auth));
	return dg_write_bytes(w, m->mac.ptr, m->mac.len);
}

static dg_err dec_challenge(dg_reader *r, void *body)
{
	dg_msg_challenge *m = body;
	W(read_i64(r, &m->node_id));
	W(read_fixed(r, &m->nonce, DG_NONCE_LEN));
	W(dg_read_bool(r, &m->auth));
	return read_fixed(r, &m->mac, DG_MAC_LEN);
}

static dg_err enc_proof(dg_writer *w, const void *body)
{
	const dg_msg_proof *m = body;
	return dg_write_bytes(w, m->mac.ptr, m->mac.len);
}

static dg_err dec_proof(dg_reader *r, void *body)
{
	dg_msg_proof *m = body;
	return read_fixed(r, &m->mac, DG_MAC_LEN);
}

static dg_err enc_none(dg_writer *w, const void *body)
{
	(void)w;
	(void)body;
	return DG_OK;
}

static dg_err dec_none(dg_reader *r, void *body)
{
	(void)r;
	(void)body;
	return DG_OK;
}

static dg_err enc_reject(dg_writer *w, const void *body)
{
	const dg_msg_reject *m = body;
	W(dg_write_i32(w, m->reason));
	return dg_write_str(w, m->text.ptr, m->text.len);
}

static dg_err dec_reject(dg_reader *r, void *body)
{
	dg_msg_reject *m = body;
	W(dg_read_i32(r, &m->reason));
	return dg_read_str(r, &m->text, NULL);
}

static dg_err enc_bytes(dg_writer *w, const void *body)
{
	const dg_msg_bytes *m = body;
	/* a null pointer with length 0 is an empty payload, not null */
	return dg_write_bytes(w, m->data.ptr ? (const void *)m->data.ptr : "",
	    m->data.len);
}

static dg_err dec_bytes(dg_reader *r, void *body)
{
	dg_msg_bytes *m = body;
	W(dg_read_bytes(r, &m->data, NULL));
	return m->data.ptr != NULL ? DG_OK : DG_ERR_TYPE_MISMATCH;
}

static dg_err enc_two_i64(dg_writer *w, const void *body)
{
	const int64_t *v = body; /* every two-I64 body is laid out as two int64_t */
	W(dg_write_i64(w, v[0]));
	return dg_write_i64(w, v[1]);
}

static dg_err dec_two_i64(dg_reader *r, void *body)
{
	int64_t *v = body;
	W(read_i64(r, &v[0]));
	return read_i64(r, &v[1]);
}

static dg_err enc_join(dg_writer *w, const void *body)
{
	const dg_msg_join *m = body;
	W(dg_write_str(w, m->address.ptr, m->address.len));
	W(dg_write_i64(w, m->node_id));
	W(dg_write_i64(w, m->attrs));
	return dg_write_i64(w, m->floor);
}

static dg_err dec_join(dg_reader *r, void *body)
{
	dg_msg_join *m = body;
	W(dg_read_str(r, &m->address, NULL));
	/* the address becomes a C string (a member's URL): no NUL inside */
	if (m->address.len > 0 && memchr(m->address.ptr, 0, m->address.len) != NULL)
		return DG_ERR_BAD_LENGTH;
	W(read_i64(r, &m->node_id));
	W(read_i64(r, &m->attrs));
	return read_i64(r, &m->floor);
}

dg_err dg_msg_list_put(dg_writer *w, const dg_raw *list)
{
	if (list->ptr == NULL)
		return dg_write_null(w); /* (as dg_write_value's DG_ANY) */
	if (list->len < 2 || list->ptr[0] != 0x0F) /* a LIST, at least its count */
		return dgi_w_fail(w, DG_ERR_TYPE_MISMATCH);
	/* Not walked again: a list here is a dg_writer's (the sender built it)
	 * or one dg_msg_list_get took out of a checked body; the receiver
	 * checks its structure (dg_msg_list_get) before any handler reads it,
	 * and the handlers' reads its values. */
	return dgi_write_encoded(w, list->ptr, list->len);
}

dg_err dg_msg_list_get(dg_reader *r, dg_raw *list)
{
	const uint8_t *start = r->r_p;
	W(dg_read_skip(r));
	if (start[0] != 0x0F) /* a LIST */
		return DG_ERR_TYPE_MISMATCH;
	list->ptr = start;
	list->len = (uint32_t)(r->r_p - start);
	return DG_OK;
}

dg_err dg_msg_raw_encode(dg_writer *w, const void *body)
{
	return dg_msg_list_put(w, &((const dg_msg_raw *)body)->list);
}

/* The whole list as one encoded value: its handler reads it. */
dg_err dg_msg_raw_decode(dg_reader *r, void *body)
{
	return dg_msg_list_get(r, &((dg_msg_raw *)body)->list);
}

_Static_assert(sizeof(dg_msg_node_failed) == 16 && sizeof(dg_msg_baseline_ack) == 16,
    "two-I64 bodies are two int64_t");

static dg_err enc_baseline(dg_writer *w, const void *body)
{
	const dg_msg_baseline *m = body;
	W(dg_write_i64(w, m->op));
	return dg_msg_list_put(w, &m->addrs);
}

/* The addresses stay one LIST (a view): the handler reads each. */
static dg_err dec_baseline(dg_reader *r, void *body)
{
	dg_msg_baseline *m = body;
	W(read_i64(r, &m->op));
	return dg_msg_list_get(r, &m->addrs);
}
_Static_assert(sizeof(dg_msg_join_ack) == 32 && sizeof(dg_msg_heartbeat) == 32,
    "JOIN_ACK and HEARTBEAT are four int64_t");

static dg_err enc_topo_propose(dg_writer *w, const void *body)
{
	const dg_msg_topo_propose *m = body;
	W(dg_write_i64(w, m->base));
	W(dg_write_i64(w, m->round));
	W(dg_write_i64(w, m->phase));
	return dg_msg_list_put(w, &m->topology);
}

static dg_err dec_topo_propose(dg_reader *r, void *body)
{
	dg_msg_topo_propose *m = body;
	W(read_i64(r, &m->base));
	W(read_i64(r, &m->round));
	W(read_i64(r, &m->phase));
	return dg_msg_list_get(r, &m->topology);
}

/* TOPO_VOTE: eight I64 (laid out as eight int64_t), then BYTES */
_Static_assert(offsetof(dg_msg_topo_vote, acc) == 8 * sizeof(int64_t),
    "TOPO_VOTE's integers are eight int64_t");

static dg_err enc_topo_vote(dg_writer *w, const void *body)
{
	const int64_t *v = body;
	for (int i = 0; i < 8; i++)
		W(dg_write_i64(w, v[i]));
	const dg_msg_topo_vote *m = body;
	return dg_write_bytes(w, m->acc.ptr ? (const void *)m->acc.ptr : "", m->acc.len);
}

static dg_err dec_topo_vote(dg_reader *r, void *body)
{
	int64_t *v = body;
	for (int i = 0; i < 8; i++)
		W(read_i64(r, &v[i]));
	dg_msg_topo_vote *m = body;
	W(dg_read_bytes(r, &m->acc, NULL));
	return m->acc.ptr != NULL ? DG_OK : DG_ERR_TYPE_MISMATCH;
}

static dg_err enc_four_i64(dg_writer *w, const void *body)
{
	const int64_t *v = body;
	for (int i = 0; i < 4; i++)
		W(dg_write_i64(w, v[i]));
	return DG_OK;
}

static dg_err dec_four_i64(dg_reader *r, void *body)
{
	int64_t *v = body;
	for (int i = 0; i < 4; i++)
		W(read_i64(r, &v[i]));
	return DG_OK;
}

static dg_msg_row rows[DG_MSG__COUNT] = {
	[DG_MSG_UNKNOWN] = { "UNKNOWN", 0, NULL, NULL, DG_MSG_UNKNOWN },
	[DG_MSG_HELLO] = { "HELLO", sizeof(dg_msg_hello), enc_hello, dec_hello, DG_MSG_UNKNOWN },
	[DG_MSG_CHALLENGE] = { "CHALLENGE", sizeof(dg_msg_challenge), enc_challenge, dec_challenge, DG_MSG_UNKNOWN },
	[DG_MSG_PROOF] = { "PROOF", sizeof(dg_msg_proof), enc_proof, dec_proof, DG_MSG_UNKNOWN },
	[DG_MSG_WELCOME] = { "WELCOME", 0, enc_none, dec_none, DG_MSG_UNKNOWN },
	[DG_MSG_REJECT] = { "REJECT", sizeof(dg_msg_reject), enc_reject, dec_reject, DG_MSG_UNKNOWN },
	[DG_MSG_PING] = { "PING", sizeof(dg_msg_bytes), enc_bytes, dec_bytes, DG_MSG_UNKNOWN },
	[DG_MSG_HEARTBEAT] = { "HEARTBEAT", sizeof(dg_msg_heartbeat), enc_four_i64, dec_four_i64, DG_MSG_UNKNOWN },
	[DG_MSG_JOIN] = { "JOIN", sizeof(dg_msg_join), enc_join, dec_join, DG_MSG_JOIN_ACK },
	[DG_MSG_JOIN_ACK] = { "JOIN_ACK", sizeof(dg_msg_join_ack), enc_four_i64, dec_four_i64, DG_MSG_UNKNOWN },
	[DG_MSG_TOPOLOGY] = { "TOPOLOGY", sizeof(dg_msg_raw), dg_msg_raw_encode, dg_msg_raw_decode, DG_MSG_UNKNOWN },
	[DG_MSG_NODE_FAILED] = { "NODE_FAILED", sizeof(dg_msg_node_failed), enc_two_i64, dec_two_i64, DG_MSG_UNKNOWN },
	[DG_MSG_TYPE_PROPOSE] = { "TYPE_PROPOSE", sizeof(dg_msg_bytes), enc_bytes, dec_bytes, DG_MSG_TYPE_PROPOSE },
	[DG_MSG_TYPE_ANNOUNCE] = { "TYPE_ANNOUNCE", sizeof(dg_msg_bytes), enc_bytes, dec_bytes, DG_MSG_UNKNOWN },
	[DG_MSG_TYPES_SNAPSHOT] = { "TYPES_SNAPSHOT", sizeof(dg_msg_raw), dg_msg_raw_encode, dg_msg_raw_decode, DG_MSG_UNKNOWN },
	[DG_MSG_LEAVE] = { "LEAVE", 0, enc_none, dec_none, DG_MSG_UNKNOWN },
	[DG_MSG_ECHO] = { "ECHO", sizeof(dg_msg_bytes), enc_bytes, dec_bytes, DG_MSG_UNKNOWN },
	[DG_MSG_BASELINE] = { "BASELINE", sizeof(dg_msg_baseline), enc_baseline, dec_baseline, DG_MSG_BASELINE_ACK },
	[DG_MSG_BASELINE_ACK] = { "BASELINE_ACK", sizeof(dg_msg_baseline_ack), enc_two_i64, dec_two_i64, DG_MSG_UNKNOWN },
	[DG_MSG_REMOVED] = { "REMOVED", sizeof(dg_msg_raw), dg_msg_raw_encode, dg_msg_raw_decode, DG_MSG_UNKNOWN },
	[DG_MSG_TOPO_PROPOSE] = { "TOPO_PROPOSE", sizeof(dg_msg_topo_propose), enc_topo_propose, dec_topo_propose, DG_MSG_TOPO_VOTE },
	[DG_MSG_TOPO_VOTE] = { "TOPO_VOTE", sizeof(dg_msg_topo_vote), enc_topo_vote, dec_topo_vote, DG_MSG_UNKNOWN },
};

dg_err dg_msg_define(dg_msg_type type, const dg_msg_row *row)
{
	if ((unsigned)type <= DG_MSG_TRANSPORT_LAST || (unsigned)type >= DG_MSG__COUNT ||
	    row == NULL || row->name == NULL || row->encode == NULL ||
	    row->decode == NULL || row->body_size > DG_MSG_BODY_MAX)
		return DG_ERR_INVAL;
	if (rows[type].name != NULL)
		return strcmp(rows[type].name, row->name) == 0 ? DG_OK : DG_ERR_CONFLICT;
	rows[type] = *row;
	return DG_OK;
}

const dg_msg_row *dg_msg_row_of(dg_msg_type type)
{
	if ((unsigned)type >= DG_MSG__COUNT || rows[type].encode == NULL)
		return NULL;
	return &rows[type];
}

const char *dg_msg_name(dg_msg_type type)
{
	if ((unsigned)type >= DG_MSG__COUNT || rows[type].name == NULL)
		return "?";
	return rows[type].name;
}

dg_err dg_msg_encode(dg_msg_type type, const void *body, dg_writer *w)
{
	const dg_msg_row *row = dg_msg_row_of(type);
	if (row == NULL)
		return DG_ERR_INVAL;
	dg_err e = row->encode(w, body);
	return e != DG_OK ? e : dg_writer_finish(w);
}

dg_err dg_msg_decode(dg_msg_type type, const dg_registry *reg,
    const uint8_t *raw, size_t len, void *body)
{
	const dg_msg_row *row = dg_msg_row_of(type);
	dg_reader r;
	if (row == NULL)
		return DG_ERR_INVAL;
	dg_reader_init(&r, reg, raw, len);
	dg_err e = row->decode(&r, body);
	if (e == DG_OK && dg_reader_left(&r) != 0)
		e = DG_ERR_BAD_LENGTH; /* trailing bytes */
	return e;
}
