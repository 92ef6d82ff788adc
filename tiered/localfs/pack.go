package localfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statedhq/stated/tiered"
)

// packFile is what this process knows of one pack file.
type packFile struct {
	path    string
	scanned int64            // where the last scan stopped
	frames  map[int64]string // offset -> name of the frames found
	own     *ownPack         // set while this process appends to it
	removed bool
}

// packed is where a packed object's newest frame is.
type packed struct {
	pf *packFile
	fi frameInfo
}

// packs is a driver's view of the pack files: every pack's frames, the
// objects they hold, and the pack this process appends to.
type packs struct {
	d   *driver
	dir string

	mu    sync.Mutex
	files map[string]*packFile // by path
	index map[string]packed    // object name -> its newest frame

	wmu    sync.Mutex // one append writes at a time, in offset order
	active *ownPack
	next   *ownPack // created ahead by the goroutine wg owns
	making bool
	closed bool
	wg     sync.WaitGroup
}

// ownPack is a pack file this process appends to: it holds the pack's
// lock, so no other process removes it, and syncs its writes in groups.
type ownPack struct {
	pf   *packFile
	f    vfs.File
	lock io.Closer
	tail int64 // where the next frame goes
	size int64

	smu     sync.Mutex
	cond    *sync.Cond
	written uint64 // frames written
	synced  uint64 // frames known durable
	syncing bool
	sealed  bool
	err     error // a failed sync: the pack takes no more frames
}

func newPacks(d *driver) *packs {
	return &packs{d: d, dir: filepath.Join(d.root, packDir), files: map[string]*packFile{}, index: map[string]packed{}}
}

// refresh finds pack files it has not seen and frames appended since its
// last scan (another process may append to its own pack). Callers hold mu.
func (p *packs) refresh() error {
	names, err := p.d.fs.List(p.dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	sort.Strings(names)
	for _, n := range names {
		if !strings.HasSuffix(n, packSuffix) {
			continue
		}
		path := filepath.Join(p.dir, n)
		pf := p.files[path]
		if pf == nil {
			pf = &packFile{path: path, frames: map[int64]string{}}
			p.files[path] = pf
		}
		if pf.own != nil {
			continue // this process's frames are indexed as they are written
		}
		if err := p.scan(pf); err != nil {
			return err
		}
	}
	return nil
}

// scan reads pf's frames from where it stopped last. Callers hold mu.
func (p *packs) scan(pf *packFile) error {
	frames, end, err := p.scanFile(pf.path, pf.scanned)
	if errors.Is(err, fs.ErrNotExist) {
		p.forget(pf)
		return nil
	}
	if err != nil {
		return err
	}
	pf.scanned = end
	for _, fi := range frames {
		if fi.state == stateLive {
			pf.frames[fi.off] = fi.name
			p.index[fi.name] = packed{pf: pf, fi: fi}
		}
	}
	return nil
}

// scanFile scans the pack file at path from off (see scanPack). A
// missing file is an error wrapping fs.ErrNotExist.
func (p *packs) scanFile(path string, off int64) ([]frameInfo, int64, error) {
	f, err := p.d.fs.Open(path)
	if err != nil {
		return nil, off, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, off, err
	}
	frames, end, err := scanPack(f, st.Size(), off)
	if err != nil {
		return nil, off, fmt.Errorf("%s: %w", path, err)
	}
	return frames, end, nil
}

// forget drops a removed pack file from the view. Callers hold mu.
func (p *packs) forget(pf *packFile) {
	pf.removed = true
	for _, name := range pf.frames {
		if x, ok := p.index[name]; ok && x.pf == pf {
			delete(p.index, name)
		}
	}
	delete(p.files, pf.path)
}

// lookup returns name's live frame, refreshing the view once if it is
// not known: another process may have packed it since.
func (p *packs) lookup(name string) (packed, bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	x, ok := p.index[name]
	if !ok {
		if err := p.refresh(); err != nil {
			return packed{}, false, err
		}
		x, ok = p.index[name]
	}
	return x, ok, nil
}

// readFrame reads and verifies x's whole frame. A frame deleted since it
// was indexed (by another process), or a pack removed, is not found.
func (p *packs) readFrame(x packed) ([]byte, bool, error) {
	f, err := p.d.fs.Open(x.pf.path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			p.drop(x)
			return nil, false, nil
		}
		return nil, false, err
	}
	defer f.Close()
	b := make([]byte, x.fi.length)
	if _, err := f.ReadAt(b, x.fi.off); err != nil {
		return nil, false, fmt.Errorf("%s: read frame at %d: %w", x.pf.path, x.fi.off, err)
	}
	fi, err := decodeFrame(b, x.fi.off)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", x.pf.path, err)
	}
	if fi.name != x.fi.name {
		return nil, false, fmt.Errorf("%s: %w: frame at %d names %q, not %q", x.pf.path, errPackCorrupt, fi.off, fi.name, x.fi.name)
	}
	if fi.state != stateLive {
		p.drop(x)
		return nil, false, nil
	}
	return b[fi.dataOff-fi.off : len(b)-4], true, nil
}

