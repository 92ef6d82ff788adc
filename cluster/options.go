package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"
)

// Defaults of Options. The raft timeouts are hashicorp/raft's own
// defaults: a follower that hears nothing for HeartbeatTimeout starts an
// election, so a new leader normally serves 1-2 s after the old one died.
const (
	DefaultHeartbeatTimeout   = time.Second
	DefaultElectionTimeout    = time.Second
	DefaultLeaderLeaseTimeout = 500 * time.Millisecond
	DefaultCommitTimeout      = 50 * time.Millisecond
	DefaultApplyTimeout       = 10 * time.Second
	DefaultSnapshotThreshold  = 8192
	DefaultTrailingLogs       = 10240
	DefaultSnapshotsRetained  = 2
	DefaultProbeTimeout       = 2 * time.Second
)

// Peer is a member of the cluster: its node id and raft address.
type Peer struct {
	ID   string
	Addr string
}

// ParsePeers reads "id=host:port,id=host:port" (--raft-peers).
func ParsePeers(s string) ([]Peer, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []Peer
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		id, addr, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || id == "" || addr == "" {
			return nil, fmt.Errorf("peer %q: want id=host:port", part)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("peer %q: %v", part, err)
		}
		if seen[id] {
			return nil, fmt.Errorf("peer id %q appears twice", id)
		}
		seen[id] = true
		out = append(out, Peer{ID: id, Addr: addr})
	}
	return out, nil
}

// Options configure a Member.
type Options struct {
	// ID is this node's id, unique in the cluster (--node-id). Required.
	ID string
	// Addr is the host:port the raft transport and the node-to-node
	// service listen on (--raft-addr). Required unless Listener is set.
	Addr string
	// Advertise is the address other nodes reach this one at. Default
	// Addr (or the listener's address); it must name a host, not
	// 0.0.0.0.
	Advertise string
	// Listener, when set, is used instead of listening on Addr (tests).
	// The node closes it.
	Listener net.Listener
	// Dial, when set, opens the node's connections to its peers instead
	// of a plain TCP dial (a proxy; tests that cut a node off). TLS and
	// the cluster token still run over what it returns.
	Dial Dialer
	// Dir holds the raft log (Dir/log, package raftlog) and snapshots
	// (--raft-dir).
	// Required.
	Dir string
	// Peers bootstraps a new cluster with these voters, this node among
	// them (--raft-peers). Ignored when Dir already holds raft state.
	// Empty: the node waits to be joined (stated cluster join).
	Peers []Peer
	// ServerTLS and ClientTLS secure the traffic between nodes: the
	// listener requires a client certificate (ServerTLS.ClientAuth) and
	// the dialer presents one. Both or neither (--cluster-tls-*).
	ServerTLS, ClientTLS TLS
	// Token is the shared secret every connection between nodes carries
	// (--cluster-token). Required without TLS; checked with it too.
	Token string
	// Logger receives raft's lines and the node's own. Default: discard.
	Logger *slog.Logger
	// OnLeaderChange, when set, is called (from one goroutine, in order)
	// each time this node hears of a new leader ("" while none is known).
	// It must not block: the node hands the news to its own goroutine.
	OnLeaderChange func(leaderID string)

	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	// LeaderLease is how long after a quorum confirmed this node's
	// leadership ConfirmLeader answers without asking again: the
	// read-index checks, and the hosted catalog's guard of its writes,
	// which would otherwise make a quorum round before and after each
	// manifest (deletes always ask: VerifyLeader). It is safe because a member that
	// confirmed us grants no vote until HeartbeatTimeout after that
	// contact (raft refuses votes while a leader is known, and nothing
	// here transfers leadership), so no other leader can exist within
	// it; the lease starts when the confirmation was asked for. Default
	// HeartbeatTimeout/4; negative: always ask. It must be below
	// HeartbeatTimeout/2, a margin for clock rates and scheduling.
	LeaderLease time.Duration
	// ApplyTimeout bounds one command's wait for the leader, forwarding
	// and retries included, when the caller's context has no deadline.
	ApplyTimeout      time.Duration
	SnapshotThreshold uint64
	TrailingLogs      uint64
	SnapshotsRetained int
	// ProbeTimeout bounds each member's answer in Status(probe).
	ProbeTimeout time.Duration
	// Service, when set, is a state machine that rides on the log beside
	// the fencing tokens and the journal (the catalog's replica): the
	// leader's Propose puts its commands in the log, and every node
	// applies them to its Service in log order; snapshots carry its
	// image. Default: none (Propose is refused).
	Service Service
}

