package host_test

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/tiered/memstore"
)

// TestClusterAdoptsSavepointOfAnotherProcess: a savepoint another process
// writes into a running cluster's store (here a catalog of its own over
// the same root, as "stated savepoint edit" and "bootstrap" write theirs)
// is restored by every task of the job, through every node, without a
// restart: the leader's replicated catalog adopts it through its log,
// and each task holds the savepoint's state. Once another process
// deleted it, a restore from it fails saying so.
func TestClusterAdoptsSavepointOfAnotherProcess(t *testing.T) {
	store := memstore.New()
	nodes := startNodesWith(t, store, 3, "secret", nil)
	j := newClusterJob(t, nodes)
	for id := uint64(1); id <= 3; id++ {
		j.round(id)
		j.complete(id, nil)
	}
	want := make([]map[string]string, len(j.atDone))
	for i, m := range j.atDone {
		want[i] = maps.Clone(m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	other, err := catalog.Open(ctx, catalog.Options{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.SavepointFromCheckpoint(ctx, "ext", "job", 3); err != nil {
		t.Fatal(err)
	}
	other.Close()
	l := j.leader()
	if _, ok := nodes[l].Catalog().Savepoint("ext"); ok {
		t.Fatal("the leader knew the savepoint before anything asked (the test checks nothing)")
	}
	// Later checkpoints move the job on: the restore must read the
	// savepoint, not the job's state.
	j.round(4)
	j.complete(4, nil)

	for i, in := range j.inst {
		if err := nodes[j.where[i]].Daemon().CloseInstance(in.ID, "job"); err != nil {
			t.Fatal(err)
		}
	}
	for i := range j.inst {
		j.where[i] = (j.where[i] + 1) % len(nodes)
		in := j.open(i, &daemon.RestoreSpec{Savepoint: "savepoints/ext"})
		j.inst[i] = in
		j.check(i, in, want[i])
	}
	if _, ok := nodes[j.leader()].Catalog().Savepoint("ext"); !ok {
		t.Fatal("the leader's catalog does not list the savepoint it restored from")
	}

	// Deleted by another process: a restore from it fails saying so.
	other, err = catalog.Open(ctx, catalog.Options{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.DeleteSavepoint(ctx, "ext"); err != nil {
		t.Fatal(err)
	}
	other.Close()
	i := 0
	if err := nodes[j.where[i]].Daemon().CloseInstance(j.inst[i].ID, "job"); err != nil {
		t.Fatal(err)
	}
	_, err = nodes[(j.where[i]+1)%len(nodes)].Daemon().Open(ctx, daemon.OpenParams{Task: j.tasks[i], KeyGroups: j.kg(i),
		Kind: backend.KindFile, States: valueState, Restore: &daemon.RestoreSpec{Savepoint: "ext"}})
	if !errors.Is(err, backend.ErrNotFound) || !strings.Contains(err.Error(), "savepoint ext was deleted") {
		t.Fatalf("restore from a deleted savepoint: %v, want NOT_FOUND saying it was deleted", err)
	}
}
