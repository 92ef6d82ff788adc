//go:build unix

package backend_test

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user + system) the process has used so far.
// Benchmarks report it per operation next to wall time: on a machine that
// other work keeps busy, wall time per operation mostly measures waiting
// for a core, CPU time measures the work.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
