/* conn.c — connections, whatever carries their bytes: the handshake
 * (PROTOCOL.md), reading frames (many per read), writing a peer's queue
 * (everything queued in one write), closing and reaping; and the nng-stream
 * backend (tls+tcp://, ipc://).  Native TCP (tcp://) is reactor.c.
 *
 * A backend (struct conn_ops, transport_int.h) moves bytes: it reports a
 * read with dgi_conn_rx_done and the end of a write it took over with
 * dgi_conn_tx_done, on its own threads (nng's callbacks, or the reactor).
 * Application writes start on the thread that queued the frames
 * (dgi_conn_start), outside every lock: nng completes them on its threads;
 * native TCP writes at once and leaves only the rest of a partial write to
 * the reactor.
 *
 * A connection is closed by dgi_conn_close from any thread, moved to
 * tp->dead and freed by the service thread once no sender is between its
 * kick and its start (users) and its backend has let go (conn_ops.idle: the
 * reactor must have finished the round of events in which the connection
 * left epoll; nng's free waits for its callbacks with nng_aio_stop) — a
 * callback never frees its own connection. */
#define _POSIX_C_SOURCE 200809L
#include "transport_int.h"

#include <nng/supplemental/tls/tls.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RX_CHUNK (64 * 1024)
#define HS_ROOM 2048 /* the handshake frames of one side, back to back */

static void rx_cb(void *arg);
static void tx_cb(void *arg);
static void dial_discard(struct dial *d);
static const struct conn_ops nng_ops;

/* An I/O failure as a dg_err; TLS failures (a certificate the CA did not
 * sign, a failed TLS handshake) are logged and counted here, once. */
static dg_err io_err(struct conn *c, int rv)
{
	if (rv == NNG_ECLOSED || rv == NNG_ECANCELED)
		return DG_ERR_CLOSED;
	if (rv == NNG_EPEERAUTH || rv == NNG_ECRYPTO) {
		if (c->state != C_CLOSED) {
			atomic_fetch_add(&c->tp->t.handshake_failures, 1);
			dgi_log("warn", "TLS-FAIL", "peer=%016llx url=%s err=\"%s\"",
			    (unsigned long long)c->peer_id,
			    c->dial_url ? c->dial_url : "(inbound)", nng_strerror(rv));
		}
		return DG_ERR_TLS;
	}
	return DG_ERR_CONN_BROKEN;
}

static char *xstrdup(const char *s)
{
	size_t n = strlen(s) + 1;
	char *d = dgi_alloc(n);
	if (d != NULL)
		memcpy(d, s, n);
	return d;
}

static void wait_done(struct connect_wait *w, dg_err err, dg_node_id peer)
{
	if (w == NULL)
		return;
	pthread_mutex_lock(&w->mu);
	if (!w->done) {
		w->done = true;
		w->err = err;
		w->peer = peer;
		pthread_cond_broadcast(&w->cv);
	}
	pthread_mutex_unlock(&w->mu);
}

/* The dialer's waiter, taken once: it lives on dg_tp_connect's stack and is
 * gone once woken, so the handshake's end and a close from another thread
 * (a reset right after attach) must not both wake it. */
/* Whether another thread closed c (its state is set under c->mu). */
static bool conn_closed(struct conn *c)
{
	pthread_mutex_lock(&c->mu);
	bool closed = c->state == C_CLOSED;
	pthread_mutex_unlock(&c->mu);
	return closed;
}

static struct connect_wait *take_waiter(struct conn *c)
{
	pthread_mutex_lock(&c->mu);
	struct connect_wait *w = c->waiter;
	c->waiter = NULL;
	pthread_mutex_unlock(&c->mu);
	return w;
}

struct conn *dgi_conn_new(dg_tp *tp, const struct conn_ops *ops, bool dialer)
{
	struct conn *c = dgi_calloc(1, sizeof(*c));
	if (c == NULL) {
		if (!dialer)
			atomic_fetch_sub(&tp->half_open, 1);
		return NULL;
	}
	c->tp = tp;
	c->ops = ops;
	c->fd = -1;
	c->dialer = dialer;
	c->half = !dialer; /* the slot dgi_conn_admit took */
	c->state = dialer ? C_DIALED : C_ACCEPTED;
	c->deadline_ms = dgi_now_ms() + tp->cfg.connect_timeout_ms;
	dg_buf_init(&c->rx);
	dg_buf_init(&c->wire);
	if (pthread_mutex_init(&c->mu, NULL) != 0) {
		if (!dialer)
			atomic_fetch_sub(&tp->half_open, 1);
		dgi_free(c);
		return NULL;
	}
	if (dg_buf_reserve(&c->rx, RX_CHUNK) != DG_OK ||
	    dg_buf_reserve(&c->wire, HS_ROOM) != DG_OK) {
		dgi_conn_discard(c);
		return NULL;
	}
	return c;
}

/* c's handshake slot goes back (once): it is open, or closed. */
static void half_done(struct conn *c)
{
	if (atomic_exchange(&c->half, false))
		atomic_fetch_sub(&c->tp->half_open, 1);
}

bool dgi_conn_admit(dg_tp *tp)
{
	if (atomic_fetch_add(&tp->half_open, 1) < tp->cfg.max_handshakes)
		return true;
	atomic_fetch_sub(&tp->half_open, 1);
	atomic_fetch_add(&tp->t.handshake_failures, 1);
	uint32_t repeated = 0;
	if (dgi_lograte_due(&tp->lr_busy, dgi_now_ms(), DGI_HANDSHAKE_LOG_MS, &repeated))
		dgi_log("warn", "HANDSHAKE-BUSY", "in_handshake=%u repeated=%u why=\"as many "
		    "accepted connections are in their handshake as max_handshakes allows: this one "
		    "is closed\"", tp->cfg.max_handshakes, repeated);
	return false;
}

void dgi_conn_discard(struct conn *c)
{
	half_done(c);
	dgi_free(c->hello_url);
	dg_buf_free(&c->rx);
	dg_buf_free(&c->wire);
	pthread_mutex_destroy(&c->mu);
	dgi_free(c);
}

