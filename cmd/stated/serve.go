package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/statedhq/stated/api"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/host"
)

// serveFlags are the options of "stated serve"; each flag also reads the
// environment variable STATED_<FLAG> (upper case, '-' as '_').
type serveFlags struct {
	dataDir           string
	socket            string
	batchSocket       string
	listen            string
	token             string
	tlsCert           string
	tlsKey            string
	tlsClientCA       string
	plaintextToken    bool
	nodeID            string
	raftAddr          string
	raftAdvertise     string
	raftPeers         string
	raftDir           string
	clusterTLSCert    string
	clusterTLSKey     string
	clusterTLSCA      string
	clusterToken      string
	metricsAddr       string
	checkpointStore   string
	s3                s3Flags
	s3Prices          string
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
	readParallelism   int
	lsmCacheSize      string
	lsmRemote         bool
	lsmCacheBytes     string
	lsmMemTable       string
	fileCompression   string
	checkpointTimeout time.Duration
	channelLinger     time.Duration
	packFileBytes     string
	externalDir       string
	idleTimeout       time.Duration
	gcGrace           time.Duration
	sweepInterval     time.Duration
	sweepMaxPages     int
	shutdownGrace     time.Duration
	logLevel          string
	logFormat         string
	gcPercent         int
	changelog         bool
	changelogStore    string
	materialize       time.Duration
	materializeFails  int
	changelogDelay    time.Duration
	changelogSize     string
	changelogInFlight string
}

