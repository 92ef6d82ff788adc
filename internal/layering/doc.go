// Package layering holds the test of the project's import rules (see
// docs/architecture.md, "Layout and import direction"); it has no code of
// its own.
//
// # Basics
//
// TestImportRules lists every package of the module with `go list -json`
// and checks, on the imports of non-test files:
//
//   - every package sits on a floor (floors, in layering_test.go), and no
//     package imports one on a higher floor: imports point down;
//   - daemon and cluster, on one floor, do not import each other (apart):
//     the daemon sees cluster mode only through its Catalog and Fencer
//     interfaces, filled in by the host;
//   - no package below the daemon (tiered, refcount, backend's contract,
//     dstl, chanstate, rescale, catalog) depends, even indirectly, on a
//     backend implementation (backend/heap, backend/file, backend/lsm and
//     their internals, dstl/changelog);
//   - no package has an import cycle or a load error (Go refuses cycles;
//     the test says so rather than passing on a broken tree).
//
// A new package fails the test until it is given a floor, so that where it
// sits is a decision, not an accident.
//
// # Caveats
//
// Test files may import upward (a daemon test starts a node): only the
// imports of the code that ships are checked. The test runs the go
// command, so it needs the toolchain that runs it on PATH.
package layering
