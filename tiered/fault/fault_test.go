package fault_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/fault"
	"github.com/statedhq/stated/tiered/localfs"
	"github.com/statedhq/stated/tiered/memstore"
	"github.com/statedhq/stated/tiered/storetest"
)

func TestUnderFaultsMem(t *testing.T) {
	storetest.RunUnderFaults(t, storetest.Harness{
		New:       func(testing.TB) tiered.Store { return memstore.New() },
		LargeSize: 1 << 20,
	}, 1)
}

func TestUnderFaultsLocal(t *testing.T) {
	storetest.RunUnderFaults(t, storetest.Harness{
		New: func(t testing.TB) tiered.Store {
			s, err := localfs.Open(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		Reopen: func(t testing.TB, old tiered.Store) tiered.Store {
			s, err := localfs.Open(old.(*localfs.Store).Root())
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		LargeSize: 1 << 20,
		ManyKeys:  300,
	}, 2)
}

// The same seed gives the same faults for a sequential caller.
func TestReproducible(t *testing.T) {
	run := func(seed uint64) []bool {
		s := fault.New(memstore.New(), fault.Config{Seed: seed, ErrorRate: 0.3})
		var out []bool
		for range 200 {
			out = append(out, tiered.PutBytes(context.Background(), s, "x", []byte("x")) != nil)
		}
		return out
	}
	a, b, c := run(7), run(7), run(8)
	failures := 0
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("seed 7 gave different faults at op %d", i)
		}
		if a[i] {
			failures++
		}
	}
	if failures < 30 || failures > 90 {
		t.Fatalf("%d of 200 ops failed at rate 0.3", failures)
	}
	same := true
	for i := range a {
		same = same && a[i] == c[i]
	}
	if same {
		t.Fatal("seeds 7 and 8 gave the same faults")
	}
}

func TestErrorsWrapInjected(t *testing.T) {
	ctx := context.Background()
	s := fault.New(memstore.New(), fault.Config{ErrorRate: 1})
	err := tiered.PutBytes(ctx, s, "x", nil)
	if !errors.Is(err, fault.ErrInjected) {
		t.Fatalf("put: %v", err)
	}
	if _, err := s.Get(ctx, "x"); !errors.Is(err, fault.ErrInjected) {
		t.Fatalf("get: %v", err)
	}
	// Restricting to writes leaves reads alone.
	s.SetConfig(fault.Config{ErrorRate: 1, Ops: tiered.WriteOps})
	if _, err := s.Get(ctx, "x"); !errors.Is(err, tiered.ErrNotFound) {
		t.Fatalf("get with write-only faults: %v", err)
	}
	if err := s.Delete(ctx, "x"); !errors.Is(err, fault.ErrInjected) {
		t.Fatalf("delete: %v", err)
	}
}

func TestLostReplyTookEffect(t *testing.T) {
	ctx := context.Background()
	base := memstore.New()
	s := fault.New(base, fault.Config{LostReplyRate: 1, Ops: tiered.OpSet(tiered.OpPut)})
	if err := tiered.PutBytes(ctx, s, "x", []byte("v")); !errors.Is(err, fault.ErrInjected) {
		t.Fatalf("put: %v", err)
	}
	if b, err := tiered.ReadAll(ctx, base, "x", 0); err != nil || string(b) != "v" {
		t.Fatalf("the put with a lost reply did not take effect: %q %v", b, err)
	}
}

func TestTruncation(t *testing.T) {
	ctx := context.Background()
	base := memstore.New()
	data := storetest.Data(1, 10000)
	tiered.PutBytes(ctx, base, "x", data)
	s := fault.New(base, fault.Config{TruncateRate: 1, Seed: 3})
	_, err := tiered.ReadAll(ctx, s, "x", 0)
	if !errors.Is(err, fault.ErrInjected) {
		t.Fatalf("reported truncation: %v", err)
	}
	s.SetConfig(fault.Config{TruncateRate: 1, SilentTruncation: true, Seed: 3})
	b, err := tiered.ReadAll(ctx, s, "x", 0)
	if err != nil || len(b) >= len(data) || !bytes.Equal(b, data[:len(b)]) {
		t.Fatalf("silent truncation: %d bytes, %v", len(b), err)
	}
	rc, err := s.GetRange(ctx, "x", 5000, 100)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(rc)
	rc.Close()
	if len(b) >= 100 || !bytes.Equal(b, data[5000:5000+len(b)]) {
		t.Fatalf("silent ranged truncation: %d bytes", len(b))
	}
	if s.Stats().Truncations != 3 {
		t.Fatalf("stats: %+v", s.Stats())
	}
}

func TestPartialWriteKeepsOld(t *testing.T) {
	ctx := context.Background()
	base := memstore.New()
	tiered.PutBytes(ctx, base, "x", []byte("old"))
	s := fault.New(base, fault.Config{PartialWriteRate: 1})
	if err := tiered.PutBytes(ctx, s, "x", storetest.Data(2, 5000)); !errors.Is(err, fault.ErrInjected) {
		t.Fatalf("partial write: %v", err)
	}
	if b, _ := tiered.ReadAll(ctx, base, "x", 0); string(b) != "old" {
		t.Fatalf("after a partial write: %d bytes", len(b))
	}
}

func TestFailAfterBytes(t *testing.T) {
	ctx := context.Background()
	s := fault.New(memstore.New(), fault.Config{FailAfterBytes: 2500})
	for i := range 2 {
		if err := tiered.PutBytes(ctx, s, "a", make([]byte, 1000)); err != nil {
			t.Fatalf("put %d within budget: %v", i, err)
		}
	}
	// This one crosses the budget part way.
	if err := tiered.PutBytes(ctx, s, "b", make([]byte, 1000)); !errors.Is(err, fault.ErrInjected) {
		t.Fatalf("put crossing the budget: %v", err)
	}
	if _, err := s.Get(ctx, "a"); !errors.Is(err, fault.ErrInjected) {
		t.Fatalf("get after the budget: %v", err)
	}
	if _, err := s.Stat(ctx, "a"); err != nil {
		t.Fatalf("stat moves no bytes and still works: %v", err)
	}
}

func TestLatencyHonoursContext(t *testing.T) {
	s := fault.New(memstore.New(), fault.Config{Latency: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := s.Stat(ctx, "x"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("stat: %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("latency ignored the context")
	}
}

func TestDeleteBatchPartial(t *testing.T) {
	ctx := context.Background()
	base := memstore.New()
	names := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	for _, n := range names {
		tiered.PutBytes(ctx, base, n, []byte(n))
	}
	s := fault.New(base, fault.Config{ErrorRate: 1, Seed: 5})
	if err := s.DeleteBatch(ctx, names); !errors.Is(err, fault.ErrInjected) {
		t.Fatalf("delete-batch: %v", err)
	}
	s.SetConfig(fault.Config{})
	if err := s.DeleteBatch(ctx, names); err != nil {
		t.Fatalf("second delete-batch must finish the job: %v", err)
	}
	if base.Bytes() != 0 {
		t.Fatalf("%d bytes left", base.Bytes())
	}
}
