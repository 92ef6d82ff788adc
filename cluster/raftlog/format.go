package raftlog

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/hashicorp/raft"
)

// Frozen constants of format version 1 (doc.go): changing any of them
// changes what existing stores mean.
const (
	// FormatVersion is the version this code writes and reads.
	FormatVersion uint32 = 1

	prefixMeta   byte = 0x00
	prefixLog    byte = 0x01
	prefixStable byte = 0x02

	recordVersion byte = 1

	// entry header: crc(4) ver(1) type(1) index(8) term(8) appendedAt(8) len(data)(4)
	entryHeader = 4 + 1 + 1 + 8 + 8 + 8 + 4
	// stable header: crc(4) ver(1)
	stableHeader = 4 + 1
)

var (
	crcTable   = crc32.MakeTable(crc32.Castagnoli)
	versionKey = []byte{prefixMeta, 'v'}
	// logLower and logUpper bound every log key.
	logLower = []byte{prefixLog}
	logUpper = []byte{prefixLog + 1}
)

func logKey(index uint64) []byte {
	k := make([]byte, 9)
	k[0] = prefixLog
	binary.BigEndian.PutUint64(k[1:], index)
	return k
}

// logKeyIndex reads the index of a log key; ok is false for a key that is
// not one.
func logKeyIndex(k []byte) (uint64, bool) {
	if len(k) != 9 || k[0] != prefixLog {
		return 0, false
	}
	return binary.BigEndian.Uint64(k[1:]), true
}

func stableKey(key []byte) []byte {
	return append([]byte{prefixStable}, key...)
}

// encodeEntry is the record of l (doc.go).
func encodeEntry(l *raft.Log) []byte {
	b := make([]byte, entryHeader+len(l.Data)+4+len(l.Extensions))
	b[4] = recordVersion
	b[5] = byte(l.Type)
	binary.BigEndian.PutUint64(b[6:], l.Index)
	binary.BigEndian.PutUint64(b[14:], l.Term)
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	binary.BigEndian.PutUint64(b[22:], uint64(at))
	binary.BigEndian.PutUint32(b[30:], uint32(len(l.Data)))
	n := entryHeader + copy(b[entryHeader:], l.Data)
	binary.BigEndian.PutUint32(b[n:], uint32(len(l.Extensions)))
	copy(b[n+4:], l.Extensions)
	binary.BigEndian.PutUint32(b, crc32.Checksum(b[4:], crcTable))
	return b
}

// decodeEntry reads the record of the entry at index into l, copying
// what it keeps: b may be Pebble's buffer. Every failure is a
// *CorruptError naming index.
func decodeEntry(index uint64, b []byte, l *raft.Log) error {
	bad := func(format string, args ...any) error {
		return &CorruptError{Index: index, Reason: fmt.Sprintf(format, args...)}
	}
	if len(b) < entryHeader+4 {
		return bad("record of %d bytes is shorter than its %d-byte header", len(b), entryHeader+4)
	}
	if got, want := crc32.Checksum(b[4:], crcTable), binary.BigEndian.Uint32(b); got != want {
		return bad("checksum mismatch (stored %08x, computed %08x)", want, got)
	}
	if b[4] != recordVersion {
		return bad("record version %d, this stated reads version %d", b[4], recordVersion)
	}
	if got := binary.BigEndian.Uint64(b[6:]); got != index {
		return bad("record holds index %d", got)
	}
	nd := uint64(binary.BigEndian.Uint32(b[30:]))
	if uint64(len(b)) < entryHeader+nd+4 {
		return bad("data length %d runs past the %d-byte record", nd, len(b))
	}
	rest := b[entryHeader+nd:]
	ne := uint64(binary.BigEndian.Uint32(rest))
	if uint64(len(rest)) != 4+ne {
		return bad("extensions length %d does not match the %d bytes left", ne, len(rest)-4)
	}
	*l = raft.Log{
		Index: index,
		Term:  binary.BigEndian.Uint64(b[14:]),
		Type:  raft.LogType(b[5]),
	}
	if nd > 0 {
		l.Data = append([]byte(nil), b[entryHeader:entryHeader+nd]...)
	}
	if ne > 0 {
		l.Extensions = append([]byte(nil), rest[4:]...)
	}
	if at := int64(binary.BigEndian.Uint64(b[22:])); at != 0 {
		l.AppendedAt = time.Unix(0, at)
	}
	return nil
}

func encodeStable(val []byte) []byte {
	b := make([]byte, stableHeader+len(val))
	b[4] = recordVersion
	copy(b[stableHeader:], val)
	binary.BigEndian.PutUint32(b, crc32.Checksum(b[4:], crcTable))
	return b
}

// decodeStable returns a copy of the value of a stable record.
func decodeStable(key, b []byte) ([]byte, error) {
	bad := func(format string, args ...any) error {
		return &CorruptError{Key: string(key), Reason: fmt.Sprintf(format, args...)}
	}
	if len(b) < stableHeader {
		return nil, bad("record of %d bytes is shorter than its %d-byte header", len(b), stableHeader)
	}
	if got, want := crc32.Checksum(b[4:], crcTable), binary.BigEndian.Uint32(b); got != want {
		return nil, bad("checksum mismatch (stored %08x, computed %08x)", want, got)
	}
	if b[4] != recordVersion {
		return nil, bad("record version %d, this stated reads version %d", b[4], recordVersion)
	}
	return append([]byte{}, b[stableHeader:]...), nil
}
