package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/s3store"
	"github.com/statedhq/stated/tiered/s3store/s3test"
)

const crashJob = "crashjob"

var crashStates = []backend.StateDescriptor{
	{Name: "v", Kind: backend.KindValue},
	{Name: "vt", Kind: backend.KindValue, TTL: time.Hour, TTLUpdate: backend.TTLOnReadAndWrite},
	{Name: "l", Kind: backend.KindList},
	{Name: "m", Kind: backend.KindMap},
	{Name: "sum", Kind: backend.KindAggregate, Aggregate: backend.AggSum, Number: backend.NumInt64},
	{Name: "t", Kind: backend.KindTimers},
}

type timerKey struct {
	ts  int64
	kg  int
	key string
}

// model is what a task's state must be.
type model struct {
	vals, ttlv map[string]string
	lists      map[string][]string
	maps       map[string]map[string]string
	sums       map[string]int64
	timers     map[timerKey]bool
}

func newModel() *model {
	return &model{vals: map[string]string{}, ttlv: map[string]string{}, lists: map[string][]string{},
		maps: map[string]map[string]string{}, sums: map[string]int64{}, timers: map[timerKey]bool{}}
}

func (m *model) clone() *model {
	c := newModel()
	for k, v := range m.vals {
		c.vals[k] = v
	}
	for k, v := range m.ttlv {
		c.ttlv[k] = v
	}
	for k, v := range m.lists {
		c.lists[k] = slices.Clone(v)
	}
	for k, v := range m.maps {
		mm := map[string]string{}
		for uk, uv := range v {
			mm[uk] = uv
		}
		c.maps[k] = mm
	}
	for k, v := range m.sums {
		c.sums[k] = v
	}
	for k := range m.timers {
		c.timers[k] = true
	}
	return c
}

func (m *model) sortedTimers(upTo int64) []timerKey {
	var out []timerKey
	for k := range m.timers {
		if k.ts <= upTo {
			out = append(out, k)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.ts != b.ts {
			return a.ts < b.ts
		}
		if a.kg != b.kg {
			return a.kg < b.kg
		}
		return a.key < b.key
	})
	return out
}

// crashTask is one of the concurrent clients.
type crashTask struct {
	id   backend.TaskID
	kind backend.Kind
	keys []string
	kg   map[string]int
	rng  *rand.Rand
	m    *model
	// c is the task's own client: every task has its own connection, as
	// task processes of a host have.
	c     *client.Client
	in    *client.Instance
	mu    sync.Mutex
	snaps map[uint64]*model // model at each Snapshot
	// chans is the channel state written before each unaligned snapshot.
	chans map[uint64][]client.ChannelState
}

// snapshot takes checkpoint id; odd ids are unaligned: the task first
// writes in-flight buffers (a keyed input channel whose records carry its
// own keys, and a forward output subpartition), which a restore from id
// must give back.
func (t *crashTask) snapshot(ctx context.Context, id uint64) error {
	t.mu.Lock()
	t.snaps[id] = t.m.clone()
	t.mu.Unlock()
	o := client.SnapshotOptions{}
	if id%2 == 1 {
		in := client.ChannelState{Channel: backend.ChannelID{Direction: backend.ChannelInput, Gate: 0, Index: int32(id % 3)}, Kind: backend.ChannelKeyed}
		for b := range 1 + int(id%4) {
			var buf []client.ChannelRecord
			for r := range 3 {
				k := t.keys[(int(id)+b*3+r)%len(t.keys)]
				buf = append(buf, client.ChannelRecord{KeyGroup: int32(t.kg[k]), Data: fmt.Appendf(nil, "%s@%d/%d/%d", k, id, b, r)})
			}
			in.Buffers = append(in.Buffers, buf)
		}
		out := client.ChannelState{Channel: backend.ChannelID{Direction: backend.ChannelOutput}, Kind: backend.ChannelForward,
			Buffers: [][]client.ChannelRecord{{{Data: fmt.Appendf(nil, "%s forward %d", t.id, id)}}}}
		chans := []client.ChannelState{in, out}
		t.mu.Lock()
		t.chans[id] = chans
		t.mu.Unlock()
		if err := t.in.WriteChannelState(ctx, id, chans); err != nil {
			return fmt.Errorf("%s: channel state %d: %w", t.id, id, err)
		}
		o.Stats = &client.CheckpointStats{Unaligned: true}
	}
	if _, err := t.in.SnapshotWith(ctx, id, o); err != nil {
		return fmt.Errorf("%s: snapshot %d: %w", t.id, id, err)
	}
	return nil
}

