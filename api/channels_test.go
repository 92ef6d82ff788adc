package api_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/statedhq/stated/api/client"
	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/host"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/localfs"
)

// putLog is a checkpoint store that remembers the name of every object
// written, to count the channel state objects of a checkpoint.
type putLog struct {
	tiered.Store
	mu    sync.Mutex
	names []string
}

func (p *putLog) note(name string) {
	p.mu.Lock()
	p.names = append(p.names, name)
	p.mu.Unlock()
}

func (p *putLog) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	p.note(name)
	return p.Store.Put(ctx, name, r, size)
}

func (p *putLog) PutIfAbsent(ctx context.Context, name string, r io.Reader, size int64) error {
	p.note(name)
	return p.Store.PutIfAbsent(ctx, name, r, size)
}

// channelPuts are the channel state objects written under dir.
func (p *putLog) channelPuts(dir string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, n := range p.names {
		if strings.HasPrefix(n, dir+"/channels-") {
			out = append(out, n)
		}
	}
	return out
}

// chanHarness runs a node on a local directory store behind a putLog.
func chanHarness(t *testing.T, linger time.Duration) (*harness, *putLog, string) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "chk")
	fs, err := localfs.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	pl := &putLog{Store: fs}
	h := startDaemon(t, harnessOpts{node: func(o *host.Options) {
		o.CheckpointStore = ""
		o.Store = pl
		o.ChannelStateLinger = linger
		o.Retain = 1
	}})
	return h, pl, root
}

const chJob, chOp = "uc", "win"

// inflight is the channel state subtask sub of par writes at a checkpoint:
// two keyed input channels whose records carry keys of its own range, and
// a forward output subpartition when forward is set.
func inflight(in *client.Instance, sub, seed int, forward bool) []client.ChannelState {
	var out []client.ChannelState
	for ch := range 2 {
		cs := client.ChannelState{Channel: backend.ChannelID{Direction: backend.ChannelInput, Gate: 0, Index: int32(ch)}, Kind: backend.ChannelKeyed}
		for b := range 3 {
			var buf []client.ChannelRecord
			for r := range 4 {
				key := fmt.Appendf(nil, "k-%d-%d-%d-%d-%d", seed, sub, ch, b, r)
				buf = append(buf, client.ChannelRecord{KeyGroup: int32(in.KeyGroup(key)), Data: key})
			}
			cs.Buffers = append(cs.Buffers, buf)
		}
		out = append(out, cs)
	}
	if forward {
		out = append(out, client.ChannelState{Channel: backend.ChannelID{Direction: backend.ChannelOutput, Gate: 0, Index: 0},
			Kind: backend.ChannelForward, Buffers: [][]client.ChannelRecord{{{Data: fmt.Appendf(nil, "fw-%d-%d", seed, sub)}}}})
	}
	return out
}

func openOp(t *testing.T, c *client.Client, par int, from *client.Restore) []*client.Instance {
	t.Helper()
	var ins []*client.Instance
	for sub := range par {
		in, err := c.Open(ctxT(t), client.OpenSpec{Task: task(chJob, chOp, sub), Parallelism: par, Backend: backend.KindFile,
			States: allStates, Restore: from, Replace: true})
		if err != nil {
			t.Fatalf("open subtask %d of %d: %v", sub, par, err)
		}
		ins = append(ins, in)
	}
	return ins
}

