package dstl

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/statedhq/stated/tiered"
)

// Defaults of Options (Flink's DSTL defaults where Flink has one).
const (
	DefaultPrefix              = "_changelog/shared"
	DefaultFlushSize           = 10 << 20
	DefaultPreemptiveFlushSize = 5 << 20
	DefaultFlushDelay          = 10 * time.Millisecond
	// DefaultObjectStoreFlushDelay is FlushDelayFor's delay for a store
	// that does not append (S3 and every other object store), where each
	// flush is a billed, rate-limited PUT of its own.
	DefaultObjectStoreFlushDelay = time.Second
	DefaultMaxBytesInFlight      = 100 << 20
	DefaultUploadConcurrency     = 5
	DefaultMaxAttempts           = 5
	DefaultRetryDelay            = 10 * time.Millisecond
	DefaultMaxRetryDelay         = time.Second
	DefaultUploadTimeout         = time.Second
)

// Options configure a Writer. The zero value of every field means its
// default; EnsureDefaults fills them in and Validate reports every problem
// at once. NewWriter calls both.
type Options struct {
	// Prefix is the object-name prefix of every segment. Default
	// "_changelog/shared" (daemon-level: segments are shared across jobs).
	Prefix string
	// RunID makes segment names unique across Writers and daemon runs. It
	// must be a single clean name segment. Default: 128 random bits in hex.
	RunID string
	// FlushSize: the buffered changes of all writers are cut into a
	// segment when their raw size reaches it. Default 10 MiB.
	FlushSize int
	// PreemptiveFlushSize: the buffer is cut at once when one writer's
	// buffered changes reach it, so that writer's next Persist has little
	// left to upload. Default 5 MiB; at most FlushSize.
	PreemptiveFlushSize int
	// FlushDelay: the buffer is cut at the latest this long after its first
	// change arrived. Default 10 ms; FlushDelayFor gives the delay that
	// suits a store (1 s on an object store), which the daemon uses.
	FlushDelay time.Duration
	// MaxBytesInFlight caps the changes held in memory, buffered or being
	// uploaded, counted as their bytes plus 16 per change (which covers a
	// record's framing; a segment adds about 30 bytes plus the writer id per
	// writer and block on top). An Append that would pass it blocks until
	// uploads free room or its ctx ends. Default 100 MiB; at least
	// FlushSize.
	MaxBytesInFlight int64
	// BlockSize is the raw size at which a writer's block is cut. Default
	// 256 KiB.
	BlockSize int
	// DisableCompression stores blocks without zstd. Default false.
	DisableCompression bool
	// UploadConcurrency bounds the segments being uploaded at once. While
	// all slots are busy the buffer keeps filling (bigger segments) until
	// MaxBytesInFlight back-pressures. Default 5.
	UploadConcurrency int
	// MaxAttempts bounds the Put attempts of one segment, speculative ones
	// included. Default 5.
	MaxAttempts int
	// RetryDelay is the pause before the second attempt after a failure; it
	// doubles per failure up to MaxRetryDelay, with jitter. Defaults 10 ms
	// and 1 s.
	RetryDelay, MaxRetryDelay time.Duration
	// UploadTimeout: an attempt still running after it gets a speculative
	// twin under a new name; the first to succeed wins and the others are
	// cancelled and deleted. Default 1 s.
	UploadTimeout time.Duration
	// Now is the clock (tests). Default time.Now.
	Now func() time.Time
}

// EnsureDefaults fills every zero field with its default.
func (o *Options) EnsureDefaults() {
	orDefault(&o.Prefix, DefaultPrefix)
	if o.RunID == "" {
		var b [16]byte
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
		o.RunID = hex.EncodeToString(b[:])
	}
	orDefault(&o.FlushSize, DefaultFlushSize)
	orDefault(&o.PreemptiveFlushSize, min(DefaultPreemptiveFlushSize, o.FlushSize))
	orDefault(&o.FlushDelay, DefaultFlushDelay)
	orDefault(&o.MaxBytesInFlight, max(DefaultMaxBytesInFlight, int64(o.FlushSize)))
	orDefault(&o.BlockSize, DefaultBlockSize)
	orDefault(&o.UploadConcurrency, DefaultUploadConcurrency)
	orDefault(&o.MaxAttempts, DefaultMaxAttempts)
	orDefault(&o.RetryDelay, DefaultRetryDelay)
	orDefault(&o.MaxRetryDelay, max(DefaultMaxRetryDelay, o.RetryDelay))
	orDefault(&o.UploadTimeout, DefaultUploadTimeout)
	if o.Now == nil {
		o.Now = time.Now
	}
}

// FlushDelayFor is the flush delay that suits the log store ls: on a
// store that appends (a local directory: tiered.Appender), a flush costs
// a shared fdatasync and no request, so DefaultFlushDelay keeps changes
// durable within milliseconds; on any other tiered store (S3 and the
// like) every flush is a PUT, billed and throttled per request, so the
// Writer gathers the changes of all instances for
// DefaultObjectStoreFlushDelay and an upload costs at most one request a
// second between checkpoints (a Persist still cuts at once, so a
// checkpoint does not wait for the delay). A LogStore that is not a
// TieredLogStore gets DefaultFlushDelay.
func FlushDelayFor(ls LogStore) time.Duration {
	t, ok := ls.(TieredLogStore)
	if !ok {
		return DefaultFlushDelay
	}
	if _, ok := tiered.AsAppender(t.Store); ok {
		return DefaultFlushDelay
	}
	return DefaultObjectStoreFlushDelay
}

// orDefault sets *v to d when it is zero.
func orDefault[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}

// Validate reports every invalid field at once (call EnsureDefaults first).
func (o *Options) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s", ErrInvalidArgument, fmt.Sprintf(format, args...)))
	}
	if err := tiered.ValidateName(o.Prefix); err != nil {
		bad("prefix: %v", err)
	}
	if o.RunID == "" || strings.Contains(o.RunID, "/") || tiered.ValidateName(o.RunID) != nil {
		bad("run id %q must be one clean name segment", o.RunID)
	}
	if o.FlushSize <= 0 {
		bad("flush size %d must be positive", o.FlushSize)
	}
	if o.PreemptiveFlushSize <= 0 || o.PreemptiveFlushSize > o.FlushSize {
		bad("pre-emptive flush size %d must be in (0, flush size %d]", o.PreemptiveFlushSize, o.FlushSize)
	}
	if o.FlushDelay < 0 {
		bad("flush delay %v must not be negative", o.FlushDelay)
	}
	if o.MaxBytesInFlight < int64(o.FlushSize) {
		bad("max bytes in flight %d must be at least the flush size %d", o.MaxBytesInFlight, o.FlushSize)
	}
	if o.BlockSize <= 0 || o.BlockSize > MaxBlockRawSize/2 {
		bad("block size %d must be in (0, %d]", o.BlockSize, MaxBlockRawSize/2)
	}
	if o.UploadConcurrency <= 0 {
		bad("upload concurrency %d must be positive", o.UploadConcurrency)
	}
	if o.MaxAttempts <= 0 {
		bad("max attempts %d must be positive", o.MaxAttempts)
	}
	if o.RetryDelay < 0 || o.MaxRetryDelay < o.RetryDelay {
		bad("retry delays %v..%v must be non-negative and ascending", o.RetryDelay, o.MaxRetryDelay)
	}
	if o.UploadTimeout <= 0 {
		bad("upload timeout %v must be positive", o.UploadTimeout)
	}
	return errors.Join(errs...)
}
