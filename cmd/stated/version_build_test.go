package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// revisionLDFlag is the link flag the documented build command (README.md,
// CONTRIBUTING.md) passes; the test below checks that both spell it so.
const revisionLDFlag = "-X github.com/statedhq/stated/internal/buildinfo.revision="

// TestVersionShowsLinkedRevision builds stated as the README does but
// without VCS stamping (-buildvcs=false, as a build from a copy of the tree
// or "go run" gets), and checks that "stated version" still names the
// revision passed by -ldflags.
func TestVersionShowsLinkedRevision(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the stated binary (-short)")
	}
	for _, doc := range []string{"../../README.md", "../../CONTRIBUTING.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), revisionLDFlag) {
			t.Errorf("%s: the documented build command does not pass %q", doc, revisionLDFlag)
		}
	}
	const rev = "feedc0de0123456789abcdef0123456789abcdef"
	bin := filepath.Join(t.TempDir(), "stated")
	build := exec.Command("go", "build", "-buildvcs=false", "-ldflags", revisionLDFlag+rev, "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("stated version: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "(feedc0de0123)") || !strings.Contains(string(out), "revision "+rev) {
		t.Fatalf("stated version printed %q, want revision %s", out, rev)
	}
}
