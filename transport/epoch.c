/*
 * epoch.c — read-side sections and deferred frees (epoch-based
 * reclamation), one domain for the whole process (transport.h, "Sections"),
 * and a second, the read domain, in the same slots (the end of this file).
 *
 * Each thread that enters a section gets a slot once (a list of slots that
 * only grows; a slot is reused after its thread exits).  Entering stores
 * the global epoch in the thread's slot, then a fence; leaving stores 0.
 * Nesting only counts (a thread-local depth).  A writer that unlinked an
 * object takes a tag: the epoch, then bumped (dgi_epoch_retire).  The
 * object may be freed once no slot holds an epoch at or below the tag
 * (dgi_epoch_passed: a fence, then a scan of the slots).
 *
 * The fences are asymmetric where Linux has membarrier(2): entering, the
 * operations' hot path, issues a compiler barrier only, and the scan — a
 * sweeper's, once a second — is preceded by
 * membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED), which runs a full barrier
 * on every CPU running a thread of this process (and a thread not running
 * has been through a context switch, a barrier too) before it returns.
 * Where the call is missing or refused, or DG_EPOCH_FENCE is set in the
 * environment (to compare), both sides use a seq_cst fence (`asym` false;
 * decided once, in slot_once, which both sides pass before reading it, so
 * they always agree).  A scan needs a membarrier
 * only after the unlink: one that began after the epoch read above the tag
 * (barrier_epoch) serves every scan for that tag, so a sweep of many
 * retired objects makes one call.
 *
 * Why that is enough.  Writer: unlink, [fence], tag ... [barrier], scan.
 * Reader: slot store, [barrier], load of the pointer.  With fences on both
 * sides, one of the two sees the other's store (store buffering is ruled
 * out).  With membarrier, the reader's thread runs a full barrier at some
 * point of its program between the writer's unlink and its scan: if that
 * point is after the reader's slot store, the scan sees the slot; if it is
 * before, the reader's load comes after it and sees the unlink.  Either
 * way a reader that got the old pointer is seen by the scan, with an epoch
 * read before the tag was taken: at most the tag.  A reader whose epoch is
 * above the tag read the epoch the writer's bump wrote (acquire) and so
 * sees the unlink: it cannot hold the object.  A thread that cannot get a
 * slot (no memory) counts itself in `pinned` instead, with a full fence,
 * and nothing is freed while any such section runs.
 */
#define _GNU_SOURCE /* syscall, pthread_setname_np */
#include "transport.h"
#include "marshal/marshal_int.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#if defined(__linux__)
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

struct slot {
	/* active: 0 outside a section, else its entry epoch; active_rd: the
	 * same for the read domain (below).  First, so that the inline short
	 * section (transport.h) reaches them through dgi_epoch_tl.slot. */
	struct dgi_epoch_slot hot;
	_Atomic bool used;          /* owned by a live thread */
	uint32_t index;             /* dgi_thread_index: 0, 1, ... in order made */
	struct slot *next;          /* every slot made (never freed) */
};

/* The epochs of both domains (the read domain: transport.h, "Read
 * sections", its own epoch and its own barrier mark, the same slots) and
 * `asym`: readers fence with a compiler barrier, scans with membarrier
 * (set once in slot_once).  In transport.h for the inline short section. */
struct dgi_epoch_shared dgi_epoch_g = { .epoch = 1, .epoch_rd = 1 };
#define epoch (dgi_epoch_g.epoch)
#define epoch_rd (dgi_epoch_g.epoch_rd)
#define asym (dgi_epoch_g.asym)
static _Atomic uint64_t barrier_epoch_rd;
static struct slot *_Atomic slots;
static _Atomic uint32_t nslots;
static _Atomic uint64_t pinned;

static pthread_key_t slot_key;
static pthread_once_t slot_once = PTHREAD_ONCE_INIT;

/* The epoch read before the last membarrier began: a scan for a tag below
 * it needs no other. */
static _Atomic uint64_t barrier_epoch;

