package cluster

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Every connection between nodes starts with a header, after TLS when TLS
// is on: the magic, the protocol version, which of the two services on the
// port the connection is for, and the cluster token (empty with TLS
// alone). The listener answers one byte: accepted or refused. Sharing one
// port between raft and the node-to-node gRPC service keeps the operator's
// setup to one address per node (--raft-addr) behind one authentication.
const (
	headerMagic   = "STCL"
	headerVersion = 1

	kindRaft = 'r'
	kindRPC  = 'g'

	answerOK      = 'k'
	answerRefused = 'x'

	maxTokenLen = 4096
)

// handshakeTimeout bounds a connection's header exchange, so that a peer
// that connects and says nothing holds no goroutine for long.
const handshakeTimeout = 5 * time.Second

// ErrRefused is returned by a dial that the peer refused: a wrong cluster
// token, or a header of another protocol version.
var ErrRefused = errors.New("cluster: the peer refused the connection")

// mux accepts the connections of one TCP listener, authenticates them and
// hands each to the raft transport or the gRPC server.
type mux struct {
	ln        net.Listener
	serverTLS *tls.Config // nil: plaintext with the token
	clientTLS *tls.Config
	token     string
	dialer    Dialer

	raft, rpc *chanListener
	wg        sync.WaitGroup
	// inbound are the raft connections handed to the transport, open
	// until its handler closes them (closeInbound).
	inboundMu sync.Mutex
	inbound   map[*inboundConn]struct{}
	inboundWG sync.WaitGroup
	done      chan struct{}
	closeOnce sync.Once
	refused   func() // counts refused connections
}

func newMux(ln net.Listener, serverTLS, clientTLS *tls.Config, token string, dialer Dialer, refused func()) *mux {
	m := &mux{ln: ln, serverTLS: serverTLS, clientTLS: clientTLS, token: token, dialer: dialer, done: make(chan struct{}), refused: refused}
	m.raft = newChanListener(ln.Addr(), m.done)
	m.rpc = newChanListener(ln.Addr(), m.done)
	m.wg.Add(1)
	go m.acceptLoop()
	return m
}

func (m *mux) acceptLoop() {
	defer m.wg.Done()
	for {
		c, err := m.ln.Accept()
		if err != nil {
			select {
			case <-m.done:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.route(c)
		}()
	}
}

// route authenticates c and hands it on, or closes it.
func (m *mux) route(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	if m.serverTLS != nil {
		tc := tls.Server(c, m.serverTLS)
		if err := tc.Handshake(); err != nil {
			m.refused()
			_ = c.Close()
			return
		}
		c = tc
	}
	kind, token, err := readHeader(c)
	if err != nil || (kind != kindRaft && kind != kindRPC) ||
		subtle.ConstantTimeCompare([]byte(token), []byte(m.token)) != 1 {
		m.refused()
		_, _ = c.Write([]byte{answerRefused})
		_ = c.Close()
		return
	}
	if _, err := c.Write([]byte{answerOK}); err != nil {
		_ = c.Close()
		return
	}
	_ = c.SetDeadline(time.Time{})
	to := m.raft
	if kind == kindRPC {
		to = m.rpc
	} else if c = m.track(c); c == nil {
		return
	}
	if !to.deliver(c) {
		_ = c.Close()
	}
}

// inboundConn is a raft connection whose Close (by the transport's
// handler, once it returns) the mux waits for.
type inboundConn struct {
	net.Conn
	m    *mux
	once sync.Once
}

func (c *inboundConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.m.inboundMu.Lock()
		delete(c.m.inbound, c)
		c.m.inboundMu.Unlock()
		c.m.inboundWG.Done()
	})
	return err
}

// track wraps an inbound raft connection; nil (c closed) once the mux is
// closed.
func (m *mux) track(c net.Conn) net.Conn {
	m.inboundMu.Lock()
	defer m.inboundMu.Unlock()
	select {
	case <-m.done:
		_ = c.Close()
		return nil
	default:
	}
	ic := &inboundConn{Conn: c, m: m}
	if m.inbound == nil {
		m.inbound = map[*inboundConn]struct{}{}
	}
	m.inbound[ic] = struct{}{}
	m.inboundWG.Add(1)
	return ic
}

