package webui

import (
	"context"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"html/template"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/internal/buildinfo"
)

//go:embed page.html state.html style.css
var assets embed.FS

// historyLimit is how many of a job's most recent checkpoints the page
// shows (the catalog keeps a bounded history anyway).
const historyLimit = 100

// Catalog is what the page reads of the catalog: a *catalog.Catalog, or
// in cluster mode a client of the one the leader hosts.
type Catalog interface {
	Problems() []catalog.Problem
	Jobs() []string
	List(job string) []catalog.Record
	Checkpoint(job string, id uint64) (*catalog.Manifest, bool)
	Savepoints() []*catalog.Manifest
}

// CheckedJobs is a Catalog whose job list can fail (cluster mode's
// client of the leader's catalog).
type CheckedJobs interface {
	JobsContext(ctx context.Context) ([]string, error)
}

// catalogTimeout bounds the page's wait for a catalog across the cluster.
const catalogTimeout = 5 * time.Second

// Source is what the page shows. Catalog is required; Daemon and
// Gatherer may be nil (no instances, no timings; no counters).
type Source struct {
	Catalog Catalog
	Daemon  *daemon.Daemon
	// Gatherer is the node's Prometheus registry: the page shows its
	// stated_store_*, stated_cache_* and stated_catalog_* series (but the
	// request counts, which the requests table shows).
	Gatherer prometheus.Gatherer
	// Token, when set, is required of every request (see the package
	// doc).
	Token string
	// Refresh is the page's reload period. Default 5s; negative: never.
	Refresh time.Duration
	// Cluster (nil: the daemon runs alone) is the node's view of its
	// cluster, for the page's cluster panel.
	Cluster func() *Cluster
	// States (nil: no state view) reads a completed checkpoint's state
	// for the checkpoint page (/ui/checkpoint) and /ui/api/checkpoint.
	States StateReader
	// Costs (nil: no table) is the object-store requests table.
	Costs func() *Costs
}

// Cluster is the cluster panel: this node's view of its cluster.
type Cluster struct {
	// Node is this node's id, Role its raft state ("leader",
	// "follower", "candidate", "shutdown").
	Node string `json:"node"`
	Role string `json:"role"`
	// Leader is the leader's id ("": none known).
	Leader     string `json:"leader"`
	LeaderAddr string `json:"leaderAddr,omitempty"`
	Term       uint64 `json:"term"`
	// Problem says why this node refuses tasks now (not joined, removed,
	// no quorum), empty when it serves them.
	Problem string          `json:"problem,omitempty"`
	Members []ClusterMember `json:"members"`
}

// ClusterMember is one member of the cluster's configuration.
type ClusterMember struct {
	ID       string `json:"id"`
	Addr     string `json:"addr"`
	Suffrage string `json:"suffrage"`
	Leader   bool   `json:"leader"`
	// This is the node serving the page.
	This bool `json:"this"`
}

// State is everything the page shows; /ui/api/state serves it as JSON.
type State struct {
	Generated  time.Time   `json:"generated"`
	Version    string      `json:"version"`
	Jobs       []Job       `json:"jobs"`
	Instances  []Instance  `json:"instances"`
	Counters   []Counter   `json:"counters"`
	Savepoints []Savepoint `json:"savepoints"`
	Problems   []string    `json:"problems,omitempty"`
	// Cluster is the cluster panel (nil: the daemon runs alone).
	Cluster *Cluster `json:"cluster,omitempty"`
	// Costs is the object-store requests table (nil: none).
	Costs   *Costs `json:"costs,omitempty"`
	refresh int    // seconds; 0: none
	charts  map[string]template.HTML
}

// Job is one job's history.
type Job struct {
	Name        string       `json:"name"`
	Completed   int          `json:"completed"`
	Failed      int          `json:"failed"`
	InProgress  int          `json:"inProgress"`
	Checkpoints []Checkpoint `json:"checkpoints"` // newest first
	// RestoredFrom is the checkpoint the job's open instances were
	// restored from (0: none, or a savepoint).
	RestoredFrom uint64 `json:"restoredFrom,omitempty"`
}