// drop forgets x, a frame found deleted.
func (p *packs) drop(x packed) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(x.pf.frames, x.fi.off)
	if cur, ok := p.index[x.fi.name]; ok && cur.pf == x.pf && cur.fi.off == x.fi.off {
		delete(p.index, x.fi.name)
	}
}

// get returns the bytes of name if it is packed and live.
func (p *packs) get(name string) ([]byte, bool, error) {
	for {
		x, ok, err := p.lookup(name)
		if err != nil || !ok {
			return nil, false, err
		}
		data, live, err := p.readFrame(x)
		if err != nil || live {
			return data, live, err
		}
		// Deleted or removed by another process since: look again, a
		// newer frame may hold the name.
	}
}

// stat describes name if it is packed and live. It reads the frame's
// header, not its data: the data's checksum is verified by every read.
func (p *packs) stat(name string) (tiered.ObjectInfo, bool, error) {
	for {
		x, ok, err := p.lookup(name)
		if err != nil || !ok {
			return tiered.ObjectInfo{}, false, err
		}
		live, err := p.readHead(x)
		if err != nil {
			return tiered.ObjectInfo{}, false, err
		}
		if live {
			return tiered.ObjectInfo{Name: name, Size: x.fi.size(), ModTime: x.fi.mod}, true, nil
		}
	}
}

// readHead reads x's frame header and name, and says whether the frame is
// still the one indexed and live (a frame deleted by another process, or
// a removed pack, is dropped from the index).
func (p *packs) readHead(x packed) (bool, error) {
	f, err := p.d.fs.Open(x.pf.path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			p.drop(x)
			return false, nil
		}
		return false, err
	}
	defer f.Close()
	h := make([]byte, frameHeadLen+len(x.fi.name))
	if _, err := f.ReadAt(h, x.fi.off); err != nil {
		return false, fmt.Errorf("%s: read frame at %d: %w", x.pf.path, x.fi.off, err)
	}
	if headLength(h) != x.fi.length || string(h[frameHeadLen:]) != x.fi.name {
		return false, fmt.Errorf("%s: %w: the frame at %d no longer holds %q", x.pf.path, errPackCorrupt, x.fi.off, x.fi.name)
	}
	if h[4] != stateLive {
		p.drop(x)
		return false, nil
	}
	return true, nil
}

// list adds the live packed objects under prefix after startAfter to out.
func (p *packs) list(prefix, startAfter string, out map[string]tiered.ObjectInfo) error {
	p.mu.Lock()
	if err := p.refresh(); err != nil {
		p.mu.Unlock()
		return err
	}
	var cand []packed
	for name, x := range p.index {
		if strings.HasPrefix(name, prefix) && name > startAfter {
			cand = append(cand, x)
		}
	}
	p.mu.Unlock()
	// Another process may have deleted some since they were indexed:
	// read each one's state byte, one open per pack.
	sort.Slice(cand, func(i, j int) bool {
		if cand[i].pf.path != cand[j].pf.path {
			return cand[i].pf.path < cand[j].pf.path
		}
		return cand[i].fi.off < cand[j].fi.off
	})
	var f vfs.File
	var open string
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	state := make([]byte, 1)
	for _, x := range cand {
		if x.pf.path != open {
			if f != nil {
				f.Close()
				f = nil
			}
			var err error
			open = x.pf.path
			if f, err = p.d.fs.Open(open); err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					continue
				}
				return err
			}
		}
		if f == nil {
			continue
		}
		if _, err := f.ReadAt(state, x.fi.off+4); err != nil {
			return fmt.Errorf("%s: %w", x.pf.path, err)
		}
		if state[0] != stateLive {
			p.drop(x)
			continue
		}
		out[x.fi.name] = tiered.ObjectInfo{Name: x.fi.name, Size: x.fi.size(), ModTime: x.fi.mod}
	}
	return nil
}

