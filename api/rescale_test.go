package api_test

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/api/protocol"
	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/host"
	"github.com/statedhq/stated/tiered/s3store/s3test"
	"github.com/statedhq/stated/tiered/storeurl"
)

// rescaleJob is one operator of a job whose subtasks the test opens at
// several parallelisms.
type rescaleJob struct {
	t    *testing.T
	c    *client.Client
	kind backend.Kind
	keys [][]byte
	ins  []*client.Instance
	// changelog is the mode every subtask opens in.
	changelog client.Changelog
	// lsm is every subtask's lsm mode (OpenSpec.LSM).
	lsm client.LSMMode
}

const rsJob, rsOp = "rs", "op"

func (j *rescaleJob) open(par int, from *client.Restore) {
	j.t.Helper()
	for _, in := range j.ins {
		in.Abandon() // the old task processes are gone
	}
	j.ins = nil
	for sub := 0; sub < par; sub++ {
		in, err := j.c.Open(ctxT(j.t), client.OpenSpec{Task: task(rsJob, rsOp, sub), Parallelism: par, Backend: j.kind,
			States: allStates, Restore: from, Replace: true, Changelog: j.changelog, LSM: j.lsm})
		if err != nil {
			j.t.Fatalf("open subtask %d of %d from %+v: %v", sub, par, from, err)
		}
		if in.Changelog() != (j.changelog == client.ChangelogOn) {
			j.t.Fatalf("subtask %d opened with changelog %d is in changelog mode: %v", sub, j.changelog, in.Changelog())
		}
		j.ins = append(j.ins, in)
	}
}

// owner is the subtask that owns key at the current parallelism.
func (j *rescaleJob) owner(key []byte) *client.Instance {
	in := j.ins[0]
	return j.ins[backend.OperatorForKeyGroup(in.MaxParallelism(), len(j.ins), in.KeyGroup(key))]
}

func (j *rescaleJob) checkpoint(id uint64) {
	j.t.Helper()
	ctx := ctxT(j.t)
	for _, in := range j.ins {
		if _, err := in.Snapshot(ctx, id, false); err != nil {
			j.t.Fatal(err)
		}
	}
	if _, err := j.c.CompleteCheckpoint(ctx, rsJob, id); err != nil {
		j.t.Fatal(err)
	}
}

// checkValues reads every key from the subtask OperatorForKeyGroup names.
func (j *rescaleJob) checkValues(prefix string) {
	j.t.Helper()
	ctx := ctxT(j.t)
	for i, k := range j.keys {
		in := j.owner(k)
		v, err := in.Get("v", k, nil).Wait(ctx)
		if err != nil || !v.Found || string(v.Data) != fmt.Sprint(prefix, i) {
			j.t.Fatalf("%s at parallelism %d: get %s from subtask %d = %q %v %v", j.kind, len(j.ins), k, in.Task().Subtask, v.Data, v.Found, err)
		}
		m, err := in.MapGet("m", k, nil, []byte("u")).Wait(ctx)
		if err != nil || string(m.Data) != fmt.Sprint(i) {
			j.t.Fatalf("%s at parallelism %d: map of %s = %q %v", j.kind, len(j.ins), k, m.Data, err)
		}
	}
}

// checkTimers polls every subtask's timers: each holds exactly those of
// the keys it owns, none of another subtask's (the restore clipped the
// old state to the new range).
func (j *rescaleJob) checkTimers() {
	j.t.Helper()
	ctx := ctxT(j.t)
	want := make([][]string, len(j.ins))
	for _, k := range j.keys {
		s := j.owner(k).Task().Subtask
		want[s] = append(want[s], string(k))
	}
	for s, in := range j.ins {
		ts, err := in.PollTimers("t", math.MaxInt64, 0).Wait(ctx)
		if err != nil {
			j.t.Fatal(err)
		}
		var got []string
		for _, tm := range ts {
			got = append(got, string(tm.Key))
		}
		sort.Strings(got)
		sort.Strings(want[s])
		if !reflect.DeepEqual(got, want[s]) {
			j.t.Fatalf("%s at parallelism %d: subtask %d has timers of %d keys, owns %d (first %v)",
				j.kind, len(j.ins), s, len(got), len(want[s]), got[:min(3, len(got))])
		}
	}
}

