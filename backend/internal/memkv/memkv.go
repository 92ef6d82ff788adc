package memkv

import (
	"bytes"
	"fmt"

	"github.com/google/btree"

	"github.com/statedhq/stated/backend"
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
	// limit bounds bytes (0: none); owner names the instance in errors.
	limit int64
	owner string
}

var _ kvstate.Engine = (*Tree)(nil)

// New returns an empty tree.
func New() *Tree { return &Tree{t: btree.NewG(32, less)} }

// Len is the number of entries.
func (t *Tree) Len() int { return t.t.Len() }

// Bytes is the sum of key and value sizes.
func (t *Tree) Bytes() int64 { return t.bytes }

// SetLimit bounds the bytes of keys and values: a Set or Merge that would
// grow the tree past limit fails with backend.ErrResourceExhausted and
// changes nothing. Writes that do not grow it (overwrites with values of
// the same size, TTL refreshes, deletes) always succeed, so a tree over
// its limit (after the limit was lowered) can still shrink. owner names
// the instance in the error. 0: no bound.
func (t *Tree) SetLimit(limit int64, owner string) { t.limit, t.owner = limit, owner }

// Clone returns a frozen copy-on-write view (without a limit: clones are
// only read).
func (t *Tree) Clone() *Tree { return &Tree{t: t.t.Clone(), bytes: t.bytes} }

// Get implements kvstate.Engine.
func (t *Tree) Get(key []byte) ([]byte, bool, error) {
	it, ok := t.t.Get(item{k: key})
	if !ok {
		return nil, false, nil
	}
	return append([]byte(nil), it.v...), true, nil
}

var _ kvstate.AppendGetter = (*Tree)(nil)

// AppendGet implements kvstate.AppendGetter.
func (t *Tree) AppendGet(dst, key []byte) ([]byte, bool, error) {
	it, ok := t.t.Get(item{k: key})
	if !ok {
		return dst, false, nil
	}
	return append(dst, it.v...), true, nil
}

// put stores v under k (both owned by the tree from now on), unless that
// would grow the tree past its limit: then it puts back what was there and
// fails. The common case costs one tree operation.
func (t *Tree) put(k, v []byte) error {
	old, had := t.t.ReplaceOrInsert(item{k: k, v: v})
	grow := int64(len(k) + len(v))
	if had {
		grow -= int64(len(old.k) + len(old.v))
	}
	if t.limit > 0 && grow > 0 && t.bytes+grow > t.limit {
		if had {
			t.t.ReplaceOrInsert(old)
		} else {
			t.t.Delete(item{k: k})
		}
		return fmt.Errorf("%w: %s holds %d bytes of in-memory state; this write would take it to %d, over its limit of %d bytes "+
			"(raise the daemon's --max-memory-state, or use the lsm backend, which keeps state on disk)",
			backend.ErrResourceExhausted, t.owner, t.bytes, t.bytes+grow, t.limit)
	}
	t.bytes += grow
	return nil
}

// Set implements kvstate.Engine. Stored slices are private copies, never
// mutated afterwards, which is what makes clones safe.
func (t *Tree) Set(key, value []byte) error {
	return t.put(bytes.Clone(key), append([]byte{}, value...))
}

// Merge implements kvstate.Engine.
func (t *Tree) Merge(key, operand []byte) error {
	old, _ := t.t.Get(item{k: key})
	v := make([]byte, 0, len(old.v)+len(operand))
	v = append(append(v, old.v...), operand...)
	return t.put(bytes.Clone(key), v)
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
