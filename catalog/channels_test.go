package catalog

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/internal/frame"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// channelHandle is a handle of task sub whose channel state is the range
// [off, off+n) of object obj.
func channelHandle(job string, id uint64, sub int, obj string, off, n int64, crc uint32) *backend.Handle {
	return &backend.Handle{Version: backend.HandleVersionChannels, Backend: backend.KindHeap,
		Task: backend.TaskID{Job: job, Operator: "op", Subtask: sub}, CheckpointID: id,
		KeyGroups: backend.KeyGroupRange{Start: sub, End: sub}, MaxParallelism: 128,
		Stats: &backend.TaskStats{Unaligned: true, AlignmentMicros: int64(sub), StartDelayMicros: 10 * int64(sub+1)},
		Channels: []backend.ChannelState{{Channel: backend.ChannelID{Direction: backend.ChannelInput}, Kind: backend.ChannelKeyed,
			Buffers: 1, Records: 1, Bytes: n, Segments: []backend.ChannelSegment{{Path: obj, Offset: off, Length: n, CRC32C: crc}}}}}
}

// The shared channel state object of a checkpoint is registered with it,
// checked at completion, shown in the statistics, and deleted when
// retention discards the checkpoint.
func TestChannelStateObjectLifecycle(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	var clk testClock
	o := clk.opts(s)
	o.Retain = 1
	c, err := Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	data := []byte("0123456789abcdefghij")
	complete := func(id uint64, size int) (*Manifest, error) {
		obj := fmt.Sprintf("j/chk-%d/channels-x-0", id)
		if size > 0 {
			if err := tiered.PutBytes(ctx, s, obj, data[:size]); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.BeginCheckpoint("j", id); err != nil {
			t.Fatal(err)
		}
		for sub := range 2 {
			seg := data[sub*10 : sub*10+10]
			if err := c.AddTaskHandle("j", id, channelHandle("j", id, sub, obj, int64(sub*10), 10, frame.Checksum(seg))); err != nil {
				t.Fatal(err)
			}
		}
		return c.Complete(ctx, "j", id)
	}
	// Missing object, then one shorter than its segments: refused, and
	// the checkpoint stays in flight.
	if _, err := complete(1, 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing channel state object: %v", err)
	}
	if err := c.Abort(ctx, "j", 1, StatusAborted, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := complete(2, 15); !errors.Is(err, backend.ErrCorrupt) || !strings.Contains(err.Error(), "channels-x-0") {
		t.Fatalf("short channel state object: %v", err)
	}
	if err := c.Abort(ctx, "j", 2, StatusAborted, "test"); err != nil {
		t.Fatal(err)
	}
	m, err := complete(3, 20)
	if err != nil {
		t.Fatal(err)
	}
	st := m.Stats()
	if !st.Unaligned || st.InFlightBytes != 20 || st.AlignmentMicros != 1 || st.StartDelayMicros != 20 {
		t.Fatalf("stats %+v", st)
	}
	if rec := c.List("j"); rec[len(rec)-1].Stats != st {
		t.Fatalf("history stats %+v, want %+v", rec[len(rec)-1].Stats, st)
	}
	rep, err := c.Verify(ctx, "j", 3)
	if err != nil || len(rep.Problems) != 0 || rep.Files != 2 {
		t.Fatalf("verify: %+v %v", rep, err)
	}
	// A flipped byte in one task's range is found by verify.
	bad := append([]byte(nil), data...)
	bad[12] ^= 1
	if err := tiered.PutBytes(ctx, s, "j/chk-3/channels-x-0", bad); err != nil {
		t.Fatal(err)
	}
	if rep, err := c.Verify(ctx, "j", 3); err != nil || len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0].Path, "[10,+10)") {
		t.Fatalf("verify of a damaged range: %+v %v", rep, err)
	}
	if err := tiered.PutBytes(ctx, s, "j/chk-3/channels-x-0", data); err != nil {
		t.Fatal(err)
	}
	// The savepoint path refuses channel state (savepoints are aligned).
	_, err = c.TriggerSavepoint(ctx, SavepointRequest{Job: "j", CheckpointID: 9, Format: FormatNative,
		Handles: m.Tasks, Source: s})
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "aligned") {
		t.Fatalf("native savepoint of channel state: %v", err)
	}
	// Retention (1) discards 3 when 4 completes: its object goes.
	if _, err := complete(4, 20); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stat(ctx, "j/chk-3/channels-x-0"); !tiered.IsNotFound(err) {
		t.Fatalf("channel state of a discarded checkpoint: %v", err)
	}
	if _, err := s.Stat(ctx, "j/chk-4/channels-x-0"); err != nil {
		t.Fatal(err)
	}
	// A handle whose channel state lies outside its checkpoint is refused.
	if err := c.BeginCheckpoint("j", 5); err != nil {
		t.Fatal(err)
	}
	if err := c.AddTaskHandle("j", 5, channelHandle("j", 5, 0, "j/chk-4/channels-x-0", 0, 10, 0)); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("channel state of another checkpoint: %v", err)
	}
}
