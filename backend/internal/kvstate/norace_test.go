//go:build !race

package kvstate

const raceEnabled = false
