package lsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/statedhq/stated/backend"
)

// planHandle is a handle of kind with key groups [start, end] and files.
func planHandle(kind backend.Kind, subtask, start, end int, files ...backend.FileRef) *backend.Handle {
	return &backend.Handle{Backend: kind, Task: backend.TaskID{Job: "job", Operator: "op", Subtask: subtask}, CheckpointID: 1,
		KeyGroups: backend.KeyGroupRange{Start: start, End: end}, Files: files}
}

// sst is an SST whose keys lie in key groups [lo, hi].
func sst(name string, lo, hi int) backend.FileRef {
	return backend.FileRef{Path: "shared/" + name, LocalName: name, Size: 100, KeyGroupBounds: &backend.KeyGroupRange{Start: lo, End: hi}}
}

// lsmFiles are the files every lsm handle has besides its SSTs: the
// MANIFEST, OPTIONS and an empty WAL.
func lsmFiles(ssts ...backend.FileRef) []backend.FileRef {
	return append(ssts,
		backend.FileRef{Path: "chk-1/MANIFEST-000001", LocalName: "MANIFEST-000001", Size: 50},
		backend.FileRef{Path: "chk-1/OPTIONS-000002", LocalName: "OPTIONS-000002", Size: 50},
		backend.FileRef{Path: "chk-1/000003.log", LocalName: "000003.log"})
}

// describe prints a plan in a form a table can spell out: each step as
// "<role> <handle> <runs>", then for lsm steps the local names fetched,
// skipped and verified and the clipped spans as key groups (min and max
// for the unbounded ends).
func describe(p *restorePlan) string {
	var b strings.Builder
	kg := func(k []byte, min string) string {
		switch {
		case len(k) == 0:
			return min
		case len(k) == 1 && k[0] == 0xff:
			return "max"
		}
		return fmt.Sprint(binary.BigEndian.Uint16(k))
	}
	names := func(fs []backend.FileRef) string {
		var out []string
		for _, f := range fs {
			out = append(out, f.LocalName)
		}
		return strings.Join(out, ",")
	}
	step := func(role string, s restoreStep) {
		fmt.Fprintf(&b, "%s %d %v", role, s.index, s.runs)
		if s.h.Backend == backend.KindLSM {
			var spans []string
			for _, c := range s.clip {
				spans = append(spans, kg(c.Start, "min")+"-"+kg(c.End, "min"))
			}
			fmt.Fprintf(&b, " fetch[%s] skip[%s] verify[%s] clip[%s]", names(s.files.fetch), names(s.files.skip), names(s.files.verify), strings.Join(spans, " "))
		}
		b.WriteString("\n")
	}
	if p.base != nil {
		step("base", *p.base)
	}
	for _, s := range p.extras {
		step("extra", s)
	}
	for _, s := range p.canonical {
		step("canonical", s)
	}
	fmt.Fprintf(&b, "graft %v reopen %v", p.graft, p.reopen())
	return b.String()
}

