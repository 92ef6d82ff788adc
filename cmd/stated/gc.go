package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/internal/bytesize"
)

func newGCCmd() *cobra.Command {
	var store cliStore
	var dryRun bool
	var grace time.Duration
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Delete checkpoint files that nothing references",
		Long: `GC deletes every file under the checkpoint root that no retained checkpoint or
savepoint references and that is older than --grace, as the daemon's background
sweep does. With --dry-run it only lists what would go and the bytes.

It never deletes a file a manifest references, nor anything in a checkpoint or
savepoint directory that has a file younger than --grace (taken to be in
progress). It cannot see a running daemon's in-flight checkpoints, so --grace
must exceed the daemon's --checkpoint-timeout (it does by default).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			store.announce(cmd.ErrOrStderr())
			return runGC(cmd.Context(), cmd.OutOrStdout(), store, grace, dryRun, stderrProgress())
		},
	}
	storeFlags(cmd, &store)
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "list what would be deleted, delete nothing")
	cmd.Flags().DurationVar(&grace, "grace", catalog.DefaultGCGrace, "minimum age of a file before it is deleted")
	return cmd
}

func init() { rootCmd.AddCommand(newGCCmd()) }

func runGC(ctx context.Context, out io.Writer, store cliStore, grace time.Duration, dryRun bool, prog progressOpts) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if grace <= 0 {
		return fmt.Errorf("--grace %s must be positive", grace)
	}
	s, err := openCLIStore(ctx, store, !dryRun)
	if err != nil {
		return err
	}
	defer s.Close()
	logStore, err := openCLILogStore(ctx, store, !dryRun)
	if err != nil {
		return err
	}
	if logStore != nil {
		defer logStore.Close()
	}
	// This process knows no in-flight checkpoint, and no running daemon's
	// live changelog: the grace period alone protects a running daemon's
	// uploads and the segments its log still needs.
	// Count what is listed, read and deleted, to show how far it got.
	cs := &countingStore{Store: s}
	var cl *countingStore
	if logStore != nil {
		cl = &countingStore{Store: logStore}
	}
	stop := prog.start("gc", 0, func() (int64, string) {
		listed, read, deleted := cs.listed.Load(), cs.read.Load(), cs.deleted.Load()
		if cl != nil {
			listed, read, deleted = listed+cl.listed.Load(), read+cl.read.Load(), deleted+cl.deleted.Load()
		}
		return read, fmt.Sprintf("listed %d objects, read %s of manifests, deleted %d objects", listed, bytesize.Format(read), deleted)
	})
	defer stop()
	// An operator's sweep lists the whole store: the page bound is the
	// background sweep's.
	co := catalog.Options{Store: cs, GCGrace: grace, SweepMaxListPages: -1}
	if cl != nil {
		co.LogStore = cl
	}
	c, err := catalog.Open(ctx, co)
	if err != nil {
		return err
	}
	defer c.Close()
	rep, gcErr := c.GC(ctx, dryRun)
	stop()
	if rep == nil {
		return gcErr
	}
	verb := "deleted"
	if dryRun {
		verb = "would delete"
	}
	if len(rep.Orphans) > 0 {
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "OBJECT\tSIZE\tMODIFIED")
		for _, o := range rep.Orphans {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", o.Name, bytesize.Format(o.Size), o.ModTime.Local().Format(time.DateTime))
		}
		tw.Flush()
	}
	fmt.Fprintf(out, "%s %d unreferenced objects, %s (%d bytes); scanned %d objects\n",
		verb, len(rep.Orphans), bytesize.Format(rep.Bytes), rep.Bytes, rep.Scanned)
	if rep.Young > 0 {
		fmt.Fprintf(out, "kept %d unreferenced objects younger than %s (%s)\n", rep.Young, grace, bytesize.Format(rep.YoungBytes))
	}
	if rep.Unknown > 0 {
		fmt.Fprintf(out, "left %d objects outside the checkpoint layout alone\n", rep.Unknown)
	}
	for _, p := range c.Problems() {
		fmt.Fprintln(out, "problem:", p)
	}
	for _, p := range rep.Problems {
		fmt.Fprintln(out, "problem:", p)
	}
	return gcErr
}
