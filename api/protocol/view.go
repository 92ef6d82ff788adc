package protocol

import (
	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/backend"
)

// EntryToPB converts an entry of a view for ScanView; the message refers
// to e's slices. The state is named by StateID only.
func EntryToPB(e *backend.ViewEntry) *pb.ViewEntry {
	p := &pb.ViewEntry{
		KeyGroup:  uint32(e.KeyGroup),
		StateId:   uint32(e.StateID),
		Kind:      pb.StateKind(e.Kind),
		Key:       e.Key,
		Namespace: e.Namespace,
		UserKey:   e.UserKey,
		Value:     e.Value,
		Values:    e.Values,
		Timestamp: e.Timestamp,
	}
	if e.Kind == backend.KindAggregate {
		p.NumberType = pb.NumberType(e.Number.Type)
		if e.Number.Type == backend.NumFloat64 {
			p.FloatValue = e.Number.Float
		} else {
			p.IntValue = e.Number.Int
		}
	}
	return p
}

// EntryFromPB converts an entry of a Load request (or of a ScanView
// response, with states to name its state by StateId); the entry refers to
// p's slices.
func EntryFromPB(p *pb.ViewEntry, states []backend.StateDescriptor) backend.ViewEntry {
	e := backend.ViewEntry{
		KeyGroup:  int(p.GetKeyGroup()),
		StateID:   int(p.GetStateId()),
		State:     p.GetState(),
		Kind:      backend.StateKind(p.GetKind()),
		Key:       p.GetKey(),
		Namespace: p.GetNamespace(),
		UserKey:   p.GetUserKey(),
		Value:     p.GetValue(),
		Values:    p.GetValues(),
		Timestamp: p.GetTimestamp(),
	}
	if e.State == "" && e.StateID < len(states) {
		e.State = states[e.StateID].Name
	}
	switch p.GetNumberType() {
	case pb.NumberType_NUMBER_TYPE_INT64:
		e.Number = backend.Int64(p.GetIntValue())
	case pb.NumberType_NUMBER_TYPE_FLOAT64:
		e.Number = backend.Float64(p.GetFloatValue())
	}
	return e
}
