package catalog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/internal/frame"
)

// Format versions this build writes; readers accept 1..version.
const (
	ManifestVersion = 1
	JobFileVersion  = 1
)

// Frame magics. Frozen.
const (
	manifestMagic = "STMF"
	jobFileMagic  = "STJC"
)

// maxMetaSize bounds what a reader loads for one manifest or catalog file.
const maxMetaSize = frame.MaxPayload + frame.Overhead

// ManifestKind says what a manifest describes.
type ManifestKind string

// Manifest kinds. Frozen strings.
const (
	KindCheckpoint ManifestKind = "checkpoint"
	KindSavepoint  ManifestKind = "savepoint"
)

// Format is the format of a savepoint.
type Format string

// Savepoint formats. Frozen strings.
const (
	// FormatNative: the backend's own files, copied into the savepoint.
	FormatNative Format = "native"
	// FormatCanonical: the backend-neutral key/value stream
	// (backend.CanonicalSnapshotter); restores into any backend kind.
	FormatCanonical Format = "canonical"
)

// Manifest is the content of a "_metadata" object: everything needed to
// restore a job from one checkpoint or savepoint.
//
// For a checkpoint, file paths in Tasks are object names in the checkpoint
// root. For a savepoint they are relative to the savepoint's directory,
// which makes the directory relocatable.
type Manifest struct {
	// Version is the manifest format version.
	Version int `json:"version"`
	// Kind is checkpoint or savepoint.
	Kind ManifestKind `json:"kind"`
	// Job is the job whose state this is.
	Job string `json:"job"`
	// CheckpointID is the checkpoint the state was taken at.
	CheckpointID uint64 `json:"checkpointId"`
	// SavepointID and Format are set for savepoints only.
	SavepointID string `json:"savepointId,omitempty"`
	Format      Format `json:"format,omitempty"`
	// Started and Completed bound the checkpoint's lifetime.
	Started   time.Time `json:"started"`
	Completed time.Time `json:"completed"`
	// Tasks are the task state handles, sorted by task.
	Tasks []*backend.Handle `json:"tasks"`
	// CheckpointedSize is what this checkpoint uploaded; FullSize the size
	// of all its files.
	CheckpointedSize int64 `json:"checkpointedSize"`
	FullSize         int64 `json:"fullSize"`
}

// Duration is how long the checkpoint took.
func (m *Manifest) Duration() time.Duration { return m.Completed.Sub(m.Started) }

// CheckpointStats sums up the tasks' statistics of one checkpoint as
// Flink's checkpoint page shows them: unaligned if any task was, the
// slowest task's alignment, start delay, synchronous and asynchronous
// part, and the persisted in-flight bytes of all tasks.
type CheckpointStats struct {
	// The tasks' figures: any unaligned, the largest of the others.
	backend.TaskStats
	InFlightBytes int64 `json:"inFlightBytes,omitempty"`
}

// Stats sums up the statistics the manifest's handles carry.
func (m *Manifest) Stats() CheckpointStats {
	var st CheckpointStats
	for _, h := range m.Tasks {
		st.InFlightBytes += h.ChannelBytes()
		if t := h.Stats; t != nil {
			st.Unaligned = st.Unaligned || t.Unaligned
			st.AlignmentMicros = max(st.AlignmentMicros, t.AlignmentMicros)
			st.StartDelayMicros = max(st.StartDelayMicros, t.StartDelayMicros)
			st.SyncMicros = max(st.SyncMicros, t.SyncMicros)
			st.AsyncMicros = max(st.AsyncMicros, t.AsyncMicros)
		}
	}
	return st
}

