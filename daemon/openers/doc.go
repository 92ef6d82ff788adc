// Package openers builds the daemon's backend factory: one Opener per
// backend kind (heap, file, lsm) with the daemon-wide resources they share
// (the heap snapshot store, the lsm block cache). It is apart from package
// daemon so that the daemon core builds and tests without the backends.
package openers
