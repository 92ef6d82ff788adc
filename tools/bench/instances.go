package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/host"
	"github.com/statedhq/stated/internal/bytesize"
	"github.com/statedhq/stated/tiered/cost"
	"github.com/statedhq/stated/tools/bench/workload"
)

// ErrFDLimit is returned when opening the instances asked for would pass
// the process's file-descriptor limit.
var ErrFDLimit = errors.New("bench: file-descriptor limit")

// fdProbe is how many instances are opened first to measure the file
// descriptors one takes.
const fdProbe = 8

// fdHeadroom is kept free for the daemon's own files (checkpoint uploads,
// compactions, new connections) on top of what the instances take.
const fdHeadroom = 64

// InstancesParams are the parameters of "stated bench instances".
type InstancesParams struct {
	// Backend of every instance (default lsm).
	Backend string
	// Count of idle instances to open (default 100).
	Count int
	// Connections over which the instances are opened, in parallel, as
	// that many task processes would (default 4).
	Connections int
	// Socket and Token: an external daemon (default: an embedded one in a
	// temporary data dir under Dir). Memory and descriptors are measured
	// only on an embedded daemon: it is this process.
	Socket, Token string
	// TLS of the connections to an external daemon (client.Options.TLS).
	TLS *tls.Config
	Dir string
	// Idle, when positive, keeps the instances open and idle that long
	// and counts the requests the embedded daemon sends its checkpoint
	// store meanwhile (the idle cost; embedded only).
	Idle time.Duration
	// CheckpointStore is the embedded daemon's checkpoint store (default
	// its data dir), as Params.CheckpointStore: a fresh prefix under it,
	// emptied afterwards.
	CheckpointStore string
	// Changelog opens the instances in changelog mode.
	Changelog bool
	// LSMRemote runs the embedded daemon with node.Options.LSMRemote (lsm
	// SSTs in the checkpoint store, each instance keeping a lease there).
	LSMRemote bool
	// fdLimit replaces RLIMIT_NOFILE's soft limit in tests.
	fdLimit uint64
	// Logger of the embedded daemon (default: warnings to stderr).
	Logger *slog.Logger
}

// InstancesResult is what Instances measured.
type InstancesResult struct {
	Backend     string `json:"backend"`
	Count       int    `json:"count"`
	Connections int    `json:"connections"`
	Embedded    bool   `json:"embedded"`
	// OpenSeconds is the time to open every instance; OpensPerSec the rate.
	OpenSeconds  float64 `json:"open_s"`
	OpensPerSec  float64 `json:"opens_per_sec"`
	CloseSeconds float64 `json:"close_s"`
	ClosesPerSec float64 `json:"closes_per_sec"`
	// Per instance, from the difference before and after opening them all
	// (after a GC each time); embedded only.
	RSSPerInstance  float64 `json:"rss_bytes_per_instance"`
	HeapPerInstance float64 `json:"heap_bytes_per_instance"`
	FDsPerInstance  float64 `json:"fds_per_instance"`
	RSSBefore       int64   `json:"rss_bytes_before"`
	RSSAfter        int64   `json:"rss_bytes_after"`
	FDsBefore       int     `json:"fds_before"`
	FDsAfter        int     `json:"fds_after"`
	FDLimit         uint64  `json:"fd_limit"`
	// IdleSeconds is how long the instances stayed idle (Idle);
	// IdleRequests the requests the checkpoint store was sent meanwhile
	// by kind (HTTP requests on S3, else store calls), and
	// IdleRequestsPerHour their rate; IdleDollarsPerMonth their price at
	// S3 Standard's list prices for a month.
	IdleSeconds         float64           `json:"idle_s,omitempty"`
	IdleRequests        map[string]uint64 `json:"idle_requests,omitempty"`
	IdleRequestsPerHour float64           `json:"idle_requests_per_hour,omitempty"`
	IdleDollarsPerMonth float64           `json:"idle_dollars_per_month,omitempty"`
	IdleMeasured        bool              `json:"idle_requests_measured,omitempty"`
}

func (p *InstancesParams) ensureDefaults() {
	if p.Backend == "" {
		p.Backend = string(backend.KindLSM)
	}
	if p.Count == 0 {
		p.Count = 100
	}
	if p.Connections == 0 {
		p.Connections = 4
	}
	if p.Dir == "" {
		p.Dir = os.TempDir()
	}
}

func (p *InstancesParams) validate() error {
	var errs []string
	if _, err := backend.ParseKind(p.Backend); err != nil {
		errs = append(errs, fmt.Sprintf("backend %q is not heap, file or lsm", p.Backend))
	}
	if p.Count < 1 || p.Count > 1_000_000 {
		errs = append(errs, fmt.Sprintf("count %d is outside [1, 1000000]", p.Count))
	}
	if p.Connections < 1 || p.Connections > 1024 {
		errs = append(errs, fmt.Sprintf("connections %d is outside [1, 1024]", p.Connections))
	}
	if p.Token != "" && p.Socket == "" {
		errs = append(errs, "token without socket: the embedded daemon needs none")
	}
	if p.Idle < 0 || (p.Idle > 0 || p.CheckpointStore != "") && p.Socket != "" {
		errs = append(errs, "idle and checkpoint store measure an embedded daemon: give no socket, and an idle time of 0 or more")
	}
	if len(errs) > 0 {
		return fmt.Errorf("bench: %s", strings.Join(errs, "; "))
	}
	return nil
}

