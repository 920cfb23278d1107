/*
 * metrics.c — the node's metrics in Prometheus text exposition format
 * 0.0.4 (metrics.h), served at GET /metrics by metrics_http.c.
 *
 * Every family has a `# HELP` and a `# TYPE` line followed by all of its
 * samples (the format wants a family's samples together).  Label values
 * are escaped as the format says (\\, \", \n).  Names start with datagrid_;
 * counters end in _total and count since the node started.
 *
 * Node
 *   datagrid_node_info{node="<16 hex id>",address="<url>",version="0.1.0"} 1  gauge
 *   datagrid_node_uptime_seconds                   gauge
 *   datagrid_topology_version                      gauge  the topology this node has installed
 *   datagrid_cluster_nodes                         gauge  nodes in it (servers and clients)
 *   datagrid_coordinator                           gauge  1 on the node coordinating it
 *   datagrid_segmented, datagrid_quorum_voters, datagrid_quorum_reachable   gauges
 *   datagrid_segmentations_total, datagrid_rejoins_total,
 *   datagrid_lease_losses_total,
 *   datagrid_segmented_dials_total                 counters (PROTOCOL.md, "Majority")
 *   datagrid_caches                                gauge  caches on this node (all of them, even
 *                                                         past DGI_METRICS_CACHES_MAX)
 * Transport (dg_tp_get_stats: this node's totals over every peer)
 *   datagrid_transport_frames_sent_total, datagrid_transport_frames_received_total,
 *   datagrid_transport_bytes_sent_total, datagrid_transport_bytes_received_total,
 *   datagrid_transport_connects_total, datagrid_transport_disconnects_total,
 *   datagrid_transport_auth_failures_total, datagrid_transport_handshake_failures_total,
 *   datagrid_transport_malformed_frames_total, datagrid_transport_dropped_frames_total,
 *   datagrid_transport_busy_total                  counters
 * Messages, per type in use (dg_tp_metrics; label type="CACHE_UPDATE", ...)
 *   datagrid_messages_sent_total, datagrid_messages_received_total,
 *   datagrid_message_bytes_sent_total, datagrid_message_bytes_received_total,
 *   datagrid_message_failures_total                counters
 * Caches, per cache (dg_cache_get_metrics; label cache="<name>")
 *   datagrid_cache_puts_total, datagrid_cache_gets_total, datagrid_cache_removes_total,
 *   datagrid_cache_hits_total, datagrid_cache_misses_total          counters (ops started here)
 *   datagrid_cache_entries, datagrid_cache_primary_entries, datagrid_cache_bytes   gauges
 *   datagrid_cache_partitions{state="owning"|"moving"|"lost"}      gauge
 *   datagrid_cache_partitions_repairing                            gauge
 *   datagrid_cache_rebalance_partitions_done_total                 counter
 *   datagrid_cache_rebalance_partitions_left                       gauge
 *   datagrid_cache_rebalance_bytes_total, datagrid_cache_expired_total,
 *   datagrid_cache_remaps_total                                    counters
 *   datagrid_cache_op_duration_seconds{cache,op="get"|"put"|"remove"}  histogram:
 *       _bucket{le=...} (1-2-5 bounds from 1 µs, +Inf), _sum, _count
 * Transactions (dg_tx_get_metrics)
 *   datagrid_tx_started_total, datagrid_tx_committed_total, datagrid_tx_rolled_back_total,
 *   datagrid_tx_conflicts_total, datagrid_tx_deadlocks_total, datagrid_tx_timeouts_total,
 *   datagrid_tx_one_phase_total, datagrid_tx_heap_bytes_total,
 *   datagrid_tx_participant_prepared_total, datagrid_tx_participant_committed_total,
 *   datagrid_tx_recoveries_total{outcome="commit"|"rollback"}      counters
 *   datagrid_tx_locks_held, datagrid_tx_lock_waiters               gauges
 *
 * Memory: the text goes into the caller's reusable dg_buf (grown
 * geometrically); counters are read into fixed-size arrays on the stack
 * (DG_MSG__COUNT message rows, DGI_METRICS_CACHES_MAX caches), so a scrape
 * allocates only when the reply outgrows the buffer.
 */
#include "metrics.h"
#include "node_int.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* The text being written, with a sticky error: after the first failure
 * every write is skipped and the error is returned at the end. */
