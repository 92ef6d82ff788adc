// Package cluster is a stated node's membership in a cluster of daemons:
// a raft group (hashicorp/raft, its log on Pebble: cluster/raftlog) whose replicated
// state machine holds what every node must agree on, and the node-to-node
// service that forwards to the leader what only the leader may decide.
//
// # What is replicated
//
// Fencing tokens: opening a task, (job, operator, subtask), on any node
// takes a new token (Acquire). Tokens grow across all tasks and are never
// reused, so the newest holder of a task is the one with the largest
// token, and an older holder — a daemon cut off by a partition, a task
// reopened elsewhere — fails Check with ErrFenced naming the newer holder.
// The state machine decides from commands alone: no clock, no randomness,
// no I/O, so every node reaches the same state from the same log.
//
// # Formats
//
// Commands (the raft log's entries) and the machine's snapshots are JSON
// with a version field "v" (version 1); a node refuses a version it does
// not know, naming it, rather than misreading it. The log store
// (cluster/raftlog, in --raft-dir/log) checksums every log entry and
// raft's file snapshot store every snapshot (--raft-dir/snapshots). A
// raft dir of an older stated, whose log was in raft-wal (--raft-dir/wal),
// is migrated once at start and the old log kept as wal.migrated
// (logstore.go); raft-wal is used for that migration only.
//
// # Transport and authentication
//
// One TCP port per node (--raft-addr) carries both the raft traffic and
// the node-to-node gRPC service (clusterpb: Apply, Join, Leave, Status).
// Each connection starts with TLS (with client certificates: both sides
// present a certificate of the cluster's CA) when it is configured, then a
// header naming the service and carrying the shared cluster token, which
// the listener compares in constant time before handing the connection to
// raft or to gRPC. Without TLS the token is required: without either,
// anyone who reaches the port could join the cluster.
//
// # Leaders and retries
//
// Any node accepts every call. A follower forwards a command to the leader
// it knows; a command that meets a leader change is retried until the
// caller's deadline (or Options.ApplyTimeout). A command whose first answer
// was lost with the old leader may reach the log twice: acquires and
// releases carry a request id, and the machine answers a repeated id with
// its first answer (it remembers the newest 4096), so each takes effect
// once; checks only read. VerifyLeader confirms leadership with a quorum, for
// effects only a leader may cause (deletes). ConfirmLeader may answer from
// a leader lease instead (Options.LeaderLease: no member votes for another
// leader within a heartbeat timeout of answering this one), for reads and
// for writes a later leader will see.
package cluster

//go:generate protoc --go_out=. --go_opt=module=github.com/statedhq/stated/cluster --go-grpc_out=. --go-grpc_opt=module=github.com/statedhq/stated/cluster cluster.proto
