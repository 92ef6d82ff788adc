package catalog

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// TestConcurrentJobsAndSweeps runs checkpoints, aborts and savepoints of
// several jobs while sweeps run with a clock far past the grace period (so
// every unreferenced object is fair game), then checks that every manifest
// verifies. Run with -race it also checks the locking.
func TestConcurrentJobsAndSweeps(t *testing.T) {
	mem := memstore.New()
	clk := &testClock{}
	c := openCat(t, mem, clk, func(o *Options) { o.GCGrace = time.Nanosecond })
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 100)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := c.GC(ctx, false); err != nil {
				errs <- err
				return
			}
		}
	}()
	var jobs sync.WaitGroup
	for j := 0; j < 4; j++ {
		jobs.Add(1)
		go func(job string) {
			defer jobs.Done()
			tk := newFakeTask(job, "op", 0, backend.KeyGroupRange{Start: 0, End: 127})
			for id := uint64(1); id <= 15; id++ {
				tk.state[fmt.Sprint("k", id%3)] = fmt.Sprint(id)
				if err := c.BeginCheckpoint(job, id); err != nil {
					errs <- err
					return
				}
				tk.snapshot(id)
				h, err := tk.upload(ctx, mem, id)
				if err != nil {
					errs <- err
					return
				}
				if id%4 == 0 {
					if err := c.Abort(ctx, job, id, StatusAborted, "test"); err != nil {
						errs <- err
					}
					tk.notifyAborted(id)
					continue
				}
				// The sweep may have taken a fresh upload before the handle
				// was offered (the grace period is 1ns): then the checkpoint
				// fails cleanly, as it must, and is aborted.
				err = c.AddTaskHandle(job, id, h)
				if err != nil && !errors.Is(err, ErrNotFound) {
					errs <- fmt.Errorf("add handle: %w", err)
					return
				}
				if err == nil {
					_, err = c.Complete(ctx, job, id)
				}
				if err != nil {
					if !errors.Is(err, ErrNotFound) {
						errs <- fmt.Errorf("complete: %w", err)
					}
					if abortErr := c.Abort(ctx, job, id, StatusAborted, err.Error()); abortErr != nil {
						errs <- abortErr
					}
					tk.notifyAborted(id)
					continue
				}
				tk.notifyComplete(id)
				if id%5 == 0 {
					if _, err := c.SavepointFromCheckpoint(ctx, fmt.Sprintf("%s-sp%d", job, id), job, id); err != nil {
						errs <- err
					}
				}
			}
		}(fmt.Sprint("job", j))
	}
	jobs.Wait()
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	completed := 0
	err := tiered.Walk(ctx, mem, "", func(o tiered.ObjectInfo) error {
		n := classify(o.Name)
		if n.kind != objCheckpointManifest && n.kind != objSavepointManifest {
			return nil
		}
		completed++
		rep, err := Verify(ctx, mem, n.dir(), 2)
		if err != nil || !rep.OK() {
			return fmt.Errorf("verify %s: %+v %v", o.Name, rep, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if completed == 0 {
		t.Fatal("nothing completed")
	}
}
