package catalog

import (
	"sync"

	"github.com/statedhq/stated/refcount"
)

// shared is a machine and the mutex that guards it.
type shared struct {
	sync.Mutex
	machine
}

// machine is the catalog's state, and the decisions taken on it: which
// checkpoints are in flight and with which handles, what is retained and
// by whom, the bases, the registry of shared files, and which names may
// be deleted. It does no I/O, reads no clock and logs nothing: Catalog
// runs the effects (manifest and job-file writes, deletes, listings)
// around it and feeds their outcomes back. Catalog.mu guards it.
type machine struct {
	// retain and maxHistory are Options.Retain and Options.MaxHistory.
	retain, maxHistory int

	// reg counts what retained checkpoints and savepoints (and the jobs'
	// base holds, base.go) reference. It is safe for concurrent use on its
	// own, so reads need no lock (writeManifest's Lookup); it is changed
	// only under Catalog.mu, so that a registration is atomic with entries
	// and with the deletion guard's checks. Set once by Open.
	reg *refcount.Registry

	// entries are the retained checkpoints, those being discarded
	// included; savepoints the completed savepoints. Invariant: while an
	// entry is in entries, reg has owner ref.dir() with every object of
	// its manifest (or Open could not register it and guard.protect keeps
	// them); the same for a savepoint under spOwner. A discard deletes the
	// manifest, then removes the entry and unregisters it in one critical
	// section.
	entries    map[ref]*entry
	savepoints map[string]*spEntry

	// jobs holds what the catalog knows of each job besides its
	// checkpoints: in-flight checkpoints, history, base, no-claim set.
	// spInflight are the savepoints being written. Nothing under the
	// directory of an in-flight checkpoint or savepoint is deleted.
	jobs       map[string]*jobState
	spInflight map[string]bool

	// guard protects names from deletion that no registration covers,
	// and marks the names being deleted (see deleteGuard).
	guard deleteGuard

	// problems are what Open and the sweeps found damaged (Problems);
	// damaged the checkpoints among them whose manifest is damaged
	// (damage.go).
	problems []Problem
	damaged  map[ref]DamagedCheckpoint
	// damagedSavepoints are the errors of restores of the savepoints
	// whose manifest is damaged, by id.
	damagedSavepoints map[string]error

	// loaded: a replicated catalog's first leader loaded it (opLoad).
	loaded bool

	// observe, if set (by tests), sees every command the machine took.
	observe func(command)
}

func newMachine(retain, maxHistory int) machine {
	return machine{
		retain: retain, maxHistory: maxHistory,
		entries: map[ref]*entry{}, savepoints: map[string]*spEntry{},
		jobs: map[string]*jobState{}, spInflight: map[string]bool{},
		guard: newDeleteGuard(), damaged: map[ref]DamagedCheckpoint{},
		damagedSavepoints: map[string]error{},
	}
}

// job returns the state of job, made if new.
func (m *machine) job(name string) *jobState {
	j, ok := m.jobs[name]
	if !ok {
		j = &jobState{name: name, inflight: map[uint64]*inflight{}}
		m.jobs[name] = j
	}
	return j
}
