package backend

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/statedhq/stated/internal/frame"
)

// Handle format versions. Readers accept 1..HandleFormatVersion. A handle
// is written at the lowest version that can hold it, so that daemons that
// predate a field still read every handle that does not use it.
const (
	// HandleVersionBase is version 1: every handle without Log.
	HandleVersionBase = 1
	// HandleVersionLog is version 2: it adds Log (changelog mode). A
	// reader of version 1 refuses such a handle as incompatible instead
	// of ignoring the segments it must keep.
	HandleVersionLog = 2
	// HandleVersionChannels is version 3: it adds Channels (unaligned
	// checkpoints' in-flight data). A reader of an older version refuses
	// such a handle instead of restoring without the data.
	HandleVersionChannels = 3
	// HandleVersionRemote is version 4: it adds FileRef.Table and
	// FileRef.SizeOnly (lsm remote mode: SSTs referenced where Pebble
	// created them). A reader of an older version refuses such a handle
	// instead of downloading the SSTs as if they were its own copies, or
	// checking a CRC that was never computed.
	HandleVersionRemote = 4
	// HandleVersionPacked is version 5: it adds FileRef.Pack (a private
	// file stored inside an object shared by the daemon's tasks of one
	// checkpoint). A reader of an older version refuses such a handle
	// instead of looking for an object under the file's own name.
	HandleVersionPacked = 5
	// HandleVersionInline is version 6: it adds FileRef.Inline (a small
	// private file whose bytes the handle carries, with no object of its
	// own). A reader of an older version refuses such a handle instead
	// of looking for an object that was never written.
	HandleVersionInline = 6
	// HandleFormatVersion is the newest version this build reads.
	HandleFormatVersion = HandleVersionInline
)

// MaxInlineBytes bounds FileRef.Inline: a handle travels in the
// catalog's manifest (and, in cluster mode, in the leader's log), so only
// small files such as changelog manifests are carried in it.
const MaxInlineBytes = 16 << 10

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
	// Log is set on the handles of changelog mode (dstl/changelog): the
	// log segments the handle's log window reads. Nil otherwise. It needs
	// HandleVersionLog.
	Log *HandleLog `json:"log,omitempty"`
	// Channels is the task's channel state (in-flight data of an unaligned
	// checkpoint), sorted by channel; empty for aligned snapshots. It needs
	// HandleVersionChannels.
	Channels []ChannelState `json:"channels,omitempty"`
	// Stats is how the task took the snapshot (nil: not reported). It
	// needs HandleVersionChannels.
	Stats *TaskStats `json:"stats,omitempty"`
}

// HandleLog is what a changelog-mode handle references in the log store.
type HandleLog struct {
	// Segments are the names of the log segments the handle's window reads,
	// sorted, in the log store (the checkpoint store unless the daemon runs
	// with a separate changelog store). They are shared by the checkpoints
	// of many instances and jobs and reference-counted like shared files;
	// their blocks carry their own checksums, so no size or CRC is kept
	// here. Empty when the window is.
	Segments []string `json:"segments,omitempty"`
	// Bytes is the number of log bytes the window's ranges cover (the
	// changelog part of the handle's size; FullSize holds the rest).
	Bytes int64 `json:"bytes"`
}

// Clone is a deep copy of h: nothing of it shares memory with h but its
// strings, which Go never changes. The catalog keeps its handles apart from
// its callers' with it; a copy through the JSON encoding cost a cluster
// completion's path about ten passes over each handle.
// TestHandleCloneSharesNothing fills every field by reflection, so a field
// added without a copy here fails it.
func (h *Handle) Clone() *Handle {
	if h == nil {
		return nil
	}
	c := *h
	c.States = slices.Clone(h.States)
	if h.Files != nil {
		c.Files = make([]FileRef, len(h.Files))
		for i, f := range h.Files {
			c.Files[i] = f.clone()
		}
	}
	if h.OperatorState != nil {
		c.OperatorState = make([]OperatorList, len(h.OperatorState))
		for i, l := range h.OperatorState {
			l.Elements = cloneBytesList(l.Elements)
			c.OperatorState[i] = l
		}
	}
	if h.Log != nil {
		l := *h.Log
		l.Segments = slices.Clone(l.Segments)
		c.Log = &l
	}
	if h.Channels != nil {
		c.Channels = make([]ChannelState, len(h.Channels))
		for i, cs := range h.Channels {
			cs.Segments = slices.Clone(cs.Segments)
			c.Channels[i] = cs
		}
	}
	if h.Stats != nil {
		s := *h.Stats
		c.Stats = &s
	}
	return &c
}

