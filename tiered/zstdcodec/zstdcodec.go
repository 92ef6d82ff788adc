// Package zstdcodec compresses checkpoint files with zstd
// (github.com/klauspost/compress). A backend that compresses a file
// records Name in the file's handle (FileRef.Compression), so a restore
// knows to decompress; the handle's checksum covers the stored, compressed
// bytes, so corruption is caught before decompression.
//
// Decompression is bounded: a reader fails with ErrTooLarge once more than
// its limit comes out, and the window a frame may ask for is capped at
// MaxWindow, so a corrupt or hostile file cannot exhaust memory. Encoders
// write frames with a window of at most EncoderWindow, well under the cap,
// and with zstd's own content checksum.
package zstdcodec

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
)

// Name is the compression name recorded in handles.
const Name = "zstd"

// EncoderWindow is the largest window an encoder of this package uses.
// MaxWindow is the largest window a decoder accepts. Frozen: raising
// EncoderWindow above MaxWindow would write files older readers refuse.
const (
	EncoderWindow = 8 << 20
	MaxWindow     = 32 << 20
)

// Errors wrapped by decoding failures.
var (
	// ErrTooLarge: the data decompresses to more than the limit.
	ErrTooLarge = errors.New("zstdcodec: decompressed data exceeds the limit")
	// ErrCorrupt: the data is not a valid zstd stream.
	ErrCorrupt = errors.New("zstdcodec: corrupt zstd data")
)

// Level is a compression level: 1 (fastest) to 4 (best); 0 is the default
// (zstd level 3).
type Level int

func (l Level) option() (zstd.EOption, error) {
	switch l {
	case 0, 2:
		return zstd.WithEncoderLevel(zstd.SpeedDefault), nil
	case 1:
		return zstd.WithEncoderLevel(zstd.SpeedFastest), nil
	case 3:
		return zstd.WithEncoderLevel(zstd.SpeedBetterCompression), nil
	case 4:
		return zstd.WithEncoderLevel(zstd.SpeedBestCompression), nil
	}
	return nil, fmt.Errorf("zstdcodec: level %d is not in 0..4", int(l))
}

// Writer compresses into an underlying writer. Close flushes the frame; it
// does not close the underlying writer.
type Writer struct {
	enc *zstd.Encoder
	n   int64
}

// NewWriter returns a Writer at level (0: default) writing to w.
func NewWriter(w io.Writer, level Level) (*Writer, error) {
	lo, err := level.option()
	if err != nil {
		return nil, err
	}
	// One goroutine per encoder: the daemon runs many uploads at once and
	// the machine has few cores.
	enc, err := zstd.NewWriter(w, lo, zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(EncoderWindow))
	if err != nil {
		return nil, fmt.Errorf("zstdcodec: %w", err)
	}
	return &Writer{enc: enc}, nil
}

// Write compresses p.
func (w *Writer) Write(p []byte) (int, error) {
	n, err := w.enc.Write(p)
	w.n += int64(n)
	return n, err
}

// ReadFrom compresses everything r gives.
func (w *Writer) ReadFrom(r io.Reader) (int64, error) {
	n, err := w.enc.ReadFrom(r)
	w.n += n
	return n, err
}

// Uncompressed is the number of bytes written so far.
func (w *Writer) Uncompressed() int64 { return w.n }

// Close finishes the frame and releases the encoder.
func (w *Writer) Close() error { return w.enc.Close() }

// Compress compresses all of src into dst at level and returns the
// number of uncompressed bytes.
func Compress(dst io.Writer, src io.Reader, level Level) (int64, error) {
	w, err := NewWriter(dst, level)
	if err != nil {
		return 0, err
	}
	n, err := w.ReadFrom(src)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, fmt.Errorf("zstdcodec: compress: %w", err)
	}
	return n, nil
}

// CompressBytes compresses b at the default level.
func CompressBytes(b []byte) []byte {
	var buf bytes.Buffer
	// Writing to a bytes.Buffer cannot fail, and the level is valid.
	if _, err := Compress(&buf, bytes.NewReader(b), 0); err != nil {
		panic(err) // unreachable: see above
	}
	return buf.Bytes()
}

// Reader decompresses with a bound on the output.
type Reader struct {
	dec   *zstd.Decoder
	limit int64
	n     int64
	err   error
}

// NewReader returns a reader of the data r decompresses to; it fails with
// ErrTooLarge once more than maxSize bytes come out (maxSize <= 0: no
// limit besides the window cap). Close releases the decoder; it does not
// close r.
func NewReader(r io.Reader, maxSize int64) (*Reader, error) {
	dec, err := zstd.NewReader(r,
		zstd.WithDecoderConcurrency(1),
		zstd.WithDecoderMaxWindow(MaxWindow),
		zstd.WithDecoderLowmem(true))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return &Reader{dec: dec, limit: maxSize}, nil
}

// Read implements io.Reader.
func (r *Reader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if r.limit > 0 && int64(len(p)) > r.limit-r.n+1 {
		// Never read more than one byte past the limit, so the excess is
		// detected without decompressing it.
		p = p[:r.limit-r.n+1]
	}
	n, err := r.dec.Read(p)
	r.n += int64(n)
	if r.limit > 0 && r.n > r.limit {
		r.err = fmt.Errorf("%w: more than %d bytes", ErrTooLarge, r.limit)
		return n - int(r.n-r.limit), r.err
	}
	if err != nil && err != io.EOF {
		r.err = fmt.Errorf("%w: after %d bytes: %v", ErrCorrupt, r.n, err)
		return n, r.err
	}
	return n, err
}

// Close releases the decoder.
func (r *Reader) Close() error {
	r.dec.Close()
	if r.err == nil {
		r.err = errors.New("zstdcodec: reader closed")
	}
	return nil
}

// DecompressBytes decompresses b, which must decompress to at most maxSize
// bytes (maxSize <= 0: no limit besides the window cap).
func DecompressBytes(b []byte, maxSize int64) ([]byte, error) {
	r, err := NewReader(bytes.NewReader(b), maxSize)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}