// TestPlanRestore: the plan of a restore, from the handles, the key groups
// restored and whether grafting is allowed, with no I/O.
func TestPlanRestore(t *testing.T) {
	lsmKind, heapKind, fileKind := backend.KindLSM, backend.KindHeap, backend.KindFile
	kgr := func(s, e int) backend.KeyGroupRange { return backend.KeyGroupRange{Start: s, End: e} }
	for _, c := range []struct {
		name    string
		handles []*backend.Handle
		r       backend.KeyGroupRange
		graft   bool
		want    string
	}{{
		name:    "one handle restored whole: nothing skipped, nothing clipped",
		handles: []*backend.Handle{planHandle(lsmKind, 0, 0, 127, lsmFiles(sst("000004.sst", 0, 127))...)},
		r:       kgr(0, 127), graft: true,
		want: "base 0 [[0,127]] fetch[000004.sst,MANIFEST-000001,OPTIONS-000002] skip[] verify[000003.log] clip[]\n" +
			"graft false reopen false",
	}, {
		name: "scale-out: SSTs outside the range are skipped, the rest clipped below and above",
		handles: []*backend.Handle{planHandle(lsmKind, 0, 0, 127, lsmFiles(
			sst("000004.sst", 0, 20), sst("000005.sst", 30, 40), sst("000006.sst", 60, 70),
			backend.FileRef{Path: "shared/000007.sst", LocalName: "000007.sst", Size: 9}, // no bounds: fetched
			sst("000008.sst", 100, 40000), // bounds past the valid key groups: not trusted
		)...)},
		r: kgr(32, 63), graft: true,
		want: "base 0 [[32,63]] fetch[000005.sst,000006.sst,000007.sst,000008.sst,MANIFEST-000001,OPTIONS-000002] skip[000004.sst] verify[000003.log] clip[min-32 64-max]\n" +
			"graft false reopen true",
	}, {
		// Only spans that meet a handle's key groups (or hold a skipped
		// file) are clipped: elsewhere its store has nothing.
		name: "scale-in: the handle with the most key groups is the base, the other grafted",
		handles: []*backend.Handle{
			planHandle(lsmKind, 0, 0, 63, lsmFiles(sst("000004.sst", 0, 10), sst("000005.sst", 11, 63))...),
			planHandle(lsmKind, 1, 64, 127, lsmFiles(sst("000004.sst", 64, 127))...),
		},
		r: kgr(20, 120), graft: true,
		want: "base 1 [[64,120]] fetch[000004.sst,MANIFEST-000001,OPTIONS-000002] skip[] verify[000003.log] clip[121-max]\n" +
			"extra 0 [[20,63]] fetch[000005.sst,MANIFEST-000001,OPTIONS-000002] skip[000004.sst] verify[000003.log] clip[min-20]\n" +
			"graft true reopen true",
	}, {
		name: "scale-in with NoGraft: the other handle is copied, the base opened once",
		handles: []*backend.Handle{
			planHandle(lsmKind, 0, 0, 63, lsmFiles(sst("000004.sst", 0, 63))...),
			planHandle(lsmKind, 1, 64, 127, lsmFiles(sst("000004.sst", 64, 127))...),
		},
		r: kgr(0, 127), graft: false,
		want: "base 0 [[0,63]] fetch[000004.sst,MANIFEST-000001,OPTIONS-000002] skip[] verify[000003.log] clip[]\n" +
			"extra 1 [[64,127]] fetch[000004.sst,MANIFEST-000001,OPTIONS-000002] skip[] verify[000003.log] clip[]\n" +
			"graft false reopen false",
	}, {
		name: "a tie goes to the first listed",
		handles: []*backend.Handle{
			planHandle(lsmKind, 1, 64, 127, lsmFiles()...),
			planHandle(lsmKind, 0, 0, 63, lsmFiles()...),
		},
		r: kgr(32, 95), graft: true,
		want: "base 0 [[64,95]] fetch[MANIFEST-000001,OPTIONS-000002] skip[] verify[000003.log] clip[96-max]\n" +
			"extra 1 [[32,63]] fetch[MANIFEST-000001,OPTIONS-000002] skip[] verify[000003.log] clip[min-32]\n" +
			"graft true reopen true",
	}, {
		name: "the first listed owns a key group: a canonical handle splits the lsm one's runs",
		handles: []*backend.Handle{
			planHandle(heapKind, 0, 40, 50),
			planHandle(lsmKind, 1, 0, 127, lsmFiles(sst("000004.sst", 42, 48))...),
			planHandle(fileKind, 2, 0, 127), // owns nothing: left out
		},
		r: kgr(0, 127), graft: true,
		want: "base 1 [[0,39] [51,127]] fetch[MANIFEST-000001,OPTIONS-000002] skip[000004.sst] verify[000003.log] clip[40-51]\n" +
			"canonical 0 [[40,50]]\n" +
			"graft false reopen true",
	}, {
		name: "canonical handles only: the store starts empty",
		handles: []*backend.Handle{
			planHandle(fileKind, 0, 0, 63),
			planHandle(heapKind, 1, 64, 127),
		},
		r: kgr(60, 70), graft: true,
		want: "canonical 0 [[60,63]]\ncanonical 1 [[64,70]]\ngraft false reopen false",
	}, {
		name: "a skipped file below the range keeps its span clipped though the handle holds none of it",
		handles: []*backend.Handle{
			planHandle(lsmKind, 0, 64, 127, lsmFiles(sst("000004.sst", 10, 20), sst("000005.sst", 64, 127))...),
		},
		r: kgr(64, 127), graft: true,
		want: "base 0 [[64,127]] fetch[000005.sst,MANIFEST-000001,OPTIONS-000002] skip[000004.sst] verify[000003.log] clip[min-64]\n" +
			"graft false reopen true",
	}} {
		t.Run(c.name, func(t *testing.T) {
			p, err := planRestore(testTask, c.handles, c.r, c.graft)
			if err != nil {
				t.Fatal(err)
			}
			if got := describe(p); got != c.want {
				t.Fatalf("plan:\n%s\nwant:\n%s", got, c.want)
			}
		})
	}
}

