package changelog_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/lsm"
	"github.com/statedhq/stated/dstl/changelog"
)

// TestRemoteLSMBasesHeldWhileUsable: over lsm in remote mode, the inner
// instance holds a base only while a snapshot may still reference it: a
// newer confirmed base releases the older ones, a materialization replaced
// before any checkpoint took it is dropped, and so is the base of an
// aborted checkpoint that no other snapshot uses.
func TestRemoteLSMBasesHeldWhileUsable(t *testing.T) {
	e := newEnv(t)
	var inner *lsm.Backend
	b, err := changelog.Open(backend.Options{
		Task: propTask, KeyGroups: backend.KeyGroupRange{Start: 0, End: propMaxP - 1}, MaxParallelism: propMaxP,
		States: propStates, Store: e.store, Clock: e.clock.Now,
	}, changelog.Options{
		OpenInner: func(o backend.Options) (backend.Backend, error) {
			ib, err := lsmRemote(t, o)
			inner, _ = ib.(*lsm.Backend)
			return ib, err
		},
		Writer: e.w, Log: e.ls,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	write := func(tag string) {
		t.Helper()
		for i := range 50 {
			if err := b.Put("v", backend.Key{KeyGroup: i % propMaxP, Key: []byte(fmt.Sprint("k", i))}, []byte(tag)); err != nil {
				t.Fatal(err)
			}
		}
	}
	held := func(want ...uint64) {
		t.Helper()
		// Releases run in the background.
		for deadline := time.Now().Add(5 * time.Second); !slices.Equal(inner.HeldBases(), want); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("held bases %v, want %v", inner.HeldBases(), want)
			}
		}
	}
	write("a")
	e.checkpoint(b) // 1: materializes base 1 itself
	b.NotifyCheckpointComplete(1)
	held(1)
	write("b")
	if err := b.Materialize(e.ctx); err != nil {
		t.Fatal(err)
	}
	held(1, 2)
	write("c")
	if err := b.Materialize(e.ctx); err != nil {
		t.Fatal(err)
	}
	held(1, 3)      // 2 was replaced before any checkpoint took it
	e.checkpoint(b) // 2 takes base 3
	b.NotifyCheckpointComplete(2)
	held(3)
	write("d")
	if err := b.Materialize(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.checkpoint(b) // 3 takes base 4, then is aborted
	held(3, 4)
	b.NotifyCheckpointAborted(3)
	held(3)
}
