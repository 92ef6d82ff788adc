package kvlayout

import (
	"bytes"
	"encoding/hex"
	"math"
	"testing"

	"pgregory.net/rapid"

	"github.com/statedhq/stated/backend"
)

// TestFrozenBytes pins the layout to bytes: every checkpoint ever written
// holds them, so a change here must fail.
func TestFrozenBytes(t *testing.T) {
	k := backend.Key{KeyGroup: 0x0102, Key: []byte("k"), Namespace: []byte("ns")}
	for _, c := range []struct {
		what string
		got  []byte
		want string
	}{
		{"entry key", AppendEntryKey(nil, "st", k), "0102" + "02" + "7374" + "01" + "6b" + "02" + "6e73"},
		{"timer key", AppendTimerKey(nil, "st", backend.Timer{KeyGroup: 1, Key: []byte("k"), Timestamp: -1}),
			"0001" + "02" + "7374" + "7fffffffffffffff" + "01" + "6b" + "00"},
		{"value", EncodeValue(0, []byte("v")), "00" + "76"},
		{"value with ttl", EncodeValue(1000, []byte("v")), "01" + "00000000000003e8" + "76"},
		{"list", AppendListElement(AppendListElement(nil, 0, []byte("a")), 5, nil), "00" + "01" + "61" + "01" + "0000000000000005" + "00"},
		{"int64", EncodeNumber(backend.Int64(-2)), "fffffffffffffffe"},
		{"float64", EncodeNumber(backend.Float64(1)), "3ff0000000000000"},
	} {
		if hex.EncodeToString(c.got) != c.want {
			t.Errorf("%s: %x, want %s", c.what, c.got, c.want)
		}
	}
}

// TestRoundTrip: what is built is taken apart into what it was built of.
func TestRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		state := rapid.StringN(1, 130, -1).Draw(t, "state")
		k := backend.Key{KeyGroup: rapid.IntRange(0, backend.MaxMaxParallelism-1).Draw(t, "kg"),
			Key: rapid.SliceOfN(rapid.Byte(), 0, 300).Draw(t, "key"), Namespace: rapid.SliceOfN(rapid.Byte(), 0, 200).Draw(t, "ns")}
		uk := rapid.SliceOfN(rapid.Byte(), 0, 50).Draw(t, "userKey")
		key := append(AppendEntryKey(nil, state, k), uk...)
		dk, err := SplitKey(key)
		if err != nil || dk.KeyGroup != k.KeyGroup || dk.State != state {
			t.Fatalf("SplitKey: %+v %v", dk, err)
		}
		gk, gns, tail, ok := SplitAddress(dk.Rest)
		if !ok || !bytes.Equal(gk, k.Key) || !bytes.Equal(gns, k.Namespace) || !bytes.Equal(tail, uk) {
			t.Fatalf("SplitAddress: %x %x %x %v", gk, gns, tail, ok)
		}
		if kg, err := KeyGroupOf(key); err != nil || kg != k.KeyGroup {
			t.Fatalf("KeyGroupOf: %d %v", kg, err)
		}
		lo, hi := KeyGroupSpan(backend.KeyGroupRange{Start: k.KeyGroup, End: k.KeyGroup})
		if bytes.Compare(key, lo) < 0 || bytes.Compare(key, hi) >= 0 {
			t.Fatalf("key %x outside its key group's span [%x, %x)", key, lo, hi)
		}
		renamed, err := RenameState(nil, key, "other")
		if err != nil {
			t.Fatal(err)
		}
		if dr, _ := SplitKey(renamed); dr.State != "other" || dr.KeyGroup != k.KeyGroup || !bytes.Equal(dr.Rest, dk.Rest) {
			t.Fatalf("RenameState: %+v", dr)
		}
		ts := rapid.Int64().Draw(t, "ts")
		tdk, _ := SplitKey(AppendTimerKey(nil, state, backend.Timer{KeyGroup: k.KeyGroup, Key: k.Key, Namespace: k.Namespace, Timestamp: ts}))
		gts, tk, tns, ok := SplitTimer(tdk.Rest)
		if !ok || gts != ts || !bytes.Equal(tk, k.Key) || !bytes.Equal(tns, k.Namespace) {
			t.Fatalf("SplitTimer: %d %x %x %v", gts, tk, tns, ok)
		}
		exp := rapid.Int64Range(0, math.MaxInt64).Draw(t, "expiry")
		payload := rapid.SliceOfN(rapid.Byte(), 0, 100).Draw(t, "payload")
		ge, gp, err := DecodeValue(EncodeValue(exp, payload))
		if err != nil || ge != exp || !bytes.Equal(gp, payload) {
			t.Fatalf("DecodeValue: %d %x %v", ge, gp, err)
		}
		list := AppendListElement(AppendListElement(nil, exp, payload), 0, uk)
		els, err := DecodeList(list)
		if err != nil || len(els) != 2 || els[0].Expiry != exp || !bytes.Equal(els[0].Payload, payload) || !bytes.Equal(els[1].Payload, uk) {
			t.Fatalf("DecodeList: %+v %v", els, err)
		}
	})
}

// TestDamage: a truncated or unknown stored value is ErrCorrupt.
func TestDamage(t *testing.T) {
	for _, v := range [][]byte{nil, {1, 0, 0}, {7}} {
		if _, _, err := DecodeValue(v); err == nil {
			t.Errorf("DecodeValue(%x): no error", v)
		}
	}
	if _, err := DecodeList([]byte{0, 5, 'a'}); err == nil {
		t.Error("DecodeList of a short element: no error")
	}
	if _, err := SplitKey([]byte{0}); err == nil {
		t.Error("SplitKey of one byte: no error")
	}
	if _, err := DecodeNumber(backend.NumInt64, []byte{1}); err == nil {
		t.Error("DecodeNumber of one byte: no error")
	}
}
