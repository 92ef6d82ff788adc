package api_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/api/protocol"
	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/host"
)

func openHeap(t *testing.T, c *client.Client, tk backend.TaskID) *client.Instance {
	t.Helper()
	in, err := c.Open(ctxT(t), client.OpenSpec{Task: tk, Parallelism: 1, Backend: backend.KindHeap, States: allStates})
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// Operations of many goroutines, each on its own keys, complete in the
// order each goroutine issued them: a Get sees exactly the Put before it.
// On lsm, runs of writes are one Pebble batch and runs of reads one lock
// hold: a read after a grouped write of the same request sees it.
func TestClientOrderPerKeyUnderConcurrency(t *testing.T) {
	for _, kind := range []backend.Kind{backend.KindHeap, backend.KindLSM} {
		t.Run(string(kind), func(t *testing.T) { testClientOrderPerKey(t, kind) })
	}
}

func testClientOrderPerKey(t *testing.T, kind backend.Kind) {
	ctx := ctxT(t)
	h := startDaemon(t, harnessOpts{})
	c := h.dial(client.Options{MaxBatchOps: 37, MaxInFlight: 4})
	in, err := c.Open(ctx, client.OpenSpec{Task: task("j", "op", 0), Parallelism: 1, Backend: kind, States: allStates})
	if err != nil {
		t.Fatal(err)
	}
	const workers, rounds = 8, 300
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := []byte(fmt.Sprintf("w%d", w))
			var gets []client.Future[client.Value]
			for i := range rounds {
				in.Put("v", key, nil, binary.AppendUvarint(nil, uint64(i)))
				gets = append(gets, in.Get("v", key, nil))
				in.ListAppend("l", key, nil, binary.AppendUvarint(nil, uint64(i)))
			}
			for i, g := range gets {
				v, err := g.Wait(ctx)
				if err != nil {
					errs <- err
					return
				}
				if got, _ := binary.Uvarint(v.Data); got != uint64(i) {
					errs <- fmt.Errorf("worker %d: get %d saw put %d", w, i, got)
					return
				}
			}
			l, err := in.ListGet("l", key, nil).Wait(ctx)
			if err != nil || len(l) != rounds {
				errs <- fmt.Errorf("worker %d: list %d elements, %v", w, len(l), err)
				return
			}
			for i, e := range l {
				if got, _ := binary.Uvarint(e); got != uint64(i) {
					errs <- fmt.Errorf("worker %d: list element %d is %d", w, i, got)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// Callbacks run in issue order, and a batch goes out after FlushDelay
// without Flush or Wait.
func TestClientCallbacksAndFlushDelay(t *testing.T) {
	h := startDaemon(t, harnessOpts{})
	c := h.dial(client.Options{FlushDelay: 2 * time.Millisecond})
	in := openHeap(t, c, task("j", "op", 0))
	const n = 500
	calls := newCallOrder(n)
	for i := range n {
		f := in.Put("v", []byte(fmt.Sprint(i%7)), nil, []byte{byte(i)})
		f.Then(func(_ struct{}, err error) {
			if err != nil {
				t.Error(err)
			}
			calls.ran(i)
		})
	}
	calls.check(t, "FlushDelay did not send the batch")
}

// callOrder records the order n callbacks ran in.
type callOrder struct {
	mu    sync.Mutex
	order []int
	n     int
	done  chan struct{}
}

func newCallOrder(n int) *callOrder { return &callOrder{n: n, done: make(chan struct{})} }

func (c *callOrder) ran(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.order = append(c.order, i); len(c.order) == c.n {
		close(c.done)
	}
}

// check waits for all n and fails t unless they ran in issue order.
func (c *callOrder) check(t *testing.T, why string) {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("callbacks did not run: %s", why)
	}
	for i, v := range c.order {
		if v != i {
			t.Fatalf("callback of op %d ran at position %d", v, i)
		}
	}
}

// Callbacks run in issue order also when some operations are refused by
// the client before they are sent (a key outside the range): a refused
// one's callback waits for those of the operations issued before it.
func TestClientCallbacksInOrderWithLocalRefusals(t *testing.T) {
	h := startDaemon(t, harnessOpts{})
	c := h.dial(client.Options{FlushDelay: 2 * time.Millisecond, MaxBatchOps: 16})
	in, err := c.Open(ctxT(t), client.OpenSpec{Task: task("j", "op", 0), Parallelism: 4, Backend: backend.KindHeap, States: allStates})
	if err != nil {
		t.Fatal(err)
	}
	inside := keysIn(in, 1)[0]
	var outside []byte
	for i := 0; outside == nil; i++ {
		if k := []byte(fmt.Sprint("o", i)); !in.KeyGroups().Contains(in.KeyGroup(k)) {
			outside = k
		}
	}
	const n = 300
	calls := newCallOrder(n)
	for i := range n {
		refused := i%5 == 3
		k := inside
		if refused {
			k = outside
		}
		in.Put("v", k, nil, []byte{byte(i)}).Then(func(_ struct{}, err error) {
			if refused != (err != nil) {
				t.Errorf("op %d: refused %v, error %v", i, refused, err)
			}
			calls.ran(i)
		})
	}
	calls.check(t, "the batches were not sent")
}

// A key whose group lies outside the instance's range is refused before it
// is sent; an oversized value too.
func TestClientLocalChecks(t *testing.T) {
	ctx := ctxT(t)
	h := startDaemon(t, harnessOpts{node: func(o *host.Options) { o.MaxValueSize = 100 }})
	c := h.dial(client.Options{})
	in, err := c.Open(ctx, client.OpenSpec{Task: task("j", "op", 0), Parallelism: 4, Backend: backend.KindHeap, States: allStates})
	if err != nil {
		t.Fatal(err)
	}
	var outside []byte
	for i := 0; outside == nil; i++ {
		k := []byte(fmt.Sprint("k", i))
		if !in.KeyGroups().Contains(in.KeyGroup(k)) {
			outside = k
		}
	}
	if _, err := in.Put("v", outside, nil, []byte("x")).Wait(ctx); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("outside key: %v", err)
	}
	inside := keysIn(in, 1)[0]
	if _, err := in.Put("v", inside, nil, make([]byte, 101)).Wait(ctx); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("big value: %v", err)
	}
	if _, err := in.Put("v", inside, nil, make([]byte, 100)).Wait(ctx); err != nil {
		t.Fatalf("value at the limit: %v", err)
	}
}

// A heap or file instance's in-memory state is bounded: the write that
// would pass the bound gets RESOURCE_EXHAUSTED naming the instance and the
// limit, and changes nothing; the instance keeps serving.
func TestMemoryStateBound(t *testing.T) {
	ctx := ctxT(t)
	const limit = 64 << 10
	h := startDaemon(t, harnessOpts{node: func(o *host.Options) { o.MaxMemoryState = limit }})
	c := h.dial(client.Options{})
	for _, kind := range []backend.Kind{backend.KindHeap, backend.KindFile} {
		in, err := c.Open(ctx, client.OpenSpec{Task: task("mem-"+string(kind), "op", 0), Parallelism: 1, Backend: kind, States: allStates})
		if err != nil {
			t.Fatal(err)
		}
		keys := keysIn(in, 200)
		val := make([]byte, 1000)
		var refused error
		stored := 0
		for i, k := range keys {
			if _, err := in.Put("v", k, nil, val).Wait(ctx); err != nil {
				refused = err
				stored = i
				break
			}
		}
		if status.Code(refused) != codes.ResourceExhausted || !strings.Contains(refused.Error(), "mem-"+string(kind)) ||
			!strings.Contains(refused.Error(), fmt.Sprint(limit)) {
			t.Fatalf("%s: %d puts of 1000 bytes under a %d-byte bound: %v", kind, len(keys), limit, refused)
		}
		if stored < limit/1100 {
			t.Fatalf("%s: refused after %d puts, well under the bound", kind, stored)
		}
		if v, err := in.Get("v", keys[stored], nil).Wait(ctx); err != nil || v.Found {
			t.Fatalf("%s: the refused put landed (%v, %v)", kind, v.Found, err)
		}
		if v, err := in.Get("v", keys[0], nil).Wait(ctx); err != nil || !v.Found {
			t.Fatalf("%s: an earlier put is gone after the refusal (%v, %v)", kind, v.Found, err)
		}
	}
}

// When the daemon goes away, pending and later operations fail with a
// status instead of hanging.
func TestClientFailsPendingWhenDaemonStops(t *testing.T) {
	ctx := ctxT(t)
	h := startDaemon(t, harnessOpts{})
	c := h.dial(client.Options{FlushDelay: time.Hour})
	in := openHeap(t, c, task("j", "op", 0))
	if _, err := in.Put("v", []byte("a"), nil, []byte("1")).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	f := in.Get("v", []byte("a"), nil) // not sent: FlushDelay is long
	h.stop()
	if _, err := f.Wait(ctx); status.Code(err) != codes.Unavailable && status.Code(err) != codes.Canceled {
		t.Fatalf("pending op after stop: %v", err)
	}
	if _, err := in.Put("v", []byte("a"), nil, []byte("1")).Wait(ctx); err == nil {
		t.Fatal("op after stop succeeded")
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = in.Close(cctx)
}

// Back-pressure: with one batch in flight and small batches, many
// operations still all complete.
func TestClientBackPressure(t *testing.T) {
	ctx := ctxT(t)
	h := startDaemon(t, harnessOpts{})
	c := h.dial(client.Options{MaxBatchOps: 10, MaxInFlight: 1})
	in := openHeap(t, c, task("j", "op", 0))
	var fs []client.Future[struct{}]
	for i := range 5000 {
		fs = append(fs, in.AggregateAdd("sum", []byte("k"), nil, backend.Int64(int64(i))))
	}
	for _, f := range fs {
		if _, err := f.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	a, err := in.AggregateGet("sum", []byte("k"), nil).Wait(ctx)
	if err != nil || a.Value.Int != 5000*4999/2 {
		t.Fatalf("sum %v %+v", err, a)
	}
}

// A client that sends and never reads its responses holds back only its
// own stream: others keep being served.
func TestSlowClientDoesNotStallOthers(t *testing.T) {
	ctx := ctxT(t)
	h := startDaemon(t, harnessOpts{})
	slow := h.dial(client.Options{})
	sin := openHeap(t, slow, task("slow", "op", 0))
	big := make([]byte, 64<<10)
	if _, err := sin.Put("v", []byte("k"), nil, big).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := slow.RPC().Batch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kg := uint32(sin.KeyGroup([]byte("k")))
	applied := h.d.Metrics().Batches.Load()
	sent := make(chan int, 1)
	go func() {
		// Owned by the test: ends when Send blocks for good and ctx ends,
		// or after 400 batches.
		n := 0
		for ; n < 400; n++ {
			req := &pb.BatchRequest{Seq: uint64(n + 1), Ops: []*pb.Op{{Type: pb.OpType_OP_TYPE_GET, State: "v", KeyGroup: kg, Key: []byte("k")}}}
			if n == 0 {
				req.InstanceId, req.Job = sin.ID(), "slow"
			}
			if st.Send(req) != nil {
				break
			}
		}
		sent <- n
	}()
	// Wait until the slow stream is stuck: the daemon has answered enough
	// of its batches (a 64 KiB value each) to fill its stream window with
	// responses the client never reads, so its handler blocks sending and
	// stops applying.
	full := applied + uint64(protocol.StreamWindow/len(big))
	waitUntil(t, 10*time.Second, "the slow stream to fill its window", func() bool { return h.d.Metrics().Batches.Load() >= full })
	fast := h.dial(client.Options{})
	fin := openHeap(t, fast, task("fast", "op", 0))
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for i := range 200 {
		if _, err := fin.Put("v", []byte(fmt.Sprint(i)), nil, []byte("x")).Wait(fctx); err != nil {
			t.Fatalf("fast client stalled behind the slow one: %v", err)
		}
	}
	// The slow client's own instance is also still usable through another
	// stream.
	if _, err := sin.Get("v", []byte("k"), nil).Wait(fctx); err != nil {
		t.Fatalf("slow client's instance: %v", err)
	}
	slow.Close()
	<-sent
}
