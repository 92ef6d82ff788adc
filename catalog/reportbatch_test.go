package catalog

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered/memstore"
)

// The fenced reports of a checkpoint's tasks share one log write once the
// job completed a checkpoint with as many tasks (before, each report was
// a write of its own), and a zombie's report among them is refused, naming
// its staleness, while the other tasks' reports are taken.
func TestFencedReportsShareALogWrite(t *testing.T) {
	mem := memstore.New()
	clk := &testClock{}
	l := newFakeLog(3)
	var tasks []*fakeTask
	for i := range 3 {
		tasks = append(tasks, newFakeTask("j", "op", i, backend.KeyGroupRangeForOperator(128, 3, i)))
	}
	a := openReplicated(t, mem, clk, l, 0)
	// Deterministic: a batch goes when every expected report is held, not
	// when a test goroutine was slow.
	a.reports.gather = time.Minute
	checkpoint(t, a, mem, 1, tasks...)

	tokens := map[backend.TaskID]uint64{}
	for i, tk := range tasks {
		tokens[tk.task] = uint64(10 + i)
	}
	l.mu.Lock()
	l.tokens = map[backend.TaskID]uint64{}
	for k, v := range tokens {
		l.tokens[k] = v
	}
	l.mu.Unlock()

	reportAll := func(id uint64, token func(backend.TaskID) uint64) []error {
		t.Helper()
		if err := a.BeginCheckpoint("j", id); err != nil {
			t.Fatal(err)
		}
		var hs []*backend.Handle
		for _, tk := range tasks {
			tk.snapshot(id)
			h, err := tk.upload(ctx, mem, id)
			if err != nil {
				t.Fatal(err)
			}
			hs = append(hs, h)
		}
		errs := make([]error, len(tasks))
		var wg sync.WaitGroup
		for i, h := range hs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = a.AddFencedTaskHandle("j", id, h, token(h.Task))
			}()
		}
		wg.Wait()
		return errs
	}

	l.mu.Lock()
	before := l.applied
	l.mu.Unlock()
	for i, err := range reportAll(2, func(t backend.TaskID) uint64 { return tokens[t] }) {
		if err != nil {
			t.Fatalf("report of task %d: %v", i, err)
		}
	}
	l.mu.Lock()
	writes := l.applied - before
	l.mu.Unlock()
	if writes != 1 {
		t.Fatalf("3 reports of checkpoint 2 took %d log writes, want 1 (its begin and the reports in one batch)", writes)
	}
	if _, err := a.Complete(ctx, "j", 2); err != nil {
		t.Fatal(err)
	}

	// Task 2 was taken over (token 13): its old instance's report under
	// token 12 is refused, the two others are taken.
	zombie := tasks[2].task
	l.mu.Lock()
	l.tokens[zombie] = 13
	l.mu.Unlock()
	errs := reportAll(3, func(t backend.TaskID) uint64 { return tokens[t] })
	for i, err := range errs[:2] {
		if err != nil {
			t.Fatalf("report of task %d beside a zombie's: %v", i, err)
		}
	}
	if !errors.Is(errs[2], ErrFenced) {
		t.Fatalf("the zombie's report: %v, want ErrFenced", errs[2])
	}
	if _, err := a.CompleteTasks(ctx, "j", 3, []backend.TaskID{tasks[0].task, tasks[1].task, zombie}); !errors.Is(err, ErrState) {
		t.Fatalf("complete without the zombie's task: %v, want ErrState naming it", err)
	}
	// Its new holder's report completes the checkpoint.
	h, err := tasks[2].upload(ctx, mem, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.AddFencedTaskHandle("j", 3, h, 13); err != nil {
		t.Fatal(err)
	}
	m, err := a.Complete(ctx, "j", 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Tasks) != 3 {
		t.Fatalf("checkpoint 3 holds %d tasks", len(m.Tasks))
	}
}
