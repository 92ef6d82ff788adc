package host_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/host"
)

// keyGroupOfK is the key group the client computes for key "k".
var keyGroupOfK = backend.KeyGroupForHash(client.FNV1a32([]byte("k")), backend.DefaultMaxParallelism)

// checkpointTwice completes checkpoints 1 and 2 of a file instance of job
// "job" (key "k" holds "one", then "two") and closes the instance.
func checkpointTwice(t *testing.T, n *host.Host) (backend.TaskID, backend.KeyGroupRange) {
	t.Helper()
	ctx := context.Background()
	d := n.Daemon()
	task := backend.TaskID{Job: "job", Operator: "op"}
	kg := backend.KeyGroupRange{Start: 0, End: 127}
	in, err := d.Open(ctx, daemon.OpenParams{Task: task, KeyGroups: kg, Kind: backend.KindFile, States: valueState})
	if err != nil {
		t.Fatal(err)
	}
	for id, v := range []string{"one", "two"} {
		if err := in.Backend.Put("v", backend.Key{KeyGroup: keyGroupOfK, Key: []byte("k")}, []byte(v)); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Snapshot(ctx, in, uint64(id+1), true); err != nil {
			t.Fatal(err)
		}
		if _, err := d.CompleteCheckpoint(ctx, "job", uint64(id+1), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.CloseInstance(in.ID, "job"); err != nil {
		t.Fatal(err)
	}
	return task, kg
}

// flipBit flips one bit in the middle of the file at p.
func flipBit(t *testing.T, p string) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x10
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// wantDataLoss checks that err is a DataLoss status whose message names
// every part.
func wantDataLoss(t *testing.T, what string, err error, parts ...string) {
	t.Helper()
	s, _ := status.FromError(err)
	if s.Code() != codes.DataLoss {
		t.Fatalf("%s: %v, want DataLoss", what, err)
	}
	for _, p := range parts {
		if !strings.Contains(s.Message(), p) {
			t.Errorf("%s: message %q does not name %q", what, s.Message(), p)
		}
	}
}

// TestDamagedManifestRefusedOverTheSocket: one flipped bit in the newest
// checkpoint's _metadata, and a client on the node's socket is told data
// loss, naming the file: by id, and for latest (naming the newest intact
// checkpoint too) unless it allows the fallback, which is then counted.
func TestDamagedManifestRefusedOverTheSocket(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	n, err := host.Open(ctx, host.Options{DataDir: dir, NoSocket: true, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	task, kg := checkpointTwice(t, n)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	flipBit(t, filepath.Join(dir, "checkpoints", "job", "chk-2", "_metadata"))

	rec := &recorder{}
	n, err = host.Open(ctx, host.Options{DataDir: dir, Logger: slog.New(rec)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	c, err := client.Dial(n.Socket(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	open := func(r client.Restore) (*client.Instance, error) {
		return c.Open(ctx, client.OpenSpec{Task: task, KeyGroups: kg, Backend: backend.KindFile, States: valueState,
			Restore: &r, Replace: true})
	}
	_, err = open(client.Restore{CheckpointID: 2})
	wantDataLoss(t, "restore of chk-2", err, "job/chk-2/_metadata", "checksum mismatch")
	_, err = open(client.Restore{Latest: true})
	wantDataLoss(t, "restore of latest", err, "job/chk-2/_metadata", "job/chk-1", "checksum mismatch")
	if got := metric(t, n, "stated_restore_fallbacks_total"); got != 0 {
		t.Fatalf("fallbacks counted before one happened: %v", got)
	}

	in, err := open(client.Restore{Latest: true, AllowFallback: true})
	if err != nil {
		t.Fatalf("restore of latest with the fallback allowed: %v", err)
	}
	defer in.Close(ctx)
	if got := in.RestoredCheckpoint(); got != 1 {
		t.Fatalf("fell back to checkpoint %d, want 1", got)
	}
	v, err := in.Get("v", []byte("k"), nil).Wait(ctx)
	if err != nil || string(v.Data) != "one" {
		t.Fatalf("restored value %q, %v; want one", v.Data, err)
	}
	if got := metric(t, n, "stated_restore_fallbacks_total"); got != 1 {
		t.Fatalf("stated_restore_fallbacks_total = %v, want 1", got)
	}
	if evs := rec.find("restore of the latest checkpoint fell back past damaged checkpoints", "task", task.String()); len(evs) != 1 ||
		!strings.Contains(attr(evs[0], "skipped"), "job/chk-2") {
		t.Fatalf("fallback log records %+v", evs)
	}
}

// TestDamagedJobFileRefusedOverTheSocket: a restore that must record its
// ownership change in a damaged job file is DataLoss naming the file.
func TestDamagedJobFileRefusedOverTheSocket(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	n, err := host.Open(ctx, host.Options{DataDir: dir, NoSocket: true, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	task, kg := checkpointTwice(t, n)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	flipBit(t, filepath.Join(dir, "checkpoints", "job", "_catalog"))
	n, err = host.Open(ctx, host.Options{DataDir: dir, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	c, err := client.Dial(n.Socket(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Open(ctx, client.OpenSpec{Task: task, KeyGroups: kg, Backend: backend.KindFile, States: valueState,
		Restore: &client.Restore{Latest: true}})
	wantDataLoss(t, "restore with a damaged job file", err, "job/_catalog")
}

// TestMissingFileIsDataLossOverTheSocket: a data file of a retained
// checkpoint that is gone from the store is data loss naming the file,
// not "not found".
func TestMissingFileIsDataLossOverTheSocket(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	n, err := host.Open(ctx, host.Options{DataDir: dir, NoSocket: true, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	task, kg := checkpointTwice(t, n)
	m, ok := n.Catalog().Checkpoint("job", 2)
	if !ok || len(m.Tasks[0].Files) == 0 {
		t.Fatal("no file in checkpoint 2")
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	gone := m.Tasks[0].Files[0].Path
	obj := gone
	if pk := m.Tasks[0].Files[0].Pack; pk != nil {
		obj = pk.Object // packed: its pack goes
	}
	if err := os.Remove(filepath.Join(dir, "checkpoints", filepath.FromSlash(obj))); err != nil {
		t.Fatal(err)
	}
	n, err = host.Open(ctx, host.Options{DataDir: dir, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	c, err := client.Dial(n.Socket(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Open(ctx, client.OpenSpec{Task: task, KeyGroups: kg, Backend: backend.KindFile, States: valueState,
		Restore: &client.Restore{CheckpointID: 2}})
	wantDataLoss(t, "restore with a missing file", err, gone, "missing")
}