func (f FileRef) clone() FileRef {
	f.KeyGroupOffsets = slices.Clone(f.KeyGroupOffsets)
	if f.KeyGroupBounds != nil {
		b := *f.KeyGroupBounds
		f.KeyGroupBounds = &b
	}
	if f.Table != nil {
		t := *f.Table
		t.Smallest, t.Largest = slices.Clone(t.Smallest), slices.Clone(t.Largest)
		f.Table = &t
	}
	if f.Pack != nil {
		p := *f.Pack
		f.Pack = &p
	}
	f.Inline = slices.Clone(f.Inline)
	return f
}

func cloneBytesList(in [][]byte) [][]byte {
	if in == nil {
		return nil
	}
	out := make([][]byte, len(in))
	for i, b := range in {
		out[i] = slices.Clone(b)
	}
	return out
}

// IsChangelog reports whether h was written in changelog mode: such a
// handle restores only through the changelog wrapper (its files are a
// materialized base plus a manifest of the log window).
func (h *Handle) IsChangelog() bool { return h.Log != nil }

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
	// SizeOnly marks a file whose bytes stated never read (an SST Pebble
	// created in the store, lsm remote mode): CRC32C is 0 and is not
	// checked; the file's blocks carry Pebble's own checksums, which every
	// read checks. Computing a CRC would mean reading the whole object at
	// each checkpoint. Needs HandleVersionRemote.
	SizeOnly bool `json:"sizeOnly,omitempty"`
	// Table, when set, says the file is a Pebble SST referenced in place
	// (lsm remote mode): a restore ingests it as an external file instead
	// of downloading it, and needs what Pebble's MANIFEST would have said
	// about it. Needs HandleVersionRemote; the file must be shared.
	Table *TableRef `json:"table,omitempty"`
	// Pack, when set, says where the file's bytes are stored: Size bytes
	// from Pack.Offset of the object Pack.Object (relative to the same
	// root as Path), which holds the small private files of many tasks of
	// one checkpoint. Path stays the file's name: readers look it up with
	// PackedStore, which serves it with a ranged read. Needs
	// HandleVersionPacked; the file must be private.
	Pack *FilePack `json:"pack,omitempty"`
	// Inline, when set, are the file's bytes: the file has no object (a
	// checkpoint's changelog manifest, which would otherwise cost a PUT
	// per checkpoint). Path stays its name; readers get it through
	// PackedStore. Needs HandleVersionInline; the file must be private,
	// at most MaxInlineBytes, and len(Inline) == Size.
	Inline []byte `json:"inline,omitempty"`
}

// FilePack locates a packed file's bytes (FileRef.Pack).
type FilePack struct {
	Object string `json:"object"`
	Offset int64  `json:"offset"`
}

// TableRef is what a restore by reference needs of one SST: its level and
// its bounds in the source's version. Ingestion gives each ingested file
// one new sequence number, so the order of the ingestions (L6 first, L0
// by LargestSeq) recreates the source's shadowing.
type TableRef struct {
	// Level is the file's level, 0..6.
	Level int `json:"level"`
	// Smallest and Largest are the smallest and largest user keys of the
	// file (point keys and range deletions), both inclusive.
	Smallest []byte `json:"smallest"`
	Largest  []byte `json:"largest"`
	// SmallestSeq and LargestSeq are the file's sequence number range.
	SmallestSeq uint64 `json:"smallestSeq"`
	LargestSeq  uint64 `json:"largestSeq"`
}

// MaxTableLevel is the deepest LSM level a TableRef may name.
const MaxTableLevel = 6

