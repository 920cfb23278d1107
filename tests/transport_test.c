/*
 * transport_test.c — unit and in-process tests of transport/.
 *
 * Pure functions first (the frame header, the message table and its codecs,
 * the handshake MACs against an independent HMAC), then whole nodes in this
 * process on tcp://127.0.0.1:0: the handshake and each of its refusals,
 * hostile bytes on raw TCP sockets (before the handshake, and after one done
 * by hand with the documented transcript), request/response and its
 * failures, ordering, back-pressure, exact counters, no allocation per
 * message, concurrency including stop with requests in flight, and the
 * native tcp:// backend's own paths (reactor.c: writes that end part-way
 * under back-pressure, a peer leaving mid-frame either way, refused,
 * unanswered and by-name dials, stop with a write parked on EPOLLOUT).
 *
 * Nothing sleeps blindly: every wait polls a condition with a deadline
 * (WAIT_FOR) and fails the test when it never holds.  The ASan/UBSan and
 * TSan builds of this file are what prove "no crash, no leak, no race" for
 * the malformed-input and stop-while-busy tests.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "transport/transport.h"
#include "transport/transport_int.h"
#include "transport/member_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ThreadSanitizer and nng 1.5: a TCP dialer's last reference may be dropped
 * by the streams it made, on nng's reaper thread, after dgi_conn_reap's
 * nng_stream_dialer_free locked its mutex (posix_tcpdial.c:
 * nni_posix_tcp_dialer_rele, an atomic refcount).  libnng is not
 * instrumented, so TSan misses that ordering and reports the reaper's
 * pthread_mutex_destroy as a race.  race_top matches only the top frame of
 * the two racing accesses: this hides "mutex destroyed after another
 * thread's use", nothing else; transport's own teardown order is still
 * checked by ASan/LSan and by the races on the objects' other fields. */
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DG_TEST_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define DG_TEST_TSAN 1
#endif
#ifdef DG_TEST_TSAN
const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void)
{
	return "race_top:pthread_mutex_destroy\n";
}
#endif

/* ------------------------------------------------------------------------
 * Assertion helpers
 * ------------------------------------------------------------------------ */

#include "expect.h"

static uint64_t now_ms(void) { return dgi_now_ms(); }

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

/* Polls cond every 5 ms for up to ms; fails the test if it never holds. */
#define WAIT_FOR_MS(cond, ms)                                               \
	do {                                                                    \
		uint64_t wait_end_ = now_ms() + (ms);                               \
		while (!(cond)) {                                                   \
			if (now_ms() > wait_end_)                                       \
				fail_msg("%s:%d: waited %u ms for: %s", __FILE__, __LINE__, \
				    (unsigned)(ms), #cond);                                 \
			sleep_ms(5);                                                    \
		}                                                                   \
	} while (0)
#define WAIT_FOR(cond) WAIT_FOR_MS(cond, 5000)

/* ------------------------------------------------------------------------
 * Test message types (rows installed once, before any node starts)
 * ------------------------------------------------------------------------ */

enum {
	T_WRONG = 249,     /* the handler answers with another type (T_SINK) */
	T_SINK = 250,      /* request the handler never answers */
	T_FAIL = 251,      /* the handler answers with the error in the body */
	T_NOHANDLER = 252, /* no handler anywhere */
	T_DEFINE = 253,    /* dg_msg_define's own test */
	T_DEFINE_MAX = 254,
	T_UNUSED = 200,    /* never defined */
};

typedef struct t_i64 {
	int64_t v;
} t_i64;

static dg_err enc_t(dg_writer *w, const void *body)
{
	return dg_write_i64(w, ((const t_i64 *)body)->v);
}

static dg_err dec_t(dg_reader *r, void *body)
{
	return dg_read_i64(r, &((t_i64 *)body)->v);
}

static dg_registry *reg;

static int group_setup(void **state)
{
	static const dg_msg_row sink = { "TEST_SINK", sizeof(t_i64), enc_t, dec_t, DG_MSG_UNKNOWN };
	static const dg_msg_row fail = { "TEST_FAIL", sizeof(t_i64), enc_t, dec_t, DG_MSG_UNKNOWN };
	static const dg_msg_row noh = { "TEST_NOHANDLER", sizeof(t_i64), enc_t, dec_t,
		DG_MSG_UNKNOWN };
	static const dg_msg_row wrong = { "TEST_WRONG", sizeof(t_i64), enc_t, dec_t,
		(dg_msg_type)T_WRONG };
	(void)state;
	signal(SIGPIPE, SIG_IGN); /* raw sockets write to nodes that hung up */
	if (dg_registry_create(&reg) != DG_OK)
		return -1;
	if (dg_msg_define((dg_msg_type)T_SINK, &sink) != DG_OK ||
	    dg_msg_define((dg_msg_type)T_FAIL, &fail) != DG_OK ||
	    dg_msg_define((dg_msg_type)T_WRONG, &wrong) != DG_OK ||
	    dg_msg_define((dg_msg_type)T_NOHANDLER, &noh) != DG_OK)
		return -1;
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	dg_registry_destroy(reg);
	return 0;
}

/* ------------------------------------------------------------------------
 * Nodes
 * ------------------------------------------------------------------------ */

struct peer_log {
	_Atomic int ups, downs;
	_Atomic dg_node_id last_up, last_down;
	_Atomic int why;
};

static void on_peer_log(void *ctx, dg_node_id peer, bool up, dg_err why)
{
	struct peer_log *l = ctx;
	if (up) {
		atomic_store(&l->last_up, peer);
		atomic_fetch_add(&l->ups, 1);
	} else {
		atomic_store(&l->last_down, peer);
		atomic_store(&l->why, (int)why);
		atomic_fetch_add(&l->downs, 1);
	}
}

typedef struct node_opt {
	const char *secret;
	const char *cluster;
	size_t recv_max;
	size_t send_queue_max;
	uint32_t connect_timeout_ms;
	dg_node_id id;
	struct peer_log *log;
	const char *url;
	uint32_t max_handshakes;
	uint32_t wait_spin_us;
	int64_t reactor_spin_us;     /* 0: the default; < 0: none */
} node_opt;

static dg_tp *node_start(const node_opt *o)
{
	dg_tp_config cfg;
	dg_tp *tp = NULL;
	dg_tp_config_init(&cfg);
	cfg.reg = reg;
	if (o->secret != NULL) {
		cfg.secret = (const uint8_t *)o->secret;
		cfg.secret_len = strlen(o->secret);
	}
	if (o->cluster != NULL)
		cfg.cluster_name = o->cluster;
	if (o->recv_max)
		cfg.recv_max = o->recv_max;
	if (o->send_queue_max)
		cfg.send_queue_max = o->send_queue_max;
	if (o->connect_timeout_ms)
		cfg.connect_timeout_ms = o->connect_timeout_ms;
	cfg.max_handshakes = o->max_handshakes;
	if (o->wait_spin_us)
		cfg.wait_spin_us = o->wait_spin_us;
	if (o->reactor_spin_us)
		cfg.reactor_spin_us = o->reactor_spin_us < 0 ? 0 : (uint32_t)o->reactor_spin_us;
	cfg.node_id = o->id;
	if (o->url != NULL)
		cfg.listen_url = o->url;
	if (o->log != NULL) {
		cfg.on_peer = on_peer_log;
		cfg.on_peer_ctx = o->log;
	}
	OK(dg_tp_start(&cfg, &tp));
	assert_non_null(tp);
	return tp;
}
#define NODE(...) node_start(&(const node_opt){ __VA_ARGS__ })

static dg_node_id connect_ok(dg_tp *from, dg_tp *to)
{
	dg_node_id peer = 0;
	OK(dg_tp_connect(from, dg_tp_address(to), &peer));
	assert_int_equal(peer, dg_tp_self(to));
	return peer;
}

static dg_tp_stats stats(const dg_tp *tp)
{
	dg_tp_stats s;
	dg_tp_get_stats(tp, &s);
	return s;
}

static dg_tp_stats peer_stats(const dg_tp *tp, dg_node_id peer)
{
	dg_tp_stats s;
	OK(dg_tp_peer_stats(tp, peer, &s));
	return s;
}

static dg_msg_counters ctr(const dg_tp *tp, dg_msg_type type)
{
	dg_msg_metric m[DG_MSG__COUNT];
	dg_msg_counters none = { 0, 0, 0, 0, 0 };
	size_t n = dg_tp_metrics(tp, m, DG_MSG__COUNT);
	for (size_t i = 0; i < n && i < DG_MSG__COUNT; i++)
		if (m[i].type == type)
			return m[i].c;
	fail_msg("type %d is not listed by dg_tp_metrics", (int)type);
	return none;
}

/* Live connections of a node (internal list; closed ones leave it). */
static int conn_count(dg_tp *tp)
{
	int n = 0;
	pthread_mutex_lock(&tp->mu);
	for (struct conn *c = tp->conns; c != NULL; c = c->next)
		n++;
	pthread_mutex_unlock(&tp->mu);
	return n;
}

/* PING round trip: the reply must echo text. */
static dg_err ping(dg_tp *from, dg_node_id to, const char *text)
{
	uint8_t mem[256];
	dg_arena a;
	dg_msg_bytes q = { { (const uint8_t *)text, (uint32_t)strlen(text) } };
	dg_msg_bytes r = { { NULL, 0 } };
	dg_arena_init(&a, mem, sizeof(mem));
	dg_err e = dg_tp_call(from, to, DG_MSG_PING, &q, 5000, &r, &a);
	if (e == DG_OK && (r.data.len != q.data.len || r.data.ptr == NULL ||
	    memcmp(r.data.ptr, text, r.data.len) != 0))
		fail_msg("PING reply does not echo \"%s\"", text);
	return e;
}

/* ---- handlers ---- */

/* Counts messages and checks that 8-byte sequence numbers arrive in order. */
struct counter {
	_Atomic uint64_t n;
	_Atomic uint64_t misordered;
	_Atomic uint64_t last;
};

static uint64_t seq_of(const dg_msg_in *in)
{
	uint64_t seq = 0;
	if (in->type == DG_MSG_ECHO || in->type == DG_MSG_PING) {
		const dg_msg_bytes *m = in->body;
		if (m->data.len >= 8)
			memcpy(&seq, m->data.ptr, 8);
	} else if (in->type == (dg_msg_type)T_SINK || in->type == (dg_msg_type)T_FAIL) {
		seq = (uint64_t)((const t_i64 *)in->body)->v;
	}
	return seq;
}

static void on_count(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	struct counter *c = ctx;
	uint64_t seq = seq_of(in);
	(void)tp;
	if (seq != atomic_load(&c->n))
		atomic_fetch_add(&c->misordered, 1);
	atomic_store(&c->last, seq);
	atomic_fetch_add(&c->n, 1);
}

/* Answers with the dg_err in the body. */
static void on_fail(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	(void)ctx;
	dg_tp_reply_error(tp, in, (dg_err)((const t_i64 *)in->body)->v);
}

/* Result of an asynchronous request. */
struct result {
	_Atomic int calls;
	_Atomic int err;
	_Atomic uint64_t at_ms;
};

static void on_result(void *ctx, dg_err err, const dg_msg_in *reply)
{
	struct result *r = ctx;
	(void)reply;
	atomic_store(&r->err, (int)err);
	atomic_store(&r->at_ms, now_ms());
	atomic_fetch_add(&r->calls, 1);
}

/* ---- frames built by hand ---- */

static void frame_raw(dg_buf *out, uint8_t version, uint8_t flags, uint16_t type,
    uint32_t body_len, uint64_t corr, dg_node_id sender, const void *body, size_t n)
{
	dg_frame_header h = { version, flags, type, body_len, corr, sender };
	OK(dg_buf_reserve(out, DG_FRAME_HEADER + n));
	dgi_frame_put(out->data + out->len, &h);
	if (n > 0)
		memcpy(out->data + out->len + DG_FRAME_HEADER, body, n);
	out->len += DG_FRAME_HEADER + n;
}

/* Encodes a body of a row into b (appended). */
static void body_enc(dg_buf *b, dg_msg_type type, const void *body)
{
	dg_writer w;
	dg_writer_init(&w, reg, b);
	OK(dg_msg_encode(type, body, &w));
}

static size_t body_len_of(dg_msg_type type, const void *body)
{
	dg_buf b;
	dg_buf_init(&b);
	body_enc(&b, type, body);
	size_t n = b.len;
	dg_buf_free(&b);
	return n;
}

/* A well-formed frame of a row's body. */
static void frame_msg(dg_buf *out, uint8_t flags, dg_msg_type type, uint64_t corr,
    dg_node_id sender, const void *body)
{
	dg_buf b;
	dg_buf_init(&b);
	if (body != NULL)
		body_enc(&b, type, body);
	frame_raw(out, DG_FRAME_VERSION, flags, (uint16_t)type, (uint32_t)b.len, corr,
	    sender, b.data, b.len);
	dg_buf_free(&b);
}

/* A frame whose body is one I32 (error responses, wrong-kind bodies). */
static void frame_i32(dg_buf *out, uint8_t flags, uint16_t type, uint64_t corr,
    dg_node_id sender, int32_t v)
{
	dg_buf b;
	dg_writer w;
	dg_buf_init(&b);
	dg_writer_init(&w, reg, &b);
	OK(dg_write_i32(&w, v));
	frame_raw(out, DG_FRAME_VERSION, flags, type, (uint32_t)b.len, corr, sender,
	    b.data, b.len);
	dg_buf_free(&b);
}

/* ------------------------------------------------------------------------
 * 1. Frame header
 * ------------------------------------------------------------------------ */

static void test_frame_header_layout(void **state)
{
	(void)state;
	uint8_t p[DG_FRAME_HEADER + 4];
	dg_frame_header h = { DG_FRAME_VERSION, DG_FRAME_RESPONSE | DG_FRAME_ERROR,
		0x00FE, 0x03040506u, 0x1122334455667788ull, 0x99AABBCCDDEEFF01ull };
	static const uint8_t want[DG_FRAME_HEADER] = {
		0x01, 0x03, 0xFE, 0x00,                         /* version, flags, type */
		0x06, 0x05, 0x04, 0x03,                         /* body length */
		0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, /* correlation id */
		0x01, 0xFF, 0xEE, 0xDD, 0xCC, 0xBB, 0xAA, 0x99, /* sender */
	};
	memset(p, 0xEE, sizeof(p));
	dgi_frame_put(p, &h);
	assert_memory_equal(p, want, DG_FRAME_HEADER);
	for (size_t i = DG_FRAME_HEADER; i < sizeof(p); i++)
		assert_int_equal(p[i], 0xEE); /* nothing written past the header */

	/* the type's high byte goes to offset 3 */
	h.type = 0x0102;
	dgi_frame_put(p, &h);
	assert_int_equal(p[2], 0x02);
	assert_int_equal(p[3], 0x01);
}

static void test_frame_header_roundtrip(void **state)
{
	(void)state;
	const size_t max = 16u << 20;
	const uint16_t types[] = { 0, 1, DG_MSG_PING, DG_MSG_ECHO, 63, 64, 200, 255 };
	const uint32_t lens[] = { 0, 1, 24, 4096, (uint32_t)max };
	const uint64_t ids[] = { 0, 1, 0x8000000000000000ull, UINT64_MAX };
	uint8_t p[DG_FRAME_HEADER];
	for (unsigned flags = 0; flags <= DG_FRAME_FLAGS_KNOWN; flags++)
		for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++)
			for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++)
				for (size_t k = 0; k < sizeof(ids) / sizeof(ids[0]); k++) {
					dg_frame_header h = { DG_FRAME_VERSION, (uint8_t)flags,
						types[t], lens[l], ids[k] ^ 0x5A5A, ids[k] }, g;
					memset(&g, 0xCC, sizeof(g));
					dgi_frame_put(p, &h);
					OK(dgi_frame_get(p, max, &g));
					assert_int_equal(g.version, h.version);
					assert_int_equal(g.flags, h.flags);
					assert_int_equal(g.type, h.type);
					assert_int_equal(g.body_len, h.body_len);
					assert_int_equal(g.corr, h.corr);
					assert_int_equal(g.sender, h.sender);
				}
}

static void test_frame_header_rejections(void **state)
{
	(void)state;
	uint8_t p[DG_FRAME_HEADER];
	dg_frame_header good = { DG_FRAME_VERSION, 0, DG_MSG_PING, 100, 7, 9 }, h, g;

	dgi_frame_put(p, &good);
	OK(dgi_frame_get(p, 100, &g)); /* body == limit: accepted */

	const uint8_t versions[] = { 0, 2, 0x81, 0xFF };
	for (size_t i = 0; i < sizeof(versions); i++) {
		h = good;
		h.version = versions[i];
		dgi_frame_put(p, &h);
		EXPECT(dgi_frame_get(p, 1000, &g), DG_ERR_BAD_TAG);
	}
	for (unsigned bit = 3; bit < 8; bit++) {
		h = good;
		h.flags = (uint8_t)(DG_FRAME_RESPONSE | 1u << bit);
		dgi_frame_put(p, &h);
		EXPECT(dgi_frame_get(p, 1000, &g), DG_ERR_BAD_TAG);
	}
	const uint16_t types[] = { DG_MSG__COUNT, DG_MSG__COUNT + 1, 0x1000, 0xFFFF };
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		h = good;
		h.type = types[i];
		dgi_frame_put(p, &h);
		EXPECT(dgi_frame_get(p, 1000, &g), DG_ERR_BAD_TAG);
	}
	h = good;
	h.body_len = 101;
	dgi_frame_put(p, &h);
	EXPECT(dgi_frame_get(p, 100, &g), DG_ERR_LIMIT);
	h.body_len = UINT32_MAX;
	dgi_frame_put(p, &h);
	EXPECT(dgi_frame_get(p, 16u << 20, &g), DG_ERR_LIMIT);
	/* the tag checks come first: a bad version with a huge body is BAD_TAG */
	h.version = 2;
	dgi_frame_put(p, &h);
	EXPECT(dgi_frame_get(p, 100, &g), DG_ERR_BAD_TAG);
}

/* ------------------------------------------------------------------------
 * 2. Message table
 * ------------------------------------------------------------------------ */

static uint8_t nonce_a[DG_NONCE_LEN], nonce_b[DG_NONCE_LEN];

/* The encoding the last row_roundtrip decoded (out's views point into it). */
static dg_buf rt_enc;

/* Encodes body with the row, compares with the bytes a writer produces for
 * the documented field order (ref), decodes it back into out. */
static void row_roundtrip(dg_msg_type type, const void *body, const dg_buf *ref,
    void *out)
{
	dg_buf *b = &rt_enc;
	dg_buf_reset(b);
	body_enc(b, type, body);
	assert_int_equal(b->len, ref->len);
	if (b->len > 0)
		assert_memory_equal(b->data, ref->data, b->len);
	OK(dg_msg_decode(type, reg, b->data, b->len, out));

	/* any trailing value is refused */
	dg_buf t;
	dg_writer w;
	dg_buf_init(&t);
	OK(dg_buf_reserve(&t, b->len + 1));
	if (b->len > 0)
		memcpy(t.data, b->data, b->len);
	t.len = b->len;
	dg_writer_init(&w, reg, &t);
	OK(dg_write_null(&w));
	_Alignas(16) uint8_t scratch[DG_MSG_BODY_MAX];
	EXPECT(dg_msg_decode(type, reg, t.data, t.len, scratch), DG_ERR_BAD_LENGTH);
	/* and every proper prefix of a non-empty body fails without a crash */
	for (size_t n = 0; n < b->len; n++)
		if (dg_msg_decode(type, reg, b->data, n, scratch) == DG_OK)
			fail_msg("%s: a %zu-byte prefix of %zu decoded", dg_msg_name(type), n,
			    b->len);
	dg_buf_free(&t);
}

static void ref_start(dg_buf *b, dg_writer *w)
{
	dg_buf_reset(b);
	dg_writer_init(w, reg, b);
}

static void assert_str(dg_str s, const char *want)
{
	assert_non_null(s.ptr);
	assert_int_equal(s.len, strlen(want));
	assert_memory_equal(s.ptr, want, s.len);
}

static void assert_bytes(dg_bytes s, const void *want, size_t n)
{
	assert_non_null(s.ptr);
	assert_int_equal(s.len, n);
	if (n > 0)
		assert_memory_equal(s.ptr, want, n);
}

static void test_msg_rows_roundtrip(void **state)
{
	(void)state;
	dg_buf ref;
	dg_writer w;
	dg_buf_init(&ref);
	for (int i = 0; i < DG_NONCE_LEN; i++) {
		nonce_a[i] = (uint8_t)(i * 7 + 1);
		nonce_b[i] = (uint8_t)(255 - i);
	}

	{ /* HELLO: I32 version, STRING cluster, I64 id, STRING address, BYTES nonce, BOOL auth */
		dg_msg_hello m = { 1, { "grid-é", 7 }, -5000000000LL, { "tcp://10.0.0.1:47500", 20 },
			{ nonce_a, DG_NONCE_LEN }, true }, o;
		ref_start(&ref, &w);
		OK(dg_write_i32(&w, 1));
		OK(dg_write_str(&w, "grid-é", 7));
		OK(dg_write_i64(&w, -5000000000LL));
		OK(dg_write_str(&w, "tcp://10.0.0.1:47500", 20));
		OK(dg_write_bytes(&w, nonce_a, DG_NONCE_LEN));
		OK(dg_write_bool(&w, true));
		row_roundtrip(DG_MSG_HELLO, &m, &ref, &o);
		assert_int_equal(o.version, 1);
		assert_str(o.cluster, "grid-é");
		assert_int_equal(o.node_id, -5000000000LL);
		assert_str(o.address, "tcp://10.0.0.1:47500");
		assert_bytes(o.nonce, nonce_a, DG_NONCE_LEN);
		assert_true(o.auth);
	}
	{ /* CHALLENGE: I64 id, BYTES nonce, BOOL auth, BYTES mac */
		dg_msg_challenge m = { INT64_MAX, { nonce_b, DG_NONCE_LEN }, false,
			{ nonce_a, DG_MAC_LEN } }, o;
		ref_start(&ref, &w);
		OK(dg_write_i64(&w, INT64_MAX));
		OK(dg_write_bytes(&w, nonce_b, DG_NONCE_LEN));
		OK(dg_write_bool(&w, false));
		OK(dg_write_bytes(&w, nonce_a, DG_MAC_LEN));
		row_roundtrip(DG_MSG_CHALLENGE, &m, &ref, &o);
		assert_int_equal(o.node_id, INT64_MAX);
		assert_bytes(o.nonce, nonce_b, DG_NONCE_LEN);
		assert_false(o.auth);
		assert_bytes(o.mac, nonce_a, DG_MAC_LEN);
	}
	{ /* PROOF: BYTES mac */
		dg_msg_proof m = { { nonce_b, DG_MAC_LEN } }, o;
		ref_start(&ref, &w);
		OK(dg_write_bytes(&w, nonce_b, DG_MAC_LEN));
		row_roundtrip(DG_MSG_PROOF, &m, &ref, &o);
		assert_bytes(o.mac, nonce_b, DG_MAC_LEN);
	}
	{ /* WELCOME, LEAVE: empty */
		uint8_t o[8];
		ref_start(&ref, &w);
		row_roundtrip(DG_MSG_WELCOME, NULL, &ref, o);
		row_roundtrip(DG_MSG_LEAVE, NULL, &ref, o);
	}
	{ /* REJECT: I32 reason, STRING text */
		dg_msg_reject m = { DG_REJECT_DUPLICATE, { "already connected", 17 } }, o;
		ref_start(&ref, &w);
		OK(dg_write_i32(&w, DG_REJECT_DUPLICATE));
		OK(dg_write_str(&w, "already connected", 17));
		row_roundtrip(DG_MSG_REJECT, &m, &ref, &o);
		assert_int_equal(o.reason, DG_REJECT_DUPLICATE);
		assert_str(o.text, "already connected");
	}
	{ /* PING, ECHO, TYPE_PROPOSE, TYPE_ANNOUNCE: BYTES */
		const dg_msg_type bt[] = { DG_MSG_PING, DG_MSG_ECHO, DG_MSG_TYPE_PROPOSE,
			DG_MSG_TYPE_ANNOUNCE };
		for (size_t i = 0; i < 4; i++) {
			dg_msg_bytes m = { { (const uint8_t *)"payload\0x", 9 } }, o;
			ref_start(&ref, &w);
			OK(dg_write_bytes(&w, "payload\0x", 9));
			row_roundtrip(bt[i], &m, &ref, &o);
			assert_bytes(o.data, "payload\0x", 9);
			/* a NULL payload of length 0 is an empty payload, not null */
			dg_msg_bytes e = { { NULL, 0 } };
			ref_start(&ref, &w);
			OK(dg_write_bytes(&w, "", 0));
			row_roundtrip(bt[i], &e, &ref, &o);
			assert_non_null(o.data.ptr);
			assert_int_equal(o.data.len, 0);
		}
	}
	{ /* TOPO_VOTE: eight I64, BYTES */
		dg_msg_topo_vote m = { 1, 9, 8, 3, 77, 8, 2, 66, { (const uint8_t *)"\x0f\x00", 2 } }, o;
		ref_start(&ref, &w);
		for (int k = 0; k < 8; k++)
			OK(dg_write_i64(&w, ((const int64_t *)&m)[k]));
		OK(dg_write_bytes(&w, "\x0f\x00", 2));
		row_roundtrip(DG_MSG_TOPO_VOTE, &m, &ref, &o);
		assert_int_equal(o.granted, 1);
		assert_int_equal(o.version, 9);
		assert_int_equal(o.promised_base, 8);
		assert_int_equal(o.promised_round, 3);
		assert_int_equal(o.promised_from, 77);
		assert_int_equal(o.acc_base, 8);
		assert_int_equal(o.acc_round, 2);
		assert_int_equal(o.acc_from, 66);
		assert_int_equal(o.acc.len, 2);
		assert_memory_equal(o.acc.ptr, "\x0f\x00", 2);
		m.acc = (dg_bytes){ NULL, 0 }; /* none: empty, not null */
		ref_start(&ref, &w);
		for (int k = 0; k < 8; k++)
			OK(dg_write_i64(&w, ((const int64_t *)&m)[k]));
		OK(dg_write_bytes(&w, "", 0));
		row_roundtrip(DG_MSG_TOPO_VOTE, &m, &ref, &o);
		assert_non_null(o.acc.ptr);
		assert_int_equal(o.acc.len, 0);
	}
	{ /* NODE_FAILED: I64, I64; JOIN_ACK, HEARTBEAT: four I64 */
		const dg_msg_type tt[] = { DG_MSG_NODE_FAILED };
		for (size_t i = 0; i < 1; i++) {
			dg_msg_node_failed m = { 42 + (int64_t)i, -1 }, o = { 0, 0 };
			ref_start(&ref, &w);
			OK(dg_write_i64(&w, 42 + (int64_t)i));
			OK(dg_write_i64(&w, -1));
			row_roundtrip(tt[i], &m, &ref, &o);
			assert_int_equal(o.node_id, 42 + (int64_t)i);
			assert_int_equal(o.topology_version, -1);
		}
		dg_msg_heartbeat h = { 5, 123456, 123000, DG_HB_ANSWER }, ho;
		ref_start(&ref, &w);
		OK(dg_write_i64(&w, 5));
		OK(dg_write_i64(&w, 123456));
		OK(dg_write_i64(&w, 123000));
		OK(dg_write_i64(&w, DG_HB_ANSWER));
		row_roundtrip(DG_MSG_HEARTBEAT, &h, &ref, &ho);
		assert_int_equal(ho.topology_version, 5);
		assert_int_equal(ho.time_ms, 123456);
		assert_int_equal(ho.echo_ms, 123000);
		assert_int_equal(ho.flags, DG_HB_ANSWER);
		dg_msg_join_ack a = { 7, 3, 1000, 200 }, ao;
		ref_start(&ref, &w);
		OK(dg_write_i64(&w, 7));
		OK(dg_write_i64(&w, 3));
		OK(dg_write_i64(&w, 1000));
		OK(dg_write_i64(&w, 200));
		row_roundtrip(DG_MSG_JOIN_ACK, &a, &ref, &ao);
		assert_int_equal(ao.topology_version, 7);
		assert_int_equal(ao.order, 3);
		assert_int_equal(ao.failure_timeout_ms, 1000);
		assert_int_equal(ao.heartbeat_ms, 200);
		dg_msg_node_failed f = { 99, 8 }, fo;
		ref_start(&ref, &w);
		OK(dg_write_i64(&w, 99));
		OK(dg_write_i64(&w, 8));
		row_roundtrip(DG_MSG_NODE_FAILED, &f, &ref, &fo);
		assert_int_equal(fo.node_id, 99);
		assert_int_equal(fo.topology_version, 8);
	}
	{ /* JOIN: STRING address, I64 id, I64 attributes */
		dg_msg_join m = { { "tcp://h:1", 9 }, 1234567, DG_NODE_CLIENT, 77 }, o;
		ref_start(&ref, &w);
		OK(dg_write_str(&w, "tcp://h:1", 9));
		OK(dg_write_i64(&w, 1234567));
		OK(dg_write_i64(&w, DG_NODE_CLIENT));
		OK(dg_write_i64(&w, 77));
		row_roundtrip(DG_MSG_JOIN, &m, &ref, &o);
		assert_str(o.address, "tcp://h:1");
		assert_int_equal(o.node_id, 1234567);
		assert_int_equal(o.attrs, DG_NODE_CLIENT);
		assert_int_equal(o.floor, 77);
	}
	{ /* TOPOLOGY, REMOVED, TYPES_SNAPSHOT: one LIST, kept whole */
		dg_buf list;
		dg_writer lw;
		dg_buf_init(&list);
		dg_writer_init(&lw, reg, &list);
		OK(dg_write_list_begin(&lw, 4));
		OK(dg_write_i64(&lw, 5));
		OK(dg_write_i64(&lw, 0x1111));
		OK(dg_write_i64(&lw, 1));
		OK(dg_write_str(&lw, "tcp://a:1", 9));
		OK(dg_write_end(&lw));
		OK(dg_writer_finish(&lw));
		const dg_msg_type lt[] = { DG_MSG_TOPOLOGY, DG_MSG_REMOVED, DG_MSG_TYPES_SNAPSHOT };
		for (size_t i = 0; i < sizeof(lt) / sizeof(lt[0]); i++) {
			dg_msg_raw m = { { list.data, (uint32_t)list.len } }, o;
			dg_buf_reset(&ref);
			OK(dg_buf_reserve(&ref, list.len));
			memcpy(ref.data, list.data, list.len);
			ref.len = list.len;
			row_roundtrip(lt[i], &m, &ref, &o);
			assert_int_equal(o.list.len, list.len);
			/* not a list: refused */
			_Alignas(16) uint8_t scratch[DG_MSG_BODY_MAX];
			ref_start(&ref, &w);
			OK(dg_write_i64(&w, 5));
			EXPECT(dg_msg_decode(lt[i], reg, ref.data, ref.len, scratch),
			    DG_ERR_TYPE_MISMATCH);
		}
		/* dg_msg_list_put copies a list without walking it: what is not
		 * a LIST is refused there, a NULL written as one, and a broken
		 * list (its count says one value more than it holds) gets through
		 * the sender but not dg_msg_list_get at the receiver */
		dg_buf enc;
		dg_buf_init(&enc);
		dg_writer ew;
		uint8_t one_i64[] = { 0x06, 0x0A }, tag_only[] = { 0x0F };
		const dg_raw not_list[] = { { one_i64, 2 }, { tag_only, 1 }, { list.data, 0 } };
		for (size_t i = 0; i < sizeof(not_list) / sizeof(not_list[0]); i++) {
			dg_writer_init(&ew, reg, &enc);
			EXPECT(dg_msg_list_put(&ew, &not_list[i]), DG_ERR_TYPE_MISMATCH);
		}
		dg_buf_reset(&enc);
		dg_writer_init(&ew, reg, &enc);
		const dg_raw none = { NULL, 0 };
		OK(dg_msg_list_put(&ew, &none));
		OK(dg_writer_finish(&ew));
		assert_int_equal(enc.len, 1);
		assert_int_equal(enc.data[0], 0x00); /* NULL */
		_Alignas(16) uint8_t scratch[DG_MSG_BODY_MAX];
		EXPECT(dg_msg_decode(DG_MSG_TOPOLOGY, reg, enc.data, enc.len, scratch),
		    DG_ERR_TYPE_MISMATCH);
		assert_true(list.data[1] < 0x7F); /* (a one-byte count) */
		list.data[1]++;
		dg_buf_reset(&enc);
		dg_writer_init(&ew, reg, &enc);
		OK(dg_msg_list_put(&ew, &(dg_raw){ list.data, (uint32_t)list.len }));
		OK(dg_writer_finish(&ew));
		EXPECT(dg_msg_decode(DG_MSG_TOPOLOGY, reg, enc.data, enc.len, scratch),
		    DG_ERR_TRUNCATED);
		dg_buf_free(&enc);
		dg_buf_free(&list);
	}
	dg_buf_free(&ref);
	dg_buf_free(&rt_enc);
}

