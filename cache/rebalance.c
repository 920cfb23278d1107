/*
 * rebalance.c — moving partitions to new owners, and the cache-wide
 * operations that walk partitions: scan, size, clear, lost-partition reset,
 * metrics.
 *
 * A new owner (MOVING) asks its supplier for the partition a batch at a
 * time (DEMAND: after this cursor, up to so many bytes; SUPPLY: entries
 * in page order — dgi_scan_key — the last cursor, whether more remain, and whether the sender's
 * copy is whole — else the sources of what it lacks, which are asked too:
 * transport/PROTOCOL.md, "Rebalancing").  Each entry is applied with the one rule — only a
 * newer version replaces a copy — so writes the new owner received
 * meanwhile (it is already a backup or the primary) win over older
 * copies.  When the last batch is in and the topology did not change
 * meanwhile, the partition becomes OWNING.  One rebalancer thread
 * per node fetches partitions one after another; writes and reads of every
 * partition go on meanwhile.
 */
#include "cache_int.h"
#include "marshal/marshal_int.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- pages of entries (SUPPLY, SCAN_RES) ---- */

struct page_ctx {
	dg_writer *w;
	const dgi_part *pt;
	bool live_only;
	uint32_t n;
	int64_t wall;
};

void dgi_entry_write(dg_writer *w, const dgi_part *p, const dgi_entry *e)
{
	bool tomb = (e->flags & DGI_ENTRY_TOMB) != 0;
	uint64_t op_node, op_seq;
	dgi_entry_op(p, e, &op_node, &op_seq);
	dg_write_bytes(w, dgi_entry_key(e), dgi_entry_klen(e));
	dg_write_bytes(w, tomb ? NULL : dgi_entry_val(e), e->vlen);
	dg_write_i64(w, dgi_entry_topver(e));
	dg_write_i64(w, (int64_t)e->counter);
	dg_write_i64(w, e->order);
	dg_write_i64(w, dgi_entry_expire(e));
	dg_write_i64(w, (int64_t)op_node);
	dg_write_i64(w, (int64_t)op_seq);
}

/* (live_only: a scan's page leaves tombstones and expired entries out) */
static bool page_wants(void *ctx, const dgi_entry *e)
{
	const struct page_ctx *p = ctx;
	bool tomb = (e->flags & DGI_ENTRY_TOMB) != 0;
	return !p->live_only ||
	    !(tomb || (dgi_entry_expire(e) != 0 && dgi_entry_expire(e) <= p->wall));
}

static void page_one(void *ctx, const dgi_entry *e)
{
	struct page_ctx *p = ctx;
	dgi_entry_write(p->w, p->pt, e);
	p->n++;
}

uint32_t dgi_page_cap(const dgi_part *pt, uint64_t bytes)
{
	/* entries are small next to a batch: an entry-count cap from the byte
	 * budget keeps one page near that many bytes */
	uint64_t avg = pt->count ? pt->bytes / pt->count + 80 : 64; /* (dgi_page_entry_bytes) */
	uint64_t k = bytes / (avg ? avg : 64);
	return k < 16 ? 16 : k > 65536 ? 65536 : (uint32_t)k;
}

dg_err dgi_page_encode(dgi_grid *g, dg_cache *c, uint32_t part, uint64_t after,
    bool first, uint64_t max, bool bytes_limit, bool live_only, dg_buf *b)
{
	dgi_part *pt = &c->parts[part];
	dg_writer w;
	dg_buf body;
	dg_buf_init(&body);
	dg_writer_init(&w, g->reg, &body);
	struct page_ctx pc = { &w, pt, live_only, 0, dgi_wall_ms() };
	bool more = false;
	/* every page in bytes too, whatever was asked: one frame carries it
	 * (rebalance_batch_bytes is below recv_max: settings.c) */
	uint64_t max_bytes = g->cfg.rebalance_batch_bytes;
	if (bytes_limit && max < max_bytes)
		max_bytes = max;
	dgi_part_lock(pt);
	uint32_t cap = bytes_limit ? dgi_page_cap(pt, max_bytes) : (uint32_t)max;
	uint64_t last = dgi_part_scan(pt, after, first, cap, max_bytes, page_wants, page_one, &pc,
	    &more);
	/* read with the entries: the mark holds for what this page carries */
	bool whole = atomic_load(&pt->whole);
	int64_t copy = whole ? DGI_COPY_WHOLE : pt->broken ? DGI_COPY_BROKEN : DGI_COPY_PARTIAL;
	uint8_t nsrcs = whole ? 0 : pt->nsrcs;
	dg_node_id srcs[DGI_PART_SRCS];
	memcpy(srcs, pt->srcs, nsrcs * sizeof(srcs[0]));
	/* the first page of a transfer (SUPPLY, PUSH) carries the update-id
	 * records: a retry that reaches the new owner is recognised even when
	 * its key changed since (the entry's own id is the last update's) */
	uint32_t ndd = 0;
	struct dgi_dd *dd = NULL;
	if (first && !live_only && pt->dd_count > 0 &&
	    (dd = dgi_alloc(DGI_PAGE_DD_MAX * sizeof(*dd))) != NULL)
		for (uint32_t i = 0; i < pt->dd_cap && ndd < DGI_PAGE_DD_MAX; i++)
			if (pt->dd[i].node != 0)
				dd[ndd++] = pt->dd[i];
	dgi_part_unlock(pt);
	dg_err e = dg_writer_finish(&w);
	if (e == DG_OK && (e = dg_buf_reserve(b, 11)) == DG_OK) {
		/* LIST header (FORMAT.md: tag, count), the head values, then
		 * the entries, already encoded as values, appended as they are */
		b->data[b->len++] = TAG_LIST;
		b->len = (size_t)(dgi_put_uvarint(b->data + b->len, DGI_PAGE_HEAD_VALUES +
		    (uint64_t)nsrcs + 3 * (uint64_t)ndd + DGI_PAGE_ENTRY_VALUES * (uint64_t)pc.n) -
		    b->data);
		dg_writer lw;
		dg_writer_init(&lw, g->reg, b);
		dg_write_i64(&lw, more);
		dg_write_i64(&lw, (int64_t)last);
		dg_write_i64(&lw, copy);
		dg_write_i64(&lw, nsrcs);
		dg_write_i64(&lw, ndd);
		for (uint8_t i = 0; i < nsrcs; i++)
			dg_write_i64(&lw, (int64_t)srcs[i]);
		for (uint32_t i = 0; i < ndd; i++) {
			dg_write_i64(&lw, (int64_t)dd[i].node);
			dg_write_i64(&lw, (int64_t)dd[i].seq);
			dg_write_i64(&lw, dd[i].flag);
		}
		e = dg_writer_finish(&lw);
		if (e == DG_OK && body.len > 0 && (e = dg_buf_reserve(b, body.len)) == DG_OK) {
			memcpy(b->data + b->len, body.data, body.len);
			b->len += body.len;
		}
	}
	dg_buf_free(&body);
	dgi_free(dd);
	return e;
}

typedef dg_err (*page_fn)(void *ctx, const uint8_t *key, uint32_t klen, const uint8_t *val,
    uint32_t vlen, bool tomb, const dgi_pver *ver, int64_t expire, uint64_t op_node,
    uint64_t op_seq);

/* A page's head (PROTOCOL.md, "Entry pages"). */
struct page_head {
	bool more;                  /* entries after this page */
	uint64_t last;              /* hash to continue after */
	bool whole;                 /* the sender holds the partition whole */
	bool broken;                /* not whole, and can never be */
	uint8_t nsrcs;              /* not whole: who holds what it lacks */
	dg_node_id srcs[DGI_PART_SRCS];
	uint32_t entries;           /* entries that follow */
};

/* Reads a page's d update-id records; into the partition's table when pt
 * is not NULL (locks it), else skipped. */
static dg_err page_dd_read(dg_reader *r, uint32_t d, dgi_part *pt)
{
	dg_err e = DG_OK;
	uint64_t now = dgi_now_ms();
	if (pt != NULL)
		dgi_part_lock(pt);
	for (uint32_t i = 0; i < d && e == DG_OK; i++) {
		int64_t v[3];
		for (int k = 0; k < 3 && e == DG_OK; k++)
			e = dg_read_i64(r, &v[k]);
		if (e == DG_OK && pt != NULL)
			dgi_dedup_put(pt, (uint64_t)v[0], (uint64_t)v[1], v[2], now);
	}
	if (pt != NULL)
		dgi_part_unlock(pt);
	return e;
}

/* Reads the LIST header and the head values of a page (its update-id
 * records into dd_into's table, or skipped when NULL); r is left at its
 * first entry. */
static dg_err page_head_read(dg_reader *r, struct page_head *h, dgi_part *dd_into)
{
	uint32_t count;
	int64_t v[DGI_PAGE_HEAD_VALUES];
	dg_err e = dg_read_begin(r, DG_LIST, &count);
	if (e != DG_OK)
		return e;
	if (count < DGI_PAGE_HEAD_VALUES)
		return DG_ERR_BAD_LENGTH;
	for (int i = 0; i < DGI_PAGE_HEAD_VALUES; i++)
		if ((e = dg_read_i64(r, &v[i])) != DG_OK)
			return e;
	uint32_t left = count - DGI_PAGE_HEAD_VALUES;
	if (v[2] < DGI_COPY_PARTIAL || v[2] > DGI_COPY_BROKEN || v[3] < 0 ||
	    v[3] > DGI_PART_SRCS || v[4] < 0 || v[4] > DGI_PAGE_DD_MAX ||
	    (uint64_t)v[3] + 3 * (uint64_t)v[4] > left ||
	    (left - (uint32_t)v[3] - 3 * (uint32_t)v[4]) % DGI_PAGE_ENTRY_VALUES != 0)
		return DG_ERR_BAD_LENGTH;
	h->more = v[0] != 0;
	h->last = (uint64_t)v[1];
	h->whole = v[2] == DGI_COPY_WHOLE;
	h->broken = v[2] == DGI_COPY_BROKEN;
	h->nsrcs = (uint8_t)v[3];
	for (uint8_t i = 0; i < h->nsrcs; i++) {
		int64_t id;
		if ((e = dg_read_i64(r, &id)) != DG_OK)
			return e;
		h->srcs[i] = (dg_node_id)id;
	}
	if ((e = page_dd_read(r, (uint32_t)v[4], dd_into)) != DG_OK)
		return e;
	h->entries = (left - h->nsrcs - 3 * (uint32_t)v[4]) / DGI_PAGE_ENTRY_VALUES;
	return DG_OK;
}

/* Reads a page list into h (its update-id records into dd_into's table);
 * calls fn per entry. */
