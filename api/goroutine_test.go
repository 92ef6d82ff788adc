package api_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/backend"
)

// settledGoroutines waits until at most want goroutines run, and fails the
// test with every goroutine's stack if that does not happen within a few
// seconds (goroutines of closed connections end asynchronously).
func settledGoroutines(t *testing.T, want int, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= want {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("%s: %d goroutines, want at most %d:\n%s", what, n, want, buf)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// baseGoroutines is the goroutine count once the ones that started before
// the call have had time to settle.
func baseGoroutines() int {
	time.Sleep(50 * time.Millisecond)
	return runtime.NumGoroutine()
}

// TestClientCloseStopsInstanceGoroutines: Client.Close ends the goroutines
// of its instances (stream receivers, callback runners), not just the
// connection; nothing of the client is left running.
func TestClientCloseStopsInstanceGoroutines(t *testing.T) {
	ctx := ctxT(t)
	h := startDaemon(t, harnessOpts{})
	base := baseGoroutines()
	c, err := client.Dial(h.sock, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var ins []*client.Instance
	for i, job := range []string{"a", "b", "c", "d"} {
		in := openHeap(t, c, task(job, "op", 0))
		// A callback starts the instance's callback goroutine.
		done := make(chan struct{})
		in.Put("v", []byte("k"), nil, []byte{byte(i)}).Then(func(struct{}, error) { close(done) })
		in.Flush()
		<-done
		ins = append(ins, in)
	}
	// One instance abandoned, one closed, two left open: Close stops
	// those.
	ins[0].Abandon()
	if err := ins[1].Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	settledGoroutines(t, base, "after Client.Close")
	if _, err := c.Open(ctx, client.OpenSpec{Task: task("e", "op", 0), Parallelism: 1, Backend: backend.KindHeap, States: allStates}); err == nil {
		t.Fatal("Open on a closed client succeeded")
	}
}
