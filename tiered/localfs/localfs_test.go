package localfs_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/localfs"
	"github.com/statedhq/stated/tiered/storetest"
)

func open(t testing.TB, dir string) *localfs.Store {
	t.Helper()
	s, err := localfs.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestAcceptance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t testing.TB) tiered.Store { return open(t, t.TempDir()) },
		Reopen: func(t testing.TB, old tiered.Store) tiered.Store {
			return open(t, old.(*localfs.Store).Root())
		},
		LargeSize: 3 << 20,
	})
}

// A crash leaves temporary files behind; Open removes them and readers
// never list or read them.
func TestOpenRemovesCrashLeftovers(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	ctx := context.Background()
	if err := tiered.PutBytes(ctx, s, "a/b", []byte("whole")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// What a crash between write and rename leaves.
	tmp := filepath.Join(dir, ".tmp", "123-1")
	if err := os.WriteFile(tmp, []byte("partial"), 0o644); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-2 * localfs.DefaultTempGrace)
	if err := os.Chtimes(tmp, past, past); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir)
	defer s.Close()
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temporary file survived Open: %v", err)
	}
	page, err := s.List(ctx, "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Objects) != 1 || page.Objects[0].Name != "a/b" {
		t.Fatalf("list: %+v", page.Objects)
	}
	for _, name := range []string{".tmp", ".tmp/123-1"} {
		if _, err := s.Get(ctx, name); !errors.Is(err, tiered.ErrInvalidName) {
			t.Fatalf("get %s: %v, want ErrInvalidName (reserved)", name, err)
		}
	}
}

// A put in flight is invisible: while the temporary file is being written,
// the object name does not exist.
func TestPartialPutInvisible(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	defer s.Close()
	ctx := context.Background()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- s.Put(ctx, "obj", pr, 10) }()
	pw.Write([]byte("12345"))
	if _, err := s.Stat(ctx, "obj"); !errors.Is(err, tiered.ErrNotFound) {
		t.Fatalf("half-written object visible: %v", err)
	}
	if page, _ := s.List(ctx, "", "", 0); len(page.Objects) != 0 {
		t.Fatalf("half-written object listed: %+v", page.Objects)
	}
	pw.Write([]byte("67890"))
	pw.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	b, err := tiered.ReadAll(ctx, s, "obj", 0)
	if err != nil || string(b) != "1234567890" {
		t.Fatalf("after put: %q, %v", b, err)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, ".tmp"))
	if len(entries) != 0 {
		t.Fatalf("temporary files left after a put: %v", entries)
	}
}

// Deleting the last object of a directory removes the empty directories.
func TestDeleteRemovesEmptyDirs(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	defer s.Close()
	ctx := context.Background()
	for _, n := range []string{"job/chk-1/a/x", "job/chk-2/y"} {
		if err := tiered.PutBytes(ctx, s, n, []byte(n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Delete(ctx, "job/chk-1/a/x"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "job", "chk-1")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("empty directory left: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "job", "chk-2", "y")); err != nil {
		t.Fatal(err)
	}
}

func TestOpenErrors(t *testing.T) {
	if _, err := localfs.Open(""); err == nil || !strings.HasPrefix(err.Error(), "localfs: ") {
		t.Fatalf("open of an empty path: %v", err)
	}
	f := filepath.Join(t.TempDir(), "file")
	os.WriteFile(f, nil, 0o644)
	if _, err := localfs.Open(f); err == nil {
		t.Fatal("open of a regular file as a directory succeeded")
	}
}

func TestReadOnlyAndTempGrace(t *testing.T) {
	dir := t.TempDir()
	w, err := localfs.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := tiered.PutBytes(ctx, w, "a/b", []byte("x")); err != nil {
		t.Fatal(err)
	}
	// A young temporary file (another live writer's) survives a second
	// Open; an old one (crash debris) does not.
	young := filepath.Join(dir, ".tmp", "young")
	old := filepath.Join(dir, ".tmp", "old")
	for _, p := range []string{young, old} {
		if err := os.WriteFile(p, []byte("partial"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	past := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(old, past, past); err != nil {
		t.Fatal(err)
	}
	if _, err := localfs.Open(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(young); err != nil {
		t.Fatalf("young temp file removed: %v", err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Fatalf("old temp file kept: %v", err)
	}
	ro, err := localfs.OpenWith(dir, localfs.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := tiered.ReadAll(ctx, ro, "a/b", 0); err != nil || string(b) != "x" {
		t.Fatalf("read-only read = %q, %v", b, err)
	}
	if err := tiered.PutBytes(ctx, ro, "c", nil); err == nil {
		t.Fatal("read-only store accepted a put")
	}
	if err := ro.Delete(ctx, "a/b"); err == nil {
		t.Fatal("read-only store accepted a delete")
	}
	if _, err := os.Stat(young); err != nil {
		t.Fatal("read-only open touched temp files")
	}
	if _, err := localfs.OpenWith(filepath.Join(dir, "missing"), localfs.Options{MustExist: true}); err == nil {
		t.Fatal("MustExist opened a missing directory")
	}
}