static dg_err page_decode(dgi_grid *g, const dg_raw *list, struct page_head *h,
    dgi_part *dd_into, page_fn fn, void *ctx)
{
	dg_reader r;
	dg_err e;
	dg_reader_init(&r, g->reg, list->ptr, list->len);
	if ((e = page_head_read(&r, h, dd_into)) != DG_OK)
		return e;
	for (uint32_t i = 0; i < h->entries; i++) {
		dg_bytes k, v;
		int64_t t, cn, o, x, on, os;
		if ((e = dg_read_bytes(&r, &k, NULL)) != DG_OK ||
		    (e = dg_read_bytes(&r, &v, NULL)) != DG_OK || (e = dg_read_i64(&r, &t)) != DG_OK ||
		    (e = dg_read_i64(&r, &cn)) != DG_OK || (e = dg_read_i64(&r, &o)) != DG_OK ||
		    (e = dg_read_i64(&r, &x)) != DG_OK || (e = dg_read_i64(&r, &on)) != DG_OK ||
		    (e = dg_read_i64(&r, &os)) != DG_OK)
			return e;
		if (k.ptr == NULL || k.len == 0)
			return DG_ERR_BAD_LENGTH;
		dgi_pver ver = { t, (uint64_t)cn, (uint32_t)o, 0 };
		if ((e = fn(ctx, k.ptr, k.len, v.ptr, v.len, v.ptr == NULL, &ver, x, (uint64_t)on,
		    (uint64_t)os)) != DG_OK)
			return e;
	}
	return DG_OK;
}

/* ---- supplier side ---- */

static void on_page_req(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	dgi_grid *g = ctx;
	const dgi_msg_page_req *m = in->body;
	dg_cache *c = dgi_grid_cache(g, (uint32_t)m->cache_id);
	bool demand = in->type == DGI_MSG_DEMAND;
	if (c == NULL) {
		dg_tp_reply_error(tp, in, DG_ERR_NOT_FOUND);
		return;
	}
	if (m->part < 0 || (uint64_t)m->part >= c->cfg.partitions || m->max <= 0) {
		dg_tp_reply_error(tp, in, DG_ERR_INVAL);
		return;
	}
	if (demand && atomic_load(&g->topver) < m->topver) {
		/* not on the demander's topology yet: writes under the old one
		 * might still land here after the batch was cut */
		dg_tp_reply_error(tp, in, DG_ERR_NOT_READY);
		return;
	}
	uint32_t part = (uint32_t)m->part;
	if (!demand) {
		int st = atomic_load(&c->parts[part].state);
		if (st == P_LOST) {
			dg_tp_reply_error(tp, in, DG_ERR_PARTITION_LOST);
			return;
		}
		if (st != P_OWNING) {
			dg_tp_reply_error(tp, in, st == P_MOVING ? DG_ERR_NOT_READY : DG_ERR_REMAP);
			return;
		}
		if (dg_member_serving(g->m) != DG_OK) {
			/* no lease: the majority may have moved the partition */
			dg_tp_reply_error(tp, in, DG_ERR_NOT_READY);
			return;
		}
	}
	uint64_t max = (uint64_t)m->max;
	if (!demand && max > 65536)
		max = 65536;
	dg_buf b;
	dg_buf_init(&b);
	dg_err e = dgi_page_encode(g, c, part, (uint64_t)m->after, m->first != 0, max, demand,
	    !demand, &b);
	if (e == DG_OK) {
		dg_msg_raw body = { { b.data, (uint32_t)b.len } };
		e = dg_tp_reply(tp, in, demand ? DGI_MSG_SUPPLY : DGI_MSG_SCAN_RES, &body);
	}
	if (e != DG_OK)
		dg_tp_reply_error(tp, in, e);
	dg_buf_free(&b);
}

/* ---- demander side ---- */

struct apply_ctx {
	dgi_grid *g;
	dg_cache *c;
	uint32_t part;
	uint64_t bytes;
	int64_t replace_below;      /* > 0: replacing loaded entries below this
	                               topology version (replace_one) */
};

static dg_err replace_one(struct apply_ctx *a, uint64_t h, const uint8_t *key, uint32_t klen,
    const uint8_t *val, uint32_t vlen, const dgi_pver *ver, int64_t expire, uint64_t op_node,
    uint64_t op_seq);

/* One entry of a SUPPLY or PUSH page: applied with its update id, so a
 * retry of that update reaching this node (its new owner) is applied once. */
static dg_err apply_one(void *ctx, const uint8_t *key, uint32_t klen, const uint8_t *val,
    uint32_t vlen, bool tomb, const dgi_pver *ver, int64_t expire, uint64_t op_node,
    uint64_t op_seq)
{
	struct apply_ctx *a = ctx;
	uint64_t h = dgi_key_hash(key, klen);
	if (dgi_part_of(h, a->c->cfg.partitions) != a->part)
		return DG_ERR_INVAL;
	a->bytes += klen + vlen;
	if (a->replace_below > 0)
		return replace_one(a, h, key, klen, tomb ? NULL : val, vlen, ver, expire, op_node,
		    op_seq);
	return dgi_apply_copy(a->g, a->c, a->part, h, key, klen, tomb ? NULL : val, vlen, ver,
	    expire, op_node, op_seq);
}

struct page_wait {
	dg_buf *copy;
};

static void copy_reply(void *ctx, dg_err err, const dg_msg_in *reply);

/* A blocking request whose reply list is copied into out. */
struct list_call {
	sem_t sem;
	dg_err err;
	dg_buf *out;
};

static void copy_reply(void *ctx, dg_err err, const dg_msg_in *reply)
{
	struct list_call *lc = ctx;
	if (err == DG_OK) {
		const dg_msg_raw *r = reply->body;
		lc->out->len = 0;
		err = dg_buf_reserve(lc->out, r->list.len);
		if (err == DG_OK) {
			memcpy(lc->out->data, r->list.ptr, r->list.len);
			lc->out->len = r->list.len;
		}
	}
	lc->err = err;
	sem_post(&lc->sem);
}

static dg_err call_list(dgi_grid *g, dg_node_id to, dg_msg_type type, const void *body,
    dg_buf *out)
{
	struct list_call lc = { .err = DG_OK, .out = out };
	sem_init(&lc.sem, 0, 0);
	dg_err e = dg_tp_request(g->tp, to, type, body, g->cfg.request_timeout_ms, copy_reply, &lc);
	if (e == DG_OK) {
		while (sem_wait(&lc.sem) != 0)
			;
		e = lc.err;
	}
	sem_destroy(&lc.sem);
	return e;
}

/* ---- whole copies ----
 *
 * A copy is whole when it holds every entry of the partition: it owned it
 * from the start, or fetched it from every source, and kept every entry
 * since.  A copy rented out (NONE) stays whole: the writes after it went
 * to its new owners, which fetch from it.  A MOVING copy is not, nor one
 * that stopped owning while MOVING; such a copy remembers its sources —
 * the supplier it was fetching from and, for a copy already partial when
 * it started moving, the older ones — which hold what it lacks.
 *
 * A new owner fetches from its supplier and, whenever a page says its
 * sender is not whole, from the sources the page names, and so on (each
 * node once, this one excepted: what it holds is its own): the sources
 * lead back through every earlier owner that took writes to one that held
 * the partition whole, so the copies fetched hold everything.  Only then
 * is the partition OWNING and whole; REBALANCE_OWNED says yes for whole
 * copies, so a rented copy is dropped only once every owner has it all.
 *
 * A node dropped out of the cluster's topology (removed while cut off or
 * paused: PROTOCOL.md, "Majority") marks every copy it holds not whole
 * and broken, and stale (grid.c, retopo_cache): the others wrote without
 * it, so a new owner that fetches it also fetches another old owner's
 * whole copy (newer versions win), and goes LOST rather than take it
 * alone; a supplier read (a MOVING owner's reader forwarded) is answered
 * only from a whole copy.  When the dropped node owns a partition again
 * and fetches it from an old owner, its stale copy is emptied first: it
 * may hold writes applied there alone, which the cluster never had.
 *
 * A source that left the cluster is passed over: what only it held is
 * lost (backups = 0, as when any sole owner fails), and so may be the
 * link to an older whole copy, which is still rented out somewhere.  The
 * partition is then OWNING but broken — as is one a node owns with what it
 * has because no earlier owner and no source is left (grid.c,
 * retopo_cache) — and a broken copy makes every copy fetched from it
 * broken.  A broken owner can never say it is whole; it completes itself
 * from the rented copies instead: every node that asks it
 * REBALANCE_OWNED about the partition becomes a source it fetches from
 * (with the sources that one names) while it goes on serving, and once
 * it has taken that node's copy in full it answers that node yes (taken),
 * so the copy is dropped only when the owner has it.
 *
 * Copies loaded from disk.  After a restart of the whole cluster every
 * server's copies come from its own data_dir, and a server that was down
 * while the others wrote holds older ones.  No loaded copy is whole and
 * none is served (grid.c, retopo_cache: `reloaded`): an owner stays MOVING
 * with no supplier — its readers wait rather than be forwarded to a copy
 * as old — until the topology is active (a majority of its baseline;
 * before that the node is SEGMENTED), then fetches the partition from
 * every other server of that topology, newest version winning, and only
 * then is OWNING and whole.  A server that does not own the partition
 * keeps its loaded copy as a rented one until every owner has merged it.
 * Owners that merge at the same time fetch each other's loaded copies (the
 * merge is commutative); a server that comes back after an owner merged
 * takes that owner's whole copy in place of what it loaded (replace_one,
 * sweep_loaded: what it loaded may hold a write it persisted and never
 * replicated before a kill -9), keeping only what was written under the
 * topology it moved at.  Only an owner's under that topology: a rented
 * copy says whole too, but only as of when its node stopped owning the
 * partition (a server keeps the copies it handed over at the joins for the
 * rent grace), and taking one dropped acknowledged writes; the owners are
 * asked first.  A topology change during the merge starts it
 * again with the new topology's servers; a server that left took its copy
 * along, as one that never came back (DEPLOY.md, "A full-cluster
 * restart"). */

bool dgi_part_node_add(dg_node_id *list, uint8_t *n, dg_node_id id)
{
	for (uint8_t i = 0; i < *n; i++)
		if (list[i] == id)
			return true;
	if (*n == DGI_PART_SRCS)
		return false;
	list[(*n)++] = id;
	return true;
}

/* Most nodes one fetch of a partition visits: a chain of owners each of
 * which lost the partition before it had it whole. */
#define FETCH_NODES 16

