package lsm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/internal/frame"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// readCounter is a store that counts the Gets of every object.
type readCounter struct {
	tiered.Store
	mu   sync.Mutex
	gets map[string]int
}

func newReadCounter(s tiered.Store) *readCounter {
	return &readCounter{Store: s, gets: map[string]int{}}
}

func (s *readCounter) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	s.mu.Lock()
	s.gets[name]++
	s.mu.Unlock()
	return s.Store.Get(ctx, name)
}

func (s *readCounter) GetRange(ctx context.Context, name string, off, n int64) (io.ReadCloser, error) {
	s.mu.Lock()
	s.gets[name]++
	s.mu.Unlock()
	return s.Store.GetRange(ctx, name, off, n)
}

func (s *readCounter) counts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for k, v := range s.gets {
		out[k] = v
	}
	return out
}

func (s *readCounter) reset() {
	s.mu.Lock()
	s.gets = map[string]int{}
	s.mu.Unlock()
}

func openCache(t *testing.T, max int64) *DownloadCache {
	t.Helper()
	c, err := OpenDownloadCache(vfs.Default, filepath.Join(t.TempDir(), "cache"), max)
	must(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// blob is an object for direct fetch tests: its key and a get that writes
// its bytes and counts the calls.
type blob struct {
	key  cacheKey
	data []byte
	gets atomic.Int32
}

func newBlob(name string, size int) *blob {
	data := bytes.Repeat([]byte(name), size/len(name)+1)[:size]
	return &blob{key: cacheKey{path: name, crc: crc32.Checksum(data, frame.Table()), size: int64(size)}, data: data}
}

func (b *blob) get(path string) error {
	b.gets.Add(1)
	return os.WriteFile(path, b.data, 0o644)
}

func checkFile(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	must(t, err)
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: %d bytes, want %d (content differs)", path, len(got), len(want))
	}
}

// cachedBytes is the size of the files in the cache's directory.
func cachedBytes(t *testing.T, c *DownloadCache) int64 {
	t.Helper()
	ents, err := os.ReadDir(c.dir)
	must(t, err)
	var n int64
	for _, e := range ents {
		info, err := e.Info()
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		must(t, err)
		n += info.Size()
	}
	return n
}

// TestDownloadCacheSingleflight: restores asking for the same file at once
// download it once; every one of them gets the bytes.
func TestDownloadCacheSingleflight(t *testing.T) {
	c := openCache(t, 1<<20)
	o := newBlob("object-a", 10_000)
	release := make(chan struct{})
	slowGet := func(path string) error {
		<-release // every caller is waiting or downloading
		return o.get(path)
	}
	dir := t.TempDir()
	const n = 8
	var wg sync.WaitGroup
	hits := make([]bool, n)
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hits[i], errs[i] = c.fetch(context.Background(), o.key, filepath.Join(dir, fmt.Sprint(i)), i%2 == 0, slowGet)
		}()
	}
	// Release the download once every other fetch waits for it.
	for c.Stats().Waits < n-1 {
		runtime.Gosched()
	}
	close(release)
	wg.Wait()
	nhits := 0
	for i := 0; i < n; i++ {
		must(t, errs[i])
		checkFile(t, filepath.Join(dir, fmt.Sprint(i)), o.data)
		if hits[i] {
			nhits++
		}
	}
	if g := o.gets.Load(); g != 1 || nhits != n-1 {
		t.Fatalf("%d downloads and %d hits for %d concurrent fetches, want 1 and %d", g, nhits, n, n-1)
	}
}

