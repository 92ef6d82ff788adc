package checkpointsim

import (
	"fmt"
	"html"
	"math"
	"os"
	"strings"
)

// palette: a color per run, the same in both panels.
var palette = []string{"#4c78a8", "#9ecae9", "#e45756", "#ff9d98", "#54a24b", "#88d27a", "#b279a2", "#f58518"}

type point struct {
	x, y   float64
	filled bool // an unaligned checkpoint
}

type series struct {
	name   string
	color  string
	dashed bool // with debloating
	points []point
}

// PlotSVG draws rep as a standalone SVG image: per checkpoint, the end-to-end
// duration and the persisted in-flight data of every run; filled markers
// are unaligned checkpoints, hollow ones aligned.
func PlotSVG(rep *Report) string {
	var dur, inflight []series
	for i, r := range rep.Runs {
		d := series{name: r.Name(), color: palette[i%len(palette)], dashed: r.Debloat}
		f := d
		for _, c := range r.Checkpoints {
			d.points = append(d.points, point{float64(c.ID), c.DurationMs / 1e3, c.Unaligned})
			f.points = append(f.points, point{float64(c.ID), float64(c.InFlightBytes) / 1024, c.Unaligned})
		}
		dur, inflight = append(dur, d), append(inflight, f)
	}
	const w, h, panelW, panelH = 1000, 470, 400, 300
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	o := rep.Options
	fmt.Fprintf(&b, `<text x="20" y="22" font-size="14" font-weight="bold">stated bench checkpoint-sim: %d sources at %.0f rec/s, sink %s/record, %d buffers x %d records, timeout %s</text>`+"\n",
		o.Parallelism, o.SourceRate, o.SinkCost, o.Buffers, o.RecordsPerBuffer, o.Timeout)
	panel(&b, 60, 50, panelW, panelH, "End-to-end duration (simulated s)", dur)
	panel(&b, 560, 50, panelW, panelH, "Persisted in-flight data (KiB)", inflight)
	// Legend: four entries a row.
	for i, s := range dur {
		x, y := 60+float64(i%4)*230, 400+float64(i/4)*20
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="%s" stroke-width="2"%s/><text x="%.0f" y="%.0f">%s</text>`+"\n",
			x, y, x+24, y, s.color, dash(s.dashed), x+30, y+4, html.EscapeString(s.name))
	}
	y := 400 + float64((len(dur)+3)/4)*20
	fmt.Fprintf(&b, `<circle cx="64" cy="%.0f" r="3.5" fill="#444"/><text x="72" y="%.0f">unaligned checkpoint</text>`, y, y+4)
	fmt.Fprintf(&b, `<circle cx="294" cy="%.0f" r="3.5" fill="white" stroke="#444"/><text x="302" y="%.0f">aligned checkpoint</text>`+"\n", y, y+4)
	b.WriteString("</svg>\n")
	return b.String()
}

// panel draws a line chart of ss in the box (x0, y0, w, h).
func panel(b *strings.Builder, x0, y0, w, h float64, title string, ss []series) {
	maxX, maxY := 1.0, 0.0
	for _, s := range ss {
		for _, p := range s.points {
			maxX, maxY = math.Max(maxX, p.x), math.Max(maxY, p.y)
		}
	}
	maxY = niceCeil(maxY)
	px := func(x float64) float64 { return x0 + (x-1)/math.Max(maxX-1, 1)*w }
	py := func(y float64) float64 { return y0 + h - y/maxY*h }
	fmt.Fprintf(b, `<text x="%.0f" y="%.0f" font-weight="bold">%s</text>`+"\n", x0, y0-10, html.EscapeString(title))
	for i := 0; i <= 4; i++ {
		y := maxY * float64(i) / 4
		fmt.Fprintf(b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#ddd"/><text x="%.0f" y="%.1f" text-anchor="end">%s</text>`+"\n",
			x0, py(y), x0+w, py(y), x0-6, py(y)+4, tick(y))
	}
	step := math.Max(1, math.Ceil((maxX-1)/10))
	for x := 1.0; x <= maxX; x += step {
		fmt.Fprintf(b, `<text x="%.1f" y="%.0f" text-anchor="middle">%g</text>`+"\n", px(x), y0+h+16, x)
	}
	fmt.Fprintf(b, `<text x="%.0f" y="%.0f" text-anchor="middle">checkpoint</text>`+"\n", x0+w/2, y0+h+32)
	fmt.Fprintf(b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#888"/>`+"\n", x0, y0, w, h)
	for _, s := range ss {
		var pts []string
		for _, p := range s.points {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(p.x), py(p.y)))
		}
		fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>`+"\n", s.color, dash(s.dashed), strings.Join(pts, " "))
		for _, p := range s.points {
			fill := "white"
			if p.filled {
				fill = s.color
			}
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s" stroke="%s"/>`+"\n", px(p.x), py(p.y), fill, s.color)
		}
	}
}

func dash(dashed bool) string {
	if dashed {
		return ` stroke-dasharray="6 3"`
	}
	return ""
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten (1 for 0).
func niceCeil(v float64) float64 {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func tick(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2g", v)
}

// WritePlot writes PlotSVG(rep) to path.
func WritePlot(path string, rep *Report) error {
	if err := os.WriteFile(path, []byte(PlotSVG(rep)), 0o644); err != nil {
		return fmt.Errorf("checkpointsim: write plot: %w", err)
	}
	return nil
}
