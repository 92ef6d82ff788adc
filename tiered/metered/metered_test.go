package metered_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/cost"
	"github.com/statedhq/stated/tiered/fault"
	"github.com/statedhq/stated/tiered/memstore"
	"github.com/statedhq/stated/tiered/metered"
	"github.com/statedhq/stated/tiered/storetest"
)

// The wrapper is a store like any other.
func TestAcceptance(t *testing.T) {
	storetest.Run(t, storetest.Harness{New: func(testing.TB) tiered.Store { return metered.New(memstore.New()) }})
}

func TestCounts(t *testing.T) {
	ctx := context.Background()
	s := metered.New(memstore.New())
	if err := s.Put(ctx, "a", bytes.NewReader([]byte("hello")), 5); err != nil {
		t.Fatal(err)
	}
	if err := s.PutIfAbsent(ctx, "a", bytes.NewReader([]byte("hello")), 5); !errors.Is(err, tiered.ErrExists) {
		t.Fatalf("put if absent of an existing object: %v", err)
	}
	rc, err := s.Get(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, rc); err != nil {
		t.Fatal(err)
	}
	rc.Close()
	if rc, err = s.GetRange(ctx, "a", 1, 2); err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, rc)
	rc.Close()
	if _, err := s.Stat(ctx, "missing"); !tiered.IsNotFound(err) {
		t.Fatalf("stat of a missing object: %v", err)
	}
	if err := s.Put(ctx, "../bad", bytes.NewReader(nil), 0); err == nil {
		t.Fatal("a bad name was accepted")
	}
	if _, err := s.List(ctx, "", "", 0); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteBatch(ctx, []string{"a", "b", "c"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	c := s.Counts()
	// The refused PutIfAbsent read (and would have sent) its 5 bytes too.
	want := metered.Counts{Deleted: 4, BytesUp: 10, BytesDown: 7}
	want.Calls = [tiered.NumOps]uint64{tiered.OpPut: 2, tiered.OpPutIfAbsent: 1, tiered.OpGet: 1, tiered.OpGetRange: 1,
		tiered.OpStat: 1, tiered.OpList: 1, tiered.OpDelete: 1, tiered.OpDeleteBatch: 1}
	want.Errors[tiered.OpPut] = 1 // the bad name; ErrExists and not-found are answers
	if c != want {
		t.Fatalf("counts\n %+v\nwant\n %+v", c, want)
	}
	// A store that does not count its requests: one per call, by kind.
	if s.RequestsMeasured() {
		t.Fatal("memstore's calls are reported as measured requests")
	}
	var req cost.Counts
	req.Requests = [cost.NumKinds]uint64{cost.Put: 3, cost.Get: 2, cost.Head: 1, cost.List: 1, cost.Delete: 2}
	if got := s.Requests(); got != req {
		t.Fatalf("requests\n %+v\nwant\n %+v", got, req)
	}
}

// Failures of the store underneath count as errors of their op.
func TestCountsErrors(t *testing.T) {
	ctx := context.Background()
	fs := fault.New(memstore.New(), fault.Config{ErrorRate: 1, Seed: 1})
	s := metered.New(fs)
	for range 3 {
		_ = tiered.PutBytes(ctx, s, "x", []byte("y"))
	}
	if c := s.Counts(); c.Calls[tiered.OpPut] != 3 || c.Errors[tiered.OpPut] != 3 {
		t.Fatalf("three failed puts counted as %d calls, %d errors", c.Calls[tiered.OpPut], c.Errors[tiered.OpPut])
	}
}
