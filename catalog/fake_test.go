package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/internal/frame"
	"github.com/statedhq/stated/tiered"
)

// testClock is real time plus an offset the test advances, so that the
// modification times a store records (real time) and the catalog's clock
// agree.
type testClock struct{ off atomic.Int64 }

func (c *testClock) Now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *testClock) Advance(d time.Duration) { c.off.Add(int64(d)) }
func (c *testClock) opts(s tiered.Store) Options {
	return Options{Store: s, Retain: 2, GCGrace: time.Hour, Clock: c.Now}
}

// errCrashed is what every call of a crashed faultStore returns.
var errCrashed = errors.New("faultstore: crashed")

// faultStore wraps a store and simulates a process crash at the k-th
// mutating call: that call either lands or not (land), a DeleteBatch
// deletes only some of its names, and every later call fails. It can also fail
// the next n DeleteBatch calls transiently.
type faultStore struct {
	tiered.Store
	mu          sync.Mutex
	countdown   int // mutations left before the crash; < 0: disarmed
	land        bool
	crashed     bool
	failDeletes int
	deleteCalls int
	mutations   int // mutating calls so far
}

func newFaultStore(s tiered.Store) *faultStore { return &faultStore{Store: s, countdown: -1} }

func (f *faultStore) arm(k int, land bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.countdown, f.land = k, land
}

// mutation decides the fate of one mutating call: run it (ok), run it and
// fail (landed crash), or fail without running.
func (f *faultStore) mutation() (run, fail bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mutations++
	if f.crashed {
		return false, true
	}
	if f.countdown == 0 {
		f.crashed = true
		return f.land, true
	}
	if f.countdown > 0 {
		f.countdown--
	}
	return true, false
}

func (f *faultStore) read() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.crashed {
		return errCrashed
	}
	return nil
}

func (f *faultStore) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	run, fail := f.mutation()
	if run {
		if err := f.Store.Put(ctx, name, r, size); err != nil {
			return err
		}
	}
	if fail {
		return errCrashed
	}
	return nil
}

func (f *faultStore) PutIfAbsent(ctx context.Context, name string, r io.Reader, size int64) error {
	run, fail := f.mutation()
	if run {
		if err := f.Store.PutIfAbsent(ctx, name, r, size); err != nil {
			return err
		}
	}
	if fail {
		return errCrashed
	}
	return nil
}

func (f *faultStore) Delete(ctx context.Context, name string) error {
	return f.DeleteBatch(ctx, []string{name})
}

func (f *faultStore) DeleteBatch(ctx context.Context, names []string) error {
	f.mu.Lock()
	f.deleteCalls++
	if f.failDeletes > 0 && !f.crashed {
		f.failDeletes--
		f.mu.Unlock()
		return fmt.Errorf("faultstore: transient delete failure of %d names", len(names))
	}
	f.mu.Unlock()
	run, fail := f.mutation()
	if fail {
		if run {
			// A batch may fail part-way (S3 DeleteObjects reports per key).
			// Delete all but the first name: in a sorted batch that is
			// the manifest, the worst one to leave behind alone.
			some := names
			if len(names) > 1 {
				some = names[1:]
			}
			_ = f.Store.DeleteBatch(ctx, some)
		}
		return errCrashed
	}
	return f.Store.DeleteBatch(ctx, names)
}

func (f *faultStore) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	if err := f.read(); err != nil {
		return nil, err
	}
	return f.Store.Get(ctx, name)
}

func (f *faultStore) GetRange(ctx context.Context, name string, off, n int64) (io.ReadCloser, error) {
	if err := f.read(); err != nil {
		return nil, err
	}
	return f.Store.GetRange(ctx, name, off, n)
}

func (f *faultStore) Stat(ctx context.Context, name string) (tiered.ObjectInfo, error) {
	if err := f.read(); err != nil {
		return tiered.ObjectInfo{}, err
	}
	return f.Store.Stat(ctx, name)
}

func (f *faultStore) List(ctx context.Context, prefix, after string, limit int) (tiered.ListPage, error) {
	if err := f.read(); err != nil {
		return tiered.ListPage{}, err
	}
	return f.Store.List(ctx, prefix, after, limit)
}

// fakeTask is a test double of an incremental backend: its state (string
// keys and values) is cut into buckets by key hash; a snapshot uploads a
// bucket as a new shared file only if it differs from the bucket the last
// *confirmed* checkpoint uploaded (placeholder semantics), and writes one
// private file. Restore reads and checks every file.
type fakeTask struct {
	task   backend.TaskID
	kg     backend.KeyGroupRange
	state  map[string]string
	frozen map[uint64]map[string]string
	// uploaded are the buckets each unconfirmed snapshot wrote or reused.
	uploaded map[uint64]map[int]bucketRef
	base     map[int]bucketRef // buckets of the last confirmed checkpoint
	baseID   uint64
}

type bucketRef struct {
	ref  backend.FileRef
	data string
}

const fakeBuckets = 4

var fakeSeq atomic.Uint64

func newFakeTask(job, op string, sub int, kg backend.KeyGroupRange) *fakeTask {
	return &fakeTask{task: backend.TaskID{Job: job, Operator: op, Subtask: sub}, kg: kg,
		state: map[string]string{}, frozen: map[uint64]map[string]string{},
		uploaded: map[uint64]map[int]bucketRef{}, base: map[int]bucketRef{}}
}

