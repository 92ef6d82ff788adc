package api_test

// Tests of the batch socket as a client written from stated.proto and
// docs/protocol.md would use it: a Unix socket, the preface, framed
// messages of the generated types, and the status frame at the end.

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/statedhq/stated/api"
	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/api/protocol"
	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/host"
)

// socketClient is one connection to a batch socket.
type socketClient struct {
	t    *testing.T
	conn net.Conn
}

func dialBatchSocket(t *testing.T, path string, preface string) *socketClient {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, preface); err != nil {
		t.Fatal(err)
	}
	return &socketClient{t: t, conn: c}
}

func (s *socketClient) frame(flag byte, b []byte) {
	s.t.Helper()
	if _, err := s.conn.Write(append(protocol.AppendFrameHeader(nil, flag, len(b)), b...)); err != nil {
		s.t.Fatal(err)
	}
}

func (s *socketClient) send(req *pb.BatchRequest) {
	s.t.Helper()
	b, err := proto.Marshal(req)
	if err != nil {
		s.t.Fatal(err)
	}
	s.frame(protocol.FrameMessage, b)
}

// next reads one frame: a response, or the stream's status.
func (s *socketClient) next() (*pb.BatchResponse, *spb.Status) {
	s.t.Helper()
	var hdr [protocol.FrameHeaderSize]byte
	flag, n, err := protocol.ReadFrameHeader(s.conn, &hdr, 64<<20)
	if err != nil {
		s.t.Fatalf("reading a frame: %v", err)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(s.conn, b); err != nil {
		s.t.Fatal(err)
	}
	switch flag {
	case protocol.FrameMessage:
		resp := new(pb.BatchResponse)
		if err := proto.Unmarshal(b, resp); err != nil {
			s.t.Fatal(err)
		}
		return resp, nil
	case protocol.FrameStatus:
		st := new(spb.Status)
		if err := proto.Unmarshal(b, st); err != nil {
			s.t.Fatal(err)
		}
		return nil, st
	}
	s.t.Fatalf("frame flag 0x%02x", flag)
	return nil, nil
}

func (s *socketClient) response() *pb.BatchResponse {
	s.t.Helper()
	resp, st := s.next()
	if st != nil {
		s.t.Fatalf("stream ended: %s: %s", codes.Code(st.Code), st.Message)
	}
	return resp
}

// status reads the stream's status, then expects the connection's end.
func (s *socketClient) status() *spb.Status {
	s.t.Helper()
	resp, st := s.next()
	if st == nil {
		s.t.Fatalf("got response %d, want the stream's status", resp.Seq)
	}
	if n, err := s.conn.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
		s.t.Fatalf("after the status: %d bytes, %v; want the connection's end", n, err)
	}
	return st
}

func openForSocket(t *testing.T, h *harness, job string) *pb.OpenResponse {
	t.Helper()
	open, err := rawConn(t, h).Open(ctxT(t), &pb.OpenRequest{Task: &pb.TaskId{Job: job, Operator: "op"}, Parallelism: 1,
		BackendKind: pb.BackendKind_BACKEND_KIND_LSM, States: []*pb.StateDescriptor{{Name: "v", Kind: pb.StateKind_STATE_KIND_VALUE}}})
	if err != nil {
		t.Fatal(err)
	}
	return open
}

