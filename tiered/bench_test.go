package tiered_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/cache"
	"github.com/statedhq/stated/tiered/localfs"
	"github.com/statedhq/stated/tiered/s3store"
	"github.com/statedhq/stated/tiered/s3store/s3test"
	"github.com/statedhq/stated/tiered/storetest"
)

// BenchmarkThroughput compares upload and download of one large object
// (64 MiB; 8 MiB with -short) through the S3 store (the server named by
// STATED_TEST_S3_ENDPOINT, else in-process gofakes3), the local directory
// store, the cache over S3 (a hit), and raw disk writes and reads.
// Every local write is fsynced, as localfs does.
func BenchmarkThroughput(b *testing.B) {
	size := 64 << 20
	if testing.Short() {
		size = 8 << 20
	}
	data := storetest.Data(1, size)
	ctx := context.Background()
	dir := b.TempDir()

	b.Run("raw-disk/write", func(b *testing.B) {
		b.SetBytes(int64(size))
		for i := range b.N {
			p := filepath.Join(dir, fmt.Sprintf("raw-%d", i))
			f, err := os.Create(p)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := f.Write(data); err != nil {
				b.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
			f.Close()
			os.Remove(p)
		}
	})
	b.Run("raw-disk/read", func(b *testing.B) {
		p := filepath.Join(dir, "raw-read")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(size))
		b.ResetTimer()
		for range b.N {
			f, err := os.Open(p)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := io.Copy(io.Discard, f); err != nil {
				b.Fatal(err)
			}
			f.Close()
		}
	})

	local, err := localfs.Open(filepath.Join(dir, "localfs"))
	if err != nil {
		b.Fatal(err)
	}
	defer local.Close()
	opts, real := s3test.Options(b)
	s3name := "s3-gofakes3"
	if real {
		s3name = "s3-server"
	}
	remote, err := s3store.Open(ctx, opts)
	if err != nil {
		b.Fatal(err)
	}
	defer remote.Close()
	cached, err := cache.New(remote, cache.Options{Dir: filepath.Join(dir, "cache"), MaxBytes: 4 * int64(size)})
	if err != nil {
		b.Fatal(err)
	}
	defer cached.Close()

	for _, st := range []struct {
		name string
		s    tiered.Store
	}{{"localfs", local}, {s3name, remote}, {"cache-over-" + s3name, cached}} {
		b.Run(st.name+"/put", func(b *testing.B) {
			b.SetBytes(int64(size))
			for i := range b.N {
				if err := st.s.Put(ctx, fmt.Sprintf("bench/put-%d", i), bytes.NewReader(data), int64(size)); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			for i := range b.N {
				st.s.Delete(ctx, fmt.Sprintf("bench/put-%d", i))
			}
		})
		b.Run(st.name+"/get", func(b *testing.B) {
			if err := st.s.Put(ctx, "bench/get", bytes.NewReader(data), int64(size)); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(size))
			b.ResetTimer()
			for range b.N {
				rc, err := st.s.Get(ctx, "bench/get")
				if err != nil {
					b.Fatal(err)
				}
				if n, err := io.Copy(io.Discard, rc); err != nil || n != int64(size) {
					b.Fatalf("read %d bytes: %v", n, err)
				}
				rc.Close()
			}
		})
	}
}
