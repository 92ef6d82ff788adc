// Package doccheck finds the names in the project's Markdown documentation
// that no longer name anything: a repository path, a `stated` command or
// flag, a Go test or benchmark, a relative link. cmd/stated's
// TestDocsNameRealThings runs it over README.md, CONTRIBUTING.md and
// docs/*.md with the CLI's command tree, so a doc that drifts from the code
// fails the normal `go test ./...`.
//
// It is precise rather than broad, so that prose never raises a false
// alarm. It reads only code: inline code spans and code blocks (fenced
// blocks in a language other than a shell are skipped). Within them it
// checks
//
//   - a span that is a path whose first segment is a top-level entry of the
//     repository (`api/stated.proto`, `scripts/test.sh`): it must exist;
//     spans with placeholders (<job>, *, $VAR, {...}) are skipped;
//   - a command line that runs stated (`stated ...`, `bin/stated ...`,
//     `go run ./cmd/stated ...`, at a command position): each subcommand
//     must exist, and each --flag must be a flag of the command it reaches;
//   - a span that is a lone flag (`--data-dir`): some stated command, or a
//     file under scripts/, clients/ or examples/, must name it;
//   - a `go test` line: its packages must exist, and each -run and -bench
//     pattern's first level must match a test or benchmark of them;
//   - a span that is a Go test name (`TestPowerLoss`, `BenchmarkOps`,
//     `FuzzRestoreLSM`): some _test.go file must define it;
//   - a relative Markdown link: its target must exist.
//
// A reference to a file that another change is adding can be declared in
// the document itself, on a line of its own:
//
//	<!-- doccheck: not built yet: docs/flink.md -->
//
// The path is then not reported in that document.
package doccheck
