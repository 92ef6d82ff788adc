package catalog

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/statedhq/stated/tiered"
)

// Savepoints written by another process.
//
// "stated savepoint edit" and "bootstrap", or another daemon over the
// same root, write savepoints into the store while this catalog runs,
// and "stated savepoint delete" deletes them. The catalog finds a new one
// when it is asked for it (a restore or lookup naming an id it does not
// know: adoptSavepoint) and at each sweep (which lists the root anyway),
// and drops a known one whose manifest is gone at each sweep and at a
// restore of it. Adoption checks the manifest as Open does and registers
// it through the machine (opSavepointAdopted), so a replicated catalog's
// log carries it to every node.
//
// Adoption never races with a delete of what the savepoint lists: the
// savepoint's directory and log segments are marked adopting
// (Catalog.mu.adopting) before its manifest is read, and
// deleteUnreferenced leaves marked names alone; a delete that checked its
// names before the mark is still marking them deleting, and the machine
// refuses the adoption then. A DeleteSavepoint of this catalog marks its
// savepoint (spDeleting), which is then neither adopted nor dropped by the
// sweep. A savepoint deleted by another process right while it is adopted
// is caught by a second look at its manifest once registered.

// errSavepointGone is the error of a savepoint whose manifest left the
// store.
func errSavepointGone(id string) error {
	return fmt.Errorf("%w: savepoint %s was deleted: its manifest %s is no longer in the store", ErrNotFound, id,
		SavepointDir(id)+"/"+ManifestName)
}

