package daemon_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/host"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// openFileTasks opens n file-backend subtasks of job, each with keys
// k0..k{keys-1} = "<val><subtask>-<key>".
func openFileTasks(t *testing.T, e *env, job string, n, keys int, val string, restore *daemon.RestoreSpec) []*daemon.Instance {
	t.Helper()
	var ins []*daemon.Instance
	for sub := range n {
		in, err := e.d.Open(context.Background(), daemon.OpenParams{Task: backend.TaskID{Job: job, Operator: "op", Subtask: sub},
			KeyGroups: backend.KeyGroupRangeForOperator(128, n, sub), MaxParallelism: 128, Kind: backend.KindFile, States: valueState,
			Restore: restore})
		if err != nil {
			t.Fatal(err)
		}
		if restore == nil {
			for k := range keys {
				if err := in.Backend.Put("v", backend.Key{KeyGroup: in.KeyGroups.Start, Key: fmt.Appendf(nil, "k%d", k)}, fmt.Appendf(nil, "%s%d-%d", val, sub, k)); err != nil {
					t.Fatal(err)
				}
			}
		}
		ins = append(ins, in)
	}
	return ins
}

// checkFileTasks checks what openFileTasks wrote.
func checkFileTasks(t *testing.T, ins []*daemon.Instance, keys int, val string) {
	t.Helper()
	for sub, in := range ins {
		for k := range keys {
			got, ok, err := in.Backend.Get("v", backend.Key{KeyGroup: in.KeyGroups.Start, Key: fmt.Appendf(nil, "k%d", k)})
			if want := fmt.Sprintf("%s%d-%d", val, sub, k); err != nil || !ok || string(got) != want {
				t.Fatalf("subtask %d key %d: %q %v %v, want %q", sub, k, got, ok, err, want)
			}
		}
	}
}

