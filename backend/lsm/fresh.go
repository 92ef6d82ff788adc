package lsm

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs/atomicfs"
)

// formatVersionMarker is the name of Pebble's atomic marker that records
// a store's format major version (pebble's formatVersionMarkerName, which
// its Checkpoint writes the same way into a new store directory).
const formatVersionMarker = "format-version"

// openFresh opens a new, empty Pebble store in dir at o.FormatMajorVersion.
//
// Pebble creates a store without a format marker at its oldest supported
// version and then upgrades it one version at a time, writing a new
// marker file and removing the old one at each step: eleven file
// creations and deletions for every new instance. On ext4 a burst of new
// files right after deletions makes the inode allocator scan past the
// recently deleted inodes, and that scan was most of the CPU of opening
// thousands of idle instances (stated bench instances). A store whose
// directory already holds the marker is created at that version directly,
// as Pebble's own Checkpoint does for the directories it writes, and a new
// store has nothing to migrate.
func openFresh(dir string, o *pebble.Options) (*pebble.DB, error) {
	if err := o.FS.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	ls, err := o.FS.List(dir)
	if err != nil {
		return nil, err
	}
	if len(ls) == 0 {
		m, _, err := atomicfs.LocateMarker(o.FS, dir, formatVersionMarker)
		if err != nil {
			return nil, fmt.Errorf("create the format marker: %w", err)
		}
		err = m.Move(o.FormatMajorVersion.String())
		if cerr := m.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("create the format marker: %w", err)
		}
	}
	return pebble.Open(dir, o)
}