struct fetch {
	dgi_grid *g;
	dg_cache *c;
	uint32_t part;
	int64_t topver;             /* the state's */
	uint64_t gen;
	dg_node_id q[FETCH_NODES];  /* to visit: the supplier, the sources */
	bool got[FETCH_NODES];      /* fetched in full (else: gone) */
	bool own[FETCH_NODES];      /* an owner under topver (a merge of loaded
	                               copies: its whole copy is current) */
	uint32_t nq;
	bool broken;                /* a page from a broken copy */
	bool reload;                /* a merge of loaded copies */
	dg_node_id replace_from;    /* its whole copy replaces the loaded one */
	struct apply_ctx a;
	dg_buf reply;
};

/* Queues a node to fetch from, once (never this node).  false: the queue
 * is full. */
static bool fetch_queue(struct fetch *f, dg_node_id id)
{
	if (id == 0 || id == f->g->self)
		return true;
	for (uint32_t i = 0; i < f->nq; i++)
		if (f->q[i] == id)
			return true;
	if (f->nq == FETCH_NODES)
		return false;
	f->q[f->nq++] = id;
	return true;
}

/* A page from a copy that is not whole: its sources are fetched from too,
 * and this copy remembers them (while it is still in the same state), so
 * a fetch cut short by a topology change still knows them. */
static dg_err fetch_sources(struct fetch *f, const struct page_head *h)
{
	dgi_part *pt = &f->c->parts[f->part];
	f->broken |= h->broken;
	for (uint8_t i = 0; i < h->nsrcs; i++)
		if (!fetch_queue(f, h->srcs[i])) {
			dgi_log("warn", "REBALANCE-SOURCES", "cache=\"%s\" partition=%u why=\"more than %d nodes to fetch from\"",
			    f->c->cfg.name, f->part, FETCH_NODES);
			return DG_ERR_RANGE;
		}
	dgi_part_lock(pt);
	if (pt->state_topver == f->topver && !atomic_load(&pt->whole))
		for (uint8_t i = 0; i < h->nsrcs; i++)
			if (h->srcs[i] != f->g->self)
				dgi_part_src_add(pt, h->srcs[i]);
	dgi_part_unlock(pt);
	return DG_OK;
}

/* Whether a page list says its sender's copy is whole (its head's third
 * value; page_head_read checks the rest). */
static bool page_says_whole(dgi_grid *g, const dg_raw *list)
{
	dg_reader r;
	uint32_t count;
	int64_t v[3];
	dg_reader_init(&r, g->reg, list->ptr, list->len);
	if (dg_read_begin(&r, DG_LIST, &count) != DG_OK || count < 3)
		return false;
	for (int i = 0; i < 3; i++)
		if (dg_read_i64(&r, &v[i]) != DG_OK)
			return false;
	return v[2] == DGI_COPY_WHOLE;
}

/* A copy loaded from disk meets a whole one (an owner that merged before
 * this node came back, or the cluster that went on without it): what it
 * loaded is replaced by that copy, never merged in — it may hold a write
 * it persisted and never replicated before a kill -9, which the cluster
 * does not have.  While the whole copy's pages come in, each loaded entry
 * (older than the topology the partition moved at) that the page holds is
 * marked seen, and overwritten when its version differs, older or not;
 * once the last page is in, the loaded entries not seen go (sweep_loaded),
 * in memory and on disk.  Entries written since the partition moved (this
 * node already takes its writes) follow the one rule, newest wins.  An
 * unchanged entry is not written again: a restart of an up-to-date node
 * rewrites nothing. */
struct marks {
	int64_t below;
	bool clear;                 /* else: collect the unseen ones */
	dgi_entry **e;
	uint32_t n, cap;
};

static void mark_one(void *ctx, const dgi_entry *ce)
{
	struct marks *m = ctx;
	dgi_entry *e = (dgi_entry *)ce;
	if (m->clear || dgi_entry_topver(e) >= m->below ||
	    (e->flags & (DGI_ENTRY_SEEN | DGI_ENTRY_PENDING))) {
		e->flags &= ~DGI_ENTRY_SEEN;
		return;
	}
	if (m->n == m->cap) {
		uint32_t nc = m->cap ? m->cap * 2 : 64;
		dgi_entry **ne = dgi_realloc(m->e, nc * sizeof(*ne));
		if (ne == NULL)
			return; /* (kept: a later fetch sweeps it) */
		m->e = ne;
		m->cap = nc;
	}
	m->e[m->n++] = e;
}

/* Clears every mark (partition locked). */
static void clear_marks(dgi_part *pt)
{
	struct marks m = { 0, true, NULL, 0, 0 };
	dgi_part_each(pt, mark_one, &m);
}

/* Removes a stored record whatever its version (a removal at its own
 * version deletes it: pstore.h, "Versions"). */
static dg_err unstore(dgi_grid *g, dg_cache *c, uint32_t part, const dgi_entry *e)
{
	if (!c->cfg.persistence || g->ps == NULL)
		return DG_OK;
	dgi_prec r = { c->id, part, dgi_entry_key(e), dgi_entry_klen(e), NULL, 0, dgi_entry_ver(e),
		0, 0, 0 };
	return dgi_pstore_write(g->ps, &r, 1);
}

/* The loaded entries the whole copy did not hold go; marks are cleared.
 * Partition locked. */
static void sweep_loaded(dgi_grid *g, dg_cache *c, uint32_t part, dgi_part *pt, int64_t below)
{
	struct marks m = { below, false, NULL, 0, 0 };
	dgi_part_each(pt, mark_one, &m);
	for (uint32_t i = 0; i < m.n; i++) {
		const dgi_entry *e = m.e[i];
		if (unstore(g, c, part, e) != DG_OK)
			continue; /* (kept: a later fetch sweeps it) */
		dgi_part_del(pt, dgi_entry_hash(e), dgi_entry_key(e), dgi_entry_klen(e));
	}
	if (m.n > 0)
		dgi_log("info", "RELOAD-REPLACED", "cache=\"%s\" partition=%u dropped=%u "
		    "why=\"loaded from disk, not in the cluster's copy\"", c->cfg.name, part, m.n);
	dgi_free(m.e);
}

/* One entry of the whole copy, replacing a loaded one (apply_one). */
static dg_err replace_one(struct apply_ctx *a, uint64_t h, const uint8_t *key, uint32_t klen,
    const uint8_t *val, uint32_t vlen, const dgi_pver *ver, int64_t expire, uint64_t op_node,
    uint64_t op_seq)
{
	dgi_part *pt = &a->c->parts[a->part];
	dg_err e = dgi_entry_storable(klen, ver->topver);
	if (e != DG_OK)
		return e; /* (before the loaded record is replaced) */
	dgi_part_lock(pt);
	dgi_entry *cur = dgi_part_find(pt, h, key, klen);
	if (cur != NULL && (dgi_entry_topver(cur) >= a->replace_below ||
	    (cur->flags & DGI_ENTRY_PENDING))) {
		dgi_part_unlock(pt);
		return dgi_apply_copy(a->g, a->c, a->part, h, key, klen, val, vlen, ver, expire,
		    op_node, op_seq);
	}
	if (cur == NULL || dgi_entry_ver_cmp(ver, cur) != 0) {
		if (val == NULL && expire == 0)
			expire = dgi_wall_ms() + DGI_TOMB_TTL_MS;
		if ((cur == NULL || (e = unstore(a->g, a->c, a->part, cur)) == DG_OK) &&
		    a->c->cfg.persistence)
			e = dgi_grid_persist(a->g, a->c, a->part, key, klen, val, vlen, ver, expire,
			    val == NULL, op_node, op_seq);
		if (e == DG_OK)
			e = dgi_part_set(pt, h, key, klen, val, vlen, ver, expire, op_node, op_seq,
			    val == NULL ? DGI_ENTRY_TOMB : 0, &cur);
	}
	if (e == DG_OK && cur != NULL)
		cur->flags |= DGI_ENTRY_SEEN;
	dgi_part_unlock(pt);
	return e;
}

/* rebalance_throttle_ms after a batch that carried entries (an empty one
 * cost its supplier nothing to spare; dg_node_config): the rebalancer
 * waits on the grid's condition, so a stop or a new topology (which
 * broadcast it) ends the pause at once. */
static void throttle(dgi_grid *g)
{
	if (g->cfg.rebalance_throttle_ms == 0)
		return;
	struct timespec ts;
	dgi_abstime_in(&ts, g->cfg.rebalance_throttle_ms);
	pthread_mutex_lock(&g->mu);
	uint64_t gen = g->rebal_gen;
	while (!g->stopping && g->rebal_gen == gen &&
	    pthread_cond_timedwait(&g->cv, &g->mu, &ts) == 0)
		;
	pthread_mutex_unlock(&g->mu);
}

/* Every page of the partition from one node, applied; *whole: every page
 * said the node holds it whole.  owner: from owns the partition under the
 * topology f moves at (a merge of loaded copies takes only such a whole
 * copy in place of its own). */
static dg_err fetch_from(struct fetch *f, dg_node_id from, bool owner, bool *whole)
{
	dgi_grid *g = f->g;
	uint64_t after = 0;
	bool first = true, more = true;
	*whole = true;
	while (more) {
		pthread_mutex_lock(&g->mu);
		bool stale = g->stopping || g->rebal_gen != f->gen;
		pthread_mutex_unlock(&g->mu);
		if (stale || atomic_load(&f->c->dead))
			return DG_ERR_STATE;
		dgi_msg_page_req m = { f->c->id, f->part, f->topver, (int64_t)after, first,
			g->cfg.rebalance_batch_bytes };
		dg_err e = call_list(g, from, DGI_MSG_DEMAND, &m, &f->reply);
		if (e != DG_OK)
			return e;
		dg_raw list = { f->reply.data, (uint32_t)f->reply.len };
		if (f->reload && owner && first && f->a.replace_below == 0 &&
		    page_says_whole(g, &list)) {
			/* the cluster's whole copy: it replaces what was loaded */
			dgi_part *pt = &f->c->parts[f->part];
			dgi_part_lock(pt);
			if (pt->state_topver == f->topver && pt->reloaded) {
				clear_marks(pt); /* those of an earlier try go */
				f->a.replace_below = pt->moving_topver;
				f->replace_from = from;
			}
			dgi_part_unlock(pt);
		}
		struct page_head h;
		if ((e = page_decode(g, &list, &h, &f->c->parts[f->part], apply_one, &f->a)) != DG_OK)
			return e;
		if (!h.whole && (e = fetch_sources(f, &h)) != DG_OK)
			return e;
		*whole &= h.whole;
		more = h.more;
		after = h.last;
		first = false;
		if (h.entries > 0)
			throttle(g);
	}
	return DG_OK;
}

/* After a fetch (partition locked): the sources it visited are done with
 * (those left were added meanwhile); a copy not whole after it has taken
 * the ones it reached.  Returns how many sources are left. */
