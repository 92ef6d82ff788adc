//go:build race

package changelog_test

// raceEnabled: the race detector's instrumentation allocates on its own,
// so allocation counts are checked only without it.
const raceEnabled = true
