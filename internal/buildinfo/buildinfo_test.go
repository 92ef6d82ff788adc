package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	cases := []struct {
		name string
		bi   debug.BuildInfo
		want Info
		str  string
	}{
		{"stamped", debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v1.2.3"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"},
				{Key: "vcs.time", Value: "2026-12-01T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}},
			Info{Version: "v1.2.3", Revision: "0123456789abcdef0123", Time: "2026-12-01T10:00:00Z", Modified: true, GoVersion: "go1.26.0"},
			"stated v1.2.3 (0123456789ab-dirty, 2026-12-01T10:00:00Z) go1.26.0"},
		{"checkout without vcs", debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}},
			Info{Version: "(devel)", GoVersion: "go1.26.0"}, "stated (devel) go1.26.0"},
		{"empty", debug.BuildInfo{GoVersion: "go1.26.0"}, Info{Version: "unknown", GoVersion: "go1.26.0"}, "stated unknown go1.26.0"},
	}
	for _, c := range cases {
		got := FromBuildInfo(&c.bi)
		if got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
		if s := got.String(); s != c.str {
			t.Errorf("%s: %q, want %q", c.name, s, c.str)
		}
	}
}

func TestReadNeverEmpty(t *testing.T) {
	in := Read()
	if in.Version == "" || !strings.HasPrefix(in.GoVersion, "go") {
		t.Fatalf("Read() = %+v", in)
	}
}

// TestReadFallsBackToLinkedRevision: a test binary carries no VCS stamp, so
// Read reports the revision set at link time (-X ...buildinfo.revision).
func TestReadFallsBackToLinkedRevision(t *testing.T) {
	if Read().Revision != "" {
		t.Skip("this test binary carries a VCS stamp, which wins over the linked revision")
	}
	defer func(old string) { revision = old }(revision)
	revision = "0123456789abcdef0123"
	in := Read()
	if in.Revision != revision || !strings.Contains(in.String(), "(0123456789ab)") {
		t.Fatalf("Read() = %+v (%s), want revision %s", in, in.String(), revision)
	}
}
