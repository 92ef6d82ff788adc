package raftlog_test

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"

	"github.com/statedhq/stated/cluster/raftlog"
)

// state is what the store must hold: its entries (index -> term) and its
// stable values.
type state struct {
	log    map[uint64]uint64
	stable map[string]string
}

func (s state) clone() state {
	return state{log: maps.Clone(s.log), stable: maps.Clone(s.stable)}
}

// TestCrashAtRandomPoints: a writer drives the store the way raft does
// (appends, tail truncations with new terms, head truncations, term and
// vote writes) while the file system is cloned as a power loss would
// leave it (vfs.CrashClone: unsynced data kept at a random rate) at a
// random moment, often in the middle of a call. The clone must open, and
// hold exactly the state after some prefix of the calls: every call that
// returned before the crash, and of the one in flight all or nothing.
func TestCrashAtRandomPoints(t *testing.T) {
	rounds := 150
	if testing.Short() {
		rounds = 40
	}
	for round := range rounds {
		seed := uint64(round)
		t.Run(fmt.Sprint(seed), func(t *testing.T) { crashRound(t, seed) })
	}
}

func crashRound(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	mem := vfs.NewCrashableMem()
	s, err := raftlog.Open("/raft/log", raftlog.Options{FS: mem})
	if err != nil {
		t.Fatal(err)
	}
	// history[k] is the state after k calls returned.
	var mu sync.Mutex
	history := []state{{log: map[uint64]uint64{}, stable: map[string]string{}}}
	var done atomic.Int64
	stop := make(chan struct{})
	writerDone := make(chan error, 1)
	wrng := rand.New(rand.NewPCG(seed, 0x3171))
	go func() {
		cur := history[0].clone()
		term, first, last := uint64(1), uint64(1), uint64(0)
		for {
			select {
			case <-stop:
				writerDone <- nil
				return
			default:
			}
			var err error
			switch op := wrng.IntN(10); {
			case op < 6: // append a batch
				n := 1 + wrng.Uint64N(20)
				var logs []*raft.Log
				for i := last + 1; i <= last+n; i++ {
					logs = append(logs, &raft.Log{Index: i, Term: term, Data: fmt.Appendf(nil, "%d/%d", i, term)})
				}
				if err = s.StoreLogs(logs); err == nil {
					for _, l := range logs {
						cur.log[l.Index] = l.Term
					}
					if last == 0 {
						first = 1
					}
					last += n
				}
			case op < 7 && last >= first && last > 0: // clearing log suffix
				from := first + wrng.Uint64N(last-first+1)
				if err = s.DeleteRange(from, last); err == nil {
					for i := from; i <= last; i++ {
						delete(cur.log, i)
					}
					last = from - 1
					term++
				}
			case op < 8 && last > first: // compaction after a snapshot
				to := first + wrng.Uint64N(last-first)
				if err = s.DeleteRange(first, to); err == nil {
					for i := first; i <= to; i++ {
						delete(cur.log, i)
					}
					first = to + 1
				}
			default: // a new term, a vote
				term++
				if wrng.IntN(2) == 0 {
					err = s.SetUint64([]byte("CurrentTerm"), term)
					if err == nil {
						cur.stable["CurrentTerm"] = fmt.Sprint(term)
					}
				} else {
					cand := fmt.Sprintf("n%d", wrng.IntN(5))
					if err = s.Set([]byte("LastVoteCand"), []byte(cand)); err == nil {
						cur.stable["LastVoteCand"] = cand
					}
				}
			}
			if err != nil {
				writerDone <- err
				return
			}
			mu.Lock()
			history = append(history, cur.clone())
			mu.Unlock()
			done.Add(1)
		}
	}()
	time.Sleep(time.Duration(rng.IntN(30000)) * time.Microsecond)
	before := done.Load()
	crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rand.New(rand.NewPCG(seed, 7))})
	after := done.Load()
	close(stop)
	if err := <-writerDone; err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	r, err := raftlog.Open("/raft/log", raftlog.Options{FS: crashed})
	if err != nil {
		t.Fatalf("open after a crash after %d calls: %v", before, err)
	}
	defer r.Close()
	got := read(t, r)
	mu.Lock()
	defer mu.Unlock()
	// Calls before the clone are in; the one in flight (at most the one
	// after the last that returned during it) may be.
	for k := before; k <= after+1 && k < int64(len(history)); k++ {
		if equal(got, history[k]) {
			// And the store goes on: raft appends after a restart.
			next := uint64(0)
			for i := range got.log {
				next = max(next, i)
			}
			if err := r.StoreLogs([]*raft.Log{{Index: next + 1, Term: 99}}); err != nil {
				t.Fatalf("append after the crash: %v", err)
			}
			return
		}
	}
	t.Fatalf("after a crash between call %d and %d the store holds %d entries and %v, which is no state the calls left (the one %d calls left: %d entries, %v)",
		before, after+1, len(got.log), got.stable, before, len(history[before].log), history[before].stable)
}

func read(t *testing.T, s *raftlog.Store) state {
	t.Helper()
	st := state{log: map[uint64]uint64{}, stable: map[string]string{}}
	first, err := s.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	last, err := s.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	if n, err := s.Check(); err != nil {
		t.Fatalf("check after a crash: %v", err)
	} else if first > 0 && uint64(n) != last-first+1 {
		t.Fatalf("%d entries between %d and %d: the log has a hole", n, first, last)
	}
	for i := first; first > 0 && i <= last; i++ {
		var l raft.Log
		if err := s.GetLog(i, &l); err != nil {
			t.Fatalf("entry %d after a crash: %v", i, err)
		}
		if want := fmt.Sprintf("%d/%d", i, l.Term); string(l.Data) != want {
			t.Fatalf("entry %d holds %q, want %q", i, l.Data, want)
		}
		st.log[i] = l.Term
	}
	if v, err := s.GetUint64([]byte("CurrentTerm")); err != nil {
		t.Fatal(err)
	} else if v != 0 {
		st.stable["CurrentTerm"] = fmt.Sprint(v)
	}
	if v, err := s.Get([]byte("LastVoteCand")); err == nil {
		st.stable["LastVoteCand"] = string(v)
	} else if !errors.Is(err, raftlog.ErrKeyNotFound) {
		t.Fatal(err)
	}
	return st
}

func equal(a, b state) bool { return maps.Equal(a.log, b.log) && maps.Equal(a.stable, b.stable) }