// TestDownloadCacheFailedDownloadIsRetried: a failed or cancelled download
// leaves nothing behind; the next fetch (or a waiter) downloads again.
func TestDownloadCacheFailedDownloadIsRetried(t *testing.T) {
	c := openCache(t, 1<<20)
	o := newBlob("object-f", 1000)
	dir := t.TempDir()
	boom := errors.New("store down")
	if _, err := c.fetch(context.Background(), o.key, filepath.Join(dir, "1"), true, func(string) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("fetch: %v, want %v", err, boom)
	}
	if s := c.Stats(); s.Files != 0 || s.Bytes != 0 || cachedBytes(t, c) != 0 {
		t.Fatalf("after a failed download the cache holds %+v (%d bytes on disk)", s, cachedBytes(t, c))
	}
	hit, err := c.fetch(context.Background(), o.key, filepath.Join(dir, "2"), true, o.get)
	must(t, err)
	if hit || o.gets.Load() != 1 {
		t.Fatalf("hit=%v, %d downloads", hit, o.gets.Load())
	}
	checkFile(t, filepath.Join(dir, "2"), o.data)
}

// TestDownloadCacheBound: the cache never holds more than its bound (files
// being downloaded count), evicts the least recently used file, and
// downloads a file that cannot fit straight to its destination.
func TestDownloadCacheBound(t *testing.T) {
	const max = 3000
	c := openCache(t, max)
	dir := t.TempDir()
	n := 0
	fetch := func(o *blob) bool {
		t.Helper()
		n++
		dst := filepath.Join(dir, fmt.Sprint(n))
		hit, err := c.fetch(context.Background(), o.key, dst, true, o.get)
		must(t, err)
		checkFile(t, dst, o.data)
		if s := c.Stats(); s.Bytes > max || cachedBytes(t, c) > max {
			t.Fatalf("cache holds %d bytes (%d on disk), bound %d", s.Bytes, cachedBytes(t, c), max)
		}
		return hit
	}
	a, b, cc, d := newBlob("a", 1000), newBlob("b", 1000), newBlob("c", 1000), newBlob("d", 1000)
	for _, o := range []*blob{a, b, cc} {
		if fetch(o) {
			t.Fatalf("%s: hit on first fetch", o.key.path)
		}
	}
	if !fetch(a) { // a is now the most recently used
		t.Fatal("a: miss while cached")
	}
	fetch(d) // evicts b
	if fetch(b) {
		t.Fatal("b: hit after it should have been evicted")
	}
	// b evicted c (the least recently used now); a is still there.
	if !fetch(a) || !fetch(d) || !fetch(b) {
		t.Fatal("a, d or b evicted instead of the least recently used")
	}
	if got := a.gets.Load() + b.gets.Load() + cc.gets.Load() + d.gets.Load(); got != 5 {
		t.Fatalf("%d downloads, want 5", got)
	}
	big := newBlob("big", max+1)
	if fetch(big) || fetch(big) || big.gets.Load() != 2 {
		t.Fatalf("a file over the bound: %d downloads, want 2 (not cached)", big.gets.Load())
	}

	// Many concurrent fetches of files of mixed sizes: the bound holds at
	// every moment (checked inside every download).
	var objs []*blob
	for i := 0; i < 20; i++ {
		objs = append(objs, newBlob(fmt.Sprintf("m%02d", i), 300+137*i))
	}
	var over atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 40; i++ {
				o := objs[(i*7+w*3)%len(objs)]
				dst := filepath.Join(dir, fmt.Sprintf("w%d-%d", w, i))
				_, err := c.fetch(context.Background(), o.key, dst, w%2 == 0, func(path string) error {
					if s := c.Stats(); s.Bytes > max {
						over.Store(s.Bytes)
					}
					return o.get(path)
				})
				if err != nil {
					t.Error(err)
					return
				}
				if got, err := os.ReadFile(dst); err != nil || !bytes.Equal(got, o.data) {
					t.Errorf("%s: wrong content (%v)", dst, err)
				}
			}
		}()
	}
	wg.Wait()
	if v := over.Load(); v != 0 {
		t.Fatalf("the cache held %d bytes during downloads, bound %d", v, max)
	}
	if s := c.Stats(); s.Bytes > max || cachedBytes(t, c) > max || s.Evictions == 0 {
		t.Fatalf("after concurrent fetches: %+v, %d bytes on disk", s, cachedBytes(t, c))
	}
}

