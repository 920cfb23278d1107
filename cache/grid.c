/*
 * grid.c — the caches of a node: the cluster-wide cache registry, topology
 * changes (affinity, partition states, lost partitions), the persistent
 * store, the worker pool and the expiry sweeper.
 *
 * Partition states on this node (DESIGN.md):
 *   OWNING  an owner with the full partition: serves reads and writes;
 *   MOVING  a new owner fetching the partition from `supplier`: receives
 *           writes (as primary or backup) but reads fall through to the
 *           supplier for keys it does not hold yet (removals, in every
 *           state, are tombstones for DGI_TOMB_TTL_MS: a late copy cannot
 *           resurrect a removed key);
 *   LOST    an owner of a partition whose every previous copy is gone:
 *           reads and writes fail with DG_ERR_PARTITION_LOST until reset;
 *   NONE    not an owner.  Data left from owning it ("rented") is served
 *           to the new owners' demands and dropped after a grace period,
 *           once every owner holds the partition whole.
 * Apart from the state, each copy is whole or partial (with the sources of
 * what it lacks) or broken: transport/PROTOCOL.md, "Rebalancing".
 */
#include "cache_int.h"

#include <errno.h>
#include <semaphore.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

_Atomic int64_t dgi_tomb_ttl_ms = DGI_TOMB_TTL_MS_DEFAULT;

uint32_t dgi_cache_id(const char *name)
{
	uint32_t h = 2166136261u;
	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		h = (h ^ *p) * 16777619u;
	return h ? h : 1;
}

void dg_cache_config_init(dg_cache_config *cfg, const char *name)
{
	memset(cfg, 0, sizeof(*cfg));
	if (name != NULL) {
		size_t n = strlen(name);
		if (n >= sizeof(cfg->name))
			n = sizeof(cfg->name) - 1;
		memcpy(cfg->name, name, n);
	}
	cfg->mode = DG_PARTITIONED;
	cfg->write_sync = DG_FULL_SYNC;
	cfg->atomicity = DG_ATOMIC;
	cfg->partitions = DG_PARTITIONS_DEFAULT;
	cfg->read_from_backup = true;
}

const dg_cache_config *dg_cache_config_of(const dg_cache *c)
{
	return &c->cfg;
}

void dgi_grid_event(dgi_grid *g, dg_event_kind kind, const char *cache, uint32_t part)
{
	if (g->cfg.on_event == NULL)
		return;
	dg_event ev = { kind, atomic_load(&g->topver), cache, part };
	g->cfg.on_event(g->cfg.event_ctx, &ev);
}

dg_cache *dgi_grid_cache(dgi_grid *g, uint32_t id)
{
	dg_cache *c = dgi_intmap_get(&g->caches, id);
	return c != NULL && !atomic_load_explicit(&c->dead, memory_order_acquire) ? c : NULL;
}

/* ---- configuration checks ---- */

static dg_err check_config(const dgi_grid *g, const dg_cache_config *cfg)
{
	size_t n = strnlen(cfg->name, sizeof(cfg->name));
	const char *why = NULL;
	if (n == 0 || n >= sizeof(cfg->name))
		why = "name must be 1..127 bytes";
	else if ((unsigned)cfg->mode > DG_REPLICATED)
		why = "mode must be PARTITIONED or REPLICATED";
	else if (cfg->backups > DGI_MAX_COPIES - 1)
		why = "backups must be 0..7";
	else if ((unsigned)cfg->write_sync > DG_FULL_ASYNC)
		why = "write_sync must be FULL_SYNC, PRIMARY_SYNC or FULL_ASYNC";
	else if ((unsigned)cfg->atomicity > DG_TRANSACTIONAL)
		why = "atomicity must be ATOMIC or TRANSACTIONAL";
	else if (cfg->partitions == 0 || cfg->partitions > DG_PARTITIONS_MAX)
		why = "partitions must be 1..65536";
	else if (cfg->persistence && g->ps == NULL && !g->cfg.client)
		why = "persistence needs the node's data_dir"; /* clients store nothing */
	if (why != NULL) {
		dgi_log("error", "CACHE-CONFIG", "cache=\"%.*s\" why=\"%s\"", (int)n,
		    cfg->name, why);
		return DG_ERR_INVAL;
	}
	return DG_OK;
}

static bool same_config(const dg_cache_config *a, const dg_cache_config *b)
{
	return strcmp(a->name, b->name) == 0 && a->mode == b->mode &&
	    (a->mode == DG_REPLICATED || a->backups == b->backups) &&
	    a->write_sync == b->write_sync && a->atomicity == b->atomicity &&
	    a->partitions == b->partitions && a->read_from_backup == b->read_from_backup &&
	    a->persistence == b->persistence && a->ttl_ms == b->ttl_ms;
}

static void cfg_from_msg(const dgi_msg_cfg *m, dg_cache_config *c)
{
	char name[DG_CACHE_NAME_MAX];
	memcpy(name, m->name.ptr, m->name.len);
	name[m->name.len] = 0;
	dg_cache_config_init(c, name);
	c->mode = (dg_cache_mode)m->mode;
	c->backups = m->backups < 0 || m->backups > 1000 ? 1000 : (uint32_t)m->backups;
	c->write_sync = (dg_write_sync)m->sync;
	c->atomicity = (dg_atomicity)m->atomicity;
	c->partitions = m->partitions < 0 || m->partitions > DG_PARTITIONS_MAX + 1 ?
	    0 : (uint32_t)m->partitions;
	c->read_from_backup = m->read_from_backup != 0;
	c->persistence = m->persistence != 0;
	c->ttl_ms = (uint64_t)m->ttl_ms;
}

/* ---- affinity and partition states ---- */

/* Nodes that own data: neither clients nor STANDBY (servers outside the
 * baseline, transport.h). */
static bool owns_data(const dg_topology_node *n)
{
	return !(n->attrs & (DG_NODE_CLIENT | DG_NODE_STANDBY));
}

/* The nodes of t that own data, in order: the affinity's nodes. */
static uint32_t servers_of(const dg_topology *t, dg_node_id *ids, int64_t *orders,
    dg_node_id without)
{
	uint32_t n = 0;
	for (uint32_t i = 0; t != NULL && i < t->count; i++) {
		if (!owns_data(&t->nodes[i]) || t->nodes[i].id == without)
			continue;
		ids[n] = t->nodes[i].id;
		orders[n] = t->nodes[i].order;
		n++;
	}
	return n;
}

static dgi_aff *aff_for(const dg_cache *c, const dg_topology *t, dg_node_id without)
{
	dg_node_id ids[1024];
	int64_t orders[1024];
	uint32_t n = servers_of(t, ids, orders, without);
	uint32_t copies = c->cfg.mode == DG_REPLICATED ? n : 1 + c->cfg.backups;
	return dgi_aff_build(t ? t->version : 0, c->cfg.partitions, copies, ids, orders, n,
	    c->g->self);
}

/* Whether id is a server still in t, so it can supply the copies it
 * holds.  A STANDBY server counts: a node just taken out of the baseline
 * owns nothing under t but holds its old partitions, and its new owners
 * fetch them from it (as from any old owner) — taking it for gone would
 * mark its partitions lost.  It keeps its copies as any rented partition's
 * (until every new owner has it: dgi_rent_sweep). */
static bool is_server(const dg_topology *t, dg_node_id id)
{
	const dg_topology_node *n = dg_topology_find(t, id);
	return n != NULL && !(n->attrs & DG_NODE_CLIENT);
}

/* Whether t may serve data: it holds a majority of its baseline's
 * addresses (servers), or no baseline is set, or the partition policy is
 * none.  Copies loaded from disk merge only under such a topology: before,
 * the node is SEGMENTED and the copies of those still away may be newer. */
static bool topo_active(const dgi_grid *g, const dg_topology *t)
{
	if (!g->cfg.majority || !t->baseline_set || t->nbaseline == 0)
		return true;
	uint32_t in = 0;
	for (uint32_t i = 0; i < t->count; i++) {
		if (t->nodes[i].attrs & DG_NODE_CLIENT || t->nodes[i].url == NULL)
			continue;
		for (uint32_t b = 0; b < t->nbaseline; b++)
			if (strcmp(t->nodes[i].url, t->baseline[b]) == 0) {
				in++;
				break;
			}
	}
	return in >= t->nbaseline / 2 + 1;
}

