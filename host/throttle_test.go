package host

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/tiered/s3store/s3test"
	"github.com/statedhq/stated/tiered/storeurl"
)

// gather reads the node's metrics as name/label.../value.
func gather(t *testing.T, n *Host) map[string]float64 {
	t.Helper()
	mfs, err := n.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "/" + l.GetValue()
			}
			got[name] = m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	return got
}

// sum adds the series of a family.
func sum(got map[string]float64, family string) float64 {
	var s float64
	for k, v := range got {
		if k == family || strings.HasPrefix(k, family+"/") {
			s += v
		}
	}
	return s
}

// While the S3 server answers SlowDown (for 3 seconds, every request), a
// checkpoint waits and then completes: throttling is retried with backoff,
// counted in stated_store_throttled_total, and never surfaces as a failed
// snapshot or checkpoint.
func TestCheckpointsCompleteUnderThrottling(t *testing.T) {
	ctx := context.Background()
	so, _ := s3test.Options(t)
	th := s3test.NewThrottler(t, so.Endpoint)
	prefix := so.Prefix
	if prefix == "" {
		prefix = "throttle"
	}
	o := Options{DataDir: t.TempDir(), NoSocket: true, Logger: slog.New(slog.DiscardHandler),
		CheckpointStore: "s3://" + so.Bucket + "/" + prefix,
		S3: storeurl.Options{Endpoint: th.URL, Region: so.Region, AccessKeyID: so.AccessKeyID, SecretAccessKey: so.SecretAccessKey,
			Addressing: storeurl.AddressingPath}}
	// Two attempts for errors other than throttling: a spell of SlowDown
	// outlasts them, and must not end the requests.
	o.S3.S3.MaxAttempts = 2
	n, err := Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	d := n.Daemon()
	task := backend.TaskID{Job: "j", Operator: "op", Subtask: 0}
	in, err := d.Open(ctx, daemon.OpenParams{Task: task, KeyGroups: backend.KeyGroupRange{Start: 0, End: 127}, Kind: backend.KindFile,
		States: []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}}})
	if err != nil {
		t.Fatal(err)
	}
	checkpoint := func(id uint64) {
		t.Helper()
		for i := range 100 {
			if err := in.Backend.Put("v", backend.Key{KeyGroup: i % 128, Key: []byte{byte(id), byte(i)}}, []byte(strings.Repeat("v", 100))); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := d.Snapshot(ctx, in, id, true); err != nil {
			t.Fatalf("checkpoint %d: snapshot failed: %v", id, err)
		}
		if _, err := d.CompleteCheckpoint(ctx, "j", id, nil); err != nil {
			t.Fatalf("checkpoint %d: completion failed: %v", id, err)
		}
	}
	checkpoint(1)
	if th.Answered() != 0 {
		t.Fatal("the proxy throttled before it was told to")
	}
	const spell = 3 * time.Second
	th.SlowDown(0, spell)
	start := time.Now()
	checkpoint(2)
	checkpoint(3)
	if el := time.Since(start); el < spell/2 {
		t.Fatalf("checkpoints under a %s spell of SlowDown took only %s: were the requests throttled?", spell, el)
	}
	if th.Answered() == 0 {
		t.Fatal("the proxy answered no SlowDown")
	}
	got := gather(t, n)
	throttled := sum(got, "stated_store_throttled_total")
	if throttled == 0 || throttled > float64(th.Answered()) {
		t.Fatalf("stated_store_throttled_total %v, the proxy answered %d SlowDowns", throttled, th.Answered())
	}
	if r := sum(got, "stated_store_request_retries_total"); r < throttled {
		t.Fatalf("%v retries for %v throttled answers", r, throttled)
	}
	if f := sum(got, "stated_checkpoint_failures_total") + sum(got, "stated_snapshot_failures_total"); f != 0 {
		t.Fatalf("%v checkpoint or snapshot failures under throttling", f)
	}
	if got["stated_checkpoints_completed_total"] != 3 || got["stated_store_requests_measured/checkpoint"] != 1 {
		t.Fatalf("completed %v, measured %v", got["stated_checkpoints_completed_total"], got["stated_store_requests_measured/checkpoint"])
	}
	if got["stated_store_requests_total/put/checkpoint"] == 0 || got["stated_store_estimated_dollars_per_month/requests/checkpoint"] <= 0 {
		t.Fatalf("requests %v, estimate %v", got["stated_store_requests_total/put/checkpoint"], got["stated_store_estimated_dollars_per_month/requests/checkpoint"])
	}
	t.Logf("%d SlowDowns answered, %v counted, checkpoints 2 and 3 took %s", th.Answered(), throttled, time.Since(start).Round(time.Millisecond))
}
