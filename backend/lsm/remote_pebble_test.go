package lsm

// A spike of Pebble's shared storage over the checkpoint store, on a raw
// Pebble DB (not yet the lsm engine): what works and what does not, with
// the figures docs/lsm-remote.md reports. Run with -v to see them.

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/remote"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statedhq/stated/backend/lsm/remotestore"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
	"github.com/statedhq/stated/tiered/metered"
	"github.com/statedhq/stated/tiered/s3store/s3test"
	"github.com/statedhq/stated/tiered/storetest"
)

const (
	spikeLocator = remote.Locator("chk")
	spikeGroups  = 16
	spikeKeys    = 1000 // per key group
)

type spike struct {
	store   *metered.Store
	factory *remotestore.Factory
}

// spikeStores are the stores the main spike tests run over: memory, and
// the S3 server the tiered tests use (the real one s3test's environment
// names, else in-process gofakes3).
var spikeStores = []struct {
	name string
	open func(t *testing.T) tiered.Store
}{
	{"memstore", func(*testing.T) tiered.Store { return memstore.New() }},
	{"s3", func(t *testing.T) tiered.Store { return s3test.Store(t) }},
}

func newSpike(t *testing.T) *spike { return newSpikeOver(t, memstore.New()) }

func newSpikeOver(t *testing.T, base tiered.Store) *spike {
	t.Helper()
	store := metered.New(base)
	f, err := remotestore.NewFactory(map[remote.Locator]remotestore.Options{spikeLocator: {Store: store, SpoolDir: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	return &spike{store: store, factory: f}
}

// open opens (or reopens) a DB in dir whose SSTs are all born in the
// store, with a fresh block cache, so a reopen starts cold.
func (s *spike) open(t *testing.T, dir string, creator uint64, readOnly bool, edit ...func(*pebble.Options)) *pebble.DB {
	t.Helper()
	opts := &pebble.Options{
		FS:                 vfs.Default,
		DisableWAL:         true,
		ReadOnly:           readOnly,
		FormatMajorVersion: pebble.FormatNewest,
		MemTableSize:       1 << 20,
		Logger:             quietLogger{},
	}
	opts.Experimental.RemoteStorage = s.factory
	opts.Experimental.CreateOnShared = remote.CreateOnSharedAll
	opts.Experimental.CreateOnSharedLocator = spikeLocator
	for _, e := range edit {
		e(opts)
	}
	db, err := pebble.Open(dir, opts)
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	if !readOnly {
		// Before any flush: a shared object cannot be created without a
		// creator ID (objstorageprovider's sharedCheckInitialized).
		if err := db.SetCreatorID(creator); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

func spikeKey(kg uint16, i int) []byte {
	k := binary.BigEndian.AppendUint16(nil, kg)
	return fmt.Appendf(k, "k%05d", i)
}

// write runs round r over every key group: overwrite every (r+1)-th key
// and, from round 2, delete every 7th key; the model follows.
func writeRound(t *testing.T, db *pebble.DB, model map[string]string, r int) {
	t.Helper()
	b := db.NewBatch()
	for kg := range uint16(spikeGroups) {
		for i := range spikeKeys {
			k := spikeKey(kg, i)
			switch {
			case r >= 2 && i%7 == r%7:
				if err := b.Delete(k, nil); err != nil {
					t.Fatal(err)
				}
				delete(model, string(k))
			case i%(r+1) == 0:
				// Incompressible, so SSTs are as large as the state.
				v := fmt.Sprintf("v%d-%d-%d-%x", r, kg, i, storetest.Data(uint64(r)<<32|uint64(kg)<<16|uint64(i), 64))
				if err := b.Set(k, []byte(v), nil); err != nil {
					t.Fatal(err)
				}
				model[string(k)] = v
			}
		}
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		t.Fatal(err)
	}
}

// checkModel compares every key of the key groups [lo, hi] with the model
// and checks that the DB holds no key outside them.
func checkModel(t *testing.T, db *pebble.DB, model map[string]string, lo, hi uint16) {
	t.Helper()
	it, err := db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var got []string
	for it.First(); it.Valid(); it.Next() {
		k := string(it.Key())
		kg := binary.BigEndian.Uint16(it.Key())
		if kg < lo || kg > hi {
			t.Fatalf("key %q of key group %d is outside [%d, %d]", k, kg, lo, hi)
		}
		if want, ok := model[k]; !ok || want != string(it.Value()) {
			t.Fatalf("key %q = %.12q, want %.12q (present %v)", k, it.Value(), want, ok)
		}
		got = append(got, k)
	}
	if err := it.Error(); err != nil {
		t.Fatalf("iterate: %v", err)
	}
	want := 0
	for k := range model {
		if kg := binary.BigEndian.Uint16([]byte(k)); kg >= lo && kg <= hi {
			want++
		}
	}
	if len(got) != want {
		t.Fatalf("%d keys, want %d", len(got), want)
	}
}

// remoteTable is an SST of a DB's current version that lives in the store.
type remoteTable struct {
	level              int
	name               string
	smallest, largest  []byte
	size               uint64
	smallSeq, largeSeq uint64
}

// remoteTables lists the current version's SSTs, each with the name of its
// object (from objstorage.Provider.Path, "remote-<locator>://<name>"); it
// fails t if one is local.
func remoteTables(t *testing.T, db *pebble.DB) []remoteTable {
	t.Helper()
	res, err := tryRemoteTables(db)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// tryRemoteTables is remoteTables that returns its complaint: with
// compactions running, a table of SSTables may be gone from the provider
// by the time it is listed.
func tryRemoteTables(db *pebble.DB) ([]remoteTable, error) {
	levels, err := db.SSTables()
	if err != nil {
		return nil, err
	}
	names := map[uint64]string{}
	for _, m := range db.ObjProvider().List() {
		if m.IsRemote() {
			p := db.ObjProvider().Path(m)
			name, ok := strings.CutPrefix(p, "remote-"+string(spikeLocator)+"://")
			if !ok {
				return nil, fmt.Errorf("remote object path %q has another locator", p)
			}
			names[uint64(m.DiskFileNum)] = name
		}
	}
	var res []remoteTable
	for level, tables := range levels {
		for _, ti := range tables {
			name, ok := names[uint64(ti.BackingSSTNum)]
			if !ok || ti.BackingType != pebble.BackingTypeShared {
				return nil, fmt.Errorf("L%d table %s is %s, not in the store", level, ti.FileNum, ti.BackingType)
			}
			res = append(res, remoteTable{
				level: level, name: name, size: ti.Size,
				smallest: slices.Clone(ti.Smallest.UserKey), largest: slices.Clone(ti.Largest.UserKey),
				smallSeq: uint64(ti.SmallestSeqNum), largeSeq: uint64(ti.LargestSeqNum),
			})
		}
	}
	return res, nil
}

// storeObjects returns the SSTs and the ref markers in the store.
func (s *spike) storeObjects(t *testing.T) (ssts, refs []string) {
	t.Helper()
	err := tiered.Walk(context.Background(), s.store, "", func(o tiered.ObjectInfo) error {
		switch {
		case strings.HasSuffix(o.Name, ".sst"):
			ssts = append(ssts, o.Name)
		case strings.Contains(o.Name, ".sst.ref."):
			refs = append(refs, o.Name)
		default:
			return fmt.Errorf("unexpected object %s", o.Name)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ssts, refs
}

// waitObjects waits until the store's SSTs are exactly want: Pebble deletes
// obsolete objects in the background after a compaction.
func (s *spike) waitObjects(t *testing.T, want []string) {
	t.Helper()
	s.waitObjectsOf(t, func() []string { return want })
}

// waitObjectsOf is waitObjects for a set that must be read again at each
// poll: a DB's own live objects change while Pebble deletes the obsolete
// outputs of a compaction that just ended.
func (s *spike) waitObjectsOf(t *testing.T, wantNow func() []string) {
	t.Helper()
	var got, want []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		want = slices.Sorted(slices.Values(wantNow()))
		if got, _ = s.storeObjects(t); slices.Equal(got, want) {
			return
		}
	}
	t.Fatalf("store holds SSTs %q, want %q", got, want)
}

func names(ts []remoteTable) []string {
	var res []string
	for _, t := range ts {
		res = append(res, t.name)
	}
	return res
}

func localSSTs(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var res []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".sst") {
			res = append(res, e.Name())
		}
	}
	return res
}

var everything = [2][]byte{{0}, {0xff, 0xff, 0xff}}

// TestRemotePebbleSSTsLiveInStore: with CreateOnSharedAll every flush and
// compaction output is an object in the tiered store (plus one empty ref
// marker), nothing is written locally, obsolete objects are deleted, and a
// cold reopen reads through ranged reads only.
func TestRemotePebbleSSTsLiveInStore(t *testing.T) {
	for _, st := range spikeStores {
		t.Run(st.name, func(t *testing.T) { testSSTsLiveInStore(t, newSpikeOver(t, st.open(t))) })
	}
}

func testSSTsLiveInStore(t *testing.T, s *spike) {
	dir := t.TempDir()
	// No automatic compaction, so a round's puts are its flushes'.
	db := s.open(t, dir, 7, false, DisableAutomaticCompactions)
	model := map[string]string{}
	for r := range 6 {
		// Counted from before the round: a full memtable flushes in the
		// background while the round writes (under load, before the
		// explicit flush even starts), and those puts are the round's.
		before := s.store.Counts()
		writeRound(t, db, model, r)
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
		after := s.store.Counts()
		puts := after.Calls[tiered.OpPut] - before.Calls[tiered.OpPut]
		up := after.BytesUp - before.BytesUp
		t.Logf("flush %d: %d puts, %d bytes to the store", r, puts, up)
		if puts < 2 || puts%2 != 0 || up == 0 {
			t.Fatalf("flush %d: %d puts of %d bytes, want an SST and its marker per table", r, puts, up)
		}
	}
	if err := db.Compact(context.Background(), everything[0], everything[1], true); err != nil {
		t.Fatal(err)
	}
	live := remoteTables(t, db)
	s.waitObjects(t, names(live))
	_, refs := s.storeObjects(t)
	if len(refs) != len(live) {
		t.Fatalf("%d ref markers for %d live SSTs: %q", len(refs), len(live), refs)
	}
	for _, tb := range live {
		if !slices.ContainsFunc(refs, func(r string) bool { return strings.HasPrefix(r, tb.name+".ref.7.") }) {
			t.Errorf("no marker of creator 7 for %s in %q", tb.name, refs)
		}
	}
	if l := localSSTs(t, dir); len(l) != 0 {
		t.Fatalf("local SSTs %q", l)
	}
	checkModel(t, db, model, 0, spikeGroups-1)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// Cold: a new block cache over the same directory.
	db = s.open(t, dir, 7, false)
	defer db.Close()
	keys := make([][]byte, 0, 50)
	for i := range 50 {
		keys = append(keys, spikeKey(uint16(i%spikeGroups), (i*37)%spikeKeys))
	}
	get := func() (ranges, whole, down uint64) {
		before := s.store.Counts()
		for _, k := range keys {
			v, c, err := db.Get(k)
			if want, ok := model[string(k)]; ok {
				if err != nil || string(v) != want {
					t.Fatalf("get %q: %q, %v", k, v, err)
				}
				c.Close()
			} else if err != pebble.ErrNotFound {
				t.Fatalf("get %q of a deleted key: %v", k, err)
			}
		}
		after := s.store.Counts()
		return after.Calls[tiered.OpGetRange] - before.Calls[tiered.OpGetRange],
			after.Calls[tiered.OpGet] - before.Calls[tiered.OpGet], after.BytesDown - before.BytesDown
	}
	ranges, whole, down := get()
	var total uint64
	for _, tb := range live {
		total += tb.size
	}
	t.Logf("cold: %d gets over %d SSTs of %d bytes: %d ranged reads, %d bytes from the store", len(keys), len(live), total, ranges, down)
	if ranges == 0 || whole != 0 {
		t.Fatalf("cold gets made %d ranged and %d whole-object reads", ranges, whole)
	}
	if down >= total {
		t.Errorf("cold gets read %d bytes, the whole state is %d", down, total)
	}
	if ranges, _, _ := get(); ranges != 0 {
		t.Errorf("warm gets made %d ranged reads", ranges)
	}
}

func DisableAutomaticCompactions(o *pebble.Options) { o.DisableAutomaticCompactions = true }

func (s *spike) compact(t *testing.T, db *pebble.DB) {
	t.Helper()
	if err := db.Compact(context.Background(), everything[0], everything[1], true); err != nil {
		t.Fatal(err)
	}
}

// checkpointed writes three flushed rounds with automatic compactions off
// (so that nothing races the checkpoint) and checkpoints the DB into chk.
// It returns the open DB, the SSTs the checkpoint holds, and the model.
func (s *spike) checkpointed(t *testing.T, dir, chk string) (*pebble.DB, []remoteTable, map[string]string) {
	t.Helper()
	db := s.open(t, dir, 7, false, DisableAutomaticCompactions)
	model := map[string]string{}
	for r := range 3 {
		writeRound(t, db, model, r)
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	held := remoteTables(t, db)
	before := s.store.Counts()
	if err := db.Checkpoint(chk); err != nil {
		t.Fatal(err)
	}
	if puts := s.store.Counts().Calls[tiered.OpPut] - before.Calls[tiered.OpPut]; puts != 0 {
		t.Fatalf("Checkpoint wrote %d objects to the store", puts)
	}
	if l := localSSTs(t, chk); len(l) != 0 {
		t.Fatalf("Checkpoint copied SSTs %q", l)
	}
	ents, _ := os.ReadDir(chk)
	if !slices.ContainsFunc(ents, func(e os.DirEntry) bool { return strings.HasPrefix(e.Name(), "REMOTE-OBJ-CATALOG") }) {
		t.Fatalf("checkpoint holds no remote object catalog")
	}
	return db, held, model
}

// TestRemotePebbleCheckpointProtectionIsInMemory: DB.Checkpoint copies no
// remote SST (it copies the remote object catalog), but the protection it
// gives them (objstorageprovider's CheckpointState: protectedObjects) lives
// only as long as the DB instance: after a reopen a compaction deletes the
// objects the checkpoint needs.
func TestRemotePebbleCheckpointProtectionIsInMemory(t *testing.T) {
	s := newSpike(t)
	dir, chk := t.TempDir(), t.TempDir()+"/chk"
	db, held, _ := s.checkpointed(t, dir, chk)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = s.open(t, dir, 7, false, DisableAutomaticCompactions)
	defer db.Close()
	s.compact(t, db)
	s.waitObjects(t, names(remoteTables(t, db)))
	ssts, _ := s.storeObjects(t)
	for _, n := range names(held) {
		if slices.Contains(ssts, n) {
			t.Fatalf("the compaction after a reopen kept checkpoint SST %s", n)
		}
	}
	// Pebble reports a missing object as data corruption, whose default
	// handler is Logger.Fatalf; record it instead.
	var corrupt []string
	cdb := s.open(t, chk, 0, true, func(o *pebble.Options) {
		o.EventListener = &pebble.EventListener{DataCorruption: func(info pebble.DataCorruptionInfo) {
			corrupt = append(corrupt, info.String())
		}}
	})
	defer cdb.Close()
	it, err := cdb.NewIter(nil)
	if err == nil {
		for it.First(); it.Valid(); it.Next() {
		}
		err = it.Close()
	}
	if err == nil || len(corrupt) == 0 {
		t.Fatalf("the checkpoint reads whole after its SSTs were deleted (error %v, corruption events %q)", err, corrupt)
	}
	t.Logf("after reopen+compact: all %d checkpoint SSTs deleted; reading the checkpoint: %v", len(held), err)
}

// TestRemotePebbleCheckpointLeaksProtected: an SST a checkpoint protected
// that a compaction of the same DB instance makes obsolete is never
// deleted: sharedUnref returns early for protected objects ("TODO(radu):
// we need a mechanism to unref the object when it becomes unprotected"),
// and Remove drops it from the remote object catalog all the same, so no
// later instance knows it. Its object and its marker stay in the store.
func TestRemotePebbleCheckpointLeaksProtected(t *testing.T) {
	s := newSpike(t)
	dir, chk := t.TempDir(), t.TempDir()+"/chk"
	db, held, model := s.checkpointed(t, dir, chk)
	writeRound(t, db, model, 3)
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	s.compact(t, db)
	// The round-3 flush (unprotected) goes; the protected inputs stay.
	s.waitObjects(t, append(names(remoteTables(t, db)), names(held)...))
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = s.open(t, dir, 7, false, DisableAutomaticCompactions)
	defer db.Close()
	s.compact(t, db)
	s.waitObjects(t, append(names(remoteTables(t, db)), names(held)...))
	_, refs := s.storeObjects(t)
	known := map[string]bool{}
	for _, m := range db.ObjProvider().List() {
		if m.IsRemote() {
			known[strings.TrimPrefix(db.ObjProvider().Path(m), "remote-"+string(spikeLocator)+"://")] = true
		}
	}
	for _, n := range names(held) {
		if known[n] {
			t.Fatalf("the reopened DB still knows %s: it could delete it", n)
		}
		if !slices.ContainsFunc(refs, func(r string) bool { return strings.HasPrefix(r, n+".ref.7.") }) {
			t.Fatalf("the marker of leaked %s is gone: %q", n, refs)
		}
	}
	checkModel(t, db, model, 0, spikeGroups-1)
	t.Logf("%d SSTs and their markers leaked; the DB's catalog knows none of them", len(held))
}

// handOff is the protocol docs/lsm-remote.md proposes for a checkpoint:
// for each remote SST of the current version, write stated's own empty
// marker "<object>.ref.0.<checkpoint>" (creator ID 0 is never a Pebble
// instance's: objstorage.CreatorID.IsSet), then check that a marker of a
// Pebble instance still exists. sharedUnref deletes its own marker before
// it lists the others, so once stated's marker is written while Pebble's
// is still there, no later sharedUnref can miss it. If Pebble's marker is
// gone, the object may be on its way out: a real snapshot retries with the
// new version; the spike fails.
func (s *spike) handOff(t *testing.T, db *pebble.DB, checkpoint int) []remoteTable {
	t.Helper()
	tables := remoteTables(t, db)
	ctx := context.Background()
	for _, tb := range tables {
		mine := fmt.Sprintf("%s.ref.0.%06d", tb.name, checkpoint)
		if err := tiered.PutBytes(ctx, s.store, mine, nil); err != nil {
			t.Fatal(err)
		}
		page, err := s.store.List(ctx, tb.name+".ref.", "", 0)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(page.Objects, func(o tiered.ObjectInfo) bool { return o.Name != mine && !strings.HasPrefix(o.Name, tb.name+".ref.0.") }) {
			t.Fatalf("no Pebble marker left for %s: it may be deleted under the checkpoint", tb.name)
		}
	}
	return tables
}

// release drops stated's marker of checkpoint and deletes each object no
// marker holds any more: sharedUnref's rule, run by the registry.
func (s *spike) release(t *testing.T, tables []remoteTable, checkpoint int) (deleted int) {
	t.Helper()
	ctx := context.Background()
	for _, tb := range tables {
		if err := s.store.Delete(ctx, fmt.Sprintf("%s.ref.0.%06d", tb.name, checkpoint)); err != nil {
			t.Fatal(err)
		}
		page, err := s.store.List(ctx, tb.name+".ref.", "", 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Objects) == 0 {
			if err := s.store.Delete(ctx, tb.name); err != nil {
				t.Fatal(err)
			}
			deleted++
		}
	}
	return deleted
}

// restoreByReference ingests the tables into db as external files bounded
// to the key groups [lo, hi]: one IngestExternalFiles per level from L6 up
// and one per L0 file, oldest first, because the files of one ingestion
// must not overlap and each ingestion gets a newer sequence number than
// the one before (so newer levels shadow older ones, as in the source).
func restoreByReference(t *testing.T, db *pebble.DB, tables []remoteTable, lo, hi uint16) (calls int) {
	t.Helper()
	start := binary.BigEndian.AppendUint16(nil, lo)
	end := binary.BigEndian.AppendUint16(nil, hi+1)
	var batches [][]remoteTable
	for level := 6; level >= 1; level-- {
		var b []remoteTable
		for _, tb := range tables {
			if tb.level == level {
				b = append(b, tb)
			}
		}
		batches = append(batches, b)
	}
	var l0 []remoteTable
	for _, tb := range tables {
		if tb.level == 0 {
			l0 = append(l0, tb)
		}
	}
	slices.SortFunc(l0, func(a, b remoteTable) int { return int(a.largeSeq) - int(b.largeSeq) })
	for _, tb := range l0 {
		batches = append(batches, []remoteTable{tb})
	}
	for _, b := range batches {
		var ext []pebble.ExternalFile
		for _, tb := range b {
			if bytes.Compare(tb.largest, start) < 0 || bytes.Compare(tb.smallest, end) >= 0 {
				continue
			}
			e := pebble.ExternalFile{
				Locator: spikeLocator, ObjName: tb.name, Size: tb.size, HasPointKey: true,
				StartKey: tb.smallest, EndKey: tb.largest, EndKeyIsInclusive: true,
			}
			if bytes.Compare(e.StartKey, start) < 0 {
				e.StartKey = start
			}
			if bytes.Compare(e.EndKey, end) >= 0 {
				e.EndKey, e.EndKeyIsInclusive = end, false
			}
			ext = append(ext, e)
		}
		if len(ext) == 0 {
			continue
		}
		if _, err := db.IngestExternalFiles(context.Background(), ext); err != nil {
			t.Fatalf("ingest %d external files: %v", len(ext), err)
		}
		calls++
	}
	return calls
}

// TestRemotePebbleHandOffAndRestoreByReference: a checkpoint as a hand-off
// (stated's markers, no copy), survived by a compaction after a reopen of
// the source; a restore of key groups [4, 11] into a fresh DB by external
// ingestion, with no object written or copied; the restored DB compacting
// without touching the source's objects; and the release of the
// checkpoint deleting exactly the objects nothing references.
func TestRemotePebbleHandOffAndRestoreByReference(t *testing.T) {
	for _, st := range spikeStores {
		t.Run(st.name, func(t *testing.T) { testHandOffAndRestoreByReference(t, newSpikeOver(t, st.open(t))) })
	}
}

func testHandOffAndRestoreByReference(t *testing.T, s *spike) {
	dir := t.TempDir()
	db := s.open(t, dir, 7, false, DisableAutomaticCompactions)
	model := map[string]string{}
	for r := range 4 {
		writeRound(t, db, model, r)
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
		if r == 1 {
			s.compact(t, db) // some levels below L0
		}
	}
	before := s.store.Counts()
	held := s.handOff(t, db, 1)
	c := s.store.Counts()
	t.Logf("hand-off of %d SSTs: %d puts of %d bytes, %d lists", len(held), c.Calls[tiered.OpPut]-before.Calls[tiered.OpPut],
		c.BytesUp-before.BytesUp, c.Calls[tiered.OpList]-before.Calls[tiered.OpList])
	levels := map[int]int{}
	for _, tb := range held {
		levels[tb.level]++
	}
	if len(levels) < 2 || levels[0] < 2 {
		t.Fatalf("the checkpoint's SSTs per level %v: want L0 files and a lower level", levels)
	}
	chkModel := maps.Clone(model)

	// The source goes on: a reopen (Pebble's own protection is gone) and a
	// compaction that makes every held SST obsolete.
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = s.open(t, dir, 7, false, DisableAutomaticCompactions)
	writeRound(t, db, model, 4)
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	s.compact(t, db)
	s.waitObjects(t, append(names(remoteTables(t, db)), names(held)...))

	// Restore key groups [4, 11] by reference into a fresh DB.
	rdir := t.TempDir()
	before = s.store.Counts()
	start := time.Now()
	rdb := s.open(t, rdir, 8, false, DisableAutomaticCompactions)
	calls := restoreByReference(t, rdb, held, 4, 11)
	took := time.Since(start)
	c = s.store.Counts()
	t.Logf("restore by reference of %d SSTs: %d ingestions in %v; store calls: %d puts, %d stats, %d ranged reads",
		len(held), calls, took, c.Calls[tiered.OpPut]-before.Calls[tiered.OpPut],
		c.Calls[tiered.OpStat]-before.Calls[tiered.OpStat], c.Calls[tiered.OpGetRange]-before.Calls[tiered.OpGetRange])
	if puts := c.Calls[tiered.OpPut] - before.Calls[tiered.OpPut]; puts != 0 {
		t.Fatalf("the restore wrote %d objects", puts)
	}
	if l := localSSTs(t, rdir); len(l) != 0 {
		t.Fatalf("the restore made local SSTs %q", l)
	}
	checkModel(t, rdb, chkModel, 4, 11)
	levels2, _ := rdb.SSTables()
	for _, l := range levels2 {
		for _, ti := range l {
			if ti.BackingType != pebble.BackingTypeExternal {
				t.Fatalf("restored table %s is %s, want external", ti.FileNum, ti.BackingType)
			}
		}
	}

	// The restored DB writes and compacts: its outputs are its own
	// (creator 8); the external objects are never deleted by Pebble
	// (SharedNoCleanup), so the source's objects stay.
	writeRound(t, rdb, chkModel, 5)
	if err := rdb.Flush(); err != nil {
		t.Fatal(err)
	}
	s.compact(t, rdb)
	for k := range chkModel {
		if kg := binary.BigEndian.Uint16([]byte(k)); kg < 4 || kg > 11 {
			delete(chkModel, k)
		}
	}
	// writeRound wrote all key groups into rdb; clip them as a rescale's
	// excise would.
	if err := rdb.Excise(context.Background(), pebble.KeyRange{Start: binary.BigEndian.AppendUint16(nil, 0), End: binary.BigEndian.AppendUint16(nil, 4)}); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Excise(context.Background(), pebble.KeyRange{Start: binary.BigEndian.AppendUint16(nil, 12), End: binary.BigEndian.AppendUint16(nil, 0xffff)}); err != nil {
		t.Fatal(err)
	}
	checkModel(t, rdb, chkModel, 4, 11)
	ownObjects := func() []string {
		own := []string{}
		for _, m := range rdb.ObjProvider().List() {
			if m.IsRemote() && m.Remote.CreatorID == 8 {
				own = append(own, strings.TrimPrefix(rdb.ObjProvider().Path(m), "remote-"+string(spikeLocator)+"://"))
			}
		}
		return own
	}
	s.waitObjectsOf(t, func() []string { return slices.Concat(names(remoteTables(t, db)), names(held), ownObjects()) })
	// What stays of the restored DB's own objects: those of its live
	// tables. The provider still lists a compaction's obsolete outputs
	// until Pebble's cleanup deletes them (in the background; Close waits
	// for it), so a store that matches ownObjects() now may still lose
	// some of them below.
	levels3, err := rdb.SSTables()
	if err != nil {
		t.Fatal(err)
	}
	liveNums := map[uint64]bool{}
	for _, l := range levels3 {
		for _, ti := range l {
			liveNums[uint64(ti.BackingSSTNum)] = true
		}
	}
	var own []string
	for _, m := range rdb.ObjProvider().List() {
		if m.IsRemote() && m.Remote.CreatorID == 8 && liveNums[uint64(m.DiskFileNum)] {
			own = append(own, strings.TrimPrefix(rdb.ObjProvider().Path(m), "remote-"+string(spikeLocator)+"://"))
		}
	}

	// Release the checkpoint: stated's registry deletes what no marker
	// holds. The source's SSTs of the checkpoint go; the source's live ones
	// and the restored DB's own ones stay.
	if err := rdb.Close(); err != nil {
		t.Fatal(err)
	}
	deleted := s.release(t, held, 1)
	if deleted != len(held) {
		t.Fatalf("release deleted %d of %d checkpoint SSTs", deleted, len(held))
	}
	s.waitObjects(t, slices.Concat(names(remoteTables(t, db)), own))
	checkModel(t, db, model, 0, spikeGroups-1)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestRemotePebbleRestoreEdges: what external ingestion does with the
// shapes stated's SSTs can have. Each ingested file gets one sequence
// number for all its keys (ingest.go: ingestUpdateSeqNum).
func TestRemotePebbleRestoreEdges(t *testing.T) {
	withMerger := func(o *pebble.Options) {
		o.DisableAutomaticCompactions = true
		o.Merger = concatMerger
	}
	restored := func(t *testing.T, s *spike, db *pebble.DB) *pebble.DB {
		t.Helper()
		rdb := s.open(t, t.TempDir(), 8, false, withMerger)
		t.Cleanup(func() { rdb.Close() })
		restoreByReference(t, rdb, remoteTables(t, db), 0, spikeGroups-1)
		return rdb
	}
	get := func(t *testing.T, db *pebble.DB, k []byte) string {
		t.Helper()
		v, c, err := db.Get(k)
		if err != nil {
			t.Fatalf("get %q: %v", k, err)
		}
		defer c.Close()
		return string(v)
	}

	// List appends are merge operands; flushes of separate memtables keep
	// them in separate files, which ingest in order.
	t.Run("MergeOperandsAcrossFiles", func(t *testing.T) {
		s := newSpike(t)
		db := s.open(t, t.TempDir(), 7, false, withMerger)
		defer db.Close()
		k := spikeKey(3, 1)
		for _, op := range []string{"a", "b", "c"} {
			if err := db.Merge(k, []byte(op), pebble.NoSync); err != nil {
				t.Fatal(err)
			}
			if err := db.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		if got := get(t, restored(t, s, db), k); got != "abc" {
			t.Fatalf("restored list = %q, want %q", got, "abc")
		}
	})

	// An open snapshot makes a flush keep two versions of one key in one
	// file; with one sequence number for the whole file they tie.
	t.Run("VersionsPinnedBySnapshot", func(t *testing.T) {
		s := newSpike(t)
		db := s.open(t, t.TempDir(), 7, false, withMerger)
		defer db.Close()
		k := spikeKey(3, 2)
		if err := db.Set(k, []byte("old"), pebble.NoSync); err != nil {
			t.Fatal(err)
		}
		snap := db.NewSnapshot()
		defer snap.Close()
		if err := db.Set(k, []byte("new"), pebble.NoSync); err != nil {
			t.Fatal(err)
		}
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
		src, rst := get(t, db, k), get(t, restored(t, s, db), k)
		if src != "new" || rst != "new" {
			t.Fatalf("source reads %q, restored reads %q; want the newest version", src, rst)
		}
	})

	// A range deletion pinned over a point of the same file by a snapshot.
	t.Run("RangeDeletionPinnedBySnapshot", func(t *testing.T) {
		s := newSpike(t)
		db := s.open(t, t.TempDir(), 7, false, withMerger)
		defer db.Close()
		k := spikeKey(3, 2)
		if err := db.Set(k, []byte("old"), pebble.NoSync); err != nil {
			t.Fatal(err)
		}
		if err := db.Set(spikeKey(9, 0), []byte("other"), pebble.NoSync); err != nil {
			t.Fatal(err)
		}
		snap := db.NewSnapshot()
		defer snap.Close()
		if err := db.DeleteRange(spikeKey(3, 0), spikeKey(4, 0), pebble.NoSync); err != nil {
			t.Fatal(err)
		}
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
		_, _, srcErr := db.Get(k)
		rdb := restored(t, s, db)
		v, c, err := rdb.Get(k)
		if err == nil {
			c.Close()
		}
		if srcErr != pebble.ErrNotFound || err != pebble.ErrNotFound {
			t.Fatalf("a deleted key: source %v, restored %q, %v; want not found in both", srcErr, v, err)
		}
		if get(t, rdb, spikeKey(9, 0)) != "other" {
			t.Fatal("the key outside the deleted range is lost")
		}
	})
}

// TestRemotePebbleSecondaryCache: with SecondaryCacheSizeBytes the local
// disk caches remote blocks (objstorageprovider/sharedcache), so a read
// that misses a tiny block cache does not go back to the store; without
// it, it does.
func TestRemotePebbleSecondaryCache(t *testing.T) {
	for _, secondary := range []int64{0, 64 << 20} {
		s := newSpike(t)
		dir := t.TempDir()
		model := map[string]string{}
		// No compaction, so the second scan reads the files the first did.
		db := s.open(t, dir, 7, false, DisableAutomaticCompactions)
		for r := range 3 {
			writeRound(t, db, model, r)
		}
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		cache := pebble.NewCache(64 << 10)
		db = s.open(t, dir, 7, false, DisableAutomaticCompactions, func(o *pebble.Options) {
			o.Cache = cache
			o.Experimental.SecondaryCacheSizeBytes = secondary
		})
		pass := func() uint64 {
			before := s.store.Counts().Calls[tiered.OpGetRange]
			checkModel(t, db, model, 0, spikeGroups-1)
			return s.store.Counts().Calls[tiered.OpGetRange] - before
		}
		// The secondary cache is filled by Pebble's background writers
		// (sharedcache's writeWorkers), so on a loaded machine the first
		// warm scan may still miss a few blocks: scan again, up to a
		// bound, until one reads nothing. Without the cache every scan
		// reads.
		first, second := pass(), pass()
		for i := 0; i < 20 && second > 0 && secondary > 0; i++ {
			time.Sleep(50 * time.Millisecond)
			second = pass()
		}
		db.Close()
		cache.Unref()
		t.Logf("full scans, 64 KiB block cache, %d-byte secondary cache: %d ranged reads cold, %d warm", secondary, first, second)
		if first == 0 || (secondary > 0) != (second == 0) {
			t.Fatalf("secondary cache %d: ranged reads %d cold, %d warm", secondary, first, second)
		}
	}
}

// TestRemotePebbleHandOffRacesCompactions: the hand-off protocol while
// compactions run (automatic ones, and a goroutine compacting everything
// in a loop). A hand-off whose check finds Pebble's marker gone gives its
// markers back (the release rule) and retries with the new version. Every
// checkpoint taken must then restore right after its source reopened and
// compacted all its SSTs away, and releasing them all must leave only the
// source's live SSTs.
func TestRemotePebbleHandOffRacesCompactions(t *testing.T) {
	s := newSpike(t)
	dir := t.TempDir()
	db := s.open(t, dir, 7, false)
	ctx := context.Background()
	stop := make(chan struct{})
	compacted := make(chan error, 1)
	go func() {
		var err error
		for n := 0; err == nil; n++ {
			select {
			case <-stop:
				compacted <- nil
				return
			default:
			}
			err = db.Compact(ctx, everything[0], everything[1], n%2 == 0)
		}
		compacted <- err
	}()
	type chk struct {
		tables []remoteTable
		model  map[string]string
	}
	var chks []chk
	model := map[string]string{}
	retries := 0
	for n := 1; n <= 12; n++ {
		writeRound(t, db, model, n)
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
		for attempt := 0; ; attempt++ {
			if attempt == 50 {
				t.Fatalf("checkpoint %d: no hand-off in 50 attempts", n)
			}
			tables, err := tryRemoteTables(db)
			if err != nil {
				retries++
				continue
			}
			// Give the compactions time to make listed tables obsolete
			// before their markers are written: the race under test.
			time.Sleep(time.Duration((n+attempt)%3+1) * 10 * time.Millisecond)
			var failed bool
			var marked []remoteTable
			for _, tb := range tables {
				mine := fmt.Sprintf("%s.ref.0.%06d", tb.name, n)
				if err := tiered.PutBytes(ctx, s.store, mine, nil); err != nil {
					t.Fatal(err)
				}
				marked = append(marked, tb)
				page, err := s.store.List(ctx, tb.name+".ref.", "", 0)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.ContainsFunc(page.Objects, func(o tiered.ObjectInfo) bool {
					return !strings.HasPrefix(o.Name, tb.name+".ref.0.")
				}) {
					failed = true
					break
				}
			}
			if failed {
				s.release(t, marked, n)
				retries++
				continue
			}
			chks = append(chks, chk{tables: tables, model: maps.Clone(model)})
			break
		}
	}
	close(stop)
	if err := <-compacted; err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = s.open(t, dir, 7, false)
	defer db.Close()
	writeRound(t, db, model, 13)
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	s.compact(t, db)
	for i, c := range chks {
		rdb := s.open(t, t.TempDir(), uint64(100+i), false, DisableAutomaticCompactions)
		restoreByReference(t, rdb, c.tables, 0, spikeGroups-1)
		checkModel(t, rdb, c.model, 0, spikeGroups-1)
		if err := rdb.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range chks {
		s.release(t, c.tables, i+1)
	}
	s.waitObjects(t, names(remoteTables(t, db)))
	t.Logf("%d checkpoints handed off while compacting, %d retries; all restored, then released", len(chks), retries)
}
