package api_test

import (
	"bytes"
	"fmt"
	"math"
	"testing"

	"google.golang.org/grpc"

	"github.com/statedhq/stated/api"
	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/backend"
)

// A client whose receive limit is the daemon's message limit (as a client
// in another language with default settings may have) drains many large
// timers with PollTimers: no response is ever too large for it.
func TestTimerPollFitsClientReceiveLimit(t *testing.T) {
	const limit = 32 << 10
	ctx := ctxT(t)
	h := startDaemon(t, harnessOpts{server: api.ServerOptions{MaxMessageSize: limit}})
	c := h.dial(client.Options{DialOptions: []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(limit))}})
	in, err := c.Open(ctx, client.OpenSpec{Task: task("tp", "op", 0), Parallelism: 1, Backend: backend.KindLSM, States: allStates})
	if err != nil {
		t.Fatal(err)
	}
	const n = 400
	for i := 0; i < n; i++ {
		key := append(bytes.Repeat([]byte{'k'}, 700), fmt.Sprint(i)...)
		in.RegisterTimer("t", key, nil, int64(i))
	}
	if err := in.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	got, polls := 0, 0
	for {
		ts, err := in.PollTimers("t", math.MaxInt64, 0).Wait(ctx)
		if err != nil {
			t.Fatalf("poll %d: %v", polls, err)
		}
		polls++
		if len(ts) == 0 {
			break
		}
		for _, tm := range ts {
			if tm.Timestamp != int64(got) {
				t.Fatalf("timer %d delivered as %d", got, tm.Timestamp)
			}
			got++
		}
	}
	if got != n || polls < 8 {
		t.Fatalf("delivered %d of %d timers in %d polls", got, n, polls)
	}
}

// PollTimerPage's More drains every due timer with no empty poll at the
// end: full pages (limit) and pages cut at the message limit both say More.
func TestPollTimerPageMore(t *testing.T) {
	ctx := ctxT(t)
	h := startDaemon(t, harnessOpts{server: api.ServerOptions{MaxMessageSize: 32 << 10}})
	c := h.dial(client.Options{})
	in, err := c.Open(ctx, client.OpenSpec{Task: task("tpm", "op", 0), Parallelism: 1, Backend: backend.KindFile, States: allStates})
	if err != nil {
		t.Fatal(err)
	}
	const n = 100
	for i := 0; i < n; i++ {
		// Every tenth timer is large: some pages are cut at the message
		// limit before they are full.
		key := []byte(fmt.Sprint(i))
		if i%10 == 0 {
			key = append(bytes.Repeat([]byte{'k'}, 6000), key...)
		}
		in.RegisterTimer("t", key, nil, int64(i))
	}
	if err := in.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	got, polls := 0, 0
	for more := true; more; {
		p, err := in.PollTimerPage("t", math.MaxInt64, 7).Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		polls++
		if len(p.Timers) == 0 {
			t.Fatalf("poll %d: empty page with more set before it", polls)
		}
		got += len(p.Timers)
		more = p.More
	}
	if got != n {
		t.Fatalf("delivered %d of %d timers in %d polls", got, n, polls)
	}
}
