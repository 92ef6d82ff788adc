package api_test

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/heap"
	"github.com/statedhq/stated/tiered/memstore"
)

// TestClientMatchesBackend: any sequence of operations, sent through the
// client with any batch size and in-flight limit, gives the same results
// (values and error codes) as the same sequence on a backend called
// directly. The daemon's instance is heap (writes applied one by one) or
// lsm (runs of blind writes applied as one Pebble batch, backend.Grouper).
func TestClientMatchesBackend(t *testing.T) {
	h := startDaemon(t, harnessOpts{})
	n := 0
	rapid.Check(t, func(rt *rapid.T) {
		n++
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c, err := client.Dial(h.sock, client.Options{
			MaxBatchOps: rapid.IntRange(1, 40).Draw(rt, "batch"),
			MaxInFlight: rapid.IntRange(1, 4).Draw(rt, "inflight"),
			FlushDelay:  time.Duration(rapid.IntRange(1, 500).Draw(rt, "delayUs")) * time.Microsecond,
		})
		if err != nil {
			rt.Fatal(err)
		}
		defer c.Close()
		tk := backend.TaskID{Job: "prop", Operator: "op", Subtask: n}
		kind := rapid.SampledFrom([]backend.Kind{backend.KindHeap, backend.KindLSM}).Draw(rt, "backend")
		in, err := c.Open(ctx, client.OpenSpec{Task: tk, KeyGroups: backend.KeyGroupRange{Start: 0, End: 127},
			Backend: kind, States: propStates})
		if err != nil {
			rt.Fatal(err)
		}
		defer in.Close(ctx)
		ref, err := heap.Open(backend.Options{Task: tk, KeyGroups: backend.KeyGroupRange{Start: 0, End: 127},
			States: propStates, Store: memstore.New()}, heap.Options{Snapshots: memstore.New()})
		if err != nil {
			rt.Fatal(err)
		}
		defer ref.Close()

		keys := [][]byte{[]byte("a"), []byte("b"), []byte("c")}
		states := []string{"v", "l", "m", "sum", "fmax", "t", "vt", "mt", "nope"}
		type pending struct {
			desc string
			wait func() (any, error)
			want any
			werr error
		}
		var ps []pending
		for i, nops := 0, rapid.IntRange(1, 120).Draw(rt, "ops"); i < nops; i++ {
			k := rapid.SampledFrom(keys).Draw(rt, "key")
			ns := []byte(rapid.SampledFrom([]string{"", "n1"}).Draw(rt, "ns"))
			st := rapid.SampledFrom(states).Draw(rt, "state")
			bk := backend.Key{KeyGroup: in.KeyGroup(k), Key: k, Namespace: ns}
			if len(ns) == 0 {
				bk.Namespace = nil
			}
			val := []byte(rapid.StringMatching(`[a-z]{0,4}`).Draw(rt, "val"))
			uk := []byte(rapid.SampledFrom([]string{"u1", "u2", "u3"}).Draw(rt, "uk"))
			num := rapid.Int64Range(-5, 5).Draw(rt, "num")
			var p pending
			switch op := rapid.IntRange(0, 14).Draw(rt, "op"); op {
			case 0:
				f := in.Put(st, k, ns, val)
				p = pending{wait: wrap(ctx, f), werr: ref.Put(st, bk, val)}
			case 1:
				f := in.Get(st, k, ns)
				v, ok, err := ref.Get(st, bk)
				p = pending{wait: wrap(ctx, f), want: client.Value{Data: v, Found: ok}, werr: err}
			case 2:
				f := in.Delete(st, k, ns)
				p = pending{wait: wrap(ctx, f), werr: ref.Delete(st, bk)}
			case 3:
				f := in.ListAppend(st, k, ns, val, uk)
				p = pending{wait: wrap(ctx, f), werr: ref.ListAppend(st, bk, val, uk)}
			case 4:
				f := in.ListGet(st, k, ns)
				l, err := ref.ListGet(st, bk)
				p = pending{wait: wrap(ctx, f), want: l, werr: err}
			case 5:
				f := in.MapPut(st, k, ns, uk, val)
				p = pending{wait: wrap(ctx, f), werr: ref.MapPut(st, bk, uk, val)}
			case 6:
				f := in.MapGet(st, k, ns, uk)
				v, ok, err := ref.MapGet(st, bk, uk)
				p = pending{wait: wrap(ctx, f), want: client.Value{Data: v, Found: ok}, werr: err}
			case 7:
				f := in.MapRemove(st, k, ns, uk)
				p = pending{wait: wrap(ctx, f), werr: ref.MapRemove(st, bk, uk)}
			case 8:
				f := in.MapContains(st, k, ns, uk)
				ok, err := ref.MapContains(st, bk, uk)
				p = pending{wait: wrap(ctx, f), want: ok, werr: err}
			case 9:
				limit := rapid.IntRange(0, 3).Draw(rt, "limit")
				f := in.MapIterate(st, k, ns, nil, limit)
				e, more, err := ref.MapIterate(st, bk, nil, limit)
				if len(e) == 0 {
					e = []backend.MapEntry{}
				}
				p = pending{wait: wrap(ctx, f), want: client.MapPage{Entries: e, More: more}, werr: err}
			case 10:
				v := backend.Int64(num)
				if st == "fmax" {
					v = backend.Float64(float64(num) / 2)
				}
				f := in.AggregateAdd(st, k, ns, v)
				p = pending{wait: wrap(ctx, f), werr: ref.AggregateAdd(st, bk, v)}
			case 11:
				f := in.AggregateGet(st, k, ns)
				v, ok, err := ref.AggregateGet(st, bk)
				if !ok {
					v = backend.Number{}
				}
				p = pending{wait: wrap(ctx, f), want: client.Aggregate{Value: v, Found: ok}, werr: err}
			case 12, 13:
				ts := num + 10
				tm := backend.Timer{KeyGroup: bk.KeyGroup, Key: k, Namespace: bk.Namespace, Timestamp: ts}
				if op == 12 {
					f := in.RegisterTimer(st, k, ns, ts)
					p = pending{wait: wrap(ctx, f), werr: ref.RegisterTimer(st, tm)}
				} else {
					f := in.DeleteTimer(st, k, ns, ts)
					p = pending{wait: wrap(ctx, f), werr: ref.DeleteTimer(st, tm)}
				}
			case 14:
				wm := num + 10
				limit := rapid.IntRange(0, 3).Draw(rt, "limit")
				f := in.PollTimers(st, wm, limit)
				tms, err := ref.PollTimers(st, wm, limit)
				if len(tms) == 0 {
					tms = []backend.Timer{}
				}
				for i := range tms {
					if len(tms[i].Namespace) == 0 {
						tms[i].Namespace = nil
					}
				}
				p = pending{wait: wrap(ctx, f), want: tms, werr: err}
			}
			p.desc = fmt.Sprintf("op %d on %q", i, st)
			ps = append(ps, p)
		}
		for _, p := range ps {
			got, err := p.wait()
			if (err == nil) != (p.werr == nil) {
				rt.Fatalf("%s: error %v, backend %v", p.desc, err, p.werr)
			}
			if err != nil {
				continue
			}
			if p.want != nil && !equalResult(got, p.want) {
				rt.Fatalf("%s: got %#v, backend %#v", p.desc, got, p.want)
			}
		}
	})
}

