package bench

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/statedhq/stated/tiered/s3store"
	"github.com/statedhq/stated/tiered/s3store/s3test"
)

// A run on an S3 checkpoint store reports each checkpoint's requests by
// kind, the run phase's rates and the estimated bill; the run's prefix is
// emptied afterwards.
func TestRequestFiguresOnS3(t *testing.T) {
	so, _ := s3test.Options(t)
	prefix := so.Prefix
	if prefix == "" {
		prefix = "bench"
	}
	for _, kv := range [][2]string{{"AWS_ACCESS_KEY_ID", so.AccessKeyID}, {"AWS_SECRET_ACCESS_KEY", so.SecretAccessKey}, {"AWS_REGION", so.Region}} {
		t.Setenv(kv[0], kv[1])
	}
	store := "s3://" + so.Bucket + "/" + prefix + "?endpoint=" + so.Endpoint + "&path-style=true"
	r := &Runner{Params: Params{Workload: "value-put", Backends: []string{"file"}, Dir: t.TempDir(), Ops: 2000, Keys: 500,
		Warmup: -1, RescaleTo: -1, CheckpointStore: store, Prices: "put=0.01"}}
	rep, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	f := rep.Runs[0].Figures
	// A file backend's checkpoint puts its snapshot, the task's handle
	// and the manifest at least.
	if f["checkpoint1.put_requests"] < 2 || f["checkpoint2.put_requests"] < 2 || f["checkpoint2.requests"] < f["checkpoint2.put_requests"] {
		t.Fatalf("checkpoint requests: %v", f)
	}
	// At put=$0.01 per 1,000: a month of one a minute (43,800).
	if want := f["checkpoint2.put_requests"] * 43800 * 0.01 / 1000; f["checkpoint2.dollars_per_month_at_1_per_min"] < want {
		t.Fatalf("checkpoint2 at one a minute: $%v a month, want at least $%v", f["checkpoint2.dollars_per_month_at_1_per_min"], want)
	}
	if _, ok := f["run.requests_per_sec"]; !ok {
		t.Fatalf("no run rates: %v", f)
	}
	if u, _ := FigureUnit("run.put_requests_per_sec"); u != "req/s" {
		t.Fatalf("unit %q", u)
	}
	if os.Getenv(s3test.EnvEndpoint) == "" {
		return
	}
	// The run's prefix is emptied (checked on a real server, whose bucket
	// outlives the test).
	s, err := s3store.Open(context.Background(), so)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	page, err := s.List(context.Background(), "", "", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Objects) != 0 {
		t.Fatalf("the run left %d objects, e.g. %s", len(page.Objects), page.Objects[0].Name)
	}
}

func TestRunStore(t *testing.T) {
	for _, c := range [][3]string{
		{"s3://b/p?endpoint=http://h:1&path-style=true", "r1", "s3://b/p/r1?endpoint=http://h:1&path-style=true"},
		{"s3://b", "r1", "s3://b/r1"},
		{"file:///tmp/x", "r1", "file:///tmp/x/r1"},
		{"/tmp/x", "r1", "/tmp/x/r1"},
	} {
		got, err := runStore(c[0], c[1])
		if err != nil || got != c[2] {
			t.Errorf("runStore(%s, %s) = %s, %v; want %s", c[0], c[1], got, err, c[2])
		}
	}
}

// --idle measures an idle spell: every kind reported, the spell's length,
// and on a local store the calls (not HTTP requests).
func TestInstancesIdle(t *testing.T) {
	r, err := Instances(context.Background(), InstancesParams{Backend: "file", Count: 3, Connections: 1, Dir: t.TempDir(), Idle: 200 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.IdleSeconds < 0.2 || len(r.IdleRequests) != 5 || r.IdleMeasured {
		t.Fatalf("idle: %.3f s, requests %v, measured %v", r.IdleSeconds, r.IdleRequests, r.IdleMeasured)
	}
	if _, err := Instances(context.Background(), InstancesParams{Socket: "x.sock", Idle: time.Second}, nil); err == nil {
		t.Fatal("--idle with an external daemon was accepted")
	}
}
