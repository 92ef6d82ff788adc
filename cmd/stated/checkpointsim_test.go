package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/statedhq/stated/bench/checkpointsim"
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
	cmd.SetArgs([]string{"--mode", "diagonal", "--debloat", "maybe", "--buffers", "0", "--backend", "rocks", "--dir", t.TempDir()})
	err := cmd.Execute()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"--mode", "--debloat", "--buffers 0"} {
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
