package api

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"

	"github.com/statedhq/stated/api/internal/wire"
	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/daemon"
)

// parallelStates: a value and a map state, and a value state whose TTL is
// refreshed on read (its reads cannot be made in a read group: they stop
// a run, ErrNotInGroup).
var parallelStates = []backend.StateDescriptor{
	{Name: "v", Kind: backend.KindValue},
	{Name: "m", Kind: backend.KindMap},
	{Name: "vt", Kind: backend.KindValue, TTL: time.Hour, TTLUpdate: backend.TTLOnReadAndWrite},
}

// TestParallelReadsMatchSerial: any batch, applied by a server that makes
// runs of reads on several goroutines (readParallel, lowered here to a few
// reads per goroutine), gives byte for byte the response of a server that
// makes every read on one goroutine, over the same state, and counts the
// same operations and errors. The batches mix reads with writes between
// them (so reads see the writes before them), failing reads (unknown
// state, wrong kind, key group out of range, key over the size limit),
// reads of a state refreshed on read, and values large enough that with a
// small message limit some results do not fit.
func TestParallelReadsMatchSerial(t *testing.T) {
	const maxValue = 1 << 10
	ctx := context.Background()
	serialD, parD := newTestDaemon(t, maxValue), newTestDaemon(t, maxValue)
	var parallelRuns, tooBig int
	n := 0
	rapid.Check(t, func(rt *rapid.T) {
		n++
		kind := rapid.SampledFrom([]backend.Kind{backend.KindLSM, backend.KindHeap}).Draw(rt, "backend")
		limit := rapid.SampledFrom([]int{2 << 10, 1 << 20}).Draw(rt, "messageLimit")
		open := func(d *daemon.Daemon) *daemon.Instance {
			inst, err := d.Open(ctx, daemon.OpenParams{Task: backend.TaskID{Job: "j", Operator: "op", Subtask: n},
				KeyGroups: backend.KeyGroupRange{Start: 0, End: 63}, Kind: kind, States: parallelStates})
			if err != nil {
				rt.Fatal(err)
			}
			return inst
		}
		serialI, parI := open(serialD), open(parD)
		defer func() { _ = serialD.CloseInstance(serialI.ID, "j") }()
		defer func() { _ = parD.CloseInstance(parI.ID, "j") }()
		serial := NewServer(serialD, ServerOptions{MaxMessageSize: limit, ReadParallelism: 1, Logger: quietLog})
		par := NewServer(parD, ServerOptions{MaxMessageSize: limit, ReadParallelism: rapid.IntRange(2, 5).Draw(rt, "parallelism"),
			Logger: quietLog})
		par.minReadsPerWorker = rapid.IntRange(1, 8).Draw(rt, "minReadsPerWorker")
		par.readChunk = rapid.IntRange(1, 8).Draw(rt, "readChunk")

		// Few keys and key groups, so that reads mostly find what the
		// writes before them wrote.
		keys := rapid.IntRange(1, 6).Draw(rt, "keys")
		keyGroups := rapid.IntRange(1, 4).Draw(rt, "keyGroups")
		key := func(t *rapid.T) []byte { return fmt.Appendf(nil, "k%d", rapid.IntRange(0, keys-1).Draw(t, "key")) }
		value := func(t *rapid.T) []byte {
			return bytes.Repeat([]byte{'x'}, rapid.SampledFrom([]int{1, 30, 700}).Draw(t, "valueSize"))
		}
		// A batch is segments of reads and segments of writes, so that it
		// has long runs of reads and they find what the writes before
		// them wrote.
		read := rapid.Custom(func(t *rapid.T) *pb.Op {
			o := &pb.Op{KeyGroup: uint32(rapid.IntRange(0, keyGroups-1).Draw(t, "keyGroup")), Key: key(t)}
			switch rapid.IntRange(0, 8).Draw(t, "read") {
			case 0, 1, 2, 3:
				o.Type, o.State = pb.OpType_OP_TYPE_GET, "v"
			case 4:
				o.Type, o.State = pb.OpType_OP_TYPE_GET, "vt"
			case 5, 6:
				o.Type, o.State, o.UserKey = pb.OpType_OP_TYPE_MAP_GET, "m", key(t)
			case 7:
				o.Type, o.State, o.UserKey = pb.OpType_OP_TYPE_MAP_CONTAINS, "m", key(t)
			default:
				// Failing reads.
				o.Type = pb.OpType_OP_TYPE_GET
				switch rapid.IntRange(0, 3).Draw(t, "failure") {
				case 0:
					o.State = "nope"
				case 1:
					o.State = "m"
				case 2:
					o.State, o.KeyGroup = "v", 64
				default:
					o.State, o.Key = "v", bytes.Repeat([]byte{'k'}, maxValue+1)
				}
			}
			return o
		})
		write := rapid.Custom(func(t *rapid.T) *pb.Op {
			o := &pb.Op{KeyGroup: uint32(rapid.IntRange(0, keyGroups-1).Draw(t, "keyGroup")), Key: key(t)}
			switch rapid.IntRange(0, 4).Draw(t, "write") {
			case 0, 1:
				o.Type, o.State, o.Value = pb.OpType_OP_TYPE_PUT, "v", value(t)
			case 2:
				o.Type, o.State, o.Value = pb.OpType_OP_TYPE_PUT, "vt", value(t)
			case 3:
				o.Type, o.State, o.UserKey, o.Value = pb.OpType_OP_TYPE_MAP_PUT, "m", key(t), value(t)
			default:
				o.Type, o.State = pb.OpType_OP_TYPE_DELETE, "v"
			}
			return o
		})
		batch := rapid.Custom(func(t *rapid.T) []*pb.Op {
			var ops []*pb.Op
			for range rapid.IntRange(1, 5).Draw(t, "segments") {
				ops = append(ops, rapid.SliceOfN(write, 0, 12).Draw(t, "writes")...)
				ops = append(ops, rapid.SliceOfN(read, 0, 40).Draw(t, "reads")...)
			}
			return ops
		})
		for b := range rapid.IntRange(1, 6).Draw(rt, "batches") {
			ops := batch.Draw(rt, "batch")
			data, err := proto.Marshal(&pb.BatchRequest{Seq: uint64(b + 1), Ops: ops})
			if err != nil {
				rt.Fatal(err)
			}
			want := applyRaw(rt, serial, serialI, data)
			got := applyRaw(rt, par, parI, data)
			if !bytes.Equal(got, want) {
				rt.Fatalf("batch %d: the parallel response differs from the serial one:\n got %s\nwant %s", b, describe(got), describe(want))
			}
			if bytes.Contains(want, []byte("does not fit")) {
				tooBig++
			}
		}
		parallelRuns += int(par.parallelReadRuns.Load())
		if s, p := opCounts(serialD.Metrics()), opCounts(parD.Metrics()); s != p {
			rt.Fatalf("operation counts differ:\nserial   %v\nparallel %v", s, p)
		}
	})
	if parallelRuns == 0 || tooBig == 0 {
		t.Fatalf("%d runs of reads made in parallel, %d batches with a result that did not fit: "+
			"the property did not reach the parallel path or its fallback", parallelRuns, tooBig)
	}
}