void dgi_conn_link(struct conn *c)
{
	dg_tp *tp = c->tp;
	pthread_mutex_lock(&tp->mu);
	c->next = tp->conns;
	tp->conns = c;
	pthread_mutex_unlock(&tp->mu);
}

/* ---- writing ---- */

/* A handshake frame.  The handshake is lockstep, yet the end of our
 * previous frame's write (dgi_conn_tx_done) may come after the peer's
 * answer to that frame was read: then this frame goes behind it, into the
 * spare room of the wire buffer (HS_ROOM reserved; never reallocated while
 * a write is in flight), and that write sends it before it ends.  Refusing
 * instead made a fast peer's correct PROOF look like a DUPLICATE. */
static dg_err send_frame(struct conn *c, dg_msg_type type, const void *body)
{
	dg_err e;
	size_t n;
	bool close_now = false;
	pthread_mutex_lock(&c->mu);
	if (c->state == C_CLOSED) {
		pthread_mutex_unlock(&c->mu);
		return DG_ERR_STATE;
	}
	if (c->tx_busy) {
		dg_buf tail;
		dg_buf_init_fixed(&tail, c->wire.data + c->wire.len,
		    c->wire.cap - c->wire.len);
		e = dgi_frame_encode(&tail, c->tp, type, 0, 0, body);
		n = tail.len;
		if (e == DG_OK) {
			dgi_count_hs(c->tp, type, true, n);
			c->wire.len += n;
		}
	} else {
		dg_buf_reset(&c->wire);
		e = dgi_frame_encode(&c->wire, c->tp, type, 0, 0, body);
		n = c->wire.len;
		if (e == DG_OK) {
			dgi_count_hs(c->tp, type, true, n); /* before the peer can see it */
			c->tx_done = 0;
			c->tx_busy = true;
			if (c->ops->tx_start(c)) {
				/* written at once: the end of the write, but no kick (not
				 * open yet; attach kicks after WELCOME) */
				dg_buf_reset(&c->wire);
				c->tx_busy = false;
				close_now = c->abandoned; /* the REJECT is out */
			}
		}
	}
	pthread_mutex_unlock(&c->mu);
	if (close_now) /* only reject() abandons, and it holds no lock */
		dgi_conn_close(c, DG_ERR_REFUSED);
	return e;
}

struct conn *dgi_conn_kick(struct peer *p)
{
	struct conn *c = p->conn;
	if (c == NULL || p->queue.len == 0)
		return NULL;
	pthread_mutex_lock(&c->mu);
	bool go = !c->tx_busy && c->state == C_OPEN;
	if (go) {
		dg_buf t = c->wire; /* swap: the queue goes on the wire, the */
		c->wire = p->queue; /* empty wire buffer becomes the queue */
		p->queue = t;
		dg_buf_reset(&p->queue);
		p->queued_frames = 0;
		c->tx_done = 0;
		c->tx_busy = true; /* the wire buffer is the caller's until the write ends */
		atomic_fetch_add(&c->users, 1);
	}
	pthread_mutex_unlock(&c->mu);
	return go ? c : NULL;
}

/* When the backend wrote everything at once (native TCP), what was queued
 * meanwhile goes next from this thread: a loop, not a recursion. */
void dgi_conn_start(struct conn *c)
{
	while (c != NULL) {
		struct conn *go = NULL;
		if (c->ops->tx_start(c))
			go = dgi_conn_tx_done(c);
		atomic_fetch_sub(&c->users, 1);
		c = go;
	}
}

struct conn *dgi_conn_tx_done(struct conn *c)
{
	pthread_mutex_lock(&c->mu);
	while (c->tx_done < c->wire.len) {
		/* handshake frames queued behind the write, or an nng partial
		 * write: the rest first */
		if (!c->ops->tx_start(c)) {
			pthread_mutex_unlock(&c->mu);
			return NULL; /* the backend ends it */
		}
	}
	dg_buf_reset(&c->wire);
	c->tx_busy = false;
	struct peer *p = c->state == C_OPEN ? c->peer : NULL;
	bool abandoned = c->abandoned;
	pthread_mutex_unlock(&c->mu);
	if (abandoned) {
		dgi_conn_close(c, DG_ERR_REFUSED);
		return NULL;
	}
	struct conn *go = NULL;
	if (p != NULL) {
		pthread_mutex_lock(&p->mu);
		if (p->conn == c)
			go = dgi_conn_kick(p);
		pthread_mutex_unlock(&p->mu);
	}
	return go;
}

/* ---- closing ---- */

_Atomic uint32_t dgi_test_attach_delay_ms;

uint64_t dgi_dup_wait_until(const dg_tp *tp, uint64_t now)
{
	uint32_t t = tp->cfg.connect_timeout_ms;
	return now + (t < DGI_DUP_WAIT_MS ? t : DGI_DUP_WAIT_MS);
}

