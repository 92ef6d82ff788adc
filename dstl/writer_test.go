package dstl

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

func newTestWriter(t testing.TB, ls LogStore, o Options) *Writer {
	t.Helper()
	w, err := NewWriter(ls, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func memLog() (LogStore, *memstore.Store) {
	s := memstore.New()
	return TieredLogStore{Store: s}, s
}

type appended struct {
	seq uint64
	kg  int
	ch  string
}

func readAll(ls LogStore, h Handle, o ReadOptions) ([]appended, error) {
	var got []appended
	err := Read(context.Background(), ls, h, o, func(r Record) error {
		got = append(got, appended{r.Seq, r.KeyGroup, string(r.Change)})
		return nil
	})
	return got, err
}

func countObjects(t testing.TB, s tiered.Store) int {
	n := 0
	if err := tiered.Walk(context.Background(), s, "", func(tiered.ObjectInfo) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestWriterPersistReadBack(t *testing.T) {
	ctx := context.Background()
	ls, _ := memLog()
	w := newTestWriter(t, ls, Options{FlushDelay: time.Hour, BlockSize: 64})
	model := map[string][]appended{}
	for i := 0; i < 300; i++ {
		id := fmt.Sprintf("job/op/%d", i%3)
		kg := (i * 7) % 128
		ch := strings.Repeat(string(rune('a'+i%26)), i%50)
		seq, err := w.Append(ctx, id, kg, []byte(ch))
		if err != nil {
			t.Fatal(err)
		}
		if want := uint64(len(model[id]) + 1); seq != want {
			t.Fatalf("seq %d, want %d", seq, want)
		}
		model[id] = append(model[id], appended{seq, kg, ch})
		if i%97 == 0 { // persist some writers part way: several segments
			if _, err := w.Persist(ctx, id, seq); err != nil {
				t.Fatal(err)
			}
		}
	}
	for id, want := range model {
		h, err := w.Persist(ctx, id, math.MaxUint64)
		if err != nil {
			t.Fatal(err)
		}
		if h.From != 1 || h.To != uint64(len(want)) {
			t.Fatalf("%s: window %d..%d", id, h.From, h.To)
		}
		got, err := readAll(ls, h, ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: read back\n %v\nwant %v", id, got, want)
		}
		// a window in the middle
		mid, err := w.Persist(ctx, id, 50)
		if err != nil {
			t.Fatal(err)
		}
		got, _ = readAll(ls, mid, ReadOptions{})
		if fmt.Sprint(got) != fmt.Sprint(want[:50]) {
			t.Fatalf("%s: window 1..50 read back %d records", id, len(got))
		}
		kr := backend.KeyGroupRange{Start: 10, End: 60}
		got, _ = readAll(ls, h, ReadOptions{KeyGroups: &kr})
		var wantKG []appended
		for _, a := range want {
			if kr.Contains(a.kg) {
				wantKG = append(wantKG, a)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(wantKG) {
			t.Fatalf("%s: key groups %v: %d records, want %d", id, kr, len(got), len(wantKG))
		}
	}
	m := w.Metrics()
	if m.RecordsAppended != 300 || m.SegmentsWritten < 4 || m.FlushLatency.Count != m.SegmentsWritten {
		t.Fatalf("metrics %+v", m)
	}
}

func TestFlushTriggers(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		n    int // appends of 1 KiB to one writer, then expect a segment without Persist
	}{
		{"size", Options{FlushDelay: time.Hour, FlushSize: 8 << 10, PreemptiveFlushSize: 8 << 10}, 8},
		{"pre-emptive one writer", Options{FlushDelay: time.Hour, FlushSize: 1 << 20, PreemptiveFlushSize: 4 << 10}, 4},
		{"delay", Options{FlushDelay: 5 * time.Millisecond}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ls, s := memLog()
			w := newTestWriter(t, ls, tc.o)
			for i := 0; i < tc.n-1; i++ {
				if _, err := w.Append(context.Background(), "w", 0, make([]byte, 1024)); err != nil {
					t.Fatal(err)
				}
			}
			if tc.n > 1 {
				time.Sleep(20 * time.Millisecond)
				if n := w.Metrics().SegmentsWritten; n != 0 {
					t.Fatalf("%d segments before the threshold", n)
				}
			}
			if _, err := w.Append(context.Background(), "w", 0, make([]byte, 1024)); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "a segment", func() bool { return w.Metrics().SegmentsWritten == 1 })
			if n := countObjects(t, s); n != 1 {
				t.Fatalf("%d objects", n)
			}
		})
	}
}

func TestSegmentNamesAndPrefix(t *testing.T) {
	ls, _ := memLog()
	w := newTestWriter(t, ls, Options{RunID: "run1", FlushDelay: time.Hour})
	w.Append(context.Background(), "a", 0, []byte("x"))
	h, err := w.Persist(context.Background(), "a", 1)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := h.Segments(), []string{DefaultPrefix + "/run1/0000000000000001-0"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("segments %v, want %v", got, want)
	}
	var listed []string
	ls.List(context.Background(), DefaultPrefix+"/", func(n string, size int64) error {
		listed = append(listed, n)
		x, err := ReadIndex(context.Background(), ls, n, size)
		if err != nil {
			t.Fatal(err)
		}
		if wi, ok := x.Writer("a"); !ok || wi.Offset() != h.Ranges[0].Offset || wi.Length() != h.Ranges[0].Length {
			t.Fatalf("index %+v does not match the handle %+v", x, h)
		}
		return nil
	})
	if fmt.Sprint(listed) != fmt.Sprint(h.Segments()) {
		t.Fatalf("listed %v", listed)
	}
}

func TestTruncateReleasesSegments(t *testing.T) {
	ctx := context.Background()
	ls, _ := memLog()
	w := newTestWriter(t, ls, Options{FlushDelay: time.Hour})
	// segment 1: a1 b1; segment 2: a2; segment 3: b2
	w.Append(ctx, "a", 0, []byte("a1"))
	w.Append(ctx, "b", 0, []byte("b1"))
	h1, _ := w.Persist(ctx, "a", 1)
	w.Append(ctx, "a", 0, []byte("a2"))
	w.Persist(ctx, "a", 2)
	w.Append(ctx, "b", 0, []byte("b2"))
	hb, _ := w.Persist(ctx, "b", 2)
	seg1, seg3 := h1.Segments()[0], hb.Segments()[1]
	if live := w.LiveSegments(); len(live) != 3 || live[seg1] != 2 {
		t.Fatalf("live %v", live)
	}
	if !w.Holds(seg1) || !w.Holds(seg3) {
		t.Fatalf("durable live segments not held: %v %v", w.Holds(seg1), w.Holds(seg3))
	}
	w.Truncate("a", 1)
	if r := w.TakeReleased(); len(r) != 0 {
		t.Fatalf("released %v while b still references %s", r, seg1)
	}
	ha, _ := w.Persist(ctx, "a", math.MaxUint64)
	if ha.From != 2 || len(ha.Ranges) != 1 || ha.Ranges[0].Segment == seg1 {
		t.Fatalf("handle after truncation %+v", ha)
	}
	got, err := readAll(ls, ha, ReadOptions{})
	if err != nil || fmt.Sprint(got) != fmt.Sprint([]appended{{2, 0, "a2"}}) {
		t.Fatalf("read after truncation %v %v", got, err)
	}
	w.Truncate("b", 1)
	if r := w.TakeReleased(); fmt.Sprint(r) != fmt.Sprint([]string{seg1}) {
		t.Fatalf("released %v, want [%s]", r, seg1)
	}
	if w.Holds(seg1) || !w.Holds(seg3) {
		t.Fatalf("after truncation: holds %s %v (want false), %s %v (want true)", seg1, w.Holds(seg1), seg3, w.Holds(seg3))
	}
	w.Forget("b")
	if r := w.TakeReleased(); fmt.Sprint(r) != fmt.Sprint([]string{seg3}) {
		t.Fatalf("released after Forget %v, want [%s]", r, seg3)
	}
	if live := w.LiveSegments(); len(live) != 1 {
		t.Fatalf("live after truncations %v", live)
	}
	// records truncated before their segment is durable release it at once
	w.Append(ctx, "c", 0, []byte("c1"))
	w.Truncate("c", 1)
	w.Append(ctx, "c", 0, []byte("c2")) // forces no flush; persist c2 only
	hc, _ := w.Persist(ctx, "c", 2)
	if hc.From != 2 || hc.To != 2 {
		t.Fatalf("c window %d..%d", hc.From, hc.To)
	}
}

func TestPersistOfUnknownAndEmptyWindows(t *testing.T) {
	ls, _ := memLog()
	w := newTestWriter(t, ls, Options{})
	h, err := w.Persist(context.Background(), "nobody", 10)
	if err != nil || !h.Empty() || len(h.Ranges) != 0 {
		t.Fatalf("unknown writer: %+v %v", h, err)
	}
	if err := Read(context.Background(), ls, h, ReadOptions{}, func(Record) error { t.Fatal("record from an empty handle"); return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Persist(context.Background(), "", 1); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("empty id: %v", err)
	}
}

func TestCloseIsIdempotentAndStopsEverything(t *testing.T) {
	ls, _ := memLog()
	w, err := NewWriter(ls, Options{FlushDelay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	w.Append(context.Background(), "a", 0, []byte("x"))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Append(context.Background(), "a", 0, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
	if _, err := w.Persist(context.Background(), "a", 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("persist after close: %v", err)
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"pre-emptive above flush", Options{FlushSize: 1 << 20, PreemptiveFlushSize: 2 << 20}, "pre-emptive"},
		{"cap below flush", Options{FlushSize: 1 << 20, MaxBytesInFlight: 1 << 10}, "max bytes in flight"},
		{"run id with slash", Options{RunID: "a/b"}, "run id"},
		{"bad prefix", Options{Prefix: "/abs"}, "prefix"},
		{"negative", Options{FlushDelay: -1, MaxAttempts: -1, UploadTimeout: -1, BlockSize: -1, UploadConcurrency: -1}, "flush delay"},
	} {
		o := tc.o
		o.EnsureDefaults()
		err := o.Validate()
		if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	var o Options
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if o.FlushSize != DefaultFlushSize || o.PreemptiveFlushSize != DefaultPreemptiveFlushSize || o.MaxBytesInFlight != DefaultMaxBytesInFlight ||
		o.FlushDelay != DefaultFlushDelay || len(o.RunID) != 32 {
		t.Fatalf("defaults %+v", o)
	}
	// every problem reported at once
	o = Options{FlushDelay: -1, MaxAttempts: -1, UploadTimeout: -1}
	o.EnsureDefaults()
	if err := o.Validate(); strings.Count(err.Error(), "\n") < 2 {
		t.Fatalf("not every problem reported: %v", err)
	}
}

// Close cancels uploads that hang, fails the Persist waiting for them, and
// returns only once every attempt it started has returned.
func TestCloseStopsHangingUploads(t *testing.T) {
	ls, _ := memLog()
	sc := &scripted{LogStore: ls, hook: func(ctx context.Context, _ int, _ string) error {
		<-ctx.Done()
		time.Sleep(5 * time.Millisecond) // a store slow to notice
		return ctx.Err()
	}}
	w, err := NewWriter(sc, Options{UploadTimeout: time.Millisecond, MaxAttempts: 3})
	if err != nil {
		t.Fatal(err)
	}
	w.Append(context.Background(), "a", 0, []byte("x"))
	done := make(chan error, 1)
	go func() {
		_, err := w.Persist(context.Background(), "a", 1)
		done <- err
	}()
	waitFor(t, "three hanging attempts", func() bool { return len(sc.names()) == 3 })
	w.Close()
	if n := sc.active(); n != 0 {
		t.Fatalf("%d Put attempts still running after Close", n)
	}
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("persist across Close: %v", err)
	}
}

// TestIncompressibleWritersSkipZstd: once none of a writer's blocks in a
// segment shrank, its next compressProbe segments store their blocks
// without trying zstd, and the one after tries again, so a writer whose
// values became compressible gets compressed again.
func TestIncompressibleWritersSkipZstd(t *testing.T) {
	ctx := context.Background()
	ls, mem := memLog()
	w := newTestWriter(t, ls, Options{FlushDelay: time.Hour})
	r := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, 4096)
	for i := range random {
		random[i] = byte(r.Uint32())
	}
	zeros := make([]byte, 4096)
	// compressionOf is the compression byte of the first block of the
	// segment a Persist up to seq wrote.
	compressionOf := func(seq uint64) byte {
		t.Helper()
		h, err := w.Persist(ctx, "a", seq)
		if err != nil {
			t.Fatal(err)
		}
		rg := h.Ranges[len(h.Ranges)-1]
		data, err := tiered.ReadAll(ctx, mem, rg.Segment, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		return data[rg.Offset+4]
	}
	seq, _ := w.Append(ctx, "a", 0, random)
	if c := compressionOf(seq); c != compressionNone {
		t.Fatalf("random block stored with compression %d", c)
	}
	for i := 0; i < compressProbe; i++ {
		seq, _ = w.Append(ctx, "a", 0, zeros)
		if c := compressionOf(seq); c != compressionNone {
			t.Fatalf("segment %d after an incompressible one: compression %d, want none (zstd not tried)", i+1, c)
		}
	}
	seq, _ = w.Append(ctx, "a", 0, zeros)
	if c := compressionOf(seq); c != compressionZstd {
		t.Fatalf("the probe after %d skipped segments stored compression %d, want zstd", compressProbe, c)
	}
}
