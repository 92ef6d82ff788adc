package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// Server describes the TLS side of a server.
type Server struct {
	// CertFile and KeyFile are the PEM certificate (chain) and private key
	// the server presents. Both are required.
	CertFile, KeyFile string
	// ClientCAFile, when set, is a PEM bundle of the authorities whose
	// certificates clients must present (mutual TLS). Empty: clients
	// present none.
	ClientCAFile string
}

// ServerConfig loads the files of s and returns a configuration that
// reloads the certificate when its files change. An error names the file
// that could not be used.
func ServerConfig(s Server) (*tls.Config, error) {
	if s.CertFile == "" || s.KeyFile == "" {
		return nil, errors.New("tls: a server needs both a certificate file and a key file")
	}
	r := &reloader{certFile: s.CertFile, keyFile: s.KeyFile}
	if err := r.load(); err != nil {
		return nil, err
	}
	c := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: r.get,
		NextProtos:     []string{"h2"},
	}
	if s.ClientCAFile != "" {
		pool, err := loadPool(s.ClientCAFile)
		if err != nil {
			return nil, err
		}
		c.ClientCAs = pool
		c.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return c, nil
}

// Client describes the TLS side of a client.
type Client struct {
	// CAFile is a PEM bundle of the authorities that verify the server's
	// certificate. Empty: the system's roots.
	CAFile string
	// CertFile and KeyFile are the client's own certificate and key, for
	// a server that requires them (mutual TLS). Both or neither.
	CertFile, KeyFile string
	// ServerName overrides the name checked against the server's
	// certificate. Empty: the host of the address dialled.
	ServerName string
}

// Enabled reports whether c asks for TLS at all.
func (c Client) Enabled() bool {
	return c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" || c.ServerName != ""
}

// ClientConfig loads the files of c. An error names the file that could
// not be used.
func ClientConfig(c Client) (*tls.Config, error) {
	if (c.CertFile == "") != (c.KeyFile == "") {
		return nil, errors.New("tls: a client certificate needs both its certificate file and its key file")
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	if c.CAFile != "" {
		pool, err := loadPool(c.CAFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls: client certificate %s with key %s: %w", c.CertFile, c.KeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

func loadPool(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tls: certificate authorities: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("tls: certificate authorities %s: no PEM certificate in it", file)
	}
	return pool, nil
}

// reloader serves the certificate of two files, reloading them when
// either one's modification time or size changes. A reload that fails
// (a half-written file during a rotation) keeps serving the previous
// certificate and tries again at the next handshake.
type reloader struct {
	certFile, keyFile string

	mu   sync.Mutex
	cert *tls.Certificate
	seen [2]fileStamp
}

type fileStamp struct {
	mod  time.Time
	size int64
}

func stamp(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{fi.ModTime(), fi.Size()}, nil
}

func (r *reloader) stamps() ([2]fileStamp, error) {
	c, err := stamp(r.certFile)
	if err != nil {
		return [2]fileStamp{}, fmt.Errorf("tls: certificate: %w", err)
	}
	k, err := stamp(r.keyFile)
	if err != nil {
		return [2]fileStamp{}, fmt.Errorf("tls: key: %w", err)
	}
	return [2]fileStamp{c, k}, nil
}

// load reads both files; the caller holds mu or owns r.
func (r *reloader) load() error {
	st, err := r.stamps()
	if err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("tls: certificate %s with key %s: %w", r.certFile, r.keyFile, err)
	}
	r.cert, r.seen = &cert, st
	return nil
}

func (r *reloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st, err := r.stamps(); err == nil && st != r.seen {
		_ = r.load() // on failure keep the previous certificate: see reloader
	}
	return r.cert, nil
}