typedef struct mtext {
	dg_buf *t_buf;
	dg_err t_err;
} mtext;

static void put_fmt(mtext *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put_fmt(mtext *t, const char *fmt, ...)
{
	dg_buf *b = t->t_buf;
	while (t->t_err == DG_OK) {
		size_t room = b->cap - b->len;
		va_list ap;
		va_start(ap, fmt);
		int n = vsnprintf(room ? (char *)b->data + b->len : NULL, room, fmt, ap);
		va_end(ap);
		if (n < 0) {
			t->t_err = DG_ERR_INVAL;
		} else if ((size_t)n < room) {
			b->len += (size_t)n;
			return;
		} else {
			/* +1: vsnprintf writes its NUL inside the room */
			t->t_err = dg_buf_reserve(b, (size_t)n + 1);
		}
	}
}

static void put_mem(mtext *t, const char *s, size_t n)
{
	if (t->t_err != DG_OK || n == 0)
		return;
	if ((t->t_err = dg_buf_reserve(t->t_buf, n)) != DG_OK)
		return;
	memcpy(t->t_buf->data + t->t_buf->len, s, n);
	t->t_buf->len += n;
}

/* A label value between quotes, with \, " and newline escaped. */
static void put_label_value(mtext *t, const char *v)
{
	put_mem(t, "\"", 1);
	for (const char *p = v; *p != 0; ) {
		size_t plain = strcspn(p, "\\\"\n");
		put_mem(t, p, plain);
		p += plain;
		if (*p == 0)
			break;
		put_mem(t, *p == '\n' ? "\\n" : *p == '"' ? "\\\"" : "\\\\", 2);
		p++;
	}
	put_mem(t, "\"", 1);
}

static void put_family(mtext *t, const char *name, const char *type, const char *help)
{
	put_fmt(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

typedef struct label {
	const char *l_key;
	const char *l_val;
} label;

/* name{k1="v1",...} — the part of a sample before its value. */
static void put_series(mtext *t, const char *name, const label *ls, size_t nl)
{
	put_mem(t, name, strlen(name));
	for (size_t i = 0; i < nl; i++) {
		put_mem(t, i == 0 ? "{" : ",", 1);
		put_mem(t, ls[i].l_key, strlen(ls[i].l_key));
		put_mem(t, "=", 1);
		put_label_value(t, ls[i].l_val);
	}
	if (nl > 0)
		put_mem(t, "}", 1);
}

static void put_u64(mtext *t, const char *name, const label *ls, size_t nl, uint64_t v)
{
	put_series(t, name, ls, nl);
	put_fmt(t, " %" PRIu64 "\n", v);
}

/* A family of one unlabelled sample. */
static void put_one(mtext *t, const char *name, const char *type, const char *help,
    uint64_t v)
{
	put_family(t, name, type, help);
	put_u64(t, name, NULL, 0, v);
}

/* ---- tables: one row per family (or per labelled sample of a family) ---- */

typedef struct field {
	const char *f_member;    /* the struct member: dgctl metrics' JSON name */
	const char *f_name;
	const char *f_type;      /* "counter" or "gauge" */
	const char *f_help;
	const char *f_lkey;      /* a constant label of this row, or NULL */
	const char *f_lval;
	size_t f_off;            /* of the value in the instance's struct */
	size_t f_size;           /* 4 or 8 */
} field;

#define FIELD(st, member, name, type, help) \
	{ #member, name, type, help, NULL, NULL, offsetof(st, member), \
	  sizeof(((st *)0)->member) }
#define FIELD_L(st, member, name, type, help, lk, lv) \
	{ #member, name, type, help, lk, lv, offsetof(st, member), \
	  sizeof(((st *)0)->member) }

static uint64_t field_value(const void *base, const field *f)
{
	const char *p = (const char *)base + f->f_off;
	if (f->f_size == sizeof(uint32_t)) {
		uint32_t v;
		memcpy(&v, p, sizeof(v));
		return v;
	}
	uint64_t v;
	memcpy(&v, p, sizeof(v));
	return v;
}

/* The instances a table is written for: structs every in_stride bytes,
 * each with a label value (a const char * every in_stride bytes too). */
typedef struct instances {
	const char *in_key;          /* the instance label ("type", "cache"); NULL: unlabelled */
	const void *in_first;        /* the first instance's struct */
	const void *in_names;        /* the first instance's const char * label value */
	size_t in_stride;
	size_t in_n;
} instances;

static const char *instance_name(const instances *in, size_t i)
{
	const char *p = (const char *)in->in_names + i * in->in_stride;
	const char *name;
	memcpy(&name, p, sizeof(name));
	return name;
}

/* Every row for every instance, family by family; rows of one family are
 * adjacent in the table and share its HELP and TYPE lines. */
static void put_table(mtext *t, const field *fs, size_t nf, const instances *in)
{
	for (size_t r = 0; r < nf; r++) {
		const field *f = &fs[r];
		if (r == 0 || strcmp(fs[r - 1].f_name, f->f_name) != 0)
			put_family(t, f->f_name, f->f_type, f->f_help);
		for (size_t i = 0; i < in->in_n; i++) {
			label ls[2];
			size_t nl = 0;
			if (in->in_key != NULL)
				ls[nl++] = (label){ in->in_key, instance_name(in, i) };
			if (f->f_lkey != NULL)
				ls[nl++] = (label){ f->f_lkey, f->f_lval };
			const char *base = (const char *)in->in_first + i * in->in_stride;
			put_u64(t, f->f_name, ls, nl, field_value(base, f));
		}
	}
}

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))
#define C "counter"
#define G "gauge"

/* ---- node ---- */

static void put_node(mtext *t, dg_node *n)
{
	char id[17], version[32];
	snprintf(id, sizeof(id), "%016" PRIx64, dg_node_get_id(n));
	snprintf(version, sizeof(version), "%d.%d.%d", DG_VERSION_MAJOR,
	    DG_VERSION_MINOR, DG_VERSION_PATCH);
	const label info[] = { { "node", id }, { "address", dg_node_address(n) },
		{ "version", version } };
	put_family(t, "datagrid_node_info", G, "This node: id, address peers dial, version.");
	put_u64(t, "datagrid_node_info", info, NELEM(info), 1);

	uint64_t up_ms = dgi_now_ms() - dgi_node_started_ms(n);
	put_family(t, "datagrid_node_uptime_seconds", G, "Seconds since the node started.");
	put_fmt(t, "datagrid_node_uptime_seconds %" PRIu64 ".%03u\n", up_ms / 1000,
	    (unsigned)(up_ms % 1000));

	int64_t version_now = 0;
	size_t nodes = dg_node_topology(n, &version_now, NULL, 0);
	/* the coordinator is the oldest node: the smallest join order */
	dg_node_info *infos = nodes ? dgi_alloc((nodes + 8) * sizeof(*infos)) : NULL;
	size_t got = infos ? dg_node_topology(n, &version_now, infos, nodes + 8) : 0;
	int64_t self = -1, oldest = -1;
	for (size_t i = 0; i < got && i < nodes + 8; i++) {
		if (infos[i].id == dg_node_get_id(n))
			self = infos[i].order;
		if (oldest < 0 || infos[i].order < oldest)
			oldest = infos[i].order;
	}
	dgi_free(infos);
	put_one(t, "datagrid_topology_version", G, "Topology version installed on this node.",
	    (uint64_t)version_now);
	put_one(t, "datagrid_cluster_nodes", G, "Nodes in that topology (servers and clients).",
	    nodes);
	put_one(t, "datagrid_coordinator", G, "1 when this node coordinates that topology (the "
	    "oldest node), else 0.", self >= 0 && self == oldest);

	dg_member_quorum q;
	dg_member_quorum_get(dgi_node_member(n), &q);
	put_one(t, "datagrid_segmented", G, "1 while this node cannot reach a majority of the "
	    "voting servers (it refuses every operation).", q.segmented);
	put_one(t, "datagrid_quorum_voters", G, "Voting servers of the installed topology.",
	    q.voters);
	put_one(t, "datagrid_quorum_reachable", G, "Of them, answering within the failure "
	    "timeout (this node included).", q.reachable);
	put_one(t, "datagrid_segmentations_total", C, "Times this node became SEGMENTED.",
	    q.segmentations);
	put_one(t, "datagrid_rejoins_total", C, "Times it was whole again after being SEGMENTED.",
	    q.rejoins);
	put_one(t, "datagrid_lease_losses_total", C, "Times its lease lapsed while not SEGMENTED "
	    "(it served nothing until renewed).", q.lease_losses);
	put_one(t, "datagrid_segmented_dials_total", C, "JOINs it sent to its seeds and to "
	    "members it did not hear while SEGMENTED.", q.segmented_dials);
}

/* ---- transport ---- */

static const field tp_fields[] = {
	FIELD(dg_tp_stats, frames_sent, "datagrid_transport_frames_sent_total", C,
	    "Frames sent to peers."),
	FIELD(dg_tp_stats, frames_recv, "datagrid_transport_frames_received_total", C,
	    "Frames received from peers."),
	FIELD(dg_tp_stats, bytes_sent, "datagrid_transport_bytes_sent_total", C,
	    "Bytes sent to peers (frame headers included)."),
	FIELD(dg_tp_stats, bytes_recv, "datagrid_transport_bytes_received_total", C,
	    "Bytes received from peers (frame headers included)."),
	FIELD(dg_tp_stats, connects, "datagrid_transport_connects_total", C,
	    "Peer connections established."),
	FIELD(dg_tp_stats, disconnects, "datagrid_transport_disconnects_total", C,
	    "Peer connections lost or closed."),
	FIELD(dg_tp_stats, auth_failures, "datagrid_transport_auth_failures_total", C,
	    "Handshakes refused for a wrong cluster secret."),
	FIELD(dg_tp_stats, handshake_failures, "datagrid_transport_handshake_failures_total",
	    C, "Handshakes that failed (any reason)."),
	FIELD(dg_tp_stats, malformed_frames, "datagrid_transport_malformed_frames_total", C,
	    "Frames dropped as malformed."),
	FIELD(dg_tp_stats, dropped, "datagrid_transport_dropped_frames_total", C,
	    "Queued frames lost to a broken connection."),
	FIELD(dg_tp_stats, busy, "datagrid_transport_busy_total", C,
	    "Sends refused because the peer's send queue was full."),
};

static void put_transport(mtext *t, dg_node *n)
{
	dg_tp_stats st;
	dg_tp_get_stats(dgi_node_tp(n), &st);
	instances in = { NULL, &st, NULL, 0, 1 };
	put_table(t, tp_fields, NELEM(tp_fields), &in);
}

/* ---- messages, per type ---- */

static const field msg_fields[] = {
	FIELD(dg_msg_counters, sent, "datagrid_messages_sent_total", C,
	    "Messages sent, by type."),
	FIELD(dg_msg_counters, recv, "datagrid_messages_received_total", C,
	    "Messages received, by type."),
	FIELD(dg_msg_counters, bytes_sent, "datagrid_message_bytes_sent_total", C,
	    "Bytes of messages sent (header and body), by type."),
	FIELD(dg_msg_counters, bytes_recv, "datagrid_message_bytes_received_total", C,
	    "Bytes of messages received (header and body), by type."),
	FIELD(dg_msg_counters, failures, "datagrid_message_failures_total", C,
	    "Messages received malformed or undecodable, by type."),
};

static void put_messages(mtext *t, dg_node *n)
{
	dg_msg_metric m[DG_MSG__COUNT];
	size_t count = dg_tp_metrics(dgi_node_tp(n), m, DG_MSG__COUNT);
	if (count > DG_MSG__COUNT)
		count = DG_MSG__COUNT;
	instances in = { "type", &m[0].c, &m[0].name, sizeof(m[0]), count };
	put_table(t, msg_fields, NELEM(msg_fields), &in);
}

/* ---- caches ---- */

static const field cache_fields[] = {
	FIELD(dg_cache_metrics, puts, "datagrid_cache_puts_total", C,
	    "Writes started on this node."),
	FIELD(dg_cache_metrics, gets, "datagrid_cache_gets_total", C,
	    "Reads started on this node that got an answer."),
	FIELD(dg_cache_metrics, removes, "datagrid_cache_removes_total", C,
	    "Removals started on this node."),
	FIELD(dg_cache_metrics, hits, "datagrid_cache_hits_total", C,
	    "Reads that found the key."),
	FIELD(dg_cache_metrics, misses, "datagrid_cache_misses_total", C,
	    "Reads that did not find the key."),
	FIELD(dg_cache_metrics, entries, "datagrid_cache_entries", G,
	    "Entries held by this node (primary and backup copies)."),
	FIELD(dg_cache_metrics, primary_entries, "datagrid_cache_primary_entries", G,
	    "Entries this node holds as their primary."),
	FIELD(dg_cache_metrics, bytes, "datagrid_cache_bytes", G,
	    "Key and value bytes held by this node."),
	FIELD_L(dg_cache_metrics, partitions_owning, "datagrid_cache_partitions", G,
	    "Partitions held by this node, by state.", "state", "owning"),
	FIELD_L(dg_cache_metrics, partitions_moving, "datagrid_cache_partitions", G,
	    "Partitions held by this node, by state.", "state", "moving"),
	FIELD_L(dg_cache_metrics, partitions_lost, "datagrid_cache_partitions", G,
	    "Partitions held by this node, by state.", "state", "lost"),
	FIELD(dg_cache_metrics, partitions_repairing, "datagrid_cache_partitions_repairing", G,
	    "Owned partitions not yet whole, fetching what they lack from copies rented out "
	    "elsewhere (counted in state=\"owning\" too)."),
	FIELD(dg_cache_metrics, rebalance_partitions_done,
	    "datagrid_cache_rebalance_partitions_done_total", C,
	    "Partitions this node finished fetching."),
	FIELD(dg_cache_metrics, rebalance_partitions_left,
	    "datagrid_cache_rebalance_partitions_left", G,
	    "Partitions this node is still fetching (MOVING)."),
	FIELD(dg_cache_metrics, rebalance_bytes, "datagrid_cache_rebalance_bytes_total", C,
	    "Bytes received by rebalancing."),
	FIELD(dg_cache_metrics, expired, "datagrid_cache_expired_total", C,
	    "Entries removed by the expiry sweeper."),
	FIELD(dg_cache_metrics, remaps, "datagrid_cache_remaps_total", C,
	    "Operations mapped again after a topology change."),
};

typedef struct cache_row {
	dg_cache_metrics cr_m;
	const char *cr_name;
	dg_cache *cr_cache;
} cache_row;

/* One histogram family, datagrid_cache_op_duration_seconds, labelled by
 * cache and op, from the cache's latency buckets (dg_cache_get_latency):
 * cumulative _bucket{le} series (seconds), _sum and _count. */
static void put_latencies(mtext *t, const cache_row *rows, size_t n)
{
	static const char *const ops[DG_OP__COUNT] = { "get", "put", "remove" };
	const char *name = "datagrid_cache_op_duration_seconds";
	put_family(t, name, "histogram", "Time of the cache operations started on "
	    "this node (single-key calls; a batch counts once).");
	for (size_t i = 0; i < n; i++) {
		for (int op = 0; op < DG_OP__COUNT; op++) {
			dg_latency l;
			if (dg_cache_get_latency(rows[i].cr_cache, (dg_cache_op_kind)op, &l) != DG_OK)
				continue;
			uint64_t cum = 0;
			for (unsigned b = 0; b < DG_LAT_BUCKETS; b++) {
				cum += l.buckets[b];
				uint64_t us = dg_latency_bound_us(b);
				char le[32];
				if (us == UINT64_MAX)
					snprintf(le, sizeof(le), "+Inf");
				else
					snprintf(le, sizeof(le), "%g", (double)us / 1e6);
				label ls[] = { { "cache", rows[i].cr_name }, { "op", ops[op] },
					{ "le", le } };
				put_series(t, "datagrid_cache_op_duration_seconds_bucket", ls, 3);
				put_fmt(t, " %llu\n", (unsigned long long)cum);
			}
			label ls[] = { { "cache", rows[i].cr_name }, { "op", ops[op] } };
			put_series(t, "datagrid_cache_op_duration_seconds_sum", ls, 2);
			put_fmt(t, " %.6f\n", (double)l.sum_us / 1e6);
			put_series(t, "datagrid_cache_op_duration_seconds_count", ls, 2);
			put_fmt(t, " %llu\n", (unsigned long long)cum);
		}
	}
}

static void put_caches(mtext *t, dg_node *n)
{
	dg_cache_config cfg[DGI_METRICS_CACHES_MAX];
	cache_row rows[DGI_METRICS_CACHES_MAX];
	size_t all = dg_cache_list(n, cfg, DGI_METRICS_CACHES_MAX);
	size_t listed = all < DGI_METRICS_CACHES_MAX ? all : DGI_METRICS_CACHES_MAX;
	size_t nr = 0;
	for (size_t i = 0; i < listed; i++) {
		dg_cache *c;
		/* destroyed since the list: left out */
		if (dgi_grid_cache_find(dgi_node_grid(n), cfg[i].name, &c) != DG_OK ||
		    dg_cache_get_metrics(c, &rows[nr].cr_m) != DG_OK)
			continue;
		rows[nr].cr_name = cfg[i].name;
		rows[nr].cr_cache = c;
		nr++;
	}
	put_one(t, "datagrid_caches", G, "Caches on this node.", all);
	instances in = { "cache", &rows[0].cr_m, &rows[0].cr_name, sizeof(rows[0]), nr };
	put_table(t, cache_fields, NELEM(cache_fields), &in);
	put_latencies(t, rows, nr);
}

/* ---- transactions ---- */

static const field tx_fields[] = {
	FIELD(dg_tx_metrics, started, "datagrid_tx_started_total", C,
	    "Transactions begun on this node."),
	FIELD(dg_tx_metrics, committed, "datagrid_tx_committed_total", C,
	    "Of those, committed."),
	FIELD(dg_tx_metrics, rolled_back, "datagrid_tx_rolled_back_total", C,
	    "Of those, rolled back."),
	FIELD(dg_tx_metrics, conflicts, "datagrid_tx_conflicts_total", C,
	    "Of those, failed with an optimistic conflict."),
	FIELD(dg_tx_metrics, deadlocks, "datagrid_tx_deadlocks_total", C,
	    "Of those, failed as a deadlock victim."),
	FIELD(dg_tx_metrics, timeouts, "datagrid_tx_timeouts_total", C,
	    "Of those, failed with a timeout."),
	FIELD(dg_tx_metrics, one_phase, "datagrid_tx_one_phase_total", C,
	    "Of those, committed in one phase."),
	FIELD(dg_tx_metrics, heap_bytes, "datagrid_tx_heap_bytes_total", C,
	    "Bytes allocated by the transactions of this node."),
	FIELD(dg_tx_metrics, participant_prepared, "datagrid_tx_participant_prepared_total", C,
	    "Transactions prepared here as primary or backup."),
	FIELD(dg_tx_metrics, participant_committed, "datagrid_tx_participant_committed_total",
	    C, "Transactions committed here as primary or backup."),
	FIELD(dg_tx_metrics, locks_held, "datagrid_tx_locks_held", G,
	    "Key locks held on this node now."),
	FIELD(dg_tx_metrics, lock_waiters, "datagrid_tx_lock_waiters", G,
	    "Lock requests waiting on this node now."),
	FIELD_L(dg_tx_metrics, recovered_commit, "datagrid_tx_recoveries_total", C,
	    "Transactions finished by recovery, by outcome.", "outcome", "commit"),
	FIELD_L(dg_tx_metrics, recovered_rollback, "datagrid_tx_recoveries_total", C,
	    "Transactions finished by recovery, by outcome.", "outcome", "rollback"),
};

static void put_tx(mtext *t, dg_node *n)
{
	dg_tx_metrics tm;
	if (dg_tx_get_metrics(n, &tm) != DG_OK)
		return;
	instances in = { NULL, &tm, NULL, 0, 1 };
	put_table(t, tx_fields, NELEM(tx_fields), &in);
}

dg_err dgi_node_metrics_text(dg_node *n, dg_buf *out)
{
	if (n == NULL || out == NULL)
		return DG_ERR_INVAL;
	mtext t = { out, DG_OK };
	dg_buf_reset(out);
	put_node(&t, n);
	put_transport(&t, n);
	put_messages(&t, n);
	put_caches(&t, n);
	put_tx(&t, n);
	return t.t_err;
}

/* ---- the same fields for dgctl metrics (metrics.h) ---- */

void dgi_metrics_each(dgi_metrics_kind kind, const void *stats,
    void (*fn)(void *ctx, const char *name, uint64_t v), void *ctx)
{
	const field *f = kind == DGI_METRICS_CACHE ? cache_fields :
	    kind == DGI_METRICS_TX ? tx_fields : tp_fields;
	size_t n = kind == DGI_METRICS_CACHE ? NELEM(cache_fields) :
	    kind == DGI_METRICS_TX ? NELEM(tx_fields) : NELEM(tp_fields);
	for (size_t i = 0; i < n; i++)
		fn(ctx, f[i].f_member, field_value(stats, &f[i]));
}
