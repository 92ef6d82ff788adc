package fuzz

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/file"
	"github.com/statedhq/stated/backend/heap"
	"github.com/statedhq/stated/backend/lsm"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/chanstate"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/dstl"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/localfs"
	"github.com/statedhq/stated/tiered/memstore"
)

var plPoints = flag.Int("powerloss.points", 0,
	"crash points per scenario of TestPowerLoss (0: 150, 40 with -short; more than the script's operations: every one)")

// Where the simulated host keeps its files. The daemon's data directory
// (the lsm working directories) is a real temporary directory's path:
// the daemon makes and clears its instance directories on the real disk,
// and lsm then writes under the same paths on the crashable file system.
const (
	plRoot   = "/stated/root"   // the checkpoint store (localfs)
	plCache  = "/stated/cache"  // the tiered cache's copies
	plRemote = "/remote/bucket" // the object store behind the cache
)

// plScenario is one configuration of the power-loss suite.
type plScenario struct {
	kind      backend.Kind
	changelog bool
	// cache puts the checkpoint store behind tiered/cache, with the
	// remote on a file system of its own that never loses a write (an
	// object store acknowledges only durable writes).
	cache bool
}

func (s plScenario) String() string {
	out := string(s.kind)
	if s.changelog {
		out += "+changelog"
	}
	if s.cache {
		out += "+cache"
	}
	return out
}

var plScenarios = []plScenario{
	{kind: backend.KindHeap},
	{kind: backend.KindHeap, changelog: true},
	{kind: backend.KindFile},
	{kind: backend.KindFile, changelog: true},
	{kind: backend.KindLSM},
	{kind: backend.KindLSM, changelog: true},
}

// plEnv is one daemon of the simulated host, as "stated serve" builds it
// (catalog, openers, daemon, changelog writer), on the host's file
// systems.
type plEnv struct {
	store tiered.Store
	heap  *memstore.Store
	cat   *catalog.Catalog
	d     *daemon.Daemon
	w     *dstl.Writer
	close func()
}

// plOpen opens a daemon of scenario sc on the file systems local (store
// root, cache, lsm working directories) and remote (the cache's remote;
// nil without one). clock is the catalog's; materialize the changelog's
// materialization interval.
func plOpen(ctx context.Context, sc plScenario, local, remote vfs.FS, dataDir string, clock func() time.Time, materialize time.Duration) (_ *plEnv, err error) {
	e := &plEnv{heap: memstore.New()}
	var closers []func()
	e.close = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	if sc.cache {
		e.store, err = plCacheStore(local, remote)
	} else {
		e.store, err = localfs.OpenWith(plRoot, localfs.Options{FS: local})
	}
	if err != nil {
		return nil, err
	}
	closers = append(closers, func() { _ = e.store.Close() })
	co := catalog.Options{Store: e.store, HeapStore: e.heap, Retain: 2, Logger: quiet, Clock: clock}
	if sc.changelog {
		if e.w, err = dstl.NewWriter(dstl.TieredLogStore{Store: e.store}, dstl.Options{}); err != nil {
			return nil, err
		}
		closers = append(closers, func() { _ = e.w.Close() })
		co.LogStore, co.LogHeld = e.store, e.w.Holds
	}
	if e.cat, err = catalog.Open(ctx, co); err != nil {
		return nil, err
	}
	closers = append(closers, func() { _ = e.cat.Close() })
	bc := pebble.NewCache(8 << 20)
	closers = append(closers, bc.Unref)
	var dl *lsm.DownloadCache
	if sc.cache {
		if dl, err = lsm.OpenDownloadCache(local, dataDir+"/lsm-download-cache", 1<<20); err != nil {
			return nil, err
		}
		closers = append(closers, func() { _ = dl.Close() })
	}
	ops := map[backend.Kind]daemon.Opener{
		backend.KindHeap: func(_ context.Context, o backend.Options, _ daemon.OpenEnv) (backend.Backend, error) {
			return heap.Open(o, heap.Options{Snapshots: e.heap})
		},
		backend.KindFile: func(_ context.Context, o backend.Options, env daemon.OpenEnv) (backend.Backend, error) {
			// Snapshot spool files stay on the real disk: they are
			// scratch, never read after a restart.
			return file.Open(o, file.Options{TempDir: env.Dir})
		},
		backend.KindLSM: func(_ context.Context, o backend.Options, env daemon.OpenEnv) (backend.Backend, error) {
			return lsm.Open(o, lsm.Options{Dir: env.Dir, FS: local, Cache: bc, HeapSnapshots: e.heap, DownloadCache: dl})
		},
	}
	dc := daemon.Config{DataDir: dataDir, Store: e.store, Catalog: e.cat, HeapSnapshots: e.heap, Openers: ops,
		Logger: quiet, IdleInstanceTimeout: -1}
	if sc.changelog {
		dc.Changelog = &daemon.ChangelogConfig{Writer: e.w, Log: dstl.TieredLogStore{Store: e.store}, Default: true,
			MaterializeInterval: materialize}
	}
	if e.d, err = daemon.New(dc); err != nil {
		return nil, err
	}
	closers = append(closers, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = e.d.Shutdown(ctx)
	})
	return e, nil
}