// Checkpoint is one row of a job's history.
type Checkpoint struct {
	ID               uint64    `json:"id"`
	Status           string    `json:"status"`
	Failed           bool      `json:"failed"`
	Triggered        time.Time `json:"triggered"`
	DurationMS       float64   `json:"durationMs"`
	SyncMS           *float64  `json:"syncMs,omitempty"`  // nil: unknown (not completed by this daemon)
	AsyncMS          *float64  `json:"asyncMs,omitempty"` // likewise
	Tasks            int       `json:"tasks"`
	CheckpointedSize int64     `json:"checkpointedSize"`
	FullSize         int64     `json:"fullSize"`
	Reason           string    `json:"reason,omitempty"`
	Retained         bool      `json:"retained"`
	Pinned           bool      `json:"pinned"`
	Owner            string    `json:"owner,omitempty"`
	RestoredFrom     bool      `json:"restoredFrom"` // open instances were restored from it
	Damaged          string    `json:"damaged,omitempty"`
	// What the tasks reported of how they took it (unaligned checkpoints'
	// statistics); Reported is false when they reported nothing.
	Reported            bool    `json:"reported"`
	Unaligned           bool    `json:"unaligned"`
	AlignmentMS         float64 `json:"alignmentMs"`
	StartDelayMS        float64 `json:"startDelayMs"`
	InFlightBytes       int64   `json:"inFlightBytes"`
	WithoutChannelState bool    `json:"withoutChannelState,omitempty"`
}

// Instance is one open backend instance.
type Instance struct {
	Task           string `json:"task"`
	Job            string `json:"job"`
	Backend        string `json:"backend"`
	KeyGroups      string `json:"keyGroups"`
	MaxParallelism int    `json:"maxParallelism"`
	Changelog      bool   `json:"changelog"`
	RestoredFrom   uint64 `json:"restoredFrom,omitempty"`
	// LastCheckpoint is the newest retained checkpoint that holds the
	// task's state, and FullSize and CheckpointedSize its handle's sizes
	// (0 when none).
	LastCheckpoint   uint64 `json:"lastCheckpoint,omitempty"`
	FullSize         int64  `json:"fullSize"`
	CheckpointedSize int64  `json:"checkpointedSize"`
}

// Counter is one series of the store, cache and catalog metrics.
type Counter struct {
	Name   string  `json:"name"`
	Labels string  `json:"labels,omitempty"`
	Value  float64 `json:"value"`
}

// Savepoint is one savepoint.
type Savepoint struct {
	ID         string    `json:"id"`
	Job        string    `json:"job"`
	Checkpoint uint64    `json:"checkpoint"`
	Format     string    `json:"format"`
	Taken      time.Time `json:"taken"`
	Size       int64     `json:"size"`
}