void dgi_conn_close(struct conn *c, dg_err why)
{
	dg_tp *tp = c->tp;
	pthread_mutex_lock(&c->mu);
	if (c->state == C_CLOSED) {
		pthread_mutex_unlock(&c->mu);
		return;
	}
	c->state = C_CLOSED;
	c->fail = why;
	half_done(c);
	struct connect_wait *waiter = c->waiter;
	c->waiter = NULL;
	/* what the reactor's handshake sets (under c->mu): read here, where a
	 * close from another thread (dg_tp_stop) sees it whole */
	struct peer *p = c->peer;
	dg_node_id peer_id = c->peer_id;
	pthread_mutex_unlock(&c->mu);
	c->ops->close(c); /* pending I/O fails or never completes */

	bool lost = false;
	uint64_t dropped = 0;
	if (p != NULL) {
		pthread_mutex_lock(&p->mu);
		/* what this connection received now counts with its peer */
		for (int t = 0; t < DG_MSG__COUNT; t++) {
			uint64_t n = atomic_load_explicit(&c->rxc[t].n, memory_order_relaxed);
			if (n == 0)
				continue;
			atomic_fetch_add(&p->rx_old[t].n, n);
			atomic_fetch_add(&p->rx_old[t].bytes,
			    atomic_load_explicit(&c->rxc[t].bytes, memory_order_relaxed));
			atomic_store(&c->rxc[t].n, 0);
			atomic_store(&c->rxc[t].bytes, 0);
		}
		if (p->conn == c) {
			p->conn = NULL;
			lost = true;
		}
		if (c->dialer && !lost && p->conn == NULL && c->dup_refused) {
			/* both sides dialled and the peer kept its own dial: that
			 * connection attaches here shortly — queued frames wait
			 * for it (bounded: redialled after DGI_DUP_WAIT_MS)
			 * instead of being dropped */
			p->dup_wait_ms = dgi_dup_wait_until(tp, dgi_now_ms());
		} else if (c->dialer && !lost && p->conn == NULL) {
			p->dialing = false;
		}
		if (p->conn == NULL && !p->dialing && p->queue.len > 0)
			dropped = dgi_peer_drop_queue(p); /* nowhere to go: counted, not silent */
		pthread_mutex_unlock(&p->mu);
		dgi_count_dropped(tp, p, dropped);
	}
	if (lost) {
		atomic_fetch_add(&tp->t.disconnects, 1);
		atomic_fetch_add(&p->t.disconnects, 1);
		dgi_log("info", "PEER-DOWN", "peer=%016llx why=%s dropped=%llu",
		    (unsigned long long)p->id, dg_strerror(why),
		    (unsigned long long)dropped);
	}
	if (p != NULL && (lost || dropped))
		dgi_fail_peer(tp, p->id, DG_ERR_CONN_BROKEN);
	/* the dialer gave up midway (its connection broke after HELLO); every
	 * other failure was counted where it was found (process, expire, reject) */
	if (!c->dialer && !c->abandoned && peer_id != 0 && p == NULL &&
	    why == DG_ERR_CONN_BROKEN)
		atomic_fetch_add(&tp->t.handshake_failures, 1);
	wait_done(waiter, why == DG_OK ? DG_ERR_CONN_BROKEN : why, peer_id);
	if (lost && tp->cfg.on_peer != NULL && !atomic_load(&tp->stopping))
		tp->cfg.on_peer(tp->cfg.on_peer_ctx, p->id, false, why);

	pthread_mutex_lock(&tp->mu);
	for (struct conn **pp = &tp->conns; *pp != NULL; pp = &(*pp)->next) {
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	}
	c->next = tp->dead;
	tp->dead = c;
	pthread_mutex_unlock(&tp->mu);
}

void dgi_conn_close_held(struct peer *p, dg_err why)
{
	struct conn *c = p->conn;
	if (c != NULL)
		atomic_fetch_add(&c->users, 1); /* before p->mu goes: see dgi_conn_reap */
	pthread_mutex_unlock(&p->mu);
	if (c == NULL)
		return;
	dgi_conn_close(c, why);
	atomic_fetch_sub(&c->users, 1);
}

bool dgi_conn_reap(dg_tp *tp)
{
	pthread_mutex_lock(&tp->mu);
	struct conn *c = tp->dead;
	tp->dead = NULL;
	struct dial **dp = &tp->dials, *d;
	struct dial *done = NULL;
	while ((d = *dp) != NULL) {
		if (d->done) {
			*dp = d->next;
			d->next = done;
			done = d;
		} else {
			dp = &d->next;
		}
	}
	pthread_mutex_unlock(&tp->mu);
	struct conn *later = NULL, **tail = &later;
	while (c != NULL) {
		struct conn *next = c->next;
		while (atomic_load(&c->users) > 0) {
			/* a sender between its kick and its start: microseconds */
			struct timespec ts = { 0, 100000 };
			nanosleep(&ts, NULL);
		}
		if (c->ops->idle(c)) {
			c->ops->free(c);
			dgi_free(c->dial_url);
			dgi_conn_discard(c);
		} else { /* its backend may still touch it: next time */
			c->next = NULL;
			*tail = c;
			tail = &c->next;
		}
		c = next;
	}
	if (later != NULL) {
		pthread_mutex_lock(&tp->mu);
		*tail = tp->dead;
		tp->dead = later;
		pthread_mutex_unlock(&tp->mu);
	}
	while (done != NULL) {
		struct dial *next = done->next;
		if (done->native) {
			if (done->has_resolver)
				pthread_join(done->resolver, NULL);
			dgi_free(done->host);
		} else {
			nng_aio_stop(done->aio);
			nng_aio_free(done->aio);
			nng_stream_dialer_free(done->dialer);
		}
		dgi_free(done->url);
		dgi_free(done);
		done = next;
	}
	return later != NULL;
}

/* ---- the handshake ---- */

/* The handshake runs on the reactor and reads c->peer_id freely; it sets
 * it under c->mu, for dgi_conn_close called from another thread. */
static void set_peer_id(struct conn *c, dg_node_id id)
{
	pthread_mutex_lock(&c->mu);
	c->peer_id = id;
	pthread_mutex_unlock(&c->mu);
}

static void reject(struct conn *c, dg_reject_reason reason, const char *text)
{
	dg_msg_reject m = { (int32_t)reason, { text, (uint32_t)strlen(text) } };
	dg_tp *tp = c->tp;
	atomic_fetch_add(reason == DG_REJECT_AUTH ? &tp->t.auth_failures :
	    &tp->t.handshake_failures, 1);
	uint32_t repeated = 0;
	if (reason == DG_REJECT_AUTH || dgi_lograte_due(&tp->lr_refused, dgi_now_ms(),
	    DGI_HANDSHAKE_LOG_MS, &repeated))
		dgi_log("warn", reason == DG_REJECT_AUTH ? "AUTH-FAIL" : "HANDSHAKE-REFUSED",
		    "peer=%016llx reason=%d text=\"%s\" repeated=%u", (unsigned long long)c->peer_id,
		    (int)reason, text, repeated);
	/* best effort: the peer learns why; the close follows the write */
	c->abandoned = true;
	if (send_frame(c, DG_MSG_REJECT, &m) != DG_OK)
		dgi_conn_close(c, DG_ERR_REFUSED);
}

