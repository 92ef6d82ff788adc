package netcut

import (
	"context"
	"errors"
	"net"
	"sync"
)

// Cut cuts one node off the network on demand: the connections it
// accepted (through Listener) and dialed (through Dial) are closed, and
// new ones fail, once CutOff is called. The zero Cut is connected.
type Cut struct {
	mu    sync.Mutex
	off   bool
	conns []net.Conn
}

// ErrCutOff is Dial's error once the node is cut off.
var ErrCutOff = errors.New("netcut: this node is cut off")

func (c *Cut) track(conn net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.off {
		_ = conn.Close()
		return false
	}
	c.conns = append(c.conns, conn)
	return true
}

// Dial dials addr over TCP, tracking the connection.
func (c *Cut) Dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if !c.track(conn) {
		return nil, ErrCutOff
	}
	return conn, nil
}

// CutOff closes every tracked connection and refuses new ones.
func (c *Cut) CutOff() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off = true
	for _, conn := range c.conns {
		_ = conn.Close()
	}
	c.conns = nil
}

// Listener wraps ln: the connections it accepts are tracked by c (and
// closed at once after CutOff).
func (c *Cut) Listener(ln net.Listener) net.Listener { return listener{ln, c} }

type listener struct {
	net.Listener
	c *Cut
}

func (l listener) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil || l.c.track(conn) {
			return conn, err
		}
	}
}
