package fuzz

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
)

// editManifest returns a copy of objects whose manifest of checkpoint id
// is edit's change of it, encoded validly again (as a writer with a bug
// would write it).
func editManifest(t *testing.T, objects map[string][]byte, id uint64, edit func(*catalog.Manifest)) map[string][]byte {
	t.Helper()
	out := make(map[string][]byte, len(objects))
	for n, b := range objects {
		out[n] = b
	}
	name := catalog.CheckpointManifest(job, id)
	m, err := catalog.DecodeManifest(objects[name])
	if err != nil {
		t.Fatal(err)
	}
	edit(m)
	if out[name], err = catalog.EncodeManifest(m); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestChannelSegmentChecksumsBindContent: the CRC32C a handle records for
// a channel state segment must tell segments with other bytes apart, or a
// handle (or an object under its name) that points at another valid
// segment of the same length restores the wrong in-flight data. A CRC32C
// over a whole frame, its own trailing CRC32C included, is the same
// constant for every frame: it must not be what the handle records.
func TestChannelSegmentChecksumsBindContent(t *testing.T) {
	f := fixtureOf(t, backend.KindFile)
	m, err := catalog.DecodeManifest(f.objects[catalog.CheckpointManifest(job, 2)])
	if err != nil {
		t.Fatal(err)
	}
	type seen struct {
		where string
		data  []byte
	}
	byCRC := map[uint32]seen{}
	n := 0
	for _, h := range m.Tasks {
		for _, cs := range h.Channels {
			for _, sg := range cs.Segments {
				data := f.objects[sg.Path][sg.Offset : sg.Offset+sg.Length]
				where := h.Task.String() + " " + cs.Channel.String()
				if o, ok := byCRC[sg.CRC32C]; ok && !bytes.Equal(o.data, data) {
					t.Fatalf("%s and %s: segments with different bytes have the same CRC32C %08x in their handles", o.where, where, sg.CRC32C)
				}
				byCRC[sg.CRC32C] = seen{where, data}
				n++
			}
		}
	}
	if n < 2 {
		t.Fatalf("%d segments in checkpoint 2", n)
	}
}

// TestChannelSegmentSwapRefused: a handle whose segment points at the
// bytes of another task's segment of the same length and counts (here
// subtask 0's output 0/1 at subtask 1's first segment, as an object of
// another checkpoint under the right name or a writer's wrong offset
// would) must be refused as corrupt, not restore subtask 1's records as
// subtask 0's.
func TestChannelSegmentSwapRefused(t *testing.T) {
	defer silence()()
	f := fixtureOf(t, backend.KindFile)
	objects := editManifest(t, f.objects, 2, func(m *catalog.Manifest) {
		out := func(h *backend.Handle) *backend.ChannelState {
			for i := range h.Channels {
				if h.Channels[i].Channel == outCh(0, 1) {
					return &h.Channels[i]
				}
			}
			t.Fatalf("task %s has no output 0/1", h.Task)
			return nil
		}
		mine, theirs := out(m.Tasks[0]), out(m.Tasks[1])
		if mine.Segments[0].Length != theirs.Segments[0].Length {
			t.Fatalf("the fixture's output segments differ in length: %+v, %+v", mine.Segments[0], theirs.Segments[0])
		}
		// Where the bytes are, not what they hold: the checksum stays.
		mine.Segments[0].Path, mine.Segments[0].Offset = theirs.Segments[0].Path, theirs.Segments[0].Offset
	})
	err := restore(context.Background(), scratchDir(t), f, objects, source{ckpt: 2, parallelism: oldPar, subtask: 0, into: f.kind})
	if !errors.Is(err, backend.ErrCorrupt) || !strings.Contains(err.Error(), "channel output 0/1") {
		t.Fatalf("restore: %v, want corruption of channel output 0/1", err)
	}
}

// TestChannelMergeOrderIgnoresSubtaskField: a rescale merges the old
// subtasks' channel state in their order, which their key-group ranges
// (checked: disjoint, in range) say; a handle's subtask field that does
// not fit its key groups must not reorder the records. (FuzzRestoreLSM
// found it: an edit made subtask 0's handle say subtask 12336.)
func TestChannelMergeOrderIgnoresSubtaskField(t *testing.T) {
	defer silence()()
	f := fixtureOf(t, backend.KindFile)
	objects := editManifest(t, f.objects, 2, func(m *catalog.Manifest) { m.Tasks[0].Task.Subtask = 12336 })
	for _, src := range []source{{ckpt: 2, parallelism: 1}, {ckpt: 2, parallelism: 3}, {ckpt: 2, parallelism: 3, subtask: 2}} {
		src.into = f.kind
		if err := restore(context.Background(), scratchDir(t), f, objects, src); err != nil && !errors.Is(err, backend.ErrCorrupt) {
			t.Errorf("%s: %v", src, err)
		}
	}
}
