/* adminwire.c — frames and handshake MACs of the admin protocol
 * (adminwire.h, ADMIN.md). */
#include "adminwire.h"
#include "transport/transport_int.h"

#include <string.h>
#include <time.h>

dg_err dgi_nng_err(int rv)
{
	switch (rv) {
	case 0:
		return DG_OK;
	case NNG_ETIMEDOUT:
		return DG_ERR_TIMEOUT;
	case NNG_ENOMEM:
		return DG_ERR_NOMEM;
	case NNG_ECLOSED:
	case NNG_ECANCELED:
		return DG_ERR_CLOSED;
	case NNG_ECONNREFUSED:
	case NNG_EADDRINVAL:
	case NNG_EUNREACHABLE:
		return DG_ERR_UNREACHABLE;
	case NNG_ECRYPTO:
	case NNG_EPEERAUTH:
		return DG_ERR_TLS;
	case NNG_ECONNSHUT:
	case NNG_ECONNRESET:
	case NNG_ECONNABORTED:
		return DG_ERR_CONN_BROKEN;
	default:
		return DG_ERR_NET;
	}
}

static void aconn_done(void *arg)
{
	dgi_aconn *c = arg;
	pthread_mutex_lock(&c->mu);
	c->done = true;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

/* Waits for c->aio until deadline_ms (dgi_now_ms's clock); true when it
 * completed. */
static bool aconn_wait_until(dgi_aconn *c, uint64_t deadline_ms)
{
	pthread_mutex_lock(&c->mu);
	while (!c->done) {
		uint64_t now = dgi_now_ms();
		if (now >= deadline_ms)
			break;
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		uint64_t ns = (uint64_t)ts.tv_nsec + (deadline_ms - now) * 1000000u;
		ts.tv_sec += (time_t)(ns / 1000000000u);
		ts.tv_nsec = (long)(ns % 1000000000u);
		pthread_cond_timedwait(&c->cv, &c->mu, &ts);
	}
	bool done = c->done;
	pthread_mutex_unlock(&c->mu);
	return done;
}

/* Starts nothing: waits for the I/O started on c->aio, bounded by
 * deadline_ms however nng behaves.  The aio's result, or NNG_ETIMEDOUT
 * when it had to be cancelled or the connection is stuck. */
static int aconn_wait(dgi_aconn *c, uint64_t deadline_ms)
{
	if (aconn_wait_until(c, deadline_ms))
		return nng_aio_result(c->aio);
	nng_aio_cancel(c->aio);
	if (!aconn_wait_until(c, dgi_now_ms() + DGI_ACONN_GRACE_MS)) {
		if (c->s != NULL)
			nng_stream_close(c->s);
		if (!aconn_wait_until(c, dgi_now_ms() + DGI_ACONN_GRACE_MS)) {
			c->stuck = true;
			return NNG_ETIMEDOUT;
		}
	}
	/* whatever ended it (ECANCELED, ECLOSED from our close), the cause
	 * was the deadline */
	return NNG_ETIMEDOUT;
}

static dg_err aconn_setup(dgi_aconn *c, uint32_t timeout_ms)
{
	memset(c, 0, sizeof(*c));
	c->timeout_ms = timeout_ms;
	c->max_frame = DGI_ADMIN_FRAME_MAX;
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->cv, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&c->mu, NULL);
	if (nng_aio_alloc(&c->aio, aconn_done, c) != 0) {
		c->aio = NULL;
		pthread_cond_destroy(&c->cv);
		pthread_mutex_destroy(&c->mu);
		return DG_ERR_NOMEM;
	}
	return DG_OK;
}

static void aconn_attach(dgi_aconn *c, nng_stream *s)
{
	c->s = s;
	/* small request/answer frames: no Nagle delay (nng's default is off) */
	(void)nng_stream_set_bool(s, NNG_OPT_TCP_NODELAY, true);
}

