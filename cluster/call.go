// Calls to the service the leader hosts (the catalog), forwarded by
// followers.

package cluster

import (
	"context"
	"fmt"

	pb "github.com/statedhq/stated/cluster/clusterpb"
)

// Handler runs a Call on the leader: the service it hosts (the catalog).
// Its error is for a call it cannot read; answers, errors of the service
// included, are in its result.
type Handler func(ctx context.Context, method string, payload []byte) ([]byte, error)

// SetHandler makes h the service this node hosts while it leads (nil:
// none; calls reaching it are retried by their callers until a handler is
// set here or on another leader).
func (n *Member) SetHandler(h Handler) {
	if h == nil {
		n.handler.Store(nil)
		return
	}
	n.handler.Store(&h)
}

// Call runs method on the leader's service (SetHandler), here or
// forwarded, retrying through leader changes and a service that is not
// ready, until ctx (or ApplyTimeout) ends. A call may run twice when an
// answer is lost with a leader: the service's calls must be idempotent.
func (n *Member) Call(ctx context.Context, method string, payload []byte) (res []byte, err error) {
	err = n.onLeader(ctx, func(ctx context.Context) (err error) {
		res, err = n.callLocal(ctx, method, payload)
		return err
	}, func(ctx context.Context, addr string) error {
		n.forwarded.Add(1)
		cc, err := n.conn(addr)
		if err != nil {
			n.forwardErrors.Add(1)
			return err
		}
		resp, err := pb.NewClusterClient(cc).Call(ctx, &pb.CallRequest{Method: method, Payload: payload, From: n.opts.ID})
		if err != nil {
			n.forwardErrors.Add(1)
			return fmt.Errorf("cluster: call %s on %s: %w", method, addr, err)
		}
		res = resp.GetPayload()
		return nil
	})
	return res, err
}

func (n *Member) callLocal(ctx context.Context, method string, payload []byte) ([]byte, error) {
	h := n.handler.Load()
	if h == nil {
		return nil, errNotReady
	}
	return (*h)(ctx, method, payload)
}
