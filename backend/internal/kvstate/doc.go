// Package kvstate is the state layer every backend shares: it implements the
// data operations of backend.Backend (value, list, map, aggregate, timers,
// TTL, range and kind checks) over an ordered key/value Engine. The key and
// value layouts (keys.go, values.go) are frozen: they are the content of
// every snapshot, SST and canonical savepoint, which is what makes a
// canonical savepoint restorable into any backend kind.
//
// Backends embed *State and add snapshots: heap and file over memkv (a
// copy-on-write B-tree), lsm over Pebble.
package kvstate