static void test_msg_decode_errors(void **state)
{
	(void)state;
	uint8_t big[64] = { 0 };
	_Alignas(16) uint8_t scratch[DG_MSG_BODY_MAX];
	dg_buf b;
	dg_writer w;
	dg_buf_init(&b);

	/* HELLO with a 31- and a 33-byte nonce */
	for (uint32_t n = DG_NONCE_LEN - 1; n <= DG_NONCE_LEN + 1; n += 2) {
		dg_msg_hello h = { 1, { "c", 1 }, 1, { "", 0 }, { big, n }, false };
		dg_buf_reset(&b);
		body_enc(&b, DG_MSG_HELLO, &h);
		EXPECT(dg_msg_decode(DG_MSG_HELLO, reg, b.data, b.len, scratch), DG_ERR_BAD_LENGTH);
		/* CHALLENGE: wrong nonce, then wrong mac */
		dg_msg_challenge c1 = { 1, { big, n }, true, { big, DG_MAC_LEN } };
		dg_buf_reset(&b);
		body_enc(&b, DG_MSG_CHALLENGE, &c1);
		EXPECT(dg_msg_decode(DG_MSG_CHALLENGE, reg, b.data, b.len, scratch), DG_ERR_BAD_LENGTH);
		dg_msg_challenge c2 = { 1, { big, DG_NONCE_LEN }, true, { big, n } };
		dg_buf_reset(&b);
		body_enc(&b, DG_MSG_CHALLENGE, &c2);
		EXPECT(dg_msg_decode(DG_MSG_CHALLENGE, reg, b.data, b.len, scratch), DG_ERR_BAD_LENGTH);
		dg_msg_proof p = { { big, n } };
		dg_buf_reset(&b);
		body_enc(&b, DG_MSG_PROOF, &p);
		EXPECT(dg_msg_decode(DG_MSG_PROOF, reg, b.data, b.len, scratch), DG_ERR_BAD_LENGTH);
	}
	/* a null BYTES where a mac or a payload belongs */
	ref_start(&b, &w);
	OK(dg_write_null(&w));
	EXPECT(dg_msg_decode(DG_MSG_PROOF, reg, b.data, b.len, scratch), DG_ERR_BAD_LENGTH);
	assert_int_not_equal(dg_msg_decode(DG_MSG_PING, reg, b.data, b.len, scratch), DG_OK);
	/* a field of another kind */
	ref_start(&b, &w);
	OK(dg_write_i32(&w, 5));
	EXPECT(dg_msg_decode(DG_MSG_PING, reg, b.data, b.len, scratch), DG_ERR_TYPE_MISMATCH);
	ref_start(&b, &w);
	OK(dg_write_str(&w, "x", 1));
	EXPECT(dg_msg_decode(DG_MSG_HELLO, reg, b.data, b.len, scratch), DG_ERR_TYPE_MISMATCH);
	/* an empty body where fields are due */
	assert_int_not_equal(dg_msg_decode(DG_MSG_HEARTBEAT, reg, b.data, 0, scratch), DG_OK);
	/* rows not in use */
	EXPECT(dg_msg_decode(DG_MSG_UNKNOWN, reg, b.data, b.len, scratch), DG_ERR_INVAL);
	EXPECT(dg_msg_decode((dg_msg_type)T_UNUSED, reg, b.data, b.len, scratch), DG_ERR_INVAL);
	ref_start(&b, &w);
	EXPECT(dg_msg_encode(DG_MSG_UNKNOWN, scratch, &w), DG_ERR_INVAL);
	EXPECT(dg_msg_encode((dg_msg_type)T_UNUSED, scratch, &w), DG_ERR_INVAL);
	assert_int_equal(b.len, 0);
	/* an encoder error comes back (invalid UTF-8 in a STRING field) */
	dg_msg_join j = { { "\xff\xfe", 2 }, 1, 0, 0 };
	ref_start(&b, &w);
	EXPECT(dg_msg_encode(DG_MSG_JOIN, &j, &w), DG_ERR_UTF8);
	dg_buf_free(&b);
}

static void test_msg_define(void **state)
{
	(void)state;
	const dg_msg_row row = { "TEST_DEFINE", sizeof(t_i64), enc_t, dec_t, DG_MSG_UNKNOWN };
	dg_msg_row bad;

	assert_string_equal(dg_msg_name((dg_msg_type)T_DEFINE), "?");
	assert_null(dg_msg_row_of((dg_msg_type)T_DEFINE));
	/* transport's range, out of range, NULL row */
	EXPECT(dg_msg_define(DG_MSG_UNKNOWN, &row), DG_ERR_INVAL);
	EXPECT(dg_msg_define(DG_MSG_PING, &row), DG_ERR_INVAL);
	EXPECT(dg_msg_define((dg_msg_type)40, &row), DG_ERR_INVAL);
	EXPECT(dg_msg_define(DG_MSG_TRANSPORT_LAST, &row), DG_ERR_INVAL);
	EXPECT(dg_msg_define(DG_MSG__COUNT, &row), DG_ERR_INVAL);
	EXPECT(dg_msg_define((dg_msg_type)1000, &row), DG_ERR_INVAL);
	EXPECT(dg_msg_define((dg_msg_type)T_DEFINE, NULL), DG_ERR_INVAL);
	bad = row;
	bad.name = NULL;
	EXPECT(dg_msg_define((dg_msg_type)T_DEFINE, &bad), DG_ERR_INVAL);
	bad = row;
	bad.encode = NULL;
	EXPECT(dg_msg_define((dg_msg_type)T_DEFINE, &bad), DG_ERR_INVAL);
	bad = row;
	bad.decode = NULL;
	EXPECT(dg_msg_define((dg_msg_type)T_DEFINE, &bad), DG_ERR_INVAL);
	bad = row;
	bad.body_size = DG_MSG_BODY_MAX + 1;
	EXPECT(dg_msg_define((dg_msg_type)T_DEFINE, &bad), DG_ERR_INVAL);
	/* none of those installed anything */
	assert_string_equal(dg_msg_name((dg_msg_type)T_DEFINE), "?");
	assert_null(dg_msg_row_of((dg_msg_type)T_DEFINE));

	/* the largest body is allowed */
	bad = row;
	bad.name = "TEST_DEFINE_MAX";
	bad.body_size = DG_MSG_BODY_MAX;
	OK(dg_msg_define((dg_msg_type)T_DEFINE_MAX, &bad));

	OK(dg_msg_define((dg_msg_type)T_DEFINE, &row));
	assert_string_equal(dg_msg_name((dg_msg_type)T_DEFINE), "TEST_DEFINE");
	const dg_msg_row *r = dg_msg_row_of((dg_msg_type)T_DEFINE);
	assert_non_null(r);
	assert_ptr_equal(r->encode, enc_t);
	assert_int_equal(r->body_size, sizeof(t_i64));
	/* the same name again: fine, and the first row stays */
	bad = row;
	bad.body_size = 1;
	OK(dg_msg_define((dg_msg_type)T_DEFINE, &bad));
	assert_int_equal(dg_msg_row_of((dg_msg_type)T_DEFINE)->body_size, sizeof(t_i64));
	/* another name: a conflict, nothing changes */
	bad = row;
	bad.name = "SOMETHING_ELSE";
	EXPECT(dg_msg_define((dg_msg_type)T_DEFINE, &bad), DG_ERR_CONFLICT);
	assert_string_equal(dg_msg_name((dg_msg_type)T_DEFINE), "TEST_DEFINE");
	EXPECT(dg_msg_define((dg_msg_type)T_SINK, &bad), DG_ERR_CONFLICT);

	/* the defined row encodes and decodes through the table */
	dg_buf b;
	dg_writer w;
	t_i64 in = { -77 }, out = { 0 };
	dg_buf_init(&b);
	dg_writer_init(&w, reg, &b);
	OK(dg_msg_encode((dg_msg_type)T_DEFINE, &in, &w));
	OK(dg_msg_decode((dg_msg_type)T_DEFINE, reg, b.data, b.len, &out));
	assert_int_equal(out.v, -77);
	dg_buf_free(&b);

	/* names */
	static const char *const names[] = { "UNKNOWN", "HELLO", "CHALLENGE", "PROOF",
		"WELCOME", "REJECT", "PING", "HEARTBEAT", "JOIN", "JOIN_ACK", "TOPOLOGY",
		"NODE_FAILED", "TYPE_PROPOSE", "TYPE_ANNOUNCE", "TYPES_SNAPSHOT", "LEAVE",
		"ECHO", "BASELINE", "BASELINE_ACK", "REMOVED", "TOPO_PROPOSE", "TOPO_VOTE" };
	for (int t = 0; t <= DG_MSG_TOPO_VOTE; t++)
		assert_string_equal(dg_msg_name((dg_msg_type)t), names[t]);
	assert_null(dg_msg_row_of(DG_MSG_UNKNOWN)); /* a name, but no codec */
	assert_string_equal(dg_msg_name((dg_msg_type)(DG_MSG_TOPO_VOTE + 1)), "?");
	assert_string_equal(dg_msg_name((dg_msg_type)T_UNUSED), "?");
	assert_string_equal(dg_msg_name(DG_MSG__COUNT), "?");
	assert_string_equal(dg_msg_name((dg_msg_type)70000), "?");
	assert_null(dg_msg_row_of(DG_MSG__COUNT));
}

/* ------------------------------------------------------------------------
 * 3. Handshake MACs
 * ------------------------------------------------------------------------ */

/* HMAC-SHA256(K, "dg-" role | first | second | id_d LE | id_l LE | cluster),
 * built byte by byte from PROTOCOL.md with OpenSSL's one-shot HMAC(). */
static void ref_mac(char role, const char *key, const uint8_t *first,
    const uint8_t *second, uint64_t id_d, uint64_t id_l, const char *cluster,
    uint8_t out[DG_MAC_LEN])
{
	uint8_t t[4 + 2 * DG_NONCE_LEN + 16 + 256];
	size_t n = 0;
	unsigned int len = 0;
	t[n++] = 'd';
	t[n++] = 'g';
	t[n++] = '-';
	t[n++] = (uint8_t)role;
	memcpy(t + n, first, DG_NONCE_LEN);
	n += DG_NONCE_LEN;
	memcpy(t + n, second, DG_NONCE_LEN);
	n += DG_NONCE_LEN;
	for (int i = 0; i < 8; i++)
		t[n++] = (uint8_t)(id_d >> (8 * i));
	for (int i = 0; i < 8; i++)
		t[n++] = (uint8_t)(id_l >> (8 * i));
	memcpy(t + n, cluster, strlen(cluster));
	n += strlen(cluster);
	assert_non_null(HMAC(EVP_sha256(), key, (int)strlen(key), t, n, out, &len));
	assert_int_equal(len, DG_MAC_LEN);
}

static void test_auth_mac(void **state)
{
	(void)state;
	uint8_t n1[DG_NONCE_LEN], n2[DG_NONCE_LEN], got[DG_MAC_LEN], want[DG_MAC_LEN];
	uint8_t other[DG_MAC_LEN];
	const char *key = "correct horse battery staple";
	const uint64_t id_d = 0x0102030405060708ull, id_l = 0xF0E0D0C0B0A09080ull;
	OK(dgi_random(n1, sizeof(n1)));
	OK(dgi_random(n2, sizeof(n2)));
	assert_memory_not_equal(n1, n2, sizeof(n1));

	/* both roles match the independent computation */
	OK(dgi_auth_mac('l', (const uint8_t *)key, strlen(key), n1, n2, id_d, id_l,
	    "datagrid", 8, got));
	ref_mac('l', key, n1, n2, id_d, id_l, "datagrid", want);
	assert_memory_equal(got, want, DG_MAC_LEN);
	OK(dgi_auth_mac('d', (const uint8_t *)key, strlen(key), n2, n1, id_d, id_l,
	    "datagrid", 8, got));
	ref_mac('d', key, n2, n1, id_d, id_l, "datagrid", want);
	assert_memory_equal(got, want, DG_MAC_LEN);

	/* 'l' and 'd' over the same inputs differ; so does every input */
	OK(dgi_auth_mac('l', (const uint8_t *)key, strlen(key), n1, n2, id_d, id_l,
	    "datagrid", 8, got));
	OK(dgi_auth_mac('d', (const uint8_t *)key, strlen(key), n1, n2, id_d, id_l,
	    "datagrid", 8, other));
	assert_memory_not_equal(got, other, DG_MAC_LEN);
	OK(dgi_auth_mac('l', (const uint8_t *)key, strlen(key) - 1, n1, n2, id_d, id_l,
	    "datagrid", 8, other));
	assert_memory_not_equal(got, other, DG_MAC_LEN);
	OK(dgi_auth_mac('l', (const uint8_t *)key, strlen(key), n2, n1, id_d, id_l,
	    "datagrid", 8, other));
	assert_memory_not_equal(got, other, DG_MAC_LEN);
	OK(dgi_auth_mac('l', (const uint8_t *)key, strlen(key), n1, n2, id_l, id_d,
	    "datagrid", 8, other));
	assert_memory_not_equal(got, other, DG_MAC_LEN);
	OK(dgi_auth_mac('l', (const uint8_t *)key, strlen(key), n1, n2, id_d, id_l,
	    "datagrie", 8, other));
	assert_memory_not_equal(got, other, DG_MAC_LEN);

	/* no secret: 32 zero bytes */
	uint8_t zero[DG_MAC_LEN] = { 0 };
	memset(other, 0xAA, sizeof(other));
	OK(dgi_auth_mac('l', NULL, 0, n1, n2, id_d, id_l, "datagrid", 8, other));
	assert_memory_equal(other, zero, DG_MAC_LEN);
	memset(other, 0xAA, sizeof(other));
	OK(dgi_auth_mac('d', (const uint8_t *)key, 0, n1, n2, id_d, id_l, "datagrid", 8, other));
	assert_memory_equal(other, zero, DG_MAC_LEN);

	/* bad role, cluster name too long (the limit itself is fine) */
	char cl[DG_CLUSTER_NAME_MAX + 2];
	memset(cl, 'c', sizeof(cl));
	cl[DG_CLUSTER_NAME_MAX + 1] = 0;
	EXPECT(dgi_auth_mac('x', (const uint8_t *)key, 3, n1, n2, 1, 2, "c", 1, other), DG_ERR_INVAL);
	EXPECT(dgi_auth_mac('L', (const uint8_t *)key, 3, n1, n2, 1, 2, "c", 1, other), DG_ERR_INVAL);
	EXPECT(dgi_auth_mac('l', (const uint8_t *)key, 3, n1, n2, 1, 2, cl,
	    DG_CLUSTER_NAME_MAX + 1, other), DG_ERR_INVAL);
	OK(dgi_auth_mac('l', (const uint8_t *)key, strlen(key), n1, n2, 1, 2, cl,
	    DG_CLUSTER_NAME_MAX, got));
	cl[DG_CLUSTER_NAME_MAX] = 0;
	ref_mac('l', key, n1, n2, 1, 2, cl, want);
	assert_memory_equal(got, want, DG_MAC_LEN);

	/* constant-time equality */
	memcpy(other, got, DG_MAC_LEN);
	assert_true(dgi_auth_equal(got, other));
	other[0] ^= 1;
	assert_false(dgi_auth_equal(got, other));
	other[0] ^= 1;
	other[DG_MAC_LEN - 1] ^= 0x80;
	assert_false(dgi_auth_equal(got, other));
}

/* ------------------------------------------------------------------------
 * 4. Handshake: success
 * ------------------------------------------------------------------------ */

static void test_start_config(void **state)
{
	(void)state;
	dg_tp_config cfg;
	dg_tp *tp = NULL;
	dg_tp_config_init(&cfg);
	assert_int_equal(cfg.recv_max, 16u << 20);
	assert_int_equal(cfg.send_queue_max, 64u << 20);
	assert_int_equal(cfg.connect_timeout_ms, 5000);
	assert_string_equal(cfg.cluster_name, "datagrid");

	EXPECT(dg_tp_start(&cfg, &tp), DG_ERR_INVAL); /* no registry */
	cfg.reg = reg;
	cfg.cluster_name = "";
	EXPECT(dg_tp_start(&cfg, &tp), DG_ERR_INVAL);
	cfg.cluster_name = "datagrid";
	cfg.recv_max = 0;
	EXPECT(dg_tp_start(&cfg, &tp), DG_ERR_INVAL);
	cfg.recv_max = 4096;
	cfg.listen_url = "bogus://nowhere";
	EXPECT(dg_tp_start(&cfg, &tp), DG_ERR_INVAL);
	cfg.listen_url = "tls+tcp://127.0.0.1:0"; /* TLS without files */
	EXPECT(dg_tp_start(&cfg, &tp), DG_ERR_INVAL);
	assert_null(tp);

	/* the bound port is in the address; a second listener on it is refused */
	dg_tp *a = NODE(.id = 0x51);
	const char *addr = dg_tp_address(a);
	assert_true(strncmp(addr, "tcp://127.0.0.1:", 16) == 0);
	assert_true(atoi(addr + 16) > 0);
	assert_int_equal(dg_tp_self(a), 0x51);
	cfg.listen_url = addr;
	EXPECT(dg_tp_start(&cfg, &tp), DG_ERR_ADDRINUSE);
	dg_tp_stop(a);
	/* random ids are not 0 and differ */
	dg_tp *x = NODE(0), *y = NODE(0);
	assert_true(dg_tp_self(x) != 0 && dg_tp_self(y) != 0);
	assert_true(dg_tp_self(x) != dg_tp_self(y));
	dg_tp_stop(x);
	dg_tp_stop(y);
}

static char *peer_url(dg_tp *tp, dg_node_id id)
{
	struct peer *p = dgi_peer_get(tp, id, false);
	assert_non_null(p);
	pthread_mutex_lock(&p->mu);
	char *u = p->url ? strdup(p->url) : NULL;
	pthread_mutex_unlock(&p->mu);
	return u;
}

/* A peer connecting again while its connection here has been silent for the
 * stale time lost that connection on its side (a cut, a pause): the old one
 * is closed and the new one serves.  Before, the new one was refused as a
 * duplicate and the peer's frames went to a dead connection — a client
 * rejoining after a partition waited out a 3 s JOIN (found by
 * cluster-tests/partition_netns.sh).  A connection heard from recently is
 * kept: the new one is refused, as in a both-dial race. */
static void test_stale_connection_replaced(void **state)
{
	(void)state;
	dg_tp *a = NODE(.secret = NULL);
	dg_tp *b = NODE(.secret = NULL);
	dg_node_id aid = dg_tp_self(a), bid = dg_tp_self(b);
	assert_int_equal(connect_ok(a, b), bid);
	OK(ping(a, bid, "x"));
	dgi_tp_set_stale_ms(b, 300);
	/* heard from: a dial by address is a duplicate, refused */
	assert_int_equal(connect_ok(a, b), bid);
	sleep_ms(50);
	assert_int_equal(stats(b).connects, 1);
	assert_int_equal(stats(b).disconnects, 0);
	/* b hears nothing from a for longer than the stale time */
	dgi_tp_test_cut(b, aid, true);
	sleep_ms(400);
	assert_int_equal(connect_ok(a, b), bid);
	dgi_tp_test_cut(b, aid, false);
	/* b took the new one and closed the old (a, which still held the
	 * old one when b's WELCOME came, may drop its dial as a duplicate:
	 * then the next send dials again) */
	WAIT_FOR(stats(b).connects >= 2 && stats(b).disconnects >= 1);
	WAIT_FOR(ping(a, bid, "over a new one") == DG_OK); /* (one may meet the churn) */
	WAIT_FOR(ping(b, aid, "and back") == DG_OK);
	WAIT_FOR(conn_count(b) == 1);
	dg_tp_stop(a);
	dg_tp_stop(b);
}

static void test_handshake_ok(void **state)
{
	(void)state;
	struct peer_log la, lb;
	memset(&la, 0, sizeof(la));
	memset(&lb, 0, sizeof(lb));
	dg_tp *a = NODE(.secret = "s3cret", .log = &la);
	dg_tp *b = NODE(.secret = "s3cret", .log = &lb);
	dg_node_id aid = dg_tp_self(a), bid = dg_tp_self(b);

	assert_int_equal(connect_ok(a, b), bid);
	OK(ping(a, bid, "hello"));
	OK(ping(b, aid, "back the other way"));
	OK(ping(a, bid, ""));

	/* one connection, used both ways */
	dg_tp_stats sa = stats(a), sb = stats(b);
	assert_int_equal(sa.connects, 1);
	assert_int_equal(sb.connects, 1);
	assert_int_equal(sa.disconnects + sb.disconnects, 0);
	assert_int_equal(sa.auth_failures + sb.auth_failures, 0);
	assert_int_equal(sa.handshake_failures + sb.handshake_failures, 0);
	assert_int_equal(sa.malformed_frames + sb.malformed_frames, 0);
	assert_int_equal(conn_count(a), 1);
	assert_int_equal(conn_count(b), 1);
	assert_int_equal(peer_stats(a, bid).connects, 1);
	assert_int_equal(peer_stats(b, aid).connects, 1);
	EXPECT(dg_tp_peer_stats(a, 0x12345, &sa), DG_ERR_UNREACHABLE);
	/* a: 2 requests and 1 reply out, as many in; per peer, without the
	 * handshake frames */
	assert_int_equal(peer_stats(a, bid).frames_sent, 3);
	assert_int_equal(peer_stats(a, bid).frames_recv, 3);
	assert_int_equal(stats(a).frames_sent, 3 + 2);   /* + HELLO, PROOF */
	assert_int_equal(stats(b).frames_sent, 3 + 2);   /* + CHALLENGE, WELCOME */

	/* each side told once; the listener learnt the dialer's address */
	assert_int_equal(atomic_load(&la.ups), 1);
	assert_int_equal(atomic_load(&la.last_up), bid);
	assert_int_equal(atomic_load(&lb.ups), 1);
	assert_int_equal(atomic_load(&lb.last_up), aid);
	char *u = peer_url(b, aid);
	assert_non_null(u);
	assert_string_equal(u, dg_tp_address(a));
	free(u);

	/* the peer goes away: told, counted */
	dg_tp_stop(b);
	WAIT_FOR(atomic_load(&la.downs) == 1);
	assert_int_equal(atomic_load(&la.last_down), bid);
	assert_int_not_equal(atomic_load(&la.why), DG_OK);
	WAIT_FOR(stats(a).disconnects == 1);
	WAIT_FOR(conn_count(a) == 0);
	dg_tp_stop(a);
}

/* ------------------------------------------------------------------------
 * 5. Handshake: refusals
 * ------------------------------------------------------------------------ */

static void test_handshake_wrong_secret(void **state)
{
	(void)state;
	dg_tp *a = NODE(.secret = "the-right-one", .id = 0xA1);
	dg_tp *b = NODE(.secret = "the-wrong-one", .id = 0xB1);
	dg_node_id peer = 77;

	/* a (the dialer) finds b's CHALLENGE MAC wrong */
	EXPECT(dg_tp_connect(a, dg_tp_address(b), &peer), DG_ERR_AUTH);
	assert_int_equal(stats(a).auth_failures, 1);
	assert_int_equal(stats(a).handshake_failures, 0); /* counted once, as auth */
	assert_int_equal(stats(a).connects, 0);
	assert_int_equal(ctr(a, DG_MSG_CHALLENGE).failures, 1);
	/* b saw a handshake abandoned after its CHALLENGE: one failure, not auth */
	WAIT_FOR(conn_count(b) == 0);
	assert_int_equal(stats(b).handshake_failures, 1);
	assert_int_equal(stats(b).auth_failures, 0);
	assert_int_equal(stats(b).connects, 0);
	WAIT_FOR(conn_count(a) == 0);
	EXPECT(dg_tp_call(a, 0xB1, DG_MSG_PING, &(dg_msg_bytes){ { NULL, 0 } }, 1000,
	    NULL, NULL), DG_ERR_UNREACHABLE);

	/* b still serves a peer that knows its secret */
	dg_tp *c = NODE(.secret = "the-wrong-one", .id = 0xC1);
	assert_int_equal(connect_ok(c, b), 0xB1);
	OK(ping(c, 0xB1, "good peer"));
	OK(ping(b, 0xC1, "and back"));
	assert_int_equal(stats(b).connects, 1);
	assert_int_equal(stats(b).auth_failures, 0);
	assert_int_equal(stats(b).handshake_failures, 1);
	dg_tp_stop(c);
	dg_tp_stop(b);
	dg_tp_stop(a);
}

static void test_handshake_secret_mismatch(void **state)
{
	(void)state;
	for (int dir = 0; dir < 2; dir++) {
		/* dir 0: the dialer has a secret, the listener none; 1: the reverse */
		dg_tp *a = dir == 0 ? NODE(.secret = "k") : NODE(0);
		dg_tp *b = dir == 0 ? NODE(0) : NODE(.secret = "k");
		EXPECT(dg_tp_connect(a, dg_tp_address(b), NULL), DG_ERR_AUTH);
		/* the listener detected it and refused with REJECT AUTH */
		assert_int_equal(stats(b).auth_failures, 1);
		assert_int_equal(stats(b).handshake_failures, 0);
		assert_int_equal(stats(a).auth_failures, 0);
		assert_int_equal(stats(a).handshake_failures, 0);
		assert_int_equal(ctr(a, DG_MSG_REJECT).recv, 1);
		assert_int_equal(ctr(b, DG_MSG_REJECT).sent, 1);
		assert_int_equal(ctr(b, DG_MSG_CHALLENGE).sent, 0);
		WAIT_FOR(conn_count(a) == 0 && conn_count(b) == 0);
		assert_int_equal(stats(a).connects + stats(b).connects, 0);

		/* b still serves a peer configured like itself */
		dg_tp *c = dir == 0 ? NODE(0) : NODE(.secret = "k");
		dg_node_id bid = connect_ok(c, b);
		OK(ping(c, bid, "fine"));
		assert_int_equal(stats(b).auth_failures, 1);
		dg_tp_stop(c);
		dg_tp_stop(b);
		dg_tp_stop(a);
	}
}

static void test_handshake_cluster_mismatch(void **state)
{
	(void)state;
	dg_tp *a = NODE(.cluster = "alpha", .secret = "same");
	dg_tp *b = NODE(.cluster = "beta", .secret = "same");
	EXPECT(dg_tp_connect(a, dg_tp_address(b), NULL), DG_ERR_REFUSED);
	assert_int_equal(stats(b).handshake_failures, 1);
	assert_int_equal(stats(b).auth_failures, 0);
	assert_int_equal(stats(a).handshake_failures + stats(a).auth_failures, 0);
	assert_int_equal(stats(a).connects + stats(b).connects, 0);
	WAIT_FOR(conn_count(a) == 0 && conn_count(b) == 0);
	assert_int_equal(stats(b).handshake_failures, 1); /* once, not again at close */

	dg_tp *c = NODE(.cluster = "beta", .secret = "same");
	dg_node_id bid = connect_ok(c, b);
	OK(ping(c, bid, "beta member"));
	dg_tp_stop(c);
	dg_tp_stop(b);
	dg_tp_stop(a);
}

static void test_handshake_self(void **state)
{
	(void)state;
	dg_tp *a = NODE(.secret = "me");
	EXPECT(dg_tp_connect(a, dg_tp_address(a), NULL), DG_ERR_REFUSED);
	assert_int_equal(stats(a).handshake_failures, 1);
	assert_int_equal(stats(a).auth_failures, 0);
	assert_int_equal(stats(a).connects, 0);
	WAIT_FOR(conn_count(a) == 0);
	assert_int_equal(stats(a).handshake_failures, 1);
	/* and no peer entry for itself to send to */
	EXPECT(dg_tp_send(a, dg_tp_self(a), DG_MSG_ECHO, &(dg_msg_bytes){ { NULL, 0 } }),
	    DG_ERR_INVAL);

	dg_tp *c = NODE(.secret = "me");
	dg_node_id aid = connect_ok(c, a);
	OK(ping(c, aid, "not myself"));
	dg_tp_stop(c);
	dg_tp_stop(a);
}

/* A dialer's connection closed by another thread while its handshake
 * ends — here its deadline (the service thread's dgi_conn_expire) while
 * the reactor is about to attach it (held there 600 ms by the test hook) —
 * must not become the peer's connection.  The close found no peer and put
 * it on tp->dead; attached after that, the peer's conn named a connection
 * the service thread then freed, and the next send to the peer locked its
 * freed mutex (a review found the window; dg_tp_stop's closes open the
 * same one).  Now: the dial fails with the close's DG_ERR_TIMEOUT, the
 * peer has no connection, and a dial again connects. */
static void test_closed_handshake_never_attaches(void **state)
{
	(void)state;
	dg_tp *b = NODE(.id = 0xB1B1);
	dg_tp *a = NODE(.connect_timeout_ms = 300);
	dg_node_id bid = dg_tp_self(b), got = 0;
	atomic_store(&dgi_test_attach_delay_ms, 600);
	uint64_t t0 = now_ms();
	dg_err e = dg_tp_connect(a, dg_tp_address(b), &got);
	/* the reactor is past the hook and its round over: the close's conn
	 * left tp->conns at its deadline, and the reap waits for that round */
	while (now_ms() - t0 < 900)
		sleep_ms(10);
	atomic_store(&dgi_test_attach_delay_ms, 0);
	struct peer *p = dgi_peer_get(a, bid, false);
	assert_non_null(p);
	pthread_mutex_lock(&p->mu);
	struct conn *pc = p->conn; /* (compared, not read: it may be freed) */
	pthread_mutex_unlock(&p->mu);
	bool listed = false;
	pthread_mutex_lock(&a->mu);
	for (struct conn *c = a->conns; c != NULL; c = c->next)
		listed = listed || c == pc;
	pthread_mutex_unlock(&a->mu);
	if (pc != NULL && !listed)
		fail_msg("the peer's connection is one that was closed (dial answered %s)",
		    dg_strerror(e));
	EXPECT(e, DG_ERR_TIMEOUT);
	assert_true(stats(a).handshake_failures >= 1);
	assert_int_equal(connect_ok(a, b), bid); /* dialled again: it serves */
	OK(ping(a, bid, "dialled again"));
	dg_tp_stop(a);
	dg_tp_stop(b);
}

/* ------------------------------------------------------------------------
 * 6. Hostile bytes on raw sockets
 * ------------------------------------------------------------------------ */

#define FX_SECRET "raw-secret"
#define FX_RECV_MAX 4096
#define FX_TIMEOUT_MS 300

struct fx {
	dg_tp *a, *b;
	dg_node_id aid, bid;
	struct counter echo;  /* ECHO frames b handled */
};

static dg_node_id raw_ids = 0x7000;

static int fx_setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	f->b = NODE(.secret = FX_SECRET, .recv_max = FX_RECV_MAX,
	    .connect_timeout_ms = FX_TIMEOUT_MS, .id = 0xB0B0);
	OK(dg_tp_handle(f->b, DG_MSG_ECHO, on_count, &f->echo));
	f->a = NODE(.secret = FX_SECRET, .id = 0xA0A0);
	f->aid = dg_tp_self(f->a);
	f->bid = connect_ok(f->a, f->b);
	OK(ping(f->a, f->bid, "setup"));
	*state = f;
	return 0;
}

static int fx_teardown(void **state)
{
	struct fx *f = *state;
	dg_tp_stop(f->a);
	dg_tp_stop(f->b);
	free(f);
	return 0;
}