bool dgi_grid_has_server(dgi_grid *g, dg_node_id id)
{
	pthread_mutex_lock(&g->mu);
	bool r = g->topo != NULL && is_server(g->topo, id);
	pthread_mutex_unlock(&g->mu);
	return r;
}

/* The partition starts fetching from sup (partition locked; sup_owner:
 * sup owned it under the previous topology).  A whole copy now lacks what
 * sup and its sources hold; a partial one also still lacks what its
 * earlier sources hold, so it keeps those still servers of t — and one
 * that left may have taken what only it held along: the copy is broken
 * unless sup has it whole (PROTOCOL.md, "Rebalancing"). */
static void moving_from(dg_cache *c, uint32_t p, dgi_part *pt, const dg_topology *t,
    dg_node_id sup, bool sup_owner, const dg_node_id *alts, uint8_t nalts)
{
	pt->nalts = nalts;
	if (nalts > 0)
		memcpy(pt->alts, alts, nalts * sizeof(alts[0]));
	uint8_t n = 0;
	if (atomic_load(&pt->whole))
		pt->broken = false;
	for (uint8_t i = 0; !atomic_load(&pt->whole) && i < pt->nsrcs; i++) {
		if (pt->srcs[i] == sup)
			continue;
		if (is_server(t, pt->srcs[i]))
			pt->srcs[n++] = pt->srcs[i];
		else
			pt->broken = true;
	}
	if (n == DGI_PART_SRCS) {
		n--;
		dgi_log("warn", "REBALANCE-SOURCES", "cache=\"%s\" partition=%u forgotten=%016llx why=\"more than %d sources\"",
		    c->cfg.name, p, (unsigned long long)pt->srcs[n], DGI_PART_SRCS);
		pt->broken = true;
	}
	memmove(pt->srcs + 1, pt->srcs, n * sizeof(pt->srcs[0]));
	pt->srcs[0] = sup;
	pt->nsrcs = (uint8_t)(n + 1);
	pt->ntaken = 0;
	atomic_store(&pt->whole, false);
	pt->supplier = sup;
	pt->sup_owner = sup_owner;
}

/* The partition is OWNING with what this node has (partition locked):
 * whole if the copy was, or if it knows of nothing it lacks (it never
 * owned the partition: say, a graceful leaver's handoff just arrived);
 * broken if what it lacked was on nodes that left. */
static void owning_as_is(dg_cache *c, uint32_t p, dgi_part *pt)
{
	if (!atomic_load(&pt->whole) && (pt->nsrcs > 0 || pt->broken)) {
		pt->broken = true;
		dgi_log("warn", "REBALANCE-BROKEN", "cache=\"%s\" partition=%u why=\"the nodes holding what its copy lacked left: it owns what it has and takes the rented copies that ask it\"",
		    c->cfg.name, p);
	} else {
		atomic_store(&pt->whole, true);
		pt->broken = false;
	}
	pt->nsrcs = pt->ntaken = 0;
}

/* The first source of a partial copy still a server of t; 0: none. */
static dg_node_id live_source(const dgi_part *pt, const dg_topology *t)
{
	for (uint8_t i = 0; !atomic_load(&pt->whole) && i < pt->nsrcs; i++)
		if (is_server(t, pt->srcs[i]))
			return pt->srcs[i];
	return 0;
}

static bool alive_in(void *ctx, dg_node_id id)
{
	return is_server(ctx, id);
}

/* A node that becomes the primary of p (it was not under old) learns from
 * the old owners still in t what the old primary did (psync.c).  Whatever
 * its role now, it stops waiting for those that left, and keeps waiting
 * for the others: a node that was primary for one version only must not
 * vouch for its predecessor before that one answered (psync.c, "Answers
 * in order").  Partition locked. */
static void psync_retopo(dgi_grid *g, dg_cache *c, uint32_t p, dgi_part *pt,
    const dg_topology *t, const dgi_aff *old, bool guessed, bool primary_now)
{
	bool was = old != NULL && old->nnodes > 0 && dgi_aff_owner(old, p, 0) == g->self;
	if (pt->psync_n > 0)
		dgi_psync_keep(pt, alive_in, (void *)t);
	if (primary_now && !was && old != NULL && old->nnodes > 0) {
		dg_node_id *from = dgi_alloc(old->copies * sizeof(*from));
		uint32_t n = 0;
		for (uint32_t i = 0; from != NULL && i < old->copies; i++) {
			dg_node_id o = dgi_aff_owner(old, p, i);
			if (o != 0 && o != g->self && is_server(t, o))
				from[n++] = o;
		}
		if (from == NULL)
			dgi_log("warn", "PSYNC-NOMEM", "cache=\"%s\" partition=%u", c->cfg.name, p);
		/* a guessed affinity (a cache this node learned or loaded) has
		 * the new version: the writes to ask for are the previous one's */
		dgi_psync_begin(g, c, p, t->version, guessed ? t->version - 1 : old->topver, from, n);
		dgi_free(from);
	}
}

/* Node id's join order in affinity a; -1: not one of its servers. */
static int64_t aff_order(const dgi_aff *a, dg_node_id id)
{
	for (uint32_t k = 0; a != NULL && k < a->nnodes; k++)
		if (a->nodes[k] == id)
			return a->orders[k];
	return -1;
}

/* Empties a stale copy about to fetch from an old owner (partition
 * locked): entries, tombstones, persisted rows, update ids; it lacks all
 * of it now, which its supplier holds — so it is no longer broken. */
static void empty_stale(dgi_grid *g, dg_cache *c, uint32_t p, dgi_part *pt)
{
	dgi_part_clear(pt);
	dgi_dedup_free(pt);
	if (c->cfg.persistence && g->ps != NULL)
		dgi_pstore_drop(g->ps, c->id, p);
	pt->stale = false;
	pt->broken = false;
	dgi_log("debug", "STALE-DROPPED", "cache=\"%s\" partition=%u", c->cfg.name, p);
}

/* Moves c to the affinity of topology t (grid->mu held).  old: the
 * affinity the partitions' copies were placed by (NULL: none known). */
