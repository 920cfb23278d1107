/* msg_seed.c — writes a seed corpus for msg_fuzz into the directory given:
 * every message type with a row, its body zeroed (the encoders write nulls
 * for absent strings, bytes and lists) and, for the types whose decoders
 * refuse those nulls, a typical body; a stream of frames; a TOPOLOGY; a
 * TX_PREPARE with entries.  Each file starts with msg_fuzz's mode byte
 * (and, for bodies, the type). */
#define _POSIX_C_SOURCE 200809L
#include "fuzz_types.h"
#include "fuzz_node.h"
#include "transport/member_int.h"
#include "cache/cache_int.h"
#include "txn/txsvc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *dir;
static int nfile;
static dg_registry *reg;

static void emit(const char *what, const uint8_t *pre, size_t npre, const dg_buf *b)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/seed-%03d-%s", dir, nfile++, what);
	FILE *f = fopen(path, "wb");
	if (f == NULL) {
		perror(path);
		exit(1);
	}
	fwrite(pre, 1, npre, f);
	fwrite(b->data, 1, b->len, f);
	fclose(f);
}

/* The body of type as msg_fuzz's mode 0 reads it; also kept in *out. */
static void emit_body(dg_msg_type type, const void *body, dg_buf *out)
{
	dg_writer w;
	dg_buf_reset(out);
	dg_writer_init(&w, reg, out);
	if (dg_msg_encode(type, body, &w) != DG_OK) {
		fprintf(stderr, "%s: does not encode\n", dg_msg_name(type));
		exit(1);
	}
	uint8_t pre[2] = { 0, (uint8_t)type };
	emit(dg_msg_name(type), pre, 2, out);
}

static void encode(dg_msg_type type, const void *body, dg_buf *out)
{
	dg_writer w;
	dg_buf_reset(out);
	dg_writer_init(&w, reg, out);
	if (dg_msg_encode(type, body, &w) != DG_OK)
		exit(1);
}

/* Appends a frame of type with body to b. */
static void add_frame(dg_buf *b, dg_msg_type type, uint8_t flags, uint64_t corr,
    const dg_buf *body)
{
	dg_frame_header h = { DG_FRAME_VERSION, flags, (uint16_t)type, (uint32_t)body->len,
		corr, 0x1111 };
	if (dg_buf_reserve(b, DG_FRAME_HEADER + body->len) != DG_OK)
		exit(1);
	dgi_frame_put(b->data + b->len, &h);
	memcpy(b->data + b->len + DG_FRAME_HEADER, body->data, body->len);
	b->len += DG_FRAME_HEADER + body->len;
}

static const uint8_t nonce[DG_NONCE_LEN] = "0123456789abcdef0123456789abcde";

/* A TOPOLOGY list of two nodes and a baseline of one. */
static void topology_list(struct dg_member *m, dg_buf *out)
{
	dg_topology_node nodes[2] = {
		{ 0x1111, 1, "tcp://127.0.0.1:47500", 0 },
		{ 0x2222, 2, "tcp://127.0.0.1:47501", DG_NODE_CLIENT },
	};
	struct bl bl = { .set = true, .n = 1 };
	bl.a[0] = (dg_str){ "tcp://127.0.0.1:47500", 21 };
	dg_topology *t = dgi_member_topo_new(7, nodes, 2, &bl);
	dg_buf_reset(out);
	if (t == NULL || dgi_member_topo_encode(m, t, out) != DG_OK)
		exit(1);
	dg_topology_release(t);
}

/* A list of strings (BASELINE's addresses). */
static void str_list(dg_buf *out)
{
	dg_writer w;
	dg_buf_reset(out);
	dg_writer_init(&w, reg, out);
	dg_write_list_begin(&w, 2);
	dg_write_str(&w, "tcp://127.0.0.1:47500", 21);
	dg_write_str(&w, "tcp://127.0.0.1:47501", 21);
	dg_write_end(&w);
}

/* A page as SUPPLY, SCAN_RES and PUSH carry it: one entry. */
static void page_list(dg_buf *out)
{
	dg_writer w;
	dg_buf_reset(out);
	dg_writer_init(&w, reg, out);
	dg_write_list_begin(&w, 5 + 1 + 3 + 8);
	int64_t head[] = { 0, 12345, 1, 1, 1, 0x1111, 0x1111, 5, 0 };
	for (size_t i = 0; i < 9; i++)
		dg_write_i64(&w, head[i]);
	dg_write_bytes(&w, "k1", 2);
	dg_write_bytes(&w, "v1", 2);
	int64_t tail[] = { 3, 1, 1, 0, 0x1111, 5 };
	for (size_t i = 0; i < 6; i++)
		dg_write_i64(&w, tail[i]);
	dg_write_end(&w);
}