static int raw_connect(const dg_tp *tp)
{
	const char *colon = strrchr(dg_tp_address(tp), ':');
	assert_non_null(colon);
	int port = atoi(colon + 1);
	assert_true(port > 0 && port < 65536);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	struct sockaddr_in sa;
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

static void raw_send(int fd, const void *p, size_t n)
{
	const uint8_t *s = p;
	while (n > 0) {
		ssize_t k = send(fd, s, n, MSG_NOSIGNAL);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			fail_msg("raw send: %s", strerror(errno));
		s += k;
		n -= (size_t)k;
	}
}

/* Exactly n bytes within ms: DG_OK, DG_ERR_CLOSED (EOF or reset), DG_ERR_TIMEOUT. */
static dg_err raw_read(int fd, void *p, size_t n, uint32_t ms)
{
	uint8_t *d = p;
	uint64_t end = now_ms() + ms;
	while (n > 0) {
		uint64_t now = now_ms();
		if (now >= end)
			return DG_ERR_TIMEOUT;
		struct pollfd pf = { fd, POLLIN, 0 };
		int r = poll(&pf, 1, (int)(end - now));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			continue;
		ssize_t k = recv(fd, d, n, 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return DG_ERR_CLOSED;
		d += k;
		n -= (size_t)k;
	}
	return DG_OK;
}

/* The node closed the socket within ms (anything it sent first is skipped). */
static bool raw_wait_closed(int fd, uint32_t ms)
{
	uint8_t junk[4096];
	for (;;) {
		dg_err e = raw_read(fd, junk, 1, ms);
		if (e == DG_ERR_CLOSED)
			return true;
		if (e == DG_ERR_TIMEOUT)
			return false;
	}
}

static dg_err raw_read_frame(int fd, dg_frame_header *h, uint8_t *body, size_t cap)
{
	uint8_t hdr[DG_FRAME_HEADER];
	dg_err e = raw_read(fd, hdr, sizeof(hdr), 5000);
	if (e != DG_OK)
		return e;
	OK(dgi_frame_get(hdr, cap, h));
	return raw_read(fd, body, h->body_len, 5000);
}

/* Sends a HELLO as node `id`, reads the CHALLENGE (checking the MAC against
 * the documented transcript when there is a secret).  Returns the fd;
 * nonce_l receives the listener's nonce. */
static int raw_hello_at(struct fx *f, dg_node_id id, int32_t version, const char *addr,
    uint8_t nonce_d[DG_NONCE_LEN], uint8_t nonce_l[DG_NONCE_LEN])
{
	dg_buf out;
	uint8_t body[512];
	dg_frame_header h;
	dg_msg_challenge ch;
	dg_msg_hello hello = { version, { "datagrid", 8 }, (int64_t)id, { addr, strlen(addr) },
		{ nonce_d, DG_NONCE_LEN }, true };
	OK(dgi_random(nonce_d, DG_NONCE_LEN));
	int fd = raw_connect(f->b);
	dg_buf_init(&out);
	frame_msg(&out, 0, DG_MSG_HELLO, 0, id, &hello);
	raw_send(fd, out.data, out.len);
	dg_buf_free(&out);
	if (version != DG_FRAME_VERSION)
		return fd;
	OK(raw_read_frame(fd, &h, body, sizeof(body)));
	assert_int_equal(h.type, DG_MSG_CHALLENGE);
	assert_int_equal(h.flags, 0);
	assert_int_equal(h.corr, 0);
	assert_int_equal(h.sender, f->bid);
	OK(dg_msg_decode(DG_MSG_CHALLENGE, reg, body, h.body_len, &ch));
	assert_int_equal(ch.node_id, (int64_t)f->bid);
	assert_true(ch.auth);
	memcpy(nonce_l, ch.nonce.ptr, DG_NONCE_LEN);
	assert_memory_not_equal(nonce_l, nonce_d, DG_NONCE_LEN);
	uint8_t want[DG_MAC_LEN];
	ref_mac('l', FX_SECRET, nonce_d, nonce_l, id, f->bid, "datagrid", want);
	assert_memory_equal(ch.mac.ptr, want, DG_MAC_LEN);
	return fd;
}

/* ... naming no address */
static int raw_hello(struct fx *f, dg_node_id id, int32_t version,
    uint8_t nonce_d[DG_NONCE_LEN], uint8_t nonce_l[DG_NONCE_LEN])
{
	return raw_hello_at(f, id, version, "", nonce_d, nonce_l);
}

/* A whole handshake by hand, the HELLO naming addr; the returned socket is
 * an open connection of node `*id` to f->b. */
static int raw_open_at(struct fx *f, dg_node_id *id, const char *addr)
{
	uint8_t nd[DG_NONCE_LEN], nl[DG_NONCE_LEN], mac[DG_MAC_LEN], body[64];
	dg_frame_header h;
	dg_buf out;
	*id = ++raw_ids;
	int fd = raw_hello_at(f, *id, DG_FRAME_VERSION, addr, nd, nl);
	ref_mac('d', FX_SECRET, nl, nd, *id, f->bid, "datagrid", mac);
	dg_msg_proof pr = { { mac, DG_MAC_LEN } };
	dg_buf_init(&out);
	frame_msg(&out, 0, DG_MSG_PROOF, 0, *id, &pr);
	raw_send(fd, out.data, out.len);
	dg_buf_free(&out);
	OK(raw_read_frame(fd, &h, body, sizeof(body)));
	assert_int_equal(h.type, DG_MSG_WELCOME);
	assert_int_equal(h.body_len, 0);
	assert_int_equal(h.sender, f->bid);
	return fd;
}

static int raw_open(struct fx *f, dg_node_id *id)
{
	return raw_open_at(f, id, "");
}

struct fsnap {
	dg_tp_stats s;
	uint64_t fail[DG_MSG__COUNT];
};

static void fsnap_take(const dg_tp *tp, struct fsnap *o)
{
	dg_msg_metric m[DG_MSG__COUNT];
	memset(o, 0, sizeof(*o));
	o->s = stats(tp);
	size_t n = dg_tp_metrics(tp, m, DG_MSG__COUNT);
	for (size_t i = 0; i < n && i < DG_MSG__COUNT; i++)
		o->fail[m[i].type] = m[i].c.failures;
}

/* Exactly these counters moved since `before`: failures of `type` by one
 * (type < 0: no failure counter), and the three totals by these amounts. */
static void expect_moved(const struct fsnap *before, const dg_tp *tp, int type,
    uint64_t malformed, uint64_t handshake, uint64_t auth)
{
	struct fsnap now;
	fsnap_take(tp, &now);
	for (int t = 0; t < DG_MSG__COUNT; t++) {
		uint64_t d = now.fail[t] - before->fail[t];
		if (d != (t == type ? 1u : 0u))
			fail_msg("failures of %s moved by %llu (expected %d)", dg_msg_name((dg_msg_type)t),
			    (unsigned long long)d, t == type);
	}
	assert_int_equal(now.s.malformed_frames - before->s.malformed_frames, malformed);
	assert_int_equal(now.s.handshake_failures - before->s.handshake_failures, handshake);
	assert_int_equal(now.s.auth_failures - before->s.auth_failures, auth);
}

/* The node dropped the raw connection, forgot it, and serves a good peer. */
static void fx_still_serves(struct fx *f)
{
	WAIT_FOR(conn_count(f->b) == 1);
	OK(ping(f->a, f->bid, "still serving"));
	assert_int_equal(conn_count(f->b), 1);
}

/* Each case: bytes a misbehaving client sends before any handshake. */
static void fx_bad_before(struct fx *f, const char *what, const void *bytes,
    size_t n, int type, uint64_t malformed, uint64_t handshake)
{
	struct fsnap before;
	print_message("    case: %s\n", what);
	fsnap_take(f->b, &before);
	int fd = raw_connect(f->b);
	raw_send(fd, bytes, n);
	if (!raw_wait_closed(fd, 5000))
		fail_msg("%s: the node did not close the connection", what);
	close(fd);
	fx_still_serves(f);
	expect_moved(&before, f->b, type, malformed, handshake, 0);
	assert_int_equal(stats(f->b).connects, 1);
}

static void test_raw_before_handshake(void **state)
{
	struct fx *f = *state;
	dg_buf b;
	uint8_t garbage[64];
	dg_buf_init(&b);

	memset(garbage, 0xA5, sizeof(garbage));
	fx_bad_before(f, "garbage", garbage, sizeof(garbage), DG_MSG_UNKNOWN, 1, 0);

	frame_raw(&b, 2, 0, DG_MSG_HELLO, 0, 0, 0x99, NULL, 0);
	fx_bad_before(f, "version 2", b.data, b.len, DG_MSG_HELLO, 1, 0);

	dg_buf_reset(&b);
	frame_raw(&b, DG_FRAME_VERSION, 0x10, DG_MSG_HELLO, 0, 0, 0x99, NULL, 0);
	fx_bad_before(f, "unknown flag bit", b.data, b.len, DG_MSG_HELLO, 1, 0);

	dg_buf_reset(&b);
	frame_raw(&b, DG_FRAME_VERSION, 0, 300, 0, 0, 0x99, NULL, 0);
	fx_bad_before(f, "type out of range", b.data, b.len, DG_MSG_UNKNOWN, 1, 0);

	dg_buf_reset(&b);
	dg_msg_bytes pl = { { (const uint8_t *)"hi", 2 } };
	frame_msg(&b, 0, DG_MSG_PING, 9, 0x99, &pl);
	fx_bad_before(f, "PING before the handshake", b.data, b.len, DG_MSG_PING, 1, 0);

	dg_buf_reset(&b);
	frame_msg(&b, DG_FRAME_ONEWAY, DG_MSG_WELCOME, 0, 0x99, NULL);
	fx_bad_before(f, "WELCOME to a listener", b.data, b.len, DG_MSG_WELCOME, 0, 1);

	dg_buf_reset(&b);
	frame_raw(&b, DG_FRAME_VERSION, 0, DG_MSG_HELLO, FX_RECV_MAX + 1, 0, 0x99, NULL, 0);
	fx_bad_before(f, "body larger than recv_max", b.data, b.len, DG_MSG_HELLO, 1, 0);

	/* before authentication the limit is DG_HANDSHAKE_MAX, not recv_max:
	 * one byte over is refused by the header check ... */
	dg_buf_reset(&b);
	frame_raw(&b, DG_FRAME_VERSION, 0, DG_MSG_HELLO, DG_HANDSHAKE_MAX + 1, 0, 0x99,
	    NULL, 0);
	fx_bad_before(f, "handshake body over DG_HANDSHAKE_MAX", b.data, b.len,
	    DG_MSG_HELLO, 1, 0);

	/* ... and exactly the limit passes it and fails as a HELLO */
	dg_buf_reset(&b);
	uint8_t *zeros = calloc(1, DG_HANDSHAKE_MAX);
	assert_non_null(zeros);
	frame_raw(&b, DG_FRAME_VERSION, 0, DG_MSG_HELLO, DG_HANDSHAKE_MAX, 0, 0x99, zeros,
	    DG_HANDSHAKE_MAX);
	free(zeros);
	fx_bad_before(f, "body of exactly DG_HANDSHAKE_MAX", b.data, b.len, DG_MSG_HELLO,
	    0, 1);

	/* a HELLO whose body stops inside its fields (the length says so) */
	uint8_t nd[DG_NONCE_LEN] = { 1, 2, 3 };
	dg_msg_hello hello = { 1, { "datagrid", 8 }, 0x99, { "", 0 }, { nd, DG_NONCE_LEN }, true };
	dg_buf hb;
	dg_buf_init(&hb);
	body_enc(&hb, DG_MSG_HELLO, &hello);
	dg_buf_reset(&b);
	frame_raw(&b, DG_FRAME_VERSION, 0, DG_MSG_HELLO, (uint32_t)hb.len - 10, 0, 0x99,
	    hb.data, hb.len - 10);
	fx_bad_before(f, "truncated HELLO body", b.data, b.len, DG_MSG_HELLO, 0, 1);

	/* a HELLO cut off by the client closing: nothing to decode, nothing kept */
	{
		int fd = raw_connect(f->b);
		dg_buf_reset(&b);
		frame_raw(&b, DG_FRAME_VERSION, 0, DG_MSG_HELLO, (uint32_t)hb.len, 0, 0x99,
		    hb.data, hb.len / 2);
		raw_send(fd, b.data, b.len);
		WAIT_FOR(conn_count(f->b) == 2);
		close(fd);
		fx_still_serves(f);
	}
	dg_buf_free(&hb);
	dg_buf_free(&b);
}

static void test_raw_silent(void **state)
{
	struct fx *f = *state;
	struct fsnap before;
	fsnap_take(f->b, &before);

	/* connects and sends nothing: closed after connect_timeout_ms */
	uint64_t t0 = now_ms();
	int fd = raw_connect(f->b);
	assert_true(raw_wait_closed(fd, 5000));
	uint64_t took = now_ms() - t0;
	close(fd);
	if (took < FX_TIMEOUT_MS - 10 || took > FX_TIMEOUT_MS + 1000)
		fail_msg("silent connection closed after %llu ms (timeout %d)",
		    (unsigned long long)took, FX_TIMEOUT_MS);
	fx_still_serves(f);
	expect_moved(&before, f->b, -1, 0, 1, 0);

	/* sends a good HELLO, then nothing: one handshake failure, counted once */
	uint8_t nd[DG_NONCE_LEN], nl[DG_NONCE_LEN];
	fsnap_take(f->b, &before);
	t0 = now_ms();
	fd = raw_hello(f, ++raw_ids, DG_FRAME_VERSION, nd, nl);
	assert_true(raw_wait_closed(fd, 5000));
	took = now_ms() - t0;
	close(fd);
	if (took < FX_TIMEOUT_MS - 10 || took > FX_TIMEOUT_MS + 1000)
		fail_msg("half-done handshake closed after %llu ms", (unsigned long long)took);
	fx_still_serves(f);
	expect_moved(&before, f->b, -1, 0, 1, 0);
}

/* Nothing of a peer that has not proved the secret is kept: the handshake
 * stored the address a HELLO named for its node id — a peer entry of ~8 KiB
 * each — before the PROOF was checked (issue 14: 120,000 HELLOs grew a node
 * to 1.1 GB).  The address is the peer's once its PROOF checks. */
static void test_raw_unproven_leaves_nothing(void **state)
{
	struct fx *f = *state;
	uint8_t nd[DG_NONCE_LEN], nl[DG_NONCE_LEN];
	const char *addr = "tcp://127.0.0.1:9";
	for (int i = 0; i < 50; i++) {
		/* challenged, never proved: no trace of it */
		dg_node_id id = ++raw_ids;
		int fd = raw_hello_at(f, id, DG_FRAME_VERSION, addr, nd, nl);
		close(fd);
		assert_null(dgi_peer_get(f->b, id, false));
	}
	/* proved: its address is known */
	dg_node_id id;
	int fd = raw_open_at(f, &id, addr);
	struct peer *p = dgi_peer_get(f->b, id, false);
	assert_non_null(p);
	pthread_mutex_lock(&p->mu);
	assert_non_null(p->url);
	assert_string_equal(p->url, addr);
	pthread_mutex_unlock(&p->mu);
	close(fd);
	fx_still_serves(f);
}

/* Accepted connections in their handshake are bounded in number (and in
 * time, by connect_timeout_ms): the one past max_handshakes is closed at
 * once, and a slot comes back when one of them closes — so silent sockets
 * cannot pile up memory, and a node gets in once they are gone. */
static void test_raw_handshakes_bounded(void **state)
{
	(void)state;
	dg_tp *b = NODE(.secret = FX_SECRET, .max_handshakes = 4, .connect_timeout_ms = 3000);
	int fd[4];
	for (int i = 0; i < 4; i++)
		fd[i] = raw_connect(b);
	WAIT_FOR(atomic_load(&b->half_open) == 4);
	uint64_t failed = stats(b).handshake_failures;
	int extra = raw_connect(b);
	assert_true(raw_wait_closed(extra, 1000)); /* at once, not after 3 s */
	close(extra);
	assert_int_equal(stats(b).handshake_failures, failed + 1);
	close(fd[0]); /* a slot back: a node connects */
	WAIT_FOR(atomic_load(&b->half_open) == 3);
	dg_tp *a = NODE(.secret = FX_SECRET);
	connect_ok(a, b);
	OK(ping(a, dg_tp_self(b), "in"));
	assert_int_equal(atomic_load(&b->half_open), 3); /* its slot went back */
	for (int i = 1; i < 4; i++)
		close(fd[i]);
	WAIT_FOR(atomic_load(&b->half_open) == 0);
	dg_tp_stop(a);
	dg_tp_stop(b);
}

static void test_raw_handshake_by_hand(void **state)
{
	struct fx *f = *state;
	struct fsnap before;
	dg_frame_header h;
	uint8_t body[512], nd[DG_NONCE_LEN], nl[DG_NONCE_LEN];
	dg_buf b;
	dg_buf_init(&b);

	/* the documented transcript opens a connection; requests are answered */
	dg_node_id id;
	int fd = raw_open(f, &id);
	WAIT_FOR(stats(f->b).connects == 2);
	dg_msg_bytes one = { { (const uint8_t *)"one-way", 7 } };
	frame_msg(&b, DG_FRAME_ONEWAY, DG_MSG_ECHO, 0, id, &one);
	dg_msg_bytes req = { { (const uint8_t *)"by hand", 7 } };
	frame_msg(&b, 0, DG_MSG_PING, 77, id, &req);
	raw_send(fd, b.data, b.len);
	OK(raw_read_frame(fd, &h, body, sizeof(body))); /* the one-way got no answer */
	assert_int_equal(h.type, DG_MSG_PING);
	assert_int_equal(h.flags, DG_FRAME_RESPONSE);
	assert_int_equal(h.corr, 77);
	assert_int_equal(h.sender, f->bid);
	dg_msg_bytes rep;
	OK(dg_msg_decode(DG_MSG_PING, reg, body, h.body_len, &rep));
	assert_bytes(rep.data, "by hand", 7);
	/* a request of a type without a handler: an ERROR response */
	dg_buf_reset(&b);
	t_i64 v = { 5 };
	frame_msg(&b, 0, (dg_msg_type)T_NOHANDLER, 78, id, &v);
	raw_send(fd, b.data, b.len);
	OK(raw_read_frame(fd, &h, body, sizeof(body)));
	assert_int_equal(h.type, T_NOHANDLER);
	assert_int_equal(h.flags, DG_FRAME_RESPONSE | DG_FRAME_ERROR);
	assert_int_equal(h.corr, 78);
	dg_reader r;
	int32_t code = 0;
	dg_reader_init(&r, reg, body, h.body_len);
	OK(dg_read_i32(&r, &code));
	assert_int_equal(code, DG_ERR_UNSUPPORTED);
	assert_int_equal(dg_reader_left(&r), 0);
	/* b can send to the raw peer over this connection */
	dg_msg_bytes push = { { (const uint8_t *)"push", 4 } };
	OK(dg_tp_send(f->b, id, DG_MSG_ECHO, &push));
	OK(raw_read_frame(fd, &h, body, sizeof(body)));
	assert_int_equal(h.type, DG_MSG_ECHO);
	assert_int_equal(h.flags, DG_FRAME_ONEWAY);
	assert_int_equal(h.corr, 0);
	close(fd);
	WAIT_FOR(stats(f->b).disconnects == 1);
	fx_still_serves(f);

	/* a wrong PROOF: REJECT AUTH, an auth failure */
	fsnap_take(f->b, &before);
	fd = raw_hello(f, ++raw_ids, DG_FRAME_VERSION, nd, nl);
	uint8_t mac[DG_MAC_LEN];
	ref_mac('d', "not-the-secret", nl, nd, raw_ids, f->bid, "datagrid", mac);
	dg_msg_proof pr = { { mac, DG_MAC_LEN } };
	dg_buf_reset(&b);
	frame_msg(&b, 0, DG_MSG_PROOF, 0, raw_ids, &pr);
	raw_send(fd, b.data, b.len);
	OK(raw_read_frame(fd, &h, body, sizeof(body)));
	assert_int_equal(h.type, DG_MSG_REJECT);
	dg_msg_reject rj;
	OK(dg_msg_decode(DG_MSG_REJECT, reg, body, h.body_len, &rj));
	assert_int_equal(rj.reason, DG_REJECT_AUTH);
	assert_true(raw_wait_closed(fd, 5000));
	close(fd);
	fx_still_serves(f);
	expect_moved(&before, f->b, -1, 0, 0, 1);

	/* the MAC of the right secret over another node id is refused too */
	fsnap_take(f->b, &before);
	fd = raw_hello(f, ++raw_ids, DG_FRAME_VERSION, nd, nl);
	ref_mac('d', FX_SECRET, nl, nd, raw_ids + 1, f->bid, "datagrid", mac);
	dg_buf_reset(&b);
	frame_msg(&b, 0, DG_MSG_PROOF, 0, raw_ids, &pr);
	raw_send(fd, b.data, b.len);
	OK(raw_read_frame(fd, &h, body, sizeof(body)));
	assert_int_equal(h.type, DG_MSG_REJECT);
	assert_true(raw_wait_closed(fd, 5000));
	close(fd);
	fx_still_serves(f);
	expect_moved(&before, f->b, -1, 0, 0, 1);

	/* another protocol version: REJECT VERSION */
	fsnap_take(f->b, &before);
	fd = raw_hello(f, ++raw_ids, 2, nd, nl);
	OK(raw_read_frame(fd, &h, body, sizeof(body)));
	assert_int_equal(h.type, DG_MSG_REJECT);
	OK(dg_msg_decode(DG_MSG_REJECT, reg, body, h.body_len, &rj));
	assert_int_equal(rj.reason, DG_REJECT_VERSION);
	assert_true(rj.text.len > 0);
	assert_true(raw_wait_closed(fd, 5000));
	close(fd);
	fx_still_serves(f);
	expect_moved(&before, f->b, -1, 0, 1, 0);

	/* HELLO again instead of PROOF: a failed handshake, counted once */
	fsnap_take(f->b, &before);
	fd = raw_hello(f, ++raw_ids, DG_FRAME_VERSION, nd, nl);
	dg_msg_hello again = { 1, { "datagrid", 8 }, (int64_t)raw_ids, { "", 0 },
		{ nd, DG_NONCE_LEN }, true };
	dg_buf_reset(&b);
	frame_msg(&b, 0, DG_MSG_HELLO, 0, raw_ids, &again);
	raw_send(fd, b.data, b.len);
	assert_true(raw_wait_closed(fd, 5000));
	close(fd);
	fx_still_serves(f);
	expect_moved(&before, f->b, DG_MSG_HELLO, 0, 1, 0);
	dg_buf_free(&b);
}

/* A client that answers at once: its PROOF may be read before the node's
 * CHALLENGE write has completed (its callback not run yet).  Every such
 * handshake must still end in WELCOME — many in a row to catch the race. */
static void test_raw_fast_handshakes(void **state)
{
	struct fx *f = *state;
	enum { N = 500 };
	for (int i = 0; i < N; i++) {
		dg_node_id id;
		int fd = raw_open(f, &id); /* asserts WELCOME */
		close(fd);
	}
	WAIT_FOR(stats(f->b).disconnects == N);
	assert_int_equal(stats(f->b).connects, 1 + N);
	assert_int_equal(stats(f->b).handshake_failures, 0);
	assert_int_equal(stats(f->b).auth_failures, 0);
	fx_still_serves(f);
}

/* Bad frames on a connection whose handshake was done by hand. */
static void fx_bad_after(struct fx *f, const char *what, int type,
    void (*build)(dg_buf *b, dg_node_id id))
{
	struct fsnap before;
	dg_node_id id;
	dg_buf b;
	print_message("    case: %s\n", what);
	int fd = raw_open(f, &id);
	WAIT_FOR(conn_count(f->b) == 2);
	uint64_t disc = stats(f->b).disconnects;
	fsnap_take(f->b, &before);
	dg_buf_init(&b);
	build(&b, id);
	raw_send(fd, b.data, b.len);
	dg_buf_free(&b);
	if (!raw_wait_closed(fd, 5000))
		fail_msg("%s: the node did not close the connection", what);
	close(fd);
	fx_still_serves(f);
	expect_moved(&before, f->b, type, 1, 0, 0);
	assert_int_equal(stats(f->b).disconnects, disc + 1);
}

static void bad_sender(dg_buf *b, dg_node_id id)
{
	dg_msg_bytes m = { { (const uint8_t *)"x", 1 } };
	frame_msg(b, 0, DG_MSG_PING, 5, id + 1, &m);
}

static void bad_handshake_type(dg_buf *b, dg_node_id id)
{
	uint8_t nd[DG_NONCE_LEN] = { 0 };
	dg_msg_hello h = { 1, { "datagrid", 8 }, (int64_t)id, { "", 0 }, { nd, DG_NONCE_LEN }, true };
	frame_msg(b, 0, DG_MSG_HELLO, 0, id, &h);
}

static void bad_body_kind(dg_buf *b, dg_node_id id)
{
	frame_i32(b, 0, DG_MSG_PING, 5, id, 12);
}

static void bad_trailing(dg_buf *b, dg_node_id id)
{
	dg_buf body;
	dg_writer w;
	dg_buf_init(&body);
	dg_writer_init(&w, reg, &body);
	OK(dg_write_bytes(&w, "ab", 2));
	OK(dg_write_i32(&w, 1));
	frame_raw(b, DG_FRAME_VERSION, 0, DG_MSG_PING, (uint32_t)body.len, 5, id,
	    body.data, body.len);
	dg_buf_free(&body);
}

static void bad_error_request(dg_buf *b, dg_node_id id)
{
	/* ERROR without RESPONSE: an error body where a request body belongs */
	frame_i32(b, DG_FRAME_ERROR, DG_MSG_PING, 5, id, DG_ERR_RANGE);
}

static void bad_error_oneway(dg_buf *b, dg_node_id id)
{
	frame_i32(b, DG_FRAME_ERROR | DG_FRAME_ONEWAY, DG_MSG_ECHO, 0, id, DG_ERR_RANGE);
}

static void bad_error_code(dg_buf *b, dg_node_id id)
{
	frame_i32(b, DG_FRAME_RESPONSE | DG_FRAME_ERROR, DG_MSG_PING, 5, id, 0);
}

static void bad_error_code_high(dg_buf *b, dg_node_id id)
{
	frame_i32(b, DG_FRAME_RESPONSE | DG_FRAME_ERROR, DG_MSG_PING, 5, id, DG_ERR__COUNT);
}

static void bad_unused_type(dg_buf *b, dg_node_id id)
{
	frame_i32(b, DG_FRAME_ONEWAY, T_UNUSED, 0, id, 1);
}

static void bad_too_large(dg_buf *b, dg_node_id id)
{
	frame_raw(b, DG_FRAME_VERSION, 0, DG_MSG_PING, FX_RECV_MAX + 1, 5, id, NULL, 0);
}

static void bad_flags(dg_buf *b, dg_node_id id)
{
	dg_msg_bytes m = { { (const uint8_t *)"x", 1 } };
	frame_msg(b, 0x40, DG_MSG_PING, 5, id, &m);
}

static void bad_after_good(dg_buf *b, dg_node_id id)
{
	/* good frames first: they are handled, then the bad one closes */
	dg_msg_bytes m = { { (const uint8_t *)"fine", 4 } };
	frame_msg(b, DG_FRAME_ONEWAY, DG_MSG_ECHO, 0, id, &m);
	frame_msg(b, DG_FRAME_ONEWAY, DG_MSG_ECHO, 0, id, &m);
	frame_i32(b, DG_FRAME_ONEWAY, DG_MSG_ECHO, 0, id, 3);
}

static void test_raw_after_handshake(void **state)
{
	struct fx *f = *state;
	fx_bad_after(f, "wrong sender id", DG_MSG_PING, bad_sender);
	fx_bad_after(f, "HELLO after the handshake", DG_MSG_HELLO, bad_handshake_type);
	fx_bad_after(f, "PING body of another kind", DG_MSG_PING, bad_body_kind);
	fx_bad_after(f, "PING body with trailing bytes", DG_MSG_PING, bad_trailing);
	fx_bad_after(f, "ERROR flag on a request", DG_MSG_PING, bad_error_request);
	fx_bad_after(f, "ERROR flag on a one-way", DG_MSG_ECHO, bad_error_oneway);
	fx_bad_after(f, "error response with code 0", DG_MSG_PING, bad_error_code);
	fx_bad_after(f, "error response with an unknown code", DG_MSG_PING, bad_error_code_high);
	fx_bad_after(f, "a type nobody defined", DG_MSG_UNKNOWN, bad_unused_type);
	fx_bad_after(f, "body larger than recv_max", DG_MSG_PING, bad_too_large);
	fx_bad_after(f, "unknown flag bit", DG_MSG_PING, bad_flags);
	uint64_t echo = atomic_load(&f->echo.n);
	fx_bad_after(f, "bad frame after good ones", DG_MSG_ECHO, bad_after_good);
	assert_int_equal(atomic_load(&f->echo.n) - echo, 2);
}

/* The same kind of frame injected between two real nodes: it goes through
 * a's queue (internal hook), b drops the connection, a notices and later
 * sends re-dial on their own. */
static void test_injected_after_handshake(void **state)
{
	(void)state;
	dg_tp *a = NODE(.id = 0x1A), *b = NODE(.id = 0x1B);
	struct counter echo;
	memset(&echo, 0, sizeof(echo));
	OK(dg_tp_handle(b, DG_MSG_ECHO, on_count, &echo));
	connect_ok(a, b);
	OK(ping(a, 0x1B, "before"));

	struct fsnap before;
	fsnap_take(b, &before);
	dg_buf f;
	dg_buf_init(&f);
	frame_i32(&f, DG_FRAME_ERROR, DG_MSG_PING, 5, 0x1A, DG_ERR_RANGE);
	struct peer *p = dgi_peer_get(a, 0x1B, false);
	assert_non_null(p);
	pthread_mutex_lock(&p->mu);
	assert_non_null(p->conn);
	OK(dg_buf_reserve(&p->queue, f.len));
	memcpy(p->queue.data + p->queue.len, f.data, f.len);
	p->queue.len += f.len;
	p->queued_frames++;
	struct conn *go = dgi_conn_kick(p);
	pthread_mutex_unlock(&p->mu);
	dgi_conn_start(go);
	dg_buf_free(&f);

	WAIT_FOR(stats(b).disconnects == 1);
	WAIT_FOR(stats(a).disconnects == 1);
	WAIT_FOR(conn_count(b) == 0);
	expect_moved(&before, b, DG_MSG_PING, 1, 0, 0);
	/* a knows b's address: the next message dials again and arrives */
	dg_msg_bytes m = { { (const uint8_t *)"\0\0\0\0\0\0\0\0", 8 } };
	OK(dg_tp_send(a, 0x1B, DG_MSG_ECHO, &m));
	WAIT_FOR(atomic_load(&echo.n) == 1);
	/* counted after the queued frames went out: the echo may come first */
	WAIT_FOR(stats(a).connects == 2);
	OK(ping(a, 0x1B, "after"));
	dg_tp_stop(a);
	dg_tp_stop(b);
}

/* ------------------------------------------------------------------------
 * 7. Request / response
 * ------------------------------------------------------------------------ */

static void test_request_timeout(void **state)
{
	(void)state;
	dg_tp *a = NODE(0), *b = NODE(0);
	struct counter sink;
	memset(&sink, 0, sizeof(sink));
	OK(dg_tp_handle(b, (dg_msg_type)T_SINK, on_count, &sink));
	dg_node_id bid = connect_ok(a, b);

	t_i64 v = { 0 };
	uint64_t t0 = now_ms();
	EXPECT(dg_tp_call(a, bid, (dg_msg_type)T_SINK, &v, 300, NULL, NULL), DG_ERR_TIMEOUT);
	uint64_t took = now_ms() - t0;
	if (took < 300 || took > 500)
		fail_msg("timed out after %llu ms, not 300..500", (unsigned long long)took);
	assert_int_equal(atomic_load(&sink.n), 1); /* it did arrive */

	/* several at once, each on its own deadline */
	struct result r[3];
	const uint32_t tmo[3] = { 100, 250, 400 };
	memset(r, 0, sizeof(r));
	t0 = now_ms();
	for (int i = 0; i < 3; i++) {
		v.v = 1 + i;
		OK(dg_tp_request(a, bid, (dg_msg_type)T_SINK, &v, tmo[i], on_result, &r[i]));
	}
	WAIT_FOR(atomic_load(&r[2].calls) == 1);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(atomic_load(&r[i].calls), 1);
		assert_int_equal(atomic_load(&r[i].err), DG_ERR_TIMEOUT);
		uint64_t at = atomic_load(&r[i].at_ms) - t0;
		if (at < tmo[i] || at > tmo[i] + 200)
			fail_msg("request %d (timeout %u) failed after %llu ms", i, tmo[i],
			    (unsigned long long)at);
	}
	/* the connection is fine and the callback is not called again */
	OK(ping(a, bid, "after timeouts"));
	assert_int_equal(atomic_load(&r[0].calls), 1);
	EXPECT(dg_tp_request(a, bid, DG_MSG_PING, &(dg_msg_bytes){ { NULL, 0 } }, 100,
	    NULL, NULL), DG_ERR_INVAL);
	dg_tp_stop(a);
	dg_tp_stop(b);
}

/* on_result's twin, told apart by dg_tp_cancel */
static void on_result_other(void *ctx, dg_err err, const dg_msg_in *reply)
{
	on_result(ctx, err, reply);
}

/* dg_tp_cancel(cb): every pending request of that callback fails with
 * DG_ERR_CLOSED before it returns — so a module that stops before its
 * transport (the cache grid: a partition sync's question still out) can
 * free what the callbacks use; those of another callback stay.  Without
 * it the grid's callbacks ran at dg_tp_stop, on a freed grid (ASan, in
 * the 66-node scale test). */
/* Lines that can repeat fast (HANDSHAKE-REFUSED / -REJECTED: a node
 * restarted before its old instance's failure was detected logged
 * thousands in seconds, issue 13) are written once per interval, with the
 * count of those left out. */
static void test_log_rate(void **state)
{
	(void)state;
	struct dgi_lograte r;
	memset(&r, 0, sizeof(r));
	uint32_t left = 99;
	assert_true(dgi_lograte_due(&r, 1000, 1000, &left));
	assert_int_equal(left, 0);
	assert_false(dgi_lograte_due(&r, 1001, 1000, &left));
	assert_false(dgi_lograte_due(&r, 1999, 1000, &left));
	assert_true(dgi_lograte_due(&r, 2000, 1000, &left));
	assert_int_equal(left, 2);
	for (uint64_t t = 2001; t < 3000; t++)
		assert_false(dgi_lograte_due(&r, t, 1000, &left));
	assert_true(dgi_lograte_due(&r, 3000, 1000, &left));
	assert_int_equal(left, 999);
}

static void test_request_cancel(void **state)
{
	(void)state;
	dg_tp *a = NODE(0), *b = NODE(0);
	struct counter sink;
	memset(&sink, 0, sizeof(sink));
	OK(dg_tp_handle(b, (dg_msg_type)T_SINK, on_count, &sink));
	dg_node_id bid = connect_ok(a, b);
	struct result r[3], other;
	memset(r, 0, sizeof(r));
	memset(&other, 0, sizeof(other));
	t_i64 v = { 0 };
	for (int i = 0; i < 3; i++)
		OK(dg_tp_request(a, bid, (dg_msg_type)T_SINK, &v, 20000, on_result, &r[i]));
	OK(dg_tp_request(a, bid, (dg_msg_type)T_SINK, &v, 20000, on_result_other, &other));
	WAIT_FOR(atomic_load(&sink.n) == 4);
	dg_tp_cancel(a, on_result);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(atomic_load(&r[i].calls), 1);
		assert_int_equal(atomic_load(&r[i].err), DG_ERR_CLOSED);
	}
	assert_int_equal(atomic_load(&other.calls), 0);
	dg_tp_cancel(a, on_result); /* nothing left of it: no second call */
	for (int i = 0; i < 3; i++)
		assert_int_equal(atomic_load(&r[i].calls), 1);
	OK(ping(a, bid, "after a cancel")); /* the connection is fine */
	dg_tp_stop(a);
	assert_int_equal(atomic_load(&other.calls), 1); /* failed by the stop */
	for (int i = 0; i < 3; i++)
		assert_int_equal(atomic_load(&r[i].calls), 1);
	dg_tp_stop(b);
}

