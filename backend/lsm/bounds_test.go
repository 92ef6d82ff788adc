package lsm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/internal/kvstate"
	"github.com/statedhq/stated/internal/frame"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// readLog is a store that records the objects read through Get and the
// bytes those reads returned.
type readLog struct {
	tiered.Store
	mu    sync.Mutex
	paths map[string]int64
}

func (s *readLog) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	rc, err := s.Store.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	return &loggedReader{ReadCloser: rc, s: s, name: name}, nil
}

func (s *readLog) GetRange(ctx context.Context, name string, off, n int64) (io.ReadCloser, error) {
	rc, err := s.Store.GetRange(ctx, name, off, n)
	if err != nil {
		return nil, err
	}
	return &loggedReader{ReadCloser: rc, s: s, name: name}, nil
}

// reset forgets what was read and returns it.
func (s *readLog) reset() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.paths
	s.paths = map[string]int64{}
	return out
}

type loggedReader struct {
	io.ReadCloser
	s    *readLog
	name string
}

func (r *loggedReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	r.s.mu.Lock()
	if r.s.paths == nil {
		r.s.paths = map[string]int64{}
	}
	r.s.paths[r.name] += int64(n)
	r.s.mu.Unlock()
	return n, err
}

// manySSTs fills b's range with n entries and compacts it into small
// bottom-level SSTs (lo.TargetFileSize must be small), so that each SST
// holds a few key groups.
func manySSTs(t *testing.T, b *Backend, n int, tag string) {
	t.Helper()
	r := b.Info().KeyGroups
	rng := rand.New(rand.NewPCG(uint64(n), uint64(r.Start)))
	v := make([]byte, 200) // incompressible: files of about the target size
	for i := 0; i < n; i++ {
		for j := range v {
			v[j] = byte(rng.Uint32())
		}
		kg := r.Start + i*r.Len()/n
		must(t, b.Put("v", key(kg, fmt.Sprintf("k%06d", i)), append([]byte(tag), v...)))
	}
	must(t, b.DB().Compact(context.Background(), []byte{0}, []byte{0xff}, true))
}

// meets reports whether f's bounds (absent: any) meet one of runs.
func meets(f backend.FileRef, runs ...backend.KeyGroupRange) bool {
	if f.KeyGroupBounds == nil {
		return true
	}
	for _, r := range runs {
		if !r.Intersect(*f.KeyGroupBounds).Empty() {
			return true
		}
	}
	return false
}

// wantReads are the objects of h a restore of runs must read: its private
// files and every SST whose bounds meet runs.
func wantReads(h *backend.Handle, runs ...backend.KeyGroupRange) map[string]int64 {
	out := map[string]int64{}
	for _, f := range h.Files {
		if !isSST(f.LocalName) || meets(f, runs...) {
			out[f.Path] = f.Size
		}
	}
	return out
}

func sameReads(t *testing.T, what string, got, want map[string]int64) {
	t.Helper()
	for p, n := range want {
		if got[p] != n {
			t.Errorf("%s: read %d bytes of %s, want %d", what, got[p], p, n)
		}
	}
	for p, n := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("%s: read %d bytes of %s, which holds none of the key groups restored", what, n, p)
		}
	}
}

func sumSizes(m map[string]int64) (n int64) {
	for _, s := range m {
		n += s
	}
	return n
}

// checkBounds checks that every SST of h has key-group bounds and that they
// hold every key the SST stores.
func checkBounds(t *testing.T, e *env, h *backend.Handle) {
	t.Helper()
	ctx := context.Background()
	for _, f := range h.Files {
		if !isSST(f.LocalName) {
			if f.KeyGroupBounds != nil {
				t.Errorf("%s: bounds %s on a file that is not an SST", f.LocalName, f.KeyGroupBounds)
			}
			continue
		}
		if f.KeyGroupBounds == nil {
			t.Errorf("%s: SST without key-group bounds", f.LocalName)
			continue
		}
		data, err := tiered.ReadAll(ctx, e.store, f.Path, 0)
		must(t, err)
		lo, hi := 1<<16, -1
		must(t, eachKey(data, func(k []byte) {
			kg, err := kvstate.KeyGroupOf(k)
			must(t, err)
			lo, hi = min(lo, kg), max(hi, kg)
		}))
		if got := (backend.KeyGroupRange{Start: lo, End: hi}); hi >= 0 && !f.KeyGroupBounds.Covers(got) {
			t.Errorf("%s: bounds %s, but it holds key groups %s", f.LocalName, f.KeyGroupBounds, got)
		}
	}
}