static void retopo_cache(dgi_grid *g, dg_cache *c, const dg_topology *t)
{
	dgi_aff *old = atomic_load(&c->aff);
	dgi_aff *guess = NULL;
	dgi_aff *now = aff_for(c, t, 0);
	if (now == NULL) {
		dgi_log("error", "AFFINITY-NOMEM", "cache=\"%s\"", c->cfg.name);
		return;
	}
	if (old == NULL && !c->fresh) {
		/* a cache this node learned or loaded: its data lives on the
		 * other servers, placed as if this node were not there */
		guess = aff_for(c, t, g->self);
		old = guess;
	}
	uint64_t now_ms = dgi_now_ms();
	bool active = topo_active(g, t);
	const dg_topology_node *me = dg_topology_find(t, g->self);
	/* out of the cluster's topology, or back in it as a new incarnation
	 * (a new join order) without this node having seen itself removed */
	int64_t was = aff_order(atomic_load(&c->aff), g->self);
	bool dropped = me == NULL || (was >= 0 && me->order != was);
	for (uint32_t p = 0; p < c->cfg.partitions; p++) {
		dgi_part *pt = &c->parts[p];
		int rn = dgi_aff_role(now, p, g->self);
		bool any_old = false, gone = false;
		dg_node_id supplier = 0, alts[DGI_PART_ALTS];
		uint8_t nalts = 0;
		if (old != NULL && old->nnodes > 0) {
			for (uint32_t i = 0; i < old->copies; i++) {
				dg_node_id o = dgi_aff_owner(old, p, i);
				if (o == 0)
					continue;
				if (is_server(t, o)) {
					any_old = true;
					if (supplier == 0 && o != g->self)
						supplier = o;
					else if (o != g->self && nalts < DGI_PART_ALTS)
						alts[nalts++] = o;
				}
			}
			gone = !any_old;
		}
		if (gone && atomic_load_explicit(&c->handed[p], memory_order_relaxed)) {
			gone = false; /* its owner left gracefully and handed it over */
			atomic_store_explicit(&c->handed[p], 0, memory_order_relaxed);
		}
		if (gone && guess == NULL && !atomic_load_explicit(&c->lost[p], memory_order_relaxed)) {
			atomic_store_explicit(&c->lost[p], 1, memory_order_relaxed);
			dgi_log("warn", "PARTITION-LOST", "cache=\"%s\" partition=%u version=%lld",
			    c->cfg.name, p, (long long)t->version);
			dgi_grid_event(g, DG_EVENT_PARTITION_LOST, c->cfg.name, p);
		}
		dgi_part_lock(pt);
		int st = atomic_load(&pt->state);
		int ns = st;
		dg_node_id src;
		if (dropped && (atomic_load(&pt->whole) || pt->nsrcs > 0)) {
			/* out of the cluster's topology (removed while cut off or
			 * paused): the others wrote without this copy, so it is
			 * nobody's source — a new owner that fetches it fetches
			 * the whole copy of another old owner too (newer versions
			 * win), and goes LOST rather than take it alone as whole;
			 * this node serves nothing from it (rebalance.c, "Whole
			 * copies"; PROTOCOL.md, "Majority") */
			atomic_store(&pt->whole, false);
			pt->broken = true;
			pt->nsrcs = pt->ntaken = 0;
		}
		if (dropped) {
			pt->stale = pt->stale || pt->count > 0;
			pt->nrecent = pt->recent_at = 0;
			dgi_dedup_free(pt); /* updates it saw: not the cluster's */
		}
		if (rn < 0) {
			ns = P_NONE;
			if (st != P_NONE)
				pt->rented_ms = now_ms;
			/* a loaded copy this node does not own under an active
			 * topology: an ordinary rented copy (its owners fetch it
			 * in their merge and then tell it to go) */
			if (active)
				pt->reloaded = false;
		} else if (atomic_load_explicit(&c->lost[p], memory_order_relaxed)) {
			ns = P_LOST;
		} else if (pt->reloaded) {
			/* loaded from disk: merged with every other server's copy
			 * (newest version wins) before it serves, once t is
			 * active (rebalance.c, "Copies loaded from disk") */
			ns = P_MOVING;
			atomic_store(&pt->whole, false);
			pt->broken = false;
			pt->nsrcs = pt->ntaken = pt->nalts = 0;
			pt->supplier = 0;
			pt->sup_owner = false;
			/* only what is written under t is current: a copy
			 * fetched meanwhile from a later node's disk can hold
			 * versions above the one this node first moved at */
			pt->moving_topver = t->version;
		} else if (st == P_OWNING && !pt->stale) {
			ns = P_OWNING;
		} else if (st == P_MOVING && !pt->stale && is_server(t, pt->supplier)) {
			ns = P_MOVING;
		} else if (old == NULL || old->nnodes == 0) {
			ns = P_OWNING; /* nothing to fetch from anyone: whole */
			atomic_store(&pt->whole, true);
			pt->broken = false;
			pt->nsrcs = pt->ntaken = 0;
		} else if (supplier != 0) {
			ns = P_MOVING;
			moving_from(c, p, pt, t, supplier, true, alts, nalts);
		} else if ((src = live_source(pt, t)) != 0) {
			/* no old owner left to fetch from, but this copy is
			 * partial and knows a node holding what it lacks */
			ns = P_MOVING;
			moving_from(c, p, pt, t, src, false, NULL, 0);
		} else if (guess == NULL && !atomic_load(&pt->whole) &&
		    (pt->nsrcs > 0 || pt->broken)) {
			/* a partial copy whose every source is gone: what it
			 * lacked is lost — the partition is LOST (issue 12,
			 * "lost means lost on every path"), not a partial copy
			 * served as the whole; after dg_cache_reset_lost it owns
			 * what it has (and takes the rented copies that ask) */
			ns = P_LOST;
			owning_as_is(c, p, pt);
			atomic_store_explicit(&c->lost[p], 1, memory_order_relaxed);
			dgi_log("warn", "PARTITION-LOST", "cache=\"%s\" partition=%u version=%lld "
			    "why=\"sources of a partial copy gone\"", c->cfg.name, p, (long long)t->version);
			dgi_grid_event(g, DG_EVENT_PARTITION_LOST, c->cfg.name, p);
		} else {
			/* this node held the only surviving copy (or, as a guess,
			 * nobody else has it): it owns what it has */
			ns = P_OWNING;
			owning_as_is(c, p, pt);
		}
		if (pt->stale && ns == P_MOVING && pt->sup_owner) {
			/* a copy from before this node was dropped, and an old
			 * owner of the cluster's to fetch from: what only this
			 * copy holds was never the cluster's (a write applied
			 * here alone while cut off, whose tx the others rolled
			 * back) — start empty rather than merge it in (PROTOCOL.md,
			 * "Majority"); the writes of t come after this */
			empty_stale(g, c, p, pt);
		} else if (pt->stale && ns != P_NONE) {
			pt->stale = false; /* LOST, or owned as is: all there is */
		}
		if (ns != st || ns == P_MOVING) {
			if (ns == P_MOVING && st != P_MOVING)
				pt->moving_topver = t->version;
			atomic_store(&pt->state, ns);
			pt->state_topver = t->version;
		}
		if (pt->nrecent > 0) {
			/* a backup that becomes the primary: its last copies may
			 * not be on every other backup yet (its primary failed) */
			if (rn == 0 && (ns == P_OWNING || ns == P_MOVING) && old != NULL &&
			    dgi_aff_role(old, p, g->self) > 0 && c->cfg.write_sync == DG_FULL_SYNC)
				dgi_pw_promoted(g, c, p, now);
			else if (rn <= 0)
				pt->nrecent = pt->recent_at = 0; /* no longer a backup */
		}
		if (c->cfg.atomicity == DG_ATOMIC && c->cfg.write_sync == DG_FULL_SYNC)
			psync_retopo(g, c, p, pt, t, old, guess != NULL, rn == 0 && ns != P_LOST);
		if (pt->pending != NULL)
			dgi_pw_retopo(g, c, p, now); /* FULL_SYNC writes in flight */
		dgi_part_unlock(pt);
	}
	dgi_aff_free(guess);
	dgi_aff *prev = atomic_exchange(&c->aff, now);
	if (c->cfg.atomicity == DG_ATOMIC && c->cfg.write_sync == DG_FULL_SYNC)
		dgi_psync_send(g, c);
	if (prev != NULL) {
		/* operations may still hold prev (for as long as they run): it
		 * is freed once no section that could have loaded it is left */
		prev->retired_tag = dgi_epoch_retire();
		prev->retired_next = g->limbo;
		g->limbo = prev;
	}
	c->fresh = false;
}

static dg_err send_configs(dgi_grid *g, dg_node_id to);

static void persist_topver(dgi_grid *g, int64_t v)
{
	if (g->ps == NULL || v <= g->persisted_topver)
		return;
	char s[32];
	int n = snprintf(s, sizeof(s), "%lld", (long long)v);
	if (dgi_pstore_meta_put(g->ps, "topology_version", s, (size_t)n) == DG_OK)
		g->persisted_topver = v;
}

/* The baseline t carries, in meta "baseline" when it changed (grid->mu
 * held): what a restarted node's membership starts from
 * (dgi_grid_persisted_baseline).  A baseline cleared is deleted. */
