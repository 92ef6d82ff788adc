package dstl

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/statedhq/stated/backend"
)

// TestPropertyWriterReader: random appends (single and batched) from
// several writers, random
// persists and truncations. Every Persist's handle reads back exactly the
// writer's records of its window, in order; a key-group filter delivers
// exactly the records of its key groups; segments the Writer releases are
// deleted at once (as if no checkpoint retained them), and no later handle
// ever needs one of them.
func TestPropertyWriterReader(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		ls, _ := memLog()
		flush := rapid.IntRange(64, 4096).Draw(rt, "flushSize")
		w, err := NewWriter(ls, Options{
			FlushSize:           flush,
			PreemptiveFlushSize: rapid.IntRange(32, flush).Draw(rt, "preemptive"),
			FlushDelay:          time.Duration(rapid.IntRange(50, 3000).Draw(rt, "delayMicros")) * time.Microsecond,
			BlockSize:           rapid.IntRange(1, 512).Draw(rt, "blockSize"),
			DisableCompression:  rapid.Bool().Draw(rt, "plain"),
			UploadConcurrency:   rapid.IntRange(1, 4).Draw(rt, "uploads"),
		})
		if err != nil {
			rt.Fatal(err)
		}
		defer w.Close()
		ids := []string{"j/a/0", "j/a/1", "j/a/2", "j/b/0", "j/b/1", "k/a/0"}
		model := map[string][]appended{}
		truncated := map[string]uint64{}
		deleted := map[string]bool{}
		check := func(id string, h Handle) {
			last := uint64(len(model[id]))
			if h.From != truncated[id]+1 || h.To > last {
				rt.Fatalf("%s: window %d..%d, truncated %d, last %d", id, h.From, h.To, truncated[id], last)
			}
			for _, s := range h.Segments() {
				if deleted[s] {
					rt.Fatalf("%s: handle references released segment %s", id, s)
				}
			}
			var kr *backend.KeyGroupRange
			if rapid.Bool().Draw(rt, "filter") {
				a := rapid.IntRange(0, 15).Draw(rt, "kgStart")
				kr = &backend.KeyGroupRange{Start: a, End: rapid.IntRange(a, 15).Draw(rt, "kgEnd")}
			}
			dropUnkeyed := rapid.Bool().Draw(rt, "dropUnkeyed")
			got, err := readAll(ls, h, ReadOptions{KeyGroups: kr, DropUnkeyed: dropUnkeyed})
			if err != nil {
				rt.Fatalf("%s: read %+v: %v", id, h, err)
			}
			var want []appended
			if !h.Empty() {
				for _, a := range model[id][h.From-1 : h.To] {
					if a.kg == NoKeyGroup && dropUnkeyed || a.kg != NoKeyGroup && kr != nil && !kr.Contains(a.kg) {
						continue
					}
					want = append(want, a)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				rt.Fatalf("%s: window %d..%d filter %v/%v read\n %v\nwant %v", id, h.From, h.To, kr, dropUnkeyed, got, want)
			}
		}
		release := func(rt *rapid.T) {
			rel := w.TakeReleased()
			if len(rel) > 0 {
				if err := ls.Delete(ctx, rel...); err != nil {
					rt.Fatal(err)
				}
			}
			for _, s := range rel {
				if deleted[s] {
					rt.Fatalf("segment %s released twice", s)
				}
				deleted[s] = true
			}
		}
		rt.Repeat(map[string]func(*rapid.T){
			"append": func(rt *rapid.T) {
				id := rapid.SampledFrom(ids).Draw(rt, "id")
				kg := rapid.IntRange(NoKeyGroup, 15).Draw(rt, "kg")
				ch := rapid.SliceOfN(rapid.Byte(), 0, 200).Draw(rt, "change")
				seq, err := w.Append(ctx, id, kg, ch)
				if err != nil {
					rt.Fatal(err)
				}
				model[id] = append(model[id], appended{seq, kg, string(ch)})
				if seq != uint64(len(model[id])) {
					rt.Fatalf("%s: seq %d for change %d", id, seq, len(model[id]))
				}
			},
			"appendBatch": func(rt *rapid.T) {
				// A batch is the same as an Append of each entry in turn.
				id := rapid.SampledFrom(ids).Draw(rt, "id")
				n := rapid.IntRange(0, 20).Draw(rt, "entries")
				ents := make([]Entry, n)
				for i := range ents {
					ents[i] = Entry{KeyGroup: rapid.IntRange(NoKeyGroup, 15).Draw(rt, "kg"),
						Change: rapid.SliceOfN(rapid.Byte(), 0, 200).Draw(rt, "change")}
				}
				last, added, err := w.AppendBatch(ctx, id, ents)
				if err != nil || added != n {
					rt.Fatalf("%s: batch of %d: added %d, %v", id, n, added, err)
				}
				for _, e := range ents {
					model[id] = append(model[id], appended{uint64(len(model[id]) + 1), e.KeyGroup, string(e.Change)})
				}
				if n > 0 && last != uint64(len(model[id])) {
					rt.Fatalf("%s: batch's last seq %d, want %d", id, last, len(model[id]))
				}
				// The Writer copied the changes: the caller may reuse them.
				for _, e := range ents {
					clear(e.Change)
				}
			},
			"persist": func(rt *rapid.T) {
				id := rapid.SampledFrom(ids).Draw(rt, "id")
				upto := rapid.Uint64Range(0, uint64(len(model[id]))+2).Draw(rt, "upto")
				if rapid.Bool().Draw(rt, "all") {
					upto = math.MaxUint64
				}
				h, err := w.Persist(ctx, id, upto)
				if err != nil {
					rt.Fatal(err)
				}
				if want := min(upto, uint64(len(model[id]))); !h.Empty() && h.To != want || h.Empty() && want > truncated[id] {
					rt.Fatalf("%s: persist up to %d gave window %d..%d", id, upto, h.From, h.To)
				}
				check(id, h)
			},
			"truncate": func(rt *rapid.T) {
				id := rapid.SampledFrom(ids).Draw(rt, "id")
				upto := rapid.Uint64Range(0, uint64(len(model[id]))).Draw(rt, "upto")
				w.Truncate(id, upto)
				truncated[id] = max(truncated[id], upto)
				release(rt)
			},
			"forget": func(rt *rapid.T) {
				// the instance is gone; a new one may reuse the id
				id := rapid.SampledFrom(ids).Draw(rt, "id")
				w.Forget(id)
				delete(model, id)
				delete(truncated, id)
				release(rt)
			},
		})
		for _, id := range ids {
			h, err := w.Persist(ctx, id, math.MaxUint64)
			if err != nil {
				rt.Fatal(err)
			}
			check(id, h)
		}
		// Changes already truncated need no Persist; they still leave
		// memory after FlushDelay.
		for deadline := time.Now().Add(10 * time.Second); w.Metrics().BytesInFlight != 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				rt.Fatalf("%d bytes still in flight", w.Metrics().BytesInFlight)
			}
		}
	})
}
