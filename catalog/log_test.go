package catalog

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/dstl"
	"github.com/statedhq/stated/internal/frame"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// heldSet stands in for the live changelog writer's segments.
type heldSet struct {
	mu sync.Mutex
	m  map[string]bool
}

func (h *heldSet) set(name string, held bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[string]bool{}
	}
	h.m[name] = held
}

func (h *heldSet) holds(name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.m[name]
}

// logHandle is a changelog-mode handle of checkpoint id: one private
// manifest in the checkpoint store and the given log segments.
func logHandle(t *testing.T, s tiered.Store, task backend.TaskID, id uint64, segs ...string) *backend.Handle {
	t.Helper()
	data := []byte(fmt.Sprintf("manifest of %d", id))
	p := fmt.Sprintf("%s/%s/_changelog", CheckpointDir(task.Job, id), task.Dir())
	if err := tiered.PutBytes(ctx, s, p, data); err != nil {
		t.Fatal(err)
	}
	return &backend.Handle{Version: backend.HandleVersionLog, Backend: backend.KindHeap, Task: task, CheckpointID: id,
		KeyGroups: backend.KeyGroupRange{Start: 0, End: 127}, MaxParallelism: 128,
		Files: []backend.FileRef{{Path: p, Size: int64(len(data)), CRC32C: frame.Checksum(data)}},
		Log:   &backend.HandleLog{Segments: segs, Bytes: 10}}
}

func putSegment(t *testing.T, s tiered.Store, name string) {
	t.Helper()
	if err := tiered.PutBytes(ctx, s, name, []byte("segment "+name)); err != nil {
		t.Fatal(err)
	}
}

func completeWith(t *testing.T, c *Catalog, job string, id uint64, h *backend.Handle) {
	t.Helper()
	if err := c.BeginCheckpoint(job, id); err != nil {
		t.Fatal(err)
	}
	if err := c.AddTaskHandle(job, id, h); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Complete(ctx, job, id); err != nil {
		t.Fatal(err)
	}
}

// TestLogSegmentsLifecycle: a segment lives while a retained checkpoint
// references it or the live log holds it, and goes when neither does,
// whether retention or the writer lets go last; it lives in the log store,
// not the checkpoint store.
func TestLogSegmentsLifecycle(t *testing.T) {
	for _, separate := range []bool{false, true} {
		t.Run(fmt.Sprintf("separate=%v", separate), func(t *testing.T) {
			s := memstore.New()
			ls := tiered.Store(s)
			if separate {
				ls = memstore.New()
			}
			held := &heldSet{}
			clk := &testClock{}
			c := openCat(t, s, clk, func(o *Options) { o.LogStore = ls; o.LogHeld = held.holds; o.Retain = 1 })
			task := backend.TaskID{Job: "j", Operator: "op", Subtask: 0}
			a, b, x := LogDir+"/shared/run/a", LogDir+"/shared/run/b", LogDir+"/shared/run/x"
			for _, n := range []string{a, b, x} {
				putSegment(t, ls, n)
			}
			held.set(a, true)
			completeWith(t, c, "j", 1, logHandle(t, s, task, 1, a, x))
			// Retention drops checkpoint 1: x goes (nothing holds it), a stays
			// (the live log still holds it).
			completeWith(t, c, "j", 2, logHandle(t, s, task, 2, b))
			if exists(t, ls, x) {
				t.Errorf("segment %s survived its last checkpoint", x)
			}
			if !exists(t, ls, a) || !exists(t, ls, b) {
				t.Fatalf("a held or referenced segment is gone: a=%v b=%v", exists(t, ls, a), exists(t, ls, b))
			}
			// The writer lets go of a and b: a goes, b stays (checkpoint 2).
			held.set(a, false)
			if err := c.ReleaseLog(ctx, []string{a, b}); err != nil {
				t.Fatal(err)
			}
			if exists(t, ls, a) {
				t.Errorf("released segment %s that no checkpoint references was kept", a)
			}
			if !exists(t, ls, b) {
				t.Fatalf("released segment %s of retained checkpoint 2 was deleted", b)
			}
			// A reopened catalog counts the segment again from the manifests.
			c.Close()
			c = openCat(t, s, clk, func(o *Options) { o.LogStore = ls; o.LogHeld = held.holds; o.Retain = 1 })
			clk.Advance(2 * time.Hour)
			if _, err := c.GC(ctx, false); err != nil {
				t.Fatal(err)
			}
			if !exists(t, ls, b) {
				t.Fatalf("the sweep after a reopen deleted %s, which checkpoint 2 references", b)
			}
			completeWith(t, c, "j", 3, logHandle(t, s, task, 3))
			if exists(t, ls, b) {
				t.Errorf("segment %s survived its last checkpoint after a reopen", b)
			}
		})
	}
}

