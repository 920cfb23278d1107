/*
 * msgs.c — codecs of the cache messages (PROTOCOL.md, "Cache messages").
 *
 * Most bodies are a run of I64 fields followed by a run of BYTES fields, in
 * struct order; one generic pair of functions, instantiated per type with
 * the two counts, encodes and decodes them — no descriptor lookup, no
 * allocation (byte fields are views into the frame).
 */
#include "cache_int.h"

#include <stddef.h>
#include <string.h>

static dg_err enc_run(dg_writer *w, const void *body, int ni, size_t boff, int nb)
{
	return dgi_write_run(w, body, (unsigned)ni,
	    (const dg_bytes *)(const void *)((const uint8_t *)body + boff), (unsigned)nb);
}

static dg_err dec_run(dg_reader *r, void *body, int ni, size_t boff, int nb)
{
	return dgi_read_run(r, body, (unsigned)ni, (dg_bytes *)(void *)((uint8_t *)body + boff),
	    (unsigned)nb);
}

#define RUN_CODEC(name, type, ni, bfield, nb)                                    \
	_Static_assert(offsetof(type, bfield) == (ni) * sizeof(int64_t) || (nb) == 0, \
	    #type ": I64 fields first, then BYTES");                                \
	static dg_err enc_##name(dg_writer *w, const void *body)                    \
	{                                                                           \
		return enc_run(w, body, ni, offsetof(type, bfield), nb);              \
	}                                                                           \
	static dg_err dec_##name(dg_reader *r, void *body)                          \
	{                                                                           \
		return dec_run(r, body, ni, offsetof(type, bfield), nb);              \
	}

RUN_CODEC(update, dgi_msg_update, 8, key, 3)
RUN_CODEC(update_res, dgi_msg_update_res, 3, old, 1)
RUN_CODEC(backup, dgi_msg_backup, 12, key, 2)
RUN_CODEC(backup_ack, dgi_msg_backup_ack, 4, cache_id, 0)
RUN_CODEC(get, dgi_msg_get, 4, key, 1)
RUN_CODEC(get_res, dgi_msg_get_res, 1, val, 1)
RUN_CODEC(ack, dgi_msg_ack, 2, res, 0)
RUN_CODEC(page_req, dgi_msg_page_req, 6, cache_id, 0)
RUN_CODEC(psync, dgi_msg_psync, 6, cache_id, 0)

/* ---- the batch messages: five I64 and a LIST of items ---- */

static dg_err enc_many(dg_writer *w, const void *body)
{
	const dgi_msg_many *m = body;
	dg_err e = enc_run(w, body, 5, 0, 0);
	return e != DG_OK ? e : dg_msg_list_put(w, &m->list);
}

static dg_err dec_many(dg_reader *r, void *body)
{
	dgi_msg_many *m = body;
	dg_err e = dec_run(r, body, 5, 0, 0);
	return e != DG_OK ? e : dg_msg_list_get(r, &m->list);
}

_Static_assert(offsetof(dgi_msg_many, list) == 5 * sizeof(int64_t),
    "dgi_msg_many: five I64, then the list");
_Static_assert(offsetof(struct dgi_uall_item, key) == 2 * sizeof(int64_t) &&
    offsetof(struct dgi_back_item, res) == 2 * sizeof(int64_t) &&
    offsetof(struct dgi_ures_item, applied) == 2 * sizeof(int64_t),
    "item structs: I64 fields first, then BYTES");
_Static_assert(offsetof(dgi_msg_backup, key) - offsetof(dgi_msg_backup, part) ==
    (DGI_BALL_ITEM_VALUES - 2) * sizeof(int64_t), "a BACKUP_ALL item: BACKUP from part on");

dg_err dgi_uall_item_put(dg_writer *w, const struct dgi_uall_item *it)
{
	return enc_run(w, it, 2, offsetof(struct dgi_uall_item, key), 2);
}

dg_err dgi_uall_item_get(dg_reader *r, struct dgi_uall_item *it)
{
	return dec_run(r, it, 2, offsetof(struct dgi_uall_item, key), 2);
}

dg_err dgi_ures_item_put(dg_writer *w, const struct dgi_ures_item *it)
{
	return enc_run(w, it, 3, 0, 0);
}

dg_err dgi_ures_item_get(dg_reader *r, struct dgi_ures_item *it)
{
	return dec_run(r, it, 3, 0, 0);
}

_Static_assert(offsetof(struct dgi_gall_item, key) == sizeof(int64_t) &&
    offsetof(struct dgi_gres_item, val) == sizeof(int64_t), "one I64, then BYTES");

dg_err dgi_gall_item_put(dg_writer *w, const struct dgi_gall_item *it)
{
	return enc_run(w, it, 1, offsetof(struct dgi_gall_item, key), 1);
}

dg_err dgi_gall_item_get(dg_reader *r, struct dgi_gall_item *it)
{
	return dec_run(r, it, 1, offsetof(struct dgi_gall_item, key), 1);
}

dg_err dgi_gres_item_put(dg_writer *w, const struct dgi_gres_item *it)
{
	return enc_run(w, it, 1, offsetof(struct dgi_gres_item, val), 1);
}

dg_err dgi_gres_item_get(dg_reader *r, struct dgi_gres_item *it)
{
	return dec_run(r, it, 1, offsetof(struct dgi_gres_item, val), 1);
}

dg_err dgi_back_item_put(dg_writer *w, const struct dgi_back_item *it)
{
	return enc_run(w, it, 3, 0, 0);
}

dg_err dgi_back_item_get(dg_reader *r, struct dgi_back_item *it)
{
	return dec_run(r, it, 3, 0, 0);
}

dg_err dgi_ball_item_put(dg_writer *w, const dgi_msg_backup *b)
{
	return enc_run(w, &b->part, DGI_BALL_ITEM_VALUES - 2,
	    offsetof(dgi_msg_backup, key) - offsetof(dgi_msg_backup, part), 2);
}

dg_err dgi_ball_item_get(dg_reader *r, int64_t cache_id, dgi_msg_backup *b)
{
	b->cache_id = cache_id;
	return dec_run(r, &b->part, DGI_BALL_ITEM_VALUES - 2,
	    offsetof(dgi_msg_backup, key) - offsetof(dgi_msg_backup, part), 2);
}

dg_err dgi_many_open(const dg_registry *reg, const dgi_msg_many *m, uint32_t values, dg_reader *r,
    uint32_t *n)
{
	uint32_t count = 0;
	dg_reader_init(r, reg, m->list.ptr, m->list.len);
	dg_err e = dg_read_begin(r, DG_LIST, &count);
	if (e != DG_OK)
		return e;
	if (count % values != 0 || count / values > DGI_MANY_MAX)
		return DG_ERR_BAD_LENGTH;
	*n = count / values;
	return DG_OK;
}

static dg_err enc_cfg(dg_writer *w, const void *body)
{
	const dgi_msg_cfg *m = body;
	dg_err e = dg_write_str(w, m->name.ptr, m->name.len);
	return e != DG_OK ? e : enc_run(w, &m->mode, 8, 0, 0);
}

static dg_err dec_cfg(dg_reader *r, void *body)
{
	dgi_msg_cfg *m = body;
	dg_err e = dg_read_str(r, &m->name, NULL);
	/* the name is used as a C string: no NUL inside */
	if (e == DG_OK && (m->name.ptr == NULL || m->name.len == 0 ||
	    m->name.len >= DG_CACHE_NAME_MAX || memchr(m->name.ptr, 0, m->name.len) != NULL))
		e = DG_ERR_BAD_LENGTH;
	return e != DG_OK ? e : dec_run(r, &m->mode, 8, 0, 0);
}

_Static_assert(offsetof(dgi_msg_cfg, ttl_ms) - offsetof(dgi_msg_cfg, mode) ==
    7 * sizeof(int64_t), "dgi_msg_cfg: eight I64 after the name");

#define enc_list dg_msg_raw_encode
#define dec_list dg_msg_raw_decode

static dg_err enc_push(dg_writer *w, const void *body)
{
	const dgi_msg_push *m = body;
	dg_err e = enc_run(w, body, 2, 0, 0);
	return e != DG_OK ? e : dg_msg_list_put(w, &m->list);
}

static dg_err dec_push(dg_reader *r, void *body)
{
	dgi_msg_push *m = body;
	dg_err e = dec_run(r, body, 2, 0, 0);
	return e != DG_OK ? e : dg_msg_list_get(r, &m->list);
}

#define ROW(t, name, type, codec, reply) \
	dg_msg_define(t, &(dg_msg_row){ name, sizeof(type), enc_##codec, dec_##codec, reply })
#define NONE DG_MSG_UNKNOWN

static void define_rows(void)
{
	ROW(DGI_MSG_UPDATE, "CACHE_UPDATE", dgi_msg_update, update, DGI_MSG_UPDATE_RES);
	ROW(DGI_MSG_UPDATE_RES, "CACHE_UPDATE_RES", dgi_msg_update_res, update_res, NONE);
	ROW(DGI_MSG_BACKUP, "CACHE_BACKUP", dgi_msg_backup, backup, NONE);
	ROW(DGI_MSG_BACKUP_ACK, "CACHE_BACKUP_ACK", dgi_msg_backup_ack, backup_ack, NONE);
	ROW(DGI_MSG_GET, "CACHE_GET", dgi_msg_get, get, DGI_MSG_GET_RES);
	ROW(DGI_MSG_GET_RES, "CACHE_GET_RES", dgi_msg_get_res, get_res, NONE);
	ROW(DGI_MSG_CACHE_CREATE, "CACHE_CREATE", dgi_msg_cfg, cfg, DGI_MSG_ACK);
	ROW(DGI_MSG_CACHE_DESTROY, "CACHE_DESTROY", dgi_msg_ack, ack, DGI_MSG_ACK);
	ROW(DGI_MSG_CACHE_CONFIGS, "CACHE_CONFIGS", dg_msg_raw, list, NONE);
	ROW(DGI_MSG_ACK, "CACHE_ACK", dgi_msg_ack, ack, NONE);
	ROW(DGI_MSG_DEMAND, "REBALANCE_DEMAND", dgi_msg_page_req, page_req, DGI_MSG_SUPPLY);
	ROW(DGI_MSG_SUPPLY, "REBALANCE_SUPPLY", dg_msg_raw, list, NONE);
	ROW(DGI_MSG_SCAN, "CACHE_SCAN", dgi_msg_page_req, page_req, DGI_MSG_SCAN_RES);
	ROW(DGI_MSG_SCAN_RES, "CACHE_SCAN_RES", dg_msg_raw, list, NONE);
	ROW(DGI_MSG_SIZE, "CACHE_SIZE", dgi_msg_ack, ack, DGI_MSG_ACK);
	ROW(DGI_MSG_CLEAR, "CACHE_CLEAR", dgi_msg_ack, ack, DGI_MSG_ACK);
	ROW(DGI_MSG_LOST_RESET, "CACHE_LOST_RESET", dgi_msg_ack, ack, DGI_MSG_ACK);
	ROW(DGI_MSG_PUSH, "REBALANCE_PUSH", dgi_msg_push, push, DGI_MSG_ACK);
	ROW(DGI_MSG_HANDOFF, "REBALANCE_HANDOFF", dgi_msg_push, push, DGI_MSG_ACK);
	ROW(DGI_MSG_OWNED, "REBALANCE_OWNED", dgi_msg_push, push, DGI_MSG_OWNED_RES);
	ROW(DGI_MSG_OWNED_RES, "REBALANCE_OWNED_RES", dg_msg_raw, list, NONE);
	ROW(DGI_MSG_PSYNC, "CACHE_PSYNC", dgi_msg_psync, psync, DGI_MSG_PSYNC_RES);
	ROW(DGI_MSG_PSYNC_RES, "CACHE_PSYNC_RES", dg_msg_raw, list, NONE);
	ROW(DGI_MSG_UPDATE_ALL, "CACHE_UPDATE_ALL", dgi_msg_many, many, DGI_MSG_UPDATE_ALL_RES);
	ROW(DGI_MSG_UPDATE_ALL_RES, "CACHE_UPDATE_ALL_RES", dgi_msg_many, many, NONE);
	ROW(DGI_MSG_BACKUP_ALL, "CACHE_BACKUP_ALL", dgi_msg_many, many, NONE);
	ROW(DGI_MSG_BACKUP_ALL_ACK, "CACHE_BACKUP_ALL_ACK", dgi_msg_many, many, NONE);
	ROW(DGI_MSG_GET_ALL, "CACHE_GET_ALL", dgi_msg_many, many, DGI_MSG_GET_ALL_RES);
	ROW(DGI_MSG_GET_ALL_RES, "CACHE_GET_ALL_RES", dgi_msg_many, many, NONE);
}

void dgi_cache_msgs_define(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, define_rows);
}
