package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/file"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/localfs"
)

// realCheckpoints writes checkpoints 1..n of job "j" with the file backend
// into a local checkpoint root and returns the root and the last manifest.
func realCheckpoints(t *testing.T, n int) (string, *catalog.Manifest) {
	t.Helper()
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "checkpoints")
	s, err := localfs.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	c, err := catalog.Open(ctx, catalog.Options{Store: s})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b, err := file.Open(backend.Options{Task: backend.TaskID{Job: "j", Operator: "op", Subtask: 0},
		KeyGroups: backend.KeyGroupRange{Start: 0, End: 127}, Store: s,
		States: []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}}}, file.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var m *catalog.Manifest
	for id := uint64(1); id <= uint64(n); id++ {
		for i := 0; i < 200; i++ {
			k := backend.Key{KeyGroup: i % 128, Key: []byte{byte(i), byte(id)}}
			if err := b.Put("v", k, bytes.Repeat([]byte{byte(i)}, 50)); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.BeginCheckpoint("j", id); err != nil {
			t.Fatal(err)
		}
		p, err := b.Snapshot(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		h, err := p.Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m, err = c.Complete(ctx, "j", id, h); err != nil {
			t.Fatal(err)
		}
		b.NotifyCheckpointComplete(id)
	}
	if _, err := c.SavepointFromCheckpoint(ctx, "sp1", "j", uint64(n)); err != nil {
		t.Fatal(err)
	}
	if err := c.Abort(ctx, "j", uint64(n+1), catalog.StatusDeclined, "heap cap"); err != nil {
		t.Fatal(err)
	}
	return root, m
}

// TestVerifyFindsFlippedByteAndDeletedFile runs "stated verify" on a real
// checkpoint of the file backend.
func TestVerifyFindsFlippedByteAndDeletedFile(t *testing.T) {
	root, m := realCheckpoints(t, 2)
	dir := filepath.Join(root, "j", "chk-2")
	var out bytes.Buffer
	if err := runVerify(context.Background(), &out, dir, cliStore{}, false, progressOpts{}); err != nil {
		t.Fatalf("clean checkpoint: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "OK") {
		t.Fatalf("output: %s", out.String())
	}
	var files []string
	for _, f := range m.Tasks[0].Files {
		files = append(files, f.Path)
	}
	if len(files) == 0 {
		t.Fatal("the checkpoint has no data file")
	}
	// Flip one byte of the data file.
	fp := filepath.Join(root, filepath.FromSlash(files[0]))
	data, err := os.ReadFile(fp)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/3] ^= 0x10
	if err := os.WriteFile(fp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	err = runVerify(context.Background(), &out, dir, cliStore{}, false, progressOpts{})
	if err == nil || !strings.Contains(out.String(), files[0]) || !strings.Contains(out.String(), "crc32c") {
		t.Fatalf("flipped byte not found: %v\n%s", err, out.String())
	}
	// Delete it: reported missing, through --store this time.
	if err := os.Remove(fp); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	err = runVerify(context.Background(), &out, "j/chk-2", cliStore{url: root}, true, progressOpts{})
	if err == nil || !strings.Contains(out.String(), files[0]) || !strings.Contains(out.String(), "missing") {
		t.Fatalf("deleted file not found: %v\n%s", err, out.String())
	}
	// A savepoint verifies wherever it was moved to.
	moved := filepath.Join(t.TempDir(), "moved-sp")
	if err := os.Rename(filepath.Join(root, "savepoints", "sp1"), moved); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := runVerify(context.Background(), &out, moved, cliStore{}, false, progressOpts{}); err != nil || !strings.Contains(out.String(), "savepoint sp1") {
		t.Fatalf("moved savepoint: %v\n%s", err, out.String())
	}
	// A directory without a manifest is an error, not a pass.
	if err := runVerify(context.Background(), &out, t.TempDir(), cliStore{}, false, progressOpts{}); err == nil {
		t.Fatal("verify of an empty directory passed")
	}
}

func TestCheckpointsTable(t *testing.T) {
	root, _ := realCheckpoints(t, 4)
	var out, errOut bytes.Buffer
	if err := runCheckpoints(context.Background(), &out, &errOut, cliStore{url: root}, "", checkpointDetails{}); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{"job j", "ID", "STATUS", "DURATION", "CHECKPOINTED", "FULL", "REASON",
		"completed (subsumed)", "completed (retained)", "declined", "heap cap", "savepoints", "sp1"} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
	if lines := strings.Count(got, "completed"); lines != 4 {
		t.Errorf("%d completed rows, want 4:\n%s", lines, got)
	}
	if err := runCheckpoints(context.Background(), &out, &errOut, cliStore{url: root}, "nope", checkpointDetails{}); err == nil {
		t.Fatal("unknown job accepted")
	}
}

// TestCheckpointsMarksDamaged: a flipped bit in a retained checkpoint's
// manifest is shown as DAMAGED with the reason, not as subsumed, and the
// command fails naming the checkpoint.
func TestCheckpointsMarksDamaged(t *testing.T) {
	root, _ := realCheckpoints(t, 3)
	p := filepath.Join(root, "j", "chk-3", "_metadata")
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0x04
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	err = runCheckpoints(context.Background(), &out, &errOut, cliStore{url: root}, "j", checkpointDetails{})
	if err == nil || !strings.Contains(err.Error(), "j/chk-3") {
		t.Fatalf("checkpoints with a damaged manifest: %v", err)
	}
	var row string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, "3 ") {
			row = l
		}
	}
	if !strings.Contains(row, "DAMAGED") || !strings.Contains(row, "checksum mismatch") || strings.Contains(row, "subsumed") {
		t.Fatalf("row of chk-3 %q in:\n%s", row, out.String())
	}
	if !strings.Contains(errOut.String(), "j/chk-3/_metadata") {
		t.Fatalf("problems: %s", errOut.String())
	}
}

