package catalog

import (
	"fmt"
	"slices"
)

// DamagedCheckpoint is a checkpoint whose manifest is in the store but
// failed its checks (Open or a sweep found it). It cannot be restored, and
// nothing under its directory is ever deleted.
type DamagedCheckpoint struct {
	Job string
	ID  uint64
	// Manifest is the damaged object's name ("<job>/chk-<N>/_metadata").
	Manifest string
	// Err says what is wrong; it wraps ErrCorrupt (backend.ErrIncompatible
	// for a manifest of a newer format version).
	Err error
}

// String names the checkpoint and the damage.
func (d DamagedCheckpoint) String() string {
	return fmt.Sprintf("%s: manifest %s: %v", CheckpointDir(d.Job, d.ID), d.Manifest, d.Err)
}

// noteDamagedManifest records that the manifest name (of kind n)
// failed its checks with err, unless it was recorded already: its
// directory is never deleted, it is a Problem, and a checkpoint manifest
// makes the checkpoint damaged, which restores and listings report.
func (m *machine) noteDamagedManifest(n objName, name string, err error) {
	if _, ok := m.guard.dirs[n.dir()]; ok {
		return
	}
	m.guard.dirs[n.dir()] = err.Error()
	m.problems = append(m.problems, Problem{What: "manifest", Object: name, Job: n.job, Err: err,
		Effect: "its directory is kept as it is"})
	switch n.kind {
	case objCheckpointManifest:
		m.job(n.job) // listed even when nothing else of the job is left
		m.damaged[ref{n.job, n.id}] = DamagedCheckpoint{Job: n.job, ID: n.id, Manifest: name, Err: err}
	case objSavepointManifest:
		m.damagedSavepoints[n.sp] = fmt.Errorf("catalog: savepoint %s cannot be restored: its manifest %s is damaged: %w", n.sp, name, err)
	}
}

// Damaged lists the damaged checkpoints of job's own directory, by id.
func (c *Catalog) Damaged(job string) []DamagedCheckpoint {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []DamagedCheckpoint
	for r, d := range c.mu.damaged {
		if r.job == job {
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b DamagedCheckpoint) int { return cmpUint(a.ID, b.ID) })
	return out
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// damagedErr is the error of a restore of damaged checkpoint d.
func damagedErr(d DamagedCheckpoint) error {
	return fmt.Errorf("catalog: checkpoint %s cannot be restored: its manifest %s is damaged: %w",
		CheckpointDir(d.Job, d.ID), d.Manifest, d.Err)
}

// newerDamaged returns the damaged checkpoints of job that are newer
// than newest (nil: the job owns no intact checkpoint), oldest first: the
// ones a restore of the latest checkpoint would skip. Newer means a higher
// id in the same job's directory; a job's own checkpoints are newer than
// those it adopted from another job (the retention order of owned).
func (m *machine) newerDamaged(job string, newest *entry) []DamagedCheckpoint {
	var out []DamagedCheckpoint
	for r, d := range m.damaged {
		if r.job != job {
			continue
		}
		if newest == nil || newest.ref.job != job || r.id > newest.ref.id {
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b DamagedCheckpoint) int { return cmpUint(a.ID, b.ID) })
	return out
}

// jobFileErr is the error of a write refused because job's file is
// damaged: it wraps what was found wrong with the file.
func jobFileErr(j *jobState) error {
	return fmt.Errorf("catalog: job file %s/%s is damaged; not overwriting it (repair or remove it): %w",
		j.name, JobFileName, j.damage)
}
