// Package memstore is an in-memory tiered.Store. It backs the heap
// backend's snapshots (which by design live only as long as the daemon) and
// fast tests. Nothing in it survives the process.
package memstore
