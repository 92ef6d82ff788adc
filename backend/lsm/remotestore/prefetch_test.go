package remotestore

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
	"github.com/statedhq/stated/tiered/metered"
)

// TestPrefetch: reads inside a prefetched tail come from memory with the
// store's bytes, reads outside it and reads after it expired go to the
// store, and the kept tails never pass maxPrefetchBytes.
func TestPrefetch(t *testing.T) {
	ctx := context.Background()
	m := metered.New(memstore.New())
	s, err := New(Options{Store: m})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	objs := map[string][]byte{}
	sizes := map[string]int64{}
	for i := range 3 {
		b := make([]byte, 100<<10)
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		name := fmt.Sprintf("o%d", i)
		if err := tiered.PutBytes(ctx, m, name, b); err != nil {
			t.Fatal(err)
		}
		objs[name], sizes[name] = b, int64(len(b))
	}
	if err := s.Prefetch(ctx, sizes, 32<<10, 2, time.Hour); err != nil {
		t.Fatal(err)
	}
	reads := func() uint64 { return m.Counts().Calls[tiered.OpGetRange] }
	read := func(name string, off, n int64) {
		t.Helper()
		r, _, err := s.ReadObject(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		p := make([]byte, n)
		if err := r.ReadAt(ctx, p, off); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(p, objs[name][off:off+n]) {
			t.Fatalf("%s [%d, %d): wrong bytes", name, off, off+n)
		}
	}
	before := reads()
	for name := range objs {
		read(name, 100<<10-48, 48)       // the footer
		read(name, 100<<10-32<<10, 4096) // the tail's first block
	}
	if got := reads() - before; got != 0 {
		t.Fatalf("reads inside prefetched tails made %d store reads", got)
	}
	read("o1", 100<<10-32<<10-1, 2) // straddles the tail's start
	read("o1", 0, 4096)
	if got := reads() - before; got != 2 {
		t.Fatalf("reads outside the tails made %d store reads, want 2", got)
	}
	if err := s.Prefetch(ctx, map[string]int64{"o2": sizes["o2"]}, 32<<10, 1, -time.Second); err != nil {
		t.Fatal(err)
	}
	read("o2", 100<<10-48, 48)
	if got := reads() - before; got != 4 { // the prefetch's own, then the read's
		t.Fatalf("a read of an expired tail: %d store reads in all, want 4", got)
	}

	// The budget: tails of 1 MiB for 20 objects keep at most 16 MiB.
	big := map[string]int64{}
	for i := range 20 {
		name := fmt.Sprintf("big%02d", i)
		if err := tiered.PutBytes(ctx, m, name, make([]byte, 1<<20)); err != nil {
			t.Fatal(err)
		}
		big[name] = 1 << 20
	}
	if err := s.Prefetch(ctx, big, 1<<20, 4, time.Hour); err != nil {
		t.Fatal(err)
	}
	s.pre.mu.Lock()
	kept, n := s.pre.bytes, len(s.pre.tails)
	s.pre.mu.Unlock()
	if kept > maxPrefetchBytes || n < 15 {
		t.Fatalf("kept %d bytes in %d tails, want at most %d", kept, n, maxPrefetchBytes)
	}
}
