package lsm

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"pgregory.net/rapid"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered/memstore"
)

// chain is a model of the checkpoint coordinator and the shared-file
// registry around one lsm instance: checkpoints are taken, run, completed
// (in id order; a completion subsumes older open ones) or aborted in random
// orders; an aborted or no longer retained checkpoint's shared files are
// deleted unless a retained checkpoint refers to them, as the registry does.
// Every retained checkpoint must then restore to exactly the state it
// froze. A checkpoint that referenced a file it had no right to (an
// unconfirmed or aborted upload) fails that restore.
type chain struct {
	t       *rapid.T
	ctx     context.Context
	store   *memstore.Store
	b       *Backend
	n       int // instances opened, for directory names
	nextID  uint64
	pending map[uint64]*chainSnap // snapshot taken, not run
	ran     map[uint64]*chainSnap // run, neither completed nor aborted
	kept    []*chainSnap          // completed and retained, oldest first
	retain  int
}

type chainSnap struct {
	id   uint64
	p    backend.PendingSnapshot
	want map[string]string
	h    *backend.Handle
}

func (c *chain) open(restore *backend.Handle) *Backend {
	c.n++
	opts := backend.Options{Task: testTask, KeyGroups: full(), States: testStates, Store: c.store,
		Clock: func() time.Time { return time.Unix(1_700_000_000, 0) }}
	if restore != nil {
		opts.Restore = []*backend.Handle{restore}
	}
	b, err := Open(opts, Options{Dir: fmt.Sprintf("/i%d", c.n), FS: vfs.NewMem(), MemTableSize: 64 << 10,
		TargetFileSize: 64 << 10, Logger: silentLogger{}})
	if err != nil {
		c.t.Fatalf("open (restore %v): %v", restore != nil, err)
	}
	return b
}

func (c *chain) write() {
	n := rapid.IntRange(1, 300).Draw(c.t, "writes")
	for i := 0; i < n; i++ {
		k := key(rapid.IntRange(0, 127).Draw(c.t, "kg"), fmt.Sprint(rapid.IntRange(0, 50).Draw(c.t, "k")))
		var err error
		switch rapid.IntRange(0, 3).Draw(c.t, "op") {
		case 0, 1:
			err = c.b.Put("v", k, []byte(fmt.Sprint(c.nextID, i)))
		case 2:
			err = c.b.ListAppend("l", k, []byte{byte(i)})
		case 3:
			err = c.b.Delete("v", k)
		}
		if err != nil {
			c.t.Fatal(err)
		}
	}
}

func (c *chain) snapshot() {
	c.nextID++
	p, err := c.b.Snapshot(c.ctx, c.nextID)
	if err != nil {
		c.t.Fatal(err)
	}
	c.pending[c.nextID] = &chainSnap{id: c.nextID, p: p, want: dumpRapid(c.t, c.b)}
}

