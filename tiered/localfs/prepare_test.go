package localfs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"pgregory.net/rapid"

	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/localfs"
	"github.com/statedhq/stated/tiered/metered"
)

func get(t testing.TB, s tiered.Store, name string) ([]byte, error) {
	t.Helper()
	return tiered.ReadAll(context.Background(), s, name, 1<<20)
}

// A prepared name is an empty object until its Put, which stores the data
// like any Put; PutIfAbsent treats the placeholder as absent; Unprepare
// removes only the placeholders no Put wrote.
func TestPrepareThenPut(t *testing.T) {
	ctx := context.Background()
	s := openFS(t, vfs.NewMem(), "/root")
	names := []string{"log/run/1", "log/run/2", "log/run/3", "other/4"}
	if err := s.Prepare(ctx, names); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		info, err := s.Stat(ctx, n)
		if err != nil || info.Size != 0 {
			t.Fatalf("prepared %s: %+v, %v; want an empty object", n, info, err)
		}
	}
	if err := tiered.PutBytes(ctx, s, "log/run/1", []byte("one")); err != nil {
		t.Fatal(err)
	}
	if err := s.PutIfAbsent(ctx, "log/run/2", strings.NewReader("two"), 3); err != nil {
		t.Fatalf("PutIfAbsent of a prepared name: %v", err)
	}
	// A second Put of a name goes the usual way (the preparation is
	// used up): it replaces the object atomically.
	if err := tiered.PutBytes(ctx, s, "log/run/1", []byte("uno")); err != nil {
		t.Fatal(err)
	}
	if err := s.Unprepare(ctx, []string{"log/run/1", "log/run/2", "log/run/3", "never/prepared"}); err != nil {
		t.Fatal(err)
	}
	for n, want := range map[string]string{"log/run/1": "uno", "log/run/2": "two"} {
		if b, err := get(t, s, n); err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", n, b, err, want)
		}
	}
	if _, err := s.Stat(ctx, "log/run/3"); !errors.Is(err, tiered.ErrNotFound) {
		t.Errorf("unprepared placeholder log/run/3 is still there: %v", err)
	}
	if info, err := s.Stat(ctx, "other/4"); err != nil || info.Size != 0 {
		t.Errorf("other/4, prepared and not unprepared: %+v, %v", info, err)
	}
}

// Prepare never touches an object that exists: it links, and a link
// fails on an existing name. The object's next Put is an ordinary one.
func TestPrepareLeavesExistingObjects(t *testing.T) {
	ctx := context.Background()
	s := openFS(t, vfs.NewMem(), "/root")
	if err := tiered.PutBytes(ctx, s, "a/b", []byte("kept")); err != nil {
		t.Fatal(err)
	}
	err := s.Prepare(ctx, []string{"a/b", "a/c"})
	if err == nil || !strings.Contains(err.Error(), "exist") {
		t.Fatalf("Prepare of an existing name: %v, want an error naming it", err)
	}
	if b, err := get(t, s, "a/b"); err != nil || string(b) != "kept" {
		t.Fatalf("a/b after Prepare = %q, %v", b, err)
	}
	if err := s.Unprepare(ctx, []string{"a/b"}); err != nil {
		t.Fatal(err)
	}
	if b, err := get(t, s, "a/b"); err != nil || string(b) != "kept" {
		t.Fatalf("Unprepare removed a/b, an object it did not prepare: %q, %v", b, err)
	}
	if info, err := s.Stat(ctx, "a/c"); err != nil || info.Size != 0 {
		t.Fatalf("a/c was prepared alongside: %+v, %v", info, err)
	}
}

// failingReader fails after some bytes.
type failingReader struct{ n int }

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, errors.New("reader broke")
	}
	n := min(len(p), f.n)
	f.n -= n
	return n, nil
}

