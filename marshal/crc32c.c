/* crc32c.c — CRC-32C, hardware or table (crc32c.h). */
#include "crc32c.h"

#include <pthread.h>
#include <string.h>

#define POLY 0x82f63b78u   /* reflected Castagnoli */

static uint32_t table[256];
static uint32_t (*impl)(uint32_t, const uint8_t *, size_t);
static pthread_once_t once = PTHREAD_ONCE_INIT;

static uint32_t by_table(uint32_t c, const uint8_t *p, size_t n)
{
	while (n--)
		c = table[(c ^ *p++) & 0xff] ^ (c >> 8);
	return c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("sse4.2")))
static uint32_t by_insn(uint32_t c, const uint8_t *p, size_t n)
{
	uint64_t c64 = c;
	for (; n >= 8; n -= 8, p += 8) {
		uint64_t w;
		memcpy(&w, p, 8);
		c64 = __builtin_ia32_crc32di(c64, w);
	}
	c = (uint32_t)c64;
	for (; n > 0; n--)
		c = __builtin_ia32_crc32qi(c, *p++);
	return c;
}
#endif

static void init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (POLY & (0u - (c & 1u)));
		table[i] = c;
	}
	impl = by_table;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
	__builtin_cpu_init();
	if (__builtin_cpu_supports("sse4.2"))
		impl = by_insn;
#endif
}

uint32_t dgi_crc32c(uint32_t crc, const void *p, size_t n)
{
	pthread_once(&once, init);
	return ~impl(~crc, p, n);
}
