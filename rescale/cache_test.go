package rescale_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/lsm"
	"github.com/statedhq/stated/rescale"
)

// TestLSMRescaleSharedCacheReadsEachFileOnce rescales an lsm job 3->4 and
// 4->3 with the new subtasks sharing one download cache, as the subtasks
// of a daemon do, and checks with a store that counts reads that every
// file of the old checkpoints is read from checkpoint storage at most
// once, although files straddling a new boundary (the old L0 files, the
// boundary files of every level) are needed by two new subtasks. The
// subtasks restore one after another, then all at once.
func TestLSMRescaleSharedCacheReadsEachFileOnce(t *testing.T) {
	for _, c := range []struct{ oldP, newP int }{{3, 4}, {4, 3}} {
		for _, concurrent := range []bool{false, true} {
			t.Run(fmt.Sprintf("%dto%d/concurrent=%v", c.oldP, c.newP, concurrent), func(t *testing.T) {
				w := newLSMWorld(t)
				rng := rand.New(rand.NewPCG(uint64(c.oldP), 9))
				var old []*backend.Handle
				for i := 0; i < c.oldP; i++ {
					b := w.open(backend.Options{Task: backend.TaskID{Subtask: i}, KeyGroups: backend.KeyGroupRangeForOperator(w.maxP, c.oldP, i)})
					w.fill(b, 12, 256, rng)
					// Compacted levels plus a fresh L0 over every key group.
					if err := b.DB().Compact(ctx, []byte{0}, []byte{0xff}, false); err != nil {
						t.Fatal(err)
					}
					w.fill(b, 2, 256, rng)
					old = append(old, w.checkpoint(b))
					_ = b.Close()
				}
				plan, err := rescale.PlanOperator(old, w.maxP, c.newP)
				if err != nil {
					t.Fatal(err)
				}
				w.store.reads()
				insts := make([]*lsm.Backend, len(plan.Subtasks))
				if concurrent {
					// w.open is not safe for concurrent use: open the
					// instances here.
					var wg sync.WaitGroup
					errs := make([]error, len(plan.Subtasks))
					for i, st := range plan.Subtasks {
						o := plan.Options(st, backend.Options{})
						o.Task.Job, o.Task.Operator, o.MaxParallelism, o.States, o.Store, o.Clock = "job", "op", w.maxP, testStates, w.store, w.clock.Now
						dir := fmt.Sprintf("%s/concurrent-%d", w.root, i)
						wg.Add(1)
						go func() {
							defer wg.Done()
							insts[i], errs[i] = lsm.Open(o, lsm.Options{Dir: dir, MemTableSize: 64 << 10, TargetFileSize: 64 << 10,
								CacheSize: 4 << 20, DownloadCache: w.cache})
						}()
					}
					wg.Wait()
					for i, err := range errs {
						if err != nil {
							t.Fatalf("subtask %d: %v", i, err)
						}
						t.Cleanup(func() { _ = insts[i].Close() })
					}
				} else {
					for i, st := range plan.Subtasks {
						insts[i] = w.open(plan.Options(st, backend.Options{}))
					}
				}
				reads := w.store.reads()
				var fetched, fromCache int
				for i, st := range plan.Subtasks {
					w.compare(insts[i], st.KeyGroups, fmt.Sprintf("subtask %d %s", st.Index, st.KeyGroups))
					rs := insts[i].RestoreStats()
					fetched += rs.FilesDownloaded
					fromCache += rs.FilesFromCache
				}
				files := 0
				for _, h := range old {
					files += len(h.Files)
					for _, f := range h.Files {
						if n := reads[f.Path]; n > 1 {
							t.Errorf("%s (%s of %s) read %d times from checkpoint storage", f.Path, f.LocalName, h.Task, n)
						}
					}
				}
				// The test means something only if some file was needed twice.
				if fromCache == 0 {
					t.Fatalf("no file was taken from the cache (%d files fetched by %d subtasks)", fetched, len(plan.Subtasks))
				}
				t.Logf("%d old files; the new subtasks fetched %d, %d of them from the cache; %d objects read", files, fetched, fromCache, len(reads))
			})
		}
	}
}
