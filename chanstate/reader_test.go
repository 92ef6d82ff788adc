package chanstate

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered/memstore"
)

// writeSmall writes two channels' state through a Writer and returns the
// store, the object bytes and the channel states.
func writeSmall(t *testing.T) (*memstore.Store, []byte, []backend.ChannelState) {
	t.Helper()
	store := memstore.New()
	w := newWriter(t, store, 0)
	var css []backend.ChannelState
	for c := range 2 {
		cs := backend.ChannelState{Channel: in(0, int32(c)), Kind: backend.ChannelKeyed}
		for piece := range 2 {
			b := [][]Record{{{KeyGroup: int32(c + piece), Data: []byte{'x', byte(c), byte(piece)}}}}
			s, err := w.Append(context.Background(), task(0), cs.Channel, cs.Kind, b)
			if err != nil {
				t.Fatal(err)
			}
			AddSegment(&cs, s, b)
		}
		css = append(css, cs)
	}
	if err := w.Seal(context.Background()); err != nil {
		t.Fatal(err)
	}
	rc, err := store.Get(context.Background(), w.Objects()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return store, data, css
}

func readAllChannels(store *memstore.Store, css []backend.ChannelState) error {
	for _, cs := range css {
		if err := ReadChannel(context.Background(), store, cs, 8, func([]Record) error { return nil }); err != nil {
			return err
		}
	}
	return nil
}

func TestReadChannelDetectsEveryFlippedByte(t *testing.T) {
	store, data, css := writeSmall(t)
	name := css[0].Segments[0].Path
	if err := readAllChannels(store, css); err != nil {
		t.Fatal(err)
	}
	for i := range data {
		bad := bytes.Clone(data)
		bad[i] ^= 0x10
		if err := store.Put(context.Background(), name, bytes.NewReader(bad), int64(len(bad))); err != nil {
			t.Fatal(err)
		}
		err := readAllChannels(store, css)
		if !errors.Is(err, backend.ErrCorrupt) || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "channel input 0/") {
			t.Fatalf("byte %d flipped: %v, want ErrCorrupt naming %s and the channel", i, err, name)
		}
	}
}

func TestReadChannelRefuses(t *testing.T) {
	store, _, css := writeSmall(t)
	cs := css[1]
	name := cs.Segments[0].Path
	for _, tc := range []struct {
		name string
		edit func(s *backend.ChannelSegment)
		want string
	}{
		{"missing object", func(s *backend.ChannelSegment) { s.Path += "x" }, "object missing"},
		{"range past the end", func(s *backend.ChannelSegment) { s.Length += 5 }, "short read"},
		{"offset past the end", func(s *backend.ChannelSegment) { s.Offset += 1 << 20 }, "past the object's end"},
		{"wrong crc", func(s *backend.ChannelSegment) { s.CRC32C++ }, "checksum mismatch"},
		{"shifted range", func(s *backend.ChannelSegment) { s.Offset++; s.Length-- }, "checksum mismatch"},
		{"huge length", func(s *backend.ChannelSegment) { s.Length = 1 << 40 }, "not a segment range"},
		{"zero length", func(s *backend.ChannelSegment) { s.Length = 0 }, "not a segment range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cs
			c.Segments = append([]backend.ChannelSegment(nil), cs.Segments...)
			tc.edit(&c.Segments[1])
			calls := 0
			err := ReadChannel(context.Background(), store, c, 8, func([]Record) error { calls++; return nil })
			if !errors.Is(err, backend.ErrCorrupt) || !strings.Contains(err.Error(), tc.want) ||
				!strings.Contains(err.Error(), name[:len(name)-1]) || !strings.Contains(err.Error(), "segment 1") {
				t.Fatalf("error %v, want ErrCorrupt saying %q and naming the object and segment", err, tc.want)
			}
			if calls != 1 {
				t.Fatalf("fn called %d times, want 1 (the good segment before the bad one)", calls)
			}
		})
	}
	// A key group the handle's maxParallelism does not have.
	if err := ReadChannel(context.Background(), store, cs, 1, func([]Record) error { return nil }); !errors.Is(err, backend.ErrCorrupt) {
		t.Fatalf("key group past maxParallelism: %v", err)
	}
	// fn's error comes back unchanged.
	stop := errors.New("stop")
	if err := ReadChannel(context.Background(), store, cs, 8, func([]Record) error { return stop }); err != stop {
		t.Fatalf("fn error: %v", err)
	}
}
