// Package snapfmt is the key-group-partitioned snapshot file format: the
// full snapshots of the heap and file backends and every canonical
// savepoint. A file holds the entries (stored key, stored value: opaque
// bytes in kvstate's frozen layout) of one key-group range, one block per
// key group, so a restore into a sub-range reads only the blocks of its key
// groups with one ranged read.
//
// # Format (version 1; every constant below is frozen)
//
// Integers are little-endian unless stated otherwise; uvarint is
// encoding/binary's unsigned varint.
//
//	file of key-group range [S, E]:
//
//	+---------------+-----------+-------------+-----+-----------+
//	| header (16 B) |  block S  |  block S+1  | ... |  block E  |
//	+---------------+-----------+-------------+-----+-----------+
//	0               off[0]      off[1]        ...   off[E-S]    off[E-S+1] = file size
//
//	header:
//	+--------+---------+-------------+----------+-------+-------+--------+
//	| magic  | version | compression | reserved | start |  end  | crc32c |
//	| "STKG" |   u16   |     u8      |  u8 = 0  |  u16  |  u16  |  u32   |
//	+--------+---------+-------------+----------+-------+-------+--------+
//	   4 B       2 B         1 B          1 B      2 B     2 B      4 B    = 16 B
//	crc32c covers the 12 bytes before it; compression 0 = none, 1 = zstd.
//
//	block of a key group with no entry: 0 bytes.
//	block of a key group with entries:
//	+----------------------------------+--------+
//	| payload                          | crc32c |   crc32c covers payload
//	+----------------------------------+--------+
//	payload (none): records
//	payload (zstd): uvarint(len(records)) | one zstd frame of records
//	records:        { uvarint(len(key)) | key | uvarint(len(value)) | value }+
//
// Within a block keys are strictly ascending (bytewise), each at least two
// bytes long, and their first two bytes (big-endian) are the block's key
// group: the reader checks all of it, so a block read at the wrong offset
// or a file of another range never decodes.
//
// The offsets off[0..E-S+1] are not in the file: they travel in the
// handle's FileRef.KeyGroupOffsets (offsets into the stored bytes), next to
// the whole file's size and CRC32C. The handle itself is checksummed
// (internal/frame), so a reader trusts nothing it has not verified:
//   - a whole-file read checks the header CRC, every block CRC, and the
//     file's size and CRC against the FileRef;
//   - a sub-range read checks the header CRC and the CRC of every block it
//     reads.
//
// Lengths read from disk are bounded before use (MaxBlockRawSize,
// maxStoredBlock, the zstd expansion bound) and buffers grow only as bytes
// actually arrive, so a corrupt length cannot trigger a huge allocation.
// Every damage is an error wrapping backend.ErrCorrupt that names the file
// and, where it applies, the key group.
//
// # Upgrade path
//
// A reader accepts versions 1..Version. A new version may change the
// header or block encoding; readers dispatch on the header's version, and
// writers keep writing the oldest version that can express the data.
package snapfmt
