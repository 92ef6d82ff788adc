package chanstate

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"sync"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered"
)

// DefaultMaxObjectBytes is WriterOptions.MaxObjectBytes when left at 0.
const DefaultMaxObjectBytes = 64 << 20

// ErrWriterClosed is returned by Append and Seal after Close.
var ErrWriterClosed = errors.New("chanstate: writer closed")

// WriterOptions configure a Writer.
type WriterOptions struct {
	// Store receives the objects. Required.
	Store tiered.Store
	// Dir is the object name prefix, e.g. "job/chk-7". Empty: objects at
	// the store's root.
	Dir string
	// Name is the object name stem, e.g. "channels-<random>"; part n is
	// Dir/Name-n. It must differ between daemons (and between writers of a
	// checkpoint), since parts are put with PutIfAbsent. Required.
	Name string
	// MaxObjectBytes bounds a part: a segment that would take a non-empty
	// part past it starts a new part (a larger segment gets a part of its
	// own). Default DefaultMaxObjectBytes.
	MaxObjectBytes int64
	// SpoolDir is the local directory of the spool files. Default
	// os.TempDir().
	SpoolDir string
}

// EnsureDefaults fills zero fields with their defaults.
func (o *WriterOptions) EnsureDefaults() {
	if o.MaxObjectBytes == 0 {
		o.MaxObjectBytes = DefaultMaxObjectBytes
	}
	if o.SpoolDir == "" {
		o.SpoolDir = os.TempDir()
	}
}

// Validate reports every problem of o at once. Call EnsureDefaults first.
func (o *WriterOptions) Validate() error {
	var errs []error
	if o.Store == nil {
		errs = append(errs, errors.New("no store"))
	}
	if o.Name == "" {
		errs = append(errs, errors.New("no object name stem"))
	} else if err := tiered.ValidateName(o.partName(0)); err != nil {
		errs = append(errs, fmt.Errorf("dir %q and name %q: %v", o.Dir, o.Name, err))
	}
	if o.MaxObjectBytes < 0 {
		errs = append(errs, fmt.Errorf("max object bytes %d is negative", o.MaxObjectBytes))
	}
	if len(errs) > 0 {
		return fmt.Errorf("chanstate: %w: %w", backend.ErrInvalidArgument, errors.Join(errs...))
	}
	return nil
}

func (o *WriterOptions) partName(n int) string {
	name := fmt.Sprintf("%s-%d", o.Name, n)
	if o.Dir != "" {
		name = o.Dir + "/" + name
	}
	return name
}

// WriterStats count what a Writer has uploaded, for metrics.
type WriterStats struct {
	// Objects and Bytes were uploaded (parts put in the store).
	Objects int64
	Bytes   int64
	// Segments were appended (uploaded or not yet).
	Segments int64
}

// part is one future object: a spool file that segments are appended to
// until it is closed, then uploaded once.
type part struct {
	name string
	f    *os.File
	size int64

	// Guarded by Writer.mu.
	closed   bool          // no more appends; ready to upload
	uploaded bool          // durable in the store
	upload   chan struct{} // non-nil while an upload runs; closed when it ends
	err      error         // the last upload's error
	tries    int
}

// Writer writes the channel state of many tasks of one checkpoint into as
// few objects as possible: one per Writer, split past MaxObjectBytes.
//
// Append, Seal, Objects and Stats are safe for concurrent use. A part is
// uploaded by the caller that closes it: the Append whose segment does not
// fit (synchronously, after writing its own segment to the next part), or
// Seal. No goroutine is started.
type Writer struct {
	o WriterOptions

	mu       sync.Mutex
	parts    []*part // every part, in order; the last one may be open
	objects  []string
	stats    WriterStats
	isClosed bool
}

// NewWriter returns a Writer. The first spool file is created on the first
// Append.
func NewWriter(o WriterOptions) (*Writer, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	return &Writer{o: o}, nil
}

// Append encodes buffers as one segment of channel ch of task and appends
// it to the current part. The returned segment becomes durable when its
// part is uploaded: by a later Append that fills the part, or by Seal.
// Only Seal's success says it is durable. Buffers are not retained.
//
// An error of an upload that Append runs (for a full part) is not returned:
// that part is kept and the next Seal retries it.
func (w *Writer) Append(ctx context.Context, task backend.TaskID, ch backend.ChannelID, kind backend.ChannelKind, buffers [][]Record) (backend.ChannelSegment, error) {
	if err := ch.Validate(); err != nil {
		return backend.ChannelSegment{}, fmt.Errorf("chanstate: %s: %w: %v", task, backend.ErrInvalidArgument, err)
	}
	if _, err := backend.ParseChannelKind(string(kind)); err != nil {
		return backend.ChannelSegment{}, fmt.Errorf("chanstate: %s channel %s: %w: %v", task, ch, backend.ErrInvalidArgument, err)
	}
	if err := validateRecords(kind, buffers); err != nil {
		return backend.ChannelSegment{}, fmt.Errorf("chanstate: %s channel %s: %w: %v", task, ch, backend.ErrInvalidArgument, err)
	}
	seg := EncodeSegment(buffers)
	if len(seg) > MaxSegmentBytes {
		return backend.ChannelSegment{}, fmt.Errorf("chanstate: %s channel %s: %w: segment of %d bytes is over the %d-byte bound (append the buffers in pieces)",
			task, ch, backend.ErrInvalidArgument, len(seg), MaxSegmentBytes)
	}
	return w.appendBytes(ctx, seg, SegmentChecksum(seg))
}

