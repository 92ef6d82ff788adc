package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/statedhq/stated/cluster"
	pb "github.com/statedhq/stated/cluster/clusterpb"
)

// clusterFlags name the node a "stated cluster" command asks and the
// cluster's credentials, as "stated serve" takes them (and from the same
// STATED_* variables).
type clusterFlags struct {
	addr, token, cert, key, ca string
	timeout                    time.Duration
}

func addClusterFlags(fl *pflag.FlagSet, f *clusterFlags) {
	fl.StringVar(&f.addr, "raft-addr", "", "the --raft-addr of any node of the cluster")
	fl.StringVar(&f.token, "cluster-token", "", "the cluster's token (or STATED_CLUSTER_TOKEN)")
	fl.StringVar(&f.cert, "cluster-tls-cert", "", "a PEM certificate of the cluster's CA, with client use")
	fl.StringVar(&f.key, "cluster-tls-key", "", "the PEM key of --cluster-tls-cert")
	fl.StringVar(&f.ca, "cluster-tls-ca", "", "the cluster's PEM CA")
	fl.DurationVar(&f.timeout, "timeout", 10*time.Second, "how long to wait for the answer")
}

// call connects to the node the flags name and runs do within --timeout.
func (f *clusterFlags) call(ctx context.Context, do func(context.Context, *cluster.Client) error) error {
	if f.addr == "" {
		return errors.New("--raft-addr is required: the address of a node of the cluster (or STATED_RAFT_ADDR)")
	}
	c, err := cluster.Dial(f.addr, cluster.TLS{CertFile: f.cert, KeyFile: f.key, CAFile: f.ca}, f.token)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	return f.explain(do(ctx, c))
}

// explain replaces a gRPC error about the connection to the node the
// flags name with what it means and what to do.
func (f *clusterFlags) explain(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, cluster.ErrRefused.Error()) && f.token != "":
		return fmt.Errorf("%s refused the connection: wrong --cluster-token (or STATED_CLUSTER_TOKEN), or the node runs another protocol version", f.addr)
	case strings.Contains(msg, cluster.ErrRefused.Error()):
		return fmt.Errorf("%s refused the connection: it needs the cluster's --cluster-token (or STATED_CLUSTER_TOKEN), or runs another protocol version", f.addr)
	case strings.Contains(msg, "connection refused"):
		return fmt.Errorf("no stated node listens at %s (connection refused): check --raft-addr", f.addr)
	}
	return err
}

// memberHealth is a member's HEALTH column: "ok" or a word or two on why
// it did not answer (the details follow the table).
func memberHealth(m *pb.Member) string {
	if m.GetHealthy() {
		return "ok"
	}
	e := m.GetError()
	switch {
	case strings.Contains(e, cluster.ErrRefused.Error()):
		return "REFUSED (token?)"
	case strings.Contains(e, "connection refused"):
		return "DOWN"
	case strings.Contains(e, "TLS") || strings.Contains(e, "certificate"):
		return "TLS FAILED"
	case strings.Contains(e, "DeadlineExceeded") || strings.Contains(e, "deadline exceeded") || strings.Contains(e, "i/o timeout"):
		return "NO ANSWER"
	case strings.Contains(e, "no route to host") || strings.Contains(e, "network is unreachable") || strings.Contains(e, "no such host"):
		return "UNREACHABLE"
	}
	return "ERROR"
}

// shortError strips gRPC's wrapping from a member's probe error.
func shortError(e string) string {
	for _, p := range []string{"rpc error: ", "code = Unavailable desc = ", "connection error: desc = ", "\"transport: Error while dialing: ", "transport: Error while dialing: "} {
		if i := strings.Index(e, p); i >= 0 {
			e = e[:i] + e[i+len(p):]
		}
	}
	return strings.TrimSuffix(strings.TrimSpace(e), "\"")
}

func newClusterCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Inspect and change the membership of a stated cluster",
		Long: `The cluster commands talk to one node of a cluster (--raft-addr) with the
cluster's credentials (--cluster-token and/or --cluster-tls-*, or their
STATED_* variables, as "stated serve" takes them). A node that does not lead
forwards join and leave to the leader.`,
	}
	cmd.AddCommand(newClusterStatusCmd(), newClusterJoinCmd(), newClusterLeaveCmd())
	return cmd
}

func init() { rootCmd.AddCommand(newClusterCmd()) }

