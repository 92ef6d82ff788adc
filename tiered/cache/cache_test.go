package cache_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/cache"
	"github.com/statedhq/stated/tiered/fault"
	"github.com/statedhq/stated/tiered/memstore"
	"github.com/statedhq/stated/tiered/s3store"
	"github.com/statedhq/stated/tiered/s3store/s3test"
	"github.com/statedhq/stated/tiered/storetest"
)

// counting counts the calls that reach the remote.
type counting struct {
	tiered.Store
	gets, puts atomic.Int64
}

func (c *counting) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	c.gets.Add(1)
	return c.Store.Get(ctx, name)
}

func (c *counting) GetRange(ctx context.Context, name string, off, n int64) (io.ReadCloser, error) {
	c.gets.Add(1)
	return c.Store.GetRange(ctx, name, off, n)
}

func (c *counting) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	c.puts.Add(1)
	return c.Store.Put(ctx, name, r, size)
}

// Closing the cache closes the remote; tests that reopen keep the remote.
func (c *counting) Close() error { return nil }

func newCache(t testing.TB, remote tiered.Store, dir string, max int64) *cache.Store {
	t.Helper()
	c, err := cache.New(remote, cache.Options{Dir: dir, MaxBytes: max})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// dirBytes is the size of the cached files on disk.
func dirBytes(t testing.TB, dir string) int64 {
	var n int64
	filepath.WalkDir(filepath.Join(dir, "objects"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

func memHarness(max int64) storetest.Harness {
	return storetest.Harness{
		New: func(t testing.TB) tiered.Store {
			dir := t.TempDir()
			c := newCache(t, &counting{Store: memstore.New()}, dir, max)
			t.Cleanup(func() {
				if got := dirBytes(t, dir); got > max {
					t.Errorf("cache dir holds %d bytes, bound %d", got, max)
				}
			})
			return c
		},
		Reopen: func(t testing.TB, old tiered.Store) tiered.Store {
			c := old.(*cache.Store)
			return newCache(t, c.Remote(), c.Dir(), max)
		},
		LargeSize: 3 << 20,
		// Listing is the remote's; a few hundred keys exercise the cache's
		// write and delete paths at volume.
		ManyKeys: 200,
	}
}

func TestAcceptanceLargeCache(t *testing.T) {
	storetest.Run(t, memHarness(64<<20))
}

// A cache smaller than many objects: constant eviction, and large objects
// bypass it.
func TestAcceptanceTinyCache(t *testing.T) {
	storetest.Run(t, memHarness(256<<10))
}

func TestAcceptanceOverS3(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t testing.TB) tiered.Store {
			opts, _ := s3test.Options(t)
			opts.PartSize = s3store.MinPartSize
			s, err := s3store.Open(context.Background(), opts)
			if err != nil {
				t.Fatal(err)
			}
			return newCache(t, s, t.TempDir(), 32<<20)
		},
		PartSize:             s3store.MinPartSize,
		ConditionalMultipart: s3test.Real(),
		ManyKeys:             200,
	})
}

// The fault wrapper around the cache, and faults in the remote under it.
func TestUnderFaults(t *testing.T) {
	storetest.RunUnderFaults(t, memHarness(1<<20), 4)
}

func TestFaultyRemote(t *testing.T) {
	for _, max := range []int64{64 << 10, 8 << 20} {
		t.Run(fmt.Sprint(max), func(t *testing.T) {
			storetest.RunModel(t, storetest.Harness{New: func(t testing.TB) tiered.Store {
				return newCache(t, fault.New(memstore.New(), storetest.DefaultFaults(5)), t.TempDir(), max)
			}}, storetest.ModelConfig{Seed: 5, Ops: 600})
		})
	}
}

// Silent truncation in the remote never becomes a cached copy: the size
// check of the download catches it.
func TestSilentTruncationNotCached(t *testing.T) {
	ctx := context.Background()
	base := memstore.New()
	data := storetest.Data(1, 100_000)
	tiered.PutBytes(ctx, base, "x", data)
	remote := fault.New(base, fault.Config{TruncateRate: 1, SilentTruncation: true})
	c := newCache(t, remote, t.TempDir(), 1<<20)
	if _, err := tiered.ReadAll(ctx, c, "x", 0); err == nil {
		t.Fatal("a truncated download was served")
	}
	if c.Cached("x") {
		t.Fatal("a truncated download was cached")
	}
	remote.SetConfig(fault.Config{})
	if b, err := tiered.ReadAll(ctx, c, "x", 0); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("after healing: %d bytes, %v", len(b), err)
	}
}

