package frame

import (
	"bytes"
	"errors"
	"testing"

	"pgregory.net/rapid"
)

func TestRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		payload := rapid.SliceOf(rapid.Byte()).Draw(t, "payload")
		version := rapid.Uint16().Draw(t, "version")
		enc := Encode("TEST", version, payload)
		v, p, err := Decode("TEST", enc)
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if v != version || !bytes.Equal(p, payload) {
			t.Fatalf("round trip changed the frame")
		}
	})
}

func TestEveryBitFlipAndTruncationIsDetected(t *testing.T) {
	enc := Encode("TEST", 3, []byte("hello, frame"))
	for i := 0; i < len(enc)*8; i++ {
		bad := bytes.Clone(enc)
		bad[i/8] ^= 1 << (i % 8)
		if _, _, err := Decode("TEST", bad); !errors.Is(err, ErrFrame) {
			t.Fatalf("flip of bit %d not detected: %v", i, err)
		}
	}
	for n := 0; n < len(enc); n++ {
		if _, _, err := Decode("TEST", enc[:n]); !errors.Is(err, ErrFrame) {
			t.Fatalf("truncation to %d bytes not detected", n)
		}
	}
	if _, _, err := Decode("TEST", append(bytes.Clone(enc), 0)); !errors.Is(err, ErrFrame) {
		t.Fatal("extension not detected")
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(Encode("TEST", 1, []byte("seed")))
	f.Add([]byte("TEST"))
	f.Fuzz(func(t *testing.T, data []byte) {
		v, p, err := Decode("TEST", data)
		if err == nil && !bytes.Equal(Encode("TEST", v, p), data) {
			t.Fatal("accepted a frame that does not re-encode to itself")
		}
	})
}
