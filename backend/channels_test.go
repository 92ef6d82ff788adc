package backend

import (
	"errors"
	"reflect"
	"testing"
)

func channelHandle() *Handle {
	h := sampleHandle()
	h.Version = HandleVersionChannels
	h.Stats = &TaskStats{Unaligned: true, StartDelayMicros: 40, SyncMicros: 3, AsyncMicros: 9}
	h.Channels = []ChannelState{
		{Channel: ChannelID{Direction: ChannelInput, Gate: 0, Index: 1}, Kind: ChannelKeyed, Buffers: 2, Records: 5, Bytes: 50,
			Segments: []ChannelSegment{{Path: "job1/chk-7/channels-a-0", Offset: 0, Length: 70, CRC32C: 1},
				{Path: "job1/chk-7/channels-a-1", Offset: 10, Length: 20, CRC32C: 2}}},
		{Channel: ChannelID{Direction: ChannelOutput, Gate: 0, Index: 0}, Kind: ChannelForward, Buffers: 1, Records: 1, Bytes: 3,
			Segments: []ChannelSegment{{Path: "job1/chk-7/channels-a-0", Offset: 70, Length: 17, CRC32C: 3}}},
	}
	return h
}

func TestHandleChannelsRoundTrip(t *testing.T) {
	h := channelHandle()
	enc, err := EncodeHandle(h)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeHandle(enc)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Channels, h.Channels) || *got.Stats != *h.Stats {
		t.Fatalf("round trip changed the channel state: %+v", got)
	}
	if objs := got.ChannelObjects(); !reflect.DeepEqual(objs, []string{"job1/chk-7/channels-a-0", "job1/chk-7/channels-a-1"}) {
		t.Fatalf("objects %v", objs)
	}
	if n := got.ChannelBytes(); n != 107 {
		t.Fatalf("channel bytes %d, want 107", n)
	}
}

// Every way a channel index can be wrong is refused as corruption, and a
// handle of an older version cannot carry channel state (a reader of that
// version would restore without it).
func TestHandleChannelsRefused(t *testing.T) {
	for name, breakIt := range map[string]func(h *Handle){
		"old version":     func(h *Handle) { h.Version = HandleVersionLog },
		"stats only, old": func(h *Handle) { h.Version = HandleVersionLog; h.Channels = nil },
		"unsorted":        func(h *Handle) { h.Channels[0], h.Channels[1] = h.Channels[1], h.Channels[0] },
		"duplicate":       func(h *Handle) { h.Channels[1].Channel = h.Channels[0].Channel },
		"direction":       func(h *Handle) { h.Channels[0].Channel.Direction = "sideways" },
		"negative gate":   func(h *Handle) { h.Channels[0].Channel.Gate = -1 },
		"kind":            func(h *Handle) { h.Channels[1].Kind = "hash" },
		"path":            func(h *Handle) { h.Channels[0].Segments[0].Path = "../x" },
		"empty segment":   func(h *Handle) { h.Channels[0].Segments[1].Length = 0 },
		"negative offset": func(h *Handle) { h.Channels[0].Segments[0].Offset = -1 },
		"overflow": func(h *Handle) {
			h.Channels[0].Segments[0].Offset = 1 << 62
			h.Channels[0].Segments[0].Length = 1 << 62
		},
		"negative count": func(h *Handle) { h.Channels[0].Records = -1 },
		"negative stat":  func(h *Handle) { h.Stats.AlignmentMicros = -1 },
	} {
		h := channelHandle()
		breakIt(h)
		if _, err := EncodeHandle(h); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: accepted: %v", name, err)
		}
	}
}