func (r *TableRef) validate() error {
	switch {
	case r.Level < 0 || r.Level > MaxTableLevel:
		return fmt.Errorf("table level %d is outside [0,%d]", r.Level, MaxTableLevel)
	case len(r.Smallest) == 0 || len(r.Largest) == 0:
		return fmt.Errorf("table without key bounds")
	case bytes.Compare(r.Smallest, r.Largest) > 0:
		return fmt.Errorf("table bounds [%x, %x] are reversed", r.Smallest, r.Largest)
	case r.SmallestSeq > r.LargestSeq:
		return fmt.Errorf("table sequence numbers [%d, %d] are reversed", r.SmallestSeq, r.LargestSeq)
	}
	return nil
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
	if l := h.Log; l != nil {
		if h.Version < HandleVersionLog {
			return fmt.Errorf("%w: handle of %s: a log in a version %d handle (logs need version %d)", ErrCorrupt, h.Task, h.Version, HandleVersionLog)
		}
		if l.Bytes < 0 {
			return fmt.Errorf("%w: handle of %s: negative log size", ErrCorrupt, h.Task)
		}
		for i, s := range l.Segments {
			if err := ValidatePath(s); err != nil {
				return fmt.Errorf("handle of %s, log segment %d: %w", h.Task, i, err)
			}
			if i > 0 && s <= l.Segments[i-1] {
				return fmt.Errorf("%w: handle of %s: log segments not sorted and distinct at %q", ErrCorrupt, h.Task, s)
			}
		}
	}
	if (len(h.Channels) > 0 || h.Stats != nil) && h.Version < HandleVersionChannels {
		return fmt.Errorf("%w: handle of %s: channel state or statistics in a version %d handle (they need version %d)", ErrCorrupt, h.Task, h.Version, HandleVersionChannels)
	}
	if err := validateChannels(h.Task, h.Channels); err != nil {
		return err
	}
	if h.Stats != nil {
		if err := h.Stats.validate(h.Task); err != nil {
			return err
		}
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
		if (f.SizeOnly || f.Table != nil) && h.Version < HandleVersionRemote {
			return fmt.Errorf("%w: handle of %s, file %s: a size-only or table reference in a version %d handle (they need version %d)",
				ErrCorrupt, h.Task, f.Path, h.Version, HandleVersionRemote)
		}
		if pk := f.Pack; pk != nil {
			if h.Version < HandleVersionPacked {
				return fmt.Errorf("%w: handle of %s, file %s: a packed file in a version %d handle (it needs version %d)",
					ErrCorrupt, h.Task, f.Path, h.Version, HandleVersionPacked)
			}
			if f.Shared || f.Table != nil || f.SizeOnly {
				return fmt.Errorf("%w: handle of %s, file %s: a packed file must be private, with its CRC32C", ErrCorrupt, h.Task, f.Path)
			}
			if err := ValidatePath(pk.Object); err != nil {
				return fmt.Errorf("handle of %s, file %s, pack: %w", h.Task, f.Path, err)
			}
			if pk.Offset < 0 {
				return fmt.Errorf("%w: handle of %s, file %s: negative offset %d in pack %s", ErrCorrupt, h.Task, f.Path, pk.Offset, pk.Object)
			}
		}
		if f.Inline != nil {
			if h.Version < HandleVersionInline {
				return fmt.Errorf("%w: handle of %s, file %s: an inline file in a version %d handle (it needs version %d)",
					ErrCorrupt, h.Task, f.Path, h.Version, HandleVersionInline)
			}
			if f.Shared || f.Table != nil || f.SizeOnly || f.Pack != nil {
				return fmt.Errorf("%w: handle of %s, file %s: an inline file must be private, with its CRC32C, and not packed", ErrCorrupt, h.Task, f.Path)
			}
			if int64(len(f.Inline)) != f.Size || f.Size > MaxInlineBytes {
				return fmt.Errorf("%w: handle of %s, file %s: %d inline bytes for a %d-byte file (at most %d)",
					ErrCorrupt, h.Task, f.Path, len(f.Inline), f.Size, MaxInlineBytes)
			}
		}
		if f.SizeOnly && f.CRC32C != 0 {
			return fmt.Errorf("%w: handle of %s, file %s: size-only with a CRC32C", ErrCorrupt, h.Task, f.Path)
		}
		if f.Table != nil {
			if !f.Shared {
				return fmt.Errorf("%w: handle of %s, file %s: a table reference to a private file", ErrCorrupt, h.Task, f.Path)
			}
			if err := f.Table.validate(); err != nil {
				return fmt.Errorf("%w: handle of %s, file %s: %v", ErrCorrupt, h.Task, f.Path, err)
			}
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
	return frame.Encode(handleMagic, uint16(h.Version), payload), nil
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
