package inspect

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/lsm"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/tiered"
)

// batchBytes is how much a task's writer buffers before it commits to
// the throwaway lsm instance.
const batchBytes = 4 << 20

// Target is where a new savepoint is written: "savepoints/<ID>/" of
// Store, a canonical savepoint (backend-neutral files, relocatable,
// restorable into any backend kind at any parallelism).
type Target struct {
	// Store is the store (its root) the savepoint goes into. Required.
	// Only names under "savepoints/<ID>/" are written, each once
	// (PutIfAbsent for the manifest, which is written last).
	Store tiered.Store
	// ID is the new savepoint's id (catalog.ValidateSavepointID); its
	// directory must be empty.
	ID string
	// TempDir is where each task is staged (one at a time) before it is
	// written. Default os.TempDir().
	TempDir string
	// CacheBytes is the block cache of the staging instance. Default
	// DefaultCacheBytes.
	CacheBytes int64
	// Clock stamps the manifest and is the time TTLs are checked
	// against. Default time.Now.
	Clock func() time.Time
}

func (t *Target) ensureDefaults() {
	if t.TempDir == "" {
		t.TempDir = os.TempDir()
	}
	if t.CacheBytes == 0 {
		t.CacheBytes = DefaultCacheBytes
	}
	if t.Clock == nil {
		t.Clock = time.Now
	}
}

func (t *Target) validate() error {
	var errs []error
	if t.Store == nil {
		errs = append(errs, fmt.Errorf("inspect: %w: no target store", backend.ErrInvalidArgument))
	}
	if err := catalog.ValidateSavepointID(t.ID); err != nil {
		errs = append(errs, fmt.Errorf("inspect: new savepoint: %w", err))
	}
	if t.CacheBytes < 0 {
		errs = append(errs, fmt.Errorf("inspect: %w: cache bytes %d is negative", backend.ErrInvalidArgument, t.CacheBytes))
	}
	return errors.Join(errs...)
}

// spWriter writes a new savepoint task by task, then its manifest. On
// failure abort deletes what it wrote, and only that.
type spWriter struct {
	t       Target
	dir     string       // "savepoints/<id>"
	store   tiered.Store // rooted at dir
	written []string     // names under dir this writer put
	handles []*backend.Handle
}

func newSPWriter(ctx context.Context, t Target) (*spWriter, error) {
	t.ensureDefaults()
	if err := t.validate(); err != nil {
		return nil, err
	}
	dir := catalog.SavepointDir(t.ID)
	page, err := t.Store.List(ctx, dir+"/", "", 1)
	if err != nil {
		return nil, fmt.Errorf("inspect: new savepoint %s: list its directory: %w", t.ID, err)
	}
	if len(page.Objects) > 0 {
		return nil, fmt.Errorf("inspect: %w: savepoint directory %s is not empty (%s): pick another id",
			catalog.ErrExists, dir, page.Objects[0].Name)
	}
	w := &spWriter{t: t, dir: dir}
	w.store = &recordingStore{Store: tiered.WithPrefix(t.Store, dir), w: w}
	return w, nil
}

// recordingStore remembers every name written, for abort.
type recordingStore struct {
	tiered.Store
	w *spWriter
}

func (r *recordingStore) Put(ctx context.Context, name string, body io.Reader, size int64) error {
	r.w.written = append(r.w.written, name)
	return r.Store.Put(ctx, name, body, size)
}

func (r *recordingStore) PutIfAbsent(ctx context.Context, name string, body io.Reader, size int64) error {
	r.w.written = append(r.w.written, name)
	return r.Store.PutIfAbsent(ctx, name, body, size)
}

// taskOut stages one task of the new savepoint in a throwaway lsm
// instance: entries are written into its Pebble store as stored keys and
// values (backend/kvlayout), and finish has the instance write its
// canonical snapshot into the savepoint.
type taskOut struct {
	w     *spWriter
	dir   string
	b     *lsm.Backend
	batch *pebble.Batch
	ops   []backend.OperatorList
	n     int64
}

