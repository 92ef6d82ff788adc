package backendtest

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/internal/frame"
	"github.com/statedhq/stated/tiered"
)

// damageSetup writes a workload, takes a confirmed checkpoint and a second
// one on top (so an incremental backend's handle has shared and new files),
// checks that the second restores, and returns it.
func damageSetup(t *testing.T, e *env) *backend.Handle {
	h, _ := damageSetupModel(t, e)
	return h
}

// expectRestoreFails opens a restore from h and checks that it fails with
// an error wrapping one of targets whose message names path.
func (e *env) expectRestoreFails(t *testing.T, h *backend.Handle, path, damage string, targets ...error) {
	t.Helper()
	o := e.opts(testRange, modelStates...)
	o.Restore = []*backend.Handle{h}
	b, err := e.open(t, o)
	if err == nil {
		_ = b.Close()
		t.Fatalf("restore with %s succeeded (store: %s)", damage, e.storeFiles(t))
	}
	matched := false
	for _, target := range targets {
		matched = matched || errors.Is(err, target)
	}
	if !matched {
		t.Fatalf("restore with %s: error %q wraps none of %q", damage, err, targets)
	}
	t.Logf("restore with %s: %v", damage, err)
	if !strings.Contains(err.Error(), path) {
		t.Fatalf("restore with %s: error %q does not name the file %s", damage, err, path)
	}
}

// replace overwrites name in the store.
func (e *env) replace(t *testing.T, name string, data []byte) {
	t.Helper()
	must(t, tiered.PutBytes(e.ctx, e.store, name, data), "rewrite %s", name)
}

func (e *env) read(t *testing.T, name string) []byte {
	t.Helper()
	data, err := tiered.ReadAll(e.ctx, e.store, name, 0)
	must(t, err, "read %s", name)
	return data
}

func testCorruptFile(t *testing.T, e *env) {
	h := damageSetup(t, e)
	for _, f := range h.Files {
		orig := e.read(t, f.Path)
		if len(orig) == 0 {
			continue // nothing to flip; the truncation and missing tests cover it
		}
		for _, pos := range dedupe(0, len(orig)/2, len(orig)-1) {
			bad := append([]byte(nil), orig...)
			bad[pos] ^= 0xff
			e.replace(t, f.Path, bad)
			e.expectRestoreFails(t, h, f.Path, "byte "+strconv.Itoa(pos)+" of "+f.Path+" flipped", backend.ErrCorrupt)
		}
		e.replace(t, f.Path, orig)
	}
	// Everything put back: the restore works again.
	o := e.opts(testRange, modelStates...)
	o.Restore = []*backend.Handle{h}
	e.mustOpen(t, o)
}

func testTruncatedFile(t *testing.T, e *env) {
	h := damageSetup(t, e)
	for _, f := range h.Files {
		orig := e.read(t, f.Path)
		if len(orig) == 0 {
			continue
		}
		for _, n := range dedupe(0, len(orig)/2, len(orig)-1) {
			e.replace(t, f.Path, orig[:n])
			e.expectRestoreFails(t, h, f.Path, f.Path+" truncated to "+strconv.Itoa(n)+" bytes", backend.ErrCorrupt)
		}
		// A longer file is damaged too.
		e.replace(t, f.Path, append(append([]byte(nil), orig...), 0))
		e.expectRestoreFails(t, h, f.Path, f.Path+" with a byte appended", backend.ErrCorrupt)
		e.replace(t, f.Path, orig)
	}
}

func testMissingFile(t *testing.T, e *env) {
	h := damageSetup(t, e)
	for _, f := range h.Files {
		orig := e.read(t, f.Path)
		must(t, e.store.Delete(e.ctx, f.Path), "delete %s", f.Path)
		e.expectRestoreFails(t, h, f.Path, f.Path+" missing", backend.ErrNotFound, backend.ErrCorrupt)
		e.replace(t, f.Path, orig)
	}
}

// copyHandle deep-copies h through its encoding.
func copyHandle(t *testing.T, h *backend.Handle) *backend.Handle {
	t.Helper()
	enc, err := backend.EncodeHandle(h)
	must(t, err, "encode handle")
	c, err := backend.DecodeHandle(enc)
	must(t, err, "decode handle")
	return c
}

