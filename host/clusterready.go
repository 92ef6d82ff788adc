package host

import (
	"context"
	"time"

	"github.com/statedhq/stated/host/webui"
)

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
