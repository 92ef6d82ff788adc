package openers_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/daemon/openers"
	"github.com/statedhq/stated/tiered/memstore"
)

// recorder is a slog.Handler that keeps every record.
type recorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

// pebble returns the records with component=pebble.
func (r *recorder) pebble() []slog.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []slog.Record
	for _, rec := range r.recs {
		rec.Attrs(func(a slog.Attr) bool {
			if a.Key == "component" && a.Value.String() == "pebble" {
				out = append(out, rec)
				return false
			}
			return true
		})
	}
	return out
}

// TestPebbleLogsThroughSlog: with Config.Logger set, Pebble's own messages
// (here the informational lines of a flush, forced by a snapshot) arrive
// in the slog handler, at level debug.
func TestPebbleLogsThroughSlog(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	set, err := openers.New(openers.Config{Logger: slog.New(rec)})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	opts := backend.Options{Task: backend.TaskID{Job: "job", Operator: "op"}, KeyGroups: backend.KeyGroupRange{Start: 0, End: 127},
		MaxParallelism: 128, States: []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}}, Store: memstore.New()}
	opts.EnsureDefaults()
	dir := t.TempDir()
	b, err := set.Openers[backend.KindLSM](ctx, opts, daemon.OpenEnv{Dir: filepath.Join(dir, "i"), DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Put("v", backend.Key{KeyGroup: 3, Key: []byte("k")}, []byte("x")); err != nil {
		t.Fatal(err)
	}
	snap, err := b.Snapshot(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := snap.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	got := rec.pebble()
	if len(got) == 0 {
		t.Fatalf("no Pebble message reached the slog handler (%d records in all)", len(rec.recs))
	}
	for _, r := range got {
		if r.Level != slog.LevelDebug && r.Level != slog.LevelError {
			t.Errorf("Pebble message %q at level %s, want debug (Infof) or error", r.Message, r.Level)
		}
	}
}
