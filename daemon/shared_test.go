package daemon_test

import (
	"context"
	"errors"
	"strings"
	"testing"

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
