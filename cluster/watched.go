// Calls that need the cluster, refused at once or ended when this node
// cannot serve them.

package cluster

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// clusterStateError is the refusal of a call that needs the cluster on a
// node that cannot serve it now (Member.Ready): FAILED_PRECONDITION
// when the node is no member (never joined, or removed: an operator must
// act), UNAVAILABLE when it knows no leader (the engine retries).
type clusterStateError struct{ err error }

func (e *clusterStateError) Error() string { return e.err.Error() }
func (e *clusterStateError) Unwrap() error { return e.err }

// GRPCStatus is the code the daemon's API answers with.
func (e *clusterStateError) GRPCStatus() *status.Status {
	code := codes.Unavailable
	if errors.Is(e.err, ErrNotMember) {
		code = codes.FailedPrecondition
	}
	return status.New(code, e.Error())
}

// ready refuses at once what this node cannot serve now, instead of
// letting the call wait for a leader until its deadline.
func ready(ctx context.Context, c *Member) error {
	if err := c.Ready(ctx); err != nil {
		return &clusterStateError{err}
	}
	return nil
}

// readyCaller is the catalog client's way to the hosting catalog: the
// cluster's Call, through watched.
type readyCaller struct{ c *Member }

// CatalogCaller is this node's way to the catalog the leader hosts for
// its CatalogClient: Call, refused at once or ended when the node cannot
// serve it (not joined, removed, no quorum).
func (n *Member) CatalogCaller() CatalogCaller { return readyCaller{n} }

func (r readyCaller) Call(ctx context.Context, method string, payload []byte) (out []byte, err error) {
	err = watched(ctx, r.c, func(ctx context.Context) error {
		out, err = r.c.Call(ctx, method, payload)
		return err
	})
	return out, err
}

// readyWatch is how often a call in flight asks whether the node can
// still serve it.
const readyWatch = 200 * time.Millisecond

// watched runs call, which needs the cluster: refused at once on a node
// that cannot serve it (ready), and ended when the node finds out during
// the call that it cannot (it was removed, or its peers went away: a
// shutdown's aborts and token releases then end at once instead of at
// their deadlines).
func watched(ctx context.Context, c *Member, call func(context.Context) error) error {
	if err := ready(ctx, c); err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan struct{})
	defer close(done)
	go func() {
		t := time.NewTicker(readyWatch)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				if err := ready(ctx, c); err != nil {
					cancel(err)
					return
				}
			}
		}
	}()
	err := call(ctx)
	if cause := context.Cause(ctx); err != nil && cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
		return cause
	}
	return err
}
