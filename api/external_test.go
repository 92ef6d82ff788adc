package api_test

import (
	"cmp"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/host"
	"github.com/statedhq/stated/tiered/s3store"
	"github.com/statedhq/stated/tiered/s3store/s3test"
)

// The externally owned mode (issue 33), from outside through the
// generated stubs, as the Flink backend's Java client uses it.

// extHarness starts a daemon with an external directory next to its
// checkpoint store; it returns the harness, the stubs and the directory.
func extHarness(t *testing.T, node func(*host.Options)) (*harness, pb.StatedClient, string) {
	t.Helper()
	var ext string
	h := startDaemon(t, harnessOpts{node: func(o *host.Options) {
		ext = filepath.Join(filepath.Dir(o.DataDir), "ext")
		o.ExternalDir = ext
		if node != nil {
			node(o)
		}
	}})
	return h, rawConn(t, h), ext
}

var extStates = []*pb.StateDescriptor{{Name: "v", Kind: pb.StateKind_STATE_KIND_VALUE}}

func extOpen(job, root string, sub, par int, handles ...[]byte) *pb.OpenRequest {
	return &pb.OpenRequest{Task: &pb.TaskId{Job: job, Operator: "op", Subtask: int32(sub)}, Parallelism: int32(par),
		BackendKind: pb.BackendKind_BACKEND_KIND_LSM, States: extStates,
		External: &pb.ExternalOwnership{Root: root, RestoreHandles: handles}}
}

// extPut writes keys key<from>..key<to-1> (value "v<i>-<round>") that fall
// in kg, and returns how many it wrote.
func extPut(t *testing.T, ws *wireStream, kg backend.KeyGroupRange, from, to int, round string) int {
	t.Helper()
	var ops []*pb.Op
	for i := from; i < to; i++ {
		op := putOp(fmt.Sprint("key", i), fmt.Sprintf("v%d-%s", i, round))
		if kg.Contains(int(op.KeyGroup)) {
			ops = append(ops, op)
		}
	}
	res, _ := ws.do(&pb.BatchRequest{Ops: ops})
	for _, r := range res {
		if r.Code != 0 {
			t.Fatalf("put: %v", r)
		}
	}
	return len(ops)
}

// extSnap takes a barrier snapshot and waits for it with AwaitSnapshot.
func extSnap(t *testing.T, rpc pb.StatedClient, ws *wireStream, open *pb.OpenResponse, job string, id uint64, full bool) *pb.ExternalSnapshot {
	t.Helper()
	_, resp := ws.do(&pb.BatchRequest{Snapshot: &pb.SnapshotBarrier{CheckpointId: id, FullCheckpoint: full}})
	if resp.Snapshot.GetCode() != 0 {
		t.Fatalf("snapshot %d: %v", id, resp.Snapshot)
	}
	r, err := rpc.AwaitSnapshot(ctxT(t), &pb.AwaitSnapshotRequest{InstanceId: open.InstanceId, Job: job, CheckpointId: id})
	if err != nil {
		t.Fatal(err)
	}
	s := r.Snapshot
	if s.CheckpointId != id || len(s.TaskHandle) == 0 || len(s.Files) == 0 {
		t.Fatalf("snapshot %d: %+v", id, s)
	}
	for _, f := range s.Files {
		if strings.HasPrefix(f.Location, "s3://") {
			continue // TestExternalOnS3 checks its objects
		}
		fi, err := os.Stat(f.Location)
		if err != nil || fi.Size() != f.Size {
			t.Fatalf("snapshot %d: file %s: %v (size %d, listed %d)", id, f.Location, err, fi.Size(), f.Size)
		}
	}
	return s
}

// shared returns the paths of s's shared files.
func shared(s *pb.ExternalSnapshot) map[string]int64 {
	out := map[string]int64{}
	for _, f := range s.Files {
		if f.Shared {
			out[f.Path] = f.Size
		}
	}
	return out
}

// reusedFrom returns the shared paths of s that old also lists, and the
// bytes of the files of s that old does not.
func reusedFrom(s, old *pb.ExternalSnapshot) (reused []string, newBytes int64) {
	prev := shared(old)
	for _, f := range s.Files {
		if _, ok := prev[f.Path]; ok && f.Shared {
			reused = append(reused, f.Path)
		} else {
			newBytes += f.Size
		}
	}
	return reused, newBytes
}

