// A Member: its raft instance, transport and service, opened and closed.

package cluster

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	pb "github.com/statedhq/stated/cluster/clusterpb"
	"github.com/statedhq/stated/cluster/raftlog"
	"github.com/statedhq/stated/internal/latency"
	"github.com/statedhq/stated/internal/tlsconf"
)

// ErrFenced is wrapped by the error of an operation whose fencing token is
// no longer the newest of its task: another holder took the task since.
var ErrFenced = errors.New("cluster: fenced")

// ErrNoLeader is wrapped when no leader could be reached before the
// deadline (no quorum, or an election that does not end).
var ErrNoLeader = errors.New("cluster: no leader")

// errNotReady: this node leads but hosts no service yet (SetHandler).
var errNotReady = ErrServiceNotReady

// ErrServiceNotReady is what a service (SetHandler) wraps when it cannot
// answer a call now but the next leader, or this node a moment later,
// can: Call then retries the call as it retries through leader changes.
var ErrServiceNotReady = errors.New("cluster: the leader's service is not ready yet")

// Member is one member of a stated cluster: its raft instance, the
// replicated state machine, and the node-to-node service. Its methods are
// safe for concurrent use; any member accepts every call and forwards to
// the leader what the leader must decide.
type Member struct {
	opts      Options
	log       *slog.Logger
	raft      *raft.Raft
	fsm       *fsm
	mux       *mux
	trans     *raft.NetworkTransport
	logs      *raftlog.Store // raft's log and stable store
	grpc      *grpc.Server
	advertise string
	clientTLS *tls.Config

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn // by raft address, to forward and probe

	obsCh   chan raft.Observation
	obs     *raft.Observer
	wg      sync.WaitGroup
	stop    chan struct{}
	closeMu sync.Once

	handler atomic.Pointer[Handler]
	// readTerm is the term whose barrier readLocal waited for.
	readTerm atomic.Uint64

	// lease: VerifyLeader's last confirmation, good until leaseUntil in
	// term leaseTerm (Options.LeaderLease).
	leaseMu    sync.Mutex
	leaseTerm  uint64
	leaseUntil time.Time

	leaderChanges atomic.Uint64
	forwarded     atomic.Uint64
	forwardErrors atomic.Uint64
	refused       atomic.Uint64
	commit        *latency.Histogram
	// ready is Ready's memory (ready.go).
	ready readiness
}

// Open starts a node: it opens its raft log in Dir, listens on Addr,
// bootstraps a new cluster of Peers when Dir holds no raft state, and
// joins the elections. It does not wait for a leader.
func Open(opts Options) (_ *Member, err error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	n := &Member{opts: opts, log: opts.Logger.With("component", "cluster"), fsm: newFSM(opts.Service),
		conns: map[string]*grpc.ClientConn{}, stop: make(chan struct{}), commit: latency.New(1e-4, 2, 18)}
	var serverTLS *tls.Config
	if opts.ServerTLS.set() {
		if serverTLS, err = tlsconf.ServerConfig(tlsconf.Server{CertFile: opts.ServerTLS.CertFile, KeyFile: opts.ServerTLS.KeyFile,
			ClientCAFile: opts.ServerTLS.CAFile}); err != nil {
			return nil, fmt.Errorf("cluster: node-to-node TLS: %w", err)
		}
		if n.clientTLS, err = tlsconf.ClientConfig(tlsconf.Client{CAFile: opts.ClientTLS.CAFile, CertFile: opts.ClientTLS.CertFile,
			KeyFile: opts.ClientTLS.KeyFile}); err != nil {
			return nil, fmt.Errorf("cluster: node-to-node TLS: %w", err)
		}
	}
	if err := os.MkdirAll(filepath.Join(opts.Dir, "snapshots"), 0o700); err != nil {
		return nil, fmt.Errorf("cluster: raft dir: %w", err)
	}
	ln := opts.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", opts.Addr); err != nil {
			return nil, fmt.Errorf("cluster: --raft-addr: %w", err)
		}
	}
	var closers []func()
	defer func() {
		if err != nil {
			for i := len(closers) - 1; i >= 0; i-- {
				closers[i]()
			}
		}
	}()
	closers = append(closers, func() { _ = ln.Close() })
	n.advertise = opts.Advertise
	if n.advertise == "" {
		n.advertise = ln.Addr().String()
		if host, _, _ := net.SplitHostPort(n.advertise); net.ParseIP(host) != nil && net.ParseIP(host).IsUnspecified() {
			return nil, fmt.Errorf("cluster: raft address %s listens on every interface: set the address other nodes reach this one at (--raft-advertise)", n.advertise)
		}
	}
	advAddr, err := net.ResolveTCPAddr("tcp", n.advertise)
	if err != nil {
		return nil, fmt.Errorf("cluster: advertised address %q: %w", n.advertise, err)
	}
	n.mux = newMux(ln, serverTLS, n.clientTLS, opts.Token, opts.Dial, func() { n.refused.Add(1) })
	closers = append(closers, n.mux.close)
	n.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  &raftLayer{chanListener: n.mux.raft, m: n.mux, advertise: advAddr},
		MaxPool: 3, Timeout: 10 * time.Second, Logger: newRaftLogger(n.log, "raft-net"),
	})
	closers = append(closers, func() { _ = n.trans.Close() })
	snaps, err := raft.NewFileSnapshotStoreWithLogger(filepath.Join(opts.Dir, "snapshots"), opts.SnapshotsRetained, newRaftLogger(n.log, "raft-snapshots"))
	if err != nil {
		return nil, fmt.Errorf("cluster: raft snapshots in %s: %w", opts.Dir, err)
	}
	var snapIndex uint64
	if list, err := snaps.List(); err != nil {
		return nil, fmt.Errorf("cluster: raft snapshots in %s: %w", opts.Dir, err)
	} else if len(list) > 0 {
		snapIndex = list[0].Index // newest first
	}
	if n.logs, err = openLogStore(opts.Dir, snapIndex, opts.ID, n.log); err != nil {
		return nil, err
	}
	closers = append(closers, func() { _ = n.logs.Close() })
	conf := raft.DefaultConfig()
	conf.LocalID = raft.ServerID(opts.ID)
	conf.HeartbeatTimeout, conf.ElectionTimeout = opts.HeartbeatTimeout, opts.ElectionTimeout
	conf.LeaderLeaseTimeout, conf.CommitTimeout = opts.LeaderLeaseTimeout, opts.CommitTimeout
	conf.SnapshotThreshold, conf.TrailingLogs = opts.SnapshotThreshold, opts.TrailingLogs
	conf.Logger = newRaftLogger(n.log, "raft")
	if err := raft.ValidateConfig(conf); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	has, err := raft.HasExistingState(n.logs, n.logs, snaps)
	if err != nil {
		return nil, fmt.Errorf("cluster: raft state in %s: %w", opts.Dir, err)
	}
	if !has && len(opts.Peers) > 0 {
		var cfg raft.Configuration
		for _, p := range opts.Peers {
			addr := p.Addr
			if p.ID == opts.ID {
				addr = n.advertise
			}
			cfg.Servers = append(cfg.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(addr)})
		}
		if err := raft.BootstrapCluster(conf, n.logs, n.logs, snaps, n.trans, cfg); err != nil {
			return nil, fmt.Errorf("cluster: bootstrap: %w", err)
		}
		n.log.Info("bootstrapped a new cluster", "members", len(cfg.Servers))
	}
	if n.raft, err = raft.NewRaft(conf, n.fsm, n.logs, n.logs, snaps, n.trans); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	closers = append(closers, func() { _ = n.raft.Shutdown().Error() })
	n.obsCh = make(chan raft.Observation, 16)
	n.obs = raft.NewObserver(n.obsCh, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	n.raft.RegisterObserver(n.obs)
	n.wg.Add(1)
	go n.observe()
	// The nodes' clients ping a connection whose calls wait (rpcKeepalive):
	// the server must accept pings that often.
	n.grpc = grpc.NewServer(grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: rpcKeepalive.Time / 2, PermitWithoutStream: true}))
	pb.RegisterClusterServer(n.grpc, &service{n: n})
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		_ = n.grpc.Serve(n.mux.rpc)
	}()
	n.log.Info("raft started", "id", opts.ID, "addr", n.advertise, "existing_state", has, "tls", serverTLS != nil)
	return n, nil
}

