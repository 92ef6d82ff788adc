package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"syscall"
)

// followGoRun makes the daemon stop cleanly (SIGTERM) when "go run", its
// parent, exits. A SIGTERM sent to "go run" kills only the go command, and
// the daemon would otherwise keep running and hold the socket; a daemon
// started any other way (a binary under a shell, systemd, a container) is
// left alone.
func followGoRun(log *slog.Logger) {
	ppid := os.Getppid()
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", ppid))
	if err != nil || strings.TrimSpace(string(comm)) != "go" {
		return
	}
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0); errno != 0 {
		log.Warn("started by go run, but cannot follow its exit: stop the daemon itself", "err", errno)
		return
	}
	// The parent may have died before the request took effect.
	if os.Getppid() != ppid {
		_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
	}
	log.Debug("started by go run: the daemon stops when go run exits")
}