static void persist_baseline(dgi_grid *g, const dg_topology *t)
{
	if (g->ps == NULL)
		return;
	size_t len = 0;
	for (uint32_t i = 0; t->baseline_set && i < t->nbaseline; i++)
		len += strlen(t->baseline[i]) + 1;
	char *s = t->baseline_set ? dgi_alloc(len + 1) : NULL;
	if (t->baseline_set && s == NULL)
		return;
	size_t at = 0;
	for (uint32_t i = 0; s != NULL && i < t->nbaseline; i++) {
		size_t l = strlen(t->baseline[i]);
		memcpy(s + at, t->baseline[i], l);
		s[at + l] = '\n';
		at += l + 1;
	}
	if (s != NULL)
		s[at] = 0;
	bool same = (s == NULL && g->persisted_bl == NULL) ||
	    (s != NULL && g->persisted_bl != NULL && strcmp(s, g->persisted_bl) == 0);
	if (same || dgi_pstore_meta_put(g->ps, "baseline", s, s != NULL ? at : 0) != DG_OK) {
		dgi_free(s);
		return;
	}
	dgi_free(g->persisted_bl);
	g->persisted_bl = s;
}

struct retopo_ctx {
	dgi_grid *g;
	const dg_topology *t;
};

static void retopo_one(void *ctx, uint32_t key, void *value)
{
	struct retopo_ctx *r = ctx;
	dg_cache *c = value;
	(void)key;
	if (!atomic_load(&c->dead))
		retopo_cache(r->g, c, r->t);
}

static void on_topology(void *ctx, const dg_topology *old, const dg_topology *now)
{
	dgi_grid *g = ctx;
	pthread_mutex_lock(&g->mu);
	if (g->topo != NULL && now->version <= g->topo->version) {
		pthread_mutex_unlock(&g->mu);
		return;
	}
	persist_topver(g, now->version);
	persist_baseline(g, now);
	atomic_store(&g->active, topo_active(g, now));
	struct retopo_ctx r = { g, now };
	dgi_intmap_each(&g->caches, retopo_one, &r);
	atomic_fetch_add(&((dg_topology *)now)->refs, 1);
	dg_topology *prev = g->topo;
	g->topo = (dg_topology *)now;
	atomic_store(&g->topver, now->version);
	if (now->version > DGI_ENTRY_TOPVER_MAX)
		dgi_log("error", "TOPVER-LIMIT", "version=%lld max=%lld why=\"entries keep 32 "
		    "bits of it: writes are refused DG_ERR_LIMIT\"", (long long)now->version,
		    (long long)DGI_ENTRY_TOPVER_MAX);
	const dg_topology_node *me = dg_topology_find(now, g->self);
	if (me != NULL)
		atomic_store_explicit(&g->self_order, me->order, memory_order_relaxed);
	g->rebal_gen++;
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->mu);
	dgi_psync_release(g); /* new primaries asked for it */

	/* every node tells new nodes every cache it has: a cache created
	 * while a node joined reaches it one way or the other */
	const dg_topology *before = prev != NULL ? prev : old;
	for (uint32_t i = 0; i < now->count; i++) {
		dg_node_id id = now->nodes[i].id;
		if (id != g->self && (before == NULL || dg_topology_find(before, id) == NULL))
			send_configs(g, id);
	}
	if (prev != NULL)
		dg_topology_release(prev);
	dgi_grid_event(g, DG_EVENT_TOPOLOGY, NULL, 0);
}

/* ---- creating, learning and destroying caches ---- */

/* Everything of c but the handle: partitions, marks, affinity. */
static void cache_free_parts(dg_cache *c)
{
	if (c->parts != NULL)
		dgi_pw_forget_all(c->g, c, DG_ERR_CLOSED);
	for (uint32_t p = 0; c->parts != NULL && p < c->cfg.partitions; p++) {
		dgi_pw_free_part(&c->parts[p]);
		dgi_psync_free_part(&c->parts[p]);
		dgi_dedup_free(&c->parts[p]);
		dgi_part_free(&c->parts[p]);
	}
	dgi_free(c->parts_mem);
	dgi_free(c->lost);
	dgi_free(c->handed);
	dgi_aff_free(atomic_load(&c->aff));
	dgi_ctrs_fold(c); /* (no thread writes its block of a reclaimed cache) */
	c->parts = NULL;
	c->parts_mem = NULL;
	c->lost = NULL;
	c->handed = NULL;
	atomic_store(&c->aff, NULL);
}

static void cache_free(dg_cache *c)
{
	if (c == NULL)
		return;
	cache_free_parts(c);
	dgi_free(c);
}

static dg_cache *cache_new(dgi_grid *g, const dg_cache_config *cfg, bool fresh)
{
	dgi_lat_clock_init(); /* before the first operation of any cache */
	dg_cache *c = dgi_calloc(1, sizeof(*c));
	if (c == NULL)
		return NULL;
	c->g = g;
	c->cfg = *cfg;
	c->id = dgi_cache_id(cfg->name);
	c->fresh = fresh;
	/* (calloc aligns to 16: 63 bytes more make room for a 64-byte start) */
	c->parts_mem = dgi_calloc(1, (size_t)cfg->partitions * sizeof(*c->parts) + 63);
	if (c->parts_mem != NULL)
		c->parts = (dgi_part *)(((uintptr_t)c->parts_mem + 63) & ~(uintptr_t)63);
	c->lost = dgi_calloc(cfg->partitions, 1);
	c->handed = dgi_calloc(cfg->partitions, 1);
	if (c->parts == NULL || c->lost == NULL || c->handed == NULL) {
		dgi_free(c->parts_mem);
		dgi_free(c->lost);
		dgi_free(c->handed);
		dgi_free(c);
		return NULL;
	}
	for (uint32_t p = 0; p < cfg->partitions; p++)
		dgi_part_init(&c->parts[p]);
	return c;
}

static dg_err meta_save(dgi_grid *g, const dg_cache_config *cfg)
{
	if (g->ps == NULL || !cfg->persistence)
		return DG_OK;
	char key[DG_CACHE_NAME_MAX + 8];
	snprintf(key, sizeof(key), "cache:%s", cfg->name);
	dg_buf b;
	dg_writer w;
	dg_buf_init(&b);
	dg_writer_init(&w, g->reg, &b);
	dgi_msg_cfg m;
	dgi_cfg_to_msg(cfg, &m);
	dg_msg_encode(DGI_MSG_CACHE_CREATE, &m, &w);
	dg_err e = dg_writer_finish(&w);
	if (e == DG_OK)
		e = dgi_pstore_meta_put(g->ps, key, b.data, b.len);
	dg_buf_free(&b);
	return e;
}

/* Adds a cache on this node (grid->mu held).  DG_OK with *out the existing
 * one when the config matches; DG_ERR_EXISTS otherwise. */
static dg_err local_create(dgi_grid *g, const dg_cache_config *cfg, bool fresh,
    dg_cache **out)
{
	uint32_t id = dgi_cache_id(cfg->name);
	dg_cache *have = dgi_grid_cache(g, id);
	if (have != NULL) {
		if (out)
			*out = have;
		if (same_config(&have->cfg, cfg))
			return DG_OK;
		if (strcmp(have->cfg.name, cfg->name) != 0)
			dgi_log("error", "CACHE-ID-CLASH", "cache=\"%s\" other=\"%s\"", cfg->name,
			    have->cfg.name);
		return DG_ERR_EXISTS;
	}
	dg_err e = check_config(g, cfg);
	if (e == DG_OK && cfg->persistence && g->ps != NULL)
		e = dgi_pstore_use_key(g->ps, id);   /* encrypted at rest: its data key */
	if (e != DG_OK)
		return e;
	dg_cache *c = cache_new(g, cfg, fresh);
	if (c == NULL)
		return DG_ERR_NOMEM;
	if ((e = meta_save(g, cfg)) != DG_OK || (e = dgi_intmap_put(&g->caches, c->id, c)) != DG_OK) {
		cache_free(c);
		return e;
	}
	if (g->topo != NULL)
		retopo_cache(g, c, g->topo);
	g->rebal_gen++;
	pthread_cond_broadcast(&g->cv);
	dgi_log("info", "CACHE-CREATED", "cache=\"%s\" id=%08x mode=%s backups=%u partitions=%u persistence=%s",
	    cfg->name, c->id, cfg->mode == DG_REPLICATED ? "replicated" : "partitioned",
	    cfg->backups, cfg->partitions, cfg->persistence ? "on" : "off");
	if (out)
		*out = c;
	return DG_OK;
}

