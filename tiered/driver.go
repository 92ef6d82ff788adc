package tiered

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
)

// ErrClosed is returned by every operation of a Bucket after Close.
var ErrClosed = errors.New("store closed")

// Driver is the I/O of one kind of store (a directory, memory, S3, a local
// cache over another store): only what differs between them. Bucket puts
// the Store contract's checks in front of a Driver once for all kinds, as
// gocloud's blob.Bucket does over blob/driver.
//
// Bucket calls a driver only with what the contract allows, so a driver
// checks none of it again:
//   - every name passes ValidateName (and so is not reserved);
//   - ctx was live when the call started, and the Bucket is not closed;
//   - Put's size is >= 0 and its reader yields exactly size bytes and
//     then io.EOF, or fails (also when ctx ends while it is read): a
//     driver copies it until io.EOF and stores nothing if it fails;
//   - GetRange's offset is >= 0 and its length is >= 0, or -1 for "to
//     the end";
//   - List's limit is in [1, DriverInfo.ListPageSize], its prefix's
//     directory part (up to the last "/") is a valid name, or it has none.
//
// Errors: a driver returns its native errors (or the package's sentinels
// directly); Bucket asks Classify which sentinel one means, wraps it and
// names the store, the operation and the object. Methods are called
// concurrently.
type Driver interface {
	// Info describes the driver; Bucket reads it once, in New.
	Info() DriverInfo
	// Put stores the bytes of r under name; with ifAbsent it fails (with
	// an error Classify maps to ErrExists) if the object exists.
	Put(ctx context.Context, name string, r io.Reader, size int64, ifAbsent bool) error
	// GetRange opens the bytes from offset up to offset+length (length -1:
	// the end), cut at the object's end, and returns the object's whole
	// size. A driver that cannot know the size without another request
	// returns -1 and reports a range that starts past the end itself
	// (ErrInvalidRange); otherwise Bucket checks the range against size
	// (and closes rc when it is invalid), so the driver need not.
	GetRange(ctx context.Context, name string, offset, length int64) (rc io.ReadCloser, size int64, err error)
	// Stat describes the object.
	Stat(ctx context.Context, name string) (ObjectInfo, error)
	// List returns objects whose names start with prefix and sort after
	// startAfter, at least the first limit of them in any order (Bucket
	// sorts and cuts), and whether there may be more than it returned.
	List(ctx context.Context, prefix, startAfter string, limit int) (objs []ObjectInfo, more bool, err error)
	// Delete removes the objects; missing ones are success. It may delete
	// a part and fail, with an error that names what was not deleted.
	Delete(ctx context.Context, names []string) error
	// Classify returns the sentinel err means (ErrNotFound, ErrExists or
	// ErrInvalidRange), or nil for any other error.
	Classify(err error) error
	// Close releases the driver's resources; Bucket calls it once.
	Close() error
}

// DriverInfo describes a Driver.
type DriverInfo struct {
	// Name prefixes the errors (e.g. "localfs").
	Name string
	// ListPageSize is the largest page List returns, and the page size
	// when the caller gives none. Default 1000.
	ListPageSize int
}

// Bucket is the Store of a Driver: the contract's checks, once, in front
// of the driver's I/O. The store packages embed it in their Store types.
type Bucket struct {
	d    Driver
	info DriverInfo

	mu     sync.RWMutex
	closed bool
}

var _ Store = (*Bucket)(nil)

// New returns the Store of d.
func New(d Driver) *Bucket {
	info := d.Info()
	if info.ListPageSize <= 0 {
		info.ListPageSize = 1000
	}
	if info.Name == "" {
		info.Name = "tiered"
	}
	return &Bucket{d: d, info: info}
}

// Driver is the driver under b.
func (b *Bucket) Driver() Driver { return b.d }

// start makes the checks every operation on one name makes before I/O.
func (b *Bucket) start(ctx context.Context, name string) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	return b.live(ctx)
}

func (b *Bucket) live(ctx context.Context) error {
	b.mu.RLock()
	closed := b.closed
	b.mu.RUnlock()
	if closed {
		return fmt.Errorf("%s: %w", b.info.Name, ErrClosed)
	}
	return ctx.Err()
}

// fail names the store, the operation and the object in err, and wraps the
// sentinel the driver says err means.
func (b *Bucket) fail(op, name string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if s := b.d.Classify(err); s != nil && !errors.Is(err, s) {
		return fmt.Errorf("%s: %s %s: %w: %w", b.info.Name, op, name, s, err)
	}
	return fmt.Errorf("%s: %s %s: %w", b.info.Name, op, name, err)
}

// Put implements Store.
func (b *Bucket) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	return b.put(ctx, name, r, size, false)
}

// PutIfAbsent implements Store.
func (b *Bucket) PutIfAbsent(ctx context.Context, name string, r io.Reader, size int64) error {
	return b.put(ctx, name, r, size, true)
}

func (b *Bucket) put(ctx context.Context, name string, r io.Reader, size int64, ifAbsent bool) error {
	if err := b.start(ctx, name); err != nil {
		return err
	}
	if size < 0 {
		return fmt.Errorf("%s: put %s: negative size %d", b.info.Name, name, size)
	}
	return b.fail("put", name, b.d.Put(ctx, name, &exactReader{ctx: ctx, r: r, size: size, left: size}, size, ifAbsent))
}

// exactReader passes on exactly size bytes of r and then io.EOF, and fails
// if r has fewer or more, or when ctx ends.
type exactReader struct {
	ctx        context.Context
	r          io.Reader
	size, left int64
}

