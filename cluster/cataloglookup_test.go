package cluster

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/tiered/memstore"
)

// TestLookupsReturnTheirErrors: while no catalog answers, every lookup
// with a context is an error wrapping ErrCatalogUnavailable with gRPC's
// UNAVAILABLE code (naming the reason), not an empty answer.
func TestLookupsReturnTheirErrors(t *testing.T) {
	store := memstore.New()
	caller := &swapCaller{down: true}
	n := newClient(t, caller, store)
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrCatalogUnavailable) || status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "no leader") {
			t.Fatalf("%s without a catalog: %v (code %s)", what, err, status.Code(err))
		}
		// The daemon wraps it; the code survives.
		if status.Code(fmt.Errorf("daemon: %w", err)) != codes.Unavailable {
			t.Fatalf("%s: a wrapped error lost its code", what)
		}
	}
	_, err := n.ListContext(ctx, "j")
	check("list", err)
	_, err = n.RetainedContext(ctx, "j")
	check("retained", err)
	_, _, err = n.CheckpointContext(ctx, "j", 1)
	check("checkpoint", err)
	_, _, err = n.LatestContext(ctx, "j")
	check("latest", err)
	_, _, err = n.SavepointContext(ctx, "sp")
	check("savepoint", err)
	_, err = n.CompleteTasks(ctx, "j", 1, nil)
	check("complete", err)
}

// TestListKeepsComputedFields: what the catalog computes when it lists a
// job's history (retained, pinned, owner, damaged) crosses the wire; the
// record's own encoding leaves them out, and every retained checkpoint
// read as not retained through a cluster node.
func TestListKeepsComputedFields(t *testing.T) {
	store := memstore.New()
	caller := &swapCaller{}
	cat := caller.host(t, store, 1)
	n := newClient(t, caller, store)
	task := backend.TaskID{Job: "j", Operator: "op"}
	for id := uint64(1); id <= 3; id++ {
		if err := n.BeginCheckpoint("j", id); err != nil {
			t.Fatal(err)
		}
		if err := n.AddTaskHandle("j", id, upload(t, store, task, backend.KeyGroupRange{Start: 0, End: 127}, id, "body")); err != nil {
			t.Fatal(err)
		}
		if _, err := n.CompleteTasks(ctx, "j", id, nil); err != nil {
			t.Fatal(err)
		}
	}
	// A no-claim restore of checkpoint 2 pins it.
	if _, err := n.RestoreSource(ctx, catalog.RestoreRequest{Job: "j", CheckpointID: 2, Mode: catalog.ModeNoClaim}); err != nil {
		t.Fatal(err)
	}
	want := cat.List("j")
	got, err := n.ListContext(ctx, "j")
	if err != nil {
		t.Fatal(err)
	}
	retained, pinned := 0, 0
	for _, r := range want {
		if r.Retained {
			retained++
		}
		if r.Pinned {
			pinned++
		}
	}
	if retained == 0 || pinned == 0 {
		t.Fatalf("the catalog lists %d retained and %d pinned: the test needs both", retained, pinned)
	}
	same := func(a, b catalog.Record) bool {
		return a.ID == b.ID && a.Status == b.Status && a.Retained == b.Retained && a.Pinned == b.Pinned &&
			a.Owner == b.Owner && (a.Damaged == nil) == (b.Damaged == nil)
	}
	if !slices.EqualFunc(got, want, same) {
		t.Fatalf("through the client:\n%+v\nthe catalog:\n%+v", got, want)
	}
	// Damage, with its class.
	rs := fromWireRecords(toWireRecords([]catalog.Record{{ID: 4, Damaged: fmt.Errorf("%w: bad manifest", catalog.ErrCorrupt)}}))
	if !errors.Is(rs[0].Damaged, catalog.ErrCorrupt) || !strings.Contains(rs[0].Damaged.Error(), "bad manifest") {
		t.Fatalf("damage after the wire: %v", rs[0].Damaged)
	}
}
