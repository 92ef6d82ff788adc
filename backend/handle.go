package backend

import (
	"encoding/json"
	"fmt"
	"path"
	"strings"

	"github.com/statedhq/stated/internal/frame"
)

// HandleFormatVersion is the version of the handle encoding this build
// writes. Readers accept versions 1..HandleFormatVersion.
const HandleFormatVersion = 1

// handleMagic starts every encoded handle. Frozen.
const handleMagic = "STH1"

// Handle is a task state handle: everything a restore needs to rebuild the
// state of one task at one checkpoint.
type Handle struct {
	// Version is the format version the handle was written with.
	Version int `json:"version"`
	// Backend is the kind of backend that wrote the files.
	Backend Kind `json:"backend"`
	// Task is the task whose state this is.
	Task TaskID `json:"task"`
	// CheckpointID is the checkpoint the snapshot was taken for.
	CheckpointID uint64 `json:"checkpointId"`
	// KeyGroups is the key-group range the files hold.
	KeyGroups KeyGroupRange `json:"keyGroups"`
	// MaxParallelism is the number of key groups of the job.
	MaxParallelism int `json:"maxParallelism"`
	// States lists the registered states, sorted by name.
	States []StateDescriptor `json:"states"`
	// Files are the data files, in the order the backend needs them.
	Files []FileRef `json:"files"`
	// OperatorState is the task's operator (non-keyed) state, inline: it is
	// small by contract (MaxOperatorStateBytes).
	OperatorState []OperatorList `json:"operatorState,omitempty"`
	// FullSize is the size of all files; CheckpointedSize the bytes this
	// checkpoint uploaded (smaller for incremental snapshots).
	FullSize         int64 `json:"fullSize"`
	CheckpointedSize int64 `json:"checkpointedSize"`
}

// FileRef points at one data file of a handle.
type FileRef struct {
	// Path is the object name relative to the storage root the handle is
	// read from (for checkpoints the checkpoint root; for savepoints the
	// savepoint directory). Never absolute, never with "..".
	Path string `json:"path"`
	// LocalName is the file's name in the backend's local directory (lsm).
	LocalName string `json:"localName,omitempty"`
	// Size is the number of stored bytes.
	Size int64 `json:"size"`
	// CRC32C is the Castagnoli CRC of the stored bytes.
	CRC32C uint32 `json:"crc32c"`
	// Shared marks files that several checkpoints may reference; they are
	// reference-counted. Private files belong to this checkpoint alone.
	Shared bool `json:"shared,omitempty"`
	// KeyGroupOffsets, when present, has KeyGroups.Len()+1 offsets: the
	// stored bytes of key group KeyGroups.Start+i lie in [off[i], off[i+1])
	// of the file, so a restore can read only a sub-range with a ranged get.
	KeyGroupOffsets []int64 `json:"keyGroupOffsets,omitempty"`
	// Compression is "" (none) or "zstd"; the CRC covers the stored bytes.
	Compression string `json:"compression,omitempty"`
	// KeyGroupBounds, when present, are the first and last key group of
	// the keys the file holds (lsm SSTs: the key-group prefixes of its
	// smallest and largest keys, range deletions included). A restore into
	// a range the bounds do not meet may skip the file. They may reach
	// outside the handle's KeyGroups (a file shared with a wider range
	// before a rescale) and lie in [0, 65535]. Absent (handles written
	// before the field existed, and files without keys such as MANIFESTs):
	// the file may hold any key group.
	KeyGroupBounds *KeyGroupRange `json:"keyGroupBounds,omitempty"`
}

// MaxKeyGroupBound is the largest value a FileRef's KeyGroupBounds may
// hold: the largest two-byte key-group prefix.
const MaxKeyGroupBound = 1<<16 - 1

// ValidatePath checks that p is a clean relative object name.
func ValidatePath(p string) error {
	if p == "" || strings.HasPrefix(p, "/") || strings.Contains(p, "\\") || path.Clean(p) != p ||
		p == ".." || strings.HasPrefix(p, "../") || strings.Contains(p, "/../") || strings.HasSuffix(p, "/..") {
		return fmt.Errorf("%w: path %q is not a clean relative path inside the storage root", ErrCorrupt, p)
	}
	return nil
}

