package bench

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/statedhq/stated/tools/bench/workload"
)

// TestSmokeEveryWorkload runs every workload briefly on an embedded daemon
// (the backends in turn) and on the Pebble baseline, and checks that every
// phase produced its figures. It is what keeps the tool working in CI.
func TestSmokeEveryWorkload(t *testing.T) {
	// A count rather than a duration, so that even on a loaded machine
	// every kind of a mix (a timer poll is 1 in 100) runs: 5,000
	// operations take 0.05-0.3 s here.
	ops := int64(50_000)
	if testing.Short() {
		ops = 5_000
	}
	backends := []string{"heap", "file", "lsm"}
	for i, s := range workload.All() {
		b := backends[i%len(backends)]
		t.Run(s.Name+"/"+b, func(t *testing.T) {
			r := &Runner{Params: Params{
				Workload: s.Name, WorkloadParams: workload.Params{ReadRatio: -1, ListLen: 10},
				Tasks: 2, Keys: 2000, Ops: ops, Warmup: 50 * time.Millisecond,
				Backends: []string{b}, Baseline: Baseline, Dir: t.TempDir(), InFlight: 256,
			}}
			rep, err := r.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Summary) != 2 || rep.Summary[0].Config != b || rep.Summary[1].Config != Baseline {
				t.Fatalf("summary configs %+v", rep.Summary)
			}
			daemon, base := rep.Summary[0].Figures, rep.Summary[1].Figures
			for _, k := range s.Kinds() {
				for _, f := range []map[string]Stat{daemon, base} {
					if f["run."+k.String()+".ops"].Median <= 0 {
						t.Fatalf("no %s operations ran: %v", k, f)
					}
					if f["run."+k.String()+".p99_us"].Median <= 0 {
						t.Fatalf("no %s latency: %v", k, f)
					}
				}
			}
			for _, name := range []string{"load.ops_per_sec", "checkpoint1.full_bytes", "checkpoint2.full_bytes",
				"checkpoint2.total_ms", "restore.close_ms", "restore.ms", "rescale.close_ms", "rescale.ms"} {
				if daemon[name].Median <= 0 {
					t.Fatalf("%s = %v", name, daemon[name])
				}
			}
			if daemon["rescale.parallelism"].Median != 4 {
				t.Fatalf("rescaled to %v subtasks, want 4", daemon["rescale.parallelism"].Median)
			}
			if _, ok := base["checkpoint1.full_bytes"]; ok {
				t.Fatal("the baseline reports a checkpoint")
			}
			if len(rep.Ratios) == 0 {
				t.Fatal("no ratios to the baseline")
			}
		})
	}
}

func TestOpsCountBoundsTheRun(t *testing.T) {
	r := &Runner{Params: Params{Workload: "value-put", Keys: 500, Ops: 3000, Warmup: -1, Baseline: Baseline,
		Backends: []string{"heap"}, RescaleTo: -1, Dir: t.TempDir()}}
	rep, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range rep.Summary {
		if got := s.Figures["run.put.ops"].Median; got != 3000 {
			t.Fatalf("%s ran %v puts, want 3000", s.Config, got)
		}
		if _, ok := s.Figures["rescale.ms"]; ok {
			t.Fatalf("%s rescaled with --rescale-to -1", s.Config)
		}
	}
}

func TestBadParamsAreRefusedTogether(t *testing.T) {
	p := Params{Workload: "nope", Tasks: 500, Backends: []string{"rocks"}, Baseline: "sqlite", Repeat: -1, Keys: 1, InFlight: -1}
	p.EnsureDefaults()
	err := p.Validate()
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{`unknown workload "nope"`, "tasks 500", `backend "rocks"`, `baseline "sqlite"`, "repeat -1", "keys 1", "in-flight -1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	q := Params{Workload: "value-get", WorkloadParams: workload.Params{ReadRatio: -1, Distribution: "zipfian", Skew: 1.5}}
	q.EnsureDefaults()
	if err := q.Validate(); err == nil || !strings.Contains(err.Error(), "skew 1.5") {
		t.Fatalf("skew 1.5: %v", err)
	}
}

// TestChangelogMatrix: --changelog off,on runs both, each instance in the
// mode its configuration names (the session checks what Open answers).
func TestChangelogMatrix(t *testing.T) {
	r := &Runner{Params: Params{Workload: "value-put", Changelog: []bool{false, true}, Backends: []string{"file"}, Dir: t.TempDir(),
		Ops: 2000, Keys: 500}}
	rep, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, run := range rep.Runs {
		names = append(names, run.Config)
	}
	if len(rep.Runs) != 2 || !strings.Contains(strings.Join(names, " "), "changelog") {
		t.Fatalf("runs %v, want one with the changelog off and one on", names)
	}
}

func TestReportJSONRoundTrip(t *testing.T) {
	rep := &Report{Version: ReportVersion, Started: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC),
		Params:  Params{Workload: "ycsb-a", Tasks: 2, Backends: []string{"lsm"}, Changelog: []bool{false}, Duration: time.Second},
		Machine: machineInfo(), Git: Git{Revision: "abc", Source: "git"},
		Runs: []Run{{Config: "lsm", Repeat: 1, Figures: map[string]float64{"run.ops_per_sec": 10, "restore.ms": 2.5}},
			{Config: "lsm", Repeat: 2, Figures: map[string]float64{"run.ops_per_sec": 30, "restore.ms": 1.5}},
			{Config: "lsm", Repeat: 3, Figures: map[string]float64{"run.ops_per_sec": 20, "restore.ms": 3}}},
	}
	rep.Summary = summarize([]string{"lsm"}, rep.Runs)
	if got := rep.Summary[0].Figures["run.ops_per_sec"]; got != (Stat{Min: 10, Median: 20, Max: 30, N: 3}) {
		t.Fatalf("summary %+v", got)
	}
	path := filepath.Join(t.TempDir(), "r.json")
	if err := WriteJSON(path, rep); err != nil {
		t.Fatal(err)
	}
	back, err := ReadJSON(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rep, back) {
		t.Fatalf("round trip differs:\n%+v\n%+v", rep, back)
	}
	rep.Version = 99
	if err := WriteJSON(path, rep); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadJSON(path); err == nil || !strings.Contains(err.Error(), "version 99") {
		t.Fatalf("version 99: %v", err)
	}
}

