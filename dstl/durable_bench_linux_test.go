package dstl

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// BenchmarkDurableWriteTail measures this disk's latency tail for the
// ways a log could make 1 KiB durable, to tell whether the flush-latency
// target (p99.9 <= 5 ms to a local directory) is bound by the disk or by
// how localfs writes (tiered.Store's contract: a new object per segment,
// atomic):
//
//	new-object      what localfs's Put does: create a temp file, write,
//	                fsync, rename, fsync the directory
//	prepared        write into an empty file created (and its directory
//	                synced) beforehand, fdatasync (what an earlier localfs
//	                did for segment names prepared ahead)
//	new-file        create, write, fdatasync (the name is not durable:
//	                a lower bound of any new file per flush)
//	append          append to one file, fdatasync (the size changes)
//	overwrite       write in place into a file written with zeros and
//	                fsync'd beforehand, fdatasync (no metadata changes:
//	                the cheapest durable write a log file can make, and
//	                what localfs's Append does into its pack files)
//
//	go test ./dstl -run '^$' -bench DurableWriteTail -benchtime 2000x
func BenchmarkDurableWriteTail(b *testing.B) {
	data := make([]byte, 1024)
	for i := range data {
		data[i] = byte(i)
	}
	const prealloc = 64 << 20
	modes := []struct {
		name  string
		setup func(b *testing.B, dir string) *os.File
		write func(b *testing.B, dir string, f *os.File, i int) error
	}{
		{"new-object", nil, func(b *testing.B, dir string, _ *os.File, i int) error {
			tmp := filepath.Join(dir, fmt.Sprintf("tmp-%d", i))
			f, err := os.Create(tmp)
			if err != nil {
				return err
			}
			if _, err := f.Write(data); err != nil {
				return err
			}
			if err := f.Sync(); err != nil {
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			if err := os.Rename(tmp, filepath.Join(dir, fmt.Sprintf("obj-%d", i))); err != nil {
				return err
			}
			d, err := os.Open(dir)
			if err != nil {
				return err
			}
			defer d.Close()
			return d.Sync()
		}},
		{"prepared", func(b *testing.B, dir string) *os.File {
			for i := 0; i < b.N; i++ {
				f, err := os.Create(filepath.Join(dir, fmt.Sprintf("obj-%d", i)))
				if err != nil {
					b.Fatal(err)
				}
				f.Close()
			}
			d, err := os.Open(dir)
			if err != nil {
				b.Fatal(err)
			}
			if err := d.Sync(); err != nil {
				b.Fatal(err)
			}
			return d
		}, func(b *testing.B, dir string, _ *os.File, i int) error {
			return writeDatasync(filepath.Join(dir, fmt.Sprintf("obj-%d", i)), os.O_WRONLY, data)
		}},
		{"new-file", nil, func(b *testing.B, dir string, _ *os.File, i int) error {
			return writeDatasync(filepath.Join(dir, fmt.Sprintf("obj-%d", i)), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, data)
		}},
		{"append", func(b *testing.B, dir string) *os.File {
			f, err := os.OpenFile(filepath.Join(dir, "log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
			if err != nil {
				b.Fatal(err)
			}
			return f
		}, func(b *testing.B, _ string, f *os.File, _ int) error {
			if _, err := f.Write(data); err != nil {
				return err
			}
			return syscall.Fdatasync(int(f.Fd()))
		}},
		{"overwrite", func(b *testing.B, dir string) *os.File {
			f, err := os.OpenFile(filepath.Join(dir, "log"), os.O_CREATE|os.O_RDWR, 0o644)
			if err != nil {
				b.Fatal(err)
			}
			zeros := make([]byte, 1<<20)
			for off := 0; off < prealloc; off += len(zeros) {
				if _, err := f.Write(zeros); err != nil {
					b.Fatal(err)
				}
			}
			if err := f.Sync(); err != nil {
				b.Fatal(err)
			}
			return f
		}, func(b *testing.B, _ string, f *os.File, i int) error {
			if _, err := f.WriteAt(data, int64(i*len(data))%prealloc); err != nil {
				return err
			}
			return syscall.Fdatasync(int(f.Fd()))
		}},
	}
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			dir := b.TempDir()
			var f *os.File
			if m.setup != nil {
				f = m.setup(b, dir)
				defer f.Close()
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				if err := m.write(b, dir, f, i); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			reportLatencies(b, lat)
		})
	}
}

// writeDatasync opens path with flag, writes data and fdatasyncs it.
func writeDatasync(path string, flag int, data []byte) error {
	f, err := os.OpenFile(path, flag, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		return err
	}
	return syscall.Fdatasync(int(f.Fd()))
}
