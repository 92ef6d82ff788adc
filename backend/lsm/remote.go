package lsm

// Remote mode (Options.Remote): Pebble creates every SST in the checkpoint
// store from the start (docs/lsm-remote.md), and the local disk holds only
// Pebble's private files and a bounded cache of remote blocks. This is the
// first step of issue 16: the working state. Checkpoints by hand-off and
// restores by reference are not built yet, so Snapshot and BaseSnapshot
// decline, and Open refuses handles; canonical snapshots work unchanged.

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/remote"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/lsm/remotestore"
	"github.com/statedhq/stated/tiered"
)

// DefaultRemoteCacheBytes is RemoteOptions.CacheBytes's default.
const DefaultRemoteCacheBytes = 256 << 20

// remoteLocator is the one locator an instance uses. Pebble records it in
// its local REMOTE-OBJ-CATALOG only, and a local directory is never
// reopened, so it need not say which store it is.
const remoteLocator = remote.Locator("stated")

// RemoteOptions put an instance's SSTs in an object store.
type RemoteOptions struct {
	// Store holds the SSTs, under "<job>/shared/lsm/". Required. The
	// caller owns it and closes it after the instance.
	Store tiered.Store
	// CacheBytes bounds the local cache of remote blocks (Pebble's
	// secondary cache, in the instance's db directory). Default
	// DefaultRemoteCacheBytes; it must not be negative.
	CacheBytes int64
	// SpoolDir holds SSTs on their way to the store (see
	// remotestore.Options.SpoolDir). Default os.TempDir().
	SpoolDir string
}

func (r *RemoteOptions) ensureDefaults() {
	if r.CacheBytes == 0 {
		r.CacheBytes = DefaultRemoteCacheBytes
	}
}

func (r *RemoteOptions) validate(bad func(format string, args ...any)) {
	if r.Store == nil {
		bad("remote mode without a store (Options.Remote.Store)")
	}
	if r.CacheBytes < 0 {
		bad("remote cache size %d is negative", r.CacheBytes)
	}
}

// remoteState is an instance's remote storage.
type remoteState struct {
	storage *remotestore.Storage
	factory *remotestore.Factory
	// creator is this incarnation's Pebble creator ID: it names every
	// object and marker the DB writes. Random, because every Open is a new
	// DB (the WAL is off, nothing is reopened) and incarnations of all
	// instances of a job share the prefix: 64 random bits make a clash
	// improbable without a registry to draw from.
	creator uint64
}

// remoteSetup makes the instance's remote storage (nil in local mode).
func (b *Backend) remoteSetup() error {
	r := b.lo.Remote
	if r == nil {
		return nil
	}
	if len(b.opts.Restore) > 0 {
		return fmt.Errorf("lsm: open %s: %w: restoring into remote mode is not built yet (docs/lsm-remote.md)",
			b.opts.Task, backend.ErrIncompatible)
	}
	store := tiered.WithPrefix(r.Store, b.opts.Task.Job+"/shared/lsm")
	ro := remotestore.Options{Store: store, SpoolDir: r.SpoolDir}
	f, err := remotestore.NewFactory(map[remote.Locator]remotestore.Options{remoteLocator: ro})
	if err != nil {
		return fmt.Errorf("lsm: open %s: %w", b.opts.Task, err)
	}
	var id [8]byte
	for binary.LittleEndian.Uint64(id[:]) == 0 { // 0 means "unset" to Pebble
		if _, err := rand.Read(id[:]); err != nil {
			return fmt.Errorf("lsm: open %s: creator id: %w", b.opts.Task, err)
		}
	}
	b.remote = &remoteState{storage: f.Storage(remoteLocator), factory: f, creator: binary.LittleEndian.Uint64(id[:])}
	return nil
}

