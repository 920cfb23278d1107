/*
 * member_sim.c — a deterministic simulation of the membership protocol
 * (transport/PROTOCOL.md, "Membership", "Majority"), in the manner of
 * FoundationDB's and the Raft libraries' simulation tests.
 *
 * Five server nodes are state machines in this one process, on one virtual
 * clock; a seeded scheduler delivers their messages after random delays
 * (so out of order), drops and duplicates some, cuts links both ways and
 * one way, pauses nodes (SIGSTOP: messages wait for them) and crashes one.
 * After the faults comes a quiet period on a healed network.  Checked
 * after every step:
 *   I1  never two installed topologies of one version (same members, same
 *       join orders), never two versions installed after one base
 *       (sibling histories), and never two topologies accepted by a
 *       majority after one base (Paxos' safety, before any install);
 *   I2  a node removed by an installed version held no lease then (the
 *       majority that removed it waited its lease out);
 * and at the end of the quiet period:
 *   I3  every live node is a member again of one and the same version,
 *       whose members are exactly the live nodes.
 *
 * What is the code's and what is a model: a voter's answer to TOPO_PROPOSE
 * is the code's rule itself (dgi_px_rule, quorum.c, with dgi_ballot_cmp),
 * and so are the majority and lease arithmetic (dgi_quorum_need,
 * dgi_quorum_kth, dgi_lease_until).  The rest follows membership's rules
 * as PROTOCOL.md states them (member_*.c run them on threads and real
 * sockets, which a deterministic schedule cannot drive): heartbeats every
 * failure timeout / 5 carrying an echo, failure after a silent failure
 * timeout, the coordinator as the oldest member not taken for failed, one
 * change at a time, each version after a base agreed by both phases of
 * Paxos (PREPARE: a majority's promise and what any of them accepted after
 * that base; PROPOSE: that topology, adopted, else the coordinator's own;
 * an adopted removal installed a lease later; a voter and a proposer that
 * make a majority install at the acceptance), TOPOLOGY broadcast by the
 * coordinator, REMOVED to a node that is not a member, a heartbeat back to
 * a node of a newer version, rejoining with a new join order, and a paused
 * node's quiet period.  A crashed node does not come back under its
 * address unless --restarts (see the end of this comment).
 *
 *   member_sim [--schedules N] [--seed S] [--replay S1,S2,..]
 *              [--check-leases] [--check-heal] [--verbose] [--keep-going]
 * runs N schedules (default 2000; DG_SIM_SCHEDULES overrides) from seed S
 * (default: from the clock, printed), each with its own seed (S, S+1, ..),
 * or one schedule per seed listed, checking I1 (and that no two versions
 * follow one base) and, when asked, I2 and I3; a failing one prints its
 * seed, and `--seed S --schedules 1 --verbose` replays it step by step
 * (with --keep-going every failing one is printed and counted).  Exit 0:
 * every invariant checked held.
 *
 * What it found, fixed in the code (each seen failing here first): a
 * voter granted another coordinator's topology of a version after two
 * failure timeouts (I1); a coordinator's own proposal was not its vote,
 * and it proposed at a version it had granted another (I1); two voters
 * removed in one version (I2: a majority of the new voters and one of the
 * old did not meet); a voter that granted a node's removal went on
 * echoing its heartbeats, renewing its lease (I2); a node rejoining held
 * the version removing it but did not give it to a member behind, which
 * kept taking it for the coordinator (I3).  Then, with one phase of
 * voting, sibling versions: a voter granted v5 to one coordinator and v6,
 * which follows v4, to another, so two histories went on from v4 (seed
 * 438103: a node v5 added held a lease as v6 removed it; seeds 381095 and
 * 1597348: a member of one sibling never met the others again) — 195 of
 * the CI's 100,000 schedules installed siblings.  Both phases of Paxos
 * closed it; and with them, an adopted topology that removes a live voter
 * stalled while that voter refused its own removal (seed 99230: it now
 * accepts it and stops counting itself toward its own lease), and a voter
 * that accepted a version but missed its TOPOLOGY stayed behind for good,
 * heartbeating only the members of its own while the node that version
 * added was SEGMENTED (seeds 1163441, 1192692: it now answers a heartbeat
 * of a newer version, and the sender sends that version); and a version
 * adding a third voter to two, installed only by its proposer, which
 * then died, left the other voter SEGMENTED for good (seeds 3157670,
 * 3354139: a voter that accepts what the proposer accepted first, the two
 * a majority, installs it at once).  The ctest member_sim_seeds replays
 * these.
 *
 * Restarts (--restarts amnesiac|durable): a node killed and restarted on
 * its address as a new incarnation (another node id: nothing it sends is
 * its predecessor's), which rejoins; `durable` keeps its acceptor state
 * (promise, what it accepted) across the restart, as the acceptor file
 * does (member_acceptor.c); `amnesiac` does not, and its grants say so
 * until it is a member again.  A joiner is asked to vote like the voters
 * of its address (PROTOCOL.md, "A voter that restarted").  When a JOIN
 * counted as its sender's vote, both modes found two topologies a
 * majority accepted after one base, each installed by live nodes (7 of
 * 50,000 schedules from seed 100000, e.g. seed 102612), and live clusters
 * that never took the restarted node back (~1%: members SEGMENTED by the
 * lost voter refused every proposal).  Then, with joiners asked: a joiner
 * granted a removal while its predecessor's echoes could still hold the
 * removed node's lease (I2, seed 118492 durable: it now waits a lease and
 * a heartbeat after its start and its last echo), and SEGMENTED members
 * still refused (I3, seed 102638: they promise and accept now).  CI runs
 * both modes (member_sim_restarts_*) and replays these seeds.  Without
 * --restarts a crashed node stays down.  I3 is not due where the live
 * nodes hold no majority of the voters of the newest version one of them
 * holds (amnesiac ones counting as dgi_quorum_won says), nor where no
 * live member of it is left (a new cluster would be formed: not modelled).
 */
