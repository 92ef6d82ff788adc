// Package storetest is the acceptance suite every tiered.Store
// implementation runs: local directory, memory, S3, the tiered cache, and
// the fault wrapper around each. An implementation's test is one line:
//
//	func TestAcceptance(t *testing.T) { storetest.Run(t, storetest.Harness{New: newStore}) }
//
// The suite checks the contract written on tiered.Store: every operation,
// large objects (the multipart path of S3), ranged reads at every edge,
// listing thousands of keys page by page, concurrent writers and readers,
// conditional-put races with exactly one winner, and not-found behaviour.
// RunUnderFaults adds a randomized run with injected errors that checks no
// operation ever returns wrong data and that retrying finishes every job.
package storetest