// TestPlanRestoreRefuses: a handle of another kind, or an lsm handle whose
// file list is unsafe, fails the plan, before anything is downloaded.
func TestPlanRestoreRefuses(t *testing.T) {
	r := backend.KeyGroupRange{Start: 0, End: 127}
	withFile := func(f backend.FileRef) []*backend.Handle {
		return []*backend.Handle{
			planHandle(backend.KindLSM, 0, 0, 63, lsmFiles()...),
			planHandle(backend.KindLSM, 1, 64, 127, lsmFiles(f)...),
		}
	}
	for _, c := range []struct {
		name    string
		handles []*backend.Handle
		want    error
		msg     string
	}{
		{"another kind", []*backend.Handle{planHandle("rocksdb", 0, 0, 127)}, backend.ErrIncompatible, `backend "rocksdb"`},
		{"a local name outside the directory", withFile(backend.FileRef{Path: "x", LocalName: "../x"}), backend.ErrCorrupt, `local name "../x"`},
		{"a local name twice", withFile(backend.FileRef{Path: "x", LocalName: "MANIFEST-000001"}), backend.ErrCorrupt, "appears twice"},
		{"a compressed file", withFile(backend.FileRef{Path: "x", LocalName: "000009.sst", Compression: "zstd"}), backend.ErrCorrupt, "zstd-compressed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := planRestore(testTask, c.handles, r, true)
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("plan %v, error %v; want %v with %q", p, err, c.want, c.msg)
			}
		})
	}
}

// TestPlanClipSpansCoverEverythingElse: for every split of two handles
// into up to five subtasks, each key of a handle's key groups is either in
// the runs restored from it or in a span clipped from its store, never
// both.
func TestPlanClipSpansCoverEverythingElse(t *testing.T) {
	for n := 1; n <= 5; n++ {
		for i := 0; i < n; i++ {
			r := backend.KeyGroupRangeForOperator(128, n, i)
			hs := []*backend.Handle{
				planHandle(backend.KindLSM, 0, 0, 40, lsmFiles()...),
				planHandle(backend.KindLSM, 1, 41, 127, lsmFiles()...),
			}
			p, err := planRestore(testTask, hs, r, true)
			if err != nil {
				t.Fatal(err)
			}
			steps := append([]restoreStep(nil), p.extras...)
			if p.base != nil {
				steps = append(steps, *p.base)
			}
			for _, s := range steps {
				for kg := s.h.KeyGroups.Start; kg <= s.h.KeyGroups.End; kg++ {
					kept := false
					for _, run := range s.runs {
						kept = kept || run.Contains(kg)
					}
					k := []byte{byte(kg >> 8), byte(kg), 'x'}
					clipped := false
					for _, c := range s.clip {
						clipped = clipped || (pebble.DefaultComparer.Compare(c.Start, k) <= 0 && pebble.DefaultComparer.Compare(k, c.End) < 0)
					}
					if kept == clipped {
						t.Fatalf("%d of %d, handle %d: key group %d kept %v, clipped %v", i, n, s.index, kg, kept, clipped)
					}
				}
			}
		}
	}
}