// verifyChannels compares the restored channel state with what the task
// wrote for checkpoint id (none for an aligned one).
func (t *crashTask) verifyChannels(ctx context.Context, id uint64) error {
	got, err := t.in.ReadChannelState(ctx)
	if err != nil {
		return fmt.Errorf("%s: read channel state: %w", t.id, err)
	}
	t.mu.Lock()
	want := t.chans[id]
	t.mu.Unlock()
	if len(got) == 0 && len(want) == 0 {
		return nil
	}
	if !reflect.DeepEqual(got, want) {
		return fmt.Errorf("%s: channel state restored from %d:\n%v\nwant\n%v", t.id, id, got, want)
	}
	return nil
}

// checks collects read checks of one burst; they run after it is issued.
type checks []func(ctx context.Context) error

func (t *crashTask) burst(n int) checks {
	in, m, r := t.in, t.m, t.rng
	var cs checks
	val := func() string { return strconv.Itoa(r.IntN(1 << 20)) }
	for range n {
		key := t.keys[r.IntN(len(t.keys))]
		k := []byte(key)
		switch x := r.IntN(100); {
		case x < 18:
			v := val()
			in.Put("v", k, nil, []byte(v))
			m.vals[key] = v
		case x < 22:
			in.Delete("v", k, nil)
			delete(m.vals, key)
		case x < 30:
			want, ok := m.vals[key]
			f := in.Get("v", k, nil)
			cs = append(cs, func(ctx context.Context) error {
				got, err := f.Wait(ctx)
				if err != nil {
					return err
				}
				if got.Found != ok || string(got.Data) != want {
					return fmt.Errorf("%s: get v %s = %q/%v, model %q/%v", t.id, key, got.Data, got.Found, want, ok)
				}
				return nil
			})
		case x < 35:
			v := val()
			in.Put("vt", k, nil, []byte(v))
			m.ttlv[key] = v
		case x < 45:
			a, b := val(), val()
			in.ListAppend("l", k, nil, []byte(a), []byte(b))
			m.lists[key] = append(m.lists[key], a, b)
		case x < 48:
			want := slices.Clone(m.lists[key])
			f := in.ListGet("l", k, nil)
			cs = append(cs, func(ctx context.Context) error {
				got, err := f.Wait(ctx)
				if err != nil {
					return err
				}
				return sameList(t.id, key, got, want)
			})
		case x < 49:
			in.Delete("l", k, nil)
			delete(m.lists, key)
		case x < 59:
			uk, v := "u"+strconv.Itoa(r.IntN(8)), val()
			in.MapPut("m", k, nil, []byte(uk), []byte(v))
			if m.maps[key] == nil {
				m.maps[key] = map[string]string{}
			}
			m.maps[key][uk] = v
		case x < 63:
			uk := "u" + strconv.Itoa(r.IntN(8))
			in.MapRemove("m", k, nil, []byte(uk))
			delete(m.maps[key], uk)
		case x < 68:
			uk := "u" + strconv.Itoa(r.IntN(8))
			want, ok := m.maps[key][uk]
			f := in.MapGet("m", k, nil, []byte(uk))
			cs = append(cs, func(ctx context.Context) error {
				got, err := f.Wait(ctx)
				if err != nil {
					return err
				}
				if got.Found != ok || string(got.Data) != want {
					return fmt.Errorf("%s: map get %s/%s = %q/%v, model %q/%v", t.id, key, uk, got.Data, got.Found, want, ok)
				}
				return nil
			})
		case x < 70:
			want := copyMap(m.maps[key])
			f := in.MapIterate("m", k, nil, nil, 0)
			cs = append(cs, func(ctx context.Context) error {
				p, err := f.Wait(ctx)
				if err != nil {
					return err
				}
				return sameMap(t.id, key, p.Entries, want)
			})
		case x < 80:
			d := int64(r.IntN(100) - 30)
			in.AggregateAdd("sum", k, nil, backend.Int64(d))
			m.sums[key] += d
		case x < 84:
			want, ok := m.sums[key]
			f := in.AggregateGet("sum", k, nil)
			cs = append(cs, func(ctx context.Context) error {
				got, err := f.Wait(ctx)
				if err != nil {
					return err
				}
				if got.Found != ok || got.Value.Int != want {
					return fmt.Errorf("%s: sum %s = %d/%v, model %d/%v", t.id, key, got.Value.Int, got.Found, want, ok)
				}
				return nil
			})
		case x < 93:
			ts := int64(r.IntN(1000))
			in.RegisterTimer("t", k, nil, ts)
			m.timers[timerKey{ts, t.kg[key], key}] = true
		case x < 97:
			// Delete one that exists if there is one.
			var tk timerKey
			for tk = range m.timers {
				break
			}
			in.DeleteTimer("t", []byte(tk.key), nil, tk.ts)
			delete(m.timers, tk)
		default:
			wm := int64(r.IntN(300))
			want := m.sortedTimers(wm)
			for _, tk := range want {
				delete(m.timers, tk)
			}
			f := in.PollTimers("t", wm, 0)
			cs = append(cs, func(ctx context.Context) error {
				got, err := f.Wait(ctx)
				if err != nil {
					return err
				}
				return sameTimers(t.id, got, want)
			})
		}
	}
	return cs
}

