package storeurl_test

import (
	"context"
	"errors"
	"path"
	"testing"

	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/cache"
	"github.com/statedhq/stated/tiered/memstore"
	"github.com/statedhq/stated/tiered/storetest"
	"github.com/statedhq/stated/tiered/storeurl"
)

// The cache with some names routed around it is still a tiered.Store: the
// acceptance suite, with every other name uncached.
func TestAcceptancePartialCache(t *testing.T) {
	uncached := func(name string) bool { return len(name)%2 == 0 }
	storetest.Run(t, storetest.Harness{
		New: func(t testing.TB) tiered.Store {
			s, err := storeurl.Tier(memstore.New(), storeurl.Options{CacheDir: t.TempDir(), CacheBytes: 64 << 20, Uncached: uncached})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		LargeSize: 3 << 20,
		ManyKeys:  200,
	})
}

type cached interface {
	tiered.Store
	Cached(name string) bool
	Stats() cache.Stats
}

// metadata picks the catalog's job files and manifests as catalog.IsMetadata
// does (tiered does not import catalog).
func metadata(name string) bool {
	b := path.Base(name)
	return b == "_catalog" || b == "_metadata"
}

// TestTierKeepsUncachedNamesOutOfTheCache: checkpoint data is cached on
// write and served locally; the catalog's job file and manifests are not,
// so a rewrite by another daemon is seen.
func TestTierKeepsUncachedNamesOutOfTheCache(t *testing.T) {
	ctx := context.Background()
	remote := memstore.New()
	s, err := storeurl.Tier(remote, storeurl.Options{CacheDir: t.TempDir(), CacheBytes: 1 << 20, Uncached: metadata})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, ok := s.(cached)
	if !ok {
		t.Fatalf("Tier returned %T, which is no cache", s)
	}
	put := func(st tiered.Store, name, v string) {
		t.Helper()
		if err := tiered.PutBytes(ctx, st, name, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	get := func(name string) string {
		t.Helper()
		b, err := tiered.ReadAll(ctx, s, name, 0)
		if err != nil {
			t.Fatalf("get %s: %v", name, err)
		}
		return string(b)
	}
	put(s, "j/_catalog", "history v1")
	put(s, "j/chk-1/_metadata", "manifest 1")
	put(s, "j/shared/abc-000001.sst", "table")
	for name, want := range map[string]bool{"j/_catalog": false, "j/chk-1/_metadata": false, "j/shared/abc-000001.sst": true} {
		if c.Cached(name) != want {
			t.Errorf("%s cached %v, want %v", name, !want, want)
		}
	}
	// Another daemon rewrites the job file and re-creates a manifest.
	put(remote, "j/_catalog", "history v2")
	if err := remote.Delete(ctx, "j/chk-1/_metadata"); err != nil {
		t.Fatal(err)
	}
	put(remote, "j/chk-1/_metadata", "manifest 1 again")
	if got := get("j/_catalog"); got != "history v2" {
		t.Fatalf("job file read through the cache: %q, want the rewrite", got)
	}
	if got := get("j/chk-1/_metadata"); got != "manifest 1 again" {
		t.Fatalf("manifest read through the cache: %q, want the new one", got)
	}
	if c.Cached("j/_catalog") || c.Cached("j/chk-1/_metadata") {
		t.Fatal("a read cached catalog metadata")
	}
	// The data file is served from its local copy, even once the remote
	// lost it.
	if err := remote.Delete(ctx, "j/shared/abc-000001.sst"); err != nil {
		t.Fatal(err)
	}
	hits := c.Stats().Hits
	if got := get("j/shared/abc-000001.sst"); got != "table" {
		t.Fatalf("cached data file: %q", got)
	}
	if c.Stats().Hits != hits+1 {
		t.Fatalf("hits %d -> %d: the data file did not come from the cache", hits, c.Stats().Hits)
	}
	// Deletes go through the cache and drop the copy.
	if err := s.DeleteBatch(ctx, []string{"j/shared/abc-000001.sst", "j/_catalog"}); err != nil {
		t.Fatal(err)
	}
	if c.Cached("j/shared/abc-000001.sst") {
		t.Fatal("deleted file still cached")
	}
	if _, err := s.Stat(ctx, "j/_catalog"); !tiered.IsNotFound(err) {
		t.Fatalf("deleted job file: %v", err)
	}
}

// TestPartialCacheLocalCopies: a cached name has a local copy; an
// uncached one, which the cache never holds, has none.
func TestPartialCacheLocalCopies(t *testing.T) {
	ctx := context.Background()
	remote := memstore.New()
	s, err := storeurl.Tier(remote, storeurl.Options{CacheDir: t.TempDir(), CacheBytes: 1 << 20, Uncached: metadata})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, n := range []string{"job/chk-1/_metadata", "job/chk-1/x.sst"} {
		if err := tiered.PutBytes(ctx, remote, n, []byte(n)); err != nil {
			t.Fatal(err)
		}
	}
	lc, ok := tiered.AsLocalCopies(tiered.WithPrefix(s, "job"))
	if !ok {
		t.Fatalf("%T offers no local copies", s)
	}
	if cp, err := lc.LocalCopy(ctx, "chk-1/x.sst"); err != nil || cp.Size != int64(len("job/chk-1/x.sst")) {
		t.Fatalf("local copy of a cached name: %+v, %v", cp, err)
	}
	if _, err := lc.LocalCopy(ctx, "chk-1/_metadata"); !errors.Is(err, tiered.ErrNoLocalCopy) {
		t.Fatalf("local copy of an uncached name: %v", err)
	}
}
