package wire

import "google.golang.org/protobuf/encoding/protowire"

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
func AppendViewOutcome(b, outcome []byte) []byte {
	b = protowire.AppendTag(b, respView, protowire.BytesType)
	return protowire.AppendBytes(b, outcome)
}

// ResponseView returns the encoded ViewOutcome of a BatchResponse (a view
// into data) and whether the response has one.
func ResponseView(data []byte) ([]byte, bool, error) {
	var out []byte
	found := false
	for len(data) > 0 {
		f, rest, err := next(data)
		if err != nil {
			return nil, false, malformed("batch response", err)
		}
		if f.num == respView && f.typ == protowire.BytesType {
			out, found = f.b, true
		}
		data = rest
	}
	return out, found, nil
}