// unalignedCheckpoint writes each subtask's value and channel state, takes
// an unaligned snapshot of all of them and completes it.
func unalignedCheckpoint(t *testing.T, c *client.Client, ins []*client.Instance, id uint64, forward bool) [][]client.ChannelState {
	t.Helper()
	ctx := ctxT(t)
	written := make([][]client.ChannelState, len(ins))
	for sub, in := range ins {
		in.Put("v", fmt.Appendf(nil, "key-%d", sub), nil, fmt.Appendf(nil, "val-%d-%d", sub, id))
		written[sub] = inflight(in, sub, int(id), forward)
		if err := in.WriteChannelState(ctx, id, written[sub]); err != nil {
			t.Fatalf("write channel state of subtask %d: %v", sub, err)
		}
	}
	for sub, in := range ins {
		st := &client.CheckpointStats{Unaligned: true, StartDelay: time.Duration(sub+1) * time.Millisecond}
		if _, err := in.SnapshotWith(ctx, id, client.SnapshotOptions{Stats: st}); err != nil {
			t.Fatalf("snapshot subtask %d: %v", sub, err)
		}
	}
	info, err := c.CompleteCheckpoint(ctx, chJob, id)
	if err != nil {
		t.Fatal(err)
	}
	if !info.GetUnaligned() || info.GetPersistedInFlightBytes() <= 0 || info.GetStartDelayMicros() != int64(len(ins))*1000 {
		t.Fatalf("checkpoint statistics %v: want unaligned, in-flight bytes, start delay %d ms", info, len(ins))
	}
	return written
}

// The channel state of 16 tasks of one daemon goes into one object, and
// comes back to each task as written; a daemon that uploaded each task's
// state alone (no merging) writes 16.
func TestChannelStateOneObjectPerCheckpoint(t *testing.T) {
	h, pl, root := chanHarness(t, 10*time.Second)
	c := h.dial(client.Options{})
	ins := openOp(t, c, 16, nil)
	written := unalignedCheckpoint(t, c, ins, 1, true)
	if objs := pl.channelPuts(chJob + "/chk-1"); len(objs) != 1 {
		t.Fatalf("16 tasks' channel state went into %d objects %v, want 1", len(objs), objs)
	}

	// Each task restores its own channel state, in order.
	ins = openOp(t, c, 16, &client.Restore{Latest: true})
	for sub, in := range ins {
		got, err := in.ReadChannelState(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, written[sub]) {
			t.Fatalf("subtask %d restored channel state\n%v\nwant\n%v", sub, got, written[sub])
		}
	}

	// Retention drops checkpoint 1 once 2 completes: its channel state
	// object goes with it, and 2's stays.
	unalignedCheckpoint(t, c, ins, 2, false)
	first, second := pl.channelPuts(chJob + "/chk-1")[0], pl.channelPuts(chJob+"/chk-2")
	if len(second) != 1 {
		t.Fatalf("checkpoint 2: objects %v", second)
	}
	if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(first))); !os.IsNotExist(err) {
		t.Fatalf("channel state of a discarded checkpoint is still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(second[0]))); err != nil {
		t.Fatalf("channel state of the retained checkpoint: %v", err)
	}
}

