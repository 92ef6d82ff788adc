package backend

import (
	"cmp"
	"fmt"
	"math"
)

// ChannelDirection says on which side of a task a channel's in-flight data
// was buffered.
type ChannelDirection string

// Channel directions. Frozen strings (they are stored in handles).
const (
	// ChannelInput: an input channel (gate, channel index) of the task.
	ChannelInput ChannelDirection = "input"
	// ChannelOutput: an output subpartition (partition, subpartition).
	ChannelOutput ChannelDirection = "output"
)

// ChannelKind is how records were routed over the connection a channel
// belongs to. It decides whether the channel's state can be redistributed
// when the parallelism changes.
type ChannelKind string

// Channel kinds. Frozen strings.
const (
	// ChannelKeyed: records were routed by key group; each carries its key
	// group, so a rescale hands every record to the subtask that owns it.
	ChannelKeyed ChannelKind = "keyed"
	// ChannelForward: pointwise connection; cannot be redistributed.
	ChannelForward ChannelKind = "forward"
	// ChannelBroadcast: every subtask got every record; cannot be
	// redistributed.
	ChannelBroadcast ChannelKind = "broadcast"
)

// ParseChannelKind checks that s names a channel kind.
func ParseChannelKind(s string) (ChannelKind, error) {
	switch k := ChannelKind(s); k {
	case ChannelKeyed, ChannelForward, ChannelBroadcast:
		return k, nil
	}
	return "", fmt.Errorf("unknown channel kind %q (keyed, forward or broadcast)", s)
}

// ChannelID names one input channel or output subpartition of a task.
type ChannelID struct {
	Direction ChannelDirection `json:"direction"`
	// Gate is the input gate index (input) or the result partition index
	// (output).
	Gate int32 `json:"gate"`
	// Index is the channel index in the gate (input) or the subpartition
	// index (output).
	Index int32 `json:"index"`
}

func (c ChannelID) String() string {
	if c.Direction == ChannelOutput {
		return fmt.Sprintf("output %d/%d", c.Gate, c.Index)
	}
	return fmt.Sprintf("input %d/%d", c.Gate, c.Index)
}

// Validate checks the direction and that the indexes are not negative.
func (c ChannelID) Validate() error {
	if c.Direction != ChannelInput && c.Direction != ChannelOutput {
		return fmt.Errorf("channel direction %q (input or output)", c.Direction)
	}
	if c.Gate < 0 || c.Index < 0 {
		return fmt.Errorf("channel %s: negative index", c)
	}
	return nil
}

// Compare orders channel ids: inputs before outputs, then by gate and index.
func (c ChannelID) Compare(o ChannelID) int {
	switch {
	case c.Direction != o.Direction:
		if c.Direction == ChannelInput {
			return -1
		}
		return 1
	case c.Gate != o.Gate:
		return cmp.Compare(c.Gate, o.Gate)
	default:
		return cmp.Compare(c.Index, o.Index)
	}
}

// ChannelSegment is one stretch of a channel's buffers inside a channel
// state object: the object is shared by the channel state of many tasks of
// one checkpoint, and a channel's buffers may be split over several
// segments (streamed in pieces, or cut where an object reached its size
// bound).
type ChannelSegment struct {
	// Path is the object name (relative to the storage root, as FileRef).
	Path string `json:"path"`
	// Offset and Length are the segment's bytes in the object.
	Offset int64 `json:"offset"`
	Length int64 `json:"length"`
	// CRC32C is the Castagnoli CRC of those bytes but the last four (the
	// segment frame's own checksum, which it equals; see
	// chanstate.SegmentChecksum).
	CRC32C uint32 `json:"crc32c"`
}

// ChannelState is the in-flight data of one channel at a checkpoint: its
// buffers, in order, stored as segments.
type ChannelState struct {
	Channel ChannelID   `json:"channel"`
	Kind    ChannelKind `json:"kind"`
	// Segments hold the buffers in order.
	Segments []ChannelSegment `json:"segments"`
	// Buffers, Records and Bytes count what the segments hold (Bytes: the
	// records' payload bytes).
	Buffers int64 `json:"buffers"`
	Records int64 `json:"records"`
	Bytes   int64 `json:"bytes"`
}

// StoredBytes is the number of stored bytes of the channel's segments.
func (c *ChannelState) StoredBytes() int64 {
	var n int64
	for _, s := range c.Segments {
		n += s.Length
	}
	return n
}

// validateChannels checks a handle's channel state: valid ids in strictly
// increasing order, known kinds, clean paths, sane ranges and counts.
func validateChannels(task TaskID, cs []ChannelState) error {
	for i := range cs {
		c := &cs[i]
		if err := c.Channel.Validate(); err != nil {
			return fmt.Errorf("%w: handle of %s: %v", ErrCorrupt, task, err)
		}
		if i > 0 && cs[i-1].Channel.Compare(c.Channel) >= 0 {
			return fmt.Errorf("%w: handle of %s: channels not sorted and distinct at %s", ErrCorrupt, task, c.Channel)
		}
		if _, err := ParseChannelKind(string(c.Kind)); err != nil {
			return fmt.Errorf("%w: handle of %s, channel %s: %v", ErrCorrupt, task, c.Channel, err)
		}
		if c.Buffers < 0 || c.Records < 0 || c.Bytes < 0 {
			return fmt.Errorf("%w: handle of %s, channel %s: negative count", ErrCorrupt, task, c.Channel)
		}
		for j, s := range c.Segments {
			if err := ValidatePath(s.Path); err != nil {
				return fmt.Errorf("handle of %s, channel %s, segment %d: %w", task, c.Channel, j, err)
			}
			if s.Offset < 0 || s.Length <= 0 || s.Offset > math.MaxInt64-s.Length {
				return fmt.Errorf("%w: handle of %s, channel %s, segment %d: range [%d,+%d) is not a range",
					ErrCorrupt, task, c.Channel, j, s.Offset, s.Length)
			}
		}
	}
	return nil
}

// ChannelObjects are the distinct object names h's channel state reads, in
// order of first use.
func (h *Handle) ChannelObjects() []string {
	var out []string
	seen := map[string]bool{}
	for _, c := range h.Channels {
		for _, s := range c.Segments {
			if !seen[s.Path] {
				seen[s.Path] = true
				out = append(out, s.Path)
			}
		}
	}
	return out
}

// ChannelBytes is the stored size of h's channel state (the persisted
// in-flight data).
func (h *Handle) ChannelBytes() int64 {
	var n int64
	for i := range h.Channels {
		n += h.Channels[i].StoredBytes()
	}
	return n
}

// TaskStats is how a task took its part in a checkpoint, as the engine
// reported it (alignment, start delay, unaligned) and the daemon measured
// it (synchronous and asynchronous parts). Handles carry it so that the
// checkpoint's manifest and history show it; it needs
// HandleVersionChannels.
type TaskStats struct {
	Unaligned        bool  `json:"unaligned,omitempty"`
	AlignmentMicros  int64 `json:"alignmentMicros,omitempty"`
	StartDelayMicros int64 `json:"startDelayMicros,omitempty"`
	SyncMicros       int64 `json:"syncMicros,omitempty"`
	AsyncMicros      int64 `json:"asyncMicros,omitempty"`
}

func (s *TaskStats) validate(task TaskID) error {
	if s.AlignmentMicros < 0 || s.StartDelayMicros < 0 || s.SyncMicros < 0 || s.AsyncMicros < 0 {
		return fmt.Errorf("%w: handle of %s: negative checkpoint statistics", ErrCorrupt, task)
	}
	return nil
}
