package inspect

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/kvlayout"
	"github.com/statedhq/stated/catalog"
)

// Bootstrap says what a savepoint made from entries alone is: the job,
// its key groups, its tasks and the states' shapes the entries do not
// carry.
type Bootstrap struct {
	// Job is the job the savepoint is of. Required.
	Job string
	// MaxParallelism is the job's number of key groups. Default
	// backend.DefaultMaxParallelism.
	MaxParallelism int
	// Parallelism is the number of tasks of each operator, each holding
	// the entries of its key-group range
	// (backend.KeyGroupRangeForOperator). A restore at another
	// parallelism rescales as usual. Default 1. Each task of every
	// operator is staged at once: this bounds the disk and memory used.
	Parallelism int
	// States give the shape of states the entries do not: an aggregate's
	// function and number type (required for every aggregate state), or
	// a TTL to record. A state not listed is registered from its entries'
	// kind.
	States []backend.StateDescriptor
}

func (b *Bootstrap) ensureDefaults() {
	if b.MaxParallelism == 0 {
		b.MaxParallelism = backend.DefaultMaxParallelism
	}
	if b.Parallelism == 0 {
		b.Parallelism = 1
	}
}

func (b *Bootstrap) validate() error {
	var errs []error
	if err := catalog.ValidateJob(b.Job); err != nil {
		errs = append(errs, err)
	}
	if err := backend.ValidateParallelism(b.MaxParallelism, b.Parallelism); err != nil {
		errs = append(errs, err)
	}
	for _, d := range b.States {
		if err := d.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("state %q: %w", d.Name, err))
		}
	}
	return errors.Join(errs...)
}

// bootOp is one operator being bootstrapped: a staging instance per task,
// and the states its entries named.
type bootOp struct {
	tasks  []*taskOut
	states map[string]backend.StateDescriptor
}

