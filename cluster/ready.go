package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/statedhq/stated/cluster/clusterpb"
)

// ErrNotMember is wrapped by Ready's error when this node is not in the
// cluster's configuration: it never joined one, or it was removed.
var ErrNotMember = errors.New("cluster: this node is not a member of a cluster")

// readiness is what Ready remembers between calls.
type readiness struct {
	// first is when Ready was first asked (unix nanoseconds): a node that
	// has not heard from a leader since gets the grace from then.
	first atomic.Int64
	// probed caches the last probe of the other members (removed or
	// quorumless), so that a burst of refused calls probes once.
	mu       sync.Mutex
	probedAt time.Time
	probed   error
}

// readyProbeTTL is how long a probe's verdict is reused.
const readyProbeTTL = time.Second

// Ready says, at once, whether this node can serve calls that need the
// cluster (a fencing token, the catalog): nil, or an error that names the
// node's state and what to do, wrapping ErrNotMember (never joined, or
// removed: the error says which) or ErrNoLeader (no leader heard of for
// longer than an election takes, and fewer than a quorum of the members
// answer; the error says how many answer and the quorum). While a leader
// is known, or was within the grace (a few election timeouts), or a
// quorum answers (an election in progress, which the call itself waits
// for), it is nil.
//
// A removed node often never hears of its removal (the leader stops
// replicating to it at once), so once it has known no leader past the
// grace Ready asks the other members whether it is still one of them.
func (n *Member) Ready(ctx context.Context) error {
	select {
	case <-n.stop:
		return fmt.Errorf("%w: node %s is closed", ErrNoLeader, n.opts.ID)
	default:
	}
	now := time.Now()
	n.ready.first.CompareAndSwap(0, now.UnixNano())
	members, err := n.Members()
	if err != nil {
		return fmt.Errorf("%w: node %s: %v", ErrNoLeader, n.opts.ID, err)
	}
	if len(members) == 0 {
		return fmt.Errorf("%w: node %s has not joined a cluster (it was started without --raft-peers and no member has added it): run `stated cluster join --new-node-id %s --new-raft-addr %s --raft-addr <a member's address>` (or start the cluster's first nodes with --raft-peers)",
			ErrNotMember, n.opts.ID, n.opts.ID, n.advertise)
	}
	if !members[n.opts.ID] {
		return n.removedErr()
	}
	if id, _ := n.Leader(); id != "" {
		return nil
	}
	last := time.Unix(0, n.ready.first.Load())
	if lc := n.raft.LastContact(); lc.After(last) {
		last = lc
	}
	grace := 3 * max(n.opts.ElectionTimeout, n.opts.HeartbeatTimeout)
	if now.Sub(last) < grace {
		return nil
	}
	n.ready.mu.Lock()
	defer n.ready.mu.Unlock()
	if now.Sub(n.ready.probedAt) < readyProbeTTL {
		return n.ready.probed
	}
	err = n.probeMembers(ctx, members, now.Sub(last))
	n.ready.probedAt, n.ready.probed = time.Now(), err
	return err
}

func (n *Member) removedErr() error {
	return fmt.Errorf("%w: node %s was removed from the cluster (`stated cluster leave`) and serves no tasks: stop it, or add it again with `stated cluster join`",
		ErrNotMember, n.opts.ID)
}

// probeMembers asks the other members for their view: one that follows a
// leader and does not list this node means it was removed; otherwise the
// error says how many answer.
func (n *Member) probeMembers(ctx context.Context, members map[string]bool, without time.Duration) error {
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return fmt.Errorf("%w: node %s: %v", ErrNoLeader, n.opts.ID, err)
	}
	ctx, cancel := context.WithTimeout(ctx, n.opts.ProbeTimeout)
	defer cancel()
	var (
		mu       sync.Mutex
		answered int
		removed  bool
		wg       sync.WaitGroup
	)
	for _, s := range cf.Configuration().Servers {
		if string(s.ID) == n.opts.ID {
			continue
		}
		wg.Add(1)
		go func(addr string) {
			defer wg.Done()
			cc, err := n.conn(addr)
			if err != nil {
				return
			}
			st, err := pb.NewClusterClient(cc).Status(ctx, &pb.StatusRequest{})
			if err != nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			answered++
			if st.GetLeaderId() == "" {
				return
			}
			self := false
			for _, m := range st.GetMembers() {
				self = self || m.GetNodeId() == n.opts.ID
			}
			removed = removed || !self
		}(string(s.Address))
	}
	wg.Wait()
	if removed {
		return n.removedErr()
	}
	total := len(members)
	if answered+1 >= total/2+1 {
		// A quorum is reachable: an election is under way (or about to
		// be), which the call waits for.
		return nil
	}
	return fmt.Errorf("%w: node %s has known no leader for %s: %d of the other %d members answer, and a leader needs %d of %d (a quorum); see `stated cluster status`, and bring members back or remove dead ones",
		ErrNoLeader, n.opts.ID, without.Round(100*time.Millisecond), answered, total-1, total/2+1, total)
}
