package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/host"
)

// TestRunningDaemonFindsEditedSavepoints: while a daemon runs (its sweep
// every 100ms with a 2s grace period), "stated savepoint edit" and
// "bootstrap" write savepoints into its store; tasks open restoring from
// each without a restart and hold exactly its contents (a checkpoint of
// them exports the savepoint's lines), and the sweeps, past the grace
// period, delete nothing of them. A savepoint with a damaged manifest is
// refused naming it; one "stated savepoint delete" removed is no longer
// listed after a sweep, and a restore from it fails saying it was
// deleted.
func TestRunningDaemonFindsEditedSavepoints(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	root := filepath.Join(base, "checkpoints")
	n, err := host.Open(ctx, host.Options{DataDir: filepath.Join(base, "d"), CheckpointStore: "file://" + root,
		NoSocket: true, Logger: slog.New(slog.DiscardHandler),
		GCGrace: 2 * time.Second, CheckpointTimeout: time.Second, SweepInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	d := n.Daemon()
	states := []backend.StateDescriptor{
		{Name: "list", Kind: backend.KindList},
		{Name: "map", Kind: backend.KindMap},
		{Name: "val", Kind: backend.KindValue},
	}
	const maxPar, par = 64, 2
	open := func(job string, sub int, sts []backend.StateDescriptor, restore *daemon.RestoreSpec) (*daemon.Instance, error) {
		return d.Open(ctx, daemon.OpenParams{Task: backend.TaskID{Job: job, Operator: "op", Subtask: sub},
			KeyGroups: backend.KeyGroupRangeForOperator(maxPar, par, sub), MaxParallelism: maxPar,
			Kind: backend.KindLSM, States: sts, Restore: restore})
	}
	for sub := range par {
		in, err := open("j", sub, states, nil)
		if err != nil {
			t.Fatal(err)
		}
		b := in.Backend
		for i := range 30 {
			kg := in.KeyGroups.Start + (i*7)%in.KeyGroups.Len()
			k := backend.Key{KeyGroup: kg, Key: []byte{0xfe, byte(sub), byte(i)}, Namespace: []byte("w")}
			for _, err := range []error{
				b.Put("val", k, []byte(fmt.Sprintf("v%d", i))),
				b.ListAppend("list", k, []byte{}, []byte{byte(i)}),
				b.MapPut("map", k, []byte("u"), []byte{byte(i), 1}),
			} {
				if err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	sp, err := d.TriggerSavepoint(ctx, "j", false, 0)
	if err != nil {
		t.Fatal(err)
	}
	export := func(target string) []byte {
		t.Helper()
		out := filepath.Join(t.TempDir(), "x.jsonl")
		if _, err := runState(t, root, "export", target, "-o", out); err != nil {
			t.Fatalf("export %s: %v", target, err)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	src := export(sp.Dir)

	// Written by other processes while the daemon runs.
	if _, err := runSavepoint(t, root, "edit", sp.Dir, "edited", "--drop-state", "list", "--keep-key-groups", "0-40"); err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(t.TempDir(), "in.jsonl")
	if err := os.WriteFile(in, src, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := runSavepoint(t, root, "bootstrap", "--from", in, "--job", "j", "--parallelism", "2",
		"--max-parallelism", "64", "boot"); err != nil {
		t.Fatal(err)
	}
	sums := func(id string) map[string]string { return treeSums(t, filepath.Join(root, "savepoints", id)) }
	before := map[string]map[string]string{"edited": sums("edited"), "boot": sums("boot")}
	if len(before["edited"]) == 0 || len(before["boot"]) == 0 {
		t.Fatal("the edit or bootstrap wrote nothing")
	}
	// Past the grace period, with sweeps running all along.
	time.Sleep(2500 * time.Millisecond)
	if _, err := n.Catalog().GC(ctx, false); err != nil {
		t.Fatal(err)
	}

	for i, c := range []struct {
		id     string
		states []backend.StateDescriptor
	}{{"edited", states[1:]}, {"boot", states}} {
		job := fmt.Sprintf("r%d", i)
		want := export("savepoints/" + c.id)
		for sub := range par {
			inst, err := open(job, sub, c.states, &daemon.RestoreSpec{Savepoint: "savepoints/" + c.id})
			if err != nil {
				t.Fatalf("restore %s/op/%d from %s without a daemon restart: %v", job, sub, c.id, err)
			}
			if _, err := d.Snapshot(ctx, inst, 1, false); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := d.CompleteCheckpoint(ctx, job, 1, nil); err != nil {
			t.Fatal(err)
		}
		if got := export(job + "/chk-1"); !sameLines(got, want) || len(want) == 0 {
			t.Errorf("restored from %s: a checkpoint exports %d bytes, the savepoint %d; they differ", c.id, len(got), len(want))
		}
	}
	if _, err := n.Catalog().GC(ctx, false); err != nil {
		t.Fatal(err)
	}
	for id, b := range before {
		after := sums(id)
		for name, sum := range b {
			if after[name] != sum {
				t.Errorf("savepoints/%s/%s changed or vanished while the daemon ran", id, name)
			}
		}
	}
	if ps := n.Catalog().Problems(); len(ps) > 0 {
		t.Errorf("the catalog reports problems: %v", ps)
	}

	// A damaged manifest: refused, naming it.
	broken := filepath.Join(root, "savepoints", "broken")
	if err := os.MkdirAll(broken, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(broken, catalog.ManifestName), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = open("r9", 0, states, &daemon.RestoreSpec{Savepoint: "broken"})
	if !errors.Is(err, backend.ErrCorrupt) || !strings.Contains(err.Error(), "savepoints/broken/"+catalog.ManifestName) {
		t.Fatalf("restore from a damaged savepoint: %v, want a corruption error naming its manifest", err)
	}

	// Deleted by "stated savepoint delete" while the daemon runs.
	del := newSavepointCmd()
	var delOut bytes.Buffer
	del.SetOut(&delOut)
	del.SetErr(&delOut)
	del.SilenceUsage, del.SilenceErrors = true, true
	del.SetArgs([]string{"delete", "savepoints/edited", "--checkpoint-store", root})
	if err := del.Execute(); err != nil {
		t.Fatalf("stated savepoint delete: %v\n%s", err, delOut.String())
	}
	if _, err := n.Catalog().GC(ctx, false); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range n.Catalog().Savepoints() {
		ids = append(ids, m.SavepointID)
	}
	if slices.Contains(ids, "edited") || !slices.Contains(ids, "boot") {
		t.Fatalf("savepoints listed after the delete and a sweep: %q", ids)
	}
	_, err = open("r8", 0, states[1:], &daemon.RestoreSpec{Savepoint: "edited"})
	if !errors.Is(err, backend.ErrNotFound) || !strings.Contains(err.Error(), "savepoint edited was deleted") {
		t.Fatalf("restore from a deleted savepoint: %v, want NOT_FOUND saying it was deleted", err)
	}
}
