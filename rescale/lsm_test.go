package rescale_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/backendtest"
	"github.com/statedhq/stated/backend/file"
	"github.com/statedhq/stated/backend/lsm"
	"github.com/statedhq/stated/rescale"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// lsmWorld is an lsm job on local disk whose old subtasks hold enough data
// for several SSTs per subtask, compacted so that files straddle the new
// ranges' boundaries.
type lsmWorld struct {
	t     *testing.T
	root  string
	store *countingStore // over a memstore
	maxP  int
	n     int
	id    uint64
	model *backendtest.Model
	keys  []backend.Key // every key written to state "value"
	clock *backendtest.Clock
	// cache is the restore-download cache the world's instances share (as
	// a daemon's do).
	cache *lsm.DownloadCache
}

func newLSMWorld(t *testing.T) *lsmWorld {
	root := t.TempDir()
	cache, err := lsm.OpenDownloadCache(nil, path.Join(root, "download-cache"), 256<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cache.Close() })
	return &lsmWorld{t: t, root: root, store: &countingStore{Store: memstore.New()}, maxP: 128,
		model: backendtest.NewModel(testStates...), clock: backendtest.NewClock(), cache: cache}
}

func (w *lsmWorld) open(o backend.Options) *lsm.Backend {
	w.t.Helper()
	w.n++
	o.Task, o.MaxParallelism, o.States, o.Store, o.Clock = backend.TaskID{Job: "job", Operator: "op", Subtask: o.Task.Subtask}, w.maxP, testStates, w.store, w.clock.Now
	b, err := lsm.Open(o, lsm.Options{Dir: path.Join(w.root, fmt.Sprint(w.n)), MemTableSize: 64 << 10, TargetFileSize: 64 << 10, CacheSize: 4 << 20,
		DownloadCache: w.cache})
	if err != nil {
		w.t.Fatalf("open %s from %d handle(s): %v", o.KeyGroups, len(o.Restore), err)
	}
	w.t.Cleanup(func() { _ = b.Close() })
	return b
}

