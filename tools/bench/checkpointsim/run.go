package checkpointsim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/host"
)

// embeddedHeapSnapshotCap lifts the daemon's default heap snapshot cap in
// the embedded daemon, as bench does: a declined checkpoint shows nothing.
const embeddedHeapSnapshotCap = 1 << 30

// RunResult is one mode's run.
type RunResult struct {
	Mode    Mode   `json:"mode"`
	Debloat bool   `json:"debloat"`
	Job     string `json:"job"`
	// Checkpoints are the completed checkpoints in order.
	Checkpoints []CheckpointStats `json:"checkpoints"`
	// SimulatedSeconds is the simulated time the run took; SourceRecords
	// the records the sources produced in it.
	SimulatedSeconds float64 `json:"simulated_s"`
	SourceRecords    int64   `json:"source_records"`
	// WallSeconds is the real time the run took.
	WallSeconds float64 `json:"wall_s"`
}

// Name is the run's label: the mode, and "+debloat".
func (r *RunResult) Name() string {
	if r.Debloat {
		return string(r.Mode) + "+debloat"
	}
	return string(r.Mode)
}

// Report is the result of Run.
type Report struct {
	Options  Options     `json:"options"`
	Embedded bool        `json:"embedded"`
	Runs     []RunResult `json:"runs"`
}

// session is a connection to a daemon, embedded or not.
type session struct {
	c        *client.Client
	embedded bool
	cleanup  []func()
}

func (s *session) close() {
	for i := len(s.cleanup) - 1; i >= 0; i-- {
		s.cleanup[i]()
	}
}

func openSession(ctx context.Context, o *Options) (*session, error) {
	s := &session{embedded: o.Addr == ""}
	addr := o.Addr
	if s.embedded {
		dir, err := os.MkdirTemp(o.Dir, "stated-checkpoint-sim-")
		if err != nil {
			return nil, fmt.Errorf("checkpointsim: temporary data dir: %w", err)
		}
		s.cleanup = append(s.cleanup, func() { os.RemoveAll(dir) })
		log := o.Logger
		if log == nil {
			log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		}
		n, err := host.Open(ctx, host.Options{DataDir: dir, Logger: log, HeapSnapshotCap: embeddedHeapSnapshotCap})
		if err != nil {
			s.close()
			return nil, fmt.Errorf("checkpointsim: start embedded daemon: %w", err)
		}
		s.cleanup = append(s.cleanup, func() { n.Close() })
		addr = n.Socket()
	}
	c, err := client.Dial(addr, client.Options{Token: o.Token})
	if err != nil {
		s.close()
		return nil, err
	}
	s.cleanup = append(s.cleanup, func() { c.Close() })
	s.c = c
	return s, nil
}

// jobName names a run's job; on an external daemon it carries the start
// time, so that a second invocation does not collide with the first's
// checkpoints.
func jobName(o *Options, embedded bool, parts ...string) string {
	name := o.Job
	for _, p := range parts {
		name += "-" + p
	}
	if !embedded {
		name += fmt.Sprintf("-%d", time.Now().UnixNano())
	}
	return name
}

// simLimit bounds a run's simulated time: a run that has not finished by
// then is reported, not left spinning.
func simLimit(o *Options) int64 {
	return (time.Duration(o.Checkpoints)*(o.Interval+o.Timeout) + time.Hour).Microseconds()
}

// Run simulates the job once per mode and debloat setting, each as its
// own job on one daemon, and reports every completed checkpoint.
func Run(ctx context.Context, o Options, progress io.Writer) (*Report, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if progress == nil {
		progress = io.Discard
	}
	s, err := openSession(ctx, &o)
	if err != nil {
		return nil, err
	}
	defer s.close()
	rep := &Report{Options: o, Embedded: s.embedded}
	for _, m := range o.Modes {
		for _, d := range o.Debloat {
			parts := []string{string(m)}
			if d {
				parts = append(parts, "debloat")
			}
			res, err := runOne(ctx, s, o, jobSpec{name: jobName(&o, s.embedded, parts...), mode: m, debloat: d, windowPar: o.Parallelism})
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(progress, "%s: %d checkpoints in %.1f simulated s (%.1f s)\n", res.Name(), len(res.Checkpoints), res.SimulatedSeconds, res.WallSeconds)
			rep.Runs = append(rep.Runs, *res)
		}
	}
	return rep, nil
}

func runOne(ctx context.Context, s *session, o Options, spec jobSpec) (*RunResult, error) {
	start := time.Now()
	j, err := startJob(ctx, s.c, daemonChannels{}, newExternal(), o, spec)
	if err != nil {
		return nil, err
	}
	err = j.run(simLimit(&o))
	if err == nil && !j.stopped {
		err = fmt.Errorf("checkpointsim: %s: %d of %d checkpoints completed in %.0f simulated seconds", spec.name, j.completed, o.Checkpoints, ms(j.clk.now)/1e3)
	}
	if cerr := j.close(); err == nil && cerr != nil {
		err = fmt.Errorf("checkpointsim: close %s: %w", spec.name, cerr)
	}
	if err != nil {
		return nil, err
	}
	res := &RunResult{Mode: spec.mode, Debloat: spec.debloat, Job: spec.name, Checkpoints: j.stats,
		SimulatedSeconds: ms(j.clk.now) / 1e3, WallSeconds: time.Since(start).Seconds()}
	for _, t := range j.sources {
		res.SourceRecords += t.next
	}
	return res, nil
}

