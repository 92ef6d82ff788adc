package host

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/statedhq/stated/api"
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/cluster"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/daemon/openers"
	"github.com/statedhq/stated/dstl"
	"github.com/statedhq/stated/dstl/changelog"
	"github.com/statedhq/stated/host/webui"
	"github.com/statedhq/stated/internal/buildinfo"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/cost"
	"github.com/statedhq/stated/tiered/memstore"
	"github.com/statedhq/stated/tiered/metered"
	"github.com/statedhq/stated/tiered/storeurl"
)

// Host is one running stated: its checkpoint store, catalog, daemon, API
// servers and metrics. Open builds it; Shutdown (or Close) stops it.
type Host struct {
	opts Options
	log  *slog.Logger

	store tiered.Store
	meter *metered.Store // nil with an injected Store
	// logStore is where the changelog's segments go: store, or the store
	// of Options.ChangelogStore (or LogStore) behind logMeter.
	logStore tiered.Store
	logMeter *metered.Store // nil when logStore is store
	// extStore is the external store of an s3:// Options.ExternalDir, and
	// extBase the URL the engine reaches it by (nil, "" for a directory).
	extStore tiered.Store
	extBase  string
	// clog is the changelog's part in cluster mode (nil: alone).
	clog   *cluster.ChangelogRuns
	writer *dstl.Writer
	cache  cacheStats // nil: no cache
	// costs prices the stores' requests (metrics, web page).
	costs *costs
	set   *openers.Set
	cat   *catalog.Catalog // nil in cluster mode: see host
	// host and catClient: the cluster's one catalog, hosted by the leader
	// and reached through catClient (cluster mode only).
	host      *cluster.CatalogHost
	catClient *cluster.CatalogClient
	// replica is this node's copy of the cluster's catalog, kept by the
	// raft log (cluster mode only).
	replica *catalog.Replica
	hostRef atomic.Pointer[cluster.CatalogHost] // host, for raft's callback
	d       *daemon.Daemon
	srv     *api.Server
	reg     *prometheus.Registry
	mux     *http.ServeMux

	servers   []*grpc.Server
	local     *grpc.Server // of the local API; nil with NoSocket
	hs        *http.Server
	tcpAddr   net.Addr
	tcpLn     net.Listener    // of Options.Listen, bound first thing in Open
	metLn     net.Listener    // of Options.MetricsAddr, likewise
	tls       *tls.Config     // of the TCP API; nil: plaintext
	cluster   *cluster.Member // nil: alone
	metAddr   net.Addr
	healthy   atomic.Bool
	wg        sync.WaitGroup // every goroutine the node starts
	serveErr  chan error
	closers   []func() // what Open built, released in reverse order
	closeOnce sync.Once
	closeErr  error
}

