package host_test

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/host"
)

// histogramCount is the sample count of histogram name.
func histogramCount(t *testing.T, n *host.Host, name string) uint64 {
	t.Helper()
	mfs, err := n.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	t.Fatalf("no histogram %s", name)
	return 0
}

// An unaligned snapshot shows in the metrics: counted, its in-flight bytes
// added, its alignment and start delay observed; an aligned one without
// statistics adds nothing.
func TestUnalignedCheckpointMetrics(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	sock := filepath.Join(dir, "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	n, err := host.Open(ctx, host.Options{DataDir: filepath.Join(dir, "d"), Listener: ln, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	c, err := client.Dial(sock, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	in, err := c.Open(ctx, client.OpenSpec{Task: backend.TaskID{Job: "m", Operator: "op"}, Parallelism: 1, Backend: backend.KindFile,
		States: []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.SnapshotWith(ctx, 1, client.SnapshotOptions{Wait: true}); err != nil {
		t.Fatal(err)
	}
	if got := metric(t, n, "stated_unaligned_snapshots_total") + metric(t, n, "stated_channel_state_bytes_total"); got != 0 {
		t.Fatalf("an aligned snapshot counted as unaligned: %v", got)
	}
	err = in.WriteChannelState(ctx, 2, []client.ChannelState{{Channel: backend.ChannelID{Direction: backend.ChannelInput},
		Kind: backend.ChannelBroadcast, Buffers: [][]client.ChannelRecord{{{Data: []byte("in flight")}}}}})
	if err != nil {
		t.Fatal(err)
	}
	st := &client.CheckpointStats{Unaligned: true, Alignment: 0, StartDelay: 30 * time.Millisecond}
	if _, err := in.SnapshotWith(ctx, 2, client.SnapshotOptions{Wait: true, Stats: st}); err != nil {
		t.Fatal(err)
	}
	if got := metric(t, n, "stated_unaligned_snapshots_total"); got != 1 {
		t.Fatalf("unaligned snapshots %v, want 1", got)
	}
	if got := metric(t, n, "stated_channel_state_bytes_total"); got <= 0 {
		t.Fatalf("channel state bytes %v", got)
	}
	for _, h := range []string{"stated_checkpoint_alignment_seconds", "stated_checkpoint_start_delay_seconds"} {
		if got := histogramCount(t, n, h); got != 1 {
			t.Fatalf("%s has %d samples, want 1", h, got)
		}
	}
}
