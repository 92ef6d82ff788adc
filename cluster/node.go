package cluster

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
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
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

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

// Handler runs a Call on the leader: the service it hosts (the catalog).
// Its error is for a call it cannot read; answers, errors of the service
// included, are in its result.
type Handler func(ctx context.Context, method string, payload []byte) ([]byte, error)

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

// IsLeader reports whether this node believes it leads (it may have been
// deposed without knowing: deletes check with VerifyLeader).
func (n *Member) IsLeader() bool { return n.raft.State() == raft.Leader }

// VerifyLeader confirms with a quorum that this node still leads: a
// deposed leader cut off from the others gets an error. Callers check it
// before effects only the leader may cause, when even a leader cut off
// a moment ago must not cause them (deletes). A confirmation starts a
// lease (Options.LeaderLease) that ConfirmLeader may answer from.
func (n *Member) VerifyLeader(ctx context.Context) error {
	asked, term := time.Now(), n.raft.CurrentTerm()
	if err := n.wait(ctx, n.raft.VerifyLeader()); err != nil {
		return fmt.Errorf("cluster: %s is not the leader: %w", n.opts.ID, err)
	}
	if n.opts.LeaderLease > 0 {
		n.leaseMu.Lock()
		if until := asked.Add(n.opts.LeaderLease); term != n.leaseTerm || until.After(n.leaseUntil) {
			n.leaseTerm, n.leaseUntil = term, until
		}
		n.leaseMu.Unlock()
	}
	return nil
}

// ConfirmLeader is VerifyLeader that answers without a quorum round
// within the lease of the last confirmation (asked for in this term,
// while this node still believes it leads): no other leader can exist
// then, so what this node does is what the only leader does. Reads
// (read-index checks) and writes whose effect a later leader sees
// (manifests, job files) use it.
func (n *Member) ConfirmLeader(ctx context.Context) error {
	if n.leased() {
		return nil
	}
	return n.VerifyLeader(ctx)
}

// leased reports whether a lease of this term covers now.
func (n *Member) leased() bool {
	if n.opts.LeaderLease <= 0 || n.raft.State() != raft.Leader {
		return false
	}
	term := n.raft.CurrentTerm()
	n.leaseMu.Lock()
	defer n.leaseMu.Unlock()
	return n.leaseTerm == term && time.Now().Before(n.leaseUntil)
}

// wait waits for f within ctx (ApplyTimeout without a deadline), or
// until the node closes. A raft future whose node shuts down while it is
// being answered may never be answered (seen with VerifyLeader, and
// with Apply, whose futures do not watch for the shutdown): its
// waiting goroutine then ends only if raft answers late, so every wait is
// bounded for the caller.
func (n *Member) wait(ctx context.Context, f raft.Future) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, n.opts.ApplyTimeout)
		defer cancel()
	}
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", raft.ErrLeadershipLost, ctx.Err())
	case <-n.stop:
		return raft.ErrRaftShutdown
	}
}

// Leader returns the leader's id and address as this node knows them
// ("" when none).
func (n *Member) Leader() (id, addr string) {
	a, i := n.raft.LeaderWithID()
	return string(i), string(a)
}

// WaitLeader waits until this node knows a leader.
func (n *Member) WaitLeader(ctx context.Context) error {
	for {
		if id, _ := n.Leader(); id != "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w known to %s: %w", ErrNoLeader, n.opts.ID, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// apply runs a command on the leader, here or forwarded (see onLeader).
// A command may reach the log twice (its first attempt committed but the
// answer was lost with the leader): run gives acquires and releases a
// request id, which the machine answers once.
func (n *Member) apply(ctx context.Context, cmd []byte) (res []byte, err error) {
	err = n.onLeader(ctx, func(ctx context.Context) (err error) {
		res, err = n.readLocal(ctx, cmd)
		return err
	}, func(ctx context.Context, addr string) (err error) {
		res, err = n.forward(ctx, addr, cmd)
		return err
	})
	return res, err
}

// IsLeadershipError reports whether err says that this node does not, or
// no longer, lead (a command lost with its leadership): the operation may
// succeed on the next leader.
func IsLeadershipError(err error) bool { return retryable(err) }

func retryable(err error) bool {
	return errors.Is(err, errNotReady) || errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) ||
		errors.Is(err, raft.ErrLeadershipTransferInProgress) || errors.Is(err, raft.ErrEnqueueTimeout)
}

// applyLocal applies cmd through this node's raft, which must lead.
func (n *Member) applyLocal(ctx context.Context, cmd []byte) ([]byte, error) {
	timeout := n.opts.ApplyTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(d), time.Millisecond)
	}
	t0 := time.Now()
	f := n.raft.Apply(cmd, timeout)
	if err := n.wait(ctx, f); err != nil {
		return nil, err
	}
	n.commit.Observe(time.Since(t0))
	res, ok := f.Response().(result)
	if !ok {
		return nil, fmt.Errorf("cluster: the state machine answered %T", f.Response())
	}
	return json.Marshal(res)
}