// plModel is what the script has been told, read at every crash point.
type plModel struct {
	mu sync.Mutex
	// acked is the last checkpoint whose completion returned; inflight
	// the one being completed (0: none): a crash during a completion may
	// leave either.
	acked, inflight int
	// par is the parallelism each checkpoint was written at.
	par map[int]int
}

func (m *plModel) set(acked, inflight int) {
	m.mu.Lock()
	m.acked, m.inflight = acked, inflight
	m.mu.Unlock()
}

// plCrash is one simulated power loss.
type plCrash struct {
	i               int64  // before the i-th mutating operation
	op, path        string // that operation
	acked, inflight int
	local, remote   *vfs.MemFS
	// unsynced is the percentage of unsynced blocks and entries kept.
	unsynced int
}

func (c plCrash) String() string {
	mode := "synced data only"
	if c.unsynced > 0 {
		mode = fmt.Sprintf("%d%% of the unsynced data", c.unsynced)
	}
	return fmt.Sprintf("crash before op %d (%s %s; %s; acked %d, completing %d)", c.i, c.op, c.path, mode, c.acked, c.inflight)
}

// plScript runs the cycles the suite crashes in: writes, channel state
// (checkpoints 2 to 6, see plUnaligned), snapshots and completions of two
// subtasks; retention (Retain 2 subsumes the oldest at
// every completion from the third on); an aborted checkpoint; a sweep; a
// restore of one subtask; a rescale to one subtask and more checkpoints
// there; with the changelog, materializations (every few ms) and the
// truncations they allow.
func plScript(ctx context.Context, e *plEnv, m *plModel, sc plScenario) error {
	open := func(sub, par int, restore bool) (*daemon.Instance, error) {
		p := daemon.OpenParams{Task: task(sub), MaxParallelism: maxPar, Parallelism: par,
			KeyGroups: backend.KeyGroupRangeForOperator(maxPar, par, sub), Kind: sc.kind, States: states}
		if restore {
			p.Restore = &daemon.RestoreSpec{Latest: true}
		}
		return e.d.Open(ctx, p)
	}
	pause := func() {
		if sc.changelog {
			// Let a background materialization run.
			time.Sleep(15 * time.Millisecond)
		}
	}
	acked := 0
	cycle := func(id int, ins []*daemon.Instance, complete bool) error {
		unaligned := plUnaligned(id)
		for _, in := range ins {
			if err := applyTo(in.Backend, id, in.KeyGroups); err != nil {
				return err
			}
			if err := setOperatorState(in, in.Task.Subtask, id); err != nil {
				return err
			}
		}
		for piece := range 2 {
			for _, in := range ins {
				if !unaligned {
					break
				}
				if err := writeChannels(ctx, e.d, in, id, piece); err != nil {
					return fmt.Errorf("channel state %d: %w", id, err)
				}
			}
		}
		for _, in := range ins {
			// With channel state, waiting for the first task's upload
			// would wait for the shared object's linger.
			o := daemon.SnapshotOptions{Wait: !unaligned}
			if unaligned {
				o.Stats = snapshotStats
			}
			if _, err := e.d.SnapshotWith(ctx, in, uint64(id), o); err != nil {
				return fmt.Errorf("snapshot %d: %w", id, err)
			}
		}
		if !complete {
			return e.d.AbortCheckpoint(ctx, job, uint64(id), "power-loss suite")
		}
		m.mu.Lock()
		m.inflight, m.par[id] = id, len(ins)
		m.mu.Unlock()
		if _, err := e.d.CompleteCheckpoint(ctx, job, uint64(id), nil); err != nil {
			return fmt.Errorf("complete %d: %w", id, err)
		}
		acked = id
		m.set(acked, 0)
		pause()
		return nil
	}
	var ins []*daemon.Instance
	for sub := range oldPar {
		in, err := open(sub, oldPar, false)
		if err != nil {
			return err
		}
		ins = append(ins, in)
	}
	for id := 1; id <= 3; id++ {
		if err := cycle(id, ins, true); err != nil {
			return err
		}
	}
	// A restore: subtask 1 goes and comes back from checkpoint 3.
	if err := e.d.CloseInstance(ins[1].ID, job); err != nil {
		return err
	}
	in, err := open(1, oldPar, true)
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	ins[1] = in
	// Checkpoint 4 is aborted (its writes stay in the backends, so the
	// model of 5 holds them too); then a sweep.
	if err := cycle(4, ins, false); err != nil {
		return err
	}
	if _, err := e.cat.GC(ctx, false); err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	if err := cycle(5, ins, true); err != nil {
		return err
	}
	// A rescale to one subtask, restored from checkpoint 5.
	for _, in := range ins {
		if err := e.d.CloseInstance(in.ID, job); err != nil {
			return err
		}
	}
	in, err = open(0, 1, true)
	if err != nil {
		return fmt.Errorf("rescale: %w", err)
	}
	for id := 6; id <= 7; id++ {
		if err := cycle(id, []*daemon.Instance{in}, true); err != nil {
			return err
		}
	}
	if err := e.d.CloseInstance(in.ID, job); err != nil {
		return err
	}
	if _, err = e.cat.GC(ctx, false); err != nil {
		return err
	}
	// The cycles must have done what the suite says it crashes in.
	dm := e.d.Metrics()
	if n := dm.Restores.Load(); n != 2 {
		return fmt.Errorf("the script restored %d times, want 2 (a restore and a rescale)", n)
	}
	if sc.changelog {
		if dm.Materializations.Load() == 0 {
			return errors.New("no materialization ran during the script")
		}
		if e.w.Metrics().TruncatedSegments == 0 {
			return errors.New("the changelog was never truncated during the script")
		}
	}
	return nil
}