// Without merging every task's state is one object: the linger elapses
// for each snapshot that waits for its own upload.
func TestChannelStateUnmergedWritesOnePerTask(t *testing.T) {
	h, pl, _ := chanHarness(t, time.Millisecond)
	c := h.dial(client.Options{})
	ins := openOp(t, c, 16, nil)
	for sub, in := range ins {
		if err := in.WriteChannelState(ctxT(t), 1, inflight(in, sub, 1, false)); err != nil {
			t.Fatal(err)
		}
		if _, err := in.SnapshotWith(ctxT(t), 1, client.SnapshotOptions{Wait: true}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.CompleteCheckpoint(ctxT(t), chJob, 1); err != nil {
		t.Fatal(err)
	}
	if objs := pl.channelPuts(chJob + "/chk-1"); len(objs) != 16 {
		t.Fatalf("%d objects, want 16 (one per task)", len(objs))
	}
}

// A rescale 2 -> 3 hands every keyed record to the new subtask that owns
// its key group, each exactly once; forward channel state refuses it.
func TestChannelStateRescale(t *testing.T) {
	h, _, _ := chanHarness(t, time.Second)
	c := h.dial(client.Options{})
	ins := openOp(t, c, 2, nil)
	written := unalignedCheckpoint(t, c, ins, 1, false)
	want := map[string]int32{}
	for _, chans := range written {
		for _, cs := range chans {
			for _, buf := range cs.Buffers {
				for _, r := range buf {
					want[string(r.Data)] = r.KeyGroup
				}
			}
		}
	}
	ins = openOp(t, c, 3, &client.Restore{Latest: true})
	got := map[string]int32{}
	for sub, in := range ins {
		chans, err := in.ReadChannelState(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		for _, cs := range chans {
			if cs.Kind != backend.ChannelKeyed {
				t.Fatalf("subtask %d got a %s channel", sub, cs.Kind)
			}
			for _, buf := range cs.Buffers {
				for _, r := range buf {
					if !in.KeyGroups().Contains(int(r.KeyGroup)) {
						t.Fatalf("subtask %d (%s) got a record of key group %d", sub, in.KeyGroups(), r.KeyGroup)
					}
					if _, dup := got[string(r.Data)]; dup {
						t.Fatalf("record %s restored twice", r.Data)
					}
					got[string(r.Data)] = r.KeyGroup
				}
			}
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("rescaled channel state holds %d records, want %d", len(got), len(want))
	}

	// Forward channel state cannot be redistributed.
	closeAll(t, ins)
	ins = openOp(t, c, 2, &client.Restore{CheckpointID: 1})
	unalignedCheckpoint(t, c, ins, 2, true)
	closeAll(t, ins)
	_, err := c.Open(ctxT(t), client.OpenSpec{Task: task(chJob, chOp, 0), Parallelism: 3, Backend: backend.KindFile,
		States: allStates, Restore: &client.Restore{Latest: true}, Replace: true})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "forward") {
		t.Fatalf("rescale of forward channel state: %v, want FailedPrecondition naming it", err)
	}
}

// Damaged channel state fails the restore with DataLoss naming it; the
// restore without the channel state of that checkpoint then brings back
// the keyed state, and the history says what was skipped.
func TestChannelStateDamagedRestoreWithout(t *testing.T) {
	h, pl, root := chanHarness(t, time.Second)
	c := h.dial(client.Options{})
	ins := openOp(t, c, 2, nil)
	unalignedCheckpoint(t, c, ins, 1, false)
	objs := pl.channelPuts(chJob + "/chk-1")
	if len(objs) != 1 {
		t.Fatalf("objects %v", objs)
	}
	path := filepath.Join(root, filepath.FromSlash(objs[0]))
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Subtask 0 wrote first: its segments start the object (a restore
	// reads only its own ranges).
	data[20] ^= 0x10
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = c.Open(ctxT(t), client.OpenSpec{Task: task(chJob, chOp, 0), Parallelism: 2, Backend: backend.KindFile,
		States: allStates, Restore: &client.Restore{Latest: true}, Replace: true})
	if status.Code(err) != codes.DataLoss || !strings.Contains(err.Error(), objs[0]) {
		t.Fatalf("restore of damaged channel state: %v, want DataLoss naming %s", err, objs[0])
	}
	// The option must name the checkpoint the restore resolves to.
	_, err = c.Open(ctxT(t), client.OpenSpec{Task: task(chJob, chOp, 0), Parallelism: 2, Backend: backend.KindFile,
		States: allStates, Restore: &client.Restore{Latest: true, WithoutChannelState: 7}, Replace: true})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("restore without the channel state of another checkpoint: %v, want FailedPrecondition", err)
	}
	for sub := range 2 {
		in, err := c.Open(ctxT(t), client.OpenSpec{Task: task(chJob, chOp, sub), Parallelism: 2, Backend: backend.KindFile,
			States: allStates, Restore: &client.Restore{Latest: true, WithoutChannelState: 1}, Replace: true})
		if err != nil {
			t.Fatal(err)
		}
		v, err := in.Get("v", fmt.Appendf(nil, "key-%d", sub), nil).Wait(ctxT(t))
		if err != nil || string(v.Data) != fmt.Sprintf("val-%d-1", sub) {
			t.Fatalf("subtask %d keyed state after a restore without channel state: %q %v", sub, v.Data, err)
		}
		chans, err := in.ReadChannelState(ctxT(t))
		if err != nil || len(chans) != 0 {
			t.Fatalf("subtask %d: channel state %v %v, want none", sub, chans, err)
		}
	}
	list, err := c.ListCheckpoints(ctxT(t), chJob)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(list, func(ci *pb.CheckpointInfo) bool { return ci.GetCheckpointId() == 1 })
	if i < 0 || !list[i].GetWithoutChannelState() {
		t.Fatalf("history does not record the skipped channel state: %v", list)
	}
}

// A task reopened with replace before its snapshot does not inherit what
// its dead predecessor wrote for the checkpoint.
func TestChannelStateNotInheritedOnReplace(t *testing.T) {
	h, _, _ := chanHarness(t, time.Millisecond)
	c := h.dial(client.Options{})
	old := openOp(t, c, 1, nil)[0]
	if err := old.WriteChannelState(ctxT(t), 1, inflight(old, 0, 100, true)); err != nil {
		t.Fatal(err)
	}
	old.Abandon()
	in := openOp(t, c, 1, nil)[0]
	want := inflight(in, 0, 1, false)
	if err := in.WriteChannelState(ctxT(t), 1, want); err != nil {
		t.Fatal(err)
	}
	if _, err := in.SnapshotWith(ctxT(t), 1, client.SnapshotOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CompleteCheckpoint(ctxT(t), chJob, 1); err != nil {
		t.Fatal(err)
	}
	re := openOp(t, c, 1, &client.Restore{Latest: true})[0]
	got, err := re.ReadChannelState(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("restored %v\nwant %v", got, want)
	}
}

// Channel state written after the task's snapshot is refused, and the
// objects of an aborted checkpoint are deleted with it.
func TestChannelStateLifecycle(t *testing.T) {
	h, pl, root := chanHarness(t, time.Millisecond)
	c := h.dial(client.Options{})
	ins := openOp(t, c, 1, nil)
	in := ins[0]
	if err := in.WriteChannelState(ctxT(t), 1, inflight(in, 0, 1, false)); err != nil {
		t.Fatal(err)
	}
	if _, err := in.SnapshotWith(ctxT(t), 1, client.SnapshotOptions{Wait: true}); err != nil {
		t.Fatal(err)
	}
	err := in.WriteChannelState(ctxT(t), 1, inflight(in, 0, 1, false))
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("write after the snapshot: %v, want FailedPrecondition", err)
	}
	objs := pl.channelPuts(chJob + "/chk-1")
	if len(objs) != 1 {
		t.Fatalf("objects %v", objs)
	}
	if err := c.AbortCheckpoint(ctxT(t), chJob, 1, "aborted: test"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(objs[0]))); !os.IsNotExist(err) {
		t.Fatalf("channel state of an aborted checkpoint is still there: %v", err)
	}
	// Savepoints are aligned: channel state written for an id makes that
	// id a checkpoint in flight, which a native savepoint cannot use (the
	// catalog also refuses channel state in a savepoint's handles).
	if err := in.WriteChannelState(ctxT(t), 3, inflight(in, 0, 3, false)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TriggerSavepoint(ctxT(t), chJob, true, 3); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("native savepoint over channel state: %v, want a refusal", err)
	}
	// A bad key group is refused and names the channel.
	bad := []client.ChannelState{{Channel: backend.ChannelID{Direction: backend.ChannelInput}, Kind: backend.ChannelKeyed,
		Buffers: [][]client.ChannelRecord{{{KeyGroup: 4096, Data: []byte("x")}}}}}
	if err := in.WriteChannelState(ctxT(t), 2, bad); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "input 0/0") {
		t.Fatalf("key group out of range: %v", err)
	}
}

func closeAll(t *testing.T, ins []*client.Instance) {
	t.Helper()
	for _, in := range ins {
		if err := in.Close(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
}
