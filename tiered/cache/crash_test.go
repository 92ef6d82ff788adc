package cache_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/cache"
	"github.com/statedhq/stated/tiered/memstore"
	"github.com/statedhq/stated/tiered/storetest"
)

func newCacheFS(t testing.TB, remote tiered.Store, fs vfs.FS, max int64) *cache.Store {
	t.Helper()
	c, err := cache.New(remote, cache.Options{Dir: "/cache", MaxBytes: max, FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The contract holds with the copies on another file system than the
// operating system's.
func TestAcceptanceMemFS(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t testing.TB) tiered.Store {
			return newCacheFS(t, &counting{Store: memstore.New()}, vfs.NewMem(), 1<<20)
		},
		Reopen: func(t testing.TB, old tiered.Store) tiered.Store {
			c := old.(*cache.Store)
			return newCacheFS(t, c.Remote(), c.FS(), 1<<20)
		},
		LargeSize: 3 << 20,
		ManyKeys:  200,
	})
}

// The cache never fsyncs its copies: a power loss may tear any of them
// (cut, zeroed blocks, a copy without its metadata or the reverse). After
// one, every read must still return the remote's bytes, and no torn copy
// may serve them.
func TestPowerLossNeverServesTornCopies(t *testing.T) {
	ctx := context.Background()
	remote := &counting{Store: memstore.New()} // Close leaves it open
	mem := vfs.NewCrashableMem()
	c := newCacheFS(t, remote, mem, 4<<20)
	want := map[string][]byte{}
	for i := range 40 {
		name := fmt.Sprintf("j/shared/%02d", i)
		want[name] = storetest.Data(uint64(i), 3000+i*997)
		if err := tiered.PutBytes(ctx, c, name, want[name]); err != nil {
			t.Fatal(err)
		}
	}
	for seed := range uint64(20) {
		crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rand.New(rand.NewPCG(seed, 1))})
		r := newCacheFS(t, remote, crashed, 4<<20)
		for name, b := range want {
			got, err := tiered.ReadAll(ctx, r, name, 0)
			if err != nil || !bytes.Equal(got, b) {
				t.Fatalf("seed %d: %s after a power loss: %d bytes, %v", seed, name, len(got), err)
			}
			lc, err := r.LocalCopy(ctx, name)
			if err != nil {
				t.Fatalf("seed %d: local copy of %s: %v", seed, name, err)
			}
			f, err := crashed.Open(lc.Path)
			if err != nil {
				t.Fatal(err)
			}
			onDisk := make([]byte, len(b)+1)
			n, _ := f.ReadAt(onDisk, 0)
			f.Close()
			if !bytes.Equal(onDisk[:n], b) {
				t.Fatalf("seed %d: the local copy of %s (hit %v) is not the object's bytes", seed, name, lc.Hit)
			}
		}
		r.Close()
	}
}