// forward sends cmd to the leader at addr.
func (n *Member) forward(ctx context.Context, addr string, cmd []byte) ([]byte, error) {
	n.forwarded.Add(1)
	cc, err := n.conn(addr)
	if err != nil {
		n.forwardErrors.Add(1)
		return nil, err
	}
	resp, err := pb.NewClusterClient(cc).Apply(ctx, &pb.ApplyRequest{Command: cmd, From: n.opts.ID})
	if err != nil {
		n.forwardErrors.Add(1)
		return nil, fmt.Errorf("cluster: forward to %s: %w", addr, err)
	}
	return resp.GetResult(), nil
}

// conn returns the (lazily connecting) gRPC connection to a node.
func (n *Member) conn(addr string) (*grpc.ClientConn, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	select {
	case <-n.stop:
		return nil, raft.ErrRaftShutdown
	default:
	}
	if c, ok := n.conns[addr]; ok {
		return c, nil
	}
	c, err := dialRPC(addr, n.opts.Dial, n.clientTLS, n.opts.Token)
	if err != nil {
		return nil, err
	}
	n.conns[addr] = c
	return c, nil
}

// rpcKeepalive and rpcBackoff keep a node's connection to another
// node's service usable across a partition. A silent partition (packets
// lost, no reset) stalls a connection: what it sent stays unacknowledged,
// TCP retransmits with a backoff that reaches tens of seconds, and after
// the heal the connection stays stalled until the next retransmission,
// while gRPC waits up to 2 minutes between reconnections: a healed node
// could not forward a call to the leader for 30-45 s (the partition
// suite, tests/partition). With these, a connection whose calls get no
// answer for 10 s (gRPC's shortest ping interval) is pinged and closed
// when the ping gets no answer within 3 s, and a lost connection is
// dialed again within about 2 s.
var (
	rpcKeepalive = keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 3 * time.Second}
	rpcBackoff   = grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2,
		MaxDelay: 2 * time.Second}, MinConnectTimeout: 2 * time.Second}
)

// dialRPC makes a gRPC connection to a node's service over the mux.
func dialRPC(addr string, dial Dialer, clientTLS *tls.Config, token string) (*grpc.ClientConn, error) {
	return grpc.NewClient("passthrough:///"+addr,
		grpc.WithKeepaliveParams(rpcKeepalive),
		grpc.WithConnectParams(rpcBackoff),
		// The connection is authenticated (and encrypted, with TLS) by the
		// mux's handshake below gRPC, so gRPC itself adds nothing.
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			return dialPeer(ctx, dial, a, kindRPC, clientTLS, token)
		}))
}

func decodeResult(b []byte) (result, error) {
	var r result
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("cluster: result: %w", err)
	}
	if r.Err != "" {
		return r, errors.New(r.Err)
	}
	return r, nil
}

func (n *Member) run(ctx context.Context, c command) (result, error) {
	if c.Op != opCheck {
		var id [16]byte
		_, _ = rand.Read(id[:]) // crypto/rand never fails on Linux
		c.Req = hex.EncodeToString(id[:])
	}
	b, err := n.apply(ctx, encodeCommand(c))
	if err != nil {
		return result{}, err
	}
	return decodeResult(b)
}

