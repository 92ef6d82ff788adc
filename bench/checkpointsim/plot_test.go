package checkpointsim

import (
	"encoding/xml"
	"errors"
	"io"
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
