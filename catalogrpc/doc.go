// Package catalogrpc lets the daemons of a cluster share one catalog: the
// cluster's leader hosts a catalog.Catalog behind a Server, and every
// node's daemon talks to it through a Client, which implements
// daemon.Catalog over any Caller (the cluster's leader-forwarding call).
//
// Calls and answers are small JSON documents; handles and manifests
// travel in their own checksummed encodings (backend.EncodeHandle,
// catalog.EncodeManifest), so what a node reports is what the leader
// checks. An error keeps its class across the wire: the answer names the
// catalog or backend sentinel it wraps, and the Client's error wraps the
// same sentinel, so the api layer maps it to the same gRPC code as on a
// daemon alone.
//
// Leader changes. The catalog a new leader opens reads the checkpoint
// store, which holds every completed checkpoint; what it cannot know is
// the in-flight checkpoints and the handles tasks reported to the old
// leader. Every answer therefore carries the serving catalog's epoch (the
// leader's raft term), and each Client remembers what it reported for the
// checkpoints still in flight: when it meets a new epoch it reports them
// again (Begin and AddTaskHandle are idempotent), so a completion retried
// after a leader change succeeds. Resync does the same on demand, when a
// node observes a leader change before its daemon next calls.
package catalogrpc
