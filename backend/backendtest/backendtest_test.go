package backendtest_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/backendtest"
	"github.com/statedhq/stated/backend/internal/kvstate"
	"github.com/statedhq/stated/backend/internal/memkv"
	"github.com/statedhq/stated/internal/frame"
	"github.com/statedhq/stated/tiered"
)

// refBackend is a deliberately simple backend that exists only to test the
// suite itself: kvstate over memkv, and a snapshot that is one file of
// length-prefixed entries, each with its own CRC, checked as a whole by the
// CRC in the handle. It passes the
// whole suite, so every failure the suite reports for a real backend is a
// difference between that backend and the contract.
type refBackend struct {
	*kvstate.State
	tree *memkv.Tree
	opts backend.Options
	mut  string // the bug TestSuiteCatchesBugs plants, if any
	load sync.Mutex
}

// View implements backend.Viewer with a clone of the tree.
func (r *refBackend) View() (backend.View, error) {
	v, err := r.State.FreezeView(func() (kvstate.Scanner, func(), error) {
		if r.mut == "view-live" {
			return r.tree, nil, nil
		}
		return r.tree.Clone(), nil, nil
	})
	if err != nil {
		return nil, err
	}
	return v, nil
}

// Load implements backend.Loader.
func (r *refBackend) Load() (backend.LoadSession, error) { return r.State.GroupLoad(&r.load), nil }

// mutationEnv names the bug a subprocess of TestSuiteCatchesBugs plants in
// refBackend.
const mutationEnv = "STATED_BACKENDTEST_MUTATION"

func openRef(opts backend.Options) (backend.Backend, error) {
	mut := os.Getenv(mutationEnv)
	opts.EnsureDefaults()
	if mut == "wall-clock" {
		opts.Clock = time.Now
	}
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("ref: %w", err)
	}
	tree := memkv.New()
	var restored []backend.StateDescriptor
	filled := make([]bool, opts.KeyGroups.Len())
	handles := opts.Restore
	if mut == "last-handle-wins" {
		handles = slices.Clone(handles)
		slices.Reverse(handles)
	}
	for _, h := range handles {
		if mut != "forget-late-states" {
			restored = append(restored, h.States...)
		}
		in := h.KeyGroups.Intersect(opts.KeyGroups)
		if in.Empty() {
			continue
		}
		// The first handle listed wins a key group two handles hold.
		mine := map[int]bool{}
		for kg := in.Start; kg <= in.End; kg++ {
			if !filled[kg-opts.KeyGroups.Start] {
				mine[kg], filled[kg-opts.KeyGroups.Start] = true, true
			}
		}
		for _, f := range h.Files {
			if mut == "range-off-by-one" && in.Len() > 1 {
				in.End--
			}
			if err := restoreFile(opts.RestoreStore, f, in, mine, tree, mut == "no-crc"); err != nil {
				return nil, err
			}
		}
	}
	info := backend.Info{Kind: backend.KindFile, Task: opts.Task, KeyGroups: opts.KeyGroups, MaxParallelism: opts.MaxParallelism}
	st, err := kvstate.New(tree, kvstate.Config{Info: info, Clock: opts.Clock, MaxValueSize: opts.MaxValueSize, States: opts.States, Restored: restored})
	if err != nil {
		return nil, fmt.Errorf("ref: %w", err)
	}
	return &refBackend{State: st, tree: tree, opts: opts, mut: mut}, nil
}

