package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/host"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// errKilled is every answer of a killStore once it died.
var errKilled = errors.New("killed: the process is gone")

// killStore is the daemon's view of its store up to a crash: after left
// writes (puts and deletes), every call fails, as nothing a killed
// process would still have sent reaches the store. The write that
// kills is refused too, so a crash may fall in the middle of an upload
// (a segment, a snapshot file, a manifest) or of a deletion batch.
type killStore struct {
	tiered.Store
	left atomic.Int64
}

func (k *killStore) alive(write bool) error {
	if write {
		if k.left.Add(-1) < 0 {
			return errKilled
		}
		return nil
	}
	if k.left.Load() < 0 {
		return errKilled
	}
	return nil
}

func (k *killStore) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	if err := k.alive(true); err != nil {
		return err
	}
	return k.Store.Put(ctx, name, r, size)
}

func (k *killStore) PutIfAbsent(ctx context.Context, name string, r io.Reader, size int64) error {
	if err := k.alive(true); err != nil {
		return err
	}
	return k.Store.PutIfAbsent(ctx, name, r, size)
}

func (k *killStore) Delete(ctx context.Context, name string) error {
	if err := k.alive(true); err != nil {
		return err
	}
	return k.Store.Delete(ctx, name)
}

func (k *killStore) DeleteBatch(ctx context.Context, names []string) error {
	if err := k.alive(true); err != nil {
		return err
	}
	return k.Store.DeleteBatch(ctx, names)
}

func (k *killStore) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	if err := k.alive(false); err != nil {
		return nil, err
	}
	return k.Store.Get(ctx, name)
}

func (k *killStore) GetRange(ctx context.Context, name string, off, n int64) (io.ReadCloser, error) {
	if err := k.alive(false); err != nil {
		return nil, err
	}
	return k.Store.GetRange(ctx, name, off, n)
}

func (k *killStore) List(ctx context.Context, prefix, startAfter string, limit int) (tiered.ListPage, error) {
	if err := k.alive(false); err != nil {
		return tiered.ListPage{}, err
	}
	return k.Store.List(ctx, prefix, startAfter, limit)
}

func (k *killStore) Stat(ctx context.Context, name string) (tiered.ObjectInfo, error) {
	if err := k.alive(false); err != nil {
		return tiered.ObjectInfo{}, err
	}
	return k.Store.Stat(ctx, name)
}

// crashTask is one subtask of the crash test and the model of its state.
type crashTask struct {
	job   string
	sub   int
	kgs   backend.KeyGroupRange
	in    *daemon.Instance
	model map[string]string
}

// crashJob is a job of the crash test: its subtasks, and each task's
// model at every checkpoint whose completion was acknowledged (done) or
// whose completion was under way at the crash (maybe: it may or may not
// have become durable).
type crashJob struct {
	name  string
	kind  backend.Kind
	tasks []*crashTask
	next  uint64
	done  map[uint64][]map[string]string
	maybe uint64
}

