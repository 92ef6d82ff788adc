package api

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/statedhq/stated/api/internal/wire"
	"github.com/statedhq/stated/api/protocol"
	pb "github.com/statedhq/stated/api/statedpb"
)

// The batch socket serves the Batch stream without gRPC (protocol's
// BatchSocketPreface says how it is framed). A synchronous read is one
// round trip, and through grpc-go a round trip wakes three goroutines in
// turn (the connection's reader, the stream's, the writer that flushes the
// answer), each wake a thread switch when the daemon has more than one
// CPU: measured, those switches were most of the daemon's CPU per round
// trip (docs/performance.md, "The batch socket"). Here the goroutine that
// reads a request from the connection applies it and writes its answer,
// as the gRPC stream's reader does when nothing is queued (batchStream),
// so a client with one request in flight pays no hand-off at all. The
// stream's semantics are the Batch call's: the same handler serves it.

// batchSockets tracks the batch socket listeners and connections of a
// Server, for Drain.
type batchSockets struct {
	mu        sync.Mutex
	stopped   bool
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{}
	// handlers counts the connections being served.
	handlers sync.WaitGroup
}

// ErrBatchSocketsStopped is ServeBatchSocket's error when called after
// Drain.
var ErrBatchSocketsStopped = errors.New("api: the server is draining: no batch socket is served")

// ServeBatchSocket serves batch streams on ln (a Unix socket the daemon
// advertises as ServerOptions.BatchSocket) until Drain, then returns nil;
// it returns ln's error if ln fails first. It closes ln.
func (s *Server) ServeBatchSocket(ln net.Listener) error {
	bs := &s.batchSockets
	bs.mu.Lock()
	if bs.stopped {
		bs.mu.Unlock()
		ln.Close()
		return ErrBatchSocketsStopped
	}
	if bs.listeners == nil {
		bs.listeners = map[net.Listener]struct{}{}
		bs.conns = map[net.Conn]struct{}{}
	}
	bs.listeners[ln] = struct{}{}
	bs.mu.Unlock()
	defer func() {
		bs.mu.Lock()
		delete(bs.listeners, ln)
		bs.mu.Unlock()
		ln.Close()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			bs.mu.Lock()
			stopped := bs.stopped
			bs.mu.Unlock()
			if stopped {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return fmt.Errorf("api: batch socket: %w", err)
		}
		bs.mu.Lock()
		if bs.stopped {
			bs.mu.Unlock()
			c.Close()
			return nil
		}
		bs.conns[c] = struct{}{}
		bs.handlers.Add(1)
		bs.mu.Unlock()
		// Owned by the Server: Drain ends it and waits for it.
		go func() {
			defer func() {
				c.Close()
				bs.mu.Lock()
				delete(bs.conns, c)
				bs.mu.Unlock()
				bs.handlers.Done()
			}()
			s.serveBatchConn(c)
		}()
	}
}

// StopBatchSockets stops them at once, without draining: the listeners
// and every connection are closed (their streams end as a broken
// connection ends them). For a node that fails before it serves; Drain is
// the shutdown.
func (s *Server) StopBatchSockets() {
	bs := &s.batchSockets
	bs.stopAccepting()
	bs.mu.Lock()
	for c := range bs.conns {
		c.Close()
	}
	bs.mu.Unlock()
	bs.handlers.Wait()
}

// stopAccepting closes the batch socket listeners (Drain's first step).
func (bs *batchSockets) stopAccepting() {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	bs.stopped = true
	for ln := range bs.listeners {
		ln.Close()
	}
}

// wait returns once no batch socket connection is served. It is called
// after draining closed: streams end after the request they apply, and a
// connection still reading (its preface, or a request) is woken by a read
// deadline in the past. When ctx ends first, the connections are closed.
func (bs *batchSockets) wait(ctx context.Context) error {
	bs.mu.Lock()
	for c := range bs.conns {
		_ = c.SetReadDeadline(time.Now())
	}
	bs.mu.Unlock()
	done := make(chan struct{})
	go func() {
		// Owned by wait, which returns only once it has ended.
		bs.handlers.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		bs.mu.Lock()
		n := len(bs.conns)
		for c := range bs.conns {
			c.Close()
		}
		bs.mu.Unlock()
		<-done
		return fmt.Errorf("api: %d batch socket connections cut: %w", n, ctx.Err())
	}
}

// serveBatchConn serves one connection: the preface, then one batch
// stream, then the stream's status.
func (s *Server) serveBatchConn(c net.Conn) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := &socketStream{conn: c, r: bufio.NewReaderSize(c, 64<<10), ctx: ctx, cancel: cancel, limit: s.opts.MaxMessageSize}
	_ = c.SetReadDeadline(time.Now().Add(s.opts.FirstBatchTimeout))
	pre := make([]byte, len(protocol.BatchSocketPreface))
	if _, err := io.ReadFull(st.r, pre); err != nil {
		select {
		case <-s.draining:
			// Drain woke the read (a deadline in the past).
			st.end(status.Error(codes.Unavailable, "stated: the daemon is shutting down"))
			return
		default:
		}
		st.end(status.Errorf(codes.InvalidArgument, "stated: batch socket: no preface within %s of connecting (%v): a client writes %q first",
			s.opts.FirstBatchTimeout, err, protocol.BatchSocketPreface))
		return
	}
	if string(pre) != protocol.BatchSocketPreface {
		st.end(status.Errorf(codes.InvalidArgument,
			"stated: batch socket: the connection began with %q, not the preface %q: this socket serves only the Batch stream (docs/protocol.md, \"The batch socket\"); gRPC clients use the daemon's socket",
			pre, protocol.BatchSocketPreface))
		return
	}
	// The Batch handler bounds the wait for the first request itself.
	_ = c.SetReadDeadline(time.Time{})
	st.end(s.Batch(st))
}

