/* member_acceptor.c — the acceptor's state on disk: what this voter
 * promised and the topology it accepted last, kept in one small file of
 * its data dir (dg_member_config.acceptor_path) and written before any
 * answer or proposal relies on it, so a voter restarted on its address
 * keeps its promises (PROTOCOL.md, "A voter that restarted").
 *
 * The file, little-endian, replaced whole (written to PATH.tmp, fsync'd,
 * renamed over PATH, the directory fsync'd):
 *
 *   offset  size  field
 *   0       8     magic "DGACCPT1"
 *   8       8     I64 promised ballot: base
 *   16      8     I64                  round
 *   24      8     U64                  proposer's node id
 *   32      8     I64 accepted ballot: base (all three 0: none)
 *   40      8     I64                  round
 *   48      8     U64                  proposer's node id
 *   56      4     U32 L: length of the accepted topology (0: none)
 *   60      L     the TOPOLOGY body of the accepted topology (PROTOCOL.md)
 *   60+L    4     U32 CRC-32C of bytes 0 .. 60+L-1
 *
 * A file that is short, of another magic or whose checksum fails is
 * refused (ACCEPTOR-BAD) and this incarnation counts as having none.
 */
#define _POSIX_C_SOURCE 200809L
#include "marshal/crc32c.h"
#include "member_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ACC_MAGIC "DGACCPT1"
#define ACC_HEAD 60u
#define ACC_MAX (ACC_HEAD + (1u << 24)) /* a topology of 1024 nodes fits */

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put_ballot(uint8_t *p, const struct dgi_ballot *b)
{
	put64(p, (uint64_t)b->base);
	put64(p + 8, (uint64_t)b->round);
	put64(p + 16, (uint64_t)b->from);
}

static struct dgi_ballot get_ballot(const uint8_t *p)
{
	return (struct dgi_ballot){ (int64_t)get64(p), (int64_t)get64(p + 8),
		(dg_node_id)get64(p + 16) };
}

/* Writes buf to path through path.tmp, durable once it returns DG_OK. */
static dg_err write_file(const char *path, const uint8_t *buf, size_t len)
{
	size_t pl = strlen(path);
	char *tmp = dgi_alloc(pl + 5);
	if (tmp == NULL)
		return DG_ERR_NOMEM;
	memcpy(tmp, path, pl);
	memcpy(tmp + pl, ".tmp", 5);
	dg_err e = DG_ERR_STORAGE;
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd >= 0) {
		size_t off = 0;
		while (off < len) {
			ssize_t w = write(fd, buf + off, len - off);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0)
				break;
			off += (size_t)w;
		}
		bool ok = off == len && fsync(fd) == 0;
		ok = close(fd) == 0 && ok;
		if (ok && rename(tmp, path) == 0) {
			/* the rename itself is durable once the directory is */
			char *slash = strrchr(tmp, '/');
			if (slash != NULL)
				*slash = 0;
			int dfd = open(slash != NULL ? (slash == tmp ? "/" : tmp) : ".",
			    O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			if (dfd >= 0) {
				if (fsync(dfd) == 0)
					e = DG_OK;
				close(dfd);
			}
		} else {
			unlink(tmp);
		}
	}
	if (e != DG_OK)
		dgi_log("error", "ACCEPTOR-SAVE-FAILED", "path=%s errno=%d why=\"the promise or "
		    "acceptance it backs is refused\"", path, errno);
	dgi_free(tmp);
	return e;
}

dg_err dgi_acceptor_save(dg_member *m)
{
	if (m->cfg.acceptor_path == NULL)
		return DG_OK;
	pthread_mutex_lock(&m->pmu);
	pthread_mutex_lock(&m->mu);
	struct dgi_ballot p = m->promised, a = m->acc_b;
	dg_topology *acc = m->acc != NULL ? dgi_topo_hold(m->acc) : NULL;
	pthread_mutex_unlock(&m->mu);
	if (acc == NULL)
		a = (struct dgi_ballot){ 0, 0, 0 };
	if (dgi_ballot_cmp(&p, &m->saved_p) == 0 && dgi_ballot_cmp(&a, &m->saved_a) == 0 &&
	    (acc != NULL) == m->saved_acc) {
		pthread_mutex_unlock(&m->pmu);
		dg_topology_release(acc);
		return DG_OK; /* the file holds it already */
	}
	dg_buf tb; /* the accepted topology's TOPOLOGY body */
	dg_buf_init(&tb);
	dg_err e = acc != NULL ? dgi_member_topo_encode(m, acc, &tb) : DG_OK;
	uint8_t *b = NULL;
	size_t len = ACC_HEAD + tb.len + 4;
	if (e == DG_OK && tb.len > ACC_MAX - ACC_HEAD)
		e = DG_ERR_LIMIT;
	if (e == DG_OK && (b = dgi_alloc(len)) == NULL)
		e = DG_ERR_NOMEM;
	if (e == DG_OK) {
		memcpy(b, ACC_MAGIC, 8);
		put_ballot(b + 8, &p);
		put_ballot(b + 32, &a);
		put32(b + 56, (uint32_t)tb.len);
		if (tb.len > 0)
			memcpy(b + ACC_HEAD, tb.data, tb.len);
		put32(b + len - 4, dgi_crc32c(0, b, len - 4));
		e = write_file(m->cfg.acceptor_path, b, len);
	}
	if (e == DG_OK) {
		m->saved_p = p;
		m->saved_a = a;
		m->saved_acc = acc != NULL;
	}
	pthread_mutex_unlock(&m->pmu);
	dgi_free(b);
	dg_buf_free(&tb);
	dg_topology_release(acc);
	return e;
}

