package dstl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/fault"
	"github.com/statedhq/stated/tiered/memstore"
)

// With a store that fails 10% of calls (and loses 5% of replies) and adds
// latency, every Persist either returns a handle whose ranges read back
// exactly (from the store itself, after the Writer is gone) or an error;
// nothing acknowledged is lost.
func TestFaultyStoreNothingAcknowledgedIsLost(t *testing.T) {
	ctx := context.Background()
	base := memstore.New()
	fs := fault.New(base, fault.Config{Seed: 9, ErrorRate: 0.1, LostReplyRate: 0.05,
		Latency: time.Millisecond, LatencyJitter: 3 * time.Millisecond})
	ls := TieredLogStore{Store: fs}
	w := newTestWriter(t, ls, Options{FlushDelay: 2 * time.Millisecond, RetryDelay: time.Millisecond,
		MaxRetryDelay: 10 * time.Millisecond, UploadTimeout: 30 * time.Millisecond, BlockSize: 512})

	type acked struct {
		h    Handle
		want []appended
	}
	var (
		mu       sync.Mutex
		acks     []acked
		failures atomic.Int64
		wg       sync.WaitGroup
	)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("job/op/%d", g)
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			var model []appended
			for i := 0; i < 300; i++ {
				ch := make([]byte, rng.IntN(300))
				for j := range ch {
					ch[j] = byte(rng.IntN(4))
				}
				kg := rng.IntN(128)
				seq, err := w.Append(ctx, id, kg, ch)
				if err != nil {
					t.Error(err)
					return
				}
				model = append(model, appended{seq, kg, string(ch)})
				if i%20 != 19 {
					continue
				}
				pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				h, err := w.Persist(pctx, id, seq)
				cancel()
				if err != nil {
					if !errors.Is(err, ErrUploadFailed) {
						t.Errorf("persist: %v", err)
						return
					}
					// the log of this writer has a hole: a materialization
					// up to seq lets it go on.
					failures.Add(1)
					w.Truncate(id, seq)
					continue
				}
				if h.To != seq {
					t.Errorf("%s: persisted up to %d, window %d..%d", id, seq, h.From, h.To)
				}
				mu.Lock()
				acks = append(acks, acked{h, append([]appended(nil), model[h.From-1:h.To]...)})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	m := w.Metrics()
	w.Close()
	clean := TieredLogStore{Store: base}
	for _, a := range acks {
		got, err := readAll(clean, a.h, ReadOptions{})
		if err != nil {
			t.Fatalf("acknowledged handle %+v does not read back: %v", a.h, err)
		}
		if fmt.Sprint(got) != fmt.Sprint(a.want) {
			t.Fatalf("acknowledged handle of %s %d..%d read back wrong records", a.h.WriterID, a.h.From, a.h.To)
		}
	}
	st := fs.Stats()
	t.Logf("%d acknowledged persists, %d failed; store: %d ops, %d injected errors, %d lost replies; writer: %d segments, %d attempts, %d retries, %d speculative, %d failures, %d loser deletes",
		len(acks), failures.Load(), st.Ops, st.Errors, st.LostReplies, m.SegmentsWritten, m.UploadAttempts, m.UploadRetries, m.SpeculativeUploads, m.UploadFailures, m.LoserDeletes)
	if st.Errors == 0 || m.UploadRetries == 0 || len(acks) < 8*15/2 {
		t.Fatalf("the test did not exercise faults: %+v %+v, %d acks", st, m, len(acks))
	}
}

// A segment that fails every attempt fails the Persists that need it,
// frees its memory, and deletes what its attempts may have left; after a
// Truncate past it the writer goes on.
func TestUploadFailureIsReportedAndRecoverable(t *testing.T) {
	ctx := context.Background()
	base := memstore.New()
	fs := fault.New(base, fault.Config{Ops: tiered.OpSet(tiered.OpPut), ErrorRate: 1})
	ls := TieredLogStore{Store: fs}
	w := newTestWriter(t, ls, Options{FlushDelay: time.Hour, RetryDelay: time.Millisecond, MaxAttempts: 3})
	w.Append(ctx, "a", 1, []byte("lost"))
	w.Append(ctx, "b", 1, []byte("also lost"))
	_, err := w.Persist(ctx, "a", 1)
	if !errors.Is(err, ErrUploadFailed) || !strings.Contains(err.Error(), "after 3 attempts") {
		t.Fatalf("persist with a dead store: %v", err)
	}
	if _, err := w.Persist(ctx, "b", 1); !errors.Is(err, ErrUploadFailed) {
		t.Fatalf("other writer of the failed segment: %v", err)
	}
	m := w.Metrics()
	if m.BytesInFlight != 0 || m.UploadFailures != 1 || m.UploadAttempts != 3 {
		t.Fatalf("after a failed segment: %+v", m)
	}
	fs.SetConfig(fault.Config{}) // healed
	if _, err := w.Persist(ctx, "a", 1); !errors.Is(err, ErrUploadFailed) {
		t.Fatalf("a healed store does not bring the lost records back: %v", err)
	}
	w.Truncate("a", 1)
	seq, _ := w.Append(ctx, "a", 2, []byte("after"))
	h, err := w.Persist(ctx, "a", seq)
	if err != nil {
		t.Fatal(err)
	}
	got, err := readAll(ls, h, ReadOptions{})
	if err != nil || fmt.Sprint(got) != fmt.Sprint([]appended{{2, 2, "after"}}) {
		t.Fatalf("after recovery: %v %v", got, err)
	}
	if n := countObjects(t, base); n != 1 {
		t.Fatalf("%d objects, want only the new segment", n)
	}
}

// scripted is a LogStore whose Puts a test controls.
type scripted struct {
	LogStore
	mu       sync.Mutex
	calls    []string
	hook     func(ctx context.Context, call int, name string) error
	inFlight int64 // bytes of Puts in progress
	maxSeen  int64
	running  int
}

func (s *scripted) Put(ctx context.Context, name string, data []byte) error {
	s.mu.Lock()
	call := len(s.calls)
	s.calls = append(s.calls, name)
	s.inFlight += int64(len(data))
	s.maxSeen = max(s.maxSeen, s.inFlight)
	s.running++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.running--
		s.inFlight -= int64(len(data))
		s.mu.Unlock()
	}()
	if s.hook != nil {
		if err := s.hook(ctx, call, name); err != nil {
			return err
		}
	}
	return s.LogStore.Put(ctx, name, data)
}

