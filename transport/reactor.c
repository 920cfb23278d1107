/* reactor.c — native TCP for tcp:// URLs: an epoll reactor, one per dg_tp.
 *
 * Why.  nng 1.5 completes every stream send and receive on its task
 * threads, so a round trip woke ~5 threads.  Here a message wakes only the
 * thread that must act on it: the receiving node's reactor, and for a reply
 * the caller waiting in dg_tp_call.
 *
 * Threads and what each owns.
 *   The reactor thread (started with the dg_tp, one per dg_tp) waits in
 *   epoll_wait and does, inline: reads (recv into c->rx, then
 *   dgi_conn_rx_done — frames, the handshake, handlers and reply callbacks
 *   all run on it), accepts (the listening socket is in its epoll set),
 *   connects (dials are posted to it), the rest of a write the socket buffer
 *   could not take (EPOLLOUT), and dial timeouts.  Only it reads a
 *   connection's socket and touches c->rx.
 *   Writes start on whichever thread kicks the peer's queue (dgi_conn_start,
 *   after it dropped every lock): send() with MSG_DONTWAIT.  When the socket
 *   buffer is full — or when the write follows the last one within
 *   COALESCE_NS (a stream of messages: see tcp_tx_start) — the writer sets
 *   c->tx_wait (release) and adds EPOLLOUT to the registration: from then
 *   on the reactor owns the write — c->wire and c->tx_done pass with that
 *   flag (it takes it with an acquiring exchange, on EPOLLOUT) — until it
 *   ends; it then removes EPOLLOUT and starts the next write itself
 *   (dgi_conn_tx_done), with everything queued meanwhile.  EPOLLOUT is
 *   removed only by the owner after taking the flag, so it is not left
 *   armed with nobody waiting (that would spin).  A write that
 *   fails (reset, EPIPE) shuts the socket down: the reactor's next read sees
 *   the end and closes the connection, as for any broken connection.
 *   Handshake frames (send_frame) are written the same way, always from the
 *   reactor (it runs the handshake).
 *
 * Descriptors, closing and freeing.
 *   A connection's socket is registered once, level-triggered, EPOLLIN
 *   (plus EPOLLOUT while a write waits), data.ptr = &c->ev.  dgi_conn_close
 *   (any thread) calls tcp_close: shutdown(SHUT_RDWR) — a writer in send()
 *   gets EPIPE, the peer sees the end — then EPOLL_CTL_DEL, then
 *   c->del_epoch = r->epoch and a wake.  The descriptor is closed only by
 *   tcp_free (EPOLL_CTL_DEL always comes first), so its number cannot be
 *   reused while anyone may still use it.  Events taken from epoll_wait
 *   before the EPOLL_CTL_DEL may still name the connection: the reactor
 *   skips closed connections, and bumps r->epoch after it handled a whole
 *   round of events.  The service thread (dgi_conn_reap) frees a closed
 *   connection only when no sender holds it (c->users, as for nng) and
 *   tcp_idle holds: r->epoch > c->del_epoch, i.e. the round during which it
 *   left epoll is over.  Until then it stays on tp->dead.
 *
 * Dials.  dgi_tcp_dial_prepare checks the URL on the caller's thread (which
 * may hold peer->mu) and takes a numeric address at once; a host name is
 * resolved (getaddrinfo) on a thread of the dial's own, joined when the dial
 * is freed.  The dial is then posted to the reactor (r->posted under r->mu)
 * and from then on only the reactor touches it: socket, connect()
 * (non-blocking, TCP_NODELAY, SOCK_CLOEXEC), EPOLLOUT on the socket, SO_ERROR,
 * the deadline (connect_timeout_ms from the dial's start, the epoll_wait
 * timeout keeps it), and tp->stopping.  It ends on the reactor through
 * dgi_dial_end — the same path as nng's dials: success moves the socket's
 * registration to the new connection (EPOLL_CTL_MOD) and sends HELLO;
 * failure is DG_ERR_NET (refused, unreachable, no such host),
 * DG_ERR_TIMEOUT or DG_ERR_CLOSED.  A dial's registration changes only
 * while its own event is handled or after a round, so no later event names
 * a dial that ended.
 *
 * Stop (dg_tp_stop).  tp->stopping is set, dgi_reactor_sync waits for the
 * round in progress (an accept in it finishes; later ones close the new
 * socket), native dials end with DG_ERR_CLOSED at the reactor's next round,
 * every connection is closed and reaped (the reactor, still running,
 * acknowledges), then dgi_reactor_stop sets r->quit, wakes it through the
 * eventfd, joins it and closes the listening socket, the eventfd and the
 * epoll descriptor.
 */
