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

const maxPar = 128

var states = []backend.StateDescriptor{
	{Name: "agg", Kind: backend.KindAggregate, Aggregate: backend.AggSum, Number: backend.NumInt64},
	{Name: "list", Kind: backend.KindList},
	{Name: "map", Kind: backend.KindMap},
	{Name: "timers", Kind: backend.KindTimers},
	{Name: "val", Kind: backend.KindValue},
}

// env is one daemon (a node, as "stated serve" runs it) on a memory store.
type env struct {
	d     *daemon.Daemon
	store *memstore.Store
}

func newEnv(t *testing.T) *env { return newEnvWith(t, false) }

// newEnvWith is newEnv with lsm remote mode on or off.
func newEnvWith(t *testing.T, lsmRemote bool) *env {
	t.Helper()
	store := memstore.New()
	n, err := host.Open(context.Background(), host.Options{DataDir: t.TempDir(), Store: store, NoSocket: true,
		LSMRemote: lsmRemote, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := n.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	})
	return &env{d: n.Daemon(), store: store}
}

// row renders an Entry (or the model's expectation) as one comparable line.
func row(e *inspect.Entry) string {
	return fmt.Sprintf("%s/%d %s %s kg=%d key=%q ns=%q uk=%q v=%q i=%d n=%s ts=%d",
		e.Operator, e.Subtask, e.State, e.Kind, e.KeyGroup, e.Key, e.Namespace, e.UserKey, e.Value, e.Index, e.Number, e.Timestamp)
}

// fill writes known state of every kind into in and returns the rows a
// reader must return for it.
func fill(t *testing.T, in *daemon.Instance, n int) []string {
	return fillPrefix(t, in, "k", n)
}

// fillPrefix is fill with keys that start with prefix.
func fillPrefix(t *testing.T, in *daemon.Instance, prefix string, n int) []string {
	t.Helper()
	b := in.Backend
	var want []string
	add := func(e inspect.Entry) {
		e.Operator, e.Subtask = in.Task.Operator, in.Task.Subtask
		want = append(want, row(&e))
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		kg := in.KeyGroups.Start + i%in.KeyGroups.Len()
		key := []byte(fmt.Sprintf("%s%d-%d", prefix, in.Task.Subtask, i))
		ns := []byte(fmt.Sprintf("ns%d", i%3))
		k := backend.Key{KeyGroup: kg, Key: key, Namespace: ns}
		must(b.Put("val", k, []byte(fmt.Sprintf(`{"i":%d}`, i))))
		add(inspect.Entry{State: "val", Kind: backend.KindValue, KeyGroup: kg, Key: key, Namespace: ns, Value: []byte(fmt.Sprintf(`{"i":%d}`, i))})
		must(b.ListAppend("list", k, []byte("a"), []byte{0, byte(i)}))
		must(b.ListAppend("list", k, []byte("c")))
		for j, v := range [][]byte{[]byte("a"), {0, byte(i)}, []byte("c")} {
			add(inspect.Entry{State: "list", Kind: backend.KindList, KeyGroup: kg, Key: key, Namespace: ns, Value: v, Index: j})
		}
		for _, uk := range []string{"u1", "u0"} {
			must(b.MapPut("map", k, []byte(uk), []byte(uk+"v")))
		}
		for _, uk := range []string{"u0", "u1"} {
			add(inspect.Entry{State: "map", Kind: backend.KindMap, KeyGroup: kg, Key: key, Namespace: ns, UserKey: []byte(uk), Value: []byte(uk + "v")})
		}
		must(b.AggregateAdd("agg", k, backend.Int64(int64(i))))
		must(b.AggregateAdd("agg", k, backend.Int64(100)))
		add(inspect.Entry{State: "agg", Kind: backend.KindAggregate, KeyGroup: kg, Key: key, Namespace: ns, Number: backend.Int64(int64(i) + 100)})
		tm := backend.Timer{KeyGroup: kg, Key: key, Namespace: ns, Timestamp: int64(i*10 - 5)}
		must(b.RegisterTimer("timers", tm))
		add(inspect.Entry{State: "timers", Kind: backend.KindTimers, KeyGroup: kg, Key: key, Namespace: ns, Timestamp: tm.Timestamp})
	}
	// A value deleted before the checkpoint is not in it.
	gone := backend.Key{KeyGroup: in.KeyGroups.Start, Key: []byte("gone")}
	must(b.Put("val", gone, []byte("x")))
	must(b.Delete("val", gone))
	return want
}

