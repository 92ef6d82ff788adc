package catalogrpc

import (
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

// TestMergeSettlements: merging the settler's ranges deletes exactly the
// keys the ranges cover, no key between them (another checkpoint's
// reports), and leaves sorted, disjoint ranges.
func TestMergeSettlements(t *testing.T) {
	key := func(i int) string { return fmt.Sprintf("k%03d", i) }
	rapid.Check(t, func(t *rapid.T) {
		var in []settlement
		for range rapid.IntRange(0, 12).Draw(t, "n") {
			from := rapid.IntRange(0, 60).Draw(t, "from")
			to := from + rapid.IntRange(1, 10).Draw(t, "len")
			in = append(in, settlement{key(from), key(to)})
		}
		covered := func(sts []settlement, k string) bool {
			for _, st := range sts {
				if st.from <= k && k < st.to {
					return true
				}
			}
			return false
		}
		want := map[string]bool{}
		for i := range 75 {
			want[key(i)] = covered(in, key(i))
		}
		out := mergeSettlements(append([]settlement(nil), in...))
		for i := range 75 {
			if got := covered(out, key(i)); got != want[key(i)] {
				t.Fatalf("key %s covered %v after merging %v into %v, want %v", key(i), got, in, out, want[key(i)])
			}
		}
		for i := 1; i < len(out); i++ {
			if out[i].from <= out[i-1].to {
				t.Fatalf("merged ranges %v overlap or touch at %d", out, i)
			}
		}
	})
}
