package lsm

import (
	"fmt"
	"testing"

	"github.com/statedhq/stated/backend"
)

// A load larger than a chunk is written as several ingests; entries that
// come out of order across chunks, and a later entry for an address
// loaded before, still read back as the last one loaded.
func TestLoadSeveralChunks(t *testing.T) {
	defer func(old int) { loadChunkBytes = old }(loadChunkBytes)
	loadChunkBytes = 4 << 10
	b := newEnv(t).open(full(), nil)
	s, err := b.Load()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 3000
	for round := 0; round < 2; round++ {
		var batch []backend.LoadEntry
		for i := n - 1; i >= 0; i-- {
			batch = append(batch, backend.LoadEntry{KeyGroup: i % 4, State: "v", Key: []byte(fmt.Sprintf("k%05d", i)),
				Value: []byte(fmt.Sprintf("r%d-%d", round, i))})
			if len(batch) == 100 {
				if err := s.Add(batch); err != nil {
					t.Fatal(err)
				}
				batch = nil
			}
		}
		if err := s.Add(batch); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Commit(); err != nil {
		t.Fatal(err)
	}
	l := s.(*sstLoad)
	if l.chunks < 10 {
		t.Fatalf("the load was written in %d chunks, want many at a chunk size of %d", l.chunks, loadChunkBytes)
	}
	for i := 0; i < n; i++ {
		v, ok, err := b.Get("v", backend.Key{KeyGroup: i % 4, Key: []byte(fmt.Sprintf("k%05d", i))})
		if err != nil || !ok || string(v) != fmt.Sprintf("r1-%d", i) {
			t.Fatalf("key %d reads %q %v %v, want the second round's value", i, v, ok, err)
		}
	}
	cnt, err := b.CountEntries("")
	if err != nil || cnt != n {
		t.Fatalf("CountEntries = %d, %v; want %d", cnt, err, n)
	}
}