// Open assembles and starts a node; see docs/host.md for the order. On
// error everything built so far is released. ctx bounds Open itself (the
// store's first requests, the catalog's load); the node's goroutines live
// until Shutdown.
func Open(ctx context.Context, opts Options) (_ *Host, err error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	n := &Host{opts: opts, log: opts.Logger, serveErr: make(chan error, 3)}
	// The certificate files are read before anything is created: a wrong
	// path fails here, not after the data dir exists.
	if n.tls, err = tcpTLS(opts); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			n.stopServing()
			n.release()
			if opts.Listener != nil && n.local == nil {
				_ = opts.Listener.Close() // the node owns it, and never served it
			}
		}
	}()
	// The TCP addresses are bound before anything is created, so that a
	// port in use fails here, not after the data dir exists.
	if err := n.listenTCP(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	unlock, err := lockDir(opts.DataDir)
	if err != nil {
		return nil, err
	}
	n.closers = append(n.closers, unlock)
	if err := recordStore(opts); err != nil {
		return nil, err
	}
	if err := n.openCluster(); err != nil {
		return nil, err
	}
	if err := n.openStore(ctx); err != nil {
		return nil, err
	}
	if err := n.openLog(ctx); err != nil {
		return nil, err
	}
	if err := n.openExternal(ctx); err != nil {
		return nil, err
	}
	if n.cluster != nil {
		n.clog = cluster.NewChangelogRuns(n.cluster, n.writer, n.log)
	}
	n.set, err = openers.New(openers.Config{HeapSnapshotCap: opts.HeapSnapshotCap, LSMCacheSize: opts.LSMCacheSize,
		LSMRemote: opts.LSMRemote, LSMRemoteCacheBytes: opts.LSMRemoteCacheBytes, LSMMemTableBytes: opts.LSMMemTableBytes,
		// At least four refreshes per grace period and per five minutes
		// (the sweep's least lease window, even for a "stated gc" with a
		// shorter grace): a live instance's lease is never stale to it.
		LSMLeaseInterval: min(max(opts.GCGrace/4, time.Second), time.Minute),
		FileCompression:  opts.FileCompression, Logger: n.log})
	if err != nil {
		return nil, err
	}
	n.closers = append(n.closers, func() { _ = n.set.Close() })
	ops := n.set.Openers
	if opts.WrapOpener != nil {
		ops = make(map[backend.Kind]daemon.Opener, len(n.set.Openers))
		for k, op := range n.set.Openers {
			ops[k] = opts.WrapOpener(k, op)
		}
	}
	co := catalog.Options{
		Store: n.store, Retain: opts.Retain, GCGrace: opts.GCGrace, SweepInterval: opts.SweepInterval, SweepMaxListPages: opts.SweepMaxListPages,
		// The catalog deletes heap snapshots of checkpoints it no longer
		// retains from the daemon's memory.
		HeapStore: n.set.HeapSnapshots,
		Logger:    n.log,
		// The changelog's segments: counted with the shared files, kept
		// while the live log holds them.
		LogStore: n.logStore, LogHeld: n.writer.Holds,
		// A savepoint copied from checkpoints copies their log windows
		// out of the shared segments.
		SelfContain: changelog.SelfContained,
	}
	dc := daemon.Config{
		DataDir: opts.DataDir, Store: n.store, Openers: ops, HeapSnapshots: n.set.HeapSnapshots,
		MaxValueSize: opts.MaxValueSize, MaxMemoryState: opts.MaxMemoryState, MaxInstances: opts.MaxInstances,
		MaxStreamsPerInstance: opts.MaxStreamsPerInstance, CheckpointTimeout: opts.CheckpointTimeout,
		IdleInstanceTimeout: opts.IdleInstanceTimeout, Logger: n.log, Fence: n.fencer(), ChannelStateLinger: opts.ChannelStateLinger,
		PackFileBytes: opts.PackFileBytes, ExternalDir: cmp.Or(n.extBase, opts.ExternalDir), ExternalStore: n.extStore,
		Changelog: &daemon.ChangelogConfig{Writer: n.writer, Log: dstl.TieredLogStore{Store: n.logStore}, Default: opts.Changelog,
			MaterializeInterval: opts.MaterializeInterval, MaxMaterializeFailures: opts.MaxMaterializeFailures},
	}
	if n.cluster != nil {
		if err := n.openClusterCatalog(co, &dc); err != nil {
			return nil, err
		}
	} else {
		if n.cat, err = catalog.Open(ctx, co); err != nil {
			return nil, err
		}
		n.closers = append(n.closers, func() { _ = n.cat.Close() })
		dc.Catalog = n.cat
	}
	if n.d, err = daemon.New(dc); err != nil {
		return nil, err
	}
	// What the catalog found damaged as it opened: each logged, and
	// corrupt data also counted and reported as corruption. (A cluster's
	// catalog logs its own on the node that hosts it.)
	if n.cat != nil {
		for _, p := range n.cat.Problems() {
			n.log.Warn("catalog problem", "problem", p.String())
			n.d.ReportCorruption(daemon.CorruptionEvent{Site: daemon.CorruptionCatalog, Job: p.Job, Source: p.What + " " + p.Object, Err: p.Err})
		}
	}
	// Until Shutdown has run, a failed Open must still stop the daemon's
	// reaper and instances.
	n.closers = append(n.closers, func() { _ = n.d.Shutdown(context.Background()) })
	// The sweep lives until Close, not until ctx ends.
	if n.cat != nil {
		if err := n.cat.Start(context.WithoutCancel(ctx)); err != nil {
			return nil, err
		}
	}
	n.srv = api.NewServer(n.d, api.ServerOptions{MaxMessageSize: opts.MaxMessageSize, QueueDepth: opts.QueueDepth,
		MaxConcurrentStreams: opts.MaxConcurrentStreams, FirstBatchTimeout: opts.FirstBatchTimeout,
		ReadParallelism: opts.ReadParallelism, BatchSocket: n.batchSocket(), Logger: n.log})
	prices, _ := cost.ParsePrices(opts.S3Prices, cost.S3Standard) // checked by Validate
	n.costs = newCosts(prices, n.d.Metrics().CheckpointsCompleted.Load, n.stateBytes)
	n.costs.add(storeCheckpoint, n.meter)
	n.costs.add(storeChangelog, n.logMeter)
	n.costs.start()
	n.closers = append(n.closers, n.costs.close)
	n.reg = prometheus.NewRegistry()
	n.reg.MustRegister(newCostCollector(n.costs))
	n.reg.MustRegister(newCollector(n.d.Metrics(), n.Catalog, n.cache, n.meter), newChangelogCollector(n.writer, n.d.Metrics(), n.logMeter),
		newLSMCacheCollector(n.set.LSMBlockCache),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if n.cluster != nil {
		n.reg.MustRegister(newClusterCollector(n.cluster))
	}
	build := buildinfo.Read()
	n.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "stated_build_info", Help: "Always 1; its labels say which build of stated runs.",
		ConstLabels: prometheus.Labels{"version": build.Version, "revision": build.ShortRevision(), "go_version": build.GoVersion},
	}, func() float64 { return 1 }))
	n.healthy.Store(true)
	n.mux = http.NewServeMux()
	n.mux.Handle("/metrics", promhttp.HandlerFor(n.reg, promhttp.HandlerOpts{}))
	n.mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !n.healthy.Load() {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	// The read-only checkpoint history page, next to /metrics.
	var page webui.Catalog = n.cat
	if n.catClient != nil {
		page = n.catClient
	}
	// The checkpoint page reads a retained checkpoint's state from the
	// store (inspect), one read at a time; close stops a read under way
	// before the store closes.
	sr, err := newStateReader(page, n.store, n.logStore, n.set.HeapSnapshots, opts.DataDir)
	if err != nil {
		return nil, err
	}
	n.closers = append(n.closers, sr.close)
	src := webui.Source{Catalog: page, Daemon: n.d, Gatherer: n.reg, Token: opts.Token, States: sr, Costs: n.costs.table}
	if n.cluster != nil {
		src.Cluster = n.clusterPanel
	}
	n.mux.Handle("/ui/", webui.Handler(src))
	n.mux.Handle("GET /{$}", http.RedirectHandler("/ui/", http.StatusFound))
	if err := n.serve(); err != nil {
		return nil, err
	}
	n.log.Info("stated serving", "version", build.Version, "revision", build.ShortRevision(), "socket", n.Socket(), "batchSocket", n.opts.BatchSocket, "dataDir", opts.DataDir, "checkpointStore", redactURL(opts.CheckpointStore), "pid", os.Getpid())
	return n, nil
}