func TestPlotShowsEveryConfiguration(t *testing.T) {
	runs := []Run{
		{Config: "lsm", Repeat: 1, Figures: map[string]float64{"run.ops_per_sec": 100, "run.get.ops_per_sec": 100, "run.get.p50_us": 5, "run.get.p99_us": 50, "run.get.p999_us": 500, "restore.ms": 3}},
		{Config: "lsm", Repeat: 2, Figures: map[string]float64{"run.ops_per_sec": 300, "run.get.ops_per_sec": 300, "run.get.p50_us": 6, "run.get.p99_us": 60, "run.get.p999_us": 600, "restore.ms": 4}},
		{Config: "<heap>", Repeat: 1, Figures: map[string]float64{"run.ops_per_sec": 200, "run.get.ops_per_sec": 200, "run.get.p50_us": 1, "run.get.p99_us": 9, "run.get.p999_us": 90}},
	}
	rep := &Report{Params: Params{Workload: "value-get"}, Runs: runs, Summary: summarize([]string{"lsm", "<heap>"}, runs)}
	page := PlotHTML(rep)
	for _, want := range []string{"<svg", "Throughput", "Latency of get", "Checkpoint, restore and rescale", "&lt;heap&gt;", "p999", ">200<", "<line "} {
		if !strings.Contains(page, want) {
			t.Errorf("plot lacks %q", want)
		}
	}
	if strings.Contains(page, "<heap>") || strings.Contains(page, "<script") || strings.Contains(page, "http://") && !strings.Contains(page, "http://www.w3.org/2000/svg") {
		t.Error("plot has unescaped text, a script or an external reference")
	}
	if strings.Count(page, "<svg") != 3 {
		t.Errorf("plot has %d charts, want 3", strings.Count(page, "<svg"))
	}
	path := filepath.Join(t.TempDir(), "p.html")
	if err := WritePlot(path, rep); err != nil {
		t.Fatal(err)
	}
}

func TestInstancesReportsCosts(t *testing.T) {
	for _, b := range []string{"heap", "lsm"} {
		r, err := Instances(context.Background(), InstancesParams{Backend: b, Count: 12, Connections: 3, Dir: t.TempDir()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Embedded || r.Count != 12 || r.OpensPerSec <= 0 || r.ClosesPerSec <= 0 || r.RSSAfter <= 0 || r.FDLimit == 0 {
			t.Fatalf("%s: %+v", b, r)
		}
		// An idle lsm instance holds no file open: its store's metadata
		// is in memory, and it has no table yet (issue 12: at most 4).
		if b == "lsm" && r.FDsPerInstance > 4 {
			t.Fatalf("lsm: %v descriptors per idle instance, want at most 4", r.FDsPerInstance)
		}
	}
}

func TestInstancesRefuseToPassTheFDLimit(t *testing.T) {
	// A limit at what the process holds: the probe fits (idle lsm
	// instances hold no descriptor), but the estimate for the rest, with
	// its headroom, passes it.
	limit := uint64(fds())
	_, err := Instances(context.Background(), InstancesParams{Backend: "lsm", Count: 5000, Connections: 2, Dir: t.TempDir(), fdLimit: limit}, nil)
	if !errors.Is(err, ErrFDLimit) || !strings.Contains(err.Error(), "RLIMIT_NOFILE") || !strings.Contains(err.Error(), "5000 lsm instances") {
		t.Fatalf("5000 instances under a limit of %d: %v", limit, err)
	}
	if _, err := Instances(context.Background(), InstancesParams{Backend: "rocks", Count: -1}, nil); err == nil ||
		!strings.Contains(err.Error(), `backend "rocks"`) || !strings.Contains(err.Error(), "count -1") {
		t.Fatalf("bad params: %v", err)
	}
}
