package layering

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/statedhq/stated"

// floors places every package (by path inside the module; a prefix ending
// in "/" places a whole tree) on a floor, lowest first, after
// docs/architecture.md's layout. A package may import its own floor and
// the floors below it. The longest matching entry wins.
var floors = []struct {
	name string
	pkgs []string
}{
	{"shared helpers", []string{"internal/"}},
	{"object stores", []string{"tiered", "tiered/"}},
	{"contracts", []string{"backend", "backend/tablecheck", "refcount", "refcount/"}},
	{"backends and state formats", []string{"backend/heap", "backend/file", "backend/lsm", "backend/lsm/",
		"backend/kvlayout", "backend/internal/", "backend/backendtest", "dstl", "chanstate", "rescale"}},
	{"catalog", []string{"catalog", "dstl/changelog"}},
	{"daemon and cluster", []string{"daemon", "daemon/", "cluster", "cluster/", "inspect"}},
	{"api", []string{"api", "api/"}},
	{"host", []string{"host", "host/"}},
	{"tools and tests", []string{"cmd/", "tools/", "examples/", "clients/", "fuzz", "tests/"}},
}

// belowDaemon are the packages that must not depend, even indirectly, on
// a backend implementation: the daemon (through daemon/openers) and the
// host choose backends, nothing under them does.
var belowDaemon = []string{"tiered", "tiered/", "refcount", "refcount/", "backend", "backend/tablecheck",
	"dstl", "chanstate", "rescale", "catalog"}

// implementations are the backend implementations and what only they use.
var implementations = []string{"backend/heap", "backend/file", "backend/lsm", "backend/lsm/",
	"backend/internal/", "backend/backendtest", "dstl/changelog"}

// apart are packages on one floor that must not import each other: the
// daemon sees cluster mode only through its Catalog and Fencer
// interfaces, which the host fills in with the cluster's, so that the
// cluster's completion path crosses daemon, cluster and catalog and no
// more (docs/architecture.md).
var apart = [][2][]string{
	{{"daemon", "daemon/"}, {"cluster", "cluster/"}},
	{{"cluster", "cluster/"}, {"daemon", "daemon/"}},
}

// match returns the length of the longest entry of pats that places rel,
// or -1.
func match(pats []string, rel string) int {
	best := -1
	for _, p := range pats {
		ok := rel == p || (strings.HasSuffix(p, "/") && strings.HasPrefix(rel, p))
		if ok && len(p) > best {
			best = len(p)
		}
	}
	return best
}

// floorOf returns the floor of rel, or -1 when no entry places it.
func floorOf(rel string) int {
	floor, best := -1, -1
	for i, f := range floors {
		if n := match(f.pkgs, rel); n > best {
			floor, best = i, n
		}
	}
	return floor
}

type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
	Error      *struct{ Err string }
	DepsErrors []*struct{ Err string }
}

// rel returns path inside the module, and whether it is the module's.
func rel(path string) (string, bool) {
	if path == module {
		return "", true
	}
	r, ok := strings.CutPrefix(path, module+"/")
	return r, ok
}

// load lists the module's packages with their non-test imports.
func load(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Imports,Deps,Error,DepsErrors", module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, stderr.String())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages of %s; run the test inside the module", len(pkgs), module)
	}
	return pkgs
}

