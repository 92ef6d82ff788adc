package api_test

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/backend"
)

// TestSnapshotDuringGroupedWrites: while one goroutine writes rounds of
// keys (one request per round, so one Pebble batch on lsm), others take
// checkpoints. A restored checkpoint holds one whole round for every key,
// never a mix, and never less than the last round acknowledged before the
// snapshot was asked for.
func TestSnapshotDuringGroupedWrites(t *testing.T) {
	ctx := ctxT(t)
	h := startDaemon(t, harnessOpts{})
	const keys, rounds, snaps = 200, 60, 3 // the catalog retains 3
	// A round is one request only if its batch goes out when full: with the
	// default 200 µs flush delay a slow round (-race) is split in two.
	c := h.dial(client.Options{MaxBatchOps: keys, MaxInFlight: 4, FlushDelay: time.Minute})
	tk := task("grp", "op", 0)
	spec := client.OpenSpec{Task: tk, Parallelism: 1, Backend: backend.KindLSM, States: allStates}
	in, err := c.Open(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	var acked atomic.Int64
	acked.Store(-1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for r := range rounds {
			for k := range keys {
				in.Put("v", []byte(fmt.Sprint("k", k)), nil, []byte(strconv.Itoa(r)))
			}
			if err := in.Sync(ctx); err != nil {
				t.Error(err)
				return
			}
			acked.Store(int64(r))
		}
	}()
	floors := map[uint64]int64{}
	for id := uint64(1); id <= snaps; id++ {
		floors[id] = acked.Load()
		if _, err := in.Snapshot(ctx, id, true); err != nil {
			t.Fatal(err)
		}
		if _, err := c.CompleteCheckpoint(ctx, "grp", id); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if err := in.Err(); err != nil {
		t.Fatal(err)
	}
	in.Abandon()
	for id := uint64(1); id <= snaps; id++ {
		spec.Restore, spec.Replace = &client.Restore{CheckpointID: id}, true
		r, err := c.Open(ctx, spec)
		if err != nil {
			t.Fatalf("restore %d: %v", id, err)
		}
		var round string
		for k := range keys {
			v, err := r.Get("v", []byte(fmt.Sprint("k", k)), nil).Wait(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if k == 0 {
				round = string(v.Data)
			}
			if string(v.Data) != round {
				t.Fatalf("checkpoint %d: key %d holds round %q, key 0 round %q", id, k, v.Data, round)
			}
		}
		got := int64(-1)
		if round != "" {
			got, _ = strconv.ParseInt(round, 10, 64)
		}
		if got < floors[id] {
			t.Fatalf("checkpoint %d holds round %d, but round %d was acknowledged before it", id, got, floors[id])
		}
		r.Abandon()
	}
}
