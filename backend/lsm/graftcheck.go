package lsm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/record"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statedhq/stated/backend"
)

// graftCheck runs checkGraft once per process (the result depends only on
// the Pebble linked in). A variable so that a test can make it fail.
var graftCheck = sync.OnceValue(checkGraft)

// graftWarning logs the first fallback only: every restore with other
// handles would repeat it.
var graftWarning sync.Once

// graftUsable reports whether restores may graft: Options.NoGraft is off
// and checkGraft found that this Pebble reads what graft writes. Otherwise
// restores copy the other handles' key groups (see prepareExtra); the
// result is the same store content, slower.
func (b *Backend) graftUsable() bool {
	if b.lo.NoGraft {
		return false
	}
	if err := graftCheck(); err != nil {
		graftWarning.Do(func() {
			b.lo.Logger.Errorf("lsm: warning: restores copy instead of grafting: graft's MANIFEST edit does not match this Pebble: %v", err)
		})
		return false
	}
	return true
}

// graftProbe is what checkGraft grafted, kept for the guard test.
type graftProbe struct {
	fs vfs.FS
	// grafted is a copy of the base's MANIFEST as graft left it (Pebble
	// replaces it when it opens the store).
	grafted string
	// tables are the grafted tables, with their numbers in the base.
	tables []graftTable
	// srcManifest is the source store's MANIFEST, written by Pebble.
	srcManifest string
}

// checkGraft grafts a small store into another on an in-memory file
// system and checks that Pebble agrees with what graft wrote. See
// probeGraft.
func checkGraft() error {
	_, err := probeGraft()
	return err
}