// eachKey calls fn with every point key of an SST.
func eachKey(data []byte, fn func(k []byte)) error {
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
	b := &Backend{}
	b.lo.EnsureDefaults()
	rd, err := sstable.NewReader(context.Background(), readable, b.pebbleOptions(true).MakeReaderOptions())
	if err != nil {
		return err
	}
	defer rd.Close()
	it, err := rd.NewIter(sstable.NoTransforms, nil, nil, sstable.TableBlobContext{})
	if err != nil {
		return err
	}
	for kv := it.First(); kv != nil; kv = it.Next() {
		fn(kv.K.UserKey)
	}
	return errors.Join(it.Error(), it.Close())
}

// TestRescaleDownloadsOnlyOverlappingSSTs: a restore into a sub-range reads
// only the SSTs whose key-group bounds meet the key groups it takes from
// each handle (counted through the store), from the base and from the
// other handles alike, and the result holds exactly those key groups.
func TestRescaleDownloadsOnlyOverlappingSSTs(t *testing.T) {
	e := newEnv(t)
	log := &readLog{Store: e.store}
	small := func(o *backend.Options, lo *Options) { lo.TargetFileSize = 64 << 10; lo.MemTableSize = 256 << 10 }
	low := backend.KeyGroupRange{Start: 0, End: 63}
	high := backend.KeyGroupRange{Start: 64, End: 127}
	a := e.open(low, small)
	manySSTs(t, a, 8000, "a")
	ha := checkpoint(t, a, 1)
	b := e.open(high, func(o *backend.Options, lo *Options) { small(o, lo); o.Task.Subtask = 1 })
	manySSTs(t, b, 8000, "b")
	hb := checkpoint(t, b, 1)
	checkBounds(t, e, ha)
	checkBounds(t, e, hb)
	all := dump(t, a)
	for k, v := range dump(t, b) {
		all[k] = v
	}

	// One handle, clipped on both sides.
	mid := backend.KeyGroupRange{Start: 20, End: 40}
	log.reset()
	c := e.open(mid, func(o *backend.Options, lo *Options) {
		small(o, lo)
		o.Restore, o.Store = []*backend.Handle{ha}, log
	})
	got, want := log.reset(), wantReads(ha, mid)
	sameReads(t, "restore "+mid.String(), got, want)
	sameDump(t, dump(t, c), restrict(t, all, mid))
	rs := c.RestoreStats()
	if rs.FilesSkipped == 0 || rs.BytesDownloaded != sumSizes(want) || rs.BytesDownloaded+rs.BytesSkipped != ha.FullSize {
		t.Errorf("restore %s: stats %+v, want %d bytes downloaded of %d", mid, rs, sumSizes(want), ha.FullSize)
	}
	if rs.ClipSpans != 2 {
		t.Errorf("restore %s: %d excise calls, want 2 (below and above)", mid, rs.ClipSpans)
	}
	// The bytes clipped are those of downloaded tables: the skipped files,
	// excised unread, are not counted.
	if rs.BytesClipped <= 0 || rs.BytesClipped > rs.BytesDownloaded {
		t.Errorf("restore %s: %d bytes clipped, want some and at most the %d downloaded (%d skipped)", mid, rs.BytesClipped, rs.BytesDownloaded, rs.BytesSkipped)
	}
	if limit := ha.FullSize / 2; rs.BytesDownloaded > limit {
		t.Errorf("restore %s of 64 key groups downloaded %d of %d bytes", mid, rs.BytesDownloaded, ha.FullSize)
	}
	t.Logf("restore %s: downloaded %d of %d bytes (%d of %d files)", mid, rs.BytesDownloaded, ha.FullSize,
		rs.FilesDownloaded, rs.FilesDownloaded+rs.FilesSkipped)
	// FLINK-34050: local disk holds about the kept share, not the handle.
	if onDisk, limit := sstBytes(t, c), int64(float64(ha.FullSize)*(float64(mid.Len())/64+0.15)); onDisk > limit {
		t.Errorf("restore %s keeps %d SST bytes on disk, over %d", mid, onDisk, limit)
	}

	// Two handles: the base (the larger overlap) and the other one's files
	// grafted in.
	across := backend.KeyGroupRange{Start: 50, End: 90}
	c2 := e.open(across, func(o *backend.Options, lo *Options) {
		small(o, lo)
		o.Restore, o.Store = []*backend.Handle{ha, hb}, log
	})
	got = log.reset()
	want = wantReads(hb, backend.KeyGroupRange{Start: 64, End: 90})
	for p, n := range wantReads(ha, backend.KeyGroupRange{Start: 50, End: 63}) {
		want[p] = n
	}
	sameReads(t, "restore "+across.String(), got, want)
	sameDump(t, dump(t, c2), restrict(t, all, across))
	rs = c2.RestoreStats()
	if rs.Graft == 0 || rs.BytesCopied != 0 || rs.ClipSpans != 2 {
		t.Errorf("restore %s: stats %+v: want the other handle's files grafted, nothing rewritten, one excise of the base and one of the other store", across, rs)
	}
	if onDisk, limit := sstBytes(t, c2), int64(float64(ha.FullSize+hb.FullSize)*(float64(across.Len())/128+0.15)); onDisk > limit {
		t.Errorf("restore %s keeps %d SST bytes on disk, over %d", across, onDisk, limit)
	}
	// Claim mode: the next checkpoint references the SSTs of both handles
	// that the restore kept (grafted ones under their new local names)
	// and uploads only new ones.
	must(t, c2.Put("v", key(across.Start, "new"), []byte("n")))
	h2 := checkpoint(t, c2, 2)
	reused := map[*backend.Handle]int{}
	for _, f := range h2.Files {
		for _, h := range []*backend.Handle{ha, hb} {
			if sharedPaths(h)[f.Path] {
				reused[h]++
			}
		}
	}
	if reused[ha] == 0 || reused[hb] == 0 {
		t.Errorf("checkpoint after the restore references %d SSTs of the base and %d of the other handle, want some of both:\n%s",
			reused[hb], reused[ha], fileNames(h2))
	}
	if h2.CheckpointedSize > h2.FullSize/3 {
		t.Errorf("checkpoint after the restore uploaded %d of %d bytes", h2.CheckpointedSize, h2.FullSize)
	}
	checkBounds(t, e, h2)
	sameDump(t, dump(t, e.open(across, func(o *backend.Options, _ *Options) { o.Restore = []*backend.Handle{h2} })), dump(t, c2))
}

