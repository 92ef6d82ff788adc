package wire

import (
	"errors"
	"fmt"
	"math"
	"unsafe"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/statedhq/stated/backend"
)

// Field numbers of stated.proto. Frozen.
const (
	reqInstanceID = 1
	reqJob        = 2
	reqSeq        = 3
	reqOps        = 4
	reqSnapshot   = 5

	barrierCheckpointID = 1
	barrierWait         = 2
	barrierStats        = 3
	barrierFull         = 4

	statsUnaligned  = 1
	statsAlignment  = 2
	statsStartDelay = 3

	opType       = 1
	opState      = 2
	opKeyGroup   = 3
	opKey        = 4
	opNamespace  = 5
	opUserKey    = 6
	opValue      = 7
	opValues     = 8
	opNumberType = 9
	opIntValue   = 10
	opFloatValue = 11
	opTimestamp  = 12
	opLimit      = 13
	opOpMode     = 14

	respSeq      = 1
	respResults  = 2
	respSnapshot = 3

	resCode       = 1
	resError      = 2
	resFound      = 3
	resValue      = 4
	resValues     = 5
	resEntries    = 6
	resMore       = 7
	resNumberType = 8
	resIntValue   = 9
	resFloatValue = 10
	resTimers     = 11
	resIndex      = 12
	resOpMode     = 13

	entryUserKey = 1
	entryValue   = 2

	timerKeyGroup = 1
	timerKey      = 2
	timerNS       = 3
	timerTS       = 4
)

// Op is one operation. Encoders read State; the decoder sets StateBytes (a
// view) and leaves State empty.
type Op struct {
	Type       int32
	State      string
	StateBytes []byte
	KeyGroup   uint32
	Key        []byte
	Namespace  []byte
	UserKey    []byte
	Value      []byte
	Values     [][]byte
	NumberType int32
	IntValue   int64
	FloatValue float64
	Timestamp  int64
	Limit      int32
	// OperatorMode is stated.v1.OperatorStateMode.
	OperatorMode int32
}

// Batch is a decoded BatchRequest.
type Batch struct {
	InstanceID []byte
	Job        []byte
	Seq        uint64
	Ops        []Op
	// HasSnapshot: the request carries a snapshot barrier (Snapshot), to be
	// taken once Ops are applied.
	HasSnapshot bool
	Snapshot    Barrier
	// HasView: the request carries a view barrier (View), taken once Ops
	// are applied and the snapshot barrier, if any, is taken.
	HasView bool
	View    ViewBarrier
}

// Barrier is a decoded stated.v1.SnapshotBarrier.
type Barrier struct {
	CheckpointID uint64
	Wait         bool
	// Full is SnapshotBarrier.full_checkpoint.
	Full bool
	// HasStats: the barrier carries TaskCheckpointStats (Stats).
	HasStats bool
	Stats    Stats
}

// Stats is a decoded stated.v1.TaskCheckpointStats.
type Stats struct {
	Unaligned        bool
	AlignmentMicros  int64
	StartDelayMicros int64
}

func statsSize(st Stats) int {
	return sizeVarintField(statsUnaligned, boolWire(st.Unaligned)) +
		sizeVarintField(statsAlignment, uint64(st.AlignmentMicros)) +
		sizeVarintField(statsStartDelay, uint64(st.StartDelayMicros))
}

// Result is the result of one operation (Number.Type 0: no number).
type Result struct {
	Index   uint32
	Code    uint32
	Error   string
	Found   bool
	Value   []byte
	Values  [][]byte
	Entries []backend.MapEntry
	More    bool
	Number  backend.Number
	Timers  []backend.Timer
	// OperatorMode is stated.v1.OperatorStateMode.
	OperatorMode int32
}

// Empty reports whether r carries nothing (Index aside): such results are
// left out of a response.
func (r *Result) Empty() bool {
	return r.Code == 0 && r.Error == "" && !r.Found && len(r.Value) == 0 && len(r.Values) == 0 && len(r.Entries) == 0 &&
		!r.More && r.Number.Type == 0 && r.Number.Int == 0 && r.Number.Float == 0 && len(r.Timers) == 0 && r.OperatorMode == 0
}

