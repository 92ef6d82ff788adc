package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
)

// ReportJournal is where a CatalogServer keeps the reports it accepted, so that the
// next hosting catalog recovers them: the cluster's replicated journal
// (Member's JournalPut, JournalDeleteRange and JournalRead).
type ReportJournal interface {
	// PutMany keeps every record, or none, in one write. A record with a
	// fence (fences[key]) is kept only while the fence's token is its
	// task's newest, decided in that same write: refused names the
	// records not kept, each error wrapping catalog.ErrFenced and naming
	// the newer holder. An error wrapping ErrCatalogNotServing means this node
	// no longer leads.
	PutMany(ctx context.Context, records map[string][]byte, fences map[string]Fence) (refused map[string]error, err error)
	DeleteRange(ctx context.Context, from, to string) error
	Read(prefix string) map[string][]byte
}

// Fence is the fencing token an instance of Task reported under.
type Fence struct {
	Task  backend.TaskID `json:"task"`
	Token uint64         `json:"token"`
}

// journalTimeout bounds one group write of the journal.
const journalTimeout = 10 * time.Second

// groupPut gathers the reports arriving while a journal write is under
// way into the next write: a checkpoint's reports come in within
// milliseconds of each other, and one log write (one fsync on every
// member) for all of them costs what one costs.
//
// It also holds a write back, at most reportLinger, while a checkpoint
// whose reports it holds has fewer than the job's previous checkpoint
// had: the checkpoint completes only once all of them are kept, and a
// write started for the first would delay the write of the others by a
// whole log write. A job whose tasks changed waits at most reportLinger
// once.
type groupPut struct {
	mu       sync.Mutex
	pending  map[string][]byte
	fences   map[string]Fence
	waiters  []waiter
	flushing bool
	// ckpts are the checkpoints of the pending reports; first is when
	// the oldest pending report arrived.
	ckpts map[ckptRef]bool
	first time.Time
	// jobs counts each job's reports of its newest checkpoint, and of
	// the one before (at most maxLingerJobs jobs).
	jobs map[string]*jobReports
	// more wakes a lingering writer when a report arrives.
	more chan struct{}
}

type ckptRef struct {
	job string
	id  uint64
}

// jobReports is what groupPut knows of a job's reports.
type jobReports struct {
	id          uint64 // the newest checkpoint reported
	n, previous int    // its reports, and those of the checkpoint before
}

const (
	// reportLinger bounds how long a write waits for the rest of a
	// checkpoint's reports.
	reportLinger = 5 * time.Millisecond
	// maxLingerJobs bounds the jobs groupPut counts reports of; past it
	// it forgets them all (their next checkpoints write without
	// waiting, as the first of a job does).
	maxLingerJobs = 4096
)

// arrivedLocked counts a report of checkpoint id of job.
func (g *groupPut) arrivedLocked(job string, id uint64) {
	if g.jobs == nil || len(g.jobs) >= maxLingerJobs {
		g.jobs = map[string]*jobReports{}
	}
	j := g.jobs[job]
	if j == nil {
		j = &jobReports{id: id}
		g.jobs[job] = j
	}
	switch {
	case id > j.id:
		j.id, j.previous, j.n = id, j.n, 1
	case id == j.id:
		j.n++
	}
	if g.ckpts == nil {
		g.ckpts = map[ckptRef]bool{}
	}
	if len(g.ckpts) == 0 {
		g.first = time.Now()
	}
	g.ckpts[ckptRef{job, id}] = true
}

// lingerLocked is how long the next write should wait for more reports
// (0: write now): while a pending checkpoint, the newest of its job, has
// fewer reports than the job's previous checkpoint had.
func (g *groupPut) lingerLocked() time.Duration {
	left := reportLinger - time.Since(g.first)
	if left <= 0 {
		return 0
	}
	for c := range g.ckpts {
		if j := g.jobs[c.job]; j != nil && j.id == c.id && j.n < j.previous {
			return left
		}
	}
	return 0
}