/* Reads the file into *buf (malloc'd): DG_ERR_NOT_FOUND when there is
 * none, DG_ERR_BAD_LENGTH when it is not one. */
static dg_err read_file(const char *path, uint8_t **buf, size_t *len)
{
	*buf = NULL;
	FILE *f = fopen(path, "rb");
	if (f == NULL)
		return errno == ENOENT ? DG_ERR_NOT_FOUND : DG_ERR_STORAGE;
	dg_err e = DG_ERR_BAD_LENGTH;
	struct stat st;
	if (fstat(fileno(f), &st) == 0 && st.st_size >= (off_t)(ACC_HEAD + 4) &&
	    st.st_size <= (off_t)(ACC_MAX + 4)) {
		*len = (size_t)st.st_size;
		if ((*buf = dgi_alloc(*len)) == NULL)
			e = DG_ERR_NOMEM;
		else if (fread(*buf, 1, *len, f) == *len)
			e = DG_OK;
	}
	fclose(f);
	if (e != DG_OK) {
		dgi_free(*buf);
		*buf = NULL;
	}
	return e;
}

dg_err dgi_acceptor_load(dg_member *m)
{
	m->amnesiac = true;
	if (m->cfg.acceptor_path == NULL)
		return DG_OK;
	uint8_t *buf;
	size_t len = 0;
	dg_err e = read_file(m->cfg.acceptor_path, &buf, &len);
	if (e == DG_OK) {
		uint32_t l = get32(buf + 56);
		if (memcmp(buf, ACC_MAGIC, 8) != 0 || (size_t)l + ACC_HEAD + 4 != len ||
		    get32(buf + len - 4) != dgi_crc32c(0, buf, len - 4))
			e = DG_ERR_BAD_LENGTH;
	}
	dg_topology *acc = NULL;
	if (e == DG_OK && get32(buf + 56) > 0) {
		dg_raw raw = { buf + ACC_HEAD, get32(buf + 56) };
		e = dgi_member_topo_decode(m, &raw, &acc);
	}
	if (e == DG_OK) {
		m->promised = get_ballot(buf + 8);
		m->acc_b = get_ballot(buf + 32);
		m->acc = acc;
		m->saved_p = m->promised;
		m->saved_a = acc != NULL ? m->acc_b : (struct dgi_ballot){ 0, 0, 0 };
		m->saved_acc = acc != NULL;
		m->amnesiac = false;
		dgi_log("info", "ACCEPTOR-LOADED", "path=%s promised_base=%lld promised_round=%lld "
		    "accepted_version=%lld", m->cfg.acceptor_path, (long long)m->promised.base,
		    (long long)m->promised.round, acc != NULL ? (long long)acc->version : 0LL);
	} else if (e == DG_ERR_NOT_FOUND) {
		dgi_log("info", "ACCEPTOR-NEW", "path=%s why=\"no acceptor file: what this address "
		    "promised before is unknown until it is a member\"", m->cfg.acceptor_path);
	} else {
		dgi_log("error", "ACCEPTOR-BAD", "path=%s err=\"%s\" why=\"not an acceptor file "
		    "(short, foreign or damaged): what this address promised before is unknown "
		    "until it is a member; the file is written anew\"", m->cfg.acceptor_path,
		    dg_strerror(e));
	}
	dgi_free(buf);
	if (e == DG_OK)
		return DG_OK;
	/* a first file now, so the next incarnation has one to read */
	m->saved_p = (struct dgi_ballot){ -1, -1, 0 }; /* differs: written */
	return dgi_acceptor_save(m);
}