// remove marks the frames of names deleted and syncs the packs it
// changed, then removes the packs left with no live frame that no
// process appends to. Names not packed are no business of it.
func (p *packs) remove(names []string) error {
	p.mu.Lock()
	refreshed := false
	byPack := map[*packFile][]packed{}
	for _, n := range names {
		x, ok := p.index[n]
		if !ok && !refreshed {
			refreshed = true
			if err := p.refresh(); err != nil {
				p.mu.Unlock()
				return err
			}
			x, ok = p.index[n]
		}
		if ok {
			byPack[x.pf] = append(byPack[x.pf], x)
		}
	}
	p.mu.Unlock()
	var first error
	for pf, xs := range byPack {
		if err := p.markDeleted(pf, xs); err != nil && first == nil {
			first = err
		}
	}
	for pf := range byPack {
		if err := p.removeIfDead(pf); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// removeKnown marks name's frame deleted if the view knows one (a Put
// of the name hides it).
func (p *packs) removeKnown(name string) error {
	p.mu.Lock()
	x, ok := p.index[name]
	p.mu.Unlock()
	if !ok {
		return nil
	}
	return p.markDeleted(x.pf, []packed{x})
}

// markDeleted rewrites the state byte of xs's frames in pf and syncs it.
func (p *packs) markDeleted(pf *packFile, xs []packed) error {
	f, err := p.d.fs.OpenReadWrite(pf.path, vfs.WriteCategoryUnspecified)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			p.mu.Lock()
			p.forget(pf)
			p.mu.Unlock()
			return nil
		}
		return err
	}
	defer f.Close()
	for _, x := range xs {
		if _, err := f.WriteAt([]byte{stateDeleted}, x.fi.off+4); err != nil {
			return fmt.Errorf("%s: %w", pf.path, err)
		}
	}
	if err := f.SyncData(); err != nil {
		return fmt.Errorf("%s: %w", pf.path, err)
	}
	for _, x := range xs {
		p.drop(x)
	}
	return nil
}

// removeIfDead removes pf if none of its frames is live and no process
// holds its lock (appends to it).
func (p *packs) removeIfDead(pf *packFile) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pf.own != nil || pf.removed {
		return nil
	}
	lock, err := p.d.fs.Lock(strings.TrimSuffix(pf.path, packSuffix) + lockSuffix)
	if err != nil {
		return nil // another process appends to it (or this one does)
	}
	defer lock.Close()
	frames, _, err := p.scanFile(pf.path, 0)
	if errors.Is(err, fs.ErrNotExist) {
		p.forget(pf)
		return nil
	}
	if err != nil {
		return err // a pack of a newer format is never ours to remove
	}
	for _, fi := range frames {
		if fi.state == stateLive {
			return nil
		}
	}
	// With the lock held nobody appends to it, or is creating it.
	if err := p.d.fs.Remove(pf.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	p.d.fs.Remove(strings.TrimSuffix(pf.path, packSuffix) + lockSuffix)
	p.forget(pf)
	return p.d.syncDir(p.dir)
}

