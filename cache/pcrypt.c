/* pcrypt.c — AES-256-GCM through OpenSSL EVP, and master key files
 * (pcrypt.h). */
#define _POSIX_C_SOURCE 200809L
#include "cache/pcrypt.h"

#include <openssl/evp.h>
#include <openssl/sha.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static pthread_key_t ctx_key;
static pthread_once_t ctx_once = PTHREAD_ONCE_INIT;

static void ctx_free(void *p)
{
	EVP_CIPHER_CTX_free(p);
}

static void ctx_init(void)
{
	(void)pthread_key_create(&ctx_key, ctx_free);
}

static EVP_CIPHER_CTX *thread_ctx(void)
{
	pthread_once(&ctx_once, ctx_init);
	EVP_CIPHER_CTX *c = pthread_getspecific(ctx_key);
	if (c == NULL && (c = EVP_CIPHER_CTX_new()) != NULL) {
		/* the cipher set once: each record then sets only its key and
		 * nonce (setting the cipher again allocated per record) */
		if (EVP_CipherInit_ex(c, EVP_aes_256_gcm(), NULL, NULL, NULL, 1) != 1) {
			EVP_CIPHER_CTX_free(c);
			return NULL;
		}
		pthread_setspecific(ctx_key, c);
	}
	return c;
}

static bool gcm(bool enc, const uint8_t *key, const uint8_t *nonce, const uint8_t *aad,
    size_t aadlen, const uint8_t *aad2, size_t aad2len, const uint8_t *in, size_t len,
    uint8_t *out)
{
	EVP_CIPHER_CTX *c = thread_ctx();
	int n;
	if (c == NULL || len > INT32_MAX ||
	    EVP_CipherInit_ex(c, NULL, NULL, key, nonce, enc ? 1 : 0) != 1 ||
	    (aadlen > 0 && EVP_CipherUpdate(c, NULL, &n, aad, (int)aadlen) != 1) ||
	    (aad2len > 0 && EVP_CipherUpdate(c, NULL, &n, aad2, (int)aad2len) != 1))
		return false;
	if (!enc && EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, DGI_GCM_TAG,
	    (void *)(uintptr_t)(in + len)) != 1)
		return false;
	if (len > 0 && EVP_CipherUpdate(c, out, &n, in, (int)len) != 1)
		return false;
	if (EVP_CipherFinal_ex(c, out + len, &n) != 1)
		return false;   /* decrypting: the tag did not match */
	return !enc || EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, DGI_GCM_TAG, out + len) == 1;
}

bool dgi_gcm_seal(const uint8_t key[DGI_GCM_KEY], const uint8_t nonce[DGI_GCM_NONCE],
    const uint8_t *aad, size_t aadlen, const uint8_t *aad2, size_t aad2len,
    const uint8_t *in, size_t len, uint8_t *out)
{
	return gcm(true, key, nonce, aad, aadlen, aad2, aad2len, in, len, out);
}

bool dgi_gcm_open(const uint8_t key[DGI_GCM_KEY], const uint8_t nonce[DGI_GCM_NONCE],
    const uint8_t *aad, size_t aadlen, const uint8_t *aad2, size_t aad2len,
    const uint8_t *in, size_t len, uint8_t *out)
{
	return gcm(false, key, nonce, aad, aadlen, aad2, aad2len, in, len, out);
}

static int hexval(int c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 :
	    c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

int dgi_key_file_read(const char *path, uint8_t key[DGI_GCM_KEY], char *why, size_t n)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		snprintf(why, n, "encryption key file %s: %s", path, strerror(errno));
		return -1;
	}
	struct stat st;
	char buf[2 * DGI_GCM_KEY + 4];
	ssize_t got = -1;
	int rc = -1;
	if (fstat(fd, &st) != 0)
		snprintf(why, n, "encryption key file %s: %s", path, strerror(errno));
	else if ((st.st_mode & 077) != 0)
		snprintf(why, n, "encryption key file %s has mode %04o: group or others may read "
		    "it (chmod 600 %s)", path, (unsigned)(st.st_mode & 07777), path);
	else if ((got = read(fd, buf, sizeof(buf))) < 0)
		snprintf(why, n, "encryption key file %s: %s", path, strerror(errno));
	else {
		size_t len = (size_t)got;
		if (len > 0 && buf[len - 1] == '\n')
			len--;
		bool ok = len == 2 * DGI_GCM_KEY;
		for (size_t i = 0; ok && i < DGI_GCM_KEY; i++) {
			int hi = hexval(buf[2 * i]), lo = hexval(buf[2 * i + 1]);
			ok = hi >= 0 && lo >= 0;
			key[i] = (uint8_t)(hi << 4 | lo);
		}
		if (ok)
			rc = 0;
		else
			snprintf(why, n, "encryption key file %s: expected 64 hex digits (openssl "
			    "rand -hex 32)", path);
	}
	memset(buf, 0, sizeof(buf));
	close(fd);
	return rc;
}

void dgi_key_id(const uint8_t key[DGI_GCM_KEY], uint8_t id[8])
{
	uint8_t h[SHA256_DIGEST_LENGTH];
	SHA256(key, DGI_GCM_KEY, h);
	memcpy(id, h, 8);
}
