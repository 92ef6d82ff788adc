package openers_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/lsm"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/daemon/openers"
	"github.com/statedhq/stated/tiered/memstore"
)

// TestLSMRestoresShareDownloadCache: the lsm instances of a data dir share
// one restore-download cache under it, so a second restore of the same
// checkpoint takes its files from the cache; closing the Set removes it.
func TestLSMRestoresShareDownloadCache(t *testing.T) {
	ctx := context.Background()
	set, err := openers.New(openers.Config{})
	if err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	store := memstore.New()
	opts := backend.Options{Task: backend.TaskID{Job: "job", Operator: "op"}, KeyGroups: backend.KeyGroupRange{Start: 0, End: 127},
		MaxParallelism: 128, States: []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}}, Store: store}
	opts.EnsureDefaults()
	open := func(o backend.Options, n string) *lsm.Backend {
		t.Helper()
		b, err := set.Openers[backend.KindLSM](ctx, o, daemon.OpenEnv{Dir: filepath.Join(dataDir, daemon.InstancesDir, n), DataDir: dataDir})
		if err != nil {
			t.Fatal(err)
		}
		return b.(*lsm.Backend)
	}
	b := open(opts, "0")
	if err := b.Put("v", backend.Key{KeyGroup: 3, Key: []byte("k")}, []byte("x")); err != nil {
		t.Fatal(err)
	}
	snap, err := b.Snapshot(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	h, err := snap.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = b.Close()
	opts.Restore = []*backend.Handle{h}
	var fromCache []int
	for _, n := range []string{"1", "2"} {
		r := open(opts, n)
		if v, ok, err := r.Get("v", backend.Key{KeyGroup: 3, Key: []byte("k")}); err != nil || !ok || string(v) != "x" {
			t.Fatalf("restore %s: %q %v %v", n, v, ok, err)
		}
		fromCache = append(fromCache, r.RestoreStats().FilesFromCache)
		_ = r.Close()
	}
	if fromCache[0] != 0 || fromCache[1] == 0 {
		t.Fatalf("files from the cache: %v, want none then some", fromCache)
	}
	cacheDir := filepath.Join(dataDir, openers.LSMDownloadCacheDir)
	if _, err := os.Stat(cacheDir); err != nil {
		t.Fatal(err)
	}
	if err := set.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cacheDir); !os.IsNotExist(err) {
		t.Fatalf("after Close: %s: %v", cacheDir, err)
	}
}

// TestLSMRemote: with LSMRemote every lsm instance keeps its SSTs in its
// checkpoint store; a checkpoint lists them by reference and a restore
// references them in place.
func TestLSMRemote(t *testing.T) {
	ctx := context.Background()
	set, err := openers.New(openers.Config{LSMRemote: true, LSMRemoteCacheBytes: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	dataDir := t.TempDir()
	store := memstore.New()
	opts := backend.Options{Task: backend.TaskID{Job: "job", Operator: "op"}, KeyGroups: backend.KeyGroupRange{Start: 0, End: 127},
		MaxParallelism: 128, States: []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}}, Store: store}
	opts.EnsureDefaults()
	b, err := set.Openers[backend.KindLSM](ctx, opts, daemon.OpenEnv{Dir: filepath.Join(dataDir, "0"), DataDir: dataDir})
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
	h, err := snap.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = b.Close()
	if len(h.Files) == 0 || h.Files[0].Table == nil || h.Version != backend.HandleVersionRemote {
		t.Fatalf("handle of a remote-mode checkpoint: version %d, files %+v", h.Version, h.Files)
	}
	opts.Restore = []*backend.Handle{h}
	r, err := set.Openers[backend.KindLSM](ctx, opts, daemon.OpenEnv{Dir: filepath.Join(dataDir, "1"), DataDir: dataDir})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if v, ok, err := r.Get("v", backend.Key{KeyGroup: 3, Key: []byte("k")}); err != nil || !ok || string(v) != "x" {
		t.Fatalf("restored: %q %v %v", v, ok, err)
	}
	if st := r.(*lsm.Backend).RestoreStats(); st.FilesReferenced != len(h.Files) || st.FilesDownloaded != 0 {
		t.Fatalf("restore stats %+v", st)
	}
	if _, err := openers.New(openers.Config{LSMRemoteCacheBytes: -1}); err == nil {
		t.Fatal("a negative remote cache size was accepted")
	}
}
