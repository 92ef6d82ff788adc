package lsm

import (
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// churn writes what a timer queue leaves in a store of several levels:
// rounds of small entries, most of each round deleted in order (fired) a
// round later, every step flushed.
func churn(t *testing.T, db *pebble.DB) {
	t.Helper()
	k := func(round, i int) []byte { return []byte(fmt.Sprintf("timers/%03d/%08d", round, i)) }
	for round := range 12 {
		for i := range 5000 {
			must(t, db.Set(k(round, i), []byte("v"), pebble.NoSync))
		}
		must(t, db.Flush())
		if round > 0 {
			for i := range 4900 {
				must(t, db.Delete(k(round-1, i), pebble.NoSync))
			}
			must(t, db.Flush())
		}
	}
}

// settle waits for the store's compactions to stop and returns how many
// were tombstone-density ones.
func settle(db *pebble.DB) int64 {
	last, quiet := int64(-1), 0
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && quiet < 10; {
		time.Sleep(50 * time.Millisecond)
		if n := db.Metrics().Compact.Count; n == last {
			quiet++
		} else {
			last, quiet = n, 0
		}
	}
	return db.Metrics().Compact.TombstoneDensityCount
}

// TestNoTombstoneDensityCompactions: the churn of a timer queue makes
// Pebble, with its default threshold, rewrite tombstone-dense tables (which
// an incremental checkpoint would upload again); with the backend's setting
// it runs none, and the backend's stores have that setting (pebbleOptions
// says why).
func TestNoTombstoneDensityCompactions(t *testing.T) {
	run := func(threshold float64) int64 {
		// Small levels, so that tombstones stop above the bottom level as
		// they do in a store of a GiB.
		o := &pebble.Options{FS: vfs.NewMem(), FormatMajorVersion: pebble.FormatNewest,
			LBaseMaxBytes: 64 << 10, MemTableSize: 256 << 10}
		for i := range o.TargetFileSizes {
			o.TargetFileSizes[i] = 32 << 10
		}
		o.Experimental.TombstoneDenseCompactionThreshold = threshold
		db, err := pebble.Open("db", o)
		must(t, err)
		defer db.Close()
		churn(t, db)
		return settle(db)
	}
	if n := run(0); n == 0 {
		t.Fatal("Pebble's default threshold ran no tombstone-density compaction: the churn no longer shows what it should")
	}
	if n := run(noTombstoneDenseCompactions); n != 0 {
		t.Fatalf("the backend's setting ran %d tombstone-density compactions, want none", n)
	}
	b := newEnv(t).open(full(), nil)
	if got := b.pebbleOptions(false).Experimental.TombstoneDenseCompactionThreshold; got != noTombstoneDenseCompactions {
		t.Fatalf("the backend's stores have tombstone-density threshold %v, want %v", got, float64(noTombstoneDenseCompactions))
	}
}
