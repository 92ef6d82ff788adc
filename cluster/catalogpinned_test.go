package cluster

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	pb "github.com/statedhq/stated/cluster/clusterpb"
)

// The catalog service's pinned files (under testdata/catalogpinned,
// regenerated with -update as the machine's are: only for a new format): <message name>.pb is the
// message of pinnedMessages, as proto.Marshal writes it (what the CatalogClient
// sends and CatalogServer.Handle answers).
const rpcPinnedDir = "testdata/catalogpinned"

var pinnedT0 = time.Date(2026, 1, 2, 3, 4, 5, 600000000, time.UTC)

// pinnedMessages has every request and response of the Catalog service,
// each with every field set; the list response has records with each of
// the flags the catalog computes (retained, owner, pinned, damaged).
func pinnedMessages() []proto.Message {
	st := &pb.CatalogStatus{Epoch: 3, Error: &pb.CatalogError{Kind: "catalog-not-found", Msg: "no such"}}
	task := &pb.TaskId{Job: "j", Operator: "op", Subtask: 1}
	rec := catalog.Record{ID: 6, Status: catalog.StatusCompleted, Started: pinnedT0, Ended: pinnedT0.Add(time.Second),
		CheckpointedSize: 10, FullSize: 20, Tasks: 2, WithoutChannelState: true, Reason: "why",
		Stats:    catalog.CheckpointStats{TaskStats: backend.TaskStats{Unaligned: true, AlignmentMicros: 1, StartDelayMicros: 2, SyncMicros: 3, AsyncMicros: 4}, InFlightBytes: 5},
		Retained: true, Owner: "j2", Pinned: true, Damaged: errors.Join(backend.ErrCorrupt, errors.New("bad crc"))}
	failed := catalog.Record{ID: 7, Status: catalog.StatusAborted, Started: pinnedT0, Reason: "task failed"}
	return []proto.Message{
		&pb.EpochRequest{},
		&pb.BeginRequest{Job: "j", Id: 7},
		&pb.ReportRequest{Job: "j", Id: 7, Report: &pb.Report{Handle: []byte("handle\x00\xff"), Token: 9}},
		&pb.CompleteRequest{Job: "j", Id: 7, Tasks: []*pb.TaskId{task}, Fences: []*pb.Fence{{Task: task, Token: 9}},
			Reports: []*pb.Report{{Handle: []byte("h"), Token: 9}}},
		&pb.AbortRequest{Job: "j", Id: 7, Status: string(catalog.StatusAborted), Reason: "why"},
		&pb.ReleaseRequest{Job: "j", Id: 7},
		&pb.CheckpointRequest{Job: "j", Id: 7},
		&pb.LatestRequest{Job: "j"},
		&pb.SavepointRequest{SavepointId: "sp-1"},
		&pb.RetainedRequest{Job: "j"},
		&pb.ListRequest{Job: "j"},
		&pb.RestoreRequest{Job: "j2", FromJob: "j", CheckpointId: 6, SavepointId: "sp-1", Mode: string(catalog.ModeClaim), AllowFallback: true},
		&pb.NoteWithoutChannelStateRequest{Job: "j", Id: 7},
		&pb.ReleaseLogRequest{Names: []string{"j/log/a"}},
		&pb.ReleaseChangelogRequest{Run: "run-1", HeldFrom: 4, Names: []string{"j/log/a"}},
		&pb.JobsRequest{},
		&pb.ProblemsRequest{},
		&pb.SavepointsRequest{},
		&pb.SavepointFromCheckpointRequest{Job: "j", Id: 6},
		&pb.CatalogAck{Status: st},
		&pb.ManifestResponse{Status: st, Found: true, Manifest: []byte("STMF manifest")},
		&pb.RetainedResponse{Status: st, Ids: []uint64{5, 6}},
		&pb.ListResponse{Status: st, Records: toWireRecords([]catalog.Record{rec, failed})},
		&pb.RestoreResponse{Status: st, Manifest: []byte("STMF manifest"), NoClaim: true, Savepoint: "sp-1",
			Skipped: []*pb.DamagedCheckpoint{{Job: "j", Id: 5, Manifest: "j/chk-5/_metadata", Error: "corrupt"}}},
		&pb.JobsResponse{Status: st, Jobs: []string{"j", "j2"}},
		&pb.ProblemsResponse{Status: st, Problems: []*pb.CatalogProblem{{What: "delete", Object: "j/chk-1/x", Job: "j",
			Error: &pb.CatalogError{Msg: "denied"}, Effect: "kept"}}},
		&pb.SavepointsResponse{Status: st, Manifests: [][]byte{[]byte("STMF a"), []byte("STMF b")}},
	}
}

// pinnedRoundTrip reads the pinned file of want's type into a new
// message, compares it with want, and checks that this build writes want
// to the same bytes.
func pinnedRoundTrip(t *testing.T, want proto.Message) proto.Message {
	t.Helper()
	name := string(want.ProtoReflect().Descriptor().Name())
	now, err := proto.MarshalOptions{Deterministic: true}.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(rpcPinnedDir, name+".pb")
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
	got := want.ProtoReflect().New().Interface()
	if err := proto.Unmarshal(b, got); err != nil {
		t.Fatalf("pinned %s does not decode: %v", name, err)
	}
	if !proto.Equal(got, want) {
		t.Errorf("pinned %s decodes to\n%v\nthe model is\n%v", name, got, want)
	}
	if string(now) != string(b) {
		t.Errorf("this build writes %s as\n%x\nthe pinned bytes are\n%x\nnodes of different builds would disagree", name, now, b)
	}
	return got
}

// TestPinnedWire reads the committed requests and responses of the
// catalog service: each decodes to the model, this build writes the model
// to the same bytes, every message of the service is pinned, and the
// records read back carry the catalog's computed flags and the error
// classes. An encoding change fails it.
func TestPinnedWire(t *testing.T) {
	pinned := map[protoreflect.FullName]bool{}
	var list *pb.ListResponse
	for _, m := range pinnedMessages() {
		got := pinnedRoundTrip(t, m)
		pinned[m.ProtoReflect().Descriptor().FullName()] = true
		if l, ok := got.(*pb.ListResponse); ok {
			list = l
		}
	}
	methods := pb.File_cluster_proto.Services().ByName("Catalog").Methods()
	for i := range methods.Len() {
		md := methods.Get(i)
		for _, d := range []protoreflect.MessageDescriptor{md.Input(), md.Output()} {
			if !pinned[d.FullName()] {
				t.Errorf("%s of Catalog.%s is not pinned: add it to pinnedMessages", d.FullName(), md.Name())
			}
		}
	}
	rs := fromWireRecords(list.GetRecords())
	if len(rs) != 2 || !rs[0].Retained || rs[0].Owner != "j2" || !rs[0].Pinned || !errors.Is(rs[0].Damaged, backend.ErrCorrupt) ||
		!rs[0].Started.Equal(pinnedT0) || rs[0].Stats.InFlightBytes != 5 || !rs[0].Stats.Unaligned ||
		rs[1].Retained || rs[1].Pinned || rs[1].Damaged != nil || rs[1].Reason != "task failed" || !rs[1].Ended.IsZero() {
		t.Errorf("the pinned records read back as %+v", rs)
	}
	if err := fromWire(list.GetStatus().GetError()); !errors.Is(err, catalog.ErrNotFound) {
		t.Errorf("the pinned answer's error reads back as %v, want catalog.ErrNotFound", err)
	}
}
