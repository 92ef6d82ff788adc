package backend_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// TestPackedStore: a packed file reads as its range of the pack, whole,
// in part or past its end; other names go to the store; a pack shorter
// than its files is damage, not a short file.
func TestPackedStore(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	pack := []byte("aaaaBBBBBBcc")
	if err := s.Put(ctx, "j/chk-1/pack", bytes.NewReader(pack), int64(len(pack))); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "j/chk-1/plain", bytes.NewReader([]byte("plain")), 5); err != nil {
		t.Fatal(err)
	}
	h := &backend.Handle{Files: []backend.FileRef{
		{Path: "j/chk-1/op-0/state", Size: 6, Pack: &backend.FilePack{Object: "j/chk-1/pack", Offset: 4}},
		{Path: "j/chk-1/op-1/state", Size: 9, Pack: &backend.FilePack{Object: "j/chk-1/pack", Offset: 10}},
		{Path: "j/chk-1/plain", Size: 5},
	}}
	if got := backend.PackedStore(s, []*backend.Handle{{Files: h.Files[2:]}}); got != tiered.Store(s) {
		t.Fatal("a view without packed files is not the store itself")
	}
	v := backend.PackedStore(s, []*backend.Handle{h})
	read := func(name string, off, n int64) (string, error) {
		rc, err := v.GetRange(ctx, name, off, n)
		if err != nil {
			return "", err
		}
		defer rc.Close()
		b, err := io.ReadAll(rc)
		return string(b), err
	}
	for _, tc := range []struct {
		name   string
		off, n int64
		want   string
	}{
		{"j/chk-1/op-0/state", 0, -1, "BBBBBB"},
		{"j/chk-1/op-0/state", 2, 3, "BBB"},
		{"j/chk-1/op-0/state", 4, 100, "BB"},
		{"j/chk-1/plain", 0, -1, "plain"},
	} {
		if got, err := read(tc.name, tc.off, tc.n); err != nil || got != tc.want {
			t.Errorf("%s [%d,+%d): %q %v, want %q", tc.name, tc.off, tc.n, got, err, tc.want)
		}
	}
	if _, err := read("j/chk-1/op-0/state", 7, -1); !errors.Is(err, tiered.ErrInvalidRange) {
		t.Errorf("a range past the file's end: %v", err)
	}
	if info, err := v.Stat(ctx, "j/chk-1/op-0/state"); err != nil || info.Size != 6 {
		t.Errorf("stat: %+v %v", info, err)
	}
	if _, err := read("j/chk-1/op-1/state", 0, -1); !errors.Is(err, backend.ErrCorrupt) {
		t.Errorf("a file past its pack's end: %v", err)
	}
	if _, err := v.Stat(ctx, "j/chk-1/op-1/state"); !errors.Is(err, backend.ErrCorrupt) {
		t.Errorf("stat of a file past its pack's end: %v", err)
	}
	if err := s.Delete(ctx, "j/chk-1/pack"); err != nil {
		t.Fatal(err)
	}
	if _, err := read("j/chk-1/op-0/state", 0, -1); !tiered.IsNotFound(err) {
		t.Errorf("a file whose pack is gone: %v", err)
	}
}

