package catalog

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// listing is every name under prefix with its size, for before/after
// comparisons.
func listing(t *testing.T, s tiered.Store, prefix string) []string {
	t.Helper()
	var out []string
	err := tiered.Walk(ctx, s, prefix, func(o tiered.ObjectInfo) error {
		out = append(out, o.Name)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A savepoint another process writes into the store while the catalog
// runs is found without a reopen: a restore naming it adopts it, the
// sweep (past the grace period) deletes nothing of it, and a sweep adopts
// one nobody asked for. Each restores exactly the manifest the other
// process wrote.
func TestAdoptsSavepointsOfAnotherProcess(t *testing.T) {
	mem := memstore.New()
	clk := &testClock{}
	tk := newFakeTask("j", "op", 0, backend.KeyGroupRange{Start: 0, End: 127})
	a := openCat(t, mem, clk)
	tk.state["k"] = "v1"
	checkpoint(t, a, mem, 1, tk)

	// The other process: a catalog of its own over the same root.
	b := openCat(t, mem, clk)
	want, err := b.SavepointFromCheckpoint(ctx, "sp", "j", 1)
	if err != nil {
		t.Fatal(err)
	}
	want2, err := b.SavepointFromCheckpoint(ctx, "sp2", "j", 1)
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	if _, ok := a.Savepoint("sp"); ok {
		t.Fatal("the running catalog knew the savepoint before anything asked (the test checks nothing)")
	}
	files := listing(t, mem, SavepointDir("sp")+"/")

	r, err := a.RestoreSource(ctx, RestoreRequest{Job: "k", SavepointID: "sp"})
	if err != nil {
		t.Fatalf("restore from a savepoint another process wrote: %v", err)
	}
	if got, _ := EncodeManifest(r.Manifest); !bytes.Equal(got, mustEncode(t, want)) {
		t.Fatalf("restored manifest differs from the one written:\n got %s\nwant %s", got, mustEncode(t, want))
	}
	for _, h := range r.Handles {
		for _, f := range h.Files {
			if !exists(t, r.Store, f.Path) {
				t.Fatalf("the restore reads %s, which its store does not hold", f.Path)
			}
		}
	}

	// A sweep past the grace period: nothing of either savepoint goes,
	// the other one is adopted, and no problem is reported.
	clk.Advance(2 * time.Hour)
	rep, err := a.GC(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) > 0 {
		t.Fatalf("sweep problems: %q", rep.Problems)
	}
	if !slices.Equal(rep.AdoptedSavepoints, []string{"sp2"}) {
		t.Fatalf("the sweep adopted %q, want [sp2]", rep.AdoptedSavepoints)
	}
	if got := listing(t, mem, SavepointDir("sp")+"/"); !slices.Equal(got, files) {
		t.Fatalf("after the sweep savepoints/sp holds %q, want %q", got, files)
	}
	for _, o := range rep.Orphans {
		if strings.HasPrefix(o.Name, SavepointsDir+"/") {
			t.Fatalf("the sweep deleted %s", o.Name)
		}
	}
	m, ok := a.Savepoint("sp2")
	if !ok {
		t.Fatal("the sweep did not register the savepoint it found")
	}
	if got := mustEncode(t, m); !bytes.Equal(got, mustEncode(t, want2)) {
		t.Fatalf("adopted manifest differs from the one written")
	}
	if got := len(a.Savepoints()); got != 2 {
		t.Fatalf("the catalog lists %d savepoints, want 2", got)
	}
	// Registered with its objects, as at Open: a reopened catalog counts
	// the same.
	if got, want := a.Stats().Referenced, openCat(t, mem, clk).Stats().Referenced; got != want {
		t.Fatalf("referenced %+v after adoption, %+v after a reopen", got, want)
	}
}

func mustEncode(t *testing.T, m *Manifest) []byte {
	t.Helper()
	b, err := EncodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A damaged manifest another process left is refused, naming the object,
// noted as a problem, and its directory is kept by the sweep.
func TestAdoptionRefusesADamagedManifest(t *testing.T) {
	mem := memstore.New()
	clk := &testClock{}
	a := openCat(t, mem, clk)
	name := SavepointDir("bad") + "/" + ManifestName
	for _, n := range []string{name, SavepointDir("bad") + "/data/x"} {
		if err := mem.Put(ctx, n, strings.NewReader("not a manifest"), 14); err != nil {
			t.Fatal(err)
		}
	}
	_, err := a.RestoreSource(ctx, RestoreRequest{Job: "k", SavepointID: "bad"})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), name) {
		t.Fatalf("restore from a damaged savepoint: %v, want a corruption error naming %s", err, name)
	}
	if _, ok, err := a.SavepointContext(ctx, "bad"); ok || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("lookup of a damaged savepoint: %v %v", ok, err)
	}
	ps := a.Problems()
	if len(ps) != 1 || ps[0].Object != name {
		t.Fatalf("problems %v, want one naming %s", ps, name)
	}
	clk.Advance(2 * time.Hour)
	if _, err := a.GC(ctx, false); err != nil {
		t.Fatal(err)
	}
	if got := listing(t, mem, SavepointDir("bad")+"/"); len(got) != 2 {
		t.Fatalf("the sweep left %q of the damaged savepoint", got)
	}
}

// A savepoint another process deleted ("stated savepoint delete") is
// dropped by the next sweep, no longer listed, and a restore from it
// fails with NOT_FOUND saying it was deleted, before and after the sweep.
func TestDeletedSavepointIsDropped(t *testing.T) {
	mem := memstore.New()
	clk := &testClock{}
	tk := newFakeTask("j", "op", 0, backend.KeyGroupRange{Start: 0, End: 127})
	a := openCat(t, mem, clk)
	checkpoint(t, a, mem, 1, tk)
	for _, id := range []string{"gone", "gone2", "stays"} {
		if _, err := a.SavepointFromCheckpoint(ctx, id, "j", 1); err != nil {
			t.Fatal(err)
		}
	}
	b := openCat(t, mem, clk)
	for _, id := range []string{"gone", "gone2"} {
		if err := b.DeleteSavepoint(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	b.Close()

	// Before a sweep: the restore looks, says so and drops it.
	_, err := a.RestoreSource(ctx, RestoreRequest{Job: "k", SavepointID: "gone"})
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "savepoint gone was deleted") {
		t.Fatalf("restore from a deleted savepoint: %v", err)
	}
	if _, ok := a.Savepoint("gone"); ok {
		t.Fatal("a restore found the savepoint deleted and still lists it")
	}
	if _, ok := a.Savepoint("gone2"); !ok {
		t.Fatal("gone2 was dropped before anything looked")
	}
	rep, err := a.GC(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.DroppedSavepoints, []string{"gone2"}) {
		t.Fatalf("the sweep dropped %q, want [gone2]", rep.DroppedSavepoints)
	}
	var ids []string
	for _, m := range a.Savepoints() {
		ids = append(ids, m.SavepointID)
	}
	if !slices.Equal(ids, []string{"stays"}) {
		t.Fatalf("listed after the sweep: %q", ids)
	}
	for _, id := range []string{"gone", "gone2"} {
		_, err := a.RestoreSource(ctx, RestoreRequest{Job: "k", SavepointID: id})
		if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "savepoint "+id+" was deleted") {
			t.Fatalf("restore from %s after the sweep: %v", id, err)
		}
	}
	if _, err := a.RestoreSource(ctx, RestoreRequest{Job: "k", SavepointID: "stays"}); err != nil {
		t.Fatal(err)
	}
	// Registered objects match a fresh open's once the others are gone.
	if got, want := a.Stats().Referenced, openCat(t, mem, clk).Stats().Referenced; got != want {
		t.Fatalf("referenced %+v, %+v after a reopen", got, want)
	}
}

// holdManifest blocks the first read of one object, once armed, until
// released.
type holdManifest struct {
	tiered.Store
	name    string
	armed   atomic.Bool
	reached chan struct{}
	release chan struct{}
	once    sync.Once
}

func (h *holdManifest) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	if name == h.name && h.armed.Load() {
		h.once.Do(func() {
			close(h.reached)
			<-h.release
		})
	}
	return h.Store.Get(ctx, name)
}

