package tablecheck

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// TestValidateBadObjects: a missing object wraps backend.ErrNotFound, an
// object that is no SST and one of another size than the handle's wrap
// backend.ErrCorrupt, and each error names the object. (Intact tables are
// checked in backend/lsm's TestValidateTable, which writes real ones.)
func TestValidateBadObjects(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	if err := Validate(ctx, store, "j/shared/lsm/gone.sst", 100); !errors.Is(err, backend.ErrNotFound) || !strings.Contains(err.Error(), "gone.sst") {
		t.Fatalf("missing: %v", err)
	}
	junk := []byte(strings.Repeat("not a table ", 100))
	if err := tiered.PutBytes(ctx, store, "j/shared/lsm/junk.sst", junk); err != nil {
		t.Fatal(err)
	}
	if err := Validate(ctx, store, "j/shared/lsm/junk.sst", int64(len(junk))); !errors.Is(err, backend.ErrCorrupt) || !strings.Contains(err.Error(), "junk.sst") {
		t.Fatalf("no SST: %v", err)
	}
	if err := Validate(ctx, store, "j/shared/lsm/junk.sst", int64(len(junk))+1); !errors.Is(err, backend.ErrCorrupt) {
		t.Fatalf("wrong size: %v", err)
	}
}
