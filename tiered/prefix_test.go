package tiered_test

import (
	"context"
	"errors"
	"testing"

	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
	"github.com/statedhq/stated/tiered/storetest"
)

func TestPrefixAcceptance(t *testing.T) {
	storetest.Run(t, storetest.Harness{New: func(testing.TB) tiered.Store {
		base := memstore.New()
		// Neighbours that a correct view never shows.
		ctx := context.Background()
		tiered.PutBytes(ctx, base, "savepoints/sp", []byte("sibling name"))
		tiered.PutBytes(ctx, base, "savepoints/sp-2/x", []byte("sibling prefix"))
		tiered.PutBytes(ctx, base, "a", []byte("outside"))
		return tiered.WithPrefix(tiered.WithPrefix(base, "savepoints"), "sp/")
	}, LargeSize: 1 << 20, OpenAfterClose: true})
}

func TestPrefixNames(t *testing.T) {
	ctx := context.Background()
	base := memstore.New()
	v := tiered.WithPrefix(base, "job/chk-3")
	if err := tiered.PutBytes(ctx, v, "_metadata", []byte("m")); err != nil {
		t.Fatal(err)
	}
	if _, err := base.Stat(ctx, "job/chk-3/_metadata"); err != nil {
		t.Fatalf("view did not write under its prefix: %v", err)
	}
	info, err := v.Stat(ctx, "_metadata")
	if err != nil || info.Name != "_metadata" {
		t.Fatalf("stat through view: %+v, %v", info, err)
	}
	if tiered.WithPrefix(base, "") != tiered.Store(base) {
		t.Fatal("empty prefix must return the store itself")
	}
	for _, bad := range []string{"../x", "/abs", "a//b"} {
		bv := tiered.WithPrefix(base, bad)
		if err := tiered.PutBytes(ctx, bv, "x", nil); !errors.Is(err, tiered.ErrInvalidName) {
			t.Fatalf("put through prefix %q: %v, want ErrInvalidName", bad, err)
		}
		if _, err := bv.List(ctx, "", "", 0); !errors.Is(err, tiered.ErrInvalidName) {
			t.Fatalf("list through prefix %q: %v, want ErrInvalidName", bad, err)
		}
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := base.Stat(ctx, "job/chk-3/_metadata"); err != nil {
		t.Fatalf("closing a view closed the base store: %v", err)
	}
}