// Adoption and deletes do not race: while a savepoint is being adopted
// (its manifest read), a delete of its files as unreferenced (the sweep's
// or a cleanup's) leaves them; and a file a delete is removing right now
// refuses the adoption.
func TestAdoptionAndDeletesDoNotRace(t *testing.T) {
	mem := memstore.New()
	clk := &testClock{}
	hold := &holdManifest{Store: mem, name: SavepointDir("sp") + "/" + ManifestName,
		reached: make(chan struct{}), release: make(chan struct{})}
	a := openCat(t, hold, clk) // opens before the savepoint exists
	tk := newFakeTask("j", "op", 0, backend.KeyGroupRange{Start: 0, End: 127})
	checkpoint(t, a, mem, 1, tk)
	w := openCat(t, mem, clk)
	if _, err := w.SavepointFromCheckpoint(ctx, "sp", "j", 1); err != nil {
		t.Fatal(err)
	}
	w.Close()
	files := listing(t, mem, SavepointDir("sp")+"/")

	hold.armed.Store(true)
	done := make(chan error, 1)
	go func() {
		_, err := a.RestoreSource(ctx, RestoreRequest{Job: "k", SavepointID: "sp"})
		done <- err
	}()
	<-hold.reached
	if tried, err := a.deleteUnreferenced(ctx, files); err != nil || len(tried) != 0 {
		t.Fatalf("delete during adoption tried %q (%v), want nothing", tried, err)
	}
	close(hold.release)
	if err := <-done; err != nil {
		t.Fatalf("restore after the delete was refused: %v", err)
	}
	if got := listing(t, mem, SavepointDir("sp")+"/"); !slices.Equal(got, files) {
		t.Fatalf("savepoints/sp holds %q, want %q", got, files)
	}
	// Once adopted, the same delete leaves them as referenced.
	if tried, err := a.deleteUnreferenced(ctx, files); err != nil || len(tried) != 0 {
		t.Fatalf("delete of an adopted savepoint's files tried %q (%v)", tried, err)
	}

	// A file being deleted right now: the adoption is refused.
	b := openCat(t, memstore.New(), clk)
	b.store = mem // the same root, which holds the savepoint now
	data, err := tiered.ReadAll(ctx, mem, hold.name, maxMetaSize)
	if err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	b.mu.guard.deleting[files[0]] = true
	b.mu.Unlock()
	if _, err := b.adoptManifest(ctx, "sp", data); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), files[0]) {
		t.Fatalf("adoption of a savepoint whose file %s is being deleted: %v", files[0], err)
	}
	if _, ok := b.Savepoint("sp"); ok {
		t.Fatal("a refused adoption registered the savepoint")
	}
}