// Local recovery: a new cache on the same directory serves the objects
// from local files, verified, without reading the remote.
func TestLocalRecovery(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	remote := &counting{Store: memstore.New()}
	c := newCache(t, remote, dir, 1<<20)
	for i := range 5 {
		if err := tiered.PutBytes(ctx, c, fmt.Sprintf("chk/%d", i), storetest.Data(uint64(i), 10_000+i)); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	c = newCache(t, remote, dir, 1<<20)
	defer c.Close()
	if st := c.Stats(); st.Entries != 5 {
		t.Fatalf("index after restart: %+v", st)
	}
	for i := range 5 {
		b, err := tiered.ReadAll(ctx, c, fmt.Sprintf("chk/%d", i), 0)
		if err != nil || !bytes.Equal(b, storetest.Data(uint64(i), 10_000+i)) {
			t.Fatalf("chk/%d after restart: %d bytes, %v", i, len(b), err)
		}
	}
	if n := remote.gets.Load(); n != 0 {
		t.Fatalf("%d remote reads after a restart with every file local", n)
	}
	if st := c.Stats(); st.Hits != 5 || st.Misses != 0 {
		t.Fatalf("stats: %+v", st)
	}
}

// A Get that fills the cache from the remote is a miss, the next one a
// hit; Stat and GetRange count the same way.
func TestStatsCountMisses(t *testing.T) {
	ctx := context.Background()
	remote := memstore.New()
	if err := tiered.PutBytes(ctx, remote, "chk/a", storetest.Data(1, 5000)); err != nil {
		t.Fatal(err)
	}
	c := newCache(t, remote, t.TempDir(), 1<<20)
	defer c.Close()
	want := func(hits, misses int64) {
		t.Helper()
		if st := c.Stats(); st.Hits != hits || st.Misses != misses {
			t.Fatalf("stats %+v, want %d hits and %d misses", st, hits, misses)
		}
	}
	if _, err := c.Stat(ctx, "chk/a"); err != nil {
		t.Fatal(err)
	}
	want(0, 1)
	for range 2 {
		if _, err := tiered.ReadAll(ctx, c, "chk/a", 0); err != nil {
			t.Fatal(err)
		}
	}
	want(1, 2)
	rc, err := c.GetRange(ctx, "chk/a", 10, 10)
	if err != nil {
		t.Fatal(err)
	}
	rc.Close()
	if _, err := c.Stat(ctx, "chk/a"); err != nil {
		t.Fatal(err)
	}
	want(3, 2)
}

// cachedFiles are the copies in the cache directory dir (not their
// metadata files).
func cachedFiles(t *testing.T, dir string) []string {
	var out []string
	filepath.WalkDir(filepath.Join(dir, "objects"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasSuffix(p, ".meta") {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// A local copy that rots on disk is detected by its checksum and fetched
// again from the remote.
func TestCorruptCopyFallsBackToRemote(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	remote := &counting{Store: memstore.New()}
	c := newCache(t, remote, dir, 1<<20)
	data := storetest.Data(7, 50_000)
	tiered.PutBytes(ctx, c, "x", data)
	c.Close()
	files := cachedFiles(t, dir)
	if len(files) != 1 {
		t.Fatalf("cached files: %v", files)
	}
	// Flip one data byte, keeping the metadata intact.
	f, _ := os.OpenFile(files[0], os.O_RDWR, 0)
	f.WriteAt([]byte{data[1234] ^ 0xff}, 1234)
	f.Close()
	c = newCache(t, remote, dir, 1<<20)
	defer c.Close()
	b, err := tiered.ReadAll(ctx, c, "x", 0)
	if err != nil || !bytes.Equal(b, data) {
		t.Fatalf("read of a corrupt copy: %d bytes, %v", len(b), err)
	}
	if st := c.Stats(); st.Corrupt != 1 || remote.gets.Load() != 1 {
		t.Fatalf("stats %+v, remote gets %d", st, remote.gets.Load())
	}
	// The copy was replaced by a good one.
	c.Close()
	c = newCache(t, remote, dir, 1<<20)
	if b, _ := tiered.ReadAll(ctx, c, "x", 0); !bytes.Equal(b, data) || remote.gets.Load() != 1 {
		t.Fatalf("refetched copy not reused: remote gets %d", remote.gets.Load())
	}
	// Corruption while the cache runs: the streaming check fails the read
	// at the end instead of returning wrong bytes; the next read refetches.
	files = cachedFiles(t, dir)
	f, _ = os.OpenFile(files[0], os.O_RDWR, 0)
	f.WriteAt([]byte{data[10] ^ 0xff}, 10)
	f.Close()
	if _, err := tiered.ReadAll(ctx, c, "x", 0); !errors.Is(err, cache.ErrCorruptCopy) {
		t.Fatalf("read of a copy corrupted under a running cache: %v", err)
	}
	if b, err := tiered.ReadAll(ctx, c, "x", 0); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("read after the corrupt copy was dropped: %v", err)
	}
}

// Torn files and crash leftovers are removed when the cache opens.
func TestOpenCleansDirectory(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	remote := &counting{Store: memstore.New()}
	c := newCache(t, remote, dir, 1<<20)
	tiered.PutBytes(ctx, c, "good", []byte("good"))
	tiered.PutBytes(ctx, c, "torn", storetest.Data(1, 5000))
	c.Close()
	var torn string
	for _, p := range cachedFiles(t, dir) {
		if info, _ := os.Stat(p); info.Size() > 1000 {
			torn = p
		}
	}
	os.Truncate(torn, 3000)
	os.WriteFile(filepath.Join(dir, "objects", "zz"), []byte("junk"), 0o644)
	os.WriteFile(filepath.Join(dir, "tmp", "77"), []byte("partial"), 0o644)
	c = newCache(t, remote, dir, 1<<20)
	defer c.Close()
	if st := c.Stats(); st.Entries != 1 || !c.Cached("good") {
		t.Fatalf("after open: %+v", st)
	}
	if n := len(cachedFiles(t, dir)); n != 1 {
		t.Fatalf("%d files in the cache, want 1", n)
	}
	if _, err := os.Stat(filepath.Join(dir, "tmp", "77")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("temporary file survived")
	}
	if b, err := tiered.ReadAll(ctx, c, "torn", 0); err != nil || !bytes.Equal(b, storetest.Data(1, 5000)) {
		t.Fatalf("torn object from the remote: %v", err)
	}
	// A smaller bound on reopen evicts down to it.
	c.Close()
	c = newCache(t, remote, dir, 100)
	if st := c.Stats(); st.Bytes > 100 {
		t.Fatalf("reopened with a smaller bound: %+v", st)
	}
}

func TestLRUEviction(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	remote := &counting{Store: memstore.New()}
	// Room for three 1000-byte objects and their metadata, not four.
	c := newCache(t, remote, dir, 3*1100)
	defer c.Close()
	for _, n := range []string{"a", "b", "c"} {
		tiered.PutBytes(ctx, c, n, storetest.Data(1, 1000))
	}
	tiered.ReadAll(ctx, c, "a", 0) // a is now the most recent
	tiered.PutBytes(ctx, c, "d", storetest.Data(2, 1000))
	for n, want := range map[string]bool{"a": true, "b": false, "c": true, "d": true} {
		if c.Cached(n) != want {
			t.Errorf("cached(%s) = %v, want %v", n, !want, want)
		}
	}
	if st := c.Stats(); st.Evictions != 1 || st.Bytes > 3*1100 {
		t.Fatalf("stats: %+v", st)
	}
	// An object larger than the whole cache bypasses it.
	big := storetest.Data(3, 5000)
	if err := tiered.PutBytes(ctx, c, "big", big); err != nil {
		t.Fatal(err)
	}
	if b, err := tiered.ReadAll(ctx, c, "big", 0); err != nil || !bytes.Equal(b, big) || c.Cached("big") {
		t.Fatalf("bypassing object: %v, cached %v", err, c.Cached("big"))
	}
}

// Concurrent misses of one object download it once.
func TestConcurrentMissesFetchOnce(t *testing.T) {
	ctx := context.Background()
	remote := &counting{Store: memstore.New()}
	data := storetest.Data(4, 200_000)
	tiered.PutBytes(ctx, remote.Store, "x", data)
	slow := fault.New(remote, fault.Config{Latency: 20e6})
	c := newCache(t, slow, t.TempDir(), 1<<20)
	defer c.Close()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			b, err := tiered.ReadAll(ctx, c, "x", 0)
			if err != nil || !bytes.Equal(b, data) {
				t.Errorf("concurrent read: %v", err)
			}
		})
	}
	wg.Wait()
	if n := remote.gets.Load(); n != 1 {
		t.Fatalf("%d remote reads for 8 concurrent misses", n)
	}
}

// The bound holds under concurrent writes and reads of random sizes.
func TestBoundUnderConcurrency(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	const max = 300 << 10
	c := newCache(t, memstore.New(), dir, max)
	defer c.Close()
	var wg sync.WaitGroup
	var over atomic.Int64
	stop := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if b := c.Stats().Bytes; b > max {
				over.Store(b)
			}
		}
	})
	var workers sync.WaitGroup
	for w := range 6 {
		workers.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for i := range 80 {
				name := fmt.Sprintf("o/%d", r.IntN(40))
				switch r.IntN(3) {
				case 0:
					if err := tiered.PutBytes(ctx, c, name, storetest.Data(uint64(i), r.IntN(120<<10))); err != nil {
						t.Error(err)
					}
				case 1:
					if _, err := tiered.ReadAll(ctx, c, name, 0); err != nil && !tiered.IsNotFound(err) {
						t.Error(err)
					}
				case 2:
					if err := c.Delete(ctx, name); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	workers.Wait()
	close(stop)
	wg.Wait()
	if b := over.Load(); b != 0 {
		t.Fatalf("cache held %d bytes, bound %d", b, max)
	}
	st := c.Stats()
	if got := dirBytes(t, dir); got != st.Bytes || got > max {
		t.Fatalf("disk holds %d bytes, index says %d, bound %d", got, st.Bytes, max)
	}
}

func TestOptions(t *testing.T) {
	if _, err := cache.New(memstore.New(), cache.Options{MaxBytes: 1}); err == nil {
		t.Fatal("no directory accepted")
	}
	if _, err := cache.New(memstore.New(), cache.Options{Dir: t.TempDir()}); err == nil {
		t.Fatal("no bound accepted")
	}
}

// NoKeepOnWrite caches on read only.
func TestNoKeepOnWrite(t *testing.T) {
	ctx := context.Background()
	c, err := cache.New(memstore.New(), cache.Options{Dir: t.TempDir(), MaxBytes: 1 << 20, NoKeepOnWrite: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tiered.PutBytes(ctx, c, "x", []byte("x"))
	if c.Cached("x") {
		t.Fatal("cached on write")
	}
	tiered.ReadAll(ctx, c, "x", 0)
	if !c.Cached("x") {
		t.Fatal("not cached on read")
	}
}
