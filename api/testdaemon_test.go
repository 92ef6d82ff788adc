package api

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/daemon/openers"
	"github.com/statedhq/stated/tiered/memstore"
)

// quietLog discards what the daemon and server log.
var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// newTestDaemon runs a daemon of its own on an in-memory checkpoint store
// (its data directory is t's temp dir) for the tests of this package that
// call the server's unexported apply. They cannot use package host, which
// assembles a node everywhere else: node imports api. t's cleanup shuts the
// daemon down before what it uses goes.
func newTestDaemon(t *testing.T, maxValue int) *daemon.Daemon {
	t.Helper()
	ctx := context.Background()
	store := memstore.New()
	set, err := openers.New(openers.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cat, err := catalog.Open(ctx, catalog.Options{Store: store, HeapStore: set.HeapSnapshots})
	if err != nil {
		t.Fatal(err)
	}
	d, err := daemon.New(daemon.Config{DataDir: t.TempDir(), Store: store, Catalog: cat, Openers: set.Openers,
		HeapSnapshots: set.HeapSnapshots, Logger: quietLog, MaxValueSize: maxValue})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = d.Shutdown(ctx)
		_ = cat.Close()
		_ = set.Close()
	})
	return d
}