/* Attach an authenticated connection to its peer; false if refused.  The
 * listener's WELCOME is written first, under the peer's lock, so no queued
 * frame can overtake it. */
static bool attach(struct conn *c, bool listener)
{
	dg_tp *tp = c->tp;
	struct peer *p = dgi_peer_get(tp, c->peer_id, true);
	if (p == NULL)
		return false;
	uint32_t delay = atomic_load_explicit(&dgi_test_attach_delay_ms, memory_order_relaxed);
	if (delay != 0 && !listener) {
		struct timespec ts = { delay / 1000, (long)(delay % 1000) * 1000000L };
		nanosleep(&ts, NULL);
	}
	pthread_mutex_lock(&p->mu);
	uint32_t stale = atomic_load_explicit(&tp->stale_ms, memory_order_relaxed);
	if (listener && p->conn != NULL && stale != 0 &&
	    dgi_now_ms() - atomic_load_explicit(&p->heard_ms, memory_order_relaxed) >= stale) {
		/* the peer dials only without a connection: this one is dead
		 * on its side (half-open after a cut); it would refuse the
		 * peer's new one as a duplicate and carry frames to nowhere */
		dgi_log("info", "PEER-STALE", "peer=%016llx why=\"it connected again while its "
		    "connection here was silent for %u ms: that one is closed\"",
		    (unsigned long long)p->id, stale);
		dgi_conn_close_held(p, DG_ERR_CONN_BROKEN);
		pthread_mutex_lock(&p->mu);
	}
	bool dup = p->conn != NULL;
	if (listener && !dup && p->dialing && tp->self < c->peer_id)
		dup = true; /* both dialing: the smaller id's dial wins */
	if (dup || (listener && send_frame(c, DG_MSG_WELCOME, NULL) != DG_OK)) {
		pthread_mutex_unlock(&p->mu);
		return false;
	}
	/* Another thread may have closed c since its handshake began (its
	 * deadline, dgi_conn_expire; dg_tp_stop): that close found no peer
	 * (c->peer), so it left p alone and put c on tp->dead, to be freed.
	 * Attached anyway, p->conn would name a freed connection — the next
	 * send to p locks its freed mutex.  c->state is read under c->mu as
	 * the close sets it, with p->mu held: a close after this point reads
	 * c->peer = p and waits for p->mu, then finds p->conn == c and clears
	 * it. */
	pthread_mutex_lock(&c->mu);
	if (c->state == C_CLOSED) {
		pthread_mutex_unlock(&c->mu);
		pthread_mutex_unlock(&p->mu);
		return false;
	}
	c->peer = p;
	c->state = C_OPEN;
	pthread_mutex_unlock(&c->mu);
	p->conn = c;
	atomic_store_explicit(&p->heard_ms, dgi_now_ms(), memory_order_relaxed);
	if (c->dialer || p->dialing)
		p->dialing = false; /* a dial of ours that loses the race is moot */
	p->dup_wait_ms = 0;
	p->redial_ms = 0;
	p->redial_backoff = 0;
	half_done(c);
	struct conn *go = dgi_conn_kick(p);
	pthread_mutex_unlock(&p->mu);
	dgi_conn_start(go);
	atomic_fetch_add(&tp->t.connects, 1);
	atomic_fetch_add(&p->t.connects, 1);
	dgi_log("info", "PEER-UP", "peer=%016llx dialer=%s", (unsigned long long)p->id,
	    c->dialer ? "self" : "peer");
	if (tp->cfg.on_peer != NULL)
		tp->cfg.on_peer(tp->cfg.on_peer_ctx, p->id, true, DG_OK);
	return true;
}

/* A dial made for peer X reached another node (its CHALLENGE names
 * c->peer_id): X no longer listens at that address — typically X died and
 * a node restarted on its address.  Nothing queued for X can reach it
 * there: its frames are dropped (counted) and its requests fail at once
 * with DG_ERR_UNREACHABLE, and its address is forgotten until a topology
 * names it again, so it is not dialled over and over.  (Left as it was, X
 * stayed "dialing" for good: every request to it — a JOIN forwarded to a
 * coordinator that had just died — waited out its whole timeout.)  The
 * connection itself goes on as one with the node that answered. */
static void peer_moved(struct conn *c)
{
	dg_tp *tp = c->tp;
	struct peer *x = c->peer;
	pthread_mutex_lock(&c->mu);
	c->peer = NULL;
	pthread_mutex_unlock(&c->mu);
	uint64_t dropped = 0;
	char *url = NULL;
	pthread_mutex_lock(&x->mu);
	bool gone = x->conn == NULL; /* else X's own dial reached us meanwhile */
	if (gone) {
		x->dialing = false;
		x->dup_wait_ms = 0;
		dropped = dgi_peer_drop_queue(x);
		url = x->url;
		x->url = NULL;
	}
	pthread_mutex_unlock(&x->mu);
	if (!gone)
		return;
	atomic_fetch_add(&tp->t.dropped, dropped);
	atomic_fetch_add(&x->t.dropped, dropped);
	dgi_log("warn", "PEER-MOVED", "peer=%016llx url=%s found=%016llx dropped=%llu",
	    (unsigned long long)x->id, c->dial_url ? c->dial_url : "?",
	    (unsigned long long)c->peer_id, (unsigned long long)dropped);
	dgi_free(url);
	dgi_fail_peer(tp, x->id, DG_ERR_UNREACHABLE);
}

