/*
 * wfg.c — the wait-for graph of wfg.h.
 *
 * Vertices.  One array (g_v: g_nv used of g_vcap slots) in the order the
 * transactions were first seen; a vertex is named by its index.  A txid is
 * found through an open-addressing table (g_slot: g_tcap slots, a power of
 * two, linear probing, at most half full) of vertex index + 1, 0 meaning
 * empty.  The home slot is a 64-bit mix of (node, seq): ids from one node
 * differ only in a dense counter, which would otherwise fill one run.
 *
 * Edges.  waiter -> owner is the owner's index in the waiter's adjacency
 * array (v_adj, grown by doubling).  A duplicate is found by scanning the
 * waiter's out-edges: O(out-degree) per add, and out-degrees are small here
 * (a blocked transaction waits on one lock per node).
 *
 * Memory.  dgi_wfg_reset empties the table and sets g_nv to 0; every vertex
 * slot keeps its adjacency array for the vertex that takes the slot next,
 * so refilling a graph of the same shape allocates nothing.  dgi_wfg_add
 * makes every allocation it may need (table, vertex array, the waiter's
 * adjacency) before it changes anything: DG_ERR_NOMEM leaves the graph as
 * it was.  Growing the capacity alone changes nothing observable.
 *
 * Search.  dgi_wfg_cycle runs an iterative depth-first search from `from`
 * for an edge back to `from`.  The path lives in the vertices (v_parent,
 * and v_next: the next out-edge to try), so the search needs no stack,
 * allocates nothing, cannot fail and has no depth limit.  A vertex is
 * entered once per search (v_mark == the search's epoch): the search enters
 * every vertex reachable from `from` and scans all its out-edges, so it
 * finds an edge back to `from` iff a cycle through `from` exists, in
 * O(V + E).  When it finds one, the path from `from` to the current vertex
 * is that cycle in wait order, each vertex once.
 *
 * Not thread-safe: one thread at a time per graph.
 */
#include "txn/wfg.h"

#include <string.h>

#define NONE UINT32_MAX
#define MIN_VERTICES 16u
#define MIN_ADJ 4u
/* Keeps 2 * vertices (the table) and indices + 1 within uint32. */
#define MAX_VERTICES (UINT32_MAX / 4)

struct vertex {
	dgi_txid v_id;
	uint64_t v_start;   /* start time in ms, 0 = unknown */
	uint32_t *v_adj;    /* owners' indices; kept across resets */
	uint32_t v_deg;     /* out-edges in use */
	uint32_t v_acap;    /* v_adj's capacity */
	uint32_t v_mark;    /* epoch of the last search that entered it */
	uint32_t v_next;    /* search: next out-edge to try */
	uint32_t v_parent;  /* search: previous vertex on the path */
};

struct dgi_wfg {
	struct vertex *g_v;
	uint32_t g_nv;      /* vertices in use */
	uint32_t g_vcap;    /* slots of g_v, all initialized */
	uint32_t *g_slot;   /* vertex index + 1; 0 = empty */
	uint32_t g_tcap;    /* slots of g_slot: 0 or a power of two */
	uint32_t g_epoch;   /* of the last search */
};

/* ------------------------------------------------------------------------
 * Vertex table
 * ------------------------------------------------------------------------ */


/* The slot holding id (*hit), or the empty slot ending its probe chain.
 * The table is never full, so the probe ends. */
static uint32_t slot_find(const dgi_wfg *g, const dgi_txid *id, bool *hit)
{
	uint32_t mask = g->g_tcap - 1;
	uint32_t i = (uint32_t)dgi_txid_hash(id) & mask;
	while (g->g_slot[i] != 0) {
		if (dgi_txid_eq(&g->g_v[g->g_slot[i] - 1].v_id, id)) {
			*hit = true;
			return i;
		}
		i = (i + 1) & mask;
	}
	*hit = false;
	return i;
}

/* id's vertex index, or NONE. */
static uint32_t vertex_lookup(const dgi_wfg *g, const dgi_txid *id)
{
	if (g->g_tcap == 0)
		return NONE;
	bool hit;
	uint32_t i = slot_find(g, id, &hit);
	return hit ? g->g_slot[i] - 1 : NONE;
}

/* Room in the table for n vertices (at most half full). */
static dg_err table_reserve(dgi_wfg *g, uint32_t n)
{
	if ((uint64_t)n * 2 <= g->g_tcap)
		return DG_OK;
	uint32_t cap = g->g_tcap ? g->g_tcap : 2 * MIN_VERTICES;
	while ((uint64_t)n * 2 > cap)
		cap *= 2;
	uint32_t *slot = dgi_calloc(cap, sizeof(*slot));
	if (slot == NULL)
		return DG_ERR_NOMEM;
	dgi_free(g->g_slot);
	g->g_slot = slot;
	g->g_tcap = cap;
	for (uint32_t v = 0; v < g->g_nv; v++) {
		bool hit;
		g->g_slot[slot_find(g, &g->g_v[v].v_id, &hit)] = v + 1;
	}
	return DG_OK;
}

