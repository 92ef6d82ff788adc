package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/inspect"
	"github.com/statedhq/stated/internal/bytesize"
)

func newCheckpointsCmd() *cobra.Command {
	var store cliStore
	var job string
	var details checkpointDetails
	cmd := &cobra.Command{
		Use:   "checkpoints",
		Short: "Print the checkpoint history and the savepoints",
		Long: `Checkpoints prints, per job, the checkpoint history kept in the checkpoint store:
id, status, duration, checkpointed size (what the checkpoint uploaded), full size
(all its files; for tasks in changelog mode, the materialized bases), changelog
size (the log its changelog-mode tasks replay after their bases; "-" when none
or no longer retained), what the engine reported of how its tasks took it (type
aligned or unaligned; the slowest task's synchronous and asynchronous part,
alignment and start delay; the persisted in-flight bytes of unaligned ones; "-"
when the tasks reported nothing) and the reason of failed ones; then the savepoints. It reads the
store only, so it works while the daemon runs and after it stopped. Checkpoints
that were in flight when a daemon stopped are not listed (their files are
orphans that the sweep or "stated gc" removes). A checkpoint whose manifest is
damaged is marked DAMAGED with what is wrong, and the command then exits non-zero,
as it does for any other problem it finds (a damaged job file or savepoint).

--details also reads the state of each job's newest retained checkpoint, as
"stated state ls" does (offline, one task at a time, nothing changed), and prints
its entries and stored bytes per operator and state, and per operator how its
key groups share the bytes: how many hold entries, the hottest and how many
times the mean it holds, and the five largest. A damaged file fails the command
(data loss); a heap checkpoint, which cannot be read offline, is noted.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runCheckpoints(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), store, job, details)
		},
	}
	storeFlags(cmd, &store)
	cmd.Flags().StringVar(&job, "job", "", "show only this job")
	cmd.Flags().BoolVar(&details.on, "details", false,
		"also read the newest retained checkpoint of each job and print its entries and bytes per state, and its key groups' skew")
	cmd.Flags().StringVar(&details.tempDir, "temp-dir", "", "--details: where a task's state is restored while it is read (default the system's temporary directory)")
	return cmd
}

// checkpointDetails are the --details flags of "stated checkpoints".
type checkpointDetails struct {
	on      bool
	tempDir string
}

func init() { rootCmd.AddCommand(newCheckpointsCmd()) }

func runCheckpoints(ctx context.Context, out, errOut io.Writer, store cliStore, job string, details checkpointDetails) error {
	if ctx == nil {
		ctx = context.Background()
	}
	store.announce(errOut)
	c, closeAll, err := openCLICatalog(ctx, store, false)
	if err != nil {
		return err
	}
	defer closeAll()
	problems := 0
	for _, p := range c.Problems() {
		fmt.Fprintln(errOut, "problem:", p)
		if job == "" || p.Job == job {
			problems++
		}
	}
	// damaged are the listed checkpoints whose manifest is damaged.
	var damaged []string
	jobs := c.Jobs()
	if job != "" {
		if err := catalog.ValidateJob(job); err != nil {
			return err
		}
		if !slices.Contains(jobs, job) {
			return fmt.Errorf("job %s has no checkpoint history in %s", job, store.url)
		}
		jobs = []string{job}
	}
	now := time.Now()
	for i, j := range jobs {
		if i > 0 {
			fmt.Fprintln(out)
		}
		fmt.Fprintf(out, "job %s\n", j)
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tSTATUS\tDURATION\tCHECKPOINTED\tFULL\tCHANGELOG\tTYPE\tSYNC\tASYNC\tALIGNMENT\tSTART DELAY\tIN-FLIGHT\tREASON")
		for _, r := range c.List(j) {
			reason := r.Reason
			if r.Damaged != nil {
				damaged = append(damaged, catalog.CheckpointDir(j, r.ID))
				reason = r.Damaged.Error()
			}
			if r.WithoutChannelState {
				reason = strings.TrimPrefix(reason+"; restored without its channel state", "; ")
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, statusText(r), r.Duration(now).Round(time.Millisecond),
				bytesize.Format(r.CheckpointedSize), bytesize.Format(r.FullSize), changelogText(c, j, r), statsText(r.Stats), reason)
		}
		tw.Flush()
		if details.on {
			if err := printCheckpointDetails(ctx, out, c, store, j, details); err != nil {
				return err
			}
		}
	}
	var sps []*catalog.Manifest
	for _, m := range c.Savepoints() {
		if job == "" || m.Job == job {
			sps = append(sps, m)
		}
	}
	if len(sps) > 0 {
		fmt.Fprintln(out)
		fmt.Fprintln(out, "savepoints")
		printSavepoints(out, sps)
	}
	if len(jobs) == 0 && len(sps) == 0 && problems == 0 {
		fmt.Fprintf(out, "no checkpoints in %s\n", store.url)
	}
	// Damage fails the command, so that scripts and operators cannot miss
	// it: an engine restoring the latest checkpoint would be refused.
	switch {
	case len(damaged) > 0:
		return fmt.Errorf("%d damaged checkpoint(s) that cannot be restored: %s", len(damaged), strings.Join(damaged, ", "))
	case problems > 0:
		return fmt.Errorf("%d problem(s) found in %s (printed above)", problems, store.url)
	}
	return nil
}

// changelogText is the log bytes a retained checkpoint's changelog-mode
// tasks replay, "-" when it has none or is gone.
func changelogText(c *catalog.Catalog, job string, r catalog.Record) string {
	m, ok := c.Checkpoint(job, r.ID)
	if !ok || !r.Retained {
		return "-"
	}
	for _, h := range m.Tasks {
		if h.IsChangelog() {
			return bytesize.Format(m.ChangelogSize())
		}
	}
	return "-"
}

// statusText says whether a completed checkpoint can still be restored and
// who owns it.
func statusText(r catalog.Record) string {
	s := string(r.Status)
	if r.Damaged != nil {
		return s + " (DAMAGED: cannot be restored)"
	}
	if r.Status != catalog.StatusCompleted {
		return s
	}
	switch {
	case !r.Retained:
		return s + " (subsumed)"
	case r.Owner != "":
		return s + " (claimed by " + r.Owner + ")"
	case r.Pinned:
		return s + " (retained, pinned: restored without claim)"
	}
	return s + " (retained)"
}

// statsText is the TYPE, SYNC, ASYNC, ALIGNMENT, START DELAY and IN-FLIGHT
// columns: what the tasks reported of how they took the checkpoint ("-"
// when they reported nothing, as engines that do not report statistics).
func statsText(st catalog.CheckpointStats) string {
	if st == (catalog.CheckpointStats{}) {
		return "-\t-\t-\t-\t-\t-"
	}
	typ := "aligned"
	if st.Unaligned {
		typ = "unaligned"
	}
	us := func(v int64) string { return (time.Duration(v) * time.Microsecond).Round(time.Microsecond).String() }
	return strings.Join([]string{typ, us(st.SyncMicros), us(st.AsyncMicros), us(st.AlignmentMicros), us(st.StartDelayMicros),
		bytesize.Format(st.InFlightBytes)}, "\t")
}

// printCheckpointDetails reads the newest retained completed checkpoint of
// job and prints its state by size and its key groups' skew.
func printCheckpointDetails(ctx context.Context, out io.Writer, c *catalog.Catalog, store cliStore, job string, details checkpointDetails) error {
	recs := c.List(job)
	var id uint64
	for i := len(recs) - 1; i >= 0; i-- {
		if r := recs[i]; r.Retained && r.Status == catalog.StatusCompleted && r.Damaged == nil {
			id = r.ID
			break
		}
	}
	if id == 0 {
		fmt.Fprintf(out, "\nno retained checkpoint of job %s to read\n", job)
		return nil
	}
	s, err := openCLIStore(ctx, store, false)
	if err != nil {
		return err
	}
	defer s.Close()
	logStore, err := openCLILogStore(ctx, store, false)
	if err != nil {
		return err
	}
	if logStore != nil {
		defer logStore.Close()
	}
	r, err := inspect.Open(ctx, inspect.Options{Store: s, LogStore: logStore, Dir: catalog.CheckpointDir(job, id), TempDir: details.tempDir})
	if err != nil {
		return err
	}
	sum, err := r.Summarize(ctx, inspect.MatchAll())
	fmt.Fprintf(out, "\nstate of %s\n", r.What())
	if errors.Is(err, inspect.ErrUnsupported) {
		fmt.Fprintf(out, "not readable offline: %v\n", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("state of %s: %w", r.What(), err)
	}
	printStateSizes(out, sum)
	printSkew(out, sum, 5)
	return nil
}

// printStateSizes is the per-state table of "stated state ls" and
// "stated checkpoints --details".
func printStateSizes(out io.Writer, s *inspect.Summary) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "OPERATOR\tSTATE\tKIND\tENTRIES\tBYTES\tSHARE\t")
	for _, st := range s.States {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%.1f%%\t\n", st.Operator, st.State, st.Kind, st.Entries, bytesize.Format(st.Bytes),
			float64(st.Bytes)*100/float64(max(1, s.Total.Bytes)))
	}
	fmt.Fprintf(tw, "total\t\t\t%d\t%s\t\t\n", s.Total.Entries, bytesize.Format(s.Total.Bytes))
	tw.Flush()
}

// printSkew says per operator how its key groups share its bytes: how
// many hold entries, the hottest and its bytes over the mean of all the
// job's key groups, and the top largest.
func printSkew(out io.Writer, s *inspect.Summary, top int) {
	type opStat struct {
		groups []inspect.KeyGroupSummary
		bytes  int64
	}
	ops := map[string]*opStat{}
	var names []string
	for _, g := range s.KeyGroups {
		o := ops[g.Operator]
		if o == nil {
			o = &opStat{}
			ops[g.Operator] = o
			names = append(names, g.Operator)
		}
		o.groups = append(o.groups, g)
		o.bytes += g.Bytes
	}
	slices.Sort(names)
	for _, name := range names {
		o := ops[name]
		slices.SortStableFunc(o.groups, func(a, b inspect.KeyGroupSummary) int { return cmpInt64(b.Bytes, a.Bytes) })
		mean := float64(o.bytes) / float64(max(1, s.MaxParallelism))
		hot := o.groups[0]
		fmt.Fprintf(out, "key groups of operator %s: %d of %d hold entries; the hottest, %d, holds %s, %.1fx the mean (%s)\n",
			name, len(o.groups), s.MaxParallelism, hot.KeyGroup, bytesize.Format(hot.Bytes), float64(hot.Bytes)/max(mean, 1),
			bytesize.Format(int64(mean)))
		var parts []string
		for _, g := range o.groups[:min(top, len(o.groups))] {
			parts = append(parts, fmt.Sprintf("%d (%s, %d entries)", g.KeyGroup, bytesize.Format(g.Bytes), g.Entries))
		}
		fmt.Fprintf(out, "  largest: %s\n", strings.Join(parts, ", "))
	}
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
