package host

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/lsm"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/daemon/openers"
	"github.com/statedhq/stated/tiered/memstore"
)

// The metrics endpoint reports the shared lsm block cache: reads of
// flushed keys miss it once and then hit it, and it holds their blocks.
// After the Set closes it reports zeros rather than read a freed cache.
func TestLSMBlockCacheMetrics(t *testing.T) {
	set, err := openers.New(openers.Config{LSMCacheSize: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	opts := backend.Options{Task: backend.TaskID{Job: "job", Operator: "op"}, KeyGroups: backend.KeyGroupRange{Start: 0, End: 127},
		MaxParallelism: 128, States: []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}}, Store: memstore.New()}
	opts.EnsureDefaults()
	b, err := set.Openers[backend.KindLSM](context.Background(), opts, daemon.OpenEnv{Dir: filepath.Join(dataDir, "0"), DataDir: dataDir})
	if err != nil {
		t.Fatal(err)
	}
	key := func(i int) backend.Key { return backend.Key{KeyGroup: i % 128, Key: fmt.Appendf(nil, "k%05d", i)} }
	const n = 2000
	for i := range n {
		if err := b.Put("v", key(i), make([]byte, 100)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.(*lsm.Backend).DB().Flush(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		for i := range n {
			if _, ok, err := b.Get("v", key(i)); err != nil || !ok {
				t.Fatalf("get %d: %v %v", i, ok, err)
			}
		}
	}
	gather := func() map[string]float64 {
		reg := prometheus.NewRegistry()
		reg.MustRegister(newLSMCacheCollector(set.LSMBlockCache))
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				got[mf.GetName()] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
		return got
	}
	got := gather()
	t.Logf("%v", got)
	if got["stated_lsm_block_cache_misses_total"] < 1 || got["stated_lsm_block_cache_hits_total"] < n ||
		got["stated_lsm_block_cache_bytes"] < 100*n/2 || got["stated_lsm_block_cache_blocks"] < 1 {
		t.Fatalf("block cache metrics %v: want misses, at least %d hits and the table's blocks held", got, n)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := set.Close(); err != nil {
		t.Fatal(err)
	}
	if got := gather(); got["stated_lsm_block_cache_bytes"] != 0 || got["stated_lsm_block_cache_hits_total"] != 0 {
		t.Fatalf("after Close the metrics are %v, want zeros", got)
	}
}
