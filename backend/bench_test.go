package backend_test

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered/memstore"
)

// The benchmark workload: benchKeys keys of 8 bytes spread over all key
// groups, values of benchValueSize bytes, default namespace. Every backend
// and raw Pebble run the same operations on the same keys; for raw Pebble
// the keys are encoded exactly as stated's key layout encodes them
// (key group, state name, key, namespace), so key sizes match.
const (
	benchValueSize = 100
	benchMaxP      = 128
)

func benchKeys() int {
	if testing.Short() {
		return 2_000
	}
	return 20_000
}

var benchStates = []backend.StateDescriptor{
	{Name: "value", Kind: backend.KindValue},
	{Name: "list", Kind: backend.KindList},
	{Name: "map", Kind: backend.KindMap},
}

// benchKey returns the i-th key: its key group and its 8 bytes.
func benchKey(i int) backend.Key {
	k := binary.BigEndian.AppendUint64(nil, uint64(i))
	return backend.Key{KeyGroup: backend.KeyGroupForHash(int32(i), benchMaxP), Key: k}
}

// layoutKey encodes (state, k) as stated's key layout does:
// kg(2) | uvarint len, state | uvarint len, key | uvarint len, namespace.
func layoutKey(state string, k backend.Key) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(k.KeyGroup))
	b = binary.AppendUvarint(b, uint64(len(state)))
	b = append(b, state...)
	b = binary.AppendUvarint(b, uint64(len(k.Key)))
	b = append(b, k.Key...)
	b = binary.AppendUvarint(b, uint64(len(k.Namespace)))
	return append(b, k.Namespace...)
}

// benchTarget is one system under benchmark.
type benchTarget struct {
	get        func(k backend.Key) error
	put        func(k backend.Key, v []byte) error
	listAppend func(k backend.Key, v []byte) error
	mapPut     func(k backend.Key, uk, v []byte) error
}

func backendTarget(b backend.Backend) benchTarget {
	return benchTarget{
		get: func(k backend.Key) error {
			_, ok, err := b.Get("value", k)
			if err == nil && !ok {
				err = errors.New("value missing")
			}
			return err
		},
		put:        func(k backend.Key, v []byte) error { return b.Put("value", k, v) },
		listAppend: func(k backend.Key, v []byte) error { return b.ListAppend("list", k, v) },
		mapPut:     func(k backend.Key, uk, v []byte) error { return b.MapPut("map", k, uk, v) },
	}
}

// pebbleTarget is raw Pebble with the WAL off (as the lsm backend runs it)
// and writes without sync.
func pebbleTarget(tb testing.TB) benchTarget {
	db, err := pebble.Open(tb.TempDir(), &pebble.Options{DisableWAL: true, Merger: pebble.DefaultMerger, Logger: quietLogger{}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = db.Close() })
	return benchTarget{
		get: func(k backend.Key) error {
			v, closer, err := db.Get(layoutKey("value", k))
			if err != nil {
				return err
			}
			_ = append([]byte(nil), v...) // the backends return a copy
			return closer.Close()
		},
		put: func(k backend.Key, v []byte) error { return db.Set(layoutKey("value", k), v, pebble.NoSync) },
		listAppend: func(k backend.Key, v []byte) error {
			return db.Merge(layoutKey("list", k), v, pebble.NoSync)
		},
		mapPut: func(k backend.Key, uk, v []byte) error {
			return db.Set(append(layoutKey("map", k), uk...), v, pebble.NoSync)
		},
	}
}

// quietLogger drops Pebble's informational lines so that they do not break
// up the benchmark output; errors and fatal errors still go to the log.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any) {}
func (quietLogger) Errorf(format string, args ...any) {
	pebble.DefaultLogger.Errorf(format, args...)
}
func (quietLogger) Fatalf(format string, args ...any) {
	pebble.DefaultLogger.Fatalf(format, args...)
}

// timed runs fn(i) for i in [0, b.N) on a reset timer and reports, besides
// ns/op, the process CPU time per operation (cpu-ns/op; background work
// such as Pebble's flushes and compactions and the garbage collector
// included).
func timed(b *testing.B, fn func(i int) error) {
	b.ResetTimer()
	cpu0, cpuOK := processCPU()
	for i := 0; i < b.N; i++ {
		if err := fn(i); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if cpu1, ok := processCPU(); ok && cpuOK {
		b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
	}
}

// BenchmarkOps measures get, put (value state), list-append and map-put on
// every backend and on raw Pebble, one operation per iteration.
//
//	go test -run '^$' -bench BenchmarkOps -benchtime 200000x -count 6 ./backend/
func BenchmarkOps(b *testing.B) {
	targets := []struct {
		name string
		open func(b *testing.B) benchTarget
	}{{name: "pebble", open: func(b *testing.B) benchTarget { return pebbleTarget(b) }}}
	for _, h := range harnesses {
		targets = append(targets, struct {
			name string
			open func(b *testing.B) benchTarget
		}{string(h.Kind), func(b *testing.B) benchTarget {
			inst, err := h.Open(b, backend.Options{
				Task:           backend.TaskID{Job: "bench", Operator: "op"},
				KeyGroups:      backend.KeyGroupRange{Start: 0, End: benchMaxP - 1},
				MaxParallelism: benchMaxP,
				States:         benchStates,
				Store:          memstore.New(),
			})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = inst.Close() })
			return backendTarget(inst)
		}})
	}
	n := benchKeys()
	keys := make([]backend.Key, n)
	for i := range keys {
		keys[i] = benchKey(i)
	}
	value := make([]byte, benchValueSize)
	for i := range value {
		value[i] = byte(i * 7)
	}
	// Keys are visited in a scattered order (a stride coprime with n), as
	// a keyed stream visits them.
	const stride = 7919
	at := func(i int) backend.Key { return keys[(i*stride)%n] }
	for _, tg := range targets {
		b.Run(tg.name+"/get", func(b *testing.B) {
			t := tg.open(b)
			for i := 0; i < n; i++ {
				if err := t.put(keys[i], value); err != nil {
					b.Fatal(err)
				}
			}
			timed(b, func(i int) error { return t.get(at(i)) })
		})
		b.Run(tg.name+"/put", func(b *testing.B) {
			t := tg.open(b)
			timed(b, func(i int) error { return t.put(at(i), value) })
		})
		b.Run(tg.name+"/list-append", func(b *testing.B) {
			t := tg.open(b)
			timed(b, func(i int) error { return t.listAppend(at(i), value[:16]) })
		})
		b.Run(tg.name+"/map-put", func(b *testing.B) {
			t := tg.open(b)
			uk := make([]byte, 8)
			timed(b, func(i int) error {
				binary.BigEndian.PutUint64(uk, uint64(i/n))
				return t.mapPut(at(i), uk, value)
			})
		})
	}
}
