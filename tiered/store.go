package tiered

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"
)

// Sentinel errors every Store returns (wrapped with the object name).
var (
	// ErrNotFound: the object does not exist.
	ErrNotFound = errors.New("object not found")
	// ErrExists: PutIfAbsent found the object already there.
	ErrExists = errors.New("object already exists")
	// ErrInvalidName: the object name is not a clean relative name.
	ErrInvalidName = errors.New("invalid object name")
	// ErrInvalidRange: a ranged read starts past the end or has a negative length.
	ErrInvalidRange = errors.New("invalid range")
)

// ObjectInfo describes a stored object.
type ObjectInfo struct {
	Name    string
	Size    int64
	ModTime time.Time
}

// ListPage is one page of a listing.
type ListPage struct {
	// Objects are sorted by name.
	Objects []ObjectInfo
	// Next is the name to pass as StartAfter for the next page; empty when
	// the listing is complete.
	Next string
}

// Store is a flat namespace of immutable objects: a local directory, an S3
// bucket prefix, or a cache over one of them.
//
// Contract (tiered/storetest checks it for every implementation):
//   - Names are clean relative slash-separated paths (ValidateName); others
//     fail with ErrInvalidName before any I/O.
//   - Put is atomic and idempotent: readers see the whole old object or the
//     whole new one, never a partial one; putting the same bytes again is a
//     no-op as far as readers can tell. A failed Put leaves either nothing
//     or the previous object under the name (it may leave invisible
//     temporary data that the store cleans up itself).
//   - PutIfAbsent succeeds for exactly one of concurrent callers; the others
//     get ErrExists.
//   - Get, GetRange and Stat of a missing object return an error wrapping
//     ErrNotFound. Delete and DeleteBatch of missing objects succeed.
//   - DeleteBatch may delete a part and fail: the error names what was not
//     deleted, and calling it again finishes the job.
//   - All methods are safe for concurrent use and honour ctx cancellation.
//
// Optional interfaces, reached by type assertion (through the helper
// named, which sees through WithPrefix views):
//   - LocalCopies (AsLocalCopies): the store keeps checksummed local
//     copies in files that a caller may hard-link (tiered/cache).
//   - Appender (AsAppender, which also sees through Unwrappers): small
//     new objects appended into a log file the store keeps, for a Put
//     durable with one data sync (localfs; used by the changelog's
//     segments).
//
// Implementations: a Bucket over a Driver (localfs, memstore, s3store,
// cache), or a wrapper over another Store (WithPrefix, fault, metered).
type Store interface {
	// Put stores size bytes read from r under name.
	Put(ctx context.Context, name string, r io.Reader, size int64) error
	// PutIfAbsent is Put that fails with ErrExists if the object exists.
	PutIfAbsent(ctx context.Context, name string, r io.Reader, size int64) error
	// Get opens the whole object. The caller closes the reader.
	Get(ctx context.Context, name string) (io.ReadCloser, error)
	// GetRange opens length bytes from offset (length < 0: to the end). A
	// range that ends past the object's end is cut at the end; one that
	// starts past it is ErrInvalidRange.
	GetRange(ctx context.Context, name string, offset, length int64) (io.ReadCloser, error)
	// Stat describes the object.
	Stat(ctx context.Context, name string) (ObjectInfo, error)
	// List returns up to limit (<= 0: an implementation-chosen page size)
	// objects whose names start with prefix and sort after startAfter.
	List(ctx context.Context, prefix, startAfter string, limit int) (ListPage, error)
	// Delete removes an object; a missing object is success.
	Delete(ctx context.Context, name string) error
	// DeleteBatch removes many objects; missing ones are success.
	DeleteBatch(ctx context.Context, names []string) error
	// Close releases the store's resources; it is idempotent.
	Close() error
}

// ReservedDir is the first segment no object name may have: a directory
// store (localfs) keeps its temporary files there. Every store refuses it,
// so a name one store accepts every store accepts.
const ReservedDir = ".tmp"

// PackDir is the other name no object may have or be under: localfs keeps
// its pack files there (objects appended into shared log files, see
// Appender).
const PackDir = ".packs"

// ValidateName checks that name is a clean relative object name: not empty,
// not absolute, no "." or ".." segment, no empty segment, no backslash or
// NUL, at most 1024 bytes, not ReservedDir or PackDir or under them. It is the one rule
// set of every store (Bucket applies it before any I/O).
func ValidateName(name string) error {
	bad := name == "" || len(name) > 1024 || strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/") ||
		strings.ContainsAny(name, "\\\x00") || path.Clean(name) != name ||
		name == ReservedDir || strings.HasPrefix(name, ReservedDir+"/") ||
		name == PackDir || strings.HasPrefix(name, PackDir+"/")
	if !bad {
		for _, seg := range strings.Split(name, "/") {
			if seg == "." || seg == ".." || seg == "" {
				bad = true
				break
			}
		}
	}
	if bad {
		return fmt.Errorf("%w: %q", ErrInvalidName, name)
	}
	return nil
}

// Walk calls fn for every object under prefix, page by page, in name order.
func Walk(ctx context.Context, s Store, prefix string, fn func(ObjectInfo) error) error {
	after := ""
	for {
		page, err := s.List(ctx, prefix, after, 0)
		if err != nil {
			return err
		}
		for _, o := range page.Objects {
			if err := fn(o); err != nil {
				return err
			}
		}
		if page.Next == "" {
			return nil
		}
		after = page.Next
	}
}

// ReadAll reads a whole object into memory. maxSize (> 0) bounds what it is
// willing to read, so a corrupt size cannot exhaust memory.
func ReadAll(ctx context.Context, s Store, name string, maxSize int64) ([]byte, error) {
	rc, err := s.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var r io.Reader = rc
	if maxSize > 0 {
		r = io.LimitReader(rc, maxSize+1)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("tiered: read %s: %w", name, err)
	}
	if maxSize > 0 && int64(len(b)) > maxSize {
		return nil, fmt.Errorf("tiered: object %s is larger than the %d-byte limit", name, maxSize)
	}
	return b, nil
}

// PutBytes stores b under name.
func PutBytes(ctx context.Context, s Store, name string, b []byte) error {
	return s.Put(ctx, name, bytes.NewReader(b), int64(len(b)))
}