func bucketOf(k string) int {
	h := fnv.New32a()
	h.Write([]byte(k))
	return int(h.Sum32() % fakeBuckets)
}

func encodeBucket(state map[string]string, b int) string {
	sub := map[string]string{}
	for k, v := range state {
		if bucketOf(k) == b {
			sub[k] = v
		}
	}
	out, _ := json.Marshal(sub) // sorted keys: equal maps encode equally
	return string(out)
}

// snapshot is the synchronous part: freeze the state.
func (t *fakeTask) snapshot(id uint64) { t.frozen[id] = maps.Clone(t.state) }

// upload is the asynchronous part: write files, return the handle.
func (t *fakeTask) upload(ctx context.Context, s tiered.Store, id uint64) (*backend.Handle, error) {
	st, ok := t.frozen[id]
	if !ok {
		return nil, fmt.Errorf("fake: no snapshot %d", id)
	}
	h := &backend.Handle{Version: backend.HandleFormatVersion, Backend: backend.KindLSM, Task: t.task,
		CheckpointID: id, KeyGroups: t.kg, MaxParallelism: 128}
	meta := []byte(fmt.Sprintf("checkpoint %d of %s", id, t.task))
	mp := fmt.Sprintf("%s/%s/meta", CheckpointDir(t.task.Job, id), t.task.Dir())
	if err := tiered.PutBytes(ctx, s, mp, meta); err != nil {
		return nil, err
	}
	h.Files = append(h.Files, backend.FileRef{Path: mp, Size: int64(len(meta)), CRC32C: frame.Checksum(meta)})
	h.CheckpointedSize += int64(len(meta))
	used := map[int]bucketRef{}
	for b := 0; b < fakeBuckets; b++ {
		data := encodeBucket(st, b)
		if old, ok := t.base[b]; ok && old.data == data {
			used[b] = old
		} else {
			p := fmt.Sprintf("%s/shared/%s-%d-b%d-%d", t.task.Job, t.task.Dir(), id, b, fakeSeq.Add(1))
			if err := tiered.PutBytes(ctx, s, p, []byte(data)); err != nil {
				return nil, err
			}
			used[b] = bucketRef{ref: backend.FileRef{Path: p, Size: int64(len(data)), CRC32C: frame.Checksum([]byte(data)), Shared: true}, data: data}
			h.CheckpointedSize += int64(len(data))
		}
		h.Files = append(h.Files, used[b].ref)
	}
	for _, f := range h.Files {
		h.FullSize += f.Size
	}
	t.uploaded[id] = used
	return h, nil
}

func (t *fakeTask) notifyComplete(id uint64) {
	if u, ok := t.uploaded[id]; ok && id >= t.baseID {
		t.base, t.baseID = u, id
	}
	delete(t.uploaded, id)
	delete(t.frozen, id)
}

func (t *fakeTask) notifyAborted(id uint64) {
	delete(t.uploaded, id)
	delete(t.frozen, id)
}

// readHandle reads and checks every file of h from s and returns the state.
func readHandle(ctx context.Context, s tiered.Store, h *backend.Handle) (map[string]string, map[int]bucketRef, error) {
	state := map[string]string{}
	buckets := map[int]bucketRef{}
	for i, f := range h.Files {
		data, err := tiered.ReadAll(ctx, s, f.Path, 1<<20)
		if err != nil {
			return nil, nil, err
		}
		if int64(len(data)) != f.Size || frame.Checksum(data) != f.CRC32C {
			return nil, nil, fmt.Errorf("%w: %s", ErrCorrupt, f.Path)
		}
		if i == 0 {
			continue // the private meta file
		}
		sub := map[string]string{}
		if err := json.Unmarshal(data, &sub); err != nil {
			return nil, nil, err
		}
		maps.Copy(state, sub)
		buckets[i-1] = bucketRef{ref: f, data: string(data)}
	}
	return state, buckets, nil
}

// restore replaces the task's state with h's. Without noClaim, the
// restored buckets become the base later snapshots may reuse.
func (t *fakeTask) restore(ctx context.Context, s tiered.Store, h *backend.Handle, noClaim bool) error {
	state, buckets, err := readHandle(ctx, s, h)
	if err != nil {
		return err
	}
	t.state = state
	t.frozen = map[uint64]map[string]string{}
	t.uploaded = map[uint64]map[int]bucketRef{}
	t.base, t.baseID = map[int]bucketRef{}, 0
	if !noClaim {
		// As lsm does: the next completion moves the base, whatever its
		// id (a restored checkpoint of another job may have a higher one).
		t.base = buckets
	}
	return nil
}

// storeSnapshot returns every object under prefix with its bytes.
func storeSnapshot(t testing.TB, s tiered.Store, prefix string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := tiered.Walk(context.Background(), s, prefix, func(o tiered.ObjectInfo) error {
		b, err := tiered.ReadAll(context.Background(), s, o.Name, 0)
		out[o.Name] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func names(m map[string]string) []string {
	out := slices.Collect(maps.Keys(m))
	sort.Strings(out)
	return out
}

var _ tiered.Store = (*faultStore)(nil)
