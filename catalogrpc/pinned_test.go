package catalogrpc

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
)

// updatePinned regenerates testdata/pinned. Only for a new format: nodes
// of different builds call each other, so an old request or answer must
// still read; keep the old files and a test that reads them.
var updatePinned = flag.Bool("update", false, "regenerate the pinned format files in testdata/pinned")

// The pinned files (under testdata/pinned): request.json is
// pinnedRequest(), answer.json pinnedAnswer(), as json.Marshal writes
// them (what Client.once sends and Server.Handle answers).
const rpcPinnedDir = "testdata/pinned"

var pinnedT0 = time.Date(2026, 1, 2, 3, 4, 5, 600000000, time.UTC)

// pinnedRequest has every field of a request set.
func pinnedRequest() request {
	return request{Job: "j", ID: 7, Handle: []byte("handle\x00\xff"), Token: 9,
		Fences: []Fence{{Task: backend.TaskID{Job: "j", Operator: "op", Subtask: 1}, Token: 9}},
		Tasks:  []backend.TaskID{{Job: "j", Operator: "op", Subtask: 0}},
		Status: catalog.StatusAborted, Reason: "why", Savept: "sp-1", Names: []string{"j/log/a"},
		Restore: &restoreRequest{Job: "j2", FromJob: "j", CheckpointID: 6, SavepointID: "sp-1", Mode: catalog.ModeClaim, AllowFallback: true}}
}

// pinnedAnswer has every field of an answer set, and records with each
// of the flags the catalog computes (retained, owner, pinned, damaged).
func pinnedAnswer() answer {
	rec := catalog.Record{ID: 6, Status: catalog.StatusCompleted, Started: pinnedT0, Ended: pinnedT0.Add(time.Second),
		CheckpointedSize: 10, FullSize: 20, Tasks: 2, WithoutChannelState: true,
		Stats: catalog.CheckpointStats{InFlightBytes: 5}}
	failed := catalog.Record{ID: 7, Status: catalog.StatusAborted, Started: pinnedT0, Reason: "task failed"}
	return answer{Epoch: 3, Err: &wireError{Kind: "catalog-not-found", Msg: "no such"}, Found: true,
		Manifest: []byte("STMF manifest"), IDs: []uint64{5, 6},
		Records: []wireRecord{
			{Record: rec, Retained: true, Owner: "j2", Pinned: true, Damaged: &wireError{Kind: "corrupt", Msg: "bad crc"}},
			{Record: failed},
		},
		Restore:   &restoreAnswer{NoClaim: true, Skipped: []damage{{Job: "j", ID: 5, Manifest: "j/chk-5/_metadata", Err: "corrupt"}}, Savepoint: "sp-1"},
		Names:     []string{"j/log/a"},
		Problems:  []problem{{What: "delete", Object: "j/chk-1/x", Job: "j", Err: &wireError{Msg: "denied"}, Effect: "kept"}},
		Manifests: [][]byte{[]byte("STMF a"), []byte("STMF b")}}
}

// pinnedRoundTrip reads the pinned file name into a new *T, compares it
// with want field by field, and checks that this build writes want to the
// same bytes.
func pinnedRoundTrip[T any](t *testing.T, name string, want T) T {
	t.Helper()
	now, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(rpcPinnedDir, name)
	if *updatePinned {
		if err := os.MkdirAll(rpcPinnedDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, now, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("pinned %s: %v (regenerate with -update only for a new format)", name, err)
	}
	var got T
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("pinned %s does not decode: %v", name, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("pinned %s decodes to\n%+v\nthe model is\n%+v", name, got, want)
	}
	if string(now) != string(b) {
		t.Errorf("this build writes %s as\n%s\nthe pinned bytes are\n%s\nnodes of different builds would disagree", name, now, b)
	}
	return got
}

// TestPinnedWire reads the committed request and answer of the catalog
// service: both decode to the model, this build writes the model to the
// same bytes, and the records read back carry the catalog's computed
// flags and the error classes. An encoding change fails it.
func TestPinnedWire(t *testing.T) {
	pinnedRoundTrip(t, "request.json", pinnedRequest())
	a := pinnedRoundTrip(t, "answer.json", pinnedAnswer())
	rs := fromWireRecords(a.Records)
	if len(rs) != 2 || !rs[0].Retained || rs[0].Owner != "j2" || !rs[0].Pinned || !errors.Is(rs[0].Damaged, backend.ErrCorrupt) ||
		rs[1].Retained || rs[1].Pinned || rs[1].Damaged != nil || rs[1].Reason != "task failed" {
		t.Errorf("the pinned records read back as %+v", rs)
	}
	if err := a.Err.err(); !errors.Is(err, catalog.ErrNotFound) {
		t.Errorf("the pinned answer's error reads back as %v, want catalog.ErrNotFound", err)
	}
}
