package lsm

import (
	"context"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statedhq/stated/backend"
)

// Key-group bounds of SSTs (backend.FileRef.KeyGroupBounds) let a restore
// into a sub-range download only the SSTs that meet it. They are computed
// from the file itself at upload time, never from Pebble's view of the
// live store (which a concurrent compaction may have changed since the
// checkpoint was taken). The bounds cover every key the file holds, point
// keys, range deletions and range keys alike, whatever the MANIFEST says
// is visible: a backing file of a virtual SST keeps its physical bounds,
// which is safe (a superset) and only costs a download now and then.

// keyGroupAtOrBelow is the largest key-group prefix that is <= k: the key
// group of every key >= k starts there or later. A key shorter than two
// bytes is padded with zeros.
func keyGroupAtOrBelow(k []byte) int {
	var p [2]byte
	copy(p[:], k)
	return int(p[0])<<8 | int(p[1])
}

// lastKeyGroupBelow is the key group of the largest key < end (an
// exclusive bound), or -1 if no key with a key-group prefix is below it.
func lastKeyGroupBelow(end []byte) int {
	kg := keyGroupAtOrBelow(end)
	if len(end) <= 2 {
		// end is exactly a key-group prefix (or shorter): keys below it
		// belong to earlier key groups.
		kg--
	}
	return kg
}

// sstKeyGroupBounds opens the SST at path and returns the key groups of its
// smallest and largest keys. ok is false for a file without keys.
func sstKeyGroupBounds(ctx context.Context, fs vfs.FS, path string, ro sstable.ReaderOptions) (_ backend.KeyGroupRange, ok bool, err error) {
	f, err := fs.Open(path)
	if err != nil {
		return backend.KeyGroupRange{}, false, err
	}
	readable, err := sstable.NewSimpleReadable(f)
	if err != nil {
		f.Close()
		return backend.KeyGroupRange{}, false, err
	}
	rd, err := sstable.NewReader(ctx, readable, ro)
	if err != nil {
		readable.Close()
		return backend.KeyGroupRange{}, false, err
	}
	defer func() { err = errors.Join(err, rd.Close()) }()

	lo, hi := backend.MaxKeyGroupBound+1, -1
	extend := func(first, last int) {
		lo, hi = min(lo, first), max(hi, last)
	}
	it, err := rd.NewIter(sstable.NoTransforms, nil, nil, sstable.TableBlobContext{})
	if err != nil {
		return backend.KeyGroupRange{}, false, err
	}
	if kv := it.First(); kv != nil {
		first := keyGroupAtOrBelow(kv.K.UserKey)
		if kv = it.Last(); kv != nil {
			extend(first, keyGroupAtOrBelow(kv.K.UserKey))
		}
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return backend.KeyGroupRange{}, false, err
	}
	// Range deletions and range keys: the start of the first span and the
	// (exclusive) end of the last. The two iterators have the same type,
	// which lives in a Pebble-internal package, so the code is written out
	// for each.
	del, err := rd.NewRawRangeDelIter(ctx, sstable.NoFragmentTransforms, sstable.ReadEnv{})
	if err != nil {
		return backend.KeyGroupRange{}, false, err
	}
	if del != nil {
		first, err := del.First()
		if err == nil && first != nil {
			start := keyGroupAtOrBelow(first.Start)
			last, lerr := del.Last()
			if err = lerr; err == nil && last != nil {
				extend(start, max(start, lastKeyGroupBelow(last.End)))
			}
		}
		del.Close()
		if err != nil {
			return backend.KeyGroupRange{}, false, err
		}
	}
	rk, err := rd.NewRawRangeKeyIter(ctx, sstable.NoFragmentTransforms, sstable.ReadEnv{})
	if err != nil {
		return backend.KeyGroupRange{}, false, err
	}
	if rk != nil {
		first, err := rk.First()
		if err == nil && first != nil {
			start := keyGroupAtOrBelow(first.Start)
			last, lerr := rk.Last()
			if err = lerr; err == nil && last != nil {
				extend(start, max(start, lastKeyGroupBelow(last.End)))
			}
		}
		rk.Close()
		if err != nil {
			return backend.KeyGroupRange{}, false, err
		}
	}
	if hi < 0 {
		return backend.KeyGroupRange{}, false, nil
	}
	return backend.KeyGroupRange{Start: lo, End: max(lo, hi)}, true, nil
}

// fileBounds returns ref with KeyGroupBounds filled in from the local copy
// at path, for SSTs only (other files hold no keys Pebble reads by range).
func fileBounds(ctx context.Context, fs vfs.FS, path string, ref backend.FileRef, ro sstable.ReaderOptions) (backend.FileRef, error) {
	if ref.KeyGroupBounds != nil || !isSST(ref.LocalName) {
		return ref, nil
	}
	kb, ok, err := sstKeyGroupBounds(ctx, fs, path, ro)
	if err != nil {
		return ref, fmt.Errorf("read the key bounds of %s: %w", ref.LocalName, err)
	}
	if ok {
		ref.KeyGroupBounds = &kb
	}
	return ref, nil
}