static dg_err handshake(struct conn *c, const dg_frame_header *h,
    const uint8_t *body)
{
	dg_tp *tp = c->tp;
	uint8_t mac[DG_MAC_LEN];
	union {
		dg_msg_hello hello;
		dg_msg_challenge ch;
		dg_msg_proof proof;
		dg_msg_reject rej;
	} m;
	dg_err e = dg_msg_decode((dg_msg_type)h->type, tp->reg, body, h->body_len, &m);
	if (e != DG_OK)
		return e;
	bool auth = tp->secret_len > 0;

	switch ((int)c->state) {
	case C_ACCEPTED: {
		if (h->type != DG_MSG_HELLO)
			return DG_ERR_BAD_TAG;
		set_peer_id(c, (dg_node_id)m.hello.node_id);
		if (m.hello.version != DG_FRAME_VERSION) {
			reject(c, DG_REJECT_VERSION, "protocol version");
			return DG_OK;
		}
		if (m.hello.cluster.len != strlen(tp->cluster) ||
		    memcmp(m.hello.cluster.ptr, tp->cluster, m.hello.cluster.len) != 0) {
			reject(c, DG_REJECT_CLUSTER, "cluster name");
			return DG_OK;
		}
		if (m.hello.auth != auth) {
			reject(c, DG_REJECT_AUTH, auth ? "peer has no secret" : "peer has a secret");
			return DG_OK;
		}
		if (c->peer_id == tp->self || c->peer_id == 0) {
			reject(c, DG_REJECT_SELF, "own node id");
			return DG_OK;
		}
		memcpy(c->nonce_theirs, m.hello.nonce.ptr, DG_NONCE_LEN);
		if ((e = dgi_random(c->nonce_mine, DG_NONCE_LEN)) != DG_OK ||
		    (e = dgi_auth_mac('l', tp->secret, tp->secret_len, c->nonce_theirs,
		    c->nonce_mine, c->peer_id, tp->self, tp->cluster,
		    strlen(tp->cluster), mac)) != DG_OK)
			return e;
		if (m.hello.address.len > 0 && m.hello.address.len < 512 &&
		    memchr(m.hello.address.ptr, 0, m.hello.address.len) == NULL) {
			/* the peer's, once its PROOF checks: nothing of an
			 * unauthenticated peer is stored (issue 14) */
			if ((c->hello_url = dgi_alloc(m.hello.address.len + 1)) == NULL)
				return DG_ERR_NOMEM;
			memcpy(c->hello_url, m.hello.address.ptr, m.hello.address.len);
			c->hello_url[m.hello.address.len] = 0;
		}
		dg_msg_challenge ch = { (int64_t)tp->self, { c->nonce_mine, DG_NONCE_LEN },
			auth, { mac, DG_MAC_LEN } };
		c->state = C_CHALLENGED;
		return send_frame(c, DG_MSG_CHALLENGE, &ch);
	}
	case C_CHALLENGED: {
		if (h->type != DG_MSG_PROOF)
			return DG_ERR_BAD_TAG;
		if ((e = dgi_auth_mac('d', tp->secret, tp->secret_len, c->nonce_mine,
		    c->nonce_theirs, c->peer_id, tp->self, tp->cluster,
		    strlen(tp->cluster), mac)) != DG_OK)
			return e;
		if (auth && !dgi_auth_equal(mac, m.proof.mac.ptr)) {
			reject(c, DG_REJECT_AUTH, "bad proof");
			return DG_OK;
		}
		if (c->hello_url != NULL)
			dg_tp_set_address(tp, c->peer_id, c->hello_url);
		if (!attach(c, true) && !conn_closed(c))
			reject(c, DG_REJECT_DUPLICATE, "already connected");
		return DG_OK;
	}
	case C_DIALED: {
		if (h->type == DG_MSG_REJECT)
			goto rejected;
		if (h->type != DG_MSG_CHALLENGE)
			return DG_ERR_BAD_TAG;
		set_peer_id(c, (dg_node_id)m.ch.node_id);
		if (m.ch.auth != auth || c->peer_id == tp->self || c->peer_id == 0) {
			atomic_fetch_add(&tp->t.auth_failures, 1);
			return DG_ERR_AUTH;
		}
		if (c->peer != NULL && c->peer->id != c->peer_id)
			peer_moved(c);
		memcpy(c->nonce_theirs, m.ch.nonce.ptr, DG_NONCE_LEN);
		if ((e = dgi_auth_mac('l', tp->secret, tp->secret_len, c->nonce_mine,
		    c->nonce_theirs, tp->self, c->peer_id, tp->cluster,
		    strlen(tp->cluster), mac)) != DG_OK)
			return e;
		if (auth && !dgi_auth_equal(mac, m.ch.mac.ptr)) {
			atomic_fetch_add(&tp->t.auth_failures, 1);
			dgi_log("warn", "AUTH-FAIL", "url=%s why=\"peer failed the challenge\"",
			    c->dial_url ? c->dial_url : "?");
			return DG_ERR_AUTH;
		}
		if ((e = dgi_auth_mac('d', tp->secret, tp->secret_len, c->nonce_theirs,
		    c->nonce_mine, tp->self, c->peer_id, tp->cluster,
		    strlen(tp->cluster), mac)) != DG_OK)
			return e;
		dg_msg_proof pr = { { mac, DG_MAC_LEN } };
		c->state = C_PROVED;
		return send_frame(c, DG_MSG_PROOF, &pr);
	}
	case C_PROVED:
		if (h->type == DG_MSG_REJECT)
			goto rejected;
		if (h->type != DG_MSG_WELCOME)
			return DG_ERR_BAD_TAG;
		/* taken first: once attached, a reset may close it at once */
		struct connect_wait *w = take_waiter(c);
		if (!attach(c, false)) {
			/* connected meanwhile by the peer's own dial: that one
			 * serves; or closed meanwhile (its deadline): why */
			pthread_mutex_lock(&c->mu);
			dg_err why = c->state == C_CLOSED ? c->fail : DG_OK;
			pthread_mutex_unlock(&c->mu);
			wait_done(w, why, c->peer_id);
			dgi_conn_close(c, DG_OK);
			return DG_OK;
		}
		wait_done(w, DG_OK, c->peer_id);
		return DG_OK;
	default:
		return DG_ERR_STATE;
	}
rejected:;
	uint32_t repeated = 0;
	if (dgi_lograte_due(&c->tp->lr_rejected, dgi_now_ms(), DGI_HANDSHAKE_LOG_MS, &repeated))
		dgi_log("warn", "HANDSHAKE-REJECTED", "url=%s reason=%d text=\"%.*s\" repeated=%u",
		    c->dial_url ? c->dial_url : "?", (int)m.rej.reason, (int)m.rej.text.len,
		    m.rej.text.ptr ? m.rej.text.ptr : "", repeated);
	if (m.rej.reason == DG_REJECT_DUPLICATE) {
		/* the peer already has a connection with us: it serves */
		wait_done(take_waiter(c), DG_OK, c->peer_id);
		c->dup_refused = true;
		dgi_conn_close(c, DG_OK);
		return DG_OK;
	}
	dgi_conn_close(c, m.rej.reason == DG_REJECT_AUTH ? DG_ERR_AUTH : DG_ERR_REFUSED);
	return DG_OK;
}

