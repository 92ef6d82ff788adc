package localfs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"time"

	"github.com/statedhq/stated/internal/frame"
	"github.com/statedhq/stated/tiered"
)

// Pack files (see the package doc, "Packs"). Every constant below is
// frozen: version 1 of the format.
const (
	packDir       = tiered.PackDir
	packSuffix    = ".pack"
	lockSuffix    = ".lock"
	packMagic     = "STPK"
	packVersion   = 1
	packHeaderLen = 12 // magic, version u16, reserved u16, crc32c u32
	frameHeadLen  = 16 // length u32, state u8, reserved u8, name length u16, mod time i64
	frameOverhead = frameHeadLen + 4

	stateLive    = 1
	stateDeleted = 2
)

// DefaultPackSize is the size of a pack file when Options.PackSize is zero.
const DefaultPackSize = 16 << 20

// DefaultMaxPacked is the largest object Append packs when
// Options.MaxPacked is zero; larger ones are written as files.
const DefaultMaxPacked = 1 << 20

// errPackCorrupt is wrapped by errors about a pack's bytes.
var errPackCorrupt = errors.New("corrupt pack file")

// packHeader is the first packHeaderLen bytes of every pack file.
func packHeader() []byte {
	h := make([]byte, packHeaderLen)
	copy(h, packMagic)
	binary.LittleEndian.PutUint16(h[4:], packVersion)
	binary.LittleEndian.PutUint32(h[8:], frame.Checksum(h[:8]))
	return h
}

// checkPackHeader verifies a pack file's header.
func checkPackHeader(h []byte) error {
	if len(h) < packHeaderLen || string(h[:4]) != packMagic {
		return fmt.Errorf("%w: bad magic", errPackCorrupt)
	}
	if got, want := binary.LittleEndian.Uint32(h[8:]), frame.Checksum(h[:8]); got != want {
		return fmt.Errorf("%w: header checksum %08x, want %08x", errPackCorrupt, got, want)
	}
	if v := binary.LittleEndian.Uint16(h[4:]); v != packVersion {
		return fmt.Errorf("%w: version %d, this build reads %d", errPackCorrupt, v, packVersion)
	}
	return nil
}

// encodeFrame is the frame of an object: see the package doc.
func encodeFrame(name string, data []byte, mod time.Time) []byte {
	n := frameOverhead + len(name) + len(data)
	b := make([]byte, n)
	binary.LittleEndian.PutUint32(b[0:], uint32(n))
	b[4] = stateLive
	binary.LittleEndian.PutUint16(b[6:], uint16(len(name)))
	binary.LittleEndian.PutUint64(b[8:], uint64(mod.UnixNano()))
	copy(b[frameHeadLen:], name)
	copy(b[frameHeadLen+len(name):], data)
	binary.LittleEndian.PutUint32(b[n-4:], frameChecksum(b))
	return b
}

// frameChecksum is the CRC32C of a frame without its state byte (which a
// delete rewrites in place) and its checksum.
func frameChecksum(b []byte) uint32 {
	return crc32.Update(frame.Checksum(b[:4]), frame.Table(), b[5:len(b)-4])
}

// frameInfo is a frame's header, decoded.
type frameInfo struct {
	off     int64
	length  int64
	state   byte
	name    string
	mod     time.Time
	dataOff int64 // in the pack file
}

func (f frameInfo) size() int64 { return f.length - frameOverhead - int64(len(f.name)) }

// headLength decodes the length of the frame whose header is h; 0 means
// no frame starts here (the zeros a pack file is filled with).
func headLength(h []byte) int64 { return int64(binary.LittleEndian.Uint32(h)) }

