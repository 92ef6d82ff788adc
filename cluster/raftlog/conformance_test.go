package raftlog_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"

	"github.com/statedhq/stated/cluster/raftlog"
)

// store is what raft is given: both interfaces in one value.
type store interface {
	raft.LogStore
	raft.StableStore
}

// harness builds a store for the suite, and a function that closes it
// and opens the same store again (nil for stores that keep nothing).
type harness func(t *testing.T) (store, func(t *testing.T, s store) store)

func openMem(t *testing.T, fs vfs.FS, dir string) *raftlog.Store {
	t.Helper()
	s, err := raftlog.Open(dir, raftlog.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func pebbleHarness(t *testing.T) (store, func(t *testing.T, s store) store) {
	fs := vfs.NewMem()
	return openMem(t, fs, "/raft/log"), func(t *testing.T, s store) store {
		if err := s.(*raftlog.Store).Close(); err != nil {
			t.Fatal(err)
		}
		return openMem(t, fs, "/raft/log")
	}
}

// TestConformance runs the suite on this store, and on raft's own
// InmemStore: the reference passing it shows that the suite asks what
// raft's stores do, not what this one happens to do.
func TestConformance(t *testing.T) {
	t.Run("pebble", func(t *testing.T) { runSuite(t, pebbleHarness) })
	t.Run("raft-inmem-reference", func(t *testing.T) {
		runSuite(t, func(*testing.T) (store, func(*testing.T, store) store) { return raft.NewInmemStore(), nil })
	})
}

func entry(i, term uint64) *raft.Log {
	return &raft.Log{Index: i, Term: term, Type: raft.LogCommand, Data: []byte(fmt.Sprintf("cmd-%d-%d", i, term))}
}

func entries(from, to, term uint64) []*raft.Log {
	var out []*raft.Log
	for i := from; i <= to; i++ {
		out = append(out, entry(i, term))
	}
	return out
}

func bounds(t *testing.T, s raft.LogStore, first, last uint64) {
	t.Helper()
	f, err := s.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	if f != first || l != last {
		t.Fatalf("bounds [%d, %d], want [%d, %d]", f, l, first, last)
	}
}

func has(t *testing.T, s raft.LogStore, want *raft.Log) {
	t.Helper()
	var got raft.Log
	if err := s.GetLog(want.Index, &got); err != nil {
		t.Fatalf("GetLog(%d): %v", want.Index, err)
	}
	if got.Index != want.Index || got.Term != want.Term || got.Type != want.Type || !bytes.Equal(got.Data, want.Data) ||
		!bytes.Equal(got.Extensions, want.Extensions) || !got.AppendedAt.Equal(want.AppendedAt) {
		t.Fatalf("GetLog(%d) = %+v, want %+v", want.Index, got, *want)
	}
}

func missing(t *testing.T, s raft.LogStore, idx uint64) {
	t.Helper()
	var got raft.Log
	if err := s.GetLog(idx, &got); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("GetLog(%d) of a missing entry: %v, want raft.ErrLogNotFound", idx, err)
	}
}

func runSuite(t *testing.T, h harness) {
	var reopenFn func(*testing.T, store) store
	open := func(t *testing.T) store {
		s, r := h(t)
		reopenFn = r
		return s
	}
	reopen := func(t *testing.T, s store) store {
		if reopenFn == nil {
			return s
		}
		return reopenFn(t, s)
	}
	t.Run("empty", func(t *testing.T) {
		s := open(t)
		bounds(t, s, 0, 0)
		missing(t, s, 1)
		if v, err := s.Get([]byte("CurrentTerm")); err == nil || err.Error() != "not found" || len(v) != 0 {
			// raft compares the text: HasExistingState, NewRaft, vote requests.
			t.Fatalf("Get of a key never set: %q, %v; want the error \"not found\"", v, err)
		}
		if v, err := s.GetUint64([]byte("CurrentTerm")); err != nil || v != 0 {
			t.Fatalf("GetUint64 of a key never set: %d, %v", v, err)
		}
	})
	t.Run("append-read-reopen", func(t *testing.T) {
		s := open(t)
		at := time.Unix(1700000000, 123456789)
		first := &raft.Log{Index: 1, Term: 1, Type: raft.LogConfiguration, Data: []byte("conf"), Extensions: []byte("ext"), AppendedAt: at}
		if err := s.StoreLog(first); err != nil {
			t.Fatal(err)
		}
		if err := s.StoreLogs(entries(2, 100, 1)); err != nil {
			t.Fatal(err)
		}
		empty := &raft.Log{Index: 101, Term: 2, Type: raft.LogNoop}
		if err := s.StoreLogs([]*raft.Log{empty}); err != nil {
			t.Fatal(err)
		}
		s = reopen(t, s)
		bounds(t, s, 1, 101)
		has(t, s, first)
		has(t, s, entry(50, 1))
		has(t, s, empty)
		missing(t, s, 102)
		missing(t, s, 0)
	})
	t.Run("head-truncation", func(t *testing.T) {
		// Compaction after a snapshot: raft deletes from the first index.
		s := open(t)
		if err := s.StoreLogs(entries(1, 50, 1)); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteRange(1, 30); err != nil {
			t.Fatal(err)
		}
		s = reopen(t, s)
		bounds(t, s, 31, 50)
		missing(t, s, 30)
		has(t, s, entry(31, 1))
	})
	t.Run("tail-truncation-then-append", func(t *testing.T) {
		// "clearing log suffix": a follower drops entries a new leader
		// does not have and takes the leader's; then restarts, twice
		// (raft-wal v0.4.0 failed at the second).
		s := open(t)
		if err := s.StoreLogs(entries(1, 20, 1)); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteRange(15, 20); err != nil {
			t.Fatal(err)
		}
		bounds(t, s, 1, 14)
		s = reopen(t, s)
		if err := s.StoreLogs(entries(15, 25, 2)); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			s = reopen(t, s)
			bounds(t, s, 1, 25)
			for i := uint64(1); i <= 14; i++ {
				has(t, s, entry(i, 1))
			}
			for i := uint64(15); i <= 25; i++ {
				has(t, s, entry(i, 2))
			}
		}
	})
	t.Run("overwrite", func(t *testing.T) {
		s := open(t)
		if err := s.StoreLogs(entries(1, 10, 1)); err != nil {
			t.Fatal(err)
		}
		if err := s.StoreLogs(entries(5, 10, 3)); err != nil {
			t.Fatal(err)
		}
		has(t, s, entry(4, 1))
		has(t, s, entry(5, 3))
		bounds(t, s, 1, 10)
	})
	t.Run("delete-all-and-start-after-a-gap", func(t *testing.T) {
		// After a snapshot is installed, raft may store entries far past
		// the old ones.
		s := open(t)
		if err := s.StoreLogs(entries(1, 10, 1)); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteRange(1, 10); err != nil {
			t.Fatal(err)
		}
		bounds(t, s, 0, 0)
		if err := s.StoreLogs(entries(1000, 1010, 4)); err != nil {
			t.Fatal(err)
		}
		s = reopen(t, s)
		bounds(t, s, 1000, 1010)
		has(t, s, entry(1000, 4))
		missing(t, s, 999)
	})
	t.Run("stable", func(t *testing.T) {
		s := open(t)
		if err := s.SetUint64([]byte("CurrentTerm"), 7); err != nil {
			t.Fatal(err)
		}
		if err := s.Set([]byte("LastVoteCand"), []byte("n2")); err != nil {
			t.Fatal(err)
		}
		if err := s.SetUint64([]byte("CurrentTerm"), 8); err != nil {
			t.Fatal(err)
		}
		s = reopen(t, s)
		if v, err := s.GetUint64([]byte("CurrentTerm")); err != nil || v != 8 {
			t.Fatalf("CurrentTerm = %d, %v; want 8", v, err)
		}
		if v, err := s.Get([]byte("LastVoteCand")); err != nil || string(v) != "n2" {
			t.Fatalf("LastVoteCand = %q, %v", v, err)
		}
		// A stable key and a log entry do not share a key space.
		if err := s.StoreLog(entry(1, 1)); err != nil {
			t.Fatal(err)
		}
		bounds(t, s, 1, 1)
	})
}

