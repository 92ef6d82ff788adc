package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	pb "github.com/statedhq/stated/cluster/clusterpb"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

var ctx = context.Background()

// swapCaller delivers calls to whichever server hosts the catalog now,
// as the cluster's leader-forwarding call does; down fails every call.
type swapCaller struct {
	journal *memJournal // nil: none
	mu      sync.Mutex
	srv     *CatalogServer
	down    bool
	log     []string
}

func (s *swapCaller) Call(ctx context.Context, method string, payload []byte) ([]byte, error) {
	s.mu.Lock()
	srv, down := s.srv, s.down
	s.log = append(s.log, method)
	s.mu.Unlock()
	if down || srv == nil {
		return nil, errors.New("no leader")
	}
	return srv.Handle(ctx, method, payload)
}

func (s *swapCaller) host(t *testing.T, store tiered.Store, epoch uint64) *catalog.Catalog {
	t.Helper()
	cat, err := catalog.Open(ctx, catalog.Options{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	o := CatalogServerOptions{Epoch: epoch}
	if s.journal != nil {
		o.Journal = s.journal
		o.CheckFences = s.journal.checkFences
	}
	srv, err := NewCatalogServer(cat, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	if s.journal != nil {
		if _, err := RecoverReports(ctx, cat, s.journal); err != nil {
			t.Fatal(err)
		}
	}
	s.mu.Lock()
	s.srv = srv
	s.mu.Unlock()
	return cat
}

// memJournal is a ReportJournal in memory (the cluster's is tested in package
// cluster).
type memJournal struct {
	mu sync.Mutex
	m  map[string][]byte
	// tokens are the tasks' newest fencing tokens, for fenced records.
	tokens map[backend.TaskID]uint64
}

func (j *memJournal) PutMany(_ context.Context, recs map[string][]byte, fences map[string]Fence) (map[string]error, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	var refused map[string]error
	for k, v := range recs {
		if f, ok := fences[k]; ok && j.tokens[f.Task] != f.Token {
			if refused == nil {
				refused = map[string]error{}
			}
			refused[k] = fmt.Errorf("%w: %s holds token %d, not %d", catalog.ErrFenced, f.Task, j.tokens[f.Task], f.Token)
			continue
		}
		j.m[k] = v
	}
	return refused, nil
}

// checkFences is the server's CheckFences over the journal's tokens.
func (j *memJournal) checkFences(_ context.Context, fences []Fence) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, f := range fences {
		if j.tokens[f.Task] != f.Token {
			return fmt.Errorf("%w: %s holds token %d, not %d", catalog.ErrFenced, f.Task, j.tokens[f.Task], f.Token)
		}
	}
	return nil
}

func (j *memJournal) DeleteRange(_ context.Context, from, to string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	for k := range j.m {
		if k >= from && k < to {
			delete(j.m, k)
		}
	}
	return nil
}

func (j *memJournal) Read(prefix string) map[string][]byte {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := map[string][]byte{}
	for k, v := range j.m {
		if strings.HasPrefix(k, prefix) {
			out[k] = v
		}
	}
	return out
}

// upload writes one private file of a task's snapshot and returns its
// handle.
func upload(t *testing.T, store tiered.Store, task backend.TaskID, kg backend.KeyGroupRange, id uint64, body string) *backend.Handle {
	t.Helper()
	name := catalog.CheckpointDir(task.Job, id) + "/" + task.Operator + "-" + string(rune('0'+task.Subtask)) + ".sst"
	if err := store.Put(ctx, name, strings.NewReader(body), int64(len(body))); err != nil {
		t.Fatal(err)
	}
	h := &backend.Handle{Version: 1, Backend: backend.KindFile, Task: task, KeyGroups: kg, MaxParallelism: 128,
		CheckpointID: id, Files: []backend.FileRef{{Path: name, Size: int64(len(body))}}, FullSize: int64(len(body)), CheckpointedSize: int64(len(body))}
	if err := h.Validate(); err != nil {
		t.Fatal(err)
	}
	return h
}

func newClient(t *testing.T, c CatalogCaller, store tiered.Store) *CatalogClient {
	t.Helper()
	cl, err := NewCatalogClient(CatalogClientOptions{Caller: c, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// TestCompletionAcrossALeaderChange: two nodes report the tasks of one
// checkpoint; the catalog's host changes before the completion. The
// completion through the node that meets the new catalog first fails only
// until the other node resyncs, then succeeds, and nothing that completed
// before is lost.
func TestCompletionAcrossALeaderChange(t *testing.T) {
	store := memstore.New()
	caller := &swapCaller{}
	caller.host(t, store, 1)
	n1, n2 := newClient(t, caller, store), newClient(t, caller, store)
	a := backend.TaskID{Job: "j", Operator: "op", Subtask: 0}
	b := backend.TaskID{Job: "j", Operator: "op", Subtask: 1}
	ka, kb := backend.KeyGroupRangeForOperator(128, 2, 0), backend.KeyGroupRangeForOperator(128, 2, 1)
	tasks := []backend.TaskID{a, b}
	checkpoint := func(id uint64, body string) {
		t.Helper()
		for i, n := range []*CatalogClient{n1, n2} {
			if err := n.BeginCheckpoint("j", id); err != nil {
				t.Fatal(err)
			}
			task, kg := a, ka
			if i == 1 {
				task, kg = b, kb
			}
			if err := n.AddTaskHandle("j", id, upload(t, store, task, kg, id, body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	checkpoint(1, "one")
	if m, err := n1.CompleteTasks(ctx, "j", 1, tasks); err != nil || len(m.Tasks) != 2 {
		t.Fatalf("complete 1: %v", err)
	}
	if n1.Pending() != 0 {
		t.Fatalf("n1 still holds %d pending checkpoints after the completion", n1.Pending())
	}
	checkpoint(2, "two")
	// The leader dies; a new one opens its catalog from the store.
	caller.host(t, store, 2)
	_, err := n1.CompleteTasks(ctx, "j", 2, tasks)
	if !errors.Is(err, catalog.ErrState) || !strings.Contains(err.Error(), b.String()) {
		t.Fatalf("complete before n2 resynced: %v (want the missing task named)", err)
	}
	if err := n2.Resync(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := n1.CompleteTasks(ctx, "j", 2, tasks)
	if err != nil || len(m.Tasks) != 2 {
		t.Fatalf("complete 2 after the resync: %v", err)
	}
	if n1.Replays() == 0 || n2.Replays() == 0 {
		t.Fatalf("replays: n1 %d, n2 %d", n1.Replays(), n2.Replays())
	}
	// Completing again through the other node answers the same manifest.
	m2, err := n2.CompleteTasks(ctx, "j", 2, tasks)
	if err != nil || !m2.Completed.Equal(m.Completed) {
		t.Fatalf("second completion: %v", err)
	}
	if got := n2.Retained("j"); len(got) == 0 || got[len(got)-1] != 2 {
		t.Fatalf("retained %v", got)
	}
	if _, ok := n2.Checkpoint("j", 1); !ok {
		t.Fatal("checkpoint 1 was lost across the leader change")
	}
}

// TestErrorsKeepTheirClass: what the hosting catalog refuses arrives with
// the sentinel the api layer maps to a gRPC code; a caller that cannot
// reach it is an error, and lookups then answer "not found".
func TestErrorsKeepTheirClass(t *testing.T) {
	store := memstore.New()
	caller := &swapCaller{}
	caller.host(t, store, 7)
	n := newClient(t, caller, store)
	if _, err := n.CompleteTasks(ctx, "j", 3, nil); !errors.Is(err, catalog.ErrState) {
		t.Fatalf("complete of a checkpoint never begun: %v", err)
	}
	if err := n.BeginCheckpoint("bad/job", 1); !errors.Is(err, backend.ErrInvalidArgument) {
		t.Fatalf("bad job: %v", err)
	}
	_, err := n.RestoreSource(ctx, catalog.RestoreRequest{Job: "j", Mode: catalog.ModeClaim})
	if !errors.Is(err, catalog.ErrNotFound) || !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("restore with nothing to restore: %v", err)
	}
	if err := n.BeginCheckpoint("j", 1); err != nil {
		t.Fatal(err)
	}
	task := backend.TaskID{Job: "j", Operator: "op", Subtask: 0}
	h := upload(t, store, task, backend.KeyGroupRange{Start: 0, End: 127}, 1, "x")
	h.Task.Job = "k"
	if err := n.AddTaskHandle("j", 1, h); !errors.Is(err, catalog.ErrInvalidArgument) {
		t.Fatalf("a handle of another job: %v", err)
	}
	caller.mu.Lock()
	caller.down = true
	caller.mu.Unlock()
	if err := n.ReleaseLog(ctx, nil); err == nil || !strings.Contains(err.Error(), "no leader") {
		t.Fatalf("call without a leader: %v", err)
	}
	if _, ok := n.Latest("j"); ok {
		t.Fatal("a lookup without a leader found something")
	}
}

// TestRestoreThroughTheClient: a restore through a client reads the
// manifest the hosting catalog wrote, from the client's own store.
func TestRestoreThroughTheClient(t *testing.T) {
	store := memstore.New()
	caller := &swapCaller{}
	caller.host(t, store, 1)
	n := newClient(t, caller, store)
	task := backend.TaskID{Job: "j", Operator: "op", Subtask: 0}
	if err := n.BeginCheckpoint("j", 4); err != nil {
		t.Fatal(err)
	}
	h := upload(t, store, task, backend.KeyGroupRange{Start: 0, End: 127}, 4, "four")
	if err := n.AddTaskHandle("j", 4, h); err != nil {
		t.Fatal(err)
	}
	if _, err := n.CompleteTasks(ctx, "j", 4, []backend.TaskID{task}); err != nil {
		t.Fatal(err)
	}
	r, err := n.RestoreSource(ctx, catalog.RestoreRequest{Job: "j", Mode: catalog.ModeNoClaim})
	if err != nil {
		t.Fatal(err)
	}
	if r.Manifest.CheckpointID != 4 || !r.NoClaim || r.Store != tiered.Store(store) || len(r.HandlesFor("op", h.KeyGroups)) != 1 {
		t.Fatalf("restore %+v", r)
	}
	got, err := tiered.ReadAll(ctx, r.Store, r.Handles[0].Files[0].Path, 100)
	if err != nil || !bytes.Equal(got, []byte("four")) {
		t.Fatalf("restored file %q %v", got, err)
	}
	if recs := n.List("j"); len(recs) != 1 || recs[0].ID != 4 || recs[0].Status != catalog.StatusCompleted {
		t.Fatalf("list %+v", recs)
	}
}

// TestJournalOutlivesTheReportingNode: with the journal, a checkpoint
// whose reports reached the old leader completes on the new one even
// though the node that reported half of them died with the leader (it
// never resyncs); completed and aborted checkpoints leave no record.
func TestJournalOutlivesTheReportingNode(t *testing.T) {
	store := memstore.New()
	j := &memJournal{m: map[string][]byte{}}
	caller := &swapCaller{journal: j}
	caller.host(t, store, 1)
	n1, dead := newClient(t, caller, store), newClient(t, caller, store)
	a := backend.TaskID{Job: "j", Operator: "op", Subtask: 0}
	b := backend.TaskID{Job: "j", Operator: "op", Subtask: 1}
	ka, kb := backend.KeyGroupRangeForOperator(128, 2, 0), backend.KeyGroupRangeForOperator(128, 2, 1)
	tasks := []backend.TaskID{a, b}
	for _, id := range []uint64{1, 2, 3} {
		for i, n := range []*CatalogClient{n1, dead} {
			task, kg := a, ka
			if i == 1 {
				task, kg = b, kb
			}
			if err := n.BeginCheckpoint("j", id); err != nil {
				t.Fatal(err)
			}
			if err := n.AddTaskHandle("j", id, upload(t, store, task, kg, id, fmt.Sprint(id))); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := n1.CompleteTasks(ctx, "j", 1, tasks); err != nil {
		t.Fatal(err)
	}
	if err := n1.Abort(ctx, "j", 2, catalog.StatusAborted, "test"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(j.Read(reportsPrefix)) != 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := len(j.Read(reportsPrefix)); got != 2 {
		t.Fatalf("journal holds %d records, want checkpoint 3's two", got)
	}
	caller.host(t, store, 2) // the new leader recovers checkpoint 3's reports
	m, err := n1.CompleteTasks(ctx, "j", 3, tasks)
	if err != nil || len(m.Tasks) != 2 {
		t.Fatalf("complete 3 on the new leader without the dead node: %v", err)
	}
	// Settlements run on the server's own goroutine.
	deadline = time.Now().Add(5 * time.Second)
	for len(j.Read(reportsPrefix)) != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := j.Read(reportsPrefix); len(got) != 0 {
		t.Fatalf("records left after the completion: %v", got)
	}
}

// TestFencedReports: a report under a fencing token is kept only while
// the token is its task's newest, checked by the journal write that keeps
// it; a refusal keeps catalog.ErrFenced across the wire and the catalog
// never sees the report. A report replayed to a new catalog carries its
// token, so a replay cannot slip a fenced report in either.
func TestFencedReports(t *testing.T) {
	store := memstore.New()
	a := backend.TaskID{Job: "j", Operator: "op", Subtask: 0}
	j := &memJournal{m: map[string][]byte{}, tokens: map[backend.TaskID]uint64{a: 7}}
	caller := &swapCaller{journal: j}
	cat := caller.host(t, store, 1)
	n := newClient(t, caller, store)
	kg := backend.KeyGroupRangeForOperator(128, 1, 0)
	for _, id := range []uint64{1, 2} {
		if err := n.BeginCheckpoint("j", id); err != nil {
			t.Fatal(err)
		}
	}
	err := n.AddFencedTaskHandle("j", 1, upload(t, store, a, kg, 1, "stale"), 6)
	if !errors.Is(err, catalog.ErrFenced) || !strings.Contains(err.Error(), "holds token 7") {
		t.Fatalf("a report under a stale token: %v", err)
	}
	if _, err := cat.CompleteTasks(ctx, "j", 1, []backend.TaskID{a}); err == nil {
		t.Fatal("the catalog took the refused report: checkpoint 1 completed")
	}
	if err := n.AddFencedTaskHandle("j", 1, upload(t, store, a, kg, 1, "newest"), 7); err != nil {
		t.Fatalf("a report under the newest token: %v", err)
	}
	if m, err := n.CompleteTasks(ctx, "j", 1, []backend.TaskID{a}); err != nil || len(m.Tasks) != 1 {
		t.Fatalf("complete 1: %v", err)
	}
	// Checkpoint 2 is reported under token 7, then the task moves on
	// (token 8) while the catalog's host changes: the replay is refused.
	if err := n.AddFencedTaskHandle("j", 2, upload(t, store, a, kg, 2, "two"), 7); err != nil {
		t.Fatal(err)
	}
	j.mu.Lock()
	j.tokens[a] = 8
	for k := range j.m {
		delete(j.m, k) // a journal that lost it: only the replay can bring it back
	}
	j.mu.Unlock()
	caller.host(t, store, 2)
	if _, err := n.CompleteTasks(ctx, "j", 2, []backend.TaskID{a}); err == nil {
		t.Fatal("checkpoint 2 completed from a report replayed under a stale token")
	}
	if n.Replays() == 0 {
		t.Fatal("the client replayed nothing to the new catalog")
	}
	// Without a journal to check in, a server refuses fenced reports
	// instead of taking them unchecked.
	bare := &swapCaller{}
	bare.host(t, store, 3)
	nb := newClient(t, bare, store)
	if err := nb.BeginCheckpoint("j", 3); err != nil {
		t.Fatal(err)
	}
	if err := nb.AddFencedTaskHandle("j", 3, upload(t, store, a, kg, 3, "three"), 8); !errors.Is(err, catalog.ErrInvalidArgument) {
		t.Fatalf("a fenced report to a server without a journal: %v", err)
	}
}

// downJournal fails every write as a journal of a node that lost the
// leadership does.
type downJournal struct{ memJournal }

func (j *downJournal) PutMany(context.Context, map[string][]byte, map[string]Fence) (map[string]error, error) {
	return nil, fmt.Errorf("%w: leadership lost", ErrCatalogNotServing)
}

// TestNotServingIsNoAnswer: a server that stops hosting the catalog during
// a call (its journal write lost the leadership, or its catalog closed)
// answers with an error wrapping ErrCatalogNotServing, which the cluster retries
// on the next leader, not with an answer that would fail the caller's
// snapshot or completion.
func TestNotServingIsNoAnswer(t *testing.T) {
	store := memstore.New()
	cat, err := catalog.Open(ctx, catalog.Options{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewCatalogServer(cat, CatalogServerOptions{Epoch: 1, Journal: &downJournal{memJournal{m: map[string][]byte{}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	a := backend.TaskID{Job: "j", Operator: "op"}
	if err := cat.BeginCheckpoint("j", 1); err != nil {
		t.Fatal(err)
	}
	enc, err := backend.EncodeHandle(upload(t, store, a, backend.KeyGroupRangeForOperator(128, 1, 0), 1, "x"))
	if err != nil {
		t.Fatal(err)
	}
	for _, token := range []uint64{0, 5} {
		payload, _ := proto.Marshal(&pb.ReportRequest{Job: "j", Id: 1, Report: &pb.Report{Handle: enc, Token: token}})
		if out, err := srv.Handle(ctx, pb.Catalog_Report_FullMethodName, payload); !errors.Is(err, ErrCatalogNotServing) {
			t.Fatalf("report (token %d) whose journal write lost the leadership: answer %s, error %v", token, out, err)
		}
	}
	cat.Close()
	payload, _ := proto.Marshal(&pb.CompleteRequest{Job: "j", Id: 1, Tasks: toTaskIDs([]backend.TaskID{a})})
	if out, err := srv.Handle(ctx, pb.Catalog_Complete_FullMethodName, payload); !errors.Is(err, ErrCatalogNotServing) {
		t.Fatalf("completion on a closed catalog: answer %s, error %v", out, err)
	}
}

// TestFencedCompletion: a completion under fencing tokens completes only
// while every token is its task's newest (the server's CheckFences); a
// refusal keeps catalog.ErrFenced across the wire and leaves the
// checkpoint in flight, and a server that cannot check refuses.
// fencedCatalog hosts a catalog with a journal that checks fences (task a
// of job j holds token 4) and returns a client of it.
func fencedCatalog(t *testing.T) (store tiered.Store, a backend.TaskID, j *memJournal, caller *swapCaller, n *CatalogClient) {
	t.Helper()
	store = memstore.New()
	a = backend.TaskID{Job: "j", Operator: "op", Subtask: 0}
	j = &memJournal{m: map[string][]byte{}, tokens: map[backend.TaskID]uint64{a: 4}}
	caller = &swapCaller{journal: j}
	caller.host(t, store, 1)
	return store, a, j, caller, newClient(t, caller, store)
}

func TestFencedCompletion(t *testing.T) {
	store, a, j, _, n := fencedCatalog(t)
	kg := backend.KeyGroupRangeForOperator(128, 1, 0)
	if err := n.BeginCheckpoint("j", 1); err != nil {
		t.Fatal(err)
	}
	if err := n.AddFencedTaskHandle("j", 1, upload(t, store, a, kg, 1, "one"), 4); err != nil {
		t.Fatal(err)
	}
	j.mu.Lock()
	j.tokens[a] = 5 // the task was opened again elsewhere
	j.mu.Unlock()
	tasks := []backend.TaskID{a}
	_, err := n.CompleteFencedTasks(ctx, "j", 1, tasks, map[backend.TaskID]uint64{a: 4})
	if !errors.Is(err, catalog.ErrFenced) || !strings.Contains(err.Error(), "holds token 5") {
		t.Fatalf("completion under a stale token: %v", err)
	}
	if _, ok := n.Checkpoint("j", 1); ok {
		t.Fatal("checkpoint 1 completed under a stale token")
	}
	if m, err := n.CompleteFencedTasks(ctx, "j", 1, tasks, map[backend.TaskID]uint64{a: 5}); err != nil || len(m.Tasks) != 1 {
		t.Fatalf("completion under the newest token: %v", err)
	}
	bare := &swapCaller{}
	bare.host(t, store, 2)
	nb := newClient(t, bare, store)
	if err := nb.BeginCheckpoint("j", 2); err != nil {
		t.Fatal(err)
	}
	if err := nb.AddTaskHandle("j", 2, upload(t, store, a, kg, 2, "two")); err != nil {
		t.Fatal(err)
	}
	if _, err := nb.CompleteFencedTasks(ctx, "j", 2, tasks, map[backend.TaskID]uint64{a: 5}); !errors.Is(err, catalog.ErrInvalidArgument) {
		t.Fatalf("a fenced completion on a server that cannot check tokens: %v", err)
	}
}

// A completion by a client whose node hosts the catalog goes to the
// server directly, with the same fence checks and outcome as through the
// cluster; under another epoch than its last answer's (the replay a new
// catalog needs first) it goes through the cluster.
func TestCompletionOnTheHostingNode(t *testing.T) {
	store, a, j, caller, n := fencedCatalog(t)
	n.setHosted(func() *CatalogServer {
		caller.mu.Lock()
		defer caller.mu.Unlock()
		return caller.srv
	})
	completes := func() int {
		caller.mu.Lock()
		defer caller.mu.Unlock()
		k := 0
		for _, m := range caller.log {
			if strings.HasSuffix(m, "/Complete") {
				k++
			}
		}
		return k
	}
	kg := backend.KeyGroupRangeForOperator(128, 1, 0)
	tasks := []backend.TaskID{a}
	for id := uint64(1); id <= 2; id++ {
		if err := n.BeginCheckpoint("j", id); err != nil {
			t.Fatal(err)
		}
		if err := n.AddFencedTaskHandle("j", id, upload(t, store, a, kg, id, fmt.Sprint("v", id)), 4); err != nil {
			t.Fatal(err)
		}
	}
	j.mu.Lock()
	j.tokens[a] = 5
	j.mu.Unlock()
	if _, err := n.CompleteFencedTasks(ctx, "j", 1, tasks, map[backend.TaskID]uint64{a: 4}); !errors.Is(err, catalog.ErrFenced) || !strings.Contains(err.Error(), "holds token 5") {
		t.Fatalf("completion under a stale token on the hosting node: %v", err)
	}
	m, err := n.CompleteFencedTasks(ctx, "j", 1, tasks, map[backend.TaskID]uint64{a: 5})
	if err != nil || len(m.Tasks) != 1 || m.CheckpointID != 1 {
		t.Fatalf("completion on the hosting node: %v %+v", err, m)
	}
	if got := completes(); got != 0 {
		t.Fatalf("%d completions went through the cluster from the hosting node", got)
	}
	// A new catalog (epoch 2) hosted here: the first completion goes
	// through the cluster, which replays this node's reports to it.
	caller.host(t, store, 2)
	if _, err := n.CompleteFencedTasks(ctx, "j", 2, tasks, map[backend.TaskID]uint64{a: 5}); err != nil {
		t.Fatalf("completion after the epoch changed: %v", err)
	}
	if got := completes(); got != 1 {
		t.Fatalf("the completion under a new epoch made %d calls through the cluster, want 1", got)
	}
}
