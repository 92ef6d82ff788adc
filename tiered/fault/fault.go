package fault

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/statedhq/stated/tiered"
)

// ErrInjected is wrapped by every failure the wrapper makes up.
var ErrInjected = errors.New("fault: injected failure")

// Config says which faults to inject. The zero Config injects nothing.
type Config struct {
	// Seed seeds the generator every fault is drawn from.
	Seed uint64
	// Ops restricts the faults to these operations. Default
	// tiered.AllOps.
	Ops tiered.Ops
	// ErrorRate is the probability that an operation fails before it
	// reaches the store.
	ErrorRate float64
	// LostReplyRate is the probability that an operation that succeeded
	// reports an error anyway.
	LostReplyRate float64
	// Latency is added before every operation; LatencyJitter adds a
	// uniform random extra in [0, LatencyJitter).
	Latency, LatencyJitter time.Duration
	// TruncateRate is the probability that a reader from Get or GetRange
	// ends early, at a uniformly chosen byte of what it would return.
	TruncateRate float64
	// SilentTruncation makes truncated reads end with io.EOF instead of an
	// error.
	SilentTruncation bool
	// PartialWriteRate is the probability that a Put or PutIfAbsent sees
	// its input break part way (the store must then store nothing new).
	PartialWriteRate float64
	// FailAfterBytes, when > 0, is the number of bytes (read and written
	// together) that pass before every further read and write fails.
	FailAfterBytes int64
}

// Stats counts what the wrapper did.
type Stats struct {
	Ops, Errors, LostReplies, Truncations, PartialWrites, BudgetFailures int64
	// Bytes is the number of bytes read and written through the wrapper.
	Bytes int64
}

// Store wraps a tiered.Store with injected faults.
type Store struct {
	base tiered.Store

	mu  sync.Mutex
	cfg Config
	rng *rand.Rand

	bytes                                                       atomic.Int64
	ops, errs, lost, truncations, partialWrites, budgetFailures atomic.Int64
}

var _ tiered.Store = (*Store)(nil)

// New wraps base. Close closes base.
func New(base tiered.Store, cfg Config) *Store {
	s := &Store{base: base}
	s.SetConfig(cfg)
	return s
}

// SetConfig replaces the fault configuration and reseeds the generator,
// e.g. to heal the store after a faulty phase of a test. The byte budget
// counts from zero again.
func (s *Store) SetConfig(cfg Config) {
	if cfg.Ops == 0 {
		cfg.Ops = tiered.AllOps
	}
	s.mu.Lock()
	s.cfg = cfg
	s.rng = rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5eed))
	s.mu.Unlock()
	s.bytes.Store(0)
}

// Stats returns what the wrapper injected so far.
func (s *Store) Stats() Stats {
	return Stats{
		Ops: s.ops.Load(), Errors: s.errs.Load(), LostReplies: s.lost.Load(),
		Truncations: s.truncations.Load(), PartialWrites: s.partialWrites.Load(),
		BudgetFailures: s.budgetFailures.Load(), Bytes: s.bytes.Load(),
	}
}

// Base is the wrapped store.
func (s *Store) Base() tiered.Store { return s.base }

// plan is what the generator decided for one operation. Every operation
// draws the same number of values, so one decision does not shift the
// next operation's.
type plan struct {
	fail, lostReply, truncate, partialWrite bool
	cut                                     float64 // where a truncation or partial write happens, as a fraction
	delay                                   time.Duration
	silent                                  bool
	budget                                  int64
}

func (s *Store) plan(op tiered.Op) plan {
	s.ops.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.cfg
	r := s.rng
	u := [6]float64{r.Float64(), r.Float64(), r.Float64(), r.Float64(), r.Float64(), r.Float64()}
	p := plan{delay: c.Latency, silent: c.SilentTruncation, budget: c.FailAfterBytes, cut: u[4]}
	if c.LatencyJitter > 0 {
		p.delay += time.Duration(u[5] * float64(c.LatencyJitter))
	}
	if !c.Ops.Has(op) {
		return p
	}
	p.fail = u[0] < c.ErrorRate
	p.lostReply = u[1] < c.LostReplyRate
	p.truncate = u[2] < c.TruncateRate
	p.partialWrite = u[3] < c.PartialWriteRate
	return p
}

// begin waits the planned latency and injects an up-front failure.
func (s *Store) begin(ctx context.Context, op tiered.Op, name string) (plan, error) {
	p := s.plan(op)
	if p.delay > 0 {
		t := time.NewTimer(p.delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return p, ctx.Err()
		case <-t.C:
		}
	}
	if p.fail {
		s.errs.Add(1)
		return p, fmt.Errorf("fault: %s %s: %w", op, name, ErrInjected)
	}
	if p.budget > 0 && s.bytes.Load() >= p.budget && tiered.OpSet(tiered.OpPut, tiered.OpPutIfAbsent, tiered.OpGet, tiered.OpGetRange).Has(op) {
		s.budgetFailures.Add(1)
		return p, fmt.Errorf("fault: %s %s: byte budget of %d spent: %w", op, name, p.budget, ErrInjected)
	}
	return p, nil
}

// end turns a success into a lost reply when planned.
func (s *Store) end(p plan, op tiered.Op, name string, err error) error {
	if err == nil && p.lostReply {
		s.lost.Add(1)
		return fmt.Errorf("fault: %s %s: reply lost after success: %w", op, name, ErrInjected)
	}
	return err
}

// Put implements tiered.Store.
func (s *Store) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	return s.put(ctx, tiered.OpPut, name, r, size)
}

// PutIfAbsent implements tiered.Store.
func (s *Store) PutIfAbsent(ctx context.Context, name string, r io.Reader, size int64) error {
	return s.put(ctx, tiered.OpPutIfAbsent, name, r, size)
}