struct err_reply {
	_Atomic int calls;
	_Atomic int err, reply_err, flags, type;
	_Atomic bool body_null;
};

static void on_err_reply(void *ctx, dg_err err, const dg_msg_in *in)
{
	struct err_reply *r = ctx;
	atomic_store(&r->err, (int)err);
	if (in != NULL) {
		atomic_store(&r->reply_err, (int)in->err);
		atomic_store(&r->flags, in->flags);
		atomic_store(&r->type, (int)in->type);
		atomic_store(&r->body_null, in->body == NULL);
	}
	atomic_fetch_add(&r->calls, 1);
}

static void on_wrong(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	(void)ctx;
	t_i64 r = { 7 };
	dg_tp_reply(tp, in, (dg_msg_type)T_SINK, &r); /* not the type the row names */
}

static void test_request_errors(void **state)
{
	(void)state;
	dg_tp *a = NODE(0), *b = NODE(0);
	OK(dg_tp_handle(b, (dg_msg_type)T_FAIL, on_fail, NULL));
	OK(dg_tp_handle(b, (dg_msg_type)T_WRONG, on_wrong, NULL));
	dg_node_id bid = connect_ok(a, b);
	t_i64 v;

	/* an answer of another type than the request's row names: the request
	 * fails, the caller's struct is never written, it counts as malformed */
	uint64_t bad0 = stats(a).malformed_frames;
	t_i64 wr = { 99 };
	v.v = 1;
	EXPECT(dg_tp_call(a, bid, (dg_msg_type)T_WRONG, &v, 5000, &wr, NULL), DG_ERR_BAD_TAG);
	assert_int_equal(wr.v, 99);
	assert_int_equal(stats(a).malformed_frames, bad0 + 1);

	/* the remote handler's error reaches the caller as that error */
	const dg_err codes[] = { DG_ERR_RANGE, DG_ERR_CONFLICT, DG_ERR_NOMEM,
		DG_ERR__COUNT - 1 };
	for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
		v.v = codes[i];
		t_i64 rep = { 99 };
		EXPECT(dg_tp_call(a, bid, (dg_msg_type)T_FAIL, &v, 5000, &rep, NULL), codes[i]);
		assert_int_equal(rep.v, 99); /* not written */
	}
	struct err_reply er;
	memset(&er, 0, sizeof(er));
	v.v = DG_ERR_STATE;
	OK(dg_tp_request(a, bid, (dg_msg_type)T_FAIL, &v, 5000, on_err_reply, &er));
	WAIT_FOR(atomic_load(&er.calls) == 1);
	assert_int_equal(atomic_load(&er.err), DG_ERR_STATE);
	assert_int_equal(atomic_load(&er.reply_err), DG_ERR_STATE);
	assert_int_equal(atomic_load(&er.flags), DG_FRAME_RESPONSE | DG_FRAME_ERROR);
	assert_int_equal(atomic_load(&er.type), T_FAIL);
	assert_true(atomic_load(&er.body_null));

	/* no handler: DG_ERR_UNSUPPORTED (a transport type and an upper one) */
	v.v = 1;
	EXPECT(dg_tp_call(a, bid, (dg_msg_type)T_NOHANDLER, &v, 5000, NULL, NULL),
	    DG_ERR_UNSUPPORTED);
	dg_msg_heartbeat hb = { 1, 2, 0, 0 };
	EXPECT(dg_tp_call(a, bid, DG_MSG_HEARTBEAT, &hb, 5000, NULL, NULL), DG_ERR_UNSUPPORTED);
	/* one-way without a handler: dropped quietly, no answer, no harm */
	OK(dg_tp_send(a, bid, (dg_msg_type)T_NOHANDLER, &v));
	OK(ping(a, bid, "still fine"));
	assert_int_equal(ctr(b, (dg_msg_type)T_NOHANDLER).recv, 2);
	assert_int_equal(ctr(b, (dg_msg_type)T_NOHANDLER).sent, 1);
	assert_int_equal(stats(a).malformed_frames + stats(b).malformed_frames, 1); /* the wrong reply */

	/* nobody by that id */
	dg_msg_bytes m = { { (const uint8_t *)"x", 1 } };
	EXPECT(dg_tp_call(a, 0xDEAD, DG_MSG_PING, &m, 1000, NULL, NULL), DG_ERR_UNREACHABLE);
	EXPECT(dg_tp_send(a, 0xDEAD, DG_MSG_ECHO, &m), DG_ERR_UNREACHABLE);
	EXPECT(dg_tp_request(a, 0xDEAD, DG_MSG_PING, &m, 1000, on_err_reply, &er),
	    DG_ERR_UNREACHABLE);
	EXPECT(dg_tp_send(a, dg_tp_self(a), DG_MSG_ECHO, &m), DG_ERR_INVAL);
	EXPECT(dg_tp_send(a, bid, DG_MSG_UNKNOWN, &m), DG_ERR_INVAL);
	EXPECT(dg_tp_send(a, bid, (dg_msg_type)T_UNUSED, &m), DG_ERR_INVAL);
	assert_int_equal(atomic_load(&er.calls), 1); /* the callback never ran again */

	/* a handler removed (its service stopping, as a grid's at node stop)
	 * answers DG_ERR_NOT_READY — the sender's cue to map again — not
	 * DG_ERR_UNSUPPORTED, which callers pass on to the user as a failure */
	OK(dg_tp_handle(b, (dg_msg_type)T_FAIL, NULL, NULL));
	dg_tp_quiesce(b);
	v.v = DG_ERR_RANGE;
	EXPECT(dg_tp_call(a, bid, (dg_msg_type)T_FAIL, &v, 5000, NULL, NULL), DG_ERR_NOT_READY);
	EXPECT(dg_tp_call(a, bid, (dg_msg_type)T_NOHANDLER, &v, 5000, NULL, NULL),
	    DG_ERR_UNSUPPORTED);

	/* a known id whose address does not answer: the dial fails the request */
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa;
	socklen_t sl = sizeof(sa);
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(getsockname(s, (struct sockaddr *)&sa, &sl), 0);
	char url[64];
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", ntohs(sa.sin_port));
	close(s); /* bound, never listened: connections are refused */
	OK(dg_tp_set_address(a, 0xBEEF, url));
	uint64_t dropped = stats(a).dropped;
	EXPECT(dg_tp_call(a, 0xBEEF, DG_MSG_PING, &m, 3000, NULL, NULL), DG_ERR_UNREACHABLE);
	assert_int_equal(stats(a).dropped, dropped + 1);
	dg_tp_stop(a);
	dg_tp_stop(b);
}

static void test_peer_stop_fails_inflight(void **state)
{
	(void)state;
	dg_tp *a = NODE(0), *b = NODE(0);
	struct counter sink;
	struct result r[5];
	memset(&sink, 0, sizeof(sink));
	memset(r, 0, sizeof(r));
	OK(dg_tp_handle(b, (dg_msg_type)T_SINK, on_count, &sink));
	dg_node_id bid = connect_ok(a, b);
	for (int i = 0; i < 5; i++) {
		t_i64 v = { i };
		OK(dg_tp_request(a, bid, (dg_msg_type)T_SINK, &v, 20000, on_result, &r[i]));
	}
	WAIT_FOR(atomic_load(&sink.n) == 5);
	uint64_t t0 = now_ms();
	dg_tp_stop(b);
	for (int i = 0; i < 5; i++) {
		WAIT_FOR(atomic_load(&r[i].calls) == 1);
		assert_int_equal(atomic_load(&r[i].err), DG_ERR_CONN_BROKEN);
	}
	assert_true(now_ms() - t0 < 5000);
	WAIT_FOR(stats(a).disconnects == 1);
	/* later requests to it fail on their own too (its port is closed) */
	dg_msg_bytes m = { { (const uint8_t *)"x", 1 } };
	dg_err e = dg_tp_call(a, bid, DG_MSG_PING, &m, 3000, NULL, NULL);
	assert_true(e == DG_ERR_UNREACHABLE || e == DG_ERR_CONN_BROKEN);
	for (int i = 0; i < 5; i++)
		assert_int_equal(atomic_load(&r[i].calls), 1);
	dg_tp_stop(a);
}

static void test_disconnect_redials(void **state)
{
	(void)state;
	dg_tp *a = NODE(.id = 0x2A), *b = NODE(.id = 0x2B);
	struct counter sink, echo;
	struct result r;
	memset(&sink, 0, sizeof(sink));
	memset(&echo, 0, sizeof(echo));
	memset(&r, 0, sizeof(r));
	OK(dg_tp_handle(b, (dg_msg_type)T_SINK, on_count, &sink));
	OK(dg_tp_handle(b, DG_MSG_ECHO, on_count, &echo));
	connect_ok(a, b);

	t_i64 v = { 0 };
	OK(dg_tp_request(a, 0x2B, (dg_msg_type)T_SINK, &v, 20000, on_result, &r));
	WAIT_FOR(atomic_load(&sink.n) == 1);
	dg_tp_disconnect(a, 0x2B);
	WAIT_FOR(atomic_load(&r.calls) == 1);
	assert_int_equal(atomic_load(&r.err), DG_ERR_CONN_BROKEN);
	assert_int_equal(stats(a).disconnects, 1);
	dg_tp_disconnect(a, 0x2B); /* nothing left to drop */
	dg_tp_disconnect(a, 0x999);
	assert_int_equal(stats(a).disconnects, 1);

	/* the next send dials again by itself and is delivered */
	uint64_t seq = 0;
	dg_msg_bytes m = { { (const uint8_t *)&seq, 8 } };
	OK(dg_tp_send(a, 0x2B, DG_MSG_ECHO, &m));
	WAIT_FOR(atomic_load(&echo.n) == 1);
	assert_int_equal(atomic_load(&echo.misordered), 0);
	WAIT_FOR(stats(a).connects == 2); /* counted after the frames went out */
	assert_int_equal(stats(a).dropped, 0);
	OK(ping(a, 0x2B, "again"));
	OK(ping(b, 0x2A, "and back"));
	dg_tp_stop(a);
	dg_tp_stop(b);
}

/* Connections reset from outside while others close and the service
 * thread frees them: the member thread's PEER-RESET (dg_tp_disconnect) took
 * the peer's connection and closed it after dropping the peer's lock, so a
 * close elsewhere (the other side's reset, a broken read) could move it to
 * the dead list and have it freed under the closer's feet (TSan caught the
 * use in CI; ASan reports it as heap-use-after-free). */
struct resetter {
	dg_tp *tp;
	dg_node_id peer;
	_Atomic bool *stop;
	int n;
};

static void *reset_loop(void *arg)
{
	struct resetter *r = arg;
	uint64_t seq = 0;
	dg_msg_bytes m = { { (const uint8_t *)&seq, 8 } };
	while (!atomic_load(r->stop)) {
		(void)dg_tp_send(r->tp, r->peer, DG_MSG_ECHO, &m); /* redials */
		dg_tp_disconnect(r->tp, r->peer);
		r->n++;
		sched_yield();
	}
	return NULL;
}

static void test_disconnect_storm(void **state)
{
	(void)state;
	dg_tp *a = NODE(.id = 0x3A), *b = NODE(.id = 0x3B);
	struct counter echo_a, echo_b;
	memset(&echo_a, 0, sizeof(echo_a));
	memset(&echo_b, 0, sizeof(echo_b));
	OK(dg_tp_handle(a, DG_MSG_ECHO, on_count, &echo_a));
	OK(dg_tp_handle(b, DG_MSG_ECHO, on_count, &echo_b));
	connect_ok(a, b);
	_Atomic bool stop = false;
	struct resetter r[3] = {
		{ a, 0x3B, &stop, 0 }, { a, 0x3B, &stop, 0 }, { b, 0x3A, &stop, 0 },
	};
	pthread_t th[3];
	for (int i = 0; i < 3; i++)
		assert_int_equal(pthread_create(&th[i], NULL, reset_loop, &r[i]), 0);
	uint64_t t0 = now_ms();
	while (now_ms() - t0 < 1500)
		sleep_ms(10);
	atomic_store(&stop, true);
	for (int i = 0; i < 3; i++) {
		pthread_join(th[i], NULL);
		assert_true(r[i].n > 0);
	}
	/* and the pair still works afterwards: both ways */
	WAIT_FOR(ping(a, 0x3B, "after") == DG_OK);
	WAIT_FOR(ping(b, 0x3A, "back") == DG_OK);
	assert_true(stats(a).disconnects > 0);
	dg_tp_stop(a);
	dg_tp_stop(b);
}

/* A peer died and another node now listens at its address (a restart on
 * the same port, with a new id): a request to the dead one fails at once
 * with DG_ERR_UNREACHABLE — the dial finds another id there — instead of
 * waiting out its timeout while the dead peer stays "dialing" for good;
 * the next one fails without a dial (the address is forgotten); the
 * connection serves the node that answered.  And a node never dials its
 * own address for another id. */
static void test_peer_moved_fails_fast(void **state)
{
	(void)state;
	dg_tp *a = NODE(.id = 0x3A), *b = NODE(.id = 0x3B);
	char url[128];
	snprintf(url, sizeof(url), "%s", dg_tp_address(b));
	connect_ok(a, b);
	OK(ping(a, 0x3B, "before"));
	dg_tp_stop(b);
	WAIT_FOR(conn_count(a) == 0);
	dg_tp *c = NODE(.id = 0x3C, .url = url);
	assert_string_equal(dg_tp_address(c), url);
	uint64_t t0 = dgi_now_ms();
	assert_int_equal(ping(a, 0x3B, "gone"), DG_ERR_UNREACHABLE);
	assert_true(dgi_now_ms() - t0 < 2000); /* not the 5 s timeout */
	assert_true(stats(a).dropped >= 1);
	t0 = dgi_now_ms();
	assert_int_equal(ping(a, 0x3B, "still gone"), DG_ERR_UNREACHABLE);
	assert_true(dgi_now_ms() - t0 < 500);
	/* once the handshake with c ended (a has no address for c: only
	 * that connection reaches it) */
	WAIT_FOR(ping(a, 0x3C, "the new one") == DG_OK);

	/* the dead one's address given again (a topology naming it): one
	 * more dial, the same fast answer */
	OK(dg_tp_set_address(a, 0x3B, url));
	assert_int_equal(ping(a, 0x3B, "named again"), DG_ERR_UNREACHABLE);

	/* c learns that 0x3B was at c's own address: no dial to itself.  (a's
	 * dial for "named again", if its redial time had come, ends at c as a
	 * handshake failure counted a moment after a's answer: let it land —
	 * under TSan it was counted after the sample) */
	uint64_t refused = stats(c).handshake_failures;
	for (int i = 0; i < 50; i++) {
		sleep_ms(100);
		uint64_t now_refused = stats(c).handshake_failures;
		if (now_refused == refused)
			break;
		refused = now_refused;
	}
	OK(dg_tp_set_address(c, 0x3B, url));
	t0 = dgi_now_ms();
	assert_int_equal(ping(c, 0x3B, "self"), DG_ERR_UNREACHABLE);
	assert_true(dgi_now_ms() - t0 < 500);
	assert_int_equal(stats(c).handshake_failures, refused);
	dg_tp_stop(a);
	dg_tp_stop(c);
}

/* ------------------------------------------------------------------------
 * 8. Ordering
 * ------------------------------------------------------------------------ */

static void test_ordering(void **state)
{
	(void)state;
	enum { N = 10000, EARLY = 200 };
	dg_tp *a = NODE(0), *b = NODE(0);
	struct counter echo;
	memset(&echo, 0, sizeof(echo));
	OK(dg_tp_handle(b, DG_MSG_ECHO, on_count, &echo));
	dg_node_id bid = dg_tp_self(b);

	/* queued while the connection is still being dialed, then the rest */
	OK(dg_tp_set_address(a, bid, dg_tp_address(b)));
	uint8_t payload[24] = { 0 };
	dg_msg_bytes m = { { payload, sizeof(payload) } };
	for (uint64_t i = 0; i < N; i++) {
		memcpy(payload, &i, 8);
		memset(payload + 8, (int)(i & 0xFF), 16);
		OK(dg_tp_send(a, bid, DG_MSG_ECHO, &m));
		if (i == EARLY)
			OK(ping(a, bid, "mid-stream"));
	}
	WAIT_FOR_MS(atomic_load(&echo.n) == N, 20000);
	assert_int_equal(atomic_load(&echo.misordered), 0);
	assert_int_equal(atomic_load(&echo.last), N - 1);
	assert_int_equal(stats(a).connects, 1);
	assert_int_equal(stats(a).dropped, 0);
	dg_tp_stop(a);
	dg_tp_stop(b);
}

/* ------------------------------------------------------------------------
 * 9. Back-pressure
 * ------------------------------------------------------------------------ */

struct gate {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool open;
	_Atomic int entered;
	_Atomic uint64_t got;
};

static void on_gated(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	struct gate *g = ctx;
	(void)tp;
	(void)in;
	atomic_fetch_add(&g->entered, 1);
	pthread_mutex_lock(&g->mu);
	while (!g->open)
		pthread_cond_wait(&g->cv, &g->mu);
	pthread_mutex_unlock(&g->mu);
	atomic_fetch_add(&g->got, 1);
}

static void test_backpressure(void **state)
{
	(void)state;
	enum { PAYLOAD = 16 * 1024 };
	static uint8_t payload[PAYLOAD];
	struct gate g;
	memset(&g, 0, sizeof(g));
	pthread_mutex_init(&g.mu, NULL);
	pthread_cond_init(&g.cv, NULL);
	dg_tp *a = NODE(.send_queue_max = 1024), *b = NODE(0);
	OK(dg_tp_handle(b, DG_MSG_ECHO, on_gated, &g));
	dg_node_id bid = connect_ok(a, b);

	dgi_alloc_stats s0, s1;
	dgi_alloc_get_stats(&s0);
	dg_msg_bytes m = { { payload, PAYLOAD } };
	uint64_t ok = 0, busy = 0, busy_since = 0;
	uint64_t end = now_ms() + 15000;
	bool stalled = false;
	while (now_ms() < end) {
		dg_err e = dg_tp_send(a, bid, DG_MSG_ECHO, &m);
		if (e == DG_OK) {
			ok++;
			busy_since = 0;
		} else if (e == DG_ERR_BUSY) {
			busy++;
			if (busy_since == 0)
				busy_since = now_ms();
			else if (now_ms() - busy_since >= 200) {
				stalled = true; /* the peer reads nothing: the queue stays full */
				break;
			}
			sleep_ms(1);
		} else {
			fail_msg("send: %s", dg_strerror(e));
		}
	}
	assert_true(stalled);
	assert_true(ok > 0);
	assert_true(atomic_load(&g.entered) >= 1);
	dgi_alloc_get_stats(&s1);
	/* bounded memory: the queue holds at most send_queue_max + one frame */
	if (s1.bytes - s0.bytes > 512 * 1024)
		fail_msg("%llu bytes allocated while %llu frames of %d bytes were sent",
		    (unsigned long long)(s1.bytes - s0.bytes), (unsigned long long)ok, PAYLOAD);
	struct peer *p = dgi_peer_get(a, bid, false);
	pthread_mutex_lock(&p->mu);
	size_t qlen = p->queue.len, qcap = p->queue.cap;
	pthread_mutex_unlock(&p->mu);
	assert_true(qlen <= 1024 + PAYLOAD + 64);
	assert_true(qcap <= 4 * (1024 + PAYLOAD + 64));
	assert_int_equal(stats(a).busy, busy);
	assert_int_equal(peer_stats(a, bid).busy, busy);
	assert_int_equal(ctr(a, DG_MSG_ECHO).sent, ok);

	/* let b read: everything accepted arrives, nothing was dropped */
	pthread_mutex_lock(&g.mu);
	g.open = true;
	pthread_cond_broadcast(&g.cv);
	pthread_mutex_unlock(&g.mu);
	WAIT_FOR_MS(atomic_load(&g.got) == ok, 20000);
	OK(dg_tp_send(a, bid, DG_MSG_ECHO, &m));
	WAIT_FOR(atomic_load(&g.got) == ok + 1);
	assert_int_equal(stats(a).dropped, 0);
	assert_int_equal(ctr(b, DG_MSG_ECHO).recv, ok + 1);
	dg_tp_stop(a);
	dg_tp_stop(b);
	pthread_cond_destroy(&g.cv);
	pthread_mutex_destroy(&g.mu);
}

/* ------------------------------------------------------------------------
 * 10. Metrics
 * ------------------------------------------------------------------------ */

static void expect_ctr(const dg_tp *tp, dg_msg_type t, uint64_t sent, uint64_t recv,
    uint64_t bytes_sent, uint64_t bytes_recv)
{
	dg_msg_counters c = ctr(tp, t);
	if (c.sent != sent || c.recv != recv || c.bytes_sent != bytes_sent ||
	    c.bytes_recv != bytes_recv || c.failures != 0)
		fail_msg("%s: sent %llu recv %llu bytes %llu/%llu failures %llu; expected "
		    "%llu %llu %llu/%llu 0", dg_msg_name(t), (unsigned long long)c.sent,
		    (unsigned long long)c.recv, (unsigned long long)c.bytes_sent,
		    (unsigned long long)c.bytes_recv, (unsigned long long)c.failures,
		    (unsigned long long)sent, (unsigned long long)recv,
		    (unsigned long long)bytes_sent, (unsigned long long)bytes_recv);
}

static void test_metrics_exact(void **state)
{
	(void)state;
	enum { NE = 37, NP = 23 };
	const dg_node_id aid = 0x1111, bid = 0x2222;
	dg_tp *a = NODE(.id = aid), *b = NODE(.id = bid);
	struct counter echo;
	memset(&echo, 0, sizeof(echo));
	OK(dg_tp_handle(b, DG_MSG_ECHO, on_count, &echo));
	connect_ok(a, b);

	uint8_t z[DG_NONCE_LEN] = { 0 };
	const char *addr = dg_tp_address(a);
	dg_msg_hello hello = { 1, { "datagrid", 8 }, (int64_t)aid,
		{ addr, (uint32_t)strlen(addr) }, { z, DG_NONCE_LEN }, false };
	dg_msg_challenge ch = { (int64_t)bid, { z, DG_NONCE_LEN }, false, { z, DG_MAC_LEN } };
	dg_msg_proof pr = { { z, DG_MAC_LEN } };
	const uint64_t H = DG_FRAME_HEADER;
	const uint64_t l_hello = H + body_len_of(DG_MSG_HELLO, &hello);
	const uint64_t l_ch = H + body_len_of(DG_MSG_CHALLENGE, &ch);
	const uint64_t l_pr = H + body_len_of(DG_MSG_PROOF, &pr);

	dg_msg_bytes e10 = { { (const uint8_t *)"\0\0\0\0\0\0\0\0xy", 10 } };
	dg_msg_bytes p5 = { { (const uint8_t *)"abcde", 5 } };
	dg_msg_heartbeat hb = { 1, 2, 0, 0 };
	const uint64_t l_echo = H + body_len_of(DG_MSG_ECHO, &e10);
	const uint64_t l_ping = H + body_len_of(DG_MSG_PING, &p5);
	const uint64_t l_hb = H + body_len_of(DG_MSG_HEARTBEAT, &hb);
	dg_buf eb;
	dg_writer w;
	dg_buf_init(&eb);
	dg_writer_init(&w, reg, &eb);
	OK(dg_write_i32(&w, DG_ERR_UNSUPPORTED));
	const uint64_t l_err = H + eb.len;
	dg_buf_free(&eb);

	for (uint64_t i = 0; i < NE; i++) {
		uint8_t pl[10];
		memcpy(pl, &i, 8);
		pl[8] = 'x';
		pl[9] = 'y';
		dg_msg_bytes e = { { pl, 10 } };
		OK(dg_tp_send(a, bid, DG_MSG_ECHO, &e));
	}
	OK(dg_tp_send(a, bid, DG_MSG_LEAVE, NULL));
	for (int i = 0; i < NP; i++)
		OK(ping(a, bid, "abcde"));
	EXPECT(dg_tp_call(a, bid, DG_MSG_HEARTBEAT, &hb, 5000, NULL, NULL), DG_ERR_UNSUPPORTED);
	WAIT_FOR(atomic_load(&echo.n) == NE);

	/* per type, both sides */
	expect_ctr(a, DG_MSG_HELLO, 1, 0, l_hello, 0);
	expect_ctr(b, DG_MSG_HELLO, 0, 1, 0, l_hello);
	expect_ctr(a, DG_MSG_CHALLENGE, 0, 1, 0, l_ch);
	expect_ctr(b, DG_MSG_CHALLENGE, 1, 0, l_ch, 0);
	expect_ctr(a, DG_MSG_PROOF, 1, 0, l_pr, 0);
	expect_ctr(b, DG_MSG_PROOF, 0, 1, 0, l_pr);
	expect_ctr(a, DG_MSG_WELCOME, 0, 1, 0, H);
	expect_ctr(b, DG_MSG_WELCOME, 1, 0, H, 0);
	expect_ctr(a, DG_MSG_ECHO, NE, 0, NE * l_echo, 0);
	expect_ctr(b, DG_MSG_ECHO, 0, NE, 0, NE * l_echo);
	expect_ctr(a, DG_MSG_LEAVE, 1, 0, H, 0);
	expect_ctr(b, DG_MSG_LEAVE, 0, 1, 0, H);
	expect_ctr(a, DG_MSG_PING, NP, NP, NP * l_ping, NP * l_ping);
	expect_ctr(b, DG_MSG_PING, NP, NP, NP * l_ping, NP * l_ping);
	expect_ctr(a, DG_MSG_HEARTBEAT, 1, 1, l_hb, l_err);
	expect_ctr(b, DG_MSG_HEARTBEAT, 1, 1, l_err, l_hb);
	/* every other type untouched */
	dg_msg_metric m[DG_MSG__COUNT];
	for (int side = 0; side < 2; side++) {
		size_t n = dg_tp_metrics(side ? b : a, m, DG_MSG__COUNT);
		for (size_t i = 0; i < n; i++) {
			dg_msg_type t = m[i].type;
			if (t == DG_MSG_HELLO || t == DG_MSG_CHALLENGE || t == DG_MSG_PROOF ||
			    t == DG_MSG_WELCOME || t == DG_MSG_ECHO || t == DG_MSG_LEAVE ||
			    t == DG_MSG_PING || t == DG_MSG_HEARTBEAT)
				continue;
			expect_ctr(side ? b : a, t, 0, 0, 0, 0);
		}
	}

	/* totals: the node's include the handshake, the peer's do not */
	const uint64_t a_sent = 2 + NE + 1 + NP + 1, a_recv = 2 + NP + 1;
	const uint64_t a_bsent = l_hello + l_pr + NE * l_echo + H + NP * l_ping + l_hb;
	const uint64_t a_brecv = l_ch + H + NP * l_ping + l_err;
	dg_tp_stats sa = stats(a), sb = stats(b), pa = peer_stats(a, bid), pb = peer_stats(b, aid);
	assert_int_equal(sa.frames_sent, a_sent);
	assert_int_equal(sa.frames_recv, a_recv);
	assert_int_equal(sa.bytes_sent, a_bsent);
	assert_int_equal(sa.bytes_recv, a_brecv);
	assert_int_equal(sb.frames_sent, a_recv);
	assert_int_equal(sb.frames_recv, a_sent);
	assert_int_equal(sb.bytes_sent, a_brecv);
	assert_int_equal(sb.bytes_recv, a_bsent);
	assert_int_equal(pa.frames_sent, a_sent - 2);
	assert_int_equal(pa.frames_recv, a_recv - 2);
	assert_int_equal(pa.bytes_sent, a_bsent - l_hello - l_pr);
	assert_int_equal(pa.bytes_recv, a_brecv - l_ch - H);
	assert_int_equal(pb.frames_sent, pa.frames_recv);
	assert_int_equal(pb.frames_recv, pa.frames_sent);
	assert_int_equal(pb.bytes_recv, pa.bytes_sent);

	/* the list: UNKNOWN and every type in use, by name, in type order */
	static const char *const names[] = { "UNKNOWN", "HELLO", "CHALLENGE", "PROOF",
		"WELCOME", "REJECT", "PING", "HEARTBEAT", "JOIN", "JOIN_ACK", "TOPOLOGY",
		"NODE_FAILED", "TYPE_PROPOSE", "TYPE_ANNOUNCE", "TYPES_SNAPSHOT", "LEAVE",
		"ECHO" };
	size_t in_use = 1;
	for (int t = 1; t < DG_MSG__COUNT; t++)
		in_use += dg_msg_row_of((dg_msg_type)t) != NULL;
	size_t n = dg_tp_metrics(a, m, DG_MSG__COUNT);
	assert_int_equal(n, in_use);
	assert_true(n >= 17 + 3);
	for (size_t i = 0; i < 17; i++) {
		assert_int_equal(m[i].type, i);
		assert_string_equal(m[i].name, names[i]);
	}
	bool seen_sink = false;
	for (size_t i = 1; i < n; i++) {
		assert_true(m[i].type > m[i - 1].type);
		assert_string_equal(m[i].name, dg_msg_name(m[i].type));
		seen_sink |= m[i].type == (dg_msg_type)T_SINK;
	}
	assert_true(seen_sink);
	/* a short array: filled up to cap, the count is still the whole */
	dg_msg_metric few[4];
	memset(few, 0x5C, sizeof(few));
	assert_int_equal(dg_tp_metrics(a, few, 3), n);
	assert_string_equal(few[2].name, "CHALLENGE");
	assert_int_equal(few[3].type, (dg_msg_type)0x5C5C5C5C);
	assert_int_equal(dg_tp_metrics(a, NULL, 0), n);
	dg_tp_stop(a);
	dg_tp_stop(b);
}

/* ------------------------------------------------------------------------
 * 11. No allocation per message
 * ------------------------------------------------------------------------ */

static void traffic(dg_tp *a, dg_tp *b, struct counter *echo, int sends, int calls)
{
	uint64_t base = atomic_load(&echo->n);
	uint8_t pl[32] = { 0 };
	dg_msg_bytes m = { { pl, sizeof(pl) } };
	for (int i = 0; i < sends; i++) {
		uint64_t seq = base + (uint64_t)i;
		memcpy(pl, &seq, 8);
		OK(dg_tp_send(a, dg_tp_self(b), DG_MSG_ECHO, &m));
	}
	WAIT_FOR_MS(atomic_load(&echo->n) == base + (uint64_t)sends, 20000);
	for (int i = 0; i < calls; i++)
		OK(ping(a, dg_tp_self(b), "steady-state ping"));
}

static void test_no_alloc_per_message(void **state)
{
	(void)state;
	enum { BIG = 600 * 1024 };
	static uint8_t big[BIG];
	dg_tp *a = NODE(0), *b = NODE(0);
	struct counter ea, eb;
	memset(&ea, 0, sizeof(ea));
	memset(&eb, 0, sizeof(eb));
	OK(dg_tp_handle(a, DG_MSG_ECHO, on_count, &ea));
	OK(dg_tp_handle(b, DG_MSG_ECHO, on_count, &eb));
	dg_node_id bid = connect_ok(a, b), aid = dg_tp_self(a);

	/* warm-up: big frames grow both send buffers of each side (they swap)
	 * and the receive buffers past anything the measured traffic needs */
	dg_msg_bytes bm = { { big, BIG } };
	for (uint64_t i = 0; i < 3; i++) {
		memcpy(big, &i, 8);
		OK(dg_tp_send(a, bid, DG_MSG_ECHO, &bm));
		WAIT_FOR(atomic_load(&eb.n) == i + 1);
		OK(dg_tp_send(b, aid, DG_MSG_ECHO, &bm));
		WAIT_FOR(atomic_load(&ea.n) == i + 1);
	}
	traffic(a, b, &eb, 10000, 1000);

	dgi_alloc_stats s0, s1;
	dgi_alloc_get_stats(&s0);
	traffic(a, b, &eb, 10000, 1000);
	dgi_alloc_get_stats(&s1);
	if (s1.allocs != s0.allocs || s1.frees != s0.frees)
		fail_msg("steady state: %llu allocations, %llu frees for 10000 sends and "
		    "1000 requests", (unsigned long long)(s1.allocs - s0.allocs),
		    (unsigned long long)(s1.frees - s0.frees));
	assert_int_equal(atomic_load(&eb.misordered), 0);
	dg_tp_stop(a);
	dg_tp_stop(b);
}