dg_err dgi_aconn_init(dgi_aconn *c, nng_stream *s, uint32_t timeout_ms)
{
	dg_err e = aconn_setup(c, timeout_ms);
	if (e == DG_OK)
		aconn_attach(c, s);
	return e;
}

int dgi_aconn_dial(dgi_aconn *c, nng_stream_dialer *d, uint32_t timeout_ms)
{
	if (aconn_setup(c, timeout_ms) != DG_OK)
		return NNG_ENOMEM;
	uint64_t deadline = dgi_now_ms() + timeout_ms;
	nng_aio_set_timeout(c->aio, (nng_duration)timeout_ms);
	nng_stream_dialer_dial(d, c->aio);
	int rv = aconn_wait(c, deadline);
	if (rv == 0)
		aconn_attach(c, nng_aio_get_output(c->aio, 0));
	else
		dgi_aconn_close(c);
	return rv;
}

void dgi_aconn_abort(dgi_aconn *c)
{
	if (c->aio == NULL)
		return;
	pthread_mutex_lock(&c->mu);
	c->aborted = true;
	pthread_mutex_unlock(&c->mu);
	if (c->s != NULL)
		nng_stream_close(c->s);
	nng_aio_abort(c->aio, NNG_ECLOSED);
}

void dgi_aconn_close(dgi_aconn *c)
{
	if (c->stuck) {
		/* nng still holds c->aio (and calls back into c when it ends):
		 * neither it nor the stream can be freed without waiting for
		 * ever; they and c's lock stay to the process */
		c->s = NULL;
		c->aio = NULL;
		c->stuck = false;
		return;
	}
	if (c->s != NULL) {
		nng_stream_close(c->s);
		if (c->aio != NULL)
			nng_aio_wait(c->aio);
		nng_stream_free(c->s);
		c->s = NULL;
	}
	if (c->aio != NULL) {
		nng_aio_free(c->aio);
		c->aio = NULL;
		pthread_cond_destroy(&c->cv);
		pthread_mutex_destroy(&c->mu);
	}
}

/* One send or receive of up to the n iov entries' bytes, bounded by
 * deadline; *got bytes moved (0 is an error: the peer closed). */
static dg_err io_once(dgi_aconn *c, nng_iov *iov, unsigned n, bool send, uint64_t deadline,
    size_t *got)
{
	uint64_t now = dgi_now_ms();
	if (c->stuck)
		return DG_ERR_CLOSED;
	if (now >= deadline)
		return DG_ERR_TIMEOUT;
	nng_aio_set_iov(c->aio, n, iov);
	nng_aio_set_timeout(c->aio, (nng_duration)(deadline - now));
	pthread_mutex_lock(&c->mu);
	bool aborted = c->aborted;
	c->done = false;
	pthread_mutex_unlock(&c->mu);
	if (aborted)
		return DG_ERR_CLOSED;
	if (send)
		nng_stream_send(c->s, c->aio);
	else
		nng_stream_recv(c->s, c->aio);
	/* an abort between the check above and the start: its own
	 * nng_aio_abort may have come before the aio was scheduled */
	pthread_mutex_lock(&c->mu);
	aborted = c->aborted;
	pthread_mutex_unlock(&c->mu);
	if (aborted)
		nng_aio_abort(c->aio, NNG_ECLOSED);
	int rv = aconn_wait(c, deadline);
	if (rv != 0)
		return dgi_nng_err(rv);
	*got = nng_aio_count(c->aio);
	return *got == 0 ? DG_ERR_CONN_BROKEN : DG_OK;
}

/* Moves all of the n iov entries' bytes in one direction (one sendmsg for
 * a header and its body: no Nagle wait between them); the deadline
 * covers the whole.  iov is consumed. */
