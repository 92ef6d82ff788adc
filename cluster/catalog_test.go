package cluster

import (
	"context"
	"fmt"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/internal/frame"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// TestCatalogReplicaThroughSnapshots runs the real catalog replicated on
// the log: checkpoints completed through the leader's catalog, then every
// node snapshotted and restarted with an empty replica, which the
// snapshot and the log after it fill again. The next leader's catalog
// opens from its replica with everything retained, completes the
// checkpoint left in flight with the handle reported before the restart,
// and every replica's image ends the same.
func TestCatalogReplicaThroughSnapshots(t *testing.T) {
	store := memstore.New()
	reps := []*catalog.Replica{catalog.NewReplica(2, 0), catalog.NewReplica(2, 0), catalog.NewReplica(2, 0)}
	c := startCluster(t, 3, func(i int, o *Options) {
		o.Service = reps[i]
		o.SnapshotThreshold, o.TrailingLogs = 16, 4
	})
	ctx := ctxT(t)
	open := func() *catalog.Catalog {
		t.Helper()
		l := c.leader()
		if err := c.nodes[l].Barrier(ctx); err != nil {
			t.Fatal(err)
		}
		propose := func(ctx context.Context, cmd []byte, fences []catalog.Fence) (any, error) {
			return c.nodes[l].Propose(ctx, cmd, nil)
		}
		cat, err := catalog.Open(ctx, catalog.Options{Store: store, Retain: 2, Replica: reps[l], Propose: propose})
		if err != nil {
			t.Fatal(err)
		}
		return cat
	}
	task := backend.TaskID{Job: "j", Operator: "op"}
	handle := func(id uint64) *backend.Handle {
		t.Helper()
		data := []byte(fmt.Sprint("state of ", id))
		name := fmt.Sprintf("%s/op-0/state", catalog.CheckpointDir("j", id))
		if err := tiered.PutBytes(ctx, store, name, data); err != nil {
			t.Fatal(err)
		}
		return &backend.Handle{Version: backend.HandleFormatVersion, Backend: backend.KindFile, Task: task, CheckpointID: id,
			KeyGroups: backend.KeyGroupRange{Start: 0, End: 127}, MaxParallelism: 128,
			Files: []backend.FileRef{{Path: name, Size: int64(len(data)), CRC32C: frame.Checksum(data)}}}
	}
	cat := open()
	for id := uint64(1); id <= 12; id++ {
		if err := cat.BeginCheckpoint("j", id); err != nil {
			t.Fatal(err)
		}
		if err := cat.AddTaskHandle("j", id, handle(id)); err != nil {
			t.Fatal(err)
		}
		if id < 12 {
			if _, err := cat.Complete(ctx, "j", id); err != nil {
				t.Fatal(err)
			}
		}
	}
	cat.Close()
	c.snapshotAndRestart(func(i int, o *Options) {
		reps[i] = catalog.NewReplica(2, 0)
		o.Service = reps[i]
	})
	cat = open()
	defer cat.Close()
	if got := cat.Retained("j"); len(got) != 2 || got[1] != 11 {
		t.Fatalf("retained after the restart: %v", got)
	}
	if got := cat.InFlight("j"); len(got) != 1 || got[0] != 12 {
		t.Fatalf("in flight after the restart: %v", got)
	}
	if _, err := cat.Complete(ctx, "j", 12); err != nil {
		t.Fatalf("complete with the handle reported before the restart: %v", err)
	}
	cat.Close() // its discarder's commands are in
	l := c.leader()
	if err := c.nodes[l].Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	want, err := reps[l].Image()
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		for _, r := range reps {
			if img, err := r.Image(); err != nil || string(img) != string(want) {
				return false
			}
		}
		return true
	})
	for i, r := range reps {
		if !r.Loaded() {
			t.Fatalf("replica %d is not loaded after the restart", i)
		}
	}
}
