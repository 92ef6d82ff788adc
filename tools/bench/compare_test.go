package bench

import (
	"bytes"
	"strings"
	"testing"
)

func TestNoiseRule(t *testing.T) {
	st := func(min, med, max float64, n int) Stat { return Stat{Min: min, Median: med, Max: max, N: n} }
	for _, tc := range []struct {
		name string
		a, b Stat
		want string
	}{
		{"run.ops_per_sec", st(90, 100, 110, 3), st(105, 115, 125, 3), VerdictNoise},   // bands overlap
		{"run.ops_per_sec", st(90, 100, 110, 3), st(111, 120, 130, 3), VerdictBetter},  // higher throughput
		{"run.ops_per_sec", st(90, 100, 110, 3), st(70, 80, 89, 3), VerdictWorse},      // lower throughput
		{"run.get.p99_us", st(90, 100, 110, 3), st(111, 120, 130, 3), VerdictWorse},    // higher latency
		{"restore.ms", st(90, 100, 110, 3), st(70, 80, 89, 3), VerdictBetter},          // faster restore
		{"checkpoint2.full_bytes", st(10, 10, 10, 3), st(10, 10, 10, 3), VerdictSame},  // identical
		{"run.ops_per_sec", st(100, 100, 100, 1), st(120, 120, 120, 3), VerdictNoBand}, // one run: no band
		{"rescale.parallelism", st(2, 2, 2, 3), st(4, 4, 4, 3), VerdictChanged},        // no direction
		{"run.ops_per_sec", st(90, 100, 110, 3), st(110, 150, 160, 3), VerdictNoise},   // touching bands
	} {
		c := judge("lsm", tc.name, tc.a, tc.b)
		if c.Verdict != tc.want {
			t.Errorf("%s %+v -> %+v: %s, want %s", tc.name, tc.a, tc.b, c.Verdict, tc.want)
		}
		if tc.a.Median != 0 && c.Ratio != tc.b.Median/tc.a.Median {
			t.Errorf("%s: ratio %v", tc.name, c.Ratio)
		}
	}
}

func TestCompareMatchesConfigurations(t *testing.T) {
	mk := func(rev string, cfg string, v ...float64) *Report {
		r := &Report{Version: ReportVersion, Git: Git{Revision: rev}, Params: Params{Workload: "value-get", Keys: 10}}
		for i, x := range v {
			r.Runs = append(r.Runs, Run{Config: cfg, Repeat: i + 1, Figures: map[string]float64{"run.ops_per_sec": x}})
		}
		r.Summary = summarize([]string{cfg}, r.Runs)
		return r
	}
	a, b := mk("aaa", "lsm", 100, 105, 110), mk("bbb", "lsm", 200, 210, 220)
	b.Params.Keys = 20
	cs, err := Compare(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 1 || cs[0].Verdict != VerdictBetter || cs[0].Ratio != 2 {
		t.Fatalf("comparison %+v", cs)
	}
	var out bytes.Buffer
	PrintCompare(&out, a, b, cs)
	for _, want := range []string{"2.00x", "better", "keys: 10 -> 20", "1 better"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if _, err := Compare(a, mk("ccc", "heap", 1)); err == nil || !strings.Contains(err.Error(), "share no configuration") {
		t.Fatalf("disjoint reports: %v", err)
	}
}
