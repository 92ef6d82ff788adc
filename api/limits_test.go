package api_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/statedhq/stated/api"
	"github.com/statedhq/stated/api/client"
	pb "github.com/statedhq/stated/api/statedpb"
)

// TestBatchStreamWithoutFirstRequestEnds: a batch stream that never sends
// its first request (the one naming the instance) is ended by the daemon
// after FirstBatchTimeout, and its handler's goroutines end with it;
// instances opened by the client send that request in Open, so an idle one
// outlives the timeout.
func TestBatchStreamWithoutFirstRequestEnds(t *testing.T) {
	ctx := ctxT(t)
	const timeout = 200 * time.Millisecond
	h := startDaemon(t, harnessOpts{server: api.ServerOptions{FirstBatchTimeout: timeout}})
	c := h.dial(client.Options{})
	in := openHeap(t, c, task("j", "op", 0))
	base := baseGoroutines()

	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := c.RPC().Batch(sctx)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = st.Recv()
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(status.Convert(err).Message(), "no batch request within "+timeout.String()) {
		t.Fatalf("silent stream: %v after %s; want the daemon's DeadlineExceeded", err, time.Since(start))
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("ended after %s", d)
	}
	settledGoroutines(t, base, "after the silent stream ended")

	time.Sleep(2 * timeout)
	if _, err := in.Put("v", []byte("k"), nil, []byte("x")).Wait(ctx); err != nil {
		t.Fatalf("instance idle for longer than the timeout: %v", err)
	}
	if got := h.d.Metrics().Streams.Load(); got != 1 {
		t.Fatalf("%d streams bound, want 1", got)
	}
}

// TestMaxConcurrentStreams: one connection has at most MaxConcurrentStreams
// streams and calls open; a further one waits in the client (and reaches
// no handler) until one ends.
func TestMaxConcurrentStreams(t *testing.T) {
	ctx := ctxT(t)
	h := startDaemon(t, harnessOpts{server: api.ServerOptions{MaxConcurrentStreams: 2}})
	// Batch streams on the connection (a batch socket's are not HTTP/2
	// streams).
	c := h.dial(client.Options{NoBatchSocket: true})
	a := openHeap(t, c, task("a", "op", 0))
	b := openHeap(t, c, task("b", "op", 0))
	// Both batch streams hold the connection's slots: a unary call waits.
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := c.ListCheckpoints(wctx, "a"); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("call beyond the stream limit: %v, want it to wait (DeadlineExceeded)", err)
	}
	if got := h.d.Metrics().Streams.Load(); got != 2 {
		t.Fatalf("%d batch streams, want 2", got)
	}
	if _, err := b.Put("v", []byte("k"), nil, []byte("x")).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	// Another connection has its own slots.
	other := h.dial(client.Options{NoBatchSocket: true})
	if _, err := other.ListCheckpoints(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	// A stream that ends frees its slot (Close's own unary call waits for
	// it, so abandon the instance instead).
	a.Abandon()
	if _, err := c.ListCheckpoints(ctx, "a"); err != nil {
		t.Fatalf("after a stream ended: %v", err)
	}
}

// slowList makes ListCheckpoints calls run until release is closed (or,
// with ctxAware, until their context ends, plus linger), after closing
// started; finished is set when the handler returns.
type slowList struct {
	started  chan struct{}
	release  chan struct{}
	ctxAware bool
	linger   time.Duration
	finished atomic.Bool
}

func (s *slowList) interceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if info.FullMethod != pb.Stated_ListCheckpoints_FullMethodName {
		return h(ctx, req)
	}
	defer s.finished.Store(true)
	close(s.started)
	if s.ctxAware {
		<-ctx.Done()
		// A handler that takes a while to notice, as a catalog write
		// does.
		time.Sleep(s.linger)
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	<-s.release
	return h(ctx, req)
}

// TestDrainWaitsForUnaryCalls: Drain lets a unary call in flight finish
// however long it takes within the grace (it used to cut them after 2 s),
// cuts batch streams, and returns only after every handler has returned.
func TestDrainWaitsForUnaryCalls(t *testing.T) {
	ctx := ctxT(t)
	slow := &slowList{started: make(chan struct{}), release: make(chan struct{})}
	h := startDaemon(t, harnessOpts{grpc: []grpc.ServerOption{grpc.ChainUnaryInterceptor(slow.interceptor)}})
	c := h.dial(client.Options{})
	in := openHeap(t, c, task("j", "op", 0))
	callErr := make(chan error, 1)
	go func() { _, err := c.ListCheckpoints(ctx, "j"); callErr <- err }()
	<-slow.started
	// Longer than the 2 s the daemon used to give calls in flight.
	time.AfterFunc(2500*time.Millisecond, func() { close(slow.release) })
	gctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := h.srv.Drain(gctx, h.g); err != nil {
		t.Fatalf("drain: %v", err)
	}
	if !slow.finished.Load() {
		t.Fatal("Drain returned while a call was running")
	}
	if err := <-callErr; err != nil {
		t.Fatalf("call in flight during the drain: %v", err)
	}
	if _, err := in.Put("v", []byte("k"), nil, []byte("x")).Wait(ctx); status.Code(err) != codes.Unavailable {
		t.Fatalf("batch stream after Drain: %v, want Unavailable", err)
	}
}

// slowCall starts a ListCheckpoints call that slow holds in its handler,
// returns once the handler runs, and the channel the call's error comes on.
func slowCall(t *testing.T, ctx context.Context, slow *slowList) (*harness, <-chan error) {
	t.Helper()
	h := startDaemon(t, harnessOpts{grpc: []grpc.ServerOption{grpc.ChainUnaryInterceptor(slow.interceptor)}})
	c := h.dial(client.Options{})
	callErr := make(chan error, 1)
	go func() { _, err := c.ListCheckpoints(ctx, "j"); callErr <- err }()
	<-slow.started
	return h, callErr
}

// TestDrainGraceEnds: when the grace ends first, Drain cancels the calls
// still running and still returns only once their handlers have.
func TestDrainGraceEnds(t *testing.T) {
	ctx := ctxT(t)
	slow := &slowList{started: make(chan struct{}), ctxAware: true, linger: 300 * time.Millisecond}
	h, callErr := slowCall(t, ctx, slow)
	gctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := h.srv.Drain(gctx, h.g); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("drain past the grace: %v", err)
	}
	if !slow.finished.Load() {
		t.Fatal("Drain returned while a handler was still running")
	}
	if err := <-callErr; err == nil {
		t.Fatal("call cut by the drain succeeded")
	}
}

// TestStopWaitsForHandlers: the servers GRPCServer builds return from Stop
// only once every handler has returned (grpc.WaitForHandlers), so a daemon
// shut down after Stop never runs under a call.
func TestStopWaitsForHandlers(t *testing.T) {
	ctx := ctxT(t)
	slow := &slowList{started: make(chan struct{}), ctxAware: true, linger: 300 * time.Millisecond}
	h, callErr := slowCall(t, ctx, slow)
	h.g.Stop()
	if !slow.finished.Load() {
		t.Fatal("Stop returned while a handler was still running")
	}
	<-callErr
}