// Instances opens Count idle instances of Backend (one value state each,
// no data) over Connections client connections and measures the time to
// open and close them and, on an embedded daemon, the memory and file
// descriptors each takes. Before opening them all it opens a few, measures
// their descriptors and refuses (ErrFDLimit) when the rest would pass the
// limit, rather than failing deep inside Pebble.
func Instances(ctx context.Context, p InstancesParams, progress io.Writer) (*InstancesResult, error) {
	p.ensureDefaults()
	if err := p.validate(); err != nil {
		return nil, err
	}
	if progress == nil {
		progress = io.Discard
	}
	res := &InstancesResult{Backend: p.Backend, Count: p.Count, Connections: p.Connections, Embedded: p.Socket == ""}
	socket := p.Socket
	var requests func() (cost.Counts, bool)
	if res.Embedded {
		dir, err := os.MkdirTemp(p.Dir, "stated-bench-instances-")
		if err != nil {
			return nil, fmt.Errorf("bench: temporary data dir: %w", err)
		}
		defer os.RemoveAll(dir)
		log := p.Logger
		if log == nil {
			log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		}
		o := host.Options{DataDir: dir, Logger: log, LSMRemote: p.LSMRemote,
			MaxInstances: max(daemon.DefaultMaxInstances, p.Count), MaxConcurrentStreams: max(1024, p.Count/p.Connections+16)}
		if p.CheckpointStore != "" {
			store, err := runStore(p.CheckpointStore, filepath.Base(dir))
			if err != nil {
				return nil, err
			}
			o.CheckpointStore = store
			defer emptyStore(context.WithoutCancel(ctx), store, progress)
		}
		n, err := host.Open(ctx, o)
		if err != nil {
			return nil, fmt.Errorf("bench: start embedded daemon: %w", err)
		}
		defer n.Close()
		socket = n.Socket()
		requests = n.Requests
	}
	cs := make([]*client.Client, p.Connections)
	defer func() {
		for _, c := range cs {
			if c != nil {
				c.Close()
			}
		}
	}()
	for i := range cs {
		c, err := client.Dial(socket, client.Options{Token: p.Token, TLS: p.TLS})
		if err != nil {
			return nil, err
		}
		cs[i] = c
		// Connect now, so the connections' descriptors count before.
		if _, err := c.ListCheckpoints(ctx, "bench-instances"); err != nil && status.Code(err) != codes.NotFound {
			return nil, fmt.Errorf("bench: connect to %s: %w", socket, err)
		}
	}
	ins := make([]*client.Instance, p.Count)
	defer func() {
		// Instances left open by an error: closed, bounded in time.
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, in := range ins {
			if in != nil {
				in.Close(cctx)
			}
		}
	}()
	open := func(from, to int) error {
		return parallel(p.Connections, func(c int) error {
			for i := from + c; i < to; i += p.Connections {
				in, err := cs[c].Open(ctx, client.OpenSpec{
					Task:    backend.TaskID{Job: "bench-instances", Operator: fmt.Sprintf("op-%d", i)},
					Backend: backend.Kind(p.Backend), States: []backend.StateDescriptor{{Name: workload.ValueState, Kind: backend.KindValue}},
					Changelog: changelogChoice(p.Changelog),
				})
				if err != nil {
					if strings.Contains(err.Error(), "too many open files") {
						return fmt.Errorf("%w: instance %d of %d: the daemon ran out of file descriptors (%v); raise the limit (ulimit -n) or open fewer", ErrFDLimit, i+1, p.Count, err)
					}
					return fmt.Errorf("bench: open instance %d of %d: %w", i+1, p.Count, err)
				}
				ins[i] = in
			}
			return nil
		})
	}

	var limit uint64
	if res.Embedded {
		settle()
		res.RSSBefore, res.FDsBefore = rss(), fds()
		limit = p.fdLimit
		if limit == 0 {
			var rl syscall.Rlimit
			if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil {
				limit = rl.Cur
			}
		}
		res.FDLimit = limit
	}
	heapBefore := heapInUse()
	start := time.Now()
	probe := min(fdProbe, p.Count)
	if err := open(0, probe); err != nil {
		return nil, err
	}
	if res.Embedded && limit > 0 && probe < p.Count {
		used := fds()
		per := float64(used-res.FDsBefore) / float64(probe)
		need := float64(used) + per*float64(p.Count-probe) + fdHeadroom
		if need > float64(limit) {
			return nil, fmt.Errorf("%w: %d %s instances need about %.0f file descriptors (%.1f each, measured on the first %d; %d in use before), above the limit of %d (RLIMIT_NOFILE): raise it (ulimit -n) or pass a smaller --count",
				ErrFDLimit, p.Count, p.Backend, need, per, probe, res.FDsBefore, limit)
		}
	}
	fmt.Fprintf(progress, "opened %d of %d\n", probe, p.Count)
	if err := open(probe, p.Count); err != nil {
		return nil, err
	}
	openTime := time.Since(start)
	res.OpenSeconds = openTime.Seconds()
	res.OpensPerSec = float64(p.Count) / openTime.Seconds()
	fmt.Fprintf(progress, "opened %d %s instances in %s\n", p.Count, p.Backend, openTime.Round(time.Millisecond))
	if res.Embedded {
		settle()
		res.RSSAfter, res.FDsAfter = rss(), fds()
		res.RSSPerInstance = float64(res.RSSAfter-res.RSSBefore) / float64(p.Count)
		res.HeapPerInstance = float64(int64(heapInUse())-int64(heapBefore)) / float64(p.Count)
		res.FDsPerInstance = float64(res.FDsAfter-res.FDsBefore) / float64(p.Count)
	}
	if p.Idle > 0 && requests != nil {
		before, _ := requests()
		fmt.Fprintf(progress, "idle for %s\n", p.Idle)
		t0 := time.Now()
		select {
		case <-time.After(p.Idle):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		after, measured := requests()
		el := time.Since(t0)
		d := after.Sub(before)
		res.IdleSeconds, res.IdleMeasured = el.Seconds(), measured
		res.IdleRequests = map[string]uint64{}
		for k := range cost.NumKinds {
			res.IdleRequests[k.String()] = d.Requests[k]
		}
		res.IdleRequestsPerHour = float64(d.Total()) / el.Hours()
		res.IdleDollarsPerMonth = cost.S3Standard.Monthly(d, el, 0).RequestTotal()
		fmt.Fprintf(progress, "idle %s: %d requests (%v), %.1f per hour, $%.4f a month at S3 Standard's prices\n",
			el.Round(time.Second), d.Total(), res.IdleRequests, res.IdleRequestsPerHour, res.IdleDollarsPerMonth)
	}
	start = time.Now()
	var mu sync.Mutex
	var errs []error
	_ = parallel(p.Connections, func(c int) error {
		for i := c; i < p.Count; i += p.Connections {
			if err := ins[i].Close(ctx); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			ins[i] = nil
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("bench: close: %w", err)
	}
	res.CloseSeconds = time.Since(start).Seconds()
	res.ClosesPerSec = float64(p.Count) / res.CloseSeconds
	return res, nil
}

// settle collects garbage twice, so that heap and RSS figures are of live
// memory.
func settle() {
	runtime.GC()
	runtime.GC()
}

func heapInUse() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// rss is the process's resident set (VmRSS of /proc/self/status), 0 when
// unreadable.
func rss() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// fds counts the process's open file descriptors.
func fds() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	return len(ents)
}

// PrintInstances writes r as a table.
func PrintInstances(w io.Writer, r *InstancesResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "instances\t%d %s, over %d connections\n", r.Count, r.Backend, r.Connections)
	fmt.Fprintf(tw, "open\t%.2f s (%.0f per second)\n", r.OpenSeconds, r.OpensPerSec)
	fmt.Fprintf(tw, "close\t%.2f s (%.0f per second)\n", r.CloseSeconds, r.ClosesPerSec)
	if r.Embedded {
		fmt.Fprintf(tw, "RSS per instance\t%s (%s before, %s after)\n", bytesize.Format(int64(r.RSSPerInstance)), bytesize.Format(r.RSSBefore), bytesize.Format(r.RSSAfter))
		fmt.Fprintf(tw, "Go heap per instance\t%s\n", bytesize.Format(int64(r.HeapPerInstance)))
		fmt.Fprintf(tw, "file descriptors per instance\t%.2f (%d before, %d after, limit %d)\n", r.FDsPerInstance, r.FDsBefore, r.FDsAfter, r.FDLimit)
	} else {
		fmt.Fprintf(tw, "memory, descriptors\tnot measured: the daemon is another process (use an embedded one)\n")
	}
	if r.IdleSeconds > 0 {
		what := "store calls (not an S3 store)"
		if r.IdleMeasured {
			what = "HTTP requests"
		}
		var parts []string
		for k := range cost.NumKinds {
			parts = append(parts, fmt.Sprintf("%d %s", r.IdleRequests[k.String()], strings.ToUpper(k.String())))
		}
		fmt.Fprintf(tw, "idle requests\t%s in %.0f s (%s)\n", strings.Join(parts, ", "), r.IdleSeconds, what)
		fmt.Fprintf(tw, "idle cost\t%.1f requests per hour, $%.4f a month at S3 Standard's list prices\n", r.IdleRequestsPerHour, r.IdleDollarsPerMonth)
	}
	tw.Flush()
}