// SavepointContext is Savepoint that also finds a savepoint another
// process wrote into the store since the catalog opened (adopting it).
// A savepoint in neither is (nil, false, nil); a damaged manifest, or one
// that cannot be read, is an error naming it.
func (c *Catalog) SavepointContext(ctx context.Context, id string) (*Manifest, bool, error) {
	if m, ok := c.Savepoint(id); ok {
		return m, true, nil
	}
	if err := ValidateSavepointID(id); err != nil {
		return nil, false, err
	}
	m, err := c.adoptSavepoint(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return m, true, nil
}

// adoptSavepoint reads the manifest of savepoint id from the store and
// registers the savepoint (see above). A savepoint the catalog knows
// already is returned as it is. ErrNotFound when there is no manifest.
func (c *Catalog) adoptSavepoint(ctx context.Context, id string) (*Manifest, error) {
	dir := SavepointDir(id)
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	if sp, ok := c.mu.savepoints[id]; ok {
		m := cloneManifest(sp.m)
		c.mu.Unlock()
		return m, nil
	}
	if c.mu.spInflight[id] {
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: savepoint %s is still being written", ErrNotFound, id)
	}
	if c.mu.spDeleting[id] {
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: savepoint %s is being deleted", ErrNotFound, id)
	}
	c.markAdoptingLocked(dir, +1)
	c.mu.Unlock()
	defer c.unmarkAdopting(dir)

	name := dir + "/" + ManifestName
	data, err := tiered.ReadAll(ctx, c.store, name, maxMetaSize)
	if tiered.IsNotFound(err) {
		c.mu.Lock()
		dropped := c.mu.droppedSps[id]
		c.mu.Unlock()
		if dropped {
			return nil, errSavepointGone(id)
		}
		return nil, fmt.Errorf("%w: savepoint %s: neither the catalog nor the store holds it (no manifest %s)", ErrNotFound, id, name)
	}
	if err != nil {
		return nil, fmt.Errorf("catalog: savepoint %s: read its manifest %s: %w", id, name, err)
	}
	return c.adoptManifest(ctx, id, data)
}

// adoptManifest registers savepoint id, whose manifest as stored is data
// (its directory is marked adopting by the caller). A damaged manifest
// is noted as Open notes one (its directory is then kept as it is) and is
// an error naming it.
func (c *Catalog) adoptManifest(ctx context.Context, id string, data []byte) (*Manifest, error) {
	name := SavepointDir(id) + "/" + ManifestName
	n := objName{kind: objSavepointManifest, sp: id}
	m, err := DecodeManifest(data)
	if err == nil {
		err = checkManifestPlace(n, m)
	}
	if err != nil {
		c.mu.Lock()
		c.mu.noteDamagedManifest(n, name, err)
		c.mu.Unlock()
		return nil, fmt.Errorf("catalog: savepoint %s cannot be restored: its manifest %s is damaged: %w", id, name, err)
	}
	var segs []string
	for _, h := range m.Tasks {
		if h.Log != nil {
			segs = append(segs, h.Log.Segments...)
		}
	}
	objs := savepointObjects(m, data)
	c.mu.Lock()
	for _, n := range segs {
		c.markAdoptingLocked(n, +1)
	}
	// Checked here too, after the marks, so that a replicated catalog
	// never proposes what its own machine would refuse while the other
	// replicas, which see no deletes of this node, take it.
	for _, o := range objs {
		if c.mu.guard.deleting[o.Path] {
			c.mu.Unlock()
			c.unmarkAdopting(segs...)
			return nil, fmt.Errorf("%w: savepoint %s: %s is being deleted as unreferenced; it cannot be adopted", ErrNotFound, id, o.Path)
		}
	}
	c.mu.Unlock()
	defer c.unmarkAdopting(segs...)
	out, err := c.exec(command{Op: opSavepointAdopted, Savepoint: id, Manifest: data, decoded: m})
	if err != nil {
		return nil, fmt.Errorf("catalog: adopt savepoint %s: %w", id, err)
	}
	// Deleted meanwhile (another process's "stated savepoint delete", or
	// a DeleteSavepoint of a copy adopted concurrently): do not keep it.
	if _, err := c.store.Stat(ctx, name); tiered.IsNotFound(err) {
		c.dropSavepoint(id)
		return nil, errSavepointGone(id)
	} else if err != nil {
		c.log.Warn("adopted a savepoint whose manifest could not be looked at again", "savepoint", id, "err", err)
	}
	c.log.Info("adopted a savepoint written by another process", "savepoint", id, "job", m.Job, "tasks", len(m.Tasks))
	return out.restored, nil
}

// dropSavepoint removes savepoint id, whose manifest is gone, from the
// catalog. Its files are left to the sweep: nothing references them now.
func (c *Catalog) dropSavepoint(id string) {
	if _, err := c.exec(command{Op: opSavepointDeleted, Savepoint: id}); err != nil && !errors.Is(err, ErrNotFound) {
		c.log.Warn("dropping a deleted savepoint failed; the next sweep retries", "savepoint", id, "err", err)
		return
	}
	c.noteDropped(id)
	c.log.Info("dropped a savepoint whose manifest was deleted from the store", "savepoint", id)
}

// maxDropped bounds the ids of deleted savepoints the catalog remembers
// for the error of a later restore from one.
const maxDropped = 1024

// noteDropped remembers that savepoint id was deleted: a restore from it
// says so rather than that it never existed. Forgotten on restart (and
// past maxDropped).
func (c *Catalog) noteDropped(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.droppedSps == nil || len(c.mu.droppedSps) >= maxDropped {
		c.mu.droppedSps = map[string]bool{}
	}
	c.mu.droppedSps[id] = true
}

// savepointGone reports whether the manifest of known savepoint id left
// the store (a failed look is not gone).
func (c *Catalog) savepointGone(ctx context.Context, id string) bool {
	_, err := c.store.Stat(ctx, SavepointDir(id)+"/"+ManifestName)
	return tiered.IsNotFound(err)
}

// dropVanishedSavepoints drops the known savepoints whose manifests the
// sweep's listing does not hold and the store confirms gone (a savepoint
// completed after the listing is there). With dryRun it only reports
// them. It returns their ids, sorted.
func (c *Catalog) dropVanishedSavepoints(ctx context.Context, objects []tiered.ObjectInfo, dryRun bool) []string {
	listed := map[string]bool{}
	for _, o := range objects {
		if n := classify(o.Name); n.kind == objSavepointManifest {
			listed[n.sp] = true
		}
	}
	var missing []string
	c.mu.Lock()
	for id := range c.mu.savepoints {
		if !listed[id] && !c.mu.spDeleting[id] {
			missing = append(missing, id)
		}
	}
	c.mu.Unlock()
	sort.Strings(missing)
	var gone []string
	for _, id := range missing {
		if !c.savepointGone(ctx, id) {
			continue
		}
		if !dryRun {
			c.dropSavepoint(id)
		}
		gone = append(gone, id)
	}
	return gone
}

// markAdopting and unmarkAdopting mark names adopting (take c.mu).
func (c *Catalog) markAdopting(names ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range names {
		c.markAdoptingLocked(n, +1)
	}
}

func (c *Catalog) unmarkAdopting(names ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range names {
		c.markAdoptingLocked(n, -1)
	}
}

func (c *Catalog) markAdoptingLocked(name string, delta int) {
	if c.mu.adopting == nil {
		c.mu.adopting = map[string]int{}
	}
	c.mu.adopting[name] += delta
	if c.mu.adopting[name] <= 0 {
		delete(c.mu.adopting, name)
	}
}

// adoptingLocked reports whether name, or the savepoint directory it is
// in, is marked adopting. c.mu is held.
func (c *Catalog) adoptingLocked(name string) bool {
	if c.mu.adopting[name] > 0 {
		return true
	}
	n := classify(name)
	return (n.kind == objSavepoint || n.kind == objSavepointManifest) && c.mu.adopting[n.dir()] > 0
}
