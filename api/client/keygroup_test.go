package client_test

import (
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"strconv"
	"testing"

	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/api/protocol"
	"github.com/statedhq/stated/backend"
)

// keyGroupVectors is api/testdata/keygroups.json, written from the hash as
// stated.proto specifies it by an implementation of its own
// (keygroups.py); clients in other languages check themselves against the
// same file.
type keyGroupVectors struct {
	MaxParallelisms []int `json:"max_parallelisms"`
	Vectors         []struct {
		KeyHex    string         `json:"key_hex"`
		FNV1a32   int32          `json:"fnv1a32"`
		Murmur    int32          `json:"murmur"`
		KeyGroups map[string]int `json:"key_groups"`
	} `json:"vectors"`
}

// TestKeyGroupVectors: the client's default key hash and the backend's key
// groups match the committed vectors, step by step.
func TestKeyGroupVectors(t *testing.T) {
	data, err := os.ReadFile("../testdata/keygroups.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc keyGroupVectors
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Vectors) < 10 || len(doc.MaxParallelisms) < 3 {
		t.Fatalf("only %d vectors for %d max parallelisms", len(doc.Vectors), len(doc.MaxParallelisms))
	}
	negative := 0
	for _, v := range doc.Vectors {
		key, err := hex.DecodeString(v.KeyHex)
		if err != nil {
			t.Fatal(err)
		}
		h := client.FNV1a32(key)
		if h != v.FNV1a32 {
			t.Errorf("key %s: FNV1a32 %d, want %d", v.KeyHex, h, v.FNV1a32)
		}
		if h < 0 {
			negative++
		}
		// With a modulus no murmur value reaches, the key group is the
		// murmur step itself.
		if m := backend.KeyGroupForHash(h, math.MaxInt); m != int(v.Murmur) {
			t.Errorf("key %s: murmur %d, want %d", v.KeyHex, m, v.Murmur)
		}
		for _, p := range doc.MaxParallelisms {
			want, ok := v.KeyGroups[strconv.Itoa(p)]
			if !ok {
				t.Fatalf("key %s: no key group for max parallelism %d", v.KeyHex, p)
			}
			if got := backend.KeyGroupForHash(h, p); got != want {
				t.Errorf("key %s, max parallelism %d: key group %d, want %d", v.KeyHex, p, got, want)
			}
			// What the daemon checks declared key groups with.
			if got := protocol.KeyGroup(key, p); got != want {
				t.Errorf("key %s, max parallelism %d: protocol.KeyGroup %d, want %d", v.KeyHex, p, got, want)
			}
		}
	}
	// The signed reading is the trap: the vectors must exercise it.
	if negative == 0 {
		t.Fatal("no vector has a negative hash")
	}
}
