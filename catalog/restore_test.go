package catalog

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/localfs"
	"github.com/statedhq/stated/tiered/memstore"
)

// TestNoClaimRestore is the no-claim rule: after restoring no-claim and
// completing new checkpoints, the original checkpoint directory is
// byte-for-byte unchanged, no new checkpoint references its files, and the
// job's retention never deletes it.
func TestNoClaimRestore(t *testing.T) {
	s := memstore.New()
	clk := &testClock{}
	c := openCat(t, s, clk)
	a := newFakeTask("j", "op", 0, backend.KeyGroupRange{Start: 0, End: 127})
	for i := 0; i < 20; i++ {
		a.state[string(rune('a'+i))] = "v"
	}
	checkpoint(t, c, s, 1, a)
	a.state["z"] = "w"
	orig := checkpoint(t, c, s, 2, a)
	origDir := storeSnapshot(t, s, CheckpointDir("j", 2)+"/")
	origFiles := filesOf(orig)

	r, err := c.RestoreSource(ctx, RestoreRequest{Job: "j", CheckpointID: 2, Mode: ModeNoClaim})
	if err != nil || !r.NoClaim || len(r.Handles) != 1 {
		t.Fatalf("restore: %+v %v", r, err)
	}
	// A backend that wrongly reused the restored files is refused.
	b := newFakeTask("j", "op", 0, backend.KeyGroupRange{Start: 0, End: 127})
	if err := b.restore(ctx, r.Store, r.Handles[0], false); err != nil {
		t.Fatal(err)
	}
	if err := c.BeginCheckpoint("j", 3); err != nil {
		t.Fatal(err)
	}
	b.snapshot(3)
	h, err := b.upload(ctx, s, 3)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AddTaskHandle("j", 3, h); !errors.Is(err, backend.ErrInvalidArgument) {
		t.Fatalf("checkpoint reusing files of a no-claim source accepted: %v", err)
	}
	if err := c.Abort(ctx, "j", 3, StatusDeclined, "test"); err != nil {
		t.Fatal(err)
	}
	// The right way: restore with NoClaim, so the first checkpoint is full.
	b = newFakeTask("j", "op", 0, backend.KeyGroupRange{Start: 0, End: 127})
	if err := b.restore(ctx, r.Store, r.Handles[0], r.NoClaim); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(b.state, a.state) {
		t.Fatal("restored state differs")
	}
	var news []*Manifest
	for id := uint64(4); id <= 8; id++ {
		b.state["n"] = string(rune('0' + id))
		news = append(news, checkpoint(t, c, s, id, b))
	}
	for _, m := range news {
		for _, p := range filesOf(m) {
			if slices.Contains(origFiles, p) {
				t.Fatalf("checkpoint %d references %s of the no-claim source", m.CheckpointID, p)
			}
		}
	}
	if got := storeSnapshot(t, s, CheckpointDir("j", 2)+"/"); !reflect.DeepEqual(got, origDir) {
		t.Fatalf("no-claim source changed:\n%v\n%v", names(got), names(origDir))
	}
	for _, p := range origFiles {
		if !exists(t, s, p) {
			t.Fatalf("file %s of the no-claim source deleted", p)
		}
	}
	// Retention kept 2 of the new ones plus the pinned source; a sweep long
	// after changes nothing either, and the pin survives a restart.
	if got := c.Retained("j"); !reflect.DeepEqual(got, []uint64{2, 7, 8}) {
		t.Fatalf("retained %v", got)
	}
	clk.Advance(10 * 3600e9)
	if _, err := c.GC(ctx, false); err != nil {
		t.Fatal(err)
	}
	if got := storeSnapshot(t, s, CheckpointDir("j", 2)+"/"); !reflect.DeepEqual(got, origDir) {
		t.Fatal("gc changed the no-claim source")
	}
	c.Close()
	c2 := openCat(t, s, clk)
	b.state["n"] = "again"
	checkpoint(t, c2, s, 9, b)
	if got := c2.Retained("j"); !reflect.DeepEqual(got, []uint64{2, 8, 9}) {
		t.Fatalf("retained after restart %v", got)
	}
	if h := c2.List("j"); !h[1].Pinned {
		t.Fatalf("pin not in the history listing: %+v", h[1])
	}
	// An explicit delete removes it.
	if err := c2.DeleteCheckpoint(ctx, "j", 2); err != nil {
		t.Fatal(err)
	}
	if len(storeSnapshot(t, s, CheckpointDir("j", 2)+"/")) != 0 {
		t.Fatal("deleted checkpoint left files")
	}
}