DGI_TLS_IE _Thread_local struct dgi_epoch_tls dgi_epoch_tl;
#define tl_depth (dgi_epoch_tl.depth)
/* The thread's slot (NULL: none yet); set_tl_slot stores it. */
static inline struct slot *tl_slot_get(void)
{
	return (struct slot *)(void *)dgi_epoch_tl.slot;
}
static inline struct slot *set_tl_slot(struct slot *s)
{
	dgi_epoch_tl.slot = s != NULL ? &s->hot : NULL;
	return s;
}
static _Thread_local bool tl_pinned;
DGI_TLS_IE _Thread_local uint32_t dgi_thread_ix1;

/* Thread exit: the slot goes back for another thread — and with it the
 * thread index, after (release) everything this thread wrote. */
static void slot_release(void *p)
{
	struct slot *s = p;
	set_tl_slot(NULL);
	dgi_thread_ix1 = 0;
	atomic_store_explicit(&s->hot.active, 0, memory_order_release);
	atomic_store_explicit(&s->hot.active_rd, 0, memory_order_release);
	atomic_store_explicit(&s->used, false, memory_order_release);
}

/* Whether membarrier(2)'s private expedited command is there and this
 * process is registered for it. */
static bool membarrier_init(void)
{
#if defined(__linux__) && defined(__NR_membarrier)
	long cmds = syscall(__NR_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
	if (cmds < 0 || !(cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED))
		return false;
	return syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
#else
	return false;
#endif
}

static bool membarrier_run(void)
{
#if defined(__linux__) && defined(__NR_membarrier)
	return syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0;
#else
	return false;
#endif
}

static void slot_key_init(void)
{
	pthread_key_create(&slot_key, slot_release);
	asym = getenv("DG_EPOCH_FENCE") == NULL && membarrier_init();
}

/* A free slot for this thread, or a new one; NULL on no memory. */
static struct slot *slot_get(void)
{
	pthread_once(&slot_once, slot_key_init);
	struct slot *s;
	for (s = atomic_load_explicit(&slots, memory_order_acquire); s != NULL; s = s->next) {
		bool free = false;
		if (!atomic_load_explicit(&s->used, memory_order_relaxed) &&
		    atomic_compare_exchange_strong(&s->used, &free, true))
			break;
	}
	if (s == NULL) {
		if ((s = dgi_calloc(1, sizeof(*s))) == NULL)
			return NULL;
		atomic_init(&s->used, true);
		s->index = atomic_fetch_add_explicit(&nslots, 1, memory_order_relaxed);
		struct slot *head = atomic_load_explicit(&slots, memory_order_relaxed);
		do
			s->next = head;
		while (!atomic_compare_exchange_weak_explicit(&slots, &head, s,
		    memory_order_release, memory_order_relaxed));
	}
	pthread_setspecific(slot_key, s);
	return s;
}

void dgi_thread_name(const char *name)
{
	pthread_setname_np(pthread_self(), name); /* (a name too long: kept as it was) */
}

uint32_t dgi_thread_index_slow(void)
{
	if (tl_slot_get() == NULL && set_tl_slot(slot_get()) == NULL)
		return UINT32_MAX;
	dgi_thread_ix1 = tl_slot_get()->index + 1;
	return tl_slot_get()->index;
}

void dgi_epoch_enter(void)
{
	if (tl_depth++ > 0)
		return;
	struct slot *s = tl_slot_get();
	if (s == NULL && (s = set_tl_slot(slot_get())) == NULL) {
		tl_pinned = true;
		atomic_fetch_add(&pinned, 1);
		atomic_thread_fence(memory_order_seq_cst);
		return;
	}
	atomic_store_explicit(&s->hot.active, atomic_load_explicit(&epoch, memory_order_acquire),
	    memory_order_relaxed);
	/* announced before any load: the scan's membarrier makes the CPU's
	 * fence (see the top), or this one does */
	if (__builtin_expect(asym, 1))
		atomic_signal_fence(memory_order_seq_cst);
	else
		atomic_thread_fence(memory_order_seq_cst);
}

void dgi_epoch_leave(void)
{
	if (--tl_depth > 0)
		return;
	if (tl_pinned) {
		tl_pinned = false;
		atomic_fetch_sub_explicit(&pinned, 1, memory_order_release);
		return;
	}
	atomic_store_explicit(&tl_slot_get()->hot.active, 0, memory_order_release);
}

bool dgi_epoch_inside(void)
{
	return tl_depth > 0;
}

uint64_t dgi_epoch_retire(void)
{
	atomic_thread_fence(memory_order_seq_cst); /* the unlink before the tag */
	return atomic_fetch_add(&epoch, 1);
}

/* The scan's side of the fence for tag (see the top); false when the
 * membarrier failed (nothing may be freed then). */
static bool scan_fence_in(_Atomic uint64_t *ep, _Atomic uint64_t *barrier, uint64_t tag)
{
	pthread_once(&slot_once, slot_key_init);
	if (!asym) {
		atomic_thread_fence(memory_order_seq_cst);
		return true;
	}
	if (atomic_load_explicit(barrier, memory_order_acquire) > tag)
		return true; /* a membarrier began after tag's unlink and has ended */
	uint64_t e = atomic_load(ep);
	if (!membarrier_run())
		return false;
	uint64_t b = atomic_load_explicit(barrier, memory_order_relaxed);
	while (b < e && !atomic_compare_exchange_weak_explicit(barrier, &b, e,
	    memory_order_release, memory_order_relaxed))
		;
	return true;
}

static bool scan_fence(uint64_t tag)
{
	return scan_fence_in(&epoch, &barrier_epoch, tag);
}

/* No slot holds an epoch at or below tag in that domain (rd: the read
 * domain's), and no section is pinned. */
static bool slots_past(uint64_t tag, bool rd)
{
	if (atomic_load_explicit(&pinned, memory_order_acquire) > 0)
		return false;
	for (struct slot *s = atomic_load_explicit(&slots, memory_order_acquire); s != NULL;
	    s = s->next) {
		uint64_t a = atomic_load_explicit(rd ? &s->hot.active_rd : &s->hot.active,
		    memory_order_acquire);
		if (a != 0 && a <= tag)
			return false;
	}
	return true;
}

bool dgi_epoch_passed(uint64_t tag)
{
	return scan_fence(tag) && slots_past(tag, false);
}

/* ---- the read domain ----
 * The same scheme with its own epoch, in the same slots (a thread takes
 * its slot at its first section of either kind).  Not nestable: a read
 * section is a few loads and a copy. */
static _Thread_local bool tl_rd_pinned;

void dgi_epoch_rd_enter(void)
{
	struct slot *s = tl_slot_get();
	if (__builtin_expect(s == NULL, 0) && (s = set_tl_slot(slot_get())) == NULL) {
		tl_rd_pinned = true;
		atomic_fetch_add(&pinned, 1); /* (holds both domains: rare) */
		atomic_thread_fence(memory_order_seq_cst);
		return;
	}
	atomic_store_explicit(&s->hot.active_rd, atomic_load_explicit(&epoch_rd,
	    memory_order_acquire), memory_order_relaxed);
	if (__builtin_expect(asym, 1))
		atomic_signal_fence(memory_order_seq_cst);
	else
		atomic_thread_fence(memory_order_seq_cst);
}

void dgi_epoch_rd_leave(void)
{
	if (__builtin_expect(tl_rd_pinned, 0)) {
		tl_rd_pinned = false;
		atomic_fetch_sub_explicit(&pinned, 1, memory_order_release);
		return;
	}
	atomic_store_explicit(&tl_slot_get()->hot.active_rd, 0, memory_order_release);
}

uint64_t dgi_epoch_rd_retire(void)
{
	atomic_thread_fence(memory_order_seq_cst); /* the unlink before the tag */
	return atomic_fetch_add(&epoch_rd, 1);
}

bool dgi_epoch_rd_passed(uint64_t tag)
{
	return scan_fence_in(&epoch_rd, &barrier_epoch_rd, tag) && slots_past(tag, true);
}
