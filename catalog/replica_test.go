package catalog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// fakeLog is a replicated log as the catalog sees one: the leader's
// proposals are applied, in one order, to every node's replica, and the
// proposer hears its own replica's outcome. refuse, when it says so,
// fails a proposal before it is appended (a leader that lost its quorum).
type fakeLog struct {
	mu       sync.Mutex
	replicas []*Replica
	leader   int
	refuse   func(cmd command) bool
	applied  int
	tokens   map[backend.TaskID]uint64 // the newest fencing token of each task
}

func newFakeLog(n int) *fakeLog {
	l := &fakeLog{}
	for range n {
		l.replicas = append(l.replicas, NewReplica(2, 0)) // testClock.opts retains 2
	}
	return l
}

func (l *fakeLog) propose(node int) func(context.Context, []byte, []Fence) (any, error) {
	return func(_ context.Context, enc []byte, fences []Fence) (any, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if node != l.leader {
			return nil, errors.New("fake log: not the leader")
		}
		for _, f := range fences {
			if f.Token != l.tokens[f.Task] {
				return nil, fmt.Errorf("%w: task %s: token %d is stale (%d)", ErrFenced, f.Task, f.Token, l.tokens[f.Task])
			}
		}
		if cmd, err := decodeCommand(enc); err == nil && l.refuse != nil && l.refuse(cmd) {
			return nil, errors.New("fake log: no quorum")
		}
		var res any
		for i, r := range l.replicas {
			out := r.Apply(enc)
			if i == node {
				res = out
			}
		}
		l.applied++
		return res, nil
	}
}

// listCounter counts the listings of a store.
type listCounter struct {
	tiered.Store
	lists atomic.Int64
}

func (s *listCounter) List(ctx context.Context, prefix, after string, limit int) (tiered.ListPage, error) {
	s.lists.Add(1)
	return s.Store.List(ctx, prefix, after, limit)
}

func openReplicated(t *testing.T, s tiered.Store, clk *testClock, l *fakeLog, node int) *Catalog {
	t.Helper()
	return openCat(t, s, clk, func(o *Options) {
		o.Replica, o.Propose = l.replicas[node], l.propose(node)
	})
}