func sortTasks(hs []*backend.Handle) {
	slices.SortFunc(hs, func(a, b *backend.Handle) int {
		if c := cmpString(a.Task.Operator, b.Task.Operator); c != 0 {
			return c
		}
		return a.Task.Subtask - b.Task.Subtask
	})
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// validate checks a manifest's internal consistency, the same way for one
// about to be written and one read back.
func (m *Manifest) validate() error {
	if m.Version < 1 || m.Version > ManifestVersion {
		return fmt.Errorf("%w: manifest format version %d (this build reads 1..%d)", backend.ErrIncompatible, m.Version, ManifestVersion)
	}
	if err := ValidateJob(m.Job); err != nil {
		return fmt.Errorf("%w: manifest: %v", ErrCorrupt, err)
	}
	switch m.Kind {
	case KindCheckpoint:
		if m.SavepointID != "" || m.Format != "" {
			return fmt.Errorf("%w: checkpoint manifest of %s/%d has savepoint fields", ErrCorrupt, m.Job, m.CheckpointID)
		}
	case KindSavepoint:
		if err := ValidateSavepointID(m.SavepointID); err != nil {
			return fmt.Errorf("%w: manifest: %v", ErrCorrupt, err)
		}
		if m.Format != FormatNative && m.Format != FormatCanonical {
			return fmt.Errorf("%w: savepoint %s has unknown format %q", ErrCorrupt, m.SavepointID, m.Format)
		}
	default:
		return fmt.Errorf("%w: manifest kind %q", ErrCorrupt, m.Kind)
	}
	if len(m.Tasks) == 0 {
		return fmt.Errorf("%w: manifest of %s/%d lists no task", ErrCorrupt, m.Job, m.CheckpointID)
	}
	seen := map[backend.TaskID]bool{}
	for _, h := range m.Tasks {
		if h == nil {
			return fmt.Errorf("%w: manifest of %s/%d has a nil task handle", ErrCorrupt, m.Job, m.CheckpointID)
		}
		if err := h.Validate(); err != nil {
			return fmt.Errorf("manifest of %s/%d: %w", m.Job, m.CheckpointID, err)
		}
		if h.Task.Job != m.Job {
			return fmt.Errorf("%w: manifest of job %s holds a handle of task %s", ErrCorrupt, m.Job, h.Task)
		}
		if seen[h.Task] {
			return fmt.Errorf("%w: manifest of %s/%d lists task %s twice", ErrCorrupt, m.Job, m.CheckpointID, h.Task)
		}
		seen[h.Task] = true
	}
	return nil
}

// EncodeManifest serializes m in a checksummed, versioned frame.
func EncodeManifest(m *Manifest) ([]byte, error) {
	if err := m.validate(); err != nil {
		return nil, err
	}
	payload, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("catalog: encode manifest: %w", err)
	}
	return frame.Encode(manifestMagic, ManifestVersion, payload), nil
}

// DecodeManifest parses and validates a manifest. Damage is an error
// wrapping ErrCorrupt (backend.ErrIncompatible for a newer version).
func DecodeManifest(data []byte) (*Manifest, error) {
	version, payload, err := frame.Decode(manifestMagic, data)
	if err != nil {
		return nil, fmt.Errorf("%w: manifest: %v", ErrCorrupt, err)
	}
	if version < 1 || version > ManifestVersion {
		return nil, fmt.Errorf("%w: manifest format version %d (this build reads 1..%d)", backend.ErrIncompatible, version, ManifestVersion)
	}
	var m Manifest
	if err := strictUnmarshal(payload, &m); err != nil {
		return nil, fmt.Errorf("%w: manifest: %v", ErrCorrupt, err)
	}
	if m.Version != int(version) {
		return nil, fmt.Errorf("%w: manifest frame version %d but payload version %d", ErrCorrupt, version, m.Version)
	}
	if err := m.validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

func strictUnmarshal(payload []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("trailing data after the JSON value")
	}
	return nil
}

// Status is the state of a checkpoint in the history.
type Status string

// Statuses. Frozen strings (they are in the job file).
const (
	StatusInProgress Status = "in_progress"
	StatusCompleted  Status = "completed"
	// StatusAborted: the coordinator gave up on it (a task failed, ...).
	StatusAborted Status = "aborted"
	// StatusDeclined: a backend refused the snapshot (the reason says why).
	StatusDeclined Status = "declined"
	// StatusExpired: it ran past the checkpoint timeout.
	StatusExpired Status = "expired"
)

func (s Status) failed() bool {
	return s == StatusAborted || s == StatusDeclined || s == StatusExpired
}

