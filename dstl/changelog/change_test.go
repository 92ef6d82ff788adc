package changelog

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
)

func sampleChanges() []*Change {
	k := backend.Key{KeyGroup: 7, Key: []byte("k"), Namespace: []byte("ns")}
	return []*Change{
		{Op: OpPut, Time: 1, State: "v", Key: k, Values: [][]byte{[]byte("x")}},
		{Op: OpDelete, Time: -5, State: "v", Key: k},
		{Op: OpListAppend, Time: 2, State: "l", Key: k, Values: [][]byte{{}, []byte("a"), []byte("bb")}},
		{Op: OpMapPut, Time: 3, State: "m", Key: k, UserKey: []byte("u"), Value: []byte("v")},
		{Op: OpMapRemove, Time: 3, State: "m", Key: k, UserKey: []byte{}},
		{Op: OpAggregate, Time: 4, State: "a", Key: k, Number: backend.Int64(math.MinInt64)},
		{Op: OpAggregate, Time: 4, State: "a", Key: k, Number: backend.Float64(-1.5)},
		{Op: OpTimerAdd, Time: 5, State: "t", Timer: backend.Timer{KeyGroup: 65535, Key: []byte("k"), Namespace: []byte{}, Timestamp: -9}},
		{Op: OpTimerDelete, Time: 5, State: "t", Timer: backend.Timer{KeyGroup: 0, Key: []byte{}, Namespace: []byte{}, Timestamp: 9}},
		{Op: OpRegister, Time: 6, Desc: backend.StateDescriptor{Name: "a", Kind: backend.KindAggregate, TTL: time.Minute,
			TTLUpdate: backend.TTLOnReadAndWrite, Aggregate: backend.AggSum, Number: backend.NumFloat64}},
		{Op: OpGet, Time: 7, State: "v", Key: k},
		{Op: OpListGet, Time: 7, State: "l", Key: k},
		{Op: OpMapGet, Time: 7, State: "m", Key: k, UserKey: []byte("u")},
		{Op: OpMapIterate, Time: 7, State: "m", Key: k, HasAfter: true, After: []byte{}, Limit: 3},
		{Op: OpMapIterate, Time: 7, State: "m", Key: k, Limit: -1},
		{Op: OpAggGet, Time: 7, State: "a", Key: k},
	}
}

// TestChangeRoundTrip checks that every op survives encode/decode and that
// every strict prefix of an encoding is rejected as damage.
func TestChangeRoundTrip(t *testing.T) {
	for _, c := range sampleChanges() {
		data := c.Encode(nil)
		got, err := DecodeChange(data)
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		if !reflect.DeepEqual(norm(got), norm(c)) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, c)
		}
		for n := 0; n < len(data); n++ {
			if _, err := DecodeChange(data[:n]); !errors.Is(err, backend.ErrCorrupt) {
				t.Fatalf("op %d: prefix of %d/%d bytes: got %v, want ErrCorrupt", c.Op, n, len(data), err)
			}
		}
		if _, err := DecodeChange(append(bytes.Clone(data), 0)); !errors.Is(err, backend.ErrCorrupt) {
			t.Fatalf("op %d: a trailing byte: got %v, want ErrCorrupt", c.Op, err)
		}
	}
	newer := (&Change{Op: OpDelete, State: "v"}).Encode(nil)
	newer[0] = ChangeVersion + 1
	if _, err := DecodeChange(newer); !errors.Is(err, backend.ErrIncompatible) {
		t.Fatalf("newer version: got %v, want ErrIncompatible", err)
	}
}

// norm maps nil byte slices to empty ones: the encoding does not keep the
// difference, and the backends do not either.
func norm(c *Change) *Change {
	n := *c
	z := func(p []byte) []byte {
		if p == nil {
			return []byte{}
		}
		return p
	}
	n.Key.Key, n.Key.Namespace = z(n.Key.Key), z(n.Key.Namespace)
	n.Timer.Key, n.Timer.Namespace = z(n.Timer.Key), z(n.Timer.Namespace)
	n.UserKey, n.Value = z(n.UserKey), z(n.Value)
	if n.HasAfter {
		n.After = z(n.After)
	}
	vs := make([][]byte, len(n.Values))
	for i, v := range n.Values {
		vs[i] = z(v)
	}
	if len(vs) == 0 {
		vs = nil
	}
	n.Values = vs
	return &n
}

// FuzzDecodeChange: arbitrary bytes never panic; an error wraps ErrCorrupt
// or ErrIncompatible; a decoded change re-encodes to the same bytes.
func FuzzDecodeChange(f *testing.F) {
	for _, c := range sampleChanges() {
		f.Add(c.Encode(nil))
	}
	f.Add([]byte{})
	f.Add([]byte{1, 3, 0, 1, 'l', 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := DecodeChange(data)
		if err != nil {
			if !errors.Is(err, backend.ErrCorrupt) && !errors.Is(err, backend.ErrIncompatible) {
				t.Fatalf("error %v wraps neither ErrCorrupt nor ErrIncompatible", err)
			}
			return
		}
		again, err := DecodeChange(c.Encode(nil))
		if err != nil || !reflect.DeepEqual(norm(again), norm(c)) {
			t.Fatalf("re-encoding %+v: %+v, %v", c, again, err)
		}
	})
}
