package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/lsm"
	"github.com/statedhq/stated/tools/bench/workload"
)

// target applies operations of one task. do may complete at once (raw
// Pebble) or later, from another goroutine (the client's callbacks, which
// run one at a time per instance); done is called exactly once.
type target interface {
	do(op *workload.Op, done func(error))
	// flush sends what do has buffered.
	flush()
}

// clientTarget is one task's instance in a daemon, through the Go client.
type clientTarget struct{ in *client.Instance }

func (t clientTarget) do(op *workload.Op, done func(error)) {
	in := t.in
	none := func(_ struct{}, err error) { done(err) }
	switch op.Kind {
	case workload.Get:
		in.Get(op.State, op.Key, nil).Then(func(_ client.Value, err error) { done(err) })
	case workload.Put:
		in.Put(op.State, op.Key, nil, op.Value).Then(none)
	case workload.Insert:
		if op.State == workload.MapState {
			in.MapPut(op.State, op.Key, nil, op.UserKey, op.Value).Then(none)
		} else {
			in.Put(op.State, op.Key, nil, op.Value).Then(none)
		}
	case workload.Update:
		// The put is issued once the get has answered, as a task that reads,
		// computes and writes back would: op's buffers are reused by then.
		key, val, state := clone(op.Key), clone(op.Value), op.State
		in.Get(state, key, nil).Then(func(_ client.Value, err error) {
			if err != nil {
				done(err)
				return
			}
			in.Put(state, key, nil, val).Then(none)
		})
	case workload.ListAppend:
		in.ListAppend(op.State, op.Key, nil, op.Values...).Then(none)
	case workload.ListGet:
		in.ListGet(op.State, op.Key, nil).Then(func(_ [][]byte, err error) { done(err) })
	case workload.MapPut:
		in.MapPut(op.State, op.Key, nil, op.UserKey, op.Value).Then(none)
	case workload.MapGet:
		in.MapGet(op.State, op.Key, nil, op.UserKey).Then(func(_ client.Value, err error) { done(err) })
	case workload.MapIterate:
		in.MapIterate(op.State, op.Key, nil, nil, op.Limit).Then(func(_ client.MapPage, err error) { done(err) })
	case workload.Scan:
		in.MapIterate(op.State, op.Key, nil, op.UserKey, op.Limit).Then(func(_ client.MapPage, err error) { done(err) })
	case workload.AggregateAdd:
		in.AggregateAdd(op.State, op.Key, nil, backend.Int64(op.Number)).Then(none)
	case workload.AggregateGet:
		in.AggregateGet(op.State, op.Key, nil).Then(func(_ client.Aggregate, err error) { done(err) })
	case workload.TimerRegister:
		in.RegisterTimer(op.State, op.Key, nil, op.Timestamp).Then(none)
	case workload.TimerPoll:
		in.PollTimers(op.State, op.Timestamp, op.Limit).Then(func(_ []backend.Timer, err error) { done(err) })
	default:
		done(fmt.Errorf("bench: operation kind %s is not supported", op.Kind))
	}
}

func (t clientTarget) flush() { t.in.Flush() }

func clone(b []byte) []byte { return append([]byte(nil), b...) }

// pebbleTarget is the baseline: the same operations on raw in-process
// Pebble, configured as the lsm backend runs it (WAL off, writes without
// sync, its default memtable size, a block cache shared by every task, a
// concatenating merge operator), keys laid out as the backend lays them out
// (key group first). Aggregates are read, added and written back.
type pebbleTarget struct {
	db     *pebble.DB
	maxPar int
	kbuf   []byte
	lbuf   []byte
	sink   []byte // values read are copied here, as the backends copy them
}

func openPebble(dir string, cache *pebble.Cache, maxPar int) (*pebbleTarget, error) {
	o := &pebble.Options{
		Cache:              cache,
		Merger:             pebble.DefaultMerger,
		DisableWAL:         true,
		MemTableSize:       lsm.DefaultMemTableSize,
		FormatMajorVersion: pebble.FormatNewest,
		Logger:             quietPebble{},
	}
	db, err := pebble.Open(dir, o)
	if err != nil {
		return nil, fmt.Errorf("bench: open baseline pebble in %s: %w", dir, err)
	}
	return &pebbleTarget{db: db, maxPar: maxPar}, nil
}

func (t *pebbleTarget) close() error { return t.db.Close() }

// quietPebble drops Pebble's informational lines, which would break up the
// progress output; errors still reach stderr.
type quietPebble struct{}

func (quietPebble) Infof(string, ...any) {}
func (quietPebble) Errorf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "pebble: "+format+"\n", args...)
}
func (quietPebble) Fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "pebble: "+format+"\n", args...)
	os.Exit(1)
}

func stateByte(s string) byte { return s[0] }

// key builds [key group: 2 bytes][state][key][suffix] in t.kbuf.
func (t *pebbleTarget) key(state string, key, suffix []byte) []byte {
	kg := backend.KeyGroupForHash(client.FNV1a32(key), t.maxPar)
	b := binary.BigEndian.AppendUint16(t.kbuf[:0], uint16(kg))
	b = append(b, stateByte(state))
	b = append(b, key...)
	b = append(b, suffix...)
	t.kbuf = b
	return b
}

func (t *pebbleTarget) get(k []byte) error {
	v, closer, err := t.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	t.sink = append(t.sink[:0], v...)
	return closer.Close()
}

func (t *pebbleTarget) do(op *workload.Op, done func(error)) { done(t.apply(op)) }

