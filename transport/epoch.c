/*
 * epoch.c — read-side sections and deferred frees (epoch-based
 * reclamation), one domain for the whole process (transport.h, "Sections").
 *
 * Each thread that enters a section gets a slot once (a list of slots that
 * only grows; a slot is reused after its thread exits).  Entering stores
 * the global epoch in the thread's slot and issues a full fence; leaving
 * stores 0.  Nesting only counts (a thread-local depth).  A writer that
 * unlinked an object takes a tag: the epoch, then bumped (dgi_epoch_retire).
 * The object may be freed once no slot holds an epoch at or below the tag
 * (dgi_epoch_passed).
 *
 * Why that is enough.  A reader that got the old pointer read it before
 * the writer unlinked it (reader: slot store, fence, load; writer: unlink,
 * fence, tag), so the reader's slot store is seen by every scan after the
 * tag, and the epoch it stored was read before the tag was taken: at most
 * the tag.  A reader whose epoch is above the tag read the epoch the
 * writer's bump wrote (acquire) and so sees the unlink: it cannot hold the
 * object.  A thread that cannot get a slot (no memory) counts itself in
 * `pinned` instead, and nothing is freed while any such section runs.
 */
#include "transport.h"
#include "marshal/marshal_int.h"

#include <pthread.h>
#include <stdatomic.h>

struct slot {
	_Atomic uint64_t active;    /* 0 outside a section, else its entry epoch */
	_Atomic bool used;          /* owned by a live thread */
	uint32_t index;             /* dgi_thread_index: 0, 1, ... in order made */
	struct slot *next;          /* every slot made (never freed) */
};

static _Atomic uint64_t epoch = 1;
static struct slot *_Atomic slots;
static _Atomic uint32_t nslots;
static _Atomic uint64_t pinned;

static pthread_key_t slot_key;
static pthread_once_t slot_once = PTHREAD_ONCE_INIT;

static _Thread_local struct slot *tl_slot;
static _Thread_local uint32_t tl_depth;
static _Thread_local bool tl_pinned;
_Thread_local uint32_t dgi_thread_ix1;

/* Thread exit: the slot goes back for another thread — and with it the
 * thread index, after (release) everything this thread wrote. */
static void slot_release(void *p)
{
	struct slot *s = p;
	tl_slot = NULL;
	dgi_thread_ix1 = 0;
	atomic_store_explicit(&s->active, 0, memory_order_release);
	atomic_store_explicit(&s->used, false, memory_order_release);
}

static void slot_key_init(void)
{
	pthread_key_create(&slot_key, slot_release);
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

uint32_t dgi_thread_index_slow(void)
{
	if (tl_slot == NULL && (tl_slot = slot_get()) == NULL)
		return UINT32_MAX;
	dgi_thread_ix1 = tl_slot->index + 1;
	return tl_slot->index;
}

void dgi_epoch_enter(void)
{
	if (tl_depth++ > 0)
		return;
	struct slot *s = tl_slot;
	if (s == NULL && (s = tl_slot = slot_get()) == NULL) {
		tl_pinned = true;
		atomic_fetch_add(&pinned, 1);
		atomic_thread_fence(memory_order_seq_cst);
		return;
	}
	atomic_store_explicit(&s->active, atomic_load_explicit(&epoch, memory_order_acquire),
	    memory_order_relaxed);
	atomic_thread_fence(memory_order_seq_cst); /* announced before any load */
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
	atomic_store_explicit(&tl_slot->active, 0, memory_order_release);
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

bool dgi_epoch_passed(uint64_t tag)
{
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&pinned, memory_order_acquire) > 0)
		return false;
	for (struct slot *s = atomic_load_explicit(&slots, memory_order_acquire); s != NULL;
	    s = s->next) {
		uint64_t a = atomic_load_explicit(&s->active, memory_order_acquire);
		if (a != 0 && a <= tag)
			return false;
	}
	return true;
}
