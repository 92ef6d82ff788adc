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
// the node-to-node gRPC service (clusterpb: Apply, Join, Leave, Status,
// Call).
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
//
// # The cluster's catalog
//
// The daemons of a cluster share one checkpoint catalog, and this package
// is all of cluster mode's part in it:
//
//   - CatalogHost (cataloghost.go) follows the leadership: while this
//     node leads it opens a catalog.Catalog over the replica the log keeps
//     (its decisions proposed through the log, their fencing tokens
//     checked in the same entry) and serves it with a CatalogServer.
//   - The Catalog service of cluster.proto is what it serves: one rpc per
//     catalog call, typed messages. CatalogServer implements the
//     generated server (catalogserver.go); its calls travel in the Call
//     rpc, which followers forward to the leader.
//   - CatalogClient (catalogclient.go) is every node's daemon.Catalog: the
//     generated client over Member.Call.
//   - TaskFence (taskfence.go) gives the daemon the cluster's fencing
//     tokens; ChangelogRuns (changelogruns.go) registers this node's
//     changelog run and reports the segments it releases.
//
// Handles and manifests travel in their own checksummed encodings
// (backend.EncodeHandle, catalog.EncodeManifest), so what a node reports
// is what the leader checks. An error keeps its class across the wire:
// the answer names the catalog or backend sentinel it wraps, and the
// client's error wraps the same sentinel, so the api layer maps it to the
// same gRPC code as on a daemon alone.
//
// Leader changes. The catalog a new leader opens reads the replica, which
// holds every decision of the log; what it cannot know is what a client
// reported to an old leader's catalog that had not reached the log. Every
// answer therefore carries the serving catalog's epoch (the leader's raft
// term), and each client remembers what it reported for the checkpoints
// still in flight: when it meets a new epoch it reports them again (Begin
// and Report are idempotent), so a completion retried after a leader
// change succeeds. Resync does the same on demand, when a node observes a
// leader change before its daemon next calls.
package cluster

//go:generate protoc --go_out=. --go_opt=module=github.com/statedhq/stated/cluster --go-grpc_out=. --go-grpc_opt=module=github.com/statedhq/stated/cluster cluster.proto