// ExactlyOnceResult compares a run's committed output with that of the
// same run killed and restored.
type ExactlyOnceResult struct {
	Mode Mode `json:"mode"`
	// KillAtMs is when the job was killed (simulated); RescaleTo the
	// window operator's parallelism after the restore.
	KillAtMs  float64 `json:"kill_at_ms"`
	RescaleTo int     `json:"rescale_to"`
	// Reference is the output of the run without failure, Restored that of
	// the run killed at the kill time and restored: (window, key, count)
	// with multiplicities.
	Reference, Restored map[Result]int `json:"-"`
	// RestoredFrom is the checkpoint restored; RestoredUnaligned says it
	// was unaligned and RestoredInFlight how many records its channel
	// state held.
	RestoredFrom      uint64 `json:"restored_from"`
	RestoredUnaligned bool   `json:"restored_unaligned"`
	RestoredInFlight  int64  `json:"restored_in_flight_records"`
}

// Differences counts the results whose multiplicity differs between the
// two outputs (0: exactly once).
func (r *ExactlyOnceResult) Differences() int {
	n := 0
	for k, v := range r.Reference {
		if r.Restored[k] != v {
			n++
		}
	}
	for k := range r.Restored {
		if _, ok := r.Reference[k]; !ok {
			n++
		}
	}
	return n
}

// ErrNoCheckpoint: the job was killed before any checkpoint completed.
var ErrNoCheckpoint = errors.New("checkpointsim: no completed checkpoint to restore")

// ExactlyOnce runs mode on bounded input (Options.Records) twice: once to
// the end, and once killed at killAt (simulated) and restored from its
// latest completed checkpoint with the window operator at rescaleTo
// subtasks (0: unchanged), then run to the end.
func ExactlyOnce(ctx context.Context, o Options, mode Mode, killAt time.Duration, rescaleTo int) (*ExactlyOnceResult, error) {
	o.EnsureDefaults()
	o.Modes, o.Debloat = []Mode{mode}, []bool{false}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.Records == 0 {
		return nil, errors.New("checkpointsim: exactly-once needs bounded input (records)")
	}
	if rescaleTo == 0 {
		rescaleTo = o.Parallelism
	}
	if rescaleTo < 1 || rescaleTo > min(maxParallelismOfTheSim, o.MaxParallelism) {
		return nil, fmt.Errorf("checkpointsim: rescale to %d is outside [1, %d]", rescaleTo, min(maxParallelismOfTheSim, o.MaxParallelism))
	}
	s, err := openSession(ctx, &o)
	if err != nil {
		return nil, err
	}
	defer s.close()
	res := &ExactlyOnceResult{Mode: mode, KillAtMs: ms(killAt.Microseconds()), RescaleTo: rescaleTo}
	// The reference run.
	ref := newExternal()
	j, err := startJob(ctx, s.c, daemonChannels{}, ref, o, jobSpec{name: jobName(&o, s.embedded, string(mode), "reference"), mode: mode, windowPar: o.Parallelism})
	if err != nil {
		return nil, err
	}
	if err := finish(j, &o); err != nil {
		return nil, err
	}
	res.Reference = ref.committed()

	out := newExternal()
	name := jobName(&o, s.embedded, string(mode), "killed")
	j, err = startJob(ctx, s.c, daemonChannels{}, out, o, jobSpec{name: name, mode: mode, windowPar: o.Parallelism})
	if err != nil {
		return nil, err
	}
	if err := j.run(killAt.Microseconds()); err != nil {
		j.abandon()
		return nil, err
	}
	if len(j.stats) == 0 {
		j.abandon()
		return nil, ErrNoCheckpoint
	}
	last := j.stats[len(j.stats)-1]
	res.RestoredFrom, res.RestoredUnaligned, res.RestoredInFlight = last.ID, last.Unaligned, last.InFlightRecords
	next := j.nextID
	j.abandon()
	if j.cur != nil {
		// The coordinator aborts what was in flight when the job failed.
		_ = s.c.AbortCheckpoint(ctx, name, j.cur.id, "aborted: job failed")
	}
	j, err = startJob(ctx, s.c, daemonChannels{}, out, o, jobSpec{name: name, mode: mode, windowPar: rescaleTo, restore: last.ID, firstID: next})
	if err != nil {
		return nil, err
	}
	if err := finish(j, &o); err != nil {
		return nil, err
	}
	res.Restored = out.committed()
	return res, nil
}

// finish runs a bounded job to its end and closes it.
func finish(j *job, o *Options) error {
	err := j.run(int64(o.Records)*j.srcGap + simLimit(o))
	if err == nil && j.sinksDone < len(j.sinks) {
		err = fmt.Errorf("checkpointsim: %s did not end", j.name)
	}
	if cerr := j.close(); err == nil && cerr != nil {
		err = cerr
	}
	return err
}
