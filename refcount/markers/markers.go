package markers

// The ownership protocol of remote SSTs (docs/lsm-remote.md): every holder
// of an object has one empty marker object "<object>.ref.<holder>", and
// whoever removes the last marker deletes the object. Pebble writes
// "<object>.ref.<creator>.<filenum>" for the SSTs it creates and removes
// it when the SST leaves its version (objstorageprovider's sharedUnref:
// delete own marker, list "<object>.ref.", delete the object when the list
// is empty). stated's markers use creator 0, which no Pebble instance has
// (objstorage.CreatorID.IsSet), so Pebble counts them as other holders
// without parsing them:
//
//	<object>.ref.0.c_<checkpoint>_<attempt>_<job>   a checkpoint attempt's
//	<object>.ref.0.i_<creator>                      a live instance's, for an
//	                                                object it ingested by reference
//	<object>.ref.0.b_<creator>_<base>               a live instance's, for an
//	                                                object of its changelog base
//	                                                <base> (held until a newer
//	                                                base is confirmed or Close)
//
// An instance also keeps a lease "<lsm prefix>/_live.<creator>" fresh while
// it runs: the sweep takes the Pebble and instance markers of a creator
// whose lease is missing or older than the grace period (instance and
// base markers alike) as a crashed holder's.
//
// A claimed restore holds the objects it ingests with one hold
// "<lsm prefix>/_hold.<creator>" per prefix it restores from, written
// before it serves and removed once its instance markers are all written
// (in the background, so that the time to the first served operation does
// not grow with the number of tables). While any hold is in a prefix, the
// catalog removes no checkpoint marker and deletes no object there (the
// sweep does it later). Frozen: the names are in the store.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/statedhq/stated/tiered"
)

// Dir is the directory, inside a job's directory of the checkpoint root,
// of remote-mode lsm objects: the SSTs, their markers, the leases and the
// holds. backend/lsm writes there and the catalog sweeps it. Frozen: the
// names are in the store.
const Dir = "shared/lsm/"

// JobPrefix is the lsm prefix of job: "<job>/shared/lsm/".
func JobPrefix(job string) string { return job + "/" + Dir }

// MarkerInfix separates an object's name from its holder in a marker name.
const MarkerInfix = ".ref."

// LeasePrefix starts the name of an instance's lease (after the lsm
// prefix): "_live.<creator>".
const LeasePrefix = "_live."

// HoldPrefix starts the name of a restoring instance's hold (after the lsm
// prefix): "_hold.<creator>".
const HoldPrefix = "_hold."

// MarkerKind says who holds an object through a marker.
type MarkerKind int

const (
	// MarkerUnknown is a marker this build cannot read; never removed.
	MarkerUnknown MarkerKind = iota
	// MarkerPebble is a Pebble instance's own marker.
	MarkerPebble
	// MarkerCheckpoint is a checkpoint attempt's.
	MarkerCheckpoint
	// MarkerInstance is a live instance's, for an object it ingested.
	MarkerInstance
	// MarkerBase is a live instance's, for an object of one of its
	// changelog bases (materializations).
	MarkerBase
)

// Marker is a parsed marker name.
type Marker struct {
	// Object is the name of the object held (with the same prefix as the
	// marker's name).
	Object string
	Kind   MarkerKind
	// Creator is the holder's Pebble creator ID (MarkerPebble,
	// MarkerInstance, MarkerBase).
	Creator uint64
	// Base numbers the changelog base (MarkerBase).
	Base uint64
	// Job and Checkpoint name the checkpoint (MarkerCheckpoint).
	Job        string
	Checkpoint uint64
}

// CheckpointMarker is the marker of one attempt of checkpoint id of job on
// object; attempt makes it unique among the attempts (letters and digits).
func CheckpointMarker(object, job string, id uint64, attempt string) string {
	return fmt.Sprintf("%s%s0.c_%d_%s_%s", object, MarkerInfix, id, attempt, job)
}

// InstanceMarker is the marker of the live instance creator on an object
// it ingested by reference.
func InstanceMarker(object string, creator uint64) string {
	return fmt.Sprintf("%s%s0.i_%d", object, MarkerInfix, creator)
}

// BaseMarker is the marker of the live instance creator on an object of
// its changelog base n.
func BaseMarker(object string, creator, n uint64) string {
	return fmt.Sprintf("%s%s0.b_%d_%d", object, MarkerInfix, creator, n)
}

// LeaseName is the lease of creator under the lsm prefix prefix ("" or
// ending in "/").
func LeaseName(prefix string, creator uint64) string {
	return prefix + LeasePrefix + strconv.FormatUint(creator, 10)
}

// HoldName is the hold of creator under the lsm prefix prefix ("" or
// ending in "/").
func HoldName(prefix string, creator uint64) string {
	return prefix + HoldPrefix + strconv.FormatUint(creator, 10)
}

// ParseHold returns the creator of a hold name (its last path segment).
func ParseHold(name string) (uint64, bool) { return parseCreatorName(name, HoldPrefix) }

