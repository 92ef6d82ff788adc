package doccheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// repo writes a small repository: a package with tests, a script, a doc
// directory, and the given documents.
func repo(t *testing.T, docs map[string]string) string {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		".gitignore":           "/bin/\n/stated-data/\n",
		"api/api.go":           "package api\n",
		"api/api_test.go":      "package api\n\nfunc TestOpen(t *testing.T) {}\nfunc BenchmarkInterleaved(b *testing.B) {}\nfunc FuzzBatch(f *testing.F) {}\n",
		"api/client/c_test.go": "package client\n\nfunc TestDial(t *testing.T) {}\n",
		"scripts/test.sh":      "#!/bin/sh\ncase $1 in --bench) ;; esac\n",
		"docs/ops.md":          "# ops\n",
		"clients/java/pom.xml": "<argLine>--add-opens java.base/java.nio=ALL-UNNAMED</argLine>\n",
	}
	for name, text := range docs {
		files[name] = text
	}
	for name, text := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// cli is a small stated command tree.
func cli() *cobra.Command {
	root := &cobra.Command{Use: "stated", Version: "x"}
	serve := &cobra.Command{Use: "serve", RunE: func(*cobra.Command, []string) error { return nil }}
	serve.Flags().String("data-dir", "", "")
	serve.Flags().String("metrics-addr", "", "")
	bench := &cobra.Command{Use: "bench"}
	run := &cobra.Command{Use: "run", RunE: func(*cobra.Command, []string) error { return nil }}
	run.Flags().String("addr", "", "")
	verify := &cobra.Command{Use: "verify <dir>", RunE: func(*cobra.Command, []string) error { return nil }}
	bench.AddCommand(run)
	root.AddCommand(serve, bench, verify)
	return root
}

func check(t *testing.T, doc string) []string {
	t.Helper()
	root := repo(t, map[string]string{"README.md": doc})
	ps, err := Check(Options{Root: root, Docs: []string{"README.md"}, CLI: cli()})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range ps {
		out = append(out, p.String())
	}
	return out
}

// TestFindsWhatNamesNothing: each kind of stale name is reported, on its
// line.
func TestFindsWhatNamesNothing(t *testing.T) {
	cases := []struct{ doc, want string }{
		{"Read `api/gone.proto`.", "README.md:1: api/gone.proto: no such file"},
		{"x\n\n    go build -o bin/stated ./api/gone\n", "README.md:3: api/gone: no such file"},
		{"Run `stated serve --data-dir d --nope 1`.", "stated serve has no flag --nope"},
		{"Run\n`stated bench run --socket x`.", "README.md:2: `stated bench run --socket`: stated bench run has no flag --socket"},
		{"```sh\nSTATED_X=1 bin/stated bench runn --addr x\n```\n", "README.md:2: `stated bench runn`: stated bench has no command \"runn\""},
		{"    stated serve \\\n      --metrics-addr \"\" --data-dirr x\n", "README.md:1: `stated serve --data-dirr`"},
		{"Set `--retain`.", "`--retain`: no stated command takes --retain"},
		{"See `TestClose`.", "`TestClose`: no _test.go file defines it"},
		{"    go test ./api -run '^$' -bench Nothing -benchtime 3x\n", "go test -bench Nothing ./api: matches no Benchmark"},
		{"`go test -run TestDial ./api/`", "go test -run TestDial ./api/: matches no Test"},
		{"`go test ./nowhere/...`", "go test ./nowhere/...: no such package"},
		{"`go test ./api -run '^$' -bench 'Interleaved/x|Nope'`", "go test -bench Interleaved/x|Nope (its part Nope) ./api: matches no Benchmark"},
		{"`go test -run 'TestOpen|TestGone' ./api`", "(its part TestGone)"},
		{"See [ops](docs/opz.md#x).", "link (docs/opz.md): docs/opz.md does not exist"},
		{"The store is `api/gone.Store`.", "api/gone.Store: no such file"},
		{"```console\n$ go run ./api/client serve\n```", ""},
		// A benchmark's output row names a backend "stated": not a command.
		{"```\nrocksdb   5890  1.00x\nstated    1250  0.21x\n```\n", ""},
		{"```\nstated frob 1250\n```\n", "README.md:2: `stated frob`: stated has no command \"frob\""},
	}
	for _, c := range cases {
		got := check(t, c.doc)
		if c.want == "" {
			if len(got) != 0 {
				t.Errorf("%q: %v, want nothing", c.doc, got)
			}
			continue
		}
		if len(got) != 1 || !strings.Contains(got[0], c.want) {
			t.Errorf("%q: %v, want one problem with %q", c.doc, got, c.want)
		}
	}
}

// TestProseIsNotCode: names that are real, prose and placeholders raise
// nothing.
func TestProseIsNotCode(t *testing.T) {
	doc := strings.Join([]string{
		"# stated",
		"stated is a daemon; api/gone.go in prose is not code. The node logs `stated serving`.",
		"Read `api/client`'s `TestDial`, `api/api_test.go`, `docs/ops.md` and [ops](docs/ops.md);",
		"`api/client.Dial` and `api/client.Options.TLS` are Go identifiers of a package.",
		"Checkpoints go to `<data-dir>/checkpoints`, `s3://bucket/prefix`, `file:///dir`, `stated-data/x/y`,",
		"`fuzz/testdata/<Target>`, `api/*.go`, `github.com/statedhq/stated/api/gone`, `http://127.0.0.1:9464/ui/`.",
		"Flags: `--data-dir`, `--addr host:port`, `--bench` (a script's), `--add-opens` (a client's build);",
		"`stated serve --help`, `stated --version`.",
		"`stated verify j/latest`, `stated bench run --addr x`, `bin/stated serve --metrics-addr=\"\"`.",
		"<!-- doccheck: not built yet: docs/later.md -->",
		"Soon: [later](docs/later.md) and `docs/later.md`.",
		"",
		"```go",
		"c, err := client.Dial(\"api/gone.sock\") // stated keeps it",
		"```",
		"",
		"    go test ./api -run '^$' -bench Interleaved -benchtime 20x",
		"    go test -run 'TestOpen|TestDial' ./api/... ; go test ./api -run XXX -bench .",
		"    go test ./api -fuzz FuzzBatch   # a comment naming api/gone.go",
		"    for i in 0 1; do stated serve --data-dir n$i & done",
		"",
		"| a | `go test -bench 'Interleaved/slice=1\\|Interl' ./api` |",
	}, "\n")
	if got := check(t, doc); len(got) != 0 {
		t.Fatalf("false alarms:\n%s", strings.Join(got, "\n"))
	}
}
