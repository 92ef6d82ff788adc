package kvstate_test

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/internal/kvstate"
	"github.com/statedhq/stated/backend/internal/memkv"
)

func newState(t *testing.T, now *time.Time) *kvstate.State {
	t.Helper()
	s, err := kvstate.New(memkv.New(), kvstate.Config{
		Info:         backend.Info{Kind: backend.KindHeap, Task: backend.TaskID{Job: "j", Operator: "o"}, KeyGroups: backend.KeyGroupRange{Start: 0, End: 9}, MaxParallelism: 128},
		Clock:        func() time.Time { return *now },
		MaxValueSize: 1 << 10,
		States: []backend.StateDescriptor{
			{Name: "v", Kind: backend.KindValue},
			{Name: "vt", Kind: backend.KindValue, TTL: time.Second, TTLUpdate: backend.TTLOnReadAndWrite},
			{Name: "l", Kind: backend.KindList, TTL: time.Second},
			{Name: "m", Kind: backend.KindMap},
			{Name: "a", Kind: backend.KindAggregate, Aggregate: backend.AggSum, Number: backend.NumInt64},
			{Name: "t", Kind: backend.KindTimers},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestStateKindsSmoke(t *testing.T) {
	now := time.Unix(1000, 0)
	s := newState(t, &now)
	k := backend.Key{KeyGroup: 3, Key: []byte("k"), Namespace: []byte("ns")}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.Put("v", k, []byte("x")))
	if v, ok, err := s.Get("v", k); err != nil || !ok || string(v) != "x" {
		t.Fatalf("get = %q %v %v", v, ok, err)
	}
	if _, ok, _ := s.Get("v", backend.Key{KeyGroup: 3, Key: []byte("k")}); ok {
		t.Fatal("namespace ignored")
	}
	must(s.ListAppend("l", k, []byte("a"), []byte("b")))
	now = now.Add(600 * time.Millisecond)
	must(s.ListAppend("l", k, []byte("c")))
	now = now.Add(600 * time.Millisecond)
	if l, _ := s.ListGet("l", k); !reflect.DeepEqual(l, [][]byte{[]byte("c")}) {
		t.Fatalf("list after partial expiry = %q", l)
	}
	for _, uk := range []string{"b", "a", "c"} {
		must(s.MapPut("m", k, []byte(uk), []byte("V"+uk)))
	}
	es, more, err := s.MapIterate("m", k, []byte("a"), 1)
	if err != nil || !more || len(es) != 1 || string(es[0].UserKey) != "b" {
		t.Fatalf("iterate = %v %v %v", es, more, err)
	}
	must(s.AggregateAdd("a", k, backend.Int64(5)))
	must(s.AggregateAdd("a", k, backend.Int64(-2)))
	if n, ok, _ := s.AggregateGet("a", k); !ok || n.Int != 3 {
		t.Fatalf("agg = %v", n)
	}
	for _, ts := range []int64{30, -5, 10} {
		must(s.RegisterTimer("t", backend.Timer{KeyGroup: int(ts+10) % 10, Key: []byte("k"), Timestamp: ts}))
	}
	ts, err := s.PollTimers("t", 10, 0)
	if err != nil || len(ts) != 2 || ts[0].Timestamp != -5 || ts[1].Timestamp != 10 {
		t.Fatalf("poll = %v %v", ts, err)
	}
	if ts, _ := s.PollTimers("t", 10, 0); len(ts) != 0 {
		t.Fatal("polled timers not removed")
	}
	must(s.Put("vt", k, []byte("y")))
	for i := 0; i < 3; i++ {
		now = now.Add(700 * time.Millisecond)
		if _, ok, _ := s.Get("vt", k); !ok {
			t.Fatal("read did not refresh ttl")
		}
	}
	now = now.Add(1001 * time.Millisecond)
	if _, ok, _ := s.Get("vt", k); ok {
		t.Fatal("expired value returned")
	}
	if err := s.Put("v", backend.Key{KeyGroup: 10}, nil); !errors.Is(err, backend.ErrKeyGroupOutOfRange) {
		t.Fatalf("out of range: %v", err)
	}
	if err := s.Put("m", k, nil); !errors.Is(err, backend.ErrWrongKind) {
		t.Fatalf("wrong kind: %v", err)
	}
	if _, _, err := s.Get("nope", k); !errors.Is(err, backend.ErrUnknownState) {
		t.Fatalf("unknown: %v", err)
	}
	if err := s.Put("v", k, make([]byte, 2000)); !errors.Is(err, backend.ErrInvalidArgument) {
		t.Fatalf("oversized: %v", err)
	}
	must(s.Delete("m", k))
	if es, _, _ := s.MapIterate("m", k, nil, 0); len(es) != 0 {
		t.Fatal("map delete left entries")
	}
}