// check returns every broken rule, one line each, sorted.
func check(pkgs []pkg) []string {
	var bad []string
	for _, p := range pkgs {
		r, ok := rel(p.ImportPath)
		if !ok {
			continue
		}
		if p.Error != nil {
			bad = append(bad, fmt.Sprintf("%s: %s", r, p.Error.Err))
		}
		for _, e := range p.DepsErrors {
			bad = append(bad, fmt.Sprintf("%s: dependency: %s", r, e.Err))
		}
		from := floorOf(r)
		if from < 0 {
			bad = append(bad, fmt.Sprintf("%s: on no floor: give it one in internal/layering's floors (see docs/architecture.md)", r))
			continue
		}
		for _, imp := range p.Imports {
			ir, ok := rel(imp)
			if !ok {
				continue
			}
			to := floorOf(ir)
			if to > from {
				bad = append(bad, fmt.Sprintf("%s (floor %q) imports %s (floor %q, higher): imports point down", r, floors[from].name, ir, floors[to].name))
			}
			for _, a := range apart {
				if match(a[0], r) >= 0 && match(a[1], ir) >= 0 {
					bad = append(bad, fmt.Sprintf("%s imports %s: the daemon and the cluster meet only in host, through the daemon's Catalog and Fencer interfaces", r, ir))
				}
			}
		}
		if match(belowDaemon, r) >= 0 && match(implementations, r) < match(belowDaemon, r) {
			for _, d := range p.Deps {
				if dr, ok := rel(d); ok && match(implementations, dr) >= 0 {
					bad = append(bad, fmt.Sprintf("%s depends on the backend implementation %s: only the daemon's openers and the host choose backends", r, dr))
				}
			}
		}
	}
	sort.Strings(bad)
	return bad
}

// TestImportRules: imports point down, the daemon and the cluster do not
// import each other, and nothing below the daemon depends on a backend
// implementation (see doc.go).
func TestImportRules(t *testing.T) {
	for _, b := range check(load(t)) {
		t.Error(b)
	}
}

// TestRulesCatchBreaks: check reports an upward import, a package below
// the daemon that reaches a backend implementation indirectly, a package
// on no floor and a load error (an import cycle), so that
// TestImportRules passing means something.
func TestRulesCatchBreaks(t *testing.T) {
	p := func(path string, imports, deps []string) pkg {
		q := pkg{ImportPath: module + "/" + path}
		for _, i := range imports {
			q.Imports = append(q.Imports, module+"/"+i)
		}
		for _, d := range deps {
			q.Deps = append(q.Deps, module+"/"+d)
		}
		return q
	}
	cycle := p("rescale", nil, nil)
	cycle.Error = &struct{ Err string }{"import cycle not allowed"}
	for _, c := range []struct {
		pkg  pkg
		want string
	}{
		{p("tiered/cache", []string{"backend"}, []string{"backend"}), "imports point down"},
		{p("catalog", []string{"daemon"}, []string{"daemon"}), "imports point down"},
		{p("catalog", []string{"refcount"}, []string{"refcount", "backend/lsm"}), "backend implementation backend/lsm"},
		{p("rescale", []string{"backend/heap"}, []string{"backend/heap"}), "backend implementation backend/heap"},
		{p("newthing", nil, nil), "on no floor"},
		{p("cluster", []string{"daemon"}, []string{"daemon"}), "meet only in host"},
		{p("daemon", []string{"cluster/clusterpb"}, []string{"cluster/clusterpb"}), "meet only in host"},
		{cycle, "import cycle"},
	} {
		got := check([]pkg{c.pkg})
		if len(got) == 0 || !strings.Contains(strings.Join(got, "\n"), c.want) {
			t.Errorf("%s importing %v: got %q, want a report naming %q", c.pkg.ImportPath, c.pkg.Imports, got, c.want)
		}
	}
	// And allowed imports pass: down, and sideways on a floor.
	for _, ok := range []pkg{
		p("catalog", []string{"refcount/markers", "backend/tablecheck", "dstl"}, []string{"refcount/markers", "backend/tablecheck", "dstl", "tiered"}),
		p("daemon/openers", []string{"backend/lsm", "daemon"}, []string{"backend/lsm", "daemon"}),
		p("backend/lsm", []string{"refcount/markers", "backend/lsm/remotestore"}, nil),
	} {
		if got := check([]pkg{ok}); len(got) != 0 {
			t.Errorf("%s importing %v: %q, want no report", ok.ImportPath, ok.Imports, got)
		}
	}
}