// applyRaw decodes data and applies it on s, returning the response.
func applyRaw(t *rapid.T, s *Server, inst *daemon.Instance, data []byte) []byte {
	bt, err := wire.DecodeBatch(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Clone(s.apply(inst, &bt, 0).Data)
}

// describe prints a response for a failure message.
func describe(data []byte) string {
	var resp pb.BatchResponse
	if err := proto.Unmarshal(data, &resp); err != nil {
		return fmt.Sprintf("unparsable (%v)", err)
	}
	var b bytes.Buffer
	for _, r := range resp.GetResults() {
		fmt.Fprintf(&b, "\n  #%d code %d found %v value %d bytes %q", r.GetIndex(), r.GetCode(), r.GetFound(), len(r.GetValue()), r.GetError())
	}
	return b.String()
}

// opCounts is what a daemon's metrics counted of operations and errors.
func opCounts(m *daemon.Metrics) string {
	var b bytes.Buffer
	for bk := range m.Ops {
		for sk := range m.Ops[bk] {
			for op := range m.Ops[bk][sk] {
				if n, e := m.Ops[bk][sk][op].Load(), m.OpErrors[bk][sk][op].Load(); n > 0 || e > 0 {
					fmt.Fprintf(&b, "[%d %d %d]=%d/%d ", bk, sk, op, n, e)
				}
			}
		}
	}
	return b.String()
}
