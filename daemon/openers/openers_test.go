package openers_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/lsm"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/daemon/openers"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// valueOptions are the options, defaults applied, of one task with one
// value state over all of 128 key groups, checkpointing to store.
func valueOptions(store tiered.Store) backend.Options {
	opts := backend.Options{Task: backend.TaskID{Job: "job", Operator: "op"}, KeyGroups: backend.KeyGroupRange{Start: 0, End: 127},
		MaxParallelism: 128, States: []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}}, Store: store}
	opts.EnsureDefaults()
	return opts
}

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
	opts := valueOptions(store)
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
	opts := valueOptions(store)
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

// TestLSMModePerInstance: an instance's own choice (OpenEnv.LSM) wins
// over the daemon's --lsm-remote either way. A checkpoint restores in the
// mode that wrote it: an instance that does not choose follows it, one
// that chooses the other mode is refused, naming why.
func TestLSMModePerInstance(t *testing.T) {
	ctx := context.Background()
	for _, daemonRemote := range []bool{false, true} {
		set, err := openers.New(openers.Config{LSMRemote: daemonRemote, LSMRemoteCacheBytes: 4 << 20})
		if err != nil {
			t.Fatal(err)
		}
		dataDir := t.TempDir()
		store := memstore.New()
		opts := valueOptions(store)
		n := 0
		open := func(mode daemon.LSMMode, restore *backend.Handle) backend.Backend {
			t.Helper()
			o := opts
			if restore != nil {
				o.Restore = []*backend.Handle{restore}
			}
			n++
			b, err := set.Openers[backend.KindLSM](ctx, o, daemon.OpenEnv{Dir: filepath.Join(dataDir, fmt.Sprint(n)), DataDir: dataDir, LSM: mode})
			if err != nil {
				t.Fatalf("daemon remote %v, mode %d: %v", daemonRemote, mode, err)
			}
			return b
		}
		checkpoint := func(b backend.Backend, id uint64) *backend.Handle {
			t.Helper()
			snap, err := b.Snapshot(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			h, err := snap.Run(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return h
		}
		key := backend.Key{KeyGroup: 3, Key: []byte("k")}
		// The instance's choice against the daemon's.
		mode := daemon.LSMRemote
		if daemonRemote {
			mode = daemon.LSMLocal
		}
		b := open(mode, nil)
		if err := b.Put("v", key, []byte("x")); err != nil {
			t.Fatal(err)
		}
		h := checkpoint(b, 1)
		if remote := h.Version == backend.HandleVersionRemote; remote == daemonRemote {
			t.Fatalf("daemon remote %v, instance mode %d: handle version %d", daemonRemote, mode, h.Version)
		}
		_ = b.Close()
		// Restored in the other mode, and checkpointed there.
		other := daemon.LSMLocal
		if mode == daemon.LSMLocal {
			other = daemon.LSMRemote
		}
		// A checkpoint restores in the mode that wrote it: the other
		// mode, chosen, is refused; no choice follows the checkpoint.
		o := opts
		o.Restore = []*backend.Handle{h}
		_, err = set.Openers[backend.KindLSM](ctx, o, daemon.OpenEnv{Dir: filepath.Join(dataDir, "refused"), DataDir: dataDir, LSM: other})
		if !errors.Is(err, backend.ErrInvalidArgument) || !strings.Contains(err.Error(), "cannot restore this checkpoint") {
			t.Fatalf("a mode %d checkpoint restored in mode %d: %v", mode, other, err)
		}
		r := open(daemon.LSMDefault, h)
		if v, ok, err := r.Get("v", key); err != nil || !ok || string(v) != "x" {
			t.Fatalf("restored in mode %d from a mode %d checkpoint: %q %v %v", other, mode, v, ok, err)
		}
		if err := r.Put("v", key, []byte("y")); err != nil {
			t.Fatal(err)
		}
		h2 := checkpoint(r, 2)
		_ = r.Close()
		if h2.Version != h.Version {
			t.Fatalf("a restore without a choice changed the mode: handle version %d after %d", h2.Version, h.Version)
		}
		again := open(mode, h2)
		if v, ok, err := again.Get("v", key); err != nil || !ok || string(v) != "y" {
			t.Fatalf("restored from checkpoint 2: %q %v %v", v, ok, err)
		}
		_ = again.Close()
		set.Close()
	}
}