static uint8_t sources_done(dgi_part *pt, const struct fetch *f)
{
	uint8_t n = 0;
	for (uint8_t i = 0; i < pt->nsrcs; i++) {
		bool done = false;
		for (uint32_t k = 0; k < f->nq && !done; k++)
			done = f->q[k] == pt->srcs[i];
		if (!done)
			pt->srcs[n++] = pt->srcs[i];
	}
	pt->nsrcs = n;
	for (uint32_t k = 0; k < f->nq; k++)
		if (f->got[k] && !dgi_part_node_add(pt->taken, &pt->ntaken, f->q[k])) {
			/* the oldest goes: if it asks again it is fetched again */
			memmove(pt->taken, pt->taken + 1, (DGI_PART_SRCS - 1) * sizeof(pt->taken[0]));
			pt->taken[DGI_PART_SRCS - 1] = f->q[k];
		}
	return n;
}

/* The servers of the current topology other than this node, up to cap
 * (more: cap + 1), and its version. */
static uint32_t servers_now(dgi_grid *g, dg_node_id *ids, uint32_t cap, int64_t *version)
{
	uint32_t n = 0;
	pthread_mutex_lock(&g->mu);
	*version = g->topo != NULL ? g->topo->version : 0;
	for (uint32_t i = 0; g->topo != NULL && i < g->topo->count && n <= cap; i++) {
		const dg_topology_node *tn = &g->topo->nodes[i];
		if ((tn->attrs & DG_NODE_CLIENT) || tn->id == g->self)
			continue;
		if (n < cap)
			ids[n] = tn->id;
		n++;
	}
	pthread_mutex_unlock(&g->mu);
	return n;
}

/* Fetches one partition from its supplier and the sources (above): a
 * MOVING one, which then becomes OWNING, or an OWNING one that is not
 * whole and has sources (it stays OWNING).  The copy is whole when its
 * supplier owned the partition under the previous topology and held it
 * whole (the rest is not needed then), or when it was not broken, no
 * source was gone, no page came from a broken copy and no source was
 * added meanwhile.  DG_OK when done. */
static dg_err fetch_part(dgi_grid *g, dg_cache *c, uint32_t part, uint64_t gen)
{
	dgi_part *pt = &c->parts[part];
	struct fetch f = { .g = g, .c = c, .part = part, .gen = gen, .a = { g, c, part, 0, 0 } };
	dg_node_id all[FETCH_NODES];
	bool all_own[FETCH_NODES];
	int64_t all_ver = 0, aff_ver = 0;
	uint32_t nall = 0;
	dgi_part_lock(pt);
	bool loaded = pt->reloaded; /* (set at start only: read again below) */
	dgi_part_unlock(pt);
	if (loaded) { /* (grid->mu before a partition's, never inside) */
		nall = servers_now(g, all, FETCH_NODES, &all_ver);
		dgi_epoch_enter(); /* (cache_int.h, "Lifetime") */
		dgi_aff *aff = atomic_load(&c->aff);
		aff_ver = aff != NULL ? aff->topver : -1;
		for (uint32_t i = 0; i < nall && i < FETCH_NODES; i++)
			all_own[i] = aff != NULL && dgi_aff_role(aff, part, all[i]) >= 0;
		dgi_epoch_leave();
	}
	dgi_part_lock(pt);
	int st = atomic_load(&pt->state);
	/* a copy loaded from disk merges every other server's ("Copies
	 * loaded from disk"), once the topology is active */
	bool reload = st == P_MOVING && pt->reloaded;
	f.reload = reload;
	if (reload && (!atomic_load(&g->active) || pt->state_topver != all_ver ||
	    aff_ver != all_ver)) {
		dgi_part_unlock(pt);
		return atomic_load(&g->active) ? DG_ERR_STATE : DG_OK;
	}
	dg_node_id sup = st == P_MOVING ? pt->supplier : 0;
	bool sup_owner = st == P_MOVING && pt->sup_owner;
	bool repair = st == P_OWNING && !atomic_load(&pt->whole) && pt->nsrcs > 0;
	dg_node_id alts[DGI_PART_ALTS];
	uint8_t nalts = sup_owner ? pt->nalts : 0;
	if (nalts > 0)
		memcpy(alts, pt->alts, nalts * sizeof(alts[0]));
	f.topver = pt->state_topver;
	fetch_queue(&f, sup);
	for (uint8_t i = 0; i < pt->nsrcs; i++)
		fetch_queue(&f, pt->srcs[i]);
	/* the owners first: the first whole copy among theirs is the
	 * partition (a rented copy says whole too, but only as of when its
	 * node stopped owning it — a server keeps the copies it handed over
	 * at the joins for the rent grace, stale since) */
	for (int own = 1; reload && own >= 0; own--)
		for (uint32_t i = 0; i < nall && i < FETCH_NODES; i++)
			if (all_own[i] == (own != 0))
				fetch_queue(&f, all[i]);
	for (uint32_t k = 0; reload && k < f.nq; k++)
		for (uint32_t i = 0; i < nall && i < FETCH_NODES; i++)
			f.own[k] |= f.q[k] == all[i] && all_own[i];
	dgi_part_unlock(pt);
	if (reload && nall > FETCH_NODES)
		dgi_log("warn", "REBALANCE-SOURCES", "cache=\"%s\" partition=%u servers=%u "
		    "why=\"a copy loaded from disk merges the copies of the first %d other servers only\"",
		    c->cfg.name, part, nall, FETCH_NODES);
	if (st != P_MOVING && !repair)
		return DG_OK;
	dg_buf_init(&f.reply);
	dg_err e = DG_OK;
	uint32_t gone = 0;
	bool sup_whole = false;
	for (uint32_t i = 0; i < f.nq && e == DG_OK && !sup_whole; i++) {
		bool whole = false;
		if (!dgi_grid_has_server(g, f.q[i]))
			gone++; /* left the cluster: its copy went with it */
		else if ((e = fetch_from(&f, f.q[i], f.own[i], &whole)) == DG_OK)
			f.got[i] = true;
		/* (a merge of loaded copies: an owner's whole copy is the
		 * partition — it merged before this node came back, or the
		 * cluster went on without this node — and the others add
		 * nothing) */
		sup_whole = f.got[i] && whole && ((f.q[i] == sup && sup_owner) || (reload && f.own[i]));
	}
	/* the supplier's copy was not whole: another owner of the previous
	 * topology that holds it whole has it all (alts) */
	for (uint8_t i = 0; i < nalts && e == DG_OK && !sup_whole && f.got[0]; i++) {
		bool whole = false;
		if (dgi_grid_has_server(g, alts[i]) && fetch_from(&f, alts[i], false, &whole) == DG_OK &&
		    whole)
			sup_whole = true;
	}
	atomic_fetch_add_explicit(&c->rebal_bytes, f.a.bytes, memory_order_relaxed);
	dg_buf_free(&f.reply);
	if (e != DG_OK)
		return e;
	bool whole = false, lost = false;
	dgi_part_lock(pt);
	if (atomic_load(&pt->state) != st || pt->state_topver != f.topver ||
	    (st == P_MOVING && pt->supplier != sup)) {
		e = DG_ERR_STATE;
	} else {
		/* (a server that left during a merge of loaded copies took
		 * its copy along, as one that never came back: no loss) */
		pt->broken |= (gone > 0 && !reload) || f.broken;
		uint8_t left = sources_done(pt, &f);
		whole = sup_whole || (!pt->broken && left == 0);
		if (f.a.replace_below > 0) {
			/* the whole copy came in full: what it lacks goes, or
			 * (cut short) the marks do */
			bool full = false;
			for (uint32_t i = 0; i < f.nq; i++)
				full |= f.q[i] == f.replace_from && f.got[i];
			if (full && sup_whole)
				sweep_loaded(g, c, part, pt, f.a.replace_below);
			else
				clear_marks(pt);
		}
		atomic_store(&pt->whole, whole);
		if (whole) {
			pt->broken = false;
			pt->nsrcs = pt->ntaken = 0;
			pt->reloaded = false;
		}
		if (st == P_MOVING && !whole && pt->broken) {
			/* what a source that left held is lost with it: the
			 * partition is LOST until dg_cache_reset_lost (then it
			 * owns what it has and completes itself from the rented
			 * copies that ask) — never a partial copy served as whole */
			lost = !atomic_exchange_explicit(&c->lost[part], 1, memory_order_relaxed);
			atomic_store(&pt->state, P_LOST);
			atomic_fetch_add_explicit(&c->rebal_parts_done, 1, memory_order_relaxed);
		} else if (st == P_MOVING) {
			atomic_store(&pt->state, P_OWNING); /* tombstones stay until they expire */
			atomic_fetch_add_explicit(&c->rebal_parts_done, 1, memory_order_relaxed);
		}
	}
	dgi_part_unlock(pt);
	if (lost) {
		dgi_log("warn", "PARTITION-LOST", "cache=\"%s\" partition=%u why=\"a source of its copy left before it was fetched\"",
		    c->cfg.name, part);
		dgi_grid_event(g, DG_EVENT_PARTITION_LOST, c->cfg.name, part);
	}
	if (e == DG_OK && gone > 0 && !whole)
		dgi_log("warn", "REBALANCE-SOURCE-GONE", "cache=\"%s\" partition=%u nodes=%u why=\"a node holding part of it left before it was fetched: completed from the rented copies that ask\"",
		    c->cfg.name, part, gone);
	return e;
}

struct todo {
	uint32_t cache_id;
	uint32_t part;
};

struct collect_ctx {
	struct todo *t;
	size_t n, cap;
};

static void collect(void *ctx, uint32_t key, void *value)
{
	struct collect_ctx *cc = ctx;
	dg_cache *c = value;
	(void)key;
	if (atomic_load(&c->dead))
		return;
	for (uint32_t p = 0; p < c->cfg.partitions; p++) {
		dgi_part *pt = &c->parts[p];
		int st = atomic_load(&pt->state);
		if (st == P_OWNING && !atomic_load(&pt->whole)) {
			/* a repair, when some node offered its copy */
			dgi_part_lock(pt);
			bool srcs = pt->nsrcs > 0;
			dgi_part_unlock(pt);
			if (!srcs)
				continue;
		} else if (st != P_MOVING) {
			continue;
		} else {
			c->rebal_pending = true;
			if (!atomic_load(&c->g->active)) {
				/* a loaded copy waits for an active topology */
				dgi_part_lock(pt);
				bool wait = pt->reloaded;
				dgi_part_unlock(pt);
				if (wait)
					continue;
			}
		}
		if (cc->n == cc->cap) {
			size_t nc = cc->cap ? cc->cap * 2 : 256;
			struct todo *t = dgi_realloc(cc->t, nc * sizeof(*t));
			if (t == NULL)
				return;
			cc->t = t;
			cc->cap = nc;
		}
		cc->t[cc->n++] = (struct todo){ c->id, p };
	}
}

