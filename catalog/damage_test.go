package catalog

import (
	"errors"
	"strings"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// flipManifestBit flips one bit in the middle of checkpoint id's manifest.
func flipManifestBit(t *testing.T, s tiered.Store, job string, id uint64) {
	t.Helper()
	name := CheckpointManifest(job, id)
	b := []byte(storeSnapshot(t, s, name)[name])
	if len(b) == 0 {
		t.Fatalf("no manifest %s", name)
	}
	b[len(b)/2] ^= 1
	if err := tiered.PutBytes(ctx, s, name, b); err != nil {
		t.Fatal(err)
	}
}

func wantMention(t *testing.T, err error, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not mention %q", err, p)
		}
	}
}

// TestDamagedCheckpointRefusedLoudly: a checkpoint whose manifest fails
// its checks is not "not retained": a restore of it by id, or of the
// latest checkpoint when it is the newest, is data loss naming the
// manifest and what is wrong; the history marks it; a restore of the
// latest may fall back to the newest intact one only when asked to.
func TestDamagedCheckpointRefusedLoudly(t *testing.T) {
	s := memstore.New()
	clk := &testClock{}
	c := openCat(t, s, clk, func(o *Options) { o.Retain = 3 })
	a := newFakeTask("j", "op", 0, backend.KeyGroupRange{Start: 0, End: 127})
	for id := uint64(1); id <= 3; id++ {
		a.state["k"] = string(rune('a' + id))
		checkpoint(t, c, s, id, a)
	}
	c.Close()
	flipManifestBit(t, s, "j", 3)
	c = openCat(t, s, clk, func(o *Options) { o.Retain = 3 })

	_, err := c.RestoreSource(ctx, RestoreRequest{Job: "j", CheckpointID: 3})
	if !errors.Is(err, backend.ErrCorrupt) {
		t.Fatalf("restore of the damaged checkpoint by id: %v, want corruption", err)
	}
	wantMention(t, err, "j/chk-3/_metadata", "checksum mismatch")

	_, err = c.RestoreSource(ctx, RestoreRequest{Job: "j", Mode: ModeClaim})
	if !errors.Is(err, backend.ErrCorrupt) {
		t.Fatalf("restore of latest: %v, want corruption", err)
	}
	wantMention(t, err, "j/chk-3", "j/chk-2", "checksum mismatch")

	r, err := c.RestoreSource(ctx, RestoreRequest{Job: "j", Mode: ModeClaim, AllowFallback: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.Manifest.CheckpointID != 2 || len(r.Skipped) != 1 || r.Skipped[0].ID != 3 {
		t.Fatalf("fallback restored %d skipping %v, want 2 skipping chk-3", r.Manifest.CheckpointID, r.Skipped)
	}

	var damaged []uint64
	for _, rec := range c.List("j") {
		if rec.Damaged != nil {
			if !errors.Is(rec.Damaged, backend.ErrCorrupt) {
				t.Errorf("record %d: damage %v does not wrap ErrCorrupt", rec.ID, rec.Damaged)
			}
			damaged = append(damaged, rec.ID)
		}
	}
	if len(damaged) != 1 || damaged[0] != 3 {
		t.Fatalf("history marks %v damaged, want [3]", damaged)
	}
	if d := c.Damaged("j"); len(d) != 1 || d[0].Manifest != "j/chk-3/_metadata" {
		t.Fatalf("Damaged: %v", d)
	}

	// Once newer intact checkpoints exist, latest restores the newest.
	a.state["k"] = "z"
	checkpoint(t, c, s, 4, a)
	if r, err := c.RestoreSource(ctx, RestoreRequest{Job: "j", Mode: ModeClaim}); err != nil || r.Manifest.CheckpointID != 4 || len(r.Skipped) != 0 {
		t.Fatalf("latest after a newer checkpoint: %v", err)
	}
	// An intact, older checkpoint restores by id as before.
	if r, err := c.RestoreSource(ctx, RestoreRequest{Job: "j", CheckpointID: 1}); err != nil || r.Manifest.CheckpointID != 1 {
		t.Fatalf("restore of chk-1: %v", err)
	}
}

// TestOnlyCheckpointDamaged: with no intact checkpoint left, the restore
// of latest is data loss too (not "no retained checkpoint"), with or
// without the fallback.
func TestOnlyCheckpointDamaged(t *testing.T) {
	s := memstore.New()
	clk := &testClock{}
	c := openCat(t, s, clk)
	a := newFakeTask("j", "op", 0, backend.KeyGroupRange{Start: 0, End: 127})
	a.state["k"] = "v"
	checkpoint(t, c, s, 1, a)
	c.Close()
	flipManifestBit(t, s, "j", 1)
	c = openCat(t, s, clk)
	for _, fallback := range []bool{false, true} {
		_, err := c.RestoreSource(ctx, RestoreRequest{Job: "j", AllowFallback: fallback})
		if !errors.Is(err, backend.ErrCorrupt) {
			t.Fatalf("fallback %v: %v, want corruption", fallback, err)
		}
		wantMention(t, err, "j/chk-1/_metadata", "no intact checkpoint")
	}
}

// TestDamagedJobFileIsDataLoss: a restore that must record an ownership
// change in a damaged job file fails with an error wrapping ErrCorrupt
// that names the file.
func TestDamagedJobFileIsDataLoss(t *testing.T) {
	s := memstore.New()
	clk := &testClock{}
	c := openCat(t, s, clk)
	a := newFakeTask("j", "op", 0, backend.KeyGroupRange{Start: 0, End: 127})
	a.state["k"] = "v"
	checkpoint(t, c, s, 1, a)
	c.Close()
	name := "j/" + JobFileName
	b := []byte(storeSnapshot(t, s, name)[name])
	b[len(b)-3] ^= 0x10
	if err := tiered.PutBytes(ctx, s, name, b); err != nil {
		t.Fatal(err)
	}
	c = openCat(t, s, clk)
	_, err := c.RestoreSource(ctx, RestoreRequest{Job: "j", CheckpointID: 1, Mode: ModeNoClaim})
	if !errors.Is(err, backend.ErrCorrupt) {
		t.Fatalf("restore with a damaged job file: %v, want corruption", err)
	}
	wantMention(t, err, "j/_catalog", "checksum mismatch")
}

// TestDamagedSavepointIsCorrupt: a savepoint whose manifest fails its
// checks is not "not found" either.
func TestDamagedSavepointIsCorrupt(t *testing.T) {
	s := memstore.New()
	clk := &testClock{}
	c := openCat(t, s, clk)
	a := newFakeTask("j", "op", 0, backend.KeyGroupRange{Start: 0, End: 127})
	a.state["k"] = "v"
	checkpoint(t, c, s, 1, a)
	if _, err := c.SavepointFromCheckpoint(ctx, "sp1", "j", 1); err != nil {
		t.Fatal(err)
	}
	c.Close()
	name := SavepointDir("sp1") + "/" + ManifestName
	b := []byte(storeSnapshot(t, s, name)[name])
	b[len(b)/2] ^= 2
	if err := tiered.PutBytes(ctx, s, name, b); err != nil {
		t.Fatal(err)
	}
	c = openCat(t, s, clk)
	_, err := c.RestoreSource(ctx, RestoreRequest{Job: "j", SavepointID: "sp1"})
	if !errors.Is(err, backend.ErrCorrupt) {
		t.Fatalf("restore of a damaged savepoint: %v, want corruption", err)
	}
	wantMention(t, err, name, "checksum mismatch")
	if _, err := c.RestoreSource(ctx, RestoreRequest{Job: "j", SavepointID: "sp2"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("restore of an unknown savepoint: %v, want not found", err)
	}
}