func copyMap(m map[string]string) map[string]string {
	c := map[string]string{}
	for k, v := range m {
		c[k] = v
	}
	return c
}

func sameList(task backend.TaskID, key string, got [][]byte, want []string) error {
	if len(got) != len(want) {
		return fmt.Errorf("%s: list %s has %d elements, model %d", task, key, len(got), len(want))
	}
	for i := range got {
		if string(got[i]) != want[i] {
			return fmt.Errorf("%s: list %s element %d = %q, model %q", task, key, i, got[i], want[i])
		}
	}
	return nil
}

func sameMap(task backend.TaskID, key string, got []backend.MapEntry, want map[string]string) error {
	if len(got) != len(want) {
		return fmt.Errorf("%s: map %s has %d entries, model %d", task, key, len(got), len(want))
	}
	for i, e := range got {
		if i > 0 && bytes.Compare(got[i-1].UserKey, e.UserKey) >= 0 {
			return fmt.Errorf("%s: map %s not in user-key order", task, key)
		}
		if w, ok := want[string(e.UserKey)]; !ok || w != string(e.Value) {
			return fmt.Errorf("%s: map %s entry %s = %q, model %q/%v", task, key, e.UserKey, e.Value, w, ok)
		}
	}
	return nil
}

func sameTimers(task backend.TaskID, got []backend.Timer, want []timerKey) error {
	if len(got) != len(want) {
		return fmt.Errorf("%s: polled %d timers, model %d", task, len(got), len(want))
	}
	for i, g := range got {
		w := want[i]
		if g.Timestamp != w.ts || g.KeyGroup != w.kg || string(g.Key) != w.key {
			return fmt.Errorf("%s: timer %d = (%d,%d,%s), model (%d,%d,%s)", task, i, g.Timestamp, g.KeyGroup, g.Key, w.ts, w.kg, w.key)
		}
	}
	return nil
}

