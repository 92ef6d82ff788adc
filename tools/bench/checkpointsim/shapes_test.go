package checkpointsim

import (
	"context"
	"io"
	"log/slog"
	"reflect"
	"testing"
	"time"
)

// TestShapes runs every mode with and without debloating under
// back-pressure and checks what the README's table shows.
func TestShapes(t *testing.T) {
	o := Options{Dir: t.TempDir(), Backend: "heap", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	rep, err := Run(context.Background(), o, nil)
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string]RunResult{}
	for _, r := range rep.Runs {
		if len(r.Checkpoints) != rep.Options.Checkpoints {
			t.Fatalf("%s: %d checkpoints, want %d", r.Name(), len(r.Checkpoints), rep.Options.Checkpoints)
		}
		runs[r.Name()] = r
		// Pair check: the daemon recorded what the tasks reported.
		for _, c := range r.Checkpoints {
			d := c.Daemon
			if d.Unaligned != c.Unaligned || d.AlignmentMs != c.AlignmentMs || d.StartDelayMs != c.StartDelayMs ||
				(c.InFlightBytes > 0) != (c.DaemonInFlightBytes > 0) {
				t.Errorf("%s checkpoint %d: the daemon recorded %+v and %d in-flight bytes; the simulator reported unaligned %v, alignment %.3f ms, start delay %.3f ms, %d in-flight bytes",
					r.Name(), c.ID, d, c.DaemonInFlightBytes, c.Unaligned, c.AlignmentMs, c.StartDelayMs, c.InFlightBytes)
			}
		}
	}
	timeout := float64(rep.Options.Timeout.Milliseconds())

	// Aligned: the duration grows with the backlog, and none is unaligned.
	al := runs["aligned"].Checkpoints
	first, last := al[0], al[len(al)-1]
	if last.DurationMs <= 3*first.DurationMs || last.BacklogRecords <= first.BacklogRecords {
		t.Errorf("aligned: first %.0f ms (backlog %d), last %.0f ms (backlog %d); want the last over 3x the first, with a larger backlog",
			first.DurationMs, first.BacklogRecords, last.DurationMs, last.BacklogRecords)
	}
	for _, c := range al {
		if c.Unaligned || c.InFlightBytes != 0 {
			t.Errorf("aligned checkpoint %d: unaligned %v, %d in-flight bytes", c.ID, c.Unaligned, c.InFlightBytes)
		}
	}

	// Unaligned: flat (the acknowledgement latency), with in-flight data
	// that grows with the backlog.
	un := runs["unaligned"].Checkpoints
	bound := float64(rep.Options.AckLatency.Milliseconds()) + 1
	for _, c := range un {
		if !c.Unaligned || c.DurationMs > bound || c.AlignmentMs != 0 {
			t.Errorf("unaligned checkpoint %d: unaligned %v, %.1f ms (alignment %.1f ms); want unaligned within %.0f ms",
				c.ID, c.Unaligned, c.DurationMs, c.AlignmentMs, bound)
		}
		if c.BacklogRecords > 0 && c.InFlightBytes == 0 {
			t.Errorf("unaligned checkpoint %d: backlog %d and no in-flight data persisted", c.ID, c.BacklogRecords)
		}
	}
	if un[len(un)-1].InFlightBytes <= un[0].InFlightBytes {
		t.Errorf("unaligned: in-flight bytes %d at the first, %d at the last; want growth with the backlog", un[0].InFlightBytes, un[len(un)-1].InFlightBytes)
	}

	// Timeout: aligned while a checkpoint's barriers reach every task
	// within the timeout, unaligned (after exactly the timeout) otherwise;
	// the runs agree with the aligned one up to the first switch.
	to := runs["aligned-timeout"].Checkpoints
	switched := false
	for i, c := range to {
		if c.Unaligned {
			switched = true
			if c.DurationMs != timeout+float64(rep.Options.AckLatency.Milliseconds()) || c.InFlightBytes == 0 {
				t.Errorf("aligned-timeout checkpoint %d switched: %.1f ms with %d in-flight bytes; want the timeout plus the ack latency, and in-flight data", c.ID, c.DurationMs, c.InFlightBytes)
			}
			continue
		}
		if c.StartDelayMs+c.AlignmentMs > timeout || c.InFlightBytes != 0 {
			t.Errorf("aligned-timeout checkpoint %d stayed aligned with start delay %.0f + alignment %.0f ms over the %.0f ms timeout", c.ID, c.StartDelayMs, c.AlignmentMs, timeout)
		}
		if !switched && (c.DurationMs != al[i].DurationMs || al[i].DurationMs > timeout) {
			t.Errorf("aligned-timeout checkpoint %d: %.1f ms, aligned run %.1f ms; want equal, under the timeout", c.ID, c.DurationMs, al[i].DurationMs)
		}
		if switched {
			t.Errorf("aligned-timeout checkpoint %d aligned again after a switch under growing back-pressure", c.ID)
		}
	}
	if !switched || to[0].Unaligned {
		t.Errorf("aligned-timeout: switched %v, first checkpoint unaligned %v; want aligned first, then switches", switched, to[0].Unaligned)
	}
	for i, c := range to {
		if c.Unaligned && al[i].DurationMs <= timeout && i > 0 && !to[i-1].Unaligned {
			t.Errorf("aligned-timeout checkpoint %d switched but the aligned run's took %.0f ms, under the timeout", c.ID, al[i].DurationMs)
		}
	}

	// Debloating: shorter aligned checkpoints, smaller unaligned ones.
	sum := func(cs []CheckpointStats, f func(CheckpointStats) float64) (s float64) {
		for _, c := range cs {
			s += f(c)
		}
		return s
	}
	dur := func(c CheckpointStats) float64 { return c.DurationMs }
	inflight := func(c CheckpointStats) float64 { return float64(c.InFlightBytes) }
	if d, n := sum(runs["aligned+debloat"].Checkpoints, dur), sum(al, dur); d >= n/2 {
		t.Errorf("aligned durations: %.0f ms in all with debloating, %.0f ms without; want under half", d, n)
	}
	if d, n := sum(runs["unaligned+debloat"].Checkpoints, inflight), sum(un, inflight); d >= n/2 {
		t.Errorf("unaligned in-flight bytes: %.0f with debloating, %.0f without; want under half", d, n)
	}
	dl := runs["aligned+debloat"].Checkpoints
	if dl[len(dl)-1].DurationMs >= last.DurationMs {
		t.Errorf("last aligned checkpoint: %.0f ms with debloating, %.0f ms without", dl[len(dl)-1].DurationMs, last.DurationMs)
	}
}

// TestDeterministic: the same options give the same simulated figures.
func TestDeterministic(t *testing.T) {
	o := Options{Dir: t.TempDir(), Backend: "heap", Checkpoints: 4, Modes: []Mode{ModeAlignedTimeout}, Debloat: []bool{true},
		Timeout: 500 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	var runs [2][]CheckpointStats
	for i := range runs {
		rep, err := Run(context.Background(), o, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range rep.Runs[0].Checkpoints {
			// Only the simulated figures: the daemon's times and sizes vary.
			c.SyncMs, c.AsyncMs, c.CheckpointedSize, c.FullSize, c.DaemonInFlightBytes = 0, 0, 0, 0, 0
			runs[i] = append(runs[i], c)
		}
	}
	if !reflect.DeepEqual(runs[0], runs[1]) {
		t.Fatalf("two runs differ:\n%+v\n%+v", runs[0], runs[1])
	}
	if len(runs[0]) != 4 {
		t.Fatalf("%d checkpoints", len(runs[0]))
	}
}
