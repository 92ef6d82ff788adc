package host

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/url"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/statedhq/stated/api"
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/heap"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/cluster"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/daemon/openers"
	"github.com/statedhq/stated/dstl"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/cost"
	"github.com/statedhq/stated/tiered/storeurl"
)

// Defaults of Options that no lower package defines.
const (
	// DefaultDataDir is where a node keeps its working state.
	DefaultDataDir = "./stated-data"
	// DefaultShutdownGrace bounds a Shutdown's drain of calls in flight
	// and then in-flight snapshots, in all.
	DefaultShutdownGrace = 30 * time.Second
	// DefaultCacheBytes bounds the local cache of a remote checkpoint
	// store.
	DefaultCacheBytes = 1 << 30
	// SocketName is the default socket's name in the data dir.
	SocketName = "stated.sock"
	// BatchSocketOff as Options.BatchSocket serves no batch socket.
	BatchSocketOff = "off"
)

// Options configure a node: every setting of "stated serve" (each field
// names its flag), plus the seams tests use (Store, Listener, NoSocket,
// GRPCOptions). Zero values take their defaults (EnsureDefaults); Open
// calls EnsureDefaults and Validate.
type Options struct {
	// DataDir holds working state: instances, the LOCK file and, by
	// default, the socket, the checkpoint store and the cache. Open
	// creates it (mode 0700) and locks it for this process (--data-dir).
	// Default DefaultDataDir.
	DataDir string
	// Socket is the path of the Unix socket (mode 0600) of the local API,
	// which needs no token (--socket). Default <DataDir>/stated.sock.
	Socket string
	// Listener, when set, serves the local API (no token) instead of
	// Socket: tests pass an in-process listener (bufconn) or one on a
	// socket of their own. The node closes it. Default nil.
	Listener net.Listener
	// BatchSocket is the path of the Unix socket (mode 0600) that serves
	// batch streams without gRPC, which Open names to clients on Socket
	// (--batch-socket; docs/protocol.md, "The batch socket"). "off": none.
	// Default: Socket's path with "-batch" before its ".sock" (appended
	// if it has none); none with Listener or NoSocket, or when that path
	// is over the kernel's limit.
	BatchSocket string
	// NoSocket serves no local API (Socket and Listener unused): the
	// caller uses Daemon or Server directly. Default false.
	NoSocket bool
	// Listen is a TCP address to serve the API on too, for clients that
	// send Token (--listen). Default "": none.
	Listen string
	// Token is the bearer token TCP clients must send (--token). Listen
	// needs Token, TLSClientCA, or both.
	Token string
	// TLSCert and TLSKey are the PEM certificate and key of the TCP API
	// (--tls-cert, --tls-key): with them, Listen serves TLS only. The
	// files are re-read when they change, so certificates rotate without
	// a restart. Default "": plaintext.
	TLSCert, TLSKey string
	// TLSClientCA is a PEM bundle of the authorities whose certificates
	// TCP clients must present (mutual TLS, --tls-client-ca). It needs
	// TLSCert. Default "": no client certificate asked for.
	TLSClientCA string
	// AllowPlaintextToken lets Listen serve a token without TLS on an
	// address that is not loopback (--allow-plaintext-token), where
	// anyone on the network path can read the token. Default false:
	// refused.
	AllowPlaintextToken bool
	// NodeID, RaftAddr and the other Raft and Cluster fields run the node
	// in cluster mode: a member of a raft group that replicates the
	// fencing tokens of tasks (package cluster). Without RaftAddr the
	// daemon runs alone, without raft.
	//
	// NodeID is this node's id, unique in the cluster (--node-id).
	NodeID string
	// RaftAddr is the host:port of the raft transport and the
	// node-to-node service (--raft-addr).
	RaftAddr string
	// RaftAdvertise is the address other nodes reach this one at
	// (--raft-advertise). Default RaftAddr.
	RaftAdvertise string
	// RaftPeers bootstraps a new cluster: "id=host:port,..." with this
	// node among them (--raft-peers). Ignored once RaftDir holds raft
	// state; empty: the node waits to be joined ("stated cluster join").
	RaftPeers string
	// RaftDir holds the raft log and snapshots (--raft-dir). Default
	// <DataDir>/raft.
	RaftDir string
	// ClusterTLSCert, ClusterTLSKey and ClusterTLSCA secure the traffic
	// between nodes with TLS and client certificates
	// (--cluster-tls-cert/-key/-ca). All three or none.
	ClusterTLSCert, ClusterTLSKey, ClusterTLSCA string
	// ClusterToken is the secret every node-to-node connection carries
	// (--cluster-token). Required without the cluster TLS files.
	ClusterToken string
	// TuneCluster, when set, adjusts the cluster options before the
	// member starts (tests shorten the raft timeouts). Default nil.
	TuneCluster func(*cluster.Options)
	// Fence, when set, fences tasks instead of the cluster (tests).
	// Default nil: the cluster's tokens in cluster mode, none alone.
	Fence daemon.Fencer
	// MetricsAddr is the TCP address of /metrics and /healthz
	// (--metrics-addr). Default "": none (Handler still serves both; the
	// flag's default is 127.0.0.1:9464).
	MetricsAddr string

	// CheckpointStore is the checkpoint storage URL: file:///dir or
	// s3://bucket/prefix (--checkpoint-store). Default
	// file://<absolute DataDir>/checkpoints; unused with Store.
	CheckpointStore string
	// Store, when set, is the checkpoint store instead of the one
	// CheckpointStore names (tests inject a memstore or a faulty store).
	// The node puts its meter and cache in front of it as in front of a
	// URL's store, and never closes it: the caller owns it. Default nil.
	Store tiered.Store
	// S3 are the S3 settings of an s3:// store (the --s3-* flags). Its
	// CacheDir, CacheBytes, Uncached and Wrap are the node's: leave them
	// unset. S3.S3.Logger defaults to Logger's. S3.S3.RequestsPerSecond
	// and Burst (--s3-requests-per-second, --s3-request-burst) pace each
	// store's requests on its own; default: no limit.
	S3 storeurl.Options
	// S3Prices are the prices the estimated bill uses (--s3-prices), in
	// cost.ParsePrices's form "put=0.005,get=0.0004,storage=0.023": dollars
	// per 1,000 requests of a kind (put, get, list, delete, head) and per
	// GB-month. Kinds not named keep S3 Standard's list price
	// (cost.S3Standard). Default "": S3 Standard.
	S3Prices string
	// CacheDir is the directory of the local cache of the checkpoint store
	// (--cache-dir), locked like DataDir. Default <DataDir>/cache for an
	// s3:// store, no cache otherwise.
	CacheDir string
	// CacheBytes bounds the cache (--cache-bytes). Default
	// DefaultCacheBytes; negative: no cache.
	CacheBytes int64

	// Retain is how many completed checkpoints each job keeps (--retain).
	// Default catalog.DefaultRetain.
	Retain int
	// GCGrace is the age an unreferenced checkpoint file must reach before
	// the orphan sweep deletes it (--gc-grace). Default
	// catalog.DefaultGCGrace.
	GCGrace time.Duration
	// SweepInterval is the period of the orphan sweep (--sweep-interval).
	// Default catalog.DefaultSweepInterval.
	SweepInterval time.Duration
	// SweepMaxListPages bounds the LIST pages one orphan sweep reads
	// (--sweep-max-list-pages; catalog.Options.SweepMaxListPages): a
	// sweep that reaches it deletes nothing and warns. Default
	// catalog.DefaultSweepMaxListPages; negative: no bound.
	SweepMaxListPages int
	// CheckpointTimeout: a checkpoint not completed this long after its
	// first snapshot is aborted as expired (--checkpoint-timeout). Default
	// daemon.DefaultCheckpointTimeout.
	CheckpointTimeout time.Duration
	// ChannelStateLinger is how long a task's upload of unaligned channel
	// state waits for the job's other tasks here to snapshot, so that one
	// object holds them all. Default daemon.DefaultChannelStateLinger.
	ChannelStateLinger time.Duration
	// PackFileBytes: a checkpoint's file-backend snapshot files up to
	// this size of all tasks of a job here go into one object per
	// checkpoint, read back with ranged reads, and changelog manifests
	// into the tasks' handles (--pack-file-bytes). Default
	// daemon.DefaultPackFileBytes (64 GiB); negative: every file is an
	// object of its own.
	PackFileBytes int64
	// ExternalDir is the directory under which externally owned instances
	// (an engine such as Flink owns their checkpoint files) write them, at
	// roots the engine names (--external-dir; daemon.Config.ExternalDir).
	// It must be reachable by the engine under the same path, and outside
	// the checkpoint store. An s3:// URL (with the checkpoint store's
	// query parameters and credentials) puts the files in that bucket and
	// prefix instead, which the engine reaches by its own S3 file system
	// under s3://bucket/prefix. Empty: the externally owned mode is
	// refused.
	ExternalDir string
	// IdleInstanceTimeout closes an instance with no batch stream for this
	// long (--idle-instance-timeout). Default
	// daemon.DefaultIdleInstanceTimeout; negative: never.
	IdleInstanceTimeout time.Duration

	// HeapSnapshotCap is the largest heap snapshot kept in memory; larger
	// ones are declined (--heap-snapshot-cap). Default
	// heap.DefaultMaxSnapshotSize.
	HeapSnapshotCap int64
	// MaxValueSize bounds each key, namespace, value, list element and map
	// user key or value (--max-value-size); at most half of
	// MaxMessageSize. Default backend.DefaultMaxValueSize.
	MaxValueSize int
	// MaxMessageSize bounds a request message (--max-message-size); below
	// 2 GiB. Default api.DefaultMaxMessageSize.
	MaxMessageSize int
	// MaxMemoryState bounds the in-memory state of one heap or file
	// instance (--max-memory-state). Default daemon.DefaultMaxMemoryState.
	MaxMemoryState int64
	// MaxInstances bounds the open instances (--max-instances). Default
	// daemon.DefaultMaxInstances.
	MaxInstances int
	// MaxStreamsPerInstance bounds one instance's batch streams
	// (--max-streams-per-instance). Default
	// daemon.DefaultMaxStreamsPerInstance.
	MaxStreamsPerInstance int
	// QueueDepth is the batches a stream buffers while one is applied
	// (--queue-depth). Default api.DefaultQueueDepth.
	QueueDepth int
	// MaxConcurrentStreams bounds the streams and calls of one client
	// connection (--max-concurrent-streams). Default
	// api.DefaultMaxConcurrentStreams.
	MaxConcurrentStreams int
	// FirstBatchTimeout ends a batch stream that has not named its
	// instance within it (--first-batch-timeout). Default
	// api.DefaultFirstBatchTimeout.
	FirstBatchTimeout time.Duration
	// ReadParallelism bounds the goroutines that read one batch's long run
	// of point reads (--read-parallelism; api.ServerOptions). 0: the
	// default, runtime.GOMAXPROCS; 1 reads on the stream's goroutine.
	ReadParallelism int
	// LSMCacheSize is the block cache every lsm instance shares
	// (--lsm-cache-size). Default openers.DefaultLSMCacheSize.
	LSMCacheSize int64
	// LSMRemote puts the SSTs of every lsm instance in the checkpoint
	// store from the start (--lsm-remote; docs/lsm-remote.md). Default
	// false.
	LSMRemote bool
	// LSMRemoteCacheBytes bounds each remote-mode lsm instance's local
	// cache of remote blocks (--lsm-cache-bytes). Default
	// openers.DefaultLSMRemoteCacheBytes.
	LSMRemoteCacheBytes int64
	// LSMMemTableBytes is the memtable size of every lsm instance
	// (--lsm-memtable-bytes). Default 0: lsm's default for the
	// instance's mode (lsm.DefaultMemTableSize, or
	// lsm.DefaultRemoteMemTableSize in remote mode).
	LSMMemTableBytes int64
	// FileCompression compresses file-backend snapshots: "" or "zstd"
	// (--file-compression). Default "".
	FileCompression string

	// ShutdownGrace is how long Shutdown lets calls in flight and then
	// in-flight snapshots take, in all, before it cancels or aborts them
	// (--shutdown-grace). Default DefaultShutdownGrace; negative: none.
	ShutdownGrace time.Duration
	// Logger receives every log line: the node's, the daemon's, the api's,
	// the catalog's, Pebble's and the AWS SDK's. Default slog.Default().
	Logger *slog.Logger
	// GRPCOptions are added to the options of every gRPC server the node
	// runs (tests add interceptors). Default none.
	GRPCOptions []grpc.ServerOption
	// WrapOpener, if set, wraps the opener of every backend kind (tests
	// wrap backends to slow or fail their snapshots). Default none.
	WrapOpener func(backend.Kind, daemon.Opener) daemon.Opener

	// Changelog puts every instance in changelog mode unless its open
	// request chooses (--changelog). Changelog mode is available to every
	// instance whatever this says. Default false.
	Changelog bool
	// ChangelogStore is the URL of a store of its own for the changelog's
	// segments, e.g. a faster bucket or a local disk (--changelog-store).
	// It must stay the same while checkpoints written with it are
	// retained. Default "": the checkpoint store.
	ChangelogStore string
	// LogStore, when set, is the changelog's store instead of the one
	// ChangelogStore names (tests); the caller owns it. Default nil.
	LogStore tiered.Store
	// MaterializeInterval is how often each instance in changelog mode
	// takes a new base (--materialize-interval). Default
	// daemon.DefaultMaterializeInterval.
	MaterializeInterval time.Duration
	// MaxMaterializeFailures: after this many failed materializations of
	// an instance in a row its checkpoints fail until one succeeds
	// (--materialize-max-failures). Default
	// daemon.DefaultMaxMaterializeFailures.
	MaxMaterializeFailures int
	// ChangelogFlushDelay is the longest a change waits before its
	// segment is cut (--changelog-flush-delay) when no checkpoint asks
	// for it sooner: segments gather the changes of every instance of the
	// daemon, so it bounds the log's requests per second. Default 0: the
	// log store's (dstl.FlushDelayFor): 10ms for a local directory, whose
	// flushes append to a pack file, 1s for S3 and other object stores,
	// where each flush is a PUT.
	ChangelogFlushDelay time.Duration
	// ChangelogFlushSize cuts a segment when the changes gathered reach it
	// (--changelog-flush-size). Default 10MiB (dstl.DefaultFlushSize).
	ChangelogFlushSize int
	// ChangelogMaxInFlight caps the changes held in memory, buffered or
	// uploading; writes slow down past it (--changelog-max-in-flight).
	// Default 100MiB (dstl.Options.MaxBytesInFlight).
	ChangelogMaxInFlight int64
}

