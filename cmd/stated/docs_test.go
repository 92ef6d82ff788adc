package main

import (
	"strings"
	"testing"

	"github.com/statedhq/stated/internal/doccheck"
)

// TestDocsNameRealThings fails when README.md, CONTRIBUTING.md, docs/*.md
// or a client's README names a repository path, a stated command or flag,
// a Go test or benchmark, or a link target that does not exist (package
// doccheck says exactly what it reads, so that prose raises no alarm).
func TestDocsNameRealThings(t *testing.T) {
	problems, err := doccheck.Check(doccheck.Options{Root: "../..", CLI: rootCmd})
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) > 0 {
		var b strings.Builder
		for _, p := range problems {
			b.WriteString("\n" + p.String())
		}
		t.Fatalf("%d names in the docs that name nothing:%s", len(problems), b.String())
	}
}
