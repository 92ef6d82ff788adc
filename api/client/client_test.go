package client

import (
	"strings"
	"testing"
)

// The default key hash is part of the wire contract (other clients must
// compute the same key groups): pin it to the published FNV-1a vectors.
func TestFNV1a32Vectors(t *testing.T) {
	for in, want := range map[string]uint32{"": 0x811c9dc5, "a": 0xe40c292c, "foobar": 0xbf9cf968} {
		if got := uint32(FNV1a32([]byte(in))); got != want {
			t.Errorf("FNV1a32(%q) = %#x, want %#x", in, got, want)
		}
	}
}

func TestTarget(t *testing.T) {
	for in, want := range map[string]string{
		"unix:///run/stated.sock": "unix:///run/stated.sock",
		"127.0.0.1:7000":          "passthrough:///127.0.0.1:7000",
		"dns:///host:7000":        "dns:///host:7000",
	} {
		if got, err := Target(in); err != nil || got != want {
			t.Errorf("Target(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	got, err := Target("stated-data/stated.sock")
	if err != nil || !strings.HasPrefix(got, "unix:///") || !strings.HasSuffix(got, "/stated-data/stated.sock") {
		t.Errorf("relative socket path: %q, %v", got, err)
	}
}
