package memsnap

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered"
)

// BenchmarkSnapshot measures the synchronous part (tree clone), the
// asynchronous part (encode + store) and a restore of a value state with
// 100-byte values spread over 128 key groups (200k entries; 20k under
// -short).
func BenchmarkSnapshot(b *testing.B) {
	n := 200_000
	if testing.Short() {
		n = 20_000
	}
	w := newWorld()
	r := backend.KeyGroupRange{Start: 0, End: 127}
	cfg := w.config(r)
	cfg.Options.MaxParallelism = 128
	val := make([]byte, 100)
	for _, comp := range []string{"", "zstd"} {
		cfg.Compression = comp
		inst, err := Open(cfg)
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; i < n; i++ {
			binary.BigEndian.PutUint64(val, uint64(i)*0x9e3779b97f4a7c15)
			if err := inst.Put("v", backend.Key{KeyGroup: i % 128, Key: fmt.Appendf(nil, "key-%08d", i)}, val); err != nil {
				b.Fatal(err)
			}
		}
		raw := float64(inst.tree.Bytes())
		name := comp
		if name == "" {
			name = "none"
		}
		b.Run("sync/"+name, func(b *testing.B) {
			for b.Loop() {
				p, err := inst.Snapshot(context.Background(), 1)
				if err != nil {
					b.Fatal(err)
				}
				p.Release()
			}
		})
		var h *backend.Handle
		b.Run("run/"+name, func(b *testing.B) {
			b.SetBytes(int64(raw))
			for b.Loop() {
				p, err := inst.Snapshot(context.Background(), 1)
				if err != nil {
					b.Fatal(err)
				}
				if h, err = p.Run(context.Background()); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				_ = w.store.Delete(context.Background(), h.Files[0].Path)
				b.StartTimer()
			}
			b.ReportMetric(float64(h.FullSize)/raw, "size/raw")
		})
		p, err := inst.Snapshot(context.Background(), 2)
		if err != nil {
			b.Fatal(err)
		}
		if h, err = p.Run(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.Run("restore/"+name, func(b *testing.B) {
			b.SetBytes(int64(raw))
			rcfg := w.config(r, h)
			rcfg.Options.MaxParallelism = 128
			rcfg.RestoreSource = func(*backend.Handle) ([]tiered.Store, string) { return []tiered.Store{w.store}, "" }
			for b.Loop() {
				rb, err := Open(rcfg)
				if err != nil {
					b.Fatal(err)
				}
				rb.Close()
			}
		})
		inst.Close()
	}
}