// TestClaimAcrossJobs: a claim restore moves ownership; the new job's
// retention deletes the checkpoint, the old job's never again.
func TestClaimAcrossJobs(t *testing.T) {
	s := memstore.New()
	clk := &testClock{}
	c := openCat(t, s, clk)
	a := newFakeTask("old", "op", 0, backend.KeyGroupRange{Start: 0, End: 127})
	a.state["k"] = "v"
	checkpoint(t, c, s, 1, a)
	a.state["k2"] = "v"
	checkpoint(t, c, s, 2, a)

	r, err := c.RestoreSource(ctx, RestoreRequest{Job: "new", FromJob: "old", Mode: ModeClaim})
	if err != nil || r.NoClaim || r.Manifest.CheckpointID != 2 {
		t.Fatalf("restore: %+v %v", r, err)
	}
	b := newFakeTask("new", "op", 0, backend.KeyGroupRange{Start: 0, End: 127})
	if err := b.restore(ctx, r.Store, r.Handles[0], r.NoClaim); err != nil {
		t.Fatal(err)
	}
	// Incremental on top of the claimed checkpoint: references old/shared.
	b.state["k3"] = "v"
	m3 := checkpoint(t, c, s, 3, b)
	reused := 0
	for _, p := range filesOf(m3) {
		if classify(p).job == "old" {
			reused++
		}
	}
	if reused == 0 {
		t.Fatal("claim restore did not let the new job reuse files")
	}
	// The old job keeps checkpointing: its retention may drop its own 1
	// but never the claimed 2.
	a.state["k4"] = "v"
	checkpoint(t, c, s, 4, a)
	a.state["k5"] = "v"
	checkpoint(t, c, s, 5, a)
	if got := c.Retained("old"); !reflect.DeepEqual(got, []uint64{2, 4, 5}) {
		t.Fatalf("old job retains %v", got)
	}
	c.Close()
	// Ownership survives a restart.
	c = openCat(t, s, clk)
	hist := c.List("old")
	if i := slices.IndexFunc(hist, func(r Record) bool { return r.ID == 2 }); i < 0 || hist[i].Owner != "new" {
		t.Fatalf("history of the old job: %+v", hist)
	}
	b.state["k6"] = "v"
	m4 := checkpoint(t, c, s, 4, b)
	if got := c.Retained("old"); !reflect.DeepEqual(got, []uint64{4, 5}) {
		t.Fatalf("new job's retention did not drop the claimed checkpoint: old retains %v", got)
	}
	// new/3 still references files under old/shared: they survived.
	for _, m := range []*Manifest{m3, m4} {
		if rep, err := c.Verify(ctx, "new", m.CheckpointID); err != nil || !rep.OK() {
			t.Fatalf("verify new/%d: %+v %v", m.CheckpointID, rep, err)
		}
	}
	if err := c.DeleteCheckpoint(ctx, "old", 2); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete of a discarded checkpoint: %v", err)
	}
}