// active is the number of Puts in progress.
func (s *scripted) active() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running
}

func (s *scripted) names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.calls...)
}

func TestRetryAfterFailureUsesNewNamesAndCleansUp(t *testing.T) {
	ctx := context.Background()
	ls, base := memLog()
	sc := &scripted{LogStore: ls}
	sc.hook = func(ctx context.Context, call int, name string) error {
		if call < 2 {
			// a lost reply: the object is stored, the caller sees an error
			ls.Put(ctx, name, []byte("junk"))
			return errors.New("lost reply")
		}
		return nil
	}
	w := newTestWriter(t, sc, Options{RunID: "r", FlushDelay: time.Hour, RetryDelay: time.Millisecond})
	w.Append(ctx, "a", 0, []byte("x"))
	h, err := w.Persist(ctx, "a", 1)
	if err != nil {
		t.Fatal(err)
	}
	p := DefaultPrefix + "/r/0000000000000001-"
	if got := sc.names(); fmt.Sprint(got) != fmt.Sprint([]string{p + "0", p + "1", p + "2"}) {
		t.Fatalf("attempts %v", got)
	}
	if h.Ranges[0].Segment != p+"2" {
		t.Fatalf("handle names %s", h.Ranges[0].Segment)
	}
	waitFor(t, "loser deletes", func() bool { return w.Metrics().LoserDeletes == 2 })
	if n := countObjects(t, base); n != 1 {
		t.Fatalf("%d objects left, want the winner only", n)
	}
	if m := w.Metrics(); m.UploadRetries != 2 || m.UploadAttempts != 3 {
		t.Fatalf("metrics %+v", m)
	}
}

