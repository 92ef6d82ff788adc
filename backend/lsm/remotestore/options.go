package remotestore

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/statedhq/stated/tiered"
)

// Defaults of Options.
const (
	// DefaultSpoolMemoryBytes keeps ref markers (empty) and small SSTs out
	// of the file system while bounding the memory of one write.
	DefaultSpoolMemoryBytes = 1 << 20
	// DefaultCallTimeout bounds a call Pebble makes without a context; an
	// upload of one SST of DefaultTargetFileSize fits in it many times.
	DefaultCallTimeout = 5 * time.Minute
)

// Sentinel errors (wrapped with what was wrong).
var (
	// ErrInvalidOptions: Options.Validate refused the options.
	ErrInvalidOptions = errors.New("invalid remotestore options")
	// ErrUnknownLocator: the factory has no store for the locator.
	ErrUnknownLocator = errors.New("unknown locator")
	// ErrShortObject: a read asked for bytes past the object's end.
	ErrShortObject = errors.New("read past the end of the object")
	// ErrWriterClosed: Write after Close, or Close twice.
	ErrWriterClosed = errors.New("writer already closed")
)

// Options configure a Storage.
type Options struct {
	// Store holds the objects. Required. The caller owns it: Storage.Close
	// does not close it.
	Store tiered.Store
	// SpoolDir holds the temporary files of writes larger than
	// SpoolMemoryBytes. Default os.TempDir().
	SpoolDir string
	// SpoolMemoryBytes is how much of one write is buffered in memory
	// before it spills to a file in SpoolDir. 0 means the default,
	// DefaultSpoolMemoryBytes; it must not be negative.
	SpoolMemoryBytes int64
	// CallTimeout bounds each call that Pebble makes without a context.
	// Default DefaultCallTimeout; it must not be negative.
	CallTimeout time.Duration
	// KnownSize, if set, gives the size of an object the caller already
	// knows (objects never change once written), so that ReadObject need
	// not ask the store: a restore by reference lists the sizes of all
	// its objects once, and Pebble opens each of them right after.
	KnownSize func(objName string) (int64, bool)
}

// EnsureDefaults fills zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	if o.SpoolDir == "" {
		o.SpoolDir = os.TempDir()
	}
	if o.SpoolMemoryBytes == 0 {
		o.SpoolMemoryBytes = DefaultSpoolMemoryBytes
	}
	if o.CallTimeout == 0 {
		o.CallTimeout = DefaultCallTimeout
	}
}

// Validate reports every problem of o at once. Call EnsureDefaults first.
func (o *Options) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("remotestore: %w: "+format, append([]any{ErrInvalidOptions}, args...)...))
	}
	if o.Store == nil {
		bad("no store (Options.Store)")
	}
	if o.SpoolMemoryBytes < 0 {
		bad("spool memory size %d is negative", o.SpoolMemoryBytes)
	}
	if o.CallTimeout < 0 {
		bad("call timeout %v is negative", o.CallTimeout)
	}
	if o.SpoolDir != "" {
		if fi, err := os.Stat(o.SpoolDir); err != nil {
			bad("spool directory %q: %v", o.SpoolDir, err)
		} else if !fi.IsDir() {
			bad("spool directory %q is not a directory", o.SpoolDir)
		}
	}
	return errors.Join(errs...)
}
