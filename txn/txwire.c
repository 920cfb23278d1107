/*
 * txwire.c — the transaction messages' codecs: their rows in the message
 * table (TX_LOCK .. TX_LOCK_ALL_RES, transport/PROTOCOL.md), the registry their
 * LISTs are written with, the entries of a PREPARE or COMMIT_COPY list
 * (dgi_txwire_put/get) and a PREPARE body's entry list opened for reading.
 */
#include "txsvc_int.h"

#include "marshal/marshal_int.h" /* dgi_read_run, dgi_write_run */

/* ---- codecs ---- */

dg_err dgi_svc_put_i64s(dg_writer *w, const int64_t *v, int n)
{
	return dgi_write_run(w, v, (unsigned)n, NULL, 0);
}

dg_err dgi_svc_get_i64s(dg_reader *r, int64_t *v, int n)
{
	return dgi_read_run(r, v, (unsigned)n, NULL, 0);
}

static dg_err enc_lock(dg_writer *w, const void *body)
{
	const dgi_msg_tx_lock *m = body;
	dg_err e = dgi_svc_put_i64s(w, &m->tx_node, 5);
	if (e == DG_OK)
		e = dg_write_bytes(w, m->key.ptr, m->key.len);
	return e != DG_OK ? e : dgi_svc_put_i64s(w, &m->topver, 3);
}

static dg_err dec_lock(dg_reader *r, void *body)
{
	dgi_msg_tx_lock *m = body;
	dg_err e = dgi_svc_get_i64s(r, &m->tx_node, 5);
	if (e == DG_OK)
		e = dg_read_bytes(r, &m->key, NULL);
	return e != DG_OK ? e : dgi_svc_get_i64s(r, &m->topver, 3);
}

static dg_err enc_lock_res(dg_writer *w, const void *body)
{
	const dgi_msg_tx_lock_res *m = body;
	dg_err e = dgi_svc_put_i64s(w, &m->res, 5);
	if (e != DG_OK)
		return e;
	return m->val.ptr != NULL ? dg_write_bytes(w, m->val.ptr, m->val.len) : dg_write_null(w);
}

static dg_err dec_lock_res(dg_reader *r, void *body)
{
	dgi_msg_tx_lock_res *m = body;
	dg_err e = dgi_svc_get_i64s(r, &m->res, 5);
	return e != DG_OK ? e : dg_read_bytes(r, &m->val, NULL);
}

/* Bodies of n I64, then one LIST (TX_PREPARE, TX_LOCK_ALL). */
static dg_err put_i64s_list(dg_writer *w, const int64_t *v, int n, const dg_raw *list)
{
	dg_err e = dgi_svc_put_i64s(w, v, n);
	return e != DG_OK ? e : dg_msg_list_put(w, list);
}

static dg_err get_i64s_list(dg_reader *r, int64_t *v, int n, dg_raw *list)
{
	dg_err e = dgi_svc_get_i64s(r, v, n);
	return e != DG_OK ? e : dg_msg_list_get(r, list);
}

/* ---- TX_LOCK_ALL ---- */

static dg_err enc_lock_all(dg_writer *w, const void *body)
{
	const dgi_msg_tx_lock_all *m = body;
	return put_i64s_list(w, &m->tx_node, 6, &m->items);
}

static dg_err dec_lock_all(dg_reader *r, void *body)
{
	dgi_msg_tx_lock_all *m = body;
	return get_i64s_list(r, &m->tx_node, 6, &m->items);
}

_Static_assert(offsetof(dgi_msg_tx_lock_all, items) == 6 * sizeof(int64_t),
    "TX_LOCK_ALL: six I64, then the items");

dg_err dgi_txla_item_put(dg_writer *w, const dgi_msg_tx_lock *m)
{
	dg_err e = dg_write_i64(w, m->part);
	if (e == DG_OK)
		e = dg_write_i64(w, m->flags);
	return e != DG_OK ? e : dg_write_bytes(w, m->key.ptr, m->key.len);
}

dg_err dgi_txla_item_get(dg_reader *r, dgi_msg_tx_lock *m)
{
	dg_err e = dg_read_i64(r, &m->part);
	if (e == DG_OK)
		e = dg_read_i64(r, &m->flags);
	return e != DG_OK ? e : dg_read_bytes(r, &m->key, NULL);
}

dg_err dgi_txla_res_put(dg_writer *w, const dgi_msg_tx_lock_res *r)
{
	return enc_lock_res(w, r);
}

dg_err dgi_txla_res_get(dg_reader *r, dgi_msg_tx_lock_res *res)
{
	return dec_lock_res(r, res);
}

dg_err dgi_txla_open(const dg_raw *list, uint32_t values, dg_reader *r, uint32_t *n)
{
	uint32_t count = 0;
	dg_reader_init(r, NULL, list->ptr, list->len);
	dg_err e = dg_read_begin(r, DG_LIST, &count);
	if (e != DG_OK)
		return e;
	if (count % values != 0 || count / values > DGI_TXLA_MAX)
		return DG_ERR_BAD_LENGTH;
	*n = count / values;
	return DG_OK;
}