// TestDownloadCacheRefetchesCorruptCopy: a cached copy that was damaged or
// removed is dropped and downloaded again; the restore gets good bytes.
func TestDownloadCacheRefetchesCorruptCopy(t *testing.T) {
	for _, link := range []bool{true, false} {
		t.Run(fmt.Sprintf("link=%v", link), func(t *testing.T) {
			c := openCache(t, 1<<20)
			o := newBlob("object-c", 5000)
			dir := t.TempDir()
			_, err := c.fetch(context.Background(), o.key, filepath.Join(dir, "1"), false, o.get)
			must(t, err)
			cached := filepath.Join(c.dir, c.entries[o.key].name)
			bad := append([]byte(nil), o.data...)
			bad[100] ^= 1
			must(t, os.WriteFile(cached, bad, 0o644))
			hit, err := c.fetch(context.Background(), o.key, filepath.Join(dir, "2"), link, o.get)
			must(t, err)
			checkFile(t, filepath.Join(dir, "2"), o.data)
			if hit || o.gets.Load() != 2 || c.Stats().Corrupt != 1 {
				t.Fatalf("corrupt copy: hit=%v, %d downloads, stats %+v", hit, o.gets.Load(), c.Stats())
			}
			must(t, os.Remove(filepath.Join(c.dir, c.entries[o.key].name)))
			_, err = c.fetch(context.Background(), o.key, filepath.Join(dir, "3"), link, o.get)
			must(t, err)
			checkFile(t, filepath.Join(dir, "3"), o.data)
			if o.gets.Load() != 3 {
				t.Fatalf("removed copy: %d downloads, want 3", o.gets.Load())
			}
			hit, err = c.fetch(context.Background(), o.key, filepath.Join(dir, "4"), link, o.get)
			must(t, err)
			if !hit || o.gets.Load() != 3 {
				t.Fatalf("good copy: hit=%v, %d downloads", hit, o.gets.Load())
			}
		})
	}
}

// TestDownloadCacheLinksOnlyImmutableFiles: SSTs and blob files are hard
// links to the cached copy, everything else is a copy of its own.
func TestDownloadCacheLinksOnlyImmutableFiles(t *testing.T) {
	for name, want := range map[string]bool{"000012.sst": true, "000013.blob": true, "MANIFEST-000001": false,
		"OPTIONS-000003": false, "000004.log": false, "marker.manifest.000001.MANIFEST-000001": false} {
		if linkable(name) != want {
			t.Errorf("linkable(%q) = %v, want %v", name, !want, want)
		}
	}
	c := openCache(t, 1<<20)
	o := newBlob("object-l", 3000)
	dir := t.TempDir()
	for i, link := range []bool{true, false, true} {
		dst := filepath.Join(dir, fmt.Sprint(i))
		_, err := c.fetch(context.Background(), o.key, dst, link, o.get)
		must(t, err)
		a, err := os.Stat(dst)
		must(t, err)
		b, err := os.Stat(filepath.Join(c.dir, c.entries[o.key].name))
		must(t, err)
		if os.SameFile(a, b) != link {
			t.Fatalf("fetch %d (link %v): same file as the cached copy: %v", i, link, !link)
		}
	}
}

// TestDownloadCacheOpenClears: files of an earlier run are never reused.
func TestDownloadCacheOpenClears(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	must(t, os.MkdirAll(dir, 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "1"), []byte("stale"), 0o644))
	c, err := OpenDownloadCache(nil, dir, 1<<20)
	must(t, err)
	defer c.Close()
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		t.Fatalf("cache dir after open: %v entries, err %v", len(ents), err)
	}
	if _, err := OpenDownloadCache(nil, dir, 0); !errors.Is(err, backend.ErrInvalidArgument) {
		t.Fatalf("bound 0: %v", err)
	}
}