#define _GNU_SOURCE
#include "transport/transport_int.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N 5
#define FT 1000u                /* failure timeout, ms */
#define HB (FT / 5)             /* heartbeat interval */
#define LEASE (FT / 2)
#define SILENCE (LEASE + HB)    /* removal_silence_ms */
#define PROP_MS (FT / 2)        /* a proposal's votes time out */
#define FAULT_MS 6000u          /* faults happen until then */
#define QUIET_MS 12000u         /* then a healed network for this long */
#define MAXQ 8192
#define MAXVER 4096
#define MAXACC 512

enum { M_HB, M_PROPOSE, M_VOTE, M_TOPO, M_REMOVED, M_JOIN, M_PREPARE, M_PROMISE };

struct topo {
	int64_t ver;
	int64_t base;           /* the version it follows (the proposer's) */
	uint32_t members;       /* bit per node */
	int64_t order[N];       /* join orders of the members */
};

struct msg {
	uint64_t at;            /* delivery time */
	uint64_t seq;           /* ties: send order */
	int type, from, to;
	struct topo t;          /* PROPOSE, TOPO, REMOVED */
	int64_t base;           /* PROPOSE */
	int granted;            /* VOTE */
	int64_t refused;        /* VOTE: the voter's highest version */
	uint64_t hb_time, hb_echo;
	int64_t hb_ver;         /* HB: the sender's version; JOIN: its floor */
	int joiner;             /* JOIN (forwarded to the coordinator) */
	bool fresh;             /* JOIN: from a restarted incarnation (its own
	                           address still a member: a new node id) */
	bool newinc;            /* sent by a restarted incarnation not yet a
	                           member: another node id than the member of
	                           its address (post sets it) */
	/* PREPARE, PROMISE, PROPOSE (phase 2), VOTE */
	struct dgi_ballot b;    /* the proposer's ballot; refusals: the voter's promise */
	bool adopted;           /* PROPOSE: a topology a voter accepted before */
	bool removes;           /* PROPOSE: it removes a node of its base */
	bool pacc;              /* PROPOSE: the proposer accepted it itself */
	bool has_acc;           /* PROMISE: the voter accepted acc at acc_b */
	struct dgi_ballot acc_b;
	struct topo acc;
	int64_t installed;      /* answers: the voter's version */
	struct dgi_ballot promised; /* refusals: the voter's promise */
	bool amnesiac;          /* PROMISE, VOTE: granted by a joiner that lost
	                           its acceptor state in a restart */
};

struct node {
	bool crashed;
	bool restarted;         /* a new incarnation not yet a member */
	bool amnesiac;          /* restarted without its acceptor state (until
	                           it is a member again) */
	int64_t prev_order;     /* restarted: its predecessor's join order (a
	                           topology naming that one does not name it) */
	uint64_t paused_until;  /* processes nothing before */
	uint64_t quiet_until;   /* after its own pause: takes nobody for failed */
	struct topo t;
	bool joined;
	uint64_t heard[N], acked[N], echo[N], since[N];
	uint64_t started;       /* this incarnation's start */
	uint64_t echoed;        /* when it last echoed a heartbeat */
	uint64_t lease_until;
	bool segmented;
	int64_t voted;          /* the highest version it accepted */
	uint32_t frozen;        /* nodes a version it accepted removes: their */
	int64_t frozen_ver;     /* heartbeats are not echoed until it installs that one */
	int64_t vote_floor;     /* the highest version a refusal named */
	uint64_t next_tick;
	/* Paxos: the acceptor's side */
	struct dgi_ballot prom; /* the highest ballot promised or accepted */
	bool has_acc;
	struct dgi_ballot acc_b;
	struct topo acc;        /* the topology accepted last, at acc_b */
	/* and the proposer's */
	int phase;              /* 0 none, 1 PREPARE, 2 PROPOSE, 3 waiting out a lease */
	struct topo pt;         /* wanted; from phase 2 the one proposed */
	struct dgi_ballot pb;
	uint32_t pvoters, ppromised, pgranted;
	uint32_t pamn;          /* this phase's grants by amnesiac joiners */
	uint64_t pdeadline;
	bool pbest;             /* a voter accepted pbest_t at pbest_b before */
	struct dgi_ballot pbest_b;
	struct topo pbest_t;
	bool padopted;
	int64_t seen_base, seen_round; /* the highest round a refusal named */
	uint64_t pinstall_at;
};

struct sim {
	uint64_t rng, now, seq;
	struct node n[N];
	struct msg q[MAXQ];     /* a binary heap on (at, seq) */
	uint32_t nq;
	bool link[N][N];        /* link[a][b]: a's messages reach b */
	struct topo agreed[MAXVER]; /* I1: the first topology installed per version */
	bool have[MAXVER];
	int64_t next_of[MAXVER];    /* I1: the version installed after each base */
	struct {                    /* I1: who accepted each ballot's topology */
		struct dgi_ballot b;
		uint32_t who;
		struct topo t;
	} acc[MAXACC];
	uint32_t nacc;
	struct topo chosen[MAXVER]; /* I1: accepted by a majority after each base */
	bool have_chosen[MAXVER];
	int crashes;
	bool verbose, check_leases, check_heal;
	int restarts;           /* --restarts: 1 amnesiac, 2 durable acceptor */
	const char *fail;
	char why[256];
	uint64_t steps, installs, removals;
	uint64_t stopped;       /* schedules that lost a majority (I3 not due) */
};

static uint64_t rnd(struct sim *s)
{
	s->rng ^= s->rng >> 12;
	s->rng ^= s->rng << 25;
	s->rng ^= s->rng >> 27;
	return s->rng * 0x2545F4914F6CDD1DULL;
}

static uint32_t rnd_in(struct sim *s, uint32_t lo, uint32_t hi)
{
	return lo + (uint32_t)(rnd(s) % (hi - lo + 1));
}