/* Room in the vertex array for n vertices; new slots are zeroed. */
static dg_err vertices_reserve(dgi_wfg *g, uint32_t n)
{
	if (n <= g->g_vcap)
		return DG_OK;
	uint32_t cap = g->g_vcap ? g->g_vcap : MIN_VERTICES;
	while (cap < n)
		cap *= 2;
	struct vertex *v = dgi_realloc(g->g_v, (size_t)cap * sizeof(*v));
	if (v == NULL)
		return DG_ERR_NOMEM;
	memset(v + g->g_vcap, 0, (size_t)(cap - g->g_vcap) * sizeof(*v));
	g->g_v = v;
	g->g_vcap = cap;
	return DG_OK;
}

/* Takes the next vertex slot for id (known absent; room reserved). */
static uint32_t vertex_insert(dgi_wfg *g, const dgi_txid *id)
{
	uint32_t idx = g->g_nv++;
	struct vertex *v = &g->g_v[idx];
	v->v_id = *id;
	v->v_start = 0;
	v->v_deg = 0;
	bool hit;
	g->g_slot[slot_find(g, id, &hit)] = idx + 1;
	return idx;
}

/* ------------------------------------------------------------------------
 * Edges
 * ------------------------------------------------------------------------ */

static bool has_edge(const struct vertex *v, uint32_t to)
{
	for (uint32_t i = 0; i < v->v_deg; i++)
		if (v->v_adj[i] == to)
			return true;
	return false;
}

/* Room in v's adjacency array for n out-edges. */
static dg_err adj_reserve(struct vertex *v, uint32_t n)
{
	if (n <= v->v_acap)
		return DG_OK;
	uint32_t cap = v->v_acap ? v->v_acap * 2 : MIN_ADJ;
	uint32_t *adj = dgi_realloc(v->v_adj, (size_t)cap * sizeof(*adj));
	if (adj == NULL)
		return DG_ERR_NOMEM;
	v->v_adj = adj;
	v->v_acap = cap;
	return DG_OK;
}

/* Every allocation adding waiter -> owner may need; w, o are their indices
 * or NONE (a new waiter takes slot g_nv, before a new owner). */
static dg_err reserve_for_edge(dgi_wfg *g, uint32_t w, uint32_t o)
{
	uint32_t fresh = (w == NONE) + (o == NONE);
	dg_err err;
	if (fresh != 0) {
		if (g->g_nv > MAX_VERTICES - fresh)
			return DG_ERR_NOMEM;
		if ((err = table_reserve(g, g->g_nv + fresh)) != DG_OK ||
		    (err = vertices_reserve(g, g->g_nv + fresh)) != DG_OK)
			return err;
	}
	if (w == NONE)
		return adj_reserve(&g->g_v[g->g_nv], 1);
	if (o != NONE && has_edge(&g->g_v[w], o))
		return DG_OK;
	if (g->g_v[w].v_deg == UINT32_MAX)
		return DG_ERR_NOMEM;
	return adj_reserve(&g->g_v[w], g->g_v[w].v_deg + 1);
}

/* A known start time is kept: a later "unknown" (0) does not erase it. */
static void note_start(struct vertex *v, uint64_t start_ms)
{
	if (v->v_start == 0)
		v->v_start = start_ms;
}

static bool txid_valid(const dgi_txid *t)
{
	return t != NULL && (t->node != 0 || t->seq != 0);
}

/* ------------------------------------------------------------------------
 * Graph
 * ------------------------------------------------------------------------ */

dg_err dgi_wfg_create(dgi_wfg **out)
{
	if (out == NULL)
		return DG_ERR_INVAL;
	*out = dgi_calloc(1, sizeof(**out));
	return *out != NULL ? DG_OK : DG_ERR_NOMEM;
}

void dgi_wfg_destroy(dgi_wfg *g)
{
	if (g == NULL)
		return;
	for (uint32_t i = 0; i < g->g_vcap; i++)
		dgi_free(g->g_v[i].v_adj);
	dgi_free(g->g_v);
	dgi_free(g->g_slot);
	dgi_free(g);
}

void dgi_wfg_reset(dgi_wfg *g)
{
	g->g_nv = 0;
	if (g->g_tcap != 0)
		memset(g->g_slot, 0, (size_t)g->g_tcap * sizeof(*g->g_slot));
}

