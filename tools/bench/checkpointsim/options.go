package checkpointsim

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/statedhq/stated/backend"
)

// Mode is how a run takes its checkpoints.
type Mode string

// Modes. ModeAll is not a mode of a run: Options.Modes expands it.
const (
	// ModeAligned: barriers flow with the data; a task with several inputs
	// blocks each input once its barrier arrived until all arrived.
	ModeAligned Mode = "aligned"
	// ModeUnaligned: barriers overtake the buffers, and the records they
	// overtook are persisted as channel state.
	ModeUnaligned Mode = "unaligned"
	// ModeAlignedTimeout: aligned, but a checkpoint still unfinished at a
	// task Timeout after its trigger switches to unaligned there (Flink's
	// execution.checkpointing.aligned-checkpoint-timeout).
	ModeAlignedTimeout Mode = "aligned-timeout"
	ModeAll            Mode = "all"
)

// ParseMode checks that s names a mode or "all".
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeAligned, ModeUnaligned, ModeAlignedTimeout, ModeAll:
		return m, nil
	}
	return "", fmt.Errorf("checkpointsim: mode %q (aligned, unaligned, aligned-timeout or all)", s)
}

// Defaults of Options. Times are simulated (virtual) time.
const (
	DefaultParallelism       = 2
	DefaultBuffers           = 10
	DefaultRecordsPerBuffer  = 100
	DefaultSourceRate        = 2000 // records per second per source subtask
	DefaultWindowCost        = 50 * time.Microsecond
	DefaultSinkCost          = 2 * time.Millisecond
	DefaultInterval          = time.Second
	DefaultCheckpoints       = 10
	DefaultTimeout           = 2 * time.Second
	DefaultDebloatTarget     = 100 * time.Millisecond
	DefaultKeys              = 1000
	DefaultWindow            = 1000
	DefaultAckLatency        = time.Millisecond
	DefaultMaxParallelism    = backend.DefaultMaxParallelism
	DefaultBackend           = backend.KindLSM
	maxSimulatedRecords      = 50_000_000
	maxParallelismOfTheSim   = 64
	maxBuffersPerChannel     = 10_000
	maxRecordsPerBufferLimit = 10_000
	maxInFlightRecords       = 10_000_000
)

// Options configure a simulation. Zero values take the defaults
// (EnsureDefaults); Validate reports every problem at once.
type Options struct {
	// Modes to run, each on its own job (default all three; ModeAll in the
	// list expands to all three).
	Modes []Mode `json:"modes"`
	// Debloat runs each mode with buffer debloating off, on, or both
	// (default [false, true]).
	Debloat []bool `json:"debloat"`
	// Parallelism of source, window and sink (default 2).
	Parallelism int `json:"parallelism"`
	// Buffers per channel on each side (the producer's subpartition and
	// the consumer's input channel), default 10, of RecordsPerBuffer
	// records each (default 100). Credit-based flow control: a full
	// subpartition blocks its producer.
	Buffers          int `json:"buffers"`
	RecordsPerBuffer int `json:"records_per_buffer"`
	// DebloatTarget is how much processing time the in-flight records of
	// a consumer's inputs may hold with debloating on (default 100 ms):
	// every 50 ms each channel's capacity becomes the consumer's measured
	// throughput times this, at most the configured capacity, at least one
	// record.
	DebloatTarget time.Duration `json:"debloat_target_ns"`
	// SourceRate is the records per second each source subtask produces
	// when not back-pressured (default 2000).
	SourceRate float64 `json:"source_rate"`
	// WindowCost and SinkCost are the processing time of one record in the
	// window operator and in the sink (defaults 50 µs and 2 ms: the sink is
	// slower than the sources, which creates back-pressure).
	WindowCost time.Duration `json:"window_cost_ns"`
	SinkCost   time.Duration `json:"sink_cost_ns"`
	// Interval between checkpoint triggers (default 1 s); as in Flink with
	// one concurrent checkpoint, a checkpoint is triggered no earlier than
	// the previous one completed.
	Interval time.Duration `json:"interval_ns"`
	// Checkpoints to take (default 10).
	Checkpoints int `json:"checkpoints"`
	// Timeout of aligned-timeout mode, from the trigger (default 2 s).
	Timeout time.Duration `json:"timeout_ns"`
	// Keys is the number of distinct keys (default 1000); Window the
	// tumbling event-time window's length in records of one source
	// (default 1000): a record's timestamp is its sequence number.
	Keys   int   `json:"keys"`
	Window int64 `json:"window"`
	// Records per source subtask; 0: unbounded (the run stops after the
	// last checkpoint). With a bound, checkpoints stop when a source ends,
	// and the run drains the job and commits the sinks' last output.
	Records int64 `json:"records"`
	// AckLatency is the time from a task's snapshot to its acknowledgement
	// at the coordinator (default 1 ms).
	AckLatency time.Duration `json:"ack_latency_ns"`
	// Seed of the keys (default 1).
	Seed uint64 `json:"seed"`
	// MaxParallelism is the number of key groups (default 128).
	MaxParallelism int `json:"max_parallelism"`
	// Backend of the tasks' state (default lsm).
	Backend backend.Kind `json:"backend"`
	// Addr is an external daemon (socket path or host:port); empty: an
	// embedded daemon in a temporary dir under Dir.
	Addr  string `json:"addr,omitempty"`
	Token string `json:"-"`
	Dir   string `json:"-"`
	// Job names the jobs' prefix (default "checkpoint-sim"); each mode
	// runs as job <Job>-<mode>[-debloat].
	Job string `json:"job"`
	// Logger of the embedded daemon (default: warnings to stderr).
	Logger *slog.Logger `json:"-"`
}