/* ---- reading ---- */

static void rx_start(struct conn *c)
{
	if (c->rx.cap - c->rx.len < RX_CHUNK / 4) {
		size_t want = c->rx.len + RX_CHUNK;
		if (dg_buf_reserve(&c->rx, want - c->rx.len) != DG_OK) {
			dgi_conn_close(c, DG_ERR_NOMEM);
			return;
		}
	}
	c->ops->rx_start(c);
}

void dgi_conn_begin(struct conn *c)
{
	rx_start(c);
}

static bool allowed(const struct conn *c, uint16_t type)
{
	bool hs = type >= DG_MSG_HELLO && type <= DG_MSG_HANDSHAKE_LAST;
	return c->state == C_OPEN ? !hs : hs;
}

/* Parse and handle every complete frame in c->rx; false if c closed. */
static bool process(struct conn *c)
{
	dg_tp *tp = c->tp;
	size_t off = 0;
	while (c->state != C_CLOSED && c->rx.len - off >= DG_FRAME_HEADER) {
		dg_frame_header h;
		const uint8_t *p = c->rx.data + off;
		/* before authentication a peer gets no more than a handshake
		 * needs: it cannot make this node reserve recv_max per socket */
		dg_err e = dgi_frame_get(p, c->state == C_OPEN ? tp->cfg.recv_max :
		    DG_HANDSHAKE_MAX, &h);
		if (e == DG_OK && !allowed(c, h.type))
			e = DG_ERR_BAD_TAG;
		if (e == DG_OK && c->state == C_OPEN && h.sender != c->peer_id)
			e = DG_ERR_AUTH;
		if (e != DG_OK) {
			dgi_count_failure(tp, h.type < DG_MSG__COUNT && dg_msg_row_of(h.type) ?
			    (dg_msg_type)h.type : DG_MSG_UNKNOWN);
			atomic_fetch_add(&tp->t.malformed_frames, 1);
			dgi_log("warn", "FRAME-BAD", "peer=%016llx type=%u len=%u err=%s",
			    (unsigned long long)c->peer_id, h.type, h.body_len, dg_strerror(e));
			dgi_conn_close(c, e);
			return false;
		}
		size_t need = DG_FRAME_HEADER + (size_t)h.body_len;
		if (c->rx.len - off < need) {
			if (need > c->rx.cap && off == 0 &&
			    dg_buf_reserve(&c->rx, need - c->rx.len) != DG_OK) {
				dgi_conn_close(c, DG_ERR_NOMEM);
				return false;
			}
			break; /* the rest of this frame is still on its way */
		}
		const uint8_t *body = p + DG_FRAME_HEADER;
		if (c->state != C_OPEN) {
			dgi_count_hs(tp, (dg_msg_type)h.type, false, need);
			if ((e = handshake(c, &h, body)) != DG_OK) {
				dgi_count_failure(tp, (dg_msg_type)h.type);
				if (e != DG_ERR_AUTH) /* counted once, as auth_failures */
					atomic_fetch_add(&tp->t.handshake_failures, 1);
				dgi_conn_close(c, e);
				return false;
			}
		} else if (c->peer == NULL ||
		    !atomic_load_explicit(&c->peer->test_cut, memory_order_relaxed)) {
			dgi_dispatch(tp, c, &h, body);
		}
		off += need;
	}
	/* keep the partial frame at the front */
	if (off > 0) {
		memmove(c->rx.data, c->rx.data + off, c->rx.len - off);
		c->rx.len -= off;
	}
	return c->state != C_CLOSED;
}

void dgi_conn_rx_done(struct conn *c, size_t n)
{
	c->rx.len += n;
	if (c->peer != NULL && !atomic_load_explicit(&c->peer->test_cut, memory_order_relaxed))
		/* heard from: once per read, on the cheap clock */
		atomic_store_explicit(&c->peer->heard_ms, dgi_coarse_ms(),
		    memory_order_relaxed);
	if (process(c) && c->state != C_CLOSED) {
		/* a frame bigger than the buffer made it grow in process() */
		rx_start(c);
	}
}

/* ---- the nng-stream backend (tls+tcp://, ipc://) ---- */

static void ns_rx_start(struct conn *c)
{
	nng_iov iov = { c->rx.data + c->rx.len, c->rx.cap - c->rx.len };
	nng_aio_set_iov(c->rx_aio, 1, &iov);
	nng_stream_recv(c->stream, c->rx_aio);
}

static void rx_cb(void *arg)
{
	struct conn *c = arg;
	int rv = nng_aio_result(c->rx_aio);
	if (rv != 0) {
		dgi_conn_close(c, io_err(c, rv));
		return;
	}
	dgi_conn_rx_done(c, nng_aio_count(c->rx_aio));
}

static bool ns_tx_start(struct conn *c)
{
	nng_iov iov = { c->wire.data + c->tx_done, c->wire.len - c->tx_done };
	nng_aio_set_iov(c->tx_aio, 1, &iov);
	nng_stream_send(c->stream, c->tx_aio);
	return false; /* tx_cb ends it */
}

static void tx_cb(void *arg)
{
	struct conn *c = arg;
	int rv = nng_aio_result(c->tx_aio);
	if (rv != 0) {
		dgi_conn_close(c, io_err(c, rv));
		return;
	}
	pthread_mutex_lock(&c->mu);
	c->tx_done += nng_aio_count(c->tx_aio);
	pthread_mutex_unlock(&c->mu);
	/* the rest of a partial write, or the end of it and the next write */
	dgi_conn_start(dgi_conn_tx_done(c));
}

