package api_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/statedhq/stated/api"
	"github.com/statedhq/stated/api/client"
	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/backend"
)

// TestClientViews: the Go client's views, key scans, late states and bulk
// load, against a daemon.
func TestClientViews(t *testing.T) {
	ctx := ctxT(t)
	h := startDaemon(t, harnessOpts{})
	c := h.dial(client.Options{})
	src, err := c.Open(ctx, client.OpenSpec{Task: task("cv", "op", 0), KeyGroups: backend.KeyGroupRange{Start: 0, End: 127},
		Backend: backend.KindLSM, States: []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}}})
	if err != nil {
		t.Fatal(err)
	}
	if src.ProtocolVersion() != api.ProtocolVersion || src.MaxViews() != 4 {
		t.Fatalf("the client read protocol revision %d (want %d) and %d views per instance (want 4)",
			src.ProtocolVersion(), api.ProtocolVersion, src.MaxViews())
	}
	if err := src.RegisterStates(ctx, backend.StateDescriptor{Name: "l", Kind: backend.KindList}); err != nil {
		t.Fatal(err)
	}
	if n := len(src.States()); n != 2 {
		t.Fatalf("%d states after a registration", n)
	}
	for i := 0; i < 500; i++ {
		k := []byte(fmt.Sprintf("k%d", i))
		src.Put("v", k, nil, []byte("before"))
		src.ListAppend("l", k, []byte("ns"), []byte("a"), []byte("b"))
	}
	// No Sync: the view is a barrier behind the writes.
	v, err := src.TakeView(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 500; i++ {
		src.Put("v", []byte(fmt.Sprintf("k%d", i)), nil, []byte("after"))
	}
	var entries []backend.LoadEntry
	cursor, done, err := v.Scan(ctx, client.ViewScan{PageBytes: 4096}, func(e *backend.ViewEntry) error {
		if e.State == "v" && string(e.Value) != "before" {
			return fmt.Errorf("the view holds %q for %s", e.Value, e.Key)
		}
		c := *e
		c.Key, c.Namespace, c.Value = append([]byte{}, e.Key...), append([]byte{}, e.Namespace...), append([]byte{}, e.Value...)
		c.Values = nil
		for _, x := range e.Values {
			c.Values = append(c.Values, append([]byte{}, x...))
		}
		entries = append(entries, c)
		return nil
	})
	if err != nil || !done || len(cursor) == 0 || len(entries) != 1000 {
		t.Fatalf("scan: %d entries, done %v, %v", len(entries), done, err)
	}
	if err := v.Release(ctx); err != nil {
		t.Fatal(err)
	}
	keys, _, more, err := src.ScanKeys(ctx, client.KeyScan{State: "l", Namespace: []byte("ns"), Limit: 1000})
	if err != nil || len(keys) != 500 || more {
		t.Fatalf("keys of l in ns: %d, more %v, %v", len(keys), more, err)
	}
	keys, _, _, err = src.ScanKeys(ctx, client.KeyScan{State: "l", Namespace: []byte{}, Limit: 1000})
	if err != nil || len(keys) != 0 {
		t.Fatalf("keys of l in the empty namespace: %d, %v", len(keys), err)
	}
	if n, err := src.CountEntries(ctx, ""); err != nil || n != 1000 {
		t.Fatalf("count: %d, %v", n, err)
	}

	// Load what the view held into another instance.
	dst, err := c.Open(ctx, client.OpenSpec{Task: task("cv", "op2", 0), KeyGroups: backend.KeyGroupRange{Start: 0, End: 127},
		Backend: backend.KindHeap, States: []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}, {Name: "l", Kind: backend.KindList}}})
	if err != nil {
		t.Fatal(err)
	}
	rest := entries
	n, _, err := dst.Load(ctx, func() []backend.LoadEntry {
		if len(rest) == 0 {
			return nil
		}
		b := rest[:min(len(rest), 300)]
		rest = rest[len(b):]
		return b
	})
	if err != nil || n != 1000 {
		t.Fatalf("load: %d, %v", n, err)
	}
	got, err := dst.Get("v", []byte("k7"), nil).Wait(ctx)
	if err != nil || string(got.Data) != "before" {
		t.Fatalf("loaded value %q, %v", got.Data, err)
	}
	l, err := dst.ListGet("l", []byte("k7"), []byte("ns")).Wait(ctx)
	if err != nil || fmt.Sprintf("%s", l) != "[a b]" {
		t.Fatalf("loaded list %s, %v", l, err)
	}
}

// TestClientViewsNeedRevision: a daemon that advertises an older protocol
// revision (here one that advertises none, as before revisions existed;
// an interceptor rewrites its OpenResponse) gets a view request refused by
// the client with a message naming both revisions, not a barrier the
// daemon would not understand.
func TestClientViewsNeedRevision(t *testing.T) {
	ctx := ctxT(t)
	old := grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		resp, err := h(ctx, req)
		if o, ok := resp.(*pb.OpenResponse); ok && err == nil {
			o.ProtocolVersion, o.MaxViewsPerInstance = 0, 0
		}
		return resp, err
	})
	h := startDaemon(t, harnessOpts{grpc: []grpc.ServerOption{old}})
	c := h.dial(client.Options{})
	in, err := c.Open(ctx, client.OpenSpec{Task: task("cvold", "op", 0), KeyGroups: backend.KeyGroupRange{Start: 0, End: 127},
		Backend: backend.KindLSM, States: []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}}})
	if err != nil {
		t.Fatal(err)
	}
	if in.ProtocolVersion() != 0 || in.MaxViews() != 0 {
		t.Fatalf("revision %d, %d views: the interceptor did not apply", in.ProtocolVersion(), in.MaxViews())
	}
	_, err = in.TakeView(ctx, 0)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "revision 0") ||
		!strings.Contains(err.Error(), fmt.Sprintf("revision %d or later", client.ViewsProtocolVersion)) {
		t.Fatalf("view from a revision-0 daemon: %v", err)
	}
}
