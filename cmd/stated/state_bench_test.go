package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/host"
	"github.com/statedhq/stated/inspect"
	"github.com/statedhq/stated/tiered/localfs"
)

// BenchmarkStateExport measures "stated state export" of lsm state (a
// checkpoint of 4 subtasks of a value and a map state, 256-byte random
// values) to io.Discard, as JSON lines and as Parquet. The state is
// STATED_BENCH_EXPORT_MB MiB of values (default 64); MB/s is over the
// values' bytes. peak-rss-MiB is the process's peak, the daemon that
// wrote the state included: an upper bound of the export's.
func BenchmarkStateExport(b *testing.B) {
	mb := 64
	if v, err := strconv.Atoi(os.Getenv("STATED_BENCH_EXPORT_MB")); err == nil && v > 0 {
		mb = v
	}
	root, valueBytes := benchLSMState(b, mb)
	for _, format := range []string{"jsonl", "parquet"} {
		b.Run(format, func(b *testing.B) {
			ctx := context.Background()
			s, err := localfs.OpenWith(root, localfs.Options{ReadOnly: true})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			b.SetBytes(valueBytes)
			var n int64
			for b.Loop() {
				r, err := inspect.Open(ctx, inspect.Options{Store: s, Dir: "j/chk-1", TempDir: b.TempDir()})
				if err != nil {
					b.Fatal(err)
				}
				c := &counted{Reader: r, cs: &countingStore{Store: s}}
				if format == "parquet" {
					n, err = runStateExportParquet(ctx, io.Discard, c, inspect.MatchAll(), progressOpts{})
				} else {
					enc, _ := bytesEncoder("base64")
					n, err = runStateExport(ctx, io.Discard, c, inspect.MatchAll(), enc, progressOpts{})
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n), "entries")
			b.ReportMetric(peakRSSMiB(), "peak-rss-MiB")
		})
	}
}

// benchLSMState writes mb MiB of values into lsm instances through a
// daemon on a local store, checkpoints them as j/chk-1, and returns the
// store's root and the values' bytes.
func benchLSMState(b *testing.B, mb int) (string, int64) {
	b.Helper()
	ctx := context.Background()
	base := b.TempDir()
	root := filepath.Join(base, "checkpoints")
	n, err := host.Open(ctx, host.Options{DataDir: filepath.Join(base, "d"), CheckpointStore: "file://" + root,
		NoSocket: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	d := n.Daemon()
	states := []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}, {Name: "m", Kind: backend.KindMap}}
	rng := rand.New(rand.NewPCG(1, 2))
	val := make([]byte, 256)
	perTask := int64(mb) << 20 / 4
	var total int64
	var ins []*daemon.Instance
	for sub := 0; sub < 4; sub++ {
		in, err := d.Open(ctx, daemon.OpenParams{Task: backend.TaskID{Job: "j", Operator: "op", Subtask: sub},
			KeyGroups: backend.KeyGroupRangeForOperator(128, 4, sub), MaxParallelism: 128, Kind: backend.KindLSM, States: states})
		if err != nil {
			b.Fatal(err)
		}
		ins = append(ins, in)
		g := in.Backend.(backend.Grouper)
		var written int64
		for i := 0; written < perTask; {
			err := g.Group(func(w backend.GroupWriter) {
				for j := 0; j < 1000; j++ {
					for k := range val {
						val[k] = byte(rng.Uint32())
					}
					k := backend.Key{KeyGroup: in.KeyGroups.Start + i%in.KeyGroups.Len(), Key: fmt.Appendf(nil, "key-%d", i)}
					if i%2 == 0 {
						_ = w.Put("v", k, val)
					} else {
						_ = w.MapPut("m", k, []byte("field"), val)
					}
					i++
					written += int64(len(val))
				}
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		total += written
	}
	for _, in := range ins {
		if _, err := d.Snapshot(ctx, in, 1, false); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := d.CompleteCheckpoint(ctx, "j", 1, nil); err != nil {
		b.Fatal(err)
	}
	return root, total
}
