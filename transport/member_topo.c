/* member_topo.c — topologies: references, lookup, the TOPOLOGY codec and
 * its sending, and the baseline's set arithmetic (PROTOCOL.md,
 * "Membership", "Baseline").  No lock of its own: the callers hold m->mu
 * where member_int.h says so.
 */
#define _POSIX_C_SOURCE 200809L
#include "member_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- topologies ---- */

void dg_topology_release(dg_topology *t)
{
	if (t != NULL && atomic_fetch_sub(&t->refs, 1) == 1)
		dgi_free(t);
}

const dg_topology_node *dg_topology_find(const dg_topology *t, dg_node_id id)
{
	for (uint32_t i = 0; t != NULL && i < t->count; i++)
		if (t->nodes[i].id == id)
			return &t->nodes[i];
	return NULL;
}

static int str_cmp(dg_str a, dg_str b)
{
	int c = memcmp(a.ptr, b.ptr, a.len < b.len ? a.len : b.len);
	return c != 0 ? c : (a.len > b.len) - (a.len < b.len);
}

static int str_qcmp(const void *a, const void *b)
{
	return str_cmp(*(const dg_str *)a, *(const dg_str *)b);
}

dg_str dgi_bl_str(const char *s)
{
	return (dg_str){ s, (uint32_t)strlen(s) };
}

static bool bl_has(const struct bl *b, const char *url)
{
	dg_str u = dgi_bl_str(url);
	return b->n > 0 && bsearch(&u, b->a, b->n, sizeof(b->a[0]), str_qcmp) != NULL;
}

static void bl_normalize(struct bl *b)
{
	qsort(b->a, b->n, sizeof(b->a[0]), str_qcmp);
	uint32_t k = 0;
	for (uint32_t i = 0; i < b->n; i++)
		if (k == 0 || str_cmp(b->a[k - 1], b->a[i]) != 0)
			b->a[k++] = b->a[i];
	b->n = k;
}

/* The baseline t carries (views into t). */
void dgi_bl_of(struct bl *b, const dg_topology *t)
{
	b->set = t != NULL && t->baseline_set;
	b->n = 0;
	for (uint32_t i = 0; b->set && i < t->nbaseline; i++)
		b->a[b->n++] = dgi_bl_str(t->baseline[i]);
}

/* The baseline a cluster this node forms starts with: the one its owner
 * persisted (dg_member_config.baseline), or none.  Views into m->cfg's
 * copies. */
const struct bl *dgi_bl_formed(dg_member *m, struct bl *b)
{
	if (m->cfg.nbaseline == 0)
		return NULL;
	b->set = true;
	b->n = 0;
	for (uint32_t i = 0; i < m->cfg.nbaseline && b->n < DG_BASELINE_MAX; i++)
		b->a[b->n++] = dgi_bl_str(m->cfg.baseline[i]);
	bl_normalize(b);
	return b;
}

/* One allocation: header, nodes (sorted by order), the baseline's
 * pointers, then the strings (URLs, baseline addresses). */
dg_topology *dgi_member_topo_new(int64_t version, const dg_topology_node *nodes,
    uint32_t n, const struct bl *bl)
{
	uint32_t nb = bl != NULL && bl->set ? bl->n : 0;
	size_t strs = 0;
	for (uint32_t i = 0; i < n; i++)
		strs += strlen(nodes[i].url) + 1;
	for (uint32_t i = 0; i < nb; i++)
		strs += bl->a[i].len + 1;
	dg_topology *t = dgi_alloc(sizeof(*t) + n * sizeof(t->nodes[0]) +
	    nb * sizeof(char *) + strs);
	if (t == NULL)
		return NULL;
	t->version = version;
	t->count = n;
	atomic_init(&t->refs, 1);
	const char **bls = (const char **)(void *)&t->nodes[n];
	char *s = (char *)&bls[nb];
	for (uint32_t i = 0; i < n; i++) {
		/* insertion by order keeps the list sorted */
		uint32_t j = i;
		while (j > 0 && t->nodes[j - 1].order > nodes[i].order) {
			t->nodes[j] = t->nodes[j - 1];
			j--;
		}
		size_t l = strlen(nodes[i].url) + 1;
		memcpy(s, nodes[i].url, l);
		t->nodes[j].id = nodes[i].id;
		t->nodes[j].order = nodes[i].order;
		t->nodes[j].url = s;
		t->nodes[j].attrs = nodes[i].attrs;
		s += l;
	}
	for (uint32_t i = 0; i < nb; i++) {
		memcpy(s, bl->a[i].ptr, bl->a[i].len);
		s[bl->a[i].len] = 0;
		bls[i] = s;
		s += bl->a[i].len + 1;
	}
	t->baseline_set = bl != NULL && bl->set;
	t->nbaseline = nb;
	t->baseline = bls;
	return t;
}