// openStore opens the checkpoint store: the URL's (or the injected one)
// behind the meter, which counts the calls that reach the store itself
// (what a provider bills and throttles), behind the cache when one is
// configured. The catalog's metadata bypasses the cache
// (catalog.IsMetadata). The cache directory is locked like the data
// directory, so that two nodes never share one.
func (n *Host) openStore(ctx context.Context) error {
	o := n.opts
	dir, bytes, err := o.cache()
	if err != nil {
		return err
	}
	so := n.s3Options()
	so.Wrap = func(s tiered.Store) tiered.Store {
		n.meter = metered.New(s)
		return n.meter
	}
	if dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("cache dir: %w", err)
		}
		unlock, err := lockDir(dir)
		if err != nil {
			return fmt.Errorf("cache dir: %w", err)
		}
		n.closers = append(n.closers, unlock)
		so.CacheDir, so.CacheBytes, so.Uncached = dir, bytes, catalog.IsMetadata
	}
	var s tiered.Store
	if o.Store != nil {
		// The caller keeps the store: the tier's Close must not close it.
		s, err = storeurl.Tier(so.Wrap(keepOpen{o.Store}), so)
	} else {
		s, err = storeurl.Open(ctx, o.CheckpointStore, so)
	}
	if err != nil {
		return err
	}
	n.store = s
	n.closers = append(n.closers, func() { _ = s.Close() })
	if c, ok := s.(cacheStats); ok {
		n.cache = c
		st := c.Stats()
		n.log.Info("checkpoint cache", "dir", dir, "maxBytes", bytes, "cachedBytes", st.Bytes, "files", st.Entries)
	}
	return nil
}