// withoutBounds returns a copy of h as a handle written before FileRef had
// key-group bounds.
func withoutBounds(h *backend.Handle) *backend.Handle {
	c := *h
	c.Files = append([]backend.FileRef(nil), h.Files...)
	for i := range c.Files {
		c.Files[i].KeyGroupBounds = nil
	}
	return &c
}

// TestOldHandlesWithoutBounds: a handle without key-group bounds (written
// before they existed) still restores into a sub-range, downloading every
// file; the next checkpoint references the restored SSTs and adds their
// bounds.
func TestOldHandlesWithoutBounds(t *testing.T) {
	e := newEnv(t)
	log := &readLog{Store: e.store}
	small := func(_ *backend.Options, lo *Options) { lo.TargetFileSize = 64 << 10; lo.MemTableSize = 256 << 10 }
	a := e.open(full(), small)
	manySSTs(t, a, 8000, "a")
	h := checkpoint(t, a, 1)
	old := withoutBounds(h)
	enc, err := backend.EncodeHandle(old)
	must(t, err)
	if strings.Contains(string(enc), "keyGroupBounds") {
		t.Fatal("a handle without bounds encodes the field")
	}
	old, err = backend.DecodeHandle(enc)
	must(t, err)
	r := backend.KeyGroupRange{Start: 30, End: 60}
	log.reset()
	c := e.open(r, func(o *backend.Options, lo *Options) {
		small(o, lo)
		o.Restore, o.Store = []*backend.Handle{old}, log
	})
	sameReads(t, "restore of an old handle", log.reset(), wantReads(old, r))
	if rs := c.RestoreStats(); rs.BytesSkipped != 0 || rs.BytesDownloaded != h.FullSize {
		t.Errorf("old handle: stats %+v, want every byte downloaded", rs)
	}
	sameDump(t, dump(t, c), restrict(t, dump(t, a), r))
	h2 := checkpoint(t, c, 2)
	old1 := sharedPaths(h)
	reused := 0
	for _, f := range h2.Files {
		if old1[f.Path] {
			reused++
		}
	}
	if reused == 0 {
		t.Fatalf("checkpoint after restoring an old handle references none of its SSTs:\n%s", fileNames(h2))
	}
	checkBounds(t, e, h2)
}

