package kvstate

import (
	"errors"
	"testing"

	"github.com/statedhq/stated/backend"
)

// mapEngine is an Engine over a map for the read tests of this package
// (memkv imports kvstate); it is an AppendGetter.
type mapEngine map[string][]byte

func (m mapEngine) Get(key []byte) ([]byte, bool, error) {
	v, ok := m[string(key)]
	return append([]byte(nil), v...), ok, nil
}

func (m mapEngine) AppendGet(dst, key []byte) ([]byte, bool, error) {
	v, ok := m[string(key)]
	return append(dst, v...), ok, nil
}

func (m mapEngine) Set(key, value []byte) error {
	m[string(key)] = append([]byte(nil), value...)
	return nil
}

func (m mapEngine) Merge(key, operand []byte) error {
	m[string(key)] = append(m[string(key)], operand...)
	return nil
}

func (m mapEngine) Delete(key []byte) error {
	delete(m, string(key))
	return nil
}

var errUnused = errors.New("mapEngine: not implemented, the read tests do not use it")

func (mapEngine) DeleteRange(start, end []byte) error { return errUnused }

func (mapEngine) Scan(start, end []byte, fn func(k, v []byte) (bool, error)) error { return errUnused }

// TestReaderReusesValueBuffer: over an AppendGetter engine, the reads of a
// group allocate nothing once the reader's buffers have grown, and each
// read still returns its own value.
func TestReaderReusesValueBuffer(t *testing.T) {
	s, err := New(mapEngine{}, Config{
		Info:         backend.Info{Kind: backend.KindLSM, Task: backend.TaskID{Job: "j", Operator: "o"}, KeyGroups: backend.KeyGroupRange{Start: 0, End: 9}},
		States:       []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}},
		MaxValueSize: 16,
	})
	if err != nil {
		t.Fatal(err)
	}
	keys := []backend.Key{{KeyGroup: 1, Key: []byte("a")}, {KeyGroup: 2, Key: []byte("bb")}}
	for i, k := range keys {
		if err := s.Put("v", k, []byte{byte('x' + i), byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	s.ReadGroup(func(r backend.GroupReader) {
		allocs := testing.AllocsPerRun(100, func() {
			for i, k := range keys {
				v, ok, err := r.Get("v", k)
				if err != nil || !ok || string(v) != string([]byte{byte('x' + i), byte(i)}) {
					t.Fatalf("key %d: %q %v %v", i, v, ok, err)
				}
			}
		})
		if allocs != 0 && !raceEnabled {
			t.Fatalf("%.1f allocations per two reads in a group, want 0", allocs)
		}
	})
}