// Holds lists the holds under the lsm prefix prefix.
func Holds(ctx context.Context, store tiered.Store, prefix string) ([]tiered.ObjectInfo, error) {
	var out []tiered.ObjectInfo
	err := tiered.Walk(ctx, store, prefix+HoldPrefix, func(o tiered.ObjectInfo) error {
		if _, ok := ParseHold(o.Name); ok {
			out = append(out, o)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("markers: list the holds under %q: %w", prefix, err)
	}
	return out, nil
}

// ParseLease returns the creator of a lease name (its last path segment).
func ParseLease(name string) (uint64, bool) { return parseCreatorName(name, LeasePrefix) }

// parseCreatorName reads "<prefix><creator>" from name's last path segment.
func parseCreatorName(name, prefix string) (uint64, bool) {
	base := name[strings.LastIndex(name, "/")+1:]
	s, ok := strings.CutPrefix(base, prefix)
	if !ok {
		return 0, false
	}
	c, err := strconv.ParseUint(s, 10, 64)
	return c, err == nil && c != 0
}

// IsObject reports whether name is an SST object Pebble created (not a
// marker or a lease).
func IsObject(name string) bool {
	return strings.HasSuffix(name, ".sst") && !strings.Contains(name, MarkerInfix)
}

// ParseMarker parses a marker name. ok is false for names that are no
// marker; a marker of a form this build does not know has MarkerUnknown.
func ParseMarker(name string) (m Marker, ok bool) {
	i := strings.LastIndex(name, MarkerInfix)
	if i <= 0 || !IsObject(name[:i]) {
		return Marker{}, false
	}
	m.Object = name[:i]
	holder := name[i+len(MarkerInfix):]
	creator, rest, _ := strings.Cut(holder, ".")
	c, err := strconv.ParseUint(creator, 10, 64)
	switch {
	case err != nil:
		return m, true
	case c != 0:
		if _, err := strconv.ParseUint(rest, 10, 64); err == nil {
			m.Kind, m.Creator = MarkerPebble, c
		}
		return m, true
	}
	if s, ok := strings.CutPrefix(rest, "i_"); ok {
		if c, err := strconv.ParseUint(s, 10, 64); err == nil && c != 0 {
			m.Kind, m.Creator = MarkerInstance, c
		}
		return m, true
	}
	if s, ok := strings.CutPrefix(rest, "b_"); ok {
		cs, ns, _ := strings.Cut(s, "_")
		c, cerr := strconv.ParseUint(cs, 10, 64)
		n, nerr := strconv.ParseUint(ns, 10, 64)
		if cerr == nil && nerr == nil && c != 0 {
			m.Kind, m.Creator, m.Base = MarkerBase, c, n
		}
		return m, true
	}
	if s, ok := strings.CutPrefix(rest, "c_"); ok {
		parts := strings.SplitN(s, "_", 3)
		if len(parts) == 3 && parts[1] != "" && parts[2] != "" {
			if id, err := strconv.ParseUint(parts[0], 10, 64); err == nil {
				m.Kind, m.Job, m.Checkpoint = MarkerCheckpoint, parts[2], id
			}
		}
	}
	return m, true
}

// Markers lists the markers of object in store.
func Markers(ctx context.Context, store tiered.Store, object string) ([]string, error) {
	var out []string
	err := tiered.Walk(ctx, store, object+MarkerInfix, func(o tiered.ObjectInfo) error {
		out = append(out, o.Name)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("markers: list the markers of %s: %w", object, err)
	}
	return out, nil
}

// Unref removes the markers of object that drop selects and then, when
// no marker of anyone is left, the object itself: Pebble's rule, so that
// Pebble and stated never disagree on when an object goes. A marker or
// object already gone counts as removed. It reports whether the object
// was deleted.
func Unref(ctx context.Context, store tiered.Store, object string, drop func(Marker) bool) (deleted bool, err error) {
	names, err := Markers(ctx, store, object)
	if err != nil {
		return false, err
	}
	left := 0
	for _, n := range names {
		m, _ := ParseMarker(n)
		if m.Kind == MarkerUnknown || !drop(m) {
			left++
			continue
		}
		if err := store.Delete(ctx, n); err != nil && !tiered.IsNotFound(err) {
			return false, fmt.Errorf("markers: remove marker %s: %w", n, err)
		}
	}
	if left > 0 {
		return false, nil
	}
	// Listed again: a holder may have written its marker since (it then
	// checked for ours, or for a live one, after writing).
	if names, err = Markers(ctx, store, object); err != nil {
		return false, err
	}
	if len(names) > 0 {
		return false, nil
	}
	if err := store.Delete(ctx, object); err != nil && !errors.Is(err, tiered.ErrNotFound) {
		return false, fmt.Errorf("markers: delete %s: %w", object, err)
	}
	return true, nil
}

// UnrefNamed is Unref that removes the one marker named marker.
func UnrefNamed(ctx context.Context, store tiered.Store, object, marker string) (bool, error) {
	if err := store.Delete(ctx, marker); err != nil && !tiered.IsNotFound(err) {
		return false, fmt.Errorf("markers: remove marker %s: %w", marker, err)
	}
	return Unref(ctx, store, object, func(Marker) bool { return false })
}
