package host_test

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/statedhq/stated/host"
)

// TestOpenRefusesBeforeCreatingAnything: a socket path over the kernel's
// limit and a metrics or API port in use fail with an error that names
// the problem, and the data dir is not created.
func TestOpenRefusesBeforeCreatingAnything(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	base := t.TempDir()
	long := filepath.Join(base, strings.Repeat("d", host.MaxSocketPath))
	cases := []struct {
		name string
		opts host.Options
		want []string
	}{
		{"long default socket", host.Options{DataDir: long}, []string{"Socket", "over the kernel's limit", "DataDir"}},
		{"long socket", host.Options{DataDir: filepath.Join(base, "d1"), Socket: long + ".sock"}, []string{"over the kernel's limit"}},
		{"metrics port taken", host.Options{DataDir: filepath.Join(base, "d2"), MetricsAddr: taken.Addr().String()},
			[]string{"--metrics-addr", "in use"}},
		{"api port taken", host.Options{DataDir: filepath.Join(base, "d3"), Listen: taken.Addr().String(), Token: "t"},
			[]string{"--listen", "in use"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.opts.Logger = quiet()
			n, err := host.Open(context.Background(), c.opts)
			if err == nil {
				n.Close()
				t.Fatal("opened")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if _, serr := os.Stat(c.opts.DataDir); !errors.Is(serr, fs.ErrNotExist) {
				t.Errorf("data dir %s exists after the refusal (%v)", c.opts.DataDir, serr)
			}
		})
	}
	// A socket path of exactly the limit binds, so the limit is the
	// kernel's and no tighter.
	dir := filepath.Join(base, "ok")
	sock := filepath.Join(dir, strings.Repeat("s", host.MaxSocketPath-len(dir)-1))
	n, err := host.Open(context.Background(), host.Options{DataDir: dir, Socket: sock, Logger: quiet()})
	if err != nil {
		t.Fatalf("socket path of %d bytes: %v", len(sock), err)
	}
	n.Close()
}
