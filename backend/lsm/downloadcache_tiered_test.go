package lsm

import (
	"context"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/internal/frame"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/cache"
	"github.com/statedhq/stated/tiered/memstore"
)

// TestRestoreThroughStoreCacheStoresSSTsOnce: restores from a remote store
// (memstore standing in for S3) behind a tiered/cache, with a download
// cache, keep each SST of the checkpoint on local disk once: the store
// cache's file, which the instances hard-link (one inode). The download
// cache's own directory stays empty, and every object is read from the
// remote at most once.
func TestRestoreThroughStoreCacheStoresSSTsOnce(t *testing.T) {
	e := newEnv(t)
	remote := memstore.New()
	e.store = remote
	b := e.open(full(), func(_ *backend.Options, lo *Options) {
		lo.TargetFileSize = 64 << 10
		lo.DisableAutomaticCompactions = true
	})
	fill(t, b, full(), 20_000, "a")
	must(t, b.DB().Compact(context.Background(), []byte{0}, []byte{0xff}, true))
	fill(t, b, full(), 3_000, "b")
	h := checkpoint(t, b, 1)
	all := dump(t, b)
	must(t, b.Close())

	// A fresh host: an empty store cache over the remote.
	counter := newReadCounter(remote)
	storeCacheDir := filepath.Join(e.root, "store-cache")
	sc, err := cache.New(counter, cache.Options{Dir: storeCacheDir, MaxBytes: 1 << 30})
	must(t, err)
	defer sc.Close()
	if _, ok := tiered.AsLocalCopies(tiered.WithPrefix(sc, "..")); ok {
		t.Fatal("a view with an invalid prefix (every use fails) offers local copies")
	}
	dc := openCache(t, 1<<30)
	ranges := []backend.KeyGroupRange{{Start: 0, End: 42}, {Start: 43, End: 85}, {Start: 86, End: 127}, {Start: 20, End: 100}}
	var wg sync.WaitGroup
	insts := make([]*Backend, len(ranges))
	for i, r := range ranges {
		wg.Go(func() {
			opts := backend.Options{Task: testTask, KeyGroups: r, States: testStates, Store: sc, Restore: []*backend.Handle{h}}
			inst, err := Open(opts, Options{Dir: fmt.Sprintf("%s/restored-%d", e.root, i), DownloadCache: dc, DisableAutomaticCompactions: true})
			if err != nil {
				t.Errorf("restore %s: %v", r, err)
				return
			}
			insts[i] = inst
		})
	}
	wg.Wait()
	for i, inst := range insts {
		if inst == nil {
			t.FailNow()
		}
		if got, want := dump(t, inst), restrict(t, all, ranges[i]); len(got) != len(want) {
			t.Fatalf("restore %s: %d entries, want %d", ranges[i], len(got), len(want))
		}
	}
	for path, n := range counter.counts() {
		if n > 1 {
			t.Errorf("%s read %d times from the remote", path, n)
		}
	}
	if n := cachedBytes(t, dc); n != 0 {
		t.Errorf("the download cache's own directory holds %d bytes; the store cache has the copies", n)
	}
	if st := dc.Stats(); st.Hits == 0 || st.Misses == 0 {
		t.Errorf("download cache stats %+v: want hits and misses through the store cache", st)
	}

	// Every file on disk, by inode, with the directories holding it.
	type inode struct{ dev, ino uint64 }
	files := map[inode][]string{}
	for _, dir := range []string{storeCacheDir, dc.dir, e.root} {
		must(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			st := info.Sys().(*syscall.Stat_t)
			k := inode{uint64(st.Dev), st.Ino}
			for _, q := range files[k] {
				if q == p {
					return nil // walked twice (e.root holds the other dirs)
				}
			}
			files[k] = append(files[k], p)
			return nil
		}))
	}
	var ssts, linked int
	for _, f := range h.Files {
		if !linkable(f.LocalName) {
			continue
		}
		ssts++
		var holders []inode
		for k, paths := range files {
			b, err := os.ReadFile(paths[0])
			must(t, err)
			if int64(len(b)) == f.Size && crc32.Checksum(b, frame.Table()) == f.CRC32C {
				holders = append(holders, k)
			}
		}
		if len(holders) != 1 {
			t.Errorf("SST %s is on disk in %d inodes (%v), want 1", f.Path, len(holders), holders)
			continue
		}
		paths := files[holders[0]]
		inCache := false
		for _, p := range paths {
			if rel, err := filepath.Rel(storeCacheDir, p); err == nil && rel[0] != '.' {
				inCache = true
			}
		}
		if !inCache {
			t.Errorf("SST %s is not the store cache's file: %v", f.Path, paths)
		}
		if len(paths) > 1 {
			linked++
		}
	}
	if ssts == 0 || linked == 0 {
		t.Fatalf("%d SSTs in the checkpoint, %d hard-linked into instances", ssts, linked)
	}
	t.Logf("%d SSTs, each on disk once; %d linked into instances", ssts, linked)
	for _, inst := range insts {
		must(t, inst.Close())
	}

	// Damage the store cache's copy of one SST: a restore that places it
	// finds the damage, drops the copy and reads the object again.
	var victim backend.FileRef
	for _, f := range h.Files {
		if linkable(f.LocalName) && f.Size > 5000 {
			victim = f
			break
		}
	}
	cp, err := sc.LocalCopy(context.Background(), victim.Path)
	must(t, err)
	f, err := os.OpenFile(cp.Path, os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteAt([]byte("garbage!"), 4096)
	must(t, err)
	must(t, f.Close())
	counter.reset()
	opts := backend.Options{Task: testTask, KeyGroups: full(), States: testStates, Store: sc, Restore: []*backend.Handle{h}}
	inst, err := Open(opts, Options{Dir: e.root + "/restored-again", DownloadCache: dc, DisableAutomaticCompactions: true})
	must(t, err)
	defer inst.Close()
	if got := dump(t, inst); len(got) != len(all) {
		t.Fatalf("restore after damage: %d entries, want %d", len(got), len(all))
	}
	if n := counter.counts()[victim.Path]; n != 1 || dc.Stats().Corrupt != 1 || sc.Stats().Corrupt != 1 {
		t.Fatalf("damaged copy of %s: read %d times from the remote; download cache %+v, store cache %+v",
			victim.Path, n, dc.Stats(), sc.Stats())
	}
}
