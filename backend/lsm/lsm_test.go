package lsm

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/statedhq/stated/backend"
)

func TestKindsRoundTripThroughCheckpoint(t *testing.T) {
	e := newEnv(t)
	b := e.open(full(), nil)
	k := key(5, "k")
	must(t, b.Put("v", k, []byte("x")))
	must(t, b.ListAppend("l", k, []byte("a"), []byte("b")))
	must(t, b.DB().Flush()) // the next operands land in another SST: merge across files
	must(t, b.ListAppend("l", k, []byte("c")))
	must(t, b.MapPut("m", k, []byte("u1"), []byte("w1")))
	must(t, b.AggregateAdd("a", k, backend.Int64(3)))
	must(t, b.AggregateAdd("a", k, backend.Int64(4)))
	must(t, b.RegisterTimer("t", backend.Timer{KeyGroup: 5, Key: []byte("k"), Timestamp: 10}))
	h := checkpoint(t, b, 1)
	t.Logf("files:\n%s", fileNames(h))
	must(t, b.Put("v", k, []byte("after")))

	r := e.open(full(), func(o *backend.Options, _ *Options) { o.Restore = []*backend.Handle{h} })
	if v, ok, err := r.Get("v", k); err != nil || !ok || string(v) != "x" {
		t.Fatalf("value = %q %v %v", v, ok, err)
	}
	if l, err := r.ListGet("l", k); err != nil || !reflect.DeepEqual(l, [][]byte{[]byte("a"), []byte("b"), []byte("c")}) {
		t.Fatalf("list = %q %v", l, err)
	}
	if v, ok, _ := r.MapGet("m", k, []byte("u1")); !ok || string(v) != "w1" {
		t.Fatalf("map = %q", v)
	}
	if n, ok, _ := r.AggregateGet("a", k); !ok || n.Int != 7 {
		t.Fatalf("aggregate = %v", n)
	}
	if ts, _ := r.PollTimers("t", 100, 0); len(ts) != 1 || ts[0].Timestamp != 10 {
		t.Fatalf("timers = %v", ts)
	}
	if got := r.States(); !reflect.DeepEqual(got, b.States()) {
		t.Fatalf("states = %v", got)
	}
}

func TestCloseIsIdempotentAndPendingSnapshotSurvives(t *testing.T) {
	e := newEnv(t)
	b := e.open(full(), nil)
	fill(t, b, full(), 100, "a")
	p, err := b.Snapshot(context.Background(), 1)
	must(t, err)
	cp, err := b.CanonicalSnapshot(context.Background(), 2, e.store, "sp")
	must(t, err)
	must(t, b.Close())
	if _, err := e.fs.Stat(b.dbDir); err != nil {
		t.Fatalf("the store went away while a canonical snapshot still reads it: %v", err)
	}
	ch, err := cp.Run(context.Background())
	must(t, err)
	if _, err := e.fs.Stat(b.dbDir); err == nil {
		t.Fatal("the local store outlived the last canonical snapshot after Close")
	}
	must(t, b.Close())
	if err := b.Put("v", key(1, "x"), nil); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("put after close: %v", err)
	}
	if _, err := b.Snapshot(context.Background(), 2); !errors.Is(err, backend.ErrClosed) {
		t.Fatalf("snapshot after close: %v", err)
	}
	h, err := p.Run(context.Background())
	must(t, err)
	if _, err := p.Run(context.Background()); err == nil {
		t.Fatal("second Run succeeded")
	}
	for _, h := range []*backend.Handle{h, ch} {
		r := e.open(full(), func(o *backend.Options, _ *Options) { o.Restore = []*backend.Handle{h} })
		if v, ok, _ := r.Get("v", key(1, "k000001")); !ok || string(v) != "a-1" {
			t.Fatalf("restored from %s handle: %q %v", h.Backend, v, ok)
		}
	}
}
