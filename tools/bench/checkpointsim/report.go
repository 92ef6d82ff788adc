package checkpointsim

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/statedhq/stated/internal/bytesize"
)

// PrintTable writes one row per checkpoint of every run, with the columns
// of Flink's checkpoint history; in-flight is the records' bytes the tasks
// wrote as channel state, stored what the daemon stored for them (with
// its framing and checksums).
func PrintTable(w io.Writer, rep *Report) {
	o := rep.Options
	fmt.Fprintf(w, "simulated job: %d sources at %.0f records/s -> keyBy -> window (%d keys, %d-record windows, %s/record) -> sink (%s/record); %d buffers x %d records per channel side; interval %s, timeout %s; %s backend, %s daemon\n",
		o.Parallelism, o.SourceRate, o.Keys, o.Window, o.WindowCost, o.SinkCost, o.Buffers, o.RecordsPerBuffer, o.Interval, o.Timeout, o.Backend, map[bool]string{true: "embedded", false: "external"}[rep.Embedded])
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tid\ttrigger\tbacklog\tduration\tstart delay\talignment\tsync\tasync\tcheckpointed\tfull\tin-flight\tstored\tunaligned\t")
	for _, r := range rep.Runs {
		for _, c := range r.Checkpoints {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\t%s\t%.2fms\t%.2fms\t%s\t%s\t%s\t%s\t%v\t\n",
				r.Name(), c.ID, simMs(c.TriggerMs), c.BacklogRecords, simMs(c.DurationMs), simMs(c.StartDelayMs), simMs(c.AlignmentMs),
				c.SyncMs, c.AsyncMs, bytesize.Format(c.CheckpointedSize), bytesize.Format(c.FullSize), bytesize.Format(c.InFlightBytes),
				bytesize.Format(c.DaemonInFlightBytes), c.Unaligned)
		}
	}
	tw.Flush()
}

// PrintSummary writes one row per run: its first and last checkpoint's
// duration, the largest start delay, alignment and persisted in-flight
// data, and how many checkpoints were unaligned.
func PrintSummary(w io.Writer, rep *Report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run	checkpoints	unaligned	first duration	last duration	max start delay	max alignment	max in-flight	")
	for _, r := range rep.Runs {
		cs := r.Checkpoints
		if len(cs) == 0 {
			fmt.Fprintf(tw, "%s\t0\t\t\t\t\t\t\t\n", r.Name())
			continue
		}
		var un int
		var delay, align float64
		var inflight int64
		for _, c := range cs {
			if c.Unaligned {
				un++
			}
			delay, align, inflight = max(delay, c.StartDelayMs), max(align, c.AlignmentMs), max(inflight, c.InFlightBytes)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t\n", r.Name(), len(cs), un, simMs(cs[0].DurationMs), simMs(cs[len(cs)-1].DurationMs),
			simMs(delay), simMs(align), bytesize.Format(inflight))
	}
	tw.Flush()
}

// PrintExactlyOnce writes a row per exactly-once check.
func PrintExactlyOnce(w io.Writer, rs []*ExactlyOnceResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tkilled at\trestored from\tunaligned\tin-flight records\twindow parallelism\tresults\tdifferent\texactly once\t")
	for _, r := range rs {
		d := r.Differences()
		fmt.Fprintf(tw, "%s\t%s\t%d\t%v\t%d\t%d\t%d\t%d\t%v\t\n", r.Mode, simMs(r.KillAtMs), r.RestoredFrom, r.RestoredUnaligned,
			r.RestoredInFlight, r.RescaleTo, len(r.Reference), d, d == 0)
	}
	tw.Flush()
}

func simMs(v float64) string {
	return time.Duration(v * float64(time.Millisecond)).Round(time.Millisecond).String()
}

// WriteJSON writes rep to path.
func WriteJSON(path string, rep *Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fmt.Errorf("checkpointsim: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("checkpointsim: write %s: %w", path, err)
	}
	return nil
}