// TestChangelogBudgetCrashProperty: with the object-store flush delay (the
// changes of every instance of the daemon gather in shared segments, cut
// at a barrier or after a second), two jobs of several changelog
// instances each write, checkpoint (all subtasks, then complete or
// abort) and materialize, until the daemon is killed after a random
// number of store writes: mid-segment, mid-snapshot, mid-manifest or
// mid-deletion. A new daemon on the same store then restores every
// subtask from its job's latest checkpoint, which must be the last one
// acknowledged or the one completing at the crash, with state equal to
// the model at it (no key lost, changed or come back), and every
// segment a retained checkpoint references must still be in the store
// although several instances' checkpoints share it.
func TestChangelogBudgetCrashProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		base := memstore.New()
		ks := &killStore{Store: base}
		ks.left.Store(int64(rapid.IntRange(1, 400).Draw(rt, "writes before the kill")))
		opts := func(s tiered.Store) host.Options {
			return host.Options{DataDir: t.TempDir(), Store: s, NoSocket: true, Logger: quiet, Retain: 2,
				MaterializeInterval: time.Hour, ShutdownGrace: time.Second, CheckpointTimeout: 5 * time.Second,
				// Subtasks snapshot one after another here, some waiting
				// for their upload: their packed manifests wait this long
				// for the others.
				ChannelStateLinger: 20 * time.Millisecond}
		}
		n1, err := host.Open(ctx, opts(ks))
		if err != nil {
			rt.Fatal(err)
		}
		if d := n1.ChangelogWriter().Options().FlushDelay; d < time.Second {
			rt.Fatalf("flush delay %v: the test is about the object-store delay", d)
		}
		jobs := []*crashJob{
			{name: "a", kind: backend.KindFile},
			{name: "b", kind: rapid.SampledFrom([]backend.Kind{backend.KindHeap, backend.KindFile, backend.KindLSM}).Draw(rt, "kind of b")},
		}
		open := func(d *daemon.Daemon, j *crashJob, ct *crashTask, restore bool) error {
			var r *daemon.RestoreSpec
			if restore {
				r = &daemon.RestoreSpec{Latest: true}
			}
			in, err := d.Open(ctx, daemon.OpenParams{Task: backend.TaskID{Job: j.name, Operator: "op", Subtask: ct.sub},
				KeyGroups: ct.kgs, MaxParallelism: 128, Kind: j.kind, States: valueState,
				Changelog: daemon.ChangelogOn, Restore: r, Replace: true})
			ct.in = in
			return err
		}
		for i, j := range jobs {
			j.next, j.done = 1, map[uint64][]map[string]string{}
			par := 3 - i
			for sub := range par {
				ct := &crashTask{job: j.name, sub: sub, kgs: backend.KeyGroupRangeForOperator(128, par, sub), model: map[string]string{}}
				if err := open(n1.Daemon(), j, ct, false); err != nil {
					rt.Fatal(err)
				}
				j.tasks = append(j.tasks, ct)
			}
		}
		key := func(rt *rapid.T, ct *crashTask) (string, int) {
			kg := ct.kgs.Start + rapid.IntRange(0, 3).Draw(rt, "kg")%ct.kgs.Len()
			return fmt.Sprintf("%d/%d", kg, rapid.IntRange(0, 4).Draw(rt, "key")), kg
		}
		dead := false
		steps := rapid.IntRange(1, 40).Draw(rt, "steps")
		for step := 0; step < steps && !dead; step++ {
			j := rapid.SampledFrom(jobs).Draw(rt, "job")
			switch rapid.IntRange(0, 5).Draw(rt, "action") {
			case 0, 1, 2: // write
				ct := rapid.SampledFrom(j.tasks).Draw(rt, "task")
				for range rapid.IntRange(1, 10).Draw(rt, "n") {
					k, kg := key(rt, ct)
					bk := backend.Key{KeyGroup: kg, Key: []byte(k)}
					if rapid.IntRange(0, 4).Draw(rt, "delete") == 0 {
						if err := ct.in.Backend.Delete("v", bk); err != nil {
							dead = true
							break
						}
						delete(ct.model, k)
						continue
					}
					v := fmt.Sprint(rapid.Uint32().Draw(rt, "value"))
					if err := ct.in.Backend.Put("v", bk, []byte(v)); err != nil {
						dead = true
						break
					}
					ct.model[k] = v
				}
			case 3, 4: // checkpoint every subtask, then complete or abort
				id := j.next
				j.next++
				frozen := make([]map[string]string, len(j.tasks))
				for i, ct := range j.tasks {
					frozen[i] = maps.Clone(ct.model)
					if _, err := n1.Daemon().Snapshot(ctx, ct.in, id, rapid.Bool().Draw(rt, "wait")); err != nil {
						dead = true
						break
					}
				}
				if dead {
					// A checkpoint not every task snapshotted cannot complete.
					break
				}
				if rapid.IntRange(0, 4).Draw(rt, "abort") == 0 {
					if err := n1.Daemon().AbortCheckpoint(ctx, j.name, id, "aborted: test"); err != nil {
						dead = true
					}
					break
				}
				if _, err := n1.Daemon().CompleteCheckpoint(ctx, j.name, id, nil); err != nil {
					j.maybe = id
					j.done[id] = frozen
					dead = true
					break
				}
				j.done[id] = frozen
			case 5: // materialize one subtask
				ct := rapid.SampledFrom(j.tasks).Draw(rt, "task")
				m, ok := ct.in.Backend.(interface{ Materialize(context.Context) error })
				if !ok {
					rt.Fatalf("%T cannot materialize", ct.in.Backend)
				}
				if err := m.Materialize(ctx); err != nil {
					dead = true
				}
			}
		}
		// The kill: the store takes nothing more from the first daemon,
		// which is then left to shut down against a dead store.
		ks.left.Store(-1 << 40)
		_ = n1.Close()

		n2, err := host.Open(ctx, opts(base))
		if err != nil {
			rt.Fatalf("reopen after the kill: %v", err)
		}
		defer n2.Close()
		cat := n2.Catalog()
		present := map[string]bool{}
		if err := tiered.Walk(ctx, base, "_changelog/", func(o tiered.ObjectInfo) error { present[o.Name] = true; return nil }); err != nil {
			rt.Fatal(err)
		}
		for _, j := range jobs {
			retained := cat.Retained(j.name)
			for _, id := range retained {
				m, _ := cat.Checkpoint(j.name, id)
				for _, h := range m.Tasks {
					if h.Log == nil {
						continue
					}
					for _, s := range h.Log.Segments {
						if !present[s] {
							rt.Fatalf("segment %s of retained checkpoint %d of %s is missing", s, id, j.name)
						}
					}
				}
			}
			var last uint64
			for id := range j.done {
				if id != j.maybe {
					last = max(last, id)
				}
			}
			latest := uint64(0)
			if len(retained) > 0 {
				latest = slices.Max(retained)
			}
			if latest != last && (j.maybe == 0 || latest != j.maybe) {
				rt.Fatalf("job %s: latest checkpoint after the kill is %d, want %d (or %d, completing at the kill)", j.name, latest, last, j.maybe)
			}
			if latest == 0 {
				continue
			}
			for i, ct := range j.tasks {
				if err := open(n2.Daemon(), j, ct, true); err != nil {
					rt.Fatalf("restore %s/%d from checkpoint %d: %v", j.name, ct.sub, latest, err)
				}
				want := j.done[latest][i]
				for kg := ct.kgs.Start; kg <= ct.kgs.End && kg < ct.kgs.Start+4; kg++ {
					for x := range 5 {
						k := fmt.Sprintf("%d/%d", kg, x)
						got, ok, err := ct.in.Backend.Get("v", backend.Key{KeyGroup: kg, Key: []byte(k)})
						if err != nil {
							rt.Fatal(err)
						}
						w, wok := want[k]
						if ok != wok || string(got) != w {
							rt.Fatalf("%s/%d restored from checkpoint %d: key %s = %q (%v), want %q (%v)", j.name, ct.sub, latest, k, got, ok, w, wok)
						}
					}
				}
			}
		}
	})
}
