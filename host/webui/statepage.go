package webui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"html/template"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/inspect"
	"github.com/statedhq/stated/internal/bytesize"
)

// StateReader reads what a completed, retained checkpoint holds, per
// state and per key group (the node's reader: inspect over the
// checkpoint store, bounded in memory, time and concurrency).
type StateReader interface {
	CheckpointState(ctx context.Context, job string, id uint64) (*inspect.Summary, error)
}

// CheckpointState is a checkpoint's state by size: the checkpoint page
// and /ui/api/checkpoint serve it.
type CheckpointState struct {
	Job            string         `json:"job"`
	ID             uint64         `json:"id"`
	MaxParallelism int            `json:"maxParallelism"`
	Entries        int64          `json:"entries"`
	Bytes          int64          `json:"bytes"`
	States         []StateSize    `json:"states"`
	Operators      []OperatorHeat `json:"operators"`
	// Took is how long the read took (0: answered from the cache).
	TookMS float64 `json:"tookMs"`
}

// StateSize is one state of one operator.
type StateSize struct {
	Operator string `json:"operator"`
	State    string `json:"state"`
	Kind     string `json:"kind"`
	Entries  int64  `json:"entries"`
	Bytes    int64  `json:"bytes"`
	// Share is its part of the checkpoint's bytes, in percent.
	Share float64 `json:"share"`
}

// OperatorHeat is one operator's key groups: the non-empty ones, in
// key-group order.
type OperatorHeat struct {
	Operator  string         `json:"operator"`
	KeyGroups []KeyGroupSize `json:"keyGroups"`
	// Hottest is the key group with the most bytes; Skew its bytes over
	// the mean of the operator's key groups (1: even).
	Hottest int     `json:"hottest"`
	Skew    float64 `json:"skew"`
}

// KeyGroupSize is one key group of one operator.
type KeyGroupSize struct {
	KeyGroup int   `json:"keyGroup"`
	Entries  int64 `json:"entries"`
	Bytes    int64 `json:"bytes"`
}

// checkpointState shapes a summary for the page.
func checkpointState(job string, id uint64, s *inspect.Summary) CheckpointState {
	cs := CheckpointState{Job: job, ID: id, MaxParallelism: s.MaxParallelism, Entries: s.Total.Entries, Bytes: s.Total.Bytes}
	for _, st := range s.States {
		cs.States = append(cs.States, StateSize{Operator: st.Operator, State: st.State, Kind: st.Kind.String(),
			Entries: st.Entries, Bytes: st.Bytes, Share: float64(st.Bytes) * 100 / float64(max(1, s.Total.Bytes))})
	}
	byOp := map[string]*OperatorHeat{}
	for _, st := range s.States {
		if byOp[st.Operator] == nil {
			byOp[st.Operator] = &OperatorHeat{Operator: st.Operator, Hottest: -1}
		}
	}
	for _, g := range s.KeyGroups {
		op := byOp[g.Operator]
		if op == nil {
			op = &OperatorHeat{Operator: g.Operator, Hottest: -1}
			byOp[g.Operator] = op
		}
		op.KeyGroups = append(op.KeyGroups, KeyGroupSize{KeyGroup: g.KeyGroup, Entries: g.Entries, Bytes: g.Bytes})
	}
	for _, op := range byOp {
		var total, hot int64
		for _, g := range op.KeyGroups {
			total += g.Bytes
			if g.Bytes > hot {
				hot, op.Hottest = g.Bytes, g.KeyGroup
			}
		}
		if total > 0 && s.MaxParallelism > 0 {
			op.Skew = float64(hot) / (float64(total) / float64(s.MaxParallelism))
		}
		cs.Operators = append(cs.Operators, *op)
	}
	sort.Slice(cs.Operators, func(i, j int) bool { return cs.Operators[i].Operator < cs.Operators[j].Operator })
	return cs
}

// stateTimeout bounds one request's wait for the reader; the reader
// bounds the read itself.
const stateTimeout = 5 * time.Minute

// readCheckpointState answers /ui/api/checkpoint and /ui/checkpoint: the
// query names the job and the checkpoint id. It writes the error itself
// and returns ok=false.
func readCheckpointState(w http.ResponseWriter, r *http.Request, src Source) (CheckpointState, bool) {
	job := r.URL.Query().Get("job")
	id, err := strconv.ParseUint(r.URL.Query().Get("id"), 10, 64)
	if err != nil || catalog.ValidateJob(job) != nil || id == 0 {
		http.Error(w, "webui: give ?job=<job>&id=<checkpoint id> of a retained completed checkpoint", http.StatusBadRequest)
		return CheckpointState{}, false
	}
	if src.States == nil {
		http.Error(w, "webui: this page has no state reader", http.StatusNotImplemented)
		return CheckpointState{}, false
	}
	ctx, cancel := context.WithTimeout(r.Context(), stateTimeout)
	defer cancel()
	start := time.Now()
	s, err := src.States.CheckpointState(ctx, job, id)
	if err != nil {
		code := http.StatusInternalServerError
		switch {
		case errors.Is(err, backend.ErrNotFound) || errors.Is(err, catalog.ErrNotFound):
			code = http.StatusNotFound
		case errors.Is(err, inspect.ErrUnsupported):
			code = http.StatusNotImplemented
		case errors.Is(err, context.DeadlineExceeded):
			code = http.StatusGatewayTimeout
		case errors.Is(err, backend.ErrCorrupt):
			err = fmt.Errorf("data loss: %w (run stated verify %s)", err, catalog.CheckpointDir(job, id))
		}
		http.Error(w, "webui: "+err.Error(), code)
		return CheckpointState{}, false
	}
	cs := checkpointState(job, id, s)
	cs.TookMS = ms(time.Since(start))
	return cs, true
}