static dg_err enc_res(dg_writer *w, const void *body)
{
	return dgi_svc_put_i64s(w, body, 3);
}

static dg_err dec_res(dg_reader *r, void *body)
{
	return dgi_svc_get_i64s(r, body, 3);
}

static dg_err enc_ctl(dg_writer *w, const void *body)
{
	return dgi_svc_put_i64s(w, body, 5);
}

static dg_err dec_ctl(dg_reader *r, void *body)
{
	return dgi_svc_get_i64s(r, body, 5);
}

static dg_err enc_prepare(dg_writer *w, const void *body)
{
	const dgi_msg_tx_prepare *m = body;
	return put_i64s_list(w, &m->tx_node, 10, &m->ents);
}

static dg_err dec_prepare(dg_reader *r, void *body)
{
	dgi_msg_tx_prepare *m = body;
	return get_i64s_list(r, &m->tx_node, 10, &m->ents);
}

_Static_assert(offsetof(dgi_txwire_ent, key) == 3 * sizeof(int64_t) &&
    offsetof(dgi_txwire_ent, val) == offsetof(dgi_txwire_ent, key) + sizeof(dg_bytes),
    "an entry: three I64, then key and value (one run)");

dg_err dgi_txwire_put(dg_writer *w, const dgi_txwire_ent *e)
{
	/* (a NULL val.ptr: dgi_write_run writes it as dg_write_bytes does, a NULL) */
	dg_err err = dgi_write_run(w, &e->cache_id, 3, &e->key, 2);
	int64_t v[4] = { e->ver.topver, (int64_t)e->ver.counter, e->ver.order, e->expire_ms };
	return err != DG_OK ? err : dgi_svc_put_i64s(w, v, 4);
}

dg_err dgi_txwire_get(dg_reader *r, dgi_txwire_ent *e)
{
	dg_err err = dgi_read_run(r, &e->cache_id, 3, &e->key, 2);
	int64_t v[4];
	if (err == DG_OK)
		err = dgi_svc_get_i64s(r, v, 4);
	if (err != DG_OK)
		return err;
	if (e->key.ptr == NULL || e->key.len == 0 || e->cache_id <= 0 ||
	    e->cache_id > UINT32_MAX || e->part < 0 || e->part >= DG_PARTITIONS_MAX)
		return DG_ERR_INVAL;
	e->ver = (dgi_pver){ v[0], (uint64_t)v[1], (uint32_t)v[2], 0 };
	e->expire_ms = v[3];
	return DG_OK;
}

_Static_assert(offsetof(dgi_msg_tx_lock, key) == 5 * sizeof(int64_t),
    "TX_LOCK: five I64, then the key");
_Static_assert(sizeof(dgi_msg_tx_res) == 3 * sizeof(int64_t), "TX_UNLOCK: three I64");
_Static_assert(sizeof(dgi_msg_tx_ctl) == 5 * sizeof(int64_t), "TX_ACK: five I64");
_Static_assert(offsetof(dgi_msg_tx_prepare, ents) == 10 * sizeof(int64_t),
    "TX_PREPARE: ten I64, then the entries");

/* Writers of LISTs need a registry (FORMAT.md's container schemas); the
 * txn messages carry no registered types, so one empty registry serves
 * every node of the process. */
static dg_registry *wire_reg;

dg_registry *dgi_txwire_registry(void)
{
	return wire_reg;
}

#define enc_raw dg_msg_raw_encode
#define dec_raw dg_msg_raw_decode

