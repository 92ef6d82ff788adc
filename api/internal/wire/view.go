package wire

import (
	"fmt"
	"math"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/statedhq/stated/backend"
)

// Field numbers of the view barrier (stated.proto). Frozen.
const (
	reqView  = 16
	respView = 16

	viewBarrierIdleTimeout = 1
)

// ViewBarrier is a decoded stated.v1.ViewBarrier.
type ViewBarrier struct {
	IdleTimeoutMillis int64
}

func decodeViewBarrier(data []byte, vb *ViewBarrier) error {
	for len(data) > 0 {
		f, rest, err := next(data)
		if err != nil {
			return err
		}
		data = rest
		if f.num == viewBarrierIdleTimeout && f.typ == protowire.VarintType {
			vb.IdleTimeoutMillis = int64(f.v)
		}
	}
	return nil
}

// AppendViewBarrier appends BatchRequest.view. The message is written even
// when empty: its presence is the barrier.
func AppendViewBarrier(b []byte, vb ViewBarrier) []byte {
	n := sizeVarintField(viewBarrierIdleTimeout, uint64(vb.IdleTimeoutMillis))
	b = protowire.AppendTag(b, reqView, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	return appendVarintField(b, viewBarrierIdleTimeout, uint64(vb.IdleTimeoutMillis))
}

// AppendViewOutcome appends BatchResponse.view: outcome is an encoded
// stated.v1.ViewOutcome (written even when empty).
func AppendViewOutcome(b, outcome []byte) []byte { return appendMessage(b, respView, outcome) }

// ResponseView returns the encoded ViewOutcome of a BatchResponse (a view
// into data) and whether the response has one.
func ResponseView(data []byte) ([]byte, bool, error) { return responseMessage(data, respView) }

// Field numbers of LoadRequest and ViewEntry (stated.proto). Frozen.
const (
	loadInstanceID = 1
	loadJob        = 2
	loadEntries    = 3

	entKeyGroup   = 1
	entStateID    = 2
	entState      = 3
	entKind       = 4
	entKey        = 5
	entNamespace  = 6
	entUserKey    = 7
	entValue      = 8
	entValues     = 9
	entNumberType = 10
	entIntValue   = 11
	entFloatValue = 12
	entTimestamp  = 13
)

// Load is a decoded LoadRequest: every byte slice is a view into the
// request's bytes.
type Load struct {
	InstanceID []byte
	Job        []byte
	Entries    []backend.LoadEntry
}

// AppendLoadHeader appends LoadRequest.instance_id and job (the first
// request of a stream carries them).
func AppendLoadHeader(b []byte, instanceID []byte, job string) []byte {
	b = appendBytesField(b, loadInstanceID, instanceID)
	return appendStringField(b, loadJob, job)
}

func loadEntrySize(e *backend.LoadEntry) int {
	n := sizeVarintField(entKeyGroup, uint64(e.KeyGroup)) +
		sizeBytesField(entState, len(e.State)) +
		sizeVarintField(entKind, uint64(e.Kind)) +
		sizeBytesField(entKey, len(e.Key)) +
		sizeBytesField(entNamespace, len(e.Namespace)) +
		sizeBytesField(entUserKey, len(e.UserKey)) +
		sizeBytesField(entValue, len(e.Value)) +
		sizeVarintField(entNumberType, uint64(e.Number.Type)) +
		sizeVarintField(entIntValue, protowire.EncodeZigZag(e.Number.Int)) +
		sizeVarintField(entTimestamp, uint64(e.Timestamp))
	for _, v := range e.Values {
		n += protowire.SizeTag(entValues) + protowire.SizeBytes(len(v))
	}
	if e.Number.Float != 0 || math.Signbit(e.Number.Float) {
		n += protowire.SizeTag(entFloatValue) + protowire.SizeFixed64()
	}
	return n
}

// AppendLoadEntry appends e as one element of LoadRequest.entries, naming
// its state by State (StateID and Cursor are not written).
func AppendLoadEntry(b []byte, e *backend.LoadEntry) []byte {
	b = protowire.AppendTag(b, loadEntries, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(loadEntrySize(e)))
	b = appendVarintField(b, entKeyGroup, uint64(e.KeyGroup))
	b = appendStringField(b, entState, e.State)
	b = appendVarintField(b, entKind, uint64(e.Kind))
	b = appendBytesField(b, entKey, e.Key)
	b = appendBytesField(b, entNamespace, e.Namespace)
	b = appendBytesField(b, entUserKey, e.UserKey)
	b = appendBytesField(b, entValue, e.Value)
	for _, v := range e.Values {
		b = protowire.AppendTag(b, entValues, protowire.BytesType)
		b = protowire.AppendBytes(b, v)
	}
	b = appendVarintField(b, entNumberType, uint64(e.Number.Type))
	b = appendVarintField(b, entIntValue, protowire.EncodeZigZag(e.Number.Int))
	if e.Number.Float != 0 || math.Signbit(e.Number.Float) {
		b = protowire.AppendTag(b, entFloatValue, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, math.Float64bits(e.Number.Float))
	}
	return appendVarintField(b, entTimestamp, uint64(e.Timestamp))
}

// DecodeLoad decodes a LoadRequest; the entries are appended to
// entries[:0] (pass a slice to reuse). A state named by state_id only is
// left with an empty State.
func DecodeLoad(data []byte, entries []backend.LoadEntry) (Load, error) {
	l := Load{Entries: entries[:0]}
	var lastState string // consecutive entries mostly name one state: one string for them
	for len(data) > 0 {
		f, rest, err := next(data)
		if err != nil {
			return l, malformed("load request", err)
		}
		data = rest
		switch {
		case f.num == loadInstanceID && f.typ == protowire.BytesType:
			l.InstanceID = f.b
		case f.num == loadJob && f.typ == protowire.BytesType:
			l.Job = f.b
		case f.num == loadEntries && f.typ == protowire.BytesType:
			l.Entries = append(l.Entries, backend.LoadEntry{})
			if err := decodeLoadEntry(f.b, &l.Entries[len(l.Entries)-1], &lastState); err != nil {
				return l, malformed(fmt.Sprintf("load entry %d", len(l.Entries)-1), err)
			}
		}
	}
	return l, nil
}

func decodeLoadEntry(data []byte, e *backend.LoadEntry, lastState *string) error {
	var numType uint64
	var intValue int64
	var floatValue float64
	for len(data) > 0 {
		f, rest, err := next(data)
		if err != nil {
			return err
		}
		data = rest
		if f.typ == protowire.BytesType {
			switch f.num {
			case entState:
				if string(f.b) != *lastState {
					*lastState = string(f.b)
				}
				e.State = *lastState
			case entKey:
				e.Key = f.b
			case entNamespace:
				e.Namespace = f.b
			case entUserKey:
				e.UserKey = f.b
			case entValue:
				e.Value = f.b
			case entValues:
				e.Values = append(e.Values, f.b)
			}
			continue
		}
		switch {
		case f.typ == protowire.VarintType && f.num == entKeyGroup:
			e.KeyGroup = int(uint32(f.v))
		case f.typ == protowire.VarintType && f.num == entStateID:
			e.StateID = int(uint32(f.v))
		case f.typ == protowire.VarintType && f.num == entKind:
			e.Kind = backend.StateKind(uint8(min(f.v, 255)))
		case f.typ == protowire.VarintType && f.num == entNumberType:
			numType = f.v
		case f.typ == protowire.VarintType && f.num == entIntValue:
			intValue = protowire.DecodeZigZag(f.v)
		case f.typ == protowire.Fixed64Type && f.num == entFloatValue:
			floatValue = math.Float64frombits(f.v)
		case f.typ == protowire.VarintType && f.num == entTimestamp:
			e.Timestamp = int64(f.v)
		}
	}
	switch backend.NumberType(min(numType, 255)) {
	case backend.NumInt64:
		e.Number = backend.Int64(intValue)
	case backend.NumFloat64:
		e.Number = backend.Float64(floatValue)
	default:
		if numType != 0 {
			e.Number = backend.Number{Type: backend.NumberType(min(numType, 255))}
		}
	}
	return nil
}
