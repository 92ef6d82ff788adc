package client

import (
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/statedhq/stated/api/internal/wire"
	"github.com/statedhq/stated/api/protocol"
	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/backend"
)

// ViewsProtocolVersion is the protocol revision that added read views, key
// scans, late registration and bulk load (stated.proto,
// OpenResponse.protocol_version); TakeView refuses a daemon of an earlier
// one with a message that says so.
const ViewsProtocolVersion = 1

// View is a frozen read view of an instance (Instance.TakeView): it holds
// every operation issued before it and none issued after, until Release,
// its idle timeout or the instance's close.
type View struct {
	in *Instance
	// ID names the view in the daemon.
	ID []byte
	// States are the instance's states when the view was taken, in scan
	// order; ViewEntry.StateID indexes them.
	States []backend.StateDescriptor
	// KeyGroups is the instance's range.
	KeyGroups backend.KeyGroupRange
	// IdleTimeout is the idle timeout the daemon granted.
	IdleTimeout time.Duration
}

// TakeView freezes a read view of the instance: it goes out as a barrier
// on the batch stream (stated.proto, BatchRequest.view) in the batch of the
// operations issued last, so it holds every one of them and none issued
// after. idle is the view's idle timeout (0: the daemon's default).
func (in *Instance) TakeView(ctx context.Context, idle time.Duration) (*View, error) {
	if in.protoVersion < ViewsProtocolVersion {
		return nil, status.Errorf(codes.FailedPrecondition,
			"client: view of %s: the daemon speaks protocol revision %d of stated.v1 and read views need revision %d or later: upgrade the daemon",
			in.task, in.protoVersion, ViewsProtocolVersion)
	}
	b, err := in.sendBarrier(ctx, func(buf []byte) []byte {
		return wire.AppendViewBarrier(buf, wire.ViewBarrier{IdleTimeoutMillis: idle.Milliseconds()})
	})
	if err != nil {
		return nil, err
	}
	enc, ok, err := wire.ResponseView(b.resp)
	if err == nil && !ok {
		err = errors.New("no view outcome in the response to a view barrier (a daemon without views?)")
	}
	var out pb.ViewOutcome
	if err == nil {
		err = proto.Unmarshal(enc, &out)
	}
	if err != nil {
		return nil, status.Errorf(codes.Internal, "client: view of %s: %v", in.task, err)
	}
	if out.GetCode() != 0 {
		return nil, status.Error(codes.Code(out.GetCode()), out.GetError())
	}
	info := out.GetView()
	v := &View{in: in, ID: info.GetViewId(), KeyGroups: protocol.KeyGroupsFromPB(info.GetKeyGroups()),
		IdleTimeout: time.Duration(info.GetIdleTimeoutMillis()) * time.Millisecond}
	for _, d := range info.GetStates() {
		v.States = append(v.States, protocol.StateFromPB(d))
	}
	return v, nil
}

// ViewScan bounds View.Scan.
type ViewScan struct {
	// Range to scan; nil: the instance's whole range.
	Range *backend.KeyGroupRange
	// Cursor resumes after the entry a previous scan ended at (nil: from
	// the start).
	Cursor []byte
	// PageBytes is the daemon's page size (0: its default, 1 MiB).
	PageBytes int
	// MaxPages ends the scan after this many pages (0: at the end).
	MaxPages int
}

// Scan streams the view's entries in scan order (key group, state, key,
// namespace, user key) to fn; the entry is valid only during the call.
// It returns the cursor after the last page received and whether the
// range was scanned to its end; a scan cut short (an error, MaxPages)
// resumes from the cursor.
func (v *View) Scan(ctx context.Context, s ViewScan, fn func(e *backend.ViewEntry) error) (cursor []byte, done bool, err error) {
	req := &pb.ScanViewRequest{InstanceId: v.in.id, Job: v.in.task.Job, ViewId: v.ID, Cursor: s.Cursor,
		PageBytes: int32(s.PageBytes), MaxPages: int32(s.MaxPages)}
	if s.Range != nil {
		req.KeyGroups = protocol.KeyGroupsToPB(*s.Range)
	}
	cursor = s.Cursor
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := v.in.c.rpc.ScanView(cctx, req)
	if err != nil {
		return cursor, false, err
	}
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return cursor, done, nil
		}
		if err != nil {
			return cursor, false, err
		}
		for _, pe := range resp.GetEntries() {
			e := protocol.EntryFromPB(pe, v.States)
			if err := fn(&e); err != nil {
				return cursor, false, err
			}
		}
		cursor, done = resp.GetCursor(), resp.GetDone()
	}
}

// Release frees the view in the daemon. A view released already (or timed
// out) is NotFound.
func (v *View) Release(ctx context.Context) error {
	_, err := v.in.c.rpc.ReleaseView(ctx, &pb.ReleaseViewRequest{InstanceId: v.in.id, Job: v.in.task.Job, ViewId: v.ID})
	return err
}