static const struct row {
	dg_msg_type type;
	dg_msg_row row;
} rows[] = {
#define R(t, name, body, codec, reply) \
	{ t, { name, sizeof(body), enc_##codec, dec_##codec, reply } }
	R(DGI_MSG_TX_LOCK, "TX_LOCK", dgi_msg_tx_lock, lock, DGI_MSG_TX_LOCK_RES),
	R(DGI_MSG_TX_LOCK_RES, "TX_LOCK_RES", dgi_msg_tx_lock_res, lock_res, DG_MSG_UNKNOWN),
	R(DGI_MSG_TX_UNLOCK, "TX_UNLOCK", dgi_msg_tx_res, res, DGI_MSG_TX_LOCK_RES),
	R(DGI_MSG_TX_PREPARE, "TX_PREPARE", dgi_msg_tx_prepare, prepare, DGI_MSG_TX_ACK),
	R(DGI_MSG_TX_COMMIT, "TX_COMMIT", dgi_msg_tx_ctl, ctl, DGI_MSG_TX_ACK),
	R(DGI_MSG_TX_ROLLBACK, "TX_ROLLBACK", dgi_msg_tx_ctl, ctl, DGI_MSG_TX_ACK),
	R(DGI_MSG_TX_ACK, "TX_ACK", dgi_msg_tx_ctl, ctl, DG_MSG_UNKNOWN),
	R(DGI_MSG_TX_COMMIT_COPY, "TX_COMMIT_COPY", dgi_msg_tx_prepare, prepare, DGI_MSG_TX_ACK),
	R(DGI_MSG_TX_FENCE, "TX_FENCE", dgi_msg_tx_ctl, ctl, DG_MSG_UNKNOWN),
	R(DGI_MSG_TX_QUERY, "TX_QUERY", dgi_msg_tx_ctl, ctl, DGI_MSG_TX_ACK),
	R(DGI_MSG_TX_EDGES, "TX_EDGES", dgi_msg_tx_ctl, ctl, DGI_MSG_TX_EDGES_RES),
	R(DGI_MSG_TX_EDGES_RES, "TX_EDGES_RES", dg_msg_raw, raw, DG_MSG_UNKNOWN),
	R(DGI_MSG_TX_KILL, "TX_KILL", dgi_msg_tx_ctl, ctl, DG_MSG_UNKNOWN),
	R(DGI_MSG_TX_LOCK_ALL, "TX_LOCK_ALL", dgi_msg_tx_lock_all, lock_all,
	    DGI_MSG_TX_LOCK_ALL_RES),
	R(DGI_MSG_TX_LOCK_ALL_RES, "TX_LOCK_ALL_RES", dg_msg_raw, raw, DG_MSG_UNKNOWN),
#undef R
};

void dgi_svc_define_rows(void)
{
	if (dg_registry_create(&wire_reg) != DG_OK)
		wire_reg = NULL;
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		dg_msg_define(rows[i].type, &rows[i].row);
}

/* ---- a PREPARE body's entries ---- */

dg_err dgi_svc_ents_open(const uint8_t *body, uint32_t blen, dgi_msg_tx_prepare *m,
    dg_reader *rd, uint32_t *count)
{
	dg_err e = dg_msg_decode(DGI_MSG_TX_PREPARE, NULL, body, blen, m);
	if (e != DG_OK)
		return e;
	return dgi_svc_ents_of(m, rd, count);
}

dg_err dgi_svc_ents_of(const dgi_msg_tx_prepare *m, dg_reader *rd, uint32_t *count)
{
	dg_reader_init(rd, NULL, m->ents.ptr, m->ents.len);
	dg_err e = dg_read_begin(rd, DG_LIST, count);
	if (e == DG_OK && *count % DGI_TXWIRE_FIELDS != 0)
		e = DG_ERR_BAD_LENGTH;
	*count /= DGI_TXWIRE_FIELDS;
	return e;
}

/* in's decoded body, when it is a PREPARE's whose entry list lies in
 * in->raw (a handler's message, or a local one decoded again: txlocal.c) */
static const dgi_msg_tx_prepare *in_prepare(const dg_msg_in *in)
{
	const dgi_msg_tx_prepare *m = in->body;
	if (m == NULL || (in->type != DGI_MSG_TX_PREPARE && in->type != DGI_MSG_TX_COMMIT_COPY) ||
	    m->ents.ptr < in->raw || m->ents.len > in->raw_len ||
	    (size_t)(m->ents.ptr - in->raw) > in->raw_len - m->ents.len)
		return NULL;
	return m;
}

dg_err dgi_svc_in_ents(const dg_msg_in *in, dgi_msg_tx_prepare *m, dg_reader *rd,
    uint32_t *count)
{
	const dgi_msg_tx_prepare *d = in_prepare(in);
	if (d == NULL)
		return dgi_svc_ents_open(in->raw, in->raw_len, m, rd, count);
	*m = *d;
	return dgi_svc_ents_of(m, rd, count);
}

void dgi_svc_rec_keep_hdr(struct rec *r, const dg_msg_in *in)
{
	const dgi_msg_tx_prepare *d = in_prepare(in);
	r->have_hdr = d != NULL;
	if (d != NULL) {
		r->hdr = *d;
		r->hdr.ents.ptr = NULL; /* (in->raw's: dgi_svc_rec_hdr points it into body) */
		r->ents_off = (uint32_t)(d->ents.ptr - in->raw);
	}
}

dg_err dgi_svc_rec_hdr(const struct rec *r, dgi_msg_tx_prepare *m)
{
	if (!r->have_hdr)
		return dg_msg_decode(DGI_MSG_TX_PREPARE, NULL, r->body, r->blen, m);
	*m = r->hdr;
	m->ents.ptr = r->body + r->ents_off;
	return DG_OK;
}

dg_err dgi_svc_rec_ents(const struct rec *r, dgi_msg_tx_prepare *m, dg_reader *rd,
    uint32_t *count)
{
	dg_err e = dgi_svc_rec_hdr(r, m);
	return e != DG_OK ? e : dgi_svc_ents_of(m, rd, count);
}