// Handler serves the page at /ui/ and the JSON at /ui/api/state.
func Handler(src Source) http.Handler {
	tmpl := template.Must(template.New("page.html").Funcs(funcs).ParseFS(assets, "page.html"))
	stateTmpl := template.Must(template.New("state.html").Funcs(funcs).ParseFS(assets, "state.html"))
	css, _ := assets.ReadFile("style.css")
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ui/checkpoint", serveCheckpointPage(src, stateTmpl, css))
	mux.HandleFunc("GET /ui/api/checkpoint", serveCheckpointJSON(src))
	mux.HandleFunc("GET /ui/{$}", func(w http.ResponseWriter, r *http.Request) {
		st := Collect(src)
		st.charts = map[string]template.HTML{}
		for _, j := range st.Jobs {
			st.charts["d:"+j.Name] = durationChart(j)
			st.charts["s:"+j.Name] = sizeChart(j)
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		// Nothing on the page comes from elsewhere: say so to the browser.
		w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:")
		if err := tmpl.Execute(w, pageData{State: st, CSS: template.CSS(css), states: src.States != nil}); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
	mux.HandleFunc("GET /ui/api/state", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(Collect(src))
	})
	if src.Token == "" {
		return mux
	}
	return authorize(src.Token, mux)
}

// cookieName holds the token once a browser has given it.
const cookieName = "stated_ui_token"

// authorize requires the token: as a bearer header, a cookie, or a ?token=
// query that sets the cookie and redirects to the same page without it
// (so the token stays out of the address bar and the history).
func authorize(token string, next http.Handler) http.Handler {
	ok := func(s string) bool { return subtle.ConstantTimeCompare([]byte(s), []byte(token)) == 1 }
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if q := r.URL.Query().Get("token"); q != "" {
			if !ok(q) {
				http.Error(w, "webui: wrong token", http.StatusUnauthorized)
				return
			}
			http.SetCookie(w, &http.Cookie{Name: cookieName, Value: q, Path: "/ui/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
			u := *r.URL
			v := u.Query()
			v.Del("token")
			u.RawQuery = v.Encode()
			http.Redirect(w, r, u.String(), http.StatusSeeOther)
			return
		}
		if h, found := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); found && ok(h) {
			next.ServeHTTP(w, r)
			return
		}
		if c, err := r.Cookie(cookieName); err == nil && ok(c.Value) {
			next.ServeHTTP(w, r)
			return
		}
		http.Error(w, "webui: this daemon has a token (--token): open "+(&url.URL{Path: r.URL.Path, RawQuery: "token=<token>"}).String()+
			" or send Authorization: Bearer <token>", http.StatusUnauthorized)
	})
}

// Collect gathers the state the page shows.
func Collect(src Source) State {
	st := State{Generated: time.Now(), Version: buildinfo.Read().String()}
	if src.Refresh >= 0 {
		st.refresh = int(max(src.Refresh, time.Second) / time.Second)
		if src.Refresh == 0 {
			st.refresh = 5
		}
	}
	if src.Cluster != nil {
		st.Cluster = src.Cluster()
	}
	if src.Costs != nil {
		st.Costs = src.Costs()
	}
	c := src.Catalog
	var insts []*daemon.Instance
	if src.Daemon != nil {
		insts = src.Daemon.Instances()
	}
	restored := map[string]uint64{}
	for _, in := range insts {
		if in.RestoredFrom != 0 {
			restored[in.Task.Job] = max(restored[in.Task.Job], in.RestoredFrom)
		}
	}
	jobs, reachable := c.Jobs, true
	if cc, ok := c.(CheckedJobs); ok {
		// A catalog across the cluster: one it cannot reach is a problem
		// on the page, not an empty history (and the page asks it
		// nothing more).
		ctx, cancel := context.WithTimeout(context.Background(), catalogTimeout)
		names, err := cc.JobsContext(ctx)
		cancel()
		if err != nil {
			st.Problems = append(st.Problems, "the catalog could not be read: "+err.Error())
			reachable = false
		}
		jobs = func() []string { return names }
	}
	if reachable {
		for _, p := range c.Problems() {
			st.Problems = append(st.Problems, p.String())
		}
	}
	now := time.Now()
	for _, name := range jobs() {
		j := Job{Name: name, RestoredFrom: restored[name]}
		recs := c.List(name)
		for i := len(recs) - 1; i >= 0 && len(j.Checkpoints) < historyLimit; i-- {
			r := recs[i]
			cp := Checkpoint{ID: r.ID, Status: string(r.Status), Triggered: r.Started,
				DurationMS: ms(r.Duration(now)), Tasks: r.Tasks, CheckpointedSize: r.CheckpointedSize, FullSize: r.FullSize,
				Reason: r.Reason, Retained: r.Retained, Pinned: r.Pinned, Owner: r.Owner, RestoredFrom: r.ID == j.RestoredFrom && r.ID != 0}
			switch r.Status {
			case catalog.StatusCompleted:
				j.Completed++
			case catalog.StatusInProgress:
				j.InProgress++
			default:
				cp.Failed = true
				j.Failed++
			}
			if st := r.Stats; st != (catalog.CheckpointStats{}) {
				cp.Reported, cp.Unaligned, cp.InFlightBytes = true, st.Unaligned, st.InFlightBytes
				cp.AlignmentMS = float64(st.AlignmentMicros) / 1000
				cp.StartDelayMS = float64(st.StartDelayMicros) / 1000
				// The tasks' own measure, also when another daemon
				// completed it.
				s, a := float64(st.SyncMicros)/1000, float64(st.AsyncMicros)/1000
				cp.SyncMS, cp.AsyncMS = &s, &a
			}
			cp.WithoutChannelState = r.WithoutChannelState
			if r.Damaged != nil {
				cp.Damaged = r.Damaged.Error()
				cp.Failed = true
			}
			if src.Daemon != nil {
				if t, ok := src.Daemon.CheckpointTiming(name, r.ID); ok {
					s, a := ms(t.Sync), ms(t.Async)
					cp.SyncMS, cp.AsyncMS = &s, &a
				}
			}
			j.Checkpoints = append(j.Checkpoints, cp)
		}
		st.Jobs = append(st.Jobs, j)
	}
	for _, in := range insts {
		x := Instance{Task: in.Task.String(), Job: in.Task.Job, Backend: string(in.Kind),
			KeyGroups: keyGroups(in.KeyGroups), MaxParallelism: in.MaxParallelism, Changelog: in.Changelog(), RestoredFrom: in.RestoredFrom}
		if reachable {
			x.LastCheckpoint, x.FullSize, x.CheckpointedSize = lastHandle(c, in.Task)
		}
		st.Instances = append(st.Instances, x)
	}
	if !reachable {
		st.Counters = counters(src.Gatherer)
		return st
	}
	for _, m := range c.Savepoints() {
		st.Savepoints = append(st.Savepoints, Savepoint{ID: m.SavepointID, Job: m.Job, Checkpoint: m.CheckpointID,
			Format: string(m.Format), Taken: m.Completed, Size: m.FullSize})
	}
	sort.Slice(st.Savepoints, func(a, b int) bool { return st.Savepoints[a].Taken.After(st.Savepoints[b].Taken) })
	st.Counters = counters(src.Gatherer)
	return st
}

// lastHandle finds the newest retained checkpoint with a handle of task.
func lastHandle(c Catalog, task backend.TaskID) (id uint64, full, checkpointed int64) {
	recs := c.List(task.Job)
	for i := len(recs) - 1; i >= 0; i-- {
		if !recs[i].Retained {
			continue
		}
		m, ok := c.Checkpoint(task.Job, recs[i].ID)
		if !ok {
			continue
		}
		for _, h := range m.Tasks {
			if h.Task == task {
				return m.CheckpointID, h.FullSize, h.CheckpointedSize
			}
		}
	}
	return 0, 0, 0
}

// counterPrefixes are the metric families the page shows.
var counterPrefixes = []string{"stated_store_", "stated_cache_", "stated_catalog_"}

// requestFamilies are the stated_store_ families the requests table shows
// (Source.Costs): the counters table leaves them out.
var requestFamilies = map[string]bool{
	"stated_store_requests_total": true, "stated_store_request_retries_total": true, "stated_store_throttled_total": true,
	"stated_store_requests_measured": true, "stated_store_estimated_dollars_per_month": true,
}

func counters(g prometheus.Gatherer) []Counter {
	if g == nil {
		return nil
	}
	mfs, err := g.Gather()
	if err != nil && len(mfs) == 0 {
		return []Counter{{Name: "metrics unavailable: " + err.Error()}}
	}
	var out []Counter
	for _, mf := range mfs {
		name := mf.GetName()
		keep := false
		for _, p := range counterPrefixes {
			keep = keep || strings.HasPrefix(name, p)
		}
		if !keep || requestFamilies[name] {
			continue
		}
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
			out = append(out, Counter{Name: name, Labels: strings.Join(ls, ","), Value: v})
		}
	}
	return out
}

func keyGroups(r backend.KeyGroupRange) string {
	return itoa(r.Start) + "–" + itoa(r.End)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