static void local_destroy(dgi_grid *g, dg_cache *c)
{
	atomic_store(&c->dead, true);
	dgi_intmap_del(&g->caches, c->id);
	c->grave_next = g->grave;
	g->grave = c; /* the handle stays; the rest goes at dgi_grid_reclaim */
	if (g->ps != NULL && c->cfg.persistence) {
		char key[DG_CACHE_NAME_MAX + 8];
		snprintf(key, sizeof(key), "cache:%s", c->cfg.name);
		dgi_pstore_meta_put(g->ps, key, NULL, 0);
		dgi_pstore_drop(g->ps, c->id, UINT32_MAX);
	}
	/* the entries go now (and the writes waiting on them are answered);
	 * the partitions' tables, marks and affinity once no operation that
	 * began before this can use them (an operation beginning later sees
	 * `dead`); the handle stays valid (dead) until stop */
	dgi_pw_forget_all(g, c, DG_ERR_CLOSED);
	for (uint32_t p = 0; p < c->cfg.partitions; p++) {
		dgi_part_lock(&c->parts[p]);
		dgi_part_clear(&c->parts[p]);
		atomic_store(&c->parts[p].state, P_NONE);
		dgi_part_unlock(&c->parts[p]);
	}
	c->grave_tag = dgi_epoch_retire();
	dgi_log("info", "CACHE-DESTROYED", "cache=\"%s\"", c->cfg.name);
}

void dgi_grid_reclaim(dgi_grid *g, bool all)
{
	dgi_aff *gone = NULL;
	pthread_mutex_lock(&g->mu);
	for (dgi_aff **pp = &g->limbo; *pp != NULL;) {
		dgi_aff *a = *pp;
		if (all || dgi_epoch_passed(a->retired_tag)) {
			*pp = a->retired_next;
			a->retired_next = gone;
			gone = a;
		} else {
			pp = &a->retired_next;
		}
	}
	for (dg_cache *c = g->grave; c != NULL; c = c->grave_next)
		if (!c->reclaimed && (all || dgi_epoch_passed(c->grave_tag))) {
			cache_free_parts(c);
			c->reclaimed = true;
		}
	pthread_mutex_unlock(&g->mu);
	while (gone != NULL) {
		dgi_aff *a = gone;
		gone = a->retired_next;
		dgi_aff_free(a);
	}
}

void dgi_grid_limbo(dgi_grid *g, uint32_t *affs, uint32_t *caches)
{
	*affs = *caches = 0;
	pthread_mutex_lock(&g->mu);
	for (dgi_aff *a = g->limbo; a != NULL; a = a->retired_next)
		(*affs)++;
	for (dg_cache *c = g->grave; c != NULL; c = c->grave_next)
		*caches += !c->reclaimed;
	pthread_mutex_unlock(&g->mu);
}

/* The other nodes of the current topology (servers and clients). */
static uint32_t others(dgi_grid *g, dg_node_id *ids, uint32_t cap)
{
	uint32_t n = 0;
	pthread_mutex_lock(&g->mu);
	for (uint32_t i = 0; g->topo != NULL && i < g->topo->count && n < cap; i++)
		if (g->topo->nodes[i].id != g->self)
			ids[n++] = g->topo->nodes[i].id;
	pthread_mutex_unlock(&g->mu);
	return n;
}

/* Sends a request to every other node and waits for every answer; the
 * first error other than a node leaving is returned. */
static dg_err to_all(dgi_grid *g, dg_msg_type type, const void *body, int64_t *sum)
{
	dg_node_id ids[1024];
	uint32_t n = others(g, ids, 1024);
	dg_err first = DG_OK;
	for (uint32_t i = 0; i < n; i++) {
		dgi_msg_ack ack = { 0, 0 };
		dg_err e = dg_tp_call(g->tp, ids[i], type, body, g->cfg.request_timeout_ms, &ack, NULL);
		if (e == DG_OK)
			e = (dg_err)ack.res;
		if (e != DG_OK)
			dgi_log("warn", "CACHE-REQUEST", "type=%s to=%016llx err=\"%s\"",
			    dg_msg_name(type), (unsigned long long)ids[i], dg_strerror(e));
		if (e == DG_ERR_CONN_BROKEN || e == DG_ERR_UNREACHABLE)
			continue; /* left meanwhile: it learns on rejoin */
		if (e == DG_OK && sum != NULL)
			*sum += ack.value;
		if (e != DG_OK && first == DG_OK)
			first = e;
	}
	return first;
}

dg_err dgi_grid_cache_create(dgi_grid *g, const dg_cache_config *cfg, dg_cache **out)
{
	if (g == NULL || cfg == NULL || out == NULL)
		return DG_ERR_INVAL;
	pthread_mutex_lock(&g->mu);
	dg_cache *c = NULL;
	dg_err e = local_create(g, cfg, true, &c);
	pthread_mutex_unlock(&g->mu);
	if (e != DG_OK)
		return e;
	dgi_msg_cfg m;
	dgi_cfg_to_msg(cfg, &m);
	if ((e = to_all(g, DGI_MSG_CACHE_CREATE, &m, NULL)) != DG_OK) {
		dgi_log("error", "CACHE-CREATE", "cache=\"%s\" err=\"%s\"", cfg->name,
		    dg_strerror(e));
		return e;
	}
	*out = c;
	return DG_OK;
}

dg_err dgi_grid_cache_find(dgi_grid *g, const char *name, dg_cache **out)
{
	if (g == NULL || name == NULL || out == NULL)
		return DG_ERR_INVAL;
	dg_cache *c = dgi_grid_cache(g, dgi_cache_id(name));
	if (c == NULL || strcmp(c->cfg.name, name) != 0)
		return DG_ERR_NOT_FOUND;
	*out = c;
	return DG_OK;
}

dg_err dgi_grid_cache_destroy(dgi_grid *g, const char *name)
{
	dg_cache *c;
	dg_err e = dgi_grid_cache_find(g, name, &c);
	if (e != DG_OK)
		return e;
	dgi_msg_ack m = { c->id, 0 };
	e = to_all(g, DGI_MSG_CACHE_DESTROY, &m, NULL);
	pthread_mutex_lock(&g->mu);
	if (!atomic_load(&c->dead))
		local_destroy(g, c);
	pthread_mutex_unlock(&g->mu);
	return e == DG_ERR_NOT_FOUND ? DG_OK : e;
}

struct list_ctx {
	dg_cache_config *out;
	size_t cap, n;
};

static void list_one(void *ctx, uint32_t key, void *value)
{
	struct list_ctx *l = ctx;
	dg_cache *c = value;
	(void)key;
	if (atomic_load(&c->dead))
		return;
	if (l->n < l->cap)
		l->out[l->n] = c->cfg;
	l->n++;
}

size_t dgi_grid_cache_list(dgi_grid *g, dg_cache_config *out, size_t cap)
{
	struct list_ctx l = { out, cap, 0 };
	dgi_intmap_each(&g->caches, list_one, &l);
	return l.n;
}

/* ---- handlers: create, destroy, configs ---- */

static void on_create(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	dgi_grid *g = ctx;
	dg_cache_config cfg;
	cfg_from_msg(in->body, &cfg);
	pthread_mutex_lock(&g->mu);
	dg_err e = local_create(g, &cfg, true, NULL);
	pthread_mutex_unlock(&g->mu);
	dgi_msg_ack ack = { e, 0 };
	dg_tp_reply(tp, in, DGI_MSG_ACK, &ack);
}

static void on_destroy(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	dgi_grid *g = ctx;
	const dgi_msg_ack *m = in->body;
	pthread_mutex_lock(&g->mu);
	dg_cache *c = dgi_grid_cache(g, (uint32_t)m->res);
	if (c != NULL)
		local_destroy(g, c);
	pthread_mutex_unlock(&g->mu);
	dgi_msg_ack ack = { DG_OK, 0 };
	dg_tp_reply(tp, in, DGI_MSG_ACK, &ack);
}

struct cfg_enc {
	dg_writer *w;
	uint32_t n;
};