func newClusterStatusCmd() *cobra.Command {
	var f clusterFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the leader, term, commit index and every member's health",
		Long: `Status asks one node for its view of the cluster, and that node asks every
member for its own indexes: a member that does not answer is shown unhealthy
with the reason. It exits non-zero when a member is unhealthy or no leader is
known.`,
		Args:    cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error { return flagsFromEnv(cmd.Flags()) },
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.call(cmd.Context(), func(ctx context.Context, c *cluster.Client) error {
				st, err := c.Status(ctx, &pb.StatusRequest{Probe: true})
				if err != nil {
					return fmt.Errorf("cluster status from %s: %w", f.addr, err)
				}
				return printClusterStatus(cmd.OutOrStdout(), st)
			})
		},
	}
	addClusterFlags(cmd.Flags(), &f)
	return cmd
}

// printClusterStatus prints st and says whether all is well.
func printClusterStatus(w io.Writer, st *pb.StatusResponse) error {
	leader := st.GetLeaderId()
	if leader == "" {
		leader = "(none known)"
	}
	fmt.Fprintf(w, "node %s (%s), leader %s %s, term %d, commit index %d, applied %d\n\n",
		st.GetNodeId(), st.GetState(), leader, st.GetLeaderAddr(), st.GetTerm(), st.GetCommitIndex(), st.GetAppliedIndex())
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tADDRESS\tROLE\tHEALTH\tCOMMIT\tAPPLIED")
	unhealthy := 0
	for _, m := range st.GetMembers() {
		role := m.GetSuffrage()
		if m.GetLeader() {
			role = "leader"
		}
		if !m.GetHealthy() {
			unhealthy++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\n", m.GetNodeId(), m.GetRaftAddr(), role, memberHealth(m), m.GetCommitIndex(), m.GetAppliedIndex())
	}
	_ = tw.Flush()
	if unhealthy > 0 {
		fmt.Fprintln(w)
		for _, m := range st.GetMembers() {
			if !m.GetHealthy() {
				fmt.Fprintf(w, "%s: %s\n", m.GetNodeId(), shortError(m.GetError()))
			}
		}
	}
	switch {
	case st.GetLeaderId() == "":
		return errors.New("no leader known: fewer than a quorum of the members may be up")
	case unhealthy > 0:
		return fmt.Errorf("%d of %d members unreachable", unhealthy, len(st.GetMembers()))
	}
	return nil
}

func newClusterJoinCmd() *cobra.Command {
	var f clusterFlags
	var id, addr string
	cmd := &cobra.Command{
		Use:   "join",
		Short: "Add a node (started with --raft-addr and no --raft-peers) as a voter",
		Args:  cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			return flagsFromEnv(cmd.Flags())
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if id == "" || addr == "" {
				return errors.New("join needs --new-node-id and --new-raft-addr: the id and raft address of the node to add")
			}
			return f.call(cmd.Context(), func(ctx context.Context, c *cluster.Client) error {
				if _, err := c.Join(ctx, &pb.JoinRequest{NodeId: id, RaftAddr: addr}); err != nil {
					return fmt.Errorf("cluster join %s through %s: %w", id, f.addr, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s (%s) joined\n", id, addr)
				return nil
			})
		},
	}
	addClusterFlags(cmd.Flags(), &f)
	cmd.Flags().StringVar(&id, "new-node-id", "", "the --node-id of the node to add")
	cmd.Flags().StringVar(&addr, "new-raft-addr", "", "the raft address of the node to add")
	return cmd
}

func newClusterLeaveCmd() *cobra.Command {
	var f clusterFlags
	var id string
	cmd := &cobra.Command{
		Use:   "leave",
		Short: "Remove a node from the cluster",
		Args:  cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			return flagsFromEnv(cmd.Flags())
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if id == "" {
				return errors.New("leave needs --leaving-node-id: the id of the node to remove")
			}
			return f.call(cmd.Context(), func(ctx context.Context, c *cluster.Client) error {
				if _, err := c.Leave(ctx, &pb.LeaveRequest{NodeId: id}); err != nil {
					return fmt.Errorf("cluster leave %s through %s: %w", id, f.addr, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s left\n", id)
				return nil
			})
		},
	}
	addClusterFlags(cmd.Flags(), &f)
	cmd.Flags().StringVar(&id, "leaving-node-id", "", "the --node-id of the node to remove")
	return cmd
}
