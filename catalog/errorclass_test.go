package catalog

import (
	"errors"
	"fmt"
	"testing"

	"github.com/statedhq/stated/backend"
)

// TestErrorClassesRoundTrip: an error named by its class and read back
// still answers errors.Is for that class (the most specific one), an
// unknown class is reported as unknown and wraps nothing, and no class
// is known.
func TestErrorClassesRoundTrip(t *testing.T) {
	classes := []ErrorClass{{Name: "catalog-corrupt", Err: ErrCorrupt}, {Name: "corrupt", Err: backend.ErrCorrupt}}
	err := fmt.Errorf("manifest m: %w", ErrCorrupt)
	name := ClassName(err, classes)
	if name != "catalog-corrupt" {
		t.Fatalf("class of a catalog corruption: %q", name)
	}
	back, known := ErrorOfClass(err.Error(), name, classes)
	if !known || !errors.Is(back, ErrCorrupt) || !errors.Is(back, backend.ErrCorrupt) || back.Error() != err.Error() {
		t.Fatalf("read back: %v (known %v)", back, known)
	}
	if ClassName(errors.New("plain"), classes) != "" {
		t.Fatal("a plain error has a class")
	}
	if e, known := ErrorOfClass("x", "from-a-newer-build", classes); known || e.Class != nil {
		t.Fatalf("unknown class: known %v, wraps %v", known, e.Class)
	}
	if e, known := ErrorOfClass("x", "", classes); !known || e.Class != nil {
		t.Fatalf("no class: known %v, wraps %v", known, e.Class)
	}
}
