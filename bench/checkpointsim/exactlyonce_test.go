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
