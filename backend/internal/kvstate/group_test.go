package kvstate_test

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/internal/kvstate"
	"github.com/statedhq/stated/backend/internal/memkv"
)

// batchEngine is memkv with batches that apply their writes at Commit (or
// fail it with failCommit, applying nothing), like Pebble's.
type batchEngine struct {
	*memkv.Tree
	failCommit error
	commits    int
}

type batchOp struct {
	kind       string
	key, value []byte
}

type fakeBatch struct {
	e    *batchEngine
	ops  []batchOp
	done bool
}

func (e *batchEngine) NewBatch() kvstate.Batch { return &fakeBatch{e: e} }

func (b *fakeBatch) add(kind string, k, v []byte) error {
	if b.done {
		return errors.New("batch used after release")
	}
	b.ops = append(b.ops, batchOp{kind, append([]byte{}, k...), append([]byte{}, v...)})
	return nil
}

func (b *fakeBatch) Set(k, v []byte) error   { return b.add("set", k, v) }
func (b *fakeBatch) Merge(k, v []byte) error { return b.add("merge", k, v) }
func (b *fakeBatch) Delete(k []byte) error   { return b.add("delete", k, nil) }
func (b *fakeBatch) Empty() bool             { return len(b.ops) == 0 }
func (b *fakeBatch) Close() error            { b.done = true; return nil }
func (b *fakeBatch) DeleteRange(s, e []byte) error {
	if e == nil {
		return errors.New("unbounded range in a batch")
	}
	return b.add("range", s, e)
}