/* A cache whose partitions were moving and now all own or are lost: log
 * it and raise DG_EVENT_REBALANCE_DONE (rebalancer thread). */
static void rebalance_done_check(void *ctx, uint32_t key, void *value)
{
	dg_cache *c = value;
	(void)key;
	(void)ctx;
	if (atomic_load(&c->dead))
		return;
	bool moving = false;
	for (uint32_t p = 0; p < c->cfg.partitions && !moving; p++)
		moving = atomic_load(&c->parts[p].state) == P_MOVING;
	if (moving) {
		c->rebal_pending = true;
		return;
	}
	if (!c->rebal_pending)
		return;
	c->rebal_pending = false;
	dgi_log("info", "REBALANCE-DONE", "cache=\"%s\" version=%lld partitions=%llu bytes=%llu",
	    c->cfg.name, (long long)atomic_load(&c->g->topver),
	    (unsigned long long)atomic_load(&c->rebal_parts_done),
	    (unsigned long long)atomic_load(&c->rebal_bytes));
	dgi_grid_event(c->g, DG_EVENT_REBALANCE_DONE, c->cfg.name, 0);
}

void *dgi_rebalancer(void *arg)
{
	dgi_thread_name("dg-rebalancer");
	dgi_grid *g = arg;
	struct collect_ctx cc = { NULL, 0, 0 };
	for (;;) {
		pthread_mutex_lock(&g->mu);
		if (g->stopping) {
			pthread_mutex_unlock(&g->mu);
			break;
		}
		uint64_t gen = g->rebal_gen;
		if (atomic_load(&dgi_rebalance_paused)) { /* a test holds new owners back */
			struct timespec ts;
			dgi_abstime_in(&ts, 10);
			pthread_cond_timedwait(&g->cv, &g->mu, &ts);
			pthread_mutex_unlock(&g->mu);
			continue;
		}
		pthread_mutex_unlock(&g->mu);
		cc.n = 0;
		/* sections (cache_int.h, "Lifetime"): one per step, none while
		 * this thread waits for work */
		dgi_epoch_enter();
		dgi_intmap_each(&g->caches, collect, &cc);
		dgi_epoch_leave();
		size_t failed = 0, full = 0;
		dg_err last = DG_OK;
		for (size_t i = 0; i < cc.n; i++) {
			dgi_epoch_enter();
			dg_cache *c = dgi_grid_cache(g, cc.t[i].cache_id);
			dg_err e = c != NULL ? fetch_part(g, c, cc.t[i].part, gen) : DG_OK;
			dgi_epoch_leave();
			if (e == DG_ERR_STATE)
				break; /* the topology moved on: collect again */
			if (e == DG_ERR_STORAGE_FULL) {
				full++; /* this node's own store could not take a page */
			} else if (e != DG_OK) {
				failed++;
				last = e;
			}
		}
		if (failed > 0) /* (err: the last failure's — a supplier's answer too) */
			dgi_log("info", "REBALANCE-RETRY", "partitions=%zu why=\"a supplier was not ready "
			    "or unreachable\" err=\"%s\"", failed, dg_strerror(last));
		uint32_t quiet;
		if (full > 0 && dgi_lograte_due(&g->lr_rebal_full, dgi_now_ms(), 10000, &quiet))
			dgi_log("warn", "REBALANCE-STORAGE-FULL", "partitions=%zu repeated=%u why=\"this "
			    "node's persistent storage is full: the partitions cannot move here; asked "
			    "again every second (raise --storage-map-size, or free space)\"", full, quiet);
		dgi_epoch_enter();
		dgi_intmap_each(&g->caches, rebalance_done_check, NULL);
		dgi_epoch_leave();
		pthread_mutex_lock(&g->mu);
		if (!g->stopping && (cc.n == 0 || g->rebal_gen == gen)) {
			/* nothing moving, or retry failures after a pause */
			struct timespec ts;
			/* (a full store: a second, not 50 ms — a page's LMDB
			 * write fails the same way until space is freed) */
			dgi_abstime_in(&ts, cc.n == 0 || (full > 0 && failed == 0) ? 1000 : 50);
			if (g->rebal_gen == gen)
				pthread_cond_timedwait(&g->cv, &g->mu, &ts);
		}
		pthread_mutex_unlock(&g->mu);
	}
	dgi_free(cc.t);
	return NULL;
}

/* ---- size, clear, lost reset ---- */

static uint64_t local_primary_count(dgi_grid *g, dg_cache *c)
{
	dgi_aff *aff = atomic_load(&c->aff);
	uint64_t n = 0;
	for (uint32_t p = 0; aff != NULL && p < c->cfg.partitions; p++) {
		if (dgi_aff_owner(aff, p, 0) != g->self)
			continue;
		dgi_part_lock(&c->parts[p]);
		n += c->parts[p].live;
		dgi_part_unlock(&c->parts[p]);
	}
	return n;
}

static void local_clear(dgi_grid *g, dg_cache *c)
{
	for (uint32_t p = 0; p < c->cfg.partitions; p++) {
		dgi_part_lock(&c->parts[p]);
		dgi_part_clear(&c->parts[p]);
		dgi_part_unlock(&c->parts[p]);
	}
	if (c->cfg.persistence && g->ps != NULL)
		dgi_pstore_drop(g->ps, c->id, UINT32_MAX);
}

static void local_reset_lost(dgi_grid *g, dg_cache *c)
{
	pthread_mutex_lock(&g->mu);
	for (uint32_t p = 0; p < c->cfg.partitions; p++) {
		if (!atomic_load_explicit(&c->lost[p], memory_order_relaxed))
			continue;
		atomic_store_explicit(&c->lost[p], 0, memory_order_relaxed);
		dgi_part_lock(&c->parts[p]);
		if (atomic_load(&c->parts[p].state) == P_LOST) {
			/* what it has: whole, unless it is a broken partial copy
			 * (its sources left): that one still completes itself
			 * from the rented copies that ask it */
			atomic_store(&c->parts[p].state, P_OWNING);
			if (!c->parts[p].broken) {
				atomic_store(&c->parts[p].whole, true);
				c->parts[p].nsrcs = c->parts[p].ntaken = 0;
			}
		}
		dgi_part_unlock(&c->parts[p]);
	}
	pthread_mutex_unlock(&g->mu);
}

static void on_cache_op(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	dgi_grid *g = ctx;
	const dgi_msg_ack *m = in->body;
	dg_cache *c = dgi_grid_cache(g, (uint32_t)m->res);
	dgi_msg_ack r = { DG_OK, 0 };
	if (c == NULL)
		r.res = DG_ERR_NOT_FOUND;
	else if (in->type == DGI_MSG_SIZE)
		r.value = (int64_t)local_primary_count(g, c);
	else if (in->type == DGI_MSG_CLEAR)
		local_clear(g, c);
	else
		local_reset_lost(g, c);
	dg_tp_reply(tp, in, DGI_MSG_ACK, &r);
}

/* The request to every node of the topology (this one locally). */
static dg_err all_nodes(dg_cache *c, dg_msg_type type, int64_t *sum)
{
	dgi_grid *g = c->g;
	dg_node_id ids[1024];
	uint32_t n = 0;
	pthread_mutex_lock(&g->mu);
	for (uint32_t i = 0; g->topo != NULL && i < g->topo->count && n < 1024; i++)
		if (g->topo->nodes[i].id != g->self)
			ids[n++] = g->topo->nodes[i].id;
	pthread_mutex_unlock(&g->mu);
	if (type == DGI_MSG_SIZE)
		*sum += (int64_t)local_primary_count(g, c);
	else if (type == DGI_MSG_CLEAR)
		local_clear(g, c);
	else
		local_reset_lost(g, c);
	for (uint32_t i = 0; i < n; i++) {
		dgi_msg_ack m = { c->id, 0 }, r = { 0, 0 };
		dg_err e = dg_tp_call(g->tp, ids[i], type, &m, g->cfg.request_timeout_ms, &r, NULL);
		if (e == DG_OK)
			e = (dg_err)r.res;
		if (e == DG_ERR_CONN_BROKEN || e == DG_ERR_UNREACHABLE)
			continue;
		if (e != DG_OK)
			return e;
		if (sum != NULL)
			*sum += r.value;
	}
	return DG_OK;
}

/* all_nodes in a section (cache_int.h, "Lifetime"); DG_ERR_CLOSED for a
 * destroyed cache. */
static dg_err all_nodes_live(dg_cache *c, dg_msg_type type, int64_t *sum)
{
	dgi_epoch_enter();
	dg_err e = atomic_load(&c->dead) ? DG_ERR_CLOSED :
	    dg_member_segmented(c->g->m) ? DG_ERR_SEGMENTED : all_nodes(c, type, sum);
	dgi_epoch_leave();
	return e;
}

dg_err dg_cache_size(dg_cache *c, uint64_t *size)
{
	if (c == NULL || size == NULL)
		return DG_ERR_INVAL;
	int64_t sum = 0;
	dg_err e = all_nodes_live(c, DGI_MSG_SIZE, &sum);
	*size = (uint64_t)sum;
	return e;
}

dg_err dg_cache_clear(dg_cache *c)
{
	if (c == NULL)
		return DG_ERR_INVAL;
	return all_nodes_live(c, DGI_MSG_CLEAR, NULL);
}

dg_err dg_cache_reset_lost(dg_cache *c)
{
	if (c == NULL)
		return DG_ERR_INVAL;
	return all_nodes_live(c, DGI_MSG_LOST_RESET, NULL);
}

size_t dg_cache_lost_partitions(dg_cache *c, uint32_t *out, size_t cap)
{
	size_t n = 0;
	if (c == NULL)
		return 0;
	dgi_epoch_enter();
	for (uint32_t p = 0; !atomic_load(&c->dead) && p < c->cfg.partitions; p++)
		if (atomic_load_explicit(&c->lost[p], memory_order_relaxed)) {
			if (n < cap)
				out[n] = p;
			n++;
		}
	dgi_epoch_leave();
	return n;
}

