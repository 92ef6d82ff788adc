package webui

import (
	"fmt"
	"html"
	"html/template"
	"strconv"
	"strings"
	"time"

	"github.com/statedhq/stated/internal/bytesize"
)

// pageData is what page.html renders.
type pageData struct {
	State
	CSS    template.CSS
	states bool // the checkpoint page is served
}

// StateLinks says whether completed checkpoints link to their state page.
func (p pageData) StateLinks() bool { return p.states }

// Chart returns the SVG chart kind ("duration" or "size") of job.
func (p pageData) Chart(kind, job string) template.HTML {
	return p.charts[kind[:1]+":"+job]
}

// Refresh is the reload period in seconds (0: none).
func (p pageData) Refresh() int { return p.refresh }

var funcs = template.FuncMap{
	"bytes":  func(n int64) string { return bytesize.Format(n) },
	"msText": msText,
	"optMS": func(v *float64) string {
		if v == nil {
			return "-"
		}
		return msText(*v)
	},
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.Local().Format("2006-01-02 15:04:05")
	},
	"num":   func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) },
	"pct":   func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) + "%" },
	"ratio": func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) },
	// width is a share bar's length in pixels (100% = 200).
	"width":   func(v float64) int { return int(min(max(v, 0), 100) * 2) },
	"upper":   strings.ToUpper,
	"rate":    rateText,
	"dollars": dollarsText,
	"duration": func(seconds float64) string {
		return time.Duration(seconds * float64(time.Second)).Round(time.Second).String()
	},
}

