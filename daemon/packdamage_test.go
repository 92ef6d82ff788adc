package daemon_test

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/host"
	"github.com/statedhq/stated/tiered/memstore"
)

// TestPackedDamageNamesThePack: a packed file is not an object of its
// own, so verify and a restore that find it damaged also name the pack
// that holds its bytes, the object an operator can find in the store.
func TestPackedDamageNamesThePack(t *testing.T) {
	const tasks, keys = 2, 50
	ctx := context.Background()
	store := memstore.New()
	e := newEnvOn(t, store, func(o *host.Options) { o.Retain = 1 })
	ins := openFileTasks(t, e, "j", tasks, keys, "v", nil)
	snapshotAll(t, e, "j", 1, ins)
	var pack string
	for _, n := range storeNames(t, store, "j/chk-1/") {
		if strings.Contains(n, "/packed-") {
			pack = n
		}
	}
	if pack == "" {
		t.Fatal("checkpoint 1 has no pack")
	}
	rc, err := store.Get(ctx, pack)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/4] ^= 0x10 // inside the first task's file
	if err := store.Put(ctx, pack, bytes.NewReader(b), int64(len(b))); err != nil {
		t.Fatal(err)
	}

	rep, err := catalog.Verify(ctx, store, "j/chk-1", 2)
	if err != nil || len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0].String(), "of pack "+pack) {
		t.Fatalf("verify of a damaged pack: %v %+v: want one problem naming %s", err, rep, pack)
	}

	e2 := newEnvOn(t, store, nil)
	var named bool
	for sub := range tasks {
		_, err := e2.d.Open(ctx, daemon.OpenParams{Task: backend.TaskID{Job: "j", Operator: "op", Subtask: sub},
			KeyGroups: backend.KeyGroupRangeForOperator(128, tasks, sub), MaxParallelism: 128, Kind: backend.KindFile, States: valueState,
			Restore: &daemon.RestoreSpec{Latest: true, NoClaim: true}})
		if err != nil {
			if !strings.Contains(err.Error(), pack) {
				t.Errorf("restore of subtask %d: %v: the error does not name the pack %s", sub, err, pack)
			}
			named = true
		}
	}
	if !named {
		t.Fatal("no restore noticed the damaged pack")
	}
}
