package protocol

import (
	"fmt"
	"time"

	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/backend"
)

// TokenHeader is the metadata key of the token: TCP clients send
// "authorization: Bearer <token>" on every call.
const TokenHeader = "authorization"

// Transport sizes of both ends. A stream's window bounds what the daemon
// buffers for a client that sends faster than its instance applies.
const (
	SocketBufferSize = 256 << 10
	StreamWindow     = 4 << 20
	ConnWindow       = 16 << 20
)

// KeyGroup is the key group of key under the key hash stated.proto
// specifies (KEY_HASH_FNV1A_MURMUR): FNV-1a 32 of the key read as a signed
// int, then backend.KeyGroupForHash. The FNV loop is written out so that it
// allocates nothing: the daemon runs it on every keyed operation of an
// instance that declared the hash.
func KeyGroup(key []byte, maxParallelism int) int {
	h := uint32(2166136261)
	for _, c := range key {
		h ^= uint32(c)
		h *= 16777619
	}
	return backend.KeyGroupForHash(int32(h), maxParallelism)
}

// TaskFromPB and the other converters map API messages to backend types.
func TaskFromPB(t *pb.TaskId) backend.TaskID {
	return backend.TaskID{Job: t.GetJob(), Operator: t.GetOperator(), Subtask: int(t.GetSubtask())}
}

// TaskToPB is the inverse of TaskFromPB.
func TaskToPB(t backend.TaskID) *pb.TaskId {
	return &pb.TaskId{Job: t.Job, Operator: t.Operator, Subtask: int32(t.Subtask)}
}

// StateFromPB converts a state descriptor; the numeric enum values are the
// backend's frozen ones, and backend validation rejects unknown values.
func StateFromPB(d *pb.StateDescriptor) backend.StateDescriptor {
	return backend.StateDescriptor{
		Name:      d.GetName(),
		Kind:      backend.StateKind(d.GetKind()),
		TTL:       time.Duration(d.GetTtlMillis()) * time.Millisecond,
		TTLUpdate: backend.TTLUpdate(d.GetTtlUpdate()),
		Aggregate: backend.AggregateFunc(d.GetAggregate()),
		Number:    backend.NumberType(d.GetNumber()),
	}
}

// StateToPB is the inverse of StateFromPB.
func StateToPB(d backend.StateDescriptor) *pb.StateDescriptor {
	return &pb.StateDescriptor{
		Name:      d.Name,
		Kind:      pb.StateKind(d.Kind),
		TtlMillis: d.TTL.Milliseconds(),
		TtlUpdate: pb.TtlUpdate(d.TTLUpdate),
		Aggregate: pb.AggregateFunc(d.Aggregate),
		Number:    pb.NumberType(d.Number),
	}
}

// KeyGroupsToPB converts a key-group range.
func KeyGroupsToPB(r backend.KeyGroupRange) *pb.KeyGroupRange {
	return &pb.KeyGroupRange{Start: int32(r.Start), End: int32(r.End)}
}

// KeyGroupsFromPB is the inverse of KeyGroupsToPB.
func KeyGroupsFromPB(r *pb.KeyGroupRange) backend.KeyGroupRange {
	return backend.KeyGroupRange{Start: int(r.GetStart()), End: int(r.GetEnd())}
}

// OperatorModeFromPB maps stated.v1.OperatorStateMode to the backend's
// mode ("" for unspecified).
func OperatorModeFromPB(m pb.OperatorStateMode) (backend.OperatorStateMode, error) {
	switch m {
	case pb.OperatorStateMode_OPERATOR_STATE_MODE_UNSPECIFIED:
		return "", nil
	case pb.OperatorStateMode_OPERATOR_STATE_MODE_SPLIT:
		return backend.OperatorSplit, nil
	case pb.OperatorStateMode_OPERATOR_STATE_MODE_UNION:
		return backend.OperatorUnion, nil
	}
	return "", fmt.Errorf("%w: unknown operator state mode %d", backend.ErrInvalidArgument, m)
}

// OperatorModeToPB is the inverse of OperatorModeFromPB.
func OperatorModeToPB(m backend.OperatorStateMode) pb.OperatorStateMode {
	switch m {
	case backend.OperatorSplit:
		return pb.OperatorStateMode_OPERATOR_STATE_MODE_SPLIT
	case backend.OperatorUnion:
		return pb.OperatorStateMode_OPERATOR_STATE_MODE_UNION
	}
	return pb.OperatorStateMode_OPERATOR_STATE_MODE_UNSPECIFIED
}