// closeInbound closes every inbound raft connection and waits, at most
// wait, until the transport's handlers of them have returned. raft's
// transport answers heartbeats on its handlers' goroutines, even after
// raft shut down, and writes the term to the log store as it does: the
// node must not close that store under a handler still running (raft
// panics on the failed write).
func (m *mux) closeInbound(wait time.Duration) bool {
	m.inboundMu.Lock()
	for c := range m.inbound {
		_ = c.Conn.Close() // the handler's read fails; it closes c
	}
	m.inboundMu.Unlock()
	done := make(chan struct{})
	go func() { m.inboundWG.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(wait):
		return false
	}
}

func readHeader(r io.Reader) (kind byte, token string, err error) {
	var h [len(headerMagic) + 4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, "", err
	}
	if string(h[:len(headerMagic)]) != headerMagic || h[len(headerMagic)] != headerVersion {
		return 0, "", errors.New("bad header")
	}
	kind = h[len(headerMagic)+1]
	n := binary.BigEndian.Uint16(h[len(headerMagic)+2:])
	if n > maxTokenLen {
		return 0, "", errors.New("token too long")
	}
	tok := make([]byte, n)
	if _, err := io.ReadFull(r, tok); err != nil {
		return 0, "", err
	}
	return kind, string(tok), nil
}

// dial connects to a peer's port for one of its services.
func (m *mux) dial(ctx context.Context, addr string, kind byte) (net.Conn, error) {
	return dialPeer(ctx, m.dialer, addr, kind, m.clientTLS, m.token)
}

// Dialer opens a TCP connection to a peer's address.
type Dialer func(ctx context.Context, addr string) (net.Conn, error)

func defaultDial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// dialPeer connects to a node's --raft-addr for one of its services; the
// CLI uses it too.
func dialPeer(ctx context.Context, dial Dialer, addr string, kind byte, clientTLS *tls.Config, token string) (net.Conn, error) {
	if dial == nil {
		dial = defaultDial
	}
	c, err := dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(handshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = c.SetDeadline(deadline)
	if clientTLS != nil {
		cfg := clientTLS.Clone()
		if cfg.ServerName == "" {
			host, _, _ := net.SplitHostPort(addr)
			cfg.ServerName = host
		}
		tc := tls.Client(c, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("cluster: TLS with %s: %w", addr, err)
		}
		c = tc
	}
	h := make([]byte, 0, len(headerMagic)+4+len(token))
	h = append(h, headerMagic...)
	h = append(h, headerVersion, kind)
	h = binary.BigEndian.AppendUint16(h, uint16(len(token)))
	h = append(h, token...)
	if _, err := c.Write(h); err != nil {
		_ = c.Close()
		return nil, err
	}
	var a [1]byte
	if _, err := io.ReadFull(c, a[:]); err != nil || a[0] != answerOK {
		_ = c.Close()
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("cluster: handshake with %s: %w", addr, err)
		}
		why := "wrong cluster token (--cluster-token), or another protocol version"
		if token == "" {
			why = "no cluster token was sent and the peer needs one (--cluster-token), or another protocol version"
		}
		return nil, fmt.Errorf("%w %s: %s", ErrRefused, addr, why)
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

func (m *mux) close() {
	m.closeOnce.Do(func() {
		close(m.done)
		_ = m.ln.Close()
	})
	m.wg.Wait()
	m.raft.drain()
	m.rpc.drain()
}

// chanListener is a net.Listener fed by the mux.
type chanListener struct {
	addr      net.Addr
	ch        chan net.Conn
	done      <-chan struct{} // the mux closed
	closed    chan struct{}   // this listener closed (its server stops)
	closeOnce sync.Once
}

func newChanListener(addr net.Addr, done <-chan struct{}) *chanListener {
	return &chanListener{addr: addr, ch: make(chan net.Conn), done: done, closed: make(chan struct{})}
}

// deliver hands c to Accept; false once the mux is closed.
func (l *chanListener) deliver(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	case <-l.closed:
		return false
	}
}

func (l *chanListener) drain() {
	for {
		select {
		case c := <-l.ch:
			_ = c.Close()
		default:
			return
		}
	}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// Close ends Accept; the mux owns the socket and closes it.
func (l *chanListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return nil
}
func (l *chanListener) Addr() net.Addr { return l.addr }

// raftLayer is the raft.StreamLayer over the mux.
type raftLayer struct {
	*chanListener
	m *mux
	// advertise is the address peers reach this node at.
	advertise net.Addr
}

func (r *raftLayer) Addr() net.Addr { return r.advertise }

func (r *raftLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return r.m.dial(ctx, string(addr), kindRaft)
}