func appendBytesField(b []byte, num protowire.Number, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func appendStringField(b []byte, num protowire.Number, v string) []byte {
	if v == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, v)
}

func appendVarintField(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func sizeBytesField(num protowire.Number, n int) int {
	if n == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

func sizeVarintField(num protowire.Number, v uint64) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeVarint(v)
}

// int32 fields are sign-extended to 64 bits on the wire.
func int32Wire(v int32) uint64 { return uint64(int64(v)) }

func opSize(op *Op) int {
	n := sizeVarintField(opType, int32Wire(op.Type)) +
		sizeBytesField(opState, len(op.State)) +
		sizeVarintField(opKeyGroup, uint64(op.KeyGroup)) +
		sizeBytesField(opKey, len(op.Key)) +
		sizeBytesField(opNamespace, len(op.Namespace)) +
		sizeBytesField(opUserKey, len(op.UserKey)) +
		sizeBytesField(opValue, len(op.Value)) +
		sizeVarintField(opNumberType, int32Wire(op.NumberType)) +
		sizeVarintField(opIntValue, protowire.EncodeZigZag(op.IntValue)) +
		sizeVarintField(opTimestamp, uint64(op.Timestamp)) +
		sizeVarintField(opLimit, int32Wire(op.Limit)) +
		sizeVarintField(opOpMode, int32Wire(op.OperatorMode))
	for _, v := range op.Values {
		// Repeated elements are written even when empty.
		n += protowire.SizeTag(opValues) + protowire.SizeBytes(len(v))
	}
	if op.FloatValue != 0 || math.Signbit(op.FloatValue) {
		n += protowire.SizeTag(opFloatValue) + protowire.SizeFixed64()
	}
	return n
}

// AppendOp appends op as one element of BatchRequest.ops.
func AppendOp(b []byte, op *Op) []byte {
	b = protowire.AppendTag(b, reqOps, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(opSize(op)))
	b = appendVarintField(b, opType, int32Wire(op.Type))
	b = appendStringField(b, opState, op.State)
	b = appendVarintField(b, opKeyGroup, uint64(op.KeyGroup))
	b = appendBytesField(b, opKey, op.Key)
	b = appendBytesField(b, opNamespace, op.Namespace)
	b = appendBytesField(b, opUserKey, op.UserKey)
	b = appendBytesField(b, opValue, op.Value)
	for _, v := range op.Values {
		b = protowire.AppendTag(b, opValues, protowire.BytesType)
		b = protowire.AppendBytes(b, v)
	}
	b = appendVarintField(b, opNumberType, int32Wire(op.NumberType))
	b = appendVarintField(b, opIntValue, protowire.EncodeZigZag(op.IntValue))
	if op.FloatValue != 0 || math.Signbit(op.FloatValue) {
		b = protowire.AppendTag(b, opFloatValue, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, math.Float64bits(op.FloatValue))
	}
	b = appendVarintField(b, opTimestamp, uint64(op.Timestamp))
	b = appendVarintField(b, opLimit, int32Wire(op.Limit))
	b = appendVarintField(b, opOpMode, int32Wire(op.OperatorMode))
	return b
}

// AppendBatchHeader appends the request's other fields. Field order does
// not matter in protobuf, so a batch is its ops followed by this.
func AppendBatchHeader(b []byte, seq uint64, instanceID []byte, job string) []byte {
	b = appendBytesField(b, reqInstanceID, instanceID)
	b = appendStringField(b, reqJob, job)
	return appendVarintField(b, reqSeq, seq)
}

// AppendSnapshotBarrier appends BatchRequest.snapshot. The message is
// written even when empty: its presence is the barrier.
func AppendSnapshotBarrier(b []byte, br Barrier) []byte {
	n := sizeVarintField(barrierCheckpointID, br.CheckpointID) + sizeVarintField(barrierWait, boolWire(br.Wait)) +
		sizeVarintField(barrierFull, boolWire(br.Full))
	sn := statsSize(br.Stats)
	if br.HasStats {
		// Present even when empty (all zero): sizeBytesField would count
		// an empty message as absent.
		n += protowire.SizeTag(barrierStats) + protowire.SizeBytes(sn)
	}
	b = protowire.AppendTag(b, reqSnapshot, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	b = appendVarintField(b, barrierCheckpointID, br.CheckpointID)
	b = appendVarintField(b, barrierWait, boolWire(br.Wait))
	if br.HasStats {
		b = protowire.AppendTag(b, barrierStats, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(sn))
		b = appendVarintField(b, statsUnaligned, boolWire(br.Stats.Unaligned))
		b = appendVarintField(b, statsAlignment, uint64(br.Stats.AlignmentMicros))
		b = appendVarintField(b, statsStartDelay, uint64(br.Stats.StartDelayMicros))
	}
	// Field order is the generated code's (by number): full_checkpoint
	// (4) after stats (3).
	return appendVarintField(b, barrierFull, boolWire(br.Full))
}

// AppendSnapshotOutcome appends BatchResponse.snapshot: outcome is an
// encoded stated.v1.SnapshotOutcome (written even when empty).
func AppendSnapshotOutcome(b, outcome []byte) []byte { return appendMessage(b, respSnapshot, outcome) }

// ResponseSnapshot returns the encoded SnapshotOutcome of a BatchResponse
// (a view into data) and whether the response has one.
func ResponseSnapshot(data []byte) ([]byte, bool, error) { return responseMessage(data, respSnapshot) }

// appendMessage appends field num holding an encoded message, even an
// empty one: the outcomes' presence is what the client waits for.
func appendMessage(b []byte, num protowire.Number, msg []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, msg)
}

// responseMessage returns the last field num of a BatchResponse (a view
// into data; the last one wins, as in protobuf) and whether it has one.
func responseMessage(data []byte, num protowire.Number) ([]byte, bool, error) {
	var out []byte
	found := false
	for len(data) > 0 {
		f, rest, err := next(data)
		if err != nil {
			return nil, false, malformed("batch response", err)
		}
		if f.num == num && f.typ == protowire.BytesType {
			out, found = f.b, true
		}
		data = rest
	}
	return out, found, nil
}

func decodeBarrier(data []byte, br *Barrier) error {
	for len(data) > 0 {
		f, rest, err := next(data)
		if err != nil {
			return err
		}
		data = rest
		switch {
		case f.num == barrierCheckpointID && f.typ == protowire.VarintType:
			br.CheckpointID = f.v
		case f.num == barrierWait && f.typ == protowire.VarintType:
			br.Wait = f.v != 0
		case f.num == barrierFull && f.typ == protowire.VarintType:
			br.Full = f.v != 0
		case f.num == barrierStats && f.typ == protowire.BytesType:
			br.HasStats = true
			if err := decodeStats(f.b, &br.Stats); err != nil {
				return err
			}
		}
	}
	return nil
}

func decodeStats(data []byte, st *Stats) error {
	for len(data) > 0 {
		f, rest, err := next(data)
		if err != nil {
			return err
		}
		data = rest
		if f.typ != protowire.VarintType {
			continue
		}
		switch f.num {
		case statsUnaligned:
			st.Unaligned = f.v != 0
		case statsAlignment:
			st.AlignmentMicros = int64(f.v)
		case statsStartDelay:
			st.StartDelayMicros = int64(f.v)
		}
	}
	return nil
}

// ErrMalformed wraps every decoding error.
var ErrMalformed = errors.New("malformed message")

func malformed(what string, err error) error {
	return fmt.Errorf("%w: %s: %v", ErrMalformed, what, err)
}

// field is one decoded field.
type field struct {
	num protowire.Number
	typ protowire.Type
	v   uint64 // varint and fixed values
	b   []byte // bytes values
}

// next consumes one field of data. The common case, a one-byte tag (field
// numbers below 16) with a varint or length of at most two bytes, is
// decoded inline; anything else goes through protowire (nextSlow), which
// next matches exactly (FuzzNext).
func next(data []byte) (field, []byte, error) {
	if len(data) >= 2 && data[0] < 0x80 && data[0]>>3 != 0 {
		num, typ := protowire.Number(data[0]>>3), protowire.Type(data[0]&7)
		var v uint64
		var n int
		if b := data[1]; b < 0x80 {
			v, n = uint64(b), 2
		} else if len(data) >= 3 && data[2] < 0x80 {
			v, n = uint64(b&0x7f)|uint64(data[2])<<7, 3
		}
		switch {
		case n == 0:
		case typ == protowire.VarintType:
			return field{num: num, typ: typ, v: v}, data[n:], nil
		case typ == protowire.BytesType && v <= uint64(len(data)-n):
			end := n + int(v)
			return field{num: num, typ: typ, b: data[n:end]}, data[end:], nil
		}
	}
	return nextSlow(data)
}

// nextSlow is next for any field.
func nextSlow(data []byte) (field, []byte, error) {
	num, typ, n := protowire.ConsumeTag(data)
	if n < 0 {
		return field{}, nil, protowire.ParseError(n)
	}
	data = data[n:]
	f := field{num: num, typ: typ}
	switch typ {
	case protowire.VarintType:
		f.v, n = protowire.ConsumeVarint(data)
	case protowire.Fixed64Type:
		f.v, n = protowire.ConsumeFixed64(data)
	case protowire.Fixed32Type:
		var v uint32
		v, n = protowire.ConsumeFixed32(data)
		f.v = uint64(v)
	case protowire.BytesType:
		f.b, n = protowire.ConsumeBytes(data)
	default:
		n = protowire.ConsumeFieldValue(num, typ, data)
	}
	if n < 0 {
		return field{}, nil, protowire.ParseError(n)
	}
	return f, data[n:], nil
}

// DecodeBatch decodes a BatchRequest. The ops are appended to ops[:0] (pass
// a slice to reuse); every byte slice is a view into data.
func DecodeBatch(data []byte, ops []Op) (Batch, error) {
	bt := Batch{Ops: ops[:0]}
	for len(data) > 0 {
		f, rest, err := next(data)
		if err != nil {
			return bt, malformed("batch request", err)
		}
		data = rest
		switch {
		case f.num == reqInstanceID && f.typ == protowire.BytesType:
			bt.InstanceID = f.b
		case f.num == reqJob && f.typ == protowire.BytesType:
			bt.Job = f.b
		case f.num == reqSeq && f.typ == protowire.VarintType:
			bt.Seq = f.v
		case f.num == reqOps && f.typ == protowire.BytesType:
			bt.Ops = append(bt.Ops, Op{})
			if err := decodeOp(f.b, &bt.Ops[len(bt.Ops)-1]); err != nil {
				return bt, malformed(fmt.Sprintf("operation %d", len(bt.Ops)-1), err)
			}
		case f.num == reqSnapshot && f.typ == protowire.BytesType:
			// Repeated singular message fields merge, as in protobuf.
			bt.HasSnapshot = true
			if err := decodeBarrier(f.b, &bt.Snapshot); err != nil {
				return bt, malformed("snapshot barrier", err)
			}
		case f.num == reqView && f.typ == protowire.BytesType:
			bt.HasView = true
			if err := decodeViewBarrier(f.b, &bt.View); err != nil {
				return bt, malformed("view barrier", err)
			}
		}
	}
	return bt, nil
}

func decodeOp(data []byte, op *Op) error {
	for len(data) > 0 {
		f, rest, err := next(data)
		if err != nil {
			return err
		}
		data = rest
		if f.typ == protowire.BytesType {
			switch f.num {
			case opState:
				op.StateBytes = f.b
			case opKey:
				op.Key = f.b
			case opNamespace:
				op.Namespace = f.b
			case opUserKey:
				op.UserKey = f.b
			case opValue:
				op.Value = f.b
			case opValues:
				op.Values = append(op.Values, f.b)
			}
			continue
		}
		switch {
		case f.typ == protowire.VarintType && f.num == opType:
			op.Type = int32(f.v)
		case f.typ == protowire.VarintType && f.num == opKeyGroup:
			op.KeyGroup = uint32(f.v)
		case f.typ == protowire.VarintType && f.num == opNumberType:
			op.NumberType = int32(f.v)
		case f.typ == protowire.VarintType && f.num == opIntValue:
			op.IntValue = protowire.DecodeZigZag(f.v)
		case f.typ == protowire.Fixed64Type && f.num == opFloatValue:
			op.FloatValue = math.Float64frombits(f.v)
		case f.typ == protowire.VarintType && f.num == opTimestamp:
			op.Timestamp = int64(f.v)
		case f.typ == protowire.VarintType && f.num == opLimit:
			op.Limit = int32(f.v)
		case f.typ == protowire.VarintType && f.num == opOpMode:
			op.OperatorMode = int32(f.v)
		}
	}
	return nil
}

func boolWire(v bool) uint64 {
	if v {
		return 1
	}
	return 0
}

func resultSize(r *Result) int {
	n := sizeVarintField(resCode, uint64(r.Code)) +
		sizeBytesField(resError, len(r.Error)) +
		sizeVarintField(resFound, boolWire(r.Found)) +
		sizeBytesField(resValue, len(r.Value)) +
		sizeVarintField(resMore, boolWire(r.More)) +
		sizeVarintField(resNumberType, uint64(r.Number.Type)) +
		sizeVarintField(resIntValue, protowire.EncodeZigZag(r.Number.Int)) +
		sizeVarintField(resIndex, uint64(r.Index)) +
		sizeVarintField(resOpMode, int32Wire(r.OperatorMode))
	if r.Number.Float != 0 || math.Signbit(r.Number.Float) {
		n += protowire.SizeTag(resFloatValue) + protowire.SizeFixed64()
	}
	for _, v := range r.Values {
		n += protowire.SizeTag(resValues) + protowire.SizeBytes(len(v))
	}
	for _, e := range r.Entries {
		n += protowire.SizeTag(resEntries) + protowire.SizeBytes(entrySize(e))
	}
	for _, t := range r.Timers {
		n += protowire.SizeTag(resTimers) + protowire.SizeBytes(timerSize(t))
	}
	return n
}

func entrySize(e backend.MapEntry) int {
	return sizeBytesField(entryUserKey, len(e.UserKey)) + sizeBytesField(entryValue, len(e.Value))
}

func timerSize(t backend.Timer) int {
	return sizeVarintField(timerKeyGroup, uint64(uint32(t.KeyGroup))) + sizeBytesField(timerKey, len(t.Key)) +
		sizeBytesField(timerNS, len(t.Namespace)) + sizeVarintField(timerTS, uint64(t.Timestamp))
}

// AppendResult appends r as one element of BatchResponse.results.
func AppendResult(b []byte, r *Result) []byte {
	b = protowire.AppendTag(b, respResults, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(resultSize(r)))
	b = appendVarintField(b, resCode, uint64(r.Code))
	b = appendStringField(b, resError, r.Error)
	b = appendVarintField(b, resFound, boolWire(r.Found))
	b = appendBytesField(b, resValue, r.Value)
	for _, v := range r.Values {
		b = protowire.AppendTag(b, resValues, protowire.BytesType)
		b = protowire.AppendBytes(b, v)
	}
	for _, e := range r.Entries {
		b = protowire.AppendTag(b, resEntries, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(entrySize(e)))
		b = appendBytesField(b, entryUserKey, e.UserKey)
		b = appendBytesField(b, entryValue, e.Value)
	}
	b = appendVarintField(b, resMore, boolWire(r.More))
	b = appendVarintField(b, resNumberType, uint64(r.Number.Type))
	b = appendVarintField(b, resIntValue, protowire.EncodeZigZag(r.Number.Int))
	if r.Number.Float != 0 || math.Signbit(r.Number.Float) {
		b = protowire.AppendTag(b, resFloatValue, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, math.Float64bits(r.Number.Float))
	}
	for _, t := range r.Timers {
		b = protowire.AppendTag(b, resTimers, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(timerSize(t)))
		b = appendVarintField(b, timerKeyGroup, uint64(uint32(t.KeyGroup)))
		b = appendBytesField(b, timerKey, t.Key)
		b = appendBytesField(b, timerNS, t.Namespace)
		b = appendVarintField(b, timerTS, uint64(t.Timestamp))
	}
	b = appendVarintField(b, resIndex, uint64(r.Index))
	return appendVarintField(b, resOpMode, int32Wire(r.OperatorMode))
}

// foundSize is resultSize of a result with only Found set, value and
// index.
func foundSize(index uint32, n int) int {
	return sizeVarintField(resFound, 1) + sizeBytesField(resValue, n) + sizeVarintField(resIndex, uint64(index))
}

// FoundResultSize is EncodedResultSize of a result with only Found set,
// a value of n bytes and index: what AppendFoundResult adds.
func FoundResultSize(index uint32, n int) int {
	return protowire.SizeTag(respResults) + protowire.SizeBytes(foundSize(index, n))
}

// AppendFoundResult is AppendResult of a result with only Found set, value
// and index (a point read that found its entry): the same bytes, without
// going through every field of Result, which costs as much as the rest of
// a read's encoding.
func AppendFoundResult(b []byte, index uint32, value []byte) []byte {
	b = protowire.AppendTag(b, respResults, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(foundSize(index, len(value))))
	b = appendVarintField(b, resFound, 1)
	b = appendBytesField(b, resValue, value)
	return appendVarintField(b, resIndex, uint64(index))
}

// AppendResponseSeq appends BatchResponse.seq.
func AppendResponseSeq(b []byte, seq uint64) []byte { return appendVarintField(b, respSeq, seq) }

// ResultRef locates one encoded result inside a response.
type ResultRef struct {
	Index      uint32
	Start, End uint32
	// Failed: the result has a non-zero code.
	Failed bool
}

// IndexResponse reads a BatchResponse's seq and locates its results
// without decoding them: the client decodes each one only when its future
// is read (DecodeResult), in the reader's goroutine.
func IndexResponse(data []byte) (seq uint64, refs []ResultRef, err error) {
	n := 0
	for d := data; len(d) > 0; {
		f, rest, err := next(d)
		if err != nil {
			return 0, nil, malformed("batch response", err)
		}
		if f.num == respResults && f.typ == protowire.BytesType {
			n++
		}
		d = rest
	}
	if n > 0 {
		refs = make([]ResultRef, 0, n)
	}
	total := len(data)
	for len(data) > 0 {
		f, rest, err := next(data)
		if err != nil {
			return 0, nil, malformed("batch response", err)
		}
		switch {
		case f.num == respSeq && f.typ == protowire.VarintType:
			seq = f.v
		case f.num == respResults && f.typ == protowire.BytesType:
			idx, failed, err := resultIndex(f.b)
			if err != nil {
				return 0, nil, malformed(fmt.Sprintf("result %d", len(refs)), err)
			}
			end := total - len(rest)
			refs = append(refs, ResultRef{Index: idx, Start: uint32(end - len(f.b)), End: uint32(end), Failed: failed})
		}
		data = rest
	}
	return seq, refs, nil
}

// resultIndex finds the index and code fields of an encoded result (at any
// position) and checks that its top level parses.
func resultIndex(data []byte) (idx uint32, failed bool, err error) {
	for len(data) > 0 {
		f, rest, err := next(data)
		if err != nil {
			return 0, false, err
		}
		switch {
		case f.num == resIndex && f.typ == protowire.VarintType:
			idx = uint32(f.v)
		case f.num == resCode && f.typ == protowire.VarintType:
			failed = uint32(f.v) != 0
		}
		data = rest
	}
	return idx, failed, nil
}

// DecodeResult decodes one result located by IndexResponse.
func DecodeResult(data []byte, ref ResultRef, r *Result) error {
	if err := decodeResult(data[ref.Start:ref.End], r); err != nil {
		return malformed("result", err)
	}
	return nil
}

// DecodeResponse decodes a BatchResponse; byte slices are views into data.
func DecodeResponse(data []byte) (seq uint64, results []Result, err error) {
	seq, refs, err := IndexResponse(data)
	if err != nil {
		return 0, nil, err
	}
	if len(refs) > 0 {
		results = make([]Result, len(refs))
	}
	for i, ref := range refs {
		if err := DecodeResult(data, ref, &results[i]); err != nil {
			return 0, nil, err
		}
	}
	return seq, results, nil
}

func decodeResult(data []byte, r *Result) error {
	for len(data) > 0 {
		f, rest, err := next(data)
		if err != nil {
			return err
		}
		data = rest
		switch {
		case f.num == resCode && f.typ == protowire.VarintType:
			r.Code = uint32(f.v)
		case f.num == resError && f.typ == protowire.BytesType:
			r.Error = string(f.b)
		case f.num == resFound && f.typ == protowire.VarintType:
			r.Found = f.v != 0
		case f.num == resValue && f.typ == protowire.BytesType:
			r.Value = f.b
		case f.num == resValues && f.typ == protowire.BytesType:
			r.Values = append(r.Values, f.b)
		case f.num == resEntries && f.typ == protowire.BytesType:
			var e backend.MapEntry
			if err := decodeEntry(f.b, &e); err != nil {
				return err
			}
			r.Entries = append(r.Entries, e)
		case f.num == resMore && f.typ == protowire.VarintType:
			r.More = f.v != 0
		case f.num == resNumberType && f.typ == protowire.VarintType:
			r.Number.Type = backend.NumberType(f.v)
		case f.num == resIntValue && f.typ == protowire.VarintType:
			r.Number.Int = protowire.DecodeZigZag(f.v)
		case f.num == resFloatValue && f.typ == protowire.Fixed64Type:
			r.Number.Float = math.Float64frombits(f.v)
		case f.num == resTimers && f.typ == protowire.BytesType:
			var t backend.Timer
			if err := decodeTimer(f.b, &t); err != nil {
				return err
			}
			r.Timers = append(r.Timers, t)
		case f.num == resIndex && f.typ == protowire.VarintType:
			r.Index = uint32(f.v)
		case f.num == resOpMode && f.typ == protowire.VarintType:
			r.OperatorMode = int32(f.v)
		}
	}
	return nil
}

func decodeEntry(data []byte, e *backend.MapEntry) error {
	for len(data) > 0 {
		f, rest, err := next(data)
		if err != nil {
			return err
		}
		data = rest
		if f.typ != protowire.BytesType {
			continue
		}
		switch f.num {
		case entryUserKey:
			e.UserKey = f.b
		case entryValue:
			e.Value = f.b
		}
	}
	return nil
}

func decodeTimer(data []byte, t *backend.Timer) error {
	for len(data) > 0 {
		f, rest, err := next(data)
		if err != nil {
			return err
		}
		data = rest
		switch {
		case f.num == timerKeyGroup && f.typ == protowire.VarintType:
			t.KeyGroup = int(uint32(f.v))
		case f.num == timerKey && f.typ == protowire.BytesType:
			t.Key = f.b
		case f.num == timerNS && f.typ == protowire.BytesType:
			t.Namespace = f.b
		case f.num == timerTS && f.typ == protowire.VarintType:
			t.Timestamp = int64(f.v)
		}
	}
	return nil
}

// Raw is a message already encoded, or to be decoded by hand: Codec passes
// its bytes through.
type Raw struct {
	// Data is the message. After receiving, the receiver owns it (or, with
	// Pooled, holds it until Free).
	Data []byte
	// Pooled (set before receiving) puts the received bytes into a buffer
	// of gRPC's pool, which Free returns: for a receiver that is done with
	// every view into Data once it has handled the message (the daemon's
	// requests), this saves an allocation per message.
	Pooled bool
	buf    mem.Buffer
	// orig is the pooled slice Data was grown from (NewOutgoing).
	orig *[]byte
}

// Free returns a pooled received message's buffer; Data must not be used
// afterwards.
func (r *Raw) Free() {
	if r.buf != nil {
		r.buf.Free()
		r.buf = nil
	}
	r.Data = nil
}

// Alloc makes r hold n bytes from gRPC's buffer pool, for a receiver that
// reads a message outside gRPC (the batch socket) to fill; Free returns
// them.
func (r *Raw) Alloc(n int) []byte {
	p := mem.DefaultBufferPool().Get(n)
	r.buf = mem.NewBuffer(p, mem.DefaultBufferPool())
	r.Data = (*p)[:n]
	return r.Data
}

// Sent returns an outgoing message's pooled buffer (NewOutgoing) once a
// sender outside gRPC has written it; Data must not be used afterwards.
func (r *Raw) Sent() {
	if r.orig != nil {
		mem.DefaultBufferPool().Put(r.orig)
		r.orig = nil
	}
	r.Data = nil
}

// OutBuffer returns an empty slice with room for n bytes from gRPC's buffer
// pool, to encode an outgoing message into (then NewOutgoing).
func OutBuffer(n int) *[]byte {
	p := mem.DefaultBufferPool().Get(n)
	*p = (*p)[:0]
	return p
}

// NewOutgoing wraps data, encoded into orig (from OutBuffer), for SendMsg:
// gRPC returns the buffer to the pool once it has written it. If appending
// outgrew orig, orig goes back to the pool at once and data is sent as it
// is.
func NewOutgoing(orig *[]byte, data []byte) *Raw {
	if cap(data) > 0 && cap(*orig) > 0 && unsafe.SliceData(data) == unsafe.SliceData(*orig) {
		*orig = data
		return &Raw{Data: data, orig: orig}
	}
	mem.DefaultBufferPool().Put(orig)
	return &Raw{Data: data}
}

// Codec is the protobuf codec with Raw passed through. Its name is
// "proto", so it speaks the standard content type.
type Codec struct{ Base encoding.CodecV2 }

// Name implements encoding.CodecV2.
func (c Codec) Name() string { return "proto" }

// Marshal implements encoding.CodecV2. A Raw's bytes must not change after
// it is sent (gRPC may write them later).
func (c Codec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*Raw); ok {
		if r.orig != nil {
			return mem.BufferSlice{mem.NewBuffer(r.orig, mem.DefaultBufferPool())}, nil
		}
		return mem.BufferSlice{mem.SliceBuffer(r.Data)}, nil
	}
	return c.Base.Marshal(v)
}

