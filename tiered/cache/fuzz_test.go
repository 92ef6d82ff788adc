package cache_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// cacheFile is where the cache keeps its copy of name (a hash of the name,
// as the package documents).
func cacheFile(dir, name string) string {
	h := sha256.Sum256([]byte(name))
	x := hex.EncodeToString(h[:])
	return filepath.Join(dir, "objects", x[:2], x)
}

// FuzzCachedFile: whatever bytes sit in a copy's metadata file, opening the
// cache and reading the object never panics, and a read either fails or
// returns the bytes of the remote object or of the copy, whose checksum
// then matched.
func FuzzCachedFile(f *testing.F) {
	ctx := context.Background()
	remoteData := []byte("the remote object")
	// Seeds: a valid copy made by the cache, and cuts of it.
	seedDir := f.TempDir()
	c := newCache(f, memstore.New(), seedDir, 1<<20)
	tiered.PutBytes(ctx, c, "x", []byte("a cached copy of x"))
	c.Close()
	copyData, err := os.ReadFile(cacheFile(seedDir, "x"))
	if err != nil {
		f.Fatal(err)
	}
	valid, err := os.ReadFile(cacheFile(seedDir, "x") + ".meta")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	f.Add(valid[:len(valid)-1])
	f.Add(valid[len(valid)/2:])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, file []byte) {
		dir := t.TempDir()
		p := cacheFile(dir, "x")
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, copyData, 0o644)
		os.WriteFile(p+".meta", file, 0o644)
		remote := memstore.New()
		tiered.PutBytes(ctx, remote, "x", remoteData)
		c := newCache(t, remote, dir, 1<<20)
		defer c.Close()
		got, err := tiered.ReadAll(ctx, c, "x", 0)
		if err != nil {
			return
		}
		if !bytes.Equal(got, remoteData) && !bytes.Equal(got, copyData) {
			t.Fatalf("read returned %q, neither the remote object nor the copy", got)
		}
	})
}
