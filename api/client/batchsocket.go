package client

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"syscall"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/statedhq/stated/api/internal/wire"
	"github.com/statedhq/stated/api/protocol"
)

// socketStream is an instance's batch stream on the daemon's batch socket
// (OpenResponse.batch_socket; api/protocol's BatchSocketPreface says how
// it is framed): what Instance needs of a grpc.ClientStream. The daemon
// answers a request on the goroutine that read it, where through gRPC it
// hands it between three, so a round trip costs about a third.
type socketStream struct {
	ctx  context.Context
	path string
	conn *net.UnixConn
	r    *bufio.Reader
	hdr  [protocol.FrameHeaderSize]byte
	// whdr is the header being written: Instance sends one request at a
	// time (its sendMu), and CloseSend only under it too.
	whdr  []byte
	limit int
	stop  func() bool
	once  sync.Once
}

// dialBatchSocket connects to path and writes the preface; ctx's end
// closes the connection (the stream's cancel, as for a gRPC stream).
// Answers over limit bytes end the stream.
func dialBatchSocket(ctx context.Context, path string, limit int) (*socketStream, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	uc := c.(*net.UnixConn)
	if _, err := io.WriteString(uc, protocol.BatchSocketPreface); err != nil {
		uc.Close()
		return nil, err
	}
	s := &socketStream{ctx: ctx, path: path, conn: uc, r: bufio.NewReaderSize(uc, protocol.SocketBufferSize), limit: limit}
	s.stop = context.AfterFunc(ctx, func() { uc.Close() })
	return s, nil
}

// SendMsg writes one request (a *wire.Raw); its pooled buffer goes back
// once written. A daemon that closed the connection gives io.EOF, as a
// gRPC stream does: RecvMsg then returns the stream's status.
func (s *socketStream) SendMsg(m any) error {
	raw, ok := m.(*wire.Raw)
	if !ok {
		return status.Errorf(codes.Internal, "client: batch socket: cannot send %T", m)
	}
	err := protocol.WriteFrame(s.conn, &s.whdr, protocol.FrameMessage, raw.Data)
	raw.Sent()
	if errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
		return io.EOF
	}
	return err
}

// RecvMsg reads the next answer into m (a *wire.Raw, which then owns its
// bytes). The daemon's status frame ends the stream: io.EOF for OK (the
// client ended it), else the status as a gRPC stream returns it.
func (s *socketStream) RecvMsg(m any) error {
	raw, ok := m.(*wire.Raw)
	if !ok {
		return status.Errorf(codes.Internal, "client: batch socket: cannot receive into %T", m)
	}
	flag, n, err := protocol.ReadFrameHeader(s.r, &s.hdr, s.limit)
	if err == nil {
		body := make([]byte, n)
		if _, err = io.ReadFull(s.r, body); err == nil {
			switch flag {
			case protocol.FrameMessage:
				raw.Data = body
				return nil
			case protocol.FrameStatus:
				st := new(spb.Status)
				if err := proto.Unmarshal(body, st); err != nil {
					return status.Errorf(codes.Internal, "client: batch socket %s: malformed status: %v", s.path, err)
				}
				s.close()
				if st.Code == 0 {
					return io.EOF
				}
				return status.ErrorProto(st)
			default:
				return status.Errorf(codes.Internal, "client: batch socket %s: frame flag 0x%02x from the daemon", s.path, flag)
			}
		}
	}
	if s.ctx.Err() != nil {
		return status.FromContextError(s.ctx.Err()).Err()
	}
	if errors.Is(err, io.EOF) {
		return status.Errorf(codes.Unavailable, "client: the daemon closed the batch socket %s without ending the stream (it stopped or restarted?)", s.path)
	}
	return status.Errorf(codes.Unavailable, "client: batch socket %s: %v", s.path, err)
}

// CloseSend ends the requests: the daemon answers the rest, then ends the
// stream with status OK.
func (s *socketStream) CloseSend() error { return s.conn.CloseWrite() }

// close releases the connection once the stream has ended.
func (s *socketStream) close() {
	s.once.Do(func() {
		s.stop()
		s.conn.Close()
	})
}

// Context is the stream's.
func (s *socketStream) Context() context.Context { return s.ctx }

// Header and Trailer: a batch socket carries no metadata.
func (s *socketStream) Header() (metadata.MD, error) { return nil, nil }
func (s *socketStream) Trailer() metadata.MD         { return nil }