// decodeFrame verifies the whole frame b found at off.
func decodeFrame(b []byte, off int64) (frameInfo, error) {
	if len(b) < frameOverhead {
		return frameInfo{}, fmt.Errorf("%w: frame at %d: %d bytes", errPackCorrupt, off, len(b))
	}
	n := headLength(b)
	nameLen := int(binary.LittleEndian.Uint16(b[6:]))
	switch {
	case n != int64(len(b)):
		return frameInfo{}, fmt.Errorf("%w: frame at %d: length %d, have %d bytes", errPackCorrupt, off, n, len(b))
	case b[4] != stateLive && b[4] != stateDeleted:
		return frameInfo{}, fmt.Errorf("%w: frame at %d: state %d", errPackCorrupt, off, b[4])
	case b[5] != 0 || nameLen == 0 || frameOverhead+nameLen > len(b):
		return frameInfo{}, fmt.Errorf("%w: frame at %d: bad header", errPackCorrupt, off)
	}
	if got, want := binary.LittleEndian.Uint32(b[len(b)-4:]), frameChecksum(b); got != want {
		return frameInfo{}, fmt.Errorf("%w: frame at %d: checksum %08x, want %08x", errPackCorrupt, off, got, want)
	}
	name := string(b[frameHeadLen : frameHeadLen+nameLen])
	if tiered.ValidateName(name) != nil {
		return frameInfo{}, fmt.Errorf("%w: frame at %d: bad object name %q", errPackCorrupt, off, name)
	}
	return frameInfo{
		off: off, length: n, state: b[4], name: name,
		mod:     time.Unix(0, int64(binary.LittleEndian.Uint64(b[8:]))),
		dataOff: off + frameHeadLen + int64(nameLen),
	}, nil
}

// scanPack reads the frames of a pack file from off (0: from its start,
// header included) until the first place where no whole, valid frame
// starts: the zeros after the last frame, a frame being written, or one a
// crash tore. It returns the frames and where it stopped.
func scanPack(r io.ReaderAt, size, off int64) ([]frameInfo, int64, error) {
	if off == 0 {
		h := make([]byte, packHeaderLen)
		if _, err := r.ReadAt(h, 0); err != nil {
			if errors.Is(err, io.EOF) {
				return nil, 0, nil // being created: no header yet
			}
			return nil, 0, err
		}
		if err := checkPackHeader(h); err != nil {
			// A newer format is not ours to read. A damaged header (or
			// one a crash tore while the pack was created, before it
			// held any frame) does not stop the scan: every frame is
			// verified on its own.
			if string(h[:4]) == packMagic && binary.LittleEndian.Uint16(h[4:]) != packVersion &&
				binary.LittleEndian.Uint32(h[8:]) == frame.Checksum(h[:8]) {
				return nil, 0, err
			}
		}
		off = packHeaderLen
	}
	var out []frameInfo
	for {
		b, err := frameAt(r, size, off)
		if err != nil || b == nil {
			return out, off, err
		}
		fi, err := decodeFrame(b, off)
		if err != nil {
			// A torn last frame, or one still being written, ends the
			// scan for now. A damaged frame in the middle (a whole, valid
			// frame follows it) is skipped: its object reads as missing,
			// the frames after it stay readable.
			next, err := frameAt(r, size, off+int64(len(b)))
			if err != nil || next == nil {
				return out, off, err
			}
			if _, err := decodeFrame(next, off+int64(len(b))); err != nil {
				return out, off, nil
			}
			off += int64(len(b))
			continue
		}
		out = append(out, fi)
		off += fi.length
	}
}

// frameAt reads the bytes of the frame that starts at off, if its length
// is plausible (nil, nil: no frame starts there, the zeros after the last
// frame or a torn length). The caller decodes and verifies them.
func frameAt(r io.ReaderAt, size, off int64) ([]byte, error) {
	if off+frameOverhead > size {
		return nil, nil
	}
	head := make([]byte, frameHeadLen)
	if _, err := r.ReadAt(head, off); err != nil {
		return nil, err
	}
	n := headLength(head)
	if n < frameOverhead || off+n > size || n > int64(frameOverhead+1024+maxPackedLimit) {
		return nil, nil
	}
	b := make([]byte, n)
	if _, err := r.ReadAt(b, off); err != nil {
		return nil, err
	}
	return b, nil
}

// maxPackedLimit bounds Options.MaxPacked, so that a scan never reads a
// corrupt length's worth of memory.
const maxPackedLimit = 64 << 20