// An attempt slower than UploadTimeout gets a speculative twin; the twin
// wins, the slow one is cancelled and whatever it stored is deleted.
func TestSlowUploadIsRetriedSpeculatively(t *testing.T) {
	ctx := context.Background()
	ls, base := memLog()
	sc := &scripted{LogStore: ls}
	sc.hook = func(ctx context.Context, call int, name string) error {
		if call == 0 {
			<-ctx.Done()                                       // hangs until the Writer gives up on it...
			ls.Put(context.Background(), name, []byte("late")) // ...and stores it anyway
			return ctx.Err()
		}
		return nil
	}
	w := newTestWriter(t, sc, Options{RunID: "r", FlushDelay: time.Hour, UploadTimeout: 20 * time.Millisecond})
	w.Append(ctx, "a", 0, []byte("x"))
	start := time.Now()
	h, err := w.Persist(ctx, "a", 1)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Fatalf("persisted in %v, before the upload timeout", d)
	}
	if got, want := h.Ranges[0].Segment, DefaultPrefix+"/r/0000000000000001-1"; got != want {
		t.Fatalf("winner %s, want %s", got, want)
	}
	waitFor(t, "loser delete", func() bool { return w.Metrics().LoserDeletes == 1 })
	if n := countObjects(t, base); n != 1 {
		t.Fatalf("%d objects left, want the winner only", n)
	}
	if got, err := readAll(ls, h, ReadOptions{}); err != nil || len(got) != 1 {
		t.Fatalf("read %v %v", got, err)
	}
	if m := w.Metrics(); m.SpeculativeUploads != 1 {
		t.Fatalf("metrics %+v", m)
	}
}

// stalledLog is a log store whose uploads wait until gate is closed (or
// their ctx ends).
func stalledLog() (*scripted, chan struct{}) {
	ls, _ := memLog()
	gate := make(chan struct{})
	sc := &scripted{LogStore: ls}
	sc.hook = func(ctx context.Context, call int, name string) error {
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return sc, gate
}

// With uploads stalled, appends block once MaxBytesInFlight is reached:
// bytes in flight never pass the cap (neither the Writer's count nor the
// bytes the store is handed at once), a blocked Append honours its ctx, and
// everything goes on when the store does.
func TestBackPressureBoundsMemory(t *testing.T) {
	ctx := context.Background()
	sc, gate := stalledLog()
	const limit = 64 << 10
	w := newTestWriter(t, sc, Options{FlushSize: 8 << 10, PreemptiveFlushSize: 8 << 10, MaxBytesInFlight: limit,
		FlushDelay: time.Millisecond, UploadTimeout: time.Hour, DisableCompression: true})
	var appended atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				if _, err := w.Append(ctx, fmt.Sprint("w", g), 0, make([]byte, 1000)); err != nil {
					t.Error(err)
					return
				}
				appended.Add(1)
			}
		}()
	}
	waitFor(t, "back-pressure", func() bool { return w.Metrics().BackPressureWaits >= 4 })
	stalled := appended.Load()
	time.Sleep(20 * time.Millisecond)
	if appended.Load() != stalled {
		t.Fatalf("appends went on while the store was stalled: %d then %d", stalled, appended.Load())
	}
	if stalled*1016 > limit || stalled*1016 < limit-4*1016 {
		t.Fatalf("%d appends of 1016 accounted bytes got through before back-pressure; cap %d", stalled, limit)
	}
	tctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	_, err := w.Append(tctx, "late", 0, make([]byte, 1000))
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("blocked append with a deadline: %v", err)
	}
	close(gate)
	wg.Wait()
	for g := 0; g < 4; g++ {
		if _, err := w.Persist(ctx, fmt.Sprint("w", g), math.MaxUint64); err != nil {
			t.Fatal(err)
		}
	}
	m := w.Metrics()
	if m.MaxBytesInFlightSeen > limit || sc.maxSeen > limit || m.BackPressureTime <= 0 || m.RecordsAppended != 800 {
		t.Fatalf("cap %d: writer saw %d in flight, store was handed %d at once; metrics %+v", limit, m.MaxBytesInFlightSeen, sc.maxSeen, m)
	}
	t.Logf("cap %d: max in flight %d, max handed to the store at once %d, back-pressure %v over %d waits",
		limit, m.MaxBytesInFlightSeen, sc.maxSeen, m.BackPressureTime, m.BackPressureWaits)
}