// A replicated catalog's decisions outlive its leader: the next leader's
// catalog opens from its replica without listing the store, with every
// retained checkpoint, savepoint and in-flight checkpoint and the handles
// reported for it; a completion whose last command the log did not
// confirm is ended by the next leader and completes on retry with the
// manifest it wrote; and a node restarted from a replica's image holds
// the same.
func TestReplicatedCatalogOutlivesItsLeader(t *testing.T) {
	mem := memstore.New()
	clk := &testClock{}
	l := newFakeLog(3)
	tasks := []*fakeTask{
		newFakeTask("j", "op", 0, backend.KeyGroupRange{Start: 0, End: 63}),
		newFakeTask("j", "op", 1, backend.KeyGroupRange{Start: 64, End: 127}),
	}
	a := openReplicated(t, mem, clk, l, 0)
	for id := uint64(1); id <= 2; id++ {
		tasks[0].state["k"] = string(rune('a' + id))
		checkpoint(t, a, mem, id, tasks...)
	}
	if _, err := a.SavepointFromCheckpoint(ctx, "sp1", "j", 2); err != nil {
		t.Fatal(err)
	}
	// Checkpoint 3: one task reported to the first leader, one to come.
	if err := a.BeginCheckpoint("j", 3); err != nil {
		t.Fatal(err)
	}
	var h3 []*backend.Handle
	for _, tk := range tasks {
		tk.snapshot(3)
		h, err := tk.upload(ctx, mem, 3)
		if err != nil {
			t.Fatal(err)
		}
		h3 = append(h3, h)
	}
	l.mu.Lock()
	l.tokens = map[backend.TaskID]uint64{tasks[0].task: 7}
	l.mu.Unlock()
	if err := a.AddFencedTaskHandle("j", 3, h3[0], 6); !errors.Is(err, ErrFenced) {
		t.Fatalf("a report under a stale token: %v", err)
	}
	if err := a.AddFencedTaskHandle("j", 3, h3[0], 7); err != nil {
		t.Fatal(err)
	}

	// The leader dies; node 1 leads.
	l.mu.Lock()
	l.leader = 1
	l.mu.Unlock()
	if err := a.AddTaskHandle("j", 3, h3[1]); err == nil {
		t.Fatal("a deposed leader's catalog still decides")
	}
	a.Close()
	counted := &listCounter{Store: mem}
	b := openReplicated(t, counted, clk, l, 1)
	if n := counted.lists.Load(); n != 0 {
		t.Fatalf("the next leader's catalog listed the store %d times to open", n)
	}
	if got := b.Retained("j"); len(got) != 2 {
		t.Fatalf("retained after the leader change: %v", got)
	}
	if _, ok := b.Savepoint("sp1"); !ok {
		t.Fatal("the savepoint is lost with the leader")
	}
	if got := b.InFlight("j"); len(got) != 1 || got[0] != 3 {
		t.Fatalf("in flight after the leader change: %v", got)
	}
	if err := b.AddTaskHandle("j", 3, h3[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CompleteTasks(ctx, "j", 3, []backend.TaskID{tasks[0].task, tasks[1].task}); err != nil {
		t.Fatalf("complete with a handle reported to the dead leader: %v", err)
	}
	for _, tk := range tasks {
		tk.notifyComplete(3)
	}

	// Checkpoint 4 writes its manifest, but the log does not confirm it
	// completed: the caller hears an error, and the next leader finishes
	// it on retry.
	tasks[1].state["k"] = "changed"
	report(t, b, mem, 4, tasks...)
	l.mu.Lock()
	l.refuse = func(cmd command) bool { return cmd.Op == opCompleted }
	l.mu.Unlock()
	if _, err := b.Complete(ctx, "j", 4); !errors.Is(err, errLogFailed) {
		t.Fatalf("complete without the log: %v", err)
	}
	if !exists(t, mem, CheckpointManifest("j", 4)) {
		t.Fatal("the manifest of an unconfirmed completion was deleted")
	}
	l.mu.Lock()
	l.refuse, l.leader = nil, 2
	l.mu.Unlock()
	b.Close()
	c := openReplicated(t, mem, clk, l, 2)
	if _, err := c.Complete(ctx, "j", 4); err != nil {
		t.Fatalf("retry of the unconfirmed completion on the next leader: %v", err)
	}
	if got := c.Retained("j"); len(got) != 2 || got[1] != 4 {
		t.Fatalf("retained: %v", got)
	}

	// Every replica holds the same, and so does one restarted from an
	// image (once the last leader's discarder stopped).
	c.Close()
	want := l.replicas[2].s.fingerprint()
	for i, r := range l.replicas {
		if got := r.s.fingerprint(); got != want {
			t.Fatalf("replica %d differs:\n%s\nwant:\n%s", i, got, want)
		}
	}
	img, err := l.replicas[0].Image()
	if err != nil {
		t.Fatal(err)
	}
	fresh := NewReplica(2, 0)
	if err := fresh.Restore(img); err != nil {
		t.Fatal(err)
	}
	if got := fresh.s.fingerprint(); got != want || !fresh.Loaded() {
		t.Fatalf("a replica restored from an image differs (loaded %v):\n%s", fresh.Loaded(), got)
	}
}

// Options refuse half a replicated catalog and a replica that keeps a
// different number of checkpoints.
func TestReplicatedOptionsValidate(t *testing.T) {
	l := newFakeLog(1)
	for _, o := range []Options{
		{Store: memstore.New(), Replica: l.replicas[0]},
		{Store: memstore.New(), Propose: l.propose(0)},
		{Store: memstore.New(), Replica: l.replicas[0], Propose: l.propose(0), Retain: 3},
	} {
		o.EnsureDefaults()
		if err := o.Validate(); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("%+v: %v", o, err)
		}
	}
}

// A catalog alone cannot check fencing tokens, and says so.
func TestFencedReportNeedsAReplicatedCatalog(t *testing.T) {
	c, h := beganWithUpload(t)
	if err := c.AddFencedTaskHandle("j", 1, h, 3); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("a fenced report to a catalog alone: %v", err)
	}
}