static void vlog(struct sim *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void vlog(struct sim *s, const char *fmt, ...)
{
	if (!s->verbose)
		return;
	va_list ap;
	va_start(ap, fmt);
	printf("%7" PRIu64 " ", s->now);
	vprintf(fmt, ap);
	printf("\n");
	va_end(ap);
}

static void violate(struct sim *s, const char *inv, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void violate(struct sim *s, const char *inv, const char *fmt, ...)
{
	if (s->fail != NULL)
		return;
	s->fail = inv;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(s->why, sizeof(s->why), fmt, ap);
	va_end(ap);
}

/* ---- the event queue ---- */

static bool before(const struct msg *a, const struct msg *b)
{
	return a->at < b->at || (a->at == b->at && a->seq < b->seq);
}

static void q_push(struct sim *s, const struct msg *m)
{
	if (s->nq == MAXQ)
		return; /* a full network drops (never reached in practice) */
	uint32_t i = s->nq++;
	while (i > 0 && before(m, &s->q[(i - 1) / 2])) {
		s->q[i] = s->q[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	s->q[i] = *m;
}

static struct msg q_pop(struct sim *s)
{
	struct msg top = s->q[0], last = s->q[--s->nq];
	uint32_t i = 0;
	for (;;) {
		uint32_t c = 2 * i + 1;
		if (c >= s->nq)
			break;
		if (c + 1 < s->nq && before(&s->q[c + 1], &s->q[c]))
			c++;
		if (!before(&s->q[c], &last))
			break;
		s->q[i] = s->q[c];
		i = c;
	}
	if (s->nq > 0)
		s->q[i] = last;
	return top;
}

/* Sends m (from, to set): lost on a cut link or by chance, maybe twice,
 * after 1-30 ms (a paused receiver gets it when it resumes). */
static void post(struct sim *s, struct msg m, bool faults)
{
	if (!s->link[m.from][m.to])
		return;
	if (faults && rnd(s) % 100 < 2)
		return;
	m.newinc = s->n[m.from].restarted;
	int copies = faults && rnd(s) % 100 < 2 ? 2 : 1;
	for (int i = 0; i < copies; i++) {
		m.at = s->now + rnd_in(s, 1, 30);
		m.seq = s->seq++;
		q_push(s, &m);
	}
}

/* ---- topologies ---- */

static bool has(const struct topo *t, int i)
{
	return (t->members >> i) & 1u;
}

static int count(uint32_t bits)
{
	return __builtin_popcount(bits);
}

static bool same(const struct topo *a, const struct topo *b)
{
	if (a->ver != b->ver || a->members != b->members)
		return false;
	for (int i = 0; i < N; i++)
		if (has(a, i) && a->order[i] != b->order[i])
			return false;
	return true;
}

/* I1 and I2, as node i installs t. */
static void check_install(struct sim *s, int i, const struct topo *t)
{
	s->installs++;
	if (t->ver >= MAXVER)
		return;
	if (!s->have[t->ver]) {
		s->have[t->ver] = true;
		s->agreed[t->ver] = *t;
	} else if (!same(&s->agreed[t->ver], t)) {
		violate(s, "I1", "node %d installed version %" PRId64 " with members %#x, "
		    "another node members %#x", i, t->ver, t->members, s->agreed[t->ver].members);
	}
	if (t->base >= 0 && t->base < MAXVER) {
		if (s->next_of[t->base] == 0)
			s->next_of[t->base] = t->ver;
		else if (s->next_of[t->base] != t->ver)
			violate(s, "I1", "node %d installed version %" PRId64 " after v%" PRId64 ", which "
			    "v%" PRId64 " follows too (sibling versions)", i, t->ver, t->base,
			    s->next_of[t->base]);
	}
	for (int k = 0; k < N && s->check_leases; k++) {
		const struct node *x = &s->n[k];
		if (has(t, k) || x->crashed || !x->joined || x->t.ver >= t->ver || !has(&x->t, k))
			continue;
		if (x->lease_until > s->now)
			violate(s, "I2", "node %d installed version %" PRId64 " without node %d, "
			    "whose lease runs until %" PRIu64, i, t->ver, k, x->lease_until);
	}
}

/* Node i accepted t at ballot b: once a majority of the voters of b's base
 * accepted one ballot's topology, it is chosen — and no other may ever be
 * chosen after that base (I1 before anyone installs it). */
static void accepted(struct sim *s, int i, const struct dgi_ballot *b, const struct topo *t)
{
	if (b->base < 1 || b->base >= MAXVER || !s->have[b->base])
		return;
	uint32_t k = 0;
	while (k < s->nacc && dgi_ballot_cmp(&s->acc[k].b, b) != 0)
		k++;
	if (k == s->nacc) {
		if (s->nacc == MAXACC)
			return;
		s->nacc++;
		s->acc[k].b = *b;
		s->acc[k].who = 0;
		s->acc[k].t = *t;
	}
	s->acc[k].who |= 1u << i;
	uint32_t voters = s->agreed[b->base].members;
	if (count(s->acc[k].who & voters) < (int)dgi_quorum_need((uint32_t)count(voters)))
		return;
	if (!s->have_chosen[b->base]) {
		s->have_chosen[b->base] = true;
		s->chosen[b->base] = *t;
	} else if (!same(&s->chosen[b->base], t)) {
		violate(s, "I1", "after v%" PRId64 " a majority accepted members %#x (v%" PRId64
		    ") and members %#x (v%" PRId64 ")", b->base, s->chosen[b->base].members,
		    s->chosen[b->base].ver, t->members, t->ver);
	}
}

static void install(struct sim *s, int i, const struct topo *t)
{
	struct node *n = &s->n[i];
	if (t->ver <= n->t.ver)
		return;
	check_install(s, i, t);
	for (int j = 0; j < N; j++)
		if (has(t, j) && (!has(&n->t, j) || n->t.order[j] != t->order[j]))
			n->since[j] = s->now; /* joined our view now */
	n->t = *t;
	n->phase = 0;
	if (t->ver >= n->frozen_ver)
		n->frozen = 0;
	bool was = n->joined;
	n->joined = has(t, i) && (!n->restarted || t->order[i] > n->prev_order);
	if (n->joined) {
		n->restarted = false;
		n->amnesiac = false; /* it promises from here on under a version
		                        its predecessor never saw */
	}
	if (was && !n->joined)
		s->removals++;
	vlog(s, "n%d installs v%" PRId64 " members %#x%s", i, t->ver, t->members,
	    n->joined ? "" : " (not in it: rejoins)");
}

static void broadcast_topo(struct sim *s, int from, const struct topo *t, bool faults)
{
	for (int j = 0; j < N; j++)
		if (j != from && has(t, j))
			post(s, (struct msg){ .type = M_TOPO, .from = from, .to = j, .t = *t }, faults);
}

/* ---- a node's rules ---- */

static uint64_t heard(const struct node *n, int j)
{
	return n->heard[j] > n->since[j] ? n->heard[j] : n->since[j];
}

static bool failed(const struct sim *s, const struct node *n, int j)
{
	return s->now > heard(n, j) + FT;
}

static int coordinator(const struct sim *s, int i)
{
	const struct node *n = &s->n[i];
	int c = -1;
	for (int j = 0; j < N; j++) {
		if (!has(&n->t, j) || (j != i && failed(s, n, j)))
			continue;
		if (c < 0 || n->t.order[j] < n->t.order[c])
			c = j;
	}
	return c;
}

/* Node n granted (or proposed) t: the nodes t removes from its topology
 * renew no lease through it from now on (member_quorum.c). */
static void freeze(struct node *n, const struct topo *t)
{
	uint32_t gone = n->t.members & ~t->members;
	if (gone == 0)
		return;
	n->frozen |= gone;
	if (t->ver > n->frozen_ver)
		n->frozen_ver = t->ver;
}

/* ---- a version after a base, agreed by both phases of Paxos ---- */

/* got: grants by voters that keep their promises, amn: by amnesiac
 * joiners (dgi_quorum_won: one counts, among an even number of voters) */
static bool quorum(uint32_t got, uint32_t amn, uint32_t voters)
{
	return dgi_quorum_won((uint32_t)count(got & voters), (uint32_t)count(amn & ~got & voters),
	    (uint32_t)count(voters));
}

static void px_install(struct sim *s, int i, bool faults)
{
	struct node *n = &s->n[i];
	struct topo t = n->pt;
	n->phase = 0;
	if (n->t.ver != n->pb.base || t.ver <= n->t.ver)
		return; /* its topology moved on meanwhile */
	install(s, i, &t);
	broadcast_topo(s, i, &t, faults);
}

/* A majority accepted pt: it is agreed.  A topology adopted from an
 * earlier ballot that removes a node was voted without the silence rule;
 * every voter that accepted it stopped echoing that node, so its lease
 * ends within a lease of the last acceptance: wait that out first. */
static void px_accepted(struct sim *s, int i, bool faults)
{
	struct node *n = &s->n[i];
	if (n->padopted && (n->t.members & ~n->pt.members) != 0) {
		n->phase = 3;
		n->pinstall_at = s->now + LEASE + HB;
		vlog(s, "n%d: v%" PRId64 " agreed, installs it at %" PRIu64, i, n->pt.ver, n->pinstall_at);
		return;
	}
	px_install(s, i, faults);
}

/* A majority promised pb: phase 2, with the topology accepted at the
 * highest ballot any of them reported, else its own. */
static void px_promised(struct sim *s, int i, bool faults)
{
	struct node *n = &s->n[i];
	n->phase = 2;
	n->padopted = n->pbest;
	if (n->pbest)
		n->pt = n->pbest_t;
	n->pdeadline = s->now + PROP_MS;
	/* its own acceptance (of its own removal too, when adopted: it stops
	 * counting itself toward its lease then) — unless it promised a
	 * higher ballot meanwhile (another coordinator's PREPARE) */
	n->pgranted = 0;
	if (dgi_ballot_cmp(&n->pb, &n->prom) >= 0) {
		n->prom = n->pb;
		n->has_acc = true;
		n->acc_b = n->pb;
		n->acc = n->pt;
		if (n->pt.ver > n->voted)
			n->voted = n->pt.ver;
		freeze(n, &n->pt);
		n->pgranted = 1u << i;
		accepted(s, i, &n->pb, &n->pt);
	}
	vlog(s, "n%d proposes v%" PRId64 " members %#x (round %" PRId64 "%s)", i, n->pt.ver,
	    n->pt.members, n->pb.round, n->padopted ? ", adopted" : "");
	n->pamn = 0;
	if (quorum(n->pgranted, n->pamn, n->pvoters)) {
		px_accepted(s, i, faults);
		return;
	}
	for (int j = 0; j < N; j++)
		if (j != i && has(&n->t, j))
			post(s, (struct msg){ .type = M_PROPOSE, .from = i, .to = j, .t = n->pt,
			    .b = n->pb, .adopted = n->padopted, .pacc = (n->pgranted >> i) & 1u,
			    .removes = (n->t.members & ~n->pt.members) != 0 }, faults);
}

static void px_propose(struct sim *s, int i, struct topo next, int joiner, bool faults)
{
	struct node *n = &s->n[i];
	int64_t base = n->t.ver, round = 1;
	next.ver = base + 1; /* above every version refused or accepted (member_change.c) */
	if (n->vote_floor >= next.ver)
		next.ver = n->vote_floor + 1;
	if (n->voted >= next.ver)
		next.ver = n->voted + 1;
	next.base = base;
	if (n->seen_base == base && n->seen_round >= round)
		round = n->seen_round + 1;
	if (n->prom.base == base && n->prom.round >= round)
		round = n->prom.round + 1;
	n->pt = next;
	n->pb = (struct dgi_ballot){ base, round, (dg_node_id)(i + 1) };
	n->phase = 1;
	n->pvoters = n->t.members;
	n->pbest = false;
	n->pdeadline = s->now + PROP_MS;
	n->ppromised = 0;
	if (dgi_ballot_cmp(&n->pb, &n->prom) >= 0) { /* (not when it promised a later base) */
		n->prom = n->pb;
		n->ppromised = 1u << i;
	}
	/* the joiner is asked like every voter of its address: a restarted
	 * incarnation there answers as a joiner (member_change.c) */
	(void)joiner;
	n->pamn = 0;
	if (n->has_acc && n->acc_b.base == base) {
		n->pbest = true;
		n->pbest_b = n->acc_b;
		n->pbest_t = n->acc;
	}
	vlog(s, "n%d prepares round %" PRId64 " after v%" PRId64 " for members %#x", i, round, base,
	    next.members);
	if (quorum(n->ppromised, n->pamn, n->pvoters)) {
		px_promised(s, i, faults);
		return;
	}
	for (int j = 0; j < N; j++)
		if (j != i && has(&n->t, j))
			post(s, (struct msg){ .type = M_PREPARE, .from = i, .to = j, .b = n->pb }, faults);
}

static void px_refused(struct node *n, const struct msg *m)
{
	if (m->installed > n->vote_floor)
		n->vote_floor = m->installed;
	if (m->promised.base == n->pb.base &&
	    (n->seen_base != n->pb.base || m->promised.round > n->seen_round)) {
		n->seen_base = n->pb.base;
		n->seen_round = m->promised.round;
	}
}

static bool drops_heard(struct sim *s, int i, const struct topo *t, bool removes)
{
	struct node *n = &s->n[i];
	if (!n->joined) {
		/* a joiner knows no base: its predecessor at its address (or
		 * itself, before it was removed) may have echoed the removed
		 * node until it started (echoed last) — a lease and a heartbeat
		 * later, every lease renewed through this address is over */
		uint64_t last = n->started > n->echoed ? n->started : n->echoed;
		return removes && s->now < last + SILENCE;
	}
	for (int j = 0; j < N; j++)
		if (j != i && has(&n->t, j) && !has(t, j) && s->now < heard(n, j) + SILENCE)
			return true;
	return false;
}

/* The acceptor's side: PREPARE, PROPOSE (phase 2); the proposer's:
 * PROMISE, VOTE. */
static void px_on_msg(struct sim *s, const struct msg *m, bool faults)
{
	struct node *n = &s->n[m->to];
	int i = m->to;
	struct dgi_acceptor v = { n->joined, !n->joined, n->segmented, n->joined ? n->t.ver : 0,
		n->prom };
	switch (m->type) {
	case M_PREPARE: {
		struct dgi_px_ask a = { m->b, false, false, false, false, false };
		const char *why = dgi_px_rule(&v, &a);
		struct msg r = { .type = M_PROMISE, .from = i, .to = m->from, .b = m->b,
			.granted = why == NULL, .installed = n->voted > n->t.ver ? n->voted : n->t.ver,
			.promised = n->prom, .amnesiac = n->amnesiac && !n->joined };
		if (why == NULL) {
			n->prom = m->b;
			if (n->has_acc && n->acc_b.base == m->b.base) {
				r.has_acc = true;
				r.acc_b = n->acc_b;
				r.acc = n->acc;
			}
		}
		vlog(s, "n%d promises %s round %" PRId64 " after v%" PRId64 " to n%d%s%s%s", i,
		    why ? "not" : "", m->b.round, m->b.base, m->from, why ? ": " : "", why ? why : "",
		    r.has_acc ? " (accepted one before)" : "");
		post(s, r, faults);
		break;
	}
	case M_PROMISE:
		if (n->phase != 1 || dgi_ballot_cmp(&m->b, &n->pb) != 0)
			break;
		if (m->granted) {
			if (m->amnesiac)
				n->pamn |= 1u << m->from;
			else
				n->ppromised |= 1u << m->from;
			if (m->has_acc && (!n->pbest || dgi_ballot_cmp(&m->acc_b, &n->pbest_b) > 0)) {
				n->pbest = true;
				n->pbest_b = m->acc_b;
				n->pbest_t = m->acc;
			}
		} else {
			px_refused(n, m);
		}
		if (quorum(n->ppromised, n->pamn, n->pvoters))
			px_promised(s, i, faults);
		break;
	case M_PROPOSE: {
		struct dgi_px_ask a = { m->b, true, m->adopted, has(&m->t, m->from), has(&m->t, i),
			drops_heard(s, i, &m->t, m->removes) };
		const char *why = dgi_px_rule(&v, &a);
		if (why == NULL) {
			n->prom = m->b;
			n->has_acc = true;
			n->acc_b = m->b;
			n->acc = m->t;
			if (m->t.ver > n->voted)
				n->voted = m->t.ver;
			freeze(n, &m->t);
			accepted(s, i, &m->b, &m->t);
		}
		vlog(s, "n%d votes %s on v%" PRId64 " of n%d%s%s", i, why ? "no" : "yes", m->t.ver,
		    m->from, why ? ": " : "", why ? why : "");
		post(s, (struct msg){ .type = M_VOTE, .from = i, .to = m->from, .t = m->t, .b = m->b,
		    .granted = why == NULL, .installed = n->voted > n->t.ver ? n->voted : n->t.ver,
			.promised = n->prom, .amnesiac = n->amnesiac && !n->joined }, faults);
		/* it and the proposer (which accepted first) make a majority
		 * of two or three voters: agreed — installed here too, so a
		 * proposer that dies at once does not take it along (an
		 * adopted removal waits for the proposer's lease wait) */
		int known = (why == NULL) + (m->pacc && m->from != i && has(&n->t, m->from));
		if (why == NULL && n->joined && m->b.base == n->t.ver &&
		    known >= (int)dgi_quorum_need((uint32_t)count(n->t.members)) &&
		    (!m->adopted || (n->t.members & ~m->t.members) == 0)) {
			vlog(s, "n%d learns v%" PRId64 " is agreed", i, m->t.ver);
			install(s, i, &m->t);
		}
		break;
	}
	case M_VOTE:
		if (n->phase != 2 || dgi_ballot_cmp(&m->b, &n->pb) != 0)
			break;
		if (m->granted && m->amnesiac)
			n->pamn |= 1u << m->from;
		else if (m->granted)
			n->pgranted |= 1u << m->from;
		else
			px_refused(n, m);
		if (quorum(n->pgranted, n->pamn, n->pvoters))
			px_accepted(s, i, faults);
		break;
	}
}

static void tick(struct sim *s, int i, bool faults)
{
	struct node *n = &s->n[i];
	if (!n->joined) {
		/* rejoining: JOIN through some node, and heartbeats still to
		 * the members of its last topology (which answer REMOVED, or
		 * TOPOLOGY when they added it back meanwhile) */
		int to = (int)rnd_in(s, 0, N - 2);
		to += to >= i;
		post(s, (struct msg){ .type = M_JOIN, .from = i, .to = to, .joiner = i,
		    .hb_ver = n->t.ver, .fresh = n->restarted }, faults);
	}
	for (int j = 0; j < N; j++)
		if (j != i && has(&n->t, j))
			post(s, (struct msg){ .type = M_HB, .from = i, .to = j, .hb_time = s->now,
			    .hb_echo = n->echo[j], .hb_ver = n->t.ver }, faults);
	/* the lease and reachability (member_quorum.c) */
	uint64_t vals[N];
	uint32_t nv = 0, reach = 0;
	for (int j = 0; j < N; j++) {
		if (!has(&n->t, j))
			continue;
		vals[nv++] = j != i ? n->acked[j] : (n->frozen >> i) & 1u ? 0 : UINT64_MAX;
		reach += j == i || !failed(s, n, j);
	}
	if (!n->joined)
		return;
	n->lease_until = dgi_lease_until(dgi_quorum_kth(vals, nv), LEASE);
	n->segmented = reach < dgi_quorum_need(nv);
	if (n->phase == 3 && s->now >= n->pinstall_at)
		px_install(s, i, faults);
	if ((n->phase == 1 || n->phase == 2) && s->now >= n->pdeadline)
		n->phase = 0; /* abandoned: the next round goes above the promises it saw */
	if (n->phase || n->segmented || s->now < n->quiet_until || coordinator(s, i) != i)
		return;
	/* one voter removed per version (Raft's single-server changes): a
	 * majority of the old voters and one of the new always share one */
	struct topo next = n->t;
	for (int j = 0; j < N && next.members == n->t.members; j++)
		if (j != i && has(&n->t, j) && failed(s, n, j))
			next.members &= ~(1u << j);
	if (next.members != n->t.members)
		px_propose(s, i, next, -1, faults);
}

static void on_msg(struct sim *s, const struct msg *m, bool faults)
{
	struct node *n = &s->n[m->to];
	int i = m->to;
	/* a restarted incarnation is not the member of its address (another
	 * node id): nothing it sends is that member's */
	bool mem = has(&n->t, m->from) && !m->newinc;
	if (!m->newinc)
		n->heard[m->from] = s->now; /* any message counts */
	if (m->type == M_PREPARE || m->type == M_PROMISE || m->type == M_PROPOSE ||
	    m->type == M_VOTE) {
		px_on_msg(s, m, faults);
		return;
	}
	switch (m->type) {
	case M_HB:
		if (mem && !((n->frozen >> m->from) & 1u))
			n->echo[m->from] = m->hb_time, n->echoed = s->now;
		if (mem && m->hb_echo > n->acked[m->from])
			n->acked[m->from] = m->hb_echo;
		if (n->joined && !mem && n->t.ver >= m->hb_ver)
			post(s, (struct msg){ .type = M_REMOVED, .from = i, .to = m->from, .t = n->t },
			    faults);
		else if (!mem && m->hb_ver > n->t.ver)
			/* a node of a newer version: this one is behind (its
			 * TOPOLOGY was lost) and heartbeats only the members of
			 * its own — one back, without an echo, gets the newer one */
			post(s, (struct msg){ .type = M_HB, .from = i, .to = m->from, .hb_time = s->now,
			    .hb_ver = n->t.ver }, faults);
		else if (mem && m->hb_ver < n->t.ver)
			/* (a node rejoining too: what it holds was agreed) */
			post(s, (struct msg){ .type = M_TOPO, .from = i, .to = m->from, .t = n->t },
			    faults);
		if (s->now < n->quiet_until && n->joined && mem)
			n->quiet_until = 0; /* a member vouched: the quiet is over */
		break;
	case M_TOPO:
	case M_REMOVED:
		install(s, i, &m->t);
		break;
	case M_JOIN: {
		int j = m->joiner, c = coordinator(s, i);
		if (!n->joined || c < 0)
			break;
		if (c != i) {
			struct msg f = *m;
			f.from = i;
			f.to = c;
			post(s, f, faults); /* forwarded */
			break;
		}
		if (has(&n->t, j) && !m->fresh) {
			/* a member asking again: the TOPOLOGY that added it did
			 * not reach it — sent again; one told it is out by a
			 * version this node has not seen gets a newer one */
			post(s, (struct msg){ .type = M_TOPO, .from = i, .to = j, .t = n->t }, faults);
			break;
		}
		if (n->phase)
			break; /* busy: it asks again */
		/* (a SEGMENTED coordinator too: a JOIN still becomes a version
		 * if a majority accepts it — PROTOCOL.md, "SEGMENTED") */
		struct topo next = n->t;
		int64_t max = 0;
		for (int k = 0; k < N; k++)
			if (has(&n->t, k) && n->t.order[k] > max)
				max = n->t.order[k];
		next.members |= 1u << j;
		next.order[j] = max >= n->t.ver ? max + 1 : n->t.ver + 1; /* a new incarnation */
		/* (a restarted one replaces its predecessor at once here: the
		 * code adds it under its new id, and removes the old one once
		 * it is taken for failed) */
		px_propose(s, i, next, j, faults);
		break;
	}
	}
}

/* ---- the nemesis ---- */

static void heal(struct sim *s)
{
	for (int a = 0; a < N; a++)
		for (int b = 0; b < N; b++)
			s->link[a][b] = true;
}

static void nemesis(struct sim *s)
{
	heal(s);
	int x = (int)rnd_in(s, 0, N - 1);
	switch (rnd_in(s, 0, s->restarts ? 7 : 6)) {
	case 0: /* heal only */
		vlog(s, "nemesis: healed");
		break;
	case 1: { /* a random split */
		uint32_t side = (uint32_t)rnd_in(s, 1, (1u << N) - 2);
		for (int a = 0; a < N; a++)
			for (int b = 0; b < N; b++)
				if (((side >> a) & 1u) != ((side >> b) & 1u))
					s->link[a][b] = false;
		vlog(s, "nemesis: split %#x | %#x", side, ~side & ((1u << N) - 1));
		break;
	}
	case 2: /* one node cut off */
		for (int b = 0; b < N; b++)
			s->link[x][b] = s->link[b][x] = b == x;
		vlog(s, "nemesis: n%d isolated", x);
		break;
	case 3: /* one way: x sends to nobody */
		for (int b = 0; b < N; b++)
			s->link[x][b] = b == x;
		vlog(s, "nemesis: n%d cannot send", x);
		break;
	case 4: /* one way: x hears nobody */
		for (int b = 0; b < N; b++)
			s->link[b][x] = b == x;
		vlog(s, "nemesis: n%d cannot receive", x);
		break;
	case 5: /* a pause longer or shorter than the failure timeout */
		if (!s->n[x].crashed) {
			s->n[x].paused_until = s->now + rnd_in(s, 300, 2500);
			vlog(s, "nemesis: n%d paused until %" PRIu64, x, s->n[x].paused_until);
		}
		break;
	case 6: /* a crash, for good (one per schedule) */
		if (s->crashes == 0) {
			s->crashes++;
			s->n[x].crashed = true;
			vlog(s, "nemesis: n%d crashed", x);
		}
		break;
	case 7: { /* kill -9 and restart on its address (--restarts) */
		struct node *n = &s->n[x];
		if (n->crashed)
			break;
		struct node fresh;
		memset(&fresh, 0, sizeof(fresh));
		if (s->restarts == 2) { /* its acceptor state kept on disk */
			fresh.prom = n->prom;
			fresh.has_acc = n->has_acc;
			fresh.acc_b = n->acc_b;
			fresh.acc = n->acc;
			fresh.voted = n->voted;
		}
		fresh.restarted = true;
		fresh.started = s->now;
		fresh.amnesiac = s->restarts == 1;
		fresh.prev_order = has(&n->t, x) ? n->t.order[x] : 0;
		if (n->restarted && n->prev_order > fresh.prev_order)
			fresh.prev_order = n->prev_order;
		fresh.next_tick = s->now + rnd_in(s, 50, 500);
		*n = fresh;
		vlog(s, "nemesis: n%d restarted%s", x, s->restarts == 2 ? "" : " (forgets its promises)");
		break;
	}
	}
}

/* ---- one schedule ---- */

static void sim_init(struct sim *s, uint64_t seed, bool verbose, bool leases, bool heals,
    int restarts)
{
	memset(s, 0, sizeof(*s));
	s->restarts = restarts;
	s->check_leases = leases;
	s->check_heal = heals;
	s->rng = seed * 0x9E3779B97F4A7C15ULL + 1;
	s->verbose = verbose;
	struct topo t = { 1, 0, (1u << N) - 1, { 0 } };
	for (int i = 0; i < N; i++)
		t.order[i] = i + 1;
	for (int i = 0; i < N; i++) {
		s->n[i].t = t;
		s->n[i].joined = true;
		s->n[i].next_tick = rnd_in(s, 0, HB - 1);
	}
	s->have[1] = true;
	s->agreed[1] = t;
	heal(s);
}

/* Runs one schedule; NULL when every invariant held, else the one that
 * failed (s->why says how). */
static const char *run(struct sim *s, uint64_t seed, bool verbose, bool leases, bool heals,
    int restarts)
{
	sim_init(s, seed, verbose, leases, heals, restarts);
	uint64_t next_fault = rnd_in(s, 200, 1500);
	uint64_t end = FAULT_MS + QUIET_MS;
	while (s->now < end && s->fail == NULL) {
		bool faults = s->now < FAULT_MS;
		if (!faults && next_fault != UINT64_MAX) {
			heal(s);
			for (int i = 0; i < N; i++)
				if (s->n[i].paused_until > s->now)
					s->n[i].paused_until = s->now;
			next_fault = UINT64_MAX;
			vlog(s, "quiet period: healed");
		}
		/* the next event: a fault, a tick or a delivery */
		uint64_t t = faults ? next_fault : end;
		int who = -1;
		for (int i = 0; i < N; i++) {
			const struct node *n = &s->n[i];
			uint64_t at = n->next_tick > n->paused_until ? n->next_tick : n->paused_until;
			if (!n->crashed && at < t) {
				t = at;
				who = i;
			}
		}
		bool deliver = s->nq > 0 && s->q[0].at < t;
		if (deliver)
			t = s->q[0].at;
		s->now = t;
		s->steps++;
		if (deliver) {
			struct msg m = q_pop(s);
			struct node *n = &s->n[m.to];
			if (n->crashed)
				continue;
			if (n->paused_until > s->now) {
				m.at = n->paused_until; /* it waits in the socket */
				q_push(s, &m);
				continue;
			}
			if (s->verbose && m.type != M_HB)
				vlog(s, "  deliver type %d n%d -> n%d v%" PRId64, m.type, m.from, m.to, m.t.ver);
			on_msg(s, &m, faults);
		} else if (who >= 0) {
			struct node *n = &s->n[who];
			if (n->next_tick < n->paused_until) {
				/* back from a pause: its own silence is no evidence
				 * against the others (PROTOCOL.md, "A paused node") */
				for (int j = 0; j < N; j++)
					n->heard[j] = s->now;
				n->quiet_until = s->now + 2 * FT;
			}
			n->next_tick = s->now + HB;
			tick(s, who, faults);
		} else if (faults && s->now >= next_fault) {
			nemesis(s);
			next_fault = s->now + rnd_in(s, 300, 2000);
		}
	}
	if (s->fail != NULL || !s->check_heal)
		return s->fail;
	/* I3: one cluster of the live nodes — when they hold a majority of
	 * the voters of the newest version a live node holds (else the
	 * cluster stops, by design: PROTOCOL.md, "Majority"; a version only
	 * dead nodes installed is gone with them), those restarted without
	 * their acceptor state counting as dgi_quorum_won says */
	uint32_t live = 0, amn = 0;
	int64_t ver = -1, last = 1;
	for (int i = 0; i < N; i++) {
		const struct node *n = &s->n[i];
		live |= (uint32_t)!n->crashed << i;
		amn |= (uint32_t)(n->amnesiac && !n->crashed) << i;
		if (!n->crashed && n->t.ver > last && n->t.ver < MAXVER)
			last = n->t.ver;
	}
	uint32_t voters = s->agreed[last].members, members = 0;
	for (int i = 0; i < N; i++)
		members |= (uint32_t)(!s->n[i].crashed && s->n[i].joined &&
		    s->n[i].t.ver == last) << i;
	vlog(s, "end: v%" PRId64 " voters %#x live %#x amnesiac %#x members %#x", last, voters, live,
	    amn, members);
	/* (with no live member of that version left — every one of them
	 * restarted — only a new cluster would go on, which a node restarted
	 * in the code forms when no seed is in one: not modelled) */
	if (!quorum(live & ~amn, amn, voters) || members == 0) {
		s->stopped++;
		return NULL;
	}
	for (int i = 0; i < N && s->verbose; i++) {
		const struct node *n = &s->n[i];
		vlog(s, "end: n%d v%" PRId64 " members %#x joined %d phase %d segmented %d coordinator "
		    "n%d promised %" PRId64 "/%" PRId64 "/%" PRIu64 " accepted %d v%" PRId64 " at %" PRId64
		    "/%" PRId64 " frozen %#x", i, n->t.ver, n->t.members, n->joined, n->phase,
		    n->segmented, coordinator(s, i), n->prom.base, n->prom.round, n->prom.from,
		    n->has_acc, n->acc.ver, n->acc_b.base, n->acc_b.round, n->frozen);
	}
	for (int i = 0; i < N; i++) {
		const struct node *n = &s->n[i];
		if (n->crashed)
			continue;
		if (!n->joined || n->t.members != live || (ver >= 0 && n->t.ver != ver)) {
			violate(s, "I3", "after %u ms healed: node %d at v%" PRId64 " members %#x "
			    "(joined %d), live %#x", QUIET_MS, i, n->t.ver, n->t.members, n->joined, live);
			return s->fail;
		}
		ver = n->t.ver;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	uint64_t seed = 0, schedules = 2000;
	bool have_seed = false, verbose = false, leases = false, heals = false, keep = false;
	int restarts = 0;
	const char *replay = NULL;
	const char *env = getenv("DG_SIM_SCHEDULES");
	if (env != NULL)
		schedules = strtoull(env, NULL, 10);
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--schedules") == 0 && i + 1 < argc) {
			schedules = strtoull(argv[++i], NULL, 10);
		} else if (strcmp(argv[i], "--replay") == 0 && i + 1 < argc) {
			replay = argv[++i];
		} else if (strcmp(argv[i], "--keep-going") == 0) {
			keep = true;
		} else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
			seed = strtoull(argv[++i], NULL, 10);
			have_seed = true;
		} else if (strcmp(argv[i], "--verbose") == 0) {
			verbose = true;
		} else if (strcmp(argv[i], "--check-leases") == 0) {
			leases = true;
		} else if (strcmp(argv[i], "--check-heal") == 0) {
			heals = true;
		} else if (strcmp(argv[i], "--restarts") == 0 && i + 1 < argc) {
			const char *r = argv[++i];
			restarts = strcmp(r, "amnesiac") == 0 ? 1 : strcmp(r, "durable") == 0 ? 2 : -1;
			if (restarts < 0) {
				fprintf(stderr, "member_sim: --restarts amnesiac|durable\n");
				return 2;
			}
		} else {
			fprintf(stderr, "usage: member_sim [--schedules N] [--seed S] [--replay S1,S2,..] [--verbose] [--keep-going] [--check-leases] "
			    "[--check-heal] [--restarts amnesiac|durable]\n");
			return 2;
		}
	}
	/* --replay: those seeds, one schedule each (the regressions) */
	uint64_t list[64];
	size_t nlist = 0;
	for (const char *p = replay; p != NULL && *p != 0 && nlist < 64;) {
		char *end;
		list[nlist++] = strtoull(p, &end, 10);
		p = *end == ',' ? end + 1 : NULL;
	}
	if (nlist > 0) {
		have_seed = true;
		schedules = nlist;
	}
	if (!have_seed) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		seed = (uint64_t)ts.tv_sec * 1000003u ^ (uint64_t)ts.tv_nsec;
		seed %= 1000000000u;
	}
	if (nlist == 0)
		printf("member_sim: %" PRIu64 " schedules from seed %" PRIu64
		    " (--seed %" PRIu64 " repeats them)\n", schedules, seed, seed);
	struct sim *s = malloc(sizeof(*s));
	if (s == NULL)
		return 2;
	uint64_t steps = 0, installs = 0, removals = 0, stopped = 0, failed = 0;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (uint64_t k = 0; k < schedules; k++) {
		uint64_t sd = nlist > 0 ? list[k] : seed + k;
		const char *bad = run(s, sd, verbose, leases, heals, restarts);
		steps += s->steps;
		installs += s->installs;
		removals += s->removals;
		stopped += s->stopped;
		if (bad != NULL) {
			printf("member_sim: FAIL %s in schedule %" PRIu64 " (--seed %" PRIu64
			    " --schedules 1 --verbose replays it): %s\n", bad, k, sd, s->why);
			failed++;
			if (!keep) {
				free(s);
				return 1;
			}
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	printf("member_sim: %s: %" PRIu64 " schedules, %" PRIu64 " failed (%" PRIu64 " ended without a "
	    "majority alive), %" PRIu64 " steps, %" PRIu64 " installs, %" PRIu64 " removals of a live "
	    "node, %.1f s\n", failed ? "FAIL" : "ok", schedules, failed, stopped, steps, installs,
	    removals, secs);
	free(s);
	return failed ? 1 : 0;
}
