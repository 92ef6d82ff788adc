// Who leads: a node's view of the leader, leases and leader-only runs.

package cluster

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// IsLeader reports whether this node believes it leads (it may have been
// deposed without knowing: deletes check with VerifyLeader).
func (n *Member) IsLeader() bool { return n.raft.State() == raft.Leader }

// VerifyLeader confirms with a quorum that this node still leads: a
// deposed leader cut off from the others gets an error. Callers check it
// before effects only the leader may cause, when even a leader cut off
// a moment ago must not cause them (deletes). A confirmation starts a
// lease (Options.LeaderLease) that ConfirmLeader may answer from.
func (n *Member) VerifyLeader(ctx context.Context) error {
	asked, term := time.Now(), n.raft.CurrentTerm()
	if err := n.wait(ctx, n.raft.VerifyLeader()); err != nil {
		return fmt.Errorf("cluster: %s is not the leader: %w", n.opts.ID, err)
	}
	if n.opts.LeaderLease > 0 {
		n.leaseMu.Lock()
		if until := asked.Add(n.opts.LeaderLease); term != n.leaseTerm || until.After(n.leaseUntil) {
			n.leaseTerm, n.leaseUntil = term, until
		}
		n.leaseMu.Unlock()
	}
	return nil
}

// ConfirmLeader is VerifyLeader that answers without a quorum round
// within the lease of the last confirmation (asked for in this term,
// while this node still believes it leads): no other leader can exist
// then, so what this node does is what the only leader does. Reads
// (read-index checks) and writes whose effect a later leader sees
// (manifests, job files) use it.
func (n *Member) ConfirmLeader(ctx context.Context) error {
	if n.leased() {
		return nil
	}
	return n.VerifyLeader(ctx)
}

// leased reports whether a lease of this term covers now.
func (n *Member) leased() bool {
	if n.opts.LeaderLease <= 0 || n.raft.State() != raft.Leader {
		return false
	}
	term := n.raft.CurrentTerm()
	n.leaseMu.Lock()
	defer n.leaseMu.Unlock()
	return n.leaseTerm == term && time.Now().Before(n.leaseUntil)
}

// wait waits for f within ctx (ApplyTimeout without a deadline), or
// until the node closes. A raft future whose node shuts down while it is
// being answered may never be answered (seen with VerifyLeader, and
// with Apply, whose futures do not watch for the shutdown): its
// waiting goroutine then ends only if raft answers late, so every wait is
// bounded for the caller.
func (n *Member) wait(ctx context.Context, f raft.Future) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, n.opts.ApplyTimeout)
		defer cancel()
	}
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", raft.ErrLeadershipLost, ctx.Err())
	case <-n.stop:
		return raft.ErrRaftShutdown
	}
}

// Leader returns the leader's id and address as this node knows them
// ("" when none).
func (n *Member) Leader() (id, addr string) {
	a, i := n.raft.LeaderWithID()
	return string(i), string(a)
}

// WaitLeader waits until this node knows a leader.
func (n *Member) WaitLeader(ctx context.Context) error {
	for {
		if id, _ := n.Leader(); id != "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w known to %s: %w", ErrNoLeader, n.opts.ID, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// onLeader runs local when this node leads, else remote against the
// leader's address, retrying through leader changes until ctx (or
// ApplyTimeout) ends: raft's errors of a lost or moving leadership, and a
// remote node's answer that it does not lead or cannot be reached, are
// retried after a short backoff; any other error is returned.
func (n *Member) onLeader(ctx context.Context, local func(context.Context) error, remote func(ctx context.Context, addr string) error) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, n.opts.ApplyTimeout)
		defer cancel()
	}
	var last error
	for attempt := 0; ; attempt++ {
		select {
		case <-n.stop:
			return fmt.Errorf("%w: node %s is closed", ErrNoLeader, n.opts.ID)
		default:
		}
		if attempt > 0 {
			select {
			case <-n.stop:
				return fmt.Errorf("%w: node %s is closed", ErrNoLeader, n.opts.ID)
			case <-ctx.Done():
				return fmt.Errorf("%w: %v (last: %v)", ErrNoLeader, ctx.Err(), last)
			case <-time.After(min(time.Duration(attempt)*25*time.Millisecond, 250*time.Millisecond)):
			}
		}
		if n.raft.State() == raft.Leader {
			err := local(ctx)
			if err == nil || !retryable(err) {
				return err
			}
			last = err
			continue
		}
		_, addr := n.Leader()
		if addr == "" {
			last = fmt.Errorf("no leader known to %s", n.opts.ID)
			continue
		}
		moved, err := n.remoteWhileLeader(ctx, addr, remote)
		if err == nil {
			return nil
		}
		if moved {
			last = fmt.Errorf("the leader changed during a call to %s: %w", addr, err)
			continue
		}
		if s, ok := status.FromError(err); ok && s.Code() != codes.FailedPrecondition && s.Code() != codes.Unavailable {
			return err
		}
		last = err
	}
}

// remoteWhileLeader runs remote against addr until it answers or this
// node learns of another leader (or of none), and then gives it up
// (moved). A leader cut off by a silent partition (no reset, no answer)
// would otherwise hold the call until the caller's deadline, long after
// the others elected a new leader that could answer it; calls are
// idempotent, so the retry may run twice.
func (n *Member) remoteWhileLeader(ctx context.Context, addr string, remote func(context.Context, string) error) (moved bool, err error) {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var changed atomic.Bool
	go func() {
		// Owned by this call: ends when it does (cancel above).
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-t.C:
				if _, a := n.Leader(); a != addr {
					changed.Store(true)
					cancel()
					return
				}
			}
		}
	}()
	err = remote(rctx, addr)
	return err != nil && changed.Load() && ctx.Err() == nil, err
}

// Barrier waits until this node, as leader, has applied every command
// committed before it: what a new leader does before it serves.
func (n *Member) Barrier(ctx context.Context) error {
	timeout := n.opts.ApplyTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(d), time.Millisecond)
	}
	return n.wait(ctx, n.raft.Barrier(timeout))
}
