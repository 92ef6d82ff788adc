package host_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// TestZombieCompletionFenced: an instance snapshots and reports a
// checkpoint while it holds its task's token, then the task is opened on
// another node; the old node's completion of that checkpoint is refused
// on the leader (the tokens travel with the completion) and the
// checkpoint does not complete.
func TestZombieCompletionFenced(t *testing.T) {
	st := memstore.New()
	nodes := startNodesOn(t, st, 3, "secret")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	task := backend.TaskID{Job: "z", Operator: "op"}
	open := func(nd int) *daemon.Instance {
		in, err := nodes[nd].Daemon().Open(ctx, daemon.OpenParams{Task: task, KeyGroups: backend.KeyGroupRange{Start: 0, End: 127},
			Kind: backend.KindFile, States: valueState})
		if err != nil {
			t.Fatal(err)
		}
		return in
	}
	old := open(0)
	if _, err := nodes[0].Daemon().Snapshot(ctx, old, 1, true); err != nil {
		t.Fatalf("snapshot while holding the token: %v", err)
	}
	open(1) // the task moves: a newer token
	_, err := nodes[0].Daemon().CompleteCheckpoint(ctx, "z", 1, nil)
	if !errors.Is(err, daemon.ErrFenced) || !strings.Contains(err.Error(), "node n1 holds token") {
		t.Fatalf("the old node's completion: %v", err)
	}
	if _, err := st.Stat(ctx, catalog.CheckpointManifest("z", 1)); !tiered.IsNotFound(err) {
		t.Fatalf("checkpoint 1 has a manifest (%v)", err)
	}
}
