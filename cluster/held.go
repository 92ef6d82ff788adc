package cluster

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/raft"
)

// Holding is the newest fencing token of a task and the node that holds
// it.
type Holding struct {
	Token  uint64
	Holder string
}

// HeldTasks returns, on the leader, the newest token and holder of every
// task held now whose name starts with prefix ("<job>/": a job's open
// tasks, wherever they were opened), read as CheckHeld reads: from this
// node's own state once it applied the commit index (after one barrier
// per term), without confirming the leadership. The caller confirms it
// after this returns before it acts on the answer (the hosted catalog's
// guard does, before a completion's manifest is written), which makes the
// two a read-index read.
func (n *Member) HeldTasks(ctx context.Context, prefix string) (map[string]Holding, error) {
	if n.raft.State() != raft.Leader {
		return nil, fmt.Errorf("%w: %s reads tokens only while it leads", raft.ErrNotLeader, n.opts.ID)
	}
	if err := n.readBarrier(ctx); err != nil {
		return nil, err
	}
	if err := n.waitApplied(ctx, n.raft.CommitIndex()); err != nil {
		return nil, err
	}
	n.fsm.mu.RLock()
	defer n.fsm.mu.RUnlock()
	out := map[string]Holding{}
	for task, f := range n.fsm.st.Fences {
		if strings.HasPrefix(task, prefix) {
			out[task] = Holding{Token: f.Token, Holder: f.Holder}
		}
	}
	return out, nil
}
