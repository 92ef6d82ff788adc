package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/statedhq/stated/internal/bytesize"
)

// phaseOrder ranks a figure by its phase so tables read in run order.
func phaseOrder(name string) int {
	for i, p := range []string{"load.", "checkpoint1.", "run.", "checkpoint2.", "restore.", "rescale."} {
		if strings.HasPrefix(name, p) {
			return i
		}
	}
	return 99
}

// orderedFigures returns the figure names of the summaries in phase order;
// counts (".ops") are left to the JSON.
func orderedFigures(sum []ConfigSummary) []string {
	seen := map[string]bool{}
	var names []string
	for _, s := range sum {
		for k := range s.Figures {
			if !seen[k] && !strings.HasSuffix(k, ".ops") {
				seen[k] = true
				names = append(names, k)
			}
		}
	}
	slices.SortFunc(names, func(a, b string) int {
		if d := phaseOrder(a) - phaseOrder(b); d != 0 {
			return d
		}
		// Totals before the per-kind figures.
		if da, db := strings.Count(a, "."), strings.Count(b, "."); da != db {
			return da - db
		}
		pa, sa := splitLast(a)
		pb, sb := splitLast(b)
		if c := strings.Compare(pa, pb); c != 0 {
			return c
		}
		if d := suffixOrder(sa) - suffixOrder(sb); d != 0 {
			return d
		}
		return strings.Compare(sa, sb)
	})
	return names
}

func splitLast(name string) (prefix, last string) {
	i := strings.LastIndexByte(name, '.')
	return name[:i+1], name[i+1:]
}

// suffixOrder puts a group's figures in reading order: throughput, then
// latency percentiles, then the rest by name.
func suffixOrder(s string) int {
	order := []string{"ops_per_sec", "cpu_us_per_op", "p50_us", "p99_us", "p999_us", "s", "ms",
		"close_ms", "sync_ms", "async_ms", "complete_ms", "total_ms", "checkpointed_bytes", "full_bytes",
		"requests", "put_requests", "get_requests", "list_requests", "delete_requests", "head_requests", "throttled_requests",
		"requests_per_sec", "put_requests_per_sec", "get_requests_per_sec", "list_requests_per_sec", "delete_requests_per_sec",
		"head_requests_per_sec", "requests_per_gib_hour", "dollars_per_month", "dollars_per_month_at_1_per_min"}
	if i := slices.Index(order, s); i >= 0 {
		return i
	}
	return len(order)
}

// formatValue prints a figure in its unit, compactly.
func formatValue(name string, v float64) string {
	unit, _ := FigureUnit(name)
	switch unit {
	case "B":
		return bytesize.Format(int64(v))
	case "ops/s":
		switch {
		case v >= 1e6:
			return fmt.Sprintf("%.2fM", v/1e6)
		case v >= 1e3:
			return fmt.Sprintf("%.1fk", v/1e3)
		}
		return fmt.Sprintf("%.0f", v)
	}
	switch {
	case v == math.Trunc(v) && math.Abs(v) < 1e6:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func formatStat(name string, s Stat) string {
	if s.N <= 1 || s.Min == s.Max {
		return formatValue(name, s.Median)
	}
	return fmt.Sprintf("%s (%s-%s)", formatValue(name, s.Median), formatValue(name, s.Min), formatValue(name, s.Max))
}

// PrintTable writes the summary as a table: a row per figure, a column per
// configuration; with repeats each cell is "median (min-max)". Then the
// ratios to the baseline, if any.
func PrintTable(w io.Writer, r *Report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	hdr := []string{"FIGURE", "UNIT"}
	for _, s := range r.Summary {
		hdr = append(hdr, strings.ToUpper(s.Config))
	}
	fmt.Fprintln(tw, strings.Join(hdr, "\t"))
	for _, name := range orderedFigures(r.Summary) {
		unit, _ := FigureUnit(name)
		row := []string{name, unit}
		for _, s := range r.Summary {
			if st, ok := s.Figures[name]; ok {
				row = append(row, formatStat(name, st))
			} else {
				row = append(row, "-")
			}
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tw.Flush()
	if len(r.Ratios) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FIGURE\tCONFIG / BASELINE\tRATIO (medians)")
	for _, rt := range r.Ratios {
		fmt.Fprintf(tw, "%s\t%s / %s\t%.2fx\n", rt.Figure, rt.Config, rt.Baseline, rt.Value)
	}
	tw.Flush()
}

// PrintHeader writes what ran where: parameters, machine and revision.
func PrintHeader(w io.Writer, r *Report) {
	p := r.Params
	where := "embedded daemon per run"
	if p.Socket != "" {
		where = "daemon at " + p.Socket
	}
	run := p.Duration.String()
	if p.Ops > 0 {
		run = fmt.Sprintf("%d ops", p.Ops)
	}
	e := p.Effective
	fmt.Fprintf(w, "workload %s: %d keys, %d tasks, %d-byte values, %s keys (skew %.2f); batch %d, %d in flight per task; run %s after %s warm-up; %d repeat(s); %s\n",
		p.Workload, p.Keys, p.Tasks, e.ValueSize, e.Distribution, e.Skew, p.Batch, p.InFlight, run, p.Warmup, p.Repeat, where)
	m := r.Machine
	rev := r.Git.Revision
	if rev == "" {
		rev = "unknown"
	} else if r.Git.Modified {
		rev += " (modified)"
	}
	fmt.Fprintf(w, "machine: %s, %d cores, %s memory, kernel %s, %s, load %.2f; revision %s\n\n",
		m.CPU, m.Cores, bytesize.Format(m.MemoryBytes), m.Kernel, m.Go, m.LoadAverage, rev)
}