func (e *exactReader) Read(p []byte) (int, error) {
	if err := e.ctx.Err(); err != nil {
		return 0, err
	}
	if e.left == 0 {
		// Look for a byte beyond the size announced.
		var one [1]byte
		for {
			n, err := e.r.Read(one[:])
			if n > 0 {
				return 0, fmt.Errorf("the reader has more than the %d bytes announced", e.size)
			}
			if err == io.EOF {
				return 0, io.EOF
			}
			if err != nil {
				return 0, err
			}
		}
	}
	if int64(len(p)) > e.left {
		p = p[:e.left]
	}
	n, err := e.r.Read(p)
	e.left -= int64(n)
	if err == io.EOF {
		if e.left > 0 {
			return n, fmt.Errorf("read %d bytes, want %d: %w", e.size-e.left, e.size, io.ErrUnexpectedEOF)
		}
		err = nil
	}
	return n, err
}

// Get implements Store.
func (b *Bucket) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	return b.getRange(ctx, "get", name, 0, -1)
}

// GetRange implements Store.
func (b *Bucket) GetRange(ctx context.Context, name string, offset, length int64) (io.ReadCloser, error) {
	return b.getRange(ctx, "get-range", name, offset, length)
}

func (b *Bucket) getRange(ctx context.Context, op, name string, offset, length int64) (io.ReadCloser, error) {
	if err := b.start(ctx, name); err != nil {
		return nil, err
	}
	if offset < 0 {
		return nil, fmt.Errorf("%s: %s %s: %w: negative offset %d", b.info.Name, op, name, ErrInvalidRange, offset)
	}
	if length < 0 {
		length = -1
	}
	rc, size, err := b.d.GetRange(ctx, name, offset, length)
	if err != nil {
		return nil, b.fail(op, name, err)
	}
	if size >= 0 {
		if err := CheckRange(offset, length, size); err != nil {
			rc.Close()
			return nil, fmt.Errorf("%s: %s %s: %w", b.info.Name, op, name, err)
		}
	}
	return rc, nil
}

// CheckRange is the rule for a range of an object of size bytes: it may
// end past the end (it is cut there) but not start past it, and one that
// starts at the end of a non-empty object must be empty. Bucket applies
// it; a driver that learns the size late (S3) applies it too.
func CheckRange(offset, length, size int64) error {
	if offset < 0 || offset > size || (offset == size && size > 0 && length != 0) {
		return fmt.Errorf("%w: offset %d of %d bytes", ErrInvalidRange, offset, size)
	}
	return nil
}

// Stat implements Store.
func (b *Bucket) Stat(ctx context.Context, name string) (ObjectInfo, error) {
	if err := b.start(ctx, name); err != nil {
		return ObjectInfo{}, err
	}
	info, err := b.d.Stat(ctx, name)
	if err != nil {
		return ObjectInfo{}, b.fail("stat", name, err)
	}
	info.Name = name
	return info, nil
}

// List implements Store.
func (b *Bucket) List(ctx context.Context, prefix, startAfter string, limit int) (ListPage, error) {
	if dir, _, ok := cutLast(prefix); ok && dir != "" {
		if err := ValidateName(dir); err != nil {
			return ListPage{}, fmt.Errorf("%s: list %q: %w", b.info.Name, prefix, err)
		}
	}
	if err := b.live(ctx); err != nil {
		return ListPage{}, err
	}
	if limit <= 0 || limit > b.info.ListPageSize {
		limit = b.info.ListPageSize
	}
	objs, more, err := b.d.List(ctx, prefix, startAfter, limit)
	if err != nil {
		return ListPage{}, b.fail("list", fmt.Sprintf("%q", prefix), err)
	}
	if !slices.IsSortedFunc(objs, byName) {
		slices.SortFunc(objs, byName)
	}
	for i, o := range objs {
		if !strings.HasPrefix(o.Name, prefix) || o.Name <= startAfter || (i > 0 && o.Name == objs[i-1].Name) {
			// The driver broke its contract; say so rather than hand out
			// a name outside the listing.
			return ListPage{}, fmt.Errorf("%s: list %q after %q returned %q", b.info.Name, prefix, startAfter, o.Name)
		}
	}
	page := ListPage{Objects: objs}
	if len(objs) > limit {
		page.Objects, more = objs[:limit], true
	}
	if more && len(page.Objects) > 0 {
		page.Next = page.Objects[len(page.Objects)-1].Name
	}
	return page, nil
}

func byName(a, b ObjectInfo) int { return strings.Compare(a.Name, b.Name) }

func cutLast(s string) (before, after string, found bool) {
	if i := strings.LastIndex(s, "/"); i >= 0 {
		return s[:i], s[i+1:], true
	}
	return "", s, false
}

// Delete implements Store.
func (b *Bucket) Delete(ctx context.Context, name string) error {
	return b.DeleteBatch(ctx, []string{name})
}

// DeleteBatch implements Store.
func (b *Bucket) DeleteBatch(ctx context.Context, names []string) error {
	for _, n := range names {
		if err := ValidateName(n); err != nil {
			return err
		}
	}
	if err := b.live(ctx); err != nil {
		return err
	}
	if len(names) == 0 {
		return nil
	}
	err := b.d.Delete(ctx, names)
	if err != nil && b.d.Classify(err) == ErrNotFound {
		return nil
	}
	what := names[0]
	if len(names) > 1 {
		what = fmt.Sprintf("(%d names from %s)", len(names), names[0])
	}
	return b.fail("delete", what, err)
}

// Close implements Store: the first call closes the driver.
func (b *Bucket) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	return b.d.Close()
}
