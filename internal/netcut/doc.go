// Package netcut cuts a node off the network on demand, for tests of
// partitions: a cut node's connections close and new ones fail, as if its
// cable were pulled. It is used by the cluster's and the node's partition
// and lease tests.
package netcut
