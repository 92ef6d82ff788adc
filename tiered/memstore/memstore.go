package memstore

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/statedhq/stated/tiered"
)

// Store is an in-memory tiered.Store. Objects are immutable byte slices.
type Store struct {
	*tiered.Bucket
	d *driver
}

type driver struct {
	mu      sync.RWMutex
	objects map[string]object
	bytes   int64
	now     func() time.Time
}

type object struct {
	data    []byte
	modTime time.Time
}

var _ tiered.Store = (*Store)(nil)

// New returns an empty store.
func New() *Store {
	d := &driver{objects: map[string]object{}, now: time.Now}
	return &Store{Bucket: tiered.New(d), d: d}
}

// Bytes is the total size of the stored objects.
func (s *Store) Bytes() int64 {
	s.d.mu.RLock()
	defer s.d.mu.RUnlock()
	return s.d.bytes
}

func (d *driver) Info() tiered.DriverInfo { return tiered.DriverInfo{Name: "memstore"} }

// Classify implements tiered.Driver: the driver returns the sentinels
// themselves.
func (d *driver) Classify(error) error { return nil }

// Put implements tiered.Driver.
func (d *driver) Put(ctx context.Context, name string, r io.Reader, size int64, ifAbsent bool) error {
	// The size is the caller's word: do not allocate more than a modest
	// buffer up front on it.
	data, err := readAll(r, make([]byte, 0, min(size, 64<<20)))
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	old, exists := d.objects[name]
	if ifAbsent && exists {
		return tiered.ErrExists
	}
	d.bytes += int64(len(data)) - int64(len(old.data))
	d.objects[name] = object{data: data, modTime: d.now()}
	return nil
}

// readAll appends r to buf until io.EOF.
func readAll(r io.Reader, buf []byte) ([]byte, error) {
	b := bytes.NewBuffer(buf)
	_, err := b.ReadFrom(r)
	return b.Bytes(), err
}

// GetRange implements tiered.Driver.
func (d *driver) GetRange(ctx context.Context, name string, offset, length int64) (io.ReadCloser, int64, error) {
	d.mu.RLock()
	o, ok := d.objects[name]
	d.mu.RUnlock()
	if !ok {
		return nil, 0, tiered.ErrNotFound
	}
	n := int64(len(o.data))
	from, to := min(offset, n), n
	if length >= 0 {
		to = min(n, from+length)
	}
	return io.NopCloser(bytes.NewReader(o.data[from:to])), n, nil
}

// Stat implements tiered.Driver.
func (d *driver) Stat(ctx context.Context, name string) (tiered.ObjectInfo, error) {
	d.mu.RLock()
	o, ok := d.objects[name]
	d.mu.RUnlock()
	if !ok {
		return tiered.ObjectInfo{}, tiered.ErrNotFound
	}
	return tiered.ObjectInfo{Name: name, Size: int64(len(o.data)), ModTime: o.modTime}, nil
}

// List implements tiered.Driver: every match, which Bucket sorts and cuts.
func (d *driver) List(ctx context.Context, prefix, startAfter string, limit int) ([]tiered.ObjectInfo, bool, error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	var infos []tiered.ObjectInfo
	for name, o := range d.objects {
		if strings.HasPrefix(name, prefix) && name > startAfter {
			infos = append(infos, tiered.ObjectInfo{Name: name, Size: int64(len(o.data)), ModTime: o.modTime})
		}
	}
	return infos, false, nil
}

// Delete implements tiered.Driver.
func (d *driver) Delete(ctx context.Context, names []string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, n := range names {
		d.bytes -= int64(len(d.objects[n].data))
		delete(d.objects, n)
	}
	return nil
}

// Close implements tiered.Driver.
func (d *driver) Close() error { return nil }
