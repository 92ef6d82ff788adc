package localfs_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/localfs"
	"github.com/statedhq/stated/tiered/storetest"
)

func openFS(t testing.TB, fs vfs.FS, dir string) *localfs.Store {
	t.Helper()
	s, err := localfs.OpenWith(dir, localfs.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The contract holds on another file system than the operating system's.
func TestAcceptanceMemFS(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t testing.TB) tiered.Store { return openFS(t, vfs.NewMem(), "/root") },
		Reopen: func(t testing.TB, old tiered.Store) tiered.Store {
			return openFS(t, old.(*localfs.Store).FS(), old.(*localfs.Store).Root())
		},
		LargeSize: 3 << 20,
	})
}

// What Put and Delete returned survives a power loss that drops every
// unsynced write: the object's file, its entry in a directory Put had to
// create (and that directory's entry in its parent), and the absence of
// a deleted object.
func TestPowerLossKeepsAcknowledgedWrites(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewCrashableMem()
	s := openFS(t, mem, "/data/root")
	for _, name := range []string{"j/chk-1/_metadata", "j/shared/a", "j/shared/b", "savepoints/x/_metadata"} {
		if err := tiered.PutBytes(ctx, s, name, []byte(name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteBatch(ctx, []string{"j/shared/b", "savepoints/x/_metadata"}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutIfAbsent(ctx, "j/chk-2/_metadata", strings.NewReader("2"), 1); err != nil {
		t.Fatal(err)
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	r := openFS(t, crashed, "/data/root")
	for _, name := range []string{"j/chk-1/_metadata", "j/shared/a", "j/chk-2/_metadata"} {
		if _, err := r.Stat(ctx, name); err != nil {
			t.Errorf("%s lost in the power loss: %v", name, err)
		}
	}
	for _, name := range []string{"j/shared/b", "savepoints/x/_metadata"} {
		if _, err := r.Stat(ctx, name); !errors.Is(err, tiered.ErrNotFound) {
			t.Errorf("deleted %s came back after the power loss: %v", name, err)
		}
	}
}
