package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tools/bench/checkpointsim"
)

type checkpointSimFlags struct {
	o        checkpointsim.Options
	mode     string
	debloat  string
	backend  string
	jsonPath string
	plotPath string
	logLevel string
	// The exactly-once check.
	killAt    time.Duration
	rescaleTo int
}

// checkpointSimZeroIsDefault are the flags whose zero the options read as
// "default": given explicitly, a zero is refused rather than replaced.
var checkpointSimZeroIsDefault = []string{"parallelism", "buffers", "records-per-buffer", "debloat-target", "source-rate",
	"window-cost", "sink-cost", "interval", "checkpoints", "timeout", "keys", "window", "seed", "max-parallelism", "records", "rescale-to"}

func newBenchCheckpointSimCmd() *cobra.Command {
	var f checkpointSimFlags
	cmd := &cobra.Command{
		Use:   "checkpoint-sim",
		Short: "Simulate a back-pressured job's aligned and unaligned checkpoints through a real daemon",
		Long: `Checkpoint-sim runs a simulated job (sources -> keyBy -> window count -> sink)
in simulated time, with a sink slower than the sources so that back-pressure
fills the channels' buffers, and takes its checkpoints through a real daemon
(embedded, or --addr): keyed window state, source offsets, the sink's
transactions and, for unaligned checkpoints, the in-flight records as channel
state. It runs each --mode with buffer debloating off and on (--debloat) and
prints, per checkpoint, what Flink's checkpoint history shows: end-to-end
duration, start delay, alignment, sync and async parts, checkpointed and full
size, persisted in-flight data and whether it was unaligned. Simulated times
are reproducible; sync and async are the daemon's, measured.

With --kill-at it checks exactly-once output instead: per mode, a job on
--records records per source runs to the end, then again killed at --kill-at
(simulated), restored from its latest completed checkpoint with the window
operator at --rescale-to subtasks and run to the end; the committed outputs
must be equal. It fails when they are not.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runCheckpointSim(cmd, f) },
	}
	fl := cmd.Flags()
	o := &f.o
	fl.StringVar(&f.mode, "mode", "all", "checkpoint mode: aligned, unaligned, aligned-timeout or all")
	fl.StringVar(&f.debloat, "debloat", "both", "buffer debloating: off, on or both")
	fl.IntVar(&o.Parallelism, "parallelism", checkpointsim.DefaultParallelism, "subtasks of source, window and sink")
	fl.IntVar(&o.Buffers, "buffers", checkpointsim.DefaultBuffers, "buffers per channel, on each side (subpartition and input channel)")
	fl.IntVar(&o.RecordsPerBuffer, "records-per-buffer", checkpointsim.DefaultRecordsPerBuffer, "records a buffer holds")
	fl.DurationVar(&o.DebloatTarget, "debloat-target", checkpointsim.DefaultDebloatTarget, "with debloating: processing time the in-flight records of a consumer may hold")
	fl.Float64Var(&o.SourceRate, "source-rate", checkpointsim.DefaultSourceRate, "records per second each source produces when not back-pressured")
	fl.DurationVar(&o.WindowCost, "window-cost", checkpointsim.DefaultWindowCost, "simulated processing time of a record in the window")
	fl.DurationVar(&o.SinkCost, "sink-cost", checkpointsim.DefaultSinkCost, "simulated processing time of a result in the sink")
	fl.DurationVar(&o.Interval, "interval", checkpointsim.DefaultInterval, "checkpoint interval (simulated)")
	fl.IntVar(&o.Checkpoints, "checkpoints", checkpointsim.DefaultCheckpoints, "checkpoints per run")
	fl.DurationVar(&o.Timeout, "timeout", checkpointsim.DefaultTimeout, "aligned-timeout: switch a checkpoint to unaligned this long after its trigger")
	fl.IntVar(&o.Keys, "keys", checkpointsim.DefaultKeys, "distinct keys")
	fl.Int64Var(&o.Window, "window", checkpointsim.DefaultWindow, "tumbling window length in records of one source (event time = sequence number)")
	fl.Uint64Var(&o.Seed, "seed", 1, "seed of the records' keys")
	fl.StringVar(&f.backend, "backend", string(checkpointsim.DefaultBackend), "state backend of the tasks: heap, file or lsm")
	fl.IntVar(&o.MaxParallelism, "max-parallelism", checkpointsim.DefaultMaxParallelism, "key groups of the job")
	fl.StringVar(&o.Addr, "addr", "", "an external daemon's Unix socket or host:port (default: an embedded daemon)")
	fl.StringVar(&o.Token, "token", "", "bearer token of an external daemon on TCP (or STATED_TOKEN)")
	fl.StringVar(&o.Dir, "dir", "", "where the embedded daemon keeps its temporary data dir (default the system's temp dir)")
	fl.StringVar(&f.jsonPath, "json", "", "write the options and every checkpoint's figures to this file")
	fl.StringVar(&f.plotPath, "plot", "", "write an SVG chart of durations and persisted in-flight data to this file")
	fl.StringVar(&f.logLevel, "log-level", "warn", "log level of the embedded daemon (debug, info, warn, error), logged to stderr")
	fl.DurationVar(&f.killAt, "kill-at", 0, "check exactly-once output: kill the job at this simulated time and restore it")
	fl.Int64Var(&o.Records, "records", 12_000, "with --kill-at: records per source (bounded input)")
	fl.IntVar(&f.rescaleTo, "rescale-to", 0, "with --kill-at: the window operator's parallelism after the restore (default --parallelism)")
	return cmd
}

func runCheckpointSim(cmd *cobra.Command, f checkpointSimFlags) error {
	var errs []string
	for _, name := range checkpointSimZeroIsDefault {
		if fl := cmd.Flags().Lookup(name); fl.Changed && (fl.Value.String() == "0" || fl.Value.String() == "0s") {
			errs = append(errs, fmt.Sprintf("--%s 0: must be positive", name))
		}
	}
	mode, err := checkpointsim.ParseMode(f.mode)
	if err != nil {
		errs = append(errs, fmt.Sprintf("--mode %q: want aligned, unaligned, aligned-timeout or all", f.mode))
	}
	switch f.debloat {
	case "off":
		f.o.Debloat = []bool{false}
	case "on":
		f.o.Debloat = []bool{true}
	case "both":
		f.o.Debloat = []bool{false, true}
	default:
		errs = append(errs, fmt.Sprintf("--debloat %q: want off, on or both", f.debloat))
	}
	if f.killAt < 0 {
		errs = append(errs, fmt.Sprintf("--kill-at %s is negative", f.killAt))
	}
	if f.killAt == 0 {
		for _, name := range []string{"records", "rescale-to"} {
			if cmd.Flags().Changed(name) {
				errs = append(errs, fmt.Sprintf("--%s needs --kill-at", name))
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("checkpoint-sim: %s", strings.Join(errs, "; "))
	}
	f.o.Modes = []checkpointsim.Mode{mode}
	f.o.Backend = backend.Kind(f.backend)
	if f.o.Token == "" && f.o.Addr != "" {
		f.o.Token = os.Getenv("STATED_TOKEN")
	}
	log, err := newLogger(f.logLevel, "text")
	if err != nil {
		return err
	}
	f.o.Logger = log
	ctx, cancel := signalContext(cmd.Context())
	defer cancel()
	errOut := cmd.ErrOrStderr()
	if f.killAt > 0 {
		return runExactlyOnce(ctx, cmd, f)
	}
	f.o.Records = 0 // the table's runs: unbounded input, stopped after the checkpoints
	rep, err := checkpointsim.Run(ctx, f.o, errOut)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	checkpointsim.PrintTable(out, rep)
	fmt.Fprintln(out)
	checkpointsim.PrintSummary(out, rep)
	if f.jsonPath != "" {
		if err := checkpointsim.WriteJSON(f.jsonPath, rep); err != nil {
			return err
		}
		fmt.Fprintln(errOut, "wrote", f.jsonPath)
	}
	if f.plotPath != "" {
		if err := checkpointsim.WritePlot(f.plotPath, rep); err != nil {
			return err
		}
		fmt.Fprintln(errOut, "wrote", f.plotPath)
	}
	return nil
}

// runExactlyOnce runs the exactly-once check of every mode asked for.
func runExactlyOnce(ctx context.Context, cmd *cobra.Command, f checkpointSimFlags) error {
	f.o.EnsureDefaults()
	if !cmd.Flags().Changed("checkpoints") {
		// Checkpoints until the bounded input ends.
		f.o.Checkpoints = 10_000
	}
	var rs []*checkpointsim.ExactlyOnceResult
	failed := 0
	for _, m := range f.o.Modes {
		r, err := checkpointsim.ExactlyOnce(ctx, f.o, m, f.killAt, f.rescaleTo)
		if err != nil {
			return err
		}
		if r.Differences() > 0 {
			failed++
		}
		rs = append(rs, r)
	}
	checkpointsim.PrintExactlyOnce(cmd.OutOrStdout(), rs)
	if f.jsonPath != "" {
		b, err := json.MarshalIndent(rs, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(f.jsonPath, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("checkpoint-sim: %w", err)
		}
	}
	if failed > 0 {
		return fmt.Errorf("checkpoint-sim: %d of %d modes did not restore exactly once", failed, len(rs))
	}
	return nil
}
