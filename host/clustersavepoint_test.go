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
	"github.com/statedhq/stated/host"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// TestClusterSavepoint: in cluster mode a savepoint is a native copy of a
// completed checkpoint, asked through any node: it holds every task of the
// job whichever node reported it, and the whole job restores from it on
// other nodes, equal to the model of that checkpoint, after later
// checkpoints moved on and were retained away. A canonical savepoint
// (which needs every task's live backend) is refused, naming why.
//
// In changelog mode (materializing every 100 ms, so that the job's log is
// truncated past the savepoint's window) the same holds.
func TestClusterSavepoint(t *testing.T) {
	t.Run("plain", func(t *testing.T) { testClusterSavepoint(t, nil) })
	t.Run("changelog", func(t *testing.T) {
		testClusterSavepoint(t, func(_ int, o *host.Options) {
			o.Changelog, o.MaterializeInterval = true, 100*time.Millisecond
		})
	})
}

func testClusterSavepoint(t *testing.T, tune func(int, *host.Options)) {
	store := memstore.New()
	nodes := startNodesWith(t, store, 3, "secret", tune)
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
		if tune != nil {
			time.Sleep(150 * time.Millisecond) // a materialization
		}
	}
	// The leader's catalog discards what retention dropped in the
	// background, gathered for a moment.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, err := store.Stat(ctx, catalog.CheckpointManifest("job", 3))
		if tiered.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("checkpoint 3 is still retained (%v): the restore below would not show that the savepoint holds the state", err)
		}
	}
	if _, err := nodes[0].Daemon().TriggerSavepoint(ctx, "job", true, 99); err == nil {
		t.Fatal("a savepoint of a checkpoint the job never completed was taken")
	}
	if tune != nil {
		// The savepoint copied the checkpoint's log windows out of the
		// shared segments into its own files: it lists no segment.
		l := j.leader()
		m, ok := nodes[l].Catalog().Savepoint(strings.TrimPrefix(sp.Dir, catalog.SavepointsDir+"/"))
		if !ok {
			t.Fatalf("savepoint %s unknown to the leader's catalog", sp.Dir)
		}
		logBytes := int64(0)
		for _, h := range m.Tasks {
			if h.Log == nil || len(h.Log.Segments) > 0 {
				t.Fatalf("task %s of the savepoint: log %+v, want a window copied into its files", h.Task, h.Log)
			}
			logBytes += h.Log.Bytes
		}
		if logBytes == 0 {
			t.Fatal("no task of the savepoint has a log window: the case is not tested")
		}
	}
	// Every task restores from the savepoint on another node than before.
	for i, in := range j.inst {
		if err := nodes[j.where[i]].Daemon().CloseInstance(in.ID, "job"); err != nil {
			t.Fatal(err)
		}
	}
	if tune != nil {
		// Nothing of the job's log is needed any more: every segment goes.
		var segs []string
		err := tiered.Walk(ctx, store, "_changelog/", func(o tiered.ObjectInfo) error {
			segs = append(segs, o.Name)
			return nil
		})
		if err != nil || len(segs) == 0 {
			t.Fatalf("listing the job's log segments: %d, %v", len(segs), err)
		}
		if err := store.DeleteBatch(ctx, segs); err != nil {
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
