/* auth.c — the handshake's cryptography (PROTOCOL.md, "Handshake"):
 * HMAC-SHA256 over the transcript, constant-time comparison, nonces. */
#include "transport_int.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <string.h>

dg_err dgi_auth_mac(char role, const uint8_t *secret, size_t secret_len,
    const uint8_t *nonce_first, const uint8_t *nonce_second, dg_node_id id_d,
    dg_node_id id_l, const char *cluster, size_t cluster_len,
    uint8_t mac[DG_MAC_LEN])
{
	uint8_t t[4 + 2 * DG_NONCE_LEN + 16 + DG_CLUSTER_NAME_MAX];
	unsigned int len = 0;

	if ((role != 'l' && role != 'd') || cluster_len > DG_CLUSTER_NAME_MAX)
		return DG_ERR_INVAL;
	if (secret_len == 0) {
		memset(mac, 0, DG_MAC_LEN);
		return DG_OK;
	}
	size_t n = 0;
	memcpy(t, role == 'l' ? "dg-l" : "dg-d", 4);
	n += 4;
	memcpy(t + n, nonce_first, DG_NONCE_LEN);
	n += DG_NONCE_LEN;
	memcpy(t + n, nonce_second, DG_NONCE_LEN);
	n += DG_NONCE_LEN;
	memcpy(t + n, &id_d, 8); /* little-endian host (marshal_int.h checks) */
	n += 8;
	memcpy(t + n, &id_l, 8);
	n += 8;
	memcpy(t + n, cluster, cluster_len);
	n += cluster_len;
	if (HMAC(EVP_sha256(), secret, (int)secret_len, t, n, mac, &len) == NULL ||
	    len != DG_MAC_LEN)
		return DG_ERR_NOMEM;
	OPENSSL_cleanse(t, sizeof(t));
	return DG_OK;
}

bool dgi_auth_equal(const uint8_t a[DG_MAC_LEN], const uint8_t b[DG_MAC_LEN])
{
	return CRYPTO_memcmp(a, b, DG_MAC_LEN) == 0;
}

dg_err dgi_random(void *out, size_t n)
{
	return RAND_bytes(out, (int)n) == 1 ? DG_OK : DG_ERR_NOMEM;
}
