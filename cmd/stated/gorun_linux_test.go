package main

import (
	"bufio"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain lets the test binary run as stated itself (STATED_TEST_AS_MAIN=1)
// for the tests that need a stated process.
func TestMain(m *testing.M) {
	if os.Getenv("STATED_TEST_AS_MAIN") == "1" {
		rootCmd.SetArgs(os.Args[1:])
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestDaemonFollowsGoRun: a daemon whose parent is named "go" (as under
// "go run") shuts down cleanly, removing its socket, when that parent is
// killed; without it the daemon kept running and held the socket.
func TestDaemonFollowsGoRun(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "gorun")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	goCmd := filepath.Join(dir, "go") // the kernel names the process after this link
	if err := os.Symlink(sh, goCmd); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "d")
	sock := filepath.Join(data, "stated.sock")
	parent := exec.Command(goCmd, "-c", `"$0" serve --data-dir "$1" --metrics-addr "" --log-level warn & echo $!; wait`, self, data)
	parent.Env = append(os.Environ(), "STATED_TEST_AS_MAIN=1")
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("daemon pid %q: %v", line, err)
	}
	defer syscall.Kill(pid, syscall.SIGKILL) // in case it survives
	waitFor(t, "the socket", func() bool { _, err := os.Stat(sock); return err == nil })

	if err := parent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = parent.Wait()
	waitFor(t, "the daemon to stop and remove its socket", func() bool {
		_, err := os.Stat(sock)
		return errors.Is(err, fs.ErrNotExist) && syscall.Kill(pid, 0) != nil
	})
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
