package api_test

import (
	"bytes"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/backend"
)

// keysIn returns n keys whose key groups lie in the instance's range.
func keysIn(in *client.Instance, n int) [][]byte {
	var out [][]byte
	for i := 0; len(out) < n; i++ {
		k := []byte(fmt.Sprintf("key-%d", i))
		if in.KeyGroups().Contains(in.KeyGroup(k)) {
			out = append(out, k)
		}
	}
	return out
}

func TestEveryStateKindAndRestore(t *testing.T) {
	for _, kind := range []backend.Kind{backend.KindHeap, backend.KindFile, backend.KindLSM} {
		t.Run(string(kind), func(t *testing.T) {
			ctx := ctxT(t)
			h := startDaemon(t, harnessOpts{})
			c := h.dial(client.Options{})
			tk := task("job1", "op", 1)
			in, err := c.Open(ctx, client.OpenSpec{Task: tk, Parallelism: 2, Backend: kind, States: allStates})
			if err != nil {
				t.Fatal(err)
			}
			if got := in.KeyGroups(); got != backend.KeyGroupRangeForOperator(128, 2, 1) {
				t.Fatalf("key groups %s", got)
			}
			keys := keysIn(in, 20)
			for i, k := range keys {
				in.Put("v", k, nil, []byte(fmt.Sprint("val", i)))
				in.ListAppend("l", k, []byte("ns"), []byte("a"), []byte("b"))
				in.MapPut("m", k, nil, []byte("u1"), []byte("x"))
				in.MapPut("m", k, nil, []byte("u2"), []byte("y"))
				in.AggregateAdd("sum", k, nil, backend.Int64(int64(i)))
				in.AggregateAdd("sum", k, nil, backend.Int64(1))
				in.AggregateAdd("fmax", k, nil, backend.Float64(1.5))
				in.RegisterTimer("t", k, nil, int64(100+i))
			}
			check := func(in *client.Instance, timersLeft int, v0 string) {
				t.Helper()
				for i, k := range keys {
					want := fmt.Sprint("val", i)
					if i == 0 {
						want = v0
					}
					v, err := in.Get("v", k, nil).Wait(ctx)
					if err != nil || !v.Found || string(v.Data) != want {
						t.Fatalf("get %s: %v %+v", k, err, v)
					}
					l, err := in.ListGet("l", k, []byte("ns")).Wait(ctx)
					if err != nil || len(l) != 2 || string(l[0]) != "a" || string(l[1]) != "b" {
						t.Fatalf("list %s: %v %q", k, err, l)
					}
					entries, err := in.MapAll(ctx, "m", k, nil)
					if err != nil || len(entries) != 2 || string(entries[1].UserKey) != "u2" || string(entries[1].Value) != "y" {
						t.Fatalf("map %s: %v %+v", k, err, entries)
					}
					ok, err := in.MapContains("m", k, nil, []byte("u1")).Wait(ctx)
					if err != nil || !ok {
						t.Fatalf("contains: %v %v", ok, err)
					}
					a, err := in.AggregateGet("sum", k, nil).Wait(ctx)
					if err != nil || !a.Found || a.Value.Int != int64(i+1) {
						t.Fatalf("sum %s: %v %+v", k, err, a)
					}
					f, err := in.AggregateGet("fmax", k, nil).Wait(ctx)
					if err != nil || f.Value.Type != backend.NumFloat64 || f.Value.Float != 1.5 {
						t.Fatalf("fmax: %v %+v", err, f)
					}
				}
				tm, err := in.PollTimers("t", 104, 0).Wait(ctx)
				if err != nil || len(tm) != timersLeft {
					t.Fatalf("poll: %v, %d timers, want %d", err, len(tm), timersLeft)
				}
			}
			// Deletes and a page of one.
			in.MapRemove("m", keys[0], nil, []byte("u1"))
			p, err := in.MapIterate("m", keys[0], nil, nil, 1).Wait(ctx)
			if err != nil || len(p.Entries) != 1 || p.More || !bytes.Equal(p.Entries[0].UserKey, []byte("u2")) {
				t.Fatalf("iterate after remove: %v %+v", err, p)
			}
			in.MapPut("m", keys[0], nil, []byte("u1"), []byte("x"))
			if _, err := in.Snapshot(ctx, 1, false); err != nil {
				t.Fatal(err)
			}
			info, err := c.CompleteCheckpoint(ctx, "job1", 1)
			if err != nil {
				t.Fatal(err)
			}
			if info.GetTasks() != 1 || info.GetStatus() != "completed" {
				t.Fatalf("info %+v", info)
			}
			// After the checkpoint: changes that the restore must not see.
			in.Put("v", keys[0], nil, []byte("later"))
			check(in, 5, "later")
			if err := in.Close(ctx); err != nil {
				t.Fatal(err)
			}
			in2, err := c.Open(ctx, client.OpenSpec{Task: tk, Parallelism: 2, Backend: kind, States: allStates,
				Restore: &client.Restore{Latest: true}})
			if err != nil {
				t.Fatal(err)
			}
			if in2.RestoredCheckpoint() != 1 {
				t.Fatalf("restored %d", in2.RestoredCheckpoint())
			}
			check(in2, 5, "val0")
			list, err := c.ListCheckpoints(ctx, "job1")
			if err != nil || len(list) != 1 || list[0].GetCheckpointId() != 1 || !list[0].GetRetained() {
				t.Fatalf("list: %v %+v", err, list)
			}
			if err := in2.Close(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestOperationErrorsDoNotStopTheBatch(t *testing.T) {
	ctx := ctxT(t)
	h := startDaemon(t, harnessOpts{})
	c := h.dial(client.Options{})
	in, err := c.Open(ctx, client.OpenSpec{Task: task("j", "op", 0), Parallelism: 1, Backend: backend.KindHeap, States: allStates})
	if err != nil {
		t.Fatal(err)
	}
	k := []byte("k")
	f1 := in.Put("v", k, nil, []byte("1"))
	f2 := in.Put("nope", k, nil, []byte("1")) // unknown state
	f3 := in.ListGet("v", k, nil)             // wrong kind
	f4 := in.Get("v", k, nil)
	if _, err := f1.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	_, e2 := f2.Wait(ctx)
	_, e3 := f3.Wait(ctx)
	for _, err := range []error{e2, e3} {
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("want InvalidArgument, got %v", err)
		}
	}
	v, err := f4.Wait(ctx)
	if err != nil || string(v.Data) != "1" {
		t.Fatalf("get after failures: %v %+v", err, v)
	}
	if err := in.Err(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Err: %v", err)
	}
	if err := in.Err(); err != nil {
		t.Fatalf("Err not cleared: %v", err)
	}
}

// A canonical savepoint of an lsm job restores into the file backend; a
// native one restores into the same kind.
func TestSavepoints(t *testing.T) {
	ctx := ctxT(t)
	h := startDaemon(t, harnessOpts{})
	c := h.dial(client.Options{})
	tk := task("spjob", "op", 0)
	in, err := c.Open(ctx, client.OpenSpec{Task: tk, Parallelism: 1, Backend: backend.KindLSM, States: allStates})
	if err != nil {
		t.Fatal(err)
	}
	keys := keysIn(in, 10)
	for i, k := range keys {
		in.Put("v", k, nil, []byte(fmt.Sprint(i)))
		in.MapPut("m", k, []byte("ns"), []byte("u"), []byte(fmt.Sprint(i)))
	}
	if err := in.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	canonical, err := c.TriggerSavepoint(ctx, "spjob", false, 0)
	if err != nil {
		t.Fatal(err)
	}
	native, err := c.TriggerSavepoint(ctx, "spjob", true, 7)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TriggerSavepoint(ctx, "spjob", true, 7); err == nil {
		t.Fatal("a native savepoint reused a checkpoint id")
	}
	// A checkpoint after the savepoints is still possible and unaffected.
	if _, err := in.Snapshot(ctx, 8, false); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CompleteCheckpoint(ctx, "spjob", 8); err != nil {
		t.Fatal(err)
	}
	if err := in.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		kind backend.Kind
	}{{canonical, backend.KindFile}, {native, backend.KindLSM}} {
		in, err := c.Open(ctx, client.OpenSpec{Task: tk, Parallelism: 1, Backend: tc.kind, States: allStates,
			Restore: &client.Restore{Savepoint: tc.path}})
		if err != nil {
			t.Fatalf("restore %s into %s: %v", tc.path, tc.kind, err)
		}
		for i, k := range keys {
			v, err := in.Get("v", k, nil).Wait(ctx)
			if err != nil || string(v.Data) != fmt.Sprint(i) {
				t.Fatalf("%s: get %s = %q, %v", tc.path, k, v.Data, err)
			}
			m, err := in.MapGet("m", k, []byte("ns"), []byte("u")).Wait(ctx)
			if err != nil || string(m.Data) != fmt.Sprint(i) {
				t.Fatalf("%s: map %s = %q, %v", tc.path, k, m.Data, err)
			}
		}
		if err := in.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