func (s *Store) put(ctx context.Context, op tiered.Op, name string, r io.Reader, size int64) error {
	p, err := s.begin(ctx, op, name)
	if err != nil {
		return err
	}
	cr := &countingReader{s: s, r: r, budget: p.budget, name: name, limit: -1}
	if p.partialWrite {
		s.partialWrites.Add(1)
		cr.limit = int64(p.cut * float64(size))
	}
	if op == tiered.OpPut {
		err = s.base.Put(ctx, name, cr, size)
	} else {
		err = s.base.PutIfAbsent(ctx, name, cr, size)
	}
	return s.end(p, op, name, err)
}

// countingReader counts bytes against the budget and breaks at limit.
type countingReader struct {
	s      *Store
	r      io.Reader
	name   string
	n      int64
	limit  int64 // < 0: none
	budget int64
	silent bool // at limit: io.EOF instead of an error
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.limit >= 0 && c.n >= c.limit {
		if c.silent {
			return 0, io.EOF
		}
		return 0, fmt.Errorf("fault: %s: stream broken after %d bytes: %w", c.name, c.n, ErrInjected)
	}
	if c.budget > 0 && c.s.bytes.Load() >= c.budget {
		c.s.budgetFailures.Add(1)
		return 0, fmt.Errorf("fault: %s: byte budget of %d spent: %w", c.name, c.budget, ErrInjected)
	}
	if c.limit >= 0 && int64(len(p)) > c.limit-c.n {
		p = p[:c.limit-c.n]
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	c.s.bytes.Add(int64(n))
	return n, err
}

type readCloser struct {
	io.Reader
	io.Closer
}

func (s *Store) wrapReader(p plan, name string, rc io.ReadCloser, size int64) io.ReadCloser {
	cr := &countingReader{s: s, r: rc, budget: p.budget, name: name, limit: -1, silent: p.silent}
	if p.truncate && size > 0 {
		s.truncations.Add(1)
		cr.limit = int64(p.cut * float64(size)) // < size, since cut < 1
	}
	return readCloser{cr, rc}
}

// Get implements tiered.Store.
func (s *Store) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	return s.get(ctx, tiered.OpGet, name, 0, -1)
}

// GetRange implements tiered.Store.
func (s *Store) GetRange(ctx context.Context, name string, offset, length int64) (io.ReadCloser, error) {
	return s.get(ctx, tiered.OpGetRange, name, offset, length)
}

func (s *Store) get(ctx context.Context, op tiered.Op, name string, offset, length int64) (io.ReadCloser, error) {
	p, err := s.begin(ctx, op, name)
	if err != nil {
		return nil, err
	}
	var rc io.ReadCloser
	if op == tiered.OpGet {
		rc, err = s.base.Get(ctx, name)
	} else {
		rc, err = s.base.GetRange(ctx, name, offset, length)
	}
	if err != nil {
		return nil, err
	}
	if err := s.end(p, op, name, nil); err != nil {
		rc.Close()
		return nil, err
	}
	var size int64
	if p.truncate {
		// Truncation needs to know how much there is to cut.
		info, err := s.base.Stat(ctx, name)
		if err != nil {
			rc.Close()
			return nil, err
		}
		size = max(info.Size-offset, 0)
		if length >= 0 {
			size = min(size, length)
		}
	}
	return s.wrapReader(p, name, rc, size), nil
}

// Stat implements tiered.Store.
func (s *Store) Stat(ctx context.Context, name string) (tiered.ObjectInfo, error) {
	p, err := s.begin(ctx, tiered.OpStat, name)
	if err != nil {
		return tiered.ObjectInfo{}, err
	}
	info, err := s.base.Stat(ctx, name)
	if err = s.end(p, tiered.OpStat, name, err); err != nil {
		return tiered.ObjectInfo{}, err
	}
	return info, nil
}

// List implements tiered.Store.
func (s *Store) List(ctx context.Context, prefix, startAfter string, limit int) (tiered.ListPage, error) {
	p, err := s.begin(ctx, tiered.OpList, prefix)
	if err != nil {
		return tiered.ListPage{}, err
	}
	page, err := s.base.List(ctx, prefix, startAfter, limit)
	if err = s.end(p, tiered.OpList, prefix, err); err != nil {
		return tiered.ListPage{}, err
	}
	return page, nil
}

// Delete implements tiered.Store.
func (s *Store) Delete(ctx context.Context, name string) error {
	p, err := s.begin(ctx, tiered.OpDelete, name)
	if err != nil {
		return err
	}
	return s.end(p, tiered.OpDelete, name, s.base.Delete(ctx, name))
}

// DeleteBatch implements tiered.Store. A planned failure deletes a random
// prefix of the batch first, the partial failure the contract allows.
func (s *Store) DeleteBatch(ctx context.Context, names []string) error {
	p := s.plan(tiered.OpDeleteBatch)
	if p.delay > 0 {
		t := time.NewTimer(p.delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	if p.fail && len(names) == 0 {
		s.errs.Add(1)
		return fmt.Errorf("fault: delete_batch of nothing: %w", ErrInjected)
	}
	if p.fail {
		s.errs.Add(1)
		done := int(p.cut * float64(len(names)))
		if err := s.base.DeleteBatch(ctx, names[:done]); err != nil {
			return err
		}
		return fmt.Errorf("fault: delete_batch: %d of %d deleted, not deleted from %q on: %w", done, len(names), names[done], ErrInjected)
	}
	return s.end(p, tiered.OpDeleteBatch, fmt.Sprintf("(%d objects)", len(names)), s.base.DeleteBatch(ctx, names))
}

// Close implements tiered.Store; it closes the wrapped store.
func (s *Store) Close() error { return s.base.Close() }
