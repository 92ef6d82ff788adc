package host

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/cluster"
	"github.com/statedhq/stated/daemon"
)

// clustered reports whether the options ask for cluster mode.
func (o *Options) clustered() bool { return o.RaftAddr != "" }

// validateCluster checks the cluster settings (validate's rules), naming
// the fields.
func validateCluster(o *Options, bad func(field, format string, args ...any)) {
	any := o.NodeID != "" || o.RaftAdvertise != "" || o.RaftPeers != "" || o.RaftDir != "" ||
		o.ClusterTLSCert != "" || o.ClusterTLSKey != "" || o.ClusterTLSCA != "" || o.ClusterToken != ""
	if !o.clustered() {
		if any {
			bad("RaftAddr", "cluster settings are given without %s: a daemon without it runs alone", ref("RaftAddr"))
		}
		return
	}
	if o.NodeID == "" {
		bad("NodeID", "%s needs %s: every node of a cluster has its own id", ref("RaftAddr"), ref("NodeID"))
	}
	peers, err := cluster.ParsePeers(o.RaftPeers)
	if err != nil {
		bad("RaftPeers", "%s: %v", ref("RaftPeers"), err)
	}
	if len(peers) > 0 && o.NodeID != "" {
		self := false
		for _, p := range peers {
			self = self || p.ID == o.NodeID
		}
		if !self {
			bad("RaftPeers", "%s does not list this node's %s %q", ref("RaftPeers"), ref("NodeID"), o.NodeID)
		}
	}
	if o.Store == nil && o.CheckpointStore == DefaultCheckpointStore(o.DataDir) {
		bad("CheckpointStore", "cluster mode needs %s naming storage every node reaches (an S3 bucket, or a directory all nodes share): the default under the data dir is this node's alone, and the leader's catalog must see every node's uploads",
			ref("CheckpointStore"))
	}
	if o.ChangelogStore != "" || o.LogStore != nil {
		bad("ChangelogStore", "%s is not available in cluster mode: the changelog's segments live in the checkpoint store every node shares, where any node restores them and savepoints copy them from",
			ref("ChangelogStore"))
	}
	tlsSet := o.ClusterTLSCert != "" || o.ClusterTLSKey != "" || o.ClusterTLSCA != ""
	if tlsSet && (o.ClusterTLSCert == "" || o.ClusterTLSKey == "" || o.ClusterTLSCA == "") {
		bad("ClusterTLSCert", "%s, %s and %s go together: each node presents its certificate and checks the others' against the CA",
			ref("ClusterTLSCert"), ref("ClusterTLSKey"), ref("ClusterTLSCA"))
	}
	if !tlsSet && o.ClusterToken == "" {
		bad("ClusterToken", "cluster mode needs %s or %s: otherwise anyone who reaches %s could join the cluster",
			ref("ClusterToken"), ref("ClusterTLSCert"), ref("RaftAddr"))
	}
}

// openCluster starts this node's raft member (cluster mode only).
func (n *Host) openCluster() error {
	o := n.opts
	if !o.clustered() {
		return nil
	}
	peers, _ := cluster.ParsePeers(o.RaftPeers) // validated
	dir := o.RaftDir
	if dir == "" {
		dir = filepath.Join(o.DataDir, "raft")
	}
	// The catalog's decisions ride on the log: every node keeps a
	// replica, which the leader's hosted catalog decides through.
	n.replica = catalog.NewReplica(o.Retain, 0)
	co := cluster.Options{ID: o.NodeID, Addr: o.RaftAddr, Advertise: o.RaftAdvertise, Dir: dir, Peers: peers,
		Token: o.ClusterToken, Logger: n.log, Service: n.replica,
		// The catalog host may not exist yet when raft first reports a
		// leader: it looks at the leadership itself when it starts.
		OnLeaderChange: func(string) {
			if h := n.hostRef.Load(); h != nil {
				h.Nudge()
			}
		}}
	if o.ClusterTLSCert != "" {
		t := cluster.TLS{CertFile: o.ClusterTLSCert, KeyFile: o.ClusterTLSKey, CAFile: o.ClusterTLSCA}
		co.ServerTLS, co.ClientTLS = t, t
	}
	if o.TuneCluster != nil {
		o.TuneCluster(&co)
	}
	c, err := cluster.Open(co)
	if err != nil {
		return err
	}
	n.cluster = c
	// Ready's grace for a first leader counts from now.
	_ = c.Ready(context.Background())
	n.closers = append(n.closers, func() { _ = c.Close() })
	return nil
}

