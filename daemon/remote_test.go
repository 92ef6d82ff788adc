package daemon_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/node"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// remoteEnv is a node with --lsm-remote on store, with a grace period short
// enough that a test's sweep runs past it.
func remoteEnv(t *testing.T, store *memstore.Store) *env {
	t.Helper()
	return newEnvOn(t, store, func(o *node.Options) {
		o.LSMRemote, o.LSMRemoteCacheBytes = true, 4<<20
		o.GCGrace, o.CheckpointTimeout = time.Second, 900*time.Millisecond
	})
}

func (e *env) openRestored(t *testing.T, job string, r *daemon.RestoreSpec) *daemon.Instance {
	t.Helper()
	in, err := e.d.Open(context.Background(), daemon.OpenParams{
		Task:      backend.TaskID{Job: job, Operator: "op", Subtask: 0},
		KeyGroups: backend.KeyGroupRangeForOperator(128, 2, 0), Kind: backend.KindLSM, States: valueState, Restore: r})
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// sweepPastGrace runs the catalog's sweep once the grace period is over.
func sweepPastGrace(t *testing.T, e *env) {
	t.Helper()
	time.Sleep(1100 * time.Millisecond)
	if _, err := e.cat.GC(context.Background(), false); err != nil {
		t.Fatal(err)
	}
}

// remoteSSTs lists the remote-mode SSTs of job in the store.
func remoteSSTs(t *testing.T, s tiered.Store, job string) []string {
	t.Helper()
	var out []string
	for _, n := range storeNames(t, s, job+"/shared/lsm/") {
		if strings.HasSuffix(n, ".sst") {
			out = append(out, n)
		}
	}
	return out
}

// TestLSMRemoteNativeSavepoint: a native savepoint of a remote-mode lsm
// instance copies its tables, so once the instance is closed, every
// checkpoint of the job deleted and the sweep run past the grace period
// (no SST of the job left in the store), the savepoint still restores
// every key, in the same store and moved to another one. The restore is
// no-claim: the first checkpoint after it references no savepoint file,
// and it restores too, also after the restored instance closed.
func TestLSMRemoteNativeSavepoint(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	e := remoteEnv(t, store)
	in := e.open(t, "j", 0, backend.KindLSM)
	putN(t, in, 0, 200, "a")
	e.checkpoint(t, "j", 1, in)
	putN(t, in, 100, 300, "b")
	e.checkpoint(t, "j", 2, in)
	m2, _ := e.cat.Checkpoint("j", 2)
	if h := m2.Tasks[0]; h.Version != backend.HandleVersionRemote || len(h.Files) == 0 {
		t.Fatalf("checkpoint 2 is no remote-mode hand-off: version %d, %d files", h.Version, len(h.Files))
	}
	sp, err := e.d.TriggerSavepoint(ctx, "j", true, 3)
	if err != nil {
		t.Fatal(err)
	}
	spm, ok := e.cat.Savepoint(strings.TrimPrefix(sp.Dir, "savepoints/"))
	if !ok || len(spm.Tasks) != 1 || len(spm.Tasks[0].Files) == 0 {
		t.Fatalf("savepoint %s: %+v", sp.Dir, spm)
	}
	for _, f := range spm.Tasks[0].Files {
		// Paths inside a savepoint are relative to its directory: a path
		// into the job's shared directory would be a reference, not a copy.
		if strings.HasPrefix(f.Path, "j/") || !f.SizeOnly {
			t.Fatalf("savepoint file %+v is not a copy of a remote table", f)
		}
	}
	if err := e.d.CloseInstance(in.ID, "j"); err != nil {
		t.Fatal(err)
	}
	for _, id := range e.cat.Retained("j") {
		if err := e.cat.DeleteCheckpoint(ctx, "j", id); err != nil {
			t.Fatal(err)
		}
	}
	sweepPastGrace(t, e)
	if left := remoteSSTs(t, store, "j"); len(left) != 0 {
		t.Fatalf("SSTs of the job survive its instance and checkpoints: %v", left)
	}
	if rep, err := e.cat.VerifySavepoint(ctx, strings.TrimPrefix(sp.Dir, "savepoints/")); err != nil || !rep.OK() {
		t.Fatalf("verify the savepoint alone: %+v %v", rep, err)
	}

	// A copy of the savepoint directory alone, in another store.
	moved := memstore.New()
	for _, n := range storeNames(t, store, sp.Dir+"/") {
		data, err := tiered.ReadAll(ctx, store, n, 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		if err := tiered.PutBytes(ctx, moved, n, data); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name  string
		store *memstore.Store
		e     *env
	}{{"same store", store, e}, {"moved", moved, remoteEnv(t, moved)}} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.e.openRestored(t, "j", &daemon.RestoreSpec{Savepoint: sp.Dir})
			checkN(t, r, 0, 100, "a")
			checkN(t, r, 100, 300, "b")
			putN(t, r, 300, 320, "c")
			tc.e.checkpoint(t, "j", 10, r)
			m, _ := tc.e.cat.Checkpoint("j", 10)
			for _, f := range m.Tasks[0].Files {
				if !strings.HasPrefix(f.Path, "j/shared/lsm/") {
					t.Fatalf("the first checkpoint after a savepoint restore references %s", f.Path)
				}
			}
			if err := tc.e.d.CloseInstance(r.ID, "j"); err != nil {
				t.Fatal(err)
			}
			sweepPastGrace(t, tc.e)
			r2 := tc.e.openRestored(t, "j", &daemon.RestoreSpec{CheckpointID: 10, Claim: true})
			checkN(t, r2, 0, 100, "a")
			checkN(t, r2, 100, 300, "b")
			checkN(t, r2, 300, 320, "c")
			if err := tc.e.d.CloseInstance(r2.ID, "j"); err != nil {
				t.Fatal(err)
			}
		})
	}
}
