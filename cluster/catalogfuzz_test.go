package cluster

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	pb "github.com/statedhq/stated/cluster/clusterpb"
	"github.com/statedhq/stated/tiered/memstore"
)

// FuzzServerHandle: any call a peer sends gets an answer or an error,
// never a panic, and an answer always names the server's epoch.
func FuzzServerHandle(f *testing.F) {
	seeds := []proto.Message{
		&pb.BeginRequest{Job: "j", Id: 1},
		&pb.ReportRequest{Job: "j", Id: 1, Report: &pb.Report{Handle: []byte("STH1"), Token: 7}},
		&pb.CompleteRequest{Job: "j", Id: 1, Tasks: []*pb.TaskId{{Job: "j", Operator: "op"}}, Reports: []*pb.Report{{Handle: []byte("STH1")}}},
		&pb.RestoreRequest{Job: "j", Mode: "claim", SavepointId: "../x"},
		&pb.SavepointFromCheckpointRequest{Job: "j"},
	}
	for _, md := range pb.Catalog_ServiceDesc.Methods {
		m := "/" + pb.Catalog_ServiceDesc.ServiceName + "/" + md.MethodName
		for _, seed := range seeds {
			b, err := proto.Marshal(seed)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(m, b)
		}
	}
	f.Add("nonsense", []byte{0x0a, 0x01, 'j'})
	cat, err := catalog.Open(ctx, catalog.Options{Store: memstore.New()})
	if err != nil {
		f.Fatal(err)
	}
	defer cat.Close()
	srv, err := NewCatalogServer(cat, CatalogServerOptions{Epoch: 3, Journal: &memJournal{m: map[string][]byte{}}})
	if err != nil {
		f.Fatal(err)
	}
	defer srv.Close()
	f.Fuzz(func(t *testing.T, method string, payload []byte) {
		out, err := srv.Handle(ctx, method, payload)
		if err != nil {
			return
		}
		// Every response's field 1 is its CatalogStatus.
		var a pb.CatalogAck
		if err := proto.Unmarshal(out, &a); err != nil {
			t.Fatalf("unreadable answer: %v", err)
		}
		if a.GetStatus().GetEpoch() != 3 {
			t.Fatalf("answer of epoch %d", a.GetStatus().GetEpoch())
		}
	})
}

// TestEveryCatalogMethodServed: each rpc of the Catalog service reaches a
// method of the server (not the generated Unimplemented answer) and is
// answered with the server's epoch, so an rpc added to cluster.proto
// without its server method fails here rather than on a cluster.
func TestEveryCatalogMethodServed(t *testing.T) {
	cat, err := catalog.Open(ctx, catalog.Options{Store: memstore.New()})
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	srv, err := NewCatalogServer(cat, CatalogServerOptions{Epoch: 5, Journal: &memJournal{m: map[string][]byte{}}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for _, md := range pb.Catalog_ServiceDesc.Methods {
		m := "/" + pb.Catalog_ServiceDesc.ServiceName + "/" + md.MethodName
		out, err := srv.Handle(ctx, m, nil)
		if err != nil {
			t.Errorf("%s with an empty request: %v, want an answer", md.MethodName, err)
			continue
		}
		var a pb.CatalogAck
		if err := proto.Unmarshal(out, &a); err != nil || a.GetStatus().GetEpoch() != 5 {
			t.Errorf("%s answered %x (%v), want an answer of epoch 5", md.MethodName, out, err)
		}
	}
	if _, err := srv.Handle(ctx, "/stated.cluster.v1.Catalog/NoSuchCall", nil); !errors.Is(err, backend.ErrInvalidArgument) {
		t.Errorf("an unknown method: %v, want an error wrapping backend.ErrInvalidArgument", err)
	}
}