// openClusterCatalog gives the daemon the cluster's one catalog: a client
// of the catalog the leader hosts, and the host that serves it while this
// node leads. Heap instances are refused (their snapshots live in one
// daemon's memory); the changelog's segments are held and released
// across the nodes through cluster.ChangelogRuns.
func (n *Host) openClusterCatalog(co catalog.Options, dc *daemon.Config) error {
	client, err := cluster.NewCatalogClient(cluster.CatalogClientOptions{Caller: n.cluster.CatalogCaller(), Store: n.store, GCGrace: co.GCGrace, Logger: n.log})
	if err != nil {
		return err
	}
	// The hosted catalog never sees this node's heap store (other nodes
	// have their own); it asks every node's log what it holds.
	co.HeapStore, co.LogHeld = nil, n.clog.Held
	n.catClient = client
	co.Replica = n.replica
	n.host = cluster.NewCatalogHost(n.cluster, co, client, n.clog, n.log)
	n.hostRef.Store(n.host)
	// The host's goroutine stops in its closer (after the daemon's
	// shutdown, which still reports aborts through it), not with the
	// servers' goroutines.
	go n.host.Run()
	n.closers = append(n.closers, n.host.Close)
	dc.Catalog, dc.SharedCatalog = client, true
	dc.HeapSnapshots = nil
	dc.Changelog.Release = n.clog.Report
	dc.Openers = refuseHeap(dc.Openers)
	return nil
}

// fencer is what the daemon fences tasks with: the test seam, or the
// cluster's tokens.
func (n *Host) fencer() daemon.Fencer {
	if n.opts.Fence != nil {
		return n.opts.Fence
	}
	if n.cluster != nil {
		return cluster.NewTaskFence(n.cluster, n.clog.Register)
	}
	return nil
}

// refuseHeap is the heap opener of a cluster node: heap snapshots live in
// one daemon's memory, where no other node could restore them and the
// leader's catalog could not delete them.
func refuseHeap(ops map[backend.Kind]daemon.Opener) map[backend.Kind]daemon.Opener {
	out := make(map[backend.Kind]daemon.Opener, len(ops))
	for k, op := range ops {
		out[k] = op
	}
	out[backend.KindHeap] = func(context.Context, backend.Options, daemon.OpenEnv) (backend.Backend, error) {
		return nil, fmt.Errorf("%w: the heap backend keeps its snapshots in one daemon's memory, which other nodes of a cluster cannot restore from: use file or lsm in cluster mode",
			daemon.ErrUnsupported)
	}
	return out
}

// Cluster is the node's cluster member (nil: the node runs alone).
func (n *Host) Cluster() *cluster.Member { return n.cluster }

// clusterCollector exports the raft member's state: stated_raft_*.
type clusterCollector struct {
	c                                                     *cluster.Member
	leader, term, commit, applied, lag, members           *prometheus.Desc
	leaderChanges, forwarded, forwardErrors, refused, dur *prometheus.Desc
}

func newClusterCollector(c *cluster.Member) *clusterCollector {
	d := descs("stated_raft_")
	return &clusterCollector{c: c,
		leader:        d("leader", "1 while this node leads the cluster."),
		term:          d("term", "The raft term this node is in."),
		commit:        d("commit_index", "The last raft log index this node knows committed."),
		applied:       d("applied_index", "The last raft log index this node applied."),
		lag:           d("apply_lag", "Committed raft log entries this node has not applied yet."),
		members:       d("members", "Members of the cluster's configuration."),
		leaderChanges: d("leader_changes_total", "Leader changes this node observed."),
		forwarded:     d("forwarded_total", "Commands this node forwarded to the leader."),
		forwardErrors: d("forward_errors_total", "Forwarded commands that failed (and were retried or given up)."),
		refused:       d("refused_connections_total", "Connections from peers that failed authentication (TLS or cluster token)."),
		dur:           d("commit_duration_seconds", "From a command's submission to its commit, on this node as leader."),
	}
}

func (c *clusterCollector) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(c, ch) }

func (c *clusterCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.c.Stats()
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	counter := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	lead := 0.0
	if s.Leader {
		lead = 1
	}
	gauge(c.leader, lead)
	gauge(c.term, float64(s.Term))
	gauge(c.commit, float64(s.CommitIndex))
	gauge(c.applied, float64(s.AppliedIndex))
	gauge(c.lag, float64(max(s.CommitIndex, s.AppliedIndex)-s.AppliedIndex))
	gauge(c.members, float64(s.Members))
	counter(c.leaderChanges, s.LeaderChanges)
	counter(c.forwarded, s.Forwarded)
	counter(c.forwardErrors, s.ForwardErrors)
	counter(c.refused, s.Refused)
	ch <- prometheus.MustNewConstHistogram(c.dur, s.Commit.Count, s.Commit.Sum, s.Commit.Buckets)
}