// verify reads every state of every key and compares it with the model;
// it polls (and so removes) every timer.
func (t *crashTask) verify(ctx context.Context) error {
	in, m := t.in, t.m
	var cs checks
	for _, key := range t.keys {
		k := []byte(key)
		for _, st := range []struct {
			name string
			vals map[string]string
		}{{"v", m.vals}, {"vt", m.ttlv}} {
			want, ok := st.vals[key]
			f := in.Get(st.name, k, nil)
			name := st.name
			cs = append(cs, func(ctx context.Context) error {
				got, err := f.Wait(ctx)
				if err == nil && (got.Found != ok || string(got.Data) != want) {
					err = fmt.Errorf("%s: %s %s = %q/%v, model %q/%v", t.id, name, key, got.Data, got.Found, want, ok)
				}
				return err
			})
		}
		wantL := m.lists[key]
		fl := in.ListGet("l", k, nil)
		wantS, okS := m.sums[key]
		fs := in.AggregateGet("sum", k, nil)
		cs = append(cs, func(ctx context.Context) error {
			got, err := fl.Wait(ctx)
			if err != nil {
				return err
			}
			if err := sameList(t.id, key, got, wantL); err != nil {
				return err
			}
			a, err := fs.Wait(ctx)
			if err == nil && (a.Found != okS || a.Value.Int != wantS) {
				err = fmt.Errorf("%s: sum %s = %d/%v, model %d/%v", t.id, key, a.Value.Int, a.Found, wantS, okS)
			}
			return err
		})
	}
	for _, c := range cs {
		if err := c(ctx); err != nil {
			return err
		}
	}
	for _, key := range t.keys {
		entries, err := in.MapAll(ctx, "m", []byte(key), nil)
		if err != nil {
			return err
		}
		if err := sameMap(t.id, key, entries, m.maps[key]); err != nil {
			return err
		}
	}
	want := m.sortedTimers(math.MaxInt64)
	got, err := in.PollTimers("t", math.MaxInt64, 0).Wait(ctx)
	if err != nil {
		return err
	}
	m.timers = map[timerKey]bool{}
	return sameTimers(t.id, got, want)
}

// TestCrashRestartEndToEnd drives 8 concurrent clients, each with its own
// connection (file and lsm, every state kind) against the real daemon, completes checkpoints, kills the
// daemon with SIGKILL at a random moment, restarts it, restores every task
// from the last completed checkpoint and compares every state with the
// model; several times. A heap checkpoint must refuse to restore after a
// restart.
func TestCrashRestartEndToEnd(t *testing.T) {
	runCrashRestart(t, false)
}

// TestCrashRestartChangelog is the same with every instance in changelog
// mode (--changelog), materializing often so that kills land in
// materializations and log truncations too, and with heap tasks among
// them: in changelog mode a heap instance's checkpoints live in the
// checkpoint store and survive the kill.
func TestCrashRestartChangelog(t *testing.T) {
	runCrashRestart(t, true, "--changelog", "--materialize-interval", "150ms")
}

// TestCrashRestartLSMRemote is TestCrashRestartEndToEnd with every lsm
// instance in remote mode (--lsm-remote): its checkpoints hand SSTs over,
// restores after each kill reference them in place, and what the killed
// daemon's instances held is the sweep's.
func TestCrashRestartLSMRemote(t *testing.T) {
	runCrashRestart(t, false, "--lsm-remote")
}

// TestCrashRestartLSMRemoteS3 is TestCrashRestartLSMRemote with the
// checkpoint store (and so every SST) on the S3 server the tests start
// (versitygw in CI, else an in-process gofakes3).
func TestCrashRestartLSMRemoteS3(t *testing.T) {
	so, _ := s3test.Options(t)
	t.Setenv("STATED_S3_SECRET_ACCESS_KEY", so.SecretAccessKey)
	prefix := strings.Trim(so.Prefix+"/ckpt", "/")
	runCrashRestart(t, false, "--lsm-remote", "--checkpoint-store", "s3://"+so.Bucket+"/"+prefix,
		"--s3-endpoint", so.Endpoint, "--s3-region", so.Region, "--s3-path-style", "--s3-access-key-id", so.AccessKeyID)
	// The mode took effect: the lsm tasks' SSTs are in the bucket.
	so.Prefix = prefix
	st, err := s3store.Open(context.Background(), so)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	n := 0
	err = tiered.Walk(context.Background(), st, crashJob+"/shared/lsm/", func(o tiered.ObjectInfo) error {
		if strings.HasSuffix(o.Name, ".sst") {
			n++
		}
		return nil
	})
	if err != nil || n == 0 {
		t.Fatalf("--lsm-remote over S3: %d SSTs under %s/shared/lsm/ in the bucket (%v)", n, crashJob, err)
	}
}

