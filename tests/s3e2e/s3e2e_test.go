package s3e2e_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/lsm"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/fault"
	"github.com/statedhq/stated/tiered/s3store"
	"github.com/statedhq/stated/tiered/s3store/s3test"
	"github.com/statedhq/stated/tiered/storetest"
)

var (
	task   = backend.TaskID{Job: "job", Operator: "op", Subtask: 0}
	all    = backend.KeyGroupRange{Start: 0, End: 127}
	states = []backend.StateDescriptor{
		{Name: "v", Kind: backend.KindValue},
		{Name: "m", Kind: backend.KindMap},
		{Name: "l", Kind: backend.KindList},
		{Name: "a", Kind: backend.KindAggregate, Aggregate: backend.AggSum, Number: backend.NumInt64},
	}
	epoch = time.Unix(1_700_000_000, 0)
)

// model is what the backend must hold.
type model struct {
	v map[int]string
	m map[int]map[string]string
	l map[int][]string
	a map[int]int64
}

func newModel() *model {
	return &model{v: map[int]string{}, m: map[int]map[string]string{}, l: map[int][]string{}, a: map[int]int64{}}
}

func (m *model) clone() *model {
	c := &model{v: maps.Clone(m.v), m: map[int]map[string]string{}, l: map[int][]string{}, a: maps.Clone(m.a)}
	for k, mm := range m.m {
		c.m[k] = maps.Clone(mm)
	}
	for k, l := range m.l {
		c.l[k] = slices.Clone(l)
	}
	return c
}

const keys = 400

func key(i int) backend.Key {
	return backend.Key{KeyGroup: i % 128, Key: fmt.Appendf(nil, "key-%d", i)}
}

// apply runs n random operations on b and m. big makes the values large
// and incompressible (keys*32 KiB live), so a flush makes an SST above the
// multipart threshold.
func apply(t *testing.T, r *rand.Rand, b backend.Backend, m *model, n int, big bool) {
	t.Helper()
	for range n {
		applyOne(t, r, b, m, r.IntN(keys), big)
	}
}

// applyOne runs one random operation on key i.
func applyOne(t *testing.T, r *rand.Rand, b backend.Backend, m *model, i int, big bool) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	k := key(i)
	switch r.IntN(7) {
	case 0, 1:
		v := fmt.Sprintf("value-%d", r.Uint64())
		if big {
			v = string(storetest.Data(r.Uint64(), 32<<10))
		}
		must(b.Put("v", k, []byte(v)))
		m.v[i] = v
	case 2:
		must(b.Delete("v", k))
		delete(m.v, i)
	case 3:
		uk, v := fmt.Sprintf("uk-%d", r.IntN(5)), fmt.Sprintf("mv-%d", r.Uint64())
		must(b.MapPut("m", k, []byte(uk), []byte(v)))
		if m.m[i] == nil {
			m.m[i] = map[string]string{}
		}
		m.m[i][uk] = v
	case 4:
		uk := fmt.Sprintf("uk-%d", r.IntN(5))
		must(b.MapRemove("m", k, []byte(uk)))
		delete(m.m[i], uk)
	case 5:
		v := fmt.Sprintf("el-%d", r.Uint64())
		must(b.ListAppend("l", k, []byte(v)))
		m.l[i] = append(m.l[i], v)
	case 6:
		d := r.Int64N(1000) - 500
		must(b.AggregateAdd("a", k, backend.Int64(d)))
		m.a[i] += d
	}
}

// check compares every key of the model with b.
func check(t *testing.T, what string, b backend.Backend, m *model) {
	t.Helper()
	checkRange(t, what, b, m, all)
}