// CheckHeld checks on the leader, from its own copy of the state, that
// every check's token is its task's newest, without confirming the
// leadership: the caller must confirm it after this returns (a quorum
// round, as VerifyLeader does) before acting on the answer, which makes
// the two a read-index read. A service on the leader that confirms its
// leadership anyway before it writes (the hosted catalog's guard) saves
// the check's own round trip this way. The first read of a term waits
// for a barrier, so that the commit index covers earlier terms; then it
// waits until the machine applied the commit index taken at the start.
// The error of a fenced check wraps ErrFenced and names the newer holder.
func (n *Member) CheckHeld(ctx context.Context, checks []Check) error {
	if n.raft.State() != raft.Leader {
		return fmt.Errorf("%w: %s checks tokens only while it leads", raft.ErrNotLeader, n.opts.ID)
	}
	if err := n.readBarrier(ctx); err != nil {
		return err
	}
	if err := n.waitApplied(ctx, n.raft.CommitIndex()); err != nil {
		return err
	}
	n.fsm.mu.RLock()
	defer n.fsm.mu.RUnlock()
	var errs []error
	for _, c := range checks {
		if r := n.fsm.st.applyOnce(command{Op: opCheck, Task: c.Task, Token: c.Token}); r.Fenced {
			errs = append(errs, fenced(c.Task, c.Token, r))
		}
	}
	return errors.Join(errs...)
}

// readLocal answers a read-only command (a check) on the leader without a
// log entry, as raft's read-index reads do: the commit index is taken,
// leadership confirmed with a quorum (no newer leader can have committed
// anything past it), and the answer read once the machine has applied that
// index. The first read of a term waits for a barrier, so that the commit
// index covers every entry of earlier terms. It saves a log write and its
// fsync per check: checks are most of the cluster's commands (every
// handle report and completion checks its tasks' tokens).
func (n *Member) readLocal(ctx context.Context, cmd []byte) ([]byte, error) {
	c, err := decodeCommand(cmd)
	if err != nil {
		return nil, err
	}
	if c.Op != opCheck {
		return n.applyLocal(ctx, cmd)
	}
	if err := n.readBarrier(ctx); err != nil {
		return nil, err
	}
	ci := n.raft.CommitIndex()
	if err := n.ConfirmLeader(ctx); err != nil {
		return nil, err
	}
	if err := n.waitApplied(ctx, ci); err != nil {
		return nil, err
	}
	n.fsm.mu.RLock()
	r := n.fsm.st.applyOnce(c) // a check changes nothing
	n.fsm.mu.RUnlock()
	return json.Marshal(r)
}

// readBarrier waits, at the first read of each term, for a barrier: the
// commit index then covers every entry of earlier terms, and everything
// in the log before the barrier is applied.
func (n *Member) readBarrier(ctx context.Context) error {
	term := n.raft.CurrentTerm()
	if n.readTerm.Load() == term {
		return nil
	}
	last := n.raft.LastIndex()
	if err := n.Barrier(ctx); err != nil {
		return err
	}
	n.fsm.raise(last)
	n.readTerm.Store(term)
	return nil
}

// waitApplied waits until this node's machine applied every command at or
// below index. raft's own AppliedIndex will not do: raft advances it when
// it hands entries to the machine's goroutine, before the machine applied
// them, so a read after it could miss a token just taken. Entries that
// never reach the machine (no-ops, barriers, configuration) are skipped
// by looking their types up in the log, back from index to the first
// command; entries no longer in the log are in a snapshot the machine
// holds.
func (n *Member) waitApplied(ctx context.Context, index uint64) error {
	var l raft.Log
	for i := index; i > n.fsm.appliedIndex(); i-- {
		err := n.logs.GetLog(i, &l)
		if errors.Is(err, raft.ErrLogNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("cluster: reading log entry %d: %w", i, err)
		}
		if l.Type == raft.LogCommand {
			return n.fsm.waitApplied(ctx, i)
		}
	}
	return nil
}

// Acquire takes a new fencing token for task, held by holder (a node id):
// every token handed out is larger than any before it, and from now on
// only this token passes Check for the task.
func (n *Member) Acquire(ctx context.Context, task, holder string) (uint64, error) {
	r, err := n.run(ctx, command{Op: opAcquire, Task: task, Holder: holder})
	if err != nil {
		return 0, err
	}
	return r.Token, nil
}