// Validate checks the handle's internal consistency. Decode calls it; it
// guards every restore path against a handle that was tampered with.
func (h *Handle) Validate() error {
	if h.Version < 1 || h.Version > HandleFormatVersion {
		return fmt.Errorf("%w: handle format version %d (this build reads 1..%d)", ErrIncompatible, h.Version, HandleFormatVersion)
	}
	if _, err := ParseKind(string(h.Backend)); err != nil {
		return fmt.Errorf("%w: handle backend: %v", ErrCorrupt, err)
	}
	if err := h.Task.Validate(); err != nil {
		return fmt.Errorf("%w: handle task: %v", ErrCorrupt, err)
	}
	if err := h.KeyGroups.Validate(h.MaxParallelism); err != nil {
		return fmt.Errorf("%w: handle of %s: %v", ErrCorrupt, h.Task, err)
	}
	for _, d := range h.States {
		if err := d.Validate(); err != nil {
			return fmt.Errorf("%w: handle of %s: %v", ErrCorrupt, h.Task, err)
		}
	}
	if err := ValidateOperatorState(h.OperatorState); err != nil {
		return fmt.Errorf("%w: handle of %s: %v", ErrCorrupt, h.Task, err)
	}
	for i, f := range h.Files {
		if err := ValidatePath(f.Path); err != nil {
			return fmt.Errorf("handle of %s, file %d: %w", h.Task, i, err)
		}
		if f.Size < 0 {
			return fmt.Errorf("%w: handle of %s, file %s: negative size", ErrCorrupt, h.Task, f.Path)
		}
		if f.Compression != "" && f.Compression != "zstd" {
			return fmt.Errorf("%w: handle of %s, file %s: unknown compression %q", ErrCorrupt, h.Task, f.Path, f.Compression)
		}
		if kb := f.KeyGroupBounds; kb != nil && (kb.Start < 0 || kb.End < kb.Start || kb.End > MaxKeyGroupBound) {
			return fmt.Errorf("%w: handle of %s, file %s: key-group bounds %s are not a range inside [0,%d]",
				ErrCorrupt, h.Task, f.Path, kb, MaxKeyGroupBound)
		}
		if n := len(f.KeyGroupOffsets); n != 0 {
			if n != h.KeyGroups.Len()+1 {
				return fmt.Errorf("%w: handle of %s, file %s: %d key-group offsets for %d key groups",
					ErrCorrupt, h.Task, f.Path, n, h.KeyGroups.Len())
			}
			for j := 1; j < n; j++ {
				if f.KeyGroupOffsets[j] < f.KeyGroupOffsets[j-1] || f.KeyGroupOffsets[0] < 0 {
					return fmt.Errorf("%w: handle of %s, file %s: key-group offsets not ascending", ErrCorrupt, h.Task, f.Path)
				}
			}
		}
	}
	return nil
}

// EncodeHandle serializes h in a checksummed, versioned frame.
func EncodeHandle(h *Handle) ([]byte, error) {
	if err := h.Validate(); err != nil {
		return nil, err
	}
	payload, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("backend: encode handle: %w", err)
	}
	return frame.Encode(handleMagic, HandleFormatVersion, payload), nil
}

// DecodeHandle parses and validates an encoded handle. Any damage is an
// error wrapping ErrCorrupt (or ErrIncompatible for a newer version).
func DecodeHandle(data []byte) (*Handle, error) {
	version, payload, err := frame.Decode(handleMagic, data)
	if err != nil {
		return nil, fmt.Errorf("%w: handle: %v", ErrCorrupt, err)
	}
	if version < 1 || version > HandleFormatVersion {
		return nil, fmt.Errorf("%w: handle format version %d (this build reads 1..%d)", ErrIncompatible, version, HandleFormatVersion)
	}
	var h Handle
	dec := json.NewDecoder(strings.NewReader(string(payload)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return nil, fmt.Errorf("%w: handle: %v", ErrCorrupt, err)
	}
	if h.Version != int(version) {
		return nil, fmt.Errorf("%w: handle: frame version %d but payload version %d", ErrCorrupt, version, h.Version)
	}
	if err := h.Validate(); err != nil {
		return nil, err
	}
	return &h, nil
}