// checkRange compares the keys of the model in key groups kg with b.
func checkRange(t *testing.T, what string, b backend.Backend, m *model, kg backend.KeyGroupRange) {
	t.Helper()
	for i := range keys {
		k := key(i)
		if !kg.Contains(k.KeyGroup) {
			continue
		}
		v, ok, err := b.Get("v", k)
		if err != nil {
			t.Fatalf("%s: get v %d: %v", what, i, err)
		}
		if want, wok := m.v[i]; ok != wok || string(v) != want {
			t.Fatalf("%s: value %d: %d bytes (present %v), want %d bytes (present %v)", what, i, len(v), ok, len(want), wok)
		}
		entries, _, err := b.MapIterate("m", k, nil, 0)
		if err != nil {
			t.Fatalf("%s: map %d: %v", what, i, err)
		}
		got := map[string]string{}
		for _, e := range entries {
			got[string(e.UserKey)] = string(e.Value)
		}
		want := m.m[i]
		if want == nil {
			want = map[string]string{}
		}
		if !maps.Equal(got, want) {
			t.Fatalf("%s: map %d: %v, want %v", what, i, got, want)
		}
		l, err := b.ListGet("l", k)
		if err != nil {
			t.Fatalf("%s: list %d: %v", what, i, err)
		}
		var gl []string
		for _, e := range l {
			gl = append(gl, string(e))
		}
		if !slices.Equal(gl, m.l[i]) {
			t.Fatalf("%s: list %d: %d elements, want %d", what, i, len(gl), len(m.l[i]))
		}
		n, ok, err := b.AggregateGet("a", k)
		if err != nil {
			t.Fatalf("%s: aggregate %d: %v", what, i, err)
		}
		if _, wok := m.a[i]; ok != wok || n.Int != m.a[i] {
			t.Fatalf("%s: aggregate %d: %v (present %v), want %d", what, i, n, ok, m.a[i])
		}
	}
}

func openS3(t *testing.T) tiered.Store {
	t.Helper()
	opts, _ := s3test.Options(t)
	opts.PartSize = s3store.MinPartSize
	opts.MaxBackoff = 20 * time.Millisecond
	s, err := s3store.Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func open(t *testing.T, store tiered.Store, dir string, restore *backend.Handle) (*lsm.Backend, error) {
	opts := backend.Options{Task: task, KeyGroups: all, States: states, Store: store,
		Clock: func() time.Time { return epoch }}
	if restore != nil {
		opts.Restore = []*backend.Handle{restore}
	}
	return lsm.Open(opts, lsm.Options{Dir: dir, MemTableSize: 16 << 20, TargetFileSize: 8 << 20})
}

// checkpoint runs checkpoint id and, when it completes, publishes the
// encoded handle as the checkpoint's _metadata.
func checkpoint(ctx context.Context, b *lsm.Backend, store tiered.Store, id uint64) (*backend.Handle, error) {
	p, err := b.Snapshot(ctx, id)
	if err != nil {
		return nil, err
	}
	h, err := p.Run(ctx)
	if err != nil {
		return nil, err
	}
	enc, err := backend.EncodeHandle(h)
	if err != nil {
		return nil, err
	}
	if err := tiered.PutBytes(ctx, store, fmt.Sprintf("%s/chk-%d/_metadata", task.Job, id), enc); err != nil {
		return nil, fmt.Errorf("publish metadata of checkpoint %d: %w", id, err)
	}
	return h, nil
}

func readHandle(ctx context.Context, store tiered.Store, id uint64) (*backend.Handle, error) {
	b, err := tiered.ReadAll(ctx, store, fmt.Sprintf("%s/chk-%d/_metadata", task.Job, id), 1<<20)
	if err != nil {
		return nil, err
	}
	return backend.DecodeHandle(b)
}

// TestCheckpointToS3RestoreAfterLocalLoss: checkpoints (a full one with an
// SST big enough for a multipart upload, then incremental ones) go to S3;
// the local directory is deleted; a restore from S3 alone equals the model.
func TestCheckpointToS3RestoreAfterLocalLoss(t *testing.T) {
	ctx := context.Background()
	store := openS3(t)
	root := t.TempDir()
	dir := filepath.Join(root, "inst")
	b, err := open(t, store, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	m := newModel()
	apply(t, r, b, m, 4000, true)
	h1, err := checkpoint(ctx, b, store, 1)
	if err != nil {
		t.Fatal(err)
	}
	b.NotifyCheckpointComplete(1)
	var largest int64
	for _, f := range h1.Files {
		largest = max(largest, f.Size)
	}
	if largest <= s3store.MinPartSize {
		t.Fatalf("no file above the %d-byte multipart threshold (largest %d): the test misses the multipart path", s3store.MinPartSize, largest)
	}
	var last *model
	prev, reuses := h1, 0
	for id := uint64(2); id <= 4; id++ {
		apply(t, r, b, m, 600, false)
		h, err := checkpoint(ctx, b, store, id)
		if err != nil {
			t.Fatal(err)
		}
		b.NotifyCheckpointComplete(id)
		reuses += reused(prev, h)
		prev = h
		last = m.clone()
	}
	// A compaction may rewrite every file between two checkpoints, but not
	// between all of them: some checkpoint referenced a file already in S3.
	if reuses == 0 {
		t.Fatal("no checkpoint reused a file of the one before: incremental checkpoints to S3 do not work")
	}
	// Writes after the last checkpoint are lost with the local directory.
	apply(t, r, b, m, 200, false)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	// A fresh client: nothing is carried over in memory.
	store2 := openS3Like(t, store)
	h, err := readHandle(ctx, store2, 4)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := open(t, store2, filepath.Join(root, "restored"), h)
	if err != nil {
		t.Fatalf("restore from S3: %v", err)
	}
	defer rb.Close()
	check(t, "restored checkpoint 4", rb, last)
	// The restored instance checkpoints on, incrementally.
	apply(t, r, rb, last, 100, false)
	h5, err := checkpoint(ctx, rb, store2, 5)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("checkpoint 5 after the restore reuses %d files of checkpoint 4", reused(h, h5))
}

// reused counts the shared files of b that a already referenced.
func reused(a, b *backend.Handle) int {
	old := map[string]bool{}
	for _, f := range a.Files {
		if f.Shared {
			old[f.Path] = true
		}
	}
	n := 0
	for _, f := range b.Files {
		if f.Shared && old[f.Path] {
			n++
		}
	}
	return n
}

func openS3Like(t *testing.T, s tiered.Store) tiered.Store {
	s2, err := s3store.Open(context.Background(), s.(*s3store.Store).Options())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Close() })
	return s2
}