// Check confirms, linearizably (through the log), that token is still
// task's newest; otherwise the error wraps ErrFenced and names the newer
// token and its holder.
func (n *Member) Check(ctx context.Context, task string, token uint64) error {
	r, err := n.run(ctx, command{Op: opCheck, Task: task, Token: token})
	if err != nil {
		return err
	}
	if r.Fenced {
		return fenced(task, token, r)
	}
	return nil
}

// Release gives task up if token is still its newest (a closed instance);
// a newer holder is left alone and the error wraps ErrFenced.
func (n *Member) Release(ctx context.Context, task string, token uint64) error {
	r, err := n.run(ctx, command{Op: opRelease, Task: task, Token: token})
	if err != nil {
		return err
	}
	if r.Fenced {
		return fenced(task, token, r)
	}
	return nil
}

// JournalPut sets key to value in the replicated journal: once it
// returns, every later leader's JournalRead (after Barrier) sees it. A
// repeated put of the same value is harmless, so a retry after a lost
// answer is safe.
func (n *Member) JournalPut(ctx context.Context, key string, value []byte) error {
	b, err := n.apply(ctx, encodeCommand(command{Op: opPut, Key: key, Value: value}))
	if err != nil {
		return err
	}
	_, err = decodeResult(b)
	return err
}

// JournalPutMany is JournalPut of several records in one log entry: all
// of them or none.
func (n *Member) JournalPutMany(ctx context.Context, records map[string][]byte) error {
	_, err := n.JournalPutChecked(ctx, records, nil)
	return err
}

// JournalPutChecked is JournalPutMany where a record with a check is set
// only while the check's token is its task's newest, decided in the same
// log entry. refused maps the keys not set to errors wrapping ErrFenced
// that name the newer holder; err is for the write as a whole (then no
// record is set).
func (n *Member) JournalPutChecked(ctx context.Context, records map[string][]byte, checks map[string]Check) (refused map[string]error, err error) {
	b, err := n.apply(ctx, encodeCommand(command{Op: opPutMany, Records: records, Checks: checks}))
	if err != nil {
		return nil, err
	}
	r, err := decodeResult(b)
	if err != nil {
		return nil, err
	}
	for k, cur := range r.Refused {
		if refused == nil {
			refused = map[string]error{}
		}
		refused[k] = fenced(checks[k].Task, checks[k].Token, result{Token: cur.Token, Holder: cur.Holder})
	}
	return refused, nil
}

// JournalDeleteRange deletes the journal's keys in [from, to).
func (n *Member) JournalDeleteRange(ctx context.Context, from, to string) error {
	b, err := n.apply(ctx, encodeCommand(command{Op: opDeleteRange, Key: from, To: to}))
	if err != nil {
		return err
	}
	_, err = decodeResult(b)
	return err
}

// JournalRead returns the journal's records under prefix from this node's
// copy: complete on a leader after Barrier, possibly behind elsewhere.
func (n *Member) JournalRead(prefix string) map[string][]byte { return n.fsm.journal(prefix) }

func fenced(task string, token uint64, r result) error {
	if r.Token == 0 {
		return fmt.Errorf("%w: task %s: fencing token %d was released and no one holds the task now", ErrFenced, task, token)
	}
	return fmt.Errorf("%w: task %s: fencing token %d is stale: node %s holds token %d since", ErrFenced, task, token, r.Holder, r.Token)
}

// Propose puts a command of the Service in the log, on this node, which
// must lead, and returns what its Service answered once the command is
// applied here. With checks the command is applied only while each
// check's token is its task's newest, decided in the same entry: else the
// error wraps ErrFenced and names the newer holder, and no node's Service
// saw it. Any other error (leadership lost, a timeout) leaves unknown
// whether the command was applied.
func (n *Member) Propose(ctx context.Context, cmd []byte, checks []Check) (any, error) {
	if n.fsm.service == nil {
		return nil, errors.New("cluster: propose without a service (Options.Service)")
	}
	if n.raft.State() != raft.Leader {
		return nil, fmt.Errorf("%w: %s proposes only while it leads", raft.ErrNotLeader, n.opts.ID)
	}
	c := command{Op: opService, Value: cmd}
	for i, ck := range checks {
		if c.Checks == nil {
			c.Checks = map[string]Check{}
		}
		c.Checks[strconv.Itoa(i)] = ck
	}
	timeout := n.opts.ApplyTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(d), time.Millisecond)
	}
	t0 := time.Now()
	f := n.raft.Apply(encodeCommand(c), timeout)
	if err := n.wait(ctx, f); err != nil {
		return nil, err
	}
	n.commit.Observe(time.Since(t0))
	if r, ok := f.Response().(*ServiceRefusal); ok {
		return nil, r
	}
	return f.Response(), nil
}