// probeGraft grafts a store that holds a physical L0 table (with a range
// deletion and newer versions of keys below it) and a virtual L6 table
// (made by an excise) into a base store, and checks what the Pebble linked
// in makes of it:
//   - it opens the store, lists exactly the base's tables and the grafted
//     ones, each at its level with the bounds, sequence numbers, size and
//     backing file graft gave it, and finds the levels consistent;
//   - it reads every entry of both stores, and a new write shadows the
//     grafted versions of its key (the last sequence number was set);
//   - the MANIFEST snapshot Pebble writes when it opens the store encodes
//     each grafted table, and each virtual table's backing file, with the
//     very bytes graft wrote: graft's encoding is Pebble's.
func probeGraft() (p *graftProbe, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("pebble failed on the grafted store: %v", r)
		}
	}()
	fs := vfs.NewMem()
	opts := func() *pebble.Options {
		o := &pebble.Options{FS: fs, Merger: concatMerger, DisableWAL: true, FormatMajorVersion: pebble.FormatNewest,
			Logger: probeLogger{}, DisableAutomaticCompactions: true}
		o.EnsureDefaults()
		return o
	}
	key := func(prefix string, i int) []byte { return fmt.Appendf(nil, "%s%03d", prefix, i) }
	want := map[string]string{}
	fill := func(db *pebble.DB, prefix string, from, to int, version string) error {
		for i := from; i < to; i++ {
			v := fmt.Sprintf("%s-%d", version, i)
			if err := db.Set(key(prefix, i), []byte(v), pebble.NoSync); err != nil {
				return err
			}
			want[string(key(prefix, i))] = v
		}
		return db.Flush()
	}

	// The source.
	src, err := pebble.Open("src", opts())
	if err != nil {
		return nil, err
	}
	err = errors.Join(
		fill(src, "b", 0, 100, "old"),
		src.Compact(context.Background(), []byte("a"), []byte("c"), false),
		src.DeleteRange(key("b", 90), key("b", 95), pebble.NoSync),
		fill(src, "b", 40, 60, "new"),
		src.Excise(context.Background(), pebble.KeyRange{Start: key("b", 0), End: key("b", 10)}),
	)
	for i := 0; i < 10; i++ {
		delete(want, string(key("b", i)))
	}
	for i := 90; i < 95; i++ {
		delete(want, string(key("b", i)))
	}
	levels, lerr := src.SSTables()
	err = errors.Join(err, lerr, src.Close())
	if err != nil {
		return nil, fmt.Errorf("make the source store: %w", err)
	}
	g := &graftSource{h: &backend.Handle{}, dir: "src"}
	virtual := false
	for level, tables := range levels {
		for _, t := range tables {
			g.tables = append(g.tables, graftTable{level: level, info: t})
			virtual = virtual || t.Virtual
		}
	}
	if len(g.tables) != 2 || !virtual {
		return nil, fmt.Errorf("the source store has tables %v, want a physical and a virtual one", levels)
	}
	srcManifest, err := currentManifest(fs, "src")
	if err != nil {
		return nil, err
	}

	// The base.
	base, err := pebble.Open("base", opts())
	if err != nil {
		return nil, err
	}
	err = errors.Join(fill(base, "a", 0, 50, "base"), base.Compact(context.Background(), []byte("a"), []byte("b"), false))
	baseLevels, lerr := base.SSTables()
	err = errors.Join(err, lerr, base.Close())
	if err != nil {
		return nil, fmt.Errorf("make the base store: %w", err)
	}
	var next, lastSeq uint64
	nBase := 0
	for _, level := range baseLevels {
		for _, t := range level {
			next = max(next, uint64(t.FileNum), uint64(t.BackingSSTNum))
			lastSeq = max(lastSeq, uint64(t.LargestSeqNum))
			nBase++
		}
	}
	onDisk, err := maxFileNum(fs, "base")
	if err != nil {
		return nil, err
	}
	tables, _, err := graftInto(fs, "base", []*graftSource{g}, max(next, onDisk)+1, lastSeq)
	if err != nil {
		return nil, err
	}
	manifest, err := currentManifest(fs, "base")
	if err != nil {
		return nil, err
	}
	p = &graftProbe{fs: fs, grafted: "grafted-MANIFEST", tables: tables, srcManifest: fs.PathJoin("src", srcManifest)}
	if err := vfs.Copy(fs, fs.PathJoin("base", manifest), p.grafted); err != nil {
		return nil, err
	}

	o := opts()
	o.ErrorIfNotExists = true
	db, err := pebble.Open("base", o)
	if err != nil {
		return nil, fmt.Errorf("pebble does not open the grafted store: %w", err)
	}
	defer func() { err = errors.Join(err, db.Close()) }()
	if err := checkGraftedTables(db, tables, nBase); err != nil {
		return nil, err
	}
	if err := db.CheckLevels(nil); err != nil {
		return nil, fmt.Errorf("the grafted store's levels are inconsistent: %w", err)
	}
	got := map[string]string{}
	if err := (engine{db}).Scan(nil, nil, func(k, v []byte) (bool, error) {
		got[string(k)] = string(v)
		return true, nil
	}); err != nil {
		return nil, fmt.Errorf("read the grafted store: %w", err)
	}
	if len(got) != len(want) {
		return nil, fmt.Errorf("the grafted store holds %d entries, want %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			return nil, fmt.Errorf("the grafted store has %q = %q, want %q", k, got[k], v)
		}
	}
	if err := db.Set(key("b", 50), []byte("after"), pebble.NoSync); err != nil {
		return nil, err
	}
	if v, closer, err := db.Get(key("b", 50)); err != nil || string(v) != "after" {
		return nil, fmt.Errorf("a write after the graft reads back %q (%v): the last sequence number is wrong", v, err)
	} else {
		_ = closer.Close()
	}
	if err := checkSnapshotEncoding(fs, "base", manifest, tables); err != nil {
		return nil, err
	}
	return p, nil
}