func TestGCDryRunAndDelete(t *testing.T) {
	root, _ := realCheckpoints(t, 2)
	// An orphan: an upload of a checkpoint that never completed.
	orphan := filepath.Join(root, "j", "shared", "lost-upload")
	if err := os.MkdirAll(filepath.Dir(orphan), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(orphan, make([]byte, 1234), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(orphan, old, old); err != nil {
		t.Fatal(err)
	}
	young := filepath.Join(root, "j", "shared", "fresh-upload")
	if err := os.WriteFile(young, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := runGC(context.Background(), &out, cliStore{url: root}, time.Hour, true, progressOpts{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "would delete 1 unreferenced objects") || !strings.Contains(out.String(), "j/shared/lost-upload") ||
		!strings.Contains(out.String(), "1234 bytes") {
		t.Fatalf("dry run output:\n%s", out.String())
	}
	if _, err := os.Stat(orphan); err != nil {
		t.Fatal("dry run deleted the orphan")
	}
	out.Reset()
	if err := runGC(context.Background(), &out, cliStore{url: root}, time.Hour, false, progressOpts{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Fatalf("orphan survives gc: %v\n%s", err, out.String())
	}
	if _, err := os.Stat(young); err != nil {
		t.Fatal("gc deleted a file younger than the grace period")
	}
	// Everything referenced is intact.
	s, err := localfs.OpenWith(root, localfs.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"j/chk-1", "j/chk-2", "savepoints/sp1"} {
		if rep, err := catalog.Verify(context.Background(), s, dir, 0); err != nil || !rep.OK() {
			t.Fatalf("gc damaged %s: %+v %v", dir, rep, err)
		}
	}
	if _, err := s.List(context.Background(), "", "", 0); err != nil {
		t.Fatal(err)
	}
	var _ tiered.Store = s
}

// syncBuffer is a bytes.Buffer safe for the progress goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// slowStore makes every read and list take a while, so that a command
// runs across several progress periods.
type slowStore struct{ tiered.Store }

func (s slowStore) GetRange(ctx context.Context, name string, off, n int64) (io.ReadCloser, error) {
	time.Sleep(20 * time.Millisecond)
	return s.Store.GetRange(ctx, name, off, n)
}

func (s slowStore) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	time.Sleep(20 * time.Millisecond)
	return s.Store.Get(ctx, name)
}

func (s slowStore) List(ctx context.Context, prefix, after string, limit int) (tiered.ListPage, error) {
	time.Sleep(20 * time.Millisecond)
	return s.Store.List(ctx, prefix, after, limit)
}

// TestProgressPlainLines: off a terminal, verify and gc print periodic
// plain lines that say how far they got, and the bytes verify reports
// reach the manifest's total.
func TestProgressPlainLines(t *testing.T) {
	root, m := realCheckpoints(t, 2)
	var total int64
	for _, h := range m.Tasks {
		for _, f := range h.Files {
			total += f.Size
		}
	}
	s, err := localfs.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var prog syncBuffer
	p := progressOpts{w: &prog, every: 5 * time.Millisecond}
	stop := p.start("verify j/chk-2", total, func() (int64, string) { return total / 2, readText(total/2, total) })
	// Two periods at least; a loaded machine may take longer than two
	// periods of 5 ms to print them.
	for deadline := time.Now().Add(5 * time.Second); strings.Count(prog.String(), "\n") < 2 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	stop() // idempotent
	lines := strings.Split(strings.TrimSpace(prog.String()), "\n")
	if len(lines) < 2 || !strings.HasPrefix(lines[0], "verify j/chk-2: read ") || !strings.HasSuffix(lines[0], "(50%)") {
		t.Fatalf("progress lines:\n%s", prog.String())
	}
	after := prog.String()
	time.Sleep(20 * time.Millisecond)
	if prog.String() != after {
		t.Fatal("progress printed after stop")
	}

	// The counting store sees every byte verify reads.
	cs := &countingStore{Store: slowStore{s}}
	if _, err := catalog.Verify(context.Background(), cs, "j/chk-2", 1); err != nil {
		t.Fatal(err)
	}
	if got := cs.read.Load(); got < total {
		t.Fatalf("counted %d bytes read, the manifest lists %d", got, total)
	}
	if got := manifestBytes(context.Background(), s, "j/chk-2"); got != total {
		t.Fatalf("manifestBytes %d, want %d", got, total)
	}

	// gc through the command, on a slow store: lines while it lists and
	// reads.
	cliStoreWrap = func(s tiered.Store) tiered.Store { return slowStore{s} }
	defer func() { cliStoreWrap = nil }()
	prog = syncBuffer{}
	var out bytes.Buffer
	if err := runGC(context.Background(), &out, cliStore{url: root}, time.Hour, true, p); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(prog.String(), "gc: listed ") {
		t.Fatalf("gc printed no progress line:\n%s", prog.String())
	}
}

// TestVerifyLatestAndNotFound: "stated verify <job>/latest" and "<job>"
// verify the job's newest retained checkpoint, and a name that is not in
// the store points at "stated checkpoints" (the README's example once
// named a checkpoint id that engines with time-based ids never use).
func TestVerifyLatestAndNotFound(t *testing.T) {
	root, m := realCheckpoints(t, 3)
	want := "checkpoint 3 of job j"
	if m.CheckpointID != 3 {
		t.Fatalf("the last checkpoint is %d", m.CheckpointID)
	}
	for _, target := range []string{"j/latest", "j", "/j/latest/"} {
		var out bytes.Buffer
		if err := runVerify(context.Background(), &out, target, cliStore{url: root}, true, progressOpts{}); err != nil {
			t.Fatalf("verify %s: %v\n%s", target, err, out.String())
		}
		if !strings.Contains(out.String(), want) || !strings.Contains(out.String(), "OK") {
			t.Fatalf("verify %s: %s, want %q", target, out.String(), want)
		}
	}
	for _, target := range []string{"j/chk-99", "nojob/latest", "nojob"} {
		var out bytes.Buffer
		err := runVerify(context.Background(), &out, target, cliStore{url: root}, true, progressOpts{})
		if err == nil || !strings.Contains(err.Error(), `"stated checkpoints"`) {
			t.Fatalf("verify %s: %v, want an error naming \"stated checkpoints\"", target, err)
		}
	}
	var out bytes.Buffer
	if err := runVerify(context.Background(), &out, "bad name!", cliStore{url: root}, true, progressOpts{}); err == nil || !strings.Contains(err.Error(), "<job>/latest") {
		t.Fatalf("verify of a bad name: %v", err)
	}
}
