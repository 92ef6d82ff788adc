package fuzz

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/statedhq/stated/api"
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/daemon"
)

// restoreBound is how long one restore of a damaged fixture may take: a
// restore that runs past it hangs.
const restoreBound = 20 * time.Second

// judge says what is wrong with the outcome err of a restore of objects
// damaged at changed (nil: acceptable). Acceptable are exact state, and
// an error that wraps backend.ErrCorrupt or backend.ErrIncompatible and
// names a damaged object; a heap checkpoint whose
// snapshot is gone from daemon memory may also answer
// daemon.ErrSnapshotGone, as it does after a restart. After a field edit
// (edited), which frames the manifest validly again, any error with a
// gRPC code other than Internal will do: the manifest describes some
// other checkpoint, and the error names what does not fit it.
func judge(err error, changed []string, edited bool) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errMismatch):
		return err
	case len(changed) == 0:
		return fmt.Errorf("undamaged fixture refused: %w", err)
	case edited && api.Code(err) != codes.Internal:
		// A validly framed manifest that describes other state (a state
		// of another type, handles that leave key groups out as a
		// checkpoint of only some subtasks does, a file path that is not
		// in the store) is a source the instance cannot restore, and the
		// error says what does not fit.
		return nil
	case errors.Is(err, daemon.ErrSnapshotGone):
		for _, n := range changed {
			if strings.HasPrefix(n, heapPrefix) {
				return nil
			}
		}
		return fmt.Errorf("snapshot gone, but no heap snapshot was damaged: %w", err)
	case errors.Is(err, backend.ErrCorrupt), errors.Is(err, backend.ErrIncompatible):
		if namesOne(err.Error(), changed) {
			return nil
		}
		return fmt.Errorf("the error names none of the damaged objects %q: %w", changed, err)
	}
	return fmt.Errorf("neither corruption nor incompatibility: %w", err)
}

// namesOne reports whether msg names one of the objects: by its name in
// the store or, inside a savepoint, by its path relative to the
// savepoint's directory.
func namesOne(msg string, objects []string) bool {
	for _, n := range objects {
		n = strings.TrimPrefix(n, heapPrefix)
		if strings.Contains(msg, n) {
			return true
		}
		if rest, ok := strings.CutPrefix(n, catalog.SavepointsDir+"/"); ok {
			if _, rel, ok := strings.Cut(rest, "/"); ok && strings.Contains(msg, rel) {
				return true
			}
		}
	}
	return false
}

// manifestDeleted reports whether a manifest of f is missing from objects:
// the catalog then cannot tell the checkpoint from one that retention
// removed, and answers not found.
func manifestDeleted(f *fixture, objects map[string][]byte) bool {
	for n := range f.objects {
		if _, ok := objects[n]; !ok && strings.HasSuffix(n, "/"+catalog.ManifestName) {
			return true
		}
	}
	return false
}

// runInput is one fuzz execution: pick the source by the first byte,
// damage a copy of the fixture as the rest says, restore, judge.
func runInput(t *testing.T, kind backend.Kind, root string, in []byte) {
	f := fixtureOf(t, kind)
	if len(in) == 0 {
		return
	}
	srcs := sources(kind)
	src := srcs[int(in[0])%len(srcs)]
	objects := f.clone()
	names := f.names()
	var changed []string
	ms := parseMutations(in[1:])
	edited := false
	// chanOnly: every damage hit channel state alone (its objects, or a
	// segment or count of a manifest that stays valid), which a restore
	// without the checkpoint's channel state must then survive.
	chanOnly := true
	for _, m := range ms {
		c, leaf := m.applyLeaf(objects, names)
		changed = append(changed, c...)
		edited = edited || m.kind == mutEdit && len(c) > 0
		for _, n := range c {
			switch {
			case m.kind == mutEdit:
				_, err := catalog.DecodeManifest(objects[n])
				chanOnly = chanOnly && strings.Contains(leaf, "/channels/") && err == nil
			default:
				chanOnly = chanOnly && isChannelObject(n)
			}
		}
	}
	if _, ok := objects[catalog.CheckpointManifest(job, 2)]; !ok {
		src.latestIs = 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), restoreBound)
	defer cancel()
	start := time.Now()
	err := restore(ctx, root, f, objects, src)
	if d := time.Since(start); d > restoreBound {
		t.Fatalf("%s, mutations %v: the restore took %s", src, ms, d)
	}
	if err != nil && manifestDeleted(f, objects) && errors.Is(err, backend.ErrNotFound) {
		return // a checkpoint or savepoint without a manifest does not exist
	}
	if bad := judge(err, changed, edited); bad != nil {
		t.Fatalf("%s fixture, %s, mutations %v: %v", kind, src, ms, bad)
	}
	if err == nil || !errors.Is(err, backend.ErrCorrupt) || !chanOnly || len(changed) == 0 || src.savepoint != "" {
		return
	}
	// The DataLoss was the channel state's: the engine may knowingly give
	// it up and restore the keyed and operator state.
	src.skipChannels = true
	if err := restore(ctx, root, f, objects, src); err != nil {
		t.Fatalf("%s fixture, %s, mutations %v: after %v: %v", kind, src, ms, api.Code(err), err)
	}
}

