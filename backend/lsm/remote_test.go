package lsm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/refcount/markers"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
	"github.com/statedhq/stated/tiered/metered"
)

// remoteEnv opens instances whose SSTs live in store.
func remoteEnv(t *testing.T) (*env, *metered.Store) {
	e := newEnv(t)
	store := metered.New(memstore.New())
	return e, store
}

func withRemote(store tiered.Store) func(*backend.Options, *Options) {
	return func(_ *backend.Options, lo *Options) {
		lo.Remote = &RemoteOptions{Store: store, CacheBytes: 8 << 20}
		lo.MemTableSize = 256 << 10
	}
}

func listAll(t *testing.T, s tiered.Store, prefix string) []string {
	t.Helper()
	var names []string
	must(t, tiered.Walk(context.Background(), s, prefix, func(o tiered.ObjectInfo) error {
		names = append(names, o.Name)
		return nil
	}))
	return names
}

// TestRemoteMode: the instance's SSTs are objects under
// "<job>/shared/lsm/", none is local, reads are right, changelog bases
// are hand-offs the instance holds until told, canonical snapshots work,
// and Close leaves
// nothing in the store or the spool directory.
func TestRemoteMode(t *testing.T) {
	e, store := remoteEnv(t)
	spool := t.TempDir()
	b := e.open(full(), func(o *backend.Options, lo *Options) {
		withRemote(store)(o, lo)
		lo.Remote.SpoolDir = spool
		// The base snapshot below must upload nothing; a compaction
		// running in the background at that moment uploads its output
		// and, on a loaded machine, made that check fail.
		lo.DisableAutomaticCompactions = true
	})
	want := map[string]string{}
	for i := range 3000 {
		k, v := fmt.Sprintf("k%05d", i), fmt.Sprintf("value-%d-%s", i, strings.Repeat("z", 200))
		must(t, b.Put("v", key(i%128, k), []byte(v)))
		want[k] = v
	}
	must(t, b.db.Flush())
	objs := listAll(t, store, "")
	var ssts int
	for _, n := range objs {
		if !strings.HasPrefix(n, testTask.Job+"/shared/lsm/") {
			t.Fatalf("object %s outside the job's lsm prefix", n)
		}
		if strings.HasSuffix(n, ".sst") {
			ssts++
		}
	}
	if ssts == 0 {
		t.Fatalf("no SST in the store: %q", objs)
	}
	ents, err := e.fs.List(b.dbDir)
	must(t, err)
	if i := slices.IndexFunc(ents, func(n string) bool { return strings.HasSuffix(n, ".sst") }); i >= 0 {
		t.Fatalf("local SST %s in remote mode", ents[i])
	}
	for i := range 3000 {
		k := fmt.Sprintf("k%05d", i)
		v, ok, err := b.Get("v", key(i%128, k))
		if err != nil || !ok || string(v) != want[k] {
			t.Fatalf("get %s: %.20q, %v, %v", k, v, ok, err)
		}
	}
	if c := store.Counts(); c.Calls[tiered.OpPut] == 0 || c.BytesUp == 0 {
		t.Fatalf("store counts %+v", c)
	}

	// A changelog base is a hand-off held by the instance's base markers:
	// nothing uploaded, no private file; a checkpoint holds it with its
	// own markers (HoldBase); the instance lets go of it when told.
	up := store.Counts().BytesUp
	bp, err := b.BaseSnapshot(context.Background(), 1, "job/base-1")
	must(t, err)
	bh, err := bp.Run(context.Background())
	must(t, err)
	if store.Counts().BytesUp != up || bh.Version != backend.HandleVersionRemote || len(bh.Files) == 0 ||
		slices.ContainsFunc(bh.Files, func(f backend.FileRef) bool { return !f.SizeOnly || f.Table == nil }) {
		t.Fatalf("base snapshot in remote mode: %d bytes up, handle %+v", store.Counts().BytesUp-up, bh)
	}
	if got := b.HeldBases(); !slices.Equal(got, []uint64{1}) {
		t.Fatalf("held bases %v, want [1]", got)
	}
	baseMarkers := func() (base, chk int) {
		for _, n := range listAll(t, store, "") {
			if m, ok := markers.ParseMarker(n); ok && m.Kind == markers.MarkerBase && m.Base == 1 {
				base++
			} else if ok && m.Kind == markers.MarkerCheckpoint && m.Checkpoint == 7 {
				chk++
			}
		}
		return base, chk
	}
	if base, chk := baseMarkers(); base != len(bh.Files) || chk != 0 {
		t.Fatalf("%d base and %d checkpoint markers for %d tables", base, chk, len(bh.Files))
	}
	must(t, b.HoldBase(context.Background(), 1, 7))
	if err := b.HoldBase(context.Background(), 2, 7); !errors.Is(err, backend.ErrDeclined) {
		t.Fatalf("hold of an unknown base: %v", err)
	}
	b.NotifyCheckpointAborted(1)
	for deadline := time.Now().Add(5 * time.Second); len(b.HeldBases()) > 0 || func() bool { n, _ := baseMarkers(); return n > 0 }(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("base 1 still held after it was dropped: %v", b.HeldBases())
		}
	}
	if _, chk := baseMarkers(); chk != len(bh.Files) {
		t.Fatalf("%d markers of checkpoint 7 for %d tables", chk, len(bh.Files))
	}
	// What checkpoint 7 held is the catalog's to release; here, by hand.
	for _, n := range listAll(t, store, "") {
		if m, ok := markers.ParseMarker(n); ok && m.Kind == markers.MarkerCheckpoint {
			must(t, store.Delete(context.Background(), n))
		}
	}

	// A canonical snapshot reads through Pebble, wherever its SSTs are,
	// and restores into a local-mode instance.
	p, err := b.CanonicalSnapshot(context.Background(), 2, e.store, "savepoints/sp-1")
	must(t, err)
	h, err := p.Run(context.Background())
	must(t, err)
	local := e.open(full(), func(o *backend.Options, _ *Options) { o.Restore = []*backend.Handle{h} })
	sameDump(t, dump(t, local), dump(t, b))

	must(t, b.Close())
	if left := listAll(t, store, ""); len(left) != 0 {
		t.Fatalf("Close left %d objects: %q", len(left), left)
	}
	if ents, _ := e.fs.List(spool); len(ents) != 0 {
		t.Fatalf("spool directory keeps %q", ents)
	}
}

