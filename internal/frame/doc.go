// Package frame is the checksummed, versioned envelope of every metadata
// file stated writes (handles, manifests, catalog records).
//
// Layout (all integers little-endian; frozen):
//
//	+-------+---------+--------+---------+--------+
//	| magic | version | length | payload | crc32c |
//	|  4 B  |   2 B   |  4 B   | length  |  4 B   |
//	+-------+---------+--------+---------+--------+
//
// The CRC32C (Castagnoli) covers magic, version, length and payload. A frame
// is exactly 14+length bytes: trailing bytes are an error, so a truncated or
// extended file never decodes.
package frame