func restoreFile(store tiered.Store, f backend.FileRef, in backend.KeyGroupRange, mine map[int]bool, tree *memkv.Tree, noCRC bool) error {
	data, err := tiered.ReadAll(context.Background(), store, f.Path, f.Size+1)
	if errors.Is(err, tiered.ErrNotFound) {
		return fmt.Errorf("ref: %w: snapshot file %s: %v", backend.ErrNotFound, f.Path, err)
	}
	if err != nil {
		return fmt.Errorf("ref: snapshot file %s: %w", f.Path, err)
	}
	if !noCRC && (int64(len(data)) != f.Size || frame.Checksum(data) != f.CRC32C) {
		return fmt.Errorf("ref: %w: snapshot file %s has %d bytes crc %08x, the handle says %d bytes crc %08x",
			backend.ErrCorrupt, f.Path, len(data), frame.Checksum(data), f.Size, f.CRC32C)
	}
	for len(data) > 0 {
		var kv [2][]byte
		rest := data
		for i := range kv {
			n, w := binary.Uvarint(rest)
			if w <= 0 || uint64(len(rest)-w) < n {
				return fmt.Errorf("ref: %w: snapshot file %s: bad entry length", backend.ErrCorrupt, f.Path)
			}
			kv[i], rest = rest[w:w+int(n)], rest[w+int(n):]
		}
		// Each entry carries its own CRC, so damage that got past the file
		// checksum is still caught.
		if len(rest) < 4 {
			return fmt.Errorf("ref: %w: snapshot file %s: entry without checksum", backend.ErrCorrupt, f.Path)
		}
		entry := data[:len(data)-len(rest)]
		if !noCRC && binary.BigEndian.Uint32(rest) != frame.Checksum(entry) {
			return fmt.Errorf("ref: %w: snapshot file %s: entry checksum mismatch", backend.ErrCorrupt, f.Path)
		}
		data = rest[4:]
		ok, err := kvstate.CheckEntry(kv[0], in)
		if err != nil {
			return fmt.Errorf("ref: snapshot file %s: %w", f.Path, err)
		}
		kg, _ := kvstate.KeyGroupOf(kv[0])
		if ok && mine[kg] {
			if err := tree.Set(kv[0], kv[1]); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *refBackend) Snapshot(ctx context.Context, id uint64) (backend.PendingSnapshot, error) {
	return r.snapshot(id, r.opts.Store, fmt.Sprintf("%s/chk-%d/%s", r.opts.Task.Job, id, r.opts.Task.Dir()))
}

func (r *refBackend) CanonicalSnapshot(ctx context.Context, id uint64, store tiered.Store, dir string) (backend.PendingSnapshot, error) {
	return r.snapshot(id, store, dir)
}

func (r *refBackend) snapshot(id uint64, store tiered.Store, dir string) (backend.PendingSnapshot, error) {
	p := &refPending{r: r, id: id, store: store, dir: dir}
	err := r.Exclusive(func(states []backend.StateDescriptor) error {
		p.frozen, p.states = r.tree.Clone(), states
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("ref: snapshot %d: %w", id, err)
	}
	return p, nil
}

func (r *refBackend) NotifyCheckpointComplete(uint64) {}
func (r *refBackend) NotifyCheckpointAborted(uint64)  {}

func (r *refBackend) Close() error {
	if r.mut != "close-noop" {
		r.State.Close()
	}
	return nil
}

// The overrides below exist only to plant bugs.

func (r *refBackend) Get(state string, k backend.Key) ([]byte, bool, error) {
	switch r.mut {
	case "panic":
		panic("planted bug")
	case "ignore-namespace":
		k.Namespace = nil
	}
	return r.State.Get(state, k)
}

func (r *refBackend) Put(state string, k backend.Key, v []byte) error {
	if r.mut == "ignore-namespace" {
		k.Namespace = nil
	}
	return r.State.Put(state, k, v)
}

func (r *refBackend) ListGet(state string, k backend.Key) ([][]byte, error) {
	l, err := r.State.ListGet(state, k)
	if r.mut == "list-order" {
		slices.Reverse(l)
	}
	return l, err
}

func (r *refBackend) MapIterate(state string, k backend.Key, after []byte, limit int) ([]backend.MapEntry, bool, error) {
	es, more, err := r.State.MapIterate(state, k, after, limit)
	if r.mut == "map-more" {
		more = false
	}
	return es, more, err
}

func (r *refBackend) PollTimers(state string, watermark int64, limit int) ([]backend.Timer, error) {
	ts, err := r.State.PollTimers(state, watermark, limit)
	if r.mut == "timer-order" {
		slices.Reverse(ts)
	}
	return ts, err
}

type refPending struct {
	r      *refBackend
	id     uint64
	store  tiered.Store
	dir    string
	frozen *memkv.Tree
	states []backend.StateDescriptor
}

func (p *refPending) Run(ctx context.Context) (*backend.Handle, error) {
	keep := kvstate.SnapshotFilter(p.states, p.r.opts.Clock().UnixMilli())
	var buf bytes.Buffer
	src := p.frozen
	if p.r.mut == "snapshot-live" {
		src = p.r.tree
	}
	err := src.Scan(nil, nil, func(k, v []byte) (bool, error) {
		if keep(k, v) {
			e := binary.AppendUvarint(nil, uint64(len(k)))
			e = append(e, k...)
			e = binary.AppendUvarint(e, uint64(len(v)))
			e = append(e, v...)
			buf.Write(binary.BigEndian.AppendUint32(e, frame.Checksum(e)))
		}
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	name := "state"
	if p.dir != "" {
		name = p.dir + "/state"
	}
	if err := tiered.PutBytes(ctx, p.store, name, buf.Bytes()); err != nil {
		return nil, fmt.Errorf("ref: snapshot %d: %w", p.id, err)
	}
	size := int64(buf.Len())
	o := p.r.opts
	return &backend.Handle{
		Version: backend.HandleFormatVersion, Backend: backend.KindFile, Task: o.Task, CheckpointID: p.id,
		KeyGroups: o.KeyGroups, MaxParallelism: o.MaxParallelism, States: p.states,
		Files:    []backend.FileRef{{Path: name, Size: size, CRC32C: frame.Checksum(buf.Bytes())}},
		FullSize: size, CheckpointedSize: size,
	}, nil
}

func (p *refPending) Release() {}

var refHarness = backendtest.Harness{
	Kind: backend.KindFile,
	Open: func(t testing.TB, opts backend.Options) (backend.Backend, error) { return openRef(opts) },
}

func TestRun(t *testing.T) { backendtest.Run(t, refHarness) }

// TestSuiteCatchesBugs plants one bug at a time in refBackend and checks
// that the suite test meant to catch it fails (in a subprocess, so the
// failure does not fail this test) and that a planted panic is reported as
// a failure, not a crash.
func TestSuiteCatchesBugs(t *testing.T) {
	if os.Getenv(mutationEnv) != "" {
		t.Skip("running as a mutation subprocess")
	}
	if testing.Short() {
		t.Skip("spawns one test process per planted bug")
	}
	cases := []struct{ mutation, subtest, want string }{
		{"no-crc", "CorruptFile", "restore with byte"},
		{"no-crc", "ChecksummedDamage", "damage read back as data"},
		{"snapshot-live", "SnapshotRestore", "model says"},
		{"snapshot-live", "Model", "model says"},
		{"range-off-by-one", "RestoreSubRange", "model says"},
		{"range-off-by-one", "Model", "model says"},
		{"last-handle-wins", "RestoreSeveralHandles", "model says"},
		{"forget-late-states", "RestoreStates", "states"},
		{"ignore-namespace", "Namespaces", "model says"},
		{"list-order", "List", "ListGet"},
		{"map-more", "MapPaging", "MapIterate"},
		{"timer-order", "Timers", "PollTimers"},
		{"wall-clock", "TTL", "model says"},
		{"close-noop", "Closed", "after Close"},
		{"view-live", "ViewFrozen", "view after later writes"},
		{"panic", "Value", "backend panicked in Get"},
	}
	for _, c := range cases {
		t.Run(c.mutation+"/"+c.subtest, func(t *testing.T) {
			// Random model runs meet a planted bug in about one check in a
			// hundred: 1000 checks make missing it practically impossible
			// (a run stops at the first failure, so this costs little).
			cmd := exec.Command(os.Args[0], "-test.run=^TestRun$/^"+c.subtest+"$", "-test.count=1",
				"-rapid.nofailfile", "-rapid.shrinktime=1s", "-rapid.checks=1000")
			cmd.Env = append(os.Environ(), mutationEnv+"="+c.mutation)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed with bug %q planted:\n%s", c.mutation, out)
			}
			if !strings.Contains(string(out), "--- FAIL: TestRun/"+c.subtest) || !strings.Contains(string(out), c.want) {
				t.Fatalf("with bug %q planted, want TestRun/%s to fail mentioning %q; got:\n%s", c.mutation, c.subtest, c.want, out)
			}
		})
	}
}

func TestRunCanonicalAcross(t *testing.T) {
	backendtest.RunCanonicalAcross(t, refHarness, refHarness)
}