static void enc_one(void *ctx, uint32_t key, void *value)
{
	struct cfg_enc *x = ctx;
	dg_cache *c = value;
	(void)key;
	if (atomic_load(&c->dead))
		return;
	dgi_msg_cfg m;
	dgi_cfg_to_msg(&c->cfg, &m);
	dg_msg_row_of(DGI_MSG_CACHE_CREATE)->encode(x->w, &m);
	x->n++;
}

static void count_one(void *ctx, uint32_t key, void *value)
{
	(void)key;
	if (!atomic_load(&((dg_cache *)value)->dead))
		(*(uint32_t *)ctx)++;
}

/* Every cache config of this node, to node `to` (a one-way push), or as
 * the answer to req (a new node's question at join) when req is not NULL:
 * answered even when empty. */
static dg_err send_configs_as(dgi_grid *g, dg_node_id to, const dg_msg_in *req)
{
	uint32_t n = 0;
	dgi_intmap_each(&g->caches, count_one, &n);
	if (n == 0 && req == NULL)
		return DG_OK;
	dg_buf b;
	dg_writer w;
	dg_buf_init(&b);
	dg_writer_init(&w, g->reg, &b);
	/* count and encode under grid->mu: no cache comes or goes between */
	pthread_mutex_lock(&g->mu);
	n = 0;
	dgi_intmap_each(&g->caches, count_one, &n);
	dg_write_list_begin(&w, n * 9);
	struct cfg_enc x = { &w, 0 };
	dgi_intmap_each(&g->caches, enc_one, &x);
	pthread_mutex_unlock(&g->mu);
	dg_write_end(&w);
	dg_err e = dg_writer_finish(&w);
	if (e == DG_OK) {
		dg_msg_raw body = { { b.data, (uint32_t)b.len } };
		e = req != NULL ? dg_tp_reply(g->tp, req, DGI_MSG_CACHE_CONFIGS, &body) :
		    dg_tp_send(g->tp, to, DGI_MSG_CACHE_CONFIGS, &body);
	}
	dg_buf_free(&b);
	return e;
}

_Atomic bool dgi_test_no_config_push; /* tests: pushes to new nodes never arrive */

static dg_err send_configs(dgi_grid *g, dg_node_id to)
{
	if (atomic_load_explicit(&dgi_test_no_config_push, memory_order_relaxed))
		return DG_OK;
	return send_configs_as(g, to, NULL);
}

/* Learns the caches of a CACHE_CONFIGS list (from: its sender). */
static void take_configs(dgi_grid *g, const dg_msg_raw *raw, dg_node_id from)
{
	dg_reader r;
	uint32_t count;
	dg_reader_init(&r, g->reg, raw->list.ptr, raw->list.len);
	if (dg_read_begin(&r, DG_LIST, &count) != DG_OK || count % 9 != 0)
		return;
	for (uint32_t i = 0; i < count / 9; i++) {
		dgi_msg_cfg m;
		if (dg_msg_row_of(DGI_MSG_CACHE_CREATE)->decode(&r, &m) != DG_OK)
			return;
		dg_cache_config cfg;
		cfg_from_msg(&m, &cfg);
		pthread_mutex_lock(&g->mu);
		dg_err e = local_create(g, &cfg, false, NULL);
		pthread_mutex_unlock(&g->mu);
		if (e != DG_OK)
			dgi_log("error", "CACHE-CONFLICT", "cache=\"%s\" from=%016llx err=\"%s\"",
			    cfg.name, (unsigned long long)from, dg_strerror(e));
	}
}

/* CACHE_CONFIGS: a push (one-way) is learnt; a request (a node joining:
 * its own list, empty) is answered with this node's. */
static void on_configs(dg_tp *tp, const dg_msg_in *in, void *ctx)
{
	dgi_grid *g = ctx;
	(void)tp;
	take_configs(g, in->body, in->from);
	if (!(in->flags & DG_FRAME_ONEWAY))
		send_configs_as(g, in->from, in);
}

struct configs_wait {
	dgi_grid *g;
	sem_t done;
};

static void on_configs_res(void *ctx, dg_err err, const dg_msg_in *reply)
{
	struct configs_wait *w = ctx;
	if (err == DG_OK && reply->body != NULL)
		take_configs(w->g, reply->body, reply->from);
	sem_post(&w->done);
}

/* A node that joined learns every cache of the cluster before its start
 * returns: it asks every other server of t.  The others' pushes (their
 * topology listeners, on their notifier threads) may come after its own
 * program created its caches — as new ones, owning empty partitions that
 * the cluster holds data for. */
static void ask_configs(dgi_grid *g, const dg_topology *t)
{
	static const uint8_t empty_list[] = { 0x0F, 0x00 }; /* an empty LIST */
	dg_msg_raw none = { { empty_list, sizeof(empty_list) } };
	struct configs_wait w = { g, { { 0 } } };
	sem_init(&w.done, 0, 0);
	uint32_t asked = 0;
	for (uint32_t i = 0; i < t->count; i++) {
		if (t->nodes[i].id == g->self || !is_server(t, t->nodes[i].id))
			continue;
		if (dg_tp_request(g->tp, t->nodes[i].id, DGI_MSG_CACHE_CONFIGS, &none,
		    g->cfg.request_timeout_ms, on_configs_res, &w) == DG_OK)
			asked++;
	}
	for (uint32_t i = 0; i < asked; i++)
		while (sem_wait(&w.done) != 0)
			;
	sem_destroy(&w.done);
}

/* ---- persistence ---- */

dg_err dgi_grid_persist(dgi_grid *g, dg_cache *c, uint32_t part, const uint8_t *key,
    uint32_t klen, const uint8_t *val, uint32_t vlen, const dgi_pver *ver,
    int64_t expire_ms, bool tomb, uint64_t op_node, uint64_t op_seq)
{
	if (!c->cfg.persistence || g->ps == NULL)
		return DG_OK;
	dgi_lat_slow(); /* (an operation waiting for LMDB: always timed) */
	dgi_prec rec = { c->id, part, key, klen, val, vlen, *ver, expire_ms, op_node, op_seq };
	if (tomb) { /* a record with no value bytes and the flag */
		rec.val = (const uint8_t *)"";
		rec.vlen = 0;
		rec.ver.flags = DGI_ENTRY_TOMB;
	}
	return dgi_pstore_write(g->ps, &rec, 1);
}

struct load_ctx {
	dgi_grid *g;
	dg_cache *c;
	uint64_t n;
};

static dg_err load_rec(void *ctx, const dgi_prec *rec)
{
	struct load_ctx *l = ctx;
	if (rec->part >= l->c->cfg.partitions || rec->val == NULL)
		return DG_OK;
	dgi_part *pt = &l->c->parts[rec->part];
	uint64_t h = dgi_key_hash(rec->key, rec->klen);
	bool tomb = (rec->ver.flags & DGI_ENTRY_TOMB) != 0;
	dgi_pver ver = rec->ver;
	ver.flags = 0;
	dgi_part_lock(pt);
	dg_err e = dgi_part_set(pt, h, rec->key, rec->klen, tomb ? NULL : rec->val,
	    tomb ? 0 : rec->vlen, &ver, rec->expire_ms, rec->op_node, rec->op_seq,
	    tomb ? DGI_ENTRY_TOMB : 0, NULL);
	dgi_part_unlock(pt);
	if (e == DG_ERR_LIMIT || e == DG_ERR_INVAL) /* (this code never writes one) */
		dgi_log("error", "RELOAD-REFUSED", "cache=\"%s\" partition=%u topver=%lld klen=%u "
		    "err=\"%s\"", l->c->cfg.name, rec->part, (long long)ver.topver, rec->klen,
		    dg_strerror(e));
	l->n++;
	return e;
}