func pickID[T any](t *rapid.T, m map[uint64]T, label string) (uint64, bool) {
	if len(m) == 0 {
		return 0, false
	}
	ids := make([]uint64, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids[rapid.IntRange(0, len(ids)-1).Draw(t, label)], true
}

func (c *chain) run() {
	id, ok := pickID(c.t, c.pending, "run")
	if !ok {
		return
	}
	s := c.pending[id]
	delete(c.pending, id)
	h, err := s.p.Run(c.ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	s.h = h
	c.ran[id] = s
}

func (c *chain) decide() {
	id, ok := pickID(c.t, c.ran, "decide")
	if !ok {
		return
	}
	s := c.ran[id]
	delete(c.ran, id)
	last := uint64(0)
	if len(c.kept) > 0 {
		last = c.kept[len(c.kept)-1].id
	}
	if id < last || !rapid.Bool().Draw(c.t, "complete") || !c.filesExist(s.h) {
		c.abort(s)
		return
	}
	c.b.NotifyCheckpointComplete(id)
	c.kept = append(c.kept, s)
	var dropped []*chainSnap
	if len(c.kept) > c.retain {
		dropped = c.kept[:len(c.kept)-c.retain]
		c.kept = c.kept[len(c.kept)-c.retain:]
	}
	for _, d := range dropped {
		c.discard(d.h)
	}
	// The coordinator subsumes older checkpoints that are still open.
	for oid, o := range c.ran {
		if oid < id {
			delete(c.ran, oid)
			c.abort(o)
		}
	}
	for oid, o := range c.pending {
		if oid < id {
			delete(c.pending, oid)
			o.p.Release()
			c.b.NotifyCheckpointAborted(oid)
		}
	}
}

// filesExist is the catalog's completion check: a checkpoint whose files
// are not all present is refused, never completed. A snapshot that ran
// while checkpoint M was its confirmed base may reference M's files; if M
// is dropped by retention before the snapshot completes, those files are
// gone and the completion is refused (the checkpoint fails; nothing
// completed ever points at a missing file).
func (c *chain) filesExist(h *backend.Handle) bool {
	for p := range sharedPaths(h) {
		if _, err := c.store.Stat(c.ctx, p); err != nil {
			return false
		}
	}
	return true
}

func (c *chain) abort(s *chainSnap) {
	c.b.NotifyCheckpointAborted(s.id)
	c.discard(s.h)
}

// discard deletes the shared files of h that no retained checkpoint refers
// to, as the registry does for an aborted or no longer retained checkpoint.
// It knows nothing of checkpoints still open: they are not registered yet.
func (c *chain) discard(h *backend.Handle) {
	live := map[string]bool{}
	for _, s := range c.kept {
		for p := range sharedPaths(s.h) {
			live[p] = true
		}
	}
	var doomed []string
	for p := range sharedPaths(h) {
		if !live[p] {
			doomed = append(doomed, p)
		}
	}
	if err := c.store.DeleteBatch(c.ctx, doomed); err != nil {
		c.t.Fatal(err)
	}
}

func (c *chain) check() {
	if len(c.kept) == 0 {
		return
	}
	s := c.kept[rapid.IntRange(0, len(c.kept)-1).Draw(c.t, "check")]
	r := c.open(s.h)
	defer r.Close()
	got := dumpRapid(c.t, r)
	if len(got) != len(s.want) {
		c.t.Fatalf("checkpoint %d restored %d entries, froze %d", s.id, len(got), len(s.want))
	}
	for k, v := range s.want {
		if got[k] != v {
			c.t.Fatalf("checkpoint %d: entry %x = %x, froze %x", s.id, k, got[k], v)
		}
	}
}

func dumpRapid(t *rapid.T, b *Backend) map[string]string {
	out := map[string]string{}
	err := engine{b.db}.Scan(nil, nil, func(k, v []byte) (bool, error) {
		out[string(k)] = string(v)
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCheckpointChainUnderGC: the placeholder rule and the confirmed base
// hold under any order of runs, confirmations and aborts, with the registry
// deleting what nothing retained refers to.
func TestCheckpointChainUnderGC(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		c := &chain{t: rt, ctx: context.Background(), store: memstore.New(),
			pending: map[uint64]*chainSnap{}, ran: map[uint64]*chainSnap{}, retain: rapid.IntRange(1, 3).Draw(rt, "retain")}
		c.b = c.open(nil)
		defer c.b.Close()
		defer func() {
			for _, s := range c.pending {
				s.p.Release()
			}
		}()
		rt.Repeat(map[string]func(*rapid.T){
			"write":    func(*rapid.T) { c.write() },
			"snapshot": func(*rapid.T) { c.snapshot() },
			"run":      func(*rapid.T) { c.run() },
			"decide":   func(*rapid.T) { c.decide() },
			"check":    func(*rapid.T) { c.check() },
			"":         func(*rapid.T) {},
		})
	})
}
