package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/host"
)

// TestSavepointTriggerListDelete: a savepoint triggered through a running
// daemon's socket is listed from the store, deleted, and then gone, and a
// second delete names the listing command.
func TestSavepointTriggerListDelete(t *testing.T) {
	ctx := context.Background()
	base, err := os.MkdirTemp("", "sp") // short: a Unix socket path has a length limit
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	root := filepath.Join(base, "checkpoints")
	n, err := host.Open(ctx, host.Options{DataDir: filepath.Join(base, "d"), CheckpointStore: "file://" + root,
		MetricsAddr: "", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	in, err := n.Daemon().Open(ctx, daemon.OpenParams{Task: backend.TaskID{Job: "j", Operator: "op", Subtask: 0},
		KeyGroups: backend.KeyGroupRange{Start: 0, End: 127}, Kind: backend.KindFile,
		States: []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Backend.Put("v", backend.Key{KeyGroup: 3, Key: []byte("k")}, []byte("value")); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	f := savepointTrigger{dataDir: filepath.Join(base, "d"), format: "canonical"}
	if err := runSavepointTrigger(ctx, &out, "j", f); err != nil {
		t.Fatalf("trigger: %v", err)
	}
	path := strings.TrimSpace(out.String())
	if !strings.HasPrefix(path, "savepoints/") {
		t.Fatalf("trigger printed %q, want a savepoints/ path", path)
	}
	id := strings.TrimPrefix(path, "savepoints/")
	if err := runSavepointTrigger(ctx, &out, "j", savepointTrigger{addr: n.Socket(), format: "weird"}); err == nil || !strings.Contains(err.Error(), "--format") {
		t.Fatalf("bad format: %v", err)
	}
	if err := runSavepointTrigger(ctx, &out, "j", savepointTrigger{addr: filepath.Join(base, "none.sock"), format: "native"}); err == nil {
		t.Fatal("trigger without a daemon succeeded")
	}

	st := cliStore{url: "file://" + root}
	list := func() string {
		t.Helper()
		var out, errOut bytes.Buffer
		if err := runSavepointList(ctx, &out, &errOut, st, ""); err != nil {
			t.Fatalf("list: %v\n%s", err, errOut.String())
		}
		return out.String()
	}
	if got := list(); !strings.Contains(got, id) || !strings.Contains(got, "canonical") {
		t.Fatalf("list does not show savepoint %s:\n%s", id, got)
	}
	out.Reset()
	if err := runSavepointDelete(ctx, &out, st, path); err != nil {
		t.Fatalf("delete %s: %v", path, err)
	}
	if got := list(); strings.Contains(got, id) || !strings.Contains(got, "no savepoints") {
		t.Fatalf("savepoint %s still listed after delete:\n%s", id, got)
	}
	if entries, _ := os.ReadDir(filepath.Join(root, "savepoints", id)); len(entries) != 0 {
		t.Fatalf("savepoint %s still has files: %v", id, entries)
	}
	if err := runSavepointDelete(ctx, &out, st, id); err == nil || !strings.Contains(err.Error(), `"stated savepoint list"`) {
		t.Fatalf("second delete: %v", err)
	}
}

// TestDaemonAddrFlag: the client commands name the daemon --addr;
// "bench run" and "bench instances" still take the old --socket.
func TestDaemonAddrFlag(t *testing.T) {
	cmds := map[string]func() *cobra.Command{
		"bench run":       newBenchRunCmd,
		"bench instances": newBenchInstancesCmd,
	}
	for name, mk := range cmds {
		for _, fl := range []string{"--addr", "--socket"} {
			cmd := mk()
			if err := cmd.ParseFlags([]string{fl, "host:7000"}); err != nil {
				t.Fatalf("%s %s: %v", name, fl, err)
			}
			if got := cmd.Flags().Lookup("addr").Value.String(); got != "host:7000" {
				t.Fatalf("%s %s host:7000: --addr is %q", name, fl, got)
			}
		}
		if f := mk().Flags().Lookup("socket"); f == nil || f.Deprecated == "" {
			t.Fatalf("%s: --socket is not a deprecated alias", name)
		}
	}
	for _, cmd := range []*cobra.Command{newBenchCheckpointSimCmd(), newSavepointTriggerCmd()} {
		if cmd.Flags().Lookup("addr") == nil {
			t.Fatalf("%s has no --addr", cmd.Name())
		}
	}
}
