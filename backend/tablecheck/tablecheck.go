package tablecheck

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage"
	"github.com/cockroachdb/pebble/v2/sstable"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered"
)

// MergerName is the name of the merge operator of stated's Pebble stores
// (backend/lsm's concat merger), which every table they write carries in
// its properties; a reader refuses a table whose merger it does not know.
// Frozen: a store written with one name cannot be opened with another,
// and every checkpoint carries it.
const MergerName = "stated.concat.v1"

// validateMerger names the merger for the reader: validation reads
// blocks and checks checksums, it never merges values.
var validateMerger = &pebble.Merger{Name: MergerName, Merge: pebble.DefaultMerger.Merge}

// Validate opens the object name of store, size bytes long, as an SST
// written by backend/lsm and checks the checksum of every block of it
// (data, index, filter, range deletion, properties, meta index). Each
// block is one ranged read. A missing object wraps backend.ErrNotFound;
// an object of another size, or one that is no SST or has a damaged
// block, wraps backend.ErrCorrupt and names the object. Errors carry no
// package prefix: the caller says what it was doing.
func Validate(ctx context.Context, store tiered.Store, name string, size int64) error {
	info, err := store.Stat(ctx, name)
	if tiered.IsNotFound(err) {
		return fmt.Errorf("table %s: %w: %v", name, backend.ErrNotFound, err)
	}
	if err != nil {
		return fmt.Errorf("table %s: %w", name, err)
	}
	if info.Size != size {
		return fmt.Errorf("table %s: %w: %d bytes, the handle says %d", name, backend.ErrCorrupt, info.Size, size)
	}
	o := &pebble.Options{Merger: validateMerger, FormatMajorVersion: pebble.FormatNewest}
	o.EnsureDefaults()
	r := &storeReadable{store: store, name: name, size: size}
	rd, err := sstable.NewReader(ctx, r, o.MakeReaderOptions())
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			// A failed read of a cancelled context is no damage.
			return fmt.Errorf("table %s: %w", name, cerr)
		}
		if rerr := r.storeErr(); rerr != nil {
			return fmt.Errorf("table %s: read: %w", name, rerr)
		}
		return fmt.Errorf("table %s: %w: %v", name, backend.ErrCorrupt, err)
	}
	// The reader's methods take no context: r reads with this one.
	r.ctx = ctx
	err = rd.ValidateBlockChecksums()
	if cerr := rd.Close(); err == nil {
		err = cerr
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("table %s: %w", name, err)
	}
	if rerr := r.storeErr(); rerr != nil {
		// The store failed, not the bytes.
		return fmt.Errorf("table %s: read: %w", name, rerr)
	}
	if err != nil {
		return fmt.Errorf("table %s: %w: %v", name, backend.ErrCorrupt, err)
	}
	return nil
}

// storeReadable is an objstorage.Readable over one object of a
// tiered.Store: every ReadAt is one GetRange of exactly the bytes asked
// for. Unlike Pebble's remote readable it reports a failed read as an
// error (objstorageprovider's NewRemoteReadable dereferences a nil error
// handler on one).
type storeReadable struct {
	store tiered.Store
	name  string
	size  int64
	// ctx, when set, replaces the context of reads made through read
	// handles created without one (ValidateBlockChecksums').
	ctx context.Context
	// failed is the first error of the store itself (not of the bytes),
	// which the caller reports as a failed read, not as damage.
	mu     sync.Mutex
	failed error
}

func (r *storeReadable) storeErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

func (r *storeReadable) fail(err error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failed == nil {
		r.failed = err
	}
	return err
}

var _ objstorage.Readable = (*storeReadable)(nil)

// ReadAt implements objstorage.Readable.
func (r *storeReadable) ReadAt(ctx context.Context, p []byte, off int64) error {
	if r.ctx != nil {
		ctx = r.ctx
	}
	if off < 0 || off+int64(len(p)) > r.size {
		return fmt.Errorf("read [%d, %d) past the end of %s (%d bytes)", off, off+int64(len(p)), r.name, r.size)
	}
	if len(p) == 0 {
		return nil
	}
	rc, err := r.store.GetRange(ctx, r.name, off, int64(len(p)))
	if err != nil {
		return r.fail(err)
	}
	defer rc.Close()
	if _, err := io.ReadFull(rc, p); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			// Shorter than its size: damage, for the reader to report.
			return fmt.Errorf("%s ends before byte %d: %w", r.name, off+int64(len(p)), err)
		}
		return r.fail(err)
	}
	return nil
}

// Close implements objstorage.Readable.
func (r *storeReadable) Close() error { return nil }

// Size implements objstorage.Readable.
func (r *storeReadable) Size() int64 { return r.size }

// NewReadHandle implements objstorage.Readable: no read-ahead, each block
// is read on its own.
func (r *storeReadable) NewReadHandle(objstorage.ReadBeforeSize) objstorage.ReadHandle {
	h := objstorage.MakeNoopReadHandle(r)
	return &h
}
