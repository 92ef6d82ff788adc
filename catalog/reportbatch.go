package catalog

import (
	"errors"
	"sync"
	"time"
)

// Fenced reports of a replicated catalog share log writes.
//
// Each report is a log write (a quorum's fsyncs) that its task's
// snapshot, and the completion after it, wait for. raft groups the
// commands proposed while a write is under way, but the first report of a
// checkpoint finds the log idle and goes alone, so the reports of a job's
// tasks took two writes one after the other. The leader's catalog
// therefore holds a fenced report back for at most reportGather while
// more reports of its checkpoint are expected (the job's last completed
// checkpoint had more tasks than this one has reports, counting those
// taken and those held), and proposes the held reports in one batch
// entry, each with its own fencing check in the entry. A job with no
// completed checkpoint yet expects nothing, and its reports go at once.
//
// What a report means does not change: it is answered once its entry is
// on a quorum, and a stale token refuses it. The entry's checks are all
// or nothing (cluster.Member.Propose), and a batch stops at the first
// command the machine refuses, so when a batch is refused each of its
// reports is proposed again alone (a report taken already is taken again
// as a no-op), and each gets its own answer: a zombie's report among
// them is refused, naming the newer holder, and the others are taken.

// reportGather bounds how long a fenced report waits for the other
// reports of its checkpoint.
const reportGather = 2 * time.Millisecond

// maxGathered bounds the reports of one batch: with a begin for each,
// they fit maxBatch.
const maxGathered = maxBatch / 2

// heldReport is a fenced report waiting for its batch.
type heldReport struct {
	cmd   command
	fence Fence
	// done gets the report's answer, or errAlone: propose it alone.
	done chan error
}

// errAlone tells a held report that its batch was refused: it is
// proposed again alone.
var errAlone = errors.New("catalog: the batch was refused; report alone")

// reportBatcher holds the fenced reports waiting for their batch.
type reportBatcher struct {
	mu    sync.Mutex
	held  []*heldReport
	timer *time.Timer
	// gather is reportGather (0), or a test's own.
	gather time.Duration
}

// take empties the batcher. The caller holds b.mu.
func (b *reportBatcher) take() []*heldReport {
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	held := b.held
	b.held = nil
	return held
}

// gatherReport is report of a fenced report through the batcher.
func (c *Catalog) gatherReport(cmd command, fence Fence) error {
	p := &heldReport{cmd: cmd, fence: fence, done: make(chan error, 1)}
	b := &c.reports
	b.mu.Lock()
	b.held = append(b.held, p)
	var batch []*heldReport
	if len(b.held) >= maxGathered || c.reportsDue(b.held) {
		batch = b.take()
	} else if b.timer == nil {
		wait := reportGather
		if b.gather > 0 {
			wait = b.gather
		}
		b.timer = time.AfterFunc(wait, func() {
			b.mu.Lock()
			batch := b.take()
			b.mu.Unlock()
			c.proposeReports(batch)
		})
	}
	b.mu.Unlock()
	if batch != nil {
		c.proposeReports(batch)
	}
	if err := <-p.done; !errors.Is(err, errAlone) {
		return err
	}
	return c.report(cmd, []Fence{fence})
}

// reportsDue reports whether every checkpoint with a held report has as
// many reports, taken or held, as its job's last completed checkpoint
// had tasks: no more are expected.
func (c *Catalog) reportsDue(held []*heldReport) bool {
	n := map[ref]int{}
	for _, p := range held {
		n[ref{p.cmd.Job, p.cmd.ID}]++
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for r, k := range n {
		j := c.mu.jobs[r.job]
		if j == nil {
			continue
		}
		want := 0
		for i := len(j.history) - 1; i >= 0; i-- {
			if j.history[i].Status == StatusCompleted {
				want = j.history[i].Tasks
				break
			}
		}
		if inf := j.inflight[r.id]; inf != nil {
			k += len(inf.handles)
		}
		if k < want {
			return false
		}
	}
	return true
}

// proposeReports proposes held reports in one batch entry (with the
// held-back begins of their checkpoints) and answers each.
func (c *Catalog) proposeReports(held []*heldReport) {
	if len(held) == 0 {
		return
	}
	if len(held) == 1 {
		held[0].done <- errAlone
		return
	}
	var cmds []command
	var fences []Fence
	var begins []ref
	seen := map[ref]bool{}
	for _, p := range held {
		r := ref{p.cmd.Job, p.cmd.ID}
		if !seen[r] {
			seen[r] = true
			if wc := c.withBegin(p.cmd); wc.Op == opBatch {
				cmds = append(cmds, wc.Batch[0])
				begins = append(begins, r)
			}
		}
		cmds = append(cmds, p.cmd)
		fences = append(fences, p.fence)
	}
	_, err := c.execFenced(command{Op: opBatch, Batch: cmds}, fences)
	switch {
	case err == nil:
		for _, r := range begins {
			c.forgetBegin(r)
		}
	case errors.Is(err, errLogFailed):
		// Whether the log took it is unknown: each reporter hears so, as
		// it would of its own entry, and reports again (idempotent).
	default:
		// Refused: a stale token in one of them, or a command the
		// machine refused. Each alone, for its own answer.
		err = errAlone
	}
	for _, p := range held {
		p.done <- err
	}
}
