package host

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/statedhq/stated/cluster"
	"github.com/statedhq/stated/host/webui"
)

// clusterStateError is the refusal of a call that needs the cluster on a
// node that cannot serve it now (cluster.Member.Ready): FAILED_PRECONDITION
// when the node is no member (never joined, or removed: an operator must
// act), UNAVAILABLE when it knows no leader (the engine retries).
type clusterStateError struct{ err error }

func (e *clusterStateError) Error() string { return e.err.Error() }
func (e *clusterStateError) Unwrap() error { return e.err }

// GRPCStatus is the code the daemon's API answers with.
func (e *clusterStateError) GRPCStatus() *status.Status {
	code := codes.Unavailable
	if errors.Is(e.err, cluster.ErrNotMember) {
		code = codes.FailedPrecondition
	}
	return status.New(code, e.Error())
}

// ready refuses at once what this node cannot serve now, instead of
// letting the call wait for a leader until its deadline.
func ready(ctx context.Context, c *cluster.Member) error {
	if err := c.Ready(ctx); err != nil {
		return &clusterStateError{err}
	}
	return nil
}

// readyCaller is the catalog client's way to the hosting catalog: the
// cluster's Call, through watched.
type readyCaller struct{ c *cluster.Member }

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
func watched(ctx context.Context, c *cluster.Member, call func(context.Context) error) error {
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

// clusterPanel is the web page's cluster panel: this node's raft state,
// the leader, the members, and why the node refuses tasks if it does.
func (n *Host) clusterPanel() *webui.Cluster {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	c := n.cluster
	p := &webui.Cluster{Node: c.ID()}
	st, err := c.Status(ctx, false)
	if st != nil {
		p.Role, p.Leader, p.LeaderAddr, p.Term = st.GetState(), st.GetLeaderId(), st.GetLeaderAddr(), st.GetTerm()
		for _, m := range st.GetMembers() {
			p.Members = append(p.Members, webui.ClusterMember{ID: m.GetNodeId(), Addr: m.GetRaftAddr(), Suffrage: m.GetSuffrage(),
				Leader: m.GetLeader(), This: m.GetNodeId() == c.ID()})
		}
	}
	if err == nil {
		err = c.Ready(ctx)
	}
	if err != nil {
		p.Problem = err.Error()
	}
	return p
}
