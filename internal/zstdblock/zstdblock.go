package zstdblock

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// MaxRatio bounds how much a zstd frame can expand: a 4-byte RLE block
// yields at most 128 KiB. A declared length above len(frame)*MaxRatio is
// corrupt without decoding anything.
const MaxRatio = 32 << 10

// Options configure a Codec. None of them changes what a reader accepts
// of earlier files; Level changes the bytes written.
type Options struct {
	// Level is the encoder's level.
	Level zstd.EncoderLevel
	// EncoderConcurrency bounds the EncodeAll calls that run at once;
	// 0: zstd's default (GOMAXPROCS).
	EncoderConcurrency int
	// MaxRawSize bounds a block's uncompressed bytes: the decoder's memory
	// and the declared length Decode accepts.
	MaxRawSize int
}

// A Codec compresses and decompresses whole blocks. zstd's coders are safe
// for concurrent EncodeAll/DecodeAll and start no goroutines when used
// only that way, so one Codec serves a format for the whole process.
type Codec struct {
	opts Options
	once sync.Once
	enc  *zstd.Encoder
	dec  *zstd.Decoder
	err  error
}

// New returns a Codec; its coders are built on first use.
func New(opts Options) *Codec { return &Codec{opts: opts} }

// Ready builds the coders if they are not yet built and reports whether
// that failed: callers check it before they write or read anything, so a
// broken coder is not reported as a corrupt block.
func (c *Codec) Ready() error {
	c.once.Do(func() {
		eo := []zstd.EOption{zstd.WithEncoderLevel(c.opts.Level)}
		if c.opts.EncoderConcurrency > 0 {
			eo = append(eo, zstd.WithEncoderConcurrency(c.opts.EncoderConcurrency))
		}
		if c.enc, c.err = zstd.NewWriter(nil, eo...); c.err != nil {
			return
		}
		c.dec, c.err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0),
			zstd.WithDecoderMaxMemory(uint64(c.opts.MaxRawSize)), zstd.WithDecodeAllCapLimit(true))
	})
	if c.err != nil {
		return fmt.Errorf("zstd: %w", c.err)
	}
	return nil
}

// Append appends raw as one compressed block (its length, then one zstd
// frame) to dst.
func (c *Codec) Append(dst, raw []byte) ([]byte, error) {
	if err := c.Ready(); err != nil {
		return dst, err
	}
	dst = binary.AppendUvarint(dst, uint64(len(raw)))
	return c.enc.EncodeAll(raw, dst), nil
}

// Decode decodes one compressed block (exactly the bytes Append wrote)
// into buf's storage, which it grows when too small, and returns the raw
// bytes. The errors of a damaged block describe the damage; the
// caller adds where (and calls Ready first, to tell a broken coder apart).
func (c *Codec) Decode(block, buf []byte) ([]byte, error) {
	if err := c.Ready(); err != nil {
		return nil, err
	}
	rawLen, k := binary.Uvarint(block)
	if k <= 0 {
		return nil, errors.New("zstd: uncompressed length unreadable")
	}
	z := block[k:]
	if rawLen == 0 || rawLen > uint64(c.opts.MaxRawSize) || rawLen > uint64(len(z))*MaxRatio {
		return nil, fmt.Errorf("uncompressed length %d is impossible for a %d-byte zstd frame", rawLen, len(z))
	}
	if uint64(cap(buf)) < rawLen {
		buf = make([]byte, 0, rawLen)
	}
	raw, err := c.dec.DecodeAll(z, buf[:0:rawLen])
	if err != nil {
		return nil, fmt.Errorf("zstd: %v", err)
	}
	if uint64(len(raw)) != rawLen {
		return nil, fmt.Errorf("zstd frame decoded to %d bytes, want %d", len(raw), rawLen)
	}
	return raw, nil
}
