package node_test

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// TestClusterSavepoint: in cluster mode a savepoint is a native copy of a
// completed checkpoint, asked through any node: it holds every task of the
// job whichever node reported it, and the whole job restores from it on
// other nodes, equal to the model of that checkpoint, after later
// checkpoints moved on and were retained away. A canonical savepoint
// (which needs every task's live backend) is refused, naming why.
func TestClusterSavepoint(t *testing.T) {
	store := memstore.New()
	nodes := startNodesOn(t, store, 3, "secret")
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
	if _, err := nodes[2].Daemon().TriggerSavepoint(ctx, "job", false, 0); !errors.Is(err, daemon.ErrUnsupported) {
		t.Fatalf("a canonical savepoint in cluster mode: %v", err)
	}
	// Through a node that holds only a third of the tasks: the latest
	// completed checkpoint (3), copied whole.
	sp, err := nodes[1].Daemon().TriggerSavepoint(ctx, "job", true, 0)
	if err != nil {
		t.Fatal(err)
	}
	if sp.Tasks != clusterSubtasks {
		t.Fatalf("savepoint %s holds %d tasks, want %d", sp.Dir, sp.Tasks, clusterSubtasks)
	}
	// The job moves on: later checkpoints complete, and retention drops
	// checkpoint 3 from the job, so only the savepoint keeps its state.
	for id := uint64(4); id <= 8; id++ {
		j.round(id)
		j.complete(id, nil)
	}
	if _, err := store.Stat(ctx, catalog.CheckpointManifest("job", 3)); !tiered.IsNotFound(err) {
		t.Fatalf("checkpoint 3 is still retained (%v): the restore below would not show that the savepoint holds the state", err)
	}
	if _, err := nodes[0].Daemon().TriggerSavepoint(ctx, "job", true, 99); err == nil {
		t.Fatal("a savepoint of a checkpoint the job never completed was taken")
	}
	// Every task restores from the savepoint on another node than before.
	for i, in := range j.inst {
		if err := nodes[j.where[i]].Daemon().CloseInstance(in.ID, "job"); err != nil {
			t.Fatal(err)
		}
	}
	for i := range j.inst {
		j.where[i] = (j.where[i] + 1) % len(nodes)
		in := j.open(i, &daemon.RestoreSpec{Savepoint: sp.Dir})
		j.check(i, in, want[i])
		if _, ok, err := in.Backend.Get("v", backend.Key{KeyGroup: j.kg(i).Start, Key: []byte("k4")}); err != nil || ok {
			t.Fatalf("%s restored from the savepoint of checkpoint 3 holds checkpoint 4's key (%v, %v)", j.tasks[i], ok, err)
		}
	}
}
