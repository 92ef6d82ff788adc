//go:build !race

package changelog_test

const raceEnabled = false