// TestNativeSavepointRelocatable: a native savepoint copies the files,
// verifies, can be moved and restored elsewhere, and its life is independent
// of the checkpoints'.
func TestNativeSavepointRelocatable(t *testing.T) {
	dir := t.TempDir()
	s, err := localfs.Open(filepath.Join(dir, "root"))
	if err != nil {
		t.Fatal(err)
	}
	clk := &testClock{}
	c := openCat(t, s, clk)
	a := newFakeTask("j", "op", 0, backend.KeyGroupRange{Start: 0, End: 63})
	b := newFakeTask("j", "op", 1, backend.KeyGroupRange{Start: 64, End: 127})
	a.state["k"], b.state["q"] = "1", "2"
	m := checkpoint(t, c, s, 1, a, b)
	want := map[backend.TaskID]map[string]string{a.task: cloneMap(a.state), b.task: cloneMap(b.state)}

	sp, err := c.SavepointFromCheckpoint(ctx, "sp1", "j", 1)
	if err != nil {
		t.Fatal(err)
	}
	if sp.Format != FormatNative || len(sp.Tasks) != 2 {
		t.Fatalf("savepoint %+v", sp)
	}
	if _, err := c.SavepointFromCheckpoint(ctx, "sp1", "j", 1); !errors.Is(err, ErrExists) {
		t.Fatalf("second savepoint with the same id: %v", err)
	}
	if rep, err := c.VerifySavepoint(ctx, "sp1"); err != nil || !rep.OK() || rep.Files != 10 {
		t.Fatalf("verify savepoint: %+v %v", rep, err)
	}
	// Checkpoints move on and are subsumed; the savepoint stays whole.
	for id := uint64(2); id <= 4; id++ {
		a.state["k"] = string(rune('0' + id))
		checkpoint(t, c, s, id, a, b)
	}
	clk.Advance(5 * 3600e9)
	if _, err := c.GC(ctx, false); err != nil {
		t.Fatal(err)
	}
	if exists(t, s, CheckpointManifest("j", 1)) {
		t.Fatal("checkpoint 1 should be subsumed")
	}
	if rep, err := c.VerifySavepoint(ctx, "sp1"); err != nil || !rep.OK() {
		t.Fatalf("savepoint damaged by checkpoint retention: %+v %v", rep, err)
	}
	// Move the directory elsewhere and restore from the new path.
	moved := filepath.Join(dir, "elsewhere", "sp1")
	if err := os.MkdirAll(filepath.Dir(moved), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "root", "savepoints", "sp1"), moved); err != nil {
		t.Fatal(err)
	}
	ms, err := localfs.Open(moved)
	if err != nil {
		t.Fatal(err)
	}
	r, err := LoadSavepoint(ctx, ms)
	if err != nil || !r.NoClaim {
		t.Fatalf("load moved savepoint: %v", err)
	}
	for _, h := range r.Handles {
		got, _, err := readHandle(ctx, r.Store, h)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want[h.Task]) {
			t.Fatalf("task %s restored %v, want %v", h.Task, got, want[h.Task])
		}
	}
	if rep, err := Verify(ctx, ms, "", 2); err != nil || !rep.OK() {
		t.Fatalf("verify moved savepoint: %+v %v", rep, err)
	}
	// Move it back, reopen, delete it: no checkpoint file is touched.
	if err := os.Rename(moved, filepath.Join(dir, "root", "savepoints", "sp1")); err != nil {
		t.Fatal(err)
	}
	c.Close()
	c = openCat(t, s, clk)
	before := storeSnapshot(t, s, "j/")
	if err := c.DeleteSavepoint(ctx, "sp1"); err != nil {
		t.Fatal(err)
	}
	if after := storeSnapshot(t, s, "j/"); !reflect.DeepEqual(after, before) {
		t.Fatal("deleting a savepoint changed checkpoint files")
	}
	if left := storeSnapshot(t, s, "savepoints/"); len(left) != 0 {
		t.Fatalf("savepoint left %v", names(left))
	}
	_ = m
}