// propStates adds to allStates a value and a map state whose reads refresh
// their TTL (an hour: nothing expires during the test), which point reads
// of a read group leave to the backend's own methods.
var propStates = append(append([]backend.StateDescriptor{}, allStates...),
	backend.StateDescriptor{Name: "vt", Kind: backend.KindValue, TTL: time.Hour, TTLUpdate: backend.TTLOnReadAndWrite},
	backend.StateDescriptor{Name: "mt", Kind: backend.KindMap, TTL: time.Hour, TTLUpdate: backend.TTLOnReadAndWrite})

func wrap[T any](ctx context.Context, f client.Future[T]) func() (any, error) {
	return func() (any, error) {
		v, err := f.Wait(ctx)
		return v, err
	}
}

// equalResult compares treating nil and empty byte slices as equal.
func equalResult(a, b any) bool {
	norm := func(x any) any {
		switch v := x.(type) {
		case client.Value:
			if len(v.Data) == 0 {
				v.Data = nil
			}
			return v
		case [][]byte:
			out := make([]string, len(v))
			for i, e := range v {
				out[i] = string(e)
			}
			return out
		case client.MapPage:
			out := make([]string, 0, 2*len(v.Entries))
			for _, e := range v.Entries {
				out = append(out, string(e.UserKey), string(e.Value))
			}
			return fmt.Sprint(out, v.More)
		case []backend.Timer:
			var buf bytes.Buffer
			for _, t := range v {
				fmt.Fprintf(&buf, "%d/%d/%s/%s;", t.Timestamp, t.KeyGroup, t.Key, t.Namespace)
			}
			return buf.String()
		}
		return x
	}
	return reflect.DeepEqual(norm(a), norm(b))
}
