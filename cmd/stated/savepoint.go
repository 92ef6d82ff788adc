package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/host"
	"github.com/statedhq/stated/internal/bytesize"
)

func newSavepointCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "savepoint",
		Short: "Trigger, list and delete savepoints",
		Long: `Savepoints are self-contained copies of a job's state that no job owns: a
restore from one never changes it, and it stays until it is deleted.

  trigger    asks a running daemon for a savepoint of a job (the API's TriggerSavepoint)
  list       lists the savepoints of the checkpoint store
  delete     deletes one from the checkpoint store
  edit       writes an edited copy of a savepoint or checkpoint as a new savepoint
  bootstrap  writes a new savepoint from JSON lines ("stated state export")

list, delete, edit and bootstrap read the store directly, as "stated checkpoints"
and "stated gc" do, and take the same --data-dir, --checkpoint-store and S3
flags.`,
	}
	cmd.AddCommand(newSavepointTriggerCmd(), newSavepointListCmd(), newSavepointDeleteCmd(),
		newSavepointEditCmd(), newSavepointBootstrapCmd())
	return cmd
}

func init() { rootCmd.AddCommand(newSavepointCmd()) }

// savepointTrigger are the flags of "stated savepoint trigger".
type savepointTrigger struct {
	addr, dataDir, token, format string
	checkpointID                 uint64
	timeout                      time.Duration
	tls                          clientTLSFlags
}

func newSavepointTriggerCmd() *cobra.Command {
	var f savepointTrigger
	var job string
	cmd := &cobra.Command{
		Use:   "trigger <job>",
		Short: "Ask a running daemon for a savepoint of a job",
		Long: `Trigger asks the daemon at --addr (default the Unix socket of --data-dir, as
"stated serve" places it) for a savepoint of every open instance of the job, and
prints its path: pass it to a restore (client.Restore{Savepoint: path}, or
RestoreSource.savepoint in the proto).

--format canonical (the default) writes backend-neutral files that restore into
any backend kind; native copies the backends' own files of a snapshot taken
with --checkpoint-id, an id the job has not used. In cluster mode only native
savepoints are taken, as a copy of the retained checkpoint --checkpoint-id
names (0: the latest).`,
		Args: cobra.ExactArgs(1),
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("data-dir") {
				if v := os.Getenv("STATED_DATA_DIR"); v != "" {
					f.dataDir = v
				}
			}
			if f.token == "" {
				f.token = os.Getenv("STATED_TOKEN")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			job = args[0]
			return runSavepointTrigger(cmd.Context(), cmd.OutOrStdout(), job, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.addr, "addr", "", "the daemon's Unix socket or host:port (default <data-dir>/"+host.SocketName+")")
	fl.StringVar(&f.dataDir, "data-dir", host.DefaultDataDir, "the daemon's data directory, where its socket is (env STATED_DATA_DIR)")
	fl.StringVar(&f.token, "token", "", "bearer token of a daemon on TCP (or STATED_TOKEN)")
	addClientTLSFlags(fl, &f.tls)
	fl.StringVar(&f.format, "format", "canonical", "canonical (restores into any backend kind) or native (the backends' own files)")
	fl.Uint64Var(&f.checkpointID, "checkpoint-id", 0, "native: the id of the snapshot taken for it, unused by the job; in cluster mode the retained checkpoint to copy (0: the latest)")
	fl.DurationVar(&f.timeout, "timeout", 10*time.Minute, "give up after this long")
	return cmd
}

func runSavepointTrigger(ctx context.Context, out io.Writer, job string, f savepointTrigger) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if err := catalog.ValidateJob(job); err != nil {
		return err
	}
	var native bool
	switch f.format {
	case "canonical":
	case "native":
		native = true
	default:
		return fmt.Errorf("--format %q is not canonical or native", f.format)
	}
	addr := f.addr
	if addr == "" {
		addr = filepath.Join(f.dataDir, host.SocketName)
	}
	tlsConf, err := f.tls.config()
	if err != nil {
		return err
	}
	c, err := client.Dial(addr, client.Options{Token: f.token, TLS: tlsConf})
	if err != nil {
		return err
	}
	defer c.Close()
	if f.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.timeout)
		defer cancel()
	}
	path, err := c.TriggerSavepoint(ctx, job, native, f.checkpointID)
	if err != nil {
		return fmt.Errorf("savepoint of job %s from the daemon at %s: %w", job, addr, err)
	}
	fmt.Fprintln(out, path)
	return nil
}