// checkOperatorState checks the offsets split list against old (the
// elements of every old subtask in subtask order) dealt out round-robin,
// and the union list against union (everyone gets all of it).
func (j *rescaleJob) checkOperatorState(old []string, union []string) {
	j.t.Helper()
	for s, in := range j.ins {
		var want []string
		for e := s; e < len(old); e += len(j.ins) {
			want = append(want, old[e])
		}
		l := getList(j.t, in, "offsets")
		if !reflect.DeepEqual(strs(l), want) || (len(want) > 0 && l.Mode != backend.OperatorSplit) {
			j.t.Fatalf("%s at parallelism %d: offsets of subtask %d = %v (%s), want %v", j.kind, len(j.ins), s, strs(l), l.Mode, want)
		}
		u := getList(j.t, in, "schema")
		if !reflect.DeepEqual(strs(u), union) || u.Mode != backend.OperatorUnion {
			j.t.Fatalf("%s at parallelism %d: union list of subtask %d = %v, want %v", j.kind, len(j.ins), s, strs(u), union)
		}
	}
}

// TestRescaleThroughTheDaemon: a job at parallelism 2 checkpoints; Open at
// parallelism 1 and 3 from that checkpoint restores every key into exactly
// the subtask OperatorForKeyGroup names, with the operator state
// redistributed (split round-robin, union to all), and the rescaled state
// checkpoints and rescales again. PlanRescale says what each subtask
// restores from; a changed maxParallelism is refused.
// rescaleVariant reads a rescale test's variant name: the backend kind,
// whether lsm runs in remote mode ("-remote": the daemon's --lsm-remote;
// "-remote-spec": each instance's own choice, OpenSpec.LSM, in a daemon
// without the flag), and whether the checkpoint store is the S3 server
// the tests start ("-s3": versitygw in CI, else an in-process gofakes3).
func rescaleVariant(name string) (kind backend.Kind, remote, spec, s3 bool) {
	name, s3 = strings.CutSuffix(name, "-s3")
	name, spec = strings.CutSuffix(name, "-spec")
	name, remote = strings.CutSuffix(name, "-remote")
	return backend.Kind(name), remote, spec, s3
}

// s3Checkpoints points the node's checkpoint store at a fresh prefix of
// the S3 server the tests start.
func s3Checkpoints(t testing.TB, o *host.Options) {
	so, _ := s3test.Options(t)
	o.CheckpointStore = "s3://" + so.Bucket + "/" + strings.Trim(so.Prefix+"/chk", "/")
	o.S3 = storeurl.Options{Endpoint: so.Endpoint, Region: so.Region, AccessKeyID: so.AccessKeyID,
		SecretAccessKey: so.SecretAccessKey, Addressing: storeurl.AddressingPath}
}

