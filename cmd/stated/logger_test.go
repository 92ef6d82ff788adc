package main

import (
	"strings"
	"testing"
)

// TestLogLevelErrorListsLevels: a wrong --log-level says which are valid.
func TestLogLevelErrorListsLevels(t *testing.T) {
	_, err := newLogger("verbose", "text")
	if err == nil || !strings.Contains(err.Error(), "debug, info, warn, error") {
		t.Fatalf("--log-level verbose: %v", err)
	}
	for _, l := range []string{"debug", "INFO", "warn", "error"} {
		if _, err := newLogger(l, "json"); err != nil {
			t.Errorf("--log-level %s: %v", l, err)
		}
	}
}
