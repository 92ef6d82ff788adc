package cluster

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"
)

// BenchmarkProposal: one service command through the log of a 3-node
// cluster on 127.0.0.1 with raft's default timeouts, one after another:
// the leader's fsync, a follower's, the round trip and the apply. The
// floor under each catalog decision in cluster mode. "small" is a 1-byte
// command; "7KB" the size of the catalog's command completing a 6-task
// checkpoint with its reports (BenchmarkCheckpointCompletion in package
// host), with 6 fencing checks.
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
	var checks []Check
	for i := range 6 {
		tok, err := n.Acquire(context.Background(), "j/op/"+strconv.Itoa(i), "n0")
		if err != nil {
			b.Fatal(err)
		}
		checks = append(checks, Check{Task: "j/op/" + strconv.Itoa(i), Token: tok})
	}
	for _, size := range []int{1, 7 << 10} {
		name := "small"
		if size > 1 {
			name = fmt.Sprintf("%dKB", size>>10)
		}
		b.Run(name, func(b *testing.B) {
			cmd, cks := bytes.Repeat([]byte("x"), size), checks
			if size == 1 {
				cks = nil
			}
			var lat []time.Duration
			for b.Loop() {
				t0 := time.Now()
				if _, err := n.Propose(context.Background(), cmd, cks); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1e3, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1e3, "p99-ms")
		})
	}
}

// BenchmarkCommandCodec: encoding and decoding the cluster command that
// carries a 6-task completion (a 7 KB catalog command, 6 checks), as
// protobuf (version 5, what a node writes) and as JSON (version 4, what
// nodes wrote before): each node decodes every entry once, the leader's
// decode on the completion's path.
//
//	go test ./cluster -run '^$' -bench CommandCodec
func BenchmarkCommandCodec(b *testing.B) {
	c := command{Op: opService, Value: bytes.Repeat([]byte(`{"k":"v"},`), 7<<10/10), Checks: map[string]Check{}}
	for i := range 6 {
		c.Checks[strconv.Itoa(i)] = Check{Task: "j/op/" + strconv.Itoa(i), Token: uint64(100 + i)}
	}
	for _, enc := range []struct {
		name string
		f    func(command) []byte
	}{{"protobuf", encodeCommand}, {"json", encodeJSONCommand}} {
		b.Run(enc.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := decodeCommand(enc.f(c)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(enc.f(c))), "entry-bytes")
		})
	}
}
