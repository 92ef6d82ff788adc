package localfs

import (
	"os"
	"syscall"
)

// sameFile reports whether a and b describe the same file: device, inode
// and change time. The change time tells a file made since on a reused
// inode number (file systems reuse freed inodes at once) from the one a
// was taken of; a file made within the same tick of the kernel's coarse
// clock (a few milliseconds) on the same inode passes for it, which needs
// a placeholder removed within milliseconds of being made, and no sweep
// removes objects that young. vfs.FileInfo wraps os.FileInfo, which
// os.SameFile does not see through; Sys is promoted. False when either is
// not from the operating system's file system (vfs.MemFS): the caller
// then takes the safe path.
func sameFile(a, b os.FileInfo) bool {
	if a == nil || b == nil {
		return false
	}
	sa, ok := a.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	sb, ok := b.Sys().(*syscall.Stat_t)
	return ok && sa.Dev == sb.Dev && sa.Ino == sb.Ino && sa.Ctim == sb.Ctim
}
