package s3e2e_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/daemon"
	statednode "github.com/statedhq/stated/host"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/cache"
	"github.com/statedhq/stated/tiered/fault"
)

// Settings of the daemon under test: few checkpoints retained and a short
// grace, so that retention deletes and orphan sweeps run under faults too.
const (
	daemonRetain  = 3
	daemonGrace   = 3 * time.Second
	daemonTimeout = 2 * time.Second
	daemonSweep   = 300 * time.Millisecond
	daemonJob     = "job"
	daemonSubtask = 3
)

// node is a daemon assembled as "stated serve" assembles it (package
// node), on an injected store: the tiered cache in front of S3 with the
// catalog's metadata bypassing it (catalog.IsMetadata), shared by the
// catalog and the daemon.
type node struct {
	n     *statednode.Host
	d     *daemon.Daemon
	cat   *catalog.Catalog
	store tiered.Store
	logs  *warnings
}

// warnings counts the log records at level warn and above (the catalog's
// retried deletes among them).
type warnings struct{ n atomic.Int64 }

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnings) Handle(context.Context, slog.Record) error    { w.n.Add(1); return nil }
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler           { return w }
func (w *warnings) WithGroup(string) slog.Handler                { return w }
func (w *warnings) Load() int64                                  { return w.n.Load() }

func startNode(t *testing.T, remote tiered.Store, dataDir string) *node {
	t.Helper()
	logs := &warnings{}
	sn, err := statednode.Open(context.Background(), statednode.Options{
		DataDir: dataDir, Store: remote, NoSocket: true, CacheDir: filepath.Join(dataDir, "cache"), CacheBytes: 256 << 20,
		Retain: daemonRetain, GCGrace: daemonGrace, SweepInterval: daemonSweep, CheckpointTimeout: daemonTimeout,
		ShutdownGrace: time.Minute, Logger: slog.New(logs),
	})
	if err != nil {
		t.Fatal(err)
	}
	n := &node{n: sn, d: sn.Daemon(), cat: sn.Catalog(), store: sn.Store(), logs: logs}
	for _, p := range n.cat.Problems() {
		t.Errorf("catalog problem: %s", p)
	}
	return n
}

// stop shuts the node down as serve does on SIGTERM.
func (n *node) stop(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := n.n.Shutdown(ctx); err != nil {
		t.Errorf("shutdown: %v", err)
	}
}

// daemonTask is one subtask of the job: its instance and its model.
type daemonTask struct {
	id   backend.TaskID
	kind backend.Kind
	kg   backend.KeyGroupRange
	keys []int // the model keys in kg
	in   *daemon.Instance
	m    *model
}

func daemonTasks() []*daemonTask {
	kinds := []backend.Kind{backend.KindLSM, backend.KindLSM, backend.KindFile}
	var ts []*daemonTask
	for sub := range daemonSubtask {
		dt := &daemonTask{id: backend.TaskID{Job: daemonJob, Operator: "op", Subtask: sub}, kind: kinds[sub],
			kg: backend.KeyGroupRangeForOperator(backend.DefaultMaxParallelism, daemonSubtask, sub), m: newModel()}
		for i := range keys {
			if dt.kg.Contains(key(i).KeyGroup) {
				dt.keys = append(dt.keys, i)
			}
		}
		ts = append(ts, dt)
	}
	return ts
}

func (dt *daemonTask) open(ctx context.Context, d *daemon.Daemon, restore *daemon.RestoreSpec) (*daemon.Instance, error) {
	return d.Open(ctx, daemon.OpenParams{Task: dt.id, KeyGroups: dt.kg, Parallelism: daemonSubtask, Kind: dt.kind,
		States: states, Restore: restore})
}

// clearReason says whether err, with the daemon's prefix, is an injected
// store failure or names one: a checkpoint another task's failed upload
// aborted carries that failure as its reason, in text.
func clearReason(err error) bool {
	if !strings.HasPrefix(err.Error(), "daemon: ") {
		return false
	}
	return errors.Is(err, fault.ErrInjected) ||
		errors.Is(err, daemon.ErrCheckpointFailed) && strings.Contains(err.Error(), fault.ErrInjected.Error())
}

