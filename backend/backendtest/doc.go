// Package backendtest is the conformance suite every backend.Backend runs:
// one place that states, as executable checks, what the Backend contract in
// package backend means.
//
// # Basics
//
// A backend's test calls Run with a Harness that opens instances:
//
//	func TestConformance(t *testing.T) {
//		backendtest.Run(t, backendtest.Harness{
//			Kind: backend.KindLSM,
//			Open: func(t testing.TB, opts backend.Options) (backend.Backend, error) {
//				return lsm.Open(opts, lsm.Options{Dir: t.TempDir()})
//			},
//		})
//	}
//
// Run covers every operation of every state kind, bytewise iteration order,
// namespaces and key layout collisions, TTL with an injected clock for both
// update policies (per list element and per map entry too), timers, state
// registration, bad input (unknown state, wrong kind, key group outside the
// range, oversized values, use after Close), snapshots that keep the state
// of their synchronous part while writes go on, several pending snapshots,
// restores into a sub-range and from several handles, no-claim restores,
// aborted checkpoints whose files are deleted, canonical savepoints, and
// damaged snapshot files (a flipped byte, a truncated, extended or missing
// file) that must fail the restore with an error wrapping backend.ErrCorrupt
// (or ErrNotFound) that names the file. Damage whose checksum was recorded
// in the handle (a writer bug) must still never read back as data: the
// restore or the reads fail with ErrCorrupt, or the state is intact.
//
// Results are checked against Model, a plain map-based implementation of
// the semantics written independently of kvstate; random operation
// sequences come from pgregory.net/rapid, which shrinks a failure to a
// short sequence. Every backend call runs under recover: a panic fails the
// test instead of crashing it.
//
// # Caveats
//
// The rapid properties run DefaultRapidChecks cases unless the test binary
// gets -rapid.checks=N; raise it for a longer soak. A failing rapid case is
// saved under testdata/rapid of the package that called Run; pass
// -rapid.nofailfile to avoid that.
package backendtest