// socketStream is a batch stream on a batch socket connection: what the
// Batch handler needs of a gRPC server stream.
type socketStream struct {
	conn   net.Conn
	r      *bufio.Reader
	ctx    context.Context
	cancel context.CancelFunc
	limit  int
	hdr    [protocol.FrameHeaderSize]byte
	// wmu serializes writes: the handler answers one request at a time,
	// but the stream's status must never interleave with an answer.
	wmu  sync.Mutex
	whdr []byte
}

var _ pb.Stated_BatchServer = (*socketStream)(nil)

// end writes the stream's status (OK for nil) as its last frame.
func (st *socketStream) end(err error) {
	sp := status.Convert(err).Proto()
	if err == nil {
		sp = &spb.Status{}
	}
	b, merr := proto.Marshal(sp)
	if merr != nil {
		return
	}
	_ = st.conn.SetWriteDeadline(time.Now().Add(time.Second))
	_ = st.write(protocol.FrameStatus, b)
}

func (st *socketStream) write(flag byte, b []byte) error {
	st.wmu.Lock()
	defer st.wmu.Unlock()
	return protocol.WriteFrame(st.conn, &st.whdr, flag, b)
}

// RecvMsg reads the next request into m, a *wire.Raw (as the Batch
// handler receives). The client's closing
// of the connection after a whole frame is the stream's end (io.EOF).
func (st *socketStream) RecvMsg(m any) error {
	flag, n, err := protocol.ReadFrameHeader(st.r, &st.hdr, st.limit)
	switch {
	case errors.Is(err, io.EOF):
		return io.EOF
	case errors.Is(err, protocol.ErrFrameTooLarge):
		return status.Errorf(codes.ResourceExhausted, "stated: batch socket: request %v (the daemon's max_message_size)", err)
	case errors.Is(err, os.ErrDeadlineExceeded):
		// Drain woke the reader; the handler ends the stream after the
		// request it applies, under a context still live.
		return status.Error(codes.Unavailable, "stated: the daemon is shutting down")
	case err != nil:
		// Cut inside a header, or a broken connection.
		st.cancel()
		return status.Errorf(codes.Canceled, "stated: batch socket: %v", err)
	case flag != protocol.FrameMessage:
		return status.Errorf(codes.InvalidArgument, "stated: batch socket: frame flag 0x%02x: a client sends only messages (flag 0x00; compression is not supported)", flag)
	}
	raw, ok := m.(*wire.Raw)
	if !ok {
		return status.Errorf(codes.Internal, "stated: batch socket: cannot receive into %T", m)
	}
	if _, err := io.ReadFull(st.r, raw.Alloc(n)); err != nil {
		raw.Free()
		st.cancel()
		return status.Errorf(codes.Canceled, "stated: batch socket: the connection ended inside a request: %v", err)
	}
	return nil
}

// SendMsg writes one answer (a *wire.Raw, whose pooled buffer goes back
// once written).
func (st *socketStream) SendMsg(m any) error {
	raw, ok := m.(*wire.Raw)
	if !ok {
		return status.Errorf(codes.Internal, "stated: batch socket: cannot send %T", m)
	}
	err := st.write(protocol.FrameMessage, raw.Data)
	raw.Sent()
	if err != nil {
		st.cancel()
		return status.Errorf(codes.Unavailable, "stated: batch socket: writing an answer: %v", err)
	}
	return nil
}

// Recv and Send complete pb.Stated_BatchServer; the Batch handler
// receives and sends raw messages (RecvMsg, SendMsg) only.
func (st *socketStream) Recv() (*pb.BatchRequest, error) {
	return nil, status.Error(codes.Internal, "stated: batch socket: Recv is not served; use RecvMsg")
}

// Send: see Recv.
func (st *socketStream) Send(*pb.BatchResponse) error {
	return status.Error(codes.Internal, "stated: batch socket: Send is not served; use SendMsg")
}

// Context is the stream's: cancelled when the connection breaks or the
// stream ends.
func (st *socketStream) Context() context.Context { return st.ctx }

// SetHeader, SendHeader and SetTrailer: a batch socket carries no
// metadata; the Batch handler sets none.
func (st *socketStream) SetHeader(metadata.MD) error  { return nil }
func (st *socketStream) SendHeader(metadata.MD) error { return nil }
func (st *socketStream) SetTrailer(metadata.MD)       {}