// TestNativeSavepointOfLiveSnapshot is the daemon's flow: a snapshot taken
// only for the savepoint, copied, then released; the incremental base does
// not move (FLINK-23949).
func TestNativeSavepointOfLiveSnapshot(t *testing.T) {
	s := memstore.New()
	clk := &testClock{}
	c := openCat(t, s, clk)
	a := newFakeTask("j", "op", 0, backend.KeyGroupRange{Start: 0, End: 127})
	a.state["k"] = "1"
	m1 := checkpoint(t, c, s, 1, a)
	a.state["k"] = "2"
	if err := c.BeginCheckpoint("j", 2); err != nil {
		t.Fatal(err)
	}
	a.snapshot(2)
	h, err := a.upload(ctx, s, 2)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := c.TriggerSavepoint(ctx, SavepointRequest{Job: "j", CheckpointID: 2, Handles: []*backend.Handle{h}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Release(ctx, "j", 2); err != nil {
		t.Fatal(err)
	}
	a.notifyAborted(2)
	if len(c.List("j")) != 1 {
		t.Fatalf("release left a history record: %+v", c.List("j"))
	}
	// The next checkpoint reuses checkpoint 1's files, not the savepoint's
	// snapshot.
	m3 := checkpoint(t, c, s, 3, a)
	shared := 0
	for _, p := range filesOf(m3) {
		if slices.Contains(filesOf(m1), p) {
			shared++
		}
	}
	if shared == 0 {
		t.Fatal("savepoint moved the incremental base")
	}
	r, err := c.RestoreSource(ctx, RestoreRequest{Job: "j", SavepointID: sp.SavepointID})
	if err != nil || !r.NoClaim {
		t.Fatal(err)
	}
	got, _, err := readHandle(ctx, r.Store, r.Handles[0])
	if err != nil || got["k"] != "2" {
		t.Fatalf("savepoint state %v %v", got, err)
	}
}

func TestNativeSavepointRefusesCorruptSource(t *testing.T) {
	s := memstore.New()
	clk := &testClock{}
	c := openCat(t, s, clk)
	a := newFakeTask("j", "op", 0, backend.KeyGroupRange{Start: 0, End: 127})
	a.state["k"] = "value"
	m := checkpoint(t, c, s, 1, a)
	p := m.Tasks[0].Files[1].Path
	data := []byte(storeSnapshot(t, s, p)[p])
	data[0] ^= 0x20
	if err := tiered.PutBytes(ctx, s, p, data); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SavepointFromCheckpoint(ctx, "bad", "j", 1); !errors.Is(err, backend.ErrCorrupt) {
		t.Fatalf("savepoint of a corrupt file: %v", err)
	}
	if left := storeSnapshot(t, s, "savepoints/"); len(left) != 0 {
		t.Fatalf("failed savepoint left %v", names(left))
	}
	if _, ok := c.Savepoint("bad"); ok {
		t.Fatal("failed savepoint registered")
	}
}

// TestVerifyFindsDamage: verify finds a flipped byte and a deleted file in a
// real checkpoint on disk.
func TestVerifyFindsDamage(t *testing.T) {
	dir := t.TempDir()
	s, err := localfs.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	clk := &testClock{}
	c := openCat(t, s, clk)
	a := newFakeTask("j", "op", 0, backend.KeyGroupRange{Start: 0, End: 127})
	for i := 0; i < 10; i++ {
		a.state[string(rune('a'+i))] = "value"
	}
	m := checkpoint(t, c, s, 1, a)
	rep, err := Verify(ctx, s, "j/chk-1", 2)
	if err != nil || !rep.OK() || rep.Files != 5 {
		t.Fatalf("clean verify: %+v %v", rep, err)
	}
	flipped, deleted := m.Tasks[0].Files[1].Path, m.Tasks[0].Files[2].Path
	fp := filepath.Join(dir, filepath.FromSlash(flipped))
	data, err := os.ReadFile(fp)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0x01
	if err := os.WriteFile(fp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, filepath.FromSlash(deleted))); err != nil {
		t.Fatal(err)
	}
	rep, err = Verify(ctx, s, "j/chk-1", 2)
	if err != nil || rep.OK() || len(rep.Problems) != 2 {
		t.Fatalf("damaged verify: %+v %v", rep, err)
	}
	for _, p := range rep.Problems {
		switch p.Path {
		case flipped:
			if p.Missing {
				t.Fatal("flipped byte reported as missing")
			}
		case deleted:
			if !p.Missing {
				t.Fatal("deleted file not reported missing")
			}
		default:
			t.Fatalf("unexpected problem %v", p)
		}
	}
	// ResolveVerifyPath maps the directory path to the root.
	read := func(p string) ([]byte, error) { return os.ReadFile(filepath.FromSlash(p)) }
	root, d, err := ResolveVerifyPath(filepath.ToSlash(filepath.Join(dir, "j", "chk-1")), read)
	if err != nil || root != filepath.ToSlash(dir) || d != "j/chk-1" {
		t.Fatalf("resolve: %q %q %v", root, d, err)
	}
}

func cloneMap(m map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = v
	}
	return out
}
