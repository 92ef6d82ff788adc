package lsm

import "github.com/cockroachdb/pebble/v2"

// memtablesPerInstance is the most memtables an instance's Pebble holds at
// once: the one being written and the one being flushed (Pebble's
// MemTableStopWritesThreshold, 2 by default, stops writes beyond that).
const memtablesPerInstance = 2

// cacheHold is an instance's reference to its block cache, together with
// the room it adds to the cache for its memtables.
//
// Pebble accounts every memtable it allocates against Options.Cache: it
// reserves the memtable's size, which shrinks the cache's target by as
// much. With one cache shared by every instance of a daemon, the writing
// instances' memtables took the block cache itself: at 32 MiB memtables
// two instances reserved up to 128 MiB of the daemon's default 128 MiB,
// every index and filter block was read again from the file, and the 1 GiB
// Flink benchmark made 13,613 records/s against 23,290 with this hold
// (docs/flink.md, "The memtable"). An operator sizes --lsm-cache-size as
// the block cache and the memtables with their own flag (docs/operations.md,
// "Sizing"), so each open instance grows the cache by the most its
// memtables can reserve, and gives it back when it closes: the blocks keep
// --lsm-cache-size whatever the memtables hold, and memory stays bounded by
// the cache plus two memtables per open instance.
type cacheHold struct {
	cache   *pebble.Cache
	release func()
}

// holdCache takes a reference to c (or makes a cache of size bytes when c
// is nil) and adds memtableSize times memtablesPerInstance to it.
func holdCache(c *pebble.Cache, size int64, memtableSize uint64) cacheHold {
	if c == nil {
		c = pebble.NewCache(size)
	} else {
		c.Ref()
	}
	// A negative reservation raises the cache's target by as much (Pebble
	// subtracts reservations from its capacity); the returned function
	// takes it back.
	return cacheHold{cache: c, release: c.Reserve(-int(memtableSize * memtablesPerInstance))}
}

// drop gives the room back and releases the reference.
func (h cacheHold) drop() {
	h.release()
	h.cache.Unref()
}