dg_err dg_cache_get_metrics(dg_cache *c, dg_cache_metrics *out)
{
	if (c == NULL || out == NULL)
		return DG_ERR_INVAL;
	memset(out, 0, sizeof(*out));
	dgi_ctr_totals t;
	dgi_ctrs_total(c, &t); /* every thread's block, summed */
	out->puts = t.puts;
	out->hits = t.hits;
	out->misses = t.misses;
	out->gets = out->hits + out->misses; /* reads that got an answer */
	out->removes = t.removes;
	out->remaps = atomic_load(&c->remaps);
	out->rebalance_partitions_done = atomic_load(&c->rebal_parts_done);
	out->rebalance_bytes = atomic_load(&c->rebal_bytes);
	dgi_epoch_enter(); /* a destroyed cache's partitions: none (freed) */
	dgi_aff *aff = atomic_load(&c->aff);
	for (uint32_t p = 0; !atomic_load(&c->dead) && p < c->cfg.partitions; p++) {
		dgi_part *pt = &c->parts[p];
		dgi_part_lock(pt);
		int st = atomic_load(&pt->state);
		out->entries += pt->live;
		out->bytes += pt->bytes;
		if (aff != NULL && dgi_aff_owner(aff, p, 0) == c->g->self)
			out->primary_entries += pt->live;
		out->partitions_repairing += st == P_OWNING && !atomic_load(&pt->whole) &&
		    pt->nsrcs > 0;
		dgi_part_unlock(pt);
		out->partitions_owning += st == P_OWNING;
		out->partitions_moving += st == P_MOVING;
		out->partitions_lost += st == P_LOST;
	}
	dgi_epoch_leave();
	/* after the walk: the sweeper adds what it removed from a partition
	 * before unlocking it, so every entry missing from entries above is
	 * counted here (read first, a sweep running ahead of the walk showed
	 * entries gone and not expired) */
	out->expired = atomic_load(&c->expired);
	out->rebalance_partitions_left = out->partitions_moving;
	return DG_OK;
}

dg_err dg_cache_wait_rebalanced(dg_cache *c, uint32_t timeout_ms)
{
	if (c == NULL)
		return DG_ERR_INVAL;
	uint64_t deadline = dgi_now_ms() + timeout_ms;
	for (;;) {
		dgi_epoch_enter();
		bool dead = atomic_load(&c->dead);
		bool moving = atomic_load(&c->aff) == NULL;
		for (uint32_t p = 0; !dead && p < c->cfg.partitions && !moving; p++)
			moving = atomic_load(&c->parts[p].state) == P_MOVING;
		dgi_epoch_leave();
		if (dead)
			return DG_ERR_CLOSED;
		if (!moving)
			return DG_OK;
		if (dgi_now_ms() >= deadline)
			return DG_ERR_TIMEOUT;
		struct timespec ts = { 0, 10 * 1000000L };
		nanosleep(&ts, NULL);
	}
}

/* ---- scan ---- */

struct dg_scan {
	dg_cache *c;
	uint32_t page;
	uint32_t part;
	uint64_t after;
	bool first;         /* the next page of `part` is its first */
	bool more;          /* the current partition has more pages */
	dg_buf buf;         /* the current page (a SCAN_RES list) */
	dg_reader r;
	uint32_t left;      /* entries left in the page */
	bool started;
};

dg_err dg_scan_open(dg_cache *c, uint32_t page_size, dg_scan **out)
{
	if (c == NULL || out == NULL)
		return DG_ERR_INVAL;
	dg_scan *s = dgi_calloc(1, sizeof(*s));
	if (s == NULL)
		return DG_ERR_NOMEM;
	s->c = c;
	s->page = page_size ? page_size : 256;
	s->first = true;
	dg_buf_init(&s->buf);
	*out = s;
	return DG_OK;
}

void dg_scan_close(dg_scan *s)
{
	if (s == NULL)
		return;
	dg_buf_free(&s->buf);
	dgi_free(s);
}

/* Fetches the next page of s->part from its primary (or locally). */
static dg_err scan_fetch(dg_scan *s)
{
	dg_cache *c = s->c;
	dgi_grid *g = c->g;
	uint64_t deadline = dgi_now_ms() + g->cfg.request_timeout_ms;
	for (;;) {
		if (atomic_load(&c->dead))
			return DG_ERR_CLOSED;
		if (dg_member_segmented(g->m))
			return DG_ERR_SEGMENTED;
		if (atomic_load_explicit(&c->lost[s->part], memory_order_relaxed))
			return DG_ERR_PARTITION_LOST;
		dgi_aff *aff = atomic_load(&c->aff);
		dg_node_id primary = aff ? dgi_aff_owner(aff, s->part, 0) : 0;
		dg_err e = DG_ERR_NOT_READY;
		s->buf.len = 0;
		if (primary == g->self &&
		    atomic_load(&c->parts[s->part].state) == P_OWNING &&
		    dg_member_serving(g->m) == DG_OK) {
			e = dgi_page_encode(g, c, s->part, s->after, s->first, s->page, false, true,
			    &s->buf);
		} else if (primary != 0) {
			dgi_msg_page_req m = { c->id, s->part, aff->topver, (int64_t)s->after, s->first,
				s->page };
			e = call_list(g, primary, DGI_MSG_SCAN, &m, &s->buf);
		}
		if (e == DG_OK) {
			struct page_head h;
			dg_reader_init(&s->r, g->reg, s->buf.data, s->buf.len);
			if ((e = page_head_read(&s->r, &h, NULL)) != DG_OK)
				return e;
			s->left = h.entries;
			s->more = h.more;
			s->after = h.last;
			s->first = false;
			return DG_OK;
		}
		if (e != DG_ERR_REMAP && e != DG_ERR_NOT_READY && e != DG_ERR_CONN_BROKEN &&
		    e != DG_ERR_UNREACHABLE)
			return e;
		if (dgi_now_ms() >= deadline)
			return DG_ERR_TIMEOUT;
		struct timespec ts = { 0, 10 * 1000000L };
		nanosleep(&ts, NULL);
	}
}

dg_err dg_scan_next(dg_scan *s, const uint8_t **key, size_t *klen, const uint8_t **val,
    size_t *vlen)
{
	if (s == NULL || key == NULL || klen == NULL || val == NULL || vlen == NULL)
		return DG_ERR_INVAL;
	while (s->left == 0) {
		if (s->started && !s->more) {
			s->part++;
			s->first = true;
			s->after = 0;
		}
		if (s->part >= s->c->cfg.partitions)
			return DG_ERR_NOT_FOUND;
		s->started = true;
		dgi_epoch_enter(); /* (cache_int.h, "Lifetime") */
		dg_err e = scan_fetch(s);
		dgi_epoch_leave();
		if (e != DG_OK)
			return e;
	}
	dg_bytes k, v;
	int64_t x;
	dg_err e;
	if ((e = dg_read_bytes(&s->r, &k, NULL)) != DG_OK ||
	    (e = dg_read_bytes(&s->r, &v, NULL)) != DG_OK)
		return e;
	for (int i = 0; i < DGI_PAGE_ENTRY_VALUES - 2; i++)
		if ((e = dg_read_i64(&s->r, &x)) != DG_OK)
			return e;
	s->left--;
	*key = k.ptr;
	*klen = k.len;
	*val = v.ptr;
	*vlen = v.len;
	return DG_OK;
}

static void on_push(dg_tp *tp, const dg_msg_in *in, void *ctx);
static void on_handoff(dg_tp *tp, const dg_msg_in *in, void *ctx);
static void on_owned(dg_tp *tp, const dg_msg_in *in, void *ctx);

void dgi_rebalance_register(dgi_grid *g)
{
	dg_tp_handle(g->tp, DGI_MSG_PUSH, on_push, g);
	dg_tp_handle(g->tp, DGI_MSG_OWNED, on_owned, g);
	dg_tp_handle(g->tp, DGI_MSG_HANDOFF, on_handoff, g);
	dg_tp_handle(g->tp, DGI_MSG_DEMAND, on_page_req, g);
	dg_tp_handle(g->tp, DGI_MSG_SCAN, on_page_req, g);
	dg_tp_handle(g->tp, DGI_MSG_SIZE, on_cache_op, g);
	dg_tp_handle(g->tp, DGI_MSG_CLEAR, on_cache_op, g);
	dg_tp_handle(g->tp, DGI_MSG_LOST_RESET, on_cache_op, g);
}

/* ---- graceful leave: handing over partitions held by this node alone ---- */

static void on_push(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	dgi_grid *g = ctx;
	const dgi_msg_push *m = in->body;
	dg_cache *c = dgi_grid_cache(g, (uint32_t)m->cache_id);
	dg_err e = DG_ERR_NOT_FOUND;
	if (c != NULL && m->part >= 0 && (uint64_t)m->part < c->cfg.partitions) {
		struct apply_ctx a = { g, c, (uint32_t)m->part, 0, 0 };
		struct page_head h;
		e = page_decode(g, &m->list, &h, &c->parts[a.part], apply_one, &a);
		dgi_part *pt = &c->parts[a.part];
		dgi_part_lock(pt);
		pt->rented_ms = dgi_now_ms(); /* held for the coming topology */
		/* a pusher that was not whole: the nodes holding what it lacked
		 * are where this copy, not whole either, finds the rest (the
		 * pusher is leaving) */
		bool take = e == DG_OK && !h.whole && !atomic_load(&pt->whole);
		pt->broken |= take && h.broken;
		for (uint8_t i = 0; take && i < h.nsrcs; i++)
			if (h.srcs[i] != g->self && !dgi_part_src_add(pt, h.srcs[i]))
				dgi_log("warn", "REBALANCE-SOURCES", "cache=\"%s\" partition=%u why=\"more than %d sources\"",
				    c->cfg.name, a.part, DGI_PART_SRCS);
		/* the last page (pages come in order, the pusher stops at the
		 * first failure): this copy now holds the pusher's, so the
		 * pusher is no source any more — its leaving breaks nothing */
		for (uint8_t i = 0; e == DG_OK && !h.more && i < pt->nsrcs; i++)
			if (pt->srcs[i] == in->from) {
				memmove(pt->srcs + i, pt->srcs + i + 1,
				    (size_t)(pt->nsrcs - i - 1) * sizeof(pt->srcs[0]));
				pt->nsrcs--;
				break;
			}
		dgi_part_unlock(pt);
		atomic_fetch_add_explicit(&c->rebal_bytes, a.bytes, memory_order_relaxed);
	}
	dgi_msg_ack r = { e, 0 };
	dg_tp_reply(tp, in, DGI_MSG_ACK, &r);
}

static void on_handoff(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	dgi_grid *g = ctx;
	const dgi_msg_push *m = in->body;
	dg_cache *c = dgi_grid_cache(g, (uint32_t)m->cache_id);
	dg_err e = c != NULL ? DG_OK : DG_ERR_NOT_FOUND;
	dg_reader r;
	uint32_t count = 0;
	if (c != NULL) {
		dg_reader_init(&r, g->reg, m->list.ptr, m->list.len);
		e = dg_read_begin(&r, DG_LIST, &count);
	}
	pthread_mutex_lock(&g->mu);
	for (uint32_t i = 0; e == DG_OK && i < count; i++) {
		int64_t p;
		if ((e = dg_read_i64(&r, &p)) == DG_OK && p >= 0 && (uint64_t)p < c->cfg.partitions)
			atomic_store_explicit(&c->handed[p], 1, memory_order_relaxed);
	}
	pthread_mutex_unlock(&g->mu);
	dgi_msg_ack ack = { e, 0 };
	dg_tp_reply(tp, in, DGI_MSG_ACK, &ack);
}

