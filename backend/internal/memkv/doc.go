// Package memkv is the in-memory ordered key/value engine of the heap and
// file backends: a copy-on-write B-tree (github.com/google/btree), so that
// the synchronous part of a snapshot is a Clone that costs O(1) and the
// asynchronous part reads the frozen clone while the task keeps writing.
package memkv