// TestLogSweep: the sweep deletes old segments nothing references or
// holds, and keeps young, held and referenced ones.
func TestLogSweep(t *testing.T) {
	for _, separate := range []bool{false, true} {
		t.Run(fmt.Sprintf("separate=%v", separate), func(t *testing.T) {
			s := memstore.New()
			ls := tiered.Store(s)
			if separate {
				ls = memstore.New()
			}
			held := &heldSet{}
			clk := &testClock{}
			c := openCat(t, s, clk, func(o *Options) { o.LogStore = ls; o.LogHeld = held.holds })
			task := backend.TaskID{Job: "j", Operator: "op", Subtask: 0}
			orphan, heldSeg, ref := LogDir+"/shared/r/orphan", LogDir+"/shared/r/held", LogDir+"/shared/r/ref"
			for _, n := range []string{orphan, heldSeg, ref} {
				putSegment(t, ls, n)
			}
			held.set(heldSeg, true)
			completeWith(t, c, "j", 1, logHandle(t, s, task, 1, ref))
			rep, err := c.GC(ctx, false)
			if err != nil {
				t.Fatal(err)
			}
			if !exists(t, ls, orphan) || rep.Young == 0 {
				t.Fatalf("a young orphan was deleted (young %d)", rep.Young)
			}
			clk.Advance(2 * time.Hour)
			if _, err := c.GC(ctx, false); err != nil {
				t.Fatal(err)
			}
			if exists(t, ls, orphan) {
				t.Errorf("old orphan segment %s survived the sweep", orphan)
			}
			if !exists(t, ls, heldSeg) || !exists(t, ls, ref) {
				t.Errorf("the sweep deleted a held (%v) or referenced (%v) segment", !exists(t, ls, heldSeg), !exists(t, ls, ref))
			}
			if separate {
				// Names under LogDir in the checkpoint root are not the
				// log's: they are left alone.
				stray := LogDir + "/shared/old/stray"
				putSegment(t, s, stray)
				clk.Advance(2 * time.Hour)
				if _, err := c.GC(ctx, false); err != nil {
					t.Fatal(err)
				}
				if !exists(t, s, stray) {
					t.Errorf("the sweep deleted %s from the checkpoint root, which is not the log store", stray)
				}
			}
		})
	}
}

// TestLogSegmentsChecked: a handle whose log segments lie outside LogDir is
// refused, and so is one naming a segment being deleted.
func TestLogSegmentsChecked(t *testing.T) {
	s := memstore.New()
	clk := &testClock{}
	c := openCat(t, s, clk)
	task := backend.TaskID{Job: "j", Operator: "op", Subtask: 0}
	if err := c.BeginCheckpoint("j", 1); err != nil {
		t.Fatal(err)
	}
	h := logHandle(t, s, task, 1, "j/shared/not-a-segment")
	if err := c.AddTaskHandle("j", 1, h); err == nil {
		t.Fatal("a log segment outside the log directory was accepted")
	}
	seg := LogDir + "/shared/r/s"
	c.mu.Lock()
	c.mu.guard.deleting[seg] = true
	c.mu.Unlock()
	if err := c.AddTaskHandle("j", 1, logHandle(t, s, task, 1, seg)); err == nil {
		t.Fatal("a handle naming a segment being deleted was accepted")
	}
}

// TestVerifyLogSegments: Verify reads back every segment a checkpoint's
// handles list from the log store and checks it whole: an intact one
// passes, a flipped byte and a missing one are reported.
func TestVerifyLogSegments(t *testing.T) {
	s, ls := memstore.New(), memstore.New()
	clk := &testClock{}
	c := openCat(t, s, clk, func(o *Options) { o.LogStore = ls })
	task := backend.TaskID{Job: "j", Operator: "op", Subtask: 0}
	sb := dstl.NewSegmentBuilder(0, true)
	for i := uint64(1); i <= 50; i++ {
		if err := sb.Add("w", i, int(i%8), []byte(fmt.Sprintf("change %d", i))); err != nil {
			t.Fatal(err)
		}
	}
	data, _, err := sb.Encode()
	if err != nil {
		t.Fatal(err)
	}
	good, gone := LogDir+"/shared/r/good", LogDir+"/shared/r/gone"
	if err := tiered.PutBytes(ctx, ls, good, data); err != nil {
		t.Fatal(err)
	}
	if err := tiered.PutBytes(ctx, ls, gone, data); err != nil {
		t.Fatal(err)
	}
	completeWith(t, c, "j", 1, logHandle(t, s, task, 1, gone, good))
	rep, err := c.Verify(ctx, "j", 1)
	if err != nil || !rep.OK() || rep.Files != 3 {
		t.Fatalf("intact: %+v %v", rep, err)
	}
	bad := append([]byte(nil), data...)
	bad[len(bad)/2] ^= 1
	if err := tiered.PutBytes(ctx, ls, good, bad); err != nil {
		t.Fatal(err)
	}
	if err := ls.Delete(ctx, gone); err != nil {
		t.Fatal(err)
	}
	rep, err = c.Verify(ctx, "j", 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) != 2 || !rep.Problems[0].Missing || rep.Problems[0].Path != gone ||
		rep.Problems[1].Path != good || !strings.Contains(rep.Problems[1].Detail, "changelog segment") {
		t.Fatalf("a damaged and a missing segment: problems %v", rep.Problems)
	}
}