#define _GNU_SOURCE
#include "transport_int.h"

#include <errno.h>
#include <sched.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define OWNER(p, T, m) ((T *)(void *)((char *)(p) - offsetof(T, m)))
#define EVENTS_MAX 64
#define ACCEPTS_MAX 64        /* per event: other sockets get their turn */
#define ACCEPT_PAUSE_MS 100   /* out of descriptors: listen again after */
#define HOST_MAX 256
#define COALESCE_NS 2000      /* see tcp_tx_start */

struct dgi_reactor {
	dg_tp *tp;
	int epfd, evfd, lfd;
	struct dgi_ev wake_ev, listen_ev;
	pthread_t thread;
	bool started;
	_Atomic bool quit;
	_Atomic uint64_t epoch;     /* rounds of events handled */
	pthread_mutex_t mu;
	struct dial *posted;        /* under mu: dials to start */
	/* the reactor thread's own */
	struct dial *dialing;       /* connecting */
	uint64_t accept_resume_ms;  /* 0, or when to accept again */
};

static void wake(struct dgi_reactor *r)
{
	uint64_t one = 1;
	if (write(r->evfd, &one, sizeof(one)) < 0) {
		/* EAGAIN: the counter is full, so a wake-up is pending anyway */
	}
}

void dgi_reactor_wake(dg_tp *tp)
{
	if (tp->reactor != NULL)
		wake(tp->reactor);
}

static const char *errtext(int err, char *buf, size_t n)
{
	return strerror_r(err, buf, n); /* GNU: may return a static string */
}

