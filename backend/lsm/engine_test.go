package lsm

import (
	"context"
	"testing"
)

// TestEngineContract checks what kvstate relies on beyond the backend
// contract: an unbounded DeleteRange and merges that concatenate in order,
// also once compaction has combined operands of several SSTs.
func TestEngineContract(t *testing.T) {
	e := newEnv(t)
	b := e.open(full(), nil)
	eng := engine{b.db}
	for _, k := range []string{"a", "b", "c", "d"} {
		must(t, eng.Set([]byte(k), []byte(k)))
	}
	must(t, eng.DeleteRange([]byte("b"), nil))
	must(t, eng.DeleteRange([]byte("x"), nil)) // nothing at or after x
	var keys []string
	must(t, eng.Scan(nil, nil, func(k, _ []byte) (bool, error) { keys = append(keys, string(k)); return true, nil }))
	if len(keys) != 1 || keys[0] != "a" {
		t.Fatalf("after DeleteRange(b, nil): %q", keys)
	}
	for i, op := range []string{"1", "2", "3", "4"} {
		must(t, eng.Merge([]byte("m"), []byte(op)))
		if i%2 == 1 {
			must(t, b.db.Flush())
		}
	}
	must(t, b.db.Compact(context.Background(), []byte("a"), []byte("z"), false))
	must(t, eng.Merge([]byte("m"), []byte("5")))
	if v, ok, err := eng.Get([]byte("m")); err != nil || !ok || string(v) != "12345" {
		t.Fatalf("merged value %q %v %v", v, ok, err)
	}
	if _, ok, err := eng.Get([]byte("zz")); ok || err != nil {
		t.Fatalf("absent key: %v %v", ok, err)
	}
}