// AppendFile appends data, a small file of a task's snapshot, as it is
// to the current part, as Append does a segment: the daemon packs the
// small private files of its tasks' checkpoint into the same few
// objects (backend.FileRef.Pack). The returned ref says where it lies;
// its CRC32C is that of data. Only Seal's success says it is durable.
func (w *Writer) AppendFile(ctx context.Context, data []byte) (backend.ChannelSegment, error) {
	if len(data) > MaxSegmentBytes {
		return backend.ChannelSegment{}, fmt.Errorf("chanstate: %w: file of %d bytes is over the %d-byte bound", backend.ErrInvalidArgument, len(data), MaxSegmentBytes)
	}
	return w.appendBytes(ctx, data, crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli)))
}

// AppendFileFrom appends the size bytes of r, a file of a task's
// snapshot, as AppendFile does data, but streams them into the spool
// instead of holding them in memory and has no size bound: the daemon
// packs the file backend's snapshot files of a checkpoint whatever their
// size. It fails, leaving the part as it was, when r holds fewer or more
// than size bytes. The returned ref's CRC32C is that of the bytes read.
func (w *Writer) AppendFileFrom(ctx context.Context, r io.Reader, size int64) (backend.ChannelSegment, error) {
	if size < 0 {
		return backend.ChannelSegment{}, fmt.Errorf("chanstate: %w: file of %d bytes", backend.ErrInvalidArgument, size)
	}
	var crc uint32
	ref, err := w.appendWith(ctx, size, func(f *os.File, off int64) error {
		h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
		n, err := io.Copy(io.NewOffsetWriter(f, off), io.TeeReader(io.LimitReader(r, size+1), h))
		switch {
		case err != nil:
			return fmt.Errorf("chanstate: spool %s: %w", f.Name(), err)
		case n != size:
			return fmt.Errorf("chanstate: %w: the file has %d bytes or more, its writer said %d", backend.ErrInvalidArgument, n, size)
		}
		crc = h.Sum32()
		return ctx.Err()
	})
	ref.CRC32C = crc
	return ref, err
}

// appendBytes appends b to the current part (a new one if b does not
// fit) and uploads the part it closed.
func (w *Writer) appendBytes(ctx context.Context, seg []byte, crc uint32) (backend.ChannelSegment, error) {
	ref, err := w.appendWith(ctx, int64(len(seg)), func(f *os.File, off int64) error {
		if _, err := f.WriteAt(seg, off); err != nil {
			return fmt.Errorf("chanstate: spool %s: %w", f.Name(), err)
		}
		return nil
	})
	ref.CRC32C = crc
	return ref, err
}

// appendWith appends n bytes that write puts into the spool file f at
// off to the current part (a new one if they do not fit) and uploads the
// part it closed. The returned ref has no CRC32C.
func (w *Writer) appendWith(ctx context.Context, n int64, write func(f *os.File, off int64) error) (backend.ChannelSegment, error) {
	w.mu.Lock()
	if w.isClosed {
		w.mu.Unlock()
		return backend.ChannelSegment{}, ErrWriterClosed
	}
	var full *part
	cur := w.current()
	if cur != nil && cur.size > 0 && cur.size+n > w.o.MaxObjectBytes {
		cur.closed = true
		full = cur
		cur = nil
	}
	if cur == nil {
		var err error
		if cur, err = w.newPart(); err != nil {
			w.mu.Unlock()
			return backend.ChannelSegment{}, err
		}
	}
	// Writing under the lock keeps the spool file's layout equal to the
	// segments' refs; a failed write leaves the part as it was (its size
	// unchanged: the next write goes over what it left).
	if err := write(cur.f, cur.size); err != nil {
		w.mu.Unlock()
		return backend.ChannelSegment{}, err // a part closed here is Seal's to upload
	}
	ref := backend.ChannelSegment{Path: cur.name, Offset: cur.size, Length: n}
	cur.size += n
	w.stats.Segments++
	var wait []*part
	if full != nil {
		wait = w.claim([]*part{full})
	}
	w.mu.Unlock()

	for _, p := range wait {
		_ = w.upload(ctx, p) // kept for Seal to retry
	}
	return ref, nil
}