static void nodelay(int fd)
{
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* ---- addresses ---- */

bool dgi_tcp_url(const char *url)
{
	return strncmp(url, "tcp://", 6) == 0;
}

/* "tcp://HOST:PORT" (HOST may be [v6], empty or "*": any) → host, port. */
static dg_err parse(const char *url, char host[HOST_MAX], char port[8])
{
	if (!dgi_tcp_url(url))
		return DG_ERR_INVAL;
	const char *h = url + 6, *hend, *colon;
	if (*h == '[') {
		if ((hend = strchr(h, ']')) == NULL || hend[1] != ':')
			return DG_ERR_INVAL;
		colon = hend + 1;
		h++;
	} else {
		if ((colon = strrchr(h, ':')) == NULL)
			return DG_ERR_INVAL;
		hend = colon;
		if (memchr(h, ':', (size_t)(hend - h)) != NULL)
			return DG_ERR_INVAL; /* an IPv6 address needs brackets */
	}
	size_t n = (size_t)(hend - h);
	if (n >= HOST_MAX || memchr(h, '/', n) != NULL)
		return DG_ERR_INVAL;
	memcpy(host, h, n);
	host[n] = 0;
	if (strcmp(host, "*") == 0)
		host[0] = 0;
	const char *p = colon + 1;
	size_t pl = strlen(p);
	if (pl == 0 || pl > 5 || strspn(p, "0123456789") != pl || atoi(p) > 65535)
		return DG_ERR_INVAL;
	memcpy(port, p, pl + 1);
	return DG_OK;
}

/* getaddrinfo for a stream socket: the first IPv4 address, else the first
 * one.  0 or an EAI_ code. */
static int resolve(const char *host, const char *port, int flags,
    struct sockaddr_storage *sa, socklen_t *len)
{
	struct addrinfo hints, *res, *pick = NULL;
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV | flags;
	int rv = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
	if (rv != 0)
		return rv;
	for (struct addrinfo *ai = res; ai != NULL && pick == NULL; ai = ai->ai_next)
		if (ai->ai_family == AF_INET)
			pick = ai;
	if (pick == NULL)
		pick = res;
	if (pick->ai_addrlen > sizeof(*sa)) {
		freeaddrinfo(res);
		return EAI_FAMILY;
	}
	memcpy(sa, pick->ai_addr, pick->ai_addrlen);
	*len = pick->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

/* ---- connections: the backend ---- */

static void arm(struct conn *c, bool out)
{
	struct epoll_event ev;
	memset(&ev, 0, sizeof(ev));
	ev.events = EPOLLIN | (out ? EPOLLOUT : 0);
	ev.data.ptr = &c->ev;
	/* ENOENT once the connection left epoll (closed): nothing to do */
	epoll_ctl(c->tp->reactor->epfd, EPOLL_CTL_MOD, c->fd, &ev);
}

static void tcp_rx_start(struct conn *c)
{
	(void)c; /* the standing EPOLLIN registration: the reactor reads */
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The reactor takes the write over: the flag first (release; from here on
 * this thread touches nothing of the write), then EPOLLOUT.  The other
 * order could let the reactor, woken by the arm before the flag is set,
 * spin on a writable socket while the writer is preempted.  The reactor
 * claims a write only on an EPOLLOUT (or error) event, which the arm
 * causes; MOD re-checks readiness, so no wake-up is lost. */
static void hand_over(struct conn *c)
{
	atomic_store_explicit(&c->tx_wait, true, memory_order_release);
	arm(c, true);
}

/* Write what is left of c->wire; true when all of it is out. */
static bool tcp_write(struct conn *c)
{
	while (c->tx_done < c->wire.len) {
		ssize_t n = send(c->fd, c->wire.data + c->tx_done, c->wire.len - c->tx_done,
		    MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n >= 0) {
			c->tx_done += (size_t)n;
			continue;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			hand_over(c); /* the socket buffer is full: on when it drains */
			return false;
		}
		/* broken: the reactor's next read sees the end and closes it */
		shutdown(c->fd, SHUT_RDWR);
		return false;
	}
	atomic_store_explicit(&c->tx_end_ns, now_ns(), memory_order_relaxed);
	return true;
}

/* A new write hard on the heels of the last one is a stream of messages:
 * one send() each would cost a system call per message (several µs on
 * loopback, the receiver's wake-up included).  Such a write goes to the
 * reactor instead (the socket is writable, so it takes it at once) and the
 * frames queued meanwhile follow in one send().  A request, or a reply,
 * follows the previous write by a round trip or more: written at once.  (A
 * handed-over write waits for the reactor's round in progress: one more
 * reason for handlers to be quick.) */
static bool tcp_tx_start(struct conn *c)
{
	if (c->tx_done == 0 && now_ns() -
	    atomic_load_explicit(&c->tx_end_ns, memory_order_relaxed) < COALESCE_NS) {
		hand_over(c);
		return false;
	}
	return tcp_write(c);
}

static void tcp_close(struct conn *c)
{
	struct dgi_reactor *r = c->tp->reactor;
	shutdown(c->fd, SHUT_RDWR);
	epoll_ctl(r->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	c->del_epoch = atomic_load(&r->epoch);
	wake(r); /* the round that may still name it ends, even when idle */
}

static bool tcp_idle(struct conn *c)
{
	return atomic_load(&c->tp->reactor->epoch) > c->del_epoch;
}

static void tcp_free(struct conn *c)
{
	close(c->fd);
}

const struct conn_ops dgi_tcp_ops = {
	.rx_start = tcp_rx_start,
	.tx_start = tcp_tx_start,
	.close = tcp_close,
	.idle = tcp_idle,
	.free = tcp_free,
};

/* Readable or writable (or broken): read once (level-triggered: more comes
 * as another event), then go on with a write that waits for room. */
static void on_conn(struct conn *c, uint32_t events)
{
	if (c->state == C_CLOSED)
		return; /* closed earlier in this round: only the memory is left */
	if (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
		ssize_t n = recv(c->fd, c->rx.data + c->rx.len, c->rx.cap - c->rx.len, 0);
		if (n > 0) {
			dgi_conn_rx_done(c, (size_t)n);
		} else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK &&
		    errno != EINTR)) {
			dgi_conn_close(c, DG_ERR_CONN_BROKEN);
			return;
		}
	}
	if ((events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) && c->state != C_CLOSED &&
	    atomic_exchange_explicit(&c->tx_wait, false, memory_order_acq_rel)) {
		if (tcp_write(c)) {
			arm(c, false);
			dgi_conn_start(dgi_conn_tx_done(c));
		}
	}
}

/* ---- accepting ---- */

static void on_accept(struct dgi_reactor *r)
{
	dg_tp *tp = r->tp;
	for (int k = 0; k < ACCEPTS_MAX; k++) {
		int fd = accept4(r->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			int err = errno;
			char buf[128];
			if (err == EAGAIN || err == EWOULDBLOCK)
				return;
			if (err == EINTR || err == ECONNABORTED || err == EPROTO)
				continue;
			uint32_t repeated;
			if (dgi_lograte_due(&tp->lr_accept, dgi_now_ms(), 1000, &repeated))
				dgi_log("warn", "ACCEPT-FAIL", "err=\"%s\" repeated=%u retry_ms=%d",
				    errtext(err, buf, sizeof(buf)), repeated, ACCEPT_PAUSE_MS);
			/* out of descriptors or memory: the pending connection would
			 * wake us again at once; stop listening for a moment */
			struct epoll_event ev;
			memset(&ev, 0, sizeof(ev));
			ev.data.ptr = &r->listen_ev;
			epoll_ctl(r->epfd, EPOLL_CTL_MOD, r->lfd, &ev);
			r->accept_resume_ms = dgi_now_ms() + ACCEPT_PAUSE_MS;
			return;
		}
		if (atomic_load(&tp->stopping)) {
			close(fd);
			continue;
		}
		if (!dgi_conn_admit(tp)) {
			close(fd);
			continue;
		}
		nodelay(fd);
		struct conn *c = dgi_conn_new(tp, &dgi_tcp_ops, false);
		if (c == NULL) {
			close(fd);
			continue;
		}
		c->fd = fd;
		c->ev.kind = DGI_EV_CONN;
		struct epoll_event ev;
		memset(&ev, 0, sizeof(ev));
		ev.events = EPOLLIN;
		ev.data.ptr = &c->ev;
		if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
			dgi_conn_discard(c);
			close(fd);
			continue;
		}
		dgi_conn_link(c);
		dgi_conn_begin(c);
	}
}

/* ---- dialing ---- */

dg_err dgi_tcp_dial_prepare(struct dial *d)
{
	char host[HOST_MAX];
	d->deadline_ms = dgi_now_ms() + d->tp->cfg.connect_timeout_ms;
	dg_err e = parse(d->url, host, d->port);
	if (e != DG_OK)
		return e;
	int rv = resolve(host, d->port, AI_NUMERICHOST, &d->sa, &d->salen);
	if (rv == EAI_NONAME && host[0] != 0) {
		size_t n = strlen(host) + 1; /* a name: resolved off this thread */
		if ((d->host = dgi_alloc(n)) == NULL)
			return DG_ERR_NOMEM;
		memcpy(d->host, host, n);
	} else if (rv != 0) {
		d->err = DG_ERR_NET;
		d->why = gai_strerror(rv);
	}
	return DG_OK;
}

static void post(struct dgi_reactor *r, struct dial *d)
{
	pthread_mutex_lock(&r->mu);
	d->rnext = r->posted;
	r->posted = d;
	pthread_mutex_unlock(&r->mu);
	wake(r); /* d is the reactor's now: not touched again here */
}

static void *resolver_main(void *arg)
{
	dgi_thread_name("dg-resolver");
	struct dial *d = arg;
	struct dgi_reactor *r = d->tp->reactor;
	/* its own id, before posting: pthread_create may store it in the
	 * creator only after this thread posted and the dial was freed */
	d->resolver = pthread_self();
	int rv = resolve(d->host, d->port, 0, &d->sa, &d->salen);
	if (rv != 0) {
		d->err = DG_ERR_NET;
		d->why = gai_strerror(rv);
	}
	post(r, d);
	return NULL;
}

void dgi_tcp_dial_start(struct dial *d)
{
	struct dgi_reactor *r = d->tp->reactor;
	if (d->host != NULL && d->err == DG_OK) {
		pthread_t t;
		d->has_resolver = true; /* before the thread: reap joins it */
		if (pthread_create(&t, NULL, resolver_main, d) == 0)
			return; /* d is the resolver's now, then the reactor's */
		d->has_resolver = false;
		d->err = DG_ERR_NET;
		d->why = "cannot start a resolver thread";
	}
	post(r, d);
}

static void dial_fail(struct dial *d, dg_err e, const char *why)
{
	if (d->fd >= 0) {
		epoll_ctl(d->tp->reactor->epfd, EPOLL_CTL_DEL, d->fd, NULL);
		close(d->fd);
		d->fd = -1;
	}
	dgi_dial_end(d, NULL, e, why);
}

static dg_err sys_err(int err)
{
	return err == ETIMEDOUT ? DG_ERR_TIMEOUT : DG_ERR_NET;
}

/* A posted dial: connect (reactor thread, no lock held). */
static void dial_connect(struct dgi_reactor *r, struct dial *d)
{
	char buf[128];
	if (d->err != DG_OK) {
		dial_fail(d, d->err, d->why);
		return;
	}
	if (atomic_load(&r->tp->stopping)) {
		dial_fail(d, DG_ERR_CLOSED, "transport stopping");
		return;
	}
	if (dgi_now_ms() >= d->deadline_ms) {
		dial_fail(d, DG_ERR_TIMEOUT, "timed out");
		return;
	}
	int fd = socket(d->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		int err = errno;
		dial_fail(d, DG_ERR_NET, errtext(err, buf, sizeof(buf)));
		return;
	}
	d->fd = fd;
	nodelay(fd);
	if (connect(fd, (struct sockaddr *)&d->sa, d->salen) != 0 && errno != EINPROGRESS) {
		int err = errno;
		dial_fail(d, sys_err(err), errtext(err, buf, sizeof(buf)));
		return;
	}
	struct epoll_event ev;
	memset(&ev, 0, sizeof(ev));
	ev.events = EPOLLOUT;
	ev.data.ptr = &d->ev;
	d->ev.kind = DGI_EV_DIAL;
	if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
		int err = errno;
		close(fd);
		d->fd = -1;
		dial_fail(d, DG_ERR_NET, errtext(err, buf, sizeof(buf)));
		return;
	}
	d->rnext = r->dialing;
	r->dialing = d;
}

