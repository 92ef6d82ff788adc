package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Info is what the binary knows of its own build.
type Info struct {
	// Version is the main module's version: a tag or pseudo-version for
	// "go install ...@version", "(devel)" for a build from a checkout.
	Version string
	// Revision is the VCS commit ("" when the build was not stamped, as
	// with "go test" or -buildvcs=false).
	Revision string
	// Time is the commit's time, RFC 3339 ("" when unknown).
	Time string
	// Modified says the work tree had uncommitted changes.
	Modified bool
	// GoVersion is the toolchain that built the binary.
	GoVersion string
}

// revision is the VCS revision given at link time, for the builds that
// carry no VCS stamp ("go run", "go build -buildvcs=false", a build from a
// copy of the tree without .git): the documented build command sets it with
//
//	-ldflags "-X github.com/statedhq/stated/internal/buildinfo.revision=$(git rev-parse HEAD)"
//
// A stamp the toolchain wrote wins over it: it also knows the commit time
// and whether the tree was modified.
var revision string

// Read returns the running binary's build information. It never fails: a
// binary without build information reports "unknown".
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	in := Info{Version: "unknown", GoVersion: runtime.Version()}
	if ok {
		in = FromBuildInfo(bi)
	}
	if in.Revision == "" {
		in.Revision = revision
	}
	return in
}

// FromBuildInfo extracts Info from bi (Read's work, testable on any input).
func FromBuildInfo(bi *debug.BuildInfo) Info {
	in := Info{Version: bi.Main.Version, GoVersion: bi.GoVersion}
	if in.Version == "" {
		in.Version = "unknown"
	}
	if in.GoVersion == "" {
		in.GoVersion = runtime.Version()
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.time":
			in.Time = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	return in
}

// ShortRevision is the revision's first 12 characters, with "-dirty" when
// the tree was modified; "" when unknown.
func (in Info) ShortRevision() string {
	r := in.Revision
	if len(r) > 12 {
		r = r[:12]
	}
	if r != "" && in.Modified {
		r += "-dirty"
	}
	return r
}

// String is one line: "stated <version> (<revision>, <time>) <go version>".
func (in Info) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "stated %s", in.Version)
	if r := in.ShortRevision(); r != "" {
		b.WriteString(" (" + r)
		if in.Time != "" {
			b.WriteString(", " + in.Time)
		}
		b.WriteString(")")
	}
	b.WriteString(" " + in.GoVersion)
	return b.String()
}