func TestBatchSocketServesTheBatchStream(t *testing.T) {
	h := startDaemon(t, harnessOpts{})
	open := openForSocket(t, h, "sock")
	if want := strings.TrimSuffix(h.sock, ".sock") + "-batch.sock"; open.BatchSocket != want {
		t.Fatalf("OpenResponse.batch_socket %q, want %q", open.BatchSocket, want)
	}
	if open.ProtocolVersion < 4 {
		t.Fatalf("protocol_version %d with batch_socket, want at least 4", open.ProtocolVersion)
	}
	s := dialBatchSocket(t, open.BatchSocket, protocol.BatchSocketPreface)
	s.send(&pb.BatchRequest{Seq: 1, InstanceId: open.InstanceId, Job: "sock"})
	if r := s.response(); r.Seq != 1 {
		t.Fatalf("first response seq %d", r.Seq)
	}
	// Pipelined: every request written before any answer is read; each
	// get must see the put before it, answers in order.
	const n = 200
	for i := range n {
		k := fmt.Sprintf("k%d", i%17)
		s.send(&pb.BatchRequest{Seq: uint64(2 + 2*i), Ops: []*pb.Op{putOp(k, fmt.Sprint(i))}})
		s.send(&pb.BatchRequest{Seq: uint64(3 + 2*i), Ops: []*pb.Op{getOp(k)}})
	}
	for i := range n {
		if r := s.response(); r.Seq != uint64(2+2*i) || len(r.Results) != 0 && r.Results[0].Code != 0 {
			t.Fatalf("put %d: %v", i, r)
		}
		r := s.response()
		if r.Seq != uint64(3+2*i) || len(r.Results) != 1 || string(r.Results[0].Value) != fmt.Sprint(i) {
			t.Fatalf("get %d: %v", i, r)
		}
	}
	// The client ends the stream by closing its side: status OK.
	if err := s.conn.(*net.UnixConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if st := s.status(); st.Code != 0 {
		t.Fatalf("status %s: %s", codes.Code(st.Code), st.Message)
	}
	// The same instance is there for a gRPC stream: the values written on
	// the socket too.
	_, ws := openWireOn(t, h, open, "sock")
	res, _ := ws.do(&pb.BatchRequest{Ops: []*pb.Op{getOp("k16")}})
	if got, want := string(res[0].Value), fmt.Sprint(n-1-(n-1-16)%17); got != want {
		t.Fatalf("through gRPC, k16 = %q, want %q", got, want)
	}
}

// openWireOn opens a gRPC batch stream on an instance already open.
func openWireOn(t *testing.T, h *harness, open *pb.OpenResponse, job string) (*pb.OpenResponse, *wireStream) {
	t.Helper()
	stream, err := rawConn(t, h).Batch(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	ws := &wireStream{t: t, stream: stream}
	ws.do(&pb.BatchRequest{InstanceId: open.InstanceId, Job: job})
	return open, ws
}

func TestBatchSocketRefusals(t *testing.T) {
	h := startDaemon(t, harnessOpts{server: api.ServerOptions{MaxMessageSize: 1 << 20}})
	open := openForSocket(t, h, "refused")
	for _, tc := range []struct {
		name    string
		preface string
		send    func(s *socketClient)
		code    codes.Code
		text    string
	}{
		{"a gRPC client", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", nil, codes.InvalidArgument, "not the preface"},
		{"an unknown instance", protocol.BatchSocketPreface, func(s *socketClient) {
			s.send(&pb.BatchRequest{Seq: 1, InstanceId: []byte("nope"), Job: "refused"})
		}, codes.NotFound, ""},
		{"a frame over the message limit", protocol.BatchSocketPreface, func(s *socketClient) {
			s.send(&pb.BatchRequest{Seq: 1, InstanceId: open.InstanceId, Job: "refused"})
			s.response()
			// The header alone: the daemon refuses before the body.
			if _, err := s.conn.Write(protocol.AppendFrameHeader(nil, protocol.FrameMessage, 2<<20)); err != nil {
				t.Fatal(err)
			}
		}, codes.ResourceExhausted, "max_message_size"},
		{"a compressed frame", protocol.BatchSocketPreface, func(s *socketClient) {
			s.send(&pb.BatchRequest{Seq: 1, InstanceId: open.InstanceId, Job: "refused"})
			s.response()
			s.frame(0x01, []byte{1, 2, 3})
		}, codes.InvalidArgument, "compression"},
		{"a malformed request", protocol.BatchSocketPreface, func(s *socketClient) {
			s.send(&pb.BatchRequest{Seq: 1, InstanceId: open.InstanceId, Job: "refused"})
			s.response()
			s.frame(protocol.FrameMessage, []byte{0xff, 0xff, 0xff})
		}, codes.InvalidArgument, "batch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := dialBatchSocket(t, open.BatchSocket, tc.preface)
			if tc.send != nil {
				tc.send(s)
			}
			st := s.status()
			if codes.Code(st.Code) != tc.code || !strings.Contains(st.Message, tc.text) {
				t.Fatalf("status %s: %q; want %s with %q", codes.Code(st.Code), st.Message, tc.code, tc.text)
			}
		})
	}
}

// TestBatchSocketEndsWithTheDaemon: a shutdown ends a batch socket's
// stream as it ends a gRPC one, with UNAVAILABLE and a text saying so,
// and removes the socket file.
func TestBatchSocketEndsWithTheDaemon(t *testing.T) {
	h := startDaemon(t, harnessOpts{})
	open := openForSocket(t, h, "drain")
	s := dialBatchSocket(t, open.BatchSocket, protocol.BatchSocketPreface)
	s.send(&pb.BatchRequest{Seq: 1, InstanceId: open.InstanceId, Job: "drain", Ops: []*pb.Op{putOp("k", "v")}})
	s.response()
	// A second connection that has not even written its preface.
	idle, err := net.Dial("unix", open.BatchSocket)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	time.Sleep(50 * time.Millisecond)
	h.stop()
	st := s.status()
	if codes.Code(st.Code) != codes.Unavailable || !strings.Contains(st.Message, "shutting down") {
		t.Fatalf("status %s: %q", codes.Code(st.Code), st.Message)
	}
	// The connection that never wrote its preface is told the same.
	quiet := &socketClient{t: t, conn: idle}
	if st := quiet.status(); codes.Code(st.Code) != codes.Unavailable || !strings.Contains(st.Message, "shutting down") {
		t.Fatalf("idle connection: status %s: %q", codes.Code(st.Code), st.Message)
	}
	if _, err := net.Dial("unix", open.BatchSocket); err == nil {
		t.Fatal("the batch socket still accepts after the shutdown")
	}
}

// TestBatchSocketOff: "off" serves none and names none.
func TestBatchSocketOff(t *testing.T) {
	h := startDaemon(t, harnessOpts{node: func(o *host.Options) { o.BatchSocket = host.BatchSocketOff }})
	if open := openForSocket(t, h, "off"); open.BatchSocket != "" {
		t.Fatalf("batch_socket %q with --batch-socket off", open.BatchSocket)
	}
}

// TestGoClientTransports: the Go client takes the batch socket the daemon
// names, keeps to gRPC with NoBatchSocket, and both see the same state;
// a socket it cannot reach leaves it on gRPC.
func TestGoClientTransports(t *testing.T) {
	ctx := ctxT(t)
	h := startDaemon(t, harnessOpts{})
	for _, tc := range []struct {
		opts client.Options
		want string
	}{
		{client.Options{}, client.TransportBatchSocket},
		{client.Options{NoBatchSocket: true}, client.TransportGRPC},
	} {
		in := openHeap(t, h.dial(tc.opts), task("transport-"+tc.want, "op", 0))
		if got := in.Transport(); got != tc.want {
			t.Fatalf("options %+v: transport %q, want %q", tc.opts, got, tc.want)
		}
		in.Put("v", []byte("k"), nil, []byte(tc.want))
		v, err := in.Get("v", []byte("k"), nil).Wait(ctx)
		if err != nil || string(v.Data) != tc.want {
			t.Fatalf("%s: get %q, %v", tc.want, v.Data, err)
		}
		if err := in.Close(ctx); err != nil {
			t.Fatalf("%s: close: %v", tc.want, err)
		}
	}
	if err := os.Remove(strings.TrimSuffix(h.sock, ".sock") + "-batch.sock"); err != nil {
		t.Fatal(err)
	}
	in := openHeap(t, h.dial(client.Options{}), task("transport-gone", "op", 0))
	if got := in.Transport(); got != client.TransportGRPC {
		t.Fatalf("batch socket removed: transport %q, want %q", got, client.TransportGRPC)
	}
	if _, err := in.Put("v", []byte("k"), nil, []byte("x")).Wait(ctx); err != nil {
		t.Fatal(err)
	}
}