/* Many requests in flight as a stream (a window: each answer lets the next
 * one go) leave tombstones behind in the pending table; clearing them used
 * to rebuild the stripe into a new allocation every few dozen requests
 * (dgbench txn at 128 clients: ~0.1 allocation per tx on the client). */
struct window {
	sem_t room;
	_Atomic uint64_t done, failed;
};

/* The other side: answers each T_FAIL with DG_ERR_BUSY, pausing 300 us
 * every 16th — answers come in bursts, so many requests are in flight. */
static void on_slow_busy(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	_Atomic uint64_t *n = ctx;
	if (atomic_fetch_add(n, 1) % 16 == 0) {
		struct timespec ts = { 0, 300 * 1000 };
		nanosleep(&ts, NULL);
	}
	dg_tp_reply_error(tp, in, DG_ERR_BUSY);
}

static void on_window_reply(void *ctx, dg_err err, const dg_msg_in *reply)
{
	struct window *w = ctx;
	(void)reply;
	if (err != DG_ERR_BUSY)
		atomic_fetch_add(&w->failed, 1);
	atomic_fetch_add(&w->done, 1);
	sem_post(&w->room);
}

static void window_run(dg_tp *a, dg_node_id to, struct window *w, int n)
{
	t_i64 q = { 0 };
	uint64_t base = atomic_load(&w->done);
	for (int i = 0; i < n; i++) {
		while (sem_wait(&w->room) != 0)
			;
		OK(dg_tp_request(a, to, (dg_msg_type)T_FAIL, &q, 10000, on_window_reply, w));
	}
	WAIT_FOR_MS(atomic_load(&w->done) == base + (uint64_t)n, 20000);
}

static void test_no_alloc_requests_in_flight(void **state)
{
	(void)state;
	dg_tp *a = NODE(0), *b = NODE(0);
	static _Atomic uint64_t served;
	OK(dg_tp_handle(b, (dg_msg_type)T_FAIL, on_slow_busy, &served));
	dg_node_id bid = connect_ok(a, b);
	struct window w;
	sem_init(&w.room, 0, 96);
	atomic_init(&w.done, 0);
	atomic_init(&w.failed, 0);
	window_run(a, bid, &w, 40000); /* warm-up: the tables reach their size */
	dgi_alloc_stats s0, s1;
	dgi_alloc_get_stats(&s0);
	window_run(a, bid, &w, 20000);
	dgi_alloc_get_stats(&s1);
	/* (the bursts may still take a send or receive buffer past its
	 * high-water mark now and then — a doubling, in 1 of 3 runs 1-4 of
	 * them; the rebuilds were ~800.  A peer descheduled long enough lets
	 * all four buffers — each side's send and receive — double up to
	 * the whole window's bytes: 24 were seen once with both cores busy
	 * under ctest -j2 and a build.  Doublings are logarithmic; one
	 * allocation per 100 requests would be 200) */
	if (s1.allocs - s0.allocs > 64)
		fail_msg("%llu allocations for 20000 requests, 96 in flight",
		    (unsigned long long)(s1.allocs - s0.allocs));
	assert_int_equal(atomic_load(&w.failed), 0);
	dg_tp_stop(a);
	dg_tp_stop(b);
	sem_destroy(&w.room);
}

/* ------------------------------------------------------------------------
 * 12. Concurrency
 * ------------------------------------------------------------------------ */

struct worker {
	dg_tp *a;
	dg_node_id to;
	int idx;
	int ok;
	dg_err first_err;
};

static void *ping_worker(void *arg)
{
	struct worker *w = arg;
	for (int i = 0; i < 500; i++) {
		char text[32];
		uint8_t mem[64];
		dg_arena ar;
		snprintf(text, sizeof(text), "t%d-%d", w->idx, i);
		dg_arena_init(&ar, mem, sizeof(mem));
		dg_msg_bytes q = { { (const uint8_t *)text, (uint32_t)strlen(text) } };
		dg_msg_bytes r = { { NULL, 0 } };
		dg_err e = dg_tp_call(w->a, w->to, DG_MSG_PING, &q, 10000, &r, &ar);
		if (e == DG_OK && r.data.len == q.data.len &&
		    memcmp(r.data.ptr, text, r.data.len) == 0)
			w->ok++;
		else if (w->first_err == DG_OK)
			w->first_err = e != DG_OK ? e : DG_ERR_BAD_LENGTH;
	}
	return NULL;
}

