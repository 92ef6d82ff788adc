package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"

	"github.com/statedhq/stated/api"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/daemon/openers"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/metered"
)

// serveFlags are the options of "stated serve"; each flag also reads the
// environment variable STATED_<FLAG> (upper case, '-' as '_').
type serveFlags struct {
	dataDir           string
	socket            string
	listen            string
	token             string
	metricsAddr       string
	checkpointStore   string
	s3                s3Flags
	cache             cacheFlags
	retain            int
	heapSnapshotCap   string
	maxValueSize      string
	maxMemoryState    string
	maxMessageSize    string
	maxInstances      int
	maxStreams        int // per instance
	queueDepth        int
	maxConnStreams    int
	firstBatchTimeout time.Duration
	lsmCacheSize      string
	fileCompression   string
	checkpointTimeout time.Duration
	idleTimeout       time.Duration
	gcGrace           time.Duration
	sweepInterval     time.Duration
	shutdownGrace     time.Duration
	logLevel          string
	logFormat         string
	gcPercent         int
}

func newServeCmd() *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the state daemon",
		Long: `Run the state daemon: a gRPC API on a Unix socket (mode 0600) for the tasks of
this host, and optionally on TCP (which requires --token). Every flag can also be
set with an environment variable STATED_<FLAG>, e.g. STATED_DATA_DIR.

Stop it with SIGTERM (or SIGINT): it stops accepting, lets the calls in flight
(a Snapshot waiting for its upload, a CompleteCheckpoint) and then the in-flight
snapshots finish within --shutdown-grace in all, ends every batch stream once
no call is left, cancels the calls and aborts the snapshots still running when
the grace ends, closes every backend and exits 0.`,
		Args: cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			return flagsFromEnv(cmd.Flags())
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runServe(cmd.Context(), f, cmd.Flags().Changed("gc-percent"))
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.dataDir, "data-dir", "./stated-data", "directory for working state (and the default checkpoint store and socket)")
	fl.StringVar(&f.socket, "socket", "", "Unix socket path (default <data-dir>/stated.sock)")
	fl.StringVar(&f.listen, "listen", "", "also serve on this TCP address (requires --token)")
	fl.StringVar(&f.token, "token", "", "token TCP clients must send (authorization: Bearer <token>)")
	fl.StringVar(&f.metricsAddr, "metrics-addr", "127.0.0.1:9464", `address of /metrics and /healthz ("" to disable)`)
	fl.StringVar(&f.checkpointStore, "checkpoint-store", "", "checkpoint storage URL: file:///dir or s3://bucket/prefix (default file://<data-dir>/checkpoints)")
	addS3Flags(fl, &f.s3)
	addCacheFlags(fl, &f.cache)
	fl.IntVar(&f.retain, "retain", catalog.DefaultRetain, "completed checkpoints kept per job")
	fl.StringVar(&f.heapSnapshotCap, "heap-snapshot-cap", "5MiB", "largest heap snapshot kept in daemon memory; larger ones are declined")
	fl.StringVar(&f.maxValueSize, "max-value-size", "4MiB", "largest key, namespace, value, list element or map user key/value")
	fl.StringVar(&f.maxMessageSize, "max-message-size", "16MiB", "largest request message")
	fl.StringVar(&f.maxMemoryState, "max-memory-state", "1GiB", "most in-memory state (keys and values) one heap or file instance holds; writes past it fail with RESOURCE_EXHAUSTED")
	fl.IntVar(&f.maxInstances, "max-instances", daemon.DefaultMaxInstances, "most backend instances open at once")
	fl.IntVar(&f.maxStreams, "max-streams-per-instance", daemon.DefaultMaxStreamsPerInstance, "most batch streams one instance has open at once")
	fl.IntVar(&f.queueDepth, "queue-depth", api.DefaultQueueDepth, "received batches a stream buffers while one is applied (with --max-message-size and --max-streams-per-instance, bounds the memory one instance's clients pin)")
	fl.IntVar(&f.maxConnStreams, "max-concurrent-streams", api.DefaultMaxConcurrentStreams, "most streams and calls one client connection has open at once (one batch stream per open instance, one per call in flight); more wait in the client")
	fl.DurationVar(&f.firstBatchTimeout, "first-batch-timeout", api.DefaultFirstBatchTimeout, "a batch stream that has not named its instance (sent its first request) within this is ended")
	fl.StringVar(&f.lsmCacheSize, "lsm-cache-size", "128MiB", "block cache shared by every lsm instance")
	fl.StringVar(&f.fileCompression, "file-compression", "", `compression of file-backend snapshots: "" or "zstd"`)
	fl.DurationVar(&f.checkpointTimeout, "checkpoint-timeout", daemon.DefaultCheckpointTimeout, "a checkpoint not completed within this is aborted as expired")
	fl.DurationVar(&f.idleTimeout, "idle-instance-timeout", daemon.DefaultIdleInstanceTimeout,
		"an instance with no batch stream (its task died without closing it) for this long is closed; negative: never")
	fl.DurationVar(&f.gcGrace, "gc-grace", catalog.DefaultGCGrace, "age an unreferenced checkpoint file must reach before the sweep deletes it")
	fl.DurationVar(&f.sweepInterval, "sweep-interval", catalog.DefaultSweepInterval, "period of the orphan sweep")
	fl.DurationVar(&f.shutdownGrace, "shutdown-grace", 30*time.Second, "on SIGTERM, how long calls in flight and then in-flight snapshots may take in all before they are cancelled or aborted")
	fl.IntVar(&f.gcPercent, "gc-percent", daemon.DefaultGCPercent, "Go GC target (as GOGC; GOGC in the environment wins over the default): higher trades memory for throughput; heap and file state lives in the Go heap, so with much of it lower this or set GOMEMLIMIT")
	fl.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fl.StringVar(&f.logFormat, "log-format", "text", "text or json")
	return cmd
}

