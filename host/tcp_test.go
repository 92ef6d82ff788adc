package host_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/host"
	"github.com/statedhq/stated/internal/tlsconf/tlstest"
)

// openTask opens one heap instance through c and reports the error.
func openTask(c *client.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	in, err := c.Open(ctx, client.OpenSpec{Task: backend.TaskID{Job: "tls", Operator: "op"},
		KeyGroups: backend.KeyGroupRange{Start: 0, End: 127}, Backend: backend.KindHeap, States: valueState})
	if err != nil {
		return err
	}
	return in.Close(ctx)
}

func dialTCP(t *testing.T, n *host.Host, o client.Options) *client.Client {
	t.Helper()
	c, err := client.Dial(n.TCPAddr().String(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestTCPWithTLS: with --tls-cert/--tls-key the TCP API speaks TLS only,
// still checks the token, and a client that trusts another authority or
// speaks plaintext is refused.
func TestTCPWithTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "stated")
	sp := ca.Server(t, "daemon")
	n, err := host.Open(context.Background(), host.Options{DataDir: filepath.Join(t.TempDir(), "d"), NoSocket: true,
		Listen: "127.0.0.1:0", Token: "secret", TLSCert: sp.Cert, TLSKey: sp.Key, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()

	good, err := client.LoadTLS(ca.File, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := openTask(dialTCP(t, n, client.Options{Token: "secret", TLS: good})); err != nil {
		t.Fatalf("TLS client with the token: %v", err)
	}
	if err := openTask(dialTCP(t, n, client.Options{Token: "wrong", TLS: good})); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("TLS client with a wrong token: %v", err)
	}
	if err := openTask(dialTCP(t, n, client.Options{Token: "secret"})); status.Code(err) != codes.Unavailable {
		t.Fatalf("plaintext client of a TLS daemon: %v", err)
	}
	other, _ := client.LoadTLS(tlstest.NewCA(t, "other").File, "", "")
	if err := openTask(dialTCP(t, n, client.Options{Token: "secret", TLS: other})); err == nil ||
		!strings.Contains(err.Error(), "certificate") {
		t.Fatalf("client trusting another authority: %v", err)
	}
}

// TestTCPWithClientCertificates: with --tls-client-ca a client without a
// certificate of that authority is refused, one with it is served without
// a token.
func TestTCPWithClientCertificates(t *testing.T) {
	ca := tlstest.NewCA(t, "stated")
	sp := ca.Server(t, "daemon")
	n, err := host.Open(context.Background(), host.Options{DataDir: filepath.Join(t.TempDir(), "d"), NoSocket: true,
		Listen: "127.0.0.1:0", TLSCert: sp.Cert, TLSKey: sp.Key, TLSClientCA: ca.File, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	cp := ca.Client(t, "task")
	with, err := client.LoadTLS(ca.File, cp.Cert, cp.Key)
	if err != nil {
		t.Fatal(err)
	}
	if err := openTask(dialTCP(t, n, client.Options{TLS: with})); err != nil {
		t.Fatalf("client with a certificate: %v", err)
	}
	without, _ := client.LoadTLS(ca.File, "", "")
	if err := openTask(dialTCP(t, n, client.Options{TLS: without})); status.Code(err) != codes.Unavailable {
		t.Fatalf("client without a certificate: %v", err)
	}
	ip := tlstest.NewCA(t, "other").Client(t, "intruder")
	foreign, _ := client.LoadTLS(ca.File, ip.Cert, ip.Key)
	if err := openTask(dialTCP(t, n, client.Options{TLS: foreign})); status.Code(err) != codes.Unavailable {
		t.Fatalf("client with another authority's certificate: %v", err)
	}
}

// TestTCPSettingsRefused: every unsafe or incomplete TCP setting is
// refused before the data dir is created, naming the fields.
func TestTCPSettingsRefused(t *testing.T) {
	ca := tlstest.NewCA(t, "stated")
	sp := ca.Server(t, "daemon")
	for _, c := range []struct {
		name string
		o    host.Options
		want string
	}{
		{"token in the clear on every interface", host.Options{Listen: ":0", Token: "s"}, "not a loopback address"},
		{"token in the clear on a named host", host.Options{Listen: "example.com:0", Token: "s"}, "AllowPlaintextToken"},
		{"no token nor client certificates", host.Options{Listen: "127.0.0.1:0"}, "Listen needs Token or TLSClientCA"},
		{"cert without key", host.Options{Listen: "127.0.0.1:0", Token: "s", TLSCert: sp.Cert}, "TLSCert and TLSKey go together"},
		{"client CA without TLS", host.Options{Listen: "127.0.0.1:0", Token: "s", TLSClientCA: ca.File}, "TLSClientCA needs TLSCert"},
		{"TLS without Listen", host.Options{TLSCert: sp.Cert, TLSKey: sp.Key}, "without Listen"},
		{"missing certificate file", host.Options{Listen: "127.0.0.1:0", Token: "s", TLSCert: "/nonexistent/cert.pem", TLSKey: sp.Key}, "/nonexistent/cert.pem"},
	} {
		dir := filepath.Join(t.TempDir(), "d")
		c.o.DataDir, c.o.Logger, c.o.NoSocket = dir, quiet(), true
		n, err := host.Open(context.Background(), c.o)
		if err == nil {
			n.Close()
			t.Errorf("%s: opened", c.name)
			continue
		}
		var oe *host.OptionError
		if !strings.Contains(err.Error(), c.want) || !errors.As(err, &oe) {
			t.Errorf("%s: %v, want an option error naming %q", c.name, err, c.want)
		}
		if _, serr := os.Stat(dir); !errors.Is(serr, fs.ErrNotExist) {
			t.Errorf("%s: the data dir was created before the error (%v)", c.name, serr)
		}
	}
	// Allowed on purpose: a token in the clear on every interface.
	n, err := host.Open(context.Background(), host.Options{DataDir: filepath.Join(t.TempDir(), "d"), NoSocket: true,
		Listen: "127.0.0.1:0", Token: "s", AllowPlaintextToken: true, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	n.Close()
}

// TestClientRefusesPlaintextToken: the Go client does not send a token in
// the clear to an address that is not loopback unless told to.
func TestClientRefusesPlaintextToken(t *testing.T) {
	if _, err := client.Dial("192.0.2.1:7000", client.Options{Token: "s"}); err == nil ||
		!strings.Contains(err.Error(), "in the clear") {
		t.Fatalf("plaintext token to a remote address: %v", err)
	}
	for _, addr := range []string{"127.0.0.1:7000", "localhost:7000", "[::1]:7000"} {
		c, err := client.Dial(addr, client.Options{Token: "s"})
		if err != nil {
			t.Fatalf("%s: %v", addr, err)
		}
		c.Close()
	}
	c, err := client.Dial("192.0.2.1:7000", client.Options{Token: "s", AllowPlaintextToken: true})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}
