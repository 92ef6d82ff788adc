package chanstate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

func out(gate, index int32) backend.ChannelID {
	return backend.ChannelID{Direction: backend.ChannelOutput, Gate: gate, Index: index}
}

// oldTask is what one old subtask wrote: per channel, its buffers in order.
type oldTask struct {
	h       *backend.Handle
	buffers map[backend.ChannelID][][]Record
}

// writeTasks writes the channel state of every old subtask through one
// Writer (appending each channel in pieces, tasks interleaved, as
// concurrent tasks would) and returns the sealed handles.
func writeTasks(t testing.TB, store tiered.Store, maxBytes int64, maxP int, state []map[backend.ChannelID][][]Record, kinds map[backend.ChannelID]backend.ChannelKind, pieces int) []oldTask {
	w, err := NewWriter(WriterOptions{Store: store, Dir: "j/chk-1", Name: "channels-x", MaxObjectBytes: maxBytes, SpoolDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	tasks := make([]oldTask, len(state))
	for i := range state {
		tasks[i] = oldTask{
			h: &backend.Handle{
				Version: backend.HandleFormatVersion, Backend: backend.KindHeap, Task: task(i),
				CheckpointID: 1, KeyGroups: backend.KeyGroupRangeForOperator(maxP, len(state), i), MaxParallelism: maxP,
			},
			buffers: state[i],
		}
	}
	for p := range pieces {
		for i, st := range state {
			ids := slices.SortedFunc(func(yield func(backend.ChannelID) bool) {
				for id := range st {
					if !yield(id) {
						return
					}
				}
			}, backend.ChannelID.Compare)
			for ci, id := range ids {
				bufs := st[id]
				lo, hi := len(bufs)*p/pieces, len(bufs)*(p+1)/pieces
				if p > 0 && lo == hi {
					continue
				}
				s, err := w.Append(context.Background(), task(i), id, kinds[id], bufs[lo:hi])
				if err != nil {
					t.Fatal(err)
				}
				h := tasks[i].h
				if p == 0 {
					h.Channels = append(h.Channels, backend.ChannelState{Channel: id, Kind: kinds[id]})
				}
				AddSegment(&h.Channels[ci], s, bufs[lo:hi])
			}
		}
	}
	if err := w.Seal(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, tk := range tasks {
		if err := tk.h.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	return tasks
}

// readRestored returns every restored channel's buffers.
func readRestored(t testing.TB, r *Restored) map[backend.ChannelID][][]Record {
	got := map[backend.ChannelID][][]Record{}
	for i, c := range r.Channels() {
		var bufs [][]Record
		if err := r.Read(i, func(b []Record) error { bufs = append(bufs, b); return nil }); err != nil {
			t.Fatal(err)
		}
		nb, nr, nbytes := Counts(bufs)
		if nb != c.Buffers || nr != c.Records || nbytes != c.Bytes {
			t.Fatalf("channel %s: counts %+v, read %d/%d/%d", c.Channel, c, nb, nr, nbytes)
		}
		if i > 0 && r.Channels()[i-1].Channel.Compare(c.Channel) >= 0 {
			t.Fatalf("channels not sorted: %v", r.Channels())
		}
		got[c.Channel] = bufs
	}
	return got
}

func TestRestoreRescaleProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		maxP := rapid.IntRange(1, 40).Draw(rt, "maxParallelism")
		oldP := rapid.IntRange(1, min(5, maxP)).Draw(rt, "oldParallelism")
		newP := rapid.IntRange(1, min(5, maxP)).Draw(rt, "newParallelism")
		allIDs := []backend.ChannelID{in(0, 0), in(0, 1), in(1, 0), out(0, 0), out(0, 2)}
		kinds := map[backend.ChannelID]backend.ChannelKind{}
		for _, id := range allIDs {
			kinds[id] = backend.ChannelKeyed
		}
		seq := 0
		state := make([]map[backend.ChannelID][][]Record, oldP)
		for i := range state {
			state[i] = map[backend.ChannelID][][]Record{}
			for _, id := range allIDs {
				if !rapid.Bool().Draw(rt, "has") {
					continue
				}
				bufs := rapid.SliceOfN(rapid.Custom(func(rt *rapid.T) []Record {
					return rapid.SliceOfN(rapid.Custom(func(rt *rapid.T) Record {
						seq++ // unique payloads make "exactly once" checkable
						return Record{KeyGroup: int32(rapid.IntRange(0, maxP-1).Draw(rt, "kg")), Data: fmt.Appendf(nil, "r%d", seq)}
					}), 0, 5).Draw(rt, "buffer")
				}), 0, 5).Draw(rt, "buffers")
				state[i][id] = bufs
			}
		}
		store := memstore.New()
		maxBytes := rapid.SampledFrom([]int64{0, 40, 200}).Draw(rt, "maxObjectBytes")
		pieces := rapid.IntRange(1, 3).Draw(rt, "pieces")
		tasks := writeTasks(t, store, maxBytes, maxP, state, kinds, pieces)
		handles := make([]*backend.Handle, len(tasks))
		for i := range tasks {
			handles[i] = tasks[i].h
		}

		// Not rescaled: every old subtask gets exactly what it wrote.
		for i, tk := range tasks {
			r, err := Restore(context.Background(), RestoreOptions{Store: store, Sources: handles[i : i+1], MaxParallelism: maxP, SpoolDir: t.TempDir()})
			if err != nil {
				rt.Fatal(err)
			}
			got := readRestored(t, r)
			_ = r.Close()
			if len(got) != len(tk.buffers) {
				rt.Fatalf("subtask %d: %d channels back, wrote %d", i, len(got), len(tk.buffers))
			}
			for id, want := range tk.buffers {
				if !equalBuffers(got[id], want) {
					rt.Fatalf("subtask %d channel %s: got %v, wrote %v", i, id, got[id], want)
				}
			}
		}

		// Rescaled: sources in shuffled order; each new subtask gets, per
		// channel, the old subtasks' records in its range, in subtask order.
		shuffled := slices.Clone(handles)
		rand.New(rand.NewPCG(uint64(maxP), uint64(oldP))).Shuffle(len(shuffled), func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
		seen := map[string]int{}
		for j := range newP {
			kg := backend.KeyGroupRangeForOperator(maxP, newP, j)
			if kg.Empty() {
				continue
			}
			r, err := Restore(context.Background(), RestoreOptions{Store: store, Sources: shuffled, KeyGroups: kg, MaxParallelism: maxP, Rescaled: true, SpoolDir: t.TempDir()})
			if err != nil {
				rt.Fatal(err)
			}
			got := readRestored(t, r)
			_ = r.Close()
			want := map[backend.ChannelID][][]Record{}
			for _, tk := range tasks {
				for id, bufs := range tk.buffers {
					for _, b := range bufs {
						var kept []Record
						for _, rec := range b {
							if kg.Contains(int(rec.KeyGroup)) {
								kept = append(kept, rec)
							}
						}
						if len(kept) > 0 {
							want[id] = append(want[id], kept)
						}
					}
				}
			}
			if len(got) != len(want) {
				rt.Fatalf("new subtask %d %s: channels %v, want %v", j, kg, got, want)
			}
			for id, w := range want {
				if !equalBuffers(got[id], w) {
					rt.Fatalf("new subtask %d %s channel %s: got %v, want %v", j, kg, id, got[id], w)
				}
			}
			for _, bufs := range got {
				for _, b := range bufs {
					for _, rec := range b {
						seen[string(rec.Data)]++
					}
				}
			}
		}
		// The union over new subtasks is what was written, each once.
		total := 0
		for _, tk := range tasks {
			for _, bufs := range tk.buffers {
				for _, b := range bufs {
					for _, rec := range b {
						total++
						if seen[string(rec.Data)] != 1 {
							rt.Fatalf("record %s (key group %d) restored %d times", rec.Data, rec.KeyGroup, seen[string(rec.Data)])
						}
					}
				}
			}
		}
		if len(seen) != total {
			rt.Fatalf("%d distinct records restored, %d written", len(seen), total)
		}
	})
}

func TestRestoreRefusesForwardAndBroadcast(t *testing.T) {
	for _, kind := range []backend.ChannelKind{backend.ChannelForward, backend.ChannelBroadcast} {
		t.Run(string(kind), func(t *testing.T) {
			store := memstore.New()
			kinds := map[backend.ChannelID]backend.ChannelKind{in(0, 0): backend.ChannelKeyed, in(1, 3): kind}
			state := []map[backend.ChannelID][][]Record{
				{in(0, 0): {{{KeyGroup: 1, Data: []byte("k")}}}},
				{in(0, 0): {{{KeyGroup: 5, Data: []byte("k")}}}, in(1, 3): {{{Data: []byte("f")}}}},
			}
			tasks := writeTasks(t, store, 0, 8, state, kinds, 1)
			hs := []*backend.Handle{tasks[0].h, tasks[1].h}
			_, err := Restore(context.Background(), RestoreOptions{Store: store, Sources: hs, KeyGroups: backend.KeyGroupRange{Start: 0, End: 7}, MaxParallelism: 8, Rescaled: true})
			if !errors.Is(err, ErrNotRedistributable) || !strings.Contains(err.Error(), "op") ||
				!strings.Contains(err.Error(), "input 1/3") || !strings.Contains(err.Error(), string(kind)) {
				t.Fatalf("rescale with %s data: %v, want ErrNotRedistributable naming the task, channel and kind", kind, err)
			}
			// Without a rescale the same state restores as it was.
			r, err := Restore(context.Background(), RestoreOptions{Store: store, Sources: hs[1:], MaxParallelism: 8})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			got := readRestored(t, r)
			if !equalBuffers(got[in(1, 3)], state[1][in(1, 3)]) || r.Channels()[1].Kind != kind {
				t.Fatalf("not rescaled: %v", got)
			}
			// An empty forward/broadcast channel does not block a rescale.
			hs[1].Channels[1].Segments, hs[1].Channels[1].Buffers, hs[1].Channels[1].Records, hs[1].Channels[1].Bytes = nil, 0, 0, 0
			r2, err := Restore(context.Background(), RestoreOptions{Store: store, Sources: hs, KeyGroups: backend.KeyGroupRange{Start: 0, End: 7}, MaxParallelism: 8, Rescaled: true})
			if err != nil {
				t.Fatal(err)
			}
			defer r2.Close()
			if cs := r2.Channels(); len(cs) != 1 || cs[0].Channel != in(0, 0) || cs[0].Records != 2 {
				t.Fatalf("channels %+v", cs)
			}
		})
	}
}

func TestRestoreDetectsEveryFlippedByte(t *testing.T) {
	store, data, css := writeSmall(t)
	h := &backend.Handle{Version: backend.HandleFormatVersion, Backend: backend.KindHeap, Task: task(0),
		KeyGroups: backend.KeyGroupRange{Start: 0, End: 7}, MaxParallelism: 8, Channels: css}
	name := css[0].Segments[0].Path
	o := RestoreOptions{Store: store, Sources: []*backend.Handle{h}, MaxParallelism: 8, SpoolDir: t.TempDir()}
	r, err := Restore(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Close()
	for _, rescaled := range []bool{false, true} {
		o.Rescaled, o.KeyGroups = rescaled, backend.KeyGroupRange{Start: 0, End: 7}
		for i := range data {
			bad := bytes.Clone(data)
			bad[i] ^= 0x01
			if err := store.Put(context.Background(), name, bytes.NewReader(bad), int64(len(bad))); err != nil {
				t.Fatal(err)
			}
			r, err := Restore(context.Background(), o)
			if !errors.Is(err, backend.ErrCorrupt) || !strings.Contains(err.Error(), name) {
				t.Fatalf("rescaled %v, byte %d flipped: %v, want ErrCorrupt naming %s", rescaled, i, err, name)
			}
			if r != nil {
				t.Fatal("a result with an error")
			}
		}
	}
	if ents, _ := os.ReadDir(o.SpoolDir); len(ents) != 0 {
		t.Fatalf("failed restores left spool files: %v", ents)
	}
	// Missing object.
	if err := store.Delete(context.Background(), name); err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(context.Background(), o); !errors.Is(err, backend.ErrCorrupt) || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("missing object: %v", err)
	}
}

func TestRestoreChecksHandleCounts(t *testing.T) {
	store, _, css := writeSmall(t)
	for _, edit := range []func(*backend.ChannelState){
		func(c *backend.ChannelState) { c.Records++ },
		func(c *backend.ChannelState) { c.Buffers-- },
		func(c *backend.ChannelState) { c.Bytes++ },
		func(c *backend.ChannelState) { c.Segments = c.Segments[:1] }, // a lost segment
	} {
		cs := slices.Clone(css)
		cs[1].Segments = slices.Clone(cs[1].Segments)
		edit(&cs[1])
		h := &backend.Handle{Version: backend.HandleFormatVersion, Backend: backend.KindHeap, Task: task(0),
			KeyGroups: backend.KeyGroupRange{Start: 0, End: 7}, MaxParallelism: 8, Channels: cs}
		_, err := Restore(context.Background(), RestoreOptions{Store: store, Sources: []*backend.Handle{h}, MaxParallelism: 8})
		if !errors.Is(err, backend.ErrCorrupt) || !strings.Contains(err.Error(), "handle counts") {
			t.Fatalf("counts off: %v", err)
		}
	}
}

func TestRestoreRefusesBadOptions(t *testing.T) {
	store := memstore.New()
	h := func(maxP int) *backend.Handle {
		return &backend.Handle{Version: backend.HandleFormatVersion, Backend: backend.KindHeap, Task: task(0),
			KeyGroups: backend.KeyGroupRange{Start: 0, End: maxP - 1}, MaxParallelism: maxP}
	}
	for _, tc := range []struct {
		name string
		o    RestoreOptions
		want error
	}{
		{"no store", RestoreOptions{Sources: []*backend.Handle{h(8)}, MaxParallelism: 8}, backend.ErrInvalidArgument},
		{"no sources", RestoreOptions{Store: store, MaxParallelism: 8}, backend.ErrInvalidArgument},
		{"two sources, not rescaled", RestoreOptions{Store: store, Sources: []*backend.Handle{h(8), h(8)}, MaxParallelism: 8}, backend.ErrInvalidArgument},
		{"nil source", RestoreOptions{Store: store, Sources: []*backend.Handle{nil}, MaxParallelism: 8}, backend.ErrInvalidArgument},
		{"bad range", RestoreOptions{Store: store, Sources: []*backend.Handle{h(8)}, MaxParallelism: 8, Rescaled: true, KeyGroups: backend.KeyGroupRange{Start: 4, End: 9}}, backend.ErrInvalidArgument},
		{"other maxParallelism", RestoreOptions{Store: store, Sources: []*backend.Handle{h(16)}, MaxParallelism: 8}, backend.ErrIncompatible},
		{"bad handle", RestoreOptions{Store: store, Sources: []*backend.Handle{{Version: 99}}, MaxParallelism: 8}, backend.ErrIncompatible},
	} {
		if _, err := Restore(context.Background(), tc.o); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	r, err := Restore(context.Background(), RestoreOptions{Store: store, Sources: []*backend.Handle{h(8)}, MaxParallelism: 8})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Read(0, func([]Record) error { return nil }); !errors.Is(err, backend.ErrInvalidArgument) {
		t.Fatalf("Read of a channel that is not there: %v", err)
	}
	if err := errors.Join(r.Close(), r.Close()); err != nil {
		t.Fatal(err)
	}
}