/* The socket of a dial became writable or failed: connected or not. */
static void on_dial(struct dgi_reactor *r, struct dial *d)
{
	dg_tp *tp = r->tp;
	char buf[128];
	int err = 0;
	socklen_t len = sizeof(err);
	if (getsockopt(d->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
		err = errno;
	if (err == 0) {
		struct sockaddr_storage sa;
		socklen_t sl = sizeof(sa);
		if (getpeername(d->fd, (struct sockaddr *)&sa, &sl) != 0 && errno == ENOTCONN)
			return; /* not yet (a spurious wake-up): still connecting */
	}
	for (struct dial **pp = &r->dialing; *pp != NULL; pp = &(*pp)->rnext)
		if (*pp == d) {
			*pp = d->rnext;
			break;
		}
	if (err != 0) {
		dial_fail(d, sys_err(err), errtext(err, buf, sizeof(buf)));
		return;
	}
	if (atomic_load(&tp->stopping)) {
		dial_fail(d, DG_ERR_CLOSED, "transport stopping");
		return;
	}
	struct conn *c = dgi_conn_new(tp, &dgi_tcp_ops, true);
	if (c == NULL) {
		dial_fail(d, DG_ERR_NET, "out of memory");
		return;
	}
	c->fd = d->fd;
	c->ev.kind = DGI_EV_CONN;
	struct epoll_event ev;
	memset(&ev, 0, sizeof(ev));
	ev.events = EPOLLIN;
	ev.data.ptr = &c->ev;
	if (epoll_ctl(r->epfd, EPOLL_CTL_MOD, d->fd, &ev) != 0) {
		int e = errno;
		dgi_conn_discard(c);
		dial_fail(d, DG_ERR_NET, errtext(e, buf, sizeof(buf)));
		return;
	}
	d->fd = -1; /* the connection's now */
	dgi_conn_link(c);
	dgi_dial_end(d, c, DG_OK, NULL);
}

/* After a round: start posted dials, end late ones (or all, at stop),
 * listen again after a pause. */
static void housekeeping(struct dgi_reactor *r)
{
	pthread_mutex_lock(&r->mu);
	struct dial *d = r->posted;
	r->posted = NULL;
	pthread_mutex_unlock(&r->mu);
	while (d != NULL) {
		struct dial *next = d->rnext;
		dial_connect(r, d);
		d = next;
	}
	if (r->dialing == NULL && r->accept_resume_ms == 0)
		return;
	uint64_t now = dgi_now_ms();
	bool stopping = atomic_load(&r->tp->stopping);
	for (struct dial **pp = &r->dialing; *pp != NULL;) {
		d = *pp;
		if (stopping || now >= d->deadline_ms) {
			*pp = d->rnext;
			dial_fail(d, stopping ? DG_ERR_CLOSED : DG_ERR_TIMEOUT,
			    stopping ? "transport stopping" : "connect timed out");
		} else {
			pp = &d->rnext;
		}
	}
	if (r->accept_resume_ms != 0 && now >= r->accept_resume_ms) {
		struct epoll_event ev;
		memset(&ev, 0, sizeof(ev));
		ev.events = EPOLLIN;
		ev.data.ptr = &r->listen_ev;
		epoll_ctl(r->epfd, EPOLL_CTL_MOD, r->lfd, &ev);
		r->accept_resume_ms = 0;
	}
}

/* epoll_wait's timeout: the next dial deadline or accept resumption. */
static int next_timeout(struct dgi_reactor *r)
{
	uint64_t next = r->accept_resume_ms ? r->accept_resume_ms : UINT64_MAX;
	for (struct dial *d = r->dialing; d != NULL; d = d->rnext)
		if (d->deadline_ms < next)
			next = d->deadline_ms;
	if (next == UINT64_MAX)
		return -1;
	uint64_t now = dgi_now_ms();
	if (next <= now)
		return 0;
	return next - now >= 60000 ? 60000 : (int)(next - now) + 1;
}

/* Spinning before it sleeps (dg_tp_config.reactor_spin_us).  A reactor
 * that handled events polls epoll (timeout 0) for up to that long,
 * yielding its CPU between polls, before it blocks in epoll_wait: the
 * next message of a busy exchange — a reply, the next request, a
 * backup's answer — then finds it running.  Asleep, each one costs a
 * wake-up, and on a VM whose idle CPUs halt, that wake-up is tens of µs
 * (bench/README.md, "Reactors that spin before they sleep").  The yield
 * keeps it from taking a CPU from a runnable thread; at most
 * reactor_spin_max reactors of a process spin at once (half its CPUs,
 * at least one: a process of many nodes, as the tests run, does not fill
 * the machine with spinners), and it spins only when an answer is likely
 * soon: after a round that read a message and whose handlers sent one (a
 * reply, a forward to backups) or while a caller of the process waits for
 * answers.  An idle node sleeps, and so does the reactor of a node that
 * only receives a stream (oneway64's receiver) or only sends one: spinning
 * there took CPU time from the thread producing the messages, and oneway64
 * ran at a third of its rate one run in three. */
static _Atomic uint32_t reactor_spinners;
static uint32_t reactor_spin_max = 1;
static pthread_once_t reactor_spin_once = PTHREAD_ONCE_INIT;

static void reactor_spin_init(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	reactor_spin_max = n >= 4 ? (uint32_t)(n / 2) : 1;
}

uint32_t dgi_reactor_spinning(void)
{
	return atomic_load(&reactor_spinners);
}

uint32_t dgi_reactor_spin_cap(void)
{
	pthread_once(&reactor_spin_once, reactor_spin_init);
	return reactor_spin_max;
}

/* Events that came within budget_ns, polled for; 0 if none (or another
 * reactor spins in its place). */
static int poll_spin(struct dgi_reactor *r, struct epoll_event *evs, uint64_t budget_ns)
{
	int n = epoll_wait(r->epfd, evs, EVENTS_MAX, 0);
	if (n != 0)
		return n;
	/* a place among the spinners is taken only while one is free: the
	 * count never passes the cap, not even for an instant (a reactor that
	 * added itself and then backed out was seen by test_reactor_spin_
	 * bounded's sampler as one spinner too many) */
	uint32_t k = atomic_load(&reactor_spinners);
	do {
		if (k >= reactor_spin_max)
			return 0;
	} while (!atomic_compare_exchange_weak(&reactor_spinners, &k, k + 1));
	uint64_t t0 = now_ns();
	do {
		sched_yield();
		n = epoll_wait(r->epfd, evs, EVENTS_MAX, 0);
	} while (n == 0 && now_ns() - t0 < budget_ns && !atomic_load(&r->quit));
	atomic_fetch_sub(&reactor_spinners, 1);
	return n;
}

static void *reactor_main(void *arg)
{
	dgi_thread_name("dg-reactor");
	struct dgi_reactor *r = arg;
	struct epoll_event evs[EVENTS_MAX];
	struct dgi_cork cork = { 0 };
	cork.round = true;
	cork.tp = r->tp;
	dgi_cork = &cork;
	uint64_t spin_ns = (uint64_t)r->tp->cfg.reactor_spin_us * 1000;
	if (spin_ns != 0)
		pthread_once(&reactor_spin_once, reactor_spin_init);
	int n = 0;
	bool got = false, spin = false;
	while (!atomic_load(&r->quit)) {
		n = spin ? poll_spin(r, evs, spin_ns) : 0;
		got = false;
		if (n == 0)
			n = epoll_wait(r->epfd, evs, EVENTS_MAX, next_timeout(r));
		if (n < 0) {
			if (errno != EINTR) {
				char buf[128];
				dgi_log("error", "EPOLL-FAIL", "err=\"%s\"", errtext(errno, buf, sizeof(buf)));
				struct timespec ts = { 0, 1000000 };
				nanosleep(&ts, NULL);
			}
			n = 0;
		}
		for (int i = 0; i < n; i++) {
			struct dgi_ev *ev = evs[i].data.ptr;
			switch (ev->kind) {
			case DGI_EV_WAKE: {
				uint64_t v;
				if (read(r->evfd, &v, sizeof(v)) < 0) {
					/* EAGAIN: another round drained it */
				}
				break;
			}
			case DGI_EV_LISTEN:
				on_accept(r);
				break;
			case DGI_EV_DIAL:
				on_dial(r, OWNER(ev, struct dial, ev));
				break;
			case DGI_EV_CONN:
				got = got || (evs[i].events & EPOLLIN);
				on_conn(OWNER(ev, struct conn, ev), evs[i].events);
				break;
			}
		}
		dgi_round_end(&cork); /* what handlers left for the round's end */
		/* an answer is likely soon: this round read a message, and its
		 * handlers sent (a reply, a forward) or a caller waits */
		spin = spin_ns != 0 && got && (cork.n > 0 || dgi_waiting_any());
		dgi_cork_flush(&cork); /* what handlers sent this round, a write per peer */
		housekeeping(r);
		/* every event of this round is handled: what left epoll before
		 * this point is named by no event still to come */
		atomic_fetch_add(&r->epoch, 1);
	}
	dgi_round_end(&cork);
	dgi_cork_flush(&cork);
	dgi_cork = NULL;
	return NULL;
}

/* ---- start / stop ---- */

static dg_err listen_on(struct dgi_reactor *r, const char *url)
{
	char host[HOST_MAX], port[8], buf[128];
	struct sockaddr_storage sa;
	socklen_t len = 0;
	if (parse(url, host, port) != DG_OK)
		return DG_ERR_INVAL;
	int rv = resolve(host, port, AI_PASSIVE, &sa, &len);
	if (rv != 0) {
		dgi_log("error", "LISTEN-FAIL", "url=%s err=\"%s\"", url, gai_strerror(rv));
		return DG_ERR_NET;
	}
	int fd = socket(sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int one = 1, err = 0;
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
	    bind(fd, (struct sockaddr *)&sa, len) != 0 || listen(fd, 128) != 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &len) != 0)
		err = errno;
	if (err != 0) {
		if (fd >= 0)
			close(fd);
		dgi_log("error", "LISTEN-FAIL", "url=%s err=\"%s\"", url,
		    errtext(err, buf, sizeof(buf)));
		return err == EADDRINUSE ? DG_ERR_ADDRINUSE : DG_ERR_NET;
	}
	r->tp->listen_port = sa.ss_family == AF_INET6 ?
	    ntohs(((struct sockaddr_in6 *)&sa)->sin6_port) :
	    ntohs(((struct sockaddr_in *)&sa)->sin_port);
	struct epoll_event ev;
	memset(&ev, 0, sizeof(ev));
	ev.events = EPOLLIN;
	ev.data.ptr = &r->listen_ev;
	if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
		close(fd);
		return DG_ERR_NET;
	}
	r->lfd = fd;
	return DG_OK;
}