// TestPackedHandleValidation: a packed file needs version 5, must be
// private and needs a valid pack name and offset.
func TestPackedHandleValidation(t *testing.T) {
	base := func() *backend.Handle {
		return &backend.Handle{Version: backend.HandleVersionPacked, Backend: backend.KindFile,
			Task: backend.TaskID{Job: "j", Operator: "op"}, CheckpointID: 1, KeyGroups: backend.KeyGroupRange{Start: 0, End: 127}, MaxParallelism: 128,
			Files: []backend.FileRef{{Path: "j/chk-1/op-0/state", Size: 3, CRC32C: 1, Pack: &backend.FilePack{Object: "j/chk-1/packed-x-0", Offset: 9}}}}
	}
	if err := base().Validate(); err != nil {
		t.Fatalf("a valid packed handle: %v", err)
	}
	for name, mod := range map[string]func(*backend.Handle){
		"old version":     func(h *backend.Handle) { h.Version = backend.HandleVersionRemote },
		"shared":          func(h *backend.Handle) { h.Files[0].Shared = true },
		"bad object":      func(h *backend.Handle) { h.Files[0].Pack.Object = "../x" },
		"negative offset": func(h *backend.Handle) { h.Files[0].Pack.Offset = -1 },
	} {
		h := base()
		mod(h)
		if err := h.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestNamePacks: damage naming a packed file also names its pack; other
// errors, and damage naming no packed file, are left as they are.
func TestNamePacks(t *testing.T) {
	hs := []*backend.Handle{{Files: []backend.FileRef{
		{Path: "j/chk-1/op-0/state", Size: 6, Pack: &backend.FilePack{Object: "j/chk-1/pack", Offset: 4}},
		{Path: "j/chk-1/plain", Size: 5},
	}}}
	damaged := fmt.Errorf("snapshot file j/chk-1/op-0/state: %w: checksum", backend.ErrCorrupt)
	got := backend.NamePacks(damaged, hs)
	if !errors.Is(got, backend.ErrCorrupt) || !strings.Contains(got.Error(), "bytes 4-10 of pack j/chk-1/pack") {
		t.Fatalf("packed damage: %v", got)
	}
	for _, err := range []error{
		nil,
		fmt.Errorf("snapshot file j/chk-1/op-0/state: %w", backend.ErrNotFound),
		fmt.Errorf("snapshot file j/chk-1/plain: %w", backend.ErrCorrupt),
	} {
		if got := backend.NamePacks(err, hs); got != err {
			t.Errorf("NamePacks(%v) = %v, want it unchanged", err, got)
		}
	}
}

// TestInlineFiles: an inline file (a changelog manifest carried in its
// handle) reads as its bytes, whole or in part, with no object in the
// store; a handle holding one validates only at version 6, private, not
// packed, with as many bytes as its size and at most MaxInlineBytes.
func TestInlineFiles(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	base := func() *backend.Handle {
		return &backend.Handle{Version: backend.HandleVersionInline, Backend: backend.KindFile,
			Task: backend.TaskID{Job: "j", Operator: "op"}, CheckpointID: 1, KeyGroups: backend.KeyGroupRange{Start: 0, End: 127}, MaxParallelism: 128,
			Files: []backend.FileRef{{Path: "j/chk-1/op-0/_changelog", Size: 8, CRC32C: 1, Inline: []byte("manifest")}}}
	}
	if err := base().Validate(); err != nil {
		t.Fatalf("a valid inline handle: %v", err)
	}
	for name, mod := range map[string]func(*backend.Handle){
		"old version": func(h *backend.Handle) { h.Version = backend.HandleVersionPacked },
		"shared":      func(h *backend.Handle) { h.Files[0].Shared = true },
		"packed too":  func(h *backend.Handle) { h.Files[0].Pack = &backend.FilePack{Object: "j/chk-1/packed-x-0"} },
		"short":       func(h *backend.Handle) { h.Files[0].Size = 9 },
		"too big": func(h *backend.Handle) {
			h.Files[0].Inline = make([]byte, backend.MaxInlineBytes+1)
			h.Files[0].Size = backend.MaxInlineBytes + 1
		},
	} {
		h := base()
		mod(h)
		if err := h.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	v := backend.PackedStore(s, []*backend.Handle{base()})
	if v == tiered.Store(s) {
		t.Fatal("a view with an inline file is the store itself")
	}
	for _, tc := range []struct {
		off, n int64
		want   string
	}{{0, -1, "manifest"}, {3, 2, "if"}, {5, 100, "est"}} {
		rc, err := v.GetRange(ctx, "j/chk-1/op-0/_changelog", tc.off, tc.n)
		if err != nil {
			t.Fatalf("[%d,+%d): %v", tc.off, tc.n, err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || string(b) != tc.want {
			t.Errorf("[%d,+%d): %q %v, want %q", tc.off, tc.n, b, err, tc.want)
		}
	}
	if _, err := v.GetRange(ctx, "j/chk-1/op-0/_changelog", 9, -1); !errors.Is(err, tiered.ErrInvalidRange) {
		t.Errorf("read past the end: %v", err)
	}
	if info, err := v.Stat(ctx, "j/chk-1/op-0/_changelog"); err != nil || info.Size != 8 {
		t.Errorf("stat: %+v %v", info, err)
	}
	if page, err := s.List(ctx, "", "", 10); err != nil || len(page.Objects) != 0 {
		t.Errorf("the store holds %+v %v", page, err)
	}
}