static void ns_close(struct conn *c)
{
	nng_stream_close(c->stream); /* pending I/O completes with an error */
}

static bool ns_idle(struct conn *c)
{
	(void)c;
	return true; /* nng_free waits for the callbacks */
}

static void ns_free(struct conn *c)
{
	nng_aio_stop(c->rx_aio);
	nng_aio_stop(c->tx_aio);
	nng_aio_free(c->rx_aio);
	nng_aio_free(c->tx_aio);
	nng_stream_free(c->stream);
}

static const struct conn_ops nng_ops = {
	.rx_start = ns_rx_start,
	.tx_start = ns_tx_start,
	.close = ns_close,
	.idle = ns_idle,
	.free = ns_free,
};

/* A connection on an nng stream (s belongs to it from here on). */
static struct conn *conn_new_nng(dg_tp *tp, nng_stream *s, bool dialer)
{
	struct conn *c = dgi_conn_new(tp, &nng_ops, dialer);
	if (c == NULL)
		return NULL;
	c->stream = s;
	if (nng_aio_alloc(&c->rx_aio, rx_cb, c) != 0 ||
	    nng_aio_alloc(&c->tx_aio, tx_cb, c) != 0) {
		nng_aio_free(c->rx_aio);
		dgi_conn_discard(c);
		return NULL;
	}
	dgi_conn_link(c);
	return c;
}

/* ---- dialing and accepting ---- */

static dg_err tls_setup_dialer(dg_tp *tp, nng_stream_dialer *d)
{
	if (tp->tls_client == NULL)
		return DG_OK;
	return nng_stream_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, tp->tls_client) == 0 ?
	    DG_OK : DG_ERR_TLS;
}

void dgi_dial_end(struct dial *d, struct conn *c, dg_err e, const char *why)
{
	dg_tp *tp = d->tp;
	if (c != NULL) {
		/* (c is on tp->conns already: the stats read c->peer under c->mu) */
		pthread_mutex_lock(&c->mu);
		c->peer = d->peer;
		pthread_mutex_unlock(&c->mu);
		c->waiter = d->waiter;
		c->dial_url = d->url;
		d->url = NULL;
		dg_msg_hello hello = { DG_FRAME_VERSION,
			{ tp->cluster, (uint32_t)strlen(tp->cluster) }, (int64_t)tp->self,
			{ tp->address, (uint32_t)strlen(tp->address) },
			{ c->nonce_mine, DG_NONCE_LEN }, tp->secret_len > 0 };
		dg_err he = dgi_random(c->nonce_mine, DG_NONCE_LEN);
		if (he == DG_OK)
			he = send_frame(c, DG_MSG_HELLO, &hello);
		if (he != DG_OK)
			dgi_conn_close(c, he);
		else
			rx_start(c);
	} else {
		/* a peer cut off is dialled again and again: one line a second
		 * per peer, with the count left out */
		uint32_t rep;
		struct dgi_lograte *lr = d->peer != NULL ? &d->peer->lr_dial : &tp->lr_dial;
		if (dgi_lograte_due(lr, dgi_now_ms(), DGI_HANDSHAKE_LOG_MS, &rep))
			dgi_log("warn", "DIAL-FAIL", "url=%s err=%s repeated=%u",
			    d->url ? d->url : "?", why, rep);
		if (d->peer != NULL)
			dgi_dial_failed(tp, d->peer, DG_ERR_UNREACHABLE);
		wait_done(d->waiter, e, 0);
	}
	pthread_mutex_lock(&tp->mu);
	d->done = true; /* the service thread frees it */
	pthread_mutex_unlock(&tp->mu);
}

static void dial_cb(void *arg)
{
	struct dial *d = arg;
	dg_tp *tp = d->tp;
	struct conn *c = NULL;
	int rv = nng_aio_result(d->aio);
	if (rv == 0 && !atomic_load(&tp->stopping)) {
		nng_stream *s = nng_aio_get_output(d->aio, 0);
		if ((c = conn_new_nng(tp, s, true)) == NULL) {
			nng_stream_free(s);
			rv = NNG_ENOMEM;
		}
	} else if (rv == 0) {
		nng_stream_free(nng_aio_get_output(d->aio, 0));
		rv = NNG_ECLOSED;
	}
	dg_err e = rv == 0 ? DG_OK : rv == NNG_ETIMEDOUT ? DG_ERR_TIMEOUT :
	    rv == NNG_ECLOSED ? DG_ERR_CLOSED :
	    rv == NNG_EPEERAUTH || rv == NNG_ECRYPTO ? DG_ERR_TLS : DG_ERR_NET;
	dgi_dial_end(d, c, e, nng_strerror(rv));
}

struct dial *dgi_conn_dial_new(dg_tp *tp, const char *url, struct peer *p,
    struct connect_wait *waiter, dg_err *err)
{
	struct dial *d = dgi_calloc(1, sizeof(*d));
	*err = DG_ERR_NOMEM;
	if (d == NULL)
		return NULL;
	d->tp = tp;
	d->peer = p;
	d->waiter = waiter;
	d->fd = -1;
	if ((d->url = xstrdup(url)) == NULL) {
		dgi_free(d);
		return NULL;
	}
	dg_err e = DG_OK;
	d->native = dgi_tcp_url(url);
	if (d->native) {
		e = dgi_tcp_dial_prepare(d);
	} else {
		int rv = nng_stream_dialer_alloc(&d->dialer, url);
		e = rv == 0 ? tls_setup_dialer(tp, d->dialer) : DG_ERR_INVAL;
		if (e == DG_OK && nng_aio_alloc(&d->aio, dial_cb, d) != 0)
			e = DG_ERR_NOMEM;
		if (e == DG_OK)
			nng_aio_set_timeout(d->aio, (nng_duration)tp->cfg.connect_timeout_ms);
	}
	if (e != DG_OK) {
		dial_discard(d);
		*err = e;
		return NULL;
	}
	*err = DG_OK;
	return d;
}

