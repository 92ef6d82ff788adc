package catalog

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
	"github.com/statedhq/stated/tiered/metered"
)

// pagedStore lists at most pageSize names a page, after a pause: a large
// S3 bucket in miniature.
type pagedStore struct {
	tiered.Store
	pageSize int
	pause    time.Duration
}

func (s pagedStore) List(ctx context.Context, prefix, after string, _ int) (tiered.ListPage, error) {
	time.Sleep(s.pause)
	return s.Store.List(ctx, prefix, after, s.pageSize)
}

// A sweep reads at most SweepMaxListPages LIST pages; one that reaches the
// bound deletes nothing and says so, and every page is counted.
func TestSweepListPagesBounded(t *testing.T) {
	mem := memstore.New()
	meter := metered.New(pagedStore{Store: mem, pageSize: 10})
	clk := &testClock{}
	c := openCat(t, meter, clk, func(o *Options) { o.SweepMaxListPages = 3 })
	for i := range 95 {
		if err := tiered.PutBytes(ctx, mem, fmt.Sprintf("j/shared/orphan-%03d", i), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(2 * time.Hour)
	before := meter.Counts().Calls[tiered.OpList]
	rep, err := c.GC(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	lists := meter.Counts().Calls[tiered.OpList] - before
	if !rep.Truncated || rep.ListPages != 3 || lists != 3 || len(rep.Orphans) != 0 {
		t.Fatalf("bounded sweep: truncated %v, %d pages reported, %d LIST calls, %d orphans deleted", rep.Truncated, rep.ListPages, lists, len(rep.Orphans))
	}
	if len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], "--sweep-max-list-pages") {
		t.Fatalf("problems %v", rep.Problems)
	}
	if left := storeSnapshot(t, mem, "j/shared/"); len(left) != 95 {
		t.Fatalf("a truncated sweep deleted %d objects", 95-len(left))
	}
	// Without the bound the same store takes 10 pages and every orphan
	// goes.
	c.opts.SweepMaxListPages = -1
	before = meter.Counts().Calls[tiered.OpList]
	if rep, err = c.GC(ctx, false); err != nil {
		t.Fatal(err)
	}
	lists = meter.Counts().Calls[tiered.OpList] - before
	if rep.Truncated || rep.ListPages != 10 || lists != 10 || len(rep.Orphans) != 95 {
		t.Fatalf("unbounded sweep: truncated %v, %d pages reported, %d LIST calls, %d orphans", rep.Truncated, rep.ListPages, lists, len(rep.Orphans))
	}
	st := c.Stats()
	if st.Sweeps != 2 || st.SweepListPages != 13 || st.SweepsTruncated != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// The background sweep waits SweepInterval after each pass ends: a pass
// slower than the interval is not followed by another at once.
func TestSweepQuietTimeAfterEachPass(t *testing.T) {
	const interval, pause = 100 * time.Millisecond, 150 * time.Millisecond
	c := openCat(t, pagedStore{Store: memstore.New(), pageSize: 10, pause: pause}, &testClock{},
		func(o *Options) { o.SweepInterval = interval })
	var (
		mu     sync.Mutex
		starts []time.Time
	)
	done := make(chan struct{})
	c.afterSweep = func(*GCReport, error) {
		mu.Lock()
		defer mu.Unlock()
		// The pass began at least pause ago (its one LIST page).
		starts = append(starts, time.Now())
		if len(starts) == 4 {
			close(done)
		}
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the background sweep did not run four times")
	}
	c.Close()
	mu.Lock()
	defer mu.Unlock()
	// Between the ends of two passes: the quiet time and the next pass.
	for i := 1; i < 4; i++ {
		if gap := starts[i].Sub(starts[i-1]); gap < interval+pause {
			t.Fatalf("pass %d ended %s after pass %d: less than the interval %s plus a pass (%s)", i+1, gap, i, interval, pause)
		}
	}
}
