package cluster

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// fenceIn is one operation of the history: an acquire, or a check of a
// token.
type fenceIn struct {
	acquire bool
	task    string
	token   uint64 // checked
}

// fenceOut is its answer. unknown: the call failed (its command may or
// may not have been applied: porcupine lets it take effect at any point
// after its call, or never).
type fenceOut struct {
	unknown bool
	token   uint64 // acquired, or the task's newest at a check
	fenced  bool
}

// fenceState is one task's state in the model. wild: an acquire whose
// answer was lost took effect, so the newest token is unknown until an
// answer reveals it.
type fenceState struct {
	cur  uint64
	wild bool
}

var fenceModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		for _, op := range h {
			t := op.Input.(fenceIn).task
			by[t] = append(by[t], op)
		}
		var out [][]porcupine.Operation
		for _, ops := range by {
			out = append(out, ops)
		}
		return out
	},
	Init: func() any { return fenceState{} },
	Step: func(s, in, out any) (bool, any) {
		st, i, o := s.(fenceState), in.(fenceIn), out.(fenceOut)
		if i.acquire {
			if o.unknown {
				return true, fenceState{cur: st.cur, wild: true}
			}
			// Tokens grow: a new one is above the task's current.
			return o.token > st.cur, fenceState{cur: o.token}
		}
		if o.unknown {
			return true, st // a read changes nothing
		}
		if st.wild {
			return o.token > st.cur && o.fenced == (i.token != o.token), fenceState{cur: o.token}
		}
		return o.token == st.cur && o.fenced == (i.token != st.cur), st
	},
	Equal: func(a, b any) bool { return a.(fenceState) == b.(fenceState) },
}

// TestLinearizable: clients on every node acquire and check tokens of a
// few tasks concurrently while the leader is killed; porcupine finds the
// history linearizable against the sequential model of fences.
func TestLinearizable(t *testing.T) {
	c := startCluster(t, 5, nil)
	c.leader()
	var (
		mu      sync.Mutex
		history []porcupine.Operation
		start   = time.Now()
	)
	now := func() int64 { return int64(time.Since(start)) }
	record := func(client int, in fenceIn, out fenceOut, call int64) {
		ret := now()
		if out.unknown {
			ret = math.MaxInt64 // may take effect any time after its call
		}
		mu.Lock()
		history = append(history, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
		mu.Unlock()
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var nodesMu sync.Mutex
	node := func(i int) *Member {
		nodesMu.Lock()
		defer nodesMu.Unlock()
		return c.nodes[i]
	}
	for client := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var held uint64
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				n := node(client % 5)
				if n == nil { // its node was killed: move over
					n = node((client + 1) % 5)
					if n == nil {
						n = node((client + 2) % 5)
					}
				}
				task := fmt.Sprintf("j/op/%d", client%3)
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				call := now()
				if k%3 == 0 {
					in := fenceIn{acquire: true, task: task}
					r, err := n.run(ctx, command{Op: opAcquire, Task: task, Holder: n.ID()})
					if err != nil {
						record(client, in, fenceOut{unknown: true}, call)
					} else {
						held = r.Token
						record(client, in, fenceOut{token: r.Token}, call)
					}
				} else {
					in := fenceIn{task: task, token: held}
					r, err := n.run(ctx, command{Op: opCheck, Task: task, Token: held})
					if err != nil {
						record(client, in, fenceOut{unknown: true}, call)
					} else {
						record(client, in, fenceOut{token: r.Token, fenced: r.Fenced}, call)
					}
				}
				cancel()
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	l := c.leader()
	nodesMu.Lock()
	_ = c.nodes[l].Close()
	c.nodes[l] = nil
	nodesMu.Unlock()
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	wg.Wait()
	known := 0
	for _, op := range history {
		if !op.Output.(fenceOut).unknown {
			known++
		}
	}
	t.Logf("%d operations (%d answered) over a leader death", len(history), known)
	if known < 100 {
		t.Fatalf("only %d answered operations", known)
	}
	if res := porcupine.CheckOperationsTimeout(fenceModel, history, 30*time.Second); res != porcupine.Ok {
		t.Fatalf("history not linearizable: %v", res)
	}
}

// TestModelRejectsStaleRead: the model is strict enough to catch a stale
// read (a check that answers an older token after a newer acquire
// returned), so the test above can fail.
func TestModelRejectsStaleRead(t *testing.T) {
	h := []porcupine.Operation{
		{ClientId: 0, Input: fenceIn{acquire: true, task: "t"}, Call: 0, Output: fenceOut{token: 1}, Return: 1},
		{ClientId: 1, Input: fenceIn{acquire: true, task: "t"}, Call: 2, Output: fenceOut{token: 2}, Return: 3},
		{ClientId: 0, Input: fenceIn{task: "t", token: 1}, Call: 4, Output: fenceOut{token: 1}, Return: 5},
	}
	if porcupine.CheckOperations(fenceModel, h) {
		t.Fatal("a stale read passed the model")
	}
	h[2].Output = fenceOut{token: 2, fenced: true}
	if !porcupine.CheckOperations(fenceModel, h) {
		t.Fatal("a correct history failed the model")
	}
}
