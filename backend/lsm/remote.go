package lsm

// Remote mode (Options.Remote): Pebble creates every SST in the checkpoint
// store from the start (docs/lsm-remote.md), and the local disk holds only
// Pebble's private files and a bounded cache of remote blocks. This is the
// working state. Checkpoints hand the SSTs over to the catalog
// (remotesnap.go) and restores reference them in place (remoterestore.go);
// changelog bases are hand-offs too, held by the instance until a newer
// one is confirmed (remotebase.go); canonical snapshots work unchanged.

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/remote"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/lsm/remotestore"
	"github.com/statedhq/stated/refcount/markers"
	"github.com/statedhq/stated/tiered"
)

// Defaults of RemoteOptions.
const (
	DefaultRemoteCacheBytes = 256 << 20
	DefaultLeaseInterval    = time.Minute
)

// remoteLocator is the one locator an instance uses. Pebble records it in
// its local REMOTE-OBJ-CATALOG only, and a local directory is never
// reopened, so it need not say which store it is.
const remoteLocator = remote.Locator("stated")

// externalLocator names the restore store, where the objects a restore
// ingests by reference live; their object names are the handle's paths.
const externalLocator = remote.Locator("restore")

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
	// VerifyRestore makes a restore read every referenced table whole and
	// check all its block checksums before the instance serves anything:
	// damage then fails the restore instead of the first read that meets
	// it. It costs a full read of the state, which remote mode exists to
	// avoid; off by default. (Every restore checks that each object exists
	// with the size its handle says, by listing their prefixes.)
	VerifyRestore bool
	// LeaseInterval is how often the instance rewrites its lease
	// ("<job>/shared/lsm/_live.<creator>"), by which the catalog's sweep
	// tells a live instance's markers from a crashed one's: it must be well
	// below the catalog's grace period. Default DefaultLeaseInterval.
	LeaseInterval time.Duration
}

func (r *RemoteOptions) ensureDefaults() {
	if r.CacheBytes == 0 {
		r.CacheBytes = DefaultRemoteCacheBytes
	}
	if r.LeaseInterval == 0 {
		r.LeaseInterval = DefaultLeaseInterval
	}
}

func (r *RemoteOptions) validate(bad func(format string, args ...any)) {
	if r.Store == nil {
		bad("remote mode without a store (Options.Remote.Store)")
	}
	if r.CacheBytes < 0 {
		bad("remote cache size %d is negative", r.CacheBytes)
	}
	if r.LeaseInterval < 0 {
		bad("remote lease interval %s is negative", r.LeaseInterval)
	}
}

// remoteMode is the mode of an instance with Options.Remote: its remote
// storage and what it holds there.
type remoteMode struct {
	b       *Backend
	storage *remotestore.Storage
	factory *remotestore.Factory
	// creator is this incarnation's Pebble creator ID: it names every
	// object and marker the DB writes. Random, because every Open is a new
	// DB (the WAL is off, nothing is reopened) and incarnations of all
	// instances of a job share the prefix: 64 random bits make a clash
	// improbable without a registry to draw from.
	creator uint64
	// prefix is "<job>/shared/lsm/", where the instance's objects live.
	prefix string
	// unclaimed: the instance ingested objects it may not keep
	// referencing (no-claim restore, or one from another store); its
	// first checkpoint rewrites them into its own.
	unclaimed bool
	// externals are the objects the instance holds with its own marker
	// (a claimed restore ingested them); Close removes those markers.
	externals []string
	// retries counts hand-off attempts that found an SST leaving.
	retries atomic.Int64

	// holds are a claimed restore's holds not yet removed (remotehold.go);
	// holdMu orders their writes, refreshes and removal.
	holdMu sync.Mutex
	holds  []string
	// stopBackground stops what a restore left to the background
	// (remotehold.go; nil without a restore): checked is closed when its
	// check of the restored objects is done, damage is what it found, and
	// marked is set once a claim's instance markers are all written.
	stopBackground func()
	checked        chan struct{}
	damage         atomic.Pointer[error]
	marked         atomic.Bool

	mu    sync.Mutex
	sizes map[string]int64 // object path -> size (objects never change)
	// bases are the changelog bases the instance holds with its base
	// markers: base number -> object paths (remotebase.go).
	bases map[uint64][]string
	// releasing counts base releases running in the background; Close
	// sets basesClosed (no new one starts) and waits for them.
	releasing   sync.WaitGroup
	basesClosed bool

	stopLease func()
	putLease  func(ctx context.Context) error
}

var _ mode = (*remoteMode)(nil)

func (r *remoteMode) sizeOf(path string) (int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n, ok := r.sizes[path]
	return n, ok
}

func (r *remoteMode) setSize(path string, n int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sizes[path] = n
}

func (r *remoteMode) handOffRetries() int64 { return r.retries.Load() }

// newRemoteMode makes the remote storage of b (b.lo.Remote set) and
// writes its lease. On failure it returns a nil mode: nothing is held.
func newRemoteMode(b *Backend) (mode, error) {
	ro := b.lo.Remote
	r := &remoteMode{b: b, prefix: markers.JobPrefix(b.opts.Task.Job), sizes: map[string]int64{}, bases: map[uint64][]string{}}
	store := tiered.WithPrefix(ro.Store, strings.TrimSuffix(r.prefix, "/"))
	// Restored objects' sizes are known (the restore checked them by
	// listing): Pebble's open of each then makes no request.
	f, err := remotestore.NewFactory(map[remote.Locator]remotestore.Options{
		remoteLocator:   {Store: store, SpoolDir: ro.SpoolDir},
		externalLocator: {Store: b.opts.RestoreStore, SpoolDir: ro.SpoolDir, KnownSize: r.sizeOf}})
	if err != nil {
		return nil, fmt.Errorf("lsm: open %s: %w", b.opts.Task, err)
	}
	r.factory, r.storage = f, f.Storage(remoteLocator)
	var id [8]byte
	for binary.LittleEndian.Uint64(id[:]) == 0 { // 0 means "unset" to Pebble
		if _, err := rand.Read(id[:]); err != nil {
			return nil, fmt.Errorf("lsm: open %s: creator id: %w", b.opts.Task, err)
		}
	}
	r.creator = binary.LittleEndian.Uint64(id[:])
	if err := r.startLease(); err != nil {
		return nil, err
	}
	return r, nil
}