// A Put into a prepared name that fails leaves nothing under the name.
func TestPreparedPutFailureLeavesNothing(t *testing.T) {
	ctx := context.Background()
	s := openFS(t, vfs.NewMem(), "/root")
	if err := s.Prepare(ctx, []string{"x/1"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "x/1", &failingReader{n: 10}, 100); err == nil {
		t.Fatal("Put from a broken reader succeeded")
	}
	if _, err := s.Stat(ctx, "x/1"); !errors.Is(err, tiered.ErrNotFound) {
		t.Fatalf("x/1 after a failed Put: %v, want not found", err)
	}
	if err := tiered.PutBytes(ctx, s, "x/1", []byte("retried")); err != nil {
		t.Fatal(err)
	}
	if b, err := get(t, s, "x/1"); err != nil || string(b) != "retried" {
		t.Fatalf("x/1 = %q, %v", b, err)
	}
}

// What a Put into a prepared name returned survives a power loss: the
// placeholder's directory entry was synced by Prepare, the data by Put.
// A placeholder whose Put never came may survive, empty.
func TestPreparedPutSurvivesPowerLoss(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewCrashableMem()
	s := openFS(t, mem, "/data/root")
	var names []string
	for i := range 6 {
		names = append(names, fmt.Sprintf("_changelog/shared/run/%016x-0", i))
	}
	if err := s.Prepare(ctx, names); err != nil {
		t.Fatal(err)
	}
	for i, n := range names[:4] {
		if err := tiered.PutBytes(ctx, s, n, bytes.Repeat([]byte{byte(i + 1)}, 5000)); err != nil {
			t.Fatal(err)
		}
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	r := openFS(t, crashed, "/data/root")
	for i, n := range names[:4] {
		b, err := get(t, r, n)
		if err != nil || !bytes.Equal(b, bytes.Repeat([]byte{byte(i + 1)}, 5000)) {
			t.Errorf("%s after the power loss: %d bytes, %v", n, len(b), err)
		}
	}
	for _, n := range names[4:] {
		if info, err := r.Stat(ctx, n); err == nil && info.Size != 0 {
			t.Errorf("placeholder %s has %d bytes after the power loss", n, info.Size)
		}
	}
}

// The number of prepared names is bounded.
func TestPrepareBounded(t *testing.T) {
	ctx := context.Background()
	s := openFS(t, vfs.NewMem(), "/root")
	var names []string
	for i := range localfs.MaxPrepared + 1 {
		names = append(names, fmt.Sprintf("p/%d", i))
	}
	if err := s.Prepare(ctx, names); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Fatalf("Prepare of %d names: %v, want a refusal", len(names), err)
	}
	if err := s.Prepare(ctx, names[:localfs.MaxPrepared]); err != nil {
		t.Fatal(err)
	}
	if err := s.Prepare(ctx, []string{"p/more"}); err == nil {
		t.Fatal("Prepare past the bound succeeded")
	}
	if err := s.Unprepare(ctx, names[:10]); err != nil {
		t.Fatal(err)
	}
	if err := s.Prepare(ctx, []string{"p/more"}); err != nil {
		t.Fatalf("Prepare after Unprepare freed room: %v", err)
	}
	if err := s.Prepare(ctx, []string{"../escape"}); err == nil {
		t.Fatal("Prepare of an invalid name succeeded")
	}
}

// AsPreparer reaches the Store through a meter and a prefix view, and
// names through the view are the view's.
func TestAsPreparerThroughWrappers(t *testing.T) {
	ctx := context.Background()
	s := openFS(t, vfs.NewMem(), "/root")
	view := tiered.WithPrefix(metered.New(s), "tenant")
	p, ok := tiered.AsPreparer(view)
	if !ok {
		t.Fatal("no Preparer through metered and WithPrefix")
	}
	if err := p.Prepare(ctx, []string{"seg/1"}); err != nil {
		t.Fatal(err)
	}
	if info, err := s.Stat(ctx, "tenant/seg/1"); err != nil || info.Size != 0 {
		t.Fatalf("tenant/seg/1: %+v, %v", info, err)
	}
	if err := tiered.PutBytes(ctx, view, "seg/1", []byte("data")); err != nil {
		t.Fatal(err)
	}
	if b, err := get(t, s, "tenant/seg/1"); err != nil || string(b) != "data" {
		t.Fatalf("tenant/seg/1 = %q, %v", b, err)
	}
	if _, ok := tiered.AsPreparer(tiered.Store(nil)); ok {
		t.Fatal("a nil store prepares")
	}
}

// Concurrent Prepare, Put, Delete and Unprepare of the same names: every
// Put that returned is read back whole, unless a later Delete or
// Unprepare-free removal of that name ran; no placeholder ever replaces
// written data.
func TestPrepareConcurrentWithPuts(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		s := openFS(t, vfs.NewMem(), "/root")
		n := rapid.IntRange(1, 6).Draw(rt, "names")
		var names []string
		for i := range n {
			names = append(names, fmt.Sprintf("d/%d", i))
		}
		prepares := rapid.IntRange(1, 4).Draw(rt, "prepares")
		var wg sync.WaitGroup
		for range prepares {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = s.Prepare(ctx, names) // may find names put already
				_ = s.Unprepare(ctx, names[:1])
			}()
		}
		written := make([][]byte, n)
		for i, name := range names {
			wg.Add(1)
			data := bytes.Repeat([]byte{byte('a' + i)}, rapid.IntRange(1, 3000).Draw(rt, fmt.Sprint("size", i)))
			written[i] = data
			go func() {
				defer wg.Done()
				if err := tiered.PutBytes(ctx, s, name, data); err != nil {
					rt.Errorf("put %s: %v", name, err)
				}
			}()
		}
		wg.Wait()
		for i, name := range names {
			b, err := get(t, s, name)
			if err != nil || !bytes.Equal(b, written[i]) {
				rt.Fatalf("%s = %d bytes, %v; want the %d bytes put", name, len(b), err, len(written[i]))
			}
		}
		// Whatever is still prepared goes away, the written objects stay.
		if err := s.Unprepare(ctx, names); err != nil {
			rt.Fatal(err)
		}
		for i, name := range names {
			if b, err := get(t, s, name); err != nil || !bytes.Equal(b, written[i]) {
				rt.Fatalf("%s after Unprepare: %d bytes, %v", name, len(b), err)
			}
		}
	})
}