// lie returns a copy of h whose first SST meeting r claims bounds outside
// r, and that SST's name.
func lie(t *testing.T, h *backend.Handle, r backend.KeyGroupRange) (*backend.Handle, string) {
	t.Helper()
	c := *h
	c.Files = append([]backend.FileRef(nil), h.Files...)
	for i, f := range c.Files {
		if isSST(f.LocalName) && meets(f, r) {
			out := backend.KeyGroupRange{Start: 0, End: 0}
			if r.Start == 0 {
				out = backend.KeyGroupRange{Start: 127, End: 127}
			}
			c.Files[i].KeyGroupBounds = &out
			return &c, f.Path
		}
	}
	t.Fatalf("no SST of %s meets %s", h.Task, r)
	return nil, ""
}

// TestLyingBounds: bounds that hide an SST a restore needs make the
// restore fail with a corruption error, never return partial state, for
// the base and for another handle alike.
func TestLyingBounds(t *testing.T) {
	e := newEnv(t)
	small := func(o *backend.Options, lo *Options) { lo.TargetFileSize = 64 << 10; lo.MemTableSize = 256 << 10 }
	low := backend.KeyGroupRange{Start: 0, End: 63}
	high := backend.KeyGroupRange{Start: 64, End: 127}
	a := e.open(low, small)
	manySSTs(t, a, 8000, "a")
	ha := checkpoint(t, a, 1)
	b := e.open(high, func(o *backend.Options, lo *Options) { small(o, lo); o.Task.Subtask = 1 })
	manySSTs(t, b, 8000, "b")
	hb := checkpoint(t, b, 1)

	mid := backend.KeyGroupRange{Start: 20, End: 40}
	liar, _ := lie(t, ha, mid)
	across := backend.KeyGroupRange{Start: 50, End: 90}
	liarB, _ := lie(t, hb, backend.KeyGroupRange{Start: 64, End: 90})
	liarA, _ := lie(t, ha, backend.KeyGroupRange{Start: 50, End: 63})
	for _, c := range []struct {
		what    string
		r       backend.KeyGroupRange
		handles []*backend.Handle
	}{
		{"base alone", mid, []*backend.Handle{liar}},
		{"base of two", across, []*backend.Handle{ha, liarB}},
		{"other handle", across, []*backend.Handle{liarA, hb}},
	} {
		e.n++
		_, err := Open(backend.Options{Task: testTask, KeyGroups: c.r, States: testStates, Store: e.store, Restore: c.handles},
			Options{Dir: fmt.Sprintf("%s/liar-%d", e.root, e.n), Logger: silentLogger{}})
		if !errors.Is(err, backend.ErrCorrupt) {
			t.Errorf("%s: restore with lying bounds: %v, want a corruption error", c.what, err)
		}
		t.Logf("%s: %v", c.what, err)
	}
}