// MaxSocketPath is the longest Unix socket path that binds: sockaddr_un's
// sun_path holds 108 bytes on Linux (104 on the BSDs and macOS), the
// terminating NUL included.
var MaxSocketPath = func() int {
	if runtime.GOOS == "linux" {
		return 107
	}
	return 103
}()

// DefaultCheckpointStore is the default of CheckpointStore for a node
// with data dir dataDir: file://<absolute dataDir>/checkpoints.
func DefaultCheckpointStore(dataDir string) string {
	dir := filepath.Join(dataDir, "checkpoints")
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	return "file://" + dir
}

// EnsureDefaults fills zero fields with their defaults. Defaults that
// depend on the store's scheme (CacheDir) are resolved by Open.
func (o *Options) EnsureDefaults() {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def64 := func(v *int64, d int64) {
		if *v == 0 {
			*v = d
		}
	}
	dur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if o.DataDir == "" {
		o.DataDir = DefaultDataDir
	}
	if o.Socket == "" {
		o.Socket = filepath.Join(o.DataDir, SocketName)
	}
	if o.BatchSocket == "" {
		if o.NoSocket || o.Listener != nil {
			o.BatchSocket = BatchSocketOff
		} else if b := strings.TrimSuffix(o.Socket, ".sock") + "-batch.sock"; len(b) <= MaxSocketPath {
			o.BatchSocket = b
		} else {
			// A socket path near the kernel's limit leaves no room: the
			// batch socket is an optimization, so the default goes without
			// it (the start's log line says "off").
			o.BatchSocket = BatchSocketOff
		}
	}
	if o.CheckpointStore == "" && o.Store == nil {
		o.CheckpointStore = DefaultCheckpointStore(o.DataDir)
	}
	def64(&o.CacheBytes, DefaultCacheBytes)
	def(&o.Retain, catalog.DefaultRetain)
	dur(&o.GCGrace, catalog.DefaultGCGrace)
	dur(&o.SweepInterval, catalog.DefaultSweepInterval)
	def(&o.SweepMaxListPages, catalog.DefaultSweepMaxListPages)
	dur(&o.CheckpointTimeout, daemon.DefaultCheckpointTimeout)
	dur(&o.ChannelStateLinger, daemon.DefaultChannelStateLinger)
	def64(&o.PackFileBytes, daemon.DefaultPackFileBytes)
	dur(&o.IdleInstanceTimeout, daemon.DefaultIdleInstanceTimeout)
	def64(&o.HeapSnapshotCap, heap.DefaultMaxSnapshotSize)
	def(&o.MaxValueSize, backend.DefaultMaxValueSize)
	def(&o.MaxMessageSize, api.DefaultMaxMessageSize)
	def64(&o.MaxMemoryState, daemon.DefaultMaxMemoryState)
	def(&o.MaxInstances, daemon.DefaultMaxInstances)
	def(&o.MaxStreamsPerInstance, daemon.DefaultMaxStreamsPerInstance)
	def(&o.QueueDepth, api.DefaultQueueDepth)
	def(&o.MaxConcurrentStreams, api.DefaultMaxConcurrentStreams)
	dur(&o.FirstBatchTimeout, api.DefaultFirstBatchTimeout)
	def64(&o.LSMCacheSize, openers.DefaultLSMCacheSize)
	def64(&o.LSMRemoteCacheBytes, openers.DefaultLSMRemoteCacheBytes)
	dur(&o.ShutdownGrace, DefaultShutdownGrace)
	dur(&o.MaterializeInterval, daemon.DefaultMaterializeInterval)
	def(&o.MaxMaterializeFailures, daemon.DefaultMaxMaterializeFailures)
	def(&o.ChangelogFlushSize, dstl.DefaultFlushSize)
	def64(&o.ChangelogMaxInFlight, dstl.DefaultMaxBytesInFlight)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Validate reports every problem of o at once, each an *OptionError
// (joined with errors.Join) that names its field. Call EnsureDefaults
// first: a zero limit is refused. "stated serve" calls it on the options
// its flags give, before any default, so that a flag set to 0 is refused
// rather than taken for the default; it names the fields by their flags
// (OptionError.Text).
func (o *Options) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) { errs = append(errs, optionError(field, format, args...)) }
	if o.DataDir == "" {
		bad("DataDir", "%s is empty", ref("DataDir"))
	}
	if e := o.ExternalDir; e != "" && strings.Contains(e, "://") {
		if err := externalStoreOverlap(e, o.CheckpointStore); err != nil {
			bad("ExternalDir", "%s %s: %v", ref("ExternalDir"), redactURL(e), err)
		}
	} else if e != "" {
		if !filepath.IsAbs(e) {
			bad("ExternalDir", "%s %q is not an absolute path (the engine reaches the files under the same path)", ref("ExternalDir"), e)
		} else if dir, ok := strings.CutPrefix(o.CheckpointStore, "file://"); ok {
			// The catalog's sweep deletes what no checkpoint of its own
			// references in its store: externally owned files there would go.
			if rel, err := filepath.Rel(filepath.Clean(dir), filepath.Clean(e)); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
				bad("ExternalDir", "%s %s is inside the checkpoint store %s, whose sweep would delete the engine's files: give a directory outside it",
					ref("ExternalDir"), e, dir)
			}
		}
	}
	if !o.NoSocket && o.Listener == nil {
		// The kernel refuses a longer path with a bare EINVAL at bind
		// time, after the data dir was created: say so here instead.
		sock := o.Socket
		if sock == "" {
			sock = filepath.Join(o.DataDir, SocketName)
		}
		if len(sock) > MaxSocketPath {
			bad("Socket", "%s %s is %d bytes, over the kernel's limit of %d bytes for a Unix socket path (sun_path, with its NUL): give a shorter %s, or a shorter %s",
				ref("Socket"), sock, len(sock), MaxSocketPath, ref("Socket"), ref("DataDir"))
		}
		if b := o.BatchSocket; b != "" && b != BatchSocketOff && len(b) > MaxSocketPath {
			bad("BatchSocket", "%s %s is %d bytes, over the kernel's limit of %d bytes for a Unix socket path (sun_path, with its NUL): give a shorter %s (or %q), or a shorter %s",
				ref("BatchSocket"), b, len(b), MaxSocketPath, ref("BatchSocket"), BatchSocketOff, ref("Socket"))
		}
		if b := o.BatchSocket; b != "" && b == sock {
			bad("BatchSocket", "%s %s is the path of %s too: give it another", ref("BatchSocket"), b, ref("Socket"))
		}
	}
	if o.Store != nil && o.CheckpointStore != "" {
		bad("Store", "both %s and %s %q are set", ref("Store"), ref("CheckpointStore"), o.CheckpointStore)
	}
	if o.Store == nil {
		if _, err := storeurl.Parse(o.CheckpointStore); err != nil {
			bad("CheckpointStore", "%s: %v", ref("CheckpointStore"), err)
		}
	}
	if o.S3.CacheDir != "" || o.S3.CacheBytes != 0 || o.S3.Uncached != nil || o.S3.Wrap != nil {
		bad("S3", "%s sets cache or wrap options: use %s and %s", ref("S3"), ref("CacheDir"), ref("CacheBytes"))
	}
	errs = append(errs, validateS3(o.S3)...)
	if _, err := cost.ParsePrices(o.S3Prices, cost.S3Standard); err != nil {
		bad("S3Prices", "%s: %v", ref("S3Prices"), strings.TrimPrefix(err.Error(), "cost: "))
	}
	if _, _, err := o.cache(); err != nil {
		errs = append(errs, err)
	}
	if o.MaxMessageSize > 1<<31-1 {
		bad("MaxMessageSize", "%s %d must be below 2GiB", ref("MaxMessageSize"), o.MaxMessageSize)
	}
	if o.MaxValueSize > o.MaxMessageSize/2 && o.MaxMessageSize > 0 {
		bad("MaxValueSize", "%s %d must be at most half of %s %d", ref("MaxValueSize"), o.MaxValueSize, ref("MaxMessageSize"), o.MaxMessageSize)
	}
	for _, l := range []struct {
		name string
		n    int64
	}{{"MaxValueSize", int64(o.MaxValueSize)}, {"MaxMessageSize", int64(o.MaxMessageSize)}, {"MaxMemoryState", o.MaxMemoryState},
		{"HeapSnapshotCap", o.HeapSnapshotCap}, {"LSMCacheSize", o.LSMCacheSize}, {"Retain", int64(o.Retain)},
		{"LSMRemoteCacheBytes", o.LSMRemoteCacheBytes},
		{"MaxInstances", int64(o.MaxInstances)}, {"MaxStreamsPerInstance", int64(o.MaxStreamsPerInstance)},
		{"QueueDepth", int64(o.QueueDepth)}, {"MaxConcurrentStreams", int64(o.MaxConcurrentStreams)},
		{"MaxMaterializeFailures", int64(o.MaxMaterializeFailures)}} {
		if l.n < 1 {
			bad(l.name, "%s %d must be at least 1", ref(l.name), l.n)
		}
	}
	if n := o.LSMMemTableBytes; n != 0 && (n < 64<<10 || n > 4<<30) {
		bad("LSMMemTableBytes", "%s %d is outside [64KiB, 4GiB] (0: the default)", ref("LSMMemTableBytes"), n)
	}
	if o.MaxConcurrentStreams > math.MaxUint32 {
		bad("MaxConcurrentStreams", "%s %d is above %d", ref("MaxConcurrentStreams"), o.MaxConcurrentStreams, uint32(math.MaxUint32))
	}
	if o.FirstBatchTimeout <= 0 {
		bad("FirstBatchTimeout", "%s must be positive", ref("FirstBatchTimeout"))
	}
	if o.ReadParallelism < 0 {
		bad("ReadParallelism", "%s %d is negative (0: one per CPU)", ref("ReadParallelism"), o.ReadParallelism)
	}
	if o.SweepInterval <= 0 {
		bad("SweepInterval", "%s %v must be positive", ref("SweepInterval"), o.SweepInterval)
	}
	for _, d := range []struct {
		name string
		d    time.Duration
	}{{"MaterializeInterval", o.MaterializeInterval}} {
		if d.d <= 0 {
			bad(d.name, "%s %v must be positive", ref(d.name), d.d)
		}
	}
	if o.ChangelogFlushDelay < 0 {
		bad("ChangelogFlushDelay", "%s %v must not be negative (0: the log store's default)", ref("ChangelogFlushDelay"), o.ChangelogFlushDelay)
	}
	if o.ChangelogFlushSize <= 0 {
		bad("ChangelogFlushSize", "%s %d must be positive", ref("ChangelogFlushSize"), o.ChangelogFlushSize)
	}
	if o.ChangelogMaxInFlight < int64(o.ChangelogFlushSize) {
		bad("ChangelogMaxInFlight", "%s %d must be at least the segment size %d (%s)", ref("ChangelogMaxInFlight"), o.ChangelogMaxInFlight, o.ChangelogFlushSize, ref("ChangelogFlushSize"))
	}
	if o.LogStore != nil && o.ChangelogStore != "" {
		bad("LogStore", "both %s and %s %q are set", ref("LogStore"), ref("ChangelogStore"), o.ChangelogStore)
	}
	if o.ChangelogStore != "" {
		if _, err := storeurl.Parse(o.ChangelogStore); err != nil {
			bad("ChangelogStore", "%s: %v", ref("ChangelogStore"), err)
		}
	}
	for _, d := range []struct {
		name string
		d    time.Duration
	}{{"GCGrace", o.GCGrace}, {"CheckpointTimeout", o.CheckpointTimeout}, {"ChannelStateLinger", o.ChannelStateLinger}} {
		if d.d < 0 {
			bad(d.name, "%s %v must not be negative", ref(d.name), d.d)
		}
	}
	if o.FileCompression != "" && o.FileCompression != "zstd" {
		bad("FileCompression", "%s %q is not \"\" or \"zstd\"", ref("FileCompression"), o.FileCompression)
	}
	validateTCP(o, bad)
	validateCluster(o, bad)
	if o.Logger == nil {
		bad("Logger", "no %s", ref("Logger"))
	}
	return errors.Join(errs...)
}

