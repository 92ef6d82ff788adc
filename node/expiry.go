package node

import (
	"sync/atomic"
	"time"

	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/daemon"
)

// expiry wires the checkpoint timeout between the catalog and the daemon.
// The catalog's sweep expires checkpoints in flight for too long and must
// tell the daemon (which tells its backends), but the catalog is opened
// before the daemon (the daemon needs it): the callback reads the daemon
// from a pointer set once the daemon exists. This is the one place that
// knows about the cycle.
type expiry struct{ d atomic.Pointer[daemon.Daemon] }

// catalogOptions sets the catalog's side of the checkpoint timeout.
func (e *expiry) catalogOptions(o *catalog.Options, timeout time.Duration) {
	o.CheckpointTimeout = timeout
	o.OnExpire = func(job string, id uint64) {
		if d := e.d.Load(); d != nil {
			d.CatalogExpired(job, id)
		}
	}
}

// setDaemon completes the wiring.
func (e *expiry) setDaemon(d *daemon.Daemon) { e.d.Store(d) }
