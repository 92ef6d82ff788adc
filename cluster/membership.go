// Membership: join, leave and the status the CLI and the page show.

package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/hashicorp/raft"

	pb "github.com/statedhq/stated/cluster/clusterpb"
)

// Join adds a voter, on the leader (forwarded when this node is not it).
func (n *Member) Join(ctx context.Context, id, addr string) error {
	if id == "" || addr == "" {
		return errors.New("cluster: join needs a node id and its raft address")
	}
	return n.onLeader(ctx, func(ctx context.Context) error {
		return n.wait(ctx, n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, n.opts.ApplyTimeout))
	}, func(ctx context.Context, leader string) error {
		cc, err := n.conn(leader)
		if err != nil {
			return err
		}
		_, err = pb.NewClusterClient(cc).Join(ctx, &pb.JoinRequest{NodeId: id, RaftAddr: addr})
		return err
	})
}

// Leave removes a member, on the leader (forwarded when this node is not
// it). A leader may remove itself: the others elect a new one.
func (n *Member) Leave(ctx context.Context, id string) error {
	if id == "" {
		return errors.New("cluster: leave needs a node id")
	}
	return n.onLeader(ctx, func(ctx context.Context) error {
		return n.wait(ctx, n.raft.RemoveServer(raft.ServerID(id), 0, n.opts.ApplyTimeout))
	}, func(ctx context.Context, leader string) error {
		cc, err := n.conn(leader)
		if err != nil {
			return err
		}
		_, err = pb.NewClusterClient(cc).Leave(ctx, &pb.LeaveRequest{NodeId: id})
		return err
	})
}

// Status is this node's view of the cluster; with probe, every member is
// asked for its own indexes within ProbeTimeout.
func (n *Member) Status(ctx context.Context, probe bool) (*pb.StatusResponse, error) {
	st := n.raft.Stats()
	num := func(k string) uint64 { v, _ := strconv.ParseUint(st[k], 10, 64); return v }
	lid, laddr := n.Leader()
	resp := &pb.StatusResponse{NodeId: n.opts.ID, State: stateName(n.raft.State()), LeaderId: lid, LeaderAddr: laddr,
		Term: num("term"), CommitIndex: num("commit_index"), AppliedIndex: n.raft.AppliedIndex(), LastLogIndex: num("last_log_index")}
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return resp, fmt.Errorf("cluster: configuration: %w", err)
	}
	members := cf.Configuration().Servers
	resp.Members = make([]*pb.Member, len(members))
	var wg sync.WaitGroup
	for i, s := range members {
		m := &pb.Member{NodeId: string(s.ID), RaftAddr: string(s.Address), Suffrage: suffrageName(s.Suffrage), Leader: string(s.ID) == lid}
		resp.Members[i] = m
		if !probe {
			continue
		}
		if string(s.ID) == n.opts.ID {
			m.Healthy, m.CommitIndex, m.AppliedIndex = true, resp.CommitIndex, resp.AppliedIndex
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, n.opts.ProbeTimeout)
			defer cancel()
			cc, err := n.conn(m.RaftAddr)
			if err == nil {
				var r *pb.StatusResponse
				if r, err = pb.NewClusterClient(cc).Status(pctx, &pb.StatusRequest{}); err == nil {
					m.Healthy, m.CommitIndex, m.AppliedIndex = true, r.GetCommitIndex(), r.GetAppliedIndex()
				}
			}
			if err != nil {
				m.Error = err.Error()
			}
		}()
	}
	wg.Wait()
	return resp, nil
}

func stateName(s raft.RaftState) string {
	switch s {
	case raft.Leader:
		return "leader"
	case raft.Follower:
		return "follower"
	case raft.Candidate:
		return "candidate"
	default:
		return "shutdown"
	}
}

func suffrageName(s raft.ServerSuffrage) string {
	switch s {
	case raft.Voter:
		return "voter"
	case raft.Nonvoter:
		return "nonvoter"
	default:
		return "staging"
	}
}

// Members returns the ids of the servers in the cluster's configuration
// as this node knows it.
func (n *Member) Members() (map[string]bool, error) {
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return nil, fmt.Errorf("cluster: read the configuration: %w", err)
	}
	out := map[string]bool{}
	for _, s := range cf.Configuration().Servers {
		out[string(s.ID)] = true
	}
	return out, nil
}