// WriteBootstrap writes a new canonical savepoint into t from the entries
// next returns, one at a time, until it returns io.EOF. An entry is what
// Scan returns (Subtask is not used: the key group places it; StoredBytes
// is not used; a list element is appended to its list in the order
// given). An entry with the address of an earlier one replaces it
// (values, map entries, aggregates). Every entry is checked (kind, key
// group, sizes); the first bad one fails the whole savepoint, naming its
// position (1-based), and nothing of it is left.
func WriteBootstrap(ctx context.Context, b Bootstrap, t Target, next func() (*Entry, error)) (m *catalog.Manifest, err error) {
	b.ensureDefaults()
	if err := b.validate(); err != nil {
		return nil, fmt.Errorf("inspect: bootstrap: %w", err)
	}
	given := map[string]backend.StateDescriptor{}
	for _, d := range b.States {
		given[d.Name] = d
	}
	w, err := newSPWriter(ctx, t)
	if err != nil {
		return nil, err
	}
	ops := map[string]*bootOp{}
	defer func() {
		for _, op := range ops {
			for _, o := range op.tasks {
				if o != nil {
					o.close()
				}
			}
		}
		if err != nil {
			w.abort(ctx)
		}
	}()
	// The states each operator registers are known only once every entry
	// is read, but a staging instance registers its states at open: the
	// instances are opened with every state the options give, and those
	// the entries add are registered as they come (RegisterState).
	var buf, val []byte
	for n := 1; ; n++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		e, err := next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("inspect: bootstrap: entry %d: %w", n, err)
		}
		fail := func(format string, args ...any) error {
			return fmt.Errorf("inspect: bootstrap: %w: entry %d (operator %q, state %q, key group %d): %s",
				backend.ErrInvalidArgument, n, e.Operator, e.State, e.KeyGroup, fmt.Sprintf(format, args...))
		}
		if e.KeyGroup < 0 || e.KeyGroup >= b.MaxParallelism {
			return nil, fail("key group out of [0, %d) (--max-parallelism)", b.MaxParallelism)
		}
		op := ops[e.Operator]
		if op == nil {
			if err := (backend.TaskID{Job: b.Job, Operator: e.Operator}).Validate(); err != nil {
				return nil, fail("%v", err)
			}
			op = &bootOp{tasks: make([]*taskOut, b.Parallelism), states: map[string]backend.StateDescriptor{}}
			ops[e.Operator] = op
		}
		d, ok := op.states[e.State]
		if !ok {
			d, ok = given[e.State]
			if !ok {
				if e.Kind == backend.KindAggregate {
					return nil, fail("an aggregate state needs its function and number type (--aggregate %s=FUNC:TYPE)", e.State)
				}
				d = backend.StateDescriptor{Name: e.State, Kind: e.Kind}
			}
			if err := d.Validate(); err != nil {
				return nil, fail("%v", err)
			}
			op.states[e.State] = d
			for _, o := range op.tasks {
				if o != nil {
					if err := o.b.RegisterState(d); err != nil {
						return nil, fail("%v", err)
					}
				}
			}
		}
		if d.Kind != e.Kind {
			return nil, fail("kind %s, but the state is a %s state", e.Kind, d.Kind)
		}
		sub := backend.OperatorForKeyGroup(b.MaxParallelism, b.Parallelism, e.KeyGroup)
		o := op.tasks[sub]
		if o == nil {
			task := backend.TaskID{Job: b.Job, Operator: e.Operator, Subtask: sub}
			o, err = w.openTask(ctx, task, backend.KeyGroupRangeForOperator(b.MaxParallelism, b.Parallelism, sub),
				b.MaxParallelism, sortedStates(op.states))
			if err != nil {
				return nil, err
			}
			op.tasks[sub] = o
		}
		for name, x := range map[string][]byte{"key": e.Key, "namespace": e.Namespace, "user key": e.UserKey, "value": e.Value} {
			if len(x) > backend.DefaultMaxValueSize {
				return nil, fail("%s of %d bytes exceeds %d", name, len(x), backend.DefaultMaxValueSize)
			}
		}
		k := backend.Key{KeyGroup: e.KeyGroup, Key: e.Key, Namespace: e.Namespace}
		switch e.Kind {
		case backend.KindValue:
			buf = kvlayout.AppendEntryKey(buf[:0], e.State, k)
			val = append(kvlayout.AppendHeader(val[:0], e.Expiry), e.Value...)
		case backend.KindMap:
			buf = append(kvlayout.AppendEntryKey(buf[:0], e.State, k), e.UserKey...)
			val = append(kvlayout.AppendHeader(val[:0], e.Expiry), e.Value...)
		case backend.KindAggregate:
			if e.Number.Type != d.Number {
				if d.Number == backend.NumFloat64 && e.Number.Type == backend.NumInt64 {
					e.Number = backend.Float64(float64(e.Number.Int))
				} else {
					return nil, fail("number %s is not a %s", e.Number, d.Number)
				}
			}
			buf = kvlayout.AppendEntryKey(buf[:0], e.State, k)
			val = append(kvlayout.AppendHeader(val[:0], e.Expiry), kvlayout.EncodeNumber(e.Number)...)
		case backend.KindTimers:
			buf = kvlayout.AppendTimerKey(buf[:0], e.State, backend.Timer{KeyGroup: e.KeyGroup, Key: e.Key,
				Namespace: e.Namespace, Timestamp: e.Timestamp})
			val = val[:0]
		case backend.KindList:
			buf = kvlayout.AppendEntryKey(buf[:0], e.State, k)
			old, _, err := o.get(buf)
			if err != nil {
				return nil, fmt.Errorf("inspect: bootstrap: stage %s: %w", o.b.Info().Task, err)
			}
			val = kvlayout.AppendListElement(append(val[:0], old...), e.Expiry, e.Value)
		default:
			return nil, fail("unknown kind %s", e.Kind)
		}
		if err := o.set(buf, val); err != nil {
			return nil, fmt.Errorf("inspect: bootstrap: stage %s: %w", o.b.Info().Task, err)
		}
	}
	if len(ops) == 0 {
		return nil, fmt.Errorf("inspect: bootstrap: %w: no entries: a savepoint of nothing restores nothing", backend.ErrInvalidArgument)
	}
	names := make([]string, 0, len(ops))
	for name := range ops {
		names = append(names, name)
	}
	sort.Strings(names)
	// Tasks without entries still get a (empty) snapshot: the savepoint
	// then covers every key group of every operator.
	for _, name := range names {
		op := ops[name]
		for sub, o := range op.tasks {
			if o == nil {
				task := backend.TaskID{Job: b.Job, Operator: name, Subtask: sub}
				if o, err = w.openTask(ctx, task, backend.KeyGroupRangeForOperator(b.MaxParallelism, b.Parallelism, sub),
					b.MaxParallelism, sortedStates(op.states)); err != nil {
					return nil, err
				}
			}
			op.tasks[sub] = nil // finish closes it
			if err := o.finish(ctx, 0); err != nil {
				return nil, err
			}
		}
	}
	return w.complete(ctx, b.Job, 0)
}

func sortedStates(m map[string]backend.StateDescriptor) []backend.StateDescriptor {
	out := make([]backend.StateDescriptor, 0, len(m))
	for _, d := range m {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
