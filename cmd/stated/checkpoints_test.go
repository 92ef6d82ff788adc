package main

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/host"
	"github.com/statedhq/stated/internal/bytesize"
)

// TestCheckpointsTableChangelog: "stated checkpoints" shows the log bytes
// of checkpoints written in changelog mode next to their materialized size.
func TestCheckpointsTableChangelog(t *testing.T) {
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "checkpoints")
	n, err := host.Open(ctx, host.Options{DataDir: t.TempDir(), CheckpointStore: "file://" + root, NoSocket: true,
		Changelog: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	d := n.Daemon()
	in, err := d.Open(ctx, daemon.OpenParams{Task: backend.TaskID{Job: "j", Operator: "op", Subtask: 0},
		KeyGroups: backend.KeyGroupRange{Start: 0, End: 127}, Kind: backend.KindFile,
		States: []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}}})
	if err != nil {
		t.Fatal(err)
	}
	for id := uint64(1); id <= 2; id++ {
		for i := range 100 {
			if err := in.Backend.Put("v", backend.Key{KeyGroup: i, Key: []byte{byte(id)}}, bytes.Repeat([]byte("x"), 100)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := d.Snapshot(ctx, in, id, true); err != nil {
			t.Fatal(err)
		}
		if _, err := d.CompleteCheckpoint(ctx, "j", id, nil); err != nil {
			t.Fatal(err)
		}
	}
	m, _ := n.Catalog().Checkpoint("j", 2)
	logBytes := m.ChangelogSize()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if logBytes == 0 {
		t.Fatal("checkpoint 2 reads no log")
	}
	var out, errOut bytes.Buffer
	if err := runCheckpoints(ctx, &out, &errOut, cliStore{url: "file://" + root}, "", checkpointDetails{}); err != nil {
		t.Fatal(err)
	}
	var row2 string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, "2 ") {
			row2 = l
		}
	}
	if !strings.Contains(out.String(), "CHANGELOG") || !strings.Contains(row2, bytesize.Format(logBytes)) {
		t.Fatalf("checkpoint 2 reads %d log bytes (%s); the table says:\n%s", logBytes, bytesize.Format(logBytes), out.String())
	}

	// --details reads checkpoint 2 (base and log window): 200 entries of
	// state v, in key groups 0-99, two a key group.
	out.Reset()
	if err := runCheckpoints(ctx, &out, &errOut, cliStore{url: "file://" + root}, "",
		checkpointDetails{on: true, tempDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	var vRow string
	for _, l := range strings.Split(text, "\n") {
		if f := strings.Fields(l); len(f) > 3 && f[0] == "op" && f[1] == "v" {
			vRow = strings.Join(f, " ")
		}
	}
	if !strings.Contains(text, "state of checkpoint 2 of job j") || !strings.HasPrefix(vRow, "op v value 200 ") ||
		!strings.Contains(text, "key groups of operator op: 100 of 128 hold entries") {
		t.Fatalf("--details:\n%s", text)
	}
}

// The statistics columns: "-" for a checkpoint whose tasks reported
// nothing, the type and figures otherwise.
func TestStatsText(t *testing.T) {
	if got := statsText(catalog.CheckpointStats{}); got != "-\t-\t-\t-\t-\t-" {
		t.Fatalf("nothing reported: %q", got)
	}
	got := statsText(catalog.CheckpointStats{TaskStats: backend.TaskStats{Unaligned: true, SyncMicros: 1500, AsyncMicros: 2_000_000,
		AlignmentMicros: 0, StartDelayMicros: 40_000}, InFlightBytes: 3 << 20})
	if want := "unaligned\t1.5ms\t2s\t0s\t40ms\t3.0 MiB"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if got := statsText(catalog.CheckpointStats{TaskStats: backend.TaskStats{AlignmentMicros: 7}}); !strings.HasPrefix(got, "aligned\t") {
		t.Fatalf("aligned: %q", got)
	}
}
