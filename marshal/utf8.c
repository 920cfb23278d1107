/* utf8.c — strict UTF-8 validation (RFC 3629: no overlongs, no surrogates,
 * nothing above U+10FFFF), with an 8-bytes-at-a-time ASCII fast path since
 * keys and names are mostly ASCII. */
#include "marshal_int.h"

bool dgi_utf8_valid(const uint8_t *s, size_t n)
{
	const uint8_t *end = s + n;
	while (s < end) {
		/* ASCII fast path */
		while (end - s >= 8) {
			uint64_t v;
			memcpy(&v, s, 8);
			if (v & 0x8080808080808080ull)
				break;
			s += 8;
		}
		if (s >= end)
			break;
		uint8_t c = *s;
		if (c < 0x80) {
			s++;
			continue;
		}
		size_t left = (size_t)(end - s);
		if (c >= 0xC2 && c <= 0xDF) {
			if (left < 2 || (s[1] & 0xC0) != 0x80)
				return false;
			s += 2;
		} else if (c >= 0xE0 && c <= 0xEF) {
			if (left < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80)
				return false;
			if (c == 0xE0 && s[1] < 0xA0) /* overlong */
				return false;
			if (c == 0xED && s[1] >= 0xA0) /* surrogate */
				return false;
			s += 3;
		} else if (c >= 0xF0 && c <= 0xF4) {
			if (left < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 ||
			    (s[3] & 0xC0) != 0x80)
				return false;
			if (c == 0xF0 && s[1] < 0x90) /* overlong */
				return false;
			if (c == 0xF4 && s[1] >= 0x90) /* > U+10FFFF */
				return false;
			s += 4;
		} else {
			return false;
		}
	}
	return true;
}