// waiter is a report waiting for the write that keeps it.
type waiter struct {
	key  string
	done chan error
}

// reportsPrefix starts every journal key of the catalog's reports:
// reportsPrefix + job + "/" + id (20 digits, so that keys sort by id) +
// "/" + task.
const reportsPrefix = "catalog/reports/"

func reportKey(job string, id uint64) string {
	return fmt.Sprintf("%s%s/%020d/", reportsPrefix, job, id)
}

// record journals one report; with a fence, only while the fence holds
// (the error then wraps catalog.ErrFenced).
func (s *CatalogServer) record(ctx context.Context, job string, id uint64, task backend.TaskID, handle []byte, fence *Fence) error {
	if s.opts.Journal == nil {
		return nil
	}
	g := &s.group
	done := make(chan error, 1)
	key := reportKey(job, id) + task.String()
	g.mu.Lock()
	if g.pending == nil {
		g.pending = map[string][]byte{}
	}
	g.pending[key] = handle
	if fence != nil {
		if g.fences == nil {
			g.fences = map[string]Fence{}
		}
		g.fences[key] = *fence
	} else {
		delete(g.fences, key)
	}
	g.waiters = append(g.waiters, waiter{key, done})
	g.arrivedLocked(job, id)
	lead := !g.flushing
	g.flushing = true
	if g.more == nil {
		g.more = make(chan struct{}, 1)
	}
	more := g.more
	g.mu.Unlock()
	if !lead {
		select {
		case more <- struct{}{}:
		default:
		}
	}
	if lead {
		// This call writes for everyone until nothing is pending.
		s.flush()
	}
	select {
	case err := <-done:
		if errors.Is(err, catalog.ErrFenced) {
			return fmt.Errorf("catalog service: report of %s for checkpoint %d refused: %w", task, id, err)
		}
		if err != nil {
			return fmt.Errorf("catalog service: keeping the report of %s for checkpoint %d: %w", task, id, err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("catalog service: keeping the report of %s for checkpoint %d: %w", task, id, ctx.Err())
	}
}

// flush writes the pending reports, in groups, until none is left.
func (s *CatalogServer) flush() {
	g := &s.group
	stopped := false
	for {
		g.mu.Lock()
		if len(g.waiters) == 0 {
			g.flushing = false
			g.mu.Unlock()
			return
		}
		if wait := g.lingerLocked(); wait > 0 && !stopped {
			more := g.more
			g.mu.Unlock()
			t := time.NewTimer(wait)
			select {
			case <-more:
			case <-t.C:
			case <-s.stop:
				stopped = true
			}
			t.Stop()
			continue
		}
		batch, fences, waiters := g.pending, g.fences, g.waiters
		g.pending, g.fences, g.waiters = nil, nil, nil
		clear(g.ckpts)
		g.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), journalTimeout)
		refused, err := s.opts.Journal.PutMany(ctx, batch, fences)
		cancel()
		for _, w := range waiters {
			if err == nil {
				w.done <- refused[w.key]
			} else {
				w.done <- err
			}
		}
	}
}

// settlement is a range of journaled reports to drop.
type settlement struct{ from, to string }

// settleQueue bounds the settlements waiting for the settler goroutine.
const settleQueue = 256

// settle drops the journaled reports of checkpoint id of job (through:
// and of every earlier one, subsumed by its completion). It is handed to
// the server's settler goroutine, off the completion's path (done
// synchronously when the queue is full). A failure is logged: the next
// completion of the job settles them too, and RecoverReports settles what a
// completed checkpoint left.
func (s *CatalogServer) settle(ctx context.Context, job string, id uint64, through bool) {
	if s.opts.Journal == nil || id == ^uint64(0) {
		return
	}
	from := reportKey(job, id)
	if through {
		from = reportsPrefix + job + "/"
	}
	st := settlement{from, reportKey(job, id+1)}
	select {
	case s.settles <- st:
	default:
		s.settleNow(ctx, st)
	}
}

