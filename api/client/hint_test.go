package client

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestNoDaemonHint: a call to a socket nothing listens on fails with
// codes.Unavailable and says what to check, naming the socket; so does a
// TCP address nothing listens on.
func TestNoDaemonHint(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "stated.sock")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	free := ln.Addr().String()
	ln.Close()
	for addr, want := range map[string]string{
		sock: "is `stated serve` running? socket " + sock,
		free: "is `stated serve --listen " + free + "` running",
	} {
		c, err := Dial(addr, Options{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.ListCheckpoints(context.Background(), "j")
		c.Close()
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want Unavailable saying %q", addr, err, want)
		}
	}
}
