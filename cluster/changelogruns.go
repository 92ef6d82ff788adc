package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/statedhq/stated/dstl"
)

// Changelog mode in a  Every node's log writer puts segments into
// the shared store under its own run id; the catalog that may delete them
// is hosted by the leader, which cannot ask another node's writer what it
// still holds (dstl.Writer.Holds). So:
//
//   - Before this node's first open (the first fencing token it takes),
//     it journals "changelog/runs/<node id>" = its writer's run id. One
//     record per node: a restarted node replaces its run, and the old
//     run's segments become free to delete once no retained checkpoint
//     references them. A writer writes segments only for instances, and
//     an instance opens only after the record is on a quorum, so no
//     segment of an unregistered run is live.
//   - The daemon reports, as its log lets go of segments, the names and
//     its writer's heldFrom (daemon.ChangelogConfig.Release): every
//     segment of its run below heldFrom is released.
//   - The hosted catalog's LogHeld: a segment of this node's run is held
//     if its writer holds it; of another node's run, if that run is the
//     node's registered one, the node is a member, the segment is not
//     among the names reported released, and its counter is at or above
//     the reported heldFrom. Both only ever free segments (a released
//     segment is never held again, heldFrom never decreases), so what
//     the leader learned stays true; a new leader, knowing nothing yet,
//     holds every segment of a live run until its node reports (at least
//     every 30 s).

// logRunsPrefix starts the journal keys of the nodes' log runs:
// logRunsPrefix + node id = run id.
const logRunsPrefix = "changelog/runs/"

// logReportTimeout bounds one report: the log keeper's goroutine, which
// also starts materializations, must not wait for a leader for long.
const logReportTimeout = 10 * time.Second

// membersTTL is how long the leader trusts its reading of the members.
const membersTTL = time.Second

// ChangelogRuns is a node's part in changelog mode across the cluster: it
// registers the node's run, reports releases, and (while the node hosts
// the catalog) answers LogHeld and takes the other nodes' reports.
type ChangelogRuns struct {
	c *Member
	// client reports releases to the leader's catalog (its
	// ReleaseChangelog call); set before the daemon starts.
	client *CatalogClient
	w      *dstl.Writer
	prefix string
	log    *slog.Logger

	regMu      sync.Mutex
	registered bool

	mu        sync.Mutex
	heldFrom  map[string]uint64          // run -> heldFrom its node reported
	released  map[string]map[string]bool // run -> names reported released at or above heldFrom
	members   map[string]bool
	membersAt time.Time
}

func NewChangelogRuns(c *Member, w *dstl.Writer, log *slog.Logger) *ChangelogRuns {
	return &ChangelogRuns{c: c, w: w, prefix: w.Options().Prefix, log: log.With("component", "cluster-changelog"),
		heldFrom: map[string]uint64{}, released: map[string]map[string]bool{}}
}

// Register journals this node's run once; later calls return at once.
func (l *ChangelogRuns) Register(ctx context.Context) error {
	l.regMu.Lock()
	defer l.regMu.Unlock()
	if l.registered {
		return nil
	}
	if err := l.c.JournalPut(ctx, logRunsPrefix+l.c.ID(), []byte(l.w.RunID())); err != nil {
		return fmt.Errorf("cluster: registering this node's changelog run with the cluster: %w", err)
	}
	l.registered = true
	return nil
}

// Report is the daemon's Release in cluster mode: names and heldFrom go
// to the leader's catalog.
func (l *ChangelogRuns) Report(ctx context.Context, names []string, heldFrom uint64) error {
	l.regMu.Lock()
	registered := l.registered
	l.regMu.Unlock()
	if !registered {
		return nil // no instance opened yet: the writer has no segment
	}
	ctx, cancel := context.WithTimeout(ctx, logReportTimeout)
	defer cancel()
	return l.client.ReleaseChangelog(ctx, l.w.RunID(), heldFrom, names)
}

// liveRuns maps the registered run of every member node to true.
func (l *ChangelogRuns) liveRuns() map[string]bool {
	runs := l.c.JournalRead(logRunsPrefix)
	l.mu.Lock()
	members := l.members
	if time.Since(l.membersAt) > membersTTL {
		l.mu.Unlock()
		m, err := l.c.Members()
		l.mu.Lock()
		if err == nil {
			l.members, l.membersAt, members = m, time.Now(), m
		}
	}
	l.mu.Unlock()
	out := make(map[string]bool, len(runs))
	for k, v := range runs {
		// Without a reading of the members, every registered run is live:
		// holding too much only delays deletes.
		if members == nil || members[strings.TrimPrefix(k, logRunsPrefix)] {
			out[string(v)] = true
		}
	}
	return out
}

// Held is the hosted catalog's LogHeld.
func (l *ChangelogRuns) Held(name string) bool {
	run, counter, ok := dstl.ParseSegmentName(l.prefix, name)
	if !ok {
		return false // not a segment any writer makes: the sweep's
	}
	if run == l.w.RunID() {
		return l.w.Holds(name)
	}
	if !l.liveRuns()[run] {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released[run][name] {
		return false
	}
	return counter >= l.heldFrom[run]
}

// noteRelease records a node's report (on the leader, the hosted
// catalog server's LogRelease; the server then hands the names to the
// catalog).
func (l *ChangelogRuns) noteRelease(run string, heldFrom uint64, names []string) {
	live := l.liveRuns()
	l.mu.Lock()
	defer l.mu.Unlock()
	for r := range l.heldFrom {
		if !live[r] {
			delete(l.heldFrom, r)
			delete(l.released, r)
		}
	}
	if !live[run] || run == l.w.RunID() {
		return
	}
	hf := max(l.heldFrom[run], heldFrom)
	l.heldFrom[run] = hf
	rel := l.released[run]
	if rel == nil {
		rel = map[string]bool{}
		l.released[run] = rel
	}
	for n := range rel {
		if _, c, _ := dstl.ParseSegmentName(l.prefix, n); c < hf {
			delete(rel, n) // heldFrom covers it
		}
	}
	for _, n := range names {
		if r, c, ok := dstl.ParseSegmentName(l.prefix, n); ok && r == run && c >= hf {
			rel[n] = true
		}
	}
}