// A replicated catalog discards what retention dropped in the
// background, many checkpoints in one log entry, and their manifests and
// private files go.
func TestReplicatedDiscardsShareALogWrite(t *testing.T) {
	mem := memstore.New()
	clk := &testClock{}
	l := newFakeLog(2)
	c := openReplicated(t, mem, clk, l, 0)
	tk := newFakeTask("j", "op", 0, backend.KeyGroupRange{Start: 0, End: 127})
	for id := uint64(1); id <= 6; id++ {
		tk.state["k"] = fmt.Sprint(id)
		checkpoint(t, c, mem, id, tk)
	}
	l.mu.Lock()
	completed := l.applied
	l.mu.Unlock()
	// The discarder deletes the manifests, takes one command, then
	// deletes each checkpoint's files: wait for all of it.
	left := func() []string {
		var out []string
		for id := uint64(1); id <= 4; id++ {
			out = append(out, names(storeSnapshot(t, mem, CheckpointDir("j", id)+"/"))...)
		}
		return out
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(left()) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the dropped checkpoints left %v", left())
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.Close()
	l.mu.Lock()
	writes := l.applied - completed
	l.mu.Unlock()
	if writes != 1 {
		t.Fatalf("discarding 4 checkpoints took %d log entries, want 1", writes)
	}
	if got := c.Retained("j"); len(got) != 2 || got[0] != 5 {
		t.Fatalf("retained %v", got)
	}
}

// A checkpoint whose begin a replicated catalog holds back is in flight
// for whoever asks (List, InFlight), before any report reaches the log.
func TestHeldBackBeginIsInFlight(t *testing.T) {
	l := newFakeLog(1)
	c := openReplicated(t, memstore.New(), &testClock{}, l, 0)
	l.mu.Lock()
	before := l.applied
	l.mu.Unlock()
	if err := c.BeginCheckpoint("new", 1); err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	after := l.applied
	l.mu.Unlock()
	if after != before {
		t.Fatalf("a begin alone took %d log entries", after-before)
	}
	if got := c.InFlight("new"); len(got) != 1 || got[0] != 1 {
		t.Fatalf("in flight %v", got)
	}
	if got := c.List("new"); len(got) != 1 || got[0].Status != StatusInProgress {
		t.Fatalf("history %+v", got)
	}
	if err := c.Abort(ctx, "new", 1, StatusDeclined, "test"); err != nil {
		t.Fatal(err)
	}
	if got := c.InFlight("new"); len(got) != 0 {
		t.Fatalf("in flight after the abort %v", got)
	}
}

// TestHeldBackBeginKeepsItsBase: a checkpoint whose begin the leader
// holds back (no report yet) builds on the job's base like any other:
// completions and discards decided meanwhile must see it in flight, or
// they delete the shared files it reuses (it then fails to complete with
// "file does not exist"). Found by TestMachineReplaysItsCommands.
func TestHeldBackBeginKeepsItsBase(t *testing.T) {
	mem := memstore.New()
	l := newFakeLog(1)
	c := openReplicated(t, mem, &testClock{}, l, 0)
	tasks := []*fakeTask{
		newFakeTask("j", "op", 0, backend.KeyGroupRange{Start: 0, End: 63}),
		newFakeTask("j", "op", 1, backend.KeyGroupRange{Start: 64, End: 127}),
	}
	handles := map[uint64][]*backend.Handle{}
	begin := func(id uint64) {
		t.Helper()
		if err := c.BeginCheckpoint("j", id); err != nil {
			t.Fatal(err)
		}
		for i, tk := range tasks {
			tk.state["k"] = fmt.Sprint(id, i)
			tk.snapshot(id)
			h, err := tk.upload(ctx, mem, id)
			if err != nil {
				t.Fatal(err)
			}
			handles[id] = append(handles[id], h)
		}
	}
	complete := func(id uint64) {
		t.Helper()
		for _, h := range handles[id] {
			if err := c.AddTaskHandle("j", id, h); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.Complete(ctx, "j", id); err != nil {
			t.Fatalf("complete %d: %v", id, err)
		}
		for _, tk := range tasks {
			tk.notifyComplete(id)
		}
	}
	begin(1)
	begin(2)
	begin(3)
	complete(1)
	begin(4) // reuses checkpoint 1's unchanged shared files; held back
	complete(2)
	complete(3) // retains 2 and 3: checkpoint 1 is discarded
	// The background discard of checkpoint 1 deletes what it releases,
	// then the checkpoint's directory: wait for the directory to go.
	deadline := time.Now().Add(10 * time.Second)
	for {
		page, err := mem.List(ctx, CheckpointDir("j", 1)+"/", "", 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Objects) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("checkpoint 1 is still there 10s after it was dropped: %d objects", len(page.Objects))
		}
		time.Sleep(10 * time.Millisecond)
	}
	complete(4)
	m, ok := c.Checkpoint("j", 4)
	if !ok {
		t.Fatal("checkpoint 4 is not retained")
	}
	for _, h := range m.Tasks {
		for _, f := range h.Files {
			if _, err := mem.Stat(ctx, f.Path); err != nil {
				t.Fatalf("file %s of checkpoint 4: %v", f.Path, err)
			}
		}
	}
}

// TestBatchedBeginOfACompletedCheckpoint: a begin the leader sent ahead
// of another command, of a checkpoint that completed meanwhile, is a
// no-op inside the batch (the command after it still runs); alone it is
// refused as before.
func TestBatchedBeginOfACompletedCheckpoint(t *testing.T) {
	c, h := beganWithUpload(t)
	if _, err := c.Complete(ctx, "j", 1, h); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := c.mu.apply(command{Op: opBegin, Job: "j", ID: 1}); !errors.Is(err, ErrExists) {
		t.Fatalf("a begin of a completed checkpoint alone: %v", err)
	}
	out, err := c.mu.apply(command{Op: opBatch, Batch: []command{{Op: opBegin, Job: "j", ID: 1}, {Op: opBegin, Job: "j", ID: 2}}})
	if err != nil || len(out.subs) != 2 {
		t.Fatalf("the batch: %v (%d outcomes)", err, len(out.subs))
	}
	if c.mu.jobs["j"].inflight[2] == nil {
		t.Fatal("the begin after it did not run")
	}
}

// beganWithUpload opens a catalog alone over memory, begins checkpoint 1
// of job j and uploads one task's snapshot for it.
func beganWithUpload(t *testing.T) (*Catalog, *backend.Handle) {
	t.Helper()
	mem := memstore.New()
	c := openCat(t, mem, &testClock{})
	tk := newFakeTask("j", "op", 0, backend.KeyGroupRange{Start: 0, End: 127})
	if err := c.BeginCheckpoint("j", 1); err != nil {
		t.Fatal(err)
	}
	tk.snapshot(1)
	h, err := tk.upload(ctx, mem, 1)
	if err != nil {
		t.Fatal(err)
	}
	return c, h
}

// heldJobFiles is a store whose job-file writes wait until release is
// closed.
type heldJobFiles struct {
	tiered.Store
	mu      sync.Mutex
	release chan struct{}
}

// hold holds the job-file writes from now on, until the returned release.
func (s *heldJobFiles) hold() (release func()) {
	ch := make(chan struct{})
	s.mu.Lock()
	s.release = ch
	s.mu.Unlock()
	return func() { close(ch) }
}

func (s *heldJobFiles) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	if strings.HasSuffix(name, "/"+JobFileName) {
		s.mu.Lock()
		release := s.release
		s.mu.Unlock()
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.Store.Put(ctx, name, r, size)
}

// A replicated catalog's completion answers once the log has it, without
// waiting for its job file (a mirror of the replica, mirror.go); the file
// follows, and Close writes the files still to write before it returns.
func TestReplicatedJobFileFollowsTheCompletion(t *testing.T) {
	mem := &heldJobFiles{Store: memstore.New()}
	release := mem.hold()
	clk := &testClock{}
	l := newFakeLog(1)
	c := openReplicated(t, mem, clk, l, 0)
	tk := newFakeTask("j", "op", 0, backend.KeyGroupRange{Start: 0, End: 127})
	history := func() []uint64 {
		t.Helper()
		data, err := tiered.ReadAll(ctx, mem.Store, "j/"+JobFileName, maxMetaSize)
		if tiered.IsNotFound(err) {
			return nil
		}
		if err != nil {
			t.Fatal(err)
		}
		f, err := decodeJobFile(data)
		if err != nil {
			t.Fatal(err)
		}
		var ids []uint64
		for _, r := range f.History {
			ids = append(ids, r.ID)
		}
		return ids
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		checkpoint(t, c, mem, 1, tk)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the completion waits for its job file")
	}
	if got := history(); len(got) != 0 {
		t.Fatalf("the job file was written while its writes were held: history %v", got)
	}
	release()
	deadline := time.Now().Add(10 * time.Second)
	for !slices.Contains(history(), 1) {
		if time.Now().After(deadline) {
			t.Fatalf("the job file never recorded checkpoint 1: history %v", history())
		}
		time.Sleep(5 * time.Millisecond)
	}

	// Held again: Close waits for the file of checkpoint 2.
	release = mem.hold()
	checkpoint(t, c, mem, 2, tk)
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		c.Close()
	}()
	select {
	case <-closed:
		t.Fatal("Close returned before the job file was written")
	case <-time.After(100 * time.Millisecond):
	}
	release()
	<-closed
	if got := history(); !slices.Contains(got, 2) {
		t.Fatalf("after Close the job file's history is %v, want checkpoint 2 in it", got)
	}
}

