package api_test

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/statedhq/stated/api/client"
	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/host"
)

// TestSnapshotDuringGroupedWrites: while one goroutine writes rounds of
// keys (one request per round, so one group, one Pebble batch on lsm),
// checkpoints are taken through a connection of their own, so nothing
// waits for the writer's requests: a snapshot lands anywhere, also while a
// round is being applied. A restored checkpoint holds one whole round for
// every key, never a mix, and never less than the last round acknowledged
// before the snapshot was asked for. (The client's own Snapshot syncs its
// instance first, which would flush a half-issued round as a request of
// its own.)
func TestSnapshotDuringGroupedWrites(t *testing.T) {
	ctx := ctxT(t)
	const keys, rounds, snaps = 400, 150, 25
	h := startDaemon(t, harnessOpts{node: func(o *host.Options) { o.Retain = snaps }})
	// A round is one request: it goes out when full, never on a delay.
	c := h.dial(client.Options{MaxBatchOps: keys, MaxInFlight: 4, FlushDelay: time.Minute})
	tk := task("grp", "op", 0)
	spec := client.OpenSpec{Task: tk, Parallelism: 1, Backend: backend.KindLSM, States: allStates}
	in, err := c.Open(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	target, err := client.Target(h.sock)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	raw := pb.NewStatedClient(cc)
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
		if _, err := raw.Snapshot(ctx, &pb.SnapshotRequest{InstanceId: in.ID(), Job: tk.Job, CheckpointId: id, Wait: true, BatchesAnswered: true}); err != nil {
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
	var held []int64
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
		held = append(held, got)
		r.Abandon()
	}
	// The snapshots must have landed while rounds were being written, or
	// the test showed nothing.
	if !slices.ContainsFunc(held, func(r int64) bool { return r >= 0 && r < rounds-1 }) {
		t.Fatalf("the checkpoints hold rounds %v: all taken before or after the writes, none during them", held)
	}
}