// Raft's own start on this store: bootstrap, elect itself, apply, and
// come back after a restart with its term and log.
func TestRaftRunsOnStore(t *testing.T) {
	fs := vfs.NewMem()
	s := openMem(t, fs, "/r")
	snaps := raft.NewInmemSnapshotStore()
	start := func(st *raftlog.Store) (*raft.Raft, *countFSM) {
		conf := raft.DefaultConfig()
		conf.LocalID = "a"
		conf.HeartbeatTimeout, conf.ElectionTimeout = 50*time.Millisecond, 50*time.Millisecond
		conf.LeaderLeaseTimeout, conf.CommitTimeout = 50*time.Millisecond, 5*time.Millisecond
		conf.LogLevel = "ERROR"
		_, trans := raft.NewInmemTransport("a")
		if has, err := raft.HasExistingState(st, st, snaps); err != nil {
			t.Fatal(err)
		} else if !has {
			if err := raft.BootstrapCluster(conf, st, st, snaps, trans, raft.Configuration{Servers: []raft.Server{{ID: "a", Address: trans.LocalAddr()}}}); err != nil {
				t.Fatal(err)
			}
		}
		f := &countFSM{}
		r, err := raft.NewRaft(conf, f, st, st, snaps, trans)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-time.After(10 * time.Second):
			t.Fatal("no leader")
		case <-waitLeader(r):
		}
		return r, f
	}
	r, _ := start(s)
	for i := range 20 {
		if err := r.Apply([]byte{byte(i)}, 5*time.Second).Error(); err != nil {
			t.Fatal(err)
		}
	}
	term, _ := s.GetUint64([]byte("CurrentTerm"))
	if err := r.Shutdown().Error(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openMem(t, fs, "/r")
	r, f := start(s)
	defer r.Shutdown()
	if err := r.Barrier(5 * time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	if n := f.count(); n != 20 {
		t.Fatalf("after a restart the machine applied %d commands, want the 20 in the log", n)
	}
	if got, err := s.GetUint64([]byte("CurrentTerm")); err != nil || term == 0 || got <= term {
		// A restarted single voter elects itself in a new term.
		t.Fatalf("term %d (%v) after a restart, %d before", got, err, term)
	}
}

// waitLeader closes its channel once r leads; its goroutine gives up
// after 10 s.
func waitLeader(r *raft.Raft) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if r.State() == raft.Leader {
				close(ch)
				return
			}
		}
	}()
	return ch
}