var _ io.Reader = (*failingReader)(nil)

// dirSyncFS counts directory syncs.
type dirSyncFS struct {
	vfs.FS
	syncs *atomic.Int64
}

type countedDir struct {
	vfs.File
	syncs *atomic.Int64
}

func (d countedDir) Sync() error { d.syncs.Add(1); return d.File.Sync() }

func (f dirSyncFS) OpenDir(name string) (vfs.File, error) {
	d, err := f.FS.OpenDir(name)
	if err != nil {
		return nil, err
	}
	return countedDir{d, f.syncs}, nil
}

// On the operating system's file system, the Put of a prepared name syncs
// no directory (Prepare did); if the placeholder was removed behind the
// store's back (another process's sweep) and the Put had to make a new
// file, it syncs the directory as well, so the object is still durable.
func TestPreparedPutSyncsNoDirectory(t *testing.T) {
	ctx := context.Background()
	var syncs atomic.Int64
	dir := t.TempDir()
	s, err := localfs.OpenWith(dir, localfs.Options{FS: dirSyncFS{vfs.Default, &syncs}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Prepare(ctx, []string{"seg/1", "seg/2"}); err != nil {
		t.Fatal(err)
	}
	before := syncs.Load()
	if err := tiered.PutBytes(ctx, s, "seg/1", []byte("one")); err != nil {
		t.Fatal(err)
	}
	if n := syncs.Load() - before; n != 0 {
		t.Errorf("the Put of a prepared name synced %d directories, want 0", n)
	}
	// A sweep removes only objects older than its grace: the new file's
	// change time differs from the placeholder's, also on a reused inode.
	time.Sleep(20 * time.Millisecond)
	if err := os.Remove(filepath.Join(dir, "seg", "2")); err != nil {
		t.Fatal(err)
	}
	before = syncs.Load()
	if err := tiered.PutBytes(ctx, s, "seg/2", []byte("two")); err != nil {
		t.Fatal(err)
	}
	if n := syncs.Load() - before; n != 1 {
		t.Errorf("the Put of a prepared name whose placeholder was removed synced %d directories, want 1", n)
	}
	for n, want := range map[string]string{"seg/1": "one", "seg/2": "two"} {
		if b, err := get(t, s, n); err != nil || string(b) != want {
			t.Errorf("%s = %q, %v", n, b, err)
		}
	}
}