func runCrashRestart(t *testing.T, changelog bool, args ...string) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("STATED_E2E_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (set STATED_E2E_SEED to repeat)", seed)
	rng := rand.New(rand.NewPCG(seed, 0xe2e))
	rounds := 5
	if testing.Short() {
		rounds = 2
	}
	const parallelism = 8
	dir := dataDir(t)
	probe := mustProbe(t)
	tasks := make([]*crashTask, parallelism)
	for i := range tasks {
		kinds := []backend.Kind{backend.KindFile, backend.KindLSM}
		if changelog {
			kinds = append(kinds, backend.KindHeap)
		}
		kind := kinds[i%len(kinds)]
		tk := &crashTask{id: backend.TaskID{Job: crashJob, Operator: "op", Subtask: i}, kind: kind,
			rng: rand.New(rand.NewPCG(seed, uint64(i))), m: newModel(), snaps: map[uint64]*model{}, kg: map[string]int{},
			chans: map[uint64][]client.ChannelState{}}
		r := backend.KeyGroupRangeForOperator(backend.DefaultMaxParallelism, parallelism, i)
		for j := 0; len(tk.keys) < 24; j++ {
			k := fmt.Sprintf("key-%d-%d", i, j)
			if kg := probe(k); r.Contains(kg) {
				tk.keys = append(tk.keys, k)
				tk.kg[k] = kg
			}
		}
		tasks[i] = tk
	}
	var confirmed uint64 // last checkpoint whose completion the client saw
	nextID := uint64(1)
	heapID := uint64(1)
	for round := 0; round <= rounds; round++ {
		ctx := ctxT(t, 60*time.Second)
		p := start(t, dir, args...)
		c, err := client.Dial(p.sock, client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		last := lastCompleted(ctx, t, c)
		if last < confirmed {
			t.Fatalf("round %d: the last completed checkpoint is %d, but %d was confirmed before the crash", round, last, confirmed)
		}
		t.Logf("round %d: restoring from checkpoint %d (confirmed %d)", round, last, confirmed)
		for _, tk := range tasks {
			spec := client.OpenSpec{Task: tk.id, Parallelism: parallelism, Backend: tk.kind, States: crashStates}
			tk.m = newModel()
			if last > 0 {
				// Alternate the restore modes: claim keeps the incremental
				// history (lsm reuses the restored SSTs), no-claim makes the
				// next checkpoint a full one.
				spec.Restore = &client.Restore{Latest: true, Claim: round%2 == 1, NoClaim: round%2 == 0}
				tk.mu.Lock()
				snap := tk.snaps[last]
				tk.mu.Unlock()
				if snap == nil {
					t.Fatalf("%s: checkpoint %d completed but the task never snapshotted it", tk.id, last)
				}
				tk.m = snap.clone()
			}
			if tk.c, err = client.Dial(p.sock, client.Options{}); err != nil {
				t.Fatal(err)
			}
			tk.in, err = tk.c.Open(ctx, spec)
			if err != nil {
				t.Fatalf("round %d: open %s: %v", round, tk.id, err)
			}
			if tk.in.Changelog() != changelog {
				t.Fatalf("%s: changelog mode %v, want %v", tk.id, tk.in.Changelog(), changelog)
			}
			if tk.in.RestoredCheckpoint() != last {
				t.Fatalf("%s restored checkpoint %d, want %d", tk.id, tk.in.RestoredCheckpoint(), last)
			}
			if err := tk.verify(ctx); err != nil {
				t.Fatalf("round %d, after restore from %d: %v", round, last, err)
			}
			if err := tk.verifyChannels(ctx, last); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		checkHeap(ctx, t, c, round, &heapID)
		if round == rounds {
			// The last life ends gracefully: SIGTERM, exit 0, and the state
			// survives that too.
			for _, tk := range tasks {
				tk.burst(200)
			}
			runCheckpoint(ctx, t, c, tasks, nextID)
			confirmed, nextID = nextID, nextID+1
			if err := p.term(30 * time.Second); err != nil {
				t.Fatalf("SIGTERM: %v", err)
			}
			closeTasks(tasks)
			c.Close()
			p2 := start(t, dir, args...)
			for _, tk := range tasks {
				tk.m = tk.snaps[confirmed].clone()
				tk.c = p2.dial(client.Options{})
				tk.in, err = tk.c.Open(ctx, client.OpenSpec{Task: tk.id, Parallelism: parallelism, Backend: tk.kind,
					States: crashStates, Restore: &client.Restore{Latest: true}})
				if err != nil {
					t.Fatal(err)
				}
				if err := tk.verify(ctx); err != nil {
					t.Fatalf("after SIGTERM and restart: %v", err)
				}
				if err := tk.verifyChannels(ctx, confirmed); err != nil {
					t.Fatalf("after SIGTERM and restart: %v", err)
				}
			}
			closeTasks(tasks)
			break
		}
		// Kill at a random moment after a random number (1..3) of
		// checkpoints completed in this life, so that every life restores
		// from something new, and the kill lands anywhere: in an upload, a
		// completion, between operations.
		minDone := 1 + rng.IntN(3)
		killAfter := time.Duration(rng.IntN(400)) * time.Millisecond
		confirmed, nextID = runUntilKill(ctx, t, p, c, tasks, nextID, confirmed, minDone, killAfter)
		closeTasks(tasks)
		c.Close()
	}
	if slices.Contains(args, "--lsm-remote") && !slices.Contains(args, "--checkpoint-store") {
		// The mode took effect: the lsm tasks' SSTs are in the checkpoint
		// store's lsm directory.
		n := 0
		_ = filepath.WalkDir(filepath.Join(dir, "checkpoints", crashJob, "shared", "lsm"), func(_ string, d fs.DirEntry, err error) error {
			if err == nil && strings.HasSuffix(d.Name(), ".sst") {
				n++
			}
			return nil
		})
		if n == 0 {
			t.Fatalf("--lsm-remote: no SST under %s", filepath.Join(dir, "checkpoints", crashJob, "shared", "lsm"))
		}
	}
}

// mustProbe returns the client's key-group function.
func mustProbe(t *testing.T) func(string) int {
	return func(k string) int {
		return backend.KeyGroupForHash(client.FNV1a32([]byte(k)), backend.DefaultMaxParallelism)
	}
}

func lastCompleted(ctx context.Context, t *testing.T, c *client.Client) uint64 {
	infos, err := c.ListCheckpoints(ctx, crashJob)
	if err != nil {
		t.Fatal(err)
	}
	var last uint64
	for _, in := range infos {
		if in.GetStatus() == "completed" && in.GetRetained() && in.GetCheckpointId() > last {
			last = in.GetCheckpointId()
		}
	}
	return last
}

func closeTasks(tasks []*crashTask) {
	for _, tk := range tasks {
		if tk.in != nil {
			tk.in.Abandon()
			tk.in = nil
		}
		if tk.c != nil {
			tk.c.Close()
			tk.c = nil
		}
	}
}

// runCheckpoint snapshots every task with id and completes it.
func runCheckpoint(ctx context.Context, t *testing.T, c *client.Client, tasks []*crashTask, id uint64) {
	for _, tk := range tasks {
		if err := tk.snapshot(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.CompleteCheckpoint(ctx, crashJob, id); err != nil {
		t.Fatal(err)
	}
}

// checkHeap: a heap checkpoint of the previous process must refuse to
// restore; one of this process restores.
func checkHeap(ctx context.Context, t *testing.T, c *client.Client, round int, heapID *uint64) {
	tk := backend.TaskID{Job: "heapjob", Operator: "op", Subtask: 0}
	states := []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}}
	// Outside changelog mode, whatever the daemon's default: heap
	// snapshots then live in daemon memory.
	spec := client.OpenSpec{Task: tk, Parallelism: 1, Backend: backend.KindHeap, States: states, Restore: &client.Restore{Latest: true},
		Changelog: client.ChangelogOff}
	if round > 0 {
		_, err := c.Open(ctx, spec)
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "heap") || !strings.Contains(err.Error(), "daemon memory") {
			t.Fatalf("restore of a heap checkpoint after a restart: %v, want FailedPrecondition explaining that heap snapshots live in daemon memory", err)
		}
	}
	spec.Restore = nil
	in, err := c.Open(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.Put("v", []byte("h"), nil, []byte(fmt.Sprint(round))).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Snapshot(ctx, *heapID, true); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CompleteCheckpoint(ctx, "heapjob", *heapID); err != nil {
		t.Fatal(err)
	}
	*heapID++
	if err := in.Close(ctx); err != nil {
		t.Fatal(err)
	}
	spec.Restore = &client.Restore{Latest: true}
	in, err = c.Open(ctx, spec)
	if err != nil {
		t.Fatalf("heap restore in the same process: %v", err)
	}
	v, err := in.Get("v", []byte("h"), nil).Wait(ctx)
	if err != nil || string(v.Data) != fmt.Sprint(round) {
		t.Fatalf("heap restore: %q %v", v.Data, err)
	}
	if err := in.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// runUntilKill runs the tasks and a checkpoint coordinator until the daemon
// is killed, killAfter after minDone checkpoints completed. It returns the
// last confirmed checkpoint and the next unused id.
func runUntilKill(ctx context.Context, t *testing.T, p *proc, c *client.Client, tasks []*crashTask,
	nextID, confirmed uint64, minDone int, killAfter time.Duration) (uint64, uint64) {
	var killed atomic.Bool
	stop := make(chan struct{})
	var failMu sync.Mutex
	fail := func(err error) {
		if killed.Load() {
			return // the kill explains it
		}
		failMu.Lock()
		defer failMu.Unlock()
		t.Error(err)
	}
	reqs := make([]chan uint64, len(tasks))
	acks := make(chan uint64, len(tasks))
	var wg sync.WaitGroup
	for i, tk := range tasks {
		reqs[i] = make(chan uint64, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case id := <-reqs[i]:
					if err := tk.snapshot(ctx, id); err != nil {
						fail(err)
						return
					}
					select {
					case acks <- id:
					case <-stop:
						return
					}
				default:
				}
				for _, check := range tk.burst(50 + tk.rng.IntN(150)) {
					if err := check(ctx); err != nil {
						fail(err)
						return
					}
				}
			}
		}()
	}
	var conf, next atomic.Uint64
	conf.Store(confirmed)
	next.Store(nextID)
	// The coordinator's own generator: the tasks' ones belong to their
	// goroutines.
	crng := rand.New(rand.NewPCG(nextID, 0xc00d))
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(30+crng.IntN(120)) * time.Millisecond):
			}
			id := next.Add(1) - 1
			for _, r := range reqs {
				select {
				case r <- id:
				case <-stop:
					return
				}
			}
			for range tasks {
				select {
				case <-acks:
				case <-stop:
					return
				}
			}
			if _, err := c.CompleteCheckpoint(ctx, crashJob, id); err != nil {
				fail(fmt.Errorf("complete %d: %w", id, err))
				return
			}
			conf.Store(id)
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for conf.Load() < confirmed+uint64(minDone) && time.Now().Before(deadline) && !t.Failed() {
		time.Sleep(5 * time.Millisecond)
	}
	if conf.Load() < confirmed+uint64(minDone) {
		t.Errorf("only %d checkpoints completed in 30s", conf.Load()-confirmed)
	}
	time.Sleep(killAfter)
	killed.Store(true)
	p.kill()
	close(stop)
	wg.Wait()
	t.Logf("killed %s after %d checkpoints: checkpoints %d..%d begun, %d confirmed", killAfter, minDone, nextID, next.Load()-1, conf.Load())
	return conf.Load(), next.Load()
}