func TestExternalIncrementalReuse(t *testing.T) {
	ctx := ctxT(t)
	_, rpc, ext := extHarness(t, nil)
	const job = "flinkjob"
	all := backend.KeyGroupRange{Start: 0, End: backend.DefaultMaxParallelism - 1}

	t.Run("confirmed files are reused, only new ones written", func(t *testing.T) {
		open, ws := openWire(t, rpc, extOpen(job, "ckpts/"+job, 0, 1))
		// The load goes to key groups 0-126 and the later writes to 127,
		// beside it in key order: Pebble moves their SST down instead of
		// rewriting the store's one other SST with it (in a store this
		// small, any overlapping flush would be compacted with all of it).
		extPut(t, ws, backend.KeyGroupRange{Start: 0, End: 126}, 0, 5000, "a")
		// Snapshot 1 flushes the load; Pebble compacts a store with an
		// empty base level at once, so the test lets it settle (as a
		// long-running task's store is) before the base it checks.
		s0 := extSnap(t, rpc, ws, open, job, 1, false)
		time.Sleep(300 * time.Millisecond)
		s1 := extSnap(t, rpc, ws, open, job, 2, false)
		if len(shared(s1)) == 0 {
			t.Fatalf("snapshot 2 lists no shared file: %+v", s1.Files)
		}
		for _, s := range []*pb.ExternalSnapshot{s0, s1} {
			for _, f := range s.Files {
				want := fmt.Sprintf("ckpts/%s/chk-%d/", job, s.CheckpointId)
				if f.Shared {
					want = "ckpts/" + job + "/shared/"
				}
				if !strings.HasPrefix(f.Path, want) || f.Location != filepath.Join(ext, filepath.FromSlash(f.Path)) {
					t.Errorf("file %s (location %s, shared %v): want it under %s of %s", f.Path, f.Location, f.Shared, want, ext)
				}
				// Flink deletes a checkpoint's directory without
				// recursion: private files sit in it, not below.
				if name := strings.TrimPrefix(f.Path, want); !f.Shared && strings.Contains(name, "/") {
					t.Errorf("private file %s is in a subdirectory of %s", f.Path, want)
				}
			}
			// Nothing was confirmed yet: everything is written anew.
			if s.CheckpointedSize != s.FullSize {
				t.Errorf("snapshot %d wrote %d of %d bytes", s.CheckpointId, s.CheckpointedSize, s.FullSize)
			}
		}
		if _, err := rpc.ConfirmSnapshot(ctx, &pb.ConfirmSnapshotRequest{InstanceId: open.InstanceId, Job: job, CheckpointId: 2}); err != nil {
			t.Fatal(err)
		}
		extPut(t, ws, backend.KeyGroupRange{Start: 127, End: 127}, 5000, 10000, "b")
		// With wait, the barrier's answer carries the snapshot.
		_, resp := ws.do(&pb.BatchRequest{Snapshot: &pb.SnapshotBarrier{CheckpointId: 3, Wait: true}})
		s2 := resp.Snapshot.GetResult().GetExternal()
		if resp.Snapshot.GetCode() != 0 || s2 == nil {
			t.Fatalf("snapshot 3: %v", resp.Snapshot)
		}
		reused, newBytes := reusedFrom(s2, s1)
		if len(reused) != len(shared(s1)) {
			t.Errorf("snapshot 3 reuses %d of snapshot 2's %d shared files: %v\n%v", len(reused), len(shared(s1)), s1.Files, s2.Files)
		}
		if len(shared(s2)) <= len(reused) {
			t.Errorf("snapshot 3 lists no new shared file (%d shared, %d reused)", len(shared(s2)), len(reused))
		}
		if s2.CheckpointedSize != newBytes || s2.CheckpointedSize*5 >= s2.FullSize {
			t.Errorf("snapshot 3 wrote %d bytes, its new files hold %d, full size %d", s2.CheckpointedSize, newBytes, s2.FullSize)
		}
		t.Logf("snapshot 3 after new keys in one key group wrote %d of %d bytes", s2.CheckpointedSize, s2.FullSize)

		// A full checkpoint (NO_CLAIM restore) reuses nothing, though 3
		// is confirmed.
		if _, err := rpc.ConfirmSnapshot(ctx, &pb.ConfirmSnapshotRequest{InstanceId: open.InstanceId, Job: job, CheckpointId: 3}); err != nil {
			t.Fatal(err)
		}
		extPut(t, ws, all, 5050, 5060, "c")
		s3 := extSnap(t, rpc, ws, open, job, 4, true)
		if r, _ := reusedFrom(s3, s2); len(r) > 0 || s3.CheckpointedSize != s3.FullSize {
			t.Errorf("full checkpoint reused %v, wrote %d of %d bytes", r, s3.CheckpointedSize, s3.FullSize)
		}

		// Forgetting the confirmed base (the engine deletes its files)
		// leaves nothing to reuse. The store settles first (the full
		// checkpoint's SSTs are compacted together), then 5 is the base
		// and 6, with no write since, reuses all of it: what 7 would
		// reuse if the forgotten base were kept.
		time.Sleep(300 * time.Millisecond)
		s5 := extSnap(t, rpc, ws, open, job, 5, false)
		if _, err := rpc.ConfirmSnapshot(ctx, &pb.ConfirmSnapshotRequest{InstanceId: open.InstanceId, Job: job, CheckpointId: 5}); err != nil {
			t.Fatal(err)
		}
		s6 := extSnap(t, rpc, ws, open, job, 6, false)
		if r, _ := reusedFrom(s6, s5); len(r) != len(shared(s5)) {
			t.Fatalf("snapshot 6 reuses %d of the %d shared files of the confirmed 5, with no write since", len(r), len(shared(s5)))
		}
		if _, err := rpc.ForgetSnapshot(ctx, &pb.ForgetSnapshotRequest{InstanceId: open.InstanceId, Job: job, CheckpointId: 5}); err != nil {
			t.Fatal(err)
		}
		s7 := extSnap(t, rpc, ws, open, job, 7, false)
		if !sameLocalNames(s5, s7) {
			t.Fatalf("the store changed between 5 and 7: the test shows nothing\n%v\n%v", s5.Files, s7.Files)
		}
		if r, _ := reusedFrom(s7, s5); len(r) > 0 || s7.CheckpointedSize != s7.FullSize {
			t.Errorf("the snapshot after its base was forgotten reused %v, wrote %d of %d bytes", r, s7.CheckpointedSize, s7.FullSize)
		}
	})

	t.Run("an unconfirmed checkpoint's files are never reused", func(t *testing.T) {
		job := job + "-unconfirmed"
		open, ws := openWire(t, rpc, extOpen(job, job, 0, 1))
		// As above, so that snapshot 1's SST is still there at 2.
		extPut(t, ws, backend.KeyGroupRange{Start: 0, End: 126}, 0, 5000, "a")
		s1 := extSnap(t, rpc, ws, open, job, 1, false)
		time.Sleep(300 * time.Millisecond)
		extPut(t, ws, backend.KeyGroupRange{Start: 127, End: 127}, 5000, 10000, "b")
		s2 := extSnap(t, rpc, ws, open, job, 2, false)
		if !sameLocalNames(s1, s2) {
			t.Fatalf("snapshot 1's SST is not in the store at snapshot 2 (compacted): the test shows nothing\n%v\n%v", s1.Files, s2.Files)
		}
		if r, _ := reusedFrom(s2, s1); len(r) > 0 || s2.CheckpointedSize != s2.FullSize {
			t.Errorf("snapshot 2 reused %v of unconfirmed snapshot 1 (wrote %d of %d bytes)", r, s2.CheckpointedSize, s2.FullSize)
		}
		// Forgotten, 1 cannot be confirmed any more; its files stay.
		if _, err := rpc.ForgetSnapshot(ctx, &pb.ForgetSnapshotRequest{InstanceId: open.InstanceId, Job: job, CheckpointId: 1}); err != nil {
			t.Fatal(err)
		}
		_, err := rpc.ConfirmSnapshot(ctx, &pb.ConfirmSnapshotRequest{InstanceId: open.InstanceId, Job: job, CheckpointId: 1})
		if status.Code(err) != codes.NotFound {
			t.Errorf("confirm of a forgotten checkpoint: %v, want NotFound", err)
		}
		for _, f := range s1.Files {
			if _, err := os.Stat(f.Location); err != nil {
				t.Errorf("forgetting deleted %s: %v", f.Location, err)
			}
		}
	})

	t.Run("full checkpoint is for externally owned instances only", func(t *testing.T) {
		_, ws := openWire(t, rpc, &pb.OpenRequest{Task: &pb.TaskId{Job: "own", Operator: "op"}, Parallelism: 1,
			BackendKind: pb.BackendKind_BACKEND_KIND_LSM, States: extStates})
		_, resp := ws.do(&pb.BatchRequest{Snapshot: &pb.SnapshotBarrier{CheckpointId: 1, FullCheckpoint: true}})
		if codes.Code(resp.Snapshot.GetCode()) != codes.InvalidArgument || !strings.Contains(resp.Snapshot.GetError(), "externally owned") {
			t.Errorf("full checkpoint of the daemon's own instance: %v", resp.Snapshot)
		}
	})
}