// s3Options are Options.S3 with the SDK's retries logged to the host's
// logger unless the caller set a logger of its own.
func (n *Host) s3Options() storeurl.Options {
	so := n.opts.S3
	if so.S3.Logger == nil {
		so.S3.Logger, so.S3.LogMode = SDKLogger(n.log), aws.LogRetries
	}
	return so
}

// openExternal opens the external store when Options.ExternalDir is an
// s3:// URL (a local directory the daemon opens itself): no cache, as an
// engine reads and deletes its files behind the daemon's back.
func (n *Host) openExternal(ctx context.Context) error {
	o := n.opts
	if !strings.Contains(o.ExternalDir, "://") {
		return nil
	}
	so := n.s3Options()
	so.CacheDir = ""
	s, err := storeurl.Open(ctx, o.ExternalDir, so)
	if err != nil {
		return fmt.Errorf("external store: %w", err)
	}
	n.closers = append(n.closers, func() { _ = s.Close() })
	base, err := externalBase(o.ExternalDir)
	if err != nil {
		return fmt.Errorf("external store: %w", err)
	}
	n.extStore, n.extBase = s, base
	return nil
}

// openLog opens the changelog's store (the checkpoint store unless
// Options.ChangelogStore or LogStore names another, which gets a meter of
// its own and no cache: segments are written once and read only on
// restore) and the daemon's one log Writer.
func (n *Host) openLog(ctx context.Context) error {
	o := n.opts
	n.logStore = n.store
	var ls tiered.Store
	switch {
	case o.LogStore != nil:
		ls = keepOpen{o.LogStore}
	case o.ChangelogStore != "":
		so := n.s3Options()
		s, err := storeurl.Open(ctx, o.ChangelogStore, so)
		if err != nil {
			return fmt.Errorf("changelog store: %w", err)
		}
		n.closers = append(n.closers, func() { _ = s.Close() })
		ls = s
	}
	if ls != nil {
		n.logMeter = metered.New(ls)
		n.logStore = n.logMeter
	}
	logs := dstl.TieredLogStore{Store: n.logStore}
	delay := o.ChangelogFlushDelay
	if delay == 0 {
		delay = dstl.FlushDelayFor(logs)
	}
	w, err := dstl.NewWriter(logs, dstl.Options{FlushDelay: delay, FlushSize: o.ChangelogFlushSize, MaxBytesInFlight: o.ChangelogMaxInFlight})
	if err != nil {
		return fmt.Errorf("changelog: %w", err)
	}
	n.writer = w
	n.closers = append(n.closers, func() { _ = w.Close() })
	return nil
}

// stateBytes is what the catalog references in the checkpoint store (0
// when this node holds no catalog).
func (n *Host) stateBytes() int64 {
	if c := n.Catalog(); c != nil {
		return c.Stats().Referenced.Bytes
	}
	return 0
}

// keepOpen is an injected store whose Close is the caller's.
type keepOpen struct{ tiered.Store }

func (keepOpen) Close() error { return nil }

// Unwrap lets tiered.AsAppender see whether the injected store appends
// (a local directory's pack files, and the flush delay that suits it).
func (k keepOpen) Unwrap() tiered.Store { return k.Store }

