// Package memkv is the in-memory ordered key/value engine of the heap and
// file backends: a copy-on-write B-tree (github.com/google/btree), so that
// the synchronous part of a snapshot is a Clone that costs O(1) and the
// asynchronous part reads the frozen clone while the task keeps writing.
package memkv

import (
	"bytes"

	"github.com/google/btree"

	"github.com/statedhq/stated/backend/internal/kvstate"
)

type item struct{ k, v []byte }

func less(a, b item) bool { return bytes.Compare(a.k, b.k) < 0 }

// Tree is a kvstate.Engine in memory. Not safe for concurrent writers;
// kvstate.State serializes them. A Clone may be read concurrently with
// writes to the original.
type Tree struct {
	t     *btree.BTreeG[item]
	bytes int64
}

var _ kvstate.Engine = (*Tree)(nil)

// New returns an empty tree.
func New() *Tree { return &Tree{t: btree.NewG(32, less)} }

// Len is the number of entries.
func (t *Tree) Len() int { return t.t.Len() }

// Bytes is the sum of key and value sizes.
func (t *Tree) Bytes() int64 { return t.bytes }

// Clone returns a frozen copy-on-write view.
func (t *Tree) Clone() *Tree { return &Tree{t: t.t.Clone(), bytes: t.bytes} }

// Get implements kvstate.Engine.
func (t *Tree) Get(key []byte) ([]byte, bool, error) {
	it, ok := t.t.Get(item{k: key})
	if !ok {
		return nil, false, nil
	}
	return append([]byte(nil), it.v...), true, nil
}

func (t *Tree) put(k, v []byte) {
	old, ok := t.t.ReplaceOrInsert(item{k: k, v: v})
	if ok {
		t.bytes -= int64(len(old.k) + len(old.v))
	}
	t.bytes += int64(len(k) + len(v))
}

// Set implements kvstate.Engine. Stored slices are private copies, never
// mutated afterwards, which is what makes clones safe.
func (t *Tree) Set(key, value []byte) error {
	t.put(bytes.Clone(key), append([]byte{}, value...))
	return nil
}

// Merge implements kvstate.Engine.
func (t *Tree) Merge(key, operand []byte) error {
	old, _ := t.t.Get(item{k: key})
	v := make([]byte, 0, len(old.v)+len(operand))
	v = append(append(v, old.v...), operand...)
	t.put(bytes.Clone(key), v)
	return nil
}

// Delete implements kvstate.Engine.
func (t *Tree) Delete(key []byte) error {
	if old, ok := t.t.Delete(item{k: key}); ok {
		t.bytes -= int64(len(old.k) + len(old.v))
	}
	return nil
}

// DeleteRange implements kvstate.Engine.
func (t *Tree) DeleteRange(start, end []byte) error {
	var doomed [][]byte
	t.scan(start, end, func(it item) bool { doomed = append(doomed, it.k); return true })
	for _, k := range doomed {
		t.Delete(k)
	}
	return nil
}

func (t *Tree) scan(start, end []byte, fn func(item) bool) {
	visit := func(it item) bool { return fn(it) }
	if end == nil {
		t.t.AscendGreaterOrEqual(item{k: start}, visit)
		return
	}
	t.t.AscendRange(item{k: start}, item{k: end}, visit)
}

// Scan implements kvstate.Engine. A nil end means no upper bound.
func (t *Tree) Scan(start, end []byte, fn func(k, v []byte) (bool, error)) error {
	var err error
	t.scan(start, end, func(it item) bool {
		var more bool
		more, err = fn(it.k, it.v)
		return more && err == nil
	})
	return err
}