// ValidateS3 reports every problem of the S3 settings, as Validate does
// for Options.S3 (the fields are named "S3.Endpoint" and so on): for the
// commands that open a store without a node.
func ValidateS3(s storeurl.Options) error { return errors.Join(validateS3(s)...) }

func validateS3(s storeurl.Options) []error {
	var errs []error
	if e := s.Endpoint; e != "" {
		u, err := url.Parse(e)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, optionError("S3.Endpoint", "%s %q is not an http:// or https:// URL", ref("S3.Endpoint"), e))
		}
	}
	if r := s.S3.RequestsPerSecond; r < 0 || math.IsNaN(r) || math.IsInf(r, 0) {
		errs = append(errs, optionError("S3.S3.RequestsPerSecond", "%s %v: give 0 (no limit) or a rate above 0", ref("S3.S3.RequestsPerSecond"), r))
	}
	if b := s.S3.Burst; b < 0 || (b > 0 && s.S3.RequestsPerSecond == 0) {
		errs = append(errs, optionError("S3.S3.Burst", "%s %d: give it with %s, 1 or more (0: the rate rounded up)", ref("S3.S3.Burst"), b, ref("S3.S3.RequestsPerSecond")))
	}
	if (s.AccessKeyID == "") != (s.SecretAccessKey == "") {
		errs = append(errs, optionError("S3.AccessKeyID", "%s and %s go together (or leave both to AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)",
			ref("S3.AccessKeyID"), ref("S3.SecretAccessKey")))
	}
	return errs
}

