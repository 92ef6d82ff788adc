package lsm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered"
)

// newUploads returns the shared files h uploaded itself, by local name.
func newUploads(h *backend.Handle, before ...*backend.Handle) map[string]string {
	old := map[string]bool{}
	for _, b := range before {
		for p := range sharedPaths(b) {
			old[p] = true
		}
	}
	out := map[string]string{}
	for _, f := range h.Files {
		if f.Shared && !old[f.Path] {
			out[f.LocalName] = f.Path
		}
	}
	return out
}

// TestPlaceholders: uploads of a checkpoint that is aborted, or not yet
// confirmed, are never referenced by a later checkpoint (FLINK-25395); once
// confirmed they are.
func TestPlaceholders(t *testing.T) {
	e := newEnv(t)
	// Without compactions every flushed SST stays live, which is what
	// tempts a checkpoint to reference a file it must not.
	b := e.open(full(), func(_ *backend.Options, lo *Options) { lo.DisableAutomaticCompactions = true })
	fill(t, b, full(), 2000, "a")
	h1 := checkpoint(t, b, 1)
	b.NotifyCheckpointComplete(1)

	fill(t, b, full(), 50, "b")
	h2 := checkpoint(t, b, 2)
	up2 := newUploads(h2, h1)
	if len(up2) == 0 {
		t.Fatal("checkpoint 2 uploaded no SST")
	}
	b.NotifyCheckpointAborted(2)

	fill(t, b, full(), 50, "c")
	h3 := checkpoint(t, b, 3)
	p3 := sharedPaths(h3)
	for local, p := range up2 {
		if p3[p] {
			t.Fatalf("checkpoint 3 references %s (%s), uploaded by aborted checkpoint 2", p, local)
		}
	}
	// The SSTs checkpoint 2 uploaded are still live: checkpoint 3 uploads
	// them again, under new names.
	again := 0
	for _, f := range h3.Files {
		if _, ok := up2[f.LocalName]; ok {
			again++
		}
	}
	if again == 0 {
		t.Fatalf("test needs an SST that lives across checkpoints 2 and 3\n%s", fileNames(h3))
	}
	// Checkpoint 1 is confirmed: its SSTs are referenced.
	if n := len(sharedPaths(h1)); n == 0 || !subset(sharedPaths(h1), p3) {
		t.Fatalf("checkpoint 3 does not reference confirmed checkpoint 1\n1:\n%s\n3:\n%s", fileNames(h1), fileNames(h3))
	}

	// Neither confirmed nor aborted: still not referenced.
	up3 := newUploads(h3, h1)
	fill(t, b, full(), 50, "d")
	h4 := checkpoint(t, b, 4)
	p4 := sharedPaths(h4)
	for _, p := range up3 {
		if p4[p] {
			t.Fatalf("checkpoint 4 references %s of unconfirmed checkpoint 3", p)
		}
	}
	// Confirmations out of order: 4 then 3. The base is 4's files.
	b.NotifyCheckpointComplete(4)
	b.NotifyCheckpointComplete(3)
	h5 := checkpoint(t, b, 5)
	if !subset(p4, sharedPaths(h5)) {
		t.Fatalf("checkpoint 5 does not reference every file of confirmed checkpoint 4\n4:\n%s\n5:\n%s", fileNames(h4), fileNames(h5))
	}
	if h5.CheckpointedSize >= h5.FullSize/2 {
		t.Fatalf("checkpoint 5 uploaded %d of %d bytes with nothing new", h5.CheckpointedSize, h5.FullSize)
	}
	// A canonical snapshot in between does not move the base.
	p, err := b.CanonicalSnapshot(context.Background(), 6, e.store, "savepoints/x")
	must(t, err)
	_, err = p.Run(context.Background())
	must(t, err)
	b.NotifyCheckpointComplete(6)
	h7 := checkpoint(t, b, 7)
	if !subset(p4, sharedPaths(h7)) {
		t.Fatal("a canonical snapshot changed the incremental base")
	}
}

// otherStore is the same objects through another Store value.
type otherStore struct{ tiered.Store }

