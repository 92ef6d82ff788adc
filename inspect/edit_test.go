package inspect_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/host"
	"github.com/statedhq/stated/inspect"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// contents is every object of s with a hash of its bytes, for checking
// that nothing already in a store changed.
func contents(t *testing.T, s tiered.Store) map[string]string {
	t.Helper()
	out := map[string]string{}
	ctx := context.Background()
	if err := tiered.Walk(ctx, s, "", func(o tiered.ObjectInfo) error {
		if strings.HasPrefix(o.Name, "_changelog/") {
			return nil // the daemon's shared log writes on its own
		}
		b, err := tiered.ReadAll(ctx, s, o.Name, 1<<30)
		if err != nil {
			return err
		}
		out[o.Name] = fmt.Sprintf("%x", sha256.Sum256(b))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// startNode runs a node on store; stop shuts it down (once).
func startNode(t *testing.T, store *memstore.Store) (*daemon.Daemon, func()) {
	t.Helper()
	n, err := host.Open(context.Background(), host.Options{DataDir: t.TempDir(), Store: store, NoSocket: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := n.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(stop)
	return n.Daemon(), stop
}

// scanAll reads every entry of dir as Entries that own their bytes.
func scanAll(t *testing.T, s tiered.Store, dir string) []inspect.Entry {
	t.Helper()
	r, err := inspect.Open(context.Background(), inspect.Options{Store: s, Dir: dir, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	var out []inspect.Entry
	err = r.Scan(context.Background(), inspect.MatchAll(), func(e *inspect.Entry) error {
		c := *e
		for _, b := range []*[]byte{&c.Key, &c.Namespace, &c.UserKey, &c.Value} {
			*b = slices.Clone(*b)
		}
		out = append(out, c)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func rows(es []inspect.Entry) []string {
	out := make([]string, len(es))
	for i := range es {
		out[i] = row(&es[i])
	}
	slices.Sort(out)
	return out
}

// TestEditedSavepointRestores edits a canonical savepoint of lsm state
// offline (a state dropped, one renamed, half the key groups dropped,
// the operator copied under a new name) into a new savepoint, checks that
// the source's bytes and listing are unchanged and that the new one
// verifies, then restores it through a real daemon at another
// parallelism (3 instead of 2) and checks, by a checkpoint of the
// restored instances, that they hold exactly the edited state. A
// savepoint bootstrapped from the source's entries restores the same way.
func TestEditedSavepointRestores(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	d, stop := startNode(t, store)
	const job = "j"
	open := func(sub int) *daemon.Instance {
		in, err := d.Open(ctx, daemon.OpenParams{Task: backend.TaskID{Job: job, Operator: "op", Subtask: sub},
			KeyGroups: backend.KeyGroupRangeForOperator(maxPar, 2, sub), MaxParallelism: maxPar,
			Kind: backend.KindLSM, States: states})
		if err != nil {
			t.Fatal(err)
		}
		return in
	}
	in0, in1 := open(0), open(1)
	want := append(fill(t, in0, 60), fill(t, in1, 50)...)
	sp, err := d.TriggerSavepoint(ctx, job, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	src := scanAll(t, store, sp.Dir)
	diff(t, "source savepoint", rows(src), want)

	before := contents(t, store)
	r, err := inspect.Open(ctx, inspect.Options{Store: store, Dir: sp.Dir, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	edit := inspect.Edit{DropStates: []string{"timers"}, RenameStates: map[string]string{"val": "value2"},
		KeepKeyGroups: []backend.KeyGroupRange{{Start: 0, End: maxPar/2 - 1}}, CopyOperators: map[string]string{"op": "op2"}}
	m, err := r.Rewrite(ctx, edit, inspect.Target{Store: store, ID: "edited", TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Tasks) != 4 {
		t.Fatalf("edited savepoint has %d tasks, want 4 (2 of op, 2 of op2)", len(m.Tasks))
	}
	after := contents(t, store)
	for name, sum := range before {
		if after[name] != sum {
			t.Errorf("%s changed or vanished while a savepoint was edited", name)
		}
	}
	for name := range after {
		if _, ok := before[name]; !ok && !strings.HasPrefix(name, "savepoints/edited/") {
			t.Errorf("the edit wrote %s, outside the new savepoint's directory", name)
		}
	}
	rep, err := catalog.Verify(ctx, store, "savepoints/edited", 0)
	if err != nil || !rep.OK() {
		t.Fatalf("verify of the edited savepoint: %v %+v", err, rep)
	}
	// The same edit into a directory that is taken is refused.
	if _, err := r.Rewrite(ctx, edit, inspect.Target{Store: store, ID: "edited", TempDir: t.TempDir()}); !errors.Is(err, catalog.ErrExists) {
		t.Fatalf("rewrite into a taken savepoint id: %v, want ErrExists", err)
	}

	// The model: the source's entries, edited, placed at parallelism 3.
	const newPar = 3
	var model []inspect.Entry
	for _, e := range src {
		if e.State == "timers" || e.KeyGroup >= maxPar/2 {
			continue
		}
		if e.State == "val" {
			e.State = "value2"
		}
		e.Subtask = backend.OperatorForKeyGroup(maxPar, newPar, e.KeyGroup)
		model = append(model, e)
		e.Operator = "op2"
		model = append(model, e)
	}
	if len(model) == 0 || len(model) >= 2*len(src) {
		t.Fatalf("model of %d entries from %d: the edit selects nothing or everything", len(model), len(src))
	}

	// A savepoint bootstrapped from the source's entries, one task per
	// operator, restored below at parallelism 3 too.
	i := 0
	if _, err := inspect.WriteBootstrap(ctx, inspect.Bootstrap{Job: "b", MaxParallelism: maxPar, States: states[:1]},
		inspect.Target{Store: store, ID: "boot", TempDir: t.TempDir()}, func() (*inspect.Entry, error) {
			if i == len(src) {
				return nil, io.EOF
			}
			i++
			return &src[i-1], nil
		}); err != nil {
		t.Fatal(err)
	}
	var bootModel []inspect.Entry
	for _, e := range src {
		e.Subtask = backend.OperatorForKeyGroup(maxPar, newPar, e.KeyGroup)
		bootModel = append(bootModel, e)
	}

	// Restore through a daemon (a new one: savepoints are found at start).
	d2, _ := startNode(t, store)
	edited := []backend.StateDescriptor{states[0], states[1], states[2],
		{Name: "value2", Kind: backend.KindValue}}
	var ins []*daemon.Instance
	for _, op := range []string{"op", "op2"} {
		for sub := 0; sub < newPar; sub++ {
			in, err := d2.Open(ctx, daemon.OpenParams{Task: backend.TaskID{Job: "k", Operator: op, Subtask: sub},
				KeyGroups: backend.KeyGroupRangeForOperator(maxPar, newPar, sub), MaxParallelism: maxPar,
				Kind: backend.KindFile, States: edited, Restore: &daemon.RestoreSpec{Savepoint: "savepoints/edited"}})
			if err != nil {
				t.Fatalf("restore %s/%d from the edited savepoint: %v", op, sub, err)
			}
			ins = append(ins, in)
		}
	}
	for _, in := range ins {
		if _, err := d2.Snapshot(ctx, in, 1, false); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d2.CompleteCheckpoint(ctx, "k", 1, nil); err != nil {
		t.Fatal(err)
	}
	got := scanAll(t, store, catalog.CheckpointDir("k", 1))
	diff(t, "restored from the edited savepoint", rows(got), rows(model))

	ins = nil
	for sub := 0; sub < newPar; sub++ {
		in, err := d2.Open(ctx, daemon.OpenParams{Task: backend.TaskID{Job: "b", Operator: "op", Subtask: sub},
			KeyGroups: backend.KeyGroupRangeForOperator(maxPar, newPar, sub), MaxParallelism: maxPar,
			Kind: backend.KindLSM, States: states, Restore: &daemon.RestoreSpec{Savepoint: "boot"}})
		if err != nil {
			t.Fatalf("restore op/%d from the bootstrapped savepoint: %v", sub, err)
		}
		if _, err := d2.Snapshot(ctx, in, 1, false); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d2.CompleteCheckpoint(ctx, "b", 1, nil); err != nil {
		t.Fatal(err)
	}
	got = scanAll(t, store, catalog.CheckpointDir("b", 1))
	diff(t, "restored from the bootstrapped savepoint", rows(got), rows(bootModel))
}

// TestEditRefusesTypos: an edit naming a state or operator the source
// lacks, or a new name that is taken, writes nothing.
func TestEditRefusesTypos(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	in := e.open(t, "j", 0, backend.KindLSM, daemon.ChangelogOff)
	fill(t, in, 5)
	sp, err := e.d.TriggerSavepoint(ctx, "j", false, 0)
	if err != nil {
		t.Fatal(err)
	}
	r, err := inspect.Open(ctx, inspect.Options{Store: e.store, Dir: sp.Dir})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		edit inspect.Edit
		says string
	}{
		{inspect.Edit{DropStates: []string{"nope"}}, `state "nope" to drop`},
		{inspect.Edit{RenameStates: map[string]string{"val": "map"}}, `that state exists`},
		{inspect.Edit{RenameStates: map[string]string{"nope": "x"}}, `state "nope" to rename`},
		{inspect.Edit{CopyOperators: map[string]string{"nope": "x"}}, `operator "nope" to copy`},
		{inspect.Edit{CopyOperators: map[string]string{"op": "op"}}, `it exists`},
	} {
		_, err := r.Rewrite(ctx, c.edit, inspect.Target{Store: e.store, ID: "x"})
		if !errors.Is(err, backend.ErrInvalidArgument) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%+v: %v, want ErrInvalidArgument saying %q", c.edit, err, c.says)
		}
	}
	page, err := e.store.List(ctx, "savepoints/x/", "", 1)
	if err != nil || len(page.Objects) > 0 {
		t.Fatalf("a refused edit wrote %v (%v)", page.Objects, err)
	}
}
