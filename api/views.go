package api

import (
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/statedhq/stated/api/internal/wire"
	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/daemon"
)

// viewBarrier takes the read view a batch request carries, once its
// operations (and its snapshot barrier) are applied, and returns the
// encoded ViewOutcome. applied is false when the request's operations were
// refused as a whole: a view then would miss them, so none is taken.
func (s *Server) viewBarrier(inst *daemon.Instance, bt *wire.Batch, applied bool) []byte {
	out := &pb.ViewOutcome{Code: uint32(codes.Unimplemented),
		Error: fmt.Sprintf("stated: views of %s: not built yet in this daemon", inst.Task)}
	if !applied {
		out = &pb.ViewOutcome{Code: uint32(codes.ResourceExhausted),
			Error: fmt.Sprintf("stated: view of %s not taken: the operations of its request were refused (more than %d)",
				inst.Task, s.opts.MaxBatchOps)}
	}
	return encodeViewOutcome(out)
}

func encodeViewOutcome(out *pb.ViewOutcome) []byte {
	b, err := proto.Marshal(out)
	if err != nil {
		b, _ = proto.Marshal(&pb.ViewOutcome{Code: uint32(codes.Internal), Error: "stated: view outcome not encodable"})
	}
	return b
}