// TestRemoteModeCloseKeepsOthersReferences: Close deletes an object only
// when no marker of anyone else holds it (the rule of Pebble's
// sharedUnref), so an object another owner marked survives, and other
// instances' objects are not touched; ours without a marker go.
func TestRemoteModeCloseKeepsOthersReferences(t *testing.T) {
	e, store := remoteEnv(t)
	b := e.open(full(), withRemote(store))
	for i := range 500 {
		must(t, b.Put("v", key(i%128, fmt.Sprintf("k%d", i)), []byte(strings.Repeat("y", 300))))
	}
	must(t, b.db.Flush())
	var held string
	for _, n := range listAll(t, store, "") {
		if strings.HasSuffix(n, ".sst") {
			held = n
			break
		}
	}
	if held == "" {
		t.Fatal("no SST in the store")
	}
	ctx := context.Background()
	other := held + ".ref.0.000001" // a checkpoint's marker (docs/lsm-remote.md)
	must(t, tiered.PutBytes(ctx, store, other, nil))
	// Another instance's object and marker, and an object of ours that an
	// aborted write left without a marker.
	prefix := testTask.Job + "/shared/lsm/"
	theirs := []string{prefix + "0abc-12345-000001.sst", prefix + "0abc-12345-000001.sst.ref.12345.000001"}
	for _, n := range theirs {
		must(t, tiered.PutBytes(ctx, store, n, []byte("x")))
	}
	orphan := fmt.Sprintf("%s0def-%d-000999.sst", prefix, remoteOf(b).creator)
	must(t, tiered.PutBytes(ctx, store, orphan, []byte("partial")))
	must(t, b.Close())
	want := slices.Sorted(slices.Values(append([]string{held, other}, theirs...)))
	if left := listAll(t, store, ""); !slices.Equal(left, want) {
		t.Fatalf("after Close the store holds %q, want %q", left, want)
	}
}

func TestRemoteModeOptions(t *testing.T) {
	lo := Options{Dir: t.TempDir(), Remote: &RemoteOptions{CacheBytes: -1}}
	lo.EnsureDefaults()
	err := lo.Validate()
	if !errors.Is(err, backend.ErrInvalidArgument) || !strings.Contains(err.Error(), "Options.Remote.Store") ||
		!strings.Contains(err.Error(), "remote cache size -1") {
		t.Fatalf("Validate: %v", err)
	}
	lo = Options{Dir: t.TempDir(), Remote: &RemoteOptions{Store: memstore.New()}}
	lo.EnsureDefaults()
	if err := lo.Validate(); err != nil || lo.Remote.CacheBytes != DefaultRemoteCacheBytes {
		t.Fatalf("defaults: %v, cache %d", err, lo.Remote.CacheBytes)
	}

	// Restoring a local-mode handle into remote mode is refused, naming
	// why, and leaves nothing in the store.
	e, store := remoteEnv(t)
	src := e.open(full(), nil)
	must(t, src.Put("v", key(1, "a"), []byte("x")))
	h := checkpoint(t, src, 1)
	_, err = Open(backend.Options{Task: testTask, KeyGroups: full(), States: testStates, Store: e.store,
		Restore: []*backend.Handle{h}}, Options{Dir: t.TempDir(), Remote: &RemoteOptions{Store: store}})
	if !errors.Is(err, backend.ErrIncompatible) || !strings.Contains(err.Error(), "local mode") {
		t.Fatalf("restore of a local-mode handle in remote mode: %v", err)
	}
	if left := listAll(t, store, ""); len(left) != 0 {
		t.Fatalf("a refused restore left %q", left)
	}
}
