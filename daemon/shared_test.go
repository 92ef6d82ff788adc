package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/daemon/openers"
	"github.com/statedhq/stated/tiered/memstore"
)

// sharedDaemon is one of several daemons reporting to one catalog, as the
// nodes of a cluster do.
func sharedDaemon(t *testing.T, store *memstore.Store, cat daemon.Catalog) *daemon.Daemon {
	t.Helper()
	set, err := openers.New(openers.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { set.Close() })
	d, err := daemon.New(daemon.Config{DataDir: t.TempDir(), Store: store, Catalog: cat, SharedCatalog: true,
		Openers: set.Openers, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Shutdown(context.Background()) })
	return d
}

// TestSharedCatalogCompletion: a job's two tasks live on two daemons that
// share one catalog. A completion naming both fails, naming the missing
// task, until both reported; then it completes through either daemon (and
// a third daemon with no task of the job), and a task restores on the
// other daemon from what the first wrote.
func TestSharedCatalogCompletion(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	cat, err := catalog.Open(ctx, catalog.Options{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	d1, d2, d3 := sharedDaemon(t, store, cat), sharedDaemon(t, store, cat), sharedDaemon(t, store, cat)
	open := func(d *daemon.Daemon, sub int, restore *daemon.RestoreSpec) *daemon.Instance {
		t.Helper()
		in, err := d.Open(ctx, daemon.OpenParams{Task: backend.TaskID{Job: "job", Operator: "op", Subtask: sub},
			KeyGroups: backend.KeyGroupRangeForOperator(128, 2, sub), Kind: backend.KindFile, States: valueState, Restore: restore})
		if err != nil {
			t.Fatal(err)
		}
		return in
	}
	a, b := open(d1, 0, nil), open(d2, 1, nil)
	if err := a.Backend.Put("v", backend.Key{KeyGroup: a.KeyGroups.Start, Key: []byte("k")}, []byte("from d1")); err != nil {
		t.Fatal(err)
	}
	tasks := []backend.TaskID{a.Task, b.Task}
	if _, err := d1.Snapshot(ctx, a, 1, true); err != nil {
		t.Fatal(err)
	}
	_, err = d1.CompleteCheckpoint(ctx, "job", 1, tasks)
	if err == nil || !strings.Contains(err.Error(), b.Task.String()) {
		t.Fatalf("complete before %s reported: %v", b.Task, err)
	}
	// d2's own task must have snapshotted before d2 completes.
	if _, err := d2.CompleteCheckpoint(ctx, "job", 1, tasks); err == nil {
		t.Fatal("d2 completed without its own task's snapshot")
	}
	if _, err := d2.Snapshot(ctx, b, 1, true); err != nil {
		t.Fatal(err)
	}
	for i, d := range []*daemon.Daemon{d3, d1, d2} {
		info, err := d.CompleteCheckpoint(ctx, "job", 1, tasks)
		if err != nil || info.Tasks != 2 {
			t.Fatalf("complete through daemon %d: %+v %v", i, info, err)
		}
	}
	// A checkpoint no task snapshotted goes to the catalog, which names
	// the tasks that did not report.
	if _, err := d3.CompleteCheckpoint(ctx, "job", 2, tasks); !errors.Is(err, catalog.ErrState) || !strings.Contains(err.Error(), a.Task.String()) {
		t.Fatalf("complete of a checkpoint no one snapshotted: %v", err)
	}
	// Task 0 moves to d2 and restores what d1 wrote.
	if err := d1.CloseInstance(a.ID, "job"); err != nil {
		t.Fatal(err)
	}
	moved := open(d2, 0, &daemon.RestoreSpec{Latest: true})
	if moved.RestoredFrom != 1 {
		t.Fatalf("restored from %d", moved.RestoredFrom)
	}
	v, _, err := moved.Backend.Get("v", backend.Key{KeyGroup: a.KeyGroups.Start, Key: []byte("k")})
	if err != nil || string(v) != "from d1" {
		t.Fatalf("restored value %q %v", v, err)
	}
}

// TestSharedCatalogPacks: in cluster mode (daemons sharing one catalog)
// each daemon packs the snapshot files of its tasks of a checkpoint into
// one object; the shared catalog completes the checkpoint over both
// packs, the packs go with the checkpoint once a later one subsumes it,
// and another daemon restores every task exactly from the later one's.
func TestSharedCatalogPacks(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	cat, err := catalog.Open(ctx, catalog.Options{Store: store, Retain: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	const tasks = 4
	ds := []*daemon.Daemon{sharedDaemon(t, store, cat), sharedDaemon(t, store, cat)}
	open := func(d *daemon.Daemon, sub int, restore *daemon.RestoreSpec) *daemon.Instance {
		t.Helper()
		in, err := d.Open(ctx, daemon.OpenParams{Task: backend.TaskID{Job: "job", Operator: "op", Subtask: sub},
			KeyGroups: backend.KeyGroupRangeForOperator(128, tasks, sub), MaxParallelism: 128, Kind: backend.KindFile,
			States: valueState, Restore: restore})
		if err != nil {
			t.Fatal(err)
		}
		return in
	}
	key := func(in *daemon.Instance) backend.Key {
		return backend.Key{KeyGroup: in.KeyGroups.Start, Key: []byte("k")}
	}
	var ins []*daemon.Instance
	var ids []backend.TaskID
	for sub := range tasks {
		in := open(ds[sub%2], sub, nil)
		if err := in.Backend.Put("v", key(in), fmt.Appendf(nil, "value %d", sub)); err != nil {
			t.Fatal(err)
		}
		ins, ids = append(ins, in), append(ids, in.Task)
	}
	checkpoint := func(id uint64) {
		t.Helper()
		errs := make(chan error, tasks)
		for sub, in := range ins {
			go func() {
				_, err := ds[sub%2].Snapshot(ctx, in, id, true)
				errs <- err
			}()
		}
		for range ins {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		if _, err := ds[0].CompleteCheckpoint(ctx, "job", id, ids); err != nil {
			t.Fatal(err)
		}
	}
	checkpoint(1)
	var packs []string
	for _, n := range storeNames(t, store, "job/chk-1/") {
		if strings.Contains(n, "/packed-") {
			packs = append(packs, n)
		}
	}
	if len(packs) != 2 {
		t.Fatalf("checkpoint 1 of two daemons wrote packs %v, want one each", packs)
	}
	m, _ := cat.Checkpoint("job", 1)
	for _, h := range m.Tasks {
		if len(h.Files) != 1 || h.Files[0].Pack == nil {
			t.Fatalf("handle of %s: files %+v, want its file packed", h.Task, h.Files)
		}
	}
	rep, err := catalog.Verify(ctx, store, "job/chk-1", 2)
	if err != nil || len(rep.Problems) != 0 || rep.Files != tasks {
		t.Fatalf("verify: %v %+v", err, rep)
	}
	// Checkpoint 2 subsumes 1 (retain 1): both packs go with it.
	checkpoint(2)
	deadline := time.Now().Add(5 * time.Second)
	for len(storeNames(t, store, "job/chk-1/")) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("checkpoint 1's objects are still there: %v", storeNames(t, store, "job/chk-1/"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	m, _ = cat.Checkpoint("job", 2)
	for _, h := range m.Tasks {
		if len(h.Files) != 1 || h.Files[0].Pack == nil {
			t.Fatalf("checkpoint 2, handle of %s: files %+v, want its file packed", h.Task, h.Files)
		}
	}
	d3 := sharedDaemon(t, store, cat)
	for sub := range tasks {
		r := open(d3, sub, &daemon.RestoreSpec{Latest: true, NoClaim: true})
		v, ok, err := r.Backend.Get("v", key(r))
		if err != nil || !ok || string(v) != fmt.Sprintf("value %d", sub) {
			t.Fatalf("subtask %d restored %q %v %v", sub, v, ok, err)
		}
		if err := d3.CloseInstance(r.ID, "job"); err != nil {
			t.Fatal(err)
		}
	}
}