static void test_concurrent_requests(void **state)
{
	(void)state;
	dg_tp *a = NODE(0), *b = NODE(0);
	dg_node_id bid = connect_ok(a, b);
	pthread_t th[4];
	struct worker w[4];
	for (int i = 0; i < 4; i++) {
		w[i] = (struct worker){ a, bid, i, 0, DG_OK };
		assert_int_equal(pthread_create(&th[i], NULL, ping_worker, &w[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		assert_int_equal(pthread_join(th[i], NULL), 0);
		if (w[i].ok != 500)
			fail_msg("thread %d: %d of 500 succeeded, first error %s", i, w[i].ok,
			    dg_strerror(w[i].first_err));
	}
	assert_int_equal(ctr(a, DG_MSG_PING).sent, 2000);
	assert_int_equal(ctr(a, DG_MSG_PING).recv, 2000);
	assert_int_equal(stats(a).connects, 1);
	dg_tp_stop(a);
	dg_tp_stop(b);
}

enum { ASYNC_PER_THREAD = 25 };

struct staller {
	dg_tp *a;
	dg_node_id to;
	struct result r[ASYNC_PER_THREAD];
	dg_err req_err[ASYNC_PER_THREAD];
	dg_err call_err;
	_Atomic bool returned;
};

static void *stall_worker(void *arg)
{
	struct staller *s = arg;
	t_i64 v = { 0 };
	for (int i = 0; i < ASYNC_PER_THREAD; i++)
		s->req_err[i] = dg_tp_request(s->a, s->to, (dg_msg_type)T_SINK, &v, 30000,
		    on_result, &s->r[i]);
	/* then one blocking call: it stays in flight until the stop */
	s->call_err = dg_tp_call(s->a, s->to, (dg_msg_type)T_SINK, &v, 30000, NULL, NULL);
	atomic_store(&s->returned, true);
	return NULL;
}

struct stop_arg {
	dg_tp *tp;
	_Atomic bool done;
};

static void *stopper(void *arg)
{
	struct stop_arg *sa = arg;
	dg_tp_stop(sa->tp);
	atomic_store(&sa->done, true);
	return NULL;
}

static void test_stop_with_requests_in_flight(void **state)
{
	(void)state;
	dg_tp *a = NODE(0), *b = NODE(0);
	struct counter sink;
	memset(&sink, 0, sizeof(sink));
	OK(dg_tp_handle(b, (dg_msg_type)T_SINK, on_count, &sink));
	dg_node_id bid = connect_ok(a, b);
	static struct staller s[4];
	pthread_t th[4], st;
	memset(s, 0, sizeof(s));
	for (int i = 0; i < 4; i++) {
		s[i].a = a;
		s[i].to = bid;
		assert_int_equal(pthread_create(&th[i], NULL, stall_worker, &s[i]), 0);
	}
	WAIT_FOR(atomic_load(&sink.n) == 4 * (ASYNC_PER_THREAD + 1));
	for (int i = 0; i < 4; i++)
		assert_false(atomic_load(&s[i].returned));

	/* stop a from another thread so a hang fails here, not by timeout */
	struct stop_arg sa = { a, false };
	assert_int_equal(pthread_create(&st, NULL, stopper, &sa), 0);
	for (int i = 0; i < 4; i++)
		WAIT_FOR(atomic_load(&s[i].returned));
	WAIT_FOR(atomic_load(&sa.done));
	assert_int_equal(pthread_join(st, NULL), 0);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(pthread_join(th[i], NULL), 0);
		assert_true(s[i].call_err == DG_ERR_CLOSED || s[i].call_err == DG_ERR_CONN_BROKEN);
		for (int k = 0; k < ASYNC_PER_THREAD; k++) {
			OK(s[i].req_err[k]);
			assert_int_equal(atomic_load(&s[i].r[k].calls), 1);
			int e = atomic_load(&s[i].r[k].err);
			if (e != DG_ERR_CLOSED && e != DG_ERR_CONN_BROKEN)
				fail_msg("request failed with %s", dg_strerror((dg_err)e));
		}
	}
	WAIT_FOR(stats(b).disconnects == 1);
	dg_tp_stop(b);
}

/* ---- membership, in one process ---- */

struct mnode {
	dg_registry *reg;
	dg_tp *tp;
	dg_member *m;
};

static void mnode_start_policy(struct mnode *n, const char *url, const char *seed,
    uint32_t timeout_ms, int policy);

static void mnode_start(struct mnode *n, const char *url, const char *seed,
    uint32_t timeout_ms)
{
	mnode_start_policy(n, url, seed, timeout_ms, DG_PARTITION_MAJORITY);
}

/* Tests of what one node decides alone once the others are gone (a
 * survivor of two coordinating): partition_policy none. */
static void mnode_start_none(struct mnode *n, const char *url, const char *seed,
    uint32_t timeout_ms)
{
	mnode_start_policy(n, url, seed, timeout_ms, DG_PARTITION_NONE);
}

/* The acceptor file the next mnode_start gives its node (NULL: none). */
static const char *mnode_acceptor_path;

static void mnode_start_policy(struct mnode *n, const char *url, const char *seed,
    uint32_t timeout_ms, int policy)
{
	dg_tp_config c;
	dg_member_config mc;
	const char *seeds[1] = { seed };
	OK(dg_registry_create(&n->reg));
	dg_tp_config_init(&c);
	c.reg = n->reg;
	c.listen_url = url;
	c.secret = (const uint8_t *)"membership";
	c.secret_len = 10;
	OK(dg_tp_start(&c, &n->tp));
	dg_member_config_init(&mc);
	mc.seeds = seeds;
	mc.nseeds = seed ? 1 : 0;
	mc.failure_timeout_ms = timeout_ms;
	mc.reg = n->reg;
	mc.partition_policy = policy;
	mc.acceptor_path = mnode_acceptor_path;
	OK(dg_member_start(n->tp, &mc, &n->m));
}

static void mnode_stop(struct mnode *n, bool crash)
{
	if (crash)
		dgi_member_kill(n->m);
	else
		dg_member_stop(n->m);
	dg_tp_stop(n->tp);
	dg_registry_destroy(n->reg);
	memset(n, 0, sizeof(*n));
}

static int64_t mversion(struct mnode *n)
{
	dg_topology *t = dg_member_topology(n->m);
	int64_t v = t ? t->version : -1;
	dg_topology_release(t);
	return v;
}

/* Same version, same ordered ids, on every running node, with `count`
 * nodes. */
static bool magree(struct mnode *ns, int n, uint32_t count)
{
	dg_topology *first = NULL;
	bool ok = true;
	for (int i = 0; i < n && ok; i++) {
		if (ns[i].m == NULL)
			continue;
		dg_topology *t = dg_member_topology(ns[i].m);
		if (t == NULL || t->count != count)
			ok = false;
		else if (first == NULL)
			first = t, t = NULL;
		else if (t->version != first->version)
			ok = false;
		else
			for (uint32_t k = 0; k < count; k++)
				ok &= t->nodes[k].id == first->nodes[k].id;
		dg_topology_release(t);
	}
	dg_topology_release(first);
	return ok;
}

struct topo_log {
	_Atomic int calls;
	_Atomic int64_t last;
};

static void on_topo(void *ctx, const dg_topology *old, const dg_topology *now)
{
	struct topo_log *l = ctx;
	(void)old;
	atomic_store(&l->last, now->version);
	atomic_fetch_add(&l->calls, 1);
}

/* A node configured with a slow failure detector (10 s: a heartbeat every
 * 2 s) joins a cluster that detects in 1 s: it adopts the cluster's
 * timings, so it is not declared failed for heartbeating too slowly, and
 * still detects a crash within the cluster's timeout. */
static void test_membership_adopts_cluster_timings(void **state)
{
	(void)state;
	struct mnode n[3];
	memset(n, 0, sizeof(n));
	mnode_start(&n[0], "tcp://127.0.0.1:0", NULL, 1000);
	mnode_start(&n[1], "tcp://127.0.0.1:0", dg_tp_address(n[0].tp), 10000);
	mnode_start(&n[2], "tcp://127.0.0.1:0", dg_tp_address(n[0].tp), 1000);
	WAIT_FOR_MS(magree(n, 3, 3), 5000);
	int64_t v = mversion(&n[0]);
	sleep_ms(3000); /* three of the cluster's timeouts, more than one own heartbeat */
	assert_int_equal(mversion(&n[0]), v); /* nobody was declared failed */
	assert_true(magree(n, 3, 3));
	/* the slow-configured node detects a crash at the cluster's pace */
	mnode_stop(&n[2], true);
	uint64_t t0 = dgi_now_ms();
	WAIT_FOR_MS(magree(n, 2, 2), 5000);
	assert_true(dgi_now_ms() - t0 < 1000 + 200 + 1000); /* timeout + heartbeat + slack */
	mnode_stop(&n[1], false);
	mnode_stop(&n[0], false);
}

/* A handler's function and context are replaced as one: a frame
 * dispatched while another thread swaps handler A (fn_a, &ctx_a) for B
 * (fn_b, &ctx_b) and back runs fn_a with ctx_a or fn_b with ctx_b, never
 * a mix of the old and the new.  Frames go straight to dgi_dispatch (the
 * path every received frame takes) to make millions of them. */
struct swap_ctx {
	_Atomic uint64_t calls, mixed;
	int tag;
};
static struct swap_ctx swap_a = { .tag = 'a' }, swap_b = { .tag = 'b' };

static void swap_fn_a(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	(void)tp;
	(void)in;
	struct swap_ctx *c = ctx;
	atomic_fetch_add_explicit(&swap_a.calls, 1, memory_order_relaxed);
	if (c != &swap_a)
		atomic_fetch_add_explicit(&swap_a.mixed, 1, memory_order_relaxed);
}

static void swap_fn_b(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	(void)tp;
	(void)in;
	struct swap_ctx *c = ctx;
	atomic_fetch_add_explicit(&swap_b.calls, 1, memory_order_relaxed);
	if (c != &swap_b)
		atomic_fetch_add_explicit(&swap_b.mixed, 1, memory_order_relaxed);
}

struct swapper {
	dg_tp *tp;
	_Atomic bool stop;
	uint64_t swaps;
};

static void *swap_handlers(void *p)
{
	struct swapper *s = p;
	while (!atomic_load(&s->stop)) {
		dg_tp_handle(s->tp, (dg_msg_type)T_SINK, swap_fn_b, &swap_b);
		dg_tp_handle(s->tp, (dg_msg_type)T_SINK, swap_fn_a, &swap_a);
		s->swaps += 2;
	}
	return NULL;
}

static void test_handler_swapped_whole(void **state)
{
	(void)state;
	dg_tp *tp = NODE(0);
	OK(dg_tp_handle(tp, (dg_msg_type)T_SINK, swap_fn_a, &swap_a));
	uint8_t body[16];
	dg_buf b;
	dg_buf_init_fixed(&b, body, sizeof(body));
	dg_writer w;
	dg_writer_init(&w, reg, &b);
	OK(dg_write_i64(&w, 7));
	dg_frame_header h = { DG_FRAME_VERSION, DG_FRAME_ONEWAY, T_SINK, (uint32_t)b.len, 0, 0x77 };
	struct conn *fake = calloc(1, sizeof(*fake)); /* counts what it "received" */
	assert_non_null(fake);
	fake->tp = tp;
	struct swapper sw = { .tp = tp };
	pthread_t t;
	pthread_create(&t, NULL, swap_handlers, &sw);
	uint64_t end = dgi_now_ms() + 1500, n = 0;
	while (dgi_now_ms() < end)
		for (int i = 0; i < 1000; i++, n++)
			dgi_dispatch(tp, fake, &h, body);
	atomic_store(&sw.stop, true);
	pthread_join(t, NULL);
	print_message("      %llu frames, %llu swaps: %llu a, %llu b, %llu mixed\n",
	    (unsigned long long)n, (unsigned long long)sw.swaps,
	    (unsigned long long)atomic_load(&swap_a.calls),
	    (unsigned long long)atomic_load(&swap_b.calls),
	    (unsigned long long)(atomic_load(&swap_a.mixed) + atomic_load(&swap_b.mixed)));
	assert_int_equal(atomic_load(&swap_a.mixed) + atomic_load(&swap_b.mixed), 0);
	assert_true(atomic_load(&swap_a.calls) > 0 && atomic_load(&swap_b.calls) > 0);
	OK(dg_tp_handle(tp, (dg_msg_type)T_SINK, NULL, NULL));
	free(fake);
	dg_tp_stop(tp);
}

/* The lock order (transport_int.h): tp->mu, then peer->mu.  This test
 * takes them in that order, then sends to a peer that must be dialled
 * (which takes tp->mu to list the dial): were the dial started under
 * peer->mu, ThreadSanitizer's deadlock detector would report the
 * inversion (the test passes alone otherwise: nothing waits here). */
static void test_lock_order_send_dials(void **state)
{
	(void)state;
	dg_tp *tp = NODE(0);
	dg_node_id ghost = 0x5eed;
	OK(dg_tp_set_address(tp, ghost, "tcp://127.0.0.1:1")); /* nobody listens */
	struct peer *p = dgi_peer_get(tp, ghost, false);
	assert_non_null(p);
	pthread_mutex_lock(&tp->mu);
	pthread_mutex_lock(&p->mu);
	pthread_mutex_unlock(&p->mu);
	pthread_mutex_unlock(&tp->mu);
	t_i64 v = { 1 };
	dg_err e = dg_tp_send(tp, ghost, (dg_msg_type)T_SINK, &v);
	assert_true(e == DG_OK || e == DG_ERR_UNREACHABLE);
	WAIT_FOR(stats(tp).dropped >= 1 || e != DG_OK); /* the dial failed: dropped */
	dg_tp_stop(tp);
}

/* Sections (epoch.c): a tag taken while a section is open has not passed
 * until that section ends (nested entries count as one); a section that
 * begins after the tag does not hold it back; a thread's slot is reused
 * after it exits. */
struct section_arg {
	_Atomic int step;           /* 1: inside; 2: may leave; 3: left */
};

static void *in_section(void *p)
{
	struct section_arg *a = p;
	dgi_epoch_enter();
	dgi_epoch_enter(); /* nested */
	atomic_store(&a->step, 1);
	while (atomic_load(&a->step) != 2)
		sleep_ms(1);
	dgi_epoch_leave();
	assert_true(dgi_epoch_inside());
	dgi_epoch_leave();
	assert_false(dgi_epoch_inside());
	atomic_store(&a->step, 3);
	return NULL;
}

static void test_sections(void **state)
{
	(void)state;
	for (int round = 0; round < 3; round++) { /* (threads come and go) */
		struct section_arg a = { 0 };
		pthread_t t;
		pthread_create(&t, NULL, in_section, &a);
		while (atomic_load(&a.step) != 1)
			sleep_ms(1);
		uint64_t tag = dgi_epoch_retire();
		assert_false(dgi_epoch_passed(tag));
		dgi_epoch_enter(); /* a section of this thread, begun after the tag */
		assert_false(dgi_epoch_passed(tag)); /* the other still holds it back */
		atomic_store(&a.step, 2);
		while (atomic_load(&a.step) != 3)
			sleep_ms(1);
		assert_true(dgi_epoch_passed(tag)); /* the later one does not count */
		uint64_t tag2 = dgi_epoch_retire();
		assert_false(dgi_epoch_passed(tag2)); /* but holds back what came after it */
		dgi_epoch_leave();
		assert_true(dgi_epoch_passed(tag2));
		pthread_join(t, NULL);
	}
}

/* Sections under load (epoch.c's fences, asymmetric with membarrier):
 * readers load a published object and read it inside sections while a
 * writer replaces it over and over, retires the old one and, once its tag
 * has passed, poisons and frees it.  No reader ever reads a poisoned or
 * freed object (ASan: no use after free; TSan: no race between a read and
 * the poisoning or the free). */
#define STRESS_MAGIC 0x5eca11ed5eca11edull
struct stress_obj {
	uint64_t magic;             /* (plain: TSan sees a read racing the poisoning) */
};
static struct stress_obj *_Atomic stress_cur;
static _Atomic bool stress_stop;
static _Atomic uint64_t stress_bad, stress_reads;

static void *stress_reader(void *p)
{
	(void)p;
	while (!atomic_load_explicit(&stress_stop, memory_order_relaxed)) {
		dgi_epoch_enter();
		struct stress_obj *o = atomic_load_explicit(&stress_cur, memory_order_acquire);
		if (o->magic != STRESS_MAGIC)
			atomic_fetch_add(&stress_bad, 1);
		dgi_epoch_leave();
		atomic_fetch_add_explicit(&stress_reads, 1, memory_order_relaxed);
	}
	return NULL;
}

static void test_sections_stress(void **state)
{
	(void)state;
	enum { READERS = 3, KEEP = 64 };
	struct stress_obj *first = malloc(sizeof(*first));
	assert_non_null(first);
	first->magic = STRESS_MAGIC;
	atomic_store(&stress_cur, first);
	atomic_store(&stress_stop, false);
	pthread_t t[READERS];
	for (int i = 0; i < READERS; i++)
		assert_int_equal(pthread_create(&t[i], NULL, stress_reader, NULL), 0);
	struct { struct stress_obj *o; uint64_t tag; } old[KEEP];
	int nold = 0;
	uint64_t freed = 0, deadline = dgi_now_ms() + 500;
	while (dgi_now_ms() < deadline || freed < 100) {
		struct stress_obj *o = malloc(sizeof(*o));
		assert_non_null(o);
		o->magic = STRESS_MAGIC;
		struct stress_obj *prev = atomic_exchange(&stress_cur, o);
		old[nold].o = prev;
		old[nold++].tag = dgi_epoch_retire();
		for (int i = 0; i < nold;) {
			if (dgi_epoch_passed(old[i].tag) || nold == KEEP) {
				while (!dgi_epoch_passed(old[i].tag))
					sched_yield();
				old[i].o->magic = 0; /* poisoned, then freed */
				free(old[i].o);
				old[i] = old[--nold];
				freed++;
			} else {
				i++;
			}
		}
		assert_true(dgi_now_ms() < deadline + 10000);
	}
	atomic_store(&stress_stop, true);
	for (int i = 0; i < READERS; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < nold; i++)
		free(old[i].o);
	free(atomic_load(&stress_cur));
	print_message("%llu reads, %llu objects freed under them\n",
	    (unsigned long long)atomic_load(&stress_reads), (unsigned long long)freed);
	assert_int_equal(atomic_load(&stress_bad), 0);
	assert_true(atomic_load(&stress_reads) > 0);
}

/* Three nodes (over ipc:// and tcp://) join through a seed, agree on every
 * version; a crashed member and then a crashed coordinator are removed
 * within the timeout plus a heartbeat; listeners see each version. */
static void test_membership(void **state)
{
	(void)state;
	struct mnode n[3];
	char ipc[128];
	snprintf(ipc, sizeof(ipc), "ipc:///tmp/dg-member-%d", (int)getpid());
	memset(n, 0, sizeof(n));
	mnode_start_none(&n[0], ipc, NULL, 1000);
	assert_int_equal(mversion(&n[0]), 1);
	assert_true(dg_member_is_coordinator(n[0].m));
	mnode_start_none(&n[1], "tcp://127.0.0.1:0", dg_tp_address(n[0].tp), 1000);
	mnode_start_none(&n[2], "tcp://127.0.0.1:0", dg_tp_address(n[0].tp), 1000);
	WAIT_FOR(magree(n, 3, 3));
	assert_int_equal(mversion(&n[0]), 3);
	assert_false(dg_member_is_coordinator(n[1].m));
	struct topo_log l = { 0 };
	OK(dg_member_listen(n[1].m, on_topo, &l));

	/* requests flow between members found through the topology */
	dg_msg_bytes ping = { { (const uint8_t *)"ring", 4 } }, pong;
	uint8_t mem[64];
	dg_arena a;
	dg_arena_init(&a, mem, sizeof(mem));
	OK(dg_tp_call(n[2].tp, dg_tp_self(n[1].tp), DG_MSG_PING, &ping, 2000, &pong, &a));

	/* a member crashes (no LEAVE): removed within timeout + heartbeat */
	uint64_t t0 = dgi_now_ms();
	mnode_stop(&n[2], true);
	WAIT_FOR(magree(n, 3, 2));
	assert_true(dgi_now_ms() - t0 <= 1000 + 200 + 300); /* + polling slack */
	assert_int_equal(mversion(&n[0]), 4);
	WAIT_FOR(atomic_load(&l.last) == 4);

	/* the coordinator crashes: the next by order takes over */
	t0 = dgi_now_ms();
	mnode_stop(&n[0], true);
	WAIT_FOR(magree(n, 3, 1));
	assert_true(dgi_now_ms() - t0 <= 1000 + 200 + 300);
	assert_true(dg_member_is_coordinator(n[1].m));
	assert_int_equal(mversion(&n[1]), 5);
	mnode_stop(&n[1], false);
}

/* A member reports as failed a node the coordinator's topology does not
 * have, at the coordinator's version or later: their topologies of one
 * version differ (two nodes coordinated it when a coordinator left while
 * another node saw it gone).  The coordinator issues a new version above
 * the reporter's, and every node installs it; a report from an older
 * version changes nothing. */
static void test_membership_resync_on_unknown_report(void **state)
{
	(void)state;
	struct mnode n[3];
	memset(n, 0, sizeof(n));
	mnode_start(&n[0], "tcp://127.0.0.1:0", NULL, 1000);
	mnode_start(&n[1], "tcp://127.0.0.1:0", dg_tp_address(n[0].tp), 1000);
	mnode_start(&n[2], "tcp://127.0.0.1:0", dg_tp_address(n[0].tp), 1000);
	WAIT_FOR(magree(n, 3, 3));
	int64_t v = mversion(&n[0]);
	assert_true(dg_member_is_coordinator(n[0].m));
	dg_msg_node_failed stale = { 0x5eed0001, v - 1 };
	OK(dg_tp_send(n[1].tp, dg_tp_self(n[0].tp), DG_MSG_NODE_FAILED, &stale));
	sleep_ms(300);
	assert_int_equal(mversion(&n[0]), v);
	dg_msg_node_failed f = { 0x5eed0002, v + 5 };
	OK(dg_tp_send(n[1].tp, dg_tp_self(n[0].tp), DG_MSG_NODE_FAILED, &f));
	WAIT_FOR(magree(n, 3, 3) && mversion(&n[2]) > v + 5);
	assert_int_equal(mversion(&n[0]), v + 6);
	mnode_stop(&n[2], false);
	mnode_stop(&n[1], false);
	mnode_stop(&n[0], false);
}

/* STANDBY bit of node `who` in n's topology. */
static bool mstandby(struct mnode *n, struct mnode *who)
{
	dg_topology *t = dg_member_topology(n->m);
	const dg_topology_node *x = dg_topology_find(t, dg_tp_self(who->tp));
	bool s = x != NULL && (x->attrs & DG_NODE_STANDBY) != 0;
	dg_topology_release(t);
	return s;
}

/* The baseline: set through a member (sent to the coordinator), one new
 * version with the STANDBY bits on every node, carried by TOPOLOGY so the
 * next coordinator keeps it and applies it to a joiner; refusals change
 * nothing. */
static void test_membership_baseline(void **state)
{
	(void)state;
	struct mnode n[4];
	memset(n, 0, sizeof(n));
	mnode_start_none(&n[0], "tcp://127.0.0.1:0", NULL, 1000);
	mnode_start_none(&n[1], "tcp://127.0.0.1:0", dg_tp_address(n[0].tp), 1000);
	mnode_start_none(&n[2], "tcp://127.0.0.1:0", dg_tp_address(n[0].tp), 1000);
	WAIT_FOR(magree(n, 3, 3));
	char out[4][DG_BASELINE_ADDR_MAX];
	bool set = true;
	assert_int_equal(dg_member_baseline(n[1].m, out, 4, &set), 0);
	assert_false(set);
	int64_t v = mversion(&n[0]);
	const char *two[] = { dg_tp_address(n[1].tp), dg_tp_address(n[0].tp) };
	OK(dg_member_set_baseline(n[2].m, DG_BASELINE_SET, two, 2, 5000));
	assert_true(mversion(&n[2]) == v + 1); /* installed here before returning */
	WAIT_FOR(magree(n, 3, 3));
	for (int i = 0; i < 3; i++) {
		assert_int_equal(dg_member_baseline(n[i].m, out, 4, &set), 2);
		assert_true(set);
		assert_true(strcmp(out[0], out[1]) < 0); /* sorted */
		assert_true(mstandby(&n[i], &n[2]) && !mstandby(&n[i], &n[0]) &&
		    !mstandby(&n[i], &n[1]));
	}
	/* nothing to change: no new version */
	OK(dg_member_set_baseline(n[0].m, DG_BASELINE_ADD, two, 1, 5000));
	assert_int_equal(mversion(&n[0]), v + 1);
	/* refused: nobody online would own data */
	const char *gone[] = { "tcp://127.0.0.1:9" };
	EXPECT(dg_member_set_baseline(n[1].m, DG_BASELINE_SET, gone, 1, 5000), DG_ERR_INVAL);
	EXPECT(dg_member_set_baseline(n[1].m, DG_BASELINE_REMOVE, two, 2, 5000), DG_ERR_INVAL);
	EXPECT(dg_member_set_baseline(n[1].m, 3, two, 2, 5000), DG_ERR_INVAL);
	assert_int_equal(mversion(&n[0]), v + 1);

	/* the coordinator crashes: n[1] coordinates with the same set */
	mnode_stop(&n[0], true);
	WAIT_FOR(magree(n, 3, 2));
	assert_int_equal(dg_member_baseline(n[1].m, out, 4, &set), 2);
	assert_true(set && mstandby(&n[1], &n[2]));
	/* a joiner outside the set is STANDBY; one named in it is not */
	mnode_start_none(&n[3], "tcp://127.0.0.1:0", dg_tp_address(n[1].tp), 1000);
	WAIT_FOR(magree(n, 4, 3));
	assert_true(mstandby(&n[3], &n[3]) && mstandby(&n[1], &n[3]));
	const char *four[] = { dg_tp_address(n[3].tp) };
	OK(dg_member_set_baseline(n[3].m, DG_BASELINE_ADD, four, 1, 5000));
	assert_false(mstandby(&n[3], &n[3]));
	WAIT_FOR(!mstandby(&n[2], &n[3]));
	assert_int_equal(dg_member_baseline(n[2].m, out, 4, &set), 3);
	mnode_stop(&n[3], false);
	mnode_stop(&n[2], false);
	mnode_stop(&n[1], false);
}

typedef struct mpt {
	int32_t x;
	dg_str s;
} mpt;

/* A type registered on one member is known to every member before the
 * registration returns; a conflicting definition is refused everywhere;
 * a node joining later receives it; a graceful stop is seen at once. */
static void test_membership_types(void **state)
{
	(void)state;
	struct mnode n[3];
	memset(n, 0, sizeof(n));
	mnode_start(&n[0], "tcp://127.0.0.1:0", NULL, 2000);
	mnode_start(&n[1], "tcp://127.0.0.1:0", dg_tp_address(n[0].tp), 2000);
	WAIT_FOR(magree(n, 2, 2));
	static const dg_field_def f[] = { DG_FIELD(mpt, x, DG_I32), DG_FIELD(mpt, s, DG_STRING) };
	dg_type_def td = { "MPoint", f, 2, sizeof(mpt) };
	OK(dg_registry_register(n[1].reg, &td, NULL));
	assert_non_null(dg_registry_find(n[0].reg, dg_type_id("MPoint")));
	static const dg_field_def g[] = { DG_FIELD(mpt, x, DG_STRING) };
	dg_type_def bad = { "MPoint", g, 1, sizeof(mpt) };
	EXPECT(dg_registry_register(n[0].reg, &bad, NULL), DG_ERR_CONFLICT);
	/* registered on the coordinator itself */
	dg_type_def td2 = { "MPoint2", f, 2, sizeof(mpt) };
	OK(dg_registry_register(n[0].reg, &td2, NULL));
	assert_non_null(dg_registry_find(n[1].reg, dg_type_id("MPoint2")));
	/* a latecomer gets both */
	mnode_start(&n[2], "tcp://127.0.0.1:0", dg_tp_address(n[1].tp), 2000);
	WAIT_FOR(magree(n, 3, 3));
	assert_non_null(dg_registry_find(n[2].reg, dg_type_id("MPoint")));
	assert_non_null(dg_registry_find(n[2].reg, dg_type_id("MPoint2")));
	/* a graceful stop is not waited out for the failure timeout */
	uint64_t t0 = dgi_now_ms();
	mnode_stop(&n[2], false);
	WAIT_FOR(magree(n, 3, 2));
	assert_true(dgi_now_ms() - t0 < 2000);
	mnode_stop(&n[1], false);
	mnode_stop(&n[0], false);
}

/* ---- a paused node (issue 12) ---- */

/* Every version a node installed, with a hash of its ordered node ids: two
 * nodes must never install different topologies under one version. */
struct vlog {
	pthread_mutex_t mu;
	int n;
	int64_t v[256];
	uint64_t h[256];
};

static uint64_t topo_hash(const dg_topology *t)
{
	uint64_t h = 1469598103934665603ull;
	for (uint32_t i = 0; i < t->count; i++)
		h = (h ^ t->nodes[i].id) * 1099511628211ull;
	return h;
}

static void on_vlog(void *ctx, const dg_topology *old, const dg_topology *now)
{
	struct vlog *l = ctx;
	(void)old;
	pthread_mutex_lock(&l->mu);
	if (l->n < 256) {
		l->v[l->n] = now->version;
		l->h[l->n++] = topo_hash(now);
	}
	pthread_mutex_unlock(&l->mu);
}

/* No version installed with two different node lists, across nodes. */
static void vlogs_check(struct vlog *l, int n)
{
	static struct vlog c[8];
	for (int a = 0; a < n && a < 8; a++) {
		pthread_mutex_lock(&l[a].mu);
		c[a].n = l[a].n;
		memcpy(c[a].v, l[a].v, sizeof(c[a].v));
		memcpy(c[a].h, l[a].h, sizeof(c[a].h));
		pthread_mutex_unlock(&l[a].mu);
	}
	for (int a = 0; a < n && a < 8; a++)
		for (int b = a + 1; b < n && b < 8; b++)
			for (int i = 0; i < c[a].n; i++)
				for (int j = 0; j < c[b].n; j++)
					if (c[a].v[i] == c[b].v[j] && c[a].h[i] != c[b].h[j])
						fail_msg("version %lld installed with two node lists "
						    "(nodes %d and %d)", (long long)c[a].v[i], a, b);
}

static void on_echo_block(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	(void)tp;
	(void)in;
	sleep_ms((unsigned)(uintptr_t)ctx);
}

/* Pauses n for ms as a SIGSTOP would: its membership thread (heartbeats,
 * failure detection) and its transport's reactor thread (every tcp://
 * read, every handler) stop running; frames sent to it wait in its
 * sockets.  The reactor is held by an ECHO handler that blocks, sent by
 * `by`. */
static void mnode_pause(struct mnode *n, unsigned ms, struct mnode *by)
{
	OK(dg_tp_handle(n->tp, DG_MSG_ECHO, on_echo_block, (void *)(uintptr_t)ms));
	dgi_member_test_stall(n->m, ms);
	dg_msg_bytes b = { { (const uint8_t *)"zz", 2 } };
	OK(dg_tp_send(by->tp, dg_tp_self(n->tp), DG_MSG_ECHO, &b));
}

static uint32_t mcount(struct mnode *n)
{
	dg_topology *t = dg_member_topology(n->m);
	uint32_t c = t ? t->count : 0;
	dg_topology_release(t);
	return c;
}

static int64_t morder(struct mnode *in, struct mnode *who)
{
	dg_topology *t = dg_member_topology(in->m);
	const dg_topology_node *x = dg_topology_find(t, dg_tp_self(who->tp));
	int64_t o = x ? x->order : -1;
	dg_topology_release(t);
	return o;
}

/* Node `victim` of three is paused for 3 failure timeouts: the others
 * drop it.  On waking it heard nothing for longer than the timeout, but
 * the silence was its own: it must not declare the others failed nor
 * install a topology of its own; told by them that it is out, it joins
 * again as a new member (a new order) and all three agree on one topology
 * within a few seconds of the pause's end.  No version is ever installed
 * with two different node lists. */
static void pause_and_back(int victim)
{
	struct mnode n[3];
	struct vlog l[3];
	memset(n, 0, sizeof(n));
	memset(l, 0, sizeof(l));
	mnode_start(&n[0], "tcp://127.0.0.1:0", NULL, 1000);
	mnode_start(&n[1], "tcp://127.0.0.1:0", dg_tp_address(n[0].tp), 1000);
	mnode_start(&n[2], "tcp://127.0.0.1:0", dg_tp_address(n[0].tp), 1000);
	WAIT_FOR(magree(n, 3, 3));
	for (int i = 0; i < 3; i++) {
		pthread_mutex_init(&l[i].mu, NULL);
		OK(dg_member_listen(n[i].m, on_vlog, &l[i]));
	}
	int64_t v = mversion(&n[0]);
	int64_t order = morder(&n[0], &n[victim]);
	int a = (victim + 1) % 3, b = (victim + 2) % 3;
	uint64_t t0 = dgi_now_ms();
	mnode_pause(&n[victim], 3000, &n[a]);
	/* the others drop it while it is paused (timeout + heartbeat) */
	WAIT_FOR_MS(mcount(&n[a]) == 2 && mcount(&n[b]) == 2 &&
	    mversion(&n[a]) == mversion(&n[b]), 2900);
	assert_true(dgi_now_ms() - t0 < 3000);
	/* back: one topology of three, within 5 s of the pause's end */
	WAIT_FOR_MS(magree(n, 3, 3) && mversion(&n[a]) > v + 1, 3000 + 5000);
	/* joined again as the newest member, under an order it never had (a
	 * new incarnation, even when it was the newest before) */
	int64_t max = 0;
	for (int i = 0; i < 3; i++)
		if (morder(&n[a], &n[i]) > max)
			max = morder(&n[a], &n[i]);
	assert_int_equal(morder(&n[a], &n[victim]), max);
	assert_true(max > order);
	assert_true(morder(&n[victim], &n[victim]) == morder(&n[a], &n[victim]));
	vlogs_check(l, 3);
	/* and it stays: nobody is dropped once it is back */
	int64_t back = mversion(&n[a]);
	sleep_ms(1500);
	assert_true(magree(n, 3, 3));
	assert_int_equal(mversion(&n[a]), back);
	vlogs_check(l, 3);
	for (int i = 2; i >= 0; i--)
		mnode_stop(&n[i], false);
	for (int i = 0; i < 3; i++)
		pthread_mutex_destroy(&l[i].mu);
}

struct removed_log {
	_Atomic int n;
	_Atomic int64_t version;
	_Atomic uint32_t count;
};

/* A REMOVED's topology: its version and node count (LIST: version, n, ...). */
static void on_removed_log(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	struct removed_log *l = ctx;
	const dg_msg_raw *b = in->body;
	dg_reader r;
	uint32_t count;
	int64_t v = 0, n = 0;
	(void)tp;
	dg_reader_init(&r, reg, b->list.ptr, b->list.len);
	if (dg_read_begin(&r, DG_LIST, &count) == DG_OK && dg_read_i64(&r, &v) == DG_OK &&
	    dg_read_i64(&r, &n) == DG_OK) {
		atomic_store(&l->version, v);
		atomic_store(&l->count, (uint32_t)n);
	}
	atomic_fetch_add(&l->n, 1);
}

/* A TOPOLOGY/REMOVED body: version, the nodes (id, order, url), no baseline. */
static void topo_body_attrs(dg_buf *b, int64_t version, const dg_node_id *ids,
    const char *const *urls, const int64_t *attrs, int n);

static void topo_body(dg_buf *b, int64_t version, const dg_node_id *ids, const char *const *urls,
    int n)
{
	topo_body_attrs(b, version, ids, urls, NULL, n);
}

/* (attrs NULL: every node a server) */
static void topo_body_attrs(dg_buf *b, int64_t version, const dg_node_id *ids,
    const char *const *urls, const int64_t *attrs, int n)
{
	dg_writer w;
	dg_buf_reset(b);
	dg_writer_init(&w, reg, b);
	OK(dg_write_list_begin(&w, 3 + 4 * (uint32_t)n));
	OK(dg_write_i64(&w, version));
	OK(dg_write_i64(&w, n));
	for (int i = 0; i < n; i++) {
		OK(dg_write_i64(&w, (int64_t)ids[i]));
		OK(dg_write_i64(&w, i + 1));
		OK(dg_write_str(&w, urls[i], strlen(urls[i])));
		OK(dg_write_i64(&w, attrs != NULL ? attrs[i] : 0));
	}
	OK(dg_write_i64(&w, -1));
	OK(dg_write_end(&w));
	OK(dg_writer_finish(&w));
}

/* A TOPOLOGY whose node URL or baseline address holds a NUL byte is
 * refused: they are used as C strings, and one cut at the NUL re-encoded
 * into a TOPOLOGY the same decoder refuses (tests/fuzz crash msg_fuzz-3). */
static void test_topology_refuses_nul(void **state)
{
	(void)state;
	struct mnode n;
	memset(&n, 0, sizeof(n));
	mnode_start(&n, "tcp://127.0.0.1:0", NULL, 1000);
	dg_buf b;
	dg_writer w;
	dg_topology *t;
	dg_buf_init(&b);
	static const char urls[2][12] = { "tcp://a:1", "tcp://a\0:1" };
	for (int bad = 0; bad < 2; bad++) {
		for (int where = 0; where < 2; where++) {
			dg_buf_reset(&b);
			dg_writer_init(&w, reg, &b);
			OK(dg_write_list_begin(&w, 3 + 4 + (where ? 1 : 0)));
			OK(dg_write_i64(&w, 7));
			OK(dg_write_i64(&w, 1));
			OK(dg_write_i64(&w, 99));
			OK(dg_write_i64(&w, 1));
			OK(dg_write_str(&w, where == 0 ? urls[bad] : urls[0], where == 0 && bad ? 10 : 9));
			OK(dg_write_i64(&w, 0));
			if (where == 0) {
				OK(dg_write_i64(&w, -1));
			} else {   /* a baseline of one address */
				OK(dg_write_i64(&w, 1));
				OK(dg_write_str(&w, urls[bad], bad ? 10 : 9));
			}
			OK(dg_write_end(&w));
			OK(dg_writer_finish(&w));
			dg_raw raw = { b.data, (uint32_t)b.len };
			dg_err e = dgi_member_topo_decode(n.m, &raw, &t);
			if (!bad) {
				OK(e);
				dg_topology_release(t);
			} else {
				assert_int_equal(e, DG_ERR_BAD_LENGTH);
			}
		}
	}
	dg_buf_free(&b);
	mnode_stop(&n, false);
}

/* The REMOVED rules (PROTOCOL.md, "A paused node"): a member answers a
 * HEARTBEAT from a node outside its topology with REMOVED carrying it —
 * unless the heartbeat's version is newer (a joiner whose TOPOLOGY has not
 * arrived yet).  A member ignores a REMOVED that is not newer than its
 * topology, or that comes from a node outside the topology it carries;
 * a newer one from a member of it makes it drop out and join again. */
static void test_membership_removed_rules(void **state)
{
	(void)state;
	struct mnode n[2];
	memset(n, 0, sizeof(n));
	mnode_start(&n[0], "tcp://127.0.0.1:0", NULL, 1000);
	mnode_start(&n[1], "tcp://127.0.0.1:0", dg_tp_address(n[0].tp), 1000);
	WAIT_FOR(magree(n, 2, 2));
	int64_t v = mversion(&n[0]);
	dg_tp *x = NODE(.secret = "membership");
	struct removed_log l = { 0 };
	OK(dg_tp_handle(x, DG_MSG_REMOVED, on_removed_log, &l));
	connect_ok(x, n[0].tp);
	connect_ok(x, n[1].tp);

	/* a heartbeat of a newer version: a joiner, no answer */
	dg_msg_heartbeat hb = { v + 5, 0, 0, 0 };
	OK(dg_tp_send(x, dg_tp_self(n[0].tp), DG_MSG_HEARTBEAT, &hb));
	sleep_ms(300);
	assert_int_equal(atomic_load(&l.n), 0);
	/* an older one: told it is out, with n[0]'s topology */
	hb.topology_version = v - 1;
	OK(dg_tp_send(x, dg_tp_self(n[0].tp), DG_MSG_HEARTBEAT, &hb));
	WAIT_FOR(atomic_load(&l.n) == 1);
	assert_int_equal(atomic_load(&l.version), v);
	assert_int_equal(atomic_load(&l.count), 2);

	/* REMOVED that n[1] must ignore: not newer; newer but from a node
	 * outside the topology it carries */
	dg_buf b;
	dg_buf_init(&b);
	dg_node_id only0[] = { dg_tp_self(n[0].tp) };
	const char *url0[] = { dg_tp_address(n[0].tp) };
	topo_body(&b, v, only0, url0, 1);
	dg_msg_raw body = { { b.data, (uint32_t)b.len } };
	OK(dg_tp_send(x, dg_tp_self(n[1].tp), DG_MSG_REMOVED, &body));
	topo_body(&b, v + 10, only0, url0, 1);
	body = (dg_msg_raw){ { b.data, (uint32_t)b.len } };
	OK(dg_tp_send(x, dg_tp_self(n[1].tp), DG_MSG_REMOVED, &body));
	sleep_ms(300);
	assert_int_equal(mversion(&n[1]), v);
	assert_true(magree(n, 2, 2));

	/* newer, from a member of it: n[1] drops out (installs it) and joins
	 * again through n[0], above that version.  It names x only, not n[0]:
	 * n[1] takes it for agreed and sends it to any member of it that
	 * heartbeats an older version (dgi_member_on_heartbeat's "behind", a
	 * node rejoining too).  When it named n[0] and n[0]'s heartbeat came
	 * between n[1]'s drop-out and its rejoin, n[0] installed this forged
	 * version, whose other voter, x, never votes: n[0] could add nobody
	 * (TOPOLOGY-NOT-AGREED) and n[1] stayed out (1 of 12 runs of the
	 * whole file, 11 of 300 of this test alone, under two busy loops). */
	dg_node_id only_x[] = { dg_tp_self(x) };
	const char *url_x[] = { dg_tp_address(x) };
	topo_body(&b, v + 10, only_x, url_x, 1);
	body = (dg_msg_raw){ { b.data, (uint32_t)b.len } };
	OK(dg_tp_send(x, dg_tp_self(n[1].tp), DG_MSG_REMOVED, &body));
	WAIT_FOR(magree(n, 2, 2) && mversion(&n[1]) > v + 10);
	dg_buf_free(&b);
	mnode_stop(&n[1], false);
	mnode_stop(&n[0], false);
	dg_tp_stop(x);
}

/* ---- the majority (PROTOCOL.md, "Majority") ---- */

/* k nodes (failure timeout 1 s; the first forms the cluster, the others
 * join through it), agreeing on one topology of k; stopped in reverse. */
static void mnodes_start(struct mnode *n, int k)
{
	memset(n, 0, sizeof(*n) * (size_t)k);
	mnode_start(&n[0], "tcp://127.0.0.1:0", NULL, 1000);
	for (int i = 1; i < k; i++)
		mnode_start(&n[i], "tcp://127.0.0.1:0", dg_tp_address(n[0].tp), 1000);
	WAIT_FOR(magree(n, k, (uint32_t)k));
}

static void mnodes_stop(struct mnode *n, int k)
{
	for (int i = k - 1; i >= 0; i--)
		mnode_stop(&n[i], false);
}

/* A topology of n nodes (urls[i], CLIENT where client[i]) for the pure
 * quorum functions; baseline: NULL (auto) or nb addresses. */
static dg_topology *qtopo(int n, const char *const *urls, const bool *client,
    const char *const *baseline, int nb)
{
	dg_topology *t = calloc(1, sizeof(*t) + (size_t)n * sizeof(t->nodes[0]));
	assert_non_null(t);
	t->version = 1;
	t->count = (uint32_t)n;
	atomic_init(&t->refs, 1);
	for (int i = 0; i < n; i++) {
		t->nodes[i].id = (dg_node_id)(i + 1);
		t->nodes[i].order = i + 1;
		t->nodes[i].url = urls[i];
		t->nodes[i].attrs = client != NULL && client[i] ? DG_NODE_CLIENT : 0;
	}
	t->baseline_set = baseline != NULL;
	t->nbaseline = (uint32_t)nb;
	t->baseline = baseline;
	return t;
}

/* The rejoin back-off: 50 ms doubling to 2 s and staying there; each wait
 * jittered within [interval / 2, interval], spread over that range by the
 * seed (two nodes of a healed side do not ask in step). */
static void test_rejoin_backoff(void **state)
{
	(void)state;
	uint32_t want[] = { 50, 100, 200, 400, 800, 1600, 2000, 2000 };
	uint32_t b = DGI_BACKOFF_MIN_MS;
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		assert_int_equal(b, want[i]);
		b = dgi_backoff_next(b);
	}
	assert_int_equal(dgi_backoff_next(0), DGI_BACKOFF_MIN_MS);
	assert_int_equal(dgi_backoff_next(1999), DGI_BACKOFF_MAX_MS);
	for (uint32_t iv = 50; iv <= 2000; iv = dgi_backoff_next(iv)) {
		uint32_t lo = UINT32_MAX, hi = 0;
		for (uint64_t seed = 1; seed < 2000; seed++) {
			uint32_t w = dgi_backoff_wait(iv, seed * 7919);
			assert_true(w >= iv / 2 && w <= iv);
			lo = w < lo ? w : lo;
			hi = w > hi ? w : hi;
		}
		assert_true(hi - lo >= iv / 4); /* spread, not one value */
		if (iv == 2000)
			break;
	}
}

static void test_majority_arithmetic(void **state)
{
	(void)state;
	/* voters: servers, sorted and distinct (two instances of one
	 * address — a restarted node not yet detected — are one voter) */
	const char *urls[] = { "tcp://c:1", "tcp://a:1", "tcp://b:1", "tcp://a:1", "tcp://k:1" };
	const bool client[] = { false, false, false, false, true };
	dg_topology *t = qtopo(5, urls, client, NULL, 0);
	const char *v[8];
	assert_int_equal(dgi_quorum_voters(t, v, 8), 3);
	assert_string_equal(v[0], "tcp://a:1");
	assert_string_equal(v[1], "tcp://b:1");
	assert_string_equal(v[2], "tcp://c:1");
	assert_int_equal(dgi_quorum_index(v, 3, "tcp://b:1"), 1);
	assert_int_equal(dgi_quorum_index(v, 3, "tcp://k:1"), -1); /* a client */
	assert_int_equal(dgi_quorum_index(v, 0, "tcp://a:1"), -1);
	free(t);
	/* a baseline is the voting set, online or not */
	const char *bl[] = { "tcp://a:1", "tcp://x:1", "tcp://y:1", "tcp://z:1" };
	t = qtopo(5, urls, client, bl, 4);
	assert_int_equal(dgi_quorum_voters(t, v, 8), 4);
	assert_string_equal(v[1], "tcp://x:1");
	assert_int_equal(dgi_quorum_index(v, 4, "tcp://c:1"), -1);
	free(t);
	/* majorities: one voter is one; five need three; four need three */
	const uint32_t need[] = { 1, 1, 2, 2, 3, 3, 4 };
	for (uint32_t n = 0; n < 7; n++)
		assert_int_equal(dgi_quorum_need(n), need[n]);
	/* the newest time a majority answered: the need-th largest */
	uint64_t a[] = { 10, UINT64_MAX, 30, 20, 0 };
	assert_int_equal(dgi_quorum_kth(a, 5), 20);
	uint64_t b[] = { 7, 9 };
	assert_int_equal(dgi_quorum_kth(b, 2), 7);
	uint64_t c[] = { UINT64_MAX };
	assert_true(dgi_quorum_kth(c, 1) == UINT64_MAX);
	assert_int_equal(dgi_quorum_kth(NULL, 0), 0);
	uint64_t d[] = { UINT64_MAX, 0, 0 }; /* alone of three: nobody answered */
	assert_int_equal(dgi_quorum_kth(d, 3), 0);
	/* leases */
	assert_int_equal(dgi_lease_until(0, 500), 0);
	assert_int_equal(dgi_lease_until(1000, 500), 1500);
	assert_true(dgi_lease_until(UINT64_MAX, 500) == UINT64_MAX);
	assert_true(dgi_lease_until(UINT64_MAX - 10, 500) == UINT64_MAX);
}

/* TOPO_PROPOSE's rule (quorum.c, dgi_px_rule): ballots ordered on (base,
 * round, from); a promise refuses every smaller ballot, and an older base
 * for good; a new topology's own rules in phase 2, an adopted one's not
 * (tests/member_sim.c: with one phase, a voter granted a version to one
 * coordinator and a later one following the version before it to
 * another — sibling versions). */
static void test_px_rule(void **state)
{
	(void)state;
	struct dgi_ballot a1 = { 4, 1, 7 }, a2 = { 4, 1, 9 }, a3 = { 4, 2, 1 }, a4 = { 5, 1, 1 };
	assert_int_equal(dgi_ballot_cmp(&a1, &a1), 0);
	assert_true(dgi_ballot_cmp(&a1, &a2) < 0); /* the sender breaks a tie */
	assert_true(dgi_ballot_cmp(&a2, &a3) < 0); /* rounds before senders */
	assert_true(dgi_ballot_cmp(&a3, &a4) < 0); /* bases before rounds */
	assert_true(dgi_ballot_cmp(&a4, &a1) > 0);

	struct dgi_acceptor v = { true, false, false, 4, { 4, 1, 7 } };
	struct dgi_px_ask q = { { 4, 1, 7 }, false, false, false, false, false };
	assert_null(dgi_px_rule(&v, &q)); /* the same ballot again: yes */
	v.member = false;
	assert_string_equal(dgi_px_rule(&v, &q), "not a member");
	v.member = true;
	/* a SEGMENTED member promises too (it reached the proposer): when
	 * it refused, two members segmented by a lost voter and a restarted
	 * one never added it back (member_sim --restarts, I3) */
	v.segmented = true;
	assert_null(dgi_px_rule(&v, &q));
	v.segmented = false;
	q.b.base = 3; /* proposed after a version older than the voter's */
	q.b.round = 99;
	assert_string_equal(dgi_px_rule(&v, &q), "not newer than this voter's topology");
	q.b = (struct dgi_ballot){ 4, 1, 5 }; /* below its promise */
	assert_string_equal(dgi_px_rule(&v, &q), "promised a newer ballot");
	q.accept = true;
	assert_string_equal(dgi_px_rule(&v, &q), "promised a newer ballot");
	q.b = (struct dgi_ballot){ 4, 2, 5 };
	q.from_in = q.self_in = true;
	assert_null(dgi_px_rule(&v, &q));
	q.from_in = false;
	assert_string_equal(dgi_px_rule(&v, &q), "the proposer is not in it");
	q.from_in = true;
	q.self_in = false;
	assert_string_equal(dgi_px_rule(&v, &q), "it removes this voter");
	q.self_in = true;
	q.drops_heard = true;
	assert_string_equal(dgi_px_rule(&v, &q), "it removes a node heard from lately");
	/* adopted: some voter accepted it at an earlier ballot, under these
	 * rules then; now it is accepted as it is (the coordinator waits out
	 * the leases of the nodes it removes) */
	q.adopted = true;
	q.from_in = q.self_in = false;
	assert_null(dgi_px_rule(&v, &q));
	/* a voter behind (base above its version) promises */
	q = (struct dgi_px_ask){ { 6, 1, 5 }, false, false, false, false, false };
	assert_null(dgi_px_rule(&v, &q));
	/* a joiner (a voter restarted on its address) promises and accepts
	 * like a member, a topology without it too; it holds a newer version
	 * than the base: refused; a removal while its address may still
	 * hold a lease up (drops_heard, member_quorum.c): refused */
	struct dgi_acceptor j = { false, true, true, 0, { 0, 0, 0 } };
	q = (struct dgi_px_ask){ { 6, 1, 5 }, false, false, false, false, false };
	assert_null(dgi_px_rule(&j, &q));
	j.promised = q.b;
	q.accept = true;
	q.from_in = true;
	assert_null(dgi_px_rule(&j, &q)); /* (self_in false: not removed) */
	q.drops_heard = true;
	assert_string_equal(dgi_px_rule(&j, &q), "it removes a node heard from lately");
	q.drops_heard = false;
	j.installed = 7;
	assert_string_equal(dgi_px_rule(&j, &q), "not newer than this voter's topology");
	j.installed = 0;
	q.b.round = 0;
	assert_string_equal(dgi_px_rule(&j, &q), "promised a newer ballot");
}

/* Grants of joiners restarted without their acceptor file (dgi_quorum_won):
 * one counts, and only among an even number of voters — the rest of that
 * majority, n/2 voters that remember, meets every majority of n; among an
 * odd number n/2 do not (a 3-voter base: the coordinator and an amnesiac
 * joiner could agree a second topology after one the joiner's predecessor
 * and the third voter agreed; member_sim --restarts amnesiac, seed 102612). */
static void test_quorum_amnesiac(void **state)
{
	(void)state;
	assert_true(dgi_quorum_won(0, 0, 0));
	assert_true(dgi_quorum_won(1, 0, 1));
	assert_false(dgi_quorum_won(0, 1, 1));
	assert_true(dgi_quorum_won(1, 1, 2)); /* two voters: the survivor and the restarted one */
	assert_false(dgi_quorum_won(1, 0, 2));
	assert_false(dgi_quorum_won(1, 1, 3));
	assert_true(dgi_quorum_won(2, 0, 3));
	assert_true(dgi_quorum_won(2, 1, 4));
	assert_false(dgi_quorum_won(1, 2, 4)); /* one counts */
	assert_false(dgi_quorum_won(2, 2, 5));
	assert_true(dgi_quorum_won(3, 0, 5));
}

static dg_err mserving(struct mnode *n)
{
	return dg_member_serving(n->m);
}

/* Cuts (on) or heals node a from node b, both ways. */
static void mcut(struct mnode *a, struct mnode *b, bool on)
{
	dgi_tp_test_cut(a->tp, dg_tp_self(b->tp), on);
	dgi_tp_test_cut(b->tp, dg_tp_self(a->tp), on);
}

/* A member silent for the failure timeout has its connection dropped
 * (PEER-RESET): after a real cut TCP may never notice, and a connection
 * kept open carries frames to nowhere.  Here n0 and n2 cannot hear each
 * other while n1 hears both (nobody is removed: n1 refuses to drop a node
 * it hears); n0 drops its connection to n2 within about a failure timeout,
 * and once the cut heals the next send dials again. */
static void test_member_silent_peer_reset(void **state)
{
	(void)state;
	struct mnode n[3];
	mnodes_start(n, 3);
	dg_node_id id2 = dg_tp_self(n[2].tp);
	uint64_t d0 = peer_stats(n[0].tp, id2).disconnects;
	dg_member_quorum q0;
	dg_member_quorum_get(n[1].m, &q0);
	mcut(&n[0], &n[2], true);
	WAIT_FOR_MS(peer_stats(n[0].tp, id2).disconnects > d0, 4000);
	sleep_ms(1000);
	/* n1 refuses n0's proposals to remove n2: a few, not a proposal loop
	 * (before, with n2 never heard again, one ran at ~800 a second, one
	 * NODE-FAILED line each) */
	dg_member_quorum q1;
	dg_member_quorum_get(n[1].m, &q1);
	print_message("      votes refused by n1 during the cut: %llu\n",
	    (unsigned long long)(q1.votes_refused - q0.votes_refused));
	assert_true(q1.votes_refused - q0.votes_refused < 40);
	mcut(&n[0], &n[2], false);
	/* heard from again: over a new connection (the old one is gone) */
	WAIT_FOR_MS(dgi_now_ms() - dg_tp_last_heard(n[0].tp, id2) < 300, 4000);
	WAIT_FOR(magree(n, 3, 3));
	mnodes_stop(n, 3);
}

struct install_log {
	_Atomic int64_t version;   /* the last installed */
	_Atomic uint64_t at_ms;    /* when */
};

static void on_install_log(void *ctx, const dg_topology *old, const dg_topology *now)
{
	struct install_log *l = ctx;
	(void)old;
	atomic_store(&l->at_ms, dgi_now_ms());
	atomic_store(&l->version, now->version);
}

/* Three voters, one cut off from the other two: the two remove it (its
 * lease ran out before they installed the version without it), the one
 * is SEGMENTED — refuses, installs nothing of its own — and, healed, is
 * told it is out and joins again: one cluster of three. */
static void minority_one(int victim)
{
	struct mnode n[3];
	mnodes_start(n, 3);
	for (int i = 0; i < 3; i++)
		WAIT_FOR(mserving(&n[i]) == DG_OK);
	int64_t v = mversion(&n[0]);
	int a = (victim + 1) % 3, b = (victim + 2) % 3;
	struct install_log l = { 0 };
	OK(dg_member_listen(n[a].m, on_install_log, &l));
	uint64_t cut = dgi_now_ms();
	mcut(&n[victim], &n[a], true);
	mcut(&n[victim], &n[b], true);
	/* its lease lapses first, well before the others remove it */
	WAIT_FOR(mserving(&n[victim]) != DG_OK);
	uint64_t lapsed = dgi_now_ms();
	assert_true(lapsed - cut <= 500 + 200 + 100); /* lease + heartbeat + slack */
	WAIT_FOR(atomic_load(&l.version) > v);
	assert_true(lapsed < atomic_load(&l.at_ms));
	int64_t removed = atomic_load(&l.version);
	struct mnode two[2] = { n[a], n[b] };
	WAIT_FOR(magree(two, 2, 2));
	/* the cut-off one: segmented, at its old version, refusing */
	WAIT_FOR(dg_member_segmented(n[victim].m));
	EXPECT(mserving(&n[victim]), DG_ERR_SEGMENTED);
	sleep_ms(1500);
	assert_int_equal(mversion(&n[victim]), v);
	dg_member_quorum q;
	dg_member_quorum_get(n[victim].m, &q);
	assert_true(q.segmented && q.segmented_ms > 0);
	assert_int_equal(q.voters, 3);
	assert_int_equal(q.need, 2);
	assert_int_equal(q.reachable, 1);
	assert_int_equal(q.nreach, 1);
	assert_string_equal(q.reach[0], dg_tp_address(n[victim].tp));
	assert_int_equal(q.segmentations, 1);
	dg_member_quorum_get(n[a].m, &q);
	assert_false(q.segmented);
	assert_int_equal(q.voters, 2);
	assert_true(q.leased);
	/* healed: one cluster of three again, within the failure timeout
	 * and a few heartbeats of back-off */
	uint64_t healed = dgi_now_ms();
	mcut(&n[victim], &n[a], false);
	mcut(&n[victim], &n[b], false);
	WAIT_FOR(magree(n, 3, 3) && !dg_member_segmented(n[victim].m));
	assert_true(dgi_now_ms() - healed <= 1000 + 2000 + 1000);
	assert_true(mversion(&n[0]) > removed);
	for (int i = 0; i < 3; i++)
		WAIT_FOR(mserving(&n[i]) == DG_OK);
	dg_member_quorum_get(n[victim].m, &q);
	assert_int_equal(q.rejoins, 1);
	mnodes_stop(n, 3);
}

static void test_majority_member_cut_off(void **state)
{
	(void)state;
	minority_one(2);
}

/* The coordinator cut off: it coordinates nothing more; the two others
 * agree on a new coordinator by majority. */
static void test_majority_coordinator_cut_off(void **state)
{
	(void)state;
	minority_one(0);
}

/* Four voters split two and two: neither side has a majority, so neither
 * changes the topology; healed, they go on as one, at the same version. */
static void test_majority_even_split(void **state)
{
	(void)state;
	struct mnode n[4];
	mnodes_start(n, 4);
	int64_t v = mversion(&n[0]);
	for (int i = 0; i < 2; i++)
		for (int k = 2; k < 4; k++)
			mcut(&n[i], &n[k], true);
	for (int i = 0; i < 4; i++)
		WAIT_FOR(dg_member_segmented(n[i].m));
	sleep_ms(1000);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(mversion(&n[i]), v);
		EXPECT(mserving(&n[i]), DG_ERR_SEGMENTED);
	}
	for (int i = 0; i < 2; i++)
		for (int k = 2; k < 4; k++)
			mcut(&n[i], &n[k], false);
	for (int i = 0; i < 4; i++)
		WAIT_FOR(!dg_member_segmented(n[i].m) && mserving(&n[i]) == DG_OK);
	assert_true(magree(n, 4, 4));
	assert_int_equal(mversion(&n[0]), v);
	mnodes_stop(n, 4);
}

/* A voter's rules for TOPO_PROPOSE, through the messages: it refuses a
 * version not newer than its own, one from a proposer outside it, one
 * removing a node it heard from lately, and one removing itself; it
 * accepts a newer one that only adds a node.  Then Paxos' first phase: a
 * PREPARE of a higher ballot (another coordinator) is promised and answered
 * with the topology accepted, a lower ballot is refused from then on and
 * names the promise, and nothing is installed by votes. */
