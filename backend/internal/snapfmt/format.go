package snapfmt

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/klauspost/compress/zstd"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/internal/frame"
	"github.com/statedhq/stated/internal/zstdblock"
)

// Frozen constants of the format (see the package doc).
const (
	// Magic starts every snapshot file.
	Magic = "STKG"
	// Version is the format version this build writes; it reads 1..Version.
	Version = 1
	// HeaderSize is the size of the header; the first block starts there.
	HeaderSize = 16
	// MaxBlockRawSize bounds the uncompressed records of one key group
	// (1 GiB): the writer refuses more, the reader rejects a length above it.
	MaxBlockRawSize = 1 << 30
	// maxStoredBlock bounds a stored block: the raw bound plus room for the
	// length prefix, zstd's framing of incompressible data and the CRC.
	maxStoredBlock = MaxBlockRawSize + 1<<20

	compressionNone = 0
	compressionZstd = 1
	crcSize         = 4
)

// Compression names, as in backend.FileRef.Compression.
const (
	CompressionNone = ""
	CompressionZstd = "zstd"
)

func compressionCode(name string) (byte, error) {
	switch name {
	case CompressionNone:
		return compressionNone, nil
	case CompressionZstd:
		return compressionZstd, nil
	}
	return 0, fmt.Errorf("snapfmt: %w: unknown compression %q (want \"\" or \"zstd\")", backend.ErrInvalidArgument, name)
}

// header is the decoded file header.
type header struct {
	version     uint16
	compression byte
	r           backend.KeyGroupRange
}

func encodeHeader(compression byte, r backend.KeyGroupRange) []byte {
	b := make([]byte, 0, HeaderSize)
	b = append(b, Magic...)
	b = binary.LittleEndian.AppendUint16(b, Version)
	b = append(b, compression, 0)
	b = binary.LittleEndian.AppendUint16(b, uint16(r.Start))
	b = binary.LittleEndian.AppendUint16(b, uint16(r.End))
	return binary.LittleEndian.AppendUint32(b, frame.Checksum(b))
}

func decodeHeader(b []byte) (header, error) {
	if len(b) != HeaderSize {
		return header{}, fmt.Errorf("header of %d bytes, want %d (truncated?)", len(b), HeaderSize)
	}
	if string(b[:4]) != Magic {
		return header{}, fmt.Errorf("magic %q, want %q (not a snapshot file)", b[:4], Magic)
	}
	if got, want := frame.Checksum(b[:12]), binary.LittleEndian.Uint32(b[12:]); got != want {
		return header{}, fmt.Errorf("header checksum mismatch (stored %08x, computed %08x)", want, got)
	}
	h := header{
		version:     binary.LittleEndian.Uint16(b[4:]),
		compression: b[6],
		r: backend.KeyGroupRange{
			Start: int(binary.LittleEndian.Uint16(b[8:])),
			End:   int(binary.LittleEndian.Uint16(b[10:])),
		},
	}
	if h.version < 1 || h.version > Version {
		return header{}, fmt.Errorf("%w: format version %d (this build reads 1..%d)", errVersion, h.version, Version)
	}
	if h.compression > compressionZstd || b[7] != 0 {
		return header{}, fmt.Errorf("unknown compression %d / reserved byte %d", h.compression, b[7])
	}
	return h, nil
}

// errVersion marks a header that is intact but of a newer format; it is
// reported as backend.ErrIncompatible rather than ErrCorrupt.
var errVersion = errors.New("unsupported version")

// codec is the process's zstd encoder and decoder for snapshot blocks.
var codec = zstdblock.New(zstdblock.Options{Level: zstd.SpeedDefault, MaxRawSize: MaxBlockRawSize})