// startLease writes the instance's lease before the DB writes any marker,
// and keeps it fresh until Close.
func (r *remoteMode) startLease() error {
	b := r.b
	name := markers.LeaseName(r.prefix, r.creator)
	put := func(ctx context.Context) error {
		if err := tiered.PutBytes(ctx, b.lo.Remote.Store, name, nil); err != nil {
			return err
		}
		return r.refreshHolds(ctx)
	}
	if err := put(context.Background()); err != nil {
		return fmt.Errorf("lsm: open %s: write lease %s: %w", b.opts.Task, name, err)
	}
	r.putLease = put
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(b.lo.Remote.LeaseInterval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if err := put(ctx); err != nil && ctx.Err() == nil {
					b.lo.Logger.Errorf("lsm: %s: refresh lease %s: %v", b.opts.Task, name, err)
				}
			}
		}
	}()
	r.stopLease = func() { cancel(); <-done }
	return nil
}

// pebbleOptions makes o create every SST in the store.
func (r *remoteMode) pebbleOptions(o *pebble.Options) {
	o.Experimental.RemoteStorage = r.factory
	o.Experimental.CreateOnShared = remote.CreateOnSharedAll
	o.Experimental.CreateOnSharedLocator = remoteLocator
	o.Experimental.SecondaryCacheSizeBytes = r.b.lo.Remote.CacheBytes
	// Every level has bloom filters (Backend.pebbleOptions), which matters
	// most here: without them a get reads an index and a data block of
	// every level-0 table and of a table per level, each a store request
	// on a cold cache.
}

// start gives a newly opened DB its creator ID, before its first
// flush: Pebble cannot create a shared object without one.
func (r *remoteMode) start() error {
	b := r.b
	if err := b.db.SetCreatorID(r.creator); err != nil {
		return fmt.Errorf("lsm: open %s: set pebble creator id: %w", b.opts.Task, err)
	}
	return nil
}

// close closes Pebble, then drops this incarnation's
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
func (r *remoteMode) close() error {
	b := r.b
	var err error
	if b.db != nil {
		err = b.db.Close()
	}
	names, lerr := r.storage.List("", "")
	if lerr != nil {
		return errors.Join(err, fmt.Errorf("lsm: close %s: %w", b.opts.Task, lerr))
	}
	creator := fmt.Sprint(r.creator)
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
		err = errors.Join(err, r.unref(obj))
	}
	ctx := context.Background()
	err = errors.Join(err, r.releaseAllBases(ctx))
	if r.stopBackground != nil {
		r.stopBackground()
	}
	for _, obj := range r.externals {
		_, uerr := markers.UnrefNamed(ctx, b.opts.RestoreStore, obj, markers.InstanceMarker(obj, r.creator))
		err = errors.Join(err, uerr)
	}
	// The holds go after the instance markers: until the markers are
	// written they are what holds the restored objects.
	if herr := r.dropHolds(ctx); herr != nil {
		err = errors.Join(err, fmt.Errorf("lsm: close %s: %w", b.opts.Task, herr))
	}
	// The lease goes last: until then the sweep must take our markers
	// for a live holder's.
	r.stopLease()
	if derr := b.lo.Remote.Store.Delete(ctx, markers.LeaseName(r.prefix, r.creator)); derr != nil {
		err = errors.Join(err, fmt.Errorf("lsm: close %s: remove lease: %w", b.opts.Task, derr))
	}
	return err
}

// unref removes this incarnation's markers of name, then name itself
// if no marker of anyone is left.
func (r *remoteMode) unref(name string) error {
	b := r.b
	s := r.storage
	refs, err := s.List(name+".ref.", "")
	if err != nil {
		return fmt.Errorf("lsm: close %s: %w", b.opts.Task, err)
	}
	mine := fmt.Sprintf("%d.", r.creator)
	left := 0
	for _, ref := range refs {
		if !strings.HasPrefix(ref, mine) {
			left++
			continue
		}
		if err := s.Delete(name + ".ref." + ref); err != nil {
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

func (r *remoteMode) refreshLease(ctx context.Context) error { return r.putLease(ctx) }

// abandon stops the lease and the restore's background work, releasing
// nothing (Abandon).
func (r *remoteMode) abandon() {
	r.stopLease()
	if r.stopBackground != nil {
		r.stopBackground()
	}
}

// RestoreModes reports which modes wrote the lsm handles of hs: remote
// (files that reference SSTs in the store) and local (lsm files without
// a table reference). An instance restores a remote-mode checkpoint only
// in remote mode, and a local one only in local mode; handles of the
// heap and file backends (and canonical savepoints) restore in either.
func RestoreModes(hs []*backend.Handle) (remote, local bool) {
	for _, h := range hs {
		if h.Backend != backend.KindLSM {
			continue
		}
		for _, f := range h.Files {
			if f.Table != nil {
				remote = true
			} else {
				local = true
			}
		}
	}
	return remote, local
}

// load is Load in remote mode: SSTs are created in the store by Pebble
// alone, so each Add is written as a batch.
func (r *remoteMode) load() (backend.LoadSession, error) {
	return r.b.State.GroupLoad(&r.b.load), nil
}
