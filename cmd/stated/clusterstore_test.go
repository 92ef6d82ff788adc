package main

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/cluster"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/host"
)

// TestCheckpointsOfAClusterNodeDataDir: `stated checkpoints --data-dir`
// of a cluster node reads the shared store the node serves (it looked
// under <data-dir>/checkpoints, which a cluster node does not use, and
// found nothing).
func TestCheckpointsOfAClusterNodeDataDir(t *testing.T) {
	for _, k := range []string{"STATED_DATA_DIR", "STATED_CHECKPOINT_STORE"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	base := t.TempDir()
	dataDir, shared := filepath.Join(base, "node"), filepath.Join(base, "shared")
	if err := os.MkdirAll(shared, 0o700); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nd, err := host.Open(context.Background(), host.Options{DataDir: dataDir, NoSocket: true, CheckpointStore: "file://" + shared,
		Logger: slog.New(slog.DiscardHandler), NodeID: "n0", RaftAddr: ln.Addr().String(), RaftPeers: "n0=" + ln.Addr().String(),
		ClusterToken: "secret", TuneCluster: func(o *cluster.Options) {
			o.Listener = ln
			o.HeartbeatTimeout, o.ElectionTimeout = 150*time.Millisecond, 150*time.Millisecond
			o.LeaderLeaseTimeout, o.CommitTimeout = 100*time.Millisecond, 5*time.Millisecond
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer nd.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	d := nd.Daemon()
	in, err := d.Open(ctx, daemon.OpenParams{Task: backend.TaskID{Job: "cj", Operator: "op"}, KeyGroups: backend.KeyGroupRange{Start: 0, End: 127},
		Kind: backend.KindFile, States: []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Snapshot(ctx, in, 1, true); err != nil {
		t.Fatal(err)
	}
	if _, err := d.CompleteCheckpoint(ctx, "cj", 1, nil); err != nil {
		t.Fatal(err)
	}
	cmd := newCheckpointsCmd()
	var out, errOut bytes.Buffer
	cmd.SetArgs([]string{"--data-dir", dataDir})
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	if err := cmd.Execute(); err != nil || !strings.Contains(out.String(), "job cj") ||
		!strings.Contains(errOut.String(), "reading checkpoint store file://"+shared) || !strings.Contains(errOut.String(), host.StoreFile) {
		t.Fatalf("checkpoints --data-dir of a cluster node: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errOut.String())
	}
}