/* Hands one partition to `to`, page by page. */
static dg_err push_part(dgi_grid *g, dg_cache *c, uint32_t part, dg_node_id to, dg_buf *b)
{
	uint64_t after = 0;
	bool first = true, more = true;
	while (more) {
		b->len = 0;
		dg_err e = dgi_page_encode(g, c, part, after, first, g->cfg.rebalance_batch_bytes,
		    true, false, b);
		if (e != DG_OK)
			return e;
		dg_reader r;
		struct page_head h;
		dg_reader_init(&r, g->reg, b->data, b->len);
		if ((e = page_head_read(&r, &h, NULL)) != DG_OK)
			return e;
		more = h.more;
		after = h.last;
		first = false;
		dgi_msg_push body = { c->id, part, { b->data, (uint32_t)b->len } };
		dgi_msg_ack ack = { 0, 0 };
		e = dg_tp_call(g->tp, to, DGI_MSG_PUSH, &body, g->cfg.request_timeout_ms, &ack, NULL);
		if (e == DG_OK)
			e = (dg_err)ack.res;
		if (e != DG_OK)
			return e;
	}
	return DG_OK;
}

static uint32_t rent_push(dgi_grid *g, dg_cache *c, dg_buf *b);

struct leave_ctx {
	dgi_grid *g;
	dg_buf b, parts;
	size_t handed, rented;
};

/* Hands over one cache's partitions this node holds alone (in a section:
 * cache_int.h, "Lifetime"). */
static void leave_cache(struct leave_ctx *l, dg_cache *c)
{
	dgi_grid *g = l->g;
	l->rented += rent_push(g, c, &l->b);
	dgi_aff *aff = atomic_load(&c->aff);
	dgi_aff *next = dgi_grid_aff_without_self(g, c);
	if (aff == NULL || next == NULL || next->nnodes == 0) {
		dgi_aff_free(next);
		return; /* the last server: nothing to hand to */
	}
	uint32_t *handed = dgi_alloc(c->cfg.partitions * sizeof(uint32_t));
	uint32_t nh = 0;
	if (handed == NULL) {
		dgi_aff_free(next);
		return;
	}
	dg_writer w;
	l->parts.len = 0;
	for (uint32_t p = 0; p < c->cfg.partitions; p++) {
		if (dgi_aff_role(aff, p, g->self) < 0 || aff->copies > 1)
			continue; /* not ours, or other copies remain */
		dg_err e = push_part(g, c, p, dgi_aff_owner(next, p, 0), &l->b);
		if (e != DG_OK) {
			dgi_log("warn", "HANDOFF-FAIL", "cache=\"%s\" partition=%u err=\"%s\"",
			    c->cfg.name, p, dg_strerror(e));
			continue;
		}
		handed[nh++] = p;
	}
	dgi_aff_free(next);
	if (nh == 0) {
		dgi_free(handed);
		return;
	}
	/* every node learns these partitions were handed over, before
	 * the topology without this node reaches it */
	dg_writer_init(&w, g->reg, &l->parts);
	dg_write_list_begin(&w, nh);
	for (uint32_t k = 0; k < nh; k++)
		dg_write_i64(&w, handed[k]);
	dg_write_end(&w);
	dgi_free(handed);
	if (dg_writer_finish(&w) != DG_OK)
		return;
	dgi_msg_push body = { c->id, 0, { l->parts.data, (uint32_t)l->parts.len } };
	dg_topology *t = NULL;
	pthread_mutex_lock(&g->mu);
	if ((t = g->topo) != NULL)
		atomic_fetch_add(&t->refs, 1);
	pthread_mutex_unlock(&g->mu);
	for (uint32_t k = 0; t != NULL && k < t->count; k++) {
		if (t->nodes[k].id == g->self)
			continue;
		dgi_msg_ack ack = { 0, 0 };
		dg_tp_call(g->tp, t->nodes[k].id, DGI_MSG_HANDOFF, &body, g->cfg.request_timeout_ms,
		    &ack, NULL);
	}
	if (t != NULL)
		dg_topology_release(t);
	l->handed += nh;
}

static void leave_one(void *ctx, uint32_t key, void *value)
{
	dg_cache *c = value;
	(void)key;
	dgi_epoch_enter();
	if (!atomic_load(&c->dead))
		leave_cache(ctx, c);
	dgi_epoch_leave();
}

void dgi_grid_leave(dgi_grid *g)
{
	if (g->cfg.client)
		return;
	atomic_store(&g->leaving, true);
	struct leave_ctx l = { .g = g };
	dg_buf_init(&l.b);
	dg_buf_init(&l.parts);
	uint64_t t0 = dgi_now_ms();
	dgi_intmap_each(&g->caches, leave_one, &l); /* every cache, however many */
	dgi_log("info", "HANDOFF-DONE", "partitions=%zu rented=%zu ms=%llu", l.handed,
	    l.rented, (unsigned long long)(dgi_now_ms() - t0));
	dg_buf_free(&l.b);
	dg_buf_free(&l.parts);
}

/* ---- rented copies: dropped once every new owner has the partition ---- */

_Atomic uint32_t dgi_rent_grace_ms = 30000;
_Atomic bool dgi_rebalance_paused = false;

/* OWNED: which of the listed partitions this node OWNS and holds whole —
 * or, not whole, has taken the asker's copy of.  One it OWNS without
 * either takes the asker (which holds a rented copy) as a source to fetch
 * from (PROTOCOL.md, "Rebalancing").  Not answered
 * before this node has the asker's topology version: under an older one
 * its states are not the ones the asker counts on. */
static void on_owned(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	dgi_grid *g = ctx;
	const dgi_msg_push *m = in->body;
	dg_cache *c = dgi_grid_cache(g, (uint32_t)m->cache_id);
	if (c == NULL) {
		dg_tp_reply_error(tp, in, DG_ERR_NOT_FOUND);
		return;
	}
	if (atomic_load(&g->topver) < m->part) {
		dg_tp_reply_error(tp, in, DG_ERR_NOT_READY);
		return;
	}
	dg_reader r;
	uint32_t count = 0;
	dg_reader_init(&r, g->reg, m->list.ptr, m->list.len);
	dg_err e = dg_read_begin(&r, DG_LIST, &count);
	if (e == DG_OK && count > c->cfg.partitions)
		e = DG_ERR_INVAL;
	int64_t *own = NULL;
	uint32_t n = 0;
	if (e == DG_OK && count > 0 && (own = dgi_alloc(count * sizeof(*own))) == NULL)
		e = DG_ERR_NOMEM;
	bool offered = false;
	for (uint32_t i = 0; e == DG_OK && i < count; i++) {
		int64_t p;
		if ((e = dg_read_i64(&r, &p)) != DG_OK || p < 0 || (uint64_t)p >= c->cfg.partitions ||
		    atomic_load(&c->parts[p].state) != P_OWNING)
			continue;
		dgi_part *pt = &c->parts[p];
		if (atomic_load(&pt->whole)) {
			own[n++] = p;
			continue;
		}
		/* owned but not whole: yes if it took the asker's copy, else the
		 * asker's copy may hold what it lacks (PROTOCOL.md, "Rebalancing") */
		dgi_part_lock(pt);
		bool yes = atomic_load(&pt->whole);
		for (uint8_t k = 0; !yes && k < pt->ntaken; k++)
			yes = pt->taken[k] == in->from;
		if (yes)
			own[n++] = p;
		else if (atomic_load(&pt->state) == P_OWNING && in->from != g->self)
			offered |= dgi_part_src_add(pt, in->from);
		dgi_part_unlock(pt);
	}
	if (offered) { /* the rebalancer fetches from it */
		pthread_mutex_lock(&g->mu);
		pthread_cond_broadcast(&g->cv);
		pthread_mutex_unlock(&g->mu);
	}
	dg_buf b;
	dg_buf_init(&b);
	if (e == DG_OK) {
		dg_writer w;
		dg_writer_init(&w, g->reg, &b);
		dg_write_list_begin(&w, n);
		for (uint32_t i = 0; i < n; i++)
			dg_write_i64(&w, own[i]);
		dg_write_end(&w);
		e = dg_writer_finish(&w);
	}
	if (e == DG_OK) {
		dg_msg_raw body = { { b.data, (uint32_t)b.len } };
		e = dg_tp_reply(tp, in, DGI_MSG_OWNED_RES, &body);
	}
	if (e != DG_OK)
		dg_tp_reply_error(tp, in, e);
	dg_buf_free(&b);
	dgi_free(own);
}

/* One sweep of a cache's rented partitions (rent_check): the ones it
 * holds without owning them, rented for long enough (cand, sorted); their
 * owners under the current affinity as a bit per candidate and node of it
 * (owned: candidate k, node index j at bit k * nnodes + j), how many there
 * are besides this node (need) and how many of those answered that they
 * OWN the partition (got).  Every owner is asked, however many (a
 * REPLICATED cache's partitions are owned by every server), all at once:
 * the round takes one request timeout at most.  What the questions need is
 * copied first, so they go out while no affinity is held. */
struct rent_check {
	int64_t topver;             /* the affinity's version */
	uint32_t nc, nnodes;
	uint32_t *cand;             /* nc */
	uint16_t *need, *got;       /* nc each (need: owners but this node) */
	uint8_t *owned, *said;      /* nc * nnodes bits each (said: counted) */
	dg_node_id *ids;            /* nnodes: the affinity's nodes */
};

static bool bit(const uint8_t *b, size_t i)
{
	return (b[i / 8] >> (i % 8)) & 1;
}

static void bit_set(uint8_t *b, size_t i)
{
	b[i / 8] |= (uint8_t)(1u << (i % 8));
}

static void rent_check_free(struct rent_check *rc)
{
	dgi_free(rc->cand);
	dgi_free(rc->need);
	dgi_free(rc->owned);
	dgi_free(rc->ids);
	memset(rc, 0, sizeof(*rc));
}

static bool rent_confirmed(const struct rent_check *rc, uint32_t k)
{
	return rc->need[k] != 0 && rc->got[k] >= rc->need[k];
}

/* A copy of a partition this node does not own that its owners may still
 * need (partition locked): entries, or — a copy that was not whole, even
 * empty — the sources of what it lacked. */
static bool rented(const dgi_part *pt)
{
	return atomic_load(&pt->state) == P_NONE &&
	    (pt->count > 0 || (!atomic_load(&pt->whole) && pt->nsrcs > 0));
}

/* Node j of the affinity owns candidate k. */
static bool rent_owner(const struct rent_check *rc, uint32_t k, uint32_t j)
{
	return bit(rc->owned, (size_t)k * rc->nnodes + j);
}

