package api_test

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/backend"
)

// goroutines returns every running goroutine's stack, by goroutine id.
func goroutines() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	all := map[string]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		// "goroutine 42 [chan receive]:\n..."
		if id, _, ok := strings.Cut(strings.TrimPrefix(g, "goroutine "), " "); ok {
			all[id] = g
		}
	}
	return all
}

// baseGoroutines returns the goroutines running now, for
// settledGoroutines.
func baseGoroutines() map[string]string { return goroutines() }

// settledGoroutines waits until every goroutine that started after base
// was taken has ended, and fails the test with their stacks if that does
// not happen within a few seconds (goroutines of closed connections end
// asynchronously). Goroutines of base may end or keep running.
func settledGoroutines(t *testing.T, base map[string]string, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var extra []string
		for id, stack := range goroutines() {
			if _, ok := base[id]; !ok {
				extra = append(extra, stack)
			}
		}
		if len(extra) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d goroutines started since and still running:\n%s", what, len(extra), strings.Join(extra, "\n\n"))
		}
		// The polling interval of the wait, not a synchronization.
		time.Sleep(10 * time.Millisecond)
	}
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
