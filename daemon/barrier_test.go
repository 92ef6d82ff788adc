package daemon_test

import (
	"context"
	"fmt"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/host"
)

// openCLTasks opens n file-backend subtasks of job in changelog mode.
func openCLTasks(t *testing.T, e *env, job string, n int, restore *daemon.RestoreSpec) []*daemon.Instance {
	t.Helper()
	var ins []*daemon.Instance
	for sub := range n {
		in, err := e.d.Open(context.Background(), daemon.OpenParams{Task: backend.TaskID{Job: job, Operator: "op", Subtask: sub},
			KeyGroups: backend.KeyGroupRangeForOperator(128, n, sub), MaxParallelism: 128, Kind: backend.KindFile, States: valueState,
			Changelog: daemon.ChangelogOn, Restore: restore})
		if err != nil {
			t.Fatal(err)
		}
		if !in.Changelog() {
			t.Fatalf("subtask %d is not in changelog mode", sub)
		}
		ins = append(ins, in)
	}
	return ins
}

// TestChangelogBarrierIsOneSegment: the tasks of a job reach a
// checkpoint's barrier one after the other and keep writing until they
// do; the log's changes of all of them up to the barrier go into one
// segment (one PUT on an object store), not one cut per task, and a
// second daemon restores every task exactly from it.
func TestChangelogBarrierIsOneSegment(t *testing.T) {
	const tasks = 4
	ctx := context.Background()
	e := newEnv(t, func(o *host.Options) {
		// Only a barrier cuts the log here; the linger is far above the
		// gaps between the tasks' barriers below.
		o.ChangelogFlushDelay = time.Hour
		o.ChannelStateLinger = 20 * time.Second
	})
	ins := openCLTasks(t, e, "j", tasks, nil)
	for _, in := range ins {
		putN(t, in, 0, 30, "a")
	}
	snapshotAll(t, e, "j", 1, ins)

	w := e.node.ChangelogWriter()
	before := w.Metrics().SegmentsWritten
	for sub, in := range ins {
		// Each task writes up to its barrier, later than the one before:
		// the earlier tasks' uploads run meanwhile.
		putN(t, in, 20, 60, fmt.Sprintf("b%d-", sub))
		if _, err := e.d.Snapshot(ctx, in, 2, false); err != nil {
			t.Fatal(err)
		}
		time.Sleep(40 * time.Millisecond)
	}
	if _, err := e.d.CompleteCheckpoint(ctx, "j", 2, nil); err != nil {
		t.Fatal(err)
	}
	if n := w.Metrics().SegmentsWritten - before; n != 1 {
		t.Fatalf("checkpoint 2 of %d tasks cut the log into %d segments, want 1", tasks, n)
	}
	m1, _ := e.cat.Checkpoint("j", 1)
	m2, _ := e.cat.Checkpoint("j", 2)
	old := map[string]bool{}
	for _, h := range m1.Tasks {
		for _, s := range h.Log.Segments {
			old[s] = true
		}
	}
	var seg string
	for _, h := range m2.Tasks {
		for _, s := range h.Log.Segments {
			if old[s] {
				continue
			}
			if seg != "" && s != seg {
				t.Fatalf("checkpoint 2 references new segments %s and %s", seg, s)
			}
			seg = s
		}
	}
	if seg == "" {
		t.Fatal("checkpoint 2 references no new segment")
	}
	segmentsOK(t, e, "j")

	e2 := newEnvOn(t, e.store, nil)
	restored := openCLTasks(t, e2, "j", tasks, &daemon.RestoreSpec{Latest: true, NoClaim: true})
	for sub, in := range restored {
		checkN(t, in, 0, 20, "a")
		checkN(t, in, 20, 60, fmt.Sprintf("b%d-", sub))
	}
}

// TestChangelogManifestsInline: a changelog checkpoint writes the log's
// barrier segment and the catalog's objects, and no object for the
// tasks' changelog manifests (neither one each nor a pack of them):
// each handle carries its manifest. A second daemon restores every task
// from the checkpoint and from a savepoint copied out of it, and
// verification reads the inline manifests.
func TestChangelogManifestsInline(t *testing.T) {
	const tasks = 4
	ctx := context.Background()
	e := newEnv(t, func(o *host.Options) { o.ChangelogFlushDelay = time.Hour })
	ins := openCLTasks(t, e, "j", tasks, nil)
	for _, in := range ins {
		putN(t, in, 0, 30, "a")
	}
	snapshotAll(t, e, "j", 1, ins)
	for _, in := range ins {
		putN(t, in, 20, 50, "b")
	}
	snapshotAll(t, e, "j", 2, ins)
	for _, id := range []uint64{1, 2} {
		dir := fmt.Sprintf("j/chk-%d/", id)
		for _, n := range storeNames(t, e.store, dir) {
			if strings.HasSuffix(n, "/_changelog") || strings.Contains(n, "/packed-") {
				t.Fatalf("checkpoint %d wrote %s: its manifests should be in the handles (objects %v)", id, n, storeNames(t, e.store, dir))
			}
		}
		m, ok := e.cat.Checkpoint("j", id)
		if !ok {
			t.Fatalf("checkpoint %d not retained", id)
		}
		for _, h := range m.Tasks {
			inline := 0
			for _, f := range h.Files {
				if f.Inline != nil {
					inline++
					if path.Base(f.Path) != "_changelog" || h.Version < backend.HandleVersionInline {
						t.Fatalf("checkpoint %d, %s: inline file %s in a version %d handle", id, h.Task, f.Path, h.Version)
					}
				}
			}
			if inline != 1 {
				t.Fatalf("checkpoint %d, %s: %d inline files, want its manifest: %+v", id, h.Task, inline, h.Files)
			}
		}
		rep, err := catalog.Verify(ctx, e.store, fmt.Sprintf("j/chk-%d", id), 2)
		if err != nil || len(rep.Problems) != 0 {
			t.Fatalf("verify checkpoint %d: %v %+v", id, err, rep)
		}
	}
	if _, err := e.cat.SavepointFromCheckpoint(ctx, "sp", "j", 2); err != nil {
		t.Fatal(err)
	}
	for _, restore := range []*daemon.RestoreSpec{{Latest: true, NoClaim: true}, {Savepoint: "sp"}} {
		e2 := newEnvOn(t, e.store, nil)
		for sub, in := range openCLTasks(t, e2, "j", tasks, restore) {
			checkN(t, in, 0, 20, "a")
			checkN(t, in, 20, 50, "b")
			if err := e2.d.CloseInstance(in.ID, "j"); err != nil {
				t.Fatalf("subtask %d: %v", sub, err)
			}
		}
	}
}