dg_err dgi_wfg_add(dgi_wfg *g, const dgi_txid *waiter, uint64_t waiter_start_ms,
    const dgi_txid *owner, uint64_t owner_start_ms)
{
	if (g == NULL || !txid_valid(waiter) || !txid_valid(owner) ||
	    dgi_txid_eq(waiter, owner))
		return DG_ERR_INVAL;
	uint32_t w = vertex_lookup(g, waiter);
	uint32_t o = vertex_lookup(g, owner);
	dg_err err = reserve_for_edge(g, w, o);
	if (err != DG_OK)
		return err;
	if (w == NONE)
		w = vertex_insert(g, waiter);
	if (o == NONE)
		o = vertex_insert(g, owner);
	note_start(&g->g_v[w], waiter_start_ms);
	note_start(&g->g_v[o], owner_start_ms);
	struct vertex *v = &g->g_v[w];
	if (!has_edge(v, o))
		v->v_adj[v->v_deg++] = o;
	return DG_OK;
}

/* ------------------------------------------------------------------------
 * Cycle search
 * ------------------------------------------------------------------------ */

/* A fresh search epoch; marks are cleared when the counter wraps. */
static uint32_t next_epoch(dgi_wfg *g)
{
	if (++g->g_epoch == 0) {
		for (uint32_t i = 0; i < g->g_vcap; i++)
			g->g_v[i].v_mark = 0;
		g->g_epoch = 1;
	}
	return g->g_epoch;
}

/* Marks w entered and steps onto it from u. */
static void enter(struct vertex *vs, uint32_t w, uint32_t u, uint32_t epoch)
{
	vs[w].v_mark = epoch;
	vs[w].v_next = 0;
	vs[w].v_parent = u;
}

/* Depth-first search from s for an edge back to s.  Returns the length of
 * the path s -> ... -> *last whose last vertex has that edge, 0 if none. */
static size_t search(dgi_wfg *g, uint32_t s, uint32_t *last)
{
	struct vertex *vs = g->g_v;
	uint32_t epoch = next_epoch(g);
	uint32_t u = s;
	size_t depth = 1;
	enter(vs, s, NONE, epoch);
	for (;;) {
		struct vertex *v = &vs[u];
		if (v->v_next == v->v_deg) {
			if (u == s)
				return 0;
			u = v->v_parent;
			depth--;
			continue;
		}
		uint32_t w = v->v_adj[v->v_next++];
		if (w == s) {
			*last = u;
			return depth;
		}
		if (vs[w].v_mark != epoch) {
			enter(vs, w, u, epoch);
			u = w;
			depth++;
		}
	}
}

/* Writes the n-vertex path ending at last, from its start, up to cap. */
static void write_path(const dgi_wfg *g, uint32_t last, size_t n,
    dgi_txid *out, size_t cap)
{
	uint32_t u = last;
	for (size_t k = n; k-- > 0;) {
		if (k < cap)
			out[k] = g->g_v[u].v_id;
		u = g->g_v[u].v_parent;
	}
}

size_t dgi_wfg_cycle(dgi_wfg *g, const dgi_txid *from, dgi_txid *cycle, size_t cap)
{
	if (g == NULL || from == NULL)
		return 0;
	uint32_t s = vertex_lookup(g, from);
	if (s == NONE)
		return 0;
	uint32_t last;
	size_t n = search(g, s, &last);
	if (n != 0 && cycle != NULL)
		write_path(g, last, n, cycle, cap);
	return n;
}

/* ------------------------------------------------------------------------
 * Victim
 * ------------------------------------------------------------------------ */

/* (start, node, seq) of a is larger than b's. */
static bool younger(uint64_t sa, const dgi_txid *a, uint64_t sb, const dgi_txid *b)
{
	if (sa != sb)
		return sa > sb;
	if (a->node != b->node)
		return a->node > b->node;
	return a->seq > b->seq;
}

static uint64_t start_of(const dgi_wfg *g, const dgi_txid *id)
{
	uint32_t v = g != NULL ? vertex_lookup(g, id) : NONE;
	return v != NONE ? g->g_v[v].v_start : 0;
}

dgi_txid dgi_wfg_victim(dgi_wfg *g, const dgi_txid *cycle, size_t n)
{
	/* {0,0} with start 0 is below every real id: it never wins. */
	dgi_txid best = { 0, 0 };
	uint64_t best_start = 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t s = start_of(g, &cycle[i]);
		if (younger(s, &cycle[i], best_start, &best)) {
			best = cycle[i];
			best_start = s;
		}
	}
	return best;
}
