/*
 * pcrypt.h — AES-256-GCM for persisted records and their data keys
 * (cache/, private; pstore.c is its user; issue 14, "Encryption at rest").
 *
 * seal: out = ciphertext (len bytes) ‖ tag (16); open checks the tag
 * (false: tampered, or the wrong key).  aad is authenticated, not stored.
 * One EVP_CIPHER_CTX per thread, made on first use: no allocation per
 * record.  Nonces are the caller's: 12 bytes, never twice with one key.
 */
#ifndef DG_CACHE_PCRYPT_H
#define DG_CACHE_PCRYPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DGI_GCM_KEY 32u
#define DGI_GCM_NONCE 12u
#define DGI_GCM_TAG 16u

bool dgi_gcm_seal(const uint8_t key[DGI_GCM_KEY], const uint8_t nonce[DGI_GCM_NONCE],
    const uint8_t *aad, size_t aadlen, const uint8_t *aad2, size_t aad2len,
    const uint8_t *in, size_t len, uint8_t *out);
bool dgi_gcm_open(const uint8_t key[DGI_GCM_KEY], const uint8_t nonce[DGI_GCM_NONCE],
    const uint8_t *aad, size_t aadlen, const uint8_t *aad2, size_t aad2len,
    const uint8_t *in, size_t len, uint8_t *out);

/* Reads a master key file: 64 hex digits (one trailing newline allowed),
 * mode 0600 or stricter (no group or other bits).  0, or -1 with why[n]. */
int dgi_key_file_read(const char *path, uint8_t key[DGI_GCM_KEY], char *why, size_t n);

/* The first 8 bytes of SHA-256(key): names a master key without showing it. */
void dgi_key_id(const uint8_t key[DGI_GCM_KEY], uint8_t id[8]);

#endif
