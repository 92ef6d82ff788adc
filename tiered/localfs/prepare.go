package localfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statedhq/stated/tiered"
)

// MaxPrepared bounds the names a Store holds prepared at once; Prepare
// refuses more. The changelog's Writer keeps a handful ahead.
const MaxPrepared = 1024

var _ tiered.Preparer = (*Store)(nil)

// prep is one prepared name: ready once its Prepare settled it, with err
// nil if the empty file is in place and its directory entry durable.
type prep struct {
	done chan struct{} // closed when settled; shared by a Prepare's names
	err  error
	file os.FileInfo // the placeholder, to tell it from a file made since
}

// usable reports whether a taken preparation can take its Put. One whose
// placeholder another process removed since is usable too: putPrepared
// tells the new file from the placeholder and syncs the directory then.
func (p *prep) usable() bool { return p != nil && p.err == nil }

// take removes name's preparation and waits until it settled: then no
// Prepare touches the name any more. It returns nil when name was not
// prepared.
func (d *driver) take(name string) *prep {
	d.pmu.Lock()
	p := d.prepared[name]
	delete(d.prepared, name)
	d.pmu.Unlock()
	if p != nil {
		<-p.done
	}
	return p
}

// errBusy marks a name a Put is writing: Prepare leaves it alone, and
// it is no placeholder to Unprepare.
var errBusy = errors.New("a put is writing it")

// claim takes name's preparation (waiting until it settled) and marks the
// name busy until done is called, so that no Prepare links a placeholder
// under a Put writing the usual way (a placeholder linked before the
// Put's rename would be replaced by it and still look prepared, and
// Unprepare would then remove the Put's object). A Delete or Unprepare
// of a busy name waits for the Put.
func (d *driver) claim(name string) (prev *prep, done func()) {
	busy := &prep{done: make(chan struct{}), err: errBusy}
	d.pmu.Lock()
	if d.prepared == nil {
		d.prepared = map[string]*prep{}
	}
	prev = d.prepared[name]
	d.prepared[name] = busy
	d.pmu.Unlock()
	if prev != nil {
		<-prev.done
	}
	return prev, func() {
		d.pmu.Lock()
		if d.prepared[name] == busy {
			delete(d.prepared, name)
		}
		d.pmu.Unlock()
		close(busy.done)
	}
}

// Prepare implements tiered.Preparer: for each name, an empty file linked
// into place (link, unlike create or rename, fails if the name exists, so
// a Prepare can never truncate or replace an object), then every
// directory it linked into synced once.
func (s *Store) Prepare(ctx context.Context, names []string) error {
	d := s.d
	if d.readOnly {
		return errReadOnly
	}
	for _, n := range names {
		if err := tiered.ValidateName(n); err != nil {
			return fmt.Errorf("localfs: prepare: %w", err)
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	done := make(chan struct{})
	var mine []string
	entries := map[string]*prep{}
	d.pmu.Lock()
	if d.prepared == nil {
		d.prepared = map[string]*prep{}
	}
	if len(d.prepared)+len(names) > MaxPrepared {
		d.pmu.Unlock()
		return fmt.Errorf("localfs: prepare %d names: %d are prepared already, at most %d", len(names), len(d.prepared), MaxPrepared)
	}
	for _, n := range names {
		if _, ok := d.prepared[n]; ok {
			continue
		}
		p := &prep{done: done}
		d.prepared[n] = p
		entries[n] = p
		mine = append(mine, n)
	}
	d.pmu.Unlock()
	// A Put or Delete of one of these names meanwhile takes it and waits
	// for done, so nothing below races with them.
	dirs := map[string][]string{}
	for _, n := range mine {
		p := d.path(n)
		err := d.placeholder(p)
		if err != nil {
			entries[n].err = err
			continue
		}
		if fi, err := d.fs.Stat(p); err == nil {
			entries[n].file = fi
		}
		dirs[filepath.Dir(p)] = append(dirs[filepath.Dir(p)], n)
	}
	var first error
	for dir, ns := range dirs {
		if err := d.syncDir(dir); err != nil {
			for _, n := range ns {
				entries[n].err = fmt.Errorf("sync directory: %w", err)
			}
		}
	}
	for _, n := range mine {
		if err := entries[n].err; err != nil {
			if first == nil {
				first = err
			}
			d.pmu.Lock()
			if d.prepared[n] == entries[n] {
				delete(d.prepared, n)
			}
			d.pmu.Unlock()
		}
	}
	close(done)
	if first != nil {
		return fmt.Errorf("localfs: prepare: %w", first)
	}
	return nil
}

// placeholder links a new empty file to p. It fails with fs.ErrExist if p
// exists.
func (d *driver) placeholder(p string) error {
	if err := d.mkdirAll(filepath.Dir(p)); err != nil {
		return err
	}
	tmp, err := d.writeTempUnsynced()
	if err != nil {
		return err
	}
	err = d.fs.Link(tmp, p)
	d.fs.Remove(tmp)
	return err
}

// writeTempUnsynced creates an empty temporary file: a placeholder holds
// no data, so only its directory entry needs syncing.
func (d *driver) writeTempUnsynced() (string, error) {
	tmp := d.tempName()
	f, err := d.fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return "", err
	}
	if err := f.Close(); err != nil {
		d.fs.Remove(tmp)
		return "", err
	}
	return tmp, nil
}

// Unprepare implements tiered.Preparer. Each name is claimed while its
// placeholder goes, so a Put of it waits, and then writes a new object.
// It leaves the directories: a sibling being prepared or put may need
// them.
func (s *Store) Unprepare(ctx context.Context, names []string) error {
	d := s.d
	if d.readOnly {
		return errReadOnly
	}
	dirty := map[string]bool{}
	var first error
	for _, n := range names {
		prev, done := d.claim(n)
		if prev != nil && prev.err == nil {
			p := d.path(n)
			if err := d.fs.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) && first == nil {
				first = err
			}
			dirty[filepath.Dir(p)] = true
		}
		done()
	}
	for dir := range dirty {
		if err := d.syncDir(dir); err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return fmt.Errorf("localfs: unprepare: %w", first)
	}
	return nil
}

// putPrepared writes r into the prepared empty file p and syncs its data:
// the directory entry is durable already. If the file is not the
// placeholder Prepare made (someone else removed it, a "stated gc" of
// another process, and the open made a new one), the directory is synced
// too. A failure removes the file, so that the name holds nothing.
func (d *driver) putPrepared(p string, r io.Reader, placeholder os.FileInfo) (err error) {
	f, err := d.fs.OpenReadWrite(p, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	same := false
	if cur, err := f.Stat(); err == nil {
		same = sameFile(placeholder, cur)
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			if rerr := d.fs.Remove(p); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
				err = fmt.Errorf("%w (and removing the partial object failed: %v)", err, rerr)
			}
		}
	}()
	n, err := io.Copy(f, r)
	if err == nil && n == 0 {
		_, err = f.Write(nil) // stamps the modification time (see writeTemp)
	}
	if err != nil {
		return err
	}
	if err := f.SyncData(); err != nil {
		return err
	}
	if !same {
		return d.syncDir(filepath.Dir(p))
	}
	return nil
}
