package bench

import (
	"fmt"
	"html"
	"math"
	"os"
	"strings"

	"github.com/statedhq/stated/internal/bytesize"
)

// WritePlot writes a self-contained HTML page (inline SVG, no script, no
// external resource) with charts of rep: throughput per operation kind and
// configuration, latency percentiles, and checkpoint, restore and rescale
// times. Bars are medians; whiskers span min to max over the repeats.
func WritePlot(path string, rep *Report) error {
	if err := os.WriteFile(path, []byte(PlotHTML(rep)), 0o644); err != nil {
		return fmt.Errorf("bench: write plot: %w", err)
	}
	return nil
}

// chartBar is one bar: a series (configuration or percentile) in a group.
type chartBar struct {
	series string
	st     Stat
}

type chartGroup struct {
	label string
	bars  []chartBar
}

var palette = []string{"#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#ff9da6", "#9d755d"}

// PlotHTML is the page WritePlot writes.
func PlotHTML(rep *Report) string {
	var b strings.Builder
	p := rep.Params
	b.WriteString("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>stated bench: ")
	b.WriteString(html.EscapeString(p.Workload))
	b.WriteString("</title><style>body{font-family:sans-serif;margin:2em;color:#222}svg{display:block;margin:1em 0 2em}p.meta{color:#555;font-size:90%}</style></head><body>\n")
	fmt.Fprintf(&b, "<h1>stated bench: %s</h1>\n", html.EscapeString(p.Workload))
	fmt.Fprintf(&b, "<p class=\"meta\">%d keys, %d tasks, %d-byte values, %s keys; batch %d, %d in flight per task; %d repeat(s). %s, %d cores, %s; %s; revision %s. Bars are medians, whiskers min to max.</p>\n",
		p.Keys, p.Tasks, p.Effective.ValueSize, html.EscapeString(p.Effective.Distribution), p.Batch, p.InFlight, p.Repeat,
		html.EscapeString(rep.Machine.CPU), rep.Machine.Cores, html.EscapeString(bytesize.Format(rep.Machine.MemoryBytes)),
		html.EscapeString(rep.Machine.Go), html.EscapeString(rep.Git.Revision))

	kinds := runKinds(rep.Summary)
	// Throughput: a group per operation kind (and the total), a bar per
	// configuration.
	var tput []chartGroup
	for _, k := range append([]string{""}, kinds...) {
		name, label := "run.ops_per_sec", "all"
		if k != "" {
			name, label = "run."+k+".ops_per_sec", k
		}
		tput = append(tput, chartGroup{label: label, bars: seriesOf(rep.Summary, name)})
	}
	b.WriteString(barChart("Throughput", "ops/s", false, tput))

	// Latency: a chart per kind, a group per configuration, a bar per
	// percentile; log scale, since percentiles span decades.
	for _, k := range kinds {
		var groups []chartGroup
		for _, s := range rep.Summary {
			g := chartGroup{label: s.Config}
			for _, q := range []string{"p50", "p99", "p999"} {
				if st, ok := s.Figures["run."+k+"."+q+"_us"]; ok {
					g.bars = append(g.bars, chartBar{series: q, st: st})
				}
			}
			groups = append(groups, g)
		}
		b.WriteString(barChart("Latency of "+k+" (issue to answer)", "µs", true, groups))
	}

	var times []chartGroup
	for _, f := range []string{"checkpoint1.total_ms", "checkpoint2.sync_ms", "checkpoint2.async_ms", "checkpoint2.total_ms", "restore.ms", "rescale.ms"} {
		if bars := seriesOf(rep.Summary, f); len(bars) > 0 {
			times = append(times, chartGroup{label: f, bars: bars})
		}
	}
	if len(times) > 0 {
		b.WriteString(barChart("Checkpoint, restore and rescale", "ms", false, times))
	}
	b.WriteString("</body></html>\n")
	return b.String()
}

