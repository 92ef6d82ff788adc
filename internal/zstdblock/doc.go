// Package zstdblock is the zstd layer of the block formats that store a
// compressed block as
//
//	uvarint(len(raw)) | one zstd frame of raw
//
// (backend/internal/snapfmt's snapshot files, dstl's changelog segments).
// A Codec holds the process's encoder and decoder for one format, built
// on first use, and decodes a block only after checking its declared
// length against the format's bound and against what a frame of that size
// can expand to, so a corrupt length never makes it allocate.
//
// What the formats store around the block (lengths, CRCs, compression
// codes) stays theirs: this package neither writes nor reads it.
package zstdblock