func subset(a, b map[string]bool) bool {
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

// TestRestoreAfterLocalLoss: restoring checkpoint N into an empty (or
// stale) local directory gives exactly the state at N, and keeps the
// incremental history (FLINK-37367): the next checkpoint uploads only new
// SSTs.
func TestRestoreAfterLocalLoss(t *testing.T) {
	e := newEnv(t)
	var dir string
	b := e.open(full(), func(_ *backend.Options, lo *Options) { dir = lo.Dir })
	fill(t, b, full(), 5000, "a")
	must(t, b.ListAppend("l", key(3, "x"), []byte("1")))
	p, err := b.Snapshot(context.Background(), 7)
	must(t, err)
	want := dump(t, b)
	fill(t, b, full(), 300, "after") // not in checkpoint 7
	must(t, b.ListAppend("l", key(3, "x"), []byte("2")))
	h, err := p.Run(context.Background())
	must(t, err)
	must(t, b.Close())
	must(t, e.fs.RemoveAll(dir))

	// Compactions off: the reuse check below needs the restored SSTs to
	// survive until checkpoint 8 (without fsyncs a compaction can rewrite
	// them first; it failed 6 runs in 40 under load).
	r := e.open(full(), func(o *backend.Options, lo *Options) {
		o.Restore = []*backend.Handle{h}
		lo.Dir = dir
		lo.DisableAutomaticCompactions = true
	})
	sameDump(t, dump(t, r), want)
	if l, _ := r.ListGet("l", key(3, "x")); len(l) != 1 {
		t.Fatalf("list = %q", l)
	}
	must(t, r.Put("v", key(1, "new"), []byte("n")))
	h2 := checkpoint(t, r, 8)
	if !subset(sharedPaths(h), sharedPaths(h2)) {
		t.Fatalf("first checkpoint after a claim restore does not reference the restored SSTs\nrestored:\n%s\nnew:\n%s", fileNames(h), fileNames(h2))
	}
	if h2.CheckpointedSize > h.FullSize/10 {
		t.Fatalf("first checkpoint after restore uploaded %d bytes of %d", h2.CheckpointedSize, h2.FullSize)
	}

	// A restore over a stale local directory starts from the handle only.
	r.NotifyCheckpointComplete(8)
	must(t, r.Close())
	r2 := e.open(full(), func(o *backend.Options, lo *Options) { o.Restore = []*backend.Handle{h}; lo.Dir = dir })
	sameDump(t, dump(t, r2), want)
}

// TestNoClaimRestoreSharesNothing: after a no-claim restore the first
// checkpoint uploads everything under new names.
func TestNoClaimRestoreSharesNothing(t *testing.T) {
	e := newEnv(t)
	b := e.open(full(), nil)
	fill(t, b, full(), 3000, "a")
	h := checkpoint(t, b, 1)
	for _, mod := range []func(o *backend.Options){
		func(o *backend.Options) { o.NoClaim = true },
		// Files read from another store cannot be referenced either.
		func(o *backend.Options) { o.RestoreStore = otherStore{e.store} },
	} {
		r := e.open(full(), func(o *backend.Options, _ *Options) { o.Restore = []*backend.Handle{h}; mod(o) })
		h2 := checkpoint(t, r, 2)
		for _, f := range h2.Files {
			if sharedPaths(h)[f.Path] {
				t.Fatalf("no-claim checkpoint references restored file %s", f.Path)
			}
		}
		if h2.CheckpointedSize != h2.FullSize {
			t.Fatalf("no-claim checkpoint uploaded %d of %d bytes", h2.CheckpointedSize, h2.FullSize)
		}
		r.NotifyCheckpointComplete(2)
		h3 := checkpoint(t, r, 3)
		if !subset(sharedPaths(h2), sharedPaths(h3)) {
			t.Fatal("after the first full checkpoint, incremental reuse does not resume")
		}
	}
}

// TestDamagedFiles: a corrupt, truncated or missing file fails the restore
// with an error that names the file and the checkpoint; nothing panics and
// no local store is left behind.
func TestDamagedFiles(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		damage func(e *env, f backend.FileRef)
		want   error
		what   string
	}{
		{"corrupt", func(e *env, f backend.FileRef) {
			data, err := tiered.ReadAll(ctx, e.store, f.Path, 0)
			must(e.t, err)
			data[len(data)/2] ^= 0x40
			must(e.t, tiered.PutBytes(ctx, e.store, f.Path, data))
		}, backend.ErrCorrupt, "CRC32C"},
		{"truncated", func(e *env, f backend.FileRef) {
			data, err := tiered.ReadAll(ctx, e.store, f.Path, 0)
			must(e.t, err)
			must(e.t, tiered.PutBytes(ctx, e.store, f.Path, data[:len(data)-7]))
		}, backend.ErrCorrupt, "truncated"},
		{"longer", func(e *env, f backend.FileRef) {
			data, err := tiered.ReadAll(ctx, e.store, f.Path, 0)
			must(e.t, err)
			must(e.t, tiered.PutBytes(ctx, e.store, f.Path, append(data, 0)))
		}, backend.ErrCorrupt, "longer"},
		{"missing", func(e *env, f backend.FileRef) {
			must(e.t, e.store.Delete(ctx, f.Path))
		}, backend.ErrNotFound, "local"},
	} {
		for _, shared := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/shared=%v", tc.name, shared), func(t *testing.T) {
				e := newEnv(t)
				b := e.open(full(), nil)
				fill(t, b, full(), 500, "a")
				h := checkpoint(t, b, 42)
				var victim backend.FileRef
				for _, f := range h.Files {
					if f.Shared == shared && f.Size > 8 {
						victim = f
					}
				}
				tc.damage(e, victim)
				var dir string
				opts := backend.Options{Task: testTask, KeyGroups: full(), States: testStates, Store: e.store,
					Restore: []*backend.Handle{h}}
				lo := Options{Dir: e.root + "/restore-target", FS: e.fs}
				dir = lo.Dir
				r, err := Open(opts, lo)
				if err == nil {
					r.Close()
					t.Fatal("restore from a damaged file succeeded")
				}
				if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), victim.Path) ||
					!strings.Contains(err.Error(), "checkpoint 42") || !strings.Contains(err.Error(), tc.what) {
					t.Fatalf("error %q: want one wrapping %q naming %s, checkpoint 42 and %q", err, tc.want, victim.Path, tc.what)
				}
				if _, err := e.fs.Stat(e.fs.PathJoin(dir, "db")); err == nil {
					t.Fatal("a failed restore left its local store behind")
				}
			})
		}
	}
}

