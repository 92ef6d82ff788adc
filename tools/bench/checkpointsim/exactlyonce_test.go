package checkpointsim

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"
)

// boundedOptions is a job small enough for tests: bounded input, heap
// state, checkpoints until the input ends.
func boundedOptions(t *testing.T) Options {
	o := Options{Dir: t.TempDir(), Backend: "heap", Records: 12_000, Checkpoints: 1000,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	o.EnsureDefaults()
	return o
}

func checkExactlyOnce(t *testing.T, mode Mode, killAt time.Duration, rescaleTo int) {
	t.Helper()
	o := boundedOptions(t)
	res, err := ExactlyOnce(context.Background(), o, mode, killAt, rescaleTo)
	if err != nil {
		t.Fatal(err)
	}
	// The reference itself counted every record once.
	var total int64
	for r, n := range res.Reference {
		total += r.Count * int64(n)
	}
	if want := int64(o.Parallelism) * o.Records; total != want {
		t.Fatalf("reference output counts %d records, want %d", total, want)
	}
	if mode == ModeUnaligned && (!res.RestoredUnaligned || res.RestoredInFlight == 0) {
		t.Fatalf("restored checkpoint %d: unaligned %v with %d in-flight records; want unaligned with channel state",
			res.RestoredFrom, res.RestoredUnaligned, res.RestoredInFlight)
	}
	if d := res.Differences(); d != 0 {
		t.Errorf("Differences() = %d", d)
	}
	diff := 0
	for r, n := range res.Reference {
		if res.Restored[r] != n {
			if diff < 5 {
				t.Errorf("%+v: %d times after the restore, %d without failure", r, res.Restored[r], n)
			}
			diff++
		}
	}
	for r, n := range res.Restored {
		if _, ok := res.Reference[r]; !ok {
			if diff < 5 {
				t.Errorf("%+v: %d times after the restore, never without failure", r, n)
			}
			diff++
		}
	}
	if diff > 0 {
		t.Fatalf("%d results differ (restored from checkpoint %d)", diff, res.RestoredFrom)
	}
	t.Logf("restored from checkpoint %d (unaligned %v, %d in-flight records); %d results equal", res.RestoredFrom, res.RestoredUnaligned, res.RestoredInFlight, len(res.Reference))
}

func TestExactlyOnceUnaligned(t *testing.T) {
	checkExactlyOnce(t, ModeUnaligned, 4300*time.Millisecond, 0)
}

func TestExactlyOnceUnalignedRescale(t *testing.T) {
	checkExactlyOnce(t, ModeUnaligned, 4300*time.Millisecond, 3)
}

func TestExactlyOnceAlignedTimeout(t *testing.T) {
	checkExactlyOnce(t, ModeAlignedTimeout, 6700*time.Millisecond, 3)
}

// TestExactlyOnceKillBeforeNotify kills the job after a checkpoint
// completed and before its sinks heard of it: the restore must commit the
// transactions that checkpoint pre-committed, once.
func TestExactlyOnceKillBeforeNotify(t *testing.T) {
	o := boundedOptions(t)
	ctx := context.Background()
	ref, err := ExactlyOnce(ctx, o, ModeUnaligned, 2500*time.Millisecond, 0)
	if err != nil {
		t.Fatal(err)
	}
	s, err := openSession(ctx, &o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	out := newExternal()
	j, err := startJob(ctx, s.c, daemonChannels{}, out, o, jobSpec{name: "notify", mode: ModeUnaligned, windowPar: o.Parallelism})
	if err != nil {
		t.Fatal(err)
	}
	for j.completed < 3 && j.err == nil && j.clk.next(inf) {
	}
	if j.err != nil || j.completed != 3 {
		t.Fatalf("%d checkpoints completed: %v", j.completed, j.err)
	}
	committed := 0
	for _, x := range out.txns {
		if x.committed {
			committed++
		}
	}
	if committed != 2*len(j.sinks) {
		t.Fatalf("%d transactions committed before the notification of checkpoint 3, want those of checkpoints 1 and 2", committed)
	}
	next := j.nextID
	j.abandon()
	j, err = startJob(ctx, s.c, daemonChannels{}, out, o, jobSpec{name: "notify", mode: ModeUnaligned, windowPar: o.Parallelism, restore: 3, firstID: next})
	if err != nil {
		t.Fatal(err)
	}
	if err := finish(j, &o); err != nil {
		t.Fatal(err)
	}
	got := out.committed()
	if len(got) != len(ref.Reference) {
		t.Fatalf("%d distinct results after the restore, %d without failure", len(got), len(ref.Reference))
	}
	for r, n := range ref.Reference {
		if got[r] != n {
			t.Fatalf("%+v: %d times after the restore, %d without failure", r, got[r], n)
		}
	}
}

func TestDifferences(t *testing.T) {
	a, b, c := Result{Window: 1, Key: 2, Count: 3}, Result{Window: 1, Key: 3, Count: 1}, Result{Window: 2, Key: 2, Count: 1}
	r := &ExactlyOnceResult{Reference: map[Result]int{a: 1, b: 1}, Restored: map[Result]int{a: 2, c: 1}}
	if d := r.Differences(); d != 3 { // a twice, b lost, c new
		t.Fatalf("Differences() = %d, want 3", d)
	}
	r.Restored = map[Result]int{a: 1, b: 1}
	if d := r.Differences(); d != 0 {
		t.Fatalf("Differences() = %d, want 0", d)
	}
}
