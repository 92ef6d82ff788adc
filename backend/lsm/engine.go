package lsm

import (
	"errors"
	"fmt"
	"io"

	"github.com/cockroachdb/pebble/v2"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/internal/kvstate"
	"github.com/statedhq/stated/backend/tablecheck"
)

// MergerName is the name of the merge operator Pebble records in the
// store's OPTIONS file. Frozen: a store written with one name cannot be
// opened with another, and every checkpoint carries it. Its one home is
// tablecheck, which must know it to read the tables back.
const MergerName = tablecheck.MergerName

// concatMerger concatenates operands from oldest to newest: a list append
// (kvstate.Engine.Merge) becomes value||operand without a read.
var concatMerger = &pebble.Merger{
	Name: MergerName,
	Merge: func(key, value []byte) (pebble.ValueMerger, error) {
		m := &concatValueMerger{}
		m.buf = append(m.buf, value...)
		return m, nil
	},
}

type concatValueMerger struct{ buf []byte }

func (m *concatValueMerger) MergeNewer(value []byte) error {
	m.buf = append(m.buf, value...)
	return nil
}

func (m *concatValueMerger) MergeOlder(value []byte) error {
	buf := make([]byte, 0, len(value)+len(m.buf))
	m.buf = append(append(buf, value...), m.buf...)
	return nil
}

func (m *concatValueMerger) Finish(bool) ([]byte, io.Closer, error) { return m.buf, nil, nil }

// engine is kvstate.Engine over a Pebble store (or a read-only view of one:
// a Pebble snapshot for canonical snapshots).
type engine struct{ db *pebble.DB }

var _ kvstate.Engine = engine{}

// Get implements kvstate.Engine; the value is a copy.
func (e engine) Get(key []byte) ([]byte, bool, error) {
	v, closer, err := e.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, wrapErr(err, "get %x", key)
	}
	out := append(make([]byte, 0, len(v)), v...)
	if err := closer.Close(); err != nil {
		return nil, false, wrapErr(err, "get %x", key)
	}
	return out, true, nil
}

var _ kvstate.AppendGetter = engine{}

// AppendGet implements kvstate.AppendGetter.
func (e engine) AppendGet(dst, key []byte) ([]byte, bool, error) {
	v, closer, err := e.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return dst, false, nil
	}
	if err != nil {
		return dst, false, wrapErr(err, "get %x", key)
	}
	dst = append(dst, v...)
	if err := closer.Close(); err != nil {
		return dst, false, wrapErr(err, "get %x", key)
	}
	return dst, true, nil
}

// Set implements kvstate.Engine.
func (e engine) Set(key, value []byte) error {
	if err := e.db.Set(key, value, pebble.NoSync); err != nil {
		return wrapErr(err, "set %x", key)
	}
	return nil
}

// Merge implements kvstate.Engine.
func (e engine) Merge(key, operand []byte) error {
	if err := e.db.Merge(key, operand, pebble.NoSync); err != nil {
		return wrapErr(err, "merge %x", key)
	}
	return nil
}

// Delete implements kvstate.Engine.
func (e engine) Delete(key []byte) error {
	if err := e.db.Delete(key, pebble.NoSync); err != nil {
		return wrapErr(err, "delete %x", key)
	}
	return nil
}

// DeleteRange implements kvstate.Engine. Pebble needs an upper bound; for a
// nil end it uses the successor of the last stored key at or after start.
func (e engine) DeleteRange(start, end []byte) error {
	if end == nil {
		it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: start})
		if err != nil {
			return wrapErr(err, "delete range from %x", start)
		}
		if it.Last() {
			end = append(append([]byte{}, it.Key()...), 0)
		}
		err = errors.Join(it.Error(), it.Close())
		if err != nil {
			return wrapErr(err, "delete range from %x", start)
		}
		if end == nil {
			return nil // nothing at or after start
		}
	}
	if err := e.db.DeleteRange(start, end, pebble.NoSync); err != nil {
		return wrapErr(err, "delete range [%x, %x)", start, end)
	}
	return nil
}

// Scan implements kvstate.Engine.
func (e engine) Scan(start, end []byte, fn func(k, v []byte) (bool, error)) error {
	it, err := e.db.NewIter(&pebble.IterOptions{LowerBound: start, UpperBound: end})
	if err != nil {
		return wrapErr(err, "scan [%x, %x)", start, end)
	}
	return scanIter(it, fn)
}

// scanIter walks it from the first key and closes it.
func scanIter(it *pebble.Iterator, fn func(k, v []byte) (bool, error)) (err error) {
	defer func() {
		if cerr := it.Close(); cerr != nil && err == nil {
			err = wrapErr(cerr, "scan")
		}
	}()
	for valid := it.First(); valid; valid = it.Next() {
		v, verr := it.ValueAndErr()
		if verr != nil {
			return wrapErr(verr, "scan at %x", it.Key())
		}
		more, ferr := fn(it.Key(), v)
		if ferr != nil {
			return ferr
		}
		if !more {
			return nil
		}
	}
	if ierr := it.Error(); ierr != nil {
		return wrapErr(ierr, "scan")
	}
	return nil
}

// wrapErr names the operation and marks Pebble's corruption errors (a block
// or file that fails its checksum) with backend.ErrCorrupt, so callers see
// damaged local data for what it is.
func wrapErr(err error, format string, args ...any) error {
	what := fmt.Sprintf(format, args...)
	if pebble.IsCorruptionError(err) {
		return fmt.Errorf("lsm: %s: %w: %w", what, backend.ErrCorrupt, err)
	}
	return fmt.Errorf("lsm: %s: %w", what, err)
}

var _ kvstate.Batcher = engine{}

// NewBatch implements kvstate.Batcher.
func (e engine) NewBatch() kvstate.Batch { return &batch{b: e.db.NewBatch()} }

// batch is kvstate.Batch over a Pebble batch, committed without sync like
// the engine's single writes.
type batch struct {
	b    *pebble.Batch
	done bool
}

func (b *batch) Set(key, value []byte) error {
	if err := b.b.Set(key, value, nil); err != nil {
		return wrapErr(err, "batch set %x", key)
	}
	return nil
}

func (b *batch) Merge(key, operand []byte) error {
	if err := b.b.Merge(key, operand, nil); err != nil {
		return wrapErr(err, "batch merge %x", key)
	}
	return nil
}

func (b *batch) Delete(key []byte) error {
	if err := b.b.Delete(key, nil); err != nil {
		return wrapErr(err, "batch delete %x", key)
	}
	return nil
}

func (b *batch) DeleteRange(start, end []byte) error {
	if end == nil {
		return fmt.Errorf("lsm: batch delete range from %x without an upper bound", start)
	}
	if err := b.b.DeleteRange(start, end, nil); err != nil {
		return wrapErr(err, "batch delete range [%x, %x)", start, end)
	}
	return nil
}

func (b *batch) Empty() bool { return b.b.Empty() }

func (b *batch) Commit() error {
	if b.done {
		return errors.New("lsm: commit of a released batch")
	}
	n := b.b.Count()
	err := b.b.Commit(pebble.NoSync)
	if cerr := b.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return wrapErr(err, "commit a batch of %d writes", n)
	}
	return nil
}

func (b *batch) Close() error {
	if b.done {
		return nil
	}
	b.done = true
	return b.b.Close()
}
