package api_test

import (
	"bytes"
	"reflect"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/backend"
)

func strs(l backend.OperatorList) []string {
	var out []string
	for _, e := range l.Elements {
		out = append(out, string(e))
	}
	return out
}

func getList(t *testing.T, in *client.Instance, name string) backend.OperatorList {
	t.Helper()
	l, err := in.GetOperatorList(name).Wait(ctxT(t))
	if err != nil {
		t.Fatalf("get operator list %q of %s: %v", name, in.Task(), err)
	}
	return l
}

// TestOperatorState: named operator lists through the batch stream, into
// the checkpoint's _metadata, and back on restore at the same parallelism
// (own split lists, union lists of every subtask), for every backend kind;
// savepoints carry them too.
func TestOperatorState(t *testing.T) {
	for _, kind := range []backend.Kind{backend.KindHeap, backend.KindFile, backend.KindLSM} {
		t.Run(string(kind), func(t *testing.T) {
			ctx := ctxT(t)
			h := startDaemon(t, harnessOpts{})
			c := h.dial(client.Options{})
			var ins []*client.Instance
			for sub := 0; sub < 2; sub++ {
				in, err := c.Open(ctx, client.OpenSpec{Task: task("ops", "src", sub), Parallelism: 2, Backend: kind, States: allStates})
				if err != nil {
					t.Fatal(err)
				}
				ins = append(ins, in)
			}
			a, b := ins[0], ins[1]
			// Empty to start with.
			if l := getList(t, a, "offsets"); l.Mode != "" || len(l.Elements) != 0 {
				t.Fatalf("fresh list %+v", l)
			}
			a.AppendOperatorList("offsets", "", []byte("p0:1"))
			a.AppendOperatorList("offsets", backend.OperatorSplit, []byte("p1:7"), []byte("p2:9"))
			b.SetOperatorList("offsets", backend.OperatorSplit, []byte("p3:4"))
			a.SetOperatorList("schema", backend.OperatorUnion, []byte("v1"))
			b.SetOperatorList("schema", backend.OperatorUnion, []byte("v2"))
			a.SetOperatorList("gone", "", []byte("x"))
			a.SetOperatorList("gone", "") // no values: removed
			if l := getList(t, a, "offsets"); l.Mode != backend.OperatorSplit || !reflect.DeepEqual(strs(l), []string{"p0:1", "p1:7", "p2:9"}) {
				t.Fatalf("offsets of a: %+v", l)
			}
			if l := getList(t, a, "gone"); l.Mode != "" || len(l.Elements) != 0 {
				t.Fatalf("removed list: %+v", l)
			}
			// Errors: a mode change by append, a bad name, too much state.
			if _, err := a.AppendOperatorList("schema", backend.OperatorSplit, []byte("x")).Wait(ctx); status.Code(err) != codes.InvalidArgument {
				t.Fatalf("append changing the mode: %v", err)
			}
			if _, err := a.SetOperatorList("", "", []byte("x")).Wait(ctx); status.Code(err) != codes.InvalidArgument {
				t.Fatalf("empty name: %v", err)
			}
			if _, err := a.AppendOperatorList("l", "bogus", []byte("x")).Wait(ctx); status.Code(err) != codes.InvalidArgument {
				t.Fatalf("bad mode: %v", err)
			}
			big := bytes.Repeat([]byte{1}, 1<<20)
			var err error
			for i := 0; i < 5 && err == nil; i++ {
				_, err = a.AppendOperatorList("big", "", big).Wait(ctx)
			}
			if status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("operator state past %d bytes: %v", backend.MaxOperatorStateBytes, err)
			}
			a.SetOperatorList("big", "") // free it again
			// A set replaces, with the list's mode when none is given.
			b.SetOperatorList("schema", "", []byte("v2"), []byte("v2b"))
			if l := getList(t, b, "schema"); l.Mode != backend.OperatorUnion || len(l.Elements) != 2 {
				t.Fatalf("schema of b: %+v", l)
			}
			for _, in := range ins {
				if _, err := in.Snapshot(ctx, 1, false); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := c.CompleteCheckpoint(ctx, "ops", 1); err != nil {
				t.Fatal(err)
			}
			// After the checkpoint: not in it.
			a.AppendOperatorList("offsets", "", []byte("later"))
			if _, err := a.Snapshot(ctx, 2, false); err != nil { // flushes
				t.Fatal(err)
			}
			if err := c.AbortCheckpoint(ctx, "ops", 2, "aborted: test"); err != nil {
				t.Fatal(err)
			}
			m, ok := h.cat.Checkpoint("ops", 1)
			if !ok || len(m.Tasks) != 2 {
				t.Fatal("checkpoint 1 not retained")
			}
			want0 := []backend.OperatorList{
				{Name: "offsets", Mode: backend.OperatorSplit, Elements: [][]byte{[]byte("p0:1"), []byte("p1:7"), []byte("p2:9")}},
				{Name: "schema", Mode: backend.OperatorUnion, Elements: [][]byte{[]byte("v1")}},
			}
			if got := m.Tasks[0].OperatorState; !reflect.DeepEqual(got, want0) {
				t.Fatalf("_metadata operator state of %s: %+v", m.Tasks[0].Task, got)
			}
			// Restore both at parallelism 2.
			restored := map[int]*client.Instance{}
			for sub, in := range ins {
				in.Abandon()
				r, err := c.Open(ctx, client.OpenSpec{Task: task("ops", "src", sub), Parallelism: 2, Backend: kind, States: allStates,
					Restore: &client.Restore{Latest: true}, Replace: true})
				if err != nil {
					t.Fatal(err)
				}
				restored[sub] = r
			}
			if l := getList(t, restored[0], "offsets"); !reflect.DeepEqual(strs(l), []string{"p0:1", "p1:7", "p2:9"}) {
				t.Fatalf("restored offsets of subtask 0: %v", strs(l))
			}
			if l := getList(t, restored[1], "offsets"); !reflect.DeepEqual(strs(l), []string{"p3:4"}) {
				t.Fatalf("restored offsets of subtask 1: %v", strs(l))
			}
			for sub, in := range restored {
				l := getList(t, in, "schema")
				if l.Mode != backend.OperatorUnion || !reflect.DeepEqual(strs(l), []string{"v1", "v2", "v2b"}) {
					t.Fatalf("restored union list of subtask %d: %+v", sub, strs(l))
				}
			}
			// Savepoints carry the operator state: canonical (into another
			// backend kind) and native.
			other := backend.KindFile
			if kind == backend.KindFile {
				other = backend.KindLSM
			}
			for i, native := range []bool{false, true} {
				path, err := c.TriggerSavepoint(ctx, "ops", native, uint64(10+i))
				if err != nil {
					t.Fatal(err)
				}
				into := other
				if native {
					into = kind
				}
				sp, err := c.Open(ctx, client.OpenSpec{Task: task("ops2", "src", 1), Parallelism: 2, Backend: into, States: allStates,
					Restore: &client.Restore{Savepoint: path}, Replace: true})
				if err != nil {
					t.Fatalf("restore %s: %v", path, err)
				}
				if l := getList(t, sp, "offsets"); !reflect.DeepEqual(strs(l), []string{"p3:4"}) {
					t.Fatalf("offsets restored from %s: %v", path, strs(l))
				}
				// Both restored subtasks held all three union elements, so
				// the union of theirs has each twice (as in Flink, a task
				// rewrites its union lists after a restore if it wants them
				// deduplicated).
				if l := getList(t, sp, "schema"); len(l.Elements) != 6 {
					t.Fatalf("union list restored from %s: %v", path, strs(l))
				}
				sp.Abandon()
			}
		})
	}
}
