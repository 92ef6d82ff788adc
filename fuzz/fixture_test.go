package fuzz

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/chanstate"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/daemon/openers"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/localfs"
	"github.com/statedhq/stated/tiered/memstore"
)

var (
	quiet = slog.New(slog.DiscardHandler)
	// epoch is the catalog's clock: manifests and job files hold no time
	// of the run that wrote them.
	epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
)

func fixedClock() time.Time { return epoch }

// heapPrefix marks, in a fixture's object map, the objects of the heap
// snapshot store (the daemon's memory) rather than the checkpoint root.
const heapPrefix = "heap:"

// fixture is a set of real checkpoints and savepoints of one backend kind,
// written through the daemon from the model: checkpoints 1 and 2 of job
// "j" (two subtasks of operator "op"), a native savepoint (taken after 2)
// and a canonical one (of checkpoint 2). Both savepoints and checkpoint 2
// hold modelAt(2), checkpoint 1 holds modelAt(1). With channels, the
// checkpoints are unaligned: each task wrote channelsAt(id, subtask)
// through the daemon before its snapshot (savepoints are aligned).
type fixture struct {
	kind     backend.Kind
	channels bool
	// objects are every stored object by name (heap snapshot store
	// objects under heapPrefix), as written.
	objects map[string][]byte
	// native and canonical are the savepoint ids.
	native, canonical string
}

// names returns the fixture's object names in an order that does not
// depend on the random parts of object names, so that a fuzz input picks
// the same objects in every process: by the name without its random hex
// runs, then by content (which the model fixes).
func (f *fixture) names() []string {
	out := make([]string, 0, len(f.objects))
	key := map[string]string{}
	for n, b := range f.objects {
		out = append(out, n)
		sum := sha256.Sum256(b)
		key[n] = randomHex.ReplaceAllString(n, "*") + "\x00" + hex.EncodeToString(sum[:8])
	}
	sort.Slice(out, func(i, j int) bool { return key[out[i]] < key[out[j]] })
	return out
}

// randomHex matches the random parts of object names (unique suffixes of
// snapshot files and SSTs, savepoint ids).
var randomHex = regexp.MustCompile(`[0-9a-f]{8,}`)

// clone copies the object map, so that a mutation never changes f.
func (f *fixture) clone() map[string][]byte {
	out := make(map[string][]byte, len(f.objects))
	for n, b := range f.objects {
		out[n] = append([]byte(nil), b...)
	}
	return out
}

// fixtureChannelObjectBytes cuts a checkpoint's channel state (about
// 1 KiB) into two objects, so that a channel's segments may lie in
// either and damage to one object leaves the other's readers intact.
const fixtureChannelObjectBytes = 700

// env is one daemon over a checkpoint root in a local directory.
type env struct {
	dir   string
	store tiered.Store
	heap  *memstore.Store
	cat   *catalog.Catalog
	set   *openers.Set
	d     *daemon.Daemon
}

// openEnv opens a catalog and a daemon over the objects (nil: none), as
// "stated serve" does after a restart on the same checkpoint root.
func openEnv(ctx context.Context, dir string, objects map[string][]byte) (*env, error) {
	e := &env{dir: dir, heap: memstore.New()}
	s, err := localfs.Open(filepath.Join(dir, "root"))
	if err != nil {
		return nil, err
	}
	e.store = s
	for name, b := range objects {
		st := e.store
		if n, ok := strings.CutPrefix(name, heapPrefix); ok {
			st, name = e.heap, n
		}
		if err := tiered.PutBytes(ctx, st, name, b); err != nil {
			return nil, fmt.Errorf("fixture: write %s: %w", name, err)
		}
	}
	e.cat, err = catalog.Open(ctx, catalog.Options{Store: e.store, HeapStore: e.heap, Clock: fixedClock, Logger: quiet, Retain: 3})
	if err != nil {
		return nil, err
	}
	e.set, err = openers.New(openers.Config{HeapSnapshots: e.heap, LSMCacheSize: 8 << 20, LSMDownloadCacheSize: -1, Logger: quiet})
	if err != nil {
		e.cat.Close()
		return nil, err
	}
	e.d, err = daemon.New(daemon.Config{DataDir: filepath.Join(dir, "data"), Store: e.store, Catalog: e.cat,
		HeapSnapshots: e.heap, Openers: e.set.Openers, Logger: quiet, IdleInstanceTimeout: -1,
		ChannelStateObjectBytes: fixtureChannelObjectBytes})
	if err != nil {
		e.set.Close()
		e.cat.Close()
		return nil, err
	}
	return e, nil
}

func (e *env) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = e.d.Shutdown(ctx)
	_ = e.set.Close()
	_ = e.cat.Close()
}

