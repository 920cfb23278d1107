/*
 * crc32c.h — CRC-32C (Castagnoli, the polynomial of iSCSI, ext4 and
 * LevelDB), for checksums of stored records and files.  Not installed.
 *
 * dgi_crc32c(0, p, n) is the standard CRC-32C of p[0..n) (of "123456789":
 * 0xe3069283); pass a previous result as crc to continue over more bytes.
 * With SSE4.2 (checked once at run time) it uses the crc32 instruction,
 * 8 bytes at a time; else a table, a byte at a time.
 */
#ifndef DG_MARSHAL_CRC32C_H
#define DG_MARSHAL_CRC32C_H

#include <stddef.h>
#include <stdint.h>

uint32_t dgi_crc32c(uint32_t crc, const void *p, size_t n);

#endif
