package lsm

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/internal/frame"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// silentLogger drops Pebble's lines; Fatalf panics as quietLogger's does.
type silentLogger struct{}

func (silentLogger) Infof(string, ...any)         {}
func (silentLogger) Errorf(string, ...any)        {}
func (silentLogger) Fatalf(f string, args ...any) { quietLogger{}.Fatalf(f, args...) }

var fuzzBase struct {
	once    sync.Once
	objects map[string][]byte
	handle  *backend.Handle
	err     error
}

// fuzzCheckpoint builds, once per process, a small checkpoint with
// several SSTs and every state kind.
func fuzzCheckpoint(t *testing.T) (map[string][]byte, *backend.Handle) {
	fuzzBase.once.Do(func() {
		ctx := context.Background()
		store := memstore.New()
		b, err := Open(backend.Options{Task: testTask, KeyGroups: full(), States: testStates, Store: store,
			Clock: func() time.Time { return time.Unix(1_700_000_000, 0) }},
			Options{Dir: "/fuzz", FS: vfs.NewMem(), Logger: silentLogger{}, MemTableSize: 64 << 10})
		if err != nil {
			fuzzBase.err = err
			return
		}
		defer b.Close()
		for i := 0; i < 600 && err == nil; i++ {
			k := key(i%128, string(rune('a'+i%26)))
			err = errors.Join(b.Put("v", k, []byte("value")), b.ListAppend("l", k, []byte("x")),
				b.MapPut("m", k, []byte{byte(i)}, []byte("w")), b.AggregateAdd("a", k, backend.Int64(int64(i))))
			if i%200 == 199 && err == nil {
				err = b.DB().Flush()
			}
		}
		if err != nil {
			fuzzBase.err = err
			return
		}
		p, err := b.Snapshot(ctx, 9)
		if err == nil {
			fuzzBase.handle, err = p.Run(ctx)
		}
		fuzzBase.objects = map[string][]byte{}
		if err == nil {
			err = tiered.Walk(ctx, store, "", func(o tiered.ObjectInfo) error {
				data, err := tiered.ReadAll(ctx, store, o.Name, 0)
				fuzzBase.objects[o.Name] = data
				return err
			})
		}
		fuzzBase.err = err
	})
	if fuzzBase.err != nil {
		t.Fatal(fuzzBase.err)
	}
	return fuzzBase.objects, fuzzBase.handle
}

// FuzzRestoreDamagedFile flips bytes of one file of a checkpoint. With the
// handle as written, the restore must fail with a corruption error naming
// the file. With a forged handle (its CRC updated to the damaged bytes, as
// an attacker or a bug elsewhere could produce), the damage reaches Pebble:
// the restore may fail or succeed, but never panics or hangs, and a store
// that opens can be read and closed.
func FuzzRestoreDamagedFile(f *testing.F) {
	for file := uint8(0); file < 12; file++ {
		for _, off := range []uint32{0, 7, 100, 1 << 20} {
			f.Add(file, off, byte(0x01), false)
			f.Add(file, off, byte(0x80), true)
		}
	}
	f.Fuzz(func(t *testing.T, file uint8, off uint32, xor byte, forge bool) {
		objects, orig := fuzzCheckpoint(t)
		ctx := context.Background()
		h := *orig
		h.Files = append([]backend.FileRef(nil), orig.Files...)
		store := memstore.New()
		for name, data := range objects {
			must(t, tiered.PutBytes(ctx, store, name, data))
		}
		i := int(file) % len(h.Files)
		ref := &h.Files[i]
		data := append([]byte(nil), objects[ref.Path]...)
		if len(data) == 0 {
			return
		}
		if xor == 0 {
			xor = 1
		}
		data[int(off)%len(data)] ^= xor
		must(t, tiered.PutBytes(ctx, store, ref.Path, data))
		if forge {
			ref.CRC32C = frame.Checksum(data)
		}
		b, err := Open(backend.Options{Task: testTask, KeyGroups: full(), States: testStates, Store: store,
			Restore: []*backend.Handle{&h}}, Options{Dir: "/r", FS: vfs.NewMem(), Logger: silentLogger{}})
		if !forge {
			if !errors.Is(err, backend.ErrCorrupt) || !strings.Contains(err.Error(), ref.Path) {
				t.Fatalf("damaged %s: error %v, want a corruption error naming it", ref.Path, err)
			}
			return
		}
		if err != nil {
			return
		}
		_ = engine{b.db}.Scan(nil, nil, func(k, v []byte) (bool, error) { return true, nil })
		_, _ = b.ListGet("l", key(3, "d"))
		_ = b.Close()
	})
}