// checkGraftedTables checks that db lists the nBase tables of the base
// and exactly the grafted tables as graft recorded them.
func checkGraftedTables(db *pebble.DB, tables []graftTable, nBase int) error {
	levels, err := db.SSTables()
	if err != nil {
		return fmt.Errorf("list the grafted store's tables: %w", err)
	}
	n := 0
	found := map[uint64]pebble.SSTableInfo{}
	at := map[uint64]int{}
	for level, ts := range levels {
		for _, t := range ts {
			n++
			found[uint64(t.FileNum)] = t
			at[uint64(t.FileNum)] = level
		}
	}
	if n != nBase+len(tables) {
		return fmt.Errorf("pebble lists %d tables in the grafted store, want %d of the base and %d grafted", n, nBase, len(tables))
	}
	same := func(a, b pebble.InternalKey) bool {
		return bytes.Equal(a.UserKey, b.UserKey) && a.Trailer == b.Trailer
	}
	for _, w := range tables {
		t, ok := found[w.newNum]
		switch {
		case !ok:
			return fmt.Errorf("pebble does not list grafted table %d", w.newNum)
		case at[w.newNum] != w.level:
			return fmt.Errorf("grafted table %d is at L%d, want L%d", w.newNum, at[w.newNum], w.level)
		case !same(t.Smallest, w.info.Smallest) || !same(t.Largest, w.info.Largest):
			return fmt.Errorf("grafted table %d has bounds [%s, %s], want [%s, %s]", w.newNum, t.Smallest, t.Largest, w.info.Smallest, w.info.Largest)
		case t.SmallestSeqNum != w.info.SmallestSeqNum || t.LargestSeqNum != w.info.LargestSeqNum:
			return fmt.Errorf("grafted table %d has sequence numbers [%d, %d], want [%d, %d]", w.newNum,
				t.SmallestSeqNum, t.LargestSeqNum, w.info.SmallestSeqNum, w.info.LargestSeqNum)
		case t.Size != w.info.Size || t.Virtual != w.info.Virtual || uint64(t.BackingSSTNum) != w.newBacking:
			return fmt.Errorf("grafted table %d has size %d, virtual %v, backing %d; want %d, %v, %d", w.newNum,
				t.Size, t.Virtual, t.BackingSSTNum, w.info.Size, w.info.Virtual, w.newBacking)
		}
	}
	return nil
}

// checkSnapshotEncoding checks that the MANIFEST Pebble wrote when it
// opened the grafted store in dir (its first record lists every table),
// which replaces grafted, holds graft's encoding of each grafted table and backing file.
func checkSnapshotEncoding(fs vfs.FS, dir, grafted string, tables []graftTable) error {
	name, err := currentManifest(fs, dir)
	if err != nil {
		return err
	}
	if name == grafted {
		// The edit graft wrote would be found in it.
		return fmt.Errorf("pebble did not replace the grafted %s when it opened the store", name)
	}
	f, err := fs.Open(fs.PathJoin(dir, name))
	if err != nil {
		return err
	}
	defer f.Close()
	var all []byte
	rr := record.NewReader(f, 0)
	for {
		r, err := rr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", name, err)
		}
		rec, err := io.ReadAll(r)
		if err != nil {
			return fmt.Errorf("read %s: %w", name, err)
		}
		all = append(all, rec...)
	}
	for _, t := range tables {
		if !bytes.Contains(all, appendGraftTable(nil, t)) {
			return fmt.Errorf("pebble encodes grafted table %d (L%d %s-%s) otherwise than graft does", t.newNum, t.level, t.info.Smallest, t.info.Largest)
		}
		if t.info.Virtual {
			info, err := fs.Stat(fs.PathJoin(dir, fmt.Sprintf("%06d.sst", t.newBacking)))
			if err != nil {
				return err
			}
			if !bytes.Contains(all, appendBacking(nil, t.newBacking, uint64(info.Size()))) {
				return fmt.Errorf("pebble encodes backing file %d otherwise than graft does", t.newBacking)
			}
		}
	}
	return nil
}

// probeLogger drops Pebble's lines; Fatalf panics, which probeGraft turns
// into its error.
type probeLogger struct{}

func (probeLogger) Infof(string, ...any)  {}
func (probeLogger) Errorf(string, ...any) {}
func (probeLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}
