package lsm

import (
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestCompactionGate: while the gate is paused the store runs no
// compaction however many level-0 tables pile up (flushes go on); once it
// resumes, Pebble's compactions run as usual, and the store closes (the
// gate's goroutine stops).
func TestCompactionGate(t *testing.T) {
	gate := newCompactionGate(true)
	o := &pebble.Options{FS: vfs.NewMem(), L0CompactionThreshold: 2, FormatMajorVersion: pebble.FormatNewest}
	o.Experimental.CompactionScheduler = gate
	db, err := pebble.Open("db", o)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		for k := range 100 {
			must(t, db.Set([]byte(fmt.Sprintf("k%03d", k)), []byte(fmt.Sprint(i)), pebble.NoSync))
		}
		must(t, db.Flush())
	}
	time.Sleep(300 * time.Millisecond) // three of the gate's samples
	m := db.Metrics()
	if m.Compact.Count != 0 || m.Levels[0].TablesCount < 8 {
		t.Fatalf("paused: %d compactions, %d level-0 tables; want none and 8", m.Compact.Count, m.Levels[0].TablesCount)
	}
	gate.Resume()
	deadline := time.Now().Add(10 * time.Second)
	for db.Metrics().Compact.Count == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no compaction within 10 s of resuming")
		}
		time.Sleep(10 * time.Millisecond)
	}
	must(t, db.Close())
	select {
	case <-gate.done:
	default:
		t.Fatal("the gate's goroutine still runs after the store closed")
	}
}
