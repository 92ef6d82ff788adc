package netcut

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// Before CutOff connections work both ways; after it the open ones are
// closed and new dials fail, and accepted connections close at once.
func TestCutOff(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var server, client Cut
	l := server.Listener(ln)
	defer l.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	ctx := context.Background()
	c, err := client.Dial(ctx, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := io.ReadFull(s, b); err != nil || b[0] != 'x' {
		t.Fatalf("read %q, %v", b, err)
	}
	server.CutOff()
	_ = s.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := s.Read(b); err == nil {
		t.Fatal("an accepted connection still reads after CutOff")
	}
	client.CutOff()
	if _, err := client.Dial(ctx, ln.Addr().String()); !errors.Is(err, ErrCutOff) {
		t.Fatalf("dial after CutOff: %v", err)
	}
}