// Service is a deterministic state machine kept by the cluster's log.
type Service interface {
	// Apply takes one command, in log order on every node, and returns
	// what the leader's Propose returns for it. It must decide from the
	// command and its state alone.
	Apply(cmd []byte) any
	// Image is the whole state, for a snapshot of the log.
	Image() ([]byte, error)
	// Restore replaces the state by an image from a snapshot.
	Restore(img []byte) error
}

// TLS names the PEM files of one side of the node-to-node TLS.
type TLS struct {
	CertFile, KeyFile, CAFile string
}

func (t TLS) set() bool { return t.CertFile != "" || t.KeyFile != "" || t.CAFile != "" }

// EnsureDefaults fills zero fields.
func (o *Options) EnsureDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&o.HeartbeatTimeout, DefaultHeartbeatTimeout)
	def(&o.ElectionTimeout, DefaultElectionTimeout)
	def(&o.LeaderLeaseTimeout, DefaultLeaderLeaseTimeout)
	def(&o.CommitTimeout, DefaultCommitTimeout)
	def(&o.ApplyTimeout, DefaultApplyTimeout)
	def(&o.ProbeTimeout, DefaultProbeTimeout)
	def(&o.LeaderLease, o.HeartbeatTimeout/4)
	if o.SnapshotThreshold == 0 {
		o.SnapshotThreshold = DefaultSnapshotThreshold
	}
	if o.TrailingLogs == 0 {
		o.TrailingLogs = DefaultTrailingLogs
	}
	if o.SnapshotsRetained == 0 {
		o.SnapshotsRetained = DefaultSnapshotsRetained
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	} else {
		// raft's transport logs an error for each connection the node
		// closed itself (quietClosed).
		o.Logger = quiet(o.Logger)
	}
}

// Validate reports every problem of o at once.
func (o *Options) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("cluster: "+format, args...)) }
	if o.ID == "" {
		bad("no node id")
	}
	if o.Addr == "" && o.Listener == nil {
		bad("no raft address")
	}
	if o.Addr != "" {
		if _, _, err := net.SplitHostPort(o.Addr); err != nil {
			bad("raft address %q: %v", o.Addr, err)
		}
	}
	if o.Advertise != "" {
		host, _, err := net.SplitHostPort(o.Advertise)
		if err != nil {
			bad("advertised address %q: %v", o.Advertise, err)
		} else if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			bad("advertised address %q names no host other nodes can reach", o.Advertise)
		}
	}
	if o.Dir == "" {
		bad("no raft directory")
	}
	if o.ServerTLS.set() != o.ClientTLS.set() {
		bad("node-to-node TLS needs both its server and client side")
	}
	if o.ServerTLS.set() && (o.ServerTLS.CertFile == "" || o.ServerTLS.KeyFile == "" || o.ServerTLS.CAFile == "") {
		bad("node-to-node TLS needs a certificate, its key and the CA that signs every node's certificate")
	}
	if !o.ServerTLS.set() && o.Token == "" {
		bad("nodes must share a cluster token or use TLS: without either anyone who reaches the raft address can join the cluster")
	}
	if len(o.Token) > maxTokenLen {
		bad("cluster token longer than %d bytes", maxTokenLen)
	}
	if len(o.Peers) > 0 {
		self := false
		for _, p := range o.Peers {
			if p.ID == o.ID {
				self = true
			}
		}
		if !self {
			bad("the bootstrap peers do not include this node %q", o.ID)
		}
	}
	for _, d := range []struct {
		name string
		d    time.Duration
	}{{"heartbeat timeout", o.HeartbeatTimeout}, {"election timeout", o.ElectionTimeout},
		{"leader lease timeout", o.LeaderLeaseTimeout}, {"commit timeout", o.CommitTimeout},
		{"apply timeout", o.ApplyTimeout}, {"probe timeout", o.ProbeTimeout}} {
		if d.d <= 0 {
			bad("%s %v must be positive", d.name, d.d)
		}
	}
	if o.LeaderLease >= o.HeartbeatTimeout/2 {
		bad("leader lease %v must be below half the heartbeat timeout %v (a member grants no vote for a heartbeat timeout after it last heard from the leader)",
			o.LeaderLease, o.HeartbeatTimeout)
	}
	return errors.Join(errs...)
}