// EnsureDefaults fills zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	if len(o.Modes) == 0 {
		o.Modes = []Mode{ModeAll}
	}
	var modes []Mode
	for _, m := range o.Modes {
		if m == ModeAll {
			modes = append(modes, ModeAligned, ModeUnaligned, ModeAlignedTimeout)
		} else {
			modes = append(modes, m)
		}
	}
	o.Modes = modes
	if len(o.Debloat) == 0 {
		o.Debloat = []bool{false, true}
	}
	setInt(&o.Parallelism, DefaultParallelism)
	setInt(&o.Buffers, DefaultBuffers)
	setInt(&o.RecordsPerBuffer, DefaultRecordsPerBuffer)
	setInt(&o.Checkpoints, DefaultCheckpoints)
	setInt(&o.Keys, DefaultKeys)
	setInt(&o.MaxParallelism, DefaultMaxParallelism)
	setDur(&o.DebloatTarget, DefaultDebloatTarget)
	setDur(&o.WindowCost, DefaultWindowCost)
	setDur(&o.SinkCost, DefaultSinkCost)
	setDur(&o.Interval, DefaultInterval)
	setDur(&o.Timeout, DefaultTimeout)
	setDur(&o.AckLatency, DefaultAckLatency)
	if o.SourceRate == 0 {
		o.SourceRate = DefaultSourceRate
	}
	if o.Window == 0 {
		o.Window = DefaultWindow
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Backend == "" {
		o.Backend = DefaultBackend
	}
	if o.Job == "" {
		o.Job = "checkpoint-sim"
	}
	if o.Dir == "" {
		o.Dir = os.TempDir()
	}
}

func setInt(p *int, d int) {
	if *p == 0 {
		*p = d
	}
}

func setDur(p *time.Duration, d time.Duration) {
	if *p == 0 {
		*p = d
	}
}

// Validate reports every problem of o at once; call EnsureDefaults first.
func (o *Options) Validate() error {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	seen := map[string]bool{}
	for _, m := range o.Modes {
		if _, err := ParseMode(string(m)); err != nil || m == ModeAll {
			bad("mode %q is not aligned, unaligned or aligned-timeout", m)
		}
		if seen[string(m)] {
			bad("mode %s is listed twice", m)
		}
		seen[string(m)] = true
	}
	if len(o.Debloat) > 2 || len(o.Debloat) == 2 && o.Debloat[0] == o.Debloat[1] {
		bad("debloat settings %v: give off, on or both once", o.Debloat)
	}
	if err := backend.ValidateMaxParallelism(o.MaxParallelism); err != nil {
		bad("max parallelism: %v", err)
	}
	if o.Parallelism < 1 || o.Parallelism > min(maxParallelismOfTheSim, o.MaxParallelism) {
		bad("parallelism %d is outside [1, %d]", o.Parallelism, min(maxParallelismOfTheSim, o.MaxParallelism))
	}
	if o.Buffers < 1 || o.Buffers > maxBuffersPerChannel {
		bad("buffers %d is outside [1, %d]", o.Buffers, maxBuffersPerChannel)
	}
	if o.RecordsPerBuffer < 1 || o.RecordsPerBuffer > maxRecordsPerBufferLimit {
		bad("records per buffer %d is outside [1, %d]", o.RecordsPerBuffer, maxRecordsPerBufferLimit)
	}
	// Every record in flight is held in memory: bound the job's capacity
	// (two sides of P x P channels on each of the two connections).
	if o.Buffers > 0 && o.RecordsPerBuffer > 0 && o.Parallelism > 0 {
		if c := 4 * int64(o.Parallelism) * int64(o.Parallelism) * int64(o.Buffers) * int64(o.RecordsPerBuffer); c > maxInFlightRecords {
			bad("buffers x records per buffer x 4 x parallelism^2 = %d records in flight at most, above %d", c, maxInFlightRecords)
		}
	}
	if !(o.SourceRate > 0 && o.SourceRate <= 1e6) {
		bad("source rate %g is outside (0, 1e6] records per second", o.SourceRate)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
		lo   time.Duration
	}{{"window cost", o.WindowCost, 0}, {"sink cost", o.SinkCost, 0}, {"debloat target", o.DebloatTarget, time.Millisecond},
		{"interval", o.Interval, time.Millisecond}, {"timeout", o.Timeout, 0}, {"ack latency", o.AckLatency, 0}} {
		if d.v < d.lo || d.v > time.Hour {
			bad("%s %s is outside [%s, 1h]", d.name, d.v, d.lo)
		}
	}
	if o.Checkpoints < 1 || o.Checkpoints > 10_000 {
		bad("checkpoints %d is outside [1, 10000]", o.Checkpoints)
	}
	if o.Keys < 1 || o.Keys > 10_000_000 {
		bad("keys %d is outside [1, 10000000]", o.Keys)
	}
	if o.Window < 1 || o.Window > 1<<40 {
		bad("window %d is outside [1, 2^40]", o.Window)
	}
	if o.Records < 0 || o.Records > maxSimulatedRecords {
		bad("records %d is outside [0, %d]", o.Records, maxSimulatedRecords)
	}
	if _, err := backend.ParseKind(string(o.Backend)); err != nil {
		bad("backend %q is not heap, file or lsm", o.Backend)
	}
	if o.Token != "" && o.Addr == "" {
		bad("token without addr: the embedded daemon needs none")
	}
	if o.Job == "" || strings.ContainsAny(o.Job, "/\\ ") {
		bad("job %q: want a name without slashes or spaces", o.Job)
	}
	if len(errs) > 0 {
		return fmt.Errorf("checkpointsim: %s", strings.Join(errs, "; "))
	}
	return nil
}