static dg_err xfer(dgi_aconn *c, nng_iov *iov, unsigned n, bool send, uint64_t deadline)
{
	while (n > 0) {
		if (iov[0].iov_len == 0) {
			iov++;
			n--;
			continue;
		}
		size_t got;
		dg_err e = io_once(c, iov, n, send, deadline, &got);
		if (e != DG_OK)
			return e;
		for (; got > 0 && n > 0; ) {
			size_t take = got < iov[0].iov_len ? got : iov[0].iov_len;
			iov[0].iov_buf = (uint8_t *)iov[0].iov_buf + take;
			iov[0].iov_len -= take;
			got -= take;
			if (iov[0].iov_len == 0) {
				iov++;
				n--;
			}
		}
	}
	return DG_OK;
}

dg_err dgi_aconn_write(dgi_aconn *c, nng_iov *iov, unsigned n)
{
	return xfer(c, iov, n, true, dgi_now_ms() + c->timeout_ms);
}

dg_err dgi_aconn_read_some(dgi_aconn *c, void *buf, size_t cap, uint64_t deadline_ms,
    size_t *got)
{
	nng_iov v = { buf, cap };
	return io_once(c, &v, 1, false, deadline_ms, got);
}

dg_err dgi_aconn_send(dgi_aconn *c, const char *json, size_t len)
{
	if (len > DGI_ADMIN_FRAME_MAX)
		return DG_ERR_LIMIT;
	uint8_t h[4] = { (uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8),
		(uint8_t)len };
	nng_iov iov[2] = { { h, 4 }, { (void *)(uintptr_t)json, len } };
	return xfer(c, iov, 2, true, dgi_now_ms() + c->timeout_ms);
}

dg_err dgi_aconn_recv(dgi_aconn *c, char **out, size_t *len)
{
	uint64_t deadline = dgi_now_ms() + c->timeout_ms;
	uint8_t h[4];
	nng_iov hv = { h, 4 };
	dg_err e = xfer(c, &hv, 1, false, deadline);
	if (e != DG_OK)
		return e;
	uint32_t n = (uint32_t)h[0] << 24 | (uint32_t)h[1] << 16 | (uint32_t)h[2] << 8 | h[3];
	if (n > DGI_ADMIN_FRAME_MAX || n > c->max_frame)
		return DG_ERR_LIMIT;
	char *p = dgi_alloc((size_t)n + 1);
	if (p == NULL)
		return DG_ERR_NOMEM;
	/* the body's own deadline: a large reply is not cut by the header's */
	nng_iov bv = { p, n };
	if ((e = xfer(c, &bv, 1, false, dgi_now_ms() + c->timeout_ms)) != DG_OK) {
		dgi_free(p);
		return e;
	}
	p[n] = 0;
	*out = p;
	*len = n;
	return DG_OK;
}

void dgi_hex(const uint8_t *p, size_t n, char *out)
{
	static const char d[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = d[p[i] >> 4];
		out[2 * i + 1] = d[p[i] & 15];
	}
	out[2 * n] = 0;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

bool dgi_unhex(const char *s, uint8_t *out, size_t n)
{
	if (s == NULL || strlen(s) != 2 * n)
		return false;
	for (size_t i = 0; i < n; i++) {
		int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return false;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return true;
}

dg_err dgi_admin_mac(char role, const uint8_t *secret, size_t secret_len,
    const uint8_t *node_nonce, const uint8_t *client_nonce, uint64_t node_id,
    const char *cluster, char out[65])
{
	uint8_t mac[DG_MAC_LEN];
	size_t cl = strlen(cluster);
	if (cl > DG_CLUSTER_NAME_MAX)
		return DG_ERR_INVAL;
	/* the admin transcript differs from every peer's by its dialer id: a
	 * peer never has id 0 (node ids are random and nonzero) */
	dg_err e = dgi_auth_mac(role, secret, secret_len, node_nonce, client_nonce, 0,
	    node_id, cluster, cl, mac);
	if (e != DG_OK)
		return e;
	dgi_hex(mac, DG_MAC_LEN, out);
	return DG_OK;
}