static void test_majority_vote_rules(void **state)
{
	(void)state;
	struct mnode n[2];
	mnodes_start(n, 2);
	int64_t v = mversion(&n[1]);
	dg_tp *x = NODE(.secret = "membership");
	dg_tp *y = NODE(.secret = "membership");
	connect_ok(x, n[1].tp);
	connect_ok(y, n[1].tp);
	dg_node_id id0 = dg_tp_self(n[0].tp), id1 = dg_tp_self(n[1].tp), idx = dg_tp_self(x);
	dg_node_id idy = dg_tp_self(y);
	const char *u0 = dg_tp_address(n[0].tp), *u1 = dg_tp_address(n[1].tp);
	const char *ux = dg_tp_address(x);
	dg_buf b;
	dg_buf_init(&b);
	dg_msg_topo_vote r;
	struct {
		int64_t version;
		dg_node_id ids[3];
		const char *urls[3];
		int n;
		dg_tp *from;
		int64_t base, round, phase;
		int64_t granted;
	} cases[] = {
		{ v, { id0, id1, idx }, { u0, u1, ux }, 3, NULL, v - 1, 1, DG_PX_PREPARE, 0 }, /* older base */
		{ v + 1, { id0, id1, 0 }, { u0, u1, NULL }, 2, NULL, v, 1, DG_PX_ACCEPT, 0 },  /* proposer outside */
		{ v + 1, { id1, idx, 0 }, { u1, ux, NULL }, 2, NULL, v, 1, DG_PX_ACCEPT, 0 },  /* drops n[0], alive */
		{ v + 1, { id0, idx, 0 }, { u0, ux, NULL }, 2, NULL, v, 1, DG_PX_ACCEPT, 0 },  /* drops the voter */
		{ v + 1, { id0, id1, idx }, { u0, u1, ux }, 3, NULL, v, 1, DG_PX_PREPARE, 1 }, /* promised */
		{ v + 1, { id0, id1, idx }, { u0, u1, ux }, 3, NULL, v, 1, DG_PX_ACCEPT, 1 },  /* adds x: accepted */
		{ v + 1, { id0, id1, idx }, { u0, u1, ux }, 3, NULL, v, 1, DG_PX_ACCEPT, 1 },  /* again */
		{ v + 2, { id0, id1, idy }, { u0, u1, NULL }, 3, NULL, v, 2, DG_PX_PREPARE, 1 }, /* y, higher */
		{ v + 2, { id0, id1, idy }, { u0, u1, NULL }, 3, NULL, v, 1, DG_PX_ACCEPT, 0 }, /* x, lower */
		{ v + 2, { id0, id1, idy }, { u0, u1, NULL }, 3, NULL, v, 1, DG_PX_PREPARE, 0 }, /* y, lower */
	};
	for (size_t i = 7; i < 10; i++) {
		cases[i].from = i == 8 ? x : y;
		cases[i].urls[2] = dg_tp_address(y);
	}
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		topo_body(&b, cases[i].version, cases[i].ids, cases[i].urls, cases[i].n);
		dg_msg_topo_propose p = { cases[i].base, cases[i].round, cases[i].phase,
			{ b.data, (uint32_t)b.len } };
		OK(dg_tp_call(cases[i].from ? cases[i].from : x, id1, DG_MSG_TOPO_PROPOSE, &p, 2000,
		    &r, NULL));
		if (r.granted != cases[i].granted)
			fail_msg("case %zu: granted %lld", i, (long long)r.granted);
		if (!r.granted)
			assert_true(r.version >= v);
		if (i == 4)
			assert_int_equal(r.acc_from, 0); /* nothing accepted yet */
		if (i == 7) {
			/* y's PREPARE learns that the voter accepted x's topology
			 * after v: y must propose that one */
			assert_int_equal(r.acc_base, v);
			assert_int_equal(r.acc_round, 1);
			assert_int_equal((dg_node_id)r.acc_from, idx);
			assert_true(r.acc.len > 0);
			dg_topology *t;
			dg_raw raw = { r.acc.ptr, r.acc.len };
			OK(dgi_member_topo_decode(n[1].m, &raw, &t));
			assert_int_equal(t->version, v + 1);
			assert_int_equal(t->count, 3);
			assert_non_null(dg_topology_find(t, idx));
			dg_topology_release(t);
		}
		if (i >= 8) { /* refused, naming y's round 2 */
			assert_int_equal(r.promised_base, v);
			assert_int_equal(r.promised_round, 2);
			assert_int_equal((dg_node_id)r.promised_from, idy);
		}
	}
	/* nothing installed by a vote */
	assert_int_equal(mversion(&n[1]), v);
	dg_member_quorum q;
	dg_member_quorum_get(n[1].m, &q);
	assert_int_equal(q.votes_granted, 4);
	assert_true(q.votes_refused >= 6);
	dg_buf_free(&b);
	dg_tp_stop(y);
	dg_tp_stop(x);
	mnodes_stop(n, 2);
}

/* A voter that accepts a topology the proposer accepted first, the two a
 * majority of two or three voters, installs it at once (TOPOLOGY-LEARNED):
 * a proposer that dies right after its own install does not take the
 * version along (tests/member_sim.c, seeds 3157670 and 3354139: a two-voter
 * cluster adding a third stayed SEGMENTED for good).  Without the
 * proposer's flag nothing is installed by the vote. */
static void test_majority_voter_learns(void **state)
{
	(void)state;
	struct mnode n[2];
	mnodes_start(n, 2);
	int64_t v = mversion(&n[1]);
	dg_node_id ids[2] = { dg_tp_self(n[0].tp), dg_tp_self(n[1].tp) };
	const char *urls[2] = { dg_tp_address(n[0].tp), dg_tp_address(n[1].tp) };
	dg_buf b;
	dg_buf_init(&b);
	dg_msg_topo_vote r;
	topo_body(&b, v + 1, ids, urls, 2);
	dg_msg_topo_propose p = { v, 50, DG_PX_ACCEPT, { b.data, (uint32_t)b.len } };
	OK(dg_tp_call(n[0].tp, ids[1], DG_MSG_TOPO_PROPOSE, &p, 2000, &r, NULL));
	assert_int_equal(r.granted, 1);
	sleep_ms(200);
	assert_int_equal(mversion(&n[1]), v); /* one acceptance known: not agreed */
	p.round = 51;
	p.phase = DG_PX_ACCEPT | DG_PX_PROPOSER_ACCEPTED;
	OK(dg_tp_call(n[0].tp, ids[1], DG_MSG_TOPO_PROPOSE, &p, 2000, &r, NULL));
	assert_int_equal(r.granted, 1);
	WAIT_FOR(mversion(&n[1]) == v + 1); /* two of two: agreed, installed */
	p.phase = 0x40 | DG_PX_ACCEPT; /* an unknown flag */
	EXPECT(dg_tp_call(n[0].tp, ids[1], DG_MSG_TOPO_PROPOSE, &p, 2000, &r, NULL), DG_ERR_INVAL);
	dg_buf_free(&b);
	mnodes_stop(n, 2);
}

/* A TOPO_PROPOSE from x to n (arena: the answer's topology). */
static dg_err propose(dg_tp *x, struct mnode *n, int64_t base, int64_t round, int64_t phase,
    const dg_buf *t, dg_msg_topo_vote *r, dg_arena *a)
{
	dg_msg_topo_propose p = { base, round, phase, { t->data, (uint32_t)t->len } };
	a->used = 0;
	return dg_tp_call(x, dg_tp_self(n->tp), DG_MSG_TOPO_PROPOSE, &p, 2000, r, a);
}

/* What a voter promised and accepted survives its restart: it is in the
 * acceptor file before the answer leaves (member_acceptor.c), read back at
 * start; a damaged file is refused and written anew.  Before, a voter
 * restarted on its address promised again what it had refused and lost
 * what it had accepted (member_sim --restarts: two topologies a majority
 * accepted after one base). */
static void test_membership_acceptor_kept(void **state)
{
	(void)state;
	char dir[] = "/tmp/dg_acceptor_XXXXXX";
	assert_non_null(mkdtemp(dir));
	char path[64];
	snprintf(path, sizeof(path), "%s/acceptor", dir);
	mnode_acceptor_path = path;
	struct mnode n;
	memset(&n, 0, sizeof(n));
	mnode_start(&n, "tcp://127.0.0.1:0", NULL, 1000);
	int64_t v = mversion(&n);
	dg_tp *x = NODE(.secret = "membership");
	dg_node_id xid = dg_tp_self(x);
	dg_buf t;
	dg_buf_init(&t);
	dg_node_id ids[2] = { dg_tp_self(n.tp), xid };
	const char *urls[2] = { dg_tp_address(n.tp), dg_tp_address(x) };
	topo_body(&t, v + 1, ids, urls, 2);
	dg_msg_topo_vote r;
	uint8_t mem[4096];
	dg_arena a;
	dg_arena_init(&a, mem, sizeof(mem));
	connect_ok(x, n.tp);
	OK(propose(x, &n, v, 5, DG_PX_PREPARE, &t, &r, &a));
	assert_int_equal(r.granted, DG_VOTE_GRANTED);
	OK(propose(x, &n, v, 5, DG_PX_ACCEPT, &t, &r, &a));
	assert_int_equal(r.granted, DG_VOTE_GRANTED);
	mnode_stop(&n, true); /* kill: nothing more written */

	/* the next incarnation on that file */
	mnode_start(&n, "tcp://127.0.0.1:0", NULL, 1000);
	connect_ok(x, n.tp);
	OK(propose(x, &n, v, 3, DG_PX_PREPARE, &t, &r, &a));
	assert_int_equal(r.granted, 0); /* below what it promised */
	assert_int_equal(r.promised_round, 5);
	assert_int_equal(r.promised_from, (int64_t)xid);
	OK(propose(x, &n, v, 6, DG_PX_PREPARE, &t, &r, &a));
	assert_int_equal(r.granted, DG_VOTE_GRANTED);
	/* ... naming what it accepted: Paxos' phase 1 */
	assert_int_equal(r.acc_base, v);
	assert_int_equal(r.acc_round, 5);
	assert_int_equal(r.acc_from, (int64_t)xid);
	assert_true(r.acc.len > 0 && r.acc.len == t.len);
	assert_memory_equal(r.acc.ptr, t.data, t.len);
	mnode_stop(&n, true);

	/* a damaged file: refused (ACCEPTOR-BAD), the node starts, and the
	 * file is written anew with what it promises next */
	FILE *f = fopen(path, "r+b");
	assert_non_null(f);
	assert_int_equal(fseek(f, 20, SEEK_SET), 0);
	assert_int_equal(fputc(0x5a, f), 0x5a);
	fclose(f);
	mnode_start(&n, "tcp://127.0.0.1:0", NULL, 1000);
	connect_ok(x, n.tp);
	OK(propose(x, &n, v, 2, DG_PX_PREPARE, &t, &r, &a));
	assert_int_equal(r.granted, DG_VOTE_GRANTED); /* (its promise of 6 is gone) */
	OK(propose(x, &n, v, 9, DG_PX_PREPARE, &t, &r, &a));
	assert_int_equal(r.granted, DG_VOTE_GRANTED);
	mnode_stop(&n, true);
	mnode_start(&n, "tcp://127.0.0.1:0", NULL, 1000);
	connect_ok(x, n.tp);
	OK(propose(x, &n, v, 8, DG_PX_PREPARE, &t, &r, &a));
	assert_int_equal(r.granted, 0);
	assert_int_equal(r.promised_round, 9);
	mnode_stop(&n, false);
	mnode_acceptor_path = NULL;
	dg_tp_stop(x);
	dg_buf_free(&t);
	unlink(path);
	rmdir(dir);
}

/* Under majority a baseline is the voting set: one with fewer than a
 * majority of its addresses online is refused (the cluster would stop). */
static void test_majority_baseline_refused(void **state)
{
	(void)state;
	struct mnode n[3];
	mnodes_start(n, 3);
	int64_t v = mversion(&n[0]);
	const char *why = NULL;
	const char *set[] = { dg_tp_address(n[0].tp), "tcp://127.0.0.1:9", "tcp://127.0.0.1:10" };
	EXPECT(dgi_member_set_baseline(n[1].m, DG_BASELINE_SET, set, 3, 5000, &why),
	    DG_ERR_INVAL);
	assert_non_null(why);
	assert_non_null(strstr(why, "majority"));
	assert_int_equal(mversion(&n[0]), v);
	/* two of three online: accepted, through the voters */
	set[1] = dg_tp_address(n[1].tp);
	OK(dgi_member_set_baseline(n[2].m, DG_BASELINE_SET, set, 3, 5000, &why));
	WAIT_FOR(magree(n, 3, 3) && mversion(&n[0]) > v);
	mnodes_stop(n, 3);
}

/* A baseline change whose round adopts a topology a voter accepted
 * before (here the coordinator itself, from another proposer's phase 2)
 * installs that one, not the change: the caller is told NOT_READY and
 * asks again, on the new version.  Before, it was told OK, logged
 * BASELINE-CHANGED with the version it wanted, and waited for that
 * version until its deadline (CI at 43277e2, cluster_dgctl_baseline_tls:
 * `dgctl baseline add` timed out after a client's removal whose phase 2
 * the coordinator alone had accepted). */
static void test_baseline_after_adopted(void **state)
{
	(void)state;
	struct mnode n[3];
	mnodes_start(n, 3);
	WAIT_FOR(magree(n, 3, 3));
	int64_t v = mversion(&n[0]);
	dg_tp *x = NODE(.secret = "membership");
	dg_buf t;
	dg_buf_init(&t);
	/* x proposes v+1 with itself as a client (a proposer is in what it
	 * proposes) to n[0] alone: one voter of three accepted it */
	dg_node_id ids[4];
	const char *urls[4];
	int64_t attrs[4] = { 0, 0, 0, DG_NODE_CLIENT };
	dg_topology *cur = dg_member_topology(n[0].m);
	assert_int_equal(cur->count, 3);
	for (int i = 0; i < 3; i++) {
		ids[i] = cur->nodes[i].id;
		urls[i] = cur->nodes[i].url;
	}
	ids[3] = dg_tp_self(x);
	urls[3] = dg_tp_address(x);
	topo_body_attrs(&t, v + 1, ids, urls, attrs, 4);
	dg_topology_release(cur);
	dg_msg_topo_vote r;
	uint8_t mem[4096];
	dg_arena a;
	dg_arena_init(&a, mem, sizeof(mem));
	connect_ok(x, n[0].tp);
	OK(propose(x, &n[0], v, 5, DG_PX_PREPARE, &t, &r, &a));
	assert_int_equal(r.granted, DG_VOTE_GRANTED);
	OK(propose(x, &n[0], v, 5, DG_PX_ACCEPT, &t, &r, &a));
	assert_int_equal(r.granted, DG_VOTE_GRANTED);
	assert_int_equal(mversion(&n[0]), v); /* accepted, not agreed */
	/* the coordinator's change: its round adopts v+1 first */
	const char *why = NULL;
	const char *set[] = { dg_tp_address(n[0].tp), dg_tp_address(n[1].tp),
		dg_tp_address(n[2].tp) };
	OK(dgi_member_set_baseline(n[0].m, DG_BASELINE_SET, set, 3, 5000, &why));
	assert_true(mversion(&n[0]) > v + 1);
	bool is_set = false;
	char out[4][DG_BASELINE_ADDR_MAX];
	assert_int_equal(dg_member_baseline(n[0].m, out, 4, &is_set), 3);
	assert_true(is_set);
	dg_tp_stop(x);
	mnodes_stop(n, 3);
	dg_buf_free(&t);
}

static void test_membership_pause_member(void **state)
{
	(void)state;
	pause_and_back(2);
}

static void test_membership_pause_coordinator(void **state)
{
	(void)state;
	pause_and_back(0);
}

/* A node that rejoined after a pause syncs the cluster's types with the
 * coordinator; that must not hold up its heartbeats.  Here the coordinator
 * never answers TYPES_SNAPSHOT (the call waits its whole join timeout, 10
 * s): the node is back and stays — it used to make the call on its
 * heartbeat thread, fell silent for longer than the failure timeout and was
 * dropped again at once (seen under load as a second SELF-PAUSED). */
static void test_membership_rejoin_slow_type_sync(void **state)
{
	(void)state;
	struct mnode n[3];
	memset(n, 0, sizeof(n));
	mnode_start(&n[0], "tcp://127.0.0.1:0", NULL, 1000);
	mnode_start(&n[1], "tcp://127.0.0.1:0", dg_tp_address(n[0].tp), 1000);
	mnode_start(&n[2], "tcp://127.0.0.1:0", dg_tp_address(n[0].tp), 1000);
	WAIT_FOR(magree(n, 3, 3));
	struct counter asked;
	memset(&asked, 0, sizeof(asked));
	OK(dg_tp_handle(n[0].tp, DG_MSG_TYPES_SNAPSHOT, on_count, &asked));
	int64_t v = mversion(&n[0]);
	mnode_pause(&n[2], 3000, &n[0]);
	WAIT_FOR_MS(mcount(&n[0]) == 2 && mcount(&n[1]) == 2, 2900);
	WAIT_FOR_MS(magree(n, 3, 3) && mversion(&n[0]) > v + 1, 3000 + 5000);
	WAIT_FOR(atomic_load(&asked.n) >= 1); /* its sync is waiting */
	int64_t back = mversion(&n[0]);
	sleep_ms(2500); /* > 2 failure timeouts, < the sync's 10 s */
	assert_true(magree(n, 3, 3));
	assert_int_equal(mversion(&n[0]), back);
	/* the coordinator first: its going ends the sync's call */
	mnode_stop(&n[0], false);
	mnode_stop(&n[2], false);
	mnode_stop(&n[1], false);
}

/* The coordinator crashes and a new node starts at once on its address,
 * seeded by a member that has not noticed the crash yet: the seed forwards
 * the JOIN to the dead coordinator, whose dial reaches the new node.  The
 * JOIN fails fast (not after the whole join timeout, which the joiner's
 * one call used to take) and is asked again, without forming a second
 * cluster, until the member takes over as coordinator: it joins within
 * the failure detection (1 s + heartbeat) and a few retries, and all
 * agree. */
static void test_membership_restart_on_coordinator_address(void **state)
{
	(void)state;
	struct mnode n[4];
	memset(n, 0, sizeof(n));
	mnode_start(&n[0], "tcp://127.0.0.1:0", NULL, 1000);
	char url[128];
	snprintf(url, sizeof(url), "%s", dg_tp_address(n[0].tp));
	mnode_start(&n[1], "tcp://127.0.0.1:0", url, 1000);
	mnode_start(&n[2], "tcp://127.0.0.1:0", url, 1000);
	WAIT_FOR(magree(n, 3, 3));
	char seed[128];
	snprintf(seed, sizeof(seed), "%s", dg_tp_address(n[1].tp));
	mnode_stop(&n[0], true);
	uint64_t t0 = dgi_now_ms();
	mnode_start(&n[3], url, seed, 1000);
	uint64_t took = dgi_now_ms() - t0;
	print_message("      joined %llu ms after the coordinator's crash\n",
	    (unsigned long long)took);
	assert_true(took < 5000); /* the join timeout is 10 s */
	WAIT_FOR(magree(n, 4, 3));
	assert_true(dg_member_is_coordinator(n[1].m));
	mnode_stop(&n[3], false);
	mnode_stop(&n[2], false);
	mnode_stop(&n[1], false);
}

/* A segmented member dials its seeds (PROTOCOL.md, "Majority"): n2 is cut
 * off from n0 and n1; then both restart on their addresses under new ids,
 * a new cluster, while n2 is still cut.  n2's heartbeats go to the old ids
 * and are dropped at those addresses (PEER-MOVED): only by dialling its
 * seed does it find the new cluster, which adds it in a version above its
 * own (a lower one it would not install).  Without the dialling it stays
 * SEGMENTED for good. */
static void test_majority_segmented_dials_seeds(void **state)
{
	(void)state;
	struct mnode n[5];
	memset(n, 0, sizeof(n));
	char u0[128], u1[128];
	mnode_start(&n[0], "tcp://127.0.0.1:0", NULL, 1000);
	snprintf(u0, sizeof(u0), "%s", dg_tp_address(n[0].tp));
	mnode_start(&n[1], "tcp://127.0.0.1:0", u0, 1000);
	mnode_start(&n[2], "tcp://127.0.0.1:0", u0, 1000);
	WAIT_FOR(magree(n, 3, 3));
	snprintf(u1, sizeof(u1), "%s", dg_tp_address(n[1].tp));
	dg_node_id old0 = dg_tp_self(n[0].tp), old1 = dg_tp_self(n[1].tp);
	mcut(&n[2], &n[0], true);
	mcut(&n[2], &n[1], true);
	WAIT_FOR(dg_member_segmented(n[2].m));
	int64_t v2 = mversion(&n[2]);
	mnode_stop(&n[0], true);
	mnode_stop(&n[1], true);
	dgi_tp_test_cut(n[2].tp, old0, false); /* (the new ids are not cut) */
	dgi_tp_test_cut(n[2].tp, old1, false);
	mnode_start(&n[3], u0, NULL, 1000); /* a new cluster, on the same addresses */
	mnode_start(&n[4], u1, u0, 1000);
	WAIT_FOR(mcount(&n[3]) >= 2);
	n[0] = n[3];
	n[1] = n[4];
	memset(&n[3], 0, 2 * sizeof(n[3]));
	WAIT_FOR_MS(magree(n, 3, 3) && !dg_member_segmented(n[2].m), 10000);
	assert_true(mversion(&n[2]) > v2);
	dg_member_quorum q;
	dg_member_quorum_get(n[2].m, &q);
	assert_true(q.segmented_dials >= 1); /* (datagrid_segmented_dials_total) */
	mnode_stop(&n[2], false);
	mnode_stop(&n[1], false);
	mnode_stop(&n[0], false);
}

/* JOINs n's transport has received. */
static uint64_t joins_recv(struct mnode *n)
{
	dg_msg_metric mm[256];
	size_t k = dg_tp_metrics(n->tp, mm, 256);
	for (size_t i = 0; i < k && i < 256; i++)
		if (mm[i].type == DG_MSG_JOIN)
			return mm[i].c.recv;
	return 0;
}

/* A removed node asking to join again a coordinator that cannot add it
 * (no majority of its voters: the other one is dead) backs off between
 * rounds as it does while nobody answers.  Before, every answer reset its
 * wait to 50 ms: 20-40 JOINs a second for as long as the coordinator had
 * no majority. */
static void test_rejoin_backs_off_while_refused(void **state)
{
	(void)state;
	struct mnode n[3];
	mnodes_start(n, 3);
	mcut(&n[2], &n[0], true);
	mcut(&n[2], &n[1], true);
	WAIT_FOR_MS(mcount(&n[0]) == 2 && magree(n, 2, 2), 10000); /* n2 removed */
	mnode_stop(&n[1], true); /* n0 alone of its two voters */
	WAIT_FOR(dg_member_segmented(n[0].m));
	mcut(&n[2], &n[0], false); /* n2 hears it was removed: it rejoins */
	WAIT_FOR(joins_recv(&n[0]) > 0);
	sleep_ms(1000);
	uint64_t j0 = joins_recv(&n[0]);
	sleep_ms(3000);
	uint64_t j1 = joins_recv(&n[0]);
	print_message("JOINs in 3 s while refused: %llu\n", (unsigned long long)(j1 - j0));
	/* backing off to 1 s (jittered: 0.5-1 s a round), n0 asked once a
	 * round though it is both a seed and a member: 3-6 in 3 s */
	assert_true(j1 - j0 <= 10);
	mnode_stop(&n[2], false);
	mnode_stop(&n[0], false);
}

static void on_topo_slow(void *ctx, const dg_topology *old, const dg_topology *now)
{
	struct topo_log *l = ctx;
	(void)old;
	if (atomic_fetch_add(&l->calls, 1) == 0)
		sleep_ms(2500); /* e.g. a topology version written to disk */
	atomic_store(&l->last, now->version); /* after: done */
}

/* A listener that takes long (2.5 s, above the 1 s failure timeout) holds
 * up none of its node's messages: listeners do not run on the thread that
 * handles TOPOLOGY (it used to be the node's only transport thread, so
 * nothing was read meanwhile — no PING answered, no heartbeat heard: the
 * node took its peers for failed).  The node answers at once, nobody is
 * declared failed, every node agrees on the join's version. */
static void test_membership_slow_listener(void **state)
{
	(void)state;
	struct mnode n[3];
	memset(n, 0, sizeof(n));
	mnode_start(&n[0], "tcp://127.0.0.1:0", NULL, 1000);
	mnode_start(&n[1], "tcp://127.0.0.1:0", dg_tp_address(n[0].tp), 1000);
	WAIT_FOR(magree(n, 2, 2));
	struct topo_log l = { 0 };
	OK(dg_member_listen(n[1].m, on_topo_slow, &l));
	mnode_start(&n[2], "tcp://127.0.0.1:0", dg_tp_address(n[0].tp), 1000);
	WAIT_FOR(atomic_load(&l.calls) == 1); /* n[1]'s listener is in its sleep */
	uint8_t mem[64];
	dg_arena a;
	dg_arena_init(&a, mem, sizeof(mem));
	dg_msg_bytes q = { { (const uint8_t *)"now", 3 } }, r;
	uint64_t t0 = dgi_now_ms();
	OK(dg_tp_call(n[0].tp, dg_tp_self(n[1].tp), DG_MSG_PING, &q, 5000, &r, &a));
	assert_true(dgi_now_ms() - t0 < 1000);
	WAIT_FOR(atomic_load(&l.last) == 3); /* the sleep (> the failure timeout) is over */
	WAIT_FOR(magree(n, 3, 3));
	assert_int_equal(mversion(&n[0]), 3); /* formed, two joins: nobody failed */
	mnode_stop(&n[2], false);
	mnode_stop(&n[1], false);
	mnode_stop(&n[0], false);
}

/* A node whose only seed refuses it (wrong secret) fails to start instead
 * of forming a cluster of its own. */
static void test_membership_refused(void **state)
{
	(void)state;
	struct mnode good = { 0 };
	mnode_start(&good, "tcp://127.0.0.1:0", NULL, 1000);
	dg_registry *r;
	dg_tp *tp;
	dg_member *m = NULL;
	dg_tp_config c;
	dg_member_config mc;
	const char *seeds[1] = { dg_tp_address(good.tp) };
	OK(dg_registry_create(&r));
	dg_tp_config_init(&c);
	c.reg = r;
	c.secret = (const uint8_t *)"other";
	c.secret_len = 5;
	OK(dg_tp_start(&c, &tp));
	dg_member_config_init(&mc);
	mc.seeds = seeds;
	mc.nseeds = 1;
	mc.join_timeout_ms = 500;
	mc.reg = r;
	EXPECT(dg_member_start(tp, &mc, &m), DG_ERR_AUTH);
	assert_null(m);
	assert_int_equal(mversion(&good), 1);
	dg_tp_stop(tp);
	dg_registry_destroy(r);
	mnode_stop(&good, false);
}

/* ------------------------------------------------------------------------
 * 13. Native TCP (reactor.c): partial writes, broken peers, dials, stop
 * ------------------------------------------------------------------------ */

/* The write on tp's connection to peer waits for the reactor (EPOLLOUT). */
static bool write_waiting(dg_tp *tp, dg_node_id peer)
{
	struct peer *p = dgi_peer_get(tp, peer, false);
	bool w = false;
	assert_non_null(p);
	pthread_mutex_lock(&p->mu);
	if (p->conn != NULL)
		w = atomic_load(&p->conn->tx_wait);
	pthread_mutex_unlock(&p->mu);
	return w;
}

/* The write stays parked for ms: the peer does not read, the socket buffer
 * is full. */
static bool write_stalled(dg_tp *tp, dg_node_id peer, unsigned ms)
{
	uint64_t end = now_ms() + ms;
	while (now_ms() < end) {
		if (!write_waiting(tp, peer))
			return false;
		sleep_ms(5);
	}
	return true;
}

/* Big ECHO bodies: 8-byte sequence number, then bytes derived from it. */
enum { BIG_FRAME = 1 << 20 };
static uint8_t big_body[BIG_FRAME];

static void big_fill(uint64_t seq, size_t n)
{
	memcpy(big_body, &seq, 8);
	for (size_t i = 8; i < n; i++)
		big_body[i] = (uint8_t)(seq * 31 + i * 7);
}

struct checker {
	struct gate g;          /* blocks the handler (the reactor) until open */
	_Atomic uint64_t n, misordered, corrupt;
};

static void on_check(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	struct checker *k = ctx;
	const dg_msg_bytes *m = in->body;
	uint64_t seq = 0;
	on_gated(tp, in, &k->g);
	if (m->data.len >= 8)
		memcpy(&seq, m->data.ptr, 8);
	if (seq != atomic_load(&k->n))
		atomic_fetch_add(&k->misordered, 1);
	for (size_t i = 8; i < m->data.len; i++)
		if (m->data.ptr[i] != (uint8_t)(seq * 31 + i * 7)) {
			atomic_fetch_add(&k->corrupt, 1);
			break;
		}
	atomic_fetch_add(&k->n, 1);
}

static void checker_init(struct checker *k)
{
	memset(k, 0, sizeof(*k));
	pthread_mutex_init(&k->g.mu, NULL);
	pthread_cond_init(&k->g.cv, NULL);
}

static void checker_open(struct checker *k)
{
	pthread_mutex_lock(&k->g.mu);
	k->g.open = true;
	pthread_cond_broadcast(&k->g.cv);
	pthread_mutex_unlock(&k->g.mu);
}

static void checker_destroy(struct checker *k)
{
	pthread_cond_destroy(&k->g.cv);
	pthread_mutex_destroy(&k->g.mu);
}

/* Sends 1 MiB ECHOs from a to b (whose reactor is held in the first
 * handler) until a's write has been parked on EPOLLOUT for 200 ms; returns
 * how many were sent. */
static uint64_t fill_until_stalled(dg_tp *a, dg_node_id bid)
{
	uint64_t sent = 0;
	for (; sent < 48; sent++) {
		big_fill(sent, BIG_FRAME);
		dg_msg_bytes m = { { big_body, BIG_FRAME } };
		OK(dg_tp_send(a, bid, DG_MSG_ECHO, &m));
		if (sent >= 2 && write_stalled(a, bid, 200))
			return sent + 1;
	}
	fail_msg("a's write never stalled after %llu MiB", (unsigned long long)sent);
	return sent;
}

/* A peer that stops reading: a's writes end part-way (the socket buffer
 * is full), the reactor finishes them once b reads again, and every byte
 * arrives intact and in order, followed by what was queued meanwhile. */
static void test_tcp_partial_writes(void **state)
{
	(void)state;
	struct checker k;
	checker_init(&k);
	dg_tp *a = NODE(0), *b = NODE(0);
	OK(dg_tp_handle(b, DG_MSG_ECHO, on_check, &k));
	dg_node_id bid = connect_ok(a, b);

	uint64_t big = fill_until_stalled(a, bid);
	assert_true(atomic_load(&k.g.entered) >= 1);
	/* small frames queue behind the parked write */
	for (uint64_t i = 0; i < 100; i++) {
		uint64_t seq = big + i;
		big_fill(seq, 64);
		dg_msg_bytes m = { { big_body, 64 } };
		OK(dg_tp_send(a, bid, DG_MSG_ECHO, &m));
	}
	assert_true(write_waiting(a, bid));
	checker_open(&k);
	WAIT_FOR_MS(atomic_load(&k.n) == big + 100, 20000);
	assert_int_equal(atomic_load(&k.misordered), 0);
	assert_int_equal(atomic_load(&k.corrupt), 0);
	WAIT_FOR(!write_waiting(a, bid));
	OK(ping(a, bid, "after the stall"));
	assert_int_equal(ctr(b, DG_MSG_ECHO).recv, big + 100);
	assert_int_equal(stats(a).disconnects + stats(b).disconnects, 0);
	assert_int_equal(stats(a).dropped, 0);
	dg_tp_stop(a);
	dg_tp_stop(b);
	checker_destroy(&k);
}

/* A peer that closes in the middle of a frame, either way round: the
 * connection closes as broken — nothing malformed, no handler run, no
 * handshake failure — pending requests on it fail, the node serves on. */