// cache resolves the cache's directory and bound: the defaults of
// CacheDir and CacheBytes for the store's scheme, and the directories the
// cache must not share. dir "" means no cache.
func (o *Options) cache() (dir string, bytes int64, err error) {
	if o.CacheBytes < 0 {
		if o.CacheDir != "" {
			return "", 0, optionError("CacheDir", "%s %s is set, but %s turns the cache off", ref("CacheDir"), o.CacheDir, ref("CacheBytes"))
		}
		return "", 0, nil
	}
	var loc storeurl.Location
	if o.Store == nil {
		if loc, err = storeurl.Parse(o.CheckpointStore); err != nil {
			return "", 0, nil // reported by Validate
		}
	}
	dir = o.CacheDir
	if dir == "" {
		if loc.Scheme != "s3" {
			return "", 0, nil // a local (or injected) store needs no local cache
		}
		dir = filepath.Join(o.DataDir, "cache")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", 0, optionError("CacheDir", "%s: %v", ref("CacheDir"), err)
	}
	data, err := filepath.Abs(o.DataDir)
	if err != nil {
		return "", 0, optionError("DataDir", "%s: %v", ref("DataDir"), err)
	}
	var errs []error
	if within(data, abs) || within(abs, filepath.Join(data, daemon.InstancesDir)) {
		errs = append(errs, optionError("CacheDir", "%s %s must not be %s %s, a parent of it or inside its instances directory",
			ref("CacheDir"), dir, ref("DataDir"), o.DataDir))
	}
	if loc.Scheme == "file" {
		if root, err := filepath.Abs(loc.Path); err == nil && (within(abs, root) || within(root, abs)) {
			errs = append(errs, optionError("CacheDir", "%s %s overlaps the checkpoint store %s (its files would look like orphans there)",
				ref("CacheDir"), dir, loc.Path))
		}
	}
	return abs, o.CacheBytes, errors.Join(errs...)
}

