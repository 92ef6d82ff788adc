package localfs_test

import (
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
