package tiered_test

import (
	"testing"

	"github.com/statedhq/stated/tiered"
)

func TestOps(t *testing.T) {
	seen := map[string]bool{}
	for o := range tiered.NumOps {
		if !tiered.AllOps.Has(o) {
			t.Errorf("AllOps lacks %s", o)
		}
		if tiered.WriteOps.Has(o) == tiered.ReadOps.Has(o) {
			t.Errorf("%s is in both or neither of WriteOps and ReadOps", o)
		}
		if seen[o.String()] || o.String() == "op?" {
			t.Errorf("op %d has name %q, twice or none", o, o)
		}
		seen[o.String()] = true
	}
	s := tiered.OpSet(tiered.OpGet, tiered.OpDelete)
	for o := range tiered.NumOps {
		if s.Has(o) != (o == tiered.OpGet || o == tiered.OpDelete) {
			t.Errorf("OpSet(get, delete).Has(%s) = %v", o, s.Has(o))
		}
	}
	if tiered.NumOps.String() != "op?" {
		t.Errorf("an op out of range is named %q", tiered.NumOps)
	}
}
