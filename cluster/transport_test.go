package cluster

import (
	"context"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// TestCloseInboundWaitsForRaftHandlers: closing the mux's inbound raft
// connections returns only once the transport's handler of each has
// returned (raft's handler closes its connection last), and reports a
// handler that does not return; the node closes its raft log only after
// (raft answers heartbeats on those handlers and writes the term as it
// does).
func TestCloseInboundWaitsForRaftHandlers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := newMux(ln, nil, nil, "tok", defaultDial, func() {})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	accept := func() net.Conn {
		t.Helper()
		c, err := dialPeer(ctx, defaultDial, ln.Addr().String(), kindRaft, nil, "tok")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		in, err := m.raft.Accept()
		if err != nil {
			t.Fatal(err)
		}
		return in
	}
	busy, stuck := accept(), accept()
	var finished atomic.Bool
	go func() {
		// As raft's handler: read until the connection fails, finish
		// the command in hand, close.
		_, _ = io.Copy(io.Discard, busy)
		time.Sleep(50 * time.Millisecond)
		finished.Store(true)
		_ = busy.Close()
	}()
	m.close()
	if m.closeInbound(300 * time.Millisecond) {
		t.Fatal("closeInbound reported every handler returned while one never closed its connection")
	}
	_ = stuck.Close()
	if !m.closeInbound(5 * time.Second) {
		t.Fatal("closeInbound still waits after every handler closed its connection")
	}
	if !finished.Load() {
		t.Fatal("closeInbound returned before the busy handler finished")
	}
}
