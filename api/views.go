package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/statedhq/stated/api/internal/wire"
	"github.com/statedhq/stated/api/protocol"
	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/daemon"
)

// Views, key scans, late state registration and bulk loads
// (daemon/view.go, daemon/load.go; docs/protocol.md, "Views and bulk
// load").

// viewBarrier takes the read view a batch request carries, once its
// operations (and its snapshot barrier) are applied, and returns the
// encoded ViewOutcome. The stream applies nothing else meanwhile, which
// orders the view with the operations. applied is false when the
// request's operations were refused as a whole: a view then would miss
// them, so none is taken.
func (s *Server) viewBarrier(inst *daemon.Instance, bt *wire.Batch, applied bool) []byte {
	if !applied {
		return encodeViewOutcome(&pb.ViewOutcome{Code: uint32(codes.ResourceExhausted),
			Error: fmt.Sprintf("stated: view of %s not taken: the operations of its request were refused (more than %d)",
				inst.Task, s.opts.MaxBatchOps)})
	}
	info, err := inst.TakeView(time.Duration(bt.View.IdleTimeoutMillis) * time.Millisecond)
	if err != nil {
		return encodeViewOutcome(&pb.ViewOutcome{Code: uint32(Code(err)), Error: err.Error()})
	}
	return encodeViewOutcome(&pb.ViewOutcome{View: &pb.ViewInfo{
		ViewId:            info.ID,
		States:            statesToPB(info.States),
		KeyGroups:         protocol.KeyGroupsToPB(info.KeyGroups),
		IdleTimeoutMillis: info.IdleTimeout.Milliseconds(),
	}})
}

func encodeViewOutcome(out *pb.ViewOutcome) []byte {
	b, err := proto.Marshal(out)
	if err != nil {
		b, _ = proto.Marshal(&pb.ViewOutcome{Code: uint32(codes.Internal), Error: "stated: view outcome not encodable"})
	}
	return b
}

func statesToPB(ds []backend.StateDescriptor) []*pb.StateDescriptor {
	out := make([]*pb.StateDescriptor, len(ds))
	for i, d := range ds {
		out[i] = protocol.StateToPB(d)
	}
	return out
}

// rangeFromPB is the range a request names, or nil (the instance's whole
// range) when it names none; an empty or negative range is an error.
func rangeFromPB(r *pb.KeyGroupRange, inst *daemon.Instance) (*backend.KeyGroupRange, error) {
	if r == nil {
		return nil, nil
	}
	kg := protocol.KeyGroupsFromPB(r)
	if kg.Empty() || kg.Start < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "stated: key groups [%d, %d] of %s: not a range (start <= end, both >= 0; leave key_groups unset for the whole range %s)",
			r.GetStart(), r.GetEnd(), inst.Task, inst.KeyGroups)
	}
	return &kg, nil
}

// ScanView implements pb.StatedServer.
func (s *Server) ScanView(req *pb.ScanViewRequest, stream pb.Stated_ScanViewServer) error {
	inst, err := s.d.Lookup(req.GetInstanceId(), req.GetJob())
	if err != nil {
		return toStatus(err)
	}
	if len(req.GetViewId()) == 0 {
		return status.Errorf(codes.InvalidArgument, "stated: scan of a view of %s: no view_id (take a view with BatchRequest.view)", inst.Task)
	}
	// Half the message limit leaves room for the encoding's overhead and
	// for one entry past the target.
	limit := s.opts.MaxMessageSize / 2
	pageBytes := int(req.GetPageBytes())
	if pageBytes <= 0 {
		pageBytes = daemon.DefaultViewPageBytes
	}
	pageBytes = min(pageBytes, limit)
	r, err := rangeFromPB(req.GetKeyGroups(), inst)
	if err != nil {
		return err
	}
	first := true
	err = inst.ScanView(req.GetViewId(), daemon.ViewScan{
		Range: r, Cursor: req.GetCursor(), PageBytes: pageBytes, MaxPages: int(req.GetMaxPages()),
	}, func(p daemon.ViewPage) error {
		resp := &pb.ScanViewResponse{Cursor: p.Cursor, Done: p.Done, Entries: make([]*pb.ViewEntry, len(p.Entries))}
		for i := range p.Entries {
			resp.Entries[i] = protocol.EntryToPB(&p.Entries[i])
		}
		if first {
			first = false
			states, err := inst.ViewStates(req.GetViewId())
			if err != nil {
				return err
			}
			resp.States = statesToPB(states)
		}
		if n := proto.Size(resp); n > s.opts.MaxMessageSize {
			return status.Errorf(codes.ResourceExhausted,
				"stated: scan of a view of %s: an entry of key group %d makes a page of %d bytes, over the %d-byte message limit",
				inst.Task, p.Entries[0].KeyGroup, n, s.opts.MaxMessageSize)
		}
		return stream.Send(resp)
	})
	return toStatus(err)
}

