package client

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/statedhq/stated/"

// clientPackages are the packages of this module a client-only program may
// link: the client, what it shares with the server (api/protocol, the
// generated code, the batch codec) and the backend's types, with what those
// pull in (tiered's Store interface, which backend.Options names, and
// internal/frame, the handle codec; both import only the standard
// library), and internal/tlsconf, which builds TLS settings from PEM files
// with the standard library.
var clientPackages = []string{
	"api/client", "api/protocol", "api/statedpb", "api/internal/wire",
	"backend", "tiered", "internal/frame", "internal/tlsconf",
}

// serverModules are third-party modules only the daemon uses.
var serverModules = []string{
	"github.com/cockroachdb/", "github.com/aws/", "github.com/prometheus/",
}

// TestNoServerDeps keeps the thin client thin: a task that only wants the
// client must not link the daemon, the catalog, a backend implementation,
// Pebble or the AWS SDK. A new import of this module's packages must be
// added to clientPackages on purpose.
func TestNoServerDeps(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out, err := exec.Command(goTool, "list", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	importers := map[string]string{} // package -> one package importing it
	var pkgs []string
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		pkgs = append(pkgs, f[0])
		for _, imp := range f[1:] {
			if _, ok := importers[imp]; !ok {
				importers[imp] = f[0]
			}
		}
	}
	if !slices.Contains(pkgs, module+"api/client") {
		t.Fatalf("go list -deps does not list api/client itself:\n%s", out)
	}
	// chain names the imports that lead from the client to p.
	chain := func(p string) string {
		path := []string{p}
		for seen := 0; p != module+"api/client" && seen < len(pkgs); seen++ {
			p = importers[p]
			path = append(path, p)
		}
		slices.Reverse(path)
		return strings.ReplaceAll(strings.Join(path, " -> "), module, "")
	}
	for _, p := range pkgs {
		rel, ours := strings.CutPrefix(p, module)
		switch {
		case ours && !slices.Contains(clientPackages, rel):
			t.Errorf("the client links %s, which it must not (only %v): %s", rel, clientPackages, chain(p))
		case slices.ContainsFunc(serverModules, func(m string) bool { return strings.HasPrefix(p, m) }):
			t.Errorf("the client links %s, a dependency of the daemon: %s", p, chain(p))
		}
	}
}
