// Fencing tokens: taken, checked and released through the log.

package cluster

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/raft"
)

// CheckHeld checks on the leader, from its own copy of the state, that
// every check's token is its task's newest, without confirming the
// leadership: the caller must confirm it after this returns (a quorum
// round, as VerifyLeader does) before acting on the answer, which makes
// the two a read-index read. A service on the leader that confirms its
// leadership anyway before it writes (the hosted catalog's guard) saves
// the check's own round trip this way. The first read of a term waits
// for a barrier, so that the commit index covers earlier terms; then it
// waits until the machine applied the commit index taken at the start.
// The error of a fenced check wraps ErrFenced and names the newer holder.
func (n *Member) CheckHeld(ctx context.Context, checks []Check) error {
	if n.raft.State() != raft.Leader {
		return fmt.Errorf("%w: %s checks tokens only while it leads", raft.ErrNotLeader, n.opts.ID)
	}
	if err := n.readBarrier(ctx); err != nil {
		return err
	}
	if err := n.waitApplied(ctx, n.raft.CommitIndex()); err != nil {
		return err
	}
	n.fsm.mu.RLock()
	defer n.fsm.mu.RUnlock()
	var errs []error
	for _, c := range checks {
		if r := n.fsm.st.applyOnce(command{Op: opCheck, Task: c.Task, Token: c.Token}); r.Fenced {
			errs = append(errs, fenced(c.Task, c.Token, r))
		}
	}
	return errors.Join(errs...)
}

// Acquire takes a new fencing token for task, held by holder (a node id):
// every token handed out is larger than any before it, and from now on
// only this token passes Check for the task.
func (n *Member) Acquire(ctx context.Context, task, holder string) (uint64, error) {
	r, err := n.run(ctx, command{Op: opAcquire, Task: task, Holder: holder})
	if err != nil {
		return 0, err
	}
	return r.Token, nil
}

// Check confirms, linearizably (through the log), that token is still
// task's newest; otherwise the error wraps ErrFenced and names the newer
// token and its holder.
func (n *Member) Check(ctx context.Context, task string, token uint64) error {
	r, err := n.run(ctx, command{Op: opCheck, Task: task, Token: token})
	if err != nil {
		return err
	}
	if r.Fenced {
		return fenced(task, token, r)
	}
	return nil
}

// Release gives task up if token is still its newest (a closed instance);
// a newer holder is left alone and the error wraps ErrFenced.
func (n *Member) Release(ctx context.Context, task string, token uint64) error {
	r, err := n.run(ctx, command{Op: opRelease, Task: task, Token: token})
	if err != nil {
		return err
	}
	if r.Fenced {
		return fenced(task, token, r)
	}
	return nil
}

func fenced(task string, token uint64, r result) error {
	if r.Token == 0 {
		return fmt.Errorf("%w: task %s: fencing token %d was released and no one holds the task now", ErrFenced, task, token)
	}
	return fmt.Errorf("%w: task %s: fencing token %d is stale: node %s holds token %d since", ErrFenced, task, token, r.Holder, r.Token)
}

// Holder reads task's newest token and holder from this node's copy of
// the state, which may lag the leader's (Check is the linearizable read).
func (n *Member) Holder(task string) (token uint64, holder string, ok bool) {
	fe, ok := n.fsm.lookup(task)
	return fe.Token, fe.Holder, ok
}