// Unmarshal implements encoding.CodecV2; a Raw gets its own copy of the
// bytes (gRPC reuses its buffers), pooled if it asks for it.
func (c Codec) Unmarshal(data mem.BufferSlice, v any) error {
	if r, ok := v.(*Raw); ok {
		if r.Pooled {
			r.buf = data.MaterializeToBuffer(mem.DefaultBufferPool())
			r.Data = r.buf.ReadOnlyData()
			return nil
		}
		r.Data = data.Materialize()
		return nil
	}
	return c.Base.Unmarshal(data, v)
}

// NewCodec wraps gRPC's registered protobuf codec.
func NewCodec() Codec { return Codec{Base: encoding.GetCodecV2("proto")} }

// Sizes, for a server that must keep a response within a message limit.

// MaxSeqSize is the most bytes AppendResponseSeq adds.
const MaxSeqSize = 1 + 10 // a tag and a varint of at most 10 bytes

// EncodedResultSize is exactly the number of bytes AppendResult adds for r.
func EncodedResultSize(r *Result) int {
	return protowire.SizeTag(respResults) + protowire.SizeBytes(resultSize(r))
}

// EncodedResultSizeWith is EncodedResultSize of r with extra more bytes of
// repeated fields (TimerSize or EntrySize each) in its body.
func EncodedResultSizeWith(r *Result, extra int) int {
	return protowire.SizeTag(respResults) + protowire.SizeBytes(resultSize(r)+extra)
}

// TimerSize is exactly what one timer adds to a result's body.
func TimerSize(t backend.Timer) int {
	return protowire.SizeTag(resTimers) + protowire.SizeBytes(timerSize(t))
}

// EntrySize is exactly what one map entry adds to a result's body.
func EntrySize(e backend.MapEntry) int {
	return protowire.SizeTag(resEntries) + protowire.SizeBytes(entrySize(e))
}