func (s *CatalogServer) settleNow(ctx context.Context, st settlement) {
	if err := s.opts.Journal.DeleteRange(ctx, st.from, st.to); err != nil {
		s.log.Warn("settling journaled reports failed; the next completion retries", "from", st.from, "to", st.to, "err", err)
	}
}

// settleDelay is how long the settler gathers settlements before it
// writes them: a journal write is a log entry and an fsync on every
// member, and one per completion would compete with the next
// checkpoint's reports for the log. Reports left a little longer are
// harmless: RecoverReports settles those of completed checkpoints.
const settleDelay = 200 * time.Millisecond

// settler runs the queued settlements until Close, gathered for
// settleDelay and merged (one write per job, as a rule).
func (s *CatalogServer) settler() {
	defer close(s.settled)
	for {
		var batch []settlement
		select {
		case <-s.stop:
			return
		case st := <-s.settles:
			batch = append(batch, st)
		}
		select {
		case <-s.stop:
			return
		case <-time.After(settleDelay):
		}
	drain:
		for {
			select {
			case st := <-s.settles:
				batch = append(batch, st)
			default:
				break drain
			}
		}
		for _, st := range mergeSettlements(batch) {
			ctx, cancel := context.WithTimeout(context.Background(), journalTimeout)
			s.settleNow(ctx, st)
			cancel()
		}
	}
}

// mergeSettlements sorts the ranges and joins those that overlap or
// touch; ranges with keys between them stay apart (those keys are other
// checkpoints' reports, still in flight).
func mergeSettlements(sts []settlement) []settlement {
	slices.SortFunc(sts, func(a, b settlement) int { return strings.Compare(a.from, b.from) })
	var out []settlement
	for _, st := range sts {
		if n := len(out); n > 0 && st.from <= out[n-1].to {
			out[n-1].to = max(out[n-1].to, st.to)
			continue
		}
		out = append(out, st)
	}
	return out
}

// RecoverReports gives cat, a catalog just opened by a new leader, the reports
// the journal kept: each begins its checkpoint again and adds its handle.
// Reports of checkpoints that completed meanwhile are settled. It returns
// how many reports it restored, and the errors of the ones it could not
// (a damaged record, a handle the catalog refuses now), which stay out.
func RecoverReports(ctx context.Context, cat *catalog.Catalog, j ReportJournal) (int, error) {
	recs := j.Read(reportsPrefix)
	keys := slices.Sorted(maps.Keys(recs))
	n := 0
	var errs []error
	done := map[string]bool{}
	for _, k := range keys {
		rest := strings.TrimPrefix(k, reportsPrefix)
		parts := strings.SplitN(rest, "/", 3)
		if len(parts) != 3 {
			errs = append(errs, fmt.Errorf("catalog service: journal key %q is not a report's", k))
			continue
		}
		job := parts[0]
		id, err := strconv.ParseUint(parts[1], 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("catalog service: journal key %q: %v", k, err))
			continue
		}
		if done[parts[0]+"/"+parts[1]] {
			continue
		}
		h, err := backend.DecodeHandle(recs[k])
		if err != nil {
			errs = append(errs, fmt.Errorf("catalog service: journaled report %s: %w", k, err))
			continue
		}
		if err := cat.BeginCheckpoint(job, id); errors.Is(err, catalog.ErrExists) {
			// Completed before the leader changed: nothing to recover.
			done[parts[0]+"/"+parts[1]] = true
			_ = j.DeleteRange(ctx, reportKey(job, id), reportKey(job, id+1))
			continue
		} else if err != nil {
			errs = append(errs, fmt.Errorf("catalog service: journaled report %s: %w", k, err))
			continue
		}
		if err := cat.AddTaskHandle(job, id, h); err != nil {
			errs = append(errs, fmt.Errorf("catalog service: journaled report %s: %w", k, err))
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}