// TestExternalCatalogHasNoSay: the catalog lists, completes and deletes
// nothing of an externally owned instance, its sweep included.
func TestExternalCatalogHasNoSay(t *testing.T) {
	ctx := ctxT(t)
	h, rpc, ext := extHarness(t, func(o *host.Options) {
		o.GCGrace = 200 * time.Millisecond
		o.CheckpointTimeout = 100 * time.Millisecond
		o.SweepInterval = time.Hour
	})
	const job = "nosay"
	all := backend.KeyGroupRange{Start: 0, End: backend.DefaultMaxParallelism - 1}
	open, ws := openWire(t, rpc, extOpen(job, filepath.Join(ext, job), 0, 1)) // an absolute root inside the directory
	var snaps []*pb.ExternalSnapshot
	for id := uint64(1); id <= 3; id++ {
		extPut(t, ws, all, int(id)*100, int(id)*100+300, "r")
		snaps = append(snaps, extSnap(t, rpc, ws, open, job, id, false))
		if id < 3 {
			if _, err := rpc.ConfirmSnapshot(ctx, &pb.ConfirmSnapshotRequest{InstanceId: open.InstanceId, Job: job, CheckpointId: id}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := rpc.ForgetSnapshot(ctx, &pb.ForgetSnapshotRequest{InstanceId: open.InstanceId, Job: job, CheckpointId: 1}); err != nil {
		t.Fatal(err)
	}
	list, err := rpc.ListCheckpoints(ctx, &pb.ListCheckpointsRequest{Job: job})
	if err != nil || len(list.Checkpoints) != 0 {
		t.Fatalf("ListCheckpoints: %v %v, want none", list, err)
	}
	if _, err := rpc.CompleteCheckpoint(ctx, &pb.CompleteCheckpointRequest{Job: job, CheckpointId: 2}); status.Code(err) != codes.NotFound {
		t.Errorf("CompleteCheckpoint of an externally owned snapshot: %v, want NotFound", err)
	}
	// Past the grace period, a sweep: nothing the engine holds goes
	// (checkpoint 3 was never confirmed, 1 was forgotten: still the
	// engine's to delete).
	time.Sleep(300 * time.Millisecond)
	if _, err := h.cat.GC(ctx, false); err != nil {
		t.Fatal(err)
	}
	if _, err := rpc.CloseInstance(ctx, &pb.CloseRequest{InstanceId: open.InstanceId, Job: job}); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range snaps {
		for _, f := range s.Files {
			n++
			if _, err := os.Stat(f.Location); err != nil {
				t.Errorf("checkpoint %d: %s is gone: %v", s.CheckpointId, f.Location, err)
			}
		}
	}
	if n == 0 {
		t.Fatal("no file to check")
	}
	// Nor did anything go to the catalog's store.
	_ = filepath.WalkDir(filepath.Join(h.dir, "chk"), func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.Contains(p, job) {
			t.Errorf("the checkpoint store holds %s", p)
		}
		return nil
	})
}

// TestExternalRestoreFromHandles: restores into a new job id from the
// handles the engine assigned, and a rescale 2 -> 3, hold exactly the
// entries of their key groups; the restored files are reused.
func TestExternalRestoreFromHandles(t *testing.T) {
	ctx := ctxT(t)
	_, rpc, ext := extHarness(t, nil)
	const oldJob, keys = "old", 600
	maxPar := backend.DefaultMaxParallelism
	var handles [][]byte
	var oldSnaps []*pb.ExternalSnapshot
	for sub := range 2 {
		kg := backend.KeyGroupRangeForOperator(maxPar, 2, sub)
		open, ws := openWire(t, rpc, extOpen(oldJob, oldJob, sub, 2))
		// The subtask's last key group stays empty, for writes after the
		// restore that Pebble moves beside the restored SSTs instead of
		// compacting them all together.
		extPut(t, ws, backend.KeyGroupRange{Start: kg.Start, End: kg.End - 1}, 0, keys, "old")
		s := extSnap(t, rpc, ws, open, oldJob, 7, false)
		handles = append(handles, s.TaskHandle)
		oldSnaps = append(oldSnaps, s)
	}

	// check reads every key of kg back and counts the entries.
	check := func(t *testing.T, open *pb.OpenResponse, ws *wireStream, job string, kg backend.KeyGroupRange) {
		t.Helper()
		var ops []*pb.Op
		var want []string
		for i := range keys {
			op := getOp(fmt.Sprint("key", i))
			if kg.Contains(int(op.KeyGroup)) && op.KeyGroup != 63 && op.KeyGroup != 127 {
				ops = append(ops, op)
				want = append(want, fmt.Sprintf("v%d-old", i))
			}
		}
		res, _ := ws.do(&pb.BatchRequest{Ops: ops})
		for i, r := range res {
			if r.Code != 0 || !r.Found || string(r.Value) != want[i] {
				t.Fatalf("key %s: %v, want %q", ops[i].Key, r, want[i])
			}
		}
		n, err := rpc.CountEntries(ctx, &pb.CountEntriesRequest{InstanceId: open.InstanceId, Job: job})
		if err != nil || n.Entries != int64(len(want)) {
			t.Fatalf("%d entries (%v), want %d", n.GetEntries(), err, len(want))
		}
	}

	t.Run("into a new job id", func(t *testing.T) {
		const job = "new"
		// An uploaded SST is already a link of the old instance's live
		// table (a checkpoint into a directory on the daemon's file
		// system links, tiered.FilePuts); the restore must add one more.
		before := map[string]uint64{}
		for _, f := range oldSnaps[0].Files {
			before[f.Location] = links(t, f.Location)
		}
		open, ws := openWire(t, rpc, extOpen(job, job, 0, 2, handles[0]))
		if open.RestoredCheckpointId != 7 {
			t.Errorf("restored checkpoint %d, want 7", open.RestoredCheckpointId)
		}
		// The restore linked the engine's SSTs into the instance instead
		// of copying them: another name for each.
		for _, f := range oldSnaps[0].Files {
			if n := links(t, f.Location); f.Shared && n <= before[f.Location] {
				t.Errorf("restored SST %s has %d link(s), %d before: it was copied, not linked", f.Location, n, before[f.Location])
			}
		}
		check(t, open, ws, job, backend.KeyGroupRangeForOperator(maxPar, 2, 0))
		// The checkpoint restored from counts as confirmed: its shared
		// files are reused where they are, the new ones go to the new
		// root.
		time.Sleep(300 * time.Millisecond) // compactions of the restore settle
		extPut(t, ws, backend.KeyGroupRange{Start: 63, End: 63}, keys, 20*keys, "new")
		s := extSnap(t, rpc, ws, open, job, 1, false)
		reused, _ := reusedFrom(s, oldSnaps[0])
		if len(reused) == 0 {
			t.Errorf("the first snapshot after the restore reuses none of the restored files")
		}
		for _, f := range s.Files {
			if !strings.HasPrefix(f.Path, oldJob+"/shared/") && !strings.HasPrefix(f.Path, job+"/") {
				t.Errorf("file %s is neither a restored one nor under the new root", f.Path)
			}
		}
	})

	t.Run("rescale 2 to 3", func(t *testing.T) {
		const job = "rescaled"
		for sub := range 3 {
			kg := backend.KeyGroupRangeForOperator(maxPar, 3, sub)
			var mine [][]byte
			for old := range 2 {
				if !backend.KeyGroupRangeForOperator(maxPar, 2, old).Intersect(kg).Empty() {
					mine = append(mine, handles[old])
				}
			}
			if sub == 1 && len(mine) != 2 {
				t.Fatalf("subtask 1 of 3 should get both old handles, got %d", len(mine))
			}
			open, ws := openWire(t, rpc, extOpen(job, job, sub, 3, mine...))
			check(t, open, ws, job, kg)
		}
	})

	t.Run("bad input", func(t *testing.T) {
		cases := []struct {
			name string
			req  *pb.OpenRequest
			code codes.Code
			says []string
		}{
			{"not a handle", extOpen("bad1", "bad1", 0, 2, []byte("{nope")), codes.InvalidArgument, []string{"restore_handles[0]"}},
			{"missing key groups", extOpen("bad2", "bad2", 1, 3, handles[0]), codes.InvalidArgument, []string{"[64,85]"}},
			{"handle of another kind", extOpen("bad3", "bad3", 0, 2, otherKind(t, handles[0])), codes.FailedPrecondition, []string{"file handle"}},
			{"root outside", extOpen("bad4", "/elsewhere/x", 0, 1), codes.InvalidArgument, []string{"/elsewhere/x", ext}},
			{"not lsm", &pb.OpenRequest{Task: &pb.TaskId{Job: "bad5", Operator: "op"}, Parallelism: 1, BackendKind: pb.BackendKind_BACKEND_KIND_HEAP,
				External: &pb.ExternalOwnership{Root: "bad5"}}, codes.InvalidArgument, []string{"lsm instances"}},
		}
		for _, c := range cases {
			_, err := rpc.Open(ctx, c.req)
			if status.Code(err) != c.code {
				t.Errorf("%s: %v, want %s", c.name, err, c.code)
				continue
			}
			for _, s := range c.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("%s: %v does not say %q", c.name, err, s)
				}
			}
		}

		// A handle whose file was damaged on disk: the restore, which
		// links the file instead of copying it, checks it all the same.
		for _, f := range oldSnaps[1].Files {
			if !f.Shared {
				continue
			}
			b, err := os.ReadFile(f.Location)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 0x40
			if err := os.WriteFile(f.Location, b, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err = rpc.Open(ctx, extOpen("bad5b", "bad5b", 1, 2, handles[1]))
			if status.Code(err) != codes.DataLoss || !strings.Contains(err.Error(), f.Path) {
				t.Errorf("restore of a handle with a damaged file: %v, want DataLoss naming %s", err, f.Path)
			}
			break
		}

		// A handle whose file the engine deleted: the error names it.
		var gone string
		for _, f := range oldSnaps[1].Files {
			if f.Shared {
				gone = f.Path
				if err := os.Remove(f.Location); err != nil {
					t.Fatal(err)
				}
				break
			}
		}
		_, err := rpc.Open(ctx, extOpen("bad6", "bad6", 1, 2, handles[1]))
		if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), gone) {
			t.Errorf("restore of a handle with a missing file: %v, want NotFound naming %s", err, gone)
		}

		// Confirm of a checkpoint the instance never took.
		open, _ := openWire(t, rpc, extOpen("bad7", "bad7", 0, 1))
		_, err = rpc.ConfirmSnapshot(ctx, &pb.ConfirmSnapshotRequest{InstanceId: open.InstanceId, Job: "bad7", CheckpointId: 99})
		if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "checkpoint 99") {
			t.Errorf("confirm of an unknown checkpoint: %v, want NotFound naming it", err)
		}
	})
}