dg_topology *dgi_topo_hold(dg_topology *t)
{
	if (t != NULL)
		atomic_fetch_add(&t->refs, 1);
	return t;
}

bool dgi_topo_removes(const dg_topology *cur, const dg_topology *t)
{
	for (uint32_t i = 0; i < cur->count; i++)
		if (dg_topology_find(t, cur->nodes[i].id) == NULL)
			return true;
	return false;
}

dg_topology *dg_member_topology(dg_member *m)
{
	pthread_mutex_lock(&m->mu);
	dg_topology *t = dgi_topo_hold(m->topo);
	pthread_mutex_unlock(&m->mu);
	return t;
}

/* TOPOLOGY body (PROTOCOL.md): one LIST — I64 version, I64 node count n,
 * n × (I64 id, I64 order, STRING url, I64 attrs), I64 baseline (-1: not
 * set, else its size k), k × STRING address. */
dg_err dgi_member_topo_encode(dg_member *m, const dg_topology *t, dg_buf *b)
{
	dg_writer w;
	dg_writer_init(&w, m->reg, b);
	dg_write_list_begin(&w, 3 + 4 * t->count + t->nbaseline);
	dg_write_i64(&w, t->version);
	dg_write_i64(&w, t->count);
	for (uint32_t i = 0; i < t->count; i++) {
		dg_write_i64(&w, (int64_t)t->nodes[i].id);
		dg_write_i64(&w, t->nodes[i].order);
		dg_write_str(&w, t->nodes[i].url, strlen(t->nodes[i].url));
		dg_write_i64(&w, t->nodes[i].attrs);
	}
	dg_write_i64(&w, t->baseline_set ? (int64_t)t->nbaseline : -1);
	for (uint32_t i = 0; i < t->nbaseline; i++)
		dg_write_str(&w, t->baseline[i], strlen(t->baseline[i]));
	dg_write_end(&w);
	return dg_writer_finish(&w);
}

/* The baseline at the end of a TOPOLOGY list: k views into the frame. */
static dg_err bl_decode(dg_reader *r, uint32_t left, struct bl *b)
{
	int64_t k;
	dg_err e;
	if ((e = dg_read_i64(r, &k)) != DG_OK)
		return e;
	if (k < -1 || k > DG_BASELINE_MAX || (k == -1 ? 0 : (uint32_t)k) != left - 1)
		return DG_ERR_BAD_LENGTH;
	b->set = k >= 0;
	b->n = 0;
	for (int64_t i = 0; i < k; i++) {
		dg_str a;
		if ((e = dg_read_str(r, &a, NULL)) != DG_OK)
			return e;
		/* used as a C string: a NUL inside would cut it (tests/fuzz
		 * crash msg_fuzz-3) */
		if (a.ptr == NULL || a.len == 0 || a.len >= DG_BASELINE_ADDR_MAX ||
		    memchr(a.ptr, 0, a.len) != NULL)
			return DG_ERR_BAD_LENGTH;
		b->a[b->n++] = a;
	}
	bl_normalize(b); /* a hostile sender's order must not break lookups */
	return DG_OK;
}

