package frame

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Overhead is the number of bytes a frame adds to its payload.
const Overhead = 14

// MaxPayload bounds a payload (256 MiB) so a corrupt length cannot make a
// reader allocate without bound.
const MaxPayload = 256 << 20

// ErrFrame is wrapped by every decoding error.
var ErrFrame = errors.New("bad frame")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum is the CRC32C of b; the same function checksums data files.
func Checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// Table is the CRC32C table, for streaming checksums with crc32.New.
func Table() *crc32.Table { return castagnoli }

// Encode wraps payload. magic must be 4 bytes.
func Encode(magic string, version uint16, payload []byte) []byte {
	if len(magic) != 4 {
		panic("frame: magic must be 4 bytes") // programming error, never input
	}
	out := make([]byte, 0, Overhead+len(payload))
	out = append(out, magic...)
	out = binary.LittleEndian.AppendUint16(out, version)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(payload)))
	out = append(out, payload...)
	return binary.LittleEndian.AppendUint32(out, Checksum(out))
}

// Decode checks and unwraps a frame that must start with magic. The
// returned payload aliases data.
func Decode(magic string, data []byte) (version uint16, payload []byte, err error) {
	if len(data) < Overhead {
		return 0, nil, fmt.Errorf("%w: %d bytes is shorter than the %d-byte envelope (truncated?)", ErrFrame, len(data), Overhead)
	}
	if string(data[:4]) != magic {
		return 0, nil, fmt.Errorf("%w: magic %q, want %q", ErrFrame, data[:4], magic)
	}
	version = binary.LittleEndian.Uint16(data[4:6])
	n := binary.LittleEndian.Uint32(data[6:10])
	if n > MaxPayload || int(n) != len(data)-Overhead {
		return 0, nil, fmt.Errorf("%w: length field %d but %d payload bytes present (truncated or extended)", ErrFrame, n, len(data)-Overhead)
	}
	body := data[:10+n]
	want := binary.LittleEndian.Uint32(data[10+n:])
	if got := Checksum(body); got != want {
		return 0, nil, fmt.Errorf("%w: checksum mismatch (stored %08x, computed %08x)", ErrFrame, want, got)
	}
	return version, data[10 : 10+n], nil
}