// otherKind returns raw with its backend kind changed to file.
func otherKind(t *testing.T, raw []byte) []byte {
	t.Helper()
	h, err := backend.DecodeHandle(raw)
	if err != nil {
		t.Fatal(err)
	}
	h.Backend = backend.KindFile
	out, err := backend.EncodeHandle(h)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sameLocalNames reports whether every shared file of old is, by its
// local SST name, in s too (the store still holds it).
func sameLocalNames(old, s *pb.ExternalSnapshot) bool {
	names := map[string]bool{}
	for p := range shared(s) {
		names[p[strings.LastIndex(p, "-")+1:]] = true
	}
	for p := range shared(old) {
		if !names[p[strings.LastIndex(p, "-")+1:]] {
			return false
		}
	}
	return len(shared(old)) > 0
}

// TestExternalAbandonLeavesNoFile: ForgetSnapshot with abandon, for a
// snapshot whose files the engine never got, answers with the snapshot if
// its upload had finished (the engine deletes the files it does not hold)
// and otherwise stops the upload, which deletes what it wrote. Either way,
// once the engine deleted what the answer lists and it does not hold, the
// directory holds exactly the files of the confirmed checkpoint: nothing
// leaks, whenever the abandon comes.
// extBase is an externally owned instance of job over every key group,
// with keys key0..key<keys-1> written and checkpoint 1 snapshotted and
// confirmed (its snapshot is base).
type extBase struct {
	rpc  pb.StatedClient
	ws   *wireStream
	open *pb.OpenResponse
	ext  string
	base *pb.ExternalSnapshot
}

func openExtBase(t *testing.T, job string, keys int) extBase {
	t.Helper()
	_, rpc, ext := extHarness(t, nil)
	all := backend.KeyGroupRange{Start: 0, End: backend.DefaultMaxParallelism - 1}
	open, ws := openWire(t, rpc, extOpen(job, job, 0, 1))
	extPut(t, ws, all, 0, keys, "a")
	base := extSnap(t, rpc, ws, open, job, 1, false)
	if _, err := rpc.ConfirmSnapshot(ctxT(t), &pb.ConfirmSnapshotRequest{InstanceId: open.InstanceId, Job: job, CheckpointId: 1}); err != nil {
		t.Fatal(err)
	}
	return extBase{rpc: rpc, ws: ws, open: open, ext: ext, base: base}
}

func TestExternalAbandonLeavesNoFile(t *testing.T) {
	ctx := ctxT(t)
	const job = "abandon"
	all := backend.KeyGroupRange{Start: 0, End: backend.DefaultMaxParallelism - 1}
	eb := openExtBase(t, job, 2000)
	rpc, ws, open, ext, base := eb.rpc, eb.ws, eb.open, eb.ext, eb.base
	held := map[string]bool{}
	for _, f := range base.Files {
		held[f.Location] = true
	}
	onDisk := func() map[string]bool {
		out := map[string]bool{}
		_ = filepath.WalkDir(filepath.Join(ext, job), func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				out[p] = true
			}
			return nil
		})
		return out
	}
	finished, stopped := 0, 0
	for id := uint64(2); id < 12; id++ {
		// Enough new data that the upload takes a while; the abandon comes
		// at once, or after a growing delay.
		for k := 0; k < 4; k++ {
			from := int(id)*40000 + k*10000
			extPut(t, ws, all, from, from+10000, "b"+strings.Repeat("x", 200))
		}
		_, resp := ws.do(&pb.BatchRequest{Snapshot: &pb.SnapshotBarrier{CheckpointId: id}})
		if resp.Snapshot.GetCode() != 0 {
			t.Fatalf("snapshot %d: %v", id, resp.Snapshot)
		}
		time.Sleep(time.Duration(id-2) * 3 * time.Millisecond)
		r, err := rpc.ForgetSnapshot(ctx, &pb.ForgetSnapshotRequest{InstanceId: open.InstanceId, Job: job, CheckpointId: id, Abandon: true})
		if err != nil {
			t.Fatal(err)
		}
		if s := r.Finished; s != nil {
			finished++
			if s.CheckpointId != id || len(s.Files) == 0 {
				t.Fatalf("abandon %d answered %+v", id, s)
			}
			for _, f := range s.Files {
				if !held[f.Location] {
					if err := os.Remove(f.Location); err != nil {
						t.Fatalf("the engine's delete of %s: %v", f.Location, err)
					}
				}
			}
		} else {
			stopped++
		}
		for p := range onDisk() {
			if !held[p] {
				t.Errorf("after the abandon of %d: %s is no file of the confirmed checkpoint", id, p)
			}
		}
		for p := range held {
			if !onDisk()[p] {
				t.Fatalf("after the abandon of %d: %s of the confirmed checkpoint is gone", id, p)
			}
		}
		// A forgotten snapshot is gone for AwaitSnapshot.
		if _, err := rpc.AwaitSnapshot(ctx, &pb.AwaitSnapshotRequest{InstanceId: open.InstanceId, Job: job, CheckpointId: id}); status.Code(err) != codes.NotFound {
			t.Fatalf("await of abandoned %d: %v, want NotFound", id, err)
		}
	}
	t.Logf("%d abandons found the upload finished, %d stopped it", finished, stopped)
	// Without abandon, nothing is waited for nor answered.
	extPut(t, ws, all, 0, 10, "c")
	if _, resp := ws.do(&pb.BatchRequest{Snapshot: &pb.SnapshotBarrier{CheckpointId: 20, Wait: true}}); resp.Snapshot.GetCode() != 0 {
		t.Fatalf("snapshot 20: %v", resp.Snapshot)
	}
	r, err := rpc.ForgetSnapshot(ctx, &pb.ForgetSnapshotRequest{InstanceId: open.InstanceId, Job: job, CheckpointId: 20})
	if err != nil || r.Finished != nil {
		t.Fatalf("forget without abandon: %v %v", r, err)
	}
}