// KeyScan bounds Instance.ScanKeys.
type KeyScan struct {
	State string
	// Namespace, when not nil, lists only that namespace's keys (an empty,
	// non-nil slice is the empty namespace).
	Namespace []byte
	// Range restricts the scan; nil: the instance's whole range.
	Range *backend.KeyGroupRange
	// Cursor continues after the page that returned it.
	Cursor []byte
	// Limit bounds the keys of the page (0: the daemon's page cap).
	Limit int
}

// ScanKeys returns one page of the keys (and namespaces) of a state. It
// sends what was issued and waits until it is applied first, so the page
// sees every operation issued before it.
func (in *Instance) ScanKeys(ctx context.Context, q KeyScan) (keys []backend.StateKey, cursor []byte, more bool, err error) {
	if err := in.Sync(ctx); err != nil {
		return nil, nil, false, err
	}
	req := &pb.ScanKeysRequest{InstanceId: in.id, Job: in.task.Job, State: q.State, Cursor: q.Cursor, Limit: int32(q.Limit)}
	if q.Namespace != nil {
		req.Namespace = q.Namespace
	}
	if q.Range != nil {
		req.KeyGroups = protocol.KeyGroupsToPB(*q.Range)
	}
	resp, err := in.c.rpc.ScanKeys(ctx, req)
	if err != nil {
		return nil, nil, false, err
	}
	for _, k := range resp.GetKeys() {
		keys = append(keys, backend.StateKey{KeyGroup: int(k.GetKeyGroup()), Key: k.GetKey(), Namespace: k.GetNamespace()})
	}
	return keys, resp.GetCursor(), resp.GetMore(), nil
}

// CountEntries counts the stored entries of state ("": all), after what
// was issued is applied.
func (in *Instance) CountEntries(ctx context.Context, state string) (int64, error) {
	if err := in.Sync(ctx); err != nil {
		return 0, err
	}
	resp, err := in.c.rpc.CountEntries(ctx, &pb.CountEntriesRequest{InstanceId: in.id, Job: in.task.Job, State: state})
	if err != nil {
		return 0, err
	}
	return resp.GetEntries(), nil
}

// RegisterStates registers states after Open; operations issued after it
// returns may use them.
func (in *Instance) RegisterStates(ctx context.Context, ds ...backend.StateDescriptor) error {
	req := &pb.RegisterStatesRequest{InstanceId: in.id, Job: in.task.Job}
	for _, d := range ds {
		req.States = append(req.States, protocol.StateToPB(d))
	}
	resp, err := in.c.rpc.RegisterStates(ctx, req)
	if err != nil {
		return err
	}
	states := make([]backend.StateDescriptor, 0, len(resp.GetStates()))
	for _, d := range resp.GetStates() {
		states = append(states, protocol.StateFromPB(d))
	}
	in.mu.Lock()
	in.states = states
	in.mu.Unlock()
	return nil
}

// loadStream is the stream description of the Load RPC.
func loadStream() *grpc.StreamDesc {
	for i := range pb.Stated_ServiceDesc.Streams {
		if d := &pb.Stated_ServiceDesc.Streams[i]; d.StreamName == "Load" {
			return d
		}
	}
	return &grpc.StreamDesc{StreamName: "Load", ClientStreams: true}
}

// Load writes entries in bulk (stated.proto, Load): next returns the
// entries batch by batch and nil at the end; each batch goes out as one
// request, encoded by hand (api/internal/wire), so keep a batch well under
// the daemon's message limit (a few MiB). It sends what was issued and
// waits until it is applied first, and returns once every entry is
// visible.
func (in *Instance) Load(ctx context.Context, next func() []backend.LoadEntry) (entries, bytes int64, err error) {
	if err := in.Sync(ctx); err != nil {
		return 0, 0, err
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := in.c.cc.NewStream(cctx, loadStream(), pb.Stated_Load_FullMethodName, grpc.ForceCodecV2(wire.NewCodec()))
	if err != nil {
		return 0, 0, err
	}
	first := true
	size := 4096
	for {
		batch := next()
		if batch == nil && !first {
			break
		}
		orig := wire.OutBuffer(size)
		b := *orig
		if first {
			b, first = wire.AppendLoadHeader(b, in.id, in.task.Job), false
		}
		for i := range batch {
			b = wire.AppendLoadEntry(b, &batch[i])
		}
		size = len(b) + len(b)/8
		if err := stream.SendMsg(wire.NewOutgoing(orig, b)); err != nil {
			if errors.Is(err, io.EOF) {
				break // the daemon ended the stream: RecvMsg has its status
			}
			return 0, 0, err
		}
		if batch == nil {
			break
		}
	}
	if err := stream.CloseSend(); err != nil {
		return 0, 0, err
	}
	var resp pb.LoadResponse
	if err := stream.RecvMsg(&resp); err != nil {
		return 0, 0, err
	}
	return resp.GetEntries(), resp.GetBytes(), nil
}