// plUnaligned says whether checkpoint id of the script is unaligned: its
// tasks write channel state (channelsAt) before they snapshot. The aborted
// checkpoint 4 is, so that its channel state object must go too, and the
// restores in the script (from 3, and rescaled from 5) restore some.
func plUnaligned(id int) bool { return id >= 2 && id <= 6 }

// plCheckChannels restores the channel state of every task of every
// retained checkpoint on its own (chanstate.Restore, as the daemon does
// without a rescale, whatever the backend) and compares it with the
// model; a checkpoint that is not unaligned must have none.
func plCheckChannels(ctx context.Context, e *plEnv, retained []uint64, spool string) error {
	for _, id := range retained {
		mf, ok := e.cat.Checkpoint(job, id)
		if !ok {
			return fmt.Errorf("retained checkpoint %d has no manifest", id)
		}
		for _, h := range mf.Tasks {
			if !plUnaligned(int(id)) {
				if len(h.Channels) > 0 {
					return fmt.Errorf("checkpoint %d task %s: channel state in an aligned checkpoint", id, h.Task)
				}
				continue
			}
			r, err := chanstate.Restore(ctx, chanstate.RestoreOptions{Store: e.store, Sources: []*backend.Handle{h},
				MaxParallelism: maxPar, SpoolDir: spool})
			if err != nil {
				return fmt.Errorf("channel state of checkpoint %d task %s: %w", id, h.Task, err)
			}
			err = checkChannels(r, channelsAt(int(id), h.Task.Subtask))
			_ = r.Close()
			if err != nil {
				return fmt.Errorf("channel state of checkpoint %d task %s: %w", id, h.Task, err)
			}
		}
	}
	return nil
}

