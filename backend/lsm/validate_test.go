package lsm

import (
	"context"
	"errors"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/tablecheck"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/fault"
	"github.com/statedhq/stated/tiered/memstore"
	"github.com/statedhq/stated/tiered/metered"
)

// TestValidateTable: an intact remote table written by lsm validates
// (tablecheck.Validate) with ranged reads only (no whole-object Get); a flipped byte in its first data block, a
// wrong size and a missing object are named errors of the right kind; a
// failing store is a failed read, not damage.
func TestValidateTable(t *testing.T) {
	ctx := context.Background()
	base := memstore.New()
	store := metered.New(base)
	e := newEnv(t)
	b := e.open(full(), func(o *backend.Options, lo *Options) { withRemote(base)(o, lo); o.Store = base })
	fill(t, b, full(), 2000, "v")
	h := checkpoint(t, b, 1)
	if len(h.Files) == 0 {
		t.Fatal("no tables")
	}
	for _, f := range h.Files {
		if err := tablecheck.Validate(ctx, store, f.Path, f.Size); err != nil {
			t.Fatalf("intact %s: %v", f.Path, err)
		}
	}
	c := store.Counts()
	if c.Calls[tiered.OpGet] != 0 || c.Calls[tiered.OpGetRange] < uint64(2*len(h.Files)) {
		t.Fatalf("validation read with %d gets and %d ranged reads for %d tables", c.Calls[tiered.OpGet], c.Calls[tiered.OpGetRange], len(h.Files))
	}
	f := h.Files[0]
	if err := tablecheck.Validate(ctx, store, f.Path, f.Size+1); !errors.Is(err, backend.ErrCorrupt) {
		t.Fatalf("wrong size: %v", err)
	}
	if err := tablecheck.Validate(ctx, fault.New(base, fault.Config{ErrorRate: 1, Ops: tiered.OpSet(tiered.OpGetRange)}), f.Path, f.Size); err == nil ||
		errors.Is(err, backend.ErrCorrupt) || !errors.Is(err, fault.ErrInjected) {
		t.Fatalf("a failing store: %v", err)
	}
	data, err := tiered.ReadAll(ctx, base, f.Path, 1<<30)
	must(t, err)
	data[20] ^= 1
	must(t, tiered.PutBytes(ctx, base, f.Path, data))
	if err := tablecheck.Validate(ctx, store, f.Path, f.Size); !errors.Is(err, backend.ErrCorrupt) {
		t.Fatalf("flipped byte: %v", err)
	}
	must(t, base.Delete(ctx, f.Path))
	if err := tablecheck.Validate(ctx, store, f.Path, f.Size); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
}
