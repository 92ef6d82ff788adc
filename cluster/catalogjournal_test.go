package cluster

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	pb "github.com/statedhq/stated/cluster/clusterpb"
	"github.com/statedhq/stated/tiered/memstore"
)

// TestMergeSettlements: merging the settler's ranges deletes exactly the
// keys the ranges cover, no key between them (another checkpoint's
// reports), and leaves sorted, disjoint ranges.
func TestMergeSettlements(t *testing.T) {
	key := func(i int) string { return fmt.Sprintf("k%03d", i) }
	rapid.Check(t, func(t *rapid.T) {
		var in []settlement
		for range rapid.IntRange(0, 12).Draw(t, "n") {
			from := rapid.IntRange(0, 60).Draw(t, "from")
			to := from + rapid.IntRange(1, 10).Draw(t, "len")
			in = append(in, settlement{key(from), key(to)})
		}
		covered := func(sts []settlement, k string) bool {
			for _, st := range sts {
				if st.from <= k && k < st.to {
					return true
				}
			}
			return false
		}
		want := map[string]bool{}
		for i := range 75 {
			want[key(i)] = covered(in, key(i))
		}
		out := mergeSettlements(append([]settlement(nil), in...))
		for i := range 75 {
			if got := covered(out, key(i)); got != want[key(i)] {
				t.Fatalf("key %s covered %v after merging %v into %v, want %v", key(i), got, in, out, want[key(i)])
			}
		}
		for i := 1; i < len(out); i++ {
			if out[i].from <= out[i-1].to {
				t.Fatalf("merged ranges %v overlap or touch at %d", out, i)
			}
		}
	})
}

// slowJournal is a memJournal whose writes take a while, as a raft log
// write does, and that keeps the size of each write.
type slowJournal struct {
	memJournal
	took   time.Duration
	mu     sync.Mutex
	writes []int
}

func (j *slowJournal) PutMany(ctx context.Context, recs map[string][]byte, fences map[string]Fence) (map[string]error, error) {
	time.Sleep(j.took)
	j.mu.Lock()
	j.writes = append(j.writes, len(recs))
	j.mu.Unlock()
	return j.memJournal.PutMany(ctx, recs, fences)
}

func (j *slowJournal) take() []int {
	j.mu.Lock()
	defer j.mu.Unlock()
	w := j.writes
	j.writes = nil
	return w
}

// TestReportsOfACheckpointShareAWrite: once a job's checkpoint had six
// reports, the next checkpoint's six, arriving over a millisecond, are
// kept in one journal write, not the first alone and the rest after it;
// a checkpoint that gets fewer (a task gone) waits at most reportLinger
// for the rest.
func TestReportsOfACheckpointShareAWrite(t *testing.T) {
	store := memstore.New()
	cat, err := catalog.Open(ctx, catalog.Options{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	j := &slowJournal{memJournal: memJournal{m: map[string][]byte{}}, took: 3 * time.Millisecond}
	srv, err := NewCatalogServer(cat, CatalogServerOptions{Epoch: 1, Journal: j})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	const tasks = 6
	report := func(id uint64, n int) time.Duration {
		t.Helper()
		if err := cat.BeginCheckpoint("j", id); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, n)
		t0 := time.Now()
		for i := range n {
			task := backend.TaskID{Job: "j", Operator: "op", Subtask: i}
			enc, err := backend.EncodeHandle(upload(t, store, task, backend.KeyGroupRangeForOperator(128, tasks, i), id, "x"))
			if err != nil {
				t.Fatal(err)
			}
			payload, _ := proto.Marshal(&pb.ReportRequest{Job: "j", Id: id, Report: &pb.Report{Handle: enc}})
			wg.Add(1)
			go func() {
				defer wg.Done()
				out, err := srv.Handle(ctx, pb.Catalog_Report_FullMethodName, payload)
				var a pb.CatalogAck
				if err == nil {
					err = proto.Unmarshal(out, &a)
				}
				if err != nil || a.GetStatus().GetError() != nil {
					errs <- fmt.Errorf("report %d of checkpoint %d: %v %v", i, id, a.GetStatus().GetError(), err)
				}
			}()
			// 200 us apart (a spin: a sleep that short oversleeps).
			for t1 := time.Now(); time.Since(t1) < 200*time.Microsecond; {
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		return time.Since(t0)
	}
	report(1, tasks)
	if w := j.take(); len(w) < 2 {
		// The first checkpoint of a job has nothing to expect: its
		// first report is written alone.
		t.Fatalf("checkpoint 1's reports went in writes %v, want the first alone", w)
	}
	report(2, tasks)
	if w := j.take(); len(w) != 1 || w[0] != tasks {
		t.Fatalf("checkpoint 2's reports went in writes %v, want one write of %d", w, tasks)
	}
	took := report(3, tasks-1)
	if w := j.take(); sum(w) != tasks-1 {
		t.Fatalf("checkpoint 3's reports went in writes %v, want %d reports kept", w, tasks-1)
	}
	if took > time.Second {
		t.Fatalf("checkpoint 3, one report short, took %v to keep its reports", took)
	}
	if got := len(j.Read(reportKey("j", 3))); got != tasks-1 {
		t.Fatalf("the journal holds %d reports of checkpoint 3, want %d", got, tasks-1)
	}
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}
