package checkpointsim

import (
	"encoding/xml"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
)

func TestPlotSVG(t *testing.T) {
	rep := &Report{Runs: []RunResult{
		{Mode: ModeAligned, Checkpoints: []CheckpointStats{{ID: 1, DurationMs: 400}, {ID: 2, DurationMs: 7000}}},
		{Mode: ModeUnaligned, Debloat: true, Checkpoints: []CheckpointStats{{ID: 1, DurationMs: 1, Unaligned: true, InFlightBytes: 2048}}},
	}}
	rep.Options.EnsureDefaults()
	svg := PlotSVG(rep)
	// Well-formed XML, a line per run in each panel, and filled markers
	// only for unaligned checkpoints.
	d := xml.NewDecoder(strings.NewReader(svg))
	for {
		_, err := d.Token()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("not XML: %v", err)
			}
			break
		}
	}
	if n := strings.Count(svg, "<polyline"); n != 4 {
		t.Errorf("%d lines, want 4", n)
	}
	if !strings.Contains(svg, "unaligned+debloat") {
		t.Error("no legend entry for unaligned+debloat")
	}
	if n := strings.Count(svg, `fill="`+palette[1]+`"`); n != 2 {
		t.Errorf("%d filled markers of the unaligned run, want 2 (one per panel)", n)
	}
	if n := strings.Count(svg, `fill="`+palette[0]+`"`); n != 0 {
		t.Errorf("%d filled markers of the aligned run, want none", n)
	}
	for _, c := range []struct{ in, want float64 }{{0, 1}, {7, 10}, {7000, 10000}, {1.5, 2}, {0.3, 0.5}} {
		if got := niceCeil(c.in); got != c.want {
			t.Errorf("niceCeil(%g) = %g, want %g", c.in, got, c.want)
		}
	}
}

func TestPrintSummary(t *testing.T) {
	rep := &Report{Runs: []RunResult{
		{Mode: ModeAligned, Checkpoints: []CheckpointStats{{ID: 1, DurationMs: 400, AlignmentMs: 390}, {ID: 2, DurationMs: 7000, StartDelayMs: 3000}}},
		{Mode: ModeUnaligned, Debloat: true, Checkpoints: []CheckpointStats{{ID: 1, DurationMs: 1, Unaligned: true, InFlightBytes: 2048}}},
		{Mode: ModeAlignedTimeout},
	}}
	var b strings.Builder
	PrintSummary(&b, rep)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines:\n%s", len(lines), b.String())
	}
	for i, want := range [][]string{{"aligned", "2", "0", "400ms", "7s", "3s", "390ms", "0 B"}, {"unaligned+debloat", "1", "1", "1ms", "2.0 KiB"}, {"aligned-timeout", "0"}} {
		f := strings.Fields(lines[i+1])
		for _, w := range want {
			if !slices.Contains(f, w) && !(strings.Contains(w, " ") && strings.HasSuffix(lines[i+1], w)) {
				t.Errorf("row %q lacks %q", lines[i+1], w)
			}
		}
	}
}