func (t *pebbleTarget) apply(op *workload.Op) error {
	switch op.Kind {
	case workload.Get, workload.AggregateGet:
		return t.get(t.key(op.State, op.Key, nil))
	case workload.Put:
		return t.db.Set(t.key(op.State, op.Key, nil), op.Value, pebble.NoSync)
	case workload.Insert:
		return t.db.Set(t.key(op.State, op.Key, op.UserKey), op.Value, pebble.NoSync)
	case workload.Update:
		k := t.key(op.State, op.Key, nil)
		if err := t.get(k); err != nil {
			return err
		}
		return t.db.Set(k, op.Value, pebble.NoSync)
	case workload.ListAppend:
		// Elements are length-prefixed so that the concatenation splits.
		b := t.lbuf[:0]
		for _, v := range op.Values {
			b = binary.AppendUvarint(b, uint64(len(v)))
			b = append(b, v...)
		}
		t.lbuf = b
		return t.db.Merge(t.key(op.State, op.Key, nil), b, pebble.NoSync)
	case workload.ListGet:
		v, closer, err := t.db.Get(t.key(op.State, op.Key, nil))
		if errors.Is(err, pebble.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		var elems [][]byte
		for len(v) > 0 {
			n, w := binary.Uvarint(v)
			if w <= 0 || uint64(len(v)-w) < n {
				closer.Close()
				return errors.New("bench: baseline list is damaged")
			}
			elems = append(elems, clone(v[w:w+int(n)]))
			v = v[w+int(n):]
		}
		return closer.Close()
	case workload.MapPut:
		return t.db.Set(t.key(op.State, op.Key, op.UserKey), op.Value, pebble.NoSync)
	case workload.MapGet:
		return t.get(t.key(op.State, op.Key, op.UserKey))
	case workload.MapIterate, workload.Scan:
		prefix := clone(t.key(op.State, op.Key, nil))
		start := prefix
		if op.Kind == workload.Scan {
			start = append(clone(prefix), op.UserKey...)
		}
		it, err := t.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
		if err != nil {
			return err
		}
		n := 0
		for ok := it.SeekGE(start); ok && n < op.Limit; ok = it.Next() {
			t.sink = append(t.sink[:0], it.Value()...)
			n++
		}
		return errors.Join(it.Error(), it.Close())
	case workload.AggregateAdd:
		k := t.key(op.State, op.Key, nil)
		var sum int64
		v, closer, err := t.db.Get(k)
		switch {
		case err == nil:
			if len(v) == 8 {
				sum = int64(binary.BigEndian.Uint64(v))
			}
			closer.Close()
		case !errors.Is(err, pebble.ErrNotFound):
			return err
		}
		return t.db.Set(k, binary.BigEndian.AppendUint64(nil, uint64(sum+op.Number)), pebble.NoSync)
	case workload.TimerRegister:
		// Timers of a task in timestamp order: [state][timestamp][key].
		b := append(t.lbuf[:0], stateByte(op.State))
		b = binary.BigEndian.AppendUint64(b, uint64(op.Timestamp)^1<<63)
		b = append(b, op.Key...)
		t.lbuf = b
		return t.db.Set(b, nil, pebble.NoSync)
	case workload.TimerPoll:
		lo := []byte{stateByte(op.State)}
		hi := binary.BigEndian.AppendUint64([]byte{stateByte(op.State)}, uint64(op.Timestamp+1)^1<<63)
		it, err := t.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		if err != nil {
			return err
		}
		batch := t.db.NewBatch()
		n := 0
		for ok := it.First(); ok && n < op.Limit; ok = it.Next() {
			if err := batch.Delete(it.Key(), nil); err != nil {
				break
			}
			n++
		}
		if err := errors.Join(it.Error(), it.Close()); err != nil {
			batch.Close()
			return err
		}
		return batch.Commit(pebble.NoSync)
	}
	return fmt.Errorf("bench: operation kind %s is not supported", op.Kind)
}

func (t *pebbleTarget) flush() {}

// prefixEnd is the smallest key after every key with prefix p.
func prefixEnd(p []byte) []byte {
	end := clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// drive issues operations from next until it returns nil, ctx ends or an
// operation fails, keeping at most inflight of them unanswered, and waits
// for every answer. record, if set, gets each operation's latency (issue to
// answer); it runs where done runs, so one task's record calls never
// overlap. It returns the operations issued.
func drive(ctx context.Context, t target, inflight int, next func() *workload.Op, record func(workload.Kind, time.Duration)) (int64, error) {
	sem := make(chan struct{}, inflight)
	var failed atomic.Pointer[error]
	var n int64
	acquire := func() error {
		select {
		case sem <- struct{}{}:
			return nil
		default:
		}
		// Full: what is buffered must go out for answers to come.
		t.flush()
		select {
		case sem <- struct{}{}:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var err error
	for failed.Load() == nil {
		if err = ctx.Err(); err != nil {
			break
		}
		op := next()
		if op == nil {
			break
		}
		if err = acquire(); err != nil {
			break
		}
		kind, start := op.Kind, time.Now()
		t.do(op, func(e error) {
			if e != nil {
				e = fmt.Errorf("%s: %w", kind, e)
				failed.CompareAndSwap(nil, &e)
			} else if record != nil {
				record(kind, time.Since(start))
			}
			<-sem
		})
		n++
	}
	t.flush()
	// Every slot back: every answer is in (and every record call done).
	for i := 0; i < inflight; i++ {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return n, ctx.Err()
		}
	}
	if p := failed.Load(); p != nil {
		return n, *p
	}
	return n, err
}

// parallel runs fn(i) for i in [0, n) on n goroutines and returns the
// errors joined.
func parallel(n int, fn func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
