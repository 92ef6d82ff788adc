package api_test

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"strconv"
	"testing"

	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/backend"
)

// TestInstanceKeyGroupVectors: an instance of the Go client, opened at each
// max parallelism of api/testdata/keygroups.json, computes the vectors'
// key groups, and the daemon takes a write in each.
func TestInstanceKeyGroupVectors(t *testing.T) {
	ctx := ctxT(t)
	data, err := os.ReadFile("testdata/keygroups.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		MaxParallelisms []int `json:"max_parallelisms"`
		Vectors         []struct {
			KeyHex    string         `json:"key_hex"`
			KeyGroups map[string]int `json:"key_groups"`
		} `json:"vectors"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	h := startDaemon(t, harnessOpts{})
	c := h.dial(client.Options{})
	for i, p := range doc.MaxParallelisms {
		in, err := c.Open(ctx, client.OpenSpec{Task: task("kg", "op"+strconv.Itoa(i), 0), MaxParallelism: p, Parallelism: 1,
			Backend: backend.KindHeap, States: []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}}})
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range doc.Vectors {
			key, err := hex.DecodeString(v.KeyHex)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := in.KeyGroup(key), v.KeyGroups[strconv.Itoa(p)]; got != want {
				t.Errorf("max parallelism %d, key %s: key group %d, want %d", p, v.KeyHex, got, want)
			}
			in.Put("v", key, nil, []byte("x"))
		}
		if err := in.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		if err := in.Err(); err != nil {
			t.Fatalf("max parallelism %d: %v", p, err)
		}
		if err := in.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
