// Package partition holds the network-partition suite: real "stated serve"
// processes, each cluster node in a network namespace of its own, joined
// by veth pairs to a bridge in another namespace, with links cut and
// healed while a job checkpoints through the nodes. It checks that no
// acknowledged completion is lost, that nothing a retained checkpoint
// references is deleted, that the cut-off side makes no progress, and
// that the healed cluster converges; it prints the time to a new leader,
// the completions the minority refused and the time to converge.
//
// It needs Linux, root and iproute2's "ip" (ip netns, veth, bridge, ip
// rule), so plain "go test ./..." skips it; it runs with
// STATED_PARTITION=1:
//
//	STATED_PARTITION=1 go test -count=1 -v ./tests/partition/
//
// scripts/partition.sh runs it (CI runs one cycle of every scenario; pass a
// cycle count for a longer run). Every address is in 10.213.0.0/24 and
// exists only inside the namespaces the suite creates, which have no route
// out of them: no packet leaves the machine. docs/cluster.md ("Partition
// suite") describes the scenarios and checks.
package partition