func init() { rootCmd.AddCommand(newServeCmd()) }

// envName is the environment variable of a flag.
func envName(flag string) string {
	return "STATED_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// flagsFromEnv sets every flag not given on the command line from its
// environment variable.
func flagsFromEnv(fs *pflag.FlagSet) error {
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed {
			return
		}
		if v, ok := os.LookupEnv(envName(f.Name)); ok {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", envName(f.Name), v, err))
			}
		}
	})
	return errors.Join(errs...)
}

// parseSize parses a byte count with an optional unit (K, KB, KiB, M, MB,
// MiB, G, GB, GiB; decimal units are powers of 1000).
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("size %q is not a byte count such as 4194304, 4MiB or 64KB", s)
	}
	return n * mult, nil
}

func newLogger(level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: %w", level, err)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q is not text or json", format)
}

type sizes struct{ heapCap, maxValue, maxMessage, lsmCache, maxMemory int64 }

func (f *serveFlags) validate() (sizes, error) {
	var s sizes
	var errs []error
	parse := func(flag, v string, dst *int64) {
		n, err := parseSize(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("--%s: %w", flag, err))
		}
		*dst = n
	}
	parse("heap-snapshot-cap", f.heapSnapshotCap, &s.heapCap)
	parse("max-value-size", f.maxValueSize, &s.maxValue)
	parse("max-memory-state", f.maxMemoryState, &s.maxMemory)
	parse("max-message-size", f.maxMessageSize, &s.maxMessage)
	parse("lsm-cache-size", f.lsmCacheSize, &s.lsmCache)
	if s.maxMessage > 1<<31-1 {
		errs = append(errs, errors.New("--max-message-size must be below 2GiB"))
	}
	if s.maxValue > s.maxMessage/2 && s.maxMessage > 0 {
		errs = append(errs, fmt.Errorf("--max-value-size %d must be at most half of --max-message-size %d", s.maxValue, s.maxMessage))
	}
	if s.maxValue == 0 || s.maxMessage == 0 || s.maxMemory == 0 {
		errs = append(errs, errors.New("--max-value-size, --max-message-size and --max-memory-state must be positive"))
	}
	if f.listen != "" && f.token == "" {
		errs = append(errs, errors.New("--listen needs --token: TCP clients are not protected by the socket's file mode"))
	}
	if f.retain < 1 {
		errs = append(errs, fmt.Errorf("--retain %d must be at least 1", f.retain))
	}
	if f.shutdownGrace < 0 {
		errs = append(errs, errors.New("--shutdown-grace is negative"))
	}
	for _, l := range []struct {
		flag string
		n    int
	}{{"max-streams-per-instance", f.maxStreams}, {"queue-depth", f.queueDepth}, {"max-concurrent-streams", f.maxConnStreams}} {
		if l.n < 1 {
			errs = append(errs, fmt.Errorf("--%s %d must be at least 1", l.flag, l.n))
		}
	}
	if f.maxConnStreams > math.MaxUint32 {
		errs = append(errs, fmt.Errorf("--max-concurrent-streams %d is above %d", f.maxConnStreams, uint32(math.MaxUint32)))
	}
	if f.firstBatchTimeout <= 0 {
		errs = append(errs, errors.New("--first-batch-timeout must be positive"))
	}
	errs = append(errs, f.s3.validate(), f.cache.validate())
	return s, errors.Join(errs...)
}