// A forget that overtakes its snapshot's barrier (the engine's forget is a
// call of its own, the barrier may still be queued on the batch stream)
// is remembered: the barrier is then refused, and no file of it is
// written, where it would have uploaded files no engine knows of. Other
// ids, and ids forgotten after their snapshot, are not affected.
func TestExternalForgetBeforeBarrier(t *testing.T) {
	ctx := ctxT(t)
	const job = "overtaken"
	all := backend.KeyGroupRange{Start: 0, End: backend.DefaultMaxParallelism - 1}
	eb := openExtBase(t, job, 500)
	rpc, ws, open, ext := eb.rpc, eb.ws, eb.open, eb.ext
	extPut(t, ws, all, 500, 1000, "b")
	for _, abandon := range []bool{true, false} {
		id := uint64(2)
		if !abandon {
			id = 3
		}
		r, err := rpc.ForgetSnapshot(ctx, &pb.ForgetSnapshotRequest{InstanceId: open.InstanceId, Job: job, CheckpointId: id, Abandon: abandon})
		if err != nil || r.Finished != nil {
			t.Fatalf("forget of unknown %d: %v %v", id, r, err)
		}
		_, resp := ws.do(&pb.BatchRequest{Snapshot: &pb.SnapshotBarrier{CheckpointId: id, Wait: true}})
		if st := resp.Snapshot; codes.Code(st.GetCode()) != codes.InvalidArgument || !strings.Contains(st.GetError(), "forgotten") {
			t.Fatalf("barrier of forgotten %d: %v, want INVALID_ARGUMENT naming the forget", id, st)
		}
		if m, _ := filepath.Glob(filepath.Join(ext, job, fmt.Sprintf("chk-%d", id), "*")); len(m) > 0 {
			t.Fatalf("the refused snapshot %d wrote %v", id, m)
		}
	}
	// The next checkpoint snapshots as usual.
	s := extSnap(t, rpc, ws, open, job, 4, false)
	if len(s.Files) == 0 {
		t.Fatal("snapshot 4 has no file")
	}
}

