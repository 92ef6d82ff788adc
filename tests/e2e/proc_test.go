package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/statedhq/stated/api/client"
)

// binary is the stated binary TestMain built.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "stated-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "stated")
	cmd := exec.Command("go", "build", "-ldflags", "-s -w", "-o", binary, "github.com/statedhq/stated/cmd/stated")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build stated:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a running stated process.
type proc struct {
	t       *testing.T
	cmd     *exec.Cmd
	dataDir string
	sock    string
	metrics string // host:port of /metrics
	tcp     string // host:port of the TCP listener, if any

	mu   sync.Mutex
	logs []string
	done chan struct{}
	err  error
}

var addrRE = regexp.MustCompile(`addr=(\S+)`)

// start runs "stated serve" on dataDir and waits until it serves.
func start(t *testing.T, dataDir string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, dataDir: dataDir, sock: filepath.Join(dataDir, "s.sock"), done: make(chan struct{})}
	all := append([]string{"serve", "--data-dir", dataDir, "--socket", p.sock, "--metrics-addr", "127.0.0.1:0"}, args...)
	p.cmd = exec.Command(binary, all...)
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		// Owned by the process: ends when its stderr closes.
		sc := bufio.NewScanner(stderr)
		seen := false
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.logs = append(p.logs, line)
			if m := addrRE.FindStringSubmatch(line); m != nil {
				switch {
				case strings.Contains(line, "serving metrics"):
					p.metrics = m[1]
				case strings.Contains(line, "serving TCP"):
					p.tcp = m[1]
				}
			}
			p.mu.Unlock()
			if !seen && strings.Contains(line, "stated serving") {
				seen = true
				close(ready)
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			p.dumpLogs()
		}
	})
	select {
	case <-ready:
	case <-p.done:
		p.dumpLogs()
		t.Fatalf("stated exited before serving: %v", p.err)
	case <-time.After(30 * time.Second):
		p.dumpLogs()
		t.Fatal("stated did not start serving")
	}
	return p
}

func (p *proc) dumpLogs() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.logs {
		p.t.Log("stated: " + l)
	}
}

// kill sends SIGKILL and waits for the process.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// term sends SIGTERM and returns the exit error after the process ended.
func (p *proc) term(timeout time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		p.kill()
		return fmt.Errorf("stated did not stop within %s after SIGTERM", timeout)
	}
}

func (p *proc) dial(opts client.Options) *client.Client {
	p.t.Helper()
	c, err := client.Dial(p.sock, opts)
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { _ = c.Close() })
	return c
}

// get fetches a path of the metrics server.
func (p *proc) get(path string) (int, string, error) {
	p.mu.Lock()
	addr := p.metrics
	p.mu.Unlock()
	hc := &http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get("http://" + addr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// socketMode returns the permission bits of the socket file.
func (p *proc) socketMode() (os.FileMode, error) {
	fi, err := os.Stat(p.sock)
	if err != nil {
		return 0, err
	}
	return fi.Mode().Perm(), nil
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// dataDir is a short temporary directory: Unix socket paths are limited
// to about 100 bytes.
func dataDir(t *testing.T) string {
	d, err := os.MkdirTemp("", "se2e")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}