/* Decodes a TOPOLOGY body.  Its nodes, their URLs and the baseline are
 * decoded into one allocation sized by the body (up to DG_TOPOLOGY_MAX
 * nodes of 255-byte URLs and DG_BASELINE_MAX addresses: hundreds of KB,
 * too much for a network thread's stack); topology changes are rare. */
dg_err dgi_member_topo_decode(dg_member *m, const dg_raw *raw, dg_topology **out)
{
	dg_reader r;
	uint32_t count;
	int64_t version, nn;
	dg_err e;
	dg_reader_init(&r, m->reg, raw->ptr, raw->len);
	if ((e = dg_read_begin(&r, DG_LIST, &count)) != DG_OK)
		return e;
	if (count < 3)
		return DG_ERR_BAD_LENGTH;
	if ((e = dg_read_i64(&r, &version)) != DG_OK || (e = dg_read_i64(&r, &nn)) != DG_OK)
		return e;
	if (nn < 0 || nn > DG_TOPOLOGY_MAX || (uint64_t)count < 3 + 4 * (uint64_t)nn)
		return DG_ERR_BAD_LENGTH;
	uint32_t n = (uint32_t)nn;
	/* the URLs are copied with their terminators: at most the body's
	 * bytes plus one a node */
	struct bl *bl = dgi_alloc(sizeof(*bl) + n * sizeof(dg_topology_node) + raw->len + n);
	if (bl == NULL)
		return DG_ERR_NOMEM;
	dg_topology_node *nodes = (dg_topology_node *)(void *)(bl + 1);
	char *urls = (char *)(nodes + n), *u = urls;
	for (uint32_t i = 0; i < n && e == DG_OK; i++) {
		int64_t id, order, attrs;
		dg_str url;
		if ((e = dg_read_i64(&r, &id)) != DG_OK || (e = dg_read_i64(&r, &order)) != DG_OK ||
		    (e = dg_read_str(&r, &url, NULL)) != DG_OK ||
		    (e = dg_read_i64(&r, &attrs)) != DG_OK)
			break;
		if (url.ptr == NULL || url.len >= 256 || memchr(url.ptr, 0, url.len) != NULL ||
		    id == 0 || attrs < 0 || attrs > UINT32_MAX ||
		    (size_t)(u - urls) + url.len + 1 > raw->len + n) {
			e = DG_ERR_BAD_LENGTH;
			break;
		}
		memcpy(u, url.ptr, url.len);
		u[url.len] = 0;
		nodes[i].id = (dg_node_id)id;
		nodes[i].order = order;
		nodes[i].url = u;
		nodes[i].attrs = (uint32_t)attrs;
		u += url.len + 1;
	}
	if (e == DG_OK)
		e = bl_decode(&r, count - 2 - 4 * n, bl);
	if (e == DG_OK)
		e = (*out = dgi_member_topo_new(version, nodes, n, bl)) != NULL ? DG_OK : DG_ERR_NOMEM;
	dgi_free(bl);
	return e;
}

/* Send t to one node (to: its id), or to every member but this node (0). */
void dgi_member_topo_send(dg_member *m, const dg_topology *t, dg_node_id to)
{
	dg_buf b;
	dg_buf_init(&b);
	if (dgi_member_topo_encode(m, t, &b) == DG_OK) {
		dg_msg_raw body = { { b.data, (uint32_t)b.len } };
		for (uint32_t i = 0; i < t->count; i++)
			if (t->nodes[i].id != dg_tp_self(m->tp) && (to == 0 || t->nodes[i].id == to))
				dg_tp_send(m->tp, t->nodes[i].id, DG_MSG_TOPOLOGY, &body);
	}
	dg_buf_free(&b);
}

void dgi_member_broadcast(dg_member *m, const dg_topology *t)
{
	dgi_member_topo_send(m, t, 0);
}

/* ---- the baseline (PROTOCOL.md, "Baseline") ---- */

/* Whether some server of nodes is in b (what the coordinator keeps true
 * for a change it accepts; failures can still break it, see standby_bits). */