// In a replicated catalog an adoption is a command of the log: every
// replica holds the adopted savepoint, and the next leader finds it
// without listing the store. The command is written at version 3.
func TestReplicatedAdoption(t *testing.T) {
	mem := memstore.New()
	clk := &testClock{}
	l := newFakeLog(3)
	tk := newFakeTask("j", "op", 0, backend.KeyGroupRange{Start: 0, End: 127})
	a := openReplicated(t, mem, clk, l, 0)
	checkpoint(t, a, mem, 1, tk)
	w := openCat(t, mem, clk)
	if _, err := w.SavepointFromCheckpoint(ctx, "sp", "j", 1); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if _, err := a.RestoreSource(ctx, RestoreRequest{Job: "k", SavepointID: "sp"}); err != nil {
		t.Fatal(err)
	}
	a.Close()
	want := l.replicas[0].s.fingerprint()
	for i, r := range l.replicas {
		if got := r.s.fingerprint(); got != want {
			t.Fatalf("replica %d differs:\n%s\nwant:\n%s", i, got, want)
		}
	}
	l.mu.Lock()
	l.leader = 1
	l.mu.Unlock()
	counted := &listCounter{Store: mem}
	b := openReplicated(t, counted, clk, l, 1)
	if _, ok := b.Savepoint("sp"); !ok {
		t.Fatal("the next leader does not know the adopted savepoint")
	}
	if n := counted.lists.Load(); n != 0 {
		t.Fatalf("the next leader listed the store %d times", n)
	}

	enc, err := encodeCommand(command{Op: opSavepointAdopted, Savepoint: "sp", Manifest: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(enc, []byte(`"v":3`)) {
		t.Fatalf("adoption encoded as %s, want version 3", enc)
	}
	old := bytes.Replace(enc, []byte(`"v":3`), []byte(`"v":2`), 1)
	if _, err := decodeCommand(old); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("an adoption at version 2 decoded: %v", err)
	}
	newer := bytes.Replace(enc, []byte(`"v":3`), []byte(`"v":4`), 1)
	if _, err := decodeCommand(newer); !errors.Is(err, backend.ErrIncompatible) {
		t.Fatalf("a version 4 command: %v, want incompatible", err)
	}
}
