//go:build unix

package rescale_test

import "syscall"

// syncDisks writes the dirty pages of earlier samples back, so that their
// writeback does not land in (and slow down) the next sample.
func syncDisks() { syscall.Sync() }
