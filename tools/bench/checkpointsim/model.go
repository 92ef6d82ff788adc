package checkpointsim

import (
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
)

// record is what flows through the job: a source record (window < 0) on
// the source -> window channels, a window result on the window -> sink
// channels.
type record struct {
	// Source records: the source subtask, the sequence number (also the
	// event time) and the key.
	src int32
	seq int64
	key int32
	// Results: the window index and the count of the key's records in it.
	window int64
	count  int64
	// kg is the key's key group, computed once per key by the client.
	kg int32
}

func (r record) isResult() bool { return r.window >= 0 }

// Channel-state encoding of a record: a kind byte, then uvarints.
const (
	encSource byte = 1
	encResult byte = 2
)

var errBadRecord = errors.New("checkpointsim: bad record in channel state")

func (r record) encode() []byte {
	b := make([]byte, 0, 24)
	if r.isResult() {
		b = append(b, encResult)
		b = binary.AppendUvarint(b, uint64(r.window))
		b = binary.AppendUvarint(b, uint64(r.key))
		return binary.AppendUvarint(b, uint64(r.count))
	}
	b = append(b, encSource)
	b = binary.AppendUvarint(b, uint64(r.src))
	b = binary.AppendUvarint(b, uint64(r.seq))
	return binary.AppendUvarint(b, uint64(r.key))
}

// decodeRecord reads what encode wrote; keys must be below keys and the
// key group is taken from kgs (the key's, not the stored one, which a
// damaged channel state could get wrong).
func decodeRecord(b []byte, keys int, kgs []int32) (record, error) {
	if len(b) == 0 {
		return record{}, errBadRecord
	}
	kind, b := b[0], b[1:]
	var v [3]uint64
	for i := range v {
		x, n := binary.Uvarint(b)
		if n <= 0 {
			return record{}, errBadRecord
		}
		v[i], b = x, b[n:]
	}
	if len(b) != 0 {
		return record{}, errBadRecord
	}
	var r record
	switch kind {
	case encSource:
		if v[0] > 1<<20 || v[1] > 1<<62 || v[2] >= uint64(keys) {
			return record{}, fmt.Errorf("%w: source record out of range", errBadRecord)
		}
		r = record{src: int32(v[0]), seq: int64(v[1]), key: int32(v[2]), window: -1}
	case encResult:
		if v[0] > 1<<62 || v[1] >= uint64(keys) || v[2] > 1<<62 {
			return record{}, fmt.Errorf("%w: result out of range", errBadRecord)
		}
		r = record{window: int64(v[0]), key: int32(v[1]), count: int64(v[2])}
	default:
		return record{}, fmt.Errorf("%w: kind %d", errBadRecord, kind)
	}
	r.kg = kgs[r.key]
	return r, nil
}

// elem is an entry of a channel queue: a record, a barrier or the end of
// the input.
type elem struct {
	rec     record
	barrier uint64 // checkpoint id; 0: not a barrier
	eoi     bool
}

func (e elem) isRecord() bool { return e.barrier == 0 && !e.eoi }

// channel connects producer subtask from (its subpartition outIdx) to
// consumer subtask to (its input channel inIdx). It has two bounded FIFO
// queues: out at the producer, in at the consumer. Records move from out
// to in as soon as in has room (credit-based flow control; the network
// itself takes no time). Barriers and the end of input take no room.
type channel struct {
	from, to      *task
	outIdx, inIdx int
	out, in       []elem
	nOut, nIn     int // records in out and in
	capOut, capIn int // capacities in records
	maxCap        int // the configured capacity (debloating stays below)
	eoi           bool
}

// room reports whether the producer may push a record.
func (c *channel) room() bool { return c.nOut < c.capOut }

// inFlight is the number of records in both queues.
func (c *channel) inFlight() int { return c.nOut + c.nIn }

// indexOf finds barrier id in q.
func indexOf(q []elem, id uint64) int {
	for i, e := range q {
		if e.barrier == id {
			return i
		}
	}
	return -1
}

func records(q []elem) []record {
	out := make([]record, 0, len(q))
	for _, e := range q {
		if e.isRecord() {
			out = append(out, e.rec)
		}
	}
	return out
}

// event is something that happens at a simulated time (microseconds).
type event struct {
	at  int64
	seq uint64 // ties: in the order scheduled
	fn  func()
}

type eventQueue []*event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return e
}

// clock is the simulation's virtual time and event queue.
type clock struct {
	now  int64
	seq  uint64
	q    eventQueue
	runs int64
}

func (c *clock) at(t int64, fn func()) {
	c.seq++
	heap.Push(&c.q, &event{at: max(t, c.now), seq: c.seq, fn: fn})
}

// next runs the next event no later than until; false when there is none.
func (c *clock) next(until int64) bool {
	if len(c.q) == 0 || c.q[0].at > until {
		return false
	}
	e := heap.Pop(&c.q).(*event)
	c.now = e.at
	c.runs++
	e.fn()
	return true
}

// splitmix64 mixes x: the keys of a source's records are a pure function
// of (seed, source, sequence), so a restored source replays the same
// records.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
