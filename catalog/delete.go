package catalog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/statedhq/stated/tiered"
)

func (c *Catalog) list(ctx context.Context, prefix string) ([]tiered.ObjectInfo, error) {
	var out []tiered.ObjectInfo
	err := tiered.Walk(ctx, c.store, prefix, func(o tiered.ObjectInfo) error {
		out = append(out, o)
		return nil
	})
	return out, err
}

// referenced reports whether something refers to name itself: a
// retained checkpoint or savepoint (registered, or the manifest of one
// being discarded), a job's base hold, a pending handle, or a delete under
// way; logHeld says which log segments the live changelog still holds
// (Options.LogHeld, an input from outside the machine).
func (m *machine) referenced(name string, logHeld func(string) bool) bool {
	if m.reg.Count(name) > 0 || m.guard.guards(name, "") {
		return true
	}
	n := classify(name)
	switch n.kind {
	case objLog:
		return logHeld(name)
	case objCheckpointManifest:
		return m.entries[ref{n.job, n.id}] != nil
	case objSavepointManifest:
		_, ok := m.savepoints[n.sp]
		return ok
	}
	return false
}

// live reports whether name must not be deleted: referenced, outside the layout or a job file, under an
// in-flight checkpoint or savepoint, or under a directory with a damaged
// manifest.
func (m *machine) live(name string, logHeld func(string) bool) bool {
	if m.referenced(name, logHeld) {
		return true
	}
	n := classify(name)
	switch n.kind {
	case objUnknown, objJobFile:
		return true
	case objCheckpoint, objCheckpointManifest:
		if j := m.jobs[n.job]; j != nil && j.inflight[n.id] != nil {
			return true
		}
	case objSavepoint, objSavepointManifest:
		if m.spInflight[n.sp] {
			return true
		}
	}
	return m.guard.guards(name, n.dir())
}

// deleteUnreferenced deletes those of names that are not live, manifests
// first, and returns the names it tried to delete. Names are re-checked
// and marked under the lock, so a checkpoint completing concurrently either
// sees the mark (and fails) or registers first (and the name is skipped).
//
// Remote-mode lsm SSTs among names are released instead (releaseRemote:
// they go only when no marker holds them); their markers and leases are
// left to the sweep.
func (c *Catalog) deleteUnreferenced(ctx context.Context, names []string) ([]string, error) {
	remote, names := splitRemote(names)
	var rerr error
	if len(remote) > 0 {
		rerr = c.releaseRemote(ctx, remote)
	}
	tried, err := c.deleteUnreferencedPlain(ctx, names)
	return tried, errors.Join(err, rerr)
}

// deleteUnreferencedPlain is deleteUnreferenced without remote-mode SSTs.
func (c *Catalog) deleteUnreferencedPlain(ctx context.Context, names []string) ([]string, error) {
	names = slices.Clone(names)
	slices.Sort(names)
	names = slices.Compact(names)
	c.mu.Lock()
	var manifests, rest []string
	for _, n := range names {
		if c.mu.live(n, c.opts.LogHeld) || c.adoptingLocked(n) {
			continue
		}
		c.mu.guard.deleting[n] = true
		if strings.HasSuffix(n, "/"+ManifestName) {
			manifests = append(manifests, n)
		} else {
			rest = append(rest, n)
		}
	}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		for _, n := range manifests {
			delete(c.mu.guard.deleting, n)
		}
		for _, n := range rest {
			delete(c.mu.guard.deleting, n)
		}
		c.mu.Unlock()
	}()
	tried := append(slices.Clone(manifests), rest...)
	if err := c.deleteRetried(ctx, manifests); err != nil {
		return tried, err
	}
	return tried, c.deleteRetried(ctx, rest)
}

// deleteNames is a best-effort delete for cleanup paths whose failure the
// sweep (or an Abort) repairs. It runs even if ctx was cancelled (a
// cancelled Complete must still take back its manifest), for at most
// cleanupTimeout.
func (c *Catalog) deleteNames(ctx context.Context, names []string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := c.deleteRetried(ctx, names); err != nil {
		c.log.Warn("delete failed; the sweep retries", "err", err)
	}
}

// cleanupTimeout bounds deleteNames.
const cleanupTimeout = 30 * time.Second

// deleteRetried deletes names in batches of DeleteBatch, DeleteParallelism
// at a time, retrying each batch. Deleting a missing object succeeds, so a
// retry never fails on what the first attempt managed.
func (c *Catalog) deleteRetried(ctx context.Context, names []string) error {
	var logs, rest []string
	for _, n := range names {
		if classify(n).kind == objLog {
			logs = append(logs, n)
		} else {
			rest = append(rest, n)
		}
	}
	if len(logs) == 0 {
		return c.deleteRetriedIn(ctx, c.store, names)
	}
	return errors.Join(c.deleteRetriedIn(ctx, c.store, rest), c.deleteRetriedIn(ctx, c.logStore, logs))
}

// deleteRetriedIn is deleteRetried in store (Store or HeapStore).
func (c *Catalog) deleteRetriedIn(ctx context.Context, store tiered.Store, names []string) error {
	var batches [][]string
	for len(names) > 0 {
		n := min(len(names), c.opts.DeleteBatch)
		batches = append(batches, names[:n])
		names = names[n:]
	}
	return c.forEach(ctx, len(batches), func(ctx context.Context, i int) error {
		var err error
		for attempt := 0; attempt < defaultDeleteAttempts; attempt++ {
			if attempt > 0 {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(time.Duration(attempt*attempt) * retryBackoff):
				}
			}
			if err = c.opts.DeleteGuard(ctx); err != nil {
				// Not retried: a node that does not lead must not delete.
				return fmt.Errorf("catalog: delete %d objects (first %s): %w", len(batches[i]), batches[i][0], err)
			}
			if err = store.DeleteBatch(ctx, batches[i]); err == nil {
				return nil
			}
		}
		return fmt.Errorf("catalog: delete %d objects (first %s): %w", len(batches[i]), batches[i][0], err)
	})
}

// forEach runs fn(0..n-1) with at most DeleteParallelism at a time and
// returns every error joined. It stops starting new calls once ctx is done.
func (c *Catalog) forEach(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	if n == 0 {
		return nil
	}
	sem := make(chan struct{}, c.opts.DeleteParallelism)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for i := 0; i < n; i++ {
		if ctx.Err() != nil {
			mu.Lock()
			errs = append(errs, ctx.Err())
			mu.Unlock()
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			if err := fn(ctx, i); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	return errors.Join(errs...)
}

// ReleaseLog deletes the changelog segments of names (the live log let go
// of them: dstl.Writer.TakeReleased) that no retained checkpoint or
// savepoint and no pending handle references; the others are deleted when
// their last reference goes. Names outside LogDir are ignored. A failed
// delete is left to the sweep.
func (c *Catalog) ReleaseLog(ctx context.Context, names []string) error {
	var logs []string
	for _, n := range names {
		if classify(n).kind == objLog {
			logs = append(logs, n)
		}
	}
	if len(logs) == 0 {
		return nil
	}
	_, err := c.deleteUnreferenced(ctx, logs)
	if err != nil {
		return fmt.Errorf("catalog: release log segments (the sweep retries): %w", err)
	}
	return nil
}