// TestCheckpointsUnderFaults: with 10% of store calls failing (and some
// replies lost), each checkpoint completes correctly or fails naming the
// injected failure; after more faults on the read path (silently truncated
// downloads included), every completed checkpoint still restores to
// exactly its model, or the restore fails loudly and a retry succeeds.
func TestCheckpointsUnderFaults(t *testing.T) {
	ctx := context.Background()
	s3 := openS3(t)
	faulty := fault.New(s3, fault.Config{Seed: 11, ErrorRate: 0.10, LostReplyRate: 0.02, Ops: tiered.WriteOps})
	root := t.TempDir()
	b, err := open(t, faulty, filepath.Join(root, "inst"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r := rand.New(rand.NewPCG(3, 4))
	m := newModel()
	completed := map[uint64]*model{}
	failed := 0
	for id := uint64(1); id <= 40 && (len(completed) < 3 || failed < 3); id++ {
		apply(t, r, b, m, 300, false)
		_, err := checkpoint(ctx, b, faulty, id)
		if err != nil {
			if !errors.Is(err, fault.ErrInjected) || !(strings.HasPrefix(err.Error(), "lsm: ") || strings.HasPrefix(err.Error(), "publish metadata")) {
				t.Fatalf("checkpoint %d failed without a clear reason: %v", id, err)
			}
			failed++
			b.NotifyCheckpointAborted(id)
			continue
		}
		b.NotifyCheckpointComplete(id)
		completed[id] = m.clone()
	}
	if len(completed) < 3 || failed < 3 {
		t.Fatalf("%d checkpoints completed and %d failed: the run proves little", len(completed), failed)
	}
	t.Logf("%d checkpoints completed, %d failed; faults %+v", len(completed), failed, faulty.Stats())

	// Restore each completed checkpoint through a store whose reads fail,
	// or silently return truncated data.
	readFaults := fault.New(openS3Like(t, s3), fault.Config{Seed: 12, ErrorRate: 0.05, TruncateRate: 0.15,
		SilentTruncation: true, Ops: tiered.ReadOps})
	for _, id := range slices.Sorted(maps.Keys(completed)) {
		var rb *lsm.Backend
		var errs []error
		for attempt := range 30 {
			h, err := readHandle(ctx, readFaults, id)
			if err == nil {
				rb, err = open(t, readFaults, filepath.Join(root, fmt.Sprintf("r-%d-%d", id, attempt)), h)
			}
			if err == nil {
				break
			}
			if !errors.Is(err, fault.ErrInjected) && !errors.Is(err, backend.ErrCorrupt) {
				t.Fatalf("restore of checkpoint %d failed without a clear reason: %v", id, err)
			}
			errs = append(errs, err)
		}
		if rb == nil {
			t.Fatalf("checkpoint %d never restored: %v", id, errors.Join(errs...))
		}
		check(t, fmt.Sprintf("checkpoint %d restored after %d failed attempts", id, len(errs)), rb, completed[id])
		rb.Close()
	}
	if readFaults.Stats().Truncations == 0 {
		t.Fatal("no read was truncated: the restore path was not tested against short data")
	}
}