// countFSM counts the commands it applied.
type countFSM struct {
	mu sync.Mutex
	n  int
}

func (f *countFSM) Apply(*raft.Log) any { f.mu.Lock(); f.n++; f.mu.Unlock(); return nil }
func (f *countFSM) count() int          { f.mu.Lock(); defer f.mu.Unlock(); return f.n }
func (f *countFSM) Snapshot() (raft.FSMSnapshot, error) {
	return nil, errors.New("countFSM takes no snapshots")
}
func (f *countFSM) Restore(io.ReadCloser) error { return errors.New("countFSM takes no snapshots") }

// GetLog's buffers are the caller's: raft's in-memory store shares them,
// but Pebble reuses its own, so this store must copy.
func TestGetLogCopies(t *testing.T) {
	s := openMem(t, vfs.NewMem(), "/r")
	l := entry(1, 1)
	if err := s.StoreLog(l); err != nil {
		t.Fatal(err)
	}
	var got raft.Log
	if err := s.GetLog(1, &got); err != nil {
		t.Fatal(err)
	}
	got.Data[0] ^= 0xff
	has(t, s, entry(1, 1))
}

// DeleteRange up to the largest index (raft never asks, but the bound
// must not wrap around to an empty range).
func TestDeleteRangeToTheEnd(t *testing.T) {
	s := openMem(t, vfs.NewMem(), "/r")
	if err := s.StoreLogs(entries(1, 10, 1)); err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLogs([]*raft.Log{entry(math.MaxUint64, 1)}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(5, math.MaxUint64); err != nil {
		t.Fatal(err)
	}
	bounds(t, s, 1, 4)
	if err := s.DeleteRange(3, 2); err != nil { // min > max: nothing
		t.Fatal(err)
	}
	bounds(t, s, 1, 4)
}
