package remotestore

import (
	"context"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"
)

// Prefetched tails. The first read of a restored store consults every
// level-0 table (their bounds span the key space), and for each Pebble
// reads the footer, then the index and filter blocks, one request after
// another, all near the end of the object: against an S3 server, tens of
// milliseconds per table before the first get is answered. Prefetch
// fetches those tails of several objects at once, and ReadAt serves what
// falls inside a kept tail from memory until it expires. The bytes are
// the store's: Pebble checks each block's checksum as it does for any
// read.

// maxPrefetchBytes bounds the tails a Storage keeps at once.
const maxPrefetchBytes = 16 << 20

// tail is a kept range of one object.
type tail struct {
	off   int64
	data  []byte
	until time.Time
}

// prefetched are a Storage's kept tails.
type prefetched struct {
	mu    sync.Mutex
	tails map[string]tail
	bytes int64
}

// Prefetch reads the last tailBytes of each object of sizes (name ->
// size), workers at a time, and keeps them for ttl. Objects whose tail
// would pass maxPrefetchBytes are left out (largest names last). A failed
// read fails the call; the tails read so far stay.
func (s *Storage) Prefetch(ctx context.Context, sizes map[string]int64, tailBytes int64, workers int, ttl time.Duration) error {
	names := make([]string, 0, len(sizes))
	for n := range sizes {
		names = append(names, n)
	}
	sort.Strings(names)
	type job struct {
		name string
		off  int64
		n    int64
	}
	var jobs []job
	s.pre.mu.Lock()
	s.dropExpiredLocked(time.Now())
	budget := maxPrefetchBytes - s.pre.bytes
	for _, name := range names {
		size := sizes[name]
		n := min(tailBytes, size)
		if n <= 0 || n > budget {
			continue
		}
		budget -= n
		jobs = append(jobs, job{name, size - n, n})
	}
	s.pre.mu.Unlock()
	sem := make(chan struct{}, max(workers, 1))
	errs := make(chan error, len(jobs))
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			data, err := s.readRange(ctx, j.name, j.off, j.n)
			if err != nil {
				errs <- err
				return
			}
			s.pre.mu.Lock()
			if old, ok := s.pre.tails[j.name]; ok {
				s.pre.bytes -= int64(len(old.data))
			}
			if s.pre.tails == nil {
				s.pre.tails = map[string]tail{}
			}
			s.pre.tails[j.name] = tail{off: j.off, data: data, until: time.Now().Add(ttl)}
			s.pre.bytes += int64(len(data))
			s.pre.mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// readRange reads [off, off+n) of name from the store.
func (s *Storage) readRange(ctx context.Context, name string, off, n int64) ([]byte, error) {
	rc, err := s.opts.Store.GetRange(ctx, name, off, n)
	if err != nil {
		return nil, fmt.Errorf("remotestore: prefetch %s [%d, %d): %w", name, off, off+n, err)
	}
	defer rc.Close()
	data := make([]byte, n)
	if _, err := io.ReadFull(rc, data); err != nil {
		return nil, fmt.Errorf("remotestore: prefetch %s [%d, %d): %w", name, off, off+n, err)
	}
	return data, nil
}

// fromTail copies [offset, offset+len(p)) of name into p if a kept tail
// holds all of it.
func (s *Storage) fromTail(name string, p []byte, offset int64) bool {
	s.pre.mu.Lock()
	defer s.pre.mu.Unlock()
	t, ok := s.pre.tails[name]
	if !ok {
		return false
	}
	if time.Now().After(t.until) {
		delete(s.pre.tails, name)
		s.pre.bytes -= int64(len(t.data))
		return false
	}
	if offset < t.off || offset+int64(len(p)) > t.off+int64(len(t.data)) {
		return false
	}
	copy(p, t.data[offset-t.off:])
	return true
}

// dropExpiredLocked forgets the tails past their time; s.pre.mu held.
func (s *Storage) dropExpiredLocked(now time.Time) {
	for n, t := range s.pre.tails {
		if now.After(t.until) {
			delete(s.pre.tails, n)
			s.pre.bytes -= int64(len(t.data))
		}
	}
}