// serverOptions are the api limits the flags set.
func (f *serveFlags) serverOptions(sz sizes, log *slog.Logger) api.ServerOptions {
	return api.ServerOptions{MaxMessageSize: int(sz.maxMessage), QueueDepth: f.queueDepth,
		MaxConcurrentStreams: f.maxConnStreams, FirstBatchTimeout: f.firstBatchTimeout, Logger: log}
}

func runServe(ctx context.Context, f serveFlags, gcFlagSet bool) error {
	if ctx == nil {
		ctx = context.Background()
	}
	log, err := newLogger(f.logLevel, f.logFormat)
	if err != nil {
		return err
	}
	if _, env := os.LookupEnv("GOGC"); gcFlagSet || !env {
		debug.SetGCPercent(f.gcPercent)
	}
	sz, err := f.validate()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(f.dataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	unlock, err := lockDataDir(f.dataDir)
	if err != nil {
		return err
	}
	defer unlock()
	if f.socket == "" {
		f.socket = filepath.Join(f.dataDir, "stated.sock")
	}
	if f.checkpointStore == "" {
		abs, err := filepath.Abs(filepath.Join(f.dataDir, "checkpoints"))
		if err != nil {
			return err
		}
		f.checkpointStore = "file://" + abs
	}

	// Count the calls that reach the checkpoint store itself (below the
	// cache): what a provider bills and throttles.
	var meter *metered.Store
	store, closeStore, err := openCheckpointStore(ctx, &f, log, func(s tiered.Store) tiered.Store {
		meter = metered.New(s)
		return meter
	})
	if err != nil {
		return err
	}
	defer closeStore()
	set, err := openers.New(openers.Config{HeapSnapshotCap: sz.heapCap, LSMCacheSize: sz.lsmCache, FileCompression: f.fileCompression})
	if err != nil {
		return err
	}
	defer set.Close()
	cat, err := catalog.Open(ctx, catalog.Options{
		Store: store, Retain: f.retain, GCGrace: f.gcGrace, SweepInterval: f.sweepInterval,
		// The catalog deletes heap snapshots of checkpoints it no longer
		// retains from the daemon's memory.
		HeapStore: set.HeapSnapshots,
		Logger:    log,
	})
	if err != nil {
		return err
	}
	defer cat.Close()
	for _, p := range cat.Problems() {
		log.Warn("catalog problem", "problem", p)
	}
	metrics := daemon.NewMetrics()
	d, err := daemon.New(daemon.Config{
		DataDir: f.dataDir, Store: store, Catalog: cat, Openers: set.Openers, HeapSnapshots: set.HeapSnapshots,
		MaxValueSize: int(sz.maxValue), MaxMemoryState: sz.maxMemory, MaxInstances: f.maxInstances, MaxStreamsPerInstance: f.maxStreams,
		CheckpointTimeout: f.checkpointTimeout, IdleInstanceTimeout: f.idleTimeout, Logger: log, Metrics: metrics,
	})
	if err != nil {
		return err
	}
	if err := cat.Start(ctx); err != nil {
		return err
	}
	srv := api.NewServer(d, f.serverOptions(sz, log))

	var servers []*grpc.Server
	var wg sync.WaitGroup
	serveErr := make(chan error, 3)
	ln, err := listenUnix(f.socket)
	if err != nil {
		return err
	}
	defer os.Remove(f.socket)
	g := srv.GRPCServer("")
	servers = append(servers, g)
	wg.Add(1)
	go func() { defer wg.Done(); serveErr <- serveGRPC(g, ln, "unix") }()
	if f.listen != "" {
		tl, err := net.Listen("tcp", f.listen)
		if err != nil {
			g.Stop()
			return fmt.Errorf("--listen: %w", err)
		}
		tg := srv.GRPCServer(f.token)
		servers = append(servers, tg)
		wg.Add(1)
		go func() { defer wg.Done(); serveErr <- serveGRPC(tg, tl, "tcp") }()
		log.Info("serving TCP", "addr", tl.Addr().String())
	}
	var healthy atomic.Bool
	healthy.Store(true)
	var hs *http.Server
	if f.metricsAddr != "" {
		ml, err := net.Listen("tcp", f.metricsAddr)
		if err != nil {
			for _, s := range servers {
				s.Stop()
			}
			return fmt.Errorf("--metrics-addr: %w", err)
		}
		hs = metricsServer(metrics, cat, storeCache(store), meter, &healthy)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := hs.Serve(ml); err != nil && !errors.Is(err, http.ErrServerClosed) {
				serveErr <- fmt.Errorf("metrics: %w", err)
			}
		}()
		log.Info("serving metrics", "addr", ml.Addr().String())
	}
	log.Info("stated serving", "socket", f.socket, "dataDir", f.dataDir, "checkpointStore", redactURL(f.checkpointStore), "pid", os.Getpid())

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sig)
	var runErr error
	select {
	case s := <-sig:
		log.Info("shutting down", "signal", s.String())
	case err := <-serveErr:
		runErr = err
		log.Error("server failed; shutting down", "err", err)
	case <-ctx.Done():
	}
	healthy.Store(false)
	// Stop accepting; let unary calls in flight (a Snapshot waiting for its
	// upload, a CompleteCheckpoint) finish within the grace, then end the
	// batch streams (they only end when their clients end them). Drain
	// returns once no handler runs, so Shutdown never runs under a call.
	graceCtx, cancel := context.WithTimeout(context.Background(), f.shutdownGrace)
	defer cancel()
	if err := srv.Drain(graceCtx, servers...); err != nil {
		log.Warn("calls still running at the end of --shutdown-grace were cancelled", "err", err)
	}
	// In-flight snapshots finish within what is left of the grace, or are
	// aborted; then every backend (Pebble included) is closed.
	if err := d.Shutdown(graceCtx); err != nil {
		log.Warn("shutdown", "err", err)
	}
	if hs != nil {
		sctx, scancel := context.WithTimeout(context.Background(), time.Second)
		_ = hs.Shutdown(sctx)
		scancel()
	}
	wg.Wait()
	log.Info("stopped")
	return runErr
}