static dg_err load_meta(void *ctx, const char *name, const uint8_t *val, size_t len)
{
	dgi_grid *g = ctx;
	if (strcmp(name, "topology_version") == 0) {
		char s[32];
		size_t n = len < sizeof(s) - 1 ? len : sizeof(s) - 1;
		memcpy(s, val, n);
		s[n] = 0;
		g->persisted_topver = strtoll(s, NULL, 10);
		return DG_OK;
	}
	if (strcmp(name, "baseline") == 0) {
		/* addresses each ended by '\n' (persist_baseline): kept as
		 * persisted, and a copy split in place for the membership */
		uint32_t n = 0;
		for (size_t i = 0; i < len; i++)
			n += val[i] == '\n';
		char *b = dgi_alloc(len + 1), *split = dgi_alloc(len + 1);
		const char **a = dgi_calloc(n ? n : 1, sizeof(char *));
		if (b == NULL || split == NULL || a == NULL) {
			dgi_free(b);
			dgi_free(split);
			dgi_free(a);
			return DG_ERR_NOMEM;
		}
		memcpy(b, val, len);
		b[len] = 0;
		memcpy(split, val, len);
		split[len] = 0;
		uint32_t k = 0;
		for (char *p = split, *nl; (nl = strchr(p, '\n')) != NULL; p = nl + 1) {
			*nl = 0;
			if (nl > p)
				a[k++] = p;
		}
		g->persisted_bl = b;
		g->loaded_buf = split;
		g->loaded_bl = a;
		g->nloaded_bl = k;
		return DG_OK;
	}
	if (strncmp(name, "cache:", 6) != 0)
		return DG_OK;
	dgi_msg_cfg m;
	dg_cache_config cfg;
	if (dg_msg_decode(DGI_MSG_CACHE_CREATE, g->reg, val, len, &m) != DG_OK) {
		dgi_log("error", "CACHE-META-BAD", "key=\"%s\"", name);
		return DG_OK;
	}
	cfg_from_msg(&m, &cfg);
	dg_cache *c = NULL;
	pthread_mutex_lock(&g->mu);
	dg_err e = local_create(g, &cfg, false, &c);
	pthread_mutex_unlock(&g->mu);
	if (e != DG_OK)
		return e;
	struct load_ctx l = { g, c, 0 };
	uint64_t t0 = dgi_now_ms();
	e = dgi_pstore_load(g->ps, c->id, load_rec, &l);
	for (uint32_t p = 0; p < c->cfg.partitions; p++) {
		dgi_part_lock(&c->parts[p]);
		c->parts[p].reloaded = true;
		dgi_part_unlock(&c->parts[p]);
	}
	dgi_log("info", "CACHE-LOADED", "cache=\"%s\" entries=%llu ms=%llu err=\"%s\"",
	    cfg.name, (unsigned long long)l.n, (unsigned long long)(dgi_now_ms() - t0),
	    dg_strerror(e));
	return e;
}

dg_err dgi_grid_rekey(dgi_grid *g, const uint8_t master[32])
{
	return g->ps == NULL ? DG_ERR_STATE : dgi_pstore_rekey(g->ps, master);
}

int64_t dgi_grid_version_floor(dgi_grid *g)
{
	return g->persisted_topver;
}

static void free_persisted(dgi_grid *g)
{
	dgi_free(g->persisted_bl);
	dgi_free(g->loaded_buf);
	dgi_free(g->loaded_bl);
}

uint32_t dgi_grid_persisted_baseline(dgi_grid *g, const char *const **addrs)
{
	*addrs = g->loaded_bl;
	return g->nloaded_bl;
}

/* ---- worker pool (writes to persistent caches) and sweeper ---- */

_Atomic uint32_t dgi_grid_queue_jobs = GRID_QUEUE_JOBS;

dg_err dgi_grid_job_push(dgi_grid *g, struct job *j)
{
	pthread_mutex_lock(&g->jmu);
	bool room = g->jcount < atomic_load(&dgi_grid_queue_jobs) &&
	    (g->jcount == 0 || g->jbytes + j->raw_len <= GRID_QUEUE_BYTES);
	if (room) {
		j->next = NULL;
		if (g->jtail != NULL)
			g->jtail->next = j;
		else
			g->jhead = j;
		g->jtail = j;
		g->jcount++;
		g->jbytes += j->raw_len;
		pthread_cond_signal(&g->jcv);
	}
	pthread_mutex_unlock(&g->jmu);
	if (room)
		return DG_OK;
	uint64_t n = atomic_fetch_add(&g->jrefused, 1) + 1, now = dgi_now_ms();
	uint64_t last = atomic_load(&g->jlogged_ms);
	if (now - last >= 5000 && atomic_compare_exchange_strong(&g->jlogged_ms, &last, now))
		dgi_log("warn", "JOBS-FULL", "queued=%u refused=%llu why=\"persistent writes "
		    "come faster than the disk takes them: answered DG_ERR_BUSY\"",
		    atomic_load(&dgi_grid_queue_jobs), (unsigned long long)n);
	return DG_ERR_BUSY;
}

static void *worker(void *arg)
{
	dgi_thread_name("dg-worker");
	dgi_grid *g = arg;
	pthread_mutex_lock(&g->jmu);
	for (;;) {
		while (g->jhead == NULL && !g->jstop)
			pthread_cond_wait(&g->jcv, &g->jmu);
		struct job *j = g->jhead;
		if (j == NULL)
			break;
		g->jhead = j->next;
		if (g->jhead == NULL)
			g->jtail = NULL;
		g->jcount--;
		g->jbytes -= j->raw_len;
		pthread_mutex_unlock(&g->jmu);
		dgi_epoch_enter(); /* a handler's work, continued here */
		dgi_ops_run_job(g, j);
		dgi_epoch_leave();
		dgi_free(j);
		pthread_mutex_lock(&g->jmu);
	}
	pthread_mutex_unlock(&g->jmu);
	return NULL;
}

struct sweep_ctx {
	dgi_grid *g;
	int64_t wall;
	uint64_t mono;
};

struct forget {
	dgi_grid *g;
	dg_cache *c;
	uint32_t part;
};

/* An entry or tombstone leaving memory for good: its LMDB record too.
 * Runs under the partition lock (LMDB may wait for a group commit: the
 * sweeper is in no hurry). */
static void forget_persisted(void *ctx, const dgi_entry *e)
{
	struct forget *f = ctx;
	dgi_pver ver = dgi_entry_ver(e);
	dgi_grid_persist(f->g, f->c, f->part, dgi_entry_key(e), dgi_entry_klen(e), NULL, 0, &ver, 0,
	    false, 0, 0);
}

static void sweep_cache(void *ctx, uint32_t key, void *value)
{
	struct sweep_ctx *s = ctx;
	dg_cache *c = value;
	(void)key;
	dgi_epoch_enter();
	for (uint32_t p = 0; p < c->cfg.partitions && !atomic_load(&c->dead); p++) {
		dgi_part *pt = &c->parts[p];
		dgi_part_lock(pt);
		if (pt->pending != NULL)
			dgi_pw_tick(s->g, c, p, s->mono); /* deadlines, records to send again */
		if (pt->psync_n > 0)
			dgi_psync_tick(s->g, c, p, s->mono); /* old owners that did not answer */
		if ((c->cfg.ttl_ms != 0 && pt->count > 0) || pt->count > pt->live) {
			/* expired entries and tombstones past their time; a
			 * persistent cache's records of them go too (the rule
			 * deletes a record only if it is not newer) */
			uint32_t n = dgi_part_expire_cb(pt, s->wall, 4096,
			    c->cfg.persistence ? forget_persisted : NULL, &(struct forget){ s->g, c, p });
			atomic_fetch_add_explicit(&c->expired, n, memory_order_relaxed);
		}
		if (!dgi_part_limbo_empty(pt))
			dgi_part_limbo_flush(pt); /* retired entries and tables */
		dgi_part_unlock(pt);
	}
	dgi_epoch_leave();
}

_Atomic uint32_t dgi_test_sweep_ms;