func newSavepointListCmd() *cobra.Command {
	var store cliStore
	var job string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the savepoints of the checkpoint store",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSavepointList(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), store, job)
		},
	}
	storeFlags(cmd, &store)
	cmd.Flags().StringVar(&job, "job", "", "show only the savepoints of this job")
	return cmd
}

func runSavepointList(ctx context.Context, out, errOut io.Writer, store cliStore, job string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	store.announce(errOut)
	c, closeAll, err := openCLICatalog(ctx, store, false)
	if err != nil {
		return err
	}
	defer closeAll()
	var sps []*catalog.Manifest
	for _, m := range c.Savepoints() {
		if job == "" || m.Job == job {
			sps = append(sps, m)
		}
	}
	if len(sps) == 0 {
		fmt.Fprintf(out, "no savepoints in %s\n", store.url)
	} else {
		printSavepoints(out, sps)
	}
	problems := 0
	for _, p := range c.Problems() {
		if p.What == "savepoint" {
			fmt.Fprintln(errOut, "problem:", p)
			problems++
		}
	}
	if problems > 0 {
		return fmt.Errorf("%d damaged savepoint(s) in %s (printed above)", problems, store.url)
	}
	return nil
}

// printSavepoints is the savepoint table of "stated savepoint list" and
// "stated checkpoints".
func printSavepoints(out io.Writer, sps []*catalog.Manifest) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tJOB\tCHECKPOINT\tFORMAT\tTAKEN\tSIZE")
	for _, m := range sps {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", m.SavepointID, m.Job, m.CheckpointID, m.Format,
			m.Completed.Local().Format(time.DateTime), bytesize.Format(m.FullSize))
	}
	tw.Flush()
}

func newSavepointDeleteCmd() *cobra.Command {
	var store cliStore
	cmd := &cobra.Command{
		Use:   "delete <id>",
		Short: "Delete a savepoint from the checkpoint store",
		Long: `Delete removes savepoint <id> ("<id>" or "savepoints/<id>", as "stated savepoint
list" shows it): its manifest first, so that it can no longer be restored, then
its files. Checkpoints are never touched: a savepoint shares no file with them.

The daemon's API has no delete call, so this writes the store directly, as
"stated gc" does. A daemon that is running keeps listing the savepoint until it
restarts, and a restore from it then fails naming the missing manifest: delete
only a savepoint no job is about to restore from.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			store.announce(cmd.ErrOrStderr())
			return runSavepointDelete(cmd.Context(), cmd.OutOrStdout(), store, args[0])
		},
	}
	storeFlags(cmd, &store)
	return cmd
}

func runSavepointDelete(ctx context.Context, out io.Writer, store cliStore, arg string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	id := strings.TrimPrefix(strings.Trim(arg, "/"), catalog.SavepointsDir+"/")
	if err := catalog.ValidateSavepointID(id); err != nil {
		return err
	}
	c, closeAll, err := openCLICatalog(ctx, store, true)
	if err != nil {
		return err
	}
	defer closeAll()
	if err := c.DeleteSavepoint(ctx, id); err != nil {
		if errors.Is(err, catalog.ErrNotFound) {
			return fmt.Errorf("no savepoint %s in %s: \"stated savepoint list\" lists them", id, store.url)
		}
		return err
	}
	fmt.Fprintf(out, "deleted savepoint %s\n", id)
	return nil
}
