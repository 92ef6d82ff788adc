package api_test

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/statedhq/stated/api"
	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/host"
)

type harness struct {
	t      testing.TB
	dir    string
	sock   string
	n      *host.Host
	d      *daemon.Daemon
	cat    *catalog.Catalog
	srv    *api.Server
	g      *grpc.Server
	stopFn func()
}

type harnessOpts struct {
	dir    string // reuse a data dir (restart)
	server api.ServerOptions
	// node changes the node's options (limits, retention).
	node func(*host.Options)
	// grpc options added to the server's.
	grpc []grpc.ServerOption
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// startDaemon runs a node, as "stated serve" does, with its checkpoint
// store and its gRPC server on a Unix socket in a temporary directory.
func startDaemon(t testing.TB, o harnessOpts) *harness {
	t.Helper()
	dir := o.dir
	if dir == "" {
		// Unix socket paths are short: keep the directory near the root of
		// the test's temp dir.
		dir = t.TempDir()
	}
	no := host.Options{DataDir: filepath.Join(dir, "data"), CheckpointStore: "file://" + filepath.Join(dir, "chk"),
		Socket: filepath.Join(dir, "s.sock"), Logger: quietLogger(), GRPCOptions: o.grpc,
		MaxMessageSize: o.server.MaxMessageSize, QueueDepth: o.server.QueueDepth,
		MaxConcurrentStreams: o.server.MaxConcurrentStreams, FirstBatchTimeout: o.server.FirstBatchTimeout}
	if m := no.MaxMessageSize; m > 0 && m/2 < backend.DefaultMaxValueSize {
		// A small message limit: values must fit in half of it, as
		// "stated serve" requires.
		no.MaxValueSize = m / 2
	}
	if o.node != nil {
		o.node(&no)
	}
	n, err := host.Open(context.Background(), no)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, dir: dir, sock: n.Socket(), n: n, d: n.Daemon(), cat: n.Catalog(), srv: n.Server(), g: n.LocalServer()}
	h.stopFn = func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = n.Shutdown(sctx)
	}
	t.Cleanup(h.stopFn)
	return h
}

func (h *harness) stop() { h.stopFn() }

func (h *harness) dial(opts client.Options) *client.Client {
	h.t.Helper()
	c, err := client.Dial(h.sock, opts)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = c.Close() })
	return c
}

var allStates = []backend.StateDescriptor{
	{Name: "v", Kind: backend.KindValue},
	{Name: "l", Kind: backend.KindList},
	{Name: "m", Kind: backend.KindMap},
	{Name: "sum", Kind: backend.KindAggregate, Aggregate: backend.AggSum, Number: backend.NumInt64},
	{Name: "fmax", Kind: backend.KindAggregate, Aggregate: backend.AggMax, Number: backend.NumFloat64},
	{Name: "t", Kind: backend.KindTimers},
}

func task(job, op string, sub int) backend.TaskID {
	return backend.TaskID{Job: job, Operator: op, Subtask: sub}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