// remotePebbleOptions makes o create every SST in the store.
func (b *Backend) remotePebbleOptions(o *pebble.Options) {
	if b.remote == nil {
		return
	}
	o.Experimental.RemoteStorage = b.remote.factory
	o.Experimental.CreateOnShared = remote.CreateOnSharedAll
	o.Experimental.CreateOnSharedLocator = remoteLocator
	o.Experimental.SecondaryCacheSizeBytes = b.lo.Remote.CacheBytes
}

// remoteStart gives a newly opened DB its creator ID, before its first
// flush: Pebble cannot create a shared object without one.
func (b *Backend) remoteStart() error {
	if b.remote == nil {
		return nil
	}
	if err := b.db.SetCreatorID(b.remote.creator); err != nil {
		return fmt.Errorf("lsm: open %s: set pebble creator id: %w", b.opts.Task, err)
	}
	return nil
}

// remoteSnapshotDeclined is the answer of Snapshot and BaseSnapshot in
// remote mode: a Pebble checkpoint would hold no SST (they are in the
// store), and DB.Checkpoint protects them only while this DB is open.
func (b *Backend) remoteSnapshotDeclined(checkpointID uint64) error {
	if b.remote == nil {
		return nil
	}
	return fmt.Errorf("lsm: checkpoint %d of %s: %w: remote mode has no checkpoint hand-off yet (docs/lsm-remote.md)",
		checkpointID, b.opts.Task, backend.ErrDeclined)
}

// closeDB closes Pebble; in remote mode it then drops this incarnation's
// references to its objects, as Pebble's sharedUnref would for each: delete
// our markers, then the object when no marker of anyone is left. Nothing
// else holds them yet (no checkpoint hands them off), and without this
// every Close would leave the instance's SSTs in the store: Pebble keeps
// them for a reopen that stated never does.
//
// It lists the store after Close rather than asking Pebble before it, so
// that objects of a flush or compaction that finished during Close, and
// objects of aborted writes (no marker: remotestore's Caveats), are found
// too. Pebble names objects "<hash>-<creator>-<filenum>.sst" and markers
// "<object>.ref.<creator>.<filenum>" (objstorageprovider/remote_obj_name.go).
func (b *Backend) closeDB() error {
	if b.remote == nil {
		return b.db.Close()
	}
	err := b.db.Close()
	names, lerr := b.remote.storage.List("", "")
	if lerr != nil {
		return errors.Join(err, fmt.Errorf("lsm: close %s: %w", b.opts.Task, lerr))
	}
	creator := fmt.Sprint(b.remote.creator)
	ours := map[string]bool{}
	for _, n := range names {
		if obj, ref, ok := strings.Cut(n, ".ref."); ok {
			if strings.HasPrefix(ref, creator+".") {
				ours[obj] = true
			}
		} else if parts := strings.Split(strings.TrimSuffix(n, ".sst"), "-"); len(parts) == 3 && parts[1] == creator {
			ours[n] = true
		}
	}
	for _, obj := range slices.Sorted(maps.Keys(ours)) {
		err = errors.Join(err, b.remoteUnref(obj))
	}
	return err
}

// remoteUnref removes this incarnation's markers of name, then name itself
// if no marker of anyone is left.
func (b *Backend) remoteUnref(name string) error {
	s := b.remote.storage
	refs, err := s.List(name+".ref.", "")
	if err != nil {
		return fmt.Errorf("lsm: close %s: %w", b.opts.Task, err)
	}
	mine := fmt.Sprintf("%d.", b.remote.creator)
	left := 0
	for _, r := range refs {
		if !strings.HasPrefix(r, mine) {
			left++
			continue
		}
		if err := s.Delete(name + ".ref." + r); err != nil {
			return fmt.Errorf("lsm: close %s: %w", b.opts.Task, err)
		}
	}
	if left == 0 {
		if err := s.Delete(name); err != nil {
			return fmt.Errorf("lsm: close %s: %w", b.opts.Task, err)
		}
	}
	return nil
}