func (e *env) open(t *testing.T, job string, sub int, kind backend.Kind, mode daemon.ChangelogMode) *daemon.Instance {
	t.Helper()
	in, err := e.d.Open(context.Background(), daemon.OpenParams{
		Task:      backend.TaskID{Job: job, Operator: "op", Subtask: sub},
		KeyGroups: backend.KeyGroupRangeForOperator(maxPar, 2, sub), MaxParallelism: maxPar,
		Kind: kind, States: states, Changelog: mode})
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func (e *env) checkpoint(t *testing.T, job string, id uint64, ins ...*daemon.Instance) {
	t.Helper()
	ctx := context.Background()
	for _, in := range ins {
		if _, err := e.d.Snapshot(ctx, in, id, false); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.d.CompleteCheckpoint(ctx, job, id, nil); err != nil {
		t.Fatal(err)
	}
}

// readAll reads every entry of dir as rows, sorted.
func readAll(t *testing.T, s tiered.Store, dir string) ([]string, error) {
	t.Helper()
	r, err := inspect.Open(context.Background(), inspect.Options{Store: s, Dir: dir, TempDir: t.TempDir()})
	if err != nil {
		return nil, err
	}
	var got []string
	err = r.Scan(context.Background(), inspect.MatchAll(), func(e *inspect.Entry) error {
		got = append(got, row(e))
		return nil
	})
	slices.Sort(got)
	return got, err
}

func diff(t *testing.T, what string, got, want []string) {
	t.Helper()
	want = slices.Clone(want)
	slices.Sort(want)
	if slices.Equal(got, want) {
		return
	}
	t.Errorf("%s: %d entries, want %d", what, len(got), len(want))
	for i := 0; i < len(got) || i < len(want); i++ {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			t.Errorf("%s: first difference at %d:\n got %s\nwant %s", what, i, g, w)
			return
		}
	}
}

// listing is every object of the store with its size and a hash of its
// bytes.
func listing(t *testing.T, s tiered.Store) []string {
	t.Helper()
	var out []string
	ctx := context.Background()
	if err := tiered.Walk(ctx, s, "", func(o tiered.ObjectInfo) error {
		// The daemon's shared log keeps writing segments on its own, and
		// a remote-mode instance its lease.
		if strings.HasPrefix(o.Name, "_changelog/") || strings.Contains(o.Name, "/_live.") {
			return nil
		}
		b, err := tiered.ReadAll(ctx, s, o.Name, 1<<30)
		if err != nil {
			return err
		}
		out = append(out, fmt.Sprintf("%s %d %x", o.Name, o.Size, sha256.Sum256(b)))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRoundTrip writes known state of every kind on every backend kind
// through a daemon, takes a checkpoint and a canonical and a native
// savepoint, and reads each back: the entries equal the model, one for
// one, and reading changes nothing in the store. What cannot be read
// offline (a heap checkpoint, changelog mode) is refused with
// ErrUnsupported, and its canonical savepoint is read instead.
func TestRoundTrip(t *testing.T) {
	type tc struct {
		kind   backend.Kind
		mode   daemon.ChangelogMode
		remote bool // lsm remote mode
	}
	for _, c := range []tc{{backend.KindHeap, daemon.ChangelogOff, false}, {backend.KindFile, daemon.ChangelogOff, false},
		{backend.KindLSM, daemon.ChangelogOff, false}, {backend.KindFile, daemon.ChangelogOn, false},
		{backend.KindLSM, daemon.ChangelogOn, false}, {backend.KindHeap, daemon.ChangelogOn, false},
		{backend.KindLSM, daemon.ChangelogOff, true}, {backend.KindLSM, daemon.ChangelogOn, true}} {
		name := string(c.kind)
		if c.remote {
			name += "-remote"
		}
		if c.mode == daemon.ChangelogOn {
			name += "-changelog"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnvWith(t, c.remote)
			job := "j-" + name
			in0, in1 := e.open(t, job, 0, c.kind, c.mode), e.open(t, job, 1, c.kind, c.mode)
			want1 := append(fill(t, in0, 40), fill(t, in1, 30)...)
			e.checkpoint(t, job, 1, in0, in1)
			// A second checkpoint: incremental for lsm, a log window
			// after the base in changelog mode.
			want := append(slices.Clone(want1), append(fillPrefix(t, in0, "x", 20), fillPrefix(t, in1, "x", 10)...)...)
			e.checkpoint(t, job, 2, in0, in1)
			sp, err := e.d.TriggerSavepoint(context.Background(), job, false, 0)
			if err != nil {
				t.Fatal(err)
			}
			before := listing(t, e.store)

			if c.remote {
				r, err := inspect.Open(context.Background(), inspect.Options{Store: e.store, Dir: catalog.CheckpointDir(job, 2)})
				if err != nil {
					t.Fatal(err)
				}
				if h := r.Manifest().Tasks[0]; len(h.Files) == 0 || h.Files[0].Table == nil {
					t.Fatalf("checkpoint 2 in remote mode references no SST in place (%+v): the test reads no remote handle", h.Files)
				}
			}
			if c.mode == daemon.ChangelogOn {
				r, err := inspect.Open(context.Background(), inspect.Options{Store: e.store, Dir: catalog.CheckpointDir(job, 2)})
				if err != nil {
					t.Fatal(err)
				}
				if h := r.Manifest().Tasks[0]; h.Log == nil || h.Log.Bytes == 0 {
					t.Fatalf("checkpoint 2 in changelog mode has no log window (%+v): the test reads no log", h.Log)
				}
			}
			for id, w := range map[uint64][]string{1: want1, 2: want} {
				got, err := readAll(t, e.store, catalog.CheckpointDir(job, id))
				switch {
				case c.kind == backend.KindHeap && c.mode == daemon.ChangelogOff:
					if !errors.Is(err, inspect.ErrUnsupported) || !strings.Contains(err.Error(), "savepoint") {
						t.Errorf("checkpoint %d of %s: %v, want ErrUnsupported saying to take a savepoint", id, name, err)
					}
				case err != nil:
					t.Errorf("checkpoint %d: %v", id, err)
				default:
					diff(t, fmt.Sprintf("checkpoint %d", id), got, w)
				}
			}
			got, err := readAll(t, e.store, sp.Dir)
			if err != nil {
				t.Fatalf("canonical savepoint: %v", err)
			}
			diff(t, "canonical savepoint", got, want)
			{
				nsp, err := e.d.TriggerSavepoint(context.Background(), job, true, 50)
				if err != nil {
					t.Fatal(err)
				}
				before = listing(t, e.store)
				got, err = readAll(t, e.store, nsp.Dir)
				if err != nil {
					t.Fatalf("native savepoint: %v", err)
				}
				diff(t, "native savepoint", got, want)
			}
			if after := listing(t, e.store); !slices.Equal(before, after) {
				t.Errorf("reading changed the store:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
}

// TestBadInput: a checkpoint that does not exist is an error naming what
// is missing, never an empty answer (a damaged file: TestDamagedFile).
func TestBadInput(t *testing.T) {
	e := newEnv(t)
	in := e.open(t, "j", 0, backend.KindFile, daemon.ChangelogOff)
	fill(t, in, 20)
	e.checkpoint(t, "j", 1, in)

	_, err := readAll(t, e.store, catalog.CheckpointDir("j", 7))
	if !errors.Is(err, catalog.ErrNotFound) || !strings.Contains(err.Error(), "j/chk-7/_metadata") {
		t.Errorf("missing checkpoint: %v, want ErrNotFound naming j/chk-7/_metadata", err)
	}
	_, err = readAll(t, e.store, "nojob/chk-1")
	if !errors.Is(err, catalog.ErrNotFound) {
		t.Errorf("unknown job: %v, want ErrNotFound", err)
	}
}

// TestDamagedFile: a damaged data file of a checkpoint of every backend
// format fails a read with the data-loss error (backend.ErrCorrupt)
// "stated verify" reports for it, naming the same file, before any entry
// is shown.
func TestDamagedFile(t *testing.T) {
	for _, c := range []struct {
		name   string
		kind   backend.Kind
		mode   daemon.ChangelogMode
		remote bool
	}{
		{"file", backend.KindFile, daemon.ChangelogOff, false},
		{"lsm", backend.KindLSM, daemon.ChangelogOff, false},
		{"lsm-remote", backend.KindLSM, daemon.ChangelogOff, true},
		{"lsm-changelog", backend.KindLSM, daemon.ChangelogOn, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			e := newEnvWith(t, c.remote)
			in := e.open(t, "j", 0, c.kind, c.mode)
			fill(t, in, 200)
			e.checkpoint(t, "j", 1, in)
			dir := catalog.CheckpointDir("j", 1)
			r, err := inspect.Open(ctx, inspect.Options{Store: e.store, Dir: dir, TempDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			// The largest file: its middle is data, not a footer.
			var f backend.FileRef
			for _, fr := range r.Manifest().Tasks[0].Files {
				if fr.Size > f.Size {
					f = fr
				}
			}
			if f.Path == "" {
				t.Fatal("the checkpoint has no file")
			}
			// A packed file (backend.FileRef.Pack) is damaged inside its pack.
			obj, mid := f.Path, f.Size/2
			if f.Pack != nil {
				obj, mid = f.Pack.Object, f.Pack.Offset+f.Size/2
			}
			data, err := tiered.ReadAll(ctx, e.store, obj, 1<<30)
			if err != nil {
				t.Fatal(err)
			}
			data[mid] ^= 0x40
			if err := tiered.PutBytes(ctx, e.store, obj, data); err != nil {
				t.Fatal(err)
			}
			rep, err := catalog.Verify(ctx, e.store, dir, 0)
			if err != nil || len(rep.Problems) != 1 || rep.Problems[0].Path != f.Path {
				t.Fatalf("verify: %v %+v, want one problem naming %s", err, rep, f.Path)
			}
			n := 0
			err = r.Scan(ctx, inspect.MatchAll(), func(*inspect.Entry) error { n++; return nil })
			if !errors.Is(err, backend.ErrCorrupt) || !strings.Contains(err.Error(), f.Path) || n != 0 {
				t.Errorf("damaged %s: %v (%d entries shown), want ErrCorrupt naming the file and no entry", f.Path, err, n)
			}
		})
	}
}

// TestFilterAndSummary: a filter selects exactly the entries it names,
// and the summary counts what a scan returns.
func TestFilterAndSummary(t *testing.T) {
	e := newEnv(t)
	in0, in1 := e.open(t, "j", 0, backend.KindLSM, daemon.ChangelogOff), e.open(t, "j", 1, backend.KindLSM, daemon.ChangelogOff)
	want := append(fill(t, in0, 25), fill(t, in1, 25)...)
	e.checkpoint(t, "j", 1, in0, in1)
	ctx := context.Background()
	r, err := inspect.Open(ctx, inspect.Options{Store: e.store, Dir: catalog.CheckpointDir("j", 1), TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	kgs := backend.KeyGroupRange{Start: 60, End: 70} // spans both subtasks
	f := inspect.Filter{State: "map", KeyGroups: &kgs, KeyPrefix: []byte("k1-")}
	var got []string
	if err := r.Scan(ctx, f, func(e *inspect.Entry) error { got = append(got, row(e)); return nil }); err != nil {
		t.Fatal(err)
	}
	var exp []string
	for _, w := range want {
		var kg int
		_, _ = fmt.Sscanf(w[strings.Index(w, "kg="):], "kg=%d", &kg)
		if strings.Contains(w, " map ") && kgs.Contains(kg) && strings.Contains(w, `key="k1-`) {
			exp = append(exp, w)
		}
	}
	slices.Sort(got)
	if len(exp) == 0 {
		t.Fatal("the filter's model selects nothing: the test is broken")
	}
	diff(t, "filtered scan", got, exp)

	s, err := r.Summarize(ctx, inspect.MatchAll())
	if err != nil {
		t.Fatal(err)
	}
	if s.Total.Entries != int64(len(want)) || len(s.States) != len(states) {
		t.Errorf("summary: %d entries in %d states, want %d in %d", s.Total.Entries, len(s.States), len(want), len(states))
	}
	var kgSum int64
	for _, g := range s.KeyGroups {
		kgSum += g.Bytes
	}
	if kgSum != s.Total.Bytes || s.Total.Bytes == 0 {
		t.Errorf("key-group bytes %d, total %d", kgSum, s.Total.Bytes)
	}
	if l := s.Largest(3); len(l) != 3 || l[0].Bytes < l[2].Bytes {
		t.Errorf("largest: %v", l)
	}
	one := 1
	s1, err := r.Summarize(ctx, inspect.Filter{Subtask: &one})
	if err != nil {
		t.Fatal(err)
	}
	if want1 := fill1Rows(want, "op/1 "); s1.Total.Entries != int64(want1) || want1 == 0 {
		t.Errorf("summary of subtask 1: %d entries, want %d", s1.Total.Entries, want1)
	}
}

// TestReadWhileCheckpointing: a checkpoint reads back exactly while the
// daemon keeps writing and completing newer checkpoints into the same
// store (it stays retained: the catalog keeps 3).
func TestReadWhileCheckpointing(t *testing.T) {
	e := newEnv(t)
	in0, in1 := e.open(t, "j", 0, backend.KindLSM, daemon.ChangelogOff), e.open(t, "j", 1, backend.KindLSM, daemon.ChangelogOff)
	want := append(fill(t, in0, 60), fill(t, in1, 60)...)
	e.checkpoint(t, "j", 1, in0, in1)
	done := make(chan error, 1)
	go func() {
		ctx := context.Background()
		for id := uint64(2); id <= 3; id++ {
			for i := 0; i < 500; i++ {
				for _, in := range []*daemon.Instance{in0, in1} {
					k := backend.Key{KeyGroup: in.KeyGroups.Start + i%in.KeyGroups.Len(), Key: []byte(fmt.Sprintf("k%d-%d", in.Task.Subtask, i%60))}
					if err := in.Backend.Put("val", k, []byte(fmt.Sprintf("new%d", id))); err != nil {
						done <- err
						return
					}
				}
			}
			for _, in := range []*daemon.Instance{in0, in1} {
				if _, err := e.d.Snapshot(ctx, in, id, false); err != nil {
					done <- err
					return
				}
			}
			if _, err := e.d.CompleteCheckpoint(ctx, "j", id, nil); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for i := 0; i < 3; i++ {
		got, err := readAll(t, e.store, catalog.CheckpointDir("j", 1))
		if err != nil {
			t.Fatalf("read %d of checkpoint 1 while checkpointing: %v", i, err)
		}
		diff(t, fmt.Sprintf("read %d of checkpoint 1 while checkpointing", i), got, want)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// fill1Rows counts the model rows that start with prefix.
func fill1Rows(rows []string, prefix string) int {
	n := 0
	for _, r := range rows {
		if strings.HasPrefix(r, prefix) {
			n++
		}
	}
	return n
}
