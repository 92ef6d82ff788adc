package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/statedhq/stated/internal/buildinfo"
)

// ReportVersion is the version of the JSON report's layout; compare
// refuses reports of another version.
const ReportVersion = 1

// Report is everything one "stated bench run" measured: what --json writes
// and compare and the plot read.
type Report struct {
	Version int       `json:"version"`
	Started time.Time `json:"started"`
	// Params are the run's parameters, as given and with defaults filled.
	Params Params `json:"params"`
	// Machine is where it ran.
	Machine Machine `json:"machine"`
	// Git is the revision of the stated binary that ran it.
	Git Git `json:"git"`
	// Runs holds each run's figures, in the order they ran (repeats
	// interleaved across configurations).
	Runs []Run `json:"runs"`
	// Summary is min/median/max of every figure per configuration, in the
	// matrix's order.
	Summary []ConfigSummary `json:"summary"`
	// Ratios compare each configuration's medians to the baseline's.
	Ratios []Ratio `json:"ratios,omitempty"`
}

// Run is one configuration's run.
type Run struct {
	Config string `json:"config"`
	Repeat int    `json:"repeat"`
	// Figures by name (see FigureUnit for the naming); a phase that did
	// not run has no figures.
	Figures map[string]float64 `json:"figures"`
}

// ConfigSummary is every figure of one configuration over its repeats.
type ConfigSummary struct {
	Config  string          `json:"config"`
	Figures map[string]Stat `json:"figures"`
}

// Stat is a figure's spread over repeats.
type Stat struct {
	Min    float64 `json:"min"`
	Median float64 `json:"median"`
	Max    float64 `json:"max"`
	N      int     `json:"n"`
}

// Ratio is a configuration's median over the baseline's for one figure.
type Ratio struct {
	Config   string  `json:"config"`
	Baseline string  `json:"baseline"`
	Figure   string  `json:"figure"`
	Value    float64 `json:"value"`
}

// Machine describes the host.
type Machine struct {
	CPU         string  `json:"cpu"`
	Cores       int     `json:"cores"`
	MemoryBytes int64   `json:"memory_bytes"`
	Kernel      string  `json:"kernel"`
	OS          string  `json:"os"`
	Arch        string  `json:"arch"`
	Go          string  `json:"go"`
	LoadAverage float64 `json:"load_average_1m"`
}

// Git is the source revision.
type Git struct {
	Revision string `json:"revision"`
	Time     string `json:"time,omitempty"`
	Modified bool   `json:"modified"`
	// Source says where Revision came from: "build info" (the binary's
	// embedded VCS settings), "git" (git rev-parse in the working
	// directory, when the binary carries none, e.g. go run with
	// -buildvcs=false) or "unknown".
	Source string `json:"source"`
}

// FigureUnit returns a figure's unit and whether higher is better, from
// its name's last word (after the last '.' or '_'): ops_per_sec (ops/s),
// us_per_op, us, ms, s, bytes. Other figures (counts, parallelism) have
// no unit and no direction.
func FigureUnit(name string) (unit string, higherBetter bool) {
	has := func(suffix string) bool {
		return strings.HasSuffix(name, "."+suffix) || strings.HasSuffix(name, "_"+suffix)
	}
	switch {
	case has("ops_per_sec"):
		return "ops/s", true
	case has("requests_per_sec"):
		return "req/s", false
	case has("requests_per_gib_hour"):
		return "req/GiB·h", false
	case has("requests"):
		return "req", false
	case has("dollars_per_month"), has("dollars_per_month_at_1_per_min"):
		return "$/month", false
	case has("us_per_op"):
		return "µs/op", false
	case has("us"):
		return "µs", false
	case has("ms"):
		return "ms", false
	case has("s"):
		return "s", false
	case has("bytes"):
		return "B", false
	}
	return "", false
}

// summarize computes every configuration's spread, in the order configs
// lists them.
func summarize(configs []string, runs []Run) []ConfigSummary {
	out := make([]ConfigSummary, 0, len(configs))
	for _, c := range configs {
		vals := map[string][]float64{}
		for _, r := range runs {
			if r.Config != c {
				continue
			}
			for k, v := range r.Figures {
				vals[k] = append(vals[k], v)
			}
		}
		s := ConfigSummary{Config: c, Figures: map[string]Stat{}}
		for k, vs := range vals {
			s.Figures[k] = statOf(vs)
		}
		out = append(out, s)
	}
	return out
}

func statOf(vs []float64) Stat {
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return Stat{Min: s[0], Median: med, Max: s[n-1], N: n}
}

// ratios divides each configuration's run throughput and CPU per
// operation by the baseline's.
func ratios(sum []ConfigSummary, baseline string) []Ratio {
	var base *ConfigSummary
	for i := range sum {
		if sum[i].Config == baseline {
			base = &sum[i]
		}
	}
	if base == nil {
		return nil
	}
	var out []Ratio
	for _, s := range sum {
		if s.Config == baseline {
			continue
		}
		for _, name := range sortedKeys(s.Figures) {
			// Throughput and CPU only: the baseline answers each operation
			// at once, so a latency ratio would measure the client's queue.
			if !strings.HasPrefix(name, "run.") || !strings.HasSuffix(name, "_per_sec") && !strings.HasSuffix(name, "_per_op") {
				continue
			}
			b, ok := base.Figures[name]
			if !ok || b.Median == 0 {
				continue
			}
			out = append(out, Ratio{Config: s.Config, Baseline: baseline, Figure: name, Value: s.Figures[name].Median / b.Median})
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// WriteJSON writes r to path (indented).
func WriteJSON(path string, r *Report) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("bench: encode report: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("bench: write report: %w", err)
	}
	return nil
}

// ReadJSON reads a report that WriteJSON wrote.
func ReadJSON(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("bench: read report: %w", err)
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("bench: %s is not a stated bench report: %w", path, err)
	}
	if r.Version != ReportVersion {
		return nil, fmt.Errorf("bench: %s has report version %d; this build reads version %d", path, r.Version, ReportVersion)
	}
	return &r, nil
}

// machineInfo reads the host's description from /proc; what it cannot read
// stays empty.
func machineInfo() Machine {
	m := Machine{Cores: runtime.NumCPU(), OS: runtime.GOOS, Arch: runtime.GOARCH, Go: runtime.Version()}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				if kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64); err == nil {
					m.MemoryBytes = kb << 10
				}
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	m.LoadAverage = loadAverage()
	return m
}

func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// gitInfo takes the revision from the binary's build info; without one it
// asks git about the working directory (bounded to 2 s).
func gitInfo(ctx context.Context) Git {
	if in := buildinfo.Read(); in.Revision != "" {
		return Git{Revision: in.Revision, Time: in.Time, Modified: in.Modified, Source: "build info"}
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "git", "rev-parse", "HEAD").Output(); err == nil {
		g := Git{Revision: strings.TrimSpace(string(out)), Source: "git"}
		if st, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil {
			g.Modified = len(strings.TrimSpace(string(st))) > 0
		}
		return g
	}
	return Git{Source: "unknown"}
}