// TestOpenContextCancelled: a restore stops when its context is done.
func TestOpenContextCancelled(t *testing.T) {
	e := newEnv(t)
	b := e.open(full(), nil)
	fill(t, b, full(), 100, "a")
	h := checkpoint(t, b, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := OpenContext(ctx, backend.Options{Task: testTask, KeyGroups: full(), States: testStates, Store: e.store,
		Restore: []*backend.Handle{h}}, Options{Dir: e.root + "/cancelled", FS: e.fs})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("restore with a cancelled context: %v", err)
	}
}

// TestTamperedHandle: a handle is input from disk; a local name that
// would escape the directory is refused before anything is written.
func TestTamperedHandle(t *testing.T) {
	e := newEnv(t)
	b := e.open(full(), nil)
	fill(t, b, full(), 100, "a")
	h := checkpoint(t, b, 1)
	for _, bad := range []string{"../escape.sst", "a/b.sst", "", ".hidden", "MANIFEST-000001"} {
		h2 := *h
		h2.Files = append([]backend.FileRef(nil), h.Files...)
		for i := range h2.Files {
			if h2.Files[i].Shared {
				h2.Files[i].LocalName = bad
				break
			}
		}
		_, err := Open(backend.Options{Task: testTask, KeyGroups: full(), States: testStates, Store: e.store,
			Restore: []*backend.Handle{&h2}}, Options{Dir: e.root + "/tampered", FS: e.fs})
		if !errors.Is(err, backend.ErrCorrupt) {
			t.Fatalf("local name %q: error %v, want corrupt", bad, err)
		}
	}
}

// TestFileCountStaysBounded: many checkpoints of a small, busy state do not
// pile up SSTs (FLINK-26050): compaction keeps the count near
// FullSize/TargetFileSize plus a few L0 files.
func TestFileCountStaysBounded(t *testing.T) {
	e := newEnv(t)
	b := e.open(full(), func(_ *backend.Options, lo *Options) { lo.TargetFileSize = 64 << 10 })
	var h *backend.Handle
	for i := 1; i <= 30; i++ {
		fill(t, b, full(), 500, fmt.Sprint("round", i))
		h = checkpoint(t, b, uint64(i))
		b.NotifyCheckpointComplete(uint64(i))
	}
	limit := int(2*h.FullSize/(64<<10)) + 20
	if len(h.Files) > limit {
		t.Fatalf("after 30 checkpoints the handle has %d files (%d bytes), over %d", len(h.Files), h.FullSize, limit)
	}
	t.Logf("after 30 checkpoints: %d files, %d bytes", len(h.Files), h.FullSize)
}

// gatedStore blocks shared-file uploads until the gate opens.
type gatedStore struct {
	tiered.Store
	entered chan struct{}
	gate    chan struct{}
}

func (g *gatedStore) PutIfAbsent(ctx context.Context, name string, r io.Reader, size int64) error {
	select {
	case g.entered <- struct{}{}:
	default:
	}
	<-g.gate
	return g.Store.PutIfAbsent(ctx, name, r, size)
}

// TestAbortDuringRun: a checkpoint aborted while its upload runs is never
// recorded, so not even a (protocol-violating) late confirmation makes its
// uploads the base.
func TestAbortDuringRun(t *testing.T) {
	e := newEnv(t)
	g := &gatedStore{Store: e.store, entered: make(chan struct{}, 1), gate: make(chan struct{})}
	b := e.open(full(), func(o *backend.Options, lo *Options) { o.Store = g; lo.DisableAutomaticCompactions = true })
	fill(t, b, full(), 300, "a")
	p, err := b.Snapshot(context.Background(), 1)
	must(t, err)
	done := make(chan *backend.Handle)
	go func() {
		h, err := p.Run(context.Background())
		if err != nil {
			t.Error(err)
		}
		done <- h
	}()
	<-g.entered
	b.NotifyCheckpointAborted(1)
	close(g.gate)
	h1 := <-done
	b.NotifyCheckpointComplete(1)
	h2 := checkpoint(t, b, 2)
	for p := range sharedPaths(h1) {
		if sharedPaths(h2)[p] {
			t.Fatalf("checkpoint 2 references %s of checkpoint 1, aborted during its upload", p)
		}
	}
}
