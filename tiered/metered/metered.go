package metered

import (
	"context"
	"errors"
	"io"
	"sync/atomic"

	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/cost"
)

// Counts is a snapshot of a Store's counters.
type Counts struct {
	// Calls and Errors per Op. A not-found answer of Get, GetRange or Stat,
	// and ErrExists of PutIfAbsent, are answers, not errors.
	Calls, Errors [tiered.NumOps]uint64
	// Deleted counts the names Delete and DeleteBatch were given.
	Deleted uint64
	// BytesUp were read from the readers given to Put and PutIfAbsent;
	// BytesDown were read from the readers Get and GetRange returned.
	BytesUp, BytesDown uint64
}

// Store is a tiered.Store that counts what it serves.
type Store struct {
	tiered.Store
	calls, errs       [tiered.NumOps]atomic.Uint64
	deleted, up, down atomic.Uint64
}

var (
	_ tiered.Store = (*Store)(nil)
	_ cost.Source  = (*Store)(nil)
)

// New wraps s.
func New(s tiered.Store) *Store { return &Store{Store: s} }

// Unwrap is the store s counts for (tiered.Unwrapper): tiered.AsAppender
// looks through it to see whether that store appends.
func (s *Store) Unwrap() tiered.Store { return s.Store }

// Append implements tiered.Appender for a store that appends (see
// tiered.AsAppender), and puts otherwise. An append is counted as a Put:
// it writes an object.
func (s *Store) Append(ctx context.Context, name string, data []byte) error {
	err := tiered.AppendOrPut(ctx, s.Store, name, data)
	if err == nil {
		s.up.Add(uint64(len(data)))
	}
	s.done(tiered.OpPut, err)
	return err
}

// Requests implements cost.Source. When the store underneath counts its
// own requests (s3store: every HTTP attempt, multipart parts and retries
// included), they are its counts; otherwise they are estimated from the
// calls, one request per call of the kind it would be on S3 (cost.OpKind).
func (s *Store) Requests() cost.Counts {
	if src, ok := cost.SourceOf(s.Store); ok {
		return src.Requests()
	}
	var c cost.Counts
	for op := range tiered.NumOps {
		c.Requests[cost.OpKind(op)] += s.calls[op].Load()
	}
	return c
}

// RequestsMeasured reports whether Requests are counted on the wire (the
// store underneath counts them) rather than estimated from calls.
func (s *Store) RequestsMeasured() bool {
	_, ok := cost.SourceOf(s.Store)
	return ok
}

// Counts returns the counters now.
func (s *Store) Counts() Counts {
	var c Counts
	for i := range tiered.NumOps {
		c.Calls[i], c.Errors[i] = s.calls[i].Load(), s.errs[i].Load()
	}
	c.Deleted, c.BytesUp, c.BytesDown = s.deleted.Load(), s.up.Load(), s.down.Load()
	return c
}

func (s *Store) done(op tiered.Op, err error) {
	s.calls[op].Add(1)
	if err != nil && !tiered.IsNotFound(err) && !errors.Is(err, tiered.ErrExists) {
		s.errs[op].Add(1)
	}
}

// Put implements tiered.Store.
func (s *Store) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	err := s.Store.Put(ctx, name, &counter{r: r, n: &s.up}, size)
	s.done(tiered.OpPut, err)
	return err
}

// PutIfAbsent implements tiered.Store.
func (s *Store) PutIfAbsent(ctx context.Context, name string, r io.Reader, size int64) error {
	err := s.Store.PutIfAbsent(ctx, name, &counter{r: r, n: &s.up}, size)
	s.done(tiered.OpPutIfAbsent, err)
	return err
}

// Get implements tiered.Store.
func (s *Store) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	rc, err := s.Store.Get(ctx, name)
	s.done(tiered.OpGet, err)
	if err != nil {
		return nil, err
	}
	return &readCounter{counter: counter{r: rc, n: &s.down}, c: rc}, nil
}

// GetRange implements tiered.Store.
func (s *Store) GetRange(ctx context.Context, name string, offset, length int64) (io.ReadCloser, error) {
	rc, err := s.Store.GetRange(ctx, name, offset, length)
	s.done(tiered.OpGetRange, err)
	if err != nil {
		return nil, err
	}
	return &readCounter{counter: counter{r: rc, n: &s.down}, c: rc}, nil
}

// Stat implements tiered.Store.
func (s *Store) Stat(ctx context.Context, name string) (tiered.ObjectInfo, error) {
	o, err := s.Store.Stat(ctx, name)
	s.done(tiered.OpStat, err)
	return o, err
}

// List implements tiered.Store.
func (s *Store) List(ctx context.Context, prefix, startAfter string, limit int) (tiered.ListPage, error) {
	p, err := s.Store.List(ctx, prefix, startAfter, limit)
	s.done(tiered.OpList, err)
	return p, err
}

// Delete implements tiered.Store.
func (s *Store) Delete(ctx context.Context, name string) error {
	err := s.Store.Delete(ctx, name)
	s.deleted.Add(1)
	s.done(tiered.OpDelete, err)
	return err
}

// DeleteBatch implements tiered.Store.
func (s *Store) DeleteBatch(ctx context.Context, names []string) error {
	err := s.Store.DeleteBatch(ctx, names)
	s.deleted.Add(uint64(len(names)))
	s.done(tiered.OpDeleteBatch, err)
	return err
}

// counter counts the bytes read through it into n.
type counter struct {
	r io.Reader
	n *atomic.Uint64
}

func (c *counter) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	c.n.Add(uint64(k))
	return k, err
}

type readCounter struct {
	counter
	c io.Closer
}

func (r *readCounter) Close() error { return r.c.Close() }