/* The candidates and their owners, read in a section (false: nothing
 * rented that long, the cache is gone, or no memory). */
static bool rent_collect(dgi_grid *g, dg_cache *c, uint64_t grace, struct rent_check *rc)
{
	uint32_t parts = c->cfg.partitions;
	memset(rc, 0, sizeof(*rc));
	dgi_epoch_enter();
	for (uint32_t p = 0; p < parts && !atomic_load(&c->dead); p++) {
		dgi_part *pt = &c->parts[p];
		if (atomic_load(&pt->state) != P_NONE)
			continue; /* owned: no lock taken */
		dgi_part_lock(pt);
		uint64_t t = dgi_now_ms(); /* rented_ms may be newer than an earlier read */
		bool due = rented(pt) && t >= pt->rented_ms && t - pt->rented_ms >= grace;
		dgi_part_unlock(pt);
		if (!due)
			continue;
		if (rc->cand == NULL && (rc->cand = dgi_alloc(parts * sizeof(*rc->cand))) == NULL)
			break;
		rc->cand[rc->nc++] = p;
	}
	const dgi_aff *aff = atomic_load(&c->dead) ? NULL : atomic_load(&c->aff);
	bool ok = rc->nc > 0 && aff != NULL && aff->nnodes > 0;
	size_t bits = ok ? ((size_t)rc->nc * aff->nnodes + 7) / 8 : 0;
	if (ok) {
		rc->topver = aff->topver;
		rc->nnodes = aff->nnodes;
		ok = (rc->need = dgi_calloc(2 * (size_t)rc->nc, sizeof(*rc->need))) != NULL &&
		    (rc->owned = dgi_calloc(2, bits)) != NULL &&
		    (rc->ids = dgi_alloc(aff->nnodes * sizeof(*rc->ids))) != NULL;
	}
	if (ok) {
		rc->got = rc->need + rc->nc;
		rc->said = rc->owned + bits;
		memcpy(rc->ids, aff->nodes, aff->nnodes * sizeof(*rc->ids));
		for (uint32_t k = 0; k < rc->nc; k++)
			for (uint32_t i = 0; i < aff->copies; i++) {
				uint16_t j = aff->owners[(size_t)rc->cand[k] * aff->copies + i];
				if (j == UINT16_MAX || aff->nodes[j] == g->self ||
				    rent_owner(rc, k, j))
					continue;
				bit_set(rc->owned, (size_t)k * rc->nnodes + j);
				rc->need[k]++;
			}
	}
	dgi_epoch_leave();
	if (!ok)
		rent_check_free(rc);
	return ok;
}

/* The questions of one round in flight: every answer (or failure) comes
 * to on_owned_res; the sweeper waits for the last. */
struct rent_round {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint32_t left;              /* answers to come */
	struct rent_check *rc;
	dgi_grid *g;
};

struct rent_q {
	struct rent_round *r;
	uint32_t node;              /* index in rc->ids */
};

static void on_owned_res(void *ctx, dg_err err, const dg_msg_in *reply)
{
	struct rent_q *q = ctx;
	struct rent_round *r = q->r;
	struct rent_check *rc = r->rc;
	dg_reader rd;
	uint32_t count = 0;
	if (err == DG_OK) {
		const dg_msg_raw *m = reply->body;
		dg_reader_init(&rd, r->g->reg, m->list.ptr, m->list.len);
		if (dg_read_begin(&rd, DG_LIST, &count) != DG_OK)
			count = 0; /* asked again at the next sweep */
	}
	pthread_mutex_lock(&r->mu);
	for (uint32_t i = 0; i < count; i++) {
		int64_t p;
		if (dg_read_i64(&rd, &p) != DG_OK)
			break;
		uint32_t lo = 0, hi = rc->nc; /* cand is sorted */
		while (lo < hi) {
			uint32_t mid = (lo + hi) / 2;
			if (rc->cand[mid] < p)
				lo = mid + 1;
			else
				hi = mid;
		}
		size_t at = (size_t)lo * rc->nnodes + q->node;
		if (lo == rc->nc || rc->cand[lo] != p || !bit(rc->owned, at) || bit(rc->said, at))
			continue; /* not asked of it, or said twice */
		bit_set(rc->said, at);
		rc->got[lo]++;
	}
	if (--r->left == 0)
		pthread_cond_signal(&r->cv);
	pthread_mutex_unlock(&r->mu);
}

/* Asks every owner of the candidates, at once, which of them it OWNS
 * under rc->topver (OWNED), and counts the yeses in rc->got. */
static void rent_ask_all(dgi_grid *g, dg_cache *c, struct rent_check *rc)
{
	struct rent_q *qs = dgi_alloc(rc->nnodes * sizeof(*qs));
	if (qs == NULL)
		return; /* asked again at the next sweep */
	struct rent_round r = { .left = 1, .rc = rc, .g = g };
	pthread_mutex_init(&r.mu, NULL);
	pthread_cond_init(&r.cv, NULL);
	dg_buf list;
	dg_buf_init(&list);
	for (uint32_t j = 0; j < rc->nnodes; j++) {
		uint32_t n = 0;
		for (uint32_t k = 0; k < rc->nc; k++)
			n += rent_owner(rc, k, j);
		if (n == 0)
			continue;
		dg_writer w;
		list.len = 0;
		dg_writer_init(&w, g->reg, &list);
		dg_write_list_begin(&w, n);
		for (uint32_t k = 0; k < rc->nc; k++)
			if (rent_owner(rc, k, j))
				dg_write_i64(&w, rc->cand[k]);
		dg_write_end(&w);
		if (dg_writer_finish(&w) != DG_OK)
			continue;
		qs[j] = (struct rent_q){ &r, j };
		pthread_mutex_lock(&r.mu);
		r.left++;
		pthread_mutex_unlock(&r.mu);
		/* (the body is encoded at once: list is free again on return) */
		dgi_msg_push body = { c->id, rc->topver, { list.data, (uint32_t)list.len } };
		if (dg_tp_request(g->tp, rc->ids[j], DGI_MSG_OWNED, &body, g->cfg.request_timeout_ms,
		    on_owned_res, &qs[j]) != DG_OK)
			on_owned_res(&qs[j], DG_ERR_UNREACHABLE, NULL);
	}
	dg_buf_free(&list);
	pthread_mutex_lock(&r.mu);
	r.left--; /* this loop's own count */
	while (r.left > 0) /* each request ends by its timeout at the latest */
		pthread_cond_wait(&r.cv, &r.mu);
	pthread_mutex_unlock(&r.mu);
	pthread_cond_destroy(&r.cv);
	pthread_mutex_destroy(&r.mu);
	dgi_free(qs);
}

/* false: nothing rented that long (or no memory). */
static bool rent_check(dgi_grid *g, dg_cache *c, uint64_t grace, struct rent_check *rc)
{
	if (!rent_collect(g, c, grace, rc))
		return false;
	pthread_mutex_lock(&g->mu);
	bool stopping = g->stopping;
	pthread_mutex_unlock(&g->mu);
	if (!stopping)
		rent_ask_all(g, c, rc);
	return true;
}

static void rent_sweep_cache(dgi_grid *g, dg_cache *c, uint64_t grace)
{
	struct rent_check rc;
	if (!rent_check(g, c, grace, &rc))
		return;
	uint32_t dropped = 0;
	dgi_epoch_enter();
	for (uint32_t k = 0; k < rc.nc && !atomic_load(&c->dead); k++) {
		if (!rent_confirmed(&rc, k))
			continue; /* no owner to take it, or one without it yet */
		dgi_part *pt = &c->parts[rc.cand[k]];
		bool drop = false;
		dgi_part_lock(pt);
		/* not owned again, or pushed to, meanwhile; same affinity */
		uint64_t t = dgi_now_ms();
		const dgi_aff *aff = atomic_load(&c->aff);
		if (rented(pt) && t >= pt->rented_ms && t - pt->rented_ms >= grace &&
		    aff != NULL && aff->topver == rc.topver) {
			dgi_part_clear(pt);
			atomic_store(&pt->whole, false);
			pt->broken = pt->stale = false;
			pt->nsrcs = pt->ntaken = 0;
			/* under the lock, as every persisted write of the
			 * partition: none of a new ownership can slip between */
			if (c->cfg.persistence && g->ps != NULL)
				dgi_pstore_drop(g->ps, c->id, rc.cand[k]);
			drop = true;
		}
		dgi_part_unlock(pt);
		dropped += drop;
	}
	dgi_epoch_leave();
	if (dropped > 0)
		dgi_log("info", "RENT-DROPPED", "cache=\"%s\" partitions=%u", c->cfg.name, dropped);
	rent_check_free(&rc);
}

/* Leaving: the rented partitions an owner does not have whole yet go to
 * every current owner (a decommissioned node stopped before its new
 * owners fetched them).  Returns how many were pushed. */
static uint32_t rent_push(dgi_grid *g, dg_cache *c, dg_buf *b)
{
	struct rent_check rc;
	if (!rent_check(g, c, 0, &rc))
		return 0;
	uint32_t pushed = 0;
	dg_node_id failed[8];
	uint32_t nfailed = 0;
	dgi_epoch_enter();
	for (uint32_t k = 0; k < rc.nc && !atomic_load(&c->dead); k++) {
		if (rc.need[k] == 0 || rent_confirmed(&rc, k))
			continue;
		bool ok = true;
		for (uint32_t j = 0; j < rc.nnodes; j++) {
			if (!rent_owner(&rc, k, j))
				continue;
			dg_node_id o = rc.ids[j];
			uint32_t f = 0;
			while (f < nfailed && failed[f] != o)
				f++;
			if (f < nfailed) {
				ok = false; /* an owner that failed once is not waited for again */
				continue;
			}
			dg_err e = push_part(g, c, rc.cand[k], o, b);
			if (e != DG_OK) {
				ok = false;
				if (nfailed < 8)
					failed[nfailed++] = o;
				dgi_log("warn", "HANDOFF-FAIL", "cache=\"%s\" partition=%u rented=1 err=\"%s\"",
				    c->cfg.name, rc.cand[k], dg_strerror(e));
			}
		}
		pushed += ok;
	}
	dgi_epoch_leave();
	rent_check_free(&rc);
	return pushed;
}

static void rent_sweep_one(void *ctx, uint32_t key, void *value)
{
	dgi_grid *g = ctx;
	dg_cache *c = value;
	(void)key;
	if (!atomic_load(&c->dead)) /* (a destroyed cache's handle stays valid) */
		rent_sweep_cache(g, c, atomic_load(&dgi_rent_grace_ms));
}

void dgi_rent_sweep(dgi_grid *g)
{
	dgi_intmap_each(&g->caches, rent_sweep_one, g);
}