// TestRestoresShareDownloads: several instances restoring (sub-ranges of)
// one checkpoint at once, with a shared cache, read every file of it from
// the store at most once, and each holds exactly its key groups. A
// damaged cached copy is downloaded again.
func TestRestoresShareDownloads(t *testing.T) {
	e := newEnv(t)
	store := newReadCounter(memstore.New())
	e.store = store
	b := e.open(full(), func(_ *backend.Options, lo *Options) {
		lo.TargetFileSize = 64 << 10
		lo.DisableAutomaticCompactions = true
	})
	fill(t, b, full(), 20_000, "a")
	must(t, b.DB().Compact(context.Background(), []byte{0}, []byte{0xff}, true))
	fill(t, b, full(), 3_000, "b") // L0 files spanning every key group
	h := checkpoint(t, b, 1)
	all := dump(t, b)
	c := openCache(t, 1<<30)
	ranges := []backend.KeyGroupRange{{Start: 0, End: 42}, {Start: 43, End: 85}, {Start: 86, End: 127}, {Start: 20, End: 100}, full()}
	restoreAll := func(round int) {
		store.reset()
		var wg sync.WaitGroup
		var mu sync.Mutex
		var downloaded, fromCache int
		for i, r := range ranges {
			wg.Add(1)
			go func() {
				defer wg.Done()
				opts := backend.Options{Task: testTask, KeyGroups: r, States: testStates, Store: e.store, Restore: []*backend.Handle{h}}
				inst, err := Open(opts, Options{Dir: fmt.Sprintf("%s/shared-%d-%d", e.root, round, i), DownloadCache: c})
				if err != nil {
					t.Errorf("restore %s: %v", r, err)
					return
				}
				defer inst.Close()
				got, want := dump(t, inst), restrict(t, all, r)
				if len(got) != len(want) {
					t.Errorf("restore %s: %d entries, want %d", r, len(got), len(want))
				}
				rs := inst.RestoreStats()
				mu.Lock()
				downloaded += rs.FilesDownloaded
				fromCache += rs.FilesFromCache
				mu.Unlock()
			}()
		}
		wg.Wait()
		for path, n := range store.counts() {
			if n > 1 {
				t.Errorf("round %d: %s read %d times from the store", round, path, n)
			}
		}
		t.Logf("round %d: %d files fetched by %d restores, %d from the cache, %d objects read", round, downloaded, len(ranges), fromCache, len(store.counts()))
		if fromCache == 0 || downloaded-fromCache > len(h.Files) {
			t.Errorf("round %d: %d of %d files from the cache", round, fromCache, downloaded)
		}
	}
	restoreAll(0)
	// Damage one cached SST: the next round downloads it (once) again.
	ssts := map[string]bool{}
	for _, f := range h.Files {
		ssts[f.Path] = linkable(f.LocalName)
	}
	c.mu.Lock()
	var victim *cacheEntry
	for k, e := range c.entries {
		if ssts[k.path] && (victim == nil || k.path < victim.key.path) {
			victim = e
		}
	}
	c.mu.Unlock()
	if victim == nil {
		t.Fatal("no SST in the cache")
	}
	f, err := os.OpenFile(filepath.Join(c.dir, victim.name), os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteAt([]byte("garbage!"), 4096)
	must(t, errors.Join(err, f.Close()))
	restoreAll(1)
	if got := store.counts()[victim.key.path]; got != 1 || c.Stats().Corrupt == 0 {
		t.Fatalf("damaged cached copy of %s: read %d times, stats %+v", victim.key.path, got, c.Stats())
	}
	if n := len(store.counts()); n != 1 {
		t.Errorf("round 1 read %d objects, want only the damaged one", n)
	}
}

// TestDownloadCacheOnOtherFS: a cache that cannot link into the instance's
// directory is refused.
func TestDownloadCacheOnOtherFS(t *testing.T) {
	c := openCache(t, 1<<20)
	opts := backend.Options{Task: testTask, KeyGroups: full(), States: testStates, Store: memstore.New()}
	if _, err := Open(opts, Options{Dir: "inst", FS: vfs.NewMem(), DownloadCache: c}); !errors.Is(err, backend.ErrInvalidArgument) {
		t.Fatalf("cache on vfs.Default, instance on a MemFS: %v", err)
	}
}