// TestDaemonCheckpointsToS3UnderFaults drives the daemon and its catalog,
// wired as stated serve wires them, with an S3 checkpoint store (through
// the local cache) where 10% of the calls fail and some replies are lost.
// Checkpoints of three tasks (two lsm, one file) run until several have
// completed and several failed; with three retained, retention deletes
// and the orphan sweep run under faults. Every checkpoint completes or
// fails with an injected failure as its reason, in the caller's error and
// in the history. Then the faults stop; a GC leaves exactly the retained
// checkpoints' files in the bucket, and each of them verifies (read from
// S3, not the cache). The whole data directory, cache included, is
// deleted; a new daemon restores every task from the latest completed
// checkpoint, from S3 alone, and each equals its model; one more
// checkpoint then completes.
func TestDaemonCheckpointsToS3UnderFaults(t *testing.T) {
	ctx := context.Background()
	s3 := openS3(t)
	faulty := fault.New(s3, fault.Config{})
	dataDir := t.TempDir()
	n := startNode(t, faulty, dataDir)
	tasks := daemonTasks()
	for _, dt := range tasks {
		in, err := dt.open(ctx, n.d, nil)
		if err != nil {
			t.Fatal(err)
		}
		dt.in = in
	}
	faulty.SetConfig(fault.Config{Seed: 31, ErrorRate: 0.10, LostReplyRate: 0.02})

	r := rand.New(rand.NewPCG(5, 6))
	models := map[uint64][]*model{} // completed checkpoint -> model of each task
	var failed []uint64
	failures := map[uint64]error{}
	for id := uint64(1); id <= 40 || (len(models) < 2*daemonRetain || len(failed) < 5) && id <= 120; id++ {
		for _, dt := range tasks {
			for range 150 {
				applyOne(t, r, dt.in.Backend, dt.m, dt.keys[r.IntN(len(dt.keys))], false)
			}
		}
		err := runCheckpoint(ctx, n.d, tasks, id)
		if err != nil {
			if !clearReason(err) {
				t.Fatalf("checkpoint %d failed without a clear reason: %v", id, err)
			}
			failed = append(failed, id)
			failures[id] = err
			continue
		}
		snap := make([]*model, len(tasks))
		for i, dt := range tasks {
			snap[i] = dt.m.clone()
		}
		models[id] = snap
	}
	faulty.SetConfig(fault.Config{})
	fs := faulty.Stats()
	t.Logf("%d checkpoints completed, %d failed; store faults %+v; %d warnings logged", len(models), len(failed), fs, n.logs.Load())
	if len(models) < 2*daemonRetain || len(failed) < 5 || fs.Errors == 0 || fs.LostReplies == 0 {
		t.Fatalf("%d checkpoints completed and %d failed: the run proves little", len(models), len(failed))
	}
	// The checkpoints went through the cache (the catalog's checks of
	// uploaded files were answered from local copies).
	if c, ok := n.store.(interface{ Stats() cache.Stats }); !ok || c.Stats().Hits == 0 {
		t.Fatalf("the checkpoint store %T is no cache, or one that was never hit", n.store)
	}

	// The history names every checkpoint, and why each failed one failed.
	// A checkpoint whose upload failed is aborted by the daemon in the
	// background (a later AbortCheckpoint returns at once), and one whose
	// completion failed and was never retried is expired by the daemon's
	// timer: wait for both.
	byID := map[uint64]daemon.CheckpointInfo{}
	for deadline := time.Now().Add(daemonTimeout + 10*time.Second); ; {
		infos, err := n.d.ListCheckpoints(ctx, daemonJob)
		if err != nil {
			t.Fatal(err)
		}
		settled := true
		for _, ci := range infos {
			byID[ci.ID] = ci
			settled = settled && ci.Status != string(catalog.StatusInProgress)
		}
		if settled || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	var retained []uint64
	for id := range models {
		ci, ok := byID[id]
		if !ok || ci.Status != string(catalog.StatusCompleted) {
			t.Errorf("completed checkpoint %d is %+v in the history", id, ci)
		}
		if ci.Retained {
			retained = append(retained, id)
		}
	}
	for _, id := range failed {
		ci, ok := byID[id]
		if !ok || ci.Status == string(catalog.StatusCompleted) || ci.Reason == "" {
			t.Errorf("failed checkpoint %d is %+v in the history: no failure with a reason (it failed with: %v)", id, ci, failures[id])
		}
	}
	slices.Sort(retained)
	completedIDs := slices.Sorted(maps.Keys(models))
	last := completedIDs[len(completedIDs)-1]
	if want := completedIDs[len(completedIDs)-daemonRetain:]; !slices.Equal(retained, want) {
		t.Fatalf("retained checkpoints %v, want the last %d completed %v", retained, daemonRetain, want)
	}
	for _, dt := range tasks {
		if err := n.d.CloseInstance(dt.in.ID, daemonJob); err != nil {
			t.Fatal(err)
		}
	}
	// With the faults gone, a GC past the grace period deletes what the
	// faults left behind (subsumed checkpoints whose deletes failed,
	// uploads of aborted ones); a second one finds nothing.
	time.Sleep(daemonGrace + 100*time.Millisecond)
	rep, err := n.cat.GC(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("GC after the faults: %d orphans deleted (%d bytes), %d young, problems %v", len(rep.Orphans), rep.Bytes, rep.Young, rep.Problems)
	n.stop(t)

	// The bucket holds the retained checkpoints and nothing unreferenced.
	manifests := map[uint64]bool{}
	err = tiered.Walk(ctx, s3, daemonJob+"/", func(o tiered.ObjectInfo) error {
		var id uint64
		if _, err := fmt.Sscanf(o.Name, daemonJob+"/chk-%d/_metadata", &id); err == nil && strings.HasSuffix(o.Name, "/_metadata") {
			manifests[id] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(maps.Keys(manifests)); !slices.Equal(got, retained) {
		t.Fatalf("manifests in the bucket %v, want the retained checkpoints %v (retention deletes lost under faults?)", got, retained)
	}
	chk, err := catalog.Open(ctx, catalog.Options{Store: s3, GCGrace: daemonGrace})
	if err != nil {
		t.Fatal(err)
	}
	rep, err = chk.GC(ctx, true)
	chk.Close()
	if err != nil || len(rep.Orphans) > 0 || len(rep.Problems) > 0 {
		t.Fatalf("unreferenced objects left in the bucket after GC: %v %+v", err, rep)
	}
	for _, id := range retained {
		v, err := catalog.Verify(ctx, s3, catalog.CheckpointDir(daemonJob, id), 0)
		if err != nil || !v.OK() || v.Files == 0 {
			t.Fatalf("verify checkpoint %d in S3: %v %+v", id, err, v)
		}
	}

	// Local loss: the data directory and the cache in it are gone. A new
	// daemon restores from S3 only.
	if err := os.RemoveAll(dataDir); err != nil {
		t.Fatal(err)
	}
	n2 := startNode(t, openS3Like(t, s3), t.TempDir())
	defer n2.stop(t)
	for i, dt := range tasks {
		in, err := dt.open(ctx, n2.d, &daemon.RestoreSpec{Latest: true})
		if err != nil {
			t.Fatalf("restore %s from the latest checkpoint: %v", dt.id, err)
		}
		if in.RestoredFrom != last {
			t.Fatalf("%s restored checkpoint %d, want the latest completed %d", dt.id, in.RestoredFrom, last)
		}
		checkRange(t, fmt.Sprintf("%s restored from checkpoint %d", dt.id, last), in.Backend, models[last][i], dt.kg)
		dt.in, dt.m = in, models[last][i].clone()
	}
	for _, dt := range tasks {
		for range 50 {
			applyOne(t, r, dt.in.Backend, dt.m, dt.keys[r.IntN(len(dt.keys))], false)
		}
	}
	if err := runCheckpoint(ctx, n2.d, tasks, last+1); err != nil {
		t.Fatalf("checkpoint after the restore: %v", err)
	}
}

// runCheckpoint snapshots every task and completes checkpoint id as a
// coordinator does: a completion the catalog could not record is retried,
// then the checkpoint is aborted. A nil error means it completed.
func runCheckpoint(ctx context.Context, d *daemon.Daemon, tasks []*daemonTask, id uint64) error {
	var errs []error
	for _, dt := range tasks {
		if _, err := d.Snapshot(ctx, dt.in, id, false); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		for range 3 {
			_, err := d.CompleteCheckpoint(ctx, daemonJob, id, nil)
			if err == nil {
				return nil
			}
			errs = append(errs, err)
			if errors.Is(err, daemon.ErrCheckpointFailed) {
				return errors.Join(errs...) // aborted by the daemon
			}
		}
	}
	err := errors.Join(errs...)
	reason := "aborted: " + err.Error()
	for range 20 {
		aerr := d.AbortCheckpoint(ctx, daemonJob, id, reason)
		if aerr == nil {
			return err
		}
		errs = append(errs, aerr)
	}
	return fmt.Errorf("checkpoint %d could not be aborted: %w", id, errors.Join(errs...))
}
