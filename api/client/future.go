package client

import (
	"context"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/statedhq/stated/api/internal/wire"
	"github.com/statedhq/stated/backend"
)

// Future is the pending result of one operation. The zero Future is not
// valid; every operation returns a usable one (possibly already failed).
// Futures are small values: copy them freely.
type Future[T any] struct {
	b   *batch
	i   int
	dec func(*wire.Result) (T, error)
	err error     // failed before it was sent
	in  *Instance // for callbacks of a future that failed early
	// after is the batch of the operations issued before this one failed
	// early (nil: none pending): its callback runs after theirs.
	after *batch
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func failed[T any](in *Instance, err error) Future[T] {
	return Future[T]{err: err, in: in, after: in.latest()}
}

// Done is closed when the result is available.
func (f Future[T]) Done() <-chan struct{} {
	if f.b == nil {
		return closedChan
	}
	return f.b.done
}

// Wait sends the operation's batch if it has not gone out yet, and waits
// for the result. It is the blocking form of every operation.
func (f Future[T]) Wait(ctx context.Context) (T, error) {
	if f.b == nil {
		var zero T
		return zero, f.err
	}
	f.b.in.flushBatch(f.b)
	select {
	case <-f.b.done:
	case <-ctx.Done():
		var zero T
		return zero, status.FromContextError(ctx.Err()).Err()
	}
	return f.result()
}

// result decodes the completed result.
func (f Future[T]) result() (T, error) {
	if f.b == nil {
		var zero T
		return zero, f.err
	}
	if f.b.err != nil {
		var zero T
		return zero, f.b.err
	}
	var r wire.Result
	if err := f.b.result(f.i, &r); err != nil {
		var zero T
		return zero, err
	}
	return f.dec(&r)
}

// Then calls fn with the result once it is available. Callbacks of one
// instance run one at a time, in the order their operations were issued,
// on a goroutine of the instance (not the caller's); they may issue more
// operations but should not wait on futures of the same instance for long.
// Then does not send the batch: call Flush, or rely on FlushDelay.
func (f Future[T]) Then(fn func(T, error)) {
	if f.b == nil {
		// Failed before it was sent: still after the callbacks of what was
		// issued before it.
		if f.after != nil {
			f.after.then(func() { fn(f.result()) })
		} else {
			f.in.cb.push(func() { fn(f.result()) })
		}
		return
	}
	f.b.then(func() { fn(f.result()) })
}

// Value is the result of Get and MapGet.
type Value struct {
	Data  []byte
	Found bool
}

// MapPage is one page of MapIterate: More says entries remain after the
// last one (pass its user key as after to continue).
type MapPage struct {
	Entries []backend.MapEntry
	More    bool
}

// Aggregate is the result of AggregateGet.
type Aggregate struct {
	Value backend.Number
	Found bool
}

func resultErr(r *wire.Result) error {
	if r.Code == 0 {
		return nil
	}
	return status.Error(codes.Code(r.Code), r.Error)
}

// The decoders hand out slices of the result; several futures of a batch
// share its response buffer, but each result's slices are its own.

func decNone(r *wire.Result) (struct{}, error) { return struct{}{}, resultErr(r) }

func decValue(r *wire.Result) (Value, error) {
	if err := resultErr(r); err != nil {
		return Value{}, err
	}
	return Value{Data: r.Value, Found: r.Found}, nil
}

func decList(r *wire.Result) ([][]byte, error) {
	if err := resultErr(r); err != nil {
		return nil, err
	}
	return r.Values, nil
}

func decBool(r *wire.Result) (bool, error) {
	if err := resultErr(r); err != nil {
		return false, err
	}
	return r.Found, nil
}

func decPage(r *wire.Result) (MapPage, error) {
	if err := resultErr(r); err != nil {
		return MapPage{}, err
	}
	return MapPage{More: r.More, Entries: r.Entries}, nil
}

func decAggregate(r *wire.Result) (Aggregate, error) {
	if err := resultErr(r); err != nil {
		return Aggregate{}, err
	}
	if !r.Found {
		return Aggregate{}, nil
	}
	return Aggregate{Found: true, Value: r.Number}, nil
}

func decTimers(r *wire.Result) ([]backend.Timer, error) {
	if err := resultErr(r); err != nil {
		return nil, err
	}
	return r.Timers, nil
}

// runner runs callbacks one at a time in order. Its goroutine starts with
// the first callback and ends when the instance is closed.
type runner struct {
	mu      sync.Mutex
	cond    *sync.Cond
	q       []func()
	stop    bool
	started bool
	done    chan struct{}
}

func newRunner() *runner {
	r := &runner{done: make(chan struct{})}
	r.cond = sync.NewCond(&r.mu)
	return r
}

func (r *runner) push(fns ...func()) {
	r.mu.Lock()
	if r.stop {
		// Closed: nothing else runs any more, so order is kept by running
		// them here.
		r.mu.Unlock()
		for _, fn := range fns {
			fn()
		}
		return
	}
	if !r.started {
		r.started = true
		go r.loop()
	}
	r.q = append(r.q, fns...)
	r.mu.Unlock()
	r.cond.Signal()
}

func (r *runner) loop() {
	defer close(r.done)
	for {
		r.mu.Lock()
		for len(r.q) == 0 && !r.stop {
			r.cond.Wait()
		}
		if len(r.q) == 0 {
			r.mu.Unlock()
			return
		}
		fn := r.q[0]
		r.q[0] = nil
		r.q = r.q[1:]
		r.mu.Unlock()
		fn()
	}
}

// close runs what is queued and stops the goroutine.
func (r *runner) close() {
	r.mu.Lock()
	r.stop = true
	started := r.started
	r.mu.Unlock()
	r.cond.Signal()
	if started {
		<-r.done
	}
}
