package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/statedhq/stated/tools/bench/checkpointsim"
)

func TestBenchCheckpointSim(t *testing.T) {
	dir := t.TempDir()
	jsonPath, plotPath := filepath.Join(dir, "sim.json"), filepath.Join(dir, "sim.svg")
	cmd := newBenchCheckpointSimCmd()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs([]string{"--mode", "aligned-timeout", "--debloat", "off", "--checkpoints", "4", "--backend", "heap",
		"--dir", dir, "--json", jsonPath, "--plot", plotPath})
	if err := cmd.Execute(); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	rows := 0
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "aligned-timeout ") {
			rows++
		}
	}
	if rows != 5 { // 4 checkpoints and the summary
		t.Fatalf("%d rows of aligned-timeout, want 5:\n%s", rows, out.String())
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep checkpointsim.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 1 || len(rep.Runs[0].Checkpoints) != 4 || rep.Options.Timeout != checkpointsim.DefaultTimeout {
		t.Fatalf("json: %+v", rep)
	}
	svg, err := os.ReadFile(plotPath)
	if err != nil || !bytes.HasPrefix(svg, []byte("<svg")) {
		t.Fatalf("plot: %v %.40q", err, svg)
	}
}

func TestBenchCheckpointSimBadFlags(t *testing.T) {
	cmd := newBenchCheckpointSimCmd()
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetArgs([]string{"--mode", "diagonal", "--debloat", "maybe", "--buffers", "0", "--records", "5", "--backend", "rocks", "--dir", t.TempDir()})
	err := cmd.Execute()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"--mode", "--debloat", "--buffers 0", "--records needs --kill-at"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	cmd = newBenchCheckpointSimCmd()
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetArgs([]string{"--backend", "rocks", "--parallelism", "-3", "--dir", t.TempDir()})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), `backend "rocks"`) || !strings.Contains(err.Error(), "parallelism -3") {
		t.Fatalf("error %v, want the backend and the parallelism named", err)
	}
}

func TestBenchCheckpointSimExactlyOnce(t *testing.T) {
	dir := t.TempDir()
	cmd := newBenchCheckpointSimCmd()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs([]string{"--kill-at", "4300ms", "--rescale-to", "3", "--mode", "unaligned", "--backend", "heap", "--log-level", "error",
		"--dir", dir, "--json", filepath.Join(dir, "eo.json")})
	if err := cmd.Execute(); err != nil {
		t.Fatalf("%v\n%s%s", err, out.String(), errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want a header and a row:\n%s", out.String())
	}
	f := strings.Fields(lines[1])
	// mode, killed at, restored from, unaligned, in-flight, parallelism, results, different, exactly once
	if len(f) != 9 || f[0] != "unaligned" || f[3] != "true" || f[4] == "0" || f[5] != "3" || f[7] != "0" || f[8] != "true" {
		t.Fatalf("row %q", lines[1])
	}
	var rs []checkpointsim.ExactlyOnceResult
	b, err := os.ReadFile(filepath.Join(dir, "eo.json"))
	if err != nil || json.Unmarshal(b, &rs) != nil || len(rs) != 1 || rs[0].RescaleTo != 3 {
		t.Fatalf("json %s: %v", b, err)
	}
}