func (w *lsmWorld) checkpoint(b backend.Backend) *backend.Handle {
	w.t.Helper()
	w.id++
	p, err := b.Snapshot(ctx, w.id)
	if err != nil {
		w.t.Fatal(err)
	}
	h, err := p.Run(ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	b.NotifyCheckpointComplete(w.id)
	return h
}

// fill writes perKG random (incompressible) values into every key group of
// b's range and records them in the model.
func (w *lsmWorld) fill(b backend.Backend, perKG, size int, rng *rand.Rand) {
	w.t.Helper()
	r := b.Info().KeyGroups
	v := make([]byte, size)
	for kg := r.Start; kg <= r.End; kg++ {
		for i := 0; i < perKG; i++ {
			k := backend.Key{KeyGroup: kg, Key: fmt.Appendf(nil, "bulk-%d-%d", kg, i)}
			for j := range v {
				v[j] = byte(rng.Uint32())
			}
			if err := b.Put("value", k, v); err != nil {
				w.t.Fatal(err)
			}
			w.model.Put("value", k, v, w.clock.Ms())
			w.keys = append(w.keys, k)
		}
	}
}

// compare reads every key of range r from b and from the model.
func (w *lsmWorld) compare(b backend.Backend, r backend.KeyGroupRange, what string) {
	w.t.Helper()
	n := 0
	for _, k := range w.keys {
		if !r.Contains(k.KeyGroup) {
			continue
		}
		n++
		got, ok, err := b.Get("value", k)
		want, wok := w.model.Get("value", k, w.clock.Ms())
		if err != nil || ok != wok || !bytes.Equal(got, want) {
			w.t.Fatalf("%s: key %q of key group %d: got %d bytes ok=%v err=%v, want %d bytes ok=%v",
				what, k.Key, k.KeyGroup, len(got), ok, err, len(want), wok)
		}
	}
	if n == 0 {
		w.t.Fatalf("%s: no key in %s to compare", what, r)
	}
}

// sstEntries opens an SST and calls fn with the user key of every point
// key and the bounds of every range deletion and range key it holds.
func sstEntries(data []byte, fn func(start, end []byte)) error {
	fs := vfs.NewMem()
	f, err := fs.Create("x.sst", vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if f, err = fs.Open("x.sst"); err != nil {
		return err
	}
	readable, err := sstable.NewSimpleReadable(f)
	if err != nil {
		return err
	}
	rd, err := sstable.NewReader(ctx, readable, sstable.ReaderOptions{Merger: &pebble.Merger{Name: lsm.MergerName}})
	if err != nil {
		return err
	}
	defer rd.Close()
	it, err := rd.NewIter(sstable.NoTransforms, nil, nil, sstable.TableBlobContext{})
	if err != nil {
		return err
	}
	for kv := it.First(); kv != nil; kv = it.Next() {
		fn(kv.K.UserKey, nil)
	}
	if err := it.Close(); err != nil {
		return err
	}
	del, err := rd.NewRawRangeDelIter(ctx, sstable.NoFragmentTransforms, sstable.ReadEnv{})
	if err != nil {
		return err
	}
	if del != nil {
		s, err := del.First()
		for ; s != nil && err == nil; s, err = del.Next() {
			fn(s.Start, s.End)
		}
		del.Close()
		if err != nil {
			return err
		}
	}
	rk, err := rd.NewRawRangeKeyIter(ctx, sstable.NoFragmentTransforms, sstable.ReadEnv{})
	if err != nil {
		return err
	}
	if rk != nil {
		s, err := rk.First()
		for ; s != nil && err == nil; s, err = rk.Next() {
			fn(s.Start, s.End)
		}
		rk.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

func kgOf(k []byte) int {
	if len(k) < 2 {
		return -1
	}
	return int(binary.BigEndian.Uint16(k))
}

// foreignEntries counts the entries of the SSTs among files that lie
// outside r (a range deletion or range key counts when it reaches outside
// r), and the bytes of the files that hold any.
func (w *lsmWorld) foreignEntries(files []backend.FileRef, r backend.KeyGroupRange) (entries int, fileBytes int64, names []string) {
	w.t.Helper()
	lo := binary.BigEndian.AppendUint16(nil, uint16(r.Start))
	hi := binary.BigEndian.AppendUint16(nil, uint16(r.End+1))
	for _, f := range files {
		if !strings.HasSuffix(f.LocalName, ".sst") {
			continue
		}
		data, err := tiered.ReadAll(ctx, w.store, f.Path, 0)
		if err != nil {
			w.t.Fatal(err)
		}
		n := 0
		err = sstEntries(data, func(start, end []byte) {
			if end == nil {
				if !r.Contains(kgOf(start)) {
					n++
				}
				return
			}
			if bytes.Compare(start, lo) < 0 || bytes.Compare(end, hi) > 0 {
				n++
			}
		})
		if err != nil {
			w.t.Fatalf("read SST %s: %v", f.Path, err)
		}
		if n > 0 {
			entries += n
			fileBytes += f.Size
			names = append(names, fmt.Sprintf("%s (%d foreign entries, %d bytes)", f.LocalName, n, f.Size))
		}
	}
	return entries, fileBytes, names
}

// TestLSMRescaleUploadsNoClippedData rescales an lsm job 2->3 and checks
// that the checkpoints of the new subtasks upload no key of a key group
// the clip removed: neither in the first checkpoint nor after a full
// compaction, and that the clipped keys stay gone
// in reads, after compaction, in a restore of the next checkpoint and in a
// canonical savepoint.
//
// It runs in claim mode, where the first checkpoint references the base
// handle's SSTs instead of uploading them. The no-claim variant is
// TestLSMNoClaimRescaleUploadsNoClippedData (lsm_noclaim_test.go).
func TestLSMRescaleUploadsNoClippedData(t *testing.T) { checkNoClippedUploads(t, false) }

func checkNoClippedUploads(t *testing.T, noClaim bool) {
	w := newLSMWorld(t)
	rng := rand.New(rand.NewPCG(1, 2))
	var old []*backend.Handle
	for i := 0; i < 2; i++ {
		b := w.open(backend.Options{Task: backend.TaskID{Subtask: i}, KeyGroups: backend.KeyGroupRangeForOperator(w.maxP, 2, i)})
		w.fill(b, 20, 256, rng)
		// Compact so the bottom level holds files that straddle
		// the new ranges' boundaries.
		if err := b.DB().Compact(ctx, []byte{0}, []byte{0xff}, false); err != nil {
			t.Fatal(err)
		}
		old = append(old, w.checkpoint(b))
	}
	oldPaths := map[string]bool{}
	for _, h := range old {
		for _, f := range h.Files {
			oldPaths[f.Path] = true
		}
	}
	plan, err := rescale.PlanOperator(old, w.maxP, 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range plan.Subtasks {
		r := st.KeyGroups
		what := fmt.Sprintf("subtask %d %s from %d handle(s)", st.Index, r, len(st.Sources))
		o := plan.Options(st, backend.Options{NoClaim: noClaim})
		b := w.open(o)
		w.compare(b, r, what)
		// New writes so the checkpoint has a new SST of its own.
		w.fill(b, 1, 64, rng)
		h := w.checkpoint(b)
		var uploaded []backend.FileRef
		for _, f := range h.Files {
			if !oldPaths[f.Path] {
				uploaded = append(uploaded, f)
			}
		}
		if n, size, names := w.foreignEntries(uploaded, r); n > 0 {
			t.Errorf("%s: the first checkpoint uploaded %d entries of clipped key groups in %d bytes of SSTs: %s",
				what, n, size, strings.Join(names, ", "))
		}
		// After a full compaction, no file the checkpoint refers to
		// (uploaded or reused) holds a clipped key.
		if err := b.DB().Compact(ctx, []byte{0}, []byte{0xff}, false); err != nil {
			t.Fatal(err)
		}
		w.compare(b, r, what+" after compaction")
		h2 := w.checkpoint(b)
		if n, size, names := w.foreignEntries(h2.Files, r); n > 0 {
			t.Errorf("%s: after a full compaction the checkpoint still refers to %d entries of clipped key groups in %d bytes of SSTs: %s",
				what, n, size, strings.Join(names, ", "))
		}
		// The next restore (into the same range) has exactly the
		// range's keys, and so does a canonical savepoint.
		w.compare(w.open(backend.Options{Task: backend.TaskID{Subtask: st.Index}, KeyGroups: r, Restore: []*backend.Handle{h2}}), r, what+", restored again")
		sp := memstore.New()
		p, err := b.CanonicalSnapshot(ctx, 1000+uint64(st.Index), sp, "sp")
		if err != nil {
			t.Fatal(err)
		}
		sh, err := p.Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if sh.KeyGroups != r {
			t.Fatalf("%s: savepoint holds %s", what, sh.KeyGroups)
		}
		fb, err := file.Open(backend.Options{Task: backend.TaskID{Job: "job", Operator: "op", Subtask: st.Index}, KeyGroups: r,
			MaxParallelism: w.maxP, Store: sp, Restore: []*backend.Handle{sh}, Clock: w.clock.Now}, file.Options{TempDir: t.TempDir()})
		if err != nil {
			t.Fatalf("%s: restore savepoint: %v", what, err)
		}
		w.compare(fb, r, what+", savepoint")
		_ = fb.Close()
		_ = b.Close()
	}
}

// TestLSMRescaleChainClipsForGood rescales an lsm job 2->3->2->1->3 on
// local disk, each time from checkpoints of the previous generation taken
// after a compaction, and compares every generation with the model:
// clipped data never comes back, whatever the base of the next restore.
func TestLSMRescaleChainClipsForGood(t *testing.T) {
	w := newLSMWorld(t)
	rng := rand.New(rand.NewPCG(3, 4))
	var hs []*backend.Handle
	for i := 0; i < 2; i++ {
		b := w.open(backend.Options{Task: backend.TaskID{Subtask: i}, KeyGroups: backend.KeyGroupRangeForOperator(w.maxP, 2, i)})
		w.fill(b, 8, 256, rng)
		hs = append(hs, w.checkpoint(b))
		_ = b.Close()
	}
	for gen, p := range []int{3, 2, 1, 3} {
		plan, err := rescale.PlanOperator(hs, w.maxP, p)
		if err != nil {
			t.Fatal(err)
		}
		var next []*backend.Handle
		for _, st := range plan.Subtasks {
			what := fmt.Sprintf("generation %d, subtask %d of %d %s", gen, st.Index, p, st.KeyGroups)
			b := w.open(plan.Options(st, backend.Options{}))
			w.compare(b, st.KeyGroups, what)
			w.clock.Advance(time.Millisecond)
			w.fill(b, 1, 32, rng)
			if gen%2 == 1 {
				if err := b.DB().Compact(ctx, []byte{0}, []byte{0xff}, false); err != nil {
					t.Fatal(err)
				}
			}
			w.compare(b, st.KeyGroups, what+" after writes")
			next = append(next, w.checkpoint(b))
			_ = b.Close()
		}
		hs = next
	}
}