// ChannelFromPB converts a channel id; an unknown direction comes back as
// a direction that backend.ChannelID.Validate refuses.
func ChannelFromPB(c *pb.ChannelId) backend.ChannelID {
	dir := backend.ChannelDirection(fmt.Sprintf("direction %d", c.GetDirection()))
	switch c.GetDirection() {
	case pb.ChannelDirection_CHANNEL_DIRECTION_INPUT:
		dir = backend.ChannelInput
	case pb.ChannelDirection_CHANNEL_DIRECTION_OUTPUT:
		dir = backend.ChannelOutput
	}
	return backend.ChannelID{Direction: dir, Gate: c.GetGate(), Index: c.GetIndex()}
}

// ChannelToPB converts a channel id.
func ChannelToPB(c backend.ChannelID) *pb.ChannelId {
	dir := pb.ChannelDirection_CHANNEL_DIRECTION_INPUT
	if c.Direction == backend.ChannelOutput {
		dir = pb.ChannelDirection_CHANNEL_DIRECTION_OUTPUT
	}
	return &pb.ChannelId{Direction: dir, Gate: c.Gate, Index: c.Index}
}

// ChannelKindFromPB converts a channel kind; unspecified or unknown is an
// error naming it.
func ChannelKindFromPB(k pb.ChannelKind) (backend.ChannelKind, error) {
	switch k {
	case pb.ChannelKind_CHANNEL_KIND_KEYED:
		return backend.ChannelKeyed, nil
	case pb.ChannelKind_CHANNEL_KIND_FORWARD:
		return backend.ChannelForward, nil
	case pb.ChannelKind_CHANNEL_KIND_BROADCAST:
		return backend.ChannelBroadcast, nil
	}
	return "", fmt.Errorf("%w: channel kind %s (keyed, forward or broadcast)", backend.ErrInvalidArgument, k)
}

// ChannelKindToPB converts a channel kind.
func ChannelKindToPB(k backend.ChannelKind) pb.ChannelKind {
	switch k {
	case backend.ChannelKeyed:
		return pb.ChannelKind_CHANNEL_KIND_KEYED
	case backend.ChannelForward:
		return pb.ChannelKind_CHANNEL_KIND_FORWARD
	case backend.ChannelBroadcast:
		return pb.ChannelKind_CHANNEL_KIND_BROADCAST
	}
	return pb.ChannelKind_CHANNEL_KIND_UNSPECIFIED
}

// ChannelPacker packs a stream of channel buffers into lists of chunks of
// about limit bytes each (WriteChannelState requests, ReadChannelState
// responses), so that no message passes the daemon's limit whatever the
// number of buffers. Consecutive buffers of one channel share a chunk.
type ChannelPacker struct {
	limit  int
	flush  func([]*pb.ChannelChunk) error
	chunks []*pb.ChannelChunk
	cur    backend.ChannelID
	size   int
	sent   int
}

// NewChannelPacker returns a packer that hands each full list to flush.
func NewChannelPacker(limit int, flush func([]*pb.ChannelChunk) error) *ChannelPacker {
	return &ChannelPacker{limit: limit, flush: flush}
}

// Add appends buffer b of channel ch, flushing the list first when b
// would take it past the limit (a buffer larger than the limit goes
// alone).
func (p *ChannelPacker) Add(ch backend.ChannelID, kind backend.ChannelKind, b *pb.ChannelBuffer) error {
	n := 16
	for _, r := range b.GetRecords() {
		n += len(r.GetData()) + 16
	}
	if p.size > 0 && p.size+n > p.limit {
		if err := p.Flush(); err != nil {
			return err
		}
	}
	if len(p.chunks) == 0 || p.cur != ch {
		p.chunks = append(p.chunks, &pb.ChannelChunk{Channel: ChannelToPB(ch), Kind: ChannelKindToPB(kind)})
		p.cur = ch
	}
	last := p.chunks[len(p.chunks)-1]
	last.Buffers = append(last.Buffers, b)
	p.size += n
	return nil
}

// Flush hands what is packed to flush, if anything.
func (p *ChannelPacker) Flush() error {
	if len(p.chunks) == 0 {
		return nil
	}
	chunks := p.chunks
	p.chunks, p.size = nil, 0
	p.sent++
	return p.flush(chunks)
}

// Sent is the number of lists handed to flush so far.
func (p *ChannelPacker) Sent() int { return p.sent }
