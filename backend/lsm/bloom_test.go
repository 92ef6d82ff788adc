package lsm

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/statedhq/stated/backend"
)

// TestTablesHaveBloomFilters checks that every table of a store, local or
// remote, carries a bloom filter, and that a get of an absent key is
// answered by the filters without searching the tables.
func TestTablesHaveBloomFilters(t *testing.T) {
	for _, mode := range []string{"local", "remote"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t)
			var mod func(*backend.Options, *Options)
			if mode == "remote" {
				re, store := remoteEnv(t)
				e, mod = re, withRemote(store)
			}
			b := e.open(full(), func(o *backend.Options, lo *Options) {
				if mod != nil {
					mod(o, lo)
				}
				// Four flushes make four tables, which a compaction would merge.
				lo.DisableAutomaticCompactions = true
			})
			for round := range 4 {
				fill(t, b, full(), 500, fmt.Sprintf("r%d", round))
				must(t, b.db.Flush())
			}
			tables, err := b.db.SSTables(pebble.WithProperties())
			must(t, err)
			n := 0
			for _, level := range tables {
				for _, tbl := range level {
					n++
					if tbl.Properties == nil {
						t.Fatalf("table %v has no properties", tbl.FileNum)
					}
					if p := tbl.Properties.FilterPolicyName; p != "rocksdb.BuiltinBloomFilter" {
						t.Fatalf("table %v has filter policy %q", tbl.FileNum, p)
					}
				}
			}
			if n < 2 {
				t.Fatalf("%d tables, want several", n)
			}
			before := b.db.Metrics().Filter.Hits
			for i := range 200 {
				k := []byte(fmt.Sprintf("absent-%d", i))
				if _, found, err := b.Get("v", backend.Key{KeyGroup: i % 128, Key: k}); err != nil || found {
					t.Fatalf("get of absent key %q: found %v, err %v", k, found, err)
				}
			}
			if hits := b.db.Metrics().Filter.Hits - before; hits < 200 {
				t.Fatalf("the filters excluded a table %d times in 200 gets of absent keys over %d tables, want at least 200", hits, n)
			}
		})
	}
}