// links is the number of hard links of the file at p.
func links(t *testing.T, p string) uint64 {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		t.Fatalf("%s: no link count in %T (the daemon's platforms all have one)", p, fi.Sys())
	}
	return uint64(st.Nlink)
}

// TestExternalOnS3: with an s3:// external directory the files of an
// externally owned instance are objects under that prefix, listed by the
// s3:// URLs an engine's own S3 file system reaches (Flink's S3 plugin);
// a later snapshot reuses a confirmed one's objects, and a restore into a
// new job, rescaled, reads them back. A deleted object fails the restore
// naming it.
func TestExternalOnS3(t *testing.T) {
	ctx := ctxT(t)
	so, _ := s3test.Options(t)
	prefix := strings.TrimPrefix(so.Prefix+"/ext", "/")
	base := "s3://" + so.Bucket + "/" + prefix
	h := startDaemon(t, harnessOpts{node: func(o *host.Options) {
		o.ExternalDir = base + "?path-style=true&endpoint=" + url.QueryEscape(so.Endpoint)
		o.S3.AccessKeyID, o.S3.SecretAccessKey, o.S3.Region = so.AccessKeyID, so.SecretAccessKey, cmp.Or(so.Region, "us-east-1")
	}})
	rpc := rawConn(t, h)
	check := so
	check.Prefix = prefix
	objects, err := s3store.Open(ctx, check)
	if err != nil {
		t.Fatal(err)
	}
	defer objects.Close()

	const job, keys = "flinkjob", 3000
	all := backend.KeyGroupRange{Start: 0, End: backend.DefaultMaxParallelism - 1}
	open, ws := openWire(t, rpc, extOpen(job, job, 0, 1))
	extPut(t, ws, all, 0, keys, "a")
	s1 := extSnap(t, rpc, ws, open, job, 1, false)
	for _, f := range s1.Files {
		if want := base + "/" + f.Path; f.Location != want {
			t.Errorf("file %s is at %s, want %s", f.Path, f.Location, want)
		}
		info, err := objects.Stat(ctx, f.Path)
		if err != nil || info.Size != f.Size {
			t.Fatalf("object %s: %v (size %d, listed %d)", f.Path, err, info.Size, f.Size)
		}
	}
	if _, err := rpc.ConfirmSnapshot(ctx, &pb.ConfirmSnapshotRequest{InstanceId: open.InstanceId, Job: job, CheckpointId: 1}); err != nil {
		t.Fatal(err)
	}
	s2 := extSnap(t, rpc, ws, open, job, 2, false)
	if reused, _ := reusedFrom(s2, s1); len(reused) == 0 {
		t.Errorf("snapshot 2 reuses none of the confirmed snapshot's objects: %v\n%v", s1.Files, s2.Files)
	}
	if _, err := rpc.CloseInstance(ctx, &pb.CloseRequest{InstanceId: open.InstanceId, Job: job}); err != nil {
		t.Fatal(err)
	}

	// A restore into a new job at parallelism 2 reads every key back.
	for sub := range 2 {
		kg := backend.KeyGroupRangeForOperator(backend.DefaultMaxParallelism, 2, sub)
		o, ws := openWire(t, rpc, extOpen("rescaled", "rescaled", sub, 2, s2.TaskHandle))
		var ops []*pb.Op
		var want []string
		for i := range keys {
			if op := getOp(fmt.Sprint("key", i)); kg.Contains(int(op.KeyGroup)) {
				ops = append(ops, op)
				want = append(want, fmt.Sprintf("v%d-a", i))
			}
		}
		res, _ := ws.do(&pb.BatchRequest{Ops: ops})
		for i, r := range res {
			if r.Code != 0 || !r.Found || string(r.Value) != want[i] {
				t.Fatalf("subtask %d, key %s: %v, want %q", sub, ops[i].Key, r, want[i])
			}
		}
		if _, err := rpc.CloseInstance(ctx, &pb.CloseRequest{InstanceId: o.InstanceId, Job: "rescaled"}); err != nil {
			t.Fatal(err)
		}
	}

	// The engine deleted a file the handle needs: the open names it.
	var gone string
	for p := range shared(s2) {
		gone = p
		break
	}
	if err := objects.Delete(ctx, gone); err != nil {
		t.Fatal(err)
	}
	_, err = rpc.Open(ctx, extOpen("again", "again", 0, 1, s2.TaskHandle))
	if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), gone) || !strings.Contains(err.Error(), base) {
		t.Errorf("open from a handle whose object %s is gone: %v, want NotFound naming it and %s", gone, err, base)
	}
}