// snapshotAll snapshots every instance at once, as their barriers
// arrive, then completes id.
func snapshotAll(t *testing.T, e *env, job string, id uint64, ins []*daemon.Instance) {
	t.Helper()
	ctx := context.Background()
	errs := make(chan error, len(ins))
	for _, in := range ins {
		go func() {
			_, err := e.d.Snapshot(ctx, in, id, false)
			errs <- err
		}()
	}
	for range ins {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.d.CompleteCheckpoint(ctx, job, id, nil); err != nil {
		t.Fatal(err)
	}
}

// TestPackedCheckpointIsOneObject: the snapshot files of 16 file-backend
// tasks of a job checkpointed together go into one object, not one each;
// every handle says where its file lies, a second daemon restores every
// task from it with ranged reads, verification reads the packed files,
// and retention deletes the object with its checkpoint.
func TestPackedCheckpointIsOneObject(t *testing.T) {
	const tasks, keys = 16, 50
	store := memstore.New()
	e := newEnvOn(t, store, func(o *host.Options) { o.Retain = 1 })
	ins := openFileTasks(t, e, "j", tasks, keys, "v", nil)
	snapshotAll(t, e, "j", 1, ins)
	names := storeNames(t, store, "j/chk-1/")
	var packs []string
	for _, n := range names {
		if strings.Contains(n, "/packed-") {
			packs = append(packs, n)
		}
	}
	if len(packs) != 1 || len(names) != 2 {
		t.Fatalf("checkpoint 1 wrote %v: want the manifest and one pack", names)
	}
	m, ok := e.cat.Checkpoint("j", 1)
	if !ok || len(m.Tasks) != tasks {
		t.Fatalf("checkpoint 1: %v %+v", ok, m)
	}
	for _, h := range m.Tasks {
		if h.Version != backend.HandleVersionPacked || len(h.Files) != 1 || h.Files[0].Pack == nil || h.Files[0].Pack.Object != packs[0] {
			t.Fatalf("handle of %s: version %d, files %+v: want its file in %s", h.Task, h.Version, h.Files, packs[0])
		}
	}
	rep, err := catalog.Verify(context.Background(), store, "j/chk-1", 2)
	if err != nil || len(rep.Problems) != 0 || rep.Files != tasks {
		t.Fatalf("verify: %v %+v", err, rep)
	}

	e2 := newEnvOn(t, store, nil)
	restored := make([]*daemon.Instance, 0, tasks)
	for sub := range tasks {
		in, err := e2.d.Open(context.Background(), daemon.OpenParams{Task: backend.TaskID{Job: "j", Operator: "op", Subtask: sub},
			KeyGroups: backend.KeyGroupRangeForOperator(128, tasks, sub), MaxParallelism: 128, Kind: backend.KindFile, States: valueState,
			Restore: &daemon.RestoreSpec{Latest: true, NoClaim: true}})
		if err != nil {
			t.Fatal(err)
		}
		restored = append(restored, in)
	}
	checkFileTasks(t, restored, keys, "v")

	// Checkpoint 2 subsumes 1 (retain 1): its pack goes with it.
	snapshotAll(t, e, "j", 2, ins)
	deadline := time.Now().Add(5 * time.Second)
	for len(storeNames(t, store, "j/chk-1/")) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("checkpoint 1's objects are still there: %v", storeNames(t, store, "j/chk-1/"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPackedFilesOff: with packing off every file is an object of its
// own, in a handle of the version before packing.
func TestPackedFilesOff(t *testing.T) {
	store := memstore.New()
	e := newEnvOn(t, store, func(o *host.Options) { o.PackFileBytes = -1 })
	ins := openFileTasks(t, e, "j", 4, 10, "v", nil)
	snapshotAll(t, e, "j", 1, ins)
	if n := len(storeNames(t, store, "j/chk-1/")); n != 5 {
		t.Fatalf("%d objects under checkpoint 1, want 4 files and the manifest", n)
	}
	m, _ := e.cat.Checkpoint("j", 1)
	for _, h := range m.Tasks {
		if h.Version >= backend.HandleVersionPacked || h.Files[0].Pack != nil {
			t.Fatalf("handle of %s: version %d, file %+v", h.Task, h.Version, h.Files[0])
		}
	}
}

var updatePacked = flag.Bool("update-packed", false, "regenerate testdata/pinned-packed and testdata/pinned-plain")

// TestPinnedPackedCheckpoints: checkpoints written by this version with
// packing (handle version 5) and without it (the format before packing,
// handle version 1), kept as the store's bytes under testdata, still
// restore. Regenerate (only for a new format, keeping these) with
// go test ./daemon -run TestPinnedPackedCheckpoints -update-packed.
func TestPinnedPackedCheckpoints(t *testing.T) {
	for _, tc := range []struct {
		dir     string
		pack    int64
		version int
	}{{"testdata/pinned-packed", 0, backend.HandleVersionPacked}, {"testdata/pinned-plain", -1, backend.HandleVersionBase}} {
		t.Run(filepath.Base(tc.dir), func(t *testing.T) {
			if *updatePacked {
				store := memstore.New()
				e := newEnvOn(t, store, func(o *host.Options) { o.PackFileBytes = tc.pack })
				snapshotAll(t, e, "j", 1, openFileTasks(t, e, "j", 3, 20, "pinned", nil))
				if err := os.RemoveAll(tc.dir); err != nil {
					t.Fatal(err)
				}
				for _, n := range storeNames(t, store, "") {
					data, err := tiered.ReadAll(context.Background(), store, n, 1<<20)
					if err != nil {
						t.Fatal(err)
					}
					p := filepath.Join(tc.dir, filepath.FromSlash(n))
					if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(p, data, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			store := memstore.New()
			err := filepath.WalkDir(tc.dir, func(p string, de fs.DirEntry, err error) error {
				if err != nil || de.IsDir() {
					return err
				}
				data, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				rel, _ := filepath.Rel(tc.dir, p)
				return store.Put(context.Background(), filepath.ToSlash(rel), bytes.NewReader(data), int64(len(data)))
			})
			if err != nil {
				t.Fatal(err)
			}
			e := newEnvOn(t, store, nil)
			m, ok := e.cat.Checkpoint("j", 1)
			if !ok || len(m.Tasks) != 3 {
				t.Fatalf("pinned checkpoint: %v %+v", ok, m)
			}
			for _, h := range m.Tasks {
				if h.Version != tc.version || (h.Files[0].Pack != nil) != (tc.version == backend.HandleVersionPacked) {
					t.Fatalf("pinned handle of %s: version %d, file %+v", h.Task, h.Version, h.Files[0])
				}
			}
			checkFileTasks(t, openFileTasks(t, e, "j", 3, 20, "pinned", &daemon.RestoreSpec{Latest: true}), 20, "pinned")
		})
	}
}

// TestPackedLargeFilesAreOneObject: the file backend's snapshot files go
// into the checkpoint's one pack whatever their size (here 4 files above
// the 4 MiB that bounded packing before), and restore exactly from it.
func TestPackedLargeFilesAreOneObject(t *testing.T) {
	const tasks, keys, valSize = 4, 1300, 4 << 10
	store := memstore.New()
	e := newEnvOn(t, store, nil)
	value := func(sub, k int) []byte {
		v := make([]byte, valSize)
		r := rand.New(rand.NewPCG(uint64(sub), uint64(k)))
		for i := range v {
			v[i] = byte(r.Uint32())
		}
		return v
	}
	var ins []*daemon.Instance
	for sub := range tasks {
		in, err := e.d.Open(context.Background(), daemon.OpenParams{Task: backend.TaskID{Job: "j", Operator: "op", Subtask: sub},
			KeyGroups: backend.KeyGroupRangeForOperator(128, tasks, sub), MaxParallelism: 128, Kind: backend.KindFile, States: valueState})
		if err != nil {
			t.Fatal(err)
		}
		for k := range keys {
			if err := in.Backend.Put("v", backend.Key{KeyGroup: in.KeyGroups.Start, Key: fmt.Appendf(nil, "k%d", k)}, value(sub, k)); err != nil {
				t.Fatal(err)
			}
		}
		ins = append(ins, in)
	}
	snapshotAll(t, e, "j", 1, ins)
	names := storeNames(t, store, "j/chk-1/")
	if len(names) != 2 || !strings.Contains(names[0]+names[1], "/packed-") {
		t.Fatalf("checkpoint 1 wrote %v: want the manifest and one pack", names)
	}
	m, _ := e.cat.Checkpoint("j", 1)
	for _, h := range m.Tasks {
		if len(h.Files) != 1 || h.Files[0].Pack == nil || h.Files[0].Size <= 4<<20 {
			t.Fatalf("handle of %s: files %+v: want one packed file above 4 MiB", h.Task, h.Files)
		}
	}
	e2 := newEnvOn(t, store, nil)
	for sub := range tasks {
		in, err := e2.d.Open(context.Background(), daemon.OpenParams{Task: backend.TaskID{Job: "j", Operator: "op", Subtask: sub},
			KeyGroups: backend.KeyGroupRangeForOperator(128, tasks, sub), MaxParallelism: 128, Kind: backend.KindFile, States: valueState,
			Restore: &daemon.RestoreSpec{Latest: true, NoClaim: true}})
		if err != nil {
			t.Fatal(err)
		}
		for k := range keys {
			got, ok, err := in.Backend.Get("v", backend.Key{KeyGroup: in.KeyGroups.Start, Key: fmt.Appendf(nil, "k%d", k)})
			if err != nil || !ok || !bytes.Equal(got, value(sub, k)) {
				t.Fatalf("subtask %d key %d: %d bytes %v %v, not its value", sub, k, len(got), ok, err)
			}
		}
	}
}

// TestPackWaitsForSlowFiles: once every task here has snapshotted, the
// pack waits for a task whose file takes longer than the linger to
// write (a big state) instead of sealing without it: one object per
// checkpoint, not one per linger.
func TestPackWaitsForSlowFiles(t *testing.T) {
	const tasks, bigKeys, valSize = 4, 4 << 10, 4 << 10 // task 0: 16 MiB
	store := memstore.New()
	e := newEnvOn(t, store, func(o *host.Options) { o.ChannelStateLinger = 40 * time.Millisecond })
	val := make([]byte, valSize)
	r := rand.New(rand.NewPCG(1, 2))
	var ins []*daemon.Instance
	for sub := range tasks {
		in, err := e.d.Open(context.Background(), daemon.OpenParams{Task: backend.TaskID{Job: "j", Operator: "op", Subtask: sub},
			KeyGroups: backend.KeyGroupRangeForOperator(128, tasks, sub), MaxParallelism: 128, Kind: backend.KindFile, States: valueState})
		if err != nil {
			t.Fatal(err)
		}
		keys := 10
		if sub == 0 {
			keys = bigKeys
		}
		for k := range keys {
			for i := range val {
				val[i] = byte(r.Uint32())
			}
			if err := in.Backend.Put("v", backend.Key{KeyGroup: in.KeyGroups.Start, Key: fmt.Appendf(nil, "k%d", k)}, val); err != nil {
				t.Fatal(err)
			}
		}
		ins = append(ins, in)
	}
	// The big task first: the small ones' files wait in the pack while
	// its file is written, long past the linger.
	ctx := context.Background()
	start := time.Now()
	for _, in := range ins {
		if _, err := e.d.Snapshot(ctx, in, 1, false); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.d.CompleteCheckpoint(ctx, "j", 1, nil); err != nil {
		t.Fatal(err)
	}
	t.Logf("checkpoint of %d MiB took %v", bigKeys*valSize>>20, time.Since(start))
	var packs []string
	for _, n := range storeNames(t, store, "j/chk-1/") {
		if strings.Contains(n, "/packed-") {
			packs = append(packs, n)
		}
	}
	if len(packs) != 1 {
		t.Fatalf("checkpoint 1 wrote packs %v, want one", packs)
	}
}

// TestPackWaitsForTasksStillArriving: on a loaded host the tasks of a
// job reach a checkpoint one by one, the last past the linger after the
// first file waits in the pack. While they keep arriving (each within a
// linger of the one before) the pack waits for them: one object. The
// rule before sealed a linger after the first file, whatever came next.
func TestPackWaitsForTasksStillArriving(t *testing.T) {
	const tasks, keys, gap, linger = 6, 10, 50 * time.Millisecond, 200 * time.Millisecond
	store := memstore.New()
	e := newEnvOn(t, store, func(o *host.Options) { o.ChannelStateLinger = linger })
	ins := openFileTasks(t, e, "j", tasks, keys, "v", nil)
	ctx := context.Background()
	start := time.Now()
	for i, in := range ins {
		if i > 0 {
			time.Sleep(gap)
		}
		if _, err := e.d.Snapshot(ctx, in, 1, false); err != nil {
			t.Fatal(err)
		}
	}
	if spread := time.Since(start); spread <= linger {
		t.Fatalf("the tasks arrived within %v, not past the linger %v: the test shows nothing", spread, linger)
	}
	if _, err := e.d.CompleteCheckpoint(ctx, "j", 1, nil); err != nil {
		t.Fatal(err)
	}
	var packs []string
	for _, n := range storeNames(t, store, "j/chk-1/") {
		if strings.Contains(n, "/packed-") {
			packs = append(packs, n)
		}
	}
	if len(packs) != 1 {
		t.Fatalf("checkpoint 1 of tasks arriving %v apart wrote packs %v, want one", gap, packs)
	}
	e2 := newEnvOn(t, store, nil)
	checkFileTasks(t, openFileTasks(t, e2, "j", tasks, keys, "v", &daemon.RestoreSpec{Latest: true, NoClaim: true}), keys, "v")
}

// TestPackDoesNotWaitForATaskThatNeverSnapshots: a task of the job open
// here that never takes part in the checkpoint holds the others' pack
// back for one linger after the last of them arrived, not until the
// checkpoint times out.
func TestPackDoesNotWaitForATaskThatNeverSnapshots(t *testing.T) {
	const tasks, keys, linger = 3, 10, 100 * time.Millisecond
	store := memstore.New()
	e := newEnvOn(t, store, func(o *host.Options) {
		o.ChannelStateLinger = linger
		o.CheckpointTimeout = time.Minute
	})
	ins := openFileTasks(t, e, "j", tasks, keys, "v", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var ids []backend.TaskID
	for _, in := range ins[:tasks-1] {
		if _, err := e.d.Snapshot(ctx, in, 1, false); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, in.Task)
	}
	start := time.Now()
	if _, err := e.d.CompleteCheckpoint(ctx, "j", 1, ids); err != nil {
		t.Fatalf("completing without the task that never snapshotted: %v (after %v)", err, time.Since(start))
	}
	var packs []string
	for _, n := range storeNames(t, store, "j/chk-1/") {
		if strings.Contains(n, "/packed-") {
			packs = append(packs, n)
		}
	}
	if len(packs) != 1 {
		t.Fatalf("checkpoint 1 wrote packs %v, want one", packs)
	}
	t.Logf("completed %v after the last task arrived (linger %v)", time.Since(start), linger)
}
