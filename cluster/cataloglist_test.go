package cluster

import (
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered/memstore"
)

// TestListThroughTheClientSaysRetained: the history listed through a
// node that does not host the catalog says which checkpoints are
// retained, as the hosting catalog's own List does (the computed fields
// of catalog.Record are not in its JSON, and the partition suite found
// every checkpoint listed as not retained).
func TestListThroughTheClientSaysRetained(t *testing.T) {
	store := memstore.New()
	caller := &swapCaller{}
	caller.host(t, store, 1)
	n := newClient(t, caller, store)
	task := backend.TaskID{Job: "j", Operator: "op", Subtask: 0}
	for id := uint64(1); id <= 2; id++ {
		if err := n.BeginCheckpoint("j", id); err != nil {
			t.Fatal(err)
		}
		if err := n.AddTaskHandle("j", id, upload(t, store, task, backend.KeyGroupRange{Start: 0, End: 127}, id, "x")); err != nil {
			t.Fatal(err)
		}
		if _, err := n.CompleteTasks(ctx, "j", id, []backend.TaskID{task}); err != nil {
			t.Fatal(err)
		}
	}
	recs := n.List("j")
	retained := 0
	for _, r := range recs {
		if r.Retained {
			retained++
		}
	}
	if len(recs) != 2 || retained == 0 {
		t.Fatalf("list through the client: %d records, %d retained: %+v", len(recs), retained, recs)
	}
}
