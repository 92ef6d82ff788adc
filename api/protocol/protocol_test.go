package protocol

import (
	"testing"
	"time"

	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/backend"
	"pgregory.net/rapid"
)

// Each converter and its inverse round-trip, so neither end loses a field.
func TestRoundTrip(t *testing.T) {
	task := backend.TaskID{Job: "j", Operator: "op", Subtask: 3}
	if got := TaskFromPB(TaskToPB(task)); got != task {
		t.Errorf("task: %+v, want %+v", got, task)
	}
	sd := backend.StateDescriptor{Name: "s", Kind: backend.StateKind(2), TTL: 1500 * time.Millisecond,
		TTLUpdate: backend.TTLUpdate(1), Aggregate: backend.AggregateFunc(1), Number: backend.NumberType(2)}
	if got := StateFromPB(StateToPB(sd)); got != sd {
		t.Errorf("state: %+v, want %+v", got, sd)
	}
	kg := backend.KeyGroupRange{Start: 5, End: 9}
	if got := KeyGroupsFromPB(KeyGroupsToPB(kg)); got != kg {
		t.Errorf("key groups: %+v, want %+v", got, kg)
	}
	for _, m := range []backend.OperatorStateMode{"", backend.OperatorSplit, backend.OperatorUnion} {
		if got, err := OperatorModeFromPB(OperatorModeToPB(m)); err != nil || got != m {
			t.Errorf("operator mode %q: %q, %v", m, got, err)
		}
	}
	if _, err := OperatorModeFromPB(pb.OperatorStateMode(99)); err == nil {
		t.Error("unknown operator mode accepted")
	}
}

// BenchmarkKeyGroup is the daemon's cost per operation of checking a
// declared key hash (a 12-byte key), to set against an operation's cost
// through the batch stream (api's BenchmarkLSM).
func BenchmarkKeyGroup(b *testing.B) {
	key := []byte("key-00012345")
	sum := 0
	for b.Loop() {
		sum += KeyGroup(key, 128)
	}
	if sum < 0 {
		b.Fatal(sum)
	}
}

// The packer keeps every buffer, in order and under its channel, and no
// list passes the limit unless one buffer alone does.
func TestChannelPacker(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		limit := rapid.IntRange(1, 400).Draw(t, "limit")
		type buf struct {
			ch   backend.ChannelID
			size int
		}
		var in []buf
		for range rapid.IntRange(0, 40).Draw(t, "n") {
			ch := backend.ChannelID{Direction: backend.ChannelInput, Index: int32(rapid.IntRange(0, 2).Draw(t, "ch"))}
			in = append(in, buf{ch, rapid.IntRange(0, 300).Draw(t, "size")})
		}
		var lists [][]*pb.ChannelChunk
		p := NewChannelPacker(limit, func(c []*pb.ChannelChunk) error { lists = append(lists, c); return nil })
		for i, b := range in {
			data := make([]byte, b.size)
			data = append(data[:0], byte(i))
			data = append(data, make([]byte, max(b.size-1, 0))...)
			if err := p.Add(b.ch, backend.ChannelKeyed, &pb.ChannelBuffer{Records: []*pb.ChannelRecord{{Data: data}}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Flush(); err != nil {
			t.Fatal(err)
		}
		if p.Sent() != len(lists) {
			t.Fatalf("Sent %d, %d lists", p.Sent(), len(lists))
		}
		var got []buf
		for _, l := range lists {
			size, n := 0, 0
			for _, c := range l {
				for _, b := range c.GetBuffers() {
					d := b.GetRecords()[0].GetData()
					got = append(got, buf{ChannelFromPB(c.GetChannel()), len(d)})
					size += len(d) + 32
					n++
				}
			}
			if size > limit && n > 1 {
				t.Fatalf("a list of %d buffers holds %d bytes, limit %d", n, size, limit)
			}
		}
		if len(got) != len(in) {
			t.Fatalf("%d buffers out, %d in", len(got), len(in))
		}
		for i := range in {
			want := in[i]
			if want.size == 0 {
				want.size = 1 // the index byte
			}
			if got[i] != want {
				t.Fatalf("buffer %d: %+v, want %+v", i, got[i], want)
			}
		}
	})
}