// OptionError is one problem of Options. Field is the field at fault
// ("MaxValueSize", "S3.Endpoint"); the message may name other fields too.
// Error names them as Options does; Text lets a caller name them its own
// way, as "stated serve" names them by their flags.
type OptionError struct {
	Field  string
	format string
	args   []any // a ref among them is a field's name
}

// ref marks an argument of an OptionError's format that is a field's name.
type ref string

func optionError(field, format string, args ...any) *OptionError {
	return &OptionError{Field: field, format: format, args: args}
}

// Error implements error, with the fields' own names.
func (e *OptionError) Error() string {
	return "node: " + e.Text(func(field string) string { return field })
}

// Text is the problem with every field it names written as name(field).
func (e *OptionError) Text(name func(field string) string) string {
	args := make([]any, len(e.args))
	for i, a := range e.args {
		if f, ok := a.(ref); ok {
			a = name(string(f))
		}
		args[i] = a
	}
	return fmt.Sprintf(e.format, args...)
}

// within reports whether path is dir or inside it (both absolute, clean).
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// externalStoreOverlap checks an external store's URL: an S3 prefix that
// neither holds the checkpoint store nor lies inside it, whose catalog
// sweeps delete what no checkpoint of its own references.
func externalStoreOverlap(external, checkpointStore string) error {
	loc, err := storeurl.Parse(external)
	if err != nil {
		return err
	}
	if loc.Scheme != "s3" {
		return fmt.Errorf("is a %s URL: give a local directory as an absolute path, or an s3:// URL", loc.Scheme)
	}
	if checkpointStore == "" {
		return nil
	}
	cs, err := storeurl.Parse(checkpointStore)
	if err != nil || cs.Scheme != "s3" || cs.Bucket != loc.Bucket {
		return nil // the checkpoint store's own errors are reported for it
	}
	inside := func(a, b string) bool { return b == "" || a == b || strings.HasPrefix(a, b+"/") }
	if inside(loc.Prefix, cs.Prefix) || inside(cs.Prefix, loc.Prefix) {
		return fmt.Errorf("overlaps the checkpoint store s3://%s/%s, whose sweep would delete the engine's files: give a prefix outside it", cs.Bucket, cs.Prefix)
	}
	return nil
}

// externalBase is the URL under which an engine reaches the objects of
// the external store at rawURL: s3://bucket/prefix, without the query.
func externalBase(rawURL string) (string, error) {
	loc, err := storeurl.Parse(rawURL)
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix("s3://"+loc.Bucket+"/"+loc.Prefix, "/"), nil
}