// Holder reads task's newest token and holder from this node's copy of
// the state, which may lag the leader's (Check is the linearizable read).
func (n *Member) Holder(task string) (token uint64, holder string, ok bool) {
	fe, ok := n.fsm.lookup(task)
	return fe.Token, fe.Holder, ok
}

// Join adds a voter, on the leader (forwarded when this node is not it).
func (n *Member) Join(ctx context.Context, id, addr string) error {
	if id == "" || addr == "" {
		return errors.New("cluster: join needs a node id and its raft address")
	}
	return n.onLeader(ctx, func(ctx context.Context) error {
		return n.wait(ctx, n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, n.opts.ApplyTimeout))
	}, func(ctx context.Context, leader string) error {
		cc, err := n.conn(leader)
		if err != nil {
			return err
		}
		_, err = pb.NewClusterClient(cc).Join(ctx, &pb.JoinRequest{NodeId: id, RaftAddr: addr})
		return err
	})
}

// Leave removes a member, on the leader (forwarded when this node is not
// it). A leader may remove itself: the others elect a new one.
func (n *Member) Leave(ctx context.Context, id string) error {
	if id == "" {
		return errors.New("cluster: leave needs a node id")
	}
	return n.onLeader(ctx, func(ctx context.Context) error {
		return n.wait(ctx, n.raft.RemoveServer(raft.ServerID(id), 0, n.opts.ApplyTimeout))
	}, func(ctx context.Context, leader string) error {
		cc, err := n.conn(leader)
		if err != nil {
			return err
		}
		_, err = pb.NewClusterClient(cc).Leave(ctx, &pb.LeaveRequest{NodeId: id})
		return err
	})
}

// onLeader runs local when this node leads, else remote against the
// leader's address, retrying through leader changes until ctx (or
// ApplyTimeout) ends: raft's errors of a lost or moving leadership, and a
// remote node's answer that it does not lead or cannot be reached, are
// retried after a short backoff; any other error is returned.
func (n *Member) onLeader(ctx context.Context, local func(context.Context) error, remote func(ctx context.Context, addr string) error) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, n.opts.ApplyTimeout)
		defer cancel()
	}
	var last error
	for attempt := 0; ; attempt++ {
		select {
		case <-n.stop:
			return fmt.Errorf("%w: node %s is closed", ErrNoLeader, n.opts.ID)
		default:
		}
		if attempt > 0 {
			select {
			case <-n.stop:
				return fmt.Errorf("%w: node %s is closed", ErrNoLeader, n.opts.ID)
			case <-ctx.Done():
				return fmt.Errorf("%w: %v (last: %v)", ErrNoLeader, ctx.Err(), last)
			case <-time.After(min(time.Duration(attempt)*25*time.Millisecond, 250*time.Millisecond)):
			}
		}
		if n.raft.State() == raft.Leader {
			err := local(ctx)
			if err == nil || !retryable(err) {
				return err
			}
			last = err
			continue
		}
		_, addr := n.Leader()
		if addr == "" {
			last = fmt.Errorf("no leader known to %s", n.opts.ID)
			continue
		}
		moved, err := n.remoteWhileLeader(ctx, addr, remote)
		if err == nil {
			return nil
		}
		if moved {
			last = fmt.Errorf("the leader changed during a call to %s: %w", addr, err)
			continue
		}
		if s, ok := status.FromError(err); ok && s.Code() != codes.FailedPrecondition && s.Code() != codes.Unavailable {
			return err
		}
		last = err
	}
}

