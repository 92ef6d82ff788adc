package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/statedhq/stated/tools/bench"
	"github.com/statedhq/stated/tools/bench/workload"
)

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Benchmark state storage: workloads, checkpoints, restores, comparisons",
		Long: `Bench measures stated as a user sees it: named workloads through the Go client
over the daemon's socket, on an embedded daemon started per run (default) or an
external one (--addr). "stated bench run --help" lists the parameters,
"stated bench workloads" the workloads.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newBenchRunCmd(), newBenchWorkloadsCmd(), newBenchCompareCmd(), newBenchInstancesCmd(), newBenchCheckpointSimCmd())
	return cmd
}

func init() { rootCmd.AddCommand(newBenchCmd()) }

// signalContext is cancelled on SIGINT or SIGTERM, so that an interrupted
// benchmark closes its instances and daemon and removes its temporary dirs.
func signalContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx == nil {
		ctx = context.Background()
	}
	return signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

type benchRunFlags struct {
	p         bench.Params
	changelog []string
	jsonPath  string
	plotPath  string
	logLevel  string
	tls       clientTLSFlags
}

func newBenchRunCmd() *cobra.Command {
	var f benchRunFlags
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run a workload over a matrix of backends and print every phase's figures",
		Long: `Run loads the workload's keys, takes checkpoint 1, runs the workload (after a
warm-up) measuring throughput and latency per operation kind, takes checkpoint
2, restores every task from it and rescales to --rescale-to subtasks, once per
configuration of the matrix (--backend x --changelog, plus --baseline pebble:
the same load and run on raw in-process Pebble) and --repeat times, interleaved.
It prints a table (median, and min-max with repeats) and writes --json and
--plot when asked. Progress goes to stderr: a bar on a terminal, lines
otherwise.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBench(cmd, f)
		},
	}
	fl := cmd.Flags()
	p := &f.p
	fl.StringVar(&p.Workload, "workload", "value-get", "workload name (stated bench workloads lists them)")
	fl.IntVar(&p.Tasks, "tasks", bench.DefaultTasks, "parallelism: instances of one job, each on its own client connection")
	fl.IntVar(&p.Keys, "keys", bench.DefaultKeys, "keys over all tasks")
	fl.IntVar(&p.WorkloadParams.ValueSize, "value-size", 100, "bytes per value (the Flink shapes use 8)")
	fl.Float64Var(&p.WorkloadParams.ReadRatio, "read-ratio", 0.5, "share of reads of value-mixed and aggregate")
	fl.StringVar(&p.WorkloadParams.Distribution, "distribution", "", "key distribution: uniform, zipfian or latest (default: the workload's)")
	fl.Float64Var(&p.WorkloadParams.Skew, "skew", workload.DefaultSkew, "zipfian constant of zipfian and latest, in (0, 1)")
	fl.IntVar(&p.WorkloadParams.ListLen, "list-len", 100, "elements per key that list-get loads")
	fl.IntVar(&p.WorkloadParams.MapKeys, "map-keys", 10, "entries per key that the map workloads load")
	fl.IntVar(&p.WorkloadParams.ScanLen, "scan-len", 100, "longest ycsb-e scan")
	fl.IntVar(&p.Batch, "batch", bench.DefaultBatch, "client operations per batch")
	fl.IntVar(&p.InFlight, "in-flight", bench.DefaultInFlight, "operations per task issued and not yet answered")
	fl.DurationVar(&p.Duration, "duration", bench.DefaultDuration, "length of the measured run phase")
	fl.Int64Var(&p.Ops, "ops", 0, "operations of the run phase over all tasks (instead of --duration)")
	fl.DurationVar(&p.Warmup, "warmup", bench.DefaultWarmup, "unmeasured run before the run phase; 0: none")
	fl.StringSliceVar(&p.Backends, "backend", []string{"lsm"}, "backends of the matrix: heap, file, lsm")
	fl.StringSliceVar(&f.changelog, "changelog", []string{"off"}, "changelog settings of the matrix: off, on")
	fl.IntVar(&p.Repeat, "repeat", 1, "runs of the whole matrix, interleaved")
	fl.StringVar(&p.Baseline, "baseline", "", `"pebble": run the same load and operations on raw in-process Pebble too and print ratios`)
	fl.IntVar(&p.RescaleTo, "rescale-to", 0, "parallelism of the rescale phase (default twice --tasks, at most --max-parallelism; negative: skip)")
	fl.IntVar(&p.MaxParallelism, "max-parallelism", 128, "key groups of the job")
	addDaemonAddrFlag(fl, &p.Socket, "an external daemon's Unix socket or host:port (default: an embedded daemon per run)")
	fl.StringVar(&p.Token, "token", "", "bearer token of an external daemon on TCP (or STATED_TOKEN)")
	addClientTLSFlags(fl, &f.tls)
	fl.StringVar(&p.Dir, "dir", "", "where embedded daemons and baselines keep their temporary data (default the system's temp dir)")
	fl.StringVar(&p.CheckpointStore, "checkpoint-store", "", "checkpoint store of the embedded daemons: file:///dir or s3://bucket/prefix?endpoint=...&path-style=true (credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY); each run gets a fresh prefix under it, emptied afterwards (default: the daemon's data dir)")
	fl.StringVar(&p.Prices, "s3-prices", "", "prices of the $/month figures, as \"stated serve --s3-prices\" (default S3 Standard's us-east-1 list prices)")
	fl.Uint64Var(&p.Seed, "seed", 1, "seed of the operations (same seed, same operations)")
	fl.StringVar(&f.jsonPath, "json", "", "write every figure, the parameters, the machine and the revision to this file")
	fl.StringVar(&f.logLevel, "log-level", "warn", "log level of the embedded daemon (debug, info, warn, error), logged to stderr")
	fl.StringVar(&f.plotPath, "plot", "", "write a self-contained HTML page with SVG charts of throughput and latency to this file")
	return cmd
}

