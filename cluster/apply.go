// Commands through the log: applied on the leader or forwarded to it,
// and linearizable reads of the machine.

package cluster

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	pb "github.com/statedhq/stated/cluster/clusterpb"
)

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