// serve starts the gRPC servers and the metrics server, one goroutine
// each.
func (n *Host) serve() error {
	o := n.opts
	if !o.NoSocket {
		ln := o.Listener
		if ln == nil {
			var err error
			if ln, err = listenUnix(o.Socket); err != nil {
				return err
			}
			n.closers = append(n.closers, func() { _ = os.Remove(o.Socket) })
		}
		n.local = n.srv.GRPCServer("", o.GRPCOptions...)
		n.start(n.local, ln, "unix")
	}
	if b := n.batchSocket(); b != "" {
		ln, err := listenUnix(b)
		if err != nil {
			return fmt.Errorf("batch %w (--batch-socket %s: %q turns it off)", err, b, BatchSocketOff)
		}
		n.closers = append(n.closers, func() { _ = os.Remove(b) })
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			if err := n.srv.ServeBatchSocket(ln); err != nil && !errors.Is(err, api.ErrBatchSocketsStopped) {
				n.serveErr <- fmt.Errorf("batch socket: %w", err)
			}
		}()
	}
	if tl := n.tcpLn; tl != nil {
		n.tcpAddr = tl.Addr()
		gopts := o.GRPCOptions
		if n.tls != nil {
			gopts = append(append([]grpc.ServerOption{}, gopts...), grpc.Creds(credentials.NewTLS(n.tls)))
		}
		n.start(n.srv.GRPCServer(o.Token, gopts...), tl, "tcp")
		n.log.Info("serving TCP", "addr", tl.Addr().String(), "tls", n.tls != nil, "client_certificates", o.TLSClientCA != "")
	}
	if ml := n.metLn; ml != nil {
		n.metAddr = ml.Addr()
		n.hs = &http.Server{Handler: n.mux, ReadHeaderTimeout: 5 * time.Second}
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			if err := n.hs.Serve(ml); err != nil && !errors.Is(err, http.ErrServerClosed) {
				n.serveErr <- fmt.Errorf("metrics: %w", err)
			}
		}()
		n.log.Info("serving metrics", "addr", ml.Addr().String())
	}
	return nil
}

// listenTCP binds the TCP API's and the metrics' addresses; serve uses
// the listeners, and release closes them if Open fails first.
func (n *Host) listenTCP() error {
	bind := func(addr, flag string) (net.Listener, error) {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			if errors.Is(err, syscall.EADDRINUSE) {
				return nil, fmt.Errorf("%s %s: the address is in use (another stated, or another program?): pick a free port, or \"\" to turn it off: %w", flag, addr, err)
			}
			return nil, fmt.Errorf("%s %s: %w", flag, addr, err)
		}
		n.closers = append(n.closers, func() { _ = ln.Close() })
		return ln, nil
	}
	var err error
	if n.opts.Listen != "" {
		if n.tcpLn, err = bind(n.opts.Listen, "--listen"); err != nil {
			return err
		}
	}
	if n.opts.MetricsAddr != "" {
		if n.metLn, err = bind(n.opts.MetricsAddr, "--metrics-addr"); err != nil {
			return err
		}
	}
	return nil
}

func (n *Host) start(g *grpc.Server, ln net.Listener, what string) {
	n.servers = append(n.servers, g)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		if err := g.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			n.serveErr <- fmt.Errorf("%s server: %w", what, err)
		}
	}()
}

// Err receives the error of a server that stopped on its own (its
// listener failed); the node keeps running until Shutdown.
func (n *Host) Err() <-chan error { return n.serveErr }

// Shutdown stops the node: /healthz turns unhealthy; the servers stop
// accepting; unary calls in flight (a Snapshot waiting for its upload, a
// CompleteCheckpoint) finish, then the in-flight snapshots, within
// Options.ShutdownGrace in all (and before ctx ends); batch streams end
// once no call is left; what is still running at the end of the grace is
// cancelled or aborted. Then every backend (Pebble included) is closed,
// the metrics server stops, and the catalog, the openers' shared
// resources, the store and the locks are released, in reverse order of
// Open. It returns once every goroutine of the node has ended. Later calls
// return the first one's result.
func (n *Host) Shutdown(ctx context.Context) error {
	n.closeOnce.Do(func() { n.closeErr = n.shutdown(ctx) })
	return n.closeErr
}