func newServeCmd() *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the state daemon",
		Long: `Run the state daemon: a gRPC API on a Unix socket (mode 0600) for the tasks of
this host, and optionally on TCP (which requires --token or --tls-client-ca;
with --tls-cert and --tls-key it speaks TLS only). Every flag can also be
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
	fl.StringVar(&f.batchSocket, "batch-socket", "", "Unix socket serving batch streams without gRPC, named to clients on --socket; \"off\" for none (default --socket's path with -batch before .sock)")
	fl.StringVar(&f.listen, "listen", "", "also serve on this TCP address (requires --token or --tls-client-ca; without TLS, only a loopback address unless --allow-plaintext-token)")
	fl.StringVar(&f.token, "token", "", "token TCP clients must send (authorization: Bearer <token>)")
	fl.StringVar(&f.tlsCert, "tls-cert", "", "PEM certificate of the TCP API: with --tls-key, --listen serves TLS only (re-read when the file changes)")
	fl.StringVar(&f.tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	fl.StringVar(&f.tlsClientCA, "tls-client-ca", "", "PEM bundle of the authorities whose certificates TCP clients must present (mutual TLS)")
	fl.BoolVar(&f.plaintextToken, "allow-plaintext-token", false, "serve --token without TLS on an address that is not loopback, readable by anyone on the network path")
	fl.StringVar(&f.nodeID, "node-id", "", "cluster mode: this node's id, unique in the cluster")
	fl.StringVar(&f.raftAddr, "raft-addr", "", "cluster mode: host:port of the raft transport and node-to-node service (without it the daemon runs alone)")
	fl.StringVar(&f.raftAdvertise, "raft-advertise", "", "cluster mode: the address other nodes reach this one at (default --raft-addr)")
	fl.StringVar(&f.raftPeers, "raft-peers", "", "cluster mode: id=host:port,... of every node, this one included, to bootstrap a new cluster (ignored once --raft-dir holds state; empty: wait for 'stated cluster join')")
	fl.StringVar(&f.raftDir, "raft-dir", "", "cluster mode: the raft log and snapshots (default <data-dir>/raft)")
	fl.StringVar(&f.clusterTLSCert, "cluster-tls-cert", "", "cluster mode: this node's PEM certificate for node-to-node TLS (client and server use)")
	fl.StringVar(&f.clusterTLSKey, "cluster-tls-key", "", "cluster mode: the PEM key of --cluster-tls-cert")
	fl.StringVar(&f.clusterTLSCA, "cluster-tls-ca", "", "cluster mode: the PEM CA every node's certificate is checked against")
	fl.StringVar(&f.clusterToken, "cluster-token", "", "cluster mode: the secret every node-to-node connection carries (required without --cluster-tls-*; prefer STATED_CLUSTER_TOKEN to the flag)")
	fl.StringVar(&f.metricsAddr, "metrics-addr", "127.0.0.1:9464", `address of /metrics and /healthz ("" to disable)`)
	fl.StringVar(&f.checkpointStore, "checkpoint-store", "", "checkpoint storage URL: file:///dir or s3://bucket/prefix (default file://<data-dir>/checkpoints)")
	addS3Flags(fl, &f.s3)
	fl.StringVar(&f.s3Prices, "s3-prices", "", "prices of the estimated object-store bill on /metrics and the web page: dollars per 1,000 requests of a kind and per GB-month, e.g. put=0.005,get=0.0004,list=0.005,delete=0,head=0.0004,storage=0.023; kinds not given keep S3 Standard's us-east-1 list price (see docs/performance.md)")
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
	fl.IntVar(&f.readParallelism, "read-parallelism", 0, "goroutines that read one batch's run of 128 or more point reads, with the same results in order (0: one per CPU; 1: on the stream's own goroutine)")
	fl.StringVar(&f.lsmCacheSize, "lsm-cache-size", "128MiB", "block cache shared by every lsm instance")
	fl.BoolVar(&f.lsmRemote, "lsm-remote", false, "create every lsm instance's SSTs in the checkpoint store: checkpoints hand them over instead of uploading, restores reference them in place (docs/lsm-remote.md)")
	fl.StringVar(&f.lsmCacheBytes, "lsm-cache-bytes", "256MiB", "local cache of remote blocks of each --lsm-remote instance")
	fl.StringVar(&f.lsmMemTable, "lsm-memtable-bytes", "0", "memtable of each lsm instance, which a writing instance holds up to twice (0: 16MiB, or 64MiB with --lsm-remote, where every flush is an object in the store)")
	fl.StringVar(&f.fileCompression, "file-compression", "", `compression of file-backend snapshots: "" or "zstd"`)
	fl.DurationVar(&f.checkpointTimeout, "checkpoint-timeout", daemon.DefaultCheckpointTimeout, "a checkpoint not completed within this is aborted as expired")
	fl.StringVar(&f.packFileBytes, "pack-file-bytes", "64GiB", "a checkpoint's file backend snapshot files up to this size of all tasks of a job here go into one object per checkpoint, read back with ranged reads, and changelog manifests into the tasks' handles; -1: an object per file")
	fl.StringVar(&f.externalDir, "external-dir", "", "directory under which externally owned instances (an engine such as Flink owns their checkpoint files) write them, at roots the engine names; the engine must reach it under the same path; or an s3://bucket/prefix URL (as --checkpoint-store's, same credentials) that the engine reaches by its own S3 file system; empty: that mode is refused (docs/protocol.md)")
	fl.DurationVar(&f.channelLinger, "channel-state-linger", daemon.DefaultChannelStateLinger, "how long a task's upload of unaligned channel state waits for the job's other tasks here, so that one object holds them all")
	fl.DurationVar(&f.idleTimeout, "idle-instance-timeout", daemon.DefaultIdleInstanceTimeout,
		"an instance with no batch stream (its task died without closing it) for this long is closed; negative: never")
	fl.DurationVar(&f.gcGrace, "gc-grace", catalog.DefaultGCGrace, "age an unreferenced checkpoint file must reach before the sweep deletes it")
	fl.DurationVar(&f.sweepInterval, "sweep-interval", catalog.DefaultSweepInterval, "quiet time between orphan sweeps (counted from the end of each)")
	fl.IntVar(&f.sweepMaxPages, "sweep-max-list-pages", catalog.DefaultSweepMaxListPages, "most LIST pages (S3 LIST requests of up to 1,000 names) one orphan sweep reads; a sweep that reaches it deletes nothing and warns; negative: no bound")
	fl.DurationVar(&f.shutdownGrace, "shutdown-grace", 30*time.Second, "on SIGTERM, how long calls in flight and then in-flight snapshots may take in all before they are cancelled or aborted")
	fl.IntVar(&f.gcPercent, "gc-percent", daemon.DefaultGCPercent, "Go GC target (as GOGC; GOGC in the environment wins over the default): higher trades memory for throughput; heap and file state lives in the Go heap, so with much of it lower this or set GOMEMLIMIT")
	fl.BoolVar(&f.changelog, "changelog", false, "changelog mode for every instance whose open request does not choose: each change is logged as it happens, so checkpoints cost a log flush, not a snapshot")
	fl.StringVar(&f.changelogStore, "changelog-store", "", "store of the changelog's segments, e.g. a faster bucket or a local disk (default: the checkpoint store); keep it while checkpoints written with it are retained")
	fl.DurationVar(&f.materialize, "materialize-interval", daemon.DefaultMaterializeInterval, "how often each instance in changelog mode takes a new base snapshot (jittered by 20%)")
	fl.IntVar(&f.materializeFails, "materialize-max-failures", daemon.DefaultMaxMaterializeFailures, "after this many failed materializations of an instance in a row, its checkpoints fail until one succeeds")
	fl.DurationVar(&f.changelogDelay, "changelog-flush-delay", 0, "longest a change waits before the changelog cuts and uploads a segment of the changes of all instances, unless a checkpoint or --changelog-flush-size cuts it sooner (0: by the changelog's store: 10ms for a local directory, 1s for S3, where each segment is a PUT)")
	fl.StringVar(&f.changelogSize, "changelog-flush-size", "10MiB", "the changelog cuts a segment when the changes gathered from all instances reach this size")
	fl.StringVar(&f.changelogInFlight, "changelog-max-in-flight", "100MiB", "most changelog bytes held in memory (buffered or uploading); writes slow down past it")
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
		// slog's own error names no valid level.
		return nil, fmt.Errorf("--log-level %q is not one of debug, info, warn, error", level)
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
	opts, err := f.nodeOptions(log)
	if err != nil {
		return err
	}
	// Signals are caught from before Open: one that arrives while the node
	// opens (followGoRun's too) cancels the opening, which releases what it
	// built, rather than killing the process between the socket's bind and
	// the handler, which left the socket file behind.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sig)
	followGoRun(log)
	openCtx, cancelOpen := context.WithCancel(ctx)
	defer cancelOpen()
	opened := make(chan struct{})
	caught := make(chan os.Signal, 1)
	go func() {
		select {
		case s := <-sig:
			caught <- s
			cancelOpen()
		case <-opened:
		}
	}()
	n, err := host.Open(openCtx, opts)
	close(opened)
	if err != nil {
		select {
		case s := <-caught:
			return fmt.Errorf("stopped by %s while starting: %w", s, err)
		default:
		}
		return err
	}
	var runErr error
	select {
	case s := <-caught:
		log.Info("shutting down", "signal", s.String())
	case s := <-sig:
		log.Info("shutting down", "signal", s.String())
	case err := <-n.Err():
		runErr = err
		log.Error("server failed; shutting down", "err", err)
	case <-ctx.Done():
	}
	// Shutdown logs what it had to cancel; the exit status is the
	// server's failure alone, as it always was.
	_ = n.Shutdown(context.Background())
	return runErr
}

// nodeOptions turns the flags into the node's options and validates them
// with node's rules, reporting each problem under its flag's name. The
// options are validated as the flags give them, before the node's
// defaults: every flag has its own default, so a zero is the user's and a
// limit of 0 is refused rather than taken for the node's default.
func (f *serveFlags) nodeOptions(log *slog.Logger) (host.Options, error) {
	var errs []error
	size := func(flag, v string) int64 {
		n, err := parseSize(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("--%s: %w", flag, err))
		}
		return n
	}
	// optionalSize is size of a flag whose empty value is its default.
	optionalSize := func(flag, v string) int64 {
		if v == "" {
			return 0
		}
		return size(flag, v)
	}
	// packBytes reads --pack-file-bytes, where -1 turns packing off.
	packBytes := func(v string) int64 {
		if v == "-1" {
			return -1
		}
		return optionalSize("pack-file-bytes", v)
	}
	o := host.Options{
		DataDir: f.dataDir, Socket: f.socket, BatchSocket: f.batchSocket, Listen: f.listen, Token: f.token, MetricsAddr: f.metricsAddr,
		TLSCert: f.tlsCert, TLSKey: f.tlsKey, TLSClientCA: f.tlsClientCA, AllowPlaintextToken: f.plaintextToken,
		NodeID: f.nodeID, RaftAddr: f.raftAddr, RaftAdvertise: f.raftAdvertise, RaftPeers: f.raftPeers, RaftDir: f.raftDir,
		ClusterTLSCert: f.clusterTLSCert, ClusterTLSKey: f.clusterTLSKey, ClusterTLSCA: f.clusterTLSCA, ClusterToken: f.clusterToken,
		CheckpointStore: f.checkpointStore, S3: f.s3.options(), S3Prices: f.s3Prices, CacheDir: f.cache.dir, CacheBytes: size("cache-bytes", f.cache.bytes),
		Retain: f.retain, GCGrace: f.gcGrace, SweepInterval: f.sweepInterval, SweepMaxListPages: f.sweepMaxPages, CheckpointTimeout: f.checkpointTimeout, ChannelStateLinger: f.channelLinger,
		PackFileBytes: packBytes(f.packFileBytes), ExternalDir: f.externalDir,
		IdleInstanceTimeout: f.idleTimeout, HeapSnapshotCap: size("heap-snapshot-cap", f.heapSnapshotCap),
		MaxValueSize: int(size("max-value-size", f.maxValueSize)), MaxMessageSize: int(size("max-message-size", f.maxMessageSize)),
		MaxMemoryState: size("max-memory-state", f.maxMemoryState), MaxInstances: f.maxInstances,
		MaxStreamsPerInstance: f.maxStreams, QueueDepth: f.queueDepth, MaxConcurrentStreams: f.maxConnStreams,
		FirstBatchTimeout: f.firstBatchTimeout, ReadParallelism: f.readParallelism, LSMCacheSize: size("lsm-cache-size", f.lsmCacheSize), FileCompression: f.fileCompression,
		LSMRemote: f.lsmRemote, LSMRemoteCacheBytes: size("lsm-cache-bytes", f.lsmCacheBytes),
		LSMMemTableBytes: optionalSize("lsm-memtable-bytes", f.lsmMemTable),
		ShutdownGrace:    f.shutdownGrace, Logger: log,
		Changelog: f.changelog, ChangelogStore: f.changelogStore, MaterializeInterval: f.materialize,
		MaxMaterializeFailures: f.materializeFails, ChangelogFlushDelay: f.changelogDelay,
		ChangelogFlushSize:   int(optionalSize("changelog-flush-size", f.changelogSize)),
		ChangelogMaxInFlight: size("changelog-max-in-flight", f.changelogInFlight),
	}
	if o.CheckpointStore == "" {
		o.CheckpointStore = host.DefaultCheckpointStore(o.DataDir)
	}
	if o.CacheBytes == 0 {
		o.CacheBytes = -1 // --cache-bytes 0: no cache (the node's 0 is its default)
	}
	for _, u := range []struct{ flag, url string }{{"checkpoint-store", o.CheckpointStore}, {"changelog-store", o.ChangelogStore}} {
		if err := refuseMemStore(u.flag, u.url); err != nil {
			errs = append(errs, err)
		}
	}
	// The daemon refuses a checkpoint timeout that reaches the gc grace
	// (the sweep could delete a running checkpoint's uploads), but names
	// neither flag; both govern it, so say so here, with the values the
	// node will use.
	timeout, grace := o.CheckpointTimeout, o.GCGrace
	if timeout == 0 {
		timeout = daemon.DefaultCheckpointTimeout
	}
	if grace == 0 {
		grace = catalog.DefaultGCGrace
	}
	if timeout > 0 && grace > 0 && timeout >= grace {
		errs = append(errs, fmt.Errorf("--checkpoint-timeout %s must be shorter than --gc-grace %s: the sweep deletes unreferenced files older than --gc-grace, which would include the uploads of a checkpoint still running; lower --checkpoint-timeout or raise --gc-grace", timeout, grace))
	}
	switch {
	case f.shutdownGrace < 0:
		errs = append(errs, errors.New("--shutdown-grace is negative"))
	case f.shutdownGrace == 0:
		o.ShutdownGrace = -1 // --shutdown-grace 0: none, not the default
	}
	if len(errs) > 0 {
		return host.Options{}, errors.Join(errs...)
	}
	if err := flagErrors(o.Validate()); err != nil {
		return host.Options{}, err
	}
	return o, nil
}

// flagOf names each node.Options field that a flag of "stated serve" sets
// by that flag, so that node's problems are reported under the flags'
// names (TestFlagOfCoversOptions keeps it complete).
var flagOf = map[string]string{
	"DataDir": "data-dir", "Socket": "socket", "BatchSocket": "batch-socket", "Listen": "listen", "Token": "token", "MetricsAddr": "metrics-addr",
	"TLSCert": "tls-cert", "TLSKey": "tls-key", "TLSClientCA": "tls-client-ca", "AllowPlaintextToken": "allow-plaintext-token",
	"NodeID": "node-id", "RaftAddr": "raft-addr", "RaftAdvertise": "raft-advertise", "RaftPeers": "raft-peers", "RaftDir": "raft-dir",
	"ClusterTLSCert": "cluster-tls-cert", "ClusterTLSKey": "cluster-tls-key", "ClusterTLSCA": "cluster-tls-ca", "ClusterToken": "cluster-token",
	"CheckpointStore": "checkpoint-store", "CacheDir": "cache-dir", "CacheBytes": "cache-bytes",
	"S3.Endpoint": "s3-endpoint", "S3.Region": "s3-region", "S3.Addressing": "s3-path-style",
	"S3.AccessKeyID": "s3-access-key-id", "S3.SecretAccessKey": "s3-secret-access-key",
	"S3.S3.RequestsPerSecond": "s3-requests-per-second", "S3.S3.Burst": "s3-request-burst", "S3Prices": "s3-prices",
	"Retain": "retain", "GCGrace": "gc-grace", "SweepInterval": "sweep-interval", "SweepMaxListPages": "sweep-max-list-pages", "CheckpointTimeout": "checkpoint-timeout", "ChannelStateLinger": "channel-state-linger", "PackFileBytes": "pack-file-bytes", "ExternalDir": "external-dir",
	"IdleInstanceTimeout": "idle-instance-timeout", "HeapSnapshotCap": "heap-snapshot-cap", "MaxValueSize": "max-value-size",
	"MaxMessageSize": "max-message-size", "MaxMemoryState": "max-memory-state", "MaxInstances": "max-instances",
	"MaxStreamsPerInstance": "max-streams-per-instance", "QueueDepth": "queue-depth", "MaxConcurrentStreams": "max-concurrent-streams",
	"FirstBatchTimeout": "first-batch-timeout", "ReadParallelism": "read-parallelism", "LSMCacheSize": "lsm-cache-size", "FileCompression": "file-compression",
	"LSMRemote": "lsm-remote", "LSMRemoteCacheBytes": "lsm-cache-bytes", "LSMMemTableBytes": "lsm-memtable-bytes",
	"ShutdownGrace": "shutdown-grace", "Changelog": "changelog", "ChangelogStore": "changelog-store",
	"MaterializeInterval": "materialize-interval", "MaxMaterializeFailures": "materialize-max-failures",
	"ChangelogFlushDelay": "changelog-flush-delay", "ChangelogFlushSize": "changelog-flush-size", "ChangelogMaxInFlight": "changelog-max-in-flight",
}

// flagName is how the CLI names an option field: by its flag.
func flagName(field string) string {
	if f, ok := flagOf[field]; ok {
		return "--" + f
	}
	return field
}

// flagErrors rewrites node's option problems (joined or alone) with the
// flags' names; other errors pass unchanged.
func flagErrors(err error) error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flagErrors(e))
		}
		return errors.Join(out...)
	}
	var oe *host.OptionError
	if errors.As(err, &oe) {
		return errors.New(oe.Text(flagName))
	}
	return err
}
