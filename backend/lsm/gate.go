package lsm

import (
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// compactionGate is a pebble.CompactionScheduler that grants what the DB
// allows (GetAllowedWithoutPermission), as Pebble's own scheduler does,
// except while it is paused. A restore by reference opens its store with
// the gate paused until the restore's background work is done (or
// restorePauseMax has passed): an L0 compaction Pebble would start at once
// reads its inputs from the object store, tens of megabytes at 4 GiB,
// while the restored instance's first reads wait behind it on the same
// store. Pebble's scheduler cannot be paused and is not exported.
//
// Like Pebble's, it samples the DB every 100 ms while registered (one
// goroutine, stopped by Unregister), since flushes raise what the DB
// allows without telling the scheduler.
type compactionGate struct {
	db   pebble.DBForCompaction // set by Register, before any other call
	stop chan struct{}
	done chan struct{}
	poke chan struct{}

	mu           sync.Mutex
	paused       bool
	unregistered bool
	running      int
	granting     bool // one grant loop at a time; Unregister waits for it
	grantDone    *sync.Cond
}

var _ pebble.CompactionScheduler = (*compactionGate)(nil)

// restorePauseMax bounds a restore's pause of compactions: writes go on
// meanwhile, and level 0 must not grow for long.
const restorePauseMax = 10 * time.Second

func newCompactionGate(paused bool) *compactionGate {
	g := &compactionGate{stop: make(chan struct{}), done: make(chan struct{}), poke: make(chan struct{}, 1), paused: paused}
	g.grantDone = sync.NewCond(&g.mu)
	return g
}

// Register implements pebble.CompactionScheduler.
func (g *compactionGate) Register(_ int, db pebble.DBForCompaction) {
	g.db = db
	go g.sampler()
}

// Unregister implements pebble.CompactionScheduler.
func (g *compactionGate) Unregister() {
	close(g.stop)
	<-g.done
	g.mu.Lock()
	defer g.mu.Unlock()
	g.unregistered = true
	for g.granting {
		g.grantDone.Wait()
	}
}

// TrySchedule implements pebble.CompactionScheduler.
func (g *compactionGate) TrySchedule() (bool, pebble.CompactionGrantHandle) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.unregistered || g.paused || g.running >= g.db.GetAllowedWithoutPermission() {
		return false, nil
	}
	g.running++
	return true, gateGrant{g}
}

// UpdateGetAllowedWithoutPermission implements pebble.CompactionScheduler.
func (g *compactionGate) UpdateGetAllowedWithoutPermission() { g.wake() }

// Resume lets compactions run again (idempotent).
func (g *compactionGate) Resume() {
	g.mu.Lock()
	g.paused = false
	g.mu.Unlock()
	g.wake()
}

func (g *compactionGate) wake() {
	select {
	case g.poke <- struct{}{}:
	default:
	}
}

func (g *compactionGate) sampler() {
	defer close(g.done)
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
		case <-g.poke:
		}
		g.grant()
	}
}

// grant offers the DB as many compactions as it allows and wants. The DB
// is called without g.mu held: Schedule may call TrySchedule's relatives.
func (g *compactionGate) grant() {
	g.mu.Lock()
	for g.granting {
		g.grantDone.Wait()
	}
	if g.unregistered || g.paused {
		g.mu.Unlock()
		return
	}
	n := g.db.GetAllowedWithoutPermission() - g.running
	if n <= 0 {
		g.mu.Unlock()
		return
	}
	g.granting = true
	g.mu.Unlock()
	for ; n > 0; n-- {
		if waiting, _ := g.db.GetWaitingCompaction(); !waiting {
			break
		}
		g.mu.Lock()
		g.running++ // before Schedule: the compaction may finish (Done) at once
		g.mu.Unlock()
		if !g.db.Schedule(gateGrant{g}) {
			g.mu.Lock()
			g.running--
			g.mu.Unlock()
			break
		}
	}
	g.mu.Lock()
	g.granting = false
	g.grantDone.Broadcast()
	g.mu.Unlock()
}

// gateGrant is the handle of one granted compaction.
type gateGrant struct{ g *compactionGate }

func (gateGrant) Started()                                          {}
func (gateGrant) MeasureCPU(pebble.CompactionGoroutineKind)         {}
func (gateGrant) CumulativeStats(pebble.CompactionGrantHandleStats) {}

// Done frees the compaction's slot and offers it to the next.
func (h gateGrant) Done() {
	h.g.mu.Lock()
	h.g.running--
	h.g.mu.Unlock()
	h.g.wake()
}
