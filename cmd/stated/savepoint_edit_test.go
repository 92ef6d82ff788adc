package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/host"
)

// runSavepoint runs "stated savepoint <args>" against the store root.
func runSavepoint(t *testing.T, root string, args ...string) (string, error) {
	t.Helper()
	cmd := newSavepointCmd()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cmd.SetArgs(append(args, "--checkpoint-store", root, "--temp-dir", t.TempDir()))
	err := cmd.Execute()
	return out.String(), err
}

// treeSums is every file under root with a hash of its bytes.
func treeSums(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if strings.HasPrefix(filepath.ToSlash(rel), "_changelog/") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out[filepath.ToSlash(rel)] = fmt.Sprintf("%x", sha256.Sum256(b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSavepointEditAndBootstrap writes state of every kind (a TTL state
// among them) through a daemon, takes a canonical savepoint, and then:
// "stated savepoint edit" (a state dropped, one renamed, half the key
// groups kept) writes a new savepoint that "stated verify" passes and
// whose export is the source's, edited; "stated savepoint bootstrap" of
// the source's JSON lines export writes a savepoint whose export equals
// those lines byte for byte; and the source's files are byte for byte
// what they were.
func TestSavepointEditAndBootstrap(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	root := filepath.Join(base, "checkpoints")
	n, err := host.Open(ctx, host.Options{DataDir: filepath.Join(base, "d"), CheckpointStore: "file://" + root,
		NoSocket: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	states := []backend.StateDescriptor{
		{Name: "agg", Kind: backend.KindAggregate, Aggregate: backend.AggMax, Number: backend.NumFloat64},
		{Name: "cnt", Kind: backend.KindAggregate, Aggregate: backend.AggSum, Number: backend.NumInt64},
		{Name: "list", Kind: backend.KindList},
		{Name: "map", Kind: backend.KindMap},
		{Name: "timers", Kind: backend.KindTimers},
		{Name: "ttl", Kind: backend.KindValue, TTL: 24 * time.Hour},
		{Name: "val", Kind: backend.KindValue},
	}
	d := n.Daemon()
	for sub := 0; sub < 2; sub++ {
		in, err := d.Open(ctx, daemon.OpenParams{Task: backend.TaskID{Job: "j", Operator: "op", Subtask: sub},
			KeyGroups: backend.KeyGroupRangeForOperator(64, 2, sub), MaxParallelism: 64, Kind: backend.KindLSM, States: states})
		if err != nil {
			t.Fatal(err)
		}
		b := in.Backend
		for i := 0; i < 40; i++ {
			kg := in.KeyGroups.Start + (i*7)%in.KeyGroups.Len()
			k := backend.Key{KeyGroup: kg, Key: []byte{0xff, byte(sub), byte(i)}, Namespace: []byte(fmt.Sprintf("w%d", i%2))}
			for _, err := range []error{
				b.Put("val", k, []byte(fmt.Sprintf(`{"n":%d}`, i))),
				b.Put("ttl", k, []byte{byte(i)}),
				b.ListAppend("list", k, []byte{}, []byte{byte(i), 0}),
				b.MapPut("map", k, []byte("b"), []byte{1}),
				b.MapPut("map", k, []byte("a"), []byte{}),
				b.AggregateAdd("agg", k, backend.Float64(float64(i)+0.5)),
				b.AggregateAdd("cnt", k, backend.Int64(int64(i)-20)),
				b.RegisterTimer("timers", backend.Timer{KeyGroup: kg, Key: k.Key, Namespace: k.Namespace, Timestamp: -int64(i)}),
			} {
				if err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	sp, err := d.TriggerSavepoint(ctx, "j", false, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	before := treeSums(t, root)

	export := func(target string) []byte {
		t.Helper()
		out := filepath.Join(t.TempDir(), "x.jsonl")
		if _, err := runState(t, root, "export", target, "-o", out); err != nil {
			t.Fatalf("export %s: %v", target, err)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	src := export(sp.Dir)
	if !bytes.Contains(src, []byte(`"expiry":`)) {
		t.Fatal("the source's export has no expiry: the test checks no TTL")
	}

	// Edit: the expected export is the source's lines, edited.
	if _, err := runSavepoint(t, root, "edit", sp.Dir, "edited", "--drop-state", "timers",
		"--rename-state", "val=value2", "--keep-key-groups", "0-31"); err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(src))
	for sc.Scan() {
		var l struct {
			State    string `json:"state"`
			KeyGroup int    `json:"keyGroup"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		if l.State == "timers" || l.KeyGroup > 31 {
			continue
		}
		want.WriteString(strings.Replace(sc.Text(), `"state":"val"`, `"state":"value2"`, 1) + "\n")
	}
	// The export's order within a key group is by state name's length,
	// then name: value2 sorts after val's neighbours. Compare as sets.
	if got := export("savepoints/edited"); !sameLines(got, want.Bytes()) {
		t.Errorf("export of the edited savepoint differs from the source's, edited:\n got %d bytes\nwant %d bytes", len(got), want.Len())
	}
	// Relocatable: a copy of its directory anywhere reads the same.
	moved := filepath.Join(t.TempDir(), "moved")
	if err := os.CopyFS(moved, os.DirFS(filepath.Join(root, "savepoints", "edited"))); err != nil {
		t.Fatal(err)
	}
	movedOut := filepath.Join(t.TempDir(), "moved.jsonl")
	if _, err := runState(t, "", "export", moved, "-o", movedOut); err != nil {
		t.Fatalf("export of the moved savepoint: %v", err)
	}
	if got, _ := os.ReadFile(movedOut); !sameLines(got, want.Bytes()) {
		t.Errorf("the edited savepoint, moved, reads otherwise")
	}
	vcmd := newVerifyCmd()
	var vout bytes.Buffer
	vcmd.SetOut(&vout)
	vcmd.SetErr(&vout)
	vcmd.SilenceUsage, vcmd.SilenceErrors = true, true
	vcmd.SetArgs([]string{"savepoints/edited", "--checkpoint-store", root})
	if err := vcmd.Execute(); err != nil {
		t.Fatalf("verify of the edited savepoint: %v\n%s", err, vout.String())
	}

	// Bootstrap from the source's export: its export is the same lines.
	in := filepath.Join(t.TempDir(), "in.jsonl")
	if err := os.WriteFile(in, src, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := runSavepoint(t, root, "bootstrap", "--from", in, "--job", "j", "boot"); err == nil ||
		!strings.Contains(err.Error(), "--aggregate agg=FUNC:TYPE") {
		t.Fatalf("bootstrap without --aggregate: %v, want an error naming the flag", err)
	}
	if _, err := runSavepoint(t, root, "bootstrap", "--from", in, "--job", "j", "--parallelism", "2",
		"--max-parallelism", "64", "--aggregate", "agg=max:float64", "--aggregate", "cnt=sum:int64", "boot"); err != nil {
		t.Fatal(err)
	}
	if got := export("savepoints/boot"); !bytes.Equal(got, src) {
		t.Errorf("export of the bootstrapped savepoint differs from its input (%d bytes, want %d)", len(got), len(src))
		gl, wl := strings.Split(string(got), "\n"), strings.Split(string(src), "\n")
		for i := range min(len(gl), len(wl)) {
			if gl[i] != wl[i] {
				t.Fatalf("first difference at line %d:\n got %s\nwant %s", i+1, gl[i], wl[i])
			}
		}
	}
	// A bad line fails naming it, and leaves nothing.
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	lines := strings.SplitAfter(string(src), "\n")
	lines[3] = `{"operator":"op","state":"val","kind":"value","keyGroup":99,"key":"","namespace":"","value":""}` + "\n"
	if err := os.WriteFile(bad, []byte(strings.Join(lines, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := runSavepoint(t, root, "bootstrap", "--from", bad, "--job", "j", "--max-parallelism", "64",
		"--aggregate", "agg=max:float64", "--aggregate", "cnt=sum:int64", "bad"); err == nil || !strings.Contains(err.Error(), "at line 4 of") {
		t.Fatalf("bootstrap of a bad line 4: %v, want an error naming line 4", err)
	}
	if _, err := os.Stat(filepath.Join(root, "savepoints", "bad")); err == nil {
		if ents, _ := os.ReadDir(filepath.Join(root, "savepoints", "bad")); len(ents) > 0 {
			t.Errorf("a failed bootstrap left %d entries in savepoints/bad", len(ents))
		}
	}

	after := treeSums(t, root)
	for name, sum := range before {
		if after[name] != sum {
			t.Errorf("%s changed or vanished", name)
		}
	}
	for name := range after {
		if _, ok := before[name]; !ok && !strings.HasPrefix(name, "savepoints/edited/") && !strings.HasPrefix(name, "savepoints/boot/") {
			t.Errorf("%s was written outside the new savepoints", name)
		}
	}
}

func sameLines(a, b []byte) bool {
	count := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(a)), "\n") {
		count[l]++
	}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		count[l]--
	}
	for _, c := range count {
		if c != 0 {
			return false
		}
	}
	return true
}