// remoteWhileLeader runs remote against addr until it answers or this
// node learns of another leader (or of none), and then gives it up
// (moved). A leader cut off by a silent partition (no reset, no answer)
// would otherwise hold the call until the caller's deadline, long after
// the others elected a new leader that could answer it; calls are
// idempotent, so the retry may run twice.
func (n *Member) remoteWhileLeader(ctx context.Context, addr string, remote func(context.Context, string) error) (moved bool, err error) {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var changed atomic.Bool
	go func() {
		// Owned by this call: ends when it does (cancel above).
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-t.C:
				if _, a := n.Leader(); a != addr {
					changed.Store(true)
					cancel()
					return
				}
			}
		}
	}()
	err = remote(rctx, addr)
	return err != nil && changed.Load() && ctx.Err() == nil, err
}

// Status is this node's view of the cluster; with probe, every member is
// asked for its own indexes within ProbeTimeout.
func (n *Member) Status(ctx context.Context, probe bool) (*pb.StatusResponse, error) {
	st := n.raft.Stats()
	num := func(k string) uint64 { v, _ := strconv.ParseUint(st[k], 10, 64); return v }
	lid, laddr := n.Leader()
	resp := &pb.StatusResponse{NodeId: n.opts.ID, State: stateName(n.raft.State()), LeaderId: lid, LeaderAddr: laddr,
		Term: num("term"), CommitIndex: num("commit_index"), AppliedIndex: n.raft.AppliedIndex(), LastLogIndex: num("last_log_index")}
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return resp, fmt.Errorf("cluster: configuration: %w", err)
	}
	members := cf.Configuration().Servers
	resp.Members = make([]*pb.Member, len(members))
	var wg sync.WaitGroup
	for i, s := range members {
		m := &pb.Member{NodeId: string(s.ID), RaftAddr: string(s.Address), Suffrage: suffrageName(s.Suffrage), Leader: string(s.ID) == lid}
		resp.Members[i] = m
		if !probe {
			continue
		}
		if string(s.ID) == n.opts.ID {
			m.Healthy, m.CommitIndex, m.AppliedIndex = true, resp.CommitIndex, resp.AppliedIndex
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, n.opts.ProbeTimeout)
			defer cancel()
			cc, err := n.conn(m.RaftAddr)
			if err == nil {
				var r *pb.StatusResponse
				if r, err = pb.NewClusterClient(cc).Status(pctx, &pb.StatusRequest{}); err == nil {
					m.Healthy, m.CommitIndex, m.AppliedIndex = true, r.GetCommitIndex(), r.GetAppliedIndex()
				}
			}
			if err != nil {
				m.Error = err.Error()
			}
		}()
	}
	wg.Wait()
	return resp, nil
}

func stateName(s raft.RaftState) string {
	switch s {
	case raft.Leader:
		return "leader"
	case raft.Follower:
		return "follower"
	case raft.Candidate:
		return "candidate"
	default:
		return "shutdown"
	}
}

func suffrageName(s raft.ServerSuffrage) string {
	switch s {
	case raft.Voter:
		return "voter"
	case raft.Nonvoter:
		return "nonvoter"
	default:
		return "staging"
	}
}

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

// Members returns the ids of the servers in the cluster's configuration
// as this node knows it.
func (n *Member) Members() (map[string]bool, error) {
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return nil, fmt.Errorf("cluster: read the configuration: %w", err)
	}
	out := map[string]bool{}
	for _, s := range cf.Configuration().Servers {
		out[string(s.ID)] = true
	}
	return out, nil
}

// Term is the raft term this node is in.
func (n *Member) Term() uint64 { return n.raft.CurrentTerm() }

// Barrier waits until this node, as leader, has applied every command
// committed before it: what a new leader does before it serves.
func (n *Member) Barrier(ctx context.Context) error {
	timeout := n.opts.ApplyTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(d), time.Millisecond)
	}
	return n.wait(ctx, n.raft.Barrier(timeout))
}

// SetHandler makes h the service this node hosts while it leads (nil:
// none; calls reaching it are retried by their callers until a handler is
// set here or on another leader).
func (n *Member) SetHandler(h Handler) {
	if h == nil {
		n.handler.Store(nil)
		return
	}
	n.handler.Store(&h)
}