// observe counts leader changes and logs them.
func (n *Member) observe() {
	defer n.wg.Done()
	for {
		select {
		case <-n.stop:
			return
		case o := <-n.obsCh:
			if lo, ok := o.Data.(raft.LeaderObservation); ok {
				n.leaderChanges.Add(1)
				n.log.Info("leader changed", "leader", string(lo.LeaderID), "addr", string(lo.LeaderAddr))
				if f := n.opts.OnLeaderChange; f != nil {
					f(string(lo.LeaderID))
				}
			}
		}
	}
}

// Close leaves the elections and stops every goroutine and connection. It
// does not remove the node from the cluster (Leave does).
func (n *Member) Close() error {
	var err error
	n.closeMu.Do(func() {
		n.raft.DeregisterObserver(n.obs)
		err = n.raft.Shutdown().Error()
		close(n.stop)
		n.grpc.Stop()
		_ = n.trans.Close()
		n.mux.close()
		if !n.mux.closeInbound(5 * time.Second) {
			n.log.Warn("a raft connection's handler still runs 5s after close; closing the raft log anyway")
		}
		n.mu.Lock()
		for _, c := range n.conns {
			_ = c.Close()
		}
		n.conns = map[string]*grpc.ClientConn{}
		n.mu.Unlock()
		n.wg.Wait()
		if cerr := n.logs.Close(); err == nil {
			err = cerr
		}
	})
	return err
}

// ID is the node's id; Addr the address other nodes reach it at.
func (n *Member) ID() string   { return n.opts.ID }
func (n *Member) Addr() string { return n.advertise }

// Stats are the node's counters for metrics.
type Stats struct {
	Leader        bool
	Term          uint64
	CommitIndex   uint64
	AppliedIndex  uint64
	LastLogIndex  uint64
	Members       int
	LeaderChanges uint64
	// Forwarded counts commands sent to the leader by this node;
	// ForwardErrors those that failed (and were retried or given up).
	Forwarded, ForwardErrors uint64
	// Refused counts connections from peers that failed authentication.
	Refused uint64
	// Commit is the time from Apply to commit on this node as leader.
	Commit latency.Snapshot
}

// Stats reads the counters.
func (n *Member) Stats() Stats {
	st := n.raft.Stats()
	num := func(k string) uint64 { v, _ := strconv.ParseUint(st[k], 10, 64); return v }
	members := 0
	if cf := n.raft.GetConfiguration(); cf.Error() == nil {
		members = len(cf.Configuration().Servers)
	}
	return Stats{Leader: n.IsLeader(), Term: num("term"), CommitIndex: num("commit_index"), AppliedIndex: n.raft.AppliedIndex(),
		LastLogIndex: num("last_log_index"), Members: members, LeaderChanges: n.leaderChanges.Load(),
		Forwarded: n.forwarded.Load(), ForwardErrors: n.forwardErrors.Load(), Refused: n.refused.Load(), Commit: n.commit.Snapshot()}
}

// Term is the raft term this node is in.
func (n *Member) Term() uint64 { return n.raft.CurrentTerm() }