static bool bl_any_owner(const struct bl *b, const dg_topology_node *nodes, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		if (!(nodes[i].attrs & DG_NODE_CLIENT) && bl_has(b, nodes[i].url))
			return true;
	return false;
}

/* Applies op to b (which holds the current set; with none, the servers of
 * nodes stand for it).  Returns why it is refused, or NULL. */
const char *dgi_bl_apply(struct bl *b, const dg_topology_node *nodes, uint32_t n,
    int op, const dg_str *addrs, uint32_t naddrs, bool need_majority)
{
	if (op < DG_BASELINE_SET || op > DG_BASELINE_REMOVE)
		return "unknown operation (set, add or remove)";
	for (uint32_t i = 0; i < naddrs; i++)
		if (addrs[i].ptr == NULL || addrs[i].len == 0 || addrs[i].len >= DG_BASELINE_ADDR_MAX)
			return "an address is empty or longer than 127 bytes";
	if (op != DG_BASELINE_SET && !b->set) {
		b->n = 0; /* auto: the baseline is every server online now */
		for (uint32_t i = 0; i < n && b->n < DG_BASELINE_MAX; i++)
			if (!(nodes[i].attrs & DG_NODE_CLIENT))
				b->a[b->n++] = dgi_bl_str(nodes[i].url);
	}
	if (op == DG_BASELINE_SET)
		b->n = 0;
	if (op == DG_BASELINE_REMOVE) {
		uint32_t k = 0;
		for (uint32_t i = 0; i < b->n; i++) {
			bool drop = false;
			for (uint32_t j = 0; j < naddrs && !drop; j++)
				drop = str_cmp(b->a[i], addrs[j]) == 0;
			if (!drop)
				b->a[k++] = b->a[i];
		}
		b->n = k;
	} else {
		for (uint32_t i = 0; i < naddrs; i++) {
			if (b->n == DG_BASELINE_MAX)
				return "more than 1024 addresses";
			b->a[b->n++] = addrs[i];
		}
	}
	b->set = true;
	bl_normalize(b);
	if (!bl_any_owner(b, nodes, n))
		return "no online server node would own data (a baseline needs at least one)";
	if (need_majority) {
		/* the baseline is the voting set: one without a majority online
		 * would stop the cluster at once (PROTOCOL.md, "Majority") */
		uint32_t online = 0;
		for (uint32_t i = 0; i < b->n; i++) {
			bool on = false;
			for (uint32_t k = 0; k < n && !on; k++)
				on = !(nodes[k].attrs & DG_NODE_CLIENT) &&
				    str_cmp(b->a[i], dgi_bl_str(nodes[k].url)) == 0;
			online += on;
		}
		if (online < dgi_quorum_need(b->n))
			return "fewer than a majority of it online: under partition_policy=majority "
			    "the cluster would stop";
	}
	return NULL;
}

/* Sets the STANDBY bit of every server outside b; returns whether a bit
 * changed.  When no online server is in b (its nodes failed or left), no
 * node is STANDBY: the servers there own the data rather than nobody,
 * until a baseline node is back. */
bool dgi_bl_standby_bits(const struct bl *b, dg_topology_node *nodes, uint32_t n)
{
	bool any = b->set && bl_any_owner(b, nodes, n), changed = false;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t a = nodes[i].attrs & ~DG_NODE_STANDBY;
		if (any && !(a & DG_NODE_CLIENT) && !bl_has(b, nodes[i].url))
			a |= DG_NODE_STANDBY;
		changed |= a != nodes[i].attrs;
		nodes[i].attrs = a;
	}
	return changed;
}

bool dgi_bl_same(const struct bl *b, const dg_topology *t)
{
	if (b->set != t->baseline_set || (b->set && b->n != t->nbaseline))
		return false;
	for (uint32_t i = 0; b->set && i < b->n; i++)
		if (str_cmp(b->a[i], dgi_bl_str(t->baseline[i])) != 0)
			return false;
	return true;
}
