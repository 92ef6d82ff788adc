package api_test

import (
	"testing"
	"time"
)

// waitUntil polls cond until it holds, and fails the test, naming what it
// waited for, if that takes longer than timeout.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", timeout, what)
		}
		// The polling interval, not a synchronization.
		time.Sleep(5 * time.Millisecond)
	}
}