func TestRescaleThroughTheDaemon(t *testing.T) {
	// lsm-remote: lsm with --lsm-remote (SSTs in the checkpoint store,
	// checkpoints by hand-off, restores by reference).
	for _, name := range []string{"file", "lsm", "heap", "lsm-remote", "lsm-remote-s3", "lsm-remote-spec"} {
		kind, remote, spec, s3 := rescaleVariant(name)
		t.Run(name, func(t *testing.T) {
			ctx := ctxT(t)
			h := startDaemon(t, harnessOpts{node: func(o *host.Options) {
				o.LSMRemote = remote && !spec
				if s3 {
					s3Checkpoints(t, o)
				}
			}})
			j := &rescaleJob{t: t, c: h.dial(client.Options{}), kind: kind}
			if spec {
				j.lsm = client.LSMRemote
			}
			for i := 0; i < 300; i++ {
				j.keys = append(j.keys, []byte(fmt.Sprint("key-", i)))
			}
			j.open(2, nil)
			for i, k := range j.keys {
				in := j.owner(k)
				in.Put("v", k, nil, []byte(fmt.Sprint("val-", i)))
				in.MapPut("m", k, nil, []byte("u"), []byte(fmt.Sprint(i)))
				in.RegisterTimer("t", k, nil, int64(i))
			}
			var offsets, union []string
			for s, in := range j.ins {
				var elems [][]byte
				for e := 0; e < 3+s; e++ {
					elems = append(elems, []byte(fmt.Sprintf("s%d-e%d", s, e)))
					offsets = append(offsets, fmt.Sprintf("s%d-e%d", s, e))
				}
				in.SetOperatorList("offsets", backend.OperatorSplit, elems...)
				in.SetOperatorList("schema", backend.OperatorUnion, []byte(fmt.Sprint("u", s)))
				union = append(union, fmt.Sprint("u", s))
			}
			j.checkpoint(1)
			if m, ok := h.cat.Checkpoint(rsJob, 1); ok {
				for _, th := range m.Tasks {
					for _, f := range th.Files {
						if (f.Table != nil) != remote {
							t.Fatalf("checkpoint 1: file %s has a table reference %v in a daemon with --lsm-remote %v", f.Path, f.Table != nil, remote)
						}
					}
				}
			} else {
				t.Fatal("checkpoint 1 is not retained")
			}
			j.ins[0].Put("v", j.keys[0], nil, []byte("after checkpoint 1"))

			// The plan at 3: ranges as Flink assigns them, sources cover
			// each exactly once, the largest overlap first.
			plan, err := j.c.PlanRescale(ctx, rsJob, rsOp, client.Restore{CheckpointID: 1}, 3)
			if err != nil {
				t.Fatal(err)
			}
			if plan.GetOldParallelism() != 2 || plan.GetMaxParallelism() != 128 || plan.GetCheckpointId() != 1 || len(plan.GetSubtasks()) != 3 {
				t.Fatalf("plan %v", plan)
			}
			for i, st := range plan.GetSubtasks() {
				r := backend.KeyGroupRangeForOperator(128, 3, i)
				if st.GetKeyGroups().GetStart() != int32(r.Start) || st.GetKeyGroups().GetEnd() != int32(r.End) {
					t.Fatalf("subtask %d: range %v, want %s", i, st.GetKeyGroups(), r)
				}
				n := 0
				for k, src := range st.GetSources() {
					ov := src.GetOverlap().GetEnd() - src.GetOverlap().GetStart() + 1
					n += int(ov)
					if k > 0 {
						first := st.GetSources()[0].GetOverlap()
						if ov > first.GetEnd()-first.GetStart()+1 {
							t.Fatalf("subtask %d: the base is not the largest overlap: %v", i, st.GetSources())
						}
					}
					if src.GetTask().GetOperator() != rsOp || src.GetBackend() != string(kind) {
						t.Fatalf("subtask %d: source %v", i, src)
					}
				}
				if n != r.Len() {
					t.Fatalf("subtask %d: sources cover %d key groups of %d", i, n, r.Len())
				}
			}
			if mid := plan.GetSubtasks()[1].GetSources(); len(mid) != 2 || mid[0].GetTask().GetSubtask() != 1 {
				t.Fatalf("subtask 1 of 3 ([43,85]) restores from old subtask 1 ([64,127], 22 key groups) as its base: %v", mid)
			}
			if _, err := j.c.PlanRescale(ctx, rsJob, "nope", client.Restore{Latest: true}, 3); status.Code(err) != codes.NotFound {
				t.Fatalf("plan of an unknown operator: %v", err)
			}
			if _, err := j.c.PlanRescale(ctx, rsJob, rsOp, client.Restore{Latest: true}, 0); status.Code(err) != codes.InvalidArgument {
				t.Fatalf("plan at parallelism 0: %v", err)
			}

			// Down to 1 and up to 3 from checkpoint 1.
			j.open(1, &client.Restore{CheckpointID: 1})
			j.checkValues("val-")
			j.checkOperatorState(offsets, union)
			j.checkTimers()
			j.open(3, &client.Restore{CheckpointID: 1})
			j.checkValues("val-")
			j.checkOperatorState(offsets, union)

			// The rescaled job writes, checkpoints, and rescales to 1.
			for i, k := range j.keys {
				j.owner(k).Put("v", k, nil, []byte(fmt.Sprint("v3-", i)))
			}
			var offsets3 []string
			for _, in := range j.ins {
				offsets3 = append(offsets3, strs(getList(t, in, "offsets"))...)
			}
			j.checkpoint(2)
			j.checkTimers()
			j.open(1, &client.Restore{Latest: true})
			if j.ins[0].RestoredCheckpoint() != 2 {
				t.Fatalf("restored %d, want 2", j.ins[0].RestoredCheckpoint())
			}
			j.checkValues("v3-")
			j.checkOperatorState(offsets3, append(append(append([]string{}, union...), union...), union...))
			j.checkTimers()

			// A changed maxParallelism is refused, naming both values.
			j.ins[0].Abandon()
			_, err = j.c.Open(ctx, client.OpenSpec{Task: task(rsJob, rsOp, 0), Parallelism: 2, MaxParallelism: 256, Backend: kind,
				States: allStates, Restore: &client.Restore{Latest: true}, Replace: true})
			if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "128") || !strings.Contains(err.Error(), "256") {
				t.Fatalf("restore with maxParallelism 256 of state written with 128: %v", err)
			}
			j.ins = nil
		})
	}
}

