package dstl

import (
	"context"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestHeldFromBoundsHolds: under random appends, persists, truncations
// and forgets, HeldFrom never decreases, every segment the Writer holds
// has a counter at or above it, and every durable segment below it is
// released — what a catalog of another node relies on when it treats a
// run's segments from HeldFrom on as held and the others as free.
func TestHeldFromBoundsHolds(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		ls, _ := memLog()
		w := newTestWriter(t, ls, Options{RunID: "r", FlushDelay: time.Hour})
		ids := []string{"a", "b", "c"}
		seen := map[string]bool{}
		released := map[string]bool{}
		last := w.HeldFrom()
		for range rapid.IntRange(1, 40).Draw(rt, "steps") {
			id := rapid.SampledFrom(ids).Draw(rt, "id")
			switch rapid.IntRange(0, 3).Draw(rt, "op") {
			case 0:
				if _, err := w.Append(ctx, id, 0, []byte("x")); err != nil {
					rt.Fatal(err)
				}
			case 1:
				h, err := w.Persist(ctx, id, w.LastSeq(id))
				if err != nil {
					rt.Fatal(err)
				}
				for _, s := range h.Segments() {
					seen[s] = true
				}
			case 2:
				w.Truncate(id, rapid.Uint64Range(0, w.LastSeq(id)).Draw(rt, "upto"))
			case 3:
				w.Forget(id)
			}
			for _, r := range w.TakeReleased() {
				released[r] = true
			}
			low := w.HeldFrom()
			if low < last {
				rt.Fatalf("HeldFrom went back from %d to %d", last, low)
			}
			last = low
			for s := range seen {
				run, counter, ok := ParseSegmentName(DefaultPrefix, s)
				if !ok || run != "r" {
					rt.Fatalf("segment %s does not parse (%q, %v)", s, run, ok)
				}
				if w.Holds(s) && counter < low {
					rt.Fatalf("%s is held but below HeldFrom %d", s, low)
				}
				if counter < low && !released[s] {
					rt.Fatalf("%s is below HeldFrom %d but was never released", s, low)
				}
			}
		}
	})
}

func TestParseSegmentName(t *testing.T) {
	for _, c := range []struct {
		name    string
		run     string
		counter uint64
		ok      bool
	}{
		{DefaultPrefix + "/run1/0000000000000001-0", "run1", 1, true},
		{DefaultPrefix + "/ab/00000000000000ff-12", "ab", 255, true},
		{DefaultPrefix + "/ab/00000000000000ff", "", 0, false},
		{DefaultPrefix + "/ab/00000000000000fg-0", "", 0, false},
		{DefaultPrefix + "/ab/0f-0", "", 0, false},
		{DefaultPrefix + "//0000000000000001-0", "", 0, false},
		{DefaultPrefix + "/ab/0000000000000001-x", "", 0, false},
		{"other/ab/0000000000000001-0", "", 0, false},
		{DefaultPrefix + "/ab/cd/0000000000000001-0", "", 0, false},
	} {
		run, counter, ok := ParseSegmentName(DefaultPrefix, c.name)
		if fmt.Sprint(run, counter, ok) != fmt.Sprint(c.run, c.counter, c.ok) {
			t.Errorf("%s: %q %d %v, want %q %d %v", c.name, run, counter, ok, c.run, c.counter, c.ok)
		}
	}
}
