package catalog

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// TestPlanSweep checks the sweep's decision alone, rule by rule (LESSONS:
// GC works from what is retained plus an in-flight set plus a grace
// period, and never deletes what a retained checkpoint, savepoint or hold
// references).
func TestPlanSweep(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	const grace = time.Hour
	old := now.Add(-2 * grace)
	young := now.Add(-grace / 2)
	obj := func(name string, at time.Time) tiered.ObjectInfo {
		return tiered.ObjectInfo{Name: name, Size: 10, ModTime: at}
	}
	set := func(names ...string) map[string]bool {
		m := map[string]bool{}
		for _, n := range names {
			m[n] = true
		}
		return m
	}
	for _, tc := range []struct {
		name          string
		objects       []tiered.ObjectInfo
		live          map[string]bool
		inflight      map[string]bool
		protectedDirs map[string]bool
		orphans       []string
		young         int
		unknown       int
	}{
		{name: "unreferenced and old: deleted",
			objects: []tiered.ObjectInfo{obj("j/shared/a", old)}, orphans: []string{"j/shared/a"}},
		{name: "unreferenced and young: kept for the grace period",
			objects: []tiered.ObjectInfo{obj("j/shared/a", young)}, young: 1},
		{name: "exactly at the cutoff: past the grace period",
			objects: []tiered.ObjectInfo{obj("j/shared/a", now.Add(-grace))}, orphans: []string{"j/shared/a"}},
		{name: "referenced by a retained checkpoint, a savepoint or a hold: kept however old",
			objects: []tiered.ObjectInfo{obj("j/shared/a", old), obj("j/chk-1/_metadata", old), obj("savepoints/s/op-0/f", old), obj("k/shared/held", old)},
			live:    set("j/shared/a", "j/chk-1/_metadata", "savepoints/s/op-0/f", "k/shared/held")},
		{name: "under an in-flight checkpoint or savepoint: kept however old",
			objects:  []tiered.ObjectInfo{obj("j/chk-7/op-0/f", old), obj("j/chk-7/_metadata", old), obj("savepoints/s/op-0/f", old)},
			inflight: set("j/chk-7", "savepoints/s")},
		{name: "an in-flight checkpoint does not protect shared files it did not list",
			objects:  []tiered.ObjectInfo{obj("j/shared/a", old), obj("j/chk-7/op-0/f", old)},
			inflight: set("j/chk-7"), orphans: []string{"j/shared/a"}},
		{name: "a directory written to within the grace period is in progress",
			objects: []tiered.ObjectInfo{obj("j/chk-3/op-0/a", old), obj("j/chk-3/op-1/b", young)}, young: 2},
		{name: "under a damaged manifest's directory: kept as it is",
			objects:       []tiered.ObjectInfo{obj("j/chk-4/op-0/a", old), obj("j/chk-4/_metadata", old)},
			protectedDirs: set("j/chk-4")},
		{name: "job files are never deleted, names outside the layout never touched",
			objects: []tiered.ObjectInfo{obj("j/_catalog", old), obj("not-a-layout-name", old), obj("j/other/x", old)}, unknown: 2},
		{name: "orphans come sorted",
			objects: []tiered.ObjectInfo{obj("j/shared/b", old), obj("j/chk-2/op-0/x", old), obj("j/shared/a", old)},
			orphans: []string{"j/chk-2/op-0/x", "j/shared/a", "j/shared/b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := sweepInput{objects: tc.objects, live: tc.live, inflight: tc.inflight, protectedDirs: tc.protectedDirs, grace: grace, now: now}
			p := planSweep(in)
			var got []string
			for _, o := range p.orphans {
				got = append(got, o.Name)
			}
			if !reflect.DeepEqual(got, tc.orphans) || p.young != tc.young || p.unknown != tc.unknown || p.youngBytes != int64(10*tc.young) {
				t.Fatalf("orphans %v young %d (%d bytes) unknown %d; want orphans %v young %d unknown %d",
					got, p.young, p.youngBytes, p.unknown, tc.orphans, tc.young, tc.unknown)
			}
		})
	}
}

// gateStore holds every DeleteBatch call until want calls run at once, and
// records the most that ever ran at once.
type gateStore struct {
	tiered.Store
	want    int
	mu      sync.Mutex
	running int
	most    int
	open    chan struct{}
}

func (g *gateStore) DeleteBatch(ctx context.Context, names []string) error {
	g.mu.Lock()
	g.running++
	g.most = max(g.most, g.running)
	if g.running == g.want {
		select {
		case <-g.open:
		default:
			close(g.open)
		}
	}
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.running--
		g.mu.Unlock()
	}()
	select {
	case <-g.open:
	case <-ctx.Done():
		return ctx.Err()
	}
	return g.Store.DeleteBatch(ctx, names)
}

// TestDeletePhase checks the sweep's delete phase alone: batches of
// DeleteBatch names, DeleteParallelism of them at once (and no more), a
// transient failure retried, and names already gone deleted successfully.
func TestDeletePhase(t *testing.T) {
	old := retryBackoff
	retryBackoff = 0
	defer func() { retryBackoff = old }()
	mem := memstore.New()
	fs := newFaultStore(mem)
	g := &gateStore{Store: fs, want: 3, open: make(chan struct{})}
	c := openCat(t, g, &testClock{}, func(o *Options) { o.DeleteBatch = 4; o.DeleteParallelism = 3 })
	var all []string
	for i := range 40 {
		name := fmt.Sprintf("j/shared/f-%02d", i)
		all = append(all, name)
		if i%2 == 0 { // the others are gone already
			if err := tiered.PutBytes(ctx, mem, name, []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
	}
	fs.failDeletes = 1
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tried, err := c.deleteUnreferenced(dctx, all)
	if err != nil {
		t.Fatalf("delete: %v (parallelism never reached 3?)", err)
	}
	if len(tried) != 40 {
		t.Fatalf("tried %d names, want 40", len(tried))
	}
	if left := storeSnapshot(t, mem, "j/"); len(left) != 0 {
		t.Fatalf("left %v", names(left))
	}
	// 10 batches, one of them attempted twice.
	if fs.deleteCalls != 11 || g.most != 3 {
		t.Fatalf("%d delete calls (want 11), at most %d at once (want 3)", fs.deleteCalls, g.most)
	}
}