// Close is Shutdown with no deadline but Options.ShutdownGrace.
func (n *Host) Close() error { return n.Shutdown(context.Background()) }

func (n *Host) shutdown(ctx context.Context) error {
	n.healthy.Store(false)
	grace := max(n.opts.ShutdownGrace, 0)
	graceCtx, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	var errs []error
	// Drain returns once no handler runs, so the daemon's Shutdown never
	// runs under a call.
	if err := n.srv.Drain(graceCtx, n.servers...); err != nil {
		n.log.Warn("calls still running at the end of --shutdown-grace were cancelled", "err", err)
		errs = append(errs, err)
	}
	// In-flight snapshots finish within what is left of the grace, or are
	// aborted; then every backend is closed.
	if err := n.d.Shutdown(graceCtx); err != nil {
		n.log.Warn("shutdown", "err", err)
		errs = append(errs, err)
	}
	n.stopServing()
	n.release()
	n.log.Info("stopped")
	return errors.Join(errs...)
}

// stopServing stops the servers (at once: Shutdown drained them first)
// and waits for their goroutines.
func (n *Host) stopServing() {
	for _, g := range n.servers {
		g.Stop()
	}
	if n.srv != nil {
		n.srv.StopBatchSockets()
	}
	if n.hs != nil {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = n.hs.Shutdown(sctx)
		cancel()
	}
	n.wg.Wait()
}

// release runs the closers in reverse order of Open.
func (n *Host) release() {
	for i := len(n.closers) - 1; i >= 0; i-- {
		n.closers[i]()
	}
	n.closers = nil
}

// Daemon returns the node's daemon.
func (n *Host) Daemon() *daemon.Daemon { return n.d }

// Catalog returns the node's catalog.
//
// In cluster mode it is the catalog this node hosts as the leader (nil
// on the other nodes, and while it opens).
func (n *Host) Catalog() *catalog.Catalog {
	if n.host != nil {
		return n.host.Current()
	}
	return n.cat
}

// Server returns the node's API server.
func (n *Host) Server() *api.Server { return n.srv }

// LocalServer returns the gRPC server of the local API (nil with
// NoSocket): tests drain or stop it on their own (api.Server.Drain) to
// check what a shutdown does to calls; Shutdown stops it again, harmlessly.
func (n *Host) LocalServer() *grpc.Server { return n.local }

// Store returns the checkpoint store as the daemon sees it (behind the
// cache and the meter).
func (n *Host) Store() tiered.Store { return n.store }

// HeapSnapshots returns the daemon's in-memory store of heap snapshots.
func (n *Host) HeapSnapshots() *memstore.Store { return n.set.HeapSnapshots }

// Registry returns the Prometheus registry /metrics serves.
func (n *Host) Registry() *prometheus.Registry { return n.reg }

// Handler serves /metrics, /healthz and the web page (/ui/), as on
// Options.MetricsAddr.
func (n *Host) Handler() http.Handler { return n.mux }

// Socket returns the path of the Unix socket ("" with Listener or
// NoSocket).
func (n *Host) Socket() string {
	if n.opts.NoSocket || n.opts.Listener != nil {
		return ""
	}
	return n.opts.Socket
}

// batchSocket returns the path of the batch socket ("": none).
func (n *Host) batchSocket() string {
	if n.opts.NoSocket || n.opts.BatchSocket == BatchSocketOff {
		return ""
	}
	return n.opts.BatchSocket
}

// TCPAddr returns the address the TCP server listens on (nil: none).
func (n *Host) TCPAddr() net.Addr { return n.tcpAddr }

// MetricsAddr returns the address of /metrics (nil: none).
func (n *Host) MetricsAddr() net.Addr { return n.metAddr }

// Options returns the node's options with defaults applied.
func (n *Host) Options() Options { return n.opts }

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

// lockDir takes an exclusive lock on <dir>/LOCK so that two nodes never
// share working state (or a cache).
func lockDir(dir string) (func(), error) {
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

// ChangelogWriter returns the node's one changelog writer.
func (n *Host) ChangelogWriter() *dstl.Writer { return n.writer }