// ReleaseView implements pb.StatedServer.
func (s *Server) ReleaseView(ctx context.Context, req *pb.ReleaseViewRequest) (*pb.ReleaseViewResponse, error) {
	inst, err := s.d.Lookup(req.GetInstanceId(), req.GetJob())
	if err != nil {
		return nil, toStatus(err)
	}
	if err := inst.ReleaseView(req.GetViewId()); err != nil {
		return nil, toStatus(err)
	}
	return &pb.ReleaseViewResponse{}, nil
}

// ScanKeys implements pb.StatedServer.
func (s *Server) ScanKeys(ctx context.Context, req *pb.ScanKeysRequest) (*pb.ScanKeysResponse, error) {
	inst, err := s.d.Lookup(req.GetInstanceId(), req.GetJob())
	if err != nil {
		return nil, toStatus(err)
	}
	limit := int(req.GetLimit())
	if limit <= 0 || limit > s.opts.MaxPage {
		limit = s.opts.MaxPage
	}
	r, err := rangeFromPB(req.GetKeyGroups(), inst)
	if err != nil {
		return nil, err
	}
	q := daemon.KeyScan{State: req.GetState(), Range: r, Cursor: req.GetCursor(), Limit: limit}
	if req.Namespace != nil {
		q.HasNamespace, q.Namespace = true, req.Namespace
	}
	keys, cursor, more, err := inst.ScanKeys(q)
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &pb.ScanKeysResponse{Keys: make([]*pb.StateKey, len(keys)), More: more, Cursor: cursor}
	size := 0
	for i, k := range keys {
		resp.Keys[i] = &pb.StateKey{KeyGroup: uint32(k.KeyGroup), Key: k.Key, Namespace: k.Namespace}
		if size += len(k.Key) + len(k.Namespace) + 16; size > s.opts.MaxMessageSize/2 {
			return nil, status.Errorf(codes.ResourceExhausted,
				"stated: key scan of state %q of %s: %d keys take over %d bytes; ask for fewer with limit",
				req.GetState(), inst.Task, i+1, s.opts.MaxMessageSize/2)
		}
	}
	return resp, nil
}

// CountEntries implements pb.StatedServer.
func (s *Server) CountEntries(ctx context.Context, req *pb.CountEntriesRequest) (*pb.CountEntriesResponse, error) {
	inst, err := s.d.Lookup(req.GetInstanceId(), req.GetJob())
	if err != nil {
		return nil, toStatus(err)
	}
	n, err := inst.CountEntries(req.GetState())
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.CountEntriesResponse{Entries: n}, nil
}

// RegisterStates implements pb.StatedServer.
func (s *Server) RegisterStates(ctx context.Context, req *pb.RegisterStatesRequest) (*pb.RegisterStatesResponse, error) {
	inst, err := s.d.Lookup(req.GetInstanceId(), req.GetJob())
	if err != nil {
		return nil, toStatus(err)
	}
	ds := make([]backend.StateDescriptor, len(req.GetStates()))
	for i, d := range req.GetStates() {
		ds[i] = protocol.StateFromPB(d)
	}
	states, err := inst.RegisterStates(ds)
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.RegisterStatesResponse{States: statesToPB(states)}, nil
}

// Load implements pb.StatedServer. It holds one request's entries at a
// time (the lsm backend adds a bounded sort buffer).
func (s *Server) Load(stream pb.Stated_LoadServer) error {
	req, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return status.Error(codes.InvalidArgument, "stated: load: the stream ended before its first request (which names the instance)")
	}
	if err != nil {
		return err
	}
	if err := malformed(req, "load request"); err != nil {
		return err
	}
	inst, err := s.d.Lookup(req.GetInstanceId(), req.GetJob())
	if err != nil {
		return toStatus(err)
	}
	var entries []backend.LoadEntry
	next := func() ([]backend.LoadEntry, error) {
		for req == nil {
			r, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return nil, nil
			}
			if err != nil {
				return nil, err
			}
			if err := malformed(r, "load request"); err != nil {
				return nil, err
			}
			if (len(r.GetInstanceId()) > 0 && string(r.GetInstanceId()) != string(inst.ID)) || (r.GetJob() != "" && r.GetJob() != inst.Task.Job) {
				return nil, status.Errorf(codes.InvalidArgument,
					"stated: load into %s: a request names another instance or job than the first; load each instance on its own stream", inst.Task)
			}
			if len(r.GetEntries()) > 0 {
				req = r
			}
		}
		entries = entries[:0]
		for _, e := range req.GetEntries() {
			entries = append(entries, protocol.EntryFromPB(e, nil))
		}
		req = nil
		return entries, nil
	}
	if len(req.GetEntries()) == 0 {
		req = nil
	}
	st, err := inst.Load(next)
	if err != nil {
		return toStatus(err)
	}
	return stream.SendAndClose(&pb.LoadResponse{Entries: st.Entries, Bytes: st.Bytes})
}
