// Package markers is the ownership protocol of remote-mode lsm objects in
// the checkpoint store: the names of the ref markers, leases and holds
// (markers.go says each), their parsing, and the one rule by which an
// object goes (Unref: the last holder's marker removed, then the object).
//
// # Basics
//
// Two sides speak it and neither owns the other: backend/lsm (an instance
// writes instance, base and checkpoint markers, leases and holds) and the
// catalog (it removes the markers of checkpoints it no longer retains and
// sweeps the markers of crashed instances). So the protocol lives here,
// below both, and the catalog imports no backend implementation.
//
// # Caveats
//
// Every name is frozen: it is in stores written by earlier versions, and
// Pebble itself counts the markers (stated's use creator 0, which no Pebble
// instance has). A marker of a form this build cannot parse is
// MarkerUnknown and is never removed.
package markers