func testIncompatibleHandle(t *testing.T, e *env) {
	h := damageSetup(t, e)
	restore := func(o backend.Options) error {
		t.Helper()
		b, err := e.open(t, o)
		if err == nil {
			_ = b.Close()
		}
		return err
	}
	o := e.opts(testRange, modelStates...)
	o.Restore, o.MaxParallelism = []*backend.Handle{h}, 2*testMaxP
	wantErr(t, restore(o), backend.ErrIncompatible, "restore a handle of %d key groups into an instance of %d", testMaxP, 2*testMaxP)

	v := copyHandle(t, h)
	v.Version = backend.HandleFormatVersion + 1
	o = e.opts(testRange, modelStates...)
	o.Restore = []*backend.Handle{v}
	wantErr(t, restore(o), backend.ErrIncompatible, "restore a handle of format version %d", v.Version)

	p := copyHandle(t, h)
	p.Files[0].Path = "../" + p.Files[0].Path
	o.Restore = []*backend.Handle{p}
	wantErr(t, restore(o), backend.ErrCorrupt, "restore a handle with a path outside the store")

	// A handle whose recorded checksum or size disagrees with the intact
	// file: the file is what is named.
	for i := range h.Files {
		c := copyHandle(t, h)
		c.Files[i].CRC32C ^= 1
		e.expectRestoreFails(t, c, h.Files[i].Path, "the checksum of "+h.Files[i].Path+" changed in the handle", backend.ErrCorrupt)
		c = copyHandle(t, h)
		c.Files[i].Size++
		c.FullSize++
		e.expectRestoreFails(t, c, h.Files[i].Path, "the size of "+h.Files[i].Path+" changed in the handle", backend.ErrCorrupt)
	}
}

func dedupe(xs ...int) []int {
	var out []int
	seen := map[int]bool{}
	for _, x := range xs {
		if x >= 0 && !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// testChecksummedDamage damages each file and records the damaged bytes'
// checksum in the handle, as a writer with a bug would: the damage gets
// past the file checksum and reaches the decoders. The restore must then
// fail with an error wrapping ErrCorrupt (or ErrIncompatible, for a header
// that now claims another format), or succeed with every read returning
// exactly the snapshot's state or an error wrapping ErrCorrupt. Nothing
// may panic, and nothing may silently read back wrong state.
func testChecksummedDamage(t *testing.T, e *env) {
	h, mh := damageSetupModel(t, e)
	detected, benign := 0, 0
	for i, f := range h.Files {
		orig := e.read(t, f.Path)
		for _, pos := range dedupe(0, 1, len(orig)/3, len(orig)/2, 2*len(orig)/3, len(orig)-2, len(orig)-1) {
			if pos >= len(orig) {
				continue
			}
			bad := append([]byte(nil), orig...)
			bad[pos] ^= 0xff
			e.replace(t, f.Path, bad)
			c := copyHandle(t, h)
			c.Files[i].CRC32C = frame.Checksum(bad)
			damage := "byte " + strconv.Itoa(pos) + " of " + f.Path + " flipped and checksummed"
			o := e.opts(testRange, modelStates...)
			o.Restore = []*backend.Handle{c}
			b, err := e.open(t, o)
			if err != nil {
				if !errors.Is(err, backend.ErrCorrupt) && !errors.Is(err, backend.ErrIncompatible) {
					t.Fatalf("restore with %s: error %q wraps neither ErrCorrupt nor ErrIncompatible", damage, err)
				}
				t.Logf("restore with %s: %v", damage, err)
				detected++
				continue
			}
			// Read until the backend reports the damage (once it has, it
			// may refuse or log every further read; what matters is that
			// no read before returned wrong state).
			m := mh.Clone()
			failed := false
			for _, rd := range readOps(m, testRange, modelDomain, true) {
				if failed {
					break
				}
				got, want, err := run(b, m, rd, e.clock.Ms())
				switch {
				case err != nil && errors.Is(err, backend.ErrCorrupt):
					t.Logf("restore with %s succeeded; %v: %v", damage, rd, err)
					failed = true
				case err != nil:
					t.Fatalf("restore with %s, then %v: error %q does not wrap ErrCorrupt", damage, rd, err)
				case !reflect.DeepEqual(got, want):
					t.Fatalf("restore with %s, then %v: got %v, the snapshot held %v (damage read back as data)", damage, rd, got, want)
				}
			}
			if failed {
				detected++
			} else {
				benign++
			}
			must(t, b.Close(), "close")
		}
		e.replace(t, f.Path, orig)
	}
	t.Logf("%d damages detected, %d harmless", detected, benign)
}

// damageSetupModel is damageSetup that also returns the model at the
// snapshot.
func damageSetupModel(t *testing.T, e *env) (*backend.Handle, *Model) {
	c := newRand(8)
	b := e.mustOpen(t, e.opts(testRange, modelStates...))
	m := NewModel(modelStates...)
	e.randomOps(t, c, b, m, testRange, 400)
	h1 := e.checkpoint(t, b)
	b.NotifyCheckpointComplete(h1.CheckpointID)
	e.randomOps(t, c, b, m, testRange, 200)
	mh := m.Clone()
	h := e.checkpoint(t, b)
	if len(h.Files) == 0 {
		t.Fatalf("checkpoint %d has no files", h.CheckpointID)
	}
	must(t, b.Close(), "close")
	compareAll(t, e.restore(t, testRange, modelStates, h), mh.Clone(), testRange, modelDomain, e.clock.Ms(), true, "restored before any damage")
	return h, mh
}