// runKinds lists the operation kinds with figures, in first-seen order.
func runKinds(sum []ConfigSummary) []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range sum {
		for _, name := range sortedKeys(s.Figures) {
			rest, ok := strings.CutPrefix(name, "run.")
			if !ok || !strings.HasSuffix(rest, ".ops_per_sec") {
				continue
			}
			k := strings.TrimSuffix(rest, ".ops_per_sec")
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	return out
}

func seriesOf(sum []ConfigSummary, name string) []chartBar {
	var out []chartBar
	for _, s := range sum {
		if st, ok := s.Figures[name]; ok {
			out = append(out, chartBar{series: s.Config, st: st})
		}
	}
	return out
}

// barChart draws horizontal bars: a block of bars per group, one colour
// per series, the value printed at the end of each bar.
func barChart(title, unit string, logScale bool, groups []chartGroup) string {
	const (
		left, right, barH, gap, top, width = 190.0, 120.0, 16.0, 14.0, 52.0, 900.0
	)
	var series []string
	seen := map[string]bool{}
	var hi, lo float64 = 0, math.Inf(1)
	nbars := 0
	for _, g := range groups {
		for _, br := range g.bars {
			if !seen[br.series] {
				seen[br.series] = true
				series = append(series, br.series)
			}
			hi = max(hi, br.st.Max, br.st.Median)
			if br.st.Min > 0 {
				lo = min(lo, br.st.Min)
			}
			nbars++
		}
	}
	if nbars == 0 || hi <= 0 {
		return ""
	}
	plotW := width - left - right
	scale := func(v float64) float64 { return v / hi * plotW }
	if logScale {
		lo = math.Pow(10, math.Floor(math.Log10(math.Min(lo, hi))))
		span := math.Log10(hi) - math.Log10(lo)
		if span <= 0 {
			span = 1
		}
		scale = func(v float64) float64 {
			if v <= lo {
				return 0
			}
			return (math.Log10(v) - math.Log10(lo)) / span * plotW
		}
	}
	height := top + float64(nbars)*barH + float64(len(groups))*gap + 20
	var b strings.Builder
	fmt.Fprintf(&b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-size=\"12\">\n", width, height)
	scaleNote := ""
	if logScale {
		scaleNote = ", log scale"
	}
	fmt.Fprintf(&b, "<text x=\"0\" y=\"18\" font-size=\"16\" font-weight=\"bold\">%s</text><text x=\"0\" y=\"36\" fill=\"#555\">%s%s</text>\n",
		html.EscapeString(title), html.EscapeString(unit), scaleNote)
	for i, s := range series {
		x := left + float64(i)*110
		fmt.Fprintf(&b, "<rect x=\"%.0f\" y=\"26\" width=\"12\" height=\"12\" fill=\"%s\"/><text x=\"%.0f\" y=\"36\">%s</text>\n",
			x, palette[i%len(palette)], x+16, html.EscapeString(s))
	}
	y := top
	for _, g := range groups {
		if len(g.bars) == 0 {
			continue
		}
		fmt.Fprintf(&b, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", left-8, y+barH*float64(len(g.bars))/2+4, html.EscapeString(g.label))
		for _, br := range g.bars {
			ci := 0
			for i, s := range series {
				if s == br.series {
					ci = i
				}
			}
			w := scale(br.st.Median)
			fmt.Fprintf(&b, "<rect x=\"%.0f\" y=\"%.1f\" width=\"%.1f\" height=\"%.0f\" fill=\"%s\"><title>%s %s: %s</title></rect>\n",
				left, y+1, w, barH-2, palette[ci%len(palette)], html.EscapeString(g.label), html.EscapeString(br.series), html.EscapeString(formatStat(unitName(unit), br.st)))
			if br.st.N > 1 && br.st.Max > br.st.Min {
				x0, x1 := left+scale(br.st.Min), left+scale(br.st.Max)
				fmt.Fprintf(&b, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#222\"/>\n", x0, x1, y+barH/2, y+barH/2)
			}
			fmt.Fprintf(&b, "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", left+max(w, scale(br.st.Max))+6, y+barH-4, html.EscapeString(formatValue(unitName(unit), br.st.Median)))
			y += barH
		}
		y += gap
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// unitName returns a figure name whose unit is unit, so formatValue
// formats chart values as the table does.
func unitName(unit string) string {
	switch unit {
	case "ops/s":
		return "x_per_sec"
	case "µs":
		return "x_us"
	case "ms":
		return "x_ms"
	}
	return "x"
}