// cleanup removes the dead packs nobody appends to: Open calls it.
func (p *packs) cleanup() error {
	p.mu.Lock()
	if err := p.refresh(); err != nil {
		p.mu.Unlock()
		return err
	}
	all := make([]*packFile, 0, len(p.files))
	for _, pf := range p.files {
		all = append(all, pf)
	}
	p.mu.Unlock()
	for _, pf := range all {
		if err := p.removeIfDead(pf); err != nil {
			return err
		}
	}
	// Lock files whose pack is gone (a crash between the two removes).
	names, err := p.d.fs.List(p.dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	for _, n := range names {
		if !strings.HasSuffix(n, lockSuffix) {
			continue
		}
		base := strings.TrimSuffix(n, lockSuffix)
		if _, err := p.d.fs.Stat(filepath.Join(p.dir, base+packSuffix)); errors.Is(err, fs.ErrNotExist) {
			if l, err := p.d.fs.Lock(filepath.Join(p.dir, n)); err == nil {
				p.d.fs.Remove(filepath.Join(p.dir, n))
				l.Close()
			}
		}
	}
	return nil
}

// appendObject packs data under name and returns once it is durable.
func (p *packs) appendObject(ctx context.Context, name string, data []byte) error {
	b := encodeFrame(name, data, time.Now())
	n := int64(len(b))
	p.wmu.Lock()
	op, err := p.room(n)
	if err != nil {
		p.wmu.Unlock()
		return err
	}
	off := op.tail
	if _, err := op.f.WriteAt(b, off); err != nil {
		// Nothing after it counts: seal the pack, the next append takes
		// a new one.
		op.fail(err)
		p.wmu.Unlock()
		return err
	}
	op.tail += n
	seq := op.wrote()
	if op.tail > op.size/2 {
		p.makeNext()
	}
	p.wmu.Unlock()

	if err := op.waitSynced(seq); err != nil {
		// Not durable: make sure it never reads as stored.
		op.f.WriteAt([]byte{stateDeleted}, off+4)
		return err
	}
	fi, err := decodeFrame(b, off)
	if err != nil {
		return err // cannot happen: encodeFrame made it
	}
	p.mu.Lock()
	old, had := p.index[name]
	op.pf.frames[off] = name
	p.index[name] = packed{pf: op.pf, fi: fi}
	p.mu.Unlock()
	if had {
		// An object put again: its older frame is dead.
		return p.markDeleted(old.pf, []packed{old})
	}
	return nil
}

// room returns the pack the next n bytes go into, rolling over to a new
// pack when the active one is full or failed. Callers hold wmu.
func (p *packs) room(n int64) (*ownPack, error) {
	if p.closed {
		return nil, tiered.ErrClosed
	}
	if op := p.active; op != nil && op.usable() && op.tail+n <= op.size {
		return op, nil
	}
	old := p.active
	p.active = nil
	if old != nil {
		p.seal(old)
	}
	next := p.takeNext()
	if next == nil {
		var err error
		if next, err = p.create(); err != nil {
			return nil, err
		}
	}
	if next.tail+n > next.size {
		p.seal(next)
		return nil, fmt.Errorf("an object of %d bytes does not fit a pack of %d", n, next.size)
	}
	p.active = next
	return next, nil
}

// takeNext returns the pack created ahead, waiting for it if it is being
// made. Callers hold wmu.
func (p *packs) takeNext() *ownPack {
	p.mu.Lock()
	for p.making {
		p.mu.Unlock()
		p.wg.Wait()
		p.mu.Lock()
	}
	next := p.next
	p.next = nil
	p.mu.Unlock()
	return next
}

// makeNext starts creating the next pack in the background, so that a
// rollover does not write a pack's zeros on an append's path.
func (p *packs) makeNext() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.making || p.next != nil || p.closed {
		return
	}
	p.making = true
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		op, err := p.create()
		p.mu.Lock()
		defer p.mu.Unlock()
		p.making = false
		if err == nil {
			if p.closed {
				p.discard(op)
				return
			}
			p.next = op
		}
		// A failure is left to the rollover, which creates the pack on
		// its own path and reports the error.
	}()
}

