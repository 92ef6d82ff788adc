package localfs_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/localfs"
	"github.com/statedhq/stated/tiered/memstore"
	"github.com/statedhq/stated/tiered/metered"
	"github.com/statedhq/stated/tiered/storetest"
)

// appending is a localfs Store whose Puts of small objects append them
// (tiered.Appender), so that the store contract's suite runs against
// packed objects.
type appending struct{ *localfs.Store }

func (a appending) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if int64(len(data)) != size {
		return fmt.Errorf("read %d bytes, want %d", len(data), size)
	}
	return a.Append(ctx, name, data)
}

func openPacked(t testing.TB, fs vfs.FS, dir string) *localfs.Store {
	t.Helper()
	s, err := localfs.OpenWith(dir, localfs.Options{FS: fs, PackSize: 64 << 10, MaxPacked: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// packFiles lists the pack files under root.
func packFiles(t testing.TB, fs vfs.FS, root string) []string {
	t.Helper()
	names, err := fs.List(filepath.Join(root, tiered.PackDir))
	if err != nil {
		return nil
	}
	var out []string
	for _, n := range names {
		if strings.HasSuffix(n, ".pack") {
			out = append(out, n)
		}
	}
	return out
}

// The store contract holds for objects Append packed: reads, ranged
// reads, listing, overwrites, deletes, reopening.
func TestAcceptancePacked(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		New: func(t testing.TB) tiered.Store { return appending{openPacked(t, vfs.NewMem(), "/root")} },
		Reopen: func(t testing.TB, old tiered.Store) tiered.Store {
			s := old.(appending).Store
			return appending{openPacked(t, s.FS(), s.Root())}
		},
		LargeSize: 3 << 20,
		ManyKeys:  600,
	})
}

// Appended objects fill pack after pack; deleting all of them removes
// every pack file (none leaks), also the ones another store on the same
// directory wrote, but never a pack a live store still appends to.
func TestPacksAreRemovedWhenDead(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	a := openPacked(t, mem, "/root")
	b := openPacked(t, mem, "/root") // another process on the same directory
	defer b.Close()
	var names []string
	for i := range 40 {
		name := fmt.Sprintf("_changelog/shared/run/%04d", i)
		names = append(names, name)
		if err := a.Append(ctx, name, bytes.Repeat([]byte{byte(i)}, 5000)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(packFiles(t, mem, "/root")); n < 3 {
		t.Fatalf("%d pack files for 200 KB in packs of 64 KiB", n)
	}
	// b sees a's objects, and deletes the first half.
	for _, name := range names {
		got, err := tiered.ReadAll(ctx, b, name, 1<<30)
		if err != nil || len(got) != 5000 {
			t.Fatalf("b reads %s: %d bytes, %v", name, len(got), err)
		}
	}
	if err := b.DeleteBatch(ctx, names[:20]); err != nil {
		t.Fatal(err)
	}
	// a's listing no longer shows them: the delete is on disk, not in b.
	var listed []string
	if err := tiered.Walk(ctx, a, "_changelog/", func(o tiered.ObjectInfo) error {
		listed = append(listed, o.Name)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(listed) != 20 || listed[0] != names[20] {
		t.Fatalf("a lists %d objects from %v, want the 20 from %s", len(listed), listed[:min(1, len(listed))], names[20])
	}
	for _, name := range names[:20] {
		if _, err := a.Stat(ctx, name); !tiered.IsNotFound(err) {
			t.Fatalf("a stats deleted %s: %v", name, err)
		}
	}
	// Deleting the rest from b removes the sealed packs, not a's active one.
	if err := b.DeleteBatch(ctx, names[20:]); err != nil {
		t.Fatal(err)
	}
	if n := len(packFiles(t, mem, "/root")); n < 1 || n > 2 {
		t.Fatalf("%d pack files left while a appends, want its active one (and the next it made ahead)", n)
	}
	if err := a.Append(ctx, "_changelog/shared/run/last", []byte("x")); err != nil {
		t.Fatalf("a appends after b deleted everything: %v", err)
	}
	if err := a.Delete(ctx, "_changelog/shared/run/last"); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(packFiles(t, mem, "/root")); n != 0 {
		t.Fatalf("%d pack files left after every object was deleted and the writer closed", n)
	}
}

// Concurrent appends share syncs and lose nothing; each reads back whole.
func TestConcurrentAppends(t *testing.T) {
	ctx := context.Background()
	s := openPacked(t, vfs.NewMem(), "/root")
	defer s.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				name := fmt.Sprintf("seg/%d/%03d", g, i)
				if err := s.Append(ctx, name, []byte(name)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for g := range 8 {
		for i := range 50 {
			name := fmt.Sprintf("seg/%d/%03d", g, i)
			got, err := tiered.ReadAll(ctx, s, name, 1<<30)
			if err != nil || string(got) != name {
				t.Fatalf("%s reads %q, %v", name, got, err)
			}
		}
	}
}

// cloneGuard keeps MemFS.Lock and Link from running during CrashClone:
// Pebble's crashable MemFS takes its clone lock for reading in Lock and
// again in the Create it calls (Link likewise), so a CrashClone waiting
// for the write lock between the two deadlocks every writer of the file
// system. The -race run hit it when the power went while a pack was
// being created in the background.
type cloneGuard struct {
	vfs.FS
	mu sync.RWMutex
}

func (g *cloneGuard) Lock(name string) (io.Closer, error) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.FS.Lock(name)
}

func (g *cloneGuard) Link(oldname, newname string) error {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.FS.Link(oldname, newname)
}

// What Append and Delete returned survives power losses at random
// moments, with unsynced writes torn at random: every acknowledged
// object reads back with its bytes, every acknowledged delete stays,
// and an append in flight left its whole object or nothing.
func TestPackPowerLoss(t *testing.T) {
	ctx := context.Background()
	for seed := range uint64(30) {
		rng := rand.New(rand.NewPCG(seed, 7))
		mem := vfs.NewCrashableMem()
		guard := &cloneGuard{FS: mem}
		s := openPacked(t, guard, "/data/root")
		acked := map[string][]byte{}
		deleted := map[string]bool{}
		inFlight := map[string][]byte{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		crashAt := 20 + rng.IntN(150)
		var crashed *vfs.MemFS
		for i := 0; i < 200; i++ {
			if i == crashAt {
				// Appends still running while the power goes.
				for g := range 3 {
					name := fmt.Sprintf("inflight/%d", g)
					data := bytes.Repeat([]byte{byte(g + 1)}, 100+rng.IntN(8000))
					mu.Lock()
					inFlight[name] = data
					mu.Unlock()
					wg.Add(1)
					go func() {
						defer wg.Done()
						s.Append(ctx, name, data)
					}()
				}
				guard.mu.Lock()
				crashed = mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(100), RNG: rand.New(rand.NewPCG(seed, 9))})
				guard.mu.Unlock()
				break
			}
			name := fmt.Sprintf("seg/%03d", i)
			data := bytes.Repeat([]byte{byte(i)}, 1+rng.IntN(12000))
			if err := s.Append(ctx, name, data); err != nil {
				t.Fatal(err)
			}
			acked[name] = data
			if i > 5 && rng.IntN(3) == 0 {
				victim := fmt.Sprintf("seg/%03d", rng.IntN(i))
				if !deleted[victim] {
					if err := s.Delete(ctx, victim); err != nil {
						t.Fatal(err)
					}
					deleted[victim] = true
				}
			}
		}
		wg.Wait()
		s.Close()
		r := openPacked(t, crashed, "/data/root")
		for name, data := range acked {
			got, err := tiered.ReadAll(ctx, r, name, 1<<30)
			switch {
			case deleted[name]:
				if !tiered.IsNotFound(err) {
					t.Fatalf("seed %d: deleted %s came back: %v", seed, name, err)
				}
			case err != nil || !bytes.Equal(got, data):
				t.Fatalf("seed %d: acknowledged %s lost: %d bytes, %v", seed, name, len(got), err)
			}
		}
		for name, data := range inFlight {
			got, err := tiered.ReadAll(ctx, r, name, 1<<30)
			if err == nil && !bytes.Equal(got, data) {
				t.Fatalf("seed %d: %s in flight at the crash reads %d bytes, not its whole %d", seed, name, len(got), len(data))
			}
			if err != nil && !tiered.IsNotFound(err) {
				t.Fatalf("seed %d: %s: %v", seed, name, err)
			}
		}
		// The recovered store appends on: into a new pack.
		if err := r.Append(ctx, "after", []byte("crash")); err != nil {
			t.Fatalf("seed %d: append after the crash: %v", seed, err)
		}
		r.Close()
	}
}

// A damaged pack never reads as other data: a flipped byte in a frame
// makes that object unreadable with an error that names the pack, and
// the objects around it stay readable.
func TestDamagedPack(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	s := openPacked(t, mem, "/root")
	for i := range 3 {
		if err := s.Append(ctx, fmt.Sprintf("o/%d", i), bytes.Repeat([]byte{'a' + byte(i)}, 1000)); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	packs := packFiles(t, mem, "/root")
	if len(packs) != 1 {
		t.Fatalf("%d packs, want 1", len(packs))
	}
	path := filepath.Join("/root", tiered.PackDir, packs[0])
	f, err := mem.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	// Object 1's frame starts after the 12-byte header and object 0's
	// frame (20 bytes of frame, 3 of name, 1000 of data); flip a byte of
	// its data.
	if _, err := f.WriteAt([]byte{'z'}, 12+1023+500); err != nil {
		t.Fatal(err)
	}
	f.Close()
	r := openPacked(t, mem, "/root")
	defer r.Close()
	if got, err := tiered.ReadAll(ctx, r, "o/0", 1<<30); err != nil || len(got) != 1000 {
		t.Fatalf("o/0 before the damage: %d bytes, %v", len(got), err)
	}
	if got, err := tiered.ReadAll(ctx, r, "o/1", 1<<30); err == nil {
		t.Fatalf("damaged o/1 reads %q", got[490:510])
	}
	if got, err := tiered.ReadAll(ctx, r, "o/2", 1<<30); err != nil || !bytes.Equal(got, bytes.Repeat([]byte{'c'}, 1000)) {
		t.Fatalf("o/2, after the damaged frame: %d bytes, %v", len(got), err)
	}
}

// Bad options are refused with the option named.
func TestPackOptions(t *testing.T) {
	for _, o := range []localfs.Options{{PackSize: 100}, {PackSize: 64 << 10, MaxPacked: 32 << 10}, {MaxPacked: -1}} {
		o.FS = vfs.NewMem()
		_, err := localfs.OpenWith("/root", o)
		if err == nil || !strings.Contains(err.Error(), "Pack") && !strings.Contains(err.Error(), "MaxPacked") {
			t.Errorf("%+v: %v", o, err)
		}
	}
}

// AsAppender reaches the Store through a meter and a prefix view, names
// through the view are the view's, and the meter counts the append as an
// object written.
func TestAsAppenderThroughWrappers(t *testing.T) {
	ctx := context.Background()
	s := openPacked(t, vfs.NewMem(), "/root")
	defer s.Close()
	m := metered.New(s)
	view := tiered.WithPrefix(m, "tenant")
	a, ok := tiered.AsAppender(view)
	if !ok {
		t.Fatal("no Appender through metered and WithPrefix")
	}
	if err := a.Append(ctx, "seg/1", []byte("data")); err != nil {
		t.Fatal(err)
	}
	if b, err := tiered.ReadAll(ctx, s, "tenant/seg/1", 1<<20); err != nil || string(b) != "data" {
		t.Fatalf("tenant/seg/1 = %q, %v", b, err)
	}
	if len(packFiles(t, s.FS(), s.Root())) == 0 {
		t.Fatal("the append wrote no pack")
	}
	if c := m.Counts(); c.Calls[tiered.OpPut] != 1 || c.BytesUp != 4 {
		t.Fatalf("meter: %d puts, %d bytes up", c.Calls[tiered.OpPut], c.BytesUp)
	}
	if _, ok := tiered.AsAppender(metered.New(memstore.New())); ok {
		t.Fatal("a meter over a store that does not append is an Appender")
	}
	if _, ok := tiered.AsAppender(tiered.Store(nil)); ok {
		t.Fatal("a nil store appends")
	}
}
