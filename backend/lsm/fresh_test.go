package lsm

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statedhq/stated/backend"
)

// creatingFS counts the files created through it.
type creatingFS struct {
	vfs.FS
	creates atomic.Int64
}

func (fs *creatingFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	fs.creates.Add(1)
	return fs.FS.Create(name, c)
}

// TestFreshOpenCreatesFewFiles: an empty instance's store is created at
// the newest format directly (one format marker, not one per format
// upgrade) and without a LOCK file: file creations are what opening
// thousands of idle instances costs. Before, a new store made 17 files,
// then 6 (with openFresh), and now none on disk (metaMemFS).
func TestFreshOpenCreatesFewFiles(t *testing.T) {
	e := newEnv(t)
	fs := &creatingFS{FS: vfs.Default}
	e.fs = fs
	b := e.open(full(), nil)
	if v := b.DB().FormatMajorVersion(); v != pebble.FormatNewest {
		t.Fatalf("format major version %d, want %d", v, pebble.FormatNewest)
	}
	// The metadata lives in memory and the directories are made when a
	// file is first written (metaMemFS): nothing on disk at all.
	if n := fs.creates.Load(); n > 0 {
		t.Fatalf("opening an empty instance created %d files on disk, want none", n)
	}
	if _, err := vfs.Default.Stat(b.lo.Dir); !oserrorNotExist(err) {
		t.Fatalf("the instance's directory is on disk (%v), want it made when first needed", err)
	}
	ls, err := b.lo.FS.List(b.dbDir)
	if err != nil {
		t.Fatal(err)
	}
	markers := 0
	for _, n := range ls {
		if n == "LOCK" {
			t.Fatalf("the store has a LOCK file: %v", ls)
		}
		if strings.HasPrefix(n, "marker.format-version.") {
			markers++
		}
	}
	if markers != 1 {
		t.Fatalf("%d format markers in %v, want 1", markers, ls)
	}
	// The store works and round-trips through a checkpoint.
	must(t, b.Put("v", backend.Key{KeyGroup: 1, Key: []byte("k")}, []byte("x")))
	h := checkpoint(t, b, 1)
	r := e.open(full(), func(o *backend.Options, _ *Options) { o.Restore = []*backend.Handle{h} })
	got, ok, err := r.Get("v", backend.Key{KeyGroup: 1, Key: []byte("k")})
	if err != nil || !ok || string(got) != "x" {
		t.Fatalf("restored %q %v %v", got, ok, err)
	}
}