func serveCheckpointJSON(src Source) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		cs, ok := readCheckpointState(w, r, src)
		if !ok {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(cs)
	}
}

// statePage is what state.html renders.
type statePage struct {
	CheckpointState
	CSS     template.CSS
	Version string
	strips  map[string]template.HTML
}

// Strip is the heat strip of operator op.
func (p statePage) Strip(op string) template.HTML { return p.strips[op] }

func serveCheckpointPage(src Source, tmpl *template.Template, css []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		cs, ok := readCheckpointState(w, r, src)
		if !ok {
			return
		}
		p := statePage{CheckpointState: cs, CSS: template.CSS(css), strips: map[string]template.HTML{}}
		for _, op := range cs.Operators {
			p.strips[op.Operator] = heatStrip(op, cs.MaxParallelism)
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:")
		if err := tmpl.Execute(w, p); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	}
}

// Heat strip geometry: one cell per key group, in rows of stripCols.
const (
	stripCols  = 128
	cellW      = 7
	cellH      = 14
	stripPadL  = 4
	stripPadT  = 4
	legendRows = 16
)

// maxCells bounds a heat strip: beyond it a cell covers several
// adjacent key groups (their sums), so that a job of 32768 key groups
// still gets a page of bounded size.
const maxCells = 1024

// heatStrip draws one cell per key group of op (per run of adjacent key
// groups beyond maxCells), left to right in key-group order (rows of
// stripCols), its colour from pale (empty) to dark red by its bytes over
// the hottest cell's: a hot key group is the dark cell. Each cell names
// its key groups, entries and bytes.
func heatStrip(op OperatorHeat, maxParallelism int) template.HTML {
	n := max(maxParallelism, 1)
	per := (n + maxCells - 1) / maxCells
	cells := make([]KeyGroupSize, (n+per-1)/per)
	for i := range cells {
		cells[i].KeyGroup = i * per
	}
	for _, g := range op.KeyGroups {
		if g.KeyGroup >= 0 && g.KeyGroup < n {
			c := &cells[g.KeyGroup/per]
			c.Entries += g.Entries
			c.Bytes += g.Bytes
		}
	}
	var peak int64
	for _, c := range cells {
		peak = max(peak, c.Bytes)
	}
	cols := min(len(cells), stripCols)
	rows := (len(cells) + cols - 1) / cols
	w := stripPadL*2 + cols*cellW
	h := stripPadT*2 + rows*cellH + legendRows
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="heat" data-operator="%s" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="%s">`,
		html.EscapeString(op.Operator), w, h, w, h, html.EscapeString("bytes per key group of operator "+op.Operator))
	for i, c := range cells {
		x := stripPadL + (i%cols)*cellW
		y := stripPadT + (i/cols)*cellH
		last := min(c.KeyGroup+per, n) - 1
		what := fmt.Sprintf("key group %d", c.KeyGroup)
		if last > c.KeyGroup {
			what = fmt.Sprintf("key groups %d-%d", c.KeyGroup, last)
		}
		fmt.Fprintf(&b, `<rect class="cell" data-kg="%d" data-last="%d" data-bytes="%d" x="%d" y="%d" width="%d" height="%d" fill="%s"><title>%s</title></rect>`,
			c.KeyGroup, last, c.Bytes, x, y, cellW-1, cellH-1, heatColor(c.Bytes, peak),
			html.EscapeString(fmt.Sprintf("%s: %d entries, %s", what, c.Entries, bytesize.Format(c.Bytes))))
	}
	ly := stripPadT + rows*cellH + 12
	fmt.Fprintf(&b, `<text class="tick" x="%d" y="%d">key group 0</text>`, stripPadL, ly)
	legend := fmt.Sprintf("%d; darkest: %s", n-1, bytesize.Format(peak))
	if per > 1 {
		legend = fmt.Sprintf("%d; %d key groups a cell; darkest: %s", n-1, per, bytesize.Format(peak))
	}
	fmt.Fprintf(&b, `<text class="tick" x="%d" y="%d" text-anchor="end">%s</text>`, w-stripPadL, ly, html.EscapeString(legend))
	b.WriteString("</svg>")
	return template.HTML(b.String())
}

// heatColor runs from a pale grey-blue (no bytes) through orange to dark
// red (the peak), so that the hottest cells stand out at a glance.
func heatColor(v, peak int64) string {
	if v <= 0 || peak <= 0 {
		return "rgb(236, 240, 244)"
	}
	f := float64(v) / float64(peak)
	// From (253, 224, 160) at a trace to (165, 15, 21) at the peak.
	lerp := func(a, b float64) int { return int(a + (b-a)*f + 0.5) }
	return fmt.Sprintf("rgb(%d, %d, %d)", lerp(253, 165), lerp(224, 15), lerp(160, 21))
}
