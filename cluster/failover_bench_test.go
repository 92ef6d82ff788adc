package cluster

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"
)

// BenchmarkFailover: with raft's default timeouts (Options defaults), the
// time from the leader's death (its transport closed abruptly) to the
// first command served through a surviving node. The dead node is
// restarted from its raft dir after each round, so every round starts
// with 3 members.
//
//	go test ./cluster -run '^$' -bench Failover -benchtime 10x
func BenchmarkFailover(b *testing.B) {
	c := startCluster(b, 3, func(_ int, o *Options) {
		o.HeartbeatTimeout, o.ElectionTimeout = DefaultHeartbeatTimeout, DefaultElectionTimeout
		o.LeaderLeaseTimeout, o.CommitTimeout = DefaultLeaderLeaseTimeout, DefaultCommitTimeout
	})
	var took []time.Duration
	for b.Loop() {
		l := c.leader()
		via := (l + 1) % 3
		t0 := time.Now()
		_ = c.nodes[l].Close()
		c.nodes[l] = nil
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if _, err := c.nodes[via].Acquire(ctx, "j/op/0", "bench"); err != nil {
			b.Fatal(err)
		}
		cancel()
		took = append(took, time.Since(t0))
		o := c.opts[l]
		ln, err := net.Listen("tcp", o.Listener.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		o.Listener, o.Peers = ln, nil
		if c.nodes[l], err = Open(o); err != nil {
			b.Fatal(err)
		}
	}
	slices.Sort(took)
	b.ReportMetric(took[len(took)/2].Seconds(), "median-s")
	b.ReportMetric(took[len(took)-1].Seconds(), "max-s")
}