// TestKeyGroupBoundsOfSSTs: bounds cover range deletions and keys of every
// shape, and handles refuse bounds that are no range.
func TestKeyGroupBoundsOfSSTs(t *testing.T) {
	for _, c := range []struct {
		key        []byte
		at, before int
	}{
		{[]byte{}, 0, -1},
		{[]byte{0}, 0, -1},
		{[]byte{0, 5}, 5, 4},
		{[]byte{0, 5, 0}, 5, 5},
		{[]byte{1}, 256, 255},
		{[]byte{0xff, 0xff, 1}, 0xffff, 0xffff},
	} {
		if got := keyGroupAtOrBelow(c.key); got != c.at {
			t.Errorf("keyGroupAtOrBelow(%x) = %d, want %d", c.key, got, c.at)
		}
		if got := lastKeyGroupBelow(c.key); got != c.before {
			t.Errorf("lastKeyGroupBelow(%x) = %d, want %d", c.key, got, c.before)
		}
	}

	e := newEnv(t)
	b := e.open(full(), nil)
	for kg := 5; kg <= 7; kg++ {
		must(t, b.Put("v", key(kg, "k"), []byte("v")))
	}
	must(t, b.DB().Flush())
	// A range deletion alone reaching further than the keys.
	must(t, b.DB().DeleteRange(kvstate.KeyGroupPrefix(30), kvstate.KeyGroupPrefix(41), pebble.NoSync))
	must(t, b.DB().Flush())
	h := checkpoint(t, b, 1)
	var got []string
	for _, f := range h.Files {
		if isSST(f.LocalName) {
			got = append(got, f.KeyGroupBounds.String())
		}
	}
	if strings.Join(got, " ") != "[5,7] [30,40]" {
		t.Errorf("bounds of the SSTs: %v, want [5,7] [30,40]", got)
	}

	for _, bad := range []backend.KeyGroupRange{{Start: -1, End: 3}, {Start: 5, End: 4}, {Start: 0, End: 1 << 16}} {
		c := withoutBounds(h)
		c.Files[0].KeyGroupBounds = &bad
		if _, err := backend.EncodeHandle(c); !errors.Is(err, backend.ErrCorrupt) {
			t.Errorf("bounds %+v accepted: %v", bad, err)
		}
	}
}

var fuzzBounds struct {
	once   sync.Once
	store  *memstore.Store
	hs     []*backend.Handle
	want   map[string]string
	failed error
}

// fuzzBoundsCheckpoints builds, once per process, two checkpoints (key
// groups [0,63] and [64,127]) of many small SSTs each.
func fuzzBoundsCheckpoints(t *testing.T) (*memstore.Store, []*backend.Handle, map[string]string) {
	fuzzBounds.once.Do(func() {
		e := &env{t: t, store: memstore.New(), root: "/fb", fs: vfs.NewMem()}
		fuzzBounds.store = e.store.(*memstore.Store)
		fuzzBounds.want = map[string]string{}
		for i, r := range []backend.KeyGroupRange{{Start: 0, End: 63}, {Start: 64, End: 127}} {
			b, err := Open(backend.Options{Task: backend.TaskID{Job: "job", Operator: "op", Subtask: i}, KeyGroups: r,
				States: testStates, Store: e.store}, Options{Dir: fmt.Sprintf("/fb/%d", i), FS: e.fs,
				TargetFileSize: 64 << 10, MemTableSize: 256 << 10, Logger: silentLogger{}})
			if err != nil {
				fuzzBounds.failed = err
				return
			}
			manySSTs(t, b, 3000, fmt.Sprint(i))
			for k, v := range dump(t, b) {
				fuzzBounds.want[k] = v
			}
			fuzzBounds.hs = append(fuzzBounds.hs, checkpoint(t, b, 1))
			fuzzBounds.failed = b.Close()
		}
	})
	if fuzzBounds.failed != nil {
		t.Fatal(fuzzBounds.failed)
	}
	return fuzzBounds.store, fuzzBounds.hs, fuzzBounds.want
}