dg_err dgi_reactor_start(dg_tp *tp, const char *listen_url)
{
	struct dgi_reactor *r = dgi_calloc(1, sizeof(*r));
	if (r == NULL)
		return DG_ERR_NOMEM;
	r->tp = tp;
	r->lfd = -1;
	r->wake_ev.kind = DGI_EV_WAKE;
	r->listen_ev.kind = DGI_EV_LISTEN;
	pthread_mutex_init(&r->mu, NULL);
	tp->reactor = r;
	r->epfd = epoll_create1(EPOLL_CLOEXEC);
	r->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (r->epfd < 0 || r->evfd < 0)
		return DG_ERR_NET; /* dgi_reactor_stop cleans up */
	struct epoll_event ev;
	memset(&ev, 0, sizeof(ev));
	ev.events = EPOLLIN;
	ev.data.ptr = &r->wake_ev;
	if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->evfd, &ev) != 0)
		return DG_ERR_NET;
	if (listen_url != NULL) {
		dg_err e = listen_on(r, listen_url);
		if (e != DG_OK)
			return e;
	}
	if (pthread_create(&r->thread, NULL, reactor_main, r) != 0)
		return DG_ERR_NOMEM;
	r->started = true;
	return DG_OK;
}

void dgi_reactor_sync(dg_tp *tp)
{
	struct dgi_reactor *r = tp->reactor;
	if (r == NULL || !r->started)
		return;
	uint64_t e0 = atomic_load(&r->epoch);
	wake(r);
	while (atomic_load(&r->epoch) <= e0) {
		struct timespec ts = { 0, 50000 };
		nanosleep(&ts, NULL);
	}
}

void dgi_reactor_stop(dg_tp *tp)
{
	struct dgi_reactor *r = tp->reactor;
	if (r == NULL)
		return;
	if (r->started) {
		atomic_store(&r->quit, true);
		wake(r);
		pthread_join(r->thread, NULL);
	}
	if (r->lfd >= 0)
		close(r->lfd);
	if (r->evfd >= 0)
		close(r->evfd);
	if (r->epfd >= 0)
		close(r->epfd);
	pthread_mutex_destroy(&r->mu);
	dgi_free(r);
	tp->reactor = NULL;
}
