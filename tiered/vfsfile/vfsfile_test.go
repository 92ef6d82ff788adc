package vfsfile

import (
	"io"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func TestOnceAndSection(t *testing.T) {
	fs := vfs.NewMem()
	w, err := fs.Create("f", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = w.Write([]byte("0123456789"))
	_ = w.Close()
	r, err := fs.Open("f")
	if err != nil {
		t.Fatal(err)
	}
	f := NewOnce(r)
	s := Section(f, f, 2, 5)
	b, err := io.ReadAll(s)
	if err != nil || string(b) != "23456" {
		t.Fatalf("section %q %v", b, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// A second close must not reach the MemFS file, which panics on it.
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