// rateText is a rate with three significant digits ("-" for none).
func rateText(v float64) string {
	if v == 0 {
		return "-"
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// dollarsText is a price: cents for a dollar or more, else four decimals
// (request prices are fractions of a cent).
func dollarsText(v float64) string {
	if v >= 1 || v == 0 {
		return "$" + strconv.FormatFloat(v, 'f', 2, 64)
	}
	return "$" + strconv.FormatFloat(v, 'f', 4, 64)
}

func itoa(n int) string { return strconv.Itoa(n) }

// msText is a duration in milliseconds for people.
func msText(v float64) string {
	switch {
	case v >= 60_000:
		return (time.Duration(v) * time.Millisecond).Round(time.Second).String()
	case v >= 1000:
		return strconv.FormatFloat(v/1000, 'f', 2, 64) + " s"
	case v > 0 && v < 1:
		return strconv.FormatFloat(v*1000, 'f', 0, 64) + " µs"
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " ms"
}

// Chart geometry, in SVG user units.
const (
	chartW, chartH = 640, 160
	padL, padB     = 56, 22
	padT, padR     = 10, 8
)

// durationChart is a bar per checkpoint, oldest left: its duration, red
// when it failed; completed ones split into the sync part (dark) when
// known.
func durationChart(j Job) template.HTML {
	cps := oldestFirst(j.Checkpoints)
	var peak float64
	for _, c := range cps {
		peak = max(peak, c.DurationMS)
	}
	var b strings.Builder
	open(&b, "duration", j.Name, "checkpoint duration of job "+j.Name)
	axis(&b, peak, msText)
	bars(&b, len(cps), func(i int, x, w float64) {
		c := cps[i]
		h := scale(c.DurationMS, peak)
		class := "bar ok"
		if c.Failed {
			class = "bar failed"
		} else if c.Status == "in_progress" {
			class = "bar running"
		}
		tip := fmt.Sprintf("checkpoint %d (%s): %s", c.ID, c.Status, msText(c.DurationMS))
		if c.SyncMS != nil {
			tip += fmt.Sprintf(", sync %s, async %s", msText(*c.SyncMS), msText(*c.AsyncMS))
		}
		if c.Reason != "" {
			tip += ": " + c.Reason
		}
		rect(&b, class, c.ID, x, w, h, tip)
		if c.SyncMS != nil && !c.Failed {
			rect(&b, "bar sync", c.ID, x, w, scale(*c.SyncMS, peak), "")
		}
	})
	xLabels(&b, cps)
	b.WriteString("</svg>")
	return template.HTML(b.String())
}

// sizeChart draws per checkpoint the full size (light) with the
// checkpointed size (what it uploaded, dark) in front.
func sizeChart(j Job) template.HTML {
	cps := oldestFirst(j.Checkpoints)
	var peak float64
	for _, c := range cps {
		peak = max(peak, float64(c.FullSize), float64(c.CheckpointedSize))
	}
	var b strings.Builder
	open(&b, "size", j.Name, "checkpoint size of job "+j.Name)
	axis(&b, peak, func(v float64) string { return bytesize.Format(int64(v)) })
	bars(&b, len(cps), func(i int, x, w float64) {
		c := cps[i]
		if c.Failed {
			rect(&b, "bar failed-size", c.ID, x, w, 3, fmt.Sprintf("checkpoint %d %s: no size", c.ID, c.Status))
			return
		}
		rect(&b, "bar full", c.ID, x, w, scale(float64(c.FullSize), peak),
			fmt.Sprintf("checkpoint %d: full %s, checkpointed %s", c.ID, bytesize.Format(c.FullSize), bytesize.Format(c.CheckpointedSize)))
		rect(&b, "bar checkpointed", c.ID, x+w*0.2, w*0.6, scale(float64(c.CheckpointedSize), peak), "")
	})
	xLabels(&b, cps)
	b.WriteString("</svg>")
	return template.HTML(b.String())
}

func oldestFirst(cps []Checkpoint) []Checkpoint {
	out := make([]Checkpoint, len(cps))
	for i, c := range cps {
		out[len(cps)-1-i] = c
	}
	return out
}

func open(b *strings.Builder, kind, job, label string) {
	fmt.Fprintf(b, `<svg class="chart" data-chart="%s" data-job="%s" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="%s">`,
		kind, html.EscapeString(job), chartW, chartH, chartW, chartH, html.EscapeString(label))
}

// axis draws the y axis with its top value.
func axis(b *strings.Builder, peak float64, format func(float64) string) {
	bottom := chartH - padB
	fmt.Fprintf(b, `<line class="axis" x1="%d" y1="%d" x2="%d" y2="%d"/>`, padL, padT, padL, bottom)
	fmt.Fprintf(b, `<line class="axis" x1="%d" y1="%d" x2="%d" y2="%d"/>`, padL, bottom, chartW-padR, bottom)
	fmt.Fprintf(b, `<text class="tick" x="%d" y="%d" text-anchor="end">%s</text>`, padL-4, padT+8, html.EscapeString(format(peak)))
	fmt.Fprintf(b, `<text class="tick" x="%d" y="%d" text-anchor="end">0</text>`, padL-4, bottom)
}

// bars lays out n bars across the plot area.
func bars(b *strings.Builder, n int, draw func(i int, x, w float64)) {
	if n == 0 {
		fmt.Fprintf(b, `<text class="empty" x="%d" y="%d">no checkpoints yet</text>`, padL+10, chartH/2)
		return
	}
	slot := float64(chartW-padL-padR) / float64(n)
	w := max(1, slot*0.7)
	for i := range n {
		draw(i, float64(padL)+slot*float64(i)+(slot-w)/2, w)
	}
}

// scale is v's bar height for a plot whose top is peak (at least 1 unit
// for a non-zero value, so that it shows).
func scale(v, peak float64) float64 {
	if peak <= 0 || v <= 0 {
		return 0
	}
	return max(1, v/peak*float64(chartH-padB-padT))
}

func rect(b *strings.Builder, class string, id uint64, x, w, h float64, tip string) {
	y := float64(chartH-padB) - h
	fmt.Fprintf(b, `<rect class="%s" data-id="%d" x="%.1f" y="%.1f" width="%.1f" height="%.1f">`, class, id, x, y, w, h)
	if tip != "" {
		fmt.Fprintf(b, `<title>%s</title>`, html.EscapeString(tip))
	}
	b.WriteString("</rect>")
}

// xLabels names the first and last checkpoint under the axis.
func xLabels(b *strings.Builder, cps []Checkpoint) {
	if len(cps) == 0 {
		return
	}
	y := chartH - 6
	fmt.Fprintf(b, `<text class="tick" x="%d" y="%d">#%d</text>`, padL, y, cps[0].ID)
	if len(cps) > 1 {
		fmt.Fprintf(b, `<text class="tick" x="%d" y="%d" text-anchor="end">#%d</text>`, chartW-padR, y, cps[len(cps)-1].ID)
	}
}
