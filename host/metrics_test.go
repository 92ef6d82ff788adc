package host

import (
	"context"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
	"github.com/statedhq/stated/tiered/metered"
	"github.com/statedhq/stated/tiered/storeurl"
)

// The metrics endpoint reports the checkpoint store's local cache (a read
// of an object written through it is a hit, of one only the remote has a
// miss) and the calls that reach the store below it.
func TestCacheAndStoreMetrics(t *testing.T) {
	ctx := context.Background()
	remote := t.TempDir()
	var meter *metered.Store
	s, err := storeurl.Open(ctx, "file://"+remote, storeurl.Options{CacheDir: t.TempDir(), CacheBytes: 1 << 20,
		Wrap: func(s tiered.Store) tiered.Store { meter = metered.New(s); return meter }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cs, _ := s.(cacheStats)
	if cs == nil {
		t.Fatal("a store opened with a cache dir has no cache stats")
	}
	if err := tiered.PutBytes(ctx, s, "j/shared/a", []byte("cached")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(remote, "j", "shared"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(remote, "j", "shared", "b"), []byte("remote only"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"j/shared/a", "j/shared/b"} {
		if _, err := tiered.ReadAll(ctx, s, name, 1<<10); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(newCollector(daemon.NewMetrics(), nil, cs, meter))
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "/" + l.GetValue()
			}
			got[name] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	if got["stated_cache_hits_total"] != 1 || got["stated_cache_misses_total"] != 1 || got["stated_cache_entries"] != 2 {
		t.Fatalf("cache metrics %v, want 1 hit, 1 miss, 2 entries", got)
	}
	// Below the cache: the put (written through), the miss's get, and the
	// bytes of both.
	if got["stated_store_calls_total/put"] != 1 || got["stated_store_calls_total/get"] != 1 ||
		got["stated_store_bytes_total/up"] != 6 || got["stated_store_bytes_total/down"] != 11 {
		t.Fatalf("store metrics %v, want 1 put of 6 bytes and 1 get of 11", got)
	}
	if plain, err := storeurl.Open(ctx, "file://"+t.TempDir(), storeurl.Options{}); err != nil {
		t.Fatal(err)
	} else if _, ok := plain.(cacheStats); ok {
		t.Fatal("a store without a cache reports cache stats")
	}
}

// A node in changelog mode reports the log's work under
// stated_changelog_*: changes appended, segments written, flush latency,
// and the log's own store's calls when it has one.
func TestChangelogMetrics(t *testing.T) {
	ctx := context.Background()
	logStore := memstore.New()
	n, err := Open(ctx, Options{DataDir: t.TempDir(), Store: memstore.New(), LogStore: logStore, NoSocket: true,
		Changelog: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	d := n.Daemon()
	task := backend.TaskID{Job: "j", Operator: "op", Subtask: 0}
	in, err := d.Open(ctx, daemon.OpenParams{Task: task, KeyGroups: backend.KeyGroupRange{Start: 0, End: 127}, Kind: backend.KindFile,
		States: []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}}})
	if err != nil {
		t.Fatal(err)
	}
	for id := uint64(1); id <= 2; id++ {
		for i := range 10 {
			if err := in.Backend.Put("v", backend.Key{KeyGroup: i, Key: []byte("k")}, []byte("value")); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := d.Snapshot(ctx, in, id, true); err != nil {
			t.Fatal(err)
		}
		if _, err := d.CompleteCheckpoint(ctx, "j", id, nil); err != nil {
			t.Fatal(err)
		}
	}
	mfs, err := n.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "/" + l.GetValue()
			}
			got[name] = m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	// 20 puts (the registration of the state is logged too).
	if got["stated_changelog_appended_records_total"] < 20 || got["stated_changelog_segments_written_total"] < 1 ||
		got["stated_changelog_flush_duration_seconds"] < 1 || got["stated_changelog_store_calls_total/put"] < 1 {
		t.Fatalf("changelog metrics after 20 logged puts and 2 checkpoints: %v", got)
	}
	if !in.Changelog() {
		t.Fatal("--changelog did not put the instance in changelog mode")
	}
}

// With the changelog on and the default store (a local directory), the
// changelog writer appends its segments into the directory's pack files
// (tiered.Appender): no segment is a file of its own, and every one reads
// back through the store.
func TestChangelogAppendsSegmentsInTheDefaultStore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	n, err := Open(ctx, Options{DataDir: dir, NoSocket: true, Changelog: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	d := n.Daemon()
	in, err := d.Open(ctx, daemon.OpenParams{Task: backend.TaskID{Job: "j", Operator: "op"}, KeyGroups: backend.KeyGroupRange{Start: 0, End: 127},
		Kind: backend.KindFile, States: []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}}})
	if err != nil {
		t.Fatal(err)
	}
	for id := uint64(1); id <= 3; id++ {
		if err := in.Backend.Put("v", backend.Key{KeyGroup: 1, Key: []byte("k")}, []byte("value")); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Snapshot(ctx, in, id, true); err != nil {
			t.Fatal(err)
		}
		if _, err := d.CompleteCheckpoint(ctx, "j", id, nil); err != nil {
			t.Fatal(err)
		}
	}
	m := n.ChangelogWriter().Metrics()
	if m.SegmentsWritten == 0 {
		t.Fatal("the writer over the default store wrote no segment")
	}
	var packs, segmentFiles int
	err = filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case e.IsDir():
		case filepath.Base(filepath.Dir(p)) == tiered.PackDir && strings.HasSuffix(p, ".pack"):
			packs++
		case strings.Contains(filepath.ToSlash(p), "/_changelog/"):
			segmentFiles++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if packs == 0 || segmentFiles != 0 {
		t.Fatalf("%d pack files and %d segment files in the data directory, want packs and no segment files", packs, segmentFiles)
	}
}
