package tlsconf_test

import (
	"crypto/tls"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/statedhq/stated/internal/tlsconf"
	"github.com/statedhq/stated/internal/tlsconf/tlstest"
)

// handshake connects a client with cfg to a TLS server with srv over a
// pipe and returns the client's error and the server certificate's name.
func handshake(t *testing.T, srv, cli *tls.Config) (string, error) {
	t.Helper()
	// Real sockets, not net.Pipe: a pipe does not buffer, so the alert
	// of a failed handshake blocks its writer until the deadline.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		a, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		_ = a.SetDeadline(time.Now().Add(10 * time.Second))
		s := tls.Server(a, srv)
		err = s.Handshake()
		if err == nil {
			// TLS 1.3 reports a refused client certificate only on
			// the first read: read so that the client sees it.
			_, err = s.Read(make([]byte, 1))
		}
		s.Close()
		done <- err
	}()
	b, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := tls.Client(b, cli)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	err = c.Handshake()
	name := ""
	if err == nil {
		name = c.ConnectionState().PeerCertificates[0].Subject.CommonName
		_, err = c.Write([]byte{1})
		if err == nil {
			_, err = c.Read(make([]byte, 1))
			if err != nil && strings.Contains(err.Error(), "EOF") {
				err = nil // the server read our byte and closed
			}
		}
	}
	c.Close()
	<-done
	return name, err
}

func TestServerAndClient(t *testing.T) {
	ca := tlstest.NewCA(t, "test")
	sp := ca.Server(t, "daemon")
	srv, err := tlsconf.ServerConfig(tlsconf.Server{CertFile: sp.Cert, KeyFile: sp.Key})
	if err != nil {
		t.Fatal(err)
	}
	cli, err := tlsconf.ClientConfig(tlsconf.Client{CAFile: ca.File, ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	name, err := handshake(t, srv, cli)
	if err != nil || name != "daemon" {
		t.Fatalf("handshake: %q, %v", name, err)
	}

	// A client that trusts another authority refuses the server.
	other := tlstest.NewCA(t, "other")
	bad, err := tlsconf.ClientConfig(tlsconf.Client{CAFile: other.File, ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := handshake(t, srv, bad); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("client trusting another CA: %v", err)
	}
}

func TestMutualTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "test")
	sp := ca.Server(t, "daemon")
	srv, err := tlsconf.ServerConfig(tlsconf.Server{CertFile: sp.Cert, KeyFile: sp.Key, ClientCAFile: ca.File})
	if err != nil {
		t.Fatal(err)
	}
	cp := ca.Client(t, "task")
	with, err := tlsconf.ClientConfig(tlsconf.Client{CAFile: ca.File, CertFile: cp.Cert, KeyFile: cp.Key, ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := handshake(t, srv, with); err != nil {
		t.Fatalf("client with a certificate: %v", err)
	}
	without, _ := tlsconf.ClientConfig(tlsconf.Client{CAFile: ca.File, ServerName: "localhost"})
	if _, err := handshake(t, srv, without); err == nil {
		t.Fatal("a client without a certificate passed mutual TLS")
	}
	op := tlstest.NewCA(t, "other").Client(t, "intruder")
	foreign, _ := tlsconf.ClientConfig(tlsconf.Client{CAFile: ca.File, CertFile: op.Cert, KeyFile: op.Key, ServerName: "localhost"})
	if _, err := handshake(t, srv, foreign); err == nil {
		t.Fatal("a client certificate of another authority passed mutual TLS")
	}
}

// TestReload: replacing the certificate files changes the certificate of
// the next handshake, and a half-written replacement keeps the old one.
func TestReload(t *testing.T) {
	ca := tlstest.NewCA(t, "test")
	first := ca.Server(t, "first")
	srv, err := tlsconf.ServerConfig(tlsconf.Server{CertFile: first.Cert, KeyFile: first.Key})
	if err != nil {
		t.Fatal(err)
	}
	cli, _ := tlsconf.ClientConfig(tlsconf.Client{CAFile: ca.File, ServerName: "localhost"})
	if name, err := handshake(t, srv, cli); err != nil || name != "first" {
		t.Fatalf("before: %q, %v", name, err)
	}
	// A broken certificate file: the previous certificate stays.
	orig, _ := os.ReadFile(first.Cert)
	if err := os.WriteFile(first.Cert, orig[:len(orig)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	if name, err := handshake(t, srv, cli); err != nil || name != "first" {
		t.Fatalf("half-written file: %q, %v", name, err)
	}
	second := ca.Server(t, "second")
	for _, f := range [][2]string{{second.Cert, first.Cert}, {second.Key, first.Key}} {
		b, _ := os.ReadFile(f[0])
		if err := os.WriteFile(f[1], b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if name, err := handshake(t, srv, cli); err != nil || name != "second" {
		t.Fatalf("after rotation: %q, %v", name, err)
	}
}

func TestBadFiles(t *testing.T) {
	ca := tlstest.NewCA(t, "test")
	sp := ca.Server(t, "daemon")
	junk := t.TempDir() + "/junk.pem"
	_ = os.WriteFile(junk, []byte("not pem"), 0o600)
	for _, c := range []struct {
		name string
		err  func() error
		want string
	}{
		{"no key", func() error { _, err := tlsconf.ServerConfig(tlsconf.Server{CertFile: sp.Cert}); return err }, "key file"},
		{"missing cert", func() error {
			_, err := tlsconf.ServerConfig(tlsconf.Server{CertFile: "/nonexistent.pem", KeyFile: sp.Key})
			return err
		}, "/nonexistent.pem"},
		{"cert is key", func() error {
			_, err := tlsconf.ServerConfig(tlsconf.Server{CertFile: sp.Key, KeyFile: sp.Key})
			return err
		}, sp.Key},
		{"junk client CA", func() error {
			_, err := tlsconf.ServerConfig(tlsconf.Server{CertFile: sp.Cert, KeyFile: sp.Key, ClientCAFile: junk})
			return err
		}, "junk.pem: no PEM certificate"},
		{"junk CA", func() error { _, err := tlsconf.ClientConfig(tlsconf.Client{CAFile: junk}); return err }, "junk.pem"},
		{"cert without key", func() error { _, err := tlsconf.ClientConfig(tlsconf.Client{CertFile: sp.Cert}); return err }, "both"},
	} {
		err := c.err()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", c.name, err, c.want)
		}
	}
}