// Call runs method on the leader's service (SetHandler), here or
// forwarded, retrying through leader changes and a service that is not
// ready, until ctx (or ApplyTimeout) ends. A call may run twice when an
// answer is lost with a leader: the service's calls must be idempotent.
func (n *Member) Call(ctx context.Context, method string, payload []byte) (res []byte, err error) {
	err = n.onLeader(ctx, func(ctx context.Context) (err error) {
		res, err = n.callLocal(ctx, method, payload)
		return err
	}, func(ctx context.Context, addr string) error {
		n.forwarded.Add(1)
		cc, err := n.conn(addr)
		if err != nil {
			n.forwardErrors.Add(1)
			return err
		}
		resp, err := pb.NewClusterClient(cc).Call(ctx, &pb.CallRequest{Method: method, Payload: payload, From: n.opts.ID})
		if err != nil {
			n.forwardErrors.Add(1)
			return fmt.Errorf("cluster: call %s on %s: %w", method, addr, err)
		}
		res = resp.GetPayload()
		return nil
	})
	return res, err
}

func (n *Member) callLocal(ctx context.Context, method string, payload []byte) ([]byte, error) {
	h := n.handler.Load()
	if h == nil {
		return nil, errNotReady
	}
	return (*h)(ctx, method, payload)
}

// service is the node-to-node gRPC service.
type service struct {
	pb.UnimplementedClusterServer
	n *Member
}

func (s *service) Apply(ctx context.Context, req *pb.ApplyRequest) (*pb.ApplyResponse, error) {
	if s.n.raft.State() != raft.Leader {
		return nil, status.Errorf(codes.FailedPrecondition, "%s is not the leader", s.n.opts.ID)
	}
	if _, err := decodeCommand(req.GetCommand()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	res, err := s.n.readLocal(ctx, req.GetCommand())
	if err != nil {
		if retryable(err) {
			return nil, status.Errorf(codes.FailedPrecondition, "%s: %v", s.n.opts.ID, err)
		}
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &pb.ApplyResponse{Result: res}, nil
}

func (s *service) Call(ctx context.Context, req *pb.CallRequest) (*pb.CallResponse, error) {
	if s.n.raft.State() != raft.Leader {
		return nil, status.Errorf(codes.FailedPrecondition, "%s is not the leader", s.n.opts.ID)
	}
	out, err := s.n.callLocal(ctx, req.GetMethod(), req.GetPayload())
	switch {
	case errors.Is(err, errNotReady):
		return nil, status.Errorf(codes.Unavailable, "%s: %v", s.n.opts.ID, err)
	case retryable(err):
		return nil, status.Errorf(codes.FailedPrecondition, "%s: %v", s.n.opts.ID, err)
	case err != nil:
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return &pb.CallResponse{Payload: out}, nil
}

// Join forwards to the leader when this node does not lead, so that an
// operator may ask any member.
func (s *service) Join(ctx context.Context, req *pb.JoinRequest) (*pb.JoinResponse, error) {
	if err := s.n.Join(ctx, req.GetNodeId(), req.GetRaftAddr()); err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	return &pb.JoinResponse{}, nil
}

// Leave forwards to the leader when this node does not lead, so that an
// operator may ask any member.
func (s *service) Leave(ctx context.Context, req *pb.LeaveRequest) (*pb.LeaveResponse, error) {
	if err := s.n.Leave(ctx, req.GetNodeId()); err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	return &pb.LeaveResponse{}, nil
}

func (s *service) Status(ctx context.Context, req *pb.StatusRequest) (*pb.StatusResponse, error) {
	r, err := s.n.Status(ctx, req.GetProbe())
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return r, nil
}

// Client is a connection to one node's service, for the CLI (stated
// cluster status, join, leave).
type Client struct {
	pb.ClusterClient
	cc *grpc.ClientConn
}

// Dial connects to the node at addr (its --raft-addr) with the cluster's
// credentials: TLS files (a client certificate the nodes accept) and/or
// the cluster token.
func Dial(addr string, t TLS, token string) (*Client, error) {
	var cfg *tls.Config
	if t.set() {
		var err error
		if cfg, err = tlsconf.ClientConfig(tlsconf.Client{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile}); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	cc, err := dialRPC(addr, nil, cfg, token)
	if err != nil {
		return nil, err
	}
	return &Client{ClusterClient: pb.NewClusterClient(cc), cc: cc}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.cc.Close() }
