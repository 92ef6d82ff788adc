package workload

import (
	"bytes"
	"testing"
)

func TestEveryWorkloadGenerates(t *testing.T) {
	ids := []uint64{1, 5, 9, 13, 17}
	owns := func(id uint64) bool { return id%4 == 1 }
	for _, s := range All() {
		t.Run(s.Name, func(t *testing.T) {
			g, err := NewGen(s, Params{ReadRatio: -1}, ids, owns, 100, 7)
			if err != nil {
				t.Fatal(err)
			}
			loads := 0
			for op := g.NextLoad(); op != nil; op = g.NextLoad() {
				loads++
				if !s.hasState(op.State) {
					t.Fatalf("load writes state %q, not registered", op.State)
				}
			}
			if loads != g.LoadOps() {
				t.Fatalf("Load emitted %d operations, LoadOps says %d", loads, g.LoadOps())
			}
			seen := map[Kind]int{}
			for i := 0; i < 2000; i++ {
				op := g.Next()
				seen[op.Kind]++
				if op.Kind != TimerPoll && len(op.Key) != 8 {
					t.Fatalf("%s: key %x", op.Kind, op.Key)
				}
				if !s.hasState(op.State) {
					t.Fatalf("%s uses state %q, not registered", op.Kind, op.State)
				}
				if op.Kind == Insert && !owns(idOf(op, s)) {
					t.Fatalf("insert of id %d the task does not own", idOf(op, s))
				}
			}
			for _, k := range s.Kinds() {
				if seen[k] == 0 {
					t.Fatalf("kind %s never drawn in 2000 operations: %v", k, seen)
				}
			}
			if len(seen) != len(s.Kinds()) {
				t.Fatalf("drew kinds %v, the mix has %v", seen, s.Kinds())
			}
		})
	}
}

func (s *Spec) hasState(name string) bool {
	for _, n := range s.States {
		if n == name {
			return true
		}
	}
	return false
}

func idOf(op *Op, s *Spec) uint64 {
	if s.Name == "ycsb-e" {
		return decode(op.UserKey)
	}
	return decode(op.Key)
}

func decode(b []byte) uint64 {
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v
}

func TestReadRatioSteersTheMix(t *testing.T) {
	s, err := Lookup("value-mixed")
	if err != nil {
		t.Fatal(err)
	}
	for _, ratio := range []float64{0, 0.2, 1} {
		g, err := NewGen(s, Params{ReadRatio: ratio}, []uint64{1, 2, 3}, nil, 10, 1)
		if err != nil {
			t.Fatal(err)
		}
		gets := 0
		for i := 0; i < 10000; i++ {
			if g.Next().Kind == Get {
				gets++
			}
		}
		if got := float64(gets) / 10000; got < ratio-0.02 || got > ratio+0.02 {
			t.Fatalf("read ratio %v: %v of operations were gets", ratio, got)
		}
	}
}

func TestSeededGensAgree(t *testing.T) {
	s, _ := Lookup("ycsb-a")
	a, _ := NewGen(s, Params{ReadRatio: -1}, []uint64{1, 2, 3, 4}, nil, 10, 42)
	b, _ := NewGen(s, Params{ReadRatio: -1}, []uint64{1, 2, 3, 4}, nil, 10, 42)
	for i := 0; i < 100; i++ {
		x, y := *a.Next(), *b.Next()
		if x.Kind != y.Kind || !bytes.Equal(x.Key, y.Key) || !bytes.Equal(x.Value, y.Value) {
			t.Fatalf("op %d differs: %v vs %v", i, x, y)
		}
	}
}

func TestFlinkShapesPinSizes(t *testing.T) {
	s, _ := Lookup("flink-list-get")
	p := s.Effective(Params{ValueSize: 4096, ListLen: 3, ReadRatio: -1})
	if p.ValueSize != 8 || p.ListLen != 100 || p.MapKeys != 10 {
		t.Fatalf("flink shape params %+v", p)
	}
	if _, err := Lookup("nope"); err == nil {
		t.Fatal("unknown workload accepted")
	}
	if err := (Params{ValueSize: 1, ReadRatio: 2, Distribution: "x", Skew: 0.5, ListLen: 1, MapKeys: 1, ScanLen: 1}).Validate(); err == nil {
		t.Fatal("bad params accepted")
	}
}