static void test_tcp_peer_closes_mid_frame(void **state)
{
	struct fx *f = *state;
	struct fsnap before;
	dg_node_id id;
	dg_buf b;
	dg_buf_init(&b);

	/* 1. the raw peer sends half a PING and closes */
	int fd = raw_open(f, &id);
	WAIT_FOR(conn_count(f->b) == 2);
	fsnap_take(f->b, &before);
	uint64_t disc = stats(f->b).disconnects, echo = atomic_load(&f->echo.n);
	uint64_t pings = ctr(f->b, DG_MSG_PING).recv;
	static uint8_t pl[1000];
	dg_msg_bytes m = { { pl, sizeof(pl) } };
	frame_msg(&b, 0, DG_MSG_PING, 9, id, &m);
	raw_send(fd, b.data, DG_FRAME_HEADER + 300);
	sleep_ms(20); /* let the node read the part (either way it must hold) */
	close(fd);
	WAIT_FOR(stats(f->b).disconnects == disc + 1);
	assert_int_equal(ctr(f->b, DG_MSG_PING).recv, pings); /* only whole frames count */
	assert_int_equal(atomic_load(&f->echo.n), echo);
	fx_still_serves(f);
	expect_moved(&before, f->b, -1, 0, 0, 0);

	/* 2. the node writes more than the socket buffers hold to a raw peer
	 * that reads a little and resets the connection: the parked write
	 * fails part-way, the connection closes, a request behind it fails */
	fd = raw_open(f, &id);
	WAIT_FOR(conn_count(f->b) == 2);
	fsnap_take(f->b, &before);
	disc = stats(f->b).disconnects;
	static uint8_t chunk[4000];
	dg_msg_bytes cm = { { chunk, sizeof(chunk) } };
	int sent = 0;
	for (; sent < 15000; sent++) {
		OK(dg_tp_send(f->b, id, DG_MSG_ECHO, &cm));
		if (sent % 100 == 99 && write_stalled(f->b, id, 100))
			break;
	}
	assert_true(write_waiting(f->b, id));
	struct result r;
	memset(&r, 0, sizeof(r));
	t_i64 v = { 1 };
	OK(dg_tp_request(f->b, id, (dg_msg_type)T_SINK, &v, 20000, on_result, &r));
	uint8_t part[1000];
	OK(raw_read(fd, part, sizeof(part), 5000));
	struct linger lg = { 1, 0 };
	assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
	close(fd); /* RST */
	WAIT_FOR(atomic_load(&r.calls) == 1);
	assert_int_equal(atomic_load(&r.err), DG_ERR_CONN_BROKEN);
	WAIT_FOR(stats(f->b).disconnects == disc + 1);
	fx_still_serves(f);
	expect_moved(&before, f->b, -1, 0, 0, 0);
	dg_buf_free(&b);
}

/* A bound, never listening port: connections are refused. */
static int closed_port(void)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa;
	socklen_t sl = sizeof(sa);
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(getsockname(s, (struct sockaddr *)&sa, &sl), 0);
	close(s);
	return ntohs(sa.sin_port);
}

/* Dials: a refused connection fails at once with DG_ERR_NET; one whose SYN
 * is never answered (a listener with a full accept queue) with
 * DG_ERR_TIMEOUT after connect_timeout_ms; bad URLs are refused before any
 * dial; host names resolve (on the dial's own thread); listening on the
 * wildcard and on a name works. */
/* A peer that cannot be dialled is not dialled at every send: after a
 * failed dial, sends fail at once (DG_ERR_UNREACHABLE) until a redial time
 * that backs off from 50 ms to 2 s; then one send dials again (issue 13: a
 * client redialled a dead server ~500 times a second, and a cut-off node
 * ~1,500).  500 sends 1 ms apart to a closed port start a handful of dials,
 * not hundreds — and more than one. */
static void test_tcp_redial_backs_off(void **state)
{
	(void)state;
	char url[96];
	dg_tp *a = NODE(.connect_timeout_ms = 300);
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", closed_port());
	dg_node_id ghost = 0x5eed5eed5eedULL;
	OK(dg_tp_set_address(a, ghost, url));
	dg_msg_bytes ping = { { (const uint8_t *)"x", 1 } };
	int dials = 0, refused = 0;
	for (int i = 0; i < 500; i++) {
		dg_err e = dg_tp_send(a, ghost, DG_MSG_PING, &ping);
		if (e == DG_OK)
			dials++; /* queued: a dial started (or one in flight) */
		else if (e == DG_ERR_UNREACHABLE)
			refused++;
		sleep_ms(1);
	}
	print_message("      %d sends queued for a dial, %d refused at once\n", dials, refused);
	assert_true(dials >= 2);
	assert_true(dials <= 30);
	assert_true(refused >= 450);
	dg_tp_stop(a);
}

static void test_tcp_dials(void **state)
{
	(void)state;
	char url[96];
	dg_tp *a = NODE(.connect_timeout_ms = 300);

	/* refused: quickly, DG_ERR_NET, counted nowhere as a handshake */
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", closed_port());
	uint64_t t0 = now_ms();
	EXPECT(dg_tp_connect(a, url, NULL), DG_ERR_NET);
	uint64_t took = now_ms() - t0;
	if (took > 250)
		fail_msg("a refused dial took %llu ms", (unsigned long long)took);
	assert_int_equal(stats(a).handshake_failures, 0);

	/* no answer: DG_ERR_TIMEOUT at the connect timeout */
	int l = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa;
	socklen_t sl = sizeof(sa);
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(l, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(l, 0), 0);
	assert_int_equal(getsockname(l, (struct sockaddr *)&sa, &sl), 0);
	int fill[2];
	for (int i = 0; i < 2; i++) { /* the accept queue holds one: full */
		fill[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
		int rc = connect(fill[i], (struct sockaddr *)&sa, sizeof(sa));
		assert_true(rc == 0 || errno == EINPROGRESS);
	}
	sleep_ms(50);
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", ntohs(sa.sin_port));
	t0 = now_ms();
	EXPECT(dg_tp_connect(a, url, NULL), DG_ERR_TIMEOUT);
	took = now_ms() - t0;
	if (took < 290 || took > 2000)
		fail_msg("an unanswered dial ended after %llu ms (timeout 300)",
		    (unsigned long long)took);
	close(fill[0]);
	close(fill[1]);
	close(l);

	/* URLs that are not host:port */
	const char *bad[] = { "tcp://127.0.0.1", "tcp://127.0.0.1:", "tcp://127.0.0.1:99999",
		"tcp://127.0.0.1:12x", "tcp://::1:5", "tcp://[::1:5", "tcp://a/b:5",
		"tcp://127.0.0.1:123456" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		EXPECT(dg_tp_connect(a, bad[i], NULL), DG_ERR_INVAL);
	assert_int_equal(conn_count(a), 0);

	/* names and wildcards */
	dg_tp_config cfg;
	dg_tp *w = NULL, *n = NULL;
	dg_tp_config_init(&cfg);
	cfg.reg = reg;
	cfg.listen_url = "tcp://0.0.0.0:0";
	OK(dg_tp_start(&cfg, &w));
	assert_true(strncmp(dg_tp_address(w), "tcp://0.0.0.0:", 14) == 0);
	int wport = atoi(dg_tp_address(w) + 14);
	assert_true(wport > 0);
	cfg.listen_url = "tcp://localhost:0";
	OK(dg_tp_start(&cfg, &n));
	assert_true(strncmp(dg_tp_address(n), "tcp://localhost:", 16) == 0);
	dg_node_id peer = 0;
	OK(dg_tp_connect(a, dg_tp_address(n), &peer)); /* a name: resolved */
	assert_int_equal(peer, dg_tp_self(n));
	OK(ping(a, peer, "by name"));
	snprintf(url, sizeof(url), "tcp://localhost:%d", wport);
	OK(dg_tp_connect(a, url, &peer));
	assert_int_equal(peer, dg_tp_self(w));
	OK(ping(a, peer, "to the wildcard"));
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", wport);
	OK(dg_tp_connect(n, url, &peer));
	OK(ping(n, dg_tp_self(w), "numeric"));
	dg_tp_stop(n);
	dg_tp_stop(w);
	dg_tp_stop(a);
}

struct stop_arg2 {
	dg_tp *tp;
	_Atomic bool done;
};

static void *stopper2(void *arg)
{
	struct stop_arg2 *sa = arg;
	dg_tp_stop(sa->tp);
	atomic_store(&sa->done, true);
	return NULL;
}

/* Stop with a write parked on EPOLLOUT, megabytes queued behind it and a
 * request in flight: no hang, the request fails, nothing leaks (ASan). */
/* dgi_sem_wait_spin counts its spinners, with spinning switched off too
 * (it used to take one off the count without adding it: -1 per wait, so
 * later waits spun past the one-spinner-per-two-CPUs bound). */
static void test_spin_wait_counts(void **state)
{
	(void)state;
	sem_t s;
	sem_init(&s, 0, 0);
	for (int off = 0; off < 2; off++) {
		uint32_t was = atomic_exchange(&dgi_spin_ns, off ? 0 : DGI_SPIN_NS);
		for (int i = 0; i < 3; i++) {
			sem_post(&s);
			dgi_sem_wait_spin(NULL, &s, true);
		}
		atomic_store(&dgi_spin_ns, was);
		assert_int_equal(dgi_spinners(), 0);
	}
	sem_destroy(&s);
}

struct lone_waiter {
	dg_tp *tp;
	sem_t s;
	bool one_hop;
	_Atomic bool done;
};

static void *lone_wait(void *arg)
{
	struct lone_waiter *w = arg;
	dgi_sem_wait_spin(w->tp, &w->s, w->one_hop);
	atomic_store(&w->done, true);
	return NULL;
}

/* Reactors spin (reactor_spin_us) after a round that read a message, at most
 * dgi_reactor_spin_cap() of a process at once, and an idle one sleeps: six
 * transports spinning up to 300 ms each after their pings are seen
 * spinning, never more of them than the cap; once idle, none spins; with
 * reactor_spin_us 0 none ever does. */
/* Reads the spinner count without pause until told to stop: the most it
 * saw.  A count that passed the cap for an instant is seen here. */
struct spin_sampler {
	_Atomic bool stop;
	uint32_t most;
};

static void *spin_sample(void *arg)
{
	struct spin_sampler *s = arg;
	while (!atomic_load(&s->stop)) {
		uint32_t n = dgi_reactor_spinning();
		s->most = n > s->most ? n : s->most;
	}
	return NULL;
}

static void test_reactor_spin_bounded(void **state)
{
	(void)state;
	enum { N = 6 };
	dg_tp *t[N];
	dg_node_id id[N];
	for (int i = 0; i < N; i++)
		t[i] = NODE(.reactor_spin_us = 300 * 1000);
	for (int i = 1; i < N; i++)
		id[i] = connect_ok(t[0], t[i]);
	uint32_t cap = dgi_reactor_spin_cap(), most = 0;
	assert_true(cap >= 1);
	struct spin_sampler smp = { .most = 0 };
	pthread_t sth;
	assert_int_equal(pthread_create(&sth, NULL, spin_sample, &smp), 0);
	/* every answerer's reactor wants to spin after each ping, while one
	 * already does: the cap turns all but one away, again and again */
	for (int round = 0; round < 300; round++)
		for (int i = 1; i < N; i++)
			OK(ping(t[0], id[i], "spin"));
	for (int k = 0; k < 200; k++) {
		uint32_t n = dgi_reactor_spinning();
		most = n > most ? n : most;
		sleep_ms(1);
	}
	atomic_store(&smp.stop, true);
	pthread_join(sth, NULL);
	most = smp.most > most ? smp.most : most;
	assert_true(most >= 1);
	if (most > cap)
		fail_msg("%u reactors counted spinning at once, the cap is %u", most, cap);
	WAIT_FOR_MS(dgi_reactor_spinning() == 0, 2000); /* idle: asleep */
	sleep_ms(400);
	assert_int_equal(dgi_reactor_spinning(), 0);
	for (int i = 0; i < N; i++)
		dg_tp_stop(t[i]);

	dg_tp *a = NODE(.reactor_spin_us = -1), *b = NODE(.reactor_spin_us = -1);
	dg_node_id bid = connect_ok(a, b);
	most = 0;
	for (int k = 0; k < 200; k++) {
		OK(ping(a, bid, "no spin"));
		uint32_t n = dgi_reactor_spinning();
		most = n > most ? n : most;
	}
	assert_int_equal(most, 0);
	dg_tp_stop(a);
	dg_tp_stop(b);
}

/* A caller that is the process's only one waiting spins up to the
 * transport's wait_spin_us (here 20 s) — a multi-hop wait too, which
 * spun not at all before — and stops spinning once a second caller
 * waits (then it sleeps: posted, it returns). */
static void test_spin_while_alone(void **state)
{
	(void)state;
	dg_tp *tp = NODE(.wait_spin_us = 20u * 1000 * 1000);
	for (int hop = 0; hop < 2; hop++) {
		struct lone_waiter w = { .tp = tp, .one_hop = hop != 0 };
		sem_init(&w.s, 0, 0);
		pthread_t th;
		assert_int_equal(dgi_spinners(), 0);
		assert_int_equal(pthread_create(&th, NULL, lone_wait, &w), 0);
		/* spinning, and still after the 30 µs a one-hop wait had */
		WAIT_FOR(dgi_spinners() == 1);
		sleep_ms(50);
		assert_int_equal(dgi_spinners(), 1);
		assert_false(atomic_load(&w.done));
		dgi_wait_enter(); /* a second caller waits */
		WAIT_FOR_MS(dgi_spinners() == 0, 2000);
		assert_false(atomic_load(&w.done));
		sem_post(&w.s);
		WAIT_FOR(atomic_load(&w.done));
		dgi_wait_leave();
		pthread_join(th, NULL);
		sem_destroy(&w.s);
	}
	dg_tp_stop(tp);
}

/* dgi_due_*: a count of answers one caller waits for.  Two answerer
 * threads answer each round; the caller (tp NULL: it never spins, so
 * every wait that finds answers due sleeps on the word) adds a hold on
 * every other round, which the last answer keeps (as a 2PC's last
 * PREPARE answer does) and then drops.  Every round's wait must end (a
 * lost wake-up hangs the waiter: the deadline fails the test), see both
 * answers' writes, and the kept last answer come exactly once per held
 * round. */
#define DUE_ROUNDS 10000
struct due_round {
	uint32_t due;
	_Atomic uint32_t go[2];     /* the round an answerer may answer */
	uint32_t wrote[2];          /* plain: read by the waiter after the wait */
	bool held;                  /* plain: written before go */
	_Atomic uint32_t kept;      /* rounds whose last answer was kept */
	_Atomic uint32_t waited;    /* rounds the waiter finished */
	_Atomic uint32_t bad;       /* a round the waiter saw unwritten */
};

static bool due_keep(void *arg)
{
	struct due_round *r = arg;
	return r->held;
}

struct due_answerer {
	struct due_round *r;
	int i;
};

static void *due_answer(void *arg)
{
	struct due_answerer *a = arg;
	struct due_round *r = a->r;
	for (uint32_t n = 1; n <= DUE_ROUNDS; n++) {
		while (atomic_load(&r->go[a->i]) < n)
			sched_yield();
		if (n % 3 == (uint32_t)a->i) { /* now and then late: the waiter sleeps first */
			struct timespec ts = { 0, 50000 };
			nanosleep(&ts, NULL);
		}
		r->wrote[a->i] = n;
		if (dgi_due_done_or_keep(&r->due, due_keep, r)) {
			atomic_fetch_add(&r->kept, 1);
			(void)dgi_due_done(&r->due); /* the hold */
		}
	}
	return NULL;
}

static void *due_wait(void *arg)
{
	struct due_round *r = arg;
	for (uint32_t n = 1; n <= DUE_ROUNDS; n++) {
		r->held = n % 2 == 0;
		dgi_due_add(&r->due, r->held ? 3 : 2);
		atomic_store(&r->go[0], n);
		atomic_store(&r->go[1], n);
		if (r->held && dgi_due_done_or_keep(&r->due, due_keep, r)) {
			/* the hold was the last: the answers are all in */
			atomic_fetch_add(&r->kept, 1);
			(void)dgi_due_done(&r->due);
		}
		dgi_due_wait(NULL, &r->due);
		if (r->wrote[0] != n || r->wrote[1] != n || __atomic_load_n(&r->due, __ATOMIC_RELAXED) != 0)
			atomic_fetch_add(&r->bad, 1);
		atomic_store(&r->waited, n);
	}
	return NULL;
}

static void test_due_count(void **state)
{
	(void)state;
	static struct due_round r;
	memset(&r, 0, sizeof(r));
	struct due_answerer a[2] = { { &r, 0 }, { &r, 1 } };
	pthread_t th[3];
	assert_int_equal(pthread_create(&th[0], NULL, due_wait, &r), 0);
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&th[1 + i], NULL, due_answer, &a[i]), 0);
	/* progress, or the test fails (a stuck waiter is left behind) */
	uint32_t seen = 0;
	for (int idle_ms = 0; atomic_load(&r.waited) < DUE_ROUNDS; idle_ms++) {
		uint32_t w = atomic_load(&r.waited);
		if (w != seen)
			seen = w, idle_ms = 0;
		if (idle_ms > 5000)
			fail_msg("round %u's wait did not end (a lost wake-up)", seen + 1);
		sleep_ms(1);
	}
	for (int i = 0; i < 3; i++)
		pthread_join(th[i], NULL);
	assert_int_equal(atomic_load(&r.bad), 0);
	assert_int_equal(atomic_load(&r.kept), DUE_ROUNDS / 2);
}

static void test_tcp_stop_with_pending_writes(void **state)
{
	(void)state;
	struct checker k;
	checker_init(&k);
	dg_tp *a = NODE(0), *b = NODE(0);
	OK(dg_tp_handle(b, DG_MSG_ECHO, on_check, &k));
	dg_node_id bid = connect_ok(a, b);
	fill_until_stalled(a, bid);
	for (int i = 0; i < 4; i++) { /* more behind it, in the queue */
		dg_msg_bytes m = { { big_body, BIG_FRAME } };
		OK(dg_tp_send(a, bid, DG_MSG_ECHO, &m));
	}
	struct result r;
	memset(&r, 0, sizeof(r));
	OK(dg_tp_request(a, bid, DG_MSG_PING, &(dg_msg_bytes){ { NULL, 0 } }, 30000,
	    on_result, &r));
	assert_true(write_waiting(a, bid));

	struct stop_arg2 sa = { a, false };
	pthread_t st;
	assert_int_equal(pthread_create(&st, NULL, stopper2, &sa), 0);
	WAIT_FOR(atomic_load(&sa.done));
	assert_int_equal(pthread_join(st, NULL), 0);
	assert_int_equal(atomic_load(&r.calls), 1);
	int e = atomic_load(&r.err);
	assert_true(e == DG_ERR_CLOSED || e == DG_ERR_CONN_BROKEN);

	/* b reads what arrived, sees the end, and stops cleanly */
	checker_open(&k);
	WAIT_FOR(stats(b).disconnects == 1);
	assert_int_equal(atomic_load(&k.corrupt), 0);
	assert_int_equal(atomic_load(&k.misordered), 0);
	dg_tp_stop(b);
	checker_destroy(&k);
}

/* ======================================================================== */

#define FX(f) cmocka_unit_test_setup_teardown(f, fx_setup, fx_teardown)

/* Both nodes send first, at once: each dials the other, one dial is
 * refused as a duplicate.  Every one-way message sent before either
 * connection was up must still arrive (it waits for the surviving
 * connection), in rounds with fresh nodes so the race is hit both ways. */
struct race_count {
	_Atomic int n;
};

static void on_race(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	(void)tp;
	(void)in;
	atomic_fetch_add(&((struct race_count *)ctx)->n, 1);
}

struct race_side {
	dg_tp *from;
	dg_node_id to;
	pthread_barrier_t *go;
	int sent;
};

static void *race_sender(void *arg)
{
	struct race_side *r = arg;
	pthread_barrier_wait(r->go);
	for (int i = 0; i < 50; i++) {
		t_i64 b = { i };
		if (dg_tp_send(r->from, r->to, (dg_msg_type)T_SINK, &b) == DG_OK)
			r->sent++;
	}
	return NULL;
}

static void test_both_dial_race_keeps_oneway(void **state)
{
	(void)state;
	int refused_rounds = 0;
	for (int round = 0; round < 30; round++) {
		dg_tp *a = NODE(.id = 0), *b = NODE(.id = 0);
		struct race_count ca = { 0 }, cb = { 0 };
		OK(dg_tp_handle(a, (dg_msg_type)T_SINK, on_race, &ca));
		OK(dg_tp_handle(b, (dg_msg_type)T_SINK, on_race, &cb));
		OK(dg_tp_set_address(a, dg_tp_self(b), dg_tp_address(b)));
		OK(dg_tp_set_address(b, dg_tp_self(a), dg_tp_address(a)));
		pthread_barrier_t go;
		pthread_barrier_init(&go, NULL, 2);
		struct race_side ra = { a, dg_tp_self(b), &go, 0 }, rb = { b, dg_tp_self(a), &go, 0 };
		pthread_t ta, tb;
		pthread_create(&ta, NULL, race_sender, &ra);
		pthread_create(&tb, NULL, race_sender, &rb);
		pthread_join(ta, NULL);
		pthread_join(tb, NULL);
		pthread_barrier_destroy(&go);
		assert_int_equal(ra.sent, 50);
		assert_int_equal(rb.sent, 50);
		uint64_t deadline = dgi_now_ms() + 5000;
		while ((atomic_load(&ca.n) < 50 || atomic_load(&cb.n) < 50) && dgi_now_ms() < deadline)
			sleep_ms(1);
		assert_int_equal(atomic_load(&cb.n), 50); /* nothing dropped, either way */
		assert_int_equal(atomic_load(&ca.n), 50);
		assert_int_equal(stats(a).dropped + stats(b).dropped, 0);
		refused_rounds += stats(a).handshake_failures + stats(b).handshake_failures > 0;
		dg_tp_handle(a, (dg_msg_type)T_SINK, NULL, NULL);
		dg_tp_handle(b, (dg_msg_type)T_SINK, NULL, NULL);
		dg_tp_stop(a);
		dg_tp_stop(b);
	}
	print_message("both-dial race: %d of 30 rounds refused a duplicate dial\n", refused_rounds);
}

/* dg_tp_at_round_end: a handler's callback runs once at the end of its
 * round of events, on the reactor thread, after every message the round
 * read — so 50 one-way frames written at once are handled in a few
 * rounds, each ending in one callback that saw them; from any other
 * thread it refuses. */
struct round_seen {
	_Atomic int handled;        /* messages so far */
	int in_round;               /* reactor thread only */
	_Atomic bool armed;
	_Atomic int rounds;         /* callbacks run */
	_Atomic int most;           /* the most messages one round saw */
	_Atomic int bad;            /* a callback off the reactor thread */
	pthread_t reactor;
};

static void on_round_end_cb(void *ctx)
{
	struct round_seen *r = ctx;
	if (!pthread_equal(pthread_self(), r->reactor))
		atomic_fetch_add(&r->bad, 1);
	if (r->in_round > atomic_load(&r->most))
		atomic_store(&r->most, r->in_round);
	r->in_round = 0;
	atomic_fetch_add(&r->rounds, 1);
	atomic_store(&r->armed, false);
}

static void on_round_msg(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	struct round_seen *r = ctx;
	(void)tp;
	(void)in;
	r->reactor = pthread_self();
	if (!atomic_load(&r->armed)) {
		if (!dg_tp_at_round_end(on_round_end_cb, r))
			atomic_fetch_add(&r->bad, 1);
		atomic_store(&r->armed, true);
	}
	r->in_round++;
	atomic_fetch_add(&r->handled, 1);
}

static void test_round_end(void **state)
{
	(void)state;
	dg_tp *a = NODE(0), *b = NODE(0);
	static struct round_seen r;
	memset(&r, 0, sizeof(r));
	OK(dg_tp_handle(b, (dg_msg_type)T_SINK, on_round_msg, &r));
	dg_node_id bid = connect_ok(a, b);
	assert_false(dg_tp_at_round_end(on_round_end_cb, &r)); /* not a reactor thread */
	bool corked = dg_tp_cork_begin();
	assert_false(dg_tp_at_round_end(on_round_end_cb, &r)); /* a caller's cork is no round */
	for (int i = 0; i < 50; i++) {
		t_i64 v = { i };
		OK(dg_tp_send(a, bid, (dg_msg_type)T_SINK, &v));
	}
	dg_tp_cork_end(corked);
	uint64_t until = dgi_now_ms() + 5000;
	while ((atomic_load(&r.handled) < 50 || atomic_load(&r.armed)) && dgi_now_ms() < until)
		sleep_ms(1);
	assert_int_equal(atomic_load(&r.handled), 50);
	assert_int_equal(atomic_load(&r.bad), 0);
	print_message("      50 frames in one write: %d rounds, the most in one %d\n",
	    atomic_load(&r.rounds), atomic_load(&r.most));
	assert_true(atomic_load(&r.rounds) >= 1);
	assert_true(atomic_load(&r.most) >= 2); /* a round ended after several */
	dg_tp_handle(b, (dg_msg_type)T_SINK, NULL, NULL);
	dg_tp_stop(a);
	dg_tp_stop(b);
}

/* dg_tp_quiesce waits for a round-end callback a handler left, as for
 * the handler itself: the cache unsets its handlers, quiesces and frees its
 * grid, and the callback gathering a round's copies reads it.  Before, the
 * grid was freed under a running callback (TSan, txn_api_test's crash
 * rounds, in CI).  The callback here sleeps 300 ms after its handler
 * returned; quiesce must not return before it ends. */
struct late_end {
	_Atomic int handled;
	_Atomic bool ended;
};

static void on_late_end(void *ctx)
{
	struct late_end *l = ctx;
	sleep_ms(300);
	atomic_store(&l->ended, true);
}

static void on_late_msg(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	struct late_end *l = ctx;
	(void)tp;
	(void)in;
	if (!dg_tp_at_round_end(on_late_end, l))
		return; /* (handled stays 0: the test fails) */
	atomic_fetch_add(&l->handled, 1);
}

static void test_quiesce_waits_round_end(void **state)
{
	(void)state;
	dg_tp *a = NODE(0), *b = NODE(0);
	static struct late_end l;
	memset(&l, 0, sizeof(l));
	OK(dg_tp_handle(b, (dg_msg_type)T_SINK, on_late_msg, &l));
	dg_node_id bid = connect_ok(a, b);
	t_i64 v = { 1 };
	OK(dg_tp_send(a, bid, (dg_msg_type)T_SINK, &v));
	uint64_t until = dgi_now_ms() + 5000;
	while (atomic_load(&l.handled) < 1 && dgi_now_ms() < until)
		sleep_ms(1);
	assert_int_equal(atomic_load(&l.handled), 1);
	dg_tp_handle(b, (dg_msg_type)T_SINK, NULL, NULL);
	dg_tp_quiesce(b);
	assert_true(atomic_load(&l.ended)); /* its context may be freed now */
	dg_tp_stop(a);
	dg_tp_stop(b);
}

/* A node whose dial was refused as a duplicate waits for the peer's own
 * connection only DGI_DUP_WAIT_MS, not the connect timeout, before it
 * dials again: the refusal may come from a connection the peer has not
 * seen closed yet, and then no dial of the peer's comes.  Before, queued
 * frames waited the whole connect timeout — after a cut healed, a pair
 * stayed apart past test_member_silent_peer_reset's 4 s deadline (failed
 * in CI).  Here the wait is set up as the close of a refused dial leaves
 * it, with a 20 s connect timeout: the queued frame arrives in well under
 * 2 s, by the redial. */
static void test_dup_wait_redials_soon(void **state)
{
	(void)state;
	dg_tp *a = NODE(.id = 0x1111, .connect_timeout_ms = 20000);
	dg_tp *b = NODE(.id = 0x2222, .connect_timeout_ms = 20000);
	dg_node_id bid = dg_tp_self(b);
	struct race_count cb = { 0 };
	OK(dg_tp_handle(b, (dg_msg_type)T_SINK, on_race, &cb));
	OK(dg_tp_set_address(a, bid, dg_tp_address(b)));
	uint64_t t0 = dgi_now_ms();
	assert_true(dgi_dup_wait_until(a, t0) - t0 <= DGI_DUP_WAIT_MS);
	struct peer *p = dgi_peer_get(a, bid, true);
	assert_non_null(p);
	pthread_mutex_lock(&p->mu);
	p->dialing = true;
	p->dup_wait_ms = dgi_dup_wait_until(a, t0);
	pthread_mutex_unlock(&p->mu);
	t_i64 one = { 7 };
	OK(dg_tp_send(a, bid, (dg_msg_type)T_SINK, &one)); /* queued: no dial */
	uint64_t until = t0 + 5000;
	while (atomic_load(&cb.n) < 1 && dgi_now_ms() < until)
		sleep_ms(5);
	uint64_t took = dgi_now_ms() - t0;
	print_message("      the queued frame arrived %llu ms after the refusal\n",
	    (unsigned long long)took);
	assert_int_equal(atomic_load(&cb.n), 1);
	assert_true(took < 2000);
	dg_tp_handle(b, (dg_msg_type)T_SINK, NULL, NULL);
	dg_tp_stop(a);
	dg_tp_stop(b);
}


int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_frame_header_layout),
		cmocka_unit_test(test_both_dial_race_keeps_oneway),
		cmocka_unit_test(test_membership_adopts_cluster_timings),
		cmocka_unit_test(test_frame_header_roundtrip),
		cmocka_unit_test(test_frame_header_rejections),
		cmocka_unit_test(test_msg_rows_roundtrip),
		cmocka_unit_test(test_msg_decode_errors),
		cmocka_unit_test(test_msg_define),
		cmocka_unit_test(test_auth_mac),
		cmocka_unit_test(test_start_config),
		cmocka_unit_test(test_handshake_ok),
		cmocka_unit_test(test_stale_connection_replaced),
		cmocka_unit_test(test_handshake_wrong_secret),
		cmocka_unit_test(test_handshake_secret_mismatch),
		cmocka_unit_test(test_handshake_cluster_mismatch),
		cmocka_unit_test(test_handshake_self),
		cmocka_unit_test(test_closed_handshake_never_attaches),
		FX(test_raw_before_handshake),
		FX(test_raw_silent),
		FX(test_raw_handshake_by_hand),
		FX(test_raw_unproven_leaves_nothing),
		cmocka_unit_test(test_raw_handshakes_bounded),
		FX(test_raw_fast_handshakes),
		FX(test_raw_after_handshake),
		cmocka_unit_test(test_injected_after_handshake),
		cmocka_unit_test(test_request_timeout),
		cmocka_unit_test(test_request_cancel),
		cmocka_unit_test(test_log_rate),
		cmocka_unit_test(test_request_errors),
		cmocka_unit_test(test_peer_stop_fails_inflight),
		cmocka_unit_test(test_disconnect_redials),
		cmocka_unit_test(test_disconnect_storm),
		cmocka_unit_test(test_ordering),
		cmocka_unit_test(test_backpressure),
		cmocka_unit_test(test_metrics_exact),
		cmocka_unit_test(test_no_alloc_per_message),
		cmocka_unit_test(test_no_alloc_requests_in_flight),
		cmocka_unit_test(test_dup_wait_redials_soon),
		cmocka_unit_test(test_round_end),
		cmocka_unit_test(test_quiesce_waits_round_end),
		cmocka_unit_test(test_concurrent_requests),
		cmocka_unit_test(test_stop_with_requests_in_flight),
		cmocka_unit_test(test_sections),
		cmocka_unit_test(test_sections_stress),
		cmocka_unit_test(test_handler_swapped_whole),
		cmocka_unit_test(test_lock_order_send_dials),
		cmocka_unit_test(test_membership),
		cmocka_unit_test(test_membership_types),
		cmocka_unit_test(test_membership_baseline),
		cmocka_unit_test(test_membership_resync_on_unknown_report),
		cmocka_unit_test(test_membership_refused),
		cmocka_unit_test(test_membership_removed_rules),
		cmocka_unit_test(test_topology_refuses_nul),
		cmocka_unit_test(test_membership_pause_member),
		cmocka_unit_test(test_membership_pause_coordinator),
		cmocka_unit_test(test_membership_rejoin_slow_type_sync),
		cmocka_unit_test(test_majority_arithmetic),
		cmocka_unit_test(test_rejoin_backoff),
		cmocka_unit_test(test_px_rule),
		cmocka_unit_test(test_quorum_amnesiac),
		cmocka_unit_test(test_membership_acceptor_kept),
		cmocka_unit_test(test_member_silent_peer_reset),
		cmocka_unit_test(test_majority_member_cut_off),
		cmocka_unit_test(test_majority_coordinator_cut_off),
		cmocka_unit_test(test_majority_even_split),
		cmocka_unit_test(test_majority_vote_rules),
		cmocka_unit_test(test_majority_voter_learns),
		cmocka_unit_test(test_majority_baseline_refused),
		cmocka_unit_test(test_baseline_after_adopted),
		cmocka_unit_test(test_membership_restart_on_coordinator_address),
		cmocka_unit_test(test_majority_segmented_dials_seeds),
		cmocka_unit_test(test_rejoin_backs_off_while_refused),
		cmocka_unit_test(test_membership_slow_listener),
		cmocka_unit_test(test_peer_moved_fails_fast),
		cmocka_unit_test(test_tcp_partial_writes),
		FX(test_tcp_peer_closes_mid_frame),
		cmocka_unit_test(test_tcp_dials),
		cmocka_unit_test(test_tcp_redial_backs_off),
		cmocka_unit_test(test_tcp_stop_with_pending_writes),
		cmocka_unit_test(test_spin_wait_counts),
		cmocka_unit_test(test_spin_while_alone),
		cmocka_unit_test(test_reactor_spin_bounded),
		cmocka_unit_test(test_due_count),
	};
	/* DG_TEST_FILTER=test_membership* runs the matching tests only */
	if (getenv("DG_TEST_FILTER") != NULL)
		cmocka_set_test_filter(getenv("DG_TEST_FILTER"));
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