static void *sweeper(void *arg)
{
	dgi_thread_name("dg-sweeper");
	dgi_grid *g = arg;
	pthread_mutex_lock(&g->mu);
	while (!g->stopping) {
		/* once a second, or when a failed PSYNC question is due again
		 * (psync.c: the partition's updates wait for its answer) */
		uint32_t period = atomic_load(&dgi_test_sweep_ms);
		uint64_t wait = period != 0 ? period : 1000;
		uint64_t due = atomic_load(&g->psync_due_ms), now = dgi_now_ms();
		if (due != 0)
			wait = due <= now ? 0 : due - now < wait ? due - now : wait;
		if (wait > 0) {
			struct timespec ts;
			dgi_abstime_in(&ts, (uint32_t)wait);
			pthread_cond_timedwait(&g->cv, &g->mu, &ts);
		}
		if (g->stopping)
			break;
		due = atomic_load(&g->psync_due_ms);
		if (due != 0 && due <= dgi_now_ms()) /* (one set since is swept next time) */
			atomic_compare_exchange_strong(&g->psync_due_ms, &due, 0);
		pthread_mutex_unlock(&g->mu);
		struct sweep_ctx s = { g, dgi_wall_ms(), dgi_now_ms() };
		dgi_intmap_each(&g->caches, sweep_cache, &s);
		dgi_rent_sweep(g);
		dgi_grid_reclaim(g, false);
		pthread_mutex_lock(&g->mu);
	}
	pthread_mutex_unlock(&g->mu);
	return NULL;
}

/* ---- start and stop ---- */

static void free_cache_cb(void *ctx, uint32_t key, void *value)
{
	(void)ctx;
	(void)key;
	cache_free(value);
}

dg_err dgi_grid_start(dg_tp *tp, dg_registry *reg, const dgi_grid_config *cfg,
    dgi_grid **out)
{
	dgi_cache_msgs_define();
	dgi_grid *g = dgi_calloc(1, sizeof(*g));
	if (g == NULL)
		return DG_ERR_NOMEM;
	g->tp = tp;
	g->reg = reg;
	g->cfg = *cfg;
	if (g->cfg.request_timeout_ms == 0)
		g->cfg.request_timeout_ms = 10000;
	if (g->cfg.rebalance_batch_bytes == 0)
		g->cfg.rebalance_batch_bytes = 512 * 1024;
	g->self = dg_tp_self(tp);
	pthread_mutex_init(&g->mu, NULL);
	pthread_cond_init(&g->cv, NULL);
	pthread_mutex_init(&g->jmu, NULL);
	pthread_cond_init(&g->jcv, NULL);
	pthread_mutex_init(&g->umu, NULL);
	atomic_init(&g->next_pw, 1);
	dg_err e = dgi_intmap_init(&g->caches);
	if (e != DG_OK) {
		dgi_free(g);
		return e;
	}
	if (cfg->data_dir != NULL && cfg->data_dir[0] != 0) {
		dgi_pstore_config pc;
		dgi_pstore_config_init(&pc);
		pc.dir = cfg->data_dir;
		if (cfg->storage_map_size)
			pc.map_size = cfg->storage_map_size;
		pc.nosync = cfg->storage_nosync;
		pc.recover = cfg->storage_recover;
		pc.master_key = cfg->master_key;
		if ((e = dgi_pstore_open(&pc, &g->ps)) != DG_OK)
			goto fail;
		if ((e = dgi_pstore_meta_each(g->ps, load_meta, g)) != DG_OK)
			goto fail;
	}
	dgi_ops_register(g);
	dg_tp_handle(tp, DGI_MSG_CACHE_CREATE, on_create, g);
	dg_tp_handle(tp, DGI_MSG_CACHE_DESTROY, on_destroy, g);
	dg_tp_handle(tp, DGI_MSG_CACHE_CONFIGS, on_configs, g);
	dgi_rebalance_register(g);
	int i;
	for (i = 0; i < GRID_WORKERS; i++)
		if (pthread_create(&g->workers[i], NULL, worker, g) != 0)
			break;
	if (i < GRID_WORKERS || pthread_create(&g->rebalancer, NULL, dgi_rebalancer, g) != 0 ||
	    pthread_create(&g->sweeper, NULL, sweeper, g) != 0) {
		/* stop what started (simplest: abort; threads are a resource
		 * the system refuses only when it is exhausted) */
		dgi_log("error", "GRID-THREADS", "why=\"pthread_create failed\"");
		abort();
	}
	g->threads_up = true;
	*out = g;
	return DG_OK;
fail:
	dgi_pstore_close(g->ps);
	dgi_intmap_each(&g->caches, free_cache_cb, NULL);
	dgi_intmap_destroy(&g->caches);
	free_persisted(g);
	dgi_free(g);
	return e;
}

dg_err dgi_grid_joined(dgi_grid *g, dg_member *m)
{
	/* held until dgi_grid_stop: the handlers ask it for the lease
	 * (dg_member_serving) until they are unset, after the membership
	 * stopped (test_counters_through_primary_crashes, ASan) */
	g->m = dgi_member_hold(m);
	g->lease = dgi_member_lease_of(m);
	dg_err e = dg_member_listen(m, on_topology, g);
	if (e != DG_OK)
		return e;
	dg_topology *t = dg_member_topology(m);
	if (t != NULL) {
		on_topology(g, NULL, t);
		ask_configs(g, t);
		dg_topology_release(t);
	}
	return DG_OK;
}

void dgi_grid_stop(dgi_grid *g)
{
	if (g == NULL)
		return;
	for (unsigned t = DGI_MSG_UPDATE; t < DGI_MSG_CACHE_LAST; t++)
		dg_tp_handle(g->tp, (dg_msg_type)t, NULL, NULL);
	dg_tp_quiesce(g->tp);
	pthread_mutex_lock(&g->mu);
	g->stopping = true;
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->mu);
	pthread_mutex_lock(&g->jmu);
	g->jstop = true;
	pthread_cond_broadcast(&g->jcv);
	pthread_mutex_unlock(&g->jmu);
	if (g->threads_up) {
		for (int i = 0; i < GRID_WORKERS; i++)
			pthread_join(g->workers[i], NULL);
		pthread_join(g->rebalancer, NULL);
		pthread_join(g->sweeper, NULL);
	}
	dgi_psync_stop(g);
	dgi_grid_reclaim(g, true); /* no section of this node is left */
	dgi_intmap_each(&g->caches, free_cache_cb, NULL);
	dgi_intmap_destroy(&g->caches);
	while (g->grave != NULL) {
		dg_cache *c = g->grave;
		g->grave = c->grave_next;
		cache_free(c);
	}
	dgi_pstore_close(g->ps);
	if (g->topo != NULL)
		dg_topology_release(g->topo);
	dgi_member_release(g->m);
	free_persisted(g);
	dgi_uall_free_all(g);
	pthread_mutex_destroy(&g->umu);
	dgi_free(g);
}

/* Every server of t but `without`, STANDBY ones included. */
static dgi_aff *aff_all_servers(const dg_cache *c, const dg_topology *t, dg_node_id without)
{
	dg_node_id ids[1024];
	int64_t orders[1024];
	uint32_t n = 0;
	for (uint32_t i = 0; i < t->count && n < 1024; i++) {
		if (t->nodes[i].attrs & DG_NODE_CLIENT || t->nodes[i].id == without)
			continue;
		ids[n] = t->nodes[i].id;
		orders[n++] = t->nodes[i].order;
	}
	uint32_t copies = c->cfg.mode == DG_REPLICATED ? n : 1 + c->cfg.backups;
	return dgi_aff_build(t->version, c->cfg.partitions, copies, ids, orders, n, c->g->self);
}

dgi_aff *dgi_grid_aff_without_self(dgi_grid *g, dg_cache *c)
{
	pthread_mutex_lock(&g->mu);
	dgi_aff *a = g->topo != NULL ? aff_for(c, g->topo, g->self) : NULL;
	if (a != NULL && a->nnodes == 0) {
		/* the last baseline node leaving: the coordinator then lets
		 * every server own data (PROTOCOL.md, "Baseline"), so the
		 * STANDBY servers are the next owners to hand over to */
		dgi_aff_free(a);
		a = aff_all_servers(c, g->topo, g->self);
	}
	pthread_mutex_unlock(&g->mu);
	return a;
}