func parseChangelog(vals []string) ([]bool, error) {
	var out []bool
	for _, v := range vals {
		switch strings.TrimSpace(v) {
		case "off":
			out = append(out, false)
		case "on":
			out = append(out, true)
		default:
			return nil, fmt.Errorf("--changelog %q: want off, on or off,on", v)
		}
	}
	return out, nil
}

// zeroIsDefault are the flags whose zero the bench parameters read as
// "default": given explicitly on the command line, a zero is refused
// rather than silently replaced.
var zeroIsDefault = []string{"tasks", "keys", "value-size", "batch", "in-flight", "duration", "repeat", "max-parallelism", "list-len", "map-keys", "scan-len", "seed"}

func runBench(cmd *cobra.Command, f benchRunFlags) error {
	var errs []string
	for _, name := range zeroIsDefault {
		if fl := cmd.Flags().Lookup(name); fl.Changed && (fl.Value.String() == "0" || fl.Value.String() == "0s") {
			errs = append(errs, fmt.Sprintf("--%s 0: must be positive", name))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("bench: %s", strings.Join(errs, "; "))
	}
	if cmd.Flags().Changed("warmup") && f.p.Warmup == 0 {
		f.p.Warmup = -1 // --warmup 0: no warm-up
	}
	var err error
	if f.p.Changelog, err = parseChangelog(f.changelog); err != nil {
		return err
	}
	if f.p.Token == "" {
		f.p.Token = os.Getenv("STATED_TOKEN")
	}
	if f.p.TLS, err = f.tls.config(); err != nil {
		return err
	}
	ctx, cancel := signalContext(cmd.Context())
	defer cancel()
	log, err := newLogger(f.logLevel, "text")
	if err != nil {
		return err
	}
	errOut := cmd.ErrOrStderr()
	r := &bench.Runner{Params: f.p, Progress: errOut, Terminal: isTerminal(errOut), Logger: log}
	rep, err := r.Run(ctx)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	bench.PrintHeader(out, rep)
	bench.PrintTable(out, rep)
	if f.jsonPath != "" {
		if err := bench.WriteJSON(f.jsonPath, rep); err != nil {
			return err
		}
		fmt.Fprintln(errOut, "wrote", f.jsonPath)
	}
	if f.plotPath != "" {
		if err := bench.WritePlot(f.plotPath, rep); err != nil {
			return err
		}
		fmt.Fprintln(errOut, "wrote", f.plotPath)
	}
	return nil
}

func newBenchWorkloadsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "workloads",
		Short: "List the workloads of stated bench run",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			for _, s := range workload.All() {
				fmt.Fprintf(tw, "%s\t%s\n", s.Name, s.Doc)
			}
			return tw.Flush()
		},
	}
}

func newBenchCompareCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "compare A.json B.json",
		Short: "Compare two reports of stated bench run figure by figure",
		Long: `Compare prints, for every configuration and figure both reports have, A and B
as median (min-max), the ratio B/A and a verdict: noise when the two min-max
bands overlap (the difference is within what repeats already showed), else
better or worse by the figure's direction; "no band" when a side has one run
(use --repeat 3 or more). It also lists the parameters and machine that differ.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := bench.ReadJSON(args[0])
			if err != nil {
				return err
			}
			b, err := bench.ReadJSON(args[1])
			if err != nil {
				return err
			}
			cs, err := bench.Compare(a, b)
			if err != nil {
				return err
			}
			bench.PrintCompare(cmd.OutOrStdout(), a, b, cs)
			return nil
		},
	}
}

func newBenchInstancesCmd() *cobra.Command {
	var p bench.InstancesParams
	var jsonPath string
	var tlsFlags clientTLSFlags
	cmd := &cobra.Command{
		Use:   "instances",
		Short: "Open many idle instances and report their memory, descriptors and open time",
		Long: `Instances opens --count idle instances of --backend (one value state each, no
data) over --connections client connections, as that many task processes
would, and reports the time to open and close them and, on the embedded daemon,
the resident memory (VmRSS), Go heap and file descriptors per instance of this
process (daemon and clients). It opens a few first and stops with a clear error
when the rest would pass the file-descriptor limit (RLIMIT_NOFILE).

With --idle it keeps them open and idle that long and reports the requests the
embedded daemon sent its checkpoint store meanwhile (the idle cost; put it on
S3 with --checkpoint-store s3://...).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if p.Token == "" {
				p.Token = os.Getenv("STATED_TOKEN")
			}
			var err error
			if p.TLS, err = tlsFlags.config(); err != nil {
				return err
			}
			ctx, cancel := signalContext(cmd.Context())
			defer cancel()
			r, err := bench.Instances(ctx, p, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			bench.PrintInstances(cmd.OutOrStdout(), r)
			if jsonPath != "" {
				b, err := json.MarshalIndent(r, "", "  ")
				if err != nil {
					return err
				}
				return os.WriteFile(jsonPath, append(b, '\n'), 0o644)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&p.Backend, "backend", "lsm", "backend of the instances: heap, file or lsm")
	fl.IntVar(&p.Count, "count", 100, "idle instances to open")
	fl.IntVar(&p.Connections, "connections", 4, "client connections the instances are opened over, in parallel")
	addDaemonAddrFlag(fl, &p.Socket, "an external daemon's Unix socket or host:port (default: an embedded daemon)")
	fl.StringVar(&p.Token, "token", "", "bearer token of an external daemon on TCP (or STATED_TOKEN)")
	addClientTLSFlags(fl, &tlsFlags)
	fl.StringVar(&p.Dir, "dir", "", "where the embedded daemon keeps its temporary data dir (default the system's temp dir)")
	fl.DurationVar(&p.Idle, "idle", 0, "keep the instances open and idle this long and report the checkpoint store's requests meanwhile (embedded daemon only)")
	fl.StringVar(&p.CheckpointStore, "checkpoint-store", "", "checkpoint store of the embedded daemon, as \"stated bench run --checkpoint-store\"")
	fl.BoolVar(&p.Changelog, "changelog", false, "open the instances in changelog mode")
	fl.BoolVar(&p.LSMRemote, "lsm-remote", false, "run the embedded daemon as \"stated serve --lsm-remote\" (lsm SSTs in the checkpoint store)")
	fl.StringVar(&jsonPath, "json", "", "write the figures to this file")
	return cmd
}

// addDaemonAddrFlag adds --addr, the daemon a client command talks to (a
// Unix socket path or host:port), as every such command names it
// ("stated bench checkpoint-sim", "stated savepoint"), and the deprecated
// --socket that "stated bench run" and "bench instances" used to take, set
// to the same variable so that old scripts keep working.
func addDaemonAddrFlag(fl *pflag.FlagSet, dst *string, usage string) {
	fl.StringVar(dst, "addr", "", usage)
	fl.StringVar(dst, "socket", "", "deprecated: use --addr")
	_ = fl.MarkDeprecated("socket", "use --addr (the same flag as \"stated bench checkpoint-sim\" and \"stated savepoint\")")
}
