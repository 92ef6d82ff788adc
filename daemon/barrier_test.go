package daemon_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
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