// OpenRequest.parallelism: key_groups may be left out, and must otherwise
// be the subtask's range at that parallelism.
func TestOpenParallelism(t *testing.T) {
	ctx := ctxT(t)
	h := startDaemon(t, harnessOpts{})
	c := h.dial(client.Options{})
	resp, err := c.RPC().Open(ctx, &pb.OpenRequest{Task: protocol.TaskToPB(task("par", "op", 1)), Parallelism: 3, Backend: "heap"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := protocol.KeyGroupsFromPB(resp.GetKeyGroups()), backend.KeyGroupRangeForOperator(128, 3, 1); got != want {
		t.Fatalf("derived key groups %s, want %s", got, want)
	}
	for _, req := range []*pb.OpenRequest{
		{Task: protocol.TaskToPB(task("par", "op", 0)), Parallelism: 3, Backend: "heap", KeyGroups: &pb.KeyGroupRange{Start: 0, End: 63}},
		{Task: protocol.TaskToPB(task("par", "op", 3)), Parallelism: 3, Backend: "heap"},
		{Task: protocol.TaskToPB(task("par", "op", 0)), Parallelism: 129, Backend: "heap"},
		{Task: protocol.TaskToPB(task("par", "op", 0)), Backend: "heap"},
	} {
		if _, err := c.RPC().Open(ctx, req); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("open %v: %v", req, err)
		}
	}
}

// TestRescaleChangelog: rescale 3 -> 4 -> 2 with every subtask in
// changelog mode, where each restore replays, besides the clipped bases,
// only the log records of its own key groups from every old subtask that
// overlaps it: every key ends in exactly the subtask that owns it, with
// the value of the last checkpoint (written after the base, so it comes
// from the log).
func TestRescaleChangelog(t *testing.T) {
	// lsm-remote: lsm with --lsm-remote, whose bases are hand-offs of
	// remote tables that the restores reference in place.
	for _, name := range []string{"file", "lsm", "heap", "lsm-remote", "lsm-remote-s3"} {
		kind, remote, _, s3 := rescaleVariant(name)
		t.Run(name, func(t *testing.T) {
			h := startDaemon(t, harnessOpts{node: func(o *host.Options) {
				o.LSMRemote = remote
				if s3 {
					s3Checkpoints(t, o)
				}
			}})
			j := &rescaleJob{t: t, c: h.dial(client.Options{}), kind: kind, changelog: client.ChangelogOn}
			for i := 0; i < 300; i++ {
				j.keys = append(j.keys, []byte(fmt.Sprint("key-", i)))
			}
			j.open(3, nil)
			write := func(prefix string) {
				for i, k := range j.keys {
					in := j.owner(k)
					in.Put("v", k, nil, []byte(fmt.Sprint(prefix, i)))
					in.MapPut("m", k, nil, []byte("u"), []byte(fmt.Sprint(i)))
				}
			}
			write("base-")
			for i, k := range j.keys {
				if i%2 == 0 {
					j.owner(k).RegisterTimer("t", k, nil, int64(i))
				}
			}
			j.checkpoint(1) // the first checkpoint materializes: all in the base
			m, ok := h.cat.Checkpoint(rsJob, 1)
			if !ok {
				t.Fatal("checkpoint 1 is not retained")
			}
			if tables := slices.ContainsFunc(m.Tasks[0].Files, func(f backend.FileRef) bool { return f.Table != nil }); tables != remote {
				t.Fatalf("checkpoint 1 lists remote tables %v in a daemon with --lsm-remote %v", tables, remote)
			}
			write("log3-")
			for i, k := range j.keys {
				if i%2 == 1 {
					j.owner(k).RegisterTimer("t", k, nil, int64(i)) // in the log only
				}
			}
			j.checkpoint(2)
			j.open(4, &client.Restore{Latest: true})
			j.checkValues("log3-")
			j.checkTimers() // polling deletes them (logged): register them again
			for i, k := range j.keys {
				j.owner(k).RegisterTimer("t", k, nil, int64(i))
			}
			write("log4-")
			j.checkpoint(3)
			j.checkpoint(4) // a log window on the restored bases, twice
			j.open(2, &client.Restore{Latest: true})
			if j.ins[0].RestoredCheckpoint() != 4 {
				t.Fatalf("restored %d, want 4", j.ins[0].RestoredCheckpoint())
			}
			j.checkValues("log4-")
			j.checkTimers()
			for _, in := range j.ins {
				in.Abandon()
			}
			j.ins = nil
		})
	}
}