// FuzzRestoreForgedBounds forges the key-group bounds of one file of one
// of two checkpoints and restores a random range from both: the restore
// either fails with a corruption error or holds exactly the range's
// entries. It never panics, and never returns partial state because a
// file the bounds hid was needed.
func FuzzRestoreForgedBounds(f *testing.F) {
	f.Add(uint8(0), false, uint16(0), uint16(0), uint8(20), uint8(20))
	f.Add(uint8(3), true, uint16(127), uint16(127), uint8(50), uint8(40))
	f.Add(uint8(5), false, uint16(100), uint16(90), uint8(0), uint8(127))
	f.Add(uint8(7), true, uint16(0), uint16(65535), uint8(60), uint8(10))
	f.Add(uint8(2), false, uint16(40000), uint16(40001), uint8(10), uint8(100))
	f.Fuzz(func(t *testing.T, file uint8, second bool, start, end uint16, rStart, rLen uint8) {
		store, orig, want := fuzzBoundsCheckpoints(t)
		hs := []*backend.Handle{orig[0], orig[1]}
		which := 0
		if second {
			which = 1
		}
		c := *hs[which]
		c.Files = append([]backend.FileRef(nil), c.Files...)
		i := int(file) % len(c.Files)
		c.Files[i].KeyGroupBounds = &backend.KeyGroupRange{Start: int(start), End: int(end)}
		hs[which] = &c
		lo := int(rStart) % 128
		r := backend.KeyGroupRange{Start: lo, End: min(127, lo+int(rLen))}
		b, err := Open(backend.Options{Task: testTask, KeyGroups: r, States: testStates, Store: store, Restore: hs},
			Options{Dir: "/r", FS: vfs.NewMem(), Logger: silentLogger{}})
		if err != nil {
			if !errors.Is(err, backend.ErrCorrupt) {
				t.Fatalf("forged bounds %d..%d on %s: %v, want a corruption error", start, end, c.Files[i].LocalName, err)
			}
			return
		}
		defer b.Close()
		sameDump(t, dump(t, b), restrict(t, want, r))
	})
}

// FuzzRescaleDamagedFile damages one file of one of two checkpoints and
// restores a range from both (the other one is grafted into the base).
// With the handle as written, a needed file fails the restore with a
// corruption error naming it, and a skipped one goes unnoticed (it is not
// needed). With the CRC forged to match the damage, the damage reaches
// Pebble: the restore may fail or succeed, but never panics, and a store
// that opens can be read and closed.
func FuzzRescaleDamagedFile(f *testing.F) {
	for file := uint8(0); file < 20; file += 3 {
		f.Add(file, file%2 == 0, uint32(file)*997, byte(0x10), file%3 == 0)
	}
	f.Fuzz(func(t *testing.T, file uint8, second bool, off uint32, xor byte, forge bool) {
		orig, hs0, want := fuzzBoundsCheckpoints(t)
		ctx := context.Background()
		store := memstore.New()
		must(t, tiered.Walk(ctx, orig, "", func(o tiered.ObjectInfo) error {
			data, err := tiered.ReadAll(ctx, orig, o.Name, 0)
			if err == nil {
				err = tiered.PutBytes(ctx, store, o.Name, data)
			}
			return err
		}))
		hs := []*backend.Handle{hs0[0], hs0[1]}
		which := 0
		if second {
			which = 1
		}
		c := *hs[which]
		c.Files = append([]backend.FileRef(nil), c.Files...)
		hs[which] = &c
		ref := &c.Files[int(file)%len(c.Files)]
		data, err := tiered.ReadAll(ctx, store, ref.Path, 0)
		must(t, err)
		if len(data) == 0 {
			return
		}
		if xor == 0 {
			xor = 1
		}
		data[int(off)%len(data)] ^= xor
		must(t, tiered.PutBytes(ctx, store, ref.Path, data))
		if forge {
			ref.CRC32C = frame.Checksum(data)
		}
		r := backend.KeyGroupRange{Start: 32, End: 100}
		runs := []backend.KeyGroupRange{{Start: 32, End: 63}, {Start: 64, End: 100}}
		b, err := Open(backend.Options{Task: testTask, KeyGroups: r, States: testStates, Store: store, Restore: hs},
			Options{Dir: "/r", FS: vfs.NewMem(), Logger: silentLogger{}})
		needed := neededFor(runs[which : which+1])(*ref)
		switch {
		case !forge && needed:
			if !errors.Is(err, backend.ErrCorrupt) || !strings.Contains(err.Error(), ref.Path) {
				t.Fatalf("damaged %s: %v, want a corruption error naming it", ref.Path, err)
			}
		case !forge:
			if err != nil {
				t.Fatalf("damaged %s, which the restore does not need: %v", ref.Path, err)
			}
			sameDump(t, dump(t, b), restrict(t, want, r))
			must(t, b.Close())
		case err == nil:
			_ = engine{b.db}.Scan(nil, nil, func(k, v []byte) (bool, error) { return true, nil })
			_ = b.Close()
		}
	})
}