/* CACHE_CONFIGS: per cache, CACHE_CREATE's fields in order. */
static void cfg_list(const dgi_msg_cfg *c, dg_buf *out)
{
	dg_writer w;
	dg_buf_reset(out);
	dg_writer_init(&w, reg, out);
	dg_write_list_begin(&w, 9);
	dg_write_str(&w, c->name.ptr, c->name.len);
	const int64_t *v = &c->mode;
	for (int i = 0; i < 8; i++)
		dg_write_i64(&w, v[i]);
	dg_write_end(&w);
}

/* TX_PREPARE's entries: a put and a removal. */
static void tx_ents(dg_buf *out)
{
	dg_writer w;
	dg_buf_reset(out);
	dg_writer_init(&w, dgi_txwire_registry(), out);
	dg_write_list_begin(&w, 2 * DGI_TXWIRE_FIELDS);
	dgi_txwire_ent a = { 42, 3, 1, { (const uint8_t *)"key", 3 },
		{ (const uint8_t *)"value", 5 }, { 2, 7, 1, 0 }, 0 };
	dgi_txwire_ent b = { 42, 9, 2, { (const uint8_t *)"gone", 4 }, { NULL, 0 },
		{ 2, 8, 1, 0 }, 0 };
	dgi_txwire_put(&w, &a);
	dgi_txwire_put(&w, &b);
	dg_write_end(&w);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s DIR\n", argv[0]);
		return 2;
	}
	dir = argv[1];
	if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
		perror(dir);
		return 1;
	}
	const dg_desc *person, *wide;
	if (dg_registry_create(&reg) != DG_OK || fz_register(reg, &person, &wide, NULL) != DG_OK)
		return 1;
	fz_install_rows();
	struct dg_member *m = calloc(1, sizeof(*m));
	if (m == NULL)
		return 1;
	m->reg = reg;

	dg_buf b, topo, strs, page, ents;
	dg_buf_init(&b);
	dg_buf_init(&topo);
	dg_buf_init(&strs);
	dg_buf_init(&page);
	dg_buf_init(&ents);
	topology_list(m, &topo);
	str_list(&strs);
	page_list(&page);
	tx_ents(&ents);
	dg_raw topo_raw = { topo.data, (uint32_t)topo.len };
	dg_raw page_raw = { page.data, (uint32_t)page.len };

	/* every row, zeroed */
	_Alignas(16) uint8_t zero[DG_MSG_BODY_MAX] = { 0 };
	for (int t = 0; t < DG_MSG__COUNT; t++)
		if (dg_msg_row_of((dg_msg_type)t) != NULL)
			emit_body((dg_msg_type)t, zero, &b);

	/* typical bodies of the types a zeroed one does not satisfy */
	dg_msg_hello hello = { DG_FRAME_VERSION, { "fuzz", 4 }, 0x1111,
		{ "tcp://127.0.0.1:47500", 21 }, { nonce, DG_NONCE_LEN }, true };
	emit_body(DG_MSG_HELLO, &hello, &b);
	dg_buf hello_enc = b;
	dg_buf_init(&b);
	dg_msg_challenge ch = { 0x2222, { nonce, DG_NONCE_LEN }, true, { nonce, DG_MAC_LEN } };
	emit_body(DG_MSG_CHALLENGE, &ch, &b);
	dg_msg_proof pr = { { nonce, DG_MAC_LEN } };
	emit_body(DG_MSG_PROOF, &pr, &b);
	dg_msg_reject rj = { 1, { "cluster name", 12 } };
	emit_body(DG_MSG_REJECT, &rj, &b);
	dg_msg_bytes by = { { (const uint8_t *)"ping", 4 } };
	emit_body(DG_MSG_PING, &by, &b);
	emit_body(DG_MSG_ECHO, &by, &b);
	dg_buf_reset(&b);
	dg_desc_export(person, &b);
	dg_buf desc = b;
	dg_buf_init(&b);
	dg_msg_bytes tp = { { desc.data, (uint32_t)desc.len } };
	emit_body(DG_MSG_TYPE_PROPOSE, &tp, &b);
	emit_body(DG_MSG_TYPE_ANNOUNCE, &tp, &b);
	dg_msg_join jn = { { "tcp://127.0.0.1:47501", 21 }, 0x2222, 0, 6 };
	emit_body(DG_MSG_JOIN, &jn, &b);
	dg_msg_raw tr = { topo_raw };
	emit_body(DG_MSG_TOPOLOGY, &tr, &b);
	dg_msg_raw sr = { { strs.data, (uint32_t)strs.len } };
	emit_body(DG_MSG_REMOVED, &sr, &b);
	emit_body(DG_MSG_TYPES_SNAPSHOT, &sr, &b);
	dg_msg_baseline bl = { DG_BASELINE_OP_ADD, { strs.data, (uint32_t)strs.len } };
	emit_body(DG_MSG_BASELINE, &bl, &b);
	dg_msg_topo_propose tpp = { 6, 1, DG_PX_ACCEPT, topo_raw };
	emit_body(DG_MSG_TOPO_PROPOSE, &tpp, &b);
	dg_msg_topo_vote tv = { 1, 7, 6, 1, 0x1111, 6, 1, 0x1111, { topo.data, (uint32_t)topo.len } };
	emit_body(DG_MSG_TOPO_VOTE, &tv, &b);

	const uint8_t *k = (const uint8_t *)"key", *v = (const uint8_t *)"value";
	dgi_msg_update up = { 42, 3, 7, 1, 0, 0x1111, 9, 0, { k, 3 }, { v, 5 }, { v, 5 } };
	emit_body(DGI_MSG_UPDATE, &up, &b);
	dgi_msg_update_res ur = { 0, 1, 0, { v, 5 } };
	emit_body(DGI_MSG_UPDATE_RES, &ur, &b);
	dgi_msg_backup bk = { 42, 3, 7, 7, 1, 1, 0, 0x1111, 9, 1, 1, 0, { k, 3 }, { v, 5 } };
	emit_body(DGI_MSG_BACKUP, &bk, &b);
	dgi_msg_get gt = { 42, 3, 7, 0, { k, 3 } };
	emit_body(DGI_MSG_GET, &gt, &b);
	dgi_msg_get_res gr = { 1, { v, 5 } };
	emit_body(DGI_MSG_GET_RES, &gr, &b);
	dgi_msg_cfg cf = { { "accounts", 8 }, 0, 1, 0, 1, 1024, 0, 0, 0 };
	emit_body(DGI_MSG_CACHE_CREATE, &cf, &b);
	dg_msg_raw pg = { page_raw };
	emit_body(DGI_MSG_SUPPLY, &pg, &b);
	emit_body(DGI_MSG_SCAN_RES, &pg, &b);
	dgi_msg_push ps = { 42, 3, page_raw };
	emit_body(DGI_MSG_PUSH, &ps, &b);
	dg_buf cfgb;
	dg_buf_init(&cfgb);
	cfg_list(&cf, &cfgb);
	dg_msg_raw cfgs = { { cfgb.data, (uint32_t)cfgb.len } };
	emit_body(DGI_MSG_CACHE_CONFIGS, &cfgs, &b);
	dg_buf_free(&cfgb);
	/* the batch messages: two items each */
	{
		static const dg_msg_type many[] = { DGI_MSG_UPDATE_ALL, DGI_MSG_UPDATE_ALL_RES,
			DGI_MSG_BACKUP_ALL, DGI_MSG_BACKUP_ALL_ACK, DGI_MSG_GET_ALL,
			DGI_MSG_GET_ALL_RES };
		static const uint32_t values[] = { 4, 3, DGI_BALL_ITEM_VALUES, 3, 2, 2 };
		for (size_t t = 0; t < sizeof(many) / sizeof(many[0]); t++) {
			dg_buf lb;
			dg_writer w;
			dg_buf_init(&lb);
			dg_writer_init(&w, reg, &lb);
			dg_write_list_begin(&w, 2 * values[t]);
			for (int i = 0; i < 2; i++) {
				struct dgi_uall_item ua = { 3, 9 + i, { k, 3 }, { v, 5 } };
				struct dgi_ures_item ur2 = { 0, 1, 0 };
				struct dgi_back_item ba = { 3, 17 + i, 0 };
				struct dgi_gall_item ga = { 3, { k, 3 } };
				struct dgi_gres_item gs = { 0, { v, 5 } };
				switch (t) {
				case 0: dgi_uall_item_put(&w, &ua); break;
				case 1: dgi_ures_item_put(&w, &ur2); break;
				case 2: dgi_ball_item_put(&w, &bk); break;
				case 3: dgi_back_item_put(&w, &ba); break;
				case 4: dgi_gall_item_put(&w, &ga); break;
				default: dgi_gres_item_put(&w, &gs); break;
				}
			}
			dg_write_end(&w);
			if (dg_writer_finish(&w) != DG_OK)
				exit(1);
			dgi_msg_many mm = { 42, 7, 1, 0, 0x1111, { lb.data, (uint32_t)lb.len } };
			emit_body(many[t], &mm, &b);
			dg_buf_free(&lb);
		}
	}

	dgi_msg_tx_lock lk = { 0x1111, 5, 1767225600000LL, 42, 1000, { k, 3 }, 7, 3, DGI_TXL_READ };
	emit_body(DGI_MSG_TX_LOCK, &lk, &b);
	dgi_msg_tx_lock_res lr = { 0, 1, 7, 1, 1, { v, 5 } };
	emit_body(DGI_MSG_TX_LOCK_RES, &lr, &b);
	{
		dg_buf lb;
		dg_writer w;
		dg_buf_init(&lb);
		dg_writer_init(&w, dgi_txwire_registry(), &lb);
		dg_write_list_begin(&w, 2 * DGI_TXLA_VALUES);
		dgi_txla_item_put(&w, &lk);
		dgi_txla_item_put(&w, &lk);
		dg_write_end(&w);
		if (dg_writer_finish(&w) != DG_OK)
			exit(1);
		dgi_msg_tx_lock_all la = { 0x1111, 5, 1767225600000LL, 42, 1000, 7,
			{ lb.data, (uint32_t)lb.len } };
		emit_body(DGI_MSG_TX_LOCK_ALL, &la, &b);
		lb.len = 0;
		dg_writer_init(&w, dgi_txwire_registry(), &lb);
		dg_write_list_begin(&w, 2 * DGI_TXLAR_VALUES);
		dgi_txla_res_put(&w, &lr);
		dgi_txla_res_put(&w, &lr);
		dg_write_end(&w);
		if (dg_writer_finish(&w) != DG_OK)
			exit(1);
		dg_msg_raw lar = { { lb.data, (uint32_t)lb.len } };
		emit_body(DGI_MSG_TX_LOCK_ALL_RES, &lar, &b);
		dg_buf_free(&lb);
	}
	dgi_msg_tx_prepare pp = { 0x1111, 5, 1767225600000LL, 1000, 7, DGI_TXP_FULL_SYNC, 0, 1,
		0, 0, { ents.data, (uint32_t)ents.len } };
	emit_body(DGI_MSG_TX_PREPARE, &pp, &b);
	emit_body(DGI_MSG_TX_COMMIT_COPY, &pp, &b);
	dg_buf prepare_enc = b;
	dg_buf_init(&b);

	const char *json = "{\"cmd\":\"local.info\",\"args\":{}}";
	struct { dg_bytes json; } adm = { { (const uint8_t *)json, (uint32_t)strlen(json) } };
	emit_body((dg_msg_type)192, &adm, &b);
	emit_body((dg_msg_type)193, &adm, &b);

	/* mode 1: frames — a HELLO alone (the handshake's recv_max), then a
	 * PING, a CACHE_GET and an error response after it */
	dg_buf_reset(&b);
	add_frame(&b, DG_MSG_HELLO, 0, 0, &hello_enc);
	uint8_t one = 0x11;
	emit("frames-hello", &one, 1, &b);
	dg_buf body;
	dg_buf_init(&body);
	encode(DG_MSG_PING, &by, &body);
	add_frame(&b, DG_MSG_PING, DG_FRAME_ONEWAY, 0, &body);
	encode(DGI_MSG_GET, &gt, &body);
	add_frame(&b, DGI_MSG_GET, 0, 9, &body);
	{
		dg_writer w;
		dg_buf_reset(&body);
		dg_writer_init(&w, reg, &body);
		dg_write_i32(&w, 5);
	}
	add_frame(&b, DGI_MSG_GET_RES, DG_FRAME_RESPONSE | DG_FRAME_ERROR, 9, &body);
	dg_buf_free(&body);
	one = 0x01;
	emit("frames-four", &one, 1, &b);

	/* mode 2: a TOPOLOGY list; mode 3: a TX_PREPARE body */
	one = 0x02;
	emit("topology", &one, 1, &topo);
	one = 0x03;
	emit("tx-prepare", &one, 1, &prepare_enc);

	dg_buf_free(&b);
	dg_buf_free(&topo);
	dg_buf_free(&strs);
	dg_buf_free(&page);
	dg_buf_free(&ents);
	dg_buf_free(&hello_enc);
	dg_buf_free(&desc);
	dg_buf_free(&prepare_enc);
	free(m);
	dg_registry_destroy(reg);
	printf("%d seeds in %s\n", nfile, dir);
	return 0;
}