// Record is one line of a job's checkpoint history.
type Record struct {
	ID               uint64    `json:"id"`
	Status           Status    `json:"status"`
	Started          time.Time `json:"started"`
	Ended            time.Time `json:"ended,omitzero"`
	CheckpointedSize int64     `json:"checkpointedSize,omitempty"`
	FullSize         int64     `json:"fullSize,omitempty"`
	Tasks            int       `json:"tasks,omitempty"`
	// Reason is why a checkpoint failed.
	Reason string `json:"reason,omitempty"`
	// Stats sums up how the tasks took a completed checkpoint (zero when
	// none reported).
	Stats CheckpointStats `json:"stats,omitzero"`
	// WithoutChannelState: a restore skipped this checkpoint's channel
	// state, knowingly losing it (the in-flight data was damaged).
	WithoutChannelState bool `json:"withoutChannelState,omitempty"`
	// Retained says whether the checkpoint is still restorable; it is
	// computed when the history is listed, never stored.
	Retained bool `json:"-"`
	// Owner is the job that owns a retained checkpoint when it is not the
	// checkpoint's own job (a claim restore moved it); computed.
	Owner string `json:"-"`
	// Pinned says that the owner restored it in no-claim mode, so
	// retention never deletes it; computed.
	Pinned bool `json:"-"`
	// Damaged says what is wrong with the checkpoint's manifest when it is
	// in the store but failed its checks (see DamagedCheckpoint); computed.
	Damaged error `json:"-"`
}

// Duration is how long the checkpoint ran (until now for one in progress).
func (r Record) Duration(now time.Time) time.Duration {
	if r.Ended.IsZero() {
		return now.Sub(r.Started)
	}
	return r.Ended.Sub(r.Started)
}

// adoption says that a job owns a checkpoint of another job (claim restore).
type adoption struct {
	Job string    `json:"job"`
	ID  uint64    `json:"id"`
	At  time.Time `json:"at"`
}

// jobFile is the content of "<job>/_catalog".
type jobFile struct {
	Version int    `json:"version"`
	Job     string `json:"job"`
	// History is bounded to Options.MaxHistory records, oldest first.
	History []Record `json:"history"`
	// Pinned are the job's own checkpoints it restored in no-claim mode.
	Pinned []uint64 `json:"pinned,omitempty"`
	// Adopted are other jobs' checkpoints it restored in claim mode.
	Adopted []adoption `json:"adopted,omitempty"`
}

func encodeJobFile(f *jobFile) ([]byte, error) {
	payload, err := json.Marshal(f)
	if err != nil {
		return nil, fmt.Errorf("catalog: encode job file of %s: %w", f.Job, err)
	}
	return frame.Encode(jobFileMagic, JobFileVersion, payload), nil
}

func decodeJobFile(data []byte) (*jobFile, error) {
	version, payload, err := frame.Decode(jobFileMagic, data)
	if err != nil {
		return nil, fmt.Errorf("%w: job file: %v", ErrCorrupt, err)
	}
	if version < 1 || version > JobFileVersion {
		return nil, fmt.Errorf("%w: job file format version %d (this build reads 1..%d)", backend.ErrIncompatible, version, JobFileVersion)
	}
	var f jobFile
	if err := strictUnmarshal(payload, &f); err != nil {
		return nil, fmt.Errorf("%w: job file: %v", ErrCorrupt, err)
	}
	if f.Version != int(version) {
		return nil, fmt.Errorf("%w: job file frame version %d but payload version %d", ErrCorrupt, version, f.Version)
	}
	if err := ValidateJob(f.Job); err != nil {
		return nil, fmt.Errorf("%w: job file: %v", ErrCorrupt, err)
	}
	for _, a := range f.Adopted {
		if err := ValidateJob(a.Job); err != nil {
			return nil, fmt.Errorf("%w: job file of %s: adoption: %v", ErrCorrupt, f.Job, err)
		}
	}
	return &f, nil
}

// cloneManifest deep-copies m so callers can never change a manifest the
// catalog holds.
func cloneManifest(m *Manifest) *Manifest {
	c := *m
	c.Tasks = make([]*backend.Handle, len(m.Tasks))
	for i, h := range m.Tasks {
		c.Tasks[i] = h.Clone()
	}
	return &c
}

// ChangelogSize is the number of log bytes the manifest's changelog-mode
// handles read (their Log.Bytes); FullSize holds the rest, the
// materialized part.
func (m *Manifest) ChangelogSize() int64 {
	var n int64
	for _, h := range m.Tasks {
		if h.Log != nil {
			n += h.Log.Bytes
		}
	}
	return n
}