/* A dial that never started: freed here. */
static void dial_discard(struct dial *d)
{
	nng_aio_free(d->aio);
	nng_stream_dialer_free(d->dialer);
	dgi_free(d->host);
	dgi_free(d->url);
	dgi_free(d);
}

dg_err dgi_conn_dial_start(struct dial *d)
{
	dg_tp *tp = d->tp;
	dg_err e = DG_OK;
	pthread_mutex_lock(&tp->mu);
	if (atomic_load(&tp->stopping)) {
		e = DG_ERR_CLOSED; /* dgi_conn_stop_all may have looked already */
	} else {
		d->next = tp->dials;
		tp->dials = d;
	}
	pthread_mutex_unlock(&tp->mu);
	if (e != DG_OK) {
		dial_discard(d);
		return e;
	}
	if (!d->native) {
		nng_stream_dialer_dial(d->dialer, d->aio);
		return DG_OK;
	}
	dgi_tcp_dial_start(d); /* its failures end it through dgi_dial_end */
	return DG_OK;
}

dg_err dgi_conn_dial(dg_tp *tp, const char *url, struct peer *p,
    struct connect_wait *waiter)
{
	dg_err e;
	struct dial *d = dgi_conn_dial_new(tp, url, p, waiter, &e);
	return d != NULL ? dgi_conn_dial_start(d) : e;
}

static void accept_cb(void *arg)
{
	dg_tp *tp = arg;
	int rv = nng_aio_result(tp->accept_aio);
	if (tp->accept_sleeping) {
		/* the back-off after a failed accept ended (or was stopped) */
		tp->accept_sleeping = false;
		if (rv == 0 && !atomic_load(&tp->stopping))
			nng_stream_listener_accept(tp->listener, tp->accept_aio);
		return;
	}
	if (rv != 0) {
		if (rv != NNG_ECLOSED && rv != NNG_ECANCELED && !atomic_load(&tp->stopping)) {
			/* out of file descriptors, most often: retrying at once
			 * would spin (issue 14, finding 4); wait 10 ms .. 1 s */
			uint32_t b = tp->accept_backoff_ms;
			tp->accept_backoff_ms = b == 0 ? 10 : b >= 500 ? 1000 : 2 * b;
			uint32_t repeated;
			if (dgi_lograte_due(&tp->lr_accept, dgi_now_ms(), 1000, &repeated))
				dgi_log("warn", "ACCEPT-FAIL", "err=\"%s\" repeated=%u retry_ms=%u",
				    nng_strerror(rv), repeated, tp->accept_backoff_ms);
			tp->accept_sleeping = true;
			nng_sleep_aio((nng_duration)tp->accept_backoff_ms, tp->accept_aio);
		}
		return;
	}
	tp->accept_backoff_ms = 0;
	nng_stream *s = nng_aio_get_output(tp->accept_aio, 0);
	if (atomic_load(&tp->stopping)) {
		nng_stream_free(s);
		return;
	}
	struct conn *c = dgi_conn_admit(tp) ? conn_new_nng(tp, s, false) : NULL;
	if (c == NULL)
		nng_stream_free(s);
	else
		rx_start(c);
	nng_stream_listener_accept(tp->listener, tp->accept_aio);
}

dg_err dgi_conn_accept_start(dg_tp *tp)
{
	if (nng_aio_alloc(&tp->accept_aio, accept_cb, tp) != 0)
		return DG_ERR_NOMEM;
	nng_stream_listener_accept(tp->listener, tp->accept_aio);
	return DG_OK;
}

void dgi_conn_expire(dg_tp *tp, uint64_t now)
{
	struct conn *late[32];
	size_t n = 0;
	pthread_mutex_lock(&tp->mu);
	for (struct conn *c = tp->conns; c != NULL && n < 32; c = c->next) {
		int st = c->state;
		if (st != C_OPEN && st != C_CLOSED && now > c->deadline_ms)
			late[n++] = c;
	}
	pthread_mutex_unlock(&tp->mu);
	/* only this thread frees connections, so these stay valid */
	for (size_t i = 0; i < n; i++) {
		atomic_fetch_add(&tp->t.handshake_failures, 1);
		uint32_t repeated = 0;
		if (dgi_lograte_due(&tp->lr_hs_timeout, now, DGI_HANDSHAKE_LOG_MS, &repeated))
			dgi_log("warn", "HANDSHAKE-TIMEOUT", "peer=%016llx url=%s repeated=%u",
			    (unsigned long long)late[i]->peer_id,
			    late[i]->dial_url ? late[i]->dial_url : "(inbound)", repeated);
		dgi_conn_close(late[i], DG_ERR_TIMEOUT);
	}
}

void dgi_conn_stop_all(dg_tp *tp)
{
	/* dials: nng's are closed here and waited for; the reactor ends native
	 * ones itself once it sees tp->stopping (a name being resolved ends when
	 * the lookup returns) */
	for (;;) {
		struct dial *d = NULL;
		pthread_mutex_lock(&tp->mu);
		for (struct dial *x = tp->dials; x != NULL; x = x->next)
			if (!x->done) {
				d = x;
				break;
			}
		pthread_mutex_unlock(&tp->mu);
		if (d == NULL)
			break;
		if (d->native) {
			dgi_reactor_wake(tp);
			struct timespec ts = { 0, 1000000 };
			nanosleep(&ts, NULL);
			continue;
		}
		nng_stream_dialer_close(d->dialer);
		nng_aio_stop(d->aio); /* runs dial_cb, which marks it done */
		pthread_mutex_lock(&tp->mu);
		d->done = true;
		pthread_mutex_unlock(&tp->mu);
	}
	for (;;) {
		pthread_mutex_lock(&tp->mu);
		struct conn *c = tp->conns;
		pthread_mutex_unlock(&tp->mu);
		if (c == NULL)
			break;
		dgi_conn_close(c, DG_ERR_CLOSED);
	}
	while (dgi_conn_reap(tp)) { /* the reactor has yet to let go of some */
		dgi_reactor_wake(tp);
		struct timespec ts = { 0, 100000 };
		nanosleep(&ts, NULL);
	}
}
