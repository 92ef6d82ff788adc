package lsm

// Remote mode vs local mode (docs/lsm-remote.md, "Figures"): bytes sent to
// the checkpoint store for a checkpoint after a 1% change, and the time
// from Open (restore) to the first served get, at two state sizes that fit
// this machine's test budget. The store is a local directory (localfs)
// behind a byte counter. Run:
//
//	go test ./backend/lsm/ -run '^$' -bench BenchmarkRemote -benchtime 1x -timeout 30m

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered/localfs"
	"github.com/statedhq/stated/tiered/metered"
)

const benchValue = 1 << 10 // bytes per value, random (incompressible)

// benchState opens an instance (remote or local mode) over a fresh
// counted localfs store and fills it with size bytes of values.
func benchState(b *testing.B, remote bool, size int) (*env, *metered.Store, *Backend, int) {
	b.Helper()
	ls, err := localfs.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	store := metered.New(ls)
	e := &env{store: store, root: b.TempDir(), fs: vfs.Default}
	n := size / benchValue
	inst := benchOpen(b, e, store, remote, nil)
	val := make([]byte, benchValue)
	for i := range n {
		if _, err := rand.Read(val); err != nil {
			b.Fatal(err)
		}
		if err := inst.Put("v", key(i%128, fmt.Sprintf("k%09d", i)), val); err != nil {
			b.Fatal(err)
		}
	}
	return e, store, inst, n
}

// benchOpen opens an instance of the whole range, restored from hs.
func benchOpen(b *testing.B, e *env, store *metered.Store, remote bool, hs []*backend.Handle) *Backend {
	b.Helper()
	e.n++
	opts := backend.Options{Task: testTask, KeyGroups: full(), States: testStates, Store: store, Restore: hs}
	lo := Options{Dir: fmt.Sprintf("%s/inst-%d", e.root, e.n), FS: e.fs}
	if remote {
		lo.Remote = &RemoteOptions{Store: store, CacheBytes: 64 << 20, SpoolDir: b.TempDir()}
	}
	inst, err := Open(opts, lo)
	if err != nil {
		b.Fatal(err)
	}
	return inst
}

func benchCheckpoint(b *testing.B, inst *Backend, id uint64) *backend.Handle {
	b.Helper()
	p, err := inst.Snapshot(context.Background(), id)
	if err != nil {
		b.Fatal(err)
	}
	h, err := p.Run(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	inst.NotifyCheckpointComplete(id)
	return h
}

// BenchmarkRemoteCheckpointAfterChange: after a first checkpoint, 1% of
// the keys change; reported are the bytes sent to the store by the second
// checkpoint (the snapshot call and its upload) and by everything between
// the two checkpoints (in remote mode the flushes and compactions write
// their SSTs to the store as they happen).
func BenchmarkRemoteCheckpointAfterChange(b *testing.B) {
	for _, size := range []int{64 << 20} {
		for _, remote := range []bool{false, true} {
			b.Run(fmt.Sprintf("%dMiB/remote=%v", size>>20, remote), func(b *testing.B) {
				for range b.N {
					b.StopTimer()
					_, store, inst, n := benchState(b, remote, size)
					benchCheckpoint(b, inst, 1)
					before := store.Counts().BytesUp
					val := make([]byte, benchValue)
					for i := 0; i < n; i += 100 {
						_, _ = rand.Read(val)
						if err := inst.Put("v", key(i%128, fmt.Sprintf("k%09d", i)), val); err != nil {
							b.Fatal(err)
						}
					}
					atChk := store.Counts().BytesUp
					b.StartTimer()
					h := benchCheckpoint(b, inst, 2)
					b.StopTimer()
					after := store.Counts().BytesUp
					b.ReportMetric(float64(after-atChk), "B-at-checkpoint")
					b.ReportMetric(float64(after-before), "B-since-last")
					b.ReportMetric(float64(h.FullSize), "B-state")
					_ = inst.Close()
				}
			})
		}
	}
}

// BenchmarkRemoteRestoreFirstGet: the time from Open with a restore of a
// checkpoint of the given size to the first get it serves.
func BenchmarkRemoteRestoreFirstGet(b *testing.B) {
	for _, size := range []int{64 << 20, 256 << 20} {
		for _, remote := range []bool{false, true} {
			b.Run(fmt.Sprintf("%dMiB/remote=%v", size>>20, remote), func(b *testing.B) {
				b.StopTimer()
				e, store, inst, _ := benchState(b, remote, size)
				h := benchCheckpoint(b, inst, 1)
				_ = inst.Close()
				var total time.Duration
				for range b.N {
					down := store.Counts().BytesDown
					b.StartTimer()
					start := time.Now()
					r := benchOpen(b, e, store, remote, []*backend.Handle{h})
					if _, ok, err := r.Get("v", key(5, fmt.Sprintf("k%09d", 5))); err != nil || !ok {
						b.Fatalf("first get: %v %v", ok, err)
					}
					took := time.Since(start)
					b.StopTimer()
					total += took
					b.ReportMetric(float64(store.Counts().BytesDown-down), "B-read")
					_ = r.Close()
				}
				b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms-to-first-get")
				b.ReportMetric(float64(h.FullSize), "B-state")
			})
		}
	}
}