// TestAppendBatchBackPressureAndRefusal: a batch larger than the room in
// flight waits per entry, as Appends would, and one whose ctx ends while
// it waits keeps the entries it added (and says how many) and adds none
// after; a batch with one invalid entry adds nothing.
func TestAppendBatchBackPressureAndRefusal(t *testing.T) {
	ctx := context.Background()
	sc, gate := stalledLog()
	const limit = 16 << 10
	w := newTestWriter(t, sc, Options{FlushSize: 4 << 10, PreemptiveFlushSize: 4 << 10, MaxBytesInFlight: limit,
		FlushDelay: time.Millisecond, UploadTimeout: time.Hour, DisableCompression: true})

	bad := []Entry{{KeyGroup: 1, Change: []byte("ok")}, {KeyGroup: 1 << 20, Change: []byte("bad key group")}}
	if last, n, err := w.AppendBatch(ctx, "b", bad); !errors.Is(err, ErrInvalidArgument) || n != 0 || last != 0 ||
		!strings.Contains(err.Error(), "entry 1 of 2") {
		t.Fatalf("batch with a bad key group: last %d, n %d, %v; want ErrInvalidArgument naming entry 1 of 2, nothing added", last, n, err)
	}
	if w.LastSeq("b") != 0 {
		t.Fatalf("a refused batch added changes: last seq %d", w.LastSeq("b"))
	}

	// 40 entries of 1016 accounted bytes: 16 fit the cap, the store holds
	// every upload, so the batch stalls at the 17th at the latest.
	ents := make([]Entry, 40)
	for i := range ents {
		ents[i] = Entry{KeyGroup: i % 4, Change: bytes.Repeat([]byte{byte(i)}, 1000)}
	}
	tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	last, n, err := w.AppendBatch(tctx, "b", ents)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || n == 0 || n > limit/1016 || last != uint64(n) {
		t.Fatalf("stalled batch: last %d, n %d, %v; want DeadlineExceeded after 1..%d entries", last, n, err, limit/1016)
	}
	if w.LastSeq("b") != uint64(n) || w.Metrics().BackPressureWaits == 0 {
		t.Fatalf("after the stalled batch: last seq %d (want %d), metrics %+v", w.LastSeq("b"), n, w.Metrics())
	}
	close(gate)
	// The rest goes through once the store does.
	last2, n2, err := w.AppendBatch(ctx, "b", ents[n:])
	if err != nil || n2 != len(ents)-n || last2 != uint64(len(ents)) {
		t.Fatalf("rest of the batch: last %d, n %d, %v", last2, n2, err)
	}
	h, err := w.Persist(ctx, "b", math.MaxUint64)
	if err != nil {
		t.Fatal(err)
	}
	got, err := readAll(sc, h, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(ents) {
		t.Fatalf("read back %d records, want %d", len(got), len(ents))
	}
	for i, a := range got {
		if a.seq != uint64(i+1) || a.kg != ents[i].KeyGroup || a.ch != string(ents[i].Change) {
			t.Fatalf("record %d: seq %d kg %d, %d bytes; want seq %d kg %d, entry %d", i, a.seq, a.kg, len(a.ch), i+1, ents[i].KeyGroup, i)
		}
	}
}
