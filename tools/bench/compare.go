package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"text/tabwriter"
)

// Verdicts of a comparison.
const (
	// VerdictNoise: the two min-max bands overlap, so the difference is
	// within what repeats of the same run already showed.
	VerdictNoise  = "noise"
	VerdictBetter = "better"
	VerdictWorse  = "worse"
	// VerdictNoBand: a side has a single run, so there is no band to judge
	// noise by (run with --repeat 3 or more).
	VerdictNoBand = "no band"
	// VerdictChanged: a figure with no better direction differs.
	VerdictChanged = "changed"
	VerdictSame    = "same"
)

// Comparison is one figure of one configuration in reports A and B.
type Comparison struct {
	Config string
	Figure string
	A, B   Stat
	// Ratio is B's median over A's (0 when A's is 0).
	Ratio   float64
	Verdict string
}

// Compare matches the configurations and figures that both reports have
// and judges each difference: noise when the min-max bands overlap,
// otherwise better or worse by the figure's direction (FigureUnit).
func Compare(a, b *Report) ([]Comparison, error) {
	var out []Comparison
	for _, sa := range a.Summary {
		i := slices.IndexFunc(b.Summary, func(s ConfigSummary) bool { return s.Config == sa.Config })
		if i < 0 {
			continue
		}
		sb := b.Summary[i]
		for _, name := range orderedFigures([]ConfigSummary{sa}) {
			fb, ok := sb.Figures[name]
			if !ok {
				continue
			}
			out = append(out, judge(sa.Config, name, sa.Figures[name], fb))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("bench: the reports share no configuration and figure (A has %s, B has %s)", configNames(a), configNames(b))
	}
	return out, nil
}

func configNames(r *Report) string {
	var n []string
	for _, s := range r.Summary {
		n = append(n, s.Config)
	}
	if len(n) == 0 {
		return "none"
	}
	return strings.Join(n, ", ")
}

func judge(config, name string, a, b Stat) Comparison {
	c := Comparison{Config: config, Figure: name, A: a, B: b}
	if a.Median != 0 {
		c.Ratio = b.Median / a.Median
	}
	unit, higher := FigureUnit(name)
	switch {
	case a.Median == b.Median:
		c.Verdict = VerdictSame
	case unit == "":
		c.Verdict = VerdictChanged
	case a.N < 2 || b.N < 2:
		c.Verdict = VerdictNoBand
	case a.Min <= b.Max && b.Min <= a.Max:
		c.Verdict = VerdictNoise
	case (b.Median > a.Median) == higher:
		c.Verdict = VerdictBetter
	default:
		c.Verdict = VerdictWorse
	}
	return c
}

// paramDiffs lists the parameters (by JSON name) in which the reports
// differ, and whether the machines differ, so a reader knows what else
// changed between A and B.
func paramDiffs(a, b *Report) []string {
	var ma, mb map[string]any
	ja, _ := json.Marshal(a.Params)
	jb, _ := json.Marshal(b.Params)
	_ = json.Unmarshal(ja, &ma)
	_ = json.Unmarshal(jb, &mb)
	var out []string
	for _, k := range sortedKeys(ma) {
		if k == "dir" {
			continue
		}
		if !reflect.DeepEqual(ma[k], mb[k]) {
			out = append(out, fmt.Sprintf("%s: %s -> %s", k, orNone(ma[k]), orNone(mb[k])))
		}
	}
	ma2, mb2 := a.Machine, b.Machine
	ma2.LoadAverage, mb2.LoadAverage = 0, 0
	if ma2 != mb2 {
		out = append(out, fmt.Sprintf("machine: %s (%d cores) -> %s (%d cores)", a.Machine.CPU, a.Machine.Cores, b.Machine.CPU, b.Machine.Cores))
	}
	return out
}

// PrintCompare writes the comparison as a table: A and B as "median
// (min-max)", B/A and the verdict; then a count per verdict.
func PrintCompare(w io.Writer, a, b *Report, cs []Comparison) {
	fmt.Fprintf(w, "A: %s revision %s (load %.2f)\nB: %s revision %s (load %.2f)\n", a.Started.Format("2006-01-02 15:04"), short(a.Git.Revision), a.Machine.LoadAverage,
		b.Started.Format("2006-01-02 15:04"), short(b.Git.Revision), b.Machine.LoadAverage)
	if d := paramDiffs(a, b); len(d) > 0 {
		fmt.Fprintf(w, "differences besides the code: %s\n", strings.Join(d, "; "))
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CONFIG\tFIGURE\tA\tB\tB/A\tVERDICT")
	counts := map[string]int{}
	for _, c := range cs {
		ratio := "-"
		if c.Ratio != 0 {
			ratio = fmt.Sprintf("%.2fx", c.Ratio)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.Config, c.Figure, formatStat(c.Figure, c.A), formatStat(c.Figure, c.B), ratio, c.Verdict)
		counts[c.Verdict]++
	}
	tw.Flush()
	var parts []string
	for _, v := range []string{VerdictBetter, VerdictWorse, VerdictNoise, VerdictNoBand, VerdictChanged, VerdictSame} {
		if counts[v] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[v], v))
		}
	}
	fmt.Fprintf(w, "\n%s\n", strings.Join(parts, ", "))
}

func short(rev string) string {
	if rev == "" {
		return "unknown"
	}
	return rev[:min(12, len(rev))]
}

func orNone(v any) string {
	if v == nil {
		return "none"
	}
	return fmt.Sprint(v)
}