// plLateClock is the catalog clock after a crash: past every grace
// period, so that the sweep judges every unreferenced object.
func plLateClock() time.Time { return time.Now().Add(24 * time.Hour) }

// plCheck reopens the host a crash left and checks it: the catalog opens
// without problems; the newest retained checkpoint is the last
// acknowledged completion or the one in flight; every retained
// checkpoint verifies (no file missing or damaged), before and after a
// sweep; the sweep leaves no orphan (a second one finds nothing, and every
// object left is a retained checkpoint's, channel state objects included);
// every retained checkpoint's channel state restores equal to the model;
// and a restore of latest into both subtasks equals the model at that
// checkpoint, channel state included. A heap checkpoint
// without the changelog lives in daemon memory, which the crash took:
// its restore must say so (daemon.ErrSnapshotGone).
func plCheck(ctx context.Context, sc plScenario, c plCrash, m *plModel, dataDir string) (outcome string, err error) {
	var remote vfs.FS
	if c.remote != nil {
		remote = c.remote
	}
	e, err := plOpen(ctx, sc, c.local, remote, dataDir, plLateClock, time.Hour)
	if err != nil {
		return "", fmt.Errorf("reopen: %w", err)
	}
	defer e.close()
	if ps := e.cat.Problems(); len(ps) > 0 {
		return "", fmt.Errorf("the catalog found problems: %v", ps)
	}
	retained := e.cat.Retained(job)
	latest := 0
	if len(retained) > 0 {
		latest = int(slices.Max(retained))
	}
	if latest != c.acked && (c.inflight == 0 || latest != c.inflight) {
		return "", fmt.Errorf("the newest retained checkpoint is %d (retained %v)", latest, retained)
	}
	verifyAll := func(when string) error {
		for _, id := range retained {
			rep, err := e.cat.Verify(ctx, job, id)
			if err != nil {
				return fmt.Errorf("%s: verify checkpoint %d: %w", when, id, err)
			}
			if !rep.OK() {
				return fmt.Errorf("%s: checkpoint %d: %v", when, id, rep.Problems)
			}
		}
		return nil
	}
	if err := verifyAll("before the sweep"); err != nil {
		return "", err
	}
	if _, err := e.cat.GC(ctx, false); err != nil {
		return "", fmt.Errorf("sweep: %w", err)
	}
	again, err := e.cat.GC(ctx, true)
	if err != nil {
		return "", fmt.Errorf("second sweep: %w", err)
	}
	if len(again.Orphans) > 0 || len(again.Problems) > 0 {
		return "", fmt.Errorf("the second sweep still finds orphans %v, problems %v", again.Orphans, again.Problems)
	}
	if err := plOnlyReferenced(ctx, e, retained); err != nil {
		return "", err
	}
	if err := verifyAll("after the sweep"); err != nil {
		return "", err
	}
	if err := plCheckChannels(ctx, e, retained, dataDir); err != nil {
		return "", err
	}
	switch {
	case latest == 0:
		outcome = "no checkpoint yet, restore refused as not found"
	case sc.kind == backend.KindHeap && !sc.changelog:
		outcome = "heap snapshots gone with the process, restore refused"
	default:
		outcome = "restored equal to the model"
	}
	if latest != 0 && latest == c.inflight {
		outcome += " (the completion in flight)"
	}
	for sub := range oldPar {
		kg := backend.KeyGroupRangeForOperator(maxPar, oldPar, sub)
		in, err := e.d.Open(ctx, daemon.OpenParams{Task: task(sub), MaxParallelism: maxPar, Parallelism: oldPar,
			KeyGroups: kg, Kind: sc.kind, States: states, Restore: &daemon.RestoreSpec{Latest: true}})
		switch {
		case latest == 0:
			if !errors.Is(err, catalog.ErrNotFound) {
				return "", fmt.Errorf("restore of latest with no checkpoint: %v, want not found", err)
			}
			continue
		case sc.kind == backend.KindHeap && !sc.changelog:
			if !errors.Is(err, daemon.ErrSnapshotGone) {
				return "", fmt.Errorf("restore of heap checkpoint %d after a crash: %v, want %v", latest, err, daemon.ErrSnapshotGone)
			}
			continue
		case err != nil:
			return "", fmt.Errorf("restore of checkpoint %d into subtask %d: %w", latest, sub, err)
		}
		if err := check(in.Backend, modelAt(latest), kg); err != nil {
			return "", fmt.Errorf("checkpoint %d restored into subtask %d: %w", latest, sub, err)
		}
		m.mu.Lock()
		par := m.par[latest]
		m.mu.Unlock()
		var wantCh []chanModel
		if plUnaligned(latest) {
			if wantCh, err = wantChannelsFrom(latest, par, sub, oldPar); err != nil {
				return "", fmt.Errorf("checkpoint %d: %w", latest, err)
			}
		}
		if err := checkChannels(in.RestoredChannels(), wantCh); err != nil {
			return "", fmt.Errorf("checkpoint %d restored into subtask %d: %w", latest, sub, err)
		}
		if par == oldPar {
			if err := checkOperatorState(in, sub, oldPar, latest); err != nil {
				return "", fmt.Errorf("checkpoint %d restored into subtask %d: %w", latest, sub, err)
			}
		}
		if err := e.d.CloseInstance(in.ID, job); err != nil {
			return "", err
		}
	}
	return outcome, nil
}