func serveGRPC(g *grpc.Server, ln net.Listener, what string) error {
	if err := g.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("%s server: %w", what, err)
	}
	return nil
}

// listenUnix listens on a Unix socket that only the daemon's user can use
// (mode 0600 from the start: the umask is tightened around the bind). A
// stale socket file is replaced; a live one (another daemon) is an error.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("socket: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("socket: %s exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("socket: %s is in use by another process (another stated?)", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("socket: remove stale %s: %w", path, err)
		}
	}
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("socket: %w", err)
	}
	return ln, nil
}

// lockDataDir takes an exclusive lock on <dir>/LOCK so that two daemons
// never share working state.
func lockDataDir(dir string) (func(), error) {
	p := filepath.Join(dir, "LOCK")
	fh, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data dir lock: %w", err)
	}
	if err := syscall.Flock(int(fh.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		fh.Close()
		return nil, fmt.Errorf("data dir %s is locked by another stated process: %w", dir, err)
	}
	return func() { fh.Close() }, nil
}

func redactURL(u string) string {
	if i := strings.Index(u, "?"); i >= 0 {
		return u[:i] + "?..."
	}
	return u
}

func metricsServer(m *daemon.Metrics, cat *catalog.Catalog, cs cacheStats, meter *metered.Store, healthy *atomic.Bool) *http.Server {
	reg := prometheus.NewRegistry()
	reg.MustRegister(newCollector(m, cat, cs, meter), collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !healthy.Load() {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
}