// current is the open part, if any. Call with w.mu held.
func (w *Writer) current() *part {
	if n := len(w.parts); n > 0 && !w.parts[n-1].closed {
		return w.parts[n-1]
	}
	return nil
}

func (w *Writer) newPart() (*part, error) {
	f, err := os.CreateTemp(w.o.SpoolDir, "chanstate-*.spool")
	if err != nil {
		return nil, fmt.Errorf("chanstate: spool file: %w", err)
	}
	p := &part{name: w.o.partName(len(w.parts)), f: f}
	w.parts = append(w.parts, p)
	return p, nil
}

// claim marks the closed, not uploaded, idle parts of ps as being uploaded
// by the caller and returns them. Call with w.mu held.
func (w *Writer) claim(ps []*part) []*part {
	var mine []*part
	for _, p := range ps {
		if p.closed && !p.uploaded && p.upload == nil {
			p.upload = make(chan struct{})
			mine = append(mine, p)
		}
	}
	return mine
}

// upload puts claimed part p and records the outcome.
func (w *Writer) upload(ctx context.Context, p *part) error {
	err := w.o.Store.PutIfAbsent(ctx, p.name, io.NewSectionReader(p.f, 0, p.size), p.size)
	if errors.Is(err, tiered.ErrExists) && p.tries > 0 {
		// A retry after an attempt whose outcome was lost: the object is
		// ours if it has our size (names are unique per writer).
		if info, serr := w.o.Store.Stat(ctx, p.name); serr == nil && info.Size == p.size {
			err = nil
		}
	}
	if err != nil {
		err = fmt.Errorf("chanstate: upload %s (%d bytes): %w", p.name, p.size, err)
	}

	w.mu.Lock()
	defer w.mu.Unlock()
	p.tries++
	p.err = err
	if err == nil {
		p.uploaded = true
		w.objects = append(w.objects, p.name)
		w.stats.Objects++
		w.stats.Bytes += p.size
		// The spool file is not needed any more; free the disk now.
		_ = p.f.Close()
		_ = os.Remove(p.f.Name())
		p.f = nil
	}
	close(p.upload)
	p.upload = nil
	return err
}

// Seal makes every segment appended before the call durable: it closes the
// current part and uploads every part not yet uploaded (retrying failed
// ones), and waits for uploads other callers run. Appends after the call go
// to a new part. Concurrent Seals never upload a part twice.
func (w *Writer) Seal(ctx context.Context) error {
	w.mu.Lock()
	if w.isClosed {
		w.mu.Unlock()
		return ErrWriterClosed
	}
	if cur := w.current(); cur != nil && cur.size > 0 {
		cur.closed = true
	}
	todo := make([]*part, 0, len(w.parts))
	for _, p := range w.parts {
		if p.closed && !p.uploaded {
			todo = append(todo, p)
		}
	}
	w.mu.Unlock()

	var errs []error
	for _, p := range todo {
		for {
			w.mu.Lock()
			if p.uploaded {
				w.mu.Unlock()
				break
			}
			if mine := w.claim([]*part{p}); len(mine) == 1 {
				w.mu.Unlock()
				if err := w.upload(ctx, p); err != nil {
					errs = append(errs, err)
				}
				break
			}
			done := p.upload
			w.mu.Unlock()
			select {
			case <-done:
				// Loop: uploaded, or failed and ours to retry.
			case <-ctx.Done():
				return fmt.Errorf("chanstate: seal: waiting for %s: %w", p.name, ctx.Err())
			}
		}
		if err := ctx.Err(); err != nil {
			errs = append(errs, fmt.Errorf("chanstate: seal: %w", err))
			break
		}
	}
	return errors.Join(errs...)
}

// Objects returns the names of the objects uploaded so far, in upload order.
func (w *Writer) Objects() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.objects...)
}

// Stats returns the counts now.
func (w *Writer) Stats() WriterStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stats
}

// Close waits for the uploads in flight and removes the spool files. It
// does not upload (segments not sealed are dropped) and does not delete
// uploaded objects: the checkpoint's lifecycle owns them. Close is
// idempotent; Append and Seal fail after it.
func (w *Writer) Close() error {
	w.mu.Lock()
	w.isClosed = true
	for {
		var done chan struct{}
		for _, p := range w.parts {
			if p.upload != nil {
				done = p.upload
				break
			}
		}
		if done == nil {
			break
		}
		w.mu.Unlock()
		<-done
		w.mu.Lock()
	}
	defer w.mu.Unlock()
	var errs []error
	for _, p := range w.parts {
		if p.f == nil {
			continue
		}
		if err := p.f.Close(); err != nil {
			errs = append(errs, err)
		}
		if err := os.Remove(p.f.Name()); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
		p.f = nil
	}
	if len(errs) > 0 {
		return fmt.Errorf("chanstate: close: %w", errors.Join(errs...))
	}
	return nil
}