// The leader's replica applies the commands its catalog prepared (decoded
// while the log took them), and ends in the same state as a replica that
// decoded the log's bytes itself; nothing prepared is left behind.
func TestPreparedCommandsKeepReplicasAlike(t *testing.T) {
	mem := memstore.New()
	clk := &testClock{}
	l := newFakeLog(2)
	c := openReplicated(t, mem, clk, l, 0)
	tasks := []*fakeTask{
		newFakeTask("j", "op", 0, backend.KeyGroupRange{Start: 0, End: 63}),
		newFakeTask("j", "op", 1, backend.KeyGroupRange{Start: 64, End: 127}),
	}
	for id := uint64(1); id <= 4; id++ {
		tasks[0].state["k"] = fmt.Sprint(id)
		checkpoint(t, c, mem, id, tasks...)
	}
	if err := c.BeginCheckpoint("j", 5); err != nil {
		t.Fatal(err)
	}
	if err := c.Abort(ctx, "j", 5, StatusAborted, "test"); err != nil {
		t.Fatal(err)
	}
	leader, follower := l.replicas[0], l.replicas[1]
	a, err := leader.Image()
	if err != nil {
		t.Fatal(err)
	}
	b, err := follower.Image()
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != string(b) {
		t.Fatalf("the leader's replica differs from the follower's:\n%s\n%s", a, b)
	}
	leader.pre.mu.Lock()
	left, taken := len(leader.pre.m), leader.pre.taken
	leader.pre.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d prepared commands left behind", left)
	}
	if l.applied == 0 || taken != uint64(l.applied) {
		t.Fatalf("the leader's replica took %d prepared commands of the %d it applied", taken, l.applied)
	}

	// A completion's command prepared ahead comes back with its manifest
	// decoded (which decoding the bytes alone does not do): Apply takes it.
	m := checkpoint(t, c, mem, 6, tasks...)
	enc, err := EncodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := encodeCommand(command{Op: opCompleted, Job: "j", ID: 7, Manifest: enc})
	if err != nil {
		t.Fatal(err)
	}
	release := leader.prepare(cmd)
	got, err := leader.decoded(cmd)
	release()
	if err != nil || got.decoded == nil || got.decoded.CheckpointID != m.CheckpointID {
		t.Fatalf("the prepared completion: %v, manifest %v", err, got.decoded)
	}
	if plain, err := leader.decoded(cmd); err != nil || plain.decoded != nil {
		t.Fatalf("a command prepared once was taken twice: %v %v", err, plain.decoded)
	}
	// Released without an apply (the log refused it): forgotten.
	leader.prepare(cmd)()
	leader.pre.mu.Lock()
	left = len(leader.pre.m)
	leader.pre.mu.Unlock()
	if left != 0 {
		t.Fatalf("a released command stays prepared")
	}
}