func fuzzRestore(f *testing.F, kind backend.Kind) {
	defer silence()()
	fx := fixtureOf(f, kind)
	for _, s := range seeds(fx) {
		f.Add(s)
	}
	root := scratchDir(f)
	f.Fuzz(func(t *testing.T, in []byte) { runInput(t, kind, root, in) })
}

// seeds are a few inputs of every mutation kind against the newest
// checkpoint's objects, besides the committed corpus.
func seeds(f *fixture) [][]byte {
	names := f.names()
	idx := func(pred func(string) bool) int {
		for i, n := range names {
			if pred(n) {
				return i
			}
		}
		return 0
	}
	manifest := idx(func(n string) bool { return n == catalog.CheckpointManifest(job, 2) })
	data := idx(func(n string) bool {
		return strings.Contains(n, "chk-2/op-0/") && !strings.HasSuffix(n, catalog.ManifestName) || strings.HasSuffix(n, ".sst")
	})
	old := idx(func(n string) bool { return strings.Contains(n, "chk-1/op-0/") })
	chans := idx(func(n string) bool { return isChannelObject(n) && strings.Contains(n, "/chk-2/") })
	oldChans := idx(func(n string) bool { return isChannelObject(n) && strings.Contains(n, "/chk-1/") })
	// Manifest edits of channel state: a segment's offset and length, a
	// channel's record count and kind (field index other+256*(hi>>2)).
	var chanEdits []mutation
	if _, _, _, leaves, ok := editableLeaves(f.objects[catalog.CheckpointManifest(job, 2)]); ok {
		for i, l := range leaves {
			for _, suffix := range []string{"/channels/0/segments/1/offset", "/channels/1/segments/0/length", "/channels/1/records", "/channels/0/kind", "/channels/1/segments/0/path", "/channels/0/segments/0/crc32c"} {
				if strings.HasPrefix(l, "/tasks/1/") && strings.HasSuffix(l, suffix) {
					chanEdits = append(chanEdits, mutation{kind: mutEdit, obj: manifest, other: i % 256, hi: 4*(i/256) + 2, offset: 5})
				}
			}
		}
	}
	var out [][]byte
	// Source 1: checkpoint 2 into the same kind at parallelism 1 (a
	// rescale); source 6: checkpoint 1 at the old parallelism.
	for _, src := range []byte{1, 6, 2} {
		out = append(out,
			[]byte{src},
			append([]byte{src}, encodeMutations(mutation{kind: mutFlip, hi: 3, obj: manifest, offset: 40})...),
			append([]byte{src}, encodeMutations(mutation{kind: mutFlip, hi: 5, obj: data, offset: 100})...),
			append([]byte{src}, encodeMutations(mutation{kind: mutTruncate, obj: data, offset: 30})...),
			append([]byte{src}, encodeMutations(mutation{kind: mutZero, hi: 15, obj: data, offset: 8})...),
			append([]byte{src}, encodeMutations(mutation{kind: mutDelete, obj: data})...),
			append([]byte{src}, encodeMutations(mutation{kind: mutSwap, obj: data, other: old})...),
			append([]byte{src}, encodeMutations(mutation{kind: mutReplace, obj: data, other: old})...),
			append([]byte{src}, encodeMutations(mutation{kind: mutEdit, obj: manifest, other: 7, hi: 2, offset: 3})...),
			append([]byte{src}, encodeMutations(mutation{kind: mutAppend, hi: 2, obj: data, offset: 0x41})...),
			append([]byte{src}, encodeMutations(mutation{kind: mutFlip, hi: 1, obj: chans, offset: 300})...),
			append([]byte{src}, encodeMutations(mutation{kind: mutTruncate, obj: chans, offset: 500})...),
			append([]byte{src}, encodeMutations(mutation{kind: mutDelete, obj: chans})...),
			append([]byte{src}, encodeMutations(mutation{kind: mutReplace, obj: chans, other: oldChans})...),
			append([]byte{src}, encodeMutations(mutation{kind: mutSwap, obj: oldChans, other: chans})...),
		)
		for _, m := range chanEdits {
			out = append(out, append([]byte{src}, encodeMutations(m)...))
		}
	}
	return out
}

// FuzzRestoreHeap damages heap checkpoints and savepoints and restores them.
func FuzzRestoreHeap(f *testing.F) { fuzzRestore(f, backend.KindHeap) }

// FuzzRestoreFile damages file checkpoints and savepoints and restores them.
func FuzzRestoreFile(f *testing.F) { fuzzRestore(f, backend.KindFile) }

// FuzzRestoreLSM damages lsm checkpoints and savepoints and restores them.
func FuzzRestoreLSM(f *testing.F) { fuzzRestore(f, backend.KindLSM) }