// objects reads back every object of the env's stores.
func (e *env) objects(ctx context.Context) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, st := range []struct {
		s      tiered.Store
		prefix string
	}{{e.store, ""}, {e.heap, heapPrefix}} {
		err := tiered.Walk(ctx, st.s, "", func(o tiered.ObjectInfo) error {
			b, err := tiered.ReadAll(ctx, st.s, o.Name, 0)
			out[st.prefix+o.Name] = b
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// scratchRoot is where fixtures and restores write: a memory file system
// when there is one (restores fsync, which a fuzz target must not wait
// for), else the temporary directory.
func scratchRoot() string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if f, err := os.CreateTemp("/dev/shm", "stated-fuzz-probe-"); err == nil {
			f.Close()
			os.Remove(f.Name())
			return "/dev/shm"
		}
	}
	return os.TempDir()
}

// scratchDir makes a directory under scratchRoot, removed when tb ends.
func scratchDir(tb testing.TB) string {
	tb.Helper()
	dir, err := os.MkdirTemp(scratchRoot(), "stated-fuzz-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func task(sub int) backend.TaskID { return backend.TaskID{Job: job, Operator: opName, Subtask: sub} }

// buildFixture writes the fixture of kind through a daemon in a temporary
// local directory, with channel state (unaligned checkpoints) or without.
func buildFixture(kind backend.Kind, channels bool) (*fixture, error) {
	ctx := context.Background()
	dir, err := os.MkdirTemp(scratchRoot(), "stated-fuzz-build-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	e, err := openEnv(ctx, dir, nil)
	if err != nil {
		return nil, err
	}
	defer e.close()
	var ins []*daemon.Instance
	for sub := range oldPar {
		in, err := e.d.Open(ctx, daemon.OpenParams{Task: task(sub), MaxParallelism: maxPar, Parallelism: oldPar,
			KeyGroups: backend.KeyGroupRangeForOperator(maxPar, oldPar, sub), Kind: kind, States: states})
		if err != nil {
			return nil, err
		}
		ins = append(ins, in)
	}
	for ckpt := 1; ckpt <= 2; ckpt++ {
		for _, in := range ins {
			if err := applyTo(in.Backend, ckpt, in.KeyGroups); err != nil {
				return nil, err
			}
			if err := setOperatorState(in, in.Task.Subtask, ckpt); err != nil {
				return nil, err
			}
		}
		for piece := range 2 {
			for _, in := range ins {
				if !channels {
					break
				}
				if err := writeChannels(ctx, e.d, in, ckpt, piece); err != nil {
					return nil, err
				}
			}
		}
		for _, in := range ins {
			// With channel state, the shared object is sealed once every
			// task snapshotted: waiting here would wait for the linger.
			o := daemon.SnapshotOptions{Wait: !channels}
			if channels {
				o.Stats = snapshotStats
			}
			if _, err := e.d.SnapshotWith(ctx, in, uint64(ckpt), o); err != nil {
				return nil, err
			}
		}
		if _, err := e.d.CompleteCheckpoint(ctx, job, uint64(ckpt), nil); err != nil {
			return nil, err
		}
	}
	f := &fixture{kind: kind, channels: channels}
	sp, err := e.d.TriggerSavepoint(ctx, job, true, 3)
	if err != nil {
		return nil, fmt.Errorf("native savepoint: %w", err)
	}
	f.native = strings.TrimPrefix(sp.Dir, catalog.SavepointsDir+"/")
	sp, err = e.d.TriggerSavepoint(ctx, job, false, 0)
	if err != nil {
		return nil, fmt.Errorf("canonical savepoint: %w", err)
	}
	f.canonical = strings.TrimPrefix(sp.Dir, catalog.SavepointsDir+"/")
	for _, in := range ins {
		if err := e.d.CloseInstance(in.ID, job); err != nil {
			return nil, err
		}
	}
	if f.objects, err = e.objects(ctx); err != nil {
		return nil, err
	}
	return f, nil
}

var fixtures struct {
	mu   sync.Mutex
	byKd map[backend.Kind]*fixture
}

// fixtureOf builds the fixture of kind, with channel state, once per
// process.
func fixtureOf(tb testing.TB, kind backend.Kind) *fixture {
	tb.Helper()
	fixtures.mu.Lock()
	defer fixtures.mu.Unlock()
	if f := fixtures.byKd[kind]; f != nil {
		return f
	}
	f, err := buildFixture(kind, true)
	if err != nil {
		tb.Fatalf("build the %s fixture: %v", kind, err)
	}
	if fixtures.byKd == nil {
		fixtures.byKd = map[backend.Kind]*fixture{}
	}
	fixtures.byKd[kind] = f
	return f
}

// source is what a restore restores from, and how.
type source struct {
	// ckpt is 1 or 2, or 0 for the latest checkpoint; savepoint, when set,
	// is "native" or "canonical".
	ckpt      int
	savepoint string
	// parallelism and subtask of the restoring instance (maxPar key
	// groups): 1 and 3 rescale.
	parallelism, subtask int
	// into is the backend kind restored into (a canonical savepoint
	// restores into any kind).
	into backend.Kind
	// latestIs is the checkpoint that is the latest (0: 2). A deleted
	// (not damaged) manifest reads as a checkpoint retention removed.
	latestIs int
	// skipChannels restores a checkpoint without its channel state
	// (RestoreSpec.WithoutChannelState), as after a DataLoss.
	skipChannels bool
}

func (s source) String() string {
	from := fmt.Sprintf("checkpoint %d", s.ckpt)
	switch {
	case s.savepoint != "":
		from = s.savepoint + " savepoint"
	case s.ckpt == 0:
		from = "latest checkpoint"
	}
	if s.skipChannels {
		from += " without channel state"
	}
	return fmt.Sprintf("%s into %s subtask %d/%d", from, s.into, s.subtask, s.parallelism)
}

// errMismatch marks a restore that succeeded with state other than the
// model's: never acceptable.
var errMismatch = errors.New("restored state differs from the model")

// wantCheckpoint is the checkpoint src restores (0 for a savepoint).
func (s source) wantCheckpoint() int {
	switch {
	case s.savepoint != "":
		return 0
	case s.ckpt != 0:
		return s.ckpt
	case s.latestIs != 0:
		return s.latestIs
	}
	return 2
}

// restore writes objects into a fresh local directory under root, opens
// a catalog and a daemon over it, and opens the instance of src through
// the daemon's restore path. It returns the restore's error, or an error
// wrapping errMismatch when the restored state (keyed, operator or
// channel state) is not the model's. A rescale of channel state that must
// be refused (wantChannels) and is refused as ErrIncompatible and
// chanstate.ErrNotRedistributable returns nil.
func restore(ctx context.Context, root string, f *fixture, objects map[string][]byte, src source) (err error) {
	dir, err := os.MkdirTemp(root, "restore-")
	if err != nil {
		return fmt.Errorf("fixture: %w", err)
	}
	defer os.RemoveAll(dir)
	e, err := openEnv(ctx, dir, objects)
	if err != nil {
		return err
	}
	defer e.close()
	spec := &daemon.RestoreSpec{CheckpointID: uint64(src.ckpt), Latest: src.ckpt == 0}
	switch src.savepoint {
	case "native":
		spec = &daemon.RestoreSpec{Savepoint: f.native}
	case "canonical":
		spec = &daemon.RestoreSpec{Savepoint: f.canonical}
	}
	ckpt := src.wantCheckpoint()
	if src.skipChannels {
		spec.WithoutChannelState = uint64(ckpt)
	}
	var wantCh []chanModel
	var refusal error
	if f.channels && !src.skipChannels {
		wantCh, refusal = wantChannels(ckpt, src.subtask, src.parallelism)
	}
	kg := backend.KeyGroupRangeForOperator(maxPar, src.parallelism, src.subtask)
	in, err := e.d.Open(ctx, daemon.OpenParams{Task: task(src.subtask), MaxParallelism: maxPar, Parallelism: src.parallelism,
		KeyGroups: kg, Kind: src.into, States: states, Restore: spec})
	switch {
	case refusal != nil && err == nil:
		return fmt.Errorf("%w: %s: restored, but the model has %v", errMismatch, src, refusal)
	case refusal != nil && errors.Is(err, chanstate.ErrNotRedistributable) && errors.Is(err, backend.ErrIncompatible):
		return nil
	case err != nil:
		return err
	}
	want := 2
	if src.ckpt == 1 || src.ckpt == 0 && src.savepoint == "" && src.latestIs == 1 {
		want = 1
	}
	if err := checkChannels(in.RestoredChannels(), wantCh); err != nil {
		return fmt.Errorf("%w: %s: %v", errMismatch, src, err)
	}
	if err := check(in.Backend, modelAt(want), kg); err != nil {
		return fmt.Errorf("%w: %s: %v", errMismatch, src, err)
	}
	if err := checkOperatorState(in, src.subtask, src.parallelism, want); err != nil {
		return fmt.Errorf("%w: %s: %v", errMismatch, src, err)
	}
	return nil
}

// silence keeps the standard logger (Pebble's default) quiet in tests.
func silence() func() {
	w := log.Writer()
	log.SetOutput(io.Discard)
	return func() { log.SetOutput(w) }
}
