package cluster

import (
	"context"
	"slices"
	"testing"
	"time"
)

// BenchmarkProposal: one small service command through the log of a
// 3-node cluster on 127.0.0.1 with raft's default timeouts, one after
// another: the leader's fsync, a follower's, the round trip and the
// apply. The floor under each catalog decision in cluster mode.
//
//	go test ./cluster -run '^$' -bench Proposal -benchtime 500x
func BenchmarkProposal(b *testing.B) {
	svcs := []*listService{{}, {}, {}}
	c := startCluster(b, 3, func(i int, o *Options) {
		o.Service = svcs[i]
		// Raft's defaults (startCluster sets short test timeouts).
		o.HeartbeatTimeout, o.ElectionTimeout, o.LeaderLeaseTimeout, o.CommitTimeout = 0, 0, 0, 0
	})
	n := c.nodes[c.leader()]
	var lat []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if _, err := n.Propose(context.Background(), []byte("x"), nil); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1e3, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1e3, "p99-ms")
}
