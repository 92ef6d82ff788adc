package lsm

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/statedhq/stated/backend"
)

// TestMemtablesLeaveTheBlockCache: a writing instance's memtables do not
// take the shared block cache's room (cacheHold). Pebble reserves each
// memtable's size in Options.Cache; without the hold, a 4 MiB cache with a
// 2 MiB memtable in it kept at most 2 MiB of blocks.
func TestMemtablesLeaveTheBlockCache(t *testing.T) {
	const cacheSize, memtable = 4 << 20, 2 << 20
	shared := pebble.NewCache(cacheSize)
	defer shared.Unref()
	e := newEnv(t)
	b := e.open(full(), func(_ *backend.Options, lo *Options) { lo.Cache = shared; lo.MemTableSize = memtable })
	rng := rand.New(rand.NewPCG(1, 2))
	val := make([]byte, 1024)
	const n = 12 << 10 // 12 MiB of incompressible values
	for i := range n {
		for j := range val {
			val[j] = byte(rng.Uint32())
		}
		must(t, b.Put("v", key(i%128, fmt.Sprintf("k%06d", i)), val))
		if i%1024 == 1023 {
			// Each flush starts a memtable twice the last one's size, up
			// to MemTableSize.
			must(t, b.DB().Flush())
		}
	}
	must(t, b.Put("v", key(0, "last"), val)) // a fresh memtable, in use
	if got := b.DB().Metrics().MemTable.Size; got < memtable {
		t.Fatalf("memtables hold %d bytes, want the full %d before reading", got, memtable)
	}
	// Read every key twice: the second pass finds the blocks the cache
	// kept, and the cache keeps as many as its target allows.
	for range 2 {
		for i := range n {
			if _, ok, err := b.Get("v", key(i%128, fmt.Sprintf("k%06d", i))); err != nil || !ok {
				t.Fatalf("get %d: %v %v", i, ok, err)
			}
		}
	}
	m := shared.Metrics()
	t.Logf("block cache: %d bytes in %d blocks, %d hits, %d misses", m.Size, m.Count, m.Hits, m.Misses)
	if m.Size < cacheSize*9/10 {
		t.Fatalf("the block cache holds %d bytes with a memtable of %d in use, want about its %d", m.Size, memtable, cacheSize)
	}
	must(t, b.Close())
	// Closing gives the room back: the cache is its own size again.
	if m := shared.Metrics(); m.Size > cacheSize {
		t.Fatalf("after close the cache holds %d bytes, more than its %d", m.Size, cacheSize)
	}
}