func (b *fakeBatch) Commit() error {
	if b.done {
		return errors.New("commit after release")
	}
	b.done = true
	if b.e.failCommit != nil {
		return b.e.failCommit
	}
	b.e.commits++
	for _, op := range b.ops {
		var err error
		switch op.kind {
		case "set":
			err = b.e.Set(op.key, op.value)
		case "merge":
			err = b.e.Merge(op.key, op.value)
		case "delete":
			err = b.e.Delete(op.key)
		case "range":
			err = b.e.DeleteRange(op.key, op.value)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

var groupStates = []backend.StateDescriptor{
	{Name: "v", Kind: backend.KindValue},
	{Name: "l", Kind: backend.KindList},
	{Name: "m", Kind: backend.KindMap},
	{Name: "t", Kind: backend.KindTimers},
	{Name: "ve", Kind: backend.KindValue, TTL: time.Second},
	{Name: "vt", Kind: backend.KindValue, TTL: time.Second, TTLUpdate: backend.TTLOnReadAndWrite},
}

var groupNow = time.Unix(1000, 0)

func newGroupState(t *testing.T, eng kvstate.Engine) *kvstate.State {
	t.Helper()
	s, err := kvstate.New(eng, kvstate.Config{
		Info:         backend.Info{Kind: backend.KindLSM, Task: backend.TaskID{Job: "j", Operator: "o"}, KeyGroups: backend.KeyGroupRange{Start: 0, End: 9}, MaxParallelism: 128},
		Clock:        func() time.Time { return groupNow },
		MaxValueSize: 16,
		States:       groupStates,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func key(s string) backend.Key { return backend.Key{KeyGroup: 1, Key: []byte(s)} }

// TestGroupCommitsOnceWithPerOpErrors: a group's writes reach the engine
// in one commit, after fn returned; each write's validation error is its
// own and leaves the others alone; the results equal the same writes made
// one by one.
func TestGroupCommitsOnceWithPerOpErrors(t *testing.T) {
	for _, batched := range []bool{true, false} {
		t.Run(fmt.Sprint("batched=", batched), func(t *testing.T) {
			be := &batchEngine{Tree: memkv.New()}
			var eng kvstate.Engine = be.Tree
			if batched {
				eng = be
			}
			s := newGroupState(t, eng)
			one := newGroupState(t, memkv.New())
			m := backend.Key{KeyGroup: 2, Key: []byte("mk")}
			writes := []func(w backend.GroupWriter) error{
				func(w backend.GroupWriter) error { return w.Put("v", key("a"), []byte("1")) },
				func(w backend.GroupWriter) error { return w.Put("v", key("a"), []byte("2")) }, // same key: issue order
				func(w backend.GroupWriter) error { return w.Put("v", key("b"), []byte("x")) },
				func(w backend.GroupWriter) error { return w.Delete("v", key("b")) },
				func(w backend.GroupWriter) error { return w.Put("l", key("a"), []byte("wrong kind")) },
				func(w backend.GroupWriter) error {
					return w.Put("v", backend.Key{KeyGroup: 50, Key: []byte("a")}, []byte("out of range"))
				},
				func(w backend.GroupWriter) error { return w.Put("v", key("c"), make([]byte, 17)) }, // too large
				func(w backend.GroupWriter) error { return w.ListAppend("l", key("a"), []byte("e1"), []byte("e2")) },
				func(w backend.GroupWriter) error { return w.ListAppend("l", key("a"), []byte("e3")) },
				func(w backend.GroupWriter) error { return w.MapPut("m", m, []byte("u1"), []byte("v1")) },
				func(w backend.GroupWriter) error { return w.MapPut("m", m, []byte("u2"), []byte("v2")) },
				func(w backend.GroupWriter) error { return w.MapRemove("m", m, []byte("u1")) },
				func(w backend.GroupWriter) error { return w.Delete("m", key("gone")) },
				func(w backend.GroupWriter) error {
					return w.RegisterTimer("t", backend.Timer{KeyGroup: 3, Key: []byte("k"), Timestamp: 7})
				},
				func(w backend.GroupWriter) error { return w.Put("nope", key("a"), nil) },
			}
			var got []error
			var kept backend.GroupWriter
			err := s.Group(func(w backend.GroupWriter) {
				kept = w
				for _, f := range writes {
					got = append(got, f(w))
				}
				if batched && be.Len() != 0 {
					t.Errorf("engine has %d keys before the group committed", be.Len())
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if batched && be.commits != 1 {
				t.Fatalf("%d commits, want 1", be.commits)
			}
			for i, f := range writes {
				var werr error
				if err := one.Group(func(w backend.GroupWriter) { werr = f(w) }); err != nil {
					t.Fatal(err)
				}
				if (got[i] == nil) != (werr == nil) || (got[i] != nil && got[i].Error() != werr.Error()) {
					t.Fatalf("write %d: error %v, one by one %v", i, got[i], werr)
				}
			}
			for i, wantErr := range []bool{false, false, false, false, true, true, true, false, false, false, false, false, false, false, true} {
				if (got[i] != nil) != wantErr {
					t.Fatalf("write %d: error %v", i, got[i])
				}
			}
			for _, st := range []*kvstate.State{s, one} {
				if v, ok, err := st.Get("v", key("a")); err != nil || !ok || string(v) != "2" {
					t.Fatalf("get a = %q %v %v", v, ok, err)
				}
				if _, ok, _ := st.Get("v", key("b")); ok {
					t.Fatal("b survived its delete")
				}
				if l, _ := st.ListGet("l", key("a")); !reflect.DeepEqual(l, [][]byte{[]byte("e1"), []byte("e2"), []byte("e3")}) {
					t.Fatalf("list = %q", l)
				}
				if e, _, _ := st.MapIterate("m", m, nil, 0); len(e) != 1 || string(e[0].UserKey) != "u2" {
					t.Fatalf("map = %v", e)
				}
				if ts, _ := st.PollTimers("t", 10, 0); len(ts) != 1 || ts[0].Timestamp != 7 {
					t.Fatalf("timers = %v", ts)
				}
			}
			if err := kept.Put("v", key("late"), nil); err == nil {
				t.Fatalf("write after the group: %v", err)
			}
		})
	}
}

// TestGroupCommitFailure: a failed commit is Group's error and applies none
// of the group's writes.
func TestGroupCommitFailure(t *testing.T) {
	boom := errors.New("disk on fire")
	be := &batchEngine{Tree: memkv.New(), failCommit: boom}
	s := newGroupState(t, be)
	var errs []error
	err := s.Group(func(w backend.GroupWriter) {
		errs = append(errs, w.Put("v", key("a"), []byte("1")), w.ListAppend("l", key("a"), []byte("x")))
	})
	if !errors.Is(err, boom) {
		t.Fatalf("group = %v, want the commit's error", err)
	}
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("write errors %v", errs)
	}
	if be.Len() != 0 {
		t.Fatalf("%d keys after a failed commit", be.Len())
	}
	be.failCommit = nil
	if err := s.Put("v", key("a"), []byte("ok")); err != nil {
		t.Fatal(err)
	}
	if v, ok, _ := s.Get("v", key("a")); !ok || string(v) != "ok" {
		t.Fatalf("after failure: %q %v", v, ok)
	}
	// A closed state: every write fails, nothing is committed.
	s.Close()
	if err := s.Group(func(w backend.GroupWriter) { errs = []error{w.Put("v", key("b"), nil)} }); err != nil || !errors.Is(errs[0], backend.ErrClosed) {
		t.Fatalf("closed: group %v, write %v", err, errs[0])
	}
}

// TestGroupAtomicForReadersAndSnapshots: while groups overwrite the same
// keys, concurrent readers and snapshots (Exclusive) always see every key
// of one group, never a mix.
func TestGroupAtomicForReadersAndSnapshots(t *testing.T) {
	be := &batchEngine{Tree: memkv.New()}
	s := newGroupState(t, be)
	const keys, groups = 8, 300
	check := func(vals [][]byte) error {
		for i := range vals {
			if string(vals[i]) != string(vals[0]) {
				return fmt.Errorf("mixed groups: %q", vals)
			}
		}
		return nil
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errc := make(chan error, 2)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			var vals [][]byte
			err := s.Exclusive(func([]backend.StateDescriptor) error {
				// Every stored key is one of state v: flags(0) | payload.
				return be.Scan(nil, nil, func(_, v []byte) (bool, error) {
					vals = append(vals, append([]byte{}, v[1:]...))
					return true, nil
				})
			})
			if err == nil {
				err = check(vals)
			}
			if err != nil {
				errc <- err
				return
			}
		}
	}()
	for g := range groups {
		err := s.Group(func(w backend.GroupWriter) {
			for k := range keys {
				if err := w.Put("v", key(fmt.Sprint(k)), []byte(fmt.Sprint(g))); err != nil {
					t.Error(err)
				}
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		// Acknowledged: every key reads g now.
		for k := range keys {
			if v, _, _ := s.Get("v", key(fmt.Sprint(k))); string(v) != fmt.Sprint(g) {
				t.Fatalf("group %d acknowledged but key %d reads %q", g, k, v)
			}
		}
	}
	close(stop)
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
}

// TestReadGroupMatchesState: the reads of a ReadGroup give what the State
// methods give, errors included; a read that would refresh a TTL is left
// to the State (ErrNotInGroup), and expired entries are absent.
func TestReadGroupMatchesState(t *testing.T) {
	defer func(old time.Time) { groupNow = old }(groupNow)
	s := newGroupState(t, &batchEngine{Tree: memkv.New()})
	m := backend.Key{KeyGroup: 2, Key: []byte("mk")}
	for _, err := range []error{
		s.Put("v", key("a"), []byte("1")), s.Put("v", key("empty"), nil), s.MapPut("m", m, []byte("u"), []byte("mv")),
		s.Put("ve", key("a"), []byte("old")), s.Put("vt", key("a"), []byte("t")),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	groupNow = groupNow.Add(2 * time.Second) // ve/a and vt/a expired
	type read struct {
		state string
		k     backend.Key
		uk    []byte // map reads
	}
	reads := []read{
		{"v", key("a"), nil}, {"v", key("empty"), nil}, {"v", key("none"), nil}, {"ve", key("a"), nil},
		{"l", key("a"), nil}, {"nope", key("a"), nil}, {"v", backend.Key{KeyGroup: 99, Key: []byte("a")}, nil},
		{"v", key(string(make([]byte, 17))), nil},
		{"m", m, []byte("u")}, {"m", m, []byte("x")}, {"m", m, make([]byte, 17)}, {"v", m, []byte("u")},
	}
	type res struct {
		v   []byte
		ok  bool
		err string
	}
	// A group's value is valid until the reader's next read: keep a copy.
	mk := func(v []byte, ok bool, err error) res {
		r := res{v: bytes.Clone(v), ok: ok}
		if err != nil {
			r.err = err.Error()
		}
		return r
	}
	var got, gotContains []res
	var kept backend.GroupReader
	var refreshErr error
	s.ReadGroup(func(r backend.GroupReader) {
		kept = r
		for _, rd := range reads {
			if rd.uk == nil {
				got = append(got, mk(r.Get(rd.state, rd.k)))
				gotContains = append(gotContains, res{})
				continue
			}
			got = append(got, mk(r.MapGet(rd.state, rd.k, rd.uk)))
			ok, err := r.MapContains(rd.state, rd.k, rd.uk)
			gotContains = append(gotContains, mk(nil, ok, err))
		}
		_, _, refreshErr = r.Get("vt", key("a"))
	})
	if !errors.Is(refreshErr, backend.ErrNotInGroup) {
		t.Fatalf("read of a refresh-on-read state in a group: %v", refreshErr)
	}
	for i, rd := range reads {
		var want, wantContains res
		if rd.uk == nil {
			want = mk(s.Get(rd.state, rd.k))
		} else {
			want = mk(s.MapGet(rd.state, rd.k, rd.uk))
			ok, err := s.MapContains(rd.state, rd.k, rd.uk)
			wantContains = mk(nil, ok, err)
		}
		if got[i].ok != want.ok || string(got[i].v) != string(want.v) || got[i].err != want.err ||
			(got[i].ok && got[i].v == nil) || !reflect.DeepEqual(gotContains[i], wantContains) {
			t.Fatalf("read %d (%+v): group %+v / %+v, state %+v / %+v", i, rd, got[i], gotContains[i], want, wantContains)
		}
	}
	if _, _, err := kept.Get("v", key("a")); err == nil {
		t.Fatal("read after the group returned")
	}
}

// TestReadGroupsConcurrentReaders: ReadGroups hands out readers that
// goroutines use at once, each read giving what the State gives; the
// group is one hold of the reader lock (a write waits for all of it), and
// no reader is usable after it.
func TestReadGroupsConcurrentReaders(t *testing.T) {
	s := newGroupState(t, &batchEngine{Tree: memkv.New()})
	const keys, readers = 200, 3
	for k := range keys {
		if err := s.Put("v", key(fmt.Sprint(k)), []byte(fmt.Sprint("val", k))); err != nil {
			t.Fatal(err)
		}
	}
	var wrote atomic.Bool
	var writes sync.WaitGroup
	var kept []backend.GroupReader
	s.ReadGroups(readers, func(rs []backend.GroupReader) {
		if len(rs) != readers {
			t.Errorf("%d readers, asked for %d", len(rs), readers)
			return
		}
		kept = rs
		writes.Add(1)
		go func() {
			defer writes.Done()
			if err := s.Put("v", key("0"), []byte("new")); err != nil {
				t.Error(err)
			}
			wrote.Store(true)
		}()
		var wg sync.WaitGroup
		for _, r := range rs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Every reader reads every key, so that they overlap.
				for k := range keys {
					v, ok, err := r.Get("v", key(fmt.Sprint(k)))
					if err != nil || !ok || string(v) != fmt.Sprint("val", k) {
						t.Errorf("key %d: %q %v %v", k, v, ok, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		time.Sleep(10 * time.Millisecond)
		if wrote.Load() {
			t.Error("a write went through while the read group held the reader lock")
		}
	})
	writes.Wait()
	if v, _, _ := s.Get("v", key("0")); string(v) != "new" {
		t.Fatalf("the write after the group: key 0 reads %q", v)
	}
	for i, r := range kept {
		if _, _, err := r.Get("v", key("1")); err == nil {
			t.Fatalf("reader %d usable after the group returned", i)
		}
	}
}
