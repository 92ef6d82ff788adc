// Package memsnap is the code the heap and file backends share: working
// state in kvstate over a memkv copy-on-write B-tree, full snapshots in the
// snapfmt format, and restores from heap, file and canonical handles. The
// two backends differ only in where snapshots go (Config.Snapshots,
// Config.MaxSnapshotSize) and where restores read from
// (Config.RestoreSource).
//
// # Snapshots
//
// The synchronous part takes kvstate's exclusive lock just long enough to
// Clone the tree (O(1): the clone shares every node, and writes after it
// copy the nodes they touch) and record the registered states. The
// asynchronous part (PendingSnapshot.Run) scans the frozen clone, leaves
// out entries past their TTL (kvstate.SnapshotFilter at the time of the
// synchronous part) and writes one snapfmt file while the task keeps
// writing to the live tree.
package memsnap