// create makes a new pack file: locked, its header written, filled with
// zeros to its size and synced, its name synced into the directory. The
// appends then write in place and sync the data alone: no metadata
// changes, no file-system journal commit on their path.
func (p *packs) create() (*ownPack, error) {
	if err := p.d.mkdirAll(p.dir); err != nil {
		return nil, err
	}
	base := filepath.Join(p.dir, fmt.Sprintf("%016x-%s", time.Now().UnixNano(), randomSuffix()))
	lock, err := p.d.fs.Lock(base + lockSuffix)
	if err != nil {
		return nil, err
	}
	path := base + packSuffix
	fail := func(err error) (*ownPack, error) {
		p.d.fs.Remove(path)
		p.d.fs.Remove(base + lockSuffix)
		lock.Close()
		return nil, err
	}
	f, err := p.d.fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fail(err)
	}
	size := int64(p.d.packSize)
	zeros := make([]byte, 1<<20)
	copy(zeros, packHeader())
	for off := int64(0); off < size; off += int64(len(zeros)) {
		chunk := zeros
		if rest := size - off; rest < int64(len(chunk)) {
			chunk = chunk[:rest]
		}
		if _, err := f.Write(chunk); err != nil {
			f.Close()
			return fail(err)
		}
		if off == 0 {
			zeros = make([]byte, len(zeros))
		}
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = p.d.syncDir(p.dir)
	}
	if err != nil {
		return fail(err)
	}
	if f, err = p.d.fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified); err != nil {
		return fail(err)
	}
	op := &ownPack{f: f, lock: lock, tail: packHeaderLen, size: size}
	op.cond = sync.NewCond(&op.smu)
	op.pf = &packFile{path: path, scanned: packHeaderLen, frames: map[int64]string{}, own: op}
	p.mu.Lock()
	p.files[path] = op.pf
	p.mu.Unlock()
	return op, nil
}

// seal ends this process's appends to op: its last frames are synced,
// its file closed and its lock released (another process may now remove
// it once its frames are dead). Callers hold wmu.
func (p *packs) seal(op *ownPack) {
	op.seal()
	p.mu.Lock()
	op.pf.own = nil
	op.pf.scanned = op.tail
	p.mu.Unlock()
	p.removeIfDead(op.pf)
}

// discard removes a pack created ahead and never used. Callers hold mu.
func (p *packs) discard(op *ownPack) {
	op.seal()
	p.d.fs.Remove(op.pf.path)
	p.d.fs.Remove(strings.TrimSuffix(op.pf.path, packSuffix) + lockSuffix)
	delete(p.files, op.pf.path)
}

// close seals the active pack and discards the one made ahead.
func (p *packs) close() {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.wg.Wait()
	if p.active != nil {
		p.seal(p.active)
		p.active = nil
	}
	p.mu.Lock()
	if p.next != nil {
		p.discard(p.next)
		p.next = nil
	}
	p.mu.Unlock()
}

func (op *ownPack) usable() bool {
	op.smu.Lock()
	defer op.smu.Unlock()
	return op.err == nil && !op.sealed
}

func (op *ownPack) fail(err error) {
	op.smu.Lock()
	defer op.smu.Unlock()
	if op.err == nil {
		op.err = err
	}
}

// wrote counts a frame written and returns its sequence number.
func (op *ownPack) wrote() uint64 {
	op.smu.Lock()
	defer op.smu.Unlock()
	op.written++
	return op.written
}

// waitSynced returns once frame seq is durable: one fdatasync covers the
// frames of every append that wrote before it started (group commit).
func (op *ownPack) waitSynced(seq uint64) error {
	op.smu.Lock()
	defer op.smu.Unlock()
	for op.synced < seq && op.err == nil {
		if op.syncing {
			op.cond.Wait()
			continue
		}
		target := op.written
		op.syncing = true
		op.smu.Unlock()
		err := op.f.SyncData()
		op.smu.Lock()
		op.syncing = false
		if err != nil {
			// After a failed fsync the file's state is unknown: the
			// pack takes no more frames (see room).
			op.err = err
		} else {
			op.synced = target
		}
		op.cond.Broadcast()
	}
	if op.synced >= seq {
		return nil
	}
	return op.err
}

// seal syncs what was written, closes the file and releases the lock.
func (op *ownPack) seal() {
	op.smu.Lock()
	defer op.smu.Unlock()
	for op.syncing {
		op.cond.Wait()
	}
	if op.sealed {
		return
	}
	op.sealed = true
	if op.synced < op.written && op.err == nil {
		if err := op.f.SyncData(); err != nil {
			op.err = err
		} else {
			op.synced = op.written
		}
	}
	if op.err == nil {
		op.err = errSealed
	}
	op.cond.Broadcast()
	op.f.Close()
	op.lock.Close()
}

var errSealed = errors.New("pack sealed")

// bytesReader is a packed object's range as an io.ReadCloser.
func bytesReader(b []byte) io.ReadCloser { return io.NopCloser(bytes.NewReader(b)) }