// plOnlyReferenced checks that every object left in the store is a
// retained checkpoint's manifest or file, a changelog segment one of them
// reads, or the job file.
func plOnlyReferenced(ctx context.Context, e *plEnv, retained []uint64) error {
	keep := map[string]bool{job + "/" + catalog.JobFileName: true}
	for _, id := range retained {
		mf, ok := e.cat.Checkpoint(job, id)
		if !ok {
			return fmt.Errorf("retained checkpoint %d has no manifest", id)
		}
		keep[catalog.CheckpointDir(job, id)+"/_metadata"] = true
		for _, h := range mf.Tasks {
			// Channel state is in the checkpoint store for every backend.
			for _, p := range h.ChannelObjects() {
				keep[p] = true
			}
			if h.Backend == backend.KindHeap && h.Log == nil {
				continue // in the heap store
			}
			for _, f := range h.Files {
				keep[f.Path] = true
				if f.Pack != nil {
					keep[f.Pack.Object] = true // the file lies in its pack
				}
			}
			if h.Log != nil {
				for _, s := range h.Log.Segments {
					keep[s] = true
				}
			}
		}
	}
	var left []string
	err := tiered.Walk(ctx, e.store, "", func(o tiered.ObjectInfo) error {
		if !keep[o.Name] {
			left = append(left, o.Name)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("list the store: %w", err)
	}
	if len(left) > 0 {
		return fmt.Errorf("after the sweep the store still holds objects no retained checkpoint references: %s", strings.Join(left, ", "))
	}
	return nil
}

// TestPowerLoss enumerates crash points of the script's cycles for every
// scenario and checks the host each one leaves (plCheck). The script
// runs once to count its mutating file-system operations, then again
// taking a crash clone every stride operations; the count of points
// checked is logged per scenario and in all.
func TestPowerLoss(t *testing.T) {
	defer silence()()
	points := *plPoints
	if points == 0 {
		points = 150
		if testing.Short() {
			points = 40
		}
	}
	total := 0
	start := time.Now()
	for _, sc := range plScenarios {
		t.Run(sc.String(), func(t *testing.T) {
			n := plRun(t, sc, points)
			total += n
		})
	}
	t.Logf("power loss: %d crash points checked in %d scenarios in %s", total, len(plScenarios), time.Since(start).Round(time.Second))
}

// plRun runs the script of sc twice (a count, then crashes) and checks
// every crash; it returns the number of crash points checked.
func plRun(t *testing.T, sc plScenario, points int) int {
	ctx := context.Background()
	run := func(w *crashWorld, m *plModel) {
		t.Helper()
		local := w.add(func(p string) string {
			switch {
			case strings.HasPrefix(p, plRoot):
				return "store"
			case strings.HasPrefix(p, plCache):
				return "cache"
			}
			return "data"
		})
		var remote vfs.FS
		if sc.cache {
			remote = w.add(func(string) string { return "remote" })
		}
		e, err := plOpen(ctx, sc, local, remote, t.TempDir(), time.Now, 5*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		defer e.close()
		if err := plScript(ctx, e, m, sc); err != nil {
			t.Fatalf("script: %v", err)
		}
	}
	// The count: the script's mutating operations vary a little between
	// runs (Pebble's and the changelog's background work), so the stride
	// is a guide and the number of points checked is what the log says.
	w := newCrashWorld()
	run(w, &plModel{par: map[int]int{}})
	total := w.ops()
	stride := max(total/int64(points), 1)
	t.Logf("%s: %d mutating operations (%s); a crash every %d", sc, total, w.summary(), stride)

	w = newCrashWorld()
	m := &plModel{par: map[int]int{}}
	var crashes []plCrash
	w.crashAt = func(i int64) bool { return i%stride == 0 }
	w.cfg = func(i int64, fs int) vfs.CrashCloneCfg {
		if fs == 1 {
			// The remote object store keeps every write it acknowledged.
			return plRemoteCfg()
		}
		return cloneCfg(i/stride, 1)
	}
	w.onCrash = func(i int64, op, path string, clones []*vfs.MemFS) {
		m.mu.Lock()
		c := plCrash{i: i, op: op, path: path, acked: m.acked, inflight: m.inflight, local: clones[0],
			unsynced: cloneCfg(i/stride, 1).UnsyncedDataPercent}
		m.mu.Unlock()
		if len(clones) > 1 {
			c.remote = clones[1]
		}
		crashes = append(crashes, c)
	}
	run(w, m)
	// And the end of the script: nothing in flight.
	m.mu.Lock()
	crashes = append(crashes, plCrash{i: w.ops() + 1, op: "none", path: "(the script ended)", acked: m.acked,
		local: w.fss[0].mem.CrashClone(vfs.CrashCloneCfg{})})
	m.mu.Unlock()
	if sc.cache {
		crashes[len(crashes)-1].remote = w.fss[1].mem.CrashClone(plRemoteCfg())
	}
	dataDir := t.TempDir()
	failed := 0
	outcomes := map[string]int{}
	for _, c := range crashes {
		outcome, err := plCheck(ctx, sc, c, m, dataDir)
		outcomes[outcome]++
		if err != nil {
			failed++
			if failed <= 5 {
				t.Errorf("%s: %s: %v", sc, c, err)
			}
		}
	}
	if failed > 5 {
		t.Errorf("%s: %d more crash points failed", sc, failed-5)
	}
	t.Logf("%s: %d crash points checked, %d failed; %s", sc, len(crashes), failed, plOutcomes(outcomes))
	return len(crashes)
}

// plCacheStore is filled in by the cache scenarios (powerloss_cache_test.go).
var plCacheStore = func(local, remote vfs.FS) (tiered.Store, error) {
	return nil, errors.New("no cache scenario")
}

func plOutcomes(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		if k != "" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s: %d", k, m[k]))
	}
	return strings.Join(parts, "; ")
}