// openTask opens the staging instance of task with states registered.
// indexed batches let get read what was set before commit (list appends).
func (w *spWriter) openTask(ctx context.Context, task backend.TaskID, kgs backend.KeyGroupRange, maxParallelism int, states []backend.StateDescriptor) (*taskOut, error) {
	dir, err := os.MkdirTemp(w.t.TempDir, "stated-write-")
	if err != nil {
		return nil, fmt.Errorf("inspect: temporary directory for %s: %w", task, err)
	}
	b, err := lsm.OpenContext(ctx, backend.Options{Task: task, KeyGroups: kgs, MaxParallelism: maxParallelism,
		States: states, Store: readOnly{w.t.Store}, NoClaim: true, Clock: w.t.Clock},
		lsm.Options{Dir: dir, CacheSize: w.t.CacheBytes, MemTableSize: 4 << 20, UploadConcurrency: 2})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("inspect: stage %s of the new savepoint: %w", task, err)
	}
	return &taskOut{w: w, dir: dir, b: b, batch: b.DB().NewIndexedBatch()}, nil
}

func (o *taskOut) set(k, v []byte) error {
	if err := o.batch.Set(k, v, nil); err != nil {
		return err
	}
	o.n++
	if o.batch.Len() >= batchBytes {
		return o.flush()
	}
	return nil
}

// get reads a stored value staged so far.
func (o *taskOut) get(k []byte) ([]byte, bool, error) {
	v, closer, err := o.batch.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	out := bytes.Clone(v)
	_ = closer.Close()
	return out, true, nil
}

func (o *taskOut) flush() error {
	if err := o.batch.Commit(pebble.NoSync); err != nil {
		return err
	}
	_ = o.batch.Close()
	o.batch = o.b.DB().NewIndexedBatch()
	return nil
}

func (o *taskOut) close() {
	if o.batch != nil {
		_ = o.batch.Close()
		o.batch = nil
	}
	_ = o.b.Close()
	_ = os.RemoveAll(o.dir)
}

// finish writes the task's canonical snapshot into the savepoint and
// keeps its handle for the manifest.
func (o *taskOut) finish(ctx context.Context, checkpointID uint64) error {
	defer o.close()
	task := o.b.Info().Task
	if err := o.flush(); err != nil {
		return fmt.Errorf("inspect: stage %s of the new savepoint: %w", task, err)
	}
	p, err := o.b.CanonicalSnapshot(ctx, checkpointID, o.w.store, task.Dir())
	if err != nil {
		return fmt.Errorf("inspect: write %s of the new savepoint: %w", task, err)
	}
	h, err := p.Run(ctx)
	if err != nil {
		return fmt.Errorf("inspect: write %s of the new savepoint: %w", task, err)
	}
	h.OperatorState = o.ops
	o.w.handles = append(o.w.handles, h)
	return nil
}

// complete writes the manifest, last: until it is there the directory is
// no savepoint.
func (w *spWriter) complete(ctx context.Context, job string, checkpointID uint64) (*catalog.Manifest, error) {
	hs := slices.Clone(w.handles)
	slices.SortFunc(hs, func(a, b *backend.Handle) int {
		if a.Task.Operator != b.Task.Operator {
			if a.Task.Operator < b.Task.Operator {
				return -1
			}
			return 1
		}
		return a.Task.Subtask - b.Task.Subtask
	})
	now := w.t.Clock()
	m := &catalog.Manifest{Version: catalog.ManifestVersion, Kind: catalog.KindSavepoint, Job: job,
		CheckpointID: checkpointID, SavepointID: w.t.ID, Format: catalog.FormatCanonical,
		Started: now, Completed: now, Tasks: hs}
	for _, h := range hs {
		for _, f := range h.Files {
			m.CheckpointedSize += f.Size
			m.FullSize += f.Size
		}
	}
	enc, err := catalog.EncodeManifest(m)
	if err != nil {
		return nil, fmt.Errorf("inspect: new savepoint %s: %w", w.t.ID, err)
	}
	if _, err := catalog.DecodeManifest(enc); err != nil {
		return nil, fmt.Errorf("inspect: new savepoint %s: %w", w.t.ID, err)
	}
	w.written = append(w.written, catalog.ManifestName)
	if err := w.t.Store.PutIfAbsent(ctx, w.dir+"/"+catalog.ManifestName, bytes.NewReader(enc), int64(len(enc))); err != nil {
		return nil, fmt.Errorf("inspect: new savepoint %s: write its manifest: %w", w.t.ID, err)
	}
	return m, nil
}

// abort deletes every name this writer wrote.
func (w *spWriter) abort(ctx context.Context) {
	if len(w.written) == 0 {
		return
	}
	names := make([]string, len(w.written))
	for i, n := range w.written {
		names[i] = w.dir + "/" + n
	}
	_ = w.t.Store.DeleteBatch(context.WithoutCancel(ctx), names)
}
