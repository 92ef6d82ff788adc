package bench

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/cost"
	"github.com/statedhq/stated/tiered/storeurl"
)

// requestMeter turns the embedded daemon's object-store request counts
// (host.Host.Requests) into figures: requests by kind of each checkpoint
// phase, per second of the run phase (warm-up included: what the daemon
// sends between checkpoints), per GiB-hour of state, and the estimated
// $/month. With an external daemon (no counts) it records nothing.
type requestMeter struct {
	read     func() (cost.Counts, bool)
	prices   cost.Prices
	last     cost.Counts
	at       time.Time
	measured bool
	// run and runFor are the run phase's requests and length; cp2 the
	// second checkpoint's requests.
	runReqs cost.Counts
	runFor  time.Duration
	cp2     cost.Counts
}

func newRequestMeter(read func() (cost.Counts, bool), prices string) *requestMeter {
	p, _ := cost.ParsePrices(prices, cost.S3Standard) // checked by Validate
	return &requestMeter{read: read, prices: p}
}

func (m *requestMeter) start() {
	if m.read != nil {
		m.last, m.measured = m.read()
		m.at = time.Now()
	}
}

// delta is what was counted since the last call, and over how long.
func (m *requestMeter) delta() (cost.Counts, time.Duration) {
	now := time.Now()
	c, _ := m.read()
	d, el := c.Sub(m.last), now.Sub(m.at)
	m.last, m.at = c, now
	return d, el
}

func (m *requestMeter) what() string {
	if m.measured {
		return "HTTP requests"
	}
	return "store calls (not S3: one request each)"
}

// checkpoint records the requests of the checkpoint phase name.
func (m *requestMeter) checkpoint(name string, figs map[string]float64, pr *progress) {
	if m.read == nil {
		return
	}
	d, _ := m.delta()
	var parts []string
	for k := range cost.NumKinds {
		figs[name+"."+k.String()+"_requests"] = float64(d.Requests[k])
		parts = append(parts, fmt.Sprintf("%d %s", d.Requests[k], strings.ToUpper(k.String())))
	}
	figs[name+".requests"] = float64(d.Total())
	figs[name+".throttled_requests"] = float64(d.TotalThrottled())
	if name == "checkpoint2" {
		m.cp2 = d
	}
	pr.line("%s: %s (%s), %d throttled", name, strings.Join(parts, ", "), m.what(), d.TotalThrottled())
}

// run records the run phase's request rates.
func (m *requestMeter) run(name string, figs map[string]float64, pr *progress) {
	if m.read == nil {
		return
	}
	d, el := m.delta()
	m.runReqs, m.runFor = d, el
	secs := el.Seconds()
	var parts []string
	for k := range cost.NumKinds {
		r := float64(d.Requests[k]) / secs
		figs[name+"."+k.String()+"_requests_per_sec"] = r
		parts = append(parts, fmt.Sprintf("%.2f %s/s", r, strings.ToUpper(k.String())))
	}
	figs[name+".requests_per_sec"] = float64(d.Total()) / secs
	pr.line("%s: %s (%s over %s)", name, strings.Join(parts, ", "), m.what(), el.Round(time.Millisecond))
}

// cost records the rates per GiB of state and the estimated bill: the
// run phase's requests sustained for a month with the state of
// checkpoint 2 stored, and the requests of checkpoint 2 taken once a
// minute for a month.
func (m *requestMeter) cost(figs map[string]float64, pr *progress) {
	if m.read == nil || m.runFor <= 0 {
		return
	}
	state := int64(figs["checkpoint2.full_bytes"])
	if state > 0 {
		figs["run.requests_per_gib_hour"] = figs["run.requests_per_sec"] * 3600 / (float64(state) / cost.GB)
	}
	run := m.prices.Monthly(m.runReqs, m.runFor, state)
	figs["run.dollars_per_month"] = run.Total()
	cps := m.prices.Monthly(m.cp2, time.Minute, 0).RequestTotal()
	figs["checkpoint2.dollars_per_month_at_1_per_min"] = cps
	pr.line("cost at %s: $%.2f/month between checkpoints (requests $%.2f, storage $%.2f), checkpoints once a minute $%.2f/month",
		m.prices, run.Total(), run.RequestTotal(), run.Storage, cps)
}

// runStore is the checkpoint store of one run: base with run appended to
// its path (an s3 URL keeps its query).
func runStore(base, run string) (string, error) {
	loc, err := storeurl.Parse(base)
	if err != nil {
		return "", fmt.Errorf("bench: checkpoint store: %w", err)
	}
	if loc.Scheme == "file" && !strings.Contains(base, "://") && !strings.HasPrefix(base, "file:") {
		return path.Join(base, run), nil
	}
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("bench: checkpoint store: %w", err)
	}
	if u.Opaque != "" {
		u.Opaque = path.Join(u.Opaque, run)
	} else {
		u.Path = path.Join("/", u.Path, run)
	}
	return u.String(), nil
}

// emptyStore deletes what a run left in its store (best effort: a failure
// is reported, not fatal).
func emptyStore(ctx context.Context, rawURL string, w io.Writer) {
	s, err := storeurl.Open(ctx, rawURL, storeurl.Options{})
	if err != nil {
		fmt.Fprintf(w, "cleanup of %s: %v\n", rawURL, err)
		return
	}
	defer s.Close()
	var names []string
	if err := tiered.Walk(ctx, s, "", func(o tiered.ObjectInfo) error { names = append(names, o.Name); return nil }); err == nil && len(names) > 0 {
		err = s.DeleteBatch(ctx, names)
	}
	if err != nil {
		fmt.Fprintf(w, "cleanup of %s: %v\n", rawURL, err)
	}
}
