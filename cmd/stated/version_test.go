package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/statedhq/stated/internal/buildinfo"
)

// TestVersion: "stated version" and "stated --version" print the build's
// version line.
func TestVersion(t *testing.T) {
	want := buildinfo.Read().String()
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var out bytes.Buffer
		rootCmd.SetArgs(args)
		rootCmd.SetOut(&out)
		err := rootCmd.Execute()
		rootCmd.SetOut(nil)
		rootCmd.SetArgs(nil)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if first, _, _ := strings.Cut(out.String(), "\n"); first != want {
			t.Fatalf("%v printed %q, want %q", args, out.String(), want)
		}
	}
}
