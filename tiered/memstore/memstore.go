package memstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/statedhq/stated/tiered"
)

// Store is an in-memory tiered.Store. Objects are immutable byte slices.
type Store struct {
	mu      sync.RWMutex
	objects map[string]object
	bytes   int64
	closed  bool
	now     func() time.Time
}

type object struct {
	data    []byte
	modTime time.Time
}

var _ tiered.Store = (*Store)(nil)

// New returns an empty store.
func New() *Store { return &Store{objects: map[string]object{}, now: time.Now} }

// Bytes is the total size of the stored objects.
func (s *Store) Bytes() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.bytes
}

func (s *Store) check(name string) error {
	if err := tiered.ValidateName(name); err != nil {
		return err
	}
	if s.closed {
		return errors.New("memstore: store closed")
	}
	return nil
}

// Put implements tiered.Store.
func (s *Store) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	return s.put(ctx, name, r, size, false)
}

// PutIfAbsent implements tiered.Store.
func (s *Store) PutIfAbsent(ctx context.Context, name string, r io.Reader, size int64) error {
	return s.put(ctx, name, r, size, true)
}

func (s *Store) put(ctx context.Context, name string, r io.Reader, size int64, ifAbsent bool) error {
	if err := tiered.ValidateName(name); err != nil {
		return err
	}
	if size < 0 {
		return fmt.Errorf("memstore: put %s: negative size %d", name, size)
	}
	data, err := io.ReadAll(io.LimitReader(r, size+1))
	if err != nil {
		return fmt.Errorf("memstore: put %s: %w", name, err)
	}
	if int64(len(data)) != size {
		return fmt.Errorf("memstore: put %s: read %d bytes, want %d", name, len(data), size)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(name); err != nil {
		return err
	}
	old, exists := s.objects[name]
	if ifAbsent && exists {
		return fmt.Errorf("memstore: put %s: %w", name, tiered.ErrExists)
	}
	s.bytes += int64(len(data)) - int64(len(old.data))
	s.objects[name] = object{data: data, modTime: s.now()}
	return nil
}

func (s *Store) get(name string) (object, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(name); err != nil {
		return object{}, err
	}
	o, ok := s.objects[name]
	if !ok {
		return object{}, fmt.Errorf("memstore: %s: %w", name, tiered.ErrNotFound)
	}
	return o, nil
}

// Get implements tiered.Store.
func (s *Store) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	return s.GetRange(ctx, name, 0, -1)
}

// GetRange implements tiered.Store.
func (s *Store) GetRange(ctx context.Context, name string, offset, length int64) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	o, err := s.get(name)
	if err != nil {
		return nil, err
	}
	n := int64(len(o.data))
	if offset < 0 || offset > n || (offset == n && n > 0 && length != 0) {
		return nil, fmt.Errorf("memstore: %s: %w: offset %d of %d bytes", name, tiered.ErrInvalidRange, offset, n)
	}
	end := n
	if length >= 0 && offset+length < n {
		end = offset + length
	}
	return io.NopCloser(bytes.NewReader(o.data[offset:end])), nil
}

// Stat implements tiered.Store.
func (s *Store) Stat(ctx context.Context, name string) (tiered.ObjectInfo, error) {
	o, err := s.get(name)
	if err != nil {
		return tiered.ObjectInfo{}, err
	}
	return tiered.ObjectInfo{Name: name, Size: int64(len(o.data)), ModTime: o.modTime}, nil
}

// List implements tiered.Store.
func (s *Store) List(ctx context.Context, prefix, startAfter string, limit int) (tiered.ListPage, error) {
	if err := ctx.Err(); err != nil {
		return tiered.ListPage{}, err
	}
	if limit <= 0 {
		limit = 1000
	}
	s.mu.RLock()
	var infos []tiered.ObjectInfo
	for name, o := range s.objects {
		if strings.HasPrefix(name, prefix) && name > startAfter {
			infos = append(infos, tiered.ObjectInfo{Name: name, Size: int64(len(o.data)), ModTime: o.modTime})
		}
	}
	s.mu.RUnlock()
	sort.Slice(infos, func(i, j int) bool { return infos[i].Name < infos[j].Name })
	var page tiered.ListPage
	if len(infos) > limit {
		infos = infos[:limit]
		page.Next = infos[limit-1].Name
	}
	page.Objects = infos
	return page, nil
}

// Delete implements tiered.Store.
func (s *Store) Delete(ctx context.Context, name string) error {
	return s.DeleteBatch(ctx, []string{name})
}

// DeleteBatch implements tiered.Store.
func (s *Store) DeleteBatch(ctx context.Context, names []string) error {
	for _, n := range names {
		if err := tiered.ValidateName(n); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range names {
		s.bytes -= int64(len(s.objects[n].data))
		delete(s.objects, n)
	}
	return nil
}

// Close implements tiered.Store.
func (s *Store) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return nil
}
