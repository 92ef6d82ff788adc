package api_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/statedhq/stated/api"
	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/daemon/openers"
	"github.com/statedhq/stated/tiered/localfs"
)

type harness struct {
	t      testing.TB
	dir    string
	sock   string
	d      *daemon.Daemon
	cat    *catalog.Catalog
	set    *openers.Set
	srv    *api.Server
	g      *grpc.Server
	stopFn func()
}

type harnessOpts struct {
	dir     string // reuse a data dir (restart)
	server  api.ServerOptions
	cfg     func(*daemon.Config)
	catalog func(*catalog.Options)
	// grpc options added to the server's.
	grpc []grpc.ServerOption
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// startDaemon runs a daemon with a gRPC server on a Unix socket in a
// temporary directory.
func startDaemon(t testing.TB, o harnessOpts) *harness {
	t.Helper()
	dir := o.dir
	if dir == "" {
		// Unix socket paths are short: keep the directory near the root of
		// the test's temp dir.
		dir = t.TempDir()
	}
	store, err := localfs.Open(filepath.Join(dir, "chk"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	set, err := openers.New(openers.Config{})
	if err != nil {
		t.Fatal(err)
	}
	co := catalog.Options{Store: store, HeapStore: set.HeapSnapshots}
	if o.catalog != nil {
		o.catalog(&co)
	}
	cat, err := catalog.Open(ctx, co)
	if err != nil {
		t.Fatal(err)
	}
	cfg := daemon.Config{DataDir: filepath.Join(dir, "data"), Store: store, Catalog: cat, Openers: set.Openers,
		HeapSnapshots: set.HeapSnapshots, Logger: quietLogger()}
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	d, err := daemon.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	o.server.Logger = quietLogger()
	srv := api.NewServer(d, o.server)
	g := srv.GRPCServer("", o.grpc...)
	sock := filepath.Join(dir, "s.sock")
	_ = os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = g.Serve(ln) }()
	h := &harness{t: t, dir: dir, sock: sock, d: d, cat: cat, set: set, srv: srv, g: g}
	stopped := false
	h.stopFn = func() {
		if stopped {
			return
		}
		stopped = true
		g.Stop()
		<-served
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = d.Shutdown(sctx)
		_ = cat.Close()
		_ = set.Close()
		_ = store.Close()
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
